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

/* `continue N`: the breakpoint stopped at lets its next N-1 hits pass. N
 * counts nothing at any other stop, so it is refused there, with why,
 * rather than dropped. */
static bool ignore_hits(long long n)
{
    const dbg_stop *s = dbg_last_stop();
    if (!s || !s->active) {
        dbg_error("continue N: training is %s, not stopped at a breakpoint; N counts a breakpoint's hits",
                  dbg.started ? "running" : "not started");
        return false;
    }
    if (!s->break_id) {
        dbg_error("continue N: stopped by %s, not at a breakpoint; N counts a breakpoint's hits", s->reason);
        return false;
    }
    for (int i = 0; i < dbg.n_breaks; i++)
        if (dbg.breaks[i].id == s->break_id) {
            dbg.breaks[i].ignore = n - 1;
            fprintf(dbg_out, "Will ignore the next %lld hits of breakpoint %d.\n", n - 1, s->break_id);
            return true;
        }
    dbg_error("continue N: breakpoint %d is deleted (a tbreak goes once it stopped); N counts a breakpoint's hits",
              s->break_id);
    return false;
}

static bool cmd_continue(const char *args)
{
    if (args[0]) {
        long long n;
        if (!dbg_parse_int(args, "continue N", 1, &n) || !ignore_hits(n))
            return false;
    }
    return resume(RUN_GO);
}

/* `step N` / `next N`: N times, as in gdb; the session counts down
 * (dbg.repeat) and a breakpoint on the way stops first. */
static bool repeat(const char *args, const char *what, dbg_run_mode mode)
{
    long long n = 1;
    if (args[0] && !dbg_parse_int(args, what, 1, &n))
        return false;
    dbg.repeat = n;
    return resume(mode);
}

static bool cmd_step(const char *args) { return repeat(args, "step N", RUN_STEP); }

static bool cmd_next(const char *args) { return repeat(args, "next N", RUN_NEXT); }

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

int dbg_quit_status(void) { return dbg_last_stop() ? 1 : 0; }

/* `detach`: an attached front end leaves, the run trains on. */
static bool cmd_detach(const char *args)
{
    (void)args;
    if (!dbg_remote_on()) {
        dbg_error("detach: no front end is attached (this session started the program: 'quit' ends it; "
                  "'tdbg attach' attaches to a run started with TDBG_LISTEN=1)");
        return false;
    }
    fprintf(dbg_out, "Detaching from %s (pid %d) at step %lld; training goes on.\n", dbg.program, (int)getpid(),
            (long long)dbg.step);
    dbg_detach("detached");
    return true;
}

/* quit while attached, as gdb: ask before killing the run (interactive),
 * detach (batch). false: the user said no, or the front end went. */
static bool quit_attached(void)
{
    if (dbg.batch) {
        fprintf(dbg_out, "quit in batch mode while attached: detaching, training goes on.\n");
        return false;
    }
    for (;;) {
        char *a = dbg_read_line("Kill the program being debugged? (y or n) ");
        if (!a)
            return false;
        char w[16];
        dbg_word(a, w, sizeof w);
        free(a);
        if (strcmp(w, "y") == 0 || strcmp(w, "yes") == 0)
            return true;
        if (strcmp(w, "n") == 0 || strcmp(w, "no") == 0) {
            fprintf(dbg_out, "Not confirmed.\n");
            return false;
        }
        fprintf(dbg_out, "Please answer y or n.\n");
    }
}

/* `quit [N]`: status N (0-255) as gdb's `quit EXPR`, else dbg_quit_status(). */
static bool cmd_quit(const char *args)
{
    long long status = dbg_quit_status();
    if (args[0] && (!dbg_parse_int(args, "quit N", 0, &status) || status > 255)) {
        if (status > 255)
            dbg_error("quit N: an exit status is 0 to 255, got '%s'", args);
        return false;
    }
    if (dbg_remote_on() && !quit_attached()) {
        if (!dbg.batch)
            return false;
        dbg_detach("detached");
        return true;
    }
    fprintf(dbg_out, "tdbg: training ended by quit at step %lld\n", (long long)(dbg.step < 0 ? 0 : dbg.step));
    dbg.ending = true;
    exit((int)status); /* at_exit flushes and reports */
}

/* Each resumes training (quit: ends it), and starts it when `run` was not
 * given yet; their entries say so (.resumes). */
const dbg_cmd dbg_cmds_exec[] = {
    { .name = "run", .alias = "r", .usage = "run", .help = "start training (the program waits for this)",
      .needs = DBG_CMD_NOT_STARTED, .resumes = true, .run = cmd_run },
    { .name = "continue", .alias = "c", .usage = "continue [N]", .help = "go on until a breakpoint hits\n"
      "With N, ignore the breakpoint stopped at N-1 more times (only at a breakpoint's stop).",
      .max_words = 1, .resumes = true, .run = cmd_continue },
    { .name = "step", .alias = "s", .usage = "step [N]", .help = "run the next op (N ops) and stop after it\n"
      "A breakpoint hit on the way stops first.", .max_words = 1, .resumes = true, .run = cmd_step },
    { .name = "next", .alias = "n", .usage = "next [N]",
      .help = "run to the start of the next training step (the Nth next one)\n"
      "A breakpoint hit on the way stops first.", .max_words = 1, .resumes = true, .run = cmd_next },
    { .name = "finish", .usage = "finish", .help = "run to the end of the current phase (forward, backward, update)",
      .needs = DBG_CMD_STARTED | DBG_CMD_STOPPED, .resumes = true, .run = cmd_finish },
    { .name = "until", .alias = "u", .usage = "until step N", .help = "run to the start of step N",
      .args = { { .words = DBG_WORDS("step") } }, .max_words = 2, .resumes = true, .run = cmd_until },
    { .name = "quit", .alias = "q", .usage = "quit [N]", .help = "end training and the program\n"
      "The exit status is N, else 1 when training stopped at least once, else 0 (every front end).\n"
      "Attached with 'tdbg attach': asks 'Kill the program being debugged? (y or n)' first; --batch detaches.",
      .max_words = 1, .resumes = true, .run = cmd_quit },
    { .name = "detach", .usage = "detach", .help = "leave a run attached to with 'tdbg attach': training goes on\n"
      "Breakpoints, watches, dumps and profiles this session set go; the run trains on as if never attached.",
      .resumes = true, .run = cmd_detach },
    { .name = NULL },
};
