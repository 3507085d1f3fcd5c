/* diff_metrics.c — the metrics of tdbg-diff: running sums over element
 * pairs taken in double precision (f16, bf16 and i32 widened exactly), the
 * default tolerances per dtype and the final metrics. A is the reference:
 * relative errors and allclose divide by |a|. */
#include "diff.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LANE 256   /* elements widened at a time */

static bool low(te_dtype t) { return t == TE_F16 || t == TE_BF16; }

diff_tol diff_tol_for(te_dtype a, te_dtype b, diff_tol user)
{
    /* PyTorch's torch.testing.assert_close defaults for the lower precision. */
    diff_tol t = { 1e-5, 1.3e-6, 0, TE_F32 };
    if (a == TE_BF16 || b == TE_BF16)
        t = (diff_tol){ 1e-5, 1.6e-2, 0, TE_BF16 };
    else if (a == TE_F16 || b == TE_F16)
        t = (diff_tol){ 1e-5, 1e-3, 0, TE_F16 };
    else if (a == TE_I32 && b == TE_I32)
        t = (diff_tol){ 0, 0, 0, TE_F32 };
    /* Across precisions: ULPs of the lower one instead of its rtol
     * (--ulp 0 brings the rtol back). */
    if (low(a) != low(b) && (a == TE_F32 || b == TE_F32) && user.ulp != 0)
        t.rtol = 0, t.ulp = user.ulp > 0 ? user.ulp : DIFF_ULP_K;
    if (user.atol >= 0)
        t.atol = user.atol;
    if (user.rtol >= 0)
        t.rtol = user.rtol;
    return t;
}

/* Mantissa bits of dt and its least spacing (f16's subnormals). */
static void ulp_params(te_dtype dt, double *scale, double *least)
{
    *scale = dt == TE_F16 ? 0x1p-10 : dt == TE_BF16 ? 0x1p-7 : 0;
    *least = dt == TE_F16 ? 0x1p-24 : dt == TE_BF16 ? 0x1p-133 : 0;
}

double diff_ulp_low(te_dtype dt, double x)
{
    double scale, least;
    ulp_params(dt, &scale, &least);
    int e;
    x = fabs(x);
    if (scale == 0 || !isfinite(x))
        return 0;
    frexp(x, &e);   /* x in [2^(e-1), 2^e) */
    const double u = x > 0 ? ldexp(scale, e - 1) : 0;
    return u > least ? u : least;
}

double diff_tol_slack(diff_tol t, double ax)
{
    return t.rtol * ax + (t.ulp > 0 ? t.ulp * diff_ulp_low(t.ulp_dt, ax) : 0);
}

void diff_acc_init(diff_acc *acc, bool same_dtype)
{
    memset(acc, 0, sizeof *acc);
    acc->max_abs = acc->max_rel = -1;
    acc->max_abs_at = acc->max_rel_at = acc->first_fail = -1;
    acc->max_ulp = same_dtype ? 0 : -1;
}

/* n elements from index k of src (dtype t) as doubles; with key, also as
 * integers one apart between neighbouring values of the dtype (sign and
 * magnitude folded so that -0 and +0 meet), held exactly in doubles, for
 * ULP distances. Values are loaded with memcpy: a chunk mapped from a step
 * file starts at any byte, so its floats need not be aligned. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void widen(const void *src, te_dtype t, int64_t k, int n, double *dst, double *key)
{
    const unsigned char *p = (const unsigned char *)src + (size_t)k * te_dtype_size(t);
    switch (t) {
    case TE_F32:
#pragma omp simd
        for (int i = 0; i < n; i++) {
            float f;
            memcpy(&f, p + 4 * (size_t)i, sizeof f);
            dst[i] = f;
        }
        if (key)
#pragma omp simd
            for (int i = 0; i < n; i++) {
                int32_t u;
                memcpy(&u, p + 4 * (size_t)i, sizeof u);
                const int32_t sign = u >> 31, mag = u & 0x7fffffff;
                key[i] = (mag ^ sign) - sign;   /* -mag for a set sign bit */
            }
        break;
    case TE_F16:
    case TE_BF16:
        for (int i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * (size_t)i, sizeof h);
            dst[i] = t == TE_F16 ? te_f16_to_f32(h) : te_bf16_to_f32(h);
            if (key) {
                const int32_t mag = h & 0x7fff;
                key[i] = h >> 15 ? -mag : mag;
            }
        }
        break;
    case TE_I32:
        for (int i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, p + 4 * (size_t)i, sizeof v);
            dst[i] = v;
            if (key)
                key[i] = v;
        }
        break;
    default:
        for (int i = 0; i < n; i++)
            dst[i] = NAN;
        break;
    }
}

