/* cpu_linear.c — matmul and linear on the CPU, forward and backward, as
 * row-major GEMMs through cpu_sgemm, which spreads each product over the
 * OpenMP team. */
#include "cpu_kernels.h"

#include <omp.h>
#include <string.h>

/* A leading dimension BLAS accepts: at least 1 even for an empty dim. */
static int ld(int64_t cols) { return cols > 0 ? (int)cols : 1; }

/* ---- matmul: y[..., M, N] = op(a)[..., M, K] @ op(b)[..., K, N] ------------
 * kernel_geom.h's plan: one GEMM per batch index of y, batches spread over
 * the threads when there are enough of them, else each GEMM split by
 * cpu_sgemm; a tall plan stacks a's matrices into one GEMM.
 */

/* Go parallel over `count` independent products rather than within each? */
static bool mm_par(const te_mm_plan *p, int64_t count)
{
    int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    return threads > 1 && count >= threads && (double)p->M * p->N * p->K * p->batches >= (1 << 18);
}

te_status cpu_matmul_forward(te_node *n)
{
    te_mm_plan p;
    te_mm_plan_of(n, &p);
    const float *A = te_f32(n->in[0]), *B = te_f32(n->in[1]);
    float *Y = te_f32(n->out[0]);
    if (p.tall) {
        cpu_sgemm(false, p.tb, (int)(p.batches * p.M), p.N, p.K, 1.0f, A, p.lda, B, p.ldb, 0.0f, Y,
                  ld(p.N));
        return TE_OK;
    }
    const int64_t sa = (int64_t)p.M * p.K, sb = (int64_t)p.K * p.N, sy = (int64_t)p.M * p.N;
#pragma omp parallel for schedule(static) if (mm_par(&p, p.batches))
    for (int64_t r = 0; r < p.batches; r++) {
        int64_t ia, ib;
        te_mm_batch(&p, r, &ia, &ib);
        cpu_sgemm(p.ta, p.tb, p.M, p.N, p.K, 1.0f, A + ia * sa, p.lda, B + ib * sb, p.ldb, 0.0f,
                  Y + r * sy, ld(p.N));
    }
    return TE_OK;
}

/* One batch's share of da: dy [M,N] with b's matrix, beta 0 or 1. */
static void mm_grad_a(const te_mm_plan *p, const float *G, const float *B, float *D, float beta)
{
    if (!p->ta) /* da [M,K] = dy @ op(b)^T */
        cpu_sgemm(false, !p->tb, p->M, p->K, p->N, 1.0f, G, ld(p->N), B, p->ldb, beta, D, ld(p->K));
    else /* a is [K,M]: da = op(b) @ dy^T */
        cpu_sgemm(p->tb, true, p->K, p->M, p->N, 1.0f, B, p->ldb, G, ld(p->N), beta, D, ld(p->M));
}

/* One batch's share of db: dy [M,N] with a's matrix, beta 0 or 1. */
static void mm_grad_b(const te_mm_plan *p, const float *G, const float *A, float *D, float beta)
{
    if (!p->tb) /* db [K,N] = op(a)^T @ dy */
        cpu_sgemm(!p->ta, false, p->K, p->N, p->M, 1.0f, A, p->lda, G, ld(p->N), beta, D, ld(p->N));
    else /* b is [N,K]: db = dy^T @ op(a) */
        cpu_sgemm(true, p->ta, p->N, p->K, p->M, 1.0f, G, ld(p->N), A, p->lda, beta, D, ld(p->K));
}

/* The gradient of operand `which` (0 a, 1 b): matrix j of it sums the
 * products of every batch of y that used it, in batch order, so a
 * broadcast operand gets its sum, the same on any thread count. */
