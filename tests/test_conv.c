/* test_conv.c — conv2d and the pools: PyTorch goldens (tests/fixtures/conv.bin),
 * a direct-loop reference on larger shapes (where the loops go parallel),
 * finite differences, gradient accumulation, half precision and errors;
 * the conv tests run twice, on oneDNN (where built with it) and on the
 * reference kernels (im2col + sgemm), and the two are compared directly
 * on geometries that take each kernel's edge cases. */
#include "fixture.h"
#include "gradcheck.h"
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATOL 1e-4
#define RTOL 1e-4

/* Compares got with scale times the record CASE.FIELD. */
static void close_to(fx_file *f, const char *c, const char *field, const te_tensor *got,
                     float scale)
{
    char what[128];
    snprintf(what, sizeof what, "%s.%s x%g", c, field, scale);
    te_tensor *want = fx_case(f, c, field);
    for (int64_t i = 0; i < want->numel; i++)
        te_set(want, i, scale * te_get(want, i));
    fx_assert_close(got, want, ATOL, RTOL, what);
}

/* A persistent tensor of distinct values 0.1 apart in shuffled order, so no
 * max-pool window has a near tie that a finite difference could flip. */
static te_tensor *distinct(int ndim, const int64_t *shape)
{
    te_tensor *t = te_tensor_persistent(TE_F32, ndim, shape);
    for (int64_t i = 0; i < t->numel; i++)
        te_set(t, i, 0.1f * (float)((i * 7919) % t->numel) - 0.05f * (float)t->numel);
    return t;
}

/* ---- conv2d goldens ------------------------------------------------------- */

typedef struct {
    const char *name;
    bool bias;
    int stride, pad;
} conv_case;

/* As written by tests/fixtures/gen_conv.py. */
static const conv_case conv_cases[] = {
    { "conv_s1p1", true, 1, 1 }, { "conv_s2p0", true, 2, 0 }, { "conv_1x1", true, 1, 0 },
    { "conv_1x1s2", true, 2, 0 }, { "conv_rect", true, 1, 1 }, { "conv_k23", true, 1, 1 },
    { "conv_n1", false, 2, 1 },  { "conv_c1", true, 1, 0 },
};

/* Forward and backward of one case, `passes` times without zeroing: the
 * gradients must come out `passes` times PyTorch's. */
static void golden_conv(const conv_case *c, int passes)
{
    fx_file *f = fx_open("conv.bin");
    te_tensor *x = fx_case_param(f, c->name, "x"), *w = fx_case_param(f, c->name, "w");
    te_tensor *b = c->bias ? fx_case_param(f, c->name, "b") : NULL;
    for (int p = 0; p < passes; p++) {
        te_tensor *y = te_conv2d(x, w, b, c->stride, c->pad);
        close_to(f, c->name, "y", y, 1);
        ck_assert_msg(te_backward_with(y, fx_case(f, c->name, "dy")) == TE_OK, "%s: %s",
                      c->name, te_error());
        te_tape_reset();
    }
    close_to(f, c->name, "dx", x->grad, (float)passes);
    close_to(f, c->name, "dw", w->grad, (float)passes);
    if (b)
        close_to(f, c->name, "db", b->grad, (float)passes);
    te_tensor_free(x);
    te_tensor_free(w);
    te_tensor_free(b);
    fx_close(f);
}

START_TEST(test_conv_golden)
{
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++)
        golden_conv(&conv_cases[i], 1);
}
END_TEST

START_TEST(test_conv_accumulates)
{
    golden_conv(&conv_cases[0], 2); /* im2col path */
    golden_conv(&conv_cases[2], 2); /* 1x1 path */
    golden_conv(&conv_cases[6], 2); /* no bias, stride 2 with padding */
}
END_TEST

/* Only the inputs that need a gradient get one. */
START_TEST(test_conv_partial_grads)
{
    fx_file *f = fx_open("conv.bin");
    const char *c = "conv_s1p1";
    te_tensor *x = fx_case_param(f, c, "x"), *w = fx_case_param(f, c, "w");
    te_tensor *b = fx_case_param(f, c, "b");
    x->requires_grad = false;
    b->requires_grad = false;
    te_tensor *y = te_conv2d(x, w, b, 1, 1);
    ck_assert(te_backward_with(y, fx_case(f, c, "dy")) == TE_OK);
    ck_assert_msg(!x->grad && !b->grad, "x or b got a gradient");
    close_to(f, c, "dw", w->grad, 1);
    te_tape_reset();
    w->requires_grad = false;
    x->requires_grad = true;
    y = te_conv2d(x, w, NULL, 1, 1);
    ck_assert(te_backward_with(y, fx_case(f, c, "dy")) == TE_OK);
    close_to(f, c, "dx", x->grad, 1); /* dx does not depend on the bias */
    te_tensor_free(x);
    te_tensor_free(w);
    te_tensor_free(b);
    fx_close(f);
}
END_TEST

/* ---- pool goldens --------------------------------------------------------- */

typedef struct {
    const char *name;
    bool max;
    int kernel, stride, pad;
} pool_case;

static const pool_case pool_cases[] = {
    { "maxpool_2s2", true, 2, 2, 0 },   { "maxpool_3s2p1", true, 3, 2, 1 },
    { "maxpool_rect", true, 3, 2, 1 },  { "avgpool_2s2", false, 2, 2, 0 },
    { "avgpool_3s1p1", false, 3, 1, 1 },
};

