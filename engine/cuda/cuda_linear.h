/*
 * cuda_linear.h — matmul and linear on the CUDA backend (cuBLAS, cuBLASLt
 * for graph mode's fused activation), with the semantics of
 * engine/cpu/cpu_linear.c; and their native f16/bf16 kernels on tensor
 * cores (the forward_lowp/backward_lowp tables, cpu_lowp.c's contract).
 */
#ifndef TE_CUDA_LINEAR_H
#define TE_CUDA_LINEAR_H

#include "te_internal.h"

te_status cuda_matmul_forward(te_node *n);
te_status cuda_matmul_backward(te_node *n);
te_status cuda_linear_forward(te_node *n);
te_status cuda_linear_backward(te_node *n);

/* Native f16/bf16: every float tensor of the node the same low dtype,
 * none empty, no input in two slots; otherwise TE_LOWP_DECLINED, nothing
 * written. Operands read as they are on tensor cores, products summed in
 * f32 into an f32 scratch, rounded once into the result (n->round[],
 * n->rounded filled as the shadow path does; an accumulated gradient is
 * added to the old one in f32 before its rounding). */
te_status cuda_matmul_forward_lowp(te_node *n);
te_status cuda_matmul_backward_lowp(te_node *n);
te_status cuda_linear_forward_lowp(te_node *n);
te_status cuda_linear_backward_lowp(te_node *n);

/* Graph mode's fused producer + activation (TG_K_ACT) for a linear: act
 * (Relu, Gelu, Tanh, Sigmoid) of x w^T + b written into lin->out[0]
 * (which the caller points at the activation's output, as exec.c's
 * run_act does). cuBLASLt's RELU/RELU_BIAS/BIAS epilogues; GELU as the
 * BIAS epilogue then the exact GELU in place (cuBLASLt's GELU is the tanh
 * approximation, up to 4e-4 off the CPU's erf GELU). f32 tensors only:
 * TE_ERR_DTYPE otherwise (graph mode runs f16/bf16 producers through the
 * shadow path). */
te_status cuda_linear_act_forward(te_node *lin, te_op act);
/* tg_act_inplace on the device: y [count] = act(y), the CPU's formulas
 * (errors recorded on n). */
te_status cuda_act_inplace(te_node *n, te_op act, float *y, int64_t count);

#endif
