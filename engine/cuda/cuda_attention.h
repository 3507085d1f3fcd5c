/*
 * cuda_attention.h — fused causal attention on the CUDA backend: graph
 * mode's TG_K_ATTN / TG_K_ATTN_BWD kernels (cuda_tg_attn_*, the
 * counterparts of cpu_attention.c's tg_attn_*), on the device kernels of
 * k_attention.cu.
 */
#ifndef TE_CUDA_ATTENTION_H
#define TE_CUDA_ATTENTION_H

#include "graph/graph.h"
#include "te_internal.h"

/* cpu_attn's fields, for device tensors: q, k, v [B,H,T,D]; o [B,H,T,D]
 * or, merged, [B,T,H,D]; lse [B,H,T] f32; dtype dt (f32, f16 or bf16),
 * low results rounded once, what rounding did added to round_o (NULL: not
 * counted). */
typedef struct cuda_attn {
    int B, H, T, D;
    float scale, p;
    uint64_t seed;
    bool merged;
    te_dtype dt;
    te_round_stats *round_o;
} cuda_attn;
/* The gradients to write (device; NULL: not wanted), each overwritten or
 * added to (in f32, then rounded once when dt is low). */
typedef struct cuda_attn_grads {
    void *dq, *dk, *dv;
    bool acc_q, acc_k, acc_v;
    te_round_stats *round_q, *round_k, *round_v;
} cuda_attn_grads;

/* cpu_attention_forward/backward on device pointers; errors are recorded
 * on n (te_set_error when n is NULL). */
te_status cuda_attention_forward(te_node *n, const cuda_attn *a, const void *q, const void *k, const void *v,
                                 void *o, float *lse);
te_status cuda_attention_backward(te_node *n, const cuda_attn *a, const void *q, const void *k, const void *v,
                                  const void *o, const float *lse, const void *dout, const cuda_attn_grads *g);

/* tg_attn_forward / tg_attn_backward on the device: the same inputs,
 * outputs, saved log-sum-exp and rounding reports. */
te_status cuda_tg_attn_forward(const tg_attn *t);
te_status cuda_tg_attn_backward(const tg_attn *t);

#endif
