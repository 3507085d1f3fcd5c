/*
 * attach.c — a session that a listening run (TDBG_LISTEN, engine/listen.c)
 * hands a front end's connection to: dbg_plugin_attach sets the session up
 * over it (the remote front end, remote.c), and dbg_detach takes it all
 * away again, so that the run trains on as if never attached and a later
 * attach starts clean.
 *
 * The launched session's process-wide settings stay out of it: no SIGINT
 * handler (Ctrl-C comes as an INTR frame), no crash handlers, no time
 * travel recording (it would cost the run until the end), no history.
 *
 * `tdbg attach --tui` (HELLO mode=tui) gets the TUI, run here on the
 * client's terminal (dbg_remote_term_open): the TUI reads the session's
 * own tables and tensors as it draws, so it runs where they are, and the
 * client passes bytes, as tmux's client does. When it cannot start (no
 * terminfo here for the client's TERM), the command line takes its place
 * and says why.
 */
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SCRIPT_MAX 1000       /* lines a TUI's client may send with HELLO */
#define SCRIPT_LINE_MAX 4096  /* bytes in one */
#define SCRIPT_MS 10000       /* each must come within this */

static bool was_recording; /* the program's own recording, left as it was */

/* HELLO's "term=T rows=R cols=C utf8=0|1" (mode=tui). false: missing or bad. */
static bool parse_term(const char *hello, dbg_term *t)
{
    const char *p = strstr(hello, " term=");
    const char *r = strstr(hello, " rows="), *c = strstr(hello, " cols="), *u = strstr(hello, " utf8=");
    *t = (dbg_term){ .in_fd = -1, .out_fd = -1 };
    if (!p || !r || !c || sscanf(p + 6, "%63[A-Za-z0-9._+-]", t->name) != 1 || sscanf(r + 6, "%d", &t->rows) != 1 ||
        sscanf(c + 6, "%d", &t->cols) != 1)
        return false;
    t->utf8 = u && u[6] == '1';
    t->rows = t->rows < DBG_TERM_MAX ? t->rows : DBG_TERM_MAX;
    t->cols = t->cols < DBG_TERM_MAX ? t->cols : DBG_TERM_MAX;
    return t->rows > 0 && t->cols > 0;
}

/* mode=tui: HELLO's "script=N" LINE frames follow it, the client's -x and
 * -ex commands (it has no prompt to answer them at): the session's
 * script, run first. false with why: the connection is to be closed. */
static bool read_script(int fd, const char *hello, char *why, size_t n)
{
    const char *p = strstr(hello, " script=");
    int count = 0;
    if (!p)
        return true;
    if (sscanf(p + 8, "%d", &count) != 1 || count < 0 || count > SCRIPT_MAX) {
        snprintf(why, n, "a HELLO with script=%.16s: expected 0 to %d lines", p + 8, SCRIPT_MAX);
        return false;
    }
    char *line = malloc(SCRIPT_LINE_MAX + 1);
    bool ok = line != NULL;
    for (int i = 0; ok && i < count; i++) {
        int type = 0;
        size_t len = 0;
        te_wire_status st = te_wire_recv(fd, &type, line, SCRIPT_LINE_MAX + 1, &len, SCRIPT_MS);
        if (st != TE_WIRE_FRAME || type != TE_WIRE_LINE) {
            snprintf(why, n, "the script's line %d of %d: %s", i + 1, count,
                     st == TE_WIRE_FRAME ? te_wire_type_name(type) : te_error());
            ok = false;
        } else if (!dbg_script_add(line, len)) {
            snprintf(why, n, "out of memory");
            ok = false;
        }
    }
    if (!line)
        snprintf(why, n, "out of memory");
    free(line);
    return ok;
}

static void drop_script(void)
{
    for (int i = 0; i < dbg.n_script; i++)
        free(dbg.script[i]);
    free(dbg.script);
    dbg.script = NULL;
    dbg.n_script = dbg.script_pos = 0;
}

/* The TUI on the client's terminal; NULL and why when it cannot be. */
static const dbg_frontend *start_tui(const char *hello, char *why, size_t n)
{
    const dbg_frontend *tui = dbg_frontend_find("tui");
    dbg_term t;
    if (!tui || !tui->start_on) {
        snprintf(why, n, "this debugger has no TUI");
        return NULL;
    }
    if (!parse_term(hello, &t)) {
        snprintf(why, n, "the client did not say which terminal it has (term=, rows=, cols=)");
        return NULL;
    }
    if (!dbg_remote_term_open(&t, tui->resize, why, n))
        return NULL;
    int rc = tui->start_on(&t, why, n);
    close(t.in_fd); /* the TUI holds its own copies */
    close(t.out_fd);
    if (rc != 0) {
        dbg_remote_term_close();
        return NULL;
    }
    return tui;
}

