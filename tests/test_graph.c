/*
 * test_graph.c — graph mode on small hand-built steps: what each pass
 * removes, folds, merges or fuses, with results compared against the same
 * step run eagerly; the memory plan checked by an independent verifier;
 * shape changes, observed tensors, hooks and injections, misuse; every op
 * the op table makes fusable, fused and compared with eager mode.
 */
#include "graph/graph.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALL_PASSES 0u
#define NO_PASSES (TE_PASS_DCE | TE_PASS_FOLD | TE_PASS_CSE | TE_PASS_BN_FOLD | TE_PASS_FUSE_ACT | \
                   TE_PASS_FUSE_EW)

/* ---- helpers ---------------------------------------------------------------- */

static te_tensor *param(const char *name, int ndim, const int64_t *shape, float lo, float hi)
{
    te_tensor *p = te_param_new(name, TE_F32, ndim, shape);
    ck_assert_msg(p != NULL, "%s", te_error());
    te_init_uniform(p, lo, hi);
    return p;
}

/* Inputs outlive the steps (te_step_end frees tape tensors): persistent,
 * freed by free_inputs() at the end of each test. */
static te_tensor *inputs_made[16];
static int n_inputs_made;

static void free_inputs(void)
{
    while (n_inputs_made > 0)
        te_tensor_free(inputs_made[--n_inputs_made]);
}

static te_tensor *input(int ndim, const int64_t *shape, uint64_t stream)
{
    te_tensor *x = te_tensor_persistent(TE_F32, ndim, shape);
    ck_assert(x != NULL && n_inputs_made < 16);
    inputs_made[n_inputs_made++] = x;
    for (int64_t i = 0; i < x->numel; i++)
        te_set(x, i, te_rand_uniform(5, stream, (uint64_t)i) * 2.0f - 1.0f);
    return x;
}

/* A persistent copy of t's values, to compare after the tape is gone. */
static float *values(const te_tensor *t)
{
    float *v = malloc((size_t)t->numel * sizeof *v);
    ck_assert(v != NULL);
    te_copy_to_f32(t, v);
    return v;
}

static void assert_close(const float *a, const float *b, int64_t n, float rtol, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        float tol = rtol * fmaxf(1.0f, fabsf(a[i]));
        ck_assert_msg(fabsf(a[i] - b[i]) <= tol || (isnan(a[i]) && isnan(b[i])),
                      "%s[%lld]: eager %.9g, graph %.9g", what, (long long)i, a[i], b[i]);
    }
}

/* Kernels of the last plan of kind k (and, for FWD, of op type op). */
static int count_kernels(const te_graph *g, tg_kkind kind, te_op op)
{
    const tg_plan *p = tg_graph_plan(g);
    int n = 0;
    for (int i = 0; i < p->n_kernels; i++)
        n += p->kernels[i].kind == kind && (kind != TG_K_FWD || p->kernels[i].node->op == op);
    return n;
}

static const tg_value *value_named(const te_graph *g, const char *name)
{
    const tg_plan *p = tg_graph_plan(g);
    for (int v = 0; v < p->n_values; v++)
        if (strcmp(p->values[v].t->name, name) == 0)
            return &p->values[v];
    ck_abort_msg("no value %s in the plan", name);
    return NULL;
}

/* The independent verifier: no two temporaries live at the same kernel
 * share a byte, and each lies inside the arena. A recomputed value has two
 * lives, [def, fwd_last] at offset and [recompute, last_use] at offset2,
 * and after a run its data is at the second. */
typedef struct {
    const tg_value *v;
    int def, last;
    size_t off;
} life;

static void assert_plan_sound(const te_graph *g)
{
    const tg_plan *p = tg_graph_plan(g);
    life *l = malloc(2 * (size_t)p->n_values * sizeof *l);
    ck_assert(l != NULL);
    int n = 0;
    for (int a = 0; a < p->n_values; a++) {
        const tg_value *va = &p->values[a];
        if (va->kind != TG_TEMP || !va->materialized)
            continue;
        size_t at = va->recompute >= 0 ? va->offset2 : va->offset;
        ck_assert_msg(va->t->data == (char *)p->arena + at, "%s is not at its offset", va->t->name);
        if (va->recompute >= 0) {
            ck_assert(va->def <= va->fwd_last && va->fwd_last < va->recompute && va->recompute <= va->last_use);
            l[n++] = (life){ va, va->def, va->fwd_last, va->offset };
            l[n++] = (life){ va, va->recompute, va->last_use, va->offset2 };
        } else {
            l[n++] = (life){ va, va->def, va->last_use, va->offset };
        }
    }
    for (int a = 0; a < n; a++) {
        const tg_value *va = l[a].v;
        ck_assert_msg(l[a].off + va->t->nbytes <= p->arena_bytes, "%s runs past the arena", va->t->name);
        for (int b = a + 1; b < n; b++) {
            const tg_value *vb = l[b].v;
            if (!va->t->nbytes || !vb->t->nbytes)
                continue;
            /* a value written in place of another takes its memory where that one's life ends */
            if (va->inplace_of == (int)(vb - p->values) || vb->inplace_of == (int)(va - p->values))
                continue;
            bool live = l[a].def <= l[b].last && l[b].def <= l[a].last;
            bool overlap = l[a].off < l[b].off + vb->t->nbytes && l[b].off < l[a].off + va->t->nbytes;
            ck_assert_msg(!(live && overlap), "%s [%d,%d] and %s [%d,%d] share bytes", va->t->name, l[a].def,
                          l[a].last, vb->t->name, l[b].def, l[b].last);
        }
    }
    free(l);
    ck_assert(p->arena_bytes >= p->lower_bound && p->arena_bytes <= p->naive_bytes + 64 * (size_t)p->n_values);
}

/* ---- the steps under test ----------------------------------------------------- */

typedef struct {
    te_tensor *w, *b;
    te_optim *opt;   /* NULL: no update */
    int variant;     /* which body */
} model;

/* y = tanh(0.5 * (x * w + b)); loss = mean(y): four elementwise ops. */
static te_status ew_chain(void *ctx, te_tensor *const *in, te_tensor **out)
{
    model *m = ctx;
    te_tensor *y = te_tanh(te_scale(te_add(te_mul(in[0], m->w), m->b), 0.5f));
    out[0] = te_mean(y, TE_ALL, false);
    out[1] = y;
    return te_backward(out[0]);
}

/* Dead code, constants and a duplicate expression around one useful op. */
static te_status messy(void *ctx, te_tensor *const *in, te_tensor **out)
{
    model *m = ctx;
    te_tensor *unused = te_tanh(in[0]);
    (void)unused;
    te_tensor *c = te_tensor_from(TE_F32, te_shape(16), (float[16]){ 1, 2, 3, 4, 5, 6, 7, 8,
                                                                      -1, -2, -3, -4, -5, -6, -7, -8 });
    te_tensor *k = te_scale(te_exp(te_scale(c, 0.1f)), 2.0f); /* constant: folded */
    te_tensor *a = te_relu(te_mul(in[0], m->w));
    te_tensor *b = te_relu(te_mul(in[0], m->w)); /* the same again: merged */
    te_tensor *y = te_add(te_add(a, b), k);
    out[0] = te_sum(y, TE_ALL, false);
    out[1] = y;
    return te_backward(out[0]);
}

/* Mixed precision as autocast writes it: one f32 activation h cast to
 * bf16 for each of two consumers (the GPT's q, k, v linears reading one
 * layer norm). x's casts (no gradient) merge; h's stay apart: merged, the
 * consumers' gradients would be summed in bf16 where eager mode sums the
 * two casts' gradients in f32 (pass_cse.c). */
static te_status cast_twice(void *ctx, te_tensor *const *in, te_tensor **out)
{
    model *m = ctx;
    te_tensor *h = te_tanh(te_mul(in[0], m->w));
    te_tensor *x1 = te_cast(in[0], TE_BF16), *x2 = te_cast(in[0], TE_BF16);
    te_tensor *a = te_mul(te_cast(h, TE_BF16), x1);
    te_tensor *b = te_tanh(te_mul(te_cast(h, TE_BF16), x2));
    te_tensor *y = te_cast(te_add(a, b), TE_F32);
    out[0] = te_sum(y, TE_ALL, false);
    out[1] = y;
    return te_backward(out[0]);
}

/* linear + relu (+ a gelu layer): the activation fusions. */
static te_status mlp_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    model *m = ctx;
    te_scope_push("fc1");
    te_tensor *h = te_relu(te_linear(in[0], m->w, m->b));
    te_scope_pop();
    te_scope_push("fc2");
    h = te_gelu(te_linear(h, m->w, m->b));
    te_scope_pop();
    out[0] = te_mse(h, in[1]);
    out[1] = h;
    te_status st = te_backward(out[0]);
    return st == TE_OK && m->opt ? te_optim_step(m->opt) : st;
}

/* A layer norm whose output the matmul's backward reads at the end:
 * y = exp(tanh(ln(x) @ w^T)^2); the norm's gamma is b. */
static te_status ln_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    model *m = ctx;
    te_tensor *h = te_layernorm(in[0], m->b, NULL, 1e-5f);
    te_tensor *y = te_tanh(te_matmul_t(h, m->w, false, true));
    y = te_exp(te_mul(y, y));
    out[0] = te_mean(y, TE_ALL, false);
    out[1] = y;
    return te_backward(out[0]);
}

