/*
 * k_pool.cu — max, average and global average pooling, forward and
 * backward, NCHW, as engine/cpu/cpu_conv.c computes them.
 *
 * Forward: one thread per output, scanning its window clipped to the plane
 * in row-major order, as the CPU does. Backward: one thread per INPUT,
 * gathering from the outputs whose windows cover it in the CPU's output
 * order (oy, then ox), so overlapping windows need no atomics and the sums
 * are the CPU's, bit for bit. Float arithmetic goes through __fadd_rn and
 * __fmul_rn: nvcc would otherwise fuse a multiply and an add that the CPU
 * (ISO C, no contraction) rounds separately.
 */
#include "cuda/k_pool.h"

#include <math.h>

#define GRID_STRIDE(i, n) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* The outputs along one axis whose windows cover input position i: [*lo, *hi). */
static __device__ void covering(int i, int kernel, int stride, int pad, int out, int *lo, int *hi)
{
    const int first = i + pad - kernel + 1; /* o * stride >= first */
    *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    const int last = (i + pad) / stride + 1; /* o * stride <= i + pad */
    *hi = last < out ? last : out;
}

/* Output o's window (o of planes of out_plane outputs), clipped to its
 * input plane: rows [y0, y1), columns [x0, x1). */
typedef struct {
    int64_t plane;
    int y0, y1, x0, x1;
} pool_window;

static __device__ __forceinline__ pool_window window_of(const k_pool_geom &g, int64_t o, int64_t out_plane)
{
    const int r = (int)(o % out_plane), oy = r / g.OW, ox = r % g.OW;
    const int ys = oy * g.stride - g.pad, xs = ox * g.stride - g.pad;
    return { o / out_plane, ys > 0 ? ys : 0, ys + g.kernel < g.H ? ys + g.kernel : g.H, xs > 0 ? xs : 0,
             xs + g.kernel < g.W ? xs + g.kernel : g.W };
}

static __global__ void maxpool_fwd(k_pool_geom g, const float *x, float *y, int32_t *idx)
{
    const int64_t out_plane = (int64_t)g.OH * g.OW;
    GRID_STRIDE(o, g.planes * out_plane) {
        const pool_window wn = window_of(g, o, out_plane);
        const int y0 = wn.y0, y1 = wn.y1, x0 = wn.x0, x1 = wn.x1;
        const float *xp = x + wn.plane * g.H * g.W;
        float m = -INFINITY;
        int at = y0 * g.W + x0;
        for (int iy = y0; iy < y1; iy++)
            for (int ix = x0; ix < x1; ix++) {
                const int k = iy * g.W + ix;
                const float v = xp[k];
                if (v > m || v != v) { /* NaN wins, as on the CPU */
                    m = v;
                    at = k;
                }
            }
        y[o] = m;
        idx[o] = at;
    }
}

static __global__ void maxpool_bwd(k_pool_geom g, const float *dy, const int32_t *idx, float *dx, int acc)
{
    const int64_t in_plane = (int64_t)g.H * g.W, out_plane = (int64_t)g.OH * g.OW;
    GRID_STRIDE(i, g.planes * in_plane) {
        const int64_t p = i / in_plane;
        const int k = (int)(i % in_plane), iy = k / g.W, ix = k % g.W;
        int oy0, oy1, ox0, ox1;
        covering(iy, g.kernel, g.stride, g.pad, g.OH, &oy0, &oy1);
        covering(ix, g.kernel, g.stride, g.pad, g.OW, &ox0, &ox1);
        const float *dyp = dy + p * out_plane;
        const int32_t *ip = idx + p * out_plane;
        float v = acc ? dx[i] : 0.0f;
        for (int oy = oy0; oy < oy1; oy++)
            for (int ox = ox0; ox < ox1; ox++)
                if (ip[oy * g.OW + ox] == k)
                    v = __fadd_rn(v, dyp[oy * g.OW + ox]);
        dx[i] = v;
    }
}

static __global__ void avgpool_fwd(k_pool_geom g, const float *x, float *y)
{
    const int64_t out_plane = (int64_t)g.OH * g.OW;
    const float inv = 1.0f / (float)(g.kernel * g.kernel);
    GRID_STRIDE(o, g.planes * out_plane) {
        const pool_window wn = window_of(g, o, out_plane);
        const int y0 = wn.y0, y1 = wn.y1, x0 = wn.x0, x1 = wn.x1;
        const float *xp = x + wn.plane * g.H * g.W;
        float sum = 0.0f;
        for (int iy = y0; iy < y1; iy++)
            for (int ix = x0; ix < x1; ix++)
                sum = __fadd_rn(sum, xp[iy * g.W + ix]);
        y[o] = __fmul_rn(sum, inv);
    }
}

static __global__ void avgpool_bwd(k_pool_geom g, const float *dy, float *dx, int acc)
{
    const int64_t in_plane = (int64_t)g.H * g.W, out_plane = (int64_t)g.OH * g.OW;
    const float inv = 1.0f / (float)(g.kernel * g.kernel);
    GRID_STRIDE(i, g.planes * in_plane) {
        const int64_t p = i / in_plane;
        const int k = (int)(i % in_plane), iy = k / g.W, ix = k % g.W;
        int oy0, oy1, ox0, ox1;
        covering(iy, g.kernel, g.stride, g.pad, g.OH, &oy0, &oy1);
        covering(ix, g.kernel, g.stride, g.pad, g.OW, &ox0, &ox1);
        const float *dyp = dy + p * out_plane;
        float v = acc ? dx[i] : 0.0f;
        for (int oy = oy0; oy < oy1; oy++)
            for (int ox = ox0; ox < ox1; ox++)
                v = __fadd_rn(v, __fmul_rn(dyp[oy * g.OW + ox], inv));
        dx[i] = v;
    }
}

extern "C" void k_maxpool2d_fwd(const k_pool_geom *g, const float *x, float *y, int32_t *idx, int blocks,
                                cudaStream_t s)
{
    maxpool_fwd<<<blocks, K_POOL_THREADS, 0, s>>>(*g, x, y, idx);
}

extern "C" void k_maxpool2d_bwd(const k_pool_geom *g, const float *dy, const int32_t *idx, float *dx, int acc,
                                int blocks, cudaStream_t s)
{
    maxpool_bwd<<<blocks, K_POOL_THREADS, 0, s>>>(*g, dy, idx, dx, acc);
}

extern "C" void k_avgpool2d_fwd(const k_pool_geom *g, const float *x, float *y, int blocks, cudaStream_t s)
{
    avgpool_fwd<<<blocks, K_POOL_THREADS, 0, s>>>(*g, x, y);
}

extern "C" void k_avgpool2d_bwd(const k_pool_geom *g, const float *dy, float *dx, int acc, int blocks,
                                cudaStream_t s)
{
    avgpool_bwd<<<blocks, K_POOL_THREADS, 0, s>>>(*g, dy, dx, acc);
}
