/*
 * lowp_linear.c — one bf16 Linear, forward and backward, through the
 * engine: the native kernels (oneDNN) or, with TDBG_NO_NATIVE_LOWP=1 in
 * the environment, the shadow path (f32 copies, OpenBLAS, rounding).
 *
 *   usage: lowp_linear [N K O [THREADS [REPS]]]      (128 1024 1024, 1, 20)
 *
 * Prints one line, `lowp_linear path=NAME n=N k=K o=O threads=T ms
 * median=X min=X max=X`, over REPS timed steps after two untimed ones. A
 * step is y = x @ w^T + b and its backward (dx, dw, db) onto gradients
 * that keep accumulating, as in gradient accumulation.
 */
#include "bench_util.h"
#include "te.h"

#include <stdio.h>
#include <stdlib.h>

/* A persistent bf16 tensor of small varied values. */
static te_tensor *filled(int ndim, const int64_t *shape, bool grad)
{
    te_tensor *t = te_tensor_persistent(TE_BF16, ndim, shape);
    for (int64_t i = 0; i < t->numel; i++)
        te_set(t, i, (float)((i * 7919) % 201 - 100) * 0.001f);
    t->requires_grad = grad;
    return t;
}

int main(int argc, char **argv)
{
    static const char usage[] = "lowp_linear [N K O [THREADS [REPS]]]";
    int n = bench_arg(argc, argv, 1, 128, usage), k = bench_arg(argc, argv, 2, 1024, usage);
    int o = bench_arg(argc, argv, 3, 1024, usage);
    int threads = bench_arg(argc, argv, 4, 1, usage), reps = bench_arg(argc, argv, 5, 20, usage);
    if (te_init(&(te_config){ .seed = 1, .threads = threads }) != TE_OK) {
        fprintf(stderr, "lowp_linear: %s\n", te_error());
        return 1;
    }
    te_tensor *x = filled(te_shape(n, k), true), *w = filled(te_shape(o, k), true);
    te_tensor *b = filled(te_shape(o), true), *dy = filled(te_shape(n, o), false);
    double *ms = malloc((size_t)reps * sizeof *ms);
    for (int r = -2; r < reps; r++) {
        double t0 = bench_now_ms();
        te_tensor *y = te_linear(x, w, b);
        if (!y || te_backward_with(y, dy) != TE_OK) {
            fprintf(stderr, "lowp_linear: %s\n", te_error());
            return 1;
        }
        te_tape_reset();
        if (r >= 0) /* the first two compile oneDNN's kernels and warm the caches */
            ms[r] = bench_now_ms() - t0;
    }
    qsort(ms, (size_t)reps, sizeof *ms, bench_cmp_double);
    double median = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    const char *path = te_lowp_native() ? "native" : "shadow";
    printf("lowp_linear path=%s n=%d k=%d o=%d threads=%d ms median=%.3f min=%.3f max=%.3f\n", path, n, k,
           o, te_threads(), median, ms[0], ms[reps - 1]);
    te_tensor *t[] = { x, w, b, dy };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        te_tensor_free(t[i]);
    free(ms);
    te_shutdown();
    return 0;
}
