/*
 * k_elementwise.h — launchers of the elementwise kernels (k_elementwise.cu):
 * binary ops with numpy broadcasting and their gradients, masked fill,
 * unary ops and activations, dropout, and graph mode's fused elementwise
 * program. Plain device pointers, sizes and a stream; each returns the
 * launch's error (cudaGetLastError), which the C glue checks.
 *
 * The index arithmetic of broadcasting is here as inline functions, shared
 * by the kernels and the host test that checks it against numpy's rules.
 */
#ifndef K_ELEMENTWISE_H
#define K_ELEMENTWISE_H

#include "cuda/k_math.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define K_MAX_DIMS 4 /* te.h's TE_MAX_DIMS; cuda_elementwise.c checks */

/* A binary op's output as merged dims (kernel_geom.h's te_bcast_plan:
 * size-1 output dims dropped, neighbours broadcast alike merged), with
 * each operand's element stride per dim, 0 where it is broadcast. The
 * output is contiguous over d. */
typedef struct k_bcast {
    int k;
    int64_t d[K_MAX_DIMS];
    int64_t sa[K_MAX_DIMS], sb[K_MAX_DIMS];
} k_bcast;

/* Offsets in a and b of output element i. */
K_HD void k_bcast_offsets(const k_bcast *p, int64_t i, int64_t *oa, int64_t *ob)
{
    int64_t ja = 0, jb = 0;
    for (int j = p->k - 1; j >= 0; j--) {
        const int64_t idx = i % p->d[j];
        i /= p->d[j];
        ja += idx * p->sa[j];
        jb += idx * p->sb[j];
    }
    *oa = ja;
    *ob = jb;
}

/* The gradient of one operand x of a binary op: element j of x sums the
 * terms of the R output elements it was broadcast to. The merged dims
 * split into those x spans (kept, in x's order: j decomposes over them)
 * and those it is broadcast along (reduced: t in [0, R) decomposes over
 * them, so increasing t is increasing output order, the CPU's sum order).
 * Strides y, a, b: of the output and both operands per dim. */
typedef struct k_reduce {
    int nk, nr;
    int64_t kd[K_MAX_DIMS], ky[K_MAX_DIMS], ka[K_MAX_DIMS], kb[K_MAX_DIMS];
    int64_t rd[K_MAX_DIMS], ry[K_MAX_DIMS], ra[K_MAX_DIMS], rb[K_MAX_DIMS];
    int64_t nx, R; /* x's elements, terms per element */
} k_reduce;

/* The split of plan p for operand which (0: a, 1: b). */
K_HD void k_reduce_make(const k_bcast *p, int which, k_reduce *r)
{
    int64_t sy = 1;
    int64_t y_stride[K_MAX_DIMS];
    for (int j = p->k - 1; j >= 0; j--) {
        y_stride[j] = sy;
        sy *= p->d[j];
    }
    r->nk = r->nr = 0;
    r->nx = r->R = 1;
    for (int j = 0; j < p->k; j++) {
        const int64_t sx = which ? p->sb[j] : p->sa[j];
        if (sx != 0 || p->d[j] == 1) {
            const int m = r->nk++;
            r->kd[m] = p->d[j];
            r->ky[m] = y_stride[j];
            r->ka[m] = p->sa[j];
            r->kb[m] = p->sb[j];
            r->nx *= p->d[j];
        } else {
            const int m = r->nr++;
            r->rd[m] = p->d[j];
            r->ry[m] = y_stride[j];
            r->ra[m] = p->sa[j];
            r->rb[m] = p->sb[j];
            r->R *= p->d[j];
        }
    }
}

/* Offsets in y, a and b of x's element j (kept dims) or of term t
 * (reduced dims); the two add up to the term's offsets. */
K_HD void k_reduce_kept(const k_reduce *r, int64_t j, int64_t *oy, int64_t *oa, int64_t *ob)
{
    int64_t y = 0, a = 0, b = 0;
    for (int m = r->nk - 1; m >= 0; m--) {
        const int64_t idx = j % r->kd[m];
        j /= r->kd[m];
        y += idx * r->ky[m];
        a += idx * r->ka[m];
        b += idx * r->kb[m];
    }
    *oy = y;
    *oa = a;
    *ob = b;
}

