/*
 * test_dump_amp.c — mixed precision in dumps and in the TUI's tracking: a
 * model whose tensors are cast to f16 (te_cast: ops on them run in f32 and
 * round, filling te_op_record.round) trained under a loss scaler driven by
 * hand (te_scaler_record/te_scaler_update), dumped; run.h5 must say the
 * level and dtype, each step file its scale and skip, tdbg-dump ls and show
 * must print them, and the TUI's tracking must see the same scales, the
 * skipped step and the op whose rounding overflowed.
 */
#include "dump.h"
#include "h5file.h"
#include "suites.h"
#include "testutil.h"
#include "tui_internal.h"

#include <hdf5.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 4
#define SKIP_STEP 2

typedef struct {
    te_tensor *w1, *w2;
    te_optim *opt;
    int step;
} net;

/* x (4x6, some values beyond f16's max) cast to f16 overflows in
 * fc1/cast; the linear runs on f16 tensors and rounds. Step SKIP_STEP's
 * gradients are declared non-finite: no update, the scale backs off. */
static te_status step_fn(void *ctx, te_tensor *const *in, te_tensor **out)
{
    net *n = ctx;
    te_scope_push("fc1");
    te_tensor *x = te_cast(in[0], TE_F16);
    te_tensor *h = te_relu(te_linear(x, te_cast(n->w1, TE_F16), NULL));
    te_scope_pop();
    te_scope_push("fc2");
    out[0] = te_mse(te_linear(te_cast(h, TE_F32), n->w2, NULL), in[1]);
    te_scope_pop();
    te_status st = te_backward(out[0]);
    if (st != TE_OK)
        return st;
    bool bad = n->step == SKIP_STEP;
    te_scaler_record(bad, bad ? "fc1.weight" : NULL);
    st = bad ? TE_OK : te_optim_step(n->opt);
    te_scaler_update();
    return st;
}

static char dir[128];
static int64_t cast_exec = -1;

static void find_cast(const te_op_record *r, void *user)
{
    (void)user;
    if (strcmp(r->name, "fc1/cast") == 0)
        cast_exec = r->exec_index;
}

static void track_op(const te_op_record *r, void *user)
{
    (void)user;
    tui_track_op(r);
}

static void track_step_end(int64_t step, void *user)
{
    (void)user;
    tui_track_step_end(step);
}

static void setup(void)
{
    tu_setup();
    snprintf(dir, sizeof dir, "/tmp/tdbg-dumpamp-XXXXXX");
    ck_assert(mkdtemp(dir) != NULL);
}

static void teardown(void)
{
    te_scaler_disable();
    te_amp_set(TE_AMP_O0, TE_F32);
    tui_track_free();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert(system(cmd) == 0);
    tu_teardown();
}

/* STEPS steps under the scaler (growth every 2 clean steps), dumped and
 * tracked as the TUI tracks them. */
static void train(void)
{
    net n = { .w1 = te_param_new("fc1.weight", TE_F32, te_shape(8, 6)),
              .w2 = te_param_new("fc2.weight", TE_F32, te_shape(3, 8)) };
    te_init_linear(n.w1, NULL);
    te_init_linear(n.w2, NULL);
    n.opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.01f });
    ck_assert(te_amp_set(TE_AMP_O2, TE_F16) == TE_OK);
    ck_assert(te_scaler_enable(&(te_scaler_opts){ .growth_interval = 2 }) == TE_OK);
    char text[256], err[1024];
    snprintf(text, sizeof text, "dir=%s;io=both", dir);
    dump_spec spec;
    ck_assert_msg(dump_spec_parse(text, &spec, err, sizeof err), "%s", err);
    dump_session *d = dump_start(&spec, &(dump_run_info){ .mode = TE_MODE_EAGER, .command_line = "test" }, err,
                                 sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    int h = te_hook_add(&(te_hooks){ .op_end = track_op, .step_end = track_step_end }, NULL);
    int h2 = te_hook_add(&(te_hooks){ .op_end = find_cast }, NULL);
    te_graph *g = te_graph_new(step_fn, &n, &(te_graph_opts){ .mode = TE_MODE_EAGER, .n_inputs = 2, .n_outputs = 1 });
    for (n.step = 0; n.step < STEPS; n.step++) {
        te_tensor *in[2] = { te_tensor_new(TE_F32, te_shape(4, 6)), te_tensor_new(TE_F32, te_shape(4, 3)) }, *out[1];
        for (int64_t i = 0; i < in[0]->numel; i++)
            te_set(in[0], i, i == 5 ? 1e6f : sinf((float)(i + n.step)));
        for (int64_t i = 0; i < in[1]->numel; i++)
            te_set(in[1], i, cosf((float)(2 * i + n.step)));
        te_step_begin();
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s", te_error());
        te_step_end();
    }
    te_graph_free(g);
    te_hook_remove(h2);
    te_hook_remove(h);
    dump_stop(d);
    te_optim_free(n.opt);
}

