/*
 * k_attention.cu — fused causal attention on the device (k_attention.h),
 * the scheme of engine/cpu/cpu_attention.c kept simple: one warp-sized
 * block per (query or key tile of 32 rows, batch-head), one thread per
 * row, tiles of the other side staged through shared memory, everything
 * in f32 (inputs widened as they are loaded).
 *
 * Forward, per query row i, over key tiles j0 <= i: scores s = scale q.k,
 * the tile's max m' >= m, alpha = exp(m - m'), P = exp(s - m'),
 * l = l alpha + sum P, o = o alpha + sum P Z v; at the end o /= l and
 * lse = m + log l (the CPU's online softmax, tile for tile).
 *
 * Backward, P = exp(scale q.k - lse) recomputed, dA = dout.v,
 * dS = scale P (dA Z - D_i) with D_i = dout_i . o_i:
 *   dk_j += dS q_i and dv_j += P Z dout_i, one thread per key row j,
 *   over the query tiles from j's on;
 *   dq_i += dS k_j, one thread per query row i, over the key tiles up to i.
 * Each thread owns its output row, so every sum runs in one fixed order:
 * no atomics, the same bits on every run.
 *
 * The exponentials are the CPU's (k_exp_nonpos). Rows a thread owns are
 * stored D + 1 floats apart in shared memory, so that the 32 threads of a
 * block, each at its own row, hit 32 different banks.
 */
#include "cuda/k_attention.h"
#include "cuda/k_blas_math.cuh"

#define TR 32 /* rows per tile, threads per block */

/* The dropout factor of flat element e of the [B,H,T,T] probabilities. */
__device__ __forceinline__ float keep(const k_attn &a, int64_t e)
{
    if (!a.drop)
        return 1.0f;
    return k_dropout_kept(a.key, a.thr, e) ? a.keep_scale : 0.0f; /* k_math.h: te_dropout_kept */
}

/* Where row i of slice bh of o (and dout) starts. */
__device__ __forceinline__ int64_t o_row(const k_attn &a, int bh, int i)
{
    if (!a.merged)
        return ((int64_t)bh * a.T + i) * a.D;
    const int b = bh / a.H, h = bh % a.H;
    return (((int64_t)b * a.T + i) * a.H + h) * a.D;
}

/* dst rows [TR][ld] = rows r0.. of x (row i at x_row(i) elements), zeros
 * past T; all threads of the block take part. */
template <int DT, bool ORows>
__device__ __forceinline__ void load_tile(const k_attn &a, const void *x, int bh, int r0, float *dst, int ld)
{
    for (int idx = threadIdx.x; idx < TR * a.D; idx += blockDim.x) {
        const int r = idx / a.D, d = idx % a.D, i = r0 + r;
        float v = 0.0f;
        if (i < a.T)
            v = kb_load<DT>(x, (ORows ? o_row(a, bh, i) : ((int64_t)bh * a.T + i) * a.D) + d);
        dst[r * ld + d] = v;
    }
}

