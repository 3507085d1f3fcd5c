/*
 * cpu_fused.c — the kernels graph mode makes by fusion, on the CPU.
 *
 * tg_ew_run evaluates a chain of elementwise ops block by block: every op
 * of the chain runs over a block of 512 elements held in registers on the
 * stack (in L1), and only the results something else needs go to memory.
 * Each op uses the formula of its eager kernel, so results are the same bit
 * for bit.
 */
#include "cpu_kernels.h"
#include "cpu_math.h"
#include "graph/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOCK 512

/* The fusion passes fuse every op the op table marks UNARY, BINARY or ACT:
 * one without a formula here is a bug in the engine, never in the user's
 * program, and computing anything in its place would be silently wrong. */
static _Noreturn void no_formula(te_op op)
{
    fprintf(stderr, "tdbg engine: %s is fusable in TE_OP_LIST but has no formula in cpu_fused.c\n",
            te_op_type_name(op));
    abort();
}

/* Unary elementwise ops and activations, one element. */
static float act1(te_op op, float x)
{
    switch (op) {
    case TE_OP_RELU: return x < 0.0f ? 0.0f : x;
    case TE_OP_GELU: return cpu_gelu(x);
    case TE_OP_TANH: return tanhf(x);
    case TE_OP_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case TE_OP_EXP: return expf(x);
    case TE_OP_LOG: return logf(x);
    case TE_OP_SQRT: return sqrtf(x);
    default: no_formula(op);
    }
}

te_status tg_act_inplace(te_op act, float *y, int64_t n)
{
    if (act == TE_OP_RELU) { /* the common case, vectorised */
#pragma omp parallel for simd if (n > TE_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = y[i] < 0.0f ? 0.0f : y[i];
        return TE_OK;
    }
    if (act == TE_OP_GELU) { /* the transformer's, vectorised */
#pragma omp parallel for simd if (n > TE_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = cpu_gelu(y[i]);
        return TE_OK;
    }
#pragma omp parallel for if (n > TE_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        y[i] = act1(act, y[i]);
    return TE_OK;
}

/* Elements [lo, lo+m) of input t as seen from an output of `numel`
 * elements: equal size, a scalar, or repeating trailing dims. */
static void load(const te_tensor *t, int64_t numel, int64_t lo, int64_t m, float *restrict r)
{
    const float *x = te_f32(t);
    if (t->numel == numel) {
        for (int64_t i = 0; i < m; i++)
            r[i] = x[lo + i];
    } else if (t->numel == 1) {
        for (int64_t i = 0; i < m; i++)
            r[i] = x[0];
    } else {
        int64_t j = lo % t->numel;
        for (int64_t i = 0; i < m; i++) {
            r[i] = x[j];
            if (++j == t->numel)
                j = 0;
        }
    }
}

static void step_block(te_op op, const float *restrict a, const float *restrict b, float s,
                       float *restrict d, int64_t m)
{
    switch (op) {
    case TE_OP_ADD:
#pragma omp simd
        for (int64_t i = 0; i < m; i++) d[i] = a[i] + b[i];
        break;
    case TE_OP_SUB:
#pragma omp simd
        for (int64_t i = 0; i < m; i++) d[i] = a[i] - b[i];
        break;
    case TE_OP_MUL:
#pragma omp simd
        for (int64_t i = 0; i < m; i++) d[i] = a[i] * b[i];
        break;
    case TE_OP_DIV:
#pragma omp simd
        for (int64_t i = 0; i < m; i++) d[i] = a[i] / b[i];
        break;
    case TE_OP_SCALE:
#pragma omp simd
        for (int64_t i = 0; i < m; i++) d[i] = a[i] * s;
        break;
    case TE_OP_RELU:
#pragma omp simd
        for (int64_t i = 0; i < m; i++) d[i] = a[i] < 0.0f ? 0.0f : a[i];
        break;
    default:
        if (te_op_info_of(op)->ew != TE_EW_UNARY)
            no_formula(op); /* a binary op: act1 would drop its second operand */
        for (int64_t i = 0; i < m; i++) d[i] = act1(op, a[i]);
        break;
    }
}

te_status tg_ew_run(const tg_ew *ew)
{
    const int64_t numel = ew->numel, blocks = (numel + BLOCK - 1) / BLOCK;
#pragma omp parallel for if (numel > TE_PAR_MIN) schedule(static)
    for (int64_t blk = 0; blk < blocks; blk++) {
        float reg[2 * TG_EW_MAX][BLOCK];
        const int64_t lo = blk * BLOCK, m = numel - lo < BLOCK ? numel - lo : BLOCK;
        for (int i = 0; i < ew->n_in; i++)
            load(ew->in[i], numel, lo, m, reg[i]);
        for (int s = 0; s < ew->n_steps; s++) {
            int d = ew->n_in + s, b = ew->step[s].b;
            step_block(ew->step[s].op, reg[ew->step[s].a], b >= 0 ? reg[b] : NULL, ew->step[s].s, reg[d], m);
            float *out = te_f32(ew->out[s]);
            if (out)
                for (int64_t i = 0; i < m; i++)
                    out[lo + i] = reg[d][i];
        }
    }
    return TE_OK;
}

te_status tg_bn_relu_forward(te_node *bn, te_node *relu) { return cpu_batchnorm_relu_forward(bn, relu); }
te_status tg_bn_relu_backward(te_node *bn, te_node *relu) { return cpu_batchnorm_relu_backward(bn, relu); }

/* Eval batch norm folded into the conv before it (pass_bn_fold.c). */
te_status tg_bn_fold_run(tg_kernel *k)
{
    te_node *conv = k->node, *bn = k->act;
    const te_tensor *w = conv->in[1], *b = conv->in[2];
    const float *g = bn->in[1] ? te_f32(bn->in[1]) : NULL, *beta = bn->in[2] ? te_f32(bn->in[2]) : NULL;
    const float *rm = te_f32(bn->in[3]), *rv = te_f32(bn->in[4]);
    float *fw = te_f32(k->fold_w), *fb = te_f32(k->fold_b);
    const int64_t O = w->shape[0], per = O ? w->numel / O : 0;
    for (int64_t o = 0; o < O; o++) {
        const float s = (g ? g[o] : 1.0f) * (1.0f / sqrtf(rv[o] + bn->a.eps));
        const float *wo = te_f32(w) + o * per;
        for (int64_t i = 0; i < per; i++)
            fw[o * per + i] = wo[i] * s;
        fb[o] = (b ? te_f32(b)[o] : 0.0f) * s + (beta ? beta[o] : 0.0f) - rm[o] * s;
    }
    te_node tmp;
    te_tensor out;
    te_tensor *dst = tg_bn_fold_conv(k, &tmp, &out);
    te_status st = te_backend_current()->forward[TE_OP_CONV2D](&tmp);
    if (st == TE_OK && k->act2)
        st = tg_act_inplace(k->act2->op, te_f32(dst), dst->numel);
    return st;
}
