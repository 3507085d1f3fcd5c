/*
 * k_pool.h — the pools' CUDA kernels (k_pool.cu), for cuda_conv.c.
 *
 * NCHW, one [H,W] plane per (sample, channel); planes is N*C. blocks is the
 * grid (te_cuda_blocks of the loop's length at K_POOL_THREADS): every
 * kernel is a grid-stride loop. The caller checks cudaGetLastError().
 */
#ifndef TE_K_POOL_H
#define TE_K_POOL_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define K_POOL_THREADS 256

/* One pool's geometry: input planes of H x W, output OH x OW, a kernel x
 * kernel window at stride, padding pad on every side. */
typedef struct k_pool_geom {
    int64_t planes;
    int H, W, OH, OW;
    int kernel, stride, pad;
} k_pool_geom;

/* y = max over each window, idx its flat index in the plane (the CPU's
 * saved argmax); a loop over planes * OH * OW. */
void k_maxpool2d_fwd(const k_pool_geom *g, const float *x, float *y, int32_t *idx, int blocks, cudaStream_t s);
/* dx (+= when acc) the dy of every output whose argmax is that input; a
 * loop over planes * H * W, each input gathering in the CPU's order. */
void k_maxpool2d_bwd(const k_pool_geom *g, const float *dy, const int32_t *idx, float *dx, int acc, int blocks,
                     cudaStream_t s);
/* Average with padding counted (count_include_pad): loop over the outputs. */
void k_avgpool2d_fwd(const k_pool_geom *g, const float *x, float *y, int blocks, cudaStream_t s);
/* dx (+= when acc) each covering window's dy / kernel^2: loop over inputs. */
void k_avgpool2d_bwd(const k_pool_geom *g, const float *dy, float *dx, int acc, int blocks, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
