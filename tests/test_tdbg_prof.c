/* test_tdbg_prof.c — `tdbg-prof` (prof/), run in process on traces written
 * here with known numbers: the tables' exact values (self time with
 * nesting, rollups, the step breakdown, GFLOP/s and the fraction of a
 * peak), diff's order and percentages, and every damaged or hostile trace
 * with its exact message and status 2; and end to end, the engine's own
 * capture of a small training run read back by the tool. */
#include "prof.h"
#include "suites.h"
#include "te.h"
#include "testutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char suite_dir[64];

static void suite_dir_make(void) { tu_scratch_make(suite_dir, sizeof suite_dir, "tdbg-prof"); }
static void suite_dir_remove(void) { tu_scratch_remove(suite_dir); }

#define RUN(...) tu_run_tool(tdbg_prof_main, "tdbg-prof", (const char *const[]){ __VA_ARGS__, NULL })

/* Writes text to a fresh file NAME in a fresh directory; returns its path (static buffer per call site). */
static const char *write_trace(char *path, size_t n, const char *name, const char *text)
{
    char dir[256];
    tu_scratch_sub(suite_dir, dir, sizeof dir);
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

/* ---- the crafted traces ------------------------------------------------------- */

typedef struct tbuf {
    char s[16384];
    size_t n;
} tbuf;

static void add(tbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    b->n += (size_t)vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
    va_end(ap);
    ck_assert_uint_lt(b->n, sizeof b->s);
}

/* A step whose hooks spent dump_ns ns waiting for the dump writer. */
static void step_dump(tbuf *b, int step, double ts, double dur, double dump_ns)
{
    add(b, "{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"step %d\",\"ts\":%g,\"dur\":%g,\"pid\":1,\"tid\":1,"
        "\"args\":{\"step\":%d,\"dump_ns\":%g}},", step, ts, dur, step, dump_ns);
}

static void step_ev(tbuf *b, int step, double ts, double dur) { step_dump(b, step, ts, dur, 0); }

/* A phase with hooks_ns ns in the hooks and data_ns ns in loader waits inside it. */
static void phase_in(tbuf *b, const char *name, int step, double ts, double dur, double hooks_ns, double data_ns)
{
    add(b, "{\"ph\":\"X\",\"cat\":\"phase\",\"name\":\"%s\",\"ts\":%g,\"dur\":%g,\"pid\":1,\"tid\":1,"
        "\"args\":{\"step\":%d,\"hooks_ns\":%g,\"data_ns\":%g}},", name, ts, dur, step, hooks_ns, data_ns);
}

static void phase_ev(tbuf *b, const char *name, int step, double ts, double dur)
{
    add(b, "{\"ph\":\"X\",\"cat\":\"phase\",\"name\":\"%s\",\"ts\":%g,\"dur\":%g,\"pid\":1,\"tid\":1,"
        "\"args\":{\"step\":%d}},", name, ts, dur, step);
}

/* An op; type, phase NULL: left out; flops < 0: left out. */
static void op_ev(tbuf *b, const char *name, const char *type, const char *phase, double ts, double dur, int tid,
                  double flops)
{
    add(b, "{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"%s\",\"ts\":%g,\"dur\":%g,\"pid\":1,\"tid\":%d,\"args\":{", name, ts,
        dur, tid);
    const char *sep = "";
    if (type)
        add(b, "\"type\":\"%s\"", type), sep = ",";
    if (phase)
        add(b, "%s\"phase\":\"%s\"", sep, phase), sep = ",";
    if (flops >= 0)
        add(b, "%s\"flops\":%g", sep, flops);
    add(b, "}},");
}

/* An op that says how many bytes it moved. */
static void op_bytes(tbuf *b, const char *name, const char *type, const char *phase, double ts, double dur,
                     double flops, double bytes)
{
    add(b, "{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"%s\",\"ts\":%g,\"dur\":%g,\"pid\":1,\"tid\":1,\"args\":{"
        "\"type\":\"%s\",\"phase\":\"%s\",\"flops\":%g,\"bytes\":%g}},", name, ts, dur, type, phase, flops, bytes);
}

static void close_trace(tbuf *b)
{
    add(b, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"main\"}},"
        "{\"ph\":\"C\",\"name\":\"memory\",\"ts\":0,\"pid\":1,\"args\":{\"live\":10,\"peak\":20}}],"
        "\"displayTimeUnit\":\"ms\",\"otherData\":{\"tdbg\":1}}");
}

/* Trace A: two steps of 10 and 12 ms on thread 1, a loader op on thread 2.
 *   fc1/linear  2 x 2 ms, each holding fc1/matmul (1.5 ms, then all 2 ms): self 0.5 ms in all
 *   fc1/matmul  3.5 ms, relu 1.5 ms, fc1/linear_bwd 7 ms, sgd 2 ms, loader/decode 1.5 ms
 *   op time: 0.5 + 3.5 + 1.5 + 7 + 2 + 1.5 = 16 ms
 *   step 1: data 1, forward 3, backward 4, update 1, hooks 0.3, dump 0.2, other 0.5
 *   step 2: data 2, forward 3, backward 5, update 1, hooks 0,   dump 0,   other 1
 *   FLOPs: linear 4e9 a call, matmul 3e9, linear_bwd 8e9; bytes: linear_bwd 6e9 and 8e9. */
static const char *trace_a(char *path, size_t n)
{
    static tbuf b;
    b.n = 0;
    add(&b, "{\"traceEvents\":[");
    step_dump(&b, 1, 0, 10000, 200000);                   /* 0.2 ms of the hooks' 0.5 waiting for the dump writer */
    phase_ev(&b, "data", 1, 0, 1000);
    phase_ev(&b, "forward", 1, 1000, 3000);
    phase_in(&b, "backward", 1, 4000, 4500, 500000, 0);   /* 0.5 ms of it in the hooks */
    phase_ev(&b, "update", 1, 8500, 1000);
    op_ev(&b, "fc1/linear", "linear", "forward", 1000, 2000, 1, 4e9);
    op_ev(&b, "fc1/matmul", "matmul", "forward", 1200, 1500, 1, 3e9);
    op_ev(&b, "relu", "relu", "forward", 3000, 500, 1, -1);
    op_bytes(&b, "fc1/linear_bwd", "linear", "backward", 4000, 3000, 8e9, 6e9);
    op_ev(&b, "sgd", "sgd", "update", 8500, 1000, 1, -1);
    step_ev(&b, 2, 10000, 12000);
    phase_ev(&b, "data", 2, 10000, 1500);
    phase_in(&b, "forward", 2, 11500, 3500, 0, 500000);   /* 0.5 ms of it waiting for the loader */
    phase_ev(&b, "backward", 2, 15000, 5000);
    phase_ev(&b, "update", 2, 20000, 1000);
    /* the matmul spans its linear exactly and is written first (ops are written as they end): the child */
    op_ev(&b, "fc1/matmul", "matmul", "forward", 12000, 2000, 1, 3e9);
    op_ev(&b, "fc1/linear", "linear", "forward", 12000, 2000, 1, 4e9);
    op_ev(&b, "relu", "relu", "forward", 14000, 1000, 1, -1);
    op_bytes(&b, "fc1/linear_bwd", "linear", "backward", 15000, 4000, 8e9, 8e9);
    op_ev(&b, "sgd", "sgd", "update", 20000, 1000, 1, -1);
    op_ev(&b, "loader/decode", NULL, NULL, 10000, 1500, 2, -1);
    add(&b, "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"ignored\",\"ts\":0,\"dur\":99999,\"pid\":1,\"tid\":1},");
    close_trace(&b);
    return write_trace(path, n, "a.json", b.s);
}

/* Trace B: one step; per step against A: fc1/linear 0.25 (same), fc1/matmul 2.75 (+1.0, +57.1%),
 * relu 0.75 (same), fc1/linear_bwd 3.0 (-0.5, -14.3%), gelu 1.5 (only B); sgd and loader/decode
 * only in A. Total 8.25 against 8.0 (+3.1%). */
static const char *trace_b(char *path, size_t n)
{
    static tbuf b;
    b.n = 0;
    add(&b, "{\"traceEvents\":[");
    step_ev(&b, 5, 0, 9000);
    op_ev(&b, "fc1/linear", "linear", "forward", 0, 250, 1, -1);
    op_ev(&b, "fc1/matmul", "matmul", "forward", 250, 2750, 1, -1);
    op_ev(&b, "relu", "relu", "forward", 3000, 750, 1, -1);
    op_ev(&b, "gelu", "gelu", "forward", 3750, 1500, 1, -1);
    op_ev(&b, "fc1/linear_bwd", "linear", "backward", 5250, 3000, 1, -1);
    close_trace(&b);
    return write_trace(path, n, "b.json", b.s);
}

static json_t *parse_out(const tu_result *r)
{
    json_error_t je;
    json_t *j = json_loads(r->out, 0, &je);
    ck_assert_msg(j != NULL, "not JSON (%s):\n%s", je.text, r->out);
    return j;
}

/* Row i of array key in j: checks its name, returns it. */
static json_t *row(json_t *j, const char *key, size_t i, const char *name)
{
    json_t *a = json_object_get(j, key);
    ck_assert_msg(json_is_array(a) && i < json_array_size(a), "%s has no row %zu", key, i);
    json_t *r = json_array_get(a, i);
    ck_assert_str_eq(json_string_value(json_object_get(r, "name")), name);
    return r;
}

static double num(json_t *r, const char *key)
{
    json_t *v = json_object_get(r, key);
    ck_assert_msg(json_is_number(v), "no number %s", key);
    return json_number_value(v);
}

#define EQ(r, key, want) ck_assert_double_eq_tol(num((r), (key)), (want), 1e-9)

/* Asserts that out holds line (a whole line). */
static void has_line(const char *out, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = out; (p = strstr(p, line)) != NULL; p++)
        if ((p == out || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return;
    ck_abort_msg("no line \"%s\" in:\n%s", line, out);
}

/* ---- the report ------------------------------------------------------------- */

START_TEST(test_tables_text)
{
    char a[512];
    trace_a(a, sizeof a);
    tu_result r = RUN("--peak-gflops", "4000", a);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_str_eq(r.err, "");
    char head[600];
    snprintf(head, sizeof head, "%s: 2 steps, 11 ops on 2 threads, 16.000 ms in ops", a);
    has_line(r.out, head);
    /* by total: the linear holds its matmul */
    const char *total = strstr(r.out, "top ops by total time\n");
    const char *self = strstr(r.out, "top ops by self time\n");
    ck_assert_ptr_nonnull(total);
    ck_assert_ptr_nonnull(self);
    const char *want_total =
        "top ops by total time\n"
        "  total ms    self ms  count    mean ms   share  name\n"
        "     7.000      7.000      2      3.500   43.8%  fc1/linear_bwd\n"
        "     4.000      0.500      2      2.000   25.0%  fc1/linear\n"
        "     3.500      3.500      2      1.750   21.9%  fc1/matmul\n"
        "     2.000      2.000      2      1.000   12.5%  sgd\n"
        "     1.500      1.500      1      1.500    9.4%  loader/decode\n"
        "     1.500      1.500      2      0.750    9.4%  relu\n";
    ck_assert_msg(!strncmp(total, want_total, strlen(want_total)), "by total:\n%s", total);
    const char *want_self =
        "top ops by self time\n"
        "  total ms    self ms  count    mean ms   share  name\n"
        "     7.000      7.000      2      3.500   43.8%  fc1/linear_bwd\n"
        "     3.500      3.500      2      1.750   21.9%  fc1/matmul\n"
        "     2.000      2.000      2      1.000   12.5%  sgd\n"
        "     1.500      1.500      1      1.500    9.4%  loader/decode\n"
        "     1.500      1.500      2      0.750    9.4%  relu\n"
        "     4.000      0.500      2      2.000    3.1%  fc1/linear\n";
    ck_assert_msg(!strncmp(self, want_self, strlen(want_self)), "by self:\n%s", self);
    has_line(r.out, "    11.000      7.500      4      2.750   46.9%  linear");
    has_line(r.out, "     1.500      1.500      1      1.500    9.4%  -");
    has_line(r.out, "     9.000      5.500      6      1.500   34.4%  forward");
    /* the breakdown */
    has_line(r.out, "      step       wall      data   forward  backward    update     hooks      dump     other");
    has_line(r.out, "         1     10.000     1.000     3.000     4.000     1.000     0.300     0.200     0.500");
    has_line(r.out, "         2     12.000     2.000     3.000     5.000     1.000     0.000     0.000     1.000");
    has_line(r.out, "      mean     11.000     1.500     3.000     4.500     1.000     0.150     0.100     0.750");
    /* GFLOP/s: 16e9 in 7 ms, 8e9 in 4 ms, 6e9 in 3.5 ms; against 4000; GB/s: 14e9 bytes in 7 ms */
    has_line(r.out, "ops with FLOPs (args.flops), against a peak of 4000.0 GFLOP/s");
    const char *fl = strstr(r.out, "     GFLOP    time ms    GFLOP/s       GB/s  of peak  name\n");
    ck_assert_ptr_nonnull(fl);
    ck_assert_str_eq(fl, "     GFLOP    time ms    GFLOP/s       GB/s  of peak  name\n"
                         "    16.000      7.000    2285.71    2000.00    57.1%  fc1/linear_bwd\n"
                         "     8.000      4.000    2000.00          -    50.0%  fc1/linear\n"
                         "     6.000      3.500    1714.29          -    42.9%  fc1/matmul\n");
    tu_result_free(&r);
}
END_TEST

START_TEST(test_tables_json_and_top)
{
    char a[512];
    trace_a(a, sizeof a);
    tu_result r = RUN(a, "--json", "--top", "2");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    json_t *j = parse_out(&r);
    EQ(j, "op_ms", 16);
    EQ(j, "steps", 2);
    EQ(j, "threads", 2);
    ck_assert(json_is_null(json_object_get(j, "peak_gflops")));
    ck_assert_uint_eq(json_array_size(json_object_get(j, "top_total")), 2);
    json_t *x = row(j, "top_total", 1, "fc1/linear");
    EQ(x, "total_ms", 4);
    EQ(x, "self_ms", 0.5);
    EQ(x, "count", 2);
    EQ(x, "mean_ms", 2);
    EQ(x, "share", 25);
    x = row(j, "top_self", 0, "fc1/linear_bwd");
    EQ(x, "share", 43.75);
    row(j, "top_self", 1, "fc1/matmul");
    x = row(j, "by_type", 0, "linear");
    EQ(x, "self_ms", 7.5);
    EQ(x, "count", 4);
    x = row(j, "by_phase", 1, "forward");   /* backward's 7 ms comes first */
    EQ(x, "self_ms", 5.5);
    EQ(x, "total_ms", 9);
    json_t *steps = json_object_get(j, "step_breakdown");
    ck_assert_uint_eq(json_array_size(steps), 2);
    json_t *s1 = json_array_get(steps, 0);
    EQ(s1, "hooks", 0.3);
    EQ(s1, "dump", 0.2);
    json_t *s2 = json_array_get(steps, 1);
    EQ(s2, "step", 2);
    EQ(s2, "wall_ms", 12);
    EQ(s2, "data", 2);   /* 1.5 before the step, 0.5 inside forward */
    EQ(s2, "forward", 3);
    EQ(s2, "update", 1);
    EQ(s2, "hooks", 0);
    EQ(s2, "other", 1);
    x = row(j, "flops", 0, "fc1/linear_bwd");
    EQ(x, "gbps", 2000);
    x = row(j, "flops", 1, "fc1/linear");
    ck_assert(json_is_null(json_object_get(x, "gbps")));
    EQ(x, "gflops", 2000);
    EQ(x, "gflop", 8);
    ck_assert(json_is_null(json_object_get(x, "of_peak")));
    json_decref(j);
    tu_result_free(&r);

    /* no peak: the text says so */
    r = RUN(a);
    ck_assert_int_eq(r.rc, 0);
    has_line(r.out, "ops with FLOPs (args.flops); no --peak-gflops given: no fraction of peak");
    has_line(r.out, "    16.000      7.000    2285.71    2000.00        -  fc1/linear_bwd");
    tu_result_free(&r);
    /* --top 1 cuts every table and says how many rows are left */
    r = RUN("--top", "1", a);
    ck_assert_int_eq(r.rc, 0);
    has_line(r.out, "  (5 more)");
    ck_assert_ptr_null(strstr(r.out, "  relu\n"));
    tu_result_free(&r);
}
END_TEST

START_TEST(test_no_steps_no_flops)
{
    char p[512];
    write_trace(p, sizeof p, "bare.json",
                "{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"add\",\"ts\":5,\"dur\":250,\"pid\":3,\"tid\":9}]}");
    tu_result r = RUN(p);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    has_line(r.out, "step-time breakdown: no step events");
    has_line(r.out, "  (none)");
    has_line(r.out, "     0.250      0.250      1      0.250  100.0%  add");
    tu_result_free(&r);
}
END_TEST

/* ---- diff ------------------------------------------------------------------ */

START_TEST(test_diff_text)
{
    char a[512], b[512];
    trace_a(a, sizeof a);
    trace_b(b, sizeof b);
    tu_result r = RUN("diff", a, b);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    const char *ops = strstr(r.out, "by op\n");
    ck_assert_ptr_nonnull(ops);
    const char *want =
        "by op\n"
        "      A ms       B ms  change ms  change %  name\n"
        "     0.000      1.500     +1.500    only B  gelu\n"
        "     1.750      2.750     +1.000    +57.1%  fc1/matmul\n"
        "     1.000      0.000     -1.000    only A  sgd\n"
        "     0.750      0.000     -0.750    only A  loader/decode\n"
        "     3.500      3.000     -0.500    -14.3%  fc1/linear_bwd\n"
        "     0.250      0.250     +0.000     +0.0%  fc1/linear\n"
        "     0.750      0.750     +0.000     +0.0%  relu\n"
        "\nby op type\n"
        "      A ms       B ms  change ms  change %  name\n"
        "     0.000      1.500     +1.500    only B  gelu\n"
        "     1.750      2.750     +1.000    +57.1%  matmul\n"
        "     1.000      0.000     -1.000    only A  sgd\n"
        "     0.750      0.000     -0.750    only A  -\n"
        "     3.750      3.250     -0.500    -13.3%  linear\n"
        "     0.750      0.750     +0.000     +0.0%  relu\n"
        "\n     8.000      8.250     +0.250     +3.1%  total\n";
    ck_assert_str_eq(ops, want);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_diff_json)
{
    char a[512], b[512];
    trace_a(a, sizeof a);
    trace_b(b, sizeof b);
    tu_result r = RUN("diff", "--json", "--top", "3", a, b);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    json_t *j = parse_out(&r);
    EQ(j, "a_steps", 2);
    EQ(j, "b_steps", 1);
    ck_assert_uint_eq(json_array_size(json_object_get(j, "ops")), 3);
    json_t *x = row(j, "ops", 0, "gelu");
    ck_assert_str_eq(json_string_value(json_object_get(x, "only")), "B");
    ck_assert(json_is_null(json_object_get(x, "change_pct")));
    x = row(j, "ops", 1, "fc1/matmul");
    EQ(x, "a_ms", 1.75);
    EQ(x, "change_ms", 1);
    EQ(x, "change_pct", 100.0 / 1.75);
    ck_assert(json_is_null(json_object_get(x, "only")));
    x = row(j, "ops", 2, "sgd");
    ck_assert_str_eq(json_string_value(json_object_get(x, "only")), "A");
    x = json_object_get(j, "total");
    EQ(x, "change_pct", 3.125);
    json_decref(j);
    tu_result_free(&r);
    /* a trace against itself: no change anywhere */
    r = RUN("diff", a, a);
    ck_assert_int_eq(r.rc, 0);
    has_line(r.out, "     8.000      8.000     +0.000     +0.0%  total");
    tu_result_free(&r);
}
END_TEST

/* ---- damaged and hostile traces, and usage ---------------------------------- */

/* Runs tdbg-prof on a file holding text; expects status 2, nothing on
 * stdout and "tdbg-prof: FILE: " + why on stderr (why_prefix: only its start). */
static void refused(const char *text, const char *why, bool why_prefix)
{
    char p[512], want[1024];
    write_trace(p, sizeof p, "bad.json", text);
    tu_result r = RUN(p);
    ck_assert_msg(r.rc == 2, "rc %d on %s", r.rc, text);
    ck_assert_str_eq(r.out, "");
    snprintf(want, sizeof want, "tdbg-prof: %s: %s%s", p, why, why_prefix ? "" : "\n");
    if (why_prefix)
        ck_assert_msg(!strncmp(r.err, want, strlen(want)), "got \"%s\", want \"%s...\"", r.err, want);
    else
        ck_assert_str_eq(r.err, want);
    tu_result_free(&r);
}

#define OP_FIELDS "\"ph\":\"X\",\"cat\":\"op\",\"name\":\"a\",\"pid\":1,\"tid\":1"
#define T1(ev) "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"thread_name\"}," ev "]}"

START_TEST(test_damaged)
{
    refused("not json {", "not JSON: ", true);
    refused("", "not JSON: ", true);
    refused("[]", "not a trace: no \"traceEvents\" array at the top level", false);
    refused("{\"traceEvents\":{}}", "not a trace: no \"traceEvents\" array at the top level", false);
    refused("{\"traceEvents\":[], \"traceEvents\":[]}", "not JSON: duplicate object key", true);
    refused(T1("1"), "event 1: not an object", false);
    refused(T1("{\"name\":\"a\"}"), "event 1: \"ph\" is missing", false);
    refused(T1("{\"ph\":7}"), "event 1: \"ph\" is not a string", false);
    refused(T1("{\"ph\":\"X\",\"name\":\"a\",\"ts\":0,\"dur\":1}"), "event 1: \"cat\" is missing", false);
    refused(T1("{\"ph\":\"X\",\"cat\":[],\"name\":\"a\"}"), "event 1: \"cat\" is not a string", false);
    refused(T1("{" OP_FIELDS ",\"ts\":0}"), "event 1: \"dur\" is missing", false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":\"5\"}"), "event 1: \"dur\" is not a number", false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":-5}"), "event 1: \"dur\" is negative (-5)", false);
    refused(T1("{" OP_FIELDS ",\"ts\":-0.5,\"dur\":5}"), "event 1: \"ts\" is negative (-0.5)", false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":1e300}"), "event 1: \"dur\" is too large (1e+300 us)", false);
    refused(T1("{" OP_FIELDS ",\"ts\":9e14,\"dur\":9e14}"), "event 1: ends too late (ts + dur = 1.8e+15 us)", false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":100000000000000000000000000000}"), "not JSON: too big integer",
            true);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":1e999}"), "not JSON: real number overflow", true);
    refused(T1("{\"ph\":\"X\",\"cat\":\"op\",\"ts\":0,\"dur\":1,\"pid\":1,\"tid\":1}"), "event 1: \"name\" is missing",
            false);
    refused(T1("{\"ph\":\"X\",\"cat\":\"op\",\"name\":5,\"ts\":0,\"dur\":1,\"pid\":1,\"tid\":1}"),
            "event 1: \"name\" is not a string", false);
    refused(T1("{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"a\",\"ts\":0,\"dur\":1,\"pid\":1}"),
            "event 1: \"tid\" is missing", false);
    refused(T1("{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"a\",\"ts\":0,\"dur\":1,\"pid\":1,\"tid\":\"t\"}"),
            "event 1: \"tid\" is not an integer", false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":1,\"args\":[]}"), "event 1: \"args\" is not an object", false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":1,\"args\":{\"step\":1.5}}"),
            "event 1: \"args.step\" is not an integer", false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":1,\"args\":{\"step\":-1}}"), "event 1: \"args.step\" is negative (-1)",
            false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":1,\"args\":{\"type\":3}}"), "event 1: \"args.type\" is not a string",
            false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":1,\"args\":{\"phase\":null}}"),
            "event 1: \"args.phase\" is not a string", false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":1,\"args\":{\"flops\":\"many\"}}"),
            "event 1: \"args.flops\" is not a number", false);
    refused(T1("{" OP_FIELDS ",\"ts\":0,\"dur\":1,\"args\":{\"flops\":-1}}"),
            "event 1: \"args.flops\" is out of range (-1)", false);
    refused(T1("{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"s\",\"ts\":0,\"dur\":1,\"pid\":1,\"tid\":1}"),
            "event 1: a step event needs \"args.step\"", false);
    refused(T1("{\"ph\":\"X\",\"cat\":\"phase\",\"name\":\"forward\",\"ts\":0,\"dur\":1,\"pid\":1,\"tid\":1,\"args\":{}}"),
            "event 1: a phase event needs \"args.step\"", false);
