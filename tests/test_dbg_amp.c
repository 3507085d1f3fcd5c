/*
 * test_dbg_amp.c — the debugger on mixed precision, in this process: a
 * small model whose tensors are f16 (its input cast down, f16 parameters:
 * every op computes in f32 and rounds its output) stopped by `break
 * overflow`, `break underflow [if fraction > X]`, `break skip` and
 * conditions on overflow, underflow and scale, at exact ops; `compare f32`
 * against the op re-run in f32; `info amp`; an injected scale on an f16
 * output overflowing as rounding would.
 * Then the same on examples/mlp at O2 under tdbg, eager and graph mode.
 */
#include "cmd.h"
#include "session.h"
#include "suites.h"
#include "tsession.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char out[65536];
static FILE *out_f;
static int hook = -1;
static int n_shown;
static dbg_stop shown;

static void fe_show(const dbg_stop *s)
{
    n_shown++;
    shown = *s;
    shown.cond = NULL;
}

/* The lines the front end answers at a stop, then "continue". */
static const char *const *fe_lines;
static int fe_next;

static char *fe_read(const char *prompt)
{
    (void)prompt;
    return strdup(fe_lines && fe_lines[fe_next] ? fe_lines[fe_next++] : "continue");
}

static const dbg_frontend fe_test = { .name = "test-amp", .read_line = fe_read, .show_stop = fe_show };

static te_tensor *w1, *b1, *w2, *b2;

static void setup(void)
{
    tu_setup();
    memset(&dbg, 0, sizeof dbg);
    dbg.next_id = 1;
    dbg.step = -1;
    dbg.ops = calloc(DBG_MAX_OPS, sizeof *dbg.ops);
    dbg.last_ops = calloc(DBG_MAX_OPS, sizeof *dbg.last_ops);
    dbg.trends = calloc(DBG_MAX_TRENDS, sizeof *dbg.trends);
    ck_assert(dbg.ops && dbg.last_ops && dbg.trends);
    dbg.interactive = true;
    dbg.started = true;
    dbg_amp_reset();
    dbg_frontend_active = &fe_test;
    hook = te_hook_add(&(te_hooks){ .step_begin = dbg_on_step_begin, .step_end = dbg_on_step_end,
                                    .phase_begin = dbg_on_phase, .op_end = dbg_on_op_end },
                       NULL);
    ck_assert(hook >= 0);
    memset(out, 0, sizeof out);
    out_f = fmemopen(out, sizeof out, "w");
    ck_assert(out_f != NULL);
    dbg_out_stream = out_f;
    n_shown = 0;
    fe_lines = NULL;
    fe_next = 0;
    /* x [2,4] f32 -> in/cast f16 -> fc1/linear [3,4] -> act/relu -> fc2/linear [3,3] */
    w1 = te_param_new("fc1.weight", TE_F16, te_shape(3, 4));
    b1 = te_param_new("fc1.bias", TE_F16, te_shape(3));
    w2 = te_param_new("fc2.weight", TE_F16, te_shape(3, 3));
    b2 = te_param_new("fc2.bias", TE_F16, te_shape(3));
    ck_assert(w1 && b1 && w2 && b2);
    te_fill(w1, 1.0f);
    te_fill(b1, 0.0f);
    te_fill(w2, 0.5f);
    te_fill(b2, 0.0f);
}

static void teardown(void)
{
    te_hook_remove(hook);
    te_inject_clear();
    te_scaler_disable();
    for (int i = 0; i < dbg.n_breaks; i++)
        dbg_cond_free(dbg.breaks[i].cond);
    dbg.n_breaks = 0;
    dbg_out_stream = NULL;
    fclose(out_f);
    dbg_frontend_active = NULL;
    for (int i = 0; i < dbg.n_trends; i++)
        if (dbg.trends[i].prev)
            te_tensor_free(dbg.trends[i].prev);
    free(dbg.ops);
    free(dbg.last_ops);
    free(dbg.trends);
    tu_teardown();
}

