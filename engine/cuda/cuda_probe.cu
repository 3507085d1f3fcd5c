/*
 * cuda_probe.cu — finds whether device 0 can run the CUDA backend.
 *
 * A .cu file rather than C linking cudart: a device the driver lists may
 * still lack a kernel image of this build (NVCC_ARCH), and only launching
 * one of ours finds that out. It is also the first .cu file through
 * Makefile.am's libtool rule, which the backend's kernels will follow.
 */
#include "cuda/cuda_probe.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

static __global__ void probe_kernel(int *flag) { *flag = 1; }

/* "cudaErrorNoDevice: no CUDA-capable device is detected" */
static void say(char *why, size_t n, const char *what, cudaError_t e)
{
    snprintf(why, n, "%s (%s: %s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

extern "C" bool te_cuda_probe(char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorInsufficientDriver) {
        say(why, n, "no CUDA driver, or one older than this CUDA runtime", e);
        return false;
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
        if (e == cudaSuccess)
            snprintf(why, n, "no device (the CUDA driver lists none)");
        else
            say(why, n, "no device", e);
        return false;
    }
    if (e != cudaSuccess) {
        say(why, n, "the CUDA driver cannot be used", e);
        return false;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess || (e = cudaSetDevice(0)) != cudaSuccess) {
        say(why, n, "device 0 cannot be opened", e);
        return false;
    }
    int *flag = NULL, host = 0;
    if ((e = cudaMalloc(&flag, sizeof *flag)) != cudaSuccess) {
        char what[512];
        snprintf(what, sizeof what, "out of memory on %s", prop.name);
        say(why, n, what, e);
        return false;
    }
    probe_kernel<<<1, 1>>>(flag);
    if ((e = cudaGetLastError()) == cudaSuccess)
        e = cudaMemcpy(&host, flag, sizeof host, cudaMemcpyDeviceToHost);
    cudaFree(flag);
    if (e != cudaSuccess || host != 1) {
        char what[512];
        snprintf(what, sizeof what, "%s (sm_%d%d) cannot run this build's kernels: rebuild with NVCC_ARCH naming it",
                 prop.name, prop.major, prop.minor);
        say(why, n, what, e);
        return false;
    }
    snprintf(why, n, "%s, %.1f GiB", prop.name, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return true;
}
