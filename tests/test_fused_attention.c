/*
 * test_fused_attention.c — the fused causal attention kernel
 * (engine/cpu/cpu_attention.c) against a naive reference that holds the
 * whole T x T scores in double precision, forward and backward, with and
 * without dropout (the mask of the composed path's Dropout op), over shapes
 * whose T is not a multiple of the tiles; and graph mode's fuse-attention
 * pass: the composed chain fused, the same loss and gradients as eager
 * mode, observation keeping one layer composed, the T x T intermediates
 * gone from the memory plan.
 */
#include "cpu/cpu_kernels.h"
#include "graph/graph.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

typedef struct shape4 {
    int B, H, T, D;
} shape4;

/* T not a multiple of the 64-row tiles, and exactly one (64, 128); D = 16,
 * 32, 64, and 24 (rows padded to a multiple of 16); H > 1, B > 1. */
static const shape4 shapes[] = {
    { 1, 1, 5, 16 }, { 2, 3, 37, 32 }, { 1, 2, 70, 64 }, { 2, 2, 130, 16 }, { 2, 1, 64, 24 }, { 1, 1, 128, 8 },
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static float *filled(size_t n, uint32_t seed, float lo, float hi)
{
    float *x = malloc(n * sizeof *x);
    ck_assert(x != NULL);
    tu_fill_uniform(x, (int64_t)n, seed, lo, hi);
    return x;
}

/* Fails unless got is within TOL times the larger of 1 and ref's largest
 * magnitude of ref, element by element. */
static void assert_close(const float *got, const double *ref, size_t n, const char *what)
{
    double mag = 1.0;
    for (size_t i = 0; i < n; i++)
        mag = fabs(ref[i]) > mag ? fabs(ref[i]) : mag;
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - ref[i]) <= TOL * mag, "%s[%zu]: fused %.9g, reference %.9g", what, i,
                      (double)got[i], ref[i]);
}

/* The naive attention of one shape: scores, mask, softmax, dropout factors
 * z ([B,H,T,T], NULL: none), weighted sum; then the backward of dout. */
typedef struct naive {
    double *o, *dq, *dk, *dv;
} naive;

/* A persistent copy of t's values. */
static float *values(const te_tensor *t)
{
    float *v = malloc((size_t)t->numel * sizeof *v);
    ck_assert(v != NULL);
    te_copy_to_f32(t, v);
    return v;
}

static naive naive_attention(shape4 s, const float *q, const float *k, const float *v, const float *z,
                             const float *dout)
{
    const int T = s.T, D = s.D;
    const size_t n = (size_t)s.B * s.H * T * D;
    naive r = { calloc(n, sizeof(double)), calloc(n, sizeof(double)), calloc(n, sizeof(double)),
                calloc(n, sizeof(double)) };
    double *P = malloc((size_t)T * T * sizeof *P), *dP = malloc((size_t)T * T * sizeof *dP);
    ck_assert(r.o && r.dq && r.dk && r.dv && P && dP);
    const double scale = 1.0 / sqrt((double)D);
    for (int bh = 0; bh < s.B * s.H; bh++) {
        const size_t base = (size_t)bh * T * D;
        const float *zs = z ? z + (size_t)bh * T * T : NULL;
        for (int i = 0; i < T; i++) {
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j < T; j++) {
                double dotp = 0.0;
                for (int d = 0; d < D; d++)
                    dotp += (double)q[base + (size_t)i * D + d] * k[base + (size_t)j * D + d];
                P[(size_t)i * T + j] = j <= i ? dotp * scale : -INFINITY;
                mx = fmax(mx, P[(size_t)i * T + j]);
            }
            for (int j = 0; j < T; j++)
                sum += P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - mx);
            for (int j = 0; j < T; j++)
                P[(size_t)i * T + j] /= sum;
        }
        /* A = P z; o = A v; dA = dout v^T; dP = dA z; dS = P (dP - rowsum(P dP)) */
        for (int i = 0; i < T; i++) {
            double rs = 0.0;
            for (int j = 0; j < T; j++) {
                const double zij = zs ? zs[(size_t)i * T + j] : 1.0, a = P[(size_t)i * T + j] * zij;
                double da = 0.0;
                for (int d = 0; d < D; d++) {
                    r.o[base + (size_t)i * D + d] += a * v[base + (size_t)j * D + d];
                    da += (double)dout[base + (size_t)i * D + d] * v[base + (size_t)j * D + d];
                    r.dv[base + (size_t)j * D + d] += a * dout[base + (size_t)i * D + d];
                }
                dP[(size_t)i * T + j] = da * zij;
                rs += P[(size_t)i * T + j] * dP[(size_t)i * T + j];
            }
            for (int j = 0; j <= i; j++) {
                const double ds = P[(size_t)i * T + j] * (dP[(size_t)i * T + j] - rs) * scale;
                for (int d = 0; d < D; d++) {
                    r.dq[base + (size_t)i * D + d] += ds * k[base + (size_t)j * D + d];
                    r.dk[base + (size_t)j * D + d] += ds * q[base + (size_t)i * D + d];
                }
            }
        }
    }
    free(P);
    free(dP);
    return r;
}

