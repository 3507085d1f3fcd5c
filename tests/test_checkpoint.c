/*
 * test_checkpoint.c — the examples' --save/--load resume exactly: for mlp,
 * cnn and gpt, 6 steps straight against 3 steps, a checkpoint, and 3 more
 * from it give the same step lines, the same final line and, saved at the
 * end both ways, the same file bit for bit (parameters, batch norm's
 * statistics, optimizer state, scaler, step, data position), in eager and
 * graph mode, at --amp O2 bf16 and with loader workers; a run that crashes
 * goes on from its last --save-every checkpoint as if it never stopped; a
 * damaged, truncated or mismatched checkpoint is one message naming the
 * file and what is wrong, and nothing trains.
 */
#include "suites.h"
#include "testutil.h"
#include "tsession.h"

#include <hdf5.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT TDBG_SRCDIR "/tests/fixtures/alice.txt"
/* Small enough for a fraction of a second a run on one thread. With 16
 * samples in batches of 8 an epoch is 2 steps: a checkpoint at step 3 sits
 * in the middle of the second epoch's shuffle. */
#define MLP "--hidden 16,16 --batch 8 --train-size 16 --threads 1 --log-every 1"
#define CNN "--channels 4,4,4 --batch 8 --train-size 16 --threads 1 --log-every 1"
#define GPT "--data '" TEXT "' --layers 1 --heads 2 --embd 16 --block 16 --batch 4 --threads 1 --log-every 1 " \
            "--warmup 2 --eval-every 2 --dropout 0.1"

static char scratch[256];
static void scratch_up(void) { tu_scratch_make(scratch, sizeof scratch, "tdbg-ckpt"); }
static void scratch_down(void) { tu_scratch_remove(scratch); }

static ts_session run(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ts_session run(const char *prog, const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return ts_sh("'%s/examples/%s' %s", TDBG_BUILDDIR, prog, args);
}

/* Appends the lines of out that start with "step=" or "final:" to buf. */
static void result_lines(const char *out, char *buf, size_t n)
{
    size_t used = strlen(buf);
    for (const char *line = out; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line + 1) : strlen(line);
        if ((strncmp(line, "step=", 5) == 0 || strncmp(line, "final:", 6) == 0) && used + len < n) {
            memcpy(buf + used, line, len);
            buf[used += len] = '\0';
        }
        line += len;
    }
}

/* ---- the same file, bit for bit --------------------------------------------------- */

/* The raw bytes of object name's attributes and data in the file's own
 * types, one blob per object. */
typedef struct {
    hid_t other;     /* the file compared with */
    char diff[512];  /* the first difference */
    int objects;
} cmp_ctx;

static void *read_raw(hid_t obj, bool attr, size_t *bytes)
{
    hid_t t = attr ? H5Aget_type(obj) : H5Dget_type(obj), s = attr ? H5Aget_space(obj) : H5Dget_space(obj);
    *bytes = H5Tget_size(t) * (size_t)H5Sget_simple_extent_npoints(s);
    void *v = calloc(1, *bytes + 1);
    ck_assert(v != NULL);
    ck_assert(attr ? H5Aread(obj, t, v) >= 0 : H5Dread(obj, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Sclose(s);
    H5Tclose(t);
    return v;
}

static herr_t cmp_attr(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
    (void)info;
    cmp_ctx *c = data;
    char where[300];
    ssize_t len = H5Iget_name(loc, where, sizeof where);
    ck_assert(len > 0);
    if (H5Aexists_by_name(c->other, where, name, H5P_DEFAULT) <= 0) {
        snprintf(c->diff, sizeof c->diff, "attribute %s of %s only in one file", name, where);
        return 1;
    }
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT), b = H5Aopen_by_name(c->other, where, name, H5P_DEFAULT, H5P_DEFAULT);
    size_t na, nb;
    void *va = read_raw(a, true, &na), *vb = read_raw(b, true, &nb);
    const bool same = na == nb && memcmp(va, vb, na) == 0;
    free(va);
    free(vb);
    H5Aclose(a);
    H5Aclose(b);
    if (!same)
        snprintf(c->diff, sizeof c->diff, "attribute %s of %s differs", name, where);
    return same ? 0 : 1;
}

static herr_t cmp_object(hid_t f, const char *name, const H5O_info_t *info, void *data)
{
    cmp_ctx *c = data;
    if (H5Lexists(c->other, name, H5P_DEFAULT) <= 0 && strcmp(name, ".") != 0) {
        snprintf(c->diff, sizeof c->diff, "/%s only in one file", name);
        return 1;
    }
    hid_t o = H5Oopen(f, name, H5P_DEFAULT);
    herr_t rc = H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_INC, NULL, cmp_attr, c);
    if (rc == 0 && info->type == H5O_TYPE_DATASET) {
        hid_t d = H5Dopen2(c->other, name, H5P_DEFAULT);
        size_t na, nb;
        void *va = read_raw(o, false, &na), *vb = read_raw(d, false, &nb);
        if (na != nb || memcmp(va, vb, na) != 0) {
            snprintf(c->diff, sizeof c->diff, "dataset /%s differs", name);
            rc = 1;
        }
        free(va);
        free(vb);
        H5Dclose(d);
    }
    H5Oclose(o);
    c->objects++;
    return rc;
}

