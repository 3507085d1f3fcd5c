/* test_shape.c — reshape, flatten, transpose, cast, embedding and dropout:
 * PyTorch goldens (fixtures/norm.bin), finite differences, exact cast bit
 * patterns, dropout mask statistics and reproducibility, and errors. */
#include "fixture.h"
#include "gradcheck.h"
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- reshape and flatten ---------------------------------------------------- */

START_TEST(test_reshape_golden)
{
    fx_file *f = fx_open("norm.bin");
    te_tensor *x = fx_param(f, "rs_x");
    te_tensor *y = te_reshape(x, 4, -1);
    fx_assert_close(y, fx_tensor(f, "rs_y"), 0, 0, "reshape [2,3,4] -> [4,-1]");
    ck_assert_msg(te_backward_with(y, fx_tensor(f, "rs_dy")) == TE_OK, "%s", te_error());
    fx_assert_close(x->grad, fx_tensor(f, "rs_dx"), 0, 0, "reshape dx");
    /* a copy, not a view: patching the output leaves the input alone */
    float x0 = te_get(x, 0);
    te_set(y, 0, 1234.0f);
    ck_assert_msg(te_get(x, 0) == x0, "reshape output shares memory with its input");
    te_tensor_free(x);
    fx_close(f);
}
END_TEST

static te_tensor *reshape_fn(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_reshape(in[0], 3, -1, 2);
}

START_TEST(test_reshape_gradcheck)
{
    te_tensor *x = gc_random(te_shape(2, 3, 2), -1, 1, 1);
    gc_check("reshape", reshape_fn, NULL, &x, 1, (bool[]){ true }, 1e-2f, 1e-3f);
    te_tensor_free(x);
}
END_TEST

START_TEST(test_reshape_i32_and_flatten)
{
    int32_t v[6] = { 1, -2, 3, 2147483647, -5, 6 };
    te_tensor *i = te_tensor_from(TE_I32, te_shape(2, 3), v);
    te_tensor *r = te_reshape(i, 3, 2);
    ck_assert_msg(r && r->dtype == TE_I32 && r->shape[0] == 3 && r->shape[1] == 2, "%s",
                  te_error());
    int32_t *rv = tu_bytes(r);
    ck_assert_msg(memcmp(rv, v, sizeof v) == 0, "i32 reshape changed the values");
    free(rv);

    te_tensor *x = gc_random(te_shape(2, 3, 2, 2), -1, 1, 3);
    te_tensor *fl = te_flatten(x);
    ck_assert_msg(fl && fl->ndim == 2 && fl->shape[0] == 2 && fl->shape[1] == 12, "%s", te_error());
    ck_assert_msg(tu_same_bytes(fl, x), "flatten changed the values");
    ck_assert_str_eq(fl->name, "flatten:out0"); /* named as called, not "reshape" */
    te_tensor_free(x);
}
END_TEST

START_TEST(test_reshape_errors)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3, 4));
    int line = __LINE__ + 1;
    ck_assert(te_reshape(x, 5, 5) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_SHAPE);
    tu_assert_error_has("reshape (Reshape) at ", tu_at(line), "x [2,3,4]", "(24 elements)",
                        "[5,5] (25 elements)");
    line = __LINE__ + 1;
    ck_assert(te_reshape(x, 5, -1) == NULL);
    tu_assert_error_has("(Reshape)", tu_at(line), "x [2,3,4] (24 elements)",
                        "cannot be reshaped to [5,-1]");
    line = __LINE__ + 1;
    ck_assert(te_reshape(x, -1, 2, -1) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_ARG);
    tu_assert_error_has("(Reshape)", tu_at(line), "[-1,2,-1]", "dim 2 is -1", "one -1 allowed");
    te_tensor *v = te_tensor_zeros(TE_F32, te_shape(5));
    line = __LINE__ + 1;
    ck_assert(te_flatten(v) == NULL);
    tu_assert_error_has("flatten (Flatten)", tu_at(line), "flatten of x [5]");
}
END_TEST

/* ---- transpose ---------------------------------------------------------------- */

START_TEST(test_transpose_golden)
{
    fx_file *f = fx_open("norm.bin");
    te_tensor *x = fx_param(f, "tr_x");
    te_tensor *y = te_transpose(x, 0, 2);
    fx_assert_close(y, fx_tensor(f, "tr_y"), 0, 0, "transpose(0, 2) of [2,3,4]");
    ck_assert_msg(te_backward_with(y, fx_tensor(f, "tr_dy")) == TE_OK, "%s", te_error());
    fx_assert_close(x->grad, fx_tensor(f, "tr_dx"), 0, 0, "transpose dx");
    te_tape_reset();
    /* negative dims name the same pair */
    fx_assert_close(te_transpose(x, -1, -3), fx_tensor(f, "tr_y"), 0, 0, "transpose(-1, -3)");
    te_tensor_free(x);
    fx_close(f);
}
END_TEST

