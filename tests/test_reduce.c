/* test_reduce.c — sum, mean, softmax and log_softmax against PyTorch
 * (fixtures/math.bin) and finite differences. */
#include "fixture.h"
#include "gradcheck.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef te_tensor *(*axis_fn)(te_loc, te_tensor *, int);
typedef te_tensor *(*reduce_fn)(te_loc, te_tensor *, int, bool);

/* Compares y (the op run on CASE.x) with CASE.y, backpropagates CASE.dy and
 * compares x's gradient with CASE.dx. */
static void check_golden(fx_file *f, const char *c, te_tensor *x, te_tensor *y)
{
    char what[96];
    ck_assert_msg(y != NULL, "%s: %s", c, te_error());
    snprintf(what, sizeof what, "%s forward", c);
    fx_assert_close(y, fx_case(f, c, "y"), 1e-6, 1e-5, what);
    ck_assert_msg(te_backward_with(y, fx_case(f, c, "dy")) == TE_OK, "%s backward: %s", c,
                  te_error());
    snprintf(what, sizeof what, "%s gradient", c);
    fx_assert_close(x->grad, fx_case(f, c, "dx"), 1e-5, 1e-4, what);
}

static const struct {
    const char *name;
    axis_fn op;
    int axis;
} softmax_cases[] = {
    { "softmax_ax0", te_softmax_at, 0 },          { "softmax_ax1", te_softmax_at, 1 },
    { "softmax_axm1", te_softmax_at, -1 },        { "log_softmax_ax0", te_log_softmax_at, 0 },
    { "log_softmax_ax1", te_log_softmax_at, 1 },  { "log_softmax_axm1", te_log_softmax_at, -1 },
    { "softmax_b1", te_softmax_at, 1 },           { "log_softmax_big", te_log_softmax_at, 1 },
};

START_TEST(test_softmax_golden)
{
    fx_file *f = fx_open("math.bin");
    const char *c = softmax_cases[_i].name;
    te_tensor *x = fx_case_param(f, c, "x");
    check_golden(f, c, x, softmax_cases[_i].op(TE_HERE, x, softmax_cases[_i].axis));
    te_tensor_free(x);
    fx_close(f);
}
END_TEST

static const struct {
    const char *name;
    reduce_fn op;
    int axis;
    bool keepdim;
} reduce_cases[] = {
    { "sum_ax0", te_sum_at, 0, false },         { "sum_ax1_keep", te_sum_at, 1, true },
    { "sum_axm1", te_sum_at, -1, false },       { "sum_all", te_sum_at, TE_ALL, false },
    { "sum_all_keep", te_sum_at, TE_ALL, true }, { "mean_ax0", te_mean_at, 0, false },
    { "mean_ax1_keep", te_mean_at, 1, true },   { "mean_axm1", te_mean_at, -1, false },
    { "mean_all", te_mean_at, TE_ALL, false },  { "mean_all_keep", te_mean_at, TE_ALL, true },
    { "sum_1d", te_sum_at, 0, false },
};

START_TEST(test_reduce_golden)
{
    fx_file *f = fx_open("math.bin");
    const char *c = reduce_cases[_i].name;
    te_tensor *x = fx_case_param(f, c, "x");
    check_golden(f, c, x,
                 reduce_cases[_i].op(TE_HERE, x, reduce_cases[_i].axis, reduce_cases[_i].keepdim));
    te_tensor_free(x);
    fx_close(f);
}
END_TEST

/* ---- finite differences ------------------------------------------------------ */

typedef struct {
    int kind; /* 0 softmax, 1 log_softmax, 2 sum, 3 mean */
    int axis;
    bool keepdim;
} gc_case;

static te_tensor *gc_apply(te_tensor **in, void *ctx)
{
    const gc_case *c = ctx;
    switch (c->kind) {
    case 0: return te_softmax(in[0], c->axis);
    case 1: return te_log_softmax(in[0], c->axis);
    case 2: return te_sum(in[0], c->axis, c->keepdim);
    default: return te_mean(in[0], c->axis, c->keepdim);
    }
}

