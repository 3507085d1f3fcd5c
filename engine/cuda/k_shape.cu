/*
 * k_shape.cu — data movement: transpose, embedding, the in-place add of
 * accumulated gradients. Grid-stride loops over 64-bit indices; sums in a
 * fixed order, no float atomics.
 */
#include "cuda/k_shape.h"

#define THREADS 256

#define blocks_for(n) k_blocks((n), THREADS)

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- transpose ------------------------------------------------------------- */

static __global__ void transpose_kernel(const uint32_t *src, uint32_t *dst, k_tr_dims d, int64_t n)
{
    GRID_STRIDE(t, n) dst[t] = src[k_tr_source(d, t)];
}

static __global__ void transpose_add_kernel(const float *src, float *dst, k_tr_dims d, int64_t n)
{
    GRID_STRIDE(t, n) dst[t] = k_add(dst[t], src[k_tr_source(d, t)]);
}

extern "C" cudaError_t k_transpose(const void *src, void *dst, k_tr_dims d, int acc, cudaStream_t s)
{
    const int64_t n = d.pre * d.m0 * d.mid * d.m1 * d.post;
    if (n == 0)
        return cudaSuccess;
    if (acc)
        transpose_add_kernel<<<blocks_for(n), THREADS, 0, s>>>((const float *)src, (float *)dst, d, n);
    else
        transpose_kernel<<<blocks_for(n), THREADS, 0, s>>>((const uint32_t *)src, (uint32_t *)dst, d, n);
    return cudaGetLastError();
}

static __global__ void add_kernel(float *dst, const float *src, int64_t n)
{
    GRID_STRIDE(i, n) dst[i] = k_add(dst[i], src[i]);
}

extern "C" cudaError_t k_add_into(float *dst, const float *src, int64_t n, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    add_kernel<<<blocks_for(n), THREADS, 0, s>>>(dst, src, n);
    return cudaGetLastError();
}

/* ---- embedding ---------------------------------------------------------------- */

/* One thread per output element; with D = 0 one per row, to check it. */
static __global__ void embedding_forward_kernel(const float *w, const int32_t *idx, float *y, int64_t R,
                                                int64_t D, int64_t V, unsigned long long *flag)
{
    const int64_t cols = D ? D : 1;
    GRID_STRIDE(i, R * cols)
    {
        const int64_t r = i / cols, c = i % cols;
        const int64_t v = idx[r];
        if (v < 0 || v >= V) {
            if (c == 0)
                atomicMin(flag, (unsigned long long)r);
            if (D)
                y[i] = 0.0f;
            continue;
        }
        if (D)
            y[i] = w[v * D + c];
    }
}

extern "C" cudaError_t k_embedding_forward(const float *w, const int32_t *idx, float *y, int64_t R, int64_t D,
                                           int64_t V, unsigned long long *flag, cudaStream_t s)
{
    if (R == 0)
        return cudaSuccess;
    embedding_forward_kernel<<<blocks_for(R * (D ? D : 1)), THREADS, 0, s>>>(w, idx, y, R, D, V, flag);
    return cudaGetLastError();
}

/* The backward sorts (index, row) pairs as 64-bit keys, index in the high
 * half, by a bitonic network over the next power of two (padding ~0 sorts
 * last): the rows of one index end up together and in row order, which is
 * the order the CPU adds them in. */
static int64_t pow2_at_least(int64_t n)
{
    int64_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

extern "C" size_t k_embedding_backward_scratch(int64_t R) { return (size_t)pow2_at_least(R) * sizeof(uint64_t); }

static __global__ void pairs_kernel(const int32_t *idx, uint64_t *keys, int64_t R, int64_t n2)
{
    GRID_STRIDE(i, n2) keys[i] = i < R ? ((uint64_t)(uint32_t)idx[i] << 32) | (uint64_t)i : ~0ULL;
}

static __global__ void bitonic_kernel(uint64_t *keys, int64_t n2, int64_t j, int64_t k)
{
    GRID_STRIDE(i, n2)
    {
        const int64_t l = i ^ j;
        if (l <= i)
            continue;
        const uint64_t a = keys[i], b = keys[l];
        const bool up = (i & k) == 0;
        if (up ? a > b : a < b) {
            keys[i] = b;
            keys[l] = a;
        }
    }
}

/* One thread per (sorted position, column); the first position of each
 * index adds that index's rows in order. */
static __global__ void embedding_sum_kernel(const uint64_t *keys, const float *dy, float *dw, int64_t R,
                                            int64_t D, int64_t V)
{
    GRID_STRIDE(i, R * D)
    {
        const int64_t p = i / D, c = i % D;
        const uint64_t v = keys[p] >> 32;
        if ((p > 0 && (keys[p - 1] >> 32) == v) || v >= (uint64_t)V)
            continue;
        float sum = dw[(int64_t)v * D + c];
        for (int64_t e = p; e < R && (keys[e] >> 32) == v; e++)
            sum = k_add(sum, dy[(int64_t)(keys[e] & 0xffffffffu) * D + c]);
        dw[(int64_t)v * D + c] = sum;
    }
}

extern "C" cudaError_t k_embedding_backward(const float *dy, const int32_t *idx, float *dw, int64_t R,
                                            int64_t D, int64_t V, int acc, void *scratch, cudaStream_t s)
{
    cudaError_t e;
    if (!acc && (e = cudaMemsetAsync(dw, 0, (size_t)(V * D) * sizeof *dw, s)) != cudaSuccess)
        return e;
    if (R == 0 || D == 0)
        return cudaSuccess;
    uint64_t *keys = (uint64_t *)scratch;
    const int64_t n2 = pow2_at_least(R);
    const int g = blocks_for(n2);
    pairs_kernel<<<g, THREADS, 0, s>>>(idx, keys, R, n2);
    for (int64_t k = 2; k <= n2; k <<= 1)
        for (int64_t j = k >> 1; j > 0; j >>= 1)
            bitonic_kernel<<<g, THREADS, 0, s>>>(keys, n2, j, k);
    embedding_sum_kernel<<<blocks_for(R * D), THREADS, 0, s>>>(keys, dy, dw, R, D, V);
    return cudaGetLastError();
}
