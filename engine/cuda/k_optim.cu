/* k_optim.cu — fused multi-tensor SGD, Adam and unscale (k_optim.h). */
#include "cuda/k_optim.h"
#include "cuda/k_stats.h"

#include <cuda_fp16.h>
#include <float.h>

#define KO_THREADS 256
#define KO_MAX_GRID 8192

extern "C" int64_t ko_chunks(const long long *n, int count, ko_chunk *chunks)
{
    int64_t k = 0;
    for (int i = 0; i < count; i++)
        for (long long s = 0; s < n[i]; s += KO_CHUNK, k++)
            if (chunks) {
                chunks[k].tensor = i;
                chunks[k].pad_ = 0;
                chunks[k].start = s;
            }
    return k;
}

static int grid_of(int64_t nchunks) { return (int)(nchunks < KO_MAX_GRID ? nchunks : KO_MAX_GRID); }

/* IEEE operations one at a time: nvcc would otherwise fuse a * b + c into
 * one rounding where the CPU (C11, no contraction) rounds twice. */
#define MUL __fmul_rn
#define ADD __fadd_rn
#define SUB __fsub_rn

/* sgd_range of optim.c, element i of parameter t. */
static __device__ __forceinline__ void sgd_one(const ko_sgd &o, const ko_param &t, long long i)
{
    float *p = t.p, *buf = t.m;
    const float g = t.g[i];
    if (!buf) {
        p[i] = SUB(p[i], MUL(o.lr, ADD(g, MUL(o.weight_decay, p[i]))));
        return;
    }
    const float mom = t.first ? 0.0f : o.momentum, damp = t.first ? 1.0f : 1.0f - o.dampening;
    if (o.nesterov) {
        const float d = ADD(g, MUL(o.weight_decay, p[i]));
        buf[i] = ADD(MUL(mom, buf[i]), MUL(damp, d));
        p[i] = SUB(p[i], MUL(o.lr, ADD(d, MUL(o.momentum, buf[i]))));
    } else {
        buf[i] = ADD(MUL(mom, buf[i]), MUL(damp, ADD(g, MUL(o.weight_decay, p[i]))));
        p[i] = SUB(p[i], MUL(o.lr, buf[i]));
    }
}

/* adam_range of optim.c. */
static __device__ __forceinline__ void adam_one(const ko_adam &o, const ko_param &t, long long i)
{
    const float d = ADD(t.g[i], MUL(o.l2, t.p[i]));
    const float m = ADD(MUL(o.beta1, t.m[i]), MUL(o.one_m_beta1, d));
    const float v = ADD(MUL(o.beta2, t.v[i]), MUL(MUL(o.one_m_beta2, d), d));
    t.m[i] = m;
    t.v[i] = v;
    const float den = ADD(MUL(__fsqrt_rn(v), o.inv_sqrt_bc2), o.eps);
    t.p[i] = SUB(MUL(t.p[i], o.decay), __fdiv_rn(MUL(o.step, m), den));
}

static __global__ void __launch_bounds__(KO_THREADS)
sgd_kernel(ko_sgd o, const ko_param *params, const ko_chunk *chunks, int64_t nchunks)
{
    for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const ko_chunk ch = chunks[c];
        const ko_param t = params[ch.tensor];
        const long long hi = ch.start + KO_CHUNK < t.n ? ch.start + KO_CHUNK : t.n;
        for (long long i = ch.start + threadIdx.x; i < hi; i += KO_THREADS)
            sgd_one(o, t, i);
    }
}

static __global__ void __launch_bounds__(KO_THREADS)
adam_kernel(ko_adam o, const ko_param *params, const ko_chunk *chunks, int64_t nchunks)
{
    for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const ko_chunk ch = chunks[c];
        const ko_param t = params[ch.tensor];
        const long long hi = ch.start + KO_CHUNK < t.n ? ch.start + KO_CHUNK : t.n;
        for (long long i = ch.start + threadIdx.x; i < hi; i += KO_THREADS)
            adam_one(o, t, i);
    }
}

static __device__ __forceinline__ float load_grad(const ko_grad &t, long long i)
{
    if (t.type == KS_F16)
        return __half2float(__ushort_as_half(((const unsigned short *)t.src)[i]));
    if (t.type == KS_BF16)
        return __uint_as_float((unsigned)((const unsigned short *)t.src)[i] << 16);
    return ((const float *)t.src)[i];
}

static __global__ void __launch_bounds__(KO_THREADS)
unscale_kernel(const ko_grad *grads, const ko_chunk *chunks, int64_t nchunks, float inv, unsigned long long *flag)
{
    for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const ko_chunk ch = chunks[c];
        const ko_grad t = grads[ch.tensor];
        const long long hi = ch.start + KO_CHUNK < t.n ? ch.start + KO_CHUNK : t.n;
        int bad = 0;
        for (long long i = ch.start + threadIdx.x; i < hi; i += KO_THREADS) {
            const float x = load_grad(t, i);
            bad |= !(fabsf(x) <= FLT_MAX);
            t.dst[i] = x * inv;
        }
        if (bad)
            atomicMin(flag, (unsigned long long)ch.tensor);
    }
}

extern "C" cudaError_t ko_sgd_launch(const ko_sgd *o, const ko_param *params, const ko_chunk *chunks,
                                     int64_t nchunks, cudaStream_t stream)
{
    if (nchunks > 0)
        sgd_kernel<<<grid_of(nchunks), KO_THREADS, 0, stream>>>(*o, params, chunks, nchunks);
    return cudaGetLastError();
}

extern "C" cudaError_t ko_adam_launch(const ko_adam *o, const ko_param *params, const ko_chunk *chunks,
                                      int64_t nchunks, cudaStream_t stream)
{
    if (nchunks > 0)
        adam_kernel<<<grid_of(nchunks), KO_THREADS, 0, stream>>>(*o, params, chunks, nchunks);
    return cudaGetLastError();
}

extern "C" cudaError_t ko_unscale_launch(const ko_grad *grads, const ko_chunk *chunks, int64_t nchunks, float inv,
                                         unsigned long long *flag, cudaStream_t stream)
{
    if (nchunks > 0)
        unscale_kernel<<<grid_of(nchunks), KO_THREADS, 0, stream>>>(grads, chunks, nchunks, inv, flag);
    return cudaGetLastError();
}
