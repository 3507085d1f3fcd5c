/* test_dump_damage.c — every reader of a dump (tdbg-dump ls, show, stats,
 * export, verify and tdbg-diff, run in process) given a damaged file: one
 * test per damage class (bit flips in the superblock, an object header, the
 * /ops table and a chunk index; zeroed ranges; truncation at every metadata
 * boundary; a file that is not HDF5; a newer format number; a parse that
 * hangs or crashes), each asserting the exit code, a message naming the
 * file, a bounded time, that the intact step is still read and that no
 * file changed (dump/contain.c, docs/dump-format.md). */
#include "contain.h"
#include "diff.h"
#include "dump.h"
#include "h5file.h"
#include "suites.h"
#include "testutil.h"

#include <hdf5.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char suite_dir[64];
static void suite_dir_make(void) { tu_scratch_make(suite_dir, sizeof suite_dir, "tdbg-damage"); }
static void suite_dir_remove(void) { tu_scratch_remove(suite_dir); }

/* A run: run.h5 with two ops, step 1 and step 2 (the one damaged unless
 * run.h5 is), each with a chunked [640, 1024] and a [8] f32 tensor; `ref`
 * beside it is an intact copy for tdbg-diff. */
typedef struct fixture {
    char dir[128], ref[160], step1[192], step2[192], run[192], npy[192];
} fixture;

static void write_step(const char *dir, int64_t step)
{
    static float a[640 * 1024], b[8];   /* a: 2.5 MB, three chunks and their index */
    for (int i = 0; i < 640 * 1024; i++)
        a[i] = (float)(i % 97) * 0.5f + (float)step;
    for (int i = 0; i < 8; i++)
        b[i] = (float)i - 3;
    char err[512] = "";
    dump_step_writer *w = dump_step_create(dir, step, 0, err, sizeof err);
    ck_assert_msg(w != NULL, "create: %s", err);
    dump_tensor_info ta = tu_dump_info("a", "Linear", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "a:out0",
                                       TE_F32, te_shape(640, 1024));
    dump_tensor_info tb = tu_dump_info("b", "ReLU", DUMP_OUT, 0, 1, TE_PHASE_FORWARD, "b:out0",
                                       TE_F32, te_shape(8));
    ck_assert_msg(dump_step_add_raw(w, &ta, a, err, sizeof err), "add: %s", err);
    ck_assert_msg(dump_step_add_raw(w, &tb, b, err, sizeof err), "add: %s", err);
    ck_assert_msg(dump_step_commit(w, err, sizeof err), "commit: %s", err);
}

static void write_dir(const char *dir)
{
    char err[512] = "";
    dump_run_meta m = { .mode = TE_MODE_EAGER, .seed = 7 };
    snprintf(m.engine_version, sizeof m.engine_version, "0.1.0");
    snprintf(m.amp, sizeof m.amp, "none");
    snprintf(m.backend, sizeof m.backend, "cpu");
    snprintf(m.command_line, sizeof m.command_line, "./mlp --steps 2");
    dump_op_row ops[2] = { { .exec = 0, .phase = TE_PHASE_FORWARD, .line = 10 },
                           { .exec = 1, .phase = TE_PHASE_FORWARD, .line = 11 } };
    snprintf(ops[0].name, sizeof ops[0].name, "a");
    snprintf(ops[0].type, sizeof ops[0].type, "Linear");
    snprintf(ops[0].outputs, sizeof ops[0].outputs, "a:out0");
    snprintf(ops[1].name, sizeof ops[1].name, "b");
    snprintf(ops[1].type, sizeof ops[1].type, "ReLU");
    snprintf(ops[1].inputs, sizeof ops[1].inputs, "a:out0");
    snprintf(ops[1].outputs, sizeof ops[1].outputs, "b:out0");
    ck_assert_msg(dump_run_write(dir, &m, ops, 2, err, sizeof err), "run.h5: %s", err);
    write_step(dir, 1);
    write_step(dir, 2);
}

