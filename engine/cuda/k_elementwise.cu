/*
 * k_elementwise.cu — elementwise kernels: binary ops with broadcasting and
 * their gradients, masked fill, unary ops, dropout, the fused program.
 *
 * Grid-stride loops over 64-bit indices. Each formula is the CPU kernel's,
 * its products and sums rounded step by step (k_math.h's k_mul, k_add), so
 * that +, -, *, / and GELU give the CPU's bits; tanh, exp, log and the
 * sigmoid's exp are CUDA's own functions (within 2 ulp of glibc's).
 * A broadcast operand's gradient sums its terms in a fixed order: no
 * atomics, so a step replays bit for bit.
 */
#include "cuda/k_elementwise.h"

#define THREADS 256

#define blocks_for(n) k_blocks((n), THREADS)

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- one element ---------------------------------------------------------- */

static __device__ __forceinline__ float apply(int op, float u, float v, float s)
{
    switch (op) {
    case K_OP_ADD: return k_add(u, v);
    case K_OP_SUB: return k_sub(u, v);
    case K_OP_MUL: return k_mul(u, v);
    case K_OP_DIV: return u / v;
    case K_OP_SCALE: return k_mul(u, s);
    case K_OP_RELU: return u < 0.0f ? 0.0f : u;
    case K_OP_GELU: return k_gelu(u);
    case K_OP_TANH: return tanhf(u);
    case K_OP_SIGMOID: return 1.0f / k_add(1.0f, expf(-u));
    case K_OP_EXP: return expf(u);
    case K_OP_LOG: return logf(u);
    case K_OP_SQRT: return sqrtf(u);
    default: return __int_as_float(0x7fc00000); /* unreachable: the glue maps every op */
    }
}

/* The derivative of a unary op in terms of v (cpu_elementwise.c's UNARY). */
static __device__ __forceinline__ float derivative(int op, float v, float s)
{
    switch (op) {
    case K_OP_SCALE: return s;
    case K_OP_RELU: return v <= 0.0f ? 0.0f : 1.0f;
    case K_OP_GELU: return k_gelu_grad(v);
    case K_OP_TANH: return k_sub(1.0f, k_mul(v, v));
    case K_OP_SIGMOID: return k_mul(v, k_sub(1.0f, v));
    case K_OP_EXP: return v;
    case K_OP_LOG: return 1.0f / v;
    case K_OP_SQRT: return 0.5f / v;
    default: return __int_as_float(0x7fc00000);
    }
}

template <int TERM> static __device__ __forceinline__ float grad_term(float gy, float u, float v)
{
    switch (TERM) {
    case K_GRAD_PASS: return gy;
    case K_GRAD_NEG: return -gy;
    case K_GRAD_MUL_A: return k_mul(gy, v);
    case K_GRAD_MUL_B: return k_mul(gy, u);
    case K_GRAD_DIV_A: return gy / v;
    default: return k_mul(-gy, (u / v) / v); /* K_GRAD_DIV_B, PyTorch's order */
    }
}

/* Does TERM read operand a (u) or b (v)? Add's and Sub's read neither:
 * graph mode may have left the operands out of memory. */
#define READS_A(T) ((T) == K_GRAD_MUL_B || (T) == K_GRAD_DIV_B)
#define READS_B(T) ((T) == K_GRAD_MUL_A || (T) == K_GRAD_DIV_A || (T) == K_GRAD_DIV_B)

/* ---- binary ---------------------------------------------------------------- */

template <int OP>
static __global__ void binary_forward_kernel(k_bcast p, int64_t n, const float *a, const float *b, float *y)
{
    if (p.k == 1) { /* same shapes, or one operand a scalar */
        const int64_t sa = p.sa[0], sb = p.sb[0];
        GRID_STRIDE(i, n) y[i] = apply(OP, a[i * sa], b[i * sb], 0.0f);
        return;
    }
    GRID_STRIDE(i, n)
    {
        int64_t oa, ob;
        k_bcast_offsets(&p, i, &oa, &ob);
        y[i] = apply(OP, a[oa], b[ob], 0.0f);
    }
}

