/* test_norm.c — batch norm and layer norm against PyTorch (fixtures/norm.bin),
 * finite differences, thread-count determinism, half inputs and errors. */
#include "fixture.h"
#include "gradcheck.h"
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A persistent [c] f32 tensor filled with v (running stats). */
static te_tensor *stat_vec(int64_t c, float v)
{
    te_tensor *t = te_tensor_persistent(TE_F32, 1, (int64_t[]){ c });
    te_fill(t, v);
    return t;
}

/* ---- batch norm against PyTorch ------------------------------------------ */

/* One training call: y and the grads of x, gamma, beta for the stored
 * upstream grad; running stats after it and after a second call. The mode
 * flips to eval before backward: the node keeps the mode it recorded. */
static void bn_train_golden(const char *tag)
{
    char k[64];
#define FX(name) (snprintf(k, sizeof k, "%s_%s", tag, name), k)
    fx_file *f = fx_open("norm.bin");
    te_tensor *x = fx_param(f, FX("x")), *g = fx_param(f, FX("gamma"));
    te_tensor *b = fx_param(f, FX("beta"));
    const int64_t C = x->shape[1];
    te_tensor *rm = stat_vec(C, 0.0f), *rv = stat_vec(C, 1.0f);

    te_set_training(true);
    te_tensor *y = te_batchnorm(x, g, b, rm, rv, 0.1f, 1e-5f);
    fx_assert_close(y, fx_tensor(f, FX("y")), 1e-5, 1e-4, FX("y"));
    fx_assert_close(rm, fx_tensor(f, FX("rm1")), 1e-6, 1e-5, FX("running_mean after 1 call"));
    fx_assert_close(rv, fx_tensor(f, FX("rv1")), 1e-6, 1e-5, FX("running_var after 1 call"));
    te_set_training(false);
    ck_assert_msg(te_backward_with(y, fx_tensor(f, FX("dy"))) == TE_OK, "backward: %s", te_error());
    fx_assert_close(x->grad, fx_tensor(f, FX("dx")), 1e-5, 1e-4, FX("dx"));
    fx_assert_close(g->grad, fx_tensor(f, FX("dgamma")), 1e-5, 1e-4, FX("dgamma"));
    fx_assert_close(b->grad, fx_tensor(f, FX("dbeta")), 1e-5, 1e-4, FX("dbeta"));
    te_tape_reset();

    te_set_training(true);
    ck_assert(te_batchnorm(fx_tensor(f, FX("x2")), g, b, rm, rv, 0.1f, 1e-5f) != NULL);
    fx_assert_close(rm, fx_tensor(f, FX("rm2")), 1e-6, 1e-5, FX("running_mean after 2 calls"));
    fx_assert_close(rv, fx_tensor(f, FX("rv2")), 1e-6, 1e-5, FX("running_var after 2 calls"));
#undef FX
    te_tensor *own[] = { x, g, b, rm, rv };
    for (int i = 0; i < 5; i++)
        te_tensor_free(own[i]);
    fx_close(f);
}

START_TEST(test_bn_train_2d_golden) { bn_train_golden("bn2"); }
END_TEST

START_TEST(test_bn_train_4d_golden) { bn_train_golden("bn4"); }
END_TEST

/* Eval mode normalises by the running stats, leaves them alone, and treats
 * them as constants in backward. */
START_TEST(test_bn_eval_golden)
{
    fx_file *f = fx_open("norm.bin");
    te_tensor *x = fx_param(f, "bne_x"), *g = fx_param(f, "bne_gamma");
    te_tensor *b = fx_param(f, "bne_beta"), *rm = fx_param(f, "bne_rm"),
              *rv = fx_param(f, "bne_rv");
    rm->requires_grad = rv->requires_grad = false;
    te_set_training(false);
    te_tensor *y = te_batchnorm(x, g, b, rm, rv, 0.1f, 1e-5f);
    fx_assert_close(y, fx_tensor(f, "bne_y"), 1e-5, 1e-4, "eval y");
    fx_assert_close(rm, fx_tensor(f, "bne_rm"), 0, 0, "running_mean untouched in eval");
    fx_assert_close(rv, fx_tensor(f, "bne_rv"), 0, 0, "running_var untouched in eval");
    ck_assert_msg(te_backward_with(y, fx_tensor(f, "bne_dy")) == TE_OK, "backward: %s", te_error());
    fx_assert_close(x->grad, fx_tensor(f, "bne_dx"), 1e-5, 1e-4, "eval dx");
    fx_assert_close(g->grad, fx_tensor(f, "bne_dgamma"), 1e-5, 1e-4, "eval dgamma");
    fx_assert_close(b->grad, fx_tensor(f, "bne_dbeta"), 1e-5, 1e-4, "eval dbeta");
    te_tensor *own[] = { x, g, b, rm, rv };
    for (int i = 0; i < 5; i++)
        te_tensor_free(own[i]);
    fx_close(f);
}
END_TEST

