/*
 * cpu_norm.c — batch norm and layer norm, forward and backward.
 *
 * Statistics accumulate in double, in a fixed order within each channel or
 * row, and threads split only across channels or rows: results are the same
 * bit for bit on any thread count.
 */
#include "cpu_kernels.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

/* ---- batch norm ------------------------------------------------------------
 * x is (N,C,S) with S = H*W (1 for [N,C]); inputs: x, gamma|NULL, beta|NULL,
 * running_mean|NULL, running_var|NULL. saved[0] = mean, saved[1] = rstd, both
 * [C]: the batch's in training, the running stats' in eval.
 */

static void bn_dims(const te_tensor *x, int64_t *N, int64_t *C, int64_t *S)
{
    *N = x->shape[0];
    *C = x->shape[1];
    *S = x->ndim == 4 ? x->shape[2] * x->shape[3] : 1;
}

/* A low-precision batch norm works in per-thread f32 scratch
 * (cpu_half_scratch): a channel's rows widened once (te_half_to_f32) and an
 * output row rounded from (te_round_block), so the f32 arithmetic below runs
 * on the same values, in the same order, as on the shadow path's f32 copies
 * and gives the same bits. */

/* Row i of channel c: in the f32 tensor p, or widened at w + i * S. */
#define BN_ROW(p, w, i) ((w) ? (w) + (i) * S : (p) + ((i) * C + c) * S)

/* y = batchnorm(x), then ReLU in the same pass when relu is set (graph
 * mode's fused kernel: the un-activated result never reaches memory). x and
 * y are f32, or both f16/bf16 (the native low-precision kernel: y rounded
 * row by row, what rounding did in n->round[0]). */
static inline te_status batchnorm_forward(te_node *n, void *y, bool relu)
{
    const te_tensor *x = n->in[0];
    const te_dtype dt = x->dtype;
    const bool half = dt != TE_F32;
    int64_t N, C, S;
    bn_dims(x, &N, &C, &S);
    te_tensor *sm = n->saved[0], *sr = n->saved[1];
    const float *xp = half ? NULL : te_f32(x);
    const float *g = n->in[1] ? te_f32(n->in[1]) : NULL;
    const float *b = n->in[2] ? te_f32(n->in[2]) : NULL;
    float *rm = n->in[3] ? te_f32(n->in[3]) : NULL;
    float *rv = n->in[4] ? te_f32(n->in[4]) : NULL;
    float *mean = te_f32(sm), *rstd = te_f32(sr);
    const bool training = n->a.training;
    const float mom = n->a.momentum, eps = n->a.eps;
    const int64_t M = N * S;
    const bool par = N * C * S >= TE_PAR_MIN;
    const int threads = par && !omp_in_parallel() ? omp_get_max_threads() : 1;
    size_t bytes;
    float *scratch = cpu_half_scratch(half, M + S, threads, &bytes);
    if (half && !scratch)
        return te_kernel_fail(n, TE_ERR_NOMEM, "out of memory for %lld floats", (long long)(M + S));
    te_round_stats total;
    cpu_round_stats_init(&total, dt);

#pragma omp parallel if (par) num_threads(threads)
    {
        float *xw = half ? scratch + (int64_t)omp_get_thread_num() * (M + S) : NULL, *yw = xw ? xw + M : NULL;
        te_round_stats part;
        cpu_round_stats_init(&part, dt);
#pragma omp for
        for (int64_t c = 0; c < C; c++) {
            if (xw)
                for (int64_t i = 0; i < N; i++)
                    te_half_to_f32((const uint16_t *)x->data + (i * C + c) * S, xw + i * S, dt, S);
            float m, r;
            if (training) {
                double s = 0.0;
                for (int64_t i = 0; i < N; i++) {
                    const float *xc = BN_ROW(xp, xw, i);
#pragma omp simd reduction(+ : s)
                    for (int64_t k = 0; k < S; k++)
                        s += xc[k];
                }
                double dm = s / (double)M, ss = 0.0;
                /* two passes: the shifted sum of squares does not cancel */
                for (int64_t i = 0; i < N; i++) {
                    const float *xc = BN_ROW(xp, xw, i);
#pragma omp simd reduction(+ : ss)
                    for (int64_t k = 0; k < S; k++) {
                        double d = xc[k] - dm;
                        ss += d * d;
                    }
                }
                double var = ss / (double)M;
                m = (float)dm;
                r = (float)(1.0 / sqrt(var + eps));
                if (rm) {
                    /* biased variance normalises, unbiased feeds the running estimate */
                    rm[c] = (1.0f - mom) * rm[c] + mom * m;
                    rv[c] = (1.0f - mom) * rv[c] + mom * (float)(ss / (double)(M - 1));
                }
            } else {
                m = rm[c];
                r = 1.0f / sqrtf(rv[c] + eps);
            }
            mean[c] = m;
            rstd[c] = r;
            /* y = x * a + d folds the affine into one multiply-add */
            float a = r * (g ? g[c] : 1.0f);
            float d = (b ? b[c] : 0.0f) - m * a;
            for (int64_t i = 0; i < N; i++) {
                const float *xc = BN_ROW(xp, xw, i);
                float *yc = yw ? yw : (float *)y + (i * C + c) * S;
#pragma omp simd
                for (int64_t k = 0; k < S; k++) {
                    const float v = xc[k] * a + d;
                    yc[k] = relu && v < 0.0f ? 0.0f : v; /* ReLU's own formula */
                }
                if (yw)
                    te_round_block(yw, (uint16_t *)y + (i * C + c) * S, dt, S, &part);
            }
        }
        if (half) {
#pragma omp critical
            cpu_round_stats_merge(&total, &part);
        }
    }
    te_mem_free(scratch, bytes);
    if (half) {
        n->round[0] = total;
        n->rounded = true;
    }
    return TE_OK;
}

