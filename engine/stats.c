/*
 * stats.c — tensor statistics in one vectorised pass, for the debugger's
 * checks and the dump's statistics-only mode.
 *
 * A tensor is cut into chunks whose size depends only on its length; threads
 * take whole chunks and the partial results are merged in chunk order, so
 * the answer is the same bit for bit on any thread count. f32 is read in
 * place; other dtypes are converted a block at a time into an f32 buffer so
 * that one kernel serves them all.
 */
#include "te_internal.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_KERNEL 1
#endif

#define CHUNK_MIN 65536  /* elements: smaller tensors are one chunk */
#define STRIP TE_STATS_STRIP
/* Elements below which one thread scans the whole tensor: waking the
 * others (asleep between ops under OMP_WAIT_POLICY=PASSIVE, or behind
 * OpenBLAS's spinning threads) took 40-100 us, as long as scanning 128K
 * elements alone. */
#define PARALLEL_MIN (1 << 19)
#define BLOCK STRIP      /* f32 staging buffer for f16, bf16 and i32 */
#define SHIFT_SCAN 64    /* elements searched for a finite shift value */
#define F16_MAX 65504.0f

/* The kernels are built twice, for AVX2 and for the baseline, and the
 * loader picks one: twice the lanes where the CPU has them. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STATS_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define STATS_KERNEL
#endif

typedef te_stats_part part;

static inline int finite_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
}

/* v when f, else 0, by masking bits: a float select here would keep the loop
 * from vectorising under the default -ftrapping-math. */
static inline float keep_if(float v, int f)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u &= 0u - (uint32_t)f;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Adds the counts and sums of b, a block of p's chunk, to p. Inlined: it
 * runs once every FULL_BLOCK elements, and as a call it cost a third of the
 * kernel's time. */
static inline __attribute__((always_inline)) void part_add(part *p, const part *b)
{
    p->fin += b->fin;
    p->nan += b->nan;
    p->zero += b->zero;
    p->ovf += b->ovf;
    p->min = b->min < p->min ? b->min : p->min;
    p->max = b->max > p->max ? b->max : p->max;
    p->abs_max = b->abs_max > p->abs_max ? b->abs_max : p->abs_max;
    p->s1 += b->s1;
    p->s2 += b->s2;
    p->sq += b->sq;
    p->abs_sum += b->abs_sum;
}

static int64_t first_nonfinite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!finite_bits(x[i]))
            return i;
    return -1;
}

static float shift_of(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n && i < SHIFT_SCAN; i++)
        if (finite_bits(x[i]))
            return x[i];
    return 0.0f;
}

/* Adds n elements, the first at flat index base, to p, in double. */
STATS_KERNEL static void full_exact(part *p, const float *x, int64_t n, int64_t base)
{
    const double k = p->shift;
    int64_t fin = 0, nan = 0, zero = 0, ovf = 0;
    float mn = INFINITY, mx = -INFINITY, amx = 0.0f;
    double s1 = 0, s2 = 0, sq = 0, as = 0;
#pragma omp simd reduction(+ : fin, nan, zero, ovf, s1, s2, sq, as) reduction(min : mn) \
    reduction(max : mx, amx)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        int f = finite_bits(v);
        float a = fabsf(keep_if(v, f)), lo = f ? v : INFINITY, hi = f ? v : -INFINITY;
        double y = keep_if(v, f), d = y - k * f;
        fin += f;
        nan += v != v;
        zero += v == 0.0f;
        ovf += a > F16_MAX;
        mn = lo < mn ? lo : mn;
        mx = hi > mx ? hi : mx;
        amx = a > amx ? a : amx;
        s1 += d;
        s2 += d * d;
        sq += y * y;
        as += a;
    }
    if (fin < n && p->first_bad < 0)
        p->first_bad = base + first_nonfinite(x, n);
    part_add(p, &(part){ .fin = fin, .nan = nan, .zero = zero, .ovf = ovf, .min = mn, .max = mx,
                         .abs_max = amx, .s1 = s1, .s2 = s2, .sq = sq, .abs_sum = as });
}

