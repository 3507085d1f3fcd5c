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
/* a few hundred steps a second here: long enough to attach to */
#define MPIRUN_RUNNING "mpirun --oversubscribe -np 2 " TDBG_BUILDDIR "/examples/mlp --dp --hidden 64,64 " \
                       "--batch 32 --threads 1 --steps 4000"
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
    unsetenv("XDG_RUNTIME_DIR"); /* the runs' sockets and the client's look-up: /tmp/tdbg-UID */
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

/* ---- tdbg attach --mpi: a job running already ---------------------------------------- */

#define TDBG_ATTACH "timeout " LIMIT_TEXT " " TDBG_BUILDDIR "/debugger/tdbg attach"

/* A 2-rank job with TDBG_LISTEN=1, in the background; its output in
 * dir/log, its status in dir/status at its end. pid[r] is rank r's,
 * once both listen. */
static void job_start(const char *dir, const char *args, int pid[2])
{
    int st = tu_shell(NULL, 0, "(TDBG_LISTEN=1 %s %s > %s/log 2>&1; echo $? > %s/status) "
                      "</dev/null >/dev/null 2>&1 &", MPIRUN_RUNNING, args, dir, dir);
    ck_assert_int_eq(st, 0);
    char log[8192];
    pid[0] = pid[1] = 0;
    for (int tries = 0; tries < 600 && (!pid[0] || !pid[1]); tries++) {
        usleep(100000);
        st = tu_shell(log, sizeof log, "sed -n 's/.*attach with: tdbg attach \\([0-9]*\\)$/\\1/p' %s/log", dir);
        for (char *l = log; st == 0 && *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] == '\n')) {
            int p = atoi(l);
            char rank[16];
            /* its rank, from mpirun's environment for it */
            if (p > 0 && tu_shell(rank, sizeof rank, "tr '\\0' '\\n' < /proc/%d/environ | "
                                  "sed -n 's/^OMPI_COMM_WORLD_RANK=//p'", p) == 0 && (atoi(rank) == 0 || atoi(rank) == 1))
                pid[atoi(rank)] = p;
        }
    }
    ck_assert_msg(pid[0] > 0 && pid[1] > 0, "the job's ranks do not listen:\n%s", log);
}

/* The job's exit status at its end (-1: not within LIMIT_S). */
static int job_status(const char *dir)
{
    char st[16] = "";
    for (int tries = 0; tries < 10 * LIMIT_S && !st[0]; tries++) {
        usleep(100000);
        tu_shell(st, sizeof st, "cat %s/status 2>/dev/null", dir);
    }
    return st[0] ? atoi(st) : -1;
}