/* Runs fn once in eager mode and once compiled (with `disable`), from the
 * same parameters, and checks the outputs and parameter gradients agree. */
typedef struct {
    te_graph *g;
    float *out[2], *grad_w;
} run_out;

static run_out run_mode(te_step_fn fn, model *m, te_mode mode, unsigned disable, te_tensor **in, int n_in)
{
    run_out r = { 0 };
    r.g = te_graph_new(fn, m, &(te_graph_opts){ .mode = mode, .n_inputs = n_in, .n_outputs = 2,
                                               .disable = disable });
    ck_assert(r.g != NULL);
    te_tensor *out[2];
    te_zero_grad();
    te_step_begin();
    ck_assert_msg(te_graph_run(r.g, in, out) == TE_OK, "%s run: %s", te_mode_name(mode), te_error());
    r.out[0] = values(out[0]);
    r.out[1] = values(out[1]);
    if (m->w->grad)
        r.grad_w = values(m->w->grad);
    te_step_end();
    return r;
}

static void run_free(run_out *r)
{
    te_graph_free(r->g);
    free(r->out[0]);
    free(r->out[1]);
    free(r->grad_w);
}

/* ---- passes -------------------------------------------------------------------- */

/* The layer norm's output is computed again just before the matmul's
 * backward, in a second place in the arena, with the same bits; the pass
 * turned off leaves one long life. */
START_TEST(test_recompute)
{
    model m = { .w = param("w", te_shape(8, 16), -1, 1), .b = param("b", te_shape(16), 0.5f, 1.5f) };
    te_tensor *in[1] = { input(te_shape(8, 16), 3) };
    run_out e = run_mode(ln_step, &m, TE_MODE_EAGER, 0, in, 1);
    run_out g = run_mode(ln_step, &m, TE_MODE_GRAPH, ALL_PASSES, in, 1);
    run_out off = run_mode(ln_step, &m, TE_MODE_GRAPH, TE_PASS_RECOMPUTE, in, 1);
    ck_assert_int_eq(count_kernels(g.g, TG_K_RECOMPUTE, 0), 1);
    ck_assert_int_eq(count_kernels(off.g, TG_K_RECOMPUTE, 0), 0);
    const tg_plan *p = tg_graph_plan(g.g);
    const tg_value *h = value_named(g.g, "ln:out0");
    ck_assert_int_ge(h->recompute, 0);
    ck_assert(p->kernels[h->recompute].node == h->t->node);
    ck_assert(p->kernels[h->recompute].phase == TE_PHASE_BACKWARD);
    ck_assert_int_lt(h->fwd_last, h->recompute - 2); /* not in memory in between */
    ck_assert_int_lt(value_named(off.g, "ln:out0")->recompute, 0);
    ck_assert_int_gt(value_named(off.g, "ln:out0")->last_use, h->fwd_last);
    assert_close(e.out[0], g.out[0], 1, 0, "loss"); /* the same kernels: bit for bit */
    assert_close(e.out[1], g.out[1], 64, 0, "y");
    assert_close(e.grad_w, g.grad_w, 128, 0, "grad w");
    assert_close(off.grad_w, g.grad_w, 128, 0, "grad w, no recompute");
    assert_plan_sound(g.g);
    assert_plan_sound(off.g);
    run_free(&e);
    run_free(&g);
    run_free(&off);
}
END_TEST

START_TEST(test_fuse_elementwise)
{
    model m = { .w = param("w", te_shape(8, 16), -1, 1), .b = param("b", te_shape(16), -1, 1) };
    te_tensor *in[1] = { input(te_shape(8, 16), 1) };
    run_out e = run_mode(ew_chain, &m, TE_MODE_EAGER, 0, in, 1);
    run_out g = run_mode(ew_chain, &m, TE_MODE_GRAPH, ALL_PASSES, in, 1);
    ck_assert_int_eq(count_kernels(g.g, TG_K_EW, 0), 1);
    ck_assert_int_eq(count_kernels(g.g, TG_K_FWD, TE_OP_ADD) + count_kernels(g.g, TG_K_FWD, TE_OP_TANH), 0);
    const tg_plan *p = tg_graph_plan(g.g);
    int fused = -1;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i].kind == TG_K_EW)
            fused = p->kernels[i].n_orig;
    ck_assert_int_eq(fused, 4);
    /* add's result is read only by scale (whose backward needs nothing) and
     * scale's only by tanh (whose backward reads tanh's output): neither
     * exists in memory. mul's is read only by add, whose backward reads
     * neither operand: not in memory either. tanh's is read by its own. */
    ck_assert(!value_named(g.g, "add:out0")->materialized);
    ck_assert(!value_named(g.g, "scale:out0")->materialized);
    ck_assert(!value_named(g.g, "mul:out0")->materialized);
    ck_assert(value_named(g.g, "tanh:out0")->materialized);
    assert_close(e.out[1], g.out[1], 128, 0, "y"); /* the same formulas: bit for bit */
    assert_close(e.out[0], g.out[0], 1, 0, "loss");
    assert_close(e.grad_w, g.grad_w, 128, 0, "grad w");
    assert_plan_sound(g.g);
    run_free(&e);
    run_free(&g);
}
END_TEST

START_TEST(test_dce_fold_cse)
{
    model m = { .w = param("w", te_shape(4, 16), -1, 1) };
    te_tensor *in[1] = { input(te_shape(4, 16), 2) };
    run_out e = run_mode(messy, &m, TE_MODE_EAGER, 0, in, 1);
    run_out none = run_mode(messy, &m, TE_MODE_GRAPH, NO_PASSES, in, 1);
    /* Untouched: every traced op has its own kernel. */
    ck_assert_int_eq(count_kernels(none.g, TG_K_FWD, TE_OP_TANH), 1);
    ck_assert_int_eq(count_kernels(none.g, TG_K_FWD, TE_OP_EXP), 1);
    ck_assert_int_eq(count_kernels(none.g, TG_K_FWD, TE_OP_MUL), 2);

    run_out dce = run_mode(messy, &m, TE_MODE_GRAPH, NO_PASSES & ~TE_PASS_DCE, in, 1);
    ck_assert_int_eq(count_kernels(dce.g, TG_K_FWD, TE_OP_TANH), 0); /* the unused tanh */
    ck_assert_int_eq(count_kernels(dce.g, TG_K_FWD, TE_OP_EXP), 1);

    run_out fold = run_mode(messy, &m, TE_MODE_GRAPH, NO_PASSES & ~TE_PASS_FOLD, in, 1);
    ck_assert_int_eq(count_kernels(fold.g, TG_K_FWD, TE_OP_EXP), 0);   /* computed at compile time */
    ck_assert_int_eq(count_kernels(fold.g, TG_K_FWD, TE_OP_SCALE), 0);
    ck_assert_int_eq(value_named(fold.g, "scale_1:out0")->kind, TG_CONST);

    run_out cse = run_mode(messy, &m, TE_MODE_GRAPH, NO_PASSES & ~TE_PASS_CSE, in, 1);
    ck_assert_int_eq(count_kernels(cse.g, TG_K_FWD, TE_OP_MUL), 1);
    ck_assert_int_eq(count_kernels(cse.g, TG_K_FWD, TE_OP_RELU), 1);
    ck_assert_int_eq(count_kernels(cse.g, TG_K_BWD, 0), count_kernels(none.g, TG_K_BWD, 0) - 2);

    run_out all = run_mode(messy, &m, TE_MODE_GRAPH, ALL_PASSES, in, 1);
    run_out *runs[] = { &none, &dce, &fold, &cse, &all };
    for (int i = 0; i < 5; i++) {
        assert_close(e.out[1], runs[i]->out[1], 64, 1e-6f, "y");
        assert_close(e.out[0], runs[i]->out[0], 1, 1e-6f, "loss");
        /* merged: x * (g1 + g2) instead of x * g1 + x * g2 */
        assert_close(e.grad_w, runs[i]->grad_w, 64, 1e-6f, "grad w");
        assert_plan_sound(runs[i]->g);
        run_free(runs[i]);
    }
    run_free(&e);
}
END_TEST

/* CSE keeps eager mode's rounding points under mixed precision: w's
 * gradient bit for bit (merging h's casts rounds g1 + g2 to bf16). */
START_TEST(test_cse_keeps_low_gradients_apart)
{
    model m = { .w = param("w", te_shape(4, 16), -1, 1) };
    te_tensor *in[1] = { input(te_shape(4, 16), 2) };
    run_out e = run_mode(cast_twice, &m, TE_MODE_EAGER, 0, in, 1);
    run_out g = run_mode(cast_twice, &m, TE_MODE_GRAPH, NO_PASSES & ~TE_PASS_CSE, in, 1);
    assert_close(e.out[1], g.out[1], 64, 0, "y");
    assert_close(e.grad_w, g.grad_w, 64, 0, "grad w");
    /* x's two casts as one, h's two, y's */
    ck_assert_int_eq(count_kernels(g.g, TG_K_FWD, TE_OP_CAST), 4);
    ck_assert_int_eq(count_kernels(g.g, TG_K_FWD, TE_OP_MUL), 3);
    run_free(&e);
    run_free(&g);
}
END_TEST

