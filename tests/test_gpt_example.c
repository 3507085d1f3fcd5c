/*
 * test_gpt_example.c — runs examples/gpt on a small text kept in the
 * repository (tests/fixtures/alice.txt): it learns, evaluates, samples
 * deterministically, refuses bad flags and checkpoints, resumes from a
 * checkpoint bit for bit (and on another backend), agrees between eager and
 * graph mode, and a NaN planted in attention is found by tdbg at its op and step; debugged, one
 * glob stops in every layer, a head's scores print the dumped values, the
 * causal mask never stops `break nonfinite`, and tdbg-diff calls eager and
 * fused-attention graph mode the same.
 */
#include "suites.h"
#include "testutil.h"
#include "tsession.h"

#include <hdf5.h>

#ifdef TE_HAVE_CUDA
#include "cuda/cuda_probe.h"
#endif

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_STEPS 256
#define TEXT TDBG_SRCDIR "/tests/fixtures/alice.txt"
/* A tiny model that learns within seconds on one thread. */
#define TINY "--data '" TEXT "' --layers 2 --heads 2 --embd 32 --block 32 --batch 8 --threads 1 --log-every 1"

typedef struct {
    ts_session s;
    float loss[MAX_STEPS];
    bool logged[MAX_STEPS];
    float final_val;
    bool has_final;
    int n_val;
} gpt_run;

/* examples/gpt with the arguments, after the command launcher ("" or mpirun's). */
static gpt_run vrun_gpt(const char *launcher, const char *fmt, va_list ap)
{
    char args[2048];
    vsnprintf(args, sizeof args, fmt, ap);
    gpt_run r = { .s = ts_sh("%s '%s/examples/gpt' %s", launcher, TDBG_BUILDDIR, args) };
    for (const char *line = r.s.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        int step;
        float x;
        if (sscanf(line, "step=%d loss=%f", &step, &x) == 2 && step >= 0 && step < MAX_STEPS) {
            r.loss[step] = x;
            r.logged[step] = true;
        } else if (sscanf(line, "step=%d val_loss=%f", &step, &x) == 2) {
            r.n_val++;
        } else if (sscanf(line, "final: step=%d val_loss=%f", &step, &x) == 2) {
            r.final_val = x;
            r.has_final = true;
        }
    }
    return r;
}

static gpt_run run_gpt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static gpt_run run_gpt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gpt_run r = vrun_gpt("", fmt, ap);
    va_end(ap);
    return r;
}

static gpt_run run_gpt_under(const char *launcher, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static gpt_run run_gpt_under(const char *launcher, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gpt_run r = vrun_gpt(launcher, fmt, ap);
    va_end(ap);
    return r;
}

static void assert_ok(const gpt_run *r, const char *what)
{
    ck_assert_msg(r->s.status == 0 && r->has_final, "%s: exit status %d, output:\n%s", what, r->s.status,
                  r->s.out);
}

/* The lines of out that start with prefix, in order, into buf. */
static void lines_with(const char *out, const char *prefix, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const char *line = out; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line + 1) : strlen(line);
        if (strncmp(line, prefix, strlen(prefix)) == 0 && used + len < n) {
            memcpy(buf + used, line, len);
            buf[used += len] = '\0';
        }
        line += len;
    }
}

static char scratch[256];

static void scratch_up(void) { tu_scratch_make(scratch, sizeof scratch, "tdbg-gpt"); }
static void scratch_down(void) { tu_scratch_remove(scratch); }

/* ---- learning ------------------------------------------------------------------- */

START_TEST(test_gpt_learns)
{
    gpt_run r = run_gpt("%s --steps 80 --lr 3e-3 --warmup 5 --eval-every 40", TINY);
    assert_ok(&r, "gpt");
    for (int s = 0; s < 80; s++)
        ck_assert_msg(r.logged[s] && isfinite(r.loss[s]), "step %d: no finite loss in:\n%s", s, r.s.out);
    /* chance is ln 256 = 5.55; the bytes of English text alone are far below */
    ck_assert_msg(r.loss[0] > 5.0f && r.loss[0] < 6.0f, "step 0 loss %g is not about ln 256", r.loss[0]);
    ck_assert_msg(r.loss[79] < 0.6f * r.loss[0], "loss %g at step 79, %g at step 0:\n%s", r.loss[79], r.loss[0],
                  r.s.out);
    ck_assert_msg(r.n_val == 1, "one val_loss line at step 39 expected:\n%s", r.s.out);
    ck_assert_msg(strstr(r.s.out, "step=39 val_loss="), "val_loss at step 39:\n%s", r.s.out);
    ck_assert_msg(r.final_val < 0.7f * 5.545f, "held-out loss %g did not fall from ln 256", r.final_val);
    ck_assert_msg(strstr(r.s.out, "gpt: 2 layers, 2 heads, embd 32, block 32,"), "header:\n%s", r.s.out);
    ts_free(&r.s);
}
END_TEST

/* Every AMP level in f16 and bf16 ends within 2% of O0's held-out loss
 * (the issue asks it of O2; O1 and O3 hold it too on this run:
 * docs/amp.md, "What each level costs and keeps"). */
/* Data parallel: 2 ranks, each with half the windows of a global batch and
 * dropout masks keyed by the global element, train as one process with the
 * whole batch, within 1e-5 over 100 steps. */
