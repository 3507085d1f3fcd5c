/*
 * k_cast.cu — conversions between f32, f16, bf16 and i32, with the counts
 * of what rounding to f16/bf16 did (te_round_stats' overflow, underflow,
 * nonzero and absmax). The per-element functions are k_math.h's, which
 * the host tests check against the CPU's bit for bit.
 */
#include "cuda/k_cast.h"

#define THREADS 256

#define blocks_for(n) k_blocks((n), THREADS)

static __device__ __forceinline__ float load_f32(const void *p, k_dtype dt, int64_t i)
{
    switch (dt) {
    case K_F16: return k_f16_to_f32(((const uint16_t *)p)[i]);
    case K_BF16: return k_bf16_to_f32(((const uint16_t *)p)[i]);
    case K_I32: return (float)((const int32_t *)p)[i]; /* to nearest, as C's conversion */
    default: return ((const float *)p)[i];
    }
}

/* cpu_shape.c's f32_to_i32: toward zero, saturated, NaN to 0. */
static __device__ __forceinline__ int32_t f32_to_i32(float v)
{
    if (v != v)
        return 0;
    if (v >= 2147483648.0f)
        return INT32_MAX;
    if (v <= -2147483648.0f)
        return INT32_MIN;
    return (int32_t)v;
}

static __global__ void convert_kernel(const void *src, k_dtype sdt, void *dst, k_dtype ddt, int64_t n, int acc,
                                      k_round_counts *counts)
{
    k_round_counts c = { 0, 0, 0, 0, 0 };
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = load_f32(src, sdt, i);
        if (acc)
            v = k_add(v, load_f32(dst, ddt, i));
        switch (ddt) {
        case K_F16: {
            const uint16_t r = k_f32_to_f16(v);
            ((uint16_t *)dst)[i] = r;
            k_round_count(k_f32_bits(v), r, 0x7c00u, &c);
            break;
        }
        case K_BF16: {
            const uint16_t r = k_f32_to_bf16(v);
            ((uint16_t *)dst)[i] = r;
            k_round_count(k_f32_bits(v), r, 0x7f80u, &c);
            break;
        }
        case K_I32: ((int32_t *)dst)[i] = f32_to_i32(v); break;
        default: ((float *)dst)[i] = v; break;
        }
    }
    if (!counts)
        return; /* uniform over the grid: no thread is left in a shuffle */
    for (int off = 16; off > 0; off >>= 1) {
        c.over += __shfl_down_sync(0xffffffffu, c.over, off);
        c.under += __shfl_down_sync(0xffffffffu, c.under, off);
        c.nonzero += __shfl_down_sync(0xffffffffu, c.nonzero, off);
        const unsigned int m = __shfl_down_sync(0xffffffffu, c.amax, off);
        c.amax = m > c.amax ? m : c.amax;
    }
    if ((threadIdx.x & 31) == 0 && c.nonzero) {
        atomicAdd(&counts->over, c.over);
        atomicAdd(&counts->under, c.under);
        atomicAdd(&counts->nonzero, c.nonzero);
        atomicMax(&counts->amax, c.amax);
    }
}

extern "C" cudaError_t k_convert(const void *src, k_dtype sdt, void *dst, k_dtype ddt, int64_t n, int acc,
                                 k_round_counts *counts, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    if (ddt != K_F16 && ddt != K_BF16)
        counts = NULL;
    convert_kernel<<<blocks_for(n), THREADS, 0, s>>>(src, sdt, dst, ddt, n, acc, counts);
    return cudaGetLastError();
}
