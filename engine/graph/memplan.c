/*
 * memplan.c — liveness of every temporary value and its place in the arena.
 *
 * A value is live from the first kernel that writes it to the last that
 * reads it; outputs and observed values live to the end of the step. The
 * planner (plan.c) packs the intervals into one arena, the verifier checks
 * that no two live values share a byte, and each value's tensor gets its
 * address. Gradients of temporaries are values like any other, so the
 * backward's gradients reuse the memory of activations already spent.
 */
#include "graph/graph.h"
#include "graph/plan.h"

#include <stdlib.h>

te_device tg_plan_device(const tg_plan *p)
{
    for (int v = 0; v < p->n_values; v++)
        if (p->values[v].kind == TG_INPUT || p->values[v].kind == TG_EXTERN)
            return p->values[v].t->device;
    return p->n_nodes ? p->nodes[0]->device : te_backend_current()->device;
}

/* What the planner made of the plan's values: n buffers placed in the arena. */
static void log_plan(const tg_plan *p, int n)
{
    int inplace = 0, recomputed = 0, staged = 0, transient = 0;
    for (int v = 0; v < p->n_values; v++) {
        const tg_value *val = &p->values[v];
        inplace += val->inplace_of >= 0 && val->def >= 0;
        recomputed += val->kind == TG_TEMP && val->def >= 0 && val->recompute >= 0;
        staged += val->staged;
        transient += val->kind == TG_TEMP && val->def >= 0 && (val->t->flags & TE_TENSOR_TRANSIENT) != 0;
    }
    /* naive: every value its own buffer, unaligned; the arena aligns each */
    const size_t saved = p->naive_bytes > p->arena_bytes ? p->naive_bytes - p->arena_bytes : 0;
    te_log_write(TE_LOG_GRAPH, TE_LOG_DEBUG,
                 "graph memory: %d buffers placed in a %zu-byte arena on %s (lower bound %zu; %zu without reuse, "
                 "reuse saves %zu); %d values dead before the step ends, %d written in place of another, "
                 "%d recomputed, %d staged inputs",
                 n, p->arena_bytes, te_device_name(p->device), p->lower_bound, p->naive_bytes, saved, transient,
                 inplace, recomputed, staged);
}

