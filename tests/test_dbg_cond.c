/* test_dbg_cond.c — tensor statistics, the condition language (parser,
 * canonical text, errors) and its evaluation against hand-made op records. */
#include "dbg.h"
#include "names.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define assert_i64(got, want)                                                                     \
    ck_assert_msg((int64_t)(got) == (int64_t)(want), "%s = %lld, expected %lld", #got,           \
                  (long long)(got), (long long)(want))
#define assert_near(got, want, tol)                                                               \
    ck_assert_msg(fabs((double)(got) - (double)(want)) <= (tol), "%s = %.17g, expected %.17g", \
                  #got, (double)(got), (double)(want))

/* A named 1-D f32 tape tensor. */
static te_tensor *mk(const char *name, int64_t n, const float *v)
{
    te_tensor *t = te_tensor_from(TE_F32, te_shape(n), v);
    ck_assert_msg(t != NULL, "te_tensor_from: %s", te_error());
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

/* A 1-D tensor of dtype dt holding v rounded to it. */
static te_tensor *mk_dtype(te_dtype dt, int64_t n, const float *v)
{
    te_tensor *t = te_tensor_new(dt, te_shape(n));
    ck_assert_msg(t != NULL, "te_tensor_new: %s", te_error());
    for (int64_t i = 0; i < n; i++)
        te_set(t, i, v[i]);
    return t;
}

/* An f32 tensor over caller memory, for sizes the tests fill themselves. */
static te_tensor view(float *data, int64_t n)
{
    return (te_tensor){ .dtype = TE_F32, .ndim = 1, .shape = { n }, .numel = n,
                        .nbytes = (size_t)n * sizeof(float), .data = data };
}

/* ---- statistics ----------------------------------------------------------------- */

START_TEST(test_stats_basic)
{
    te_tensor *t = te_tensor_from(TE_F32, te_shape(2, 3), (float[]){ 1, -2, 3, 0, 4, -6 });
    te_stats s;
    te_stats_compute(t, &s);
    assert_i64(s.n, 6);
    assert_i64(s.nan, 0);
    assert_i64(s.inf, 0);
    assert_i64(s.zero, 1);
    assert_i64(s.fp16_overflow, 0);
    assert_i64(s.first_bad, -1);
    assert_near(s.min, -6, 0);
    assert_near(s.max, 4, 0);
    assert_near(s.mean, 0, 1e-15);
    assert_near(s.std, sqrt(11.0), 1e-12); /* mean 0: std = sqrt(66 / 6) */
    assert_near(s.abs_max, 6, 0);
    assert_near(s.abs_mean, 16.0 / 6, 1e-15);
    assert_near(s.l2norm, sqrt(66.0), 1e-12);
}
END_TEST

START_TEST(test_stats_nonfinite_excluded)
{
    te_tensor *t = mk("x", 7, (float[]){ 1, NAN, 3, INFINITY, -INFINITY, NAN, 5 });
    te_stats s;
    te_stats_compute(t, &s);
    assert_i64(s.n, 7);
    assert_i64(s.nan, 2);
    assert_i64(s.inf, 2);
    assert_i64(s.first_bad, 1);
    assert_i64(s.zero, 0);
    /* the finite elements are 1, 3, 5 */
    assert_near(s.min, 1, 0);
    assert_near(s.max, 5, 0);
    assert_near(s.mean, 3, 1e-15);
    assert_near(s.std, sqrt(8.0 / 3), 1e-12);
    assert_near(s.abs_max, 5, 0);
    assert_near(s.abs_mean, 3, 1e-15);
    assert_near(s.l2norm, sqrt(35.0), 1e-12);

    te_tensor *first_inf = mk("y", 4, (float[]){ 2, 2, -INFINITY, NAN });
    te_stats_compute(first_inf, &s);
    assert_i64(s.first_bad, 2);
    assert_i64(s.nan, 1);
    assert_i64(s.inf, 1);
    assert_near(s.std, 0, 0);
}
END_TEST

START_TEST(test_stats_all_nonfinite)
{
    te_tensor *t = mk("x", 3, (float[]){ NAN, INFINITY, NAN });
    te_stats s;
    te_stats_compute(t, &s);
    assert_i64(s.nan, 2);
    assert_i64(s.inf, 1);
    assert_i64(s.first_bad, 0);
    ck_assert_msg(s.min == 0 && s.max == 0 && s.mean == 0 && s.std == 0 && s.abs_max == 0 &&
                      s.abs_mean == 0 && s.l2norm == 0,
                  "no finite element: min %g max %g mean %g std %g abs_max %g abs_mean %g l2 %g",
                  s.min, s.max, s.mean, s.std, s.abs_max, s.abs_mean, s.l2norm);
}
END_TEST

START_TEST(test_stats_empty_and_single)
{
    te_tensor *e = te_tensor_new(TE_F32, te_shape(3, 0));
    ck_assert_msg(e != NULL, "%s", te_error());
    te_stats s;
    memset(&s, 0x55, sizeof s);
    te_stats_compute(e, &s);
    assert_i64(s.n, 0);
    assert_i64(s.nan + s.inf + s.zero + s.fp16_overflow, 0);
    assert_i64(s.first_bad, -1);
    ck_assert_msg(s.min == 0 && s.max == 0 && s.mean == 0 && s.std == 0 && s.l2norm == 0,
                  "empty: min %g max %g mean %g std %g l2 %g", s.min, s.max, s.mean, s.std, s.l2norm);
    te_stats_quick(e, &s);
    assert_i64(s.n, 0);
    assert_i64(s.first_bad, -1);

    te_tensor *one = mk("one", 1, (float[]){ -7 });
    te_stats_compute(one, &s);
    assert_i64(s.n, 1);
    assert_near(s.min, -7, 0);
    assert_near(s.max, -7, 0);
    assert_near(s.mean, -7, 0);
    assert_near(s.std, 0, 0);
    assert_near(s.abs_mean, 7, 0);
    assert_near(s.l2norm, 7, 0);
}
END_TEST

START_TEST(test_stats_zeros)
{
    te_tensor *z = te_tensor_zeros(TE_F32, te_shape(4, 4));
    te_set(z, 5, -0.0f); /* negative zero is zero too */
    te_stats s;
    te_stats_compute(z, &s);
    assert_i64(s.n, 16);
    assert_i64(s.zero, 16);
    assert_near(s.l2norm, 0, 0);
    assert_near(s.abs_max, 0, 0);

    te_tensor *some = mk("x", 5, (float[]){ 0, 1, 0, NAN, 2 });
    te_stats_compute(some, &s);
    assert_i64(s.zero, 2); /* NaN is not zero */
    assert_near(s.mean, 0.75, 1e-15);
}
END_TEST

START_TEST(test_stats_fp16_overflow)
{
    te_stats s;
    te_tensor *f32 = mk("x", 6, (float[]){ 70000, -65505, 65504, -65504, INFINITY, 1e30f });
    te_stats_compute(f32, &s);
    assert_i64(s.fp16_overflow, 3); /* 70000, -65505, 1e30; 65504 fits and inf is not finite */
    assert_i64(s.inf, 1);

    /* f16 cannot hold 70000: it is stored as inf, which is no overflow */
    te_tensor *h = mk_dtype(TE_F16, 3, (float[]){ 70000, 60000, -1 });
    ck_assert_msg(isinf(te_get(h, 0)), "70000 in f16 reads %g", te_get(h, 0));
    te_stats_compute(h, &s);
    assert_i64(s.inf, 1);
    assert_i64(s.first_bad, 0);
    assert_i64(s.fp16_overflow, 0);
    assert_near(s.max, 60000, 0);
    assert_near(s.min, -1, 0);
    assert_near(s.mean, 29999.5, 1e-9);

    /* bf16 keeps 70000 (rounded) finite: that one overflows f16 */
    te_tensor *b = mk_dtype(TE_BF16, 3, (float[]){ 70000, 60000, -1 });
    te_stats_compute(b, &s);
    assert_i64(s.inf, 0);
    assert_i64(s.fp16_overflow, 1);
    assert_near(s.max, te_bf16_to_f32(te_f32_to_bf16(70000)), 0);
    assert_i64(s.first_bad, -1);
}
END_TEST

START_TEST(test_stats_i32)
{
    te_tensor *t = te_tensor_from(TE_I32, te_shape(4), (int32_t[]){ -3, 0, 5, 0 });
    te_stats s;
    te_stats_compute(t, &s);
    assert_i64(s.zero, 2);
    assert_near(s.min, -3, 0);
    assert_near(s.max, 5, 0);
    assert_near(s.mean, 0.5, 1e-15);
    assert_near(s.l2norm, sqrt(34.0), 1e-12);
    assert_near(s.std, sqrt(34.0 / 4 - 0.25), 1e-12);
}
END_TEST

START_TEST(test_stats_quick_fields)
{
    te_tensor *t = mk("x", 5, (float[]){ 1, NAN, -3, INFINITY, 0 });
    te_stats s;
    te_stats_quick(t, &s);
    assert_i64(s.n, 5);
    assert_i64(s.nan, 1);
    assert_i64(s.inf, 1);
    assert_i64(s.first_bad, 1);
    assert_near(s.abs_max, 3, 0);
    assert_near(s.l2norm, sqrt(10.0), 1e-12);
    /* the rest stay 0 */
    assert_i64(s.zero + s.fp16_overflow, 0);
    ck_assert_msg(s.min == 0 && s.max == 0 && s.mean == 0 && s.std == 0 && s.abs_mean == 0,
                  "quick set min %g max %g mean %g std %g abs_mean %g", s.min, s.max, s.mean, s.std,
                  s.abs_mean);
}
END_TEST

/* 1.2M elements: 19 chunks over 2 threads. The first bad element sits in a
 * middle chunk; later chunks hold more, the last thread's included. */
START_TEST(test_stats_first_bad_across_chunks)
{
    const int64_t n = 1200000;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = 1.0f;
    x[700001] = INFINITY;
    x[1100000] = NAN;
    x[n - 1] = NAN;
    te_tensor t = view(x, n);
    te_stats s;
    te_stats_compute(&t, &s);
    assert_i64(s.first_bad, 700001);
    assert_i64(s.nan, 2);
    assert_i64(s.inf, 1);
    assert_near(s.mean, 1, 0);
    assert_near(s.std, 0, 0);
    assert_near(s.l2norm, sqrt((double)(n - 3)), 1e-9);
    te_stats_quick(&t, &s);
    assert_i64(s.first_bad, 700001);
    assert_i64(s.nan, 2);
    assert_i64(s.inf, 1);

    x[700001] = 1.0f;
    x[3] = -INFINITY; /* now in the first chunk */
    te_stats_quick(&t, &s);
    assert_i64(s.first_bad, 3);
    free(x);
}
END_TEST

/* The same tensor gives the same bits on 1, 2 and 3 threads, and matches a
 * plain sequential sum. */
START_TEST(test_stats_thread_invariant)
{
    const int64_t n = 1100003;
    float *x = malloc((size_t)n * sizeof *x);
    tu_fill_uniform(x, n, 12345, 2.0f, 4.0f);
    double sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        sum += x[i];
        sq += (double)x[i] * x[i];
        mn = fmin(mn, x[i]);
        mx = fmax(mx, x[i]);
    }
    te_tensor t = view(x, n);
    te_stats s2, s1, s3;
    te_stats_compute(&t, &s2);
    te_init(&(te_config){ .seed = 1, .threads = 1 });
    te_stats_compute(&t, &s1);
    te_init(&(te_config){ .seed = 1, .threads = 3 });
    te_stats_compute(&t, &s3);
    ck_assert_msg(memcmp(&s1, &s2, sizeof s1) == 0, "1 vs 2 threads: mean %.17g / %.17g std %.17g / %.17g",
                  s1.mean, s2.mean, s1.std, s2.std);
    ck_assert_msg(memcmp(&s3, &s2, sizeof s3) == 0, "3 vs 2 threads: mean %.17g / %.17g std %.17g / %.17g",
                  s3.mean, s2.mean, s3.std, s2.std);
    /* f32 block sums (stats.c): the mean is good to a few parts in 1e6 of
     * the mean distance from the shift (here under 1), the rest far better */
    double mean = sum / (double)n;
    assert_near(s2.mean, mean, 1e-8);
    assert_near(s2.std, sqrt(sq / (double)n - mean * mean), 1e-7);
    assert_near(s2.l2norm, sqrt(sq), 1e-7 * sqrt(sq));
    assert_near(s2.min, mn, 0);
    assert_near(s2.max, mx, 0);
    free(x);
}
END_TEST

/* 5000 elements, so whole blocks of the vector kernel and a tail: a NaN
 * and an Inf in two blocks (done again exactly), f16 overflows in a block
 * and in the tail, and zeros, against sums in double over the finite values. */
START_TEST(test_stats_blocks_against_reference)
{
    enum { N = 5000 };
    static float x[N];
    tu_fill_uniform(x, N, 777, -1.5f, 2.5f);
    for (int i = 0; i < N; i += 37)
        x[i] = 0.0f;
    x[300] = NAN;
    x[1800] = INFINITY;
    x[2600] = 70000.0f;
    x[2601] = -80000.0f;
    x[4990] = 1e6f;
    int64_t fin = 0, zero = 0, ovf = 0;
    double sum = 0, sq = 0, asum = 0, mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < N; i++) {
        if (!isfinite(x[i]))
            continue;
        fin++;
        zero += x[i] == 0.0f;
        ovf += fabsf(x[i]) > 65504.0f;
        sum += x[i];
        sq += (double)x[i] * x[i];
        asum += fabs(x[i]);
        mn = fmin(mn, x[i]);
        mx = fmax(mx, x[i]);
    }
    double mean = sum / (double)fin, var = 0;
    for (int i = 0; i < N; i++)
        if (isfinite(x[i]))
            var += (x[i] - mean) * (x[i] - mean);
    te_tensor t = view(x, N);
    te_stats s;
    te_stats_compute(&t, &s);
    assert_i64(s.nan, 1);
    assert_i64(s.inf, 1);
    assert_i64(s.first_bad, 300);
    assert_i64(s.zero, zero);
    assert_i64(s.fp16_overflow, 3);
    assert_i64(ovf, 3);
    assert_near(s.min, mn, 0);
    assert_near(s.max, mx, 0);
    assert_near(s.abs_max, 1e6, 0);
    assert_near(s.mean, mean, 1e-6 * fabs(mean));
    assert_near(s.std, sqrt(var / (double)fin), 1e-6 * sqrt(var / (double)fin));
    assert_near(s.l2norm, sqrt(sq), 1e-6 * sqrt(sq));
    assert_near(s.abs_mean, asum / (double)fin, 1e-6 * asum / (double)fin);
}
END_TEST

