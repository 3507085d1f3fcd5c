/*
 * k_math.h — the per-element arithmetic of the CUDA kernels, written once
 * for the device and the host: dropout's counter-based mask, f32 to
 * f16/bf16 rounding and what it did, the widening back, exact GELU.
 *
 * Valid C11 and CUDA C++. In a .cu file every function is __host__
 * __device__; in C (tests/test_cuda_elementwise.c) they are plain static
 * inline functions, so a test on a machine without a GPU checks the very
 * code the kernels run against the CPU backend's (te_internal.h's
 * te_dropout_kept, tensor.c's te_f32_to_f16, cpu_math.h's cpu_gelu) bit
 * for bit.
 *
 * Products and sums go through k_mul/k_add: on the device they are
 * __fmul_rn/__fadd_rn, which nvcc never contracts into an FMA, so the
 * device rounds each step as the CPU does (the engine builds with
 * -std=c11, where GCC does not contract either) and gives the same bits.
 */
#ifndef K_MATH_H
#define K_MATH_H

#include <stdint.h>
#ifndef __CUDACC__
#include <math.h>
#include <stdbool.h>
#include <string.h>
#endif

#ifdef __CUDACC__
#define K_HD static inline __host__ __device__
#else
#define K_HD static inline
#endif

/* Blocks for a grid-stride loop over n elements (cuda_rt.c's
 * te_cuda_blocks, for the launchers): enough to fill an H200 several
 * times over, at least 1. */
K_HD int k_blocks(int64_t n, int threads)
{
    const int64_t cap = 132 * 32;
    int64_t b = (n + threads - 1) / threads;
    if (b < 1)
        b = 1;
    return (int)(b < cap ? b : cap);
}

K_HD uint32_t k_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

K_HD float k_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

K_HD float k_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

K_HD float k_add(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

K_HD float k_sub(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

/* ---- dropout's mask (te_internal.h: te_mix64, te_rand_key,
 * te_dropout_threshold, te_dropout_kept; the same constants) ------------- */

#define K_RAND_GAMMA 0x9e3779b97f4a7c15ULL

K_HD uint64_t k_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

K_HD uint64_t k_rand_key(uint64_t seed, uint64_t stream)
{
    return k_mix64(k_mix64(seed + K_RAND_GAMMA) ^ (stream * 0xd6e8feb86659fd93ULL));
}

/* ceil(p * 2^24) << 40: element i is kept when its draw is at least this. */
K_HD uint64_t k_dropout_threshold(float p)
{
    const float t = p * 16777216.0f;
    uint64_t u = (uint64_t)t;
    return (u + ((float)u < t)) << 40;
}

K_HD bool k_dropout_kept(uint64_t key, uint64_t threshold, int64_t i)
{
    return k_mix64(key + (uint64_t)i * K_RAND_GAMMA) >= threshold;
}

/* ---- f16 and bf16 (tensor.c's te_f32_to_f16 and friends) --------------- */

/* f32 to f16, to nearest even: Inf beyond 65504, subnormals kept, a NaN
 * quiet with its top payload bits. */
K_HD uint16_t k_f32_to_f16(float f)
{
    const uint32_t x = k_f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
    if (ax >= 0x477ff000u) /* rounds to beyond 65504 */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* subnormal or zero in f16 */
        if (ax < 0x33000000u) /* below half the smallest subnormal */
            return sign;
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e; /* 14..24 */
        uint32_t half = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    const uint32_t r = ax - 0x38000000u; /* rebias, then 10 mantissa bits */
    uint32_t half = r >> 13;
    const uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
        half++;
    return (uint16_t)(sign | half);
}

/* f16 to f32 exactly; a NaN keeps its payload (a signalling one stays so). */
K_HD float k_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return k_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        const float v = k_mul((float)m, 5.9604644775390625e-8f); /* m * 2^-24: exact */
        return sign ? -v : v;
    }
    return k_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

/* f32 to bf16, to nearest even; a NaN keeps its top bits, made quiet. */
K_HD uint16_t k_f32_to_bf16(float f)
{
    const uint32_t x = k_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

K_HD float k_bf16_to_f32(uint16_t h) { return k_bits_f32((uint32_t)h << 16); }

/* What rounding x (f32 bits) to r (f16/bf16 bits) did, as lowp.c's
 * LOWP_COUNT: infb is the dtype's Inf without its sign; absmax kept as the
 * bits of the largest finite |x| (non-negative floats order as their bits). */
typedef struct k_round_counts {
    unsigned long long over, under, nonzero;
    unsigned int amax, pad;
} k_round_counts;

K_HD void k_round_count(uint32_t x, uint32_t r, uint32_t infb, k_round_counts *c)
{
    const uint32_t ax = x & 0x7fffffffu;
    const bool fin = ax < 0x7f800000u, nz = fin && ax != 0;
    const uint32_t rm = r & 0x7fffu;
    c->nonzero += nz;
    c->over += nz && rm == infb;
    c->under += nz && rm == 0;
    const uint32_t a = fin ? ax : 0;
    c->amax = a > c->amax ? a : c->amax;
}

/* ---- exact GELU (cpu_math.h: cpu_exp_nonpos, cpu_norm_cdf, cpu_gelu) ----
 * The same constants and the same order of operations. */

K_HD float k_exp_nonpos(float a)
{
    const float lo = -87.0f;
    const float ac = a < lo ? lo : a;
    const float shift = 12582912.0f;
    const float k = k_add(k_mul(ac, 1.44269504088896341f), shift);
    const float n = k_sub(k, shift);
    const float r = k_add(k_sub(ac, k_mul(n, 0.693359375f)), k_mul(n, 2.12194440e-4f));
    float p = 1.0f / 5040.0f;
    p = k_add(k_mul(p, r), 1.0f / 720.0f);
    p = k_add(k_mul(p, r), 1.0f / 120.0f);
    p = k_add(k_mul(p, r), 1.0f / 24.0f);
    p = k_add(k_mul(p, r), 1.0f / 6.0f);
    p = k_add(k_mul(p, r), 0.5f);
    p = k_add(k_mul(p, r), 1.0f);
    p = k_add(k_mul(p, r), 1.0f);
    const uint32_t sb = (k_f32_bits(k) - 0x4b400000u + 127u) << 23;
    const float e = k_mul(p, k_bits_f32(sb));
    return a < lo ? 0.0f : e;
}

K_HD float k_norm_cdf(float x, float e)
{
    const float z = k_mul(fabsf(x), 0.70710678118654752440f);
    const float t = 1.0f / k_add(1.0f, k_mul(0.3275911f, z));
    float q = 1.061405429f;
    q = k_sub(k_mul(q, t), 1.453152027f);
    q = k_add(k_mul(q, t), 1.421413741f);
    q = k_sub(k_mul(q, t), 0.284496736f);
    q = k_add(k_mul(q, t), 0.254829592f);
    const float tail = k_mul(k_mul(0.5f, k_mul(q, t)), e);
    const float upper = k_sub(1.0f, tail);
    return x < 0.0f ? tail : upper;
}

K_HD float k_gelu(float x)
{
    return k_mul(x, k_norm_cdf(x, k_exp_nonpos(k_mul(k_mul(-0.5f, x), x))));
}

K_HD float k_gelu_grad(float x)
{
    const float e = k_exp_nonpos(k_mul(k_mul(-0.5f, x), x));
    return k_add(k_norm_cdf(x, e), k_mul(x, k_mul(0.39894228040143267794f, e)));
}

#endif
