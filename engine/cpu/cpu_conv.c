/* cpu_conv.c — conv2d and the pools on the CPU, forward and backward, NCHW.
 *
 * Where the engine is built with oneDNN, f32 conv2d runs there first
 * (cpu_conv_dnnl.c); these kernels are the reference it is tested against
 * and run where it declines (TDBG_CPU_CONV=ref: always).
 *
 * conv2d lowers each sample to one sgemm: y[O, OH*OW] = w[O, C*KH*KW] @
 * col[C*KH*KW, OH*OW], where col (im2col) holds the input pixel under every
 * kernel tap at every output position. A 1x1 unpadded stride-1 conv needs no
 * col: the sample itself is that matrix. Backward reverses it: dw sums
 * dy @ col^T over samples, dx is col2im(w^T @ dy).
 *
 * Threads: cpu_sgemm spreads each product over the OpenMP team and does
 * almost all the work. The copy loops around it (im2col, col2im) stay on
 * this thread; one sample at a time keeps its col matrix in cache between
 * the copy and the sgemm.
 * The pools parallelise over planes. Every output element is written by
 * one thread in a fixed order, so results do not depend on scheduling.
 */
#include "cpu_kernels.h"

#include <math.h>
#include <omp.h>
#include <string.h>

typedef struct conv_geom {
    int64_t N, C, H, W;   /* input */
    int64_t O, KH, KW;    /* weight [O,C,KH,KW] */
    int64_t OH, OW;       /* output */
    int64_t stride, pad;
    int64_t rows, cols;   /* one sample's col matrix: C*KH*KW x OH*OW */
    int64_t in_size, out_size;  /* elements of one sample of x and of y */
} conv_geom;

static conv_geom conv_geom_of(const te_node *n)
{
    const te_tensor *x = n->in[0], *w = n->in[1], *y = n->out[0];
    conv_geom g = {
        .N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3],
        .O = w->shape[0], .KH = w->shape[2], .KW = w->shape[3],
        .OH = y->shape[2], .OW = y->shape[3],
        .stride = n->a.stride, .pad = n->a.pad,
    };
    g.rows = g.C * g.KH * g.KW;
    g.cols = g.OH * g.OW;
    g.in_size = g.C * g.H * g.W;
    g.out_size = g.O * g.cols;
    return g;
}

/* 1x1, stride 1, no padding: the sample [C,H*W] already is its col matrix. */
static bool conv_pointwise(const conv_geom *g)
{
    return g->KH == 1 && g->KW == 1 && g->stride == 1 && g->pad == 0;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A leading dimension BLAS accepts: at least 1 even for an empty dim. */
static int ld(int64_t cols) { return cols > 0 ? (int)cols : 1; }

/* For stride 1, the output columns [lo,hi) whose kernel tap j lands inside
 * a row of width W; the others read padding. */
static void tap_span(const conv_geom *g, int64_t j, int64_t *lo, int64_t *hi)
{
    *lo = min64(max64(0, g->pad - j), g->OW);
    *hi = max64(min64(g->OW, g->W + g->pad - j), *lo);
}

/* col [rows, cols] of one sample x [C,H,W]; padding reads as 0. */
static void im2col(const conv_geom *g, const float *x, float *restrict col)
{
    for (int64_t r = 0; r < g->rows; r++) {
        int64_t c = r / (g->KH * g->KW), i = r / g->KW % g->KH, j = r % g->KW;
        const float *xc = x + c * g->H * g->W;
        float *restrict dst = col + r * g->cols;
        int64_t lo, hi;
        tap_span(g, j, &lo, &hi);
        for (int64_t oy = 0; oy < g->OH; oy++, dst += g->OW) {
            int64_t iy = oy * g->stride - g->pad + i;
            if (iy < 0 || iy >= g->H) {
                memset(dst, 0, (size_t)g->OW * sizeof(float));
                continue;
            }
            const float *row = xc + iy * g->W;
            if (g->stride == 1) { /* ox reads row[ox - pad + j]; rows are short: no libc calls */
                const float *src = row + lo - g->pad + j;
#pragma omp simd
                for (int64_t ox = 0; ox < lo; ox++)
                    dst[ox] = 0.0f;
#pragma omp simd
                for (int64_t ox = lo; ox < hi; ox++)
                    dst[ox] = src[ox - lo];
#pragma omp simd
                for (int64_t ox = hi; ox < g->OW; ox++)
                    dst[ox] = 0.0f;
            } else {
                for (int64_t ox = 0; ox < g->OW; ox++) {
                    int64_t ix = ox * g->stride - g->pad + j;
                    dst[ox] = ix >= 0 && ix < g->W ? row[ix] : 0.0f;
                }
            }
        }
    }
}

/* dx [C,H,W] (+)= the entries of dcol [rows, cols] summed back onto the
 * pixels they were read from: overwrites when add is false. */
static void col2im(const conv_geom *g, const float *dcol, float *restrict dx, bool add)
{
    if (!add)
        memset(dx, 0, (size_t)g->in_size * sizeof(float));
    const float *src = dcol;
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t i = 0; i < g->KH; i++)
            for (int64_t j = 0; j < g->KW; j++) {
                int64_t lo, hi;
                tap_span(g, j, &lo, &hi);
                for (int64_t oy = 0; oy < g->OH; oy++, src += g->OW) {
                    int64_t iy = oy * g->stride - g->pad + i;
                    if (iy < 0 || iy >= g->H)
                        continue;
                    float *restrict row = dx + (c * g->H + iy) * g->W;
                    if (g->stride == 1) {
                        float *restrict dst = row + lo - g->pad + j; /* the tap of ox = lo */
#pragma omp simd
                        for (int64_t ox = 0; ox < hi - lo; ox++)
                            dst[ox] += src[lo + ox];
                    } else {
                        for (int64_t ox = 0; ox < g->OW; ox++) {
                            int64_t ix = ox * g->stride - g->pad + j;
                            if (ix >= 0 && ix < g->W)
                                row[ix] += src[ox];
                        }
                    }
                }
            }
}