static te_tensor *model(te_tensor *x)
{
    te_scope_push("in");
    te_tensor *h = te_cast(x, TE_F16);
    te_scope_pop();
    te_scope_push("fc1");
    h = te_linear(h, w1, b1);
    te_scope_pop();
    te_scope_push("act");
    h = te_relu(h);
    te_scope_pop();
    te_scope_push("fc2");
    h = te_linear(h, w2, b2);
    te_scope_pop();
    ck_assert_msg(h != NULL, "%s", te_error());
    return h;
}

static te_tensor *forward(const float *x8)
{
    te_tensor *x = te_tensor_from(TE_F32, te_shape(2, 4), x8);
    ck_assert(x != NULL);
    snprintf(x->name, sizeof x->name, "data:x");
    return model(x);
}

/* One forward-only step on x, every element `v` (or rows of their own). */
static void fwd_step(const float *x8)
{
    te_step_begin();
    forward(x8);
    te_step_end();
    fflush(out_f);
}

static const float *all(float v)
{
    static float x[8];
    for (int i = 0; i < 8; i++)
        x[i] = v;
    return x;
}

static void has(const char *want)
{
    fflush(out_f);
    ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want, out);
}

static void lacks(const char *unwanted)
{
    fflush(out_f);
    ck_assert_msg(!strstr(out, unwanted), "'%s' in:\n%s", unwanted, out);
}

/* fc1's output is 4 * v (w1 all ones): 2e4 makes 8e4, beyond f16's 65504;
 * the input itself (2e4) fits. */
START_TEST(test_break_overflow)
{
    ck_assert(!dbg_execute("break overflow"));
    has("Breakpoint 1: an op whose f16/bf16 output overflows to +-Inf from finite inputs\n");
    fwd_step(all(100.0f)); /* step 0: 400, fine */
    ck_assert_int_eq(n_shown, 0);
    fwd_step(all(2e4f));   /* step 1 */
    ck_assert_int_eq(n_shown, 1);
    ck_assert_str_eq(shown.reason, "overflow");
    ck_assert_str_eq(shown.op, "fc1/linear");
    ck_assert_int_eq(shown.step, 1);
    ck_assert_int_eq(shown.origin.kind, DBG_ORIGIN_CREATED);
    ck_assert_int_eq(shown.round.dtype, TE_F16);
    ck_assert_int_eq(shown.round.overflow, 6);
    ck_assert_msg(shown.round.absmax == 8e4f, "absmax %g", (double)shown.round.absmax);
    has("stopped: step=1 phase=forward op=fc1/linear type=Linear reason=overflow tensor=fc1/linear:out0 "
        "index=[0,0] origin=created\n");
    has("  rounding to f16: 6 of 6 finite non-zero results overflowed to +-Inf, 0 underflowed to zero\n");
    has("  before rounding: |x| up to 80000; f16's max is 65504 (1.22x beyond it)\n");
    /* relu and fc2 inherit the Inf: no stop there */
    lacks("op=act/relu");
    lacks("op=fc2/linear");
    /* the cast itself overflows when the input does not fit; re-run, it is the value cast up */
    fe_lines = (const char *const[]){ "compare f32", NULL };
    fwd_step(all(1e5f));
    ck_assert_int_eq(n_shown, 2);
    has("stopped: step=2 phase=forward op=in/cast type=Cast reason=overflow tensor=in/cast:out0 index=[0,0] "
        "origin=created\n");
    has("  before rounding: |x| up to 100000; f16's max is 65504");
    has("  in/cast:out0 [2,4] f16 against f32:\n    8 of 8 elements are the f32 result rounded to nearest even\n"
        "    overflowed to +-Inf: 8 of 8:");
}
END_TEST

/* compare f32: bit-exact rounding of the f32 result at an op that only
 * rounded; the range named at one that overflowed. */
