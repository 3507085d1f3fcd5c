/* k_reduce.cu — reductions, softmax, losses and layer norm (k_reduce.h). */
#include "cuda/k_reduce.h"

#define KR_THREADS 256 /* every kernel here; the trees assume a power of two */
#define KR_MAX_GRID 32768

/* Blocks for units of work done one per block, or one per thread when
 * per_thread; the loops stride over the rest. */
static int grid_for(int64_t units, int per_thread)
{
    int64_t b = per_thread ? (units + KR_THREADS - 1) / KR_THREADS : units;
    return (int)(b < 1 ? 1 : b > KR_MAX_GRID ? KR_MAX_GRID : b);
}

struct add_op {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct max_op {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/* v of every thread combined by op in a fixed tree; every thread gets the
 * result. sh holds KR_THREADS values and is free again on return. */
template <typename T, typename Op> static __device__ T block_reduce(T v, T *sh, Op op)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = KR_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    const T r = sh[0];
    __syncthreads();
    return r;
}

static __device__ __forceinline__ float finish_sum(double s, double div, int mode)
{
    return mode == KR_DIV_FLOAT ? (float)s / (float)div : (float)(s / div);
}

/* ---- sum and mean ---------------------------------------------------------- */

/* Pass 1: task t = (row, chunk) sums its chunk in double; a row of one
 * chunk is finished here, else the chunk's sum goes to scratch[t]. */
static __global__ void __launch_bounds__(KR_THREADS)
row_sum_pass1(const float *x, int64_t outer, int64_t len, int64_t nch, double div, int mode, double *scratch, float *y)
{
    __shared__ double sh[KR_THREADS];
    for (int64_t t = blockIdx.x; t < outer * nch; t += gridDim.x) {
        const int64_t row = t / nch, lo = (t % nch) * KR_CHUNK;
        const int64_t hi = lo + KR_CHUNK < len ? lo + KR_CHUNK : len;
        const float *xr = x + row * len;
        double s = 0.0;
        for (int64_t k = lo + threadIdx.x; k < hi; k += KR_THREADS)
            s += xr[k];
        s = block_reduce(s, sh, add_op());
        if (threadIdx.x == 0) {
            if (nch == 1)
                y[row] = finish_sum(s, div, mode);
            else
                scratch[t] = s;
        }
    }
}

/* Pass 2: each row's chunk sums added in chunk order. */
static __global__ void row_sum_pass2(const double *scratch, int64_t outer, int64_t nch, double div, int mode, float *y)
{
    for (int64_t row = (int64_t)blockIdx.x * KR_THREADS + threadIdx.x; row < outer;
         row += (int64_t)gridDim.x * KR_THREADS) {
        double s = 0.0;
        for (int64_t c = 0; c < nch; c++)
            s += scratch[row * nch + c];
        y[row] = finish_sum(s, div, mode);
    }
}

static int64_t row_chunks(int64_t len) { return len > 0 ? (len + KR_CHUNK - 1) / KR_CHUNK : 1; }

extern "C" int64_t kr_row_sum_scratch(int64_t outer, int64_t len)
{
    const int64_t nch = row_chunks(len);
    return nch > 1 ? outer * nch : 0;
}

extern "C" cudaError_t kr_row_sum(const float *x, int64_t outer, int64_t len, double div, int mode, double *scratch,
                                  float *y, cudaStream_t stream)
{
    if (outer <= 0)
        return cudaGetLastError();
    const int64_t nch = row_chunks(len);
    row_sum_pass1<<<grid_for(outer * nch, 0), KR_THREADS, 0, stream>>>(x, outer, len, nch, div, mode, scratch, y);
    if (nch > 1)
        row_sum_pass2<<<grid_for(outer, 1), KR_THREADS, 0, stream>>>(scratch, outer, nch, div, mode, y);
    return cudaGetLastError();
}

static __global__ void col_sum(const float *x, int64_t outer, int64_t len, int64_t inner, double div, int mean,
                               float *y)
{
    for (int64_t j = (int64_t)blockIdx.x * KR_THREADS + threadIdx.x; j < outer * inner;
         j += (int64_t)gridDim.x * KR_THREADS) {
        const int64_t o = j / inner, i = j % inner;
        const float *xo = x + o * len * inner + i;
        float s = 0.0f;
        for (int64_t k = 0; k < len; k++)
            s += xo[k * inner];
        y[j] = mean ? (float)(s / div) : s;
    }
}

extern "C" cudaError_t kr_col_sum(const float *x, int64_t outer, int64_t len, int64_t inner, double div, int mean,
                                  float *y, cudaStream_t stream)
{
    if (outer * inner > 0)
        col_sum<<<grid_for(outer * inner, 1), KR_THREADS, 0, stream>>>(x, outer, len, inner, div, mean, y);
    return cudaGetLastError();
}

static __global__ void broadcast_grad(const float *g, int64_t outer, int64_t len, int64_t inner, float scale,
                                      int divide, int acc, float *d)
{
    const int64_t n = outer * len * inner;
    for (int64_t j = (int64_t)blockIdx.x * KR_THREADS + threadIdx.x; j < n; j += (int64_t)gridDim.x * KR_THREADS) {
        const int64_t o = j / (len * inner), i = j % inner;
        const float gv = g[o * inner + i], v = divide ? gv / scale : gv * scale;
        d[j] = acc ? d[j] + v : v;
    }
}

extern "C" cudaError_t kr_broadcast_grad(const float *g, int64_t outer, int64_t len, int64_t inner, float scale,
                                         int divide, int acc, float *d, cudaStream_t stream)
{
    const int64_t n = outer * len * inner;
    if (n > 0)
        broadcast_grad<<<grid_for(n, 1), KR_THREADS, 0, stream>>>(g, outer, len, inner, scale, divide, acc, d);
    return cudaGetLastError();
}

/* ---- softmax and log_softmax ---------------------------------------------
 * One block per row. The maximum skips NaN (fmaxf) as the CPU's does; a
 * softmax row whose maximum is -inf (all -inf: a row masked whole) is the
 * sum of its values that are not -inf: 0, or NaN when it held one. */

static __device__ __forceinline__ int64_t row_base(int64_t row, int64_t len, int64_t inner)
{
    return (row / inner) * len * inner + row % inner;
}

static __global__ void __launch_bounds__(KR_THREADS)
softmax_rows(const float *x, int64_t rows, int64_t len, int64_t inner, int log, float *y)
{
    __shared__ float sh[KR_THREADS];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int64_t base = row_base(row, len, inner);
        const float *xr = x + base;
        float *yr = y + base;
        float m = -INFINITY;
        for (int64_t k = threadIdx.x; k < len; k += KR_THREADS)
            m = fmaxf(m, xr[k * inner]);
        m = block_reduce(m, sh, max_op());
        if (m == -INFINITY && !log) {
            float s = 0.0f;
            for (int64_t k = threadIdx.x; k < len; k += KR_THREADS)
                s += xr[k * inner] == -INFINITY ? 0.0f : xr[k * inner];
            s = block_reduce(s, sh, add_op());
            for (int64_t k = threadIdx.x; k < len; k += KR_THREADS)
                yr[k * inner] = s;
            continue;
        }
        float s = 0.0f;
        for (int64_t k = threadIdx.x; k < len; k += KR_THREADS)
            s += expf(xr[k * inner] - m);
        s = block_reduce(s, sh, add_op());
        if (log) {
            const float lse = logf(s);
            for (int64_t k = threadIdx.x; k < len; k += KR_THREADS)
                yr[k * inner] = (xr[k * inner] - m) - lse;
        } else {
            const float inv = 1.0f / s;
            for (int64_t k = threadIdx.x; k < len; k += KR_THREADS)
                yr[k * inner] = expf(xr[k * inner] - m) * inv;
        }
    }
}

/* softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g). */
static __global__ void __launch_bounds__(KR_THREADS)
softmax_grad_rows(const float *y, const float *g, int64_t rows, int64_t len, int64_t inner, int log, int acc, float *d)
{
    __shared__ float sh[KR_THREADS];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int64_t base = row_base(row, len, inner);
        const float *yr = y + base, *gr = g + base;
        float *dr = d + base;
        float dot = 0.0f;
        for (int64_t k = threadIdx.x; k < len; k += KR_THREADS)
            dot += log ? gr[k * inner] : gr[k * inner] * yr[k * inner];
        dot = block_reduce(dot, sh, add_op());
        for (int64_t k = threadIdx.x; k < len; k += KR_THREADS) {
            const float yv = yr[k * inner], gv = gr[k * inner];
            const float dx = log ? gv - expf(yv) * dot : yv * (gv - dot);
            dr[k * inner] = acc ? dr[k * inner] + dx : dx;
        }
    }
}

extern "C" cudaError_t kr_softmax(const float *x, int64_t outer, int64_t len, int64_t inner, int log, float *y,
                                  cudaStream_t stream)
{
    const int64_t rows = outer * inner;
    if (rows > 0 && len > 0)
        softmax_rows<<<grid_for(rows, 0), KR_THREADS, 0, stream>>>(x, rows, len, inner, log, y);
    return cudaGetLastError();
}

