/* cpu_reduce.c — sum, mean, softmax and log_softmax along an axis. */
#include "cpu_kernels.h"
#include "cpu_math.h"

#include <math.h>
#include <stdlib.h>

/* ---- sum and mean -------------------------------------------------------- */

#define BLOCK 1024

/* Float sums over blocks of BLOCK (vectorised), double across blocks:
 * accurate for long rows and the same on every thread count. */
static double block_sum(const float *restrict x, int64_t n)
{
    float b = 0.0f;
#pragma omp simd reduction(+ : b)
    for (int64_t i = 0; i < n; i++)
        b += x[i];
    return b;
}

static double row_sum(const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t lo = 0; lo < n; lo += BLOCK)
        s += block_sum(x + lo, n - lo < BLOCK ? n - lo : BLOCK);
    return s;
}

/* row_sum of one long row with the blocks spread over threads; the blocks
 * are added in the same order, so the result is row_sum's exactly. */
static double row_sum_par(const float *x, int64_t n)
{
    int64_t nb = (n + BLOCK - 1) / BLOCK;
    double *part = n > TE_PAR_MIN ? malloc((size_t)nb * sizeof *part) : NULL;
    if (!part)
        return row_sum(x, n);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; b++)
        part[b] = block_sum(x + b * BLOCK, n - b * BLOCK < BLOCK ? n - b * BLOCK : BLOCK);
    double s = 0.0;
    for (int64_t b = 0; b < nb; b++)
        s += part[b];
    free(part);
    return s;
}

/* y[o, i] = sum_k x[o, k, i], divided by len for the mean. */
static te_status reduce_forward(te_node *n, bool mean)
{
    const te_tensor *x = n->in[0];
    int64_t outer, len, inner;
    te_axis_split(x, n->a.axis, &outer, &len, &inner);
    const float *X = te_f32(x);
    float *Y = te_f32(n->out[0]);
    const double div = mean ? (double)len : 1.0;
    if (inner == 1) {
        if (outer == 1) {
            Y[0] = (float)(row_sum_par(X, len) / div);
            return TE_OK;
        }
#pragma omp parallel for if (x->numel > TE_PAR_MIN) schedule(static)
        for (int64_t o = 0; o < outer; o++)
            Y[o] = (float)(row_sum(X + o * len, len) / div);
        return TE_OK;
    }
    /* Summing across rows: vectorise along inner, in tiles of BLOCK. */
    const int64_t per_row = (inner + BLOCK - 1) / BLOCK;
#pragma omp parallel for if (x->numel > TE_PAR_MIN) schedule(static)
    for (int64_t t = 0; t < outer * per_row; t++) {
        int64_t o = t / per_row, lo = (t % per_row) * BLOCK;
        int64_t m = inner - lo < BLOCK ? inner - lo : BLOCK;
        float *restrict y = Y + o * inner + lo;
        for (int64_t i = 0; i < m; i++)
            y[i] = 0.0f;
        for (int64_t k = 0; k < len; k++) {
            const float *restrict xr = X + (o * len + k) * inner + lo;
#pragma omp simd
            for (int64_t i = 0; i < m; i++)
                y[i] += xr[i];
        }
        if (mean)
            for (int64_t i = 0; i < m; i++)
                y[i] = (float)(y[i] / div);
    }
    return TE_OK;
}

/* dx[o, k, i] = g[o, i], divided by len for the mean. */
static te_status reduce_backward(te_node *n, bool mean)
{
    te_tensor *x = n->in[0];
    if (!te_needs_grad(x))
        return TE_OK;
    int64_t outer, len, inner;
    te_axis_split(x, n->a.axis, &outer, &len, &inner);
    int acc;
    float *D = te_grad_buf(x, &acc);
    const float *G = te_f32(n->out[0]->grad);
    const float scale = mean ? (float)(1.0 / (double)len) : 1.0f;
    if (inner == 1) { /* each g[o] fills a row of len: tiles of BLOCK */
        const int64_t per_row = (len + BLOCK - 1) / BLOCK;
#pragma omp parallel for if (x->numel > TE_PAR_MIN) schedule(static)
        for (int64_t t = 0; t < outer * per_row; t++) {
            int64_t o = t / per_row, lo = (t % per_row) * BLOCK;
            int64_t m = len - lo < BLOCK ? len - lo : BLOCK;
            float *restrict d = D + o * len + lo;
            const float v = G[o] * scale;
            if (acc) {
#pragma omp simd
                for (int64_t i = 0; i < m; i++)
                    d[i] += v;
            } else {
                for (int64_t i = 0; i < m; i++)
                    d[i] = v;
            }
        }
        return TE_OK;
    }
#pragma omp parallel for if (x->numel > TE_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < outer * len; r++) {
        float *restrict d = D + r * inner;
        const float *restrict g = G + (r / len) * inner;
        if (acc) {
#pragma omp simd
            for (int64_t i = 0; i < inner; i++)
                d[i] += g[i] * scale;
        } else {
#pragma omp simd
            for (int64_t i = 0; i < inner; i++)
                d[i] = g[i] * scale;
        }
    }
    return TE_OK;
}

