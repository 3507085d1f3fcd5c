/* backend_cuda.c — the CUDA backend's table: device memory on the
 * backend's one stream (stream-ordered allocation, so that a block freed
 * and handed out again is reused in the order the kernels run). The host
 * waits only where it reads or where its buffer may be reused at once. */
#include "cuda/cuda_attention.h"
#include "cuda/cuda_cast.h"
#include "cuda/cuda_conv.h"
#include "cuda/cuda_elementwise.h"
#include "cuda/cuda_graph.h"
#include "cuda/cuda_linear.h"
#include "cuda/cuda_norm.h"
#include "cuda/cuda_reduce.h"
#include "cuda/cuda_rt.h"
#include "cuda/cuda_services.h"
#include "cuda/cuda_shape.h"

/* The memory entries return nothing: a failure becomes the error of the
 * moment, named after what failed. */
static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        te_cuda_ok(NULL, e, what);
}

static void *cuda_alloc(size_t bytes)
{
    void *p = NULL;
    return cudaMallocAsync(&p, bytes, te_cuda_stream()) == cudaSuccess ? p : NULL;
}

static void cuda_free(void *p) { check(cudaFreeAsync(p, te_cuda_stream()), "cudaFreeAsync"); }

static void cuda_sync(void) { check(cudaStreamSynchronize(te_cuda_stream()), "cudaStreamSynchronize"); }

/* Queued kernels write src first: the copy is ordered after them, and the
 * host reads dst only when the stream has got there. */
static void cuda_to_host(void *host_dst, const void *src, size_t bytes)
{
    cudaStream_t s = te_cuda_stream();
    check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync to the host");
    cuda_sync();
}

/* The caller may reuse host_src as soon as this returns. */
static void cuda_from_host(void *dst, const void *host_src, size_t bytes)
{
    cudaStream_t s = te_cuda_stream();
    check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync to the device");
    cuda_sync();
}

static void cuda_copy(void *dst, const void *src, size_t bytes)
{
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, te_cuda_stream()),
          "cudaMemcpyAsync on the device");
}

static void cuda_zero(void *p, size_t bytes)
{
    check(cudaMemsetAsync(p, 0, bytes, te_cuda_stream()), "cudaMemsetAsync");
}

static const char *cuda_lowp_native(void) { return "cuBLAS tensor cores (f16/bf16 in, f32 sums)"; }

/* Each op and the prefix of its kernels, PREFIX_forward and
 * PREFIX_backward, as the CPU's table; Flatten is Reshape's copy. */
#define CUDA_KERNELS(K)                                                                            \
    K(MATMUL, cuda_matmul) K(LINEAR, cuda_linear) K(ADD, cuda_add) K(SUB, cuda_sub)                \
    K(MUL, cuda_mul) K(DIV, cuda_div) K(SCALE, cuda_scale) K(RELU, cuda_relu)                      \
    K(GELU, cuda_gelu) K(TANH, cuda_tanh) K(SIGMOID, cuda_sigmoid) K(EXP, cuda_exp)                \
    K(LOG, cuda_log) K(SQRT, cuda_sqrt) K(SOFTMAX, cuda_softmax)                                   \
    K(LOG_SOFTMAX, cuda_log_softmax) K(CROSS_ENTROPY, cuda_cross_entropy) K(MSE, cuda_mse)         \
    K(GLOBAL_AVGPOOL, cuda_global_avgpool) K(LAYERNORM, cuda_layernorm)                            \
    K(DROPOUT, cuda_dropout) K(RESHAPE, cuda_reshape) K(FLATTEN, cuda_reshape)                     \
    K(TRANSPOSE, cuda_transpose) K(SUM, cuda_sum) K(MEAN, cuda_mean)                               \
    K(EMBEDDING, cuda_embedding) K(CAST, cuda_cast) K(MASKED_FILL, cuda_masked_fill)              \
    K(CONV2D, cuda_conv2d) K(MAXPOOL2D, cuda_maxpool2d) K(AVGPOOL2D, cuda_avgpool2d)               \
    K(BATCHNORM, cuda_batchnorm)

/* Every op exactly once, or the build stops (as the CPU's table). */
#define CUDA_ONCE(e, k) cuda_kernels_of_##e,
enum { CUDA_KERNELS(CUDA_ONCE) CUDA_KERNEL_ROWS };
_Static_assert((int)CUDA_KERNEL_ROWS == (int)TE_OP_COUNT, "every op needs its kernels in CUDA_KERNELS");

#define CUDA_FWD(e, k) [TE_OP_##e] = k##_forward,
#define CUDA_BWD(e, k) [TE_OP_##e] = k##_backward,
const te_backend te_backend_cuda = {
    .name = "cuda",
    .device = TE_DEV_CUDA,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .to_host = cuda_to_host,
    .from_host = cuda_from_host,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .sync = cuda_sync,
    .stats = cuda_stats,
    .round = cuda_round,
    .widen = cuda_widen,
    .sgd = cuda_sgd,
    .adam = cuda_adam,
    .unscale = cuda_unscale,
    .sumsq = cuda_sumsq,
    .forward = { CUDA_KERNELS(CUDA_FWD) },
    .backward = { CUDA_KERNELS(CUDA_BWD) },
    /* Tensor cores: f16/bf16 operands, f32 sums, rounded once. */
    .forward_lowp = { [TE_OP_MATMUL] = cuda_matmul_forward_lowp, [TE_OP_LINEAR] = cuda_linear_forward_lowp },
    .backward_lowp = { [TE_OP_MATMUL] = cuda_matmul_backward_lowp, [TE_OP_LINEAR] = cuda_linear_backward_lowp },
    .lowp_native = cuda_lowp_native,
    /* Graph mode's fused kernels, and its steps as CUDA Graphs (cuda_graph.c). */
    .graph = { .ew_run = cuda_tg_ew_run, .act_inplace = cuda_tg_act_inplace,
               .bn_relu_forward = cuda_tg_bn_relu_forward, .bn_relu_backward = cuda_tg_bn_relu_backward,
               .bn_fold_run = cuda_tg_bn_fold_run, .attn_forward = cuda_tg_attn_forward,
               .attn_backward = cuda_tg_attn_backward, .linear_act = cuda_linear_act_forward,
               .host_wait = cuda_graph_host_wait, .capture_begin = cuda_graph_capture_begin,
               .capture_end = cuda_graph_capture_end, .launch = cuda_graph_launch,
               .exec_free = cuda_graph_exec_free, .exec_stale = cuda_graph_exec_stale },
};