static void golden_pool(const pool_case *c, int passes)
{
    fx_file *f = fx_open("conv.bin");
    te_tensor *x = fx_case_param(f, c->name, "x");
    for (int p = 0; p < passes; p++) {
        te_tensor *y = c->max ? te_maxpool2d(x, c->kernel, c->stride, c->pad)
                              : te_avgpool2d(x, c->kernel, c->stride, c->pad);
        close_to(f, c->name, "y", y, 1);
        ck_assert_msg(te_backward_with(y, fx_case(f, c->name, "dy")) == TE_OK, "%s: %s",
                      c->name, te_error());
        te_tape_reset();
    }
    close_to(f, c->name, "dx", x->grad, (float)passes);
    te_tensor_free(x);
    fx_close(f);
}

static void golden_gap(int passes)
{
    fx_file *f = fx_open("conv.bin");
    te_tensor *x = fx_case_param(f, "gap", "x");
    for (int p = 0; p < passes; p++) {
        te_tensor *y = te_global_avgpool(x);
        close_to(f, "gap", "y", y, 1);
        ck_assert_msg(te_backward_with(y, fx_case(f, "gap", "dy")) == TE_OK, "%s", te_error());
        te_tape_reset();
    }
    close_to(f, "gap", "dx", x->grad, (float)passes);
    te_tensor_free(x);
    fx_close(f);
}

START_TEST(test_pool_golden)
{
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++)
        golden_pool(&pool_cases[i], 1);
    golden_gap(1);
}
END_TEST

START_TEST(test_pool_accumulates)
{
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++)
        golden_pool(&pool_cases[i], 2);
    golden_gap(2);
}
END_TEST

/* Padding is -inf for max (an all-negative input never yields 0) and 0 for
 * the average (the divisor stays kernel^2); NaN propagates through max. */
START_TEST(test_pool_padding_and_nan)
{
    float v[9] = { -1, -2, -3, -4, -5, -6, -7, -8, -9 };
    te_tensor *x = te_tensor_from(TE_F32, te_shape(1, 1, 3, 3), v);
    te_tensor *m = te_maxpool2d(x, 3, 2, 1); /* 2x2 windows over the corners */
    const float want_max[4] = { -1, -2, -4, -5 };
    for (int i = 0; i < 4; i++)
        ck_assert_msg(te_get(m, i) == want_max[i], "max[%d] = %g, expected %g", i, te_get(m, i),
                      want_max[i]);
    te_tensor *a = te_avgpool2d(x, 3, 2, 1);
    const float want_avg[4] = { -12.0f / 9, -16.0f / 9, -24.0f / 9, -28.0f / 9 };
    for (int i = 0; i < 4; i++)
        ck_assert_msg(fabsf(te_get(a, i) - want_avg[i]) < 1e-6f, "avg[%d] = %g, expected %g", i,
                      te_get(a, i), want_avg[i]);

    te_set(x, 4, NAN); /* the centre is in every window */
    m = te_maxpool2d(x, 3, 2, 1);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(isnan(te_get(m, i)), "max[%d] = %g, expected NaN", i, te_get(m, i));

    /* a window of -inf only: max -inf, its gradient to the window's first
     * element (PyTorch's choice) */
    te_tensor *inf = te_tensor_persistent(TE_F32, te_shape(1, 1, 3, 4));
    te_fill(inf, -INFINITY);
    inf->requires_grad = true;
    m = te_maxpool2d(inf, 3, 2, 1);
    ck_assert(m->shape[2] == 2 && m->shape[3] == 2 && te_get(m, 3) == -INFINITY);
    te_tensor *dy = te_tensor_new(TE_F32, te_shape(1, 1, 2, 2));
    te_fill(dy, 1);
    ck_assert(te_backward_with(m, dy) == TE_OK);
    const float want_dx[12] = { 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0 };
    for (int i = 0; i < 12; i++)
        ck_assert_msg(te_get(inf->grad, i) == want_dx[i], "dx[%d] = %g, expected %g", i,
                      te_get(inf->grad, i), want_dx[i]);
    te_tape_reset();
    te_tensor_free(inf);
}
END_TEST

/* ---- pools on nChw16c (graph mode's layout on conv chains) against NCHW -- */

/* Max pool (window k, stride st, pad pd) or, k 0, global average pool,
 * twice over x and summed (the second backward adds to x's gradient), x
 * and dy in NCHW or, blocked, nChw16c as graph mode gives them: y, max
 * pool's argmax and dx, back in NCHW (malloc'd). */
