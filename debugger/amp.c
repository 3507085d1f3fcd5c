/*
 * amp.c — what the debugger keeps of mixed precision across steps: the loss
 * scale's changes and every step the scaler skipped, with its reason (the
 * parameter whose gradient went non-finite first and, when `break skip` is
 * armed, the first backward op that created a non-finite value). `info
 * amp` prints it; a `break skip` stop reads the current step's part.
 *
 * The skip itself is the engine's: a step is skipped when the scaler's
 * count of skipped steps grew during it (te_scaler_update at the step's
 * end), whoever reported the unscale.
 */
#include "session.h"

#include <string.h>

static struct {
    bool begun;
    int64_t skipped_before;  /* the scaler's skip count as the step began */
    float scale;             /* this step's */
    bool bad_seen;           /* the first creating backward op of this step is known */
    char bad_op[TE_NAME_MAX], bad_tensor[TE_NAME_MAX];
    dbg_amp_change changes[DBG_AMP_MAX_HISTORY];
    int64_t n_changes;       /* ever; the newest DBG_AMP_MAX_HISTORY kept, as a ring */
    dbg_amp_skip skips[DBG_AMP_MAX_SKIPS];
    int64_t n_skips;
    /* oldest-first copies handed out */
    dbg_amp_change changes_out[DBG_AMP_MAX_HISTORY];
    dbg_amp_skip skips_out[DBG_AMP_MAX_SKIPS];
} amp;

void dbg_amp_reset(void) { memset(&amp, 0, sizeof amp); }

void dbg_amp_step_begin(int64_t step)
{
    te_scaler_state st;
    amp.bad_seen = false;
    amp.bad_op[0] = amp.bad_tensor[0] = '\0';
    amp.begun = te_scaler_state_get(&st);
    if (!amp.begun)
        return;
    amp.skipped_before = st.skipped;
    amp.scale = st.scale;
    const dbg_amp_change *last = amp.n_changes ? &amp.changes[(amp.n_changes - 1) % DBG_AMP_MAX_HISTORY] : NULL;
    if (!last || last->scale != st.scale)
        amp.changes[amp.n_changes++ % DBG_AMP_MAX_HISTORY] = (dbg_amp_change){ .step = step, .scale = st.scale };
}

void dbg_amp_step_end(int64_t step)
{
    te_scaler_state st;
    if (!amp.begun || !te_scaler_state_get(&st) || st.skipped <= amp.skipped_before)
        return;
    dbg_amp_skip *s = &amp.skips[amp.n_skips++ % DBG_AMP_MAX_SKIPS];
    *s = (dbg_amp_skip){ .step = step, .scale = amp.scale };
    snprintf(s->param, sizeof s->param, "%s", st.first_param);
    snprintf(s->op, sizeof s->op, "%s", amp.bad_op);
    snprintf(s->tensor, sizeof s->tensor, "%s", amp.bad_tensor);
}

void dbg_amp_op(const te_op_record *r, bool track)
{
    if (!track || amp.bad_seen || r->phase != TE_PHASE_BACKWARD)
        return;
    for (int k = 0; k < r->n_outputs; k++) {
        const te_tensor *t = r->outputs[k];
        if (!t || !t->data || !te_dtype_is_float(t->dtype) || !te_has_nonfinite(t))
            continue;
        dbg_origin o;
        if (dbg_origin_of(r, t, &o) != DBG_ORIGIN_CREATED || o.intended)
            continue; /* inherited: the op that made it came first */
        amp.bad_seen = true;
        snprintf(amp.bad_op, sizeof amp.bad_op, "%s", r->name);
        snprintf(amp.bad_tensor, sizeof amp.bad_tensor, "%s", t->name);
        return;
    }
}

bool dbg_amp_first_bad(const char **op, const char **tensor)
{
    *op = amp.bad_op;
    *tensor = amp.bad_tensor;
    return amp.bad_seen;
}

int dbg_amp_changes(const dbg_amp_change **c, int64_t *total)
{
    int n = amp.n_changes < DBG_AMP_MAX_HISTORY ? (int)amp.n_changes : DBG_AMP_MAX_HISTORY;
    for (int i = 0; i < n; i++)
        amp.changes_out[i] = amp.changes[(amp.n_changes - n + i) % DBG_AMP_MAX_HISTORY];
    *c = amp.changes_out;
    *total = amp.n_changes;
    return n;
}

int dbg_amp_skips(const dbg_amp_skip **s, int64_t *total)
{
    int n = amp.n_skips < DBG_AMP_MAX_SKIPS ? (int)amp.n_skips : DBG_AMP_MAX_SKIPS;
    for (int i = 0; i < n; i++)
        amp.skips_out[i] = amp.skips[(amp.n_skips - n + i) % DBG_AMP_MAX_SKIPS];
    *s = amp.skips_out;
    *total = amp.n_skips;
    return n;
}
