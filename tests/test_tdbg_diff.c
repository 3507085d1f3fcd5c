/* test_tdbg_diff.c — `tdbg-diff` (dump/diff*.c), run in process on dumps
 * the example programs write (a run against itself, eager against graph,
 * injected faults in eager and in a fused graph kernel, outputs-only dumps)
 * and on step files written here with h5file.h, whose metrics are checked
 * against values computed independently below; then NaN on one side,
 * shapes, steps, --map, formats, damaged and foreign dumps, usage. */
#include "crcdamage.h"
#include "diff.h"
#include "h5file.h"
#include "suites.h"
#include "testutil.h"

#include <hdf5.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>


/* ---- helpers ------------------------------------------------------------ */

/* Each test works under suite_dir, which the unchecked teardown removes. */
static char suite_dir[64];

static void suite_dir_make(void) { tu_scratch_make(suite_dir, sizeof suite_dir, "tdbg-diff"); }
static void suite_dir_remove(void) { tu_scratch_remove(suite_dir); }
static char *test_dir(char *buf, size_t n) { return tu_scratch_sub(suite_dir, buf, n); }

/* Runs `tdbg-diff ARGS...` in this process. */
#define RUN(...) tu_run_tool(tdbg_diff_main, "tdbg-diff", (const char *const[]){ __VA_ARGS__, NULL })

/* What the last command run with tu_shell printed. */
static char shell_out[1 << 15];
/* Trains the example MLP (small, 3 steps, seeded) in mode with more flags,
 * dumping into dir with spec (after dir=), with an injection when inject is
 * not NULL. */
static void mlp_dump_with(const char *dir, const char *mode, const char *spec, const char *inject,
                          const char *flags)
{
    char inj[256] = "";
    if (inject)
        snprintf(inj, sizeof inj, "--inject '%s'", inject);
    int st = tu_shell(shell_out, sizeof shell_out,
                      "'%s/examples/mlp' --hidden 32,32 --batch 8 --steps 3 --train-size 64 "
                      "--threads 2 --log-every 100 --mode %s %s %s --dump 'dir=%s;%s' 2>&1",
                      TDBG_BUILDDIR, mode, flags, inj, dir, spec);
    ck_assert_msg(st == 0, "mlp: exit %d:\n%s", st, shell_out);
}

static void mlp_dump(const char *dir, const char *mode, const char *spec, const char *inject)
{
    mlp_dump_with(dir, mode, spec, inject, "");
}

/* ---- CSV: the tool's rows, by column name ----------------------------------- */

#define CSV_COLS 64

typedef struct csv {
    int ncols, nrows;
    char *head[CSV_COLS];
    char **cell;   /* nrows * ncols */
} csv;

/* One field at *p (quoted or not); advances past it and its separator. */
static char *csv_field(const char **p)
{
    const char *s = *p;
    size_t cap = strlen(s) + 1, len = 0;
    char *f = malloc(cap);
    if (*s == '"') {
        for (s++; *s && !(*s == '"' && s[1] != '"'); s++) {
            if (*s == '"')
                s++;
            f[len++] = *s;
        }
        s += *s == '"';
    } else {
        while (*s && *s != ',' && *s != '\n')
            f[len++] = *s++;
    }
    f[len] = '\0';
    if (*s == ',')
        s++;
    *p = s;
    return f;
}

static csv csv_parse(const char *text)
{
    csv t = { 0 };
    const char *p = text;
    while (*p && *p != '\n') {
        ck_assert(t.ncols < CSV_COLS);
        t.head[t.ncols++] = csv_field(&p);
    }
    p += *p == '\n';
    int cap = 0;
    while (*p) {
        if (t.nrows == cap) {
            cap = cap ? 2 * cap : 64;
            t.cell = realloc(t.cell, (size_t)cap * (size_t)t.ncols * sizeof *t.cell);
        }
        for (int c = 0; c < t.ncols; c++)
            t.cell[t.nrows * t.ncols + c] = csv_field(&p);
        ck_assert_msg(*p == '\n', "CSV row %d has more than %d fields", t.nrows, t.ncols);
        p++;
        t.nrows++;
    }
    return t;
}

static void csv_free(csv *t)
{
    for (int c = 0; c < t->ncols; c++)
        free(t->head[c]);
    for (int i = 0; i < t->nrows * t->ncols; i++)
        free(t->cell[i]);
    free(t->cell);
}

static const char *cell(const csv *t, int row, const char *col)
{
    for (int c = 0; c < t->ncols; c++)
        if (strcmp(t->head[c], col) == 0)
            return t->cell[row * t->ncols + c];
    ck_abort_msg("no CSV column '%s'", col);
    return NULL;
}

static double num(const csv *t, int row, const char *col) { return strtod(cell(t, row, col), NULL); }

/* The row of (step, op, io, slot), or -1. */
static int find_row(const csv *t, int step, const char *op, const char *io, int slot)
{
    for (int i = 0; i < t->nrows; i++)
        if (atoi(cell(t, i, "step")) == step && strcmp(cell(t, i, "op"), op) == 0 &&
            strcmp(cell(t, i, "io"), io) == 0 && atoi(cell(t, i, "slot")) == slot)
            return i;
    return -1;
}

static void assert_close(double got, double want, const char *what)
{
    double tol = 1e-9 * fmax(1.0, fabs(want));
    ck_assert_msg((isinf(want) && got == want) || fabs(got - want) <= tol,
                  "%s: %.17g, expected %.17g", what, got, want);
}

/* ---- step files written here ---------------------------------------------- */

static dump_tensor_info meta(const char *op, dump_iokind io, int slot, int exec, const char *tensor,
                             te_dtype dt, int ndim, const int64_t *shape)
{
    return tu_dump_info(op, "Test", io, slot, exec, TE_PHASE_FORWARD, tensor, dt, ndim, shape);
}

static dump_step_writer *create(const char *dir, int64_t step, int gzip)
{
    char err[512] = "";
    dump_step_writer *w = dump_step_create(dir, step, gzip, err, sizeof err);
    ck_assert_msg(w != NULL, "dump_step_create: %s", err);
    return w;
}

static void add(dump_step_writer *w, dump_tensor_info ti, const void *data)
{
    char err[512] = "";
    ck_assert_msg(dump_step_add_raw(w, &ti, data, err, sizeof err), "add %s: %s", ti.op, err);
}

static void commit(dump_step_writer *w)
{
    char err[512] = "";
    ck_assert_msg(dump_step_commit(w, err, sizeof err), "dump_step_commit: %s", err);
}

/* run.h5 with a chain of ops: op i reads "t<i-1>" and writes "t<i>"; op 0
 * reads first_inputs. */
static void write_run_chain(const char *dir, int n_ops, const char *first_inputs)
{
    char err[512] = "";
    dump_run_meta m = { .mode = TE_MODE_EAGER, .seed = 7 };
    snprintf(m.engine_version, sizeof m.engine_version, "0.1.0");
    snprintf(m.amp, sizeof m.amp, "none");
    snprintf(m.backend, sizeof m.backend, "cpu");
    snprintf(m.command_line, sizeof m.command_line, "test");
    dump_op_row ops[8];
    memset(ops, 0, sizeof ops);
    for (int i = 0; i < n_ops; i++) {
        ops[i].exec = i;
        ops[i].phase = TE_PHASE_FORWARD;
        ops[i].line = 40 + i;
        snprintf(ops[i].name, sizeof ops[i].name, "op%d", i);
        snprintf(ops[i].type, sizeof ops[i].type, "Test");
        snprintf(ops[i].file, sizeof ops[i].file, "examples/mlp.c");
        if (i)
            snprintf(ops[i].inputs, sizeof ops[i].inputs, "t%d", i - 1);
        else
            snprintf(ops[i].inputs, sizeof ops[i].inputs, "%s", first_inputs);
        snprintf(ops[i].outputs, sizeof ops[i].outputs, "t%d", i);
    }
    ck_assert_msg(dump_run_write(dir, &m, ops, n_ops, err, sizeof err), "run.h5: %s", err);
}

static void write_run_h5(const char *dir, int n_ops) { write_run_chain(dir, n_ops, "batch:x"); }

/* A deterministic pseudo-random number in [-1, 1). */
static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / (double)(1ull << 52) - 1.0);
}

/* ---- metrics, computed here the plain way ---------------------------------- */

typedef struct expect {
    double max_abs, mean_abs, max_rel, rmse, cosine, frac_fail, frac_low, frac_high;
    double min_atol, min_rtol;
    long max_abs_at, n_fail, max_ulp, nan_a, nan_b;
} expect;

/* The neighbour order of f32 bits: negative values mirrored below zero. */
static long ordered(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i < 0 ? (long)INT32_MIN - (long)i : (long)i;
}

/* Metrics of b against reference a (both as doubles; a32/b32, when given,
 * for ULP distances), with NaN equal to NaN. */
static expect expect_of(const double *a, const double *b, const float *a32, const float *b32,
                        long n, double atol, double rtol)
{
    expect e = { .max_abs_at = -1, .max_ulp = 0 };
    double dot = 0, na = 0, nb = 0, sum = 0, sq = 0;
    long finite = 0, fail = 0, low = 0, high = 0;
    for (long i = 0; i < n; i++) {
        e.nan_a += isnan(a[i]);
        e.nan_b += isnan(b[i]);
        if (isnan(a[i]) || isnan(b[i])) {
            if (!(isnan(a[i]) && isnan(b[i]))) {
                fail++, low++, high++;
                e.min_atol = e.min_rtol = INFINITY;
            }
            continue;
        }
        double d = fabs(b[i] - a[i]), rel = d / fmax(fabs(a[i]), 1e-12);
        finite++;
        sum += d;
        sq += d * d;
        dot += a[i] * b[i];
        na += a[i] * a[i];
        nb += b[i] * b[i];
        if (d > e.max_abs || e.max_abs_at < 0) {
            e.max_abs = d;
            e.max_abs_at = i;
        }
        e.max_rel = fmax(e.max_rel, rel);
        low += rel > 1e-3;
        high += rel > 5e-3;
        fail += d > atol + rtol * fabs(a[i]);
        e.min_atol = fmax(e.min_atol, d - rtol * fabs(a[i]));
        if (d > atol)
            e.min_rtol = fmax(e.min_rtol, a[i] != 0 ? (d - atol) / fabs(a[i]) : INFINITY);
        if (a32) {
            long u = labs(ordered(a32[i]) - ordered(b32[i]));
            e.max_ulp = u > e.max_ulp ? u : e.max_ulp;
        }
    }
    e.mean_abs = sum / (double)finite;
    e.rmse = sqrt(sq / (double)finite);
    e.cosine = dot / (sqrt(na) * sqrt(nb));
    e.n_fail = fail;
    e.frac_fail = (double)fail / (double)n;
    e.frac_low = (double)low / (double)n;
    e.frac_high = (double)high / (double)n;
    return e;
}

static void assert_metrics(const csv *t, int row, const expect *e, const char *index)
{
    assert_close(num(t, row, "max_abs"), e->max_abs, "max_abs");
    assert_close(num(t, row, "mean_abs"), e->mean_abs, "mean_abs");
    assert_close(num(t, row, "max_rel"), e->max_rel, "max_rel");
    assert_close(num(t, row, "rmse"), e->rmse, "rmse");
    assert_close(num(t, row, "cosine"), e->cosine, "cosine");
    assert_close(num(t, row, "frac_fail"), e->frac_fail, "frac_fail");
    assert_close(num(t, row, "frac_rel_1e-3"), e->frac_low, "frac_rel_1e-3");
    assert_close(num(t, row, "frac_rel_5e-3"), e->frac_high, "frac_rel_5e-3");
    assert_close(num(t, row, "min_atol"), e->min_atol, "min_atol");
    assert_close(num(t, row, "min_rtol"), e->min_rtol, "min_rtol");
    ck_assert_int_eq(atol(cell(t, row, "n_fail")), e->n_fail);
    ck_assert_int_eq(atol(cell(t, row, "nan_a")), e->nan_a);
    ck_assert_int_eq(atol(cell(t, row, "nan_b")), e->nan_b);
    if (index)
        ck_assert_str_eq(cell(t, row, "max_abs_index"), index);
}