static float *scratch(size_t bytes)
{
    float *p = te_mem_alloc(bytes);
    if (!p)
        te_set_error(TE_ERR_NOMEM, "conv2d: no memory for a %zu-byte im2col buffer", bytes);
    return p;
}

/* ---- conv2d: y [N,O,OH,OW] = x [N,C,H,W] * w [O,C,KH,KW] + b [O] --------- */

const char *te_cpu_conv(void)
{
    const char *dnnl = cpu_conv_dnnl();
    return dnnl ? dnnl : "im2col + sgemm";
}

#ifndef HAVE_DNNL
void te_cpu_conv_dnnl_allow(bool on) { (void)on; }
#endif

te_status cpu_conv2d_forward(te_node *n)
{
    te_status st = cpu_conv2d_forward_dnnl(n);
    if (st != TE_LOWP_DECLINED)
        return st;
    conv_geom g = conv_geom_of(n);
    const float *x = te_f32(n->in[0]), *w = te_f32(n->in[1]);
    const float *b = n->in[2] ? te_f32(n->in[2]) : NULL;
    float *y = te_f32(n->out[0]);
    bool pointwise = conv_pointwise(&g);
    size_t col_bytes = (size_t)(g.rows * g.cols) * sizeof(float);
    float *col = NULL;
    if (!pointwise && !(col = scratch(col_bytes)))
        return TE_ERR_NOMEM;

    for (int64_t s = 0; s < g.N; s++) {
        float *ys = y + s * g.out_size;
        if (b) /* sgemm adds onto the bias planes (beta 1) */
            for (int64_t o = 0; o < g.O; o++) {
#pragma omp simd
                for (int64_t p = 0; p < g.cols; p++)
                    ys[o * g.cols + p] = b[o];
            }
        if (!pointwise)
            im2col(&g, x + s * g.in_size, col);
        cpu_sgemm(false, false, (int)g.O, (int)g.cols, (int)g.rows,
                    1.0f, w, ld(g.rows), pointwise ? x + s * g.in_size : col, ld(g.cols),
                    b ? 1.0f : 0.0f, ys, ld(g.cols));
    }
    if (col)
        te_mem_free(col, col_bytes);
    return TE_OK;
}

/* db[o] (+)= the sum of dy over samples and positions. */
static void conv_bias_grad(const conv_geom *g, const float *dy, float *db, int acc)
{
#pragma omp parallel for schedule(static) if (g->N * g->out_size >= TE_PAR_MIN)
    for (int64_t o = 0; o < g->O; o++) {
        double sum = 0.0;
        for (int64_t s = 0; s < g->N; s++) {
            const float *plane = dy + s * g->out_size + o * g->cols;
            float part = 0.0f;
#pragma omp simd reduction(+ : part)
            for (int64_t p = 0; p < g->cols; p++)
                part += plane[p];
            sum += part;
        }
        db[o] = acc ? db[o] + (float)sum : (float)sum;
    }
}

