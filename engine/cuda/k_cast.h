/*
 * k_cast.h — launchers of the conversion kernels (k_cast.cu): the Cast op
 * between f32, f16, bf16 and i32, and the backend's round and widen
 * services. Plain device pointers, sizes and a stream; each returns the
 * launch's error (cudaGetLastError), which the C glue checks.
 */
#ifndef K_CAST_H
#define K_CAST_H

#include "cuda/k_math.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The dtypes, numbered as te.h's te_dtype (cuda_cast.c checks). */
typedef enum { K_F32, K_F16, K_BF16, K_I32 } k_dtype;

/* dst (ddt) = src (sdt), or dst = dst + src in f32 when acc, over n
 * elements, every conversion through f32 as cpu_shape.c's convert: f16
 * and bf16 widen exactly, i32 converts as C does, f32 rounds to f16/bf16
 * to nearest even (k_math.h) and to i32 toward zero, saturating, NaN to 0.
 * When ddt is f16 or bf16 and counts is not NULL, what rounding did is
 * added to the device struct *counts (integer atomics, one per block and
 * counter: the same sums in any order). */
cudaError_t k_convert(const void *src, k_dtype sdt, void *dst, k_dtype ddt, int64_t n, int acc,
                      k_round_counts *counts, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