/* x in nChw16c: graph mode's choice after a conv (cpu_norm_blocked.c) */
static bool blocked_x(const te_node *n) { return n->in[0]->flags & TE_TENSOR_BLOCKED16; }

te_status cpu_batchnorm_forward(te_node *n)
{
    return blocked_x(n) ? cpu_bn_blocked_forward(n, n->out[0], false)
                        : batchnorm_forward(n, te_f32(n->out[0]), false);
}

te_status cpu_batchnorm_relu_forward(te_node *bn, te_node *relu)
{
    return blocked_x(bn) ? cpu_bn_blocked_forward(bn, relu->out[0], true)
                         : batchnorm_forward(bn, te_f32(relu->out[0]), true);
}

/* The native low-precision kernels take x, y and dy all f16 or all bf16,
 * with gamma, beta and the running stats f32 (O2's batch norm). */
static bool bn_lowp_takes(const te_node *n)
{
    const te_tensor *x = n->in[0], *y = n->out[0];
    if (!cpu_is_half(x) || y->dtype != x->dtype || x->numel == 0)
        return false;
    for (int i = 1; i < 5; i++)
        if (n->in[i] && n->in[i]->dtype != TE_F32)
            return false;
    return true;
}

te_status cpu_batchnorm_forward_lowp(te_node *n)
{
    return bn_lowp_takes(n) ? batchnorm_forward(n, n->out[0]->data, false) : TE_LOWP_DECLINED;
}

/* Training: with xh = (x - mean) * rstd,
 *   dx = gamma * rstd * (dy - mean(dy) - xh * mean(dy * xh)).
 * Eval: mean and rstd are constants, so dx = gamma * rstd * dy.
 * dgamma = sum(dy * xh), dbeta = sum(dy) in both. */
/* The gradient reaching the batch norm: dy, or with a ReLU after it in one
 * fused kernel, ReLU's backward of g at its output y, in ReLU's formula. */
/* The backward's loops over one row, written once for a plain dy and once
 * for dy through a fused ReLU (dy * (y > 0), ReLU's own formula), so that
 * neither tests the pointer per element and both vectorise; the sums'
 * order is the compiler's vector one (omp simd reduction), the same on
 * every run. */
