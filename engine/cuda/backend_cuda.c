/* backend_cuda.c — the CUDA backend's table: device memory on the
 * backend's one stream (stream-ordered allocation, so that a block freed
 * and handed out again is reused in the order the kernels run). The host
 * waits only where it reads or where its buffer may be reused at once. */
#include "cuda/cuda_rt.h"

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
};
