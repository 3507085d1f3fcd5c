/*
 * cuda_linear.c — matmul and linear on the CUDA backend, forward and
 * backward, with engine/cpu/cpu_linear.c's semantics: the same products,
 * the same batch broadcasting, the same acc rule (beta 1 when a gradient
 * accumulates, 0 otherwise); and their native f16/bf16 kernels (tensor
 * cores, f32 sums, one rounding: cpu_lowp.c's contract).
 *
 * f32 GEMMs compute in CUBLAS_COMPUTE_32F (TF32 only with
 * TDBG_CUDA_TF32=1), so they stay within 1e-5 of the CPU's. Determinism
 * (time travel's replays): cuBLAS gives the same bits on every run on one
 * GPU model with one stream per handle and atomics not allowed (cuda_rt.c
 * sets both); cuBLASLt's heuristic is asked with a fixed workspace size. The bias's
 * gradient is a column sum in the CPU's order (k_col_sums). Every call is
 * queued on the backend's stream; nothing here waits, except the native
 * kernels' rounding, whose counts the host must read.
 */
#include "cuda/cuda_linear.h"

#include "cuda/cuda_cast.h"
#include "cuda/cuda_rt.h"
#include "cuda/k_linear.h"
#include "kernel_geom.h"

#include <string.h>

/* A leading dimension BLAS accepts: at least 1 even for an empty dim. */
static int ld(int64_t cols) { return cols > 0 ? (int)cols : 1; }

static const void *at(const void *p, te_dtype dt, int64_t i)
{
    return (const char *)p + i * (int64_t)(dt == TE_F32 ? sizeof(float) : sizeof(uint16_t));
}

/* ---- row-major GEMMs on column-major cuBLAS ---------------------------------
 * cpu_sgemm's row-major C[M,N] = op(A)[M,K] op(B)[K,N], A and B of dtype
 * dt, C f32. A row-major matrix with r rows, c columns and row stride ld
 * is, read by column-major cuBLAS at the same address with the same ld,
 * its transpose (c x r). So cuBLAS, asked for the column-major product
 *     C^T [N,M] = op(B)^T [N,K] op(A)^T [K,M],
 * writes exactly the row-major C. op(B)^T is the stored B as cuBLAS sees
 * it when B is not transposed (stored [K,N] = column-major B^T [N,K]):
 * CUBLAS_OP_N; when it is (stored [N,K] = column-major [K,N]), CUBLAS_OP_T.
 * The same for A. Hence: swap the operands, pass m = N, n = M, k = K,
 * each operand with its own row-major ld and its own trans flag:
 *     gemm(tb, ta, N, M, K, B, ldb, A, lda, C, ldc).
 * Batched: count products, each operand's matrices sa, sb, sc elements
 * apart (0: the same matrix for every product).
 */
typedef struct gemm_args {
    bool ta, tb;
    int M, N, K;
    const void *A, *B;
    float *C;
    int lda, ldb, ldc;
    int64_t count, sa, sb, sc;
    te_dtype dt;
} gemm_args;