static void naive_free(naive *r)
{
    free(r->o);
    free(r->dq);
    free(r->dk);
    free(r->dv);
}

/* The dropout factors (0 or 1/(1-p)) of the Dropout op NAME on [B,H,T,T]
 * at this step, read from the op's own output on ones; its key in *seed. */
static float *dropout_mask(shape4 s, float p, uint64_t *seed)
{
    const int64_t shape[4] = { s.B, s.H, s.T, s.T };
    te_tensor *ones = te_tensor_new(TE_F32, 4, shape);
    for (int64_t i = 0; i < ones->numel; i++)
        te_set(ones, i, 1.0f);
    te_tensor *y = te_dropout(ones, p);
    ck_assert_msg(y != NULL, "%s", te_error());
    *seed = y->node->a.seed;
    float *z = malloc((size_t)y->numel * sizeof *z);
    ck_assert(z != NULL);
    te_copy_to_f32(y, z);
    return z;
}

/* x [B,H,T,D] as [B,T,H,D] (to), or back (!to). */
static float *heads_merged(shape4 s, const float *x, bool to)
{
    float *y = malloc((size_t)s.B * s.H * s.T * s.D * sizeof *y);
    ck_assert(y != NULL);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.H; h++)
            for (int t = 0; t < s.T; t++) {
                const size_t bhtd = (((size_t)b * s.H + h) * s.T + t) * s.D;
                const size_t bthd = (((size_t)b * s.T + t) * s.H + h) * s.D;
                memcpy(y + (to ? bthd : bhtd), x + (to ? bhtd : bthd), (size_t)s.D * sizeof *y);
            }
    return y;
}

/* The kernel on shape si against the reference, dropout p (0: none); the
 * gradients accumulate onto given values when acc; the output and its
 * gradient in the heads-merged layout when merged. */
