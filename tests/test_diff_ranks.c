/* test_diff_ranks.c — data-parallel dumps (a rank's run.h5: rank, ranks,
 * /collectives) and tdbg-diff on them (dump/diff_ranks.c,
 * dump/diff_combine.c): --ranks on identical ranks, drift on rank 1, a
 * missing rank, other step sets; the ranks combined against one process
 * (mean and rows), on dumps written here with h5file.h; a damaged table;
 * then the MLP under mpirun with 2 ranks. */
#include "diff.h"
#include "dump.h"
#include "h5file.h"
#include "suites.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char suite_dir[64];

static void suite_dir_make(void) { tu_scratch_make(suite_dir, sizeof suite_dir, "diff-ranks"); }
static void suite_dir_remove(void) { tu_scratch_remove(suite_dir); }
static char *test_dir(char *buf, size_t n) { return tu_scratch_sub(suite_dir, buf, n); }

#define RUN(...) tu_run_tool(tdbg_diff_main, "tdbg-diff", (const char *const[]){ __VA_ARGS__, NULL })

static void assert_has(const char *text, const char *want)
{
    ck_assert_msg(strstr(text, want) != NULL, "expected '%s' in:\n%s", want, text);
}

/* ---- dumps written here -------------------------------------------------------------
 * Each rank's step: fc/linear (forward, 2 rows of 3 of its shard), its
 * gradient (backward), allreduce/bucket0 (AllReduce, 3 values, the same on
 * every rank), update/w (the parameter after the update, the same), loss
 * (forward, a scalar: 1 + rank). All values exact in binary. */

#define RANKS 2
#define STEPS 3

static const int64_t shard[2] = { 2, 3 }, whole[2] = { 4, 3 }, three[1] = { 3 }, one[1] = { 1 };

static float act(int rank, int step, int i) { return 0.5f * (float)(rank * 6 + i + step); }
static float grad(int rank, int step, int i) { return 0.25f * (float)(rank * 6 - i + step); }
static float param(int step, int i) { return 1.0f + 0.125f * (float)(i + step); }

static void add(dump_step_writer *w, const char *op, const char *type, int exec, te_phase phase,
                const char *tensor, int ndim, const int64_t *shape, const float *v)
{
    char err[512] = "";
    dump_tensor_info ti = tu_dump_info(op, type, DUMP_OUT, 0, exec, phase, tensor, TE_F32, ndim, shape);
    ck_assert_msg(dump_step_add_raw(w, &ti, v, err, sizeof err), "add %s: %s", op, err);
}

static void run_h5(const char *dir, int rank, int ranks, bool collectives)
{
    dump_run_meta m = { .mode = TE_MODE_EAGER, .seed = 1, .rank = rank, .ranks = ranks };
    snprintf(m.engine_version, sizeof m.engine_version, "0.1.0");
    snprintf(m.amp, sizeof m.amp, "none");
    snprintf(m.backend, sizeof m.backend, "cpu");
    const char *names[5] = { "fc/linear", "loss", "grad/fc/linear", "allreduce/bucket0", "update/w" };
    const char *types[5] = { "Linear", "CrossEntropy", "LinearGrad", "AllReduce", "Adam" };
    const te_phase phases[5] = { TE_PHASE_FORWARD, TE_PHASE_FORWARD, TE_PHASE_BACKWARD, TE_PHASE_BACKWARD,
                                 TE_PHASE_UPDATE };
    dump_op_row ops[5];
    memset(ops, 0, sizeof ops);
    int n = 0;
    for (int i = 0; i < 5; i++) {
        if (!collectives && strcmp(types[i], "AllReduce") == 0)
            continue;
        ops[n] = (dump_op_row){ .exec = n, .phase = phases[i], .line = 10 + i };
        snprintf(ops[n].name, sizeof ops[n].name, "%s", names[i]);
        snprintf(ops[n].type, sizeof ops[n].type, "%s", types[i]);
        snprintf(ops[n].file, sizeof ops[n].file, "test.c");
        snprintf(ops[n].outputs, sizeof ops[n].outputs, "%s:out0", names[i]);
        n++;
    }
    dump_coll_row c[STEPS];
    for (int s = 0; s < STEPS; s++) {
        c[s] = (dump_coll_row){ .step = s, .exec = 3, .seq = 1 + s, .ranks = ranks, .root = -1, .bucket = 0,
                                .bytes = 12 };
        snprintf(c[s].op, sizeof c[s].op, "allreduce/bucket0");
        snprintf(c[s].kind, sizeof c[s].kind, "allreduce");
    }
    char err[512] = "";
    ck_assert_msg(dump_run_write_dp(dir, &m, ops, n, c, ranks > 0 ? STEPS : 0, err, sizeof err), "%s", err);
}