extern "C" cudaError_t kr_softmax_grad(const float *y, const float *g, int64_t outer, int64_t len, int64_t inner,
                                       int log, int acc, float *d, cudaStream_t stream)
{
    const int64_t rows = outer * inner;
    if (rows > 0 && len > 0)
        softmax_grad_rows<<<grid_for(rows, 0), KR_THREADS, 0, stream>>>(y, g, rows, len, inner, log, acc, d);
    return cudaGetLastError();
}

/* ---- cross entropy ---------------------------------------------------------- */

static __global__ void __launch_bounds__(KR_THREADS)
ce_rows(const float *z, const int32_t *labels, int64_t N, int64_t C, float *lse, double *term,
        unsigned long long *flag)
{
    __shared__ float sh[KR_THREADS];
    for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
        const float *zr = z + r * C;
        float m = -INFINITY;
        for (int64_t c = threadIdx.x; c < C; c += KR_THREADS)
            m = fmaxf(m, zr[c]);
        m = block_reduce(m, sh, max_op());
        float s = 0.0f;
        for (int64_t c = threadIdx.x; c < C; c += KR_THREADS)
            s += expf(zr[c] - m);
        s = block_reduce(s, sh, add_op());
        if (threadIdx.x == 0) {
            const float l = m + logf(s);
            const int32_t y = labels[r];
            lse[r] = l;
            if (y < 0 || y >= C) {
                atomicMin(flag, (unsigned long long)r);
                term[r] = 0.0;
            } else {
                term[r] = (double)l - zr[y];
            }
        }
    }
}

extern "C" cudaError_t kr_ce_rows(const float *z, const int32_t *labels, int64_t N, int64_t C, float *lse,
                                  double *term, unsigned long long *flag, cudaStream_t stream)
{
    if (N > 0)
        ce_rows<<<grid_for(N, 0), KR_THREADS, 0, stream>>>(z, labels, N, C, lse, term, flag);
    return cudaGetLastError();
}

static __global__ void ce_grad(const float *z, const int32_t *labels, const float *lse, const float *G, int64_t N,
                               int64_t C, int acc, float *d)
{
    const float g = G[0] / (float)N;
    for (int64_t j = (int64_t)blockIdx.x * KR_THREADS + threadIdx.x; j < N * C; j += (int64_t)gridDim.x * KR_THREADS) {
        const int64_t r = j / C, c = j % C;
        const float dz = g * (expf(z[j] - lse[r]) - (c == labels[r] ? 1.0f : 0.0f));
        d[j] = acc ? d[j] + dz : dz;
    }
}

extern "C" cudaError_t kr_ce_grad(const float *z, const int32_t *labels, const float *lse, const float *G, int64_t N,
                                  int64_t C, int acc, float *d, cudaStream_t stream)
{
    if (N * C > 0)
        ce_grad<<<grid_for(N * C, 1), KR_THREADS, 0, stream>>>(z, labels, lse, G, N, C, acc, d);
    return cudaGetLastError();
}

/* ---- mean squared error, and the fixed-order sum of doubles ------------------ */

extern "C" int kr_mse_parts(int64_t n)
{
    const int64_t per = (int64_t)KR_THREADS * 16;
    const int64_t b = (n + per - 1) / per;
    return (int)(b < 1 ? 1 : b > KR_MAX_PARTS ? KR_MAX_PARTS : b);
}

static __global__ void __launch_bounds__(KR_THREADS) mse_partial(const float *p, const float *t, int64_t n, double *parts)
{
    __shared__ double sh[KR_THREADS];
    double s = 0.0;
    for (int64_t j = (int64_t)blockIdx.x * KR_THREADS + threadIdx.x; j < n; j += (int64_t)gridDim.x * KR_THREADS) {
        const double e = (double)p[j] - t[j];
        s += e * e;
    }
    s = block_reduce(s, sh, add_op());
    if (threadIdx.x == 0)
        parts[blockIdx.x] = s;
}

