/*
 * test_amp.c — mixed precision: the levels over the op table (autocast's
 * named casts, the precision of each op class, parameters converted at
 * O2/O3), rounding of every op in f16 and bf16 against PyTorch
 * (tests/fixtures/amp.bin), and eager against graph mode over training.
 */
#include "fixture.h"
#include "suites.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the names and dtypes of the ops a hook sees ------------------------------ */

#define SEEN_MAX 64

static struct {
    int n;
    char name[SEEN_MAX][TE_NAME_MAX];
    char type[SEEN_MAX][32];
    te_dtype out[SEEN_MAX];
} seen;

static void on_op(const te_op_record *r, void *user)
{
    (void)user;
    if (r->phase != TE_PHASE_FORWARD || seen.n == SEEN_MAX)
        return;
    snprintf(seen.name[seen.n], TE_NAME_MAX, "%s", r->name);
    snprintf(seen.type[seen.n], 32, "%s", r->type);
    seen.out[seen.n] = r->n_outputs ? r->outputs[0]->dtype : TE_DTYPE_COUNT;
    seen.n++;
}

static int watch(void)
{
    memset(&seen, 0, sizeof seen);
    return te_hook_add(&(te_hooks){ .op_end = on_op }, NULL);
}

/* Fails unless the forward ops seen are exactly names[] with dtypes dts[]. */
static void assert_seen(const char *const *names, const te_dtype *dts, int n)
{
    for (int i = 0; i < n && i < seen.n; i++) {
        ck_assert_msg(strcmp(seen.name[i], names[i]) == 0, "op %d is %s, expected %s", i, seen.name[i], names[i]);
        ck_assert_msg(seen.out[i] == dts[i], "%s outputs %s, expected %s", seen.name[i], te_dtype_name(seen.out[i]),
                      te_dtype_name(dts[i]));
    }
    ck_assert_msg(seen.n == n, "%d ops seen, expected %d (last %s)", seen.n, n, seen.n ? seen.name[seen.n - 1] : "-");
}

static te_tensor *filled(te_dtype dt, int ndim, const int64_t *shape, uint32_t seed)
{
    te_tensor *t = te_tensor_new(TE_F32, ndim, shape);
    float *v = malloc((size_t)t->numel * sizeof *v);
    tu_fill_uniform(v, t->numel, seed, -1.0f, 1.0f);
    tu_write(t, v);
    free(v);
    return dt == TE_F32 ? t : te_cast(t, dt);
}

/* ---- levels -------------------------------------------------------------------- */

START_TEST(test_precision_table)
{
    static const char *types[] = { "MatMul", "Conv2D", "Softmax", "CrossEntropy", "LayerNorm", "Relu", "Add",
                                   "Cast", "LinearGrad", "SoftmaxGrad" };
    static const char *want[TE_AMP_LEVEL_COUNT][10] = {
        { "f32", "f32", "f32", "f32", "f32", "f32", "f32", "f32", "f32", "f32" },
        { "low", "low", "f32", "f32", "f32", "follows", "follows", "follows", "low", "f32" },
        { "low", "low", "f32", "f32", "f32", "follows", "follows", "follows", "low", "f32" },
        { "low", "low", "low", "low", "low", "low", "low", "follows", "low", "low" },
    };
    for (int l = 0; l < TE_AMP_LEVEL_COUNT; l++) {
        ck_assert_int_eq(te_amp_set((te_amp_level)l, TE_BF16), TE_OK);
        for (int i = 0; i < 10; i++) {
            const char *got = te_amp_op_precision(types[i]);
            ck_assert_msg(got && strcmp(got, want[l][i]) == 0, "%s at O%d: %s, expected %s", types[i], l,
                          got ? got : "NULL", want[l][i]);
        }
    }
    ck_assert_ptr_null(te_amp_op_precision("Linearr"));
    ck_assert_ptr_null(te_amp_op_precision(NULL));
    ck_assert_int_eq(te_amp_dtype(), TE_BF16);
    ck_assert_int_eq(te_amp_set(TE_AMP_O0, TE_BF16), TE_OK);
    ck_assert_int_eq(te_amp_dtype(), TE_F32);
}
END_TEST

/* O1: the linear's three f32 inputs get casts named after it, made before
 * it; softmax casts its f16 input up; relu follows its input; a mixed add
 * promotes to f32 without a cast. */
