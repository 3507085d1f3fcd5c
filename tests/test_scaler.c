/* test_scaler.c — dynamic loss scaling: GradScaler's sequence of scales and
 * skips (tests/gen_scaler.py), Megatron's hysteresis, the amp/unscale
 * record, skipped steps leaving the optimizer alone, f32 master weights. */
#include "fixture.h"
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    te_tensor *w, *b;
    te_optim *opt;
} lin;

static lin lin_new(void)
{
    lin m;
    m.w = te_param_new("fc.weight", TE_F32, te_shape(3, 4));
    m.b = te_param_new("fc.bias", TE_F32, te_shape(3));
    te_init_linear(m.w, m.b);
    m.opt = te_adam_new(te_params(), te_param_count(), &(te_adam_opts){ .lr = 1e-2f });
    ck_assert_ptr_nonnull(m.opt);
    return m;
}

/* The whole training step with a scaler: inputs x, t; output the loss. */
static te_status scaled_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    lin *m = ctx;
    te_scope_push("fc");
    te_tensor *y = te_linear(in[0], m->w, m->b);
    te_scope_pop();
    out[0] = te_mse(y, in[1]);
    te_status st = te_backward(te_scaler_scale_loss(out[0]));
    if (st == TE_OK)
        st = te_scaler_unscale(te_params(), te_param_count());
    if (st == TE_OK)
        te_clip_grad_norm(te_params(), te_param_count(), 100.0f);
    return st == TE_OK ? te_optim_step(m->opt) : st;
}

static const char *const sequences[] = { "short", "default", "small" };

/* Loop i: sequence i / 2, eager (even) or graph mode (odd). The engine's
 * scales and skips step by step against GradScaler's on the same faults
 * (a gradient made inf or nan by an injection into the backward op). */
START_TEST(test_gradscaler_sequence)
{
    const char *seq = sequences[_i / 2];
    const te_mode mode = _i % 2 ? TE_MODE_GRAPH : TE_MODE_EAGER;
    fx_file *fx = fx_open("scaler.bin");
    char name[64];
#define FX(what) (snprintf(name, sizeof name, "%s/%s", seq, what), fx_tensor(fx, name))
    /* the fixture's tensors are the tape's: copied out before the first step ends */
    float cfg[3], faults[64], scale[64], skipped[64], after[64];
    const int n = (int)FX("faults")->numel;
    ck_assert_int_le(n, 64);
    te_copy_to_f32(FX("config"), cfg);
    te_copy_to_f32(FX("faults"), faults);
    te_copy_to_f32(FX("scale"), scale);
    te_copy_to_f32(FX("skipped"), skipped);
    te_copy_to_f32(FX("scale_after"), after);
    for (int s = 0; s < n; s++)
        if (faults[s] != 0) {
            char spec[96];
            snprintf(spec, sizeof spec, "%s@op=grad/fc/linear,step=%d", faults[s] == 1 ? "inf" : "nan", s);
            ck_assert_int_eq(te_inject_add(spec), TE_OK);
        }
    lin m = lin_new();
    ck_assert_int_eq(te_scaler_enable(&(te_scaler_opts){ .init_scale = cfg[0],
                                                         .growth_interval = (int)cfg[1] }),
                     TE_OK);
    te_scaler_state st;
    te_scaler_state_get(&st);
    st.growth_tracker = (int64_t)cfg[2];
    ck_assert_int_eq(te_scaler_state_set(&st), TE_OK);
    te_graph *g = te_graph_new(scaled_step, &m, &(te_graph_opts){ .mode = mode, .n_inputs = 2, .n_outputs = 1 });
    ck_assert_ptr_nonnull(g);
    float x[8 * 4], t[8 * 3], w0[12], m0[12];
    tu_fill_uniform(x, 32, 1, -1.0f, 1.0f);
    tu_fill_uniform(t, 24, 2, -1.0f, 1.0f);
    int64_t skips = 0, updates = 0;
    for (int s = 0; s < n; s++) {
        te_step_begin();
        te_tensor *in[2] = { te_tensor_from(TE_F32, te_shape(8, 4), x), te_tensor_from(TE_F32, te_shape(8, 3), t) },
                  *out[1];
        te_scaler_state_get(&st);
        ck_assert_msg(st.scale == scale[s], "%s step %d: scale %g, GradScaler %g", seq, s,
                      (double)st.scale, (double)scale[s]);
        te_copy_to_f32(m.w, w0);
        const float *mom = te_optim_state(m.opt, 0, 0);
        if (mom)
            memcpy(m0, mom, sizeof m0);
        ck_assert_int_eq(te_graph_run(g, in, out), TE_OK);
        te_scaler_state_get(&st);
        const bool skip = skipped[s] != 0;
        ck_assert_msg(st.found_inf == skip, "%s step %d: found_inf %d, GradScaler skipped %d", seq, s,
                      st.found_inf, skip);
        skips += skip;
        updates += !skip;
        ck_assert_int_eq(st.skipped, skips);
        ck_assert_int_eq(te_optim_steps(m.opt), updates);
        ck_assert_msg(st.scale == after[s], "%s step %d: scale after %g, GradScaler %g", seq, s,
                      (double)st.scale, (double)after[s]);
        ck_assert_str_eq(st.first_param, skip ? "fc.weight" : "");
        float w1[12];
        te_copy_to_f32(m.w, w1);
        ck_assert_int_eq(memcmp(w0, w1, sizeof w0) == 0, skip);
        if (skip && mom)
            ck_assert_int_eq(memcmp(m0, te_optim_state(m.opt, 0, 0), sizeof m0), 0);
        ck_assert(isfinite(te_get(m.w, 0)));
        te_step_end();
    }
#undef FX
    te_graph_free(g);
    te_optim_free(m.opt);
    fx_close(fx);
}
END_TEST

