/* backend_cpu.c — the CPU backend's table: its memory and services
 * (cpu_services.c) and one kernel table per direction. */
#include "cpu_kernels.h"
#include "cpu_optim.h"
#include "cpu_services.h"
#include "graph/graph.h"

/* Each op and the prefix of its kernels, PREFIX_forward and
 * PREFIX_backward; Flatten is Reshape's copy. */
#define CPU_KERNELS(K)                                                                             \
    K(MATMUL, cpu_matmul) K(LINEAR, cpu_linear) K(ADD, cpu_add) K(SUB, cpu_sub) K(MUL, cpu_mul)    \
    K(DIV, cpu_div) K(SCALE, cpu_scale) K(RELU, cpu_relu) K(GELU, cpu_gelu) K(TANH, cpu_tanh)      \
    K(SIGMOID, cpu_sigmoid) K(EXP, cpu_exp) K(LOG, cpu_log) K(SQRT, cpu_sqrt)                      \
    K(SOFTMAX, cpu_softmax) K(LOG_SOFTMAX, cpu_log_softmax)                                        \
    K(CROSS_ENTROPY, cpu_cross_entropy) K(MSE, cpu_mse) K(CONV2D, cpu_conv2d)                      \
    K(MAXPOOL2D, cpu_maxpool2d) K(AVGPOOL2D, cpu_avgpool2d)                                        \
    K(GLOBAL_AVGPOOL, cpu_global_avgpool) K(BATCHNORM, cpu_batchnorm)                              \
    K(LAYERNORM, cpu_layernorm) K(DROPOUT, cpu_dropout) K(RESHAPE, cpu_reshape)                    \
    K(FLATTEN, cpu_reshape) K(TRANSPOSE, cpu_transpose) K(SUM, cpu_sum) K(MEAN, cpu_mean)          \
    K(EMBEDDING, cpu_embedding) K(CAST, cpu_cast) K(MASKED_FILL, cpu_masked_fill)

/* Every op exactly once, or the build stops: a repeated op redeclares its
 * enumerator, and the count must be the op count. */
#define CPU_ONCE(e, k) cpu_kernels_of_##e,
enum { CPU_KERNELS(CPU_ONCE) CPU_KERNEL_ROWS };
_Static_assert((int)CPU_KERNEL_ROWS == (int)TE_OP_COUNT, "every op needs its kernels in CPU_KERNELS");

#ifdef HAVE_DNNL
#define LOWP_DNNL(dir)                                                                             \
    [TE_OP_MATMUL] = cpu_matmul_##dir##_lowp, [TE_OP_LINEAR] = cpu_linear_##dir##_lowp,            \
    [TE_OP_CONV2D] = cpu_conv2d_##dir##_lowp,
#else
#define LOWP_DNNL(dir)
#endif

#define CPU_FWD(e, k) [TE_OP_##e] = k##_forward,
#define CPU_BWD(e, k) [TE_OP_##e] = k##_backward,
const te_backend te_backend_cpu = {
    .name = "cpu",
    .device = TE_DEV_CPU,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_host = cpu_to_host,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .to_host_async = cpu_to_host_async,
    .wait = cpu_wait,
    .from_host = cpu_from_host,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .stats = cpu_stats,
    .has_nonfinite = cpu_has_nonfinite,
    .watch_flag = cpu_watch_flag,
    .watch_take = cpu_watch_take,
    .round = te_round_host,
    .widen = te_widen_host,
    .sgd = cpu_sgd,
    .adam = cpu_adam,
    .update_sums = true,
    .unscale = cpu_unscale,
    .sumsq = cpu_sumsq,
    .checksum = te_checksum_host,
    .forward = { CPU_KERNELS(CPU_FWD) },
    .backward = { CPU_KERNELS(CPU_BWD) },
    /* Native low-precision kernels: the oneDNN ones (bf16, AVX512-BF16)
     * where built with oneDNN, the portable ones always. */
    .forward_lowp = { LOWP_DNNL(forward) [TE_OP_RELU] = cpu_relu_forward_lowp,
                      [TE_OP_BATCHNORM] = cpu_batchnorm_forward_lowp,
                      [TE_OP_MAXPOOL2D] = cpu_maxpool2d_forward_lowp },
    .backward_lowp = { LOWP_DNNL(backward) [TE_OP_RELU] = cpu_relu_backward_lowp,
                       [TE_OP_BATCHNORM] = cpu_batchnorm_backward_lowp,
                       [TE_OP_MAXPOOL2D] = cpu_maxpool2d_backward_lowp },
#ifdef HAVE_DNNL
    .lowp_native = cpu_lowp_native,
#endif
    /* Graph mode's fused kernels (cpu_fused.c, cpu_attention.c); no capture. */
    .graph = { .ew_run = tg_ew_run, .act_inplace = tg_act_inplace, .bn_relu_forward = tg_bn_relu_forward,
               .bn_relu_backward = tg_bn_relu_backward, .bn_fold_run = tg_bn_fold_run,
               .attn_forward = tg_attn_forward, .attn_backward = tg_attn_backward,
               .blocked16 = cpu_conv_blocked16,
#ifdef HAVE_DNNL
               .conv_sum = cpu_conv_sum_forward,
#endif
             },
};
