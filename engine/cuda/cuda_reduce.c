/* cuda_reduce.c — the reduction family's kernels on the CUDA backend: the
 * CPU kernels' reading of nodes, the launchers of k_reduce.cu. */
#include "cuda/cuda_reduce.h"
#include "cuda/cuda_rt.h"
#include "cuda/k_reduce.h"
#include "kernel_geom.h"

/* Device scratch of n doubles (at least one), or NULL with n's failure
 * recorded in *st. */
static double *scratch(te_node *n, int64_t count, te_status *st)
{
    double *p = te_cuda_workspace((size_t)(count > 0 ? count : 1) * sizeof(double));
    *st = p ? TE_OK : te_cuda_ok(n, cudaErrorMemoryAllocation, "device scratch");
    return p;
}

/* false when the input wants no gradient; else *d its gradient buffer
 * (te_grad_buf) and its reduced axis split as [outer, len, inner]. */
static bool grad_split(te_node *n, float **d, int *acc, int64_t *outer, int64_t *len, int64_t *inner)
{
    te_tensor *x = n->in[0];
    if (!te_needs_grad(x))
        return false;
    te_axis_split(x, n->a.axis, outer, len, inner);
    *d = te_grad_buf(x, acc);
    return true;
}

/* ---- sum and mean ---------------------------------------------------------- */

static te_status reduce_forward(te_node *n, bool mean)
{
    const te_tensor *x = n->in[0];
    int64_t outer, len, inner;
    te_axis_split(x, n->a.axis, &outer, &len, &inner);
    const double div = mean ? (double)len : 1.0;
    cudaError_t e;
    if (inner == 1) {
        te_status st;
        double *s = scratch(n, kr_row_sum_scratch(outer, len), &st);
        if (!s)
            return st;
        e = kr_row_sum(te_f32(x), outer, len, div, KR_DIV_DOUBLE, s, te_f32(n->out[0]), te_cuda_stream());
    } else {
        e = kr_col_sum(te_f32(x), outer, len, inner, div, mean, te_f32(n->out[0]), te_cuda_stream());
    }
    return te_cuda_ok(n, e, mean ? "mean forward" : "sum forward");
}

static te_status reduce_backward(te_node *n, bool mean)
{
    int64_t outer, len, inner;
    int acc;
    float *d;
    if (!grad_split(n, &d, &acc, &outer, &len, &inner))
        return TE_OK;
    const float scale = mean ? (float)(1.0 / (double)len) : 1.0f;
    return te_cuda_ok(n, kr_broadcast_grad(te_f32(n->out[0]->grad), outer, len, inner, scale, 0, acc, d,
                                           te_cuda_stream()),
                      mean ? "mean backward" : "sum backward");
}

te_status cuda_sum_forward(te_node *n) { return reduce_forward(n, false); }
te_status cuda_sum_backward(te_node *n) { return reduce_backward(n, false); }
te_status cuda_mean_forward(te_node *n) { return reduce_forward(n, true); }
te_status cuda_mean_backward(te_node *n) { return reduce_backward(n, true); }

/* ---- softmax and log_softmax ------------------------------------------------ */

static te_status softmax_forward(te_node *n, bool log)
{
    const te_tensor *x = n->in[0];
    int64_t outer, len, inner;
    te_axis_split(x, n->a.axis, &outer, &len, &inner);
    return te_cuda_ok(n, kr_softmax(te_f32(x), outer, len, inner, log, te_f32(n->out[0]), te_cuda_stream()),
                      log ? "log_softmax forward" : "softmax forward");
}

static te_status softmax_backward(te_node *n, bool log)
{
    int64_t outer, len, inner;
    int acc;
    float *d;
    if (!grad_split(n, &d, &acc, &outer, &len, &inner))
        return TE_OK;
    return te_cuda_ok(n, kr_softmax_grad(te_f32(n->out[0]), te_f32(n->out[0]->grad), outer, len, inner, log, acc,
                                         d, te_cuda_stream()),
                      log ? "log_softmax backward" : "softmax backward");
}

