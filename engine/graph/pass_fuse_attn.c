/*
 * pass_fuse_attn.c — causal self-attention as one kernel each way.
 *
 * te_causal_attention composes named ops, so that every intermediate is a
 * tensor the debugger can stop on:
 *
 *   scores = q @ k^T   scale   masked_fill(causal, -inf)   softmax(last)
 *   [dropout]   out = att @ v
 *
 * Those intermediates are [B,H,T,T] each, most of a transformer's memory.
 * Where nothing but the chain itself needs them, this pass replaces the
 * chain's forward kernels by one (TG_K_ATTN, where `out` ran) and its
 * backward kernels by one (TG_K_ATTN_BWD, where the last of them ran),
 * both in cpu_attention.c: tiled, online softmax, only a log-sum-exp per
 * row kept between them. The fused kernels carry the chain's ops as their
 * origins, so hooks see every op of the chain, under its name, in order.
 *
 * When out goes on to the heads' merge (transpose(1, 2) to [B,T,H,D], then
 * reshapes: copies in the engine, the same bytes in another shape), the
 * merge joins the chain: the forward writes the merged tensor the next
 * linear reads, in that layout, and the backward reads it and its gradient
 * (for D_i = dO_i . o_i), so that out and its copies are never in memory:
 * the attention output is kept once, not twice. When the merge's tensors
 * may not disappear (observed, read elsewhere) the chain ends at out.
 *
 * A layer stays composed when an intermediate (or its gradient) is
 * observed (te_observe_add, breakpoints, dumps), is an output of the step,
 * or is read by any kernel outside the chain; when an injection targets
 * one of its ops; or when the chain is not exactly causal attention (the
 * mask not a constant upper triangle, softmax not over the last axis, q, k
 * or v shared or of different dtypes). Other layers fuse all the same.
 *
 * Under AMP q, k, v are f16 or bf16 (at O1 the outputs of casts named
 * scores/cast_in0, scores/cast_in1 and out/cast_in1 when they were f32:
 * those stay outside, ordinary kernels before the chain), and the chain
 * holds casts of its own at O1 and O2: softmax is an F32 op, so
 *
 *   scores  scale  mask  softmax/cast_in0 (up)  softmax  [dropout]
 *   out/cast_in0 (down)  out
 *
 * while at O3 every op of it is low and there are none. Those two casts
 * join the chain (their T x T outputs are never in memory either) and are
 * reported in their places. The fused kernel stands for the chain with
 * every intermediate in f32 (the scores, the probabilities: flash
 * attention's precision), q, k, v read as f32 and only o rounded, once
 * (in the backward dq, dk, dv); composed, the chain rounds the scores and
 * the probabilities too. The two agree within the ULP bound of docs/amp.md.
 * The chain's backward runs where its last backward kernel ran, or where
 * its first did when a kernel in between reads dv (at O1 the backward of
 * v's cast, out/cast_in1): it is whole there already.
 */
#include "graph/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAIN_MAX 11 /* scores .. out (two casts), and the merge: a transpose and up to two reshapes */

typedef struct chain {
    tg_attn a;
    te_node *n[CHAIN_MAX]; /* in forward order */
    int n_nodes;
    int fwd[CHAIN_MAX], bwd[CHAIN_MAX]; /* kernel positions; bwd -1: none */
    int mids[2 * CHAIN_MAX];            /* value ids of the intermediates and their gradients */
    int n_mids;
} chain;

/* The node of the step making t (its first output) if it is of op, else NULL. */
static te_node *made_by(const tg_plan *p, const te_tensor *t, te_op op)
{
    int v = t ? tg_value_of(p, t) : -1;
    if (v < 0 || p->values[v].kind != TG_TEMP)
        return NULL;
    return t->node && t->node->op == op && t->slot == 0 ? t->node : NULL;
}

/* Is m, broadcast to [T,T], the causal mask: nonzero exactly above the
 * diagonal? It must be known now: a constant or a persistent tensor. */
static bool causal_mask(const tg_plan *p, const te_tensor *m, int64_t T)
{
    int v = tg_value_of(p, m);
    if (v < 0 || (p->values[v].kind != TG_CONST && p->values[v].kind != TG_EXTERN) || !te_data(m) ||
        m->dtype != TE_F32 || m->numel != T * T || m->ndim < 2 || m->shape[m->ndim - 1] != T)
        return false;
    float *row = malloc((size_t)T * sizeof *row); /* read a row at a time, wherever m lives */
    bool causal = row != NULL;
    for (int64_t i = 0; causal && i < T; i++) {
        causal = te_tensor_read(m, i * T, T, row) == TE_OK;
        for (int64_t j = 0; causal && j < T; j++)
            causal = (row[j] != 0.0f) == (j > i);
    }
    free(row);
    return causal;
}

static int kernel_of(const tg_plan *p, const te_node *n, tg_kkind kind)
{
    for (int i = 0; i < p->n_kernels; i++)
        if (!p->kernels[i].removed && p->kernels[i].kind == kind && p->kernels[i].node == n)
            return i;
    return -1;
}

