/*
 * cpu_attention.c — fused causal self-attention on the CPU, forward and
 * backward, that never holds the T x T scores (FlashAttention-2's scheme).
 *
 * q, k, v, o are [B,H,T,D] (f32, contiguous); lse is [B,H,T]. Row i of a
 * (b,h) slice attends to keys j <= i:
 *   s_ij = scale * q_i . k_j,  P_ij = exp(s_ij - lse_i),  A_ij = P_ij * Z_ij,
 *   o_i  = sum_j A_ij v_j,     lse_i = log sum_j exp(s_ij)
 * with Z_ij = 1/(1-p) where dropout keeps element (b,h,i,j) of the [B,H,T,T]
 * probabilities (the composed Dropout's draw at the same flat index), else 0.
 *
 * Forward: each (b, h, block of BQ query rows) runs over the key blocks up
 * to its diagonal with the online softmax (a running max m_i and sum l_i;
 * the partial o_i is rescaled when m_i grows), then o_i /= l_i and only
 * lse_i = m_i + log l_i is kept for the backward. Keys after the query are
 * skipped, not filled with -inf.
 *
 * Backward: per (b, h), per key block, over the query blocks from the
 * diagonal on, the scores are recomputed from lse tile by tile:
 *   dA_ij = dO_i . v_j,  dP_ij = dA_ij Z_ij,  dS_ij = P_ij (dP_ij - D_i),
 *   D_i = dO_i . o_i (= sum_j P_ij dP_ij, dropout included),
 *   dv_j += A_ij dO_i,  dq_i += scale dS_ij k_j,  dk_j += scale dS_ij q_i.
 * A (b,h) slice is one thread's: dq gathers over key blocks with no atomics
 * and the result does not depend on the thread count.
 *
 * Inner loops run over a tile's keys (k and v transposed into the tile, so
 * q . k_j for all j is a sequence of axpys) or over D: plain loops that the
 * compiler vectorises.
 */
#include "cpu_kernels.h"
#include "graph/graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BQ 32 /* query rows per forward work item */
#define BK 64 /* keys per tile */

/* The dropout factor of element (b,h,i,j): flat index idx in [B,H,T,T]. */
static inline float drop_factor(uint64_t seed, int64_t idx, float p, float keep_scale)
{
    return te_dropout_keep(seed, idx, p) * keep_scale; /* the composed Dropout's draw */
}

/* kt [D][BK] = the n keys k[j0 .. j0+n) transposed. */
static void load_t(const float *restrict k, int j0, int n, int D, float *restrict kt)
{
    for (int jj = 0; jj < n; jj++)
        for (int d = 0; d < D; d++)
            kt[(size_t)d * BK + jj] = k[(size_t)(j0 + jj) * D + d];
}

/* s[0..n) = scale * q . kt[:, 0..n) */
static void row_dots(const float *restrict q, const float *restrict kt, int n, int D, float scale,
                     float *restrict s)
{
    for (int jj = 0; jj < n; jj++)
        s[jj] = 0.0f;
    for (int d = 0; d < D; d++) {
        const float qd = q[d];
        const float *restrict kd = kt + (size_t)d * BK;
#pragma omp simd
        for (int jj = 0; jj < n; jj++)
            s[jj] += qd * kd[jj];
    }
    for (int jj = 0; jj < n; jj++)
        s[jj] *= scale;
}

/* y[0..D) += a * x[0..D) */
static inline void axpy(float a, const float *restrict x, float *restrict y, int D)
{
#pragma omp simd
    for (int d = 0; d < D; d++)
        y[d] += a * x[d];
}

static inline float dot(const float *restrict x, const float *restrict y, int D)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < D; d++)
        s += x[d] * y[d];
    return s;
}

