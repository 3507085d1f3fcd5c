/* test_tdbg_dump.c — the `tdbg-dump` inspector (dump/tdbg_dump.c), run in
 * process on dumps written here with h5file.h: listings, printing with
 * slices, statistics, NPY export (checked byte by byte, and by numpy.load
 * where /usr/bin/python3 has numpy), verification and usage errors. */
#include "crcdamage.h"
#include "dump.h"
#include "h5file.h"
#include "suites.h"
#include "testutil.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* ---- helpers ------------------------------------------------------------ */

/* Each test works in its own directory under suite_dir, which the unchecked
 * teardown removes even when a test failed. */
static char suite_dir[64];

static void suite_dir_make(void) { tu_scratch_make(suite_dir, sizeof suite_dir, "tdbg-dumpcli"); }
static void suite_dir_remove(void) { tu_scratch_remove(suite_dir); }
static char *test_dir(char *buf, size_t n) { return tu_scratch_sub(suite_dir, buf, n); }

/* Runs `tdbg-dump ARGS...` in this process. */
#define RUN(...) tu_run_tool(tdbg_dump_main, "tdbg-dump", (const char *const[]){ __VA_ARGS__, NULL })

#define assert_text(got, want) \
    ck_assert_msg(strcmp((got), (want)) == 0, "got:\n%s\nwant:\n%s", (got), (want))

static void add(dump_step_writer *w, dump_tensor_info ti, const void *data)
{
    char err[512] = "";
    ck_assert_msg(dump_step_add_raw(w, &ti, data, err, sizeof err), "add %s: %s", ti.op, err);
}

static dump_step_writer *create(const char *dir, int64_t step)
{
    char err[512] = "";
    dump_step_writer *w = dump_step_create(dir, step, 0, err, sizeof err);
    ck_assert_msg(w != NULL, "dump_step_create: %s", err);
    return w;
}

static void commit(dump_step_writer *w)
{
    char err[512] = "";
    ck_assert_msg(dump_step_commit(w, err, sizeof err), "dump_step_commit: %s", err);
}

#define SH(...) te_shape(__VA_ARGS__)

/* The values of step 1. */
static const float x_in[2] = { 1, 2 };
static const float fc1_out[6] = { -1.5f, 0, 2, 3.25f, 4, 1e-7f };
static const float cast_f32[4] = { 0.5f, -2, INFINITY, 0 };
static const int32_t labels[3] = { 3, -7, 100000 };
static const float loss = 2.5f;
static const float weight_f32[4] = { 1, -0.5f, 0.25f, 3 };

/* A run: run.h5; step 1 with f32/f16/i32/0-d/bf16 tensors; step 2 with a
 * NaN; step 3 holding statistics only. */
static void write_run(const char *dir)
{
    char err[512] = "";
    dump_run_meta m = { .mode = TE_MODE_EAGER, .seed = 42 };
    snprintf(m.engine_version, sizeof m.engine_version, "0.1.0");
    snprintf(m.amp, sizeof m.amp, "none");
    snprintf(m.backend, sizeof m.backend, "cpu");
    snprintf(m.command_line, sizeof m.command_line, "./mlp --steps 2");
    snprintf(m.created, sizeof m.created, "2024-05-01T12:00:00Z");
    dump_op_row op = { .exec = 0, .phase = TE_PHASE_FORWARD, .line = 40 };
    snprintf(op.name, sizeof op.name, "fc1/linear");
    snprintf(op.type, sizeof op.type, "Linear");
    ck_assert_msg(dump_run_write(dir, &m, &op, 1, err, sizeof err), "run.h5: %s", err);

    uint16_t cast[4], weight[4];
    for (int i = 0; i < 4; i++) {
        cast[i] = te_f32_to_f16(cast_f32[i]);
        weight[i] = te_f32_to_bf16(weight_f32[i]);
    }
    dump_step_writer *w = create(dir, 1);
    add(w, tu_dump_info("fc1/linear", "Linear", DUMP_IN, 0, 0, TE_PHASE_FORWARD, "input:x", TE_F32,
                SH(2)), x_in);
    add(w, tu_dump_info("fc1/linear", "Linear", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "fc1/linear:out0",
                TE_F32, SH(2, 3)), fc1_out);
    add(w, tu_dump_info("fc1/cast", "Cast", DUMP_OUT, 0, 1, TE_PHASE_FORWARD, "fc1/cast:out0", TE_F16,
                SH(4)), cast);
    add(w, tu_dump_info("data", "Data", DUMP_OUT, 0, 2, TE_PHASE_FORWARD, "data:out0", TE_I32, SH(3)),
        labels);
    add(w, tu_dump_info("loss/mse", "MSELoss", DUMP_OUT, 0, 3, TE_PHASE_FORWARD, "loss/mse:out0",
                TE_F32, 0, NULL), &loss);
    add(w, tu_dump_info("param/fc1.weight", "Param", DUMP_OUT, 0, 4, TE_PHASE_UPDATE,
                "param:fc1.weight", TE_BF16, SH(2, 2)), weight);
    commit(w);

    const float fc1_2[6] = { 10, NAN, -20, 0, 0, 5 };
    for (int i = 0; i < 4; i++)
        weight[i] = te_f32_to_bf16(weight_f32[i] * 2);
    w = create(dir, 2);
    add(w, tu_dump_info("fc1/linear", "Linear", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "fc1/linear:out0",
                TE_F32, SH(2, 3)), fc1_2);
    add(w, tu_dump_info("param/fc1.weight", "Param", DUMP_OUT, 0, 4, TE_PHASE_UPDATE,
                "param:fc1.weight", TE_BF16, SH(2, 2)), weight);
    commit(w);

    dump_stats_row row = { .io = DUMP_OUT, .min = -3, .max = 7, .mean = 1.25, .std = 2.5,
                           .abs_max = 7, .l2norm = 12, .nan = 1, .zero_frac = 0.25 };
    snprintf(row.op, sizeof row.op, "fc1/linear");
    w = create(dir, 3);
    ck_assert_msg(dump_step_add_stats(w, &row, 1, err, sizeof err), "stats: %s", err);
    commit(w);
}

