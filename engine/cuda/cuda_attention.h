/*
 * cuda_attention.h — fused causal attention on the CUDA backend: graph
 * mode's TG_K_ATTN / TG_K_ATTN_BWD kernels (cuda_tg_attn_*, the
 * counterparts of cpu_attention.c's tg_attn_*), on the device kernels of
 * k_attention.cu.
 */
#ifndef TE_CUDA_ATTENTION_H
#define TE_CUDA_ATTENTION_H

#include "graph/graph.h"
#include "kernel_geom.h"
#include "te_internal.h"

/* cpu_attention_forward/backward on device pointers (kernel_geom.h's
 * te_attn and te_attn_grads); errors are recorded on n (te_set_error when
 * n is NULL). */
te_status cuda_attention_forward(te_node *n, const te_attn *a, const void *q, const void *k, const void *v,
                                 void *o, float *lse);
te_status cuda_attention_backward(te_node *n, const te_attn *a, const void *q, const void *k, const void *v,
                                  const void *o, const float *lse, const void *dout, const te_attn_grads *g);

/* tg_attn_forward / tg_attn_backward on the device: the same inputs,
 * outputs, saved log-sum-exp and rounding reports. */
te_status cuda_tg_attn_forward(const tg_attn *t);
te_status cuda_tg_attn_backward(const tg_attn *t);

#endif