START_TEST(test_fuse_activation)
{
    model m = { .w = param("w", te_shape(16, 16), -0.3f, 0.3f), .b = param("b", te_shape(16), -0.1f, 0.1f) };
    te_tensor *in[2] = { input(te_shape(8, 16), 3), input(te_shape(8, 16), 4) };
    run_out e = run_mode(mlp_step, &m, TE_MODE_EAGER, 0, in, 2);
    run_out g = run_mode(mlp_step, &m, TE_MODE_GRAPH, ALL_PASSES, in, 2);
    ck_assert_int_eq(count_kernels(g.g, TG_K_ACT, 0), 2);
    ck_assert_int_eq(count_kernels(g.g, TG_K_FWD, TE_OP_LINEAR), 0);
    /* ReLU's backward reads its output: the pre-activation never exists.
     * GELU's reads its input: that one stays. */
    ck_assert(!value_named(g.g, "fc1/linear:out0")->materialized);
    ck_assert(value_named(g.g, "fc2/linear:out0")->materialized);
    assert_close(e.out[1], g.out[1], 128, 0, "h");
    assert_close(e.grad_w, g.grad_w, 256, 0, "grad w");
    assert_plan_sound(g.g);
    run_free(&e);
    run_free(&g);
}
END_TEST

typedef struct {
    te_tensor *w, *gamma, *beta, *rm, *rv;
} conv_bn;

static te_status conv_bn_relu(void *ctx, te_tensor *const *in, te_tensor **out)
{
    conv_bn *c = ctx;
    out[1] = te_relu(te_batchnorm(te_conv2d(in[0], c->w, NULL, 1, 1), c->gamma, c->beta, c->rm, c->rv,
                                  0.1f, 1e-5f));
    out[0] = te_mean(out[1], TE_ALL, false);
    if (!out[0])
        return te_error_code();
    return te_training() ? te_backward(out[0]) : TE_OK;
}

START_TEST(test_bn_fold)
{
    conv_bn c = { .w = param("w", te_shape(6, 3, 3, 3), -0.3f, 0.3f), .gamma = param("g", te_shape(6), 0.5f, 1.5f),
                  .beta = param("beta", te_shape(6), -0.2f, 0.2f) };
    c.rm = te_tensor_persistent(TE_F32, te_shape(6));
    c.rv = te_tensor_persistent(TE_F32, te_shape(6));
    te_init_uniform(c.rm, -0.5f, 0.5f);
    te_init_uniform(c.rv, 0.5f, 2.0f);
    te_tensor *in[1] = { input(te_shape(2, 3, 8, 8), 5) };
    te_set_training(false);
    float *ref[2], *got[2];
    for (int mode = 0; mode < 2; mode++) {
        te_graph *g = te_graph_new(conv_bn_relu, &c, &(te_graph_opts){ .mode = (te_mode)mode, .n_inputs = 1,
                                                                         .n_outputs = 2 });
        te_tensor *out[2];
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s", te_error());
        float **dst = mode ? got : ref;
        dst[0] = values(out[0]);
        dst[1] = values(out[1]);
        if (mode) {
            ck_assert_int_eq(count_kernels(g, TG_K_BN_FOLD, 0), 1);
            ck_assert_int_eq(tg_graph_plan(g)->n_kernels, 2); /* bn-fold (conv, bn, relu), mean */
            ck_assert_int_eq(tg_graph_plan(g)->kernels[0].n_orig, 3);
            assert_plan_sound(g);
        }
        te_graph_free(g);
    }
    /* Folding rounds differently: (conv(x, w) - mean) * s vs conv(x, w * s). */
    assert_close(ref[1], got[1], 2 * 6 * 8 * 8, 1e-5f, "y");
    for (int i = 0; i < 2; i++) {
        free(ref[i]);
        free(got[i]);
    }
    te_set_training(true);
    te_tensor_free(c.rm);
    te_tensor_free(c.rv);
}
END_TEST

START_TEST(test_fuse_bn_relu)
{
    /* Training: batch norm + ReLU forward in one pass, and ReLU's backward
     * inside batch norm's; neither the normalised values nor their gradient
     * exist in memory, and everything matches eager mode bit for bit. */
    conv_bn c = { .w = param("w", te_shape(6, 3, 3, 3), -0.3f, 0.3f), .gamma = param("g", te_shape(6), 0.5f, 1.5f),
                  .beta = param("beta", te_shape(6), -0.2f, 0.2f) };
    c.rm = te_tensor_persistent(TE_F32, te_shape(6));
    c.rv = te_tensor_persistent(TE_F32, te_shape(6));
    te_fill(c.rv, 1.0f);
    te_tensor *in[1] = { input(te_shape(2, 3, 8, 8), 11) };
    float *y[2], *gw[2], *rm[2];
    for (int mode = 0; mode < 2; mode++) {
        te_graph *g = te_graph_new(conv_bn_relu, &c, &(te_graph_opts){ .mode = (te_mode)mode, .n_inputs = 1,
                                                                         .n_outputs = 2 });
        te_tensor *out[2];
        te_zero_grad();
        te_fill(c.rm, 0.0f);
        te_step_begin();
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s", te_error());
        y[mode] = values(out[1]);
        gw[mode] = values(c.w->grad);
        rm[mode] = values(c.rm);
        te_step_end();
        if (mode) {
            ck_assert_int_eq(count_kernels(g, TG_K_ACT, 0), 1);
            ck_assert_int_eq(count_kernels(g, TG_K_ACT_BWD, 0), 1);
            ck_assert(!value_named(g, "bn:out0")->materialized);
            ck_assert(!value_named(g, "grad:bn:out0")->materialized);
            assert_plan_sound(g);
        }
        te_graph_free(g);
    }
    assert_close(y[0], y[1], 2 * 6 * 64, 0, "y");
    assert_close(gw[0], gw[1], 6 * 27, 0, "grad w");
    assert_close(rm[0], rm[1], 6, 0, "running mean");
    for (int i = 0; i < 2; i++) {
        free(y[i]);
        free(gw[i]);
        free(rm[i]);
    }
    te_tensor_free(c.rm);
    te_tensor_free(c.rv);
}
END_TEST

/* Training conv + bias + ReLU: one kernel, bit for bit eager mode's, a NaN
 * in the input included: ReLU's own formula passes NaN and makes +0 of a
 * negative. (oneDNN's ReLU and clip post-ops would do the conv and ReLU in
 * one pass, but they make a NaN 0: the debugger would never see it.) */
typedef struct {
    te_tensor *w, *b;
} conv_relu_net;

static te_status conv_relu_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    conv_relu_net *c = ctx;
    out[1] = te_relu(te_conv2d(in[0], c->w, c->b, 1, 1));
    out[0] = te_sum(out[1], TE_ALL, false);
    if (!out[0])
        return te_error_code();
    return te_backward(out[0]);
}

START_TEST(test_fuse_conv_relu)
{
    conv_relu_net c = { .w = param("w", te_shape(8, 3, 3, 3), -0.3f, 0.3f), .b = param("b", te_shape(8), -0.2f, 0.2f) };
    te_tensor *x = input(te_shape(2, 3, 8, 8), 13);
    te_set(x, 70, NAN);
    float *y[2], *gb[2];
    for (int mode = 0; mode < 2; mode++) {
        te_graph *g = te_graph_new(conv_relu_step, &c, &(te_graph_opts){ .mode = (te_mode)mode, .n_inputs = 1,
                                                                           .n_outputs = 2 });
        te_tensor *out[2], *in[1] = { x };
        te_zero_grad();
        te_step_begin();
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s", te_error());
        y[mode] = values(out[1]);
        gb[mode] = values(c.b->grad);
        te_step_end();
        if (mode) {
            ck_assert_int_eq(count_kernels(g, TG_K_ACT, 0), 1);
            assert_plan_sound(g);
        }
        te_graph_free(g);
    }
    int nans = 0, zeros = 0;
    for (int64_t i = 0; i < 2 * 8 * 64; i++) {
        ck_assert_msg(memcmp(&y[0][i], &y[1][i], 4) == 0 || (isnan(y[0][i]) && isnan(y[1][i])),
                      "y[%lld]: eager %.9g, graph %.9g", (long long)i, y[0][i], y[1][i]);
        nans += isnan(y[0][i]);
        zeros += y[0][i] == 0.0f;
    }
    ck_assert_msg(nans > 0 && zeros > 0, "%d NaNs and %d zeros: the case tests neither", nans, zeros);
    for (int i = 0; i < 2; i++) {
        free(y[i]);
        free(gb[i]);
    }
}
END_TEST

/* Training conv (16 channels, 8 x 8: C and H * W multiples of 16) + batch
 * norm + ReLU: on a CPU whose oneDNN convolutions are blocked (AVX-512),
 * the conv's output and its gradient stay in nChw16c between the conv and
 * the batch norm (pass_layout.c), and the results are eager mode's within
 * f32 rounding (the statistics sum in another order). Not where the pass
 * is off, nor where the debugger observes the values. */