/* A leftover tmp file, as a writer killed inside step `step` leaves it. */
static void leave_tmp(const char *dir, int step)
{
    char path[256];
    snprintf(path, sizeof path, "%s/.step-%08d.h5.tmp", dir, step);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fclose(f);
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    unsigned char *buf = malloc(4096);
    *len = fread(buf, 1, 4096, f);
    fclose(f);
    return buf;
}

/* Checks an .npy file: its 64-byte-aligned header holds exactly dict, and
 * the data that follows is data (n bytes). */
static void assert_npy(const char *path, const char *dict, const void *data, size_t n)
{
    size_t len, hlen = 10 + strlen(dict) + 1;
    hlen += (64 - hlen % 64) % 64;
    unsigned char *b = read_all(path, &len);
    ck_assert_msg(len == hlen + n, "%s: %zu bytes, expected %zu", path, len, hlen + n);
    ck_assert(memcmp(b, "\x93NUMPY\x01\x00", 8) == 0);
    ck_assert_int_eq(b[8] | b[9] << 8, (int)(hlen - 10));
    ck_assert_msg(memcmp(b + 10, dict, strlen(dict)) == 0, "%s: header %.*s", path,
                  (int)strlen(dict), (const char *)b + 10);
    for (size_t i = 10 + strlen(dict); i < hlen - 1; i++)
        ck_assert_int_eq(b[i], ' ');
    ck_assert_int_eq(b[hlen - 1], '\n');
    ck_assert_msg(memcmp(b + hlen, data, n) == 0, "%s: data differs", path);
    free(b);
}

/* ---- ls ------------------------------------------------------------------ */

START_TEST(test_ls_lists_steps)
{
    char dir[128];
    write_run(test_dir(dir, sizeof dir));
    tu_result r = RUN("ls", dir);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    assert_text(r.out,
                "run: mode eager, backend cpu, amp none, seed 42, engine 0.1.0, created "
                "2024-05-01T12:00:00Z\n"
                "command: ./mlp --steps 2\n"
                "step 1:\n"
                "  /fc1/linear/in0         Linear   in0   f32   [2]    8 B\n"
                "  /fc1/linear/out0        Linear   out0  f32   [2,3]  24 B\n"
                "  /fc1/cast/out0          Cast     out0  f16   [4]    8 B\n"
                "  /data/out0              Data     out0  i32   [3]    12 B\n"
                "  /loss/mse/out0          MSELoss  out0  f32   []     4 B\n"
                "  /param/fc1.weight/out0  Param    out0  bf16  [2,2]  8 B\n"
                "step 2:\n"
                "  /fc1/linear/out0        Linear  out0  f32   [2,3]  24 B\n"
                "  /param/fc1.weight/out0  Param   out0  bf16  [2,2]  8 B\n"
                "step 3:\n"
                "  /fc1/linear/out0  statistics only\n"
                "3 steps, 9 tensors, 0.00 MB\n");
    assert_text(r.err, "");
    tu_result_free(&r);
}
END_TEST

