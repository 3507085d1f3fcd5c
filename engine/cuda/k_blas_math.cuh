/*
 * k_blas_math.cuh — the typed load of k_linear.cu's and k_attention.cu's
 * kernels: element i of an f32, f16 or bf16 tensor widened to f32, the
 * dtype a template argument so each kernel is compiled once per dtype
 * (f16 through the hardware conversion, exact). The rest of their
 * per-element arithmetic (the CPU's exp and exact GELU) is k_math.h's.
 */
#ifndef TE_K_BLAS_MATH_CUH
#define TE_K_BLAS_MATH_CUH

#include "cuda/k_math.h"

#include <cuda_fp16.h>
#include <stdint.h>

/* Element i of x, of dtype DT (0 f32, 1 f16, 2 bf16), as f32 (exact). */
template <int DT> __device__ __forceinline__ float kb_load(const void *x, int64_t i)
{
    if (DT == 0)
        return ((const float *)x)[i];
    const uint16_t h = ((const uint16_t *)x)[i];
    if (DT == 2)
        return k_bf16_to_f32(h);
    return __half2float(__ushort_as_half(h));
}

#endif
