/*
 * k_bn.cu — batch norm on the device, as engine/cpu/cpu_norm.c computes it.
 *
 * One block per channel. Statistics accumulate in double like the CPU's,
 * each thread over a fixed stride of the channel's N*S values, then a
 * fixed-order tree: no atomics, the same bits on every run. The per-element
 * formulas are the CPU's, term by term, through __fadd_rn/__fmul_rn so that
 * nvcc does not fuse what the CPU (ISO C, no contraction) rounds twice.
 */
#include "cuda/k_bn.h"

#include <math.h>

/* Element j (0 <= j < N*S) of channel c in (N, C, S). */
static __device__ __forceinline__ int64_t at(int64_t j, int64_t c, int64_t C, int64_t S)
{
    return (j / S * C + c) * S + j % S;
}

/* The sum of v over the block, in a fixed order, to every thread;
 * blockDim.x == K_BN_THREADS (a power of two). part is free again on return. */
static __device__ double block_sum(double *part, double v)
{
    part[threadIdx.x] = v;
    __syncthreads();
    for (int half = K_BN_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    const double r = part[0];
    __syncthreads();
    return r;
}

static __global__ void bn_fwd(k_bn_args a, float *y, int relu)
{
    __shared__ double part[K_BN_THREADS];
    __shared__ float scale, shift;
    const int64_t c = blockIdx.x, M = a.N * a.S;
    float m = 0.0f, r = 0.0f;
    if (a.training) {
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < M; j += K_BN_THREADS)
            s += a.x[at(j, c, a.C, a.S)];
        const double dm = block_sum(part, s) / (double)M;
        double ss = 0.0; /* two passes: the shifted sum of squares does not cancel */
        for (int64_t j = threadIdx.x; j < M; j += K_BN_THREADS) {
            const double d = a.x[at(j, c, a.C, a.S)] - dm;
            ss += d * d;
        }
        ss = block_sum(part, ss);
        m = (float)dm;
        r = (float)(1.0 / sqrt(ss / (double)M + (double)a.eps));
        if (threadIdx.x == 0 && a.run_mean) {
            /* biased variance normalises, unbiased feeds the running estimate */
            const float keep = 1.0f - a.momentum;
            a.run_mean[c] = __fadd_rn(__fmul_rn(keep, a.run_mean[c]), __fmul_rn(a.momentum, m));
            a.run_var[c] = __fadd_rn(__fmul_rn(keep, a.run_var[c]), __fmul_rn(a.momentum, (float)(ss / (double)(M - 1))));
        }
    } else {
        m = a.run_mean[c];
        r = 1.0f / sqrtf(__fadd_rn(a.run_var[c], a.eps));
    }
    if (threadIdx.x == 0) {
        a.mean[c] = m;
        a.rstd[c] = r;
        const float sc = __fmul_rn(r, a.gamma ? a.gamma[c] : 1.0f);
        scale = sc;
        shift = __fsub_rn(a.beta ? a.beta[c] : 0.0f, __fmul_rn(m, sc));
    }
    __syncthreads();
    const float sc = scale, sh = shift;
    for (int64_t j = threadIdx.x; j < M; j += K_BN_THREADS) {
        const int64_t e = at(j, c, a.C, a.S);
        const float v = __fadd_rn(__fmul_rn(a.x[e], sc), sh);
        y[e] = relu && v < 0.0f ? 0.0f : v; /* ReLU's own formula */
    }
}

/* The gradient reaching the batch norm: dy, or through a fused ReLU with
 * output ry, ReLU's backward in its own formula. */
static __device__ __forceinline__ float grad_in(const float *dy, const float *ry, int64_t e)
{
    return ry ? __fmul_rn(dy[e], ry[e] <= 0.0f ? 0.0f : 1.0f) : dy[e];
}

/* Training: with xh = (x - mean) * rstd,
 *   dx = gamma * rstd * (dy - mean(dy) - xh * mean(dy * xh));
 * eval: dx = gamma * rstd * dy. dgamma = sum(dy * xh), dbeta = sum(dy). */