static void check_kernel(int si, float p, bool acc, bool merged)
{
    const shape4 s = shapes[si];
    const size_t n = (size_t)s.B * s.H * s.T * s.D, nr = (size_t)s.B * s.H * s.T;
    float *q = filled(n, 11 + (uint32_t)si, -1, 1), *k = filled(n, 23 + (uint32_t)si, -1, 1);
    float *v = filled(n, 37 + (uint32_t)si, -1, 1), *dout = filled(n, 41 + (uint32_t)si, -1, 1);
    float *o = malloc(n * sizeof *o), *lse = malloc(nr * sizeof *lse);
    float *dq = filled(n, 5, -1, 1), *dk = filled(n, 6, -1, 1), *dv = filled(n, 7, -1, 1);
    float *dq0 = filled(n, 5, -1, 1), *dk0 = filled(n, 6, -1, 1), *dv0 = filled(n, 7, -1, 1);
    ck_assert(o && lse);
    uint64_t seed = 0;
    float *z = p > 0.0f ? dropout_mask(s, p, &seed) : NULL;
    te_attn a = { .B = s.B, .H = s.H, .T = s.T, .D = s.D, .scale = 1.0f / sqrtf((float)s.D), .p = p, .seed = seed,
                   .merged = merged };
    cpu_attention_forward(&a, q, k, v, o, lse);
    te_attn_grads g = { .dq = dq, .dk = dk, .dv = dv, .acc_q = acc, .acc_k = acc, .acc_v = acc };
    float *dout_k = merged ? heads_merged(s, dout, true) : dout;
    cpu_attention_backward(&a, q, k, v, o, lse, dout_k, &g);
    if (merged) {
        float *o_bhtd = heads_merged(s, o, false);
        free(o);
        o = o_bhtd;
        free(dout_k);
    }

    naive r = naive_attention(s, q, k, v, z, dout);
    if (acc) /* the reference gradients onto the same starting values */
        for (size_t i = 0; i < n; i++) {
            r.dq[i] += dq0[i];
            r.dk[i] += dk0[i];
            r.dv[i] += dv0[i];
        }
    char what[96];
    snprintf(what, sizeof what, "shape %d p=%g%s out", si, (double)p, merged ? " merged" : "");
    assert_close(o, r.o, n, what);
    snprintf(what, sizeof what, "shape %d p=%g dq", si, (double)p);
    assert_close(dq, r.dq, n, what);
    snprintf(what, sizeof what, "shape %d p=%g dk", si, (double)p);
    assert_close(dk, r.dk, n, what);
    snprintf(what, sizeof what, "shape %d p=%g dv", si, (double)p);
    assert_close(dv, r.dv, n, what);
    if (z) { /* the mask dropped something and kept something */
        size_t dropped = 0;
        for (size_t i = 0; i < (size_t)s.B * s.H * s.T * s.T; i++)
            dropped += z[i] == 0.0f;
        ck_assert(dropped > 0 && dropped < (size_t)s.B * s.H * s.T * s.T);
    }
    naive_free(&r);
    free(z);
    free(q), free(k), free(v), free(dout), free(o), free(lse);
    free(dq), free(dk), free(dv), free(dq0), free(dk0), free(dv0);
}

START_TEST(test_kernel_reference)
{
    te_step_begin();
    check_kernel(_i, 0.0f, false, false);
    te_step_end();
}
END_TEST

START_TEST(test_kernel_dropout)
{
    te_step_begin();
    check_kernel(_i, 0.25f, false, false);
    te_step_end();
}
END_TEST

START_TEST(test_kernel_accumulates)
{
    te_step_begin();
    check_kernel(_i, 0.0f, true, false);
    te_step_end();
}
END_TEST

/* The output written, and its gradient read, with the heads merged
 * ([B,T,H,D]); dropout on, so that D_i's read of o counts. */
START_TEST(test_kernel_merged)
{
    te_step_begin();
    check_kernel(_i, 0.25f, false, true);
    te_step_end();
}
END_TEST

/* A row's largest scores far apart in magnitude: the online softmax
 * rescales without overflow, and lse is the log-sum-exp of the scores. */
START_TEST(test_kernel_large_scores)
{
    const shape4 s = { 1, 1, 100, 16 };
    const size_t n = (size_t)s.T * s.D;
    float *q = filled(n, 3, -1, 1), *k = filled(n, 4, -1, 1), *v = filled(n, 8, -1, 1);
    float *o = malloc(n * sizeof *o), *lse = malloc((size_t)s.T * sizeof *lse);
    ck_assert(o && lse);
    for (size_t i = 0; i < n; i++)
        q[i] *= 30.0f; /* scores up to ~100: exp overflows without the running max */
    te_attn a = { .B = s.B, .H = s.H, .T = s.T, .D = s.D, .scale = 1.0f / sqrtf((float)s.D) };
    cpu_attention_forward(&a, q, k, v, o, lse);
    float *dout = filled(n, 9, -1, 1);
    naive r = naive_attention(s, q, k, v, NULL, dout);
    assert_close(o, r.o, n, "large scores: out");
    for (int i = 0; i < s.T; i++) {
        double mx = -INFINITY, sum = 0.0, sc[100];
        for (int j = 0; j <= i; j++) {
            double d = 0.0;
            for (int c = 0; c < s.D; c++)
                d += (double)q[(size_t)i * s.D + c] * k[(size_t)j * s.D + c];
            sc[j] = d / 4.0;
            mx = fmax(mx, sc[j]);
        }
        for (int j = 0; j <= i; j++)
            sum += exp(sc[j] - mx);
        ck_assert_msg(fabs(lse[i] - (mx + log(sum))) <= 1e-4 * fmax(1.0, fabs(mx)), "lse[%d] %g vs %g", i,
                      (double)lse[i], mx + log(sum));
    }
    naive_free(&r);
    free(q), free(k), free(v), free(o), free(lse), free(dout);
}
END_TEST

