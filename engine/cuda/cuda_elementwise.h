/*
 * cuda_elementwise.h — the CUDA backend's elementwise kernels (te_kernel_fn,
 * the same semantics as engine/cpu/cpu_elementwise.c's and cpu_shape.c's
 * dropout: attributes, broadcasting, acc rule) and graph mode's fused
 * elementwise kernels (cpu_fused.c's tg_ew_run and tg_act_inplace).
 */
#ifndef TE_CUDA_ELEMENTWISE_H
#define TE_CUDA_ELEMENTWISE_H

#include "cuda/k_elementwise.h"
#include "graph/graph.h"
#include "te_internal.h"

#define CUDA_EW_KERNELS(X)                                                                         \
    X(add) X(sub) X(mul) X(div) X(scale) X(relu) X(gelu) X(tanh) X(sigmoid) X(exp) X(log) X(sqrt)  \
    X(masked_fill) X(dropout)
#define CUDA_EW_DECLARE(op)                                                                        \
    te_status cuda_##op##_forward(te_node *n);                                                     \
    te_status cuda_##op##_backward(te_node *n);
CUDA_EW_KERNELS(CUDA_EW_DECLARE)
#undef CUDA_EW_DECLARE

/* The fused chain ew (device tensors) in one kernel; act on y in place.
 * TE_ERR_DEVICE with the CUDA error set when a launch fails, TE_ERR_STATE
 * for an op without a formula (a bug of the engine's fusion passes). */
te_status cuda_tg_ew_run(const tg_ew *ew);
te_status cuda_tg_act_inplace(te_op act, float *y, int64_t n);

/* For tests: a binary op's broadcast plan (kernel_geom.h's te_bcast_plan),
 * and the kernel's code of an op with a fused formula, or -1. */
void cuda_bcast_plan(k_bcast *p, const te_tensor *a, const te_tensor *b, const te_tensor *y);
int cuda_ew_op(te_op op);

#endif