static void pool_twice(const te_tensor *x0, int k, int st, int pd, bool blocked, void *out[3])
{
    te_tensor *x = te_tensor_persistent(TE_F32, 4, x0->shape);
    float *xv = tu_f32(x0);
    if (blocked) {
        float *b = malloc(x0->nbytes);
        tu_to_blocked16(xv, b, x0->shape, sizeof(float));
        tu_write(x, b);
        free(b);
        x->flags |= TE_TENSOR_BLOCKED16;
    } else {
        tu_write(x, xv);
    }
    free(xv);
    x->requires_grad = true;
    te_tensor *y1 = k ? te_maxpool2d(x, k, st, pd) : te_global_avgpool(x);
    te_tensor *y2 = k ? te_maxpool2d(x, k, st, pd) : te_global_avgpool(x);
    te_tensor *y = te_add(y1, y2);
    ck_assert_msg(y != NULL, "%s", te_error());
    const bool planes = y->ndim == 4; /* max pool's y is blocked as x is; [N,C] is the same in both */
    te_tensor *dy = te_tensor_persistent(TE_F32, y->ndim, y->shape);
    float *d = malloc(y->nbytes), *db = malloc(y->nbytes);
    tu_fill_uniform(d, y->numel, 7, -1.0f, 1.0f);
    if (blocked && planes)
        tu_to_blocked16(d, db, y->shape, sizeof(float));
    tu_write(dy, blocked && planes ? db : d);
    ck_assert_msg(te_backward_with(y, dy) == TE_OK, "%s", te_error());
    const te_tensor *parts[3] = { y1, k ? y1->node->saved[0] : NULL, x->grad };
    for (int i = 0; i < 3; i++) {
        out[i] = parts[i] ? tu_bytes(parts[i]) : NULL;
        if (out[i] && blocked && parts[i]->ndim == 4) {
            void *plain = malloc(parts[i]->nbytes);
            tu_from_blocked16(out[i], plain, parts[i]->shape, te_dtype_size(parts[i]->dtype));
            free(out[i]);
            out[i] = plain;
        }
    }
    free(d);
    free(db);
    te_tape_reset();
    te_tensor_free(x);
    te_tensor_free(dy);
}

START_TEST(test_pool_blocked_matches_plain)
{
    /* 32 channels (two blocks) of 7 x 9: windows clipped at the edges. Values
     * in halves, so windows tie, and a NaN in some: max pool's bits, its
     * argmax and its gradients are the NCHW kernel's exactly (the same taps
     * in the same order), overlapping windows included. */
    const int64_t shape[4] = { 2, 32, 7, 9 };
    te_tensor *x = te_tensor_persistent(TE_F32, 4, shape);
    float *v = malloc(x->nbytes);
    tu_fill_uniform(v, x->numel, 3, -2.0f, 2.0f);
    for (int64_t i = 0; i < x->numel; i++)
        v[i] = i % 97 == 5 ? NAN : roundf(v[i] * 2.0f) / 2.0f;
    tu_write(x, v);
    free(v);
    static const int windows[][3] = { { 2, 2, 0 }, { 3, 2, 1 }, { 3, 1, 1 }, { 0, 0, 0 } };
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
        const int k = windows[w][0], st = windows[w][1], pd = windows[w][2];
        void *plain[3], *blocked[3];
        pool_twice(x, k, st, pd, false, plain);
        pool_twice(x, k, st, pd, true, blocked);
        const int64_t ny = k ? 2 * 32 * ((7 + 2 * pd - k) / st + 1) * ((9 + 2 * pd - k) / st + 1) : 2 * 32;
        const char *what = k ? "max pool" : "global average pool";
        for (int64_t i = 0; i < ny; i++) {
            float a = ((float *)plain[0])[i], b = ((float *)blocked[0])[i];
            /* global average pool sums in another order, in double: the same but at a rounding point */
            bool same = k ? memcmp(&a, &b, 4) == 0
                          : fabsf(a - b) <= 1e-6f * fmaxf(1.0f, fabsf(a)) || (isnan(a) && isnan(b));
            ck_assert_msg(same,
                          "%s %d/%d/%d y[%lld]: NCHW %.9g, nChw16c %.9g", what, k, st, pd, (long long)i, a, b);
            if (k)
                ck_assert_msg(((int32_t *)plain[1])[i] == ((int32_t *)blocked[1])[i],
                              "max pool %d/%d/%d argmax[%lld]: NCHW %d, nChw16c %d", k, st, pd, (long long)i,
                              ((int32_t *)plain[1])[i], ((int32_t *)blocked[1])[i]);
        }
        ck_assert_msg(memcmp(plain[2], blocked[2], x->nbytes) == 0, "%s %d/%d/%d: dx differs", what, k, st, pd);
        for (int i = 0; i < 3; i++) {
            free(plain[i]);
            free(blocked[i]);
        }
    }
    te_tensor_free(x);
}
END_TEST

/* ---- direct-loop reference on larger shapes ------------------------------- */

typedef struct {
    int N, C, H, W, O, KH, KW, stride, pad, OH, OW;
} geom;