static te_tensor *transpose_fn(te_tensor **in, void *ctx)
{
    const int *d = ctx;
    return te_transpose(in[0], d[0], d[1]);
}

START_TEST(test_transpose_gradcheck)
{
    /* the weights of L = sum(r * y) differ per element, so a gradient put
     * back in the wrong place fails; (1, -1) moves single elements, (2, 1)
     * moves runs of the last dim */
    te_tensor *x = gc_random(te_shape(2, 3, 4, 5), -1, 1, 4);
    gc_check("transpose(1, -1)", transpose_fn, (int[]){ 1, -1 }, &x, 1, (bool[]){ true }, 1e-2f,
             1e-3f);
    gc_check("transpose(2, 1)", transpose_fn, (int[]){ 2, 1 }, &x, 1, (bool[]){ true }, 1e-2f,
             1e-3f);
    te_tensor_free(x);
}
END_TEST

START_TEST(test_transpose_i32_and_errors)
{
    int32_t v[6] = { 0, 1, 2, 3, 4, 5 };
    te_tensor *t = te_transpose(te_tensor_from(TE_I32, te_shape(2, 3), v), 1, 0);
    ck_assert_msg(t && t->dtype == TE_I32 && t->shape[0] == 3 && t->shape[1] == 2, "%s",
                  te_error());
    const int32_t want[6] = { 0, 3, 1, 4, 2, 5 };
    int32_t got[6];
    ck_assert_int_eq(te_tensor_read(t, 0, 6, got), TE_OK);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(got[i] == want[i], "element %d: %d, expected %d", i, got[i], want[i]);

    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3, 4));
    int line = __LINE__ + 1;
    ck_assert(te_transpose(x, 3, 0) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_ARG);
    /* the step's second transpose: op names are unique within a step */
    tu_assert_error_has("transpose_1 (Transpose) at ", tu_at(line),
                        "dims (3, 0) out of range for x [2,3,4] (3 dims)");
    line = __LINE__ + 1;
    ck_assert(te_transpose(x, 0, -4) == NULL);
    tu_assert_error_has(tu_at(line), "dims (0, -4)");
}
END_TEST

/* ---- cast ------------------------------------------------------------------- */

START_TEST(test_cast_bit_patterns)
{
    const float v[6] = { 1.0f, 65504.0f, 1e-8f, 70000.0f, -2.0f, 0.1f };
    const uint16_t f16[6] = { 0x3c00, 0x7bff, 0x0000, 0x7c00, 0xc000, 0x2e66 };
    const uint16_t bf16[6] = { 0x3f80, 0x4780, 0x322c, 0x4789, 0xc000, 0x3dcd };
    const float f16_back[6] = { 1.0f, 65504.0f, 0.0f, INFINITY, -2.0f, 0.0999755859375f };
    const float bf16_back[6] = { 1.0f,     65536.0f, 1.0011717677116394e-08f,
                                 70144.0f, -2.0f,    0.10009765625f };
    te_tensor *x = te_tensor_from(TE_F32, te_shape(6), v);
    te_tensor *h = te_cast(x, TE_F16), *b = te_cast(x, TE_BF16);
    ck_assert_msg(h && b && h->dtype == TE_F16 && b->dtype == TE_BF16, "%s", te_error());
    te_tensor *hb = te_cast(h, TE_F32), *bb = te_cast(b, TE_F32);
    ck_assert_msg(hb && bb && hb->dtype == TE_F32, "%s", te_error());
    uint16_t hv[6], bv[6];
    float hbv[6], bbv[6];
    ck_assert(te_tensor_read(h, 0, 6, hv) == TE_OK && te_tensor_read(b, 0, 6, bv) == TE_OK);
    ck_assert(te_tensor_read(hb, 0, 6, hbv) == TE_OK && te_tensor_read(bb, 0, 6, bbv) == TE_OK);
    for (int i = 0; i < 6; i++) {
        uint16_t gh = hv[i], gb = bv[i];
        ck_assert_msg(gh == f16[i], "f16(%g) = 0x%04x, expected 0x%04x", (double)v[i], gh, f16[i]);
        ck_assert_msg(gb == bf16[i], "bf16(%g) = 0x%04x, expected 0x%04x", (double)v[i], gb,
                      bf16[i]);
        float rh = hbv[i], rb = bbv[i];
        ck_assert_msg(memcmp(&rh, &f16_back[i], 4) == 0, "f32(f16(%g)) = %.9g, expected %.9g",
                      (double)v[i], (double)rh, (double)f16_back[i]);
        ck_assert_msg(memcmp(&rb, &bf16_back[i], 4) == 0, "f32(bf16(%g)) = %.9g, expected %.9g",
                      (double)v[i], (double)rb, (double)bf16_back[i]);
    }
    /* between the halves: f16 -> bf16 goes through f32 exactly once */
    te_tensor *hbf = te_cast(h, TE_BF16);
    uint16_t hbfv[2] = { 0, 0 };
    ck_assert_msg(hbf && te_tensor_read(hbf, 0, 2, hbfv) == TE_OK, "%s", te_error());
    ck_assert_msg(hbfv[0] == 0x3f80 && hbfv[1] == 0x4780, "f16 -> bf16 of 1 and 65504: 0x%04x 0x%04x",
                  hbfv[0], hbfv[1]);
}
END_TEST

