/*
 * k_checksum.h — checksum.h's checksum of device memory: the terms summed
 * on the device (an integer sum: any order gives the same bits), the sum
 * read back, the final mix on the host.
 */
#ifndef TE_K_CHECKSUM_H
#define TE_K_CHECKSUM_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Adds the terms of the n bytes at p into *sum (device memory, which the
 * caller zeroes first). Grid-stride over words; one atomic add per warp. */
void k_checksum(const void *p, size_t n, unsigned long long *sum, int blocks, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
