/* test_optim.c — optimizers, clipping and accumulation against PyTorch. */
#include "fixture.h"
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    fx_file *fx;
    te_tensor *w, *b;
} model;

static model model_new(void)
{
    model m = { .fx = fx_open("optim.bin") };
    m.w = te_param_new("w", TE_F32, te_shape(3, 4));
    m.b = te_param_new("b", TE_F32, te_shape(3));
    tu_copy(m.w, fx_tensor(m.fx, "w0"));
    tu_copy(m.b, fx_tensor(m.fx, "b0"));
    return m;
}

/* Forward + backward of scale * mse(x w^T + b, t) on rows [lo, hi). */
static float loss_backward(model *m, int lo, int hi, float scale)
{
    te_tensor *x = fx_tensor(m->fx, "x"), *t = fx_tensor(m->fx, "t");
    float *xv = tu_f32(x), *tv = tu_f32(t);
    te_tensor *xs = te_tensor_from(TE_F32, te_shape(hi - lo, 4), xv + lo * 4);
    te_tensor *ts = te_tensor_from(TE_F32, te_shape(hi - lo, 3), tv + lo * 3);
    free(xv);
    free(tv);
    te_tensor *loss = te_mse(te_linear(xs, m->w, m->b), ts);
    if (scale != 1.0f)
        loss = te_scale(loss, scale);
    ck_assert_msg(te_backward(loss) == TE_OK, "backward: %s", te_error());
    return te_item(loss);
}

typedef te_optim *(*make_fn)(void);

/* Three steps, parameters compared with PyTorch's after each. */
static void check_trajectory(const char *cfg, make_fn make)
{
    model m = model_new();
    te_optim *opt = make();
    ck_assert_msg(opt != NULL, "%s: %s", cfg, te_error());
    for (int step = 0; step < 3; step++) {
        te_step_begin();
        loss_backward(&m, 0, 6, 1.0f);
        ck_assert_int_eq(te_optim_step(opt), TE_OK);
        char name[64], what[96];
        snprintf(name, sizeof name, "%s/w%d", cfg, step);
        snprintf(what, sizeof what, "%s weight after step %d", cfg, step);
        fx_assert_close(m.w, fx_tensor(m.fx, name), 1e-6, 1e-5, what);
        snprintf(name, sizeof name, "%s/b%d", cfg, step);
        snprintf(what, sizeof what, "%s bias after step %d", cfg, step);
        fx_assert_close(m.b, fx_tensor(m.fx, name), 1e-6, 1e-5, what);
        te_step_end();
    }
    te_optim_free(opt);
    fx_close(m.fx);
}

static te_optim *make_sgd(void)
{
    return te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.1f });
}
static te_optim *make_sgd_momentum(void)
{
    return te_sgd_new(te_params(), te_param_count(),
                      &(te_sgd_opts){ .lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 0.01f });
}
static te_optim *make_sgd_nesterov(void)
{
    return te_sgd_new(te_params(), te_param_count(),
                      &(te_sgd_opts){ .lr = 0.1f, .momentum = 0.9f, .nesterov = true, .weight_decay = 0.01f });
}
static te_optim *make_adam(void)
{
    return te_adam_new(te_params(), te_param_count(), &(te_adam_opts){ .lr = 0.01f, .weight_decay = 0.01f });
}
static te_optim *make_adamw(void)
{
    return te_adam_new(te_params(), te_param_count(),
                       &(te_adam_opts){ .lr = 0.01f, .weight_decay = 0.1f, .decoupled = true });
}

START_TEST(test_sgd) { check_trajectory("sgd", make_sgd); }
END_TEST
START_TEST(test_sgd_momentum) { check_trajectory("sgd_momentum", make_sgd_momentum); }
END_TEST
START_TEST(test_sgd_nesterov) { check_trajectory("sgd_nesterov", make_sgd_nesterov); }
END_TEST
START_TEST(test_adam) { check_trajectory("adam", make_adam); }
END_TEST
START_TEST(test_adamw) { check_trajectory("adamw", make_adamw); }
END_TEST

