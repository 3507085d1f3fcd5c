/*
 * cmd.h — the command table. Each group of commands lives in its own file
 * (cmd_exec.c, cmd_break.c, cmd_inspect.c) and exports a table; cmd.c
 * looks names up (exact, alias, or an unambiguous prefix, as in gdb),
 * suggests the nearest command for a typo, and prints help.
 */
#ifndef TDBG_CMD_H
#define TDBG_CMD_H

#include <stdbool.h>
#include <stddef.h>

typedef struct dbg_cmd {
    const char *name;
    const char *alias;   /* one-letter shortcut, or NULL */
    const char *usage;   /* "break WHAT [if COND]" */
    const char *help;    /* one line, then details after a newline */
    /* args: the rest of the line, trimmed; returns true to resume training */
    bool (*run)(const char *args);
} dbg_cmd;

extern const dbg_cmd dbg_cmds_exec[];
extern const dbg_cmd dbg_cmds_break[];
extern const dbg_cmd dbg_cmds_inspect[];
extern const dbg_cmd dbg_cmds_dump[];

/* The command named (or abbreviated) by word; NULL after printing why. */
const dbg_cmd *dbg_cmd_lookup(const char *word);
/* Every command name, for completion; NULL-terminated. */
const char *const *dbg_cmd_names(void);

/* A front end's own commands (the TUI's), listed and looked up after the
 * others, and its `set NAME VALUE` settings (`set mouse off`): `set` runs
 * the setting's handler when NAME is one and the line has no '='. The
 * tables and names must live as long as the program. */
void dbg_cmd_add_group(const dbg_cmd *table, const char *title);
void dbg_setting_add(const char *name, bool (*set)(const char *value));

/* `help [COMMAND]`, listed with the inspection commands. */
bool dbg_help(const char *args);

/* Words of the command line, shared by the command files. */
const char *dbg_skip_space(const char *s);
/* Copies the first word of s into w; returns the rest, trimmed. */
const char *dbg_word(const char *s, char *w, size_t n);
/* A whole-number argument; false (after an error naming what) otherwise. */
bool dbg_parse_int(const char *s, const char *what, long long lo, long long *out);

#endif