START_TEST(test_o1_autocast)
{
    ck_assert_int_eq(te_amp_set(TE_AMP_O1, TE_F16), TE_OK);
    te_tensor *x = filled(TE_F32, te_shape(4, 8), 1);
    te_tensor *w = te_param_new("fc1.weight", TE_F32, te_shape(3, 8));
    te_tensor *b = te_param_new("fc1.bias", TE_F32, te_shape(3));
    te_init_linear(w, b);
    te_tensor *r = te_tensor_zeros(TE_F32, te_shape(4, 3));
    int h = watch();
    te_scope_push("fc1");
    te_tensor *y = te_linear(x, w, b);
    te_scope_pop();
    te_tensor *a = te_relu(y);
    te_tensor *s = te_softmax(a, -1);
    te_tensor *m = te_add(a, r);
    te_tensor *loss = te_mean(te_add(s, m), TE_ALL, false);
    static const char *names[] = { "fc1/linear/cast_in0", "fc1/linear/cast_in1", "fc1/linear/cast_in2", "fc1/linear",
                                   "relu", "softmax/cast_in0", "softmax", "add", "add_1", "mean" };
    static const te_dtype dts[] = { TE_F16, TE_F16, TE_F16, TE_F16, TE_F16, TE_F32, TE_F32, TE_F32, TE_F32, TE_F32 };
    assert_seen(names, dts, 10);
    ck_assert_str_eq(seen.type[0], "Cast");
    /* the casts are ops of the tape: the gradient reaches the f32 weight */
    ck_assert_int_eq(te_backward(loss), TE_OK);
    ck_assert_ptr_nonnull(w->grad);
    ck_assert_int_eq(w->grad->dtype, TE_F32);
    ck_assert(w->grad_valid);
    te_hook_remove(h);
    /* a tensor in two slots is cast once; a repeated op's casts carry its number */
    h = watch();
    te_matmul(x, te_transpose(x, 0, 1));
    te_matmul(x, te_transpose(x, 0, 1));
    te_mul(y, y);
    static const char *names2[] = { "transpose", "matmul/cast_in0", "matmul/cast_in1", "matmul", "transpose_1",
                                    "matmul_1/cast_in0", "matmul_1/cast_in1", "matmul_1", "mul" };
    static const te_dtype dts2[] = { TE_F32, TE_F16, TE_F16, TE_F16, TE_F32, TE_F16, TE_F16, TE_F16, TE_F16 };
    assert_seen(names2, dts2, 9);
    te_hook_remove(h);
}
END_TEST

/* O2: the parameters become f16 (rounded once); a FOLLOW op runs in f16
 * when an input is f16 (an f32 input cast down) and stays f32 on f32
 * inputs; norms and the loss in f32; O1 brings the parameters back to f32
 * with the rounded values. */
START_TEST(test_o2_params_and_classes)
{
    te_tensor *w = te_param_new("w", TE_F32, te_shape(2, 3));
    te_tensor *g = te_param_new("ln.weight", TE_F32, te_shape(3));
    te_tensor *own = te_param_new("own", TE_BF16, te_shape(3)); /* the program's own low dtype */
    static const float wv[6] = { 1.0f / 3.0f, 70000.0f, -1e-8f, 1.0f, 2049.0f, -0.1f };
    tu_write(w, wv);
    te_fill(g, 1.0f);
    ck_assert_int_eq(te_amp_set(TE_AMP_O2, TE_F16), TE_OK);
    ck_assert_int_eq(w->dtype, TE_F16);
    ck_assert_int_eq(g->dtype, TE_F16);
    ck_assert_int_eq(own->dtype, TE_BF16);
    ck_assert_int_eq(w->nbytes, 12);
    const float want[6] = { 0.333251953125f, INFINITY, -0.0f, 1.0f, 2048.0f, -0.0999755859375f };
    for (int i = 0; i < 6; i++)
        ck_assert_msg(te_get(w, i) == want[i] && signbit(te_get(w, i)) == signbit(want[i]), "w[%d] = %g, expected %g",
                      i, te_get(w, i), want[i]);
    te_tensor *x = filled(TE_F32, te_shape(4, 3), 2);
    int h = watch();
    te_tensor *a = te_tanh(x); /* FOLLOW on f32 only: f32 */
    te_tensor *n = te_layernorm(a, g, NULL, 1e-5f);
    te_tensor *l = te_matmul(n, te_transpose(w, 0, 1));
    te_tensor *r = te_add(l, filled(TE_F32, te_shape(4, 2), 5)); /* FOLLOW on low and f32: low */
    static const char *names[] = { "tanh",   "ln/cast_in1", "ln",          "transpose",
                                   "matmul/cast_in0", "matmul", "add/cast_in1", "add" };
    static const te_dtype dts[] = { TE_F32, TE_F32, TE_F32, TE_F16, TE_F16, TE_F16, TE_F16, TE_F16 };
    assert_seen(names, dts, 8);
    ck_assert_int_eq(l->dtype, TE_F16);
    ck_assert_int_eq(r->dtype, TE_F16);
    te_hook_remove(h);
    te_tape_reset();
    ck_assert_int_eq(te_amp_set(TE_AMP_O1, TE_F16), TE_OK);
    ck_assert_int_eq(w->dtype, TE_F32);
    ck_assert_int_eq(own->dtype, TE_BF16);
    for (int i = 0; i < 6; i++)
        ck_assert(te_get(w, i) == want[i]);
}
END_TEST

/* O2 keeps a batch norm's gamma and beta f32 (Apex's keep_batchnorm_fp32):
 * te_amp_set lowers them with the rest, the first batch norm brings them
 * back (no cast_in1/2), and an Adam update of 1e-3, below bf16's spacing
 * at 1 (2^-8 below, 2^-7 above), reaches the forward pass. O3 lowers them,
 * O2 again restores them; the convolution's weight stays bf16 at O2. */