#define BN_ROW_LOOPS(SUFFIX, DY)                                                                   \
    static inline void bn_sums##SUFFIX(const float *xc, const float *dyc, const float *yc, int64_t S, \
                                       float m, float r, double *sdy_, double *sdyxh_)             \
    {                                                                                              \
        double sdy = *sdy_, sdyxh = *sdyxh_;                                                       \
        (void)yc;                                                                                  \
        _Pragma("omp simd reduction(+ : sdy, sdyxh)")                                              \
        for (int64_t k = 0; k < S; k++) {                                                          \
            const float d = (DY);                                                                  \
            sdy += d;                                                                              \
            sdyxh += (double)d * ((xc[k] - m) * r);                                                \
        }                                                                                          \
        *sdy_ = sdy;                                                                               \
        *sdyxh_ = sdyxh;                                                                           \
    }                                                                                              \
    static inline void bn_dx##SUFFIX(float *dxc, int acc, const float *xc, const float *dyc,       \
                                     const float *yc, int64_t S, float m, float r, float gr,       \
                                     float mdy, float mdyxh)                                       \
    {                                                                                              \
        (void)yc;                                                                                  \
        if (acc) {                                                                                 \
            _Pragma("omp simd")                                                                    \
            for (int64_t k = 0; k < S; k++)                                                        \
                dxc[k] += gr * ((DY) - mdy - (xc[k] - m) * r * mdyxh);                             \
        } else {                                                                                   \
            _Pragma("omp simd")                                                                    \
            for (int64_t k = 0; k < S; k++)                                                        \
                dxc[k] = gr * ((DY) - mdy - (xc[k] - m) * r * mdyxh);                              \
        }                                                                                          \
    }

BN_ROW_LOOPS(, dyc[k])
BN_ROW_LOOPS(_relu, dyc[k] * (float)!(yc[k] <= 0.0f)) /* the ternary of ReLU's formula, as a mask GCC vectorises */

/* dy (and relu_y) f32, or for the native low-precision kernel x, dy and
 * dx f16/bf16: the channel's x and dy rows widened once, each dx row
 * computed in f32 (onto the widened gradient already there) and rounded,
 * what rounding did in n->round[0]; dgamma and dbeta stay f32. */
