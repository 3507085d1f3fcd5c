/*
 * pass_recompute.c — cheap forward ops computed again in the backward.
 *
 * A layer norm's or an elementwise activation's output that a backward
 * reads long after the forward (the input of the next linear, whose weight
 * gradient needs it: a transformer block's ln_1, ln_2 and GELU outputs)
 * would sit in memory through the rest of the forward. This pass runs the
 * op again just before that backward, from inputs that are in memory then
 * anyway, so the output has two short lives in the arena instead of one
 * long one (tg_value.recompute; memplan.c gives each life its own place).
 * Only deterministic ops are redone (the same kernel on the same inputs:
 * the same bits), never an output or an observed value, and the redo is
 * not reported to hooks: the op ran once, as in eager mode.
 */
#include "graph/graph.h"

#include <stdlib.h>

/* Layer norm, or an elementwise op of one input: linear in its size. Not
 * an op whose own backward reads its output (ReLU, tanh, exp ...): that
 * backward gets what the forward made, as in eager mode. */
static bool cheap(const te_node *n)
{
    const te_op_info *i = te_op_info_of(n->op);
    if (i->rng != TE_RNG_DETERMINISTIC || tg_has_side_effects(n) || n->n_out != 1 ||
        (te_op_bwd_reads(n->op) & TE_READS_OUT))
        return false;
    return n->op == TE_OP_LAYERNORM || i->ew == TE_EW_UNARY;
}

/* Does a kernel at or after `from`, before the step's parameter update, read v? */
static bool read_from(const tg_plan *p, int from, int v)
{
    int ids[TG_IO_MAX];
    for (int i = from; i < p->n_kernels; i++) {
        tg_kkind kind = p->kernels[i].kind;
        if (kind == TG_K_OPTIM || kind == TG_K_ZERO_GRAD || kind == TG_K_CLIP || kind == TG_K_UNSCALE)
            return false;
        int n = tg_kernel_reads(p, &p->kernels[i], ids);
        for (int j = 0; j < n; j++)
            if (ids[j] == v)
                return true;
    }
    return false;
}

/* Every temporary n reads or keeps (its saved tensors) is in memory and
 * read at or after kernel r anyway, and no parameter changes before r. */
static bool inputs_live_at(const tg_plan *p, const te_node *n, int at, int r)
{
    for (int i = at + 1; i < r; i++)
        if (p->kernels[i].kind == TG_K_OPTIM || p->kernels[i].kind == TG_K_ZERO_GRAD ||
            p->kernels[i].kind == TG_K_CLIP || p->kernels[i].kind == TG_K_UNSCALE)
            return false;
    for (int i = 0; i < n->n_in + n->n_saved; i++) {
        const te_tensor *t = i < n->n_in ? n->in[i] : n->saved[i - n->n_in];
        int v = t ? tg_value_of(p, t) : -1;
        if (v < 0 || p->values[v].kind != TG_TEMP)
            continue;
        if (!p->values[v].materialized || !read_from(p, r, v))
            return false;
    }
    return true;
}

int tg_pass_recompute(tg_plan *p)
{
    int done = 0, ids[TG_IO_MAX];
    for (int k = 0; k < p->n_kernels; k++) {
        const tg_kernel *kk = &p->kernels[k];
        if ((kk->kind != TG_K_FWD && kk->kind != TG_K_ACT) || kk->shadow)
            continue;
        te_node *n = kk->kind == TG_K_ACT ? kk->act : kk->node;
        if (!cheap(n))
            continue;
        int y = tg_value_of(p, n->out[0]);
        const tg_value *val = &p->values[y];
        if (val->kind != TG_TEMP || !val->materialized || val->output || val->observed)
            continue;
        /* Its last forward reader and its first backward one. */
        int last_fwd = k, first_bwd = -1;
        for (int i = k + 1; i < p->n_kernels && first_bwd < 0; i++) {
            int c = tg_kernel_reads(p, &p->kernels[i], ids);
            for (int j = 0; j < c; j++)
                if (ids[j] == y) {
                    if (p->kernels[i].phase == TE_PHASE_BACKWARD)
                        first_bwd = i;
                    else
                        last_fwd = i;
                }
        }
        /* Worth it only across kernels that would hold it for nothing. */
        if (first_bwd < 0 || first_bwd - last_fwd < 3 || !inputs_live_at(p, n, k, first_bwd))
            continue;
        tg_kernel *r = tg_kernel_insert(p, first_bwd, TG_K_RECOMPUTE, TE_PHASE_BACKWARD);
        r->node = n;
        r->fn = te_backend_current()->forward[n->op];
        done++;
    }
    return done;
}