START_TEST(test_clip_grad_norm)
{
    model m = model_new();
    loss_backward(&m, 0, 6, 1.0f);
    float norm = te_clip_grad_norm(te_params(), te_param_count(), 0.5f);
    te_tensor *want = fx_tensor(m.fx, "clip/norm");
    ck_assert_msg(fabsf(norm - te_item(want)) < 1e-5f * te_item(want), "norm %g, torch %g", norm,
                  te_item(want));
    fx_assert_close(m.w->grad, fx_tensor(m.fx, "clip/gw"), 1e-7, 1e-5, "clipped weight grad");
    fx_assert_close(m.b->grad, fx_tensor(m.fx, "clip/gb"), 1e-7, 1e-5, "clipped bias grad");
    /* Under the limit nothing changes. */
    float before = te_get(m.w->grad, 0);
    te_clip_grad_norm(te_params(), te_param_count(), 1e6f);
    ck_assert_float_eq(te_get(m.w->grad, 0), before);
    fx_close(m.fx);
}
END_TEST

/* Two micro-batches of 3 rows with loss/2 give the gradient of all 6 rows. */
START_TEST(test_grad_accumulation)
{
    model m = model_new();
    te_step_begin();
    loss_backward(&m, 0, 6, 1.0f);
    float full[12];
    te_copy_to_f32(m.w->grad, full);
    te_zero_grad();
    te_step_end();

    te_step_begin();
    loss_backward(&m, 0, 3, 0.5f);
    te_tape_reset();
    loss_backward(&m, 3, 6, 0.5f);
    for (int i = 0; i < 12; i++)
        ck_assert_msg(fabsf(te_get(m.w->grad, i) - full[i]) < 1e-6f, "grad[%d] %g, full batch %g", i,
                      te_get(m.w->grad, i), full[i]);
    te_step_end();
    fx_close(m.fx);
}
END_TEST

/* The optimizer marks gradients spent, so the next backward overwrites. */
START_TEST(test_step_consumes_grads)
{
    model m = model_new();
    te_optim *opt = make_sgd();
    te_step_begin();
    loss_backward(&m, 0, 6, 1.0f);
    float g0 = te_get(m.w->grad, 0);
    te_optim_step(opt);
    ck_assert(!m.w->grad_valid);
    te_step_end();
    tu_copy(m.w, fx_tensor(m.fx, "w0"));
    tu_copy(m.b, fx_tensor(m.fx, "b0"));
    te_step_begin();
    loss_backward(&m, 0, 6, 1.0f);
    ck_assert_float_eq_tol(te_get(m.w->grad, 0), g0, 1e-7f);
    te_step_end();
    te_optim_free(opt);
    fx_close(m.fx);
}
END_TEST

START_TEST(test_bad_options)
{
    model m = model_new();
    ck_assert_ptr_null(te_sgd_new(te_params(), 2, &(te_sgd_opts){ .lr = 0.1f, .nesterov = true }));
    ck_assert_msg(strstr(te_error(), "nesterov needs momentum") != NULL, "%s", te_error());
    ck_assert_ptr_null(te_adam_new(te_params(), 2, &(te_adam_opts){ .beta1 = 1.5f }));
    ck_assert_msg(strstr(te_error(), "betas=(1.5,") != NULL, "%s", te_error());
    fx_close(m.fx);
}
END_TEST

/* f16 parameters: updated in f32 and rounded, so they track the f32 run. */
START_TEST(test_f16_params)
{
    te_tensor *p = te_param_new("h", TE_F16, te_shape(4));
    te_fill(p, 1.0f);
    te_optim *opt = te_sgd_new(&p, 1, &(te_sgd_opts){ .lr = 0.25f });
    te_step_begin();
    te_tensor *loss = te_sum(te_scale(p, 2.0f), TE_ALL, false); /* d/dp = 2 */
    ck_assert_int_eq(te_backward(loss), TE_OK);
    te_optim_step(opt);
    ck_assert_int_eq(p->dtype, TE_F16);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(te_get(p, i), 0.5f);
    te_step_end();
    te_optim_free(opt);
}
END_TEST

/* ---- statistics taken inside the update (te_stats_want) ---------------------- */

/* A hook that checks every update op's statistics against a fresh pass. */
typedef struct {
    int updates, with_stats;
    te_stats last;
} stats_seen;

