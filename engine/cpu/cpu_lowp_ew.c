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

/* ---- ReLU ------------------------------------------------------------------
 * In blocks of RELU_BLOCK elements: the f32 kernel's formulas (cpu_elementwise.c
 * UNARY(relu)) on widened blocks, rounded block by block, counted as
 * te_round_f32 counts (so NaN, -0 and an Inf * 0 in backward come out as
 * the shadow path's). */

#define RELU_BLOCK 2048

static bool relu_takes(const te_node *n)
{
    return cpu_is_half(n->in[0]) && n->out[0]->dtype == n->in[0]->dtype;
}

te_status cpu_relu_forward_lowp(te_node *n)
{
    if (!relu_takes(n))
        return TE_LOWP_DECLINED;
    const te_dtype dt = n->out[0]->dtype;
    const uint16_t *X = n->in[0]->data;
    uint16_t *Y = n->out[0]->data;
    const int64_t N = n->out[0]->numel, blocks = (N + RELU_BLOCK - 1) / RELU_BLOCK;
    int64_t over = 0, under = 0, nonzero = 0;
    float amax = 0.0f;
#pragma omp parallel for if (N > TE_PAR_MIN) reduction(+ : over, under, nonzero) reduction(max : amax)
    for (int64_t b = 0; b < blocks; b++) {
        float v[RELU_BLOCK];
        const int64_t i0 = b * RELU_BLOCK, m = N - i0 < RELU_BLOCK ? N - i0 : RELU_BLOCK;
        te_half_to_f32(X + i0, v, dt, m);
        for (int64_t i = 0; i < m; i++)
            v[i] = v[i] < 0.0f ? 0.0f : v[i];
        te_round_stats part;
        cpu_round_stats_init(&part, dt);
        te_round_block(v, Y + i0, dt, m, &part);
        over += part.overflow;
        under += part.underflow;
        nonzero += part.nonzero;
        amax = part.absmax > amax ? part.absmax : amax;
    }
    n->round[0] = (te_round_stats){ .dtype = dt, .overflow = over, .underflow = under, .nonzero = nonzero, .absmax = amax };
    n->rounded = true;
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
    int acc;
    uint16_t *D = (uint16_t *)te_grad_buf(x, &acc);
    const uint16_t *S = y->data, *G = y->grad->data;
    const int64_t N = y->numel, blocks = (N + RELU_BLOCK - 1) / RELU_BLOCK;
    int64_t over = 0, under = 0, nonzero = 0;
    float amax = 0.0f;
#pragma omp parallel for if (N > TE_PAR_MIN) reduction(+ : over, under, nonzero) reduction(max : amax)
    for (int64_t b = 0; b < blocks; b++) {
        float s[RELU_BLOCK], g[RELU_BLOCK], d[RELU_BLOCK];
        const int64_t i0 = b * RELU_BLOCK, m = N - i0 < RELU_BLOCK ? N - i0 : RELU_BLOCK;
        te_half_to_f32(S + i0, s, dt, m);
        te_half_to_f32(G + i0, g, dt, m);
        if (acc) {
            te_half_to_f32(D + i0, d, dt, m);
            for (int64_t i = 0; i < m; i++)
                d[i] += g[i] * (s[i] <= 0.0f ? 0.0f : 1.0f);
        } else {
            for (int64_t i = 0; i < m; i++)
                d[i] = g[i] * (s[i] <= 0.0f ? 0.0f : 1.0f);
        }
        te_round_stats part;
        cpu_round_stats_init(&part, dt);
        te_round_block(d, D + i0, dt, m, &part);
        over += part.overflow;
        under += part.underflow;
        nonzero += part.nonzero;
        amax = part.absmax > amax ? part.absmax : amax;
    }
    n->round[0] = (te_round_stats){ .dtype = dt, .overflow = over, .underflow = under, .nonzero = nonzero, .absmax = amax };
    n->rounded = true;
    return TE_OK;
}
