/*
 * test_cuda_ops.c — every op of the op table on the CUDA backend against
 * the CPU backend, through the engine's public API only (issue 18, "Tests").
 *
 * Per case (an op and the dtype of its float inputs): the inputs are made
 * on the CPU with fixed random values; the op runs, then
 * loss = sum(output * W) with W a fixed random f32 tensor, and the
 * backward, on the CPU; te_tensor_to(cuda) copies of the same inputs run
 * the same on CUDA. Compared: the output, every input's gradient and the
 * tensors the op writes in place (batch norm's running statistics).
 * Tolerances:
 *   f32       |cuda - cpu| <= 1e-5 * max(|cpu|, the tensor's largest |cpu|):
 *             relative, with an absolute floor scaled by the tensor's
 *             magnitude (a sum's rounding is relative to its terms);
 *   f16/bf16  within 1 ULP of the low dtype at max(|cpu|, largest / 64):
 *             both backends round the same f32 math once;
 *   i32       exactly; NaN where NaN, infinities equal.
 * The shape ops and the cast also run on i32 inputs (no gradient).
 *
 * Then the examples' MLP trained on CUDA in eager and in graph mode (the
 * same losses and parameters), and an injected NaN that the first op whose
 * output holds one (an op_end hook) shows at the same op, step, phase and
 * index on both backends. Without a device each of those prints
 * "cuda_ops: skipped: no CUDA device (REASON)" and returns (tu_cuda_device);
 * the host-only tests check that the table covers every op and that the
 * NaN is seen where it was injected on the CPU.
 */
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEAVES 3
#define MAX_AUX 3
#define MAX_KEPT (1 + MAX_LEAVES + MAX_AUX)

/* ---- the cases ------------------------------------------------------------------ */

typedef struct op_case {
    te_op op;
    te_dtype dt;                   /* of the float inputs; TE_I32: an integer input, no gradient */
    te_tensor *leaf[MAX_LEAVES];   /* persistent, on the CPU; float ones require a gradient */
    int n_leaves;
    te_tensor *aux[MAX_AUX];       /* persistent, on the CPU: labels, indices, a mask, running stats */
    int n_aux;
} op_case;

/* The ops whose input may be of any dtype: they also run on i32. */
static bool any_dtype(te_op op)
{
    return op == TE_OP_RESHAPE || op == TE_OP_FLATTEN || op == TE_OP_TRANSPOSE || op == TE_OP_CAST;
}

/* An input of the case's dtype, values uniform in [lo, hi) (integers
 * spread over +-1000 for i32), the same for the same case on every run. */
static void leaf(op_case *c, float lo, float hi, int ndim, const int64_t *shape)
{
    ck_assert(c->n_leaves < MAX_LEAVES);
    te_tensor *t = te_tensor_persistent(c->dt, ndim, shape);
    ck_assert_msg(t != NULL, "%s", te_error());
    float *v = malloc((size_t)t->numel * sizeof *v);
    ck_assert(v != NULL);
    const uint32_t seed = 1000u * (uint32_t)c->op + 10u * (uint32_t)c->dt + (uint32_t)c->n_leaves;
    if (c->dt == TE_I32)
        tu_fill_uniform(v, t->numel, seed, -1000.0f, 1000.0f);
    else
        tu_fill_uniform(v, t->numel, seed, lo, hi);
    te_copy_from_f32(t, v); /* rounded to f16/bf16, to integers for i32 */
    free(v);
    t->requires_grad = te_dtype_is_float(c->dt);
    snprintf(t->name, sizeof t->name, "in%d", c->n_leaves);
    c->leaf[c->n_leaves++] = t;
}

static te_tensor *aux(op_case *c, te_dtype dt, int ndim, const int64_t *shape, const float *v)
{
    ck_assert(c->n_aux < MAX_AUX);
    te_tensor *t = te_tensor_persistent(dt, ndim, shape);
    ck_assert(t != NULL);
    te_copy_from_f32(t, v);
    return c->aux[c->n_aux++] = t;
}

