/*
 * cpu_norm_blocked.c — batch norm, forward and backward, reading x in
 * oneDNN's nChw16c: graph mode keeps a conv's output in the layout the
 * conv wrote (pass_layout.c). x and its gradient are blocked; y (a fused
 * ReLU's output) and its gradient are blocked too where a pool or a conv
 * takes them so (pass_layout.c chose it), else NCHW.
 *
 * x[n][c][s] is at ((n * C/16 + c/16) * S + s) * 16 + c % 16, with C and
 * S = H * W multiples of 16 (pass_layout.c sees to it). Sixteen
 * channels side by side make one vector: the statistics of a block of
 * channels accumulate lane by lane in double (the mean and variance in
 * one pass, where cpu_norm.c makes two over a channel that is in cache),
 * and the NCHW side goes through 16 x 16 tiles in L1, so the move between
 * layouts is part of a pass over memory that runs anyway.
 * Threads split across channel blocks only: the same bits on any thread
 * count.
 */
#include "cpu_kernels.h"
#include "cpu_math.h"

#include <math.h>
#include <string.h>

enum { L = 16 };

typedef struct bn_geom {
    int64_t N, C, S, CB; /* S = H * W, CB = C / 16 */
} bn_geom;

static bn_geom geom_of(const te_tensor *x)
{
    bn_geom g = { x->shape[0], x->shape[1], x->shape[2] * x->shape[3], x->shape[1] / L };
    return g;
}

