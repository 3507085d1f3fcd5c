/*
 * pass_fuse_ew.c — elementwise fusion: a chain of elementwise ops, each
 * consuming the previous one's result, becomes one kernel that makes one
 * pass over memory (tg_ew_run). Results that something else reads (a
 * backward, a later op, the caller, an observer) are still written; the
 * others never exist. The kernel runs where the chain's last op ran, so a
 * chain stops before a link whose result another kernel reads earlier.
 */
#include "graph/graph.h"

#include <stdlib.h>
#include <string.h>

/* Can an input of this shape feed an elementwise kernel over out? Same
 * size, a scalar, or the trailing dims of out (a bias row). */
static bool feeds(const te_tensor *in, const te_tensor *out)
{
    if (in->numel == out->numel || in->numel == 1)
        return true; /* broadcasting makes equal sizes equal shapes */
    int lead = out->ndim - in->ndim;
    if (lead < 0)
        return false;
    int d = 0;
    while (d < in->ndim && in->shape[d] == 1)
        d++;
    for (int i = d; i < in->ndim; i++)
        if (in->shape[i] != out->shape[lead + i])
            return false;
    return true;
}

static bool fusable(const tg_plan *p, const tg_kernel *k)
{
    if (k->removed || k->kind != TG_K_FWD || k->shadow || te_op_info_of(k->node->op)->ew == TE_EW_NONE)
        return false;
    const te_node *n = k->node;
    if (n->out[0]->dtype != TE_F32)
        return false;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != TE_F32 || !feeds(n->in[i], n->out[0]))
            return false;
    return p->values[tg_value_of(p, n->out[0])].kind == TG_TEMP;
}

/* The register of tensor t in the program, adding it as an input if new. */
static int reg_of(tg_ew *ew, te_tensor *t)
{
    for (int i = 0; i < ew->n_steps; i++)
        if (ew->out[i] == t)
            return TG_EW_MAX + i;
    for (int i = 0; i < ew->n_in; i++)
        if (ew->in[i] == t)
            return i;
    if (ew->n_in == TG_EW_MAX)
        return -1;
    ew->in[ew->n_in] = t;
    return ew->n_in++;
}

static bool add_step(tg_ew *ew, const te_node *n)
{
    if (ew->n_steps == TG_EW_MAX)
        return false;
    tg_ew save = *ew;
    bool binary = te_op_info_of(n->op)->ew == TE_EW_BINARY;
    int a = reg_of(ew, n->in[0]), b = binary ? reg_of(ew, n->in[1]) : -1;
    if (a < 0 || (binary && b < 0)) {
        *ew = save;
        return false;
    }
    int s = ew->n_steps++;
    ew->step[s].op = n->op;
    ew->step[s].a = a;
    ew->step[s].b = b;
    ew->step[s].s = n->a.scale;
    ew->out[s] = n->out[0];
    return true;
}

/* Registers: inputs 0..n_in-1, then step i's result at n_in+i. */
static void renumber(tg_ew *ew)
{
    for (int s = 0; s < ew->n_steps; s++) {
        if (ew->step[s].a >= TG_EW_MAX)
            ew->step[s].a = ew->n_in + ew->step[s].a - TG_EW_MAX;
        if (ew->step[s].b >= TG_EW_MAX)
            ew->step[s].b = ew->n_in + ew->step[s].b - TG_EW_MAX;
    }
}

/* The next kernel after `from` that extends the chain ending in t. */
static int next_link(const tg_plan *p, int from, const te_tensor *t)
{
    for (int i = from + 1; i < p->n_kernels; i++) {
        const tg_kernel *k = &p->kernels[i];
        if (k->removed || k->kind != TG_K_FWD)
            continue;
        for (int j = 0; j < k->node->n_in; j++)
            if (k->node->in[j] == t)
                return fusable(p, k) && k->node->out[0]->numel == t->numel ? i : -1;
    }
    return -1;
}

/* Does a kernel strictly between lo and hi read one of the chain's results? */
static bool chain_read_between(const tg_plan *p, const tg_ew *ew, int lo, int hi)
{
    for (int s = 0; s < ew->n_steps; s++)
        if (tg_read_between(p, lo, hi, tg_value_of(p, ew->out[s])))
            return true;
    return false;
}

int tg_pass_fuse_elementwise(tg_plan *p)
{
    int *uses = malloc((size_t)(p->n_values ? p->n_values : 1) * sizeof *uses);
    if (!uses) {
        te_set_error(TE_ERR_NOMEM, "graph: out of memory in fuse-ew");
        return -1;
    }
    int fused = 0;
    for (int first = 0; first < p->n_kernels; first++) {
        if (!fusable(p, &p->kernels[first]))
            continue;
        tg_ew ew = { .numel = p->kernels[first].node->out[0]->numel };
        int members[TG_EW_MAX], n = 0, last = first;
        if (!add_step(&ew, p->kernels[first].node))
            continue;
        members[n++] = first;
        for (;;) {
            te_tensor *t = ew.out[ew.n_steps - 1];
            const tg_value *tv = &p->values[tg_value_of(p, t)];
            if (tv->observed)
                break; /* no fusion across an observed tensor */
            int next = next_link(p, last, t);
            if (next < 0 || chain_read_between(p, &ew, last, next) || !add_step(&ew, p->kernels[next].node))
                break;
            members[n++] = next;
            last = next;
        }
        if (n < 2)
            continue;
        renumber(&ew);
        tg_kernel *k = &p->kernels[last];
        tg_kernel fused_k = { .kind = TG_K_EW, .phase = TE_PHASE_FORWARD };
        if (!(fused_k.ew = malloc(sizeof *fused_k.ew)))
            abort();
        *fused_k.ew = ew;
        for (int i = 0; i < n; i++) {
            tg_origin_move(&fused_k, &p->kernels[members[i]]);
            if (members[i] != last)
                p->kernels[members[i]].removed = true;
        }
        free(k->orig);
        *k = fused_k;
        /* A result read only inside the chain need not exist in memory. */
        tg_count_uses(p, uses);
        for (int s = 0; s < ew.n_steps; s++) {
            int v = tg_value_of(p, ew.out[s]);
            p->values[v].materialized = uses[v] > 0;
        }
        fused++;
    }
    free(uses);
    return fused;
}
