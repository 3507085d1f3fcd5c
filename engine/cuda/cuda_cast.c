/* cuda_cast.c — Cast and the round/widen services on the CUDA backend.
 * The conversions are k_cast.cu's; what rounding did is counted on the
 * device into one small struct, and only that struct crosses to the host. */
#include "cuda/cuda_cast.h"

#include "cuda/cuda_rt.h"
#include "cuda/k_cast.h"

#include <string.h>

_Static_assert((int)K_F32 == (int)TE_F32 && (int)K_F16 == (int)TE_F16 && (int)K_BF16 == (int)TE_BF16 &&
                   (int)K_I32 == (int)TE_I32,
               "k_dtype numbers the dtypes as te_dtype");

/* The device's counts, made on first use and reused: every count is read
 * back (and waited for) before the next conversion clears it. */
static k_round_counts *dev_counts;

/* src (sdt) converted into dst (ddt), or added to it when acc, with what
 * rounding to f16/bf16 did ADDED to *st (NULL: not counted). */
static te_status convert_counted(te_node *n, const void *src, te_dtype sdt, void *dst, te_dtype ddt, int64_t count,
                                 int acc, te_round_stats *st, const char *what)
{
    cudaStream_t s = te_cuda_stream();
    const bool half = ddt == TE_F16 || ddt == TE_BF16;
    if (!st || !half)
        return te_cuda_ok(n, k_convert(src, (k_dtype)sdt, dst, (k_dtype)ddt, count, acc, NULL, s), what);
    te_status e = TE_OK;
    if (!dev_counts)
        e = te_cuda_ok(n, cudaMalloc((void **)&dev_counts, sizeof *dev_counts), what);
    if (e == TE_OK)
        e = te_cuda_ok(n, cudaMemsetAsync(dev_counts, 0, sizeof *dev_counts, s), what);
    if (e == TE_OK)
        e = te_cuda_ok(n, k_convert(src, (k_dtype)sdt, dst, (k_dtype)ddt, count, acc, dev_counts, s), what);
    k_round_counts c;
    if (e == TE_OK)
        e = te_cuda_ok(n, cudaMemcpyAsync(&c, dev_counts, sizeof c, cudaMemcpyDeviceToHost, s), what);
    if (e == TE_OK)
        e = te_cuda_ok(n, cudaStreamSynchronize(s), what);
    if (e != TE_OK)
        return e;
    st->overflow += (int64_t)c.over;
    st->underflow += (int64_t)c.under;
    st->nonzero += (int64_t)c.nonzero;
    float amax;
    memcpy(&amax, &c.amax, sizeof amax);
    st->absmax = amax > st->absmax ? amax : st->absmax;
    return TE_OK;
}

/* cpu_shape.c's convert: dst (ddt) = src (sdt), or dst += src when acc;
 * *st cleared, then what rounding did (zeros when ddt is neither half). */
static te_status convert(te_node *n, const void *src, te_dtype sdt, void *dst, te_dtype ddt, int64_t count, int acc,
                         te_round_stats *st, const char *what)
{
    memset(st, 0, sizeof *st);
    st->dtype = ddt == TE_F16 || ddt == TE_BF16 ? ddt : TE_F32;
    if (sdt == ddt && !acc)
        return te_cuda_ok(n,
                          cudaMemcpyAsync(dst, src, (size_t)count * te_dtype_size(sdt), cudaMemcpyDeviceToDevice,
                                          te_cuda_stream()),
                          what);
    return convert_counted(n, src, sdt, dst, ddt, count, acc, st, what);
}

te_status cuda_cast_forward(te_node *n)
{
    const te_tensor *x = n->in[0], *y = n->out[0];
    te_status st = convert(n, x->data, x->dtype, y->data, y->dtype, x->numel, 0, &n->round[0], "cast forward");
    n->rounded = n->round[0].dtype != TE_F32;
    return st;
}

/* The gradient casts back: from the output's dtype to the input's. */
te_status cuda_cast_backward(te_node *n)
{
    te_tensor *x = n->in[0], *y = n->out[0];
    if (!te_is_float(x) || !te_is_float(y))
        return TE_OK;
    int acc;
    void *dx = te_grad_buf(x, &acc); /* in x's own dtype: cast is not shadowed */
    te_status st = convert(n, y->grad->data, y->dtype, dx, x->dtype, x->numel, acc, &n->round[0], "cast backward");
    n->rounded = n->round[0].dtype != TE_F32;
    return st;
}

void cuda_round(const float *src, void *dst, te_dtype dt, int64_t n, te_round_stats *st)
{
    convert_counted(NULL, src, TE_F32, dst, dt, n, 0, st, "rounding to f16/bf16 on the device");
}

te_status cuda_round_on(te_node *n, const float *src, void *dst, te_dtype dt, int64_t count, te_round_stats *st,
                        const char *what)
{
    return convert_counted(n, src, TE_F32, dst, dt, count, 0, st, what);
}

void cuda_widen(const uint16_t *src, float *dst, te_dtype dt, int64_t n)
{
    te_cuda_ok(NULL, k_convert(src, (k_dtype)dt, dst, K_F32, n, 0, NULL, te_cuda_stream()),
               "widening f16/bf16 on the device");
}
