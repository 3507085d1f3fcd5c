/*
 * test_job.c — one debugger for a data-parallel job, end to end: `tdbg
 * --mpi --batch ... -- mpirun -np 2 examples/mlp --dp` with a NaN planted
 * on rank 1 only (every rank stops, rank 1 is named as the creator) and
 * with rank 1 killed (its signal named, the survivor's stop and dump on
 * disk). Each session runs under `timeout`: a hang fails the test.
 * Skipped, with a line saying why, where mpirun is missing or the build
 * has no MPI.
 */
#include "suites.h"
#include "testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIMIT_S 150 /* a whole session; the machine is slow and shared */
#define LIMIT_TEXT "150"
#define MPIRUN "mpirun --oversubscribe -np 2 " TDBG_BUILDDIR "/examples/mlp --dp --hidden 64,64 --batch 32 " \
               "--threads 1 --steps 20"
#define TDBG "timeout " LIMIT_TEXT " " TDBG_BUILDDIR "/debugger/tdbg --mpi --batch"

static char out[1 << 17];

/* mpirun runs a one-step job here: false, and why, where it cannot. */
static bool mpi_usable(void)
{
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1); /* the test machine's root; nothing for anyone else */
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    unsetenv("TDBG");
    unsetenv("TDBG_LISTEN");
    unsetenv("TDBG_JOB");
    if (tu_shell(NULL, 0, "command -v mpirun >/dev/null 2>&1") != 0) {
        printf("job: skipped: no mpirun on PATH (Open MPI: apt-get install openmpi-bin libopenmpi-dev)\n");
        return false;
    }
    if (tu_shell(NULL, 0, "timeout 60 mpirun --oversubscribe -np 1 %s/examples/mlp --dp --steps 1 >/dev/null 2>&1",
                 TDBG_BUILDDIR) != 0) {
        printf("job: skipped: examples/mlp --dp does not run under mpirun (built without MPI? ./configure "
               "--with-mpi)\n");
        return false;
    }
    return true;
}

/* The line of text that begins with start (after any spaces), or fails. */
static const char *line_starting(const char *text, const char *start, char *buf, size_t n)
{
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *p = l + strspn(l, " ");
        if (strncmp(p, start, strlen(start)) == 0) {
            snprintf(buf, n, "%.*s", (int)strcspn(p, "\n"), p);
            return buf;
        }
    }
    ck_abort_msg("no line starting with '%s' in:\n%s", start, text);
    return NULL;
}

START_TEST(test_job_nan_on_rank1)
{
    if (!mpi_usable())
        return;
    int st = tu_shell(out, sizeof out,
                      TDBG " -ex 'info ranks' -ex 'break nan' -ex run -ex 'info ranks' -ex 'rank 7' -ex 'rank 1' "
                      "-ex 'print fc2/linear:out0[0, :2]' -- " MPIRUN " --inject nan@op=fc2/linear,step=5,rank=1 2>&1");
    ck_assert_msg(st == 1, "tdbg --mpi: status %d (124: it hung), output:\n%s", st, out);
    char l[512];
    ck_assert_msg(strstr(out, "a job of 2 ranks under mpirun"), "%s", out);
    /* before training: both at step 0's first op */
    ck_assert_msg(strstr(out, "Every rank is paused at step 0, before fc1/linear."), "%s", out);
    ck_assert_msg(strstr(out, "Breakpoint 1: the first op creating a NaN"), "%s", out);
    ck_assert_msg(!strstr(out, "[rank 1] Breakpoint 1: the first op"), "the same answer twice:\n%s", out);
    /* rank 1 stops where the NaN is made; rank 0 is paused */
    ck_assert_str_eq(line_starting(out, "[rank 1] stopped:", l, sizeof l),
                     "[rank 1] stopped: step=5 phase=forward op=fc2/linear type=Linear reason=nan "
                     "tensor=fc2/linear:out0 index=[0,0] origin=created");
    ck_assert_msg(strstr(out, "[rank 1] Breakpoint 1 (nan), step 5, forward, fc2/linear (Linear)"), "%s", out);
    line_starting(out, "[rank 0] stopped:", l, sizeof l);
    ck_assert_msg(strstr(l, " reason=interrupt ") && (strstr(l, "step=5 ") || strstr(l, "step=4 ")),
                  "rank 0 is not paused beside rank 1: %s", l);
    ck_assert_str_eq(line_starting(out, "job: rank", l, sizeof l),
                     "job: rank 1 created the bad value first: step 5, forward, fc2/linear, fc2/linear:out0");
    /* what rank 0 holds: finite statistics, or not computed yet */
    line_starting(out, "rank 0: ", l, sizeof l);
    ck_assert_msg((strstr(l, "rank 0: fc2/linear:out0 f32 [") && strstr(l, " nan 0 inf 0")) ||
                      strstr(l, "rank 0: not computed yet at this step"), "%s", l);
    /* info ranks at the stop */
    const char *after = strstr(out, "reason=nan");
    ck_assert_ptr_nonnull(after);
    line_starting(after, "1     ", l, sizeof l);
    ck_assert_msg(strstr(l, " stopped ") && strstr(l, " 5      forward   fc2/linear"), "%s", l);
    line_starting(after, "0     ", l, sizeof l);
    ck_assert_msg(strstr(l, " paused ") && strstr(l, "<- focus"), "%s", l);
    ck_assert_msg(strstr(out, "error: rank: '7' is no rank of this job (0 to 1)"), "%s", out);
    ck_assert_msg(strstr(out, "Focus: rank 1 (pid "), "%s", out);
    ck_assert_msg(strstr(out, "(tdbg rank 1) print fc2/linear:out0[0, :2]\nfc2/linear:out0 f32 ["),
                  "print on the focused rank:\n%s", out);
    const char *row = strstr(out, "(slice [0,:2] -> [2])\n[");
    ck_assert_msg(row && strncmp(row + 24 + strspn(row + 24, " "), "nan ", 4) == 0, "rank 1's NaN at [0,0]:\n%s", out);
}
END_TEST