static void fixture_make(fixture *f)
{
    tu_scratch_sub(suite_dir, f->dir, sizeof f->dir);
    snprintf(f->ref, sizeof f->ref, "%s-ref", f->dir);
    snprintf(f->step1, sizeof f->step1, "%s/step-00000001.h5", f->dir);
    snprintf(f->step2, sizeof f->step2, "%s/step-00000002.h5", f->dir);
    snprintf(f->run, sizeof f->run, "%s/run.h5", f->dir);
    snprintf(f->npy, sizeof f->npy, "%s-npy", f->dir);
    write_dir(f->dir);
    write_dir(f->ref);
}

/* ---- the files' bytes ---------------------------------------------------- */

typedef struct bytes {
    unsigned char *b;
    size_t n;
} bytes;

static bytes load(const char *path)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "%s: %s", path, strerror(errno));
    bytes r = { NULL, 0 };
    fseek(fp, 0, SEEK_END);
    r.n = (size_t)ftell(fp);
    rewind(fp);
    r.b = malloc(r.n ? r.n : 1);
    ck_assert(r.b && fread(r.b, 1, r.n, fp) == r.n);
    fclose(fp);
    return r;
}

static void save(const char *path, const bytes *b)
{
    FILE *fp = fopen(path, "wb");
    ck_assert_msg(fp && fwrite(b->b, 1, b->n, fp) == b->n, "%s: %s", path, strerror(errno));
    fclose(fp);
}

/* Where signature sig first occurs at or after `from`, or -1. */
static long find_sig(const bytes *b, const char *sig, size_t from)
{
    for (size_t i = from; i + 4 <= b->n; i++)
        if (memcmp(b->b + i, sig, 4) == 0)
            return (long)i;
    return -1;
}

/* The file address of object name's header, through HDF5 on the intact file. */
static long header_addr(const char *path, const char *name)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    H5O_info_t info;
    ck_assert(f >= 0 && H5Oget_info_by_name2(f, name, &info, H5O_INFO_BASIC, H5P_DEFAULT) >= 0);
    H5Fclose(f);
    return (long)info.addr;
}

/* ---- running every reader ----------------------------------------------- */

typedef enum { R_LS, R_SHOW, R_STATS, R_EXPORT, R_VERIFY, R_DIFF, R_COUNT } reader;
static const char *const reader_names[R_COUNT] = { "ls", "show", "stats", "export", "verify",
                                                    "tdbg-diff" };

static tu_result run_reader(const fixture *f, reader k)
{
    switch (k) {
    case R_LS: return tu_run_tool(tdbg_dump_main, "tdbg-dump", (const char *const[]){ "ls", f->dir, NULL });
    case R_SHOW:
        return tu_run_tool(tdbg_dump_main, "tdbg-dump",
                           (const char *const[]){ "show", f->dir, "/a/out0", "--step", "2", NULL });
    case R_STATS:
        return tu_run_tool(tdbg_dump_main, "tdbg-dump", (const char *const[]){ "stats", f->dir, NULL });
    case R_EXPORT:
        return tu_run_tool(tdbg_dump_main, "tdbg-dump",
                           (const char *const[]){ "export", f->dir, "--npy", f->npy, NULL });
    case R_VERIFY:
        return tu_run_tool(tdbg_dump_main, "tdbg-dump", (const char *const[]){ "verify", f->dir, NULL });
    default:
        return tu_run_tool(tdbg_diff_main, "tdbg-diff", (const char *const[]){ f->dir, f->ref, NULL });
    }
}

/* A hang guard, not a speed check: a reader takes milliseconds on these
 * files, so one still reading after HANG_S seconds is stuck; the alarm ends
 * the test with the reader's and the damage's names (write and _exit only:
 * async-signal-safe). */