/* Without gamma and beta the output is the plain normalised x: zero mean
 * and unit (biased) variance per channel. */
START_TEST(test_bn_no_affine_normalises)
{
    te_tensor *x = gc_random(te_shape(4, 3, 2, 5), -3.0f, 5.0f, 11);
    te_tensor *y = te_batchnorm(x, NULL, NULL, NULL, NULL, 0.1f, 1e-5f);
    ck_assert_msg(y != NULL, "%s", te_error());
    for (int c = 0; c < 3; c++) {
        double s = 0, ss = 0;
        for (int i = 0; i < 4; i++)
            for (int k = 0; k < 10; k++) {
                double v = te_get(y, (i * 3 + c) * 10 + k);
                s += v;
                ss += v * v;
            }
        ck_assert_msg(fabs(s / 40) < 1e-5, "channel %d mean %g, expected 0", c, s / 40);
        ck_assert_msg(fabs(ss / 40 - 1) < 1e-3, "channel %d variance %g, expected ~1", c, ss / 40);
    }
    te_tensor_free(x);
}
END_TEST

/* ---- finite differences --------------------------------------------------- */

static te_tensor *bn_fn(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_batchnorm(in[0], in[1], in[2], in[3], in[4], 0.1f, 1e-5f);
}

static void bn_gradcheck(const char *what, int ndim, const int64_t *shape, bool training)
{
    const int64_t C = shape[1];
    te_tensor *in[5] = {
        gc_random(ndim, shape, -2.0f, 2.0f, 1),
        gc_random(1, &shape[1], 0.5f, 1.5f, 2),
        gc_random(1, &shape[1], -0.5f, 0.5f, 3),
        NULL,
        NULL,
    };
    if (!training) {
        in[3] = gc_random(1, &C, -0.5f, 0.5f, 4);
        in[4] = gc_random(1, &C, 0.5f, 1.5f, 5);
    }
    te_set_training(training);
    gc_check(what, bn_fn, NULL, in, 5, (bool[]){ true, true, true, false, false }, 1e-2f, 1e-2f);
    for (int i = 0; i < 5; i++)
        te_tensor_free(in[i]);
}

START_TEST(test_bn_gradcheck)
{
    bn_gradcheck("batchnorm train [N,C]", te_shape(5, 3), true);
    bn_gradcheck("batchnorm train [N,C,H,W]", te_shape(2, 3, 2, 3), true);
    bn_gradcheck("batchnorm eval [N,C,H,W]", te_shape(2, 3, 2, 3), false);
}
END_TEST

static te_tensor *ln_fn(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_layernorm(in[0], in[1], in[2], 1e-5f);
}

START_TEST(test_ln_gradcheck)
{
    te_tensor *in[3] = { gc_random(te_shape(2, 3, 7), -2.0f, 2.0f, 21),
                         gc_random(te_shape(7), 0.5f, 1.5f, 22),
                         gc_random(te_shape(7), -0.5f, 0.5f, 23) };
    gc_check("layernorm affine", ln_fn, NULL, in, 3, (bool[]){ true, true, true }, 1e-2f, 1e-2f);
    te_tensor *plain[3] = { in[0], NULL, NULL };
    gc_check("layernorm plain", ln_fn, NULL, plain, 3, (bool[]){ true, false, false }, 1e-2f,
             1e-2f);
    for (int i = 0; i < 3; i++)
        te_tensor_free(in[i]);
}
END_TEST