/* Every object, attribute and dataset of a is in b with the same bytes; *n
 * gets the count of objects. "" when so, else the first difference. */
static const char *one_way(const char *a, const char *b, int *n, char *diff, size_t len)
{
    hid_t fa = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT), fb = H5Fopen(b, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(fa >= 0 && fb >= 0, "cannot open %s or %s", a, b);
    cmp_ctx c = { .other = fb };
    H5Ovisit2(fa, H5_INDEX_NAME, H5_ITER_INC, cmp_object, &c, H5O_INFO_BASIC);
    H5Fclose(fa);
    H5Fclose(fb);
    *n = c.objects;
    snprintf(diff, len, "%s", c.diff);
    return diff;
}

/* Fails unless files a and b hold the same objects with the same bytes. */
static void assert_same_file(const char *a, const char *b, const char *what)
{
    char diff[512];
    int na, nb;
    ck_assert_msg(!one_way(a, b, &na, diff, sizeof diff)[0], "%s: %s", what, diff);
    ck_assert_msg(!one_way(b, a, &nb, diff, sizeof diff)[0], "%s: %s", what, diff);
    ck_assert_msg(na == nb && na > 10, "%s: %d and %d objects", what, na, nb);
}

/* ---- resuming ---------------------------------------------------------------------- */

static const struct {
    const char *prog, *args;
} runs[] = {
    { "mlp", MLP },
    { "mlp", MLP " --mode graph" },
    { "mlp", MLP " --amp O2 --amp-dtype bf16" },
    { "mlp", MLP " --workers 2" },
    { "mlp", MLP " --accum 2 --optim sgd --momentum 0.9 --clip 0.5" },
    { "cnn", CNN },
    { "cnn", CNN " --mode graph" },
    { "cnn", CNN " --amp O2 --amp-dtype bf16" },
    { "cnn", CNN " --amp O2 --amp-dtype bf16 --mode graph" },
    { "cnn", CNN " --workers 2" },
    { "gpt", GPT },
    { "gpt", GPT " --mode graph" },
    { "gpt", GPT " --amp O2 --amp-dtype bf16" },
};

/* 6 steps straight and saved at the end, against --stop-at 3 and --save,
 * then --load and 3 more steps, saved at the end: the same lines and the
 * same file. */