static void layout_run(conv_bn *c, te_tensor *x, int mode, unsigned disable, int observe, float **out)
{
    /* observe 1: a watch on every tensor; 2: an injection into the batch
     * norm's backward, which writes the conv output's gradient (an index of
     * NCHW: the value stays there) */
    te_graph *g = te_graph_new(conv_bn_relu, c, &(te_graph_opts){ .mode = (te_mode)mode, .n_inputs = 1,
                                                                    .n_outputs = 2, .disable = disable });
    te_tensor *res[2], *in[1] = { x };
    te_zero_grad();
    te_fill(c->rm, 0.0f);
    te_fill(c->rv, 1.0f);
    if (observe == 1)
        te_observe_add("*");
    if (observe == 2)
        ck_assert_msg(te_inject_add("scale@op=grad/bn,step=0,value=1") == TE_OK, "%s", te_error());
    te_step_begin();
    ck_assert_msg(te_graph_run(g, in, res) == TE_OK, "%s", te_error());
    const te_tensor *parts[] = { res[1], c->w->grad, c->gamma->grad, c->beta->grad, c->rm, c->rv };
    for (int i = 0; i < 6; i++)
        out[i] = values(parts[i]);
    te_step_end();
    if (mode) {
        const te_backend *cpu = te_backends[TE_DEV_CPU];
        bool want = !disable && !observe && cpu->graph.blocked16 && cpu->graph.blocked16();
        const tg_value *y = value_named(g, "conv:out0"), *dy = value_named(g, "grad:conv:out0");
        ck_assert_msg(!!(y->t->flags & TE_TENSOR_BLOCKED16) == want, "conv:out0 blocked: want %d", want);
        ck_assert_msg(!!(dy->t->flags & TE_TENSOR_BLOCKED16) == want, "grad:conv:out0 blocked: want %d", want);
        ck_assert_int_eq(count_kernels(g, TG_K_ACT, 0), observe != 1); /* batch norm + ReLU: the blocked kernels */
        ck_assert_int_eq(count_kernels(g, TG_K_ACT_BWD, 0), observe != 1);
        assert_plan_sound(g);
    }
    if (observe == 1)
        te_observe_remove("*");
    te_inject_clear();
    te_graph_free(g);
}

START_TEST(test_layout_conv_bn)
{
    conv_bn c = { .w = param("w", te_shape(16, 3, 3, 3), -0.3f, 0.3f),
                  .gamma = param("g", te_shape(16), 0.5f, 1.5f), .beta = param("beta", te_shape(16), -0.2f, 0.2f) };
    c.rm = te_tensor_persistent(TE_F32, te_shape(16));
    c.rv = te_tensor_persistent(TE_F32, te_shape(16));
    te_tensor *x = input(te_shape(3, 3, 8, 8), 12);
    const int64_t n[6] = { 3 * 16 * 64, 16 * 27, 16, 16, 16, 16 };
    const char *what[6] = { "y", "grad w", "grad gamma", "grad beta", "running mean", "running var" };
    float *eager[6], *got[6];
    layout_run(&c, x, TE_MODE_EAGER, 0, 0, eager);
    const struct {
        unsigned disable;
        int observe;
    } cases[] = { { 0, 0 }, { TE_PASS_LAYOUT, 0 }, { 0, 1 }, { 0, 2 } };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        layout_run(&c, x, TE_MODE_GRAPH, cases[k].disable, cases[k].observe, got);
        for (int i = 0; i < 6; i++) {
            assert_close(eager[i], got[i], n[i], 1e-5f, what[i]);
            free(got[i]);
        }
    }
    for (int i = 0; i < 6; i++)
        free(eager[i]);
    te_tensor_free(c.rm);
    te_tensor_free(c.rv);
}
END_TEST

/* Two blocks as the example CNN has them: conv + batch norm + ReLU (scope
 * a), max pool, conv + batch norm + ReLU (scope b), global average pool.
 * With 16 channels every value from a's conv to b's ReLU, and their
 * gradients, can stay in nChw16c (pass_layout.c). */
typedef struct {
    conv_bn blk[2];
    bool no_relu_a; /* a's batch norm straight into the pool: its own kernels, not the fused ones */
} chain;

static te_status chain_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    chain *c = ctx;
    te_tensor *h = in[0];
    for (int i = 0; i < 2; i++) {
        const conv_bn *b = &c->blk[i];
        te_scope_push(i ? "b" : "a");
        h = te_batchnorm(te_conv2d(h, b->w, NULL, 1, 1), b->gamma, b->beta, b->rm, b->rv, 0.1f, 1e-5f);
        if (i || !c->no_relu_a)
            h = te_relu(h);
        te_scope_pop();
        if (i == 0)
            h = te_maxpool2d(h, 2, 2, 0);
    }
    out[1] = te_global_avgpool(h);
    out[0] = te_mean(te_mul(out[1], out[1]), TE_ALL, false);
    if (!out[0])
        return te_error_code();
    return te_backward(out[0]);
}

/* One step: the loss, the gradients of the weights and batch norms'
 * parameters, and, in graph mode, which of the chain's values the plan
 * keeps blocked (a bit per name in `names`). */
static unsigned chain_run(chain *c, te_tensor *x, int mode, const char *observe, const char *inject, float **out)
{
    const char *names[] = { "a/conv:out0", c->no_relu_a ? "a/bn:out0" : "a/relu:out0", "maxpool:out0",
                            "maxpool:saved0", "b/conv:out0", "b/relu:out0",
                            c->no_relu_a ? "grad:a/bn:out0" : "grad:a/relu:out0", "grad:b/conv:out0" };
    te_graph *g = te_graph_new(chain_step, c, &(te_graph_opts){ .mode = (te_mode)mode, .n_inputs = 1,
                                                                 .n_outputs = 2 });
    te_tensor *res[2], *in[1] = { x };
    te_zero_grad();
    if (observe)
        te_observe_add(observe);
    if (inject)
        ck_assert_msg(te_inject_add(inject) == TE_OK, "%s", te_error());
    te_step_begin();
    ck_assert_msg(te_graph_run(g, in, res) == TE_OK, "%s", te_error());
    const te_tensor *parts[] = { res[0], c->blk[0].w->grad, c->blk[1].w->grad, c->blk[0].gamma->grad,
                                 c->blk[1].beta->grad };
    for (int i = 0; i < 5; i++)
        out[i] = values(parts[i]);
    te_step_end();
    unsigned blocked = 0;
    for (int i = 0; mode && i < (int)(sizeof names / sizeof names[0]); i++)
        blocked |= (unsigned)!!(value_named(g, names[i])->t->flags & TE_TENSOR_BLOCKED16) << i;
    if (mode)
        assert_plan_sound(g);
    if (observe)
        te_observe_remove(observe);
    te_inject_clear();
    te_graph_free(g);
    return blocked;
}

START_TEST(test_layout_chain)
{
    chain c = { 0 };
    for (int i = 0; i < 2; i++) {
        c.blk[i] = (conv_bn){ .w = param(i ? "w2" : "w1", te_shape(16, i ? 16 : 3, 3, 3), -0.3f, 0.3f),
                              .gamma = param(i ? "g2" : "g1", te_shape(16), 0.5f, 1.5f),
                              .beta = param(i ? "b2" : "b1", te_shape(16), -0.2f, 0.2f),
                              .rm = te_tensor_persistent(TE_F32, te_shape(16)),
                              .rv = te_tensor_persistent(TE_F32, te_shape(16)) };
        te_fill(c.blk[i].rv, 1.0f);
    }
    te_tensor *x = input(te_shape(3, 3, 8, 8), 13);
    const int64_t n[5] = { 1, 16 * 27, 16 * 144, 16, 16 };
    const char *what[5] = { "loss", "grad w1", "grad w2", "grad gamma1", "grad beta2" };
    const te_backend *cpu = te_backends[TE_DEV_CPU];
    const bool on = cpu->graph.blocked16 && cpu->graph.blocked16();
    /* bits: a/conv, a/relu, maxpool, argmax, b/conv, b/relu, grad a/relu, grad b/conv */
    const struct {
        const char *observe, *inject;
        unsigned want;
        bool no_relu_a;
    } cases[] = {
        { NULL, NULL, 0xFF, false },
        { NULL, NULL, 0xFF, true }, /* a/bn:out0 in a/relu's place */
        /* observed mid-chain: the pool's side in NCHW, the batch norm before it writes NCHW */
        { "maxpool:out0", NULL, 0x1 | 0x10 | 0x20 | 0x80, false },
        /* an injection into the pool's backward writes a/relu's gradient at an index of NCHW */
        { NULL, "scale@op=grad/maxpool,step=0,value=1", 0x1 | 0x10 | 0x20 | 0x80, false },
    };
    float *eager[5], *got[5];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        c.no_relu_a = cases[k].no_relu_a;
        chain_run(&c, x, TE_MODE_EAGER, cases[k].observe, cases[k].inject, eager);
        unsigned blocked = chain_run(&c, x, TE_MODE_GRAPH, cases[k].observe, cases[k].inject, got);
        ck_assert_msg(blocked == (on ? cases[k].want : 0u), "case %zu: blocked values 0x%x, want 0x%x", k, blocked,
                      on ? cases[k].want : 0u);
        for (int i = 0; i < 5; i++) {
            assert_close(eager[i], got[i], n[i], 1e-5f, what[i]);
            free(eager[i]);
            free(got[i]);
        }
    }
    for (int i = 0; i < 2; i++) {
        te_tensor_free(c.blk[i].rm);
        te_tensor_free(c.blk[i].rv);
    }
}
END_TEST

