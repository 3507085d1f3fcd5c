/* test_attach.c — attaching to a running job, end to end: examples/mlp
 * started with TDBG_LISTEN=1 (a private XDG_RUNTIME_DIR per test) and
 * `tdbg attach` against it. A NaN found with break nan gives the same
 * `stopped:` line and printed values as a launched session, and after
 * detach the run's losses are those of a run never attached; attach and
 * detach ten times leave the run's descriptors and threads as they were;
 * a client killed with -9 at a prompt, a second client (refused, naming
 * the first), a malformed frame: the run goes on to the same losses;
 * quit's rules while attached; Ctrl-C in the client pauses the run; the
 * loopback with its token file; a run without TDBG_LISTEN is named as such.
 * Every child dies with the test (PR_SET_PDEATHSIG) and every wait is
 * bounded. */
#include "suites.h"
#include "testutil.h"
#include "tsession.h"

#include "te.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MLP_ARGS "--hidden 64,64 --batch 32 --threads 1 --log-every 1"
#define WAIT_S 120 /* the machine is slow and shared */

static char xdg[64];

static void scene_begin(void)
{
    snprintf(xdg, sizeof xdg, "/tmp/tdbg-attach-XXXXXX");
    ck_assert(mkdtemp(xdg) != NULL);
    ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", xdg, 1), 0);
    ck_assert_int_eq(setenv("TDBG_PLUGIN", TDBG_BUILDDIR "/debugger/.libs/libtdbg-debugger.so", 1), 0);
    unsetenv("TDBG_LISTEN");
    unsetenv("TDBG");
}