START_TEST(test_gpt_dp_matches_single)
{
    char mpirun[256];
    if (!tu_mpirun("gpt_example:dp", 2, mpirun, sizeof mpirun))
        return;
    const char *common = TINY " --block 16 --steps 100 --warmup 10 --eval-every 0 --dropout 0.1";
    gpt_run one = run_gpt("%s", common), dp = run_gpt_under(mpirun, "%s --dp", common);
    assert_ok(&one, "one process");
    assert_ok(&dp, "2 ranks");
    for (int s = 0; s < 100; s++) {
        ck_assert_msg(one.logged[s] && dp.logged[s], "step %d not logged", s);
        ck_assert_msg(fabsf(one.loss[s] - dp.loss[s]) <= 1e-5f * fabsf(one.loss[s]),
                      "step %d: loss %.6f in one process, %.6f on 2 ranks", s, one.loss[s], dp.loss[s]);
    }
    ck_assert_msg(fabsf(one.final_val - dp.final_val) <= 1e-5f * fabsf(one.final_val), "val_loss %.6f vs %.6f",
                  one.final_val, dp.final_val);
    ts_free(&one.s);
    ts_free(&dp.s);
}
END_TEST

START_TEST(test_gpt_amp_levels)
{
    const char *args = TINY " --steps 80 --lr 3e-3 --warmup 5 --eval-every 0";
    gpt_run ref = run_gpt("%s", args);
    assert_ok(&ref, "O0");
    ck_assert_msg(ref.final_val < 0.7f * 5.545f, "O0's held-out loss %g did not fall from ln 256: nothing to "
                  "compare with", ref.final_val);
    static const char *const dts[2] = { "f16", "bf16" };
    for (int d = 0; d < 2; d++)
        for (int level = 1; level <= 3; level++) {
            gpt_run r = run_gpt("%s --amp O%d --amp-dtype %s", args, level, dts[d]);
            assert_ok(&r, "amp");
            ck_assert_msg(fabsf(r.final_val - ref.final_val) <= 0.02f * ref.final_val,
                          "O%d %s: held-out loss %.6f, O0 %.6f (more than 2%% apart):\n%s", level, dts[d],
                          r.final_val, ref.final_val, r.s.out);
            ck_assert_msg(r.final_val != ref.final_val, "O%d %s: O0's loss exactly: nothing was rounded", level,
                          dts[d]);
            ck_assert_msg((strstr(r.s.out, " scale=65536") != NULL) == (level == 2), "O%d %s: scale lines:\n%s",
                          level, dts[d], r.s.out);
            ts_free(&r.s);
        }
    ts_free(&ref.s);
}
END_TEST

START_TEST(test_gpt_sampling_deterministic)
{
    const char *args = TINY " --steps 12 --warmup 2 --eval-every 0 --sample-every 6 --sample-bytes 60";
    gpt_run a = run_gpt("%s", args), b = run_gpt("%s", args), c = run_gpt("%s --seed 2", args);
    assert_ok(&a, "gpt sample");
    static char sa[8192], sb[8192], sc[8192];
    lines_with(a.s.out, "sample: ", sa, sizeof sa);
    lines_with(b.s.out, "sample: ", sb, sizeof sb);
    lines_with(c.s.out, "sample: ", sc, sizeof sc);
    ck_assert_msg(strstr(sa, "sample: step=5 \"The ") && strstr(sa, "sample: step=11 \"The "),
                  "samples after steps 5 and 11, continuing the prompt:\n%s", a.s.out);
    ck_assert_msg(strcmp(sa, sb) == 0, "the same seed sampled differently:\n%s\n---\n%s", sa, sb);
    ck_assert_msg(strcmp(sa, sc) != 0, "seeds 1 and 2 sampled the same:\n%s", sa);
    for (const char *p = sa; *p; p++)
        ck_assert_msg(*p == '\n' || (*p >= 0x20 && *p < 0x7f), "an unescaped byte 0x%02x in:\n%s",
                      (unsigned char)*p, sa);
    /* greedy: no randomness at all, and still the same */
    gpt_run g1 = run_gpt("%s --temperature 0", args), g2 = run_gpt("%s --temperature 0 --seed 1", args);
    lines_with(g1.s.out, "sample: ", sb, sizeof sb);
    lines_with(g2.s.out, "sample: ", sc, sizeof sc);
    ck_assert_msg(sb[0] && strcmp(sb, sc) == 0, "greedy samples differ:\n%s\n---\n%s", sb, sc);
    ts_free(&a.s);
    ts_free(&b.s);
    ts_free(&c.s);
    ts_free(&g1.s);
    ts_free(&g2.s);
}
END_TEST

/* ---- flags ---------------------------------------------------------------------- */