/* run.h5's peak_bytes, in ls's header; files without it have no such line. */
START_TEST(test_ls_peak_memory)
{
    char dir[128], err[512] = "";
    test_dir(dir, sizeof dir);
    dump_run_meta m = { .mode = TE_MODE_EAGER, .seed = 7, .peak_bytes = 123456789 };
    snprintf(m.engine_version, sizeof m.engine_version, "0.1.0");
    snprintf(m.amp, sizeof m.amp, "none");
    snprintf(m.backend, sizeof m.backend, "cpu");
    snprintf(m.created, sizeof m.created, "2024-05-01T12:00:00Z");
    ck_assert_msg(dump_run_write(dir, &m, NULL, 0, err, sizeof err), "run.h5: %s", err);
    dump_run_meta back;
    dump_op_row *ops = NULL;
    int n_ops = -1;
    ck_assert_msg(dump_run_read(dir, &back, &ops, &n_ops, err, sizeof err), "%s", err);
    free(ops);
    ck_assert_uint_eq(back.peak_bytes, 123456789);
    tu_result r = RUN("ls", dir);
    ck_assert_msg(strstr(r.out, "created 2024-05-01T12:00:00Z\nmemory: peak 123456789 bytes (117.7 MiB)\n"),
                  "rc %d: %s", r.rc, r.out);
    tu_result_free(&r);
    write_run(test_dir(dir, sizeof dir)); /* none */
    r = RUN("ls", dir);
    ck_assert_msg(!strstr(r.out, "memory:"), "%s", r.out);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_ls_incomplete_step)
{
    char dir[128], path[256];
    write_run(test_dir(dir, sizeof dir));
    leave_tmp(dir, 2);   /* after step-00000002.h5 */
    leave_tmp(dir, 7);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    ck_assert(remove(path) == 0);
    tu_result r = RUN("ls", dir);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strncmp(r.out, "step 1:\n", 8) == 0, "%s", r.out);   /* no run lines */
    ck_assert_msg(strstr(r.out, "step 2:\n  /fc1/linear/out0 ") &&
                  strstr(r.out, "step 2: incomplete (the writer stopped inside it)\nstep 3:\n") &&
                  strstr(r.out, "statistics only\n"
                                "step 7: incomplete (the writer stopped inside it)\n"
                                "3 steps, 9 tensors, 0.00 MB\n"), "%s", r.out);
    char want[512];
    snprintf(want, sizeof want, "tdbg-dump: warning: %s: no run.h5 (the run's mode, seed and "
             "command line are unknown)\n", dir);
    ck_assert_msg(strncmp(r.err, want, strlen(want)) == 0, "%s", r.err);
    snprintf(want, sizeof want, "tdbg-dump: warning: %s/.step-00000007.h5.tmp: step 7 is "
             "incomplete (the writer stopped inside it), skipped\n", dir);
    ck_assert_msg(strstr(r.err, want) != NULL, "%s", r.err);
    tu_result_free(&r);
}
END_TEST

/* ---- show ---------------------------------------------------------------- */

START_TEST(test_show_by_path)
{
    char dir[128];
    write_run(test_dir(dir, sizeof dir));
    const char *want =
        "fc1/linear:out0  /fc1/linear/out0  step 1  f32 [2,3]\n"
        "op fc1/linear (Linear), forward, out0, exec 0, at examples/mlp.c:40\n"
        "[[ -1.5     0     2]\n"
        " [ 3.25     4 1e-07]]\n";
    tu_result r = RUN("show", dir, "/fc1/linear/out0");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    assert_text(r.out, want);
    tu_result_free(&r);
    r = RUN("show", dir, "fc1/linear/out0", "--step", "1");   /* '/' optional */
    assert_text(r.out, want);
    tu_result_free(&r);
    r = RUN("show", dir, "/data/out0");   /* i32 printed as integers */
    ck_assert_msg(strstr(r.out, "exec 2, at examples/mlp.c:42\n[     3     -7 100000]\n"),
                  "%s", r.out);
    tu_result_free(&r);
    r = RUN("show", dir, "fc1/cast:out0");   /* f16 with an inf */
    ck_assert_msg(strstr(r.out, "f16 [4]\n") && strstr(r.out, "\n[0.5  -2 inf   0]\n"),
                  "%s", r.out);
    tu_result_free(&r);
    r = RUN("show", dir, "/loss/mse/out0");   /* 0-d */
    ck_assert_msg(strstr(r.out, "step 1  f32 []\n") && strstr(r.out, ":43\n2.5\n"), "%s", r.out);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_show_by_name_with_slices)
{
    char dir[128];
    write_run(test_dir(dir, sizeof dir));
    tu_result r = RUN("show", dir, "fc1/linear:out0", "--step", "2", "[1, 0:3:2]");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    assert_text(r.out,
                "fc1/linear:out0  /fc1/linear/out0  step 2  f32 [2,3]\n"
                "op fc1/linear (Linear), forward, out0, exec 0, at examples/mlp.c:40\n"
                "slice [1, 0:3:2] -> [2]\n"
                "[0 5]\n");
    tu_result_free(&r);
    r = RUN("show", dir, "fc1/linear:out0[:, 1]", "--step=2");   /* NaN, slice attached */
    ck_assert_msg(strstr(r.out, "slice [:, 1] -> [2]\n[nan   0]\n"), "%s", r.out);
    tu_result_free(&r);
    r = RUN("show", dir, "fc1/linear:out0", "[-1,", "::-1]");   /* unquoted, in pieces */
    ck_assert_msg(strstr(r.out, "step 1  f32 [2,3]\n") &&
                  strstr(r.out, "slice [-1, ::-1] -> [3]\n[1e-07     4  3.25]\n"), "%s", r.out);
    tu_result_free(&r);
    r = RUN("show", dir, "param:fc1.weight", "--step", "2");   /* bf16 */
    assert_text(r.out,
                "param:fc1.weight  /param/fc1.weight/out0  step 2  bf16 [2,2]\n"
                "op param/fc1.weight (Param), update, out0, exec 4, at examples/mlp.c:44\n"
                "[[  2  -1]\n"
                " [0.5   6]]\n");
    tu_result_free(&r);
}
END_TEST

