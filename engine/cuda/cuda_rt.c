/* cuda_rt.c — the CUDA backend's stream, handles, workspace and checks. */
#include "cuda/cuda_rt.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct {
    pthread_once_t once;
    cudaStream_t stream;
    cublasHandle_t cublas;
    cublasLtHandle_t cublaslt;
    cudnnHandle_t cudnn;
    void *ws;
    size_t ws_bytes;
    unsigned long long *flag;
    bool tf32;
} rt = { .once = PTHREAD_ONCE_INIT };

/* One stream for everything; the libraries' handles bound to it. A failure
 * here leaves the handle NULL and the first library call reports it. */
static void rt_init(void)
{
    const char *tf = getenv("TDBG_CUDA_TF32");
    rt.tf32 = tf && strcmp(tf, "1") == 0;
    if (cudaStreamCreateWithFlags(&rt.stream, cudaStreamNonBlocking) != cudaSuccess)
        rt.stream = NULL;
    if (cublasCreate(&rt.cublas) == CUBLAS_STATUS_SUCCESS) {
        cublasSetStream(rt.cublas, rt.stream);
        cublasSetMathMode(rt.cublas, rt.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
        /* cuBLAS's default, said: routines with an atomics variant (symv,
         * hemv) sum in a fixed order, so a replay gives the same bits. */
        cublasSetAtomicsMode(rt.cublas, CUBLAS_ATOMICS_NOT_ALLOWED);
    }
    if (cublasLtCreate(&rt.cublaslt) != CUBLAS_STATUS_SUCCESS)
        rt.cublaslt = NULL;
    if (cudnnCreate(&rt.cudnn) == CUDNN_STATUS_SUCCESS)
        cudnnSetStream(rt.cudnn, rt.stream);
    else
        rt.cudnn = NULL;
}

cudaStream_t te_cuda_stream(void)
{
    pthread_once(&rt.once, rt_init);
    return rt.stream;
}

cublasHandle_t te_cuda_cublas(void)
{
    pthread_once(&rt.once, rt_init);
    return rt.cublas;
}

cublasLtHandle_t te_cuda_cublaslt(void)
{
    pthread_once(&rt.once, rt_init);
    return rt.cublaslt;
}

cudnnHandle_t te_cuda_cudnn(void)
{
    pthread_once(&rt.once, rt_init);
    return rt.cudnn;
}

bool te_cuda_tf32(void)
{
    pthread_once(&rt.once, rt_init);
    return rt.tf32;
}

void *te_cuda_workspace(size_t bytes)
{
    cudaStream_t s = te_cuda_stream();
    if (bytes <= rt.ws_bytes)
        return rt.ws;
    if (rt.ws)
        cudaFreeAsync(rt.ws, s);
    rt.ws = NULL;
    rt.ws_bytes = 0;
    size_t want = bytes + bytes / 4; /* some room, so that growth is rare */
    if (cudaMallocAsync(&rt.ws, want, s) != cudaSuccess) {
        rt.ws = NULL;
        return NULL;
    }
    rt.ws_bytes = want;
    return rt.ws;
}

static te_status fail(te_node *n, const char *what, const char *lib, const char *name, const char *msg)
{
    if (n)
        return te_kernel_fail(n, TE_ERR_DEVICE, "%s: %s%s%s: %s", what, lib, *lib ? " " : "", name, msg);
    te_set_error(TE_ERR_DEVICE, "%s: %s%s%s: %s", what, lib, *lib ? " " : "", name, msg);
    return TE_ERR_DEVICE;
}

te_status te_cuda_ok(te_node *n, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return TE_OK;
    return fail(n, what, "", cudaGetErrorName(e), cudaGetErrorString(e));
}

te_status te_cublas_ok(te_node *n, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return TE_OK;
    return fail(n, what, "cuBLAS", cublasGetStatusName(s), cublasGetStatusString(s));
}

te_status te_cudnn_ok(te_node *n, cudnnStatus_t s, const char *what)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return TE_OK;
    char last[256] = "";
    cudnnGetLastErrorString(last, sizeof last);
    return fail(n, what, "cuDNN", cudnnGetErrorString(s), last[0] ? last : "(no detail)");
}

int te_cuda_blocks(int64_t n, int threads)
{
    /* Enough blocks to fill an H200 several times over; grid-stride loops
     * take the rest, and a 64-bit n never overflows the grid. */
    const int64_t cap = 132 * 32;
    int64_t b = (n + threads - 1) / threads;
    if (b < 1)
        b = 1;
    return (int)(b < cap ? b : cap);
}

unsigned long long *te_cuda_flag(void)
{
    cudaStream_t s = te_cuda_stream();
    if (!rt.flag && cudaMallocAsync((void **)&rt.flag, sizeof *rt.flag, s) != cudaSuccess) {
        rt.flag = NULL;
        return NULL;
    }
    cudaMemsetAsync(rt.flag, 0xff, sizeof *rt.flag, s);
    return rt.flag;
}

int64_t te_cuda_flag_read(te_node *n, te_status *st)
{
    unsigned long long v = ~0ULL;
    cudaStream_t s = te_cuda_stream();
    *st = te_cuda_ok(n, cudaMemcpyAsync(&v, rt.flag, sizeof v, cudaMemcpyDeviceToHost, s), "reading the bad-data flag");
    if (*st == TE_OK)
        *st = te_cuda_ok(n, cudaStreamSynchronize(s), "waiting for the stream");
    return *st != TE_OK || v == ~0ULL ? -1 : (int64_t)v;
}