START_TEST(test_gradcheck)
{
    static const int axes[] = { 0, 1, 2, -1, -3 };
    static const char *const kinds[] = { "softmax", "log_softmax", "sum", "mean" };
    te_tensor *x = gc_random(te_shape(2, 3, 4), -2.0f, 2.0f, 11);
    for (int kind = 0; kind < 4; kind++) {
        for (int a = 0; a < 5; a++) {
            gc_case c = { kind, axes[a], a % 2 == 1 };
            char what[64];
            snprintf(what, sizeof what, "%s axis %d keepdim %d", kinds[kind], c.axis, c.keepdim);
            gc_check(what, gc_apply, &c, &x, 1, (const bool[]){ true }, 1e-3f, 1e-2f);
        }
        if (kind >= 2) {
            gc_case c = { kind, TE_ALL, false };
            gc_check(kinds[kind], gc_apply, &c, &x, 1, (const bool[]){ true }, 1e-3f, 1e-2f);
        }
    }
    te_tensor_free(x);
}
END_TEST

/* x feeds every op, so every backward but the first accumulates. */
static te_tensor *gc_composite(te_tensor **in, void *ctx)
{
    te_tensor *x = in[0];
    (void)ctx;
    te_tensor *a = te_mul(te_log_softmax(x, 0), te_sum(x, 0, true));
    te_tensor *b = te_add(te_softmax(x, -1), te_mean(x, -1, true));
    return te_add(te_add(a, b), te_sum(te_mean(x, TE_ALL, true), TE_ALL, true));
}

START_TEST(test_accumulating_gradcheck)
{
    te_tensor *x = gc_random(te_shape(3, 4), -2.0f, 2.0f, 12);
    gc_check("composite", gc_composite, NULL, &x, 1, (const bool[]){ true }, 1e-3f, 1e-2f);
    te_tensor_free(x);
}
END_TEST

/* ---- shapes, stability ----------------------------------------------------------- */

START_TEST(test_shapes)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3, 4));
    te_tensor *v = te_tensor_zeros(TE_F32, te_shape(5));
    static const struct {
        int axis;
        bool keep;
        bool vec;
        const char *want;
    } cases[] = {
        { TE_ALL, false, false, "[1]" }, { TE_ALL, true, false, "[1,1,1]" },
        { 1, true, false, "[2,1,4]" },   { 1, false, false, "[2,4]" },
        { -1, false, false, "[2,3]" },   { 0, false, true, "[1]" },
        { 0, true, true, "[1]" },        { TE_ALL, false, true, "[1]" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        for (int mean = 0; mean < 2; mean++) {
            te_tensor *in = cases[k].vec ? v : x;
            te_tensor *y = mean ? te_mean(in, cases[k].axis, cases[k].keep)
                                : te_sum(in, cases[k].axis, cases[k].keep);
            ck_assert_msg(y != NULL, "case %zu: %s", k, te_error());
            char got[96];
            te_shape_str(y->ndim, y->shape, got, sizeof got);
            ck_assert_msg(strcmp(got, cases[k].want) == 0, "%s case %zu: shape %s, expected %s",
                          mean ? "mean" : "sum", k, got, cases[k].want);
        }
    }
    te_tensor *s = te_softmax(x, -2);
    ck_assert_msg(s && te_same_shape(s, x), "softmax keeps the shape: %s", te_error());
    /* an empty axis: softmax has nothing to do, the sum over it is 0, the mean NaN */
    te_tensor *e = te_tensor_zeros(TE_F32, te_shape(2, 0));
    ck_assert_ptr_nonnull(te_softmax(e, 1));
    te_tensor *es = te_sum(e, 1, false), *em = te_mean(e, -1, false);
    ck_assert_msg(es && em && es->numel == 2 && te_get(es, 1) == 0.0f && isnan(te_get(em, 0)),
                  "sum/mean over an empty axis: %s", te_error());
}
END_TEST

