/*
 * pass_fuse_sum.c — conv + add as one kernel: the conv adds its result
 * onto the add's other operand (oneDNN's sum post-op), in that operand's
 * memory, which the add's output takes over. A residual block's
 * y = conv(h) + shortcut(x) then never writes conv(h) to memory and reads
 * it back: the conv's pass over its output does the add.
 *
 * Only where the backward allows it: the addend's memory is overwritten,
 * so nothing may read the addend after the add (an add's backward reads
 * neither input; a projection shortcut's conv output is read by the add
 * alone, an identity shortcut's input is read again by the block's first
 * conv's backward, and is left alone). Both operands are temporaries no
 * one observes (an observed value stays as eager mode wrote it), f32, of
 * one shape (no broadcast), and the conv's output is read by the add
 * alone. The backend must have the kernel (the CPU with oneDNN's
 * convolutions): CUDA plans keep the two kernels. The add's output is
 * eager mode's within f32 rounding, not bit for bit: oneDNN's kernel may
 * start its sums from the addend where the add rounds the conv's sum
 * first. A NaN on either side stays a NaN.
 */
#include "graph/graph.h"

#include <stdlib.h>

static int fwd_kernel_of(const tg_plan *p, const te_node *n, int before)
{
    for (int i = before - 1; i >= 0; i--)
        if (!p->kernels[i].removed && p->kernels[i].kind == TG_K_FWD && p->kernels[i].node == n)
            return i;
    return -1;
}

static bool private_once(const tg_plan *p, const te_tensor *t, const int *uses)
{
    int v = tg_value_of(p, t);
    const tg_value *val = &p->values[v];
    return val->kind == TG_TEMP && !val->observed && !val->output && uses[v] == 1 && t->dtype == TE_F32;
}

static bool same_shape(const te_tensor *a, const te_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return true;
}

/* Does a kernel strictly between lo and hi write one of n's inputs? The
 * conv then runs at hi, where its inputs must still be what they were. */
static bool inputs_written_between(const tg_plan *p, int lo, int hi, const te_node *n)
{
    int ids[TG_IO_MAX];
    for (int k = lo + 1; k < hi; k++) {
        if (p->kernels[k].removed)
            continue;
        int w = tg_kernel_writes(p, &p->kernels[k], ids);
        for (int j = 0; j < w; j++)
            for (int i = 0; i < n->n_in; i++)
                if (n->in[i] && ids[j] == tg_value_of(p, n->in[i]))
                    return true;
    }
    return false;
}

/* The add kernel a with the conv kernel c that makes its operand conv_out
 * and the addend r: fused when every condition above holds. */
static bool fuse(tg_plan *p, int a, const te_tensor *conv_out, const te_tensor *r, const int *uses)
{
    const te_node *add = p->kernels[a].node;
    const te_tensor *y = add->out[0];
    if (!conv_out->node || conv_out->node->op != TE_OP_CONV2D || conv_out->slot != 0 || conv_out == r ||
        !same_shape(conv_out, r) || !same_shape(conv_out, y) || y->dtype != TE_F32 ||
        !private_once(p, conv_out, uses) || !private_once(p, r, uses))
        return false;
    int c = fwd_kernel_of(p, conv_out->node, a);
    int rv = tg_value_of(p, r);
    if (c < 0 || p->kernels[c].shadow || !p->values[rv].materialized ||
        inputs_written_between(p, c, a, conv_out->node))
        return false;
    tg_kernel *kc = &p->kernels[c], *ka = &p->kernels[a];
    tg_kernel f = { .kind = TG_K_SUM, .phase = ka->phase, .node = kc->node, .act = ka->node };
    tg_origin_move(&f, kc);
    tg_origin_move(&f, ka);
    free(ka->orig);
    *ka = f;
    kc->removed = true;
    p->values[tg_value_of(p, conv_out)].materialized = false;
    p->values[tg_value_of(p, y)].inplace_of = rv;
    return true;
}

int tg_pass_fuse_sum(tg_plan *p)
{
    if (!te_backends[p->device]->graph.conv_sum)
        return 0;
    int *uses = malloc((size_t)(p->n_values ? p->n_values : 1) * sizeof *uses);
    if (!uses) {
        te_set_error(TE_ERR_NOMEM, "graph: out of memory in fuse-sum");
        return -1;
    }
    int fused = 0;
    for (int a = 0; a < p->n_kernels; a++) {
        const tg_kernel *ka = &p->kernels[a];
        if (ka->removed || ka->kind != TG_K_FWD || ka->shadow || ka->node->op != TE_OP_ADD)
            continue;
        tg_count_uses(p, uses);
        const te_node *add = ka->node;
        /* either operand may be the conv's */
        fused += fuse(p, a, add->in[0], add->in[1], uses) || fuse(p, a, add->in[1], add->in[0], uses);
    }
    free(uses);
    return fused;
}
