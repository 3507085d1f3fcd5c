/*
 * cpu_attention.c — fused causal self-attention on the CPU, forward and
 * backward, that never holds the T x T scores (FlashAttention-2's scheme).
 *
 * q, k, v are [B,H,T,D] (f32, contiguous), o [B,H,T,D] or, merged, the
 * [B,T,H,D] the heads' concatenation takes (a row stride of H*D: graph mode
 * writes the tensor the next linear reads, not a copy of it to transpose
 * after); lse is [B,H,T]. Row i of a
 * (b,h) slice attends to keys j <= i:
 *   s_ij = scale * q_i . k_j,  P_ij = exp(s_ij - lse_i),  A_ij = P_ij * Z_ij,
 *   o_i  = sum_j A_ij v_j,     lse_i = log sum_j exp(s_ij)
 * with Z_ij = 1/(1-p) where dropout keeps element (b,h,i,j) of the [B,H,T,T]
 * probabilities (the composed Dropout's draw at the same flat index), else 0.
 *
 * Work goes by square tiles of TB query rows against TB keys. Each tile's
 * products are small matrix products C (+)= X Y on copies padded with zeros
 * to whole tiles (T up to a multiple of TB, D up to a multiple of 16), done
 * by one register-blocked micro-kernel (4 rows x 16 columns of C held in
 * vector registers); the exponentials are cpu_math.h's vectorising exp.
 * Keys after a query, and padding, are masked when the tile's scores are
 * turned into probabilities (P = 0).
 *
 * Forward: each (b, h, query tile) runs over the key tiles up to its
 * diagonal with the online softmax (a running max m_i and sum l_i; the
 * partial o_i is rescaled when m_i grows): S = Q K^T, P = exp(scale S - m),
 * O += (P Z) V; then o_i /= l_i and only lse_i = m_i + log l_i is kept for
 * the backward.
 *
 * Backward: per (b, h), per key tile, over the query tiles from the diagonal
 * on, the probabilities are recomputed from lse:
 *   dA = dO V^T,  dP = dA Z,  dS = scale P (dP - D_i),  D_i = dO_i . o_i
 *   (= sum_j A_ij dP_ij, dropout included),
 *   dV += A^T dO,  dK += dS^T Q,  dQ += dS K.
 * A (b,h) slice is one thread's: dq gathers over key tiles with no atomics,
 * in a fixed order, and the result does not depend on the thread count.
 *
 * Under AMP q, k, v (and o, dout) are f16 or bf16: each tile is converted
 * to f32 as it is loaded, row by row through lowp.c's vector conversion
 * (te_half_to_f32: exact, so the bits do not depend on it), everything inside is f32 as above (the scores,
 * the probabilities, their sums: as flash attention keeps them on GPUs),
 * and o (in the backward dq, dk, dv, added to in f32 when they accumulate)
 * is rounded once to nearest even through te_round_block, its counts added
 * per thread and summed at the end (integers and a max: the same for any
 * thread count).
 *
 * The tile functions are cloned for AVX-512, AVX2 and the baseline
 * (CPU_CLONES); without FMA contraction (-std=c11) every clone gives the
 * same bits.
 */
#include "cpu_kernels.h"
#include "cpu_math.h"
#include "graph/graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TB 64 /* query rows and keys per tile */
#define MR 4  /* micro-kernel rows (mm names them) */
#define NR 16 /* micro-kernel columns: two 8-float vectors */

typedef float v8 __attribute__((vector_size(32)));
/* the same, at any float's address, aliasing floats: loads and stores */
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define ld8(p) (*(const v8u *)(p))
#define st8(p, x) (*(v8u *)(p) = (x))

/* Which part of a diagonal tile's product (query rows = keys) is needed:
 * all of it; C[i][j] for j <= i only (scores); or X[i][k] is 0 for k > i
 * (probabilities times V or K), or for k < i (their transpose times dO or
 * Q). Micro-blocks wholly outside are skipped (their C is left unwritten). */