START_TEST(test_show_elides_long_dims)
{
    char dir[128];
    test_dir(dir, sizeof dir);
    float v[40 * 40];
    for (int i = 0; i < 40 * 40; i++)
        v[i] = (float)i;
    dump_step_writer *w = create(dir, 0);
    add(w, tu_dump_info("big", "Big", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "big:out0", TE_F32, SH(40, 40)),
        v);
    commit(w);
    tu_result r = RUN("show", dir, "big:out0");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    const char *body = strstr(r.out, "\n[[");
    ck_assert_msg(body != NULL, "%s", r.out);
    assert_text(body + 1,
                "[[   0    1    2 ...   37   38   39]\n"
                " [  40   41   42 ...   77   78   79]\n"
                " [  80   81   82 ...  117  118  119]\n"
                " ...\n"
                " [1480 1481 1482 ... 1517 1518 1519]\n"
                " [1520 1521 1522 ... 1557 1558 1559]\n"
                " [1560 1561 1562 ... 1597 1598 1599]]\n");
    tu_result_free(&r);
    r = RUN("show", dir, "big:out0", "[5, 10:14]");   /* 4 elements: none cut */
    ck_assert_msg(strstr(r.out, "-> [4]\n[210 211 212 213]\n"), "%s", r.out);
    tu_result_free(&r);
    r = RUN("show", dir, "big:out0", "[0]");   /* a long row wraps as numpy's does */
    ck_assert_msg(strstr(r.out, "-> [40]\n"
                  "[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n"
                  " 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39]\n"), "%s", r.out);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_show_errors)
{
    char dir[128];
    write_run(test_dir(dir, sizeof dir));
    char want[256];
    tu_result r = RUN("show", dir, "fc9/linear:out0");
    ck_assert_int_eq(r.rc, 1);
    snprintf(want, sizeof want, "tdbg-dump: %s: no tensor 'fc9/linear:out0' in any step (did you "
             "mean fc1/linear:out0?)\n", dir);
    assert_text(r.err, want);
    tu_result_free(&r);
    r = RUN("show", dir, "/data/out0", "--step", "2");
    ck_assert_int_eq(r.rc, 1);
    snprintf(want, sizeof want, "tdbg-dump: %s: no tensor '/data/out0' in step 2\n", dir);
    assert_text(r.err, want);
    tu_result_free(&r);
    r = RUN("show", dir, "/data/out0", "--step", "9");
    ck_assert_int_eq(r.rc, 1);
    snprintf(want, sizeof want, "tdbg-dump: %s: no step 9\n", dir);
    assert_text(r.err, want);
    tu_result_free(&r);
    r = RUN("show", dir, "/fc1/linear/out0", "[0, 3]");
    ck_assert_int_eq(r.rc, 2);
    assert_text(r.err, "tdbg-dump: /fc1/linear/out0: index 3 is out of range for dim 1 of "
                       "size 3\n");
    tu_result_free(&r);
    r = RUN("show", dir, "/fc1/linear/out0", "[0, x]");
    ck_assert_int_eq(r.rc, 2);
    assert_text(r.err, "tdbg-dump: bad slice '[0, x]' at 'x]' (write it like numpy: "
                       "[0, 1:3, ::2])\n");
    ck_assert_str_eq(r.out, "");
    tu_result_free(&r);
    r = RUN("show", dir, "/fc1/linear/out0", "[0, 0, 0]");
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.err, "3 slices for a tensor of 2 dims"), "%s", r.err);
    tu_result_free(&r);
}
END_TEST

/* A step as the debugger names it: a batch norm's inputs, a parameter and
 * its gradient (pseudo-ops without an exec index) and a real backward op
 * "grad/loss" whose name looks like a gradient's. */
static void write_named(const char *dir)
{
    static const float x[4] = { 1, 2, 3, 4 }, g[2] = { 0.5f, -0.5f }, w[2] = { 7, 8 };
    dump_step_writer *wr = create(dir, 1);
    add(wr, tu_dump_info("conv2/bn", "BatchNorm", DUMP_IN, 0, 4, TE_PHASE_FORWARD, "conv2/conv:out0",
                 TE_F32, SH(2, 2)), x);
    add(wr, tu_dump_info("conv2/bn", "BatchNorm", DUMP_IN, 1, 4, TE_PHASE_FORWARD, "param:bn.weight",
                 TE_F32, SH(2)), w);
    add(wr, tu_dump_info("grad/loss", "LossGrad", DUMP_OUT, 0, 5, TE_PHASE_BACKWARD, "grad/loss:out0",
                 TE_F32, SH(2)), g);
    add(wr, tu_dump_info("param/bn.weight", "Parameter", DUMP_OUT, 0, -1, TE_PHASE_UPDATE,
                 "param:bn.weight", TE_F32, SH(2)), w);
    add(wr, tu_dump_info("grad/bn.weight", "Gradient", DUMP_OUT, 0, -1, TE_PHASE_UPDATE,
                 "grad:bn.weight", TE_F32, SH(2)), g);
    commit(wr);
}

