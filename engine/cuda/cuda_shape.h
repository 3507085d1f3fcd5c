/*
 * cuda_shape.h — the CUDA backend's data-movement kernels (te_kernel_fn,
 * the same semantics as engine/cpu/cpu_shape.c's): reshape (Flatten's too:
 * the table maps FLATTEN to cuda_reshape_*, as the CPU's does), transpose
 * and embedding. Cast and dropout are in cuda_cast.h and cuda_elementwise.h.
 */
#ifndef TE_CUDA_SHAPE_H
#define TE_CUDA_SHAPE_H

#include "te_internal.h"

te_status cuda_reshape_forward(te_node *n);
te_status cuda_reshape_backward(te_node *n);
te_status cuda_transpose_forward(te_node *n);
te_status cuda_transpose_backward(te_node *n);
/* An index outside [0, V) fails as the op's front end does on the CPU
 * (TE_ERR_ARG, the same message), found by the device's bad-data flag. */
te_status cuda_embedding_forward(te_node *n);
te_status cuda_embedding_backward(te_node *n);

#endif