template <int DT>
static __global__ void attn_fwd_kernel(k_attn a, const void *q, const void *k, const void *v, float *o, float *lse)
{
    extern __shared__ float sm[];
    const int D = a.D, DS = D + 1, bh = blockIdx.x, r = threadIdx.x, i0 = blockIdx.y * TR, i = i0 + r;
    float *qs = sm, *os = qs + TR * DS, *ks = os + TR * DS, *vs = ks + TR * D, *ss = vs + TR * D;
    load_tile<DT, false>(a, q, bh, i0, qs, DS);
    for (int d = 0; d < D; d++)
        os[r * DS + d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int last = (i0 + TR < a.T ? i0 + TR : a.T) - 1; /* the tile's last row */
    float *sr = ss + r * (TR + 1), *orow = os + r * DS;
    const float *qrow = qs + r * DS;
    for (int j0 = 0; j0 <= last; j0 += TR) {
        __syncthreads(); /* the previous tile's readers are done */
        load_tile<DT, false>(a, k, bh, j0, ks, D);
        load_tile<DT, false>(a, v, bh, j0, vs, D);
        __syncthreads();
        const int n = i < a.T ? min(i - j0 + 1, TR) : 0; /* keys j <= i */
        if (n <= 0)
            continue;
        float mx = m;
        for (int c = 0; c < n; c++) {
            float dot = 0.0f;
            for (int d = 0; d < D; d++)
                dot += qrow[d] * ks[c * D + d];
            sr[c] = dot * a.scale;
            mx = fmaxf(mx, sr[c]);
        }
        const float alpha = k_exp_nonpos(m - mx); /* 0 on the first tile */
        const int64_t flat = ((int64_t)bh * a.T + i) * a.T + j0;
        float psum = 0.0f;
        for (int c = 0; c < n; c++) {
            const float p = k_exp_nonpos(sr[c] - mx);
            psum += p;
            sr[c] = p * keep(a, flat + c);
        }
        l = l * alpha + psum;
        m = mx;
        for (int d = 0; d < D; d++) {
            float acc = orow[d] * alpha;
            for (int c = 0; c < n; c++)
                acc += sr[c] * vs[c * D + d];
            orow[d] = acc;
        }
    }
    if (i < a.T) {
        const float inv = 1.0f / l;
        float *out = o + o_row(a, bh, i);
        for (int d = 0; d < D; d++)
            out[d] = orow[d] * inv;
        lse[(int64_t)bh * a.T + i] = m + logf(l);
    }
}

/* D_i = dout_i . o_i, one thread per row. */
template <int DT> static __global__ void attn_drow_kernel(k_attn a, const void *o, const void *dout, float *drow)
{
    const int64_t rows = (int64_t)a.B * a.H * a.T;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < rows; x += (int64_t)gridDim.x * blockDim.x) {
        const int bh = (int)(x / a.T), i = (int)(x % a.T);
        const int64_t at = o_row(a, bh, i);
        float s = 0.0f;
        for (int d = 0; d < a.D; d++)
            s += kb_load<DT>(dout, at + d) * kb_load<DT>(o, at + d);
        drow[x] = s;
    }
}

/* d = acc ? d + v : v over a row of D. */
__device__ __forceinline__ void store_row(float *d, const float *v, int D, int acc)
{
    for (int c = 0; c < D; c++)
        d[c] = acc ? d[c] + v[c] : v[c];
}

/* dk and dv of key tile blockIdx.y (slice blockIdx.x), thread r owning key j. */
template <int DT>
static __global__ void attn_dkdv_kernel(k_attn a, const void *q, const void *k, const void *v, const float *lse,
                                        const void *dout, const float *drow, float *dk, float *dv, int acc_k,
                                        int acc_v)
{
    extern __shared__ float sm[];
    const int D = a.D, DS = D + 1, bh = blockIdx.x, r = threadIdx.x, j0 = blockIdx.y * TR, j = j0 + r;
    float *ks = sm, *vs = ks + TR * DS, *dks = vs + TR * DS, *dvs = dks + TR * DS;
    float *qs = dvs + TR * DS, *dos = qs + TR * D, *ls = dos + TR * D, *ds = ls + TR;
    load_tile<DT, false>(a, k, bh, j0, ks, DS);
    load_tile<DT, false>(a, v, bh, j0, vs, DS);
    float *dkr = dks + r * DS, *dvr = dvs + r * DS;
    const float *kr = ks + r * DS, *vr = vs + r * DS;
    for (int d = 0; d < D; d++)
        dkr[d] = dvr[d] = 0.0f;
    for (int i0 = j0 - j0 % TR; i0 < a.T; i0 += TR) {
        __syncthreads();
        load_tile<DT, false>(a, q, bh, i0, qs, D);
        load_tile<DT, true>(a, dout, bh, i0, dos, D);
        if (i0 + r < a.T) {
            ls[r] = lse[(int64_t)bh * a.T + i0 + r];
            ds[r] = drow[(int64_t)bh * a.T + i0 + r];
        }
        __syncthreads();
        if (j >= a.T)
            continue;
        for (int c = 0; c < TR; c++) {
            const int i = i0 + c;
            if (i < j || i >= a.T)
                continue;
            const float *qi = qs + c * D, *doi = dos + c * D;
            float dot = 0.0f, da = 0.0f;
            for (int d = 0; d < D; d++) {
                dot += qi[d] * kr[d];
                da += doi[d] * vr[d];
            }
            const float p = k_exp_nonpos(dot * a.scale - ls[c]);
            const float z = keep(a, ((int64_t)bh * a.T + i) * a.T + j);
            const float dsc = p * (da * z - ds[c]) * a.scale, pz = p * z;
            for (int d = 0; d < D; d++) {
                dvr[d] += pz * doi[d];
                dkr[d] += dsc * qi[d];
            }
        }
    }
    if (j < a.T) {
        const int64_t at = ((int64_t)bh * a.T + j) * D;
        if (dk)
            store_row(dk + at, dkr, D, acc_k);
        if (dv)
            store_row(dv + at, dvr, D, acc_v);
    }
}