static void scene_end(void)
{
    tu_scratch_remove(xdg);
    unsetenv("TDBG_PLUGIN");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs argv (through sh -c) as a child that dies with this test: stdin
 * from in_fd (-1: /dev/null), stdout and stderr into out and err. */
static pid_t spawn(const char *cmd, int in_fd, const char *out, const char *err)
{
    pid_t parent = getpid(), pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        int in = in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(127);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* The child's status as a shell reports it; kills it and fails after secs. */
static int reap(pid_t pid, int secs, const char *what)
{
    double t0 = now_s();
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        ck_assert_int_eq(w, 0);
        if (now_s() - t0 > secs) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            ck_abort_msg("%s did not end within %d s", what, secs);
        }
        usleep(20000);
    }
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    char *buf = malloc(TS_OUT_MAX + 1);
    ck_assert(buf != NULL);
    size_t n = fread(buf, 1, TS_OUT_MAX, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The lines of text that start with "step=", joined. */
static char *step_lines(const char *text)
{
    char *out = calloc(1, strlen(text) + 1);
    ck_assert(out != NULL);
    for (const char *l = text; *l;) {
        size_t len = strcspn(l, "\n");
        if (strncmp(l, "step=", 5) == 0)
            strncat(out, l, len + (l[len] == '\n'));
        l += len + (l[len] == '\n');
    }
    return out;
}

/* A run of the MLP with args, listening or not; its output files under xdg. */
typedef struct {
    pid_t pid;
    char out[96], err[96];
} run_t;

static run_t run_start(bool listen, const char *args)
{
    run_t r;
    snprintf(r.out, sizeof r.out, "%s/run.out", xdg);
    snprintf(r.err, sizeof r.err, "%s/run.err", xdg);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%sexec '%s/examples/mlp' %s %s", listen ? "TDBG_LISTEN=1 " : "", TDBG_BUILDDIR,
             MLP_ARGS, args);
    r.pid = spawn(cmd, -1, r.out, r.err);
    return r;
}

/* Waits until the run listens (its socket is there). */
static void run_listening(const run_t *r)
{
    char path[256];
    ck_assert_int_eq(te_listen_socket_path((int)r->pid, path, sizeof path), 0);
    double t0 = now_s();
    struct stat st;
    while (stat(path, &st) != 0) {
        ck_assert_msg(now_s() - t0 < WAIT_S, "the run never listened at %s", path);
        ck_assert_msg(waitpid(r->pid, NULL, WNOHANG) == 0, "the run ended before listening");
        usleep(10000);
    }
}

/* The step= lines of an unattached run with the same args. */
static char *reference_steps(const char *args)
{
    ts_session s = ts_sh("timeout %d '%s/examples/mlp' %s %s 2>/dev/null", WAIT_S, TDBG_BUILDDIR, MLP_ARGS, args);
    ck_assert_int_eq(s.status, 0);
    char *steps = step_lines(s.out);
    ts_free(&s);
    return steps;
}

/* The run ends by itself with status 0 and the reference's losses. */
static void run_ends_like(const run_t *r, const char *args)
{
    ck_assert_int_eq(reap(r->pid, WAIT_S, "the run"), 0);
    char *out = slurp(r->out), *got = step_lines(out), *want = reference_steps(args);
    ck_assert_msg(strlen(want) > 100, "the reference printed no steps");
    ck_assert_msg(strcmp(got, want) == 0, "the attached run's losses differ from an unattached run's");
    free(out);
    free(got);
    free(want);
}

static ts_session attach(const run_t *r, const char *opts)
{
    return ts_sh("timeout %d '%s/debugger/tdbg' attach %d %s </dev/null", WAIT_S, TDBG_BUILDDIR, (int)r->pid, opts);
}

/* The line of s that holds what, without its newline, into buf. */
static const char *line_with(const char *text, const char *what, char *buf, size_t n)
{
    const char *p = strstr(text, what);
    if (!p)
        return NULL;
    while (p > text && p[-1] != '\n')
        p--;
    snprintf(buf, n, "%.*s", (int)strcspn(p, "\n"), p);
    return buf;
}

/* ---- the session ------------------------------------------------------------------- */

#define NAN_ARGS "--steps 3000 --inject nan@op=fc2/linear,step=1500"

START_TEST(test_attach_break_nan_print_detach)
{
    scene_begin();
    run_t r = run_start(true, NAN_ARGS);
    run_listening(&r);
    ts_session a = attach(&r, "--batch -ex 'break nan' -ex continue -ex 'print fc2/linear:out0[0,0:4]' -ex detach");
    ts_status_is(&a, 0);
    ts_has(&a, "attached to mlp");
    ts_has(&a, "reason=step"); /* the pause at the next op on attaching */
    ts_has(&a, "Detaching from mlp");
    run_ends_like(&r, NAN_ARGS);
    /* the same stop and values as a session that launched the run */
    ts_session l = ts_tdbg("--batch", "break nan; run; print fc2/linear:out0[0,0:4]", "mlp", "%s %s", MLP_ARGS,
                           NAN_ARGS);
    char want[512], got[512], pw[512], pg[512];
    ck_assert_ptr_nonnull(ts_stopped_line(&l, 0, want, sizeof want));
    ck_assert_msg(strstr(want, "reason=nan"), "the launched session stopped otherwise: %s", want);
    ck_assert_msg(line_with(a.out, "reason=nan", got, sizeof got), "no nan stop:\n%s", a.out);
    ck_assert_str_eq(got, want);
    ck_assert_str_eq(want, "stopped: step=1500 phase=forward op=fc2/linear type=Linear reason=nan "
                           "tensor=fc2/linear:out0 index=[0,0] origin=created");
    ck_assert_ptr_nonnull(line_with(l.out, "[    nan", pw, sizeof pw));
    ck_assert_msg(line_with(a.out, "[    nan", pg, sizeof pg), "print showed no values:\n%s", a.out);
    ck_assert_str_eq(pg, pw);
    float v[3];
    ck_assert_int_eq(sscanf(pg, "[ nan %f %f %f]", &v[0], &v[1], &v[2]), 3);
    ts_free(&l);
    ts_free(&a);
    scene_end();
}
END_TEST

static int count_dir(pid_t pid, const char *sub)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, sub);
    DIR *d = opendir(path);
    ck_assert_msg(d != NULL, "%s: %s", path, strerror(errno));
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The run's descriptors and threads come back to fds and tasks (the
 * session's fd closes just after END reaches the client). */