te_status cuda_softmax_forward(te_node *n) { return softmax_forward(n, false); }
te_status cuda_softmax_backward(te_node *n) { return softmax_backward(n, false); }
te_status cuda_log_softmax_forward(te_node *n) { return softmax_forward(n, true); }
te_status cuda_log_softmax_backward(te_node *n) { return softmax_backward(n, true); }

/* ---- cross entropy ----------------------------------------------------------
 * saved[0] = lse [N] as on the CPU. The rows' terms lse - z[y] (double) go
 * to scratch and are summed in a fixed order into the mean. A label out of
 * range sets the bad-data flag; its row and value are read back only then.
 */
te_status cuda_cross_entropy_forward(te_node *n)
{
    const te_tensor *z = n->in[0];
    const int64_t N = z->shape[0], C = z->shape[1];
    const int32_t *Y = te_i32(n->in[1]);
    cudaStream_t s = te_cuda_stream();
    te_status st;
    double *term = scratch(n, N, &st);
    if (!term)
        return st;
    unsigned long long *flag = te_cuda_flag();
    if (!flag)
        return te_cuda_ok(n, cudaErrorMemoryAllocation, "the bad-data flag");
    if ((st = te_cuda_ok(n, kr_ce_rows(te_f32(z), Y, N, C, te_f32(n->saved[0]), term, flag, s),
                         "cross_entropy forward")) != TE_OK ||
        (st = te_cuda_ok(n, kr_sum_doubles(term, N, (double)N, te_f32(n->out[0]), s), "cross_entropy forward")) !=
            TE_OK)
        return st;
    const int64_t r = te_cuda_flag_read(n, &st);
    if (st != TE_OK || r < 0)
        return st;
    int32_t label = 0;
    if ((st = te_cuda_ok(n, cudaMemcpyAsync(&label, Y + r, sizeof label, cudaMemcpyDeviceToHost, s),
                         "reading a bad label")) != TE_OK ||
        (st = te_cuda_ok(n, cudaStreamSynchronize(s), "reading a bad label")) != TE_OK)
        return st;
    char sz[96];
    return te_kernel_fail(n, TE_ERR_ARG, "label %d at index %lld is out of range for %lld classes (logits %s)",
                          (int)label, (long long)r, (long long)C, te_shape_str(z->ndim, z->shape, sz, sizeof sz));
}

te_status cuda_cross_entropy_backward(te_node *n)
{
    te_tensor *z = n->in[0];
    if (!te_needs_grad(z))
        return TE_OK;
    int acc;
    float *d = te_grad_buf(z, &acc);
    return te_cuda_ok(n, kr_ce_grad(te_f32(z), te_i32(n->in[1]), te_f32(n->saved[0]), te_f32(n->out[0]->grad),
                                    z->shape[0], z->shape[1], acc, d, te_cuda_stream()),
                      "cross_entropy backward");
}

/* ---- mean squared error ------------------------------------------------------ */

te_status cuda_mse_forward(te_node *n)
{
    const int64_t N = n->in[0]->numel;
    const int parts = N > 0 ? kr_mse_parts(N) : 0;
    cudaStream_t s = te_cuda_stream();
    te_status st;
    double *p = scratch(n, parts, &st);
    if (!p)
        return st;
    if ((st = te_cuda_ok(n, kr_mse_partial(te_f32(n->in[0]), te_f32(n->in[1]), N, p, s), "mse forward")) != TE_OK)
        return st;
    return te_cuda_ok(n, kr_sum_doubles(p, parts, (double)N, te_f32(n->out[0]), s), "mse forward");
}