te_status tg_plan_memory(tg_plan *p)
{
    const bool stage = tg_capture_wanted(p); /* inputs get fixed slots */
    for (int v = 0; v < p->n_values; v++) {
        p->values[v].def = -1;
        p->values[v].last_use = -1;
        p->values[v].recompute = -1;
        p->values[v].fwd_last = -1;
    }
    for (int k = 0; k < p->n_kernels; k++)
        if (p->kernels[k].kind == TG_K_RECOMPUTE)
            p->values[tg_value_of(p, p->kernels[k].node->out[0])].recompute = k;
    int ids[TG_IO_MAX];
    for (int k = 0; k < p->n_kernels; k++) {
        int n = tg_kernel_writes(p, &p->kernels[k], ids);
        for (int j = 0; j < n; j++) {
            tg_value *v = &p->values[ids[j]];
            if (v->def < 0)
                v->def = k;
            if (k < v->recompute) /* its forward life */
                v->fwd_last = k;
            else
                v->last_use = k; /* accumulating writes read the old value */
        }
        n = tg_kernel_reads(p, &p->kernels[k], ids);
        for (int j = 0; j < n; j++) {
            tg_value *v = &p->values[ids[j]];
            if (v->kind == TG_TEMP && v->def < 0) {
                te_set_error(TE_ERR_STATE, "graph: kernel %d reads %s before anything writes it", k,
                             v->t->name);
                return TE_ERR_STATE;
            }
            if (k < v->recompute)
                v->fwd_last = k;
            else
                v->last_use = k;
        }
    }
    /* A value written in place of another takes that one's memory: the
     * other's buffer lives on to the new value's last read. */
    for (int v = 0; v < p->n_values; v++) {
        tg_value *val = &p->values[v];
        if (val->inplace_of < 0 || val->def < 0)
            continue;
        tg_value *old = &p->values[val->inplace_of];
        int last = val->output || val->observed ? p->n_kernels : val->last_use;
        old->last_use = last > old->last_use ? last : old->last_use;
    }
    /* The temporaries that take memory, in value order. */
    int n = 0;
    /* A recomputed value takes two buffers: which[] names it twice, in a row. */
    size_t cap = 2 * (size_t)(p->n_values ? p->n_values : 1);
    int *which = malloc(cap * sizeof *which);
    te_plan_buf *bufs = malloc(cap * sizeof *bufs);
    size_t *off = malloc(cap * sizeof *off);
    if (!which || !bufs || !off) {
        free(which);
        free(bufs);
        free(off);
        te_set_error(TE_ERR_NOMEM, "graph: out of memory planning");
        return TE_ERR_NOMEM;
    }
    p->naive_bytes = 0;
    for (int v = 0; v < p->n_values; v++) {
        tg_value *val = &p->values[v];
        if (val->kind == TG_INPUT && stage) { /* a slot for the whole step */
            val->staged = true;
            bufs[n] = (te_plan_buf){ .size = val->t->nbytes, .def = 0, .last_use = p->n_kernels };
            which[n++] = v;
            continue;
        }
        if (val->kind != TG_TEMP || val->def < 0) {
            if (val->kind == TG_TEMP)
                val->materialized = false; /* nothing writes it: merged or fused away */
            continue;
        }
        if (val->inplace_of >= 0) { /* bound below, to the memory it takes */
            p->naive_bytes += val->t->nbytes;
            continue;
        }
        if (val->output || val->observed)
            val->last_use = p->n_kernels;
        if (val->recompute >= 0) {
            bufs[n] = (te_plan_buf){ .size = val->t->nbytes, .def = val->def, .last_use = val->fwd_last };
            which[n++] = v;
        }
        bufs[n] = (te_plan_buf){ .size = val->t->nbytes, .def = val->recompute >= 0 ? val->recompute : val->def,
                                 .last_use = val->last_use };
        which[n++] = v;
        p->naive_bytes += val->t->nbytes;
    }
    te_status st = te_plan_arena(bufs, n, off, &p->arena_bytes);
    if (st == TE_OK)
        st = te_plan_verify(bufs, n, off, p->arena_bytes);
    p->lower_bound = te_plan_lower_bound(bufs, n);
    if (st == TE_OK && p->arena_bytes && !(p->arena = te_mem_alloc_on(p->device, p->arena_bytes))) {
        te_set_error(TE_ERR_NOMEM, "graph: cannot allocate the %zu-byte arena on %s", p->arena_bytes,
                     te_device_name(p->device));
        st = TE_ERR_NOMEM;
    }
    if (st == TE_OK)
        for (int i = 0; i < n; i++) {
            tg_value *val = &p->values[which[i]];
            val->offset = off[i];
            val->t->data = (char *)p->arena + off[i];
            if (val->last_use < p->n_kernels && !val->staged)
                val->t->flags |= TE_TENSOR_TRANSIENT;
            if (val->recompute >= 0) { /* the next buffer is its backward life */
                val->offset2 = off[++i];
                p->kernels[val->recompute].redo_data = (char *)p->arena + off[i];
            }
        }
    for (int v = 0; st == TE_OK && v < p->n_values; v++) {
        tg_value *val = &p->values[v];
        if (val->inplace_of < 0 || val->def < 0)
            continue;
        const tg_value *old = &p->values[val->inplace_of];
        val->offset = old->offset;
        val->t->data = old->t->data;
        if (!val->output && !val->observed)
            val->t->flags |= TE_TENSOR_TRANSIENT;
    }
    if (st == TE_OK && te_log_on(TE_LOG_GRAPH, TE_LOG_DEBUG))
        log_plan(p, n);
    free(which);
    free(bufs);
    free(off);
    if (st == TE_OK && stage)
        st = tg_capture_init(p);
    return st;
}