/* The chain ending in the matmul `out`, as te_causal_attention makes it. */
static bool match(const tg_plan *p, te_node *out, chain *c)
{
    memset(c, 0, sizeof *c);
    if (out->op != TE_OP_MATMUL || out->a.trans_a || out->a.trans_b)
        return false;
    te_node *down = made_by(p, out->in[0], TE_OP_CAST);
    te_node *drop = made_by(p, down ? down->in[0] : out->in[0], TE_OP_DROPOUT);
    te_node *soft = made_by(p, drop ? drop->in[0] : down ? down->in[0] : out->in[0], TE_OP_SOFTMAX);
    te_node *up = soft ? made_by(p, soft->in[0], TE_OP_CAST) : NULL;
    te_node *mask = soft ? made_by(p, up ? up->in[0] : soft->in[0], TE_OP_MASKED_FILL) : NULL;
    te_node *scale = mask ? made_by(p, mask->in[0], TE_OP_SCALE) : NULL;
    te_node *scores = scale ? made_by(p, scale->in[0], TE_OP_MATMUL) : NULL;
    if (!scores || scores->a.trans_a || !scores->a.trans_b)
        return false;
    const te_tensor *q = scores->in[0], *k = scores->in[1], *v = out->in[1];
    const te_dtype dt = q->dtype; /* the chain's: f32, or the low dtype at every level of AMP */
    if ((dt != TE_F32 && dt != TE_F16 && dt != TE_BF16) || q->ndim != 4 || !te_same_shape(q, k) ||
        !te_same_shape(q, v) || k->dtype != dt || v->dtype != dt || out->in[0]->dtype != dt ||
        out->out[0]->dtype != dt || scores->out[0]->dtype != dt || mask->out[0]->dtype != dt || q == k ||
        q == v || k == v)
        return false;
    if (soft->a.axis != soft->out[0]->ndim - 1 || !(isinf(mask->a.value) && mask->a.value < 0) ||
        !causal_mask(p, mask->in[1], q->shape[2]))
        return false;
    c->a = (tg_attn){ .scores = scores, .scale = scale, .mask = mask, .cast_up = up, .softmax = soft,
                      .dropout = drop, .cast_down = down, .out = out, .o = out->out[0] };
    te_node *order[] = { scores, scale, mask, up, soft, drop, down, out };
    for (size_t j = 0; j < sizeof order / sizeof order[0]; j++)
        if (order[j])
            c->n[c->n_nodes++] = order[j];
    return true;
}

/* The node of op whose forward kernel reads t as its first input, if any. */
static te_node *read_by(const tg_plan *p, const te_tensor *t, te_op op)
{
    for (int i = 0; i < p->n_kernels; i++) {
        const tg_kernel *k = &p->kernels[i];
        if (!k->removed && k->kind == TG_K_FWD && k->node->op == op && k->node->in[0] == t)
            return k->node;
    }
    return NULL;
}

/* c with the heads' merge after out appended, if out goes on to one. */
static bool add_merge(const tg_plan *p, chain *c)
{
    te_node *t = read_by(p, c->a.out->out[0], TE_OP_TRANSPOSE);
    if (!t || t->a.dim0 != 1 || t->a.dim1 != 2 || t->out[0]->dtype != c->a.o->dtype)
        return false;
    c->n[c->n_nodes++] = t;
    for (te_node *r; c->n_nodes < CHAIN_MAX && (r = read_by(p, c->n[c->n_nodes - 1]->out[0], TE_OP_RESHAPE));)
        c->n[c->n_nodes++] = r;
    c->a.o = c->n[c->n_nodes - 1]->out[0];
    c->a.merged = true;
    return true;
}

/* Is kernel i one of the chain's? */
static bool in_chain(const chain *c, int i)
{
    for (int j = 0; j < c->n_nodes; j++)
        if (c->fwd[j] == i || c->bwd[j] == i)
            return true;
    return false;
}

static bool is_mid(const chain *c, int v)
{
    for (int j = 0; j < c->n_mids; j++)
        if (c->mids[j] == v)
            return true;
    return false;
}

/* The kernels of the chain, and nothing else that needs its intermediates. */
static bool only_chain_needs(const tg_plan *p, chain *c)
{
    int n_bwd = 0;
    for (int j = 0; j < c->n_nodes; j++) {
        te_node *n = c->n[j];
        c->fwd[j] = kernel_of(p, n, TG_K_FWD);
        c->bwd[j] = kernel_of(p, n, TG_K_BWD);
        n_bwd += c->bwd[j] >= 0;
        if (c->fwd[j] < 0 || te_inject_targets(n->name))
            return false;
    }
    if (n_bwd != 0 && n_bwd != c->n_nodes) /* a backward through part of the chain */
        return false;
    for (int j = 0; j + 1 < c->n_nodes; j++) { /* every op's output but the last's (o) */
        const te_tensor *t = c->n[j]->out[0];
        const te_tensor *pair[2] = { t, t->grad };
        for (int g = 0; g < 2; g++) {
            int v = pair[g] ? tg_value_of(p, pair[g]) : -1;
            if (v < 0)
                continue;
            const tg_value *val = &p->values[v];
            if (val->kind != TG_TEMP || val->observed || val->output)
                return false;
            c->mids[c->n_mids++] = v;
        }
    }
    int ids[TG_IO_MAX];
    for (int i = 0; i < p->n_kernels; i++) {
        if (p->kernels[i].removed || in_chain(c, i))
            continue;
        int n = tg_kernel_reads(p, &p->kernels[i], ids);
        for (int j = 0; j < n; j++)
            if (is_mid(c, ids[j]))
                return false;
        n = tg_kernel_writes(p, &p->kernels[i], ids);
        for (int j = 0; j < n; j++)
            if (is_mid(c, ids[j]))
                return false;
    }
    return true;
}

