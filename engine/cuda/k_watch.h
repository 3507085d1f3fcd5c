/*
 * k_watch.h — the deferred watch's flags on the device (engine/watch.c):
 * one word per op of the step, or-ed with 1 (a NaN) or 2 (an Inf) by a
 * kernel queued after the op, read once at the step's end.
 */
#ifndef TE_K_WATCH_H
#define TE_K_WATCH_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Or into flags[slot] the kinds (1 NaN, 2 Inf, masked by kinds) that x
 * holds: n values of dtype 0 f32, 1 f16, 2 bf16. Grid-stride; a block
 * that found something writes once. */
void k_watch_flag(const void *x, int dtype, int64_t n, unsigned kinds, unsigned *flags, int slot, int blocks,
                  cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