/* A residual block: y = conv(relu(conv(x))) + shortcut, relu(y) out. The
 * shortcut is a 1x1 conv of x (its output read by the add alone: the
 * second conv adds onto it in place, pass_fuse_sum.c) or x's first conv's
 * ReLU itself (read again by the second conv's backward: not fused). */
typedef struct {
    te_tensor *w1, *w2, *b2, *wp;
    bool identity;
} residual;

static te_status residual_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    residual *m = ctx;
    te_tensor *h = te_relu(te_conv2d(in[0], m->w1, NULL, 1, 1));
    te_scope_push("proj");
    te_tensor *r = m->identity ? h : te_conv2d(in[0], m->wp, NULL, 1, 0);
    te_scope_pop();
    out[1] = te_relu(te_add(te_conv2d(h, m->w2, m->b2, 1, 1), r));
    out[0] = te_mean(te_mul(out[1], out[1]), TE_ALL, false);
    if (!out[0])
        return te_error_code();
    return te_backward(out[0]);
}

START_TEST(test_fuse_conv_sum)
{
    residual m = { .w1 = param("w1", te_shape(8, 8, 3, 3), -0.3f, 0.3f),
                   .w2 = param("w2", te_shape(8, 8, 3, 3), -0.3f, 0.3f), .b2 = param("b2", te_shape(8), -0.1f, 0.1f),
                   .wp = param("wp", te_shape(8, 8, 1, 1), -0.5f, 0.5f) };
    te_tensor *x = input(te_shape(2, 8, 6, 6), 14);
    const te_backend *cpu = te_backends[TE_DEV_CPU];
    const struct {
        bool identity;
        const char *observe;
        unsigned disable;
        int fused;
        bool nan;
    } cases[] = {
        { false, NULL, 0, 1, false },
        { false, NULL, 0, 1, true }, /* x[5] NaN, through both paths into the sum: the NaN stays */
        { false, NULL, TE_PASS_FUSE_SUM, 0, false },
        { false, "proj/conv:out0", 0, 0, false }, /* the addend observed: eager mode's value stays for the debugger */
        { true, NULL, 0, 0, false },              /* the addend is read again by the backward */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        m.identity = cases[k].identity;
        te_set(x, 5, cases[k].nan ? NAN : 0.25f);
        float *res[2][6];
        for (int mode = 0; mode < 2; mode++) {
            te_graph *g = te_graph_new(residual_step, &m, &(te_graph_opts){ .mode = (te_mode)mode, .n_inputs = 1,
                                                                             .n_outputs = 2,
                                                                             .disable = cases[k].disable });
            te_tensor *out[2], *in[1] = { x };
            te_zero_grad();
            if (cases[k].observe)
                te_observe_add(cases[k].observe);
            te_step_begin();
            ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s", te_error());
            const te_tensor *parts[6] = { out[0], out[1], m.w1->grad, m.w2->grad, m.b2->grad, m.wp->grad };
            for (int i = 0; i < 6; i++)
                res[mode][i] = parts[i] ? values(parts[i]) : NULL;
            te_step_end();
            if (mode) {
                bool want = cases[k].fused && cpu->graph.conv_sum;
                ck_assert_msg(count_kernels(g, TG_K_SUM, 0) == want, "case %zu: %d conv-sum kernels, want %d", k,
                              count_kernels(g, TG_K_SUM, 0), want);
                if (want) { /* the sum is written where the shortcut was */
                    const tg_value *r = value_named(g, "proj/conv:out0"), *y = value_named(g, "add:out0");
                    ck_assert(!value_named(g, "conv_1:out0")->materialized);
                    ck_assert(y->inplace_of == (int)(r - tg_graph_plan(g)->values) && y->offset == r->offset);
                }
                assert_plan_sound(g);
            }
            if (cases[k].observe)
                te_observe_remove(cases[k].observe);
            te_graph_free(g);
        }
        /* within f32 rounding: the post-op may start from the addend where the add rounds the conv's sum
         * first; the NaN where eager mode has it */
        const int64_t n[6] = { 1, 2 * 8 * 36, 8 * 72, 8 * 72, 8, 8 * 8 };
        const char *what[6] = { "loss", "y", "grad w1", "grad w2", "grad b2", "grad wp" };
        for (int i = 0; i < 6; i++) {
            ck_assert(!res[0][i] == !res[1][i]);
            if (res[0][i])
                assert_close(res[0][i], res[1][i], n[i], 1e-5f, what[i]);
        }
        ck_assert(isnan(res[1][1][5]) == cases[k].nan && !isnan(res[1][1][6]) && isnan(res[1][2][0]) == cases[k].nan);
        for (int mode = 0; mode < 2; mode++)
            for (int i = 0; i < 6; i++)
                free(res[mode][i]);
    }
}
END_TEST

/* ---- shapes, observation, hooks, injection, misuse ------------------------------ */

START_TEST(test_shape_change)
{
    model m = { .w = param("w", te_shape(16), -1, 1), .b = param("b", te_shape(16), -1, 1) };
    const char *names[] = { "images" };
    te_graph *g = te_graph_new(ew_chain, &m, &(te_graph_opts){ .mode = TE_MODE_GRAPH, .n_inputs = 1,
                                                               .n_outputs = 2, .name = "train",
                                                               .input_names = names });
    te_tensor *out[2];
    te_tensor *x8[1] = { input(te_shape(8, 16), 6) }, *x5[1] = { input(te_shape(5, 16), 7) };
    ck_assert(te_graph_run(g, x8, out) == TE_OK);
    ck_assert_int_eq(te_graph_run(g, x5, out), TE_ERR_SHAPE);
    tu_assert_error(TE_ERR_SHAPE, "graph train", "input 0", "f32 [5,16]", "compiled for f32 [8,16]",
                    "drop_remainder", "pad it to [8,16]", ".recompile = true");
    /* the graph still runs the shape it knows */
    ck_assert(te_graph_run(g, x8, out) == TE_OK);
    te_graph_free(g);

    g = te_graph_new(ew_chain, &m, &(te_graph_opts){ .mode = TE_MODE_GRAPH, .n_inputs = 1, .n_outputs = 2,
                                                     .recompile = true });
    ck_assert(te_graph_run(g, x8, out) == TE_OK);
    ck_assert(te_graph_run(g, x5, out) == TE_OK);
    ck_assert_int_eq(out[1]->shape[0], 5);
    ck_assert(te_graph_run(g, x8, out) == TE_OK);
    ck_assert_int_eq(te_graph_stats_get(g).variants, 2); /* cached, not recompiled */
    te_graph_free(g);
}
END_TEST

typedef struct {
    char names[64][TE_NAME_MAX];
    int exec[64];
    int n;
    float scale_out0; /* the value of scale:out0[0] when reported */
    bool scale_had_data;
} op_log;

static void log_op(const te_op_record *r, void *user)
{
    op_log *l = user;
    if (l->n < 64) {
        snprintf(l->names[l->n], TE_NAME_MAX, "%s %s %s", te_phase_name(r->phase), r->name, r->type);
        l->exec[l->n++] = r->exec_index;
    }
    if (strcmp(r->name, "scale") == 0) {
        l->scale_had_data = r->outputs[0]->data != NULL;
        if (l->scale_had_data)
            l->scale_out0 = te_get(r->outputs[0], 0);
    }
}

START_TEST(test_hooks_and_observe)
{
    model m = { .w = param("w", te_shape(16), -1, 1), .b = param("b", te_shape(16), -1, 1) };
    te_tensor *x[1] = { input(te_shape(4, 16), 8) };
    op_log logs[3] = { 0 };
    te_tensor *out[2];
    for (int run = 0; run < 3; run++) {
        te_graph *g = te_graph_new(ew_chain, &m, &(te_graph_opts){ .mode = run ? TE_MODE_GRAPH : TE_MODE_EAGER,
                                                                   .n_inputs = 1, .n_outputs = 2 });
        if (run == 2)
            ck_assert(te_observe_add("scale") == TE_OK);
        int h = te_hook_add(&(te_hooks){ .op_end = log_op }, &logs[run]);
        te_step_begin();
        ck_assert(te_graph_run(g, x, out) == TE_OK);
        te_step_end();
        te_hook_remove(h);
        if (run == 2) {
            /* observed: its own kernel again, in memory, and a second variant
             * once the set changes back */
            ck_assert(value_named(g, "scale:out0")->materialized);
            ck_assert_int_eq(count_kernels(g, TG_K_EW, 0), 1); /* mul+add, then tanh alone */
            te_observe_clear();
            te_step_begin();
            ck_assert(te_graph_run(g, x, out) == TE_OK);
            te_step_end();
            ck_assert_int_eq(te_graph_stats_get(g).variants, 2);
            ck_assert(!value_named(g, "scale:out0")->materialized);
        }
        te_graph_free(g);
    }
    /* The same ops, names, types, phases and execution order in every mode. */
    ck_assert_int_eq(logs[1].n, logs[0].n);
    ck_assert_int_eq(logs[2].n, logs[0].n);
    for (int i = 0; i < logs[0].n; i++)
        for (int run = 1; run < 3; run++) {
            ck_assert_str_eq(logs[run].names[i], logs[0].names[i]);
            ck_assert_int_eq(logs[run].exec[i], logs[0].exec[i]);
        }
    ck_assert(logs[0].scale_had_data && logs[2].scale_had_data);
    ck_assert(!logs[1].scale_had_data); /* fused away, and said so */
    ck_assert(logs[2].scale_out0 == logs[0].scale_out0);
}
END_TEST

