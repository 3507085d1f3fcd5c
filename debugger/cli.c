/*
 * cli.c — where commands come from: first the -x/-ex script the launcher
 * passed in TDBG_SCRIPT, then the front end. Two front ends are built in:
 * the CLI (at a terminal GNU readline, history in ~/.tdbg_history,
 * ~/.inputrc honoured, completion of commands, ops and tensors; else plain
 * lines from stdin) and batch mode (the script only). A front end that
 * reads lines its own way (the TUI) gets the same completion and history.
 */
#include "cmd.h"
#include "session.h"

#include <readline/history.h>
#include <readline/readline.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool use_readline;
static char history_path[4096];

/* ---- completion ------------------------------------------------------------ */

static const char **cands;
static int n_cands, cap_cands;

static void cand_add(const char *s)
{
    if (n_cands == cap_cands) {
        int cap = cap_cands ? 2 * cap_cands : 256;
        const char **p = realloc(cands, (size_t)cap * sizeof *p);
        if (!p)
            return;
        cands = p;
        cap_cands = cap;
    }
    cands[n_cands++] = s;
}

static char *next_candidate(const char *text, int state)
{
    static int i;
    if (!state)
        i = 0;
    size_t len = strlen(text);
    while (i < n_cands) {
        const char *c = cands[i++];
        if (strncmp(c, text, len) == 0)
            return strdup(c);
    }
    return NULL;
}

char **dbg_complete(const char *text, int start, int end)
{
    (void)end;
    rl_attempted_completion_over = 1; /* never fall back to file names */
    n_cands = 0;
    bool first = strspn(rl_line_buffer, " \t") == (size_t)start;
    if (first) {
        for (const char *const *n = dbg_cmd_names(); *n; n++)
            cand_add(*n);
    } else {
        static const char *const words[] = { "nan", "inf", "nonfinite", "step", "breakpoints", "ops", "op", "if",
                                             "and", "or", "not", "has_nan", "has_inf", "abs_max", "l2norm" };
        for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
            cand_add(words[k]);
        /* this step's ops so far, then the rest of the last step's: stopped
         * in the forward pass, the backward and update ops are still names
         * to break on. The last step's ops at the same places as this
         * step's are the same ops, and left out. */
        for (int i = 0; i < dbg.n_ops + dbg.n_last_ops; i++) {
            const dbg_op *o = i < dbg.n_ops ? &dbg.ops[i] : &dbg.last_ops[i - dbg.n_ops];
            int j = i - dbg.n_ops; /* index in last_ops */
            if (j >= 0 && j < dbg.n_ops && strcmp(o->name, dbg.ops[j].name) == 0)
                continue;
            cand_add(o->name);
            for (int k = 0; k < o->n_out; k++)
                if (o->out_name[k][0])
                    cand_add(o->out_name[k]);
        }
        te_tensor **p = te_params();
        for (int i = 0; i < te_param_count(); i++)
            cand_add(p[i]->name);
    }
    return rl_completion_matches(text, next_candidate);
}

/* ---- lines ------------------------------------------------------------------- */

void dbg_script_load(void)
{
    const char *script = getenv("TDBG_SCRIPT");
    if (script && script[0]) {
        char *copy = strdup(script), *save = NULL;
        for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
            char **s = realloc(dbg.script, (size_t)(dbg.n_script + 1) * sizeof *s);
            if (!s)
                break;
            dbg.script = s;
            dbg.script[dbg.n_script++] = strdup(l);
        }
        free(copy);
    }
}

void dbg_script_free(void)
{
    for (int i = dbg.script_pos; i < dbg.n_script; i++)
        free(dbg.script[i]);
    dbg.script_pos = dbg.n_script;
}

void dbg_readline_setup(void)
{
    rl_readline_name = "tdbg"; /* $if tdbg in ~/.inputrc */
    rl_attempted_completion_function = dbg_complete;
    rl_basic_word_break_characters = " \t[=";
    const char *home = getenv("HOME");
    if (home) {
        snprintf(history_path, sizeof history_path, "%s/.tdbg_history", home);
        read_history(history_path);
    }
}

void dbg_history_add(const char *l)
{
    if (l && l[strspn(l, " \t")]) {
        add_history(l);
        if (history_path[0] && append_history(1, history_path) != 0)
            write_history(history_path); /* the first time: make the file */
    }
}

char *dbg_read_line(const char *prompt)
{
    if (dbg.script_pos < dbg.n_script) {
        char *l = dbg.script[dbg.script_pos++];
        fprintf(dbg_out, "%s%s\n", prompt, l);
        return l;
    }
    return dbg_frontend_active ? dbg_frontend_active->read_line(prompt) : NULL;
}

/* ---- the built-in front ends ----------------------------------------------------- */

static int cli_start(char *why, size_t n)
{
    (void)why;
    (void)n;
    use_readline = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    if (use_readline)
        dbg_readline_setup();
    return 0;
}

static char *cli_read_line(const char *prompt)
{
    if (use_readline) {
        char *l = readline(prompt);
        dbg_history_add(l);
        return l;
    }
    fprintf(dbg_out, "%s", prompt);
    fflush(dbg_out);
    size_t cap = 0;
    char *l = NULL;
    ssize_t n = getline(&l, &cap, stdin);
    if (n < 0) {
        free(l);
        return NULL;
    }
    if (n && l[n - 1] == '\n')
        l[n - 1] = '\0';
    return l;
}

const dbg_frontend dbg_frontend_cli = { .name = "cli", .start = cli_start, .read_line = cli_read_line };

/* --batch: the script is all there is. */
static char *batch_read_line(const char *prompt)
{
    (void)prompt;
    return NULL;
}

const dbg_frontend dbg_frontend_batch = { .name = "batch", .read_line = batch_read_line };