/* y, and from dy the gradients dx, dw, db, by the definition of conv2d. */
static void conv_reference(const geom *g, const float *x, const float *w, const float *b,
                           const float *dy, float *y, float *dx, float *dw, float *db)
{
    memset(dx, 0, sizeof(float) * (size_t)(g->N * g->C * g->H * g->W));
    memset(dw, 0, sizeof(float) * (size_t)(g->O * g->C * g->KH * g->KW));
    for (int o = 0; o < g->O; o++) {
        double sb = 0;
        for (int n = 0; n < g->N; n++)
            for (int oy = 0; oy < g->OH; oy++)
                for (int ox = 0; ox < g->OW; ox++) {
                    int yi = ((n * g->O + o) * g->OH + oy) * g->OW + ox;
                    double s = b[o], d = dy[yi];
                    sb += d;
                    for (int c = 0; c < g->C; c++)
                        for (int i = 0; i < g->KH; i++)
                            for (int j = 0; j < g->KW; j++) {
                                int iy = oy * g->stride - g->pad + i, ix = ox * g->stride - g->pad + j;
                                if (iy < 0 || iy >= g->H || ix < 0 || ix >= g->W)
                                    continue;
                                int xi = ((n * g->C + c) * g->H + iy) * g->W + ix;
                                int wi = ((o * g->C + c) * g->KH + i) * g->KW + j;
                                s += (double)x[xi] * w[wi];
                                dx[xi] += (float)(d * w[wi]);
                                dw[wi] += (float)(d * x[xi]);
                            }
                    y[yi] = (float)s;
                }
        db[o] = (float)sb;
    }
}

static void conv_vs_reference(const geom *g)
{
    char what[96];
    te_tensor *x = gc_random(te_shape(g->N, g->C, g->H, g->W), -1, 1, 21);
    te_tensor *w = gc_random(te_shape(g->O, g->C, g->KH, g->KW), -1, 1, 22);
    te_tensor *b = gc_random(te_shape(g->O), -1, 1, 23);
    x->requires_grad = w->requires_grad = b->requires_grad = true;
    te_tensor *y = te_conv2d(x, w, b, g->stride, g->pad);
    ck_assert_msg(y && y->shape[2] == g->OH && y->shape[3] == g->OW, "conv: %s", te_error());
    te_tensor *dy = te_tensor_new(TE_F32, y->ndim, y->shape);
    for (int64_t i = 0; i < dy->numel; i++)
        te_set(dy, i, te_rand_uniform(5, 6, (uint64_t)i) - 0.5f);
    te_tensor *ry = te_tensor_new(TE_F32, y->ndim, y->shape);
    te_tensor *rdx = te_tensor_new(TE_F32, x->ndim, x->shape);
    te_tensor *rdw = te_tensor_new(TE_F32, w->ndim, w->shape);
    te_tensor *rdb = te_tensor_new(TE_F32, b->ndim, b->shape);
    float *xv = tu_f32(x), *wv = tu_f32(w), *bv = tu_f32(b), *dyv = tu_f32(dy);
    float *ryv = tu_f32(ry), *rdxv = tu_f32(rdx), *rdwv = tu_f32(rdw), *rdbv = tu_f32(rdb);
    conv_reference(g, xv, wv, bv, dyv, ryv, rdxv, rdwv, rdbv);
    tu_write(ry, ryv);
    tu_write(rdx, rdxv);
    tu_write(rdw, rdwv);
    tu_write(rdb, rdbv);
    float *host[] = { xv, wv, bv, dyv, ryv, rdxv, rdwv, rdbv };
    for (int i = 0; i < 8; i++)
        free(host[i]);
    ck_assert(te_backward_with(y, dy) == TE_OK);
    snprintf(what, sizeof what, "conv %dx%d stride %d pad %d", g->KH, g->KW, g->stride, g->pad);
    fx_assert_close(y, ry, 1e-4, 1e-4, what);
    fx_assert_close(x->grad, rdx, 1e-4, 1e-4, what);
    fx_assert_close(w->grad, rdw, 1e-3, 1e-4, what); /* sums of 1000s of products */
    fx_assert_close(b->grad, rdb, 1e-3, 1e-4, what);
    te_tape_reset(); /* no node may outlive the inputs freed here */
    te_tensor_free(x);
    te_tensor_free(w);
    te_tensor_free(b);
}

START_TEST(test_conv_large)
{
    conv_vs_reference(&(geom){ 2, 16, 24, 24, 32, 3, 3, 1, 1, 24, 24 });
    conv_vs_reference(&(geom){ 2, 16, 40, 40, 8, 3, 3, 2, 1, 20, 20 });
    conv_vs_reference(&(geom){ 2, 64, 24, 24, 8, 1, 1, 1, 0, 24, 24 });
}
END_TEST