/* DIR/rank-R of a job of `ranks`, steps first..last; rank 1's update/w
 * moved by 0.25 at element 1 from step drift on (-1: never). */
static void write_rank(const char *dir, int rank, int ranks, int first, int last, int drift)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/rank-%d", dir, rank);
    run_h5(path, rank, ranks, true);
    for (int s = first; s <= last; s++) {
        dump_step_writer *w = dump_step_create(path, s, 0, err, sizeof err);
        ck_assert_msg(w != NULL, "%s", err);
        float a[6], g[6], red[3], p[3], loss = 1.0f + (float)rank;
        for (int i = 0; i < 6; i++)
            a[i] = act(rank, s, i), g[i] = grad(rank, s, i);
        for (int i = 0; i < 3; i++)
            red[i] = 0.5f * (float)(i + s), p[i] = param(s, i);
        if (drift >= 0 && rank == 1 && s >= drift)
            p[1] += 0.25f;
        add(w, "fc/linear", "Linear", 0, TE_PHASE_FORWARD, "fc/linear:out0", 2, shard, a);
        add(w, "loss", "CrossEntropy", 1, TE_PHASE_FORWARD, "loss:out0", 1, one, &loss);
        add(w, "grad/fc/linear", "LinearGrad", 2, TE_PHASE_BACKWARD, "grad/fc/linear:out0", 2, shard, g);
        add(w, "allreduce/bucket0", "AllReduce", 3, TE_PHASE_BACKWARD, "allreduce/bucket0:out0", 1, three, red);
        add(w, "update/w", "Adam", 4, TE_PHASE_UPDATE, "param:w", 1, three, p);
        ck_assert_msg(dump_step_commit(w, err, sizeof err), "%s", err);
    }
}

static void write_job(const char *dir, int drift)
{
    mkdir(dir, 0755);
    for (int r = 0; r < RANKS; r++)
        write_rank(dir, r, RANKS, 0, STEPS - 1, drift);
}

/* What one process with the ranks' global batch dumps: the rows one after
 * the other, the backward rows divided by 2, the loss their mean. */
static void write_single(const char *dir)
{
    char err[512] = "";
    run_h5(dir, 0, 0, false);
    for (int s = 0; s < STEPS; s++) {
        dump_step_writer *w = dump_step_create(dir, s, 0, err, sizeof err);
        ck_assert_msg(w != NULL, "%s", err);
        float a[12], g[12], p[3], loss = 1.5f;
        for (int r = 0; r < RANKS; r++)
            for (int i = 0; i < 6; i++)
                a[r * 6 + i] = act(r, s, i), g[r * 6 + i] = grad(r, s, i) / 2;
        for (int i = 0; i < 3; i++)
            p[i] = param(s, i);
        add(w, "fc/linear", "Linear", 0, TE_PHASE_FORWARD, "fc/linear:out0", 2, whole, a);
        add(w, "loss", "CrossEntropy", 1, TE_PHASE_FORWARD, "loss:out0", 1, one, &loss);
        add(w, "grad/fc/linear", "LinearGrad", 2, TE_PHASE_BACKWARD, "grad/fc/linear:out0", 2, whole, g);
        add(w, "update/w", "Adam", 3, TE_PHASE_UPDATE, "param:w", 1, three, p);
        ck_assert_msg(dump_step_commit(w, err, sizeof err), "%s", err);
    }
}

/* ---- a rank's run.h5 ---------------------------------------------------------------- */

