/*
 * trace.c — running a step function under the tracer.
 *
 * While te_tracing is set, ops make abstract outputs (shape, no data) and
 * call te_trace_fwd instead of running; te_backward, te_optim_step and
 * friends record themselves likewise. Each record becomes a kernel over the
 * graph's own copies of the nodes and tensors, so the tape can be rolled
 * back afterwards as if nothing ran. Persistent tensors (parameters, their
 * gradients, running statistics) are used in place.
 */
#include "graph/graph.h"

#include <stdlib.h>
#include <string.h>

tg_trace *te_tracing;

struct tg_trace {
    tg_plan *p;
    te_tensor *const *inputs;
    int n_inputs;
    int exec_base;
    char misuse[256];
    /* tape tensor or node -> its copy (value id / node index) */
    const void **keys;
    int *vals;
    int n_keys, cap_keys;
    /* persistent tensors whose grad_valid the trace may change */
    te_tensor **ext;
    bool *ext_valid;
    int n_ext, cap_ext;
};

/* A linear map is enough: a step has a few hundred tensors, traced once. */
static int lookup(const tg_trace *tr, const void *key)
{
    for (int i = tr->n_keys - 1; i >= 0; i--)
        if (tr->keys[i] == key)
            return tr->vals[i];
    return -1;
}

static void remember(tg_trace *tr, const void *key, int val)
{
    if (tr->n_keys == tr->cap_keys) {
        int cap = tr->cap_keys ? 2 * tr->cap_keys : 256;
        const void **k = realloc(tr->keys, (size_t)cap * sizeof *k);
        int *v = k ? realloc(tr->vals, (size_t)cap * sizeof *v) : NULL;
        if (!k || !v)
            abort(); /* out of memory while tracing */
        tr->keys = k;
        tr->vals = v;
        tr->cap_keys = cap;
    }
    tr->keys[tr->n_keys] = key;
    tr->vals[tr->n_keys++] = val;
}

void te_trace_misuse(const char *what)
{
    if (te_tracing && !te_tracing->misuse[0])
        snprintf(te_tracing->misuse, sizeof te_tracing->misuse, "%s", what);
}

static void keep_extern_state(tg_trace *tr, te_tensor *t)
{
    if (tr->n_ext == tr->cap_ext) {
        int cap = tr->cap_ext ? 2 * tr->cap_ext : 64;
        te_tensor **e = realloc(tr->ext, (size_t)cap * sizeof *e);
        bool *v = e ? realloc(tr->ext_valid, (size_t)cap * sizeof *v) : NULL;
        if (!e || !v)
            abort();
        tr->ext = e;
        tr->ext_valid = v;
        tr->cap_ext = cap;
    }
    tr->ext[tr->n_ext] = t;
    tr->ext_valid[tr->n_ext++] = t->grad_valid;
}

static te_tensor *copy_struct(const te_tensor *t)
{
    te_tensor *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    c->dtype = t->dtype;
    c->device = t->device;
    c->ndim = t->ndim;
    memcpy(c->shape, t->shape, sizeof c->shape);
    c->numel = t->numel;
    c->nbytes = t->nbytes;
    c->requires_grad = t->requires_grad;
    c->flags = TE_TENSOR_PERSISTENT | TE_TENSOR_GRAPH;
    memcpy(c->name, t->name, sizeof c->name);
    return c;
}

/* The value of a tensor the step touched, made on first sight. */
static int value_for(tg_trace *tr, te_tensor *t)
{
    int id = lookup(tr, t);
    if (id >= 0)
        return id;
    tg_plan *p = tr->p;
    if (t->flags & TE_TENSOR_PERSISTENT) {
        keep_extern_state(tr, t);
        id = tg_value_add(p, t, TG_EXTERN);
    } else {
        int input = -1;
        for (int i = 0; i < tr->n_inputs; i++)
            if (tr->inputs[i] == t)
                input = i;
        te_tensor *c = copy_struct(t);
        tg_kind kind = input >= 0 ? TG_INPUT : t->flags & TE_TENSOR_ABSTRACT ? TG_TEMP : TG_CONST;
        if (kind == TG_CONST) {
            c->data = te_mem_alloc_on(t->device, c->nbytes);
            if (!te_data(c) && c->nbytes)
                abort();
            if (c->nbytes)
                te_backend_for(t)->copy(te_data(c), te_data(t), c->nbytes);
        }
        id = tg_value_add(p, c, kind);
        p->values[id].input = input;
    }
    remember(tr, t, id);
    return id;
}