static void counts_back(pid_t pid, int fds, int tasks, int round)
{
    double t0 = now_s();
    int f, t;
    while ((f = count_dir(pid, "fd")) != fds || (t = count_dir(pid, "task")) != tasks) {
        ck_assert_msg(now_s() - t0 < 30, "after detach %d: %d fds (%d before), %d threads (%d before)", round, f,
                      fds, count_dir(pid, "task"), tasks);
        usleep(20000);
    }
}

START_TEST(test_attach_many_times)
{
    scene_begin();
    run_t r = run_start(true, "--steps 1000000");
    run_listening(&r);
    usleep(200000); /* past the first steps: the engine's threads are up */
    const int fds = count_dir(r.pid, "fd"), tasks = count_dir(r.pid, "task");
    for (int i = 1; i <= 10; i++) {
        ts_session a = attach(&r, i % 2 ? "--batch -ex 'break fc2/*' -ex 'trend fc1/relu:out0' -ex continue"
                                        : "--batch -ex 'info breakpoints'");
        ts_status_is(&a, 0);
        ts_has(&a, "attached to mlp");
        if (i % 2)
            ts_has(&a, "Breakpoint 1 (fc2/*)");
        else
            ts_has(&a, "No breakpoints"); /* the last session's are gone */
        ts_free(&a);
        counts_back(r.pid, fds, tasks, i);
    }
    ck_assert_int_eq(waitpid(r.pid, NULL, WNOHANG), 0); /* still training */
    kill(r.pid, SIGKILL);
    reap(r.pid, WAIT_S, "the run");
    scene_end();
}
END_TEST

/* A client at the prompt, its stdin a pipe the test holds. */
typedef struct {
    pid_t pid;
    int in;
    char out[96];
} client_t;

/* Waits until the client's output ends with tail (and holds has, when
 * given). */
static void client_shows(const client_t *c, const char *tail, const char *has)
{
    double t0 = now_s();
    for (;;) {
        if (access(c->out, F_OK) == 0) { /* the child has made it */
            char *o = slurp(c->out);
            size_t n = strlen(o), k = strlen(tail);
            bool there = n >= k && strcmp(o + n - k, tail) == 0 && (!has || strstr(o, has));
            free(o);
            if (there)
                return;
        }
        ck_assert_msg(now_s() - t0 < WAIT_S, "the client never showed '%s'", tail);
        ck_assert_msg(waitpid(c->pid, NULL, WNOHANG) == 0, "the client ended before showing '%s'", tail);
        usleep(20000);
    }
}

/* A client started with opts, once its output ends with tail. */
static client_t client_at(const run_t *r, const char *opts, const char *name, const char *tail)
{
    client_t c;
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    snprintf(c.out, sizeof c.out, "%s/%s.out", xdg, name);
    char cmd[512], err[96];
    snprintf(err, sizeof err, "%s/%s.err", xdg, name);
    snprintf(cmd, sizeof cmd, "exec '%s/debugger/tdbg' attach %d %s", TDBG_BUILDDIR, (int)r->pid, opts);
    c.pid = spawn(cmd, p[0], c.out, err);
    close(p[0]);
    c.in = p[1];
    client_shows(&c, tail, NULL);
    return c;
}

#define PLAIN_ARGS "--steps 2000"

/* Ctrl-C in the client while the run trains: INTR, the run stops at the
 * next op, the prompt comes back; the client lives on. */
