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
#include "cuda/cuda_timer.h"
#include "cuda/k_checksum.h"
#include "cuda/k_watch.h"
#include "checksum.h"

#include <stdlib.h>

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

/* ---- the deferred watch's flags (engine/watch.c) ------------------------
 * One word per op of the step in device memory, grown (stream-ordered) when
 * a step has more ops than ever; read with one copy at the step's end. */
static struct {
    unsigned *dev, *host;
    int cap;
} wf;

static bool watch_room(int slot)
{
    if (slot < wf.cap)
        return true;
    cudaStream_t s = te_cuda_stream();
    int cap = wf.cap ? wf.cap : 4096;
    while (cap <= slot)
        cap *= 2;
    unsigned *dev = NULL, *host = malloc((size_t)cap * sizeof *host);
    if (!host || cudaMallocAsync((void **)&dev, (size_t)cap * sizeof *dev, s) != cudaSuccess) {
        free(host);
        return false;
    }
    check(cudaMemsetAsync(dev, 0, (size_t)cap * sizeof *dev, s), "cudaMemsetAsync");
    if (wf.dev) {
        check(cudaMemcpyAsync(dev, wf.dev, (size_t)wf.cap * sizeof *dev, cudaMemcpyDeviceToDevice, s),
              "cudaMemcpyAsync");
        check(cudaFreeAsync(wf.dev, s), "cudaFreeAsync");
    }
    free(wf.host);
    wf.dev = dev;
    wf.host = host;
    wf.cap = cap;
    return true;
}

static void cuda_watch_flag(const te_tensor *t, unsigned kinds, int slot)
{
    /* No room for this op's own word (out of memory): the last word says
     * "some op", and the step runs again op by op all the same. */
    if (!watch_room(slot)) {
        if (!wf.cap)
            return;
        slot = wf.cap - 1;
    }
    const int dtype = t->dtype == TE_F16 ? 1 : t->dtype == TE_BF16 ? 2 : 0;
    k_watch_flag(t->data, dtype, t->numel, kinds, wf.dev, slot, te_cuda_blocks(t->numel, 256), te_cuda_stream());
    check(cudaGetLastError(), "the watch's flag kernel");
}

static int cuda_watch_take(int n)
{
    if (!wf.cap || n <= 0)
        return -1;
    if (n > wf.cap)
        n = wf.cap;
    cudaStream_t s = te_cuda_stream();
    check(cudaMemcpyAsync(wf.host, wf.dev, (size_t)n * sizeof *wf.host, cudaMemcpyDeviceToHost, s),
          "reading the watch's flags");
    cuda_sync();
    check(cudaMemsetAsync(wf.dev, 0, (size_t)n * sizeof *wf.dev, s), "cudaMemsetAsync");
    for (int i = 0; i < n; i++)
        if (wf.host[i])
            return i;
    return -1;
}

/* ---- time travel's checksum (record.c) -------------------------------------
 * The terms summed into one device word, kept for the process; the host
 * reads those 8 bytes and mixes in the length, as te_checksum_host. */
static unsigned long long *sum_dev;

static uint64_t cuda_checksum(const void *p, size_t bytes)
{
    cudaStream_t s = te_cuda_stream();
    unsigned long long sum = 0;
    if (bytes && (sum_dev || cudaMalloc((void **)&sum_dev, sizeof *sum_dev) == cudaSuccess)) {
        check(cudaMemsetAsync(sum_dev, 0, sizeof *sum_dev, s), "cudaMemsetAsync");
        k_checksum(p, bytes, sum_dev, te_cuda_blocks((int64_t)te_sum_words(bytes), 256), s);
        check(cudaGetLastError(), "the checksum kernel");
        check(cudaMemcpyAsync(&sum, sum_dev, sizeof sum, cudaMemcpyDeviceToHost, s), "reading the checksum");
        cuda_sync();
    } else if (bytes) {
        /* no word for the sum: a value no read gives (te_mix64 of "nomem") */
        check(cudaErrorMemoryAllocation, "the checksum's word");
        return 0x6e6f6d656dull;
    }
    return te_sum_final(sum, bytes);
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
    .checksum = cuda_checksum,
    .watch_flag = cuda_watch_flag,
    .watch_take = cuda_watch_take,
    .async = true,
    .timer_mark = cuda_timer_mark,
    .timer_ms = cuda_timer_ms,
    .timer_reset = cuda_timer_reset,
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