START_TEST(test_inject_in_fused_chain)
{
    model m = { .w = param("w", te_shape(16), -1, 1), .b = param("b", te_shape(16), -1, 1) };
    te_tensor *x[1] = { input(te_shape(4, 16), 9) };
    /* Steps count on across the two graphs: eager runs steps 0-2, graph 3-5. */
    ck_assert(te_inject_add("inf@op=add,step=1,index=3") == TE_OK);
    ck_assert(te_inject_add("inf@op=add,step=4,index=3") == TE_OK);
    float y[2][3][64];
    for (int mode = 0; mode < 2; mode++) {
        te_graph *g = te_graph_new(ew_chain, &m, &(te_graph_opts){ .mode = (te_mode)mode, .n_inputs = 1,
                                                                   .n_outputs = 2 });
        for (int step = 0; step < 3; step++) {
            te_tensor *out[2];
            te_step_begin();
            ck_assert(te_graph_run(g, x, out) == TE_OK);
            te_copy_to_f32(out[1], y[mode][step]);
            te_step_end();
        }
        if (mode) /* the chain is cut after add, so the injection lands before scale reads it */
            ck_assert(value_named(g, "add:out0")->materialized);
        te_graph_free(g);
    }
    for (int step = 0; step < 3; step++)
        assert_close(y[0][step], y[1][step], 64, 0, "y");
    ck_assert(y[1][1][3] == 1.0f && isfinite(y[1][0][3]) && isfinite(y[1][2][3])); /* tanh(inf) at step 1 only */
    te_inject_clear();
}
END_TEST

static te_status resets_tape(void *ctx, te_tensor *const *in, te_tensor **out)
{
    (void)ctx;
    out[0] = te_relu(in[0]);
    te_tape_reset();
    return TE_OK;
}

static te_status bad_shapes(void *ctx, te_tensor *const *in, te_tensor **out)
{
    (void)ctx;
    out[0] = te_matmul(in[0], in[0]); /* [4,16] @ [4,16] */
    return out[0] ? TE_OK : te_error_code();
}

START_TEST(test_trace_errors)
{
    te_tensor *x[1] = { input(te_shape(4, 16), 10) }, *out[1];
    te_graph *g = te_graph_new(resets_tape, NULL, &(te_graph_opts){ .mode = TE_MODE_GRAPH, .n_inputs = 1,
                                                                     .n_outputs = 1 });
    ck_assert_int_eq(te_graph_run(g, x, out), TE_ERR_STATE);
    tu_assert_error(TE_ERR_STATE, "cannot trace the step", "te_tape_reset() was called inside the step function");
    te_graph_free(g);
    ck_assert(x[0]->data != NULL && te_get(x[0], 0) == te_get(x[0], 0)); /* the input survived */

    g = te_graph_new(bad_shapes, NULL, &(te_graph_opts){ .mode = TE_MODE_GRAPH, .n_inputs = 1, .n_outputs = 1 });
    ck_assert_int_eq(te_graph_run(g, x, out), TE_ERR_SHAPE);
    tu_assert_error(TE_ERR_SHAPE, "matmul (MatMul)", "[4,16]");
    ck_assert_int_eq(te_graph_stats_get(g).variants, 0);
    te_graph_free(g);
    ck_assert(te_graph_new(NULL, NULL, &(te_graph_opts){ .n_outputs = 1 }) == NULL);
    tu_assert_error(TE_ERR_ARG, "te_graph_new");
}
END_TEST

START_TEST(test_save_graph)
{
    char dir[] = "/tmp/tdbg-graph-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    model m = { .w = param("w", te_shape(16, 16), -0.3f, 0.3f), .b = param("b", te_shape(16), -0.1f, 0.1f) };
    te_tensor *in[2] = { input(te_shape(8, 16), 3), input(te_shape(8, 16), 4) }, *out[2];
    te_graph *g = te_graph_new(mlp_step, &m, &(te_graph_opts){ .mode = TE_MODE_GRAPH, .n_inputs = 2,
                                                               .n_outputs = 2, .name = "mlp", .save_dir = dir });
    ck_assert(te_graph_run(g, in, out) == TE_OK);
    char path[512], text[65536];
    snprintf(path, sizeof path, "%s/mlp-v0-13-memory.txt", dir);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no %s", path);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    const char *want[] = { "fused-act", "op fc1/linear (Linear) at ", "op fc1/relu (Relu)", "not in memory",
                           "live [", "at +", "arena: ", "planned peak", "grad/fc2/linear (LinearGrad)" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(text, want[i]), "no '%s' in %s:\n%s", want[i], path, text);
    for (int stage = 0; stage <= 13; stage++) { /* one file per pass */
        char pat[600];
        snprintf(pat, sizeof pat, "ls %s/mlp-v0-%02d-*.txt >/dev/null 2>&1", dir, stage);
        ck_assert_msg(system(pat) == 0, "no file for stage %d in %s", stage, dir);
        snprintf(pat, sizeof pat, "rm -f %s/mlp-v0-%02d-*.txt", dir, stage);
        ck_assert(system(pat) == 0);
    }
    ck_assert_int_eq(te_graph_save(g, "/proc/no/such/dir"), TE_ERR_IO);
    tu_assert_error_has("cannot create /proc/no/such/dir");
    te_graph_free(g);
    ck_assert(rmdir(dir) == 0);
}
END_TEST

/* ---- parity over training ------------------------------------------------------ */

typedef struct {
    bool cnn;
    te_tensor *p[8];
    te_tensor *rm[2], *rv[2];
    te_optim *opt;
} net;

static te_tensor *net_forward(net *n, te_tensor *x)
{
    if (!n->cnn) {
        te_tensor *h = te_relu(te_linear(x, n->p[0], n->p[1]));
        return te_linear(h, n->p[2], n->p[3]);
    }
    te_tensor *h = te_relu(te_batchnorm(te_conv2d(x, n->p[0], NULL, 1, 1), n->p[1], n->p[2], n->rm[0],
                                        n->rv[0], 0.1f, 1e-5f));
    h = te_maxpool2d(h, 2, 2, 0);
    h = te_global_avgpool(h);
    return te_linear(h, n->p[3], n->p[4]);
}

static te_status net_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    net *n = ctx;
    out[1] = net_forward(n, in[0]);
    out[0] = te_cross_entropy(out[1], in[1]);
    te_status st = te_backward(out[0]);
    return st == TE_OK ? te_optim_step(n->opt) : st;
}

/* Trains n for `steps` steps in one mode from seed 3; returns the losses and
 * leaves the parameters trained. */
static void train(net *n, te_mode mode, int steps, float *losses, float **params, int n_params)
{
    te_shutdown();
    te_init(&(te_config){ .seed = 3, .threads = 2 });
    te_dataset *d = n->cnn ? te_dataset_shapes(512, 3) : te_dataset_blobs(512, 16, 4, 3);
    if (!n->cnn) {
        n->p[0] = te_param_new("fc1.weight", TE_F32, te_shape(32, 16));
        n->p[1] = te_param_new("fc1.bias", TE_F32, te_shape(32));
        n->p[2] = te_param_new("fc2.weight", TE_F32, te_shape(4, 32));
        n->p[3] = te_param_new("fc2.bias", TE_F32, te_shape(4));
        te_init_linear(n->p[0], n->p[1]);
        te_init_linear(n->p[2], n->p[3]);
    } else {
        n->p[0] = te_param_new("conv.weight", TE_F32, te_shape(4, 3, 3, 3));
        n->p[1] = te_param_new("bn.weight", TE_F32, te_shape(4));
        n->p[2] = te_param_new("bn.bias", TE_F32, te_shape(4));
        n->p[3] = te_param_new("fc.weight", TE_F32, te_shape(10, 4));
        n->p[4] = te_param_new("fc.bias", TE_F32, te_shape(10));
        te_init_linear(n->p[0], NULL);
        te_fill(n->p[1], 1.0f);
        te_init_linear(n->p[3], n->p[4]);
        n->rm[0] = te_tensor_persistent(TE_F32, te_shape(4));
        n->rv[0] = te_tensor_persistent(TE_F32, te_shape(4));
        te_fill(n->rv[0], 1.0f);
    }
    n->opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.05f, .momentum = 0.9f });
    te_loader *ld = te_loader_new(d, &(te_loader_opts){ .batch = 16, .shuffle = true, .drop_remainder = true });
    te_graph *g = te_graph_new(net_step, n, &(te_graph_opts){ .mode = mode, .n_inputs = 2, .n_outputs = 2 });
    for (int s = 0; s < steps; s++) {
        te_tensor *in[2], *out[2];
        te_step_begin();
        ck_assert(te_loader_next(ld, &in[0], &in[1]) == TE_OK);
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s step %d: %s", te_mode_name(mode), s, te_error());
        losses[s] = te_item(out[0]);
        te_step_end();
    }
    for (int i = 0; i < n_params; i++)
        params[i] = values(n->p[i]);
    if (n->cnn) {
        params[n_params] = values(n->rm[0]);
        params[n_params + 1] = values(n->rv[0]);
        te_tensor_free(n->rm[0]);
        te_tensor_free(n->rv[0]);
    }
    te_graph_free(g);
    te_optim_free(n->opt);
    te_loader_free(ld);
    te_dataset_free(d);
}

