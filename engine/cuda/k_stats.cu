/* k_stats.cu — the fused statistics reduction (k_stats.h). */
#include "cuda/k_stats.h"

#include <cuda_fp16.h>

/* Element i of x as f32: f16 and bf16 widened exactly, i32 converted. */
static __device__ __forceinline__ float ks_load(const void *x, int type, long long i)
{
    switch (type) {
    case KS_F16:
        return __half2float(__ushort_as_half(((const unsigned short *)x)[i]));
    case KS_BF16:
        return __uint_as_float((unsigned)((const unsigned short *)x)[i] << 16);
    case KS_I32:
        return (float)((const int *)x)[i];
    default:
        return ((const float *)x)[i];
    }
}

/* The threads' shares in sh merged into sh[0], in a fixed tree. */
static __device__ void ks_block_merge(te_kstats *sh)
{
    for (int s = KS_THREADS / 2; s > 0; s >>= 1) {
        __syncthreads();
        if ((int)threadIdx.x < s)
            ks_merge(&sh[threadIdx.x], &sh[threadIdx.x + s]);
    }
    __syncthreads();
}

/* Level 1: block b's share of the grid-stride scan into parts[b]. */
template <int QUICK>
static __global__ void __launch_bounds__(KS_THREADS) ks_scan(const void *x, int type, long long n, te_kstats *parts)
{
    __shared__ te_kstats sh[KS_THREADS];
    te_kstats_acc a;
    ks_acc_init(&a);
    const long long stride = (long long)gridDim.x * KS_THREADS;
    for (long long i = (long long)blockIdx.x * KS_THREADS + threadIdx.x; i < n; i += stride)
        ks_acc_add(&a, ks_load(x, type, i), i, QUICK);
    sh[threadIdx.x] = ks_acc_close(&a);
    ks_block_merge(sh);
    if (threadIdx.x == 0)
        parts[blockIdx.x] = sh[0];
}

/* Level 2: one block merges the nparts shares, each thread a fixed strided
 * set in order, then the tree; the result goes to slot. */
static __global__ void __launch_bounds__(KS_THREADS) ks_final(const te_kstats *parts, int nparts, te_kstats *slot)
{
    __shared__ te_kstats sh[KS_THREADS];
    te_kstats k = ks_empty();
    for (int i = threadIdx.x; i < nparts; i += KS_THREADS)
        ks_merge(&k, &parts[i]);
    sh[threadIdx.x] = k;
    ks_block_merge(sh);
    if (threadIdx.x == 0)
        *slot = sh[0];
}

extern "C" cudaError_t ks_launch(const void *x, int type, long long n, int quick, te_kstats *parts,
                                 te_kstats *slot, cudaStream_t stream)
{
    const int blocks = ks_blocks(n);
    if (n > 0) {
        if (quick)
            ks_scan<1><<<blocks, KS_THREADS, 0, stream>>>(x, type, n, parts);
        else
            ks_scan<0><<<blocks, KS_THREADS, 0, stream>>>(x, type, n, parts);
    }
    ks_final<<<1, KS_THREADS, 0, stream>>>(parts, n > 0 ? blocks : 0, slot);
    return cudaGetLastError();
}
