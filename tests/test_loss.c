/* test_loss.c — cross entropy and MSE against PyTorch (fixtures/math.bin),
 * finite differences and hand-computed values. */
#include "fixture.h"
#include "gradcheck.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_output(fx_file *f, const char *c, te_tensor *y)
{
    char what[96];
    ck_assert_msg(y != NULL, "%s: %s", c, te_error());
    snprintf(what, sizeof what, "%s loss", c);
    fx_assert_close(y, fx_case(f, c, "y"), 1e-6, 1e-5, what);
    ck_assert_msg(te_backward_with(y, fx_case(f, c, "dy")) == TE_OK, "%s backward: %s", c,
                  te_error());
}

static const char *const ce_cases[] = { "ce", "ce_b1", "ce_big" };

START_TEST(test_ce_golden)
{
    fx_file *f = fx_open("math.bin");
    const char *c = ce_cases[_i];
    te_tensor *z = fx_case_param(f, c, "z"), *y = fx_case(f, c, "lab");
    ck_assert_int_eq(y->dtype, TE_I32);
    check_output(f, c, te_cross_entropy(z, y));
    char what[96];
    snprintf(what, sizeof what, "%s gradient of the logits", c);
    fx_assert_close(z->grad, fx_case(f, c, "dz"), 1e-5, 1e-4, what);
    te_tensor_free(z);
    fx_close(f);
}
END_TEST

static const char *const mse_cases[] = { "mse", "mse_1" };

START_TEST(test_mse_golden)
{
    fx_file *f = fx_open("math.bin");
    const char *c = mse_cases[_i];
    te_tensor *p = fx_case_param(f, c, "p"), *t = fx_case_param(f, c, "t");
    check_output(f, c, te_mse(p, t));
    char what[96];
    snprintf(what, sizeof what, "%s gradient of pred", c);
    fx_assert_close(p->grad, fx_case(f, c, "dp"), 1e-5, 1e-4, what);
    snprintf(what, sizeof what, "%s gradient of target", c);
    fx_assert_close(t->grad, fx_case(f, c, "dt"), 1e-5, 1e-4, what);
    te_tensor_free(p);
    te_tensor_free(t);
    fx_close(f);
}
END_TEST

/* ---- finite differences ------------------------------------------------------ */

static te_tensor *gc_ce(te_tensor **in, void *ctx)
{
    return te_cross_entropy(in[0], (te_tensor *)ctx);
}
static te_tensor *gc_mse(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_mse(in[0], in[1]);
}

START_TEST(test_gradcheck)
{
    te_tensor *z = gc_random(te_shape(5, 4), -3.0f, 3.0f, 61);
    te_tensor *labels = te_tensor_persistent(TE_I32, te_shape(5));
    const int32_t y[5] = { 3, 0, 1, 3, 2 };
    tu_write(labels, y);
    gc_check("cross_entropy", gc_ce, labels, &z, 1, (const bool[]){ true }, 1e-3f, 1e-2f);
    te_tensor *pt[2] = {gc_random(te_shape(3, 4), -1.0f, 1.0f, 62),
                        gc_random(te_shape(3, 4), -1.0f, 1.0f, 63)};
    gc_check("mse", gc_mse, NULL, pt, 2, (const bool[]){ true, true }, 1e-3f, 1e-2f);
    /* only pred needs a gradient: target's stays untouched */
    gc_check("mse, pred only", gc_mse, NULL, pt, 2, (const bool[]){ true, false }, 1e-3f, 1e-2f);
    ck_assert(!pt[1]->grad_valid);
    te_tensor_free(z);
    te_tensor_free(labels);
    te_tensor_free(pt[0]);
    te_tensor_free(pt[1]);
}
END_TEST

