/*
 * test_debugger.c — scripted debugger sessions: `tdbg --batch` on the
 * example programs with injected and natural faults, in eager and graph
 * mode, checking the exact `stopped:` line, the exit status and what the
 * commands print.
 */
#include "dump.h"
#include "h5file.h"
#include "suites.h"
#include "testutil.h"
#include "tsession.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const MLP = "--hidden 64,64 --batch 32 --threads 2 --log-every 1";
static const char *const CNN = "--channels 4,8,8 --batch 8 --threads 2 --log-every 1 --train-size 64";

/* ---- injected faults, both modes ----------------------------------------------- */

START_TEST(test_inject_nan_forward)
{
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        ts_session s = ts_tdbg("--batch", "break nan;run", "mlp",
                               "%s --steps 6 --mode %s --inject nan@op=fc2/linear,step=3", MLP, modes[m]);
        ts_stop_is(&s, 0, "stopped: step=3 phase=forward op=fc2/linear type=Linear reason=nan "
                          "tensor=fc2/linear:out0 index=[0,0] origin=created");
        ck_assert_msg(s.status == 1, "%s: exit %d, want 1 (stopped on a breakpoint):\n%s", modes[m], s.status,
                      s.out);
        ts_has(&s, "verdict: created here (every input is finite)");
        ts_has(&s, "step=2 loss=");
        ck_assert_msg(!strstr(s.out, "step=3 loss="), "training went past the stop:\n%s", s.out);
        ts_free(&s);
        /* made by the optimizer: the update op is the origin */
        s = ts_tdbg("--batch", "break nan;run", "mlp",
                    "%s --steps 4 --mode %s --inject nan@op=update/fc2.weight,step=2,index=9", MLP, modes[m]);
        ts_stop_is(&s, 0, "stopped: step=2 phase=update op=update/fc2.weight type=Adam reason=nan "
                          "tensor=param:fc2.weight index=[0,9] origin=created");
        ts_free(&s);
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
        ts_session s = ts_tdbg("--batch", "break nan;run;continue", "mlp", "%s --steps 6 --mode %s "
                               "--inject nan@op=fc2/linear,step=3", MLP, modes[m]);
        ts_stop_is(&s, 0, "stopped: step=3 phase=forward op=fc2/linear type=Linear reason=nan "
                          "tensor=fc2/linear:out0 index=[0,0] origin=created");
        ts_stop_is(&s, 1, "stopped: step=4 phase=forward op=fc1/linear type=Linear reason=nan "
                          "tensor=fc1/linear:out0 index=[0,0] origin=propagated:param:fc1.weight");
        ck_assert_msg(!strstr(s.out, "phase=backward"), "%s: stopped in the backward:\n%s", modes[m], s.out);
        ts_free(&s);
        s = ts_tdbg("--batch", "break nan;run;continue", "cnn",
                    "%s --steps 4 --mode %s --inject nan@op=conv3/bn,step=2", CNN, modes[m]);
        ts_stop_is(&s, 0, "stopped: step=2 phase=forward op=conv3/bn type=BatchNorm reason=nan "
                          "tensor=conv3/bn:out0 index=[0,0,0,0] origin=created");
        ts_stop_is(&s, 1, "stopped: step=3 phase=forward op=conv1/conv type=Conv2D reason=nan "
                          "tensor=conv1/conv:out0 index=[0,0,0,0] origin=propagated:param:conv1.weight");
        ts_free(&s);
        /* Stopped in that backward by name: the reads are listed, and the verdict names one. */
        s = ts_tdbg("--batch", "break grad/cross_entropy if out0.has_nan;run;info op grad/cross_entropy;"
                    "print cross_entropy:saved0[:2]", "mlp", "%s --steps 6 --mode %s "
                    "--inject nan@op=fc2/linear,step=3", MLP, modes[m]);
        ts_stop_is(&s, 0, "stopped: step=3 phase=backward op=grad/cross_entropy type=CrossEntropyGrad "
                          "reason=condition tensor=grad:fc3/linear:out0 index=[0,0] "
                          "origin=propagated:fc3/linear:out0");
        ts_has(&s, "  verdict: propagated from fc3/linear:out0 (a forward tensor this op reads)\n");
        ts_has(&s, "  reads:   fc3/linear:out0 [32,10] f32  NON-FINITE");
        ts_has(&s, "           batch:y [32] i32  finite");
        ts_has(&s, "           cross_entropy:saved0 [32] f32  NON-FINITE");
        ts_has(&s, "  read0 fc3/linear:out0  from fc3/linear\n  read1 batch:y  from input\n"
                   "  read2 cross_entropy:saved0  from cross_entropy\n");
        ts_has(&s, "cross_entropy:saved0 f32 [32] (slice [:2] -> [2])\n[    nan ");
        ts_free(&s);
    }
}
END_TEST

