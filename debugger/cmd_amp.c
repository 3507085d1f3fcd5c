/*
 * cmd_amp.c — precision: `compare f32` (the op stopped at, re-run in f32
 * from its inputs cast up, against its low-precision output) and `info
 * amp` (the level, the dtype, which ops ran in which precision, the loss
 * scale's history and every skipped step with its reason).
 */
#include "cmd.h"
#include "session.h"

#include <math.h>
#include <string.h>

/* The spacing of dt's values at |x| (f16: 10 bits of fraction, normal from
 * 2^-14; bf16: 7 bits, normal from 2^-126): the unit an error in ulps is
 * counted in. Beyond the largest finite value, the spacing there. */
static double ulp_at(te_dtype dt, double x)
{
    const int bits = dt == TE_F16 ? 10 : 7, emin = dt == TE_F16 ? -14 : -126, emax = dt == TE_F16 ? 15 : 127;
    int e = x != 0 && isfinite(x) ? ilogb(fabs(x)) : emin;
    e = e < emin ? emin : e > emax ? emax : e;
    return ldexp(1.0, e - bits);
}

static float round_to(te_dtype dt, float x)
{
    return dt == TE_F16 ? te_f16_to_f32(te_f32_to_f16(x)) : te_bf16_to_f32(te_f32_to_bf16(x));
}

#define SHOW_ELEMS 5 /* overflowed/underflowed elements listed */
#define CMP_CHUNK 16384 /* elements of each side read at once */

/* Element i as f32, read from t's device. */
static double elem(const te_tensor *t, int64_t i)
{
    float x = 0;
    te_tensor_read_f32(t, i, 1, &x);
    return x;
}

/* One output: the low-precision one against the f32 result. */
static void compare_output(const te_tensor *low, const te_tensor *ref)
{
    const te_dtype dt = low->dtype;
    char sh[96];
    te_shape_str(low->ndim, low->shape, sh, sizeof sh);
    fprintf(dbg_out, "  %s %s %s against f32:\n", low->name, sh, te_dtype_name(dt));
    double max_abs = 0, max_rel = 0, max_ulp = 0;
    int64_t at_abs = -1, at_ulp = -1, n_over = 0, n_under = 0, n_nonzero = 0, n_rounded = 0, n_other = 0;
    int64_t over[SHOW_ELEMS], under[SHOW_ELEMS];
    static float lbuf[CMP_CHUNK], rbuf[CMP_CHUNK];
    for (int64_t i = 0; i < low->numel; i++) {
        if (i % CMP_CHUNK == 0) { /* the next chunk of both to the host */
            int64_t n = low->numel - i < CMP_CHUNK ? low->numel - i : CMP_CHUNK;
            te_tensor_read_f32(low, i, n, lbuf);
            te_tensor_read_f32(ref, i, n, rbuf);
        }
        const float l = lbuf[i % CMP_CHUNK], r = rbuf[i % CMP_CHUNK], want = round_to(dt, r);
        if (!isfinite(r))
            continue; /* non-finite in f32 too: not the precision's doing */
        if (r != 0)
            n_nonzero++;
        if (isinf(want) || (r != 0 && want == 0)) {
            int64_t *list = isinf(want) ? over : under, *n = isinf(want) ? &n_over : &n_under;
            if (*n < SHOW_ELEMS)
                list[*n] = i;
            ++*n;
        }
        n_rounded += l == want || (isnan(l) && isnan(want));
        if (!isfinite(l) || isinf(want)) {
            n_other += !isinf(want); /* non-finite although the rounded f32 result is not */
            continue;
        }
        const double d = fabs((double)l - (double)r), rel = d / fmax(fabs((double)r), 1e-30),
                     u = d / ulp_at(dt, r);
        if (d > max_abs || at_abs < 0) {
            max_abs = d;
            at_abs = i;
        }
        max_rel = rel > max_rel ? rel : max_rel;
        if (u > max_ulp || at_ulp < 0) {
            max_ulp = u;
            at_ulp = i;
        }
    }
    char idx[96];
    if (at_abs >= 0) {
        te_index_str(low, at_abs, idx, sizeof idx);
        fprintf(dbg_out, "    max abs error %.4g at %s (%s %.8g, f32 %.8g); max rel error %.4g\n", max_abs, idx,
                te_dtype_name(dt), elem(low, at_abs), elem(ref, at_abs), max_rel);
        te_index_str(low, at_ulp, idx, sizeof idx);
        fprintf(dbg_out, "    max error %.3g %s ulps at %s\n", max_ulp, te_dtype_name(dt), idx);
    }
    fprintf(dbg_out, "    %lld of %lld elements are the f32 result rounded to nearest even\n", (long long)n_rounded,
            (long long)low->numel);
    const char *dts = te_dtype_name(dt);
    for (int w = 0; w < 2; w++) {
        const int64_t n = w ? n_under : n_over, *list = w ? under : over;
        fprintf(dbg_out, "    %s: %lld of %lld%s", w ? "underflowed to zero" : "overflowed to +-Inf", (long long)n,
                (long long)(w ? n_nonzero : low->numel), n ? ":" : "");
        for (int64_t k = 0; k < n && k < SHOW_ELEMS; k++) {
            te_index_str(low, list[k], idx, sizeof idx);
            fprintf(dbg_out, " %s f32 %.6g", idx, elem(ref, list[k]));
        }
        fprintf(dbg_out, "%s\n", n > SHOW_ELEMS ? " ..." : "");
    }
    if (n_over)
        fprintf(dbg_out, "    verdict: %s's range is the cause: %lld results beyond its max %g\n", dts,
                (long long)n_over, (double)te_dtype_max(dt));
    else if (n_under * 10 > n_nonzero && n_under)
        fprintf(dbg_out, "    verdict: %s's range is the cause: %lld non-zero results too small for it\n", dts,
                (long long)n_under);
    else if (n_other || n_rounded < low->numel)
        fprintf(dbg_out, "    verdict: not this op's precision: %lld elements differ from the f32 result by more "
                "than its rounding (the value was changed after the op ran, or its inputs differ)\n",
                (long long)(low->numel - n_rounded));
    else
        fprintf(dbg_out, "    verdict: only rounding (%.3g ulps at most): this op's precision is not the cause\n",
                max_ulp);
}