START_TEST(test_run_h5_round_trip)
{
    char d[256], err[512] = "";
    snprintf(d, sizeof d, "%s/job", test_dir(d, sizeof d));
    write_job(d, -1);
    char r1[300];
    snprintf(r1, sizeof r1, "%s/rank-1", d);
    dump_run_meta m;
    dump_op_row *ops;
    int n_ops;
    ck_assert_msg(dump_run_read(r1, &m, &ops, &n_ops, err, sizeof err), "%s", err);
    ck_assert_int_eq(m.rank, 1);
    ck_assert_int_eq(m.ranks, 2);
    ck_assert_int_eq(n_ops, 5);
    free(ops);
    dump_coll_row *c;
    ck_assert_int_eq(dump_run_colls(r1, &c, err, sizeof err), STEPS);
    ck_assert_int_eq(c[2].step, 2);
    ck_assert_int_eq(c[2].exec, 3);
    ck_assert_str_eq(c[2].op, "allreduce/bucket0");
    ck_assert_str_eq(c[2].kind, "allreduce");
    ck_assert_int_eq(c[2].seq, 3);
    ck_assert_int_eq(c[2].ranks, 2);
    ck_assert_int_eq(c[2].root, -1);
    ck_assert_int_eq(c[2].bucket, 0);
    ck_assert_int_eq(c[2].bytes, 12);
    free(c);
    /* tdbg-dump ls says whose dump it is and which collectives it holds */
    tu_result ls = tu_run_tool(tdbg_dump_main, "tdbg-dump", (const char *const[]){ "ls", r1, NULL });
    ck_assert_msg(ls.rc == 0 && strstr(ls.out, "\ndata parallel: rank 1 of 2, 3 collectives in the dumped steps "
                                              "(seq 1 to 3)\n"), "rc %d:\n%s%s", ls.rc, ls.out, ls.err);
    tu_result_free(&ls);
    /* a one-process run.h5 has neither */
    char single[300];
    snprintf(single, sizeof single, "%s/single", test_dir(d, sizeof d));
    write_single(single);
    ck_assert_msg(dump_run_read(single, &m, &ops, &n_ops, err, sizeof err), "%s", err);
    ck_assert_int_eq(m.ranks, 0);
    free(ops);
    ck_assert_int_eq(dump_run_colls(single, &c, err, sizeof err), 0);
    ck_assert_ptr_null(c);
}
END_TEST

/* A table whose numbers cannot be (root 5 of 2 ranks) is refused, naming
 * the file, the table and the row; every byte of the file flipped in turn
 * is a clear answer (a count or a message), never a crash. */
START_TEST(test_colls_damaged)
{
    char d[256], err[1024] = "";
    test_dir(d, sizeof d);
    dump_run_meta m = { .mode = TE_MODE_EAGER, .rank = 0, .ranks = 2 };
    snprintf(m.amp, sizeof m.amp, "none");
    dump_coll_row c = { .step = 0, .exec = 1, .seq = 0, .ranks = 2, .root = 5, .bucket = -1, .bytes = 8 };
    snprintf(c.op, sizeof c.op, "broadcast/buffers");
    snprintf(c.kind, sizeof c.kind, "broadcast");
    ck_assert_msg(dump_run_write_dp(d, &m, NULL, 0, &c, 1, err, sizeof err), "%s", err);
    dump_coll_row *rows = NULL;
    ck_assert_int_eq(dump_run_colls(d, &rows, err, sizeof err), -1);
    char want[512];
    snprintf(want, sizeof want, "%s/run.h5: /collectives: row 0: bad values (step 0, exec 1, op 'broadcast/buffers', "
             "kind 'broadcast', seq 0, ranks 2 of a job of 2, root 5, bucket -1, bytes 8)", d);
    ck_assert_str_eq(err, want);
    dump_op_row *ops;
    int n_ops;
    ck_assert(!dump_run_read(d, &m, &ops, &n_ops, err, sizeof err));
    assert_has(err, "/collectives: row 0: bad values");

    setenv("TDBG_DUMP_TIMEOUT", "2", 1); /* a flip that hangs the child costs 2 s, not 10 */
    char ok[300], path[320];
    snprintf(ok, sizeof ok, "%s/ok", d);
    run_h5(ok, 1, 2, true);
    snprintf(path, sizeof path, "%s/run.h5", ok);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    int refused = 0, answered = 0;
    for (long at = 0; at < size; at += 37) {
        fseek(f, at, SEEK_SET);
        const int b = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(b ^ 0x5a, f);
        fflush(f);
        int n = dump_run_colls(ok, &rows, err, sizeof err);
        if (n < 0) {
            assert_has(err, "run.h5");
            refused++;
        } else {
            ck_assert_int_le(n, STEPS);
            answered++;
        }
        free(rows);
        fseek(f, at, SEEK_SET);
        fputc(b, f);
        fflush(f);
    }
    fclose(f);
    ck_assert_int_gt(refused, 0);
    ck_assert_int_gt(answered, 0);
    ck_assert_int_eq(dump_run_colls(ok, &rows, err, sizeof err), STEPS);
    free(rows);
}
END_TEST

/* ---- --ranks ---------------------------------------------------------------------- */

