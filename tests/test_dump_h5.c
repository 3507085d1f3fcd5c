/* test_dump_h5.c — step files and run.h5 (dump/h5write.c, dump/h5read.c):
 * bit-exact round trips, attributes, paths, compression, statistics tables,
 * listing, verification of damaged files, disk errors, and h5py interop. */
#include "h5file.h"
#include "suites.h"
#include "testutil.h"

#include <hdf5.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ----------------------------------------------------------- */

/* Every test works in its own directory under suite_dir, which the
 * unchecked teardown removes even when a test failed. */
static char suite_dir[64];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    chmod(path, 0700);   /* a read-only test directory */
    return remove(path);
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void suite_dir_make(void)
{
    snprintf(suite_dir, sizeof suite_dir, "/tmp/tdbg-h5-XXXXXX");
    if (!mkdtemp(suite_dir))
        abort();
    chmod(suite_dir, 0755);   /* the permission test drops root: it must get in */
}

static void suite_dir_remove(void)
{
    chmod(suite_dir, 0700);
    rm_tree(suite_dir);
}

/* A fresh directory for one test (returns buf). */
static char *test_dir(char *buf, size_t n)
{
    snprintf(buf, n, "%s/t-XXXXXX", suite_dir);
    ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp: %s", strerror(errno));
    chmod(buf, 0755);
    return buf;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Metadata of op's output/input slot, as the dump hook would fill it. */
static dump_tensor_info meta(const char *op, const char *type, dump_iokind io, int slot,
                             int exec, te_phase phase, const char *tensor)
{
    return tu_dump_info(op, type, io, slot, exec, phase, tensor, TE_F32, 0, NULL);
}

static dump_step_writer *create_ok(const char *dir, int64_t step, int gzip)
{
    char err[512] = "";
    dump_step_writer *w = dump_step_create(dir, step, gzip, err, sizeof err);
    ck_assert_msg(w != NULL, "dump_step_create(%s, %lld) failed: %s", dir, (long long)step, err);
    return w;
}

static void add_ok(dump_step_writer *w, const dump_tensor_info *ti, const te_tensor *t)
{
    char err[512] = "";
    ck_assert_msg(t != NULL, "no tensor: %s", te_error());
    ck_assert_msg(dump_step_add(w, ti, t, err, sizeof err), "dump_step_add(%s) failed: %s",
                  ti->op, err);
}

static void commit_ok(dump_step_writer *w)
{
    char err[512] = "";
    ck_assert_msg(dump_step_commit(w, err, sizeof err), "dump_step_commit failed: %s", err);
}

static void step_path(char *buf, size_t n, const char *dir, int64_t step)
{
    snprintf(buf, n, "%s/step-%08lld.h5", dir, (long long)step);
}

static dump_step_reader *open_ok(const char *dir, int64_t step)
{
    char path[256], err[1024] = "";
    step_path(path, sizeof path, dir, step);
    dump_step_reader *r = dump_step_open(path, err, sizeof err);
    ck_assert_msg(r != NULL, "dump_step_open(%s) failed: %s", path, err);
    return r;
}

/* Index of path in r; fails the test when absent. */
static int find_ok(const dump_step_reader *r, const char *path)
{
    int i = dump_step_find(r, path);
    ck_assert_msg(i >= 0, "%s not in the step file", path);
    return i;
}

/* Reads tensor path raw and as f32 and checks both against want. */
static void read_back(dump_step_reader *r, const char *path, const te_tensor *want)
{
    int i = find_ok(r, path);
    const dump_tensor_info *ti = dump_step_tensor(r, i);
    ck_assert_msg(ti->dtype == want->dtype && ti->ndim == want->ndim &&
                  ti->numel == want->numel && ti->nbytes == want->nbytes,
                  "%s: dtype %d ndim %d numel %lld nbytes %zu, want %d %d %lld %zu", path,
                  ti->dtype, ti->ndim, (long long)ti->numel, ti->nbytes, want->dtype, want->ndim,
                  (long long)want->numel, want->nbytes);
    for (int d = 0; d < want->ndim; d++)
        ck_assert_msg(ti->shape[d] == want->shape[d], "%s: dim %d is %lld, want %lld", path, d,
                      (long long)ti->shape[d], (long long)want->shape[d]);
    char err[512] = "";
    unsigned char *raw = malloc(want->nbytes + 1);
    float *f = malloc((size_t)want->numel * sizeof *f + 1);
    ck_assert_msg(dump_step_read_raw(r, i, raw, err, sizeof err), "read_raw %s: %s", path, err);
    unsigned char *want_raw = tu_bytes(want);
    ck_assert_msg(memcmp(raw, want_raw, want->nbytes) == 0, "%s: raw bytes differ", path);
    free(want_raw);
    ck_assert_msg(dump_step_read_f32(r, i, f, err, sizeof err), "read_f32 %s: %s", path, err);
    int64_t bad = -1;   /* one assertion: Check logs each one */
    for (int64_t k = 0; k < want->numel && bad < 0; k++) {
        float w = te_get(want, k);
        if (memcmp(&f[k], &w, sizeof w) != 0)
            bad = k;
    }
    ck_assert_msg(bad < 0, "%s[%lld]: %g as f32, want %g", path, (long long)bad,
                  bad < 0 ? 0.0 : f[bad], bad < 0 ? 0.0 : te_get(want, bad));
    free(raw);
    free(f);
}

static bool has_problem(const dump_problems *p, const char *a, const char *b)
{
    for (int i = 0; i < p->n; i++)
        if (strstr(p->msg[i], a) && (!b || strstr(p->msg[i], b)))
            return true;
    return false;
}

static void problems_have(const dump_problems *p, const char *a, const char *b)
{
    char all[4096] = "";
    for (int i = 0; i < p->n; i++)
        snprintf(all + strlen(all), sizeof all - strlen(all), "\n  %s", p->msg[i]);
    ck_assert_msg(has_problem(p, a, b), "no problem naming '%s' and '%s' among %d:%s", a,
                  b ? b : "", p->n, all);
}

/* A small run: run.h5 and steps 1 and 2, each with a 256 KiB tensor /big/out0
 * (so the middle of the file is its values) and two small ones. */
static void write_run(const char *dir)
{
    dump_run_meta m = { .mode = TE_MODE_EAGER, .seed = 7 };
    snprintf(m.engine_version, sizeof m.engine_version, TE_VERSION);
    snprintf(m.amp, sizeof m.amp, "none");
    snprintf(m.backend, sizeof m.backend, "cpu");
    snprintf(m.command_line, sizeof m.command_line, "./mlp --steps 2");
    char err[512] = "";
    ck_assert_msg(dump_run_write(dir, &m, NULL, 0, err, sizeof err), "run: %s", err);
    for (int step = 1; step <= 2; step++) {
        dump_step_writer *w = create_ok(dir, step, 0);
        te_tensor *big = te_tensor_new(TE_F32, te_shape(256, 256));
        for (int64_t i = 0; i < big->numel; i++)
            te_set(big, i, (float)i * 0.25f);
        dump_tensor_info ti = meta("big", "Linear", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "big:out0");
        add_ok(w, &ti, big);
        te_tensor *x = te_tensor_from(TE_F32, te_shape(3), ((float[]){ 1, 2, 3 }));
        ti = meta("small/relu", "ReLU", DUMP_IN, 0, 1, TE_PHASE_FORWARD, "big:out0");
        add_ok(w, &ti, x);
        ti = meta("small/relu", "ReLU", DUMP_OUT, 0, 1, TE_PHASE_FORWARD, "small/relu:out0");
        add_ok(w, &ti, x);
        commit_ok(w);
    }
}

/* ---- paths -------------------------------------------------------------- */

START_TEST(test_tensor_paths)
{
    char buf[DUMP_PATH_MAX];
    ck_assert(dump_tensor_path("fc1/linear", DUMP_OUT, 0, buf, sizeof buf));
    ck_assert_str_eq(buf, "/fc1/linear/out0");
    ck_assert(dump_tensor_path("fc1/linear", DUMP_IN, 1, buf, sizeof buf));
    ck_assert_str_eq(buf, "/fc1/linear/in1");
    ck_assert(dump_tensor_path("grad/fc2/linear", DUMP_OUT, 1, buf, sizeof buf));
    ck_assert_str_eq(buf, "/grad/fc2/linear/out1");
    ck_assert(dump_tensor_path("update/fc1.weight", DUMP_OUT, 0, buf, sizeof buf));
    ck_assert_str_eq(buf, "/update/fc1.weight/out0");
    static const char *const bad[] = { "", "/fc1", "fc1/", "fc1//linear", "a/./b", "..", "a/.." };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!dump_tensor_path(bad[i], DUMP_OUT, 0, buf, sizeof buf),
                      "'%s' accepted as %s", bad[i], buf);
    ck_assert(!dump_tensor_path("fc1", DUMP_OUT, -1, buf, sizeof buf));
    ck_assert(!dump_tensor_path("fc1/linear", DUMP_OUT, 0, buf, 10));   /* too small */
}
END_TEST