/* ---- whole runs ------------------------------------------------------------- */

START_TEST(test_run_against_itself)
{
    char a[160], dir[128];
    snprintf(a, sizeof a, "%s/a", test_dir(dir, sizeof dir));
    mlp_dump(a, "eager", "io=both", NULL);
    tu_result r = RUN(a, a);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(!strstr(r.out, "DIVERGES") && !strstr(r.out, "inherited  "), "%s", r.out);
    ck_assert_msg(strstr(r.out, "\n0     fc1/linear          out0  ") &&
                  strstr(r.out, " tensors compared in 3 steps: 0 diverge here, 0 inherited, "),
                  "%s", r.out);
    ck_assert_str_eq(r.err, "");
    tu_result_free(&r);
}
END_TEST

/* tdbg-diff a b: exit 0, over 100 rows, every one compared and same. */
static void all_same(const char *a, const char *b, const char *what)
{
    tu_result r = RUN(a, b, "--format", "csv");
    ck_assert_msg(r.rc == 0, "%s: rc %d: %s", what, r.rc, r.err);
    csv t = csv_parse(r.out);
    ck_assert_int_gt(t.nrows, 100);
    for (int i = 0; i < t.nrows; i++)
        ck_assert_msg(strcmp(cell(&t, i, "status"), "compared") == 0 &&
                      strcmp(cell(&t, i, "verdict"), "same") == 0,
                      "%s, row %d: %s %s %s", what, i, cell(&t, i, "op"), cell(&t, i, "status"),
                      cell(&t, i, "verdict"));
    csv_free(&t);
    tu_result_free(&r);
}

START_TEST(test_eager_vs_graph)
{
    char a[160], b[160], dir[128];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/eager", dir);
    snprintf(b, sizeof b, "%s/graph", dir);
    mlp_dump(a, "eager", "io=both", NULL);
    mlp_dump(b, "graph", "io=both", NULL);
    all_same(a, b, "eager against graph");
    tu_result r = RUN(b, a, "--format", "csv"); /* graph as the reference: its kernels are named */
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    csv t = csv_parse(r.out);
    int k = find_row(&t, 2, "grad/fc1/linear", "out", 1);
    ck_assert_msg(k >= 0 && strstr(cell(&t, k, "kernel"), " bwd"), "kernel '%s'",
                  k >= 0 ? cell(&t, k, "kernel") : "(no row)");
    csv_free(&t);
    tu_result_free(&r);
}
END_TEST

/* The rows of an injected run against a clean one: the first divergent
 * tensor is op's output slot 0 at step, diverging there; every other
 * divergence is inherited, and so are the named later rows. */
static void assert_injected(const csv *t, int step, const char *op, const char *const *later)
{
    int first = -1;
    for (int i = 0; i < t->nrows; i++) {
        const char *v = cell(t, i, "verdict");
        if (strcmp(cell(t, i, "first"), "1") == 0) {
            ck_assert_msg(first < 0, "two first divergences");
            first = i;
            continue;
        }
        ck_assert_msg(strcmp(v, "diverges here") != 0, "step %s %s %s%s also diverges here",
                      cell(t, i, "step"), cell(t, i, "op"), cell(t, i, "io"), cell(t, i, "slot"));
        if (first < 0)
            ck_assert_msg(strcmp(v, "same") == 0, "step %s %s %s%s is '%s' before the fault",
                          cell(t, i, "step"), cell(t, i, "op"), cell(t, i, "io"),
                          cell(t, i, "slot"), v);
    }
    ck_assert_msg(first >= 0, "no first divergence");
    ck_assert_int_eq(atoi(cell(t, first, "step")), step);
    ck_assert_str_eq(cell(t, first, "op"), op);
    ck_assert_str_eq(cell(t, first, "io"), "out");
    ck_assert_str_eq(cell(t, first, "slot"), "0");
    ck_assert_str_eq(cell(t, first, "verdict"), "diverges here");
    for (int k = 0; later[k]; k += 4) {
        int i = find_row(t, atoi(later[k]), later[k + 1], later[k + 2], atoi(later[k + 3]));
        ck_assert_msg(i >= 0, "no row step %s %s %s%s", later[k], later[k + 1], later[k + 2],
                      later[k + 3]);
        ck_assert_msg(strcmp(cell(t, i, "verdict"), "inherited") == 0,
                      "step %s %s %s%s: '%s', expected inherited", later[k], later[k + 1],
                      later[k + 2], later[k + 3], cell(t, i, "verdict"));
    }
}

/* Dumps the MLP (mode, spec, more flags) clean into a and with inject into
 * b, both in a fresh directory (a and b get PATH_MAX_TEST bytes), and gives
 * tdbg-diff a b's CSV rows; the tool must report a difference. */
#define PATH_MAX_TEST 160
static csv diff_injected(char *a, char *b, const char *mode, const char *spec, const char *flags,
                         const char *inject)
{
    char dir[128];
    test_dir(dir, sizeof dir);
    snprintf(a, PATH_MAX_TEST, "%s/clean", dir);
    snprintf(b, PATH_MAX_TEST, "%s/injected", dir);
    mlp_dump_with(a, mode, spec, NULL, flags);
    mlp_dump_with(b, mode, spec, inject, flags);
    tu_result r = RUN(a, b, "--format", "csv");
    ck_assert_msg(r.rc == 1, "rc %d: %s", r.rc, r.err);
    csv t = csv_parse(r.out);
    tu_result_free(&r);
    return t;
}

/* The CNN on the reference kernels (im2col + OpenBLAS's sgemm) against
 * the same run on oneDNN (issue 22), eager and graph mode: every tensor
 * of every op is `same` within f32 tolerance, and the exit status 0. */
START_TEST(test_reference_kernels_vs_onednn)
{
    char dir[128], d[3][160];
    static const char *const how[3][2] = { { "TDBG_CPU_CONV=ref TDBG_CPU_GEMM=openblas", "eager" },
                                           { "", "eager" },
                                           { "", "graph" } };
    test_dir(dir, sizeof dir);
    for (int i = 0; i < 3; i++) {
        snprintf(d[i], sizeof d[i], "%s/kernels%d", dir, i);
        int st = tu_shell(shell_out, sizeof shell_out,
                          "%s '%s/examples/cnn' --channels 4,8,8 --batch 8 --steps 3 --train-size 64 "
                          "--threads 2 --log-every 100 --mode %s --dump 'dir=%s;io=both' 2>&1",
                          how[i][0], TDBG_BUILDDIR, how[i][1], d[i]);
        ck_assert_msg(st == 0, "cnn: exit %d:\n%s", st, shell_out);
    }
    all_same(d[0], d[1], "the reference kernels against oneDNN, eager");
    all_same(d[0], d[2], "the reference kernels against oneDNN, graph");
}
END_TEST

START_TEST(test_injected_noise)
{
    char a[PATH_MAX_TEST], b[PATH_MAX_TEST];
    csv t = diff_injected(a, b, "eager", "io=both", "", "noise@op=fc2/relu,step=1");
    static const char *const later[] = {
        "1", "fc3/linear", "in", "0",  "1", "fc3/linear", "out", "0",
        "1", "grad/cross_entropy", "out", "0",  "1", "grad/fc2/relu", "out", "0",
        "1", "grad/fc2/linear", "out", "1",  "1", "grad/fc1/linear", "out", "1",
        "1", "update/fc1.weight", "in", "0",  "1", "update/fc1.weight", "out", "0",
        "2", "fc1/linear", "in", "1",  "2", "fc1/linear", "out", "0",
        "2", "grad/fc1/linear", "out", "1",  "2", "update/fc2.weight", "out", "0", NULL
    };
    assert_injected(&t, 1, "fc2/relu", later);
    csv_free(&t);

    /* The table and the summary name it with its source line. */
    tu_result r = RUN(a, b);
    ck_assert_int_eq(r.rc, 1);
    ck_assert_msg(strstr(r.out, "\n1     fc2/relu            out0  ") &&
                  strstr(r.out, "DIVERGES HERE  first divergence; ") &&
                  strstr(r.out, "root cause (its inputs agree, its outputs differ):\n"
                                "  step 1  fc2/relu (Relu, forward)  at ") &&
                  strstr(r.out, "examples/mlp.c:") &&
                  strstr(r.out, "first divergence: step 1, fc2/relu (Relu) out0 fc2/relu:out0\n"),
                  "%s", r.out);
    tu_result_free(&r);

    /* --first stops there; --summary and -q print less, with the same status. */
    r = RUN(a, b, "--first");
    ck_assert_int_eq(r.rc, 1);
    const char *last = strstr(r.out, "\n1     fc2/relu            out0");
    ck_assert_msg(last && strstr(last, "\n\nroot cause") == strchr(last + 1, '\n') &&
                  strstr(r.out, "(stopped there: --first)"), "%s", r.out);
    tu_result_free(&r);
    r = RUN(a, b, "--summary");
    ck_assert_int_eq(r.rc, 1);
    ck_assert_msg(strncmp(r.out, "root cause (", 12) == 0 && !strstr(r.out, "\n0     "), "%s",
                  r.out);
    tu_result_free(&r);
    r = RUN("-q", a, b);
    ck_assert_int_eq(r.rc, 1);
    ck_assert_str_eq(r.out, "");
    ck_assert_str_eq(r.err, "");
    tu_result_free(&r);
}
END_TEST

START_TEST(test_injected_backward_scale)
{
    /* A backward op scaled: it diverges; what reads its output inherits. */
    char a[PATH_MAX_TEST], b[PATH_MAX_TEST];
    csv t = diff_injected(a, b, "eager", "io=both", "", "scale@op=grad/fc2/linear,step=1");
    static const char *const later[] = {
        "1", "grad/fc1/relu", "in", "0",  "1", "grad/fc1/relu", "out", "0",
        "1", "grad/fc1/linear", "out", "1",  "1", "update/fc1.bias", "out", "0",
        "2", "fc1/linear", "out", "0",  "2", "cross_entropy", "out", "0", NULL
    };
    assert_injected(&t, 1, "grad/fc2/linear", later);
    csv_free(&t);
}
END_TEST

START_TEST(test_injected_accumulation)
{
    /* Two micro-batches a step: the second adds its gradients to those of
     * the first, which the noise reached; so its gradients inherit. */
    char a[PATH_MAX_TEST], b[PATH_MAX_TEST];
    csv t = diff_injected(a, b, "eager", "io=both", "--accum 2", "noise@op=fc1/relu,step=0");
    static const char *const later[] = {
        "0", "grad/fc2/linear_1", "out", "1",  "0", "grad/fc1/linear_1", "out", "1",
        "0", "update/fc2.weight", "in", "0",  "1", "fc1/linear_1", "out", "0", NULL
    };
    assert_injected(&t, 0, "fc1/relu", later);
    ck_assert_str_eq(cell(&t, find_row(&t, 0, "fc1/relu_1", "out", 0), "verdict"), "same");
    csv_free(&t);
}
END_TEST