START_TEST(test_compare_f32)
{
    for (int i = 0; i < 12; i++) /* weights f16 cannot hold exactly: the results round */
        te_set(w1, i, 0.1f * (float)(i + 1) / 3);
    ck_assert(!dbg_execute("break fc2/linear"));
    fe_lines = (const char *const[]){ "compare f32", NULL };
    const float x[8] = { 0.1f, 0.2f, 0.3f, 0.4f, 1.0f / 3, 2.0f / 3, 1.1f, 7.7f };
    fwd_step(x);
    ck_assert_int_eq(n_shown, 1);
    has("compare f32: fc2/linear (Linear), step 0, re-run in f32 from its inputs cast up\n");
    has("  fc2/linear:out0 [2,3] f16 against f32:\n");
    has("    6 of 6 elements are the f32 result rounded to nearest even\n");
    has("    overflowed to +-Inf: 0 of 6\n");
    has("    verdict: only rounding (");
    /* the error is at most half an ulp of f16 */
    const char *u = strstr(out, "    max error ");
    ck_assert(u != NULL);
    double ulps = strtod(u + strlen("    max error "), NULL);
    ck_assert_msg(ulps > 0 && ulps <= 0.5, "max error %g ulps", ulps);

    ck_assert(!dbg_execute("delete"));
    ck_assert(!dbg_execute("break overflow"));
    te_fill(w1, 1.0f);
    fe_lines = (const char *const[]){ "compare f32", "compare f64", NULL };
    fe_next = 0;
    fwd_step(all(2e4f));
    ck_assert_int_eq(n_shown, 2);
    has("    overflowed to +-Inf: 6 of 6: [0,0] f32 80000 [0,1] f32 80000 [0,2] f32 80000 [1,0] f32 80000 "
        "[1,1] f32 80000 ...\n");
    has("    verdict: f16's range is the cause: 6 results beyond its max 65504\n");
    has("error: compare: expected 'f32' (usage: compare f32), got 'f64'");
    /* refused where it cannot answer */
    ck_assert(!dbg_execute("compare f32"));
    has("error: compare: no step is running; 'next' stops at the start of the next one");
}
END_TEST

/* An injected scale on an f16 output overflows as rounding would, and the
 * record says so: `break overflow` stops there with the value before. */
START_TEST(test_inject_scale_overflows)
{
    ck_assert_int_eq(te_inject_add("scale@op=fc1/linear,step=1,value=1e6"), TE_OK);
    ck_assert(!dbg_execute("break overflow"));
    fe_lines = (const char *const[]){ "compare f32", NULL };
    fwd_step(all(1.0f));
    ck_assert_int_eq(n_shown, 0);
    fwd_step(all(1.0f)); /* fc1: 4, times 1e6 */
    ck_assert_int_eq(n_shown, 1);
    has("stopped: step=1 phase=forward op=fc1/linear type=Linear reason=overflow tensor=fc1/linear:out0 "
        "index=[0,0] origin=created\n");
    has("  before rounding: |x| up to 4e+06; f16's max is 65504 (61.1x beyond it)\n");
    /* the f32 re-run does not overflow: the value was changed after the op */
    has("    0 of 6 elements are the f32 result rounded to nearest even\n");
    has("    verdict: not this op's precision: 6 elements differ from the f32 result by more than its rounding");
}
END_TEST

/* x 1e-4 and w1 1e-5 make fc1's results ~4e-9, below half of f16's
 * smallest subnormal (2^-25): zero. Row 1 of x at 1 keeps its row. */
START_TEST(test_break_underflow)
{
    te_fill(w1, 1e-5f);
    const float half[8] = { 1e-4f, 1e-4f, 1e-4f, 1e-4f, 1, 1, 1, 1 };
    ck_assert(!dbg_execute("break underflow if fraction > 0.5"));
    has("Breakpoint 1: an op rounding more than 0.5 of its non-zero results to zero\n");
    fwd_step(half); /* 3 of 6: not more than half */
    ck_assert_int_eq(n_shown, 0);
    fwd_step(all(1e-4f));
    ck_assert_int_eq(n_shown, 1);
    has("stopped: step=1 phase=forward op=fc1/linear type=Linear reason=underflow tensor=fc1/linear:out0 index=- "
        "origin=-\n");
    ck_assert_int_eq(shown.round.underflow, 6);
    has("  fc1/linear:out0 [2,3] f16: underflow = 1\n");
    ck_assert(!dbg_execute("delete"));
    ck_assert(!dbg_execute("break underflow"));
    fwd_step(half);
    ck_assert_int_eq(n_shown, 2);
    has("stopped: step=2 phase=forward op=fc1/linear type=Linear reason=underflow");
    ck_assert_msg(shown.value == 0.5, "fraction %g", shown.value);
    /* bad fractions are refused */
    ck_assert(!dbg_execute("break underflow if fraction > 2"));
    has("error: break underflow: the fraction must be a number in [0, 1), got '2'");
    ck_assert(!dbg_execute("break underflow if fraction < 0.1"));
    has("error: break underflow: expected 'fraction > X' (X between 0 and 1), got 'fraction < 0.1'");
}
END_TEST