#define HANG_S 60
static char hung_msg[512];

static void on_hang(int sig)
{
    (void)sig;
    if (write(STDERR_FILENO, hung_msg, strlen(hung_msg)) < 0)
        _exit(2);
    _exit(1);
}

/* Runs every reader on f, whose file `bad` is damaged (what), and asserts:
 * the exit code (verify 1, the others 2; 0 for show, stats and export when
 * bad is run.h5, which they do not read), a message naming bad and holding
 * one of phrases (NULL-terminated; none: any), the intact step 1 still
 * read, an answer (HANG_S), and that no file of the run changed. */
static void assert_readers(const fixture *f, const char *bad, const char *what,
                           const char *const *phrases)
{
    const char *paths[3] = { f->run, f->step1, f->step2 };
    bytes before[3];
    for (int i = 0; i < 3; i++)
        before[i] = load(paths[i]);
    bool run_bad = strcmp(bad, f->run) == 0;
    for (int k = 0; k < R_COUNT; k++) {
        snprintf(hung_msg, sizeof hung_msg, "%s: %s: no answer after %d s\n", what, reader_names[k], HANG_S);
        signal(SIGALRM, on_hang);
        alarm(HANG_S);
        tu_result r = run_reader(f, (reader)k);
        alarm(0);
        int want = k == R_VERIFY ? 1 : run_bad && k != R_LS && k != R_DIFF ? 0 : 2;
        const char *msg = k == R_VERIFY ? r.out : r.err;
        ck_assert_msg(r.rc == want, "%s: %s: exit %d, expected %d\nout: %s\nerr: %s", what,
                      reader_names[k], r.rc, want, r.out, r.err);
        if (want != 0) {
            ck_assert_msg(strstr(msg, bad), "%s: %s: no message names %s:\n%s", what,
                          reader_names[k], bad, msg);
            bool said = !phrases[0];
            for (int i = 0; phrases[i]; i++)
                said = said || strstr(msg, phrases[i]);
            ck_assert_msg(said, "%s: %s: unexpected message:\n%s", what, reader_names[k], msg);
        }
        if (k == R_LS && !run_bad)
            ck_assert_msg(strstr(r.out, "step 1:"), "%s: ls lost the intact step:\n%s", what,
                          r.out);
        if (k == R_VERIFY)
            ck_assert_msg(strstr(r.out, run_bad ? "verify: 2 steps intact" : "verify: 1 steps intact"),
                          "%s: verify:\n%s", what, r.out);
        tu_result_free(&r);
    }
    for (int i = 0; i < 3; i++) {
        bytes after = load(paths[i]);
        ck_assert_msg(after.n == before[i].n && memcmp(after.b, before[i].b, after.n) == 0,
                      "%s: a reader changed %s", what, paths[i]);
        free(after.b);
        free(before[i].b);
    }
}

#define PHRASES(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define ANY ((const char *const[]){ NULL })

/* Applies fn to a copy of path's intact bytes, writes it, runs the readers,
 * then puts the intact file back. */
static void damage(const fixture *f, const char *path, const char *what,
                   void (*fn)(bytes *b, long at, long len), long at, long len,
                   const char *const *phrases)
{
    bytes good = load(path), b = load(path);
    fn(&b, at, len);
    save(path, &b);
    assert_readers(f, path, what, phrases);
    save(path, &good);
    free(good.b);
    free(b.b);
}

static void flip(bytes *b, long at, long len)
{
    for (long i = at; i < at + len && (size_t)i < b->n; i++)
        b->b[i] ^= 0x5a;
}

static void zero(bytes *b, long at, long len)
{
    for (long i = at; i < at + len && (size_t)i < b->n; i++)
        b->b[i] = 0;
}

static void cut(bytes *b, long at, long len)
{
    (void)len;
    if ((size_t)at < b->n)
        b->n = (size_t)at;
}

