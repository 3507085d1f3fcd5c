/* backend_cpu.c — the CPU backend: memory and one switch per direction. */
#include "cpu_kernels.h"

#include <stdlib.h>

static void *cpu_alloc(size_t bytes)
{
    /* 64-byte alignment for vector loads; size rounded as aligned_alloc wants. */
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static void cpu_free(void *p) { free(p); }

static te_status cpu_forward(te_node *n)
{
    switch (n->op) {
    case TE_OP_MATMUL: return cpu_matmul_forward(n);
    case TE_OP_LINEAR: return cpu_linear_forward(n);
    case TE_OP_ADD: return cpu_add_forward(n);
    case TE_OP_SUB: return cpu_sub_forward(n);
    case TE_OP_MUL: return cpu_mul_forward(n);
    case TE_OP_DIV: return cpu_div_forward(n);
    case TE_OP_SCALE: return cpu_scale_forward(n);
    case TE_OP_RELU: return cpu_relu_forward(n);
    case TE_OP_GELU: return cpu_gelu_forward(n);
    case TE_OP_TANH: return cpu_tanh_forward(n);
    case TE_OP_SIGMOID: return cpu_sigmoid_forward(n);
    case TE_OP_EXP: return cpu_exp_forward(n);
    case TE_OP_LOG: return cpu_log_forward(n);
    case TE_OP_SQRT: return cpu_sqrt_forward(n);
    case TE_OP_SOFTMAX: return cpu_softmax_forward(n);
    case TE_OP_LOG_SOFTMAX: return cpu_log_softmax_forward(n);
    case TE_OP_CROSS_ENTROPY: return cpu_cross_entropy_forward(n);
    case TE_OP_MSE: return cpu_mse_forward(n);
    case TE_OP_CONV2D: return cpu_conv2d_forward(n);
    case TE_OP_MAXPOOL2D: return cpu_maxpool2d_forward(n);
    case TE_OP_AVGPOOL2D: return cpu_avgpool2d_forward(n);
    case TE_OP_GLOBAL_AVGPOOL: return cpu_global_avgpool_forward(n);
    case TE_OP_BATCHNORM: return cpu_batchnorm_forward(n);
    case TE_OP_LAYERNORM: return cpu_layernorm_forward(n);
    case TE_OP_DROPOUT: return cpu_dropout_forward(n);
    case TE_OP_RESHAPE: return cpu_reshape_forward(n);
    case TE_OP_FLATTEN: return cpu_reshape_forward(n); /* the same copy */
    case TE_OP_TRANSPOSE: return cpu_transpose_forward(n);
    case TE_OP_SUM: return cpu_sum_forward(n);
    case TE_OP_MEAN: return cpu_mean_forward(n);
    case TE_OP_EMBEDDING: return cpu_embedding_forward(n);
    case TE_OP_CAST: return cpu_cast_forward(n);
    case TE_OP_COUNT: break;
    }
    abort();
}

static te_status cpu_backward(te_node *n)
{
    switch (n->op) {
    case TE_OP_MATMUL: return cpu_matmul_backward(n);
    case TE_OP_LINEAR: return cpu_linear_backward(n);
    case TE_OP_ADD: return cpu_add_backward(n);
    case TE_OP_SUB: return cpu_sub_backward(n);
    case TE_OP_MUL: return cpu_mul_backward(n);
    case TE_OP_DIV: return cpu_div_backward(n);
    case TE_OP_SCALE: return cpu_scale_backward(n);
    case TE_OP_RELU: return cpu_relu_backward(n);
    case TE_OP_GELU: return cpu_gelu_backward(n);
    case TE_OP_TANH: return cpu_tanh_backward(n);
    case TE_OP_SIGMOID: return cpu_sigmoid_backward(n);
    case TE_OP_EXP: return cpu_exp_backward(n);
    case TE_OP_LOG: return cpu_log_backward(n);
    case TE_OP_SQRT: return cpu_sqrt_backward(n);
    case TE_OP_SOFTMAX: return cpu_softmax_backward(n);
    case TE_OP_LOG_SOFTMAX: return cpu_log_softmax_backward(n);
    case TE_OP_CROSS_ENTROPY: return cpu_cross_entropy_backward(n);
    case TE_OP_MSE: return cpu_mse_backward(n);
    case TE_OP_CONV2D: return cpu_conv2d_backward(n);
    case TE_OP_MAXPOOL2D: return cpu_maxpool2d_backward(n);
    case TE_OP_AVGPOOL2D: return cpu_avgpool2d_backward(n);
    case TE_OP_GLOBAL_AVGPOOL: return cpu_global_avgpool_backward(n);
    case TE_OP_BATCHNORM: return cpu_batchnorm_backward(n);
    case TE_OP_LAYERNORM: return cpu_layernorm_backward(n);
    case TE_OP_DROPOUT: return cpu_dropout_backward(n);
    case TE_OP_RESHAPE: return cpu_reshape_backward(n);
    case TE_OP_FLATTEN: return cpu_reshape_backward(n);
    case TE_OP_TRANSPOSE: return cpu_transpose_backward(n);
    case TE_OP_SUM: return cpu_sum_backward(n);
    case TE_OP_MEAN: return cpu_mean_backward(n);
    case TE_OP_EMBEDDING: return cpu_embedding_backward(n);
    case TE_OP_CAST: return cpu_cast_backward(n);
    case TE_OP_COUNT: break;
    }
    abort();
}

const te_backend te_backend_cpu = {
    /* .name = */ "cpu",
    /* .alloc = */ cpu_alloc,
    /* .free = */ cpu_free,
    /* .forward = */ cpu_forward,
    /* .backward = */ cpu_backward,
};
