/* cuda_conv.c — conv2d (cuDNN's legacy convolution API, still in cuDNN 9)
 * and the pools (our kernels, k_pool.cu) on the CUDA backend, forward and
 * backward, NCHW: the semantics of engine/cpu/cpu_conv.c.
 *
 * conv2d: cross-correlation (the CPU's im2col does not flip the kernel),
 * symmetric zero padding, no dilation, no groups. TF32 is off unless
 * te_cuda_tf32(): CUDNN_FMA_MATH keeps cuDNN to FMA kernels, where
 * CUDNN_DEFAULT_MATH would let it use TF32 tensor cores on sm_80 and later.
 * Algorithms: forward, the first cuDNN's heuristics rank among the GEMM
 * ones (FFT and Winograd round differently from the CPU's sgemm); backward,
 * deterministic ones only (BWD_DATA_ALGO_1 and BWD_FILTER_ALGO_1 when the
 * heuristics offer nothing else), so that a step replays bit for bit. The
 * bias gradient is our fixed-order per-channel sum (k_bn.cu). Descriptors
 * and algorithms are cached per shape (the engine runs kernels from one
 * thread).
 */
#include "cuda/cuda_conv.h"

#include "cuda/cuda_rt.h"
#include "cuda/k_bn.h"
#include "cuda/k_pool.h"
#include "graph/graph.h"
#include "kernel_geom.h"

#include <limits.h>
#include <string.h>

/* ---- conv2d: descriptors and algorithms per shape ------------------------ */

enum { KEY_LEN = 9, PLANS = 16 };

typedef struct conv_plan {
    bool used;
    int key[KEY_LEN]; /* N, C, H, W, O, KH, KW, stride, pad */
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
} conv_plan;

static conv_plan plans[PLANS];
static int plan_next; /* round-robin replacement */

static void plan_release(conv_plan *p)
{
    if (p->x)
        cudnnDestroyTensorDescriptor(p->x);
    if (p->y)
        cudnnDestroyTensorDescriptor(p->y);
    if (p->b)
        cudnnDestroyTensorDescriptor(p->b);
    if (p->w)
        cudnnDestroyFilterDescriptor(p->w);
    if (p->conv)
        cudnnDestroyConvolutionDescriptor(p->conv);
    memset(p, 0, sizeof *p);
}

static bool gemm_like_fwd(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
}

static bool gemm_like_bwd_data(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}