/* The debugger's names and the dataset paths give the same tensor. */
START_TEST(test_names_both_spellings)
{
    char dir[128];
    write_named(test_dir(dir, sizeof dir));
    static const char *const pairs[][2] = {
        { "conv2/bn:in0", "/conv2/bn/in0" },
        { "conv2/bn:in1", "conv2/bn/in1" },
        { "param:bn.weight", "/param/bn.weight/out0" },
        { "grad:bn.weight", "/grad/bn.weight/out0" },
        { "grad/loss:out0", "/grad/loss/out0" },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        tu_result a = RUN("show", dir, pairs[i][0], "--step", "1"), b = RUN("show", dir, pairs[i][1]);
        ck_assert_msg(a.rc == 0 && b.rc == 0, "%s: rc %d %d: %s%s", pairs[i][0], a.rc, b.rc, a.err, b.err);
        ck_assert_msg(strstr(a.out, pairs[i][1][0] == '/' ? pairs[i][1] : "/conv2/bn/in1"), "%s", a.out);
        assert_text(a.out, b.out);
        tu_result_free(&a);
        tu_result_free(&b);
    }
    tu_result r = RUN("show", dir, "conv2/bn:in0");
    assert_text(r.out, "conv2/conv:out0  /conv2/bn/in0  step 1  f32 [2,2]\n"
                       "op conv2/bn (BatchNorm), forward, in0, exec 4, at examples/mlp.c:44\n"
                       "[[1 2]\n"
                       " [3 4]]\n");
    tu_result_free(&r);
    /* a real backward op is not a gradient: grad:loss names nothing */
    r = RUN("show", dir, "grad:loss");
    ck_assert_int_eq(r.rc, 1);
    tu_result_free(&r);
    /* globs: either spelling selects the same tensors */
    tu_result a = RUN("stats", dir, "conv2/bn:in*"), b = RUN("stats", dir, "/conv2/bn/in*");
    ck_assert_msg(a.rc == 0 && strstr(a.out, "/conv2/bn/in0 ") && strstr(a.out, "/conv2/bn/in1 "),
                  "rc %d: %s%s", a.rc, a.out, a.err);
    assert_text(a.out, b.out);
    tu_result_free(&a);
    tu_result_free(&b);
    char npy[160];
    snprintf(npy, sizeof npy, "%s/npy", dir);
    r = RUN("export", dir, "--npy", npy, "grad:bn.weight");
    ck_assert_msg(r.rc == 0 && strstr(r.out, "exported 1 tensors"), "rc %d: %s%s", r.rc, r.out, r.err);
    tu_result_free(&r);
}
END_TEST

/* A wrong name suggests the nearest, spelled as the user spelled it. */
START_TEST(test_names_suggest)
{
    char dir[128], want[512];
    write_named(test_dir(dir, sizeof dir));
    tu_result r = RUN("show", dir, "conv2/bn:in3", "--step", "1");
    ck_assert_int_eq(r.rc, 1);
    snprintf(want, sizeof want, "tdbg-dump: %s: no tensor 'conv2/bn:in3' in step 1 (did you mean "
             "conv2/bn:in0?)\n", dir);
    assert_text(r.err, want);
    tu_result_free(&r);
    r = RUN("show", dir, "/conv2/bm/in1");
    snprintf(want, sizeof want, "tdbg-dump: %s: no tensor '/conv2/bm/in1' in any step (did you mean "
             "/conv2/bn/in1?)\n", dir);
    assert_text(r.err, want);
    tu_result_free(&r);
    r = RUN("stats", dir, "gard:bn.weight");
    ck_assert_int_eq(r.rc, 1);
    ck_assert_msg(strstr(r.err, ": no tensor matches 'gard:bn.weight' (did you mean grad:bn.weight?)\n"),
                  "%s", r.err);
    tu_result_free(&r);
    r = RUN("show", dir, "nothing/like/it");   /* nothing near: no suggestion */
    snprintf(want, sizeof want, "tdbg-dump: %s: no tensor 'nothing/like/it' in any step\n", dir);
    assert_text(r.err, want);
    tu_result_free(&r);
}
END_TEST

/* ---- stats --------------------------------------------------------------- */

START_TEST(test_stats_values)
{
    char dir[128];
    write_run(test_dir(dir, sizeof dir));
    tu_result r = RUN("stats", dir, "--step", "1", "/fc1/*");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    /* out0: mean 7.75/6, population std, l2norm sqrt(32.8125); the f16 inf
     * is counted and left out of the rest */
    assert_text(r.out,
                "step 1:\n"
                "  /fc1/linear/in0 f32 [2]     min 1 max 2 mean 1.5 std 0.5 abs_max 2 "
                "l2norm 2.23607 nan 0 inf 0 zero 0.0%\n"
                "  /fc1/linear/out0 f32 [2,3]  min -1.5 max 4 mean 1.29167 std 1.94945 "
                "abs_max 4 l2norm 5.72822 nan 0 inf 0 zero 16.7%\n"
                "  /fc1/cast/out0 f16 [4]      min -2 max 0.5 mean -0.5 std 1.08012 abs_max 2 "
                "l2norm 2.06155 nan 0 inf 1 zero 25.0%\n");
    tu_result_free(&r);
    r = RUN("stats", dir, "param:*");   /* every step, by tensor name */
    assert_text(r.out,
                "step 1:\n"
                "  /param/fc1.weight/out0 bf16 [2,2]  min -0.5 max 3 mean 0.9375 std 1.30354 "
                "abs_max 3 l2norm 3.21131 nan 0 inf 0 zero 0.0%\n"
                "step 2:\n"
                "  /param/fc1.weight/out0 bf16 [2,2]  min -1 max 6 mean 1.875 std 2.60708 "
                "abs_max 6 l2norm 6.42262 nan 0 inf 0 zero 0.0%\n");
    tu_result_free(&r);
}
END_TEST

