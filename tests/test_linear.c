/* test_linear.c — matmul and linear: PyTorch goldens (tests/fixtures/conv.bin),
 * finite differences, gradient accumulation, half precision and errors. */
#include "fixture.h"
#include "gradcheck.h"
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATOL 1e-4
#define RTOL 1e-4

/* Compares got with the record CASE.FIELD. */
static void close_to(fx_file *f, const char *c, const char *field, const te_tensor *got)
{
    char what[128];
    snprintf(what, sizeof what, "%s.%s", c, field);
    fx_assert_close(got, fx_case(f, c, field), ATOL, RTOL, what);
}

/* A tape copy of t with every element times s. */
static te_tensor *scaled(const te_tensor *t, float s)
{
    te_tensor *r = te_tensor_new(TE_F32, t->ndim, t->shape);
    for (int64_t i = 0; i < t->numel; i++)
        te_set(r, i, s * te_get(t, i));
    return r;
}

/* ---- matmul --------------------------------------------------------------- */

static void golden_matmul(const char *c)
{
    fx_file *f = fx_open("conv.bin");
    te_tensor *a = fx_case_param(f, c, "a"), *b = fx_case_param(f, c, "b");
    te_tensor *y = te_matmul(a, b);
    close_to(f, c, "y", y);
    ck_assert_msg(te_backward_with(y, fx_case(f, c, "dy")) == TE_OK, "%s", te_error());
    close_to(f, c, "da", a->grad);
    close_to(f, c, "db", b->grad);
    te_tape_reset(); /* no node may outlive the inputs freed here */
    te_tensor_free(a);
    te_tensor_free(b);
    fx_close(f);
}

START_TEST(test_matmul_golden)
{
    golden_matmul("mm");    /* [3,5] @ [5,4] */
    golden_matmul("mm_m1"); /* [1,6] @ [6,3] */
}
END_TEST

static te_tensor *gc_matmul(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_matmul(in[0], in[1]);
}

START_TEST(test_matmul_gradcheck)
{
    te_tensor *in[2] = { gc_random(te_shape(4, 3), -1, 1, 1), gc_random(te_shape(3, 2), -1, 1, 2) };
    gc_check("matmul", gc_matmul, NULL, in, 2, (const bool[]){ true, true }, 1e-2f, 1e-2f);
    /* only one side needing a gradient leaves the other without one */
    gc_check("matmul b only", gc_matmul, NULL, in, 2, (const bool[]){ false, true }, 1e-2f, 1e-2f);
    ck_assert_msg(!in[0]->requires_grad && !in[0]->grad_valid, "a got a gradient");
    te_tensor_free(in[0]);
    te_tensor_free(in[1]);
}
END_TEST

/* Gradients add up: across two backward passes, and within one op whose two
 * inputs are the same tensor (d(a a)/da = dy a^T + a^T dy). */
START_TEST(test_matmul_accumulates)
{
    fx_file *f = fx_open("conv.bin");
    te_tensor *a = fx_case_param(f, "mm", "a"), *b = fx_case_param(f, "mm", "b");
    for (int pass = 0; pass < 2; pass++) {
        te_tensor *y = te_matmul(a, b);
        ck_assert_msg(te_backward_with(y, fx_case(f, "mm", "dy")) == TE_OK, "%s", te_error());
        te_tape_reset();
    }
    fx_assert_close(a->grad, scaled(fx_case(f, "mm", "da"), 2), ATOL, RTOL, "mm.da twice");
    fx_assert_close(b->grad, scaled(fx_case(f, "mm", "db"), 2), ATOL, RTOL, "mm.db twice");

    float av[4] = { 1, 2, 3, 4 }, dv[4] = { 1, -1, 0.5f, 2 };
    te_tensor *sq = te_tensor_persistent(TE_F32, te_shape(2, 2));
    tu_write(sq, av);
    sq->requires_grad = true;
    te_tensor *dy = te_tensor_from(TE_F32, te_shape(2, 2), dv);
    ck_assert(te_backward_with(te_matmul(sq, sq), dy) == TE_OK);
    /* dy a^T = [[-1,-1],[4.5,9.5]], a^T dy = [[2.5,5],[4,6]] */
    const float want[4] = { 1.5f, 4, 8.5f, 15.5f };
    for (int i = 0; i < 4; i++)
        ck_assert_msg(te_get(sq->grad, i) == want[i], "d(a a)/da[%d] = %g, expected %g", i,
                      te_get(sq->grad, i), want[i]);
    te_tensor_free(sq);
    te_tensor_free(a);
    te_tensor_free(b);
    fx_close(f);
}
END_TEST