/* The exact quick pass over n elements that hold a NaN or Inf. */
STATS_KERNEL static void quick_exact(part *p, const float *x, int64_t n, int64_t base)
{
    int64_t fin = 0, nan = 0;
    float amx = 0.0f;
    double sq = 0;
#pragma omp simd reduction(+ : fin, nan, sq) reduction(max : amx)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        int f = finite_bits(v);
        float a = fabsf(keep_if(v, f));
        double y = a;
        fin += f;
        nan += v != v;
        amx = a > amx ? a : amx;
        sq += y * y;
    }
    if (fin < n && p->first_bad < 0)
        p->first_bad = base + first_nonfinite(x, n);
    p->fin += fin;
    p->nan += nan;
    p->abs_max = amx > p->abs_max ? amx : p->abs_max;
    p->sq += sq;
}

/* `break nan` runs this on every op's outputs, so the common case, a block
 * with only finite values, is one f32 pass: x * 0 is NaN exactly when x is
 * NaN or Inf, so one sum says whether the block is clean. A block that is
 * not, or whose f32 sum of squares overflows, is done again exactly. */
#define QUICK_BLOCK 1024

STATS_KERNEL static void kernel_quick(part *p, const float *x, int64_t n, int64_t base)
{
    for (int64_t b = 0; b < n; b += QUICK_BLOCK) {
        const int64_t m = n - b < QUICK_BLOCK ? n - b : QUICK_BLOCK;
        const float *xb = x + b;
        float probe = 0.0f, sq = 0.0f;
        uint32_t amx = 0; /* |x| as bits: for finite x, ordered as the floats are */
#pragma omp simd reduction(+ : probe, sq) reduction(max : amx)
        for (int64_t i = 0; i < m; i++) {
            const float v = xb[i];
            uint32_t u;
            memcpy(&u, &v, sizeof u);
            u &= 0x7fffffffu;
            probe += v * 0.0f;
            amx = u > amx ? u : amx;
            sq += v * v;
        }
        if (probe != probe || isinf(sq)) {
            quick_exact(p, xb, m, base + b);
            continue;
        }
        float a;
        memcpy(&a, &amx, sizeof a);
        p->fin += m;
        p->abs_max = a > p->abs_max ? a : p->abs_max;
        p->sq += sq;
    }
}

/* Statistics-only dumps run this on every tensor of every op, so the
 * common case, a block of finite values, is summed in f32 (FULL_BLOCK / 4
 * terms a lane: relative error under 4e-6 of the sum of magnitudes, most
 * of all far less) and added to the double totals once a block. The sum of
 * squares is NaN or Inf exactly when the block holds a NaN or Inf or the
 * f32 sums overflow: such a block is done again exactly. The loop keeps to
 * the sums every block needs, so that its accumulators stay in registers;
 * values beyond f16's range are counted only in a block that has some. */
#define FULL_BLOCK 256

static void kernel_full(part *p, const float *x, int64_t n, int64_t base)
{
    const float k = p->shift;
    for (int64_t b = 0; b < n; b += FULL_BLOCK) {
        const int64_t m = n - b < FULL_BLOCK ? n - b : FULL_BLOCK;
        const float *xb = x + b;
        float s1 = 0.0f, s2 = 0.0f, sq = 0.0f, as = 0.0f;
        float mn = INFINITY, mx = -INFINITY, amx = 0.0f;
        int zero = 0;
#pragma omp simd reduction(+ : s1, s2, sq, as, zero) reduction(min : mn) reduction(max : mx, amx)
        for (int64_t i = 0; i < m; i++) {
            const float v = xb[i], a = fabsf(v), d = v - k;
            s1 += d;
            s2 += d * d;
            sq += v * v;
            as += a;
            mn = v < mn ? v : mn;
            mx = v > mx ? v : mx;
            amx = a > amx ? a : amx;
            zero += v == 0.0f;
        }
        if (!isfinite(sq) || !isfinite(s2) || !isfinite(as)) {
            full_exact(p, xb, m, base + b);
            continue;
        }
        int64_t ovf = 0;
        if (amx > F16_MAX)
            for (int64_t i = 0; i < m; i++)
                ovf += fabsf(xb[i]) > F16_MAX;
        part_add(p, &(part){ .fin = m, .zero = zero, .ovf = ovf, .min = mn, .max = mx, .abs_max = amx,
                             .s1 = s1, .s2 = s2, .sq = sq, .abs_sum = as });
    }
}

