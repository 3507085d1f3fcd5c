/*
 * test_examples.c — runs the built example programs and reads their output:
 * convergence, determinism, fault injection, accumulation and flag errors.
 */
#include "suites.h"
#include "te_internal.h"
#include "tsession.h"
#include "testutil.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_MAX 65536
#define MAX_STEPS 256

typedef struct {
    int status;             /* as a shell sees it: 128+N for a death by signal N */
    char *out;              /* stdout and stderr together */
    float loss[MAX_STEPS], acc[MAX_STEPS];
    bool logged[MAX_STEPS];
    float final_loss, final_acc;
    bool has_final;
} run_result;

/* Runs examples/PROG with the arguments (after the command `launcher`,
 * "" for none: mpirun's) and parses its step and final lines; run_free
 * releases it. */
static run_result *vrun(const char *launcher, const char *prog, const char *fmt, va_list ap)
{
    run_result *r = calloc(1, sizeof *r);
    ck_assert(r != NULL);
    char args[1024];
    vsnprintf(args, sizeof args, fmt, ap);
    ts_session s = ts_sh("%s '%s/examples/%s' %s", launcher, TDBG_BUILDDIR, prog, args);
    r->status = s.status;
    r->out = s.out;

    for (char *line = r->out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        int step;
        float loss, acc;
        if (sscanf(line, "step=%d loss=%f acc=%f", &step, &loss, &acc) == 3 && step >= 0 &&
            step < MAX_STEPS) {
            r->loss[step] = loss;
            r->acc[step] = acc;
            r->logged[step] = true;
        } else if (sscanf(line, "final: loss=%f acc=%f", &loss, &acc) == 2) {
            r->final_loss = loss;
            r->final_acc = acc;
            r->has_final = true;
        }
    }
    return r;
}

