/*
 * cpu_shape.c — reshape, transpose, cast, embedding and dropout, forward and
 * backward. These ops move data rather than compute: kernels see f32 (or
 * i32) elements of 4 bytes, except cast, which sees the real dtypes.
 */
#include "cpu_kernels.h"
#include "cpu_math.h"

#include <stdlib.h>
#include <string.h>

/* dst = src or dst += src over n floats. */
static void copy_or_add(float *restrict dst, const float *restrict src, int64_t n, int acc)
{
    if (!acc) {
        memcpy(dst, src, (size_t)n * sizeof *dst);
        return;
    }
#pragma omp parallel for if (n >= TE_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* ---- reshape (and flatten): same elements, new shape --------------------- */

te_status cpu_reshape_forward(te_node *n)
{
    /* in and out are both f32 or both i32 here: 4 bytes an element */
    memcpy(n->out[0]->data, n->in[0]->data, (size_t)n->in[0]->numel * 4);
    return TE_OK;
}

te_status cpu_reshape_backward(te_node *n)
{
    te_tensor *x = n->in[0];
    int acc;
    float *dx = te_grad_buf(x, &acc);
    copy_or_add(dx, te_f32(n->out[0]->grad), x->numel, acc);
    return TE_OK;
}

/* ---- transpose: kernel_geom.h's te_tr_split ------------------------------ */

/* dst (pre, m1, mid, m0, post) from src (pre, m0, mid, m1, post): copies
 * 4-byte elements bit for bit, or adds them as floats when acc. */
static void tr_move(const void *src, void *dst, te_tr_dims d, int acc)
{
    const int64_t outer = d.pre * d.m1, numel = outer * d.mid * d.m0 * d.post;
    const size_t run = (size_t)d.post * 4;
#pragma omp parallel for if (numel >= TE_PAR_MIN)
    for (int64_t o = 0; o < outer; o++) {
        const int64_t p = o / d.m1, j1 = o % d.m1;
        for (int64_t q = 0; q < d.mid; q++) {
            for (int64_t j0 = 0; j0 < d.m0; j0++) {
                int64_t s = (((p * d.m0 + j0) * d.mid + q) * d.m1 + j1) * d.post;
                int64_t t = (((p * d.m1 + j1) * d.mid + q) * d.m0 + j0) * d.post;
                if (acc) {
                    const float *sf = (const float *)src + s;
                    float *tf = (float *)dst + t;
                    for (int64_t k = 0; k < d.post; k++)
                        tf[k] += sf[k];
                } else {
                    memcpy((char *)dst + t * 4, (const char *)src + s * 4, run);
                }
            }
        }
    }
}

te_status cpu_transpose_forward(te_node *n)
{
    tr_move(n->in[0]->data, n->out[0]->data, te_tr_split(n->in[0], n->a.dim0, n->a.dim1), 0);
    return TE_OK;
}

te_status cpu_transpose_backward(te_node *n)
{
    te_tensor *x = n->in[0];
    int acc;
    float *dx = te_grad_buf(x, &acc);
    /* the transpose of the gradient, split along the output's shape */
    tr_move(n->out[0]->grad->data, dx, te_tr_split(n->out[0], n->a.dim0, n->a.dim1), acc);
    return TE_OK;
}

/* ---- cast -------------------------------------------------------------------
 * Every conversion goes through f32 in chunks: f16 and bf16 widen exactly,
 * and f32 rounds to them to nearest even. i32 above 2^24 rounds on the way
 * to f32 (as a C conversion does). Float to i32 truncates toward zero,
 * saturates at the i32 range and maps NaN to 0 (C leaves those undefined).
 */

#define CAST_CHUNK 1024

static void to_f32(const void *src, te_dtype dt, float *dst, int64_t n)
{
    switch (dt) {
    case TE_F32: memcpy(dst, src, (size_t)n * sizeof *dst); break;
    case TE_F16:
    case TE_BF16: te_half_to_f32(src, dst, dt, n); break;
    case TE_I32:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)((const int32_t *)src)[i];
        break;
    case TE_DTYPE_COUNT: abort();
    }
}

