/*
 * sgemm.c — the machine's matmul ceiling: cblas_sgemm GFLOP/s on N x N x N.
 *
 *   usage: sgemm [N [THREADS [REPS]]]      (1024, all cores, 10)
 *
 * Prints one line, `sgemm n=N threads=T gflops median=X min=X max=X`, over
 * REPS timed calls after one untimed call. A training step's achieved
 * GFLOP/s is read against this figure.
 */
#include "bench_util.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    static const char usage[] = "sgemm [N [THREADS [REPS]]]";
    int n = bench_arg(argc, argv, 1, 1024, usage);
    int threads = bench_arg(argc, argv, 2, (int)sysconf(_SC_NPROCESSORS_ONLN), usage);
    int reps = bench_arg(argc, argv, 3, 10, usage);
    openblas_set_num_threads(threads);

    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    double *gflops = malloc((size_t)reps * sizeof *gflops);
    if (!a || !b || !c || !gflops) {
        fprintf(stderr, "sgemm: out of memory for n=%d\n", n);
        return 2;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(i % 17) * 0.01f;
        b[i] = (float)(i % 13) * 0.01f;
    }
    for (int r = -1; r < reps; r++) {
        double t0 = bench_now_ms() / 1e3;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = bench_now_ms() / 1e3 - t0;
        if (r >= 0) /* the first call warms caches and starts the threads */
            gflops[r] = 2.0 * n * n * (double)n / dt * 1e-9;
    }
    qsort(gflops, (size_t)reps, sizeof *gflops, bench_cmp_double);
    double median = reps % 2 ? gflops[reps / 2] : 0.5 * (gflops[reps / 2 - 1] + gflops[reps / 2]);
    printf("sgemm n=%d threads=%d gflops median=%.1f min=%.1f max=%.1f\n", n, threads, median,
           gflops[0], gflops[reps - 1]);
    free(a);
    free(b);
    free(c);
    free(gflops);
    return 0;
}
