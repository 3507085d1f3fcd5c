/*
 * test_dbg_cmd.c — the command layer without a running program: lookup
 * (names, aliases, unambiguous prefixes, typos), and the breakpoint
 * commands' parsing of good and malformed input, read back from the
 * session's breakpoint table and from what the commands print.
 */
#include "cmd.h"
#include "session.h"
#include "suites.h"
#include "testutil.h"

#include <readline/readline.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs one command line with the session's output captured. */
static char captured[8192];

static bool run(const char *line)
{
    fflush(stdout);
    FILE *f = fmemopen(captured, sizeof captured, "w");
    ck_assert(f != NULL);
    FILE *saved = stdout;
    stdout = f;
    bool resume = dbg_execute(line);
    fflush(f);
    stdout = saved;
    fclose(f);
    return resume;
}

static void said(const char *want)
{
    ck_assert_msg(strstr(captured, want) != NULL, "no '%s' in:\n%s", want, captured);
}

static void setup(void)
{
    tu_setup();
    for (int i = 0; i < dbg.n_breaks; i++)
        dbg_cond_free(dbg.breaks[i].cond);
    memset(&dbg, 0, sizeof dbg);
    dbg.next_id = 1;
    dbg.step = -1;
}

static void teardown(void)
{
    for (int i = 0; i < dbg.n_breaks; i++)
        dbg_cond_free(dbg.breaks[i].cond);
    dbg.n_breaks = 0;
    tu_teardown();
}

START_TEST(test_lookup)
{
    ck_assert_str_eq(dbg_cmd_lookup("break")->name, "break");
    ck_assert_str_eq(dbg_cmd_lookup("b")->name, "break");      /* alias */
    ck_assert_str_eq(dbg_cmd_lookup("c")->name, "continue");   /* alias beats prefix */
    ck_assert_str_eq(dbg_cmd_lookup("tb")->name, "tbreak");    /* unique prefix */
    ck_assert_str_eq(dbg_cmd_lookup("dis")->name, "disable");
    ck_assert_str_eq(dbg_cmd_lookup("ign")->name, "ignore");
    FILE *saved = stdout, *f = fmemopen(captured, sizeof captured, "w");
    stdout = f;
    const dbg_cmd *amb = dbg_cmd_lookup("con");
    const dbg_cmd *typo = dbg_cmd_lookup("contniue");
    const dbg_cmd *none = dbg_cmd_lookup("xyzzy");
    fflush(f);
    stdout = saved;
    fclose(f);
    ck_assert(amb == NULL && typo == NULL && none == NULL);
    said("error: 'con' is ambiguous: continue, condition");
    said("error: unknown command 'contniue' (did you mean continue?)");
    said("error: unknown command 'xyzzy'; 'help' lists them");
}
END_TEST

START_TEST(test_break_parsing)
{
    ck_assert(!run("break nan"));
    ck_assert(!run("b   fc*/linear   if  abs_max > 1e4 and phase == forward"));
    ck_assert(!run("tbreak step 12"));
    ck_assert(!run("break type:MatMul if inputs.has_inf"));
    ck_assert(!run("break diff/if_gate"));  /* "if" inside a name is not the keyword */
    ck_assert_int_eq(dbg.n_breaks, 5);
    ck_assert_int_eq(dbg.breaks[0].kind, BK_NAN);
    ck_assert_int_eq(dbg.breaks[1].kind, BK_OP);
    ck_assert_str_eq(dbg.breaks[1].what, "fc*/linear");
    ck_assert_str_eq(dbg_cond_text(dbg.breaks[1].cond), "outputs.abs_max > 10000 and phase == forward");
    ck_assert_int_eq(dbg.breaks[2].kind, BK_STEP);
    ck_assert(dbg.breaks[2].temporary && dbg.breaks[2].step == 12);
    ck_assert_int_eq(dbg.breaks[3].kind, BK_TYPE);
    ck_assert_str_eq(dbg.breaks[3].what, "MatMul");
    ck_assert_str_eq(dbg.breaks[4].what, "diff/if_gate");
    ck_assert(dbg.breaks[4].cond == NULL);
    ck_assert(dbg.observing); /* graph mode is asked to keep every op's tensors */

    run("info breakpoints");
    said("2    op         keep  y    0      fc*/linear if outputs.abs_max > 10000 and phase == forward");
    said("3    step       del   y    0      step 12");
}
END_TEST