/* A pair with a NaN or an infinity: counted; equal when both are NaN or
 * both the same infinity, otherwise outside every tolerance (true). */
static bool nonfinite(diff_acc *s, double x, double y, int64_t at)
{
    s->nan_a += isnan(x);
    s->nan_b += isnan(y);
    s->inf_a += isinf(x);
    s->inf_b += isinf(y);
    if ((isnan(x) && isnan(y)) || (isinf(x) && x == y))
        return false;
    s->n_nonfinite++;
    s->n_fail++;
    s->n_rel_low++;
    s->n_rel_high++;
    if (s->first_fail < 0)
        s->first_fail = at;
    return true;
}

/* The relative error of a difference d from a reference of magnitude ax. */
static inline double rel_err(double d, double ax)
{
    return d / (ax > DIFF_REL_EPS ? ax : DIFF_REL_EPS);
}

/* A block, element by element: any values, NaN and infinities included. */
static void add_exact(diff_acc *s, const double *va, const double *vb, const double *ka,
                      const double *kb, int n, int64_t base, diff_tol tol)
{
    for (int i = 0; i < n; i++) {
        const double x = va[i], y = vb[i];
        s->n++;
        if (!isfinite(x) || !isfinite(y)) {
            if (nonfinite(s, x, y, base + i))
                s->min_atol = s->min_rtol = INFINITY;
            continue;
        }
        const double d = fabs(y - x), ax = fabs(x), rel = rel_err(d, ax);
        s->n_finite++;
        s->sum_abs += d;
        s->sum_sq += d * d;
        s->dot += x * y;
        s->sq_a += x * x;
        s->sq_b += y * y;
        if (d > s->max_abs) {
            s->max_abs = d;
            s->max_abs_at = base + i;
        }
        if (rel > s->max_rel) {
            s->max_rel = rel;
            s->max_rel_at = base + i;
        }
        const double den = ax > DIFF_REL_EPS ? ax : DIFF_REL_EPS;
        s->n_rel_low += d > DIFF_REL_LOW * den;   /* rel > DIFF_REL_LOW, as the lanes count */
        s->n_rel_high += d > DIFF_REL_HIGH * den;
        const double ulps = tol.ulp * diff_ulp_low(tol.ulp_dt, ax);
        if (d > tol.atol + tol.rtol * ax + ulps) {
            s->n_fail++;
            if (s->first_fail < 0)
                s->first_fail = base + i;
        }
        s->min_atol = fmax(s->min_atol, d - tol.rtol * ax - ulps);
        if (d > tol.atol + ulps)
            s->min_rtol = fmax(s->min_rtol, ax > 0 ? (d - tol.atol - ulps) / ax : INFINITY);
        if (ka && fabs(ka[i] - kb[i]) > (double)s->max_ulp)
            s->max_ulp = (int64_t)fabs(ka[i] - kb[i]);
    }
}

/* ---- four lanes at a time ----------------------------------------------------------------
 * GCC and Clang vector extensions: four doubles a vector (AVX2 in the avx2
 * clone, two SSE2 halves in the default one). The lanes are the same either
 * way, and so are the sums. Macros, not functions, so that no vector
 * crosses a call (whose ABI would depend on the clone). */
typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

#define SPLAT(x) ((v4d){ (x), (x), (x), (x) })
#define PICK(m, a, b) ((v4d)(((v4l)(a) & (m)) | ((v4l)(b) & ~(m))))
#define VABS(x) ((v4d)((v4l)(x) & ABS_MASK))
#define VMAX(a, b) PICK((v4l)((a) > (b)), (a), (b))
#define ABS_MASK ((v4l){ INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX })
#define EXP_BITS 0x7ff0000000000000LL
#define EXP_MASK ((v4l){ EXP_BITS, EXP_BITS, EXP_BITS, EXP_BITS })

/* The lanes' running values over a block. The largest relative error and
 * the least passing rtol are ratios, kept as numerator and denominator and
 * compared by cross-multiplying (no division in the loop; a zero
 * denominator is an infinite ratio). A NaN or an infinity shows as a
 * non-finite sum of squares. */
typedef struct lanes {
    v4d sum_abs, sum_sq, dot, sq_a, sq_b, mx, min_atol, ulp;
    v4d rel_num, rel_den, rtol_num, rtol_den;
    v4l low, high, fail;
} lanes;

/* One step of four pairs x, y (v4d) with ULP keys kx, ky (v4d). */
#define LANES_STEP(L, x, y, kx, ky)                                                          \
    do {                                                                                     \
        const v4d ax_ = VABS(x), d_ = VABS((y) - (x));                                       \
        (L).sum_abs += d_;                                                                   \
        (L).sum_sq += d_ * d_;                                                               \
        (L).dot += (x) * (y);                                                                \
        (L).sq_a += (x) * (x);                                                               \
        (L).sq_b += (y) * (y);                                                               \
        (L).mx = VMAX(d_, (L).mx);                                                           \
        const v4d den_ = PICK((v4l)(ax_ > eps), ax_, eps);                                   \
        const v4l more_ = (v4l)(d_ * (L).rel_den > (L).rel_num * den_);                       \
        (L).rel_num = PICK(more_, d_, (L).rel_num);                                          \
        (L).rel_den = PICK(more_, den_, (L).rel_den);                                        \
        (L).low -= (v4l)(d_ > lo * den_);                                                    \
        (L).high -= (v4l)(d_ > hi * den_);                                                   \
        /* k ulps of the lower precision at |x|: its exponent's power of two, scaled */    \
        const v4d u_ = uk * VMAX((v4d)((v4l)ax_ & EXP_MASK) * us, ul);                       \
        (L).fail -= (v4l)(d_ > atol + rtol * ax_ + u_);                                      \
        (L).min_atol = VMAX(d_ - rtol * ax_ - u_, (L).min_atol);                             \
        const v4l over_ = (v4l)(d_ > atol + u_);                                             \
        const v4d num_ = PICK(over_, d_ - atol - u_, zero), dn_ = PICK(over_, ax_, one);     \
        const v4l wider_ = (v4l)(num_ * (L).rtol_den > (L).rtol_num * dn_);                   \
        (L).rtol_num = PICK(wider_, num_, (L).rtol_num);                                     \
        (L).rtol_den = PICK(wider_, dn_, (L).rtol_den);                                      \
        (L).ulp = VMAX(VABS((kx) - (ky)), (L).ulp);                                          \
    } while (0)

#define LANES_CONSTANTS(tol)                                                                 \
    const v4d atol = SPLAT((tol).atol), rtol = SPLAT((tol).rtol), zero = SPLAT(0),           \
              one = SPLAT(1), eps = SPLAT(DIFF_REL_EPS), lo = SPLAT(DIFF_REL_LOW),           \
              hi = SPLAT(DIFF_REL_HIGH);                                                     \
    double us_, ul_;                                                                         \
    ulp_params((tol).ulp_dt, &us_, &ul_);                                                    \
    const v4d uk = SPLAT((tol).ulp), us = SPLAT(us_), ul = SPLAT(ul_);                       \
    lanes L = { .sum_abs = zero, .sum_sq = zero, .dot = zero, .sq_a = zero, .sq_b = zero,    \
                .mx = zero, .min_atol = zero, .ulp = zero, .rel_num = zero, .rel_den = one,  \
                .rtol_num = zero, .rtol_den = one }