START_TEST(test_attach_ctrl_c)
{
    scene_begin();
    run_t r = run_start(true, "--steps 1000000");
    run_listening(&r);
    client_t c = client_at(&r, "--cli -ex continue", "c1", "(tdbg) continue\n"); /* training */
    usleep(300000);
    kill(c.pid, SIGINT);
    client_shows(&c, "\n(tdbg) ", "reason=interrupt");
    ck_assert_int_eq(write(c.in, "detach\n", 7), 7);
    close(c.in);
    ck_assert_int_eq(reap(c.pid, WAIT_S, "the client"), 0);
    char *o = slurp(c.out);
    ck_assert_msg(strstr(o, "Interrupted.") && strstr(o, "Detaching from mlp"), "%s", o);
    free(o);
    ck_assert_int_eq(waitpid(r.pid, NULL, WNOHANG), 0); /* still training */
    kill(r.pid, SIGKILL);
    reap(r.pid, WAIT_S, "the run");
    scene_end();
}
END_TEST

/* TDBG_LISTEN=tcp:127.0.0.1:0: the client with the address and token file
 * the run printed. */
START_TEST(test_attach_tcp)
{
    scene_begin();
    run_t r;
    snprintf(r.out, sizeof r.out, "%s/run.out", xdg);
    snprintf(r.err, sizeof r.err, "%s/run.err", xdg);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "TDBG_LISTEN=tcp:127.0.0.1:0 exec '%s/examples/mlp' %s %s", TDBG_BUILDDIR, MLP_ARGS,
             PLAIN_ARGS);
    r.pid = spawn(cmd, -1, r.out, r.err);
    char how[512] = "";
    double t0 = now_s();
    while (!how[0]) {
        ck_assert_msg(now_s() - t0 < WAIT_S, "the run never said where it listens");
        if (access(r.err, F_OK) == 0) { /* the child has made it */
            char *err = slurp(r.err), line[512];
            if (line_with(err, "attach with: tdbg attach tcp:", line, sizeof line))
                snprintf(how, sizeof how, "%s", strstr(line, "tdbg attach tcp:") + 12);
            free(err);
        }
        usleep(20000);
    }
    ck_assert_msg(strstr(how, " --token-file "), "%s", how);
    ts_session a = ts_sh("timeout %d '%s/debugger/tdbg' attach %s --batch -ex 'print fc1/linear:out0[0,0]' "
                         "</dev/null", WAIT_S, TDBG_BUILDDIR, how);
    ts_status_is(&a, 0);
    ts_has(&a, "fc1/linear:out0 f32 [32,64]");
    ts_has(&a, "(tdbg) detach\nDetaching from mlp");
    ts_free(&a);
    run_ends_like(&r, PLAIN_ARGS);
    scene_end();
}
END_TEST

START_TEST(test_attach_client_killed)
{
    scene_begin();
    run_t r = run_start(true, PLAIN_ARGS);
    run_listening(&r);
    client_t c = client_at(&r, "--cli -ex 'break fc2/linear' -ex continue", "c1", "origin=-\n(tdbg) ");
    kill(c.pid, SIGKILL);
    ck_assert_int_eq(reap(c.pid, WAIT_S, "the client"), 128 + SIGKILL);
    close(c.in);
    run_ends_like(&r, PLAIN_ARGS);
    char *err = slurp(r.err);
    ck_assert_msg(strstr(err, "the front end closed the connection; detached, training goes on"), "%s", err);
    free(err);
    scene_end();
}
END_TEST

START_TEST(test_attach_second_refused)
{
    scene_begin();
    run_t r = run_start(true, PLAIN_ARGS);
    run_listening(&r);
    client_t c = client_at(&r, "--cli", "c1", "origin=-\n(tdbg) "); /* at the prompt after the attach's stop */
    ts_session b = attach(&r, "--batch -ex detach");
    ts_status_is(&b, 2);
    char want[64];
    snprintf(want, sizeof want, "tdbg is attached already: pid %d, since ", (int)c.pid);
    ts_has(&b, want);
    ts_free(&b);
    /* the first goes on */
    ck_assert_int_eq(write(c.in, "print fc1/linear:out0[0,0]\ndetach\n", 34), 34);
    close(c.in);
    ck_assert_int_eq(reap(c.pid, WAIT_S, "the first client"), 0);
    char *o = slurp(c.out);
    ck_assert_msg(strstr(o, "fc1/linear:out0 f32 [32,64]") && strstr(o, "Detaching from mlp"), "%s", o);
    free(o);
    run_ends_like(&r, PLAIN_ARGS);
    scene_end();
}
END_TEST