START_TEST(test_break_errors)
{
    static const struct {
        const char *line, *want;
    } cases[] = {
        { "break", "error: break: say where: OP_GLOB, type:TYPE, step N, nan, inf or nonfinite" },
        { "break step x", "error: break step N: expected a whole number >= 0, got 'x'" },
        { "break step -3", "error: break step N: expected a whole number >= 0, got '-3'" },
        { "break fc1 if", "error: condition: nothing after 'if'" },
        { "break nan if abs_mx > 3", "did you mean abs_max?" },
        { "break nan if max >", "error: condition: column" },
        { "break step 3 if has_nan", "error: break step N takes no condition" },
        { "break fc1 linear", "error: break: 'fc1 linear' is not an op name" },
        { "condition 4 has_nan", "error: no breakpoint 4" },
        { "ignore x 2", "error: ignore N: expected a whole number >= 1, got 'x'" },
        { "delete x", "error: breakpoint number: expected a whole number >= 1, got 'x'" },
        { "until 5", "error: until: expected 'until step N', got '5'" },
        { "continue 0", "error: continue N: expected a whole number >= 1, got '0'" },
        { "info bogus", "error: info: expected breakpoints, ops, op NAME, step or dump" },
        { "print fc1/linear:out0[0", "error: print: column 18: " },
        { "set x", "error: set: expected TENSOR[INDEX] = VALUE" },
        { "set param:w[0] = abc", "error: set: 'abc' is not a number (nan and inf are)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(!run(cases[i].line), "'%s' resumed training", cases[i].line);
        ck_assert_msg(strstr(captured, cases[i].want), "'%s':\n  want %s\n  got  %s", cases[i].line,
                      cases[i].want, captured);
    }
    ck_assert_int_eq(dbg.n_breaks, 0); /* nothing half-made */
}
END_TEST

START_TEST(test_manage_breaks)
{
    run("break nan");
    run("break fc1/linear");
    run("break step 3");
    run("disable 1 3");
    ck_assert(!dbg.breaks[0].enabled && dbg.breaks[1].enabled && !dbg.breaks[2].enabled);
    run("enable");
    ck_assert(dbg.breaks[0].enabled && dbg.breaks[2].enabled);
    run("ignore 2 5");
    said("Will ignore the next 5 hits of breakpoint 2.");
    ck_assert_int_eq(dbg.breaks[1].ignore, 5);
    run("condition 2 grads.l2norm > 10");
    ck_assert_str_eq(dbg_cond_text(dbg.breaks[1].cond), "grads.l2norm > 10");
    run("condition 2");
    ck_assert(dbg.breaks[1].cond == NULL);
    said("Breakpoint 2 now unconditional.");
    run("delete 2");
    ck_assert_int_eq(dbg.n_breaks, 2);
    ck_assert_int_eq(dbg.breaks[1].id, 3);
    run("delete");
    ck_assert_int_eq(dbg.n_breaks, 0);
    ck_assert(!dbg.observing);
    run("break nan");
    ck_assert_int_eq(dbg.breaks[0].id, 4); /* numbers are never reused */
}
END_TEST

START_TEST(test_running_commands)
{
    ck_assert(run("run"));
    ck_assert_int_eq(dbg.mode, RUN_GO);
    ck_assert(!run("run"));
    said("error: training is already running");
    ck_assert(run("s"));
    ck_assert_int_eq(dbg.mode, RUN_STEP);
    ck_assert(run("next"));
    ck_assert_int_eq(dbg.mode, RUN_NEXT);
    ck_assert(run("until step 9"));
    ck_assert(dbg.mode == RUN_UNTIL && dbg.until_step == 9);
    ck_assert(!run("finish")); /* no step is running */
    said("error: finish: no step is running");
    ck_assert(!run("   # a comment"));
    ck_assert(!run(""));
    ck_assert(!run("help b"));
    said("usage: break WHAT [if COND] (alias b)");
    ck_assert(!run("help"));
    said("looking around:");
    said("until step N");
}
END_TEST

/* Tab completion of text after "break " as the CLI and the TUI ask for
 * it: the matches (readline's list without its common-prefix head). */
static int complete(const char *text, char **got, int max)
{
    char line[64];
    snprintf(line, sizeof line, "break %s", text);
    char *saved = rl_line_buffer;
    rl_line_buffer = line;
    char **m = dbg_complete(text, 6, (int)strlen(line));
    rl_line_buffer = saved;
    int n = 0;
    for (int i = m && m[1] ? 1 : 0; m && m[i]; i++)
        if (n < max)
            got[n++] = m[i];
        else
            free(m[i]);
    if (m && m[1])
        free(m[0]);
    free(m);
    return n;
}

/* Stopped two ops into a step: this step's ops and the rest of the last
 * step's (the backward and update ops still to come) complete, each once. */
START_TEST(test_complete_op_names)
{
    static dbg_op now[2], last[4];
    static const char *const names[4] = { "fc1/linear", "fc1/relu", "grad/fc1/linear", "update/fc1.weight" };
    for (int i = 0; i < 4; i++) {
        snprintf(last[i].name, sizeof last[i].name, "%s", names[i]);
        snprintf(last[i].out_name[0], sizeof last[i].out_name[0], "%s:out0", names[i]);
        last[i].n_out = 1;
        if (i < 2)
            now[i] = last[i];
    }
    dbg.ops = now;
    dbg.n_ops = 2;
    dbg.last_ops = last;
    dbg.n_last_ops = 4;
    char *got[8];
    int n = complete("upd", got, 8);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(got[0], "update/fc1.weight");
    ck_assert_str_eq(got[1], "update/fc1.weight:out0");
    for (int i = 0; i < n; i++)
        free(got[i]);
    n = complete("fc1/l", got, 8); /* in both steps' lists, offered once */
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(got[0], "fc1/linear");
    ck_assert_str_eq(got[1], "fc1/linear:out0");
    for (int i = 0; i < n; i++)
        free(got[i]);
    dbg.ops = dbg.last_ops = NULL;
    dbg.n_ops = dbg.n_last_ops = 0;
}
END_TEST

Suite *suite_dbg_cmd(void)
{
    Suite *s = suite_create("dbg_cmd");
    TCase *tc = tcase_create("commands");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_lookup);
    tcase_add_test(tc, test_break_parsing);
    tcase_add_test(tc, test_break_errors);
    tcase_add_test(tc, test_manage_breaks);
    tcase_add_test(tc, test_running_commands);
    tcase_add_test(tc, test_complete_op_names);
    suite_add_tcase(s, tc);
    return s;
}
