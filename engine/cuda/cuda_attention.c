/*
 * cuda_attention.c — fused causal attention on the CUDA backend, with
 * engine/cpu/cpu_attention.c's inputs, outputs, saved log-sum-exp, dropout
 * mask and rounding reports; the arithmetic is k_attention.cu's.
 *
 * f32 tensors are read and written in place. f16/bf16 ones are read as
 * they are (widened in the kernels); their results go to f32 scratch in
 * the workspace (an accumulated gradient starts there as the old one
 * widened), then are rounded once into the real tensor, what rounding did
 * added to the caller's counts, as the CPU does.
 */
#include "cuda/cuda_attention.h"

#include "cuda/cuda_cast.h"
#include "cuda/cuda_rt.h"
#include "cuda/k_attention.h"
#include "cuda/k_cast.h"

#include <stdio.h>

static k_attn k_args(const te_attn *a)
{
    const bool drop = a->p > 0.0f;
    return (k_attn){ .B = a->B, .H = a->H, .T = a->T, .D = a->D, .scale = a->scale,
                     .keep_scale = drop ? 1.0f / (1.0f - a->p) : 1.0f, .drop = drop, .merged = a->merged,
                     .dtype = (int)a->dt, .key = drop ? te_dropout_key(a->seed, a->elem_offset) : 0,
                     .thr = drop ? te_dropout_threshold(a->p) : 0 };
}

/* A failure recorded on n, or as the engine's error when n is NULL. */
static te_status fail(te_node *n, te_status code, const char *msg)
{
    if (n)
        return te_kernel_fail(n, code, "%s", msg);
    te_set_error(code, "%s", msg);
    return code;
}

static te_status kernel_ok(te_node *n, const te_attn *a, cudaError_t e, const char *what)
{
    if (e != cudaErrorInvalidValue)
        return te_cuda_ok(n, e, what);
    char msg[160];
    snprintf(msg, sizeof msg, "%s: head size %d needs more shared memory per block than the device has", what, a->D);
    return fail(n, TE_ERR_DEVICE, msg);
}

static float *scratch(te_node *n, size_t bytes, te_status *st)
{
    float *p = te_cuda_workspace(bytes);
    *st = p ? TE_OK : fail(n, TE_ERR_NOMEM, "out of device memory for attention's f32 scratch");
    return p;
}

te_status cuda_attention_forward(te_node *n, const te_attn *a, const void *q, const void *k, const void *v,
                                 void *o, float *lse)
{
    const k_attn ka = k_args(a);
    const int64_t numel = (int64_t)a->B * a->H * a->T * a->D;
    cudaStream_t s = te_cuda_stream();
    if (a->dt == TE_F32)
        return kernel_ok(n, a, k_attn_forward(&ka, q, k, v, o, lse, s), "attention forward");
    te_status st;
    float *of = scratch(n, (size_t)numel * sizeof(float), &st);
    if (!of)
        return st;
    st = kernel_ok(n, a, k_attn_forward(&ka, q, k, v, of, lse, s), "attention forward");
    /* what rounding did added to a->round_o (NULL: not counted), as
     * cpu_attention.c's stats_add */
    return st == TE_OK ? cuda_round_on(n, of, o, a->dt, numel, a->round_o, "attention: rounding") : st;
}

te_status cuda_attention_backward(te_node *n, const te_attn *a, const void *q, const void *k, const void *v,
                                  const void *o, const float *lse, const void *dout, const te_attn_grads *g)
{
    const k_attn ka = k_args(a);
    const int64_t rows = (int64_t)a->B * a->H * a->T, numel = rows * a->D;
    const bool low = a->dt != TE_F32;
    cudaStream_t s = te_cuda_stream();
    /* drow, then (low) an f32 result per wanted gradient */
    void *const out[3] = { g->dq, g->dk, g->dv };
    const bool acc[3] = { g->acc_q, g->acc_k, g->acc_v };
    te_round_stats *const rs[3] = { g->round_q, g->round_k, g->round_v };
    te_status st;
    float *drow = scratch(n, (size_t)(rows + (low ? 3 * numel : 0)) * sizeof(float), &st), *f[3];
    if (!drow)
        return st;
    for (int i = 0; i < 3; i++) {
        f[i] = !out[i] ? NULL : low ? drow + rows + i * numel : (float *)out[i];
        if (low && out[i] && acc[i] && st == TE_OK) /* the old gradient, to add onto in f32 */
            st = te_cuda_ok(n, k_convert(out[i], (k_dtype)a->dt, f[i], K_F32, numel, 0, NULL, s),
                            "attention: widening a gradient");
    }
    if (st == TE_OK)
        st = kernel_ok(n, a, k_attn_backward(&ka, q, k, v, o, lse, dout, drow, f[0], f[1], f[2], acc[0], acc[1], acc[2], s),
                       "attention backward");
    for (int i = 0; low && i < 3 && st == TE_OK; i++)
        if (out[i])
            st = cuda_round_on(n, f[i], out[i], a->dt, numel, rs[i], "attention: rounding");
    return st;
}

/* ---- graph mode's fused kernels (pass_fuse_attn.c) ----------------------- */

te_status cuda_tg_attn_forward(const tg_attn *t)
{
    const te_attn a = tg_attn_forward_args(t);
    return cuda_attention_forward(t->out, &a, t->scores->in[0]->data, t->scores->in[1]->data, t->out->in[1]->data,
                                  t->o->data, te_f32(t->lse));
}

te_status cuda_tg_attn_backward(const tg_attn *t)
{
    te_attn_grads g;
    const te_attn a = tg_attn_backward_args(t, &g);
    return cuda_attention_backward(t->scores, &a, t->scores->in[0]->data, t->scores->in[1]->data,
                                   t->out->in[1]->data, t->o->data, te_f32(t->lse), t->o->grad->data, &g);
}