/* The blocked rows of sample i, channel block cb: S x 16 floats. */
static const float *block(const bn_geom *g, const float *x, int64_t i, int64_t cb)
{
    return x + (i * g->CB + cb) * g->S * L;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_TRANSPOSE16 1

/* dst[i][j] = src[j][i] for a 16 x 16 block of floats, rows ss and ds
 * floats apart: 16 loads, 64 shuffles, 16 stores. */
__attribute__((target("avx512f"))) static void transpose16(const float *src, int64_t ss, float *dst, int64_t ds)
{
    __m512 r[L], t[L];
    for (int i = 0; i < L; i++)
        r[i] = _mm512_loadu_ps(src + i * ss);
    for (int i = 0; i < L; i += 2) { /* pairs of rows interleaved */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < L; i += 4) { /* 4 x 4 blocks transposed within each 128-bit lane */
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) { /* then the lanes themselves */
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
    for (int i = 0; i < L; i++)
        _mm512_storeu_ps(dst + i * ds, r[i]);
}

#endif

static void transpose(const float *src, int64_t ss, float *dst, int64_t ds)
{
#ifdef HAVE_TRANSPOSE16
    if (__builtin_cpu_supports("avx512f")) {
        transpose16(src, ss, dst, ds);
        return;
    }
#endif
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++)
            dst[i * ds + j] = src[j * ss + i];
}

/* A tile [k][lane] (16 x 16, row-major) of the gradient at positions
 * k0..k0+15, through a fused ReLU at y's when y is given (ReLU's own
 * formula, as cpu_norm.c's): dy's blocked rows as they are (yb), or its 16
 * NCHW channel rows (S apart) transposed into t. */
static inline __attribute__((always_inline)) const float *grad_tile(const float *dy, const float *y, int64_t S,
                                                                     int64_t k0, bool yb, float *t)
{
    float m[L * L];
    const float *d = t, *mask = m;
    if (yb) {
        d = dy + k0 * L;
        if (!y)
            return d;
        mask = y + k0 * L;
    } else {
        transpose(dy + k0, S, t, L);
        if (!y)
            return t;
        transpose(y + k0, S, m, L);
    }
#pragma omp simd
    for (int e = 0; e < L * L; e++)
        t[e] = d[e] * (float)!(mask[e] <= 0.0f);
    return t;
}

/* One sample's part of a channel block's sums of d = x - shift and d^2,
 * in f64. */
CPU_CLONES static void sums(const float *b, int64_t S, const float shift[L], double s1[L], double s2[L])
{
    double a1[L], a2[L]; /* in registers: s1 and s2 may alias for all the compiler knows */
    float k0[L];
    memcpy(a1, s1, sizeof a1);
    memcpy(a2, s2, sizeof a2);
    memcpy(k0, shift, sizeof k0);
    for (int64_t k = 0; k < S; k++)
#pragma omp simd
        for (int l = 0; l < L; l++) {
            const double d = (double)b[k * L + l] - k0[l];
            a1[l] += d;
            a2[l] += d * d;
        }
    memcpy(s1, a1, sizeof a1);
    memcpy(s2, a2, sizeof a2);
}

/* y = x * a + d (then ReLU) for one sample's channel block, into y's
 * blocked rows (yb) or its NCHW rows. */
CPU_CLONES static void normalise(const float *b, int64_t S, const float a[L], const float d[L], bool relu, bool yb,
                                 float *y)
{
    float own[L * L];
    for (int64_t k0 = 0; k0 < S; k0 += L) {
        const float *xb = b + k0 * L;
        float *t = yb ? y + k0 * L : own;
        for (int k = 0; k < L; k++)
#pragma omp simd
            for (int l = 0; l < L; l++) {
                const float v = xb[k * L + l] * a[l] + d[l];
                t[k * L + l] = relu && v < 0.0f ? 0.0f : v; /* ReLU's own formula */
            }
        if (!yb)
            transpose(t, L, y + k0, S);
    }
}

/* The batch's mean and biased variance of a channel block in one pass
 * over x (it is not in cache: a block is 16 channels of the batch), with
 * sums of x - x[0,c,0]: shifted by a value of the channel, the sum of
 * squares does not cancel (in f64 what the NCHW kernel's two passes give). */
static void block_stats(const bn_geom *g, const float *x, int64_t cb, double mean[L], double var[L])
{
    double s1[L] = { 0 }, s2[L] = { 0 };
    const float *shift = block(g, x, 0, cb);
    for (int64_t i = 0; i < g->N; i++)
        sums(block(g, x, i, cb), g->S, shift, s1, s2);
    const double M = (double)(g->N * g->S);
    for (int l = 0; l < L; l++) {
        const double dm = s1[l] / M;
        mean[l] = shift[l] + dm;
        var[l] = fmax(s2[l] / M - dm * dm, 0.0);
    }
}

te_status cpu_bn_blocked_forward(te_node *n, te_tensor *yt, bool relu)
{
    const te_tensor *xt = n->in[0];
    float *y = te_f32(yt);
    const bool yb = yt->flags & TE_TENSOR_BLOCKED16;
    const bn_geom g = geom_of(xt);
    const float *x = te_f32(xt);
    const float *gamma = n->in[1] ? te_f32(n->in[1]) : NULL;
    const float *beta = n->in[2] ? te_f32(n->in[2]) : NULL;
    float *rm = n->in[3] ? te_f32(n->in[3]) : NULL;
    float *rv = n->in[4] ? te_f32(n->in[4]) : NULL;
    float *mean = te_f32(n->saved[0]), *rstd = te_f32(n->saved[1]);
    const bool training = n->a.training;
    const float mom = n->a.momentum, eps = n->a.eps;
    const int64_t M = g.N * g.S;

#pragma omp parallel for schedule(static) if (xt->numel >= TE_PAR_MIN)
    for (int64_t cb = 0; cb < g.CB; cb++) {
        float a[L], d[L];
        double dm[L], var[L];
        if (training)
            block_stats(&g, x, cb, dm, var);
        for (int l = 0; l < L; l++) {
            const int64_t c = cb * L + l;
            float m, r;
            if (training) {
                m = (float)dm[l];
                r = (float)(1.0 / sqrt(var[l] + eps));
                if (rm) {
                    /* biased variance normalises, unbiased feeds the running estimate */
                    rm[c] = (1.0f - mom) * rm[c] + mom * m;
                    rv[c] = (1.0f - mom) * rv[c] + mom * (float)(var[l] * (double)M / (double)(M - 1));
                }
            } else {
                m = rm[c];
                r = 1.0f / sqrtf(rv[c] + eps);
            }
            mean[c] = m;
            rstd[c] = r;
            /* y = x * a + d folds the affine into one multiply-add */
            a[l] = r * (gamma ? gamma[c] : 1.0f);
            d[l] = (beta ? beta[c] : 0.0f) - m * a[l];
        }
        /* a sample's channel block starts at the same offset in both layouts */
        for (int64_t i = 0; i < g.N; i++)
            normalise(block(&g, x, i, cb), g.S, a, d, relu, yb, y + (i * g.C + cb * L) * g.S);
    }
    return TE_OK;
}

/* One sample's part of sum(dy) and sum(dy * xh) for a channel block; dy
 * and y (a fused ReLU's output, or NULL) are NCHW rows. The gradient's
 * tiles, blocked, are kept at stash when given (dx's own rows: grad_x
 * then reads them back instead of transposing again). */
CPU_CLONES static void grad_sums(const float *b, const float *dy, const float *y, int64_t S, const float m[L],
                                 const float r[L], double sdy[L], double sdyxh[L], float *stash)
{
    /* Through a fused ReLU, dy * mask is made row by row first (two
     * streams read in order, not two transposed), CH positions at a time. */
    enum { CH = 256 };
    float rows[L][CH], own[L * L];
    double s1[L], s2[L]; /* in registers: sdy and sdyxh may alias for all the compiler knows */
    memcpy(s1, sdy, sizeof s1);
    memcpy(s2, sdyxh, sizeof s2);
    for (int64_t c0 = 0; c0 < S; c0 += CH) {
        const int64_t cn = S - c0 < CH ? S - c0 : CH;
        for (int l = 0; y && l < L; l++) {
            const float *d = dy + l * S + c0, *yl = y + l * S + c0;
#pragma omp simd
            for (int64_t k = 0; k < cn; k++)
                rows[l][k] = d[k] * (float)!(yl[k] <= 0.0f); /* ReLU's own formula, as cpu_norm.c's */
        }
        for (int64_t k0 = c0; k0 < c0 + cn; k0 += L) {
            float *t = stash ? stash + k0 * L : own;
            if (y)
                transpose(&rows[0][k0 - c0], CH, t, L);
            else
                transpose(dy + k0, S, t, L);
            const float *xb = b + k0 * L;
            for (int k = 0; k < L; k++)
#pragma omp simd
                for (int l = 0; l < L; l++) {
                    s1[l] += t[k * L + l];
                    s2[l] += (double)t[k * L + l] * ((xb[k * L + l] - m[l]) * r[l]);
                }
        }
    }
    memcpy(sdy, s1, sizeof s1);
    memcpy(sdyxh, s2, sizeof s2);
}

/* grad_sums with dy and y in blocked rows: read in order, no tiles. */
CPU_CLONES static void grad_sums_blocked(const float *b, const float *dy, const float *y, int64_t S, const float m[L],
                                         const float r[L], double sdy[L], double sdyxh[L])
{
    double s1[L], s2[L];
    memcpy(s1, sdy, sizeof s1);
    memcpy(s2, sdyxh, sizeof s2);
    for (int64_t k = 0; k < S; k++) {
        const float *d = dy + k * L, *xk = b + k * L;
        float t[L];
        if (y) { /* the test outside the lane loop: it vectorises */
            const float *yk = y + k * L;
#pragma omp simd
            for (int l = 0; l < L; l++)
                t[l] = d[l] * (float)!(yk[l] <= 0.0f);
        } else {
            memcpy(t, d, sizeof t);
        }
#pragma omp simd
        for (int l = 0; l < L; l++) {
            s1[l] += t[l];
            s2[l] += (double)t[l] * ((xk[l] - m[l]) * r[l]);
        }
    }
    memcpy(sdy, s1, sizeof s1);
    memcpy(sdyxh, s2, sizeof s2);
}

/* dx (blocked rows o) = gr * (dy - mdy - xh * mdyxh), or added to o;
 * stashed: dy's tiles are in o already (grad_sums); yb: dy and y are
 * blocked rows. */
CPU_CLONES static void grad_x(const float *b, const float *dy, const float *y, int64_t S, const float m[L],
                              const float r[L], const float gr[L], const float mdy[L], const float mdyxh[L],
                              bool acc, bool stashed, bool yb, float *o)
{
    float own[L * L];
    for (int64_t k0 = 0; k0 < S; k0 += L) {
        float *ok = o + k0 * L;
        const float *t = stashed ? ok : grad_tile(dy, y, S, k0, yb, own), *xb = b + k0 * L;
        for (int k = 0; k < L; k++)
#pragma omp simd
            for (int l = 0; l < L; l++) {
                const int e = k * L + l;
                const float v = gr[l] * (t[e] - mdy[l] - (xb[e] - m[l]) * r[l] * mdyxh[l]);
                ok[e] = acc ? ok[e] + v : v;
            }
    }
}

/* dx = gamma * rstd * (dy - mean(dy) - xh * mean(dy * xh)) in training,
 * gamma * rstd * dy in eval; dgamma = sum(dy * xh), dbeta = sum(dy). dy is
 * y's gradient, through a fused ReLU (y its output) when relu is set. */
te_status cpu_bn_blocked_backward(te_node *n, const te_tensor *yt, bool relu)
{
    te_tensor *xt = n->in[0], *gt = n->in[1], *bt = n->in[2];
    const float *dy = te_f32(yt->grad), *relu_y = relu ? te_f32(yt) : NULL;
    const bool yb = yt->flags & TE_TENSOR_BLOCKED16;
    const bn_geom g = geom_of(xt);
    const float *x = te_f32(xt);
    const float *gamma = gt ? te_f32(gt) : NULL;
    const float *mean = te_f32(n->saved[0]), *rstd = te_f32(n->saved[1]);
    int ax = 0, ag = 0, ab = 0;
    float *dx = te_needs_grad(xt) ? te_grad_buf(xt, &ax) : NULL;
    float *dg = gt && te_needs_grad(gt) ? te_grad_buf(gt, &ag) : NULL;
    float *db = bt && te_needs_grad(bt) ? te_grad_buf(bt, &ab) : NULL;
    const bool training = n->a.training;
    const double M = (double)(g.N * g.S);

#pragma omp parallel for schedule(static) if (xt->numel >= TE_PAR_MIN)
    for (int64_t cb = 0; cb < g.CB; cb++) {
        const float *m = mean + cb * L, *r = rstd + cb * L;
        double sdy[L] = { 0 }, sdyxh[L] = { 0 };
        const bool stash = dx && !ax && !yb; /* dx's rows are free until written */
        for (int64_t i = 0; i < g.N; i++) {
            const int64_t rows = (i * g.C + cb * L) * g.S; /* in either layout */
            const float *b = block(&g, x, i, cb), *ry = relu_y ? relu_y + rows : NULL;
            if (yb)
                grad_sums_blocked(b, dy + rows, ry, g.S, m, r, sdy, sdyxh);
            else
                grad_sums(b, dy + rows, ry, g.S, m, r, sdy, sdyxh, stash ? dx + (b - x) : NULL);
        }
        float gr[L], mdy[L], mdyxh[L];
        for (int l = 0; l < L; l++) {
            const int64_t c = cb * L + l;
            if (dg)
                dg[c] = (ag ? dg[c] : 0.0f) + (float)sdyxh[l];
            if (db)
                db[c] = (ab ? db[c] : 0.0f) + (float)sdy[l];
            gr[l] = (gamma ? gamma[c] : 1.0f) * r[l];
            mdy[l] = training ? (float)(sdy[l] / M) : 0.0f;
            mdyxh[l] = training ? (float)(sdyxh[l] / M) : 0.0f;
        }
        for (int64_t i = 0; dx && i < g.N; i++) {
            const int64_t rows = (i * g.C + cb * L) * g.S;
            const float *b = block(&g, x, i, cb);
            grad_x(b, dy + rows, relu_y ? relu_y + rows : NULL, g.S, m, r, gr, mdy, mdyxh, ax, stash, yb,
                   dx + (b - x));
        }
    }
    return TE_OK;
}