te_status cpu_conv2d_backward(te_node *n)
{
    te_status st = cpu_conv2d_backward_dnnl(n);
    if (st != TE_LOWP_DECLINED)
        return st;
    conv_geom g = conv_geom_of(n);
    te_tensor *xt = n->in[0], *wt = n->in[1];
    const float *x = te_f32(xt), *w = te_f32(wt);
    const float *dy = te_f32(n->out[0]->grad);
    int acc;

    if (te_needs_grad(n->in[2])) {
        float *db = te_grad_buf(n->in[2], &acc);
        conv_bias_grad(&g, dy, db, acc);
    }
    bool need_dx = te_needs_grad(xt), need_dw = te_needs_grad(wt);
    if (!need_dx && !need_dw)
        return TE_OK;
    int acc_x = 0, acc_w = 0;
    float *dx = need_dx ? te_grad_buf(xt, &acc_x) : NULL;
    float *dw = need_dw ? te_grad_buf(wt, &acc_w) : NULL;
    bool pointwise = conv_pointwise(&g);
    /* One sample's col for dw, then overwritten with its dcol for dx. */
    size_t buf_bytes = (size_t)(g.rows * g.cols) * sizeof(float);
    float *buf = NULL;
    if (!pointwise && !(buf = scratch(buf_bytes)))
        return TE_ERR_NOMEM;

    for (int64_t s = 0; s < g.N; s++) {
        const float *xs = x + s * g.in_size, *dys = dy + s * g.out_size;
        if (need_dw) { /* dw [O,rows] (+)= dy_s [O,cols] @ col_s^T; samples after the first add */
            if (!pointwise)
                im2col(&g, xs, buf);
            cpu_sgemm(false, true, (int)g.O, (int)g.rows,
                        (int)g.cols, 1.0f, dys, ld(g.cols), pointwise ? xs : buf, ld(g.cols),
                        s > 0 || acc_w ? 1.0f : 0.0f, dw, ld(g.rows));
        }
        if (need_dx) { /* dcol [rows,cols] = w^T @ dy_s, then back onto the pixels */
            float *dxs = dx + s * g.in_size;
            cpu_sgemm(true, false, (int)g.rows, (int)g.cols,
                        (int)g.O, 1.0f, w, ld(g.rows), dys, ld(g.cols),
                        pointwise && acc_x ? 1.0f : 0.0f, pointwise ? dxs : buf, ld(g.cols));
            if (!pointwise)
                col2im(&g, buf, dxs, acc_x);
        }
    }
    if (buf)
        te_mem_free(buf, buf_bytes);
    return TE_OK;
}

/* ---- pools: one [H,W] plane per (sample, channel) ------------------------ */

typedef struct pool_geom {
    int64_t planes, H, W, OH, OW;
    int64_t kernel, stride, pad;
} pool_geom;

static pool_geom pool_geom_of(const te_node *n)
{
    const te_tensor *x = n->in[0], *y = n->out[0];
    return (pool_geom){
        .planes = x->shape[0] * x->shape[1], .H = x->shape[2], .W = x->shape[3],
        .OH = y->shape[2], .OW = y->shape[3],
        .kernel = n->a.kernel, .stride = n->a.stride, .pad = n->a.pad,
    };
}

/* The window of output (oy, ox) clipped to the input: rows [y0,y1), cols [x0,x1). */
static void pool_window(const pool_geom *g, int64_t oy, int64_t ox, int64_t *y0, int64_t *y1,
                        int64_t *x0, int64_t *x1)
{
    int64_t ys = oy * g->stride - g->pad, xs = ox * g->stride - g->pad;
    *y0 = max64(ys, 0);
    *y1 = min64(ys + g->kernel, g->H);
    *x0 = max64(xs, 0);
    *x1 = min64(xs + g->kernel, g->W);
}

/* For window column j, the outputs [lo,hi) whose tap lands inside a row of
 * width W; the others read padding. */
