/* test_elementwise.c — add, sub, mul, div with broadcasting, scale and the
 * activations, against PyTorch (fixtures/math.bin) and finite differences. */
#include "fixture.h"
#include "gradcheck.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Compares y with CASE.y, backpropagates CASE.dy and compares the gradient
 * of each input with CASE.d<name>. */
static void check_golden(fx_file *f, const char *c, te_tensor *y, te_tensor **in,
                         const char *const *names, int n)
{
    char what[96];
    ck_assert_msg(y != NULL, "%s: %s", c, te_error());
    snprintf(what, sizeof what, "%s forward", c);
    fx_assert_close(y, fx_case(f, c, "y"), 1e-6, 1e-5, what);
    ck_assert_msg(te_backward_with(y, fx_case(f, c, "dy")) == TE_OK, "%s backward: %s", c,
                  te_error());
    for (int i = 0; i < n; i++) {
        char field[16];
        snprintf(field, sizeof field, "d%s", names[i]);
        snprintf(what, sizeof what, "%s gradient of %s", c, names[i]);
        fx_assert_close(in[i]->grad, fx_case(f, c, field), 1e-5, 1e-4, what);
    }
}

typedef te_tensor *(*binary_fn)(te_loc, te_tensor *, te_tensor *);
typedef te_tensor *(*unary_fn)(te_loc, te_tensor *);

/* ---- golden values -------------------------------------------------------- */

static const struct {
    const char *name;
    binary_fn op;
} binary_cases[] = {
    { "add_same", te_add_at },  { "add_row", te_add_at },    { "add_lead", te_add_at },
    { "sub_col", te_sub_at },   { "sub_batch1", te_sub_at }, { "mul_outer", te_mul_at },
    { "mul_4d", te_mul_at },    { "div_scalar", te_div_at }, { "div_col", te_div_at },
    { "div_both", te_div_at },
};

START_TEST(test_binary_golden)
{
    fx_file *f = fx_open("math.bin");
    const char *c = binary_cases[_i].name;
    te_tensor *in[2] = { fx_case_param(f, c, "a"), fx_case_param(f, c, "b") };
    te_tensor *y = binary_cases[_i].op(TE_HERE, in[0], in[1]);
    check_golden(f, c, y, in, (const char *[]){ "a", "b" }, 2);
    te_tensor_free(in[0]);
    te_tensor_free(in[1]);
    fx_close(f);
}
END_TEST

static te_tensor *scale_by_2_5(te_loc l, te_tensor *x) { return te_scale_at(l, x, 2.5f); }

static const struct {
    const char *name;
    unary_fn op;
} unary_cases[] = {
    { "scale", scale_by_2_5 }, { "relu", te_relu_at }, { "gelu", te_gelu_at },
    { "tanh", te_tanh_at },    { "sigmoid", te_sigmoid_at }, { "exp", te_exp_at },
    { "log", te_log_at },      { "sqrt", te_sqrt_at },
};

START_TEST(test_unary_golden)
{
    fx_file *f = fx_open("math.bin");
    const char *c = unary_cases[_i].name;
    te_tensor *x = fx_case_param(f, c, "x");
    te_tensor *y = unary_cases[_i].op(TE_HERE, x);
    check_golden(f, c, y, &x, (const char *[]){ "x" }, 1);
    te_tensor_free(x);
    fx_close(f);
}
END_TEST

/* ---- finite differences ------------------------------------------------------ */

static te_tensor *gc_binary(te_tensor **in, void *ctx)
{
    return (*(binary_fn *)ctx)(TE_HERE, in[0], in[1]);
}
static te_tensor *gc_unary(te_tensor **in, void *ctx) { return (*(unary_fn *)ctx)(TE_HERE, in[0]); }

/* Shape pairs that broadcast every way: trailing row, size-1 dims on both
 * sides, a scalar-like [1] on either side, rank 4. */