START_TEST(test_cast_int)
{
    const float v[6] = { 2.7f, -2.7f, NAN, 3e9f, -3e9f, 16777217.0f };
    const int32_t want[6] = { 2, -2, 0, 2147483647, (-2147483647 - 1), 16777216 };
    te_tensor *i = te_cast(te_tensor_from(TE_F32, te_shape(6), v), TE_I32);
    ck_assert_msg(i && i->dtype == TE_I32, "%s", te_error());
    int32_t iw[6];
    ck_assert_int_eq(te_tensor_read(i, 0, 6, iw), TE_OK);
    for (int k = 0; k < 6; k++)
        ck_assert_msg(iw[k] == want[k], "i32(%g) = %d, expected %d", (double)v[k], iw[k], want[k]);
    const int32_t iv[4] = { 3, -7, 16777217, 2048 };
    te_tensor *src = te_tensor_from(TE_I32, te_shape(4), iv);
    te_tensor *f = te_cast(src, TE_F32), *h = te_cast(src, TE_F16);
    ck_assert_msg(f && h, "%s", te_error());
    const float fw[4] = { 3.0f, -7.0f, 16777216.0f, 2048.0f };
    float fv[4];
    ck_assert_int_eq(te_tensor_read(f, 0, 4, fv), TE_OK);
    for (int k = 0; k < 4; k++) {
        ck_assert_msg(fv[k] == fw[k], "f32(%d) = %.9g", iv[k], (double)fv[k]);
        ck_assert_msg(te_get(h, k) == (k == 2 ? INFINITY : fw[k]), "f16(%d) = %g", iv[k],
                      (double)te_get(h, k));
    }
    ck_assert_msg(!f->requires_grad, "a cast from i32 must not require grad");
}
END_TEST

/* Gradients cast back to the input's dtype; none flows into or out of i32. */
START_TEST(test_cast_gradient)
{
    te_tensor *x = gc_random(te_shape(4), -1, 1, 7);
    x->requires_grad = true;
    te_tensor *y = te_cast(te_cast(x, TE_F16), TE_F32);
    const float d[4] = { 0.5f, -1.25f, 0.1f, 3.0f };
    ck_assert_msg(y && te_backward_with(y, te_tensor_from(TE_F32, te_shape(4), d)) == TE_OK, "%s",
                  te_error());
    for (int i = 0; i < 4; i++) {
        float want = te_f16_to_f32(te_f32_to_f16(d[i]));
        ck_assert_msg(te_get(x->grad, i) == want, "dx[%d] = %.9g, expected %.9g (f16-rounded)", i,
                      (double)te_get(x->grad, i), (double)want);
    }
    te_tape_reset();
    te_tensor *yi = te_cast(x, TE_I32);
    ck_assert_msg(yi && !yi->requires_grad, "cast to i32 must not require grad");
    te_tensor_free(x);
}
END_TEST

/* What rounding did, as hooks see it: the f16 cast of values beyond 65504
 * and below half the smallest subnormal, and an op that runs in f32 on f16
 * tensors (Scale) whose result overflows. */
static te_round_stats seen_round[4];
static int seen_ops;

static void keep_round(const te_op_record *r, void *user)
{
    (void)user;
    if (seen_ops < 4)
        seen_round[seen_ops] = r->round ? r->round[0] : (te_round_stats){ .dtype = TE_F32, .absmax = -1.0f };
    seen_ops++;
}