extern "C" cudaError_t kr_mse_partial(const float *p, const float *t, int64_t n, double *parts, cudaStream_t stream)
{
    if (n > 0)
        mse_partial<<<kr_mse_parts(n), KR_THREADS, 0, stream>>>(p, t, n, parts);
    return cudaGetLastError();
}

static __global__ void mse_grad(const float *p, const float *t, const float *G, int64_t n, float sign, int acc,
                                float *d)
{
    const float k = sign * 2.0f * G[0] / (float)n;
    for (int64_t j = (int64_t)blockIdx.x * KR_THREADS + threadIdx.x; j < n; j += (int64_t)gridDim.x * KR_THREADS) {
        const float v = k * (p[j] - t[j]);
        d[j] = acc ? d[j] + v : v;
    }
}

extern "C" cudaError_t kr_mse_grad(const float *p, const float *t, const float *G, int64_t n, float sign, int acc,
                                   float *d, cudaStream_t stream)
{
    if (n > 0)
        mse_grad<<<grid_for(n, 1), KR_THREADS, 0, stream>>>(p, t, G, n, sign, acc, d);
    return cudaGetLastError();
}

static __global__ void __launch_bounds__(KR_THREADS) sum_doubles(const double *v, int64_t n, double div, float *out)
{
    __shared__ double sh[KR_THREADS];
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += KR_THREADS)
        s += v[j];
    s = block_reduce(s, sh, add_op());
    if (threadIdx.x == 0)
        *out = (float)(s / div);
}

extern "C" cudaError_t kr_sum_doubles(const double *v, int64_t n, double div, float *out, cudaStream_t stream)
{
    sum_doubles<<<1, KR_THREADS, 0, stream>>>(v, n, div, out);
    return cudaGetLastError();
}

/* ---- layer norm ------------------------------------------------------------
 * One block per row; the row's sums in double as the CPU's, the mean first,
 * then the squared deviations from it. */

static __global__ void __launch_bounds__(KR_THREADS)
layernorm_rows(const float *x, const float *gamma, const float *beta, int64_t R, int64_t D, float eps, float *y,
               float *mean, float *rstd)
{
    __shared__ double sh[KR_THREADS];
    for (int64_t row = blockIdx.x; row < R; row += gridDim.x) {
        const float *xr = x + row * D;
        float *yr = y + row * D;
        double s = 0.0;
        for (int64_t k = threadIdx.x; k < D; k += KR_THREADS)
            s += xr[k];
        const double dm = block_reduce(s, sh, add_op()) / (double)D;
        double ss = 0.0;
        for (int64_t k = threadIdx.x; k < D; k += KR_THREADS) {
            const double dv = xr[k] - dm;
            ss += dv * dv;
        }
        ss = block_reduce(ss, sh, add_op());
        const float m = (float)dm, r = (float)(1.0 / sqrt(ss / (double)D + eps));
        if (threadIdx.x == 0) {
            mean[row] = m;
            rstd[row] = r;
        }
        for (int64_t k = threadIdx.x; k < D; k += KR_THREADS)
            yr[k] = (xr[k] - m) * r * (gamma ? gamma[k] : 1.0f) + (beta ? beta[k] : 0.0f);
    }
}

/* dx = rstd * (dxh - mean(dxh) - xh * mean(dxh * xh)), dxh = dy * gamma. */
static __global__ void __launch_bounds__(KR_THREADS)
layernorm_dx_rows(const float *x, const float *gamma, const float *dy, const float *mean, const float *rstd, int64_t R,
                  int64_t D, int acc, float *dx)
{
    __shared__ double sh[KR_THREADS];
    for (int64_t row = blockIdx.x; row < R; row += gridDim.x) {
        const float *xr = x + row * D, *dyr = dy + row * D;
        float *dxr = dx + row * D;
        const float m = mean[row], r = rstd[row];
        double s1 = 0.0, s2 = 0.0;
        for (int64_t k = threadIdx.x; k < D; k += KR_THREADS) {
            const float dxh = dyr[k] * (gamma ? gamma[k] : 1.0f);
            s1 += dxh;
            s2 += (double)dxh * ((xr[k] - m) * r);
        }
        s1 = block_reduce(s1, sh, add_op());
        s2 = block_reduce(s2, sh, add_op());
        const float m1 = (float)(s1 / (double)D), m2 = (float)(s2 / (double)D);
        for (int64_t k = threadIdx.x; k < D; k += KR_THREADS) {
            const float v = r * (dyr[k] * (gamma ? gamma[k] : 1.0f) - m1 - (xr[k] - m) * r * m2);
            dxr[k] = acc ? dxr[k] + v : v;
        }
    }
}

