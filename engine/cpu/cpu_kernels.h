/*
 * cpu_kernels.h — the CPU backend's kernels, forward and backward of each op.
 * Each pair lives side by side in one file of engine/cpu/.
 */
#ifndef TE_CPU_KERNELS_H
#define TE_CPU_KERNELS_H

#include "../kernel_geom.h"
#include "../te_internal.h"

/* Row-major C = alpha * op(A) op(B) + beta * C, split across the OpenMP
 * team (one thread inside a parallel region). */
void cpu_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);

#ifdef HAVE_DNNL
/* bf16 through oneDNN (cpu_lowp.c): the backend's forward_lowp/backward_lowp. */
const char *cpu_lowp_native(void);
te_status cpu_matmul_forward_lowp(te_node *n);
te_status cpu_matmul_backward_lowp(te_node *n);
te_status cpu_linear_forward_lowp(te_node *n);
te_status cpu_linear_backward_lowp(te_node *n);
te_status cpu_conv2d_forward_lowp(te_node *n);
te_status cpu_conv2d_backward_lowp(te_node *n);
/* f32 Conv2D through oneDNN (cpu_conv_dnnl.c), tried first by
 * cpu_conv2d_forward/backward: TE_LOWP_DECLINED, nothing changed, when it
 * does not take the node. cpu_conv_dnnl: its name, NULL when off. */
const char *cpu_conv_dnnl(void);
te_status cpu_conv2d_forward_dnnl(te_node *n);
te_status cpu_conv2d_backward_dnnl(te_node *n);
/* Whether graph mode may keep conv chains' values in nChw16c
 * (pass_layout.c): oneDNN's f32 convolutions are on and choose that
 * layout (AVX-512). */
bool cpu_conv_blocked16(void);
/* Graph mode's conv + add in one kernel (pass_fuse_sum.c). */
te_status cpu_conv_sum_forward(te_node *conv, te_node *add);
#else
static inline const char *cpu_conv_dnnl(void) { return NULL; }
static inline bool cpu_conv_blocked16(void) { return false; }
static inline te_status cpu_conv2d_forward_dnnl(te_node *n) { (void)n; return TE_LOWP_DECLINED; }
static inline te_status cpu_conv2d_backward_dnnl(te_node *n) { (void)n; return TE_LOWP_DECLINED; }
#endif

/* Portable native low-precision kernels (f16 and bf16, any CPU): the
 * shadow path's bits and rounding records without f32 copies of whole
 * tensors (cpu_lowp_ew.c, cpu_norm.c, cpu_conv.c). */
te_status cpu_relu_forward_lowp(te_node *n);
te_status cpu_relu_backward_lowp(te_node *n);
te_status cpu_batchnorm_forward_lowp(te_node *n);
te_status cpu_batchnorm_backward_lowp(te_node *n);
te_status cpu_maxpool2d_forward_lowp(te_node *n);
te_status cpu_maxpool2d_backward_lowp(te_node *n);
/* Their helpers (cpu_lowp_ew.c): rounding records cleared to dtype dt,
 * one thread's part added into another's, and per-thread f32 scratch of
 * per_thread floats for threads threads where half (NULL and *bytes 0 for
 * f32; free with te_mem_free(p, *bytes)). */
bool cpu_is_half(const te_tensor *t);
void cpu_round_stats_init(te_round_stats *st, te_dtype dt);
void cpu_round_stats_merge(te_round_stats *into, const te_round_stats *part);
float *cpu_half_scratch(bool half, int64_t per_thread, int threads, size_t *bytes);

