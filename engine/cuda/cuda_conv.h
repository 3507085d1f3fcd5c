/*
 * cuda_conv.h — conv2d and the pools on the CUDA backend (cuda_conv.c),
 * the same semantics, attributes, saved tensors and acc rule as
 * engine/cpu/cpu_conv.c's kernels of the same names; and graph mode's eval
 * batch norm folded into a conv (cpu_fused.c's tg_bn_fold_run).
 */
#ifndef TE_CUDA_CONV_H
#define TE_CUDA_CONV_H

#include "te_internal.h"

struct tg_kernel;

te_status cuda_conv2d_forward(te_node *n);
te_status cuda_conv2d_backward(te_node *n);
te_status cuda_maxpool2d_forward(te_node *n);
te_status cuda_maxpool2d_backward(te_node *n);
te_status cuda_avgpool2d_forward(te_node *n);
te_status cuda_avgpool2d_backward(te_node *n);

/* TG_K_BN_FOLD: k->node the conv, k->act the eval batch norm, k->act2 an
 * activation after it (or NULL), k->fold_w/fold_b device scratch. The
 * activation runs in place through the current backend's forward kernel
 * of its op (the CUDA backend's, once the lead wires it). */
te_status cuda_tg_bn_fold_run(struct tg_kernel *k);

#endif
