/*
 * test_dbg_cmd.c — the command layer without a running program: lookup
 * (names, aliases, unambiguous prefixes, typos), and the breakpoint
 * commands' parsing of good and malformed input, read back from the
 * session's breakpoint table and from what the commands print. And the
 * session in this process: the stop as data (dbg_stop) that a front end
 * is shown, beside the `stopped:` line printed from it; the front-end
 * registry.
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

/* ---- the stop as data, and front ends ---------------------------------------------- */

static dbg_stop shown;        /* what the test front end was shown, copied */
static char shown_cond[128];
static int n_shown, n_read;
static bool shown_live;       /* the pointers were live and agreed with the names */
static int hook = -1;
static char out[16384];
static FILE *out_f;

static void fe_show(const dbg_stop *s)
{
    n_shown++;
    shown = *s;
    shown.cond = NULL; /* the stop's own; its text is kept below */
    snprintf(shown_cond, sizeof shown_cond, "%s", s->cond ? dbg_cond_text(s->cond) : "");
    shown_live = s == dbg_last_stop() && s->active && s->rec && strcmp(s->rec->name, s->op) == 0 &&
                 (!s->tensor[0] || (s->t && strcmp(s->t->name, s->tensor) == 0));
}

static char *fe_read(const char *prompt)
{
    (void)prompt;
    n_read++;
    return strdup("continue");
}

static const dbg_frontend fe_test = { .name = "test-stop", .read_line = fe_read, .show_stop = fe_show };

static void stop_setup(void)
{
    setup();
    dbg.ops = calloc(DBG_MAX_OPS, sizeof *dbg.ops);
    dbg.last_ops = calloc(DBG_MAX_OPS, sizeof *dbg.last_ops);
    dbg.trends = calloc(DBG_MAX_TRENDS, sizeof *dbg.trends);
    ck_assert(dbg.ops && dbg.last_ops && dbg.trends);
    dbg.interactive = true;
    dbg.started = true;
    dbg_frontend_active = &fe_test;
    hook = te_hook_add(&(te_hooks){ .step_begin = dbg_on_step_begin, .step_end = dbg_on_step_end,
                                    .phase_begin = dbg_on_phase, .op_end = dbg_on_op_end },
                       NULL);
    ck_assert(hook >= 0);
    memset(out, 0, sizeof out);
    out_f = fmemopen(out, sizeof out, "w");
    ck_assert(out_f != NULL);
    dbg_out_stream = out_f;
    n_shown = n_read = 0;
}

static void stop_teardown(void)
{
    te_hook_remove(hook);
    dbg_out_stream = NULL;
    fclose(out_f);
    dbg_frontend_active = NULL;
    free(dbg.ops);
    free(dbg.last_ops);
    free(dbg.trends);
    teardown();
}

/* One step: sqrt over x [2,4] under the scope "a b=c" (a name no
 * "key=value" parser survives); returns the line of the sqrt call. */
static int sqrt_step(const float *x8)
{
    te_step_begin();
    te_tensor *x = te_tensor_from(TE_F32, te_shape(2, 4), x8);
    ck_assert(x != NULL);
    snprintf(x->name, sizeof x->name, "data:x");
    te_scope_push("a b=c");
    int line = __LINE__ + 1;
    te_tensor *y = te_sqrt(x);
    te_scope_pop();
    ck_assert(y != NULL);
    te_step_end();
    fflush(out_f);
    return line;
}

START_TEST(test_stop_as_data)
{
    const dbg_stop *before = dbg_last_stop();
    unsigned seq0 = before ? before->seq : 0;
    ck_assert(!dbg_execute("break nan"));
    int line = sqrt_step((const float[]){ 1, 4, 9, 16, 25, -1, 49, 64 }); /* sqrt(-1) at [1,1] */
    ck_assert_int_eq(n_shown, 1);
    ck_assert_int_eq(n_read, 1); /* the command loop asked the front end, which said continue */
    ck_assert_msg(shown_live, "the stop's pointers were not live while stopped");
    ck_assert_uint_eq(shown.seq, seq0 + 1);
    ck_assert(shown.active);
    ck_assert_int_eq(shown.step, 0);
    ck_assert_int_eq(shown.phase, TE_PHASE_FORWARD);
    ck_assert_str_eq(shown.op, "a b=c/sqrt");
    ck_assert_str_eq(shown.type, "Sqrt");
    ck_assert_int_eq(shown.loc.line, line);
    ck_assert_msg(shown.loc.file && strstr(shown.loc.file, "test_dbg_cmd.c"), "loc.file %s", shown.loc.file);
    ck_assert_str_eq(shown.reason, "nan");
    ck_assert_int_eq(shown.break_id, 1);
    ck_assert_str_eq(shown.break_what, "nan");
    ck_assert_str_eq(shown_cond, "");
    ck_assert_str_eq(shown.tensor, "a b=c/sqrt:out0");
    ck_assert_int_eq(shown.index, 5);
    ck_assert_str_eq(shown.index_text, "[1,1]");
    ck_assert_str_eq(shown.func, "has_nan");
    ck_assert_int_eq(shown.origin.kind, DBG_ORIGIN_CREATED);
    /* the line scripts read, printed from the same struct */
    const char *want = "\nstopped: step=0 phase=forward op=a b=c/sqrt type=Sqrt reason=nan tensor=a b=c/sqrt:out0 "
                       "index=[1,1] origin=created\n";
    ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want + 1, out);
    /* training went on: the stop stays, its pointers into the step do not */
    const dbg_stop *after = dbg_last_stop();
    ck_assert(after != NULL && after->seq == shown.seq);
    ck_assert(!after->active && after->t == NULL && after->rec == NULL);
    ck_assert_str_eq(after->op, "a b=c/sqrt");
}
END_TEST

