/*
 * rewind_latency.c — what a rewind costs (bench/record.sh): a program that
 * takes part in time travel trains examples/mlp's model (784-1024-1024-10,
 * batch 128, SGD with momentum, blobs data through a loader) with
 * recording a snapshot every 20 steps (the default's base, given so that
 * the default's stretch cannot move the snapshots), and at step 79
 * rewinds to 60 + K for K in 0, 5, 10, 19: the restore of the snapshot of
 * step 60 (the te_step_begin that puts it back) and the replay of the K
 * silent steps before the target, each timed, ROUNDS times. Prints one
 * line per K: median and min-max of restore and replay in ms, and the
 * median step for scale; then the snapshot's bytes.
 *
 * usage: rewind_latency [ROUNDS (5)] [THREADS (1)]
 */
#include "te.h"

#include "bench_util.h"

#include <string.h>

#define STEPS 80
#define BATCH 128

typedef struct {
    te_tensor *w[3], *b[3];
} mlp;

static te_status step_of(const mlp *m, te_optim *opt, te_loader *l)
{
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
    return st == TE_OK ? te_optim_step(opt) : st;
}

static void fail(const char *what)
{
    fprintf(stderr, "rewind_latency: %s: %s\n", what, te_error());
    exit(1);
}

int main(int argc, char **argv)
{
    const char *usage = "rewind_latency [ROUNDS] [THREADS]";
    const int rounds = bench_arg(argc, argv, 1, 5, usage), threads = bench_arg(argc, argv, 2, 1, usage);
    static const int ks[] = { 0, 5, 10, 19 };
    enum { NK = sizeof ks / sizeof ks[0] };
    double restore[NK][64], replay[NK][64], step_ms[64];
    size_t snap_bytes = 0;
    if (rounds > 64) {
        fprintf(stderr, "rewind_latency: at most 64 rounds\n");
        return 2;
    }
    for (int r = 0; r < rounds; r++) {
        if (te_init(&(te_config){ .seed = 1, .threads = threads }) != TE_OK)
            fail("te_init");
        const int64_t dims[] = { 784, 1024, 1024, 10 };
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
        te_loader *l = d ? te_loader_new(d, &(te_loader_opts){ .batch = BATCH, .shuffle = true }) : NULL;
        te_optim *opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.01f, .momentum = 0.9f });
        if (!l || !opt)
            fail("set-up");
        int64_t s = 0; /* the loop's counter: a restore puts it back */
        te_record_host("loop", &s, sizeof s);
        if (te_record_start(&(te_record_opts){ .every = TE_RECORD_EVERY }) != TE_OK)
            fail("te_record_start");
        int k = 0;          /* the rewind being timed (not in the region) */
        double t_rs = -1;   /* when its restore ended; -1: none under way */
        double steps_total = 0;
        int steps_timed = 0;
        for (s = 0; s < STEPS || te_rewind_pending(); s++) {
            const bool restoring = te_rewind_pending();
            const double t0 = bench_now_ms();
            te_step_begin();
            const double t1 = bench_now_ms();
            if (restoring) {
                restore[k][r] = t1 - t0;
                t_rs = t1;
            }
            if (t_rs >= 0 && !te_rewind_fast_forward()) { /* the target's begin: the replay is behind */
                replay[k][r] = restoring ? 0 : t0 - t_rs;
                t_rs = -1;
                k++;
            }
            const te_status st = step_of(&m, opt, l);
            te_step_end();
            if (st != TE_OK)
                fail("step");
            if (k == 0 && s >= 20) { /* the first pass, after warm-up */
                steps_total += bench_now_ms() - t0;
                steps_timed++;
            }
            if (s == STEPS - 1 && k < NK && te_rewind(60 + ks[k]) != TE_OK)
                fail("te_rewind");
        }
        step_ms[r] = steps_total / steps_timed;
        te_record_entry e[8];
        if (te_record_list(e, 8) > 3)
            snap_bytes = e[3].bytes;
        te_loader_free(l);
        te_dataset_free(d);
        te_optim_free(opt);
        te_shutdown();
    }
    qsort(step_ms, (size_t)rounds, sizeof *step_ms, bench_cmp_double);
    printf("rewind: step_ms median=%.3f threads=%d rounds=%d snapshot_bytes=%zu\n", step_ms[rounds / 2], threads,
           rounds, snap_bytes);
    for (int i = 0; i < NK; i++) {
        qsort(restore[i], (size_t)rounds, sizeof(double), bench_cmp_double);
        qsort(replay[i], (size_t)rounds, sizeof(double), bench_cmp_double);
        printf("rewind: k=%d restore_ms median=%.3f min=%.3f max=%.3f replay_ms median=%.3f min=%.3f max=%.3f\n",
               ks[i], restore[i][rounds / 2], restore[i][0], restore[i][rounds - 1], replay[i][rounds / 2],
               replay[i][0], replay[i][rounds - 1]);
    }
    return 0;
}