/* Where the backward runs: where the chain's last backward kernel ran
 * (hi), or where its first did (lo) when a kernel between them reads the
 * gradient of v, which the chain's first backward (out's) made; -1 when a
 * kernel between them touches the gradients of q or k or writes v's. (The
 * gradient of o is whole before lo: its readers' backwards ran.) */
static int backward_at(const tg_plan *p, const chain *c, int lo, int hi)
{
    const te_tensor *in[3] = { c->a.scores->in[0], c->a.scores->in[1], c->a.out->in[1] };
    int g[3];
    for (int x = 0; x < 3; x++)
        g[x] = in[x]->grad ? tg_value_of(p, in[x]->grad) : -1;
    int ids[2 * TG_IO_MAX]; /* reads, then writes */
    bool early = false;
    for (int i = lo + 1; i < hi; i++) {
        if (p->kernels[i].removed || in_chain(c, i))
            continue;
        const int n_reads = tg_kernel_reads(p, &p->kernels[i], ids);
        const int n = n_reads + tg_kernel_writes(p, &p->kernels[i], ids + n_reads);
        for (int j = 0; j < n; j++) {
            if (ids[j] < 0)
                continue;
            if (ids[j] == g[0] || ids[j] == g[1] || (ids[j] == g[2] && j >= n_reads))
                return -1;
            early |= ids[j] == g[2];
        }
    }
    return early ? lo : hi;
}

/* The [B,H,T] log-sum-exp of the scores' rows: a temporary of the plan,
 * written by the forward, read by the backward. */
static te_tensor *lse_value(tg_plan *p, const chain *c)
{
    const te_tensor *q = c->a.scores->in[0];
    te_tensor *t = calloc(1, sizeof *t);
    if (!t)
        abort(); /* out of memory while compiling */
    t->dtype = TE_F32;
    t->ndim = 3;
    memcpy(t->shape, q->shape, 3 * sizeof *t->shape);
    t->numel = q->shape[0] * q->shape[1] * q->shape[2];
    t->nbytes = (size_t)t->numel * sizeof(float);
    t->flags = TE_TENSOR_PERSISTENT | TE_TENSOR_GRAPH;
    snprintf(t->name, sizeof t->name, "%.*s:lse", TE_NAME_MAX - 8, c->a.out->name);
    tg_value_add(p, t, TG_TEMP);
    return t;
}

/* Replaces kernel `at` by a fused one of kind standing for kernels ks. */
static void fuse(tg_plan *p, const chain *c, const int *ks, int at, tg_kkind kind, te_phase phase)
{
    tg_kernel f = { .kind = kind, .phase = phase, .node = c->a.out };
    if (!(f.attn = malloc(sizeof *f.attn)))
        abort();
    *f.attn = c->a;
    for (int j = 0; j < c->n_nodes; j++) {
        tg_origin_move(&f, &p->kernels[ks[j]]);
        if (ks[j] != at)
            p->kernels[ks[j]].removed = true;
    }
    free(p->kernels[at].orig);
    p->kernels[at] = f;
}

int tg_pass_fuse_attention(tg_plan *p)
{
    int fused = 0;
    for (int i = 0; i < p->n_kernels; i++) {
        tg_kernel *k = &p->kernels[i];
        chain c, merged;
        if (k->removed || k->kind != TG_K_FWD || !match(p, k->node, &c))
            continue;
        merged = c;
        if (add_merge(p, &merged) && only_chain_needs(p, &merged))
            c = merged;
        else if (!only_chain_needs(p, &c))
            continue;
        int lo = p->n_kernels, hi = -1;
        for (int j = 0; j < c.n_nodes; j++)
            if (c.bwd[j] >= 0) {
                lo = c.bwd[j] < lo ? c.bwd[j] : lo;
                hi = c.bwd[j] > hi ? c.bwd[j] : hi;
            }
        const int at = hi >= 0 ? backward_at(p, &c, lo, hi) : -1;
        if (hi >= 0 && at < 0)
            continue;
        c.a.lse = lse_value(p, &c);
        fuse(p, &c, c.fwd, i, TG_K_ATTN, TE_PHASE_FORWARD);
        if (hi >= 0)
            fuse(p, &c, c.bwd, at, TG_K_ATTN_BWD, TE_PHASE_BACKWARD);
        for (int j = 0; j < c.n_mids; j++) /* the T x T tensors: never in memory */
            p->values[c.mids[j]].materialized = false;
        fused++;
    }
    return fused;
}