START_TEST(test_injected_outputs_only)
{
    /* Without the inputs in the dump, the op graph of run.h5 says who read
     * what, through the parameters into the next steps. */
    char a[PATH_MAX_TEST], b[PATH_MAX_TEST];
    csv t = diff_injected(a, b, "eager", "io=outputs", "", "noise@op=fc1/relu,step=1");
    static const char *const later[] = {
        "1", "fc2/linear", "out", "0",  "1", "grad/cross_entropy", "out", "0",
        "1", "grad/fc1/relu", "out", "0",  "1", "grad/fc1/linear", "out", "1",
        "1", "update/fc1.weight", "out", "0",  "2", "fc1/linear", "out", "0",
        "2", "fc1/relu", "out", "0",  "2", "update/fc3.weight", "out", "0", NULL
    };
    assert_injected(&t, 1, "fc1/relu", later);
    csv_free(&t);
}
END_TEST

START_TEST(test_injected_fused_kernel)
{
    /* Graph mode fuses fc1/linear and fc1/relu into one kernel when the
     * linear's output is not dumped; noise on fc1/relu's output inside it. */
    char a[PATH_MAX_TEST], b[PATH_MAX_TEST];
    csv t = diff_injected(a, b, "graph", "ops=*/relu,fc3/*,cross_entropy,grad/*,update/*;io=both", "",
                          "noise@op=fc1/relu,step=1");
    static const char *const later[] = {
        "1", "fc2/relu", "out", "0",  "1", "fc3/linear", "out", "0",
        "1", "grad/fc1/relu", "out", "0",  "1", "update/fc1.weight", "out", "0",
        "2", "fc1/relu", "out", "0", NULL
    };
    assert_injected(&t, 1, "fc1/relu", later);
    int k = find_row(&t, 1, "fc1/relu", "out", 0);
    ck_assert_msg(strstr(cell(&t, k, "kernel"), "fused-act: fc1/linear, fc1/relu"), "kernel '%s'",
                  cell(&t, k, "kernel"));
    csv_free(&t);
    tu_result r = RUN(a, b, "--summary");
    ck_assert_msg(strstr(r.out, "in kernel k0 fused-act: fc1/linear, fc1/relu\n") &&
                  strstr(r.out, "(its inputs were not compared: the cause may be upstream)"),
                  "%s", r.out);
    tu_result_free(&r);
}
END_TEST

/* ---- metrics ---------------------------------------------------------------- */