extern "C" cudaError_t k_binary_forward(k_op op, const k_bcast *p, int64_t n, const float *a,
                                        const float *b, float *y, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    const int g = blocks_for(n);
    switch (op) {
    case K_OP_ADD: binary_forward_kernel<K_OP_ADD><<<g, THREADS, 0, s>>>(*p, n, a, b, y); break;
    case K_OP_SUB: binary_forward_kernel<K_OP_SUB><<<g, THREADS, 0, s>>>(*p, n, a, b, y); break;
    case K_OP_MUL: binary_forward_kernel<K_OP_MUL><<<g, THREADS, 0, s>>>(*p, n, a, b, y); break;
    case K_OP_DIV: binary_forward_kernel<K_OP_DIV><<<g, THREADS, 0, s>>>(*p, n, a, b, y); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* One term of element j's sum: t's offsets added to j's. */
template <int TERM>
static __device__ __forceinline__ float term_at(const k_reduce &r, int64_t t, int64_t y0, int64_t a0,
                                                int64_t b0, const float *g, const float *a, const float *b)
{
    int64_t oy, oa, ob;
    k_reduce_term(&r, t, &oy, &oa, &ob);
    const float u = READS_A(TERM) ? a[a0 + oa] : 0.0f, v = READS_B(TERM) ? b[b0 + ob] : 0.0f;
    return grad_term<TERM>(g[y0 + oy], u, v);
}

/* One thread per element of x, its R terms summed in output order: the
 * CPU's sums exactly. The CPU starts from d's old value when acc, else
 * from the zeros it cleared x to when x is broadcast (R > 1), and from the
 * term itself when x spans the output, which -0 + term is bit for bit. */
template <int TERM>
static __global__ void grad_serial_kernel(k_reduce r, const float *g, const float *a, const float *b,
                                          float *d, int acc)
{
    GRID_STRIDE(j, r.nx)
    {
        int64_t y0, a0, b0;
        k_reduce_kept(&r, j, &y0, &a0, &b0);
        float sum = acc ? d[j] : r.R == 1 ? -0.0f : 0.0f;
        for (int64_t t = 0; t < r.R; t++)
            sum = k_add(sum, term_at<TERM>(r, t, y0, a0, b0, g, a, b));
        d[j] = sum;
    }
}

/* One block per element of x for many terms and few elements (a bias's
 * gradient): each thread sums a strided share in order, then a fixed
 * shared-memory tree. */
template <int TERM>
static __global__ void grad_block_kernel(k_reduce r, const float *g, const float *a, const float *b,
                                         float *d, int acc)
{
    __shared__ float part[THREADS];
    for (int64_t j = blockIdx.x; j < r.nx; j += gridDim.x) {
        int64_t y0, a0, b0;
        k_reduce_kept(&r, j, &y0, &a0, &b0);
        float sum = 0.0f;
        for (int64_t t = threadIdx.x; t < r.R; t += THREADS)
            sum = k_add(sum, term_at<TERM>(r, t, y0, a0, b0, g, a, b));
        part[threadIdx.x] = sum;
        __syncthreads();
        for (int w = THREADS / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w)
                part[threadIdx.x] = k_add(part[threadIdx.x], part[threadIdx.x + w]);
            __syncthreads();
        }
        if (threadIdx.x == 0)
            d[j] = acc ? k_add(d[j], part[0]) : part[0];
        __syncthreads(); /* part is reused by the next element */
    }
}

template <int TERM>
static cudaError_t grad_launch(const k_reduce &r, const float *g, const float *a, const float *b, float *d,
                               int acc, cudaStream_t s)
{
    /* Serial sums are the CPU's bit for bit; a block per element only
     * where elements are too few to fill the device and terms many. */
    if (r.R <= 64 || r.nx >= 32768) {
        grad_serial_kernel<TERM><<<blocks_for(r.nx), THREADS, 0, s>>>(r, g, a, b, d, acc);
    } else {
        const int64_t nb = r.nx < 132 * 32 ? r.nx : 132 * 32;
        grad_block_kernel<TERM><<<(int)nb, THREADS, 0, s>>>(r, g, a, b, d, acc);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t k_binary_grad(k_grad term, const k_bcast *p, int which, const float *g,
                                     const float *a, const float *b, float *d, int acc, cudaStream_t s)
{
    k_reduce r;
    k_reduce_make(p, which, &r);
    if (r.nx == 0)
        return cudaSuccess;
    switch (term) {
    case K_GRAD_PASS: return grad_launch<K_GRAD_PASS>(r, g, a, b, d, acc, s);
    case K_GRAD_NEG: return grad_launch<K_GRAD_NEG>(r, g, a, b, d, acc, s);
    case K_GRAD_MUL_A: return grad_launch<K_GRAD_MUL_A>(r, g, a, b, d, acc, s);
    case K_GRAD_MUL_B: return grad_launch<K_GRAD_MUL_B>(r, g, a, b, d, acc, s);
    case K_GRAD_DIV_A: return grad_launch<K_GRAD_DIV_A>(r, g, a, b, d, acc, s);
    case K_GRAD_DIV_B: return grad_launch<K_GRAD_DIV_B>(r, g, a, b, d, acc, s);
    }
    return cudaErrorInvalidValue;
}

/* ---- masked fill ------------------------------------------------------------ */

static __global__ void masked_fill_forward_kernel(k_bcast p, int64_t n, const float *x, const float *m,
                                                  float value, float *y)
{
    GRID_STRIDE(i, n)
    {
        int64_t ox, om;
        k_bcast_offsets(&p, i, &ox, &om);
        y[i] = m[om] != 0.0f ? value : x[ox];
    }
}

static __global__ void masked_fill_backward_kernel(k_bcast p, int64_t n, const float *m, const float *g,
                                                   float *d, int acc)
{
    GRID_STRIDE(i, n)
    {
        int64_t ox, om;
        k_bcast_offsets(&p, i, &ox, &om);
        const float v = m[om] != 0.0f ? 0.0f : g[i];
        d[ox] = acc ? k_add(d[ox], v) : v;
    }
}

extern "C" cudaError_t k_masked_fill_forward(const k_bcast *p, int64_t n, const float *x, const float *m,
                                             float value, float *y, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    masked_fill_forward_kernel<<<blocks_for(n), THREADS, 0, s>>>(*p, n, x, m, value, y);
    return cudaGetLastError();
}

extern "C" cudaError_t k_masked_fill_backward(const k_bcast *p, int64_t n, const float *m, const float *g,
                                              float *d, int acc, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    masked_fill_backward_kernel<<<blocks_for(n), THREADS, 0, s>>>(*p, n, m, g, d, acc);
    return cudaGetLastError();
}

/* ---- unary -------------------------------------------------------------------- */

template <int OP> static __global__ void unary_forward_kernel(int64_t n, const float *x, float *y, float s)
{
    GRID_STRIDE(i, n) y[i] = apply(OP, x[i], 0.0f, s);
}

template <int OP>
static __global__ void unary_backward_kernel(int64_t n, const float *v, const float *g, float *d, float s,
                                             int acc)
{
    GRID_STRIDE(i, n)
    {
        const float t = k_mul(g[i], derivative(OP, OP == K_OP_SCALE ? 0.0f : v[i], s));
        d[i] = acc ? k_add(d[i], t) : t;
    }
}

#define UNARY_CASES(X)                                                                             \
    X(K_OP_SCALE) X(K_OP_RELU) X(K_OP_GELU) X(K_OP_TANH) X(K_OP_SIGMOID) X(K_OP_EXP) X(K_OP_LOG) \
    X(K_OP_SQRT)

extern "C" cudaError_t k_unary_forward(k_op op, int64_t n, const float *x, float *y, float s, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    const int g = blocks_for(n);
    switch (op) {
#define FWD_CASE(O)                                                                                \
    case O: unary_forward_kernel<O><<<g, THREADS, 0, st>>>(n, x, y, s); break;
        UNARY_CASES(FWD_CASE)
#undef FWD_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t k_unary_backward(k_op op, int64_t n, const float *v, const float *g, float *d, float s,
                                        int acc, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    const int gr = blocks_for(n);
    switch (op) {
#define BWD_CASE(O)                                                                                \
    case O: unary_backward_kernel<O><<<gr, THREADS, 0, st>>>(n, v, g, d, s, acc); break;
        UNARY_CASES(BWD_CASE)
#undef BWD_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- dropout ---------------------------------------------------------------------
 * A multiply, not a select: a NaN dropped stays NaN, as on the CPU. */

static __global__ void dropout_kernel(int64_t n, const float *x, float *y, uint64_t key, uint64_t thr,
                                      float scale, int acc)
{
    GRID_STRIDE(i, n)
    {
        const float v = k_mul(x[i], k_dropout_kept(key, thr, i) ? scale : 0.0f);
        y[i] = acc ? k_add(y[i], v) : v;
    }
}

extern "C" cudaError_t k_dropout(int64_t n, const float *x, float *y, uint64_t key, uint64_t threshold,
                                 float scale, int acc, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    dropout_kernel<<<blocks_for(n), THREADS, 0, s>>>(n, x, y, key, threshold, scale, acc);
    return cudaGetLastError();
}

/* ---- the fused program -------------------------------------------------------------
 * An interpreter: each thread runs the whole chain on its element in
 * registers (local memory for the indexed array), and stores only the
 * results that are materialised. The formulas are the eager kernels'. */

static __global__ void ew_kernel(k_ew_prog p)
{
    GRID_STRIDE(i, p.numel)
    {
        float reg[2 * K_EW_MAX];
        for (int k = 0; k < p.n_in; k++) {
            const int64_t m = p.in_n[k];
            reg[k] = p.in[k][m == p.numel ? i : m == 1 ? 0 : i % m];
        }
        for (int st = 0; st < p.n_steps; st++) {
            const int b = p.step[st].b;
            const float v = apply(p.step[st].op, reg[p.step[st].a], b >= 0 ? reg[b] : 0.0f, p.step[st].s);
            reg[p.n_in + st] = v;
            if (p.out[st])
                p.out[st][i] = v;
        }
    }
}

extern "C" cudaError_t k_ew_run(const k_ew_prog *prog, cudaStream_t s)
{
    if (prog->numel == 0)
        return cudaSuccess;
    ew_kernel<<<blocks_for(prog->numel), THREADS, 0, s>>>(*prog);
    return cudaGetLastError();
}