/* Makes the inputs of c->op; a new op without a case fails here. */
static void make_inputs(op_case *c)
{
    switch (c->op) {
    case TE_OP_MATMUL: leaf(c, -1, 1, te_shape(2, 5, 6)); leaf(c, -1, 1, te_shape(6, 7)); return;
    case TE_OP_LINEAR:
        leaf(c, -1, 1, te_shape(5, 8)); leaf(c, -1, 1, te_shape(6, 8)); leaf(c, -1, 1, te_shape(6));
        return;
    case TE_OP_ADD: case TE_OP_SUB: case TE_OP_MUL: /* the second broadcast along rows */
        leaf(c, -1, 1, te_shape(4, 6)); leaf(c, -1, 1, te_shape(6)); return;
    case TE_OP_DIV: leaf(c, -1, 1, te_shape(4, 6)); leaf(c, 0.5f, 2, te_shape(4, 6)); return;
    case TE_OP_MSE: leaf(c, -1, 1, te_shape(4, 6)); leaf(c, -1, 1, te_shape(4, 6)); return;
    case TE_OP_SCALE: case TE_OP_RELU: case TE_OP_GELU: case TE_OP_TANH: case TE_OP_SIGMOID:
    case TE_OP_EXP: case TE_OP_SOFTMAX: case TE_OP_LOG_SOFTMAX: case TE_OP_DROPOUT:
    case TE_OP_SUM: case TE_OP_MEAN:
        leaf(c, -2, 2, te_shape(5, 7)); return;
    case TE_OP_LOG: case TE_OP_SQRT: leaf(c, 0.5f, 2, te_shape(5, 7)); return;
    case TE_OP_RESHAPE: case TE_OP_TRANSPOSE: case TE_OP_CAST: leaf(c, -1, 1, te_shape(4, 6)); return;
    case TE_OP_FLATTEN: leaf(c, -1, 1, te_shape(2, 3, 4)); return;
    case TE_OP_CROSS_ENTROPY:
        leaf(c, -2, 2, te_shape(5, 4));
        aux(c, TE_I32, te_shape(5), (const float[]){ 0, 3, 1, 3, 2 });
        return;
    case TE_OP_CONV2D:
        leaf(c, -1, 1, te_shape(2, 3, 6, 6)); leaf(c, -1, 1, te_shape(4, 3, 3, 3)); leaf(c, -1, 1, te_shape(4));
        return;
    case TE_OP_MAXPOOL2D: case TE_OP_AVGPOOL2D: case TE_OP_GLOBAL_AVGPOOL:
        leaf(c, -1, 1, te_shape(2, 3, 6, 6)); return;
    case TE_OP_BATCHNORM:
        leaf(c, -1, 1, te_shape(4, 3, 3, 3)); leaf(c, 0.5f, 1.5f, te_shape(3)); leaf(c, -1, 1, te_shape(3));
        aux(c, TE_F32, te_shape(3), (const float[]){ 0.1f, -0.2f, 0.0f });
        aux(c, TE_F32, te_shape(3), (const float[]){ 1.0f, 0.5f, 2.0f });
        return;
    case TE_OP_LAYERNORM:
        leaf(c, -1, 1, te_shape(5, 8)); leaf(c, 0.5f, 1.5f, te_shape(8)); leaf(c, -1, 1, te_shape(8));
        return;
    case TE_OP_EMBEDDING: /* rows 1 and 4 picked twice: their gradients add up */
        leaf(c, -1, 1, te_shape(6, 4));
        aux(c, TE_I32, te_shape(2, 4), (const float[]){ 1, 4, 0, 1, 5, 4, 2, 3 });
        return;
    case TE_OP_MASKED_FILL:
        leaf(c, -1, 1, te_shape(4, 5));
        aux(c, TE_F32, te_shape(5), (const float[]){ 1, 0, 0, 1, 0 });
        return;
    case TE_OP_COUNT: break;
    }
    ck_abort_msg("op %d (%s) has no case in test_cuda_ops.c: add one", c->op,
                 c->op < TE_OP_COUNT ? te_op_type_name(c->op) : "?");
}