/* The scale of each step's loss: 2^16, 2^16 (growth after it), 2^17
 * (skipped: back-off after it), 2^16. */
static const float want_scale[STEPS] = { 65536, 65536, 131072, 65536 };

START_TEST(test_run_and_steps_record_the_scaler)
{
    train();
    char why[1024];
    dump_run_meta m;
    dump_op_row *ops = NULL;
    int n_ops = 0;
    ck_assert_msg(dump_run_read(dir, &m, &ops, &n_ops, why, sizeof why), "%s", why);
    free(ops);
    ck_assert_str_eq(m.amp_level, "O2");
    ck_assert_str_eq(m.amp_dtype, "f16");
    ck_assert_str_eq(m.amp, "f16");
    for (int s = 0; s < STEPS; s++) {
        char path[256];
        snprintf(path, sizeof path, "%s/step-%08d.h5", dir, s);
        dump_step_reader *r = dump_step_open(path, why, sizeof why);
        ck_assert_msg(r != NULL, "%s", why);
        const dump_step_scaler *sc = dump_step_scaler_of(r);
        ck_assert_msg(sc->present && sc->scale == want_scale[s], "step %d: scale %g", s, (double)sc->scale);
        ck_assert_int_eq(sc->skipped, s == SKIP_STEP);
        ck_assert_str_eq(sc->skip_param, s == SKIP_STEP ? "fc1.weight" : "");
        /* the cast's output is f16 in the file */
        int i = dump_step_find(r, "/fc1/cast/out0");
        ck_assert(i >= 0 && dump_step_tensor(r, i)->dtype == TE_F16);
        dump_step_close(r);
    }
    tu_result res = tu_run_tool(tdbg_dump_main, "tdbg-dump", (const char *const[]){ "ls", dir, NULL });
    ck_assert_msg(res.rc == 0, "%s", res.err);
    ck_assert_msg(strstr(res.out, "precision: O2, low dtype f16\n"), "%s", res.out);
    ck_assert_msg(strstr(res.out, "step 1, loss scale 65536:\n"), "%s", res.out);
    ck_assert_msg(strstr(res.out, "step 2, loss scale 131072, skipped (the gradient of fc1.weight non-finite):\n"),
                  "%s", res.out);
    tu_result_free(&res);
    res = tu_run_tool(tdbg_dump_main, "tdbg-dump",
                      (const char *const[]){ "show", dir, "fc1/cast:out0", "--step", "2", NULL });
    ck_assert_msg(res.rc == 0, "%s%s", res.out, res.err);
    ck_assert_msg(strstr(res.out, "step 2  f16 [4,6], loss scale 131072, skipped"), "%s", res.out);
    ck_assert_msg(strstr(res.out, "inf"), "the overflowed value: %s", res.out);
    tu_result_free(&res);
}
END_TEST

/* A file without the scaler's attributes (a run without one, or from
 * before they were kept) reads as no scaler, and ls prints no scale. */
START_TEST(test_no_scaler_no_attributes)
{
    char why[1024];
    dump_step_writer *w = dump_step_create(dir, 0, 0, why, sizeof why);
    ck_assert_msg(w && dump_step_commit(w, why, sizeof why), "%s", why);
    char path[256];
    snprintf(path, sizeof path, "%s/step-00000000.h5", dir);
    dump_step_reader *r = dump_step_open(path, why, sizeof why);
    ck_assert_msg(r != NULL, "%s", why);
    ck_assert(!dump_step_scaler_of(r)->present);
    ck_assert_int_eq(dump_step_scaler_of(r)->skipped, -1);
    dump_step_close(r);
    tu_result res = tu_run_tool(tdbg_dump_main, "tdbg-dump", (const char *const[]){ "ls", dir, NULL });
    ck_assert_msg(strstr(res.out, "step 0:\n") && !strstr(res.out, "loss scale"), "%s", res.out);
    tu_result_free(&res);
}
END_TEST

