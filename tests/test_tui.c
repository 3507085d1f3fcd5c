/*
 * test_tui.c — the terminal UI, driven for real: `tdbg` runs in a tmux
 * pane (a private server, -L), keys go in with send-keys, and what the
 * screen shows comes back with capture-pane, polled until the expected
 * text appears (never a fixed sleep). Without tmux the tmux cases are
 * skipped, counted in the runner's closing summary (tdbg_skip). The layout, the output pane's line
 * handling and the list view the panes scroll with are checked directly too.
 *
 * TDBG_TUI_SHOTS=DIR keeps the screens the cases look at as DIR/NAME.txt
 * (the ones in docs/tui.md come from there).
 */
#include "suites.h"
#include "testutil.h"
#include "tsession.h"
#include "tui_internal.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 20000 /* a sanitizer build on a busy 2-core machine */
#define SCREEN_MAX 65536

static char sock[64], dir[256];
static bool have_tmux;

static const char *const CNN = "--channels 4,8,8 --batch 8 --threads 2 --log-every 1 --train-size 64";

/* Stops the private server and removes its socket (tmux leaves it). */
static void kill_server(void)
{
    if (!have_tmux || !sock[0])
        return;
    tu_shell(NULL, 0, "tmux -L %s kill-server >/dev/null 2>&1", sock);
    const char *tmpdir = getenv("TMUX_TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/tmux-%d/%s", tmpdir && tmpdir[0] ? tmpdir : "/tmp", (int)getuid(), sock);
    unlink(path);
}

/* The pane as text (escapes: with its colours and attributes). */
static char *capture(bool escapes)
{
    static char buf[SCREEN_MAX];
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -L %s capture-pane -p %s-t t 2>/dev/null", sock, escapes ? "-e " : "");
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(buf, 1, sizeof buf - 1, p) : 0;
    buf[n] = '\0';
    if (p)
        pclose(p);
    return buf;
}

/* Line y of the screen (0-based) into out. */
static const char *line_of(const char *screen, int y, char *out, size_t n)
{
    const char *p = screen;
    for (int i = 0; i < y && p; i++)
        if ((p = strchr(p, '\n')) != NULL)
            p++;
    size_t len = p ? strcspn(p, "\n") : 0;
    snprintf(out, n, "%.*s", (int)len, p ? p : "");
    return out;
}

static void shot(const char *name, const char *screen)
{
    const char *to = getenv("TDBG_TUI_SHOTS");
    char path[512];
    if (!to || !to[0])
        return;
    snprintf(path, sizeof path, "%s/%s.txt", to, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(screen, f);
        fclose(f);
    }
}