/* A second backward adds into the gradients of persistent inputs. */
START_TEST(test_accumulate)
{
    te_tensor *z = gc_random(te_shape(3, 4), -2.0f, 2.0f, 64);
    te_tensor *t = gc_random(te_shape(3, 4), -2.0f, 2.0f, 65);
    z->requires_grad = t->requires_grad = true;
    te_tensor *y = te_tensor_persistent(TE_I32, te_shape(3));
    tu_write(y, (const int32_t[]){ 1, 3, 0 });
    float once[2][12];
    for (int pass = 0; pass < 2; pass++) {
        ck_assert_int_eq(te_backward(te_cross_entropy(z, y)), TE_OK);
        te_tape_reset();
        ck_assert_int_eq(te_backward(te_mse(t, z)), TE_OK);
        te_tape_reset();
        for (int i = 0; pass == 0 && i < 12; i++) {
            once[0][i] = te_get(z->grad, i);
            once[1][i] = te_get(t->grad, i);
        }
    }
    for (int i = 0; i < 12; i++) {
        ck_assert_msg(fabsf(te_get(z->grad, i) - 2 * once[0][i]) < 1e-6f,
                      "dz[%d] %g after two passes, %g after one", i, te_get(z->grad, i),
                      once[0][i]);
        ck_assert_msg(fabsf(te_get(t->grad, i) - 2 * once[1][i]) < 1e-6f,
                      "dt[%d] %g after two passes, %g after one", i, te_get(t->grad, i),
                      once[1][i]);
    }
    te_tensor_free(z);
    te_tensor_free(t);
    te_tensor_free(y);
}
END_TEST

/* ---- values by hand ------------------------------------------------------------ */

START_TEST(test_values)
{
    /* equal logits: loss log(C); huge logits stay finite */
    te_tensor *z = te_tensor_persistent(TE_F32, te_shape(3, 4));
    const float zv[12] = { 0, 0, 0, 0, 1e4f, 0, 0, 0, 0, 1e4f, -1e4f, 0 };
    tu_write(z, zv);
    z->requires_grad = true;
    te_tensor *labels = te_tensor_from(TE_I32, te_shape(3), (const int32_t[]){ 2, 0, 2 });
    te_tensor *loss = te_cross_entropy(z, labels);
    ck_assert_msg(loss && loss->ndim == 1 && loss->shape[0] == 1, "loss shape: %s", te_error());
    /* rows: log 4, 0, 1e4 + 1e4 -> mean (log 4 + 2e4) / 3 */
    double want = (log(4.0) + 2e4) / 3.0;
    ck_assert_msg(fabs(te_item(loss) - want) < 1e-2, "loss %.6f, expected %.6f", te_item(loss),
                  want);
    /* te_backward seeds 1: dz = (softmax - onehot) / N */
    ck_assert_int_eq(te_backward(loss), TE_OK);
    const float dz[12] = { 0.25f / 3, 0.25f / 3, -0.75f / 3, 0.25f / 3, 0, 0, 0, 0,
                           0, 1.0f / 3, -1.0f / 3, 0 };
    for (int i = 0; i < 12; i++)
        ck_assert_msg(fabsf(te_get(z->grad, i) - dz[i]) < 1e-6f, "dz[%d] = %g, expected %g", i,
                      te_get(z->grad, i), dz[i]);

    te_tensor *p = te_tensor_from(TE_F32, te_shape(2, 2), (const float[]){ 1, 2, 3, 4 });
    te_tensor *t = te_tensor_from(TE_F32, te_shape(2, 2), (const float[]){ 1, 0, 0, 4 });
    te_tensor *m = te_mse(p, t);
    ck_assert_msg(m && m->ndim == 1 && te_item(m) == 13.0f / 4.0f, "mse = %g, expected 3.25",
                  m ? te_item(m) : NAN);
    te_tensor_free(z);
}
END_TEST

/* ---- errors -------------------------------------------------------------------- */

