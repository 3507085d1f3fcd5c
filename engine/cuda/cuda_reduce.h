/*
 * cuda_reduce.h — the CUDA backend's kernels of the reduction family:
 * sum, mean, softmax, log_softmax, cross entropy, MSE, layer norm and
 * global average pool, each with the semantics, attributes, saved
 * tensors and acc rule of its CPU kernel (engine/cpu/cpu_reduce.c,
 * cpu_loss.c, cpu_norm.c, cpu_conv.c). Tensor data are device pointers.
 */
#ifndef TE_CUDA_REDUCE_H
#define TE_CUDA_REDUCE_H

#include "te_internal.h"

te_status cuda_sum_forward(te_node *n);
te_status cuda_sum_backward(te_node *n);
te_status cuda_mean_forward(te_node *n);
te_status cuda_mean_backward(te_node *n);
te_status cuda_softmax_forward(te_node *n);
te_status cuda_softmax_backward(te_node *n);
te_status cuda_log_softmax_forward(te_node *n);
te_status cuda_log_softmax_backward(te_node *n);
/* A label outside [0, C) fails the node with the CPU kernel's message
 * (one 4-byte read of the bad-data flag after the launch). */
te_status cuda_cross_entropy_forward(te_node *n);
te_status cuda_cross_entropy_backward(te_node *n);
te_status cuda_mse_forward(te_node *n);
te_status cuda_mse_backward(te_node *n);
te_status cuda_layernorm_forward(te_node *n);
te_status cuda_layernorm_backward(te_node *n);
te_status cuda_global_avgpool_forward(te_node *n);
te_status cuda_global_avgpool_backward(te_node *n);

#endif
