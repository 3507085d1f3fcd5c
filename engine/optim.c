/*
 * optim.c — SGD (momentum, Nesterov, weight decay), Adam and AdamW, and
 * gradient clipping, with PyTorch's update rules. Optimizer state is f32;
 * f16/bf16 parameters are updated in f32 and rounded back. At AMP level
 * O2 an f16/bf16 parameter has an f32 master copy that the updates
 * accumulate in (one more state slot, "master"), rounded into the
 * parameter after each; elsewhere (O3) the rounded parameter is all there
 * is. With a loss scaler, a step whose unscale found a non-finite gradient
 * is skipped whole, then the scaler's rule runs (te_scaler_update).
 *
 * The arithmetic is the backend's (te_backend sgd, adam, unscale, sumsq):
 * this file gathers the parameters, their state and their f32 working
 * buffers, all in the parameters' device memory, and hands the backend
 * every parameter of the step in one call.
 */
#include "te_internal.h"
#include "graph/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OPT_SGD, OPT_ADAM } opt_kind;

struct te_optim {
    opt_kind kind;
    te_sgd_opts sgd;
    te_adam_opts adam;
    int n;
    te_tensor **params;
    /* Per parameter, persistent f32 tensors beside it (NULL until made):
     * momentum buffer / Adam moments, and the f32 master copy of an
     * f16/bf16 parameter (O2). */
    te_tensor **m, **v, **master;
    int64_t t;        /* updates done */
};

/* The live optimizers, for the step's snapshot (snapshot.c). */
static te_optim **live;
static int n_live, cap_live;

static bool live_add(te_optim *o)
{
    if (n_live == cap_live) {
        int cap = cap_live ? 2 * cap_live : 4;
        te_optim **nl = realloc(live, (size_t)cap * sizeof *nl);
        if (!nl)
            return false;
        live = nl;
        cap_live = cap;
    }
    live[n_live++] = o;
    return true;
}

static void live_remove(const te_optim *o)
{
    for (int i = 0; i < n_live; i++)
        if (live[i] == o) {
            live[i] = live[--n_live];
            return;
        }
}

static te_optim *optim_new(opt_kind kind, te_tensor **params, int n)
{
    te_optim *o = calloc(1, sizeof *o);
    if (!o)
        goto nomem;
    o->kind = kind;
    o->n = n;
    o->params = calloc((size_t)n, sizeof *o->params);
    o->m = calloc((size_t)n, sizeof *o->m);
    o->v = calloc((size_t)n, sizeof *o->v);
    o->master = calloc((size_t)n, sizeof *o->master);
    if (!o->params || !o->m || !o->v || !o->master)
        goto nomem;
    for (int i = 0; i < n; i++) {
        if (!params[i] || !te_dtype_is_float(params[i]->dtype)) {
            te_set_error(TE_ERR_ARG, "optimizer: parameter %d is %s", i,
                         params[i] ? "not a float tensor" : "NULL");
            te_optim_free(o);
            return NULL;
        }
        o->params[i] = params[i];
    }
    if (!live_add(o))
        goto nomem;
    return o;
nomem:
    te_set_error(TE_ERR_NOMEM, "optimizer: out of memory");
    te_optim_free(o);
    return NULL;
}

te_optim *te_sgd_new(te_tensor **params, int n, const te_sgd_opts *opts)
{
    if (opts->lr < 0 || opts->momentum < 0 || opts->weight_decay < 0 ||
        (opts->nesterov && (opts->momentum <= 0 || opts->dampening != 0))) {
        te_set_error(TE_ERR_ARG, "sgd: bad options lr=%g momentum=%g dampening=%g weight_decay=%g%s",
                     opts->lr, opts->momentum, opts->dampening, opts->weight_decay,
                     opts->nesterov ? " (nesterov needs momentum > 0 and dampening 0)" : "");
        return NULL;
    }
    te_optim *o = optim_new(OPT_SGD, params, n);
    if (o)
        o->sgd = *opts;
    return o;
}