/* Fails the case with the screen after stopping the server. */
static void fail_with(const char *what, const char *screen)
{
    char copy[SCREEN_MAX];
    snprintf(copy, sizeof copy, "%s", screen);
    kill_server();
    ck_abort_msg("%s; the screen:\n%s", what, copy);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Polls the screen until line y (-1: any line) holds every one of the
 * NULL-terminated texts; returns the screen. */
static const char *wait_for(int y, ...)
{
    const char *want[8];
    int n = 0;
    va_list ap;
    va_start(ap, y);
    for (const char *s; n < 8 && (s = va_arg(ap, const char *)) != NULL;)
        want[n++] = s;
    va_end(ap);
    long until = now_ms() + WAIT_MS;
    char l[4096];
    for (;;) {
        const char *screen = capture(false);
        const char *where = y < 0 ? screen : line_of(screen, y, l, sizeof l);
        bool all = true;
        for (int i = 0; i < n && all; i++)
            all = strstr(where, want[i]) != NULL;
        if (all)
            return screen;
        if (now_ms() > until) {
            char what[512];
            snprintf(what, sizeof what, "waited %d ms for '%s'%s on %s %d", WAIT_MS, want[0], n > 1 ? " (and more)" : "",
                     y < 0 ? "the screen" : "line", y);
            fail_with(what, screen);
        }
        usleep(50 * 1000);
    }
}

/* Keys as tmux names them ("F9", "Escape", "C-c"), or text with "-l". */
static void keys(const char *k)
{
    if (tu_shell(NULL, 0, "tmux -L %s send-keys -t t %s", sock, k) != 0)
        fail_with("send-keys failed", capture(false));
}

static void type(const char *text)
{
    if (tu_shell(NULL, 0, "tmux -L %s send-keys -t t -l '%s'", sock, text) != 0)
        fail_with("send-keys -l failed", capture(false));
}

/* A w x h pane running `tdbg ARGS` from a script that then prints its
 * status and whether the terminal is back in canonical mode with echo;
 * the shell lines pre run before tdbg, post after those lines. */
static void start_sh(const char *env, int w, int h, const char *pre, const char *args, const char *post)
{
    static int n_started;
    kill_server();
    snprintf(sock, sizeof sock, "tdbg-test-%d-%d", (int)getpid(), n_started++); /* a server of its own */
    char script[512];
    snprintf(script, sizeof script, "%s/run.sh", dir);
    FILE *f = fopen(script, "w");
    ck_assert_msg(f != NULL, "cannot write %s", script);
    /* trap: Ctrl-C is for tdbg; the script goes on (an interactive shell would too) */
    fprintf(f, "cd '%s'\ntrap : INT\nexport HOME='%s' LANG=C.UTF-8 %s\n%s\n"
               "'%s/debugger/tdbg' %s\n"
               "echo \"tdbg-exit=$?\"\n"
               "stty -a | tr ' ;' '\\n\\n' | grep -E '^-?(icanon|echo)$' | tr '\\n' ' '; echo stty-done\n"
               "%s\nexec sleep 600\n",
            dir, dir, env, pre, TDBG_BUILDDIR, args, post);
    fclose(f);
    ck_assert_msg(tu_shell(NULL, 0, "tmux -L %s -f /dev/null new-session -d -s t -x %d -y %d 'sh %s'", sock, w, h,
                           script) == 0, "cannot start tmux");
}

static void start(const char *env, int w, int h, const char *args) { start_sh(env, w, h, "", args, ""); }

/* `tdbg attach $run --tui OPTS` in a w x h pane, to an MLP started with
 * TDBG_LISTEN=1 (RUN_ARGS) in the background, with $run its pid, once it
 * listens (XDG_RUNTIME_DIR of the test's own); then post. */
static void start_attached(const char *env, int w, int h, const char *run_args, const char *opts, const char *post)
{
    char pre[1024], args[512];
    snprintf(pre, sizeof pre, "export XDG_RUNTIME_DIR='%s/xdg' TDBG_PLUGIN='%s/debugger/.libs/libtdbg-debugger.so'\n"
             "mkdir -m 700 \"$XDG_RUNTIME_DIR\"\n"
             "TDBG_LISTEN=1 '%s/examples/mlp' --hidden 64,64 --batch 32 --threads 1 --log-every 50 %s "
             ">run.out 2>run.err &\nrun=$!\n"
             "i=0; while [ ! -S \"$XDG_RUNTIME_DIR/tdbg/$run.sock\" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
             dir, TDBG_BUILDDIR, TDBG_BUILDDIR, run_args);
    snprintf(args, sizeof args, "attach $run --tui %s", opts);
    start_sh(env, w, h, pre, args, post);
}

/* The program has ended: its status and a restored terminal. */
static void assert_restored(const char *status)
{
    const char *screen = wait_for(-1, "stty-done", NULL);
    if (!strstr(screen, status))
        fail_with(status, screen);
    if (!strstr(screen, "icanon echo") || strstr(screen, "-icanon") || strstr(screen, "-echo "))
        fail_with("the terminal is not back in canonical mode with echo", screen);
    if (strstr(screen, "1Help"))
        fail_with("the function bar is still on the screen", screen);
}

static void setup(void)
{
    have_tmux = system("command -v tmux >/dev/null 2>&1") == 0;
    sock[0] = '\0';
    snprintf(dir, sizeof dir, "/tmp/tdbg-tui-XXXXXX");
    ck_assert(mkdtemp(dir) != NULL);
}

static void teardown(void)
{
    kill_server();
    tu_shell(NULL, 0, "rm -rf '%s'", dir);
}

static bool skip(void)
{
    if (!have_tmux)
        tdbg_skip("tui", "tmux not found (apt-get install tmux)");
    return !have_tmux;
}

/* ---- the NaN session of the issue ---------------------------------------------------- */

START_TEST(test_nan_step_break_complete_scroll_resize_quit)
{
    if (skip())
        return;
    char args[512], l[4096];
    snprintf(args, sizeof args, "-- '%s/examples/cnn' %s --steps 4 --mode eager --inject nan@op=conv2/bn,step=1,index=7",
             TDBG_BUILDDIR, CNN);
    start("", 80, 24, args);
    shot("ready", wait_for(0, "READY", NULL));

    /* F9: break nan; F5: continue (runs training) */
    keys("F9");
    wait_for(-1, "Breakpoint 1: the first op creating a NaN", NULL);
    keys("F5");
    const char *screen = wait_for(0, "PAUSED", "step 1", "conv2/bn", NULL);
    if (!strstr(line_of(screen, 0, l, sizeof l), "NaN at conv2/bn:out0[0,0,0,7]"))
        fail_with("the status bar does not say why", screen);
    /* the op is the current one, marked as making a NaN */
    bool marked = false;
    for (int y = 2; y < 16 && !marked; y++)
        marked = strncmp(line_of(screen, y, l, sizeof l), ">!", 2) == 0 && strstr(l, " conv2/bn ");
    if (!marked)
        fail_with("conv2/bn is not marked '>!' in the ops pane", screen);
    /* the tensor pane is on the NaN: its cursor cell and the footer */
    if (!strstr(screen, "tensor conv2/bn:out0") || !strstr(screen, "[0,0,0,7] = nan"))
        fail_with("the tensor pane does not show the NaN element", screen);
    shot("nan-stop", screen);

    /* a click on the op above conv2/bn (below, when it is the pane's top
     * row): the ops pane has the focus, that op's output is on show; j
     * jumps back to the NaN */
    int y_bn = -1;
    for (int y = 2; y < 13 && y_bn < 0; y++)
        if (strstr(line_of(screen, y, l, sizeof l), " conv2/bn "))
            y_bn = y;
    int y_click = y_bn > 2 ? y_bn - 1 : y_bn + 1, exec = -1;
    char name[64] = "", want[96];
    if (y_bn < 0 || sscanf(line_of(screen, y_click, l, sizeof l) + 3, "%d %63s", &exec, name) != 2)
        fail_with("no op row to click next to conv2/bn", screen);
    /* X10: press, column 9 */
    tu_shell(NULL, 0, "tmux -L %s send-keys -t t -H 1b 5b 4d 20 2a %02x", sock, 33 + y_click);
    snprintf(want, sizeof want, "%s:out0", name);
    wait_for(-1, want, NULL);
    wait_for(1, ">ops", NULL);
    keys("j");
    wait_for(-1, "tensor conv2/bn:out0", "[0,0,0,7] = nan", NULL);

    /* s steps one op */
    keys("s");
    screen = wait_for(0, "PAUSED", "conv2/relu", "| step", NULL);

    /* b toggles a breakpoint on the selected op (the one stepped to) */
    keys("b");
    screen = wait_for(-1, "Breakpoint 2: ops matching 'conv2/relu'", NULL);
    screen = wait_for(-1, "2   conv2/relu", "hits 0", NULL);
    bool dot = false;
    for (int y = 2; y < 16 && !dot; y++)
        dot = strstr(line_of(screen, y, l, sizeof l), " conv2/relu ") && strstr(l, "\u25cf");
    if (!dot)
        fail_with("conv2/relu has no breakpoint mark in the ops pane", screen);
    shot("step-break", screen);
    keys("b");
    wait_for(-1, "(tdbg) delete 2", NULL);

    /* back to the command line: Tab completes an op name */
    keys("Escape");
    wait_for(23, "Esc: panes", NULL);
    type("info op conv2/r");
    keys("Tab");
    wait_for(22, "(tdbg) info op conv2/relu", NULL);
    keys("Enter");
    wait_for(-1, "conv2/relu (Relu), forward phase", NULL);
    /* Tab Tab on more than one: the list, drawn inside the TUI */
    type("print conv2/");
    keys("Tab Tab");
    screen = wait_for(-1, "completions", "conv2/bn:out0", "conv2/conv:out0", NULL);
    shot("completion", screen);
    keys("C-u");

    /* a large tensor: a 32x32 slice, scrolled to its end */
    type("view conv2/bn:out0[2,3]");
    keys("Enter");
    type("focus tensor");
    keys("Enter");
    wait_for(-1, ">tensor conv2/bn:out0", NULL);
    keys("End");
    keys("Right Right Right Right Right Right");
    screen = wait_for(-1, "[2,3,31,6] =", " 31 ", NULL);
    shot("tensor-scrolled", screen);

    /* resize: bigger, too small, back */
    tu_shell(NULL, 0, "tmux -L %s resize-window -t t -x 132 -y 40", sock);
    screen = wait_for(39, "1Help", NULL);
    if (!strstr(line_of(screen, 0, l, sizeof l), "conv2/relu"))
        fail_with("the status bar lost the stop after a resize", screen);
    shot("wide", screen);
    tu_shell(NULL, 0, "tmux -L %s resize-window -t t -x 50 -y 12", sock);
    shot("too-small", wait_for(-1, "this terminal is 50x12", NULL));
    tu_shell(NULL, 0, "tmux -L %s resize-window -t t -x 80 -y 24", sock);
    wait_for(23, "1Help", NULL);

    /* quit from the command line: the terminal as it was */
    keys("Escape");
    wait_for(23, "Esc: panes", NULL);
    type("quit");
    keys("Enter");
    assert_restored("tdbg-exit=1");
    wait_for(-1, "tdbg: training ended by quit at step 1", NULL);
    kill_server();
}
END_TEST

/* ---- a stop shown from the session's struct, not its text -------------------------------- */

/* tests/scoped's ops are named "a b=c/...": a reader of the `stopped:`
 * line would take "a" for the op and tensor. The status bar, the ops
 * pane and the tensor pane show the whole names and the bad element. */
START_TEST(test_stop_names_unparsed)
{
    if (skip())
        return;
    char args[512], l[4096];
    snprintf(args, sizeof args, "-- '%s/tests/scoped'", TDBG_BUILDDIR);
    start("", 120, 30, args);
    wait_for(0, "READY", NULL);
    /* jump needs a stop, past or present: none yet (dispatch says so) */
    type("jump");
    keys("Enter");
    wait_for(-1, "error: jump: training has not stopped yet", NULL);
    keys("F9");
    wait_for(-1, "Breakpoint 1: the first op creating a NaN", NULL);
    keys("F5");
    wait_for(0, "PAUSED", "step 1", NULL);
    /* the status bar may be drawn before the stop is shown in the panes */
    const char *screen = wait_for(-1, "tensor a b=c/sqrt:out0", "[1,2] = nan", NULL);
    if (!strstr(line_of(screen, 0, l, sizeof l), " a b=c/sqrt (Sqrt) | NaN at a b=c/sqrt:out0[1,2] created"))
        fail_with("the status bar does not name the stop whole", screen);
    bool marked = false;
    for (int y = 2; y < 20 && !marked; y++)
        marked = strncmp(line_of(screen, y, l, sizeof l), ">!", 2) == 0 && strstr(l, " a b=c/sqrt ") &&
                 strstr(l, "Sqrt");
    if (!marked)
        fail_with("a b=c/sqrt is not the current op marked '>!' in the ops pane", screen);
    if (!strstr(screen, "tensor a b=c/sqrt:out0") || !strstr(screen, "[1,2] = nan"))
        fail_with("the tensor pane is not on the NaN element", screen);
    shot("scoped-stop", screen);
    /* the stopped: line itself is in the output pane, as scripts read it */
    wait_for(-1, "stopped: step=1 phase=forward op=a b=c/sqrt type=Sqrt", NULL);
    /* without the breakpoint the program ends: jump still goes to the
     * last stop, and continue, a command that resumes, leaves */
    type("delete");
    keys("Enter");
    wait_for(-1, "(tdbg) delete", NULL);
    type("continue");
    keys("Enter");
    wait_for(0, "FINISHED", NULL);
    type("jump");
    keys("Enter");
    screen = wait_for(-1, "(tdbg) jump", NULL);
    if (strstr(screen, "error: jump"))
        fail_with("jump was refused after the program's end", screen);
    type("continue");
    keys("Enter");
    assert_restored("tdbg-exit=0");
    kill_server();
}
END_TEST

/* ---- a 4-D tensor's slices: [B,H,T,T] as attention's, here [8,8,32,32] ----------------- */

/* The title names the slice on show, [ and ] step the last leading dim (a
 * head), { and } the one before (a batch) and stop at its ends; `view [I,J]`
 * picks both; the footer's index agrees with the title. */
START_TEST(test_tensor_4d_slices)
{
    if (skip())
        return;
    char args[512];
    snprintf(args, sizeof args, "-- '%s/examples/cnn' %s --steps 2 --mode eager", TDBG_BUILDDIR, CNN);
    start("", 100, 30, args);
    wait_for(0, "READY", NULL);
    type("break conv2/bn");
    keys("Enter");
    wait_for(-1, "Breakpoint 1 (conv2/bn) pending", NULL); /* no ops before the first step */
    keys("F5");
    wait_for(0, "PAUSED", "conv2/bn", NULL);
    type("view conv2/bn:out0");
    keys("Enter");
    wait_for(-1, "tensor conv2/bn:out0[0,0,:,:]", "f32 [8,8,32,32]", "[0,0,0,0] =", NULL);
    type("focus tensor");
    keys("Enter");
    wait_for(-1, ">tensor conv2/bn:out0[0,0,:,:]", NULL);
    type("]]");
    wait_for(-1, ">tensor conv2/bn:out0[0,2,:,:]", "[0,2,0,0] =", "slice 3/64 ([ ] { })", NULL);
    type("}");
    const char *screen = wait_for(-1, ">tensor conv2/bn:out0[1,2,:,:]", "[1,2,0,0] =", "slice 11/64", NULL);
    shot("tensor-4d-slice", screen);
    type("{{");
    wait_for(-1, ">tensor conv2/bn:out0[0,2,:,:]", "dim 0 has 8: this is its first", NULL);
    /* the cursor stays on its cell across slices */
    keys("Down Right Right");
    type("}");
    wait_for(-1, ">tensor conv2/bn:out0[1,2,:,:]", "[1,2,1,2] =", NULL);
    /* ] past the last head carries into the next batch */
    keys("Escape");
    type("view [3,7]");
    keys("Enter");
    wait_for(-1, "tensor conv2/bn:out0[3,7,:,:]", NULL);
    type("focus tensor");
    keys("Enter");
    type("]");
    wait_for(-1, ">tensor conv2/bn:out0[4,0,:,:]", NULL);
    type("[[");
    wait_for(-1, ">tensor conv2/bn:out0[3,6,:,:]", NULL);
    keys("Escape");
    type("quit");
    keys("Enter");
    assert_restored("tdbg-exit=1");
    kill_server();
}
END_TEST

/* ---- live while training runs, Ctrl-C, mouse off ------------------------------------------ */

START_TEST(test_live_interrupt_mouse)
{
    if (skip())
        return;
    char args[512];
    snprintf(args, sizeof args, "-ex run -- '%s/examples/mlp' --hidden 64,64 --batch 32 --threads 2 --steps 1000000 "
             "--log-every 50", TDBG_BUILDDIR);
    start("", 80, 24, args);
    /* the screen moves while training runs: the loss chart and the step */
    const char *screen = wait_for(0, "RUNNING", NULL);
    screen = wait_for(-1, "step=100 loss=", NULL); /* the program's lines in the output pane */
    screen = wait_for(0, "RUNNING", NULL);
    shot("running", screen);
    keys("C-c");
    screen = wait_for(0, "PAUSED", "interrupted (Ctrl-C)", NULL);
    type("set mouse off");
    keys("Enter");
    screen = wait_for(-1, "Mouse off: the terminal selects text", NULL);
    wait_for(-1, "mouse off: select text to copy", NULL);
    /* the help overlay, and any key closes it */
    keys("F1");
    shot("keys", wait_for(-1, "tdbg keys", "break nan", NULL));
    keys("Escape");
    type("quit");
    keys("Enter");
    assert_restored("tdbg-exit=1");
    kill_server();
}
END_TEST

/* ---- the profile pane's key, ms/step in the status bar ------------------------------------ */

/* Paused at step 2's start: the status bar has the last step's ms; p (in a
 * pane) puts the profile in the tensor's place, which says how to start
 * the profiler, and p again gives the tensor back. (The pane's rows, from
 * a profiled step, are checked in-process in test_tui_prof.c.) */
START_TEST(test_profile_key_ms_per_step)
{
    if (skip())
        return;
    char args[512], l[4096];
    snprintf(args, sizeof args, "-ex 'break step 2' -ex run -- '%s/examples/mlp' --hidden 64,64 --batch 32 "
             "--threads 2 --steps 5", TDBG_BUILDDIR);
    start("", 80, 24, args);
    const char *screen = wait_for(0, "PAUSED", "step 2", "ms/step", NULL);
    double ms = -1;
    const char *at = strstr(line_of(screen, 0, l, sizeof l), " ms/step");
    while (at && at > l && at[-1] != ' ')
        at--;
    if (!at || sscanf(at, "%lf ms/step", &ms) != 1 || !(ms > 0))
        fail_with("no positive ms/step in the status bar", screen);
    keys("Escape");
    wait_for(-1, "Esc: cmd line", NULL); /* the panes have the keys (an Esc and a p at once: Alt-p) */
    keys("p");
    screen = wait_for(-1, ">profile", "no profile: 'profile start' records", NULL);
    if (strstr(screen, "no tensor: select an op"))
        fail_with("the tensor pane is still on show beside the profile", screen);
    shot("profile-empty", screen);
    keys("p");
    screen = wait_for(-1, ">tensor", NULL);
    if (strstr(screen, "profile"))
        fail_with("the profile pane is still on show", screen);
    keys("Escape");
    type("quit");
    keys("Enter");
    assert_restored("tdbg-exit=1");
    kill_server();
}
END_TEST

/* Profiling from the command line: at the stop the pane shows the last
 * finished step's ops, longest first, with their bars. */
START_TEST(test_profile_pane_rows)
{
    if (skip())
        return;
    char args[512];
    snprintf(args, sizeof args, "-ex 'profile start' -ex 'break step 3' -ex run -- '%s/examples/mlp' "
             "--hidden 64,64 --batch 32 --threads 1 --steps 5", TDBG_BUILDDIR);
    start("", 100, 30, args);
    wait_for(0, "PAUSED", "step 3", NULL);
    keys("Escape");
    wait_for(-1, "Esc: cmd line", NULL);
    keys("p");
    const char *screen = wait_for(-1, ">profile", "step 2: ", "fwd", "bwd", "update/fc1.weight", NULL);
    if (!strstr(screen, "fc1/linear") && !strstr(screen, "fc2/linear"))
        fail_with("no linear among the step's ops", screen);
    shot("profile-rows", screen);
    keys("Escape");
    type("quit");
    keys("Enter");
    assert_restored("tdbg-exit=1");
    kill_server();
}
END_TEST

/* ---- mixed precision: rounding marks, precision, skipped steps ---------------------------- */

/* Code point col of s (every character on these screens is one column
 * wide), as its first byte; NULL past the end. */
static const char *column(const char *s, int col)
{
    for (int c = 0; *s; c++) {
        if (c == col)
            return s;
        s++;
        while ((*s & 0xC0) == 0x80)
            s++;
    }
    return NULL;
}

/* The ops pane's row of op on screen (" NAME " in its first 72 columns):
 * its text into out; false when the op is not on show. */
static bool ops_row(const char *screen, const char *op, char *out, size_t n)
{
    char want[TE_NAME_MAX + 2], l[4096];
    snprintf(want, sizeof want, " %s ", op);
    for (int y = 2; y < 30; y++) {
        line_of(screen, y, l, sizeof l);
        const char *bar = strstr(l, "\u2502");
        if (bar && (size_t)(bar - l) > strlen(want) && strstr(l, want) && strstr(l, want) < bar) {
            snprintf(out, n, "%.*s", (int)(bar - l), l);
            return true;
        }
    }
    return false;
}

/* The ops pane's rounding mark (column 3: ^ overflow, v underflow) of op,
 * and that its dtype column says dtype. */
static void assert_op_mark(const char *screen, const char *op, char mark, const char *dtype)
{
    char row[4096], what[4400];
    if (!ops_row(screen, op, row, sizeof row)) {
        snprintf(what, sizeof what, "%s is not in the ops pane", op);
        fail_with(what, screen);
    }
    const char *m = column(row, 3);
    if (!m || *m != mark) {
        snprintf(what, sizeof what, "%s: rounding mark '%c' expected, the row is '%s'", op, mark, row);
        fail_with(what, screen);
    }
    char dt[16];
    snprintf(dt, sizeof dt, " %s ", dtype);
    if (!strstr(row, dt)) {
        snprintf(what, sizeof what, "%s: precision %s expected, the row is '%s'", op, dtype, row);
        fail_with(what, screen);
    }
}

/* The chart's line whose label starts with label (NULL: the loss's top
 * row, line 2): the columns of its bars after the label (LABEL_W 9). */
static const char *chart_bars(const char *screen, const char *label, char *out, size_t n)
{
    char l[4096];
    for (int y = 2; y < 30; y++) {
        line_of(screen, y, l, sizeof l);
        const char *bar = strstr(l, "\u2502");
        const char *chart = bar ? bar + strlen("\u2502") : NULL;
        if (chart && (label ? strncmp(chart, label, strlen(label)) == 0 : y == 2)) {
            const char *b = column(chart, 9);
            snprintf(out, n, "%s", b ? b : "");
            return out;
        }
    }
    fail_with(label ? label : "the loss's top row", screen);
    return NULL;
}

/* The x over the skipped step (one column per step) on a chart line:
 * column step, and only there. */
static void assert_skip_mark(const char *screen, const char *label, int step)
{
    char bars[4096], what[4400];
    chart_bars(screen, label, bars, sizeof bars);
    const char *x = column(bars, step), *other = strchr(bars, 'x');
    if (!x || *x != 'x' || other != x || strchr(x + 1, 'x')) {
        snprintf(what, sizeof what, "%s: an x at step %d only, the bars are '%s'", label ? label : "loss", step,
                 bars);
        fail_with(what, screen);
    }
}

/* O2 in f16 on the MLP with an underflow injected at step 2 (fc1/linear
 * times 1e-12) and an overflow at step 5 (fc2/linear times 1e6, which
 * makes the gradients non-finite: the scaler skips that step). The ops
 * pane marks the producer at each stop (v, then ^) with the op's precision;
 * after step 5 the chart has an x at step 5 on the loss and on the scale
 * line, and the last step's fc2/linear keeps its ^. */
START_TEST(test_amp_marks)
{
    if (skip())
        return;
    char args[1024];
    snprintf(args, sizeof args,
             "-- '%s/examples/mlp' --hidden 32,32 --batch 8 --train-size 64 --steps 8 --log-every 1 --threads 1 "
             "--amp O2 --amp-dtype f16 --scale-init 1024 --scale-window 3 "
             "--inject scale@op=fc1/linear,step=2,value=1e-12 --inject scale@op=fc2/linear,step=5,value=1e6",
             TDBG_BUILDDIR);
    start("", 160, 40, args);
    wait_for(0, "READY", NULL);
    type("break underflow");
    keys("Enter");
    wait_for(-1, "Breakpoint 1", NULL);
    keys("F5");
    wait_for(0, "PAUSED", "step 2", "fc1/linear", "underflow", NULL);
    const char *screen = wait_for(-1, ">  v   1 fc1/linear", NULL);
    assert_op_mark(screen, "fc1/linear", 'v', "f16");
    assert_op_mark(screen, "fc1/linear/cast_in0", ' ', "f16");
    shot("amp-underflow", screen);

    type("delete");
    keys("Enter");
    type("break overflow");
    keys("Enter");
    wait_for(-1, "Breakpoint 2", NULL);
    keys("F5");
    wait_for(0, "PAUSED", "step 5", "fc2/linear", "overflow", NULL);
    /* the op stopped at is marked at once: its own op_end hook has not run */
    screen = wait_for(-1, ">! ^   3 fc2/linear", NULL);
    assert_op_mark(screen, "fc2/linear", '^', "f16");
    assert_op_mark(screen, "fc1/linear", ' ', "f16"); /* this step's: no underflow */
    /* no skip yet: the scaler decides at the step's end */
    char bars[4096];
    if (strchr(chart_bars(screen, NULL, bars, sizeof bars), 'x'))
        fail_with("an x on the loss before any skip", screen);

    keys("F8");
    wait_for(0, "PAUSED", "step 6", NULL);
    screen = wait_for(-1, "scale=2048 skipped", NULL);
    assert_skip_mark(screen, NULL, 5);
    assert_skip_mark(screen, "scale", 5);
    /* the last step's rows, dimmed: fc2/linear's overflow, the precisions */
    assert_op_mark(screen, "fc2/linear", '^', "f16");
    assert_op_mark(screen, "cross_entropy", ' ', "f32");
    shot("amp-skip", screen);

    type("quit");
    keys("Enter");
    assert_restored("tdbg-exit=1");
    kill_server();
}
END_TEST

/* ---- colours, NO_COLOR ---------------------------------------------------------------- */

static bool has_colour(const char *s)
{
    /* SGR 30-37 / 40-47 (or 38;5 / 48;5) */
    for (const char *p = s; (p = strstr(p, "\033[")) != NULL; p += 2)
        for (const char *q = p + 2; *q && *q != 'm' && q - p < 40; q++)
            if ((q[0] == '3' || q[0] == '4') && q[1] >= '0' && q[1] <= '8' && (q[-1] == '[' || q[-1] == ';') &&
                (q[2] == ';' || q[2] == 'm'))
                return true;
    return false;
}

START_TEST(test_colour_and_no_color)
{
    if (skip())
        return;
    char args[512];
    snprintf(args, sizeof args, "-- '%s/examples/mlp' --hidden 32,32 --steps 2", TDBG_BUILDDIR);
    start("NO_COLOR=1", 80, 24, args);
    wait_for(0, "READY", NULL);
    const char *screen = capture(true);
    if (has_colour(screen))
        fail_with("NO_COLOR=1, yet colours", screen);
    type("quit");
    keys("Enter");
    assert_restored("tdbg-exit=0");
    start("", 80, 24, args);
    wait_for(0, "READY", NULL);
    screen = capture(true);
    if (!has_colour(screen))
        fail_with("no colours on a colour terminal", screen);
    type("quit");
    keys("Enter");
    assert_restored("tdbg-exit=0");
    kill_server();
}
END_TEST

/* ---- a crash signal restores the terminal ---------------------------------------------- */

START_TEST(test_crash_restores_terminal)
{
    if (skip())
        return;
    char args[512];
    snprintf(args, sizeof args, "-- '%s/examples/mlp' --hidden 32,32 --steps 2", TDBG_BUILDDIR);
    start("", 80, 60, args); /* room for the crash report below the notice */
    const char *screen = wait_for(-1, "(pid ", NULL);
    int pid = atoi(strstr(screen, "(pid ") + 5);
    ck_assert_msg(pid > 1, "no pid on the screen");
    kill(pid, SIGSEGV);
    screen = wait_for(-1, "stty-done", NULL);
    if (!strstr(screen, "the terminal is restored"))
        fail_with("no word of the restore", screen);
    /* a sanitizer build reports the signal itself and exits otherwise: not 0 either way */
    if (strstr(screen, "tdbg-exit=0"))
        fail_with("a crash that exits 0", screen);
    if (!strstr(screen, "icanon echo") || strstr(screen, "-icanon"))
        fail_with("the terminal is not back in canonical mode with echo", screen);
    kill_server();
}
END_TEST

/* ---- no terminal: the CLI, after one line --------------------------------------------- */

START_TEST(test_no_terminal_falls_back)
{
    if (system("command -v setsid >/dev/null 2>&1") != 0) {
        tdbg_skip("tui", "setsid not found (apt-get install util-linux)");
        return;
    }
    /* setsid: no controlling terminal, so not even /dev/tty */
    ts_session r = ts_sh("setsid -w '%s/debugger/tdbg' --tui -ex run -- '%s/examples/mlp' --hidden 32,32 "
                         "--steps 2 </dev/null 2>&1; echo \"status=$?\"", TDBG_BUILDDIR, TDBG_BUILDDIR);
    ck_assert_msg(strstr(r.out, "tdbg: no terminal for the TUI") && strstr(r.out, "using the command line instead"),
                  "no notice:\n%s", r.out);
    ck_assert_msg(strstr(r.out, "tdbg: the program finished") && strstr(r.out, "status=0"), "no clean run:\n%s",
                  r.out);
    ts_free(&r);
}
END_TEST

/* ---- attached: tdbg attach --tui --------------------------------------------------------- */

/* The TUI on a run already going: the script sent with the attach runs
 * first, a breakpoint stops, Ctrl-C pauses, a resize lays out again,
 * quit asks and n stays, detach typed while training runs gives the
 * terminal back, and the run trains on. */
START_TEST(test_attached_break_interrupt_resize_quit_detach)
{
    if (skip())
        return;
    start_attached("", 100, 30, "--steps 1000000", "-ex 'break fc2/linear'",
                   "sleep 1; kill -0 $run && echo run-alive; kill $run");
    wait_for(0, "PAUSED", NULL); /* the attach's pause at the next op */
    wait_for(-1, "Breakpoint 1 (fc2/linear) pending", NULL);
    keys("F5");
    const char *screen = wait_for(0, "PAUSED", "fc2/linear", NULL);
    shot("attached", screen);
    type("delete 1");
    keys("Enter");
    wait_for(-1, "(tdbg) delete 1", NULL);
    keys("F5");
    wait_for(0, "RUNNING", NULL);
    keys("C-c");
    wait_for(0, "PAUSED", "interrupted (Ctrl-C)", NULL);
    /* the client's terminal grows: the run's TUI lays out again */
    ck_assert_int_eq(tu_shell(NULL, 0, "tmux -L %s resize-window -t t -x 120 -y 40", sock), 0);
    wait_for(39, "1Help", NULL);
    type("quit");
    keys("Enter");
    wait_for(-1, "Kill the program being debugged? (y or n)", NULL);
    type("n");
    keys("Enter");
    wait_for(-1, "Not confirmed.", NULL);
    keys("F5"); /* detach typed while training runs: at the next frame */
    wait_for(0, "RUNNING", NULL);
    type("detach");
    keys("Enter");
    assert_restored("tdbg-exit=0");
    screen = wait_for(-1, "run-alive", NULL);
    if (!strstr(screen, "Detaching from mlp"))
        fail_with("the last lines of the TUI's output are not on the terminal", screen);
    kill_server();
}
END_TEST

/* The run has no terminfo for the client's TERM: the command line takes
 * the TUI's place, and quit's y ends the run. */
START_TEST(test_attached_no_terminfo_quit)
{
    if (skip())
        return;
    start_attached("TERM=tdbg-no-such-term", 100, 30, "--steps 1000000", "", "wait $run; echo \"run-exit=$?\"");
    wait_for(-1, "the TUI cannot start in the run: no terminfo here for the client's TERM=tdbg-no-such-term;", NULL);
    wait_for(-1, "reason=step", NULL);
    type("quit");
    keys("Enter");
    wait_for(-1, "Kill the program being debugged? (y or n)", NULL);
    type("y");
    keys("Enter");
    assert_restored("tdbg-exit=1");
    wait_for(-1, "tdbg: the program was ended by quit", "run-exit=1", NULL);
    kill_server();
}
END_TEST

/* The client killed with -9 while its TUI is up: the run detaches and
 * trains on. (Nothing gives the terminal back after a -9: the script
 * does, to show what follows.) */
START_TEST(test_attached_client_killed)
{
    if (skip())
        return;
    start_attached("", 100, 30, "--steps 1000000", "",
                   "stty sane; clear; sleep 1; kill -0 $run && echo run-alive; kill $run; cat run.err");
    wait_for(0, "PAUSED", NULL);
    ck_assert_int_eq(tu_shell(NULL, 0, "pkill -KILL -P $(tmux -L %s list-panes -t t -F '#{pane_pid}') -f 'tdbg.* attach'",
                              sock), 0);
    wait_for(-1, "run-alive", "the front end closed the connection; detached, training goes on", NULL);
    kill_server();
}
END_TEST

/* ---- without a terminal: layout and the output pane's lines --------------------------- */

static bool overlap(tui_rect a, tui_rect b)
{
    return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
}

START_TEST(test_layout)
{
    static const int sizes[][2] = { { 24, 80 }, { 18, 60 }, { 40, 132 }, { 60, 220 }, { 24, 300 } };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int nb = 0; nb <= 40; nb += 8) {
            int h = sizes[s][0], w = sizes[s][1];
            tui_geom g;
            tui_layout_compute(h, w, nb, &g);
            ck_assert_msg(!g.too_small, "%dx%d: too small", w, h);
            tui_rect all[TUI_NPANES + 4] = { g.status, g.cmd, g.fbar, g.rule };
            for (int i = 0; i < TUI_NPANES; i++)
                all[4 + i] = g.pane[i];
            for (int i = 0; i < TUI_NPANES + 4; i++) {
                tui_rect r = all[i];
                ck_assert_msg(r.y >= 0 && r.x >= 0 && r.y + r.h <= h && r.x + r.w <= w && r.h >= 1 && r.w >= 1,
                              "%dx%d: rect %d at %d,%d %dx%d is off the screen", w, h, i, r.y, r.x, r.w, r.h);
                for (int j = 0; j < i; j++)
                    ck_assert_msg(!overlap(r, all[j]), "%dx%d: rects %d and %d overlap", w, h, i, j);
            }
            /* every pane has its title and room below it */
            for (int i = 0; i < TUI_NPANES; i++)
                ck_assert_msg(g.pane[i].h >= 3, "%dx%d: pane %d has %d rows", w, h, i, g.pane[i].h);
            ck_assert_msg(g.pane[TUI_TENSOR].h >= (h >= 24 ? 9 : 5), "%dx%d: the tensor pane has %d rows", w, h,
                          g.pane[TUI_TENSOR].h);
        }
    tui_geom g;
    tui_layout_compute(17, 80, 0, &g);
    ck_assert(g.too_small);
    tui_layout_compute(24, 59, 0, &g);
    ck_assert(g.too_small);
    ck_assert_int_eq(g.cmd.y, 23); /* commands still work */
}
END_TEST