/* dq of query tile blockIdx.y (slice blockIdx.x), thread r owning query i. */
template <int DT>
static __global__ void attn_dq_kernel(k_attn a, const void *q, const void *k, const void *v, const float *lse,
                                      const void *dout, const float *drow, float *dq, int acc_q)
{
    extern __shared__ float sm[];
    const int D = a.D, DS = D + 1, bh = blockIdx.x, r = threadIdx.x, i0 = blockIdx.y * TR, i = i0 + r;
    float *qs = sm, *dos = qs + TR * DS, *dqs = dos + TR * DS, *ks = dqs + TR * DS, *vs = ks + TR * D;
    load_tile<DT, false>(a, q, bh, i0, qs, DS);
    load_tile<DT, true>(a, dout, bh, i0, dos, DS);
    float *dqr = dqs + r * DS;
    const float *qr = qs + r * DS, *dor = dos + r * DS;
    for (int d = 0; d < D; d++)
        dqr[d] = 0.0f;
    const float li = i < a.T ? lse[(int64_t)bh * a.T + i] : 0.0f, di = i < a.T ? drow[(int64_t)bh * a.T + i] : 0.0f;
    const int last = (i0 + TR < a.T ? i0 + TR : a.T) - 1;
    for (int j0 = 0; j0 <= last; j0 += TR) {
        __syncthreads();
        load_tile<DT, false>(a, k, bh, j0, ks, D);
        load_tile<DT, false>(a, v, bh, j0, vs, D);
        __syncthreads();
        if (i >= a.T)
            continue;
        for (int c = 0; c < TR && j0 + c <= i; c++) {
            const float *kj = ks + c * D, *vj = vs + c * D;
            float dot = 0.0f, da = 0.0f;
            for (int d = 0; d < D; d++) {
                dot += qr[d] * kj[d];
                da += dor[d] * vj[d];
            }
            const float p = k_exp_nonpos(dot * a.scale - li);
            const float z = keep(a, ((int64_t)bh * a.T + i) * a.T + j0 + c);
            const float dsc = p * (da * z - di) * a.scale;
            for (int d = 0; d < D; d++)
                dqr[d] += dsc * kj[d];
        }
    }
    if (i < a.T && dq)
        store_row(dq + ((int64_t)bh * a.T + i) * D, dqr, D, acc_q);
}

/* Lets kernel fn use bytes of dynamic shared memory (beyond the default
 * 48 KiB where the device allows it). */
template <typename F> static cudaError_t smem_allow(F fn, size_t bytes)
{
    if (bytes <= 48 * 1024)
        return cudaSuccess;
    int dev = 0, optin = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess)
        return e;
    if (bytes > (size_t)optin)
        return cudaErrorInvalidValue;
    return cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <int DT>
