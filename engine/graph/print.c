/*
 * print.c — a plan as readable text (--save-graph): one line per kernel
 * with its original ops, then one line per value with kind, shape, dtype,
 * live interval and arena offset, then the totals.
 */
#include "graph/graph.h"

const char *tg_kernel_kind_name(tg_kkind k)
{
    /* designated: a kind added anywhere in the enum keeps every name right */
    static const char *const names[] = {
        [TG_K_FWD] = "fwd", [TG_K_BWD] = "bwd", [TG_K_SEED] = "seed", [TG_K_OPTIM] = "optim",
        [TG_K_CLIP] = "clip", [TG_K_UNSCALE] = "unscale", [TG_K_ZERO_GRAD] = "zero_grad",
        [TG_K_ACT] = "fused-act", [TG_K_ACT_BWD] = "fused-act-grad", [TG_K_EW] = "fused-ew",
        [TG_K_BN_FOLD] = "bn-fold", [TG_K_ATTN] = "fused-attention", [TG_K_ATTN_BWD] = "fused-attention-grad",
        [TG_K_RECOMPUTE] = "recompute", [TG_K_SUM] = "conv-sum",
    };
    return names[k];
}

static const char *value_kind(tg_kind k)
{
    static const char *const names[] = { "temp", "input", "extern", "const" };
    return names[k];
}

static void print_tensor(const tg_plan *p, FILE *f, const te_tensor *t)
{
    char sh[96];
    int v = t ? tg_value_of(p, t) : -1;
    if (!t) {
        fprintf(f, "-");
        return;
    }
    fprintf(f, "%%%d %s %s%s", v, t->name, te_dtype_name(t->dtype),
            te_shape_str(t->ndim, t->shape, sh, sizeof sh));
}

static void print_list(const tg_plan *p, FILE *f, const char *label, const int *ids, int n)
{
    fprintf(f, "      %s:", label);
    for (int i = 0; i < n; i++) {
        fprintf(f, i ? ", " : " ");
        print_tensor(p, f, p->values[ids[i]].t);
    }
    fprintf(f, "\n");
}

void tg_print(const tg_plan *p, FILE *f, const char *title)
{
    fprintf(f, "# %s\n# %d kernels for %d traced ops, %d values\n\n", title, p->n_kernels,
            p->traced_ops, p->n_values);
    int ids[TG_IO_MAX];
    for (int i = 0; i < p->n_kernels; i++) {
        const tg_kernel *k = &p->kernels[i];
        fprintf(f, "k%-4d %-9s %-8s", i, tg_kernel_kind_name(k->kind), te_phase_name(k->phase));
        if (k->kind == TG_K_OPTIM)
            fprintf(f, " update/* of every parameter with a gradient");
        if (k->kind == TG_K_UNSCALE)
            fprintf(f, " amp/unscale: the gradients of %d parameters by 1/scale, non-finite ones found",
                    k->n_params);
        if (k->kind == TG_K_CLIP)
            fprintf(f, " clip the global gradient norm of %d parameters to %g", k->n_params,
                    (double)k->max_norm);
        if (k->kind == TG_K_SEED)
            fprintf(f, " d(%s) = given", k->seed_y->name);
        fprintf(f, "\n");
        for (int j = 0; j < k->n_orig; j++) {
            const te_node *n = k->orig[j].node;
            fprintf(f, "      op %s (%s) at %s:%d\n", k->orig[j].backward ? n->grad_name : n->name,
                    k->orig[j].backward ? te_op_grad_type_name(n->op) : te_op_type_name(n->op),
                    n->loc.file, n->loc.line);
        }
        int nr = tg_kernel_reads(p, k, ids);
        if (nr)
            print_list(p, f, "reads", ids, nr);
        int nw = tg_kernel_writes(p, k, ids);
        if (nw)
            print_list(p, f, "writes", ids, nw);
    }
    fprintf(f, "\nvalues (temp: live [first write, last read] at arena offset):\n");
    for (int v = 0; v < p->n_values; v++) {
        const tg_value *val = &p->values[v];
        fprintf(f, "  ");
        print_tensor(p, f, val->t);
        fprintf(f, " %s", value_kind(val->kind));
        if (val->kind == TG_INPUT)
            fprintf(f, " %d", val->input);
        if (val->kind == TG_TEMP) {
            if (!val->materialized)
                fprintf(f, " not in memory");
            else if (val->recompute >= 0)
                fprintf(f, " live [%d,%d] %zu bytes at +%zu, recomputed: live [%d,%d] at +%zu", val->def,
                        val->fwd_last, val->t->nbytes, val->offset, val->recompute, val->last_use,
                        val->offset2);
            else if (val->def >= 0)
                fprintf(f, " live [%d,%d] %zu bytes at +%zu", val->def, val->last_use, val->t->nbytes,
                        val->offset);
        }
        if (val->t->flags & TE_TENSOR_BLOCKED16)
            fprintf(f, " nChw16c");
        if (val->inplace_of >= 0)
            fprintf(f, " in place of %%%d", val->inplace_of);
        if (val->output)
            fprintf(f, " output");
        if (val->observed)
            fprintf(f, " observed");
        fprintf(f, "\n");
    }
    fprintf(f, "\narena: %zu bytes planned peak; %zu live at most (lower bound); %zu without sharing\n",
            p->arena_bytes, p->lower_bound, p->naive_bytes);
}
