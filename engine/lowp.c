/*
 * lowp.c — rounding f32 results to f16 or bf16, and what the rounding did.
 *
 * Every low-precision result in the engine is computed in f32 and rounded
 * once, to nearest even, here (or by a kernel through te_round_block): a
 * value beyond the dtype's largest finite one becomes +-Inf as IEEE says,
 * f16's subnormals are kept, and a finite non-zero value below half the
 * smallest subnormal becomes a signed zero. The counts of both, and the
 * largest magnitude before rounding, are what `break overflow` and `break
 * underflow` read (te_op_record.round): the value that overflowed is gone
 * from the tensor, so its size is kept here.
 */
#include "te_internal.h"

#include <string.h>

float te_dtype_max(te_dtype dt)
{
    switch (dt) {
    case TE_F16: return 65504.0f;
    case TE_BF16: return 3.38953139e38f; /* 0x7f7f: (2 - 2^-7) * 2^127 */
    case TE_F32: return 3.40282347e38f;
    case TE_I32: return 2147483647.0f;
    case TE_DTYPE_COUNT: break;
    }
    return 0.0f;
}

void te_round_stats_clear(te_round_stats *st, te_dtype dt)
{
    memset(st, 0, sizeof *st);
    st->dtype = dt;
}

/* ---- fast conversions ------------------------------------------------------
 * The shadow path widens every f16/bf16 input to f32 and rounds every result
 * back, so these loops are what low precision costs. They give the same bits
 * and counts as the scalar te_f16_to_f32/te_f32_to_f16/te_f32_to_bf16 and the
 * per-element counting (tests/test_shape.c checks every half pattern and
 * f32 edge cases): bf16 by integer bit tricks, in AVX2 where the CPU has
 * it (GCC -O2 leaves the plain C loops scalar; they are the fallback), f16 by F16C where
 * the CPU has it (both picked at run time: the machines differ), the scalar
 * functions elsewhere. F16C quiets a signalling NaN that
 * it widens, so NaN and Inf lanes take the scalar function's bits instead.
 */

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define LOWP_X86 1
#endif

bool te_lowp_portable;

/* Counts kept in 32 bits per element run of at most LOWP_RUN, so that the
 * counting loops vectorise; absmax as the bits of a finite |x| (non-negative
 * floats order as their bits do). */
#define LOWP_RUN 65536

typedef struct {
    int64_t over, under, nonzero;
    uint32_t amax;
} lowp_counts;

static float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* What rounding x (bits) to r did; infb: the dtype's Inf without its sign. */
#define LOWP_COUNT(x, r, infb, over, under, nz, amax)                                             \
    do {                                                                                          \
        const uint32_t ax_ = (x) & 0x7fffffffu, fin_ = ax_ < 0x7f800000u;                         \
        const uint32_t nzf_ = fin_ & (ax_ != 0), rm_ = (uint32_t)(r) & 0x7fffu;                   \
        nz += nzf_;                                                                               \
        over += nzf_ & (rm_ == (infb));                                                           \
        under += nzf_ & (rm_ == 0);                                                               \
        const uint32_t a_ = fin_ ? ax_ : 0;                                                       \
        amax = a_ > amax ? a_ : amax;                                                             \
    } while (0)

/* bf16: round to nearest even by adding 0x7fff plus the kept lsb; a NaN
 * keeps its top bits with the quiet bit set, as te_f32_to_bf16. */