START_TEST(test_o2_batchnorm_params_f32)
{
    te_tensor *w = te_param_new("conv.weight", TE_F32, te_shape(4, 2, 3, 3));
    te_tensor *g = te_param_new("bn.weight", TE_F32, te_shape(4));
    te_tensor *b = te_param_new("bn.bias", TE_F32, te_shape(4));
    te_tensor *rm = te_tensor_persistent(TE_F32, te_shape(4)), *rv = te_tensor_persistent(TE_F32, te_shape(4));
    te_init_linear(w, NULL);
    te_fill(g, 1.0f);
    te_fill(rv, 1.0f);
    ck_assert_int_eq(te_amp_set(TE_AMP_O2, TE_BF16), TE_OK);
    ck_assert_int_eq(g->dtype, TE_BF16); /* not known as a batch norm's yet */
    te_optim *opt = te_adam_new(te_params(), te_param_count(), &(te_adam_opts){ .lr = 1e-3f });
    te_tensor *x = filled(TE_F32, te_shape(2, 2, 4, 4), 7);
    int h = watch();
    te_tensor *conv = te_conv2d(x, w, NULL, 1, 1);
    te_tensor *y = te_batchnorm(conv, g, b, rm, rv, 0.1f, 1e-5f);
    /* the activations stay low through the norm: no cast of x, none of y */
    static const char *names[] = { "conv/cast_in0", "conv", "bn" };
    static const te_dtype dts[] = { TE_BF16, TE_BF16, TE_BF16 };
    assert_seen(names, dts, 3);
    te_hook_remove(h);
    ck_assert_int_eq(g->dtype, TE_F32);
    ck_assert_int_eq(b->dtype, TE_F32);
    ck_assert_int_eq(w->dtype, TE_BF16);
    ck_assert(te_get(g, 0) == 1.0f && te_get(b, 0) == 0.0f);
    /* computed in f32 from the bf16 input, rounded once: within half an ulp
     * of bf16 (at most 2^-8 relative) of a double-precision normalisation */
    for (int ch = 0; ch < 4; ch++) {
        double sum = 0, sq = 0;
        for (int i = 0; i < 2 * 16; i++) {
            const double v = te_get(conv, (i / 16) * 64 + ch * 16 + i % 16);
            sum += v;
            sq += v * v;
        }
        const double mean = sum / 32, rstd = 1.0 / sqrt(sq / 32 - mean * mean + 1e-5);
        for (int i = 0; i < 2 * 16; i++) {
            const int64_t at = (i / 16) * 64 + ch * 16 + i % 16;
            const double want = (te_get(conv, at) - mean) * rstd;
            ck_assert_msg(fabs(te_get(y, at) - want) <= fabs(want) / 256 + 1e-6, "y[%lld] = %g, f32 %g",
                          (long long)at, te_get(y, at), want);
        }
    }
    /* y * y: each channel's gamma gets a non-zero gradient */
    ck_assert_int_eq(te_backward(te_sum(te_mul(y, y), TE_ALL, false)), TE_OK);
    ck_assert_int_eq(g->grad->dtype, TE_F32);
    ck_assert_int_eq(te_optim_step(opt), TE_OK);
    for (int c = 0; c < 4; c++) {
        const float d = fabsf(te_get(g, c) - 1.0f);
        ck_assert_msg(d > 0.9e-3f && d < 1.1e-3f, "gamma[%d] = %.8f: the update of 1e-3 is not in the forward's value",
                      c, te_get(g, c));
    }
    te_tape_reset();
    ck_assert_int_eq(te_amp_set(TE_AMP_O3, TE_BF16), TE_OK);
    ck_assert_int_eq(g->dtype, TE_BF16);
    ck_assert_int_eq(te_amp_set(TE_AMP_O2, TE_F16), TE_OK);
    ck_assert_int_eq(g->dtype, TE_F32);
    ck_assert_int_eq(b->dtype, TE_F32);
    ck_assert_int_eq(w->dtype, TE_F16);
    ck_assert_int_eq(te_amp_set(TE_AMP_O0, TE_F32), TE_OK);
    ck_assert_int_eq(w->dtype, TE_F32);
    ck_assert_int_eq(g->dtype, TE_F32);
    te_optim_free(opt);
    te_tensor_free(rm);
    te_tensor_free(rv);
}
END_TEST

/* O3: every op in the low dtype, softmax and the loss too. */
START_TEST(test_o3_everything_low)
{
    ck_assert_int_eq(te_amp_set(TE_AMP_O3, TE_BF16), TE_OK);
    te_tensor *x = filled(TE_F32, te_shape(4, 5), 3);
    te_tensor *lab = te_tensor_zeros(TE_I32, te_shape(4));
    int h = watch();
    te_tensor *loss = te_cross_entropy(te_softmax(x, -1), lab);
    static const char *names[] = { "softmax/cast_in0", "softmax", "cross_entropy" };
    static const te_dtype dts[] = { TE_BF16, TE_BF16, TE_BF16 };
    assert_seen(names, dts, 3);
    ck_assert(isfinite(te_item(loss)));
    te_hook_remove(h);
}
END_TEST

/* A wrong dtype is refused as given, with no cast made; te_amp_set checks
 * its arguments and refuses to run inside a step. */