static inline te_status batchnorm_backward(te_node *n, const void *dyv, const float *relu_y)
{
    te_tensor *x = n->in[0], *gt = n->in[1], *bt = n->in[2];
    const te_dtype dt = x->dtype;
    const bool half = dt != TE_F32;
    int64_t N, C, S;
    bn_dims(x, &N, &C, &S);
    const float *xp = half ? NULL : te_f32(x), *dy = half ? NULL : dyv;
    const float *g = gt ? te_f32(gt) : NULL;
    const float *mean = te_f32(n->saved[0]), *rstd = te_f32(n->saved[1]);
    const int64_t MN = N * S;
    const bool par = N * C * S >= TE_PAR_MIN;
    const int threads = par && !omp_in_parallel() ? omp_get_max_threads() : 1;
    size_t bytes;
    float *scratch = cpu_half_scratch(half, 2 * MN + S, threads, &bytes);
    if (half && !scratch)
        return te_kernel_fail(n, TE_ERR_NOMEM, "out of memory for %lld floats", (long long)(2 * MN + S));
    int ax = 0, ag = 0, ab = 0;
    void *dxv = te_needs_grad(x) ? te_grad_buf(x, &ax) : NULL;
    float *dg = gt && te_needs_grad(gt) ? te_grad_buf(gt, &ag) : NULL;
    float *db = bt && te_needs_grad(bt) ? te_grad_buf(bt, &ab) : NULL;
    const bool training = n->a.training;
    const double M = (double)MN;
    te_round_stats total;
    cpu_round_stats_init(&total, dt);

#pragma omp parallel if (par) num_threads(threads)
    {
        float *xw = half ? scratch + (int64_t)omp_get_thread_num() * (2 * MN + S) : NULL;
        float *dyw = xw ? xw + MN : NULL, *dxw = xw ? xw + 2 * MN : NULL;
        te_round_stats part;
        cpu_round_stats_init(&part, dt);
#pragma omp for
        for (int64_t c = 0; c < C; c++) {
            if (xw)
                for (int64_t i = 0; i < N; i++) {
                    const int64_t o = (i * C + c) * S;
                    te_half_to_f32((const uint16_t *)x->data + o, xw + i * S, dt, S);
                    te_half_to_f32((const uint16_t *)dyv + o, dyw + i * S, dt, S);
                }
            const float m = mean[c], r = rstd[c];
            double sdy = 0.0, sdyxh = 0.0;
            for (int64_t i = 0; i < N; i++) {
                const float *xc = BN_ROW(xp, xw, i), *dyc = BN_ROW(dy, dyw, i);
                const float *yc = relu_y ? relu_y + (i * C + c) * S : NULL;
                if (yc)
                    bn_sums_relu(xc, dyc, yc, S, m, r, &sdy, &sdyxh);
                else
                    bn_sums(xc, dyc, NULL, S, m, r, &sdy, &sdyxh);
            }
            if (dg)
                dg[c] = (ag ? dg[c] : 0.0f) + (float)sdyxh;
            if (db)
                db[c] = (ab ? db[c] : 0.0f) + (float)sdy;
            if (!dxv)
                continue;
            const float gr = (g ? g[c] : 1.0f) * r;
            const float mdy = training ? (float)(sdy / M) : 0.0f;
            const float mdyxh = training ? (float)(sdyxh / M) : 0.0f;
            for (int64_t i = 0; i < N; i++) {
                const int64_t o = (i * C + c) * S;
                const float *xc = BN_ROW(xp, xw, i), *dyc = BN_ROW(dy, dyw, i);
                const float *yc = relu_y ? relu_y + o : NULL;
                float *dxc = dxw ? dxw : (float *)dxv + o;
                if (dxw && ax)
                    te_half_to_f32((const uint16_t *)dxv + o, dxw, dt, S);
                if (yc)
                    bn_dx_relu(dxc, ax, xc, dyc, yc, S, m, r, gr, mdy, mdyxh);
                else
                    bn_dx(dxc, ax, xc, dyc, NULL, S, m, r, gr, mdy, mdyxh);
                if (dxw)
                    te_round_block(dxw, (uint16_t *)dxv + o, dt, S, &part);
            }
        }
        if (half) {
#pragma omp critical
            cpu_round_stats_merge(&total, &part);
        }
    }
    te_mem_free(scratch, bytes);
    if (half && dxv) {
        n->round[0] = total;
        n->rounded = true;
    }
    return TE_OK;
}

te_status cpu_batchnorm_backward(te_node *n)
{
    return blocked_x(n) ? cpu_bn_blocked_backward(n, n->out[0], false)
                        : batchnorm_backward(n, te_f32(n->out[0]->grad), NULL);
}

te_status cpu_batchnorm_relu_backward(te_node *bn, te_node *relu)
{
    if (blocked_x(bn))
        return cpu_bn_blocked_backward(bn, relu->out[0], true);
    return batchnorm_backward(bn, te_f32(relu->out[0]->grad), te_f32(relu->out[0]));
}

te_status cpu_batchnorm_backward_lowp(te_node *n)
{
    const te_tensor *y = n->out[0];
    if (!bn_lowp_takes(n) || !y->grad || y->grad->dtype != y->dtype)
        return TE_LOWP_DECLINED;
    return batchnorm_backward(n, y->grad->data, NULL);
}

#undef BN_ROW

/* ---- layer norm ------------------------------------------------------------
 * x is (R,D) with D the last dim; inputs: x, gamma|NULL, beta|NULL.
 * saved[0] = mean, saved[1] = rstd, both [R].
 */

