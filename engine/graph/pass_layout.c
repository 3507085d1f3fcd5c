/*
 * pass_layout.c — values kept in oneDNN's blocked layout (nChw16c) along
 * conv -> batch norm (+ ReLU) -> pool -> conv chains, and their gradients
 * the same way back.
 *
 * oneDNN's convolutions run on blocked layouts, so in eager mode each one
 * reorders its input and output, and in the backward their gradients:
 * about 8% of the CNN's step (docs/benchmarks.md). Inside a chain nothing
 * else sees those values: the conv writes its output blocked, the batch
 * norm reads it so and writes its own output blocked where a pool or a
 * conv takes it next (cpu_norm_blocked.c), the pools read and write it so
 * (cpu_pool_blocked.c; global average pool's [N,C] is the same in both
 * layouts), and the next conv reads it as it is. The layouts are chosen
 * here, once, and no reorder runs inside the step for them.
 *
 * Only a value no one else can see: a temporary of the step, not an
 * output, not observed (a breakpoint, a watch or a dump observes every
 * value: the debugger sees what eager mode shows; so does an injection,
 * at an index of NCHW), f32 (max pool's argmax: i32), [N,C,H,W] with C a
 * multiple of 16 (the blocked tensor is then exactly the plain one's
 * size, with no padding, and the memory plan stands as it is) and H * W
 * too (the batch norm moves 16 x 16 tiles), every kernel that touches it
 * or its gradient one that takes the layout there, and only where the
 * backend says its convolutions choose that layout.
 */
#include "graph/graph.h"

#include <stdlib.h>

/* Whether kernel k takes t, or t's gradient, in nChw16c wherever it reads
 * or writes it: conv's x and y; batch norm's x and its output (the ReLU's
 * when fused); max pool's x, y and argmax; global average pool's x. */
static bool takes_blocked(const tg_kernel *k, const te_tensor *t)
{
    const te_node *n = k->node;
    if (k->shadow)
        return false;
    if (k->kind == TG_K_ACT || k->kind == TG_K_ACT_BWD)
        return n->op == TE_OP_BATCHNORM && k->act->op == TE_OP_RELU && (t == n->in[0] || t == k->act->out[0]);
    if (k->kind != TG_K_FWD && k->kind != TG_K_BWD)
        return false;
    switch (n->op) {
    case TE_OP_CONV2D:
    case TE_OP_BATCHNORM:
        return t == n->in[0] || t == n->out[0];
    case TE_OP_MAXPOOL2D:
        return t == n->in[0] || t == n->out[0] || (n->n_saved > 0 && t == n->saved[0]);
    case TE_OP_GLOBAL_AVGPOOL:
        return t == n->in[0];
    default:
        return false;
    }
}

static bool private_value(const tg_value *val, te_dtype dtype)
{
    return val->kind == TG_TEMP && !val->output && !val->observed && val->recompute < 0 && val->t->dtype == dtype;
}

/* Value v's own test: its shape and standing (of dtype: i32 for an
 * argmax), and every kernel touching it or its gradient g (-1 if none)
 * takes the layout; an injection into a backward that writes g would land
 * at an index of NCHW. */
static bool may_block(const tg_plan *p, int v, int g, te_dtype dtype)
{
    const tg_value *val = &p->values[v];
    const te_tensor *t = val->t;
    if (!private_value(val, dtype) || val->grad_of >= 0 || !val->materialized || t->ndim != 4 ||
        t->shape[1] % 16 != 0 || t->shape[2] * t->shape[3] % 16 != 0)
        return false;
    if (g >= 0 && !private_value(&p->values[g], TE_F32))
        return false;
    int ids[TG_IO_MAX];
    for (int i = 0; i < p->n_kernels; i++) {
        const tg_kernel *k = &p->kernels[i];
        int n = tg_kernel_reads(p, k, ids);
        for (int j = 0; j < n; j++)
            if ((ids[j] == v || ids[j] == g) && !takes_blocked(k, t))
                return false;
        n = tg_kernel_writes(p, k, ids);
        for (int j = 0; j < n; j++)
            if ((ids[j] == v || ids[j] == g) &&
                (!takes_blocked(k, t) ||
                 (ids[j] == g && (te_inject_targets(k->node->grad_name) ||
                                  (k->act && te_inject_targets(k->act->grad_name))))))
                return false;
    }
    return true;
}

/* Drops value of t from the chosen set; true if it was in it. */
static bool drop(const tg_plan *p, bool *chosen, const te_tensor *t)
{
    int v = t ? tg_value_of(p, t) : -1;
    if (v < 0 || !chosen[v])
        return false;
    chosen[v] = false;
    return true;
}

static bool is_chosen(const tg_plan *p, const bool *chosen, const te_tensor *t)
{
    int v = t ? tg_value_of(p, t) : -1;
    return v >= 0 && chosen[v];
}

/* What the kernels take together: a batch norm writes its output blocked
 * only from a blocked x; a max pool's x, y and argmax are blocked all or
 * none. Dropping one value may drop others: repeated until nothing
 * changes. */
static void pair_up(const tg_plan *p, bool *chosen)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < p->n_kernels; i++) {
            const tg_kernel *k = &p->kernels[i];
            const te_node *n = k->node;
            if (k->kind == TG_K_FWD && n->op == TE_OP_BATCHNORM && !is_chosen(p, chosen, n->in[0]))
                changed |= drop(p, chosen, n->out[0]);
            if (k->kind == TG_K_ACT && n->op == TE_OP_BATCHNORM && !is_chosen(p, chosen, n->in[0]))
                changed |= drop(p, chosen, k->act->out[0]);
            if (k->kind == TG_K_FWD && n->op == TE_OP_MAXPOOL2D &&
                !(is_chosen(p, chosen, n->in[0]) && is_chosen(p, chosen, n->out[0]) &&
                  is_chosen(p, chosen, n->saved[0]))) {
                changed |= drop(p, chosen, n->in[0]);
                changed |= drop(p, chosen, n->out[0]);
                changed |= drop(p, chosen, n->saved[0]);
            }
        }
    }
}

int tg_pass_layout(tg_plan *p)
{
    const te_backend *be = te_backends[p->device];
    if (!be->graph.blocked16 || !be->graph.blocked16())
        return 0;
    bool *chosen = calloc((size_t)p->n_values + 1, sizeof *chosen);
    if (!chosen)
        return 0; /* the plain layouts: slower, never wrong */
    for (int v = 0; v < p->n_values; v++) {
        const te_tensor *t = p->values[v].t;
        chosen[v] = may_block(p, v, t->grad ? tg_value_of(p, t->grad) : -1, TE_F32);
    }
    for (int i = 0; i < p->n_kernels; i++) { /* max pools' argmax */
        const te_node *n = p->kernels[i].node;
        int v = p->kernels[i].kind == TG_K_FWD && n->op == TE_OP_MAXPOOL2D && n->n_saved > 0
                    ? tg_value_of(p, n->saved[0])
                    : -1;
        if (v >= 0)
            chosen[v] = may_block(p, v, -1, TE_I32);
    }
    pair_up(p, chosen);
    int n = 0;
    for (int v = 0; v < p->n_values; v++) {
        if (!chosen[v])
            continue;
        te_tensor *t = p->values[v].t;
        t->flags |= TE_TENSOR_BLOCKED16;
        if (t->grad)
            t->grad->flags |= TE_TENSOR_BLOCKED16;
        n++;
    }
    free(chosen);
    return n;
}