START_TEST(test_errors)
{
    ck_assert_int_eq(te_amp_set(TE_AMP_O1, TE_F16), TE_OK);
    te_tensor *i = te_tensor_zeros(TE_I32, te_shape(2, 2));
    te_tensor *f = filled(TE_F32, te_shape(2, 2), 4);
    int h = watch();
    ck_assert_ptr_null(te_matmul(i, f));
    tu_assert_error(TE_ERR_DTYPE, "matmul (MatMul)", "a [2,2] is i32");
    ck_assert_int_eq(seen.n, 0);
    te_hook_remove(h);
    ck_assert_int_eq(te_amp_set(TE_AMP_O2, TE_I32), TE_ERR_ARG);
    tu_assert_error_has("f16 or bf16");
    ck_assert_int_eq(te_amp_set((te_amp_level)7, TE_F16), TE_ERR_ARG);
    te_step_begin();
    ck_assert_int_eq(te_amp_set(TE_AMP_O2, TE_F16), TE_ERR_STATE);
    tu_assert_error_has("between steps");
    te_step_end();
    ck_assert_int_eq(te_amp_level_get(), TE_AMP_O1);
}
END_TEST

/* ---- rounding against PyTorch (tests/fixtures/amp.bin) -------------------------
 * Each op runs on inputs in the low dtype (at O0: the op's own rounding,
 * not autocast's) and its output is compared with PyTorch's f32 result
 * rounded by .to(float16/bfloat16). ulp 0: bit for bit (the f32 result is
 * exact or correctly rounded in both, so one rounding gives the same bits:
 * elementwise arithmetic, data movement, every overflow case); ulp 1: the
 * f32 results may differ in their last f32 bits (another summation order,
 * another exp or tanh), which moves a result lying at a rounding boundary of
 * the low dtype by one of its ulps. GELU: also within 1.5e-7 |x| of
 * PyTorch's, the error of the engine's Phi (Abramowitz and Stegun 7.1.26,
 * cpu_math.h) times x: in the far negative tail, where GELU is a few 1e-4,
 * that is a few f16 ulps. */

static te_tensor *persistent_filled(int64_t n, float v)
{
    te_tensor *t = te_tensor_persistent(TE_F32, te_shape(n));
    te_fill(t, v);
    return t;
}

static te_tensor *run_case(const char *c, te_tensor **x, te_dtype dt)
{
#define IS(n) (strcmp(c, n) == 0)
    if (IS("matmul") || IS("matmul_batched") || IS("matmul_ovf")) return te_matmul(x[0], x[1]);
    if (IS("linear")) return te_linear(x[0], x[1], x[2]);
    if (IS("add") || IS("add_ovf")) return te_add(x[0], x[1]);
    if (IS("sub")) return te_sub(x[0], x[1]);
    if (IS("mul") || IS("mul_ovf") || IS("mul_sub")) return te_mul(x[0], x[1]);
    if (IS("div")) return te_div(x[0], x[1]);
    if (IS("scale")) return te_scale(x[0], 0.3f);
    if (IS("relu")) return te_relu(x[0]);
    if (IS("gelu")) return te_gelu(x[0]);
    if (IS("tanh")) return te_tanh(x[0]);
    if (IS("sigmoid")) return te_sigmoid(x[0]);
    if (IS("exp") || IS("exp_ovf") || IS("exp_sub")) return te_exp(x[0]);
    if (IS("log")) return te_log(x[0]);
    if (IS("sqrt")) return te_sqrt(x[0]);
    if (IS("softmax")) return te_softmax(x[0], -1);
    if (IS("log_softmax")) return te_log_softmax(x[0], -1);
    if (IS("cross_entropy")) return te_cross_entropy(x[0], x[1]);
    if (IS("mse") || IS("mse_ovf")) return te_mse(x[0], x[1]);
    if (IS("conv2d")) return te_conv2d(x[0], x[1], x[2], 1, 1);
    if (IS("maxpool2d")) return te_maxpool2d(x[0], 2, 2, 0);
    if (IS("avgpool2d")) return te_avgpool2d(x[0], 2, 2, 0);
    if (IS("global_avgpool")) return te_global_avgpool(x[0]);
    if (IS("batchnorm")) {
        te_tensor *rm = persistent_filled(4, 0.0f), *rv = persistent_filled(4, 1.0f);
        te_tensor *y = te_batchnorm(x[0], x[1], x[2], rm, rv, 0.1f, 1e-5f);
        te_tensor_free(rm);
        te_tensor_free(rv);
        return y;
    }
    if (IS("layernorm")) return te_layernorm(x[0], x[1], x[2], 1e-5f);
    if (IS("dropout_eval")) {
        te_set_training(false);
        te_tensor *y = te_dropout(x[0], 0.5f);
        te_set_training(true);
        return y;
    }
    if (IS("reshape")) return te_reshape(x[0], 6, 4);
    if (IS("flatten")) return te_flatten(x[0]);
    if (IS("transpose")) return te_transpose(x[0], 0, 2);
    if (IS("sum") || IS("sum_ovf")) return te_sum(x[0], IS("sum") ? 1 : TE_ALL, false);
    if (IS("mean")) return te_mean(x[0], TE_ALL, false);
    if (IS("embedding")) return te_embedding(x[0], x[1]);
    if (IS("cast")) return te_cast(x[0], dt);
    if (IS("masked_fill")) return te_masked_fill(x[0], x[1], -1e4f);
#undef IS
    return NULL;
}

/* The ordered integer of a value of dt (sign and magnitude to a line). */
static int32_t ordered(float v, te_dtype dt)
{
    const uint16_t b = dt == TE_F16 ? te_f32_to_f16(v) : te_f32_to_bf16(v);
    return b & 0x8000u ? -(int32_t)(b & 0x7fffu) : (int32_t)b;
}