#define PHASE_FIELDS "\"ph\":\"X\",\"cat\":\"phase\",\"name\":\"forward\",\"ts\":0,\"dur\":1,\"pid\":1,\"tid\":1"
    refused(T1("{" PHASE_FIELDS ",\"args\":{\"step\":0,\"hooks_ns\":\"x\"}}"),
            "event 1: \"args.hooks_ns\" is not a number", false);
    refused(T1("{" PHASE_FIELDS ",\"args\":{\"step\":0,\"data_ns\":-3}}"),
            "event 1: \"args.data_ns\" is out of range (-3)", false);
    refused(T1("{" PHASE_FIELDS ",\"args\":{\"step\":0,\"hooks_ns\":600,\"data_ns\":500}}"),
            "event 1: \"args.hooks_ns\" + \"args.data_ns\" (1.1 us) exceed the phase's dur (1 us)", false);
    /* two ops of one thread that overlap without nesting */
    refused("{\"traceEvents\":[{" OP_FIELDS ",\"ts\":0,\"dur\":10},"
            "{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"b\",\"pid\":1,\"tid\":1,\"ts\":5,\"dur\":10}]}",
            "event 1: op \"b\" overlaps op \"a\" (event 0) on thread 1 without nesting in it", false);
    /* the same on two threads is fine: checked by the run below not failing */
    char p[512];
    write_trace(p, sizeof p, "threads.json",
                "{\"traceEvents\":[{" OP_FIELDS ",\"ts\":0,\"dur\":10},"
                "{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"b\",\"pid\":1,\"tid\":2,\"ts\":5,\"dur\":10}]}");
    tu_result r = RUN(p);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    tu_result_free(&r);
    refused("{\"traceEvents\":["
            "{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"s\",\"ts\":0,\"dur\":1,\"pid\":1,\"tid\":1,\"args\":{\"step\":1}},"
            "{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"s\",\"ts\":5,\"dur\":1,\"pid\":1,\"tid\":1,\"args\":{\"step\":1}}]}",
            "event 1: step 1 appears twice (event 0)", false);
}
END_TEST