START_TEST(test_resume_exact)
{
    const char *prog = runs[_i].prog, *args = runs[_i].args;
    char dir[512], full[600], part[600], rest[600];
    tu_scratch_sub(scratch, dir, sizeof dir);
    snprintf(full, sizeof full, "%s/full.h5", dir);
    snprintf(part, sizeof part, "%s/part.h5", dir);
    snprintf(rest, sizeof rest, "%s/rest.h5", dir);
    ts_session a = run(prog, "%s --steps 6 --save '%s'", args, full);
    ts_session b = run(prog, "%s --steps 6 --stop-at 3 --save '%s'", args, part);
    ts_session c = run(prog, "%s --steps 6 --load '%s' --save '%s'", args, part, rest);
    ts_status_is(&a, 0);
    ts_status_is(&b, 0);
    ts_status_is(&c, 0);
    ts_has(&b, "saved: ");
    ts_has(&b, " at step 3\n");
    ts_has(&c, "resumed: ");
    ts_has(&c, " at step 3, data position ");
    ck_assert_msg(!strstr(c.out, "\nstep=2 ") && strstr(c.out, "\nstep=3 ") && strstr(c.out, "\nstep=5 "),
                  "%s %s: the resumed run runs steps 3 to 5:\n%s", prog, args, c.out);
    static char want[16384], got[16384];
    want[0] = got[0] = '\0';
    result_lines(a.out, want, sizeof want);
    /* the first part's final line is its own (evaluated at step 3) */
    result_lines(b.out, got, sizeof got);
    char *cut = strstr(got, "final:");
    ck_assert(cut != NULL);
    *cut = '\0';
    result_lines(c.out, got, sizeof got);
    ck_assert_msg(strstr(want, "step=5 ") && strcmp(want, got) == 0,
                  "%s %s: resumed lines differ from the uninterrupted run's:\n%s---\n%s", prog, args, want, got);
    char what[2300];
    snprintf(what, sizeof what, "%s %s: the state after step 5", prog, args);
    assert_same_file(full, rest, what);
    ts_free(&a);
    ts_free(&b);
    ts_free(&c);
}
END_TEST

/* The same comparison sees a difference: after one more step, or with
 * another seed, the files are not the same. */
START_TEST(test_compare_can_fail)
{
    char dir[512], a[600], b[600], diff[512];
    tu_scratch_sub(scratch, dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a.h5", dir);
    snprintf(b, sizeof b, "%s/b.h5", dir);
    ts_session r1 = run("cnn", "%s --steps 6 --save '%s'", CNN, a);
    ts_session r2 = run("cnn", "%s --steps 6 --lr 0.0031 --save '%s'", CNN, b);
    ts_status_is(&r1, 0);
    ts_status_is(&r2, 0);
    int n;
    ck_assert_msg(strstr(one_way(a, b, &n, diff, sizeof diff), "dataset /buffers/bn1.running_mean differs") ||
                  strstr(diff, "dataset /optim/"), "another learning rate, and: '%s'", diff);
    ts_free(&r1);
    ts_free(&r2);
}
END_TEST

/* --save-every 2: a run that crashes in step 4 leaves the checkpoint of
 * step 4 (steps 0-3 done), whole, and no temporary file; resumed from it,
 * steps 4 and 5 and the final line are those of the run that never
 * crashed. */
START_TEST(test_save_every_crash)
{
    static const char *const progs[][3] = {
        { "mlp", MLP, "segv@op=fc2/linear,step=4" },
        { "cnn", CNN " --workers 2", "segv@op=conv2/conv,step=4" },
    };
    for (int p = 0; p < 2; p++) {
        char dir[512], ck[600];
        tu_scratch_sub(scratch, dir, sizeof dir);
        snprintf(ck, sizeof ck, "%s/every.h5", dir);
        ts_session full = run(progs[p][0], "%s --steps 6", progs[p][1]);
        ts_session crash = run(progs[p][0], "%s --steps 6 --save-every 2 --save '%s' --inject %s", progs[p][1], ck,
                               progs[p][2]);
        ts_status_is(&full, 0);
        ck_assert_msg(crash.status != 0 && strstr(crash.out, "saved: ") && strstr(crash.out, " at step 2\n") &&
                      strstr(crash.out, " at step 4\n") && !strstr(crash.out, "\nstep=4 "),
                      "%s: saved at steps 2 and 4, crashed in step 4:\n%s", progs[p][0], crash.out);
        ts_session tmp = ts_sh("ls '%s'", dir);
        ck_assert_msg(!strstr(tmp.out, ".tmp"), "a temporary file is left:\n%s", tmp.out);
        ts_session rest = run(progs[p][0], "%s --steps 6 --load '%s'", progs[p][1], ck);
        ts_status_is(&rest, 0);
        ts_has(&rest, " at step 4, data position 32\n");
        static char want[8192], got[8192];
        want[0] = got[0] = '\0';
        result_lines(full.out, want, sizeof want);
        result_lines(rest.out, got, sizeof got);
        const char *from = strstr(want, "step=4 ");
        ck_assert_msg(from && strcmp(from, got) == 0, "%s: resumed after the crash:\n%s---\n%s", progs[p][0], want,
                      got);
        ts_free(&full);
        ts_free(&crash);
        ts_free(&tmp);
        ts_free(&rest);
    }
}
END_TEST

/* ---- the file --------------------------------------------------------------------- */

static void attr_string(hid_t loc, const char *obj, const char *name, char *buf, size_t n)
{
    hid_t a = H5Aopen_by_name(loc, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "no attribute %s on %s", name, obj);
    hid_t t = H5Aget_type(a);
    ck_assert(H5Tget_class(t) == H5T_STRING && H5Tget_size(t) < n);
    memset(buf, 0, n);
    ck_assert(H5Aread(a, t, buf) >= 0);
    H5Tclose(t);
    H5Aclose(a);
}

static int64_t dataset_i64(hid_t f, const char *path)
{
    int64_t v = -1;
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    ck_assert_msg(d >= 0 && H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) >= 0, "no %s", path);
    H5Dclose(d);
    return v;
}

