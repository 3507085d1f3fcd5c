/*
 * cpu_lowp_ew.c — ReLU on f16/bf16 tensors without f32 copies of them, and
 * what the other portable native low-precision kernels (BatchNorm in
 * cpu_norm.c, MaxPool2D in cpu_conv.c) share.
 *
 * These kernels give the shadow path's bits (tape.c run_shadowed: the
 * inputs widened exactly, the f32 kernel, every result rounded once to
 * nearest even) and its rounding records, but widen and round block by
 * block in cache instead of whole tensors. They need no oneDNN and run on
 * any CPU, f16 and bf16 alike.
 */
#include "cpu_kernels.h"

#include <string.h>

bool cpu_is_half(const te_tensor *t) { return t && (t->dtype == TE_F16 || t->dtype == TE_BF16); }

void cpu_round_stats_init(te_round_stats *st, te_dtype dt)
{
    memset(st, 0, sizeof *st);
    st->dtype = dt;
}

void cpu_round_stats_merge(te_round_stats *into, const te_round_stats *part)
{
    into->overflow += part->overflow;
    into->underflow += part->underflow;
    into->nonzero += part->nonzero;
    into->absmax = part->absmax > into->absmax ? part->absmax : into->absmax;
}

float *cpu_half_scratch(bool half, int64_t per_thread, int threads, size_t *bytes)
{
    *bytes = half ? (size_t)per_thread * (size_t)threads * sizeof(float) : 0;
    return half ? te_mem_alloc(*bytes) : NULL;
}

/* ---- ReLU ------------------------------------------------------------------
 * On the half bits where the f32 formulas (cpu_elementwise.c UNARY(relu))
 * are exact, so that rounding their f32 result back gives the input bits:
 * forward x < 0 ? 0 : x turns the negatives (not -0, not NaN) into +0;
 * backward dy * (y <= 0 ? 0 : 1) is dy, or a zero with dy's sign. A NaN
 * comes out quieted, as the shadow path's rounding quiets it (the quiet
 * bit set, the payload kept: te_f32_to_f16/te_f32_to_bf16). Counted as
 * te_round_f32 counts the f32 result: no overflow or underflow, the finite
 * non-zero values and their largest magnitude. What is not exact takes the
 * f32 formula on a widened block, rounded: an Inf or NaN dy times 0 (the
 * NaN a CPU makes), and a gradient accumulated onto one already there. */

#define RELU_BLOCK 2048

typedef struct relu_counts {
    uint32_t nonzero, amax; /* amax: the bits of the largest finite |y| (they order as the values) */
    uint32_t special;       /* backward: a lane that needs the f32 formula */
} relu_counts;

/* Branch-free (masks), so that the loops vectorise; inlined into an AVX2
 * copy and a baseline one below. */
static inline __attribute__((always_inline)) void relu_fwd_bits(const uint16_t *restrict X, uint16_t *restrict Y,
                                                                int64_t m, uint32_t inf, uint32_t quiet,
                                                                relu_counts *c)
{
    uint32_t nz = 0, amax = 0;
#pragma omp simd reduction(+ : nz) reduction(max : amax)
    for (int64_t i = 0; i < m; i++) {
        const uint32_t h = X[i], a = h & 0x7fffu;
        const uint32_t nan = a > inf, keep = 0u - (1u ^ ((h >> 15) & (a != 0) & (nan ^ 1u)));
        const uint32_t ay = a & keep, fin_nz = (ay != 0) & (ay < inf), am = ay & (0u - fin_nz);
        Y[i] = (uint16_t)((h | (quiet & (0u - nan))) & keep);
        nz += fin_nz;
        amax = am > amax ? am : amax;
    }
    *c = (relu_counts){ nz, amax, 0 };
}