static bool gemm_like_bwd_filter(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

/* Workspace an algorithm may ask for before we pass it over. */
#define WS_CAP ((size_t)1 << 30)

/* Into dst the first algorithm of cuDNN's ranking perf[0..got) that ran,
 * is deterministic, is one that like() accepts and needs at most WS_CAP of
 * workspace; dst stays as it is when none does. */
#define PICK_ALGO(perf, got, like, dst)                                                                     \
    for (int i_ = 0; i_ < (got); i_++)                                                                      \
        if ((perf)[i_].status == CUDNN_STATUS_SUCCESS && (perf)[i_].determinism == CUDNN_DETERMINISTIC &&     \
            like((perf)[i_].algo) && (perf)[i_].memory <= WS_CAP) {                                         \
            (dst) = (perf)[i_].algo;                                                                        \
            break;                                                                                          \
        }

/* The algorithms for p's shapes: cuDNN's ranking, filtered. */
static te_status plan_algos(te_node *n, cudnnHandle_t h, conv_plan *p)
{
    int got = 0;
    cudnnConvolutionFwdAlgoPerf_t fp[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    te_status st = te_cudnn_ok(n, cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->conv, p->y,
                                                                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, fp),
                               "conv2d: ranking forward algorithms");
    if (st != TE_OK)
        return st;
    p->fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM; /* needs no workspace, takes every shape */
    PICK_ALGO(fp, got, gemm_like_fwd, p->fwd);

    cudnnConvolutionBwdDataAlgoPerf_t dp[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    st = te_cudnn_ok(n, cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->conv, p->x,
                                                                     CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, dp),
                     "conv2d: ranking backward data algorithms");
    if (st != TE_OK)
        return st;
    p->bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    PICK_ALGO(dp, got, gemm_like_bwd_data, p->bwd_data);

    cudnnConvolutionBwdFilterAlgoPerf_t wp[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    st = te_cudnn_ok(n, cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->conv, p->w,
                                                                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, wp),
                     "conv2d: ranking backward filter algorithms");
    if (st != TE_OK)
        return st;
    p->bwd_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    PICK_ALGO(wp, got, gemm_like_bwd_filter, p->bwd_filter);
    return TE_OK;
}

/* Fills a fresh plan's descriptors for key; checks cuDNN's output shape is
 * the front end's. */
static te_status plan_make(te_node *n, cudnnHandle_t h, conv_plan *p, const int *key)
{
    const int N = key[0], C = key[1], H = key[2], W = key[3], O = key[4], KH = key[5], KW = key[6];
    const int stride = key[7], pad = key[8];
    const te_tensor *y = n->out[0];
    te_status st;
    const char *what = "conv2d: making descriptors";
    if ((st = te_cudnn_ok(n, cudnnCreateTensorDescriptor(&p->x), what)) != TE_OK ||
        (st = te_cudnn_ok(n, cudnnCreateTensorDescriptor(&p->y), what)) != TE_OK ||
        (st = te_cudnn_ok(n, cudnnCreateTensorDescriptor(&p->b), what)) != TE_OK ||
        (st = te_cudnn_ok(n, cudnnCreateFilterDescriptor(&p->w), what)) != TE_OK ||
        (st = te_cudnn_ok(n, cudnnCreateConvolutionDescriptor(&p->conv), what)) != TE_OK)
        return st;
    what = "conv2d: setting descriptors";
    if ((st = te_cudnn_ok(n, cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W), what)) !=
            TE_OK ||
        (st = te_cudnn_ok(n, cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, O, C, KH, KW), what)) !=
            TE_OK ||
        (st = te_cudnn_ok(n, cudnnSetConvolution2dDescriptor(p->conv, pad, pad, stride, stride, 1, 1,
                                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                          what)) != TE_OK ||
        (st = te_cudnn_ok(n, cudnnSetConvolutionMathType(p->conv, te_cuda_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH),
                          what)) != TE_OK ||
        (st = te_cudnn_ok(n, cudnnSetTensor4dDescriptor(p->b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, O, 1, 1), what)) !=
            TE_OK)
        return st;
    int yn, yc, yh, yw;
    if ((st = te_cudnn_ok(n, cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &yn, &yc, &yh, &yw), what)) !=
        TE_OK)
        return st;
    if (yn != y->shape[0] || yc != y->shape[1] || yh != y->shape[2] || yw != y->shape[3])
        return te_kernel_fail(n, TE_ERR_SHAPE, "conv2d: cuDNN's output [%d,%d,%d,%d] is not [%lld,%lld,%lld,%lld]", yn,
                              yc, yh, yw, (long long)y->shape[0], (long long)y->shape[1], (long long)y->shape[2],
                              (long long)y->shape[3]);
    if ((st = te_cudnn_ok(n, cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, yn, yc, yh, yw),
                          what)) != TE_OK)
        return st;
    return plan_algos(n, h, p);
}

/* cuDNN's legacy API counts in int: x, w and y must fit. */
static te_status conv_fits(te_node *n)
{
    const te_tensor *big[3] = { n->in[0], n->in[1], n->out[0] };
    for (int i = 0; i < 3; i++)
        if (big[i]->numel > INT_MAX)
            return te_kernel_fail(n, TE_ERR_SHAPE, "conv2d: %lld elements in one tensor: cuDNN takes at most %d",
                                  (long long)big[i]->numel, INT_MAX);
    return TE_OK;
}

/* The plan of n's shapes (conv_fits), made on first use; NULL after
 * failing n. */
static conv_plan *plan_of(te_node *n, cudnnHandle_t h)
{
    const te_tensor *x = n->in[0], *w = n->in[1];
    const int key[KEY_LEN] = { (int)x->shape[0], (int)x->shape[1], (int)x->shape[2], (int)x->shape[3],
                               (int)w->shape[0], (int)w->shape[2], (int)w->shape[3], n->a.stride, n->a.pad };
    for (int i = 0; i < PLANS; i++)
        if (plans[i].used && memcmp(plans[i].key, key, sizeof key) == 0)
            return &plans[i];
    conv_plan *p = &plans[plan_next];
    plan_next = (plan_next + 1) % PLANS;
    plan_release(p);
    if (plan_make(n, h, p, key) != TE_OK) {
        plan_release(p);
        return NULL;
    }
    memcpy(p->key, key, sizeof key);
    p->used = true;
    return p;
}

