/*
 * cmd_exec.c — running: run, continue, step, next, finish, until, quit.
 * Each sets how far training goes before the next stop and resumes it.
 */
#include "cmd.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>

static bool resume(dbg_run_mode mode)
{
    dbg.started = true;
    dbg.mode = mode;
    return true;
}

static bool cmd_run(const char *args)
{
    (void)args;
    if (dbg.started) {
        dbg_error("training is already running (step %lld); 'continue' goes on", (long long)dbg.step);
        return false;
    }
    return resume(RUN_GO);
}

static bool cmd_continue(const char *args)
{
    if (args[0]) {
        long long n;
        if (!dbg_parse_int(args, "continue N", 1, &n))
            return false;
        for (int i = 0; i < dbg.n_breaks; i++)
            if (dbg.breaks[i].id == dbg.stopped_id) {
                dbg.breaks[i].ignore = n - 1;
                fprintf(dbg_out, "Will ignore the next %lld hits of breakpoint %d.\n", n - 1, dbg.stopped_id);
            }
    }
    return resume(RUN_GO);
}

static bool cmd_step(const char *args)
{
    (void)args;
    return resume(RUN_STEP);
}

static bool cmd_next(const char *args)
{
    (void)args;
    return resume(RUN_NEXT);
}

static bool cmd_finish(const char *args)
{
    (void)args;
    if (!dbg.started || !dbg.in_step) {
        dbg_error("finish: no step is running; 'next' stops at the next one");
        return false;
    }
    dbg.finish_phase = dbg.phase;
    dbg.finish_step = dbg.step;
    return resume(RUN_FINISH);
}

static bool cmd_until(const char *args)
{
    char w[16];
    const char *rest = dbg_word(args, w, sizeof w);
    long long n;
    if (strcmp(w, "step") != 0) {
        dbg_error("until: expected 'until step N', got '%s'", args);
        return false;
    }
    if (!dbg_parse_int(rest, "until step N", 0, &n))
        return false;
    if (dbg.started && n <= dbg.step) {
        dbg_error("until step %lld: training is at step %lld already", n, (long long)dbg.step);
        return false;
    }
    dbg.until_step = n;
    return resume(RUN_UNTIL);
}

static bool cmd_quit(const char *args)
{
    (void)args;
    fprintf(dbg_out, "tdbg: training ended by quit at step %lld\n", (long long)(dbg.step < 0 ? 0 : dbg.step));
    dbg.ending = true;
    exit(dbg.batch && dbg.stopped_ever ? 1 : 0); /* at_exit flushes and reports */
}

const dbg_cmd dbg_cmds_exec[] = {
    { "run", "r", "run", "start training (the program waits for this)", cmd_run },
    { "continue", "c", "continue [N]", "go on until a breakpoint hits\n"
      "With N, ignore the breakpoint stopped at N-1 more times.", cmd_continue },
    { "step", "s", "step", "run the next op and stop after it", cmd_step },
    { "next", "n", "next", "run to the start of the next training step", cmd_next },
    { "finish", NULL, "finish", "run to the end of the current phase (forward, backward, update)", cmd_finish },
    { "until", "u", "until step N", "run to the start of step N", cmd_until },
    { "quit", "q", "quit", "end training and the program", cmd_quit },
    { NULL, NULL, NULL, NULL, NULL },
};
