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
 */
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool was_recording; /* the program's own recording, left as it was */

/* The program ends while attached: the client hears why, in END. */
static void at_exit(void)
{
    if (!dbg_remote_on())
        return;
    dbg_stop_leave(); /* the program's tensors are going */
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
    char why[256];
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
    was_recording = te_record_active();
    dbg_frontend_active = &dbg_frontend_remote;
    /* pause at the next op, as `step` would */
    dbg.started = true;
    dbg.mode = RUN_STEP;
    dbg.repeat = 1;
    fprintf(dbg_out, "tdbg %s: attached to %s (pid %d) at step %lld, %d threads. Type 'help' for commands, "
                     "'detach' to leave it running.\n",
            TE_VERSION, dbg.program, (int)getpid(), (long long)dbg.step, te_threads());
    return 0;
}

void dbg_detach(const char *why)
{
    if (!dbg_remote_on())
        return;
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
    dbg_remote_close(why);
    dbg_frontend_active = NULL;
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