START_TEST(test_stats_stored_rows)
{
    char dir[128];
    write_run(test_dir(dir, sizeof dir));
    tu_result r = RUN("stats", dir, "fc1/linear:out0");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    assert_text(r.out,
                "step 1:\n"
                "  /fc1/linear/out0 f32 [2,3]  min -1.5 max 4 mean 1.29167 std 1.94945 "
                "abs_max 4 l2norm 5.72822 nan 0 inf 0 zero 16.7%\n"
                "step 2:\n"
                "  /fc1/linear/out0 f32 [2,3]  min -20 max 10 mean -1 std 10.198 abs_max 20 "
                "l2norm 22.9129 nan 1 inf 0 zero 33.3%\n"
                "step 3:\n"
                "  /fc1/linear/out0 (stored)  min -3 max 7 mean 1.25 std 2.5 abs_max 7 "
                "l2norm 12 nan 1 inf 0 zero 25.0%\n");
    tu_result_free(&r);
    r = RUN("stats", dir, "--step", "2", "nothing*");
    ck_assert_int_eq(r.rc, 1);
    ck_assert_str_eq(r.out, "");
    ck_assert_msg(strstr(r.err, ": no tensor matches 'nothing*'\n"), "%s", r.err);
    tu_result_free(&r);
}
END_TEST

/* ---- export -------------------------------------------------------------- */

START_TEST(test_export_npy_bytes)
{
    char dir[128], out[256], path[320];
    write_run(test_dir(dir, sizeof dir));
    snprintf(out, sizeof out, "%s/npy/deep", dir);   /* made with its parents */
    tu_result r = RUN("export", dir, "--npy", out, "--step", "1");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    char want[2048];
    snprintf(want, sizeof want,
             "%s/step-1/fc1.linear.in0.npy\n%s/step-1/fc1.linear.out0.npy\n"
             "%s/step-1/fc1.cast.out0.npy\n%s/step-1/data.out0.npy\n"
             "%s/step-1/loss.mse.out0.npy\n%s/step-1/param.fc1.weight.out0.npy\n"
             "exported 6 tensors to %s\n", out, out, out, out, out, out, out);
    assert_text(r.out, want);
    tu_result_free(&r);
    snprintf(path, sizeof path, "%s/step-1/fc1.linear.out0.npy", out);
    assert_npy(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", fc1_out,
               sizeof fc1_out);
    uint16_t h[4];
    for (int i = 0; i < 4; i++)
        h[i] = te_f32_to_f16(cast_f32[i]);
    snprintf(path, sizeof path, "%s/step-1/fc1.cast.out0.npy", out);
    assert_npy(path, "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", h, sizeof h);
    for (int i = 0; i < 4; i++)
        h[i] = te_f32_to_bf16(weight_f32[i]);
    snprintf(path, sizeof path, "%s/step-1/param.fc1.weight.out0.npy", out);
    assert_npy(path, "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 2), }", h, sizeof h);
    snprintf(path, sizeof path, "%s/step-1/data.out0.npy", out);
    assert_npy(path, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", labels,
               sizeof labels);
    snprintf(path, sizeof path, "%s/step-1/loss.mse.out0.npy", out);
    assert_npy(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", &loss,
               sizeof loss);
    snprintf(path, sizeof path, "%s/step-2", out);   /* --step 1 only */
    ck_assert(access(path, F_OK) != 0);
}
END_TEST

START_TEST(test_export_numpy_load)
{
    if (system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
        tdbg_skip("tdbg_dump", "numpy not found for /usr/bin/python3 (apt-get install python3-numpy)");
        return;
    }
    char dir[128], out[256], text[4096];
    write_run(test_dir(dir, sizeof dir));
    snprintf(out, sizeof out, "%s/npy", dir);
    tu_result r = RUN("export", dir, "--npy", out, "param*");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, "exported 2 tensors to "), "%s", r.out);
    tu_result_free(&r);
    r = RUN("export", dir, "--npy", out, "--step", "1");
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.err);
    tu_result_free(&r);
    int status = tu_shell(text, sizeof text,
             "cd '%s' && /usr/bin/python3 -c '\n"
             "import numpy as np\n"
             "a = np.load(\"step-1/fc1.linear.out0.npy\")\n"
             "assert a.dtype == np.float32 and a.shape == (2, 3), (a.dtype, a.shape)\n"
             "assert a.tolist() == np.array([[-1.5, 0, 2], [3.25, 4, 1e-7]], np.float32).tolist()\n"
             "h = np.load(\"step-1/fc1.cast.out0.npy\")\n"
             "assert h.dtype == np.float16 and h.tolist() == [0.5, -2, np.inf, 0], h\n"
             "i = np.load(\"step-1/data.out0.npy\")\n"
             "assert i.dtype == np.int32 and i.tolist() == [3, -7, 100000], i\n"
             "s = np.load(\"step-1/loss.mse.out0.npy\")\n"
             "assert s.shape == () and s == 2.5, s\n"
             "for step, k in ((1, 1), (2, 2)):\n"
             "    b = np.load(\"step-%%d/param.fc1.weight.out0.npy\" %% step)\n"
             "    f = (b.astype(np.uint32) << 16).view(np.float32)\n"
             "    assert b.dtype == np.uint16, b.dtype\n"
             "    assert f.tolist() == [[k, -0.5 * k], [0.25 * k, 3 * k]], f\n"
             "print(\"numpy ok\")\n' 2>&1", out);
    ck_assert_msg(status == 0 && strcmp(text, "numpy ok\n") == 0, "python: %s", text);
}
END_TEST