START_TEST(test_matmul_errors)
{
    te_tensor *a = te_tensor_zeros(TE_F32, te_shape(2, 3));
    te_tensor *b = te_tensor_zeros(TE_F32, te_shape(4, 5));
    int line = __LINE__ + 1;
    ck_assert(te_matmul(a, b) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "matmul", "MatMul", "[2,3]", "[4,5]",
                    "inner dims 3 != 4");

    te_scope_push("proj");
    te_tensor *c = te_tensor_zeros(TE_F32, te_shape(4)); /* batched matmul takes 2 to 4 dims */
    line = __LINE__ + 1;
    ck_assert(te_matmul(c, b) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "proj/matmul", "MatMul", "[4]", "[4,5]", "2 to 4 dims");
    te_scope_pop();

    te_tensor *ia = te_tensor_zeros(TE_I32, te_shape(2, 4));
    line = __LINE__ + 1;
    ck_assert(te_matmul(ia, b) == NULL);
    tu_assert_error(TE_ERR_DTYPE, tu_at(line), "matmul", "MatMul", "i32");

    /* a NULL input (an earlier op failed) keeps the earlier message */
    ck_assert(te_matmul(NULL, b) == NULL);
    tu_assert_error(TE_ERR_DTYPE, tu_at(line), "i32");
    te_error_clear();
    ck_assert(te_matmul(a, NULL) == NULL);
    ck_assert_msg(te_error_code() == TE_ERR_INPUT, "code %d: %s", te_error_code(), te_error());
}
END_TEST

/* Half inputs give a half output close to the f32 result on the same
 * (rounded) values, gradients included; mixing with f32 computes in f32. */
START_TEST(test_matmul_half)
{
    te_tensor *a = gc_random(te_shape(3, 8), -1, 1, 5), *b = gc_random(te_shape(8, 2), -1, 1, 6);
    te_tensor *ah = tu_as_dtype(a, TE_F16), *bh = tu_as_dtype(b, TE_F16);
    tu_copy(a, ah); /* same values in both precisions */
    tu_copy(b, bh);
    a->requires_grad = b->requires_grad = ah->requires_grad = bh->requires_grad = true;

    te_tensor *y = te_matmul(a, b), *yh = te_matmul(ah, bh);
    ck_assert_msg(yh && yh->dtype == TE_F16, "output dtype %s", yh ? te_dtype_name(yh->dtype) : "-");
    fx_assert_close(yh, y, 1e-2, 1e-2, "f16 matmul");
    te_tensor *dy = gc_random(te_shape(3, 2), -1, 1, 7);
    ck_assert(te_backward_with(y, dy) == TE_OK && te_backward_with(yh, dy) == TE_OK);
    ck_assert(ah->grad->dtype == TE_F16);
    fx_assert_close(ah->grad, a->grad, 1e-2, 1e-2, "f16 matmul da");
    fx_assert_close(bh->grad, b->grad, 1e-2, 1e-2, "f16 matmul db");

    te_tensor *mixed = te_matmul(ah, b);
    ck_assert_msg(mixed && mixed->dtype == TE_F32, "f16 @ f32 gave %s",
                  mixed ? te_dtype_name(mixed->dtype) : "-");
    te_tensor *abf = tu_as_dtype(a, TE_BF16), *bbf = tu_as_dtype(b, TE_BF16);
    te_tensor *ybf = te_matmul(abf, bbf);
    ck_assert(ybf && ybf->dtype == TE_BF16);
    fx_assert_close(ybf, y, 5e-2, 5e-2, "bf16 matmul");
    te_tensor *t[] = { a, b, ah, bh, abf, bbf, dy };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        te_tensor_free(t[i]);
}
END_TEST

/* ---- linear --------------------------------------------------------------- */