/* ---- round trips -------------------------------------------------------- */

START_TEST(test_roundtrip_f32)
{
    char dir[128];
    test_dir(dir, sizeof dir);
    float special[] = { 1.5f, -0.0f, NAN, INFINITY, -INFINITY, 1e-45f, 3.4028235e38f, -2.75f };
    te_tensor *v = te_tensor_from(TE_F32, te_shape(8), special);
    te_tensor *q = te_tensor_new(TE_F32, te_shape(2, 3, 2, 2));
    for (int64_t i = 0; i < q->numel; i++)
        te_set(q, i, (float)i / 7.0f - 1.0f);
    te_tensor *s = te_tensor_from(TE_F32, 0, (const int64_t[]){ 0 }, ((float[]){ 0.1f }));
    dump_step_writer *w = create_ok(dir, 42, 0);
    dump_tensor_info ti = meta("v", "Input", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "v");
    add_ok(w, &ti, v);
    ti = meta("conv1/conv", "Conv2D", DUMP_OUT, 0, 1, TE_PHASE_FORWARD, "conv1/conv:out0");
    add_ok(w, &ti, q);
    ti = meta("loss", "MSE", DUMP_OUT, 0, 2, TE_PHASE_FORWARD, "loss:out0");
    add_ok(w, &ti, s);
    commit_ok(w);
    dump_step_reader *r = open_ok(dir, 42);
    ck_assert_int_eq(dump_step_number(r), 42);
    ck_assert_int_eq(dump_step_count(r), 3);
    read_back(r, "/v/out0", v);
    read_back(r, "/conv1/conv/out0", q);
    read_back(r, "/loss/out0", s);
    ck_assert_int_eq(dump_step_tensor(r, find_ok(r, "/loss/out0"))->ndim, 0);
    dump_step_close(r);
}
END_TEST

START_TEST(test_roundtrip_f16_bf16)
{
    char dir[128];
    test_dir(dir, sizeof dir);
    /* 1, -0, inf, nan, the smallest subnormal, the largest finite, -2.5, 0.1 */
    uint16_t h[] = { 0x3c00, 0x8000, 0x7c00, 0x7e00, 0x0001, 0x7bff, 0xc100, 0x2e66 };
    uint16_t b[] = { 0x3f80, 0x8000, 0x7f80, 0x7fc0, 0x0001, 0x7f7f, 0xc020, 0x3dcd };
    te_tensor *h1 = te_tensor_from(TE_F16, te_shape(8), h);
    te_tensor *h4 = te_tensor_from(TE_F16, te_shape(2, 1, 2, 2), h);
    te_tensor *h0 = te_tensor_from(TE_F16, 0, (const int64_t[]){ 0 }, h + 6);
    te_tensor *b1 = te_tensor_from(TE_BF16, te_shape(8), b);
    te_tensor *b4 = te_tensor_from(TE_BF16, te_shape(1, 2, 2, 2), b);
    te_tensor *b0 = te_tensor_from(TE_BF16, 0, (const int64_t[]){ 0 }, b + 7);
    dump_step_writer *w = create_ok(dir, 5, 0);
    te_tensor *all[] = { h1, h4, h0, b1, b4, b0 };
    const char *ops[] = { "h/a", "h/b", "h/c", "b/a", "b/b", "b/c" };
    for (int i = 0; i < 6; i++) {
        dump_tensor_info ti = meta(ops[i], "Cast", DUMP_OUT, 0, i, TE_PHASE_FORWARD, ops[i]);
        add_ok(w, &ti, all[i]);
    }
    commit_ok(w);
    dump_step_reader *r = open_ok(dir, 5);
    char path[64];
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "/%s/out0", ops[i]);
        read_back(r, path, all[i]);
    }
    /* as f32: the f16 and bf16 values themselves, not re-rounded */
    float f[8];
    char err[256];
    ck_assert(dump_step_read_f32(r, find_ok(r, "/b/a/out0"), f, err, sizeof err));
    ck_assert_float_eq(f[0], 1.0f);
    ck_assert_float_eq(f[6], -2.5f);
    ck_assert(isnan(f[3]) && isinf(f[2]) && signbit(f[1]));
    ck_assert(dump_step_read_f32(r, find_ok(r, "/h/a/out0"), f, err, sizeof err));
    ck_assert_float_eq(f[5], 65504.0f);
    ck_assert_float_eq(f[4], 5.9604645e-8f);
    ck_assert_float_eq(f[7], te_f16_to_f32(0x2e66));
    dump_step_close(r);
}
END_TEST

START_TEST(test_roundtrip_i32_raw_copy)
{
    char dir[128];
    test_dir(dir, sizeof dir);
    int32_t v[] = { INT32_MIN, -1, 0, 7, INT32_MAX, 16777217 };
    dump_step_writer *w = create_ok(dir, 0, 0);
    dump_tensor_info ti = meta("batch", "Loader", DUMP_OUT, 1, 0, TE_PHASE_FORWARD, "batch:y");
    ti.dtype = TE_I32;   /* the writer thread's copy: raw bytes, dtype and shape */
    ti.ndim = 2;
    ti.shape[0] = 2;
    ti.shape[1] = 3;
    char err[512] = "";
    ck_assert_msg(dump_step_add_raw(w, &ti, v, err, sizeof err), "add_raw: %s", err);
    dump_tensor_info none = ti;   /* an empty batch: no values at all */
    none.exec_index = 1;
    none.slot = 2;
    none.shape[0] = 0;
    none.shape[1] = 4;
    ck_assert_msg(dump_step_add_raw(w, &none, NULL, err, sizeof err), "add_raw: %s", err);
    commit_ok(w);
    dump_step_reader *r = open_ok(dir, 0);
    ck_assert_int_eq(dump_step_count(r), 2);
    const dump_tensor_info *empty = dump_step_tensor(r, 1);
    ck_assert(empty->ndim == 2 && empty->shape[0] == 0 && empty->shape[1] == 4);
    ck_assert(empty->numel == 0 && empty->nbytes == 0);
    ck_assert(dump_step_read_f32(r, 1, NULL, err, sizeof err));
    const dump_tensor_info *got = dump_step_tensor(r, 0);
    ck_assert_str_eq(got->path, "/batch/out1");
    ck_assert_int_eq(got->dtype, TE_I32);
    ck_assert_int_eq(got->ndim, 2);
    ck_assert_int_eq(got->shape[0], 2);
    ck_assert_int_eq(got->shape[1], 3);
    int32_t back[6];
    float f[6];
    ck_assert(dump_step_read_raw(r, 0, back, err, sizeof err));
    ck_assert_mem_eq(back, v, sizeof v);
    ck_assert(dump_step_read_f32(r, 0, f, err, sizeof err));
    ck_assert_float_eq(f[0], -2147483648.0f);
    ck_assert_float_eq(f[1], -1.0f);
    ck_assert_float_eq(f[3], 7.0f);
    ck_assert_float_eq(f[4], 2147483648.0f);   /* INT32_MAX rounds to 2^31 in f32 */
    ck_assert_float_eq(f[5], 16777216.0f);
    dump_step_close(r);
}
END_TEST