#ifdef HAVE_AVX2_KERNEL
/* kernel_full written out for AVX2 and FMA, twice as fast: the compiler's
 * version reduced its eight lanes to one after every block, which cost as
 * much as the block. Here a block's f32 sums are widened into four double
 * lanes and added there, and min and max stay vectors until the chunk's
 * end; two sets of accumulators hide the adds' latency. abs_max is the
 * larger of |min| and |max|, as every block counted here is finite. Blocks
 * that are not, and the tail, go through kernel_full. */
#define WIDEN_ADD(acc, v)                                                                          \
    acc = _mm256_add_pd(acc, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),             \
                                           _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))))

__attribute__((target("avx2,fma"))) static double hsum4(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

__attribute__((target("avx2,fma"))) static void kernel_full_avx2(part *p, const float *x, int64_t n,
                                                                  int64_t base)
{
    const __m256 k = _mm256_set1_ps(p->shift), zero = _mm256_setzero_ps();
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 f16_max = _mm256_set1_ps(F16_MAX);
    __m256d s1_all = _mm256_setzero_pd(), s2_all = s1_all, sq_all = s1_all, as_all = s1_all;
    __m256 mn_all = _mm256_set1_ps(INFINITY), mx_all = _mm256_set1_ps(-INFINITY);
    int64_t fin = 0, zeros = 0, b = 0;
    for (; b + FULL_BLOCK <= n; b += FULL_BLOCK) {
        const float *xb = x + b;
        __m256 s1a = zero, s1b = zero, s2a = zero, s2b = zero, sqa = zero, sqb = zero, asa = zero,
               asb = zero;
        __m256 mn = _mm256_set1_ps(INFINITY), mx = _mm256_set1_ps(-INFINITY);
        __m256i z = _mm256_setzero_si256();
        for (int i = 0; i < FULL_BLOCK; i += 16) {
            const __m256 v = _mm256_loadu_ps(xb + i), w = _mm256_loadu_ps(xb + i + 8);
            const __m256 d = _mm256_sub_ps(v, k), e = _mm256_sub_ps(w, k);
            s1a = _mm256_add_ps(s1a, d);
            s1b = _mm256_add_ps(s1b, e);
            s2a = _mm256_fmadd_ps(d, d, s2a);
            s2b = _mm256_fmadd_ps(e, e, s2b);
            sqa = _mm256_fmadd_ps(v, v, sqa);
            sqb = _mm256_fmadd_ps(w, w, sqb);
            asa = _mm256_add_ps(asa, _mm256_and_ps(v, absm));
            asb = _mm256_add_ps(asb, _mm256_and_ps(w, absm));
            mn = _mm256_min_ps(mn, _mm256_min_ps(v, w));
            mx = _mm256_max_ps(mx, _mm256_max_ps(v, w));
            z = _mm256_sub_epi32(z, _mm256_castps_si256(_mm256_cmp_ps(v, zero, _CMP_EQ_OQ)));
            z = _mm256_sub_epi32(z, _mm256_castps_si256(_mm256_cmp_ps(w, zero, _CMP_EQ_OQ)));
        }
        const __m256 s1 = _mm256_add_ps(s1a, s1b), s2 = _mm256_add_ps(s2a, s2b);
        const __m256 sq = _mm256_add_ps(sqa, sqb), as = _mm256_add_ps(asa, asb);
        __m256 probe = _mm256_add_ps(_mm256_add_ps(s2, sq), as);
        probe = _mm256_sub_ps(probe, probe); /* NaN in a lane whose sums are not finite */
        if (_mm256_movemask_ps(_mm256_cmp_ps(probe, probe, _CMP_UNORD_Q))) {
            full_exact(p, xb, FULL_BLOCK, base + b);
            continue;
        }
        WIDEN_ADD(s1_all, s1);
        WIDEN_ADD(s2_all, s2);
        WIDEN_ADD(sq_all, sq);
        WIDEN_ADD(as_all, as);
        mn_all = _mm256_min_ps(mn_all, mn);
        mx_all = _mm256_max_ps(mx_all, mx);
        __m128i zs = _mm_add_epi32(_mm256_castsi256_si128(z), _mm256_extracti128_si256(z, 1));
        zs = _mm_add_epi32(zs, _mm_shuffle_epi32(zs, 0x4e));
        zs = _mm_add_epi32(zs, _mm_shuffle_epi32(zs, 0xb1));
        zeros += _mm_cvtsi128_si32(zs);
        fin += FULL_BLOCK;
        const __m256 amx = _mm256_max_ps(_mm256_and_ps(mn, absm), _mm256_and_ps(mx, absm));
        if (_mm256_movemask_ps(_mm256_cmp_ps(amx, f16_max, _CMP_GT_OQ)))
            for (int i = 0; i < FULL_BLOCK; i++)
                p->ovf += fabsf(xb[i]) > F16_MAX;
    }
    if (fin > 0) {
        float lo[8], hi[8];
        _mm256_storeu_ps(lo, mn_all);
        _mm256_storeu_ps(hi, mx_all);
        float mn = lo[0], mx = hi[0];
        for (int i = 1; i < 8; i++) {
            mn = lo[i] < mn ? lo[i] : mn;
            mx = hi[i] > mx ? hi[i] : mx;
        }
        const float amx = fabsf(mn) > fabsf(mx) ? fabsf(mn) : fabsf(mx);
        part_add(p, &(part){ .fin = fin, .zero = zeros, .min = mn, .max = mx, .abs_max = amx,
                             .s1 = hsum4(s1_all), .s2 = hsum4(s2_all), .sq = hsum4(sq_all),
                             .abs_sum = hsum4(as_all) });
    }
    if (b < n)
        kernel_full(p, x + b, n - b, base + b);
}
#endif

/* The full kernel for this CPU. */
static void (*full_kernel(void))(part *, const float *, int64_t, int64_t)
{
#ifdef HAVE_AVX2_KERNEL
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return kernel_full_avx2;
#endif
    return kernel_full;
}

/* x[i] of dtype dt widened to f32, exactly as te_get does. */
static float host_get(const void *x, te_dtype dt, int64_t i)
{
    switch (dt) {
    case TE_F16: return te_f16_to_f32(((const uint16_t *)x)[i]);
    case TE_BF16: return te_bf16_to_f32(((const uint16_t *)x)[i]);
    case TE_I32: return (float)((const int32_t *)x)[i];
    default: return ((const float *)x)[i];
    }
}

static void scan_chunk(const void *data, te_dtype dt, int64_t lo, int64_t hi, bool quick, part *p)
{
    if (dt == TE_F32 && !quick) { /* the calls the optimizer makes as it writes */
        const float *x = data;
        te_stats_part_begin(p, x, lo, hi);
        for (int64_t b = lo; b < hi; b += STRIP)
            te_stats_part_add(p, x, b, hi - b < STRIP ? hi - b : STRIP);
        return;
    }
    *p = (part){ .n = hi - lo, .first_bad = -1, .min = INFINITY, .max = -INFINITY };
    if (dt == TE_F32) {
        kernel_quick(p, (const float *)data + lo, hi - lo, lo);
        return;
    }
    void (*kernel)(part *, const float *, int64_t, int64_t) = quick ? kernel_quick : full_kernel();
    float buf[BLOCK];
    for (int64_t b = lo; b < hi; b += BLOCK) {
        int64_t m = hi - b < BLOCK ? hi - b : BLOCK;
        for (int64_t i = 0; i < m; i++)
            buf[i] = host_get(data, dt, b + i);
        if (b == lo && !quick)
            p->shift = shift_of(buf, m);
        kernel(p, buf, m, b);
    }
}

/* Merges the chunks in order; the moments combine by Chan's formula. */
void te_stats_merge(const te_stats_part *parts, int nch, int64_t n, te_stats *s)
{
    *s = (te_stats){ .n = n, .first_bad = -1 };
    int64_t fin = 0;
    double mean = 0, m2 = 0, sq = 0, abs_sum = 0;
    double mn = INFINITY, mx = -INFINITY;
    for (int c = 0; c < nch; c++) {
        const part *p = &parts[c];
        s->nan += p->nan;
        s->inf += p->n - p->fin - p->nan;
        s->zero += p->zero;
        s->fp16_overflow += p->ovf;
        if (s->first_bad < 0)
            s->first_bad = p->first_bad;
        mn = p->min < mn ? p->min : mn;
        mx = p->max > mx ? p->max : mx;
        s->abs_max = p->abs_max > s->abs_max ? p->abs_max : s->abs_max;
        sq += p->sq;
        abs_sum += p->abs_sum;
        if (p->fin == 0)
            continue;
        double nb = (double)p->fin, mb = p->shift + p->s1 / nb;
        double m2b = fmax(p->s2 - p->s1 * p->s1 / nb, 0.0);
        double na = (double)fin, tot = na + nb, delta = mb - mean;
        mean += delta * nb / tot;
        m2 += m2b + delta * delta * na * nb / tot;
        fin += p->fin;
    }
    s->l2norm = sqrt(sq);
    if (fin == 0)
        return;
    s->min = mn;
    s->max = mx;
    s->mean = mean;
    s->std = sqrt(m2 / (double)fin);
    s->abs_mean = abs_sum / (double)fin;
}

int te_stats_chunks(int64_t n, int64_t *size)
{
    int64_t sz = (n + TE_STATS_MAX_CHUNKS - 1) / TE_STATS_MAX_CHUNKS;
    *size = sz < CHUNK_MIN ? CHUNK_MIN : (sz + BLOCK - 1) / BLOCK * BLOCK;
    return (int)((n + *size - 1) / *size);
}

void te_stats_part_begin(te_stats_part *p, const float *x, int64_t lo, int64_t hi)
{
    *p = (part){ .n = hi - lo, .first_bad = -1, .min = INFINITY, .max = -INFINITY,
                 .shift = shift_of(x + lo, hi - lo) };
}

void te_stats_part_add(te_stats_part *p, const float *x, int64_t first, int64_t count)
{
    full_kernel()(p, x + first, count, first);
}

void te_stats_scan_host(const void *x, te_dtype dt, int64_t n, bool quick, te_stats *s)
{
    int64_t size;
    int nch = te_stats_chunks(n, &size);
    part parts[TE_STATS_MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (int c = 0; c < nch; c++) {
        int64_t lo = (int64_t)c * size, hi = lo + size < n ? lo + size : n;
        scan_chunk(x, dt, lo, hi, quick, &parts[c]);
    }
    te_stats_merge(parts, nch, n, s);
    if (quick) /* the fields the quick kernel does not compute stay 0 */
        *s = (te_stats){ .n = s->n, .nan = s->nan, .inf = s->inf, .first_bad = s->first_bad,
                          .abs_max = s->abs_max, .l2norm = s->l2norm };
}

bool te_nonfinite_host(const float *x, int64_t n)
{
    float probe = 0.0f; /* NaN exactly when some x is NaN or Inf */
#pragma omp parallel for simd reduction(+ : probe) if (n >= PARALLEL_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        probe += x[i] * 0.0f;
    return probe != probe;
}

/* t's statistics from its backend: one reduction where t lives. */
static void scan(const te_tensor *t, bool quick, te_stats *s)
{
    const te_backend *be = te_backend_for(t);
    if (!be->stats) {
        *s = (te_stats){ .first_bad = -1 };
        te_set_error(TE_ERR_DEVICE, "te_stats_compute: %s: the %s backend has no stats", t->name, be->name);
        return;
    }
    be->stats(t, s, quick);
}

bool te_has_nonfinite(const te_tensor *t)
{
    const te_backend *be = te_backend_for(t);
    if (be->has_nonfinite)
        return be->has_nonfinite(t);
    te_stats s;
    scan(t, true, &s);
    return s.nan || s.inf;
}

void te_stats_compute(const te_tensor *t, te_stats *s) { scan(t, false, s); }

int te_stats_wanted;

void te_stats_want(bool on) { te_stats_wanted += on ? 1 : -1; }

void te_op_output_stats(const te_op_record *r, int i, te_stats *s)
{
    if (r->out_stats && r->out_stats[i].n == r->outputs[i]->numel)
        *s = r->out_stats[i];
    else
        te_stats_compute(r->outputs[i], s);
}

void te_stats_quick(const te_tensor *t, te_stats *s) { scan(t, true, s); }

char *te_index_str(const te_tensor *t, int64_t flat, char *buf, size_t n)
{
    int64_t idx[TE_MAX_DIMS];
    for (int d = t->ndim - 1; d > 0; d--) {
        int64_t dim = t->shape[d] > 0 ? t->shape[d] : 1;
        idx[d] = flat % dim;
        flat /= dim;
    }
    if (t->ndim > 0)
        idx[0] = flat; /* what remains, so an index past the end reads as such */
    return te_shape_str(t->ndim, idx, buf, n);
}
