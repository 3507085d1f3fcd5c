/* test_plan.c — the static memory planner: known optima, the verifier against
 * a byte-painting oracle, seeded random stress and bad input. */
#include "graph/plan.h"
#include "suites.h"
#include "testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Plans bufs, checks it verifies and gives `arena`, returns the offsets in off. */
static void plan_ok(const te_plan_buf *b, int n, size_t *off, size_t arena)
{
    size_t got = 0;
    ck_assert_msg(te_plan_arena(b, n, off, &got) == TE_OK, "plan: %s", te_error());
    ck_assert_msg(te_plan_verify(b, n, off, got) == TE_OK, "verify: %s", te_error());
    ck_assert_msg(got == arena, "arena %zu, expected %zu", got, arena);
}

static void assert_offsets(const size_t *off, const size_t *want, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(off[i] == want[i], "buffer %d at %zu, expected %zu", i, off[i], want[i]);
}

START_TEST(test_disjoint_share)
{
    te_plan_buf b[] = { { .size = 100, .def = 0, .last_use = 0 },
                        { .size = 300, .def = 1, .last_use = 1 },
                        { .size = 200, .def = 2, .last_use = 2 } };
    size_t off[3];
    plan_ok(b, 3, off, 300);
    assert_offsets(off, (size_t[]){ 0, 0, 0 }, 3);
    ck_assert_uint_eq(te_plan_lower_bound(b, 3), 300);
}
END_TEST

/* a -> b -> c, each read by the next kernel: a and c meet nobody in common. */
START_TEST(test_chain)
{
    te_plan_buf b[] = { { .size = 1024, .def = 0, .last_use = 1 },
                        { .size = 1024, .def = 1, .last_use = 2 },
                        { .size = 1024, .def = 2, .last_use = 3 },
                        { .size = 1024, .def = 3, .last_use = 4 } };
    size_t off[4];
    plan_ok(b, 4, off, 2048);
    assert_offsets(off, (size_t[]){ 0, 1024, 0, 1024 }, 4);
    ck_assert_uint_eq(te_plan_lower_bound(b, 4), 2048);
}
END_TEST

/* Forward activations kept for backward nest; two short-lived siblings
 * reuse one slot inside them and a small temporary lands on top. */
START_TEST(test_nested)
{
    te_plan_buf b[] = { { .size = 4096, .def = 0, .last_use = 10 },
                        { .size = 2048, .def = 1, .last_use = 9 },
                        { .size = 1024, .def = 2, .last_use = 4 },
                        { .size = 1024, .def = 5, .last_use = 8 },
                        { .size = 512, .def = 6, .last_use = 6 } };
    size_t off[5];
    plan_ok(b, 5, off, 7680);
    assert_offsets(off, (size_t[]){ 0, 4096, 6144, 6144, 7168 }, 5);
    ck_assert_uint_eq(te_plan_lower_bound(b, 5), 7680);
}
END_TEST

/* Largest first matters: in definition order with first fit, the small
 * early buffer 0 takes offset 0, the big ones stack above it and buffer 3
 * no longer fits beside buffer 2 below 8192. */
START_TEST(test_largest_first)
{
    te_plan_buf b[] = { { .size = 64, .def = 0, .last_use = 1 },
                        { .size = 4096, .def = 0, .last_use = 0 },
                        { .size = 4096, .def = 1, .last_use = 2 },
                        { .size = 4096, .def = 2, .last_use = 2 } };
    size_t off[4];
    plan_ok(b, 4, off, 8192);
    assert_offsets(off, (size_t[]){ 4096, 0, 0, 4096 }, 4);
    ck_assert_uint_eq(te_plan_lower_bound(b, 4), 8192);
}
END_TEST