START_TEST(test_bad_label)
{
    te_tensor *z = te_tensor_zeros(TE_F32, te_shape(3, 4));
    te_tensor *y = te_tensor_from(TE_I32, te_shape(3), (const int32_t[]){ 0, 5, 1 });
    ck_assert_ptr_null(te_cross_entropy(z, y)); const int line = __LINE__;
    tu_assert_error(TE_ERR_ARG, "cross_entropy", "(CrossEntropy)", tu_at(line), "label 5",
                    "index 1", "4 classes");
    y = te_tensor_from(TE_I32, te_shape(3), (const int32_t[]){ 0, 1, -1 });
    ck_assert_ptr_null(te_cross_entropy(z, y));
    tu_assert_error(TE_ERR_ARG, "label -1", "index 2");
    y = te_tensor_from(TE_I32, te_shape(3), (const int32_t[]){ 4, 0, 0 });
    ck_assert_ptr_null(te_cross_entropy(z, y));
    tu_assert_error(TE_ERR_ARG, "label 4", "index 0");
}
END_TEST

START_TEST(test_bad_shape)
{
    te_tensor *z = te_tensor_zeros(TE_F32, te_shape(4, 5));
    te_tensor *y3 = te_tensor_zeros(TE_I32, te_shape(3));
    ck_assert_ptr_null(te_cross_entropy(z, y3)); const int line = __LINE__;
    tu_assert_error(TE_ERR_SHAPE, "cross_entropy", "(CrossEntropy)", tu_at(line), "[4,5]", "[3]");
    ck_assert_ptr_null(te_cross_entropy(te_tensor_zeros(TE_F32, te_shape(2, 4, 5)), y3));
    tu_assert_error(TE_ERR_SHAPE, "[2,4,5]", "[3]");
    ck_assert_ptr_null(te_cross_entropy(z, te_tensor_zeros(TE_F32, te_shape(4))));
    tu_assert_error(TE_ERR_DTYPE, "cross_entropy", "f32", "[4]");
    ck_assert_ptr_null(te_cross_entropy(te_tensor_zeros(TE_I32, te_shape(4, 5)),
                                        te_tensor_zeros(TE_I32, te_shape(4))));
    tu_assert_error(TE_ERR_DTYPE, "i32", "[4,5]");

    te_tensor *p34 = te_tensor_zeros(TE_F32, te_shape(3, 4));
    te_tensor *t43 = te_tensor_zeros(TE_F32, te_shape(4, 3));
    ck_assert_ptr_null(te_mse(p34, t43)); const int line2 = __LINE__;
    tu_assert_error(TE_ERR_SHAPE, "mse", "(MSE)", tu_at(line2), "[3,4]", "[4,3]");
    ck_assert_ptr_null(te_mse(z, te_tensor_zeros(TE_I32, te_shape(4, 5))));
    tu_assert_error(TE_ERR_DTYPE, "mse", "(MSE)", "i32");
}
END_TEST

START_TEST(test_null_input)
{
    te_tensor *z = te_tensor_zeros(TE_F32, te_shape(4, 5));
    te_tensor *bad = te_cross_entropy(z, te_tensor_zeros(TE_I32, te_shape(2)));
    ck_assert_ptr_null(bad);
    char first[512];
    snprintf(first, sizeof first, "%s", te_error());
    te_status code = te_error_code();
    ck_assert_ptr_null(te_mse(bad, z));
    ck_assert_ptr_null(te_mse(z, bad));
    ck_assert_ptr_null(te_cross_entropy(bad, NULL));
    ck_assert_ptr_null(te_cross_entropy(z, NULL));
    ck_assert_int_eq(te_error_code(), code);
    ck_assert_str_eq(te_error(), first);
}
END_TEST

/* ---- half precision --------------------------------------------------------------- */