START_TEST(test_job_attach_running)
{
    if (!mpi_usable())
        return;
    char dir[64] = "/tmp/tdbg-jobattach-XXXXXX", l[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    int pid[2];
    job_start(dir, "--inject nan@op=fc2/linear,step=2500,rank=1", pid);
    /* a list that misses a rank, and a process that does not listen: exit 2, the job untouched */
    int st = tu_shell(out, sizeof out, TDBG_ATTACH " --mpi %d --batch -ex continue 2>&1", pid[1]);
    ck_assert_msg(st == 2, "status %d:\n%s", st, out);
    ck_assert_str_eq(out, "tdbg: attach --mpi: the job has 2 ranks and 1 pids are named; missing: rank 0\n");
    st = tu_shell(out, sizeof out, TDBG_ATTACH " --mpi %d,%d --batch 2>&1", pid[0], (int)getpid());
    ck_assert_msg(st == 2, "status %d:\n%s", st, out);
    snprintf(l, sizeof l, "tdbg: attach --mpi: pid %d is not listening: start the job with TDBG_LISTEN=1 "
             "(docs/attach.md); no socket at /tmp/tdbg-%u/%d.sock\n", (int)getpid(), (unsigned)geteuid(), (int)getpid());
    ck_assert_str_eq(out, l);
    /* the pids in the wrong order: each rank is placed by its own rank */
    st = tu_shell(out, sizeof out, TDBG_ATTACH " --mpi %d,%d --batch -ex 'info ranks' -ex 'break nan' -ex continue "
                  "-ex 'rank 1' -ex 'print fc2/linear:out0[0, :2]' -ex detach 2>&1", pid[1], pid[0]);
    ck_assert_msg(st == 0, "tdbg attach --mpi: status %d (124: it hung), output:\n%s", st, out);
    snprintf(l, sizeof l, ": attached to a job of 2 ranks: rank 0 pid %d, rank 1 pid %d.", pid[0], pid[1]);
    ck_assert_msg(strstr(out, l), "no '%s' in:\n%s", l, out);
    snprintf(l, sizeof l, "0     %-8d ", pid[0]);
    ck_assert_msg(strstr(out, l), "info ranks has no rank 0 (pid %d):\n%s", pid[0], out);
    snprintf(l, sizeof l, "1     %-8d ", pid[1]);
    ck_assert_msg(strstr(out, l), "info ranks has no rank 1 (pid %d):\n%s", pid[1], out);
    ck_assert_str_eq(line_starting(out, "[rank 1] stopped:", l, sizeof l),
                     "[rank 1] stopped: step=2500 phase=forward op=fc2/linear type=Linear reason=nan "
                     "tensor=fc2/linear:out0 index=[0,0] origin=created");
    ck_assert_str_eq(line_starting(out, "job: rank", l, sizeof l),
                     "job: rank 1 created the bad value first: step 2500, forward, fc2/linear, fc2/linear:out0");
    const char *row = strstr(out, "(slice [0,:2] -> [2])\n[");
    ck_assert_msg(row && strncmp(row + 24 + strspn(row + 24, " "), "nan ", 4) == 0, "rank 1's NaN at [0,0]:\n%s", out);
    ck_assert_msg(strstr(out, "Detached from every rank; the job trains on."), "%s", out);
    /* detached: the job trains to its end */
    st = job_status(dir);
    tu_shell(out, sizeof out, "tail -2 %s/log", dir);
    ck_assert_msg(st == 0, "the job's status %d after the detach:\n%s", st, out);
    ck_assert_msg(strstr(out, "final: loss="), "the job did not train to its end:\n%s", out);
    tu_scratch_remove(dir);
}
END_TEST

/* Rank 0 is attached to alone and paused; rank 1 trains on into the
 * step's gradient all-reduce and waits there for rank 0. An attach to
 * rank 1 then begins inside that wait (engine/dist.c), not at a step's
 * start it would never reach. */
START_TEST(test_job_attach_in_collective)
{
    if (!mpi_usable())
        return;
    char dir[64] = "/tmp/tdbg-jobattach-XXXXXX", l[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    int pid[2];
    job_start(dir, "", pid);
    int st = tu_shell(NULL, 0, "(sleep 8; echo detach) | " TDBG_ATTACH " %d > %s/rank0 2>&1 &", pid[0], dir);
    ck_assert_int_eq(st, 0);
    for (int tries = 0; tries < 600 && tu_shell(NULL, 0, "grep -q '^stopped:' %s/rank0", dir) != 0; tries++)
        usleep(100000);
    usleep(1000000); /* rank 1 reaches the all-reduce meanwhile */
    st = tu_shell(out, sizeof out, "timeout 30 %s/debugger/tdbg attach %d --batch 2>&1", TDBG_BUILDDIR,
                  pid[1]);
    ck_assert_msg(st == 0, "tdbg attach to rank 1: status %d (124: it hung in the all-reduce), output:\n%s", st, out);
    line_starting(out, "stopped:", l, sizeof l);
    ck_assert_msg(strstr(l, " phase=backward op=allreduce/bucket") && strstr(l, " type=AllReduce reason=interrupt "),
                  "rank 1 did not pause in its all-reduce: %s\n%s", l, out);
    ck_assert_msg(strstr(out, "waiting for the other ranks."), "%s", out);
    st = job_status(dir);
    tu_shell(out, sizeof out, "cat %s/rank0; tail -2 %s/log", dir, dir);
    ck_assert_msg(st == 0, "the job's status %d:\n%s", st, out);
    ck_assert_msg(strstr(out, "Detaching from"), "rank 0's session did not detach:\n%s", out);
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
    tcase_add_test(tc, test_job_attach_running);
    tcase_add_test(tc, test_job_attach_in_collective);
    suite_add_tcase(s, tc);
    return s;
}