static void set_env(void)
{
    setenv("TDBG_DUMP_TIMEOUT", "2", 1);
}

/* ---- the damage classes ---------------------------------------------------- */

START_TEST(test_superblock_flips)
{
    fixture f;
    fixture_make(&f);
    set_env();
    /* The signature, the versions and sizes, the addresses (base, end of file, root). */
    static const long at[][2] = { { 0, 1 }, { 8, 4 }, { 13, 2 }, { 24, 8 }, { 40, 8 }, { 64, 8 } };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "superblock flip at %ld", at[i][0]);
        damage(&f, f.step2, what, flip, at[i][0], at[i][1], ANY);
        damage(&f, f.run, what, flip, at[i][0], at[i][1], ANY);
    }
}
END_TEST

START_TEST(test_object_header_flips)
{
    fixture f;
    fixture_make(&f);
    set_env();
    long a = header_addr(f.step2, "/a/out0"), root = header_addr(f.step2, "/");
    long ops = header_addr(f.run, "/ops");
    damage(&f, f.step2, "flip in /a/out0's header", flip, a, 2, ANY);
    damage(&f, f.step2, "flip in /a/out0's messages", flip, a + 16, 8, ANY);
    damage(&f, f.step2, "flip in the root group's header", flip, root, 2, ANY);
    damage(&f, f.run, "flip in /ops's header", flip, ops, 2, ANY);
    damage(&f, f.run, "flip in /ops's messages", flip, ops + 16, 8, ANY);
}
END_TEST

/* The /ops table's strings live in the global heap (GCOL), where Debian
 * 12's libhdf5 dies of SIGSEGV on damage. */
START_TEST(test_ops_table_flips)
{
    fixture f;
    fixture_make(&f);
    set_env();
    bytes b = load(f.run);
    long gcol = find_sig(&b, "GCOL", 0);
    ck_assert_msg(gcol > 0, "run.h5 has no global heap");
    free(b.b);
    damage(&f, f.run, "flip of the global heap's signature", flip, gcol, 1, ANY);
    damage(&f, f.run, "flip of the global heap's size", flip, gcol + 8, 4, ANY);
    damage(&f, f.run, "flip of the heap's first object's size", flip, gcol + 24, 2, ANY);
}
END_TEST

/* A tensor of several chunks has a fixed-array chunk index (FAHD, FADB). */
START_TEST(test_chunk_index_flips)
{
    fixture f;
    fixture_make(&f);
    set_env();
    bytes b = load(f.step2);
    long head = find_sig(&b, "FAHD", 0), block = find_sig(&b, "FADB", 0);
    free(b.b);
    ck_assert_msg(head > 0 && block > 0, "no chunk index");
    damage(&f, f.step2, "flip of the index header's signature", flip, head, 1, ANY);
    damage(&f, f.step2, "flip of the index header's entry count", flip, head + 8, 2, ANY);
    damage(&f, f.step2, "flip of a chunk address", flip, block + 14, 4, ANY);
}
END_TEST

START_TEST(test_zeroed_ranges)
{
    fixture f;
    fixture_make(&f);
    set_env();
    bytes s = load(f.step2), r = load(f.run);
    long a = header_addr(f.step2, "/a/out0"), index = find_sig(&s, "FADB", 0);
    long gcol = find_sig(&r, "GCOL", 0), ops = header_addr(f.run, "/ops");
    free(s.b);
    free(r.b);
    damage(&f, f.step2, "zeroed superblock", zero, 0, 96, ANY);
    damage(&f, f.step2, "zeroed object header", zero, a, 64, ANY);
    damage(&f, f.step2, "zeroed chunk index", zero, index, 32, ANY);
    damage(&f, f.run, "zeroed /ops header", zero, ops, 64, ANY);
    damage(&f, f.run, "zeroed global heap", zero, gcol, 64, ANY);
}
END_TEST

