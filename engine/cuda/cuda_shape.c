/* cuda_shape.c — reshape, transpose and embedding on the CUDA backend, as
 * engine/cpu/cpu_shape.c: copies rather than views, 4-byte elements (f32
 * or i32) moved bit for bit, gradients added as floats when acc. */
#include "cuda/cuda_shape.h"

#include "cuda/cuda_rt.h"
#include "cuda/k_shape.h"
#include "kernel_geom.h"

/* dst = src or dst += src over n floats. */
static te_status copy_or_add(te_node *n, float *dst, const float *src, int64_t count, int acc, const char *what)
{
    cudaStream_t s = te_cuda_stream();
    if (acc)
        return te_cuda_ok(n, k_add_into(dst, src, count, s), what);
    return te_cuda_ok(n, cudaMemcpyAsync(dst, src, (size_t)count * sizeof *dst, cudaMemcpyDeviceToDevice, s), what);
}

/* ---- reshape (and flatten): same elements, new shape --------------------- */

te_status cuda_reshape_forward(te_node *n)
{
    /* in and out are both f32 or both i32 here: 4 bytes an element */
    return te_cuda_ok(n,
                      cudaMemcpyAsync(n->out[0]->data, n->in[0]->data, (size_t)n->in[0]->numel * 4,
                                      cudaMemcpyDeviceToDevice, te_cuda_stream()),
                      "reshape forward");
}

te_status cuda_reshape_backward(te_node *n)
{
    te_tensor *x = n->in[0];
    int acc;
    float *dx = te_grad_buf(x, &acc);
    return copy_or_add(n, dx, te_f32(n->out[0]->grad), x->numel, acc, "reshape backward");
}

/* ---- transpose: dims dim0 < dim1 swapped ------------------------------------ */

/* kernel_geom.h's te_tr_split (the CPU's), as the kernel's struct. */
static k_tr_dims tr_split(const te_tensor *t, int a, int b)
{
    const te_tr_dims g = te_tr_split(t, a, b);
    return (k_tr_dims){ g.pre, g.m0, g.mid, g.m1, g.post };
}

te_status cuda_transpose_forward(te_node *n)
{
    return te_cuda_ok(n,
                      k_transpose(n->in[0]->data, n->out[0]->data, tr_split(n->in[0], n->a.dim0, n->a.dim1), 0,
                                  te_cuda_stream()),
                      "transpose forward");
}

te_status cuda_transpose_backward(te_node *n)
{
    te_tensor *x = n->in[0];
    int acc;
    float *dx = te_grad_buf(x, &acc);
    /* the transpose of the gradient, split along the output's shape */
    return te_cuda_ok(n,
                      k_transpose(n->out[0]->grad->data, dx, tr_split(n->out[0], n->a.dim0, n->a.dim1), acc,
                                  te_cuda_stream()),
                      "transpose backward");
}

/* ---- embedding: y[r,:] = weight[idx[r],:] ------------------------------------ */

/* The front end's message for the bad index at flat position i (ops/shape.c
 * te_embedding_at), its value read back from the device. */
static te_status bad_index(te_node *n, int64_t i)
{
    const te_tensor *w = n->in[0], *idx = n->in[1];
    int32_t v = 0;
    cudaStream_t s = te_cuda_stream();
    te_status st = te_cuda_ok(n, cudaMemcpyAsync(&v, te_i32(idx) + i, sizeof v, cudaMemcpyDeviceToHost, s),
                              "embedding: reading the bad index");
    if (st == TE_OK)
        st = te_cuda_ok(n, cudaStreamSynchronize(s), "embedding: reading the bad index");
    if (st != TE_OK)
        return st;
    char sw[96], pos[96];
    int64_t coord[TE_MAX_DIMS], rest = i;
    for (int d = idx->ndim - 1; d >= 0; d--) {
        coord[d] = rest % idx->shape[d];
        rest /= idx->shape[d];
    }
    te_shape_str(w->ndim, w->shape, sw, sizeof sw);
    te_shape_str(idx->ndim, coord, pos, sizeof pos);
    return te_kernel_fail(n, TE_ERR_ARG,
                          "idx%s = %d (flat position %lld) out of range for weight %s: "
                          "indices must be in [0, %lld)",
                          pos, (int)v, (long long)i, sw, (long long)w->shape[0]);
}

te_status cuda_embedding_forward(te_node *n)
{
    const te_tensor *w = n->in[0], *idx = n->in[1];
    unsigned long long *flag = te_cuda_flag();
    if (!flag)
        return te_cuda_ok(n, cudaErrorMemoryAllocation, "embedding: the bad-data flag");
    te_status st = te_cuda_ok(n,
                              k_embedding_forward(te_f32(w), te_i32(idx), te_f32(n->out[0]), idx->numel, w->shape[1],
                                                  w->shape[0], flag, te_cuda_stream()),
                              "embedding forward");
    if (st != TE_OK)
        return st;
    const int64_t bad = te_cuda_flag_read(n, &st);
    if (st != TE_OK)
        return st;
    return bad < 0 ? TE_OK : bad_index(n, bad);
}

/* Rows picked more than once receive the sum of their gradients, added in
 * row order as on the CPU. */
te_status cuda_embedding_backward(te_node *n)
{
    te_tensor *w = n->in[0];
    const te_tensor *idx = n->in[1];
    const int64_t R = idx->numel;
    if (R >= INT32_MAX)
        return te_kernel_fail(n, TE_ERR_ARG, "idx has %lld elements: the CUDA backward takes fewer than 2^31",
                              (long long)R);
    int acc;
    float *dw = te_grad_buf(w, &acc);
    void *scratch = te_cuda_workspace(k_embedding_backward_scratch(R));
    if (!scratch)
        return te_cuda_ok(n, cudaErrorMemoryAllocation, "embedding backward: scratch");
    return te_cuda_ok(n,
                      k_embedding_backward(te_f32(n->out[0]->grad), te_i32(idx), dw, R, w->shape[1], w->shape[0], acc,
                                           scratch, te_cuda_stream()),
                      "embedding backward");
}
