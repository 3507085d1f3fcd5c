/*
 * k_linear.h — the small kernels around the GEMMs of matmul and linear
 * (k_linear.cu): the bias's rows, its gradient's column sums, activations
 * in place. Rounding and widening are k_cast.h's k_convert.
 *
 * Launchers for C: plain pointers (device memory), sizes, a stream; they
 * return cudaGetLastError() after the launch. dtype is te_dtype's value,
 * k_cast.h's k_dtype: K_F32, K_F16 or K_BF16.
 */
#ifndef TE_K_LINEAR_H
#define TE_K_LINEAR_H

#include "cuda/k_cast.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Activations for k_act_inplace: those the op table marks ACT. */
enum { K_ACT_RELU, K_ACT_GELU, K_ACT_TANH, K_ACT_SIGMOID };

/* y [rows, cols] = b [cols] on every row (b of dtype, y f32). */
cudaError_t k_bias_rows(float *y, const void *b, int dtype, int64_t rows, int64_t cols, cudaStream_t s);
/* db [cols] = (acc ? db : 0) + the column sums of dy [rows, cols] (dtype),
 * each column summed row after row in f32: the CPU's order. */
cudaError_t k_col_sums(const void *dy, int dtype, int64_t rows, int64_t cols, float *db, int acc,
                       cudaStream_t s);
/* y = act(y), by the CPU's formulas (the exact GELU of cpu_math.h). */
cudaError_t k_act_inplace(int act, float *y, int64_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
