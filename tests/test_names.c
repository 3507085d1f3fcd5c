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

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define OUT_MAX (1 << 20)

typedef struct {
    int status;
    char *out;
} run_out;

static run_out run_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static run_out run_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    run_out r = { .out = calloc(1, OUT_MAX) };
    ck_assert(r.out != NULL);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run %s", cmd);
    size_t n = fread(r.out, 1, OUT_MAX - 1, p);
    r.out[n] = '\0';
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

/* tdbg --batch -ex EX... on examples/mlp with a 1024-element fc2 output. */
#define TDBG(ex) "'" TDBG_BUILDDIR "/debugger/tdbg' --batch " ex " -- '" TDBG_BUILDDIR "/examples/mlp' " \
                 "--hidden 64,64 --batch 16 --threads 2 --log-every 1 --steps 3 2>&1 </dev/null"
#define MLP "'" TDBG_BUILDDIR "/examples/mlp' --hidden 64,64 --batch 16 --threads 2 --log-every 1 --steps 3 "

static void has(const run_out *r, const char *want)
{
    ck_assert_msg(strstr(r->out, want) != NULL, "want: %s\ngot:\n%s", want, r->out);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

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
    ck_assert_int_eq(te_op_types(types, 256), 2 * 32 + 3); /* the 32 rows of TE_OP_LIST, their Grad, 3 updates */
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
    run_out r = run_sh(TDBG("-ex 'break type:Lnear' -ex 'info breakpoints'"));
    has(&r, "error: break: no op type 'Lnear'; the closest: Linear, Mean, Relu");
    has(&r, "No breakpoints.");
    free(r.out);
}
END_TEST

/* `break` before `run` is pending, as in gdb; a pending glob that matched
 * nothing by the end of step 0 gets one warning with the closest names. */
START_TEST(test_break_pending)
{
    run_out r = run_sh(TDBG("-ex 'break fc2/lnear' -ex 'info breakpoints' -ex 'tbreak fc9*' -ex 'break fc3/linear'"
                            " -ex 'delete 2' -ex run -ex continue -ex 'info breakpoints'"));
    has(&r, "Breakpoint 1 (fc2/lnear) pending: no ops exist before the first step; it is checked when they do");
    has(&r, "1    op         keep  y    0      fc2/lnear (pending: checked when the first step's ops exist)");
    has(&r, "warning: Breakpoint 1 (fc2/lnear) matched none of the 18 ops of step 0; the closest op names: "
            "fc2/linear, fc1/linear, fc3/linear");
    ck_assert_int_eq(count(r.out, "warning:"), 1); /* fc9* was deleted; fc3/linear matched */
    has(&r, "stopped: step=0 phase=forward op=fc3/linear");
    has(&r, "3    op         keep  y    2      fc3/linear\n"); /* pending no more */
    free(r.out);
}
END_TEST

START_TEST(test_has_nan_compared_refused)
{
    run_out r = run_sh(TDBG("-ex 'break fc* if has_nan > 1' -ex 'break fc* if in0.has_inf == 0' -ex 'info breakpoints'"));
    has(&r, "error: condition: column 9: has_nan stands alone: it holds when a tensor has a NaN "
            "('not has_nan' when none has), so it takes no '>'");
    has(&r, "error: condition: column 13: has_inf stands alone: it holds when a tensor has an Inf "
            "('not has_inf' when none has), so it takes no '=='");
    has(&r, "No breakpoints.");
    free(r.out);
}
END_TEST

/* Stopped before fc3 ran: "not run yet", not "no such op". */
START_TEST(test_not_run_yet)
{
    run_out r = run_sh(TDBG("-ex 'break fc2/linear' -ex run -ex 'p fc3/linear:out0' -ex continue"
                            " -ex 'p fc3/linear:out0' -ex 'p fc3/lnear:out0'"));
    has(&r, "error: print: no op 'fc3/linear' has run yet in step 0, the first (ops are known once they ran; "
            "did you mean fc1/linear?)");
    has(&r, "error: print: fc3/linear has not run yet in step 1");
    has(&r, "error: print: no op 'fc3/lnear' in this step (did you mean fc3/linear?)");
    free(r.out);
}
END_TEST

START_TEST(test_trend_name_checked)
{
    run_out r = run_sh(TDBG("-ex 'trend fc9/linear:out0' -ex 'trend fc1/linear:out0' -ex 'break step 1' -ex run"));
    has(&r, "warning: trend fc9/linear:out0 matched none of the 18 ops of step 0; the closest op names: "
            "fc1/linear, fc2/linear, fc3/linear");
    ck_assert_int_eq(count(r.out, "warning:"), 1);
    free(r.out);
}
END_TEST

/* ---- --inject ---------------------------------------------------------------- */

START_TEST(test_inject_index_out_of_range)
{
    run_out r = run_sh(MLP "--inject nan@op=fc2/linear,step=1,index=5000 2>&1");
    ck_assert_int_eq(r.status, 2);
    has(&r, "error: --inject 'nan@op=fc2/linear,step=1,index=5000': index 5000 is out of range for "
            "fc2/linear:out0 (output of fc2/linear at step 1), which has 1024 elements (index 0..1023)");
    ck_assert_ptr_null(strstr(r.out, "step=1 loss")); /* it stopped there */
    free(r.out);
    r = run_sh(MLP "--inject nan@op=fc2/linear,step=1,index=1023 2>&1");
    ck_assert_int_eq(r.status, 0);
    has(&r, "step=1 loss=nan");
    free(r.out);
}
END_TEST

START_TEST(test_inject_unmatched_warns)
{
    run_out r = run_sh(MLP "--inject nan@op=nosuch,step=1 --inject zero@op=fc1*,step=9 2>&1");
    ck_assert_int_eq(r.status, 0);
    has(&r, "warning: --inject 'nan@op=nosuch,step=1' matched none of the 18 ops of step 0; the closest op names: "
            "fc1/relu, fc2/relu, fc1/linear");
    ck_assert_int_eq(count(r.out, "warning:"), 1);
    free(r.out);
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
