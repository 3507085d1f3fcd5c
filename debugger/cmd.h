/*
 * cmd.h — the command table. Each group of commands lives in its own file
 * (cmd_exec.c, cmd_break.c, cmd_inspect.c, cmd_dump.c, cmd_amp.c, cmd_prof.c, cmd_record.c, cmd_data.c; a front end's, as
 * tui/cmd_tui.c) and exports a table whose entries declare what they need
 * (a started program, a stop), whether they resume training, how many
 * words they take, and what those words name (for completion).
 * cmd.c looks names up (exact, alias, or an unambiguous prefix, as in gdb),
 * checks the needs and the number of words once before a command runs, suggests the nearest
 * command for a typo, and prints help.
 *
 * Adding a command: one entry in its group's table and its function.
 */
#ifndef TDBG_CMD_H
#define TDBG_CMD_H

#include <stdbool.h>
#include <stddef.h>

/* What a command needs; dbg_execute refuses it otherwise, with one message
 * form for every command ("finish: training has not started; 'run' starts
 * it"), so that the command itself does not check. */
enum {
    DBG_CMD_STARTED = 1 << 0,    /* training was started (`run`, or any command that resumes it) */
    DBG_CMD_STOPPED = 1 << 1,    /* training is paused inside a step: at an op, a phase or the step's start */
    DBG_CMD_NOT_STARTED = 1 << 2, /* training was not started yet (`run` itself) */
    /* training stopped at least once, now or before (dbg_last_stop()): for
     * a command that reads the last stop's data, not the live program, and
     * so works after the program's end too (the TUI's `jump`) */
    DBG_CMD_EVER_STOPPED = 1 << 3
};

/* What a command's words name, for Tab completion: the sources of the
 * candidates, ORed. 0: nothing to offer (a number, free text). */
enum {
    DBG_ARG_OP = 1 << 0,      /* an op name: this step's ops and the rest of the last step's */
    DBG_ARG_TYPE = 1 << 1,    /* type:TYPE of those ops */
    DBG_ARG_TENSOR = 1 << 2,  /* OP:outK, param:NAME, grad:NAME */
    DBG_ARG_BREAK = 1 << 3,   /* a breakpoint number */
    DBG_ARG_COND = 1 << 4,    /* the words of a condition: has_nan, abs_max, and, phase ... */
    DBG_ARG_COMMAND = 1 << 5, /* a command name */
    DBG_ARG_SETTING = 1 << 6  /* a front end's setting (`set mouse off`) */
};

typedef struct dbg_arg {
    unsigned kinds;           /* DBG_ARG_* */
    const char *const *words; /* keywords offered too, NULL-terminated (DBG_WORDS), or NULL */
} dbg_arg;

/* dbg_cmd.max_words of a command whose words are free text. */
#define DBG_WORDS_ANY (-1)

/* A NULL-terminated keyword list for dbg_arg.words. */
#define DBG_WORDS(...) ((const char *const[]){ __VA_ARGS__, NULL })

typedef struct dbg_cmd {
    const char *name;
    const char *alias;   /* one-letter shortcut, or NULL */
    const char *usage;   /* "break WHAT [if COND]" */
    const char *help;    /* one line, then details after a newline */
    unsigned needs;      /* DBG_CMD_*, checked before run */
    /* it goes on with training (run, continue, step, ...) or ends it
     * (quit): run returns true for it. A front end whose program has
     * ended takes such a command as "leave". */
    bool resumes;
    dbg_arg args[2];     /* the first word after the name, then every later one */
    /* how many words may follow the name: 0 (the default: none), up to N,
     * or DBG_WORDS_ANY (free text: a condition, slices, a spec). More are
     * refused by dbg_execute, naming the first extra word and the usage. */
    int max_words;
    /* args: the rest of the line, trimmed; returns true to resume training */
    bool (*run)(const char *args);
} dbg_cmd;

/* `set NAME VALUE`: a front end's setting (`set mouse off`). `set` runs
 * the handler when NAME is one and the line has no '='. */
typedef struct dbg_setting {
    const char *name;
    bool (*set)(const char *value);
} dbg_setting;

/* A group of commands as help lists them, with the settings that go with
 * them. Tables are terminated by an entry whose name is NULL. */
typedef struct dbg_cmd_group {
    const char *title;           /* help's heading */
    const dbg_cmd *cmds;
    const dbg_setting *settings; /* NULL: none */
} dbg_cmd_group;

extern const dbg_cmd dbg_cmds_exec[];
extern const dbg_cmd dbg_cmds_break[];
extern const dbg_cmd dbg_cmds_inspect[];
extern const dbg_cmd dbg_cmds_dump[];
extern const dbg_cmd dbg_cmds_amp[];
extern const dbg_cmd dbg_cmds_prof[];
extern const dbg_cmd dbg_cmds_record[];
extern const dbg_cmd dbg_cmds_data[];

/* The command named (or abbreviated) by word; NULL after printing why. */
const dbg_cmd *dbg_cmd_lookup(const char *word);
/* The same without a word printed: NULL when unknown or ambiguous. */
const dbg_cmd *dbg_cmd_find(const char *word);
/* Every command name of every group, for completion; NULL-terminated. The
 * list is valid until the next dbg_cmd_add_group. */
const char *const *dbg_cmd_names(void);
/* The groups, built-in ones first; *n gets how many. */
const dbg_cmd_group *dbg_cmd_groups(int *n);

/* Adds a front end's group (the TUI's), listed and looked up after the
 * others. The group and its tables must live as long as the program. On
 * error (a name or alias taken already, an entry without its name, usage,
 * help or function, no memory) it returns false with err saying why, and
 * adds nothing: a front end must not go on as if its commands were there. */
bool dbg_cmd_add_group(const dbg_cmd_group *group, char *err, size_t errlen) __attribute__((warn_unused_result));
/* Takes that group (the same tables) away again: the front end is gone
 * (an attached TUI at detach). Harmless when it is not there. */
void dbg_cmd_remove_group(const dbg_cmd_group *group);

/* The status `quit` without N ends the program with, in every front end
 * (and the end of the script or of input at a stop): 1 when training
 * stopped at least once (a breakpoint, step, Ctrl-C: as every tdbg tool
 * says "stop condition met"), else 0. */
int dbg_quit_status(void);

/* `help [COMMAND]`, listed with the inspection commands. */
bool dbg_help(const char *args);

/* Words of the command line, shared by the command files. */
const char *dbg_skip_space(const char *s);
/* Copies the first word of s into w; returns the rest, trimmed. */
const char *dbg_word(const char *s, char *w, size_t n);
/* A whole-number argument; false (after an error naming what) otherwise. */
bool dbg_parse_int(const char *s, const char *what, long long lo, long long *out);

#endif