START_TEST(test_attributes_and_order)
{
    char dir[128];
    test_dir(dir, sizeof dir);
    te_tensor *x = te_tensor_from(TE_F32, te_shape(2, 2), ((float[]){ 1, 2, 3, 4 }));
    dump_step_writer *w = create_ok(dir, 9, 0);
    /* added out of order: the reader gives execution order */
    dump_tensor_info g = meta("grad/fc2/linear", "LinearGrad", DUMP_OUT, 1, 7, TE_PHASE_BACKWARD,
                              "grad:fc2.weight");
    snprintf(g.kernel, sizeof g.kernel, "k5 backward: grad/fc2/linear");
    add_ok(w, &g, x);
    dump_tensor_info in1 = meta("fc1/linear", "Linear", DUMP_IN, 1, 2, TE_PHASE_FORWARD,
                                "param:fc1.weight");
    add_ok(w, &in1, x);
    dump_tensor_info out0 = meta("fc1/linear", "Linear", DUMP_OUT, 0, 2, TE_PHASE_FORWARD,
                                 "fc1/linear:out0");
    add_ok(w, &out0, x);
    dump_tensor_info in0 = meta("fc1/linear", "Linear", DUMP_IN, 0, 2, TE_PHASE_FORWARD,
                                "batch:x");
    add_ok(w, &in0, x);
    commit_ok(w);
    dump_step_reader *r = open_ok(dir, 9);
    ck_assert_int_eq(dump_step_count(r), 4);
    ck_assert_str_eq(dump_step_tensor(r, 0)->path, "/fc1/linear/in0");
    ck_assert_str_eq(dump_step_tensor(r, 1)->path, "/fc1/linear/in1");
    ck_assert_str_eq(dump_step_tensor(r, 2)->path, "/fc1/linear/out0");
    ck_assert_str_eq(dump_step_tensor(r, 3)->path, "/grad/fc2/linear/out1");
    const dump_tensor_info *t = dump_step_tensor(r, 3);
    ck_assert_int_eq(t->step, 9);
    ck_assert_str_eq(t->op, "grad/fc2/linear");
    ck_assert_str_eq(t->op_type, "LinearGrad");
    ck_assert_int_eq(t->exec_index, 7);
    ck_assert_int_eq(t->phase, TE_PHASE_BACKWARD);
    ck_assert_int_eq(t->io, DUMP_OUT);
    ck_assert_int_eq(t->slot, 1);
    ck_assert_str_eq(t->tensor, "grad:fc2.weight");
    ck_assert_int_eq(t->dtype, TE_F32);
    ck_assert_str_eq(t->file, "examples/mlp.c");
    ck_assert_int_eq(t->line, 47);
    ck_assert_str_eq(t->kernel, "k5 backward: grad/fc2/linear");
    t = dump_step_tensor(r, 1);
    ck_assert_int_eq(t->io, DUMP_IN);
    ck_assert_str_eq(t->tensor, "param:fc1.weight");
    ck_assert_str_eq(t->kernel, "");
    ck_assert_int_eq(dump_step_find(r, "/fc1/linear/out1"), -1);
    dump_step_close(r);
}
END_TEST

START_TEST(test_path_conflicts_refused)
{
    char dir[128], err[512] = "";
    test_dir(dir, sizeof dir);
    te_tensor *x = te_tensor_from(TE_F32, te_shape(1), ((float[]){ 1 }));
    dump_step_writer *w = create_ok(dir, 3, 0);
    dump_tensor_info ti = meta("fc1/linear", "Linear", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "a");
    add_ok(w, &ti, x);
    ck_assert(!dump_step_add(w, &ti, x, err, sizeof err));   /* the same path again */
    ck_assert_msg(strstr(err, ".step-00000003.h5.tmp: /fc1/linear/out0: already in the file"),
                  "%s", err);
    ti = meta("fc1/linear/out0", "X", DUMP_OUT, 0, 1, TE_PHASE_FORWARD, "b");  /* under a dataset */
    ck_assert(!dump_step_add(w, &ti, x, err, sizeof err));
    ck_assert_msg(strstr(err, "/fc1/linear/out0/out0: cannot go under /fc1/linear/out0, which is "
                         "a tensor"), "%s", err);
    ti = meta("a//b", "X", DUMP_OUT, 0, 2, TE_PHASE_FORWARD, "c");
    ck_assert(!dump_step_add(w, &ti, x, err, sizeof err));
    ck_assert_msg(strstr(err, "op 'a//b' (io 1, slot 0) cannot be an HDF5 path"), "%s", err);
    ti = meta("fc1/relu", "ReLU", DUMP_OUT, 0, 3, TE_PHASE_FORWARD, "d");   /* a sibling is fine */
    add_ok(w, &ti, x);
    commit_ok(w);   /* refusals left the step usable */
    dump_step_reader *r = open_ok(dir, 3);
    ck_assert_int_eq(dump_step_count(r), 2);
    ck_assert_str_eq(dump_step_tensor(r, 1)->path, "/fc1/relu/out0");
    dump_step_close(r);
}
END_TEST

START_TEST(test_gzip_roundtrip)
{
    char dir[128], path[256];
    test_dir(dir, sizeof dir);
    te_tensor *a = te_tensor_new(TE_F32, te_shape(300, 100));   /* 120 KB, repetitive */
    for (int64_t i = 0; i < a->numel; i++)
        te_set(a, i, (float)(i % 10));
    te_tensor *wide = te_tensor_new(TE_F16, te_shape(2, 600000));  /* a row over 1 MiB */
    uint16_t *bits = malloc((size_t)wide->numel * sizeof *bits);
    ck_assert(bits != NULL);
    for (int64_t i = 0; i < wide->numel; i++)
        bits[i] = (uint16_t)(i * 2654435761u >> 16);
    tu_write(wide, bits);
    free(bits);
    dump_step_writer *w = create_ok(dir, 1, 6);
    dump_tensor_info ti = meta("a", "X", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "a");
    add_ok(w, &ti, a);
    ti = meta("wide", "X", DUMP_OUT, 0, 1, TE_PHASE_FORWARD, "wide");
    add_ok(w, &ti, wide);
    commit_ok(w);
    dump_step_reader *r = open_ok(dir, 1);
    read_back(r, "/a/out0", a);
    read_back(r, "/wide/out0", wide);
    dump_step_close(r);
    /* a is stored compressed: the file is smaller than the values */
    step_path(path, sizeof path, dir, 1);
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    ck_assert_msg((size_t)st.st_size < a->nbytes / 4 + wide->nbytes + 16384,
                  "file of %lld bytes", (long long)st.st_size);
    /* the filters and chunks h5py and h5dump will see */
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "/wide/out0", H5P_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(ds);
    hsize_t chunk[2];
    ck_assert_int_eq(H5Pget_chunk(dcpl, 2, chunk), 2);
    ck_assert_int_eq(chunk[0], 1);
    ck_assert_int_eq(chunk[1], 300000);   /* two even chunks of at most 1 MiB of f16 */
    ck_assert_int_eq(H5Pget_nfilters(dcpl), 3);
    static const H5Z_filter_t want[] = { H5Z_FILTER_SHUFFLE, H5Z_FILTER_DEFLATE,
                                         H5Z_FILTER_FLETCHER32 };
    for (unsigned i = 0; i < 3; i++) {
        unsigned flags, cd[8];
        size_t nv = 8;
        ck_assert_int_eq(H5Pget_filter2(dcpl, i, &flags, &nv, cd, 0, NULL, NULL), want[i]);
        if (want[i] == H5Z_FILTER_DEFLATE)
            ck_assert_int_eq(cd[0], 6);   /* the level */
    }
    H5Pclose(dcpl);
    H5Dclose(ds);
    H5Fclose(f);
}
END_TEST

START_TEST(test_stats_roundtrip)
{
    char dir[128], err[512] = "";
    test_dir(dir, sizeof dir);
    dump_stats_row rows[2];
    rows[0] = (dump_stats_row){ .io = DUMP_OUT, .slot = 0, .exec_index = 2, .min = -1.5,
                                .max = 2.25, .mean = 0.125, .std = 1.0 / 3.0, .abs_max = 2.25,
                                .l2norm = 7.5, .nan = 0, .inf = 0, .zero_frac = 0.5 };
    snprintf(rows[0].op, sizeof rows[0].op, "fc1/linear");
    rows[1] = (dump_stats_row){ .io = DUMP_IN, .slot = 1, .exec_index = 9, .min = NAN,
                                .max = INFINITY, .mean = NAN, .std = NAN, .abs_max = INFINITY,
                                .l2norm = INFINITY, .nan = 3, .inf = 5000000000LL,
                                .zero_frac = 0.0 };
    snprintf(rows[1].op, sizeof rows[1].op, "grad/fc2/linear");
    dump_step_writer *w = create_ok(dir, 4, 0);
    ck_assert_msg(dump_step_add_stats(w, rows, 1, err, sizeof err), "%s", err);
    ck_assert_msg(dump_step_add_stats(w, rows + 1, 1, err, sizeof err), "%s", err);
    commit_ok(w);
    dump_step_reader *r = open_ok(dir, 4);
    ck_assert_int_eq(dump_step_count(r), 0);   /* no tensor datasets in stats mode */
    dump_stats_row *got = NULL;
    int n = dump_step_stats(r, &got, err, sizeof err);
    ck_assert_msg(n == 2, "dump_step_stats: %d (%s)", n, err);
    ck_assert_str_eq(got[0].path, "/fc1/linear/out0");
    ck_assert_str_eq(got[0].op, "fc1/linear");
    ck_assert_int_eq(got[0].io, DUMP_OUT);
    ck_assert_int_eq(got[0].exec_index, 2);
    ck_assert(got[0].min == -1.5 && got[0].max == 2.25 && got[0].mean == 0.125);
    ck_assert(got[0].std == 1.0 / 3.0 && got[0].l2norm == 7.5 && got[0].zero_frac == 0.5);
    ck_assert_str_eq(got[1].path, "/grad/fc2/linear/in1");
    ck_assert_int_eq(got[1].io, DUMP_IN);
    ck_assert_int_eq(got[1].slot, 1);
    ck_assert(isnan(got[1].min) && isinf(got[1].max) && isnan(got[1].std));
    ck_assert_int_eq(got[1].nan, 3);
    ck_assert(got[1].inf == 5000000000LL);
    free(got);
    dump_step_close(r);
    /* a step without a table has zero rows */
    w = create_ok(dir, 5, 0);
    commit_ok(w);
    r = open_ok(dir, 5);
    ck_assert_int_eq(dump_step_stats(r, &got, err, sizeof err), 0);
    ck_assert_ptr_null(got);
    dump_step_close(r);
    dump_problems p;
    ck_assert_int_eq(dump_verify(dir, &p), 1);   /* only the missing run.h5 */
    problems_have(&p, "run.h5: missing", NULL);
    dump_problems_free(&p);
}
END_TEST

