/*
 * k_bn.h — batch norm's CUDA kernels (k_bn.cu), for cuda_norm.c and
 * cuda_conv.c: forward (training and eval, ReLU fused or not), backward,
 * the eval fold into a conv's weights, and per-channel sums (a conv's bias
 * gradient).
 *
 * x is (N, C, S) with S = H*W (1 for [N,C]). The per-channel kernels run
 * one block of K_BN_THREADS per channel (grid C, at most 2^31 - 1, and
 * C > 0): strided partial sums in double, then a fixed-order tree, so a
 * result is the same bit for bit on every run. Pointers marked "or NULL"
 * may be NULL. The caller checks cudaGetLastError().
 */
#ifndef TE_K_BN_H
#define TE_K_BN_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define K_BN_THREADS 256

typedef struct k_bn_args {
    int64_t N, C, S;
    const float *x;
    const float *gamma, *beta;   /* or NULL: 1 and 0 */
    float *run_mean, *run_var;   /* or NULL (training only) */
    float *mean, *rstd;          /* saved [C] */
    int training;
    float momentum, eps;
} k_bn_args;

/* y = (x - mean) * rstd * gamma + beta, clamped at 0 when relu; mean and
 * rstd the batch's (training: running stats updated with the CPU's
 * momentum and unbiased variance) or the running stats' (eval). */
void k_bn_fwd(const k_bn_args *a, float *y, int relu, cudaStream_t s);

/* dx (or NULL), dgamma (or NULL), dbeta (or NULL) from dy, each added onto
 * when its acc is 1. relu_y (or NULL): dy flows through a fused ReLU whose
 * output is relu_y. Reads a's x, gamma, mean, rstd, training. */
void k_bn_bwd(const k_bn_args *a, const float *dy, const float *relu_y, float *dx, int ax, float *dgamma,
              int ag, float *dbeta, int ab, cudaStream_t s);

/* Eval batch norm folded into the conv before it: w [O, per] and b [O]
 * (or NULL) into fw = w * s and fb = b * s + beta - mean * s, with
 * s = gamma / sqrt(var + eps). A grid-stride loop over O * per + O. */
void k_bn_fold(const float *w, const float *b, const float *gamma, const float *beta, const float *run_mean,
               const float *run_var, float eps, float *fw, float *fb, int64_t O, int64_t per, int blocks,
               cudaStream_t s);

/* out[c] (+= when acc) the sum of x (N, C, S) over n and s. */
void k_chan_sum(const float *x, float *out, int acc, int64_t N, int64_t C, int64_t S, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