/* Pools on 16 planes of 32x32 (the threaded path) against direct loops. */
START_TEST(test_pool_large)
{
    enum { P = 2 * 16, H = 32, W = 32, K = 3, S = 2, PAD = 1, OH = 16, OW = 16 };
    te_tensor *x = distinct(te_shape(2, 16, H, W));
    x->requires_grad = true;
    te_tensor *dy = te_tensor_new(TE_F32, te_shape(2, 16, OH, OW));
    for (int64_t i = 0; i < dy->numel; i++)
        te_set(dy, i, te_rand_uniform(7, 8, (uint64_t)i));
    te_tensor *ymax = te_tensor_new(TE_F32, te_shape(2, 16, OH, OW));
    te_tensor *yavg = te_tensor_new(TE_F32, te_shape(2, 16, OH, OW));
    te_tensor *dmax = te_tensor_zeros(TE_F32, te_shape(2, 16, H, W));
    te_tensor *davg = te_tensor_zeros(TE_F32, te_shape(2, 16, H, W));
    float *xs = tu_f32(x), *dys = tu_f32(dy), *ymaxv = tu_f32(ymax), *yavgv = tu_f32(yavg);
    float *dmaxv = tu_f32(dmax), *davgv = tu_f32(davg);
    for (int p = 0; p < P; p++)
        for (int oy = 0; oy < OH; oy++)
            for (int ox = 0; ox < OW; ox++) {
                int o = (p * OH + oy) * OW + ox, best = -1;
                double sum = 0;
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < K; j++) {
                        int iy = oy * S - PAD + i, ix = ox * S - PAD + j;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                            continue;
                        int xi = (p * H + iy) * W + ix;
                        sum += xs[xi];
                        if (best < 0 || xs[xi] > xs[best])
                            best = xi;
                        davgv[xi] += dys[o] / (K * K);
                    }
                ymaxv[o] = xs[best];
                dmaxv[best] += dys[o];
                yavgv[o] = (float)(sum / (K * K));
            }
    tu_write(ymax, ymaxv);
    tu_write(yavg, yavgv);
    tu_write(dmax, dmaxv);
    tu_write(davg, davgv);
    float *host[] = { xs, dys, ymaxv, yavgv, dmaxv, davgv };
    for (int i = 0; i < 6; i++)
        free(host[i]);
    te_tensor *m = te_maxpool2d(x, K, S, PAD);
    fx_assert_close(m, ymax, 0, 0, "maxpool 32x32");
    ck_assert(te_backward_with(m, dy) == TE_OK);
    fx_assert_close(x->grad, dmax, 1e-6, 1e-6, "maxpool 32x32 dx");
    te_tensor *a = te_avgpool2d(x, K, S, PAD);
    fx_assert_close(a, yavg, 1e-5, 1e-5, "avgpool 32x32");
    x->grad_valid = false;
    ck_assert(te_backward_with(a, dy) == TE_OK);
    fx_assert_close(x->grad, davg, 1e-5, 1e-5, "avgpool 32x32 dx");
    te_tensor_free(x);
}
END_TEST

/* Same inputs, same bits: threaded loops and sgemm run in a fixed order. */
START_TEST(test_conv_deterministic)
{
    te_tensor *x = gc_random(te_shape(4, 8, 20, 20), -1, 1, 31);
    te_tensor *w = gc_random(te_shape(16, 8, 3, 3), -1, 1, 32);
    te_tensor *first = NULL, *first_dw = NULL;
    w->requires_grad = x->requires_grad = true;
    for (int run = 0; run < 2; run++) {
        w->grad_valid = x->grad_valid = false;
        te_tensor *y = te_maxpool2d(te_conv2d(x, w, NULL, 1, 1), 2, 2, 0);
        te_tensor *dy = te_tensor_new(TE_F32, y->ndim, y->shape);
        te_fill(dy, 0.5f);
        ck_assert(te_backward_with(y, dy) == TE_OK);
        if (run == 0) {
            first = tu_as_dtype(y, TE_F32);
            first_dw = tu_as_dtype(w->grad, TE_F32);
        } else {
            ck_assert_msg(tu_same_bytes(first, y), "forward differs");
            ck_assert_msg(tu_same_bytes(first_dw, w->grad), "dw differs");
        }
        te_tape_reset();
    }
    te_tensor_free(first);
    te_tensor_free(first_dw);
    te_tensor_free(x);
    te_tensor_free(w);
}
END_TEST

/* ---- finite differences --------------------------------------------------- */

typedef struct {
    int kernel, stride, pad;
} window;

static te_tensor *gc_conv(te_tensor **in, void *ctx)
{
    const window *a = ctx;
    return te_conv2d(in[0], in[1], in[2], a->stride, a->pad);
}

static void gc_conv_case(const char *what, int64_t n, int64_t c, int64_t h, int64_t w, int64_t o,
                         int64_t kh, int64_t kw, window a, bool bias)
{
    te_tensor *in[3] = { gc_random(te_shape(n, c, h, w), -1, 1, 41),
                         gc_random(te_shape(o, c, kh, kw), -1, 1, 42),
                         bias ? gc_random(te_shape(o), -1, 1, 43) : NULL };
    gc_check(what, gc_conv, &a, in, 3, (const bool[]){ true, true, bias }, 1e-2f, 1e-2f);
    for (int i = 0; i < 3; i++)
        te_tensor_free(in[i]);
}

START_TEST(test_conv_gradcheck)
{
    gc_conv_case("conv 3x3 s1 p1", 2, 2, 5, 5, 3, 3, 3, (window){ 0, 1, 1 }, true);
    gc_conv_case("conv 2x3 s2 p1", 1, 2, 6, 5, 2, 2, 3, (window){ 0, 2, 1 }, false);
    gc_conv_case("conv 1x1", 2, 3, 3, 4, 2, 1, 1, (window){ 0, 1, 0 }, true);
}
END_TEST

static te_tensor *gc_maxpool(te_tensor **in, void *ctx)
{
    const window *a = ctx;
    return te_maxpool2d(in[0], a->kernel, a->stride, a->pad);
}

static te_tensor *gc_avgpool(te_tensor **in, void *ctx)
{
    const window *a = ctx;
    return te_avgpool2d(in[0], a->kernel, a->stride, a->pad);
}

static te_tensor *gc_gap(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_global_avgpool(in[0]);
}

