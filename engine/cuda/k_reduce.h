/*
 * k_reduce.h — launchers of the reduction family's kernels: sum and mean,
 * softmax and log_softmax, cross entropy, MSE, layer norm, global average
 * pool (engine/cuda/cuda_reduce.c calls them with device pointers).
 *
 * Every reduction runs in a fixed order: a block's threads each sum a
 * fixed strided share, the block adds them in a shared-memory tree, and a
 * second pass adds the blocks' partial results in index order. No float
 * atomics: a step gives the same bits every time on the same GPU. Grids
 * depend on the shapes only. Each launcher queues on stream and returns
 * cudaGetLastError(); nothing is launched for an empty range.
 */
#ifndef TE_K_REDUCE_H
#define TE_K_REDUCE_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Elements of a row one block sums in the first pass. */
#define KR_CHUNK 4096
/* Rows one thread sums for layer norm's parameter gradients' first pass. */
#define KR_LN_ROWS 64
/* Partial sums the first pass of MSE writes: at most this many. */
#define KR_MAX_PARTS 1024

/* How a row sum becomes its float: (float)(s / div) (sum, mean), or
 * (float)s / (float)div (global average pool, whose CPU kernel divides in
 * float). */
enum { KR_DIV_DOUBLE, KR_DIV_FLOAT };

/* Doubles of scratch kr_row_sum needs for outer rows of len (0: none). */
int64_t kr_row_sum_scratch(int64_t outer, int64_t len);
/* y[o] = sum_k x[o * len + k], divided by div as mode says. */
cudaError_t kr_row_sum(const float *x, int64_t outer, int64_t len, double div, int mode, double *scratch,
                       float *y, cudaStream_t stream);
/* y[o, i] = sum_k x[o, k, i] in float, in k order (the CPU's order), then
 * (float)(y / div) when mean. */
cudaError_t kr_col_sum(const float *x, int64_t outer, int64_t len, int64_t inner, double div, int mean,
                       float *y, cudaStream_t stream);
/* d[o, k, i] (=, or += when acc) g[o * inner + i] * scale, or / scale
 * when divide. */
cudaError_t kr_broadcast_grad(const float *g, int64_t outer, int64_t len, int64_t inner, float scale,
                              int divide, int acc, float *d, cudaStream_t stream);

/* Softmax (log: log_softmax) of the outer * inner rows of len elements at
 * stride inner, as cpu_reduce.c's softmax_row; and its gradient. */
cudaError_t kr_softmax(const float *x, int64_t outer, int64_t len, int64_t inner, int log, float *y,
                       cudaStream_t stream);
cudaError_t kr_softmax_grad(const float *y, const float *g, int64_t outer, int64_t len, int64_t inner, int log,
                            int acc, float *d, cudaStream_t stream);

/* Cross entropy's rows: lse[r] and term[r] = lse[r] - z[r, y[r]] (double).
 * A label outside [0, C) lowers *flag to its row (atomicMin) and gives
 * the term 0. */
cudaError_t kr_ce_rows(const float *z, const int32_t *labels, int64_t N, int64_t C, float *lse, double *term,
                       unsigned long long *flag, cudaStream_t stream);
/* dz[r, c] (=, += when acc) G[0] / N * (exp(z - lse[r]) - [c == y[r]]). */
cudaError_t kr_ce_grad(const float *z, const int32_t *labels, const float *lse, const float *G, int64_t N,
                       int64_t C, int acc, float *d, cudaStream_t stream);

/* Partial sums of (p - t)^2 in double: kr_mse_parts(n) of them. */
int kr_mse_parts(int64_t n);
cudaError_t kr_mse_partial(const float *p, const float *t, int64_t n, double *parts, cudaStream_t stream);
/* d (=, += when acc) sign * 2 * G[0] / n * (p - t). */
cudaError_t kr_mse_grad(const float *p, const float *t, const float *G, int64_t n, float sign, int acc,
                        float *d, cudaStream_t stream);

/* *out = (float)(sum of the n doubles at v / div), in a fixed order. */
cudaError_t kr_sum_doubles(const double *v, int64_t n, double div, float *out, cudaStream_t stream);

/* Layer norm over the last dim D of R rows, as cpu_norm.c's: y, mean and
 * rstd; gamma and beta may be NULL. */
cudaError_t kr_layernorm(const float *x, const float *gamma, const float *beta, int64_t R, int64_t D, float eps,
                         float *y, float *mean, float *rstd, cudaStream_t stream);
cudaError_t kr_layernorm_dx(const float *x, const float *gamma, const float *dy, const float *mean,
                            const float *rstd, int64_t R, int64_t D, int acc, float *dx, cudaStream_t stream);
/* Doubles of scratch kr_layernorm_dparams needs. */
int64_t kr_layernorm_dparams_scratch(int64_t R, int64_t D);
/* dgamma = sum over rows of dy * xh, dbeta = sum of dy, each NULL when not
 * wanted, each added to the old value when its acc is set. */
cudaError_t kr_layernorm_dparams(const float *x, const float *dy, const float *mean, const float *rstd, int64_t R,
                                 int64_t D, double *scratch, float *dgamma, int acc_g, float *dbeta, int acc_b,
                                 cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