/* The TUI registered itself as a front end (its constructor), with a way
 * to give the terminal back from a fatal signal. */
START_TEST(test_registered)
{
    const dbg_frontend *f = dbg_frontend_find("tui");
    ck_assert_msg(f != NULL, "no front end named tui");
    ck_assert(f->start == tui_start && f->read_line && f->show_stop && f->finish && f->fatal_signal);
}
END_TEST

/* The loss is what the op table marks as one, whatever the op's type is
 * called, and a unary elementwise op of it before backward is the scale. */
START_TEST(test_track_loss_by_traits)
{
    te_init(&(te_config){ .seed = 1, .threads = 1 });
    te_tensor *l = te_tensor_persistent(TE_F32, 0, NULL), *scaled = te_tensor_persistent(TE_F32, 0, NULL);
    te_tensor *other = te_tensor_persistent(TE_F32, 0, NULL);
    te_set(l, 0, 2.5f);
    te_set(scaled, 0, 20.0f);
    te_set(other, 0, 99.0f);
    te_tensor *in[] = { l }, *out_l[] = { l }, *out_s[] = { scaled }, *out_o[] = { other };
    /* a scalar that is no loss, then the loss under a made-up type name, then its scale */
    te_op_record none = { .step = 7, .name = "acc", .type = "Sum", .outputs = out_o, .n_outputs = 1 };
    te_op_record loss = { .step = 7, .name = "my loss", .type = "Whatever", .outputs = out_l, .n_outputs = 1,
                          .traits = TE_TRAIT_LOSS };
    te_op_record scale = { .step = 7, .name = "s", .type = "Scale", .inputs = in, .n_inputs = 1,
                           .outputs = out_s, .n_outputs = 1, .traits = TE_TRAIT_ELEMENTWISE };
    te_op_record back = { .step = 7, .phase = TE_PHASE_BACKWARD, .name = "grad/s", .type = "ScaleGrad" };
    tui_track_op(&none);
    tui_track_op(&loss);
    tui_track_op(&scale);
    tui_track_op(&back);
    tui_track_step_end(7);
    float v, sc;
    int64_t step;
    ck_assert(tui_track_last(&v, &step, &sc));
    ck_assert_msg(v == 2.5f && step == 7 && sc == 8.0f, "loss %g step %lld scale %g", v, (long long)step, sc);
    te_tensor_free(l);
    te_tensor_free(scaled);
    te_tensor_free(other);
    te_shutdown();
}
END_TEST

