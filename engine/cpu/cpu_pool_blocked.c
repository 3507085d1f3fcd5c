/*
 * cpu_pool_blocked.c — max pool and global average pool on oneDNN's
 * nChw16c, forward and backward: graph mode keeps a batch norm's output
 * in that layout from the conv before it to the conv after the pool
 * (pass_layout.c), so no reorder runs between them.
 *
 * x[n][c][s] is at ((n * C/16 + c/16) * S + s) * 16 + c % 16 (C a
 * multiple of 16): sixteen channels side by side make one vector, and
 * every loop below runs across them. Max pool gives eager mode's bits: the
 * same taps in the same order for each channel, the same argmax (the flat
 * index in the plane, kept in y's layout), NaN winning as in PyTorch, and
 * its backward adds in the same order. Global average pool sums a plane
 * in order, where the NCHW kernel's vector sum takes another, both in
 * double: the same float but where the two sums straddle a rounding
 * point. Threads split across samples and channel blocks.
 */
#include "cpu_kernels.h"
#include "cpu_math.h"

#include <math.h>
#include <string.h>

enum { L = 16 };

typedef struct pool_geom {
    int64_t blocks, H, W, OH, OW; /* blocks: N * C / 16 */
    int kernel, stride, pad;
} pool_geom;

static pool_geom geom_of(const te_node *n)
{
    const te_tensor *x = n->in[0], *y = n->out[0];
    pool_geom g = { x->shape[0] * x->shape[1] / L, x->shape[2], x->shape[3], 1, 1, 0, 0, 0 };
    if (n->op == TE_OP_MAXPOOL2D) {
        g.OH = y->shape[2];
        g.OW = y->shape[3];
        g.kernel = (int)n->a.kernel;
        g.stride = (int)n->a.stride;
        g.pad = (int)n->a.pad;
    }
    return g;
}

/* The max over one window of a channel block: rows [y0,y1), columns
 * [x0,x1) of the plane (xb: the block's S x 16 floats). The first tap in
 * row-major order that is larger wins, or any NaN, as in cpu_conv.c. */
static inline __attribute__((always_inline)) void window_max(const float *xb, int64_t W, int64_t y0, int64_t y1,
                                                             int64_t x0, int64_t x1, float *m, int32_t *at)
{
    for (int l = 0; l < L; l++) {
        m[l] = -INFINITY;
        at[l] = (int32_t)(y0 * W + x0);
    }
    for (int64_t iy = y0; iy < y1; iy++)
        for (int64_t ix = x0; ix < x1; ix++) {
            const int32_t k = (int32_t)(iy * W + ix);
            const float *v = xb + (int64_t)k * L;
#pragma omp simd
            for (int l = 0; l < L; l++) {
                const bool take = v[l] > m[l] || v[l] != v[l];
                m[l] = take ? v[l] : m[l];
                at[l] = take ? k : at[l];
            }
        }
}

/* One channel block's plane: xb in, yb and its argmax ib out. */
CPU_CLONES static void maxpool_block(const pool_geom *g, const float *xb, float *yb, int32_t *ib)
{
    for (int64_t oy = 0; oy < g->OH; oy++)
        for (int64_t ox = 0; ox < g->OW; ox++) {
            const int64_t ys = oy * g->stride - g->pad, xs = ox * g->stride - g->pad;
            const int64_t o = (oy * g->OW + ox) * L;
            /* the front end keeps pad <= kernel/2: every window holds an input */
            window_max(xb, g->W, ys > 0 ? ys : 0, ys + g->kernel < g->H ? ys + g->kernel : g->H, xs > 0 ? xs : 0,
                       xs + g->kernel < g->W ? xs + g->kernel : g->W, yb + o, ib + o);
        }
}

te_status cpu_maxpool_blocked_forward(te_node *n)
{
    const pool_geom g = geom_of(n);
    const float *x = te_f32(n->in[0]);
    float *y = te_f32(n->out[0]);
    int32_t *idx = te_i32(n->saved[0]);
    const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;

#pragma omp parallel for schedule(static) if (g.blocks * in_plane * L >= TE_PAR_MIN)
    for (int64_t b = 0; b < g.blocks; b++)
        maxpool_block(&g, x + b * in_plane * L, y + b * out_plane * L, idx + b * out_plane * L);
    return TE_OK;
}