static run_result *run(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static run_result *run(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    run_result *r = vrun("", prog, fmt, ap);
    va_end(ap);
    return r;
}

static run_result *run_under(const char *launcher, const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static run_result *run_under(const char *launcher, const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    run_result *r = vrun(launcher, prog, fmt, ap);
    va_end(ap);
    return r;
}

static void run_free(run_result *r)
{
    free(r->out);
    free(r);
}

/* Fails unless the run exited 0 and logged every step in 0..last. */
static void assert_ran(const run_result *r, const char *what, int last)
{
    ck_assert_msg(r->status == 0, "%s: exit status %d, output:\n%s", what, r->status, r->out);
    for (int s = 0; s <= last; s++)
        ck_assert_msg(r->logged[s], "%s: no line for step %d in:\n%s", what, s, r->out);
    ck_assert_msg(r->has_final, "%s: no final line in:\n%s", what, r->out);
}

/* The step and final lines of out, in order: what determinism compares. */
static void result_lines(const run_result *r, char *buf, size_t n)
{
    buf[0] = '\0';
    size_t used = 0;
    for (const char *line = r->out; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line + 1) : strlen(line);
        if ((strncmp(line, "step=", 5) == 0 || strncmp(line, "final:", 6) == 0) && used + len < n) {
            memcpy(buf + used, line, len);
            used += len;
            buf[used] = '\0';
        }
        line += len;
    }
}

/* A small MLP and the Adam rate that suits it; tests add --threads. */
static const char *const MLP_SMALL = "--hidden 64,64 --batch 64 --lr 0.001";

/* ---- convergence ------------------------------------------------------------ */

START_TEST(test_mlp_converges)
{
    run_result *r = run("mlp", "%s --steps 100 --log-every 10 --threads 1", MLP_SMALL);
    assert_ran(r, "mlp", 0);
    ck_assert_msg(r->logged[99], "no line for the last step:\n%s", r->out);
    /* Chance is 0.1 and loss ln 10 = 2.30; the best any model can do on
     * these blobs is about 0.95. */
    ck_assert_msg(r->final_acc >= 0.75f, "held-out accuracy %.4f < 0.75 after 100 steps:\n%s",
                  r->final_acc, r->out);
    ck_assert_msg(r->loss[99] < 0.4f * r->loss[0], "loss %.4f at step 99, %.4f at step 0",
                  r->loss[99], r->loss[0]);
    run_free(r);
}
END_TEST

START_TEST(test_mlp_spirals)
{
    /* 2-D input, 3 classes, no straight boundary: needs the hidden layers. */
    run_result *r = run("mlp", "--data spirals --hidden 64,64 --batch 64 --lr 0.01 --steps 100 "
                        "--log-every 50 --threads 1");
    assert_ran(r, "mlp spirals", 0);
    ck_assert_msg(strstr(r->out, "mlp: 2-64-64-3,"), "header names the 2-D input and 3 classes:\n%s",
                  r->out);
    ck_assert_msg(r->final_acc >= 0.90f, "spirals held-out accuracy %.4f < 0.90:\n%s", r->final_acc,
                  r->out);
    run_free(r);
}
END_TEST

START_TEST(test_cnn_overfits)
{
    /* The real architecture, narrower, on 32 training samples: fitting them
     * within 50 steps takes correct gradients through every layer (the full
     * task needs about 500 steps of the full width: see docs/benchmarks.md). */
    run_result *r = run("cnn", "--channels 8,16,32 --batch 32 --train-size 32 --steps 50 --log-every 10 "
                        "--threads 1");
    assert_ran(r, "cnn", 0);
    ck_assert_msg(strstr(r->out, "cnn: channels 3-8-16-32,"), "header:\n%s", r->out);
    ck_assert_msg(r->loss[49] < 0.35f * r->loss[0] && r->acc[49] >= 0.8f,
                  "cnn did not fit 32 samples: loss %.4f at step 49 (%.4f at 0), accuracy %.4f:\n%s",
                  r->loss[49], r->loss[0], r->acc[49], r->out);
    ck_assert_msg(isfinite(r->final_loss), "eval-mode loss %g", r->final_loss);
    run_free(r);
}
END_TEST

/* ---- determinism ------------------------------------------------------------ */

START_TEST(test_same_seed_same_output)
{
    static char a[OUT_MAX], b[OUT_MAX], c[OUT_MAX];
    run_result *r1 = run("mlp", "%s --steps 12 --log-every 1 --threads 2 --seed 7", MLP_SMALL);
    run_result *r2 = run("mlp", "%s --steps 12 --log-every 1 --threads 2 --seed 7", MLP_SMALL);
    run_result *r3 = run("mlp", "%s --steps 12 --log-every 1 --threads 2 --seed 8", MLP_SMALL);
    assert_ran(r1, "seed 7", 11);
    assert_ran(r3, "seed 8", 11);
    result_lines(r1, a, sizeof a);
    result_lines(r2, b, sizeof b);
    result_lines(r3, c, sizeof c);
    ck_assert_msg(strcmp(a, b) == 0, "same seed, different output:\n%s\n---\n%s", a, b);
    ck_assert_msg(strcmp(a, c) != 0, "seeds 7 and 8 gave the same output:\n%s", a);
    run_free(r1);
    run_free(r2);
    run_free(r3);
}
END_TEST

START_TEST(test_workers_same_output)
{
    static char a[OUT_MAX], b[OUT_MAX], c[OUT_MAX];
    run_result *r0 = run("mlp", "%s --steps 12 --log-every 1 --threads 2 --workers 0", MLP_SMALL);
    run_result *r1 = run("mlp", "%s --steps 12 --log-every 1 --threads 2 --workers 1", MLP_SMALL);
    run_result *r3 = run("mlp", "%s --steps 12 --log-every 1 --threads 2 --workers 3", MLP_SMALL);
    assert_ran(r0, "workers 0", 11);
    result_lines(r0, a, sizeof a);
    result_lines(r1, b, sizeof b);
    result_lines(r3, c, sizeof c);
    ck_assert_msg(strcmp(a, b) == 0, "workers 0 and 1 differ:\n%s\n---\n%s", a, b);
    ck_assert_msg(strcmp(a, c) == 0, "workers 0 and 3 differ:\n%s\n---\n%s", a, c);
    run_free(r0);
    run_free(r1);
    run_free(r3);
}
END_TEST

/* ---- fault injection ---------------------------------------------------------- */

START_TEST(test_inject_nan)
{
    run_result *clean = run("mlp", "%s --steps 6 --log-every 1 --threads 2", MLP_SMALL);
    run_result *r = run("mlp", "%s --steps 6 --log-every 1 --threads 2 --inject nan@op=fc2/linear,step=3",
                        MLP_SMALL);
    assert_ran(clean, "clean", 5);
    assert_ran(r, "nan@fc2/linear", 5);
    for (int s = 0; s < 3; s++)
        ck_assert_msg(r->loss[s] == clean->loss[s], "step %d before the injection: loss %g, clean %g", s,
                      r->loss[s], clean->loss[s]);
    ck_assert_msg(isfinite(r->loss[2]), "loss at step 2 is %g", r->loss[2]);
    ck_assert_msg(isnan(r->loss[3]), "loss at step 3 is %g, want nan:\n%s", r->loss[3], r->out);
    /* The NaN reached the weights through backward and the update. */
    ck_assert_msg(isnan(r->loss[5]), "loss at step 5 is %g, want nan", r->loss[5]);
    run_free(clean);
    run_free(r);
}
END_TEST

/* Loop: f16, bf16. Every AMP level trains the MLP to within one point of
 * O0's held-out accuracy (2048 samples: 20 of them), above or below, on
 * the spirals (2-64-64-3) and on the blobs (784-64-64-10); O3 too, on
 * these short runs (docs/amp.md, "What each level costs and keeps"). */
START_TEST(test_amp_levels)
{
    const char *dt = _i ? "bf16" : "f16";
    static const char *const data[2] = { "--data spirals --lr 0.01", "--data blobs --lr 0.001" };
    for (int d = 0; d < 2; d++) {
        run_result *ref = run("mlp", "%s --hidden 64,64 --batch 64 --steps 100 --log-every 50 --threads 1", data[d]);
        assert_ran(ref, "O0", 0);
        ck_assert_msg(ref->final_acc >= 0.9f, "O0 %s: held-out accuracy %.4f < 0.9: nothing to compare with:\n%s",
                      data[d], ref->final_acc, ref->out);
        for (int level = 1; level <= 3; level++) {
            run_result *r = run("mlp", "%s --hidden 64,64 --batch 64 --steps 100 --log-every 50 --threads 1 "
                                "--amp O%d --amp-dtype %s", data[d], level, dt);
            assert_ran(r, "amp level", 0);
            ck_assert_msg(fabsf(r->final_acc - ref->final_acc) <= 0.01f,
                          "O%d %s %s: held-out accuracy %.4f, O0 %.4f:\n%s", level, dt, data[d], r->final_acc,
                          ref->final_acc, r->out);
            /* the level ran: O2 has its scaler, and no run reproduces O0 */
            ck_assert_msg((strstr(r->out, " scale=65536") != NULL) == (level == 2), "O%d %s: scale lines:\n%s",
                          level, dt, r->out);
            ck_assert_msg(r->final_loss != ref->final_loss, "O%d %s %s: the same loss as O0 (%.6f): nothing rounded",
                          level, dt, data[d], r->final_loss);
            run_free(r);
        }
        run_free(ref);
    }
}
END_TEST

/* O1 and O2 in f16 and bf16 fit the CNN's 32 samples (test_cnn_overfits)
 * as O0 does: at step 49 the loss within 2% of O0's and the accuracy on
 * the 32 within one sample. The held-out comparison takes minutes a level
 * (600 steps at least, the f16 kernels emulated): measured in docs/amp.md,
 * "What each level costs and keeps". */
START_TEST(test_cnn_amp_levels)
{
    static const char *const args = "--channels 8,16,32 --batch 32 --train-size 32 --steps 50 --log-every 49 "
                                    "--threads 1";
    run_result *ref = run("cnn", "%s", args);
    assert_ran(ref, "O0", 0);
    ck_assert_msg(ref->logged[49] && ref->acc[49] >= 0.8f, "O0 did not fit its 32 samples:\n%s", ref->out);
    static const char *const dts[2] = { "f16", "bf16" };
    for (int d = 0; d < 2; d++)
        for (int level = 1; level <= 2; level++) {
            run_result *r = run("cnn", "%s --amp O%d --amp-dtype %s", args, level, dts[d]);
            assert_ran(r, "cnn amp", 0);
            ck_assert_msg(r->logged[49] && fabsf(r->loss[49] - ref->loss[49]) <= 0.02f * ref->loss[49] &&
                              fabsf(r->acc[49] - ref->acc[49]) <= 1.0f / 32 + 1e-3f, /* printed to 4 places */
                          "O%d %s: step 49 loss %.6f acc %.4f, O0 %.6f %.4f:\n%s", level, dts[d], r->loss[49],
                          r->acc[49], ref->loss[49], ref->acc[49], r->out);
            ck_assert_msg(r->loss[49] != ref->loss[49], "O%d %s: O0's loss exactly: nothing was rounded", level,
                          dts[d]);
            run_free(r);
        }
    run_free(ref);
}
END_TEST

/* The step line's scale and skip at O2 with an inf gradient at step 3:
 * 3 clean steps double 65536 (--scale-window 3), step 3 is skipped and
 * halves it, the weights stay finite; graph mode prints the same lines. */
START_TEST(test_loss_scale_skip)
{
    static const char *const want[8] = { "scale=65536\n", "scale=65536\n", "scale=65536\n",
                                         "scale=131072 skipped\n", "scale=65536\n", "scale=65536\n",
                                         "scale=65536\n", "scale=131072\n" };
    char *out[2];
    for (int g = 0; g < 2; g++) {
        run_result *r = run("mlp", "%s --steps 8 --log-every 1 --threads 2 --amp O2 --scale-window 3 --mode %s "
                            "--inject inf@op=grad/fc2/linear,step=3", MLP_SMALL, g ? "graph" : "eager");
        assert_ran(r, "O2 with a fault", 7);
        for (int s = 0; s < 8; s++) {
            char head[32];
            snprintf(head, sizeof head, "step=%d loss=", s);
            const char *line = strstr(r->out, head);
            ck_assert_ptr_nonnull(line);
            const char *sc = strstr(line, " scale=");
            ck_assert_msg(sc && strncmp(sc + 1, want[s], strlen(want[s])) == 0, "step %d: %.60s, want %s", s,
                          line, want[s]);
            ck_assert_msg(isfinite(r->loss[s]), "step %d: loss %g", s, r->loss[s]);
        }
        out[g] = strdup(strstr(r->out, "step=0"));
        char *end = strstr(out[g], "final:"); /* the evaluation may differ within graph mode's tolerance */
        if (end)
            *end = '\0';
        run_free(r);
    }
    ck_assert_str_eq(out[0], out[1]);
    free(out[0]);
    free(out[1]);
}
END_TEST

START_TEST(test_inject_scale)
{
    run_result *clean = run("mlp", "%s --steps 6 --log-every 1 --threads 2", MLP_SMALL);
    run_result *r = run("mlp", "%s --steps 6 --log-every 1 --threads 2 "
                        "--inject scale@op=fc1/linear,step=2,value=10", MLP_SMALL);
    assert_ran(clean, "clean", 5);
    assert_ran(r, "scale@fc1/linear", 5);
    for (int s = 0; s < 2; s++)
        ck_assert_msg(r->loss[s] == clean->loss[s], "step %d before the injection: loss %g, clean %g", s,
                      r->loss[s], clean->loss[s]);
    for (int s = 2; s < 6; s++)
        ck_assert_msg(r->loss[s] != clean->loss[s], "step %d: loss %g unchanged by the injection", s,
                      r->loss[s]);
    ck_assert_msg(isfinite(r->loss[2]) && r->loss[2] > clean->loss[2],
                  "step 2: activations x10 should raise the loss: %g vs clean %g", r->loss[2],
                  clean->loss[2]);
    run_free(clean);
    run_free(r);
}
END_TEST

START_TEST(test_inject_bad_spec)
{
    run_result *r = run("mlp", "--inject bogus@op=fc1/linear,step=1");
    ck_assert_msg(r->status == 2, "unknown kind: exit %d", r->status);
    ck_assert_msg(strstr(r->out, "'bogus'") && strstr(r->out, "unknown kind"), "message:\n%s", r->out);
    run_free(r);
    r = run("mlp", "--inject nan@op=fc1/linear,step=x1");
    ck_assert_msg(r->status == 2, "bad step: exit %d", r->status);
    ck_assert_msg(strstr(r->out, "'x1'"), "message names the bad step:\n%s", r->out);
    ck_assert_msg(!strstr(r->out, "step=0 "), "training ran despite the bad spec:\n%s", r->out);
    run_free(r);
}
END_TEST

/* ---- flags -------------------------------------------------------------------- */

/* Every flag error names the flag and the value and says what is valid. */
START_TEST(test_bad_flags)
{
    static const struct {
        const char *args, *want;
    } cases[] = {
        { "--steps abc", "mlp: --steps 'abc': expected a whole number >= 1, e.g. 100\n" },
        { "--steps 0", "mlp: --steps '0': expected a whole number >= 1, e.g. 100\n" },
        { "--log-every -1", "mlp: --log-every '-1': expected a whole number >= 1, e.g. 100\n" },
        { "--batch 0", "mlp: --batch '0': expected a whole number in 1..1048576, e.g. 128\n" },
        { "--accum 33", "mlp: --accum '33': expected a whole number in 1..32 (1: no accumulation)\n" },
        { "--threads 257", "mlp: --threads '257': expected a whole number in 0..256 (0: all cores)\n" },
        { "--workers x", "mlp: --workers 'x': expected a whole number in 0..64 (0: load in the training thread)\n" },
        { "--train-size 0", "mlp: --train-size '0': expected a whole number in 1..1073741824 (2^30)\n" },
        { "--seed 0", "mlp: --seed '0': expected a whole number >= 1, e.g. 1\n" },
        { "--lr=-1", "mlp: --lr '-1': expected a finite number >= 0, e.g. 3e-4\n" },
        { "--momentum inf", "mlp: --momentum 'inf': expected a finite number >= 0, e.g. 0.9\n" },
        { "--weight-decay x", "mlp: --weight-decay 'x': expected a finite number >= 0, e.g. 0.01\n" },
        { "--clip -2", "mlp: --clip '-2': expected a finite number >= 0 (0: off), e.g. 1\n" },
        { "--optim rmsprop", "mlp: --optim 'rmsprop': unknown optimizer; expected sgd, adam or adamw\n" },
        { "--mode lazy", "mlp: --mode 'lazy': unknown mode; expected eager or graph\n" },
        { "--save-graph=", "mlp: --save-graph '': expected a folder name, e.g. ir\n" },
        { "--dump=", "mlp: --dump '': expected a dump spec, dir=D;ops=GLOB,...;steps=0|5-8;io=both;"
                     "what=full|stats, or @FILE (docs/dump-format.md)\n" },
        { "--data moons", "mlp: --data 'moons': unknown dataset; expected blobs or spirals, or a CSV file (a path with '/' or '.')\n" },
        { "--hidden 0", "mlp: --hidden '0': expected up to 8 widths, comma separated, each a whole number in "
                        "1..65536, e.g. 1024,1024\n" },
        { "--hidden 64,,3", "mlp: --hidden '64,,3': expected up to 8 widths" },
        { "--hidden 1,2,3,4,5,6,7,8,9", "mlp: --hidden '1,2,3,4,5,6,7,8,9': expected up to 8 widths" },
        { "--nope 3", "mlp: --nope is not a flag; the flags are listed below\n" },
        { "--batch", "mlp: --batch needs a value\n" },
        { "--time=1", "mlp: --time takes no value\n" },
        { "--backend nope", "mlp: --backend 'nope': unknown backend; expected cpu or cuda\n" },
        { "--profile=", "mlp: --profile '': expected a profile spec, file=P;steps=A-B;ops=GLOB;keep=K;"
                        "when=always|break (docs/profiler.md)\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result *r = run("mlp", "%s", cases[i].args);
        ck_assert_msg(r->status == 2, "'%s': exit %d, want 2", cases[i].args, r->status);
        ck_assert_msg(strstr(r->out, cases[i].want), "'%s': no '%s' in:\n%s", cases[i].args,
                      cases[i].want, r->out);
        ck_assert_msg(strstr(r->out, "usage: mlp"), "'%s': no usage in:\n%s", cases[i].args, r->out);
        run_free(r);
    }
    char many[512] = "";
    for (int k = 0; k < 17; k++) /* one more than the 16 allowed */
        snprintf(many + strlen(many), sizeof many - strlen(many), " --inject nan@op=x,step=%d", k);
    run_result *r = run("mlp", "%s", many);
    ck_assert_msg(r->status == 2 && strstr(r->out, "mlp: --inject 'nan@op=x,step=16': one too many: at most 16 "
                                           "injections\n"), "17 injections: exit %d:\n%s", r->status, r->out);
    run_free(r);
    r = run("cnn", "--channels 8,16");
    ck_assert_msg(r->status == 2 && strstr(r->out, "cnn: --channels '8,16': expected three widths, comma separated, "
                                           "each a whole number in 1..4096, e.g. 32,64,128\n") &&
                  strstr(r->out, "usage: cnn"), "cnn --channels 8,16: exit %d:\n%s", r->status, r->out);
    run_free(r);
}
END_TEST

START_TEST(test_help)
{
    run_result *r = run("cnn", "--help");
    ck_assert_msg(r->status == 0, "--help: exit %d", r->status);
    ck_assert_msg(strstr(r->out, "usage: cnn") && strstr(r->out, "--channels") &&
                  strstr(r->out, "--inject") && strstr(r->out, "(64)"),
                  "help lacks usage, --channels, --inject or the batch default:\n%s", r->out);
    run_free(r);
}
END_TEST

/* ---- graph mode -------------------------------------------------------------- */

/* Fails unless every logged step and the final line of g match e within
 * rtol relative. */
static void assert_same_run(const run_result *e, const run_result *g, int last, float rtol, const char *what)
{
    assert_ran(e, what, last);
    assert_ran(g, what, last);
    for (int s = 0; s <= last; s++)
        ck_assert_msg(fabsf(e->loss[s] - g->loss[s]) <= rtol * fabsf(e->loss[s]) ||
                      (isnan(e->loss[s]) && isnan(g->loss[s])),
                      "%s: step %d loss %.6f eager, %.6f graph", what, s, e->loss[s], g->loss[s]);
    ck_assert_msg(fabsf(e->final_loss - g->final_loss) <= rtol * fabsf(e->final_loss) ||
                  (isnan(e->final_loss) && isnan(g->final_loss)),
                  "%s: final loss %.6f eager, %.6f graph", what, e->final_loss, g->final_loss);
}

START_TEST(test_graph_parity)
{
    /* 200 steps, the same seed: graph mode's losses are eager mode's. The
     * held-out evaluation runs a BN-folded eval graph in the CNN; with 16
     * and 32 channels, its convs' outputs are blocked (pass_layout.c) where
     * oneDNN's convolutions are. */
    static const struct {
        const char *prog, *args;
    } runs[] = {
        { "mlp", "--hidden 64,64 --batch 64 --lr 0.001" },
        { "cnn", "--channels 4,8,8 --batch 16 --lr 0.05 --momentum 0.9" },
        { "cnn", "--channels 16,16,32 --batch 8 --lr 0.05 --momentum 0.9" },
    };
    for (int i = 0; i < 3; i++) {
        run_result *e = run(runs[i].prog, "%s --steps 200 --log-every 1 --threads 2", runs[i].args);
        run_result *g = run(runs[i].prog, "%s --steps 200 --log-every 1 --threads 2 --mode graph",
                            runs[i].args);
        assert_same_run(e, g, 199, 1e-5f, runs[i].prog);
        run_free(e);
        run_free(g);
    }
}
END_TEST

START_TEST(test_graph_inject_accum_clip)
{
    /* An injection inside a fused kernel (fc1/relu ends linear+relu), and a
     * step with two micro-batches, Adam and clipping: the same in both modes. */
    const char *cases[] = {
        "--inject nan@op=fc1/relu,step=3 --steps 6",
        "--inject scale@op=fc2/linear,step=2,value=100 --steps 6",
        "--accum 2 --optim adam --clip 0.5 --steps 20",
    };
    for (int i = 0; i < 3; i++) {
        run_result *e = run("mlp", "%s --log-every 1 --threads 2 %s", MLP_SMALL, cases[i]);
        run_result *g = run("mlp", "%s --log-every 1 --threads 2 --mode graph %s", MLP_SMALL, cases[i]);
        char a[16384], b[16384];
        result_lines(e, a, sizeof a);
        result_lines(g, b, sizeof b);
        ck_assert_msg(e->status == 0 && g->status == 0, "%s: exit %d and %d:\n%s\n%s", cases[i], e->status,
                      g->status, e->out, g->out);
        ck_assert_msg(strcmp(a, b) == 0, "%s: eager and graph differ:\n%s\n---\n%s", cases[i], a, b);
        run_free(e);
        run_free(g);
    }
}
END_TEST

START_TEST(test_graph_flags)
{
    char dir[] = "/tmp/tdbg-save-graph-XXXXXX", cmd[256];
    ck_assert(mkdtemp(dir) != NULL);
    run_result *r = run("mlp", "%s --steps 2 --log-every 1 --mode graph --save-graph %s --time", MLP_SMALL, dir);
    assert_ran(r, "--save-graph", 1);
    ck_assert_msg(strstr(r->out, "graph: ops=12 kernels=12 fused=2 arena_bytes="), "no graph line:\n%s", r->out);
    snprintf(cmd, sizeof cmd, "test -s %s/train-v0-13-memory.txt && test -s %s/eval-v0-00-trace.txt", dir, dir);
    ck_assert_msg(system(cmd) == 0, "no IR files in %s", dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert(system(cmd) == 0);
    run_free(r);
    /* the CNN's convs keep their outputs blocked where oneDNN's convolutions are */
    const te_backend *cpu = te_backends[TE_DEV_CPU];
    const bool blocked = cpu->graph.blocked16 && cpu->graph.blocked16();
    r = run("cnn", "--steps 1 --batch 4 --mode graph --save-graph %s", dir);
    assert_ran(r, "cnn --save-graph", 0);
    snprintf(cmd, sizeof cmd, "grep -q 'conv2/conv:out0 .* nChw16c' %s/train-v0-13-memory.txt", dir);
    ck_assert_msg((system(cmd) == 0) == blocked, "nChw16c %s in %s/train-v0-13-memory.txt",
                  blocked ? "missing" : "unexpected", dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert(system(cmd) == 0);
    run_free(r);
    r = run("mlp", "--mode jit");
    ck_assert_msg(r->status == 2 && strstr(r->out, "mlp: --mode 'jit': unknown mode; expected eager or graph\n"),
                  "--mode jit: exit %d:\n%s", r->status, r->out);
    run_free(r);
}
END_TEST

/* --backend cuda without a usable device: exit 2 and the reason, before
 * any training; --backend cpu trains as before. */
START_TEST(test_backend_flag)
{
    run_result *r = run("mlp", "--backend cuda --steps 2");
    ck_assert_msg(r->status == 2 && strstr(r->out, "mlp: --backend cuda: te_backend_use: cuda: ") &&
                  tu_cuda_reason(r->out) != NULL, "--backend cuda: exit %d:\n%s", r->status, r->out);
    ck_assert_msg(!strstr(r->out, "step=") && !strstr(r->out, "usage:"), "--backend cuda ran on:\n%s", r->out);
    run_free(r);
    r = run("mlp", "%s --steps 2 --log-every 1 --backend cpu", MLP_SMALL);
    assert_ran(r, "--backend cpu", 1);
    run_free(r);
}
END_TEST

/* ---- optimizer options ---------------------------------------------------------- */

START_TEST(test_accum_matches_big_batch)
{
    /* Two micro-batches of 32 are the same 64 samples as one batch of 64:
     * the summed, halved gradients match up to rounding. */
    const char *common = "--hidden 64,64 --optim sgd --lr 0.01 --threads 2 --steps 8 --log-every 1";
    run_result *big = run("mlp", "%s --batch 64", common);
    run_result *acc = run("mlp", "%s --batch 32 --accum 2", common);
    assert_ran(big, "batch 64", 7);
    assert_ran(acc, "batch 32 x 2", 7);
    for (int s = 0; s < 8; s++) {
        ck_assert_msg(fabsf(big->loss[s] - acc->loss[s]) <= 1e-3f * fabsf(big->loss[s]),
                      "step %d: loss %.6f with batch 64, %.6f with 32 x 2", s, big->loss[s], acc->loss[s]);
        /* a near-tie of two logits may round the other way: one sample */
        ck_assert_msg(fabsf(big->acc[s] - acc->acc[s]) <= 1.5f / 64, "step %d: acc %.4f vs %.4f", s,
                      big->acc[s], acc->acc[s]);
    }
    run_free(big);
    run_free(acc);
}
END_TEST

START_TEST(test_accum_converges)
{
    run_result *r = run("mlp", "--hidden 64,64 --lr 0.001 --threads 1 --batch 32 --accum 2 --steps 100 "
                        "--log-every 99");
    assert_ran(r, "accum 2", 0);
    ck_assert_msg(r->final_acc >= 0.75f, "--accum 2: held-out accuracy %.4f < 0.75:\n%s", r->final_acc,
                  r->out);
    run_free(r);
}
END_TEST

START_TEST(test_optimizers_and_clip)
{
    /* SGD and AdamW learn; a tiny clip norm all but stops SGD (not Adam,
     * whose steps do not depend on the gradient's scale). */
    static const char *const optims[] = { "sgd --lr 0.01", "adamw --lr 0.001 --weight-decay 0.01" };
    for (int i = 0; i < 2; i++) {
        run_result *r = run("mlp", "--hidden 64,64 --batch 64 --threads 1 --steps 100 --log-every 99 "
                            "--optim %s", optims[i]);
        assert_ran(r, optims[i], 0);
        ck_assert_msg(r->final_acc >= 0.75f, "--optim %s: held-out accuracy %.4f", optims[i], r->final_acc);
        run_free(r);
    }
    /* Clipped to norm 1e-6, SGD moves the weights by 1e-8: the losses are
     * those of a run that does not learn (lr 0), while without clipping the
     * same steps lower the loss. */
    const char *sgd = "--hidden 64,64 --batch 64 --threads 1 --steps 10 --log-every 1 --optim sgd --momentum 0";
    run_result *clip = run("mlp", "%s --lr 0.01 --clip 1e-6", sgd);
    run_result *frozen = run("mlp", "%s --lr 0", sgd);
    run_result *free_run = run("mlp", "%s --lr 0.01", sgd);
    assert_ran(clip, "--clip 1e-6", 9);
    assert_ran(frozen, "--lr 0", 9);
    assert_ran(free_run, "no clip", 9);
    for (int s = 0; s < 10; s++)
        ck_assert_msg(fabsf(clip->loss[s] - frozen->loss[s]) <= 1e-4f,
                      "step %d: loss %.6f clipped, %.6f with lr 0", s, clip->loss[s], frozen->loss[s]);
    ck_assert_msg(free_run->loss[9] < frozen->loss[9] - 0.05f, "without clipping: loss %.6f at step 9, "
                  "%.6f with lr 0", free_run->loss[9], frozen->loss[9]);
    run_free(clip);
    run_free(frozen);
    run_free(free_run);
}
END_TEST

START_TEST(test_time_line)
{
    run_result *r = run("mlp", "%s --steps 8 --log-every 8 --threads 1 --time", MLP_SMALL);
    assert_ran(r, "--time", 0);
    const char *t = strstr(r->out, "time: ms_per_step ");
    double med, lo, hi, total, cpu;
    int steps;
    ck_assert_msg(t && sscanf(t, "time: ms_per_step median=%lf min=%lf max=%lf steps=%d total_ms=%lf cpu_ms=%lf",
                              &med, &lo, &hi, &steps, &total, &cpu) == 6, "no time line in:\n%s", r->out);
    ck_assert_msg(cpu > 0, "cpu_ms=%g", cpu); /* the steps' CPU time: any value above 0 (threads may spin) */
    ck_assert_msg(lo > 0 && lo <= med && med <= hi, "min %g median %g max %g", lo, med, hi);
    ck_assert_msg(steps == 5, "timed %d steps, want 8 minus 3 of warm-up", steps);
    /* the five steps' sum, printed to the microsecond */
    ck_assert_msg(total >= 4 * lo + hi - 0.005 && total <= lo + 4 * hi + 0.005, "total %g, min %g max %g",
                  total, lo, hi);
    run_free(r);
}
END_TEST

/* ---- --profile ------------------------------------------------------------------ */

/* The step numbers of a trace's "step" events in steps[] (at most max; the
 * count is returned), its otherData.steps in range[2]; -1 when the file is
 * not a trace. */
static int trace_steps(const char *file, int64_t *steps, int max, int64_t range[2], int *ops)
{
    json_error_t err;
    json_t *root = json_load_file(file, 0, &err);
    ck_assert_msg(root != NULL, "%s: not JSON: %s (line %d)", file, err.text, err.line);
    json_t *events = json_object_get(root, "traceEvents");
    json_t *r = json_object_get(json_object_get(root, "otherData"), "steps");
    ck_assert_msg(json_is_array(events) && json_array_size(r) == 2, "%s: no traceEvents or otherData.steps", file);
    range[0] = json_integer_value(json_array_get(r, 0));
    range[1] = json_integer_value(json_array_get(r, 1));
    int n = 0;
    *ops = 0;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (cat && strcmp(cat, "op") == 0)
            ++*ops;
        if (!cat || strcmp(cat, "step") != 0)
            continue;
        json_t *step = json_object_get(json_object_get(e, "args"), "step");
        ck_assert_msg(json_is_integer(step), "%s: event %zu: a step without args.step", file, i);
        ck_assert_msg(n < max, "%s: more than %d steps", file, max);
        steps[n++] = json_integer_value(step);
    }
    json_decref(root);
    return n;
}

START_TEST(test_profile_flag)
{
    char dir[] = "/tmp/tdbg-profile-XXXXXX", file[64], want[192], cmd[96];
    ck_assert(mkdtemp(dir) != NULL);
    snprintf(file, sizeof file, "%s/mlp.json", dir);
    run_result *r = run("mlp", "%s --steps 4 --log-every 1 --threads 1 --profile 'file=%s;steps=1-2'", MLP_SMALL,
                        file);
    assert_ran(r, "--profile", 3);
    snprintf(want, sizeof want, "profile: wrote %s; read it with: tdbg-prof %s\n", file, file);
    ck_assert_msg(strstr(r->out, want), "no '%s' in:\n%s", want, r->out);
    int64_t steps[8], range[2];
    int ops;
    const int n = trace_steps(file, steps, 8, range, &ops);
    ck_assert_msg(n == 2 && steps[0] == 1 && steps[1] == 2, "%d step events, the first %lld: want steps 1 and 2", n,
                  n ? (long long)steps[0] : -1LL);
    ck_assert_msg(range[0] == 1 && range[1] == 2, "otherData.steps [%lld,%lld], want [1,2]", (long long)range[0],
                  (long long)range[1]);
    /* two steps of a 3-layer MLP: at least its forward's linears and relus and their backward */
    ck_assert_msg(ops >= 2 * 10, "%d op events for two steps", ops);
    run_free(r);

    /* the environment does the same; a bad spec there names TDBG_PROFILE */
    ts_session env = ts_sh("TDBG_PROFILE='steps=x' '%s/examples/mlp' --steps 2", TDBG_BUILDDIR);
    ts_status_is(&env, 2);
    ts_has(&env, "mlp: TDBG_PROFILE 'steps=x': profile spec: steps=x: expected N, A-B or A- (steps count from 0)\n");
    ts_free(&env);
    r = run("mlp", "--profile 'file=%s;bogus=1'", file);
    ck_assert_msg(r->status == 2 && strstr(r->out, "mlp: --profile 'file=/tmp/") &&
                  strstr(r->out, ";bogus=1': profile spec: unknown key 'bogus' (keys: file, steps, ops, keep, "
                                 "when)\n"),
                  "bogus key: exit %d:\n%s", r->status, r->out);
    ck_assert_msg(!strstr(r->out, "step=0 "), "training ran despite the bad spec:\n%s", r->out);
    run_free(r);
    r = run("mlp", "--profile 'keep=0'");
    ck_assert_msg(r->status == 2 && strstr(r->out, "mlp: --profile 'keep=0': profile spec: keep=0: expected a step "
                                           "count from 1 to 1000\n"), "keep=0: exit %d:\n%s", r->status, r->out);
    run_free(r);

    /* a range the run never reaches writes nothing, and says so */
    snprintf(file, sizeof file, "%s/never.json", dir);
    r = run("mlp", "%s --steps 2 --log-every 1 --threads 1 --profile 'file=%s;steps=5-6'", MLP_SMALL, file);
    assert_ran(r, "--profile steps=5-6", 1);
    snprintf(want, sizeof want, "profile: no step of the steps= range ran: %s not written\n", file);
    ck_assert_msg(strstr(r->out, want), "no '%s' in:\n%s", want, r->out);
    snprintf(cmd, sizeof cmd, "test ! -e %s", file);
    ck_assert_msg(system(cmd) == 0, "%s written", file);
    run_free(r);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert(system(cmd) == 0);
}
END_TEST

/* Where a step's time goes, as the issue asks of the trace: the phases
 * tile the step (within 10% of its wall time) and each phase's ops cover
 * it (within 10% of its time outside hooks and loader waits), in both
 * modes, on the MLP at its own size. The first step is left out: it
 * allocates the optimizer's state outside any op. */
static void phases_and_ops_cover(const char *file)
{
    json_error_t err;
    json_t *root = json_load_file(file, 0, &err);
    ck_assert_msg(root != NULL, "%s: %s", file, err.text);
    json_t *events = json_object_get(root, "traceEvents"), *e, *f;
    size_t i, j;
    int phases = 0;
    json_array_foreach(events, i, e) {
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (!cat || strcmp(json_string_value(json_object_get(e, "ph")), "X"))
            continue;
        json_t *args = json_object_get(e, "args");
        const json_int_t step = json_integer_value(json_object_get(args, "step"));
        const double ts = json_number_value(json_object_get(e, "ts")), dur = json_number_value(json_object_get(e, "dur"));
        const json_int_t tid = json_integer_value(json_object_get(e, "tid"));
        if (step == 0)
            continue;
        const bool is_step = strcmp(cat, "step") == 0;
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!is_step && (strcmp(cat, "phase") || !strcmp(name, "data")))
            continue;
        double sum = 0, own = dur - (json_number_value(json_object_get(args, "hooks_ns")) +
                                     json_number_value(json_object_get(args, "data_ns"))) / 1e3;
        json_array_foreach(events, j, f) {
            const char *c = json_string_value(json_object_get(f, "cat"));
            const double t0 = json_number_value(json_object_get(f, "ts")), d = json_number_value(json_object_get(f, "dur"));
            if (!c || strcmp(c, is_step ? "phase" : "op") || json_integer_value(json_object_get(f, "tid")) != tid ||
                t0 < ts - 1e-3 || t0 + d > ts + dur + 1e-3)
                continue;
            sum += d;
        }
        if (is_step)
            ck_assert_msg(sum >= 0.9 * dur && sum <= dur + 1e-3, "%s: step %lld: phases %.1f of %.1f us", file,
                          (long long)step, sum, dur);
        else {
            phases++;
            ck_assert_msg(sum >= 0.9 * own && sum <= own + 1e-3, "%s: step %lld %s: ops %.1f of %.1f us", file,
                          (long long)step, name, sum, own);
        }
    }
    ck_assert_int_eq(phases, 3 * 3);
    json_decref(root);
}

START_TEST(test_profile_attribution)
{
    char dir[] = "/tmp/tdbg-profile-XXXXXX", file[64], cmd[96];
    ck_assert(mkdtemp(dir) != NULL);
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        snprintf(file, sizeof file, "%s/%s.json", dir, modes[m]);
        run_result *r = run("mlp", "--steps 4 --log-every 1 --threads 1 --mode %s --profile 'file=%s'", modes[m], file);
        assert_ran(r, "--profile", 3);
        run_free(r);
        phases_and_ops_cover(file);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert(system(cmd) == 0);
}
END_TEST

/* ---- data parallel (--dp under mpirun) ----------------------------------------- */

/* Every logged loss of b within rtol of a's, relative, and the final line's too. */
static void assert_losses_near(const run_result *a, const run_result *b, int last, float rtol, const char *what)
{
    for (int s = 0; s <= last; s++)
        ck_assert_msg(fabsf(a->loss[s] - b->loss[s]) <= rtol * fabsf(a->loss[s]),
                      "%s: step %d: loss %.6f in one process, %.6f data parallel (rtol %g)", what, s, a->loss[s],
                      b->loss[s], (double)rtol);
    ck_assert_msg(fabsf(a->final_loss - b->final_loss) <= rtol * fabsf(a->final_loss),
                  "%s: final loss %.6f in one process, %.6f data parallel", what, a->final_loss, b->final_loss);
}

/* 2 and 4 ranks, each with its share of the global batch, train as one
 * process with the whole batch does, within 1e-5 over 100 steps; only
 * rank 0 prints. */
START_TEST(test_dp_matches_single)
{
    const char *common = "--hidden 64,64 --batch 32 --steps 100 --log-every 1 --threads 1";
    run_result *one = run("mlp", "%s", common);
    assert_ran(one, "one process", 99);
    for (int ranks = 2; ranks <= 4; ranks += 2) {
        char mpirun[256], what[32];
        if (!tu_mpirun("examples:dp", ranks, mpirun, sizeof mpirun))
            break;
        snprintf(what, sizeof what, "%d ranks", ranks);
        run_result *dp = run_under(mpirun, "mlp", "%s --dp", common);
        assert_ran(dp, what, 99);
        char head[64];
        snprintf(head, sizeof head, "dp: %d ranks over mpi, %d samples each\n", ranks, 32 / ranks);
        ck_assert_msg(strstr(dp->out, head), "%s: no '%s' in:\n%s", what, head, dp->out);
        const char *first = strstr(dp->out, "step=99 ");
        ck_assert_msg(first && !strstr(first + 1, "step=99 "), "%s: step 99 printed twice:\n%s", what, dp->out);
        assert_losses_near(one, dp, 99, 1e-5f, what);
        run_free(dp);
    }
    run_free(one);
}
END_TEST

/* Gradient accumulation reduces once per step, after the last micro-batch:
 * 2 ranks x 2 micro-batches of 8 train as one process with 2 of 16. */
START_TEST(test_dp_accum)
{
    char mpirun[256];
    if (!tu_mpirun("examples:dp", 2, mpirun, sizeof mpirun))
        return;
    const char *common = "--hidden 64,64 --batch 16 --accum 2 --steps 20 --log-every 1 --threads 1";
    run_result *one = run("mlp", "%s", common), *dp = run_under(mpirun, "mlp", "%s --dp", common);
    assert_ran(one, "one process", 19);
    assert_ran(dp, "2 ranks", 19);
    assert_losses_near(one, dp, 19, 1e-5f, "accum 2");
    run_free(one);
    run_free(dp);
}
END_TEST

/* Batch norm normalises each rank's share with that share's own statistics
 * (no synchronised batch norm): the CNN's first loss differs from one
 * process's with the whole batch, while its first forward is otherwise
 * the same (the same parameters). Its running statistics are rank 0's,
 * broadcast before each step, so every rank evaluates alike. */
START_TEST(test_dp_batchnorm_per_rank)
{
    char mpirun[256];
    if (!tu_mpirun("examples:dp", 2, mpirun, sizeof mpirun))
        return;
    const char *common = "--batch 16 --steps 3 --log-every 1 --threads 1 --train-size 256";
    run_result *one = run("cnn", "%s", common), *dp = run_under(mpirun, "cnn", "%s --dp", common);
    assert_ran(one, "one process", 2);
    assert_ran(dp, "2 ranks", 2);
    ck_assert_msg(fabsf(one->loss[0] - dp->loss[0]) > 1e-4f * fabsf(one->loss[0]),
                  "step 0: loss %.6f in one process and %.6f on 2 ranks: per-rank batch statistics should "
                  "differ from the whole batch's", one->loss[0], dp->loss[0]);
    ck_assert_msg(fabsf(one->loss[0] - dp->loss[0]) < 0.05f * fabsf(one->loss[0]),
                  "step 0: loss %.6f in one process and %.6f on 2 ranks: more apart than statistics over 8 "
                  "instead of 16 samples make them", one->loss[0], dp->loss[0]);
    run_free(one);
    run_free(dp);
}
END_TEST

/* The loss scaler agrees across ranks: an Inf in rank 1's gradient at
 * step 3 reaches every rank through the all-reduce, and rank 0 (whose own
 * gradients were finite) skips the step too; an injection for rank 1 at
 * rank=3 of a 2-rank job alters nothing. */
START_TEST(test_dp_scaler_agrees)
{
    char mpirun[256];
    if (!tu_mpirun("examples:dp", 2, mpirun, sizeof mpirun))
        return;
    const char *common = "--hidden 64,64 --batch 32 --steps 6 --log-every 1 --threads 1 --amp O2 --dp";
    run_result *r = run_under(mpirun, "mlp", "%s --inject inf@op=grad/fc2/linear,step=3,rank=1", common);
    assert_ran(r, "inf on rank 1", 5);
    for (int s = 0; s < 6; s++) {
        char head[32];
        snprintf(head, sizeof head, "step=%d loss=", s);
        const char *line = strstr(r->out, head), *eol = line ? strchr(line, '\n') : NULL;
        ck_assert_ptr_nonnull(eol);
        const bool skipped = memmem(line, (size_t)(eol - line), "skipped", 7) != NULL;
        ck_assert_msg(skipped == (s == 3), "step %d: %.*s (want %s)", s, (int)(eol - line), line,
                      s == 3 ? "skipped" : "not skipped");
    }
    run_free(r);
    run_result *none = run_under(mpirun, "mlp", "%s --inject inf@op=grad/fc2/linear,step=3,rank=3", common);
    assert_ran(none, "rank 3 of 2", 5);
    ck_assert_msg(!strstr(none->out, "skipped"), "an injection for rank 3 of 2 ranks altered a step:\n%s",
                  none->out);
    run_free(none);
}
END_TEST

/* The gradient all-reduces are ops the profiler records on every rank,
 * with the same sequence numbers: buckets of 64 KiB cut 784-64-64-10's
 * parameters (newest first) into bucket0 (fc3, fc2, fc1.bias: 4874
 * values) and bucket1 (fc1.weight: 50176). */
START_TEST(test_dp_collectives_are_ops)
{
    char mpirun[256], dir[] = "/tmp/tdbg-dp-XXXXXX";
    if (!tu_mpirun("examples:dp", 2, mpirun, sizeof mpirun))
        return;
    ck_assert(mkdtemp(dir) != NULL);
    char launcher[512];
    snprintf(launcher, sizeof launcher, "TDBG_DP_BUCKET_KB=64 %s -x TDBG_DP_BUCKET_KB", mpirun);
    run_result *r = run_under(launcher, "mlp", "--dp --hidden 64,64 --batch 32 --steps 3 --log-every 1 --threads 1 "
                              "--profile 'file=%s/p.json;steps=1-2'", dir);
    assert_ran(r, "2 ranks profiled", 2);
    int64_t seq[2][3][2]; /* rank, step, bucket */
    memset(seq, -1, sizeof seq);
    for (int rank = 0; rank < 2; rank++) {
        char file[PATH_MAX];
        snprintf(file, sizeof file, "%s/p.rank-%d.json", dir, rank);
        json_error_t err;
        json_t *root = json_load_file(file, 0, &err);
        ck_assert_msg(root, "%s: %s (line %d)", file, err.text, err.line);
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(root, "traceEvents"), i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            int bucket;
            if (!name || sscanf(name, "allreduce/bucket%d", &bucket) != 1)
                continue;
            json_t *args = json_object_get(e, "args");
            const int step = (int)json_integer_value(json_object_get(args, "step"));
            ck_assert_msg(bucket >= 0 && bucket < 2 && step >= 1 && step <= 2, "%s: %s at step %d", file, name,
                          step);
            ck_assert_str_eq(json_string_value(json_object_get(args, "type")), "AllReduce");
            ck_assert_str_eq(json_string_value(json_object_get(args, "phase")), "backward");
            ck_assert_int_eq(json_integer_value(json_object_get(args, "rank")), rank);
            ck_assert_int_eq(json_integer_value(json_object_get(args, "ranks")), 2);
            ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(args, "shape"), 0)),
                             bucket ? 50176 : 4874);
            seq[rank][step][bucket] = json_integer_value(json_object_get(args, "seq"));
        }
        json_decref(root);
    }
    for (int step = 1; step <= 2; step++)
        for (int b = 0; b < 2; b++) {
            ck_assert_msg(seq[0][step][b] >= 0 && seq[0][step][b] == seq[1][step][b],
                          "step %d bucket %d: seq %lld on rank 0, %lld on rank 1", step, b,
                          (long long)seq[0][step][b], (long long)seq[1][step][b]);
            ck_assert_msg(b == 0 || seq[0][step][1] == seq[0][step][0] + 1, "step %d: bucket1 is not next after "
                          "bucket0", step);
        }
    run_free(r);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert(system(cmd) == 0);
}
END_TEST