START_TEST(test_half)
{
    for (int bf = 0; bf < 2; bf++) {
        te_dtype dt = bf ? TE_BF16 : TE_F16;
        te_tensor *zh = te_tensor_new(dt, te_shape(6, 5)),
                  *zf = te_tensor_new(TE_F32, te_shape(6, 5));
        te_tensor *th = te_tensor_new(dt, te_shape(6, 5)),
                  *tf = te_tensor_new(TE_F32, te_shape(6, 5));
        for (int64_t i = 0; i < zh->numel; i++) {
            te_set(zh, i, -4.0f + 8.0f * te_rand_uniform(8, 1, (uint64_t)i));
            te_set(zf, i, te_get(zh, i));
            te_set(th, i, -1.0f + 2.0f * te_rand_uniform(8, 2, (uint64_t)i));
            te_set(tf, i, te_get(th, i));
        }
        te_tensor *y = te_tensor_from(TE_I32, te_shape(6), (const int32_t[]){ 0, 1, 2, 3, 4, 0 });
        te_tensor *ch = te_cross_entropy(zh, y), *mh = te_mse(zh, th);
        ck_assert_msg(ch && mh && ch->dtype == dt && mh->dtype == dt, "%s: %s", te_dtype_name(dt),
                      te_error());
        tu_assert_half_close(ch, te_cross_entropy(zf, y), "cross_entropy");
        tu_assert_half_close(mh, te_mse(zf, tf), "mse");
        /* half with f32: the f32 result, exactly */
        te_tensor *mix = te_mse(zh, tf);
        ck_assert_msg(mix->dtype == TE_F32 && te_item(mix) == te_item(te_mse(zf, tf)),
                      "mixed mse %s %g", te_dtype_name(mix->dtype), te_item(mix));
    }
}
END_TEST

/* ---- sizes past TE_PAR_MIN -------------------------------------------------------------- */

/* Cross entropy over 2000x20 logits against a double reference; returns the
 * loss and copies the logits' gradient out. */
static float big_case(float *dz)
{
    enum { N = 2000, C = 20 };
    te_tensor *z = gc_random(te_shape(N, C), -5.0f, 5.0f, 71);
    z->requires_grad = true;
    te_tensor *y = te_tensor_new(TE_I32, te_shape(N));
    int32_t *yv = malloc(N * sizeof *yv);
    ck_assert(yv != NULL);
    for (int i = 0; i < N; i++)
        yv[i] = (int32_t)(te_rand_u64(72, 0, (uint64_t)i) % C);
    tu_write(y, yv);
    te_tensor *loss = te_cross_entropy(z, y);
    ck_assert_msg(loss != NULL, "%s", te_error());
    float *zv = tu_f32(z);
    double want = 0;
    for (int r = 0; r < N; r++) {
        double s = 0;
        for (int c = 0; c < C; c++)
            s += exp((double)zv[r * C + c]);
        want += log(s) - zv[r * C + yv[r]];
    }
    want /= N;
    free(zv);
    free(yv);
    ck_assert_msg(fabs(te_item(loss) - want) < 1e-5 * fabs(want), "loss %.7g, expected %.7g",
                  te_item(loss), want);
    ck_assert_int_eq(te_backward(loss), TE_OK);
    float l = te_item(loss);
    ck_assert_int_eq(te_tensor_read(z->grad, 0, N * C, dz), TE_OK);
    te_tensor_free(z);
    return l;
}

START_TEST(test_big_and_thread_invariant)
{
    static float dz2[2000 * 20], dz1[2000 * 20];
    float l2 = big_case(dz2);
    te_tape_reset();
    te_shutdown();
    te_init(&(te_config){ .seed = 1, .threads = 1 });
    float l1 = big_case(dz1);
    ck_assert_msg(l1 == l2, "loss %.9g with 1 thread, %.9g with 2", l1, l2);
    ck_assert_msg(memcmp(dz1, dz2, sizeof dz1) == 0, "gradient differs between thread counts");
}
END_TEST

Suite *suite_loss(void)
{
    Suite *s = suite_create("loss");
    TCase *tc = tcase_create("loss");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_ce_golden, 0, (int)(sizeof ce_cases / sizeof ce_cases[0]));
    tcase_add_loop_test(tc, test_mse_golden, 0, (int)(sizeof mse_cases / sizeof mse_cases[0]));
    tcase_add_test(tc, test_gradcheck);
    tcase_add_test(tc, test_accumulate);
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_bad_label);
    tcase_add_test(tc, test_bad_shape);
    tcase_add_test(tc, test_null_input);
    tcase_add_test(tc, test_half);
    tcase_add_test(tc, test_big_and_thread_invariant);
    suite_add_tcase(s, tc);
    return s;
}
