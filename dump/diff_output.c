/* diff_output.c — tdbg-diff's report: an aligned table (coloured on a
 * terminal), CSV or JSON with every metric, and the summary that names the
 * root causes first. Rows are written step by step as they are compared. */
#include "diff.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RED "\033[1;31m"
#define YELLOW "\033[33m"
#define GREEN "\033[32m"
#define CYAN "\033[36m"
#define RESET "\033[0m"
#define CAUSES_SHOWN 20     /* root causes the table's summary lists */
#define VERDICT_WIDTH 13    /* "DIVERGES HERE" */

/* ---- cells ---------------------------------------------------------------------------- */

static const char *verdict_text(const diff_row *r)
{
    switch (r->status) {
    case DIFF_ONLY_A: return r->fused_in ? "fused in B" : "only in A";
    case DIFF_ONLY_B: return r->fused_in ? "fused in A" : "only in B";
    case DIFF_UNREADABLE: return "unreadable";
    default: break;
    }
    switch (r->verdict) {
    case DIFF_ROOT: return "DIVERGES HERE";
    case DIFF_INHERITED: return "inherited";
    case DIFF_SAME: return "same";
    default: return "-";
    }
}

/* The verdict as JSON and CSV spell it. */
static const char *verdict_word(const diff_row *r)
{
    switch (r->verdict) {
    case DIFF_ROOT: return "diverges here";
    case DIFF_INHERITED: return "inherited";
    case DIFF_SAME: return "same";
    default: return "";
    }
}

static const char *status_word(const diff_row *r)
{
    static const char *const w[] = { [DIFF_COMPARED] = "compared", [DIFF_SHAPE] = "shape differs",
                                     [DIFF_ONLY_A] = "only in A", [DIFF_ONLY_B] = "only in B",
                                     [DIFF_UNREADABLE] = "unreadable" };
    if (r->fused_in && (r->status == DIFF_ONLY_A || r->status == DIFF_ONLY_B))
        return r->status == DIFF_ONLY_A ? "fused in B" : "fused in A";
    return w[r->status];
}

/* What recomputing the op in f32 said, as JSON and CSV spell it; NULL when
 * the row has none (not an output of a forward op of the low-precision run). */
static const char *recompute_word(const diff_row *r)
{
    if (r->info->io != DUMP_OUT)
        return NULL;
    switch (r->lowp.state) {
    case DIFF_LOWP_OK: return "carries rounding";
    case DIFF_LOWP_OVER: return "diverges here";
    case DIFF_LOWP_SKIP: return "not recomputed";
    default: return NULL;
    }
}

static const char *color_of(const diff_row *r)
{
    if (r->status == DIFF_ONLY_A || r->status == DIFF_ONLY_B || r->status == DIFF_UNREADABLE)
        return CYAN;
    return r->verdict == DIFF_ROOT ? RED : r->verdict == DIFF_INHERITED ? YELLOW : GREEN;
}

/* Flat index at as "[i,j,...]" in shape. */
static const char *index_str(const dump_tensor_info *t, int64_t at, char *buf, size_t n)
{
    if (at < 0) {
        snprintf(buf, n, "-");
        return buf;
    }
    int64_t idx[TE_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->shape[d] ? at % t->shape[d] : 0;
        at = t->shape[d] ? at / t->shape[d] : 0;
    }
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? "," : "", (long long)idx[d]);
    if (len < n)
        snprintf(buf + len, n - len, "]");
    return buf;
}

/* A number for scripts: the shortest text that reads back as x. */
static const char *exact(double x, char *buf, size_t n)
{
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    return buf;
}

/* A number for people: 0, 3.20e-02, inf. */
static const char *num(double x, char *buf, size_t n)
{
    if (x == 0)
        snprintf(buf, n, "0");
    else if (isinf(x))
        snprintf(buf, n, "%sinf", x < 0 ? "-" : "");
    else
        snprintf(buf, n, "%.2e", x);
    return buf;
}