START_TEST(test_hostile)
{
    /* deep nesting: jansson's depth limit, not the stack */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 1);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[2 * depth] = '\0';
    refused(deep, "not JSON: maximum parsing depth reached", true);
    free(deep);
    /* an embedded NUL */
    refused("{\"traceEvents\":[{\"ph\":\"X\\u0000\"}]}", "not JSON: ", true);
    /* a missing file, a directory */
    char p[512];
    tu_scratch_sub(suite_dir, p, sizeof p);
    strcat(p, "/none.json");
    tu_result r = RUN(p);
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.err, "none.json: unable to open") && strstr(r.err, "No such file or directory"),
                  "%s", r.err);
    tu_result_free(&r);
    /* the second file of diff damaged: named, and nothing printed */
    char a[512], bad[512];
    trace_a(a, sizeof a);
    write_trace(bad, sizeof bad, "bad.json", T1("{" OP_FIELDS ",\"ts\":0,\"dur\":-1}"));
    r = RUN("diff", a, bad);
    ck_assert_int_eq(r.rc, 2);
    ck_assert_str_eq(r.out, "");
    char want[1100];
    snprintf(want, sizeof want, "tdbg-prof: %s: event 1: \"dur\" is negative (-1)\n", bad);
    ck_assert_str_eq(r.err, want);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_usage)
{
    static const struct { const char *args[5]; const char *why; } cases[] = {
        { { NULL }, "tdbg-prof: no trace file given\n" },
        { { "--top", "x", "f" }, "tdbg-prof: --top wants a count (0 or more): x\n" },
        { { "--top" }, "tdbg-prof: missing value after: --top\n" },
        { { "--peak-gflops", "-3", "f" }, "tdbg-prof: --peak-gflops wants a positive number: -3\n" },
        { { "--peak-gflops", "nan", "f" }, "tdbg-prof: --peak-gflops wants a positive number: nan\n" },
        { { "--bogus", "f" }, "tdbg-prof: unknown option: --bogus\n" },
        { { "a", "b" }, "tdbg-prof: one trace file, or diff A B\n" },
        { { "diff", "a" }, "tdbg-prof: diff wants two trace files\n" },
        { { "diff", "a", "b", "c" }, "tdbg-prof: too many files: c\n" },
        { { "diff", "--peak-gflops", "5", "a" }, "tdbg-prof: --peak-gflops is for the report, not diff\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tu_result r = tu_run_tool(tdbg_prof_main, "tdbg-prof", cases[i].args);
        ck_assert_msg(r.rc == 2, "case %zu: rc %d", i, r.rc);
        ck_assert_msg(!strncmp(r.err, cases[i].why, strlen(cases[i].why)), "case %zu: %s", i, r.err);
        ck_assert_msg(strstr(r.err, "usage: tdbg-prof"), "case %zu: no usage", i);
        tu_result_free(&r);
    }
    tu_result r = RUN("--help");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: tdbg-prof"));
    tu_result_free(&r);
}
END_TEST

/* ---- end to end: the engine's capture, read by the tool -------------------- */

/* The debugger's stand-in: a hook that spends about 20 us after every op. */
static void slow_hook(const te_op_record *rec, void *user)
{
    (void)rec;
    (void)user;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 20000);
}