START_TEST(test_export_errors)
{
    char dir[128], out[256], want[512];
    write_run(test_dir(dir, sizeof dir));
    snprintf(out, sizeof out, "%s/file", dir);
    fclose(fopen(out, "w"));   /* a file where OUTDIR's parent should be */
    snprintf(out, sizeof out, "%s/file/npy", dir);
    tu_result r = RUN("export", dir, "--npy", out);
    ck_assert_int_eq(r.rc, 2);
    snprintf(want, sizeof want, "tdbg-dump: %s/file: exists and is not a directory\n", dir);
    assert_text(r.err, want);
    tu_result_free(&r);
    r = RUN("export", dir, "--npy", out, "--step", "3");   /* statistics only */
    ck_assert_int_eq(r.rc, 1);
    ck_assert_msg(strstr(r.err, ": nothing to export\n"), "%s", r.err);
    tu_result_free(&r);
}
END_TEST

/* ---- verify -------------------------------------------------------------- */

START_TEST(test_verify_good_and_incomplete)
{
    char dir[128], want[512];
    write_run(test_dir(dir, sizeof dir));
    tu_result r = RUN("verify", dir);
    ck_assert_msg(r.rc == 0, "rc %d: %s%s", r.rc, r.out, r.err);
    assert_text(r.out, "verify: 3 steps intact, 0 incomplete, 0 problems\n");
    tu_result_free(&r);
    leave_tmp(dir, 4);
    r = RUN("verify", dir);
    ck_assert_msg(r.rc == 0, "rc %d: %s%s", r.rc, r.out, r.err);
    snprintf(want, sizeof want, "%s/.step-00000004.h5.tmp: incomplete step 4 (the writer stopped "
             "before finishing it)\nverify: 3 steps intact, 1 incomplete, 0 problems\n", dir);
    assert_text(r.out, want);
    tu_result_free(&r);
    char path[256];
    snprintf(path, sizeof path, "%s/step-00000002.h5", dir);
    r = RUN("verify", path);
    ck_assert_int_eq(r.rc, 0);
    assert_text(r.out, "verify: 1 steps intact, 0 incomplete, 0 problems\n");
    tu_result_free(&r);
}
END_TEST

START_TEST(test_verify_truncated_step)
{
    char dir[128], path[256], want[512];
    write_run(test_dir(dir, sizeof dir));
    snprintf(path, sizeof path, "%s/step-00000002.h5", dir);
    struct stat st;
    ck_assert(stat(path, &st) == 0 && truncate(path, st.st_size / 2) == 0);
    tu_result r = RUN("verify", dir);
    ck_assert_int_eq(r.rc, 1);
    snprintf(want, sizeof want, "%s: not a readable HDF5 file", path);
    ck_assert_msg(strncmp(r.out, want, strlen(want)) == 0, "%s", r.out);
    ck_assert_msg(strstr(r.out, "\nverify: 2 steps intact, 0 incomplete, 1 problems\n"), "%s",
                  r.out);
    tu_result_free(&r);
    r = RUN("ls", dir);   /* the other steps are still listed */
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.err, want) && strstr(r.out, "step 3:\n"), "%s\n%s", r.out, r.err);
    tu_result_free(&r);
}
END_TEST

/* Damage in a chunk's values, each kind in a fresh copy: the CRC-32C finds
 * what Fletcher-32 misses (issue 14), and the message names the file, the
 * tensor and the chunk. */
START_TEST(test_verify_crc_damage)
{
    static const tu_damage kinds[] = { TU_FLIP_FF, TU_FLIP_BIT, TU_SWAP_WORDS };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char dir[128], step[256], want[512];
        tu_crc_step(test_dir(dir, sizeof dir));
        snprintf(step, sizeof step, "%s/step-00000000.h5", dir);
        tu_result r = RUN("verify", step);
        ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.out);
        assert_text(r.out, "verify: 1 steps intact, 0 incomplete, 0 problems\n");
        tu_result_free(&r);
        tu_crc_damage(step, kinds[k]);
        r = RUN("verify", step);
        ck_assert_int_eq(r.rc, 1);
        if (kinds[k] == TU_FLIP_BIT)   /* Fletcher-32 sees it first, through HDF5 */
            snprintf(want, sizeof want, "%s: /op0/out0: cannot read the values: data error "
                     "detected by Fletcher32 checksum", step);
        else
            snprintf(want, sizeof want, "%s: /op0/out0: cannot read the values: data error "
                     "detected by CRC-32C checksum (chunk 1, elements 150000..299999)\n", step);
        ck_assert_msg(strncmp(r.out, want, strlen(want)) == 0, "kind %zu:\n%s", k, r.out);
        ck_assert_msg(strstr(r.out, "\nverify: 0 steps intact, 0 incomplete, 1 problems\n"),
                      "%s", r.out);
        tu_result_free(&r);
    }
}
END_TEST

/* A step file written before the CRC-32C verifies with Fletcher-32 alone,
 * and verify says so. */
