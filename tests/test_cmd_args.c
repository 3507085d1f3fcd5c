/*
 * test_cmd_args.c — arguments mean something or are refused, and tdbg
 * tells the truth: every command refuses words its table entry does not
 * declare; `step N` and `next N` repeat, a breakpoint on the way first;
 * `info op` alone describes the op stopped at; quit's exit status in batch
 * and CLI; the launcher's notice and statuses for a program that never
 * loaded the debugger, and a death by signal passed on as 128+N; no bare
 * `-` line in a stop report; `trend` on a watched tensor shows what the
 * stop has.
 */
#include "cmd.h"
#include "session.h"
#include "suites.h"
#include "testutil.h"
#include "tsession.h"
#include "tui_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const MLP = "--hidden 64,64 --batch 32 --threads 2 --log-every 1";

/* ---- every table entry declares its words ---------------------------------------------- */

START_TEST(test_every_command_refuses_extra_words)
{
    memset(&dbg, 0, sizeof dbg);
    dbg.next_id = 1;
    dbg.step = -1;
    char why[256];
    if (!dbg_cmd_find("focus")) /* the TUI's table too */
        ck_assert_msg(tui_cmds_register(why, sizeof why), "%s", why);
    int n_groups, checked = 0, free_text = 0;
    const dbg_cmd_group *g = dbg_cmd_groups(&n_groups);
    for (int i = 0; i < n_groups; i++)
        for (const dbg_cmd *c = g[i].cmds; c->name; c++) {
            if (c->max_words == DBG_WORDS_ANY) {
                free_text++;
                continue;
            }
            /* one word more than it takes: refused, naming that word, nothing resumed */
            char line[256], want[512];
            int len = snprintf(line, sizeof line, "%s", c->name);
            for (int w = 0; w <= c->max_words; w++)
                len += snprintf(line + len, sizeof line - (size_t)len, " zz%d", w);
            snprintf(want, sizeof want, "error: %s: unexpected argument 'zz%d' (usage: %s)\n", c->name,
                     c->max_words, c->usage);
            ck_assert_msg(!ts_exec(line), "%s resumed", line);
            ck_assert_msg(strcmp(ts_captured, want) == 0, "%s:\n  want %s  got  %s", line, want, ts_captured);
            ck_assert(!dbg.started);
            checked++;
        }
    /* run continue step next finish until quit detach, ignore, info stats hist trend help, compare, record, data
     * rewind reverse-step reverse-next locate checkpoint, focus scroll jump keys refresh */
    ck_assert_int_eq(checked, 27);
    /* break tbreak delete disable enable condition, print set, dump, profile, replay, view search */
    ck_assert_int_eq(free_text, 13);
    ck_assert(!ts_exec("step 1 2"));
    ck_assert_str_eq(ts_captured, "error: step: unexpected argument '2' (usage: step [N])\n");
}
END_TEST

START_TEST(test_bad_arguments_run_nothing)
{
    /* Before `run`, each of these would have started training. */
    ts_session s = ts_tdbg("--batch", "run now;step abc;step -2;step 0;next 1 2;continue 1 2;quit 1 2;info ops x;"
                                      "info bogus;help break now;stats a b;info step", "mlp", "%s --steps 2", MLP);
    ts_has(&s, "error: run: unexpected argument 'now' (usage: run)\n");
    ts_has(&s, "error: step N: expected a whole number >= 1, got 'abc'\n");
    ts_has(&s, "error: step N: expected a whole number >= 1, got '-2'\n");
    ts_has(&s, "error: step N: expected a whole number >= 1, got '0'\n");
    ts_has(&s, "error: next: unexpected argument '2' (usage: next [N])\n");
    ts_has(&s, "error: continue: unexpected argument '2' (usage: continue [N])\n");
    ts_has(&s, "error: quit: unexpected argument '2' (usage: quit [N])\n");
    ts_has(&s, "error: info ops: unexpected argument 'x' (usage: info breakpoints|ops|op [NAME]|step|batch|dump|amp|profile|memory|watch|record)\n");
    ts_has(&s, "error: info: expected breakpoints, ops, op [NAME], step, batch, dump, amp, profile, memory, watch or record, got 'bogus'\n");
    ts_has(&s, "error: help: unexpected argument 'now' (usage: help [COMMAND])\n");
    ts_has(&s, "error: stats: unexpected argument 'b' (usage: stats TENSOR)\n");
    ts_has(&s, "step 0, forward phase, 0 ops run in it (training not started)\n");
    ck_assert_int_eq(s.status, 0); /* the script ran out before `run`: trained to the end, never stopped */
    ts_free(&s);
}
END_TEST

