/*
 * k_shape.h — launchers of the data-movement kernels (k_shape.cu):
 * transpose, embedding and an in-place add for accumulated gradients.
 * Plain device pointers, sizes and a stream; each returns the launch's
 * error (cudaGetLastError), which the C glue checks.
 */
#ifndef K_SHAPE_H
#define K_SHAPE_H

#include "cuda/k_math.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A transpose as kernel_geom.h's te_tr_dims: the source (pre, m0, mid, m1,
 * post) becomes (pre, m1, mid, m0, post). */
typedef struct k_tr_dims {
    int64_t pre, m0, mid, m1, post;
} k_tr_dims;

/* The source element of the result's element t. */
K_HD int64_t k_tr_source(k_tr_dims d, int64_t t)
{
    const int64_t k = t % d.post;
    t /= d.post;
    const int64_t j0 = t % d.m0;
    t /= d.m0;
    const int64_t q = t % d.mid;
    t /= d.mid;
    const int64_t j1 = t % d.m1;
    const int64_t p = t / d.m1;
    return (((p * d.m0 + j0) * d.mid + q) * d.m1 + j1) * d.post + k;
}

/* dst = the transpose of src, 4-byte elements copied bit for bit (f32 or
 * i32), or dst += it as floats when acc. */
cudaError_t k_transpose(const void *src, void *dst, k_tr_dims d, int acc, cudaStream_t s);

/* dst[i] += src[i] over n floats. */
cudaError_t k_add_into(float *dst, const float *src, int64_t n, cudaStream_t s);

/* y[r,:] = w[idx[r],:] for R rows of D; an index outside [0, V) lowers
 * *flag to r (atomicMin: the first bad row wins) and its row becomes 0. */
cudaError_t k_embedding_forward(const float *w, const int32_t *idx, float *y, int64_t R, int64_t D,
                                int64_t V, unsigned long long *flag, cudaStream_t s);

/* Device scratch k_embedding_backward needs for R rows, in bytes. */
size_t k_embedding_backward_scratch(int64_t R);
/* dw (+)= the rows of dy summed per index, in row order within each index
 * (the CPU's sums bit for bit): (index, row) pairs sorted, then one thread
 * per (index, column) adds its rows. dw is cleared first unless acc;
 * indices outside [0, V) are skipped. R < 2^31. */
cudaError_t k_embedding_backward(const float *dy, const int32_t *idx, float *dw, int64_t R, int64_t D,
                                 int64_t V, int acc, void *scratch, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
