/*
 * crash.c — a crash is reported, not suffered. On SIGSEGV, SIGBUS, SIGFPE,
 * SIGILL or SIGABRT the fatal-signal handler (frontend.c) calls
 * dbg_crash_report() after the front end gave the terminal back; it writes
 *
 *   tdbg: the program received SIGSEGV (segmentation fault), fault address 0x0
 *     during step 3 (phase forward)
 *     last op started:  fc2/linear (Linear) at examples/mlp.c:57, running: it had not finished
 *     last op finished: fc1/relu (ReLU) at examples/mlp.c:56
 *     backtrace of the crashing thread:
 *       #0  0x7f3a... crash_segv at engine/inject.c:146 (libtdbg-engine.so.0.0.0)
 *       ...
 *   stopped: step=3 phase=forward op=fc2/linear type=Linear reason=signal tensor=- index=- origin=- signal=SIGSEGV
 *
 * to the original stderr (the TUI hands over the fd its capture saved),
 * and the signal then takes its old course: the process dies of it.
 *
 * How the handler stays async-signal-safe:
 *  - It runs once per process (a flag), on an alternate signal stack set
 *    up at start for the training thread (a stack overflow still gets a
 *    report); other threads use their own stack.
 *  - It calls only write(), send() with MSG_NOSIGNAL (a helper that died
 *    makes an error, not a SIGPIPE), poll(), read(), clock_gettime() and
 *    libunwind's local unwinding (unw_init_local2, unw_step, unw_get_reg,
 *    unw_is_signal_frame: documented signal-safe; libunwind blocks signals
 *    around its own locks).
 *  - Text is built in a static buffer by hand (no printf, no malloc, no
 *    stdio, no locale); what it names was copied beforehand: the last op
 *    started and finished are kept by hooks in fixed buffers on every op,
 *    the step and phase are the session's plain fields.
 *  - Names and lines for the addresses come from a helper process forked
 *    at start (symbolize.c): the handler writes raw addresses to it and
 *    waits for the lines with poll() and a deadline. Without an answer it
 *    prints the raw addresses (dladdr would give module+offset, but it is
 *    not async-signal-safe).
 *  - Dumps: nothing. The dump's writer and syncer threads own every HDF5
 *    call and the queue under a mutex; the handler can take neither. A
 *    step file gets its final name only once it is complete and fsynced,
 *    so a crash leaves every step already published readable and loses
 *    the steps still queued in memory (and the step being built).
 *
 * The exit() report: a program that calls exit() while a step runs (not
 * through `quit`) is told with on_exit()'s status, the step, phase and
 * the last op, and a `stopped:` line with reason=exit. That runs in the
 * normal exit path: stdio is fine there, and it goes to dbg_out.
 */
#include "crash.h"
#include "session.h"

#define UNW_LOCAL_ONLY
#include <errno.h>
#include <libunwind.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define REPLY_WAIT_MS 10000 /* the helper reads DWARF: a sanitizer build on a busy machine */
#define ALT_STACK_BYTES (256 * 1024)

/* The last op that started and the last that finished, copied by hooks. */
typedef struct op_mark {
    bool set;
    char name[TE_NAME_MAX];
    const char *type; /* the engine's static strings */
    te_loc loc;
    int64_t step;
} op_mark;

static op_mark started, finished;
static volatile sig_atomic_t running;    /* started has not finished */
static int helper_fd = -1;               /* the symbolising helper's socket */
static volatile sig_atomic_t report_fd = -1; /* -1: fd 2 */
static bool exit_reported;

void dbg_crash_set_fd(int fd) { report_fd = fd; }
bool dbg_crash_exit_reported(void) { return exit_reported; }

/* ---- the hooks ------------------------------------------------------------------- */

static void mark(op_mark *m, const te_op_record *r)
{
    size_t i = 0;
    for (; r->name[i] && i < sizeof m->name - 1; i++)
        m->name[i] = r->name[i];
    m->name[i] = '\0';
    m->type = r->type;
    m->loc = r->loc;
    m->step = r->step;
    m->set = true;
}

static void on_op_begin(const te_op_record *r, void *user)
{
    (void)user;
    mark(&started, r);
    running = 1;
}

static void on_op_end(const te_op_record *r, void *user)
{
    (void)user;
    mark(&finished, r);
    running = 0;
}

static void on_step_end(int64_t step, void *user)
{
    (void)step;
    (void)user;
    running = 0; /* an op that failed with an error never reached op_end */
}

/* ---- text without stdio -------------------------------------------------------------- */

static char out[8192];
static size_t out_len;

