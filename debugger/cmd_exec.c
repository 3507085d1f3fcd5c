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

/* Each resumes training, and starts it when `run` was not given yet. */
const dbg_cmd dbg_cmds_exec[] = {
    { .name = "run", .alias = "r", .usage = "run", .help = "start training (the program waits for this)",
      .needs = DBG_CMD_NOT_STARTED, .run = cmd_run },
    { .name = "continue", .alias = "c", .usage = "continue [N]", .help = "go on until a breakpoint hits\n"
      "With N, ignore the breakpoint stopped at N-1 more times.", .run = cmd_continue },
    { .name = "step", .alias = "s", .usage = "step", .help = "run the next op and stop after it", .run = cmd_step },
    { .name = "next", .alias = "n", .usage = "next", .help = "run to the start of the next training step",
      .run = cmd_next },
    { .name = "finish", .usage = "finish", .help = "run to the end of the current phase (forward, backward, update)",
      .needs = DBG_CMD_STARTED | DBG_CMD_STOPPED, .run = cmd_finish },
    { .name = "until", .alias = "u", .usage = "until step N", .help = "run to the start of step N",
      .args = { { .words = DBG_WORDS("step") } }, .run = cmd_until },
    { .name = "quit", .alias = "q", .usage = "quit", .help = "end training and the program", .run = cmd_quit },
    { .name = NULL },
};
