/*
 * gemm.c — every matrix product of the CPU backend goes through cpu_sgemm.
 *
 * OpenBLAS runs single-threaded and the product is split across the OpenMP
 * team instead, so the process has one thread pool: OpenBLAS's own threads
 * and OpenMP's would otherwise spin against each other on every call (on 2
 * cores that tripled the MLP step time).
 *
 * Where the engine is built with oneDNN, each block is oneDNN's sgemm:
 * 5-15% faster than OpenBLAS's on this project's shapes (the MLP's and the
 * GPT's layers, one thread; docs/benchmarks.md, "CPU GEMM"). Inside the
 * team's parallel region it runs on the calling thread alone, as OpenBLAS
 * does. TDBG_CPU_GEMM=openblas picks OpenBLAS (te_cpu_gemm says which).
 */
#include "cpu_kernels.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static int use_dnnl = -1; /* -1: TDBG_CPU_GEMM not read yet */

void te_cpu_gemm_dnnl_allow(bool on) { use_dnnl = on; }

static bool gemm_dnnl(void)
{
#ifdef HAVE_DNNL
    if (use_dnnl < 0) {
        const char *v = getenv("TDBG_CPU_GEMM");
        use_dnnl = !(v && strcmp(v, "openblas") == 0);
    }
    return use_dnnl;
#else
    return false;
#endif
}

const char *te_cpu_gemm(void) { return gemm_dnnl() ? "oneDNN sgemm" : "OpenBLAS sgemm"; }

/* Below this many multiply-adds a split costs more than it saves. */
#define SPLIT_MIN_MACS (1 << 18)

/* beta == 0 is done as a zeroing here and beta == 1 in OpenBLAS: its own
 * beta-scaling pass ran at a quarter of memset's speed (a fifth of a
 * weight-gradient product at batch 32). */
static void gemm_block(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc, bool dnnl)
{
#ifdef HAVE_DNNL
    if (dnnl && dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) ==
                    dnnl_success)
        return;
#else
    (void)dnnl;
#endif
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
    bool dnnl = gemm_dnnl();
    if (threads < 2 || (double)M * N * K < SPLIT_MIN_MACS) {
        gemm_block(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, dnnl);
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
                gemm_block(ta, tb, hi - lo, N, K, alpha, a, lda, B, ldb, beta, C + (int64_t)lo * ldc, ldc, dnnl);
            } else {
                const float *b = tb ? B + (int64_t)lo * ldb : B + lo;
                gemm_block(ta, tb, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc, dnnl);
            }
        }
    }
}