/* ---- graph mode: the fuse-attention pass ------------------------------------ */

static const shape4 gshape = { 2, 2, 37, 16 };

/* Two layers: h0 attends over parameters q0, k0, v0; h1 over q, k, v made
 * from h0's output and parameters, its output then merging the heads (a
 * transpose and a reshape: graph mode writes the merged tensor directly);
 * the loss an MSE against input 0. */
typedef struct attn_model {
    te_tensor *w[6]; /* q0 k0 v0 q1 k1 v1 */
    float dropout;
} attn_model;

static te_status two_layers(void *ctx, te_tensor *const *in, te_tensor **out)
{
    attn_model *m = ctx;
    te_scope_push("h0");
    te_scope_push("attn");
    te_tensor *a = te_causal_attention(m->w[0], m->w[1], m->w[2], m->dropout);
    te_scope_pop();
    te_scope_pop();
    te_tensor *q = te_add(a, m->w[3]), *k = te_mul(a, m->w[4]), *v = te_add(a, m->w[5]);
    te_scope_push("h1");
    te_scope_push("attn");
    a = te_causal_attention(q, k, v, m->dropout);
    /* the heads merged as a transformer's projection would read them (here
     * seen as [B,H,T,D] again, the target's shape, the same bytes) */
    te_name_next("merge");
    a = te_transpose(a, 1, 2);
    te_name_next("merged");
    a = te_reshape(a, gshape.B, gshape.H, gshape.T, gshape.D);
    te_scope_pop();
    te_scope_pop();
    out[0] = te_mse(a, in[0]);
    out[1] = a;
    return te_backward(out[0]);
}

#define MAX_LOG 128

/* What one run gave: outputs, parameter gradients, the ops hooks saw. */
typedef struct run_result {
    float loss, *out, *grad[6];
    int n_ops;
    char names[MAX_LOG][TE_NAME_MAX];
    char kernels[MAX_LOG][256];
    bool had_data[MAX_LOG];
    int exec[MAX_LOG];
    int attn_kernels, attn_bwd_kernels;
    size_t arena_bytes, naive_bytes;
    bool softmax_in_memory[2];
    char *plan_text;
} run_result;

static void log_op(const te_op_record *rec, void *user)
{
    run_result *r = user;
    if (r->n_ops == MAX_LOG)
        return;
    snprintf(r->names[r->n_ops], TE_NAME_MAX, "%s", rec->name);
    snprintf(r->kernels[r->n_ops], 256, "%s", rec->kernel ? rec->kernel : "");
    r->had_data[r->n_ops] = rec->n_outputs > 0 && rec->outputs[0] && rec->outputs[0]->data;
    r->exec[r->n_ops++] = rec->exec_index;
}

/* The index of op NAME's record in r, or fails. */
static int record_of(const run_result *r, const char *name)
{
    for (int i = 0; i < r->n_ops; i++)
        if (strcmp(r->names[i], name) == 0)
            return i;
    ck_abort_msg("no record of %s", name);
    return -1;
}

static bool eval_mode; /* run_step in evaluation mode (dropout off) */

/* One step from a fresh engine (step 0, so dropout draws the same mask in
 * every run) and the same parameters, in mode with passes `disable` off,
 * observing `observe` (NULL: nothing). */
