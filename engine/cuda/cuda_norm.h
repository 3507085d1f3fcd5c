/*
 * cuda_norm.h — batch norm on the CUDA backend (cuda_norm.c): the
 * semantics, saved tensors (mean, rstd) and running-statistics update of
 * engine/cpu/cpu_norm.c, and graph mode's batch norm with a fused ReLU
 * (cpu_fused.c's tg_bn_relu_forward/backward).
 */
#ifndef TE_CUDA_NORM_H
#define TE_CUDA_NORM_H

#include "te_internal.h"

te_status cuda_batchnorm_forward(te_node *n);
te_status cuda_batchnorm_backward(te_node *n);

/* Batch norm then ReLU in one pass: bn's statistics and saved tensors as
 * cuda_batchnorm_forward, the clamped result in relu->out[0]; the backward
 * reads relu's output and its gradient. */
te_status cuda_tg_bn_relu_forward(te_node *bn, te_node *relu);
te_status cuda_tg_bn_relu_backward(te_node *bn, te_node *relu);

#endif