/* Megatron's DynamicGradScaler with hysteresis 2 (its update(), by hand):
 * each non-finite step resets the growth count and takes one unit of
 * hysteresis; at 0 the scale halves (Megatron's tracker goes on below 0,
 * ours stays at 0: the same scales, and a state te_scaler_state_set takes);
 * growth_interval clean steps double it and restore the hysteresis. */
START_TEST(test_hysteresis)
{
    ck_assert_int_eq(te_scaler_enable(&(te_scaler_opts){ .init_scale = 1024, .growth_interval = 3, .hysteresis = 2 }),
                     TE_OK);
    static const struct {
        bool inf;
        float scale;
        int left;
    } want[] = {
        { true, 1024, 1 },  { true, 512, 0 },   { true, 256, 0 },  { false, 256, 0 },  { false, 256, 0 },
        { false, 512, 2 },  { true, 512, 1 },   { false, 512, 1 }, { true, 256, 0 },   { false, 256, 0 },
        { false, 256, 0 },  { false, 512, 2 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        te_scaler_record(want[i].inf, want[i].inf ? "w" : NULL);
        te_scaler_update();
        te_scaler_state st;
        te_scaler_state_get(&st);
        ck_assert_msg(st.scale == want[i].scale && st.hysteresis_left == want[i].left,
                      "step %zu: scale %g hysteresis %d, Megatron %g %d", i, (double)st.scale, st.hysteresis_left,
                      (double)want[i].scale, want[i].left);
    }
    te_scaler_update(); /* no record since: no step of the scaler's */
    te_scaler_state st;
    te_scaler_state_get(&st);
    ck_assert(st.scale == 512.0f && st.growth_tracker == 0);
}
END_TEST

typedef struct {
    int loss_scale, loss_scale_grad, unscale, updates_before_unscale;
    bool found_inf;
    float scale, scaled, seed;
    char first[TE_NAME_MAX];
    int n_inputs;
} seen_t;

static void watch(const te_op_record *rec, void *user)
{
    seen_t *s = user;
    if (strcmp(rec->name, "amp/loss_scale") == 0) {
        s->loss_scale++;
        s->scaled = te_item(rec->outputs[0]);
    }
    if (strcmp(rec->name, "grad/amp/loss_scale") == 0) {
        s->loss_scale_grad++;
        s->seed = te_item(rec->outputs[0]); /* d(scaled loss)/d(loss): the scale */
    }
    if (strncmp(rec->name, "update/", 7) == 0 && !s->unscale)
        s->updates_before_unscale++;
    if (strcmp(rec->name, "amp/unscale") == 0) {
        s->unscale++;
        ck_assert_str_eq(rec->type, "Unscale");
        ck_assert_int_eq(rec->phase, TE_PHASE_UPDATE);
        te_scaler_state st;
        te_scaler_state_get(&st);
        s->found_inf = st.found_inf;
        s->scale = st.scale;
        snprintf(s->first, sizeof s->first, "%s", st.first_param);
        s->n_inputs = rec->n_inputs;
        for (int i = 0; i < rec->n_inputs; i++)
            ck_assert_int_eq(rec->outputs[i]->dtype, TE_F32);
    }
}

/* Loop: eager, graph. The hooks see amp/loss_scale (loss times the scale;
 * in graph mode nothing reads the scaled loss, so only its backward runs,
 * which reads the scale as it runs) and amp/unscale before any update,
 * with the step's scale and found_inf; on the faulty step the first
 * non-finite gradient is named. */
START_TEST(test_unscale_record)
{
    const te_mode mode = _i ? TE_MODE_GRAPH : TE_MODE_EAGER;
    lin m = lin_new();
    ck_assert_int_eq(te_scaler_enable(&(te_scaler_opts){ .init_scale = 256 }), TE_OK);
    ck_assert_int_eq(te_inject_add("nan@op=grad/fc/linear,step=1"), TE_OK);
    seen_t seen = { 0 };
    int h = te_hook_add(&(te_hooks){ .op_end = watch }, &seen);
    te_graph *g = te_graph_new(scaled_step, &m, &(te_graph_opts){ .mode = mode, .n_inputs = 2, .n_outputs = 1 });
    float x[8 * 4], t[8 * 3];
    tu_fill_uniform(x, 32, 3, -1.0f, 1.0f);
    tu_fill_uniform(t, 24, 4, -1.0f, 1.0f);
    for (int s = 0; s < 2; s++) {
        memset(&seen, 0, sizeof seen);
        te_step_begin();
        te_tensor *in[2] = { te_tensor_from(TE_F32, te_shape(8, 4), x), te_tensor_from(TE_F32, te_shape(8, 3), t) },
                  *out[1];
        ck_assert_int_eq(te_graph_run(g, in, out), TE_OK);
        ck_assert_int_eq(seen.loss_scale, mode == TE_MODE_EAGER);
        if (mode == TE_MODE_EAGER)
            ck_assert_float_eq_tol(seen.scaled, 256.0f * te_item(out[0]), 1e-3f);
        ck_assert_int_eq(seen.loss_scale_grad, 1);
        ck_assert_float_eq(seen.seed, 256.0f);
        ck_assert_int_eq(seen.unscale, 1);
        ck_assert_int_eq(seen.updates_before_unscale, 0);
        ck_assert_int_eq(seen.n_inputs, 2);
        ck_assert(seen.scale == 256.0f);
        ck_assert_int_eq(seen.found_inf, s == 1);
        ck_assert_str_eq(seen.first, s == 1 ? "fc.weight" : "");
        te_step_end();
    }
    te_scaler_state st;
    te_scaler_state_get(&st);
    ck_assert(st.scale == 128.0f && st.skipped == 1);
    te_hook_remove(h);
    te_graph_free(g);
    te_optim_free(m.opt);
}
END_TEST

/* f16 weights at O2 keep an f32 master copy: 10 SGD steps of 1e-4 on a
 * gradient of exactly 1, each below half an f16 ulp at 1.0 (2^-11), move
 * the master to 0.999 and the weight to its rounding; at O3 (no master)
 * each rounded update is lost and the weight stays 1. With a scaler of
 * 1024 the gradient reaches the optimizer unscaled. */
START_TEST(test_master_weights)
{
    const bool o2 = _i == 0;
    ck_assert_int_eq(te_amp_set(o2 ? TE_AMP_O2 : TE_AMP_O3, TE_F16), TE_OK);
    te_tensor *w = te_param_new("w", TE_F16, te_shape(4));
    const float ones[4] = { 1, 1, 1, 1 };
    te_copy_from_f32(w, ones);
    te_optim *opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 1e-4f });
    if (o2)
        ck_assert_int_eq(te_scaler_enable(&(te_scaler_opts){ .init_scale = 1024, .fixed = true }), TE_OK);
    for (int s = 0; s < 10; s++) {
        te_step_begin();
        te_tensor *loss = te_sum(te_cast(w, TE_F32), TE_ALL, false);
        ck_assert_int_eq(te_backward(te_scaler_scale_loss(loss)), TE_OK);
        ck_assert_int_eq(te_scaler_unscale(te_params(), te_param_count()), TE_OK);
        ck_assert_int_eq(te_optim_step(opt), TE_OK);
        te_step_end();
    }
    ck_assert_int_eq(te_optim_slots(opt), o2 ? 1 : 0);
    if (o2) {
        ck_assert_str_eq(te_optim_slot_name(opt, 0), "master");
        const float *master = te_optim_state(opt, 0, 0);
        ck_assert_ptr_nonnull(master);
        for (int i = 0; i < 4; i++)
            ck_assert_float_eq_tol(master[i], 0.999f, 1e-6f);
        ck_assert_float_eq(te_get(w, 0), te_f16_to_f32(0x3bfe)); /* 0.99902, the f16 nearest 0.999 */
        te_scaler_state st;
        te_scaler_state_get(&st);
        ck_assert(st.scale == 1024.0f && st.skipped == 0);
        /* a checkpoint's master copy comes back through the slot */
        const float back[4] = { 0.5f, 0.5f, 0.5f, 0.5f };
        ck_assert_int_eq(te_optim_state_set(opt, 0, 0, back), TE_OK);
        ck_assert_float_eq(te_optim_state(opt, 0, 0)[3], 0.5f);
    } else {
        ck_assert_float_eq(te_get(w, 0), 1.0f);
    }
    te_optim_free(opt);
    te_amp_set(TE_AMP_O0, TE_F32);
}
END_TEST