/* A breakpoint on a collective stops every rank there, as on any op: its
 * input the rank's own gradients (different on each rank), its output
 * their mean (the same). */
START_TEST(test_dp_break_on_collective)
{
    char mpirun[256], launcher[512];
    if (!tu_mpirun("examples:dp", 2, mpirun, sizeof mpirun))
        return;
    snprintf(launcher, sizeof launcher, "%s -x TDBG=batch -x 'TDBG_SCRIPT=break allreduce/bucket0\nrun\n"
             "stats allreduce/bucket0:out0\nquit'", mpirun);
    run_result *r = run_under(launcher, "mlp", "--dp --hidden 64,64 --batch 32 --steps 3 --threads 1");
    const char *want = "stopped: step=0 phase=backward op=allreduce/bucket0 type=AllReduce reason=breakpoint";
    const char *first = strstr(r->out, want), *second = first ? strstr(first + 1, want) : NULL;
    ck_assert_msg(first && second, "not both ranks stopped at the all-reduce:\n%s", r->out);
    ck_assert_msg(strstr(r->out, "inputs:  dp:bucket0.local [55050] f32") &&
                      strstr(r->out, "outputs: dp:bucket0.mean [55050] f32"), "%s", r->out);
    /* the mean is the same on both ranks: its stats line twice, the same */
    const char *s1 = strstr(r->out, "allreduce/bucket0:out0 f32 [55050] min");
    const char *s2 = s1 ? strstr(s1 + 1, "allreduce/bucket0:out0 f32 [55050] min") : NULL;
    ck_assert_msg(s1 && s2 && strncmp(s1, s2, (size_t)(strchr(s1, '\n') - s1)) == 0,
                  "the ranks' means differ:\n%s", r->out);
    run_free(r);
}
END_TEST

