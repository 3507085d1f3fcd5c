/*
 * k_blas_math.cuh — device functions shared by k_linear.cu and
 * k_attention.cu: f16/bf16 loads widened to f32, rounding to f16/bf16 with
 * the CPU's bits, and the CPU's exp and exact GELU (cpu_math.h).
 *
 * cpu_math.h's formulas are evaluated by the CPU without FMA contraction
 * (-std=c11); nvcc contracts a * b + c into an FMA by default, so they are
 * written here with __fmul_rn / __fadd_rn, which it never contracts: the
 * same operations in the same order, the same bits as the CPU's.
 */
#ifndef TE_K_BLAS_MATH_CUH
#define TE_K_BLAS_MATH_CUH

#include <cuda_fp16.h>
#include <stdint.h>

/* Element i of x, of dtype DT (0 f32, 1 f16, 2 bf16), as f32 (exact). */
template <int DT> __device__ __forceinline__ float kb_load(const void *x, int64_t i)
{
    if (DT == 0)
        return ((const float *)x)[i];
    const uint16_t h = ((const uint16_t *)x)[i];
    if (DT == 2)
        return __uint_as_float((uint32_t)h << 16);
    return __half2float(__ushort_as_half(h));
}

/* te_f32_to_bf16: nearest even; a NaN keeps its top bits, made quiet. */
__device__ __forceinline__ uint16_t kb_to_bf16(float f)
{
    const uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* te_f32_to_f16, line by line: nearest even, subnormals, a quiet NaN. */
__device__ __forceinline__ uint16_t kb_to_f16(float f)
{
    const uint32_t x = __float_as_uint(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u);
    if (ax >= 0x477ff000u)
        return sign | 0x7c00u;
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u)
            return sign;
        const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t half = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return sign | (uint16_t)half;
    }
    const uint32_t r = ax - 0x38000000u;
    uint32_t half = r >> 13;
    const uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
        half++;
    return sign | (uint16_t)half;
}

/* cpu_exp_nonpos: e^a for a <= 0, 0 below -87, NaN stays NaN. */
__device__ __forceinline__ float kb_exp_nonpos(float a)
{
    const float lo = -87.0f;
    const float ac = a < lo ? lo : a;
    const float shift = 12582912.0f;
    const float k = __fadd_rn(__fmul_rn(ac, 1.44269504088896341f), shift);
    const float n = __fsub_rn(k, shift);
    const float r = __fadd_rn(__fsub_rn(ac, __fmul_rn(n, 0.693359375f)), __fmul_rn(n, 2.12194440e-4f));
    float p = 1.0f / 5040.0f;
    p = __fadd_rn(__fmul_rn(p, r), 1.0f / 720.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f / 120.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f / 24.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f / 6.0f);
    p = __fadd_rn(__fmul_rn(p, r), 0.5f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    const uint32_t sb = (__float_as_uint(k) - 0x4b400000u + 127u) << 23;
    const float e = __fmul_rn(p, __uint_as_float(sb));
    return a < lo ? 0.0f : e;
}

/* cpu_norm_cdf: Phi(x) given e = exp(-x^2/2) (Abramowitz and Stegun 7.1.26). */
__device__ __forceinline__ float kb_norm_cdf(float x, float e)
{
    const float z = __fmul_rn(fabsf(x), 0.70710678118654752440f);
    const float t = __fdiv_rn(1.0f, __fadd_rn(1.0f, __fmul_rn(0.3275911f, z)));
    float q = 1.061405429f;
    q = __fsub_rn(__fmul_rn(q, t), 1.453152027f);
    q = __fadd_rn(__fmul_rn(q, t), 1.421413741f);
    q = __fsub_rn(__fmul_rn(q, t), 0.284496736f);
    q = __fadd_rn(__fmul_rn(q, t), 0.254829592f);
    const float tail = __fmul_rn(__fmul_rn(0.5f, __fmul_rn(q, t)), e);
    const float upper = __fsub_rn(1.0f, tail);
    return x < 0.0f ? tail : upper;
}

/* cpu_gelu: x Phi(x), the exact GELU. */
__device__ __forceinline__ float kb_gelu(float x)
{
    return __fmul_rn(x, kb_norm_cdf(x, kb_exp_nonpos(__fmul_rn(__fmul_rn(-0.5f, x), x))));
}

#endif