static void pool_tap_span(const pool_geom *g, int64_t j, int64_t *lo, int64_t *hi)
{
    int64_t first = g->pad - j, last = g->W - 1 + g->pad - j; /* ox * stride in [first,last] */
    *lo = first > 0 ? (first + g->stride - 1) / g->stride : 0;
    *hi = last < 0 ? 0 : min64(last / g->stride + 1, g->OW);
    *hi = max64(*hi, *lo);
}

/* y = max over each window (padding is -inf: the front-end keeps pad <=
 * kernel/2, so every window holds an input). NaN wins, as in PyTorch. The
 * argmax (flat index in the plane) is saved for backward. Each output row is
 * scanned tap by tap across all its windows at once, in row-major window
 * order, so the inner loop is a branch-free vector max. One plane: xp in,
 * y and idx out. */
static void maxpool_plane(const pool_geom *g, const int64_t *span, const float *xp, float *y, int32_t *idx)
{
    /* Indices within a plane fit i32 (the saved argmax is i32): 32-bit index
     * arithmetic keeps the vector loop at full width. */
    const int W = (int)g->W, stride = (int)g->stride, pad = (int)g->pad;
    for (int oy = 0; oy < g->OH; oy++) {
        int ys = oy * stride - pad, y0 = ys > 0 ? ys : 0;
        int y1 = ys + g->kernel < g->H ? ys + (int)g->kernel : (int)g->H;
        float *restrict m = y + oy * g->OW;
        int32_t *restrict at = idx + oy * g->OW;
        for (int ox = 0; ox < g->OW; ox++) {
            int xs = ox * stride - pad;
            m[ox] = -INFINITY;
            at[ox] = y0 * W + (xs > 0 ? xs : 0);
        }
        for (int iy = y0; iy < y1; iy++)
            for (int j = 0; j < g->kernel; j++) {
                int off = iy * W + j - pad, lo = (int)span[2 * j], hi = (int)span[2 * j + 1];
#pragma omp simd
                for (int ox = lo; ox < hi; ox++) { /* input off + ox * stride */
                    int k = off + ox * stride;
                    float v = xp[k];
                    bool take = v > m[ox] || v != v;
                    m[ox] = take ? v : m[ox];
                    at[ox] = take ? k : at[ox];
                }
            }
    }
}

/* x and y f32, or both f16/bf16 (the native low-precision kernel): each
 * plane widened into f32 scratch, pooled as in f32, its output rounded
 * (which keeps the selected values, NaN quieted as the shadow path's
 * rounding does), what rounding did in n->round[0]. */
static te_status maxpool2d_forward(te_node *n)
{
    pool_geom g = pool_geom_of(n);
    const te_dtype dt = n->in[0]->dtype;
    const bool half = dt != TE_F32;
    te_tensor *it = n->saved[0];
    const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
    const bool par = g.planes * in_plane >= TE_PAR_MIN;
    const int threads = par && !omp_in_parallel() ? omp_get_max_threads() : 1;
    const int64_t per_thread = in_plane + out_plane;
    size_t span_bytes = 2 * (size_t)g.kernel * sizeof(int64_t), scratch_bytes;
    int64_t *span = te_mem_alloc(span_bytes); /* [lo,hi) of each window column */
    float *scratch = cpu_half_scratch(half, per_thread, threads, &scratch_bytes);
    if (!it || !span || (half && !scratch)) {
        te_mem_free(span, span_bytes);
        te_mem_free(scratch, scratch_bytes);
        te_set_error(TE_ERR_NOMEM, "maxpool2d: out of memory");
        return TE_ERR_NOMEM;
    }
    for (int64_t j = 0; j < g.kernel; j++)
        pool_tap_span(&g, j, &span[2 * j], &span[2 * j + 1]);
    int32_t *idx = te_i32(it);
    te_round_stats total;
    cpu_round_stats_init(&total, dt);

#pragma omp parallel if (par) num_threads(threads)
    {
        float *xw = half ? scratch + (int64_t)omp_get_thread_num() * per_thread : NULL;
        float *yw = xw ? xw + in_plane : NULL;
        te_round_stats part;
        cpu_round_stats_init(&part, dt);
#pragma omp for schedule(static)
        for (int64_t p = 0; p < g.planes; p++) {
            if (!half) {
                maxpool_plane(&g, span, te_f32(n->in[0]) + p * in_plane, te_f32(n->out[0]) + p * out_plane,
                              idx + p * out_plane);
                continue;
            }
            te_half_to_f32((const uint16_t *)n->in[0]->data + p * in_plane, xw, dt, in_plane);
            maxpool_plane(&g, span, xw, yw, idx + p * out_plane);
            te_round_block(yw, (uint16_t *)n->out[0]->data + p * out_plane, dt, out_plane, &part);
        }
        if (half) {
#pragma omp critical
            cpu_round_stats_merge(&total, &part);
        }
    }
    te_mem_free(span, span_bytes);
    te_mem_free(scratch, scratch_bytes);
    if (half) {
        n->round[0] = total;
        n->rounded = true;
    }
    return TE_OK;
}

