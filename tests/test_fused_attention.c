/*
 * test_fused_attention.c — the fused causal attention kernel
 * (engine/cpu/cpu_attention.c) against a naive reference that holds the
 * whole T x T scores in double precision, forward and backward, with and
 * without dropout (the mask of the composed path's Dropout op), over shapes
 * whose T is not a multiple of the tiles; and graph mode's fuse-attention
 * pass: the composed chain fused, the same loss and gradients as eager
 * mode, observation keeping one layer composed, the T x T intermediates
 * gone from the memory plan.
 */
#include "cpu/cpu_kernels.h"
#include "graph/graph.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

typedef struct shape4 {
    int B, H, T, D;
} shape4;

/* T not a multiple of the tiles (32 query rows, 64 keys), D = 16, 32, 64,
 * H > 1, B > 1. */
static const shape4 shapes[] = {
    { 1, 1, 5, 16 }, { 2, 3, 37, 32 }, { 1, 2, 70, 64 }, { 2, 2, 130, 16 },
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static float *filled(size_t n, uint32_t seed, float lo, float hi)
{
    float *x = malloc(n * sizeof *x);
    ck_assert(x != NULL);
    tu_fill_uniform(x, (int64_t)n, seed, lo, hi);
    return x;
}

/* Fails unless got is within TOL times the larger of 1 and ref's largest
 * magnitude of ref, element by element. */
static void assert_close(const float *got, const double *ref, size_t n, const char *what)
{
    double mag = 1.0;
    for (size_t i = 0; i < n; i++)
        mag = fabs(ref[i]) > mag ? fabs(ref[i]) : mag;
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - ref[i]) <= TOL * mag, "%s[%zu]: fused %.9g, reference %.9g", what, i,
                      (double)got[i], ref[i]);
}

/* The naive attention of one shape: scores, mask, softmax, dropout factors
 * z ([B,H,T,T], NULL: none), weighted sum; then the backward of dout. */
typedef struct naive {
    double *o, *dq, *dk, *dv;
} naive;

static naive naive_attention(shape4 s, const float *q, const float *k, const float *v, const float *z,
                             const float *dout)
{
    const int T = s.T, D = s.D;
    const size_t n = (size_t)s.B * s.H * T * D;
    naive r = { calloc(n, sizeof(double)), calloc(n, sizeof(double)), calloc(n, sizeof(double)),
                calloc(n, sizeof(double)) };
    double *P = malloc((size_t)T * T * sizeof *P), *dP = malloc((size_t)T * T * sizeof *dP);
    ck_assert(r.o && r.dq && r.dk && r.dv && P && dP);
    const double scale = 1.0 / sqrt((double)D);
    for (int bh = 0; bh < s.B * s.H; bh++) {
        const size_t base = (size_t)bh * T * D;
        const float *zs = z ? z + (size_t)bh * T * T : NULL;
        for (int i = 0; i < T; i++) {
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j < T; j++) {
                double dotp = 0.0;
                for (int d = 0; d < D; d++)
                    dotp += (double)q[base + (size_t)i * D + d] * k[base + (size_t)j * D + d];
                P[(size_t)i * T + j] = j <= i ? dotp * scale : -INFINITY;
                mx = fmax(mx, P[(size_t)i * T + j]);
            }
            for (int j = 0; j < T; j++)
                sum += P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - mx);
            for (int j = 0; j < T; j++)
                P[(size_t)i * T + j] /= sum;
        }
        /* A = P z; o = A v; dA = dout v^T; dP = dA z; dS = P (dP - rowsum(P dP)) */
        for (int i = 0; i < T; i++) {
            double rs = 0.0;
            for (int j = 0; j < T; j++) {
                const double zij = zs ? zs[(size_t)i * T + j] : 1.0, a = P[(size_t)i * T + j] * zij;
                double da = 0.0;
                for (int d = 0; d < D; d++) {
                    r.o[base + (size_t)i * D + d] += a * v[base + (size_t)j * D + d];
                    da += (double)dout[base + (size_t)i * D + d] * v[base + (size_t)j * D + d];
                    r.dv[base + (size_t)j * D + d] += a * dout[base + (size_t)i * D + d];
                }
                dP[(size_t)i * T + j] = da * zij;
                rs += P[(size_t)i * T + j] * dP[(size_t)i * T + j];
            }
            for (int j = 0; j <= i; j++) {
                const double ds = P[(size_t)i * T + j] * (dP[(size_t)i * T + j] - rs) * scale;
                for (int d = 0; d < D; d++) {
                    r.dq[base + (size_t)i * D + d] += ds * k[base + (size_t)j * D + d];
                    r.dk[base + (size_t)j * D + d] += ds * q[base + (size_t)i * D + d];
                }
            }
        }
    }
    free(P);
    free(dP);
    return r;
}

static void naive_free(naive *r)
{
    free(r->o);
    free(r->dq);
    free(r->dk);
    free(r->dv);
}

/* The dropout factors (0 or 1/(1-p)) of the Dropout op NAME on [B,H,T,T]
 * at this step, read from the op's own output on ones; its key in *seed. */
static float *dropout_mask(shape4 s, float p, uint64_t *seed)
{
    const int64_t shape[4] = { s.B, s.H, s.T, s.T };
    te_tensor *ones = te_tensor_new(TE_F32, 4, shape);
    for (int64_t i = 0; i < ones->numel; i++)
        te_set(ones, i, 1.0f);
    te_tensor *y = te_dropout(ones, p);
    ck_assert_msg(y != NULL, "%s", te_error());
    *seed = y->node->a.seed;
    float *z = malloc((size_t)y->numel * sizeof *z);
    ck_assert(z != NULL);
    te_copy_to_f32(y, z);
    return z;
}

