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

/* ---- completion ------------------------------------------------------------
 * The command's name at the start of the line, then what its entry says its
 * words name (dbg_cmd.args): op names for `break` and `info op`, tensors for
 * `print`, command names for `help`, breakpoint numbers for `delete` ... */

static const char **cands;
static int n_cands, cap_cands;
static char **made; /* candidates composed for this completion ("type:MatMul") */
static int n_made, cap_made;

static void cand_add(const char *s)
{
    if (n_cands == cap_cands) {
        int cap = cap_cands ? 2 * cap_cands : 256;
        const char **p = realloc(cands, (size_t)cap * sizeof *p);
        if (!p)
            return; /* a shorter list of candidates, nothing worse */
        cands = p;
        cap_cands = cap;
    }
    cands[n_cands++] = s;
}

/* Adds PREFIX+NAME, once. */
static void cand_make(const char *prefix, const char *name)
{
    char buf[TE_NAME_MAX + 16];
    snprintf(buf, sizeof buf, "%s%s", prefix, name);
    for (int i = 0; i < n_made; i++)
        if (strcmp(made[i], buf) == 0)
            return;
    if (n_made == cap_made) {
        int cap = cap_made ? 2 * cap_made : 64;
        char **p = realloc(made, (size_t)cap * sizeof *p);
        if (!p)
            return;
        made = p;
        cap_made = cap;
    }
    if ((made[n_made] = strdup(buf)) != NULL)
        cand_add(made[n_made++]);
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

/* This step's ops so far, then the rest of the last step's: stopped in the
 * forward pass, the backward and update ops are still names to break on.
 * The last step's ops at the same places as this step's are the same ops,
 * and left out. */
static void add_ops(unsigned kinds)
{
    for (int i = 0; i < dbg.n_ops + dbg.n_last_ops; i++) {
        const dbg_op *o = i < dbg.n_ops ? &dbg.ops[i] : &dbg.last_ops[i - dbg.n_ops];
        int j = i - dbg.n_ops; /* index in last_ops */
        if (j >= 0 && j < dbg.n_ops && strcmp(o->name, dbg.ops[j].name) == 0)
            continue;
        if (kinds & DBG_ARG_OP)
            cand_add(o->name);
        if ((kinds & DBG_ARG_TYPE) && o->type)
            cand_make("type:", o->type);
        for (int k = 0; (kinds & DBG_ARG_TENSOR) && k < o->n_out; k++)
            if (o->out_name[k][0])
                cand_add(o->out_name[k]);
    }
}

static void add_kinds(unsigned kinds)
{
    /* the words of a condition (debugger/dbg.h's grammar) */
    static const char *const cond_words[] = {
        "and", "or", "not", "phase", "forward", "backward", "update", "has_nan", "has_inf", "max", "min",
        "mean", "std", "abs_max", "abs_mean", "l2norm", "zero_frac", "fp16_overflow", "rel_change",
        "inputs.", "outputs.", "params.", "grads.", "op=", "type=",
    };
    if (kinds & (DBG_ARG_OP | DBG_ARG_TYPE | DBG_ARG_TENSOR))
        add_ops(kinds);
    if (kinds & DBG_ARG_TENSOR) {
        te_tensor **p = te_params();
        for (int i = 0; i < te_param_count(); i++) { /* named "param:NAME" */
            const char *name = p[i]->name;
            cand_add(name);
            cand_make("grad:", strncmp(name, "param:", 6) == 0 ? name + 6 : name);
        }
    }
    if (kinds & DBG_ARG_BREAK)
        for (int i = 0; i < dbg.n_breaks; i++) {
            char id[16];
            snprintf(id, sizeof id, "%d", dbg.breaks[i].id);
            cand_make("", id);
        }
    if (kinds & DBG_ARG_COND)
        for (size_t k = 0; k < sizeof cond_words / sizeof cond_words[0]; k++)
            cand_add(cond_words[k]);
    if (kinds & DBG_ARG_COMMAND)
        for (const char *const *n = dbg_cmd_names(); *n; n++)
            cand_add(*n);
    if (kinds & DBG_ARG_SETTING) {
        int n;
        const dbg_cmd_group *g = dbg_cmd_groups(&n);
        for (int i = 0; i < n; i++)
            for (const dbg_setting *s = g[i].settings; s && s->name; s++)
                cand_add(s->name);
    }
}

char **dbg_complete(const char *text, int start, int end)
{
    (void)end;
    rl_attempted_completion_over = 1; /* never fall back to file names */
    n_cands = 0;
    for (int i = 0; i < n_made; i++)
        free(made[i]);
    n_made = 0;
    /* the words before the one completed: the command, then its arguments */
    char cmd[64] = "";
    int n_words = 0;
    for (int i = 0; i < start;) {
        i += (int)strspn(rl_line_buffer + i, " \t");
        int len = (int)strcspn(rl_line_buffer + i, " \t");
        if (i >= start)
            break;
        if (len > start - i)
            len = start - i;
        if (!n_words++)
            snprintf(cmd, sizeof cmd, "%.*s", len, rl_line_buffer + i);
        i += len;
    }
    const dbg_cmd *c = n_words ? dbg_cmd_find(cmd) : NULL;
    /* after a condition's op= or type= ('=' breaks words): op names, op types */
    int b = start;
    while (b > 0 && (rl_line_buffer[b - 1] == ' ' || rl_line_buffer[b - 1] == '\t'))
        b--;
    const char *eq = b > 0 && rl_line_buffer[b - 1] == '=' ? rl_line_buffer + b - 1 : NULL;
    if (eq && eq > rl_line_buffer && eq[-1] == '!')
        eq--;
    bool after_op = eq && eq - rl_line_buffer >= 2 && !strncmp(eq - 2, "op", 2);
    bool after_type = eq && eq - rl_line_buffer >= 4 && !strncmp(eq - 4, "type", 4);
    if (c && (after_op || after_type) && (c->args[n_words == 1 ? 0 : 1].kinds & DBG_ARG_COND)) {
        for (int i = 0; i < dbg.n_ops + dbg.n_last_ops; i++) {
            const dbg_op *o = i < dbg.n_ops ? &dbg.ops[i] : &dbg.last_ops[i - dbg.n_ops];
            if (after_op)
                cand_make("", o->name);
            else if (o->type)
                cand_make("", o->type);
        }
    } else if (!n_words) {
        add_kinds(DBG_ARG_COMMAND);
    } else if (c) {
        const dbg_arg *arg = &c->args[n_words == 1 ? 0 : 1];
        for (const char *const *w = arg->words; w && *w; w++)
            cand_add(*w);
        add_kinds(arg->kinds);
    }
    return rl_completion_matches(text, next_candidate);
}

/* ---- lines ------------------------------------------------------------------- */

bool dbg_script_add(const char *line, size_t n)
{
    char **s = realloc(dbg.script, (size_t)(dbg.n_script + 1) * sizeof *s);
    if (!s)
        return false;
    dbg.script = s;
    if (!(s[dbg.n_script] = strndup(line, n)))
        return false;
    dbg.n_script++;
    return true;
}

void dbg_script_load(void)
{
    const char *script = getenv("TDBG_SCRIPT");
    if (script && script[0]) {
        char *copy = strdup(script), *save = NULL;
        for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
            if (!dbg_script_add(l, strlen(l)))
                break;
        free(copy);
    }
}

/* Commands left unrun are named, never dropped in silence: a script
 * that expected a stop learns that none came. */
void dbg_script_free(const char *why)
{
    int left = dbg.n_script - dbg.script_pos;
    if (left > 0) {
        fprintf(dbg_out, "tdbg: %d command%s of the script did not run (%s):", left, left == 1 ? "" : "s", why);
        for (int i = dbg.script_pos; i < dbg.n_script; i++)
            fprintf(dbg_out, "%s '%s'", i == dbg.script_pos ? "" : ",", dbg.script[i]);
        fprintf(dbg_out, "\n");
    }
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
        clear_history(); /* an attached TUI sets up again at each attach */
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
