/*
 * gemm.c — every matrix product of the CPU backend goes through cpu_sgemm.
 *
 * OpenBLAS runs single-threaded and the product is split across the OpenMP
 * team instead, so the process has one thread pool: OpenBLAS's own threads
 * and OpenMP's would otherwise spin against each other on every call (on 2
 * cores that tripled the MLP step time).
 */
#include "cpu_kernels.h"

#include <cblas.h>
#include <omp.h>
#include <string.h>

/* Below this many multiply-adds a split costs more than it saves. */
#define SPLIT_MIN_MACS (1 << 18)

/* beta == 0 is done as a zeroing here and beta == 1 in OpenBLAS: its own
 * beta-scaling pass ran at a quarter of memset's speed (a fifth of a
 * weight-gradient product at batch 32). */
static void gemm_block(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc)
{
    if (beta == 0.0f) {
        for (int i = 0; i < M; i++)
            memset(C + (int64_t)i * ldc, 0, (size_t)N * sizeof *C);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void cpu_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc)
{
    int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (threads < 2 || (double)M * N * K < SPLIT_MIN_MACS) {
        gemm_block(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split the larger of M and N into one contiguous slab per thread; each
     * slab is an ordinary sub-matrix of C with the same leading dimension. */
    bool by_rows = M >= N;
    int len = by_rows ? M : N;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int lo = (int)((int64_t)len * t / nt), hi = (int)((int64_t)len * (t + 1) / nt);
        if (hi > lo) {
            if (by_rows) {
                const float *a = ta ? A + lo : A + (int64_t)lo * lda;
                gemm_block(ta, tb, hi - lo, N, K, alpha, a, lda, B, ldb, beta, C + (int64_t)lo * ldc, ldc);
            } else {
                const float *b = tb ? B + (int64_t)lo * ldb : B + lo;
                gemm_block(ta, tb, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
            }
        }
    }
}