static cudnnHandle_t dnn(te_node *n)
{
    cudnnHandle_t h = te_cuda_cudnn();
    if (!h)
        te_kernel_fail(n, TE_ERR_DEVICE, "cuDNN did not start (cudnnCreate failed)");
    return h;
}

/* Workspace of bytes, or NULL after failing n. */
static void *workspace(te_node *n, size_t bytes, bool *ok)
{
    void *ws = te_cuda_workspace(bytes);
    *ok = ws || bytes == 0;
    if (!*ok)
        te_kernel_fail(n, TE_ERR_NOMEM, "conv2d: no device memory for a %zu-byte cuDNN workspace", bytes);
    return ws;
}

static te_status zero(te_node *n, void *p, size_t bytes)
{
    return bytes ? te_cuda_ok(n, cudaMemsetAsync(p, 0, bytes, te_cuda_stream()), "conv2d: zeroing") : TE_OK;
}

/* x or w empty (no input channel, or a 0x0 kernel): y is the bias, or 0. */
static te_status conv_empty_forward(te_node *n, cudnnHandle_t h)
{
    te_tensor *y = n->out[0];
    te_status st = zero(n, y->data, y->nbytes);
    if (st != TE_OK || !n->in[2])
        return st;
    cudnnTensorDescriptor_t yd = NULL, bd = NULL;
    const float one = 1.0f;
    const char *what = "conv2d: adding the bias";
    if ((st = te_cudnn_ok(n, cudnnCreateTensorDescriptor(&yd), what)) == TE_OK &&
        (st = te_cudnn_ok(n, cudnnCreateTensorDescriptor(&bd), what)) == TE_OK &&
        (st = te_cudnn_ok(n, cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)y->shape[0],
                                                        (int)y->shape[1], (int)y->shape[2], (int)y->shape[3]),
                          what)) == TE_OK &&
        (st = te_cudnn_ok(n, cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)y->shape[1], 1, 1),
                          what)) == TE_OK)
        st = te_cudnn_ok(n, cudnnAddTensor(h, &one, bd, te_f32(n->in[2]), &one, yd, te_f32(y)), what);
    if (yd)
        cudnnDestroyTensorDescriptor(yd);
    if (bd)
        cudnnDestroyTensorDescriptor(bd);
    return st;
}

/* ---- conv2d: y [N,O,OH,OW] = x [N,C,H,W] * w [O,C,KH,KW] + b [O] --------- */

te_status cuda_conv2d_forward(te_node *n)
{
    const te_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    te_tensor *y = n->out[0];
    if (y->numel == 0)
        return TE_OK;
    te_status st = conv_fits(n);
    if (st != TE_OK)
        return st;
    cudnnHandle_t h = dnn(n);
    if (!h)
        return TE_ERR_DEVICE;
    if (x->numel == 0 || w->numel == 0)
        return conv_empty_forward(n, h);
    conv_plan *p = plan_of(n, h);
    if (!p)
        return te_error_code();
    size_t bytes = 0;
    st = te_cudnn_ok(n, cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->conv, p->y, p->fwd, &bytes),
                               "conv2d forward: workspace size");
    if (st != TE_OK)
        return st;
    bool ok;
    void *ws = workspace(n, bytes, &ok);
    if (!ok)
        return TE_ERR_NOMEM;
    const float one = 1.0f, nil = 0.0f;
    st = te_cudnn_ok(n, cudnnConvolutionForward(h, &one, p->x, te_f32(x), p->w, te_f32(w), p->conv, p->fwd, ws, bytes,
                                                &nil, p->y, te_f32(y)),
                     "conv2d forward");
    if (st == TE_OK && b)
        st = te_cudnn_ok(n, cudnnAddTensor(h, &one, p->b, te_f32(b), &one, p->y, te_f32(y)), "conv2d forward: bias");
    return st;
}

