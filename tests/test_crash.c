/*
 * test_crash.c — a crash is reported, not suffered: the example programs
 * crashed by `--inject segv|abort|fpe` in the forward pass, the backward
 * pass and the update, in eager and graph mode; a NULL dereference in the
 * program's own code between steps and an exit(3) in the middle of a step
 * (tests/crashy.c); in batch mode, the CLI and the TUI under tmux. Each
 * checks the exit status a shell sees (death by the signal: 128+N), the
 * report's signal, step, phase, last ops, backtrace and its `stopped:` line.
 *
 * A sanitizer build would catch the signals itself: the runs add
 * handle_segv=0 and its kin to ASAN_OPTIONS, so the debugger's handler
 * is the one that runs (as it is in a normal build).
 */
#include "suites.h"
#include "tsession.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 60000 /* a sanitizer build on a busy 2-core machine: a guard against a hang */

static const char *const MLP = "--hidden 64,64 --batch 32 --threads 2 --log-every 1 --steps 3";
static const char *const ASAN_OFF =
    "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0:handle_abort=0:handle_sigfpe=0:"
    "handle_sigbus=0:handle_sigill=0\"";

/* The shell command fmt makes, run by ts_sh with the sanitizer's handlers off. */
#define run(fmt, ...) ts_sh("export %s; " fmt, ASAN_OFF, __VA_ARGS__)

/* The report's lines every crash has. */
static void assert_report(const ts_session *r, const char *signame, int signo)
{
    char want[256];
    ts_status_is(r, 128 + signo);
    snprintf(want, sizeof want, "tdbg: the program received %s (", signame);
    ts_has(r, want);
    ts_has(r, "  backtrace of the crashing thread:\n    #0  0x");
    ts_lacks(r, "addresses only");
}

/* ---- --inject segv|abort|fpe: forward, backward, update; eager and graph --------------------- */

typedef struct {
    const char *op, *phase, *type, *before, *loc; /* the op, its phase and type, the op finished before it */
} place;

static const place places[] = {
    { "fc2/linear", "forward", "Linear", "fc1/relu (Relu) at examples/mlp.c:", "examples/mlp.c:" },
    { "grad/fc1/linear", "backward", "LinearGrad", "grad/fc1/relu (ReluGrad) at examples/mlp.c:", "examples/mlp.c:" },
    { "update/fc2.weight", "update", "Adam", "update/fc1.bias (Adam) at engine/optim.c:", "engine/optim.c:" },
};

static const struct {
    const char *kind, *signame, *frame; /* the frame the signal came from */
    int signo;
} kinds[] = {
    { "segv", "SIGSEGV", "crash_segv at engine/inject.c:", SIGSEGV },
    { "abort", "SIGABRT", "abort", SIGABRT },
    { "fpe", "SIGFPE", "crash_fpe at engine/inject.c:", SIGFPE },
};

START_TEST(test_inject_crashes)
{
    static const char *const modes[] = { "eager", "graph" };
    const int m = _i / 3, k = _i % 3;
    for (int p = 0; p < 3; p++) {
        const place *pl = &places[p];
        ts_session r = run("'%s/debugger/tdbg' --batch -ex run -- '%s/examples/mlp' %s --mode %s "
                           "--inject %s@op=%s,step=2 </dev/null", TDBG_BUILDDIR, TDBG_BUILDDIR, MLP, modes[m],
                           kinds[k].kind, pl->op);
        char want[512];
        assert_report(&r, kinds[k].signame, kinds[k].signo);
        if (kinds[k].signo == SIGSEGV)
            ts_has(&r, "(segmentation fault), fault address 0x0\n");
        if (kinds[k].signo == SIGFPE)
            ts_has(&r, "(arithmetic exception), at instruction 0x");
        snprintf(want, sizeof want, "  during step 2 (phase %s)\n", pl->phase);
        ts_has(&r, want);
        snprintf(want, sizeof want, "  last op started:  %s (%s) at %s", pl->op, pl->type, pl->loc);
        ts_has(&r, want);
        ts_has(&r, ", running: it had not finished\n");
        snprintf(want, sizeof want, "  last op finished: %s", pl->before);
        ts_has(&r, want);
        /* the backtrace: where the signal came from, the engine on the way, the program */
        ts_has(&r, kinds[k].frame);
        ts_has(&r, " te_inject_crash");
        ts_has(&r, p == 2 ? " te_optim_step at engine/optim.c:" : m == 1 ? " tg_execute at engine/graph/exec.c:"
                                                                          : " te_node_starting at engine/tape.c:");
        ts_has(&r, " main at examples/mlp.c:");
        snprintf(want, sizeof want,
                 "\nstopped: step=2 phase=%s op=%s type=%s reason=signal tensor=- index=- origin=- signal=%s\n",
                 pl->phase, pl->op, pl->type, kinds[k].signame);
        ts_has(&r, want);
        /* the steps before ran, the one after did not */
        ts_has(&r, "step=1 loss=");
        ts_lacks(&r, "step=2 loss=");
        ts_lacks(&r, "tdbg: the program finished");
        ts_free(&r);
    }
}
END_TEST