static void golden_linear(const char *c, bool bias)
{
    fx_file *f = fx_open("conv.bin");
    te_tensor *x = fx_case_param(f, c, "x"), *w = fx_case_param(f, c, "w");
    te_tensor *b = bias ? fx_case_param(f, c, "b") : NULL;
    te_tensor *y = te_linear(x, w, b);
    close_to(f, c, "y", y);
    ck_assert_msg(te_backward_with(y, fx_case(f, c, "dy")) == TE_OK, "%s", te_error());
    close_to(f, c, "dx", x->grad);
    close_to(f, c, "dw", w->grad);
    if (bias)
        close_to(f, c, "db", b->grad);
    te_tape_reset();
    te_tensor_free(x);
    te_tensor_free(w);
    te_tensor_free(b);
    fx_close(f);
}

START_TEST(test_linear_golden)
{
    golden_linear("lin_bias_n5", true);
    golden_linear("lin_bias_n1", true);
    golden_linear("lin_nobias_n5", false);
    golden_linear("lin_nobias_n1", false);
}
END_TEST

static te_tensor *gc_linear(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_linear(in[0], in[1], in[2]);
}

START_TEST(test_linear_gradcheck)
{
    te_tensor *in[3] = { gc_random(te_shape(3, 5), -1, 1, 1), gc_random(te_shape(4, 5), -1, 1, 2),
                         gc_random(te_shape(4), -1, 1, 3) };
    gc_check("linear", gc_linear, NULL, in, 3, (const bool[]){ true, true, true }, 1e-2f, 1e-2f);
    gc_check("linear w only", gc_linear, NULL, in, 3, (const bool[]){ false, true, false }, 1e-2f,
             1e-2f);
    te_tensor_free(in[2]);
    in[2] = NULL;
    gc_check("linear no bias", gc_linear, NULL, in, 3, (const bool[]){ true, true, false }, 1e-2f,
             1e-2f);
    te_tensor_free(in[0]);
    te_tensor_free(in[1]);
}
END_TEST

START_TEST(test_linear_accumulates)
{
    fx_file *f = fx_open("conv.bin");
    const char *c = "lin_bias_n5";
    te_tensor *x = fx_case_param(f, c, "x"), *w = fx_case_param(f, c, "w");
    te_tensor *b = fx_case_param(f, c, "b");
    for (int pass = 0; pass < 2; pass++) {
        ck_assert(te_backward_with(te_linear(x, w, b), fx_case(f, c, "dy")) == TE_OK);
        te_tape_reset();
    }
    fx_assert_close(x->grad, scaled(fx_case(f, c, "dx"), 2), ATOL, RTOL, "dx twice");
    fx_assert_close(w->grad, scaled(fx_case(f, c, "dw"), 2), ATOL, RTOL, "dw twice");
    fx_assert_close(b->grad, scaled(fx_case(f, c, "db"), 2), ATOL, RTOL, "db twice");

    /* y = x x^T: x is both input and weight */
    float xv[4] = { 1, 2, 3, 4 }, dv[4] = { 1, -1, 0.5f, 2 };
    te_tensor *sq = te_tensor_persistent(TE_F32, te_shape(2, 2));
    tu_write(sq, xv);
    sq->requires_grad = true;
    ck_assert(te_backward_with(te_linear(sq, sq, NULL), te_tensor_from(TE_F32, te_shape(2, 2), dv)) ==
              TE_OK);
    /* dy x + dy^T x = [[-2,-2],[6.5,9]] + [[2.5,4],[5,6]] */
    const float want[4] = { 0.5f, 2, 11.5f, 15 };
    for (int i = 0; i < 4; i++)
        ck_assert_msg(te_get(sq->grad, i) == want[i], "d(x x^T)/dx[%d] = %g, expected %g", i,
                      te_get(sq->grad, i), want[i]);
    te_tensor_free(sq);
    te_tensor_free(x);
    te_tensor_free(w);
    te_tensor_free(b);
    fx_close(f);
}
END_TEST