static int32_t f32_to_i32(float v)
{
    if (v != v)
        return 0;
    if (v >= 2147483648.0f)
        return INT32_MAX;
    if (v <= -2147483648.0f)
        return INT32_MIN;
    return (int32_t)v;
}

/* dst (dt) = src; what rounding to f16/bf16 did added to *st. */
static void from_f32(const float *src, void *dst, te_dtype dt, int64_t n, te_round_stats *st)
{
    switch (dt) {
    case TE_F32: memcpy(dst, src, (size_t)n * sizeof *src); break;
    case TE_F16:
    case TE_BF16: te_round_block(src, dst, dt, n, st); break;
    case TE_I32:
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)dst)[i] = f32_to_i32(src[i]);
        break;
    case TE_DTYPE_COUNT: abort();
    }
}

/* dst (ddt) = src (sdt), or dst += src when acc, over n elements; what
 * rounding to f16/bf16 did in *st (zeros when ddt is neither). */
static void convert(const void *src, te_dtype sdt, void *dst, te_dtype ddt, int64_t n, int acc,
                    te_round_stats *st)
{
    memset(st, 0, sizeof *st);
    st->dtype = ddt == TE_F16 || ddt == TE_BF16 ? ddt : TE_F32;
    if (sdt == ddt && !acc) {
        memcpy(dst, src, (size_t)n * te_dtype_size(sdt));
        return;
    }
    const size_t ss = te_dtype_size(sdt), ds = te_dtype_size(ddt);
    const int64_t chunks = (n + CAST_CHUNK - 1) / CAST_CHUNK;
    int64_t over = 0, under = 0, nonzero = 0;
    float amax = 0.0f;
#pragma omp parallel for if (n >= TE_PAR_MIN) reduction(+ : over, under, nonzero) reduction(max : amax)
    for (int64_t c = 0; c < chunks; c++) {
        float buf[CAST_CHUNK], old[CAST_CHUNK];
        const int64_t i0 = c * CAST_CHUNK, m = n - i0 < CAST_CHUNK ? n - i0 : CAST_CHUNK;
        to_f32((const char *)src + i0 * ss, sdt, buf, m);
        if (acc) {
            to_f32((const char *)dst + i0 * ds, ddt, old, m);
            for (int64_t i = 0; i < m; i++)
                buf[i] += old[i];
        }
        te_round_stats part = { .dtype = st->dtype };
        from_f32(buf, (char *)dst + i0 * ds, ddt, m, &part);
        over += part.overflow;
        under += part.underflow;
        nonzero += part.nonzero;
        amax = part.absmax > amax ? part.absmax : amax;
    }
    st->overflow = over;
    st->underflow = under;
    st->nonzero = nonzero;
    st->absmax = amax;
}

te_status cpu_cast_forward(te_node *n)
{
    const te_tensor *x = n->in[0], *y = n->out[0];
    convert(x->data, x->dtype, y->data, y->dtype, x->numel, 0, &n->round[0]);
    n->rounded = n->round[0].dtype != TE_F32;
    return TE_OK;
}

/* The gradient casts back: from the output's dtype to the input's. */
te_status cpu_cast_backward(te_node *n)
{
    te_tensor *x = n->in[0], *y = n->out[0];
    if (!te_is_float(x) || !te_is_float(y))
        return TE_OK;
    int acc;
    void *dx = te_grad_buf(x, &acc); /* in x's own dtype: cast is not shadowed */
    convert(y->grad->data, y->dtype, dx, x->dtype, x->numel, acc, &n->round[0]);
    n->rounded = n->round[0].dtype != TE_F32;
    return TE_OK;
}

/* ---- embedding: y[r,:] = weight[idx[r],:] -------------------------------- */