START_TEST(test_output_lines)
{
    const dbg_stop *before = dbg_last_stop();
    unsigned seq = before ? before->seq : 0;
    tui_out_lock();
    const char prog[] = "step=0 loss=2.3\r\nprogress 10%\rprogress 100%\n\033[31mred\033[0m\tx\n";
    tui_out_add(TUI_SRC_STDOUT, prog, sizeof prog - 1);
    const char dbg_text[] = "stopped: step=7 phase=backward op=grad/fc1/linear type=LinearGrad reason=nan "
                            "tensor=grad:fc1.weight index=[3,1] origin=propagated:fc1/relu:out0\npartial";
    tui_out_add(TUI_SRC_DBG, dbg_text, sizeof dbg_text - 1);
    tui_out_unlock();
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    tui_out_tail(f, 5, "\n");
    fclose(f);
    const char *want = "step=0 loss=2.3\nprogress 100%\nred     x\nstopped: step=7";
    ck_assert_msg(strncmp(buf, want, strlen(want)) == 0, "tail:\n%s", buf);
    ck_assert_msg(strstr(buf, "\npartial\n") != NULL, "the unfinished line is missing:\n%s", buf);
    /* an attached client's terminal, with no output translation yet */
    f = fmemopen(buf, sizeof buf, "w");
    tui_out_tail(f, 2, "\r\n");
    fclose(f);
    ck_assert_msg(strstr(buf, "\r\npartial\r\n") != NULL, "the lines do not end in CR LF:\n%s", buf);
    /* output is only shown: a `stopped:` line in it is no stop (the
     * stop on show is the session's struct) */
    const dbg_stop *after = dbg_last_stop();
    ck_assert_msg((after ? after->seq : 0) == seq, "a stop made from output text");
    tui_out_free();
}
END_TEST