static te_tensor *copy_of(tg_trace *tr, te_tensor *t)
{
    if (!t)
        return NULL;
    int id = value_for(tr, t); /* before reading values: it may grow them */
    return tr->p->values[id].t;
}

/* Links the copy of x to the copy of its gradient. */
static void link_grad(tg_trace *tr, te_tensor *x)
{
    int xv = value_for(tr, x), gv = value_for(tr, x->grad);
    tg_value *v = &tr->p->values[xv];
    tr->p->values[gv].grad_of = xv;
    if (v->kind != TG_EXTERN)
        v->t->grad = tr->p->values[gv].t;
}

static tg_origin *origin(const te_node *c, bool backward, int exec)
{
    tg_origin *o = malloc(sizeof *o);
    if (!o)
        abort();
    *o = (tg_origin){ .node = (te_node *)c, .backward = backward, .exec = exec };
    return o;
}

void te_trace_fwd(te_node *n, int exec)
{
    tg_trace *tr = te_tracing;
    tg_plan *p = tr->p;
    te_node *c = malloc(sizeof *c);
    if (!c)
        abort();
    *c = *n;
    for (int i = 0; i < n->n_in; i++)
        c->in[i] = copy_of(tr, n->in[i]);
    for (int k = 0; k < n->n_out; k++) {
        c->out[k] = copy_of(tr, n->out[k]);
        c->out[k]->node = c;
        c->out[k]->slot = k;
    }
    for (int j = 0; j < n->n_saved; j++)
        c->saved[j] = copy_of(tr, n->saved[j]);
    if (p->n_nodes == p->cap_nodes) {
        int cap = p->cap_nodes ? 2 * p->cap_nodes : 64;
        te_node **q = realloc(p->nodes, (size_t)cap * sizeof *q);
        if (!q)
            abort();
        p->nodes = q;
        p->cap_nodes = cap;
    }
    p->nodes[p->n_nodes++] = c;
    remember(tr, n, p->n_nodes - 1);
    tg_kernel *k = tg_kernel_add(p, TG_K_FWD, TE_PHASE_FORWARD);
    k->node = c;
    k->fn = te_backend_current()->forward[c->op];
    k->shadow = te_node_needs_shadow(c);
    k->n_orig = 1;
    k->orig = origin(c, false, exec - tr->exec_base);
    p->traced_ops++;
}

void te_trace_bwd(te_node *n, int exec)
{
    tg_trace *tr = te_tracing;
    tg_plan *p = tr->p;
    int ni = lookup(tr, n);
    if (ni < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "backward reached %s, an op made before the step function ran",
                 n->name);
        te_trace_misuse(msg);
        return;
    }
    te_node *c = p->nodes[ni];
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k]->grad_valid)
            link_grad(tr, n->out[k]);
    for (int i = 0; i < n->n_in; i++)
        if (te_needs_grad(n->in[i]))
            link_grad(tr, n->in[i]);
    tg_kernel *k = tg_kernel_add(p, TG_K_BWD, TE_PHASE_BACKWARD);
    k->node = c;
    k->fn = te_backend_current()->backward[c->op];
    k->shadow = te_node_needs_shadow(c);
    k->n_orig = 1;
    k->orig = origin(c, true, exec - tr->exec_base);
    p->traced_ops++;
}