/* Every metadata structure's start (and the byte after it) in both files. */
START_TEST(test_truncation_at_metadata_boundaries)
{
    fixture f;
    fixture_make(&f);
    set_env();
    const char *files[2] = { f.step2, f.run };
    static const char *const sigs[] = { "OHDR", "OCHK", "GCOL", "FAHD", "FADB" };
    for (int k = 0; k < 2; k++) {
        bytes b = load(files[k]);
        long at[80];
        int n = 0;
        at[n++] = 8;   /* inside the superblock */
        at[n++] = header_addr(files[k], "/");
        at[n++] = header_addr(files[k], k == 0 ? "/a/out0" : "/ops");
        for (size_t s = 0; s < sizeof sigs / sizeof sigs[0]; s++)
            for (long p = find_sig(&b, sigs[s], 0); p >= 0 && n < 76; p = find_sig(&b, sigs[s], (size_t)p + 4))
                at[n++] = p;
        at[n++] = (long)b.n - 1;   /* the last byte */
        free(b.b);
        for (int i = 0; i < n; i++) {
            char what[96];
            snprintf(what, sizeof what, "%s cut at %ld", files[k], at[i]);
            damage(&f, files[k], what, cut, at[i], 0,
                   PHRASES("not a readable HDF5 file", "damaged HDF5 metadata"));
        }
    }
}
END_TEST

/* Each file in turn replaced by content that is no HDF5 file at all. */
static void assert_foreign(const bytes *content, const char *what_step, const char *what_run)
{
    fixture f;
    fixture_make(&f);
    set_env();
    bytes good = load(f.step2);
    save(f.step2, content);
    assert_readers(&f, f.step2, what_step, PHRASES("not a readable HDF5 file"));
    save(f.run, content);
    save(f.step2, &good);
    assert_readers(&f, f.run, what_run, PHRASES("not a readable HDF5 file"));
    free(good.b);
}

START_TEST(test_not_hdf5)
{
    bytes text = { (unsigned char *)"step 2: not an HDF5 file at all\n", 33 };
    assert_foreign(&text, "a text file", "a text run.h5");
}
END_TEST

/* An empty file (the step reader's fuzzer found that the parent copied an
 * empty array from a NULL buffer for it). */
START_TEST(test_empty_file)
{
    bytes empty = { (unsigned char *)"", 0 };
    assert_foreign(&empty, "an empty step file", "an empty run.h5");
}
END_TEST

