/* test_cuda_conv.c — conv2d, the pools and batch norm on the CUDA backend
 * (engine/cuda/cuda_conv.c, cuda_norm.c) against the CPU backend.
 *
 * Each case runs the op on the CPU through the public API, then the CUDA
 * kernel on a twin of its node whose tensors are device copies made before
 * the CPU ran (running statistics change), and compares what comes back:
 * f32 within 1e-5 relative, with an absolute floor of 1e-5 times the
 * largest |value| of the result (a sum that cancels to near 0 keeps the
 * rounding of its terms); NaN where the CPU has NaN; indices exactly. The
 * backward runs twice on the device: overwrite (acc 0), then accumulate
 * (acc 1: twice the gradient). Without a usable device a test prints why
 * and checks nothing (the probe runs in the test's own process: CUDA does
 * not survive a fork). The glue's size limits are checked without one.
 * These ops have no bad data (no labels, no indices in their inputs).
 */
#include "cuda/cuda_conv.h"
#include "cuda/cuda_norm.h"
#include "cuda/cuda_reduce.h"
#include "cuda/cuda_rt.h"
#include "graph/graph.h"
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- device twins ---------------------------------------------------------- */

#define MAX_OWN 64
static te_tensor *dev_own[MAX_OWN], *host_own[MAX_OWN];
static int n_dev, n_host;

/* True (after saying why) when this process has no device to run on. */
static bool no_device(const char *test) { return !tu_cuda_device(test); }

/* A zeroed device tensor shaped like `like` (no grad, no node). */
static te_tensor *dev_new(const te_tensor *like)
{
    ck_assert(n_dev < MAX_OWN);
    te_tensor *d = malloc(sizeof *d);
    ck_assert_ptr_nonnull(d);
    *d = *like;
    d->grad = NULL;
    d->grad_valid = false;
    d->node = NULL;
    d->device = TE_DEV_CUDA;
    size_t bytes = d->nbytes ? d->nbytes : 4;
    ck_assert_int_eq(cudaMalloc(&d->data, bytes), cudaSuccess);
    ck_assert_int_eq(cudaMemset(d->data, 0, bytes), cudaSuccess);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess); /* the kernels' stream does not wait for the legacy one */
    dev_own[n_dev++] = d;
    return d;
}