te_status cpu_sum_forward(te_node *n) { return reduce_forward(n, false); }
te_status cpu_sum_backward(te_node *n) { return reduce_backward(n, false); }
te_status cpu_mean_forward(te_node *n) { return reduce_forward(n, true); }
te_status cpu_mean_backward(te_node *n) { return reduce_backward(n, true); }

/* ---- softmax and log_softmax ------------------------------------------------
 * Each of the outer * inner rows holds len elements at stride s (= inner;
 * 1 for the last axis). The row maximum is subtracted before exp, so large
 * logits do not overflow; a NaN anywhere in a row makes the whole row NaN.
 * A softmax row of nothing but -inf (an attention row masked whole) is all
 * zeros, not -inf - -inf = NaN, and its gradient is zero: the backward's
 * y * (g - dot) is 0 there.
 */

/* y = e^(x - m) over a contiguous row, m its maximum (x - m <= 0), by
 * cpu_math.h's vectorising exp. */
CPU_CLONES static void exp_shifted(const float *x, float *y, int64_t len, float m)
{
#pragma omp simd
    for (int64_t k = 0; k < len; k++)
        y[k] = cpu_exp_nonpos(x[k] - m);
}

static void softmax_row(const float *x, float *y, int64_t len, int64_t s, bool log)
{
    float m = x[0];
    for (int64_t k = 1; k < len; k++)
        m = fmaxf(m, x[k * s]); /* fmaxf skips NaN: m is -inf for -inf and NaN only */
    if (m == -INFINITY && !log) {
        float nan = 0.0f;
        for (int64_t k = 0; k < len; k++)
            nan += x[k * s] == -INFINITY ? 0.0f : x[k * s];
        for (int64_t k = 0; k < len; k++)
            y[k * s] = nan; /* 0, or NaN when the row held one */
        return;
    }
    float sum = 0.0f;
    if (log) {
        for (int64_t k = 0; k < len; k++)
            sum += expf(x[k * s] - m);
        const float lse = logf(sum);
        for (int64_t k = 0; k < len; k++)
            y[k * s] = (x[k * s] - m) - lse;
    } else {
        if (s == 1)
            exp_shifted(x, y, len, m);
        else
            for (int64_t k = 0; k < len; k++)
                y[k * s] = cpu_exp_nonpos(x[k * s] - m);
        for (int64_t k = 0; k < len; k++)
            sum += y[k * s];
        const float inv = 1.0f / sum;
        for (int64_t k = 0; k < len; k++)
            y[k * s] *= inv;
    }
}

/* softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g). */
static void softmax_row_grad(const float *y, const float *g, float *d, int64_t len, int64_t s,
                             bool log, bool acc)
{
    float dot = 0.0f;
    for (int64_t k = 0; k < len; k++)
        dot += log ? g[k * s] : g[k * s] * y[k * s];
    for (int64_t k = 0; k < len; k++) {
        const float dx = log ? g[k * s] - expf(y[k * s]) * dot : y[k * s] * (g[k * s] - dot);
        d[k * s] = acc ? d[k * s] + dx : dx;
    }
}

static te_status softmax_forward(te_node *n, bool log)
{
    const te_tensor *x = n->in[0];
    int64_t outer, len, inner;
    te_axis_split(x, n->a.axis, &outer, &len, &inner);
    if (len == 0)
        return TE_OK; /* rows of nothing */
    const float *X = te_f32(x);
    float *Y = te_f32(n->out[0]);
#pragma omp parallel for if (x->numel > TE_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < outer * inner; r++) {
        int64_t base = (r / inner) * len * inner + r % inner;
        softmax_row(X + base, Y + base, len, inner, log);
    }
    return TE_OK;
}

static te_status softmax_backward(te_node *n, bool log)
{
    te_tensor *x = n->in[0];
    if (!te_needs_grad(x))
        return TE_OK;
    int64_t outer, len, inner;
    te_axis_split(x, n->a.axis, &outer, &len, &inner);
    int acc;
    float *D = te_grad_buf(x, &acc);
    const float *Y = te_f32(n->out[0]), *G = te_f32(n->out[0]->grad);
#pragma omp parallel for if (x->numel > TE_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < outer * inner; r++) {
        int64_t base = (r / inner) * len * inner + r % inner;
        softmax_row_grad(Y + base, G + base, D + base, len, inner, log, acc);
    }
    return TE_OK;
}

te_status cpu_softmax_forward(te_node *n) { return softmax_forward(n, false); }
te_status cpu_softmax_backward(te_node *n) { return softmax_backward(n, false); }
te_status cpu_log_softmax_forward(te_node *n) { return softmax_forward(n, true); }
te_status cpu_log_softmax_backward(te_node *n) { return softmax_backward(n, true); }