/* ---- step N, next N -------------------------------------------------------------------- */

START_TEST(test_step_and_next_n)
{
    ts_session s = ts_tdbg("--batch", "break step 1;run;step 3;next 2;step;break fc2/relu;step 100;step 5", "mlp",
                           "%s --steps 6", MLP);
    ts_stop_is(&s, 0, "stopped: step=1 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    /* the 3rd op of step 1: fc1/linear, fc1/relu, fc2/linear */
    ts_stop_is(&s, 1, "stopped: step=1 phase=forward op=fc2/linear type=Linear reason=step tensor=- index=- origin=-");
    /* the start of the 2nd next step */
    ts_stop_is(&s, 2, "stopped: step=3 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    ts_stop_is(&s, 3, "stopped: step=3 phase=forward op=fc1/linear type=Linear reason=step tensor=- index=- origin=-");
    /* a breakpoint on the way stops first */
    ts_stop_is(&s, 4, "stopped: step=3 phase=forward op=fc2/relu type=Relu reason=breakpoint tensor=- index=- "
                      "origin=-");
    /* fc3/linear, cross_entropy, grad/cross_entropy, grad/fc3/linear, grad/fc2/relu */
    ts_stop_is(&s, 5, "stopped: step=3 phase=backward op=grad/fc2/relu type=ReluGrad reason=step tensor=- index=- "
                      "origin=-");
    ck_assert_int_eq(ts_count(&s, "\nstopped: "), 6);
    ts_free(&s);

    /* next N past a breakpoint's step: the breakpoint stops first */
    s = ts_tdbg("--batch", "break step 1;break step 2;run;next 3", "mlp", "%s --steps 6", MLP);
    ts_stop_is(&s, 1, "stopped: step=2 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    ts_has(&s, "\nBreakpoint 2 (step 2), step 2, forward\n");
    ts_free(&s);
}
END_TEST

/* ---- info op -------------------------------------------------------------------------- */

START_TEST(test_info_op_here)
{
    ts_session s = ts_tdbg("--batch", "info op;break step 1;run;info op;break fc2/relu;continue;info op", "mlp",
                           "%s --steps 3", MLP);
    ts_has(&s, "(tdbg) info op\nerror: info op: training is not stopped at an op (it has not started); "
               "'info op NAME' describes one\n");
    ts_has(&s, "(tdbg) info op\nerror: info op: stopped between ops (step 1, forward phase), not at an op; "
               "'info op NAME' describes one, 'step' runs the next op\n");
    ts_has(&s, "(tdbg) info op\nfc2/relu (Relu), forward phase, execution index 3\n  created at examples/mlp.c:99\n"
               "  in0  fc2/linear:out0  from fc2/linear\n  out0 fc2/relu:out0  to no op so far\n");
    ts_free(&s);
}
END_TEST

/* ---- quit's status -------------------------------------------------------------------- */

START_TEST(test_quit_status)
{
    static const struct {
        const char *flags, *cmds;
        int status;
    } cases[] = {
        { "--batch", "break step 1;run;quit", 1 },   /* stopped once: 1 */
        { "--cli", "break step 1;run;quit", 1 },     /* the same rule in the CLI (it was 0) */
        { "--cli", "break step 1;run", 1 },          /* the end of input at a stop: as quit */
        { "--batch", "break step 1;run;quit 0", 0 }, /* quit N: N (batch made it 1) */
        { "--cli", "break step 1;run;quit 7", 7 },
        { "--batch", "quit", 0 },                    /* never stopped: 0 */
        { "--cli", "quit", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ts_session s = ts_tdbg(cases[i].flags, cases[i].cmds, "mlp", "%s --steps 3", MLP);
        ck_assert_msg(s.status == cases[i].status, "%s %s: status %d, want %d:\n%s", cases[i].flags, cases[i].cmds,
                      s.status, cases[i].status, s.out);
        ts_free(&s);
    }
    ts_session s = ts_tdbg("--batch", "quit 256;quit -1;run", "mlp", "%s --steps 1", MLP);
    ts_has(&s, "error: quit N: an exit status is 0 to 255, got '256'\n");
    ts_has(&s, "error: quit N: expected a whole number >= 0, got '-1'\n");
    ck_assert_int_eq(s.status, 0);
    ts_free(&s);
}
END_TEST

/* ---- the launcher --------------------------------------------------------------------- */

START_TEST(test_launcher_truth)
{
    char out[4096];
    /* never loaded the debugger: a notice and status 3, whatever it exited with */
    tu_shell(out, sizeof out, "'%s/debugger/tdbg' --batch -- /bin/true 2>&1; echo status=$?", TDBG_BUILDDIR);
    ck_assert_str_eq(out, "tdbg: /bin/true exited with status 0 without loading the debugger: is it linked with "
                          "the tdbg engine?\nstatus=3\n");
    tu_shell(out, sizeof out, "'%s/debugger/tdbg' --batch -- /bin/false 2>&1; echo status=$?", TDBG_BUILDDIR);
    ck_assert_str_eq(out, "tdbg: /bin/false exited with status 1 without loading the debugger: is it linked with "
                          "the tdbg engine?\nstatus=3\n");
    /* a death by signal: the notice, and the launcher dies of it too: 139 */
    tu_shell(out, sizeof out, "'%s/debugger/tdbg' --batch -- sh -c 'kill -SEGV $$' 2>&1; echo status=$?",
             TDBG_BUILDDIR);
    ck_assert_msg(strstr(out, "tdbg: sh died of signal 11 (Segmentation fault) without loading the debugger: is it "
                              "linked with the tdbg engine?\n") && strstr(out, "status=139\n"), "%s", out);
    /* a program that cannot run: 2, no notice */
    tu_shell(out, sizeof out, "'%s/debugger/tdbg' --batch -- /no/such/program 2>&1; echo status=$?", TDBG_BUILDDIR);
    ck_assert_str_eq(out, "tdbg: cannot run /no/such/program: No such file or directory\nstatus=2\n");
    /* connected: the program's own status, no notice */
    tu_shell(out, sizeof out, "'%s/debugger/tdbg' --batch -ex run -- '%s/examples/mlp' %s --steps 1 2>&1; "
             "echo status=$?", TDBG_BUILDDIR, TDBG_BUILDDIR, MLP);
    ck_assert_msg(strstr(out, "tdbg: the program finished\nstatus=0\n") && !strstr(out, "without loading"), "%s",
                  out);
    /* a program that ends before te_init (a bad flag) never loaded it either */
    tu_shell(out, sizeof out, "'%s/debugger/tdbg' --batch -ex run -- '%s/examples/mlp' --bogus-flag 2>&1 >/dev/null"
             " | grep tdbg:; echo status=$?", TDBG_BUILDDIR, TDBG_BUILDDIR);
    ck_assert_msg(strstr(out, "/examples/mlp exited with status 2 without loading the debugger: is it linked with "
                              "the tdbg engine?\n"), "%s", out);
    /* SIGTERM to the launcher reaches the program; both end by it: 143 */
    tu_shell(out, sizeof out, "'%s/debugger/tdbg' --batch -ex run -- '%s/examples/mlp' %s --steps 1000000 "
             ">/dev/null 2>&1 & pid=$!; sleep 2; kill -TERM $pid; wait $pid; echo status=$?", TDBG_BUILDDIR,
             TDBG_BUILDDIR, MLP);
    ck_assert_str_eq(out, "status=143\n");
}
END_TEST

/* ---- the stop report and trend ------------------------------------------------------- */

START_TEST(test_report_without_stray_lines)
{
    /* grad/fc1/linear's output 0 (the data's gradient) is not computed */
    ts_session s = ts_tdbg("--batch", "break grad/fc1/linear;run;info op", "mlp", "%s --steps 2", MLP);
    const char *from = strstr(s.out, "\nBreakpoint 1 (grad/fc1/linear)"), *to = from ? strstr(from, "\nstopped:") : NULL;
    ck_assert_msg(from && to, "%s", s.out);
    for (const char *p = from + 1; p < to; p += strcspn(p, "\n") + 1)
        ck_assert_msg(strspn(p, " ") + 1 != strcspn(p, "\n") || p[strspn(p, " ")] != '-', "a bare '-' line:\n%.*s",
                      (int)(to - from), from);
    ts_has(&s, "  outputs: grad:fc1.weight [64,784] f32  finite");
    ts_has(&s, "  out0 (none: not needed)\n  out1 grad:fc1.weight  to");
    ts_lacks(&s, "out0 -");
    ts_free(&s);
}
END_TEST

START_TEST(test_trend_shows_the_stop)
{
    ts_session s = ts_tdbg("--batch", "break fc2/relu;run;trend fc2/relu:out0;stats fc2/relu:out0;trend fc2/relu:out0;"
                                      "continue;trend fc2/relu", "mlp", "%s --steps 3", MLP);
    ts_lacks(&s, "No statistics");
    ck_assert_int_eq(ts_count(&s, "Recording fc2/relu:out0 every step from now on.\n"), 1);
    /* the first trend's row is this stop's tensor: its abs_max and l2norm are those `stats` prints */
    const char *row = strstr(s.out, "(tdbg) trend fc2/relu:out0\nRecording");
    const char *st = strstr(s.out, "(tdbg) stats fc2/relu:out0\n");
    ck_assert_msg(row && st, "%s", s.out);
    row = strstr(row, "\n0       ");
    double t_abs, t_l2, s_abs, s_l2;
    ck_assert_msg(row && sscanf(row, "\n0 %lf %lf", &t_abs, &t_l2) == 2, "no step 0 row:\n%s", s.out);
    const char *a = strstr(st, " abs_max "), *l = strstr(st, " l2norm ");
    ck_assert(a && l && sscanf(a, " abs_max %lf", &s_abs) == 1 && sscanf(l, " l2norm %lf", &s_l2) == 1);
    ck_assert_msg(s_abs > 0 && fabs(t_abs - s_abs) <= 1e-3 * s_abs && fabs(t_l2 - s_l2) <= 1e-3 * s_l2,
                  "trend %g %g, stats %g %g", t_abs, t_l2, s_abs, s_l2);
    /* at the next stop, by the op's name: both steps */
    const char *last = strstr(s.out, "(tdbg) trend fc2/relu\n");
    ck_assert_msg(last && strstr(last, "\n0       ") && strstr(last, "\n1       "), "%s", s.out);
    ts_free(&s);
}
END_TEST

START_TEST(test_unrun_script_named)
{
    /* the program ends without a stop: the script's later commands are named, not dropped in silence */
    ts_session s = ts_tdbg("--batch", "run;step;print fc1/linear:out0", "mlp", "%s --steps 1", MLP);
    ts_has(&s, "tdbg: the program finished\ntdbg: 2 commands of the script did not run (the program ended first): "
               "'step', 'print fc1/linear:out0'\n");
    ck_assert_int_eq(s.status, 0);
    ts_free(&s);
    s = ts_tdbg("--batch", "run", "mlp", "%s --steps 1", MLP); /* nothing left: nothing said */
    ts_lacks(&s, "did not run");
    ts_free(&s);
}
END_TEST

Suite *suite_cmd_args(void)
{
    Suite *s = suite_create("cmd_args");
    TCase *tc = tcase_create("commands");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_every_command_refuses_extra_words);
    tcase_add_test(tc, test_bad_arguments_run_nothing);
    tcase_add_test(tc, test_step_and_next_n);
    tcase_add_test(tc, test_info_op_here);
    tcase_add_test(tc, test_quit_status);
    tcase_add_test(tc, test_report_without_stray_lines);
    tcase_add_test(tc, test_trend_shows_the_stop);
    tcase_add_test(tc, test_unrun_script_named);
    suite_add_tcase(s, tc);
    tc = tcase_create("launcher");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_launcher_truth);
    suite_add_tcase(s, tc);
    return s;
}