static const struct {
    int na, nb;
    int64_t a[4], b[4];
} bshapes[] = {
    { 2, 1, { 4, 3 }, { 3 } },
    { 3, 3, { 2, 1, 3 }, { 1, 4, 1 } },
    { 2, 1, { 5, 1 }, { 1 } },
    { 1, 2, { 1 }, { 2, 3 } },
    { 2, 2, { 3, 4 }, { 3, 4 } },
    { 4, 3, { 2, 3, 1, 4 }, { 3, 5, 1 } },
};

START_TEST(test_binary_gradcheck)
{
    static const struct {
        const char *name;
        binary_fn op;
    } ops[] = {
        { "add", te_add_at }, { "sub", te_sub_at }, { "mul", te_mul_at }, { "div", te_div_at }
    };
    const bool both[2] = { true, true };
    for (int k = 0; k < 4; k++) {
        /* div's b stays in [0.5, 2) so 1/b is smooth over eps */
        te_tensor *in[2] = {
            gc_random(bshapes[_i].na, bshapes[_i].a, -1.0f, 1.0f, 10 + (uint64_t)_i),
            k == 3 ? gc_random(bshapes[_i].nb, bshapes[_i].b, 0.5f, 2.0f, 20 + (uint64_t)_i)
                   : gc_random(bshapes[_i].nb, bshapes[_i].b, -1.0f, 1.0f, 20 + (uint64_t)_i),
        };
        char what[64];
        snprintf(what, sizeof what, "%s, shape pair %d", ops[k].name, _i);
        binary_fn op = ops[k].op;
        gc_check(what, gc_binary, &op, in, 2, both, 1e-3f, 1e-2f);
        te_tensor_free(in[0]);
        te_tensor_free(in[1]);
    }
}
END_TEST

START_TEST(test_unary_gradcheck)
{
    unary_fn op = unary_cases[_i].op;
    const char *c = unary_cases[_i].name;
    te_tensor *x;
    if (strcmp(c, "log") == 0 || strcmp(c, "sqrt") == 0) {
        x = gc_random(te_shape(3, 5), 0.5f, 3.0f, 7);
    } else {
        x = gc_random(te_shape(3, 5), -2.0f, 2.0f, 7);
        /* keep every value at least 0.1 from relu's kink at 0 */
        for (int64_t i = 0; i < x->numel; i++) {
            float v = te_get(x, i);
            te_set(x, i, v < 0 ? v - 0.1f : v + 0.1f);
        }
    }
    gc_check(c, gc_unary, &op, &x, 1, (const bool[]){ true }, 1e-3f, 1e-2f);
    te_tensor_free(x);
}
END_TEST

/* x feeds every op here, so each backward after the first adds into x's
 * gradient: this checks the accumulating branch of every kernel. */
static te_tensor *gc_all_unary(te_tensor **in, void *ctx)
{
    te_tensor *x = in[0];
    (void)ctx;
    te_tensor *y = te_add(te_mul(te_tanh(x), te_sigmoid(x)), te_sub(te_gelu(x), te_relu(x)));
    return te_div(te_add(y, te_scale(x, -1.5f)), te_add(te_exp(x), te_sqrt(te_exp(x))));
}

static te_tensor *gc_positive(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_mul(te_log(in[0]), te_sqrt(in[0]));
}

START_TEST(test_accumulating_gradcheck)
{
    te_tensor *x = gc_random(te_shape(4, 3), -2.0f, 2.0f, 17);
    for (int64_t i = 0; i < x->numel; i++) {
        float v = te_get(x, i);
        te_set(x, i, v < 0 ? v - 0.1f : v + 0.1f);
    }
    gc_check("composite of all unary ops", gc_all_unary, NULL, &x, 1, (const bool[]){true}, 1e-3f,
             1e-2f);
    te_tensor *p = gc_random(te_shape(4, 3), 0.5f, 3.0f, 18);
    gc_check("log * sqrt", gc_positive, NULL, &p, 1, (const bool[]){ true }, 1e-3f, 1e-2f);
    te_tensor_free(x);
    te_tensor_free(p);
}
END_TEST

/* ---- shapes, accumulation, NaN ------------------------------------------------ */

