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

#include <math.h>
#include <stdio.h>
#include <string.h>

static te_scaler_state sc;

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
    memset(&sc, 0, sizeof sc);
    sc.enabled = true;
    sc.opts = d;
    sc.scale = d.init_scale;
    sc.hysteresis_left = d.hysteresis;
    return TE_OK;
}

void te_scaler_disable(void) { memset(&sc, 0, sizeof sc); }

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
}

void te_scaler_update(void)
{
    if (!sc.enabled)
        return;
    if (sc.found_inf) {
        sc.skipped++;
        sc.growth_tracker = 0;
        if (!sc.opts.fixed && --sc.hysteresis_left <= 0)
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
