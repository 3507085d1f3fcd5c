/*
 * provenance.c — what batch provenance and the data check cost the
 * training thread (bench/provenance.sh, issue 23): trains examples/mlp's
 * model (784-H-H-10, H = 1024 as the example's, batch 128, SGD with
 * momentum, blobs data through a shuffling loader with WORKERS workers) in
 * three configurations, each once per round in an order that rotates from
 * round to round:
 *
 *   off    provenance off (te_provenance_enable(false)), no data check
 *   prov   provenance on (the default), no data check
 *   check  provenance on and the full data check: nonfinite, label, empty,
 *          constant, above 1e3 and below -1e3 (bounds no blob value
 *          reaches, so every value is looked at)
 *
 * A round is one engine (te_init .. te_shutdown): WARM steps, then CYCLES
 * cycles, each running every configuration for a block of BLOCK timed
 * steps, in an order that rotates from cycle to cycle and round to round.
 * Without workers the check runs in te_loader_next, so a configuration
 * takes effect at once: blocks of 2 steps, 20 cycles. With workers, a block
 * starts with 2 x WORKERS + 1 untimed steps (the batches its workers had
 * queued under the previous check are checked again in the caller): blocks
 * of 10 steps, 4 cycles. The training thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID) and the wall time are taken around each
 * block's timed steps and summed per configuration over the round. The
 * time a step waits for a worker's batch is in the wall time, not in the
 * CPU time. STEPS sets the timed steps per configuration per round
 * (CYCLES = STEPS / BLOCK).
 *
 * Prints one `round:` line per round (ms per step of each configuration,
 * CPU and wall), then per configuration the median and min-max over rounds
 * of its ratio against off in the same round, as a percentage
 * (prov/off - 1); then `direct:` what the additions cost when timed alone
 * on this model's batch (128 x 784 floats): te_data_check_rows with the
 * full check, and te_batch_publish without a check (the record's copy of
 * the indices and the hooks' call), in microseconds per batch, median of
 * 9 runs of 200, and as a share of off's median CPU ms per step.
 * Ends with status 1 when a batch's record was missing, or checked when it
 * should not be, or not checked or not clean when it should.
 *
 * usage: provenance [ROUNDS (7)] [THREADS (1)] [WORKERS (0)] [HIDDEN (1024)] [STEPS (40)]
 */
#include "te.h"

#include "bench_util.h"

#include <string.h>

#define BATCH 128
#define WARM 10
#define MAX_ROUNDS 64

enum { OFF, PROV, CHECK, NCFG };
static const char *const cfg_name[NCFG] = { "off", "prov", "check" };

typedef struct {
    te_tensor *w[3], *b[3];
} mlp;

static void fail(const char *what)
{
    fprintf(stderr, "provenance: %s: %s\n", what, te_error());
    exit(1);
}

static te_status step_of(const mlp *m, te_optim *opt, te_loader *l)
{
    te_step_begin();
    te_tensor *x, *y;
    te_status st = te_loader_next(l, &x, &y);
    for (int k = 0; k < 3 && st == TE_OK; k++) {
        x = te_linear(x, m->w[k], m->b[k]);
        if (k < 2)
            x = te_relu(x);
        if (!x)
            st = te_error_code();
    }
    if (st == TE_OK) {
        te_zero_grad();
        te_tensor *loss = te_cross_entropy(x, y);
        st = loss ? te_backward(loss) : te_error_code();
    }
    if (st == TE_OK)
        st = te_optim_step(opt);
    te_step_end();
    return st;
}

static void run_steps(const mlp *m, te_optim *opt, te_loader *l, int n)
{
    for (int i = 0; i < n; i++)
        if (step_of(m, opt, l) != TE_OK)
            fail("step");
}

static double thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void set_config(int c)
{
    static const te_data_check full = { .nonfinite = true, .label = true, .empty = true, .constant = true,
                                        .above = true, .below = true, .hi = 1e3f, .lo = -1e3f };
    te_provenance_enable(c != OFF);
    te_data_check_set(c == CHECK ? &full : NULL);
}