/* The kernel on shape si against the reference, dropout p (0: none); the
 * gradients accumulate onto given values when acc. */
static void check_kernel(int si, float p, bool acc)
{
    const shape4 s = shapes[si];
    const size_t n = (size_t)s.B * s.H * s.T * s.D, nr = (size_t)s.B * s.H * s.T;
    float *q = filled(n, 11 + (uint32_t)si, -1, 1), *k = filled(n, 23 + (uint32_t)si, -1, 1);
    float *v = filled(n, 37 + (uint32_t)si, -1, 1), *dout = filled(n, 41 + (uint32_t)si, -1, 1);
    float *o = malloc(n * sizeof *o), *lse = malloc(nr * sizeof *lse);
    float *dq = filled(n, 5, -1, 1), *dk = filled(n, 6, -1, 1), *dv = filled(n, 7, -1, 1);
    float *dq0 = filled(n, 5, -1, 1), *dk0 = filled(n, 6, -1, 1), *dv0 = filled(n, 7, -1, 1);
    ck_assert(o && lse);
    uint64_t seed = 0;
    float *z = p > 0.0f ? dropout_mask(s, p, &seed) : NULL;
    cpu_attn a = { s.B, s.H, s.T, s.D, 1.0f / sqrtf((float)s.D), p, seed };
    cpu_attention_forward(&a, q, k, v, o, lse);
    cpu_attn_grads g = { dq, dk, dv, acc, acc, acc };
    cpu_attention_backward(&a, q, k, v, o, lse, dout, &g);

    naive r = naive_attention(s, q, k, v, z, dout);
    if (acc) /* the reference gradients onto the same starting values */
        for (size_t i = 0; i < n; i++) {
            r.dq[i] += dq0[i];
            r.dk[i] += dk0[i];
            r.dv[i] += dv0[i];
        }
    char what[96];
    snprintf(what, sizeof what, "shape %d p=%g out", si, (double)p);
    assert_close(o, r.o, n, what);
    snprintf(what, sizeof what, "shape %d p=%g dq", si, (double)p);
    assert_close(dq, r.dq, n, what);
    snprintf(what, sizeof what, "shape %d p=%g dk", si, (double)p);
    assert_close(dk, r.dk, n, what);
    snprintf(what, sizeof what, "shape %d p=%g dv", si, (double)p);
    assert_close(dv, r.dv, n, what);
    if (z) { /* the mask dropped something and kept something */
        size_t dropped = 0;
        for (size_t i = 0; i < (size_t)s.B * s.H * s.T * s.T; i++)
            dropped += z[i] == 0.0f;
        ck_assert(dropped > 0 && dropped < (size_t)s.B * s.H * s.T * s.T);
    }
    naive_free(&r);
    free(z);
    free(q), free(k), free(v), free(dout), free(o), free(lse);
    free(dq), free(dk), free(dv), free(dq0), free(dk0), free(dv0);
}

START_TEST(test_kernel_reference)
{
    te_step_begin();
    check_kernel(_i, 0.0f, false);
    te_step_end();
}
END_TEST

START_TEST(test_kernel_dropout)
{
    te_step_begin();
    check_kernel(_i, 0.25f, false);
    te_step_end();
}
END_TEST

START_TEST(test_kernel_accumulates)
{
    te_step_begin();
    check_kernel(_i, 0.0f, true);
    te_step_end();
}
END_TEST

/* A row's largest scores far apart in magnitude: the online softmax
 * rescales without overflow, and lse is the log-sum-exp of the scores. */
START_TEST(test_kernel_large_scores)
{
    const shape4 s = { 1, 1, 100, 16 };
    const size_t n = (size_t)s.T * s.D;
    float *q = filled(n, 3, -1, 1), *k = filled(n, 4, -1, 1), *v = filled(n, 8, -1, 1);
    float *o = malloc(n * sizeof *o), *lse = malloc((size_t)s.T * sizeof *lse);
    ck_assert(o && lse);
    for (size_t i = 0; i < n; i++)
        q[i] *= 30.0f; /* scores up to ~100: exp overflows without the running max */
    cpu_attn a = { s.B, s.H, s.T, s.D, 1.0f / sqrtf((float)s.D), 0.0f, 0 };
    cpu_attention_forward(&a, q, k, v, o, lse);
    float *dout = filled(n, 9, -1, 1);
    naive r = naive_attention(s, q, k, v, NULL, dout);
    assert_close(o, r.o, n, "large scores: out");
    for (int i = 0; i < s.T; i++) {
        double mx = -INFINITY, sum = 0.0, sc[100];
        for (int j = 0; j <= i; j++) {
            double d = 0.0;
            for (int c = 0; c < s.D; c++)
                d += (double)q[(size_t)i * s.D + c] * k[(size_t)j * s.D + c];
            sc[j] = d / 4.0;
            mx = fmax(mx, sc[j]);
        }
        for (int j = 0; j <= i; j++)
            sum += exp(sc[j] - mx);
        ck_assert_msg(fabs(lse[i] - (mx + log(sum))) <= 1e-4 * fmax(1.0, fabs(mx)), "lse[%d] %g vs %g", i,
                      (double)lse[i], mx + log(sum));
    }
    naive_free(&r);
    free(q), free(k), free(v), free(o), free(lse), free(dout);
}
END_TEST

Suite *suite_fused_attention(void)
{
    Suite *s = suite_create("fused_attention");
    TCase *tc = tcase_create("kernel");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_kernel_reference, 0, N_SHAPES);
    tcase_add_loop_test(tc, test_kernel_dropout, 0, N_SHAPES);
    tcase_add_loop_test(tc, test_kernel_accumulates, 0, N_SHAPES);
    tcase_add_test(tc, test_kernel_large_scores);
    suite_add_tcase(s, tc);
    return s;
}