static void check_update_stats(const te_op_record *r, void *user)
{
    stats_seen *seen = user;
    if (r->phase != TE_PHASE_UPDATE)
        return;
    seen->updates++;
    te_stats fresh, handed;
    te_stats_compute(r->outputs[0], &fresh);
    te_op_output_stats(r, 0, &handed);
    ck_assert_msg(memcmp(&fresh, &handed, sizeof fresh) == 0,
                  "%s: statistics from the update differ from a fresh pass: mean %.17g / %.17g, "
                  "std %.17g / %.17g", r->name, handed.mean, fresh.mean, handed.std, fresh.std);
    seen->with_stats += r->out_stats != NULL;
    seen->last = handed;
}

/* The updates that compute statistics on the way give PyTorch's values too:
 * each configuration (loop index) once more, with statistics wanted. */
START_TEST(test_trajectories_with_stats)
{
    static const struct {
        const char *cfg;
        make_fn make;
    } cases[] = { { "sgd", make_sgd }, { "sgd_momentum", make_sgd_momentum },
                  { "sgd_nesterov", make_sgd_nesterov }, { "adam", make_adam }, { "adamw", make_adamw } };
    stats_seen seen = { 0 };
    int h = te_hook_add(&(te_hooks){ .op_end = check_update_stats }, &seen);
    te_stats_want(true);
    check_trajectory(cases[_i].cfg, cases[_i].make);
    te_stats_want(false);
    te_hook_remove(h);
    ck_assert_int_eq(seen.updates, 3 * 2); /* three steps, w and b */
    ck_assert_int_eq(seen.with_stats, seen.updates);
}
END_TEST

/* A parameter of 700001 values: eleven chunks over two threads, strips and a
 * ragged end. The statistics match a fresh pass bit for bit, and sums in
 * double over the new values. */
START_TEST(test_update_stats_large)
{
    enum { N = 700001 };
    static float init[N];
    tu_fill_uniform(init, N, 99, -0.25f, 0.75f);
    te_tensor *p = te_param_new("big", TE_F32, te_shape(N));
    te_copy_from_f32(p, init);
    te_optim *opt = te_sgd_new(&p, 1, &(te_sgd_opts){ .lr = 0.5f, .momentum = 0.9f });
    stats_seen seen = { 0 };
    int h = te_hook_add(&(te_hooks){ .op_end = check_update_stats }, &seen);
    te_stats_want(true);
    for (int step = 0; step < 2; step++) {
        te_step_begin();
        ck_assert_int_eq(te_backward(te_sum(te_scale(p, 0.125f), TE_ALL, false)), TE_OK);
        ck_assert_int_eq(te_optim_step(opt), TE_OK);
        te_step_end();
    }
    te_stats_want(false);
    te_hook_remove(h);
    ck_assert_int_eq(seen.with_stats, 2);
    /* two steps of lr 0.5 on gradient 1/8, momentum 0.9: 1/16, then 1.9/16 */
    double sum = 0, sq = 0;
    for (int i = 0; i < N; i++) {
        double v = te_get(p, i);
        ck_assert_msg(fabs(v - (init[i] - 2.9 / 16)) < 1e-6, "p[%d] = %g", i, v);
        sum += v;
        sq += v * v;
    }
    ck_assert_msg(fabs(seen.last.mean - sum / N) < 1e-7, "mean %.17g, expected %.17g",
                  seen.last.mean, sum / N);
    ck_assert_msg(fabs(seen.last.l2norm - sqrt(sq)) < 1e-6 * sqrt(sq), "l2norm %.17g, expected %.17g",
                  seen.last.l2norm, sqrt(sq));
    te_optim_free(opt);
}
END_TEST

/* An injection into an update changes the value after the optimizer took
 * its statistics: hooks get those of the altered value. The other update
 * keeps the optimizer's. */
static void expect_injected(const te_op_record *r, void *user)
{
    if (r->phase != TE_PHASE_UPDATE)
        return;
    te_stats s;
    te_op_output_stats(r, 0, &s);
    if (strcmp(r->name, "update/w") == 0) {
        ck_assert_ptr_null(r->out_stats);
        ck_assert_int_eq(s.nan, 1);
        ck_assert_int_eq(s.first_bad, 5);
    } else {
        ck_assert_ptr_nonnull(r->out_stats);
        ck_assert_int_eq(s.nan, 0);
    }
    (*(int *)user)++;
}