START_TEST(test_broadcast_shapes)
{
    static const struct {
        int na, nb, ny;
        int64_t a[4], b[4], y[4];
    } cases[] = {
        { 2, 1, 2, { 4, 3 }, { 3 }, { 4, 3 } },
        { 3, 3, 3, { 2, 1, 3 }, { 1, 4, 1 }, { 2, 4, 3 } },
        { 1, 2, 2, { 1 }, { 2, 3 }, { 2, 3 } },
        { 4, 2, 4, { 3, 1, 1, 5 }, { 4, 1 }, { 3, 1, 4, 5 } },
        { 1, 1, 1, { 1 }, { 1 }, { 1 } },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        te_tensor *a = te_tensor_zeros(TE_F32, cases[k].na, cases[k].a);
        te_tensor *b = te_tensor_zeros(TE_F32, cases[k].nb, cases[k].b);
        te_tensor *y = te_add(a, b);
        ck_assert_msg(y != NULL, "case %zu: %s", k, te_error());
        char got[96], want[96];
        te_shape_str(y->ndim, y->shape, got, sizeof got);
        te_shape_str(cases[k].ny, cases[k].y, want, sizeof want);
        ck_assert_msg(strcmp(got, want) == 0, "case %zu: shape %s, expected %s", k, got, want);
    }
}
END_TEST

/* Tensors with a size-0 dim broadcast, compute nothing and crash nowhere. */
START_TEST(test_empty)
{
    te_tensor *a = te_tensor_zeros(TE_F32, te_shape(3, 0)),
              *b = te_tensor_zeros(TE_F32, te_shape(3, 1));
    te_tensor *y = te_mul(a, b);
    ck_assert_msg(y && y->ndim == 2 && y->shape[0] == 3 && y->shape[1] == 0 && y->numel == 0,
                  "[3,0] * [3,1]: %s", te_error());
    ck_assert_ptr_nonnull(te_gelu(y));
    ck_assert_ptr_null(te_add(a, te_tensor_zeros(TE_F32, te_shape(2))));
    ck_assert_msg(strstr(te_error(), "[3,0]") && strstr(te_error(), "[2]"), "%s", te_error());
}
END_TEST

/* x used twice in one op: both halves of the gradient must land in x.grad. */
START_TEST(test_same_input_twice)
{
    te_tensor *x = gc_random(te_shape(2, 3), -1.0f, 1.0f, 3);
    x->requires_grad = true;
    ck_assert_int_eq(te_backward(te_sum(te_mul(x, x), TE_ALL, false)), TE_OK);
    for (int64_t i = 0; i < x->numel; i++)
        ck_assert_msg(fabsf(te_get(x->grad, i) - 2.0f * te_get(x, i)) < 1e-6f,
                      "d(x*x)/dx[%lld] = %g, expected %g", (long long)i, te_get(x->grad, i),
                      2.0f * te_get(x, i));
    /* a second backward accumulates into the same gradient */
    te_tape_reset();
    ck_assert_int_eq(te_backward(te_sum(te_add(x, x), TE_ALL, false)), TE_OK);
    for (int64_t i = 0; i < x->numel; i++)
        ck_assert_msg(fabsf(te_get(x->grad, i) - (2.0f * te_get(x, i) + 2.0f)) < 1e-6f,
                      "accumulated grad[%lld] = %g, expected %g", (long long)i, te_get(x->grad, i),
                      2.0f * te_get(x, i) + 2.0f);
    te_tensor_free(x);
}
END_TEST