static cudaError_t forward(const k_attn *a, const void *q, const void *k, const void *v, float *o, float *lse,
                           cudaStream_t s)
{
    const size_t bytes = sizeof(float) * ((size_t)2 * TR * (a->D + 1) + (size_t)2 * TR * a->D + (size_t)TR * (TR + 1));
    cudaError_t e = smem_allow(attn_fwd_kernel<DT>, bytes);
    if (e != cudaSuccess)
        return e;
    /* batch-heads along x (up to 2^31 - 1), tiles along y */
    const dim3 grid((unsigned)(a->B * a->H), (unsigned)((a->T + TR - 1) / TR));
    attn_fwd_kernel<DT><<<grid, TR, bytes, s>>>(*a, q, k, v, o, lse);
    return cudaGetLastError();
}

extern "C" cudaError_t k_attn_forward(const k_attn *a, const void *q, const void *k, const void *v, float *o,
                                      float *lse, cudaStream_t s)
{
    if ((int64_t)a->B * a->H * a->T == 0)
        return cudaSuccess;
    if (a->dtype == 1)
        return forward<1>(a, q, k, v, o, lse, s);
    if (a->dtype == 2)
        return forward<2>(a, q, k, v, o, lse, s);
    return forward<0>(a, q, k, v, o, lse, s);
}

template <int DT>
static cudaError_t backward(const k_attn *a, const void *q, const void *k, const void *v, const void *o,
                            const float *lse, const void *dout, float *drow, float *dq, float *dk, float *dv,
                            int acc_q, int acc_k, int acc_v, cudaStream_t s)
{
    const int64_t rows = (int64_t)a->B * a->H * a->T;
    int nb = (int)((rows + 255) / 256);
    attn_drow_kernel<DT><<<nb < 4224 ? nb : 4224, 256, 0, s>>>(*a, o, dout, drow);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    /* batch-heads along x (up to 2^31 - 1), tiles along y */
    const dim3 grid((unsigned)(a->B * a->H), (unsigned)((a->T + TR - 1) / TR));
    if (dk || dv) {
        const size_t bytes = sizeof(float) * ((size_t)4 * TR * (a->D + 1) + (size_t)2 * TR * a->D + 2 * TR);
        if ((e = smem_allow(attn_dkdv_kernel<DT>, bytes)) != cudaSuccess)
            return e;
        attn_dkdv_kernel<DT><<<grid, TR, bytes, s>>>(*a, q, k, v, lse, dout, drow, dk, dv, acc_k, acc_v);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    if (dq) {
        const size_t bytes = sizeof(float) * ((size_t)3 * TR * (a->D + 1) + (size_t)2 * TR * a->D);
        if ((e = smem_allow(attn_dq_kernel<DT>, bytes)) != cudaSuccess)
            return e;
        attn_dq_kernel<DT><<<grid, TR, bytes, s>>>(*a, q, k, v, lse, dout, drow, dq, acc_q);
        e = cudaGetLastError();
    }
    return e;
}

extern "C" cudaError_t k_attn_backward(const k_attn *a, const void *q, const void *k, const void *v, const void *o,
                                       const float *lse, const void *dout, float *drow, float *dq, float *dk,
                                       float *dv, int acc_q, int acc_k, int acc_v, cudaStream_t s)
{
    if ((int64_t)a->B * a->H * a->T == 0)
        return cudaSuccess;
    if (a->dtype == 1)
        return backward<1>(a, q, k, v, o, lse, dout, drow, dq, dk, dv, acc_q, acc_k, acc_v, s);
    if (a->dtype == 2)
        return backward<2>(a, q, k, v, o, lse, dout, drow, dq, dk, dv, acc_q, acc_k, acc_v, s);
    return backward<0>(a, q, k, v, o, lse, dout, drow, dq, dk, dv, acc_q, acc_k, acc_v, s);
}