static cudaDataType_t cu_dtype(te_dtype dt)
{
    return dt == TE_F16 ? CUDA_R_16F : dt == TE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* C = A B + beta C (beta 0 or 1), g.count times. */
static te_status gemm(te_node *n, const gemm_args *g, float beta)
{
    if (g->M <= 0 || g->N <= 0 || g->count <= 0)
        return TE_OK;
    cudaStream_t s = te_cuda_stream();
    if (g->K <= 0) { /* nothing to sum: C = beta C (C's rows are ldc = N apart) */
        for (int64_t i = 0; beta == 0.0f && i < g->count; i++) {
            te_status st = te_cuda_ok(n, cudaMemsetAsync(g->C + i * g->sc, 0, (size_t)g->M * g->ldc * sizeof(float), s),
                                      "zeroing an empty product");
            if (st != TE_OK)
                return st;
        }
        return TE_OK;
    }
    const float alpha = 1.0f;
    const cudaDataType_t t = cu_dtype(g->dt);
    const cublasComputeType_t ct =
        g->dt == TE_F32 && te_cuda_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t opa = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t cs;
    if (g->count == 1)
        cs = cublasGemmEx(te_cuda_cublas(), opb, opa, g->N, g->M, g->K, &alpha, g->B, t, g->ldb, g->A, t, g->lda,
                          &beta, g->C, CUDA_R_32F, g->ldc, ct, CUBLAS_GEMM_DEFAULT);
    else
        cs = cublasGemmStridedBatchedEx(te_cuda_cublas(), opb, opa, g->N, g->M, g->K, &alpha, g->B, t, g->ldb,
                                        g->sb, g->A, t, g->lda, g->sa, &beta, g->C, CUDA_R_32F, g->ldc, g->sc,
                                        (int)g->count, ct, CUBLAS_GEMM_DEFAULT);
    return te_cublas_ok(n, cs, g->count == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx");
}

/* ---- matmul: y[..., M, N] = op(a)[..., M, K] @ op(b)[..., K, N] ------------
 * kernel_geom.h's plan (cpu_linear.c's too): one product per batch of y,
 * each operand at its own matrix (the same one along a dim it is broadcast
 * on). Where each operand
 * has either a matrix per batch or one for all, the batches are one
 * strided-batched GEMM (stride 0 for the shared one); b one matrix and a
 * not transposed: one tall GEMM, as on the CPU; other broadcasts: a GEMM
 * per batch, queued in order.
 */
static te_status mm_forward(te_node *n, const te_mm_plan *p, te_dtype dt, float *Y)
{
    const void *A = n->in[0]->data, *B = n->in[1]->data;
    const int64_t sa = (int64_t)p->M * p->K, sb = (int64_t)p->K * p->N, sy = (int64_t)p->M * p->N;
    gemm_args g = { .ta = p->ta, .tb = p->tb, .M = p->M, .N = p->N, .K = p->K, .A = A, .B = B, .C = Y,
                    .lda = p->lda, .ldb = p->ldb, .ldc = ld(p->N), .count = 1, .dt = dt };
    if (p->tall) {
        g.M = (int)(p->batches * p->M);
        return gemm(n, &g, 0.0f);
    }
    if (p->strided) {
        g.count = p->batches;
        g.sa = p->na == 1 ? 0 : sa;
        g.sb = p->nbm == 1 ? 0 : sb;
        g.sc = sy;
        return gemm(n, &g, 0.0f);
    }
    for (int64_t r = 0; r < p->batches; r++) {
        int64_t ia, ib;
        te_mm_batch(p, r, &ia, &ib);
        g.A = at(A, dt, ia * sa);
        g.B = at(B, dt, ib * sb);
        g.C = Y + r * sy;
        te_status st = gemm(n, &g, 0.0f);
        if (st != TE_OK)
            return st;
    }
    return TE_OK;
}

/* One batch's share of the gradient of operand `which` (0 a, 1 b): dy G
 * [M,N] with the other operand's matrix O, into D; sG, sO, sD their
 * strides when batched. The products of cpu_linear.c's mm_grad_a/b. */
static gemm_args grad_args(const te_mm_plan *p, int which, const void *G, const void *O, float *D, te_dtype dt,
                           int64_t sG, int64_t sO, int64_t sD)
{
    const int ldg = ld(p->N);
    if (which == 0 && !p->ta) /* da [M,K] = dy @ op(b)^T */
        return (gemm_args){ false, !p->tb, p->M, p->K, p->N, G, O, D, ldg, p->ldb, ld(p->K), 1, sG, sO, sD, dt };
    if (which == 0) /* a is [K,M]: da = op(b) @ dy^T */
        return (gemm_args){ p->tb, true, p->K, p->M, p->N, O, G, D, p->ldb, ldg, ld(p->M), 1, sO, sG, sD, dt };
    if (!p->tb) /* db [K,N] = op(a)^T @ dy */
        return (gemm_args){ !p->ta, false, p->K, p->N, p->M, O, G, D, p->lda, ldg, ld(p->N), 1, sO, sG, sD, dt };
    /* b is [N,K]: db = dy^T @ op(a) */
    return (gemm_args){ true, p->ta, p->N, p->K, p->M, G, O, D, ldg, p->lda, ld(p->K), 1, sG, sO, sD, dt };
}

/* The gradient of operand `which` into D (f32), added to D when acc:
 * matrix j of it sums the products of every batch of y that used it, in
 * batch order (beta 0 for the first unless acc), as cpu_linear.c's
 * mm_grad; a strided-batched GEMM where each of its matrices has exactly
 * one batch. */
static te_status mm_grad(te_node *n, const te_mm_plan *p, int which, te_dtype dt, float *D, bool acc)
{
    const void *G = n->out[0]->grad->data, *O = n->in[1 - which]->data;
    if (p->tall) {
        te_mm_plan tall = *p;
        tall.M = (int)(p->batches * p->M);
        gemm_args g = grad_args(&tall, which, G, O, D, dt, 0, 0, 0);
        return gemm(n, &g, acc ? 1.0f : 0.0f);
    }
    const int64_t count = which ? p->nbm : p->na, ocount = which ? p->na : p->nbm;
    const int64_t sx = (int64_t)p->K * (which ? p->N : p->M), so = (int64_t)p->K * (which ? p->M : p->N);
    const int64_t sy = (int64_t)p->M * p->N;
    if (count == p->batches && (ocount == p->batches || ocount == 1)) {
        gemm_args g = grad_args(p, which, G, O, D, dt, sy, ocount == 1 ? 0 : so, sx);
        g.count = p->batches;
        return gemm(n, &g, acc ? 1.0f : 0.0f);
    }
    cudaStream_t s = te_cuda_stream();
    for (int64_t j = 0; j < count; j++) {
        bool first = true;
        for (int64_t r = 0; r < p->batches; r++) {
            int64_t ia, ib;
            te_mm_batch(p, r, &ia, &ib);
            if ((which ? ib : ia) != j)
                continue;
            gemm_args g = grad_args(p, which, at(G, dt, r * sy), at(O, dt, (which ? ia : ib) * so), D + j * sx, dt,
                                    0, 0, 0);
            te_status st = gemm(n, &g, first && !acc ? 0.0f : 1.0f);
            if (st != TE_OK)
                return st;
            first = false;
        }
        if (first && !acc) { /* no batch used it (y is empty) */
            te_status st = te_cuda_ok(n, cudaMemsetAsync(D + j * sx, 0, (size_t)sx * sizeof *D, s), "zeroing a gradient");
            if (st != TE_OK)
                return st;
        }
    }
    return TE_OK;
}

te_status cuda_matmul_forward(te_node *n)
{
    te_mm_plan p;
    te_mm_plan_of(n, &p);
    return mm_forward(n, &p, TE_F32, te_f32(n->out[0]));
}

te_status cuda_matmul_backward(te_node *n)
{
    te_mm_plan p;
    te_mm_plan_of(n, &p);
    for (int which = 0; which < 2; which++) {
        te_tensor *x = n->in[which];
        if (!te_needs_grad(x))
            continue;
        int acc;
        float *D = te_grad_buf(x, &acc);
        te_status st = mm_grad(n, &p, which, TE_F32, D, acc);
        if (st != TE_OK)
            return st;
    }
    return TE_OK;
}

/* ---- linear: y [N,O] = x [N,K] @ w[O,K]^T + b[O] ------------------------- */

/* y [N,O] (f32) = x w^T (+ b's rows, b of dtype dt) */
static te_status linear_forward(te_node *n, te_dtype dt, float *y)
{
    const te_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    const int N = (int)x->shape[0], K = (int)x->shape[1], O = (int)w->shape[0];
    if (b) { /* start from the bias rows and add the product onto them */
        te_status st = te_cuda_ok(n, k_bias_rows(y, b->data, dt, N, O, te_cuda_stream()), "linear bias rows");
        if (st != TE_OK)
            return st;
    }
    gemm_args g = { false, true, N, O, K, x->data, w->data, y, ld(K), ld(K), ld(O), 1, 0, 0, 0, dt };
    return gemm(n, &g, b ? 1.0f : 0.0f);
}

/* dx [N,K] = dy [N,O] @ w [O,K] */
static gemm_args linear_dx(const te_node *n, te_dtype dt, float *dx)
{
    const int N = (int)n->in[0]->shape[0], K = (int)n->in[0]->shape[1], O = (int)n->in[1]->shape[0];
    return (gemm_args){ false, false, N, K, O, n->out[0]->grad->data, n->in[1]->data, dx, ld(O), ld(K), ld(K),
                        1, 0, 0, 0, dt };
}

/* dw [O,K] = dy^T @ x */
static gemm_args linear_dw(const te_node *n, te_dtype dt, float *dw)
{
    const int N = (int)n->in[0]->shape[0], K = (int)n->in[0]->shape[1], O = (int)n->in[1]->shape[0];
    return (gemm_args){ true, false, O, K, N, n->out[0]->grad->data, n->in[0]->data, dw, ld(O), ld(K), ld(K),
                        1, 0, 0, 0, dt };
}

te_status cuda_linear_forward(te_node *n)
{
    return linear_forward(n, TE_F32, te_f32(n->out[0]));
}

te_status cuda_linear_backward(te_node *n)
{
    te_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    te_status st = TE_OK;
    int acc;
    if (st == TE_OK && te_needs_grad(x)) {
        float *dx = te_grad_buf(x, &acc);
        gemm_args g = linear_dx(n, TE_F32, dx);
        st = gemm(n, &g, acc ? 1.0f : 0.0f);
    }
    if (st == TE_OK && te_needs_grad(w)) {
        float *dw = te_grad_buf(w, &acc);
        gemm_args g = linear_dw(n, TE_F32, dw);
        st = gemm(n, &g, acc ? 1.0f : 0.0f);
    }
    if (st == TE_OK && te_needs_grad(b)) { /* db [O] = column sums of dy */
        float *db = te_grad_buf(b, &acc);
        st = te_cuda_ok(n, k_col_sums(n->out[0]->grad->data, TE_F32, x->shape[0], w->shape[0], db, acc,
                                      te_cuda_stream()), "linear bias gradient");
    }
    return st;
}

/* ---- native f16/bf16 ---------------------------------------------------------
 * Each result is computed in f32 into the workspace (its first 64 bytes
 * the rounding's counters), then rounded into the real tensor, one result
 * at a time (the workspace holds one).
 */

/* Every float tensor of n of one low dtype (returned), none empty, no
 * input in two slots (their gradients would have to meet before rounding);
 * TE_F32 when n is not one to take. */
static te_dtype lp_takes(const te_node *n)
{
    te_dtype dt = n->in[0]->dtype;
    if (dt != TE_F16 && dt != TE_BF16)
        return TE_F32;
    for (int i = 0; i < n->n_in; i++) {
        const te_tensor *x = n->in[i];
        if (!x)
            continue;
        if (x->dtype != dt || x->numel == 0)
            return TE_F32;
        for (int j = 0; j < i; j++)
            if (n->in[j] == x)
                return TE_F32;
    }
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k]->dtype != dt || n->out[k]->numel == 0)
            return TE_F32;
    return dt;
}

