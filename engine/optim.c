/*
 * optim.c — SGD (momentum, Nesterov, weight decay), Adam and AdamW, and
 * gradient clipping, with PyTorch's update rules. Optimizer state is f32;
 * f16/bf16 parameters are updated in f32 and rounded back. At AMP level
 * O2 an f16/bf16 parameter has an f32 master copy that the updates
 * accumulate in (one more state slot, "master"), rounded into the
 * parameter after each; elsewhere (O3) the rounded parameter is all there
 * is. With a loss scaler, a step whose unscale found a non-finite gradient
 * is skipped whole, then the scaler's rule runs (te_scaler_update).
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
    float **m, **v;   /* momentum buffer / Adam moments, per parameter */
    float **master;   /* f32 master copies of f16/bf16 parameters (O2) */
    int64_t t;        /* updates done */
};

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
    for (int i = 0; i < o->n; i++) {
        if (o->m) free(o->m[i]);
        if (o->v) free(o->v[i]);
        if (o->master) free(o->master[i]);
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

static float *state_buf(float **slot, int64_t n)
{
    if (!*slot)
        *slot = calloc((size_t)n, sizeof **slot);
    return *slot;
}

/* One parameter's update: its data, gradient and optimizer state (f32). */
typedef struct update {
    float *p;
    const float *g;
    float *m, *v;   /* momentum buffer / Adam moments; NULL when unused */
    bool first;     /* SGD: the momentum buffer's first step */
} update;

/* One branch-free loop per case: a test inside the loop kept GCC from
 * vectorising it (scalar code, a third of the MLP step at batch 32). The
 * first momentum step is the general one with a zero buffer: 0*0 + 1*d. */
static void sgd_range(const te_sgd_opts *s, const update *u, int64_t lo, int64_t hi)
{
    float *restrict p = u->p, *restrict buf = u->m;
    const float *restrict g = u->g;
    const float lr = s->lr, wd = s->weight_decay;
    const float mom = u->first ? 0.0f : s->momentum, damp = u->first ? 1.0f : 1.0f - s->dampening;
    const float look = s->momentum; /* Nesterov's look-ahead uses momentum even on step 1 */
    if (!buf) {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++)
            p[i] -= lr * (g[i] + wd * p[i]);
    } else if (s->nesterov) {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) {
            float d = g[i] + wd * p[i];
            buf[i] = mom * buf[i] + damp * d;
            p[i] -= lr * (d + look * buf[i]);
        }
    } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) {
            buf[i] = mom * buf[i] + damp * (g[i] + wd * p[i]);
            p[i] -= lr * buf[i];
        }
    }
}

static void adam_range(const te_adam_opts *a, int64_t t, const update *u, int64_t lo, int64_t hi)
{
    float *restrict p = u->p, *restrict m = u->m, *restrict v = u->v;
    const float *restrict g = u->g;
    const float b1 = a->beta1, b2 = a->beta2, eps = a->eps, wd = a->weight_decay;
    const float step = a->lr / (1.0f - powf(b1, (float)t));
    const float inv_sqrt_bc2 = 1.0f / sqrtf(1.0f - powf(b2, (float)t));
    const float decay = a->decoupled ? 1.0f - a->lr * wd : 1.0f;
    const float l2 = a->decoupled ? 0.0f : wd;
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        float d = g[i] + l2 * p[i];
        m[i] = b1 * m[i] + (1.0f - b1) * d;
        v[i] = b2 * v[i] + (1.0f - b2) * d * d;
        p[i] = p[i] * decay - step * m[i] / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
    }
}

static void update_range(const te_optim *o, const update *u, int64_t lo, int64_t hi)
{
    if (o->kind == OPT_SGD)
        sgd_range(&o->sgd, u, lo, hi);
    else
        adam_range(&o->adam, o->t, u, lo, hi);
}