enum { F16 = 1, BF16 = 2, BOTH = 3 };
static const struct {
    const char *name;
    unsigned dts; /* F16 | BF16: the dtypes the fixture has */
    int n_in;
    unsigned keep; /* inputs not cast to the low dtype: i32 indices, f32 masks, a cast's source */
    int ulp;
} amp_cases[] = {
    { "matmul", BOTH, 2, 0, 1 },      { "matmul_batched", BOTH, 2, 0, 1 }, { "matmul_ovf", F16, 2, 0, 0 },
    { "linear", BOTH, 3, 0, 1 },      { "add", BOTH, 2, 0, 0 },            { "add_ovf", F16, 2, 0, 0 },
    { "sub", BOTH, 2, 0, 0 },         { "mul", BOTH, 2, 0, 0 },            { "mul_ovf", BF16, 2, 0, 0 },
    { "mul_sub", F16, 2, 0, 0 },      { "div", BOTH, 2, 0, 0 },            { "scale", BOTH, 1, 0, 0 },
    { "relu", BOTH, 1, 0, 0 },        { "gelu", BOTH, 1, 0, 1 },           { "tanh", BOTH, 1, 0, 1 },
    { "sigmoid", BOTH, 1, 0, 1 },     { "exp", BOTH, 1, 0, 1 },            { "exp_ovf", F16, 1, 0, 0 },
    { "exp_sub", F16, 1, 0, 1 },      { "log", BOTH, 1, 0, 1 },            { "sqrt", BOTH, 1, 0, 0 },
    { "softmax", BOTH, 1, 0, 1 },     { "log_softmax", BOTH, 1, 0, 1 },    { "cross_entropy", BOTH, 2, 2, 1 },
    { "mse", BOTH, 2, 0, 1 },         { "mse_ovf", F16, 2, 0, 0 },         { "conv2d", BOTH, 3, 0, 1 },
    { "maxpool2d", BOTH, 1, 0, 0 },   { "avgpool2d", BOTH, 1, 0, 1 },      { "global_avgpool", BOTH, 1, 0, 1 },
    { "batchnorm", BOTH, 3, 0, 1 },   { "layernorm", BOTH, 3, 0, 1 },      { "dropout_eval", BOTH, 1, 0, 0 },
    { "reshape", BOTH, 1, 0, 0 },     { "flatten", BOTH, 1, 0, 0 },        { "transpose", BOTH, 1, 0, 0 },
    { "sum", BOTH, 1, 0, 1 },         { "sum_ovf", F16, 1, 0, 0 },         { "mean", BOTH, 1, 0, 1 },
    { "embedding", BOTH, 2, 2, 0 },   { "cast", BOTH, 1, 1, 0 },           { "masked_fill", BOTH, 2, 2, 0 },
};
#define N_AMP_CASES ((int)(sizeof amp_cases / sizeof amp_cases[0]))

/* One case in each of its dtypes (_i: the case): every element within the
 * case's ulps of PyTorch's, infinities and signed zeros included. */
START_TEST(test_rounding_vs_torch)
{
    const char *c = amp_cases[_i].name;
    fx_file *f = fx_open("amp.bin");
    bool overflowed = false;
    for (int d = 0; d < 2; d++) {
        if (!(amp_cases[_i].dts & 1u << d))
            continue;
        const te_dtype dt = d ? TE_BF16 : TE_F16;
        const char *dn = d ? "bf16" : "f16";
        te_tensor *x[5];
        for (int k = 0; k < amp_cases[_i].n_in; k++) {
            char field[16];
            snprintf(field, sizeof field, "x%d", k);
            char cname[64];
            snprintf(cname, sizeof cname, "%s.%s", dn, c);
            x[k] = fx_case(f, cname, field);
            if (!(amp_cases[_i].keep & 1u << k) && x[k]->dtype == TE_F32)
                x[k] = te_cast(x[k], dt); /* exact: the fixture holds values of dt */
        }
        char cname[64];
        snprintf(cname, sizeof cname, "%s.%s", dn, c);
        te_tensor *want = fx_case(f, cname, "y");
        te_tensor *y = run_case(c, x, dt);
        ck_assert_msg(y != NULL, "%s %s: %s", dn, c, te_error());
        ck_assert_msg(y->dtype == dt, "%s %s: the output is %s", dn, c, te_dtype_name(y->dtype));
        ck_assert_msg(y->numel == want->numel, "%s %s: %lld elements, PyTorch %lld", dn, c, (long long)y->numel,
                      (long long)want->numel);
        for (int64_t i = 0; i < y->numel; i++) {
            const float g = te_get(y, i), w = te_get(want, i);
            const int32_t dist = abs(ordered(g, dt) - ordered(w, dt));
            overflowed |= isinf(w);
            const bool phi_err = strcmp(c, "gelu") == 0 && fabsf(g - w) <= 1.5e-7f * fabsf(te_get(x[0], i));
            ck_assert_msg((dist <= amp_cases[_i].ulp || phi_err) && isinf(w) == isinf(g) && signbit(g) == signbit(w),
                          "%s %s[%lld]: %.9g, PyTorch %.9g: %d ulps of %s (bound %d)", dn, c, (long long)i, g, w,
                          dist, dn, amp_cases[_i].ulp);
        }
        te_tape_reset();
    }
    ck_assert_msg(!strstr(c, "_ovf") || overflowed, "%s: the overflow case does not overflow", c);
    fx_close(f);
}
END_TEST