enum { MM_ALL, MM_LOWER_C, MM_LOWER_X, MM_UPPER_X };

/* C[M][N] = X[M][K] Y[K][N] (+ C when acc), X read transposed (X^T[K][M])
 * when tx; M a multiple of MR, N of NR; row strides ldc, ldx, ldy. */
static inline __attribute__((always_inline)) void mm(float *restrict C, int ldc, const float *restrict X,
                                                     int ldx, bool tx, const float *restrict Y, int ldy, int M,
                                                     int N, int K, bool acc, int part)
{
    for (int i = 0; i < M; i += MR) {
        const int k0 = part == MM_UPPER_X ? i : 0, k1 = part == MM_LOWER_X ? i + MR : K;
        const int n1 = part == MM_LOWER_C ? (i + MR + NR - 1) / NR * NR : N;
        for (int j = 0; j < n1; j += NR) {
            /* named accumulators: an array of them would live in memory */
            float *c0 = C + (size_t)i * ldc + j, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
            v8 a00 = { 0 }, a01 = { 0 }, a10 = { 0 }, a11 = { 0 }, a20 = { 0 }, a21 = { 0 }, a30 = { 0 },
               a31 = { 0 };
            if (acc) {
                a00 = ld8(c0), a01 = ld8(c0 + 8), a10 = ld8(c1), a11 = ld8(c1 + 8);
                a20 = ld8(c2), a21 = ld8(c2 + 8), a30 = ld8(c3), a31 = ld8(c3 + 8);
            }
            for (int k = k0; k < k1; k++) {
                const v8 y0 = ld8(Y + (size_t)k * ldy + j), y1 = ld8(Y + (size_t)k * ldy + j + 8);
                const float *x = tx ? X + (size_t)k * ldx + i : X + (size_t)i * ldx + k;
                const size_t xs = tx ? 1 : (size_t)ldx; /* from row to row of X */
                const float x0 = x[0], x1 = x[xs], x2 = x[2 * xs], x3 = x[3 * xs];
                a00 += x0 * y0, a01 += x0 * y1, a10 += x1 * y0, a11 += x1 * y1;
                a20 += x2 * y0, a21 += x2 * y1, a30 += x3 * y0, a31 += x3 * y1;
            }
            st8(c0, a00), st8(c0 + 8, a01), st8(c1, a10), st8(c1 + 8, a11);
            st8(c2, a20), st8(c2 + 8, a21), st8(c3, a30), st8(c3 + 8, a31);
        }
    }
}

/* x advanced by i elements of dtype dt. */
static inline const void *off(const void *x, te_dtype dt, size_t i)
{
    return (const char *)x + i * (dt == TE_F32 ? sizeof(float) : sizeof(uint16_t));
}

/* dst[0..n) = src's elements from i, as f32 (f16 and bf16 widened by
 * lowp.c's vector loops). */
static inline void row_f32(const void *restrict src, te_dtype dt, size_t i, int n, float *restrict dst)
{
    if (dt == TE_F32)
        memcpy(dst, (const float *)src + i, (size_t)n * sizeof *dst);
    else
        te_half_to_f32((const uint16_t *)src + i, dst, dt, n);
}

#define CH 64 /* elements of a row widened at a time where no tile holds them */

/* The length of the chunk of a row of n elements that starts at c0. */
static inline int chunk(int n, int c0)
{
    return n - c0 < CH ? n - c0 : CH;
}

static void stats_add(te_round_stats *dst, const te_round_stats *src)
{
    dst->overflow += src->overflow;
    dst->underflow += src->underflow;
    dst->nonzero += src->nonzero;
    dst->absmax = src->absmax > dst->absmax ? src->absmax : dst->absmax;
}

/* The padded row length: D up to a multiple of NR. */
static int pad_d(int D)
{
    return (D + NR - 1) / NR * NR;
}

/* dst[TB][DP] = src rows r0 .. r0+TB (of dtype dt), ld elements apart, as
 * f32 (rows >= T and columns >= D: 0). */