/* The op under test on in (the case's inputs) and a (its aux tensors). */
static te_tensor *run_op(const op_case *c, te_tensor *const *in, te_tensor *const *a)
{
    switch (c->op) {
    case TE_OP_MATMUL: return te_matmul(in[0], in[1]);
    case TE_OP_LINEAR: return te_linear(in[0], in[1], in[2]);
    case TE_OP_ADD: return te_add(in[0], in[1]);
    case TE_OP_SUB: return te_sub(in[0], in[1]);
    case TE_OP_MUL: return te_mul(in[0], in[1]);
    case TE_OP_DIV: return te_div(in[0], in[1]);
    case TE_OP_SCALE: return te_scale(in[0], -1.5f);
    case TE_OP_RELU: return te_relu(in[0]);
    case TE_OP_GELU: return te_gelu(in[0]);
    case TE_OP_TANH: return te_tanh(in[0]);
    case TE_OP_SIGMOID: return te_sigmoid(in[0]);
    case TE_OP_EXP: return te_exp(in[0]);
    case TE_OP_LOG: return te_log(in[0]);
    case TE_OP_SQRT: return te_sqrt(in[0]);
    case TE_OP_SOFTMAX: return te_softmax(in[0], -1);
    case TE_OP_LOG_SOFTMAX: return te_log_softmax(in[0], 0);
    case TE_OP_CROSS_ENTROPY: return te_cross_entropy(in[0], a[0]);
    case TE_OP_MSE: return te_mse(in[0], in[1]);
    case TE_OP_CONV2D: return te_conv2d(in[0], in[1], in[2], 2, 1);
    case TE_OP_MAXPOOL2D: return te_maxpool2d(in[0], 3, 2, 1);
    case TE_OP_AVGPOOL2D: return te_avgpool2d(in[0], 2, 2, 0);
    case TE_OP_GLOBAL_AVGPOOL: return te_global_avgpool(in[0]);
    case TE_OP_BATCHNORM: return te_batchnorm(in[0], in[1], in[2], a[0], a[1], 0.1f, 1e-5f);
    case TE_OP_LAYERNORM: return te_layernorm(in[0], in[1], in[2], 1e-5f);
    case TE_OP_DROPOUT: return te_dropout(in[0], 0.3f);
    case TE_OP_RESHAPE: return te_reshape(in[0], 3, -1, 4);
    case TE_OP_FLATTEN: return te_flatten(in[0]);
    case TE_OP_TRANSPOSE: return te_transpose(in[0], 0, 1);
    case TE_OP_SUM: return te_sum(in[0], 0, false);
    case TE_OP_MEAN: return te_mean(in[0], 1, true);
    case TE_OP_EMBEDDING: return te_embedding(in[0], a[0]);
    case TE_OP_CAST: return te_cast(in[0], in[0]->dtype == TE_F32 ? TE_F16 : TE_F32);
    case TE_OP_MASKED_FILL: return te_masked_fill(in[0], a[0], -INFINITY);
    case TE_OP_COUNT: break;
    }
    return NULL;
}

static void case_free(op_case *c)
{
    for (int i = 0; i < c->n_leaves; i++)
        te_tensor_free(c->leaf[i]);
    for (int i = 0; i < c->n_aux; i++)
        te_tensor_free(c->aux[i]);
}

/* ---- one run, kept on the host --------------------------------------------------- */

typedef struct kept {
    int n;
    char what[MAX_KEPT][32];
    te_dtype dt[MAX_KEPT];
    int64_t numel[MAX_KEPT];
    void *bytes[MAX_KEPT];
} kept;

static void keep(kept *k, const te_tensor *t, const char *what)
{
    ck_assert(k->n < MAX_KEPT);
    snprintf(k->what[k->n], sizeof k->what[0], "%s", what);
    k->dt[k->n] = t->dtype;
    k->numel[k->n] = t->numel;
    k->bytes[k->n++] = tu_bytes(t);
}

static void kept_free(kept *k)
{
    for (int i = 0; i < k->n; i++)
        free(k->bytes[i]);
}

/* Runs the case on dev: copies of its inputs there (te_tensor_to; the aux
 * ones persistent, made there), the op, and the
 * backward of sum(output * W); keeps the output, the inputs' gradients and
 * the aux tensors (written in place by some ops). The tape is reset after,
 * so that both runs name their ops alike (dropout's mask follows the name). */