START_TEST(test_pool_gradcheck)
{
    const bool yes[1] = { true };
    te_tensor *x = distinct(te_shape(2, 2, 5, 6));
    gc_check("maxpool 2/2", gc_maxpool, &(window){ 2, 2, 0 }, &x, 1, yes, 1e-2f, 1e-2f);
    gc_check("maxpool 3/1 p1", gc_maxpool, &(window){ 3, 1, 1 }, &x, 1, yes, 1e-2f, 1e-2f);
    gc_check("avgpool 3/2 p1", gc_avgpool, &(window){ 3, 2, 1 }, &x, 1, yes, 1e-2f, 1e-2f);
    gc_check("gap", gc_gap, NULL, &x, 1, yes, 1e-2f, 1e-2f);
    te_tensor_free(x);
}
END_TEST

/* ---- half precision ------------------------------------------------------- */

START_TEST(test_conv_half)
{
    te_tensor *x = gc_random(te_shape(2, 3, 6, 6), -1, 1, 51);
    te_tensor *w = gc_random(te_shape(4, 3, 3, 3), -1, 1, 52);
    te_tensor *b = gc_random(te_shape(4), -1, 1, 53);
    te_tensor *xh = tu_as_dtype(x, TE_F16), *wh = tu_as_dtype(w, TE_F16);
    te_tensor *bh = tu_as_dtype(b, TE_F16);
    tu_copy(x, xh);
    tu_copy(w, wh);
    tu_copy(b, bh);
    te_tensor *t[] = { x, w, b, xh, wh, bh };
    for (int i = 0; i < 6; i++)
        t[i]->requires_grad = true;

    te_tensor *y = te_conv2d(x, w, b, 1, 1), *yh = te_conv2d(xh, wh, bh, 1, 1);
    ck_assert_msg(yh && yh->dtype == TE_F16, "output dtype %s", yh ? te_dtype_name(yh->dtype) : "-");
    fx_assert_close(yh, y, 1e-2, 1e-2, "f16 conv");
    te_tensor *dy = te_tensor_new(TE_F32, y->ndim, y->shape);
    te_fill(dy, 0.25f);
    ck_assert(te_backward_with(y, dy) == TE_OK && te_backward_with(yh, dy) == TE_OK);
    ck_assert(xh->grad->dtype == TE_F16 && wh->grad->dtype == TE_F16);
    fx_assert_close(xh->grad, x->grad, 1e-2, 1e-2, "f16 conv dx");
    fx_assert_close(wh->grad, w->grad, 2e-2, 1e-2, "f16 conv dw");
    fx_assert_close(bh->grad, b->grad, 2e-2, 1e-2, "f16 conv db");

    te_tensor *m = te_maxpool2d(te_maxpool2d(xh, 2, 2, 0), 3, 1, 1);
    ck_assert(m && m->dtype == TE_F16);
    fx_assert_close(m, te_maxpool2d(te_maxpool2d(x, 2, 2, 0), 3, 1, 1), 0, 0, "f16 maxpool");
    te_tensor *a = te_avgpool2d(xh, 2, 2, 0);
    ck_assert(a && a->dtype == TE_F16);
    fx_assert_close(a, te_avgpool2d(x, 2, 2, 0), 1e-3, 1e-3, "f16 avgpool");
    te_tensor *g = te_global_avgpool(xh);
    ck_assert(g && g->dtype == TE_F16);
    fx_assert_close(g, te_global_avgpool(x), 1e-3, 1e-3, "f16 gap");
    te_tensor *mixed = te_conv2d(xh, w, NULL, 1, 0);
    ck_assert_msg(mixed && mixed->dtype == TE_F32, "f16 x with f32 w gave %s",
                  mixed ? te_dtype_name(mixed->dtype) : "-");
    for (int i = 0; i < 6; i++)
        te_tensor_free(t[i]);
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

START_TEST(test_conv_errors)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3, 8, 8));
    te_tensor *w = te_tensor_zeros(TE_F32, te_shape(4, 5, 3, 3));
    te_scope_push("conv1");
    int line = __LINE__ + 1;
    ck_assert(te_conv2d(x, w, NULL, 1, 1) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "conv1/conv", "(Conv2D)",
                    "x [2,3,8,8] and w [4,5,3,3]", "input channels 3 != 5");
    te_scope_pop();

    te_tensor *w3 = te_tensor_zeros(TE_F32, te_shape(4, 3, 3, 3));
    te_tensor *b = te_tensor_zeros(TE_F32, te_shape(3));
    line = __LINE__ + 1;
    ck_assert(te_conv2d(x, w3, b, 1, 1) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "conv", "Conv2D", "b [3] and w [4,3,3,3]",
                    "bias must be [4]");
    te_tensor *wflat = te_tensor_zeros(TE_F32, te_shape(4, 27));
    line = __LINE__ + 1;
    ck_assert(te_conv2d(x, wflat, NULL, 1, 1) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "Conv2D", "x [2,3,8,8] and w [4,27]", "4-D");
    te_tensor *x3 = te_tensor_zeros(TE_F32, te_shape(3, 8, 8));
    line = __LINE__ + 1;
    ck_assert(te_conv2d(x3, w3, NULL, 1, 1) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "Conv2D", "x [3,8,8] and w [4,3,3,3]", "4-D");

    line = __LINE__ + 1;
    ck_assert(te_conv2d(x, w3, NULL, 0, 1) == NULL);
    tu_assert_error(TE_ERR_ARG, tu_at(line), "Conv2D", "x [2,3,8,8] and w [4,3,3,3]", "stride 0");
    line = __LINE__ + 1;
    ck_assert(te_conv2d(x, w3, NULL, 1, -1) == NULL);
    tu_assert_error(TE_ERR_ARG, tu_at(line), "Conv2D", "pad -1");
    te_tensor *tiny = te_tensor_zeros(TE_F32, te_shape(1, 3, 2, 6));
    te_tensor *w5 = te_tensor_zeros(TE_F32, te_shape(1, 3, 5, 5));
    line = __LINE__ + 1;
    ck_assert(te_conv2d(tiny, w5, NULL, 1, 1) == NULL);
    tu_assert_error(TE_ERR_ARG, tu_at(line), "Conv2D", "x [1,3,2,6] and w [1,3,5,5]",
                    "kernel 5x5 larger than the padded input 4x8 (pad 1)");

    te_tensor *narrow = te_tensor_zeros(TE_F32, te_shape(1, 3, 4, 2));
    te_tensor *w15 = te_tensor_zeros(TE_F32, te_shape(1, 3, 1, 5));
    line = __LINE__ + 1;
    ck_assert(te_conv2d(narrow, w15, NULL, 1, 1) == NULL);
    tu_assert_error(TE_ERR_ARG, tu_at(line), "Conv2D",
                    "kernel 1x5 larger than the padded input 6x4 (pad 1)");

    te_tensor *xi = te_tensor_zeros(TE_I32, te_shape(2, 3, 8, 8));
    line = __LINE__ + 1;
    ck_assert(te_conv2d(xi, w3, NULL, 1, 1) == NULL);
    tu_assert_error(TE_ERR_DTYPE, tu_at(line), "Conv2D", "x [2,3,8,8] is i32");
    te_tensor *wi = te_tensor_zeros(TE_I32, te_shape(4, 3, 3, 3));
    line = __LINE__ + 1;
    ck_assert(te_conv2d(x, wi, NULL, 1, 1) == NULL);
    tu_assert_error(TE_ERR_DTYPE, tu_at(line), "Conv2D", "w [4,3,3,3] is i32");

    te_error_clear();
    ck_assert(te_conv2d(x, NULL, NULL, 1, 1) == NULL);
    ck_assert_msg(te_error_code() == TE_ERR_INPUT, "code %d: %s", te_error_code(), te_error());
}
END_TEST

