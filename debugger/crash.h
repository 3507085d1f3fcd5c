/*
 * crash.h — a crash is reported, not suffered: the report the fatal-signal
 * handler writes (crash.c), the report of an exit() in the middle of a
 * step, and the helper process that turns addresses into function and
 * source line outside the handler (symbolize.c).
 */
#ifndef TDBG_CRASH_H
#define TDBG_CRASH_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* At plugin start, on the training thread, after atexit(at_exit): the
 * alternate signal stack, the symbolising helper, the hooks that keep the
 * last op started and finished, the exit() report (it runs before
 * at_exit). */
void dbg_crash_setup(void);
/* From the fatal-signal handler (frontend.c), after the front end's
 * fatal_signal: writes the report for SIGSEGV, SIGBUS, SIGFPE, SIGILL and
 * SIGABRT, once per process; async-signal-safe. */
void dbg_crash_report(int sig, const siginfo_t *info, void *uctx);
/* Where the report goes: a front end that took fd 2 (the TUI's capture)
 * hands over the original stderr; -1 gives fd 2 back. */
void dbg_crash_set_fd(int fd);
/* The program exit()ed during a step and that was reported: at_exit says
 * nothing more. */
bool dbg_crash_exit_reported(void);

/* ---- symbolize.c ---------------------------------------------------------------
 * A process forked at start that answers "which function and line is this
 * address" for its parent. Request: a uint32_t count n (at most
 * DBG_SYM_MAX), then n uint64_t addresses. Reply: n lines, one per address,
 * "FUNC at FILE:LINE (MODULE)", "FUNC (MODULE+0xOFF)" or "?? (MODULE+0xOFF)"
 * where debug information or symbols lack. */
#define DBG_SYM_MAX 64
#define DBG_SYM_LINE 320
/* Forks the helper; returns the parent's end of its socket (close-on-exec),
 * or -1 when it could not be started. */
int dbg_symbolizer_start(void);
/* Sends all n bytes of s on the socket fd, MSG_NOSIGNAL (a closed peer is
 * an error, not a SIGPIPE); false when it could not. Async-signal-safe:
 * the handler's request and the helper's replies both go through it. */
bool dbg_send_all(int fd, const void *s, size_t n);

#endif