static run_result run_step(te_mode mode, unsigned disable, float dropout, const char *observe)
{
    te_tape_reset();
    te_shutdown();
    tu_setup();
    const int64_t sh[4] = { gshape.B, gshape.H, gshape.T, gshape.D };
    attn_model m = { .dropout = dropout };
    static const char *const names[6] = { "q0", "k0", "v0", "q1", "k1", "v1" };
    for (int i = 0; i < 6; i++) {
        m.w[i] = te_param_new(names[i], TE_F32, 4, sh);
        ck_assert_msg(m.w[i] != NULL, "%s", te_error());
        for (int64_t j = 0; j < m.w[i]->numel; j++)
            te_set(m.w[i], j, te_rand_uniform(77, (uint64_t)i, (uint64_t)j) * 2.0f - 1.0f);
    }
    te_tensor *target = te_tensor_persistent(TE_F32, 4, sh);
    for (int64_t j = 0; j < target->numel; j++)
        te_set(target, j, te_rand_uniform(78, 0, (uint64_t)j) - 0.5f);
    if (observe)
        ck_assert(te_observe_add(observe) == TE_OK);
    run_result r = { 0 };
    te_graph *g = te_graph_new(two_layers, &m, &(te_graph_opts){ .mode = mode, .n_inputs = 1, .n_outputs = 2,
                                                                 .disable = disable });
    ck_assert(g != NULL);
    int h = te_hook_add(&(te_hooks){ .op_end = log_op }, &r);
    te_tensor *out[2], *in[1] = { target };
    te_zero_grad();
    te_set_training(!eval_mode);
    te_step_begin();
    ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s: %s", te_mode_name(mode), te_error());
    r.loss = te_item(out[0]);
    r.out = values(out[1]);
    for (int i = 0; i < 6; i++)
        r.grad[i] = values(m.w[i]->grad);
    te_step_end();
    te_hook_remove(h);
    const tg_plan *p = tg_graph_plan(g);
    if (p) {
        for (int i = 0; i < p->n_kernels; i++) {
            r.attn_kernels += p->kernels[i].kind == TG_K_ATTN;
            r.attn_bwd_kernels += p->kernels[i].kind == TG_K_ATTN_BWD;
        }
        r.arena_bytes = p->arena_bytes;
        r.naive_bytes = p->naive_bytes;
        for (int v = 0; v < p->n_values; v++)
            for (int l = 0; l < 2; l++) {
                char name[64];
                snprintf(name, sizeof name, "h%d/attn/softmax:out0", l);
                if (strcmp(p->values[v].t->name, name) == 0)
                    r.softmax_in_memory[l] = p->values[v].materialized;
            }
        size_t len;
        FILE *f = open_memstream(&r.plan_text, &len);
        ck_assert(f != NULL);
        tg_print(p, f, "test");
        fclose(f);
    }
    te_observe_clear();
    te_graph_free(g);
    te_tensor_free(target);
    return r;
}

static void result_free(run_result *r)
{
    free(r->out);
    for (int i = 0; i < 6; i++)
        free(r->grad[i]);
    free(r->plan_text);
}

/* got against ref within TOL times the larger of 1 and ref's largest magnitude. */
static void assert_close_f(const float *got, const float *ref, size_t n, const char *what)
{
    double *d = malloc(n * sizeof *d);
    ck_assert(d != NULL);
    for (size_t i = 0; i < n; i++)
        d[i] = ref[i];
    assert_close(got, d, n, what);
    free(d);
}

static void assert_same_results(const run_result *got, const run_result *ref, const char *what)
{
    const size_t n = (size_t)gshape.B * gshape.H * gshape.T * gshape.D;
    char w[96];
    ck_assert_msg(fabsf(got->loss - ref->loss) <= TOL * fmaxf(1.0f, fabsf(ref->loss)), "%s: loss %.9g vs %.9g",
                  what, (double)got->loss, (double)ref->loss);
    snprintf(w, sizeof w, "%s: out", what);
    assert_close_f(got->out, ref->out, n, w);
    for (int i = 0; i < 6; i++) {
        snprintf(w, sizeof w, "%s: grad %d", what, i);
        assert_close_f(got->grad[i], ref->grad[i], n, w);
    }
}

/* Graph mode with fusion gives eager mode's loss and gradients, with and
 * without dropout (the same mask: the same op names at the same step), and
 * with dropout in evaluation mode (none). */
START_TEST(test_graph_parity)
{
    const float p = _i ? 0.2f : 0.0f;
    eval_mode = _i == 2;
    run_result e = run_step(TE_MODE_EAGER, 0, p, NULL);
    run_result f = run_step(TE_MODE_GRAPH, 0, p, NULL);
    run_result c = run_step(TE_MODE_GRAPH, TE_PASS_FUSE_ATTN, p, NULL);
    ck_assert_int_eq(f.attn_kernels, 2);
    ck_assert_int_eq(f.attn_bwd_kernels, 2);
    ck_assert_int_eq(c.attn_kernels, 0);
    assert_same_results(&f, &e, "fused vs eager");
    assert_same_results(&c, &e, "composed graph vs eager");
    if (eval_mode) { /* no dropout: the same as p = 0 */
        run_result z = run_step(TE_MODE_GRAPH, 0, 0.0f, NULL);
        assert_same_results(&f, &z, "eval, dropout 0.2 vs none");
        result_free(&z);
    }
    eval_mode = false;
    result_free(&e);
    result_free(&f);
    result_free(&c);
}
END_TEST