START_TEST(test_nan_propagates)
{
    te_tensor *x = te_tensor_from(TE_F32, te_shape(3), (const float[]){ NAN, -1.0f, 2.0f });
    te_tensor *r = te_relu(x);
    ck_assert_msg(isnan(te_get(r, 0)) && te_get(r, 1) == 0.0f && te_get(r, 2) == 2.0f,
                  "relu([nan,-1,2]) = [%g,%g,%g]", te_get(r, 0), te_get(r, 1), te_get(r, 2));
    te_tensor *s = te_sigmoid(x), *g = te_gelu(x);
    ck_assert_msg(isnan(te_get(s, 0)) && isnan(te_get(g, 0)), "sigmoid/gelu swallowed a NaN: %g %g",
                  te_get(s, 0), te_get(g, 0));
    te_tensor *b = te_tensor_from(TE_F32, te_shape(1), (const float[]){ 1.0f });
    te_tensor *y = te_mul(x, b);
    ck_assert_msg(isnan(te_get(y, 0)) && te_get(y, 1) == -1.0f, "mul: [%g,%g]", te_get(y, 0),
                  te_get(y, 1));
    /* extreme inputs saturate instead of overflowing */
    te_tensor *big = te_tensor_from(TE_F32, te_shape(2), (const float[]){ -200.0f, 200.0f });
    te_tensor *sg = te_sigmoid(big), *th = te_tanh(big);
    ck_assert_msg(te_get(sg, 0) == 0.0f && te_get(sg, 1) == 1.0f && te_get(th, 0) == -1.0f &&
                      te_get(th, 1) == 1.0f,
                  "sigmoid(+-200) = %g %g, tanh = %g %g", te_get(sg, 0), te_get(sg, 1),
                  te_get(th, 0), te_get(th, 1));
}
END_TEST

/* ---- errors -------------------------------------------------------------------- */

START_TEST(test_bad_shape_message)
{
    te_tensor *a = te_tensor_zeros(TE_F32, te_shape(4, 3));
    te_tensor *b = te_tensor_zeros(TE_F32, te_shape(2));
    te_tensor *y = te_add(a, b); const int line = __LINE__;
    ck_assert_ptr_null(y);
    tu_assert_error(TE_ERR_SHAPE, "add", "(Add)", tu_at(line), "[4,3]", "[2]");

    /* every binary op names itself, inside its scope */
    te_scope_push("blk");
    y = te_div(b, a); const int line2 = __LINE__;
    te_scope_pop();
    ck_assert_ptr_null(y);
    tu_assert_error(TE_ERR_SHAPE, "blk/div", "(Div)", tu_at(line2), "[2]", "[4,3]");
    ck_assert_ptr_null(te_sub(a, b));
    tu_assert_error(TE_ERR_SHAPE, "sub", "(Sub)");
    ck_assert_ptr_null(te_mul(te_tensor_zeros(TE_F32, te_shape(2, 3, 4)),
                              te_tensor_zeros(TE_F32, te_shape(3, 1, 4))));
    tu_assert_error(TE_ERR_SHAPE, "mul", "(Mul)", "[2,3,4]", "[3,1,4]");
}
END_TEST

START_TEST(test_bad_dtype)
{
    te_tensor *i = te_tensor_zeros(TE_I32, te_shape(2, 2));
    te_tensor *f = te_tensor_zeros(TE_F32, te_shape(2, 2));
    ck_assert_ptr_null(te_relu(i)); const int line = __LINE__;
    tu_assert_error(TE_ERR_DTYPE, "relu", "(Relu)", tu_at(line), "i32");
    ck_assert_ptr_null(te_add(f, i));
    tu_assert_error(TE_ERR_DTYPE, "add", "(Add)", "f32", "i32");
    ck_assert_ptr_null(te_scale(i, 2.0f));
    tu_assert_error(TE_ERR_DTYPE, "scale", "(Scale)");
}
END_TEST

/* An op given NULL returns NULL and keeps the first failure's message. */
START_TEST(test_null_input)
{
    te_tensor *a = te_tensor_zeros(TE_F32, te_shape(4, 3));
    te_tensor *bad = te_add(a, te_tensor_zeros(TE_F32, te_shape(2)));
    ck_assert_ptr_null(bad);
    char first[512];
    snprintf(first, sizeof first, "%s", te_error());
    te_status code = te_error_code();
    ck_assert_ptr_null(te_relu(bad));
    ck_assert_ptr_null(te_mul(a, bad));
    ck_assert_ptr_null(te_sub(bad, a));
    ck_assert_ptr_null(te_gelu(te_exp(te_scale(bad, 2.0f))));
    ck_assert_int_eq(te_error_code(), code);
    ck_assert_str_eq(te_error(), first);
}
END_TEST