/* ---- the list view the panes scroll with ------------------------------------------------ */

static void assert_list(const tui_list *l, int sel, int top, const char *what)
{
    ck_assert_msg(l->sel == sel && l->top == top, "%s: sel %d top %d, want sel %d top %d", what, l->sel, l->top, sel,
                  top);
}

START_TEST(test_list_clamp)
{
    tui_list l = { 0 };
    tui_list_set_height(&l, 5);
    tui_list_set_count(&l, 0); /* empty: sel and top 0, no row shown */
    tui_list_move(&l, 3);
    tui_list_show(&l, l.sel);
    assert_list(&l, 0, 0, "empty, moved down");
    tui_list_move(&l, -TUI_FAR);
    assert_list(&l, 0, 0, "empty, home");
    ck_assert_int_eq(tui_list_item_at(&l, 0), -1);

    tui_list_set_height(&l, 4);
    tui_list_set_count(&l, 10);
    tui_list_move(&l, -1);
    assert_list(&l, 0, 0, "up at the top");
    tui_list_move(&l, TUI_FAR); /* End */
    ck_assert_int_eq(l.sel, 9);
    ck_assert_int_eq(l.top, 0); /* the window moves only when asked */
    tui_list_show(&l, l.sel);
    assert_list(&l, 9, 6, "end, shown");
    tui_list_move(&l, 1);
    assert_list(&l, 9, 6, "down at the bottom");
    ck_assert_int_eq(tui_list_item_at(&l, 0), 6);
    ck_assert_int_eq(tui_list_item_at(&l, 3), 9);
    ck_assert_int_eq(tui_list_item_at(&l, 4), -1); /* below the window */
    ck_assert_int_eq(tui_list_item_at(&l, -1), -1);
    tui_list_move(&l, -3); /* a page up: still in view, the window stays */
    tui_list_show(&l, l.sel);
    assert_list(&l, 6, 6, "a page up");
    tui_list_move(&l, -4);
    tui_list_show(&l, l.sel);
    assert_list(&l, 2, 2, "another page up");
    tui_list_select(&l, -5);
    assert_list(&l, 0, 2, "selected before the first");
    tui_list_select(&l, 100);
    assert_list(&l, 9, 2, "selected after the last");
    tui_list_move(&l, -TUI_FAR); /* Home */
    tui_list_show(&l, l.sel);
    assert_list(&l, 0, 0, "home");
    tui_list_scroll(&l, TUI_FAR); /* scrolling leaves the selection */
    assert_list(&l, 0, 6, "scrolled to the end");
    ck_assert(tui_list_at_end(&l));
    tui_list_scroll(&l, -2);
    assert_list(&l, 0, 4, "scrolled up two");
    ck_assert(!tui_list_at_end(&l));

    /* the rows shrink below the window (breakpoints deleted): no empty
     * rows under the last while rows above are hidden */
    tui_list_select(&l, 9);
    tui_list_show(&l, 9);
    tui_list_set_count(&l, 7);
    assert_list(&l, 6, 3, "three rows gone");
    tui_list_set_count(&l, 0);
    assert_list(&l, 0, 0, "all gone");
}
END_TEST