/* Hooks see every op of the chain, in eager order and numbering, with the
 * fused kernel named; the plan's text shows the kernel with its ops. */
START_TEST(test_graph_origins)
{
    run_result e = run_step(TE_MODE_EAGER, 0, 0.1f, NULL);
    run_result f = run_step(TE_MODE_GRAPH, 0, 0.1f, NULL);
    ck_assert_int_eq(f.n_ops, e.n_ops);
    for (int i = 0; i < e.n_ops; i++) {
        ck_assert_str_eq(f.names[i], e.names[i]);
        ck_assert_int_eq(f.exec[i], e.exec[i]);
    }
    static const char *const ops[] = { "scores", "scale", "mask", "softmax", "dropout", "out" };
    for (int l = 0; l < 2; l++)
        for (int j = 0; j < 6; j++) {
            char name[64], grad[72];
            snprintf(name, sizeof name, "h%d/attn/%s", l, ops[j]);
            snprintf(grad, sizeof grad, "grad/%s", name);
            const char *k = f.kernels[record_of(&f, name)], *kb = f.kernels[record_of(&f, grad)];
            ck_assert_msg(strstr(k, "fused-attention: ") && strstr(k, name), "%s: kernel '%s'", name, k);
            ck_assert_msg(strstr(kb, "fused-attention-grad: ") && strstr(kb, grad), "%s: kernel '%s'", grad, kb);
            /* the T x T intermediates are not in memory; out is where no
             * merge follows it (h0) */
            ck_assert_int_eq(f.had_data[record_of(&f, name)], j == 5 && l == 0);
        }
    /* h1's merge: part of the fused kernel, only its result in memory */
    static const char *const merge[] = { "h1/attn/merge", "h1/attn/merged" };
    for (int j = 0; j < 2; j++) {
        char grad[72];
        snprintf(grad, sizeof grad, "grad/%s", merge[j]);
        const char *k = f.kernels[record_of(&f, merge[j])], *kb = f.kernels[record_of(&f, grad)];
        ck_assert_msg(strstr(k, "fused-attention: ") && strstr(k, merge[j]), "%s: kernel '%s'", merge[j], k);
        ck_assert_msg(strstr(kb, "fused-attention-grad: ") && strstr(kb, grad), "%s: kernel '%s'", grad, kb);
        ck_assert_int_eq(f.had_data[record_of(&f, merge[j])], j == 1);
    }
    ck_assert_ptr_nonnull(strstr(f.plan_text, "h1/attn/out:out0 f32[2,2,37,16] temp not in memory"));
    ck_assert_ptr_nonnull(strstr(f.plan_text, "h1/attn/merge:out0 f32[2,37,2,16] temp not in memory"));
    ck_assert_ptr_nonnull(strstr(f.plan_text, "fused-attention forward \n      op h0/attn/scores (MatMul)"));
    ck_assert_ptr_nonnull(strstr(f.plan_text, "h1/attn/softmax:out0 f32[2,2,37,37] temp not in memory"));
    ck_assert_ptr_nonnull(strstr(f.plan_text, "h0/attn/out:lse f32[2,2,37] temp live"));
    result_free(&e);
    result_free(&f);
}
END_TEST

/* Observing an intermediate of layer 0 keeps that layer composed (its
 * softmax in memory, its own kernels); layer 1 still fuses; the results
 * stay eager mode's. */