static void round_bf16(const float *src, uint16_t *dst, int64_t n, lowp_counts *c)
{
    for (int64_t i0 = 0; i0 < n; i0 += LOWP_RUN) {
        const int64_t m = n - i0 < LOWP_RUN ? n - i0 : LOWP_RUN;
        uint32_t over = 0, under = 0, nz = 0, amax = c->amax;
        for (int64_t i = i0; i < i0 + m; i++) {
            uint32_t x;
            memcpy(&x, src + i, 4);
            const uint32_t rne = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
            const uint32_t r = (x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : rne;
            dst[i] = (uint16_t)r;
            LOWP_COUNT(x, r, 0x7f80u, over, under, nz, amax);
        }
        c->over += over;
        c->under += under;
        c->nonzero += nz;
        c->amax = amax;
    }
}

/* f16 without F16C: the scalar rounding, counted without branches. */
static void round_f16_scalar(const float *src, uint16_t *dst, int64_t n, lowp_counts *c)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, src + i, 4);
        const uint16_t r = te_f32_to_f16(src[i]);
        dst[i] = r;
        LOWP_COUNT(x, r, 0x7c00u, c->over, c->under, c->nonzero, c->amax);
    }
}

#ifdef LOWP_X86
static bool use_avx2(void) { return !te_lowp_portable && __builtin_cpu_supports("avx2"); }

/* F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know
 * "f16c"); AVX2 implies the OS saves the YMM registers. */
static bool use_f16c(void)
{
    /* asked once: CPUID is slow (a trap to the hypervisor in a VM), and
     * conversions of one row at a time call this often */
    static _Atomic int has; /* 0 not asked yet, 1 no, 2 yes */
    if (!has) {
        unsigned a, b, c, d;
        has = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) ? 2 : 1;
    }
    return use_avx2() && has == 2;
}

__attribute__((target("avx2"))) static int64_t hsum_epi32(__m256i v)
{
    uint32_t l[8];
    int64_t s = 0;
    _mm256_storeu_si256((__m256i *)l, v);
    for (int k = 0; k < 8; k++)
        s += l[k];
    return s;
}

/* The counts of 8 lanes at a time: x the f32 bits, r the rounded bits
 * (one per 32-bit lane), infb the dtype's Inf without its sign; summed into
 * 32-bit lanes over one LOWP_RUN, then flushed. */
typedef struct {
    __m256i over, under, nz, amax;
} lanes_counts;

__attribute__((target("avx2"))) static inline lanes_counts lanes_start(const lowp_counts *c)
{
    const __m256i zero = _mm256_setzero_si256();
    return (lanes_counts){ zero, zero, zero, _mm256_set1_epi32((int)c->amax) };
}

__attribute__((target("avx2"))) static inline void lanes_count(lanes_counts *k, __m256i x, __m256i r, __m256i infb)
{
    const __m256i zero = _mm256_setzero_si256();
    const __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i fin = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f800000), ax);
    const __m256i nzf = _mm256_andnot_si256(_mm256_cmpeq_epi32(ax, zero), fin);
    const __m256i rm = _mm256_and_si256(r, _mm256_set1_epi32(0x7fff));
    k->nz = _mm256_sub_epi32(k->nz, nzf); /* a true mask is -1 */
    k->over = _mm256_sub_epi32(k->over, _mm256_and_si256(nzf, _mm256_cmpeq_epi32(rm, infb)));
    k->under = _mm256_sub_epi32(k->under, _mm256_and_si256(nzf, _mm256_cmpeq_epi32(rm, zero)));
    k->amax = _mm256_max_epu32(k->amax, _mm256_and_si256(ax, fin));
}

__attribute__((target("avx2"))) static void lanes_flush(const lanes_counts *k, lowp_counts *c)
{
    c->over += hsum_epi32(k->over);
    c->under += hsum_epi32(k->under);
    c->nonzero += hsum_epi32(k->nz);
    uint32_t l[8];
    _mm256_storeu_si256((__m256i *)l, k->amax);
    for (int j = 0; j < 8; j++)
        c->amax = l[j] > c->amax ? l[j] : c->amax;
}

/* F16C's vcvtps2ph rounds to nearest even, overflows to Inf, keeps f16
 * subnormals and quiets a NaN keeping its top payload bits: te_f32_to_f16's
 * bits exactly. The counts alongside, 8 lanes at a time. */