/* Loop i: the gradient's dtype, f32, f16, bf16. te_scaler_unscale over
 * 5000 elements (two whole blocks of its pass and a tail): every gradient
 * value comes out exactly as its dtype's value times 1/scale, into the f32
 * master gradient for f16/bf16; then one NaN in the tail is found and names
 * the parameter. */
START_TEST(test_unscale_values)
{
    static const te_dtype dts[] = { TE_F32, TE_F16, TE_BF16 };
    const te_dtype dt = dts[_i];
    enum { N = 5000 };
    te_tensor *w = te_param_new("w", dt, te_shape(N));
    te_fill(w, 1.0f);
    float c[N];
    tu_fill_uniform(c, N, 9, -2.0f, 2.0f);
    ck_assert_int_eq(te_scaler_enable(&(te_scaler_opts){ .init_scale = 1024, .fixed = true }), TE_OK);
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            c[N - 3] = NAN;
        te_step_begin();
        te_tensor *k = te_tensor_from(TE_F32, te_shape(N), c);
        te_tensor *loss = te_sum(te_mul(te_cast(w, TE_F32), k), TE_ALL, false);
        ck_assert_int_eq(te_backward(te_scaler_scale_loss(loss)), TE_OK);
        /* the scaled gradient as the backward left it, in w's dtype */
        float scaled[N];
        te_copy_to_f32(w->grad, scaled);
        ck_assert_int_eq(te_scaler_unscale(te_params(), te_param_count()), TE_OK);
        const te_tensor *gt = dt == TE_F32 ? w->grad : te_scaler_master_grad(w);
        ck_assert_ptr_nonnull(gt);
        ck_assert_int_eq(gt->dtype, TE_F32);
        float g[N];
        ck_assert_int_eq(te_tensor_read(gt, 0, N, g), TE_OK);
        for (int i = 0; i < N; i++) {
            const float want = scaled[i] * (1.0f / 1024.0f);
            ck_assert_msg(memcmp(&g[i], &want, 4) == 0 || (isnan(g[i]) && isnan(want)),
                          "%s grad[%d] = %a, expected %a", te_dtype_name(dt), i, g[i], want);
        }
        ck_assert(isnan(g[N - 3]) == (pass == 1));
        te_scaler_state st;
        te_scaler_state_get(&st);
        ck_assert_int_eq(st.found_inf, pass == 1);
        ck_assert_str_eq(st.first_param, pass ? "w" : "");
        te_step_end();
    }
}
END_TEST