START_TEST(test_ranks_identical)
{
    char d[256];
    snprintf(d, sizeof d, "%s/job", test_dir(d, sizeof d));
    write_job(d, -1);
    tu_result r = RUN("--ranks", d);
    ck_assert_msg(r.rc == 0, "exit %d\n%s%s", r.rc, r.out, r.err);
    assert_has(r.out, "no drift: 6 comparisons of tensors that must agree (update outputs, AllReduce and "
               "Broadcast outputs) bit for bit identical in 3 steps\n");
    /* the spread: fc/linear's mean is 1.25 + step/2 on rank 0, 4.25 + step/2 on rank 1 */
    assert_has(r.out, "fc/linear       out0    3.00e+00   ");
    assert_has(r.out, "loss            out0    1.00e+00   1.00e+00   1.00e+00   1.00e+00          0\n");
    ck_assert_ptr_null(strstr(r.out, "allreduce/bucket0  out0"));
    tu_result_free(&r);
}
END_TEST

START_TEST(test_ranks_drift)
{
    char d[256];
    snprintf(d, sizeof d, "%s/job", test_dir(d, sizeof d));
    write_job(d, 2);
    tu_result r = RUN("--ranks", d);
    ck_assert_msg(r.rc == 1, "exit %d\n%s%s", r.rc, r.out, r.err);
    assert_has(r.out, "drift: step 2, update/w (Adam) out0 param:w differs on rank 1 from rank 0: max_abs 2.50e-01\n");
    assert_has(r.out, "1 of 6 comparisons of tensors that must agree differ (from step 2 on)\n");
    tu_result_free(&r);
    r = RUN("--ranks", d, "--steps", "0-1");  /* before it */
    ck_assert_msg(r.rc == 0, "exit %d\n%s%s", r.rc, r.out, r.err);
    tu_result_free(&r);
}
END_TEST

START_TEST(test_ranks_trouble)
{
    char d[256], job[300], path[1200];
    test_dir(d, sizeof d);
    /* rank-1 of 3 missing */
    snprintf(job, sizeof job, "%s/gap", d);
    mkdir(job, 0755);
    write_rank(job, 0, 3, 0, 1, -1);
    write_rank(job, 2, 3, 0, 1, -1);
    tu_result r = RUN("--ranks", job);
    ck_assert_int_eq(r.rc, 2);
    snprintf(path, sizeof path, "tdbg-diff: %s/rank-1: missing (the ranks found go up to rank-2)\n", job);
    assert_has(r.err, path);
    tu_result_free(&r);
    /* run.h5 says 3 ranks, 2 there */
    snprintf(job, sizeof job, "%s/short", d);
    mkdir(job, 0755);
    write_rank(job, 0, 3, 0, 1, -1);
    write_rank(job, 1, 3, 0, 1, -1);
    r = RUN("--ranks", job);
    ck_assert_int_eq(r.rc, 2);
    snprintf(path, sizeof path, "tdbg-diff: %s/rank-2: missing (%s/rank-0/run.h5 says the job had 3 ranks, %s holds 2)\n",
             job, job, job);
    assert_has(r.err, path);
    tu_result_free(&r);
    /* other steps on rank 1 */
    snprintf(job, sizeof job, "%s/steps", d);
    mkdir(job, 0755);
    write_rank(job, 0, 2, 0, 2, -1);
    write_rank(job, 1, 2, 0, 1, -1);
    r = RUN("--ranks", job);
    ck_assert_int_eq(r.rc, 2);
    snprintf(path, sizeof path, "tdbg-diff: %s/rank-1: holds steps 0-1, rank-0 holds 0-2: the ranks of a run dump "
             "the same steps\n", job);
    assert_has(r.err, path);
    tu_result_free(&r);
    /* a rank directory that is not a dump */
    snprintf(job, sizeof job, "%s/empty", d);
    mkdir(job, 0755);
    write_rank(job, 0, 2, 0, 0, -1);
    snprintf(path, sizeof path, "%s/rank-1", job);
    mkdir(path, 0755);
    r = RUN("--ranks", job);
    ck_assert_int_eq(r.rc, 2);
    snprintf(path, sizeof path, "tdbg-diff: %s/rank-1: not a dump (no run.h5 and no step file)\n", job);
    assert_has(r.err, path);
    tu_result_free(&r);
    /* no rank at all */
    r = RUN("--ranks", d);
    ck_assert_int_eq(r.rc, 2);
    snprintf(path, sizeof path, "tdbg-diff: %s: not a data-parallel dump (no rank-0 directory in it)\n", d);
    assert_has(r.err, path);
    tu_result_free(&r);
}
END_TEST

/* ---- the ranks as one run ------------------------------------------------------------- */