/* ---- layer norm against PyTorch ------------------------------------------ */

START_TEST(test_ln_golden)
{
    fx_file *f = fx_open("norm.bin");
    te_tensor *x = fx_param(f, "ln_x"), *g = fx_param(f, "ln_gamma"), *b = fx_param(f, "ln_beta");
    te_tensor *y = te_layernorm(x, g, b, 1e-5f);
    fx_assert_close(y, fx_tensor(f, "ln_y"), 1e-5, 1e-4, "layernorm y");
    ck_assert_msg(te_backward_with(y, fx_tensor(f, "ln_dy")) == TE_OK, "backward: %s", te_error());
    fx_assert_close(x->grad, fx_tensor(f, "ln_dx"), 1e-5, 1e-4, "layernorm dx");
    fx_assert_close(g->grad, fx_tensor(f, "ln_dgamma"), 1e-5, 1e-4, "layernorm dgamma");
    fx_assert_close(b->grad, fx_tensor(f, "ln_dbeta"), 1e-5, 1e-4, "layernorm dbeta");
    te_tape_reset();

    te_tensor *xn = fx_param(f, "lnn_x");
    te_tensor *yn = te_layernorm(xn, NULL, NULL, 1e-5f);
    fx_assert_close(yn, fx_tensor(f, "lnn_y"), 1e-5, 1e-4, "layernorm (no affine) y");
    ck_assert_msg(te_backward_with(yn, fx_tensor(f, "lnn_dy")) == TE_OK, "backward: %s",
                  te_error());
    fx_assert_close(xn->grad, fx_tensor(f, "lnn_dx"), 1e-5, 1e-4, "layernorm (no affine) dx");
    te_tensor *own[] = { x, g, b, xn };
    for (int i = 0; i < 4; i++)
        te_tensor_free(own[i]);
    fx_close(f);
}
END_TEST

/* ---- determinism and half precision ---------------------------------------- */

/* Forward and all grads of bn and ln, large enough to run in parallel,
 * copied out so the engine can restart with another thread count. */
static float *norm_run(int64_t *count)
{
    const int64_t shape[4] = { 4, 8, 32, 40 }; /* 40960 elements: above TE_PAR_MIN */
    te_tensor *x = gc_random(4, shape, -3.0f, 3.0f, 31);
    te_tensor *g = gc_random(1, &shape[1], 0.5f, 1.5f, 32), *b = gc_random(1, &shape[1], -1, 1, 33);
    te_tensor *gl = gc_random(1, &shape[3], 0.5f, 1.5f, 34),
              *bl = gc_random(1, &shape[3], -1, 1, 35);
    te_tensor *rm = stat_vec(8, 0.0f), *rv = stat_vec(8, 1.0f);
    te_tensor *dy = gc_random(4, shape, -1.0f, 1.0f, 36);
    te_tensor *own[] = { x, g, b, gl, bl, rm, rv, dy };
    for (int i = 0; i < 5; i++)
        own[i]->requires_grad = true;
    te_tensor *y = te_layernorm(te_batchnorm(x, g, b, rm, rv, 0.1f, 1e-5f), gl, bl, 1e-5f);
    ck_assert_msg(y && te_backward_with(y, dy) == TE_OK, "%s", te_error());
    const te_tensor *parts[] = { y, x->grad, g->grad, b->grad, gl->grad, bl->grad, rm, rv };
    int64_t n = 0;
    for (int i = 0; i < 8; i++)
        n += parts[i]->numel;
    float *out = malloc((size_t)n * sizeof *out), *p = out;
    for (int i = 0; i < 8; i++) {
        te_copy_to_f32(parts[i], p);
        p += parts[i]->numel;
    }
    te_tape_reset();
    for (int i = 0; i < 8; i++)
        te_tensor_free(own[i]);
    *count = n;
    return out;
}

/* ---- x in nChw16c (graph mode's layout after a conv) against NCHW -------- */

/* y = bn(x) + bn(x) (the second backward adds to x's gradient), and what
 * it leaves: y, dx (as NCHW), dgamma, dbeta, the running stats. */