START_TEST(test_pool_errors)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3, 4, 4));
    int line = __LINE__ + 1;
    ck_assert(te_maxpool2d(x, 0, 1, 0) == NULL);
    tu_assert_error(TE_ERR_ARG, tu_at(line), "maxpool", "MaxPool2D", "x [2,3,4,4]", "kernel 0");
    line = __LINE__ + 1;
    ck_assert(te_maxpool2d(x, 3, 2, 2) == NULL);
    tu_assert_error(TE_ERR_ARG, tu_at(line), "maxpool", "MaxPool2D",
                    "pad 2 must be at most half the kernel 3");
    line = __LINE__ + 1;
    ck_assert(te_avgpool2d(x, 2, 0, 0) == NULL);
    tu_assert_error(TE_ERR_ARG, tu_at(line), "avgpool", "AvgPool2D", "x [2,3,4,4]", "stride 0");
    line = __LINE__ + 1;
    ck_assert(te_avgpool2d(x, 2, 1, -1) == NULL);
    tu_assert_error(TE_ERR_ARG, tu_at(line), "avgpool", "AvgPool2D", "pad -1");
    line = __LINE__ + 1;
    ck_assert(te_avgpool2d(x, 5, 1, 0) == NULL);
    tu_assert_error(TE_ERR_ARG, tu_at(line), "avgpool", "AvgPool2D",
                    "kernel 5x5 larger than the padded input 4x4 (pad 0)");
    te_tensor *x3 = te_tensor_zeros(TE_F32, te_shape(3, 4, 4));
    line = __LINE__ + 1;
    ck_assert(te_maxpool2d(x3, 2, 2, 0) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "maxpool", "x [3,4,4]", "4-D");
    te_tensor *xi = te_tensor_zeros(TE_I32, te_shape(2, 3, 4, 4));
    line = __LINE__ + 1;
    ck_assert(te_avgpool2d(xi, 2, 2, 0) == NULL);
    tu_assert_error(TE_ERR_DTYPE, tu_at(line), "avgpool", "x [2,3,4,4] is i32");

    te_tensor *x2 = te_tensor_zeros(TE_F32, te_shape(2, 3));
    line = __LINE__ + 1;
    ck_assert(te_global_avgpool(x2) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "gap", "GlobalAvgPool", "x [2,3]", "4-D");
    line = __LINE__ + 1;
    ck_assert(te_global_avgpool(xi) == NULL);
    tu_assert_error(TE_ERR_DTYPE, tu_at(line), "gap", "GlobalAvgPool", "x [2,3,4,4] is i32");
}
END_TEST

/* ---- oneDNN against the reference kernels --------------------------------- */

/* y, dx, dw, db of one geometry on the path te_cpu_conv_dnnl_allow picked;
 * the gradients run twice, so the second adds to the first. */
