/*
 * amp.c — what the debugger keeps of mixed precision across steps: the loss
 * scale's changes and every step the scaler skipped, with its reason (the
 * parameter whose gradient went non-finite first and, when `break skip` is
 * armed, the first backward op that created a non-finite value, else the
 * forward op that did: every gradient then inherits it). `info
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
    /* the first op of this step creating a non-finite value, per pass
     * (forward, backward), while tracked */
    bool bad_seen[2];
    char bad_op[2][TE_NAME_MAX], bad_tensor[2][TE_NAME_MAX];
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
    memset(amp.bad_seen, 0, sizeof amp.bad_seen);
    memset(amp.bad_op, 0, sizeof amp.bad_op);
    memset(amp.bad_tensor, 0, sizeof amp.bad_tensor);
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
    const int pass = amp.bad_seen[1] ? 1 : 0; /* the backward's, else the forward's */
    s->backward = pass == 1;
    memcpy(s->op, amp.bad_op[pass], sizeof s->op); /* both TE_NAME_MAX, terminated */
    memcpy(s->tensor, amp.bad_tensor[pass], sizeof s->tensor);
}

void dbg_amp_op(const te_op_record *r, bool track)
{
    const int pass = r->phase == TE_PHASE_FORWARD ? 0 : r->phase == TE_PHASE_BACKWARD ? 1 : -1;
    if (!track || pass < 0 || amp.bad_seen[pass])
        return;
    for (int k = 0; k < r->n_outputs; k++) {
        const te_tensor *t = r->outputs[k];
        if (!t || !t->data || !te_dtype_is_float(t->dtype) || !te_has_nonfinite(t))
            continue;
        dbg_origin o;
        if (dbg_origin_of(r, t, &o) != DBG_ORIGIN_CREATED || o.intended)
            continue; /* inherited: the op that made it came first */
        amp.bad_seen[pass] = true;
        snprintf(amp.bad_op[pass], sizeof amp.bad_op[pass], "%s", r->name);
        snprintf(amp.bad_tensor[pass], sizeof amp.bad_tensor[pass], "%s", t->name);
        return;
    }
}

bool dbg_amp_first_bad(bool backward, const char **op, const char **tensor)
{
    *op = amp.bad_op[backward];
    *tensor = amp.bad_tensor[backward];
    return amp.bad_seen[backward];
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
