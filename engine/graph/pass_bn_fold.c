/*
 * pass_bn_fold.c — batch-norm folding in eval graphs: conv then batch norm
 * with running statistics is one conv with per-channel scaled weights and a
 * new bias, w' = w * s, b' = b * s + beta - mean * s with s = gamma /
 * sqrt(var + eps). The scale comes from the parameters and statistics as
 * they are when the step runs (training between evaluations changes them),
 * so the folding is a small prologue of the kernel, not a compile-time
 * constant. A following activation joins the same kernel.
 */
#include "graph/graph.h"

#include <stdlib.h>

/* The first forward kernel after `after` that reads t, when it is an op
 * of type op (TE_OP_COUNT: an activation); else -1. */
static int fwd_consumer(const tg_plan *p, const te_tensor *t, int after, te_op op)
{
    for (int i = after + 1; i < p->n_kernels; i++) {
        const tg_kernel *k = &p->kernels[i];
        if (k->removed || k->kind != TG_K_FWD)
            continue;
        te_op o = k->node->op;
        bool fits = op == TE_OP_COUNT ? te_op_info_of(o)->fuse == TE_FUSE_ACT : o == op;
        for (int j = 0; j < k->node->n_in; j++)
            if (k->node->in[j] == t)
                return fits ? i : -1;
    }
    return -1;
}

static bool private_temp(const tg_plan *p, const te_tensor *t, const int *uses)
{
    int v = tg_value_of(p, t);
    const tg_value *val = &p->values[v];
    return val->kind == TG_TEMP && !val->observed && !val->output && uses[v] == 1 &&
           t->dtype == TE_F32;
}

static te_tensor *scratch(tg_plan *p, const te_tensor *like, const char *suffix)
{
    te_tensor *t = calloc(1, sizeof *t);
    if (!t)
        abort();
    *t = (te_tensor){ .dtype = TE_F32, .ndim = like->ndim, .numel = like->numel,
                      .nbytes = like->numel * sizeof(float),
                      .flags = TE_TENSOR_PERSISTENT | TE_TENSOR_GRAPH };
    for (int i = 0; i < like->ndim; i++)
        t->shape[i] = like->shape[i];
    snprintf(t->name, sizeof t->name, "%.100s%s", like->name, suffix);
    tg_value_add(p, t, TG_TEMP);
    return t;
}

int tg_pass_bn_fold(tg_plan *p)
{
    int folded = 0;
    for (int c = 0; c < p->n_kernels; c++) {
        tg_kernel *kc = &p->kernels[c];
        if (kc->removed || kc->kind != TG_K_FWD || kc->node->op != TE_OP_CONV2D || kc->shadow)
            continue;
        int *uses = malloc((size_t)p->n_values * sizeof *uses); /* folding adds values */
        if (!uses) {
            te_set_error(TE_ERR_NOMEM, "graph: out of memory in bn-fold");
            return -1;
        }
        tg_count_uses(p, uses);
        te_tensor *y = kc->node->out[0];
        int b = fwd_consumer(p, y, c, TE_OP_BATCHNORM);
        if (b < 0 || !private_temp(p, y, uses)) {
            free(uses);
            continue;
        }
        tg_kernel *kb = &p->kernels[b];
        const te_node *bn = kb->node;
        if (bn->a.training || bn->in[0] != y || !bn->in[3] || kb->shadow ||
            p->values[tg_value_of(p, bn->in[3])].kind == TG_TEMP) {
            free(uses);
            continue;
        }
        kc->kind = TG_K_BN_FOLD;
        kc->act = kb->node;
        kc->fold_w = scratch(p, kc->node->in[1], ".folded");
        kc->fold_b = scratch(p, bn->in[3], ".folded_bias");
        tg_origin_move(kc, kb);
        kb->removed = true;
        p->values[tg_value_of(p, y)].materialized = false;
        te_tensor *z = bn->out[0];
        int a = fwd_consumer(p, z, b, TE_OP_COUNT);
        if (a >= 0 && private_temp(p, z, uses) && !p->kernels[a].shadow) {
            kc->act2 = p->kernels[a].node;
            tg_origin_move(kc, &p->kernels[a]);
            p->kernels[a].removed = true;
            p->values[tg_value_of(p, z)].materialized = false;
        }
        free(uses);
        folded++;
    }
    return folded;
}