START_TEST(test_observed_layer_composed)
{
    static const char *const globs[] = { "h0/attn/softmax", "h0/attn/scores:out0", "grad:h0/attn/mask:out0" };
    run_result e = run_step(TE_MODE_EAGER, 0, 0.0f, NULL);
    run_result f = run_step(TE_MODE_GRAPH, 0, 0.0f, globs[_i]);
    ck_assert_int_eq(f.attn_kernels, 1);
    ck_assert_int_eq(f.attn_bwd_kernels, 1);
    ck_assert(f.softmax_in_memory[0]); /* composed: softmax's backward reads it */
    ck_assert(!f.softmax_in_memory[1]);
    const char *k0 = f.kernels[record_of(&f, "h0/attn/softmax")], *k1 = f.kernels[record_of(&f, "h1/attn/softmax")];
    ck_assert_msg(!strstr(k0, "fused-attention"), "h0 kernel '%s'", k0);
    ck_assert_msg(strstr(k1, "fused-attention: "), "h1 kernel '%s'", k1);
    ck_assert(f.had_data[record_of(&f, "h0/attn/softmax")]);
    assert_same_results(&f, &e, "h0 observed vs eager");
    result_free(&e);
    result_free(&f);
}
END_TEST

/* Observing h1's attention output keeps it in memory: the layer still
 * fuses, but its merge stays two kernels of their own, and the results
 * are eager mode's. */
START_TEST(test_observed_out_unmerged)
{
    run_result e = run_step(TE_MODE_EAGER, 0, 0.1f, NULL);
    run_result f = run_step(TE_MODE_GRAPH, 0, 0.1f, "h1/attn/out");
    ck_assert_int_eq(f.attn_kernels, 2);
    ck_assert_int_eq(f.attn_bwd_kernels, 2);
    ck_assert(f.had_data[record_of(&f, "h1/attn/out")]);
    ck_assert(f.had_data[record_of(&f, "h1/attn/merge")]);
    const char *k = f.kernels[record_of(&f, "h1/attn/merge")];
    ck_assert_msg(!strstr(k, "fused-attention"), "merge kernel '%s'", k);
    assert_same_results(&f, &e, "h1/attn/out observed vs eager");
    result_free(&e);
    result_free(&f);
}
END_TEST

/* The plan's memory: each fused layer drops its [B,H,T,T] intermediates
 * and their gradients (five of them at least), keeping a [B,H,T] lse. */
START_TEST(test_graph_memory)
{
    run_result c = run_step(TE_MODE_GRAPH, TE_PASS_FUSE_ATTN, 0.0f, NULL);
    run_result h = run_step(TE_MODE_GRAPH, 0, 0.0f, "h0/attn/softmax");
    run_result f = run_step(TE_MODE_GRAPH, 0, 0.0f, NULL);
    const size_t tt = (size_t)gshape.B * gshape.H * gshape.T * gshape.T * sizeof(float);
    const size_t lse = (size_t)gshape.B * gshape.H * gshape.T * sizeof(float);
    ck_assert_msg(f.naive_bytes + 2 * (5 * tt - lse) <= c.naive_bytes, "fused %zu, composed %zu bytes",
                  f.naive_bytes, c.naive_bytes);
    ck_assert_msg(h.naive_bytes + 5 * tt - lse <= c.naive_bytes && f.naive_bytes < h.naive_bytes,
                  "one layer fused %zu, composed %zu, both fused %zu", h.naive_bytes, c.naive_bytes,
                  f.naive_bytes);
    ck_assert_msg(f.arena_bytes + 2 * tt <= c.arena_bytes, "arena fused %zu, composed %zu", f.arena_bytes,
                  c.arena_bytes);
    result_free(&c);
    result_free(&h);
    result_free(&f);
}
END_TEST

Suite *suite_fused_attention(void)
{
    Suite *s = suite_create("fused_attention");
    TCase *tc = tcase_create("kernel");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_kernel_reference, 0, N_SHAPES);
    tcase_add_loop_test(tc, test_kernel_dropout, 0, N_SHAPES);
    tcase_add_loop_test(tc, test_kernel_accumulates, 0, N_SHAPES);
    tcase_add_loop_test(tc, test_kernel_merged, 0, N_SHAPES);
    tcase_add_test(tc, test_kernel_large_scores);
    suite_add_tcase(s, tc);

    tc = tcase_create("graph");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_graph_parity, 0, 3);
    tcase_add_test(tc, test_graph_origins);
    tcase_add_loop_test(tc, test_observed_layer_composed, 0, 3);
    tcase_add_test(tc, test_observed_out_unmerged);
    tcase_add_test(tc, test_graph_memory);
    suite_add_tcase(s, tc);
    return s;
}