START_TEST(test_run_metadata_roundtrip)
{
    char dir[128], sub[192], err[512] = "";
    test_dir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/runs/a", dir);   /* parents are made */
    dump_run_meta m = { .mode = TE_MODE_GRAPH, .seed = 18446744073709551615ull };
    snprintf(m.engine_version, sizeof m.engine_version, TE_VERSION);
    snprintf(m.amp, sizeof m.amp, "bf16");
    snprintf(m.backend, sizeof m.backend, "cpu");
    snprintf(m.command_line, sizeof m.command_line, "./cnn --graph --amp bf16 'ünïcode'");
    dump_op_row ops[3];
    memset(ops, 0, sizeof ops);
    const char *names[] = { "fc1/linear", "grad/fc1/linear", "update/fc1.weight" };
    const char *types[] = { "Linear", "LinearGrad", "SGD" };
    for (int i = 0; i < 3; i++) {
        ops[i].exec = i;
        ops[i].phase = (te_phase)i;
        ops[i].line = 10 * (i + 1);
        snprintf(ops[i].name, sizeof ops[i].name, "%s", names[i]);
        snprintf(ops[i].type, sizeof ops[i].type, "%s", types[i]);
        snprintf(ops[i].file, sizeof ops[i].file, "examples/cnn.c");
    }
    snprintf(ops[0].inputs, sizeof ops[0].inputs, "batch:x,param:fc1.weight,param:fc1.bias");
    snprintf(ops[0].outputs, sizeof ops[0].outputs, "fc1/linear:out0");
    snprintf(ops[0].kernel, sizeof ops[0].kernel, "k3 fused-act: fc1/linear, fc1/relu");
    ck_assert_msg(dump_run_write(sub, &m, ops, 2, err, sizeof err), "%s", err);
    /* the op table grew: run.h5 is rewritten */
    ck_assert_msg(dump_run_write(sub, &m, ops, 3, err, sizeof err), "%s", err);
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s/.run.h5.tmp", sub);
    ck_assert(!exists(tmp));
    dump_run_meta got;
    dump_op_row *rows = NULL;
    int n = 0;
    ck_assert_msg(dump_run_read(sub, &got, &rows, &n, err, sizeof err), "%s", err);
    ck_assert_int_eq(got.format, 1);
    ck_assert_str_eq(got.engine_version, TE_VERSION);
    ck_assert_int_eq(got.mode, TE_MODE_GRAPH);
    ck_assert_str_eq(got.amp, "bf16");
    ck_assert_str_eq(got.backend, "cpu");
    ck_assert(got.seed == 18446744073709551615ull);
    ck_assert_str_eq(got.command_line, "./cnn --graph --amp bf16 'ünïcode'");
    ck_assert_msg(strlen(got.created) == 20 && got.created[4] == '-' && got.created[10] == 'T' &&
                  got.created[19] == 'Z', "created '%s'", got.created);
    ck_assert_int_eq(n, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(rows[i].exec, i);
        ck_assert_str_eq(rows[i].name, names[i]);
        ck_assert_str_eq(rows[i].type, types[i]);
        ck_assert_int_eq(rows[i].phase, i);
        ck_assert_str_eq(rows[i].file, "examples/cnn.c");
        ck_assert_int_eq(rows[i].line, 10 * (i + 1));
    }
    ck_assert_str_eq(rows[0].inputs, "batch:x,param:fc1.weight,param:fc1.bias");
    ck_assert_str_eq(rows[0].outputs, "fc1/linear:out0");
    ck_assert_str_eq(rows[0].kernel, "k3 fused-act: fc1/linear, fc1/relu");
    ck_assert_str_eq(rows[2].kernel, "");
    free(rows);
    /* a given creation time is kept */
    snprintf(m.created, sizeof m.created, "2024-05-01T12:00:00Z");
    ck_assert(dump_run_write(sub, &m, ops, 0, err, sizeof err));
    ck_assert(dump_run_read(sub, &got, &rows, &n, err, sizeof err));
    ck_assert_str_eq(got.created, "2024-05-01T12:00:00Z");
    ck_assert_int_eq(n, 0);
    free(rows);
    ck_assert(!dump_run_read(dir, &got, &rows, &n, err, sizeof err));
    ck_assert_msg(strstr(err, "/run.h5: cannot open: No such file or directory"), "%s", err);
    ck_assert_ptr_null(rows);
}
END_TEST

/* ---- listing, crashes, verification ------------------------------------- */

START_TEST(test_list_after_kill9)
{
    char dir[128], path[256], err[512] = "";
    test_dir(dir, sizeof dir);
    write_run(dir);                 /* steps 1 and 2 */
    dump_step_writer *w = create_ok(dir, 10, 0);
    commit_ok(w);
    /* a writer killed inside step 7 leaves its tmp file */
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dump_step_writer *k = dump_step_create(dir, 7, 0, err, sizeof err);
        float v[64] = { 0 };
        dump_tensor_info ti = meta("x", "X", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "x");
        ti.ndim = 1;
        ti.shape[0] = 64;
        if (k)
            dump_step_add_raw(k, &ti, v, err, sizeof err);
        raise(SIGKILL);
    }
    int status;
    ck_assert(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
    snprintf(path, sizeof path, "%s/notes.txt", dir);   /* not step files */
    fclose(fopen(path, "w"));
    snprintf(path, sizeof path, "%s/step-1.h5", dir);
    fclose(fopen(path, "w"));
    dump_step_entry *e = NULL;
    int n = dump_run_list(dir, &e, err, sizeof err);
    ck_assert_msg(n == 4, "%d entries (%s)", n, err);
    ck_assert(e[0].step == 1 && e[0].complete);
    ck_assert_str_eq(e[0].name, "step-00000001.h5");
    ck_assert(e[1].step == 2 && e[1].complete);
    ck_assert(e[2].step == 7 && !e[2].complete);
    ck_assert_str_eq(e[2].name, ".step-00000007.h5.tmp");
    ck_assert(e[3].step == 10 && e[3].complete);
    free(e);
    dump_problems p;
    ck_assert_int_eq(dump_verify(dir, &p), 1);   /* the completed steps are whole */
    problems_have(&p, ".step-00000007.h5.tmp: incomplete step 7", NULL);
    dump_problems_free(&p);
    snprintf(path, sizeof path, "%s/.step-00000007.h5.tmp", dir);
    ck_assert_ptr_null(dump_step_open(path, err, sizeof err));
    ck_assert_msg(strstr(err, ".step-00000007.h5.tmp"), "%s", err);
    ck_assert_int_eq(dump_run_list("/no/such/dir", &e, err, sizeof err), -1);
    ck_assert_str_eq(err, "/no/such/dir: cannot read the directory: No such file or directory");
}
END_TEST