te_status cpu_matmul_forward(te_node *n);
te_status cpu_matmul_backward(te_node *n);
te_status cpu_linear_forward(te_node *n);
te_status cpu_linear_backward(te_node *n);
te_status cpu_add_forward(te_node *n);
te_status cpu_add_backward(te_node *n);
te_status cpu_sub_forward(te_node *n);
te_status cpu_sub_backward(te_node *n);
te_status cpu_mul_forward(te_node *n);
te_status cpu_mul_backward(te_node *n);
te_status cpu_div_forward(te_node *n);
te_status cpu_div_backward(te_node *n);
te_status cpu_scale_forward(te_node *n);
te_status cpu_scale_backward(te_node *n);
te_status cpu_relu_forward(te_node *n);
te_status cpu_relu_backward(te_node *n);
te_status cpu_gelu_forward(te_node *n);
te_status cpu_gelu_backward(te_node *n);
te_status cpu_tanh_forward(te_node *n);
te_status cpu_tanh_backward(te_node *n);
te_status cpu_sigmoid_forward(te_node *n);
te_status cpu_sigmoid_backward(te_node *n);
te_status cpu_exp_forward(te_node *n);
te_status cpu_exp_backward(te_node *n);
te_status cpu_log_forward(te_node *n);
te_status cpu_log_backward(te_node *n);
te_status cpu_sqrt_forward(te_node *n);
te_status cpu_sqrt_backward(te_node *n);
te_status cpu_softmax_forward(te_node *n);
te_status cpu_softmax_backward(te_node *n);
te_status cpu_log_softmax_forward(te_node *n);
te_status cpu_log_softmax_backward(te_node *n);
te_status cpu_cross_entropy_forward(te_node *n);
te_status cpu_cross_entropy_backward(te_node *n);
te_status cpu_mse_forward(te_node *n);
te_status cpu_mse_backward(te_node *n);
te_status cpu_conv2d_forward(te_node *n);
te_status cpu_conv2d_backward(te_node *n);
te_status cpu_maxpool2d_forward(te_node *n);
te_status cpu_maxpool2d_backward(te_node *n);
te_status cpu_avgpool2d_forward(te_node *n);
te_status cpu_avgpool2d_backward(te_node *n);
te_status cpu_global_avgpool_forward(te_node *n);
te_status cpu_global_avgpool_backward(te_node *n);
te_status cpu_batchnorm_forward(te_node *n);
te_status cpu_batchnorm_backward(te_node *n);
/* Batch norm with the ReLU after it, in one pass each way (graph mode). */
te_status cpu_batchnorm_relu_forward(te_node *bn, te_node *relu);
te_status cpu_batchnorm_relu_backward(te_node *bn, te_node *relu);
/* The same with x (and its gradient) in nChw16c, C and H * W multiples
 * of 16: y is the batch norm's output or, relu set, its ReLU's; y and its
 * gradient in nChw16c too where flagged so, else NCHW
 * (cpu_norm_blocked.c; cpu_batchnorm_* call them). */
te_status cpu_bn_blocked_forward(te_node *n, te_tensor *y, bool relu);
te_status cpu_bn_blocked_backward(te_node *n, const te_tensor *y, bool relu);
/* Max pool and global average pool with x (and its gradient) in nChw16c,
 * C % 16 == 0; max pool's y and argmax too (cpu_pool_blocked.c;
 * cpu_maxpool2d_* and cpu_global_avgpool_* call them). */
te_status cpu_maxpool_blocked_forward(te_node *n);
te_status cpu_maxpool_blocked_backward(te_node *n);
te_status cpu_gap_blocked_forward(te_node *n);
te_status cpu_gap_blocked_backward(te_node *n);
te_status cpu_layernorm_forward(te_node *n);
te_status cpu_layernorm_backward(te_node *n);
te_status cpu_dropout_forward(te_node *n);
te_status cpu_dropout_backward(te_node *n);
te_status cpu_reshape_forward(te_node *n);
te_status cpu_reshape_backward(te_node *n);
te_status cpu_transpose_forward(te_node *n);
te_status cpu_transpose_backward(te_node *n);
te_status cpu_sum_forward(te_node *n);
te_status cpu_sum_backward(te_node *n);
te_status cpu_mean_forward(te_node *n);
te_status cpu_mean_backward(te_node *n);
te_status cpu_embedding_forward(te_node *n);
te_status cpu_embedding_backward(te_node *n);
te_status cpu_cast_forward(te_node *n);
te_status cpu_cast_backward(te_node *n);
te_status cpu_masked_fill_forward(te_node *n);
te_status cpu_masked_fill_backward(te_node *n);

/* Fused causal self-attention (cpu_attention.c): kernel_geom.h's te_attn;
 * f16/bf16 results rounded once by te_round_block. */
void cpu_attention_forward(const te_attn *a, const void *q, const void *k, const void *v, void *o, float *lse);
void cpu_attention_backward(const te_attn *a, const void *q, const void *k, const void *v, const void *o,
                            const float *lse, const void *dout, const te_attn_grads *g);

#endif
