/* backend_cpu.c — the CPU backend: memory and one kernel table per direction. */
#include "cpu_kernels.h"

#include <stdlib.h>

_Static_assert(TE_OP_COUNT == 32, "a new op needs its kernels in both tables below");

static void *cpu_alloc(size_t bytes)
{
    /* 64-byte alignment for vector loads; size rounded as aligned_alloc wants. */
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static void cpu_free(void *p) { free(p); }

/* One kernel per op and direction; Flatten is Reshape's copy. */
const te_backend te_backend_cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .forward = {
        [TE_OP_MATMUL] = cpu_matmul_forward,
        [TE_OP_LINEAR] = cpu_linear_forward,
        [TE_OP_ADD] = cpu_add_forward,
        [TE_OP_SUB] = cpu_sub_forward,
        [TE_OP_MUL] = cpu_mul_forward,
        [TE_OP_DIV] = cpu_div_forward,
        [TE_OP_SCALE] = cpu_scale_forward,
        [TE_OP_RELU] = cpu_relu_forward,
        [TE_OP_GELU] = cpu_gelu_forward,
        [TE_OP_TANH] = cpu_tanh_forward,
        [TE_OP_SIGMOID] = cpu_sigmoid_forward,
        [TE_OP_EXP] = cpu_exp_forward,
        [TE_OP_LOG] = cpu_log_forward,
        [TE_OP_SQRT] = cpu_sqrt_forward,
        [TE_OP_SOFTMAX] = cpu_softmax_forward,
        [TE_OP_LOG_SOFTMAX] = cpu_log_softmax_forward,
        [TE_OP_CROSS_ENTROPY] = cpu_cross_entropy_forward,
        [TE_OP_MSE] = cpu_mse_forward,
        [TE_OP_CONV2D] = cpu_conv2d_forward,
        [TE_OP_MAXPOOL2D] = cpu_maxpool2d_forward,
        [TE_OP_AVGPOOL2D] = cpu_avgpool2d_forward,
        [TE_OP_GLOBAL_AVGPOOL] = cpu_global_avgpool_forward,
        [TE_OP_BATCHNORM] = cpu_batchnorm_forward,
        [TE_OP_LAYERNORM] = cpu_layernorm_forward,
        [TE_OP_DROPOUT] = cpu_dropout_forward,
        [TE_OP_RESHAPE] = cpu_reshape_forward,
        [TE_OP_FLATTEN] = cpu_reshape_forward,
        [TE_OP_TRANSPOSE] = cpu_transpose_forward,
        [TE_OP_SUM] = cpu_sum_forward,
        [TE_OP_MEAN] = cpu_mean_forward,
        [TE_OP_EMBEDDING] = cpu_embedding_forward,
        [TE_OP_CAST] = cpu_cast_forward,
    },
    .backward = {
        [TE_OP_MATMUL] = cpu_matmul_backward,
        [TE_OP_LINEAR] = cpu_linear_backward,
        [TE_OP_ADD] = cpu_add_backward,
        [TE_OP_SUB] = cpu_sub_backward,
        [TE_OP_MUL] = cpu_mul_backward,
        [TE_OP_DIV] = cpu_div_backward,
        [TE_OP_SCALE] = cpu_scale_backward,
        [TE_OP_RELU] = cpu_relu_backward,
        [TE_OP_GELU] = cpu_gelu_backward,
        [TE_OP_TANH] = cpu_tanh_backward,
        [TE_OP_SIGMOID] = cpu_sigmoid_backward,
        [TE_OP_EXP] = cpu_exp_backward,
        [TE_OP_LOG] = cpu_log_backward,
        [TE_OP_SQRT] = cpu_sqrt_backward,
        [TE_OP_SOFTMAX] = cpu_softmax_backward,
        [TE_OP_LOG_SOFTMAX] = cpu_log_softmax_backward,
        [TE_OP_CROSS_ENTROPY] = cpu_cross_entropy_backward,
        [TE_OP_MSE] = cpu_mse_backward,
        [TE_OP_CONV2D] = cpu_conv2d_backward,
        [TE_OP_MAXPOOL2D] = cpu_maxpool2d_backward,
        [TE_OP_AVGPOOL2D] = cpu_avgpool2d_backward,
        [TE_OP_GLOBAL_AVGPOOL] = cpu_global_avgpool_backward,
        [TE_OP_BATCHNORM] = cpu_batchnorm_backward,
        [TE_OP_LAYERNORM] = cpu_layernorm_backward,
        [TE_OP_DROPOUT] = cpu_dropout_backward,
        [TE_OP_RESHAPE] = cpu_reshape_backward,
        [TE_OP_FLATTEN] = cpu_reshape_backward,
        [TE_OP_TRANSPOSE] = cpu_transpose_backward,
        [TE_OP_SUM] = cpu_sum_backward,
        [TE_OP_MEAN] = cpu_mean_backward,
        [TE_OP_EMBEDDING] = cpu_embedding_backward,
        [TE_OP_CAST] = cpu_cast_backward,
    },
};
