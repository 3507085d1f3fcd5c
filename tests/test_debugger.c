/*
 * test_debugger.c — scripted debugger sessions: `tdbg --batch` on the
 * example programs with injected and natural faults, in eager and graph
 * mode, checking the exact `stopped:` line, the exit status and what the
 * commands print.
 */
#include "suites.h"
#include "testutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OUT_MAX (1 << 20)

typedef struct {
    int status;
    char *out;
} session;

static const char *const MLP = "--hidden 64,64 --batch 32 --threads 2 --log-every 1";
static const char *const CNN = "--channels 4,8,8 --batch 8 --threads 2 --log-every 1 --train-size 64";

/* tdbg --batch with the -ex commands in `cmds` (separated by ';'), on PROG ARGS. */
static session run_tdbg(const char *cmds, const char *prog, const char *fmt, ...)
{
    char args[1024], ex[2048] = "", cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *copy = strdup(cmds), *save = NULL;
    for (char *c = strtok_r(copy, ";", &save); c; c = strtok_r(NULL, ";", &save)) {
        size_t n = strlen(ex);
        snprintf(ex + n, sizeof ex - n, " -ex '%s'", c + strspn(c, " "));
    }
    free(copy);
    snprintf(cmd, sizeof cmd, "'%s/debugger/tdbg' --batch%s -- '%s/examples/%s' %s 2>&1 </dev/null", TDBG_BUILDDIR,
             ex, TDBG_BUILDDIR, prog, args);
    session s = { .out = calloc(1, OUT_MAX) };
    ck_assert(s.out != NULL);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run %s", cmd);
    size_t n = fread(s.out, 1, OUT_MAX - 1, p);
    s.out[n] = '\0';
    int st = pclose(p);
    s.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return s;
}

/* The k-th (from 0) `stopped:` line of the session, without its newline. */
static const char *stopped_line(const session *s, int k, char *buf, size_t n)
{
    const char *p = s->out;
    for (int i = 0; p && (p = strstr(p, "stopped: ")) != NULL; i++, p++) {
        if (p != s->out && p[-1] != '\n')
            continue;
        if (i == k) {
            size_t len = strcspn(p, "\n");
            snprintf(buf, n, "%.*s", (int)len, p);
            return buf;
        }
    }
    return NULL;
}

static void assert_stop(const session *s, int k, const char *want)
{
    char buf[512];
    const char *got = stopped_line(s, k, buf, sizeof buf);
    ck_assert_msg(got && strcmp(got, want) == 0, "stop %d:\n  want %s\n  got  %s\nsession:\n%s", k, want,
                  got ? got : "(none)", s->out);
}

static void assert_has(const session *s, const char *want)
{
    ck_assert_msg(strstr(s->out, want) != NULL, "no '%s' in the session:\n%s", want, s->out);
}

static void done(session *s) { free(s->out); }

/* ---- injected faults, both modes ----------------------------------------------- */

START_TEST(test_inject_nan_forward)
{
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        session s = run_tdbg("break nan;run", "mlp", "%s --steps 6 --mode %s --inject nan@op=fc2/linear,step=3",
                             MLP, modes[m]);
        assert_stop(&s, 0, "stopped: step=3 phase=forward op=fc2/linear type=Linear reason=nan "
                           "tensor=fc2/linear:out0 index=[0,0] origin=created");
        ck_assert_msg(s.status == 1, "%s: exit %d, want 1 (stopped on a breakpoint):\n%s", modes[m], s.status,
                      s.out);
        assert_has(&s, "verdict: created here (every input is finite)");
        assert_has(&s, "step=2 loss=");
        ck_assert_msg(!strstr(s.out, "step=3 loss="), "training went past the stop:\n%s", s.out);
        done(&s);
        /* made by the optimizer: the update op is the origin */
        s = run_tdbg("break nan;run", "mlp", "%s --steps 4 --mode %s --inject nan@op=update/fc2.weight,step=2,index=9",
                     MLP, modes[m]);
        assert_stop(&s, 0, "stopped: step=2 phase=update op=update/fc2.weight type=Adam reason=nan "
                           "tensor=param:fc2.weight index=[0,9] origin=created");
        done(&s);
    }
}
END_TEST