/* ---- the program's own code -------------------------------------------------------------- */

START_TEST(test_null_between_steps)
{
    ts_session r = run("'%s/debugger/tdbg' --batch -ex run -- '%s/tests/crashy' null </dev/null", TDBG_BUILDDIR,
                       TDBG_BUILDDIR);
    assert_report(&r, "SIGSEGV", SIGSEGV);
    ts_has(&r, "step=2 y0=2\n");
    ts_has(&r, "(segmentation fault), fault address 0x0\n  between steps, after step 2\n");
    ts_has(&r, "  last op started:  scale/scale (Scale) at tests/crashy.c:");
    ts_has(&r, "  last op finished: scale/scale (Scale) at tests/crashy.c:");
    ts_lacks(&r, "running: it had not finished");
    ts_has(&r, "#0  0x");
    ts_has(&r, " use_after_step at tests/crashy.c:");
    ts_has(&r, " main at tests/crashy.c:");
    ts_has(&r, "\nstopped: step=2 phase=forward op=- type=- reason=signal tensor=- index=- origin=- signal=SIGSEGV\n");
    ts_free(&r);
}
END_TEST

START_TEST(test_exit_mid_step)
{
    ts_session r = run("'%s/debugger/tdbg' --batch -ex run -- '%s/tests/crashy' exit </dev/null", TDBG_BUILDDIR,
                       TDBG_BUILDDIR);
    ts_status_is(&r, 3);
    ts_has(&r, "step=0 y0=2\n");
    ts_has(&r, "tdbg: the program exited with status 3 during step 1 (phase forward), after op scale/scale "
               "(tests/crashy.c:");
    ts_has(&r, "\nstopped: step=1 phase=forward op=scale/scale type=Scale reason=exit tensor=- index=- origin=- "
               "status=3\n");
    ts_lacks(&r, "tdbg: the program finished");
    ts_lacks(&r, "received");
    ts_free(&r);
}
END_TEST

/* An exit() between steps is an ordinary end: no report. */
START_TEST(test_exit_between_steps_is_quiet)
{
    ts_session r = run("'%s/debugger/tdbg' --batch -ex run -- '%s/examples/mlp' %s </dev/null", TDBG_BUILDDIR,
                       TDBG_BUILDDIR, MLP);
    ts_status_is(&r, 0);
    ts_has(&r, "tdbg: the program finished");
    ts_lacks(&r, "reason=exit");
    ts_free(&r);
}
END_TEST

/* ---- the CLI, commands from stdin ---------------------------------------------------------- */

START_TEST(test_cli)
{
    ts_session r = run("printf 'break step 1\\nrun\\ncontinue\\n' | '%s/debugger/tdbg' --cli -- '%s/examples/mlp' %s "
                       "--inject abort@op=grad/fc2/linear,step=1", TDBG_BUILDDIR, TDBG_BUILDDIR, MLP);
    assert_report(&r, "SIGABRT", SIGABRT);
    ts_has(&r, "stopped: step=1 phase=forward op=- type=- reason=step");
    ts_has(&r, "  during step 1 (phase backward)\n");
    ts_has(&r, "  last op started:  grad/fc2/linear (LinearGrad) at examples/mlp.c:");
    ts_has(&r, " abort");
    ts_has(&r, " main at examples/mlp.c:");
    ts_has(&r, "\nstopped: step=1 phase=backward op=grad/fc2/linear type=LinearGrad reason=signal tensor=- index=- "
               "origin=- signal=SIGABRT\n");
    ts_free(&r);
}
END_TEST