START_TEST(test_stop_condition_outlives_tbreak)
{
    ck_assert(!dbg_execute("tbreak a?b=c/sqrt if in0.abs_max > 50"));
    sqrt_step((const float[]){ 1, 4, 9, 16, 25, 36, 49, 64 });
    ck_assert_int_eq(n_shown, 1);
    ck_assert_msg(shown_live, "the stop's pointers were not live while stopped");
    ck_assert_str_eq(shown.reason, "condition");
    ck_assert_str_eq(shown.break_what, "a?b=c/sqrt");
    ck_assert_str_eq(shown.tensor, "data:x");
    ck_assert_str_eq(shown.func, "abs_max");
    ck_assert_msg(shown.value == 64, "value %g", shown.value);
    ck_assert_int_eq(shown.index, -1);
    ck_assert_str_eq(shown.index_text, "");
    ck_assert_int_eq(shown.origin.kind, DBG_ORIGIN_NONE);
    ck_assert_str_eq(shown_cond, "in0.abs_max > 50");
    ck_assert_int_eq(dbg.n_breaks, 0); /* the tbreak is gone... */
    const dbg_stop *s = dbg_last_stop();
    ck_assert(s && s->cond); /* ...its condition stays with the stop, whole */
    ck_assert_str_eq(dbg_cond_text(s->cond), "in0.abs_max > 50");
    dbg_pred p[2];
    ck_assert_int_eq(dbg_cond_preds(s->cond, p, 2), 1);
    ck_assert(p[0].scope == DBG_SCOPE_INPUTS && p[0].slot == 0 && p[0].func == DBG_FN_ABS_MAX && p[0].number == 50);
    const char *want = "stopped: step=0 phase=forward op=a b=c/sqrt type=Sqrt reason=condition tensor=data:x "
                       "index=- origin=-\n";
    ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want, out);
    ck_assert_msg(strstr(out, "Breakpoint 1 (a?b=c/sqrt if in0.abs_max > 50), step 0, forward, a b=c/sqrt (Sqrt) at "),
                  "no breakpoint header in:\n%s", out);
}
END_TEST

static char *fe_none(const char *prompt)
{
    (void)prompt;
    return NULL;
}

START_TEST(test_frontend_registry)
{
    ck_assert(dbg_frontend_find("cli") == &dbg_frontend_cli);
    ck_assert(dbg_frontend_find("batch") == &dbg_frontend_batch);
    ck_assert(dbg_frontend_find("nope") == NULL);
    static const dbg_frontend mine = { .name = "test-reg", .read_line = fe_none };
    static const dbg_frontend taken = { .name = "cli", .read_line = fe_none };
    static const dbg_frontend nameless = { .read_line = fe_none };
    ck_assert_int_eq(dbg_frontend_register(&mine), 0);
    ck_assert(dbg_frontend_find("test-reg") == &mine);
    ck_assert_int_eq(dbg_frontend_register(&taken), -1);
    ck_assert(dbg_frontend_find("cli") == &dbg_frontend_cli);
    ck_assert_int_eq(dbg_frontend_register(&nameless), -1);
    char names[256];
    dbg_frontend_names(names, sizeof names);
    ck_assert_msg(strncmp(names, "cli, batch, ", 12) == 0 && strstr(names, "test-reg") &&
                  strstr(names, " or "), "names: %s", names);
    /* the table has an end, said at registration */
    static dbg_frontend many[DBG_MAX_FRONTENDS];
    static char many_names[DBG_MAX_FRONTENDS][16];
    int ok = 0;
    for (int i = 0; i < DBG_MAX_FRONTENDS; i++) {
        snprintf(many_names[i], sizeof many_names[i], "fe%d", i);
        many[i] = (dbg_frontend){ .name = many_names[i], .read_line = fe_none };
        ok += dbg_frontend_register(&many[i]) == 0;
    }
    ck_assert_msg(ok > 0 && ok < DBG_MAX_FRONTENDS, "%d registered", ok);
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
    TCase *st = tcase_create("stop");
    tcase_add_checked_fixture(st, stop_setup, stop_teardown);
    tcase_add_test(st, test_stop_as_data);
    tcase_add_test(st, test_stop_condition_outlives_tbreak);
    tcase_add_test(st, test_frontend_registry);
    suite_add_tcase(s, st);
    return s;
}