/* One channel block's dx (dxb) from dy at the argmax: each lane is its
 * own channel, so no two lanes write one element. */
CPU_CLONES static void maxpool_grad_block(int64_t n_out, const float *dyb, const int32_t *ib, float *dxb)
{
    for (int64_t o = 0; o < n_out * L; o += L)
#pragma omp simd
        for (int l = 0; l < L; l++)
            dxb[(int64_t)ib[o + l] * L + l] += dyb[o + l];
}

/* x's gradient buffer for a backward (*acc: add to it), NULL when x
 * needs none. */
static float *dx_of(te_node *n, int *acc)
{
    return te_needs_grad(n->in[0]) ? te_grad_buf(n->in[0], acc) : NULL;
}

/* dx gets each dy at its window's argmax, added in the outputs' order
 * (where windows overlap, the order eager mode adds in). */
te_status cpu_maxpool_blocked_backward(te_node *n)
{
    int acc;
    float *dx = dx_of(n, &acc);
    if (!dx)
        return TE_OK;
    const pool_geom g = geom_of(n);
    const float *dy = te_f32(n->out[0]->grad);
    const int32_t *idx = te_i32(n->saved[0]);
    const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;

#pragma omp parallel for schedule(static) if (g.blocks * in_plane * L >= TE_PAR_MIN)
    for (int64_t b = 0; b < g.blocks; b++) {
        float *dxb = dx + b * in_plane * L;
        if (!acc)
            memset(dxb, 0, (size_t)(in_plane * L) * sizeof(float));
        maxpool_grad_block(out_plane, dy + b * out_plane * L, idx + b * out_plane * L, dxb);
    }
    return TE_OK;
}

/* The means of one channel block's S positions into y's 16 channels. */
CPU_CLONES static void gap_block(int64_t S, const float *xb, float *y)
{
    double sum[L] = { 0 };
    for (int64_t k = 0; k < S; k++)
#pragma omp simd
        for (int l = 0; l < L; l++)
            sum[l] += xb[k * L + l];
    for (int l = 0; l < L; l++)
        y[l] = (float)(sum[l] / (double)S);
}

/* y [N,C] = the mean of each plane: sixteen channels' sums side by side. */
te_status cpu_gap_blocked_forward(te_node *n)
{
    const pool_geom g = geom_of(n);
    const float *x = te_f32(n->in[0]);
    float *y = te_f32(n->out[0]);
    const int64_t S = g.H * g.W;

    /* [N,C] is the blocks' channels in order: block b's at y[b * 16] */
#pragma omp parallel for schedule(static) if (g.blocks * S * L >= TE_PAR_MIN)
    for (int64_t b = 0; b < g.blocks; b++)
        gap_block(S, x + b * S * L, y + b * L);
    return TE_OK;
}

/* One channel block's dx (dxb): dy / S at every position, or added. */
CPU_CLONES static void gap_grad_block(int64_t S, const float *dy, bool acc, float *dxb)
{
    float d[L];
    for (int l = 0; l < L; l++)
        d[l] = dy[l] / (float)S;
    for (int64_t k = 0; k < S; k++)
#pragma omp simd
        for (int l = 0; l < L; l++)
            dxb[k * L + l] = acc ? dxb[k * L + l] + d[l] : d[l];
}

te_status cpu_gap_blocked_backward(te_node *n)
{
    int acc;
    float *dx = dx_of(n, &acc);
    if (!dx)
        return TE_OK;
    const pool_geom g = geom_of(n);
    const float *dy = te_f32(n->out[0]->grad);
    const int64_t S = g.H * g.W;

#pragma omp parallel for schedule(static) if (g.blocks * S * L >= TE_PAR_MIN)
    for (int64_t b = 0; b < g.blocks; b++)
        gap_grad_block(S, dy + b * L, acc, dx + b * S * L);
    return TE_OK;
}