static te_status mse_grad(te_node *n, int which, float sign)
{
    te_tensor *x = n->in[which];
    if (!te_needs_grad(x))
        return TE_OK;
    int acc;
    float *d = te_grad_buf(x, &acc);
    return te_cuda_ok(n, kr_mse_grad(te_f32(n->in[0]), te_f32(n->in[1]), te_f32(n->out[0]->grad), x->numel, sign,
                                     acc, d, te_cuda_stream()),
                      "mse backward");
}

te_status cuda_mse_backward(te_node *n)
{
    te_status st = mse_grad(n, 0, 1.0f);
    return st != TE_OK ? st : mse_grad(n, 1, -1.0f);
}

/* ---- layer norm: x (R,D), gamma|NULL, beta|NULL; saved mean, rstd [R] ------ */

te_status cuda_layernorm_forward(te_node *n)
{
    const te_tensor *x = n->in[0];
    const int64_t D = x->shape[x->ndim - 1], R = D ? x->numel / D : 0;
    return te_cuda_ok(n, kr_layernorm(te_f32(x), n->in[1] ? te_f32(n->in[1]) : NULL,
                                      n->in[2] ? te_f32(n->in[2]) : NULL, R, D, n->a.eps, te_f32(n->out[0]),
                                      te_f32(n->saved[0]), te_f32(n->saved[1]), te_cuda_stream()),
                      "layernorm forward");
}

te_status cuda_layernorm_backward(te_node *n)
{
    te_tensor *x = n->in[0], *gt = n->in[1], *bt = n->in[2];
    const int64_t D = x->shape[x->ndim - 1], R = D ? x->numel / D : 0;
    const float *xp = te_f32(x), *dy = te_f32(n->out[0]->grad);
    const float *mean = te_f32(n->saved[0]), *rstd = te_f32(n->saved[1]);
    int ax = 0, ag = 0, ab = 0;
    float *dx = te_needs_grad(x) ? te_grad_buf(x, &ax) : NULL;
    float *dg = gt && te_needs_grad(gt) ? te_grad_buf(gt, &ag) : NULL;
    float *db = bt && te_needs_grad(bt) ? te_grad_buf(bt, &ab) : NULL;
    cudaStream_t s = te_cuda_stream();
    te_status st;
    if (dx && (st = te_cuda_ok(n, kr_layernorm_dx(xp, gt ? te_f32(gt) : NULL, dy, mean, rstd, R, D, ax, dx, s),
                               "layernorm backward")) != TE_OK)
        return st;
    if (!dg && !db)
        return TE_OK;
    double *sums = scratch(n, kr_layernorm_dparams_scratch(R, D), &st);
    if (!sums)
        return st;
    return te_cuda_ok(n, kr_layernorm_dparams(xp, dy, mean, rstd, R, D, sums, dg, ag, db, ab, s),
                      "layernorm backward");
}

/* ---- global average pool: y [N,C] = mean of each [H,W] plane ------------- */

te_status cuda_global_avgpool_forward(te_node *n)
{
    const te_tensor *x = n->in[0];
    const int64_t planes = x->shape[0] * x->shape[1], hw = x->shape[2] * x->shape[3];
    te_status st;
    double *s = scratch(n, kr_row_sum_scratch(planes, hw), &st);
    if (!s)
        return st;
    return te_cuda_ok(n, kr_row_sum(te_f32(x), planes, hw, (double)hw, KR_DIV_FLOAT, s, te_f32(n->out[0]),
                                    te_cuda_stream()),
                      "global_avgpool forward");
}

te_status cuda_global_avgpool_backward(te_node *n)
{
    te_tensor *x = n->in[0];
    if (!te_needs_grad(x))
        return TE_OK;
    const int64_t planes = x->shape[0] * x->shape[1], hw = x->shape[2] * x->shape[3];
    int acc;
    float *d = te_grad_buf(x, &acc);
    return te_cuda_ok(n, kr_broadcast_grad(te_f32(n->out[0]->grad), planes, hw, 1, (float)hw, 1, acc, d,
                                           te_cuda_stream()),
                      "global_avgpool backward");
}
