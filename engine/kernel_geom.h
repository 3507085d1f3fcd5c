/*
 * kernel_geom.h — shape logic the CPU and CUDA backends share: how a
 * matmul's batches map onto GEMMs, and the arguments of fused causal
 * attention (an op's, or graph mode's fused chain's). Host code only, no
 * arithmetic on tensor data: each backend runs its own kernels on them.
 */
#ifndef TE_KERNEL_GEOM_H
#define TE_KERNEL_GEOM_H

#include "graph/graph.h"
#include "te_internal.h"

/* The reduced axis splits x into [outer, len, inner]: element (o, k, i) is
 * at (o * len + k) * inner + i. TE_ALL is [1, numel, 1]. */
void te_axis_split(const te_tensor *x, int axis, int64_t *outer, int64_t *len, int64_t *inner);

/* A transpose of a source of shape s with dims a < b swapped: the source
 * viewed as five blocks (pre, s[a], mid, s[b], post) becomes (pre, s[b],
 * mid, s[a], post), so each move is a contiguous run of `post` elements. */
typedef struct te_tr_dims {
    int64_t pre, m0, mid, m1, post;
} te_tr_dims;
te_tr_dims te_tr_split(const te_tensor *t, int a, int b);

/* ---- broadcasting -----------------------------------------------------------
 * A binary op's output as merged dims: dims aligned at the end, size-1
 * output dims dropped and neighbouring dims that a and b broadcast alike
 * merged: [4,3]+[3] is 4 rows of 3, [4,3]*[1] one row of 12 with b's stride
 * 0, [2,1,3]*[1,4,1] 8 rows of 3. */
typedef struct te_bcast {
    int k;                                    /* merged dims, 1..TE_MAX_DIMS */
    int64_t d[TE_MAX_DIMS];                   /* their sizes (entries from k on unset) */
    int64_t sa[TE_MAX_DIMS], sb[TE_MAX_DIMS]; /* element strides, 0 where broadcast */
    int64_t rows, len;                        /* rows of len elements (the last merged dim) */
} te_bcast;
void te_bcast_plan(te_bcast *p, const te_tensor *a, const te_tensor *b, const te_tensor *y);

/* ---- matmul: y[..., M, N] = op(a)[..., M, K] @ op(b)[..., K, N] ------------
 * op() reads an operand transposed in its last two dims when the node says
 * so (the GEMM's trans flag). One product per batch index of y, each
 * operand at its own matrix (the same one along a dim it is broadcast on). */
typedef struct te_mm_plan {
    int M, N, K;
    bool ta, tb;
    int nb;                                   /* batch dims of y */
    int64_t d[TE_MAX_DIMS];                   /* their sizes */
    int64_t sa[TE_MAX_DIMS], sb[TE_MAX_DIMS]; /* a's and b's strides in matrices, 0 where broadcast */
    int64_t batches, na, nbm;                 /* matrices of y, a and b */
    int lda, ldb;                             /* row-major leading dims, at least 1 */
    bool tall;    /* b one matrix, a not transposed: a's matrices stack into one tall GEMM ([B*T,C] @ [C,N]) */
    bool strided; /* each operand its own matrix per batch or one for all: one strided-batched GEMM */
} te_mm_plan;
void te_mm_plan_of(const te_node *n, te_mm_plan *p);
/* The matrices of a and b that batch r of y multiplies. */
void te_mm_batch(const te_mm_plan *p, int64_t r, int64_t *ia, int64_t *ib);

/* ---- fused causal self-attention ---------------------------------------
 * q, k, v [B,H,T,D]; o and its gradient dout [B,H,T,D], or [B,T,H,D] when
 * merged (the heads side by side, as the next linear reads them); the
 * log-sum-exp of each score row lse [B,H,T] (f32); dropout p with the key
 * of the Dropout op it stands for (p 0: none). q, k, v, o, dout and the
 * gradients are all of dtype dt: f32, or f16/bf16, read as f32 and written
 * rounded once, what rounding did added to round_o and round_q/k/v (NULL:
 * not counted). */
typedef struct te_attn {
    int B, H, T, D;
    float scale, p;
    uint64_t seed;
    int64_t elem_offset; /* the Dropout op's (te_attrs.elem_offset) */
    bool merged;
    te_dtype dt;
    te_round_stats *round_o;
} te_attn;
/* The gradients to write (NULL: not wanted), each overwritten or added to
 * (in f32, then rounded once when dt is low). */
typedef struct te_attn_grads {
    void *dq, *dk, *dv;
    bool acc_q, acc_k, acc_v;
    te_round_stats *round_q, *round_k, *round_v;
} te_attn_grads;

/* Graph mode's fused chain (pass_fuse_attn.c) before its forward kernel:
 * the Dropout op's key drawn for this step, the chain's ops marked
 * unrounded, o's rounding reported as out's. The kernel reads
 * t->scores->in[0..1] (q, k), t->out->in[1] (v), writes t->o and t->lse. */
te_attn tg_attn_forward_args(const tg_attn *t);
/* Before its backward kernel: the gradients of q, k (the scores' inputs)
 * and v (out's second) to write, with their rounding reported there; dout
 * is t->o->grad. */
te_attn tg_attn_backward_args(const tg_attn *t, te_attn_grads *g);

/* ---- graph mode's batch norm fold (TG_K_BN_FOLD, pass_bn_fold.c) --------
 * The conv that runs with the folded weight and bias (k->fold_w, k->fold_b,
 * filled by the backend): *tmp a copy of k's conv node reading them, its
 * output *out a copy of the conv's whose data is the destination's, which
 * is returned: the output of the activation after the batch norm when
 * there is one (to apply in place), else the batch norm's. */
te_tensor *tg_bn_fold_conv(const tg_kernel *k, te_node *tmp, te_tensor *out);

#endif
