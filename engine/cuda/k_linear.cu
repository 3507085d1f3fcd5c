/*
 * k_linear.cu — the small kernels around matmul's and linear's GEMMs
 * (k_linear.h). Grid-stride loops; the column sums give each column to one
 * thread, which adds its rows in order (the CPU's order, the same bits);
 * the rounding counts are integers and a max, gathered with integer
 * atomics: the same result in any order.
 */
#include "cuda/k_blas_math.cuh"
#include "cuda/k_linear.h"

#define THREADS 256

/* Blocks for n elements, capped: grid-stride loops take the rest. */
static int blocks(int64_t n)
{
    int64_t b = (n + THREADS - 1) / THREADS;
    const int64_t cap = 132 * 32;
    return (int)(b < 1 ? 1 : b < cap ? b : cap);
}

static __global__ void round_kernel(const float *src, uint16_t *dst, int dtype, int64_t n, k_round_counts *c)
{
    __shared__ unsigned long long s_over[THREADS], s_under[THREADS], s_nz[THREADS];
    __shared__ unsigned int s_amax[THREADS];
    unsigned long long over = 0, under = 0, nz = 0;
    unsigned int amax = 0;
    const uint32_t infb = dtype == K_BF16 ? 0x7f80u : 0x7c00u;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float f = src[i];
        const uint16_t r = dtype == K_BF16 ? kb_to_bf16(f) : kb_to_f16(f);
        dst[i] = r;
        /* lowp.c's LOWP_COUNT */
        const uint32_t ax = __float_as_uint(f) & 0x7fffffffu;
        const bool fin = ax < 0x7f800000u, nzf = fin && ax != 0;
        const uint32_t rm = (uint32_t)r & 0x7fffu;
        nz += nzf;
        over += nzf && rm == infb;
        under += nzf && rm == 0;
        const uint32_t a = fin ? ax : 0;
        amax = a > amax ? a : amax;
    }
    const int t = threadIdx.x;
    s_over[t] = over, s_under[t] = under, s_nz[t] = nz, s_amax[t] = amax;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) {
            s_over[t] += s_over[t + h];
            s_under[t] += s_under[t + h];
            s_nz[t] += s_nz[t + h];
            s_amax[t] = s_amax[t + h] > s_amax[t] ? s_amax[t + h] : s_amax[t];
        }
        __syncthreads();
    }
    if (t == 0) {
        atomicAdd(&c->overflow, s_over[0]);
        atomicAdd(&c->underflow, s_under[0]);
        atomicAdd(&c->nonzero, s_nz[0]);
        atomicMax(&c->absmax_bits, s_amax[0]);
    }
}

extern "C" cudaError_t k_blas_round(const float *src, uint16_t *dst, int dtype, int64_t n, k_round_counts *dev,
                                    k_round_counts *host, cudaStream_t s)
{
    cudaError_t e = cudaMemsetAsync(dev, 0, sizeof *dev, s);
    if (e != cudaSuccess)
        return e;
    if (n > 0) {
        round_kernel<<<blocks(n), THREADS, 0, s>>>(src, dst, dtype, n, dev);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    if ((e = cudaMemcpyAsync(host, dev, sizeof *host, cudaMemcpyDeviceToHost, s)) != cudaSuccess)
        return e;
    return cudaStreamSynchronize(s);
}

template <int DT> static __global__ void widen_kernel(const uint16_t *src, float *dst, int64_t n, int add)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = kb_load<DT>(src, i);
        dst[i] = add ? dst[i] + v : v;
    }
}

extern "C" cudaError_t k_widen(const uint16_t *src, int dtype, float *dst, int64_t n, int add, cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    if (dtype == K_BF16)
        widen_kernel<K_BF16><<<blocks(n), THREADS, 0, s>>>(src, dst, n, add);
    else
        widen_kernel<K_F16><<<blocks(n), THREADS, 0, s>>>(src, dst, n, add);
    return cudaGetLastError();
}

template <int DT> static __global__ void bias_rows_kernel(float *y, const void *b, int64_t n, int64_t cols)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = kb_load<DT>(b, i % cols);
}

extern "C" cudaError_t k_bias_rows(float *y, const void *b, int dtype, int64_t rows, int64_t cols, cudaStream_t s)
{
    const int64_t n = rows * cols;
    if (n <= 0)
        return cudaSuccess;
    if (dtype == K_F32)
        bias_rows_kernel<K_F32><<<blocks(n), THREADS, 0, s>>>(y, b, n, cols);
    else if (dtype == K_F16)
        bias_rows_kernel<K_F16><<<blocks(n), THREADS, 0, s>>>(y, b, n, cols);
    else
        bias_rows_kernel<K_BF16><<<blocks(n), THREADS, 0, s>>>(y, b, n, cols);
    return cudaGetLastError();
}

/* One thread per column, its rows added in order (neighbouring threads
 * read neighbouring columns: coalesced). */
template <int DT>
static __global__ void col_sums_kernel(const void *dy, int64_t rows, int64_t cols, float *db, int acc)
{
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x) {
        float s = acc ? db[c] : 0.0f;
        for (int64_t r = 0; r < rows; r++)
            s += kb_load<DT>(dy, r * cols + c);
        db[c] = s;
    }
}

extern "C" cudaError_t k_col_sums(const void *dy, int dtype, int64_t rows, int64_t cols, float *db, int acc,
                                  cudaStream_t s)
{
    if (cols <= 0)
        return cudaSuccess;
    if (dtype == K_F32)
        col_sums_kernel<K_F32><<<blocks(cols), THREADS, 0, s>>>(dy, rows, cols, db, acc);
    else if (dtype == K_F16)
        col_sums_kernel<K_F16><<<blocks(cols), THREADS, 0, s>>>(dy, rows, cols, db, acc);
    else
        col_sums_kernel<K_BF16><<<blocks(cols), THREADS, 0, s>>>(dy, rows, cols, db, acc);
    return cudaGetLastError();
}

static __global__ void act_kernel(int act, float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = y[i];
        switch (act) {
        case K_ACT_RELU: y[i] = x < 0.0f ? 0.0f : x; break;
        case K_ACT_GELU: y[i] = kb_gelu(x); break;
        case K_ACT_TANH: y[i] = tanhf(x); break;
        default: y[i] = 1.0f / (1.0f + expf(-x)); break; /* K_ACT_SIGMOID */
        }
    }
}

extern "C" cudaError_t k_act_inplace(int act, float *y, int64_t n, cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    act_kernel<<<blocks(n), THREADS, 0, s>>>(act, y, n);
    return cudaGetLastError();
}