/* Trains a two-layer MLP (x [8,16] "mm/matmul" w1 [16,32], relu, "out/linear"
 * to 4 classes) for 4 steps from a loader with the profiler on, and saves
 * the capture to path. */
static void capture(const char *path)
{
    te_dataset *d = te_dataset_blobs(64, 16, 4, 7);
    te_loader *l = te_loader_new(d, &(te_loader_opts){ .batch = 8, .workers = 1 });
    ck_assert_ptr_nonnull(l);
    te_tensor *w1 = te_param_new("w1", TE_F32, te_shape(16, 32));
    te_tensor *w2 = te_param_new("w2", TE_F32, te_shape(4, 32));
    te_init_linear(w1, NULL);
    te_init_linear(w2, NULL);
    te_optim *opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.1f });
    int hook = te_hook_add(&(te_hooks){ .op_end = slow_hook }, NULL);
    ck_assert_int_ge(hook, 0);
    te_profile_opts o;
    ck_assert_int_eq(te_profile_parse("keep=10", &o), TE_OK);
    ck_assert_int_eq(te_profile_start(&o), TE_OK);
    for (int s = 0; s < 4; s++) {
        te_tensor *x, *y;
        ck_assert_int_eq(te_loader_next(l, &x, &y), TE_OK);
        tu_mlp2_step(x, y, w1, w2, opt);
    }
    ck_assert_int_eq(te_profile_save(path), TE_OK);
    ck_assert_int_eq(te_profile_stop(), TE_OK);
    te_hook_remove(hook);
    te_optim_free(opt);
    te_loader_free(l);
    te_dataset_free(d);
}