K_HD void k_reduce_term(const k_reduce *r, int64_t t, int64_t *oy, int64_t *oa, int64_t *ob)
{
    int64_t y = 0, a = 0, b = 0;
    for (int m = r->nr - 1; m >= 0; m--) {
        const int64_t idx = t % r->rd[m];
        t /= r->rd[m];
        y += idx * r->ry[m];
        a += idx * r->ra[m];
        b += idx * r->rb[m];
    }
    *oy = y;
    *oa = a;
    *ob = b;
}

/* The ops, forward formulas as the CPU's (cpu_elementwise.c, cpu_fused.c). */
typedef enum {
    K_OP_ADD, K_OP_SUB, K_OP_MUL, K_OP_DIV, /* binary */
    K_OP_SCALE, K_OP_RELU, K_OP_GELU, K_OP_TANH, K_OP_SIGMOID, K_OP_EXP, K_OP_LOG, K_OP_SQRT,
    K_OP_COUNT
} k_op;

/* The terms of a binary op's gradients (gy the output's gradient, u and v
 * the operands), as cpu_elementwise.c's GRAD_ROW instances. */
typedef enum {
    K_GRAD_PASS,  /* gy */
    K_GRAD_NEG,   /* -gy */
    K_GRAD_MUL_A, /* gy * v */
    K_GRAD_MUL_B, /* gy * u */
    K_GRAD_DIV_A, /* gy / v */
    K_GRAD_DIV_B, /* -gy * ((u / v) / v) */
} k_grad;

/* y = a OP b over n output elements. */
cudaError_t k_binary_forward(k_op op, const k_bcast *p, int64_t n, const float *a, const float *b,
                             float *y, cudaStream_t s);
/* d, the gradient of operand which, (+)= the sum of term(g, a, b) over the
 * output elements each of its elements was broadcast to, in a fixed order
 * (no atomics): overwrite when acc is 0, add when 1. a and b may be NULL
 * for terms that read neither (PASS, NEG). */
cudaError_t k_binary_grad(k_grad term, const k_bcast *p, int which, const float *g, const float *a,
                          const float *b, float *d, int acc, cudaStream_t s);

/* y = m[bcast] != 0 ? value : x (x spans the output: p's operand a; the
 * mask is b); d (+)= m != 0 ? 0 : g. */
cudaError_t k_masked_fill_forward(const k_bcast *p, int64_t n, const float *x, const float *m,
                                  float value, float *y, cudaStream_t s);
cudaError_t k_masked_fill_backward(const k_bcast *p, int64_t n, const float *m, const float *g,
                                   float *d, int acc, cudaStream_t s);

/* y = op(x) (y may be x: in place); s is Scale's factor. */
cudaError_t k_unary_forward(k_op op, int64_t n, const float *x, float *y, float s, cudaStream_t st);
/* d (+)= g * op'(v), v being what the CPU's derivative is written in: the
 * output for relu, tanh, sigmoid, exp and sqrt, the input for gelu and
 * log, nothing (NULL) for scale, whose derivative is s. */
cudaError_t k_unary_backward(k_op op, int64_t n, const float *v, const float *g, float *d, float s,
                             int acc, cudaStream_t st);

/* y (+)= x * (element i kept ? scale : 0) under key and threshold. */
cudaError_t k_dropout(int64_t n, const float *x, float *y, uint64_t key, uint64_t threshold,
                      float scale, int acc, cudaStream_t s);

/* Graph mode's fused elementwise chain (graph.h's tg_ew) with device
 * pointers: registers 0..n_in-1 are the inputs, step i writes register
 * n_in+i and out[i] where not NULL. An input of in_n[i] elements repeats
 * over the numel of the result (a scalar, or trailing dims). */
#define K_EW_MAX 16
typedef struct k_ew_prog {
    int n_in, n_steps;
    const float *in[K_EW_MAX];
    int64_t in_n[K_EW_MAX];
    struct {
        int op, a, b; /* k_op; registers, b -1 for unary ops */
        float s;
    } step[K_EW_MAX];
    float *out[K_EW_MAX];
    int64_t numel;
} k_ew_prog;

cudaError_t k_ew_run(const k_ew_prog *prog, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