/* 200 steps in each mode: per-step losses within 1e-5 relative (the
 * compiled kernels are the eager ones, so in fact equal), parameters and
 * running statistics within 1e-6 (docs/graph.md). */
static void check_parity(bool cnn)
{
    enum { STEPS = 200 };
    int n_params = cnn ? 5 : 4;
    float eager[STEPS], graph[STEPS], *pe[8], *pg[8];
    net n = { .cnn = cnn };
    train(&n, TE_MODE_EAGER, STEPS, eager, pe, n_params);
    train(&n, TE_MODE_GRAPH, STEPS, graph, pg, n_params);
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(fabsf(eager[s] - graph[s]) <= 1e-5f * fabsf(eager[s]), "step %d: loss %.9g eager, %.9g graph",
                      s, eager[s], graph[s]);
    ck_assert_msg(graph[STEPS - 1] < graph[0], "did not learn: %g -> %g", graph[0], graph[STEPS - 1]);
    static const int64_t mlp_sizes[] = { 32 * 16, 32, 4 * 32, 4 }, cnn_sizes[] = { 4 * 27, 4, 4, 40, 10, 4, 4 };
    for (int i = 0; i < n_params + (cnn ? 2 : 0); i++) {
        assert_close(pe[i], pg[i], cnn ? cnn_sizes[i] : mlp_sizes[i], 1e-6f, "parameter");
        free(pe[i]);
        free(pg[i]);
    }
}

START_TEST(test_parity_mlp) { check_parity(false); }
END_TEST

START_TEST(test_parity_cnn) { check_parity(true); }
END_TEST

/* ---- every fusable op of the op table ------------------------------------------
 * The fusion passes fuse each op the op table marks UNARY, BINARY or ACT, and
 * cpu_fused.c must hold its formula: a table row without one must not
 * compute quietly wrong in graph mode. For every such op, in turn: a chain
 * op(op(x)) (op(op(x, y), y), y broadcast, for a binary one) that fuse-ew
 * makes one kernel, and for an activation linear then op, which fuse-act
 * makes one; outputs and every gradient as in eager mode, bit for bit. */

typedef struct {
    te_op op;
    bool act;          /* linear -> op (fuse-act), else the elementwise chain (fuse-ew) */
    te_tensor *p[3];   /* x, then y (binary) or w and b (act) */
    int n_p;
} fuse_case;

/* op on a (and b for a binary op); an op the table makes fusable that is
 * missing here fails the test, so a new one cannot go unchecked. */
static te_tensor *apply(te_op op, te_tensor *a, te_tensor *b)
{
    switch (op) {
    case TE_OP_ADD: return te_add(a, b);
    case TE_OP_SUB: return te_sub(a, b);
    case TE_OP_MUL: return te_mul(a, b);
    case TE_OP_DIV: return te_div(a, b);
    case TE_OP_SCALE: return te_scale(a, 0.75f);
    case TE_OP_RELU: return te_relu(a);
    case TE_OP_GELU: return te_gelu(a);
    case TE_OP_TANH: return te_tanh(a);
    case TE_OP_SIGMOID: return te_sigmoid(a);
    case TE_OP_EXP: return te_exp(a);
    case TE_OP_LOG: return te_log(a);
    case TE_OP_SQRT: return te_sqrt(a);
    default: break;
    }
    ck_abort_msg("%s is fusable in the op table, but test_graph.c's apply() cannot call it: add it",
                 te_op_type_name(op));
    return NULL;
}

/* Where x lies: op(op(x)) stays defined (log(log(x)) needs x > 1). */
static void domain(te_op op, float *lo, float *hi)
{
    *lo = op == TE_OP_LOG ? 1.5f : op == TE_OP_SQRT ? 0.25f : -2.0f;
    *hi = op == TE_OP_LOG ? 3.0f : op == TE_OP_SQRT ? 4.0f : 2.0f;
}

static te_status fusable_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    (void)in;
    fuse_case *c = ctx;
    te_tensor *const *p = c->p, *z;
    if (c->act)
        z = apply(c->op, te_linear(p[0], p[1], p[2]), NULL);
    else if (te_op_info_of(c->op)->ew == TE_EW_BINARY)
        z = apply(c->op, apply(c->op, p[0], p[1]), p[1]);
    else
        z = apply(c->op, apply(c->op, p[0], NULL), NULL);
    out[1] = z;
    out[0] = te_mean(z, TE_ALL, false);
    return te_backward(out[0]);
}

typedef struct {
    float *out[2], *grad[3];
    int64_t n_out1;
    int fused, ew_kernels, act_kernels;
} fuse_run;

static fuse_run run_fusable(fuse_case *c, te_mode mode)
{
    fuse_run r = { 0 };
    te_graph *g = te_graph_new(fusable_step, c, &(te_graph_opts){ .mode = mode, .n_outputs = 2 });
    ck_assert_msg(g != NULL, "%s", te_error());
    te_tensor *out[2];
    te_zero_grad();
    te_step_begin();
    ck_assert_msg(te_graph_run(g, NULL, out) == TE_OK, "%s %s: %s", te_op_type_name(c->op),
                  te_mode_name(mode), te_error());
    r.out[0] = values(out[0]);
    r.out[1] = values(out[1]);
    r.n_out1 = out[1]->numel;
    for (int i = 0; i < c->n_p; i++) {
        ck_assert_msg(c->p[i]->grad != NULL, "%s: no gradient for %s", te_op_type_name(c->op), c->p[i]->name);
        r.grad[i] = values(c->p[i]->grad);
    }
    te_step_end();
    if (mode == TE_MODE_GRAPH) {
        r.fused = te_graph_stats_get(g).fused;
        r.ew_kernels = count_kernels(g, TG_K_EW, 0);
        r.act_kernels = count_kernels(g, TG_K_ACT, 0);
        assert_plan_sound(g);
    }
    te_graph_free(g);
    return r;
}

static te_tensor *case_param(fuse_case *c, const char *role, int ndim, const int64_t *shape, float lo, float hi)
{
    char name[64];
    snprintf(name, sizeof name, "%s_%s_%s", te_op_default_name(c->op), c->act ? "act" : "ew", role);
    return c->p[c->n_p++] = param(name, ndim, shape, lo, hi);
}

static void check_fused_parity(te_op op, bool act)
{
    fuse_case c = { .op = op, .act = act };
    float lo, hi;
    domain(op, &lo, &hi);
    case_param(&c, "x", te_shape(8, 16), act ? -1.0f : lo, act ? 1.0f : hi);
    if (act) {
        case_param(&c, "w", te_shape(16, 16), -0.5f, 0.5f);
        case_param(&c, "b", te_shape(16), -0.5f, 0.5f);
    } else if (te_op_info_of(op)->ew == TE_EW_BINARY) {
        case_param(&c, "y", te_shape(16), 0.5f, 2.0f); /* broadcast; away from 0 for div */
    }
    fuse_run e = run_fusable(&c, TE_MODE_EAGER), g = run_fusable(&c, TE_MODE_GRAPH);
    char what[TE_NAME_MAX + 64];
    const char *type = te_op_type_name(op), *how = act ? "linear then" : "a chain of";
    ck_assert_msg(g.fused > 0, "%s %s: nothing fused", how, type);
    if (act)
        ck_assert_msg(g.act_kernels == 1, "linear then %s: %d fused-act kernels", type, g.act_kernels);
    else
        ck_assert_msg(g.ew_kernels == 1, "a chain of %s: %d fused-ew kernels", type, g.ew_kernels);
    snprintf(what, sizeof what, "%s %s: z", how, type);
    assert_close(e.out[1], g.out[1], e.n_out1, 0, what);
    snprintf(what, sizeof what, "%s %s: loss", how, type);
    assert_close(e.out[0], g.out[0], 1, 0, what);
    for (int i = 0; i < c.n_p; i++) {
        snprintf(what, sizeof what, "%s %s: grad %s", how, type, c.p[i]->name);
        assert_close(e.grad[i], g.grad[i], c.p[i]->numel, 0, what);
    }
    fuse_run *runs[] = { &e, &g };
    for (int k = 0; k < 2; k++) {
        free(runs[k]->out[0]);
        free(runs[k]->out[1]);
        for (int i = 0; i < c.n_p; i++)
            free(runs[k]->grad[i]);
    }
}

START_TEST(test_fusable_op_parity)
{
    const te_op_info *info = te_op_info_of((te_op)_i);
    if (info->ew != TE_EW_NONE)
        check_fused_parity((te_op)_i, false);
    if (info->fuse == TE_FUSE_ACT)
        check_fused_parity((te_op)_i, true);
}
END_TEST

/* ---- op traits in records ------------------------------------------------ */