static void run_on(const op_case *c, te_device dev, kept *k)
{
    memset(k, 0, sizeof *k);
    ck_assert_msg(te_backend_use(te_device_name(dev)) == TE_OK, "%s", te_error());
    te_tensor *in[MAX_LEAVES] = { 0 }, *a[MAX_AUX] = { 0 };
    for (int i = 0; i < c->n_leaves; i++) {
        in[i] = te_tensor_to(c->leaf[i], dev);
        ck_assert_msg(in[i] != NULL, "%s", te_error());
        in[i]->requires_grad = c->leaf[i]->requires_grad;
    }
    for (int i = 0; i < c->n_aux; i++) { /* persistent, as running statistics must be */
        a[i] = te_tensor_persistent(c->aux[i]->dtype, c->aux[i]->ndim, c->aux[i]->shape);
        ck_assert_msg(a[i] != NULL && a[i]->device == dev, "%s", te_error());
        tu_copy(a[i], c->aux[i]);
    }
    te_tensor *y = run_op(c, in, a);
    ck_assert_msg(y != NULL, "%s on %s: %s", te_op_type_name(c->op), te_device_name(dev), te_error());
    ck_assert_msg(y->device == dev, "%s: output on %s, not %s", te_op_type_name(c->op),
                  te_device_name(y->device), te_device_name(dev));
    keep(k, y, "output");
    if (te_dtype_is_float(c->dt)) {
        float *wv = malloc((size_t)y->numel * sizeof *wv + sizeof *wv);
        ck_assert(wv != NULL);
        tu_fill_uniform(wv, y->numel, 7u + (uint32_t)c->op, -1.0f, 1.0f);
        te_tensor *w = te_tensor_from(TE_F32, y->ndim, y->shape, wv);
        free(wv);
        te_tensor *loss = te_sum(te_mul(y, w), TE_ALL, false);
        ck_assert_msg(loss && te_backward(loss) == TE_OK, "%s on %s: backward: %s", te_op_type_name(c->op),
                      te_device_name(dev), te_error());
        for (int i = 0; i < c->n_leaves; i++) {
            char what[32];
            snprintf(what, sizeof what, "din%d", i); /* the gradient of in<i> */
            ck_assert_msg(in[i]->grad && in[i]->grad_valid, "%s: %s has no gradient", te_op_type_name(c->op), what);
            keep(k, in[i]->grad, what);
        }
    }
    for (int i = 0; i < c->n_aux; i++) {
        char what[32];
        snprintf(what, sizeof what, "aux%d", i);
        keep(k, a[i], what);
    }
    te_tape_reset();
    for (int i = 0; i < c->n_aux; i++)
        te_tensor_free(a[i]);
    ck_assert_int_eq(te_backend_use("cpu"), TE_OK);
}

/* ---- comparisons --------------------------------------------------------------- */

static float widen(uint16_t h, te_dtype dt) { return dt == TE_F16 ? te_f16_to_f32(h) : te_bf16_to_f32(h); }

/* One ULP of dt at magnitude m (finite, >= 0): the step from m rounded to
 * dt to the next value up (down from the largest finite one). */
static double low_ulp(float m, te_dtype dt)
{
    uint16_t b = (uint16_t)((dt == TE_F16 ? te_f32_to_f16(m) : te_f32_to_bf16(m)) & 0x7fff);
    const float here = widen(b, dt), up = widen((uint16_t)(b + 1), dt);
    return isfinite(up) ? (double)up - here : (double)here - widen((uint16_t)(b - 1), dt);
}

static float element(const void *bytes, te_dtype dt, int64_t i)
{
    if (dt == TE_F32)
        return ((const float *)bytes)[i];
    if (dt == TE_I32)
        return (float)((const int32_t *)bytes)[i];
    return widen(((const uint16_t *)bytes)[i], dt);
}

/* Fails unless what the device kept (g) matches the CPU's (w), as the
 * header says; label names the case. */