static inline __attribute__((always_inline)) void relu_bwd_bits(const uint16_t *restrict S, const uint16_t *restrict G,
                                                                uint16_t *restrict D, int64_t m, uint32_t inf,
                                                                uint32_t quiet, relu_counts *c)
{
    uint32_t nz = 0, amax = 0, special = 0;
#pragma omp simd reduction(+ : nz) reduction(max : amax) reduction(| : special)
    for (int64_t i = 0; i < m; i++) {
        const uint32_t y = S[i], ya = y & 0x7fffu, g = G[i], ga = g & 0x7fffu;
        /* y <= 0: a zero, or negative and not NaN */
        const uint32_t zero = (ya == 0) | ((y >> 15) & (ya <= inf)), pass = 0u - (zero ^ 1u);
        const uint32_t gnan = ga > inf, r = ((g | (quiet & (0u - gnan))) & pass) | (g & 0x8000u & ~pass);
        const uint32_t ra = ga & pass, fin_nz = (ra != 0) & (ra < inf), am = ra & (0u - fin_nz);
        D[i] = (uint16_t)r;
        nz += fin_nz;
        amax = am > amax ? am : amax;
        special |= zero & (ga >= inf);
    }
    *c = (relu_counts){ nz, amax, special };
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void relu_fwd_avx2(const uint16_t *X, uint16_t *Y, int64_t m, uint32_t inf,
                                                          uint32_t quiet, relu_counts *c)
{
    relu_fwd_bits(X, Y, m, inf, quiet, c);
}

__attribute__((target("avx2"))) static void relu_bwd_avx2(const uint16_t *S, const uint16_t *G, uint16_t *D, int64_t m,
                                                          uint32_t inf, uint32_t quiet, relu_counts *c)
{
    relu_bwd_bits(S, G, D, m, inf, quiet, c);
}

static bool relu_avx2(void) { return !te_lowp_portable && __builtin_cpu_supports("avx2"); }
#else
#define relu_fwd_avx2 relu_fwd_bits
#define relu_bwd_avx2 relu_bwd_bits
static bool relu_avx2(void) { return false; }
#endif

static void relu_fwd_base(const uint16_t *X, uint16_t *Y, int64_t m, uint32_t inf, uint32_t quiet, relu_counts *c)
{
    relu_fwd_bits(X, Y, m, inf, quiet, c);
}

static void relu_bwd_base(const uint16_t *S, const uint16_t *G, uint16_t *D, int64_t m, uint32_t inf, uint32_t quiet,
                          relu_counts *c)
{
    relu_bwd_bits(S, G, D, m, inf, quiet, c);
}

/* The f32 formula on a widened block of m elements, rounded into D. */
static void relu_bwd_f32(const uint16_t *S, const uint16_t *G, uint16_t *D, int64_t m, bool acc, te_dtype dt,
                         te_round_stats *st)
{
    float s[RELU_BLOCK], g[RELU_BLOCK], d[RELU_BLOCK];
    te_half_to_f32(S, s, dt, m);
    te_half_to_f32(G, g, dt, m);
    if (acc) {
        te_half_to_f32(D, d, dt, m);
#pragma omp simd
        for (int64_t i = 0; i < m; i++)
            d[i] += g[i] * (s[i] <= 0.0f ? 0.0f : 1.0f);
    } else {
#pragma omp simd
        for (int64_t i = 0; i < m; i++)
            d[i] = g[i] * (s[i] <= 0.0f ? 0.0f : 1.0f);
    }
    te_round_block(d, D, dt, m, st);
}

static bool relu_takes(const te_node *n)
{
    return cpu_is_half(n->in[0]) && n->out[0]->dtype == n->in[0]->dtype;
}

static void relu_record(te_node *n, te_dtype dt, int64_t over, int64_t under, int64_t nonzero, float amax)
{
    n->round[0] = (te_round_stats){ .dtype = dt, .overflow = over, .underflow = under, .nonzero = nonzero, .absmax = amax };
    n->rounded = true;
}

static float half_value(uint32_t bits, te_dtype dt)
{
    const uint16_t h = (uint16_t)bits;
    float f;
    te_half_to_f32(&h, &f, dt, 1);
    return f;
}

te_status cpu_relu_forward_lowp(te_node *n)
{
    if (!relu_takes(n))
        return TE_LOWP_DECLINED;
    const te_dtype dt = n->out[0]->dtype;
    const uint32_t inf = dt == TE_F16 ? 0x7c00u : 0x7f80u, quiet = dt == TE_F16 ? 0x0200u : 0x0040u;
    const uint16_t *X = n->in[0]->data;
    uint16_t *Y = n->out[0]->data;
    const int64_t N = n->out[0]->numel, blocks = (N + RELU_BLOCK - 1) / RELU_BLOCK;
    const bool avx2 = relu_avx2();
    int64_t nonzero = 0;
    uint32_t amax = 0;
#pragma omp parallel for if (N > TE_PAR_MIN) reduction(+ : nonzero) reduction(max : amax)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t i0 = b * RELU_BLOCK, m = N - i0 < RELU_BLOCK ? N - i0 : RELU_BLOCK;
        relu_counts c;
        (avx2 ? relu_fwd_avx2 : relu_fwd_base)(X + i0, Y + i0, m, inf, quiet, &c);
        nonzero += c.nonzero;
        amax = c.amax > amax ? c.amax : amax;
    }
    relu_record(n, dt, 0, 0, nonzero, half_value(amax, dt));
    return TE_OK;
}

/* dx = dy * (y <= 0 ? 0 : 1), added in f32 to a gradient already there. */
te_status cpu_relu_backward_lowp(te_node *n)
{
    te_tensor *x = n->in[0], *y = n->out[0];
    if (!relu_takes(n) || !y->grad || y->grad->dtype != y->dtype)
        return TE_LOWP_DECLINED;
    if (!te_needs_grad(x))
        return TE_OK;
    const te_dtype dt = x->dtype;
    const uint32_t inf = dt == TE_F16 ? 0x7c00u : 0x7f80u, quiet = dt == TE_F16 ? 0x0200u : 0x0040u;
    int acc;
    uint16_t *D = (uint16_t *)te_grad_buf(x, &acc);
    const uint16_t *S = y->data, *G = y->grad->data;
    const int64_t N = y->numel, blocks = (N + RELU_BLOCK - 1) / RELU_BLOCK;
    const bool avx2 = relu_avx2();
    int64_t over = 0, under = 0, nonzero = 0;
    float amax = 0.0f;
#pragma omp parallel for if (N > TE_PAR_MIN) reduction(+ : over, under, nonzero) reduction(max : amax)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t i0 = b * RELU_BLOCK, m = N - i0 < RELU_BLOCK ? N - i0 : RELU_BLOCK;
        relu_counts c = { 0, 0, 1 };
        if (!acc)
            (avx2 ? relu_bwd_avx2 : relu_bwd_base)(S + i0, G + i0, D + i0, m, inf, quiet, &c);
        if (c.special) { /* the f32 formula, over what the bits wrote */
            te_round_stats part;
            cpu_round_stats_init(&part, dt);
            relu_bwd_f32(S + i0, G + i0, D + i0, m, acc, dt, &part);
            over += part.overflow;
            under += part.underflow;
            nonzero += part.nonzero;
            amax = part.absmax > amax ? part.absmax : amax;
        } else {
            const float a = half_value(c.amax, dt);
            nonzero += c.nonzero;
            amax = a > amax ? a : amax;
        }
    }
    relu_record(n, dt, over, under, nonzero, amax);
    return TE_OK;
}