/* ---- the TUI under tmux: the terminal back first, then the report ---------------------------- */

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

START_TEST(test_tui)
{
    if (system("command -v tmux >/dev/null 2>&1") != 0) {
        fprintf(stderr, "crash: tmux not found, the TUI case is skipped\n");
        return;
    }
    char sock[64], dir[] = "/tmp/tdbg-crash-XXXXXX", script[128], cmd[1024];
    ck_assert(mkdtemp(dir) != NULL);
    snprintf(sock, sizeof sock, "tdbg-crash-%d", (int)getpid());
    snprintf(script, sizeof script, "%s/run.sh", dir);
    FILE *f = fopen(script, "w");
    ck_assert(f != NULL);
    fprintf(f, "cd '%s'\nexport HOME='%s' LANG=C.UTF-8 %s\n"
               "'%s/debugger/tdbg' --tui -ex run -- '%s/examples/mlp' %s --inject fpe@op=fc1/relu,step=2\n"
               "echo \"tdbg-exit=$?\"\n"
               "stty -a | tr ' ;' '\\n\\n' | grep -E '^-?(icanon|echo)$' | tr '\\n' ' '; echo stty-done\n"
               "exec sleep 600\n",
            dir, dir, ASAN_OFF, TDBG_BUILDDIR, TDBG_BUILDDIR, MLP);
    fclose(f);
    snprintf(cmd, sizeof cmd, "tmux -L %s -f /dev/null new-session -d -s t -x 160 -y 60 'sh %s'", sock, script);
    ck_assert_msg(system(cmd) == 0, "cannot start tmux");
    static char screen[65536];
    long until = now_ms() + WAIT_MS;
    for (;;) {
        snprintf(cmd, sizeof cmd, "tmux -L %s capture-pane -p -t t 2>/dev/null", sock);
        FILE *p = popen(cmd, "r");
        size_t n = p ? fread(screen, 1, sizeof screen - 1, p) : 0;
        screen[n] = '\0';
        if (p)
            pclose(p);
        if (strstr(screen, "stty-done") || now_ms() > until)
            break;
        usleep(50 * 1000);
    }
    snprintf(cmd, sizeof cmd, "tmux -L %s kill-server >/dev/null 2>&1; rm -rf '%s'", sock, dir);
    if (system(cmd) != 0)
        fprintf(stderr, "crash: cannot stop the tmux server %s\n", sock);
    static const char *const want[] = {
        "the terminal is restored",
        "tdbg: the program received SIGFPE (arithmetic exception), at instruction 0x",
        "  during step 2 (phase forward)",
        "  last op started:  fc1/relu (Relu) at examples/mlp.c:",
        " crash_fpe at engine/inject.c:",
        " main at examples/mlp.c:",
        "stopped: step=2 phase=forward op=fc1/relu type=Relu reason=signal tensor=- index=- origin=- signal=SIGFPE",
        "tdbg-exit=136",
        "icanon echo",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(screen, want[i]) != NULL, "no '%s' on the screen:\n%s", want[i], screen);
    /* the terminal came back first: the report is below the notice of the restore */
    ck_assert_msg(strstr(screen, "the terminal is restored") < strstr(screen, "tdbg: the program received"),
                  "the report came before the terminal was restored:\n%s", screen);
}
END_TEST

Suite *suite_crash(void)
{
    Suite *s = suite_create("crash");
    TCase *tc = tcase_create("inject");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_inject_crashes, 0, 6);
    suite_add_tcase(s, tc);
    tc = tcase_create("program");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_null_between_steps);
    tcase_add_test(tc, test_exit_mid_step);
    tcase_add_test(tc, test_exit_between_steps_is_quiet);
    tcase_add_test(tc, test_cli);
    tcase_add_test(tc, test_tui);
    suite_add_tcase(s, tc);
    return s;
}
