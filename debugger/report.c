/*
 * report.c — what the debugger says when it stops: where, why, the
 * offending tensor and element, the op's inputs (and the forward tensors
 * a backward op reads), whether the op created the bad value or inherited
 * it, and one `stopped:` line for scripts.
 */
#include "session.h"

#include <math.h>
#include <string.h>

static void describe_tensor(const char *label, const te_tensor *t)
{
    char sh[96];
    if (!t) {
        fprintf(dbg_out, "  %-8s -\n", label);
        return;
    }
    te_shape_str(t->ndim, t->shape, sh, sizeof sh);
    if (!t->data) {
        fprintf(dbg_out, "  %-8s %s %s %s  (not in memory: fused away in graph mode)\n", label, t->name, sh,
                te_dtype_name(t->dtype));
        return;
    }
    te_stats s;
    te_stats_compute(t, &s);
    fprintf(dbg_out, "  %-8s %s %s %s  %s  min %.4g max %.4g abs_max %.4g l2norm %.4g", label, t->name, sh,
            te_dtype_name(t->dtype), s.nan || s.inf ? "NON-FINITE" : "finite", s.min, s.max, s.abs_max,
            s.l2norm);
    if (s.nan || s.inf)
        fprintf(dbg_out, "  nan %lld inf %lld", (long long)s.nan, (long long)s.inf);
    if (s.fp16_overflow)
        fprintf(dbg_out, "  beyond f16 %lld", (long long)s.fp16_overflow);
    fprintf(dbg_out, "\n");
}

void dbg_report_stop(const dbg_break *b, const char *reason, const dbg_hit *hit, const te_op_record *rec)
{
    fflush(stdout);
    char idx[96] = "-";
    dbg_origin origin = { .kind = DBG_ORIGIN_NONE };
    if (b)
        fprintf(dbg_out, "\nBreakpoint %d (%s%s%s), step %lld, %s", b->id, b->what,
                b->cond ? " if " : "", b->cond ? dbg_cond_text(b->cond) : "", (long long)dbg.step,
                te_phase_name(dbg.phase));
    else
        fprintf(dbg_out, "\nStopped (%s), step %lld, %s", reason, (long long)dbg.step, te_phase_name(dbg.phase));
    if (rec)
        fprintf(dbg_out, ", %s (%s) at %s:%d", rec->name, rec->type, dbg_short_path(rec->loc.file), rec->loc.line);
    fprintf(dbg_out, "\n");
    if (rec && hit && hit->tensor) {
        const te_tensor *t = hit->tensor;
        char sh[96];
        te_shape_str(t->ndim, t->shape, sh, sizeof sh);
        if (hit->index >= 0) {
            te_index_str(t, hit->index, idx, sizeof idx);
            te_stats s;
            te_stats_quick(t, &s);
            fprintf(dbg_out, "  %s %s %s: %lld NaN and %lld Inf of %lld; first at %s = %g\n", t->name, sh,
                    te_dtype_name(t->dtype), (long long)s.nan, (long long)s.inf, (long long)s.n, idx,
                    (double)te_get(t, hit->index));
        } else {
            fprintf(dbg_out, "  %s %s %s: %s = %g\n", t->name, sh, te_dtype_name(t->dtype), hit->func, hit->value);
        }
        dbg_origin_of(rec, t, &origin);
    }
    if (rec && (b || strcmp(reason, "interrupt") == 0)) {
        for (int i = 0; i < rec->n_inputs; i++)
            describe_tensor(i ? "" : "inputs:", rec->inputs[i]);
        for (int i = 0; i < rec->n_reads; i++) /* backward: what it reads of the forward pass */
            describe_tensor(i ? "" : "reads:", rec->reads[i]);
        for (int k = 0; k < rec->n_outputs; k++)
            describe_tensor(k ? "" : "outputs:", rec->outputs[k]);
    }
    if (origin.kind == DBG_ORIGIN_CREATED)
        fprintf(dbg_out, "  verdict: created here (every input is finite)\n");
    else if (origin.kind == DBG_ORIGIN_PROPAGATED)
        fprintf(dbg_out, "  verdict: propagated from %s%s\n", origin.from,
                origin.from_read ? " (a forward tensor this op reads)" : "");
    /* The one line scripts parse: origin=created or origin=propagated:TENSOR. */
    char origin_tok[TE_NAME_MAX + 32];
    dbg_origin_token(&origin, origin_tok, sizeof origin_tok);
    fprintf(dbg_out, "stopped: step=%lld phase=%s op=%s type=%s reason=%s tensor=%s index=%s origin=%s\n",
            (long long)dbg.step, te_phase_name(rec ? rec->phase : dbg.phase), rec ? rec->name : "-",
            rec ? rec->type : "-", reason, hit && hit->tensor ? hit->tensor->name : "-", idx, origin_tok);
    fflush(dbg_out);
}
