/*
 * pass_layout.c — a conv's output kept in oneDNN's blocked layout
 * (nChw16c) from the conv to its batch norm, and its gradient from the
 * batch norm's backward to the conv's.
 *
 * oneDNN's convolutions run on blocked layouts, so in eager mode each one
 * reorders its output to NCHW and, in the backward, the output's gradient
 * back: about 8% of the CNN's step (docs/benchmarks.md). Between a conv
 * and the batch norm that alone reads its output, nothing else sees the
 * value: the conv writes it blocked, the batch norm reads it blocked
 * (cpu_norm_blocked.c, which writes its own output in NCHW as every other
 * op expects), and the gradient flows back the same way. The layout is
 * chosen here, once, and no reorder runs inside the step for it.
 *
 * Only a value no one else can see: a temporary of the step, not an
 * output, not observed (a breakpoint, a watch or a dump observes every
 * value: the debugger sees what eager mode shows; so does an injection
 * into the conv or the batch norm's backward, at an index of NCHW), f32, [N,C,H,W] with C
 * a multiple of 16 (the blocked tensor is then exactly the plain one's
 * size, with no padding, and the memory plan stands as it is) and H * W
 * too (the batch norm moves 16 x 16 tiles), and only where the backend
 * says its convolutions choose that layout.
 */
#include "graph/graph.h"

/* Kernel k, which reads the conv output t: the batch norm of t, forward
 * (alone or with its activation) or backward. */
static bool bn_of(const tg_kernel *k, const te_tensor *t)
{
    return (k->kind == TG_K_FWD || k->kind == TG_K_ACT || k->kind == TG_K_BWD || k->kind == TG_K_ACT_BWD) &&
           !k->shadow && k->node->op == TE_OP_BATCHNORM && k->node->in[0] == t;
}

static bool conv_kernel(const tg_kernel *k, const te_node *conv, tg_kkind kind)
{
    return k->kind == kind && k->node == conv && !k->shadow;
}

static bool private_float(const tg_value *val)
{
    return val->kind == TG_TEMP && !val->output && !val->observed && val->recompute < 0 &&
           val->t->dtype == TE_F32;
}

/* Every kernel that touches value v (a conv's output t) or g (its
 * gradient, -1 if none) is one that handles the blocked layout. */
static bool only_conv_and_bn(const tg_plan *p, int v, int g, const te_tensor *t)
{
    int ids[TG_IO_MAX];
    for (int i = 0; i < p->n_kernels; i++) {
        const tg_kernel *k = &p->kernels[i];
        int n = tg_kernel_reads(p, k, ids);
        for (int j = 0; j < n; j++)
            if ((ids[j] == v && !bn_of(k, t)) || (ids[j] == g && !conv_kernel(k, t->node, TG_K_BWD)))
                return false;
        n = tg_kernel_writes(p, k, ids);
        for (int j = 0; j < n; j++)
            if ((ids[j] == v && !conv_kernel(k, t->node, TG_K_FWD)) ||
                (ids[j] == g && !(bn_of(k, t) && (k->kind == TG_K_BWD || k->kind == TG_K_ACT_BWD))) ||
                (ids[j] == g && te_inject_targets(k->node->grad_name))) /* it would land elsewhere */
                return false;
    }
    return true;
}

int tg_pass_layout(tg_plan *p)
{
    const te_backend *be = te_backends[p->device];
    if (!be->graph.blocked16 || !be->graph.blocked16())
        return 0;
    int chosen = 0;
    for (int v = 0; v < p->n_values; v++) {
        const tg_value *val = &p->values[v];
        te_tensor *t = val->t;
        if (!private_float(val) || val->grad_of >= 0 || !val->materialized || !t->node ||
            t->node->op != TE_OP_CONV2D || t->slot != 0 || t->ndim != 4 || t->shape[1] % 16 != 0 ||
            t->shape[2] * t->shape[3] % 16 != 0)
            continue;
        int g = t->grad ? tg_value_of(p, t->grad) : -1;
        if (g >= 0 && !private_float(&p->values[g]))
            continue;
        if (!only_conv_and_bn(p, v, g, t))
            continue;
        t->flags |= TE_TENSOR_BLOCKED16;
        if (g >= 0)
            t->grad->flags |= TE_TENSOR_BLOCKED16;
        chosen++;
    }
    return chosen;
}