START_TEST(test_equal_sizes)
{
    /* Eight 1000-byte buffers, two live at a time: two slots, the second at
     * the next 64-byte boundary. */
    te_plan_buf b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (te_plan_buf){ .size = 1000, .def = i, .last_use = i + 1 };
    size_t off[8];
    plan_ok(b, 8, off, 2024);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(off[i] == (i % 2 ? 1024u : 0u), "buffer %d at %zu", i, off[i]);
    ck_assert_uint_eq(te_plan_lower_bound(b, 8), 2000);
}
END_TEST

START_TEST(test_alignment)
{
    /* Default 64: the second 100-byte buffer starts at 128. */
    te_plan_buf d[] = { { .size = 100, .def = 0, .last_use = 5 },
                        { .size = 100, .def = 0, .last_use = 5 } };
    size_t off[3];
    plan_ok(d, 2, off, 228);
    assert_offsets(off, (size_t[]){ 0, 128 }, 2);

    /* 256-aligned goes to 256; a byte-aligned 10-byte buffer fills the hole. */
    te_plan_buf b[] = { { .size = 100, .def = 0, .last_use = 5 },
                        { .size = 100, .def = 0, .last_use = 5, .align = 256 },
                        { .size = 10, .def = 0, .last_use = 5, .align = 1 } };
    plan_ok(b, 3, off, 356);
    assert_offsets(off, (size_t[]){ 0, 256, 100 }, 3);
    ck_assert_uint_eq(te_plan_lower_bound(b, 3), 210);
}
END_TEST

START_TEST(test_zero_size_and_empty)
{
    te_plan_buf b[] = { { .size = 0, .def = 0, .last_use = 9 },
                        { .size = 128, .def = 0, .last_use = 9 },
                        { .size = 0, .def = 3, .last_use = 3 } };
    size_t off[3];
    plan_ok(b, 3, off, 128);
    assert_offsets(off, (size_t[]){ 0, 0, 0 }, 3);
    size_t arena = 7;
    ck_assert_int_eq(te_plan_arena(NULL, 0, NULL, &arena), TE_OK);
    ck_assert_uint_eq(arena, 0);
    ck_assert_int_eq(te_plan_verify(NULL, 0, NULL, 0), TE_OK);
    ck_assert_uint_eq(te_plan_lower_bound(NULL, 0), 0);
}
END_TEST

START_TEST(test_verify_overlap)
{
    te_plan_buf b[] = { { .size = 256, .def = 0, .last_use = 1 },
                        { .size = 128, .def = 0, .last_use = 0 },
                        { .size = 512, .def = 1, .last_use = 3 },
                        { .size = 256, .def = 2, .last_use = 3 } };
    /* 0 and 2 meet at step 1 (both ends count) and share bytes [128, 256). */
    ck_assert_int_eq(te_plan_verify(b, 4, (size_t[]){ 0, 256, 128, 640 }, 896), TE_ERR_STATE);
    tu_assert_error_has("buffers 0 and 2 overlap", "buffer 0 live [0, 1] at bytes [0, 256)",
                        "buffer 2 live [1, 3] at bytes [128, 640)");
    /* 1 and 2 share bytes but never a step; 0 and 1 touch without sharing. */
    ck_assert_int_eq(te_plan_verify(b, 4, (size_t[]){ 0, 256, 256, 768 }, 1024), TE_OK);
    /* 2 and 3 live together, 3 moved onto 2's last byte. */
    ck_assert_int_eq(te_plan_verify(b, 4, (size_t[]){ 0, 256, 256, 704 }, 1024), TE_ERR_STATE);
    tu_assert_error_has("buffers 2 and 3 overlap", "buffer 3 live [2, 3] at bytes [704, 960)");
}
END_TEST