START_TEST(test_gpt_flags_refused)
{
    static const struct {
        const char *args, *want;
    } cases[] = {
        { "--heads 3", "gpt: --embd 32 is not a multiple of --heads 3" },
        { "--block 0", "gpt: --block '0': expected a whole number in 1..4096" },
        { "--layers 65", "gpt: --layers '65': expected a whole number in 1..64" },
        { "--dropout 1", "gpt: --dropout '1': expected a probability in [0, 1)" },
        { "--temperature -1", "gpt: --temperature '-1': expected a number in [0, 100)" },
        { "--train-size 10", "gpt: --train-size does not apply to gpt" },
        { "--workers 2", "gpt: --workers does not apply to gpt" },
        { "--warmup 50 --steps 50", "gpt: --warmup 50 must be below --steps 50" },
        { "--data /nonexistent/text", "gpt: --data: cannot read /nonexistent/text: No such file" },
        { "--block 4096", "too short for --block 4096" },
        { "--load /nonexistent/ck.h5", "gpt: checkpoint /nonexistent/ck.h5: not an HDF5 file, or not readable" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gpt_run r = run_gpt("%s --steps 5 --warmup 1 %s", TINY, cases[i].args);
        ck_assert_msg(r.s.status == 2, "%s: exit %d, want 2:\n%s", cases[i].args, r.s.status, r.s.out);
        ts_has(&r.s, cases[i].want);
        ck_assert_msg(!strstr(r.s.out, "step=0 loss="), "%s: trained anyway:\n%s", cases[i].args, r.s.out);
        ts_free(&r.s);
    }
}
END_TEST

/* ---- checkpoints ------------------------------------------------------------------ */

START_TEST(test_gpt_checkpoint_resumes_bit_identical)
{
    char dir[512], ck[600];
    tu_scratch_sub(scratch, dir, sizeof dir);
    snprintf(ck, sizeof ck, "%s/ck.h5", dir);
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        /* dropout on: the masks depend on the step and the seed, restored too */
        const char *args = TINY " --steps 24 --warmup 4 --eval-every 8 --dropout 0.1";
        gpt_run full = run_gpt("%s --mode %s", args, modes[m]);
        gpt_run first = run_gpt("%s --mode %s --stop-at 11 --save '%s'", args, modes[m], ck);
        gpt_run rest = run_gpt("%s --mode %s --load '%s'", args, modes[m], ck);
        assert_ok(&full, "uninterrupted");
        assert_ok(&first, "first part");
        assert_ok(&rest, "resumed");
        ts_has(&first.s, "saved: ");
        ts_has(&rest.s, "resumed: ");
        ck_assert_msg(!rest.logged[10] && rest.logged[11], "the resumed run starts at step 11:\n%s", rest.s.out);
        static char want[16384], got[16384], tail[16384];
        lines_with(full.s.out, "step=", want, sizeof want);
        lines_with(first.s.out, "step=", got, sizeof got);
        lines_with(rest.s.out, "step=", tail, sizeof tail);
        ck_assert(strlen(got) + strlen(tail) < sizeof got);
        strcat(got, tail);
        ck_assert_msg(strcmp(want, got) == 0, "%s: resumed losses differ from the uninterrupted run's:\n%s\n---\n%s",
                      modes[m], want, got);
        ck_assert_msg(full.final_val == rest.final_val, "final val_loss %.9g vs %.9g", full.final_val,
                      rest.final_val);
        ts_free(&full.s);
        ts_free(&first.s);
        ts_free(&rest.s);
    }
}
END_TEST