/* x in nChw16c: graph mode's choice between a batch norm and a conv (cpu_pool_blocked.c) */
static bool blocked_x(const te_node *n) { return n->in[0]->flags & TE_TENSOR_BLOCKED16; }

te_status cpu_maxpool2d_forward(te_node *n)
{
    return blocked_x(n) ? cpu_maxpool_blocked_forward(n) : maxpool2d_forward(n);
}

static bool maxpool_lowp_takes(const te_node *n)
{
    return cpu_is_half(n->in[0]) && n->out[0]->dtype == n->in[0]->dtype && n->in[0]->numel > 0;
}

te_status cpu_maxpool2d_forward_lowp(te_node *n)
{
    return maxpool_lowp_takes(n) ? maxpool2d_forward(n) : TE_LOWP_DECLINED;
}

/* dx gets each dy at its window's argmax (summed where windows overlap).
 * Low precision: per plane, dy widened, dx summed in f32 (onto the widened
 * gradient already there) and rounded once, what rounding did in
 * n->round[0]. */
static te_status maxpool2d_backward(te_node *n)
{
    te_tensor *xt = n->in[0];
    if (!te_needs_grad(xt))
        return TE_OK;
    pool_geom g = pool_geom_of(n);
    const te_dtype dt = xt->dtype;
    const bool half = dt != TE_F32;
    const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
    const bool par = g.planes * in_plane >= TE_PAR_MIN;
    const int threads = par && !omp_in_parallel() ? omp_get_max_threads() : 1;
    const int64_t per_thread = in_plane + out_plane;
    size_t scratch_bytes;
    float *scratch = cpu_half_scratch(half, per_thread, threads, &scratch_bytes);
    if (half && !scratch) {
        te_set_error(TE_ERR_NOMEM, "maxpool2d: out of memory");
        return TE_ERR_NOMEM;
    }
    int acc;
    void *dx = te_grad_buf(xt, &acc);
    const void *dy = n->out[0]->grad->data;
    const int32_t *idx = te_i32(n->saved[0]);
    te_round_stats total;
    cpu_round_stats_init(&total, dt);

#pragma omp parallel if (par) num_threads(threads)
    {
        float *dxw = half ? scratch + (int64_t)omp_get_thread_num() * per_thread : NULL;
        float *dyw = dxw ? dxw + in_plane : NULL;
        te_round_stats part;
        cpu_round_stats_init(&part, dt);
#pragma omp for schedule(static)
        for (int64_t p = 0; p < g.planes; p++) {
            float *dxp = half ? dxw : (float *)dx + p * in_plane;
            const float *dyp = half ? dyw : (const float *)dy + p * out_plane;
            if (half) {
                te_half_to_f32((const uint16_t *)dy + p * out_plane, dyw, dt, out_plane);
                if (acc)
                    te_half_to_f32((const uint16_t *)dx + p * in_plane, dxw, dt, in_plane);
            }
            if (!acc)
                memset(dxp, 0, (size_t)in_plane * sizeof(float));
            const int32_t *ip = idx + p * out_plane;
            for (int64_t o = 0; o < out_plane; o++)
                dxp[ip[o]] += dyp[o];
            if (half)
                te_round_block(dxw, (uint16_t *)dx + p * in_plane, dt, in_plane, &part);
        }
        if (half) {
#pragma omp critical
            cpu_round_stats_merge(&total, &part);
        }
    }
    te_mem_free(scratch, scratch_bytes);
    if (half) {
        n->round[0] = total;
        n->rounded = true;
    }
    return TE_OK;
}

te_status cpu_maxpool2d_backward(te_node *n)
{
    return blocked_x(n) ? cpu_maxpool_blocked_backward(n) : maxpool2d_backward(n);
}