/* ---- eager against graph mode -------------------------------------------------- */

typedef struct {
    te_tensor *p[4];
    te_optim *opt;
} mlp;

static te_status mlp_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    mlp *m = ctx;
    te_scope_push("fc1");
    te_tensor *h = te_relu(te_linear(in[0], m->p[0], m->p[1]));
    te_scope_pop();
    te_scope_push("fc2");
    out[1] = te_linear(h, m->p[2], m->p[3]);
    te_scope_pop();
    out[0] = te_cross_entropy(out[1], in[1]);
    te_status st = te_backward(out[0]);
    return st == TE_OK ? te_optim_step(m->opt) : st;
}

/* Trains the MLP at level for steps steps in mode from seed 3; the losses,
 * and in `seen` the forward ops of the last step. */
static te_graph_stats train_mlp(te_amp_level level, te_dtype low, te_mode mode, int steps, float *losses)
{
    te_shutdown();
    te_init(&(te_config){ .seed = 3, .threads = 2 });
    mlp m;
    te_dataset *d = te_dataset_blobs(512, 16, 4, 3);
    m.p[0] = te_param_new("fc1.weight", TE_F32, te_shape(32, 16));
    m.p[1] = te_param_new("fc1.bias", TE_F32, te_shape(32));
    m.p[2] = te_param_new("fc2.weight", TE_F32, te_shape(4, 32));
    m.p[3] = te_param_new("fc2.bias", TE_F32, te_shape(4));
    te_init_linear(m.p[0], m.p[1]);
    te_init_linear(m.p[2], m.p[3]);
    ck_assert_int_eq(te_amp_set(level, low), TE_OK);
    m.opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.05f, .momentum = 0.9f });
    te_loader *ld = te_loader_new(d, &(te_loader_opts){ .batch = 16, .shuffle = true, .drop_remainder = true });
    te_graph *g = te_graph_new(mlp_step, &m, &(te_graph_opts){ .mode = mode, .n_inputs = 2, .n_outputs = 2 });
    int h = -1;
    for (int s = 0; s < steps; s++) {
        te_tensor *in[2], *out[2];
        te_step_begin();
        ck_assert(te_loader_next(ld, &in[0], &in[1]) == TE_OK);
        if (s == steps - 1)
            h = watch();
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s step %d: %s", te_mode_name(mode), s, te_error());
        losses[s] = te_item(out[0]);
        te_step_end();
    }
    te_hook_remove(h);
    te_graph_stats st = te_graph_stats_get(g);
    te_graph_free(g);
    te_optim_free(m.opt);
    te_loader_free(ld);
    te_dataset_free(d);
    return st;
}

/* 200 steps per level and dtype (_i: level 1..3 times 2 dtypes): the losses
 * of eager and graph mode within 1e-5 relative (docs/amp.md "Rounding":
 * graph mode rounds where eager mode does, so in fact equal), the same ops
 * under the same names in both (the casts included), and learning. */
START_TEST(test_eager_graph_parity)
{
    enum { STEPS = 200 };
    const te_amp_level level = (te_amp_level)(1 + _i / 2);
    const te_dtype low = _i % 2 ? TE_BF16 : TE_F16;
    float eager[STEPS], graph[STEPS], f32[STEPS];
    train_mlp(TE_AMP_O0, low, TE_MODE_EAGER, STEPS, f32);
    train_mlp(level, low, TE_MODE_EAGER, STEPS, eager);
    int n_eager = seen.n;
    char names[SEEN_MAX][TE_NAME_MAX];
    memcpy(names, seen.name, sizeof names);
    te_graph_stats st = train_mlp(level, low, TE_MODE_GRAPH, STEPS, graph);
    ck_assert_int_eq(st.variants, 1); /* compiled once, the casts in the plan */
    ck_assert_int_gt(st.kernels, 0);
    ck_assert_int_eq(seen.n, n_eager);
    for (int i = 0; i < n_eager; i++)
        ck_assert_str_eq(seen.name[i], names[i]);
    ck_assert_str_eq(names[0], "fc1/linear/cast_in0"); /* the f32 batch */
    ck_assert_str_eq(names[1], level == TE_AMP_O1 ? "fc1/linear/cast_in1" : "fc1/linear"); /* f16 weights from O2 */
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(fabsf(eager[s] - graph[s]) <= 1e-5f * fabsf(eager[s]),
                      "%s %s step %d: loss %.9g eager, %.9g graph", te_amp_level_name(level), te_dtype_name(low), s,
                      eager[s], graph[s]);
    ck_assert_msg(eager[1] != f32[1], "%s %s step 1: the loss of O0 (%.9g): nothing was rounded",
                  te_amp_level_name(level), te_dtype_name(low), f32[1]);
    ck_assert_msg(graph[STEPS - 1] < 0.5f * graph[0], "%s %s did not learn: %g -> %g", te_amp_level_name(level),
                  te_dtype_name(low), graph[0], graph[STEPS - 1]);
}
END_TEST

/* Causal attention in graph mode fuses at every level. Under AMP (q, k, v
 * in the low dtype) the fused kernel keeps its scores and probabilities in
 * f32 and rounds o (and dq, dk, dv) once, where the composed chain (graph
 * mode with the pass off, or eager mode: the same bits) also rounds the
 * scores and the probabilities: so the fused result is the closer one to
 * exact attention. Bounds in ulps of the low dtype at each tensor's largest
 * magnitude (docs/amp.md "Rounding"), measured over these inputs, with
 * margin. */