START_TEST(test_newer_format)
{
    fixture f;
    fixture_make(&f);
    set_env();
    hid_t file = H5Fopen(f.run, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t a = file < 0 ? -1 : H5Aopen(file, "tdbg_format", H5P_DEFAULT);
    int newer = DUMP_FORMAT + 1;
    ck_assert(a >= 0 && H5Awrite(a, H5T_NATIVE_INT, &newer) >= 0);
    H5Aclose(a);
    H5Fclose(file);
    char want[64];
    snprintf(want, sizeof want, "attribute 'tdbg_format' is %d, this tdbg reads %d", newer,
             DUMP_FORMAT);
    assert_readers(&f, f.run, "a newer format", PHRASES(want));
}
END_TEST

/* The test hook of contain.h stands in for a file that makes libhdf5 loop
 * or crash: the reader stops the parse after TDBG_DUMP_TIMEOUT seconds. */
START_TEST(test_hang_and_crash_are_contained)
{
    fixture f;
    fixture_make(&f);
    set_env();
    setenv("TDBG_DUMP_TEST_FAULT", "hang:step-00000002.h5", 1);
    assert_readers(&f, f.step2, "a parse that hangs",
                   PHRASES("damaged HDF5 metadata in the superblock (no answer from the HDF5 "
                           "library in 2 s: stopped)"));
    setenv("TDBG_DUMP_TEST_FAULT", "crash:run.h5", 1);
    assert_readers(&f, f.run, "a parse that crashes",
                   PHRASES("damaged HDF5 metadata in the superblock (the HDF5 library died of "
                           "signal 11, Segmentation fault)"));
    unsetenv("TDBG_DUMP_TEST_FAULT");
}
END_TEST

/* A run.h5 the fuzzer found, on which libhdf5 loops: stopped after the time
 * limit, and opened again in the same process it fails at once with the
 * same message (with a time limit of 1000 s the second call would hang the
 * test if it parsed the file again). */
START_TEST(test_hang_remembered)
{
    char dir[128], path[160], err[1024], again[1024];
    snprintf(dir, sizeof dir, "%s/hang", suite_dir);
    ck_assert(mkdir(dir, 0755) == 0 || errno == EEXIST);
    snprintf(path, sizeof path, "%s/run.h5", dir);
    bytes b = load(TDBG_SRCDIR "/tests/fuzz/crashes/run/run-timeout-7341ad5cdd7e8135993e0f4505c8567c0b9d2cde");
    save(path, &b);
    free(b.b);
    unsetenv("TDBG_DUMP_TEST_FAULT");
    setenv("TDBG_DUMP_TIMEOUT", "1", 1);
    dump_run_meta m;
    dump_op_row *ops = NULL;
    int n = 0;
    ck_assert(!dump_run_read(dir, &m, &ops, &n, err, sizeof err));
    ck_assert_msg(strstr(err, path) && strstr(err, "no answer from the HDF5 library in 1 s"), "%s", err);
    setenv("TDBG_DUMP_TIMEOUT", "1000", 1);
    ck_assert(!dump_run_read(dir, &m, &ops, &n, again, sizeof again));
    ck_assert_str_eq(again, err);
    unsetenv("TDBG_DUMP_TIMEOUT");
}
END_TEST

/* Random flips anywhere in either file: never a signal, an exit code the
 * docs list, a message naming the file when a reader fails. */
START_TEST(test_random_flips)
{
    fixture f;
    fixture_make(&f);
    set_env();
    const char *paths[2] = { f.run, f.step2 };
    srand(14);
    for (int t = 0; t < 24; t++) {
        const char *path = paths[t % 2];
        bytes good = load(path), b = load(path);
        size_t span = b.n < 4096 ? b.n : 4096;   /* mostly metadata */
        for (int k = 0; k < 4; k++)
            b.b[(size_t)rand() % span] ^= (unsigned char)(1u << (rand() % 8));
        save(path, &b);
        for (int k = 0; k < R_COUNT; k++) {
            tu_result r = run_reader(&f, (reader)k);
            ck_assert_msg(r.rc >= 0 && r.rc <= 2, "flip %d: %s: exit %d", t, reader_names[k], r.rc);
            if (r.rc == 2)
                ck_assert_msg(strstr(r.err, f.dir), "flip %d: %s: %s", t, reader_names[k], r.err);
            tu_result_free(&r);
        }
        save(path, &good);
        free(good.b);
        free(b.b);
    }
}
END_TEST

Suite *suite_dump_damage(void)
{
    Suite *s = suite_create("dump_damage");
    TCase *tc = tcase_create("damage");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, suite_dir_make, suite_dir_remove);
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_superblock_flips);
    tcase_add_test(tc, test_object_header_flips);
    tcase_add_test(tc, test_ops_table_flips);
    tcase_add_test(tc, test_chunk_index_flips);
    tcase_add_test(tc, test_zeroed_ranges);
    tcase_add_test(tc, test_truncation_at_metadata_boundaries);
    tcase_add_test(tc, test_not_hdf5);
    tcase_add_test(tc, test_empty_file);
    tcase_add_test(tc, test_newer_format);
    tcase_add_test(tc, test_hang_and_crash_are_contained);
    tcase_add_test(tc, test_hang_remembered);
    tcase_add_test(tc, test_random_flips);
    suite_add_tcase(s, tc);
    return s;
}