START_TEST(test_bad_state)
{
    te_scaler_state st = { .scale = 2 };
    ck_assert_int_eq(te_scaler_state_set(&st), TE_ERR_STATE);
    tu_assert_error_has("te_scaler_enable first");
    ck_assert_int_eq(te_scaler_enable(NULL), TE_OK);
    te_scaler_state_get(&st);
    st.scale = INFINITY;
    ck_assert_int_eq(te_scaler_state_set(&st), TE_ERR_ARG);
    tu_assert_error_has("scale inf");
    /* without a scaler the calls are no-ops: the loss is the loss */
    te_scaler_disable();
    te_tensor *x = te_tensor_from(TE_F32, te_shape(1), (const float[]){ 3 });
    ck_assert_ptr_eq(te_scaler_scale_loss(x), x);
    ck_assert_int_eq(te_scaler_unscale(te_params(), te_param_count()), TE_OK);
}
END_TEST

Suite *suite_scaler(void)
{
    Suite *s = suite_create("scaler");
    TCase *tc = tcase_create("scaler");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_gradscaler_sequence, 0, 6);
    tcase_add_test(tc, test_hysteresis);
    tcase_add_loop_test(tc, test_unscale_record, 0, 2);
    tcase_add_loop_test(tc, test_master_weights, 0, 2);
    tcase_add_loop_test(tc, test_unscale_values, 0, 3);
    tcase_add_test(tc, test_bad_state);
    suite_add_tcase(s, tc);
    return s;
}