static void bn_twice(const te_tensor *x0, bool blocked, bool training, float *out[6])
{
    const int64_t *shape = x0->shape, C = shape[1];
    te_tensor *x = te_tensor_persistent(TE_F32, 4, shape);
    te_tensor *g = gc_random(1, &C, 0.5f, 1.5f, 42), *b = gc_random(1, &C, -1.0f, 1.0f, 43);
    te_tensor *rm = gc_random(1, &C, -0.5f, 0.5f, 44), *rv = gc_random(1, &C, 0.5f, 2.0f, 45);
    te_tensor *dy = gc_random(4, shape, -1.0f, 1.0f, 46);
    if (blocked) {
        tu_to_blocked16(x0->data, x->data, shape, sizeof(float));
        x->flags |= TE_TENSOR_BLOCKED16;
    } else {
        memcpy(x->data, x0->data, x0->nbytes);
    }
    x->requires_grad = g->requires_grad = b->requires_grad = true;
    te_set_training(training);
    te_tensor *y = te_add(te_batchnorm(x, g, b, rm, rv, 0.1f, 1e-5f), te_batchnorm(x, g, b, rm, rv, 0.1f, 1e-5f));
    ck_assert_msg(y && te_backward_with(y, dy) == TE_OK, "%s", te_error());
    const te_tensor *parts[6] = { y, x->grad, g->grad, b->grad, rm, rv };
    for (int i = 0; i < 6; i++) {
        out[i] = malloc(parts[i]->nbytes);
        memcpy(out[i], parts[i]->data, parts[i]->nbytes);
    }
    if (blocked) { /* dx is blocked as x is: back to NCHW */
        float *blk = out[1], *plain = malloc(x->nbytes);
        tu_from_blocked16(blk, plain, shape, sizeof(float));
        free(blk);
        out[1] = plain;
    }
    te_tape_reset();
    te_set_training(true);
    te_tensor *own[] = { x, g, b, rm, rv, dy };
    for (int i = 0; i < 6; i++)
        te_tensor_free(own[i]);
}

START_TEST(test_bn_blocked_matches_plain)
{
    /* 32 channels (two blocks), H * W = 48 (three 16-wide tiles) */
    const int64_t shape[4] = { 3, 32, 6, 8 }, n = 3 * 32 * 48;
    const int64_t count[6] = { n, n, 32, 32, 32, 32 };
    const char *what[6] = { "y", "dx", "dgamma", "dbeta", "running mean", "running var" };
    te_tensor *x = gc_random(4, shape, -2.0f, 3.0f, 41);
    for (int training = 0; training < 2; training++) {
        float *plain[6], *blocked[6];
        bn_twice(x, false, training, plain);
        bn_twice(x, true, training, blocked);
        for (int i = 0; i < 6; i++) {
            for (int64_t k = 0; k < count[i]; k++)
                ck_assert_msg(fabsf(plain[i][k] - blocked[i][k]) <= 1e-5f * fmaxf(1.0f, fabsf(plain[i][k])),
                              "%s %s[%lld]: NCHW %.9g, nChw16c %.9g", training ? "training" : "eval", what[i],
                              (long long)k, plain[i][k], blocked[i][k]);
            free(plain[i]);
            free(blocked[i]);
        }
    }
    te_tensor_free(x);
}
END_TEST

START_TEST(test_norm_thread_count_determinism)
{
    int64_t n2, n1;
    float *two = norm_run(&n2);
    te_shutdown();
    te_init(&(te_config){ .seed = 1, .threads = 1 });
    float *one = norm_run(&n1);
    ck_assert_int_eq(n1, n2);
    for (int64_t i = 0; i < n1; i++)
        ck_assert_msg(memcmp(&one[i], &two[i], 4) == 0,
                      "value %lld: %.9g on 1 thread, %.9g on 2 threads", (long long)i,
                      (double)one[i], (double)two[i]);
    free(one);
    free(two);
}
END_TEST

/* f16 activations compute in f32 inside and come back as f16; the f32
 * running stats are updated in place all the same. */