te_status cuda_conv2d_backward(te_node *n)
{
    te_tensor *xt = n->in[0], *wt = n->in[1], *bt = n->in[2], *y = n->out[0];
    const float *dy = te_f32(y->grad);
    cudaStream_t s = te_cuda_stream();
    int acc;
    te_status st;

    if (te_needs_grad(bt) && y->shape[1] > 0) {
        float *db = te_grad_buf(bt, &acc);
        k_chan_sum(dy, db, acc, y->shape[0], y->shape[1], y->shape[2] * y->shape[3], s);
        if ((st = te_cuda_ok(n, cudaGetLastError(), "conv2d backward: bias gradient")) != TE_OK)
            return st;
    }
    bool need_dx = te_needs_grad(xt), need_dw = te_needs_grad(wt);
    if (!need_dx && !need_dw)
        return TE_OK;
    int acc_x = 0, acc_w = 0;
    float *dx = need_dx ? te_grad_buf(xt, &acc_x) : NULL;
    float *dw = need_dw ? te_grad_buf(wt, &acc_w) : NULL;
    if (y->numel == 0 || xt->numel == 0 || wt->numel == 0) { /* no product: the gradients are 0 */
        if (dx && !acc_x && (st = zero(n, dx, xt->nbytes)) != TE_OK)
            return st;
        return dw && !acc_w ? zero(n, dw, wt->nbytes) : TE_OK;
    }
    if ((st = conv_fits(n)) != TE_OK)
        return st;
    cudnnHandle_t h = dnn(n);
    if (!h)
        return TE_ERR_DEVICE;
    conv_plan *p = plan_of(n, h);
    if (!p)
        return te_error_code();
    size_t bytes_x = 0, bytes_w = 0;
    if (dx && (st = te_cudnn_ok(n, cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->conv, p->x,
                                                                                  p->bwd_data, &bytes_x),
                                "conv2d backward: data workspace size")) != TE_OK)
        return st;
    if (dw && (st = te_cudnn_ok(n, cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->x, p->y, p->conv, p->w,
                                                                                    p->bwd_filter, &bytes_w),
                                "conv2d backward: filter workspace size")) != TE_OK)
        return st;
    const size_t bytes = bytes_x > bytes_w ? bytes_x : bytes_w;
    bool ok;
    void *ws = workspace(n, bytes, &ok);
    if (!ok)
        return TE_ERR_NOMEM;
    const float one = 1.0f, nil = 0.0f;
    if (dw && (st = te_cudnn_ok(n, cudnnConvolutionBackwardFilter(h, &one, p->x, te_f32(xt), p->y, dy, p->conv,
                                                                  p->bwd_filter, ws, bytes_w, acc_w ? &one : &nil,
                                                                  p->w, dw),
                                "conv2d backward: filter")) != TE_OK)
        return st;
    if (dx)
        st = te_cudnn_ok(n, cudnnConvolutionBackwardData(h, &one, p->w, te_f32(wt), p->y, dy, p->conv, p->bwd_data, ws,
                                                         bytes_x, acc_x ? &one : &nil, p->x, dx),
                         "conv2d backward: data");
    return st;
}

/* ---- pools: one [H,W] plane per (sample, channel) ------------------------ */

/* n's pool geometry; false after failing n when a plane's indices would not
 * fit the i32 argmax (the CPU's limit too). */
static bool pool_geom_of(te_node *n, k_pool_geom *g)
{
    const te_tensor *x = n->in[0], *y = n->out[0];
    if (x->shape[2] * x->shape[3] > INT32_MAX || y->shape[2] * y->shape[3] > INT32_MAX) {
        te_kernel_fail(n, TE_ERR_SHAPE, "a plane of more than %d elements", INT32_MAX);
        return false;
    }
    *g = (k_pool_geom){
        .planes = x->shape[0] * x->shape[1], .H = (int)x->shape[2], .W = (int)x->shape[3],
        .OH = (int)y->shape[2], .OW = (int)y->shape[3],
        .kernel = n->a.kernel, .stride = n->a.stride, .pad = n->a.pad,
    };
    return true;
}

/* y = max over each window (padding is -inf); NaN wins. The argmax (flat
 * index in the plane, i32) is saved: the backward reads only it. */
