/* report.c — `tdbg-prof FILE`: the top ops by total and by self time,
 * the rollups by op type and by phase, the step-time breakdown and the
 * achieved GFLOP/s of the ops that carry FLOPs, as text tables or as one
 * JSON object (--json). Times print in ms; a share is of the time spent
 * in ops (every op's self time, summed: nested time counted once). */
#include "prof.h"

#include <stdlib.h>
#include <string.h>

static int by_total(const void *pa, const void *pb)
{
    const prof_row *a = pa, *b = pb;
    if (a->total != b->total)
        return a->total > b->total ? -1 : 1;
    return strcmp(a->key, b->key);
}

static int by_self(const void *pa, const void *pb)
{
    const prof_row *a = pa, *b = pb;
    if (a->self != b->self)
        return a->self > b->self ? -1 : 1;
    return strcmp(a->key, b->key);
}

static int by_flops(const void *pa, const void *pb)
{
    const prof_row *a = pa, *b = pb;
    if (a->flops != b->flops)
        return a->flops > b->flops ? -1 : 1;
    return strcmp(a->key, b->key);
}

static double share(double us, double op_us) { return op_us > 0 ? 100 * us / op_us : 0; }

/* GFLOP/s of a row's ops that carry FLOPs; 0 when they took no time. */
static double gflops(const prof_row *r) { return r->flops_us > 0 ? r->flops / r->flops_us / 1e3 : 0; }
/* -1: none of its ops said how many bytes they moved. */
static double gbps(const prof_row *r) { return r->n_bytes && r->bytes_us > 0 ? r->bytes / r->bytes_us / 1e3 : -1; }

static size_t shown(size_t n, const prof_opts *o) { return o->top > 0 && (size_t)o->top < n ? (size_t)o->top : n; }

static void text_rows(FILE *out, const char *title, prof_row *r, size_t n, bool self, double op_us,
                      const prof_opts *o)
{
    if (n) /* r is NULL when there is no op */
        qsort(r, n, sizeof *r, self ? by_self : by_total);
    fprintf(out, "\n%s\n  total ms    self ms  count    mean ms   share  name\n", title);
    for (size_t i = 0; i < shown(n, o); i++)
        fprintf(out, "%10.3f %10.3f %6zu %10.3f %6.1f%%  %s\n", r[i].total / 1e3, r[i].self / 1e3, r[i].count,
                r[i].total / 1e3 / (double)r[i].count, share(self ? r[i].self : r[i].total, op_us), r[i].key);
    if (shown(n, o) < n)
        fprintf(out, "  (%zu more)\n", n - shown(n, o));
}

static void text_steps(FILE *out, const prof_step *s, size_t n)
{
    fprintf(out, "\nstep-time breakdown (ms)\n      step       wall");
    for (int c = 0; c < PROF_CLASS_COUNT; c++)
        fprintf(out, " %9s", prof_class_names[c]);
    fputc('\n', out);
    double mean[PROF_CLASS_COUNT + 1] = { 0 };
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "%10lld %10.3f", (long long)s[i].step, s[i].wall / 1e3);
        mean[PROF_CLASS_COUNT] += s[i].wall / (double)n;
        for (int c = 0; c < PROF_CLASS_COUNT; c++) {
            fprintf(out, " %9.3f", s[i].cls[c] / 1e3);
            mean[c] += s[i].cls[c] / (double)n;
        }
        fputc('\n', out);
    }
    fprintf(out, "%10s %10.3f", "mean", mean[PROF_CLASS_COUNT] / 1e3);
    for (int c = 0; c < PROF_CLASS_COUNT; c++)
        fprintf(out, " %9.3f", mean[c] / 1e3);
    fputc('\n', out);
}

/* The rows that carry FLOPs, moved to the front and sorted by FLOPs; their count. */
static size_t flop_rows(prof_row *r, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (r[i].n_flops > 0) {
            prof_row tmp = r[k];
            r[k++] = r[i];
            r[i] = tmp;
        }
    if (k)
        qsort(r, k, sizeof *r, by_flops);
    return k;
}

static void text_flops(FILE *out, prof_row *r, size_t n, const prof_opts *o)
{
    size_t k = flop_rows(r, n);
    if (o->peak_gflops > 0)
        fprintf(out, "\nops with FLOPs (args.flops), against a peak of %.1f GFLOP/s\n", o->peak_gflops);
    else
        fprintf(out, "\nops with FLOPs (args.flops); no --peak-gflops given: no fraction of peak\n");
    if (k == 0) {
        fprintf(out, "  (none)\n");
        return;
    }
    fprintf(out, "     GFLOP    time ms    GFLOP/s       GB/s  of peak  name\n");
    for (size_t i = 0; i < shown(k, o); i++) {
        fprintf(out, "%10.3f %10.3f %10.2f", r[i].flops / 1e9, r[i].flops_us / 1e3, gflops(&r[i]));
        if (gbps(&r[i]) >= 0)
            fprintf(out, " %10.2f", gbps(&r[i]));
        else
            fprintf(out, " %10s", "-");
        if (o->peak_gflops > 0)
            fprintf(out, " %7.1f%%", 100 * gflops(&r[i]) / o->peak_gflops);
        else
            fprintf(out, " %8s", "-");
        fprintf(out, "  %s\n", r[i].key);
    }
    if (shown(k, o) < k)
        fprintf(out, "  (%zu more)\n", k - shown(k, o));
}