/* A NaN made in the forward pass reaches the backward ops through what they
 * read of it (the cross entropy's logits and saved log-sum-exp, a batch
 * norm's input and statistics): none of them created it, so `break nan`
 * does not stop in that backward. The next op with a NaN it did not get
 * from an op of the same step is the first of the next step, reading the
 * parameters the update spoiled. */
START_TEST(test_nan_not_recreated_in_backward)
{
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        session s = run_tdbg("break nan;run;continue", "mlp", "%s --steps 6 --mode %s "
                             "--inject nan@op=fc2/linear,step=3", MLP, modes[m]);
        assert_stop(&s, 0, "stopped: step=3 phase=forward op=fc2/linear type=Linear reason=nan "
                           "tensor=fc2/linear:out0 index=[0,0] origin=created");
        assert_stop(&s, 1, "stopped: step=4 phase=forward op=fc1/linear type=Linear reason=nan "
                           "tensor=fc1/linear:out0 index=[0,0] origin=propagated:param:fc1.weight");
        ck_assert_msg(!strstr(s.out, "phase=backward"), "%s: stopped in the backward:\n%s", modes[m], s.out);
        done(&s);
        s = run_tdbg("break nan;run;continue", "cnn", "%s --steps 4 --mode %s --inject nan@op=conv3/bn,step=2",
                     CNN, modes[m]);
        assert_stop(&s, 0, "stopped: step=2 phase=forward op=conv3/bn type=BatchNorm reason=nan "
                           "tensor=conv3/bn:out0 index=[0,0,0,0] origin=created");
        assert_stop(&s, 1, "stopped: step=3 phase=forward op=conv1/conv type=Conv2D reason=nan "
                           "tensor=conv1/conv:out0 index=[0,0,0,0] origin=propagated:param:conv1.weight");
        done(&s);
        /* Stopped in that backward by name: the reads are listed, and the verdict names one. */
        s = run_tdbg("break grad/cross_entropy if out0.has_nan;run;info op grad/cross_entropy;"
                     "print cross_entropy:saved0[:2]", "mlp", "%s --steps 6 --mode %s "
                     "--inject nan@op=fc2/linear,step=3", MLP, modes[m]);
        assert_stop(&s, 0, "stopped: step=3 phase=backward op=grad/cross_entropy type=CrossEntropyGrad "
                           "reason=condition tensor=grad:fc3/linear:out0 index=[0,0] "
                           "origin=propagated:fc3/linear:out0");
        assert_has(&s, "  verdict: propagated from fc3/linear:out0 (a forward tensor this op reads)\n");
        assert_has(&s, "  reads:   fc3/linear:out0 [32,10] f32  NON-FINITE");
        assert_has(&s, "           batch:y [32] i32  finite");
        assert_has(&s, "           cross_entropy:saved0 [32] f32  NON-FINITE");
        assert_has(&s, "  read0 fc3/linear:out0  from fc3/linear\n  read1 batch:y  from input\n"
                       "  read2 cross_entropy:saved0  from cross_entropy\n");
        assert_has(&s, "cross_entropy:saved0 f32 [32] (slice [:2] -> [2])\n[    nan ");
        done(&s);
    }
}
END_TEST