/* f32 scratch of numel floats. */
static float *lp_scratch(te_node *n, int64_t numel, te_status *st)
{
    float *p = te_cuda_workspace((size_t)numel * sizeof(float));
    *st = p ? TE_OK
            : te_kernel_fail(n, TE_ERR_NOMEM, "out of device memory for a %lld-element f32 result", (long long)numel);
    return p;
}

/* t = f rounded (f: t->numel f32 values), what rounding did into *rs. */
static te_status lp_round(te_node *n, const float *f, te_tensor *t, te_round_stats *rs)
{
    te_round_stats c = { .dtype = t->dtype };
    te_status st = cuda_round_on(n, f, t->data, t->dtype, t->numel, &c, "rounding the f32 result");
    if (st != TE_OK)
        return st;
    *rs = c;
    n->rounded = true;
    return TE_OK;
}

/* Input i's gradient from f (its f32 value, overwritten): added to the
 * old gradient in f32 when it accumulates, then rounded once. */
static te_status lp_grad_done(te_node *n, int i, float *f, int acc)
{
    te_tensor *x = n->in[i];
    if (acc) {
        te_status st = te_cuda_ok(n,
                                  k_convert(x->grad->data, (k_dtype)x->dtype, f, K_F32, x->numel, 1, NULL,
                                            te_cuda_stream()),
                                  "adding the old gradient");
        if (st != TE_OK)
            return st;
    }
    return lp_round(n, f, x->grad, &n->round[i]);
}