static void flush_out(void)
{
    int fd = report_fd >= 0 ? report_fd : STDERR_FILENO;
    const char *s = out;
    while (out_len) {
        ssize_t k = write(fd, s, out_len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        s += k;
        out_len -= (size_t)k;
    }
    out_len = 0;
}

static void put(const char *s)
{
    for (; s && *s; s++) {
        if (out_len == sizeof out)
            flush_out();
        out[out_len++] = *s;
    }
}

static void put_dec(int64_t v)
{
    char t[24];
    int i = 0;
    uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
    do
        t[i++] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        t[i++] = '-';
    char r[25];
    int n = 0;
    while (i)
        r[n++] = t[--i];
    r[n] = '\0';
    put(r);
}

static void put_hex(uint64_t v)
{
    char t[19] = "0x";
    int n = 2;
    for (int shift = 60; shift >= 0; shift -= 4) {
        unsigned d = (unsigned)(v >> shift) & 15;
        if (d || n > 2 || shift == 0)
            t[n++] = "0123456789abcdef"[d];
    }
    t[n] = '\0';
    put(t);
}

/* ---- the report ------------------------------------------------------------------------ */

static const struct {
    int sig;
    const char *name, *what;
} crash_signals[] = {
    { SIGSEGV, "SIGSEGV", "segmentation fault" }, { SIGBUS, "SIGBUS", "bus error" },
    { SIGFPE, "SIGFPE", "arithmetic exception" }, { SIGILL, "SIGILL", "illegal instruction" },
    { SIGABRT, "SIGABRT", "aborted" },
};

static void put_op(const char *label, const op_mark *m, bool running_now)
{
    put(label);
    if (!m->set) {
        put("none yet\n");
        return;
    }
    put(m->name);
    put(" (");
    put(m->type);
    put(") at ");
    put(dbg_short_path(m->loc.file));
    put(":");
    put_dec(m->loc.line);
    if (m->step != dbg.step) {
        put(", step ");
        put_dec(m->step);
    }
    if (running_now)
        put(", running: it had not finished");
    put("\n");
}

/* Where training was: "during step 3 (phase forward)", between steps, or
 * before the first. */
static void put_where(void)
{
    if (dbg.in_step) {
        put("  during step ");
        put_dec(dbg.step);
        put(" (phase ");
        put(te_phase_name(dbg.phase));
        put(")\n");
    } else if (dbg.step >= 0) {
        put("  between steps, after step ");
        put_dec(dbg.step);
        put("\n");
    } else {
        put("  before the first step\n");
    }
}

/* The op a `stopped:` line names: the last one started in this step. */
static const op_mark *op_of_step(void)
{
    return dbg.in_step && started.set && started.step == dbg.step ? &started : NULL;
}

static int64_t ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)(t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Asks the helper for n lines; returns how many came (in reply, each
 * ending in '\n'), 0 without a helper. */
static int symbolize(const uint64_t *look, int n, char *reply, size_t cap)
{
    if (helper_fd < 0)
        return 0;
    char req[sizeof(uint32_t) + DBG_SYM_MAX * sizeof(uint64_t)];
    uint32_t cnt = (uint32_t)n;
    memcpy(req, &cnt, sizeof cnt);
    memcpy(req + sizeof cnt, look, (size_t)n * sizeof *look);
    if (!dbg_send_all(helper_fd, req, sizeof cnt + (size_t)n * sizeof *look))
        return 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t got = 0;
    int lines = 0;
    while (lines < n && got < cap) {
        int64_t left = REPLY_WAIT_MS - ms_since(&t0);
        if (left <= 0)
            break;
        struct pollfd p = { helper_fd, POLLIN, 0 };
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t k = read(helper_fd, reply + got, cap - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        for (ssize_t i = 0; i < k; i++)
            lines += reply[got + (size_t)i] == '\n';
        got += (size_t)k;
    }
    return lines < n ? lines : n;
}

/* The crashing thread's frames from the signal's context: the first is
 * the instruction that faulted. */
static void put_backtrace(void *uctx)
{
    static uint64_t pc[DBG_SYM_MAX], look[DBG_SYM_MAX];
    static char reply[DBG_SYM_MAX * DBG_SYM_LINE];
    unw_cursor_t c;
    int n = 0;
    put("  backtrace of the crashing thread:\n");
    if (!uctx || unw_init_local2(&c, (unw_context_t *)uctx, UNW_INIT_SIGNAL_FRAME) != 0) {
        put("    (cannot unwind)\n");
        return;
    }
    bool exact = true; /* the faulting instruction, or the one after a signal frame */
    do {
        unw_word_t ip = 0;
        if (unw_get_reg(&c, UNW_REG_IP, &ip) != 0 || ip == 0)
            break;
        pc[n] = ip;
        look[n] = exact ? ip : ip - 1; /* a return address: the call is the byte before */
        n++;
        exact = unw_is_signal_frame(&c) > 0;
    } while (n < DBG_SYM_MAX && unw_step(&c) > 0);
    flush_out(); /* what is known so far is out before the wait */
    int named = symbolize(look, n, reply, sizeof reply);
    const char *line = reply;
    for (int i = 0; i < n; i++) {
        put("    #");
        put_dec(i);
        put(i < 10 ? "  " : " ");
        put_hex(pc[i]);
        if (i < named) {
            const char *end = strchr(line, '\n');
            put(" ");
            for (; line < end; line++) {
                if (out_len == sizeof out)
                    flush_out();
                out[out_len++] = *line;
            }
            line++;
        }
        put("\n");
    }
    if (named < n)
        put(helper_fd < 0 ? "    (addresses only: the helper that names them did not start)\n"
                          : "    (addresses only where the helper that names them did not answer)\n");
}

void dbg_crash_report(int sig, const siginfo_t *info, void *uctx)
{
    static volatile sig_atomic_t reported;
    int k = 0, nsig = (int)(sizeof crash_signals / sizeof crash_signals[0]);
    while (k < nsig && crash_signals[k].sig != sig)
        k++;
    if (k == nsig || reported)
        return;
    reported = 1;
    int saved_errno = errno;
    put("\ntdbg: the program received ");
    put(crash_signals[k].name);
    put(" (");
    put(crash_signals[k].what);
    put(")");
    if (info && info->si_code > 0 && sig != SIGABRT) { /* raised by the hardware: an address */
        put(sig == SIGSEGV || sig == SIGBUS ? ", fault address " : ", at instruction ");
        put_hex((uint64_t)(uintptr_t)info->si_addr);
    }
    put("\n");
    put_where();
    put_op("  last op started:  ", &started, running);
    put_op("  last op finished: ", &finished, false);
    put_backtrace(uctx);
    const op_mark *m = op_of_step();
    put("stopped: step=");
    put_dec(dbg.step < 0 ? 0 : dbg.step);
    put(" phase=");
    put(te_phase_name(dbg.phase));
    put(" op=");
    put(m ? m->name : "-");
    put(" type=");
    put(m ? m->type : "-");
    put(" reason=signal tensor=- index=- origin=- signal=");
    put(crash_signals[k].name);
    put("\n");
    flush_out();
    errno = saved_errno;
}

/* ---- exit() during a step -------------------------------------------------------------- */

static void on_program_exit(int status, void *arg)
{
    (void)arg;
    if (!dbg.in_step || dbg.ending)
        return;
    exit_reported = true;
    fflush(stdout);
    FILE *f = dbg_out;
    fprintf(f, "\ntdbg: the program exited with status %d during step %lld (phase %s), ", status,
            (long long)dbg.step, te_phase_name(dbg.phase));
    if (finished.set && finished.step == dbg.step)
        fprintf(f, "after op %s (%s:%d)\n", finished.name, dbg_short_path(finished.loc.file), finished.loc.line);
    else
        fprintf(f, "before its first op\n");
    if (running && started.step == dbg.step)
        fprintf(f, "  in op %s (%s:%d), which had not finished\n", started.name, dbg_short_path(started.loc.file),
                started.loc.line);
    const op_mark *m = op_of_step();
    fprintf(f, "stopped: step=%lld phase=%s op=%s type=%s reason=exit tensor=- index=- origin=- status=%d\n",
            (long long)dbg.step, te_phase_name(dbg.phase), m ? m->name : "-", m ? m->type : "-", status);
    fflush(f);
}

/* ---- set-up ---------------------------------------------------------------------------- */

void dbg_crash_setup(void)
{
    static char alt_stack[ALT_STACK_BYTES];
    stack_t ss = { .ss_sp = alt_stack, .ss_size = sizeof alt_stack };
    if (sigaltstack(&ss, NULL) != 0)
        fprintf(stderr, "tdbg: no alternate signal stack (%s): a stack overflow will not be reported\n",
                strerror(errno));
    helper_fd = dbg_symbolizer_start();
    if (helper_fd < 0)
        fprintf(stderr, "tdbg: cannot start the helper that names a crash's frames (%s): a backtrace "
                        "will show addresses only\n", strerror(errno));
    te_hooks h = { .op_begin = on_op_begin, .op_end = on_op_end, .step_end = on_step_end };
    const int handle = te_hook_add(&h, NULL);
    if (handle < 0)
        fprintf(stderr, "tdbg: %s: a crash report will not name the last ops\n", te_error());
    te_hook_defer(handle, TE_HOOK_NO_DATA); /* names only: no reason to see every op's data */
    on_exit(on_program_exit, NULL);
}
