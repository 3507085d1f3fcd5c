/*
 * k_linear.h — the small kernels around the GEMMs of matmul and linear
 * (k_linear.cu): the bias's rows, its gradient's column sums, activations
 * in place, f16/bf16 widening and rounding with rounding's counts.
 *
 * Launchers for C: plain pointers (device memory), sizes, a stream; they
 * return cudaGetLastError() after the launch. dtype is te_dtype's value:
 * 0 f32, 1 f16, 2 bf16.
 */
#ifndef TE_K_LINEAR_H
#define TE_K_LINEAR_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { K_F32 = 0, K_F16 = 1, K_BF16 = 2 };
/* Activations for k_act_inplace: those the op table marks ACT. */
enum { K_ACT_RELU, K_ACT_GELU, K_ACT_TANH, K_ACT_SIGMOID };

/* What rounding did (te_round_stats's counts): finite non-zero values that
 * became +-Inf, that became zero, finite non-zero values, and the largest
 * finite |value| before rounding as its f32 bits. */
typedef struct k_round_counts {
    unsigned long long overflow, underflow, nonzero;
    unsigned int absmax_bits, pad;
} k_round_counts;

/* n floats of src rounded to nearest even into dst as f16 or bf16
 * (dtype), the same bits as te_f32_to_f16/te_f32_to_bf16; the counts
 * gathered in dev (device scratch) and copied to *host, which waits for
 * the stream. Stands in for helper kew's round launcher (k_cast.h). */
cudaError_t k_blas_round(const float *src, uint16_t *dst, int dtype, int64_t n, k_round_counts *dev,
                         k_round_counts *host, cudaStream_t s);
/* dst[i] = src[i] widened to f32 (add: dst[i] += it). */
cudaError_t k_widen(const uint16_t *src, int dtype, float *dst, int64_t n, int add, cudaStream_t s);
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