/* Writes attribute loss_scale of type t (n values of v) on step 0's file. */
static void put_loss_scale(hid_t t, int n, const double *v)
{
    char path[256];
    snprintf(path, sizeof path, "%s/step-00000000.h5", dir);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(f >= 0);
    if (H5Aexists(f, "loss_scale") > 0)
        H5Adelete(f, "loss_scale");
    hid_t sp = H5Screate_simple(1, (hsize_t[]){ (hsize_t)n }, NULL);
    hid_t a = H5Acreate2(f, "loss_scale", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(a >= 0 && H5Awrite(a, H5T_NATIVE_DOUBLE, v) >= 0);
    H5Aclose(a);
    H5Sclose(sp);
    H5Fclose(f);
}

/* The loss scale is a float32 attribute read through the reader's one
 * scalar-attribute helper: read back exactly; a float64, an integer or two
 * values are a damaged file, said so. */
START_TEST(test_loss_scale_attribute_checked)
{
    char why[1024], path[256];
    dump_step_writer *w = dump_step_create(dir, 0, 0, why, sizeof why);
    ck_assert_msg(w && dump_step_commit(w, why, sizeof why), "%s", why);
    snprintf(path, sizeof path, "%s/step-00000000.h5", dir);
    static const struct { const char *want; int n; bool f64, i32; } c[] = {
        { NULL, 1, false, false },
        { "attribute 'loss_scale' is a float64, expected float32", 1, true, false },
        { "attribute 'loss_scale' is an int32, expected float32", 1, false, true },
        { "attribute 'loss_scale' holds 2 values, expected one", 2, false, false },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        put_loss_scale(c[i].f64 ? H5T_IEEE_F64LE : c[i].i32 ? H5T_STD_I32LE : H5T_IEEE_F32LE, c[i].n,
                       (const double[]){ 1024, 2048 });
        why[0] = '\0';
        dump_step_reader *r = dump_step_open(path, why, sizeof why);
        if (!c[i].want) {
            ck_assert_msg(r != NULL, "%s", why);
            const dump_step_scaler *sc = dump_step_scaler_of(r);
            ck_assert(sc->present && sc->scale == 1024);
            dump_step_close(r);
        } else {
            ck_assert_msg(r == NULL && strstr(why, c[i].want), "case %zu: %s", i, why);
        }
    }
}
END_TEST

/* The TUI's tracking sees the same scales and skip, and the op whose
 * rounding overflowed, with its precision. */
START_TEST(test_tui_tracks_scale_skip_and_rounding)
{
    train();
    float scale[8];
    bool skipped[8];
    ck_assert(tui_track_amp(scale, skipped, 8));
    for (int s = 0; s < STEPS; s++) {
        ck_assert_msg(scale[s] == want_scale[s], "step %d: scale %g", s, (double)scale[s]);
        ck_assert_int_eq(skipped[s], s == SKIP_STEP);
    }
    /* two columns for four steps: the least scale, a skip in either */
    ck_assert(tui_track_amp(scale, skipped, 2));
    ck_assert(scale[0] == 65536 && !skipped[0] && scale[1] == 65536 && skipped[1]);
    ck_assert(cast_exec >= 0);
    const tui_op_round *o = tui_track_round((int)cast_exec, true);
    ck_assert(o != NULL && o->dtype == TE_F16);
    ck_assert_msg(o->overflow == 1 && o->underflow == 0, "overflow %lld underflow %lld", (long long)o->overflow,
                  (long long)o->underflow);
    float l, sc;
    int64_t step;
    ck_assert(tui_track_last(&l, &step, &sc) && step == STEPS - 1 && sc == 65536);
}
END_TEST

Suite *suite_dump_amp(void)
{
    Suite *s = suite_create("dump_amp");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_run_and_steps_record_the_scaler);
    tcase_add_test(tc, test_no_scaler_no_attributes);
    tcase_add_test(tc, test_loss_scale_attribute_checked);
    tcase_add_test(tc, test_tui_tracks_scale_skip_and_rounding);
    suite_add_tcase(s, tc);
    return s;
}
