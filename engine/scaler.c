/*
 * scaler.c — dynamic loss scaling: the scale and its rule.
 *
 * The rule is PyTorch GradScaler's (_amp_update_scale_) with Megatron's
 * hysteresis: a non-finite step resets the growth count and uses up one
 * unit of hysteresis; when none is left the scale is multiplied by the
 * backoff; growth_interval clean steps in a row multiply it by the growth
 * factor and restore the hysteresis. With hysteresis 1 every non-finite
 * step backs off, which is GradScaler. A growth that would overflow f32
 * keeps the old scale, as GradScaler does.
 */
#include "te_internal.h"
#include "graph/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static te_scaler_state sc;

/* The scale as a persistent 1-element f32 tensor: amp/loss_scale reads it
 * when it runs, so a compiled step sees each step's scale (a constant
 * would be folded in when the step is compiled). */
static te_tensor *scale_t;

/* This step's unscale has recorded (found_inf is then this step's): the
 * optimizer skips on it, te_scaler_update applies the rule to it. */
static bool pending;

/* The scale into scale_t, wherever its memory is. */
static te_status write_scale(void) { return te_tensor_write(scale_t, 0, 1, &sc.scale); }

/* The unscaled f32 gradients of f16/bf16 parameters ("master gradients"),
 * one per parameter seen, valid for the step that unscaled them: dividing
 * a low-precision gradient by the scale in its own dtype would undo what
 * the scaling was for (small gradients flushing to zero). */
typedef struct {
    te_tensor *p, *g;
    bool valid;
} master_grad;
static master_grad *mg;
static int n_mg, cap_mg;

te_status te_scaler_enable(const te_scaler_opts *o)
{
    te_scaler_opts d = o ? *o : (te_scaler_opts){ 0 };
    if (d.init_scale == 0.0f)
        d.init_scale = 65536.0f;
    if (d.growth_factor == 0.0f)
        d.growth_factor = 2.0f;
    if (d.backoff_factor == 0.0f)
        d.backoff_factor = 0.5f;
    if (d.growth_interval == 0)
        d.growth_interval = 2000;
    if (d.hysteresis == 0)
        d.hysteresis = 1;
    const char *bad = !(isfinite(d.init_scale) && d.init_scale > 0.0f) ? "the initial scale must be finite and > 0"
                      : !(d.growth_factor > 1.0f && isfinite(d.growth_factor)) ? "the growth factor must be > 1"
                      : !(d.backoff_factor > 0.0f && d.backoff_factor < 1.0f) ? "the backoff factor must be in (0, 1)"
                      : d.growth_interval < 0 ? "the growth interval must be >= 1 step"
                      : d.hysteresis < 0 ? "the hysteresis must be >= 1 step"
                                         : NULL;
    if (bad) {
        te_set_error(TE_ERR_ARG, "loss scaler: %s (scale %g, growth %g, backoff %g, interval %d, hysteresis %d)",
                     bad, (double)d.init_scale, (double)d.growth_factor, (double)d.backoff_factor,
                     d.growth_interval, d.hysteresis);
        return TE_ERR_ARG;
    }
    te_scaler_disable();
    if (!(scale_t = te_tensor_persistent(TE_F32, 0, NULL)))
        return te_error_code();
    snprintf(scale_t->name, sizeof scale_t->name, "amp:scale");
    sc.enabled = true;
    sc.opts = d;
    sc.scale = d.init_scale;
    sc.hysteresis_left = d.hysteresis;
    return write_scale();
}

void te_scaler_disable(void)
{
    te_tensor_free(scale_t);
    scale_t = NULL;
    for (int i = 0; i < n_mg; i++)
        te_tensor_free(mg[i].g);
    free(mg);
    mg = NULL;
    n_mg = cap_mg = 0;
    pending = false;
    memset(&sc, 0, sizeof sc);
}

