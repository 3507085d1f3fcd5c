/*
 * plugin.c — the debugger's entry point: engine/plugin.c calls
 * dbg_plugin_start() from te_init() when TDBG is set. It attaches the
 * session's hooks, catches Ctrl-C, starts the front end (TDBG=tui: the
 * terminal UI, else the readline CLI or batch mode) and runs the first
 * command loop before any training (the program waits for `run`).
 */
#include "session.h"
#include "tui.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static void at_exit(void)
{
    fflush(stdout);
    if (!dbg.ending)
        fprintf(dbg_out, "tdbg: the program finished%s\n", dbg.stopped_ever ? " (it stopped on the way)" : "");
    if (dbg_frontend_active)
        dbg_frontend_active->finish(); /* the TUI: a last look, then the terminal back */
    dbg_cli_finish();
    fflush(NULL);
    /* --batch: status 1 when a breakpoint stopped the program, as documented */
    if (dbg.batch && dbg.stopped_ever)
        _exit(1);
}

/* The module's one exported symbol (it is built with -fvisibility=hidden):
 * engine/plugin.c finds it with dlsym. */
__attribute__((visibility("default"))) int dbg_plugin_start(void);
int dbg_plugin_start(void)
{
    const char *mode = getenv("TDBG");
    dbg.batch = strcmp(mode, "batch") == 0;
    dbg.interactive = !dbg.batch;
    if (strcmp(mode, "batch") != 0 && strcmp(mode, "cli") != 0 && strcmp(mode, "tui") != 0) {
        fprintf(stderr, "tdbg: TDBG=%s: expected cli, tui or batch\n", mode);
        return 1;
    }
    dbg.ops = calloc(DBG_MAX_OPS, sizeof *dbg.ops);
    dbg.last_ops = calloc(DBG_MAX_OPS, sizeof *dbg.last_ops);
    dbg.trends = calloc(DBG_MAX_TRENDS, sizeof *dbg.trends);
    if (!dbg.ops || !dbg.last_ops || !dbg.trends) {
        fprintf(stderr, "tdbg: out of memory\n");
        return 1;
    }
    dbg.next_id = 1;
    dbg.step = -1;
    dbg.program = program_invocation_short_name;
    /* The program's own output and ours interleave in order. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    te_hooks h = { .step_begin = dbg_on_step_begin, .step_end = dbg_on_step_end, .phase_begin = dbg_on_phase,
                   .op_end = dbg_on_op_end };
    if (te_hook_add(&h, NULL) < 0) {
        fprintf(stderr, "tdbg: %s\n", te_error());
        return 1;
    }
    struct sigaction sa = { .sa_handler = dbg_on_sigint };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    atexit(at_exit);
    if (strcmp(mode, "tui") == 0) {
        char why[256];
        if (tui_start(why, sizeof why) != 0) /* no terminal: never a crash, the CLI instead */
            fprintf(stderr, "tdbg: %s; using the command line instead\n", why);
    }
    dbg_cli_init();
    fprintf(dbg_out, "tdbg %s: %s (pid %d), %d threads. Type 'help' for commands, 'run' to start.\n",
            TE_VERSION, dbg.program, (int)getpid(), te_threads());
    dbg_command_loop();
    return 0;
}
