/*
 * plugin.c — the debugger's entry point: engine/plugin.c calls
 * dbg_plugin_start() from te_init() when TDBG is set. It attaches the
 * session's hooks, catches Ctrl-C and the fatal signals, starts the front
 * end TDBG names (cli, batch, or one that registered itself: tui) and runs
 * the first command loop before any training (the program waits for
 * `run`). A front end that cannot start (the TUI without a terminal)
 * leaves the command line in its place.
 */
#include "crash.h"
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static void at_exit(void)
{
    fflush(stdout);
    if (!dbg.ending && !dbg_crash_exit_reported())
        fprintf(dbg_out, "tdbg: the program finished%s\n", dbg_last_stop() ? " (it stopped on the way)" : "");
    dbg_stop_leave(); /* the program's tensors are going */
    if (dbg_frontend_active && dbg_frontend_active->finish)
        dbg_frontend_active->finish(); /* the TUI: a last look, then the terminal back */
    dbg_script_free("the program ended first");
    fflush(NULL);
    /* --batch: a program that finishes after a stop leaves with status 1,
     * as documented; quit and the script's end chose their status already */
    if (dbg.batch && dbg_last_stop() && !dbg.ending)
        _exit(1);
}

/* The module's one exported symbol (it is built with -fvisibility=hidden):
 * engine/plugin.c finds it with dlsym. */
/* Tells the launcher (tdbg.c) that the debugger started: one byte on the
 * pipe it named in TDBG_HELLO_FD. The fd is closed and the variable
 * dropped, so that no program this one runs inherits either. */
static void hello(void)
{
    const char *fd_text = getenv("TDBG_HELLO_FD");
    char *end;
    long fd = fd_text ? strtol(fd_text, &end, 10) : -1;
    unsetenv("TDBG_HELLO_FD");
    if (fd < 3 || *end)
        return;
    ssize_t w = write((int)fd, "!", 1);
    (void)w; /* a launcher gone already cannot be told */
    close((int)fd);
}

__attribute__((visibility("default"))) int dbg_plugin_start(void);
int dbg_plugin_start(void)
{
    hello();
    const char *mode = getenv("TDBG");
    const dbg_frontend *fe = dbg_frontend_find(mode);
    if (!fe) {
        char names[256];
        dbg_frontend_names(names, sizeof names);
        fprintf(stderr, "tdbg: TDBG=%s: expected %s\n", mode, names);
        return 1;
    }
    dbg.batch = fe == &dbg_frontend_batch;
    dbg.interactive = !dbg.batch;
    if (!dbg_session_tables()) {
        fprintf(stderr, "tdbg: out of memory\n");
        return 1;
    }
    dbg.next_id = 1;
    dbg.step = -1;
    dbg.program = program_invocation_short_name;
    /* The program's own output and ours interleave in order. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (dbg_session_hook_add() < 0) {
        fprintf(stderr, "tdbg: %s\n", te_error());
        return 1;
    }
    dbg_record_setup();
    struct sigaction sa = { .sa_handler = dbg_on_sigint };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    dbg_fatal_handlers_install(); /* before a front end's start: curses leaves caught signals alone */
    atexit(at_exit);
    dbg_crash_setup(); /* after atexit(at_exit): an exit() mid-step is reported before it */
    char why[256];
    TE_LOG(TE_LOG_DEBUGGER, TE_LOG_DEBUG, "starting front end %s", fe->name);
    if (fe->start && fe->start(why, sizeof why) != 0) { /* no terminal: never a crash, the CLI instead */
        fprintf(stderr, "tdbg: %s; using the command line instead\n", why);
        fe = &dbg_frontend_cli;
        fe->start(why, sizeof why);
    }
    dbg_frontend_active = fe;
    TE_LOG(TE_LOG_DEBUGGER, TE_LOG_INFO, "loaded in %s (pid %d): front end %s (TDBG=%s)", dbg.program,
           (int)getpid(), fe->name, mode);
    dbg_script_load();
    fprintf(dbg_out, "tdbg %s: %s (pid %d), %d threads. Type 'help' for commands, 'run' to start.\n",
            TE_VERSION, dbg.program, (int)getpid(), te_threads());
    dbg_command_loop();
    return 0;
}
