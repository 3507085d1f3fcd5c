/*
 * report.c — what the debugger says when it stops: where, why, the
 * offending tensor and element, the op's inputs (and the forward tensors
 * a backward op reads), whether the op created the bad value or inherited
 * it, and one `stopped:` line for scripts.
 *
 * The stop is data first: dbg_stop_make() gathers it into a dbg_stop (the
 * struct front ends read), dbg_stop_report() prints from that struct
 * alone, so the text and the data cannot tell two stories.
 */
#include "session.h"

#include <math.h>
#include <signal.h>
#include <string.h>

const char *dbg_on_device(te_device d)
{
    static char tag[TE_DEV_COUNT][32];
    if (d == TE_DEV_CPU || d >= TE_DEV_COUNT)
        return "";
    if (!tag[d][0])
        snprintf(tag[d], sizeof tag[d], " on %s", te_device_name(d));
    return tag[d];
}

static void describe_tensor(const char *label, const te_tensor *t)
{
    char sh[96];
    te_shape_str(t->ndim, t->shape, sh, sizeof sh);
    if (!t->data) {
        fprintf(dbg_out, "  %-8s %s %s %s%s  (not in memory: fused away in graph mode)\n", label, t->name, sh,
                te_dtype_name(t->dtype), dbg_on_device(t->device));
        return;
    }
    te_stats s;
    te_stats_compute(t, &s);
    fprintf(dbg_out, "  %-8s %s %s %s%s  %s  min %.4g max %.4g abs_max %.4g l2norm %.4g", label, t->name, sh,
            te_dtype_name(t->dtype), dbg_on_device(t->device), s.nan || s.inf ? "NON-FINITE" : "finite", s.min,
            s.max, s.abs_max, s.l2norm);
    if (s.nan || s.inf)
        fprintf(dbg_out, "  nan %lld inf %lld", (long long)s.nan, (long long)s.inf);
    if (s.fp16_overflow)
        fprintf(dbg_out, "  beyond f16 %lld", (long long)s.fp16_overflow);
    fprintf(dbg_out, "\n");
}

/* A list of an op's tensors, the label on the first present one: an
 * absent slot (an optional input not given, a gradient not needed) is
 * left out rather than shown as a line of its own. */
static void describe_list(const char *label, te_tensor *const *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i]) {
            describe_tensor(label, t[i]);
            label = "";
        }
}

/* The input (or read tensor) of rec called name, or NULL. */
static const te_tensor *input_named(const te_op_record *rec, const char *name)
{
    for (int i = 0; i < rec->n_inputs; i++)
        if (rec->inputs[i] && strcmp(rec->inputs[i]->name, name) == 0)
            return rec->inputs[i];
    for (int i = 0; i < rec->n_reads; i++)
        if (rec->reads[i] && strcmp(rec->reads[i]->name, name) == 0)
            return rec->reads[i];
    return NULL;
}

/* The samples of the stop's batch holding bad values: a data stop's
 * first, then every bad row of the tensor, by sample and source. */
static void describe_samples(const dbg_stop *s)
{
    const te_batch *b = s->batch;
    if (!b || !s->active)
        return;
    const te_dataset *d = b->dataset;
    int64_t rows[8];
    int n = 0;
    int64_t total = 0;
    if (s->data_issue[0] && strcmp(s->data_issue, "nonfinite") != 0 && strcmp(s->data_issue, "label") != 0) {
        if (s->row >= 0) { /* the check's own finding: its first row */
            rows[n++] = s->row;
            total = s->bad_rows;
        }
    } else {
        const te_tensor *t = s->t && te_batch_of(s->t) == b ? s->t : NULL;
        for (int k = 0; !t && k < 2; k++) { /* an error or a NaN: the batch tensor with bad rows */
            const te_tensor *u = k ? b->y : b->x;
            if (dbg_batch_bad_rows(b, u, rows, 1) > 0)
                t = u;
        }
        total = t ? dbg_batch_bad_rows(b, t, rows, 8) : 0;
        n = total < 8 ? (int)total : 8;
    }
    if (!total)
        return;
    fprintf(dbg_out, "  %s: %lld of %lld rows of the batch from '%s'%s%s\n",
            s->data_issue[0] ? "the batch's bad rows" : "the data holds it", (long long)total, (long long)b->rows,
            d && d->name ? d->name : "?", b->loader ? "" : " (the program's own pipeline)",
            strcmp(s->data_issue, "constant") == 0 ? " (every value the same)" : "");
    dbg_describe_rows(b, rows, n, total);
}