START_TEST(test_stability)
{
    te_tensor *x = te_tensor_from(TE_F32, te_shape(2, 3),
                                  (const float[]){ 1000.0f, 0.0f, -1000.0f, NAN, 1.0f, 2.0f });
    te_tensor *s = te_softmax(x, 1), *l = te_log_softmax(x, 1);
    ck_assert_msg(te_get(s, 0) == 1.0f && te_get(s, 1) == 0.0f && te_get(s, 2) == 0.0f,
                  "softmax([1000,0,-1000]) = [%g,%g,%g]", te_get(s, 0), te_get(s, 1), te_get(s, 2));
    ck_assert_msg(te_get(l, 0) == 0.0f && te_get(l, 1) == -1000.0f && te_get(l, 2) == -2000.0f,
                  "log_softmax([1000,0,-1000]) = [%g,%g,%g]", te_get(l, 0), te_get(l, 1),
                  te_get(l, 2));
    /* a NaN poisons its own row, and only that row */
    for (int i = 3; i < 6; i++)
        ck_assert_msg(isnan(te_get(s, i)) && isnan(te_get(l, i)),
                      "row with NaN: softmax %g, log %g", te_get(s, i), te_get(l, i));
    te_tensor *t = te_sum(x, 1, false);
    ck_assert_msg(te_get(t, 0) == 0.0f && isnan(te_get(t, 1)), "sum rows: %g %g", te_get(t, 0),
                  te_get(t, 1));
}
END_TEST

/* ---- errors -------------------------------------------------------------------- */

START_TEST(test_bad_axis)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3));
    ck_assert_ptr_null(te_softmax(x, 2)); const int line = __LINE__;
    tu_assert_error(TE_ERR_ARG, "softmax", "(Softmax)", tu_at(line), "[2,3]", "axis 2");
    ck_assert_ptr_null(te_log_softmax(x, TE_ALL));
    tu_assert_error(TE_ERR_ARG, "log_softmax", "(LogSoftmax)", "[2,3]");
    ck_assert_ptr_null(te_sum(x, -3, false)); const int line2 = __LINE__;
    tu_assert_error(TE_ERR_ARG, "sum", "(Sum)", tu_at(line2), "[2,3]", "axis -3");
    ck_assert_ptr_null(te_mean(x, 5, true));
    tu_assert_error(TE_ERR_ARG, "mean", "(Mean)", "[2,3]", "axis 5");
}
END_TEST

START_TEST(test_bad_dtype)
{
    te_tensor *i = te_tensor_zeros(TE_I32, te_shape(2, 3));
    ck_assert_ptr_null(te_sum(i, 0, false)); const int line = __LINE__;
    tu_assert_error(TE_ERR_DTYPE, "sum", "(Sum)", tu_at(line), "[2,3]", "i32");
    ck_assert_ptr_null(te_log_softmax(i, 1));
    tu_assert_error(TE_ERR_DTYPE, "log_softmax", "(LogSoftmax)", "i32");
}
END_TEST

START_TEST(test_null_input)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3));
    te_tensor *bad = te_softmax(x, 7);
    ck_assert_ptr_null(bad);
    char first[512];
    snprintf(first, sizeof first, "%s", te_error());
    te_status code = te_error_code();
    ck_assert_ptr_null(te_sum(bad, 0, false));
    ck_assert_ptr_null(te_mean(NULL, TE_ALL, false));
    ck_assert_ptr_null(te_log_softmax(NULL, 0));
    ck_assert_int_eq(te_error_code(), code);
    ck_assert_str_eq(te_error(), first);
}
END_TEST

/* ---- half precision --------------------------------------------------------------- */

START_TEST(test_half)
{
    for (int bf = 0; bf < 2; bf++) {
        te_dtype dt = bf ? TE_BF16 : TE_F16;
        te_tensor *xh = te_tensor_new(dt, te_shape(2, 3, 4)),
                  *xf = te_tensor_new(TE_F32, te_shape(2, 3, 4));
        for (int64_t i = 0; i < xh->numel; i++) {
            te_set(xh, i, -3.0f + 6.0f * te_rand_uniform(3, 9, (uint64_t)i));
            te_set(xf, i, te_get(xh, i));
        }
        for (int axis = -1; axis < 3; axis++) {
            te_tensor *a = te_softmax(xh, axis), *b = te_log_softmax(xh, axis);
            ck_assert_msg(a && b && a->dtype == dt && b->dtype == dt, "%s", te_error());
            tu_assert_half_close(a, te_softmax(xf, axis), "softmax");
            tu_assert_half_close(b, te_log_softmax(xf, axis), "log_softmax");
            te_tensor *s = te_sum(xh, axis, false), *m = te_mean(xh, axis, true);
            ck_assert_msg(s && m && s->dtype == dt && m->dtype == dt, "%s", te_error());
            tu_assert_half_close(s, te_sum(xf, axis, false), "sum");
            tu_assert_half_close(m, te_mean(xf, axis, true), "mean");
        }
        tu_assert_half_close(te_sum(xh, TE_ALL, false), te_sum(xf, TE_ALL, false), "sum all");
    }
}
END_TEST

