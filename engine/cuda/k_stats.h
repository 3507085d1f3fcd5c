/*
 * k_stats.h — tensor statistics on the device: one fused two-level
 * reduction (engine/stats.c's definitions), and the partial result it
 * merges, shared by the kernels, the host's decoding and the tests.
 *
 * Each thread of the first kernel scans its grid-stride share of the
 * tensor into an accumulator (moments of x - shift, shift the thread's
 * first finite value, as stats.c's chunks do), closes it into a
 * te_kstats (count, mean and M2 of the finite values), and the block
 * merges its threads' in a fixed shared-memory tree; the second kernel
 * merges the blocks' in the same fixed way into one te_kstats, the slot
 * that crosses to the host (cuda_stats_decode in cuda_services.c). The
 * grid depends only on the length, so a tensor gives the same bits on
 * every run. Moments merge by Chan's formula, in double.
 *
 * The te_kstats functions below are compiled for the host too (C), so
 * that a test can merge synthetic partials exactly as the device does.
 */
#ifndef TE_K_STATS_H
#define TE_K_STATS_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KS_HD __host__ __device__ static inline
#else
#define KS_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Element types the statistics read (te_dtype's order is the engine's;
 * the launchers take these so that the .cu needs no engine header). */
enum { KS_F32, KS_F16, KS_BF16, KS_I32 };

/* One share of a tensor, and the slot format: what the host decodes. */
typedef struct te_kstats {
    long long n, fin, nan, zero, ovf; /* elements, finite, NaN, == 0, finite |x| > 65504 */
    long long first_bad;              /* smallest flat index of a NaN or Inf; -1 if none */
    float min, max, abs_max, pad_;    /* over finite values (min +inf, max -inf when none) */
    double mean, m2;                  /* of the finite values: mean and sum of squared deviations */
    double sq, abs_sum;               /* sums of x^2 and |x| over finite values */
} te_kstats;

/* A thread's running share: te_kstats plus the shifted sums. */
typedef struct te_kstats_acc {
    te_kstats k;
    double s1, s2; /* sum and sum of squares of x - shift, finite x */
    float shift;
} te_kstats_acc;

#define KS_F16_MAX 65504.0f

KS_HD te_kstats ks_empty(void)
{
    te_kstats k;
    k.n = k.fin = k.nan = k.zero = k.ovf = 0;
    k.first_bad = -1;
    k.min = INFINITY;
    k.max = -INFINITY;
    k.abs_max = 0.0f;
    k.pad_ = 0.0f;
    k.mean = k.m2 = k.sq = k.abs_sum = 0.0;
    return k;
}

KS_HD void ks_acc_init(te_kstats_acc *a)
{
    a->k = ks_empty();
    a->s1 = a->s2 = 0.0;
    a->shift = 0.0f;
}

/* Adds v, element i of the tensor; quick keeps to te_stats_quick's fields
 * (n, nan, inf, first_bad, abs_max, l2norm). Elements come in increasing
 * i within one accumulator. */
KS_HD void ks_acc_add(te_kstats_acc *a, float v, long long i, int quick)
{
    te_kstats *k = &a->k;
    k->n++;
    if (!isfinite(v)) {
        k->nan += v != v;
        if (k->first_bad < 0)
            k->first_bad = i;
        return;
    }
    const float av = fabsf(v);
    const double y = v;
    k->abs_max = av > k->abs_max ? av : k->abs_max;
    k->sq += y * y;
    if (!quick) {
        if (k->fin == 0)
            a->shift = v;
        const double d = y - (double)a->shift;
        a->s1 += d;
        a->s2 += d * d;
        k->zero += v == 0.0f;
        k->ovf += av > KS_F16_MAX;
        k->min = v < k->min ? v : k->min;
        k->max = v > k->max ? v : k->max;
        k->abs_sum += av;
    }
    k->fin++;
}

/* The accumulator's share as a te_kstats (stats.c's merge: the mean from
 * the shifted sum, M2 = s2 - s1^2 / n, never below 0). */
KS_HD te_kstats ks_acc_close(const te_kstats_acc *a)
{
    te_kstats k = a->k;
    if (k.fin > 0) {
        const double nf = (double)k.fin;
        k.mean = (double)a->shift + a->s1 / nf;
        const double m2 = a->s2 - a->s1 * a->s1 / nf;
        k.m2 = m2 > 0.0 ? m2 : 0.0;
    }
    return k;
}

/* a and b merged into a (Chan's formula for the moments). The result does
 * not depend on which share holds the lower indices except in rounding,
 * and callers merge in a fixed order. */
KS_HD void ks_merge(te_kstats *a, const te_kstats *b)
{
    if (b->fin > 0) {
        if (a->fin == 0) {
            a->mean = b->mean;
            a->m2 = b->m2;
        } else {
            const double na = (double)a->fin, nb = (double)b->fin, tot = na + nb;
            const double delta = b->mean - a->mean;
            a->mean += delta * nb / tot;
            a->m2 += b->m2 + delta * delta * na * nb / tot;
        }
    }
    a->n += b->n;
    a->fin += b->fin;
    a->nan += b->nan;
    a->zero += b->zero;
    a->ovf += b->ovf;
    if (b->first_bad >= 0 && (a->first_bad < 0 || b->first_bad < a->first_bad))
        a->first_bad = b->first_bad;
    a->min = b->min < a->min ? b->min : a->min;
    a->max = b->max > a->max ? b->max : a->max;
    a->abs_max = b->abs_max > a->abs_max ? b->abs_max : a->abs_max;
    a->sq += b->sq;
    a->abs_sum += b->abs_sum;
}

/* The launch shape: KS_THREADS per block, blocks a function of n alone
 * (at most KS_MAX_BLOCKS), so the merge order never changes for a tensor. */
#define KS_THREADS 256
#define KS_MAX_BLOCKS 1024
#define KS_PER_THREAD 16 /* elements a thread takes before another block is added */

KS_HD int ks_blocks(long long n)
{
    const long long per = (long long)KS_THREADS * KS_PER_THREAD;
    long long b = (n + per - 1) / per;
    return (int)(b < 1 ? 1 : b > KS_MAX_BLOCKS ? KS_MAX_BLOCKS : b);
}

/* Statistics of n elements of x (KS_F32 ...) into the device te_kstats at
 * slot. parts: device scratch of ks_blocks(n) te_kstats. Queued on stream;
 * returns the launch's error (cudaSuccess). */
cudaError_t ks_launch(const void *x, int type, long long n, int quick, te_kstats *parts, te_kstats *slot,
                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