/* The GPU build with NCCL: one rank's gradients on the GPU go through
 * NCCL (1-rank smoke test: several ranks need several GPUs), and train as
 * the run without --dp does. */
START_TEST(test_dp_cuda_nccl)
{
    char mpirun[256];
    if (!tu_cuda_device("examples:dp_cuda") || !tu_mpirun("examples:dp_cuda", 1, mpirun, sizeof mpirun))
        return;
    const char *common = "--backend cuda --hidden 64,64 --batch 32 --steps 20 --log-every 1";
    run_result *one = run("mlp", "%s", common), *dp = run_under(mpirun, "mlp", "%s --dp", common);
    assert_ran(one, "cuda", 19);
    assert_ran(dp, "cuda, 1 rank", 19);
#ifdef TE_HAVE_NCCL
    ck_assert_msg(strstr(dp->out, "dp: 1 ranks over mpi+nccl, 32 samples each"), "%s", dp->out);
#endif
    assert_losses_near(one, dp, 19, 1e-5f, "cuda, 1 rank");
    run_free(one);
    run_free(dp);
}
END_TEST

START_TEST(test_dp_flags)
{
    char mpirun[256];
    if (!tu_mpirun("examples:dp", 3, mpirun, sizeof mpirun))
        return;
    run_result *r = run_under(mpirun, "mlp", "--dp --batch 32 --steps 2 --hidden 8");
    ck_assert_msg(r->status == 2 && strstr(r->out, "--dp: --batch 32 does not split evenly over 3 ranks"),
                  "status %d:\n%s", r->status, r->out);
    run_free(r);
    r = run("mlp", "--dp --mode graph --steps 2");
    ck_assert_msg(r->status == 2 && strstr(r->out, "--dp") && strstr(r->out, "eager mode"), "status %d:\n%s",
                  r->status, r->out);
    run_free(r);
}
END_TEST