/* n pairs (a multiple of 4) of widened values and their keys. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void lanes_f64(lanes *out, const double *va, const double *vb, const double *ka,
                      const double *kb, int n, diff_tol tol)
{
    LANES_CONSTANTS(tol);
    for (int i = 0; i < n; i += 4) {
        v4d x, y, kx, ky;
        memcpy(&x, va + i, sizeof x);
        memcpy(&y, vb + i, sizeof y);
        memcpy(&kx, ka + i, sizeof kx);
        memcpy(&ky, kb + i, sizeof ky);
        LANES_STEP(L, x, y, kx, ky);
    }
    *out = L;
}

/* n pairs (a multiple of 4) of f32 values, widened in the lanes, their ULP
 * keys from their bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void lanes_f32(lanes *out, const unsigned char *fa, const unsigned char *fb, int n,
                      diff_tol tol)
{
    LANES_CONSTANTS(tol);
    const v4i m = { INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX };
    for (int i = 0; i < n; i += 4) {
        v4f xf, yf;
        memcpy(&xf, fa + 4 * (size_t)i, sizeof xf);
        memcpy(&yf, fb + 4 * (size_t)i, sizeof yf);
        const v4d x = __builtin_convertvector(xf, v4d), y = __builtin_convertvector(yf, v4d);
        const v4i ux = (v4i)xf, uy = (v4i)yf, sx = ux >> 31, sy = uy >> 31;
        /* sign and magnitude folded: -mag for a set sign bit */
        const v4d kx = __builtin_convertvector(((ux & m) ^ sx) - sx, v4d);
        const v4d ky = __builtin_convertvector(((uy & m) ^ sy) - sy, v4d);
        LANES_STEP(L, x, y, kx, ky);
    }
    *out = L;
}

static double max2(double a, double b) { return a > b ? a : b; }

/* n f32 pairs (a multiple of 4) equal bit for bit: only their squares
 * count (the lanes of lanes_f32 would give the same sums). False when one is
 * a NaN or an infinity. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static bool same_f32(diff_acc *s, const unsigned char *f, int n, int64_t base)
{
    v4d sq = SPLAT(0);
    for (int i = 0; i < n; i += 4) {
        v4f xf;
        memcpy(&xf, f + 4 * (size_t)i, sizeof xf);
        const v4d x = __builtin_convertvector(xf, v4d);
        sq += x * x;
    }
    for (int l = 0; l < 4; l++)
        if (!isfinite(sq[l]))
            return false;
    for (int l = 0; l < 4; l++) {
        s->dot += sq[l];
        s->sq_a += sq[l];
        s->sq_b += sq[l];
    }
    if (s->max_abs < 0 && n > 0) {   /* the first finite pair: errors 0 there */
        s->max_abs = s->max_rel = 0;
        s->max_abs_at = s->max_rel_at = base;
    }
    s->n += n;
    s->n_finite += n;
    return true;
}

/* Adds a block's lanes to s; false, adding nothing, when the block holds a
 * NaN or an infinity. va, vb: the block's values (n_real of them, widened)
 * for finding where the maxima are, only when they grew. */