/* ---- half precision --------------------------------------------------------------- */

/* A half tensor of random values and an f32 tensor with exactly the same values. */
static void half_pair(te_dtype dt, int nd, const int64_t *shape, float lo, float hi, uint64_t seed,
                      te_tensor **h, te_tensor **f)
{
    *f = te_tensor_new(TE_F32, nd, shape);
    *h = te_tensor_new(dt, nd, shape);
    for (int64_t i = 0; i < (*f)->numel; i++)
        te_set(*h, i, lo + (hi - lo) * te_rand_uniform(seed, 5, (uint64_t)i));
    for (int64_t i = 0; i < (*f)->numel; i++)
        te_set(*f, i, te_get(*h, i));
}

START_TEST(test_half)
{
    te_tensor *ah, *af, *bh, *bf;
    half_pair(TE_F16, te_shape(2, 1, 3), -2.0f, 2.0f, 1, &ah, &af);
    half_pair(TE_F16, te_shape(4, 1), 0.5f, 2.0f, 2, &bh, &bf);
    static const struct {
        const char *name;
        binary_fn op;
    } ops[] = {
        { "add", te_add_at }, { "sub", te_sub_at }, { "mul", te_mul_at }, { "div", te_div_at }
    };
    for (int k = 0; k < 4; k++) {
        te_tensor *yh = ops[k].op(TE_HERE, ah, bh), *yf = ops[k].op(TE_HERE, af, bf);
        ck_assert_msg(yh && yf, "%s: %s", ops[k].name, te_error());
        ck_assert_msg(yh->dtype == TE_F16, "%s of f16 gave %s", ops[k].name,
                      te_dtype_name(yh->dtype));
        ck_assert_msg(te_same_shape(yh, yf) && yh->numel == 24, "%s: shape", ops[k].name);
        tu_assert_half_close(yh, yf, ops[k].name);
    }
    for (size_t k = 0; k < sizeof unary_cases / sizeof unary_cases[0]; k++) {
        te_tensor *xh, *xf;
        half_pair(TE_F16, te_shape(3, 5), 0.25f, 3.0f, 10 + k, &xh, &xf);
        te_tensor *yh = unary_cases[k].op(TE_HERE, xh), *yf = unary_cases[k].op(TE_HERE, xf);
        ck_assert_msg(yh && yf && yh->dtype == TE_F16, "%s: %s", unary_cases[k].name, te_error());
        tu_assert_half_close(yh, yf, unary_cases[k].name);
    }
    /* bf16 the same way; mixed with f32 the result is f32 */
    te_tensor *xb, *xf;
    half_pair(TE_BF16, te_shape(5), -3.0f, 3.0f, 30, &xb, &xf);
    te_tensor *yb = te_gelu(xb), *yf = te_gelu(xf);
    ck_assert_int_eq(yb->dtype, TE_BF16);
    tu_assert_half_close(yb, yf, "gelu bf16");
    te_tensor *m = te_mul(ah, bf);
    ck_assert_msg(m->dtype == TE_F32, "f16 * f32 gave %s", te_dtype_name(m->dtype));
    te_tensor *mf = te_mul(af, bf);
    for (int64_t i = 0; i < m->numel; i++)
        ck_assert_float_eq(te_get(m, i), te_get(mf, i));
}
END_TEST