/* Conditions read what rounding did: a fraction, a count, the scale. */
START_TEST(test_conditions)
{
    te_fill(w1, 1e-5f);
    const float half[8] = { 1e-4f, 1e-4f, 1e-4f, 1e-4f, 1, 1, 1, 1 };
    ck_assert(!dbg_execute("break type:Linear if underflow > 0.4"));
    fwd_step(all(1.0f)); /* nothing underflows */
    ck_assert_int_eq(n_shown, 0);
    fwd_step(half);
    ck_assert_int_eq(n_shown, 1);
    has("stopped: step=1 phase=forward op=fc1/linear type=Linear reason=condition tensor=fc1/linear:out0");
    ck_assert_str_eq(shown.func, "underflow");
    ck_assert_msg(shown.value == 0.5, "value %g", shown.value);
    ck_assert(!dbg_execute("delete"));
    te_fill(w1, 1.0f);
    ck_assert(!dbg_execute("break fc* if overflow >= 6"));
    fwd_step(all(2e4f));
    ck_assert_int_eq(n_shown, 2);
    has("stopped: step=2 phase=forward op=fc1/linear type=Linear reason=condition tensor=fc1/linear:out0");
    ck_assert(!dbg_execute("delete"));
    /* scale: false without a scaler, the scaler's scale with one */
    ck_assert(!dbg_execute("break fc2/linear if scale >= 65536"));
    fwd_step(all(1.0f));
    ck_assert_int_eq(n_shown, 2);
    ck_assert_int_eq(te_scaler_enable(NULL), TE_OK);
    fwd_step(all(1.0f));
    ck_assert_int_eq(n_shown, 3);
    ck_assert_str_eq(shown.func, "scale");
    ck_assert_msg(shown.value == 65536, "scale %g", shown.value);
    /* what the language refuses */
    ck_assert(!dbg_execute("break fc1/linear if inputs.overflow"));
    has("error: condition: column 8: overflow is what rounding the op's outputs did: its scopes are outputs and "
        "out0..out4, not inputs");
    ck_assert(!dbg_execute("break fc1/linear if scale"));
    has("error: condition: column 1: scale needs a comparison, e.g. scale > 100");
}
END_TEST

/* A training step: the f16 output cast up (head/cast), an f32 MSE against
 * zeros, scaled by the loss scale (amp/loss_scale), backward (gradients of
 * the f16 tensors rounded to f16), the scaler's unscale (amp/unscale) and
 * its update, as te_optim_step ends with. */
static void train_step(float v)
{
    te_step_begin();
    te_tensor *h = forward(all(v));
    te_scope_push("head");
    te_tensor *pred = te_cast(h, TE_F32);
    te_scope_pop();
    te_tensor *target = te_tensor_zeros(TE_F32, te_shape(2, 3));
    te_tensor *loss = te_mse(pred, target);
    te_tensor *scaled = te_scaler_scale_loss(loss);
    ck_assert_msg(scaled != NULL, "%s", te_error());
    te_zero_grad();
    ck_assert_int_eq(te_backward(scaled), TE_OK);
    ck_assert_int_eq(te_scaler_unscale(te_params(), te_param_count()), TE_OK);
    te_scaler_update();
    te_step_end();
    fflush(out_f);
}

/* fc2's output is 3 * 0.5 * 4v = 6v; the gradient reaching head/cast's
 * backward is 2 * 6v / 6 * scale = 2v * scale: 65536 * 2 * 1 = 131072 does
 * not fit f16; at 0.125 no gradient reaches 65504 at 32768 nor at 65536. */