/* A device copy of t's values (NULL for NULL). */
static te_tensor *dev_copy(const te_tensor *t)
{
    if (!t)
        return NULL;
    te_tensor *d = dev_new(t);
    ck_assert_int_eq(cudaMemcpy(d->data, t->data, t->nbytes, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    return d;
}

/* Gives device tensor d a zeroed gradient the first backward overwrites. */
static void dev_grad(te_tensor *d)
{
    if (d) {
        d->grad = dev_new(d);
        d->grad_valid = false;
    }
}

/* d's values into host memory, after all queued work. */
static void dev_read(const te_tensor *d, void *host)
{
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(host, d->data, d->nbytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

static void dev_free_all(void)
{
    for (int i = 0; i < n_dev; i++) {
        cudaFree(dev_own[i]->data);
        free(dev_own[i]);
    }
    n_dev = 0;
    for (int i = 0; i < n_host; i++)
        te_tensor_free(host_own[i]);
    n_host = 0;
}

/* A persistent CPU tensor of uniform values in [lo, hi) that wants a grad. */
static te_tensor *host_param(int ndim, const int64_t *shape, uint32_t seed, float lo, float hi, bool grad)
{
    ck_assert(n_host < MAX_OWN);
    te_tensor *t = te_tensor_persistent(TE_F32, ndim, shape);
    ck_assert_ptr_nonnull(t);
    tu_fill_uniform(te_f32(t), t->numel, seed, lo, hi);
    t->requires_grad = grad;
    host_own[n_host++] = t;
    return t;
}

/* A tape tensor of uniform values shaped like `like` (an upstream grad). */
static te_tensor *host_like(const te_tensor *like, uint32_t seed)
{
    te_tensor *t = te_tensor_new(TE_F32, like->ndim, like->shape);
    ck_assert_ptr_nonnull(t);
    tu_fill_uniform(te_f32(t), t->numel, seed, -1.0f, 1.0f);
    return t;
}

/* The device tensor d against want[0..n) times mult (see the file's head). */
static void expect_close(const te_tensor *d, const float *want, float mult, const char *what)
{
    const int64_t n = d->numel;
    float *got = malloc((size_t)(n ? n : 1) * sizeof *got);
    ck_assert_ptr_nonnull(got);
    dev_read(d, got);
    double scale = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(want[i]))
            scale = fmax(scale, fabs((double)want[i] * mult));
    for (int64_t i = 0; i < n; i++) {
        const double w = (double)(want[i] * mult), g = got[i];
        if (isnan(w) || isnan(g)) {
            ck_assert_msg(isnan(w) && isnan(g), "%s[%lld]: cuda %g, cpu %g", what, (long long)i, g, w);
            continue;
        }
        ck_assert_msg(fabs(g - w) <= 1e-5 * fabs(w) + 1e-5 * scale, "%s[%lld]: cuda %.9g, cpu %.9g (scale %g)", what,
                      (long long)i, g, w, scale);
    }
    free(got);
}

/* The backward kernel bwd on the device node twice: the gradients of the
 * twins dev[i] of host[i] (those that want one) are first the CPU's, then
 * twice them (accumulated). */
typedef te_status (*bwd_fn)(void *ctx);
static void expect_grads(bwd_fn bwd, void *ctx, te_tensor *const *dev, te_tensor *const *host, int count,
                         const char *what)
{
    char label[96];
    for (int round = 0; round < 2; round++) {
        ck_assert_msg(bwd(ctx) == TE_OK, "%s backward: %s", what, te_error());
        for (int i = 0; i < count; i++) {
            if (!host[i] || !host[i]->requires_grad)
                continue;
            ck_assert_ptr_nonnull(host[i]->grad);
            snprintf(label, sizeof label, "%s: grad of input %d (%s)", what, i, round ? "acc 1" : "acc 0");
            expect_close(dev[i]->grad, te_f32(host[i]->grad), round ? 2.0f : 1.0f, label);
        }
    }
}

/* ---- conv2d ---------------------------------------------------------------- */

typedef struct conv_case {
    int N, C, H, W, O, K, stride, pad;
    bool bias;
} conv_case;

static const conv_case conv_cases[] = {
    { 2, 3, 7, 6, 4, 3, 1, 1, true },  /* padded, bias */
    { 2, 3, 8, 8, 5, 3, 2, 1, false }, /* strided, no bias */
    { 1, 4, 5, 5, 2, 1, 1, 0, true },  /* pointwise */
    { 2, 2, 9, 7, 3, 5, 3, 2, true },  /* stride 3, pad 2 */
};

static te_status conv_bwd(void *n) { return cuda_conv2d_backward(n); }

static void conv_one(const conv_case *c)
{
    te_tensor *x = host_param(te_shape(c->N, c->C, c->H, c->W), 1, -1.0f, 1.0f, true);
    te_tensor *w = host_param(te_shape(c->O, c->C, c->K, c->K), 2, -0.5f, 0.5f, true);
    te_tensor *b = c->bias ? host_param(te_shape(c->O), 3, -0.5f, 0.5f, true) : NULL;
    te_tensor *in[3] = { x, w, b }, *din[3] = { dev_copy(x), dev_copy(w), dev_copy(b) };

    te_tensor *y = te_conv2d(x, w, b, c->stride, c->pad);
    ck_assert_msg(y != NULL, "cpu conv2d: %s", te_error());
    te_node dn = *y->node;
    for (int i = 0; i < 3; i++)
        dn.in[i] = din[i];
    dn.out[0] = dev_new(y);
    ck_assert_msg(cuda_conv2d_forward(&dn) == TE_OK, "cuda conv2d: %s", te_error());
    expect_close(dn.out[0], te_f32(y), 1.0f, "conv2d y");

    te_tensor *dy = host_like(y, 4);
    ck_assert_msg(te_backward_with(y, dy) == TE_OK, "cpu backward: %s", te_error());
    dn.out[0]->grad = dev_copy(dy);
    for (int i = 0; i < 3; i++)
        dev_grad(din[i]);
    expect_grads(conv_bwd, &dn, din, in, 3, "conv2d");
    dev_free_all();
    te_tape_reset();
}

START_TEST(test_cuda_conv2d)
{
    if (no_device("test_cuda_conv2d"))
        return;
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++)
        conv_one(&conv_cases[i]);
}
END_TEST

/* ---- pools ----------------------------------------------------------------- */

typedef struct pool_case {
    te_op op; /* MAXPOOL2D, AVGPOOL2D or GLOBAL_AVGPOOL */
    int N, C, H, W, kernel, stride, pad;
    bool ties, nan; /* max pool: values on a coarse grid (ties), a NaN */
} pool_case;

static const pool_case pool_cases[] = {
    { TE_OP_MAXPOOL2D, 2, 3, 7, 7, 3, 2, 1, false, false },
    { TE_OP_MAXPOOL2D, 2, 2, 8, 8, 3, 1, 1, true, false }, /* overlapping windows, ties */
    { TE_OP_MAXPOOL2D, 1, 2, 6, 5, 2, 2, 0, false, true },
    { TE_OP_AVGPOOL2D, 2, 3, 7, 7, 3, 2, 1, false, false },
    { TE_OP_AVGPOOL2D, 2, 2, 8, 8, 3, 1, 1, false, false }, /* overlapping windows */
    { TE_OP_AVGPOOL2D, 1, 2, 6, 5, 2, 2, 0, false, false },
    { TE_OP_GLOBAL_AVGPOOL, 2, 3, 5, 4, 0, 0, 0, false, false },
};

static te_status pool_bwd(void *n)
{
    te_node *d = n;
    switch (d->op) {
    case TE_OP_MAXPOOL2D: return cuda_maxpool2d_backward(d);
    case TE_OP_AVGPOOL2D: return cuda_avgpool2d_backward(d);
    default: return cuda_global_avgpool_backward(d);
    }
}

static void pool_one(const pool_case *c)
{
    te_tensor *x = host_param(te_shape(c->N, c->C, c->H, c->W), 5, -1.0f, 1.0f, true);
    float *xv = te_f32(x);
    for (int64_t i = 0; c->ties && i < x->numel; i++)
        xv[i] = roundf(xv[i] * 2.0f) / 2.0f;
    if (c->nan)
        xv[7] = NAN;
    te_tensor *dx = dev_copy(x);

    te_tensor *y = c->op == TE_OP_MAXPOOL2D   ? te_maxpool2d(x, c->kernel, c->stride, c->pad)
                   : c->op == TE_OP_AVGPOOL2D ? te_avgpool2d(x, c->kernel, c->stride, c->pad)
                                              : te_global_avgpool(x);
    ck_assert_msg(y != NULL, "cpu pool: %s", te_error());
    te_node *n = y->node, dn = *n;
    dn.in[0] = dx;
    dn.out[0] = dev_new(y);
    te_status st;
    if (c->op == TE_OP_MAXPOOL2D) {
        dn.saved[0] = dev_new(n->saved[0]);
        st = cuda_maxpool2d_forward(&dn);
    } else {
        st = c->op == TE_OP_AVGPOOL2D ? cuda_avgpool2d_forward(&dn) : cuda_global_avgpool_forward(&dn);
    }
    ck_assert_msg(st == TE_OK, "cuda %s: %s", te_op_type_name(c->op), te_error());
    expect_close(dn.out[0], te_f32(y), 1.0f, te_op_type_name(c->op));
    if (c->op == TE_OP_MAXPOOL2D) { /* the saved argmax, as the debugger sees it */
        int32_t *idx = malloc(n->saved[0]->nbytes);
        ck_assert_ptr_nonnull(idx);
        dev_read(dn.saved[0], idx);
        for (int64_t i = 0; i < n->saved[0]->numel; i++)
            ck_assert_msg(idx[i] == te_i32(n->saved[0])[i], "argmax[%lld]: cuda %d, cpu %d", (long long)i, idx[i],
                          te_i32(n->saved[0])[i]);
        free(idx);
    }

    te_tensor *dy = host_like(y, 6);
    ck_assert_msg(te_backward_with(y, dy) == TE_OK, "cpu backward: %s", te_error());
    dn.out[0]->grad = dev_copy(dy);
    dev_grad(dx);
    expect_grads(pool_bwd, &dn, &dx, &x, 1, te_op_type_name(c->op));
    dev_free_all();
    te_tape_reset();
}

START_TEST(test_cuda_pools)
{
    if (no_device("test_cuda_pools"))
        return;
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++)
        pool_one(&pool_cases[i]);
}
END_TEST

/* ---- batch norm ------------------------------------------------------------ */

typedef struct bn_case {
    int N, C, H, W;             /* H == 0: x is [N,C] */
    bool affine, running, training;
    bool relu;                  /* graph mode's fused BN+ReLU kernels */
} bn_case;

static const bn_case bn_cases[] = {
    { 4, 3, 5, 5, true, true, true, false },
    { 8, 5, 0, 0, false, false, true, false }, /* [N,C], no gamma/beta, no running stats */
    { 4, 3, 5, 5, true, true, false, false },  /* eval: the running stats */
    { 3, 4, 3, 3, true, true, true, true },
    { 2, 3, 4, 4, false, true, false, true },
};

typedef struct bn_ctx {
    te_node *bn, *relu;
} bn_ctx;

static te_status bn_bwd(void *p)
{
    bn_ctx *c = p;
    return c->relu ? cuda_tg_bn_relu_backward(c->bn, c->relu) : cuda_batchnorm_backward(c->bn);
}

/* Running stats away from PyTorch's 0 and 1, so that their update shows. */
static te_tensor *stat_vec(int64_t C, float base, float step)
{
    te_tensor *t = host_param(te_shape(C), 0, 0.0f, 1.0f, false);
    for (int64_t c = 0; c < C; c++)
        te_f32(t)[c] = base + step * (float)c;
    return t;
}

static void bn_one(const bn_case *c)
{
    te_tensor *x = c->H ? host_param(te_shape(c->N, c->C, c->H, c->W), 7, 0.5f, 2.5f, true)
                        : host_param(te_shape(c->N, c->C), 7, 0.5f, 2.5f, true);
    te_tensor *g = c->affine ? host_param(te_shape(c->C), 8, 0.5f, 1.5f, true) : NULL;
    te_tensor *b = c->affine ? host_param(te_shape(c->C), 9, -0.5f, 0.5f, true) : NULL;
    te_tensor *rm = c->running ? stat_vec(c->C, -0.2f, 0.1f) : NULL;
    te_tensor *rv = c->running ? stat_vec(c->C, 0.5f, 0.25f) : NULL;
    te_tensor *in[5] = { x, g, b, rm, rv }, *din[5];
    for (int i = 0; i < 5; i++)
        din[i] = dev_copy(in[i]); /* before the CPU updates the running stats */

    te_set_training(c->training);
    te_tensor *y = te_batchnorm(x, g, b, rm, rv, 0.1f, 1e-5f);
    ck_assert_msg(y != NULL, "cpu batchnorm: %s", te_error());
    te_tensor *z = c->relu ? te_relu(y) : y;
    ck_assert_ptr_nonnull(z);
    te_node *n = y->node, dn = *n, dr = { 0 };
    for (int i = 0; i < 5; i++)
        dn.in[i] = din[i];
    dn.saved[0] = dev_new(n->saved[0]);
    dn.saved[1] = dev_new(n->saved[1]);
    bn_ctx ctx = { &dn, NULL };
    te_status st;
    if (c->relu) {
        dr = *z->node;
        dr.out[0] = dev_new(z);
        ctx.relu = &dr;
        st = cuda_tg_bn_relu_forward(&dn, &dr);
    } else {
        dn.out[0] = dev_new(y);
        st = cuda_batchnorm_forward(&dn);
    }
    ck_assert_msg(st == TE_OK, "cuda batchnorm: %s", te_error());
    expect_close(c->relu ? dr.out[0] : dn.out[0], te_f32(z), 1.0f, "batchnorm y");
    expect_close(dn.saved[0], te_f32(n->saved[0]), 1.0f, "saved mean");
    expect_close(dn.saved[1], te_f32(n->saved[1]), 1.0f, "saved rstd");
    if (rm) { /* after one step (training), or untouched (eval) */
        expect_close(din[3], te_f32(rm), 1.0f, "running_mean");
        expect_close(din[4], te_f32(rv), 1.0f, "running_var");
    }

    te_tensor *dy = host_like(z, 10);
    ck_assert_msg(te_backward_with(z, dy) == TE_OK, "cpu backward: %s", te_error());
    (c->relu ? dr.out[0] : dn.out[0])->grad = dev_copy(dy);
    for (int i = 0; i < 3; i++)
        dev_grad(din[i]);
    expect_grads(bn_bwd, &ctx, din, in, 3, c->relu ? "batchnorm+relu" : "batchnorm");
    te_set_training(true);
    dev_free_all();
    te_tape_reset();
}

START_TEST(test_cuda_batchnorm)
{
    if (no_device("test_cuda_batchnorm"))
        return;
    for (size_t i = 0; i < sizeof bn_cases / sizeof bn_cases[0]; i++)
        bn_one(&bn_cases[i]);
}
END_TEST

/* Graph mode's eval conv + batch norm folded into one conv: the same
 * folded weights and bias as the CPU's kernel, and the eager result. */
START_TEST(test_cuda_bn_fold)
{
    if (no_device("test_cuda_bn_fold"))
        return;
    te_tensor *x = host_param(te_shape(2, 3, 6, 6), 11, -1.0f, 1.0f, false);
    te_tensor *w = host_param(te_shape(4, 3, 3, 3), 12, -0.5f, 0.5f, false);
    te_tensor *b = host_param(te_shape(4), 13, -0.5f, 0.5f, false);
    te_tensor *g = host_param(te_shape(4), 14, 0.5f, 1.5f, false);
    te_tensor *be = host_param(te_shape(4), 15, -0.5f, 0.5f, false);
    te_tensor *rm = stat_vec(4, -0.2f, 0.1f), *rv = stat_vec(4, 0.5f, 0.25f);
    te_set_training(false);
    te_tensor *y = te_conv2d(x, w, b, 1, 1);
    ck_assert_ptr_nonnull(y);
    te_tensor *z = te_batchnorm(y, g, be, rm, rv, 0.1f, 1e-5f);
    ck_assert_msg(z != NULL, "cpu batchnorm: %s", te_error());
    float *eager = malloc(z->nbytes);
    ck_assert_ptr_nonnull(eager);
    memcpy(eager, te_f32(z), z->nbytes);

    /* the CPU's fold, into z */
    tg_kernel kc = { .kind = TG_K_BN_FOLD, .node = y->node, .act = z->node };
    kc.fold_w = te_tensor_new(TE_F32, w->ndim, w->shape);
    kc.fold_b = te_tensor_new(TE_F32, rm->ndim, rm->shape);
    ck_assert(kc.fold_w && kc.fold_b);
    ck_assert_msg(tg_bn_fold_run(&kc) == TE_OK, "cpu fold: %s", te_error());

    te_node dc = *y->node, db = *z->node;
    dc.in[0] = dev_copy(x);
    dc.in[1] = dev_copy(w);
    dc.in[2] = dev_copy(b);
    dc.out[0] = dev_new(y);
    db.in[0] = dc.out[0];
    db.in[1] = dev_copy(g);
    db.in[2] = dev_copy(be);
    db.in[3] = dev_copy(rm);
    db.in[4] = dev_copy(rv);
    db.out[0] = dev_new(z);
    tg_kernel kd = { .kind = TG_K_BN_FOLD, .node = &dc, .act = &db };
    kd.fold_w = dev_new(kc.fold_w);
    kd.fold_b = dev_new(kc.fold_b);
    ck_assert_msg(cuda_tg_bn_fold_run(&kd) == TE_OK, "cuda fold: %s", te_error());
    expect_close(kd.fold_w, te_f32(kc.fold_w), 1.0f, "folded w");
    expect_close(kd.fold_b, te_f32(kc.fold_b), 1.0f, "folded b");
    expect_close(db.out[0], te_f32(z), 1.0f, "folded conv, against the CPU's");
    expect_close(db.out[0], eager, 1.0f, "folded conv, against eager conv + batch norm");
    free(eager);
    te_set_training(true);
    dev_free_all();
}
END_TEST

/* ---- without a device: the glue's limits ------------------------------------- */

/* Shapes cuDNN's int counts or the i32 argmax cannot take fail with the
 * engine's error before anything reaches the device (the tensors' data is
 * never read). */
START_TEST(test_cuda_conv_limits)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(1, 1, 4, 4));
    te_tensor *w = te_tensor_zeros(TE_F32, te_shape(1, 1, 3, 3));
    te_tensor *y = te_conv2d(x, w, NULL, 1, 0);
    ck_assert_ptr_nonnull(y);
    te_tensor bx = *x, by = *y;
    const int64_t side = 65536;
    bx.shape[2] = bx.shape[3] = side;
    bx.numel = side * side;
    by.shape[2] = by.shape[3] = side - 2;
    by.numel = (side - 2) * (side - 2);
    te_node n = *y->node;
    n.in[0] = &bx;
    n.out[0] = &by;
    ck_assert_int_eq(cuda_conv2d_forward(&n), TE_ERR_SHAPE);
    tu_assert_error(TE_ERR_SHAPE, "conv2d: 4294967296 elements in one tensor: cuDNN takes at most 2147483647");

    te_tensor *p = te_maxpool2d(x, 2, 2, 0);
    ck_assert_ptr_nonnull(p);
    te_tensor bp = *p;
    bp.shape[2] = bp.shape[3] = side / 2;
    bp.numel = (side / 2) * (side / 2);
    te_node m = *p->node;
    m.in[0] = &bx;
    m.out[0] = &bp;
    ck_assert_int_eq(cuda_maxpool2d_forward(&m), TE_ERR_SHAPE);
    tu_assert_error(TE_ERR_SHAPE, "a plane of more than 2147483647 elements");
}
END_TEST

Suite *suite_cuda_conv(void)
{
    Suite *s = suite_create("cuda_conv");
    TCase *tc = tcase_create("cuda_conv");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 120); /* a device's first use starts its context */
    tcase_add_test(tc, test_cuda_conv_limits);
    tcase_add_test(tc, test_cuda_conv2d);
    tcase_add_test(tc, test_cuda_pools);
    tcase_add_test(tc, test_cuda_batchnorm);
    tcase_add_test(tc, test_cuda_bn_fold);
    suite_add_tcase(s, tc);
    return s;
}
