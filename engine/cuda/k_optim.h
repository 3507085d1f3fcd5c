/*
 * k_optim.h — fused multi-tensor updates: SGD, Adam and the loss scaler's
 * unscale, every parameter in ONE launch.
 *
 * As PyTorch's multi_tensor_apply: the host lists the tensors (pointers,
 * lengths) and cuts each into chunks of KO_CHUNK elements; the two tables
 * are uploaded together once per call (cuda_services.c, through the
 * workspace) and block b of the grid takes chunks b, b + grid, ... The
 * arithmetic is engine/optim.c's sgd_range/adam_range operation for
 * operation, with the scalars (bias corrections, decay) computed on the
 * host as there, and no fused multiply-adds, so that an update gives the
 * CPU's bits.
 */
#ifndef TE_K_OPTIM_H
#define TE_K_OPTIM_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KO_CHUNK 65536 /* elements per chunk (PyTorch's chunk size) */

/* One parameter: data, gradient, state (NULL where unused), length, and
 * SGD's first momentum step. */
typedef struct ko_param {
    float *p;
    const float *g;
    float *m, *v;
    long long n;
    int first;
    int pad_;
} ko_param;

/* One gradient to unscale: src of type KS_F32/KS_F16/KS_BF16 (k_stats.h)
 * times inv into the f32 dst (dst may be src when f32). */
typedef struct ko_grad {
    const void *src;
    float *dst;
    long long n;
    int type;
    int pad_;
} ko_grad;

/* A chunk: tensor index and first element. */
typedef struct ko_chunk {
    int tensor;
    int pad_;
    long long start;
} ko_chunk;

typedef struct ko_sgd {
    float lr, momentum, dampening, weight_decay;
    int nesterov;
} ko_sgd;

/* Adam's per-step scalars, as adam_range computes them. */
typedef struct ko_adam {
    float beta1, beta2, eps, one_m_beta1, one_m_beta2;
    float step;         /* lr / (1 - beta1^t) */
    float inv_sqrt_bc2; /* 1 / sqrt(1 - beta2^t) */
    float decay;        /* AdamW: 1 - lr * wd; else 1 */
    float l2;           /* Adam: wd; AdamW: 0 */
} ko_adam;

/* The chunks of count tensors of lengths n[i] into chunks (NULL: only
 * counted); returns how many. */
int64_t ko_chunks(const long long *n, int count, ko_chunk *chunks);

/* The updates: params and chunks are device tables. */
cudaError_t ko_sgd_launch(const ko_sgd *o, const ko_param *params, const ko_chunk *chunks, int64_t nchunks,
                          cudaStream_t stream);
cudaError_t ko_adam_launch(const ko_adam *o, const ko_param *params, const ko_chunk *chunks, int64_t nchunks,
                           cudaStream_t stream);
/* dst = src * inv; a gradient holding NaN or Inf (tested before the
 * multiply, as GradScaler does) lowers *flag to its index (atomicMin). */
cudaError_t ko_unscale_launch(const ko_grad *grads, const ko_chunk *chunks, int64_t nchunks, float inv,
                              unsigned long long *flag, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