extern "C" cudaError_t kr_layernorm(const float *x, const float *gamma, const float *beta, int64_t R, int64_t D,
                                    float eps, float *y, float *mean, float *rstd, cudaStream_t stream)
{
    if (R > 0 && D > 0)
        layernorm_rows<<<grid_for(R, 0), KR_THREADS, 0, stream>>>(x, gamma, beta, R, D, eps, y, mean, rstd);
    return cudaGetLastError();
}

extern "C" cudaError_t kr_layernorm_dx(const float *x, const float *gamma, const float *dy, const float *mean,
                                       const float *rstd, int64_t R, int64_t D, int acc, float *dx,
                                       cudaStream_t stream)
{
    if (R > 0 && D > 0)
        layernorm_dx_rows<<<grid_for(R, 0), KR_THREADS, 0, stream>>>(x, gamma, dy, mean, rstd, R, D, acc, dx);
    return cudaGetLastError();
}

/* Parameter gradients in two passes: task (chunk c of KR_LN_ROWS rows,
 * column k) sums its rows in order, in double; then each column adds its
 * chunks in order. Columns are adjacent threads, so loads coalesce. */
static __global__ void ln_dparams_pass1(const float *x, const float *dy, const float *mean, const float *rstd,
                                        int64_t R, int64_t D, int64_t nch, double *sg, double *sb)
{
    for (int64_t t = (int64_t)blockIdx.x * KR_THREADS + threadIdx.x; t < nch * D; t += (int64_t)gridDim.x * KR_THREADS) {
        const int64_t c = t / D, k = t % D, lo = c * KR_LN_ROWS;
        const int64_t hi = lo + KR_LN_ROWS < R ? lo + KR_LN_ROWS : R;
        double g = 0.0, b = 0.0;
        for (int64_t i = lo; i < hi; i++) {
            const float dv = dy[i * D + k];
            g += dv * ((x[i * D + k] - mean[i]) * rstd[i]);
            b += dv;
        }
        sg[t] = g;
        sb[t] = b;
    }
}

static __global__ void ln_dparams_pass2(const double *sg, const double *sb, int64_t D, int64_t nch, float *dgamma,
                                        int acc_g, float *dbeta, int acc_b)
{
    for (int64_t k = (int64_t)blockIdx.x * KR_THREADS + threadIdx.x; k < D; k += (int64_t)gridDim.x * KR_THREADS) {
        double g = 0.0, b = 0.0;
        for (int64_t c = 0; c < nch; c++) {
            g += sg[c * D + k];
            b += sb[c * D + k];
        }
        if (dgamma)
            dgamma[k] = (acc_g ? dgamma[k] : 0.0f) + (float)g;
        if (dbeta)
            dbeta[k] = (acc_b ? dbeta[k] : 0.0f) + (float)b;
    }
}

static int64_t ln_chunks(int64_t R) { return (R + KR_LN_ROWS - 1) / KR_LN_ROWS; }

extern "C" int64_t kr_layernorm_dparams_scratch(int64_t R, int64_t D) { return 2 * ln_chunks(R) * D; }

extern "C" cudaError_t kr_layernorm_dparams(const float *x, const float *dy, const float *mean, const float *rstd,
                                            int64_t R, int64_t D, double *scratch, float *dgamma, int acc_g,
                                            float *dbeta, int acc_b, cudaStream_t stream)
{
    if (D <= 0)
        return cudaGetLastError();
    const int64_t nch = ln_chunks(R);
    double *sg = scratch, *sb = scratch + nch * D;
    if (nch > 0)
        ln_dparams_pass1<<<grid_for(nch * D, 1), KR_THREADS, 0, stream>>>(x, dy, mean, rstd, R, D, nch, sg, sb);
    ln_dparams_pass2<<<grid_for(D, 1), KR_THREADS, 0, stream>>>(sg, sb, D, nch, dgamma, acc_g, dbeta, acc_b);
    return cudaGetLastError();
}