static inline void load_rows(const void *restrict src, te_dtype dt, size_t ld, int r0, int T, int D, int DP,
                             float *restrict dst)
{
    memset(dst, 0, (size_t)TB * DP * sizeof *dst);
    for (int r = 0; r < TB && r0 + r < T; r++)
        row_f32(src, dt, (size_t)(r0 + r) * ld, D, dst + (size_t)r * DP);
}

/* dst[DP][TB] = the same rows transposed (rows D elements apart). */
static inline void load_cols(const void *restrict src, te_dtype dt, int r0, int T, int D, float *restrict dst,
                             int DP)
{
    float row[CH];
    memset(dst, 0, (size_t)DP * TB * sizeof *dst);
    for (int r = 0; r < TB && r0 + r < T; r++)
        for (int d0 = 0; d0 < D; d0 += CH) {
            const int n = chunk(D, d0);
            row_f32(src, dt, (size_t)(r0 + r) * D + (size_t)d0, n, row);
            for (int d = 0; d < n; d++)
                dst[(size_t)(d0 + d) * TB + r] = row[d];
        }
}

/* Per-thread scratch, 64-byte aligned: the float counts of each part. */
static float *scratch(size_t n)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p)
        abort(); /* tens of KB per thread */
    return p;
}

/* sum of x[0..TB) in 8 lanes, a fixed order */
static inline float sum_tile(const float *x)
{
    v8 acc = ld8(x);
    for (int c = 8; c < TB; c += 8)
        acc += ld8(x + c);
    float s = 0.0f;
    for (int h = 0; h < 8; h++)
        s += acc[h];
    return s;
}

/* Query tile it of slice bh (q, k, v, o, lse point at the slice; o's rows
 * ldo elements apart): o and lse of its rows, o's rounding counted in st.
 * ws holds 4 TB*DP + TB*TB floats. */