START_TEST(test_metrics_small)
{
    /* Hand-made values: a zero in A (the relative error's epsilon), a sign
     * change, an exact match, a NaN on both sides at the same place. */
    char dir[128], a[160], b[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    const float va[8] = { 1, -2, 0, 3.5f, 100, -0.25f, NAN, 7 };
    const float vb[8] = { 1.001f, -2, 1e-6f, -3.5f, 100.5f, -0.25f, NAN, 7.0001f };
    write_run_h5(a, 1);
    write_run_h5(b, 1);
    dump_step_writer *w = create(a, 0, 0);
    add(w, meta("op0", DUMP_OUT, 0, 0, "t0", TE_F32, te_shape(2, 4)), va);
    commit(w);
    w = create(b, 0, 0);
    add(w, meta("op0", DUMP_OUT, 0, 0, "t0", TE_F32, te_shape(2, 4)), vb);
    commit(w);
    tu_result r = RUN(a, b, "--format", "csv", "--atol", "1e-3", "--rtol", "1e-4");
    ck_assert_msg(r.rc == 1, "rc %d: %s", r.rc, r.err);
    csv t = csv_parse(r.out);
    ck_assert_int_eq(t.nrows, 1);
    double da[8], db[8];
    for (int i = 0; i < 8; i++)
        da[i] = va[i], db[i] = vb[i];
    expect e = expect_of(da, db, va, vb, 8, 1e-3, 1e-4);
    assert_metrics(&t, 0, &e, "[0,3]");   /* |-3.5 - 3.5| = 7 */
    ck_assert_int_eq(atol(cell(&t, 0, "max_ulp")), e.max_ulp);
    ck_assert_str_eq(cell(&t, 0, "atol"), "0.001");
    ck_assert_str_eq(cell(&t, 0, "rtol"), "0.0001");
    ck_assert_str_eq(cell(&t, 0, "verdict"), "diverges here");
    /* the same values worked out by hand, so that both sides are checked */
    ck_assert_int_eq(e.n_fail, 2);   /* -3.5 against 3.5, 100.5 against 100 */
    assert_close(e.max_rel, (double)1e-6f / 1e-12, "hand max_rel");   /* 1e-6 against 0 */
    assert_close(e.min_rtol, (7 - 1e-3) / 3.5, "hand min_rtol");
    csv_free(&t);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_metrics_large_streamed)
{
    /* 700 x 1000 f32 (2.8 MB, three 1 MiB chunks) with noise everywhere and
     * one planted largest error: the chunks are compared on every thread and
     * merged; the same tensors compressed take HDF5's path and must give the
     * same numbers. */
    char dir[128], a[160], b[160], az[160], bz[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(az, sizeof az, "%s/az", dir);
    snprintf(bz, sizeof bz, "%s/bz", dir);
    const long n = 700 * 1000;
    float *va = malloc((size_t)n * sizeof *va), *vb = malloc((size_t)n * sizeof *vb);
    double *da = malloc((size_t)n * sizeof *da), *db = malloc((size_t)n * sizeof *db);
    uint64_t seed = 42;
    for (long i = 0; i < n; i++) {
        va[i] = rnd(&seed) * 4;
        vb[i] = va[i] + (i % 3 == 0 ? rnd(&seed) * 1e-4f : 0);
    }
    vb[523 * 1000 + 917] += 0.5f;
    for (long i = 0; i < n; i++)
        da[i] = va[i], db[i] = vb[i];
    const char *dirs[4] = { a, b, az, bz };
    for (int k = 0; k < 4; k++) {
        dump_step_writer *w = create(dirs[k], 3, k >= 2 ? 1 : 0);
        add(w, meta("big", DUMP_OUT, 0, 0, "big:out0", TE_F32, te_shape(700, 1000)),
            k % 2 ? vb : va);
        commit(w);
    }
    expect e = expect_of(da, db, va, vb, n, 1e-5, 1.3e-6);
    tu_result r = RUN(a, b, "--format", "csv");
    ck_assert_msg(r.rc == 1, "rc %d: %s", r.rc, r.err);
    csv t = csv_parse(r.out);
    ck_assert_int_eq(t.nrows, 1);
    assert_metrics(&t, 0, &e, "[523,917]");
    ck_assert_int_eq(atol(cell(&t, 0, "max_ulp")), e.max_ulp);
    tu_result rz = RUN(az, bz, "--format", "csv");
    ck_assert_msg(rz.rc == 1, "rc %d: %s", rz.rc, rz.err);
    csv tz = csv_parse(rz.out);
    assert_metrics(&tz, 0, &e, "[523,917]");
    for (int c = 0; c < t.ncols; c++) {   /* the paths agree, up to the order of the sums */
        char *end;
        double x = strtod(t.cell[c], &end);
        if (*end || end == t.cell[c])
            ck_assert_msg(strcmp(t.cell[c], tz.cell[c]) == 0, "%s: %s chunked, %s compressed",
                          t.head[c], t.cell[c], tz.cell[c]);
        else
            ck_assert_msg(fabs(x - strtod(tz.cell[c], NULL)) <= 1e-12 * fabs(x), "%s: %s chunked, "
                          "%s compressed", t.head[c], t.cell[c], tz.cell[c]);
    }
    csv_free(&t);
    csv_free(&tz);
    tu_result_free(&r);
    tu_result_free(&rz);
    free(va);
    free(vb);
    free(da);
    free(db);
}
END_TEST

START_TEST(test_half_against_f32)
{
    /* f16 and bf16 against f32, in double precision, under the looser
     * defaults of the lower precision: rounding passes, a real error fails. */
    char dir[128], a[160], b[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/f32", dir);
    snprintf(b, sizeof b, "%s/half", dir);
    enum { N = 4096 };
    float v[N];
    uint16_t h[N], bf[N];
    double dv[N], dh[N], dbf[N];
    uint64_t seed = 9;
    for (int i = 0; i < N; i++) {
        v[i] = rnd(&seed) * 10;
        h[i] = te_f32_to_f16(v[i]);
        bf[i] = te_f32_to_bf16(v[i]);
        dv[i] = v[i];
        dh[i] = te_f16_to_f32(h[i]);
        dbf[i] = te_bf16_to_f32(bf[i]);
    }
    dump_step_writer *w = create(a, 0, 0);
    add(w, meta("x", DUMP_OUT, 0, 0, "x:out0", TE_F32, te_shape(N)), v);
    add(w, meta("y", DUMP_OUT, 0, 1, "y:out0", TE_F32, te_shape(N)), v);
    commit(w);
    w = create(b, 0, 0);
    add(w, meta("x", DUMP_OUT, 0, 0, "x:out0", TE_F16, te_shape(N)), h);
    add(w, meta("y", DUMP_OUT, 0, 1, "y:out0", TE_BF16, te_shape(N)), bf);
    commit(w);
    tu_result r = RUN(a, b, "--format", "csv");   /* the default: 8 ulps of the lower one */
    ck_assert_msg(r.rc == 0, "rc %d: %s\n%s", r.rc, r.err, r.out);
    csv t = csv_parse(r.out);
    ck_assert_str_eq(cell(&t, 0, "rtol"), "0");
    csv_free(&t);
    tu_result_free(&r);
    r = RUN(a, b, "--format", "csv", "--ulp", "0");   /* --ulp 0: the per-dtype rtol */
    ck_assert_msg(r.rc == 0, "rc %d: %s\n%s", r.rc, r.err, r.out);
    t = csv_parse(r.out);
    ck_assert_int_eq(t.nrows, 2);
    expect eh = expect_of(dv, dh, NULL, NULL, N, 1e-5, 1e-3);
    expect eb = expect_of(dv, dbf, NULL, NULL, N, 1e-5, 1.6e-2);
    assert_metrics(&t, 0, &eh, NULL);
    assert_metrics(&t, 1, &eb, NULL);
    ck_assert_str_eq(cell(&t, 0, "dtype_b"), "f16");
    ck_assert_str_eq(cell(&t, 0, "rtol"), "0.001");
    ck_assert_str_eq(cell(&t, 1, "rtol"), "0.016");
    ck_assert_str_eq(cell(&t, 0, "max_ulp"), "");   /* no ULP across dtypes */
    ck_assert_msg(eh.max_abs > 0 && eb.max_abs > eh.max_abs, "rounding errors were there");
    csv_free(&t);
    tu_result_free(&r);
    r = RUN(a, b, "--ulp", "0", "--rtol", "1e-5", "--summary");   /* tighter than f16's rounding */
    ck_assert_msg(r.rc == 1 && strstr(r.out, "2 tensors compared in 1 step: 2 diverge here"),
                  "rc %d: %s", r.rc, r.out);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_nan_one_side)
{
    char dir[128], a[160], b[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    float va[16], vb[16];
    for (int i = 0; i < 16; i++)
        va[i] = vb[i] = (float)i - 4.5f;
    va[3] = vb[3] = NAN;                  /* both: equal */
    va[9] = vb[9] = INFINITY;             /* the same infinity: equal */
    write_run_h5(a, 2);
    write_run_h5(b, 2);
    dump_step_writer *w = create(a, 0, 0);
    add(w, meta("op0", DUMP_OUT, 0, 0, "t0", TE_F32, te_shape(16)), va);
    add(w, meta("op1", DUMP_OUT, 0, 1, "t1", TE_F32, te_shape(16)), va);
    commit(w);
    vb[12] = NAN;                         /* B only */
    w = create(b, 0, 0);
    add(w, meta("op0", DUMP_OUT, 0, 0, "t0", TE_F32, te_shape(16)), va);
    add(w, meta("op1", DUMP_OUT, 0, 1, "t1", TE_F32, te_shape(16)), vb);
    commit(w);
    tu_result r = RUN(a, b, "--format", "csv");
    ck_assert_msg(r.rc == 1, "rc %d: %s", r.rc, r.err);
    csv t = csv_parse(r.out);
    ck_assert_int_eq(t.nrows, 2);
    ck_assert_str_eq(cell(&t, 0, "verdict"), "same");   /* NaN facing NaN */
    ck_assert_str_eq(cell(&t, 0, "nan_a"), "1");
    ck_assert_str_eq(cell(&t, 0, "nan_b"), "1");
    ck_assert_str_eq(cell(&t, 0, "inf_a"), "1");
    ck_assert_str_eq(cell(&t, 0, "n_fail"), "0");
    ck_assert_str_eq(cell(&t, 1, "verdict"), "diverges here");
    ck_assert_str_eq(cell(&t, 1, "first"), "1");
    ck_assert_str_eq(cell(&t, 1, "nan_a"), "1");
    ck_assert_str_eq(cell(&t, 1, "nan_b"), "2");
    ck_assert_str_eq(cell(&t, 1, "n_fail"), "1");
    ck_assert_str_eq(cell(&t, 1, "min_atol"), "inf");   /* no tolerance passes a NaN */
    ck_assert_str_eq(cell(&t, 1, "max_abs"), "0");      /* the finite values agree */
    csv_free(&t);
    tu_result_free(&r);
    r = RUN(a, b);
    ck_assert_msg(strstr(r.out, "DIVERGES HERE  first divergence; nan 1/2 inf 1/1; "
                                "examples/mlp.c:41\n"), "%s", r.out);
    tu_result_free(&r);
}
END_TEST

/* run.h5 as tdbg wrote it before the /ops table had column `col`. */
static void drop_column(const char *dir, const char *col)
{
    char path[256];
    snprintf(path, sizeof path, "%s/run.h5", dir);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "/ops", H5P_DEFAULT);
    hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
    ck_assert(f >= 0 && ds >= 0 && ft >= 0 && sp >= 0 && H5Tget_member_index(ft, col) >= 0);
    size_t size = 0;
    int nm = H5Tget_nmembers(ft);
    for (int i = 0; i < nm; i++) {
        hid_t mt = H5Tget_member_type(ft, (unsigned)i);
        size += H5Tget_size(mt);
        H5Tclose(mt);
    }
    hid_t old = H5Tcreate(H5T_COMPOUND, size);
    size_t at = 0;
    for (int i = 0; i < nm; i++) {
        char *name = H5Tget_member_name(ft, (unsigned)i);
        hid_t mt = H5Tget_member_type(ft, (unsigned)i);
        if (strcmp(name, col) != 0) {
            ck_assert(H5Tinsert(old, name, at, mt) >= 0);
            at += H5Tget_size(mt);
        }
        H5Tclose(mt);
        H5free_memory(name);
    }
    H5Tset_size(old, at);
    void *rows = calloc((size_t)H5Sget_simple_extent_npoints(sp), at);
    ck_assert(H5Dread(ds, old, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0);
    hid_t nd = H5Dcreate2(f, "/ops_old", old, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(nd >= 0 && H5Dwrite(nd, old, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0);
    H5Dvlen_reclaim(old, sp, H5P_DEFAULT, rows);
    free(rows);
    H5Dclose(nd);
    H5Dclose(ds);
    ck_assert(H5Ldelete(f, "/ops", H5P_DEFAULT) >= 0 &&
              H5Lmove(f, "/ops_old", f, "/ops", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Tclose(old);
    H5Tclose(ft);
    H5Sclose(sp);
    H5Fclose(f);
}

/* op0 reads a weight no op writes (a frozen parameter, a batch norm's
 * running statistics in eval mode) and diverges on its own at steps 0 and
 * 1. The /ops table says op0 writes nothing in place, so the weight is not
 * tainted and step 1's op0 diverges there too; tables from before the
 * inplace column leave tdbg-diff to guess that the weight is state op0
 * updates, and step 1's divergence reads as inherited. */
START_TEST(test_inplace_column)
{
    char dir[128], a[160], b[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    float va[8], vb[8];
    for (int i = 0; i < 8; i++)
        va[i] = vb[i] = (float)i;
    vb[2] += 0.5f;
    for (int k = 0; k < 2; k++) {
        const char *d = k ? b : a;
        write_run_chain(d, 2, "batch:x,param:w");
        for (int64_t step = 0; step < 2; step++) {
            dump_step_writer *w = create(d, step, 0);
            add(w, meta("op0", DUMP_OUT, 0, 0, "t0", TE_F32, te_shape(8)), k ? vb : va);
            add(w, meta("op1", DUMP_OUT, 0, 1, "t1", TE_F32, te_shape(8)), k ? vb : va);
            commit(w);
        }
    }
    char err[512];
    dump_run_meta m;
    dump_op_row *ops;
    int n;
    ck_assert_msg(dump_run_read(a, &m, &ops, &n, err, sizeof err), "%s", err);
    ck_assert(m.lists_inplace && n == 2 && ops[0].inplace[0] == '\0');
    free(ops);
    for (int old = 0; old < 2; old++) {
        if (old)
            drop_column(a, "inplace");
        tu_result r = RUN(a, b, "--format", "csv");
        ck_assert_msg(r.rc == 1, "rc %d: %s", r.rc, r.err);
        csv t = csv_parse(r.out);
        int row = find_row(&t, 1, "op0", "out", 0);
        ck_assert_msg(row >= 0, "no row for step 1 op0:\n%s", r.out);
        ck_assert_str_eq(cell(&t, row, "verdict"), old ? "inherited" : "diverges here");
        csv_free(&t);
        tu_result_free(&r);
    }
    ck_assert_msg(dump_run_read(a, &m, &ops, &n, err, sizeof err), "%s", err);
    ck_assert(!m.lists_inplace && n == 2 && strcmp(ops[0].inputs, "batch:x,param:w") == 0);
    free(ops);
}
END_TEST

/* Two forward ops on tensors that differ (x, y), and their backward ops,
 * whose outputs differ. The reads column says grad/scale reads nothing of
 * the forward pass (its gradient is a constant times the incoming one),
 * so its difference starts there; grad/ln reads only what ln saved, and ln
 * read the divergent y: inherited. Tables from before the column let grad/X
 * read every input and output of X: both inherited. */
START_TEST(test_reads_column)
{
    static const char *const table[][6] = {   /* name, phase, inputs, outputs, reads */
        { "x", "f", "", "x:out0", "" },
        { "scale", "f", "x:out0", "scale:out0", "" },
        { "y", "f", "", "y:out0", "" },
        { "ln", "f", "y:out0", "ln:out0", "" },
        { "grad/ln", "b", "grad:ln:out0", "grad:y:out0", "ln:saved0" },
        { "grad/scale", "b", "grad:scale:out0", "grad:x:out0", "" },
    };
    enum { N_OPS = sizeof table / sizeof table[0] };
    char dir[128], a[160], b[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    float va[8], vb[8];
    for (int i = 0; i < 8; i++)
        va[i] = vb[i] = (float)i;
    vb[2] += 0.5f;
    dump_run_meta m = { .mode = TE_MODE_EAGER, .seed = 7 };
    snprintf(m.engine_version, sizeof m.engine_version, "0.1.0");
    snprintf(m.amp, sizeof m.amp, "none");
    snprintf(m.backend, sizeof m.backend, "cpu");
    snprintf(m.command_line, sizeof m.command_line, "test");
    dump_op_row ops[N_OPS];
    memset(ops, 0, sizeof ops);
    for (int i = 0; i < N_OPS; i++) {
        ops[i].exec = i;
        ops[i].phase = table[i][1][0] == 'b' ? TE_PHASE_BACKWARD : TE_PHASE_FORWARD;
        ops[i].line = 40 + i;
        snprintf(ops[i].name, sizeof ops[i].name, "%s", table[i][0]);
        snprintf(ops[i].type, sizeof ops[i].type, "Test");
        snprintf(ops[i].file, sizeof ops[i].file, "examples/mlp.c");
        snprintf(ops[i].inputs, sizeof ops[i].inputs, "%s", table[i][2]);
        snprintf(ops[i].outputs, sizeof ops[i].outputs, "%s", table[i][3]);
        snprintf(ops[i].reads, sizeof ops[i].reads, "%s", table[i][4]);
    }
    char err[512];
    for (int k = 0; k < 2; k++) {
        const char *d = k ? b : a;
        ck_assert_msg(dump_run_write(d, &m, ops, N_OPS, err, sizeof err), "run.h5: %s", err);
        dump_step_writer *w = create(d, 0, 0);
        add(w, meta("x", DUMP_OUT, 0, 0, "x:out0", TE_F32, te_shape(8)), k ? vb : va);
        add(w, meta("scale", DUMP_OUT, 0, 1, "scale:out0", TE_F32, te_shape(8)), k ? vb : va);
        add(w, meta("y", DUMP_OUT, 0, 2, "y:out0", TE_F32, te_shape(8)), k ? vb : va);
        add(w, meta("grad/ln", DUMP_OUT, 0, 4, "grad:y:out0", TE_F32, te_shape(8)), k ? vb : va);
        add(w, meta("grad/scale", DUMP_OUT, 0, 5, "grad:x:out0", TE_F32, te_shape(8)), k ? vb : va);
        commit(w);
    }
    dump_op_row *got;
    int n;
    ck_assert_msg(dump_run_read(a, &m, &got, &n, err, sizeof err), "%s", err);
    ck_assert(m.lists_reads && n == N_OPS && strcmp(got[4].reads, "ln:saved0") == 0 && got[0].reads[0] == '\0');
    free(got);
    for (int old = 0; old < 2; old++) {
        if (old)
            drop_column(a, "reads");
        tu_result r = RUN(a, b, "--format", "csv");
        ck_assert_msg(r.rc == 1, "rc %d: %s", r.rc, r.err);
        csv t = csv_parse(r.out);
        static const char *const want[][3] = {   /* op, with the column, without */
            { "x", "diverges here", "diverges here" },
            { "scale", "inherited", "inherited" },
            { "y", "diverges here", "diverges here" },
            { "grad/ln", "inherited", "inherited" },
            { "grad/scale", "diverges here", "inherited" },
        };
        for (int i = 0; i < 5; i++) {
            int row = find_row(&t, 0, want[i][0], "out", 0);
            ck_assert_msg(row >= 0, "no row for %s:\n%s", want[i][0], r.out);
            ck_assert_msg(strcmp(cell(&t, row, "verdict"), want[i][1 + old]) == 0, "%s%s: %s, want %s",
                          want[i][0], old ? " (no reads column)" : "", cell(&t, row, "verdict"),
                          want[i][1 + old]);
        }
        csv_free(&t);
        tu_result_free(&r);
    }
    ck_assert_msg(dump_run_read(a, &m, &got, &n, err, sizeof err), "%s", err);
    ck_assert(!m.lists_reads && m.lists_inplace && n == N_OPS && strcmp(got[5].inputs, "grad:scale:out0") == 0 &&
              got[4].reads[0] == '\0');
    free(got);
}
END_TEST

/* ---- fused kernels: tensors one run never held --------------------------------- */

#define ATTN_KERNEL "k4 fused-attention: h0/attn/scores, h0/attn/scale, h0/attn/mask, h0/attn/softmax, h0/attn/out"

static const char *const attn_ops[5] = { "h0/attn/scores", "h0/attn/scale", "h0/attn/mask", "h0/attn/softmax",
                                          "h0/attn/out" };

/* run.h5 of causal attention's chain; kernel "" for eager mode. */
static void write_run_attn(const char *dir, const char *kernel)
{
    char err[512] = "";
    dump_run_meta m = { .mode = kernel[0] ? TE_MODE_GRAPH : TE_MODE_EAGER, .seed = 7 };
    snprintf(m.engine_version, sizeof m.engine_version, "0.1.0");
    snprintf(m.amp, sizeof m.amp, "none");
    snprintf(m.backend, sizeof m.backend, "cpu");
    dump_op_row ops[5];
    memset(ops, 0, sizeof ops);
    for (int i = 0; i < 5; i++) {
        ops[i].exec = i;
        ops[i].phase = TE_PHASE_FORWARD;
        snprintf(ops[i].name, sizeof ops[i].name, "%s", attn_ops[i]);
        snprintf(ops[i].type, sizeof ops[i].type, "Test");
        snprintf(ops[i].inputs, sizeof ops[i].inputs, i == 0 ? "q,k" : i == 4 ? "%s:out0,v" : "%s:out0",
                 i ? attn_ops[i - 1] : "");
        snprintf(ops[i].outputs, sizeof ops[i].outputs, "%s:out0", attn_ops[i]);
        snprintf(ops[i].kernel, sizeof ops[i].kernel, "%s", kernel);
    }
    ck_assert_msg(dump_run_write(dir, &m, ops, 5, err, sizeof err), "run.h5: %s", err);
}

/* Step 0 of the chain. Eager (kernel NULL): every op's inputs and output.
 * Graph with a fused kernel: only what the kernel reads and writes (q, k,
 * v, out), each tagged with the kernel, as the dump records it. out_bump is
 * added to out's first value. */
static void write_attn_step(const char *dir, const char *kernel, float out_bump)
{
    static const float qkv[6] = { 0.5f, -1, 2, 0.25f, -0.75f, 1.5f };
    static const float tt[9] = { 1, -INFINITY, -INFINITY, 0.5f, 2, -INFINITY, -1, 0, 3 };
    static const int64_t s_tt[4] = { 1, 1, 3, 3 }, s_qkv[4] = { 1, 1, 3, 2 };
    float out[6];
    for (int i = 0; i < 6; i++)
        out[i] = qkv[i] * 0.5f + (i ? 0 : out_bump);
    const bool fused = kernel != NULL;
    dump_step_writer *w = create(dir, 0, 0);
    for (int i = 0; i < 5; i++) {
        bool ends = i == 0 || i == 4; /* the kernel's own inputs and output */
        if (fused && !ends)
            continue;
        dump_tensor_info ti;
        if (i == 0 || !fused) { /* in0 */
            ti = meta(attn_ops[i], DUMP_IN, 0, i, i ? "prev:out0" : "q", TE_F32, 4, i ? s_tt : s_qkv);
            snprintf(ti.kernel, sizeof ti.kernel, "%s", fused ? kernel : "");
            add(w, ti, i ? (const void *)tt : (const void *)qkv);
        }
        if (i == 0 || i == 4) { /* k, v */
            ti = meta(attn_ops[i], DUMP_IN, 1, i, i ? "v" : "k", TE_F32, te_shape(1, 1, 3, 2));
            snprintf(ti.kernel, sizeof ti.kernel, "%s", fused ? kernel : "");
            add(w, ti, qkv);
        }
        if (!fused || i == 4) {
            char name[64];
            snprintf(name, sizeof name, "%s:out0", attn_ops[i]);
            ti = meta(attn_ops[i], DUMP_OUT, 0, i, name, TE_F32, 4, i == 4 ? s_qkv : s_tt);
            snprintf(ti.kernel, sizeof ti.kernel, "%s", fused ? kernel : "");
            add(w, ti, i == 4 ? (const void *)out : (const void *)tt);
        }
    }
    commit(w);
}

/* Eager against graph with fused attention: the tensors only eager holds
 * are the fused kernel's intermediates, and the verdict is same. */
START_TEST(test_fused_intermediates_same)
{
    char dir[128], a[160], b[160], b2[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/eager", dir);
    snprintf(b, sizeof b, "%s/graph", dir);
    snprintf(b2, sizeof b2, "%s/graph-no-run", dir);
    write_attn_step(a, NULL, 0);
    write_run_attn(a, "");
    write_attn_step(b, ATTN_KERNEL, 0);
    write_run_attn(b, ATTN_KERNEL);
    write_attn_step(b2, ATTN_KERNEL, 0); /* no run.h5: the step file's kernels say it */
    for (int k = 0; k < 2; k++) {
        tu_result r = RUN(a, k ? b2 : b);
        ck_assert_msg(r.rc == 0, "rc %d: %s%s", r.rc, r.out, r.err);
        /* compared: q, k, v and out; the other 8 of A's 12 are inside the kernel */
        ck_assert_msg(strstr(r.out, "4 tensors compared in 1 step: 0 diverge here, 0 inherited, 4 same\n"), "%s", r.out);
        ck_assert_msg(strstr(r.out, "h0/attn/softmax  out0           -          -          -  fused in B\n") &&
                      strstr(r.out, "h0/attn/out      in0            -          -          -  fused in B\n") &&
                      strstr(r.out, "h0/attn/out      out0           0          0   1.000000  same\n"), "%s", r.out);
        ck_assert_msg(strstr(r.out, "tensors inside fused kernels: 8 of A's in B's, 0 of B's in A's (never held "
                                    "there, not compared), e.g. " ATTN_KERNEL "\n") &&
                      strstr(r.out, "same: every tensor both dumps hold agrees; the rest are intermediates of "
                                    "fused kernels\n") && !strstr(r.out, "only in"), "%s", r.out);
        tu_result_free(&r);
    }
    /* graph as the reference: the same, the other way round; CSV and JSON say it too */
    tu_result r = RUN(b, a, "--format", "csv");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    csv t = csv_parse(r.out);
    int row = find_row(&t, 0, "h0/attn/mask", "out", 0);
    ck_assert_msg(row >= 0 && strcmp(cell(&t, row, "status"), "fused in A") == 0, "%s", r.out);
    csv_free(&t);
    tu_result_free(&r);
    r = RUN(a, b, "--format", "json");
    ck_assert_msg(strstr(r.out, "\"status\": \"fused in B\"") && strstr(r.out, "\"fused_a\": 8, \"fused_b\": 0"),
                  "%s", r.out);
    tu_result_free(&r);
    /* A difference in what both hold is still one */
    write_attn_step(b, ATTN_KERNEL, 0.5f);
    r = RUN(a, b);
    ck_assert_msg(r.rc == 1 && strstr(r.out, "DIVERGES HERE") && !strstr(r.out, "same: every"), "rc %d: %s",
                  r.rc, r.out);
    tu_result_free(&r);
    /* and a tensor missing without a fused kernel to hold it is only in A */
    const char *partial = "k4 fused-attention: h0/attn/scale, h0/attn/mask, h0/attn/softmax, h0/attn/out";
    write_attn_step(b, partial, 0);
    write_run_attn(b, partial);
    r = RUN(a, b);
    ck_assert_msg(r.rc == 0 && strstr(r.out, "h0/attn/scores   out0           -          -          -  only in A\n") &&
                  strstr(r.out, "tensors only in A: 1, only in B: 0") && !strstr(r.out, "same: every"), "%s",
                  r.out);
    tu_result_free(&r);
}
END_TEST

/* ---- pairing ------------------------------------------------------------------ */

START_TEST(test_shapes_and_one_side)
{
    char dir[128], a[160], b[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    const float v[6] = { 1, 2, 3, 4, 5, 6 };
    dump_step_writer *w = create(a, 0, 0);
    add(w, meta("same", DUMP_OUT, 0, 0, "same:out0", TE_F32, te_shape(6)), v);
    add(w, meta("onlya", DUMP_OUT, 0, 1, "onlya:out0", TE_F32, te_shape(6)), v);
    commit(w);
    w = create(b, 0, 0);
    add(w, meta("same", DUMP_OUT, 0, 0, "same:out0", TE_F32, te_shape(6)), v);
    add(w, meta("onlyb", DUMP_OUT, 0, 1, "onlyb:out0", TE_F32, te_shape(6)), v);
    commit(w);
    tu_result r = RUN(a, b);   /* one-sided tensors are listed, not a difference */
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, "onlya  out0           -          -          -  only in A\n") &&
                  strstr(r.out, "onlyb  out0           -          -          -  only in B\n") &&
                  strstr(r.out, "tensors only in A: 1, only in B: 1 (not compared)\n"), "%s",
                  r.out);
    char want[256];
    snprintf(want, sizeof want, "tdbg-diff: warning: %s: no run.h5 (no op graph: verdicts follow "
             "the dumped tensors only)\n", a);
    ck_assert_msg(strstr(r.err, want), "%s", r.err);
    tu_result_free(&r);

    w = create(a, 1, 0);
    add(w, meta("same", DUMP_OUT, 0, 0, "same:out0", TE_F32, te_shape(2, 3)), v);
    commit(w);
    w = create(b, 1, 0);
    add(w, meta("same", DUMP_OUT, 0, 0, "same:out0", TE_F32, te_shape(3, 2)), v);
    commit(w);
    r = RUN(a, b, "--steps", "1");
    ck_assert_int_eq(r.rc, 1);
    ck_assert_msg(strstr(r.out, "DIVERGES HERE  first divergence; shapes [2,3] vs [3,2]"), "%s",
                  r.out);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_steps_intersected)
{
    char dir[128], a[160], b[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    const float v[4] = { 1, 2, 3, 4 };
    for (int s = 0; s < 6; s++) {
        if (s <= 3) {
            dump_step_writer *w = create(a, s, 0);
            add(w, meta("x", DUMP_OUT, 0, 0, "x:out0", TE_F32, te_shape(4)), v);
            commit(w);
        }
        if (s >= 2) {
            dump_step_writer *w = create(b, s, 0);
            add(w, meta("x", DUMP_OUT, 0, 0, "x:out0", TE_F32, te_shape(4)), v);
            commit(w);
        }
    }
    tu_result r = RUN(a, b, "--summary");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, "2 tensors compared in 2 steps: ") &&
                  strstr(r.out, "steps only in A: 0-1 (not compared)\n"
                                "steps only in B: 4-5 (not compared)\n"), "%s", r.out);
    tu_result_free(&r);
    r = RUN(a, b, "--steps", "0|5");
    ck_assert_int_eq(r.rc, 2);
    char want[512];
    snprintf(want, sizeof want, "tdbg-diff: %s and %s have no step in common among --steps "
             "(steps only in A: 0; only in B: 5)\n", a, b);
    ck_assert_msg(strstr(r.err, want), "%s", r.err);
    tu_result_free(&r);

    /* Two step files are compared whatever their numbers. */
    char fa[256], fb[256];
    snprintf(fa, sizeof fa, "%s/step-00000000.h5", a);
    snprintf(fb, sizeof fb, "%s/step-00000005.h5", b);
    r = RUN(fa, fb, "--format", "csv");
    ck_assert_msg(r.rc == 0 && strstr(r.out, "\n0,x,Test,forward,out,0,x:out0,compared,same,"),
                  "rc %d: %s%s", r.rc, r.out, r.err);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_map_renames)
{
    char dir[128], a[160], b[160], map[192];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(map, sizeof map, "%s/map.txt", dir);
    const float v[4] = { 1, 2, 3, 4 };
    dump_step_writer *w = create(a, 0, 0);
    add(w, meta("fc1/linear", DUMP_OUT, 0, 0, "fc1/linear:out0", TE_F32, te_shape(4)), v);
    add(w, meta("grad/fc1/linear", DUMP_OUT, 0, 1, "grad:x", TE_F32, te_shape(4)), v);
    add(w, meta("head/out", DUMP_OUT, 0, 2, "head/out:out0", TE_F32, te_shape(4)), v);
    commit(w);
    w = create(b, 0, 0);
    add(w, meta("enc/layer1/linear", DUMP_OUT, 0, 0, "x", TE_F32, te_shape(4)), v);
    add(w, meta("grad/enc/layer1/linear", DUMP_OUT, 0, 1, "grad:x", TE_F32, te_shape(4)), v);
    add(w, meta("classifier/out", DUMP_OUT, 0, 2, "y", TE_F32, te_shape(4)), v);
    commit(w);
    FILE *f = fopen(map, "w");
    fputs("# B's name, then A's\nenc/layer1/linear fc1/linear\n\nclassifier/* head/*\n", f);
    fclose(f);
    tu_result r = RUN(a, b, "--map", map, "--summary");
    ck_assert_msg(r.rc == 0 && strstr(r.out, "3 tensors compared in 1 step: 0 diverge here, "
                                             "0 inherited, 3 same\n") &&
                  !strstr(r.out, "only in"), "rc %d: %s%s", r.rc, r.out, r.err);
    tu_result_free(&r);
    r = RUN(a, b);   /* without the map nothing pairs up */
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.err, "have no tensor in common\n"), "%s", r.err);
    tu_result_free(&r);
    f = fopen(map, "w");
    fputs("enc/layer1/linear\n", f);
    fclose(f);
    r = RUN(a, b, "--map", map);
    ck_assert_int_eq(r.rc, 2);
    char want[256];
    snprintf(want, sizeof want, "tdbg-diff: --map: %s:1: expected 'B_NAME A_NAME'", map);
    ck_assert_msg(strncmp(r.err, want, strlen(want)) == 0, "%s", r.err);
    tu_result_free(&r);
}
END_TEST

/* ---- formats ------------------------------------------------------------------------ */

START_TEST(test_json_and_color)
{
    char dir[128], a[160], b[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    const float va[3] = { 1, 2, 3 }, vb[3] = { 1, 2.5f, 3 };
    write_run_h5(a, 2);
    write_run_h5(b, 2);
    dump_step_writer *w = create(a, 0, 0);
    add(w, meta("op0", DUMP_OUT, 0, 0, "t0", TE_F32, te_shape(3)), va);
    add(w, meta("op1", DUMP_IN, 0, 1, "t0", TE_F32, te_shape(3)), va);
    add(w, meta("op1", DUMP_OUT, 0, 1, "t1", TE_F32, te_shape(3)), va);
    commit(w);
    w = create(b, 0, 0);
    add(w, meta("op0", DUMP_OUT, 0, 0, "t0", TE_F32, te_shape(3)), vb);
    add(w, meta("op1", DUMP_IN, 0, 1, "t0", TE_F32, te_shape(3)), vb);
    add(w, meta("op1", DUMP_OUT, 0, 1, "t1", TE_F32, te_shape(3)), vb);
    commit(w);
    tu_result r = RUN(a, b, "--format", "json");
    ck_assert_msg(r.rc == 1, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, "\"op\": \"op0\", \"op_type\": \"Test\", \"phase\": \"forward\", "
                                "\"io\": \"out\", \"slot\": 0, \"tensor\": \"t0\", \"status\": "
                                "\"compared\", \"verdict\": \"diverges here\", \"first\": true") &&
                  strstr(r.out, "\"max_abs\": 0.5, ") && strstr(r.out, "\"max_abs_index\": [1]") &&
                  strstr(r.out, "\"verdict\": \"inherited\"") &&
                  strstr(r.out, "\"summary\": {\"steps\": 1, \"tensors\": 3, \"diverge_here\": 1, "
                                "\"inherited\": 2, \"same\": 0, \"root_cause_ops\": 1") &&
                  strstr(r.out, "\"exit\": 1}}\n"), "%s", r.out);
    char path[256];
    snprintf(path, sizeof path, "%s/out.json", dir);
    FILE *f = fopen(path, "w");
    fputs(r.out, f);
    fclose(f);
    tu_result_free(&r);
    int st = tu_shell(shell_out, sizeof shell_out,
                      "/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); "
                      "assert d[\"root_causes\"][0][\"op\"] == \"op0\"; "
                      "assert [t[\"verdict\"] for t in d[\"tensors\"]] == "
                      "[\"diverges here\", \"inherited\", \"inherited\"]; print(\"json ok\")' "
                      "'%s' 2>&1", path);
    if (st != 127 && !strstr(shell_out, "No such file"))
        ck_assert_msg(st == 0 && strstr(shell_out, "json ok"), "python: %s", shell_out);

    r = RUN(a, b, "--color", "always", "--metrics", "max_abs,n_fail");
    ck_assert_msg(strstr(r.out, "\033[1;31mDIVERGES HERE\033[0m") &&
                  strstr(r.out, "\033[33minherited\033[0m") &&
                  strstr(r.out, "step  op   io       max_abs   n_fail  verdict\n"), "%s", r.out);
    tu_result_free(&r);
    r = RUN(a, b);   /* not a terminal: no colour */
    ck_assert_msg(!strchr(r.out, '\033'), "%s", r.out);
    tu_result_free(&r);
}
END_TEST

/* ---- damaged and foreign dumps ------------------------------------------------------ */

/* Two single-step runs of one tensor big enough for several chunks. */
static void write_pair(const char *a, const char *b)
{
    enum { N = 300000 };
    float *v = malloc(N * sizeof *v);
    for (int i = 0; i < N; i++)
        v[i] = (float)(i % 97) * 0.5f;
    write_run_h5(a, 1);
    write_run_h5(b, 1);
    for (int k = 0; k < 2; k++) {
        dump_step_writer *w = create(k ? b : a, 0, 0);
        add(w, meta("op0", DUMP_OUT, 0, 0, "t0", TE_F32, te_shape(300, 1000)), v);
        commit(w);
    }
    free(v);
}

START_TEST(test_damaged_chunk)
{
    char dir[128], a[160], b[160], step[256], err[512];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    write_pair(a, b);
    snprintf(step, sizeof step, "%s/step-00000000.h5", b);
    dump_step_reader *r0 = dump_step_open(step, err, sizeof err);
    ck_assert_msg(r0 != NULL, "%s", err);
    dump_extent *e;
    int n = dump_step_extents(r0, 0, &e, err, sizeof err);
    ck_assert_msg(n == 2, "%d extents: %s", n, err);   /* 150 + 150 rows of 4000 bytes */
    ck_assert(e[0].count == 150000 && e[1].first == 150000 && e[1].count == 150000);
    uint64_t at = e[1].offset + 1000;
    free(e);
    dump_step_close(r0);
    int fd = open(step, O_RDWR);
    unsigned char x;
    ck_assert(pread(fd, &x, 1, (off_t)at) == 1);
    x ^= 0x40;
    ck_assert(pwrite(fd, &x, 1, (off_t)at) == 1);
    close(fd);
    tu_result r = RUN(a, b);
    ck_assert_int_eq(r.rc, 2);
    char want[512];
    snprintf(want, sizeof want, "tdbg-diff: %s: /op0/out0: cannot read the values: data error "
             "detected by Fletcher32 checksum (elements 150000..299999)\n", step);
    ck_assert_msg(strstr(r.err, want), "%s", r.err);
    ck_assert_msg(strstr(r.out, "unreadable"), "%s", r.out);
    tu_result_free(&r);

    /* A compressed tensor goes through HDF5, which finds the damage too. */
    char az[160], bz[160];
    snprintf(az, sizeof az, "%s/az", dir);
    snprintf(bz, sizeof bz, "%s/bz", dir);
    float v[4096];
    for (int i = 0; i < 4096; i++)
        v[i] = sinf((float)i);
    for (int k = 0; k < 2; k++) {
        dump_step_writer *w = create(k ? bz : az, 0, 6);
        add(w, meta("op0", DUMP_OUT, 0, 0, "t0", TE_F32, te_shape(4096)), v);
        commit(w);
    }
    snprintf(step, sizeof step, "%s/step-00000000.h5", bz);
    hid_t f = H5Fopen(step, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "/op0/out0", H5P_DEFAULT);
    hsize_t off[1] = { 0 }, size = 0;
    haddr_t addr = 0;
    unsigned mask = 0;
    ck_assert(H5Dget_chunk_info_by_coord(ds, off, &mask, &addr, &size) >= 0 && size > 64);
    H5Dclose(ds);
    H5Fclose(f);
    fd = open(step, O_RDWR);
    ck_assert(pread(fd, &x, 1, (off_t)(addr + size / 2)) == 1);
    x ^= 0x40;
    ck_assert(pwrite(fd, &x, 1, (off_t)(addr + size / 2)) == 1);
    close(fd);
    r = RUN(az, bz);
    ck_assert_int_eq(r.rc, 2);
    snprintf(want, sizeof want, "tdbg-diff: %s: /op0/out0: cannot read the values: ", step);
    ck_assert_msg(strstr(r.err, want), "%s", r.err);
    tu_result_free(&r);
}
END_TEST

/* Damage Fletcher-32 misses (a zero run flipped to 0xff, swapped words)
 * and damage it sees (one bit) are reported as damage, naming the file,
 * the tensor and the chunk, never as a value difference. A dump from
 * before the CRC-32C still compares. */
START_TEST(test_crc_damage)
{
    static const tu_damage kinds[] = { TU_FLIP_FF, TU_FLIP_BIT, TU_SWAP_WORDS };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char dir[128], a[160], b[160], step[256], want[512];
        test_dir(dir, sizeof dir);
        snprintf(a, sizeof a, "%s/a", dir);
        snprintf(b, sizeof b, "%s/b", dir);
        write_run_h5(a, 1);
        write_run_h5(b, 1);
        tu_crc_step(a);
        tu_crc_step(b);
        snprintf(step, sizeof step, "%s/step-00000000.h5", b);
        tu_result r = RUN(a, b);
        ck_assert_msg(r.rc == 0, "rc %d: %s%s", r.rc, r.out, r.err);
        tu_result_free(&r);
        tu_crc_damage(step, kinds[k]);
        r = RUN(a, b);
        ck_assert_int_eq(r.rc, 2);
        snprintf(want, sizeof want, "tdbg-diff: %s: /op0/out0: cannot read the values: data error "
                 "detected by %s checksum (%selements 150000..299999)\n", step,
                 kinds[k] == TU_FLIP_BIT ? "Fletcher32" : "CRC-32C",
                 kinds[k] == TU_FLIP_BIT ? "" : "chunk 1, ");
        ck_assert_msg(strstr(r.err, want), "kind %zu: %s", k, r.err);
        ck_assert_msg(strstr(r.out, "unreadable") && !strstr(r.out, "diverges here"), "%s", r.out);
        tu_result_free(&r);
    }
    char dir[128], a[160], b[160], step[256];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    write_run_h5(a, 1);
    write_run_h5(b, 1);
    tu_crc_step(a);
    tu_crc_step(b);
    snprintf(step, sizeof step, "%s/step-00000000.h5", b);
    tu_crc_strip(step);
    tu_result r = RUN(a, b);
    ck_assert_msg(r.rc == 0, "rc %d: %s%s", r.rc, r.out, r.err);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_truncated_and_missing)
{
    char dir[128], a[160], b[160], step[256], want[512];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    write_pair(a, b);
    snprintf(step, sizeof step, "%s/step-00000000.h5", b);
    struct stat st;
    ck_assert(stat(step, &st) == 0 && truncate(step, st.st_size / 2) == 0);
    tu_result r = RUN(a, b);
    ck_assert_int_eq(r.rc, 2);
    snprintf(want, sizeof want, "tdbg-diff: %s: not a readable HDF5 file: ", step);
    ck_assert_msg(strstr(r.err, want), "%s", r.err);
    tu_result_free(&r);
    r = RUN(a, step);   /* the step file itself */
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.err, want), "%s", r.err);
    tu_result_free(&r);
    snprintf(want, sizeof want, "%s/nothing", dir);
    r = RUN(a, want);
    ck_assert_int_eq(r.rc, 2);
    char msg[640];
    snprintf(msg, sizeof msg, "tdbg-diff: %s: cannot open: No such file or directory\n", want);
    ck_assert_str_eq(r.err, msg);
    ck_assert_str_eq(r.out, "");
    tu_result_free(&r);
}
END_TEST

START_TEST(test_version_mismatch)
{
    char dir[128], a[160], b[160], run[256];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    write_pair(a, b);
    snprintf(run, sizeof run, "%s/run.h5", b);
    hid_t f = H5Fopen(run, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t at = H5Aopen(f, "tdbg_format", H5P_DEFAULT);
    int32_t two = 2;
    ck_assert(f >= 0 && at >= 0 && H5Awrite(at, H5T_NATIVE_INT32, &two) >= 0);
    H5Aclose(at);
    H5Fclose(f);
    tu_result r = RUN(a, b);
    ck_assert_int_eq(r.rc, 2);
    char want[512];
    snprintf(want, sizeof want, "tdbg-diff: %s: /: attribute 'tdbg_format' is 2, this tdbg "
             "reads 1\n", run);
    ck_assert_str_eq(r.err, want);
    ck_assert_str_eq(r.out, "");
    tu_result_free(&r);
}
END_TEST

/* ---- usage ---------------------------------------------------------------- */

START_TEST(test_bad_usage)
{
    static const struct {
        const char *args[6];
        const char *msg;
    } cases[] = {
        { { NULL }, "tdbg-diff: no dumps given (DUMP_A DUMP_B)\nusage: tdbg-diff [OPTIONS]" },
        { { "a", NULL }, "tdbg-diff: only one dump given (DUMP_A DUMP_B)\n" },
        { { "a", "b", "c", NULL }, "tdbg-diff: too many arguments: 'c' (two dumps are compared)\n" },
        { { "a", "b", "--atol", "x", NULL }, "tdbg-diff: bad --atol 'x' (a number >= 0" },
        { { "a", "b", "--rtol=-1", NULL }, "tdbg-diff: bad --rtol '-1' (a number >= 0" },
        { { "a", "b", "--io", "in", NULL }, "tdbg-diff: bad --io 'in' (inputs, outputs or both)\n" },
        { { "a", "b", "--format", "xml", NULL }, "tdbg-diff: bad --format 'xml' (table, csv or json)\n" },
        { { "a", "b", "--metrics", "max_abz", NULL }, "tdbg-diff: unknown metric 'max_abz' (one of: max_abs, " },
        { { "a", "b", "--steps", "5-2", NULL }, "tdbg-diff: bad --steps '5-2': bad step range '5-2' (the end is before the start)\n" },
        { { "a", "b", "--stpes", "1", NULL }, "tdbg-diff: unknown option '--stpes'\n" },
        { { "a", "b", "--ops", NULL }, "tdbg-diff: option '--ops' needs a value\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_result r = tu_run_tool(tdbg_diff_main, "tdbg-diff", cases[i].args);
        ck_assert_msg(r.rc == 2, "case %zu: rc %d", i, r.rc);
        ck_assert_msg(strncmp(r.err, cases[i].msg, strlen(cases[i].msg)) == 0 &&
                      strstr(r.err, "\nusage: tdbg-diff [OPTIONS] DUMP_A DUMP_B\n"),
                      "case %zu: %s", i, r.err);
        ck_assert_str_eq(r.out, "");
        tu_result_free(&r);
    }
    tu_result r = RUN("--help");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(strncmp(r.out, "usage: tdbg-diff [OPTIONS] DUMP_A DUMP_B\n", 41) == 0, "%s",
                  r.out);
    ck_assert_str_eq(r.err, "");
    tu_result_free(&r);
}
END_TEST

START_TEST(test_program_exit_status)
{
    /* The installed program: its exit status as a shell sees it. */
    char dir[128], a[160], b[160];
    test_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    write_pair(a, b);
    ck_assert_int_eq(tu_shell(shell_out, sizeof shell_out,
                              "'%s/dump/tdbg-diff' -q '%s' '%s'", TDBG_BUILDDIR, a, b), 0);
    ck_assert_int_eq(tu_shell(shell_out, sizeof shell_out,
                              "'%s/dump/tdbg-diff' -q '%s' '%s/none' 2>/dev/null", TDBG_BUILDDIR, a,
                              dir), 2);
    ck_assert_int_eq(tu_shell(shell_out, sizeof shell_out,
                              "'%s/dump/tdbg-diff' --bogus 2>&1", TDBG_BUILDDIR), 2);
    ck_assert_msg(strstr(shell_out, "tdbg-diff: unknown option '--bogus'"), "%s", shell_out);
}
END_TEST

/* ---- across precisions ------------------------------------------------------ */

/* Trains the example MLP once (1 step) with flags, dumping inputs and outputs into dir. */
static void mlp_amp_dump(const char *dir, const char *flags)
{
    int st = tu_shell(shell_out, sizeof shell_out,
                      "'%s/examples/mlp' --hidden 32,32 --batch 8 --steps 1 --train-size 64 "
                      "--threads 1 --log-every 100 %s --dump 'dir=%s;io=both' 2>&1",
                      TDBG_BUILDDIR, flags, dir);
    ck_assert_msg(st == 0, "mlp: exit %d:\n%s", st, shell_out);
}

/* O2 f16 with a fault planted in fc2/linear's output against O0: the
 * recomputation of the O2 run's own ops names fc2/linear, and only it. */
START_TEST(test_amp_diverges_here)
{
    char d[256], a[300], b[300];
    test_dir(d, sizeof d);
    snprintf(a, sizeof a, "%s/o0", d);
    snprintf(b, sizeof b, "%s/o2", d);
    mlp_amp_dump(a, "--amp O0");
    mlp_amp_dump(b, "--amp O2 --amp-dtype f16 --loss-scale 1 --inject scale@op=fc2/linear,step=0,value=2");
    tu_result r = RUN("--io", "outputs", a, b);
    ck_assert_msg(r.rc == DIFF_RC_DIFFER, "rc %d\n%s%s", r.rc, r.out, r.err);
    ck_assert_msg(strstr(r.out, "across precisions: B (O2 f16) recomputed in f32 from its own inputs"),
                  "%s", r.out);
    ck_assert_msg(strstr(r.out, "diverges here: step 0, fc2/linear (Linear) out0"), "%s", r.out);
    ck_assert_msg(strstr(r.out, ", 1 beyond rounding"), "%s", r.out);
    const char *row = strstr(r.out, "\n0     fc2/linear ");
    ck_assert_msg(row && strstr(row, "DIVERGES HERE  beyond rounding") < strchr(row + 1, '\n') &&
                      strstr(row, "DIVERGES HERE  beyond rounding"), "%s", r.out);
    /* fc1 before it and fc2/relu after it only carry rounding or the fault forward */
    const char *fc1 = strstr(r.out, "\n0     fc1/linear "), *relu = strstr(r.out, "\n0     fc2/relu ");
    ck_assert_msg(fc1 && strstr(fc1, "inherited") < strchr(fc1 + 1, '\n'), "%s", r.out);
    ck_assert_msg(relu && strstr(relu, "inherited") < strchr(relu + 1, '\n'), "%s", r.out);
    tu_result_free(&r);
}
END_TEST

/* A clean O2 f16 run against O0: no op beyond its rounding, nothing diverges here. */
START_TEST(test_amp_clean_rounding_only)
{
    char d[256], a[300], b[300];
    test_dir(d, sizeof d);
    snprintf(a, sizeof a, "%s/o0", d);
    snprintf(b, sizeof b, "%s/o2", d);
    mlp_amp_dump(a, "--amp O0");
    mlp_amp_dump(b, "--amp O2 --amp-dtype f16 --loss-scale 1");
    tu_result r = RUN("--io", "outputs", a, b);
    ck_assert_msg(r.rc == DIFF_RC_SAME || r.rc == DIFF_RC_DIFFER, "rc %d\n%s%s", r.rc, r.out, r.err);
    ck_assert_msg(strstr(r.out, ", 0 beyond rounding"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "no op beyond rounding: the differences are rounding carried forward"),
                  "%s", r.out);
    ck_assert_msg(strstr(r.out, ": 0 diverge here,"), "%s", r.out);
    ck_assert_msg(!strstr(r.out, "DIVERGES HERE"), "%s", r.out);
    tu_result_free(&r);
}
END_TEST

/* The recomputation's verdict in CSV and JSON, O0 dump a against the O2
 * dump b: when want_op is not NULL it alone diverges here (its output rows:
 * recompute "diverges here", recompute_first 1, beyond its bound) and JSON's
 * across_precisions names it, of type want_type; else no op does. Every
 * other recomputed output carries rounding (within its bound), and no op of
 * the types in types (space separated) goes unrecomputed. */
static void assert_recompute(const char *a, const char *b, const char *want_op,
                             const char *want_type, const char *types)
{
    tu_result r = RUN("--io", "outputs", "--format", "csv", a, b);
    ck_assert_msg(r.rc == DIFF_RC_SAME || r.rc == DIFF_RC_DIFFER, "rc %d\n%s", r.rc, r.err);
    csv t = csv_parse(r.out);
    int n_div = 0, n_carry = 0;
    for (int i = 0; i < t.nrows; i++) {
        const char *w = cell(&t, i, "recompute"), *op = cell(&t, i, "op");
        const char *type = cell(&t, i, "op_type");
        char padded[TE_NAME_MAX + 2];
        snprintf(padded, sizeof padded, " %s ", type);
        if (strcmp(cell(&t, i, "phase"), "forward") == 0 && strcmp(cell(&t, i, "io"), "out") == 0 &&
            strstr(types, padded))
            ck_assert_msg(w[0] && strcmp(w, "not recomputed") != 0, "%s (%s): recompute '%s' %s",
                          op, type, w, cell(&t, i, "recompute_skip"));
        if (strcmp(w, "diverges here") == 0) {
            n_div++;
            ck_assert_msg(want_op && strcmp(op, want_op) == 0, "%s diverges here, not %s", op,
                          want_op ? want_op : "none");
            ck_assert_str_eq(cell(&t, i, "recompute_first"), "1");
            ck_assert_str_eq(cell(&t, i, "verdict"), "diverges here");
            ck_assert(num(&t, i, "recompute_over") > 0);
            ck_assert(num(&t, i, "recompute_max_abs") > num(&t, i, "recompute_slack"));
        } else if (strcmp(w, "carries rounding") == 0) {
            n_carry++;
            ck_assert_str_eq(cell(&t, i, "recompute_first"), "0");
            /* no element beyond one rounding (0.5 ulp of f16, 0 for f32) plus the slack */
            ck_assert_msg(num(&t, i, "recompute_over") == 0 && isfinite(num(&t, i, "recompute_max_abs")),
                          "%s", op);
            const char *bu = cell(&t, i, "recompute_bound_ulp");
            ck_assert_msg(strcmp(bu, strcmp(cell(&t, i, "dtype_b"), "f16") == 0 ? "0.5" : "0") == 0,
                          "%s: bound %s ulp", op, bu);
        }
    }
    ck_assert_int_eq(n_div, want_op ? 1 : 0);
    ck_assert_msg(n_carry > 5, "%d ops carry rounding", n_carry);
    csv_free(&t);
    tu_result_free(&r);

    r = RUN("--io", "outputs", "--format", "json", a, b);
    char want[512];
    if (want_op)
        snprintf(want, sizeof want, "\"beyond_rounding\": 1, \"not_recomputed\": 0, "
                 "\"not_recomputed_kinds\": \"\", \"bound_ulp\": 0.5, \"slack_of_largest\": "
                 "1.52587890625e-05, \"diverges_here\": {\"step\": 0, \"op\": \"%s\", \"op_type\": "
                 "\"%s\"", want_op, want_type);
    else
        snprintf(want, sizeof want, "\"beyond_rounding\": 0, \"not_recomputed\": 0, "
                 "\"not_recomputed_kinds\": \"\", \"bound_ulp\": 0.5, \"slack_of_largest\": "
                 "1.52587890625e-05, \"diverges_here\": null}");
    ck_assert_msg(strstr(r.out, "\"across_precisions\": {\"low\": \"b\", \"level\": \"O2 f16\"") &&
                      strstr(r.out, want), "%s\n%s", want, r.out);
    ck_assert_msg(strstr(r.out, "\"recompute\": {\"verdict\": \"carries rounding\", \"first\": false"),
                  "%s", r.out);
    tu_result_free(&r);
}

/* The MLP's verdict in CSV and JSON: fc2/linear diverges here, the rest carries rounding. */
START_TEST(test_amp_verdict_csv_json)
{
    char d[256], a[300], b[300], c[300];
    test_dir(d, sizeof d);
    snprintf(a, sizeof a, "%s/o0", d);
    snprintf(b, sizeof b, "%s/o2", d);
    snprintf(c, sizeof c, "%s/o2clean", d);
    mlp_amp_dump(a, "--amp O0");
    mlp_amp_dump(b, "--amp O2 --amp-dtype f16 --loss-scale 1 --inject scale@op=fc2/linear,step=0,value=2");
    mlp_amp_dump(c, "--amp O2 --amp-dtype f16 --loss-scale 1");
    assert_recompute(a, b, "fc2/linear", "Linear", " Linear Relu CrossEntropy ");
    assert_recompute(a, c, NULL, NULL, " Linear Relu CrossEntropy ");
    /* without a low-precision side there is no recomputation: null, empty columns */
    tu_result r = RUN("--format", "json", a, a);
    ck_assert_msg(strstr(r.out, "\"across_precisions\": null") && strstr(r.out, "\"recompute\": null") &&
                      !strstr(r.out, "\"recompute\": {"), "%s", r.out);
    tu_result_free(&r);
}
END_TEST

/* The CNN (conv, batch norm, pooling): every forward op is rebuilt from the
 * O2 run's own dump, and a fault in a convolution, a batch norm or a pool
 * is named exactly. */
START_TEST(test_amp_cnn)
{
    static const char *const cnn = "'%s/examples/cnn' --channels 4,4,4 --batch 4 --steps 1 "
                                   "--train-size 16 --threads 1 --log-every 100 %s "
                                   "--dump 'dir=%s;io=both' 2>&1";
    static const struct { const char *op, *type; } fault[] = {
        { "conv2/conv", "Conv2D" }, { "conv2/bn", "BatchNorm" }, { "maxpool", "MaxPool2D" },
    };
    const char *types = " Conv2D BatchNorm Relu MaxPool2D GlobalAvgPool Linear CrossEntropy Cast ";
    char d[256], a[300], b[300], flags[256];
    test_dir(d, sizeof d);
    snprintf(a, sizeof a, "%s/o0", d);
    ck_assert_msg(tu_shell(shell_out, sizeof shell_out, cnn, TDBG_BUILDDIR, "--amp O0", a) == 0, "%s",
                  shell_out);
    snprintf(b, sizeof b, "%s/o2", d);
    ck_assert_msg(tu_shell(shell_out, sizeof shell_out, cnn, TDBG_BUILDDIR,
                           "--amp O2 --amp-dtype f16 --loss-scale 1", b) == 0, "%s", shell_out);
    assert_recompute(a, b, NULL, NULL, types);
    for (size_t i = 0; i < sizeof fault / sizeof fault[0]; i++) {
        snprintf(b, sizeof b, "%s/fault%zu", d, i);
        snprintf(flags, sizeof flags, "--amp O2 --amp-dtype f16 --loss-scale 1 "
                 "--inject scale@op=%s,step=0,value=2", fault[i].op);
        ck_assert_msg(tu_shell(shell_out, sizeof shell_out, cnn, TDBG_BUILDDIR, flags, b) == 0, "%s",
                      shell_out);
        assert_recompute(a, b, fault[i].op, fault[i].type, types);
        tu_result r = RUN("--io", "outputs", a, b);
        char want[256];
        snprintf(want, sizeof want, "diverges here: step 0, %s (%s) out0", fault[i].op, fault[i].type);
        ck_assert_msg(strstr(r.out, want), "%s\n%s", want, r.out);
        tu_result_free(&r);
    }
}
END_TEST

/* A tiny GPT (one block, no dropout): attention, layer norm, GELU,
 * embeddings all rebuilt; a fault in the MLP's first linear is named. */
START_TEST(test_amp_gpt)
{
    static const char *const gpt = "'%s/examples/gpt' --layers 1 --heads 2 --embd 16 --block 8 "
                                   "--batch 2 --steps 2 --warmup 0 --eval-every 0 --threads 1 "
                                   "--dropout 0 %s --dump 'dir=%s;io=both;steps=0' 2>&1";
    const char *types = " Linear LayerNorm Gelu Softmax MaskedFill Embedding MatMul Add Scale "
                        "Transpose Reshape CrossEntropy ";
    char d[256], a[300], b[300], c[300];
    test_dir(d, sizeof d);
    snprintf(a, sizeof a, "%s/o0", d);
    snprintf(b, sizeof b, "%s/o2", d);
    snprintf(c, sizeof c, "%s/fault", d);
    ck_assert_msg(tu_shell(shell_out, sizeof shell_out, gpt, TDBG_BUILDDIR, "--amp O0", a) == 0, "%s",
                  shell_out);
    ck_assert_msg(tu_shell(shell_out, sizeof shell_out, gpt, TDBG_BUILDDIR,
                           "--amp O2 --amp-dtype f16 --loss-scale 1", b) == 0, "%s", shell_out);
    ck_assert_msg(tu_shell(shell_out, sizeof shell_out, gpt, TDBG_BUILDDIR,
                           "--amp O2 --amp-dtype f16 --loss-scale 1 "
                           "--inject scale@op=h0/mlp/c_fc,step=0,value=2", c) == 0, "%s", shell_out);
    assert_recompute(a, b, NULL, NULL, types);
    assert_recompute(a, c, "h0/mlp/c_fc", "Linear", types);
}
END_TEST

/* The tolerance across dtypes at its edge: k ulps of the lower precision
 * (plus atol) pass, k + 1 fail; the lanes (4 at a time) and the tail agree. */
START_TEST(test_amp_ulp_tolerance_edge)
{
    static const struct { te_dtype dt; float ref; uint16_t at_k, past_k; } c[] = {
        { TE_F16, 1.0f, 0x3C00 + 8, 0x3C00 + 9 },      /* ulp at 1: 2^-10 */
        { TE_BF16, 3.0f, 0x4040 + 8, 0x4040 + 9 },     /* ulp at 3: 2^-6 */
        { TE_F16, -0.25f, 0xB400 + 8, 0xB400 + 9 },    /* ulp at 0.25: 2^-12 */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        diff_tol t = diff_tol_for(TE_F32, c[i].dt, (diff_tol){ 0, -1, -1, TE_F32 });
        ck_assert(t.ulp == DIFF_ULP_K && t.rtol == 0 && t.ulp_dt == c[i].dt);
        ck_assert(DIFF_ULP_K == 8);
        float a[5];
        uint16_t in[5], out[5];
        for (int k = 0; k < 5; k++) {
            a[k] = c[i].ref;
            in[k] = c[i].at_k;
            out[k] = c[i].past_k;
        }
        diff_acc acc;
        diff_acc_init(&acc, false);
        diff_acc_add(&acc, a, TE_F32, in, c[i].dt, 0, 5, t);
        ck_assert_msg(acc.n_fail == 0, "case %zu: %lld fail at k ulp", i, (long long)acc.n_fail);
        diff_acc_init(&acc, false);
        diff_acc_add(&acc, a, TE_F32, out, c[i].dt, 0, 5, t);
        ck_assert_msg(acc.n_fail == 5, "case %zu: %lld fail at k+1 ulp", i, (long long)acc.n_fail);
        /* same-dtype pairs keep their tolerances: no ULP term */
        ck_assert(diff_tol_for(c[i].dt, c[i].dt, (diff_tol){ -1, -1, -1, TE_F32 }).ulp == 0);
    }
    ck_assert(diff_tol_for(TE_F32, TE_F32, (diff_tol){ -1, -1, -1, TE_F32 }).rtol == 1.3e-6);
    ck_assert(diff_ulp_low(TE_F16, 1.0) == 0x1p-10 && diff_ulp_low(TE_F16, 1e-6) == 0x1p-24);
    ck_assert(diff_ulp_low(TE_BF16, 1.5) == 0x1p-7);
}
END_TEST

Suite *suite_tdbg_diff(void)
{
    Suite *s = suite_create("tdbg_diff");
    TCase *tc = tcase_create("runs");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, suite_dir_make, suite_dir_remove);
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_run_against_itself);
    tcase_add_test(tc, test_eager_vs_graph);
    tcase_add_test(tc, test_reference_kernels_vs_onednn);
    tcase_add_test(tc, test_injected_noise);
    tcase_add_test(tc, test_injected_backward_scale);
    tcase_add_test(tc, test_injected_accumulation);
    tcase_add_test(tc, test_injected_outputs_only);
    tcase_add_test(tc, test_injected_fused_kernel);
    suite_add_tcase(s, tc);

    tc = tcase_create("amp");   /* no engine fixture: the recomputation starts its own */
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, suite_dir_make, suite_dir_remove);
    tcase_add_test(tc, test_amp_diverges_here);
    tcase_add_test(tc, test_amp_clean_rounding_only);
    tcase_add_test(tc, test_amp_verdict_csv_json);
    tcase_add_test(tc, test_amp_cnn);
    tcase_add_test(tc, test_amp_gpt);
    tcase_add_test(tc, test_amp_ulp_tolerance_edge);
    suite_add_tcase(s, tc);

    tc = tcase_create("files");
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, suite_dir_make, suite_dir_remove);
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_metrics_small);
    tcase_add_test(tc, test_metrics_large_streamed);
    tcase_add_test(tc, test_half_against_f32);
    tcase_add_test(tc, test_nan_one_side);
    tcase_add_test(tc, test_inplace_column);
    tcase_add_test(tc, test_reads_column);
    tcase_add_test(tc, test_shapes_and_one_side);
    tcase_add_test(tc, test_fused_intermediates_same);
    tcase_add_test(tc, test_steps_intersected);
    tcase_add_test(tc, test_map_renames);
    tcase_add_test(tc, test_json_and_color);
    tcase_add_test(tc, test_damaged_chunk);
    tcase_add_test(tc, test_crc_damage);
    tcase_add_test(tc, test_truncated_and_missing);
    tcase_add_test(tc, test_version_mismatch);
    tcase_add_test(tc, test_bad_usage);
    tcase_add_test(tc, test_program_exit_status);
    suite_add_tcase(s, tc);
    return s;
}