START_TEST(test_round_stats)
{
    const float v[8] = { 1e5f, 70000.0f, 65519.0f, 1e-8f, 3e-8f, 0.0f, -1e6f, NAN };
    te_tensor *x = te_tensor_from(TE_F32, te_shape(8), v);
    seen_ops = 0;
    int h = te_hook_add(&(te_hooks){ .op_end = keep_round }, NULL);
    te_tensor *y = te_cast(x, TE_F16);    /* op 0 */
    te_tensor *big = te_scale(y, 1000.0f);  /* op 1: f32 inside, rounded to f16 */
    te_tensor *tiny = te_scale(y, 1e-4f);   /* op 2 */
    te_tensor *w = te_cast(x, TE_F32);      /* op 3: nothing rounded */
    te_hook_remove(h);
    ck_assert_msg(y && big && tiny && w, "%s", te_error());
    ck_assert_int_eq(seen_ops, 4);
    const te_round_stats *c = &seen_round[0];
    ck_assert_int_eq(c->dtype, TE_F16);
    ck_assert_int_eq(c->overflow, 3);  /* 1e5, 70000, -1e6; 65519 rounds down to 65504 */
    ck_assert_int_eq(c->underflow, 1); /* 1e-8; 3e-8 rounds up to 2^-24 */
    ck_assert_int_eq(c->nonzero, 6);   /* neither 0 nor NaN */
    ck_assert(c->absmax == 1e6f);
    ck_assert(te_get(y, 2) == 65504.0f && isinf(te_get(y, 0)) && te_get(y, 3) == 0.0f && te_get(y, 4) > 0.0f);
    /* y: inf, inf, 65504, 0, 2^-24, 0, -inf, nan; only the finite non-zero count */
    const te_round_stats *b = &seen_round[1], *t = &seen_round[2];
    ck_assert_int_eq(b->dtype, TE_F16);
    ck_assert_int_eq(b->overflow, 1); /* 65504 * 1000 */
    ck_assert_int_eq(b->underflow, 0);
    ck_assert_int_eq(b->nonzero, 2);
    ck_assert(b->absmax == 65504000.0f);
    ck_assert_int_eq(t->overflow, 0);
    ck_assert_int_eq(t->underflow, 1); /* 2^-24 * 1e-4 */
    ck_assert_int_eq(t->nonzero, 2);
    ck_assert_int_eq(seen_round[3].dtype, TE_F32);
    ck_assert(seen_round[3].absmax == -1.0f); /* the record's round is NULL */
    ck_assert(te_dtype_max(TE_F16) == 65504.0f);
}
END_TEST

START_TEST(test_cast_errors)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3));
    int line = __LINE__ + 1;
    ck_assert(te_cast(x, (te_dtype)9) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_ARG);
    tu_assert_error_has("cast (Cast) at ", tu_at(line), "x f32 [2,3]", "unknown target dtype 9");
}
END_TEST

/* ---- the vector conversions (lowp.c) against the scalar ones ----------------
 * te_half_to_f32, te_round_block and the tensor copies run vector loops (F16C
 * for f16 and AVX2 for bf16's rounding where the CPU has them,
 * te_lowp_portable: the portable paths); they
 * must give the scalar functions' bits and the per-element counts exactly. */

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

START_TEST(test_half_widen_all_patterns)
{
    enum { N = 65536 };
    uint16_t *h = malloc(N * sizeof *h);
    float *f = malloc(N * sizeof *f);
    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    for (int portable = 0; portable < 2; portable++) {
        te_lowp_portable = portable;
        for (int d = 0; d < 2; d++) {
            const te_dtype dt = d ? TE_BF16 : TE_F16;
            /* whole, then from an odd offset with an odd length (the tails) */
            for (int off = 0; off < 2; off++) {
                const int n = N - 3 * off;
                memset(f, 0xa5, N * sizeof *f);
                te_half_to_f32(h + off, f + off, dt, n);
                for (int i = off; i < off + n; i++) {
                    const float want = d ? te_bf16_to_f32(h[i]) : te_f16_to_f32(h[i]);
                    ck_assert_msg(fbits(f[i]) == fbits(want), "%s 0x%04x: 0x%08x, scalar 0x%08x (portable %d)",
                                  te_dtype_name(dt), h[i], fbits(f[i]), fbits(want), portable);
                }
            }
            /* te_copy_to_f32, in parallel chunks */
            te_tensor *t = te_tensor_from(dt, te_shape(N), h);
            memset(f, 0, N * sizeof *f);
            te_copy_to_f32(t, f);
            for (int i = 0; i < N; i++)
                ck_assert_uint_eq(fbits(f[i]), fbits(te_get(t, i)));
        }
    }
    te_lowp_portable = false;
    free(h);
    free(f);
}
END_TEST

/* Every exponent, both signs, with the mantissas that decide rounding: single
 * bits, runs of ones and ties at every position (so every f16 subnormal
 * shift and the bf16 and f16 normal cuts), random ones, and named values. */