START_TEST(test_verify_good_run)
{
    char dir[128], path[256];
    test_dir(dir, sizeof dir);
    write_run(dir);
    dump_problems p;
    int n = dump_verify(dir, &p);
    ck_assert_msg(n == 0, "%d problems, first: %s", n, n ? p.msg[0] : "");
    dump_problems_free(&p);
    step_path(path, sizeof path, dir, 2);
    ck_assert_int_eq(dump_verify(path, &p), 0);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    ck_assert_int_eq(dump_verify(path, &p), 0);
    ck_assert_int_eq(dump_verify("/no/such/step-00000001.h5", &p), 1);
    ck_assert_str_eq(p.msg[0], "/no/such/step-00000001.h5: cannot open: No such file or directory");
    dump_problems_free(&p);
}
END_TEST

START_TEST(test_verify_truncated_step)
{
    char dir[128], path[256], err[1024] = "";
    test_dir(dir, sizeof dir);
    write_run(dir);
    step_path(path, sizeof path, dir, 2);
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    ck_assert(truncate(path, st.st_size / 2) == 0);
    dump_problems p;
    ck_assert_int_eq(dump_verify(dir, &p), 1);
    problems_have(&p, "step-00000002.h5: not a readable HDF5 file", "truncated");
    dump_problems_free(&p);
    ck_assert_ptr_null(dump_step_open(path, err, sizeof err));
    ck_assert_msg(strstr(err, "step-00000002.h5: not a readable HDF5 file") != NULL, "%s", err);
    dump_step_close(open_ok(dir, 1));   /* the other step is untouched */
}
END_TEST

START_TEST(test_verify_corrupted_step)
{
    char dir[128], path[256], err[1024] = "";
    test_dir(dir, sizeof dir);
    write_run(dir);
    step_path(path, sizeof path, dir, 1);
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    unsigned char junk[256];
    srand(3);
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)rand();
    int fd = open(path, O_WRONLY);
    ck_assert(fd >= 0);
    ck_assert(pwrite(fd, junk, sizeof junk, st.st_size / 2) == (ssize_t)sizeof junk);
    close(fd);
    dump_problems p;
    ck_assert_int_eq(dump_verify(dir, &p), 1);
    problems_have(&p, "step-00000001.h5: /big/out0: cannot read the values", "Fletcher32");
    dump_problems_free(&p);
    /* the reader: the metadata is whole, the values are not */
    dump_step_reader *r = open_ok(dir, 1);
    float *v = malloc(256 * 256 * sizeof *v);
    ck_assert(!dump_step_read_f32(r, find_ok(r, "/big/out0"), v, err, sizeof err));
    ck_assert_msg(strstr(err, "step-00000001.h5: /big/out0: cannot read the values"), "%s", err);
    ck_assert(dump_step_read_f32(r, find_ok(r, "/small/relu/out0"), v, err, sizeof err));
    ck_assert_float_eq(v[2], 3.0f);
    free(v);
    dump_step_close(r);
}
END_TEST

/* The chunks write_chunks stores, checksums included, are byte for byte the
 * ones HDF5's own filter pipeline stores for the same data and layout: a
 * second file gets the same dataset through H5Dwrite (padding of partial
 * chunks filled with zeros there, as write_chunks does) and every chunk is
 * compared raw with H5Dread_chunk. */