static bool cmd_compare(const char *args)
{
    if (strcmp(args, "f32") != 0) {
        dbg_error("compare: expected 'f32' (usage: compare f32), got '%s'", args);
        return false;
    }
    const te_op_record *r = dbg_stopped_at();
    if (!r) {
        dbg_error("compare f32: training is not stopped at an op; a breakpoint or 'step' stops at one");
        return false;
    }
    bool low = false;
    for (int k = 0; k < r->n_outputs; k++)
        low |= r->outputs[k] && (r->outputs[k]->dtype == TE_F16 || r->outputs[k]->dtype == TE_BF16);
    if (!low) {
        dbg_error("compare f32: %s (%s) has no f16 or bf16 output: it ran in f32 already", r->name, r->type);
        return false;
    }
    for (int k = 0; k < r->n_outputs; k++)
        if (r->outputs[k] && !r->outputs[k]->data) {
            dbg_error("compare f32: %s is not in memory (graph mode fused it away)", r->outputs[k]->name);
            return false;
        }
    te_tensor *ref[8] = { 0 };
    if (r->n_outputs > 8 || te_rerun_f32(r, ref, 8) != TE_OK) {
        dbg_error("compare f32: %s", r->n_outputs > 8 ? "too many outputs" : te_error());
        return false;
    }
    fprintf(dbg_out, "compare f32: %s (%s), step %lld, re-run in f32 from its inputs cast up\n", r->name, r->type,
            (long long)r->step);
    for (int k = 0; k < r->n_outputs; k++) {
        if (r->outputs[k] && (r->outputs[k]->dtype == TE_F16 || r->outputs[k]->dtype == TE_BF16))
            compare_output(r->outputs[k], ref[k]);
        if (ref[k])
            te_tensor_free(ref[k]);
    }
    return false;
}

/* The forward ops of the step (this one, else the last) by the precision
 * the op table gives their type at this level (te_amp_op_precision: low,
 * f32, follows its inputs), each with the dtype its output was in and what
 * rounding did to it. */