static void assert_match(const kept *w, const kept *g, const char *label)
{
    ck_assert_msg(w->n == g->n, "%s: %d tensors on the CPU, %d on CUDA", label, w->n, g->n);
    for (int t = 0; t < w->n; t++) {
        const te_dtype dt = w->dt[t];
        ck_assert_msg(g->dt[t] == dt && g->numel[t] == w->numel[t], "%s %s: %s[%lld] on CUDA, %s[%lld] on the CPU",
                      label, w->what[t], te_dtype_name(g->dt[t]), (long long)g->numel[t], te_dtype_name(dt),
                      (long long)w->numel[t]);
        if (dt == TE_I32) {
            ck_assert_msg(memcmp(w->bytes[t], g->bytes[t], (size_t)w->numel[t] * 4) == 0, "%s %s: i32 values differ",
                          label, w->what[t]);
            continue;
        }
        double amax = 0;
        for (int64_t i = 0; i < w->numel[t]; i++) {
            const double v = fabs(element(w->bytes[t], dt, i));
            if (isfinite(v) && v > amax)
                amax = v;
        }
        for (int64_t i = 0; i < w->numel[t]; i++) {
            const float want = element(w->bytes[t], dt, i), got = element(g->bytes[t], dt, i);
            bool ok;
            double tol = 0;
            if (!isfinite(want) || !isfinite(got))
                ok = isnan(want) ? isnan(got) : want == got;
            else if (dt == TE_F32)
                ok = fabs((double)got - want) <= (tol = 1e-5 * fmax(fabs(want), amax));
            else
                ok = fabs((double)got - want) <= (tol = low_ulp((float)fmax(fabs(want), amax / 64), dt));
            ck_assert_msg(ok, "%s %s[%lld]: %.9g on CUDA, %.9g on the CPU (tolerance %.3g, largest |value| %.3g)",
                          label, w->what[t], (long long)i, (double)got, (double)want, tol, amax);
        }
    }
}

/* ---- the op table on both backends ---------------------------------------------- */

/* The cases: every op in f32, f16 and bf16; the any-dtype ones in i32 too. */
enum { MAX_CASES = TE_OP_COUNT * 4 };
static op_case cases[MAX_CASES];
static int n_cases;

static void list_cases(void)
{
    static const te_dtype dts[] = { TE_F32, TE_F16, TE_BF16, TE_I32 };
    n_cases = 0;
    for (int op = 0; op < TE_OP_COUNT; op++)
        for (int d = 0; d < 4; d++)
            if (dts[d] != TE_I32 || any_dtype((te_op)op))
                cases[n_cases++] = (op_case){ .op = (te_op)op, .dt = dts[d] };
}

START_TEST(test_op_on_cuda)
{
    if (!tu_cuda_device("cuda_ops"))
        return;
    op_case c = cases[_i];
    char label[64];
    snprintf(label, sizeof label, "%s (%s)", te_op_type_name(c.op), te_dtype_name(c.dt));
    make_inputs(&c);
    kept cpu, cuda;
    run_on(&c, TE_DEV_CPU, &cpu);
    run_on(&c, TE_DEV_CUDA, &cuda);
    assert_match(&cpu, &cuda, label);
    kept_free(&cpu);
    kept_free(&cuda);
    case_free(&c);
}
END_TEST

/* Host only: every op of the table has a case, the case's op is that op
 * (its output's node), and the whole run (forward, backward, what is kept)
 * works on the CPU. */
START_TEST(test_table_covers_every_op)
{
    bool seen[TE_OP_COUNT] = { false };
    for (int i = 0; i < n_cases; i++) {
        op_case c = cases[i];
        seen[c.op] = true;
        make_inputs(&c);
        te_tensor *y = run_op(&c, c.leaf, c.aux);
        ck_assert_msg(y != NULL, "%s (%s): %s", te_op_type_name(c.op), te_dtype_name(c.dt), te_error());
        ck_assert_msg(y->node && y->node->op == c.op, "the case of %s runs %s", te_op_type_name(c.op),
                      y->node ? te_op_type_name(y->node->op) : "no op");
        te_tape_reset();
        kept k;
        run_on(&c, TE_DEV_CPU, &k);
        ck_assert_int_eq(k.n, 1 + (te_dtype_is_float(c.dt) ? c.n_leaves : 0) + c.n_aux);
        kept_free(&k);
        case_free(&c);
    }
    for (int op = 0; op < TE_OP_COUNT; op++)
        ck_assert_msg(seen[op], "%s has no case", te_op_type_name((te_op)op));
}
END_TEST

/* ---- the MLP in eager and graph mode on CUDA -------------------------------------- */

enum { MLP_PARAMS = 4 };

typedef struct mlp {
    te_tensor *p[MLP_PARAMS];
    te_optim *opt;
} mlp;

/* examples/mlp's step: fc1, relu, fc2, cross entropy, backward, SGD. */
static te_status mlp_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    mlp *m = ctx;
    out[1] = te_linear(te_relu(te_linear(in[0], m->p[0], m->p[1])), m->p[2], m->p[3]);
    out[0] = te_cross_entropy(out[1], in[1]);
    te_status st = te_backward(out[0]);
    return st == TE_OK ? te_optim_step(m->opt) : st;
}

