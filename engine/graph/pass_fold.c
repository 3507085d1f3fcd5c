/*
 * pass_fold.c — constant folding: an op whose inputs are all constants
 * (tensors the step function made from data, or results of such ops) is
 * computed once, now, and its results become constants. Chains fold in one
 * forward sweep. Ops with side effects, ops whose results need gradients
 * and observed results are left to run.
 */
#include "graph/graph.h"

#include <stdlib.h>

static bool foldable(const tg_plan *p, const tg_kernel *k)
{
    if (k->kind != TG_K_FWD || tg_has_side_effects(k->node))
        return false;
    const te_node *n = k->node;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && p->values[tg_value_of(p, n->in[i])].kind != TG_CONST)
            return false;
    for (int o = 0; o < n->n_out; o++) {
        const tg_value *v = &p->values[tg_value_of(p, n->out[o])];
        if (v->t->requires_grad || v->observed)
            return false;
    }
    return true;
}

static void make_const(tg_plan *p, te_tensor *t)
{
    tg_value *v = &p->values[tg_value_of(p, t)];
    t->data = te_mem_alloc_on(t->device, t->nbytes);
    if (!te_data(t) && t->nbytes)
        abort(); /* out of memory while compiling */
    v->kind = TG_CONST;
    v->materialized = false;
}

int tg_pass_fold(tg_plan *p)
{
    int folded = 0;
    for (int i = 0; i < p->n_kernels; i++) {
        tg_kernel *k = &p->kernels[i];
        if (k->removed || !foldable(p, k))
            continue;
        te_node *n = k->node;
        for (int o = 0; o < n->n_out; o++)
            make_const(p, n->out[o]);
        for (int j = 0; j < n->n_saved; j++)
            make_const(p, n->saved[j]);
        if (te_node_dispatch(n, false) != TE_OK)
            return -1;
        k->removed = true;
        folded++;
    }
    return folded;
}