te_status cpu_maxpool2d_backward_lowp(te_node *n)
{
    const te_tensor *y = n->out[0];
    if (!maxpool_lowp_takes(n) || !y->grad || y->grad->dtype != y->dtype)
        return TE_LOWP_DECLINED;
    return maxpool2d_backward(n);
}

/* y = window sum / kernel^2: padding counts as zeros (count_include_pad). */
te_status cpu_avgpool2d_forward(te_node *n)
{
    pool_geom g = pool_geom_of(n);
    const float *x = te_f32(n->in[0]);
    float *y = te_f32(n->out[0]);
    float inv = 1.0f / (float)(g.kernel * g.kernel);

#pragma omp parallel for schedule(static) if (g.planes * g.H * g.W >= TE_PAR_MIN)
    for (int64_t p = 0; p < g.planes; p++) {
        const float *xp = x + p * g.H * g.W;
        float *yp = y + p * g.OH * g.OW;
        for (int64_t oy = 0; oy < g.OH; oy++)
            for (int64_t ox = 0; ox < g.OW; ox++) {
                int64_t y0, y1, x0, x1;
                pool_window(&g, oy, ox, &y0, &y1, &x0, &x1);
                float sum = 0.0f;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        sum += xp[iy * g.W + ix];
                yp[oy * g.OW + ox] = sum * inv;
            }
    }
    return TE_OK;
}

/* dx gets dy / kernel^2 at every input of the window. */
te_status cpu_avgpool2d_backward(te_node *n)
{
    te_tensor *xt = n->in[0];
    if (!te_needs_grad(xt))
        return TE_OK;
    pool_geom g = pool_geom_of(n);
    int acc;
    float *dx = te_grad_buf(xt, &acc);
    const float *dy = te_f32(n->out[0]->grad);
    float inv = 1.0f / (float)(g.kernel * g.kernel);

#pragma omp parallel for schedule(static) if (g.planes * g.H * g.W >= TE_PAR_MIN)
    for (int64_t p = 0; p < g.planes; p++) {
        float *dxp = dx + p * g.H * g.W;
        if (!acc)
            memset(dxp, 0, (size_t)(g.H * g.W) * sizeof(float));
        const float *dyp = dy + p * g.OH * g.OW;
        for (int64_t oy = 0; oy < g.OH; oy++)
            for (int64_t ox = 0; ox < g.OW; ox++) {
                int64_t y0, y1, x0, x1;
                pool_window(&g, oy, ox, &y0, &y1, &x0, &x1);
                float d = dyp[oy * g.OW + ox] * inv;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++)
                        dxp[iy * g.W + ix] += d;
            }
    }
    return TE_OK;
}

/* ---- global average pool: y [N,C] = mean of each [H,W] plane ------------- */

te_status cpu_global_avgpool_forward(te_node *n)
{
    if (blocked_x(n))
        return cpu_gap_blocked_forward(n);
    const te_tensor *xt = n->in[0];
    int64_t planes = xt->shape[0] * xt->shape[1], hw = xt->shape[2] * xt->shape[3];
    const float *x = te_f32(xt);
    float *y = te_f32(n->out[0]);

#pragma omp parallel for schedule(static) if (planes * hw >= TE_PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * hw;
        double sum = 0.0; /* in double: graph mode's blocked kernel sums in another order, to the same float */
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < hw; i++)
            sum += xp[i];
        y[p] = (float)(sum / (double)hw);
    }
    return TE_OK;
}

te_status cpu_global_avgpool_backward(te_node *n)
{
    if (blocked_x(n))
        return cpu_gap_blocked_backward(n);
    te_tensor *xt = n->in[0];
    if (!te_needs_grad(xt))
        return TE_OK;
    int64_t planes = xt->shape[0] * xt->shape[1], hw = xt->shape[2] * xt->shape[3];
    int acc;
    float *dx = te_grad_buf(xt, &acc);
    const float *dy = te_f32(n->out[0]->grad);

#pragma omp parallel for schedule(static) if (planes * hw >= TE_PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        float d = dy[p] / (float)hw, *dxp = dx + p * hw;
        if (acc)
            for (int64_t i = 0; i < hw; i++)
                dxp[i] += d;
        else
            for (int64_t i = 0; i < hw; i++)
                dxp[i] = d;
    }
    return TE_OK;
}
