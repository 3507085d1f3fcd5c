/* cpu_math.h — exp and the exact (erf) GELU, written to vectorise.
 *
 * libm's expf and erff are scalar calls, and a loop that calls them runs one
 * element at a time. These are inline, branch-free (selects of values already
 * computed) and call nothing, so a loop over them vectorises. The engine
 * builds with -std=c11, where GCC does not contract a * b + c into an FMA:
 * a scalar call and every vector width round alike and give the same bits,
 * so eager kernels, fused graph kernels and CPUs with other vector units
 * agree exactly.
 */
#ifndef CPU_MATH_H
#define CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* A kernel built for AVX-512, for AVX2 (+FMA) and for the baseline; the
 * loader picks the widest the CPU has. An OpenMP loop's outlined body is not
 * cloned with its function: call a cloned kernel on CPU_CHUNK-element pieces
 * from the parallel loop instead. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES
#endif
#define CPU_CHUNK 4096

#define CPU_SQRT1_2 0.70710678118654752440f      /* 1/sqrt(2) */
#define CPU_INV_SQRT_2PI 0.39894228040143267794f /* 1/sqrt(2 pi) */

/* e^a for a <= 0 (softmax's shifted logits, GELU's -x^2/2); a NaN stays NaN.
 * a = n ln2 + r with |r| <= ln2/2 (ln2 split in two, Cody and Waite, so n ln2
 * loses no bits); e^r by its Taylor series to r^7 (the next term is below
 * 6e-9 relatively); 2^n made in the exponent bits. Below -87, where 2^n
 * would leave the normal floats, the result is 0 (libm gives a subnormal
 * under 1.7e-38 there). Within 2 ulp of e^a. */
static inline float cpu_exp_nonpos(float a)
{
    const float lo = -87.0f;
    const float ac = a < lo ? lo : a;
    const float shift = 12582912.0f;          /* 1.5 * 2^23: adding it rounds to an integer */
    const float k = ac * 1.44269504088896341f + shift;
    const float n = k - shift;
    const float r = (ac - n * 0.693359375f) + n * 2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t kb;
    memcpy(&kb, &k, sizeof kb);
    const uint32_t sb = (kb - 0x4b400000u + 127u) << 23; /* n + 127 in the exponent */
    float s;
    memcpy(&s, &sb, sizeof s);
    const float e = p * s;
    return a < lo ? 0.0f : e;
}

/* Phi(x), the standard normal CDF, given e = exp(-x^2/2). Phi(-|x|) =
 * erfc(|x|/sqrt 2)/2 by Abramowitz and Stegun, Handbook of Mathematical
 * Functions (1964), formula 7.1.26: erfc(z) = t (a1 + t (a2 + ... a5 t)) e^-z^2,
 * t = 1/(1 + p z), |error| <= 1.5e-7 (PyTorch's vectorised erf is the same
 * formula). The tail is computed directly, not as 1 + erf, so Phi of a
 * negative x keeps its relative accuracy. */
static inline float cpu_norm_cdf(float x, float e)
{
    const float z = fabsf(x) * CPU_SQRT1_2;
    const float t = 1.0f / (1.0f + 0.3275911f * z);
    float q = 1.061405429f;
    q = q * t - 1.453152027f;
    q = q * t + 1.421413741f;
    q = q * t - 0.284496736f;
    q = q * t + 0.254829592f;
    const float tail = 0.5f * (q * t) * e;
    const float upper = 1.0f - tail;
    return x < 0.0f ? tail : upper;
}

/* Exact GELU, x Phi(x), and its derivative Phi(x) + x phi(x). */
static inline float cpu_gelu(float x)
{
    return x * cpu_norm_cdf(x, cpu_exp_nonpos(-0.5f * x * x));
}

static inline float cpu_gelu_grad(float x)
{
    const float e = cpu_exp_nonpos(-0.5f * x * x);
    return cpu_norm_cdf(x, e) + x * (CPU_INV_SQRT_2PI * e);
}

#endif