/* A raw client: HELLO, frames up to the first PROMPT, then a frame whose
 * length is over TE_WIRE_MAX. The run closes the connection and trains on. */
START_TEST(test_attach_malformed)
{
    scene_begin();
    run_t r = run_start(true, PLAIN_ARGS);
    run_listening(&r);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    ck_assert_int_eq(te_listen_socket_path((int)r.pid, a.sun_path, sizeof a.sun_path), 0);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char hello[] = "tdbg-attach 1 pid=1 mode=cli";
    ck_assert_int_eq(te_wire_send(fd, TE_WIRE_HELLO, hello, sizeof hello - 1), 0);
    static char buf[TE_WIRE_MAX + 1];
    int type = 0;
    size_t len;
    while (type != TE_WIRE_PROMPT)
        ck_assert_int_eq(te_wire_recv(fd, &type, buf, sizeof buf, &len, WAIT_S * 1000), TE_WIRE_FRAME);
    const unsigned char bad[] = { 0xff, 0xff, 0xff, 0xff, TE_WIRE_LINE, 'x' };
    ck_assert_int_eq(write(fd, bad, sizeof bad), (ssize_t)sizeof bad);
    te_wire_status st = te_wire_recv(fd, &type, buf, sizeof buf, &len, WAIT_S * 1000);
    ck_assert_int_eq(st, TE_WIRE_FRAME);
    ck_assert_int_eq(type, TE_WIRE_END);
    ck_assert_msg(strstr(buf, "a malformed message from the front end"), "END says: %s", buf);
    ck_assert_int_eq(te_wire_recv(fd, &type, buf, sizeof buf, &len, WAIT_S * 1000), TE_WIRE_CLOSED);
    close(fd);
    run_ends_like(&r, PLAIN_ARGS);
    scene_end();
}
END_TEST

/* A raw client of the TUI's frames: connected, HELLO (mode=tui, its
 * terminal, script=N) and the script's N LINEs sent. */
static int tui_client(const run_t *r, int script, const char *lines)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    ck_assert_int_eq(te_listen_socket_path((int)r->pid, a.sun_path, sizeof a.sun_path), 0);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char hello[128];
    int n = snprintf(hello, sizeof hello, "tdbg-attach 1 pid=1 mode=tui term=xterm rows=24 cols=80 utf8=0 script=%d",
                     script);
    ck_assert_int_eq(te_wire_send(fd, TE_WIRE_HELLO, hello, (size_t)n), 0);
    for (const char *l = lines; l && *l; l += strlen(l) + 1)
        ck_assert_int_eq(te_wire_send(fd, TE_WIRE_LINE, l, strlen(l)), 0);
    return fd;
}

/* Reads TERM frames, their bytes appended to screen (NUL-free), until
 * the bytes hold want; returns the type of the frame that ended it (END,
 * or TE_WIRE_TERM when want came). */
static int tui_read(int fd, char *screen, size_t cap, const char *want)
{
    static char buf[TE_WIRE_MAX + 1];
    size_t have = strlen(screen);
    for (;;) {
        int type = 0;
        size_t len;
        ck_assert_int_eq(te_wire_recv(fd, &type, buf, sizeof buf, &len, WAIT_S * 1000), TE_WIRE_FRAME);
        if (type == TE_WIRE_END) {
            size_t k = strnlen(buf, cap - 1); /* why */
            memcpy(screen, buf, k);
            screen[k] = '\0';
            return type;
        }
        if (type != TE_WIRE_TERM)
            continue; /* WELCOME */
        for (size_t i = 0; i < len && have + 1 < cap; i++)
            if (buf[i])
                screen[have++] = buf[i];
        screen[have] = '\0';
        if (want && strstr(screen, want))
            return type;
    }
}