te_status cuda_maxpool2d_forward(te_node *n)
{
    k_pool_geom g;
    if (!pool_geom_of(n, &g))
        return te_error_code();
    if (!n->saved[0])
        return te_kernel_fail(n, TE_ERR_NOMEM, "maxpool2d: no memory for the argmax");
    const int64_t outs = n->out[0]->numel;
    k_maxpool2d_fwd(&g, te_f32(n->in[0]), te_f32(n->out[0]), te_i32(n->saved[0]), te_cuda_blocks(outs, K_POOL_THREADS),
                    te_cuda_stream());
    return te_cuda_ok(n, cudaGetLastError(), "maxpool2d forward");
}

/* dx gets each dy at its window's argmax (summed where windows overlap). */
te_status cuda_maxpool2d_backward(te_node *n)
{
    te_tensor *xt = n->in[0];
    if (!te_needs_grad(xt))
        return TE_OK;
    k_pool_geom g;
    if (!pool_geom_of(n, &g))
        return te_error_code();
    int acc;
    float *dx = te_grad_buf(xt, &acc);
    k_maxpool2d_bwd(&g, te_f32(n->out[0]->grad), te_i32(n->saved[0]), dx, acc,
                    te_cuda_blocks(xt->numel, K_POOL_THREADS), te_cuda_stream());
    return te_cuda_ok(n, cudaGetLastError(), "maxpool2d backward");
}

/* y = window sum / kernel^2: padding counts as zeros (count_include_pad). */
te_status cuda_avgpool2d_forward(te_node *n)
{
    k_pool_geom g;
    if (!pool_geom_of(n, &g))
        return te_error_code();
    k_avgpool2d_fwd(&g, te_f32(n->in[0]), te_f32(n->out[0]), te_cuda_blocks(n->out[0]->numel, K_POOL_THREADS),
                    te_cuda_stream());
    return te_cuda_ok(n, cudaGetLastError(), "avgpool2d forward");
}

/* dx gets dy / kernel^2 at every input of the window. */
te_status cuda_avgpool2d_backward(te_node *n)
{
    te_tensor *xt = n->in[0];
    if (!te_needs_grad(xt))
        return TE_OK;
    k_pool_geom g;
    if (!pool_geom_of(n, &g))
        return te_error_code();
    int acc;
    float *dx = te_grad_buf(xt, &acc);
    k_avgpool2d_bwd(&g, te_f32(n->out[0]->grad), dx, acc, te_cuda_blocks(xt->numel, K_POOL_THREADS),
                    te_cuda_stream());
    return te_cuda_ok(n, cudaGetLastError(), "avgpool2d backward");
}

/* ---- graph mode: eval batch norm folded into the conv before it --------- */

/* w' = w * s, b' = b * s + beta - mean * s with s = gamma / sqrt(var + eps),
 * from the parameters and statistics as they are now; then the conv with
 * them into the batch norm's output (or the activation's, which then runs
 * in place there). */
te_status cuda_tg_bn_fold_run(struct tg_kernel *k)
{
    te_node *conv = k->node, *bn = k->act;
    const te_tensor *w = conv->in[1], *b = conv->in[2];
    const int64_t O = w->shape[0], per = O ? w->numel / O : 0;
    k_bn_fold(te_f32(w), b ? te_f32(b) : NULL, bn->in[1] ? te_f32(bn->in[1]) : NULL,
              bn->in[2] ? te_f32(bn->in[2]) : NULL, te_f32(bn->in[3]), te_f32(bn->in[4]), bn->a.eps,
              te_f32(k->fold_w), te_f32(k->fold_b), O, per, te_cuda_blocks(O * per + O, K_BN_THREADS),
              te_cuda_stream());
    te_status st = te_cuda_ok(conv, cudaGetLastError(), "batch norm fold");
    if (st != TE_OK)
        return st;
    te_node tmp;
    te_tensor out;
    te_tensor *dst = tg_bn_fold_conv(k, &tmp, &out);
    st = cuda_conv2d_forward(&tmp);
    if (st != TE_OK || !k->act2)
        return st;
    /* the activation's own forward kernel, in place: y[i] = f(y[i]) */
    te_node act = *k->act2;
    act.in[0] = dst;
    act.out[0] = dst;
    return te_backend_current()->forward[act.op](&act);
}
