/*
 * track.c — what the TUI follows beside the session: the loss of every
 * training step (the outputs of ops the op table marks as losses,
 * TE_TRAIT_LOSS, in the forward phase, averaged over a step's micro-batches;
 * a unary elementwise op of the loss, as a Scale before backward, gives the
 * loss scale until mixed precision makes the scaler engine state). The last stop is the session's (dbg_last_stop()), read as
 * a struct where it is shown: nothing here reads the debugger's output.
 */
#include "tui_internal.h"

#include <math.h>
#include <stdlib.h>

#define LOSS_MAX (1 << 20) /* entries kept; then pairs merge and each covers more steps */

static float *loss;
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
static int64_t last_loss_step = -1;

void tui_track_op(const te_op_record *r)
{
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

static void push(float v)
{
    if (!loss && !(loss = malloc(LOSS_MAX * sizeof *loss)))
        return;
    pend_sum += v;
    if (++pend_n < stride)
        return;
    loss[n_loss++] = (float)(pend_sum / (double)pend_n);
    pend_sum = 0;
    pend_n = 0;
    if (n_loss == LOSS_MAX) {
        for (int64_t i = 0; i < LOSS_MAX / 2; i++)
            loss[i] = 0.5f * (loss[2 * i] + loss[2 * i + 1]);
        n_loss = LOSS_MAX / 2;
        stride *= 2;
    }
}

void tui_track_step_end(int64_t step)
{
    if (step_n && step_backward) { /* a training step, not an evaluation */
        float v = (float)(step_sum / step_n);
        if (first_step < 0)
            first_step = step;
        last_step = step;
        push(v);
        last_loss = v;
        last_loss_step = step;
        last_scale = step_scale;
    }
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
    if (n_loss <= cols) {
        for (int64_t i = 0; i < n_loss; i++)
            out[i] = loss[i];
        return (int)n_loss;
    }
    for (int c = 0; c < cols; c++) {
        int64_t i0 = c * n_loss / cols, i1 = (c + 1) * n_loss / cols;
        double sum = 0;
        for (int64_t i = i0; i < i1; i++)
            sum += loss[i]; /* a NaN in the range shows */
        out[c] = (float)(sum / (double)(i1 - i0));
    }
    return cols;
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
    loss = NULL;
    n_loss = 0;
}