/* cnn's checkpoint as any HDF5 reader sees it: version 2, its program and
 * widths, the running statistics (a variance not all ones after 3 steps),
 * the loader's epoch. */
START_TEST(test_cnn_file)
{
    char dir[512], ck[600], s[64];
    tu_scratch_sub(scratch, dir, sizeof dir);
    snprintf(ck, sizeof ck, "%s/ck.h5", dir);
    ts_session r = run("cnn", "%s --steps 6 --stop-at 3 --save '%s'", CNN, ck);
    ts_status_is(&r, 0);
    ts_free(&r);
    hid_t f = H5Fopen(ck, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    attr_string(f, ".", "program", s, sizeof s);
    ck_assert_str_eq(s, "cnn");
    attr_string(f, ".", "channels", s, sizeof s);
    ck_assert_str_eq(s, "4,4,4");
    int64_t version = 0;
    hid_t a = H5Aopen(f, "version", H5P_DEFAULT);
    ck_assert(a >= 0 && H5Aread(a, H5T_NATIVE_INT64, &version) >= 0);
    H5Aclose(a);
    ck_assert_int_eq(version, 2);
    ck_assert_int_eq(dataset_i64(f, "step"), 3);
    ck_assert_int_eq(dataset_i64(f, "data/position"), 24);
    ck_assert_int_eq(dataset_i64(f, "data/epoch"), 1); /* batch 3 is the second of epoch 1 */
    float var[4];
    hid_t d = H5Dopen2(f, "buffers/bn2.running_var", H5P_DEFAULT);
    ck_assert(d >= 0 && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, var) >= 0);
    H5Dclose(d);
    ck_assert_msg(var[0] != 1.0f && var[0] > 0.0f, "bn2.running_var[0] = %g after 3 steps", (double)var[0]);
    for (int k = 1; k <= 3; k++) {
        char path[64];
        snprintf(path, sizeof path, "buffers/bn%d.running_mean", k);
        ck_assert_msg(H5Lexists(f, "buffers", H5P_DEFAULT) > 0 && H5Lexists(f, path, H5P_DEFAULT) > 0, "no /%s",
                      path);
    }
    H5Fclose(f);
}
END_TEST

/* ---- refused ---------------------------------------------------------------------- */

/* In file path, deletes the object or root attribute at del ("/@NAME"),
 * and sets the int64 dataset or root attribute at set to value (each when
 * not NULL). */
static void edit(const char *path, const char *del, const char *set, int64_t value)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(f >= 0);
    if (del) {
        const char *at = strchr(del, '@');
        ck_assert_msg(at ? H5Adelete(f, at + 1) >= 0 : H5Ldelete(f, del, H5P_DEFAULT) >= 0, "cannot delete %s", del);
    }
    if (set) {
        const char *at = strchr(set, '@');
        hid_t o = at ? H5Aopen(f, at + 1, H5P_DEFAULT) : H5Dopen2(f, set, H5P_DEFAULT);
        ck_assert_msg(o >= 0 && (at ? H5Awrite(o, H5T_NATIVE_INT64, &value)
                                    : H5Dwrite(o, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value)) >= 0,
                      "cannot set %s", set);
        at ? H5Aclose(o) : H5Dclose(o);
    }
    H5Fclose(f);
}