te_status cpu_layernorm_forward(te_node *n)
{
    const te_tensor *x = n->in[0];
    const int64_t D = x->shape[x->ndim - 1], R = D ? x->numel / D : 0;
    te_tensor *sm = n->saved[0], *sr = n->saved[1];
    const float *xp = te_f32(x);
    const float *g = n->in[1] ? te_f32(n->in[1]) : NULL;
    const float *b = n->in[2] ? te_f32(n->in[2]) : NULL;
    float *y = te_f32(n->out[0]), *mean = te_f32(sm), *rstd = te_f32(sr);
    const float eps = n->a.eps;

#pragma omp parallel for if (x->numel >= TE_PAR_MIN)
    for (int64_t i = 0; i < R; i++) {
        const float *xr = xp + i * D;
        float *yr = y + i * D;
        double s = 0.0, ss = 0.0;
        for (int64_t k = 0; k < D; k++)
            s += xr[k];
        const double dm = s / (double)D;
        for (int64_t k = 0; k < D; k++) {
            double d = xr[k] - dm;
            ss += d * d;
        }
        const float m = (float)dm, r = (float)(1.0 / sqrt(ss / (double)D + eps));
        mean[i] = m;
        rstd[i] = r;
        if (g && b)
            for (int64_t k = 0; k < D; k++)
                yr[k] = (xr[k] - m) * r * g[k] + b[k];
        else
            for (int64_t k = 0; k < D; k++)
                yr[k] = (xr[k] - m) * r * (g ? g[k] : 1.0f) + (b ? b[k] : 0.0f);
    }
    return TE_OK;
}

/* With xh = (x - mean) * rstd and dxh = dy * gamma,
 *   dx = rstd * (dxh - mean(dxh) - xh * mean(dxh * xh)),
 * dgamma = sum over rows of dy * xh, dbeta = sum over rows of dy. */
te_status cpu_layernorm_backward(te_node *n)
{
    te_tensor *x = n->in[0], *gt = n->in[1], *bt = n->in[2];
    const int64_t D = x->shape[x->ndim - 1], R = D ? x->numel / D : 0;
    const float *xp = te_f32(x), *dy = te_f32(n->out[0]->grad);
    const float *g = gt ? te_f32(gt) : NULL;
    const float *mean = te_f32(n->saved[0]), *rstd = te_f32(n->saved[1]);
    int ax = 0, ag = 0, ab = 0;
    float *dx = te_needs_grad(x) ? te_grad_buf(x, &ax) : NULL;
    float *dg = gt && te_needs_grad(gt) ? te_grad_buf(gt, &ag) : NULL;
    float *db = bt && te_needs_grad(bt) ? te_grad_buf(bt, &ab) : NULL;

    if (dx) {
#pragma omp parallel for if (x->numel >= TE_PAR_MIN)
        for (int64_t i = 0; i < R; i++) {
            const float *xr = xp + i * D, *dyr = dy + i * D;
            float *dxr = dx + i * D;
            const float m = mean[i], r = rstd[i];
            double s1 = 0.0, s2 = 0.0;
            for (int64_t k = 0; k < D; k++) {
                float dxh = dyr[k] * (g ? g[k] : 1.0f);
                s1 += dxh;
                s2 += (double)dxh * ((xr[k] - m) * r);
            }
            const float m1 = (float)(s1 / (double)D), m2 = (float)(s2 / (double)D);
            if (ax)
                for (int64_t k = 0; k < D; k++)
                    dxr[k] += r * (dyr[k] * (g ? g[k] : 1.0f) - m1 - (xr[k] - m) * r * m2);
            else
                for (int64_t k = 0; k < D; k++)
                    dxr[k] = r * (dyr[k] * (g ? g[k] : 1.0f) - m1 - (xr[k] - m) * r * m2);
        }
    }
    if (!dg && !db)
        return TE_OK;
    /* Parameter grads sum over rows: in double, sequential over rows and
     * vectorised over D, so the order of additions never depends on the
     * thread count. */
    double *acc = calloc(2 * (size_t)D, sizeof *acc);
    if (!acc) {
        te_set_error(TE_ERR_NOMEM, "%s: out of memory for %lld sums", n->grad_name, (long long)D);
        return TE_ERR_NOMEM;
    }
    double *sg = acc, *sb = acc + D;
    for (int64_t i = 0; i < R; i++) {
        const float *xr = xp + i * D, *dyr = dy + i * D;
        const float m = mean[i], r = rstd[i];
        for (int64_t k = 0; k < D; k++) {
            sg[k] += dyr[k] * ((xr[k] - m) * r);
            sb[k] += dyr[k];
        }
    }
    for (int64_t k = 0; k < D; k++) {
        if (dg)
            dg[k] = (ag ? dg[k] : 0.0f) + (float)sg[k];
        if (db)
            db[k] = (ab ? db[k] : 0.0f) + (float)sb[k];
    }
    free(acc);
    return TE_OK;
}