START_TEST(test_inject_inf_backward_and_cnn)
{
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        /* In the backward: the gradient LinearGrad hands to fc1/relu. */
        ts_session s = ts_tdbg("--batch", "break nonfinite;run", "mlp", "%s --steps 4 --mode %s "
                               "--inject inf@op=grad/fc2/linear,step=1,index=5", MLP, modes[m]);
        ts_stop_is(&s, 0, "stopped: step=1 phase=backward op=grad/fc2/linear type=LinearGrad reason=inf "
                          "tensor=grad:fc1/relu:out0 index=[0,5] origin=created");
        ts_free(&s);
        /* In the CNN, at a batch norm inside a fused conv+bn+relu group. */
        s = ts_tdbg("--batch", "break inf;run", "cnn", "%s --steps 3 --mode %s --inject inf@op=conv2/bn,step=1,index=7",
                    CNN, modes[m]);
        ts_stop_is(&s, 0, "stopped: step=1 phase=forward op=conv2/bn type=BatchNorm reason=inf "
                          "tensor=conv2/bn:out0 index=[0,0,0,7] origin=created");
        ck_assert_int_eq(s.status, 1);
        ts_free(&s);
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
        ts_session s = ts_tdbg("--batch", "break nonfinite;run", "mlp",
                               "%s --steps 30 --optim sgd --lr 1e4 --mode %s", MLP, modes[m]);
        char buf[512];
        const char *line = ts_stopped_line(&s, 0, buf, sizeof buf);
        ck_assert_msg(line && strstr(line, "origin=created"), "%s: no stop at an origin:\n%s", modes[m], s.out);
        if (m == 0)
            snprintf(first, sizeof first, "%s", line);
        else
            ck_assert_msg(strcmp(first, line) == 0, "eager and graph differ:\n  %s\n  %s", first, line);
        ts_has(&s, "verdict: created here");
        ts_free(&s);
    }
}
END_TEST

/* ---- breakpoints ------------------------------------------------------------------ */

START_TEST(test_threshold_condition)
{
    ts_session s = ts_tdbg("--batch", "break fc*/linear if abs_max > 1000;run;info breakpoints", "mlp",
                           "%s --steps 5 --inject scale@op=fc2/linear,step=2,value=1e5", MLP);
    ts_stop_is(&s, 0, "stopped: step=2 phase=forward op=fc2/linear type=Linear reason=condition "
                      "tensor=fc2/linear:out0 index=- origin=-");
    ts_has(&s, "Breakpoint 1 (fc*/linear if outputs.abs_max > 1000) pending: no ops exist before the first step; "
               "it is checked when they do");
    ts_has(&s, "abs_max = ");
    ck_assert_int_eq(s.status, 1);
    ts_free(&s);
}
END_TEST