/* Metric m of a compared row for the table, or for CSV (exact numbers). */
static const char *metric_cell(const diff_row *r, diff_metric m, bool csv, char *buf, size_t n)
{
    if (r->status != DIFF_COMPARED) {
        snprintf(buf, n, "%s", csv ? "" : "-");
        return buf;
    }
    const diff_metrics *x = &r->m;
    double v = 0;
    int64_t i = 0;
    bool is_int = false;
    switch (m) {
    case DIFF_M_MAX_ABS: v = x->max_abs; break;
    case DIFF_M_MAX_ABS_INDEX: return index_str(r->a, x->max_abs_at, buf, n);
    case DIFF_M_MEAN_ABS: v = x->mean_abs; break;
    case DIFF_M_MAX_REL: v = x->max_rel; break;
    case DIFF_M_RMSE: v = x->rmse; break;
    case DIFF_M_COSINE:
        if (csv)
            return exact(x->cosine, buf, n);
        snprintf(buf, n, "%.6f", x->cosine);
        return buf;
    case DIFF_M_N_FAIL: i = x->n_fail; is_int = true; break;
    case DIFF_M_FRAC_FAIL: v = x->frac_fail; break;
    case DIFF_M_FRAC_REL_LOW: v = x->frac_rel_low; break;
    case DIFF_M_FRAC_REL_HIGH: v = x->frac_rel_high; break;
    case DIFF_M_MAX_ULP:
        if (x->max_ulp < 0) {
            snprintf(buf, n, "%s", csv ? "" : "-");
            return buf;
        }
        i = x->max_ulp;
        is_int = true;
        break;
    case DIFF_M_NAN_A: i = x->nan_a; is_int = true; break;
    case DIFF_M_NAN_B: i = x->nan_b; is_int = true; break;
    case DIFF_M_INF_A: i = x->inf_a; is_int = true; break;
    case DIFF_M_INF_B: i = x->inf_b; is_int = true; break;
    case DIFF_M_MIN_ATOL: v = x->min_atol; break;
    case DIFF_M_MIN_RTOL: v = x->min_rtol; break;
    default: break;
    }
    if (is_int)
        snprintf(buf, n, "%lld", (long long)i);
    else if (csv && isinf(v))
        snprintf(buf, n, "inf");
    else if (csv)
        exact(v, buf, n);
    else if (m == DIFF_M_FRAC_FAIL || m == DIFF_M_FRAC_REL_LOW || m == DIFF_M_FRAC_REL_HIGH)
        snprintf(buf, n, v == 0 ? "0" : "%.4f", v);
    else
        num(v, buf, n);
    return buf;
}

static int metric_width(diff_metric m)
{
    int w = (int)strlen(diff_metric_names[m]);
    int want = m == DIFF_M_MAX_ABS_INDEX ? 12 : m == DIFF_M_N_FAIL || m >= DIFF_M_MAX_ULP ? 7 : 9;
    if (m == DIFF_M_MIN_ATOL || m == DIFF_M_MIN_RTOL)
        want = 9;
    return w > want ? w : want;
}

/* A source file as the user would type it: relative to the working
 * directory when it is inside it. */
static const char *short_file(const char *file)
{
    static char cwd[4096];
    static bool have;
    if (!have) {
        have = true;
        if (!getcwd(cwd, sizeof cwd))
            cwd[0] = '\0';
    }
    size_t len = strlen(cwd);
    if (len > 1 && strncmp(file, cwd, len) == 0 && file[len] == '/')
        return file + len + 1;
    return file;
}

static const char *io_cell(const dump_tensor_info *t, char *buf, size_t n)
{
    snprintf(buf, n, "%s%d", t->io == DUMP_IN ? "in" : "out", t->slot);
    return buf;
}

/* ---- CSV and JSON text -------------------------------------------------------------- */