/* The frames of `tdbg attach --tui`: the screen comes as TERM, the
 * script sent with HELLO runs first, KEYS are typed, a RESIZE is taken;
 * `detach` typed ends it with END. A malformed RESIZE, a script cut
 * short, KEYS to a command-line session: END, the run trains on, with its
 * descriptors and threads as they were. */
START_TEST(test_attach_tui_frames)
{
    scene_begin();
    run_t r = run_start(true, "--steps 1000000");
    run_listening(&r);
    usleep(200000); /* past the first steps: the engine's threads are up */
    const int fds = count_dir(r.pid, "fd"), tasks = count_dir(r.pid, "task");
    static char screen[1 << 20];
    screen[0] = '\0';
    int fd = tui_client(&r, 1, "break nan\0");
    ck_assert_int_eq(tui_read(fd, screen, sizeof screen, "Breakpoint 1: the first op creating a NaN"), TE_WIRE_TERM);
    ck_assert_msg(strstr(screen, "PAUSED"), "no status bar on the screen");
    ck_assert_int_eq(te_wire_send(fd, TE_WIRE_RESIZE, "30 100", 6), 0);
    ck_assert_int_eq(te_wire_send(fd, TE_WIRE_KEYS, "info break\r", 11), 0);
    ck_assert_int_eq(tui_read(fd, screen, sizeof screen, "keep  y"), TE_WIRE_TERM);
    ck_assert_int_eq(te_wire_send(fd, TE_WIRE_KEYS, "detach\r", 7), 0);
    screen[0] = '\0';
    ck_assert_int_eq(tui_read(fd, screen, sizeof screen, NULL), TE_WIRE_END);
    ck_assert_str_eq(screen, "detached");
    close(fd);
    counts_back(r.pid, fds, tasks, 1);

    struct {
        int script;
        const char *lines;
        int type;
        const char *payload, *end;
    } bad[] = {
        { 0, NULL, TE_WIRE_RESIZE, "24 x", "a malformed message from the front end: resize \"24 x\"" },
        { 2, "info break\0", TE_WIRE_INTR, "", "the script's line 2 of 2: intr" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fd = tui_client(&r, bad[i].script, bad[i].lines);
        if (bad[i].type == TE_WIRE_RESIZE) /* once the TUI is up */
            ck_assert_int_eq(tui_read(fd, screen, sizeof screen, "PAUSED"), TE_WIRE_TERM);
        ck_assert_int_eq(te_wire_send(fd, bad[i].type, bad[i].payload, strlen(bad[i].payload)), 0);
        screen[0] = '\0';
        ck_assert_int_eq(tui_read(fd, screen, sizeof screen, NULL), TE_WIRE_END);
        ck_assert_str_eq(screen, bad[i].end);
        close(fd);
        counts_back(r.pid, fds, tasks, 2 + (int)i);
    }
    /* KEYS to a session of the command line, at its prompt */
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    ck_assert_int_eq(te_listen_socket_path((int)r.pid, sa.sun_path, sizeof sa.sun_path), 0);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(te_wire_send(fd, TE_WIRE_HELLO, "tdbg-attach 1 pid=1 mode=cli", 28), 0);
    static char buf[TE_WIRE_MAX + 1];
    int type = 0;
    size_t len;
    while (type != TE_WIRE_PROMPT)
        ck_assert_int_eq(te_wire_recv(fd, &type, buf, sizeof buf, &len, WAIT_S * 1000), TE_WIRE_FRAME);
    ck_assert_int_eq(te_wire_send(fd, TE_WIRE_KEYS, "x", 1), 0);
    do
        ck_assert_int_eq(te_wire_recv(fd, &type, buf, sizeof buf, &len, WAIT_S * 1000), TE_WIRE_FRAME);
    while (type != TE_WIRE_END);
    ck_assert_str_eq(buf, "a message out of place from the front end: keys");
    close(fd);
    counts_back(r.pid, fds, tasks, 4);
    ts_session a = attach(&r, "--batch -ex 'info breakpoints'"); /* no session's breakpoint is left */
    ts_has(&a, "No breakpoints");
    ts_free(&a);
    ck_assert_int_eq(waitpid(r.pid, NULL, WNOHANG), 0); /* still training */
    kill(r.pid, SIGKILL);
    reap(r.pid, WAIT_S, "the run");
    scene_end();
}
END_TEST

/* quit while attached: interactive asks, n stays; batch detaches; y ends
 * the run as quit does (status 1: it stopped). */
START_TEST(test_attach_quit_rules)
{
    scene_begin();
    run_t r = run_start(true, "--steps 1000000");
    run_listening(&r);
    ts_session a = attach(&r, "--cli -ex quit -ex n -ex detach");
    ts_status_is(&a, 0);
    ts_has(&a, "(tdbg) quit\nKill the program being debugged? (y or n) n\nNot confirmed.\n(tdbg) detach\n");
    ts_free(&a);
    a = attach(&r, "--batch -ex quit");
    ts_status_is(&a, 0);
    ts_has(&a, "quit in batch mode while attached: detaching, training goes on.");
    ts_lacks(&a, "Kill the program");
    ts_free(&a);
    ck_assert_int_eq(waitpid(r.pid, NULL, WNOHANG), 0);
    a = attach(&r, "--cli -ex quit -ex y");
    ts_status_is(&a, 1);
    ts_has(&a, "tdbg: training ended by quit at step");
    ts_has(&a, "tdbg: the program was ended by quit");
    ts_free(&a);
    ck_assert_int_eq(reap(r.pid, WAIT_S, "the run"), 1);
    scene_end();
}
END_TEST

START_TEST(test_attach_not_listening)
{
    scene_begin();
    run_t r = run_start(false, "--steps 1000000");
    usleep(100000);
    ts_session a = attach(&r, "--batch -ex detach 2>&1");
    ts_status_is(&a, 2);
    char want[128];
    snprintf(want, sizeof want, "tdbg: pid %d is not listening: start it with TDBG_LISTEN=1 (docs/attach.md)",
             (int)r.pid);
    ts_has(&a, want);
    ts_free(&a);
    kill(r.pid, SIGKILL);
    reap(r.pid, WAIT_S, "the run");
    /* a pid with no process: that pid, gone now */
    a = attach(&r, "2>&1");
    ts_status_is(&a, 2);
    snprintf(want, sizeof want, "tdbg: attach: no process with pid %d", (int)r.pid);
    ts_has(&a, want);
    ts_free(&a);
    /* detach in a session that launched the program */
    ts_session l = ts_tdbg("--batch", "detach; run", "mlp", "%s --steps 2", MLP_ARGS);
    ts_has(&l, "error: detach: no front end is attached");
    ts_free(&l);
    scene_end();
}
END_TEST

Suite *suite_attach(void)
{
    Suite *s = suite_create("attach");
    TCase *tc = tcase_create("end to end");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_attach_break_nan_print_detach);
    tcase_add_test(tc, test_attach_many_times);
    tcase_add_test(tc, test_attach_client_killed);
    tcase_add_test(tc, test_attach_second_refused);
    tcase_add_test(tc, test_attach_malformed);
    tcase_add_test(tc, test_attach_tui_frames);
    tcase_add_test(tc, test_attach_quit_rules);
    tcase_add_test(tc, test_attach_ctrl_c);
    tcase_add_test(tc, test_attach_tcp);
    tcase_add_test(tc, test_attach_not_listening);
    suite_add_tcase(s, tc);
    return s;
}