/* A fresh engine (seed 3) on dev with the MLP, its optimizer and a loader
 * of 16-sample batches of 4 blobs in 16-D. */
static te_loader *mlp_begin(mlp *m, te_device dev, te_dataset **d)
{
    te_shutdown();
    te_init(&(te_config){ .seed = 3, .threads = 2 });
    ck_assert_msg(te_backend_use(te_device_name(dev)) == TE_OK, "%s", te_error());
    *d = te_dataset_blobs(512, 16, 4, 3);
    m->p[0] = te_param_new("fc1.weight", TE_F32, te_shape(32, 16));
    m->p[1] = te_param_new("fc1.bias", TE_F32, te_shape(32));
    m->p[2] = te_param_new("fc2.weight", TE_F32, te_shape(4, 32));
    m->p[3] = te_param_new("fc2.bias", TE_F32, te_shape(4));
    te_init_linear(m->p[0], m->p[1]);
    te_init_linear(m->p[2], m->p[3]);
    m->opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.05f, .momentum = 0.9f });
    return te_loader_new(*d, &(te_loader_opts){ .batch = 16, .shuffle = true, .drop_remainder = true });
}

static void mlp_end(mlp *m, te_loader *l, te_dataset *d)
{
    te_optim_free(m->opt);
    te_loader_free(l);
    te_dataset_free(d);
}

/* Trains `steps` steps on CUDA in mode; losses and the trained
 * parameters (host copies to free) come back. */
static void mlp_train(te_mode mode, int steps, float *losses, float **params)
{
    mlp m;
    te_dataset *d;
    te_loader *l = mlp_begin(&m, TE_DEV_CUDA, &d);
    te_graph *g = te_graph_new(mlp_step, &m, &(te_graph_opts){ .mode = mode, .n_inputs = 2, .n_outputs = 2 });
    ck_assert_msg(g != NULL, "%s", te_error());
    for (int s = 0; s < steps; s++) {
        te_tensor *in[2], *out[2];
        te_step_begin();
        ck_assert(te_loader_next(l, &in[0], &in[1]) == TE_OK);
        ck_assert_msg(in[0]->device == TE_DEV_CUDA, "the batch is on %s", te_device_name(in[0]->device));
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s step %d: %s", te_mode_name(mode), s, te_error());
        losses[s] = te_item(out[0]);
        te_step_end();
    }
    for (int i = 0; i < MLP_PARAMS; i++)
        params[i] = tu_f32(m.p[i]);
    te_graph_free(g);
    mlp_end(&m, l, d);
}

/* Losses within 1e-5 relative, parameters within 1e-5 of their largest
 * magnitude, and the loss goes down. */
START_TEST(test_mlp_eager_graph)
{
    if (!tu_cuda_device("cuda_ops"))
        return;
    enum { STEPS = 30 };
    static const int64_t sizes[MLP_PARAMS] = { 32 * 16, 32, 4 * 32, 4 };
    float eager[STEPS], graph[STEPS], *pe[MLP_PARAMS], *pg[MLP_PARAMS];
    mlp_train(TE_MODE_EAGER, STEPS, eager, pe);
    mlp_train(TE_MODE_GRAPH, STEPS, graph, pg);
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(fabsf(eager[s] - graph[s]) <= 1e-5f * fabsf(eager[s]), "step %d: loss %.9g eager, %.9g graph",
                      s, eager[s], graph[s]);
    ck_assert_msg(eager[STEPS - 1] < eager[0], "did not learn: %g -> %g", eager[0], eager[STEPS - 1]);
    for (int i = 0; i < MLP_PARAMS; i++) {
        float amax = 0;
        for (int64_t k = 0; k < sizes[i]; k++)
            amax = fmaxf(amax, fabsf(pe[i][k]));
        for (int64_t k = 0; k < sizes[i]; k++)
            ck_assert_msg(fabsf(pe[i][k] - pg[i][k]) <= 1e-5f * fmaxf(amax, fabsf(pe[i][k])),
                          "parameter %d[%lld]: %.9g eager, %.9g graph", i, (long long)k, pe[i][k], pg[i][k]);
        free(pe[i]);
        free(pg[i]);
    }
}
END_TEST