/* A mean far from zero must not swallow a small spread. */
START_TEST(test_stats_std_large_mean)
{
    const int64_t n = 200000; /* several chunks */
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = i % 2 ? 1e6f + 0.5f : 1e6f - 0.5f;
    te_tensor t = view(x, n);
    te_stats s;
    te_stats_compute(&t, &s);
    assert_near(s.mean, 1e6, 1e-9);
    assert_near(s.std, 0.5, 1e-9);
    free(x);
}
END_TEST

START_TEST(test_index_str)
{
    char buf[64];
    te_tensor *m = te_tensor_new(TE_F32, te_shape(4, 16));
    ck_assert_str_eq(te_index_str(m, 53, buf, sizeof buf), "[3,5]");
    ck_assert_str_eq(te_index_str(m, 0, buf, sizeof buf), "[0,0]");
    te_tensor *c = te_tensor_new(TE_F32, te_shape(2, 3, 4));
    ck_assert_str_eq(te_index_str(c, 23, buf, sizeof buf), "[1,2,3]");
    ck_assert_str_eq(te_index_str(c, 13, buf, sizeof buf), "[1,0,1]");
    te_tensor *v = te_tensor_new(TE_F32, te_shape(10));
    ck_assert_str_eq(te_index_str(v, 7, buf, sizeof buf), "[7]");
    te_tensor *sc = te_tensor_new(TE_F32, 0, (int64_t[]){ 1 });
    ck_assert_str_eq(te_index_str(sc, 0, buf, sizeof buf), "[]");
}
END_TEST