/* ---- JSON ------------------------------------------------------------------------ */

static json_t *json_rows(prof_row *r, size_t n, bool self, double op_us, const prof_opts *o)
{
    if (n) /* r is NULL when there is no op */
        qsort(r, n, sizeof *r, self ? by_self : by_total);
    json_t *a = json_array();
    for (size_t i = 0; i < shown(n, o); i++)
        json_array_append_new(a, json_pack("{s:s, s:I, s:f, s:f, s:f, s:f}", "name", r[i].key,
                                           "count", (json_int_t)r[i].count, "total_ms", r[i].total / 1e3,
                                           "self_ms", r[i].self / 1e3, "mean_ms", r[i].total / 1e3 / (double)r[i].count,
                                           "share", share(self ? r[i].self : r[i].total, op_us)));
    return a;
}

static json_t *json_steps(const prof_step *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_pack("{s:I, s:f}", "step", (json_int_t)s[i].step, "wall_ms", s[i].wall / 1e3);
        for (int c = 0; c < PROF_CLASS_COUNT; c++)
            json_object_set_new(o, prof_class_names[c], json_real(s[i].cls[c] / 1e3));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *json_flops(prof_row *r, size_t n, const prof_opts *o)
{
    size_t k = flop_rows(r, n);
    json_t *a = json_array();
    for (size_t i = 0; i < shown(k, o); i++) {
        json_t *row = json_pack("{s:s, s:f, s:f, s:f}", "name", r[i].key, "gflop", r[i].flops / 1e9,
                                "time_ms", r[i].flops_us / 1e3, "gflops", gflops(&r[i]));
        json_object_set_new(row, "gbps", gbps(&r[i]) >= 0 ? json_real(gbps(&r[i])) : json_null());
        json_object_set_new(row, "of_peak", o->peak_gflops > 0 ? json_real(100 * gflops(&r[i]) / o->peak_gflops)
                                                               : json_null());
        json_array_append_new(a, row);
    }
    return a;
}

/* The rows of fused kernels only (key "-": ops that ran alone, left out); their count. */
static size_t fused_rows(prof_row *r, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(r[i].key, "-") != 0)
            r[k++] = r[i];
    return k;
}

void prof_report(const prof_trace *t, const prof_step *steps, size_t n_steps, const prof_opts *o, FILE *out)
{
    prof_row *by_name, *by_type, *by_phase;
    size_t n_name = prof_rows(t, PROF_BY_NAME, &by_name);
    size_t n_type = prof_rows(t, PROF_BY_TYPE, &by_type);
    size_t n_phase = prof_rows(t, PROF_BY_PHASE, &by_phase);
    prof_row *by_kernel;
    size_t n_kernel = prof_rows(t, PROF_BY_KERNEL, &by_kernel);
    n_kernel = fused_rows(by_kernel, n_kernel);
    double op_us = prof_op_time(t);
    if (o->json) {
        json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:f}", "file", t->file, "steps", (json_int_t)t->n_steps,
                              "ops", (json_int_t)t->n_ops, "threads", (json_int_t)t->n_threads, "op_ms", op_us / 1e3);
        json_object_set_new(j, "top_total", json_rows(by_name, n_name, false, op_us, o));
        json_object_set_new(j, "top_self", json_rows(by_name, n_name, true, op_us, o));
        json_object_set_new(j, "by_type", json_rows(by_type, n_type, true, op_us, o));
        json_object_set_new(j, "by_phase", json_rows(by_phase, n_phase, true, op_us, o));
        json_object_set_new(j, "fused_kernels", json_rows(by_kernel, n_kernel, false, op_us, o));
        json_object_set_new(j, "step_breakdown", json_steps(steps, n_steps));
        json_object_set_new(j, "flops", json_flops(by_name, n_name, o));
        json_object_set_new(j, "peak_gflops", o->peak_gflops > 0 ? json_real(o->peak_gflops) : json_null());
        json_dumpf(j, out, JSON_INDENT(1) | JSON_REAL_PRECISION(12));
        fputc('\n', out);
        json_decref(j);
    } else {
        fprintf(out, "%s: %zu steps, %zu ops on %zu threads, %.3f ms in ops\n", t->file, t->n_steps, t->n_ops,
                t->n_threads, op_us / 1e3);
        text_rows(out, "top ops by total time", by_name, n_name, false, op_us, o);
        text_rows(out, "top ops by self time", by_name, n_name, true, op_us, o);
        text_rows(out, "by op type (sorted by self time)", by_type, n_type, true, op_us, o);
        text_rows(out, "by phase (sorted by self time)", by_phase, n_phase, true, op_us, o);
        if (n_kernel > 0) /* count: the op reports of the kernel's ops, each step */
            text_rows(out, "fused kernels (graph mode; each names the ops it stands for)", by_kernel, n_kernel,
                      false, op_us, o);
        if (n_steps > 0)
            text_steps(out, steps, n_steps);
        else
            fprintf(out, "\nstep-time breakdown: no step events\n");
        text_flops(out, by_name, n_name, o);
    }
    free(by_name);
    free(by_type);
    free(by_phase);
    free(by_kernel);
}