static void update_all(const te_optim *o, const update *u, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > TE_PAR_MIN)
    for (int64_t b = 0; b < n; b += TE_STATS_STRIP)
        update_range(o, u, b, b + TE_STATS_STRIP < n ? b + TE_STATS_STRIP : n);
}

/* The update with the new values' statistics taken a strip at a time,
 * while the strip is still in cache: reading the parameter again after
 * its update came from memory, at twice the cost. */
static void update_with_stats(const te_optim *o, const update *u, int64_t n, te_stats *s)
{
    int64_t size;
    const int nch = te_stats_chunks(n, &size);
    te_stats_part parts[TE_STATS_MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (nch > 1 && n > TE_PAR_MIN)
    for (int c = 0; c < nch; c++) {
        const int64_t lo = (int64_t)c * size, hi = lo + size < n ? lo + size : n;
        for (int64_t b = lo; b < hi; b += TE_STATS_STRIP) {
            const int64_t e = b + TE_STATS_STRIP < hi ? b + TE_STATS_STRIP : hi;
            update_range(o, u, b, e);
            if (b == lo)
                te_stats_part_begin(&parts[c], u->p, lo, hi);
            te_stats_part_add(&parts[c], u->p, b, e - b);
        }
    }
    te_stats_merge(parts, nch, n, s);
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

/* Parameter i's values to update in f32 (*pf) and its gradient in f32
 * (*gf): in place for f32, else the master copy or a temporary (*tmp,
 * freed by the caller) and the unscaled master gradient or a copy. */
static te_status update_buffers(te_optim *o, int i, float **pf, const float **gf, float **tmp)
{
    te_tensor *p = o->params[i];
    const int64_t n = p->numel;
    *tmp = NULL;
    *pf = p->data;
    *gf = p->grad->data;
    if (p->dtype == TE_F32 && p->grad->dtype == TE_F32)
        return TE_OK;
    const float *unscaled = te_scaler_master_grad(p);
    const bool master = has_master(o, i);
    if (!master || !unscaled) {
        if (!(*tmp = malloc(2 * (size_t)n * sizeof **tmp)))
            goto nomem;
    }
    if (master) {
        if (!o->master[i]) { /* from the parameter's values, as Apex's O2 does */
            if (!(o->master[i] = malloc((size_t)n * sizeof *o->master[i])))
                goto nomem;
            te_copy_to_f32(p, o->master[i]);
        }
        *pf = o->master[i];
    } else {
        *pf = *tmp;
        te_copy_to_f32(p, *pf);
    }
    if (unscaled) {
        *gf = unscaled;
    } else {
        te_copy_to_f32(p->grad, *tmp + n);
        *gf = *tmp + n;
    }
    return TE_OK;
nomem:
    free(*tmp);
    *tmp = NULL;
    te_set_error(TE_ERR_NOMEM, "optimizer: out of memory updating %s", p->name);
    return TE_ERR_NOMEM;
}

te_status te_optim_step(te_optim *o)
{
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
    o->t++;
    for (int i = 0; i < o->n; i++) {
        te_tensor *p = o->params[i];
        if (!p->grad || !p->grad_valid)
            continue; /* unused this step: PyTorch skips p.grad None too */
        int64_t n = p->numel;
        float *pf, *tmp;
        const float *gf;
        te_status st = update_buffers(o, i, &pf, &gf, &tmp);
        if (st != TE_OK)
            return st;
        float *m = NULL, *v = NULL;
        bool first = o->m[i] == NULL;
        if (o->kind == OPT_ADAM || o->sgd.momentum > 0)
            m = state_buf(&o->m[i], n);
        if (o->kind == OPT_ADAM)
            v = state_buf(&o->v[i], n);
        if ((o->kind == OPT_ADAM || o->sgd.momentum > 0) && (!m || (o->kind == OPT_ADAM && !v))) {
            free(tmp);
            te_set_error(TE_ERR_NOMEM, "optimizer: out of memory for the state of %s", p->name);
            return TE_ERR_NOMEM;
        }
        if (te_hook_count || te_inject_count)
            begin_update(o, p);
        const update u = { pf, gf, m, v, first };
        te_stats stats;
        const bool with_stats = te_stats_wanted && te_hook_count && pf == p->data;
        if (with_stats)
            update_with_stats(o, &u, n, &stats);
        else
            update_all(o, &u, n);
        if (pf != p->data)
            te_copy_from_f32(p, pf);
        free(tmp);
        if (te_hook_count || te_inject_count)
            record_update(o, p, with_stats ? &stats : NULL);
        else
            te_next_exec_index();
        p->grad_valid = false;
    }
    te_scaler_update();
    return TE_OK;
}

/* Sum of squares of p's gradient (its unscaled f32 copy when the scaler
 * made one), in double so the norm is order-stable. */
static double grad_sq(const te_tensor *p)
{
    const te_tensor *g = p->grad;
    const float *unscaled = te_scaler_master_grad(p);
    double sq = 0;
    if (unscaled || g->dtype == TE_F32) {
        const float *x = unscaled ? unscaled : g->data;
        for (int64_t j = 0; j < g->numel; j++)
            sq += (double)x[j] * x[j];
    } else {
        for (int64_t j = 0; j < g->numel; j++)
            sq += (double)te_get(g, j) * te_get(g, j);
    }
    return sq;
}

static void grad_scale(te_tensor *p, float c)
{
    te_tensor *g = p->grad;
    float *unscaled = te_scaler_master_grad(p);
    if (unscaled || g->dtype == TE_F32) {
        float *x = unscaled ? unscaled : g->data;
        for (int64_t j = 0; j < g->numel; j++)
            x[j] *= c;
    } else {
        for (int64_t j = 0; j < g->numel; j++)
            te_set(g, j, te_get(g, j) * c);
    }
}

float te_clip_grad_norm(te_tensor **params, int n, float max_norm)
{
    if (te_tracing) { /* no gradient has a value yet: the compiled step clips */
        te_trace_clip(params, n, max_norm);
        return 0.0f;
    }
    double sq = 0;
    for (int i = 0; i < n; i++)
        if (params[i]->grad && params[i]->grad_valid)
            sq += grad_sq(params[i]);
    float norm = (float)sqrt(sq);
    if (norm > max_norm) {
        float c = max_norm / (norm + 1e-6f);
        for (int i = 0; i < n; i++)
            if (params[i]->grad && params[i]->grad_valid)
                grad_scale(params[i], c);
    }
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

/* The buffer behind parameter i's slot (a slot in range). */
static float **slot_buf(te_optim *o, int i, int slot)
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
    return *slot_buf((te_optim *)o, i, slot);
}

te_status te_optim_state_set(te_optim *o, int i, int slot, const float *values)
{
    if (i < 0 || i >= o->n || slot < 0 || slot >= te_optim_slots(o)) {
        te_set_error(TE_ERR_ARG, "optimizer state: parameter %d slot %d out of range (%d parameters, %d slots)",
                     i, slot, o->n, te_optim_slots(o));
        return TE_ERR_ARG;
    }
    if (slot == moment_slots(o) && !has_master(o, i)) {
        te_set_error(TE_ERR_ARG, "optimizer state: %s is %s and keeps no master copy", o->params[i]->name,
                     te_dtype_name(o->params[i]->dtype));
        return TE_ERR_ARG;
    }
    float *buf = state_buf(slot_buf(o, i, slot), o->params[i]->numel);
    if (!buf) {
        te_set_error(TE_ERR_NOMEM, "optimizer state: out of memory for %s", o->params[i]->name);
        return TE_ERR_NOMEM;
    }
    memcpy(buf, values, (size_t)o->params[i]->numel * sizeof *buf);
    return TE_OK;
}