START_TEST(test_edit_distance)
{
    static const struct {
        const char *a, *b;
        int d;
    } cases[] = {
        { "abs_mx", "abs_max", 1 }, { "kitten", "sitting", 3 }, { "", "abc", 3 },
        { "abc", "", 3 },           { "same", "same", 0 },      { "flaw", "lawn", 2 },
        { "backwrd", "backward", 1 }, { "nto", "not", 2 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int d = dump_edit_distance(cases[i].a, cases[i].b);
        ck_assert_msg(d == cases[i].d, "distance(%s, %s) = %d, expected %d", cases[i].a, cases[i].b, d,
                      cases[i].d);
    }
}
END_TEST

/* ---- parsing -------------------------------------------------------------------- */

/* Every form of the grammar, with its canonical text; the canonical text
 * parses back to itself. */
START_TEST(test_parse_forms)
{
    static const struct {
        const char *in, *canon;
    } cases[] = {
        { "has_nan", "outputs.has_nan" },
        { "abs_max > 1e4", "outputs.abs_max > 10000" },
        { "inputs.has_inf or outputs.max > 100", "inputs.has_inf or outputs.max > 100" },
        { "grads.l2norm > 10 and phase == backward", "grads.l2norm > 10 and phase == backward" },
        { "not (out0.zero_frac < 0.9)", "not out0.zero_frac < 0.9" },
        { "in3.mean >= -0.5", "in3.mean >= -0.5" },
        { "out4.std <= 2", "out4.std <= 2" },
        { "params.min == 0", "params.min == 0" },
        { "in0.abs_mean != 1", "in0.abs_mean != 1" },
        { "fp16_overflow", "outputs.fp16_overflow" },
        { "outputs.fp16_overflow > 3", "outputs.fp16_overflow > 3" },
        { "in4.has_nan", "in4.has_nan" },
        { "rel_change > 0.1", "outputs.rel_change > 0.1" },
        { "max < inf", "outputs.max < inf" },
        { "min > -inf", "outputs.min > -inf" },
        { "max > 1e6", "outputs.max > 1e+06" },
        { "max > 1.2345678", "outputs.max > 1.2345678" },
        { "max > +5", "outputs.max > 5" },
        { "max > .5", "outputs.max > 0.5" },
        { "max > -1E-3", "outputs.max > -0.001" },
        { "phase != update", "phase != update" },
        { "phase==forward", "phase == forward" },
        { "  \tabs_max>1e-3  ", "outputs.abs_max > 0.001" },
        { "in1 . max>=2", "in1.max >= 2" },
        { "has_nan or has_inf and phase == forward",
          "outputs.has_nan or outputs.has_inf and phase == forward" },
        { "(has_nan or has_inf) and phase == forward",
          "(outputs.has_nan or outputs.has_inf) and phase == forward" },
        { "not not has_nan", "not not outputs.has_nan" },
        { "not (has_nan and grads.has_inf)", "not (outputs.has_nan and grads.has_inf)" },
        { "((has_nan))", "outputs.has_nan" },
        { "not has_nan or (phase == update)", "not outputs.has_nan or phase == update" },
        { "abs_max > 2 and (in1.max > 3 or not out2.min < -1)",
          "outputs.abs_max > 2 and (in1.max > 3 or not out2.min < -1)" },
        /* the scaler's scale takes no scope; rounding counts read the outputs */
        { "scale<-1", "scale < -1" },
        { "scale >= 65536 and underflow > 0.01", "scale >= 65536 and outputs.underflow > 0.01" },
        { "out1.overflow>0", "out1.overflow > 0" },
        /* op-name and op-type tests */
        { "not op=*/mask", "not op=*/mask" },
        { "abs_max > 50 and op=h*/attn/*", "outputs.abs_max > 50 and op=h*/attn/*" },
        { "op == h0/attn/softmax", "op=h0/attn/softmax" },
        { "op!=grad/*", "op!=grad/*" },
        { "(op=*/mask)", "op=*/mask" },
        { "(op=h[0-3]/attn/sc*)and has_inf", "op=h[0-3]/attn/sc* and outputs.has_inf" },
        { "op=\"a b=c/*\" or type=Softmax", "op=\"a b=c/*\" or type=Softmax" },
        { "op='say \"hi\"'", "op='say \"hi\"'" },
        { "op= =x", "op=\"=x\"" },
        { "op != =x", "op!=\"=x\"" },
        { "type != MatMul and not (op=*/mask or op=*/softmax)",
          "type!=MatMul and not (op=*/mask or op=*/softmax)" },
    };
    char err[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dbg_cond *c = dbg_cond_parse(cases[i].in, err, sizeof err);
        ck_assert_msg(c != NULL, "\"%s\": %s", cases[i].in, err);
        ck_assert_msg(err[0] == '\0', "\"%s\" parsed but left error \"%s\"", cases[i].in, err);
        ck_assert_msg(strcmp(dbg_cond_text(c), cases[i].canon) == 0, "\"%s\" -> \"%s\", expected \"%s\"",
                      cases[i].in, dbg_cond_text(c), cases[i].canon);
        dbg_cond *again = dbg_cond_parse(dbg_cond_text(c), err, sizeof err);
        ck_assert_msg(again && strcmp(dbg_cond_text(again), cases[i].canon) == 0,
                      "\"%s\" does not parse back to itself: %s", cases[i].canon,
                      again ? dbg_cond_text(again) : err);
        dbg_cond_free(again);
        dbg_cond_free(c);
    }
}
END_TEST

START_TEST(test_parse_uses_rel_change)
{
    char err[128];
    dbg_cond *a = dbg_cond_parse("has_nan or (phase == backward and grads.rel_change > 0.1)", err,
                                 sizeof err);
    dbg_cond *b = dbg_cond_parse("has_nan or abs_max > 3", err, sizeof err);
    ck_assert_msg(a && b, "%s", err);
    ck_assert_msg(dbg_cond_uses_rel_change(a), "rel_change not seen");
    ck_assert_msg(!dbg_cond_uses_rel_change(b), "rel_change seen where there is none");
    dbg_cond_free(a);
    dbg_cond_free(b);
}
END_TEST

/* What a condition asks: its predicates, as the TUI reads them. */
START_TEST(test_preds)
{
    char err[128];
    dbg_cond *c = dbg_cond_parse("inputs.has_inf or (phase == backward and not out1.abs_max >= -2.5e3) "
                                 "or grads.l2norm > 10 and in3.zero_frac != 0.5 or max > 1e4",
                                 err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    dbg_pred p[8];
    ck_assert_int_eq(dbg_cond_preds(c, p, 8), 5); /* the phase test is no predicate */
    ck_assert_int_eq(p[0].scope, DBG_SCOPE_INPUTS);
    ck_assert_int_eq(p[0].slot, -1);
    ck_assert_int_eq(p[0].func, DBG_FN_HAS_INF);
    ck_assert_int_eq(p[0].cmp, DBG_CMP_NONE);
    ck_assert(!p[0].negated);
    ck_assert_int_eq(p[1].scope, DBG_SCOPE_OUTPUTS);
    ck_assert_int_eq(p[1].slot, 1);
    ck_assert_int_eq(p[1].func, DBG_FN_ABS_MAX);
    ck_assert_int_eq(p[1].cmp, DBG_CMP_GE);
    assert_near(p[1].number, -2500, 0);
    ck_assert_msg(p[1].negated, "under 'not' but not negated");
    ck_assert_int_eq(p[2].scope, DBG_SCOPE_GRADS);
    ck_assert_int_eq(p[2].func, DBG_FN_L2NORM);
    ck_assert_int_eq(p[2].cmp, DBG_CMP_GT);
    assert_near(p[2].number, 10, 0);
    ck_assert_int_eq(p[3].scope, DBG_SCOPE_INPUTS);
    ck_assert_int_eq(p[3].slot, 3);
    ck_assert_int_eq(p[3].func, DBG_FN_ZERO_FRAC);
    ck_assert_int_eq(p[3].cmp, DBG_CMP_NE);
    assert_near(p[3].number, 0.5, 0);
    /* no scope: outputs, the default */
    ck_assert_int_eq(p[4].scope, DBG_SCOPE_OUTPUTS);
    ck_assert_int_eq(p[4].slot, -1);
    ck_assert_int_eq(p[4].func, DBG_FN_MAX);
    assert_near(p[4].number, 1e4, 0);
    ck_assert(!p[4].negated);
    /* the words of the grammar back */
    ck_assert_str_eq(dbg_scope_name(p[1].scope, p[1].slot), "out1");
    ck_assert_str_eq(dbg_scope_name(p[2].scope, p[2].slot), "grads");
    ck_assert_str_eq(dbg_func_name(p[3].func), "zero_frac");
    ck_assert_str_eq(dbg_cmp_name(p[1].cmp), ">=");
    /* room for fewer: the count stays, only max are written */
    dbg_pred one[1] = { { .number = 42 } };
    ck_assert_int_eq(dbg_cond_preds(c, one, 1), 5);
    ck_assert_int_eq(one[0].func, DBG_FN_HAS_INF);
    ck_assert_int_eq(dbg_cond_preds(c, NULL, 0), 5);
    /* not not: wanted true again */
    dbg_cond *d = dbg_cond_parse("not not abs_max > 7", err, sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    ck_assert_int_eq(dbg_cond_preds(d, p, 8), 1);
    ck_assert(!p[0].negated);
    dbg_cond_free(d);
    /* only phases: no predicate */
    d = dbg_cond_parse("phase == update", err, sizeof err);
    ck_assert_int_eq(dbg_cond_preds(d, p, 8), 0);
    dbg_cond_free(d);
    dbg_cond_free(c);
}
END_TEST

/* A copy outlives its original and evaluates the same. */
START_TEST(test_cond_copy)
{
    char err[128];
    dbg_cond *c = dbg_cond_parse("out0.abs_max > 2 and not has_nan or grads.rel_change > 0.1", err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    dbg_cond *d = dbg_cond_copy(c);
    ck_assert(d != NULL && d != c);
    char text[256];
    snprintf(text, sizeof text, "%s", dbg_cond_text(c));
    ck_assert(dbg_cond_text(d) != dbg_cond_text(c));
    dbg_cond_free(c);
    ck_assert_str_eq(dbg_cond_text(d), text);
    ck_assert(dbg_cond_uses_rel_change(d));
    const float big[] = { 1, -3 }, small[] = { 1, 1 };
    te_tensor *x = mk("x", 2, small), *y = mk("y:out0", 2, big), *z = mk("z:out0", 2, small);
    te_tensor *ins[] = { x }, *outs_big[] = { y }, *outs_small[] = { z };
    te_op_record r = { .name = "op", .type = "T", .inputs = ins, .n_inputs = 1, .outputs = outs_big,
                       .n_outputs = 1 };
    dbg_eval_ctx ctx = { .rec = &r };
    dbg_hit hit;
    ck_assert(dbg_cond_eval(d, &ctx, &hit));
    ck_assert(hit.tensor == y);
    r.outputs = outs_small;
    ck_assert(!dbg_cond_eval(d, &ctx, &hit));
    dbg_pred p[4];
    ck_assert_int_eq(dbg_cond_preds(d, p, 4), 3);
    ck_assert(p[1].negated && p[1].func == DBG_FN_HAS_NAN);
    dbg_cond_free(d);
}
END_TEST

/* Parses text that must fail; returns the message. */
static const char *parse_error(const char *text)
{
    static char err[512];
    dbg_cond *c = dbg_cond_parse(text, err, sizeof err);
    ck_assert_msg(c == NULL, "\"%s\" parsed as \"%s\"", text, c ? dbg_cond_text(c) : "");
    return err;
}

#define assert_error_is(text, want)                                                               \
    do {                                                                                          \
        const char *e_ = parse_error(text);                                                       \
        ck_assert_msg(strcmp(e_, want) == 0, "\"%s\": error \"%s\", expected \"%s\"", text, e_, \
                      want);                                                                      \
    } while (0)
#define assert_error_has(text, want)                                                              \
    do {                                                                                          \
        const char *e_ = parse_error(text);                                                       \
        ck_assert_msg(strstr(e_, want) != NULL, "\"%s\": error \"%s\" lacks \"%s\"", text, e_,  \
                      want);                                                                      \
    } while (0)

START_TEST(test_parse_error_unknown_function)
{
    assert_error_is("outputs.abs_mx > 1", "column 9: unknown function 'abs_mx' (did you mean abs_max?)");
    assert_error_is("abs_mx > 1", "column 1: unknown function 'abs_mx' (did you mean abs_max?)");
    assert_error_is("has_nan or l2nrm > 3", "column 12: unknown function 'l2nrm' (did you mean l2norm?)");
    assert_error_is("phse == forward", "column 1: unknown function 'phse' (did you mean phase?)");
    assert_error_has("bogus > 1", "column 1: unknown function 'bogus' (functions: has_nan, has_inf, max,");
    assert_error_has("in0.gradient > 1", "column 5: unknown function 'gradient' (functions: ");
    assert_error_is("inputs.", "column 8: expected a function after 'inputs.', got end of condition");
}
END_TEST

START_TEST(test_parse_error_scope)
{
    assert_error_is("output.has_nan", "column 1: unknown scope 'output' (did you mean outputs?)");
    assert_error_is("has_inf and gradz.max > 1", "column 13: unknown scope 'gradz' (did you mean grads?)");
    assert_error_is("in7.max > 1", "column 1: unknown scope 'in7' (slots go from in0/out0 to in4/out4)");
    assert_error_is("weights.max > 1",
                    "column 1: unknown scope 'weights' (scopes: inputs, outputs, params, grads, "
                    "in0..in4, out0..out4)");
    assert_error_is("outputs > 5", "column 9: expected '.' and a function after scope 'outputs', got '>'");
}
END_TEST

START_TEST(test_parse_error_number)
{
    assert_error_is("max > foo", "column 7: expected a number after '>', got 'foo'");
    assert_error_is("abs_max >=", "column 11: expected a number after '>=', got end of condition");
    assert_error_is("max > 1e3x", "column 7: expected a number after '>', got '1e3x'");
    assert_error_is("max < 1.2.3", "column 7: expected a number after '<', got '1.2.3'");
    assert_error_is("min != (3)", "column 8: expected a number after '!=', got '('");
}
END_TEST

START_TEST(test_parse_error_needs_comparison)
{
    assert_error_is("abs_max", "column 1: abs_max needs a comparison, e.g. abs_max > 100");
    assert_error_is("has_nan and grads.l2norm",
                    "column 19: l2norm needs a comparison, e.g. l2norm > 100");
    assert_error_is("rel_change or has_nan",
                    "column 1: rel_change needs a comparison, e.g. rel_change > 100");
    assert_error_is("(zero_frac)", "column 2: zero_frac needs a comparison, e.g. zero_frac > 100");
    assert_error_is("max = 5", "column 5: unknown operator '=' (comparisons: > >= < <= == !=)");
}
END_TEST

START_TEST(test_parse_error_parentheses)
{
    assert_error_is("(has_nan", "column 9: expected ')' to close the '(' at column 1, got end of condition");
    assert_error_is("has_inf or ((has_nan) or max > 1",
                    "column 33: expected ')' to close the '(' at column 12, got end of condition");
    assert_error_is("has_nan)", "column 8: unmatched ')'");
    assert_error_is("(has_nan))", "column 10: unmatched ')'");
    assert_error_is("()", "column 2: expected a function, a scope, 'not', 'phase', 'op=', 'type=' or '(', got ')'");
}
END_TEST

START_TEST(test_parse_error_empty_and_trailing)
{
    assert_error_is("", "column 1: empty condition");
    assert_error_is("  \t ", "column 1: empty condition");
    assert_error_is("has_nan has_inf", "column 9: expected 'and', 'or' or end of condition, got 'has_inf'");
    assert_error_is("max > 5 6", "column 9: expected 'and', 'or' or end of condition, got '6'");
    assert_error_is("has_nan and", "column 12: expected a function, a scope, 'not', 'phase', 'op=', 'type=' or '(', got end of condition");
    assert_error_is("or has_nan", "column 1: expected a function, a scope, 'not', 'phase', 'op=', 'type=' or '(', got 'or'");
    assert_error_is("has_nan $", "column 9: expected 'and', 'or' or end of condition, got '$'");
    assert_error_is("not", "column 4: expected a function, a scope, 'not', 'phase', 'op=', 'type=' or '(', got end of condition");
}
END_TEST

START_TEST(test_parse_error_phase)
{
    assert_error_is("phase == backwrd", "column 10: unknown phase 'backwrd' (did you mean backward?)");
    assert_error_is("phase == eval", "column 10: unknown phase 'eval' (phases: forward, backward, update)");
    assert_error_is("phase > forward", "column 7: expected '==' or '!=' after 'phase', got '>'");
    assert_error_is("phase = forward", "column 7: expected '==' or '!=' after 'phase', got '='");
    assert_error_is("phase != 3",
                    "column 10: expected a phase (forward, backward or update) after '!=', got '3'");
}
END_TEST

START_TEST(test_parse_error_name_tests)
{
    assert_error_is("op *", "column 4: expected '=' or '!=' after 'op', got '*' (e.g. op=*/mask)");
    assert_error_is("type > MatMul", "column 6: expected '=' or '!=' after 'type', got '>' (e.g. type=Softmax)");
    assert_error_is("op=", "column 4: expected an op name glob after 'op=', got end of condition");
    assert_error_is("not (op= )", "column 10: expected an op name glob after 'op=', got nothing");
    assert_error_is("op=\"h0/*", "column 4: unterminated \" after 'op='");
    assert_error_is("op=a\"b", "column 5: a quote inside a name: quote the whole name (op=\"...\" or op='...')");
    assert_error_is("op=*/mask has_nan", "column 11: expected 'and', 'or' or end of condition, got 'has_nan'");
    /* types are checked against the op table at once, as `break type:` is */
    assert_error_has("has_nan and type=Softmx", "column 18: ");
    assert_error_has("has_nan and type=Softmx", "Softmax");
}
END_TEST

START_TEST(test_parse_error_limits)
{
    char deep[300];
    memset(deep, '(', 100);
    strcpy(deep + 100, "has_nan");
    assert_error_is(deep, "column 65: condition nested too deeply (more than 64 levels)");

    char small[16];
    ck_assert_msg(dbg_cond_parse("outputs.abs_mx > 1", small, sizeof small) == NULL, "parsed");
    ck_assert_msg(strcmp(small, "column 9: unkno") == 0, "truncated to \"%s\"", small);

    char err[64] = "stale";
    dbg_cond *c = dbg_cond_parse("has_nan", err, sizeof err);
    ck_assert_msg(c && err[0] == '\0', "success left \"%s\"", err);
    dbg_cond_free(c);
}
END_TEST

/* ---- evaluation ------------------------------------------------------------------- */

static te_op_record record(te_tensor *const *in, int n_in, te_tensor *const *out, int n_out, te_phase ph)
{
    return (te_op_record){ .step = 3, .phase = ph, .op_id = 7, .name = "fc1/linear", .type = "Linear",
                           .inputs = in, .n_inputs = n_in, .outputs = out, .n_outputs = n_out };
}

static bool eval_ctx(const char *text, const dbg_eval_ctx *ctx, dbg_hit *hit)
{
    char err[256];
    dbg_cond *c = dbg_cond_parse(text, err, sizeof err);
    ck_assert_msg(c != NULL, "\"%s\": %s", text, err);
    bool yes = dbg_cond_eval(c, ctx, hit);
    dbg_cond_free(c);
    return yes;
}

static bool eval(const char *text, const te_op_record *r, dbg_hit *hit)
{
    return eval_ctx(text, &(dbg_eval_ctx){ .rec = r }, hit);
}

static void assert_hit(const char *text, const dbg_hit *h, const te_tensor *t, int slot, bool is_output,
                       int64_t index, const char *func)
{
    ck_assert_msg(h->tensor == t, "\"%s\": hit tensor %s, expected %s", text,
                  h->tensor ? h->tensor->name : "NULL", t ? t->name : "NULL");
    ck_assert_msg(h->slot == slot && h->is_output == is_output,
                  "\"%s\": hit %s%d, expected %s%d", text, h->is_output ? "out" : "in", h->slot,
                  is_output ? "out" : "in", slot);
    ck_assert_msg(h->index == index, "\"%s\": hit index %lld, expected %lld", text, (long long)h->index,
                  (long long)index);
    ck_assert_msg(strcmp(h->func, func) == 0, "\"%s\": hit func \"%s\", expected \"%s\"", text, h->func,
                  func);
}

START_TEST(test_eval_default_scope_is_outputs)
{
    te_tensor *x = mk("fc1/linear:in0", 4, (float[]){ 1, 2, NAN, 4 });
    te_tensor *y = mk("fc1/linear:out0", 2, (float[]){ 5, 6 });
    te_op_record r = record((te_tensor *[]){ x }, 1, (te_tensor *[]){ y }, 1, TE_PHASE_FORWARD);
    dbg_hit h;
    ck_assert_msg(!eval("has_nan", &r, &h), "has_nan held on clean outputs");
    assert_hit("has_nan", &h, NULL, -1, false, -1, "");
    ck_assert_msg(eval("inputs.has_nan", &r, &h), "inputs.has_nan did not hold");
    assert_hit("inputs.has_nan", &h, x, 0, false, 2, "has_nan");
    assert_near(h.value, 1, 0);
    ck_assert_msg(eval("max > 5.5", &r, &h), "max > 5.5 did not hold");
    assert_hit("max > 5.5", &h, y, 0, true, -1, "max");
    assert_near(h.value, 6, 0);
    ck_assert_msg(!eval("max > 6", &r, &h), "max > 6 held");
}
END_TEST

START_TEST(test_eval_nan_and_inf_index)
{
    te_tensor *y = te_tensor_from(TE_F32, te_shape(2, 3), (float[]){ 1, 2, INFINITY, NAN, -INFINITY, NAN });
    snprintf(y->name, sizeof y->name, "a:out0");
    te_op_record r = record(NULL, 0, (te_tensor *[]){ y }, 1, TE_PHASE_FORWARD);
    dbg_hit h;
    ck_assert(eval("has_nan", &r, &h));
    assert_hit("has_nan", &h, y, 0, true, 3, "has_nan"); /* not 2, the first Inf */
    assert_near(h.value, 2, 0);
    ck_assert(eval("has_inf", &r, &h));
    assert_hit("has_inf", &h, y, 0, true, 2, "has_inf");
    assert_near(h.value, 2, 0);
    ck_assert(eval("abs_max == 2", &r, &h));
    assert_hit("abs_max == 2", &h, y, 0, true, -1, "abs_max");
}
END_TEST

START_TEST(test_eval_count_with_comparison_on_clean)
{
    te_tensor *y = mk("a:out0", 3, (float[]){ 1, 2, 3 });
    te_op_record r = record(NULL, 0, (te_tensor *[]){ y }, 1, TE_PHASE_FORWARD);
    dbg_hit h;
    ck_assert(!eval("has_nan", &r, &h));
    ck_assert(eval("fp16_overflow == 0", &r, &h));
    assert_hit("fp16_overflow == 0", &h, y, 0, true, -1, "fp16_overflow");
    assert_near(h.value, 0, 0);
    ck_assert(!eval("has_inf or fp16_overflow", &r, &h));
}
END_TEST

START_TEST(test_eval_numeric_functions)
{
    te_tensor *y = mk("a:out0", 4, (float[]){ 0, 0, 3, -4 });
    te_op_record r = record(NULL, 0, (te_tensor *[]){ y }, 1, TE_PHASE_FORWARD);
    static const struct {
        const char *cond;
        double value;
    } cases[] = {
        { "zero_frac == 0.5", 0.5 }, { "mean == -0.25", -0.25 }, { "abs_mean == 1.75", 1.75 },
        { "l2norm == 5", 5 },        { "min == -4", -4 },        { "max == 3", 3 },
        { "abs_max >= 4", 4 },       { "std > 2.4", 2.4874685927665499 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dbg_hit h;
        ck_assert_msg(eval(cases[i].cond, &r, &h), "\"%s\" did not hold", cases[i].cond);
        assert_near(h.value, cases[i].value, 1e-12);
        ck_assert_msg(h.tensor == y && h.is_output && h.slot == 0, "\"%s\": wrong tensor", cases[i].cond);
    }
    dbg_hit h;
    ck_assert(!eval("std > 2.5 or zero_frac > 0.5 or mean >= 0 or fp16_overflow", &r, &h));
}
END_TEST

START_TEST(test_eval_slots)
{
    te_tensor *a = mk("op:in0", 2, (float[]){ 1, 2 });
    te_tensor *b = mk("op:in1", 2, (float[]){ 7, 2 });
    te_tensor *c = mk("op:in2", 2, (float[]){ 9, 9 });
    te_tensor *o0 = mk("op:out0", 1, (float[]){ 1 });
    te_tensor *o1 = mk("op:out1", 2, (float[]){ 1, -1 });
    te_op_record r = record((te_tensor *[]){ a, b, c }, 3, (te_tensor *[]){ o0, o1 }, 2, TE_PHASE_FORWARD);
    dbg_hit h;
    ck_assert(eval("in1.max > 5", &r, &h));
    assert_hit("in1.max > 5", &h, b, 1, false, -1, "max");
    ck_assert(!eval("in0.max > 5", &r, &h));
    ck_assert(eval("inputs.max > 5", &r, &h)); /* b before c */
    assert_hit("inputs.max > 5", &h, b, 1, false, -1, "max");
    ck_assert(eval("in2.min == 9", &r, &h));
    assert_hit("in2.min == 9", &h, c, 2, false, -1, "min");
    ck_assert(!eval("in3.max > -100 or in4.max > -100 or out2.max > -100", &r, &h));
    ck_assert(eval("out1.min < 0", &r, &h));
    assert_hit("out1.min < 0", &h, o1, 1, true, -1, "min");
    ck_assert(!eval("out0.min < 0", &r, &h));
}
END_TEST

START_TEST(test_eval_params_and_grads)
{
    te_tensor *x = mk("fc1/linear:in0", 2, (float[]){ 10, -10 });
    te_tensor *w = mk("param:fc1.weight", 2, (float[]){ 3, 1 });
    te_tensor *gy = mk("grad:fc1/linear:out0", 2, (float[]){ 0.5f, 0.5f });
    te_tensor *gw = mk("grad:fc1.weight", 2, (float[]){ 30, 40 });
    te_tensor *gx = mk("grad:fc1/linear:in0", 2, (float[]){ 1, 1 });
    w->flags |= TE_TENSOR_PARAM;
    te_op_record fwd = record((te_tensor *[]){ x, w }, 2, (te_tensor *[]){ gx }, 1, TE_PHASE_FORWARD);
    dbg_hit h;
    ck_assert(eval("params.abs_max > 2", &fwd, &h));
    assert_hit("params.abs_max > 2", &h, w, 1, false, -1, "abs_max");
    ck_assert(!eval("params.abs_max > 5", &fwd, &h)); /* x is bigger but no parameter */
    ck_assert(eval("grads.l2norm > 1", &fwd, &h));    /* an output named grad: */
    assert_hit("grads.l2norm > 1", &h, gx, 0, true, -1, "l2norm");

    te_op_record bwd = record((te_tensor *[]){ gy, w }, 2, (te_tensor *[]){ gx, gw }, 2, TE_PHASE_BACKWARD);
    ck_assert(eval("grads.l2norm > 0.5", &bwd, &h)); /* the incoming gradient first */
    assert_hit("grads.l2norm > 0.5", &h, gy, 0, false, -1, "l2norm");
    assert_near(h.value, sqrt(0.5), 1e-12);
    ck_assert(eval("grads.l2norm > 10", &bwd, &h));
    assert_hit("grads.l2norm > 10", &h, gw, 1, true, -1, "l2norm");
    assert_near(h.value, 50, 1e-12);
    ck_assert(!eval("grads.max > 50", &bwd, &h));
    ck_assert(!eval("params.min < 1", &bwd, &h));
}
END_TEST

START_TEST(test_eval_skips_missing_tensors)
{
    float data[4] = { NAN, NAN, NAN, NAN };
    te_tensor nodata = view(data, 4);
    nodata.data = NULL; /* a traced tensor: no data */
    te_tensor *t = mk("op:in2", 3, (float[]){ 0, NAN, 0 });
    te_op_record r = record((te_tensor *[]){ NULL, &nodata, t }, 3, (te_tensor *[]){ NULL }, 1,
                            TE_PHASE_BACKWARD);
    dbg_hit h;
    ck_assert(eval("inputs.has_nan", &r, &h));
    assert_hit("inputs.has_nan", &h, t, 2, false, 1, "has_nan");
    ck_assert(!eval("in0.has_nan or in1.has_nan or has_nan", &r, &h));
    ck_assert(eval("not (in1.max < 1)", &r, &h)); /* nothing in in1: the predicate is false */
}
END_TEST

START_TEST(test_eval_phase)
{
    te_tensor *y = mk("a:out0", 2, (float[]){ 1, NAN });
    te_op_record r = record(NULL, 0, (te_tensor *[]){ y }, 1, TE_PHASE_BACKWARD);
    dbg_hit h;
    ck_assert(eval("phase == backward", &r, &h));
    assert_hit("phase == backward", &h, NULL, -1, false, -1, "");
    ck_assert(!eval("phase != backward", &r, &h));
    ck_assert(!eval("phase == forward", &r, &h));
    ck_assert(eval("phase != update", &r, &h));
    ck_assert(eval("phase == backward and has_nan", &r, &h));
    assert_hit("phase == backward and has_nan", &h, y, 0, true, 1, "has_nan");
    r.phase = TE_PHASE_UPDATE;
    ck_assert(!eval("phase == backward and has_nan", &r, &h));
    ck_assert(eval("phase == update", &r, &h));
}
END_TEST

/* op=GLOB (fnmatch over the op's name) and type=TYPE, alone and combined */
START_TEST(test_eval_op_and_type)
{
    te_tensor *y = mk("h0/attn/mask:out0", 3, (float[]){ 1, -INFINITY, 70 });
    te_op_record r = record(NULL, 0, (te_tensor *[]){ y }, 1, TE_PHASE_FORWARD);
    r.name = "h0/attn/mask";
    r.type = "Softmax"; /* any type the table has */
    dbg_hit h;
    ck_assert(eval("op=*/mask", &r, &h));
    assert_hit("op=*/mask", &h, NULL, -1, false, -1, "");
    ck_assert(!eval("not op=*/mask", &r, &h));
    ck_assert(!eval("op!=h?/attn/*", &r, &h));
    ck_assert(eval("op=h*/attn/* and has_inf", &r, &h));
    assert_hit("op=h*/attn/* and has_inf", &h, y, 0, true, 1, "has_inf");
    ck_assert(eval("abs_max > 50 and op=h*/attn/*", &r, &h)); /* abs_max skips the Inf: 70 */
    ck_assert(!eval("abs_max > 80 and op=h*/attn/*", &r, &h));
    ck_assert(!eval("op=h1/*", &r, &h));
    ck_assert(eval("type=Softmax", &r, &h));
    ck_assert(!eval("type=MatMul or op=*/scores", &r, &h));
    ck_assert(eval("has_inf and not (op=*/mask and type=Softmax) or op=h0/*", &r, &h));
    ck_assert(!eval("has_inf and not (op=*/mask and type=Softmax)", &r, &h));
    /* the allow-list: a NaN or Inf anywhere but the mask */
    ck_assert(!eval("has_inf and not op=*/mask", &r, &h));
    r.name = "h0/attn/softmax";
    ck_assert(eval("has_inf and not op=*/mask", &r, &h));
    r.name = "grad/h0/attn/mask"; /* a glob is over the whole name, '/' included */
    ck_assert(eval("op=*/mask", &r, &h));
    ck_assert(!eval("op=h0/*", &r, &h));
    /* a copy keeps its names */
    char err[128];
    dbg_cond *c = dbg_cond_parse("op=grad/* and type!=MatMul", err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    dbg_cond *d = dbg_cond_copy(c);
    dbg_cond_free(c);
    ck_assert(d != NULL);
    ck_assert_str_eq(dbg_cond_text(d), "op=grad/* and type!=MatMul");
    ck_assert(dbg_cond_eval(d, &(dbg_eval_ctx){ .rec = &r }, &h));
    ck_assert_int_eq(dbg_cond_preds(d, NULL, 0), 0); /* name tests are no predicates */
    dbg_cond_free(d);
}
END_TEST

/* A holds, B and C do not. */
START_TEST(test_eval_precedence)
{
    te_tensor *y = mk("a:out0", 2, (float[]){ 1, NAN });
    te_op_record r = record(NULL, 0, (te_tensor *[]){ y }, 1, TE_PHASE_FORWARD);
    static const struct {
        const char *cond;
        bool want;
    } cases[] = {
        { "has_nan or max > 100 and phase == update", true },   /* A or (B and C) */
        { "(has_nan or max > 100) and phase == update", false }, /* (A or B) and C */
        { "max > 100 and phase == update or has_nan", true },
        { "not has_nan or has_nan", true },
        { "not (has_nan or max > 100)", false },
        { "not has_nan and max > 100", false },
        { "not max > 100 and has_nan", true }, /* (not B) and A */
        { "not not has_nan", true },
        { "not (max > 100 and has_nan)", true },
        { "has_inf or max > 100 or phase == update", false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dbg_hit h;
        ck_assert_msg(eval(cases[i].cond, &r, &h) == cases[i].want, "\"%s\" should be %s", cases[i].cond,
                      cases[i].want ? "true" : "false");
    }
}
END_TEST

/* The hit comes from the first predicate that made the condition true. */
START_TEST(test_eval_hit_of_compound)
{
    te_tensor *x = mk("a:in0", 2, (float[]){ 3, 4 });
    te_tensor *y = mk("a:out0", 3, (float[]){ 1, INFINITY, NAN });
    te_op_record r = record((te_tensor *[]){ x }, 1, (te_tensor *[]){ y }, 1, TE_PHASE_FORWARD);
    dbg_hit h;
    ck_assert(eval("inputs.max > 3.5 and has_nan", &r, &h));
    assert_hit("inputs.max > 3.5 and has_nan", &h, x, 0, false, -1, "max");
    ck_assert(eval("phase == forward and has_inf", &r, &h));
    assert_hit("phase == forward and has_inf", &h, y, 0, true, 1, "has_inf");
    /* the left side held partly (has_nan) but was false as a whole */
    ck_assert(eval("(has_nan and phase == update) or inputs.l2norm == 5", &r, &h));
    assert_hit("(has_nan and phase == update) or inputs.l2norm == 5", &h, x, 0, false, -1, "l2norm");
    ck_assert(eval("not inputs.has_nan", &r, &h));
    assert_hit("not inputs.has_nan", &h, NULL, -1, false, -1, "");

    char err[64];
    dbg_cond *c = dbg_cond_parse("has_nan", err, sizeof err);
    ck_assert_msg(dbg_cond_eval(c, &(dbg_eval_ctx){ .rec = &r }, NULL), "NULL hit: not true");
    dbg_cond_free(c);
}
END_TEST

START_TEST(test_eval_dtypes)
{
    te_tensor *h16 = mk_dtype(TE_F16, 3, (float[]){ 1, 70000, 60000 });
    te_tensor *b16 = mk_dtype(TE_BF16, 3, (float[]){ 1, 2, 70000 });
    te_op_record r = record((te_tensor *[]){ h16 }, 1, (te_tensor *[]){ b16 }, 1, TE_PHASE_FORWARD);
    dbg_hit h;
    ck_assert(eval("inputs.has_inf", &r, &h));
    assert_hit("inputs.has_inf", &h, h16, 0, false, 1, "has_inf");
    ck_assert(!eval("inputs.fp16_overflow", &r, &h));
    ck_assert(eval("inputs.max == 60000", &r, &h));
    ck_assert(eval("fp16_overflow", &r, &h));
    assert_hit("fp16_overflow", &h, b16, 0, true, -1, "fp16_overflow");
    assert_near(h.value, 1, 0);
}
END_TEST

/* More tensors than the statistics cache holds. */
START_TEST(test_eval_many_tensors)
{
    te_tensor *outs[20];
    char name[32];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "split:out%d", i);
        outs[i] = mk(name, 3, (float[]){ (float)i, 0, 1 });
    }
    te_set(outs[19], 2, NAN);
    te_op_record r = record(NULL, 0, outs, 20, TE_PHASE_FORWARD);
    dbg_hit h;
    ck_assert(eval("outputs.max > 18.5 or has_nan", &r, &h));
    assert_hit("outputs.max > 18.5 or has_nan", &h, outs[19], 19, true, -1, "max");
    ck_assert(eval("max > 100 or has_nan", &r, &h));
    assert_hit("max > 100 or has_nan", &h, outs[19], 19, true, 2, "has_nan");
    ck_assert(eval("mean > 6.4 and has_nan", &r, &h));
    assert_hit("mean > 6.4 and has_nan", &h, outs[19], 19, true, -1, "mean");
}
END_TEST

/* ---- rel_change --------------------------------------------------------------------- */

typedef struct prev_table {
    const te_tensor *cur[4], *prev[4];
    int n, calls;
} prev_table;

static const te_tensor *prev_of(const te_tensor *t, void *user)
{
    prev_table *p = user;
    p->calls++;
    for (int i = 0; i < p->n; i++)
        if (p->cur[i] == t)
            return p->prev[i];
    return NULL;
}

START_TEST(test_eval_rel_change)
{
    te_tensor *w = mk("param:w", 3, (float[]){ 1, 2, 2 });
    te_tensor *w_prev = mk("param:w", 3, (float[]){ 1, 0, 0 });
    te_tensor *v = mk("param:v", 2, (float[]){ 5, 5 });
    te_tensor *v_prev = mk("param:v", 3, (float[]){ 5, 5, 5 }); /* another shape */
    te_tensor *u = mk("param:u", 2, (float[]){ 1, 1 });       /* no previous value */
    te_op_record r = record(NULL, 0, (te_tensor *[]){ u, v, w }, 3, TE_PHASE_UPDATE);
    prev_table tab = { .cur = { w, v }, .prev = { w_prev, v_prev }, .n = 2 };
    dbg_eval_ctx ctx = { .rec = &r, .prev = prev_of, .user = &tab };
    dbg_hit h;
    /* ||(0,2,2)|| / ||(1,0,0)|| = sqrt(8) */
    ck_assert(eval_ctx("rel_change > 2.8", &ctx, &h));
    assert_hit("rel_change > 2.8", &h, w, 2, true, -1, "rel_change");
    assert_near(h.value, sqrt(8.0), 1e-12);
    ck_assert_msg(tab.calls == 3, "prev called %d times for 3 tensors", tab.calls);
    ck_assert(!eval_ctx("rel_change > 3", &ctx, &h));
    /* u and v have no usable previous value: no value is not 0 */
    ck_assert(!eval_ctx("out0.rel_change < 100 or out1.rel_change < 100", &ctx, &h));
    tab.calls = 0;
    ck_assert(eval_ctx("rel_change > 5 or rel_change > 2 or rel_change > 1", &ctx, &h));
    ck_assert_msg(tab.calls == 3, "prev called %d times: once per tensor per evaluation", tab.calls);

    /* a zero previous value: the denominator is 1e-12 */
    te_tensor *z_prev = mk("param:z", 2, (float[]){ 0, 0 });
    te_tensor *z = mk("param:z", 2, (float[]){ 3, 4 });
    prev_table tz = { .cur = { z }, .prev = { z_prev }, .n = 1 };
    te_op_record rz = record(NULL, 0, (te_tensor *[]){ z }, 1, TE_PHASE_UPDATE);
    ck_assert(eval_ctx("rel_change > 1e12", &(dbg_eval_ctx){ .rec = &rz, .prev = prev_of, .user = &tz }, &h));
    assert_near(h.value, 5e12, 1.0);

    /* no callback at all */
    ck_assert(!eval_ctx("rel_change >= 0", &(dbg_eval_ctx){ .rec = &r }, &h));

    /* an f16 tensor against an f32 previous value */
    te_tensor *hw = mk_dtype(TE_F16, 3, (float[]){ 1, 2, 2 });
    prev_table th = { .cur = { hw }, .prev = { w_prev }, .n = 1 };
    te_op_record rh = record(NULL, 0, (te_tensor *[]){ hw }, 1, TE_PHASE_UPDATE);
    ck_assert(eval_ctx("rel_change > 2.8", &(dbg_eval_ctx){ .rec = &rh, .prev = prev_of, .user = &th }, &h));
    assert_near(h.value, sqrt(8.0), 1e-12);
}
END_TEST

Suite *suite_dbg_cond(void)
{
    Suite *s = suite_create("dbg_cond");
    TCase *tc = tcase_create("dbg_cond");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_stats_basic);
    tcase_add_test(tc, test_stats_nonfinite_excluded);
    tcase_add_test(tc, test_stats_all_nonfinite);
    tcase_add_test(tc, test_stats_empty_and_single);
    tcase_add_test(tc, test_stats_zeros);
    tcase_add_test(tc, test_stats_fp16_overflow);
    tcase_add_test(tc, test_stats_i32);
    tcase_add_test(tc, test_stats_quick_fields);
    tcase_add_test(tc, test_stats_first_bad_across_chunks);
    tcase_add_test(tc, test_stats_thread_invariant);
    tcase_add_test(tc, test_stats_std_large_mean);
    tcase_add_test(tc, test_stats_blocks_against_reference);
    tcase_add_test(tc, test_index_str);
    tcase_add_test(tc, test_edit_distance);
    tcase_add_test(tc, test_parse_forms);
    tcase_add_test(tc, test_parse_uses_rel_change);
    tcase_add_test(tc, test_preds);
    tcase_add_test(tc, test_cond_copy);
    tcase_add_test(tc, test_parse_error_unknown_function);
    tcase_add_test(tc, test_parse_error_scope);
    tcase_add_test(tc, test_parse_error_number);
    tcase_add_test(tc, test_parse_error_needs_comparison);
    tcase_add_test(tc, test_parse_error_parentheses);
    tcase_add_test(tc, test_parse_error_empty_and_trailing);
    tcase_add_test(tc, test_parse_error_phase);
    tcase_add_test(tc, test_parse_error_limits);
    tcase_add_test(tc, test_parse_error_name_tests);
    tcase_add_test(tc, test_eval_default_scope_is_outputs);
    tcase_add_test(tc, test_eval_nan_and_inf_index);
    tcase_add_test(tc, test_eval_count_with_comparison_on_clean);
    tcase_add_test(tc, test_eval_numeric_functions);
    tcase_add_test(tc, test_eval_slots);
    tcase_add_test(tc, test_eval_params_and_grads);
    tcase_add_test(tc, test_eval_skips_missing_tensors);
    tcase_add_test(tc, test_eval_phase);
    tcase_add_test(tc, test_eval_precedence);
    tcase_add_test(tc, test_eval_op_and_type);
    tcase_add_test(tc, test_eval_hit_of_compound);
    tcase_add_test(tc, test_eval_dtypes);
    tcase_add_test(tc, test_eval_many_tensors);
    tcase_add_test(tc, test_eval_rel_change);
    suite_add_tcase(s, tc);
    return s;
}