/* Gradients through an f16 op come back as f16, close to the f32 ones. */
START_TEST(test_half_backward)
{
    te_tensor *xh = te_tensor_persistent(TE_F16, te_shape(2, 4));
    te_tensor *xf = te_tensor_persistent(TE_F32, te_shape(2, 4));
    te_tensor *bh = te_tensor_persistent(TE_F16, te_shape(4));
    te_tensor *bf = te_tensor_persistent(TE_F32, te_shape(4));
    for (int64_t i = 0; i < 8; i++) {
        te_set(xh, i, -1.5f + 0.4f * (float)i);
        te_set(xf, i, te_get(xh, i));
    }
    for (int64_t i = 0; i < 4; i++) {
        te_set(bh, i, 0.75f + 0.25f * (float)i);
        te_set(bf, i, te_get(bh, i));
    }
    xh->requires_grad = xf->requires_grad = bh->requires_grad = bf->requires_grad = true;
    ck_assert_int_eq(te_backward(te_sum(te_mul(te_gelu(xh), bh), TE_ALL, false)), TE_OK);
    te_tape_reset();
    ck_assert_int_eq(te_backward(te_sum(te_mul(te_gelu(xf), bf), TE_ALL, false)), TE_OK);
    ck_assert_int_eq(xh->grad->dtype, TE_F16);
    ck_assert_int_eq(bh->grad->dtype, TE_F16);
    for (int64_t i = 0; i < 8; i++)
        ck_assert_msg(fabsf(te_get(xh->grad, i) - te_get(xf->grad, i)) <=
                          4e-3f * (1.0f + fabsf(te_get(xf->grad, i))),
                      "dx[%lld]: f16 %g, f32 %g", (long long)i, te_get(xh->grad, i),
                      te_get(xf->grad, i));
    for (int64_t i = 0; i < 4; i++)
        ck_assert_msg(fabsf(te_get(bh->grad, i) - te_get(bf->grad, i)) <=
                          4e-3f * (1.0f + fabsf(te_get(bf->grad, i))),
                      "db[%lld]: f16 %g, f32 %g", (long long)i, te_get(bh->grad, i),
                      te_get(bf->grad, i));
    te_tensor_free(xh);
    te_tensor_free(xf);
    te_tensor_free(bh);
    te_tensor_free(bf);
}
END_TEST

/* ---- sizes past TE_PAR_MIN: the tiled, threaded paths ------------------------------- */

/* y = x + b (b a row over 300 rows) and z = x * s (s one element), both
 * backpropagated; checked against plain loops, in double for the sums. */
static void big_case(float *y_out, float *db_out, float *ds_out)
{
    enum { R = 300, C = 200 };
    te_tensor *x = gc_random(te_shape(R, C), -1.0f, 1.0f, 41);
    te_tensor *b = gc_random(te_shape(C), -1.0f, 1.0f, 42);
    te_tensor *s = gc_random(te_shape(1), 0.5f, 1.0f, 43);
    te_tensor *x1 = gc_random(te_shape(R * C), -1.0f, 1.0f, 41); /* x flat */
    x->requires_grad = b->requires_grad = s->requires_grad = true;
    te_tensor *y = te_add(x, b);
    te_tensor *z = te_mul(x1, s);
    ck_assert_msg(y && z, "%s", te_error());
    /* one assertion per check: Check's asserts are too slow per element */
    int64_t bad_y = -1, bad_z = -1;
    for (int64_t i = 0; i < R * C; i++) {
        if (bad_y < 0 && te_get(y, i) != te_get(x, i) + te_get(b, i % C))
            bad_y = i;
        if (bad_z < 0 && te_get(z, i) != te_get(x1, i) * te_get(s, 0))
            bad_z = i;
    }
    ck_assert_msg(bad_y < 0, "x + b wrong at %lld", (long long)bad_y);
    ck_assert_msg(bad_z < 0, "x * s wrong at %lld", (long long)bad_z);
    te_tensor *dy = gc_random(te_shape(R, C), -1.0f, 1.0f, 44);
    te_tensor *dz = gc_random(te_shape(R * C), -1.0f, 1.0f, 44); /* dy flat */
    ck_assert_int_eq(te_backward_with(y, dy), TE_OK);
    for (int64_t c = 0; c < C; c++) {
        double want = 0;
        for (int64_t r = 0; r < R; r++)
            want += te_get(dy, r * C + c);
        ck_assert_msg(fabs(te_get(b->grad, c) - want) < 1e-4, "db[%lld] = %g, expected %g",
                      (long long)c, te_get(b->grad, c), want);
    }
    ck_assert_msg(tu_same_bytes(x->grad, dy), "dx != dy");
    ck_assert_int_eq(te_tensor_read(y, 0, R * C, y_out), TE_OK);
    ck_assert_int_eq(te_tensor_read(b->grad, 0, C, db_out), TE_OK);
    ck_assert_int_eq(te_backward_with(z, dz), TE_OK);
    double want = 0;
    for (int64_t i = 0; i < R * C; i++)
        want += (double)te_get(dz, i) * te_get(x1, i);
    ck_assert_msg(fabs(te_get(s->grad, 0) - want) < 1e-2, "ds = %g, expected %g",
                  te_get(s->grad, 0), want);
    *ds_out = te_get(s->grad, 0);

    /* a unary op over the same size: gelu and its gradient, element by element */
    te_tensor *x2 = gc_random(te_shape(R * C), -3.0f, 3.0f, 45);
    x2->requires_grad = true;
    te_tensor *u = te_gelu(x2);
    ck_assert_int_eq(te_backward_with(u, dz), TE_OK);
    int64_t bad = -1;
    for (int64_t i = 0; i < R * C && bad < 0; i++) {
        double v = te_get(x2, i), cdf = 0.5 * (1.0 + erf(v / sqrt(2.0)));
        double du = te_get(dz, i) * (cdf + v * exp(-0.5 * v * v) / sqrt(2.0 * M_PI));
        if (fabs(te_get(u, i) - v * cdf) > 1e-6 || fabs(te_get(x2->grad, i) - du) > 1e-6)
            bad = i;
    }
    ck_assert_msg(bad < 0, "gelu or its gradient wrong at %lld of %d", (long long)bad, R * C);
    te_tensor_free(x2);
    te_tensor_free(x);
    te_tensor_free(b);
    te_tensor_free(s);
    te_tensor_free(x1);
    te_tensor_free(dy);
    te_tensor_free(dz);
}

