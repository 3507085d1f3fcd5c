/*
 * conv_sum.c — what graph mode's conv + add fusion gains (bench/conv.sh):
 * a residual block with a projection shortcut, y = relu(conv3x3(relu(
 * conv3x3(x))) + conv1x1(x)), 64 channels of 32 x 32, batch 32, forward
 * and backward, in graph mode with the fuse-sum pass and without it
 * (TE_PASS_FUSE_SUM disabled). The two alternate step by step, ROUNDS
 * rounds of STEPS steps each after 3 untimed; prints the median step of
 * each (min-max over rounds' medians), its plan's arena (the peak of its
 * temporaries) and the median of the rounds' ratios (without / with).
 *
 * usage: conv_sum [ROUNDS (5)] [THREADS (1)]
 */
#include "te.h"

#include "bench_util.h"

#define STEPS 10
#define WARM 3

typedef struct {
    te_tensor *w1, *w2, *wp;
} block;

static te_status step_fn(void *ctx, te_tensor *const *in, te_tensor **out)
{
    const block *b = ctx;
    te_tensor *h = te_relu(te_conv2d(in[0], b->w1, NULL, 1, 1));
    te_tensor *y = te_relu(te_add(te_conv2d(h, b->w2, NULL, 1, 1), te_conv2d(in[0], b->wp, NULL, 1, 0)));
    out[0] = te_mean(y, TE_ALL, false);
    return out[0] ? te_backward(out[0]) : te_error_code();
}

static void fail(const char *what)
{
    fprintf(stderr, "conv_sum: %s: %s\n", what, te_error());
    exit(1);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    const char *usage = "conv_sum [ROUNDS] [THREADS]";
    const int rounds = bench_arg(argc, argv, 1, 5, usage), threads = bench_arg(argc, argv, 2, 1, usage);
    if (rounds > 64) {
        fprintf(stderr, "conv_sum: at most 64 rounds\n");
        return 2;
    }
    if (te_init(&(te_config){ .seed = 1, .threads = threads }) != TE_OK)
        fail("te_init");
    block b = { te_param_new("w1", TE_F32, te_shape(64, 64, 3, 3)), te_param_new("w2", TE_F32, te_shape(64, 64, 3, 3)),
                te_param_new("wp", TE_F32, te_shape(64, 64, 1, 1)) };
    te_tensor *x = te_tensor_persistent(TE_F32, te_shape(32, 64, 32, 32));
    if (!b.w1 || !b.w2 || !b.wp || !x)
        fail("tensors");
    te_init_linear(b.w1, NULL);
    te_init_linear(b.w2, NULL);
    te_init_linear(b.wp, NULL);
    te_init_uniform(x, -1.0f, 1.0f);
    te_graph *g[2];
    for (int i = 0; i < 2; i++) /* 0: fused, 1: not */
        if (!(g[i] = te_graph_new(step_fn, &b, &(te_graph_opts){ .mode = TE_MODE_GRAPH, .n_inputs = 1,
                                                                  .n_outputs = 1,
                                                                  .disable = i ? TE_PASS_FUSE_SUM : 0 })))
            fail("te_graph_new");
    double med[2][64], ratio[64];
    for (int r = 0; r < rounds; r++) {
        double ms[2][STEPS];
        for (int s = 0; s < WARM + STEPS; s++)
            for (int i = 0; i < 2; i++) {
                te_tensor *out[1];
                te_zero_grad();
                te_step_begin();
                double t0 = bench_now_ms();
                if (te_graph_run(g[i], &x, out) != TE_OK)
                    fail("step");
                if (s >= WARM)
                    ms[i][s - WARM] = bench_now_ms() - t0;
                te_step_end();
            }
        for (int i = 0; i < 2; i++)
            med[i][r] = median(ms[i], STEPS);
        ratio[r] = med[1][r] / med[0][r];
    }
    const char *what[2] = { "with fuse-sum", "without" };
    printf("residual block, 64 ch 32x32, batch 32, %d thread%s, %d rounds of %d steps\n", threads,
           threads == 1 ? "" : "s", rounds, STEPS);
    for (int i = 0; i < 2; i++) {
        double lo = med[i][0], hi = med[i][0];
        for (int r = 1; r < rounds; r++) {
            lo = med[i][r] < lo ? med[i][r] : lo;
            hi = med[i][r] > hi ? med[i][r] : hi;
        }
        printf("  %-14s %.2f ms (%.2f-%.2f), arena %.1f MiB\n", what[i], median(med[i], rounds), lo, hi,
               (double)te_graph_stats_get(g[i]).arena_bytes / (1 << 20));
    }
    printf("  without / with: %.3f\n", median(ratio, rounds));
    for (int i = 0; i < 2; i++)
        te_graph_free(g[i]);
    te_tensor_free(x);
    te_shutdown();
    return 0;
}