Suite *suite_examples(void)
{
    Suite *s = suite_create("examples");
    /* Each case runs whole programs; under ASan they are several times slower. */
    TCase *tc = tcase_create("convergence");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_mlp_converges);
    tcase_add_test(tc, test_mlp_spirals);
    tcase_add_test(tc, test_cnn_overfits);
    tcase_add_test(tc, test_accum_converges);
    tcase_add_test(tc, test_optimizers_and_clip);
    suite_add_tcase(s, tc);

    tc = tcase_create("runs");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_same_seed_same_output);
    tcase_add_test(tc, test_workers_same_output);
    tcase_add_test(tc, test_inject_nan);
    tcase_add_test(tc, test_inject_scale);
    tcase_add_test(tc, test_accum_matches_big_batch);
    tcase_add_test(tc, test_time_line);
    tcase_add_test(tc, test_profile_flag);
    tcase_add_test(tc, test_profile_attribution);
    suite_add_tcase(s, tc);

    tc = tcase_create("flags");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_inject_bad_spec);
    tcase_add_test(tc, test_bad_flags);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_graph_flags);
    tcase_add_test(tc, test_backend_flag);
    suite_add_tcase(s, tc);

    tc = tcase_create("graph");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_graph_parity);
    tcase_add_test(tc, test_graph_inject_accum_clip);
    tcase_add_test(tc, test_loss_scale_skip);
    tcase_add_loop_test(tc, test_amp_levels, 0, 2);
    tcase_add_test(tc, test_cnn_amp_levels);
    suite_add_tcase(s, tc);

    tc = tcase_create("dp");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_dp_matches_single);
    tcase_add_test(tc, test_dp_accum);
    tcase_add_test(tc, test_dp_batchnorm_per_rank);
    tcase_add_test(tc, test_dp_scaler_agrees);
    tcase_add_test(tc, test_dp_collectives_are_ops);
    tcase_add_test(tc, test_dp_break_on_collective);
    tcase_add_test(tc, test_dp_cuda_nccl);
    tcase_add_test(tc, test_dp_flags);
    suite_add_tcase(s, tc);
    return s;
}
