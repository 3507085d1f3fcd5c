/*
 * track.c — what the TUI follows beside the session: the loss of every
 * training step (the outputs of ops the op table marks as losses,
 * TE_TRAIT_LOSS, in the forward phase, averaged over a step's micro-batches;
 * a unary elementwise op of the loss, as a Scale before backward, gives the
 * loss scale when no engine scaler is on); with the engine's loss scaler
 * on (te_scaler_state_get), each step's scale and whether its update was
 * skipped; and per op of this step and the last, its output's precision and
 * whether rounding to it overflowed or underflowed (te_op_record.round).
 * The last stop is the session's (dbg_last_stop()), read as a struct where
 * it is shown: nothing here reads the debugger's output.
 */
#include "tui_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LOSS_MAX (1 << 20) /* entries kept; then pairs merge and each covers more steps */

static float *loss;
static float *scale_at;             /* per entry: the least loss scale (0: no scaler) */
static unsigned char *skip_at;      /* per entry: a skipped step in it */
static int64_t n_loss, first_step = -1, last_step = -1;
static int64_t stride = 1;          /* steps per entry */
static double pend_sum;             /* the entry being filled */
static int64_t pend_n;

/* this step */
static double step_sum;
static int step_n;
static bool step_backward;
static const te_tensor *step_loss_t;
static float step_scale = 1;

static float last_loss = NAN, last_scale = 1;
static bool pend_skip;
static float pend_scale;
static bool any_scaler;

/* this step's engine scaler: read at its first op */
static bool step_sc_read;
static te_scaler_state step_sc;

/* ops of this step and the last, by exec index */
static tui_op_round rounds[2][TUI_ROUND_OPS];
static int cur_rounds;              /* which of rounds[] is this step's */

static void note_round(const te_op_record *r)
{
    if (r->exec_index < 0 || r->exec_index >= TUI_ROUND_OPS)
        return;
    tui_op_round *o = &rounds[cur_rounds][r->exec_index];
    *o = (tui_op_round){ .seen = true, .dtype = r->n_outputs && r->outputs[0] ? r->outputs[0]->dtype : TE_F32 };
    for (int i = 0; r->round && i < r->n_outputs; i++) {
        o->overflow += r->round[i].overflow;
        o->underflow += r->round[i].underflow;
    }
}

const tui_op_round *tui_track_round(int exec, bool last)
{
    if (exec < 0 || exec >= TUI_ROUND_OPS)
        return NULL;
    const tui_op_round *o = &rounds[last ? !cur_rounds : cur_rounds][exec];
    return o->seen ? o : NULL;
}

void tui_track_stopped(const te_op_record *r) { note_round(r); }

static int64_t last_loss_step = -1;

void tui_track_op(const te_op_record *r)
{
    if (!step_sc_read) {
        step_sc_read = true;
        te_scaler_state_get(&step_sc);
    }
    note_round(r);
    if (r->phase != TE_PHASE_FORWARD) {
        step_backward = true;
        return;
    }
    if (r->n_outputs < 1 || !r->outputs[0] || r->outputs[0]->numel != 1 || !r->outputs[0]->data)
        return;
    const te_tensor *o = r->outputs[0];
    if (r->traits & TE_TRAIT_LOSS) {
        step_sum += te_get(o, 0);
        step_n++;
        step_loss_t = o;
    } else if (step_loss_t && r->n_inputs == 1 && r->inputs[0] == step_loss_t && (r->traits & TE_TRAIT_ELEMENTWISE)) {
        float x = te_get(step_loss_t, 0);
        if (x != 0 && isfinite(x))
            step_scale = te_get(o, 0) / x;
    }
}

/* The least of two scales, 0 (no scaler) counting as none. */
static float least(float a, float b) { return !a ? b : !b ? a : a < b ? a : b; }

static void push(float v, float sc, bool skipped)
{
    if (!loss && (!(loss = malloc(LOSS_MAX * sizeof *loss)) || !(scale_at = malloc(LOSS_MAX * sizeof *scale_at)) ||
                  !(skip_at = malloc(LOSS_MAX)))) {
        tui_track_free();
        return;
    }
    pend_sum += v;
    pend_scale = least(pend_scale, sc);
    pend_skip = pend_skip || skipped;
    if (++pend_n < stride)
        return;
    scale_at[n_loss] = pend_scale;
    skip_at[n_loss] = pend_skip;
    loss[n_loss++] = (float)(pend_sum / (double)pend_n);
    pend_sum = 0;
    pend_n = 0;
    pend_scale = 0;
    pend_skip = false;
    if (n_loss == LOSS_MAX) {
        for (int64_t i = 0; i < LOSS_MAX / 2; i++) {
            loss[i] = 0.5f * (loss[2 * i] + loss[2 * i + 1]);
            scale_at[i] = least(scale_at[2 * i], scale_at[2 * i + 1]);
            skip_at[i] = skip_at[2 * i] || skip_at[2 * i + 1];
        }
        n_loss = LOSS_MAX / 2;
        stride *= 2;
    }
}

void tui_track_step_end(int64_t step)
{
    if (step_n && step_backward) { /* a training step, not an evaluation */
        float v = (float)(step_sum / step_n);
        te_scaler_state now;
        bool on = step_sc_read && step_sc.enabled && te_scaler_state_get(&now);
        bool skipped = on && now.skipped > step_sc.skipped;
        if (first_step < 0)
            first_step = step;
        last_step = step;
        push(v, on ? step_sc.scale : 0, skipped);
        any_scaler = any_scaler || on;
        last_loss = v;
        last_loss_step = step;
        last_scale = on ? step_sc.scale : step_scale;
    }
    step_sc_read = false;
    cur_rounds = !cur_rounds;
    memset(rounds[cur_rounds], 0, sizeof rounds[cur_rounds]);
    step_sum = 0;
    step_n = 0;
    step_backward = false;
    step_loss_t = NULL;
    step_scale = 1;
}

int tui_track_loss(float *out, int cols, int64_t *s0, int64_t *s1)
{
    *s0 = first_step;
    *s1 = last_step;
    int n = n_loss < cols ? (int)n_loss : cols;
    for (int c = 0; c < n; c++) {
        int64_t i0 = c * n_loss / n, i1 = (c + 1) * n_loss / n;
        double sum = 0;
        for (int64_t i = i0; i < i1; i++)
            sum += loss[i]; /* a NaN in the range shows */
        out[c] = (float)(sum / (double)(i1 - i0));
    }
    return n;
}

bool tui_track_amp(float *scale, bool *skipped, int cols)
{
    int n = n_loss < cols ? (int)n_loss : cols;
    for (int c = 0; c < n; c++) {
        int64_t i0 = c * n_loss / n, i1 = (c + 1) * n_loss / n;
        scale[c] = 0;
        skipped[c] = false;
        for (int64_t i = i0; i < i1; i++) { /* the columns of tui_track_loss */
            scale[c] = least(scale[c], scale_at[i]);
            skipped[c] = skipped[c] || skip_at[i];
        }
    }
    return any_scaler;
}

bool tui_track_last(float *l, int64_t *step, float *scale)
{
    *l = last_loss;
    *step = last_loss_step;
    *scale = last_scale;
    return last_loss_step >= 0;
}

void tui_track_free(void)
{
    free(loss);
    free(scale_at);
    free(skip_at);
    loss = scale_at = NULL;
    skip_at = NULL;
    n_loss = 0;
    any_scaler = false;
}