void cpu_attention_forward(const cpu_attn *a, const float *q, const float *k, const float *v, float *o,
                           float *lse)
{
    const int BH = a->B * a->H, T = a->T, D = a->D, nqb = (T + BQ - 1) / BQ;
    const float keep_scale = a->p > 0.0f ? 1.0f / (1.0f - a->p) : 1.0f;
#pragma omp parallel
    {
        float *kt = malloc((size_t)D * BK * sizeof *kt);
        float s[BK], m[BQ], l[BQ];
        if (!kt)
            abort(); /* a few KB per thread */
#pragma omp for schedule(dynamic)
        for (int64_t item = 0; item < (int64_t)BH * nqb; item++) {
            const int64_t bh = item / nqb;
            const int i0 = (int)(item % nqb) * BQ, i1 = i0 + BQ < T ? i0 + BQ : T;
            const size_t base = (size_t)bh * T * D;
            for (int i = i0; i < i1; i++) {
                m[i - i0] = -INFINITY;
                l[i - i0] = 0.0f;
                memset(o + base + (size_t)i * D, 0, (size_t)D * sizeof *o);
            }
            for (int j0 = 0; j0 < i1; j0 += BK) {
                const int nk = j0 + BK < i1 ? BK : i1 - j0;
                load_t(k + base, j0, nk, D, kt);
                for (int i = i0; i < i1; i++) {
                    const int n = i - j0 + 1 < nk ? i - j0 + 1 : nk; /* keys j <= i */
                    if (n <= 0)
                        continue;
                    float *oi = o + base + (size_t)i * D;
                    row_dots(q + base + (size_t)i * D, kt, n, D, a->scale, s);
                    float mx = m[i - i0];
                    for (int jj = 0; jj < n; jj++)
                        mx = s[jj] > mx ? s[jj] : mx;
                    const float alpha = expf(m[i - i0] - mx); /* 0 on the first tile */
                    float sum = 0.0f;
                    for (int jj = 0; jj < n; jj++) {
                        s[jj] = expf(s[jj] - mx);
                        sum += s[jj];
                    }
                    l[i - i0] = l[i - i0] * alpha + sum;
                    m[i - i0] = mx;
                    if (alpha != 1.0f)
                        for (int d = 0; d < D; d++)
                            oi[d] *= alpha;
                    const int64_t row = ((int64_t)bh * T + i) * T + j0;
                    for (int jj = 0; jj < n; jj++) {
                        const float w = a->p > 0.0f ? s[jj] * drop_factor(a->seed, row + jj, a->p, keep_scale)
                                                    : s[jj];
                        axpy(w, v + base + (size_t)(j0 + jj) * D, oi, D);
                    }
                }
            }
            for (int i = i0; i < i1; i++) {
                float *oi = o + base + (size_t)i * D;
                const float inv = 1.0f / l[i - i0];
                for (int d = 0; d < D; d++)
                    oi[d] *= inv;
                lse[(size_t)bh * T + i] = m[i - i0] + logf(l[i - i0]);
            }
        }
        free(kt);
    }
}