static void ops_by_precision(void)
{
    const dbg_op *ops = dbg.n_ops ? dbg.ops : dbg.last_ops;
    const int n = dbg.n_ops ? dbg.n_ops : dbg.n_last_ops;
    if (!n) {
        fprintf(dbg_out, "ops: none has run yet\n");
        return;
    }
    fprintf(dbg_out, "ops of step %lld by precision (the op table's class at this level; each op's output dtype):\n",
            (long long)dbg.step);
    static const char *const classes[] = { "low", "f32", "follows" };
    for (int c = 0; c < 3; c++) {
        int count = 0;
        for (int i = 0; i < n; i++) {
            const char *p = ops[i].phase == TE_PHASE_FORWARD ? te_amp_op_precision(ops[i].type) : NULL;
            if (!p || strcmp(p, classes[c]) != 0)
                continue;
            if (!count++)
                fprintf(dbg_out, "  %s: ", classes[c]);
            else
                fprintf(dbg_out, ", ");
            fprintf(dbg_out, "%s %s", ops[i].name, te_dtype_name(ops[i].dtype));
            if (ops[i].overflow || ops[i].underflow)
                fprintf(dbg_out, " (overflow %lld, underflow %lld)", (long long)ops[i].overflow,
                        (long long)ops[i].underflow);
        }
        if (count)
            fprintf(dbg_out, "\n");
    }
}

void dbg_info_amp(void);
void dbg_info_amp(void)
{
    te_amp_level level = te_amp_level_get();
    fprintf(dbg_out, "amp: level %s, low precision %s\n", te_amp_level_name(level),
            level == TE_AMP_O0 ? "none (everything f32)" : te_dtype_name(te_amp_dtype()));
    ops_by_precision();
    te_scaler_state st;
    if (!te_scaler_state_get(&st)) {
        fprintf(dbg_out, "loss scaler: off\n");
        return;
    }
    fprintf(dbg_out, "loss scaler: %s, scale %g (init %g, x%g every %d clean steps, x%g on a non-finite one, "
            "hysteresis %d), %lld steps skipped\n", st.opts.fixed ? "fixed" : "dynamic", (double)st.scale,
            (double)st.opts.init_scale, (double)st.opts.growth_factor, st.opts.growth_interval,
            (double)st.opts.backoff_factor, st.opts.hysteresis, (long long)st.skipped);
    const dbg_amp_change *c;
    int64_t total;
    int n = dbg_amp_changes(&c, &total);
    fprintf(dbg_out, "scale history (step: scale)%s:", total > n ? " (the newest)" : "");
    for (int i = 0; i < n; i++)
        fprintf(dbg_out, " %lld: %g%s", (long long)c[i].step, (double)c[i].scale, i + 1 < n ? "," : "");
    fprintf(dbg_out, "%s\n", n ? "" : " none seen yet");
    const dbg_amp_skip *s;
    n = dbg_amp_skips(&s, &total);
    fprintf(dbg_out, "skipped steps: %lld seen%s\n", (long long)total, total > n ? " (the newest listed)" : "");
    for (int i = 0; i < n; i++) {
        fprintf(dbg_out, "  step %lld: scale %g, grad:%s non-finite first", (long long)s[i].step, (double)s[i].scale,
                s[i].param);
        if (s[i].op[0])
            fprintf(dbg_out, "; created in the %s by %s (%s)", s[i].backward ? "backward" : "forward", s[i].op,
                    s[i].tensor);
        fprintf(dbg_out, "\n");
    }
}

const dbg_cmd dbg_cmds_amp[] = {
    { .name = "compare", .usage = "compare f32",
      .help = "the op stopped at re-run in f32 from its inputs cast up, against its f16/bf16 output\n"
      "Prints max abs and rel error, the error in ulps of the low dtype, how many elements\n"
      "are the f32 result rounded to nearest even, the elements that overflowed or\n"
      "underflowed, and whether the op's precision is the cause. Forward ops.",
      .needs = DBG_CMD_STOPPED, .args = { { .words = DBG_WORDS("f32") } }, .max_words = 1, .run = cmd_compare },
    { .name = NULL },
};
