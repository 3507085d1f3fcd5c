/*
 * ir.c — the values and kernels of a plan: adding, looking up, what each
 * kernel reads and writes, rewriting uses, freeing.
 */
#include "graph/graph.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- tensor -> value id: open addressing on the pointer ------------------ */

typedef struct tg_ptrmap {
    const void **keys;
    int *vals;
    size_t cap, n;
} tg_ptrmap;

static size_t ptr_hash(const void *p, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

static bool map_grow(tg_ptrmap *m)
{
    size_t cap = m->cap ? 2 * m->cap : 256;
    const void **keys = calloc(cap, sizeof *keys);
    int *vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = ptr_hash(m->keys[i], cap);
        while (keys[j])
            j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return true;
}

static int map_get(const tg_ptrmap *m, const void *key)
{
    if (!m || !m->cap || !key)
        return -1;
    for (size_t j = ptr_hash(key, m->cap);; j = (j + 1) & (m->cap - 1)) {
        if (!m->keys[j])
            return -1;
        if (m->keys[j] == key)
            return m->vals[j];
    }
}

static void map_put(tg_ptrmap *m, const void *key, int val)
{
    if ((m->n + 1) * 2 > m->cap && !map_grow(m))
        abort(); /* out of memory while compiling: nothing half-built to hand back */
    size_t j = ptr_hash(key, m->cap);
    while (m->keys[j] && m->keys[j] != key)
        j = (j + 1) & (m->cap - 1);
    if (!m->keys[j])
        m->n++;
    m->keys[j] = key;
    m->vals[j] = val;
}

static void map_free(tg_ptrmap *m)
{
    if (!m)
        return;
    free(m->keys);
    free(m->vals);
    free(m);
}

/* ---- values and kernels -------------------------------------------------- */

int tg_value_of(const tg_plan *p, const te_tensor *t) { return map_get(p->map, t); }

static void *grow(void *arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return arr;
    int c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(arr, (size_t)c * elem);
    if (!q)
        abort(); /* out of memory while compiling */
    memset((char *)q + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
    *cap = c;
    return q;
}

int tg_value_add(tg_plan *p, te_tensor *t, tg_kind kind)
{
    if (!p->map && !(p->map = calloc(1, sizeof *p->map)))
        abort();
    p->values = grow(p->values, &p->cap_values, p->n_values + 1, sizeof *p->values);
    int id = p->n_values++;
    p->values[id] = (tg_value){ .t = t, .kind = kind, .input = -1, .grad_of = -1,
                                .materialized = kind == TG_TEMP, .def = -1, .last_use = -1,
                                .recompute = -1, .fwd_last = -1, .inplace_of = -1 };
    map_put(p->map, t, id);
    return id;
}

tg_kernel *tg_kernel_add(tg_plan *p, tg_kkind kind, te_phase phase)
{
    p->kernels = grow(p->kernels, &p->cap_kernels, p->n_kernels + 1, sizeof *p->kernels);
    tg_kernel *k = &p->kernels[p->n_kernels++];
    memset(k, 0, sizeof *k);
    k->kind = kind;
    k->phase = phase;
    return k;
}

tg_kernel *tg_kernel_insert(tg_plan *p, int pos, tg_kkind kind, te_phase phase)
{
    tg_kernel_add(p, kind, phase);
    tg_kernel k = p->kernels[p->n_kernels - 1];
    memmove(&p->kernels[pos + 1], &p->kernels[pos], (size_t)(p->n_kernels - 1 - pos) * sizeof k);
    p->kernels[pos] = k;
    return &p->kernels[pos];
}

static void kernel_free(tg_kernel *k)
{
    free(k->orig);
    free(k->seed_dy);
    free(k->params);
    free(k->ew);
    free(k->attn);
    free(k->desc);
}

void tg_compact(tg_plan *p)
{
    int w = 0;
    for (int r = 0; r < p->n_kernels; r++) {
        if (p->kernels[r].removed)
            kernel_free(&p->kernels[r]);
        else
            p->kernels[w++] = p->kernels[r];
    }
    p->n_kernels = w;
}

void tg_plan_free(tg_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_kernels; i++)
        kernel_free(&p->kernels[i]);
    for (int i = 0; i < p->n_values; i++) {
        tg_value *v = &p->values[i];
        if (v->kind == TG_EXTERN)
            continue;
        if (v->kind == TG_CONST)
            te_mem_free_on(v->t->device, te_data(v->t), v->t->nbytes);
        free(v->t);
    }
    for (int i = 0; i < p->n_nodes; i++)
        free(p->nodes[i]);
    tg_capture_free(p); /* its graphs first: they point into the arena */
    if (p->arena)
        te_mem_free_on(p->device, p->arena, p->arena_bytes);
    map_free(p->map);
    free(p->values);
    free(p->kernels);
    free(p->nodes);
    free(p->outputs);
    free(p->sig);
    free(p->observe_key);
    free(p);
}

/* ---- side effects --------------------------------------------------------- */

/* Ops whose kernel changes something besides its outputs, or draws from the
 * RNG (dropout's mask changes with the step): they are never removed, folded
 * or merged. */
bool tg_has_side_effects(const te_node *n)
{
    return te_op_info_of(n->op)->rng == TE_RNG_RANDOM || te_node_inplace(n) != 0;
}

/* ---- reads and writes ----------------------------------------------------- */

static void add_id(const tg_plan *p, const te_tensor *t, int *ids, int *n)
{
    int id = t ? tg_value_of(p, t) : -1;
    if (id < 0)
        return;
    for (int i = 0; i < *n; i++)
        if (ids[i] == id)
            return;
    if (*n < TG_IO_MAX)
        ids[(*n)++] = id;
}

static void node_inputs(const tg_plan *p, const te_node *n, int *ids, int *c)
{
    for (int i = 0; i < n->n_in; i++)
        add_id(p, n->in[i], ids, c);
}

static void node_outputs(const tg_plan *p, const te_node *n, int *ids, int *c)
{
    for (int k = 0; k < n->n_out; k++)
        if (p->values[tg_value_of(p, n->out[k])].materialized)
            add_id(p, n->out[k], ids, c);
    for (int j = 0; j < n->n_saved; j++)
        add_id(p, n->saved[j], ids, c);
}

int tg_kernel_reads(const tg_plan *p, const tg_kernel *k, int *ids)
{
    int c = 0;
    switch (k->kind) {
    case TG_K_FWD:
    case TG_K_ACT:
    case TG_K_RECOMPUTE:
        node_inputs(p, k->node, ids, &c);
        break;
    case TG_K_SUM: /* the conv's inputs and the addend */
        node_inputs(p, k->node, ids, &c);
        for (int i = 0; i < k->act->n_in; i++)
            if (k->act->in[i] != k->node->out[0])
                add_id(p, k->act->in[i], ids, &c);
        break;
    case TG_K_BN_FOLD: /* the conv's inputs, the batch norm's parameters and statistics */
        node_inputs(p, k->node, ids, &c);
        for (int i = 1; i < k->act->n_in; i++)
            add_id(p, k->act->in[i], ids, &c);
        break;
    case TG_K_BWD:
    case TG_K_ACT_BWD: {
        const te_node *n = k->node;
        unsigned r = te_op_bwd_reads(n->op);
        if (k->kind == TG_K_ACT_BWD) { /* ReLU's gradient and output instead of n's gradient */
            add_id(p, k->act->out[0]->grad, ids, &c);
            add_id(p, k->act->out[0], ids, &c);
        } else {
            for (int o = 0; o < n->n_out; o++)
                add_id(p, n->out[o]->grad, ids, &c);
        }
        for (int i = 0; i < n->n_in; i++)
            if (r & (1u << i))
                add_id(p, n->in[i], ids, &c);
        for (int o = 0; o < n->n_out; o++)
            if (r & (TE_READS_OUT << o))
                add_id(p, n->out[o], ids, &c);
        if (r & TE_READS_SAVED)
            for (int j = 0; j < n->n_saved; j++)
                add_id(p, n->saved[j], ids, &c);
        break;
    }
    case TG_K_EW:
        for (int i = 0; i < k->ew->n_in; i++)
            add_id(p, k->ew->in[i], ids, &c);
        break;
    case TG_K_ATTN: /* q, k, v */
        add_id(p, k->attn->scores->in[0], ids, &c);
        add_id(p, k->attn->scores->in[1], ids, &c);
        add_id(p, k->attn->out->in[1], ids, &c);
        break;
    case TG_K_ATTN_BWD: /* d(o), q, k, v, o and the log-sum-exp */
        add_id(p, k->attn->o->grad, ids, &c);
        add_id(p, k->attn->scores->in[0], ids, &c);
        add_id(p, k->attn->scores->in[1], ids, &c);
        add_id(p, k->attn->out->in[1], ids, &c);
        add_id(p, k->attn->o, ids, &c);
        add_id(p, k->attn->lse, ids, &c);
        break;
    case TG_K_SEED: case TG_K_OPTIM: case TG_K_CLIP: case TG_K_UNSCALE: case TG_K_ZERO_GRAD:
        break;
    }
    /* A value inside the kernel is not read from memory. */
    int w[TG_IO_MAX], nw = 0;
    if (k->kind == TG_K_EW || k->kind == TG_K_ACT || k->kind == TG_K_BN_FOLD) {
        nw = tg_kernel_writes(p, k, w);
        int keep = 0;
        for (int i = 0; i < c; i++) {
            bool inner = false;
            for (int j = 0; j < nw; j++)
                inner |= w[j] == ids[i];
            if (!inner)
                ids[keep++] = ids[i];
        }
        c = keep;
    }
    return c;
}

int tg_kernel_writes(const tg_plan *p, const tg_kernel *k, int *ids)
{
    int c = 0;
    switch (k->kind) {
    case TG_K_FWD:
    case TG_K_RECOMPUTE:
        node_outputs(p, k->node, ids, &c);
        break;
    case TG_K_ACT:
    case TG_K_SUM:
        node_outputs(p, k->node, ids, &c);
        node_outputs(p, k->act, ids, &c);
        break;
    case TG_K_BN_FOLD:
        add_id(p, k->fold_w, ids, &c);
        add_id(p, k->fold_b, ids, &c);
        add_id(p, (k->act2 ? k->act2 : k->act)->out[0], ids, &c);
        break;
    case TG_K_BWD:
    case TG_K_ACT_BWD:
        for (int i = 0; i < k->node->n_in; i++)
            if (te_needs_grad(k->node->in[i]))
                add_id(p, k->node->in[i]->grad, ids, &c);
        break;
    case TG_K_SEED:
        add_id(p, k->seed_y->grad, ids, &c);
        break;
    case TG_K_EW:
        for (int i = 0; i < k->ew->n_steps; i++)
            if (p->values[tg_value_of(p, k->ew->out[i])].materialized)
                add_id(p, k->ew->out[i], ids, &c);
        break;
    case TG_K_ATTN:
        add_id(p, k->attn->o, ids, &c);
        add_id(p, k->attn->lse, ids, &c);
        break;
    case TG_K_ATTN_BWD: /* the gradients of q, k, v */
        add_id(p, te_needs_grad(k->attn->scores->in[0]) ? k->attn->scores->in[0]->grad : NULL, ids, &c);
        add_id(p, te_needs_grad(k->attn->scores->in[1]) ? k->attn->scores->in[1]->grad : NULL, ids, &c);
        add_id(p, te_needs_grad(k->attn->out->in[1]) ? k->attn->out->in[1]->grad : NULL, ids, &c);
        break;
    case TG_K_OPTIM: case TG_K_CLIP: case TG_K_UNSCALE: case TG_K_ZERO_GRAD:
        break;
    }
    return c;
}

void tg_count_uses(const tg_plan *p, int *uses)
{
    for (int v = 0; v < p->n_values; v++)
        uses[v] = p->values[v].output || p->values[v].observed;
    int ids[TG_IO_MAX];
    for (int i = 0; i < p->n_kernels; i++) {
        if (p->kernels[i].removed)
            continue;
        int n = tg_kernel_reads(p, &p->kernels[i], ids);
        for (int j = 0; j < n; j++)
            uses[ids[j]]++;
    }
}

bool tg_read_between(const tg_plan *p, int lo, int hi, int v)
{
    int ids[TG_IO_MAX];
    for (int i = lo + 1; i < hi; i++) {
        if (p->kernels[i].removed)
            continue;
        int n = tg_kernel_reads(p, &p->kernels[i], ids);
        for (int j = 0; j < n; j++)
            if (ids[j] == v)
                return true;
    }
    return false;
}

void tg_replace_uses(tg_plan *p, te_tensor *from, te_tensor *to)
{
    for (int i = 0; i < p->n_nodes; i++)
        for (int j = 0; j < p->nodes[i]->n_in; j++)
            if (p->nodes[i]->in[j] == from)
                p->nodes[i]->in[j] = to;
    for (int i = 0; i < p->n_kernels; i++)
        if (p->kernels[i].ew)
            for (int j = 0; j < p->kernels[i].ew->n_in; j++)
                if (p->kernels[i].ew->in[j] == from)
                    p->kernels[i].ew->in[j] = to;
    int f = tg_value_of(p, from), t = tg_value_of(p, to);
    for (int i = 0; i < p->n_outputs; i++)
        if (p->outputs[i] == f) {
            p->outputs[i] = t;
            p->values[t].output = true;
        }
}

void tg_origin_move(tg_kernel *to, tg_kernel *from)
{
    tg_origin *o = realloc(to->orig, (size_t)(to->n_orig + from->n_orig) * sizeof *o);
    if (!o)
        abort(); /* out of memory while compiling */
    memcpy(o + to->n_orig, from->orig, (size_t)from->n_orig * sizeof *o);
    to->orig = o;
    to->n_orig += from->n_orig;
    from->n_orig = 0;
    for (int i = 1; i < to->n_orig; i++) /* reported in execution order */
        for (int j = i; j > 0 && o[j].exec < o[j - 1].exec; j--) {
            tg_origin t = o[j];
            o[j] = o[j - 1];
            o[j - 1] = t;
        }
}
