/*
 * pass_cse.c — common-subexpression elimination: a forward op with the same
 * type, inputs and attributes as an earlier one is dropped and its users
 * read the earlier result. In training the later op's backward goes too:
 * its consumers' gradients now land in the earlier result's gradient,
 * which the earlier op's backward (later in the step) reads whole.
 *
 * Not when that gradient is f16 or bf16 (mixed precision: a cast of one
 * tensor for each of several matmuls, say): the consumers' gradients would
 * be summed in the low precision, rounded at each add, where eager mode
 * takes each through its own op's backward and sums the results in that
 * op's input precision (f32 for a cast up from f32). Graph mode keeps
 * eager mode's rounding points (docs/graph.md), so those ops stay apart.
 */
#include "graph/graph.h"

#include <string.h>

static bool same_op(const tg_plan *p, const te_node *a, const te_node *b)
{
    if (a->op != b->op || a->n_in != b->n_in || a->n_out != b->n_out ||
        memcmp(&a->a, &b->a, sizeof a->a) != 0)
        return false;
    for (int i = 0; i < a->n_in; i++)
        if (a->in[i] != b->in[i])
            return false;
    for (int o = 0; o < a->n_out; o++) {
        if (a->out[o]->dtype != b->out[o]->dtype)
            return false;
        if (p->values[tg_value_of(p, a->out[o])].observed ||
            p->values[tg_value_of(p, b->out[o])].observed)
            return false;
    }
    return true;
}

/* Whether any of n's outputs is of a low precision. */
static bool low_out(const te_node *n)
{
    for (int o = 0; o < n->n_out; o++)
        if (n->out[o]->dtype == TE_F16 || n->out[o]->dtype == TE_BF16)
            return true;
    return false;
}

static tg_kernel *backward_of(tg_plan *p, const te_node *n)
{
    for (int i = 0; i < p->n_kernels; i++)
        if (!p->kernels[i].removed && p->kernels[i].kind == TG_K_BWD && p->kernels[i].node == n)
            return &p->kernels[i];
    return NULL;
}

int tg_pass_cse(tg_plan *p)
{
    int merged = 0;
    for (int j = 0; j < p->n_kernels; j++) {
        tg_kernel *kj = &p->kernels[j];
        if (kj->removed || kj->kind != TG_K_FWD || tg_has_side_effects(kj->node))
            continue;
        for (int i = 0; i < j; i++) {
            tg_kernel *ki = &p->kernels[i];
            if (ki->removed || ki->kind != TG_K_FWD || !same_op(p, ki->node, kj->node))
                continue;
            tg_kernel *bi = backward_of(p, ki->node), *bj = backward_of(p, kj->node);
            if (!bi != !bj)
                continue; /* gradients reach only one of them: keep both */
            if (bj && low_out(kj->node))
                continue; /* their gradients would be summed rounded (above) */
            for (int o = 0; o < kj->node->n_out; o++)
                tg_replace_uses(p, kj->node->out[o], ki->node->out[o]);
            /* The dropped ops are still reported, as part of the kept kernels. */
            tg_origin_move(ki, kj);
            if (bj)
                tg_origin_move(bi, bj);
            kj->removed = true;
            if (bj)
                bj->removed = true;
            merged++;
            break;
        }
    }
    return merged;
}