START_TEST(test_bn_ln_half_inputs)
{
    te_tensor *x = gc_random(te_shape(4, 3, 2, 2), -2.0f, 2.0f, 41);
    te_tensor *rm32 = stat_vec(3, 0.0f), *rv32 = stat_vec(3, 1.0f);
    te_tensor *rm16 = stat_vec(3, 0.0f), *rv16 = stat_vec(3, 1.0f);
    te_tensor *xh = te_cast(x, TE_F16);
    te_tensor *ref = te_batchnorm(te_cast(xh, TE_F32), NULL, NULL, rm32, rv32, 0.1f, 1e-5f);
    te_tensor *yh = te_batchnorm(xh, NULL, NULL, rm16, rv16, 0.1f, 1e-5f);
    ck_assert_msg(yh && ref, "%s", te_error());
    ck_assert_msg(yh->dtype == TE_F16, "bn of f16 gave %s", te_dtype_name(yh->dtype));
    fx_assert_close(yh, ref, 2e-3, 2e-3, "bn f16 vs f32");
    fx_assert_close(rm16, rm32, 0, 0, "running_mean from f16 input");
    fx_assert_close(rv16, rv32, 0, 0, "running_var from f16 input");

    te_tensor *lh = te_layernorm(te_cast(x, TE_BF16), NULL, NULL, 1e-5f);
    te_tensor *lref = te_layernorm(te_cast(te_cast(x, TE_BF16), TE_F32), NULL, NULL, 1e-5f);
    ck_assert_msg(lh && lref, "%s", te_error());
    ck_assert_msg(lh->dtype == TE_BF16, "ln of bf16 gave %s", te_dtype_name(lh->dtype));
    fx_assert_close(lh, lref, 1e-2, 1e-2, "ln bf16 vs f32");
    te_tensor *own[] = { x, rm32, rv32, rm16, rv16 };
    for (int i = 0; i < 5; i++)
        te_tensor_free(own[i]);
}
END_TEST

/* ---- errors -------------------------------------------------------------- */