static __global__ void bn_bwd(k_bn_args a, const float *dy, const float *ry, float *dx, int ax, float *dg, int ag,
                              float *db, int ab)
{
    __shared__ double part[K_BN_THREADS];
    const int64_t c = blockIdx.x, M = a.N * a.S;
    const float m = a.mean[c], r = a.rstd[c];
    double sdy = 0.0, sdyxh = 0.0;
    for (int64_t j = threadIdx.x; j < M; j += K_BN_THREADS) {
        const int64_t e = at(j, c, a.C, a.S);
        const float d = grad_in(dy, ry, e);
        sdy += d;
        sdyxh += (double)d * (double)__fmul_rn(__fsub_rn(a.x[e], m), r);
    }
    sdy = block_sum(part, sdy);
    sdyxh = block_sum(part, sdyxh);
    if (threadIdx.x == 0) {
        if (dg)
            dg[c] = __fadd_rn(ag ? dg[c] : 0.0f, (float)sdyxh);
        if (db)
            db[c] = __fadd_rn(ab ? db[c] : 0.0f, (float)sdy);
    }
    if (!dx)
        return;
    const float gr = __fmul_rn(a.gamma ? a.gamma[c] : 1.0f, r);
    const float mdy = a.training ? (float)(sdy / (double)M) : 0.0f;
    const float mdyxh = a.training ? (float)(sdyxh / (double)M) : 0.0f;
    for (int64_t j = threadIdx.x; j < M; j += K_BN_THREADS) {
        const int64_t e = at(j, c, a.C, a.S);
        const float t = __fmul_rn(__fmul_rn(__fsub_rn(a.x[e], m), r), mdyxh);
        const float v = __fmul_rn(gr, __fsub_rn(__fsub_rn(grad_in(dy, ry, e), mdy), t));
        dx[e] = ax ? __fadd_rn(dx[e], v) : v;
    }
}

static __global__ void bn_fold(const float *w, const float *b, const float *g, const float *beta, const float *rm,
                               const float *rv, float eps, float *fw, float *fb, int64_t O, int64_t per)
{
    const int64_t nw = O * per;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nw + O; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = i < nw ? i / per : i - nw;
        const float s = __fmul_rn(g ? g[o] : 1.0f, 1.0f / sqrtf(__fadd_rn(rv[o], eps)));
        if (i < nw)
            fw[i] = __fmul_rn(w[i], s);
        else
            fb[o] = __fsub_rn(__fadd_rn(__fmul_rn(b ? b[o] : 0.0f, s), beta ? beta[o] : 0.0f), __fmul_rn(rm[o], s));
    }
}

static __global__ void chan_sum(const float *x, float *out, int acc, int64_t N, int64_t C, int64_t S)
{
    __shared__ double part[K_BN_THREADS];
    const int64_t c = blockIdx.x, M = N * S;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < M; j += K_BN_THREADS)
        s += x[at(j, c, C, S)];
    s = block_sum(part, s);
    if (threadIdx.x == 0)
        out[c] = acc ? __fadd_rn(out[c], (float)s) : (float)s;
}

extern "C" void k_bn_fwd(const k_bn_args *a, float *y, int relu, cudaStream_t s)
{
    bn_fwd<<<(unsigned)a->C, K_BN_THREADS, 0, s>>>(*a, y, relu);
}

extern "C" void k_bn_bwd(const k_bn_args *a, const float *dy, const float *relu_y, float *dx, int ax, float *dgamma,
                         int ag, float *dbeta, int ab, cudaStream_t s)
{
    bn_bwd<<<(unsigned)a->C, K_BN_THREADS, 0, s>>>(*a, dy, relu_y, dx, ax, dgamma, ag, dbeta, ab);
}

extern "C" void k_bn_fold(const float *w, const float *b, const float *gamma, const float *beta, const float *run_mean,
                          const float *run_var, float eps, float *fw, float *fb, int64_t O, int64_t per, int blocks,
                          cudaStream_t s)
{
    bn_fold<<<blocks, K_BN_THREADS, 0, s>>>(w, b, gamma, beta, run_mean, run_var, eps, fw, fb, O, per);
}

extern "C" void k_chan_sum(const float *x, float *out, int acc, int64_t N, int64_t C, int64_t S, cudaStream_t s)
{
    chan_sum<<<(unsigned)C, K_BN_THREADS, 0, s>>>(x, out, acc, N, C, S);
}