/* ---- sizes past TE_PAR_MIN ------------------------------------------------------------ */

/* Full and per-axis sums and a softmax over 300x200, checked against plain
 * double loops; their results are copied out to compare thread counts. */
static void big_case(float *all, float *col, float *soft)
{
    enum { R = 300, C = 200 };
    te_tensor *x = gc_random(te_shape(R, C), -1.0f, 1.0f, 51);
    x->requires_grad = true;
    te_tensor *s = te_sum(x, TE_ALL, false), *c = te_mean(x, 0, false), *p = te_softmax(x, 0);
    ck_assert_msg(s && c && p, "%s", te_error());
    double want = 0;
    for (int64_t i = 0; i < R * C; i++)
        want += te_get(x, i);
    ck_assert_msg(fabs(te_item(s) - want) < 1e-3, "sum %g, expected %.6f", te_item(s), want);
    for (int64_t j = 0; j < C; j++) {
        double w = 0, ps = 0;
        for (int64_t i = 0; i < R; i++) {
            w += te_get(x, i * C + j);
            ps += te_get(p, i * C + j);
        }
        ck_assert_msg(fabs(te_get(c, j) - w / R) < 1e-6, "mean col %lld: %g, expected %g",
                      (long long)j, te_get(c, j), w / R);
        ck_assert_msg(fabs(ps - 1.0) < 1e-4, "softmax col %lld sums to %g", (long long)j, ps);
    }
    /* d sum / dx is all ones; d mean over axis 0 is 1/R */
    ck_assert_int_eq(te_backward(s), TE_OK);
    for (int64_t i = 0; i < R * C; i += 997)
        ck_assert_float_eq(te_get(x->grad, i), 1.0f);
    *all = te_item(s);
    ck_assert_int_eq(te_tensor_read(c, 0, C, col), TE_OK);
    ck_assert_int_eq(te_tensor_read(p, 0, R * C, soft), TE_OK);
    te_tensor_free(x);
}

START_TEST(test_big_and_thread_invariant)
{
    static float col2[200], col1[200], soft2[300 * 200], soft1[300 * 200];
    float all2, all1;
    big_case(&all2, col2, soft2);
    te_tape_reset();
    te_shutdown();
    te_init(&(te_config){ .seed = 1, .threads = 1 });
    big_case(&all1, col1, soft1);
    ck_assert_msg(all1 == all2, "full sum %.9g with 1 thread, %.9g with 2", all1, all2);
    ck_assert_msg(memcmp(col1, col2, sizeof col1) == 0,
                  "mean over axis 0 differs between thread counts");
    ck_assert_msg(memcmp(soft1, soft2, sizeof soft1) == 0, "softmax differs between thread counts");
}
END_TEST

Suite *suite_reduce(void)
{
    Suite *s = suite_create("reduce");
    TCase *tc = tcase_create("reduce");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_softmax_golden, 0,
                        (int)(sizeof softmax_cases / sizeof softmax_cases[0]));
    tcase_add_loop_test(tc, test_reduce_golden, 0,
                        (int)(sizeof reduce_cases / sizeof reduce_cases[0]));
    tcase_add_test(tc, test_gradcheck);
    tcase_add_test(tc, test_accumulating_gradcheck);
    tcase_add_test(tc, test_shapes);
    tcase_add_test(tc, test_stability);
    tcase_add_test(tc, test_bad_axis);
    tcase_add_test(tc, test_bad_dtype);
    tcase_add_test(tc, test_null_input);
    tcase_add_test(tc, test_half);
    tcase_add_test(tc, test_big_and_thread_invariant);
    suite_add_tcase(s, tc);
    return s;
}