START_TEST(test_update_stats_after_injection)
{
    model m = model_new();
    te_optim *opt = make_sgd();
    int seen = 0;
    int h = te_hook_add(&(te_hooks){ .op_end = expect_injected }, &seen);
    te_stats_want(true);
    ck_assert_int_eq(te_inject_add("nan@op=update/w,step=0,index=5"), TE_OK);
    te_step_begin();
    loss_backward(&m, 0, 6, 1.0f);
    te_optim_step(opt);
    te_step_end();
    te_inject_clear();
    te_stats_want(false);
    te_hook_remove(h);
    ck_assert_int_eq(seen, 2);
    te_optim_free(opt);
    fx_close(m.fx);
}
END_TEST

/* Deterministic values in [-1, 1) for buffer k. */
static void fill(float *x, int64_t n, int k)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(((i * 2654435761u + (uint64_t)k * 40503u) >> 7) % 2000) / 1000.0f - 1.0f;
}

/* The backend's multi-tensor Adam over tensors of several sizes (one
 * longer than a statistics strip, one with statistics wanted) gives the
 * bits of one call per tensor, and PyTorch's rule within rounding. */
START_TEST(test_multi_tensor_adam)
{
    enum { K = 4 };
    const int64_t len[K] = { 1, 37, 3 * TE_STATS_STRIP + 5, 1000 };
    const te_adam_opts o = { .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f };
    float *buf[2][K][4]; /* [run][tensor][p, g, m, v] */
    te_update_args u[2][K];
    te_stats st[2][K];
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < K; k++) {
            for (int j = 0; j < 4; j++) {
                buf[r][k][j] = malloc((size_t)len[k] * sizeof(float));
                fill(buf[r][k][j], len[k], 4 * k + j);
                if (j == 3)
                    for (int64_t i = 0; i < len[k]; i++)
                        buf[r][k][j][i] = fabsf(buf[r][k][j][i]);
            }
            u[r][k] = (te_update_args){ buf[r][k][0], buf[r][k][1], buf[r][k][2], buf[r][k][3], len[k], false,
                                        k == 2 ? &st[r][k] : NULL, NULL };
        }
    float *p0 = malloc((size_t)len[2] * sizeof *p0), *m0 = malloc((size_t)len[2] * sizeof *m0),
          *v0 = malloc((size_t)len[2] * sizeof *v0);
    memcpy(p0, buf[0][2][0], (size_t)len[2] * sizeof *p0);
    memcpy(m0, buf[0][2][2], (size_t)len[2] * sizeof *m0);
    memcpy(v0, buf[0][2][3], (size_t)len[2] * sizeof *v0);
    te_backend_cpu.adam(&o, 3, u[0], K);
    for (int k = 0; k < K; k++)
        te_backend_cpu.adam(&o, 3, &u[1][k], 1);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < 4; j++)
            ck_assert_msg(memcmp(buf[0][k][j], buf[1][k][j], (size_t)len[k] * sizeof(float)) == 0,
                          "tensor %d buffer %d: one call differs from one call per tensor", k, j);
    ck_assert_mem_eq(&st[0][2], &st[1][2], sizeof st[0][2]);
    /* the statistics are those of the new values */
    te_tensor *t = te_tensor_from(TE_F32, te_shape(len[2]), buf[0][2][0]);
    te_stats want;
    te_stats_compute(t, &want);
    ck_assert_mem_eq(&st[0][2], &want, sizeof want);
    /* PyTorch's Adam step 3 in double on tensor 2 */
    const double b1 = 0.9, b2 = 0.999;
    for (int64_t i = 0; i < len[2]; i++) {
        const double g = buf[0][2][1][i], d = g + 0.1 * p0[i];
        const double m = b1 * m0[i] + (1 - b1) * d, v = b2 * v0[i] + (1 - b2) * d * d;
        const double p = p0[i] - 0.01 / (1 - pow(b1, 3)) * m / (sqrt(v) / sqrt(1 - pow(b2, 3)) + 1e-8);
        ck_assert_msg(fabs(buf[0][2][0][i] - p) <= 1e-5 * fabs(p) + 1e-6, "p[%lld] = %.9g, expected %.9g",
                      (long long)i, (double)buf[0][2][0][i], p);
    }
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < 4; j++)
                free(buf[r][k][j]);
    free(p0);
    free(m0);
    free(v0);
}
END_TEST