#define ATTN_ULP_EXACT 1 /* fused vs attention in double on the same inputs (measured: 0.50 f16, 0.70 bf16) */
#define ATTN_ULP_F16 2   /* fused vs composed, f16 (measured: 1; composed vs exact 1.18) */
#define ATTN_ULP_BF16 4  /* fused vs composed, bf16 (measured: 2; composed vs exact 1.81) */
enum { AB = 1, AH = 2, AT = 16, AD = 8, AN = AB * AH * AT * AD };

typedef struct {
    te_tensor *q, *k, *v;
} qkv;

static te_status attn_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    (void)in;
    qkv *a = ctx;
    out[1] = te_causal_attention(a->q, a->k, a->v, 0.0f);
    out[0] = te_mean(out[1], TE_ALL, false);
    return te_backward(out[0]);
}

/* The rounding the hooks saw on out's forward record. */
static te_round_stats out_round;
static bool out_rounded;

static void on_out(const te_op_record *r, void *user)
{
    (void)user;
    if (r->phase == TE_PHASE_FORWARD && strcmp(r->name, "out") == 0) {
        out_rounded = r->round != NULL;
        if (r->round)
            out_round = r->round[0];
    }
}

/* One step's out, then the gradients of q, k, v, as f32, in got[4][AN];
 * the inputs as the chain reads them (rounded to low under AMP) in x[3][AN];
 * the number of fused kernels. */
static int attn_run(te_amp_level level, te_dtype low, te_mode mode, unsigned disable, float got[4][AN],
                    float x[3][AN])
{
    te_shutdown();
    te_init(&(te_config){ .seed = 5, .threads = 2 });
    qkv a = { te_param_new("q", TE_F32, te_shape(AB, AH, AT, AD)), te_param_new("k", TE_F32, te_shape(AB, AH, AT, AD)),
              te_param_new("v", TE_F32, te_shape(AB, AH, AT, AD)) };
    te_tensor *p[3] = { a.q, a.k, a.v };
    for (int i = 0; i < 3; i++)
        te_init_uniform(p[i], -2.0f, 2.0f);
    ck_assert_int_eq(te_amp_set(level, low), TE_OK);
    for (int i = 0; i < 3; i++)
        for (int e = 0; e < AN; e++) {
            const float f = te_get(p[i], e); /* at O1 the casts round it on the way in */
            x[i][e] = level == TE_AMP_O0 ? f : low == TE_F16 ? te_f16_to_f32(te_f32_to_f16(f))
                                                            : te_bf16_to_f32(te_f32_to_bf16(f));
        }
    int h = te_hook_add(&(te_hooks){ .op_end = on_out }, NULL);
    out_rounded = false;
    te_graph *g = te_graph_new(attn_step, &a, &(te_graph_opts){ .mode = mode, .n_inputs = 0, .n_outputs = 2,
                                                               .disable = disable });
    te_tensor *out[2];
    te_step_begin();
    ck_assert_msg(te_graph_run(g, NULL, out) == TE_OK, "%s", te_error());
    ck_assert_int_eq(out[1]->numel, AN);
    for (int e = 0; e < AN; e++) {
        got[0][e] = te_get(out[1], e);
        for (int i = 0; i < 3; i++)
            got[1 + i][e] = te_get(p[i]->grad, e);
    }
    te_step_end();
    const int fused = te_graph_stats_get(g).fused;
    te_graph_free(g);
    te_hook_remove(h);
    return fused;
}

/* The ulp of dt at magnitude m (m > 0): the spacing of dt's values there. */
static double ulp_at(double m, te_dtype dt)
{
    return ldexp(1.0, (int)floor(log2(m)) - (dt == TE_F16 ? 10 : 7));
}

/* The distance of a and b in ulps of dt at the magnitude m: a tensor's
 * largest. (Per element a sum that cancels to near zero has ulps far finer
 * than the rounding of its terms: compared there, any reordering counts
 * hundreds.) */
static double ulps(double a, double b, double m, te_dtype dt)
{
    return fabs(a - b) / ulp_at(m, dt);
}

/* Exact causal attention in double on x, o and the gradients of mean(o). */
static void attn_exact(float x[3][AN], double ref[4][AN])
{
    memset(ref, 0, 4 * sizeof ref[0]);
    const double scale = 1.0 / sqrt((double)AD), dout = 1.0 / AN;
    for (int bh = 0; bh < AB * AH; bh++) {
        const float *q = x[0] + bh * AT * AD, *k = x[1] + bh * AT * AD, *v = x[2] + bh * AT * AD;
        double *o = ref[0] + bh * AT * AD, *dq = ref[1] + bh * AT * AD, *dk = ref[2] + bh * AT * AD,
               *dv = ref[3] + bh * AT * AD;
        for (int i = 0; i < AT; i++) {
            double P[AT], mx = -INFINITY, sum = 0.0, dp[AT], rs = 0.0;
            for (int j = 0; j <= i; j++) {
                double d = 0.0;
                for (int c = 0; c < AD; c++)
                    d += (double)q[i * AD + c] * k[j * AD + c];
                P[j] = d * scale;
                mx = fmax(mx, P[j]);
            }
            for (int j = 0; j <= i; j++)
                sum += P[j] = exp(P[j] - mx);
            for (int j = 0; j <= i; j++) {
                P[j] /= sum;
                dp[j] = 0.0;
                for (int c = 0; c < AD; c++) {
                    o[i * AD + c] += P[j] * v[j * AD + c];
                    dv[j * AD + c] += P[j] * dout;
                    dp[j] += dout * v[j * AD + c];
                }
                rs += P[j] * dp[j];
            }
            for (int j = 0; j <= i; j++)
                for (int c = 0; c < AD; c++) {
                    const double ds = P[j] * (dp[j] - rs) * scale;
                    dq[i * AD + c] += ds * k[j * AD + c];
                    dk[j * AD + c] += ds * q[i * AD + c];
                }
        }
    }
}

