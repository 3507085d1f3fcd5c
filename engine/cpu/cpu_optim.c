/*
 * cpu_optim.c — the CPU backend's multi-tensor optimizer updates (SGD,
 * Adam/AdamW, PyTorch's rules), the loss scaler's unscale with its
 * non-finite check, and clipping's sum of squares. The tensors of one call
 * run one after another; each one's elements split across the OpenMP team.
 */
#include "cpu_optim.h"

#include "checksum.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* One branch-free loop per case: a test inside the loop kept GCC from
 * vectorising it (scalar code, a third of the MLP step at batch 32). The
 * first momentum step is the general one with a zero buffer: 0*0 + 1*d. */
static void sgd_range(const te_sgd_opts *s, const te_update_args *u, int64_t lo, int64_t hi)
{
    float *restrict p = u->p, *restrict buf = u->m;
    const float *restrict g = u->g;
    const float lr = s->lr, wd = s->weight_decay;
    const float mom = u->first ? 0.0f : s->momentum, damp = u->first ? 1.0f : 1.0f - s->dampening;
    const float look = s->momentum; /* Nesterov's look-ahead uses momentum even on step 1 */
    if (!buf) {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++)
            p[i] -= lr * (g[i] + wd * p[i]);
    } else if (s->nesterov) {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) {
            float d = g[i] + wd * p[i];
            buf[i] = mom * buf[i] + damp * d;
            p[i] -= lr * (d + look * buf[i]);
        }
    } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; i++) {
            buf[i] = mom * buf[i] + damp * (g[i] + wd * p[i]);
            p[i] -= lr * buf[i];
        }
    }
}

static void adam_range(const te_adam_opts *a, int64_t t, const te_update_args *u, int64_t lo, int64_t hi)
{
    float *restrict p = u->p, *restrict m = u->m, *restrict v = u->v;
    const float *restrict g = u->g;
    const float b1 = a->beta1, b2 = a->beta2, eps = a->eps, wd = a->weight_decay;
    const float step = a->lr / (1.0f - powf(b1, (float)t));
    const float inv_sqrt_bc2 = 1.0f / sqrtf(1.0f - powf(b2, (float)t));
    const float decay = a->decoupled ? 1.0f - a->lr * wd : 1.0f;
    const float l2 = a->decoupled ? 0.0f : wd;
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        float d = g[i] + l2 * p[i];
        m[i] = b1 * m[i] + (1.0f - b1) * d;
        v[i] = b2 * v[i] + (1.0f - b2) * d * d;
        p[i] = p[i] * decay - step * m[i] / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
    }
}

/* checksum.h's terms of the 8-byte words [lo, hi) at b, vectorised by
 * `omp simd` for the instruction set it is compiled for: GCC at -O2 left
 * the plain loop scalar (2% of the MLP's step while recording). */
#define SUM_WORDS(b, lo, hi, s)                                                                      \
    do {                                                                                             \
        _Pragma("omp simd reduction(+ : s)") for (int64_t i = (lo); i < (hi); i++) {                 \
            uint64_t w;                                                                              \
            memcpy(&w, (b) + 8 * i, sizeof w);                                                       \
            (s) += te_sum_term((uint64_t)i, w);                                                      \
        }                                                                                            \
    } while (0)

__attribute__((target("avx512f,avx512dq"))) static uint64_t words_avx512(const unsigned char *b, int64_t lo,
                                                                         int64_t hi)
{
    uint64_t s = 0;
    SUM_WORDS(b, lo, hi, s);
    return s;
}

__attribute__((target("avx2"))) static uint64_t words_avx2(const unsigned char *b, int64_t lo, int64_t hi)
{
    uint64_t s = 0;
    SUM_WORDS(b, lo, hi, s);
    return s;
}

static uint64_t words_base(const unsigned char *b, int64_t lo, int64_t hi)
{
    uint64_t s = 0;
    SUM_WORDS(b, lo, hi, s);
    return s;
}

/* The widest the CPU has (the machines of this project differ), picked
 * by update() before its threads start. */
static uint64_t (*words)(const unsigned char *b, int64_t lo, int64_t hi);

static void pick_words(void)
{
    if (!words)
        words = __builtin_cpu_supports("avx512dq") ? words_avx512
              : __builtin_cpu_supports("avx2")     ? words_avx2
                                                   : words_base;
}

/* checksum.h's terms of p[lo, hi) read as 8-byte words (lo is even: a
 * strip holds whole words; an odd hi is the tensor's end, its last word
 * padded with zeros). */
static uint64_t strip_sum(const float *p, int64_t lo, int64_t hi)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t s = words(b, lo / 2, hi / 2);
    if (hi & 1)
        s += te_sum_term((uint64_t)(hi / 2), te_sum_word(b, (size_t)hi * sizeof *p, (size_t)(hi / 2)));
    return s;
}

/* The rule of one call: SGD's options, or Adam's and its step count. */
typedef struct rule {
    const te_sgd_opts *sgd;
    const te_adam_opts *adam;
    int64_t t;
} rule;

static void update_range(const rule *r, const te_update_args *u, int64_t lo, int64_t hi)
{
    if (r->sgd)
        sgd_range(r->sgd, u, lo, hi);
    else
        adam_range(r->adam, r->t, u, lo, hi);
}