void dbg_stop_make(dbg_stop *s, const dbg_break *b, const char *reason, const dbg_hit *hit,
                   const te_op_record *rec)
{
    dbg_cond_free(s->cond);
    *s = (dbg_stop){ .step = dbg.step, .phase = rec ? rec->phase : dbg.phase, .rec = rec, .index = -1,
                     .round.dtype = TE_F32, .row = -1, .sample = -1 };
    snprintf(s->reason, sizeof s->reason, "%s", reason);
    if (b) {
        s->break_id = b->id;
        snprintf(s->break_what, sizeof s->break_what, "%s", b->what);
        s->cond = b->cond ? dbg_cond_copy(b->cond) : NULL;
    }
    if (rec) {
        snprintf(s->op, sizeof s->op, "%s", rec->name);
        snprintf(s->type, sizeof s->type, "%s", rec->type);
        s->loc = rec->loc;
    }
    if (rec && hit && hit->func[0]) { /* a condition on no tensor (scale) holds too */
        snprintf(s->func, sizeof s->func, "%s", hit->func);
        s->value = hit->value;
    }
    if (rec && hit && hit->tensor) {
        s->t = hit->tensor;
        snprintf(s->tensor, sizeof s->tensor, "%s", hit->tensor->name);
        s->index = hit->index;
        if (hit->index >= 0)
            te_index_str(hit->tensor, hit->index, s->index_text, sizeof s->index_text);
        dbg_origin_of(rec, hit->tensor, &s->origin);
        if (s->origin.kind == DBG_ORIGIN_PROPAGATED) /* from the data? which samples */
            dbg_stop_sample(s, rec, input_named(rec, s->origin.from));
        if (hit->is_output && rec->round && hit->slot >= 0 && hit->slot < rec->n_outputs)
            s->round = rec->round[hit->slot];
    }
    if (strcmp(reason, "skip") == 0) {
        te_scaler_state st;
        const char *op, *tensor;
        if (te_scaler_state_get(&st)) {
            s->scale = st.scale;
            snprintf(s->skip_param, sizeof s->skip_param, "%s", st.first_param);
        }
        if (dbg_amp_first_bad(true, &op, &tensor)) {
            snprintf(s->skip_op, sizeof s->skip_op, "%s", op);
            snprintf(s->skip_tensor, sizeof s->skip_tensor, "%s", tensor);
        }
        if (dbg_amp_first_bad(false, &op, &tensor)) {
            snprintf(s->skip_fwd_op, sizeof s->skip_fwd_op, "%s", op);
            snprintf(s->skip_fwd_tensor, sizeof s->skip_fwd_tensor, "%s", tensor);
        }
    }
}

/* What rounding the hit output to f16/bf16 did: the value before rounding
 * beside the dtype's largest, so that the headroom shows. */
static void describe_round(const dbg_stop *s)
{
    const te_round_stats *r = &s->round;
    const char *dt = te_dtype_name(r->dtype);
    const double max = te_dtype_max(r->dtype);
    fprintf(dbg_out, "  rounding to %s: %lld of %lld finite non-zero results overflowed to +-Inf, %lld underflowed "
            "to zero\n", dt, (long long)r->overflow, (long long)r->nonzero, (long long)r->underflow);
    if (r->overflow)
        fprintf(dbg_out, "  before rounding: |x| up to %.6g; %s's max is %g (%.3gx beyond it)\n", (double)r->absmax, dt,
                max, (double)r->absmax / max);
    else
        fprintf(dbg_out, "  before rounding: |x| up to %.6g; %s's max is %g (headroom %.3gx)\n", (double)r->absmax, dt,
                max, r->absmax > 0 ? max / (double)r->absmax : INFINITY);
}