/* The backend's unscale over many gradients (f32 in place, bf16 into f32)
 * finds the one NaN in the last element of the last, and only when it is
 * there; every value is x * inv. */
START_TEST(test_unscale_many)
{
    enum { K = 40, N = 300 };
    float *f[K], *src[K];
    uint16_t h[N];
    te_unscale_args u[K];
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < K; k++) {
            f[k] = malloc(N * sizeof(float));
            src[k] = malloc(N * sizeof(float));
            fill(src[k], N, k);
            if (k == 7) /* a bf16 one: exactly representable values, widened into f[k] */
                for (int i = 0; i < N; i++) {
                    h[i] = te_f32_to_bf16(src[k][i]);
                    src[k][i] = te_bf16_to_f32(h[i]);
                }
            memcpy(f[k], src[k], N * sizeof(float));
            u[k] = k == 7 ? (te_unscale_args){ h, TE_BF16, f[k], N } : (te_unscale_args){ f[k], TE_F32, f[k], N };
        }
        if (pass)
            f[K - 1][N - 1] = src[K - 1][N - 1] = NAN;
        ck_assert_int_eq(te_backend_cpu.unscale(u, K, 0.25f), pass == 1);
        for (int k = 0; k < K; k++) {
            for (int i = 0; i < N; i++) {
                const float want = src[k][i] * 0.25f;
                ck_assert_msg(memcmp(&f[k][i], &want, 4) == 0 || (isnan(want) && isnan(f[k][i])),
                              "tensor %d [%d] = %a, expected %a", k, i, f[k][i], want);
            }
            free(f[k]);
            free(src[k]);
        }
    }
}
END_TEST

/* te_optim_state_read: the state te_optim_state points at, TE_ERR_STATE
 * before the first update, TE_ERR_ARG out of range. */
START_TEST(test_state_read)
{
    te_tensor *w = te_param_new("w", TE_F32, te_shape(5));
    te_fill(w, 1.0f);
    te_optim *opt = te_adam_new(&w, 1, &(te_adam_opts){ .lr = 0.1f });
    float got[5];
    ck_assert_int_eq(te_optim_state_read(opt, 0, 0, got), TE_ERR_STATE);
    ck_assert_int_eq(te_optim_state_read(opt, 0, 2, got), TE_ERR_ARG);
    ck_assert_int_eq(te_optim_state_read(opt, 1, 0, got), TE_ERR_ARG);
    te_step_begin();
    te_tensor *loss = te_sum(te_mul(w, w), TE_ALL, false);
    ck_assert_int_eq(te_backward(loss), TE_OK);
    ck_assert_int_eq(te_optim_step(opt), TE_OK);
    te_step_end();
    for (int slot = 0; slot < 2; slot++) {
        ck_assert_int_eq(te_optim_state_read(opt, 0, slot, got), TE_OK);
        ck_assert_mem_eq(got, te_optim_state(opt, 0, slot), sizeof got);
    }
    /* v = (1 - beta2) * g^2, g = 2w = 2 */
    ck_assert_float_eq_tol(got[0], 0.004f, 1e-7f);
    const float set[5] = { 1, 2, 3, 4, 5 };
    ck_assert_int_eq(te_optim_state_set(opt, 0, 1, set), TE_OK);
    ck_assert_int_eq(te_optim_state_read(opt, 0, 1, got), TE_OK);
    ck_assert_mem_eq(got, set, sizeof got);
    te_optim_free(opt);
}
END_TEST

Suite *suite_optim(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("optim");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_sgd_momentum);
    tcase_add_test(tc, test_sgd_nesterov);
    tcase_add_test(tc, test_adam);
    tcase_add_test(tc, test_adamw);
    tcase_add_test(tc, test_clip_grad_norm);
    tcase_add_test(tc, test_grad_accumulation);
    tcase_add_test(tc, test_step_consumes_grads);
    tcase_add_test(tc, test_bad_options);
    tcase_add_test(tc, test_f16_params);
    tcase_add_loop_test(tc, test_trajectories_with_stats, 0, 5);
    tcase_add_test(tc, test_update_stats_large);
    tcase_add_test(tc, test_update_stats_after_injection);
    tcase_add_test(tc, test_multi_tensor_adam);
    tcase_add_test(tc, test_unscale_many);
    tcase_add_test(tc, test_state_read);
    suite_add_tcase(s, tc);
    return s;
}