te_status cuda_matmul_forward_lowp(te_node *n)
{
    const te_dtype dt = lp_takes(n);
    if (dt == TE_F32)
        return TE_LOWP_DECLINED;
    te_mm_plan p;
    te_mm_plan_of(n, &p);
    te_status st;
    float *y = lp_scratch(n, n->out[0]->numel, &st);
    if (y)
        st = mm_forward(n, &p, dt, y);
    return st == TE_OK ? lp_round(n, y, n->out[0], &n->round[0]) : st;
}

te_status cuda_matmul_backward_lowp(te_node *n)
{
    const te_dtype dt = lp_takes(n);
    if (dt == TE_F32)
        return TE_LOWP_DECLINED;
    te_mm_plan p;
    te_mm_plan_of(n, &p);
    for (int which = 0; which < 2; which++) {
        te_tensor *x = n->in[which];
        if (!te_needs_grad(x))
            continue;
        int acc;
        te_grad_buf(x, &acc);
        te_status st;
        float *g = lp_scratch(n, x->numel, &st);
        if (g)
            st = mm_grad(n, &p, which, dt, g, false);
        if (st == TE_OK)
            st = lp_grad_done(n, which, g, acc);
        if (st != TE_OK)
            return st;
    }
    return TE_OK;
}

te_status cuda_linear_forward_lowp(te_node *n)
{
    const te_dtype dt = lp_takes(n);
    if (dt == TE_F32)
        return TE_LOWP_DECLINED;
    te_status st;
    float *y = lp_scratch(n, n->out[0]->numel, &st);
    if (y)
        st = linear_forward(n, dt, y);
    return st == TE_OK ? lp_round(n, y, n->out[0], &n->round[0]) : st;
}