/* ---- the NaN stop on both backends ---------------------------------------------- */

typedef struct first_nan {
    bool seen;
    int64_t step, index;
    te_phase phase;
    char name[TE_NAME_MAX];
} first_nan;

/* op_end: the first op with a NaN in an output, as `break nan` stops. */
static void on_op_end(const te_op_record *r, void *user)
{
    first_nan *f = user;
    for (int i = 0; i < r->n_outputs && !f->seen; i++) {
        const te_tensor *t = r->outputs[i];
        if (!t || !te_dtype_is_float(t->dtype))
            continue;
        te_stats st;
        te_stats_quick(t, &st);
        if (st.nan == 0)
            continue;
        f->seen = true;
        f->step = r->step;
        f->phase = r->phase;
        f->index = st.first_bad;
        snprintf(f->name, sizeof f->name, "%s", r->name);
    }
}

/* Four eager steps of the MLP on dev with a NaN injected into relu's
 * output at step 2, element 5. */
static first_nan nan_run(te_device dev)
{
    mlp m;
    te_dataset *d;
    te_loader *l = mlp_begin(&m, dev, &d);
    first_nan f = { .seen = false };
    ck_assert_msg(te_inject_add("nan@op=relu,step=2,index=5") == TE_OK, "%s", te_error());
    int h = te_hook_add(&(te_hooks){ .op_end = on_op_end }, &f);
    ck_assert_int_ge(h, 0);
    for (int s = 0; s < 4; s++) {
        te_tensor *in[2], *out[2];
        te_step_begin();
        ck_assert(te_loader_next(l, &in[0], &in[1]) == TE_OK);
        ck_assert_msg(mlp_step(&m, in, out) == TE_OK, "step %d on %s: %s", s, te_device_name(dev), te_error());
        te_step_end();
        te_tape_reset();
    }
    te_hook_remove(h);
    te_inject_clear();
    mlp_end(&m, l, d);
    return f;
}

/* Host only: on the CPU the hook sees the NaN where it was injected. */
START_TEST(test_nan_stop_on_cpu)
{
    const first_nan cpu = nan_run(TE_DEV_CPU);
    ck_assert_msg(cpu.seen && cpu.step == 2 && cpu.phase == TE_PHASE_FORWARD && strcmp(cpu.name, "relu") == 0 &&
                      cpu.index == 5,
                  "on the CPU the first NaN is at %s, step %lld, %s, element %lld", cpu.seen ? cpu.name : "-",
                  (long long)cpu.step, te_phase_name(cpu.phase), (long long)cpu.index);
}
END_TEST

START_TEST(test_nan_stops_alike)
{
    if (!tu_cuda_device("cuda_ops"))
        return;
    const first_nan cpu = nan_run(TE_DEV_CPU), cuda = nan_run(TE_DEV_CUDA);
    ck_assert_msg(cpu.seen, "no NaN seen on the CPU");
    ck_assert_msg(cuda.seen && cuda.step == cpu.step && cuda.phase == cpu.phase && strcmp(cuda.name, cpu.name) == 0 &&
                      cuda.index == cpu.index,
                  "on CUDA the first NaN is at %s, step %lld, %s, element %lld; on the CPU at %s, step %lld, %s, "
                  "element %lld",
                  cuda.seen ? cuda.name : "-", (long long)cuda.step, te_phase_name(cuda.phase), (long long)cuda.index,
                  cpu.name, (long long)cpu.step, te_phase_name(cpu.phase), (long long)cpu.index);
}
END_TEST

Suite *suite_cuda_ops(void)
{
    list_cases();
    Suite *s = suite_create("cuda_ops");
    TCase *host = tcase_create("table");
    tcase_add_checked_fixture(host, tu_setup, tu_teardown);
    tcase_set_timeout(host, 60);
    tcase_add_test(host, test_table_covers_every_op);
    tcase_add_test(host, test_nan_stop_on_cpu);
    suite_add_tcase(s, host);

    TCase *tc = tcase_create("cuda");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_op_on_cuda, 0, n_cases);
    tcase_add_test(tc, test_mlp_eager_graph);
    tcase_add_test(tc, test_nan_stops_alike);
    suite_add_tcase(s, tc);
    return s;
}
