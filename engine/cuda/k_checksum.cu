/* k_checksum.cu — the checksum's terms summed on the device (k_checksum.h).
 * The terms are checksum.h's, the CPU's own code; their sum is modulo 2^64,
 * exact in any order, so atomics keep it deterministic. */
#include "cuda/k_checksum.h"

#include "checksum.h"

static __global__ void checksum_terms(const unsigned char *p, size_t n, unsigned long long *sum)
{
    const size_t words = te_sum_words(n), full = n / 8;
    /* Whole words straight from memory when p is 8-aligned (allocations are). */
    const bool aligned = ((uintptr_t)p & 7) == 0;
    unsigned long long acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x)
        acc += te_sum_term(i, aligned && i < full ? ((const uint64_t *)p)[i] : te_sum_word(p, n, i));
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0 && acc)
        atomicAdd(sum, acc);
}

extern "C" void k_checksum(const void *p, size_t n, unsigned long long *sum, int blocks, cudaStream_t s)
{
    checksum_terms<<<blocks, 256, 0, s>>>((const unsigned char *)p, n, sum);
}