START_TEST(test_inject_inf_backward_and_cnn)
{
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        /* In the backward: the gradient LinearGrad hands to fc1/relu. */
        session s = run_tdbg("break nonfinite;run", "mlp", "%s --steps 4 --mode %s "
                             "--inject inf@op=grad/fc2/linear,step=1,index=5", MLP, modes[m]);
        assert_stop(&s, 0, "stopped: step=1 phase=backward op=grad/fc2/linear type=LinearGrad reason=inf "
                           "tensor=grad:fc1/relu:out0 index=[0,5] origin=created");
        done(&s);
        /* In the CNN, at a batch norm inside a fused conv+bn+relu group. */
        s = run_tdbg("break inf;run", "cnn", "%s --steps 3 --mode %s --inject inf@op=conv2/bn,step=1,index=7",
                     CNN, modes[m]);
        assert_stop(&s, 0, "stopped: step=1 phase=forward op=conv2/bn type=BatchNorm reason=inf "
                           "tensor=conv2/bn:out0 index=[0,0,0,7] origin=created");
        ck_assert_int_eq(s.status, 1);
        done(&s);
    }
}
END_TEST

START_TEST(test_natural_nan)
{
    /* A learning rate this large blows the weights up within a few steps;
     * the first op making a non-finite value is the same in both modes and
     * every one of its inputs is finite. */
    char first[512] = "";
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        session s = run_tdbg("break nonfinite;run", "mlp", "%s --steps 30 --optim sgd --lr 1e4 --mode %s", MLP,
                             modes[m]);
        char buf[512];
        const char *line = stopped_line(&s, 0, buf, sizeof buf);
        ck_assert_msg(line && strstr(line, "origin=created"), "%s: no stop at an origin:\n%s", modes[m], s.out);
        if (m == 0)
            snprintf(first, sizeof first, "%s", line);
        else
            ck_assert_msg(strcmp(first, line) == 0, "eager and graph differ:\n  %s\n  %s", first, line);
        assert_has(&s, "verdict: created here");
        done(&s);
    }
}
END_TEST

/* ---- breakpoints ------------------------------------------------------------------ */

START_TEST(test_threshold_condition)
{
    session s = run_tdbg("break fc*/linear if abs_max > 1000;run;info breakpoints", "mlp",
                         "%s --steps 5 --inject scale@op=fc2/linear,step=2,value=1e5", MLP);
    assert_stop(&s, 0, "stopped: step=2 phase=forward op=fc2/linear type=Linear reason=condition "
                       "tensor=fc2/linear:out0 index=- origin=-");
    assert_has(&s, "Breakpoint 1: ops matching 'fc*/linear' if outputs.abs_max > 1000");
    assert_has(&s, "abs_max = ");
    ck_assert_int_eq(s.status, 1);
    done(&s);
}
END_TEST

START_TEST(test_tbreak_ignore_disable)
{
    /* break fc1/linear, ignore its first 2 hits: the stop is at step 2; then
     * a tbreak stops once at grad/fc1/linear and goes away; disabled, the
     * first breakpoint lets training finish. */
    session s = run_tdbg("break fc1/linear;ignore 1 2;run;tbreak grad/fc1/linear;continue;info breakpoints;"
                         "disable 1;continue", "mlp", "%s --steps 4", MLP);
    assert_stop(&s, 0, "stopped: step=2 phase=forward op=fc1/linear type=Linear reason=breakpoint "
                       "tensor=- index=- origin=-");
    assert_stop(&s, 1, "stopped: step=2 phase=backward op=grad/fc1/linear type=LinearGrad reason=breakpoint "
                       "tensor=- index=- origin=-");
    char buf[512];
    ck_assert_msg(!stopped_line(&s, 2, buf, sizeof buf), "a third stop:\n%s", s.out);
    assert_has(&s, "Will ignore the next 2 hits of breakpoint 1.");
    assert_has(&s, "1    op         keep  y    3      fc1/linear");
    ck_assert_msg(!strstr(s.out, "2    op         del"), "the tbreak was not deleted:\n%s", s.out);
    assert_has(&s, "step=3 loss=");
    ck_assert_int_eq(s.status, 1); /* it did stop on breakpoints */
    done(&s);
}
END_TEST