/* The TUI gives the client's terminal back (its last bytes go out
 * before END); the remote front end has nothing to give back. */
static void leave_frontend(void)
{
    if (dbg_frontend_active && dbg_frontend_active->leave)
        dbg_frontend_active->leave();
    dbg_frontend_active = NULL;
}

/* The program ends while attached: the client hears why, in END. */
static void at_exit(void)
{
    if (!dbg_remote_on())
        return;
    dbg_stop_leave(); /* the program's tensors are going */
    dbg_script_free("the program ended first");
    leave_frontend();
    dbg_remote_close(dbg.ending ? "the program was ended by quit" : "the program finished");
}

__attribute__((visibility("default"))) int dbg_plugin_attach(int fd);
int dbg_plugin_attach(int fd)
{
    static bool registered;
    if (dbg_remote_on())
        return 1; /* the engine hands out one session at a time: never here */
    if (!dbg_session_tables()) {
        fprintf(stderr, "tdbg: attach: out of memory\n");
        return 1;
    }
    dbg_session_reset();
    te_listen_info li;
    te_listen_info_get(&li);
    dbg.batch = strcmp(li.peer_mode, "batch") == 0;
    dbg.interactive = !dbg.batch;
    dbg.next_id = 1;
    dbg.step = te_step();
    dbg.program = program_invocation_short_name;
    TE_LOG(TE_LOG_DEBUGGER, TE_LOG_DEBUG, "attach: a client (%s) on fd %d at step %lld", li.peer_mode, fd,
           (long long)dbg.step);
    char why[256];
    if (strcmp(li.peer_mode, "tui") == 0 && !read_script(fd, li.peer_hello, why, sizeof why)) {
        fprintf(stderr, "tdbg: attach: %s\n", why);
        te_wire_send(fd, TE_WIRE_END, why, strlen(why));
        close(fd);
        drop_script();
        te_listen_detached();
        return 0; /* fd taken and closed */
    }
    if (!dbg_remote_open(fd, why, sizeof why)) {
        fprintf(stderr, "tdbg: attach: %s\n", why);
        return 1;
    }
    if (dbg_session_hook_add() < 0) {
        snprintf(why, sizeof why, "the debugger cannot hook into the engine: %s", te_error());
        fprintf(stderr, "tdbg: attach: %s\n", why);
        dbg_remote_close(why); /* the session's fd is closed and the listener told */
        return 0;
    }
    if (!registered)
        registered = atexit(at_exit) == 0;
    if (strstr(li.peer_hello, " job=1"))
        dbg_job_signals();
    was_recording = te_record_active();
    dbg_frontend_active = &dbg_frontend_remote;
    if (strcmp(li.peer_mode, "tui") == 0) {
        const dbg_frontend *tui = start_tui(li.peer_hello, why, sizeof why);
        if (tui)
            dbg_frontend_active = tui;
        else
            fprintf(dbg_out, "tdbg: the TUI cannot start in the run: %s; the command line instead.\n", why);
    }
    /* pause at the next op, as `step` would */
    dbg.started = true;
    dbg.mode = RUN_STEP;
    dbg.repeat = 1;
    dbg.attach_pause = true; /* or in a collective's wait, if one comes first (dbg_on_waiting) */
    TE_LOG(TE_LOG_DEBUGGER, TE_LOG_INFO, "attached (front end %s)", dbg_frontend_active->name);
    fprintf(dbg_out, "tdbg %s: attached to %s (pid %d) at step %lld, %d threads. Type 'help' for commands, "
                     "'detach' to leave it running.\n",
            TE_VERSION, dbg.program, (int)getpid(), (long long)dbg.step, te_threads());
    return 0;
}

void dbg_detach(const char *why)
{
    if (!dbg_remote_on())
        return;
    TE_LOG(TE_LOG_DEBUGGER, TE_LOG_INFO, "detach: %s; training goes on", why);
    te_hook_remove(dbg.hook);
    dbg_breaks_clear(); /* no longer observed: graph mode keeps its tensors private again */
    for (int i = 0; i < dbg.n_observed_watch; i++)
        te_observe_remove(dbg.watch[i]);
    if (dbg_dump_running())
        dbg_dump_off("detach");
    dbg_prof_detach();
    dbg_record_detach(was_recording);
    dbg_stop_leave();
    dbg_trends_clear();
    dbg_amp_reset();
    leave_frontend();
    dbg_script_free("detached first");
    free(dbg.script);
    dbg_remote_close(why);
    dbg_job_signals_off();
    dbg_session_reset();
}

bool dbg_detach_if_gone(void)
{
    const char *why = dbg_remote_gone();
    if (!why)
        return false;
    char copy[192];
    snprintf(copy, sizeof copy, "%s", why);
    if (strcmp(copy, "detached") != 0)
        fprintf(stderr, "tdbg: %s; detached, training goes on\n", copy);
    dbg_detach(copy);
    return true;
}