/* Copies src to dst, then edits dst. */
static void damaged_copy(const char *src, const char *dst, const char *del, const char *set, int64_t value)
{
    ts_session cp = ts_sh("cp '%s' '%s'", src, dst);
    ts_status_is(&cp, 0);
    ts_free(&cp);
    edit(dst, del, set, value);
}

START_TEST(test_refused)
{
    char dir[512], cnn_ck[600], mlp_ck[600], bad[600];
    tu_scratch_sub(scratch, dir, sizeof dir);
    snprintf(cnn_ck, sizeof cnn_ck, "%s/cnn.h5", dir);
    snprintf(mlp_ck, sizeof mlp_ck, "%s/mlp.h5", dir);
    snprintf(bad, sizeof bad, "%s/bad.h5", dir);
    ts_session r = run("cnn", "%s --steps 6 --stop-at 3 --save '%s'", CNN, cnn_ck);
    ts_status_is(&r, 0);
    ts_free(&r);
    r = run("mlp", "%s --steps 6 --stop-at 3 --save '%s'", MLP, mlp_ck);
    ts_status_is(&r, 0);
    ts_free(&r);

    static const struct {
        const char *prog, *flags, *from; /* from: the file of "cnn" or "mlp", "cut" short, or "text" */
        const char *del, *set;
        int64_t value;
        const char *want;
    } cases[] = {
        { "cnn", "", "cut", NULL, NULL, 0, "not an HDF5 file, or not readable" },
        { "cnn", "", "text", NULL, NULL, 0, "not an HDF5 file, or not readable" },
        { "cnn", "", "cnn", "/buffers/bn2.running_var", NULL, 0, "missing dataset /buffers/bn2.running_var" },
        { "cnn", "", "cnn", "/params/fc.bias", NULL, 0, "missing dataset /params/fc.bias" },
        { "cnn", "", "cnn", "/data/position", NULL, 0, "missing dataset /data/position" },
        { "cnn", "", "cnn", "/@program", NULL, 0, "no attribute 'program' on /" },
        { "cnn", " --channels 4,4,8", "cnn", NULL, NULL, 0,
          "made with channels=4,4,4; this run has --channels 4,4,8 (give the flags the checkpoint was made with)" },
        { "mlp", " --hidden 16,32", "mlp", NULL, NULL, 0, "made with hidden=16,16; this run has --hidden 16,32" },
        { "mlp", " --data spirals", "mlp", NULL, NULL, 0, "made with data=blobs; this run has --data spirals" },
        { "cnn", " --batch 4", "cnn", NULL, NULL, 0, "made with batch=8; this run has --batch 4" },
        { "cnn", " --train-size 32", "cnn", NULL, NULL, 0, "made with train_size=16; this run has --train-size 32" },
        { "cnn", " --optim sgd", "cnn", NULL, NULL, 0, "optimizer adam; this run has --optim sgd" },
        { "cnn", " --amp O2", "cnn", NULL, NULL, 0, "made with --amp O0; this run has --amp O2 --amp-dtype f16" },
        { "mlp", "", "cnn", NULL, NULL, 0, "made by cnn; this is mlp (a checkpoint resumes the program that wrote it)" },
        { "cnn", "", "cnn", NULL, "/@version", 3, "version 3; this program reads versions 1 to 2" },
        { "cnn", "", "cnn", NULL, "/data/epoch", 5,
          "data position 24 is in epoch 1 of this run's loader; the file says epoch 5" },
        { "cnn", "", "cnn", NULL, "/data/position", 20, "data position 20 is not a whole number of --batch 8 batches" },
        { "cnn", "", "cnn", NULL, "/step", -4, "step -4, rng step 3, data position 24, epoch 1 or seed 1 out of range" },
        { "cnn", " --steps 3", "cnn", NULL, NULL, 0, "is at step 3: nothing left of --steps 3" },
        { "cnn", " --stop-at 2", "cnn", NULL, NULL, 0, "is at step 3: --stop-at 2 is behind it" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(cases[i].from, "cut") == 0 || strcmp(cases[i].from, "text") == 0) {
            ts_session w = cases[i].from[0] == 'c' ? ts_sh("head -c 3000 '%s' > '%s'", cnn_ck, bad)
                                                   : ts_sh("echo 'no checkpoint' > '%s'", bad);
            ts_status_is(&w, 0);
            ts_free(&w);
        } else {
            damaged_copy(strcmp(cases[i].from, "mlp") == 0 ? mlp_ck : cnn_ck, bad, cases[i].del, cases[i].set,
                         cases[i].value);
        }
        ts_session b = run(cases[i].prog, "%s --steps 6%s --load '%s'", cases[i].prog[0] == 'm' ? MLP : CNN,
                           cases[i].flags, bad);
        char want[1024];
        snprintf(want, sizeof want, "%s: checkpoint %s", cases[i].prog, bad);
        ck_assert_msg(b.status == 2 && strstr(b.out, want) && strstr(b.out, cases[i].want) && !strstr(b.out, "step="),
                      "case %zu (%s%s): exit %d, want 2 and '%s: %s' and no step:\n%s", i, cases[i].prog,
                      cases[i].flags, b.status, want, cases[i].want, b.out);
        ck_assert_msg(ts_count(&b, want) == 1, "case %zu: one message:\n%s", i, b.out);
        ts_free(&b);
    }
    /* a parameter of another shape than the model's */
    damaged_copy(cnn_ck, bad, "/params/fc.weight", NULL, 0);
    hid_t f = H5Fopen(bad, H5F_ACC_RDWR, H5P_DEFAULT);
    hsize_t dims[2] = { 10, 8 };
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate2(f, "/params/fc.weight", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(d >= 0);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
    ts_session b = run("cnn", "%s --steps 6 --load '%s'", CNN, bad);
    ts_status_is(&b, 2);
    ts_has(&b, "/params/fc.weight has shape [10,8]; the model's is [10,4]");
    ts_free(&b);
    /* flags */
    b = run("mlp", "%s --save-every 2", MLP);
    ts_status_is(&b, 2);
    ts_has(&b, "mlp: --save-every needs --save FILE, the checkpoint it writes\n");
    ts_free(&b);
    b = run("mlp", "%s --steps 2 --save /nonexistent/dir/ck.h5", MLP);
    ts_status_is(&b, 2);
    ts_has(&b, "mlp: cannot write checkpoint /nonexistent/dir/ck.h5.tmp: ");
    ck_assert_msg(!strstr(b.out, "final:"), "went on after a failed save:\n%s", b.out);
    ts_free(&b);
}
END_TEST

/* A version 1 file (gpt's, before program, /buffers and /data/epoch) still
 * loads, and resumes exactly. */
START_TEST(test_version1_loads)
{
    char dir[512], part[600], old[600];
    tu_scratch_sub(scratch, dir, sizeof dir);
    snprintf(part, sizeof part, "%s/part.h5", dir);
    snprintf(old, sizeof old, "%s/v1.h5", dir);
    ts_session full = run("gpt", "%s --steps 6", GPT);
    ts_session b = run("gpt", "%s --steps 6 --stop-at 3 --save '%s'", GPT, part);
    ts_status_is(&full, 0);
    ts_status_is(&b, 0);
    damaged_copy(part, old, "/@program", "/@version", 1);
    edit(old, "/buffers", NULL, 0);
    ts_session c = run("gpt", "%s --steps 6 --load '%s'", GPT, old);
    ts_status_is(&c, 0);
    static char want[8192], got[8192];
    want[0] = got[0] = '\0';
    result_lines(full.out, want, sizeof want);
    result_lines(c.out, got, sizeof got);
    const char *from = strstr(want, "step=3 ");
    ck_assert_msg(from && strcmp(from, got) == 0, "resumed from version 1:\n%s---\n%s", want, got);
    ts_free(&full);
    ts_free(&b);
    ts_free(&c);
}
END_TEST

Suite *suite_checkpoint(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("resume");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, scratch_up, scratch_down);
    tcase_add_loop_test(tc, test_resume_exact, 0, (int)(sizeof runs / sizeof runs[0]));
    tcase_add_test(tc, test_compare_can_fail);
    tcase_add_test(tc, test_save_every_crash);
    tcase_add_test(tc, test_version1_loads);
    suite_add_tcase(s, tc);
    tc = tcase_create("file");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, scratch_up, scratch_down);
    tcase_add_test(tc, test_cnn_file);
    tcase_add_test(tc, test_refused);
    suite_add_tcase(s, tc);
    return s;
}
