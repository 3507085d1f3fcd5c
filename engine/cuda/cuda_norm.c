/* cuda_norm.c — batch norm on the CUDA backend, forward and backward, with
 * our own kernels (k_bn.cu) rather than cuDNN's: cuDNN's training forward
 * saves its own inverse variance and keeps a running variance with its own
 * conventions, while the CPU's saved mean and rstd, its double-precision
 * two-pass statistics and its running-statistics update are what the
 * debugger and the backward see. The kernels follow cpu_norm.c term by term.
 */
#include "cuda/cuda_norm.h"

#include "cuda/cuda_rt.h"
#include "cuda/k_bn.h"

#include <limits.h>

/* n's kernel arguments (x is (N, C, S), S = H*W or 1). */
static k_bn_args bn_args(const te_node *n)
{
    const te_tensor *x = n->in[0];
    return (k_bn_args){
        .N = x->shape[0], .C = x->shape[1], .S = x->ndim == 4 ? x->shape[2] * x->shape[3] : 1,
        .x = te_f32(x),
        .gamma = n->in[1] ? te_f32(n->in[1]) : NULL,
        .beta = n->in[2] ? te_f32(n->in[2]) : NULL,
        .run_mean = n->in[3] ? te_f32(n->in[3]) : NULL,
        .run_var = n->in[4] ? te_f32(n->in[4]) : NULL,
        .mean = te_f32(n->saved[0]),
        .rstd = te_f32(n->saved[1]),
        .training = n->a.training,
        .momentum = n->a.momentum,
        .eps = n->a.eps,
    };
}

/* One block per channel: the grid's limit. */
static te_status channels_fit(te_node *n)
{
    const int64_t C = n->in[0]->shape[1];
    if (C > INT_MAX)
        return te_kernel_fail(n, TE_ERR_SHAPE, "%lld channels: at most %d on the device", (long long)C, INT_MAX);
    return TE_OK;
}

static te_status bn_forward(te_node *n, te_tensor *y, bool relu)
{
    te_status st = channels_fit(n);
    if (st != TE_OK || n->in[0]->shape[1] == 0)
        return st;
    k_bn_args a = bn_args(n);
    k_bn_fwd(&a, te_f32(y), relu, te_cuda_stream());
    return te_cuda_ok(n, cudaGetLastError(), "batch norm forward");
}

/* relu_y: the fused ReLU's output, whose gradient dy is; NULL without. */
static te_status bn_backward(te_node *n, const te_tensor *dy, const te_tensor *relu_y)
{
    te_tensor *x = n->in[0], *gt = n->in[1], *bt = n->in[2];
    te_status st = channels_fit(n);
    if (st != TE_OK)
        return st;
    int ax = 0, ag = 0, ab = 0;
    float *dx = te_needs_grad(x) ? te_grad_buf(x, &ax) : NULL;
    float *dg = gt && te_needs_grad(gt) ? te_grad_buf(gt, &ag) : NULL;
    float *db = bt && te_needs_grad(bt) ? te_grad_buf(bt, &ab) : NULL;
    if ((!dx && !dg && !db) || x->shape[1] == 0)
        return TE_OK;
    k_bn_args a = bn_args(n);
    k_bn_bwd(&a, te_f32(dy), relu_y ? te_f32(relu_y) : NULL, dx, ax, dg, ag, db, ab, te_cuda_stream());
    return te_cuda_ok(n, cudaGetLastError(), "batch norm backward");
}

te_status cuda_batchnorm_forward(te_node *n) { return bn_forward(n, n->out[0], false); }

te_status cuda_batchnorm_backward(te_node *n) { return bn_backward(n, n->out[0]->grad, NULL); }

te_status cuda_tg_bn_relu_forward(te_node *bn, te_node *relu) { return bn_forward(bn, relu->out[0], true); }

te_status cuda_tg_bn_relu_backward(te_node *bn, te_node *relu)
{
    return bn_backward(bn, relu->out[0]->grad, relu->out[0]);
}
