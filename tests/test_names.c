/*
 * test_names.c — names checked when they can be, and again when they
 * become knowable: op types at once, op names and globs (breakpoints,
 * `trend`, --inject, the dump selection) after the first step's ops ran,
 * with one warning naming the pattern and the closest names; impossible
 * conditions and out-of-range injection indices as errors; "not run yet"
 * apart from "no such op".
 */
#include "suites.h"
#include "te.h"
#include "tsession.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* examples/mlp with a 1024-element fc2 output: ARGS for ts_tdbg, and the
 * whole command line. */
#define ARGS "--hidden 64,64 --batch 16 --threads 2 --log-every 1 --steps 3"
#define MLP "'" TDBG_BUILDDIR "/examples/mlp' " ARGS " "

/* ---- the engine's mechanism --------------------------------------------------- */

static int n_msgs;
static char last_msg[1024];

static void sink(const char *msg, void *user)
{
    (void)user;
    n_msgs++;
    snprintf(last_msg, sizeof last_msg, "%s", msg);
}

static void noop_op(const te_op_record *r, void *u)
{
    (void)r;
    (void)u;
}

static void relu_sigmoid_step(void)
{
    te_step_begin();
    ck_assert(te_sigmoid(te_relu(te_tensor_zeros(TE_F32, te_shape(4)))) != NULL);
    te_step_end();
}

/* An op type is checked at once, against the op table, with suggestions. */
START_TEST(test_type_known_at_once)
{
    char msg[256];
    ck_assert(!te_op_type_check("Lnear", msg, sizeof msg));
    ck_assert_str_eq(msg, "no op type 'Lnear'; the closest: Linear, Mean, Relu");
    ck_assert(te_op_type_check("Linear", msg, sizeof msg));
    ck_assert(te_op_type_check("BatchNormGrad", msg, sizeof msg));
    ck_assert(te_op_type_check("AdamW", msg, sizeof msg));
    const char *types[256];
    ck_assert_int_eq(te_op_types(types, 256), 2 * 33 + 3); /* the 33 rows of TE_OP_LIST, their Grad, 3 updates */
}
END_TEST

/* A pattern that matched nothing by the end of the first step gets one
 * message naming it and the closest names; one that matched gets none;
 * one registered once the names are known is checked at once. */
START_TEST(test_first_step_check)
{
    ck_assert_int_eq(te_init(&(te_config){ .seed = 1, .threads = 1 }), TE_OK);
    int hook = te_hook_add(&(te_hooks){ .op_end = noop_op }, NULL);
    n_msgs = 0;
    ck_assert(!te_names_known());
    ck_assert_int_gt(te_names_expect("break rellu", "rellu", sink, NULL), 0);
    ck_assert_int_gt(te_names_expect("break sig*", "sig*", sink, NULL), 0);
    int gone = te_names_expect("forgotten", "nosuch", sink, NULL);
    te_names_forget(gone);
    ck_assert_int_gt(te_names_expect("ops=type:Conv2D", "type:Conv2D", sink, NULL), 0);
    ck_assert_int_eq(n_msgs, 0); /* nothing said before the ops exist */
    relu_sigmoid_step();
    ck_assert(te_names_known());
    ck_assert_int_eq(n_msgs, 2);
    ck_assert_str_eq(last_msg, "ops=type:Conv2D matched none of the 2 ops of step 0; the closest op types: Relu, Sigmoid");
    relu_sigmoid_step(); /* once only */
    ck_assert_int_eq(n_msgs, 2);
    te_names_expect("trend sigmod:out0", "sigmod", sink, NULL); /* known now: at once */
    ck_assert_int_eq(n_msgs, 3);
    ck_assert_str_eq(last_msg, "trend sigmod:out0 matched none of the 2 ops of step 0; the closest op names: sigmoid, relu");
    ck_assert_int_eq(te_names_count("*"), 2);
    const char *names[4];
    ck_assert_int_eq(te_names_list(names, NULL, 4), 2);
    ck_assert_str_eq(names[0], "relu");
    te_hook_remove(hook);
    te_shutdown();
}
END_TEST

/* dump/names.c's dump_* are the engine's code, not a copy. */
START_TEST(test_one_edit_distance)
{
    ck_assert_int_eq(te_edit_distance("kitten", "sitting"), 3);
    static const char *const c[] = { "fc1/linear", "fc2/linear" };
    ck_assert_str_eq(te_suggest("fc2/lnear", c, 2, TE_NEAR), "fc2/linear");
    ck_assert_ptr_null(te_suggest("zzzzzzzz", c, 2, TE_NEAR));
}
END_TEST

/* ---- the debugger --------------------------------------------------------------- */

START_TEST(test_break_type_refused)
{
    ts_session r = ts_tdbg("--batch", "break type:Lnear;info breakpoints", "mlp", ARGS);
    ts_has(&r, "error: break: no op type 'Lnear'; the closest: Linear, Mean, Relu");
    ts_has(&r, "No breakpoints.");
    ts_free(&r);
}
END_TEST

/* `break` before `run` is pending, as in gdb; a pending glob that matched
 * nothing by the end of step 0 gets one warning with the closest names. */