te_optim *te_adam_new(te_tensor **params, int n, const te_adam_opts *opts)
{
    te_adam_opts a = *opts;
    if (a.lr == 0) a.lr = 1e-3f;
    if (a.beta1 == 0) a.beta1 = 0.9f;
    if (a.beta2 == 0) a.beta2 = 0.999f;
    if (a.eps == 0) a.eps = 1e-8f;
    if (a.lr < 0 || a.beta1 < 0 || a.beta1 >= 1 || a.beta2 < 0 || a.beta2 >= 1 || a.eps < 0 ||
        a.weight_decay < 0) {
        te_set_error(TE_ERR_ARG, "adam: bad options lr=%g betas=(%g,%g) eps=%g weight_decay=%g",
                     a.lr, a.beta1, a.beta2, a.eps, a.weight_decay);
        return NULL;
    }
    te_optim *o = optim_new(OPT_ADAM, params, n);
    if (o)
        o->adam = a;
    return o;
}

void te_optim_free(te_optim *o)
{
    if (!o)
        return;
    live_remove(o);
    for (int i = 0; i < o->n; i++) {
        if (o->m) te_tensor_free(o->m[i]);
        if (o->v) te_tensor_free(o->v[i]);
        if (o->master) te_tensor_free(o->master[i]);
    }
    free(o->params);
    free(o->m);
    free(o->v);
    free(o->master);
    free(o);
}

void te_optim_set_lr(te_optim *o, float lr)
{
    if (o->kind == OPT_SGD)
        o->sgd.lr = lr;
    else
        o->adam.lr = lr;
}

float te_optim_lr(const te_optim *o) { return o->kind == OPT_SGD ? o->sgd.lr : o->adam.lr; }

/* The parameter's name as registered, without "param:". */
static const char *param_name(const te_tensor *p) { return strncmp(p->name, "param:", 6) ? p->name : p->name + 6; }

/* The state tensor in *slot, made (zeroed, f32, p's shape, on p's device)
 * on first use,
 * named "optim:WHAT:NAME"; NULL with TE_ERR_NOMEM set. */
static te_tensor *state_tensor(te_tensor **slot, const te_tensor *p, const char *what)
{
    if (!*slot) {
        if (!(*slot = te_tensor_alloc_on(p->device, TE_F32, p->ndim, p->shape, TE_TENSOR_PERSISTENT))) {
            te_set_error(TE_ERR_NOMEM, "optimizer: out of memory for the %s state of %s", what, p->name);
            return NULL;
        }
        te_backend_for(*slot)->zero(te_data(*slot), (*slot)->nbytes);
        snprintf((*slot)->name, sizeof (*slot)->name, "optim:%s:%.100s", what, param_name(p));
    }
    return *slot;
}

/* The record of one parameter's update, "update/NAME", its name in name. */
static te_op_record update_record(const te_optim *o, const te_tensor *p, char *name, size_t n)
{
    snprintf(name, n, "update/%.120s", p->name + 6);
    return (te_op_record){
        .step = te_step(), .phase = TE_PHASE_UPDATE, .op_id = -1, .exec_index = te_exec_index(),
        .name = name,
        .type = o->kind == OPT_SGD ? "SGD" : (o->adam.decoupled ? "AdamW" : "Adam"),
        .loc = { __FILE__, __LINE__ },
    };
}

/* The update of one parameter is about to run: hooks' op_begin, crash injections. */
static void begin_update(const te_optim *o, const te_tensor *p)
{
    char name[TE_NAME_MAX];
    te_op_record rec = update_record(o, p, name, sizeof name);
    te_op_begin(&rec);
}

/* Reports the update of one parameter to hooks and injections. */
static void record_update(const te_optim *o, te_tensor *p, const te_stats *stats)
{
    char name[TE_NAME_MAX];
    te_tensor *in[1] = { p->grad }, *out[1] = { p };
    te_op_record rec = update_record(o, p, name, sizeof name);
    rec.exec_index = te_next_exec_index();
    rec.inputs = in;
    rec.n_inputs = 1;
    rec.outputs = out;
    rec.n_outputs = 1;
    rec.out_stats = stats;
    te_op_done(&rec);
}

/* Does parameter i keep an f32 master copy? At O2, or once it has one (a
 * checkpoint's). */
static bool has_master(const te_optim *o, int i)
{
    return o->params[i]->dtype != TE_F32 && (o->master[i] || te_amp_level_get() == TE_AMP_O2);
}

/* The skipped step: no parameter, state or step count touched; the
 * gradients are used up as an update would (the next backward overwrites
 * them) and the updates' execution indices taken, so later ops keep theirs. */
static void skip_step(te_optim *o)
{
    for (int i = 0; i < o->n; i++)
        if (o->params[i]->grad && o->params[i]->grad_valid) {
            te_next_exec_index();
            o->params[i]->grad_valid = false;
        }
}