START_TEST(test_big_and_thread_invariant)
{
    static float y2[300 * 200], y1[300 * 200], db2[200], db1[200];
    float ds2, ds1;
    big_case(y2, db2, &ds2);
    te_tape_reset();
    te_shutdown();
    te_init(&(te_config){ .seed = 1, .threads = 1 });
    big_case(y1, db1, &ds1);
    ck_assert_msg(memcmp(y1, y2, sizeof y1) == 0, "add differs between 1 and 2 threads");
    ck_assert_msg(memcmp(db1, db2, sizeof db1) == 0,
                  "bias gradient differs between 1 and 2 threads");
    ck_assert_msg(ds1 == ds2, "scalar gradient %g with 1 thread, %g with 2", ds1, ds2);
}
END_TEST

Suite *suite_elementwise(void)
{
    Suite *s = suite_create("elementwise");
    TCase *tc = tcase_create("elementwise");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_binary_golden, 0,
                        (int)(sizeof binary_cases / sizeof binary_cases[0]));
    tcase_add_loop_test(tc, test_unary_golden, 0,
                        (int)(sizeof unary_cases / sizeof unary_cases[0]));
    tcase_add_loop_test(tc, test_binary_gradcheck, 0, (int)(sizeof bshapes / sizeof bshapes[0]));
    tcase_add_loop_test(tc, test_unary_gradcheck, 0,
                        (int)(sizeof unary_cases / sizeof unary_cases[0]));
    tcase_add_test(tc, test_accumulating_gradcheck);
    tcase_add_test(tc, test_broadcast_shapes);
    tcase_add_test(tc, test_empty);
    tcase_add_test(tc, test_same_input_twice);
    tcase_add_test(tc, test_nan_propagates);
    tcase_add_test(tc, test_bad_shape_message);
    tcase_add_test(tc, test_bad_dtype);
    tcase_add_test(tc, test_null_input);
    tcase_add_test(tc, test_half);
    tcase_add_test(tc, test_half_backward);
    tcase_add_test(tc, test_big_and_thread_invariant);
    suite_add_tcase(s, tc);
    return s;
}