START_TEST(test_end_to_end)
{
    char dir[256], a[300], b[300];
    tu_scratch_sub(suite_dir, dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    capture(a);
    tu_result r = RUN("--json", "--top", "0", a);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    json_t *j = parse_out(&r);
    EQ(j, "steps", 4);
    EQ(j, "ops", 4 * 10);   /* matmul, relu, linear, cross entropy, their 4 grads, 2 updates */
    json_t *steps = json_object_get(j, "step_breakdown");
    ck_assert_uint_eq(json_array_size(steps), 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *s = json_array_get(steps, i);
        double wall = num(s, "wall_ms"), known = 0;
        for (int c = 0; c < PROF_OTHER; c++)
            known += num(s, prof_class_names[c]);
        /* The columns the phases fill tile the step: other is what is left, small and never negative. */
        ck_assert_msg(known >= 0.9 * wall && known <= wall * (1 + 1e-9), "step %zu: columns %.6f of %.6f ms", i,
                      known, wall);
        ck_assert_double_ge(num(s, "other"), -1e-6);
        ck_assert_msg(num(s, "hooks") > 0.02 * 10 * 0.5, "step %zu: hooks %.6f ms for 10 ops of 20 us", i,
                      num(s, "hooks"));
        ck_assert_double_gt(num(s, "forward"), 0);
        ck_assert_double_gt(num(s, "backward"), 0);
        ck_assert_double_gt(num(s, "update"), 0);
    }
    /* The top op by FLOPs is the matmul (forward or its weight gradient: the same 2*8*16*32 a step). */
    json_t *top = json_array_get(json_object_get(j, "flops"), 0);
    ck_assert_ptr_nonnull(top);
    const char *name = json_string_value(json_object_get(top, "name"));
    ck_assert_msg(!strcmp(name, "mm/matmul") || !strcmp(name, "grad/mm/matmul"), "top by FLOPs: %s", name);
    EQ(top, "gflop", 4 * 2.0 * 8 * 16 * 32 / 1e9);
    json_decref(j);
    tu_result_free(&r);

    tu_teardown();   /* a fresh engine: the same parameter names again */
    tu_setup();
    capture(b);
    r = RUN("diff", "--json", a, b);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    j = parse_out(&r);
    EQ(j, "a_steps", 4);
    EQ(j, "b_steps", 4);
    json_t *ops = json_object_get(j, "ops");
    ck_assert_uint_eq(json_array_size(ops), 10);   /* the same 10 ops on both sides */
    for (size_t i = 0; i < 10; i++)
        ck_assert(json_is_null(json_object_get(json_array_get(ops, i), "only")));
    json_decref(j);
    tu_result_free(&r);
    r = RUN("diff", a, b);
    ck_assert_msg(r.rc == 0 && strstr(r.out, "mm/matmul") && strstr(r.out, "total"), "rc %d:\n%s", r.rc, r.out);
    tu_result_free(&r);
}
END_TEST

/* Graph mode: ops name the fused kernel they ran in (args.kernel); the
 * kernels get their own table, with its ops' time, the ops run alone
 * left out; a non-string kernel is refused. */
START_TEST(test_fused_kernels)
{
    char p[512];
    static tbuf b;
    b.n = 0;
    add(&b, "{\"traceEvents\":[");
    step_ev(&b, 0, 0, 5000);
    add(&b, "{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"fc1/linear\",\"ts\":0,\"dur\":2000,\"pid\":1,\"tid\":1,"
            "\"args\":{\"kernel\":\"k3 fused-act: fc1/linear, fc1/relu\"}},");
    add(&b, "{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"fc1/relu\",\"ts\":2000,\"dur\":250,\"pid\":1,\"tid\":1,"
            "\"args\":{\"kernel\":\"k3 fused-act: fc1/linear, fc1/relu\"}},");
    op_ev(&b, "loss", "mse", "forward", 2250, 1000, 1, -1);
    close_trace(&b);
    write_trace(p, sizeof p, "fused.json", b.s);
    tu_result r = RUN(p);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    const char *t = strstr(r.out, "fused kernels (graph mode; each names the ops it stands for)\n");
    ck_assert_msg(t != NULL, "%s", r.out);
    has_line(t, "     2.250      2.250      2      1.125   69.2%  k3 fused-act: fc1/linear, fc1/relu");
    ck_assert_msg(strstr(t, "  -\n") == NULL, "the ops run alone are not a kernel:\n%s", t);
    tu_result_free(&r);
    r = RUN(p, "--json");
    json_t *j = parse_out(&r);
    json_t *x = row(j, "fused_kernels", 0, "k3 fused-act: fc1/linear, fc1/relu");
    EQ(x, "total_ms", 2.25);
    EQ(x, "count", 2);
    ck_assert_uint_eq(json_array_size(json_object_get(j, "fused_kernels")), 1);
    json_decref(j);
    tu_result_free(&r);
    /* trace A has no kernel: no such table */
    trace_a(p, sizeof p);
    r = RUN(p);
    ck_assert(strstr(r.out, "fused kernels") == NULL);
    tu_result_free(&r);
    b.n = 0;
    add(&b, "{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"a\",\"ts\":0,\"dur\":1,\"pid\":1,\"tid\":1,"
            "\"args\":{\"kernel\":3}}]}");
    write_trace(p, sizeof p, "badk.json", b.s);
    r = RUN(p);
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.err, "event 0: \"args.kernel\" is not a string") != NULL, "%s", r.err);
    tu_result_free(&r);
}
END_TEST

Suite *suite_tdbg_prof(void)
{
    Suite *s = suite_create("tdbg_prof");
    TCase *tc = tcase_create("prof");
    tcase_add_unchecked_fixture(tc, suite_dir_make, suite_dir_remove);
    tcase_add_test(tc, test_tables_text);
    tcase_add_test(tc, test_tables_json_and_top);
    tcase_add_test(tc, test_fused_kernels);
    tcase_add_test(tc, test_no_steps_no_flops);
    tcase_add_test(tc, test_diff_text);
    tcase_add_test(tc, test_diff_json);
    tcase_add_test(tc, test_damaged);
    tcase_add_test(tc, test_hostile);
    tcase_add_test(tc, test_usage);
    suite_add_tcase(s, tc);
    TCase *e2e = tcase_create("end to end");
    tcase_add_unchecked_fixture(e2e, suite_dir_make, suite_dir_remove);
    tcase_add_checked_fixture(e2e, tu_setup, tu_teardown);
    tcase_set_timeout(e2e, 120);
    tcase_add_test(e2e, test_end_to_end);
    suite_add_tcase(s, e2e);
    return s;
}