static void chunks_match_hdf5(const char *step_file, const char *ref_file, const char *dset)
{
    hid_t f = H5Fopen(step_file, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = f < 0 ? -1 : H5Dopen2(f, dset, H5P_DEFAULT);
    ck_assert_msg(ds >= 0, "%s: cannot open %s", step_file, dset);
    hid_t type = H5Dget_type(ds), sp = H5Dget_space(ds), dcpl = H5Dget_create_plist(ds);
    int rank = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[8], chunk[8], at[8] = { 0 };
    H5Sget_simple_extent_dims(sp, dims, NULL);
    ck_assert_int_eq(H5Pget_chunk(dcpl, rank, chunk), rank);
    size_t bytes = H5Tget_size(type);
    for (int d = 0; d < rank; d++)
        bytes *= dims[d];
    unsigned char *data = malloc(bytes);
    ck_assert_msg(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0,
                  "%s: %s does not read back (checksum?)", step_file, dset);
    hid_t rf = H5Fcreate(ref_file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t rcpl = H5Pcopy(dcpl);
    H5Pset_fill_time(rcpl, H5D_FILL_TIME_ALLOC);
    hid_t rds = H5Dcreate2(rf, "d", type, sp, H5P_DEFAULT, rcpl, H5P_DEFAULT);
    ck_assert(rds >= 0 && H5Dwrite(rds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(rds);
    H5Fclose(rf);
    rf = H5Fopen(ref_file, H5F_ACC_RDONLY, H5P_DEFAULT);
    rds = H5Dopen2(rf, "d", H5P_DEFAULT);
    int chunks = 0;
    for (;;) {
        hsize_t na = 0, nb = 0;
        uint32_t fa = 1, fb = 1;
        ck_assert(H5Dget_chunk_storage_size(ds, at, &na) >= 0 &&
                  H5Dget_chunk_storage_size(rds, at, &nb) >= 0);
        ck_assert_msg(na == nb && na > 0, "%s chunk %d: %llu bytes stored, HDF5 stores %llu", dset,
                      chunks, (unsigned long long)na, (unsigned long long)nb);
        unsigned char *a = malloc(na), *b = malloc(nb);
        ck_assert(H5Dread_chunk(ds, H5P_DEFAULT, at, &fa, a) >= 0 &&
                  H5Dread_chunk(rds, H5P_DEFAULT, at, &fb, b) >= 0);
        ck_assert_msg(fa == 0 && fb == 0 && memcmp(a, b, na) == 0,
                      "%s chunk %d differs from HDF5's (checksum %02x%02x%02x%02x vs %02x%02x%02x%02x)",
                      dset, chunks, a[na - 4], a[na - 3], a[na - 2], a[na - 1], b[nb - 4], b[nb - 3],
                      b[nb - 2], b[nb - 1]);
        free(a);
        free(b);
        chunks++;
        int d = rank - 1; /* next chunk offset, last dimension fastest */
        while (d >= 0 && (at[d] += chunk[d]) >= dims[d])
            at[d--] = 0;
        if (d < 0)
            break;
    }
    H5Dclose(rds);
    H5Fclose(rf);
    free(data);
    H5Pclose(rcpl);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Tclose(type);
    H5Dclose(ds);
    H5Fclose(f);
}

START_TEST(test_chunks_as_hdf5_writes_them)
{
    char dir[128], path[256], ref[256];
    test_dir(dir, sizeof dir);
    /* a 1-D tensor of two chunks, the second partial; a 3-D one split along
     * its middle dimension (partial again); f16 rows; a tiny i32; a 0-d f32 */
    te_tensor *t[5] = {
        te_tensor_new(TE_F32, te_shape(300001)),    te_tensor_new(TE_F32, te_shape(3, 5, 70000)),
        te_tensor_new(TE_F16, te_shape(1000, 777)), te_tensor_new(TE_I32, te_shape(7)),
        te_tensor_new(TE_F32, 0, (const int64_t[]){ 0 }),
    };
    const char *names[5] = { "a", "b", "c", "d", "e" };
    dump_step_writer *w = create_ok(dir, 5, 0);
    srand(11);
    for (int i = 0; i < 5; i++) {
        for (int64_t k = 0; k < t[i]->numel; k++)
            te_set(t[i], k, i == 3 ? (float)(rand() % 1000 - 500) : (float)rand() / RAND_MAX - 0.5f);
        dump_tensor_info ti = meta(names[i], "Linear", DUMP_OUT, 0, i, TE_PHASE_FORWARD, names[i]);
        add_ok(w, &ti, t[i]);
        /* again as slot 1, from a scratch copy (whole chunks checksummed in
         * place): the same chunks, and the copy comes back as it was */
        unsigned char *copy = malloc(t[i]->nbytes + 4), *orig = tu_bytes(t[i]);
        memcpy(copy, orig, t[i]->nbytes);
        memcpy(copy + t[i]->nbytes, "tail", 4);
        ti.slot = 1;
        ti.dtype = t[i]->dtype;
        ti.ndim = t[i]->ndim;
        memcpy(ti.shape, t[i]->shape, sizeof ti.shape);
        char err[512] = "";
        ck_assert_msg(dump_step_add_copy(w, &ti, copy, err, sizeof err), "add_copy: %s", err);
        ck_assert_msg(memcmp(copy, orig, t[i]->nbytes) == 0 &&
                          memcmp(copy + t[i]->nbytes, "tail", 4) == 0,
                      "%s: the scratch copy came back changed", names[i]);
        free(copy);
        free(orig);
    }
    commit_ok(w);
    step_path(path, sizeof path, dir, 5);
    snprintf(ref, sizeof ref, "%s/ref.h5", dir);
    for (int i = 0; i < 5; i++) {
        for (int slot = 0; slot < 2; slot++) {
            char dset[32];
            snprintf(dset, sizeof dset, "/%s/out%d", names[i], slot);
            chunks_match_hdf5(path, ref, dset);
        }
        te_tensor_free(t[i]);
    }
}
END_TEST

/* HDF5 shut down and started again in the same process (H5close drops
 * every file driver): the next step is written all the same. */
START_TEST(test_write_after_h5close)
{
    char dir[128], err[512] = "";
    test_dir(dir, sizeof dir);
    te_tensor *t = te_tensor_new(TE_F32, te_shape(3, 4));
    for (int64_t i = 0; i < t->numel; i++)
        te_set(t, i, (float)i - 5.5f);
    for (int64_t step = 0; step < 2; step++) {
        dump_step_writer *w = create_ok(dir, step, 0);
        dump_tensor_info ti = meta("fc1/linear", "Linear", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "fc1/linear:out0");
        add_ok(w, &ti, t);
        commit_ok(w);
        H5close();
    }
    char path[256];
    step_path(path, sizeof path, dir, 1);
    dump_step_reader *r = dump_step_open(path, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    float v[12];
    ck_assert_msg(dump_step_read_f32(r, 0, v, err, sizeof err), "%s", err);
    ck_assert_float_eq(v[11], 5.5f);
    dump_step_close(r);
}
END_TEST

START_TEST(test_fletcher32_edges)
{
    /* Worked by hand from HDF5's definition (and what HDF5 1.10's
     * H5_checksum_fletcher32 returns for them): the all-zero input, a sum
     * that is a multiple of 65535, and an odd length. The bulk is checked
     * against HDF5's own filter by test_chunks_as_hdf5_writes_them. */
    unsigned char b[4096];
    memset(b, 0, sizeof b);
    ck_assert_uint_eq(dump_fletcher32(b, sizeof b), 0);    /* only all-zero input gives 0 */
    ck_assert_uint_eq(dump_fletcher32(b, 0), 0);
    b[0] = 0xff, b[1] = 0xff;                              /* one word 65535 = 0 (mod 65535) */
    ck_assert_uint_eq(dump_fletcher32(b, 2), 0xffffffffu);
    b[0] = 0x01, b[1] = 0x02;
    ck_assert_uint_eq(dump_fletcher32(b, 2), 0x01020102u); /* sum1 = sum2 = 0x0102 */
    ck_assert_uint_eq(dump_fletcher32(b, 3), 0x02040102u); /* an odd byte: one more (zero) word */
    b[2] = 0x03;                                           /* the odd byte is the high byte */
    ck_assert_uint_eq(dump_fletcher32(b, 3), 0x05040402u); /* sum1 0x0402, sum2 0x0102+0x0402 */
}
END_TEST

/* The definition word by word, to check the blocked lanes against. */
static uint32_t fletcher32_plain(const unsigned char *p, size_t len)
{
    uint32_t s1 = 0, s2 = 0, any = 0;
    for (size_t i = 0; i < len; i += 2) {
        uint32_t w = (uint32_t)p[i] << 8 | (i + 1 < len ? p[i + 1] : 0);
        s1 = (s1 + w) % 65535;
        s2 = (s2 + s1) % 65535;
        any |= w;
    }
    return any ? (s2 ? s2 : 65535) << 16 | (s1 ? s1 : 65535) : 0;
}

/* Lengths around the lane groups and blocks (32 bytes, 8 KiB), at odd
 * addresses, on data whose words are all 65535 and on mixed data. */
START_TEST(test_fletcher32_blocks)
{
    enum { N = 70001 };
    static unsigned char mixed[N + 1], ones[N];
    for (size_t i = 0; i <= N; i++)
        mixed[i] = (unsigned char)(i * 2654435761u >> 13);
    memset(ones, 0xff, sizeof ones);
    static const size_t lens[] = { 31, 32, 33, 64, 8191, 8192, 8193, 8224, 16384, 40000, 65536, N };
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        size_t n = lens[k];
        ck_assert_msg(dump_fletcher32(mixed + 1, n) == fletcher32_plain(mixed + 1, n),
                      "%zu mixed bytes: %08x, by definition %08x", n, dump_fletcher32(mixed + 1, n),
                      fletcher32_plain(mixed + 1, n));
        ck_assert_msg(dump_fletcher32(ones, n) == fletcher32_plain(ones, n),
                      "%zu bytes 0xff: %08x, by definition %08x", n, dump_fletcher32(ones, n),
                      fletcher32_plain(ones, n));
    }
    ck_assert_uint_eq(dump_fletcher32(ones, 65536), 0xffffffffu); /* every word 0 mod 65535 */
}
END_TEST

/* CRC-32C against known vectors (RFC 3720 B.4 and the common check value),
 * on the CPU's instruction and on the table fallback, and the two against
 * each other over lengths and alignments around the hardware loop's three
 * streams of 4 KiB, in one call and in pieces. */
START_TEST(test_crc32c_vectors)
{
    unsigned char zeros[32] = { 0 }, ones[32], up[32], down[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) {
        up[i] = (unsigned char)i;
        down[i] = (unsigned char)(31 - i);
    }
    static const unsigned char pdu[48] = {   /* an iSCSI read command */
        0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18,
        0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0 };
    const struct { const void *data; size_t len; uint32_t crc; } v[] = {
        { "123456789", 9, 0xe3069283u }, { "", 0, 0 }, { "a", 1, 0xc1d04330u },
        { zeros, 32, 0x8a9136aau },     { ones, 32, 0x62a8ab43u },
        { up, 32, 0x46dd794eu },        { down, 32, 0x113fdb5cu },
        { pdu, 48, 0xd9963a56u },
    };
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        ck_assert_msg(dump_crc32c(0, v[k].data, v[k].len) == v[k].crc, "vector %zu: %08x", k,
                      dump_crc32c(0, v[k].data, v[k].len));
        ck_assert_msg(dump_crc32c_sw(0, v[k].data, v[k].len) == v[k].crc, "vector %zu: %08x", k,
                      dump_crc32c_sw(0, v[k].data, v[k].len));
    }
    if (!dump_crc32c_hw_available())
        fprintf(stderr, "test_crc32c_vectors: no SSE4.2 here, the table path alone ran\n");
    enum { N = 3 * 4096 * 3 + 77 };
    static unsigned char m[N + 8];
    for (size_t i = 0; i < sizeof m; i++)
        m[i] = (unsigned char)(i * 2654435761u >> 11);
    static const size_t lens[] = { 7, 8, 4095, 12287, 12288, 12289, 24576, 30000, N };
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
        for (size_t off = 0; off < 8; off += 3) {
            uint32_t sw = dump_crc32c_sw(0, m + off, lens[k]);
            ck_assert_msg(dump_crc32c(0, m + off, lens[k]) == sw, "%zu bytes at +%zu: %08x, "
                          "table %08x", lens[k], off, dump_crc32c(0, m + off, lens[k]), sw);
            size_t half = lens[k] / 3;
            ck_assert_uint_eq(dump_crc32c(dump_crc32c(0, m + off, half), m + off + half,
                                          lens[k] - half), sw);
            ck_assert_uint_eq(dump_crc32c_sw(dump_crc32c_sw(0, m + off, half), m + off + half,
                                             lens[k] - half), sw);
        }
}
END_TEST

/* Every chunked tensor carries attribute crc32c: one CRC-32C per chunk, in
 * chunk order, over the chunk's values (not a last chunk's padding), with
 * and without compression. */
START_TEST(test_crc32c_attribute)
{
    enum { ROWS = 300, COLS = 1000 };   /* two chunks of 150 rows */
    float *v = malloc(ROWS * COLS * sizeof *v);
    for (int i = 0; i < ROWS * COLS; i++)
        v[i] = (float)i * 0.25f;
    for (int gzip = 0; gzip <= 1; gzip++) {
        char dir[128], path[256], err[512] = "";
        test_dir(dir, sizeof dir);
        dump_step_writer *w = create_ok(dir, 0, gzip);
        dump_tensor_info big = tu_dump_info("op0", "Op", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "t0",
                                            TE_F32, te_shape(ROWS, COLS));
        dump_tensor_info odd = tu_dump_info("op1", "Op", DUMP_OUT, 0, 1, TE_PHASE_FORWARD, "t1",
                                            TE_F32, te_shape(7));
        ck_assert_msg(dump_step_add_raw(w, &big, v, err, sizeof err), "%s", err);
        ck_assert_msg(dump_step_add_raw(w, &odd, v, err, sizeof err), "%s", err);
        commit_ok(w);
        snprintf(path, sizeof path, "%s/step-00000000.h5", dir);
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        const struct { const char *ds; int n; size_t bytes[2]; } want[] = {
            { "/op0/out0", 2, { 150 * COLS * 4, 150 * COLS * 4 } }, { "/op1/out0", 1, { 28 } } };
        for (int t = 0; t < 2; t++) {
            hid_t ds = H5Dopen2(f, want[t].ds, H5P_DEFAULT);
            hid_t a = H5Aopen(ds, "crc32c", H5P_DEFAULT);
            ck_assert_msg(a >= 0, "%s: no crc32c (gzip %d)", want[t].ds, gzip);
            hid_t sp = H5Aget_space(a), ty = H5Aget_type(a);
            hsize_t n = 0;
            ck_assert(H5Sget_simple_extent_dims(sp, &n, NULL) == 1 && n == (hsize_t)want[t].n);
            ck_assert(H5Tequal(ty, H5T_STD_U32LE) > 0);
            uint32_t crc[2] = { 0 };
            ck_assert(H5Aread(a, H5T_NATIVE_UINT32, crc) >= 0);
            size_t at = 0;
            for (int c = 0; c < want[t].n; c++) {
                ck_assert_uint_eq(crc[c], dump_crc32c_sw(0, (unsigned char *)v + at,
                                                         want[t].bytes[c]));
                at += want[t].bytes[c];
            }
            H5Tclose(ty);
            H5Sclose(sp);
            H5Aclose(a);
            H5Dclose(ds);
        }
        H5Fclose(f);
    }
    free(v);
}
END_TEST

/* Rewrites attribute name of obj in path as a string, or as int32 value. */
static void poke_attr(const char *path, const char *obj, const char *name, const char *text,
                      int value)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
    ck_assert(f >= 0 && o >= 0);
    H5Adelete(o, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t t = text ? H5Tcopy(H5T_C_S1) : H5Tcopy(H5T_STD_I32LE);
    if (text)
        H5Tset_size(t, H5T_VARIABLE);
    hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(a >= 0);
    ck_assert(H5Awrite(a, text ? t : H5T_NATIVE_INT, text ? (const void *)&text
                                                          : (const void *)&value) >= 0);
    H5Aclose(a);
    H5Tclose(t);
    H5Sclose(sp);
    H5Oclose(o);
    H5Fclose(f);
}

START_TEST(test_verify_bad_attributes)
{
    char dir[128], path[256], err[1024] = "";
    test_dir(dir, sizeof dir);
    write_run(dir);
    step_path(path, sizeof path, dir, 1);
    poke_attr(path, "/big/out0", "slot", "zero", 0);
    poke_attr(path, "/small/relu/in0", "phase", "sideways", 0);
    step_path(path, sizeof path, dir, 2);
    poke_attr(path, "/", "complete", NULL, 0);
    dump_problems p;
    ck_assert_int_eq(dump_verify(dir, &p), 3);
    char want[512];
    snprintf(want, sizeof want, "%s/step-00000001.h5: /big/out0: attribute 'slot' is a string, "
             "expected int32", dir);
    problems_have(&p, want, NULL);
    problems_have(&p, "step-00000001.h5: /small/relu/in0: attribute 'phase' is 'sideways', "
                  "expected forward|backward|update", NULL);
    problems_have(&p, "step-00000002.h5: /: attribute 'complete' is 0, expected 1", NULL);
    dump_problems_free(&p);
    step_path(path, sizeof path, dir, 1);
    ck_assert_ptr_null(dump_step_open(path, err, sizeof err));
    ck_assert_msg(strstr(err, want) && strstr(err, "(and 1 more problem)"), "%s", err);
}
END_TEST

START_TEST(test_not_hdf5_and_quiet)
{
    char dir[128], path[256], err[1024] = "";
    test_dir(dir, sizeof dir);
    step_path(path, sizeof path, dir, 1);
    FILE *f = fopen(path, "w");
    fputs("not an HDF5 file\n", f);
    fclose(f);
    /* HDF5 must print nothing, and its printing comes back afterwards */
    H5E_auto2_t before_fn;
    void *before_data;
    H5Eget_auto2(H5E_DEFAULT, &before_fn, &before_data);
    fflush(stderr);
    int saved = dup(2);
    char log[256];
    snprintf(log, sizeof log, "%s/stderr.txt", dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    dump_step_reader *r = dump_step_open(path, err, sizeof err);
    dump_problems p;
    int n = dump_verify(path, &p);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(err, "step-00000001.h5: not a readable HDF5 file: file signature not "
                         "found"), "%s", err);
    ck_assert_int_eq(n, 1);
    dump_problems_free(&p);
    struct stat st;
    ck_assert(stat(log, &st) == 0);
    ck_assert_msg(st.st_size == 0, "%lld bytes on stderr", (long long)st.st_size);
    H5E_auto2_t after_fn;
    void *after_data;
    H5Eget_auto2(H5E_DEFAULT, &after_fn, &after_data);
    ck_assert(after_fn == before_fn && after_data == before_data);
}
END_TEST

/* A step's /samples table: every field back as written, in order; a step
 * without one has none. */
START_TEST(test_samples_roundtrip)
{
    char dir[128], path[256], err[1024] = "";
    test_dir(dir, sizeof dir);
    dump_sample_row rows[3] = {
        { .batch = 0, .row = 0, .sample = 142, .drawn = 142, .position = 9, .epoch = 0, .seed = -3,
          .dataset = "pts.csv", .source = "pts.csv:144 (byte 3485)" },
        { .batch = 0, .row = 1, .sample = 431, .drawn = 100, .position = 9, .epoch = 0, .seed = -3,
          .dataset = "pts.csv", .source = "pts.csv:433 (byte 10500)" },
        { .batch = 1, .row = 0, .sample = 5, .drawn = 5, .position = -1, .epoch = -1, .seed = 0,
          .dataset = "text \xc3\xa9t\xc3\xa9", .source = "" },
    };
    for (int with = 0; with < 2; with++) {
        dump_step_writer *w = dump_step_create(dir, with + 1, 0, err, sizeof err);
        ck_assert_msg(w != NULL, "%s", err);
        if (with)
            ck_assert_msg(dump_step_set_samples(w, rows, 3, err, sizeof err), "%s", err);
        ck_assert_msg(dump_step_commit(w, err, sizeof err), "%s", err);
        step_path(path, sizeof path, dir, with + 1);
        dump_step_reader *r = dump_step_open(path, err, sizeof err);
        ck_assert_msg(r != NULL, "%s", err);
        dump_sample_row *got = NULL;
        int n = dump_step_samples(r, &got, err, sizeof err);
        ck_assert_int_eq(n, with ? 3 : 0);
        for (int i = 0; i < n; i++)
            ck_assert_msg(got[i].batch == rows[i].batch && got[i].row == rows[i].row && got[i].sample == rows[i].sample &&
                              got[i].drawn == rows[i].drawn && got[i].position == rows[i].position &&
                              got[i].epoch == rows[i].epoch && got[i].seed == rows[i].seed &&
                              strcmp(got[i].dataset, rows[i].dataset) == 0 && strcmp(got[i].source, rows[i].source) == 0,
                          "row %d read back as batch %d row %d sample %lld drawn %lld '%s' '%s'", i, got[i].batch,
                          got[i].row, (long long)got[i].sample, (long long)got[i].drawn, got[i].dataset, got[i].source);
        free(got);
        dump_step_close(r);
        dump_problems p;
        ck_assert_int_eq(dump_verify(path, &p), 0);
        dump_problems_free(&p);
    }
}
END_TEST

/* ---- disk errors ------------------------------------------------------------ */

/* Runs step 2 into dir as an unprivileged user in a child (root ignores
 * permissions); the child's error message comes back through msg. Returns
 * 0 when the step was written, 1 when it failed, 77 when root could not
 * become another user. */
static int write_as_user(const char *dir, char *msg, size_t n)
{
    int fds[2];
    ck_assert(pipe(fds) == 0);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        char err[512] = "";
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(77);
        dump_step_writer *w = dump_step_create(dir, 2, 0, err, sizeof err);
        bool ok = w && dump_step_commit(w, err, sizeof err);
        if (write(fds[1], err, strlen(err) + 1) < 0)
            _exit(3);
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], msg, n - 1);
    msg[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    int status;
    ck_assert(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    return WEXITSTATUS(status);
}

START_TEST(test_disk_no_permission)
{
    char dir[128], path[256], msg[512];
    test_dir(dir, sizeof dir);
    write_run(dir);
    ck_assert(chmod(dir, 0555) == 0);
    int rc = write_as_user(dir, msg, sizeof msg);
    if (rc == 77) {
        tdbg_skip("dump_h5", "root cannot become uid 65534 to test permissions");
        return;
    }
    ck_assert_msg(rc == 1, "the child ended with %d (%s)", rc, msg);
    char want[256];
    snprintf(want, sizeof want, "%s/.step-00000002.h5.tmp: cannot create: Permission denied", dir);
    ck_assert_msg(strstr(msg, want), "error \"%s\" lacks \"%s\"", msg, want);
    chmod(dir, 0755);
    snprintf(path, sizeof path, "%s/.step-00000002.h5.tmp", dir);
    ck_assert(!exists(path));
    dump_step_close(open_ok(dir, 1));
    dump_problems p;
    ck_assert_int_eq(dump_verify(dir, &p), 0);
    /* a directory that cannot be made at all */
    char err[512];
    snprintf(path, sizeof path, "%s/run.h5/sub", dir);
    ck_assert_ptr_null(dump_step_create(path, 1, 0, err, sizeof err));
    ck_assert_msg(strstr(err, "run.h5/sub: cannot make the directory: Not a directory"), "%s", err);
}
END_TEST

START_TEST(test_disk_file_too_large)
{
    char dir[128], path[256], err[1024] = "";
    test_dir(dir, sizeof dir);
    write_run(dir);   /* steps 1 and 2 (about 270 KB each) */
    te_tensor *big = te_tensor_zeros(TE_F32, te_shape(512, 256));   /* 512 KiB */
    struct rlimit old, low;
    ck_assert(getrlimit(RLIMIT_FSIZE, &old) == 0);
    low = old;
    low.rlim_cur = 64 * 1024;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);   /* write fails with EFBIG instead */
    ck_assert(setrlimit(RLIMIT_FSIZE, &low) == 0);
    dump_step_writer *w = dump_step_create(dir, 3, 0, err, sizeof err);
    bool ok = w != NULL;
    if (ok) {
        dump_tensor_info ti = meta("big", "X", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "big");
        ok = dump_step_add(w, &ti, big, err, sizeof err);
        char err2[1024] = "";
        bool committed = dump_step_commit(w, ok ? err : err2, sizeof err);
        ok = ok && committed;
    }
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, was);
    ck_assert_msg(!ok, "a 512 KiB step was written under a 64 KiB file size limit");
    char want[256];
    snprintf(want, sizeof want, "%s/.step-00000003.h5.tmp: ", dir);
    ck_assert_msg(strstr(err, want) && strstr(err, "File too large"), "%s", err);
    snprintf(path, sizeof path, "%s/.step-00000003.h5.tmp", dir);
    ck_assert(!exists(path));
    step_path(path, sizeof path, dir, 3);
    ck_assert(!exists(path));
    dump_problems p;
    int n = dump_verify(dir, &p);
    ck_assert_msg(n == 0, "%d problems, first: %s", n, n ? p.msg[0] : "");
}
END_TEST

START_TEST(test_commit_failure_removes_tmp)
{
    char dir[128], path[256], err[1024] = "";
    test_dir(dir, sizeof dir);
    step_path(path, sizeof path, dir, 6);
    ck_assert(mkdir(path, 0755) == 0);   /* the final name is taken by a directory */
    char inner[300];
    snprintf(inner, sizeof inner, "%s/keep", path);
    fclose(fopen(inner, "w"));
    dump_step_writer *w = create_ok(dir, 6, 0);
    te_tensor *x = te_tensor_from(TE_F32, te_shape(2), ((float[]){ 1, 2 }));
    dump_tensor_info ti = meta("x", "X", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "x");
    add_ok(w, &ti, x);
    ck_assert(!dump_step_commit(w, err, sizeof err));
    ck_assert_msg(strstr(err, ".step-00000006.h5.tmp: cannot rename to ") &&
                  strstr(err, "step-00000006.h5: Is a directory"), "%s", err);
    dump_step_entry *e = NULL;
    ck_assert_int_eq(dump_run_list(dir, &e, err, sizeof err), 0);   /* no tmp left */
    free(e);
    ck_assert(exists(inner));
    /* an aborted step leaves nothing either */
    w = create_ok(dir, 8, 0);
    add_ok(w, &ti, x);
    dump_step_abort(w);
    ck_assert_int_eq(dump_run_list(dir, &e, err, sizeof err), 0);
    free(e);
}
END_TEST

/* ---- interop ------------------------------------------------------------------ */

START_TEST(test_interop_h5py)
{
    if (system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0) {
        tdbg_skip("dump_h5", "h5py not found for /usr/bin/python3 (apt-get install python3-h5py)");
        return;
    }
    char dir[128], out[512] = "";
    test_dir(dir, sizeof dir);
    write_run(dir);   /* 6 f32 tensors */
    dump_step_writer *w = create_ok(dir, 3, 1);
    uint16_t h[] = { 0x3c00, 0xc100, 0x7bff };
    te_tensor *all[] = {
        te_tensor_from(TE_F16, te_shape(3), h),
        te_tensor_from(TE_BF16, te_shape(3, 1), h),
        te_tensor_from(TE_I32, te_shape(1, 1, 1, 2), ((int32_t[]){ -4, 9 })),
        te_tensor_from(TE_F16, 0, (const int64_t[]){ 0 }, h + 1),
    };
    const char *ops[] = { "amp/cast", "amp/bcast", "batch", "grad/loss" };
    for (int i = 0; i < 4; i++) {
        dump_tensor_info ti = meta(ops[i], "Cast", DUMP_OUT, 0, i, TE_PHASE_BACKWARD, ops[i]);
        add_ok(w, &ti, all[i]);
    }
    dump_stats_row row = { .io = DUMP_OUT, .min = 1, .max = 2 };
    snprintf(row.op, sizeof row.op, "fc1/linear");
    ck_assert(dump_step_add_stats(w, &row, 1, out, sizeof out));
    commit_ok(w);
    int status = tu_shell(out, sizeof out, "/usr/bin/python3 '%s/tests/interop_h5py.py' '%s' 2>&1",
                          TDBG_SRCDIR, dir);
    ck_assert_msg(status == 0, "interop failed:\n%s", out);
    ck_assert_msg(strstr(out, "interop ok: 11 tensors"), "%s", out);
}
END_TEST

static void add_tests(TCase *tc)
{
    tcase_add_test(tc, test_tensor_paths);
    tcase_add_test(tc, test_roundtrip_f32);
    tcase_add_test(tc, test_roundtrip_f16_bf16);
    tcase_add_test(tc, test_roundtrip_i32_raw_copy);
    tcase_add_test(tc, test_attributes_and_order);
    tcase_add_test(tc, test_path_conflicts_refused);
    tcase_add_test(tc, test_gzip_roundtrip);
    tcase_add_test(tc, test_chunks_as_hdf5_writes_them);
    tcase_add_test(tc, test_write_after_h5close);
    tcase_add_test(tc, test_fletcher32_edges);
    tcase_add_test(tc, test_fletcher32_blocks);
    tcase_add_test(tc, test_crc32c_vectors);
    tcase_add_test(tc, test_crc32c_attribute);
    tcase_add_test(tc, test_stats_roundtrip);
    tcase_add_test(tc, test_samples_roundtrip);
    tcase_add_test(tc, test_run_metadata_roundtrip);
    tcase_add_test(tc, test_list_after_kill9);
    tcase_add_test(tc, test_verify_good_run);
    tcase_add_test(tc, test_verify_truncated_step);
    tcase_add_test(tc, test_verify_corrupted_step);
    tcase_add_test(tc, test_verify_bad_attributes);
    tcase_add_test(tc, test_not_hdf5_and_quiet);
    tcase_add_test(tc, test_disk_no_permission);
    tcase_add_test(tc, test_disk_file_too_large);
    tcase_add_test(tc, test_commit_failure_removes_tmp);
    tcase_add_test(tc, test_interop_h5py);
}

Suite *suite_dump_h5(void)
{
    Suite *s = suite_create("dump_h5");
    TCase *tc = tcase_create("h5");
    tcase_add_unchecked_fixture(tc, suite_dir_make, suite_dir_remove);
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    add_tests(tc);
    suite_add_tcase(s, tc);
    return s;
}