CPU_CLONES static void fwd_tile(const te_attn *a, const void *q, const void *k, const void *v, void *o,
                                size_t ldo, float *lse, int64_t bh, int it, float *ws, te_round_stats *st)
{
    const int T = a->T, D = a->D, DP = pad_d(D), i0 = it * TB;
    float *qb = ws, *kt = qb + (size_t)TB * DP, *vb = kt + (size_t)DP * TB, *ob = vb + (size_t)TB * DP,
          *s = ob + (size_t)TB * DP;
    float m[TB], l[TB];
    const bool drop = a->p > 0.0f;
    const float keep_scale = drop ? 1.0f / (1.0f - a->p) : 1.0f;
    const uint64_t key = drop ? te_dropout_key(a->seed, a->elem_offset) : 0, thr = drop ? te_dropout_threshold(a->p) : 0;
    load_rows(q, a->dt, (size_t)D, i0, T, D, DP, qb);
    memset(ob, 0, (size_t)TB * DP * sizeof *ob);
    for (int r = 0; r < TB; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const int nrow = i0 + TB < T ? TB : T - i0;
    for (int j0 = 0; j0 <= i0; j0 += TB) {
        load_cols(k, a->dt, j0, T, D, kt, DP);
        load_rows(v, a->dt, (size_t)D, j0, T, D, DP, vb);
        const bool diag = j0 == i0;
        mm(s, TB, qb, DP, false, kt, TB, TB, TB, DP, false, diag ? MM_LOWER_C : MM_ALL);
        for (int r = 0; r < nrow; r++) {
            const int i = i0 + r, n = i - j0 + 1 < TB ? i - j0 + 1 : TB; /* keys j <= i */
            float *sr = s + (size_t)r * TB;
            for (int c = 0; c < TB; c++)
                sr[c] = c < n ? sr[c] * a->scale : -INFINITY;
            float mx = m[r];
            for (int c = 0; c < n; c++)
                mx = sr[c] > mx ? sr[c] : mx;
            const float alpha = cpu_exp_nonpos(m[r] - mx); /* 0 on the first tile */
            for (int c = 0; c < TB; c++)
                sr[c] = cpu_exp_nonpos(sr[c] - mx); /* masked: 0 */
            l[r] = l[r] * alpha + sum_tile(sr);
            m[r] = mx;
            if (alpha != 1.0f)
                for (int d = 0; d < DP; d++)
                    ob[(size_t)r * DP + d] *= alpha;
            if (drop) {
                const int64_t row = (bh * T + i) * T + j0;
#pragma omp simd
                for (int c = 0; c < n; c++)
                    sr[c] *= te_dropout_kept(key, thr, row + c) ? keep_scale : 0.0f;
            }
        }
        for (int r = nrow; r < TB; r++)
            memset(s + (size_t)r * TB, 0, TB * sizeof *s);
        mm(ob, DP, s, TB, false, vb, DP, TB, DP, TB, true, diag ? MM_LOWER_X : MM_ALL);
    }
    for (int r = 0; r < nrow; r++) {
        const float inv = 1.0f / l[r];
        float *orow = ob + (size_t)r * DP;
        for (int d = 0; d < D; d++)
            orow[d] *= inv;
        if (a->dt == TE_F32)
            memcpy((float *)o + (size_t)(i0 + r) * ldo, orow, (size_t)D * sizeof *orow);
        else
            te_round_block(orow, (uint16_t *)o + (size_t)(i0 + r) * ldo, a->dt, D, st);
        lse[i0 + r] = m[r] + logf(l[r]);
    }
}

/* dst rows r0 .. r0+n (row length D, dtype dt) from the padded src[n][DP],
 * set or added; low rows added in f32 (src is overwritten by the sum) and
 * rounded once, counted in st. */
static void store_rows(void *restrict dst, te_dtype dt, float *restrict src, int r0, int n, int D, int DP,
                       bool acc, te_round_stats *st)
{
    for (int r = 0; r < n; r++) {
        const size_t at = (size_t)(r0 + r) * D;
        float *s = src + (size_t)r * DP;
        if (dt == TE_F32) {
            float *d = (float *)dst + at;
            for (int c = 0; c < D; c++)
                d[c] = acc ? d[c] + s[c] : s[c];
            continue;
        }
        float row[CH];
        for (int c0 = 0; c0 < D && acc; c0 += CH) {
            const int m = chunk(D, c0);
            row_f32(dst, dt, at + (size_t)c0, m, row);
            for (int c = 0; c < m; c++)
                s[c0 + c] += row[c];
        }
        te_round_block(s, (uint16_t *)dst + at, dt, D, st);
    }
}

/* The backward of slice bh (every pointer at the slice; o's and dout's
 * rows ldo elements apart), the rounding of dq, dk, dv counted in st[0..3).
 * ws holds 3 T'*DP + T' + 5 TB*DP + 3 TB*TB floats, T' = T up to a multiple
 * of TB. */
CPU_CLONES static void bwd_slice(const te_attn *a, const void *q, const void *k, const void *v, const void *o,
                                 size_t ldo, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                                 const te_attn_grads *g, int64_t bh, float *ws, te_round_stats *st)
{
    const int T = a->T, D = a->D, DP = pad_d(D), nt = (T + TB - 1) / TB, TP = nt * TB;
    const size_t td = (size_t)TB * DP, tt = (size_t)TB * TB;
    float *qp = ws, *dop = qp + (size_t)TP * DP, *dqp = dop + (size_t)TP * DP, *drow = dqp + (size_t)TP * DP;
    float *kt = drow + TP, *vt = kt + td, *kb = vt + td, *dkb = kb + td, *dvb = dkb + td;
    float *s = dvb + td, *da = s + tt, *at = da + tt;
    const bool drop = a->p > 0.0f;
    const float keep_scale = drop ? 1.0f / (1.0f - a->p) : 1.0f, scale = a->scale;
    const uint64_t key = drop ? te_dropout_key(a->seed, a->elem_offset) : 0, thr = drop ? te_dropout_threshold(a->p) : 0;
    for (int t = 0; t < nt; t++) {
        load_rows(q, a->dt, (size_t)D, t * TB, T, D, DP, qp + (size_t)t * td);
        load_rows(dout, a->dt, ldo, t * TB, T, D, DP, dop + (size_t)t * td);
    }
    for (int i = 0; i < TP; i++) {
        float d = 0.0f, x[CH], y[CH];
        for (int c0 = 0; c0 < D && i < T; c0 += CH) {
            const int m = chunk(D, c0);
            row_f32(dout, a->dt, (size_t)i * ldo + (size_t)c0, m, x);
            row_f32(o, a->dt, (size_t)i * ldo + (size_t)c0, m, y);
            for (int c = 0; c < m; c++)
                d += x[c] * y[c];
        }
        drow[i] = d;
    }
    memset(dqp, 0, (size_t)TP * DP * sizeof *dqp);
    for (int jt = 0; jt < nt; jt++) {
        const int j0 = jt * TB, nk = j0 + TB < T ? TB : T - j0;
        load_cols(k, a->dt, j0, T, D, kt, DP);
        load_cols(v, a->dt, j0, T, D, vt, DP);
        load_rows(k, a->dt, (size_t)D, j0, T, D, DP, kb);
        memset(dkb, 0, td * sizeof *dkb);
        memset(dvb, 0, td * sizeof *dvb);
        for (int it = jt; it < nt; it++) {
            const int i0 = it * TB;
            const float *qi = qp + (size_t)it * td, *doi = dop + (size_t)it * td;
            const int part_c = it == jt ? MM_LOWER_C : MM_ALL;
            mm(s, TB, qi, DP, false, kt, TB, TB, TB, DP, false, part_c);
            mm(da, TB, doi, DP, false, vt, TB, TB, TB, DP, false, part_c);
            for (int r = 0; r < TB; r++) {
                const int i = i0 + r;
                const int n = i >= T ? 0 : i - j0 + 1 < TB ? i - j0 + 1 : TB; /* keys j <= i */
                float *sr = s + (size_t)r * TB, *dar = da + (size_t)r * TB, *ar = at + (size_t)r * TB;
                const float li = i < T ? lse[i] : 0.0f, di = drow[i];
                /* masked entries (maybe never written): P 0, dS 0 */
                for (int c = 0; c < TB; c++)
                    ar[c] = c < n ? cpu_exp_nonpos(sr[c] * scale - li) : 0.0f;
                if (drop) {
                    const int64_t row = (bh * T + i) * T + j0;
#pragma omp simd
                    for (int c = 0; c < n; c++) {
                        const float z = te_dropout_kept(key, thr, row + c) ? keep_scale : 0.0f;
                        sr[c] = ar[c] * (dar[c] * z - di) * scale;
                        ar[c] *= z;
                    }
                } else {
                    for (int c = 0; c < n; c++)
                        sr[c] = ar[c] * (dar[c] - di) * scale;
                }
                for (int c = n; c < TB; c++)
                    sr[c] = 0.0f;
            }
            /* at holds A = P Z, s holds dS */
            const bool diag = it == jt;
            mm(dvb, DP, at, TB, true, doi, DP, TB, DP, TB, true, diag ? MM_UPPER_X : MM_ALL);
            mm(dkb, DP, s, TB, true, qi, DP, TB, DP, TB, true, diag ? MM_UPPER_X : MM_ALL);
            mm(dqp + (size_t)it * td, DP, s, TB, false, kb, DP, TB, DP, TB, true, diag ? MM_LOWER_X : MM_ALL);
        }
        if (dk)
            store_rows(dk, a->dt, dkb, j0, nk, D, DP, g->acc_k, &st[1]);
        if (dv)
            store_rows(dv, a->dt, dvb, j0, nk, D, DP, g->acc_v, &st[2]);
    }
    if (dq)
        store_rows(dq, a->dt, dqp, 0, T, D, DP, g->acc_q, &st[0]);
}

/* Where slice bh of o starts, and its row stride. */
static size_t o_base(const te_attn *a, int64_t bh, size_t *ldo)
{
    const int64_t b = bh / a->H, h = bh % a->H;
    *ldo = a->merged ? (size_t)a->H * a->D : (size_t)a->D;
    return a->merged ? ((size_t)b * a->T * a->H + (size_t)h) * a->D : (size_t)bh * a->T * a->D;
}

void cpu_attention_forward(const te_attn *a, const void *q, const void *k, const void *v, void *o, float *lse)
{
    const int BH = a->B * a->H, T = a->T, DP = pad_d(a->D), nt = (T + TB - 1) / TB;
#pragma omp parallel
    {
        float *ws = scratch(4 * (size_t)TB * DP + (size_t)TB * TB);
        te_round_stats st = { .dtype = a->dt };
#pragma omp for schedule(dynamic)
        for (int64_t item = 0; item < (int64_t)BH * nt; item++) {
            const int64_t bh = item / nt;
            const size_t base = (size_t)bh * T * a->D;
            /* the longest tiles (most key tiles) first */
            const int it = nt - 1 - (int)(item % nt);
            size_t ldo;
            const size_t ob = o_base(a, bh, &ldo);
            fwd_tile(a, off(q, a->dt, base), off(k, a->dt, base), off(v, a->dt, base), (void *)off(o, a->dt, ob),
                     ldo, lse + (size_t)bh * T, bh, it, ws, &st);
        }
        free(ws);
        if (a->round_o)
#pragma omp critical
            stats_add(a->round_o, &st);
    }
}

void cpu_attention_backward(const te_attn *a, const void *q, const void *k, const void *v, const void *o,
                            const float *lse, const void *dout, const te_attn_grads *g)
{
    const int BH = a->B * a->H, T = a->T, D = a->D, DP = pad_d(D), TP = (T + TB - 1) / TB * TB;
    te_round_stats *const sum[3] = { g->round_q, g->round_k, g->round_v };
#pragma omp parallel
    {
        float *ws = scratch(3 * (size_t)TP * DP + TP + 5 * (size_t)TB * DP + 3 * (size_t)TB * TB);
        te_round_stats st[3] = { { .dtype = a->dt }, { .dtype = a->dt }, { .dtype = a->dt } };
#pragma omp for schedule(dynamic)
        for (int bh = 0; bh < BH; bh++) {
            const size_t base = (size_t)bh * T * D;
            size_t ldo;
            const size_t ob = o_base(a, bh, &ldo);
            const te_dtype dt = a->dt;
            bwd_slice(a, off(q, dt, base), off(k, dt, base), off(v, dt, base), off(o, dt, ob), ldo,
                      lse + (size_t)bh * T, off(dout, dt, ob), g->dq ? (void *)off(g->dq, dt, base) : NULL,
                      g->dk ? (void *)off(g->dk, dt, base) : NULL, g->dv ? (void *)off(g->dv, dt, base) : NULL, g,
                      bh, ws, st);
        }
        free(ws);
        for (int i = 0; i < 3; i++)
            if (sum[i])
#pragma omp critical
                stats_add(sum[i], &st[i]);
    }
}

/* ---- graph mode's fused kernels (pass_fuse_attn.c) ----------------------- */

te_status tg_attn_forward(const tg_attn *t)
{
    const te_attn a = tg_attn_forward_args(t);
    cpu_attention_forward(&a, t->scores->in[0]->data, t->scores->in[1]->data, t->out->in[1]->data, t->o->data,
                          te_f32(t->lse));
    return TE_OK;
}

te_status tg_attn_backward(const tg_attn *t)
{
    te_attn_grads g;
    const te_attn a = tg_attn_backward_args(t, &g);
    cpu_attention_backward(&a, t->scores->in[0]->data, t->scores->in[1]->data, t->out->in[1]->data, t->o->data,
                           te_f32(t->lse), t->o->grad->data, &g);
    return TE_OK;
}