static void mm_grad(te_node *n, const te_mm_plan *p, int which)
{
    te_tensor *x = n->in[which];
    int acc;
    float *D = te_grad_buf(x, &acc);
    const float *G = te_f32(n->out[0]->grad), *other = te_f32(n->in[1 - which]);
    const int64_t count = which ? p->nbm : p->na;
    const int64_t sx = x->numel / (count ? count : 1), so = (int64_t)p->K * (which ? p->M : p->N);
    const int64_t sy = (int64_t)p->M * p->N;
#pragma omp parallel for schedule(static) if (mm_par(p, count))
    for (int64_t j = 0; j < count; j++) {
        bool first = true;
        for (int64_t r = 0; r < p->batches; r++) {
            int64_t ia, ib;
            te_mm_batch(p, r, &ia, &ib);
            if ((which ? ib : ia) != j)
                continue;
            float beta = first && !acc ? 0.0f : 1.0f;
            const float *O = other + (which ? ia : ib) * so;
            if (which)
                mm_grad_b(p, G + r * sy, O, D + j * sx, beta);
            else
                mm_grad_a(p, G + r * sy, O, D + j * sx, beta);
            first = false;
        }
        if (first && !acc) /* no batch used it (y is empty) */
            memset(D + j * sx, 0, (size_t)sx * sizeof *D);
    }
}

te_status cpu_matmul_backward(te_node *n)
{
    te_mm_plan p;
    te_mm_plan_of(n, &p);
    te_tensor *a = n->in[0], *b = n->in[1];
    const float *G = te_f32(n->out[0]->grad);
    if (p.tall) { /* the tall product's gradients, one GEMM each */
        int acc;
        te_mm_plan tall = p;
        tall.M = (int)(p.batches * p.M);
        if (te_needs_grad(a)) {
            float *D = te_grad_buf(a, &acc);
            mm_grad_a(&tall, G, te_f32(b), D, acc ? 1.0f : 0.0f);
        }
        if (te_needs_grad(b)) {
            float *D = te_grad_buf(b, &acc);
            mm_grad_b(&tall, G, te_f32(a), D, acc ? 1.0f : 0.0f);
        }
        return TE_OK;
    }
    if (te_needs_grad(a))
        mm_grad(n, &p, 0);
    if (te_needs_grad(b))
        mm_grad(n, &p, 1);
    return TE_OK;
}

/* ---- linear: y [N,O] = x [N,K] @ w[O,K]^T + b[O] ------------------------- */

te_status cpu_linear_forward(te_node *n)
{
    const te_tensor *x = n->in[0], *w = n->in[1];
    int N = (int)x->shape[0], K = (int)x->shape[1], O = (int)w->shape[0];
    float *y = te_f32(n->out[0]);
    float beta = 0.0f;
    if (n->in[2]) { /* start from the bias rows and let sgemm add onto them */
        const float *b = te_f32(n->in[2]);
        for (int i = 0; i < N; i++)
            memcpy(y + (size_t)i * O, b, (size_t)O * sizeof(float));
        beta = 1.0f;
    }
    cpu_sgemm(false, true, N, O, K, 1.0f, te_f32(x), ld(K),
                te_f32(w), ld(K), beta, y, ld(O));
    return TE_OK;
}

te_status cpu_linear_backward(te_node *n)
{
    te_tensor *x = n->in[0], *w = n->in[1];
    int N = (int)x->shape[0], K = (int)x->shape[1], O = (int)w->shape[0];
    const float *dy = te_f32(n->out[0]->grad);
    int acc;
    if (te_needs_grad(x)) { /* dx [N,K] = dy [N,O] @ w [O,K] */
        float *dx = te_grad_buf(x, &acc);
        cpu_sgemm(false, false, N, K, O, 1.0f, dy, ld(O), te_f32(w),
                    ld(K), acc ? 1.0f : 0.0f, dx, ld(K));
    }
    if (te_needs_grad(w)) { /* dw [O,K] = dy^T @ x */
        float *dw = te_grad_buf(w, &acc);
        cpu_sgemm(true, false, O, K, N, 1.0f, dy, ld(O), te_f32(x),
                    ld(K), acc ? 1.0f : 0.0f, dw, ld(K));
    }
    if (te_needs_grad(n->in[2])) { /* db [O] = column sums of dy */
        float *db = te_grad_buf(n->in[2], &acc);
        if (!acc)
            memset(db, 0, (size_t)O * sizeof(float));
        for (int i = 0; i < N; i++) {
            const float *row = dy + (size_t)i * O;
#pragma omp simd
            for (int o = 0; o < O; o++)
                db[o] += row[o];
        }
    }
    return TE_OK;
}