te_status cuda_linear_backward_lowp(te_node *n)
{
    const te_dtype dt = lp_takes(n);
    if (dt == TE_F32)
        return TE_LOWP_DECLINED;
    for (int i = 0; i < 3; i++) {
        te_tensor *x = n->in[i];
        if (!te_needs_grad(x))
            continue;
        int acc;
        te_grad_buf(x, &acc);
        te_status st;
        float *g = lp_scratch(n, x->numel, &st);
        if (g && i < 2) {
            gemm_args a = i == 0 ? linear_dx(n, dt, g) : linear_dw(n, dt, g);
            st = gemm(n, &a, 0.0f);
        } else if (g) { /* db [O] = column sums of dy, in f32 */
            st = te_cuda_ok(n, k_col_sums(n->out[0]->grad->data, dt, n->in[0]->shape[0], x->numel, g, 0,
                                          te_cuda_stream()), "linear bias gradient");
        }
        if (st == TE_OK)
            st = lp_grad_done(n, i, g, acc);
        if (st != TE_OK)
            return st;
    }
    return TE_OK;
}

/* ---- graph mode's linear + activation -------------------------------------- */

static int k_act_of(te_op act)
{
    switch (act) {
    case TE_OP_RELU: return K_ACT_RELU;
    case TE_OP_GELU: return K_ACT_GELU;
    case TE_OP_TANH: return K_ACT_TANH;
    case TE_OP_SIGMOID: return K_ACT_SIGMOID;
    default: return -1;
    }
}

te_status cuda_act_inplace(te_node *n, te_op act, float *y, int64_t count)
{
    const int k = k_act_of(act);
    if (k < 0)
        return te_kernel_fail(n, TE_ERR_ARG, "%s is not an activation a producer can run in place",
                              te_op_type_name(act));
    return te_cuda_ok(n, k_act_inplace(k, y, count, te_cuda_stream()), "activation in place");
}

#define LT_WORKSPACE ((size_t)8 << 20)

/* The cuBLASLt objects of one call, destroyed together. */
typedef struct lt_call {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
} lt_call;

static void lt_free(lt_call *l)
{
    if (l->pref)
        cublasLtMatmulPreferenceDestroy(l->pref);
    if (l->c)
        cublasLtMatrixLayoutDestroy(l->c);
    if (l->b)
        cublasLtMatrixLayoutDestroy(l->b);
    if (l->a)
        cublasLtMatrixLayoutDestroy(l->a);
    if (l->op)
        cublasLtMatmulDescDestroy(l->op);
}