/* dst[0..n) = src, or += src when acc */
static void store(float *restrict dst, const float *restrict src, size_t n, bool acc)
{
    if (!acc) {
        memcpy(dst, src, n * sizeof *dst);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void cpu_attention_backward(const cpu_attn *a, const float *q, const float *k, const float *v,
                            const float *o, const float *lse, const float *dout, const cpu_attn_grads *g)
{
    const int BH = a->B * a->H, T = a->T, D = a->D;
    const float keep_scale = a->p > 0.0f ? 1.0f / (1.0f - a->p) : 1.0f;
#pragma omp parallel
    {
        const size_t tile = (size_t)D * BK;
        float *buf = malloc((4 * tile + (size_t)T) * sizeof *buf);
        if (!buf)
            abort(); /* a few KB per thread */
        float *kt = buf, *vt = kt + tile, *dkt = vt + tile, *dvt = dkt + tile, *drow = dvt + tile;
        float s[BK], dp[BK];
#pragma omp for schedule(dynamic)
        for (int bh = 0; bh < BH; bh++) {
            const size_t base = (size_t)bh * T * D;
            const float *qs = q + base, *ks = k + base, *vs = v + base, *dos = dout + base;
            const float *ls = lse + (size_t)bh * T;
            float *dq = g->dq ? g->dq + base : NULL;
            for (int i = 0; i < T; i++)
                drow[i] = dot(dos + (size_t)i * D, o + base + (size_t)i * D, D);
            if (dq && !g->acc_q)
                memset(dq, 0, (size_t)T * D * sizeof *dq);
            for (int j0 = 0; j0 < T; j0 += BK) {
                const int nk = j0 + BK < T ? BK : T - j0;
                load_t(ks, j0, nk, D, kt);
                load_t(vs, j0, nk, D, vt);
                memset(dkt, 0, (size_t)nk * D * sizeof *dkt);
                memset(dvt, 0, (size_t)nk * D * sizeof *dvt);
                for (int i = j0; i < T; i++) {
                    const int n = i - j0 + 1 < nk ? i - j0 + 1 : nk; /* keys j <= i */
                    const float *qi = qs + (size_t)i * D, *doi = dos + (size_t)i * D;
                    row_dots(qi, kt, n, D, a->scale, s);
                    row_dots(doi, vt, n, D, 1.0f, dp);
                    const int64_t row = ((int64_t)bh * T + i) * T + j0;
                    for (int jj = 0; jj < n; jj++) {
                        const float pr = expf(s[jj] - ls[i]);
                        const float z = a->p > 0.0f ? drop_factor(a->seed, row + jj, a->p, keep_scale) : 1.0f;
                        const float ds = a->scale * pr * (dp[jj] * z - drow[i]);
                        axpy(pr * z, doi, dvt + (size_t)jj * D, D);
                        axpy(ds, qi, dkt + (size_t)jj * D, D);
                        if (dq)
                            axpy(ds, ks + (size_t)(j0 + jj) * D, dq + (size_t)i * D, D);
                    }
                }
                if (g->dk)
                    store(g->dk + base + (size_t)j0 * D, dkt, (size_t)nk * D, g->acc_k);
                if (g->dv)
                    store(g->dv + base + (size_t)j0 * D, dvt, (size_t)nk * D, g->acc_v);
            }
        }
        free(buf);
    }
}

/* ---- graph mode's fused kernels (pass_fuse_attn.c) ----------------------- */

static cpu_attn attn_args(const tg_attn *t)
{
    const te_tensor *q = t->scores->in[0];
    const te_node *dr = t->dropout;
    const bool drop = dr && dr->a.training && dr->a.p > 0.0f;
    return (cpu_attn){ .B = (int)q->shape[0], .H = (int)q->shape[1], .T = (int)q->shape[2],
                       .D = (int)q->shape[3], .scale = t->scale->a.scale, .p = drop ? dr->a.p : 0.0f,
                       .seed = drop ? dr->a.seed : 0 };
}

te_status tg_attn_forward(const tg_attn *t)
{
    /* The Dropout op's key for this step, as its own kernel would draw it. */
    if (t->dropout)
        t->dropout->a.seed = te_dropout_seed(t->dropout->name, te_step());
    const cpu_attn a = attn_args(t);
    cpu_attention_forward(&a, te_f32(t->scores->in[0]), te_f32(t->scores->in[1]), te_f32(t->out->in[1]),
                          te_f32(t->out->out[0]), te_f32(t->lse));
    return TE_OK;
}

te_status tg_attn_backward(const tg_attn *t)
{
    te_tensor *q = t->scores->in[0], *k = t->scores->in[1], *v = t->out->in[1];
    const cpu_attn a = attn_args(t);
    cpu_attn_grads g = { 0 };
    int acc;
    if (te_needs_grad(q)) {
        g.dq = te_grad_buf(q, &acc);
        g.acc_q = acc;
    }
    if (te_needs_grad(k)) {
        g.dk = te_grad_buf(k, &acc);
        g.acc_k = acc;
    }
    if (te_needs_grad(v)) {
        g.dv = te_grad_buf(v, &acc);
        g.acc_v = acc;
    }
    cpu_attention_backward(&a, te_f32(q), te_f32(k), te_f32(v), te_f32(t->out->out[0]), te_f32(t->lse),
                           te_f32(t->out->out[0]->grad), &g);
    return TE_OK;
}
