/*
 * cuda_services.h — the CUDA backend's services for the rest of the
 * engine (te_backend's stats, sgd, adam and unscale entries), and the
 * statistics slots of the device NaN watch.
 *
 * Statistics: one fused reduction on the device (k_stats.h); only the
 * te_kstats result crosses to the host. The async variant leaves it in a
 * device slot, unsynchronised, so that a watch can keep one slot per op
 * and read them all once per step, decoding each with cuda_stats_decode.
 * Errors (a failed launch or copy) are recorded with te_set_error.
 */
#ifndef TE_CUDA_SERVICES_H
#define TE_CUDA_SERVICES_H

#include "te_internal.h"
#include "cuda/k_stats.h"

/* te_stats_compute (quick: te_stats_quick) of a device tensor of any
 * dtype; waits for the stream. On a device error s holds n only. */
void cuda_stats(const te_tensor *t, te_stats *s, bool quick);
/* The same into the device slot of CUDA_STATS_SLOT_BYTES (8-byte aligned),
 * queued on the backend's stream; nothing waits. */
#define CUDA_STATS_SLOT_BYTES sizeof(te_kstats)
te_status cuda_stats_async(const te_tensor *t, bool quick, void *dev_slot);
/* A slot copied to the host, as te_stats (quick: te_stats_quick's fields,
 * the rest 0). */
void cuda_stats_decode(const void *host_slot, bool quick, te_stats *s);

/* The optimizer's updates of count parameters in one launch (optim.c's
 * arithmetic); u[i].stats, where set, gets the updated values' statistics. */
void cuda_sgd(const te_sgd_opts *o, const te_update_args *u, int count);
void cuda_adam(const te_adam_opts *o, int64_t t, const te_update_args *u, int count);
/* The scaler's unscale of count gradients in one launch: dst = src * inv;
 * true when any source held a NaN or Inf (also on a device error, so that
 * the step is skipped rather than taken on garbage). */
bool cuda_unscale(const te_unscale_args *u, int count, float inv);
/* The backend's sumsq: the squares of count tensors summed in double. */
double cuda_sumsq(const te_unscale_args *u, int count);
/* The same, returning the index in u of the first gradient that held a
 * NaN or Inf (the scaler names its parameter), -1 when none, and *st. */
int cuda_unscale_first(const te_unscale_args *u, int count, float inv, te_status *st);

#endif