static int64_t edge_f32(float *v, int64_t cap)
{
    int64_t n = 0;
    uint32_t seed = 12345;
    for (uint32_t e = 0; e < 256; e++)
        for (uint32_t sg = 0; sg < 2; sg++) {
            const uint32_t base = sg << 31 | e << 23;
            uint32_t m[4 * 24 + 2 + 24];
            int k = 0;
            m[k++] = 0;
            m[k++] = 0x7fffff;
            for (int j = 0; j < 24; j++) {
                m[k++] = (1u << j) & 0x7fffff;
                m[k++] = ((1u << j) - 1) & 0x7fffff;
                m[k++] = (3u << j) & 0x7fffff;
                m[k++] = ((1u << j) + 1) & 0x7fffff;
            }
            for (int j = 0; j < 24; j++) {
                seed = seed * 1664525u + 1013904223u;
                m[k++] = seed >> 9;
            }
            for (int j = 0; j < k && n < cap; j++)
                v[n++] = bitsf(base | m[j]);
        }
    const float named[] = { 65504.0f, 65519.0f, 65519.996f, 65520.0f, 65520.004f, 65536.0f, 131008.0f,
                            5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 2.980232e-8f, 8.940697e-8f,
                            6.097555e-5f, 6.1035156e-5f, 3.3895314e38f, 3.4028235e38f, 1.0f + 1.0f / 2048,
                            1.0f + 3.0f / 2048, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, INFINITY, NAN,
                            bitsf(0x7f800001u), bitsf(0x7fa00000u), bitsf(0x7fc00001u), bitsf(0xff800fffu),
                            bitsf(0x7f801000u), bitsf(0xffffffffu) };
    for (size_t j = 0; j < sizeof named / sizeof *named && n + 1 < cap; j++) {
        v[n++] = named[j];
        v[n++] = -named[j];
    }
    return n;
}

/* te_round_block's counts recounted one element at a time, with branches. */
static void recount(const float *x, const uint16_t *r, int64_t n, te_dtype dt, te_round_stats *st)
{
    memset(st, 0, sizeof *st);
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || x[i] == 0.0f)
            continue;
        st->nonzero++;
        st->absmax = fabsf(x[i]) > st->absmax ? fabsf(x[i]) : st->absmax;
        if ((r[i] & 0x7fff) == (dt == TE_F16 ? 0x7c00 : 0x7f80))
            st->overflow++;
        if ((r[i] & 0x7fff) == 0)
            st->underflow++;
    }
}

START_TEST(test_round_block_exact)
{
    enum { CAP = 1 << 17 };
    float *x = malloc(CAP * sizeof *x);
    uint16_t *r = malloc(CAP * sizeof *r);
    const int64_t n = edge_f32(x, CAP);
    ck_assert_int_gt(n, 60000);
    for (int portable = 0; portable < 2; portable++) {
        te_lowp_portable = portable;
        for (int d = 0; d < 2; d++) {
            const te_dtype dt = d ? TE_BF16 : TE_F16;
            for (int off = 0; off < 2; off++) {
                const int64_t m = n - 5 * off;
                te_round_stats st = { .dtype = dt }, want;
                te_round_block(x + off, r + off, dt, m, &st);
                int64_t infs = 0, zeros = 0;
                for (int64_t i = off; i < off + m; i++) {
                    const uint16_t s = d ? te_f32_to_bf16(x[i]) : te_f32_to_f16(x[i]);
                    ck_assert_msg(r[i] == s, "%s of 0x%08x: 0x%04x, scalar 0x%04x (portable %d)", te_dtype_name(dt),
                                  fbits(x[i]), r[i], s, portable);
                    infs += isfinite(x[i]) && (r[i] & 0x7fff) == (d ? 0x7f80 : 0x7c00);
                    zeros += x[i] != 0.0f && (r[i] & 0x7fff) == 0;
                }
                ck_assert_int_gt(infs, 0); /* the set does overflow and underflow */
                ck_assert_int_gt(zeros, 0);
                recount(x + off, r + off, m, dt, &want);
                ck_assert_int_eq(st.overflow, want.overflow);
                ck_assert_int_eq(st.underflow, want.underflow);
                ck_assert_int_eq(st.nonzero, want.nonzero);
                ck_assert_uint_eq(fbits(st.absmax), fbits(want.absmax));
            }
            /* te_round_f32 over a tensor, in parallel chunks, and te_copy_from_f32 */
            te_tensor *t = te_tensor_new(dt, te_shape(n));
            te_round_stats st, want;
            te_round_f32(t, x, &st);
            uint16_t *tb = tu_bytes(t);
            recount(x, tb, n, dt, &want);
            free(tb);
            ck_assert_int_eq(st.overflow, want.overflow);
            ck_assert_int_eq(st.underflow, want.underflow);
            ck_assert_int_eq(st.nonzero, want.nonzero);
            ck_assert_uint_eq(fbits(st.absmax), fbits(want.absmax));
            te_fill(t, 0.0f);
            te_copy_from_f32(t, x);
            tb = tu_bytes(t);
            for (int64_t i = 0; i < n; i++)
                ck_assert_uint_eq(tb[i], d ? te_f32_to_bf16(x[i]) : te_f32_to_f16(x[i]));
            free(tb);
        }
    }
    te_lowp_portable = false;
    free(x);
    free(r);
}
END_TEST

