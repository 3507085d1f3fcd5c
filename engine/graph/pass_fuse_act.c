/*
 * pass_fuse_act.c — matmul / linear / conv / batch norm + activation in one
 * kernel. The activation runs right after its producer, on the producer's
 * output while it is still in cache, and in place when nothing else needs
 * the pre-activation in memory: ReLU's backward reads its output, the
 * producers' backwards read their inputs, so in training the
 * pre-activation of a ReLU never exists.
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

int tg_pass_fuse_act(tg_plan *p)
{
    int *uses = malloc((size_t)(p->n_values ? p->n_values : 1) * sizeof *uses);
    if (!uses) {
        te_set_error(TE_ERR_NOMEM, "graph: out of memory in fuse-act");
        return -1;
    }
    int fused = 0;
    for (int a = 0; a < p->n_kernels; a++) {
        tg_kernel *ka = &p->kernels[a];
        if (ka->removed || ka->kind != TG_K_FWD || ka->shadow || te_op_info_of(ka->node->op)->fuse != TE_FUSE_ACT)
            continue;
        te_tensor *mid = ka->node->in[0];
        te_node *prod = mid->node;
        int m = tg_value_of(p, mid);
        if (!prod || p->values[m].kind != TG_TEMP || p->values[m].observed || p->values[m].output ||
            te_op_info_of(prod->op)->fuse != TE_FUSE_PRODUCER || mid->dtype != TE_F32 || mid->slot != 0)
            continue;
        int k = fwd_kernel_of(p, prod, a);
        if (k < 0 || p->kernels[k].shadow || tg_read_between(p, k, a, m))
            continue;
        tg_kernel *kp = &p->kernels[k];
        tg_count_uses(p, uses);
        kp->kind = TG_K_ACT;
        kp->act = ka->node;
        tg_origin_move(kp, ka);
        ka->removed = true;
        /* Only the activation read it: it need not exist in memory. */
        p->values[m].materialized = uses[m] > 1;
        fused++;
    }
    free(uses);
    return fused;
}

/* The kernels writing value v. */
static int writers(const tg_plan *p, int v)
{
    int n = 0, ids[TG_IO_MAX];
    for (int i = 0; i < p->n_kernels; i++) {
        if (p->kernels[i].removed)
            continue;
        int w = tg_kernel_writes(p, &p->kernels[i], ids);
        for (int j = 0; j < w; j++)
            n += ids[j] == v;
    }
    return n;
}

static int bwd_kernel_of(const tg_plan *p, const te_node *n, int after)
{
    for (int i = after + 1; i < p->n_kernels; i++)
        if (!p->kernels[i].removed && p->kernels[i].kind == TG_K_BWD && p->kernels[i].node == n)
            return i;
    return -1;
}

/* The backward mirror: batch norm's backward reads ReLU's gradient through
 * ReLU's mask itself, so the gradient between them never exists. */
int tg_pass_fuse_act_grad(tg_plan *p)
{
    int *uses = malloc((size_t)(p->n_values ? p->n_values : 1) * sizeof *uses);
    if (!uses) {
        te_set_error(TE_ERR_NOMEM, "graph: out of memory in fuse-act-grad");
        return -1;
    }
    tg_count_uses(p, uses);
    int fused = 0;
    for (int r = 0; r < p->n_kernels; r++) {
        tg_kernel *kr = &p->kernels[r];
        if (kr->removed || kr->kind != TG_K_BWD || kr->shadow || kr->node->op != TE_OP_RELU)
            continue;
        te_tensor *mid = kr->node->in[0];
        te_node *bn = mid->node;
        if (!bn || bn->op != TE_OP_BATCHNORM || !mid->grad || mid->dtype != TE_F32)
            continue;
        int g = tg_value_of(p, mid->grad);
        int b = bwd_kernel_of(p, bn, r);
        if (g < 0 || b < 0 || p->kernels[b].shadow || uses[g] != 1 || writers(p, g) != 1 ||
            p->values[g].observed || p->values[g].output)
            continue;
        tg_kernel *kb = &p->kernels[b];
        tg_kernel f = { .kind = TG_K_ACT_BWD, .phase = TE_PHASE_BACKWARD, .node = bn, .act = kr->node };
        tg_origin_move(&f, kr);
        tg_origin_move(&f, kb);
        free(kb->orig);
        *kb = f;
        kr->removed = true;
        p->values[g].materialized = false;
        fused++;
    }
    free(uses);
    return fused;
}