static void csv_text(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void json_text(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* A JSON number; NaN and infinities (no JSON spelling) are null. */
static void json_num(FILE *f, double x)
{
    char buf[40];
    fputs(isfinite(x) ? exact(x, buf, sizeof buf) : "null", f);
}

/* ", \"key\": ": an object's field after its first, the value to follow. */
static void json_key(FILE *f, const char *key) { fprintf(f, ", \"%s\": ", key); }

static void json_field_text(FILE *f, const char *key, const char *s)
{
    json_key(f, key);
    json_text(f, s);
}

static void json_field_num(FILE *f, const char *key, double x)
{
    json_key(f, key);
    json_num(f, x);
}

static void json_shape(FILE *f, const dump_tensor_info *t)
{
    if (!t) {
        fputs("null", f);
        return;
    }
    fputc('[', f);
    for (int d = 0; d < t->ndim; d++)
        fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    fputc(']', f);
}

static const char *shape_text(const dump_tensor_info *t, char *buf, size_t n)
{
    if (!t) {
        buf[0] = '\0';
        return buf;
    }
    return te_shape_str(t->ndim, t->shape, buf, n);
}

/* ---- begin ------------------------------------------------------------------------------ */

static void json_side(FILE *f, const diff_side *s)
{
    fputs("{\"path\": ", f);
    json_text(f, s->arg);
    if (s->has_run) {
        json_field_text(f, "mode", te_mode_name(s->meta.mode));
        json_field_text(f, "amp", s->meta.amp);
        fprintf(f, ", \"seed\": %llu, \"command_line\": ", (unsigned long long)s->meta.seed);
        json_text(f, s->meta.command_line);
    }
    fputc('}', f);
}

static void csv_header(diff_ctx *c)
{
    fputs("step,op,op_type,phase,io,slot,tensor,status,verdict,first,dtype_a,dtype_b,shape_a,"
          "shape_b,numel,atol,rtol",
          c->out);
    for (int m = 0; m < DIFF_M_COUNT; m++)
        if (c->o.metric[m])
            fprintf(c->out, ",%s", diff_metric_names[m]);
    fputs(",file,line,kernel,recompute,recompute_first,recompute_max_abs,recompute_max_ulp,"
          "recompute_bound_ulp,recompute_slack,recompute_over,recompute_skip\n", c->out);
}

void diff_out_begin(diff_ctx *c, const diff_side *a, const diff_side *b)
{
    if (c->o.quiet)
        return;
    if (c->o.format == DIFF_JSON) {
        fputs("{\"a\": ", c->out);
        json_side(c->out, a);
        fputs(",\n \"b\": ", c->out);
        json_side(c->out, b);
        fputs(",\n \"tolerance\": {\"atol\": ", c->out);
        json_num(c->out, c->o.tol.atol >= 0 ? c->o.tol.atol : NAN);
        json_field_num(c->out, "rtol", c->o.tol.rtol >= 0 ? c->o.tol.rtol : NAN);
        fputs("},\n \"tensors\": [", c->out);
        return;
    }
    if (c->o.summary_only)
        return;
    if (c->o.format == DIFF_CSV) {
        csv_header(c);
        return;
    }
    fprintf(c->out, "%-*s  %-*s  %-5s", c->step_width, "step", c->op_width, "op", "io");
    for (int m = 0; m < DIFF_M_COUNT; m++)
        if (c->o.metric[m])
            fprintf(c->out, "  %*s", metric_width(m), diff_metric_names[m]);
    fputs("  verdict\n", c->out);
}

/* ---- rows ------------------------------------------------------------------------------- */

/* What follows the verdict: where a root cause was made, shapes that
 * differ, the first divergence. */
static void table_note(FILE *f, const diff_row *r)
{
    char sa[96], sb[96];
    const char *sep = "";
    if (r->first) {
        fputs("first divergence", f);
        sep = "; ";
    }
    if (r->status == DIFF_SHAPE) {
        fprintf(f, "%sshapes %s vs %s", sep, te_shape_str(r->a->ndim, r->a->shape, sa, sizeof sa),
                te_shape_str(r->b->ndim, r->b->shape, sb, sizeof sb));
        sep = "; ";
    } else if (r->status == DIFF_COMPARED && r->m.n_nonfinite > 0) {
        fprintf(f, "%snan %lld/%lld inf %lld/%lld", sep, (long long)r->m.nan_a,
                (long long)r->m.nan_b, (long long)r->m.inf_a, (long long)r->m.inf_b);
        sep = "; ";
    }
    if (r->lowp.state == DIFF_LOWP_OVER && r->info->io == DUMP_OUT) {
        fprintf(f, "%sbeyond rounding: %.3g ulp from its f32 recomputation", sep, r->lowp.ulp);
        sep = "; ";
    }
    if (r->verdict == DIFF_ROOT && r->info->file[0]) {
        fprintf(f, "%s%s:%d", sep, short_file(r->info->file), r->info->line);
        sep = "; ";
    }
    if (r->unchecked_inputs)
        fprintf(f, "%sits inputs were not compared", sep);
}

static void table_row(diff_ctx *c, const diff_row *r)
{
    char buf[128], io[16];
    fprintf(c->out, "%-*lld  %-*s  %-5s", c->step_width, (long long)r->step, c->op_width, r->op,
            io_cell(r->info, io, sizeof io));
    for (int m = 0; m < DIFF_M_COUNT; m++)
        if (c->o.metric[m])
            fprintf(c->out, "  %*s", metric_width(m), metric_cell(r, m, false, buf, sizeof buf));
    const char *v = verdict_text(r);
    fprintf(c->out, "  %s%s%s", c->color ? color_of(r) : "", v, c->color ? RESET : "");
    if (r->first || r->status == DIFF_SHAPE || r->verdict == DIFF_ROOT ||
        (r->lowp.state == DIFF_LOWP_OVER && r->info->io == DUMP_OUT) ||
        (r->status == DIFF_COMPARED && r->m.n_nonfinite > 0)) {
        fprintf(c->out, "%*s  ", VERDICT_WIDTH - (int)strlen(v), "");
        table_note(c->out, r);
    }
    fputc('\n', c->out);
}

/* A number for CSV: exact, "inf", empty for NaN (not applicable). */
static const char *csv_num(double x, char *buf, size_t n)
{
    if (isnan(x))
        buf[0] = '\0';
    else if (isinf(x))
        snprintf(buf, n, "%sinf", x < 0 ? "-" : "");
    else
        exact(x, buf, n);
    return buf;
}

/* The recompute columns: empty but for the outputs of a recomputed op. */
static void csv_recompute(FILE *f, const diff_row *r)
{
    const char *w = recompute_word(r);
    const diff_lowp_res *x = &r->lowp;
    char b[4][40];
    if (!w) {
        fputs(",,,,,,,,", f);
    } else if (x->state == DIFF_LOWP_SKIP) {
        fprintf(f, ",%s,0,,,,,,", w);
        csv_text(f, x->skip);
    } else {
        fprintf(f, ",%s,%d,%s,%s,%s,%s,%lld,", w, x->first, csv_num(x->max_abs, b[0], sizeof b[0]),
                csv_num(x->max_ulp, b[1], sizeof b[1]), csv_num(x->bound_ulp, b[2], sizeof b[2]),
                csv_num(x->slack, b[3], sizeof b[3]), (long long)x->n_over);
    }
}

static void csv_row(diff_ctx *c, const diff_row *r)
{
    const dump_tensor_info *t = r->info;
    char buf[128], sa[96], sb[96];
    fprintf(c->out, "%lld,", (long long)r->step);
    csv_text(c->out, r->op);
    fputc(',', c->out);
    csv_text(c->out, t->op_type);
    fprintf(c->out, ",%s,%s,%d,", te_phase_name(t->phase), t->io == DUMP_IN ? "in" : "out",
            t->slot);
    csv_text(c->out, t->tensor);
    fprintf(c->out, ",%s,%s,%d,%s,%s,", status_word(r), verdict_word(r), r->first,
            r->a ? te_dtype_name(r->a->dtype) : "", r->b ? te_dtype_name(r->b->dtype) : "");
    csv_text(c->out, shape_text(r->a, sa, sizeof sa));
    fputc(',', c->out);
    csv_text(c->out, shape_text(r->b, sb, sizeof sb));
    fprintf(c->out, ",%lld,", (long long)(r->a ? r->a->numel : r->b->numel));
    if (r->a && r->b)
        fprintf(c->out, "%s,%s", exact(r->tol.atol, sa, sizeof sa), exact(r->tol.rtol, sb, sizeof sb));
    else
        fputc(',', c->out);
    for (int m = 0; m < DIFF_M_COUNT; m++)
        if (c->o.metric[m]) {
            fputc(',', c->out);
            csv_text(c->out, metric_cell(r, m, true, buf, sizeof buf));
        }
    fputc(',', c->out);
    csv_text(c->out, short_file(t->file));
    fprintf(c->out, ",%d,", t->line);
    csv_text(c->out, t->kernel);
    csv_recompute(c->out, r);
    fputc('\n', c->out);
}

static void json_int_or_null(FILE *f, const char *key, int64_t v, bool valid)
{
    json_key(f, key);
    if (valid)
        fprintf(f, "%lld", (long long)v);
    else
        fputs("null", f);
}

static void json_index(FILE *f, const char *key, const dump_tensor_info *t, int64_t at)
{
    json_key(f, key);
    if (at < 0) {
        fputs("null", f);
        return;
    }
    int64_t idx[TE_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->shape[d] ? at % t->shape[d] : 0;
        at = t->shape[d] ? at / t->shape[d] : 0;
    }
    fputc('[', f);
    for (int d = 0; d < t->ndim; d++)
        fprintf(f, "%s%lld", d ? "," : "", (long long)idx[d]);
    fputc(']', f);
}

/* The row's recomputation in f32 as an object, or null. */
static void json_recompute(FILE *f, const diff_row *r)
{
    const char *w = recompute_word(r);
    const diff_lowp_res *x = &r->lowp;
    if (!w) {
        fputs("null", f);
        return;
    }
    fputs("{\"verdict\": ", f);
    json_text(f, w);
    if (x->state == DIFF_LOWP_SKIP) {
        json_field_text(f, "skip", x->skip);
    } else {
        fprintf(f, ", \"first\": %s", x->first ? "true" : "false");
        json_field_num(f, "max_abs", x->max_abs);
        json_field_num(f, "max_ulp", x->max_ulp);
        json_field_num(f, "bound_ulp", x->bound_ulp);
        json_field_num(f, "slack", x->slack);
        fprintf(f, ", \"over\": %lld, \"nonfinite\": %s", (long long)x->n_over,
                isinf(x->max_abs) ? "true" : "false");
    }
    fputc('}', f);
}

static void json_row(diff_ctx *c, const diff_row *r)
{
    FILE *f = c->out;
    const dump_tensor_info *t = r->info;
    fprintf(f, "%s\n  {\"step\": %lld, \"op\": ", c->n_out ? "," : "", (long long)r->step);
    json_text(f, r->op);
    json_field_text(f, "op_type", t->op_type);
    fprintf(f, ", \"phase\": \"%s\", \"io\": \"%s\", \"slot\": %d, \"tensor\": ",
            te_phase_name(t->phase), t->io == DUMP_IN ? "in" : "out", t->slot);
    json_text(f, t->tensor);
    fprintf(f, ", \"status\": \"%s\", \"verdict\": ", status_word(r));
    if (r->verdict == DIFF_NONE)
        fputs("null", f);
    else
        json_text(f, verdict_word(r));
    fprintf(f, ", \"first\": %s, \"dtype_a\": ", r->first ? "true" : "false");
    json_text(f, r->a ? te_dtype_name(r->a->dtype) : "");
    json_field_text(f, "dtype_b", r->b ? te_dtype_name(r->b->dtype) : "");
    fputs(", \"shape_a\": ", f);
    json_shape(f, r->a);
    fputs(", \"shape_b\": ", f);
    json_shape(f, r->b);
    fprintf(f, ", \"numel\": %lld", (long long)(r->a ? r->a->numel : r->b->numel));
    const bool pair = r->a && r->b, cmp = r->status == DIFF_COMPARED;
    const diff_metrics *m = &r->m;
    json_field_num(f, "atol", pair ? r->tol.atol : NAN);
    json_field_num(f, "rtol", pair ? r->tol.rtol : NAN);
    static const char *const dkeys[] = { "max_abs", "mean_abs", "max_rel", "rmse", "cosine",
                                         "frac_fail", "frac_rel_1e-3", "frac_rel_5e-3",
                                         "min_atol", "min_rtol" };
    const double dv[] = { m->max_abs, m->mean_abs, m->max_rel, m->rmse, m->cosine, m->frac_fail,
                          m->frac_rel_low, m->frac_rel_high, m->min_atol, m->min_rtol };
    for (size_t k = 0; k < sizeof dv / sizeof dv[0]; k++)
        json_field_num(f, dkeys[k], cmp ? dv[k] : NAN);
    json_index(f, "max_abs_index", r->a, cmp ? m->max_abs_at : -1);
    json_index(f, "max_rel_index", r->a, cmp ? m->max_rel_at : -1);
    json_int_or_null(f, "n_fail", m->n_fail, cmp);
    json_int_or_null(f, "max_ulp", m->max_ulp, cmp && m->max_ulp >= 0);
    json_int_or_null(f, "nan_a", m->nan_a, cmp);
    json_int_or_null(f, "nan_b", m->nan_b, cmp);
    json_int_or_null(f, "inf_a", m->inf_a, cmp);
    json_int_or_null(f, "inf_b", m->inf_b, cmp);
    json_int_or_null(f, "nonfinite_mismatch", m->n_nonfinite, cmp);
    json_field_text(f, "file", short_file(t->file));
    fprintf(f, ", \"line\": %d, \"kernel\": ", t->line);
    json_text(f, t->kernel);
    fprintf(f, ", \"inputs_compared\": %s, \"recompute\": ", r->unchecked_inputs ? "false" : "true");
    json_recompute(f, r);
    fputc('}', f);
}

void diff_out_rows(diff_ctx *c, const diff_row *rows, int n_rows)
{
    if (c->o.quiet || (c->o.summary_only && c->o.format != DIFF_JSON))
        return;
    for (int i = 0; i < n_rows; i++) {
        if (c->o.summary_only)
            break;
        if (c->o.format == DIFF_TABLE)
            table_row(c, &rows[i]);
        else if (c->o.format == DIFF_CSV)
            csv_row(c, &rows[i]);
        else
            json_row(c, &rows[i]);
        c->n_out++;
    }
}

/* ---- the summary ---------------------------------------------------------------------- */

static void cause_set(diff_cause *k, const diff_row *r)
{
    const dump_tensor_info *t = r->info;
    memset(k, 0, sizeof *k);
    k->step = r->step;
    snprintf(k->op, sizeof k->op, "%s", r->op);
    snprintf(k->op_type, sizeof k->op_type, "%s", t->op_type);
    snprintf(k->file, sizeof k->file, "%s", t->file);
    snprintf(k->kernel, sizeof k->kernel, "%s", t->kernel);
    k->phase = t->phase;
    k->line = t->line;
    k->cosine = 1;
}

static void cause_add(diff_cause *k, const diff_row *r)
{
    char io[16];
    size_t len = strlen(k->tensors);
    snprintf(k->tensors + len, sizeof k->tensors - len, "%s%s", len ? " " : "",
             io_cell(r->info, io, sizeof io));
    if (r->status == DIFF_COMPARED) {
        k->max_abs = fmax(k->max_abs, r->m.max_abs);
        k->max_rel = fmax(k->max_rel, r->m.max_rel);
        k->cosine = fmin(k->cosine, r->m.cosine);
    }
    k->no_inputs |= r->unchecked_inputs;
    k->input |= r->verdict == DIFF_ROOT && r->info->io == DUMP_IN;
}

void diff_summary_add(diff_summary *s, const diff_row *rows, int n_rows)
{
    for (int i = 0; i < n_rows; i++) {
        const diff_row *r = &rows[i];
        switch (r->status) {
        case DIFF_ONLY_A:
        case DIFF_ONLY_B:
            if (!r->fused_in)
                *(r->status == DIFF_ONLY_A ? &s->only_a : &s->only_b) += 1;
            else
                *(r->status == DIFF_ONLY_A ? &s->fused_a : &s->fused_b) += 1;
            if (r->fused_in && !s->fused_kernel[0])
                snprintf(s->fused_kernel, sizeof s->fused_kernel, "%s", r->fused_in);
            continue;
        case DIFF_UNREADABLE: s->unreadable++; continue;
        default: break;
        }
        s->tensors++;
        s->same += r->verdict == DIFF_SAME;
        s->root += r->verdict == DIFF_ROOT;
        s->inherited += r->verdict == DIFF_INHERITED;
        if (r->status == DIFF_COMPARED) {
            s->need_atol = fmax(s->need_atol, r->m.min_atol);
            s->need_rtol = fmax(s->need_rtol, r->m.min_rtol);
        }
        if (r->first) {
            s->has_first = true;
            cause_set(&s->first, r);
            cause_add(&s->first, r);
            io_cell(r->info, s->first_io, sizeof s->first_io);
            snprintf(s->first_tensor, sizeof s->first_tensor, "%s", r->info->tensor);
        }
        if (r->verdict != DIFF_ROOT)
            continue;
        diff_cause *last = s->n_causes ? &s->causes[s->n_causes - 1] : NULL;
        if (!last || last->step != r->step || strcmp(last->op, r->op) != 0) {
            if (s->n_causes == s->cap_causes) {
                int cap = s->cap_causes ? 2 * s->cap_causes : 16;
                diff_cause *m = realloc(s->causes, (size_t)cap * sizeof *m);
                if (!m)
                    continue;
                s->causes = m;
                s->cap_causes = cap;
            }
            last = &s->causes[s->n_causes++];
            cause_set(last, r);
        }
        cause_add(last, r);
    }
}

/* The recomputation of the low-precision run's ops: how many, the first
 * beyond rounding (diverges here), the kinds not recomputed. */
static void lowp_summary(FILE *f, const diff_lowp *lp)
{
    fprintf(f, "across precisions: %s (%s) recomputed in f32 from its own inputs: %d op%s, %d "
            "beyond rounding (0.5 ulp + %g of the largest |value|)\n", lp->low == 0 ? "A" : "B",
            lp->level, lp->recomputed, lp->recomputed == 1 ? "" : "s", lp->over, DIFF_LOWP_SLACK);
    if (lp->has_first)
        fprintf(f, "  diverges here: step %lld, %s (%s) out0: %.3g ulp of %s from its "
                "recomputation, %lld element%s beyond rounding\n", (long long)lp->first.step,
                lp->first.op, lp->first.type, lp->first.res.ulp, te_dtype_name(lp->first.dtype),
                (long long)lp->first.res.n_over, lp->first.res.n_over == 1 ? "" : "s");
    else if (lp->recomputed)
        fprintf(f, "  no op beyond rounding: the differences are rounding carried forward\n");
    if (lp->n_skipped)
        fprintf(f, "  not recomputed (%s): %d op%s\n", lp->skipped, lp->n_skipped,
                lp->n_skipped == 1 ? "" : "s");
}

static void text_summary(diff_ctx *c, const diff_summary *s)
{
    FILE *f = c->out;
    char a[32], b[32];
    if (c->n_out > 0)
        fputc('\n', f);
    if (s->n_causes > 0) {
        fprintf(f, "%s%s%s\n", c->color ? RED : "",
                s->n_causes == 1 ? "root cause (its inputs agree, its outputs differ):"
                                 : "root causes (their inputs agree, their outputs differ):",
                c->color ? RESET : "");
        for (int i = 0; i < s->n_causes && i < CAUSES_SHOWN; i++) {
            const diff_cause *k = &s->causes[i];
            fprintf(f, "  step %lld  %s (%s, %s)", (long long)k->step, k->op, k->op_type,
                    te_phase_name(k->phase));
            if (k->file[0])
                fprintf(f, "  at %s:%d", short_file(k->file), k->line);
            if (k->kernel[0])
                fprintf(f, "  in kernel %s", k->kernel);
            fprintf(f, "\n      %s: max_abs %s, max_rel %s, cosine %.6f%s\n", k->tensors,
                    num(k->max_abs, a, sizeof a), num(k->max_rel, b, sizeof b), k->cosine,
                    k->input       ? " (an input differs first: what wrote it was not compared)"
                    : k->no_inputs ? " (its inputs were not compared: the cause may be upstream)"
                                   : "");
        }
        if (s->n_causes > CAUSES_SHOWN)
            fprintf(f, "  ... and %d more (--format json lists them all)\n",
                    s->n_causes - CAUSES_SHOWN);
    }
    if (s->lowp)
        lowp_summary(f, s->lowp);
    if (s->has_first)
        fprintf(f, "first divergence: step %lld, %s (%s) %s %s%s\n", (long long)s->first.step,
                s->first.op, s->first.op_type, s->first_io, s->first_tensor,
                s->stopped ? " (stopped there: --first)" : "");
    if (s->tensors > 0)
        fprintf(f, "least tolerance to pass: atol %s (with the rtol used) or rtol %s (with the "
                "atol used)\n", num(s->need_atol, a, sizeof a), num(s->need_rtol, b, sizeof b));
    fprintf(f, "%d tensors compared in %d step%s: %d diverge%s here, %d inherited, %d same",
            s->tensors, s->steps, s->steps == 1 ? "" : "s", s->root, s->root == 1 ? "s" : "",
            s->inherited, s->same);
    if (s->n_causes > 0)
        fprintf(f, " (%d root-cause op%s)", s->n_causes, s->n_causes == 1 ? "" : "s");
    fputc('\n', f);
    if (s->only_a || s->only_b)
        fprintf(f, "tensors only in A: %d, only in B: %d (not compared)\n", s->only_a, s->only_b);
    if (s->fused_a || s->fused_b)
        fprintf(f, "tensors inside fused kernels: %d of A's in B's, %d of B's in A's (never held there, not "
                "compared), e.g. %s\n", s->fused_a, s->fused_b, s->fused_kernel);
    if ((s->fused_a || s->fused_b) && s->tensors > 0 && s->same == s->tensors && !s->only_a && !s->only_b &&
        !s->unreadable && !s->only_a_steps[0] && !s->only_b_steps[0])
        fprintf(f, "same: every tensor both dumps hold agrees; the rest are intermediates of fused kernels\n");
    if (s->unreadable)
        fprintf(f, "unreadable: %d tensors (see the messages)\n", s->unreadable);
    if (s->only_a_steps[0])
        fprintf(f, "steps only in A: %s (not compared)\n", s->only_a_steps);
    if (s->only_b_steps[0])
        fprintf(f, "steps only in B: %s (not compared)\n", s->only_b_steps);
}

static void json_cause(FILE *f, const diff_cause *k)
{
    fprintf(f, "{\"step\": %lld, \"op\": ", (long long)k->step);
    json_text(f, k->op);
    json_field_text(f, "op_type", k->op_type);
    fprintf(f, ", \"phase\": \"%s\", \"file\": ", te_phase_name(k->phase));
    json_text(f, short_file(k->file));
    fprintf(f, ", \"line\": %d, \"kernel\": ", k->line);
    json_text(f, k->kernel);
    json_field_text(f, "tensors", k->tensors);
    json_field_num(f, "max_abs", k->max_abs);
    json_field_num(f, "max_rel", k->max_rel);
    json_field_num(f, "cosine", k->cosine);
    fprintf(f, ", \"inputs_compared\": %s, \"input_differs\": %s}", k->no_inputs ? "false" : "true",
            k->input ? "true" : "false");
}

/* The recomputation's summary, or null when there was none. */
static void json_lowp(FILE *f, const diff_lowp *lp)
{
    if (!lp) {
        fputs("null", f);
        return;
    }
    fprintf(f, "{\"low\": \"%s\", \"level\": ", lp->low == 0 ? "a" : "b");
    json_text(f, lp->level);
    fprintf(f, ", \"recomputed\": %d, \"beyond_rounding\": %d, \"not_recomputed\": %d",
            lp->recomputed, lp->over, lp->n_skipped);
    json_field_text(f, "not_recomputed_kinds", lp->skipped);
    json_field_num(f, "bound_ulp", 0.5);
    json_field_num(f, "slack_of_largest", DIFF_LOWP_SLACK);
    fputs(", \"diverges_here\": ", f);
    if (lp->has_first) {
        const diff_lowp_op *k = &lp->first;
        fprintf(f, "{\"step\": %lld, \"op\": ", (long long)k->step);
        json_text(f, k->op);
        json_field_text(f, "op_type", k->type);
        json_field_text(f, "dtype", te_dtype_name(k->dtype));
        json_field_num(f, "max_abs", k->res.max_abs);
        json_field_num(f, "max_ulp", k->res.max_ulp);
        json_field_num(f, "ulp_beyond", k->res.ulp);
        json_field_num(f, "slack", k->res.slack);
        fprintf(f, ", \"over\": %lld, \"nonfinite\": %s}", (long long)k->res.n_over,
                isinf(k->res.max_abs) ? "true" : "false");
    } else {
        fputs("null", f);
    }
    fputc('}', f);
}

static void json_summary(diff_ctx *c, const diff_summary *s)
{
    FILE *f = c->out;
    fputs("\n ],\n \"root_causes\": [", f);
    for (int i = 0; i < s->n_causes; i++) {
        fputs(i ? ",\n  " : "\n  ", f);
        json_cause(f, &s->causes[i]);
    }
    fputs(s->n_causes ? "\n ],\n \"first_divergence\": " : "],\n \"first_divergence\": ", f);
    if (s->has_first) {
        json_cause(f, &s->first);
    } else {
        fputs("null", f);
    }
    fputs(",\n \"across_precisions\": ", f);
    json_lowp(f, s->lowp);
    fprintf(f, ",\n \"summary\": {\"steps\": %d, \"tensors\": %d, \"diverge_here\": %d, "
            "\"inherited\": %d, \"same\": %d, \"root_cause_ops\": %d, \"only_a\": %d, "
            "\"only_b\": %d, \"fused_a\": %d, \"fused_b\": %d, \"unreadable\": %d, \"least_atol\": ",
            s->steps, s->tensors, s->root, s->inherited, s->same, s->n_causes, s->only_a,
            s->only_b, s->fused_a, s->fused_b, s->unreadable);
    json_num(f, s->need_atol);
    json_field_num(f, "least_rtol", s->need_rtol);
    json_field_text(f, "steps_only_a", s->only_a_steps);
    json_field_text(f, "steps_only_b", s->only_b_steps);
    fprintf(f, ", \"stopped_at_first\": %s, \"exit\": %d}}\n", s->stopped ? "true" : "false",
            c->rc);
}

void diff_out_end(diff_ctx *c, const diff_summary *s)
{
    if (c->o.quiet)
        return;
    if (c->o.format == DIFF_JSON)
        json_summary(c, s);
    else if (c->o.format == DIFF_TABLE || c->o.summary_only)
        text_summary(c, s);
}
