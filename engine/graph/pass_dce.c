/*
 * pass_dce.c — dead-code elimination: a kernel whose every result is a
 * temporary that nothing reads (no kernel, not an output, not observed),
 * and that changes nothing else, is removed. Walking backwards and giving
 * back the uses of each removed kernel's inputs clears whole dead chains
 * in one sweep.
 */
#include "graph/graph.h"

#include <stdlib.h>

static bool removable(const tg_plan *p, const tg_kernel *k, const int *uses)
{
    switch (k->kind) {
    case TG_K_FWD: case TG_K_ACT: case TG_K_EW:
        if (k->node && tg_has_side_effects(k->node))
            return false;
        break;
    case TG_K_BWD: case TG_K_ACT_BWD: case TG_K_SEED:
        break;
    default: /* the optimizer, clipping, zero_grad: what they change is the point */
        return false;
    }
    int ids[TG_IO_MAX];
    int n = tg_kernel_writes(p, k, ids);
    for (int j = 0; j < n; j++) {
        const tg_value *v = &p->values[ids[j]];
        if (v->kind != TG_TEMP || uses[ids[j]] > 0)
            return false;
    }
    /* An unmaterialized output read by nobody is dead too; one read is not. */
    if (k->node)
        for (int o = 0; o < k->node->n_out; o++)
            if (uses[tg_value_of(p, k->node->out[o])] > 0)
                return false;
    return true;
}

int tg_pass_dce(tg_plan *p)
{
    int *uses = malloc((size_t)(p->n_values ? p->n_values : 1) * sizeof *uses);
    if (!uses) {
        te_set_error(TE_ERR_NOMEM, "graph: out of memory in dce");
        return -1;
    }
    tg_count_uses(p, uses);
    int removed = 0, ids[TG_IO_MAX];
    for (int i = p->n_kernels - 1; i >= 0; i--) {
        tg_kernel *k = &p->kernels[i];
        if (k->removed || !removable(p, k, uses))
            continue;
        int n = tg_kernel_reads(p, k, ids);
        for (int j = 0; j < n; j++)
            uses[ids[j]]--;
        k->removed = true;
        removed++;
    }
    free(uses);
    return removed;
}