/* ---- embedding -------------------------------------------------------------- */

START_TEST(test_embedding_golden)
{
    fx_file *f = fx_open("norm.bin");
    te_tensor *w = fx_param(f, "emb_w");
    te_tensor *y = te_embedding(w, fx_tensor(f, "emb_idx"));
    fx_assert_close(y, fx_tensor(f, "emb_y"), 0, 0, "embedding y");
    ck_assert_msg(te_backward_with(y, fx_tensor(f, "emb_dy")) == TE_OK, "%s", te_error());
    /* rows 1 and 4 are picked several times: their grads add up */
    fx_assert_close(w->grad, fx_tensor(f, "emb_dw"), 1e-6, 1e-6, "embedding dweight");
    te_tensor_free(w);
    fx_close(f);
}
END_TEST

static te_tensor *embedding_fn(te_tensor **in, void *ctx) { return te_embedding(in[0], ctx); }

START_TEST(test_embedding_gradcheck)
{
    const int32_t iv[6] = { 2, 0, 2, 3, 3, 2 };
    te_tensor *idx = te_tensor_persistent(TE_I32, te_shape(2, 3));
    tu_write(idx, iv);
    te_tensor *w = gc_random(te_shape(5, 4), -1, 1, 8);
    gc_check("embedding weight", embedding_fn, idx, &w, 1, (bool[]){ true }, 1e-2f, 1e-3f);
    /* rows 1 and 4 are never picked: exactly zero grad */
    for (int k = 0; k < 4; k++)
        ck_assert_msg(te_get(w->grad, 4 + k) == 0.0f && te_get(w->grad, 16 + k) == 0.0f,
                      "unpicked rows got gradient");
    te_tensor_free(w);
    te_tensor_free(idx);
}
END_TEST

START_TEST(test_embedding_errors)
{
    te_tensor *w = te_tensor_zeros(TE_F32, te_shape(6, 3));
    const int32_t iv[4] = { 1, 2, 7, 0 };
    te_tensor *idx = te_tensor_from(TE_I32, te_shape(2, 2), iv);
    int line = __LINE__ + 1;
    ck_assert(te_embedding(w, idx) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_ARG);
    tu_assert_error_has("embedding (Embedding) at ", tu_at(line), "idx[1,0] = 7 (flat position 2)",
                        "weight [6,3]", "[0, 6)");
    const int32_t neg[3] = { 0, -1, 2 };
    line = __LINE__ + 1;
    ck_assert(te_embedding(w, te_tensor_from(TE_I32, te_shape(3), neg)) == NULL);
    tu_assert_error_has(tu_at(line), "idx[1] = -1 (flat position 1)");
    te_tensor *fidx = te_tensor_zeros(TE_F32, te_shape(3));
    line = __LINE__ + 1;
    ck_assert(te_embedding(w, fidx) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_DTYPE);
    tu_assert_error_has(tu_at(line), "idx [3] is f32: i32 indices needed");
    line = __LINE__ + 1;
    ck_assert(te_embedding(te_tensor_zeros(TE_F32, te_shape(6)), idx) == NULL);
    tu_assert_error_has(tu_at(line), "weight [6] and idx [2,2]", "[V,D]");
}
END_TEST

/* ---- dropout ---------------------------------------------------------------- */

/* Fraction of non-zero outputs of dropout(ones) with p. */
static double kept_fraction(te_tensor *y)
{
    int64_t kept = 0;
    float *v = tu_f32(y);
    for (int64_t i = 0; i < y->numel; i++)
        kept += v[i] != 0.0f;
    free(v);
    return (double)kept / (double)y->numel;
}