START_TEST(test_stepping)
{
    session s = run_tdbg("break step 1;run;step;finish;next;until step 3;info step", "mlp", "%s --steps 5 --mode graph",
                         MLP);
    assert_stop(&s, 0, "stopped: step=1 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    assert_stop(&s, 1, "stopped: step=1 phase=forward op=fc1/linear type=Linear reason=step tensor=- index=- origin=-");
    assert_stop(&s, 2, "stopped: step=1 phase=backward op=- type=- reason=finish tensor=- index=- origin=-");
    assert_stop(&s, 3, "stopped: step=2 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    assert_stop(&s, 4, "stopped: step=3 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    assert_has(&s, "step 3, forward phase, 0 ops run in it");
    done(&s);
}
END_TEST

/* ---- looking around and changing values ------------------------------------------ */

START_TEST(test_inspect)
{
    session s = run_tdbg("break fc2/relu;run;info ops;info op fc2/linear;print fc2/relu:out0[0, :4];"
                         "stats param:fc1.bias;hist fc2/relu:out0 4;print fc2/linear:in1[0:2,0:2];trend fc2/relu:out0;"
                         "help break", "mlp", "%s --steps 2", MLP);
    assert_has(&s, "fc1/linear");
    assert_has(&s, "Linear");
    assert_has(&s, "in0  fc1/relu:out0  from fc1/relu");
    assert_has(&s, "out0 fc2/linear:out0  to fc2/relu");
    assert_has(&s, "fc2/relu:out0 f32 [32,64]");
    assert_has(&s, "param:fc1.bias f32 [64]");
    assert_has(&s, "usage: break WHAT [if COND]");
    assert_has(&s, "fc2/relu:out0 f32 [32,64], 4 bins over the finite values:");
    assert_has(&s, "No statistics of fc2/relu:out0 yet; recording them from now on, every step.");
    done(&s);
}
END_TEST

START_TEST(test_trend_and_continue_n)
{
    /* `break nan` checks every output, which is the history `trend` shows;
     * `continue 3` passes the next two hits of the breakpoint stopped at. */
    session s = run_tdbg("break nan;break fc1/linear;run;continue 3;trend fc1/linear:out0;quit", "mlp",
                         "%s --steps 6", MLP);
    assert_stop(&s, 0, "stopped: step=0 phase=forward op=fc1/linear type=Linear reason=breakpoint "
                       "tensor=- index=- origin=-");
    assert_stop(&s, 1, "stopped: step=3 phase=forward op=fc1/linear type=Linear reason=breakpoint "
                       "tensor=- index=- origin=-");
    assert_has(&s, "Will ignore the next 2 hits of breakpoint 2.");
    assert_has(&s, "step    abs_max     l2norm      mean        nan     inf");
    for (int step = 0; step <= 3; step++) {
        char row[16];
        snprintf(row, sizeof row, "\n%-7d ", step);
        ck_assert_msg(strstr(s.out, row), "no trend row for step %d:\n%s", step, s.out);
    }
    assert_has(&s, "tdbg: training ended by quit at step 3");
    ck_assert_int_eq(s.status, 1);
    done(&s);
}
END_TEST

START_TEST(test_set_changes_training)
{
    /* A NaN put into a weight by hand appears at the first op reading it:
     * the stop says where it came from. */
    session s = run_tdbg("break step 1;run;set param:fc1.weight[0,0] = nan;break nonfinite;continue", "mlp",
                         "%s --steps 3", MLP);
    assert_has(&s, "param:fc1.weight[0,0]: ");
    assert_stop(&s, 1, "stopped: step=1 phase=forward op=fc1/linear type=Linear reason=nan "
                       "tensor=fc1/linear:out0 index=[0,0] origin=propagated:param:fc1.weight");
    done(&s);
    /* A finite change: the loss of step 1 moves away from the clean run's. */
    session clean = run_tdbg("run", "mlp", "%s --steps 2", MLP);
    s = run_tdbg("break step 1;run;set param:fc3.bias[0] = 50;continue", "mlp", "%s --steps 2", MLP);
    const char *a = strstr(clean.out, "step=1 loss="), *b = strstr(s.out, "step=1 loss=");
    ck_assert_msg(a && b, "no step 1 line:\n%s\n%s", clean.out, s.out);
    float la = strtof(a + 12, NULL), lb = strtof(b + 12, NULL);
    ck_assert_msg(lb > la + 1.0f, "set bias 50: loss %g, clean %g", lb, la);
    ck_assert_int_eq(clean.status, 0);
    done(&s);
    done(&clean);
}
END_TEST

START_TEST(test_bad_commands)
{
    session s = run_tdbg("brek nan;print nosuch:out0;condition 7 has_nan;break fc1/linear if abs_mx > 3;"
                         "break fc2/linear;run;break fc2/lnear;print fc1/linear:out9;set param:fc1.bias[99] = 1;"
                         "print fc1/linear:out0[0,;info op fc1/relux;until step 0;info breakpoints", "mlp", "%s --steps 3",
                         MLP);
    assert_has(&s, "error: unknown command 'brek' (did you mean break?)");
    assert_has(&s, "error: print: no op 'nosuch' in this step");
    assert_has(&s, "error: no breakpoint 7");
    assert_has(&s, "did you mean abs_max?");
    assert_has(&s, "error: no op matches 'fc2/lnear' (did you mean fc2/linear?)");
    assert_has(&s, "fc1/linear has 1 outputs (out0..out0)");
    assert_has(&s, "error: set: ");
    assert_has(&s, "error: print: ");
    assert_has(&s, "error: info op: no op 'fc1/relux' in this step or the last (did you mean fc1/relu?)");
    assert_has(&s, "error: until step 0: training is at step 0 already");
    assert_has(&s, "1    op         keep  y    1      fc2/linear"); /* the session went on */
    ck_assert_int_eq(s.status, 1);
    done(&s);
}
END_TEST

START_TEST(test_interrupt)
{
    /* Ctrl-C while training runs: a stop at the next op boundary. */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "'%s/debugger/tdbg' --batch -ex run -ex 'info step' -- '%s/examples/mlp' %s --steps 1000000 "
             ">%s/interrupt.out 2>&1 </dev/null & pid=$!; sleep 3; kill -INT $pid; wait $pid; echo $?",
             TDBG_BUILDDIR, TDBG_BUILDDIR, MLP, TDBG_BUILDDIR);
    FILE *p = popen(cmd, "r");
    int status = -1;
    ck_assert(p && fscanf(p, "%d", &status) == 1);
    pclose(p);
    char path[1024];
    snprintf(path, sizeof path, "%s/interrupt.out", TDBG_BUILDDIR);
    FILE *f = fopen(path, "r");
    ck_assert(f != NULL);
    session s = { .status = status, .out = calloc(1, OUT_MAX) };
    size_t n = fread(s.out, 1, OUT_MAX - 1, f);
    s.out[n] = '\0';
    fclose(f);
    remove(path);
    assert_has(&s, "Interrupted.");
    char buf[512];
    const char *line = stopped_line(&s, 0, buf, sizeof buf);
    ck_assert_msg(line && strstr(line, "reason=interrupt") && strstr(line, " op="), "no interrupt stop:\n%s", s.out);
    assert_has(&s, "tdbg: the script ended while stopped at step");
    ck_assert_msg(status == 1, "exit %d:\n%s", status, s.out);
    done(&s);
}
END_TEST

START_TEST(test_dump_commands)
{
    /* the spec from a file: this test's -ex lists are split at ';' */
    char dir[] = "/tmp/tdbg-dbgdump-XXXXXX", cmds[512], path[128];
    ck_assert(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/spec", dir);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fprintf(f, "dir=%s/run\nops=fc2/*   # the second layer\nsteps=1-2\n", dir);
    fclose(f);
    snprintf(cmds, sizeof cmds, "dump @%s;break step 2;run;info dump;dump off;dump steps=x;info dump;"
             "break fc2/linear;continue;dump now fc2/linear:out0 param:fc1.bias;dump now nosuch:out0;delete;"
             "continue", path);
    session s = run_tdbg(cmds, "mlp", "%s --steps 4", MLP);
    assert_has(&s, "Dumping from step 0: dir=");
    assert_has(&s, ";ops=fc2/*;steps=1-2;io=outputs;");
    assert_has(&s, "stopped: step=2 phase=forward op=- type=- reason=step");
    assert_has(&s, "steps and 2 tensors written");
    assert_has(&s, "stopped: 1 steps and 2 tensors written");
    assert_has(&s, "error: dump: column 7: ");
    assert_has(&s, "No dump is running ('dump SPEC' starts one).");
    assert_has(&s, "Wrote 2 tensors to tdbg-dump/now/step-00000002.h5");
    assert_has(&s, "error: dump now: no op 'nosuch'");
    snprintf(path, sizeof path, "%s/run/step-00000001.h5", dir);
    ck_assert_msg(access(path, R_OK) == 0, "no %s:\n%s", path, s.out);
    snprintf(path, sizeof path, "%s/run/step-00000002.h5", dir);
    ck_assert_msg(access(path, R_OK) != 0, "%s written after dump off", path);
    snprintf(cmds, sizeof cmds, "rm -rf %s tdbg-dump", dir); /* dump now wrote into ./tdbg-dump/now */
    ck_assert(system(cmds) == 0);
    done(&s);
}
END_TEST

START_TEST(test_launcher)
{
    char out[4096];
    tu_shell(out, sizeof out, "'%s/debugger/tdbg' --bogus -- true 2>&1; echo status=$?", TDBG_BUILDDIR);
    ck_assert_msg(strstr(out, "tdbg: unknown option '--bogus'") && strstr(out, "usage: tdbg") &&
                  strstr(out, "status=2"), "%s", out);
    tu_shell(out, sizeof out, "'%s/debugger/tdbg' -x /no/such/file -- true 2>&1; echo status=$?",
             TDBG_BUILDDIR);
    ck_assert_msg(strstr(out, "tdbg: -x /no/such/file: No such file or directory") && strstr(out, "status=2"), "%s",
                  out);
    /* -x FILE: commands from a file, comments and blank lines skipped, then -ex */
    char script[] = "/tmp/tdbg-script-XXXXXX";
    int fd = mkstemp(script);
    ck_assert(fd >= 0);
    const char text[] = "# find the NaN\n\n  break nan\nrun\n";
    ck_assert(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    tu_shell(out, sizeof out,
             "'%s/debugger/tdbg' --batch -x %s -ex 'info breakpoints' -- '%s/examples/mlp' %s "
             "--steps 3 --inject nan@op=fc1/relu,step=1 2>&1; echo status=$?", TDBG_BUILDDIR, script,
             TDBG_BUILDDIR, MLP);
    unlink(script);
    ck_assert_msg(strstr(out, "stopped: step=1 phase=forward op=fc1/relu type=Relu reason=nan") &&
                  strstr(out, "(tdbg) info breakpoints") && strstr(out, "status=1") && !strstr(out, "find the NaN"),
                  "%s", out);
}
END_TEST

Suite *suite_debugger(void)
{
    Suite *s = suite_create("debugger");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_inject_nan_forward);
    tcase_add_test(tc, test_inject_inf_backward_and_cnn);
    tcase_add_test(tc, test_nan_not_recreated_in_backward);
    tcase_add_test(tc, test_natural_nan);
    suite_add_tcase(s, tc);

    tc = tcase_create("session");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_threshold_condition);
    tcase_add_test(tc, test_tbreak_ignore_disable);
    tcase_add_test(tc, test_stepping);
    tcase_add_test(tc, test_inspect);
    tcase_add_test(tc, test_trend_and_continue_n);
    tcase_add_test(tc, test_set_changes_training);
    tcase_add_test(tc, test_bad_commands);
    tcase_add_test(tc, test_launcher);
    tcase_add_test(tc, test_dump_commands);
    tcase_add_test(tc, test_interrupt);
    suite_add_tcase(s, tc);
    return s;
}