START_TEST(test_tbreak_ignore_disable)
{
    /* break fc1/linear, ignore its first 2 hits: the stop is at step 2; then
     * a tbreak stops once at grad/fc1/linear and goes away; disabled, the
     * first breakpoint lets training finish. */
    ts_session s = ts_tdbg("--batch", "break fc1/linear;ignore 1 2;run;tbreak grad/fc1/linear;continue;"
                           "info breakpoints;disable 1;continue", "mlp", "%s --steps 4", MLP);
    ts_stop_is(&s, 0, "stopped: step=2 phase=forward op=fc1/linear type=Linear reason=breakpoint "
                      "tensor=- index=- origin=-");
    ts_stop_is(&s, 1, "stopped: step=2 phase=backward op=grad/fc1/linear type=LinearGrad reason=breakpoint "
                      "tensor=- index=- origin=-");
    char buf[512];
    ck_assert_msg(!ts_stopped_line(&s, 2, buf, sizeof buf), "a third stop:\n%s", s.out);
    ts_has(&s, "Will ignore the next 2 hits of breakpoint 1.");
    ts_has(&s, "1    op         keep  y    3      fc1/linear");
    ck_assert_msg(!strstr(s.out, "2    op         del"), "the tbreak was not deleted:\n%s", s.out);
    ts_has(&s, "step=3 loss=");
    ck_assert_int_eq(s.status, 1); /* it did stop on breakpoints */
    ts_free(&s);
}
END_TEST

