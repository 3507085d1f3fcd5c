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

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OUT_MAX (1 << 18)
#define WAIT_MS 60000 /* a sanitizer build on a busy 2-core machine: a guard against a hang */

static const char *const MLP = "--hidden 64,64 --batch 32 --threads 2 --log-every 1 --steps 3";
static const char *const ASAN_OFF =
    "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0:handle_abort=0:handle_sigfpe=0:"
    "handle_sigbus=0:handle_sigill=0\"";

typedef struct {
    int status; /* as a shell sees it: 128+N for death by signal N */
    char out[OUT_MAX];
} run_result;

/* Runs the shell command fmt makes (stdout and stderr together) and the
 * status a shell reports for it. */
static run_result *run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static run_result *run(const char *fmt, ...)
{
    char cmd[4096], full[4608];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "export %s; { %s; } 2>&1; echo \"status=$?\"", ASAN_OFF, cmd);
    run_result *r = calloc(1, sizeof *r);
    ck_assert(r != NULL);
    FILE *p = popen(full, "r");
    ck_assert_msg(p != NULL, "cannot run %s", full);
    size_t n = fread(r->out, 1, sizeof r->out - 1, p);
    r->out[n] = '\0';
    pclose(p);
    const char *st = strstr(r->out, "status=");
    for (const char *next; st && (next = strstr(st + 1, "status=")) != NULL;)
        st = next;
    r->status = st ? atoi(st + 7) : -1;
    return r;
}

static void has(const run_result *r, const char *want)
{
    ck_assert_msg(strstr(r->out, want) != NULL, "no '%s' in:\n%s", want, r->out);
}

static void has_not(const run_result *r, const char *unwanted)
{
    ck_assert_msg(strstr(r->out, unwanted) == NULL, "'%s' should not be in:\n%s", unwanted, r->out);
}

static void status_is(const run_result *r, int want)
{
    ck_assert_msg(r->status == want, "exit status %d, want %d; the run:\n%s", r->status, want, r->out);
}

/* The report's lines every crash has. */
static void assert_report(const run_result *r, const char *signame, int signo)
{
    char want[256];
    status_is(r, 128 + signo);
    snprintf(want, sizeof want, "tdbg: the program received %s (", signame);
    has(r, want);
    has(r, "  backtrace of the crashing thread:\n    #0  0x");
    has_not(r, "addresses only");
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
        run_result *r = run("'%s/debugger/tdbg' --batch -ex run -- '%s/examples/mlp' %s --mode %s --inject %s@op=%s,step=2 "
                            "</dev/null", TDBG_BUILDDIR, TDBG_BUILDDIR, MLP, modes[m], kinds[k].kind, pl->op);
        char want[512];
        assert_report(r, kinds[k].signame, kinds[k].signo);
        if (kinds[k].signo == SIGSEGV)
            has(r, "(segmentation fault), fault address 0x0\n");
        if (kinds[k].signo == SIGFPE)
            has(r, "(arithmetic exception), at instruction 0x");
        snprintf(want, sizeof want, "  during step 2 (phase %s)\n", pl->phase);
        has(r, want);
        snprintf(want, sizeof want, "  last op started:  %s (%s) at %s", pl->op, pl->type, pl->loc);
        has(r, want);
        has(r, ", running: it had not finished\n");
        snprintf(want, sizeof want, "  last op finished: %s", pl->before);
        has(r, want);
        /* the backtrace: where the signal came from, the engine on the way, the program */
        has(r, kinds[k].frame);
        has(r, " te_inject_crash");
        has(r, p == 2 ? " te_optim_step at engine/optim.c:" : m == 1 ? " tg_execute at engine/graph/exec.c:"
                                                                      : " te_node_starting at engine/tape.c:");
        has(r, " main at examples/mlp.c:");
        snprintf(want, sizeof want,
                 "\nstopped: step=2 phase=%s op=%s type=%s reason=signal tensor=- index=- origin=- signal=%s\n",
                 pl->phase, pl->op, pl->type, kinds[k].signame);
        has(r, want);
        /* the steps before ran, the one after did not */
        has(r, "step=1 loss=");
        has_not(r, "step=2 loss=");
        has_not(r, "tdbg: the program finished");
        free(r);
    }
}
END_TEST

/* ---- the program's own code -------------------------------------------------------------- */

START_TEST(test_null_between_steps)
{
    run_result *r = run("'%s/debugger/tdbg' --batch -ex run -- '%s/tests/crashy' null </dev/null", TDBG_BUILDDIR,
                        TDBG_BUILDDIR);
    assert_report(r, "SIGSEGV", SIGSEGV);
    has(r, "step=2 y0=2\n");
    has(r, "(segmentation fault), fault address 0x0\n  between steps, after step 2\n");
    has(r, "  last op started:  scale/scale (Scale) at tests/crashy.c:");
    has(r, "  last op finished: scale/scale (Scale) at tests/crashy.c:");
    has_not(r, "running: it had not finished");
    has(r, "#0  0x");
    has(r, " use_after_step at tests/crashy.c:");
    has(r, " main at tests/crashy.c:");
    has(r, "\nstopped: step=2 phase=forward op=- type=- reason=signal tensor=- index=- origin=- signal=SIGSEGV\n");
    free(r);
}
END_TEST

START_TEST(test_exit_mid_step)
{
    run_result *r = run("'%s/debugger/tdbg' --batch -ex run -- '%s/tests/crashy' exit </dev/null", TDBG_BUILDDIR,
                        TDBG_BUILDDIR);
    status_is(r, 3);
    has(r, "step=0 y0=2\n");
    has(r, "tdbg: the program exited with status 3 during step 1 (phase forward), after op scale/scale "
           "(tests/crashy.c:");
    has(r, "\nstopped: step=1 phase=forward op=scale/scale type=Scale reason=exit tensor=- index=- origin=- "
           "status=3\n");
    has_not(r, "tdbg: the program finished");
    has_not(r, "received");
    free(r);
}
END_TEST

/* An exit() between steps is an ordinary end: no report. */
START_TEST(test_exit_between_steps_is_quiet)
{
    run_result *r = run("'%s/debugger/tdbg' --batch -ex run -- '%s/examples/mlp' %s </dev/null", TDBG_BUILDDIR,
                        TDBG_BUILDDIR, MLP);
    status_is(r, 0);
    has(r, "tdbg: the program finished");
    has_not(r, "reason=exit");
    free(r);
}
END_TEST

/* ---- the CLI, commands from stdin ---------------------------------------------------------- */

START_TEST(test_cli)
{
    run_result *r = run("printf 'break step 1\\nrun\\ncontinue\\n' | '%s/debugger/tdbg' --cli -- '%s/examples/mlp' %s "
                        "--inject abort@op=grad/fc2/linear,step=1", TDBG_BUILDDIR, TDBG_BUILDDIR, MLP);
    assert_report(r, "SIGABRT", SIGABRT);
    has(r, "stopped: step=1 phase=forward op=- type=- reason=step");
    has(r, "  during step 1 (phase backward)\n");
    has(r, "  last op started:  grad/fc2/linear (LinearGrad) at examples/mlp.c:");
    has(r, " abort");
    has(r, " main at examples/mlp.c:");
    has(r, "\nstopped: step=1 phase=backward op=grad/fc2/linear type=LinearGrad reason=signal tensor=- index=- "
           "origin=- signal=SIGABRT\n");
    free(r);
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
