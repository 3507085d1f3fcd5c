/*
 * frontend.c — the front ends the debugger can talk through, and the
 * fatal-signal handler they share.
 *
 * The CLI and batch mode are built in (cli.c); another front end linked
 * into the debugger library registers itself from a constructor (the TUI,
 * tui/tui.c), so the debugger names none of them and includes nothing of
 * theirs. plugin.c picks one by TDBG's value.
 *
 * One handler for the fatal signals, for every front end: it lets the
 * active one clean up (the TUI gives the terminal back), writes the crash
 * report for the crash signals (crash.c), then the signal takes its old
 * course, so the program still dies of it (a sanitizer's report included).
 * It runs on the alternate stack where the thread has one (crash.c sets
 * one up for the training thread).
 */
#include "crash.h"
#include "session.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static const dbg_frontend *table[DBG_MAX_FRONTENDS] = { &dbg_frontend_cli, &dbg_frontend_batch };
static int n_table = 2;
const dbg_frontend *dbg_frontend_active;

int dbg_frontend_register(const dbg_frontend *f)
{
    const char *why = NULL;
    if (!f || !f->name || !f->read_line)
        why = "it needs a name and read_line";
    else if (dbg_frontend_find(f->name))
        why = "the name is taken";
    else if (n_table == DBG_MAX_FRONTENDS)
        why = "the table is full (DBG_MAX_FRONTENDS)";
    if (why) {
        /* from a constructor, before main: stderr is all there is */
        fprintf(stderr, "tdbg: cannot register the front end '%s': %s\n", f && f->name ? f->name : "?", why);
        return -1;
    }
    table[n_table++] = f;
    return 0;
}

const dbg_frontend *dbg_frontend_find(const char *name)
{
    for (int i = 0; i < n_table; i++)
        if (strcmp(table[i]->name, name) == 0)
            return table[i];
    return NULL;
}

void dbg_frontend_names(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n_table && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i == 0 ? "" : i == n_table - 1 ? " or " : ", ",
                                 table[i]->name);
}

/* ---- fatal signals ------------------------------------------------------------ */

static const int fatal[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGHUP, SIGQUIT };
#define N_FATAL (int)(sizeof fatal / sizeof fatal[0])
static struct sigaction old_action[N_FATAL];

/* The front end's clean-up, the crash report, then the signal's old action: a fault the
 * kernel raised (SIGSEGV, SIGBUS, SIGFPE, SIGILL with si_code > 0) happens
 * again when the handler returns; any other signal (kill, abort, a hangup)
 * is raised again, and delivered once the handler returns. */
static void on_fatal(int sig, siginfo_t *info, void *ctx)
{
    int saved_errno = errno;
    const dbg_frontend *f = dbg_frontend_active;
    if (f && f->fatal_signal)
        f->fatal_signal(sig);
    dbg_crash_report(sig, info, ctx);
    for (int i = 0; i < N_FATAL; i++)
        if (fatal[i] == sig)
            sigaction(sig, &old_action[i], NULL);
    bool fault = sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL;
    if (!fault || info->si_code <= 0)
        raise(sig);
    errno = saved_errno;
}

void dbg_fatal_handlers_install(void)
{
    static bool installed;
    if (installed)
        return;
    installed = true;
    for (int i = 0; i < N_FATAL; i++) {
        struct sigaction sa = { .sa_sigaction = on_fatal, .sa_flags = SA_SIGINFO | SA_ONSTACK };
        sigemptyset(&sa.sa_mask);
        sigaction(fatal[i], &sa, &old_action[i]);
    }
}