/* argv[i] as an integer in [lo, 65536], def when absent. */
static int arg(int argc, char **argv, int i, int def, int lo)
{
    if (argc <= i)
        return def;
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*end || v < lo || v > 1 << 16) {
        fprintf(stderr, "provenance: bad argument '%s'\nusage: provenance [ROUNDS] [THREADS] [WORKERS] [HIDDEN] "
                        "[STEPS]\n", argv[i]);
        exit(2);
    }
    return (int)v;
}

/* Median, min and max of v[0..n-1] (sorts v). */
static void stats(double *v, int n, double out[3])
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    out[0] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    out[1] = v[0];
    out[2] = v[n - 1];
}

/* The last batch's record after a block of configuration c: there and
 * clean, checked with the check only; 0 when it is as it should be. */
static int verify(int c, int r)
{
    if (c == OFF)
        return 0;
    const te_batch *b = te_batch_count() ? te_batch_at(te_batch_count() - 1) : NULL;
    const char *why = !b || b->step != te_step()     ? "missing"
                      : b->checked != (c == CHECK)   ? "checked when it should not be, or not checked"
                      : b->finding.issue != TE_DATA_OK ? "not clean"
                                                       : NULL;
    if (why)
        fprintf(stderr, "provenance: round %d, %s: the last batch's record is %s\n", r, cfg_name[c], why);
    return why != NULL;
}

/* What the check and a record cost alone on one batch of d: *check_us,
 * *publish_us per batch, median of 9 runs of 200. Needs an engine. */
static void direct(const te_dataset *d, double *check_us, double *publish_us)
{
    enum { N = 200, RUNS = 9 };
    const int64_t numel = (int64_t)d->shape[0];
    float *x = malloc((size_t)(BATCH * numel) * sizeof *x);
    int32_t *y = malloc(BATCH * sizeof *y);
    int64_t index[BATCH];
    if (!x || !y)
        fail("out of memory");
    for (int64_t r = 0; r < BATCH; r++) {
        index[r] = r * 97;
        d->get(d, index[r], x + r * numel, y + r);
    }
    const te_data_check full = { .nonfinite = true, .label = true, .empty = true, .constant = true,
                                 .above = true, .below = true, .hi = 1e3f, .lo = -1e3f };
    te_tensor *tx = te_tensor_from(TE_F32, 2, (const int64_t[]){ BATCH, numel }, x);
    te_tensor *ty = tx ? te_tensor_from(TE_I32, 1, (const int64_t[]){ BATCH }, y) : NULL;
    if (!ty)
        fail("batch tensors");
    double t[2][RUNS];
    volatile int64_t sink = 0;
    te_provenance_enable(true);
    te_data_check_set(NULL);
    for (int k = 0; k < RUNS; k++) {
        te_data_finding f;
        double t0 = bench_now_ms();
        for (int i = 0; i < N; i++) {
            te_data_check_rows(&full, x, y, BATCH, numel, d->n_classes, &f);
            sink += f.bad_rows;
        }
        t[0][k] = (bench_now_ms() - t0) * 1e3 / N;
        t0 = bench_now_ms();
        for (int i = 0; i < N; i++)
            if (te_batch_publish(d, index, BATCH, tx, ty) != TE_OK)
                fail("te_batch_publish");
        t[1][k] = (bench_now_ms() - t0) * 1e3 / N;
    }
    if (sink)
        fail("the direct check found an issue");
    qsort(t[0], RUNS, sizeof(double), bench_cmp_double);
    qsort(t[1], RUNS, sizeof(double), bench_cmp_double);
    *check_us = t[0][RUNS / 2];
    *publish_us = t[1][RUNS / 2];
    free(x);
    free(y);
}