static void describe_skip(const dbg_stop *s)
{
    fprintf(dbg_out, "  the loss scaler skips step %lld: scale %g, a gradient is non-finite after unscaling\n",
            (long long)s->step, (double)s->scale);
    if (s->skip_param[0])
        fprintf(dbg_out, "  first non-finite gradient: grad:%s (parameters in registration order)\n", s->skip_param);
    if (s->skip_op[0])
        fprintf(dbg_out, "  first backward op creating a non-finite value: %s, in %s (its inputs were finite)\n",
                s->skip_op, s->skip_tensor);
    else if (s->skip_fwd_op[0])
        fprintf(dbg_out, "  no backward op created one: the gradients inherit it from the forward pass, where %s "
                "created it first, in %s\n", s->skip_fwd_op, s->skip_fwd_tensor);
    else
        fprintf(dbg_out, "  the op that created the first non-finite value was not seen (`break skip` was set after "
                "the passes ran)\n");
}

/* A replayed step that parted from its recording: both values, bits shown. */
static void describe_diverged(const dbg_stop *s)
{
    fprintf(dbg_out, "  the replay of step %lld differs from its recording:\n", (long long)s->step);
    fprintf(dbg_out, "    loss      recorded %.9g  replayed %.9g%s\n", s->rec_loss, s->replay_loss,
            memcmp(&s->rec_loss, &s->replay_loss, sizeof s->rec_loss) ? "" : "  (the same)");
    fprintf(dbg_out, "    checksum  recorded %016llx  replayed %016llx%s\n", (unsigned long long)s->rec_sum,
            (unsigned long long)s->replay_sum, s->rec_sum == s->replay_sum ? "  (the same)" : "");
    fprintf(dbg_out, "  'locate' replays step %lld twice to name the op where it parts\n", (long long)s->step);
}

/* te_record_locate's answer. */
static void describe_located(const dbg_stop *s)
{
    const te_record_located *r = &s->located;
    if (r->found)
        fprintf(dbg_out, "  located: step %lld, %s phase, op %s (%s), output %d, exec %d\n", (long long)r->step,
                te_phase_name(r->phase), r->op, r->type, r->output, r->exec_index);
    else
        fprintf(dbg_out, "  located: step %lld, no op named\n", (long long)r->step);
    fprintf(dbg_out, "  replays agree: %s; match the recording: %s\n", r->replays_agree ? "yes" : "no",
            r->matches_recorded ? "yes" : "no");
    fprintf(dbg_out, "  cause: %s\n", r->cause);
}

static const char *or_dash(const char *s) { return s[0] ? s : "-"; }