void te_trace_seed(te_tensor *y, const te_tensor *dy)
{
    tg_trace *tr = te_tracing;
    link_grad(tr, y);
    tg_kernel *k = tg_kernel_add(tr->p, TG_K_SEED, TE_PHASE_BACKWARD);
    k->seed_y = copy_of(tr, y);
    if (!(k->seed_dy = malloc((size_t)(dy->numel ? dy->numel : 1) * sizeof(float))))
        abort();
    te_copy_to_f32(dy, k->seed_dy);
}

void te_trace_optim(te_optim *o)
{
    tg_kernel *k = tg_kernel_add(te_tracing->p, TG_K_OPTIM, TE_PHASE_UPDATE);
    k->optim = o;
    k->exec = te_exec_index() - te_tracing->exec_base;
}

void te_trace_clip(te_tensor **params, int n, float max_norm)
{
    tg_kernel *k = tg_kernel_add(te_tracing->p, TG_K_CLIP, te_current_phase());
    if (!(k->params = malloc((size_t)(n ? n : 1) * sizeof *k->params)))
        abort();
    memcpy(k->params, params, (size_t)n * sizeof *params);
    k->n_params = n;
    k->max_norm = max_norm;
}

void te_trace_unscale(te_tensor **params, int n)
{
    tg_kernel *k = tg_kernel_add(te_tracing->p, TG_K_UNSCALE, TE_PHASE_UPDATE);
    if (!(k->params = malloc((size_t)(n ? n : 1) * sizeof *k->params)))
        abort();
    memcpy(k->params, params, (size_t)n * sizeof *params);
    k->n_params = n;
    k->exec = te_exec_index() - te_tracing->exec_base;
}

void te_trace_zero_grad(void) { tg_kernel_add(te_tracing->p, TG_K_ZERO_GRAD, te_current_phase()); }

tg_plan *tg_trace_step(te_step_fn fn, void *ctx, te_tensor *const *inputs, int n_inputs,
                       te_tensor **outputs, int n_outputs)
{
    tg_plan *p = calloc(1, sizeof *p);
    if (!p) {
        te_set_error(TE_ERR_NOMEM, "graph: out of memory");
        return NULL;
    }
    tg_trace tr = { .p = p, .inputs = inputs, .n_inputs = n_inputs, .exec_base = te_exec_index() };
    int tape = te_tape_mark(), nodes = te_tape_node_mark();
    te_phase phase = te_current_phase();
    for (int i = 0; i < n_outputs; i++)
        outputs[i] = NULL;

    te_tracing = &tr;
    te_status st = fn(ctx, inputs, outputs);
    if (st == TE_OK && !tr.misuse[0]) {
        if (!(p->outputs = malloc((size_t)(n_outputs ? n_outputs : 1) * sizeof *p->outputs)))
            abort();
        p->n_outputs = n_outputs;
        for (int i = 0; i < n_outputs && st == TE_OK; i++) {
            if (!outputs[i]) {
                te_set_error(TE_ERR_STATE, "graph: the step function left output %d unset", i);
                st = TE_ERR_STATE;
                break;
            }
            p->outputs[i] = value_for(&tr, outputs[i]);
            p->values[p->outputs[i]].output = true;
        }
    }
    te_set_phase(phase); /* quietly: hooks stay off while tracing */
    te_tracing = NULL;

    p->exec_total = te_exec_index() - tr.exec_base;
    te_set_exec_index(tr.exec_base);
    for (int i = 0; i < tr.n_ext; i++)
        tr.ext[i]->grad_valid = tr.ext_valid[i];
    te_tape_rollback(tape, nodes);
    for (int i = 0; i < n_outputs; i++)
        outputs[i] = NULL;
    free(tr.keys);
    free(tr.vals);
    free(tr.ext);
    free(tr.ext_valid);
    if (tr.misuse[0]) {
        te_set_error(TE_ERR_STATE, "graph: cannot trace the step: %s", tr.misuse);
        st = TE_ERR_STATE;
    } else if (st != TE_OK && te_error_code() == TE_OK) {
        te_set_error(st, "graph: the step function failed while traced (%s)", te_status_str(st));
    }
    if (st != TE_OK) {
        tg_plan_free(p);
        return NULL;
    }
    return p;
}