/* y = epilogue(x w^T (+ b)), row-major y [N,O]: column-major y^T [O,N] =
 * op(A) B with A the stored w read transposed (column-major [K,O], OP_T)
 * and B the stored x (column-major [K,N]); the bias, one per row of the
 * column-major D, is b [O]. */
static te_status lt_linear(te_node *n, const float *x, const float *w, const float *b, float *y, int N, int K,
                           int O, cublasLtEpilogue_t epi)
{
    lt_call l = { 0 };
    const cublasComputeType_t ct = te_cuda_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    void *ws = te_cuda_workspace(LT_WORKSPACE);
    const uint64_t ws_bytes = ws ? LT_WORKSPACE : 0;
    /* The heuristic's choice depends on the workspace offered: without it
     * another algorithm (other bits) would run. While recording, a replay
     * must run the recorded algorithm, so that is an error instead. */
    if (!ws && te_rec_on)
        return te_kernel_fail(n, TE_ERR_NOMEM,
                              "linear: no %zu bytes of cuBLASLt workspace; while recording, a smaller one would "
                              "pick another algorithm and the replay would differ",
                              LT_WORKSPACE);
    cublasStatus_t s = cublasLtMatmulDescCreate(&l.op, ct, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (s == CUBLAS_STATUS_SUCCESS && b)
        s = cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&l.a, CUDA_R_32F, (uint64_t)K, (uint64_t)O, K);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&l.b, CUDA_R_32F, (uint64_t)K, (uint64_t)N, K);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&l.c, CUDA_R_32F, (uint64_t)O, (uint64_t)N, O);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceCreate(&l.pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(l.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                 sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(te_cuda_cublaslt(), l.op, l.a, l.b, l.c, l.c, l.pref, 1, &h, &found);
    if (s == CUBLAS_STATUS_SUCCESS && found == 0)
        s = CUBLAS_STATUS_NOT_SUPPORTED;
    const float alpha = 1.0f, beta = 0.0f;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmul(te_cuda_cublaslt(), l.op, &alpha, w, l.a, x, l.b, &beta, y, l.c, y, l.c, &h.algo, ws,
                           ws_bytes, te_cuda_stream());
    lt_free(&l);
    return te_cublas_ok(n, s, "cublasLtMatmul (linear with an epilogue)");
}

te_status cuda_linear_act_forward(te_node *lin, te_op act)
{
    const te_tensor *x = lin->in[0], *w = lin->in[1], *b = lin->in[2];
    te_tensor *yt = lin->out[0];
    if (x->dtype != TE_F32 || w->dtype != TE_F32 || (b && b->dtype != TE_F32) || yt->dtype != TE_F32)
        return te_kernel_fail(lin, TE_ERR_DTYPE, "the fused linear and %s takes f32 tensors only",
                              te_op_type_name(act));
    if (k_act_of(act) < 0)
        return cuda_act_inplace(lin, act, NULL, 0); /* the message */
    const int N = (int)x->shape[0], K = (int)x->shape[1], O = (int)w->shape[0];
    float *y = te_f32(yt);
    te_status st = TE_OK;
    if (N == 0 || O == 0)
        return TE_OK;
    if (K == 0) { /* no product: the bias's rows (or zeros), then the activation */
        st = b ? te_cuda_ok(lin, k_bias_rows(y, b->data, TE_F32, N, O, te_cuda_stream()), "linear bias rows")
               : te_cuda_ok(lin, cudaMemsetAsync(y, 0, (size_t)yt->numel * sizeof *y, te_cuda_stream()),
                            "zeroing an empty product");
        return st == TE_OK ? cuda_act_inplace(lin, act, y, yt->numel) : st;
    }
    const bool relu = act == TE_OP_RELU;
    const cublasLtEpilogue_t epi = b ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                     : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    st = lt_linear(lin, te_f32(x), te_f32(w), b ? te_f32(b) : NULL, y, N, K, O, epi);
    if (st == TE_OK && !relu) /* GELU (exact), Tanh, Sigmoid: ours, in place */
        st = cuda_act_inplace(lin, act, y, yt->numel);
    return st;
}