/* Parameter i's f32 working buffers for one update, and what to do with
 * them after it: all of them backend memory on the parameter's device. */
typedef struct work {
    int i;            /* the parameter */
    float *tmp;       /* te_mem_alloc_on's scratch (NULL: none), tmp_bytes long */
    size_t tmp_bytes;
    bool round_back;  /* the update ran on an f32 copy: round it into the parameter */
    te_stats stats;   /* the new values' statistics, when the update takes them */
    uint64_t sum;     /* time travel's checksum of the new values, when it takes that */
} work;

/* Parameter i's values to update in f32 (u->p) and its gradient in f32
 * (u->g): in place for f32, else the master copy or scratch (w->tmp) and
 * the unscaled master gradient or a widened copy. */
static te_status update_buffers(te_optim *o, const te_backend *b, work *w, te_update_args *u)
{
    te_tensor *p = o->params[w->i], *g = p->grad;
    const int64_t n = p->numel;
    const te_tensor *unscaled = g->dtype == TE_F32 ? NULL : te_scaler_master_grad(p);
    const bool master = p->dtype != TE_F32 && has_master(o, w->i);
    const int64_t scratch = (p->dtype != TE_F32 && !master ? n : 0) + (g->dtype != TE_F32 && !unscaled ? n : 0);
    if (scratch) {
        w->tmp_bytes = (size_t)scratch * sizeof *w->tmp;
        if (!(w->tmp = te_mem_alloc_on(p->device, w->tmp_bytes))) {
            te_set_error(TE_ERR_NOMEM, "optimizer: out of memory updating %s", p->name);
            return TE_ERR_NOMEM;
        }
    }
    float *next = w->tmp;
    if (p->dtype == TE_F32) {
        u->p = te_data(p);
    } else if (master) {
        const bool fresh = !o->master[w->i];
        if (!state_tensor(&o->master[w->i], p, "master"))
            return TE_ERR_NOMEM;
        u->p = te_data(o->master[w->i]);
        if (fresh) /* from the parameter's values, as Apex's O2 does */
            b->widen(te_data(p), u->p, p->dtype, n);
        w->round_back = true;
    } else {
        u->p = next;
        next += n;
        b->widen(te_data(p), u->p, p->dtype, n);
        w->round_back = true;
    }
    if (g->dtype == TE_F32) {
        u->g = te_data(g);
    } else if (unscaled) {
        u->g = te_data(unscaled);
    } else {
        b->widen(te_data(g), next, g->dtype, n);
        u->g = next;
    }
    u->n = n;
    return TE_OK;
}

/* The state of parameter w->i into u (made on its first update). */
static te_status update_state(te_optim *o, const work *w, te_update_args *u)
{
    te_tensor *p = o->params[w->i];
    u->first = o->m[w->i] == NULL;
    if (o->kind == OPT_ADAM || o->sgd.momentum > 0) {
        if (!state_tensor(&o->m[w->i], p, "m"))
            return TE_ERR_NOMEM;
        u->m = te_data(o->m[w->i]);
    }
    if (o->kind == OPT_ADAM) {
        if (!state_tensor(&o->v[w->i], p, "v"))
            return TE_ERR_NOMEM;
        u->v = te_data(o->v[w->i]);
    }
    return TE_OK;
}

static void run_update(const te_optim *o, const te_backend *b, const te_update_args *u, int count)
{
    if (o->kind == OPT_SGD)
        b->sgd(&o->sgd, u, count);
    else
        b->adam(&o->adam, o->t, u, count);
}

/* After parameter w->i's update: the f32 copy rounded into it, the
 * scratch given back, the update reported (hooks and injections), the
 * gradient used up. */
static void finish_update(const te_optim *o, const te_backend *b, work *w, const te_update_args *u)
{
    te_tensor *p = o->params[w->i];
    if (w->round_back)
        b->round(u->p, te_data(p), p->dtype, p->numel, NULL);
    if (u->sum)
        te_record_note_sum(p, w->sum);
    if (w->tmp)
        te_mem_free_on(p->device, w->tmp, w->tmp_bytes);
    w->tmp = NULL;
    if (te_prof_observed())
        record_update(o, p, u->stats);
    else
        te_next_exec_index();
    p->grad_valid = false;
}

/* The backend of the parameters with a gradient this step: one device for
 * them all (one call updates them all), else NULL with TE_ERR_DEVICE
 * naming both devices. */