START_TEST(test_list_taller_than_rows)
{
    tui_list l = { 0 };
    tui_list_set_height(&l, 10);
    tui_list_set_count(&l, 3);
    tui_list_move(&l, TUI_FAR);
    tui_list_show(&l, l.sel);
    assert_list(&l, 2, 0, "end of three in ten rows");
    tui_list_scroll(&l, 5);
    assert_list(&l, 2, 0, "scrolled");
    ck_assert(tui_list_at_end(&l));
    ck_assert_int_eq(tui_list_item_at(&l, 2), 2);
    ck_assert_int_eq(tui_list_item_at(&l, 3), -1); /* a click under the last row */
    ck_assert_int_eq(tui_list_item_at(&l, 9), -1);
}
END_TEST

START_TEST(test_list_resize)
{
    tui_list l = { 0 };
    tui_list_set_height(&l, 10);
    tui_list_set_count(&l, 20);
    tui_list_select(&l, 19);
    tui_list_show(&l, l.sel);
    assert_list(&l, 19, 10, "the last of 20 in 10 rows");
    tui_list_set_height(&l, 4); /* the terminal got smaller */
    tui_list_show(&l, l.sel);
    assert_list(&l, 19, 16, "in 4 rows");
    ck_assert_int_eq(tui_list_item_at(&l, 3), 19); /* still on the bottom row */
    tui_list_set_height(&l, 0); /* too small: nothing shown, nothing lost */
    tui_list_show(&l, l.sel);
    assert_list(&l, 19, 16, "in no rows");
    ck_assert_int_eq(tui_list_item_at(&l, 0), -1);
    tui_list_set_height(&l, 30); /* bigger: everything fits from the first row */
    assert_list(&l, 19, 0, "in 30 rows");
    tui_list_set_height(&l, 3);
    tui_list_set_count(&l, 5); /* and the rows shrink at the same time */
    tui_list_show(&l, l.sel);
    assert_list(&l, 4, 2, "the last of 5 in 3 rows");

    /* the tensor pane's grid: the same rule on 64-bit rows and columns */
    ck_assert_int_eq(tui_list_top_for(0, 9, 4, 10), 6);
    ck_assert_int_eq(tui_list_top_for(8, 9, 4, 10), 6);
    ck_assert_int_eq(tui_list_top_for(5, 2, 4, 10), 2);
    ck_assert_int_eq(tui_list_top_for(3, 4, 4, 10), 3);
    ck_assert_int_eq(tui_list_top_for(7, 0, 40, 10), 0);
    int64_t big = (int64_t)1 << 40;
    ck_assert(tui_list_top_for(0, big - 1, 32, big) == big - 32);
}
END_TEST