/* The attribute name of f's /scaler, read as type into dst. */
static void scaler_attr(hid_t f, const char *name, hid_t type, void *dst)
{
    hid_t a = H5Aopen_by_name(f, "scaler", name, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_msg(a >= 0 && H5Aread(a, type, dst) >= 0, "no /scaler attribute %s", name);
    H5Aclose(a);
}

/* At O2 in f16 with a window of 3 the scale grows to 262144, where the
 * gradients overflow, so skips come naturally (steps 6, 16, 20), and one is
 * injected at step 9: stopped at step 11 and resumed, the scales, skips and
 * losses are those of the run that never stopped, because the checkpoint
 * keeps the scale, the growth count and the hysteresis (without them step
 * 13 would not double). A run at another level, dtype or window is refused. */
START_TEST(test_gpt_checkpoint_amp)
{
    char dir[512], ck[600];
    tu_scratch_sub(scratch, dir, sizeof dir);
    snprintf(ck, sizeof ck, "%s/ck.h5", dir);
    static const char *const modes[] = { "eager", "graph" };
    const char *args = TINY " --steps 24 --warmup 2 --eval-every 8 --amp O2 --amp-dtype f16 --scale-window 3 "
                            "--inject inf@op=grad/lm_head,step=9";
    for (int m = 0; m < 2; m++) {
        gpt_run full = run_gpt("%s --mode %s", args, modes[m]);
        gpt_run first = run_gpt("%s --mode %s --stop-at 11 --save '%s'", args, modes[m], ck);
        gpt_run rest = run_gpt("%s --mode %s --load '%s'", args, modes[m], ck);
        assert_ok(&full, "uninterrupted");
        assert_ok(&first, "first part");
        assert_ok(&rest, "resumed");
        ts_has(&full.s, "step=9 loss=");
        ck_assert_msg(strstr(full.s.out, "scale=131072 skipped\nstep=10 ") != NULL,
                      "%s: step 9 skipped at 131072:\n%s", modes[m], full.s.out);
        ts_has(&rest.s, "step=13 loss=");
        ck_assert_msg(strstr(rest.s.out, "scale=65536\nstep=13 ") && strstr(rest.s.out, "scale=131072\nstep=14 "),
                      "%s: the resumed run doubles its scale at step 13:\n%s", modes[m], rest.s.out);
        static char want[16384], got[16384], tail[16384];
        lines_with(full.s.out, "step=", want, sizeof want);
        lines_with(first.s.out, "step=", got, sizeof got);
        lines_with(rest.s.out, "step=", tail, sizeof tail);
        ck_assert(strlen(got) + strlen(tail) < sizeof got);
        strcat(got, tail);
        ck_assert_msg(strcmp(want, got) == 0, "%s: resumed steps differ from the uninterrupted run's:\n%s\n---\n%s",
                      modes[m], want, got);
        ck_assert_msg(full.final_val == rest.final_val, "final val_loss %.9g vs %.9g", full.final_val,
                      rest.final_val);
        ts_free(&full.s);
        ts_free(&first.s);
        ts_free(&rest.s);
    }
    /* what the file says, as h5py would read it */
    hid_t f = H5Fopen(ck, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    char amp[8] = "", dt[8] = "";
    hid_t a = H5Aopen(f, "amp", H5P_DEFAULT), t = H5Aget_type(a);
    ck_assert(a >= 0 && H5Tget_size(t) < sizeof amp && H5Aread(a, t, amp) >= 0);
    H5Tclose(t);
    H5Aclose(a);
    a = H5Aopen(f, "amp_dtype", H5P_DEFAULT);
    t = H5Aget_type(a);
    ck_assert(a >= 0 && H5Tget_size(t) < sizeof dt && H5Aread(a, t, dt) >= 0);
    H5Tclose(t);
    H5Aclose(a);
    ck_assert_msg(strcmp(amp, "O2") == 0 && strcmp(dt, "f16") == 0, "amp '%s', amp_dtype '%s'", amp, dt);
    double scale = 0;
    int64_t tracker = -1, skipped = -1;
    scaler_attr(f, "scale", H5T_NATIVE_DOUBLE, &scale);
    scaler_attr(f, "growth_tracker", H5T_NATIVE_INT64, &tracker);
    scaler_attr(f, "skipped", H5T_NATIVE_INT64, &skipped);
    H5Fclose(f);
    /* steps 6 and 9 skipped; 10 clean since the back-off at 9 */
    ck_assert_msg(scale == 65536 && tracker == 1 && skipped == 2, "/scaler: scale %g, growth_tracker %lld, "
                  "skipped %lld; want 65536, 1, 2", scale, (long long)tracker, (long long)skipped);

    static const struct {
        const char *flags, *want;
    } refused[] = {
        { "", "made with --amp O2 --amp-dtype f16; this run has --amp O0 (" },
        { "--amp O2 --amp-dtype bf16 --scale-window 3", "this run has --amp O2 --amp-dtype bf16" },
        { "--amp O1 --amp-dtype f16", "made with --amp O2 --amp-dtype f16; this run has --amp O1 --amp-dtype f16" },
        { "--amp O2 --amp-dtype f16", "made with --scale-window 3; this run has --scale-window 2000" },
        { "--amp O2 --amp-dtype f16 --loss-scale 1024", "made with a dynamic loss scale; this run's is fixed" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        gpt_run b = run_gpt("%s --steps 24 --warmup 2 --eval-every 8 %s --load '%s'", TINY, refused[i].flags, ck);
        ck_assert_msg(b.s.status == 2, "'%s': exit %d, want 2:\n%s", refused[i].flags, b.s.status, b.s.out);
        ts_has(&b.s, "gpt: checkpoint ");
        ts_has(&b.s, refused[i].want);
        ck_assert_msg(!strstr(b.s.out, "loss="), "'%s': trained anyway:\n%s", refused[i].flags, b.s.out);
        ts_free(&b.s);
    }
}
END_TEST

/* Copies src to dst, then deletes the object at path in dst (when not NULL). */
static void copy_without(const char *src, const char *dst, const char *path)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
    ck_assert(system(cmd) == 0);
    if (!path)
        return;
    hid_t f = H5Fopen(dst, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(f >= 0);
    ck_assert_msg(H5Ldelete(f, path, H5P_DEFAULT) >= 0, "cannot delete %s", path);
    H5Fclose(f);
}

START_TEST(test_gpt_checkpoint_damaged)
{
    char dir[512], ck[600], bad[600], cmd[2048];
    tu_scratch_sub(scratch, dir, sizeof dir);
    snprintf(ck, sizeof ck, "%s/ck.h5", dir);
    snprintf(bad, sizeof bad, "%s/bad.h5", dir);
    const char *args = TINY " --steps 6 --warmup 2 --eval-every 0";
    gpt_run r = run_gpt("%s --stop-at 3 --save '%s'", args, ck);
    assert_ok(&r, "save");
    ts_free(&r.s);

    static const struct {
        const char *what, *missing, *extra, *want;
    } cases[] = {
        { "not HDF5", NULL, NULL, "not an HDF5 file, or not readable" },
        { "truncated", NULL, NULL, "not an HDF5 file, or not readable" },
        { "no parameter", "/params/h1.mlp.c_fc.weight", NULL, "missing dataset /params/h1.mlp.c_fc.weight" },
        { "no step", "/step", NULL, "missing dataset /step" },
        { "no optimizer", "/optim", NULL, "missing group /optim" },
        { "no format", NULL, NULL, "no attribute 'format' on /" },
        { "another model", NULL, "--embd 64", "made with embd=32; this run has --embd 64" },
        { "another optimizer", NULL, "--optim adam", "optimizer adamw; this run has --optim adam" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (i == 0) {
            snprintf(cmd, sizeof cmd, "echo 'not a checkpoint' > '%s'", bad);
            ck_assert(system(cmd) == 0);
        } else if (i == 1) {
            snprintf(cmd, sizeof cmd, "head -c 3000 '%s' > '%s'", ck, bad);
            ck_assert(system(cmd) == 0);
        } else if (i == 5) {
            copy_without(ck, bad, NULL);
            hid_t f = H5Fopen(bad, H5F_ACC_RDWR, H5P_DEFAULT);
            ck_assert(f >= 0 && H5Adelete(f, "format") >= 0);
            H5Fclose(f);
        } else {
            copy_without(ck, bad, cases[i].missing);
        }
        gpt_run b = run_gpt("%s %s --load '%s'", args, cases[i].extra ? cases[i].extra : "", bad);
        ck_assert_msg(b.s.status == 2, "%s: exit %d, want 2:\n%s", cases[i].what, b.s.status, b.s.out);
        ts_has(&b.s, "gpt: checkpoint ");
        ts_has(&b.s, cases[i].want);
        ck_assert_msg(!strstr(b.s.out, "loss="), "%s: trained anyway:\n%s", cases[i].what, b.s.out);
        ts_free(&b.s);
    }
    /* a parameter of the wrong shape */
    copy_without(ck, bad, NULL);
    hid_t f = H5Fopen(bad, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(f >= 0 && H5Ldelete(f, "/params/wpe", H5P_DEFAULT) >= 0);
    hsize_t dims[2] = { 8, 32 };
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate2(f, "/params/wpe", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(d >= 0);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
    gpt_run b = run_gpt("%s --load '%s'", args, bad);
    ck_assert_msg(b.s.status == 2, "wrong shape: exit %d:\n%s", b.s.status, b.s.out);
    ts_has(&b.s, "/params/wpe has shape [8,32]; the model's is [32,32]");
    ts_free(&b.s);
    /* the optimizer's steps as 64 integers (fuzz_checkpoint found the reader
     * writing them all over one: tests/fuzz/crashes/checkpoint) */
    copy_without(ck, bad, NULL);
    f = H5Fopen(bad, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(f >= 0 && H5Adelete_by_name(f, "optim", "steps", H5P_DEFAULT) >= 0);
    int64_t many[64] = { 0 };
    hsize_t n_many = 64;
    sp = H5Screate_simple(1, &n_many, NULL);
    hid_t a = H5Acreate_by_name(f, "optim", "steps", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(a >= 0 && H5Awrite(a, H5T_NATIVE_INT64, many) >= 0);
    H5Aclose(a);
    H5Sclose(sp);
    H5Fclose(f);
    b = run_gpt("%s --load '%s'", args, bad);
    ck_assert_msg(b.s.status == 2, "steps array: exit %d:\n%s", b.s.status, b.s.out);
    ts_has(&b.s, "attribute 'steps' on /optim is not one integer");
    ts_free(&b.s);
}
END_TEST

/* Every parameter of /params has its Adam m and v under /optim, of its
 * size, finite, v never negative, and the update's traces in them (not all
 * zero): the optimizer's state as host values. */
static void assert_optim_state_stored(const char *path)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "cannot open %s", path);
    hid_t params = H5Gopen2(f, "params", H5P_DEFAULT);
    H5G_info_t info;
    ck_assert(params >= 0 && H5Gget_info(params, &info) >= 0 && info.nlinks > 0);
    for (hsize_t i = 0; i < info.nlinks; i++) {
        char name[256], at[300];
        ck_assert(H5Lget_name_by_idx(params, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name,
                                     H5P_DEFAULT) > 0);
        hid_t pd = H5Dopen2(params, name, H5P_DEFAULT), ps = H5Dget_space(pd);
        const hssize_t n = H5Sget_simple_extent_npoints(ps);
        H5Sclose(ps);
        H5Dclose(pd);
        for (int slot = 0; slot < 2; slot++) {
            snprintf(at, sizeof at, "optim/%s/%s", slot ? "v" : "m", name);
            hid_t d = H5Dopen2(f, at, H5P_DEFAULT);
            ck_assert_msg(d >= 0, "%s: no %s", path, at);
            hid_t sp = H5Dget_space(d);
            ck_assert_int_eq(H5Sget_simple_extent_npoints(sp), n);
            float *v = malloc((size_t)n * sizeof *v);
            ck_assert(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
            bool any = false;
            for (hssize_t k = 0; k < n; k++) {
                ck_assert_msg(isfinite(v[k]) && (slot == 0 || v[k] >= 0.0f), "%s[%lld] = %g", at, (long long)k,
                              (double)v[k]);
                any = any || v[k] != 0.0f;
            }
            ck_assert_msg(any, "%s is all zeros after 11 updates", at);
            free(v);
            H5Sclose(sp);
            H5Dclose(d);
        }
    }
    H5Gclose(params);
    H5Fclose(f);
}

/* Is there a CUDA device to run the examples on? Prints why not, once per test. */
static bool cuda_device(const char *test)
{
#ifdef TE_HAVE_CUDA
    char why[512];
    if (te_cuda_probe(why, sizeof why))
        return true;
#else
    const char *why = "built without CUDA (./configure --with-cuda)";
#endif
    printf("%s: skipped: no CUDA device (%s)\n", test, why);
    return false;
}

/* Checkpoints hold host values (parameters through te_copy_to_f32, the
 * optimizer's state through te_optim_state_read), so one written on one
 * backend loads on another. On the CPU: the state is in the file and the
 * run resumes from it on the CPU at step 11. With a GPU: saved on CUDA and
 * resumed on the CPU, and the reverse; each resumed run's losses are the
 * uninterrupted CPU run's within the backends' f32 differences. */
START_TEST(test_gpt_checkpoint_across_backends)
{
    char dir[512], ck[600];
    tu_scratch_sub(scratch, dir, sizeof dir);
    snprintf(ck, sizeof ck, "%s/ck.h5", dir);
    const char *args = TINY " --steps 24 --warmup 4 --eval-every 8 --dropout 0";
    gpt_run full = run_gpt("%s --backend cpu", args);
    assert_ok(&full, "uninterrupted on the CPU");
    gpt_run first = run_gpt("%s --backend cpu --stop-at 11 --save '%s'", args, ck);
    assert_ok(&first, "saved on the CPU");
    assert_optim_state_stored(ck);
    gpt_run rest = run_gpt("%s --backend cpu --load '%s'", args, ck);
    assert_ok(&rest, "resumed on the CPU");
    ts_has(&rest.s, "resumed: ");
    ck_assert_msg(!rest.logged[10] && rest.logged[11] && rest.loss[23] == full.loss[23],
                  "resumed on the CPU:\n%s", rest.s.out);
    ts_free(&first.s);
    ts_free(&rest.s);
    if (!cuda_device("gpt_checkpoint_across_backends")) {
        ts_free(&full.s);
        return;
    }
    static const char *const ways[][2] = { { "cuda", "cpu" }, { "cpu", "cuda" } };
    for (int w = 0; w < 2; w++) {
        first = run_gpt("%s --backend %s --stop-at 11 --save '%s'", args, ways[w][0], ck);
        assert_ok(&first, ways[w][0]);
        assert_optim_state_stored(ck);
        rest = run_gpt("%s --backend %s --load '%s'", args, ways[w][1], ck);
        assert_ok(&rest, ways[w][1]);
        ts_has(&rest.s, "resumed: ");
        for (int s = 11; s < 24; s++)
            ck_assert_msg(rest.logged[s] && fabsf(rest.loss[s] - full.loss[s]) <= 1e-3f * fabsf(full.loss[s]),
                          "saved on %s, resumed on %s: step %d loss %g, %g uninterrupted on the CPU", ways[w][0],
                          ways[w][1], s, (double)rest.loss[s], (double)full.loss[s]);
        ck_assert_msg(!rest.logged[10], "resumed at step 11:\n%s", rest.s.out);
        ts_free(&first.s);
        ts_free(&rest.s);
    }
    ts_free(&full.s);
}
END_TEST

START_TEST(test_gpt_checkpoint_h5py)
{
    if (system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0) {
        tdbg_skip("gpt_example h5py", "/usr/bin/python3 has no h5py");
        return;
    }
    char dir[512], ck[600];
    tu_scratch_sub(scratch, dir, sizeof dir);
    snprintf(ck, sizeof ck, "%s/ck.h5", dir);
    gpt_run r = run_gpt("%s --steps 6 --warmup 2 --eval-every 0 --stop-at 4 --save '%s'", TINY, ck);
    assert_ok(&r, "save");
    ts_free(&r.s);
    ts_session s = ts_sh(
        "/usr/bin/python3 -c '\n"
        "import h5py\n"
        "f = h5py.File(\"%s\", \"r\")\n"
        "print(\"format\", f.attrs[\"format\"].decode(), \"embd\", int(f.attrs[\"embd\"]))\n"
        "print(\"wte\", f[\"params/wte\"].shape, f[\"params/wte\"].dtype)\n"
        "print(\"c_attn\", f[\"params/h1.attn.c_attn.weight\"].shape)\n"
        "print(\"m\", f[\"optim/m/h0.ln_1.weight\"].shape, \"v\", f[\"optim/v/ln_f.bias\"].shape)\n"
        "print(\"optim\", f[\"optim\"].attrs[\"kind\"].decode(), int(f[\"optim\"].attrs[\"steps\"]))\n"
        "print(\"step\", int(f[\"step\"][()]), \"seed\", int(f[\"rng/seed\"][()]), \"rng\", int(f[\"rng/step\"][()]),"
        " \"pos\", int(f[\"data/position\"][()]))\n"
        "print(\"params\", len(f[\"params\"]))\n'",
        ck);
    ck_assert_msg(s.status == 0, "h5py failed:\n%s", s.out);
    ts_has(&s, "format tdbg-checkpoint embd 32");
    ts_has(&s, "wte (256, 32) float32");
    ts_has(&s, "c_attn (96, 32)");
    ts_has(&s, "m (32,) v (32,)");
    ts_has(&s, "optim adamw 4");
    ts_has(&s, "step 4 seed 1 rng 4 pos 32");
    ts_has(&s, "params 28"); /* wte, wpe, 12 per block, ln_f's two */
    ts_free(&s);
}
END_TEST

/* ---- modes and the debugger -------------------------------------------------------- */

START_TEST(test_gpt_eager_graph_agree)
{
    const char *args = "--data '" TEXT "' --layers 1 --heads 2 --embd 16 --block 8 --batch 4 --threads 1 "
                       "--log-every 1 --steps 200 --warmup 10 --eval-every 0";
    gpt_run e = run_gpt("%s --mode eager", args), g = run_gpt("%s --mode graph", args);
    assert_ok(&e, "eager");
    assert_ok(&g, "graph");
    double worst = 0;
    int at = 0;
    for (int s = 0; s < 200; s++) {
        ck_assert_msg(e.logged[s] && g.logged[s], "step %d missing", s);
        double rel = fabs((double)e.loss[s] - g.loss[s]) / fabs((double)e.loss[s]);
        if (rel > worst)
            worst = rel, at = s;
    }
    ck_assert_msg(worst <= 1e-5, "eager and graph losses part by %.3g (relative) at step %d: %.6f vs %.6f", worst,
                  at, e.loss[at], g.loss[at]);
    ck_assert_msg(e.loss[199] < e.loss[0], "no learning in 200 steps");
    ts_free(&e.s);
    ts_free(&g.s);
}
END_TEST

/* Graph mode keeps eager mode's rounding points at --amp O2 (docs/amp.md
 * "Fused attention under AMP", docs/graph.md "Parity"). With the attention
 * composed (TDBG_GRAPH_DISABLE=fuse-attn) every op rounds where eager mode
 * rounds it, so the losses agree within the 1e-5 relative at each
 * of 200 steps (measured: bit for bit, in f16 and bf16, O1 and O3 too).
 * Fused, the kernel keeps the scores and probabilities in f32 and rounds
 * only o (and dq, dk, dv): it is within P = 2 (f16) or 4 (bf16) ulps of
 * the composed chain per element (suite amp, case parity). At step 0 the
 * parameters are the same, so the loss gap is that alone: per element of
 * o at most 2Pu relative (u the unit roundoff, 2^-11 or 2^-8), of either
 * sign, over the B*T*C = 8192 elements of o per layer that the loss
 * averages, a random walk: about 2Pu/sqrt(8192) = Pu/45 at the largest
 * magnitudes, less through the residual stream that o is one term of.
 * The bound is u/100 (measured 4e-4 u f16, 2e-3 u bf16). After step 0 the
 * parameters differ too and training amplifies the gap (about 10x per 10
 * steps here): u/10 over the first 10 steps (measured 3e-6 and 1e-4),
 * and none after (docs/amp.md gives the 200-step figures). */
START_TEST(test_gpt_amp_eager_graph_agree)
{
    const char *args = TINY " --steps 200 --lr 3e-3 --warmup 5 --eval-every 0 --amp O2";
    static const struct {
        const char *name;
        double u;
    } dts[2] = { { "f16", 0x1p-11 }, { "bf16", 0x1p-8 } };
    for (int d = 0; d < 2; d++) {
        gpt_run e = run_gpt("%s --amp-dtype %s --mode eager", args, dts[d].name);
        gpt_run f = run_gpt("%s --amp-dtype %s --mode graph", args, dts[d].name);
        setenv("TDBG_GRAPH_DISABLE", "fuse-attn", 1);
        gpt_run g = run_gpt("%s --amp-dtype %s --mode graph", args, dts[d].name);
        unsetenv("TDBG_GRAPH_DISABLE");
        assert_ok(&e, "eager");
        assert_ok(&f, "graph");
        assert_ok(&g, "graph, fuse-attn off");
        ck_assert_msg(e.loss[0] != f.loss[0], "%s: fused attention gave the composed loss at step 0 bit for bit: "
                      "did it fuse?", dts[d].name);
        for (int s = 0; s < 200; s++) {
            ck_assert_msg(e.logged[s] && f.logged[s] && g.logged[s], "%s: step %d missing", dts[d].name, s);
            const double rel = fabs((double)e.loss[s] - g.loss[s]) / fabs((double)e.loss[s]);
            ck_assert_msg(rel <= 1e-5, "%s, fuse-attn off: eager and graph part by %.3g (relative) at step %d: "
                          "%.6f vs %.6f", dts[d].name, rel, s, e.loss[s], g.loss[s]);
            const double fused = fabs((double)e.loss[s] - f.loss[s]) / fabs((double)e.loss[s]);
            const double bound = s == 0 ? dts[d].u / 100 : dts[d].u / 10;
            ck_assert_msg(s >= 10 || fused <= bound, "%s, fused: eager and graph part by %.3g (relative, bound "
                          "%.3g) at step %d: %.6f vs %.6f", dts[d].name, fused, bound, s, e.loss[s], f.loss[s]);
        }
        ts_free(&e.s);
        ts_free(&f.s);
        ts_free(&g.s);
    }
}
END_TEST

START_TEST(test_gpt_nan_in_attention_found)
{
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        ts_session s = ts_tdbg("--batch", "break nan;run", "gpt",
                               "%s --steps 5 --warmup 1 --eval-every 0 --mode %s "
                               "--inject nan@op=h0/attn/softmax,step=2",
                               TINY, modes[m]);
        ts_stop_is(&s, 0, "stopped: step=2 phase=forward op=h0/attn/softmax type=Softmax reason=nan "
                          "tensor=h0/attn/softmax:out0 index=[0,0,0,0] origin=created");
        ck_assert_msg(s.status == 1, "%s: exit %d, want 1:\n%s", modes[m], s.status, s.out);
        ts_has(&s, "step=1 loss=");
        ts_lacks(&s, "step=2 loss=");
        ts_free(&s);
    }
}
END_TEST

/* A transformer debugged as a user expects: one breakpoint glob across the
 * layers, a head's slice of the scores printed with the values a dump of
 * the same run holds (the program is deterministic for a seed), the
 * mask's intended -inf never a stop, and eager against graph mode with
 * fused attention `same` in tdbg-diff. */
START_TEST(test_gpt_debug_across_layers)
{
    const char *args = TINY " --steps 2 --warmup 1 --eval-every 0";
    ts_session s = ts_tdbg("--batch", "break h*/attn/softmax if abs_max > 0.5;run;print h0/attn/scores:out0[0, 1, :4, :4];"
                           "continue", "gpt", "%s", args);
    ts_stop_is(&s, 0, "stopped: step=0 phase=forward op=h0/attn/softmax type=Softmax reason=condition "
                      "tensor=h0/attn/softmax:out0 index=- origin=-");
    /* the same glob, the next layer */
    ts_stop_is(&s, 1, "stopped: step=0 phase=forward op=h1/attn/softmax type=Softmax reason=condition "
                      "tensor=h1/attn/softmax:out0 index=- origin=-");
    float v[16];
    ts_printed(&s, "h0/attn/scores:out0 f32 [8,2,32,32] (slice [0,1,:4,:4] -> [4,4])", v, 16);

    char dir[512];
    snprintf(dir, sizeof dir, "%s/scores", scratch);
    gpt_run d = run_gpt("%s --dump 'dir=%s;ops=h0/attn/scores;steps=0'", args, dir);
    assert_ok(&d, "the dumped run");
    int64_t n;
    float *scores = ts_dumped(dir, "/h0/attn/scores/out0", &n);
    ck_assert_int_eq(n, 8 * 2 * 32 * 32);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            ts_assert_printed("h0/attn/scores:out0[0, 1, i, j]", v[i * 4 + j], scores[(1 * 32 + i) * 32 + j]);
    free(scores);
    ts_free(&d.s);
    ts_free(&s);
}
END_TEST

START_TEST(test_gpt_mask_never_stops)
{
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        ts_session s = ts_tdbg("--batch", "break nonfinite;run", "gpt", "%s --steps 3 --warmup 1 --eval-every 0 --mode %s",
                               TINY, modes[m]);
        ck_assert_msg(s.status == 0 && ts_count(&s, "\nstopped: ") == 0, "%s: the causal mask's -inf stopped "
                      "break nonfinite (exit %d):\n%s", modes[m], s.status, s.out);
        ts_has(&s, "step=2 loss=");
        ts_has(&s, "tdbg: the program finished\n");
        ts_free(&s);
    }
}
END_TEST

START_TEST(test_gpt_diff_eager_fused_same)
{
    const char *args = TINY " --steps 2 --warmup 1 --eval-every 0 --dump 'dir=%s/%s;ops=h*/attn/out,lm_head'";
    char spec[512];
    snprintf(spec, sizeof spec, "%s --mode eager", args);
    gpt_run e = run_gpt(spec, scratch, "eager");
    snprintf(spec, sizeof spec, "%s --mode graph", args);
    gpt_run g = run_gpt(spec, scratch, "graph");
    assert_ok(&e, "eager");
    assert_ok(&g, "graph");
    /* graph mode did fuse both layers' attention: run.h5 names the kernel */
    ts_session k = ts_sh("h5dump -d /ops '%s/graph/run.h5' | grep -c 'fused-attention: h1/attn/scores'", scratch);
    ck_assert_msg(atoi(k.out) > 0, "graph mode did not fuse attention:\n%s", k.out);
    ts_session d = ts_sh("'%s/dump/tdbg-diff' '%s/eager' '%s/graph'", TDBG_BUILDDIR, scratch, scratch);
    ts_status_is(&d, 0);
    ts_has(&d, "6 tensors compared in 2 steps: 0 diverge here, 0 inherited, 6 same");
    ts_free(&k);
    ts_free(&d);
    ts_free(&e.s);
    ts_free(&g.s);
}
END_TEST

/* At --amp O2 graph mode fuses the attention of both layers too (q, k, v
 * in f16: docs/amp.md "Rounding"), the casts around softmax inside the
 * fused kernel, and trains as eager mode does. */
START_TEST(test_gpt_amp_fused_attention)
{
    const char *args = TINY " --steps 3 --warmup 1 --eval-every 0 --amp O2 --dump 'dir=%s/%s;ops=h*/attn/out'";
    char spec[512];
    snprintf(spec, sizeof spec, "%s --mode graph", args);
    gpt_run g = run_gpt(spec, scratch, "graph");
    snprintf(spec, sizeof spec, "%s --mode eager", args);
    gpt_run e = run_gpt(spec, scratch, "eager");
    assert_ok(&g, "graph");
    assert_ok(&e, "eager");
    ts_session k = ts_sh("h5dump -d /ops '%s/graph/run.h5' | grep -c 'fused-attention: h1/attn/scores, "
                         "h1/attn/scale, h1/attn/mask, h1/attn/softmax/cast_in0, h1/attn/softmax, "
                         "h1/attn/dropout, h1/attn/out/cast_in0, h1/attn/out'",
                         scratch);
    ck_assert_msg(atoi(k.out) > 0, "graph mode at O2 did not fuse attention:\n%s", k.out);
    for (int s = 0; s < 3; s++)
        ck_assert_msg(g.logged[s] && fabsf(g.loss[s] - e.loss[s]) <= 1e-4f * fabsf(e.loss[s]),
                      "step %d: loss %g graph, %g eager", s, (double)g.loss[s], (double)e.loss[s]);
    ts_free(&k);
    ts_free(&e.s);
    ts_free(&g.s);
}
END_TEST

Suite *suite_gpt_example(void)
{
    Suite *s = suite_create("gpt_example");
    TCase *tc = tcase_create("train");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_gpt_learns);
    tcase_add_test(tc, test_gpt_dp_matches_single);
    tcase_add_test(tc, test_gpt_sampling_deterministic);
    tcase_add_test(tc, test_gpt_eager_graph_agree);
    tcase_add_test(tc, test_gpt_amp_eager_graph_agree);
    tcase_add_test(tc, test_gpt_amp_levels);
    suite_add_tcase(s, tc);
    tc = tcase_create("flags");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gpt_flags_refused);
    suite_add_tcase(s, tc);
    tc = tcase_create("checkpoint");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, scratch_up, scratch_down);
    tcase_add_test(tc, test_gpt_checkpoint_resumes_bit_identical);
    tcase_add_test(tc, test_gpt_checkpoint_damaged);
    tcase_add_test(tc, test_gpt_checkpoint_amp);
    tcase_add_test(tc, test_gpt_checkpoint_h5py);
    tcase_add_test(tc, test_gpt_checkpoint_across_backends);
    suite_add_tcase(s, tc);
    tc = tcase_create("debugger");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gpt_nan_in_attention_found);
    tcase_add_test(tc, test_gpt_mask_never_stops);
    suite_add_tcase(s, tc);
    tc = tcase_create("inspect");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, scratch_up, scratch_down);
    tcase_add_test(tc, test_gpt_debug_across_layers);
    tcase_add_test(tc, test_gpt_diff_eager_fused_same);
    tcase_add_test(tc, test_gpt_amp_fused_attention);
    suite_add_tcase(s, tc);
    return s;
}