START_TEST(test_dropout_statistics)
{
    te_tensor *x = te_tensor_new(TE_F32, te_shape(100000));
    te_fill(x, 1.0f);
    const float ps[3] = { 0.1f, 0.3f, 0.5f };
    for (int k = 0; k < 3; k++) {
        te_tensor *y = te_dropout(x, ps[k]);
        ck_assert_msg(y != NULL, "%s", te_error());
        /* 7 standard deviations of a binomial over 1e5 draws is below 0.011 */
        double f = kept_fraction(y);
        ck_assert_msg(fabs(f - (1.0 - ps[k])) < 0.011, "p %g kept %.4f, expected ~%.4f",
                      (double)ps[k], f, 1.0 - ps[k]);
        const float scale = 1.0f / (1.0f - ps[k]);
        float *yv = tu_f32(y);
        for (int64_t i = 0; i < y->numel; i++)
            ck_assert_msg(yv[i] == 0.0f || yv[i] == scale,
                          "p %g element %lld is %g: 0 or %g expected", (double)ps[k], (long long)i,
                          (double)yv[i], (double)scale);
        free(yv);
    }
}
END_TEST

/* The mask of one dropout op at one step: 1 kept, 0 dropped. */
static void mask_of(const te_tensor *y, unsigned char *m)
{
    float *v = tu_f32(y);
    for (int64_t i = 0; i < y->numel; i++)
        m[i] = v[i] != 0.0f;
    free(v);
}

static int64_t mask_diff(const unsigned char *a, const unsigned char *b, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += a[i] != b[i];
    return d;
}

enum { MN = 4096 };

/* Step 0 of a fresh engine with seed: two dropout ops, then step 1. */
static void masks_for_seed(uint64_t seed, unsigned char m[3][MN])
{
    te_shutdown();
    te_init(&(te_config){ .seed = seed, .threads = 2 });
    te_step_begin();
    te_tensor *x = te_tensor_new(TE_F32, te_shape(MN));
    te_fill(x, 2.0f);
    mask_of(te_dropout(x, 0.5f), m[0]);
    mask_of(te_dropout(x, 0.5f), m[1]);
    te_step_end();
    te_step_begin();
    x = te_tensor_new(TE_F32, te_shape(MN));
    te_fill(x, 2.0f);
    mask_of(te_dropout(x, 0.5f), m[2]);
    te_step_end();
}

START_TEST(test_dropout_reproducible)
{
    static unsigned char a[3][MN], b[3][MN], c[3][MN];
    masks_for_seed(5, a);
    masks_for_seed(5, b);
    masks_for_seed(6, c);
    for (int k = 0; k < 3; k++)
        ck_assert_msg(mask_diff(a[k], b[k], MN) == 0, "mask %d differs for the same seed", k);
    /* independent masks with p 0.5 differ in about half the places */
    int64_t ops = mask_diff(a[0], a[1], MN), steps = mask_diff(a[0], a[2], MN);
    int64_t seeds = mask_diff(a[0], c[0], MN);
    ck_assert_msg(ops > MN / 4, "two ops in a step share a mask (%lld differences)",
                  (long long)ops);
    ck_assert_msg(steps > MN / 4, "two steps share a mask (%lld differences)", (long long)steps);
    ck_assert_msg(seeds > MN / 4, "two seeds share a mask (%lld differences)", (long long)seeds);
}
END_TEST

/* Backward applies the forward's mask: dx = dy * mask / (1 - p). */
START_TEST(test_dropout_backward_mask)
{
    const float p = 0.4f;
    te_tensor *x = gc_random(te_shape(3000), 0.5f, 1.5f, 10); /* never 0: mask readable from y */
    x->requires_grad = true;
    te_tensor *y = te_dropout(x, p);
    te_tensor *dy = te_tensor_new(TE_F32, te_shape(3000));
    static float dyv[3000], yv[3000], xv[3000], dxv[3000];
    for (int64_t i = 0; i < 3000; i++)
        dyv[i] = te_rand_uniform(3, 3, (uint64_t)i) - 0.5f;
    tu_write(dy, dyv);
    ck_assert_msg(y && te_backward_with(y, dy) == TE_OK, "%s", te_error());
    ck_assert(te_tensor_read(y, 0, 3000, yv) == TE_OK && te_tensor_read(x, 0, 3000, xv) == TE_OK &&
              te_tensor_read(x->grad, 0, 3000, dxv) == TE_OK);
    const float scale = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < 3000; i++) {
        bool kept = yv[i] != 0.0f;
        float want_y = kept ? xv[i] * scale : 0.0f;
        float want_dx = kept ? dyv[i] * scale : 0.0f;
        ck_assert_msg(yv[i] == want_y, "y[%lld] = %g, expected %g", (long long)i, (double)yv[i],
                      (double)want_y);
        ck_assert_msg(dxv[i] == want_dx, "dx[%lld] = %g, expected %g (kept %d)", (long long)i,
                      (double)dxv[i], (double)want_dx, kept);
    }
    te_tensor_free(x);
}
END_TEST