__attribute__((target("avx2,f16c"))) static void round_f16_f16c(const float *src, uint16_t *dst, int64_t n,
                                                                 lowp_counts *c)
{
    const __m256i inf16 = _mm256_set1_epi32(0x7c00);
    int64_t i = 0;
    while (n - i >= 8) {
        const int64_t m = (n - i < LOWP_RUN ? n - i : LOWP_RUN) & ~(int64_t)7;
        lanes_counts k = lanes_start(c);
        for (const int64_t end = i + m; i < end; i += 8) {
            const __m256 f = _mm256_loadu_ps(src + i);
            const __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT);
            _mm_storeu_si128((__m128i *)(dst + i), h);
            lanes_count(&k, _mm256_castps_si256(f), _mm256_cvtepu16_epi32(h), inf16);
        }
        lanes_flush(&k, c);
    }
    round_f16_scalar(src + i, dst + i, n - i, c);
}

/* round_bf16's bits and counts, 8 lanes at a time: GCC at -O2 leaves the
 * plain loop scalar, and at O2 every activation, gradient and weight copy
 * goes through it. */
__attribute__((target("avx2"))) static void round_bf16_avx2(const float *src, uint16_t *dst, int64_t n,
                                                            lowp_counts *c)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf32 = _mm256_set1_epi32(0x7f800000);
    const __m256i halfm = _mm256_set1_epi32(0x7fff), inf16 = _mm256_set1_epi32(0x7f80);
    const __m256i one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    while (n - i >= 8) {
        const int64_t m = (n - i < LOWP_RUN ? n - i : LOWP_RUN) & ~(int64_t)7;
        lanes_counts k = lanes_start(c);
        for (const int64_t end = i + m; i < end; i += 8) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
            const __m256i hi = _mm256_srli_epi32(x, 16);
            const __m256i rne = _mm256_srli_epi32(
                _mm256_add_epi32(x, _mm256_add_epi32(halfm, _mm256_and_si256(hi, one))), 16);
            const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, absm), inf32);
            const __m256i r = _mm256_blendv_epi8(rne, _mm256_or_si256(hi, quiet), nan);
            /* r <= 0xffff: the unsigned-saturating pack is exact; it packs
             * within 128-bit halves, so gather the two low quads. */
            const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
            _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(p));
            lanes_count(&k, x, r, inf16);
        }
        lanes_flush(&k, c);
    }
    round_bf16(src + i, dst + i, n - i, c);
}

/* bf16 widened: the bits shifted up, 8 at a time (GCC -O2 leaves the plain
 * loop scalar). */
__attribute__((target("avx2"))) static void bf16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    for (; i < n; i++)
        dst[i] = te_bf16_to_f32(src[i]);
}

__attribute__((target("avx2,f16c"))) static void f16_to_f32_f16c(const uint16_t *src, float *dst, int64_t n)
{
    const __m256i expm = _mm256_set1_epi32(0x7c00), sgn = _mm256_set1_epi32(0x8000);
    const __m256i man = _mm256_set1_epi32(0x3ff), inf32 = _mm256_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        const __m256i h32 = _mm256_cvtepu16_epi32(h);
        const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(h32, expm), expm);
        /* Inf or NaN: sign | Inf | payload << 13, a signalling NaN unquieted */
        const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h32, sgn), 16),
                                             _mm256_or_si256(inf32, _mm256_slli_epi32(_mm256_and_si256(h32, man), 13)));
        const __m256 f = _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(bits), _mm256_castsi256_ps(special));
        _mm256_storeu_ps(dst + i, f);
    }
    for (; i < n; i++)
        dst[i] = te_f16_to_f32(src[i]);
}
#endif

static void bf16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)src[i] << 16;
        memcpy(dst + i, &u, 4);
    }
}