static const te_backend *params_backend(te_tensor **params, int n, const char *who)
{
    const te_tensor *first = NULL;
    for (int i = 0; i < n; i++) {
        const te_tensor *p = params[i];
        if (!p->grad || !p->grad_valid)
            continue;
        if (!first) {
            first = p;
        } else if (p->device != first->device) {
            te_set_error(TE_ERR_DEVICE, "%s: parameters on two devices, %s on %s and %s on %s", who,
                         first->name, te_device_name(first->device), p->name, te_device_name(p->device));
            return NULL;
        }
    }
    return first ? te_backend_for(first) : te_backend_current();
}

te_status te_optim_step(te_optim *o)
{
    if (te_rec_unwinding)
        return te_rewound("optimizer step");
    te_set_phase(TE_PHASE_UPDATE);
    if (te_tracing) { /* the compiled step calls this function for real */
        te_trace_optim(o);
        for (int i = 0; i < o->n; i++)
            if (o->params[i]->grad && o->params[i]->grad_valid) {
                te_next_exec_index();
                o->params[i]->grad_valid = false;
            }
        return TE_OK;
    }
    if (te_scaler_skip_step()) {
        skip_step(o);
        te_scaler_update();
        return TE_OK;
    }
    const te_backend *b = params_backend(o->params, o->n, "optimizer");
    if (!b)
        return TE_ERR_DEVICE;
    work *w = calloc((size_t)(o->n ? o->n : 1), sizeof *w);
    te_update_args *u = calloc((size_t)(o->n ? o->n : 1), sizeof *u);
    if (!w || !u) {
        free(w);
        free(u);
        te_set_error(TE_ERR_NOMEM, "optimizer: out of memory");
        return TE_ERR_NOMEM;
    }
    /* Every buffer first, so that running out of memory updates nothing. */
    te_status st = TE_OK;
    int k = 0;
    for (int i = 0; i < o->n && st == TE_OK; i++) {
        te_tensor *p = o->params[i];
        if (!p->grad || !p->grad_valid)
            continue; /* unused this step: PyTorch skips p.grad None too */
        w[k].i = i;
        st = update_buffers(o, b, &w[k], &u[k]);
        if (st == TE_OK)
            st = update_state(o, &w[k], &u[k]);
        if (st == TE_OK && te_stats_wanted && te_hook_count && !te_watch_active() && !w[k].round_back)
            u[k].stats = &w[k].stats;
        /* updated in place: the values written are the parameter's bytes */
        if (st == TE_OK && b->update_sums && !w[k].round_back && te_record_sums_wanted())
            u[k].sum = &w[k].sum;
        k++;
    }
    if (st != TE_OK) {
        for (int j = 0; j < k; j++)
            if (w[j].tmp)
                te_mem_free_on(o->params[w[j].i]->device, w[j].tmp, w[j].tmp_bytes);
        free(w);
        free(u);
        return st;
    }
    o->t++;
    if (te_ops_seen_one_by_one()) {
        /* One update per parameter between its op_begin and its record, so
         * that a stop at update/B sees update/A done and B not yet, and the
         * profiler times each. A
         * deferred step (watch.c) stops nowhere: one call, each update's
         * record then only flagged. */
        for (int j = 0; j < k; j++) {
            if (te_rec_unwinding) { /* a hook rewound at the update before */
                for (int r = j; r < k; r++)
                    if (w[r].tmp)
                        te_mem_free_on(o->params[w[r].i]->device, w[r].tmp, w[r].tmp_bytes);
                free(w);
                free(u);
                return te_rewound("optimizer step");
            }
            begin_update(o, o->params[w[j].i]);
            run_update(o, b, &u[j], 1);
            finish_update(o, b, &w[j], &u[j]);
        }
    } else { /* all parameters in one call: one fused launch on a device */
        if (k)
            run_update(o, b, u, k);
        for (int j = 0; j < k; j++)
            finish_update(o, b, &w[j], &u[j]);
    }
    free(w);
    free(u);
    te_scaler_update();
    return TE_OK;
}

/* The gradient of p as clipping sees it: its unscaled f32 copy when the
 * scaler made one, else the gradient itself. */
static te_unscale_args clip_source(const te_tensor *p)
{
    const te_tensor *g = te_scaler_master_grad(p);
    if (!g)
        g = p->grad;
    return (te_unscale_args){ .src = te_data(g), .dt = g->dtype, .dst = g->dtype == TE_F32 ? te_data(g) : NULL,
                              .n = g->numel };
}

