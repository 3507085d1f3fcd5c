/* backend_cuda.c — the CUDA backend's table: device memory on the
 * backend's one stream (stream-ordered allocation, so that a block freed
 * and handed out again is reused in the order the kernels run). The host
 * waits only where it reads or where its buffer may be reused at once. */
#include "cuda/cuda_attention.h"
#include "cuda/cuda_cast.h"
#include "cuda/cuda_conv.h"
#include "cuda/cuda_elementwise.h"
#include "cuda/cuda_linear.h"
#include "cuda/cuda_norm.h"
#include "cuda/cuda_reduce.h"
#include "cuda/cuda_rt.h"
#include "cuda/cuda_services.h"
#include "cuda/cuda_shape.h"

#include <pthread.h>

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

/* Pinned memory: the DMA engine copies into it while the stream runs on,
 * where a copy into pageable memory is staged and blocks the host. */
static void *cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    return cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess ? p : NULL;
}

static void cuda_host_free(void *p) { check(cudaFreeHost(p), "cudaFreeHost"); }

/* The events of to_host_async's tickets, kept for reuse (made without
 * timing: only completion is asked). Taken on the training thread, given
 * back on the dump writer's, hence the lock. More are made when all are
 * out; those beyond EVENT_POOL are destroyed when given back. */
#define EVENT_POOL 64
static struct {
    pthread_mutex_t mu;
    cudaEvent_t free[EVENT_POOL];
    int n;
} events = { .mu = PTHREAD_MUTEX_INITIALIZER };

static cudaError_t event_get(cudaEvent_t *e)
{
    pthread_mutex_lock(&events.mu);
    *e = events.n ? events.free[--events.n] : NULL;
    pthread_mutex_unlock(&events.mu);
    return *e ? cudaSuccess : cudaEventCreateWithFlags(e, cudaEventDisableTiming);
}

static void event_put(cudaEvent_t e)
{
    pthread_mutex_lock(&events.mu);
    if (events.n < EVENT_POOL) {
        events.free[events.n++] = e;
        e = NULL;
    }
    pthread_mutex_unlock(&events.mu);
    if (e)
        cudaEventDestroy(e);
}

/* The copy and an event behind it on the stream; the ticket is the event. */
static bool cuda_to_host_async(void *host_dst, const void *src, size_t bytes, void **ticket)
{
    cudaStream_t s = te_cuda_stream();
    cudaEvent_t e;
    *ticket = NULL;
    if (te_cuda_ok(NULL, event_get(&e), "cudaEventCreate for a copy to the host") != TE_OK)
        return false;
    if (te_cuda_ok(NULL, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s),
                   "cudaMemcpyAsync to a pinned buffer") != TE_OK) {
        event_put(e);
        return false;
    }
    if (te_cuda_ok(NULL, cudaEventRecord(e, s), "cudaEventRecord after a copy to the host") != TE_OK) {
        cudaStreamSynchronize(s); /* the copy may be queued: done before the caller reuses host_dst */
        event_put(e);
        return false;
    }
    *ticket = e;
    return true;
}

static bool cuda_wait(void *ticket)
{
    cudaEvent_t e = ticket;
    cudaError_t err = cudaEventSynchronize(e);
    event_put(e);
    return te_cuda_ok(NULL, err, "waiting for a copy to the host") == TE_OK;
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
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .to_host_async = cuda_to_host_async,
    .wait = cuda_wait,
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
};