static bool lanes_add(diff_acc *s, const lanes *L, const double *va, const double *vb, int n_real,
                      int64_t base, diff_tol tol, bool ulp)
{
    for (int l = 0; l < 4; l++)
        if (!isfinite(L->sq_a[l]) || !isfinite(L->sq_b[l]))
            return false;
    double m_abs = 0, m_rel = 0, m_atol = 0, m_rtol = 0, m_ulp = 0;
    int64_t fail = 0;
    for (int l = 0; l < 4; l++) {
        s->sum_abs += L->sum_abs[l];
        s->sum_sq += L->sum_sq[l];
        s->dot += L->dot[l];
        s->sq_a += L->sq_a[l];
        s->sq_b += L->sq_b[l];
        s->n_rel_low += L->low[l];
        s->n_rel_high += L->high[l];
        fail += L->fail[l];
        m_abs = max2(m_abs, L->mx[l]);
        m_rel = max2(m_rel, L->rel_num[l] / L->rel_den[l]);
        m_atol = max2(m_atol, L->min_atol[l]);
        m_rtol = max2(m_rtol, L->rtol_den[l] > 0 ? L->rtol_num[l] / L->rtol_den[l] : INFINITY);
        m_ulp = max2(m_ulp, L->ulp[l]);
    }
    if (m_abs > s->max_abs) {
        s->max_abs = m_abs;
        s->max_abs_at = base;
        for (int i = 0; i < n_real; i++)
            if (fabs(vb[i] - va[i]) == m_abs) {
                s->max_abs_at = base + i;
                break;
            }
    }
    if (m_rel > s->max_rel) {
        s->max_rel = m_rel;
        s->max_rel_at = base;
        for (int i = 0; i < n_real; i++)
            if (rel_err(fabs(vb[i] - va[i]), fabs(va[i])) == m_rel) {
                s->max_rel_at = base + i;
                break;
            }
    }
    for (int i = 0; fail > 0 && s->first_fail < 0 && i < n_real; i++)
        if (fabs(vb[i] - va[i]) > tol.atol + diff_tol_slack(tol, fabs(va[i])))
            s->first_fail = base + i;
    s->n_fail += fail;
    s->n += n_real;
    s->n_finite += n_real;
    s->min_atol = max2(s->min_atol, m_atol);
    s->min_rtol = max2(s->min_rtol, m_rtol);
    if (ulp && m_ulp > (double)s->max_ulp)
        s->max_ulp = (int64_t)m_ulp;
    return true;
}

/* Whether a block's maxima or first failure need the values themselves
 * (the same tests as lanes_add's). */
static bool lanes_need_values(const diff_acc *s, const lanes *L)
{
    for (int l = 0; l < 4; l++)
        if (L->mx[l] > s->max_abs || L->rel_num[l] / L->rel_den[l] > s->max_rel ||
            (L->fail[l] && s->first_fail < 0))
            return true;
    return false;
}

void diff_acc_add(diff_acc *acc, const void *a, te_dtype ta, const void *b, te_dtype tb,
                  int64_t first, int64_t count, diff_tol tol)
{
    _Alignas(32) double va[LANE], vb[LANE], ka[LANE], kb[LANE];
    const bool ulp = acc->max_ulp >= 0, f32 = ta == TE_F32 && tb == TE_F32;
    if (!ulp) {   /* the lanes take keys all the same: zeros */
        memset(ka, 0, sizeof ka);
        memset(kb, 0, sizeof kb);
    }
    for (int64_t at = 0; at < count; at += LANE) {
        const int n = (int)(count - at < LANE ? count - at : LANE), n4 = n & ~3;
        const unsigned char *fa = (const unsigned char *)a + 4 * at;   /* when f32 */
        const unsigned char *fb = (const unsigned char *)b + 4 * at;
        if (f32 && memcmp(fa, fb, 4 * (size_t)n4) == 0 && same_f32(acc, fa, n4, first + at)) {
            /* equal bit for bit: done */
        } else {
            lanes L;
            if (f32) {
                lanes_f32(&L, fa, fb, n4, tol);
                if (lanes_need_values(acc, &L)) {
                    widen(a, ta, at, n4, va, NULL);
                    widen(b, tb, at, n4, vb, NULL);
                }
            } else {
                widen(a, ta, at, n4, va, ulp ? ka : NULL);
                widen(b, tb, at, n4, vb, ulp ? kb : NULL);
                lanes_f64(&L, va, vb, ka, kb, n4, tol);
            }
            if (!lanes_add(acc, &L, va, vb, n4, first + at, tol, ulp)) {   /* NaN or Inf */
                widen(a, ta, at, n4, va, ulp ? ka : NULL);
                widen(b, tb, at, n4, vb, ulp ? kb : NULL);
                add_exact(acc, va, vb, ulp ? ka : NULL, ulp ? kb : NULL, n4, first + at, tol);
            }
        }
        if (n > n4) {   /* the last up to 3 pairs */
            widen(a, ta, at + n4, n - n4, va, ulp ? ka : NULL);
            widen(b, tb, at + n4, n - n4, vb, ulp ? kb : NULL);
            add_exact(acc, va, vb, ulp ? ka : NULL, ulp ? kb : NULL, n - n4, first + at + n4, tol);
        }
    }
}