START_TEST(test_stepping)
{
    ts_session s = ts_tdbg("--batch", "break step 1;run;step;finish;next;until step 3;info step", "mlp",
                           "%s --steps 5 --mode graph", MLP);
    ts_stop_is(&s, 0, "stopped: step=1 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    ts_stop_is(&s, 1, "stopped: step=1 phase=forward op=fc1/linear type=Linear reason=step tensor=- index=- origin=-");
    ts_stop_is(&s, 2, "stopped: step=1 phase=backward op=- type=- reason=finish tensor=- index=- origin=-");
    ts_stop_is(&s, 3, "stopped: step=2 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    ts_stop_is(&s, 4, "stopped: step=3 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    ts_has(&s, "step 3, forward phase, 0 ops run in it");
    ts_free(&s);
}
END_TEST

/* ---- looking around and changing values ------------------------------------------ */

/* The values of tensor `path` ("/fc2/relu/out0") in step 0 of the dump in
 * dir, malloc'ed; its element count in *n. */
/* What print, stats and hist show at a stop are the tensors' values: the
 * same program run without the debugger dumps them (the dump reader reads
 * them back), and the statistics and histogram are computed from those. */
START_TEST(test_inspect)
{
    ts_session s = ts_tdbg("--batch", "break fc2/relu;run;info ops;info op fc2/linear;print fc2/relu:out0[0, :4];"
                           "stats param:fc1.bias;hist fc2/relu:out0 4;print fc2/linear:in1[0:2,0:2];"
                           "trend fc2/relu:out0;help break", "mlp", "%s --steps 2", MLP);
    ts_has(&s, "fc1/linear");
    ts_has(&s, "Linear");
    ts_has(&s, "in0  fc1/relu:out0  from fc1/relu");
    ts_has(&s, "out0 fc2/linear:out0  to fc2/relu");
    ts_has(&s, "usage: break WHAT [if COND]");
    ts_has(&s, "Recording fc2/relu:out0 every step from now on.\nstep    abs_max"); /* the stop's own statistics */

    char dir[] = "/tmp/tdbg-inspect-XXXXXX", out[4096];
    ck_assert(mkdtemp(dir) != NULL);
    ck_assert_msg(tu_shell(out, sizeof out, "'%s/examples/mlp' %s --steps 2 --dump 'dir=%s/d;ops=fc1/linear,fc2/*;"
                           "io=both;steps=0' 2>&1", TDBG_BUILDDIR, MLP, dir) == 0, "%s", out);
    char d[64];
    snprintf(d, sizeof d, "%s/d", dir);
    int64_t n_relu, n_w, n_bias;
    float *relu = ts_dumped(d, "/fc2/relu/out0", &n_relu), *w = ts_dumped(d, "/fc2/linear/in1", &n_w),
          *bias = ts_dumped(d, "/fc1/linear/in2", &n_bias);
    tu_shell(out, sizeof out, "rm -rf '%s'", dir);
    ck_assert(n_relu == 32 * 64 && n_w == 64 * 64 && n_bias == 64);

    float v[4];
    ts_printed(&s, "fc2/relu:out0 f32 [32,64] (slice [0,:4] -> [4])", v, 4);
    for (int i = 0; i < 4; i++)
        ts_assert_printed("fc2/relu:out0[0, :4]", v[i], relu[i]);
    ts_printed(&s, "fc2/linear:in1 f32 [64,64] (slice [0:2,0:2] -> [2,2])", v, 4);
    for (int i = 0; i < 4; i++)
        ts_assert_printed("fc2/linear:in1[0:2,0:2]", v[i], w[(i / 2) * 64 + i % 2]);

    /* stats: min, max, mean, std (population), abs_max and l2norm of the bias */
    double mn = bias[0], mx = bias[0], sum = 0, sq = 0;
    for (int i = 0; i < 64; i++) {
        mn = fmin(mn, bias[i]), mx = fmax(mx, bias[i]);
        sum += bias[i], sq += (double)bias[i] * bias[i];
    }
    double mean = sum / 64, got[6];
    const char *st = strstr(s.out, "param:fc1.bias f32 [64] min ");
    ck_assert_msg(st && sscanf(st, "param:fc1.bias f32 [64] min %lf max %lf mean %lf std %lf abs_max %lf l2norm %lf",
                               &got[0], &got[1], &got[2], &got[3], &got[4], &got[5]) == 6,
                  "no stats line:\n%s", s.out);
    ts_assert_printed("min", got[0], mn);
    ts_assert_printed("max", got[1], mx);
    ts_assert_printed("mean", got[2], mean);
    ts_assert_printed("std", got[3], sqrt(sq / 64 - mean * mean));
    ts_assert_printed("abs_max", got[4], fmax(-mn, mx));
    ts_assert_printed("l2norm", got[5], sqrt(sq));

    /* hist: 4 equal bins over [min, max], the last one closed */
    double lo = relu[0], hi = relu[0];
    for (int64_t i = 0; i < n_relu; i++)
        lo = fmin(lo, relu[i]), hi = fmax(hi, relu[i]);
    int want[4] = { 0 };
    for (int64_t i = 0; i < n_relu; i++) {
        int b = (int)((relu[i] - lo) / (hi - lo) * 4);
        want[b > 3 ? 3 : b]++;
    }
    const char *h = strstr(s.out, "fc2/relu:out0 f32 [32,64], 4 bins over the finite values:\n");
    ck_assert_msg(h != NULL, "no histogram:\n%s", s.out);
    h = strchr(h, '\n') + 1;
    for (int b = 0; b < 4; b++) {
        double e0, e1;
        int count;
        ck_assert_msg(sscanf(h, "[%lf, %lf%*[])] %d", &e0, &e1, &count) == 3, "bin %d: %.60s", b, h);
        ts_assert_printed("bin edge", e0, lo + (hi - lo) * b / 4);
        ts_assert_printed("bin edge", e1, lo + (hi - lo) * (b + 1) / 4);
        ck_assert_msg(count == want[b], "bin %d: %d values printed, the dump's values give %d", b, count, want[b]);
        h = strchr(h, '\n') + 1;
    }
    ck_assert_msg(strncmp(h, "nan 0  inf 0\n", 13) == 0, "%.40s", h);
    free(relu);
    free(w);
    free(bias);
    ts_free(&s);
}
END_TEST

START_TEST(test_trend_and_continue_n)
{
    /* `break nan` checks every output, which is the history `trend` shows;
     * `continue 3` passes the next two hits of the breakpoint stopped at. */
    ts_session s = ts_tdbg("--batch", "break nan;break fc1/linear;run;continue 3;trend fc1/linear:out0;quit", "mlp",
                           "%s --steps 6", MLP);
    ts_stop_is(&s, 0, "stopped: step=0 phase=forward op=fc1/linear type=Linear reason=breakpoint "
                      "tensor=- index=- origin=-");
    ts_stop_is(&s, 1, "stopped: step=3 phase=forward op=fc1/linear type=Linear reason=breakpoint "
                      "tensor=- index=- origin=-");
    ts_has(&s, "Will ignore the next 2 hits of breakpoint 2.");
    ts_has(&s, "step    abs_max     l2norm      mean        nan     inf");
    for (int step = 0; step <= 3; step++) {
        char row[16];
        snprintf(row, sizeof row, "\n%-7d ", step);
        ck_assert_msg(strstr(s.out, row), "no trend row for step %d:\n%s", step, s.out);
    }
    ts_has(&s, "tdbg: training ended by quit at step 3");
    ck_assert_int_eq(s.status, 1);
    ts_free(&s);
}
END_TEST

START_TEST(test_set_changes_training)
{
    /* A NaN put into a weight by hand appears at the first op reading it:
     * the stop says where it came from. */
    ts_session s = ts_tdbg("--batch", "break step 1;run;set param:fc1.weight[0,0] = nan;break nonfinite;continue",
                           "mlp", "%s --steps 3", MLP);
    ts_has(&s, "param:fc1.weight[0,0]: ");
    ts_stop_is(&s, 1, "stopped: step=1 phase=forward op=fc1/linear type=Linear reason=nan "
                      "tensor=fc1/linear:out0 index=[0,0] origin=propagated:param:fc1.weight");
    ts_free(&s);
    /* A finite change: the loss of step 1 moves away from the clean run's. */
    ts_session clean = ts_tdbg("--batch", "run", "mlp", "%s --steps 2", MLP);
    s = ts_tdbg("--batch", "break step 1;run;set param:fc3.bias[0] = 50;continue", "mlp", "%s --steps 2", MLP);
    const char *a = strstr(clean.out, "step=1 loss="), *b = strstr(s.out, "step=1 loss=");
    ck_assert_msg(a && b, "no step 1 line:\n%s\n%s", clean.out, s.out);
    float la = strtof(a + 12, NULL), lb = strtof(b + 12, NULL);
    ck_assert_msg(lb > la + 1.0f, "set bias 50: loss %g, clean %g", lb, la);
    ck_assert_int_eq(clean.status, 0);
    ts_free(&s);
    ts_free(&clean);
}
END_TEST

START_TEST(test_bad_commands)
{
    ts_session s = ts_tdbg("--batch", "brek nan;print nosuch:out0;condition 7 has_nan;break fc1/linear if abs_mx > 3;"
                           "break fc2/linear;run;break fc2/lnear;print fc1/linear:out9;set param:fc1.bias[99] = 1;"
                           "print fc1/linear:out0[0,;info op fc1/relux;until step 0;info breakpoints", "mlp",
                           "%s --steps 3", MLP);
    ts_has(&s, "error: unknown command 'brek' (did you mean break?)");
    ts_has(&s, "error: print: no op 'nosuch' in this step");
    ts_has(&s, "error: no breakpoint 7");
    ts_has(&s, "did you mean abs_max?");
    ts_has(&s, "error: no op matches 'fc2/lnear' (did you mean fc2/linear?)");
    ts_has(&s, "fc1/linear has 1 outputs (out0..out0)");
    ts_has(&s, "error: set: ");
    ts_has(&s, "error: print: ");
    ts_has(&s, "error: info op: no op 'fc1/relux' in this step or the last (did you mean fc1/relu?)");
    ts_has(&s, "error: until step 0: training is at step 0 already");
    ts_has(&s, "1    op         keep  y    1      fc2/linear"); /* the session went on */
    ck_assert_int_eq(s.status, 1);
    ts_free(&s);
}
END_TEST

START_TEST(test_interrupt)
{
    /* Ctrl-C while training runs: a stop at the next op boundary. A line
     * every 1000 steps: at 15k steps a second, one a step would outgrow
     * what the test keeps. The signal goes once step 1000 is printed, not
     * after a fixed sleep: on a loaded machine the program may still be
     * starting, and a background job inherits SIGINT ignored until the
     * debugger sets its handler (CI saw the signal lost that way). */
    ts_session s = ts_sh("out='%s/interrupt.out'; '%s/debugger/tdbg' --batch -ex run -ex 'info step' -- "
                         "'%s/examples/mlp' %s --steps 1000000 --log-every 1000 >\"$out\" 2>&1 </dev/null & pid=$!; "
                         "i=0; until grep -q '^step=1000 ' \"$out\" || [ $i -ge 600 ]; do sleep 0.1; i=$((i+1)); done; "
                         "kill -INT $pid; wait $pid; st=$?; cat \"$out\"; rm -f \"$out\"; exit $st",
                         TDBG_BUILDDIR, TDBG_BUILDDIR, TDBG_BUILDDIR, MLP);
    ts_has(&s, "Interrupted.");
    char buf[512];
    const char *line = ts_stopped_line(&s, 0, buf, sizeof buf);
    ck_assert_msg(line && strstr(line, "reason=interrupt") && strstr(line, " op="), "no interrupt stop:\n%s", s.out);
    ts_has(&s, "tdbg: the script ended while stopped at step");
    ck_assert_msg(s.status == 1, "exit %d:\n%s", s.status, s.out);
    ts_free(&s);
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
    ts_session s = ts_tdbg("--batch", cmds, "mlp", "%s --steps 4", MLP);
    ts_has(&s, "Dumping from step 0: dir=");
    ts_has(&s, ";ops=fc2/*;steps=1-2;io=outputs;");
    ts_has(&s, "stopped: step=2 phase=forward op=- type=- reason=step");
    ts_has(&s, "steps and 2 tensors written");
    ts_has(&s, "stopped: 1 steps and 2 tensors written");
    ts_has(&s, "error: dump: column 7: ");
    ts_has(&s, "No dump is running ('dump SPEC' starts one).");
    ts_has(&s, "Wrote 2 tensors to tdbg-dump/now/step-00000002.h5");
    ts_has(&s, "error: dump now: no op 'nosuch'");
    snprintf(path, sizeof path, "%s/run/step-00000001.h5", dir);
    ck_assert_msg(access(path, R_OK) == 0, "no %s:\n%s", path, s.out);
    snprintf(path, sizeof path, "%s/run/step-00000002.h5", dir);
    ck_assert_msg(access(path, R_OK) != 0, "%s written after dump off", path);
    snprintf(cmds, sizeof cmds, "rm -rf %s tdbg-dump", dir); /* dump now wrote into ./tdbg-dump/now */
    ck_assert(system(cmds) == 0);
    ts_free(&s);
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

/* ---- dumps when things go wrong ------------------------------------------------ */

/* The steps and tensors in dir's step files, with dir's run.h5 read and
 * `tdbg-dump verify DIR` passing. Returns the number of steps; their
 * numbers go into steps (up to 8). */
static int dump_on_disk(const char *dir, int64_t *steps, int64_t *tensors)
{
    char err[1024], path[512];
    dump_step_entry *e;
    int n = dump_run_list(dir, &e, err, sizeof err);
    ck_assert_msg(n >= 0, "%s", err);
    *tensors = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_msg(e[i].complete, "%s/%s is incomplete", dir, e[i].name);
        if (i < 8)
            steps[i] = e[i].step;
        snprintf(path, sizeof path, "%s/%s", dir, e[i].name);
        dump_step_reader *r = dump_step_open(path, err, sizeof err);
        ck_assert_msg(r != NULL, "%s", err);
        dump_stats_row *rows = NULL;
        int n_rows = dump_step_stats(r, &rows, err, sizeof err); /* what=stats: a row a tensor */
        ck_assert_msg(n_rows >= 0, "%s", err);
        *tensors += dump_step_count(r) + n_rows;
        free(rows);
        dump_step_close(r);
    }
    free(e);
    dump_run_meta m;
    dump_op_row *ops;
    int n_ops;
    ck_assert_msg(dump_run_read(dir, &m, &ops, &n_ops, err, sizeof err), "%s", err);
    ck_assert_msg(n_ops > 0, "%s/run.h5 lists no ops", dir);
    free(ops);
    tu_result v = tu_run_tool(tdbg_dump_main, "tdbg-dump", (const char *const[]){ "verify", dir, NULL });
    ck_assert_msg(v.rc == 0, "tdbg-dump verify %s: exit %d\n%s%s", dir, v.rc, v.out, v.err);
    tu_result_free(&v);
    return n;
}

/* Writes "dir=DIR/d;SPEC" to DIR/spec (run_tdbg splits its commands at
 * ';') and its path into path. */
static void spec_file(const char *dir, const char *spec, char *path, size_t n)
{
    snprintf(path, n, "%s/spec", dir);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fprintf(f, "dir=%s/d;%s\n", dir, spec);
    fclose(f);
}

/* "N steps and T tensors written" in text after `after`, as N and T. */
static void counts_after(const char *text, const char *after, int64_t *n, int64_t *t)
{
    const char *p = strstr(text, after);
    ck_assert_msg(p != NULL, "no '%s' in:\n%s", after, text);
    long long a, b;
    ck_assert_msg(sscanf(p + strlen(after), "%lld steps and %lld tensors written", &a, &b) == 2, "%s", p);
    *n = a, *t = b;
}

/* The flight recorder's steps of a NaN made at fc2/linear in step 3, with
 * `keep=2`: step 2 whole and step 3 up to the stopped op (which the
 * session takes at the stop, its own hook coming after the debugger's). */
static void assert_recorded(const char *dir, bool stats)
{
    int64_t steps[8], tensors;
    ck_assert_int_eq(dump_on_disk(dir, steps, &tensors), 2);
    ck_assert(steps[0] == 2 && steps[1] == 3);
    char path[512], err[1024];
    snprintf(path, sizeof path, "%s/step-00000003.h5", dir);
    dump_step_reader *r = dump_step_open(path, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    if (stats) {
        dump_stats_row *rows;
        int n = dump_step_stats(r, &rows, err, sizeof err), nan = -1;
        ck_assert_msg(n > 0, "%s", err);
        for (int i = 0; i < n; i++) {
            if (strcmp(rows[i].path, "/fc2/linear/out0") == 0)
                nan = (int)rows[i].nan;
            ck_assert_msg(strcmp(rows[i].path, "/loss/out0") != 0, "step 3 holds an op after the stop");
        }
        free(rows);
        ck_assert_msg(nan == 1, "step 3's fc2/linear:out0 row: %d NaN", nan);
    } else {
        int i = dump_step_find(r, "/fc2/linear/out0");
        ck_assert_msg(i >= 0, "step 3 lacks the stopped op's output");
        float *v = malloc(dump_step_tensor(r, i)->numel * sizeof *v);
        ck_assert(dump_step_read_f32(r, i, v, err, sizeof err));
        ck_assert_msg(isnan(v[0]), "step 3's fc2/linear:out0[0] = %g, not the NaN", v[0]);
        free(v);
        ck_assert_int_lt(dump_step_find(r, "/loss/out0"), 0); /* after the stop: not run yet */
    }
    dump_step_close(r);
}

static const char *const RECORDERS[] = { "when=break;keep=2", "when=nonfinite;keep=2",
                                         "when=break;keep=2;what=stats" };

START_TEST(test_flight_recorder_at_the_stop)
{
    /* The steps are on disk at the stop itself, before a command is read:
     * tdbg waits for a line on a fifo no one writes, the test looks, then
     * kills it with SIGKILL and looks again. */
    const char *spec = RECORDERS[_i];
    char dir[] = "/tmp/tdbg-flight-XXXXXX", out[8192], d[128];
    ck_assert(mkdtemp(dir) != NULL);
    snprintf(d, sizeof d, "%s/d", dir);
    tu_shell(out, sizeof out,
             "exec 2>/dev/null; cd %s && mkfifo in && { '%s/debugger/tdbg' -ex 'break nan' -ex 'dump dir=%s;%s' -ex run -- "
             "'%s/examples/mlp' %s --inject nan@op=fc2/linear,step=3 <>in >log 2>&1 & pid=$!; "
             "for i in $(seq 1200); do grep -q '^stopped:' log && break; sleep 0.05; done; "
             "echo at-stop: $(ls d); '%s/dump/tdbg-dump' verify d >/dev/null 2>&1; echo verify=$?; "
             "kill -9 $pid; wait $pid; echo killed=$?; }",
             dir, TDBG_BUILDDIR, d, spec, TDBG_BUILDDIR, MLP, TDBG_BUILDDIR);
    ck_assert_msg(strstr(out, "at-stop: run.h5 step-00000002.h5 step-00000003.h5\n") && strstr(out, "verify=0") &&
                  strstr(out, "killed=137"), "%s: %s", spec, out);
    assert_recorded(d, strstr(spec, "stats") != NULL);
    snprintf(out, sizeof out, "rm -rf %s", dir);
    ck_assert(system(out) == 0);
}
END_TEST

START_TEST(test_flight_recorder_quit_and_script_end)
{
    /* `quit`, or the batch script's end, at the stop: the steps are there,
     * and every count printed is the files'. */
    const char *spec = RECORDERS[_i];
    for (int quit = 0; quit < 2; quit++) {
        char dir[] = "/tmp/tdbg-flight-XXXXXX", cmds[512], path[128];
        ck_assert(mkdtemp(dir) != NULL);
        spec_file(dir, spec, path, sizeof path);
        snprintf(cmds, sizeof cmds, "break nan;dump @%s;run;info dump%s", path, quit ? ";quit" : "");
        ts_session s = ts_tdbg("--batch", cmds, "mlp", "%s --inject nan@op=fc2/linear,step=3", MLP);
        ck_assert_msg(s.status == 1, "exit %d:\n%s", s.status, s.out);
        char d[128];
        snprintf(d, sizeof d, "%s/d", dir);
        assert_recorded(d, strstr(spec, "stats") != NULL);
        int64_t steps[8], tensors, n, t;
        dump_on_disk(d, steps, &tensors);
        counts_after(s.out, ";compress=none\n  ", &n, &t);
        ck_assert_msg(n == 2 && t == tensors, "info dump: %lld steps, %lld tensors; on disk 2, %lld", (long long)n,
                      (long long)t, (long long)tensors);
        char want[256];
        snprintf(want, sizeof want, "tdbg: dump to %s ended: ", d);
        counts_after(s.out, want, &n, &t);
        ck_assert(n == 2 && t == tensors);
        snprintf(cmds, sizeof cmds, "rm -rf %s", dir);
        ck_assert(system(cmds) == 0);
        ts_free(&s);
    }
}
END_TEST

START_TEST(test_dump_started_while_stopped)
{
    /* At a step's start (break step 2) the step is still whole: the dump
     * begins there. Inside a step (at an op of step 0) it begins at the
     * next. The message, `info dump`, `dump off` and the files agree. */
    static const struct {
        const char *stop;
        int64_t first;
    } cases[] = { { "break step 2", 2 }, { "break fc2/linear", 1 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char dir[] = "/tmp/tdbg-flight-XXXXXX", cmds[512], want[256], d[128], path[128];
        ck_assert(mkdtemp(dir) != NULL);
        snprintf(d, sizeof d, "%s/d", dir);
        spec_file(dir, "ops=fc*", path, sizeof path);
        snprintf(cmds, sizeof cmds, "%s;run;dump @%s;delete;break step 4;continue;info dump;dump off",
                 cases[c].stop, path);
        ts_session s = ts_tdbg("--batch", cmds, "mlp", "%s --steps 6", MLP);
        snprintf(want, sizeof want, "Dumping from step %lld: dir=%s;ops=fc*;", (long long)cases[c].first, d);
        ts_has(&s, want);
        int64_t steps[8], tensors, n, t;
        int n_steps = dump_on_disk(d, steps, &tensors);
        ck_assert_msg(n_steps == 4 - cases[c].first && steps[0] == cases[c].first,
                      "%s: %d steps from %lld:\n%s", cases[c].stop, n_steps, (long long)steps[0], s.out);
        ck_assert_int_gt(tensors, 0);
        counts_after(s.out, ";compress=none\n  ", &n, &t);
        ck_assert_msg(n == n_steps && t == tensors, "info dump %lld/%lld, files %d/%lld", (long long)n, (long long)t,
                      n_steps, (long long)tensors);
        snprintf(want, sizeof want, "Dump to %s stopped: ", d);
        counts_after(s.out, want, &n, &t);
        ck_assert(n == n_steps && t == tensors);
        snprintf(cmds, sizeof cmds, "rm -rf %s", dir);
        ck_assert(system(cmds) == 0);
        ts_free(&s);
    }
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

    tc = tcase_create("flight");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_flight_recorder_at_the_stop, 0, 3);
    tcase_add_loop_test(tc, test_flight_recorder_quit_and_script_end, 0, 3);
    tcase_add_test(tc, test_dump_started_while_stopped);
    suite_add_tcase(s, tc);
    return s;
}
