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

static bool producer_op(te_op op)
{
    return op == TE_OP_LINEAR || op == TE_OP_MATMUL || op == TE_OP_CONV2D || op == TE_OP_BATCHNORM;
}

static int fwd_kernel_of(const tg_plan *p, const te_node *n, int before)
{
    for (int i = before - 1; i >= 0; i--)
        if (!p->kernels[i].removed && p->kernels[i].kind == TG_K_FWD && p->kernels[i].node == n)
            return i;
    return -1;
}

/* Does a kernel strictly between lo and hi read t? */
static bool read_between(const tg_plan *p, int lo, int hi, int t)
{
    int ids[TG_IO_MAX];
    for (int i = lo + 1; i < hi; i++) {
        if (p->kernels[i].removed)
            continue;
        int n = tg_kernel_reads(p, &p->kernels[i], ids);
        for (int j = 0; j < n; j++)
            if (ids[j] == t)
                return true;
    }
    return false;
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
        if (ka->removed || ka->kind != TG_K_FWD || ka->shadow || !tg_is_activation(ka->node->op))
            continue;
        te_tensor *mid = ka->node->in[0];
        te_node *prod = mid->node;
        int m = tg_value_of(p, mid);
        if (!prod || p->values[m].kind != TG_TEMP || p->values[m].observed || p->values[m].output ||
            !producer_op(prod->op) || mid->dtype != TE_F32 || mid->slot != 0)
            continue;
        int k = fwd_kernel_of(p, prod, a);
        if (k < 0 || p->kernels[k].shadow || read_between(p, k, a, m))
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