START_TEST(test_break_skip)
{
    ck_assert_int_eq(te_scaler_enable(&(te_scaler_opts){ .growth_interval = 2 }), TE_OK);
    ck_assert(!dbg_execute("break skip"));
    has("Breakpoint 1: the loss scaler about to skip a step\n");
    fe_lines = (const char *const[]){ "info amp", NULL };
    train_step(1.0f); /* step 0: 131072: skipped, scale halves */
    ck_assert_int_eq(n_shown, 1);
    ck_assert_str_eq(shown.reason, "skip");
    ck_assert_str_eq(shown.op, "amp/unscale");
    ck_assert_str_eq(shown.skip_param, "fc1.weight");
    ck_assert_str_eq(shown.skip_op, "grad/head/cast");
    ck_assert_msg(shown.scale == 65536, "scale %g", (double)shown.scale);
    has("stopped: step=0 phase=update op=amp/unscale type=Unscale reason=skip tensor=grad:fc1.weight index=- "
        "origin=propagated:grad:fc1.weight\n");
    has("  the loss scaler skips step 0: scale 65536, a gradient is non-finite after unscaling\n");
    has("  first non-finite gradient: grad:fc1.weight (parameters in registration order)\n");
    has("  first backward op creating a non-finite value: grad/head/cast, in grad:fc2/linear:out0 (its inputs were "
        "finite)\n");
    /* info amp at the stop: the skip is not over yet */
    has("amp: level O0, low precision none (everything f32)\n");
    has("loss scaler: dynamic, scale 65536 (init 65536, x2 every 2 clean steps, x0.5 on a non-finite one, "
        "hysteresis 1), 0 steps skipped\n");
    has("scale history (step: scale): 0: 65536\n");
    /* clean steps at 32768: none stops, and the scale grows after two */
    for (int i = 0; i < 3; i++)
        train_step(0.125f);
    ck_assert_int_eq(n_shown, 1);
    fclose(out_f);
    memset(out, 0, sizeof out);
    out_f = fmemopen(out, sizeof out, "w");
    dbg_out_stream = out_f;
    ck_assert(!dbg_execute("info amp"));
    has("ops of step 3 by precision (the op table's class at this level; each op's output dtype):\n"
        "  f32: in/cast f16, fc1/linear f16, act/relu f16, fc2/linear f16, head/cast f32, mse f32, "
        "amp/loss_scale f32\n");
    has("loss scaler: dynamic, scale 65536 (init 65536, x2 every 2 clean steps, x0.5 on a non-finite one, "
        "hysteresis 1), 1 steps skipped\n");
    has("scale history (step: scale): 0: 65536, 1: 32768, 3: 65536\n");
    has("skipped steps: 1 seen\n");
    has("  step 0: scale 65536, grad:fc1.weight non-finite first; created in the backward by grad/head/cast (");
}
END_TEST

static te_status graph_fn(void *ctx, te_tensor *const *in, te_tensor **res)
{
    (void)ctx;
    res[0] = model(in[0]);
    return res[0] ? TE_OK : TE_ERR_STATE;
}

/* Graph mode stops at the same op, and compare f32 re-runs the node the
 * compiled kernel ran, from the inputs kept in memory for the debugger. */
START_TEST(test_graph_mode)
{
    ck_assert(!dbg_execute("break overflow"));
    fe_lines = (const char *const[]){ "compare f32", NULL };
    te_graph *g = te_graph_new(graph_fn, NULL, &(te_graph_opts){ .mode = TE_MODE_GRAPH, .n_inputs = 1,
                                                                 .n_outputs = 1 });
    ck_assert(g != NULL);
    te_tensor *x = te_tensor_persistent(TE_F32, te_shape(2, 4)), *y;
    snprintf(x->name, sizeof x->name, "data:x");
    for (int step = 0; step < 3; step++) {
        te_fill(x, step == 1 ? 2e4f : 100.0f);
        te_step_begin();
        ck_assert_msg(te_graph_run(g, &x, &y) == TE_OK, "%s", te_error());
        te_step_end();
    }
    fflush(out_f);
    ck_assert_int_eq(n_shown, 1);
    has("stopped: step=1 phase=forward op=fc1/linear type=Linear reason=overflow tensor=fc1/linear:out0 "
        "index=[0,0] origin=created\n");
    has("  before rounding: |x| up to 80000; f16's max is 65504 (1.22x beyond it)\n");
    has("    6 of 6 elements are the f32 result rounded to nearest even\n");
    has("    verdict: f16's range is the cause: 6 results beyond its max 65504\n");
    te_graph_free(g);
    te_tensor_free(x);
}
END_TEST