START_TEST(test_linear_errors)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3));
    te_tensor *w = te_tensor_zeros(TE_F32, te_shape(4, 5));
    te_scope_push("fc1");
    int line = __LINE__ + 1;
    ck_assert(te_linear(x, w, NULL) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "fc1/linear", "(Linear)", "x [2,3] and w [4,5]",
                    "inner dims 3 != 5");
    te_scope_pop();

    te_tensor *w3 = te_tensor_zeros(TE_F32, te_shape(4, 3));
    te_tensor *b = te_tensor_zeros(TE_F32, te_shape(3));
    line = __LINE__ + 1;
    ck_assert(te_linear(x, w3, b) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "linear", "Linear", "b [3]", "w [4,3]",
                    "bias must be [4]");

    te_tensor *x1 = te_tensor_zeros(TE_F32, te_shape(3));
    line = __LINE__ + 1;
    ck_assert(te_linear(x1, w3, NULL) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "linear", "Linear", "x [3]", "w [4,3]", "2-D");

    te_tensor *wi = te_tensor_zeros(TE_I32, te_shape(4, 3));
    line = __LINE__ + 1;
    ck_assert(te_linear(x, wi, NULL) == NULL);
    tu_assert_error(TE_ERR_DTYPE, tu_at(line), "linear", "Linear", "w [4,3] is i32");
    te_tensor *bi = te_tensor_zeros(TE_I32, te_shape(4));
    line = __LINE__ + 1;
    ck_assert(te_linear(x, w3, bi) == NULL);
    tu_assert_error(TE_ERR_DTYPE, tu_at(line), "linear", "Linear", "b [4] is i32");

    /* the failures leave the tape usable */
    te_tensor *y = te_linear(x, w3, NULL);
    ck_assert_msg(y && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 4, "linear failed: %s",
                  te_error());
}
END_TEST

START_TEST(test_linear_half)
{
    te_tensor *x = gc_random(te_shape(5, 16), -1, 1, 8), *w = gc_random(te_shape(3, 16), -1, 1, 9);
    te_tensor *b = gc_random(te_shape(3), -1, 1, 10);
    te_tensor *xh = tu_as_dtype(x, TE_F16), *wh = tu_as_dtype(w, TE_F16);
    te_tensor *bh = tu_as_dtype(b, TE_F16);
    tu_copy(x, xh);
    tu_copy(w, wh);
    tu_copy(b, bh);
    te_tensor *t[] = { x, w, b, xh, wh, bh };
    for (int i = 0; i < 6; i++)
        t[i]->requires_grad = true;

    te_tensor *y = te_linear(x, w, b), *yh = te_linear(xh, wh, bh);
    ck_assert_msg(yh && yh->dtype == TE_F16, "output dtype %s", yh ? te_dtype_name(yh->dtype) : "-");
    fx_assert_close(yh, y, 1e-2, 1e-2, "f16 linear");
    te_tensor *dy = gc_random(te_shape(5, 3), -1, 1, 11);
    ck_assert(te_backward_with(y, dy) == TE_OK && te_backward_with(yh, dy) == TE_OK);
    fx_assert_close(xh->grad, x->grad, 1e-2, 1e-2, "f16 linear dx");
    fx_assert_close(wh->grad, w->grad, 1e-2, 1e-2, "f16 linear dw");
    fx_assert_close(bh->grad, b->grad, 1e-2, 1e-2, "f16 linear db");

    te_tensor *nb = te_linear(xh, wh, NULL);
    ck_assert(nb && nb->dtype == TE_F16);
    te_tensor *mixed = te_linear(xh, w, NULL);
    ck_assert_msg(mixed && mixed->dtype == TE_F32, "f16 x with f32 w gave %s",
                  mixed ? te_dtype_name(mixed->dtype) : "-");
    for (int i = 0; i < 6; i++)
        te_tensor_free(t[i]);
    te_tensor_free(dy);
}
END_TEST

/* A shape big enough for OpenBLAS to thread, against a double reference. */
START_TEST(test_linear_large)
{
    enum { N = 64, K = 300, O = 200 };
    te_tensor *x = gc_random(te_shape(N, K), -1, 1, 12), *w = gc_random(te_shape(O, K), -1, 1, 13);
    te_tensor *b = gc_random(te_shape(O), -1, 1, 14);
    te_tensor *y = te_linear(x, w, b);
    te_tensor *want = te_tensor_new(TE_F32, te_shape(N, O));
    float *xs = tu_f32(x), *ws = tu_f32(w), *bs = tu_f32(b), *wv = tu_f32(want);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < O; o++) {
            double s = bs[o];
            for (int k = 0; k < K; k++)
                s += (double)xs[i * K + k] * ws[o * K + k];
            wv[i * O + o] = (float)s;
        }
    tu_write(want, wv);
    free(xs);
    free(ws);
    free(bs);
    free(wv);
    fx_assert_close(y, want, 1e-4, 1e-4, "linear 64x300 @ 300x200");
    te_tensor_free(x);
    te_tensor_free(w);
    te_tensor_free(b);
}
END_TEST

