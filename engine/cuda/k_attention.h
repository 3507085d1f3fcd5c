/*
 * k_attention.h — the fused causal attention kernels (k_attention.cu):
 * cpu_attention.c's computation on the device, in f32, never holding the
 * T x T scores. Launchers for C; pointers are device memory.
 */
#ifndef TE_K_ATTENTION_H
#define TE_K_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* q, k, v [B,H,T,D] and o (and dout) [B,H,T,D] or, merged, [B,T,H,D], all
 * of dtype (te_dtype's value: 0 f32, 1 f16, 2 bf16); lse [B,H,T] f32.
 * Dropout when drop: element (b,h,i,j) of the probabilities is kept, and
 * scaled by keep_scale, when te_mix64(key + flat * TE_RAND_GAMMA) >= thr
 * (key = te_rand_key(seed, 0), thr = te_dropout_threshold(p)). */
typedef struct k_attn {
    int B, H, T, D;
    float scale, keep_scale;
    int drop, merged, dtype;
    unsigned long long key, thr;
} k_attn;

/* o (f32, in o's layout) and lse of every query row: online softmax over
 * the key tiles up to the diagonal; o_i = sum_j P_ij Z_ij v_j. */
cudaError_t k_attn_forward(const k_attn *a, const void *q, const void *k, const void *v, float *o, float *lse,
                           cudaStream_t s);
/* The gradients (f32; NULL: not wanted), set or added to (acc_*), from
 * P recomputed with lse: drow [B*H*T] scratch gets D_i = dout_i . o_i;
 * then one pass per key tile for dk and dv, one per query tile for dq,
 * each row of a result summed by one thread in a fixed order (no atomics).
 * cudaErrorInvalidValue when head size D needs more shared memory per
 * block than the device has. */
cudaError_t k_attn_backward(const k_attn *a, const void *q, const void *k, const void *v, const void *o,
                            const float *lse, const void *dout, float *drow, float *dq, float *dk, float *dv,
                            int acc_q, int acc_k, int acc_v, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