START_TEST(test_verify_without_crc)
{
    char dir[128], step[256];
    tu_crc_step(test_dir(dir, sizeof dir));
    snprintf(step, sizeof step, "%s/step-00000000.h5", dir);
    tu_crc_strip(step);
    tu_result r = RUN("verify", step);
    ck_assert_msg(r.rc == 0, "rc %d: %s", r.rc, r.out);
    assert_text(r.out, "verify: 1 step file without CRC-32C (written before tdbg kept it): "
                "values checked with Fletcher-32 only\n"
                "verify: 1 steps intact, 0 incomplete, 0 problems\n");
    tu_result_free(&r);
    tu_crc_damage(step, TU_FLIP_BIT);   /* Fletcher-32 still checks */
    r = RUN("verify", step);
    ck_assert_int_eq(r.rc, 1);
    ck_assert_msg(strstr(r.out, "/op0/out0: cannot read the values: data error detected by "
                         "Fletcher32 checksum"), "%s", r.out);
    tu_result_free(&r);
}
END_TEST

/* ---- usage --------------------------------------------------------------- */

START_TEST(test_bad_usage)
{
    char dir[128];
    test_dir(dir, sizeof dir);
    static const struct {
        const char *args[6];
        const char *msg;
    } cases[] = {
        { { NULL }, "tdbg-dump: no command given\nusage: tdbg-dump ls DIR\n" },
        { { "lst", "d", NULL }, "tdbg-dump: unknown command 'lst'\nusage: " },
        { { "show", "d", NULL }, "tdbg-dump: wrong number of arguments for 'show'\n" },
        { { "ls", "d", "e", NULL }, "tdbg-dump: wrong number of arguments for 'ls'\n" },
        { { "stats", "d", "--step", "x", NULL }, "tdbg-dump: bad step 'x' (a step number" },
        { { "stats", "d", "--step", NULL }, "tdbg-dump: option '--step' needs a value\n" },
        { { "ls", "d", "--step", "1", NULL }, "tdbg-dump: unknown option '--step'\n" },
        { { "export", "d", NULL }, "tdbg-dump: 'export' needs --npy OUTDIR\n" },
        { { "stats", "d", "--color", NULL }, "tdbg-dump: unknown option '--color'\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_result r = tu_run_tool(tdbg_dump_main, "tdbg-dump", cases[i].args);
        ck_assert_msg(r.rc == 2, "case %zu: rc %d", i, r.rc);
        ck_assert_msg(strncmp(r.err, cases[i].msg, strlen(cases[i].msg)) == 0 &&
                      strstr(r.err, "       tdbg-dump verify DIR|FILE\n"),
                      "case %zu: %s", i, r.err);
        ck_assert_str_eq(r.out, "");
        tu_result_free(&r);
    }
    tu_result r = RUN("--help");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_msg(strncmp(r.out, "usage: tdbg-dump ls DIR\n", 24) == 0, "%s", r.out);
    ck_assert_str_eq(r.err, "");
    tu_result_free(&r);
}
END_TEST

START_TEST(test_missing_directory)
{
    char dir[128], gone[192], want[512];
    test_dir(dir, sizeof dir);
    snprintf(gone, sizeof gone, "%s/no-such-run", dir);
    static const char *const cmds[] = { "ls", "stats", "verify" };
    for (int i = 0; i < 3; i++) {
        tu_result r = RUN(cmds[i], gone);
        ck_assert_msg(r.rc == 2, "%s: rc %d", cmds[i], r.rc);
        snprintf(want, sizeof want, "tdbg-dump: %s: %s: No such file or directory\n", gone,
                 i < 2 ? "cannot read the directory" : "cannot open");
        assert_text(r.err, want);
        ck_assert_str_eq(r.out, "");
        tu_result_free(&r);
    }
}
END_TEST

Suite *suite_tdbg_dump(void)
{
    Suite *s = suite_create("tdbg_dump");
    TCase *tc = tcase_create("tdbg_dump");
    tcase_add_unchecked_fixture(tc, suite_dir_make, suite_dir_remove);
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_ls_lists_steps);
    tcase_add_test(tc, test_ls_peak_memory);
    tcase_add_test(tc, test_ls_incomplete_step);
    tcase_add_test(tc, test_show_by_path);
    tcase_add_test(tc, test_show_by_name_with_slices);
    tcase_add_test(tc, test_show_elides_long_dims);
    tcase_add_test(tc, test_show_errors);
    tcase_add_test(tc, test_names_both_spellings);
    tcase_add_test(tc, test_names_suggest);
    tcase_add_test(tc, test_stats_values);
    tcase_add_test(tc, test_stats_stored_rows);
    tcase_add_test(tc, test_export_npy_bytes);
    tcase_add_test(tc, test_export_numpy_load);
    tcase_add_test(tc, test_export_errors);
    tcase_add_test(tc, test_verify_good_and_incomplete);
    tcase_add_test(tc, test_verify_truncated_step);
    tcase_add_test(tc, test_verify_crc_damage);
    tcase_add_test(tc, test_verify_without_crc);
    tcase_add_test(tc, test_bad_usage);
    tcase_add_test(tc, test_missing_directory);
    suite_add_tcase(s, tc);
    return s;
}