/* Every gradient in a times c, in one call to the backend's unscale (the
 * same multiply); an f16/bf16 one through f32 scratch, rounded back. */
static te_status clip_scale(const te_backend *b, te_tensor **params, te_unscale_args *a, int k, float c)
{
    const te_device dev = b->device;
    size_t bytes = 0;
    for (int j = 0; j < k; j++)
        if (a[j].dt != TE_F32)
            bytes += (size_t)a[j].n * sizeof(float);
    float *tmp = bytes ? te_mem_alloc_on(dev, bytes) : NULL;
    if (bytes && !tmp) {
        te_set_error(TE_ERR_NOMEM, "clip_grad_norm: out of memory");
        return TE_ERR_NOMEM;
    }
    float *next = tmp;
    for (int j = 0; j < k; j++)
        if (a[j].dt != TE_F32) {
            a[j].dst = next;
            next += a[j].n;
        }
    b->unscale(a, k, c);
    for (int i = 0, j = 0; j < k; i++) {
        if (!params[i]->grad || !params[i]->grad_valid)
            continue;
        if (a[j].dt != TE_F32) /* an f16/bf16 gradient without an f32 copy */
            b->round(a[j].dst, te_data(params[i]->grad), a[j].dt, a[j].n, NULL);
        j++;
    }
    if (tmp)
        te_mem_free_on(dev, tmp, bytes);
    return TE_OK;
}

float te_clip_grad_norm(te_tensor **params, int n, float max_norm)
{
    if (te_rec_unwinding) {
        te_rewound("clip_grad_norm");
        return NAN;
    }
    if (te_tracing) { /* no gradient has a value yet: the compiled step clips */
        te_trace_clip(params, n, max_norm);
        return 0.0f;
    }
    const te_backend *b = params_backend(params, n, "clip_grad_norm");
    te_unscale_args *a = b ? malloc((size_t)(n ? n : 1) * sizeof *a) : NULL;
    if (!b)
        return NAN;
    if (!a) {
        te_set_error(TE_ERR_NOMEM, "clip_grad_norm: out of memory");
        return NAN;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (params[i]->grad && params[i]->grad_valid)
            a[k++] = clip_source(params[i]);
    float norm = k ? (float)sqrt(b->sumsq(a, k)) : 0.0f;
    if (norm > max_norm && clip_scale(b, params, a, k, max_norm / (norm + 1e-6f)) != TE_OK)
        norm = NAN;
    free(a);
    return norm;
}

/* ---- state, for checkpoints ------------------------------------------------- */

int te_optim_param_count(const te_optim *o) { return o->n; }

te_tensor *te_optim_param(const te_optim *o, int i) { return i >= 0 && i < o->n ? o->params[i] : NULL; }

/* The moment slots, before the master copies' slot. */
static int moment_slots(const te_optim *o)
{
    if (o->kind == OPT_ADAM)
        return 2;
    return o->sgd.momentum > 0 ? 1 : 0;
}

/* Does any parameter keep a master copy (the "master" slot exists)? */
static bool any_master(const te_optim *o)
{
    for (int i = 0; i < o->n; i++)
        if (has_master(o, i))
            return true;
    return false;
}

int te_optim_slots(const te_optim *o) { return moment_slots(o) + any_master(o); }

const char *te_optim_slot_name(const te_optim *o, int slot)
{
    static const char *const moments[] = { "m", "v" };
    if (slot < 0 || slot >= te_optim_slots(o))
        return NULL;
    return slot < moment_slots(o) ? moments[slot] : "master";
}

/* The tensor behind parameter i's slot (a slot in range). */
static te_tensor **slot_tensor(te_optim *o, int i, int slot)
{
    if (slot == moment_slots(o))
        return &o->master[i];
    return slot == 0 ? &o->m[i] : &o->v[i];
}

int64_t te_optim_steps(const te_optim *o) { return o->t; }

void te_optim_set_steps(te_optim *o, int64_t steps) { o->t = steps; }

const float *te_optim_state(const te_optim *o, int i, int slot)
{
    if (i < 0 || i >= o->n || slot < 0 || slot >= te_optim_slots(o))
        return NULL;
    const te_tensor *t = *slot_tensor((te_optim *)o, i, slot);
    if (t && t->device != TE_DEV_CPU) {
        te_set_error(TE_ERR_DEVICE, "te_optim_state: the %s state of %s is in %s memory; read it with "
                     "te_optim_state_read", te_optim_slot_name(o, slot), o->params[i]->name,
                     te_device_name(t->device));
        return NULL;
    }
    return t ? te_data(t) : NULL;
}

/* Parameter i and slot in range, else TE_ERR_ARG naming them. */
static te_status slot_ok(const te_optim *o, int i, int slot, const char *fn)
{
    if (i < 0 || i >= o->n || slot < 0 || slot >= te_optim_slots(o)) {
        te_set_error(TE_ERR_ARG, "%s: parameter %d slot %d out of range (%d parameters, %d slots)", fn, i, slot,
                     o->n, te_optim_slots(o));
        return TE_ERR_ARG;
    }
    return TE_OK;
}

te_status te_optim_state_read(const te_optim *o, int i, int slot, float *dst)
{
    te_status st = slot_ok(o, i, slot, "te_optim_state_read");
    if (st != TE_OK)
        return st;
    const te_tensor *t = *slot_tensor((te_optim *)o, i, slot);
    if (!t) {
        te_set_error(TE_ERR_STATE, "te_optim_state_read: the %s state of %s is absent until its first update",
                     te_optim_slot_name(o, slot), o->params[i]->name);
        return TE_ERR_STATE;
    }
    return te_tensor_read(t, 0, t->numel, dst);
}

te_status te_optim_state_set(te_optim *o, int i, int slot, const float *values)
{
    te_status st = slot_ok(o, i, slot, "optimizer state");
    if (st != TE_OK)
        return st;
    if (slot == moment_slots(o) && !has_master(o, i)) {
        te_set_error(TE_ERR_ARG, "optimizer state: %s is %s and keeps no master copy", o->params[i]->name,
                     te_dtype_name(o->params[i]->dtype));
        return TE_ERR_ARG;
    }
    te_tensor *t = state_tensor(slot_tensor(o, i, slot), o->params[i], te_optim_slot_name(o, slot));
    if (!t)
        return TE_ERR_NOMEM;
    return te_tensor_write(t, 0, t->numel, values);
}

/* ---- the step's snapshot ------------------------------------------------ */

struct te_optim_saved {
    te_optim *o;
    int64_t t;
    float lr; /* a schedule may set it once an epoch: time travel puts it back */
    te_tensor **m, **v, **master; /* the state tensors it had (NULL: none yet) */
};

void te_optim_snap_free(te_optim_snap *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->o[i].m);
        free(s->o[i].v);
        free(s->o[i].master);
    }
    free(s->o);
    *s = (te_optim_snap){ 0 };
}