START_TEST(test_bn_errors)
{
    te_tensor *x3 = te_tensor_zeros(TE_F32, te_shape(2, 3, 4));
    int line = __LINE__ + 1;
    ck_assert(te_batchnorm(x3, NULL, NULL, NULL, NULL, 0.1f, 1e-5f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_SHAPE);
    tu_assert_error_has("bn (BatchNorm) at ", tu_at(line), "x [2,3,4]", "[N,C] or [N,C,H,W]");

    te_tensor *x = gc_random(te_shape(2, 3), -1, 1, 51);
    te_tensor *g4 = te_tensor_zeros(TE_F32, te_shape(4));
    line = __LINE__ + 1;
    ck_assert(te_batchnorm(x, g4, NULL, NULL, NULL, 0.1f, 1e-5f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_SHAPE);
    tu_assert_error_has("(BatchNorm)", tu_at(line), "gamma [4]", "x [2,3]", "must be [3]");

    te_tensor *rm = stat_vec(3, 0), *rv = stat_vec(3, 1);
    te_set_training(false);
    line = __LINE__ + 1;
    ck_assert(te_batchnorm(x, NULL, NULL, NULL, NULL, 0.1f, 1e-5f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_ARG);
    tu_assert_error_has("(BatchNorm)", tu_at(line), "x [2,3]", "eval mode", "running_mean");
    te_set_training(true);

    te_tensor *x1 = te_tensor_zeros(TE_F32, te_shape(1, 3));
    line = __LINE__ + 1;
    ck_assert(te_batchnorm(x1, NULL, NULL, rm, rv, 0.1f, 1e-5f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_SHAPE);
    tu_assert_error_has("(BatchNorm)", tu_at(line), "x [1,3]",
                        "more than 1 value per channel (got 1)");
    ck_assert_msg(te_get(rm, 0) == 0.0f && te_get(rv, 0) == 1.0f, "a failed call moved the stats");

    te_tensor *tape_rm = te_tensor_zeros(TE_F32, te_shape(3));
    line = __LINE__ + 1;
    ck_assert(te_batchnorm(x, NULL, NULL, tape_rm, rv, 0.1f, 1e-5f) == NULL);
    tu_assert_error_has("(BatchNorm)", tu_at(line), "running_mean is a tape tensor", "persistent");

    line = __LINE__ + 1;
    ck_assert(te_batchnorm(x, NULL, NULL, rm, NULL, 0.1f, 1e-5f) == NULL);
    tu_assert_error_has(tu_at(line), "running_mean given without running_var");

    te_tensor *rv16 = te_tensor_persistent(TE_F16, te_shape(3));
    line = __LINE__ + 1;
    ck_assert(te_batchnorm(x, NULL, NULL, rm, rv16, 0.1f, 1e-5f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_DTYPE);
    tu_assert_error_has(tu_at(line), "running_var [3] is f16: f32 needed");

    line = __LINE__ + 1;
    ck_assert(te_batchnorm(x, NULL, NULL, rm, rv, 1.5f, 1e-5f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_ARG);
    tu_assert_error_has(tu_at(line), "momentum 1.5 not in [0, 1]");

    te_tensor *xi = te_tensor_zeros(TE_I32, te_shape(2, 3));
    line = __LINE__ + 1;
    ck_assert(te_batchnorm(xi, NULL, NULL, NULL, NULL, 0.1f, 1e-5f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_DTYPE);
    tu_assert_error_has(tu_at(line), "x [2,3] is i32");
    te_tensor *own[] = { x, rm, rv, rv16 };
    for (int i = 0; i < 4; i++)
        te_tensor_free(own[i]);
}
END_TEST

START_TEST(test_ln_errors)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 5));
    te_tensor *g = te_tensor_zeros(TE_F32, te_shape(4));
    int line = __LINE__ + 1;
    ck_assert(te_layernorm(x, g, NULL, 1e-5f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_SHAPE);
    tu_assert_error_has("ln (LayerNorm) at ", tu_at(line), "gamma [4]", "x [2,5]", "must be [5]");
    line = __LINE__ + 1;
    ck_assert(te_layernorm(x, NULL, g, 1e-5f) == NULL);
    tu_assert_error_has("(LayerNorm)", tu_at(line), "beta [4]", "x [2,5]");
    line = __LINE__ + 1;
    ck_assert(te_layernorm(x, NULL, NULL, 0.0f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_ARG);
    tu_assert_error_has("(LayerNorm)", tu_at(line), "eps 0 must be > 0");
}
END_TEST

/* A NULL input (an earlier op failed) gives NULL and keeps the first
 * message; an absent gamma/beta is not an error. */
START_TEST(test_norm_null_input)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 5));
    ck_assert(te_layernorm(x, x, NULL, 1e-5f) == NULL); /* gamma [2,5]: a real failure */
    char first[1024];
    snprintf(first, sizeof first, "%s", te_error());
    ck_assert(te_batchnorm(NULL, NULL, NULL, NULL, NULL, 0.1f, 1e-5f) == NULL);
    ck_assert_str_eq(te_error(), first);
    ck_assert(te_layernorm(NULL, NULL, NULL, 1e-5f) == NULL);
    ck_assert_str_eq(te_error(), first);

    te_error_clear();
    ck_assert(te_layernorm(NULL, NULL, NULL, 1e-5f) == NULL);
    ck_assert_int_eq(te_error_code(), TE_ERR_INPUT);
    te_error_clear();
    ck_assert_msg(te_layernorm(x, NULL, NULL, 1e-5f) != NULL, "%s", te_error());
    ck_assert_int_eq(te_error_code(), TE_OK);
}
END_TEST

Suite *suite_norm(void)
{
    Suite *s = suite_create("norm");
    TCase *tc = tcase_create("norm");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_bn_train_2d_golden);
    tcase_add_test(tc, test_bn_train_4d_golden);
    tcase_add_test(tc, test_bn_eval_golden);
    tcase_add_test(tc, test_bn_no_affine_normalises);
    tcase_add_test(tc, test_bn_gradcheck);
    tcase_add_test(tc, test_ln_gradcheck);
    tcase_add_test(tc, test_ln_golden);
    tcase_add_test(tc, test_bn_blocked_matches_plain);
    tcase_add_test(tc, test_norm_thread_count_determinism);
    tcase_add_test(tc, test_bn_ln_half_inputs);
    tcase_add_test(tc, test_bn_errors);
    tcase_add_test(tc, test_ln_errors);
    tcase_add_test(tc, test_norm_null_input);
    suite_add_tcase(s, tc);
    return s;
}