te_status cpu_embedding_forward(te_node *n)
{
    const te_tensor *w = n->in[0], *idx = n->in[1];
    const int64_t R = idx->numel, D = w->shape[1];
    const float *wp = te_f32(w);
    const int32_t *ip = te_i32(idx);
    float *y = te_f32(n->out[0]);
#pragma omp parallel for if (R * D >= TE_PAR_MIN)
    for (int64_t r = 0; r < R; r++)
        memcpy(y + r * D, wp + (int64_t)ip[r] * D, (size_t)D * sizeof *y);
    return TE_OK;
}

/* Rows picked more than once receive the sum of their gradients; rows go in
 * order, so the sums are the same on any thread count. */
te_status cpu_embedding_backward(te_node *n)
{
    te_tensor *w = n->in[0];
    const te_tensor *idx = n->in[1];
    const int64_t R = idx->numel, D = w->shape[1];
    const int32_t *ip = te_i32(idx);
    const float *dy = te_f32(n->out[0]->grad);
    int acc;
    float *dw = te_grad_buf(w, &acc);
    if (!acc)
        memset(dw, 0, (size_t)w->numel * sizeof *dw);
    for (int64_t r = 0; r < R; r++) {
        float *row = dw + (int64_t)ip[r] * D;
        const float *g = dy + r * D;
        for (int64_t k = 0; k < D; k++)
            row[k] += g[k];
    }
    return TE_OK;
}

/* ---- dropout ----------------------------------------------------------------
 * Element i is kept when te_dropout_keep(seed, i, p). Backward draws the mask
 * again from the seed instead of saving it: no mask-sized buffer lives from
 * forward to backward, and the gradient stays right even when a debugger or
 * a fault injection has altered the output (a mask read back from zeros in
 * the output would not).
 */

/* y = x * (kept ? scale : 0) over m elements from flat index i0, or
 * y += ... when acc. A multiply, not a select: a NaN dropped stays NaN, as
 * in PyTorch. Cloned per vector unit (cpu_math.h): one integer hash per
 * element, compared as an integer, vectorises. */
CPU_CLONES static void dropout_chunk(const float *x, float *y, int64_t i0, int64_t m,
                                     uint64_t key, uint64_t thr, float scale, int acc)
{
    if (acc) {
#pragma omp simd
        for (int64_t i = 0; i < m; i++)
            y[i] += x[i] * (te_dropout_kept(key, thr, i0 + i) ? scale : 0.0f);
    } else {
#pragma omp simd
        for (int64_t i = 0; i < m; i++)
            y[i] = x[i] * (te_dropout_kept(key, thr, i0 + i) ? scale : 0.0f);
    }
}

static void dropout_apply(const te_node *n, const float *x, float *y, int64_t N, int acc)
{
    const uint64_t key = te_dropout_key(n->a.seed, n->a.elem_offset), thr = te_dropout_threshold(n->a.p);
    const float scale = n->a.scale;
    /* a hash per element costs more than a copy, so threads start sooner */
#pragma omp parallel for if (N >= TE_PAR_MIN / 8) schedule(static)
    for (int64_t c = 0; c < N; c += CPU_CHUNK)
        dropout_chunk(x + c, y + c, c, N - c < CPU_CHUNK ? N - c : CPU_CHUNK, key, thr, scale, acc);
}

te_status cpu_dropout_forward(te_node *n)
{
    const te_tensor *x = n->in[0];
    const float *xp = te_f32(x);
    float *y = te_f32(n->out[0]);
    const int64_t N = x->numel;
    if (!n->a.training || n->a.p == 0.0f) {
        memcpy(y, xp, (size_t)N * sizeof *y);
        return TE_OK;
    }
    dropout_apply(n, xp, y, N, 0);
    return TE_OK;
}

te_status cpu_dropout_backward(te_node *n)
{
    te_tensor *x = n->in[0];
    const float *dy = te_f32(n->out[0]->grad);
    const int64_t N = x->numel;
    int acc;
    float *dx = te_grad_buf(x, &acc);
    if (!n->a.training || n->a.p == 0.0f) {
        copy_or_add(dx, dy, N, acc);
        return TE_OK;
    }
    dropout_apply(n, dy, dx, N, acc);
    return TE_OK;
}