te_status te_scaler_state_set(const te_scaler_state *s)
{
    if (!sc.enabled) {
        te_set_error(TE_ERR_STATE, "loss scaler: none is enabled (te_scaler_enable first)");
        return TE_ERR_STATE;
    }
    if (!(isfinite(s->scale) && s->scale > 0.0f) || s->growth_tracker < 0 || s->skipped < 0 ||
        s->hysteresis_left < 0 || s->hysteresis_left > sc.opts.hysteresis) {
        te_set_error(TE_ERR_ARG, "loss scaler: state out of range (scale %g, growth tracker %lld, skipped %lld, "
                     "hysteresis left %d of %d)", (double)s->scale, (long long)s->growth_tracker,
                     (long long)s->skipped, s->hysteresis_left, sc.opts.hysteresis);
        return TE_ERR_ARG;
    }
    sc.scale = s->scale;
    sc.growth_tracker = s->growth_tracker;
    sc.skipped = s->skipped;
    sc.hysteresis_left = s->hysteresis_left;
    sc.found_inf = s->found_inf;
    snprintf(sc.first_param, sizeof sc.first_param, "%s", s->first_param);
    return write_scale();
}

bool te_scaler_state_get(te_scaler_state *s)
{
    *s = sc;
    return sc.enabled;
}

void te_scaler_record(bool found_inf, const char *first_param)
{
    if (!sc.enabled)
        return;
    sc.found_inf = found_inf;
    snprintf(sc.first_param, sizeof sc.first_param, "%s", found_inf && first_param ? first_param : "");
    pending = true;
}

/* GradScaler's _amp_update_scale_ with Megatron's hysteresis. */
static void rule(void);

/* ---- the loss and the gradients ------------------------------------------ */

te_tensor *te_scaler_scale_loss_at(te_loc loc, te_tensor *loss)
{
    if (!loss || !sc.enabled)
        return loss;
    te_name_next("amp/loss_scale");
    return te_mul_at(loc, loss, scale_t);
}

/* The f32 gradient slot of the low-precision parameter p, made on first use. */
static master_grad *master_slot(te_tensor *p)
{
    for (int i = 0; i < n_mg; i++)
        if (mg[i].p == p)
            return &mg[i];
    if (n_mg == cap_mg) {
        int cap = cap_mg ? 2 * cap_mg : 16;
        master_grad *m = realloc(mg, (size_t)cap * sizeof *m);
        if (!m)
            return NULL;
        mg = m;
        cap_mg = cap;
    }
    te_tensor *g = te_tensor_alloc_on(p->device, TE_F32, p->ndim, p->shape, TE_TENSOR_PERSISTENT);
    if (!g)
        return NULL; /* no need to zero it: every unscale writes it whole */
    snprintf(g->name, sizeof g->name, "master_grad:%.100s", strncmp(p->name, "param:", 6) ? p->name : p->name + 6);
    mg[n_mg] = (master_grad){ .p = p, .g = g };
    return &mg[n_mg++];
}

te_tensor *te_scaler_master_grad(const te_tensor *p)
{
    for (int i = 0; i < n_mg; i++)
        if (mg[i].p == p)
            return mg[i].valid ? mg[i].g : NULL;
    return NULL;
}

/* The parameter's name as registered, without "param:". */
static const char *param_name(const te_tensor *p) { return strncmp(p->name, "param:", 6) ? p->name : p->name + 6; }

/* The name of the first parameter whose unscaled gradient (out[j], that
 * of params[j]) holds a NaN or Inf, after an unscale that found one. A value that the multiply by 1/scale (> 1 once the scale fell under
 * 1) took past FLT_MAX would count too; the step is skipped either way. */
static const char *first_nonfinite(te_tensor **params, te_tensor **out, int k)
{
    for (int j = 0; j < k; j++)
        if (te_has_nonfinite(out[j]))
            return param_name(params[j]);
    return NULL;
}

