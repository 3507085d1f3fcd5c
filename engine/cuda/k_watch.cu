/* k_watch.cu — the deferred watch's flag kernel (k_watch.h). */
#include "cuda/k_watch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

static __device__ float load(const void *x, int dtype, int64_t i)
{
    if (dtype == 1)
        return __half2float(((const __half *)x)[i]);
    if (dtype == 2)
        return __bfloat162float(((const __nv_bfloat16 *)x)[i]);
    return ((const float *)x)[i];
}

static __global__ void watch_flag(const void *x, int dtype, int64_t n, unsigned kinds, unsigned *flags, int slot)
{
    unsigned found = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = load(x, dtype, i);
        found |= isnan(v) ? 1u : isinf(v) ? 2u : 0u;
    }
    found = __reduce_or_sync(0xffffffffu, found) & kinds;
    if (found && (threadIdx.x & 31) == 0)
        atomicOr(&flags[slot], found);
}

extern "C" void k_watch_flag(const void *x, int dtype, int64_t n, unsigned kinds, unsigned *flags, int slot,
                             int blocks, cudaStream_t s)
{
    watch_flag<<<blocks, 256, 0, s>>>(x, dtype, n, kinds, flags, slot);
}