START_TEST(test_break_pending)
{
    ts_session r = ts_tdbg("--batch", "break fc2/lnear;info breakpoints;tbreak fc9*;break fc3/linear;delete 2;run;"
                                      "continue;info breakpoints", "mlp", ARGS);
    ts_has(&r, "Breakpoint 1 (fc2/lnear) pending: no ops exist before the first step; it is checked when they do");
    ts_has(&r, "1    op         keep  y    0      fc2/lnear (pending: checked when the first step's ops exist)");
    ts_has(&r, "warning: Breakpoint 1 (fc2/lnear) matched none of the 18 ops of step 0; the closest op names: "
               "fc2/linear, fc1/linear, fc3/linear");
    ck_assert_int_eq(ts_count(&r, "warning:"), 1); /* fc9* was deleted; fc3/linear matched */
    ts_has(&r, "stopped: step=0 phase=forward op=fc3/linear");
    ts_has(&r, "3    op         keep  y    2      fc3/linear\n"); /* pending no more */
    ts_free(&r);
}
END_TEST

START_TEST(test_has_nan_compared_refused)
{
    ts_session r = ts_tdbg("--batch", "break fc* if has_nan > 1;break fc* if in0.has_inf == 0;info breakpoints",
                           "mlp", ARGS);
    ts_has(&r, "error: condition: column 9: has_nan stands alone: it holds when a tensor has a NaN "
               "('not has_nan' when none has), so it takes no '>'");
    ts_has(&r, "error: condition: column 13: has_inf stands alone: it holds when a tensor has an Inf "
               "('not has_inf' when none has), so it takes no '=='");
    ts_has(&r, "No breakpoints.");
    ts_free(&r);
}
END_TEST

/* Stopped before fc3 ran: "not run yet", not "no such op". */
START_TEST(test_not_run_yet)
{
    ts_session r = ts_tdbg("--batch", "break fc2/linear;run;p fc3/linear:out0;continue;p fc3/linear:out0;"
                                      "p fc3/lnear:out0", "mlp", ARGS);
    ts_has(&r, "error: print: no op 'fc3/linear' has run yet in step 0, the first (ops are known once they ran; "
               "did you mean fc1/linear?)");
    ts_has(&r, "error: print: fc3/linear has not run yet in step 1");
    ts_has(&r, "error: print: no op 'fc3/lnear' in this step (did you mean fc3/linear?)");
    ts_free(&r);
}
END_TEST

START_TEST(test_trend_name_checked)
{
    ts_session r = ts_tdbg("--batch", "trend fc9/linear:out0;trend fc1/linear:out0;break step 1;run", "mlp", ARGS);
    ts_has(&r, "warning: trend fc9/linear:out0 matched none of the 18 ops of step 0; the closest op names: "
               "fc1/linear, fc2/linear, fc3/linear");
    ck_assert_int_eq(ts_count(&r, "warning:"), 1);
    ts_free(&r);
}
END_TEST

/* ---- --inject ---------------------------------------------------------------- */

START_TEST(test_inject_index_out_of_range)
{
    ts_session r = ts_sh(MLP "--inject nan@op=fc2/linear,step=1,index=5000 2>&1");
    ck_assert_int_eq(r.status, 2);
    ts_has(&r, "error: --inject 'nan@op=fc2/linear,step=1,index=5000': index 5000 is out of range for "
               "fc2/linear:out0 (output of fc2/linear at step 1), which has 1024 elements (index 0..1023)");
    ck_assert_ptr_null(strstr(r.out, "step=1 loss")); /* it stopped there */
    ts_free(&r);
    r = ts_sh(MLP "--inject nan@op=fc2/linear,step=1,index=1023 2>&1");
    ck_assert_int_eq(r.status, 0);
    ts_has(&r, "step=1 loss=nan");
    ts_free(&r);
}
END_TEST

START_TEST(test_inject_unmatched_warns)
{
    ts_session r = ts_sh(MLP "--inject nan@op=nosuch,step=1 --inject zero@op=fc1*,step=9 2>&1");
    ck_assert_int_eq(r.status, 0);
    ts_has(&r, "warning: --inject 'nan@op=nosuch,step=1' matched none of the 18 ops of step 0; the closest op names: "
               "fc1/relu, fc2/relu, fc1/linear");
    ck_assert_int_eq(ts_count(&r, "warning:"), 1);
    ts_free(&r);
}
END_TEST

Suite *suite_names(void)
{
    Suite *s = suite_create("names");
    TCase *tc = tcase_create("names");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_type_known_at_once);
    tcase_add_test(tc, test_first_step_check);
    tcase_add_test(tc, test_one_edit_distance);
    tcase_add_test(tc, test_break_type_refused);
    tcase_add_test(tc, test_break_pending);
    tcase_add_test(tc, test_has_nan_compared_refused);
    tcase_add_test(tc, test_not_run_yet);
    tcase_add_test(tc, test_trend_name_checked);
    tcase_add_test(tc, test_inject_index_out_of_range);
    tcase_add_test(tc, test_inject_unmatched_warns);
    suite_add_tcase(s, tc);
    return s;
}