static void conv_run(const geom *g, bool bias, bool dnnl, te_tensor *out[4])
{
    te_cpu_conv_dnnl_allow(dnnl);
    te_tensor *x = gc_random(te_shape(g->N, g->C, g->H, g->W), -1, 1, 51);
    te_tensor *w = gc_random(te_shape(g->O, g->C, g->KH, g->KW), -1, 1, 52);
    te_tensor *b = bias ? gc_random(te_shape(g->O), -1, 1, 53) : NULL;
    x->requires_grad = w->requires_grad = true;
    if (b)
        b->requires_grad = true;
    for (int pass = 0; pass < 2; pass++) {
        te_tensor *y = te_conv2d(x, w, b, g->stride, g->pad);
        ck_assert_msg(y && y->shape[2] == g->OH && y->shape[3] == g->OW, "conv: %s", te_error());
        te_tensor *dy = te_tensor_new(TE_F32, y->ndim, y->shape);
        for (int64_t i = 0; i < dy->numel; i++)
            te_set(dy, i, te_rand_uniform(7, (uint64_t)pass, (uint64_t)i) - 0.5f);
        if (pass == 0)
            out[0] = tu_as_dtype(y, TE_F32);
        ck_assert(te_backward_with(y, dy) == TE_OK);
        te_tape_reset();
    }
    out[1] = tu_as_dtype(x->grad, TE_F32);
    out[2] = tu_as_dtype(w->grad, TE_F32);
    out[3] = b ? tu_as_dtype(b->grad, TE_F32) : NULL;
    te_tensor_free(x);
    te_tensor_free(w);
    te_tensor_free(b);
    te_cpu_conv_dnnl_allow(true);
}

START_TEST(test_conv_dnnl_matches_reference)
{
#ifdef HAVE_DNNL
    ck_assert_str_eq(te_cpu_conv(), "oneDNN (blocked layouts)");
#endif
    te_cpu_conv_dnnl_allow(false);
    ck_assert_str_eq(te_cpu_conv(), "im2col + sgemm");
    te_cpu_conv_dnnl_allow(true);
    static const struct {
        geom g;
        bool bias;
    } cases[] = {
        { { 2, 16, 12, 12, 32, 3, 3, 1, 1, 12, 12 }, true },  /* blocks of 16: oneDNN's own */
        { { 3, 3, 11, 9, 10, 3, 3, 2, 1, 6, 5 }, true },      /* odd channels, stride 2, a remainder */
        { { 1, 8, 7, 7, 5, 1, 1, 1, 0, 7, 7 }, false },       /* 1x1: no col matrix in the reference */
        { { 2, 5, 9, 9, 6, 5, 5, 1, 2, 9, 9 }, true },        /* 5x5, pad 2 */
        { { 4, 20, 8, 8, 24, 3, 3, 3, 0, 2, 2 }, false },     /* stride 3, no padding */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        te_tensor *d[4], *r[4];
        conv_run(&cases[k].g, cases[k].bias, true, d);
        conv_run(&cases[k].g, cases[k].bias, false, r);
        static const char *const names[] = { "y", "dx (accumulated)", "dw (accumulated)", "db (accumulated)" };
        for (int i = 0; i < 4; i++) {
            if (!r[i])
                continue;
            char what[96];
            snprintf(what, sizeof what, "case %zu: %s, oneDNN against the reference", k, names[i]);
            fx_assert_close(d[i], r[i], 1e-4, 1e-4, what);
            te_tensor_free(d[i]);
            te_tensor_free(r[i]);
        }
    }
}
END_TEST

/* The conv tests again, on the reference kernels. */
static void setup_reference(void)
{
    tu_setup();
    te_cpu_conv_dnnl_allow(false);
}

Suite *suite_conv(void)
{
    Suite *s = suite_create("conv");
    TCase *tc = tcase_create("conv");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_conv_golden);
    tcase_add_test(tc, test_conv_accumulates);
    tcase_add_test(tc, test_conv_partial_grads);
    tcase_add_test(tc, test_pool_golden);
    tcase_add_test(tc, test_pool_accumulates);
    tcase_add_test(tc, test_pool_padding_and_nan);
    tcase_add_test(tc, test_pool_blocked_matches_plain);
    tcase_add_test(tc, test_conv_large);
    tcase_add_test(tc, test_pool_large);
    tcase_add_test(tc, test_conv_deterministic);
    tcase_add_test(tc, test_conv_gradcheck);
    tcase_add_test(tc, test_pool_gradcheck);
    tcase_add_test(tc, test_conv_half);
    tcase_add_test(tc, test_conv_errors);
    tcase_add_test(tc, test_pool_errors);
    tcase_add_test(tc, test_conv_dnnl_matches_reference);
    suite_add_tcase(s, tc);
    TCase *ref = tcase_create("conv reference kernels");
    tcase_add_checked_fixture(ref, setup_reference, tu_teardown);
    tcase_add_test(ref, test_conv_golden);
    tcase_add_test(ref, test_conv_accumulates);
    tcase_add_test(ref, test_conv_partial_grads);
    tcase_add_test(ref, test_conv_large);
    tcase_add_test(ref, test_conv_deterministic);
    tcase_add_test(ref, test_conv_gradcheck);
    tcase_add_test(ref, test_conv_half);
    suite_add_tcase(s, ref);
    return s;
}