START_TEST(test_list_follows_tail)
{
    tui_list l = { 0 }; /* all zero: follows */
    tui_list_follow(&l, 5, 3);
    assert_list(&l, 0, 2, "5 rows in 3");
    tui_list_follow(&l, 10, 3);
    assert_list(&l, 0, 7, "5 rows more");
    tui_list_scroll(&l, -2); /* the reader scrolls back */
    tui_list_follow(&l, 12, 3);
    assert_list(&l, 0, 5, "scrolled back, 2 rows more: the same rows in view");
    tui_list_follow(&l, 12, 5); /* a resize keeps them too */
    assert_list(&l, 0, 5, "scrolled back, 5 rows high");
    tui_list_scroll(&l, TUI_FAR); /* End: following again */
    assert_list(&l, 0, 7, "at the end");
    tui_list_follow(&l, 15, 5);
    assert_list(&l, 0, 10, "following, 3 rows more");
    tui_list_follow(&l, 15, 2);
    assert_list(&l, 0, 13, "following, 2 rows high");
    tui_list_scroll(&l, -TUI_FAR);
    tui_list_follow(&l, 16, 2);
    assert_list(&l, 0, 0, "scrolled to the oldest, a row more");
    tui_list_follow(&l, 1, 2); /* the rows fit: at the end, following */
    assert_list(&l, 0, 0, "one row");
    ck_assert(tui_list_at_end(&l));
    tui_list_follow(&l, 6, 2);
    assert_list(&l, 0, 4, "five more");
}
END_TEST