te_status te_scaler_unscale(te_tensor **params, int n)
{
    if (te_rec_unwinding)
        return te_rewound("amp/unscale");
    if (!sc.enabled)
        return TE_OK;
    te_set_phase(TE_PHASE_UPDATE);
    if (te_tracing) { /* no gradient has a value yet: the compiled step unscales */
        te_trace_unscale(params, n);
        te_next_exec_index();
        return TE_OK;
    }
    te_tensor **io = malloc(3 * (size_t)(n ? n : 1) * sizeof *io);
    if (!io) {
        te_set_error(TE_ERR_NOMEM, "amp/unscale: out of memory");
        return TE_ERR_NOMEM;
    }
    te_tensor **in = io, **out = io + n, **used = io + 2 * n;
    const bool report = te_prof_observed();
    te_op_record rec = {
        .step = te_step(), .phase = TE_PHASE_UPDATE, .op_id = -1, .exec_index = te_exec_index(),
        .name = "amp/unscale", .type = "Unscale", .loc = { __FILE__, __LINE__ },
    };
    if (report)
        te_op_begin(&rec);
    const float inv = (float)(1.0 / (double)sc.scale); /* GradScaler: scale.double().reciprocal().float() */
    te_unscale_args *u = malloc((size_t)(n ? n : 1) * sizeof *u);
    if (!u) {
        free(io);
        te_set_error(TE_ERR_NOMEM, "amp/unscale: out of memory");
        return TE_ERR_NOMEM;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        te_tensor *p = params[i];
        if (!p->grad || !p->grad_valid)
            continue;
        te_tensor *o = p->grad;
        if (p->grad->dtype != TE_F32) {
            master_grad *m = master_slot(p);
            if (!m) {
                free(io);
                free(u);
                te_set_error(TE_ERR_NOMEM, "amp/unscale: out of memory for the f32 gradient of %s", p->name);
                return TE_ERR_NOMEM;
            }
            m->valid = true;
            o = m->g;
        }
        u[k] = (te_unscale_args){ .src = te_data(p->grad), .dt = p->grad->dtype, .dst = te_data(o), .n = p->numel };
        used[k] = p;
        in[k] = p->grad;
        out[k++] = o;
    }
    /* All gradients in one call (one fused pass on a device); only when it
     * found a NaN or Inf is the first one looked for. */
    const te_backend *b = k ? te_backend_for(used[0]) : NULL;
    for (int j = 1; j < k && b; j++)
        if (used[j]->device != used[0]->device) {
            te_set_error(TE_ERR_DEVICE, "amp/unscale: parameters on two devices, %s on %s and %s on %s",
                         used[0]->name, te_device_name(used[0]->device), used[j]->name,
                         te_device_name(used[j]->device));
            free(u);
            free(io);
            return TE_ERR_DEVICE;
        }
    const bool found = b && b->unscale(u, k, inv);
    const char *first = found ? first_nonfinite(used, out, k) : NULL;
    free(u);
    te_scaler_record(found, first);
    if (report) { /* after the record: a stop here sees this step's found_inf */
        rec.exec_index = te_next_exec_index();
        rec.inputs = in;
        rec.n_inputs = k;
        rec.outputs = out;
        rec.n_outputs = k;
        te_op_done(&rec);
    } else {
        te_next_exec_index();
    }
    free(io);
    return TE_OK;
}

bool te_scaler_skip_step(void) { return sc.enabled && pending && sc.found_inf; }

void te_scaler_update(void)
{
    if (!sc.enabled || !pending)
        return; /* no unscale this step: nothing to judge */
    pending = false;
    for (int i = 0; i < n_mg; i++)
        mg[i].valid = false;
    rule();
    write_scale();
}

static void rule(void)
{
    if (sc.found_inf) {
        sc.skipped++;
        sc.growth_tracker = 0;
        /* Megatron decrements without a floor; at 0 it acts the same, and
         * the state stays one te_scaler_state_set takes back */
        if (sc.hysteresis_left > 0)
            sc.hysteresis_left--;
        if (!sc.opts.fixed && sc.hysteresis_left == 0)
            sc.scale *= sc.opts.backoff_factor;
        return;
    }
    if (sc.opts.fixed || ++sc.growth_tracker < sc.opts.growth_interval)
        return;
    sc.growth_tracker = 0;
    sc.hysteresis_left = sc.opts.hysteresis;
    const float grown = sc.scale * sc.opts.growth_factor;
    if (isfinite(grown))
        sc.scale = grown;
}

void te_scaler_snap_take(te_scaler_snap *s)
{
    *s = (te_scaler_snap){ .sc = sc, .pending = pending, .n_mg = n_mg };
    if (n_mg && (s->valid = malloc((size_t)n_mg * sizeof *s->valid)))
        for (int i = 0; i < n_mg; i++)
            s->valid[i] = mg[i].valid;
}

void te_scaler_snap_restore(const te_scaler_snap *s)
{
    sc = s->sc;
    pending = s->pending;
    for (int i = 0; i < n_mg; i++)
        mg[i].valid = i < s->n_mg && s->valid[i];
    if (scale_t)
        write_scale();
}

void te_scaler_snap_free(te_scaler_snap *s)
{
    free(s->valid);
    s->valid = NULL;
}