typedef struct {
    te_tensor *w, *b;
} ce_model;

static te_status ce_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    ce_model *m = ctx;
    out[1] = te_relu(te_linear(in[0], m->w, m->b));
    out[0] = te_cross_entropy(out[1], in[1]);
    return te_backward(out[0]);
}

typedef struct {
    unsigned ce, ce_grad, relu, relu_grad, linear;
    int seen;
} trait_log;

static void log_traits(const te_op_record *r, void *user)
{
    trait_log *l = user;
    const char *name[] = { "cross_entropy", "grad/cross_entropy", "relu", "grad/relu", "linear" };
    unsigned *slot[] = { &l->ce, &l->ce_grad, &l->relu, &l->relu_grad, &l->linear };
    for (int i = 0; i < 5; i++)
        if (strcmp(r->name, name[i]) == 0) {
            *slot[i] = r->traits;
            l->seen |= 1 << i;
        }
}

/* Records carry the op table's traits, forward and backward, in both modes
 * (in graph mode relu runs fused into linear and is reported all the same). */
START_TEST(test_record_traits)
{
    ce_model m = { .w = param("w", te_shape(4, 16), -1, 1), .b = param("b", te_shape(4), -1, 1) };
    te_tensor *labels = te_tensor_persistent(TE_I32, te_shape(8));
    for (int i = 0; i < 8; i++)
        te_set(labels, i, (float)(i % 4));
    te_tensor *in[2] = { input(te_shape(8, 16), 11), labels }, *out[2];
    for (int mode = 0; mode < 2; mode++) {
        te_graph *g = te_graph_new(ce_step, &m, &(te_graph_opts){ .mode = (te_mode)mode, .n_inputs = 2,
                                                                  .n_outputs = 2 });
        trait_log l = { 0 };
        int h = te_hook_add(&(te_hooks){ .op_end = log_traits }, &l);
        te_step_begin();
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s", te_error());
        te_step_end();
        te_hook_remove(h);
        if (mode == TE_MODE_GRAPH)
            ck_assert_int_eq(count_kernels(g, TG_K_ACT, 0), 1); /* linear + relu */
        te_graph_free(g);
        ck_assert_int_eq(l.seen, 0x1f);
        ck_assert_uint_eq(l.ce, TE_TRAIT_LOSS);
        ck_assert_uint_eq(l.ce_grad, TE_TRAIT_LOSS);
        ck_assert_uint_eq(l.relu, TE_TRAIT_ELEMENTWISE);
        ck_assert_uint_eq(l.relu_grad, TE_TRAIT_ELEMENTWISE);
        ck_assert_uint_eq(l.linear, 0);
    }
    te_tensor_free(labels);
}
END_TEST

/* ---- capture segments ------------------------------------------------------- */

static void no_op_end(const te_op_record *r, void *user)
{
    (void)r;
    (void)user;
}

/* A fake predicate: every kernel but those whose bit is set in ctx. */
static bool all_but(const tg_plan *p, const tg_kernel *k, void *ctx)
{
    const unsigned *off = ctx;
    return !(*off >> (k - p->kernels) & 1u);
}

static int cut(const tg_plan *p, tg_capturable_fn ok, void *ctx, tg_segment *seg)
{
    const int n = tg_segments_cut(p, ok, ctx, seg);
    /* The segments tile the kernels in order. */
    for (int s = 0, at = 0; s < n; at += seg[s++].count) {
        ck_assert_int_eq(seg[s].first, at);
        ck_assert(seg[s].count >= 1 && seg[s].capture == (seg[s].count >= 2));
        if (s == n - 1)
            ck_assert_int_eq(at + seg[s].count, p->n_kernels);
    }
    return n;
}

static int kernel_of(const tg_plan *p, tg_kkind kind)
{
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i].kind == kind)
            return i;
    ck_abort_msg("no %s kernel", tg_kernel_kind_name(kind));
    return -1;
}

/* Where a compiled training step comes back to the host: at the gradient
 * seed and the optimizer, after an observed tensor's kernel, at every op
 * while a hook is attached; the runs between them are what CUDA Graphs
 * capture. On the CPU nothing is captured. */
START_TEST(test_capture_segments)
{
    model m = { .w = param("w", te_shape(16, 16), -0.3f, 0.3f), .b = param("b", te_shape(16), -0.1f, 0.1f) };
    m.opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.01f });
    te_tensor *in[2] = { input(te_shape(8, 16), 3), input(te_shape(8, 16), 4) };
    run_out r = run_mode(mlp_step, &m, TE_MODE_GRAPH, ALL_PASSES, in, 2);
    const tg_plan *p = tg_graph_plan(r.g);
    ck_assert(p->device == TE_DEV_CPU && p->cap == NULL);
    ck_assert_int_eq(te_graph_stats_get(r.g).captured_segments, 0);
    tg_segment seg[64];
    ck_assert(p->n_kernels <= 64 && p->n_kernels >= 6);

    /* The executor's predicate: forward | seed | backward | optimizer. */
    const int sd = kernel_of(p, TG_K_SEED), op = kernel_of(p, TG_K_OPTIM);
    ck_assert(sd >= 2 && op == p->n_kernels - 1 && op - sd - 1 >= 2);
    for (int i = 0; i < p->n_kernels; i++)
        ck_assert(!tg_host_after(p, &p->kernels[i]));
    int n = cut(p, tg_kernel_capturable, (void *)&te_backend_cpu, seg);
    ck_assert_int_eq(n, 4);
    ck_assert(seg[0].first == 0 && seg[0].count == sd && seg[0].capture);
    ck_assert(seg[1].first == sd && !seg[1].capture);
    ck_assert(seg[2].first == sd + 1 && seg[2].count == op - sd - 1 && seg[2].capture);
    ck_assert(seg[3].first == op && !seg[3].capture);

    /* A fake predicate: kernel 1 stays on the host, cutting the rest. */
    unsigned off = 1u << 1;
    n = cut(p, all_but, &off, seg);
    ck_assert_int_eq(n, 3);
    ck_assert(seg[0].count == 1 && seg[1].first == 1 && seg[1].count == 1);
    ck_assert(seg[2].first == 2 && seg[2].count == p->n_kernels - 2);
    off = 0;
    ck_assert_int_eq(cut(p, all_but, &off, seg), 1);

    /* A hook sees every op as it happens: nothing is captured. */
    int h = te_hook_add(&(te_hooks){ .op_end = no_op_end }, NULL);
    n = cut(p, tg_kernel_capturable, (void *)&te_backend_cpu, seg);
    te_hook_remove(h);
    ck_assert_int_eq(n, p->n_kernels);
    run_free(&r);

    /* An observed tensor ends its kernel's run, even for a predicate that
     * would capture everything. */
    ck_assert(te_observe_add("fc1/relu") == TE_OK);
    r = run_mode(mlp_step, &m, TE_MODE_GRAPH, ALL_PASSES, in, 2);
    te_observe_clear();
    p = tg_graph_plan(r.g);
    const int d = value_named(r.g, "fc1/relu:out0")->def;
    ck_assert(d >= 0 && d < p->n_kernels - 1 && tg_host_after(p, &p->kernels[d]));
    n = cut(p, all_but, &off, seg);
    ck_assert_int_eq(n, 2);
    ck_assert(seg[0].first == 0 && seg[0].count == d + 1 && seg[1].first == d + 1);
    run_free(&r);
    te_optim_free(m.opt);
}
END_TEST

static void teardown(void)
{
    free_inputs();
    tu_teardown();
}

Suite *suite_graph(void)
{
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("passes");
    tcase_add_checked_fixture(tc, tu_setup, teardown);
    tcase_add_test(tc, test_fuse_elementwise);
    tcase_add_test(tc, test_recompute);
    tcase_add_test(tc, test_dce_fold_cse);
    tcase_add_test(tc, test_cse_keeps_low_gradients_apart);
    tcase_add_test(tc, test_fuse_activation);
    tcase_add_test(tc, test_bn_fold);
    tcase_add_test(tc, test_fuse_bn_relu);
    tcase_add_test(tc, test_layout_conv_bn);
    tcase_add_test(tc, test_layout_chain);
    tcase_add_test(tc, test_fuse_conv_sum);
    tcase_add_test(tc, test_fuse_conv_relu);
    suite_add_tcase(s, tc);

    tc = tcase_create("every fusable op");
    tcase_add_checked_fixture(tc, tu_setup, teardown);
    tcase_add_loop_test(tc, test_fusable_op_parity, 0, TE_OP_COUNT);
    suite_add_tcase(s, tc);

    tc = tcase_create("runtime");
    tcase_add_checked_fixture(tc, tu_setup, teardown);
    tcase_add_test(tc, test_shape_change);
    tcase_add_test(tc, test_hooks_and_observe);
    tcase_add_test(tc, test_inject_in_fused_chain);
    tcase_add_test(tc, test_trace_errors);
    tcase_add_test(tc, test_save_graph);
    tcase_add_test(tc, test_record_traits);
    tcase_add_test(tc, test_capture_segments);
    suite_add_tcase(s, tc);

    tc = tcase_create("parity");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_parity_mlp);
    tcase_add_test(tc, test_parity_cnn);
    suite_add_tcase(s, tc);
    return s;
}