te_status te_optim_snap_take(te_optim_snap *s)
{
    *s = (te_optim_snap){ .o = calloc((size_t)(n_live ? n_live : 1), sizeof *s->o) };
    if (!s->o)
        return TE_ERR_NOMEM;
    for (int k = 0; k < n_live; k++) {
        const te_optim *o = live[k];
        struct te_optim_saved *d = &s->o[s->n++];
        const size_t bytes = (size_t)(o->n ? o->n : 1) * sizeof(te_tensor *);
        *d = (struct te_optim_saved){ .o = live[k], .t = o->t, .lr = te_optim_lr(o), .m = malloc(bytes), .v = malloc(bytes),
                                      .master = malloc(bytes) };
        if (!d->m || !d->v || !d->master) {
            te_optim_snap_free(s);
            return TE_ERR_NOMEM;
        }
        memcpy(d->m, o->m, bytes);
        memcpy(d->v, o->v, bytes);
        memcpy(d->master, o->master, bytes);
    }
    return TE_OK;
}

/* State made since the snapshot goes: the replayed update makes it again
 * from nothing, as the first one did. */
static void drop_newer(te_tensor **now, te_tensor *const *then, int n)
{
    for (int i = 0; i < n; i++)
        if (now[i] != then[i]) {
            te_tensor_free(now[i]);
            now[i] = then[i];
        }
}

void te_optim_snap_restore(const te_optim_snap *s)
{
    for (int k = 0; k < s->n; k++) {
        const struct te_optim_saved *d = &s->o[k];
        bool alive = false;
        for (int j = 0; j < n_live && !alive; j++)
            alive = live[j] == d->o;
        if (!alive)
            continue;
        d->o->t = d->t;
        te_optim_set_lr(d->o, d->lr);
        drop_newer(d->o->m, d->m, d->o->n);
        drop_newer(d->o->v, d->v, d->o->n);
        drop_newer(d->o->master, d->master, d->o->n);
    }
}