void dbg_stop_report(const dbg_stop *s)
{
    fflush(stdout);
    const te_op_record *rec = s->rec;
    if (s->break_id)
        fprintf(dbg_out, "\nBreakpoint %d (%s%s%s), step %lld, %s", s->break_id, s->break_what,
                s->cond ? " if " : "", s->cond ? dbg_cond_text(s->cond) : "", (long long)s->step,
                te_phase_name(s->phase));
    else
        fprintf(dbg_out, "\nStopped (%s), step %lld, %s", s->reason, (long long)s->step, te_phase_name(s->phase));
    if (s->op[0])
        fprintf(dbg_out, ", %s (%s)", s->op, s->type);
    if (s->op[0] && s->loc.file)
        fprintf(dbg_out, " at %s:%d", dbg_short_path(s->loc.file), s->loc.line);
    fprintf(dbg_out, "\n");
    if (strcmp(s->reason, "diverged") == 0)
        describe_diverged(s);
    if (s->has_located)
        describe_located(s);
    if (s->t && strcmp(s->reason, "skip") != 0) { /* a skip's tensor is described below */
        const te_tensor *t = s->t;
        char sh[96];
        te_shape_str(t->ndim, t->shape, sh, sizeof sh);
        if (s->data_issue[0]) { /* a data check's finding: the value, not a count of NaN */
            fprintf(dbg_out, "  %s %s %s: %s", s->tensor, sh, te_dtype_name(t->dtype), s->data_issue);
            if (s->index >= 0)
                fprintf(dbg_out, " at %s = %g", s->index_text, s->value);
            else if (strcmp(s->data_issue, "constant") == 0)
                fprintf(dbg_out, ": every value is %g", s->value);
            fprintf(dbg_out, "\n");
        } else if (s->index >= 0) {
            te_stats st;
            te_stats_quick(t, &st);
            fprintf(dbg_out, "  %s %s %s%s: %lld NaN and %lld Inf of %lld; first at %s = %g\n", s->tensor, sh,
                    te_dtype_name(t->dtype), dbg_on_device(t->device), (long long)st.nan, (long long)st.inf,
                    (long long)st.n, s->index_text, (double)te_get(t, s->index));
        } else {
            fprintf(dbg_out, "  %s %s %s%s: %s = %g\n", s->tensor, sh, te_dtype_name(t->dtype),
                    dbg_on_device(t->device), s->func, s->value);
        }
    }
    if (s->round.dtype != TE_F32)
        describe_round(s);
    if (strcmp(s->reason, "skip") == 0)
        describe_skip(s);
    if (s->error[0])
        fprintf(dbg_out, "  error: %s\n  (the op has no result: going on ends the run with this error)\n", s->error);
    if (rec && (s->break_id || strcmp(s->reason, "interrupt") == 0 || s->error[0])) {
        describe_list("inputs:", rec->inputs, rec->n_inputs);
        describe_list("reads:", rec->reads, rec->n_reads); /* backward: what it reads of the forward pass */
        describe_list("outputs:", rec->outputs, rec->n_outputs);
    }
    const dbg_origin *origin = &s->origin;
    if (origin->kind == DBG_ORIGIN_CREATED && origin->intended)
        fprintf(dbg_out, "  verdict: created here, on purpose (the op table marks %s NONFINITE_OK)\n", s->type);
    else if (origin->kind == DBG_ORIGIN_CREATED && origin->despite[0])
        fprintf(dbg_out, "  verdict: created here (%s holds only intended non-finite values, of another kind)\n",
                origin->despite);
    else if (origin->kind == DBG_ORIGIN_CREATED)
        fprintf(dbg_out, "  verdict: created here (every input is finite)\n");
    else if (origin->kind == DBG_ORIGIN_PROPAGATED)
        fprintf(dbg_out, "  verdict: propagated from %s%s%s\n", origin->from,
                origin->from_read ? " (a forward tensor this op reads)" : "",
                origin->intended ? " (an intended value, carried on)" : "");
    describe_samples(s);
    char line[DBG_STOP_LINE_MAX];
    dbg_stop_line(s, line, sizeof line);
    fprintf(dbg_out, "%s\n", line);
    fflush(dbg_out);
}

/* The one line scripts parse: origin=created or origin=propagated:TENSOR. */
void dbg_stop_line(const dbg_stop *s, char *buf, size_t n)
{
    char origin_tok[TE_NAME_MAX + 32];
    dbg_origin_token(&s->origin, origin_tok, sizeof origin_tok);
    int at = snprintf(buf, n, "stopped: step=%lld phase=%s op=%s type=%s reason=%s tensor=%s index=%s origin=%s",
                      (long long)s->step, te_phase_name(s->phase), or_dash(s->op), or_dash(s->type), s->reason,
                      or_dash(s->tensor), or_dash(s->index_text), origin_tok);
    if (s->sample >= 0 && at > 0 && (size_t)at < n) /* which sample, where the stop knows it */
        at += snprintf(buf + at, n - (size_t)at, " row=%lld sample=%lld", (long long)s->row, (long long)s->sample);
    if (s->signal && at > 0 && (size_t)at < n)
        snprintf(buf + at, n - (size_t)at, " signal=SIG%s", sigabbrev_np(s->signal));
}