/* ---- skips: counted, never passed silently ------------------------------------------ */

/* The runner run again on the tmux cases, with a PATH that holds rm (the
 * fixture's clean-up) but neither tmux nor setsid: every case is skipped,
 * the closing summary counts them with their reasons, and with
 * TDBG_REQUIRE_ALL=1 (as in CI) the run fails. */
START_TEST(test_skips_counted_in_summary)
{
    char bin[320], out[65536];
    snprintf(bin, sizeof bin, "%s/bin", dir);
    ck_assert(tu_shell(NULL, 0, "mkdir '%s' && ln -s \"$(command -v rm)\" '%s/rm'", bin, bin) == 0);
    for (int require = 0; require < 2; require++) {
        int st = tu_shell(out, sizeof out, "PATH='%s' CK_RUN_SUITE=tui CK_RUN_CASE=tmux TDBG_REQUIRE_ALL=%s "
                          "'%s/tests/run_tests' 2>&1", bin, require ? "1" : "", TDBG_BUILDDIR);
        const char *checks = strstr(out, "Checks: ");
        int n = 0;
        ck_assert_msg(checks && sscanf(checks, "Checks: %d, Failures: 0, Errors: 0", &n) == 1 && n > 1,
                      "no clean closing line:\n%s", out);
        char want[512];
        snprintf(want, sizeof want, "\nSkipped: %d of those checks (tui: tmux not found (apt-get install tmux) x%d; "
                 "tui: setsid not found (apt-get install util-linux))\n", n, n - 1);
        ck_assert_msg(strstr(out, want), "no \"%s\" in:\n%s", want + 1, out);
        ck_assert_msg(strstr(checks, want), "the skips come before Check's closing line:\n%s", out);
        ck_assert_msg(st == require, "TDBG_REQUIRE_ALL=%s: exit %d, want %d:\n%s", require ? "1" : "", st,
                      require, out);
        if (require) {
            snprintf(want, sizeof want, "run_tests: TDBG_REQUIRE_ALL=1: %d checks were skipped instead of run", n);
            ck_assert_msg(strstr(out, want), "no \"%s\" in:\n%s", want, out);
        }
    }
}
END_TEST

Suite *suite_tui(void)
{
    Suite *s = suite_create("tui");
    TCase *tc = tcase_create("tmux");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_nan_step_break_complete_scroll_resize_quit);
    tcase_add_test(tc, test_stop_names_unparsed);
    tcase_add_test(tc, test_tensor_4d_slices);
    tcase_add_test(tc, test_amp_marks);
    tcase_add_test(tc, test_live_interrupt_mouse);
    tcase_add_test(tc, test_profile_key_ms_per_step);
    tcase_add_test(tc, test_profile_pane_rows);
    tcase_add_test(tc, test_colour_and_no_color);
    tcase_add_test(tc, test_crash_restores_terminal);
    tcase_add_test(tc, test_no_terminal_falls_back);
    tcase_add_test(tc, test_attached_break_interrupt_resize_quit_detach);
    tcase_add_test(tc, test_attached_no_terminfo_quit);
    tcase_add_test(tc, test_attached_client_killed);
    suite_add_tcase(s, tc);
    TCase *unit = tcase_create("parts");
    tcase_add_test(unit, test_layout);
    tcase_add_test(unit, test_output_lines);
    tcase_add_test(unit, test_track_loss_by_traits);
    tcase_add_test(unit, test_list_clamp);
    tcase_add_test(unit, test_list_taller_than_rows);
    tcase_add_test(unit, test_list_resize);
    tcase_add_test(unit, test_list_follows_tail);
    tcase_add_test(unit, test_registered);
    suite_add_tcase(s, unit);
    TCase *skips = tcase_create("skips");
    tcase_add_checked_fixture(skips, setup, teardown);
    tcase_set_timeout(skips, 120);
    tcase_add_test(skips, test_skips_counted_in_summary);
    suite_add_tcase(s, skips);
    return s;
}