void te_half_to_f32(const uint16_t *src, float *dst, te_dtype dt, int64_t n)
{
#ifdef LOWP_X86
    if (dt == TE_BF16 && use_avx2()) {
        bf16_to_f32_avx2(src, dst, n);
        return;
    }
#endif
    if (dt == TE_BF16) {
        bf16_to_f32(src, dst, n);
        return;
    }
#ifdef LOWP_X86
    if (use_f16c()) {
        f16_to_f32_f16c(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        dst[i] = te_f16_to_f32(src[i]);
}

void te_round_block(const float *src, void *dst, te_dtype dt, int64_t n, te_round_stats *st)
{
    lowp_counts c = {0, 0, 0, 0};
#ifdef LOWP_X86
    if (dt == TE_BF16 && use_avx2())
        round_bf16_avx2(src, dst, n, &c);
    else if (dt == TE_F16 && use_f16c())
        round_f16_f16c(src, dst, n, &c);
    else
#endif
    if (dt == TE_BF16)
        round_bf16(src, dst, n, &c);
    else
        round_f16_scalar(src, dst, n, &c);
    if (st) {
        st->overflow += c.over;
        st->underflow += c.under;
        st->nonzero += c.nonzero;
        const float amax = bits_to_f32(c.amax);
        st->absmax = amax > st->absmax ? amax : st->absmax;
    }
}

#define ROUND_CHUNK 4096

void te_round_host(const float *src, void *dst, te_dtype dt, int64_t n, te_round_stats *st)
{
    const int64_t chunks = (n + ROUND_CHUNK - 1) / ROUND_CHUNK;
    int64_t over = 0, under = 0, nonzero = 0;
    float amax = 0.0f;
#pragma omp parallel for if (n >= TE_PAR_MIN) reduction(+ : over, under, nonzero) reduction(max : amax)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t i0 = c * ROUND_CHUNK, m = n - i0 < ROUND_CHUNK ? n - i0 : ROUND_CHUNK;
        te_round_stats part;
        te_round_stats_clear(&part, dt);
        te_round_block(src + i0, (uint16_t *)dst + i0, dt, m, &part);
        over += part.overflow;
        under += part.underflow;
        nonzero += part.nonzero;
        amax = part.absmax > amax ? part.absmax : amax;
    }
    if (st) {
        st->overflow += over;
        st->underflow += under;
        st->nonzero += nonzero;
        st->absmax = amax > st->absmax ? amax : st->absmax;
    }
}

void te_widen_host(const uint16_t *src, float *dst, te_dtype dt, int64_t n)
{
    const int64_t chunks = (n + TE_PAR_MIN - 1) / TE_PAR_MIN;
#pragma omp parallel for if (chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t i0 = c * TE_PAR_MIN;
        te_half_to_f32(src + i0, dst + i0, dt, n - i0 < TE_PAR_MIN ? n - i0 : TE_PAR_MIN);
    }
}

void te_round_f32(te_tensor *t, const float *src, te_round_stats *st)
{
    if (st)
        te_round_stats_clear(st, t->dtype);
    if (t->dtype != TE_F16 && t->dtype != TE_BF16) {
        te_copy_from_f32(t, src);
        return;
    }
    const te_backend *be = te_backend_for(t);
    if (!be->round) {
        te_set_error(TE_ERR_DEVICE, "te_round_f32: %s: the %s backend has no round", t->name, be->name);
        return;
    }
    if (te_backend_is_host(be)) { /* src is already in its memory */
        be->round(src, te_data(t), t->dtype, t->numel, st);
        return;
    }
    /* src goes to the device, to be rounded there. */
    const size_t bytes = (size_t)t->numel * sizeof(float);
    float *dev = te_mem_alloc_on(t->device, bytes);
    if (!dev) {
        te_set_error(TE_ERR_NOMEM, "te_round_f32: %s: cannot allocate %zu bytes on %s", t->name, bytes,
                     te_device_name(t->device));
        return;
    }
    be->from_host(dev, src, bytes);
    be->round(dev, te_data(t), t->dtype, t->numel, st);
    te_mem_free_on(t->device, dev, bytes);
}