START_TEST(test_job_rank_killed)
{
    if (!mpi_usable())
        return;
    char dir[64] = "/tmp/tdbg-jobdump-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    int st = tu_shell(out, sizeof out,
                      TDBG " -ex 'break nan' -ex 'dump dir=%s;when=break;keep=2' -ex run -ex 'info ranks' -- " MPIRUN
                      " --inject kill@op=fc2/linear,step=5,rank=1 2>&1", dir);
    ck_assert_msg(st == 1, "tdbg --mpi: status %d (124: it hung), output:\n%s", st, out);
    char l[512];
    ck_assert_msg(strstr(out, "Dumping from step 1: dir="), "%s", out);
    ck_assert_msg(strstr(out, "job: rank 1 (pid "), "%s", out);
    ck_assert_msg(strstr(out, "died of signal 9 (Killed)"), "the signal is not named:\n%s", out);
    /* the survivor stops at mpirun's SIGTERM, waiting in the step's first all-reduce */
    line_starting(out, "[rank 0] stopped:", l, sizeof l);
    ck_assert_msg(strncmp(l, "[rank 0] stopped: step=5 phase=backward op=allreduce/bucket", 59) == 0 &&
                      strstr(l, " type=AllReduce reason=signal tensor=- index=- origin=- signal=SIGTERM"), "%s", l);
    line_starting(strstr(out, "(tdbg rank 0) info ranks"), "1     ", l, sizeof l);
    ck_assert_msg(strstr(l, " dead"), "%s", l);
    /* its flight recorder wrote the steps up to the stop */
    char path[128];
    struct stat sb;
    snprintf(path, sizeof path, "%s/rank-0/step-00000005.h5", dir);
    ck_assert_msg(stat(path, &sb) == 0 && sb.st_size > 0, "no %s:\n%s", path, out);
    snprintf(path, sizeof path, "%s/rank-0/step-00000004.h5", dir);
    ck_assert_msg(stat(path, &sb) == 0 && sb.st_size > 0, "no %s:\n%s", path, out);
    tu_scratch_remove(dir);
}
END_TEST

START_TEST(test_job_usage)
{
    int st = tu_shell(out, sizeof out, "%s/debugger/tdbg --mpi --tui -- mpirun -np 2 true 2>&1", TDBG_BUILDDIR);
    ck_assert_int_eq(st, 2);
    ck_assert_str_eq(out, "tdbg: --mpi has no terminal UI yet: the command line (--cli) or --batch\n");
    st = tu_shell(out, sizeof out, "%s/debugger/tdbg --mpi --batch -- /nonexistent/mpirun 2>&1", TDBG_BUILDDIR);
    ck_assert_int_eq(st, 2);
    ck_assert_str_eq(out, "tdbg: cannot run /nonexistent/mpirun: No such file or directory\n");
}
END_TEST

Suite *suite_job(void)
{
    Suite *s = suite_create("job");
    TCase *tc = tcase_create("mpirun -np 2");
    tcase_set_timeout(tc, 2 * LIMIT_S + 120);
    tcase_add_test(tc, test_job_usage);
    tcase_add_test(tc, test_job_nan_on_rank1);
    tcase_add_test(tc, test_job_rank_killed);
    suite_add_tcase(s, tc);
    return s;
}