static void update_all(const rule *r, const te_update_args *u)
{
    const int64_t n = u->n;
    uint64_t sum = 0;
#pragma omp parallel for schedule(static) if (n > TE_PAR_MIN) reduction(+ : sum)
    for (int64_t b = 0; b < n; b += TE_STATS_STRIP) {
        const int64_t e = b + TE_STATS_STRIP < n ? b + TE_STATS_STRIP : n;
        update_range(r, u, b, e);
        if (u->sum) /* the strip is still in cache */
            sum += strip_sum(u->p, b, e);
    }
    if (u->sum)
        *u->sum = te_sum_final(sum, (size_t)n * sizeof *u->p);
}

/* The update with the new values' statistics taken a strip at a time,
 * while the strip is still in cache: reading the parameter again after
 * its update came from memory, at twice the cost. */
static void update_with_stats(const rule *r, const te_update_args *u)
{
    const int64_t n = u->n;
    int64_t size;
    const int nch = te_stats_chunks(n, &size);
    te_stats_part parts[TE_STATS_MAX_CHUNKS];
    uint64_t sum = 0;
#pragma omp parallel for schedule(static) if (nch > 1 && n > TE_PAR_MIN) reduction(+ : sum)
    for (int c = 0; c < nch; c++) {
        const int64_t lo = (int64_t)c * size, hi = lo + size < n ? lo + size : n;
        for (int64_t b = lo; b < hi; b += TE_STATS_STRIP) {
            const int64_t e = b + TE_STATS_STRIP < hi ? b + TE_STATS_STRIP : hi;
            update_range(r, u, b, e);
            if (b == lo)
                te_stats_part_begin(&parts[c], u->p, lo, hi);
            te_stats_part_add(&parts[c], u->p, b, e - b);
            if (u->sum)
                sum += strip_sum(u->p, b, e);
        }
    }
    te_stats_merge(parts, nch, n, u->stats);
    if (u->sum)
        *u->sum = te_sum_final(sum, (size_t)n * sizeof *u->p);
}

static void update(const rule *r, const te_update_args *u, int count)
{
    pick_words();
    for (int k = 0; k < count; k++) {
        if (u[k].stats)
            update_with_stats(r, &u[k]);
        else
            update_all(r, &u[k]);
    }
}

void cpu_sgd(const te_sgd_opts *o, const te_update_args *u, int count)
{
    update(&(rule){ .sgd = o }, u, count);
}

void cpu_adam(const te_adam_opts *o, int64_t t, const te_update_args *u, int count)
{
    update(&(rule){ .adam = o, .t = t }, u, count);
}

/* dst = src * inv, non-finite values of src counted, in one pass: PyTorch's
 * _amp_foreach_non_finite_check_and_unscale_ (it tests the value before
 * multiplying). src may be dst (f32) or a f16/bf16 buffer, widened block by
 * block into dst (exactly: every half value is an f32) by the vector
 * conversion while the block is in cache. */
#define UNSCALE_BLOCK 2048

static bool unscale_one(const void *src, te_dtype dt, float *dst, int64_t n, float inv)
{
    const int64_t blocks = (n + UNSCALE_BLOCK - 1) / UNSCALE_BLOCK;
    int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > TE_PAR_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t i0 = b * UNSCALE_BLOCK, m = n - i0 < UNSCALE_BLOCK ? n - i0 : UNSCALE_BLOCK;
        const float *x = dt == TE_F32 ? (const float *)src + i0 : dst + i0;
        if (dt != TE_F32)
            te_half_to_f32((const uint16_t *)src + i0, dst + i0, dt, m);
        float *y = dst + i0;
#pragma omp simd reduction(| : bad)
        for (int64_t i = 0; i < m; i++) {
            bad |= !(fabsf(x[i]) <= FLT_MAX);
            y[i] = x[i] * inv;
        }
    }
    return bad != 0;
}

bool cpu_unscale(const te_unscale_args *u, int count, float inv)
{
    bool bad = false;
    for (int k = 0; k < count; k++)
        bad |= unscale_one(u[k].src, u[k].dt, u[k].dst, u[k].n, inv);
    return bad;
}

/* Each tensor's sum in double, element after element, then the tensors'
 * sums in order: the clipped norm does not depend on the thread count. */
double cpu_sumsq(const te_unscale_args *u, int count)
{
    double total = 0;
    for (int k = 0; k < count; k++) {
        const te_unscale_args *a = &u[k];
        double sq = 0;
        if (a->dt == TE_F32) {
            const float *x = a->src;
            for (int64_t j = 0; j < a->n; j++)
                sq += (double)x[j] * x[j];
        } else { /* widened a block at a time: exactly, every half value is an f32 */
            float x[256];
            for (int64_t b = 0; b < a->n; b += 256) {
                const int64_t m = a->n - b < 256 ? a->n - b : 256;
                te_half_to_f32((const uint16_t *)a->src + b, x, a->dt, m);
                for (int64_t j = 0; j < m; j++)
                    sq += (double)x[j] * x[j];
            }
        }
        total += sq;
    }
    return total;
}