START_TEST(test_attention_under_amp)
{
    const te_amp_level level = (te_amp_level)(_i / 2);
    const te_dtype low = _i % 2 ? TE_BF16 : TE_F16;
    static float eager[4][AN], fused[4][AN], composed[4][AN], x[3][AN], x2[3][AN];
    static double ref[4][AN];
    static const char *const what[4] = { "out", "grad q", "grad k", "grad v" };
    attn_run(level, low, TE_MODE_EAGER, 0, eager, x);
    ck_assert_int_gt(attn_run(level, low, TE_MODE_GRAPH, 0, fused, x2), 0);
    const bool rounded = out_rounded;
    const te_round_stats rs = out_round;
    ck_assert_int_eq(attn_run(level, low, TE_MODE_GRAPH, TE_PASS_FUSE_ATTN, composed, x2), 0);
    const char *lv = te_amp_level_name(level), *dn = te_dtype_name(low);
    for (int t = 0; t < 4; t++) /* composed: eager mode's bits */
        for (int e = 0; e < AN; e++)
            ck_assert_msg(memcmp(&eager[t][e], &composed[t][e], sizeof(float)) == 0, "%s %s %s[%d]: %.9g eager, %.9g composed",
                          lv, dn, what[t], e, eager[t][e], composed[t][e]);
    if (level == TE_AMP_O0) {
        ck_assert(!rounded);
        return;
    }
    /* the fused kernel's rounding of o, reported on out's record */
    ck_assert_msg(rounded && rs.dtype == low && rs.nonzero == AN && rs.overflow == 0 && rs.underflow == 0 &&
                      rs.absmax > 0.0f && rs.absmax <= 2.0f,
                  "%s %s: out's round: rounded %d dtype %s nonzero %lld absmax %g", lv, dn, rounded,
                  te_dtype_name(rs.dtype), (long long)rs.nonzero, (double)rs.absmax);
    attn_exact(x, ref);
    const double bound = low == TE_F16 ? ATTN_ULP_F16 : ATTN_ULP_BF16;
    double worst_c = 0, worst_x = 0, worst_cx = 0;
    int differ = 0;
    for (int t = 0; t < 4; t++) {
        double m = 0.0;
        for (int e = 0; e < AN; e++)
            m = fmax(m, fabs(ref[t][e]));
        for (int e = 0; e < AN; e++) {
            const double dc = ulps(fused[t][e], composed[t][e], m, low), dx = ulps(fused[t][e], ref[t][e], m, low);
            const double dcx = ulps(composed[t][e], ref[t][e], m, low);
            ck_assert_msg(dc <= bound, "%s %s %s[%d]: fused %.9g, composed %.9g: %g ulps at %g", lv, dn, what[t], e,
                          fused[t][e], composed[t][e], dc, m);
            ck_assert_msg(dx <= ATTN_ULP_EXACT, "%s %s %s[%d]: fused %.9g, exact %.9g: %g ulps at %g", lv, dn,
                          what[t], e, fused[t][e], ref[t][e], dx, m);
            worst_c = fmax(worst_c, dc);
            worst_x = fmax(worst_x, dx);
            worst_cx = fmax(worst_cx, dcx);
            differ += dc > 0;
        }
    }
    if (getenv("TDBG_ULP_REPORT"))
        fprintf(stderr, "attention %s %s: fused-composed %.3g ulps, fused-exact %.3g, composed-exact %.3g\n", lv, dn,
                worst_c, worst_x, worst_cx);
    /* the composed path did round the probabilities: it is further from exact */
    ck_assert_msg(differ > 0 && worst_cx > worst_x, "%s %s: composed %g ulps from exact, fused %g", lv, dn, worst_cx,
                  worst_x);
}
END_TEST

Suite *suite_amp(void)
{
    Suite *s = suite_create("amp");
    TCase *tc = tcase_create("levels");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_precision_table);
    tcase_add_test(tc, test_o1_autocast);
    tcase_add_test(tc, test_o2_params_and_classes);
    tcase_add_test(tc, test_o2_batchnorm_params_f32);
    tcase_add_test(tc, test_o3_everything_low);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("rounding");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_rounding_vs_torch, 0, N_AMP_CASES);
    suite_add_tcase(s, tc);
    tc = tcase_create("parity");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_eager_graph_parity, 0, 6);
    tcase_add_loop_test(tc, test_attention_under_amp, 0, 2 * TE_AMP_LEVEL_COUNT);
    suite_add_tcase(s, tc);
    return s;
}