/* The case on an example: an f16 MLP at O2 with a scale injected
 * into fc2/linear at step 5 stops there, origin created; the step is then
 * skipped, and the skip names the parameter and the forward op the
 * gradients inherited the Inf from. */
START_TEST(test_example_o2)
{
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++) {
        ts_session s = ts_tdbg("--batch", "break overflow;break skip;run;continue;next;info amp", "mlp",
                               "--hidden 64,64 --batch 32 --threads 2 --log-every 1 --steps 7 --mode %s --amp O2 "
                               "--inject scale@op=fc2/linear,step=5,value=1e6", modes[m]);
        ts_stop_is(&s, 0, "stopped: step=5 phase=forward op=fc2/linear type=Linear reason=overflow "
                          "tensor=fc2/linear:out0 index=[0,0] origin=created");
        ts_has(&s, "  before rounding: |x| up to 5.78125e+06; f16's max is 65504 (88.3x beyond it)\n");
        ts_stop_is(&s, 1, "stopped: step=5 phase=update op=amp/unscale type=Unscale reason=skip "
                          "tensor=grad:fc1.weight index=- origin=propagated:grad:fc1.weight");
        ts_has(&s, "  the loss scaler skips step 5: scale 65536, a gradient is non-finite after unscaling\n");
        ts_has(&s, "  no backward op created one: the gradients inherit it from the forward pass, where fc2/linear "
                   "created it first, in fc2/linear:out0\n");
        ts_has(&s, " scale=65536 skipped\n");
        ts_has(&s, "scale history (step: scale): 0: 65536, 6: 32768\n");
        ts_has(&s, "  step 5: scale 65536, grad:fc1.weight non-finite first; created in the forward by fc2/linear "
                   "(fc2/linear:out0)\n");
        ts_has(&s, "  low: fc1/linear f16, fc2/linear f16 (overflow 1973, underflow 0), fc3/linear f16\n");
        ts_free(&s);
        /* a natural one: O3 (everything f16, no scaler) with a learning rate of 1 */
        s = ts_tdbg("--batch", "break overflow;run;compare f32", "mlp",
                    "--hidden 64,64 --batch 32 --threads 2 --log-every 1 --steps 4 --mode %s --amp O3 --lr 1",
                    modes[m]);
        ts_stop_is(&s, 0, "stopped: step=2 phase=forward op=fc3/linear type=Linear reason=overflow "
                          "tensor=fc3/linear:out0 index=[30,1] origin=created");
        ts_has(&s, "  before rounding: |x| up to 76279.2; f16's max is 65504 (1.16x beyond it)\n");
        ts_has(&s, "    320 of 320 elements are the f32 result rounded to nearest even\n"
                   "    overflowed to +-Inf: 1 of 320: [30,1] f32 -76279.2\n");
        ts_has(&s, "    verdict: f16's range is the cause: 1 results beyond its max 65504\n");
        ts_free(&s);
    }
}
END_TEST

Suite *suite_dbg_amp(void)
{
    Suite *s = suite_create("dbg_amp");
    TCase *tc = tcase_create("precision");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_break_overflow);
    tcase_add_test(tc, test_compare_f32);
    tcase_add_test(tc, test_inject_scale_overflows);
    tcase_add_test(tc, test_break_underflow);
    tcase_add_test(tc, test_conditions);
    tcase_add_test(tc, test_break_skip);
    tcase_add_test(tc, test_graph_mode);
    tcase_add_test(tc, test_example_o2);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}