/* y, dx, dw, db of a linear layer on the GEMM te_cpu_gemm_dnnl_allow
 * picked: the three products of a layer (x w^T forward, dy w and dy^T x
 * backward), each transposition the engine asks for. */
static void linear_run(int N, int K, int O, bool dnnl, te_tensor *out[4])
{
    te_cpu_gemm_dnnl_allow(dnnl);
    te_tensor *x = gc_random(te_shape(N, K), -1, 1, 61), *w = gc_random(te_shape(O, K), -1, 1, 62);
    te_tensor *b = gc_random(te_shape(O), -1, 1, 63);
    x->requires_grad = w->requires_grad = b->requires_grad = true;
    te_tensor *y = te_linear(x, w, b);
    te_tensor *dy = gc_random(te_shape(N, O), -1, 1, 64);
    out[0] = tu_as_dtype(y, TE_F32);
    ck_assert(te_backward_with(y, dy) == TE_OK);
    out[1] = tu_as_dtype(x->grad, TE_F32);
    out[2] = tu_as_dtype(w->grad, TE_F32);
    out[3] = tu_as_dtype(b->grad, TE_F32);
    te_tape_reset();
    te_tensor_free(dy);
    te_tensor_free(x);
    te_tensor_free(w);
    te_tensor_free(b);
    te_cpu_gemm_dnnl_allow(true);
}

/* oneDNN's sgemm against OpenBLAS's on the shapes of the MLP, an odd one
 * and one too small to split across threads. */
START_TEST(test_gemm_onednn_matches_openblas)
{
#ifdef HAVE_DNNL
    ck_assert_str_eq(te_cpu_gemm(), "oneDNN sgemm");
#endif
    te_cpu_gemm_dnnl_allow(false);
    ck_assert_str_eq(te_cpu_gemm(), "OpenBLAS sgemm");
    static const int shapes[][3] = { { 128, 784, 1024 }, { 33, 65, 17 }, { 4, 8, 3 } };
    static const char *const names[] = { "y", "dx", "dw", "db" };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        te_tensor *d[4], *r[4];
        linear_run(shapes[k][0], shapes[k][1], shapes[k][2], true, d);
        linear_run(shapes[k][0], shapes[k][1], shapes[k][2], false, r);
        for (int i = 0; i < 4; i++) {
            char what[96];
            snprintf(what, sizeof what, "linear %dx%d -> %d: %s, oneDNN against OpenBLAS", shapes[k][0],
                     shapes[k][1], shapes[k][2], names[i]);
            fx_assert_close(d[i], r[i], 1e-4, 1e-4, what);
            te_tensor_free(d[i]);
            te_tensor_free(r[i]);
        }
    }
}
END_TEST

/* The products again, on OpenBLAS. */
static void setup_openblas(void)
{
    tu_setup();
    te_cpu_gemm_dnnl_allow(false);
}

Suite *suite_linear(void)
{
    Suite *s = suite_create("linear");
    TCase *tc = tcase_create("linear");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_matmul_golden);
    tcase_add_test(tc, test_matmul_gradcheck);
    tcase_add_test(tc, test_matmul_accumulates);
    tcase_add_test(tc, test_matmul_errors);
    tcase_add_test(tc, test_matmul_half);
    tcase_add_test(tc, test_linear_golden);
    tcase_add_test(tc, test_linear_gradcheck);
    tcase_add_test(tc, test_linear_accumulates);
    tcase_add_test(tc, test_linear_errors);
    tcase_add_test(tc, test_linear_half);
    tcase_add_test(tc, test_linear_large);
    tcase_add_test(tc, test_gemm_onednn_matches_openblas);
    suite_add_tcase(s, tc);
    TCase *ob = tcase_create("linear on OpenBLAS");
    tcase_add_checked_fixture(ob, setup_openblas, tu_teardown);
    tcase_add_test(ob, test_matmul_golden);
    tcase_add_test(ob, test_matmul_gradcheck);
    tcase_add_test(ob, test_matmul_accumulates);
    tcase_add_test(ob, test_linear_golden);
    tcase_add_test(ob, test_linear_gradcheck);
    tcase_add_test(ob, test_linear_accumulates);
    tcase_add_test(ob, test_linear_large);
    suite_add_tcase(s, ob);
    return s;
}
