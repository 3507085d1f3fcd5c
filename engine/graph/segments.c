/*
 * segments.c — where a compiled step must come back to the host, and the
 * runs of kernels between those points that a device graph can hold.
 *
 * A captured kernel runs later without its host code: whatever it would
 * decide or read on the host at run time is frozen at capture. So a kernel
 * that reads a device value back (a bad-label flag, rounding counts), that
 * takes a fresh value each step from the host (dropout's seed, the
 * optimizer's step count), or that hooks must see as it happens, runs on
 * its own, and a kernel that writes an observed tensor ends its run.
 * Host-only logic, so that tests check it on the CPU with their own
 * predicate.
 */
#include "graph/graph.h"

bool tg_host_after(const tg_plan *p, const tg_kernel *k)
{
    int ids[TG_IO_MAX];
    const int n = tg_kernel_writes(p, k, ids);
    for (int j = 0; j < n; j++)
        if (p->values[ids[j]].observed)
            return true;
    return false;
}

/* Rounding into f16/bf16 counts what it did on the host. */
static bool low_precision(const te_node *n)
{
    for (int j = 0; j < n->n_out; j++)
        if (n->out[j]->dtype == TE_F16 || n->out[j]->dtype == TE_BF16)
            return true;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && (n->in[i]->dtype == TE_F16 || n->in[i]->dtype == TE_BF16))
            return true;
    return false;
}

bool tg_kernel_capturable(const tg_plan *p, const tg_kernel *k, void *ctx)
{
    (void)p;
    const te_backend *be = ctx;
    switch (k->kind) {
    case TG_K_SEED:      /* host values written element by element */
    case TG_K_OPTIM:     /* step count, hooks, the update table from the host */
    case TG_K_UNSCALE:   /* reads the found-inf flag */
    case TG_K_CLIP:      /* reads the norm */
    case TG_K_ZERO_GRAD: /* host bookkeeping of which gradients are valid */
        return false;
    default: break;
    }
    /* Hooks and the profiler see each op as it happens; a deferred step's
     * watch (watch.c) needs no host, its flag kernels are captured with
     * the op's. */
    if (k->shadow || (te_ops_seen_one_by_one() && k->n_orig > 0))
        return false;
    for (int j = 0; j < k->n_orig; j++) {
        const te_node *n = k->orig[j].node;
        if (te_op_info_of(n->op)->rng == TE_RNG_RANDOM || low_precision(n))
            return false;
        if (be && be->graph.host_wait && be->graph.host_wait(n, k->orig[j].backward))
            return false;
    }
    /* A recompute has no origins of its own: its node stands for it. */
    if (k->kind == TG_K_RECOMPUTE && k->node &&
        (te_op_info_of(k->node->op)->rng == TE_RNG_RANDOM || low_precision(k->node) ||
         (be && be->graph.host_wait && be->graph.host_wait(k->node, false))))
        return false;
    return true;
}

int tg_segments_cut(const tg_plan *p, tg_capturable_fn ok, void *ctx, tg_segment *seg)
{
    int n = 0, i = 0;
    while (i < p->n_kernels) {
        const int first = i;
        if (!ok(p, &p->kernels[i], ctx)) {
            seg[n++] = (tg_segment){ .first = first, .count = 1, .capture = false };
            i++;
            continue;
        }
        do
            i++;
        while (i < p->n_kernels && !tg_host_after(p, &p->kernels[i - 1]) && ok(p, &p->kernels[i], ctx));
        seg[n++] = (tg_segment){ .first = first, .count = i - first, .capture = i - first >= 2 };
    }
    return n;
}
