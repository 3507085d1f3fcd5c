/* cpu_linear.c — matmul and linear on the CPU, forward and backward, as
 * row-major GEMMs through cpu_sgemm, which spreads each product over the
 * OpenMP team. */
#include "cpu_kernels.h"

#include <string.h>

/* A leading dimension BLAS accepts: at least 1 even for an empty dim. */
static int ld(int64_t cols) { return cols > 0 ? (int)cols : 1; }

/* ---- matmul: y [M,N] = a [M,K] @ b [K,N] ---------------------------------- */

te_status cpu_matmul_forward(te_node *n)
{
    const te_tensor *a = n->in[0], *b = n->in[1];
    int M = (int)a->shape[0], K = (int)a->shape[1], N = (int)b->shape[1];
    cpu_sgemm(false, false, M, N, K, 1.0f, te_f32(a), ld(K),
                te_f32(b), ld(N), 0.0f, te_f32(n->out[0]), ld(N));
    return TE_OK;
}

te_status cpu_matmul_backward(te_node *n)
{
    te_tensor *a = n->in[0], *b = n->in[1];
    int M = (int)a->shape[0], K = (int)a->shape[1], N = (int)b->shape[1];
    const float *dy = te_f32(n->out[0]->grad);
    int acc;
    if (te_needs_grad(a)) { /* da [M,K] = dy [M,N] @ b^T */
        float *da = te_grad_buf(a, &acc);
        cpu_sgemm(false, true, M, K, N, 1.0f, dy, ld(N), te_f32(b),
                    ld(N), acc ? 1.0f : 0.0f, da, ld(K));
    }
    if (te_needs_grad(b)) { /* db [K,N] = a^T @ dy */
        float *db = te_grad_buf(b, &acc);
        cpu_sgemm(true, false, K, N, M, 1.0f, te_f32(a), ld(K), dy,
                    ld(N), acc ? 1.0f : 0.0f, db, ld(N));
    }
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