void diff_acc_merge(diff_acc *into, const diff_acc *after)
{
    into->n += after->n;
    into->n_finite += after->n_finite;
    into->sum_abs += after->sum_abs;
    into->sum_sq += after->sum_sq;
    into->dot += after->dot;
    into->sq_a += after->sq_a;
    into->sq_b += after->sq_b;
    if (after->max_abs > into->max_abs) {   /* ties keep the earlier index */
        into->max_abs = after->max_abs;
        into->max_abs_at = after->max_abs_at;
    }
    if (after->max_rel > into->max_rel) {
        into->max_rel = after->max_rel;
        into->max_rel_at = after->max_rel_at;
    }
    into->n_fail += after->n_fail;
    into->n_rel_low += after->n_rel_low;
    into->n_rel_high += after->n_rel_high;
    into->nan_a += after->nan_a;
    into->nan_b += after->nan_b;
    into->inf_a += after->inf_a;
    into->inf_b += after->inf_b;
    into->n_nonfinite += after->n_nonfinite;
    if (into->first_fail < 0)
        into->first_fail = after->first_fail;
    if (after->min_atol > into->min_atol)
        into->min_atol = after->min_atol;
    if (after->min_rtol > into->min_rtol)
        into->min_rtol = after->min_rtol;
    if (into->max_ulp >= 0 && after->max_ulp > into->max_ulp)
        into->max_ulp = after->max_ulp;
}

void diff_metrics_finish(const diff_acc *acc, diff_metrics *m)
{
    const double nf = (double)acc->n_finite, n = (double)acc->n;
    memset(m, 0, sizeof *m);
    m->max_abs = acc->max_abs < 0 ? 0 : acc->max_abs;
    m->max_abs_at = acc->max_abs_at;
    m->max_rel = acc->max_rel < 0 ? 0 : acc->max_rel;
    m->max_rel_at = acc->max_rel_at;
    m->mean_abs = nf > 0 ? acc->sum_abs / nf : 0;
    m->rmse = nf > 0 ? sqrt(acc->sum_sq / nf) : 0;
    if (acc->sq_a == 0 && acc->sq_b == 0)
        m->cosine = 1;   /* two zero tensors point the same way */
    else if (acc->sq_a == 0 || acc->sq_b == 0)
        m->cosine = 0;
    else
        m->cosine = fmax(-1, fmin(1, acc->dot / sqrt(acc->sq_a * acc->sq_b)));   /* 1 when equal */
    m->n_fail = acc->n_fail;
    m->frac_fail = n > 0 ? (double)acc->n_fail / n : 0;
    m->frac_rel_low = n > 0 ? (double)acc->n_rel_low / n : 0;
    m->frac_rel_high = n > 0 ? (double)acc->n_rel_high / n : 0;
    m->max_ulp = acc->max_ulp;
    m->nan_a = acc->nan_a;
    m->nan_b = acc->nan_b;
    m->inf_a = acc->inf_a;
    m->inf_b = acc->inf_b;
    m->n_nonfinite = acc->n_nonfinite;
    m->min_atol = acc->min_atol;
    m->min_rtol = acc->min_rtol;
}