int main(int argc, char **argv)
{
    const int rounds = arg(argc, argv, 1, 7, 1), threads = arg(argc, argv, 2, 1, 1);
    const int workers = arg(argc, argv, 3, 0, 0), hidden = arg(argc, argv, 4, 1024, 1);
    const int steps = arg(argc, argv, 5, 40, 1);
    const int block = workers ? 10 : 2, settle = workers ? 2 * workers + 1 : 0;
    const int cycles = (steps + block - 1) / block;
    if (rounds > MAX_ROUNDS) {
        fprintf(stderr, "provenance: at most %d rounds\n", MAX_ROUNDS);
        return 2;
    }
    double cpu[NCFG][MAX_ROUNDS], wall[NCFG][MAX_ROUNDS], check_us = 0, publish_us = 0;
    int bad = 0;
    for (int r = 0; r < rounds; r++) {
        if (te_init(&(te_config){ .seed = 1, .threads = threads }) != TE_OK)
            fail("te_init");
        const int64_t dims[] = { 784, hidden, hidden, 10 };
        mlp m;
        char name[32];
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "fc%d.weight", k + 1);
            m.w[k] = te_param_new(name, TE_F32, te_shape(dims[k + 1], dims[k]));
            snprintf(name, sizeof name, "fc%d.bias", k + 1);
            m.b[k] = te_param_new(name, TE_F32, te_shape(dims[k + 1]));
            if (!m.w[k] || !m.b[k])
                fail("parameters");
            te_init_linear(m.w[k], m.b[k]);
        }
        te_dataset *d = te_dataset_blobs(1 << 14, 784, 10, 1);
        te_loader *l = d ? te_loader_new(d, &(te_loader_opts){ .batch = BATCH, .shuffle = true, .workers = workers })
                         : NULL;
        te_optim *opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.01f, .momentum = 0.9f });
        if (!l || !opt)
            fail("set-up");
        set_config(OFF);
        run_steps(&m, opt, l, WARM);
        for (int c = 0; c < NCFG; c++)
            cpu[c][r] = wall[c][r] = 0;
        for (int cy = 0; cy < cycles; cy++)
            for (int i = 0; i < NCFG; i++) {
                const int c = (r + cy + i) % NCFG;
                set_config(c);
                run_steps(&m, opt, l, settle);
                const double c0 = thread_cpu_ms(), w0 = bench_now_ms();
                run_steps(&m, opt, l, block);
                cpu[c][r] += thread_cpu_ms() - c0;
                wall[c][r] += bench_now_ms() - w0;
                bad |= verify(c, r);
            }
        for (int c = 0; c < NCFG; c++) {
            cpu[c][r] /= cycles * block;
            wall[c][r] /= cycles * block;
        }
        if (r == rounds - 1)
            direct(d, &check_us, &publish_us);
        set_config(OFF);
        te_loader_free(l);
        te_dataset_free(d);
        te_optim_free(opt);
        te_shutdown();
        printf("round: r=%d", r);
        for (int c = 0; c < NCFG; c++)
            printf(" %s_cpu_ms=%.3f", cfg_name[c], cpu[c][r]);
        for (int c = 0; c < NCFG; c++)
            printf(" %s_wall_ms=%.3f", cfg_name[c], wall[c][r]);
        printf("\n");
        fflush(stdout);
    }
    printf("provenance: hidden=%d threads=%d workers=%d rounds=%d steps=%d block=%d settle=%d\n", hidden, threads,
           workers, rounds, cycles * block, block, settle);
    double off_cpu = 0;
    for (int c = 0; c < NCFG; c++) {
        double v[MAX_ROUNDS], s[2][3];
        for (int k = 0; k < 2; k++) {
            double (*t)[MAX_ROUNDS] = k ? wall : cpu;
            for (int r = 0; r < rounds; r++)
                v[r] = c == OFF ? t[OFF][r] : (t[c][r] / t[OFF][r] - 1) * 100;
            stats(v, rounds, s[k]);
        }
        if (c == OFF) {
            off_cpu = s[0][0];
            printf("provenance: config=off cpu_ms median=%.3f min=%.3f max=%.3f wall_ms median=%.3f min=%.3f "
                   "max=%.3f\n", s[0][0], s[0][1], s[0][2], s[1][0], s[1][1], s[1][2]);
        } else {
            printf("provenance: config=%s cpu_pct median=%+.2f min=%+.2f max=%+.2f wall_pct median=%+.2f min=%+.2f "
                   "max=%+.2f\n", cfg_name[c], s[0][0], s[0][1], s[0][2], s[1][0], s[1][1], s[1][2]);
        }
    }
    printf("direct: check_us=%.1f publish_us=%.2f check_pct=%.2f publish_pct=%.3f\n", check_us, publish_us,
           check_us / 1e3 / off_cpu * 100, publish_us / 1e3 / off_cpu * 100);
    return bad;
}