START_TEST(test_combined_vs_single)
{
    char d[256], job[300], single[300];
    test_dir(d, sizeof d);
    snprintf(job, sizeof job, "%s/job", d);
    snprintf(single, sizeof single, "%s/single", d);
    write_job(job, -1);
    write_single(single);
    for (int order = 0; order < 2; order++) {
        tu_result r = order ? RUN(single, job, "--metrics", "max_abs") : RUN(job, single, "--metrics", "max_abs");
        ck_assert_msg(r.rc == 0, "exit %d\n%s%s", r.rc, r.out, r.err);
        assert_has(r.out, "12 tensors compared in 3 steps: 0 diverge here, 0 inherited, 12 same\n");
        assert_has(r.out, "2     grad/fc/linear  out0           0  same\n");
        char note[512];
        snprintf(note, sizeof note, "tdbg-diff: %s: 2 ranks compared as one run: 6 tensors their mean, 6 their rows "
                 "concatenated, 0 rank 0's (shapes that match neither)\n", job);
        ck_assert_str_eq(r.err, note);
        ck_assert_ptr_null(strstr(r.out, "allreduce"));
        tu_result_free(&r);
    }
    /* drift on rank 1 is a difference of the mean */
    snprintf(job, sizeof job, "%s/drift", d);
    write_job(job, 2);
    tu_result r = RUN(job, single, "--metrics", "max_abs");
    ck_assert_msg(r.rc == 1, "exit %d\n%s%s", r.rc, r.out, r.err);
    assert_has(r.out, "2     update/w        out0    1.25e-01  DIVERGES HERE");
    tu_result_free(&r);
    r = RUN(job, job);
    ck_assert_int_eq(r.rc, 2);
    assert_has(r.err, "are both data-parallel dumps");
    tu_result_free(&r);
}
END_TEST

/* ---- the MLP under mpirun ------------------------------------------------------------- */

static char shell_out[1 << 15];

/* SGD: a step of Adam divides each gradient element by its magnitude
 * (plus 1e-8), which turns the rounding of elements near 1e-8 into
 * differences of the parameters far above f32's tolerance (docs/diff.md,
 * "Across ranks"). */
#define MLP "'%s/examples/mlp' --hidden 32,32 --batch 32 --steps 4 --optim sgd --threads 1 --log-every 100 "

START_TEST(test_mlp_two_ranks)
{
    char mpirun[256];
    if (!tu_mpirun("diff_ranks:mlp", 2, mpirun, sizeof mpirun))
        return;
    char d[256];
    test_dir(d, sizeof d);
    int st = tu_shell(shell_out, sizeof shell_out, "cd '%s' && %s " MLP "--dp --dump 'dir=dp;io=both' 2>&1 && "
                      "%s " MLP "--dp --inject noise@op=update/fc1.weight,step=2,rank=1 --dump 'dir=drift;io=both' 2>&1 && "
                      MLP "--dump 'dir=one;io=both' 2>&1", d, mpirun, TDBG_BUILDDIR, mpirun, TDBG_BUILDDIR, TDBG_BUILDDIR);
    ck_assert_msg(st == 0, "exit %d:\n%s", st, shell_out);
    char dp[300], drift[300], single[300];
    snprintf(dp, sizeof dp, "%s/dp", d);
    snprintf(drift, sizeof drift, "%s/drift", d);
    snprintf(single, sizeof single, "%s/one", d);
    tu_result r = RUN("--ranks", dp);
    ck_assert_msg(r.rc == 0, "exit %d\n%s%s", r.rc, r.out, r.err);
    assert_has(r.out, "2 ranks in ");
    assert_has(r.out, "no drift: 28 comparisons");
    tu_result_free(&r);
    r = RUN("--ranks", drift);
    ck_assert_msg(r.rc == 1, "exit %d\n%s%s", r.rc, r.out, r.err);
    assert_has(r.out, "drift: step 2, update/fc1.weight (SGD) out0 param:fc1.weight differs on rank 1 from rank 0");
    tu_result_free(&r);
    r = RUN(dp, single);
    ck_assert_msg(r.rc == 0, "exit %d\n%s%s", r.rc, r.out, r.err);
    assert_has(r.out, "tensors compared in 4 steps: 0 diverge here, 0 inherited, ");
    tu_result_free(&r);
}
END_TEST

Suite *suite_diff_ranks(void)
{
    Suite *s = suite_create("diff_ranks");
    TCase *tc = tcase_create("ranks");
    tcase_set_timeout(tc, 240);
    tcase_add_unchecked_fixture(tc, suite_dir_make, suite_dir_remove);
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_run_h5_round_trip);
    tcase_add_test(tc, test_colls_damaged);
    tcase_add_test(tc, test_ranks_identical);
    tcase_add_test(tc, test_ranks_drift);
    tcase_add_test(tc, test_ranks_trouble);
    tcase_add_test(tc, test_combined_vs_single);
    tcase_add_test(tc, test_mlp_two_ranks);
    suite_add_tcase(s, tc);
    return s;
}