static te_tensor *dropout_fn(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_dropout(in[0], 0.3f);
}

START_TEST(test_dropout_gradcheck)
{
    te_tensor *x = gc_random(te_shape(8, 8), -1, 1, 12);
    gc_check("dropout (fixed seed)", dropout_fn, NULL, &x, 1, (bool[]){ true }, 1e-2f, 1e-3f);
    te_tensor_free(x);
}
END_TEST

/* Eval mode and p == 0 pass values and gradients through unchanged. */
START_TEST(test_dropout_identity)
{
    te_tensor *x = gc_random(te_shape(50), -1, 1, 13);
    x->requires_grad = true;
    te_tensor *dy = te_tensor_new(TE_F32, te_shape(50));
    te_fill(dy, 0.75f);
    for (int mode = 0; mode < 2; mode++) {
        te_set_training(mode == 1);
        te_tensor *y = te_dropout(x, mode == 1 ? 0.0f : 0.9f);
        ck_assert_msg(y && tu_same_bytes(y, x),
                      "%s: dropout is not the identity", mode ? "p 0" : "eval");
        ck_assert_msg(te_backward_with(y, dy) == TE_OK, "%s", te_error());
        for (int i = 0; i < 50; i++)
            ck_assert_msg(te_get(x->grad, i) == 0.75f, "%s: dx[%d] = %g", mode ? "p 0" : "eval", i,
                          (double)te_get(x->grad, i));
        x->grad_valid = false;
    }
    te_set_training(true);
    te_tensor_free(x);
}
END_TEST

START_TEST(test_dropout_errors)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3));
    int line = __LINE__ + 1;
    ck_assert(te_dropout(x, 1.0f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_ARG);
    tu_assert_error_has("dropout (Dropout) at ", tu_at(line), "x [2,3]", "p = 1 not in [0, 1)");
    line = __LINE__ + 1;
    ck_assert(te_dropout(x, -0.5f) == NULL);
    tu_assert_error_has(tu_at(line), "p = -0.5 not in [0, 1)");
    line = __LINE__ + 1;
    ck_assert(te_dropout(te_tensor_zeros(TE_I32, te_shape(2)), 0.5f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_DTYPE);
    tu_assert_error_has(tu_at(line), "x [2] is i32");
}
END_TEST

/* A NULL input gives NULL from every op here and keeps the first message. */
START_TEST(test_shape_null_input)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3));
    ck_assert(te_reshape(x, 7) == NULL);
    char first[1024];
    snprintf(first, sizeof first, "%s", te_error());
    te_tensor *w = te_tensor_zeros(TE_F32, te_shape(4, 2));
    ck_assert(te_reshape(NULL, 6) == NULL);
    ck_assert(te_flatten(NULL) == NULL);
    ck_assert(te_transpose(NULL, 0, 1) == NULL);
    ck_assert(te_cast(NULL, TE_F16) == NULL);
    ck_assert(te_embedding(NULL, x) == NULL);
    ck_assert(te_embedding(w, NULL) == NULL);
    ck_assert(te_dropout(NULL, 0.5f) == NULL);
    ck_assert_str_eq(te_error(), first);
}
END_TEST

Suite *suite_shape(void)
{
    Suite *s = suite_create("shape");
    TCase *tc = tcase_create("shape");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_reshape_golden);
    tcase_add_test(tc, test_reshape_gradcheck);
    tcase_add_test(tc, test_reshape_i32_and_flatten);
    tcase_add_test(tc, test_reshape_errors);
    tcase_add_test(tc, test_transpose_golden);
    tcase_add_test(tc, test_transpose_gradcheck);
    tcase_add_test(tc, test_transpose_i32_and_errors);
    tcase_add_test(tc, test_cast_bit_patterns);
    tcase_add_test(tc, test_cast_int);
    tcase_add_test(tc, test_cast_gradient);
    tcase_add_test(tc, test_cast_errors);
    tcase_add_test(tc, test_round_stats);
    tcase_add_test(tc, test_half_widen_all_patterns);
    tcase_add_test(tc, test_round_block_exact);
    tcase_add_test(tc, test_embedding_golden);
    tcase_add_test(tc, test_embedding_gradcheck);
    tcase_add_test(tc, test_embedding_errors);
    tcase_add_test(tc, test_dropout_statistics);
    tcase_add_test(tc, test_dropout_reproducible);
    tcase_add_test(tc, test_dropout_backward_mask);
    tcase_add_test(tc, test_dropout_gradcheck);
    tcase_add_test(tc, test_dropout_identity);
    tcase_add_test(tc, test_dropout_errors);
    tcase_add_test(tc, test_shape_null_input);
    suite_add_tcase(s, tc);
    return s;
}
