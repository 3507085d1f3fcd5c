/* cpu_loss.c — cross entropy and mean squared error. */
#include "cpu_kernels.h"

#include <math.h>

/* ---- cross entropy ----------------------------------------------------------
 * z [N,C], labels [N]: loss = mean_r (lse_r - z[r, y_r]) with
 * lse_r = m_r + log sum_c exp(z[r,c] - m_r), m_r the row maximum so that
 * large logits do not overflow. lse is kept for the backward:
 * dz[r,c] = g / N * (exp(z[r,c] - lse_r) - [c == y_r]).
 */
te_status cpu_cross_entropy_forward(te_node *n)
{
    const te_tensor *z = n->in[0];
    const int64_t N = z->shape[0], C = z->shape[1];
    te_tensor *lse_t = n->saved[0];
    const float *Z = te_f32(z);
    const int32_t *Y = te_i32(n->in[1]);
    for (int64_t r = 0; r < N; r++)
        if (Y[r] < 0 || Y[r] >= C) {
            char sz[96];
            return te_kernel_fail(n, TE_ERR_ARG,
                                  "label %d at index %lld is out of range for %lld classes (logits %s)",
                                  (int)Y[r], (long long)r, (long long)C,
                                  te_shape_str(z->ndim, z->shape, sz, sizeof sz));
        }
    float *lse = te_f32(lse_t);
#pragma omp parallel for if (z->numel > TE_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < N; r++) {
        const float *zr = Z + r * C;
        float m = zr[0];
        for (int64_t c = 1; c < C; c++)
            m = fmaxf(m, zr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < C; c++)
            s += expf(zr[c] - m);
        lse[r] = m + logf(s);
    }
    double loss = 0.0; /* summed in row order: the same for any thread count */
    for (int64_t r = 0; r < N; r++)
        loss += (double)lse[r] - Z[r * C + Y[r]];
    te_f32(n->out[0])[0] = (float)(loss / (double)N);
    return TE_OK;
}

te_status cpu_cross_entropy_backward(te_node *n)
{
    te_tensor *z = n->in[0];
    if (!te_needs_grad(z))
        return TE_OK;
    const int64_t N = z->shape[0], C = z->shape[1];
    int acc;
    float *D = te_grad_buf(z, &acc);
    const float *Z = te_f32(z), *lse = te_f32(n->saved[0]);
    const int32_t *Y = te_i32(n->in[1]);
    const float g = te_f32(n->out[0]->grad)[0] / (float)N;
#pragma omp parallel for if (z->numel > TE_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < N; r++) {
        const float *restrict zr = Z + r * C;
        float *restrict d = D + r * C;
        for (int64_t c = 0; c < C; c++) {
            const float dz = g * (expf(zr[c] - lse[r]) - (c == Y[r] ? 1.0f : 0.0f));
            d[c] = acc ? d[c] + dz : dz;
        }
    }
    return TE_OK;
}

/* ---- mean squared error -------------------------------------------------------
 * loss = sum (p - t)^2 / numel; dp = 2 (p - t) g / numel, dt = -dp.
 */
te_status cpu_mse_forward(te_node *n)
{
    const float *restrict P = te_f32(n->in[0]), *restrict T = te_f32(n->in[1]);
    const int64_t N = n->in[0]->numel;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < N; i++) {
        const double e = (double)P[i] - T[i];
        s += e * e;
    }
    te_f32(n->out[0])[0] = (float)(s / (double)N);
    return TE_OK;
}

static void mse_grad(te_node *n, int which, float sign)
{
    te_tensor *x = n->in[which];
    if (!te_needs_grad(x))
        return;
    int acc;
    float *restrict D = te_grad_buf(x, &acc);
    const float *restrict P = te_f32(n->in[0]), *restrict T = te_f32(n->in[1]);
    const int64_t N = x->numel;
    const float k = sign * 2.0f * te_f32(n->out[0]->grad)[0] / (float)N;
    if (acc) {
#pragma omp parallel for simd if (parallel : N > TE_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < N; i++)
            D[i] += k * (P[i] - T[i]);
    } else {
#pragma omp parallel for simd if (parallel : N > TE_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < N; i++)
            D[i] = k * (P[i] - T[i]);
    }
}

te_status cpu_mse_backward(te_node *n)
{
    mse_grad(n, 0, 1.0f);
    mse_grad(n, 1, -1.0f);
    return TE_OK;
}