START_TEST(test_verify_bounds)
{
    te_plan_buf b[] = { { .size = 256, .def = 0, .last_use = 1 },
                        { .size = 100, .def = 0, .last_use = 1, .align = 128 },
                        { .size = 64, .def = 0, .last_use = 1 } };
    ck_assert_int_eq(te_plan_verify(b, 3, (size_t[]){ 0, 384, 256 }, 484), TE_OK);
    ck_assert_int_eq(te_plan_verify(b, 3, (size_t[]){ 0, 320, 256 }, 484), TE_ERR_STATE);
    tu_assert_error_has("buffer 1 at offset 320 is not 128-byte aligned");
    ck_assert_int_eq(te_plan_verify(b, 3, (size_t[]){ 0, 384, 256 }, 483), TE_ERR_STATE);
    tu_assert_error_has("buffer 1 at bytes [384, +100) runs past the arena of 483 bytes");
    /* An offset near SIZE_MAX must not wrap around into the arena. */
    size_t far = SIZE_MAX - 63;
    ck_assert_int_eq(te_plan_verify(b, 3, (size_t[]){ 0, 384, far }, 484), TE_ERR_STATE);
    tu_assert_error_has("buffer 2 at bytes [", "runs past the arena of 484 bytes");
}
END_TEST

START_TEST(test_bad_input)
{
    size_t off[3], arena;
    te_plan_buf b[] = { { .size = 64, .def = 0, .last_use = 2 },
                        { .size = 64, .def = 1, .last_use = 1 },
                        { .size = 64, .def = 5, .last_use = 3 } };
    ck_assert_int_eq(te_plan_arena(b, 3, off, &arena), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_plan_arena: buffer 2: def 5 is after last_use 3");
    ck_assert_int_eq(te_plan_verify(b, 3, off, 0), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_plan_verify: buffer 2: def 5 is after last_use 3");

    b[2] = (te_plan_buf){ .size = 64, .def = -1, .last_use = 3 };
    ck_assert_int_eq(te_plan_arena(b, 3, off, &arena), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "buffer 2: def -1 is negative");

    b[2] = (te_plan_buf){ .size = 64, .def = 0, .last_use = 3, .align = 48 };
    ck_assert_int_eq(te_plan_arena(b, 3, off, &arena), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "buffer 2: alignment 48 is not a power of two");

    b[2] = (te_plan_buf){ .size = 64, .def = 0, .last_use = 3 };
    ck_assert_int_eq(te_plan_arena(b, -1, off, &arena), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_plan_arena: -1 buffers");
    ck_assert_int_eq(te_plan_arena(NULL, 3, off, &arena), TE_ERR_ARG);
    ck_assert_int_eq(te_plan_arena(b, 3, NULL, &arena), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_plan_arena: NULL offsets");
    ck_assert_int_eq(te_plan_arena(b, 3, off, NULL), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_plan_arena: NULL arena_bytes");
    ck_assert_int_eq(te_plan_verify(b, 3, NULL, 0), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_plan_verify: NULL offsets");

    /* Two live-together halves of the address space do not fit. */
    te_plan_buf huge[] = { { .size = SIZE_MAX / 2 + 1, .def = 0, .last_use = 1 },
                           { .size = SIZE_MAX / 2 + 1, .def = 1, .last_use = 2 } };
    ck_assert_int_eq(te_plan_arena(huge, 2, off, &arena), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_plan_arena: buffer 1 (", "arena would pass SIZE_MAX");
}
END_TEST

/* ---- random instances ------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rng_int(uint64_t *s, int lo, int hi) /* [lo, hi] */
{
    return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* A step's buffers: mostly short-lived temporaries and gradients, some
 * forward activations held until their backward, some outputs kept to the
 * end. Sizes from twelve shapes (real layers repeat theirs), 64 B .. 2 MiB;
 * alignment mostly the default. */
static int step_instance(uint64_t seed, te_plan_buf *b)
{
    uint64_t s = seed;
    int n = rng_int(&s, 50, 300), steps = n;
    size_t shapes[12];
    for (int k = 0; k < 12; k++)
        shapes[k] = ((size_t)1 << rng_int(&s, 6, 19)) + (size_t)rng_int(&s, 0, 3) * 4 * (size_t)rng_int(&s, 0, 999);
    for (int i = 0; i < n; i++) {
        int def = rng_int(&s, 0, steps - 1), kind = rng_int(&s, 0, 9), last;
        if (kind < 6)
            last = def + rng_int(&s, 0, 3);
        else if (kind < 9)
            last = def + rng_int(&s, 0, steps - def); /* up to its mirror in backward */
        else
            last = steps;
        if (last > steps)
            last = steps;
        int a = rng_int(&s, 0, 9);
        b[i] = (te_plan_buf){ .size = shapes[rng_int(&s, 0, 11)], .def = def, .last_use = last,
                              .align = a < 8 ? 0 : a == 8 ? 256 : 4 };
    }
    return n;
}

/* Harder than a real step: uniform lifetimes up to n/4 steps, every size
 * different (64 B .. 576 KiB). */
static int uniform_instance(uint64_t seed, te_plan_buf *b)
{
    uint64_t s = seed;
    int n = rng_int(&s, 50, 300);
    for (int i = 0; i < n; i++) {
        int def = rng_int(&s, 0, n - 1);
        b[i] = (te_plan_buf){ .size = ((size_t)1 << rng_int(&s, 6, 19)) + (size_t)rng_int(&s, 0, 65535),
                              .def = def, .last_use = def + rng_int(&s, 0, n / 4) };
    }
    return n;
}

/* 200 seeded instances: the plan always verifies and never beats the bound;
 * fails if the mean or the worst arena / bound ratio passes its limit. */
static void stress(int (*gen)(uint64_t, te_plan_buf *), uint64_t seed0, double mean_max, double worst_max)
{
    static te_plan_buf b[300];
    static size_t off[300];
    double sum = 0, worst = 0;
    const int runs = 200;
    for (int r = 0; r < runs; r++) {
        int n = gen(seed0 + (uint64_t)r, b);
        size_t arena, lb = te_plan_lower_bound(b, n);
        ck_assert_msg(te_plan_arena(b, n, off, &arena) == TE_OK, "seed %d: %s", r, te_error());
        ck_assert_msg(te_plan_verify(b, n, off, arena) == TE_OK, "seed %d: %s", r, te_error());
        ck_assert_msg(arena >= lb, "seed %d: arena %zu below the bound %zu", r, arena, lb);
        double ratio = (double)arena / (double)lb;
        sum += ratio;
        worst = ratio > worst ? ratio : worst;
    }
    ck_assert_msg(sum / runs <= mean_max && worst <= worst_max, "mean ratio %.4f (limit %.2f), worst %.4f (limit %.2f)",
                  sum / runs, mean_max, worst, worst_max);
}

/* Measured: mean 1.0145, worst 1.1396. */
START_TEST(test_stress_step) { stress(step_instance, 1000, 1.05, 1.25); }
END_TEST

/* Measured: mean 1.0513, worst 1.3959. */
START_TEST(test_stress_uniform) { stress(uniform_instance, 1000, 1.10, 1.60); }
END_TEST

/* Plans a random instance, then moves one buffer onto the offset of another
 * it lives with: the verifier must name the moved buffer. */
START_TEST(test_verify_catches_corruption)
{
    static te_plan_buf b[300];
    static size_t off[300];
    int caught = 0;
    for (int r = 0; r < 50; r++) {
        int n = step_instance(5000 + (uint64_t)r, b);
        for (int i = 0; i < n; i++)
            b[i].align = 0;
        size_t arena;
        ck_assert_int_eq(te_plan_arena(b, n, off, &arena), TE_OK);
        uint64_t s = (uint64_t)r;
        int i = rng_int(&s, 0, n - 1), j = -1;
        for (int k = 0; k < n && j < 0; k++)
            if (k != i && off[k] != off[i] && b[k].def <= b[i].last_use && b[i].def <= b[k].last_use)
                j = k;
        if (j < 0)
            continue;
        size_t keep = off[i];
        off[i] = off[j];
        /* Keep it inside the arena so the overlap check is what fails. */
        if (off[i] + b[i].size > arena)
            continue;
        ck_assert_msg(te_plan_verify(b, n, off, arena) == TE_ERR_STATE, "seed %d: moved %d onto %d", r, i, j);
        char name[32];
        snprintf(name, sizeof name, "buffer %d live", i);
        tu_assert_error_has("overlap", name);
        off[i] = keep;
        ck_assert_msg(te_plan_verify(b, n, off, arena) == TE_OK, "seed %d restored: %s", r, te_error());
        caught++;
    }
    ck_assert_msg(caught >= 30, "only %d of 50 instances exercised", caught);
}
END_TEST

/* Small random plans, valid or not, against an oracle that paints every
 * (step, byte) cell each buffer owns: the verifier's verdict must match, and
 * so must the lower bound against a scan of every step. */
START_TEST(test_verify_oracle)
{
    enum { STEPS = 8, ARENA = 512, MAXN = 6 };
    static unsigned char cell[STEPS][ARENA];
    int bad = 0, good = 0;
    for (int r = 0; r < 400; r++) {
        uint64_t s = 77 + (uint64_t)r;
        int n = rng_int(&s, 1, MAXN);
        te_plan_buf b[MAXN];
        size_t off[MAXN];
        for (int i = 0; i < n; i++) {
            int def = rng_int(&s, 0, STEPS - 1);
            b[i] = (te_plan_buf){ .size = (size_t)rng_int(&s, 0, 160), .def = def,
                                  .last_use = rng_int(&s, def, STEPS - 1),
                                  .align = (size_t)1 << rng_int(&s, 0, 6) };
            off[i] = (size_t)rng_int(&s, 0, 3) * (size_t)1 << rng_int(&s, 2, 7);
        }
        size_t arena = (size_t)rng_int(&s, 200, ARENA);
        bool ok = true;
        memset(cell, 0, sizeof cell);
        for (int i = 0; i < n && ok; i++) {
            size_t a = b[i].align;
            if (off[i] % a || off[i] + b[i].size > arena) {
                ok = false;
                break;
            }
            for (int t = b[i].def; t <= b[i].last_use; t++)
                for (size_t x = off[i]; x < off[i] + b[i].size; x++)
                    ok = ok && !cell[t][x]++;
        }
        te_status st = te_plan_verify(b, n, off, arena);
        ck_assert_msg(st == (ok ? TE_OK : TE_ERR_STATE), "instance %d: oracle %s, verify %d: %s", r,
                      ok ? "ok" : "bad", st, te_error());
        ok ? good++ : bad++;

        size_t scan = 0;
        for (int t = 0; t < STEPS; t++) {
            size_t live = 0;
            for (int i = 0; i < n; i++)
                live += b[i].def <= t && t <= b[i].last_use ? b[i].size : 0;
            scan = live > scan ? live : scan;
        }
        ck_assert_msg(te_plan_lower_bound(b, n) == scan, "instance %d: bound %zu, scan %zu", r,
                      te_plan_lower_bound(b, n), scan);
    }
    ck_assert_msg(good >= 40 && bad >= 40, "only %d valid and %d invalid plans drawn", good, bad);
}
END_TEST

Suite *suite_plan(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("known");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_disjoint_share);
    tcase_add_test(tc, test_chain);
    tcase_add_test(tc, test_nested);
    tcase_add_test(tc, test_largest_first);
    tcase_add_test(tc, test_equal_sizes);
    tcase_add_test(tc, test_alignment);
    tcase_add_test(tc, test_zero_size_and_empty);
    suite_add_tcase(s, tc);

    tc = tcase_create("verify");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_verify_overlap);
    tcase_add_test(tc, test_verify_bounds);
    tcase_add_test(tc, test_verify_catches_corruption);
    tcase_add_test(tc, test_verify_oracle);
    tcase_add_test(tc, test_bad_input);
    suite_add_tcase(s, tc);

    tc = tcase_create("stress");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_stress_step);
    tcase_add_test(tc, test_stress_uniform);
    suite_add_tcase(s, tc);
    return s;
}
