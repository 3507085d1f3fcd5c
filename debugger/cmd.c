/*
 * cmd.c — command lookup, execution, the loop that runs at a stop, help,
 * and the seams a front end adds its own commands and settings through.
 */
#include "cmd.h"
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUPS 8
static const dbg_cmd *groups[MAX_GROUPS] = { dbg_cmds_exec, dbg_cmds_break, dbg_cmds_inspect, dbg_cmds_dump };
static const char *titles[MAX_GROUPS] = { "running", "breakpoints", "looking around", "dumps" };
static int n_groups = 4;
static const char *const *names_cache;

void dbg_cmd_add_group(const dbg_cmd *table, const char *title)
{
    if (n_groups == MAX_GROUPS)
        return;
    groups[n_groups] = table;
    titles[n_groups++] = title;
    names_cache = NULL; /* dbg_cmd_names() lists them too from now on */
}

/* `set NAME VALUE`: a front end's settings. */
#define MAX_SETTINGS 8
typedef struct setting {
    const char *name;
    bool (*set)(const char *value);
} setting;
static setting settings[MAX_SETTINGS];
static int n_settings;

void dbg_setting_add(const char *name, bool (*set)(const char *value))
{
    if (n_settings < MAX_SETTINGS)
        settings[n_settings++] = (setting){ name, set };
}

const char *dbg_skip_space(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

const char *dbg_word(const char *s, char *w, size_t n)
{
    s = dbg_skip_space(s);
    size_t len = strcspn(s, " \t");
    if (len >= n)
        len = n - 1;
    memcpy(w, s, len);
    w[len] = '\0';
    return dbg_skip_space(s + strcspn(s, " \t"));
}

bool dbg_parse_int(const char *s, const char *what, long long lo, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    end = (char *)dbg_skip_space(end);
    if (errno || end == s || *end || v < lo) {
        dbg_error("%s: expected a whole number >= %lld, got '%s'", what, lo, s);
        return false;
    }
    *out = v;
    return true;
}

const char *const *dbg_cmd_names(void)
{
    static const char *names[128];
    if (!names_cache) {
        int n = 0;
        for (int g = 0; g < n_groups; g++)
            for (const dbg_cmd *c = groups[g]; c->name && n < 127; c++)
                names[n++] = c->name;
        names[n] = NULL;
        names_cache = names;
    }
    return names;
}

const dbg_cmd *dbg_cmd_lookup(const char *word)
{
    const dbg_cmd *prefix = NULL;
    int n_prefix = 0;
    char amb[256] = "";
    size_t len = strlen(word);
    for (int g = 0; g < n_groups; g++)
        for (const dbg_cmd *c = groups[g]; c->name; c++) {
            if (strcmp(c->name, word) == 0 || (c->alias && strcmp(c->alias, word) == 0))
                return c;
            if (len && strncmp(c->name, word, len) == 0) {
                prefix = c;
                n_prefix++;
                size_t used = strlen(amb);
                snprintf(amb + used, sizeof amb - used, "%s%s", used ? ", " : "", c->name);
            }
        }
    if (n_prefix == 1)
        return prefix;
    if (n_prefix > 1) {
        dbg_error("'%s' is ambiguous: %s", word, amb);
        return NULL;
    }
    const char *const *names = dbg_cmd_names();
    int n = 0;
    while (names[n])
        n++;
    const char *near = dbg_suggest(word, names, n);
    if (near)
        dbg_error("unknown command '%s' (did you mean %s?); 'help' lists them", word, near);
    else
        dbg_error("unknown command '%s'; 'help' lists them", word);
    return NULL;
}

bool dbg_execute(const char *line)
{
    char word[64];
    const char *args = dbg_word(line, word, sizeof word);
    if (!word[0] || word[0] == '#')
        return false;
    const dbg_cmd *c = dbg_cmd_lookup(word);
    if (!c)
        return false;
    char rest[1024];
    snprintf(rest, sizeof rest, "%s", args);
    for (size_t n = strlen(rest); n && (rest[n - 1] == ' ' || rest[n - 1] == '\t' || rest[n - 1] == '\n'); n--)
        rest[n - 1] = '\0';
    if (strcmp(c->name, "set") == 0 && !strchr(rest, '=')) { /* a setting, not TENSOR[INDEX] = VALUE */
        char name[32];
        const char *value = dbg_word(rest, name, sizeof name);
        for (int i = 0; i < n_settings; i++)
            if (strcmp(settings[i].name, name) == 0)
                return settings[i].set(value);
    }
    return c->run(rest);
}

void dbg_command_loop(void)
{
    for (;;) {
        char *line = dbg_read_line("(tdbg) ");
        if (!line) {
            /* End of input: an interactive user left; a script ran out. */
            if (dbg.started || !dbg.batch) {
                dbg.ending = true;
                if (dbg.batch) /* stopped with nothing left to do: status 1, training stopped */
                    fprintf(dbg_out, "tdbg: the script ended while stopped at step %lld; ending the program\n",
                            (long long)dbg.step);
                else
                    fprintf(dbg_out, "\n");
                exit(dbg.batch ? 1 : 0);
            }
            dbg.started = true; /* a script without `run`: train to the end */
            dbg.mode = RUN_GO;
            return;
        }
        bool resume = dbg_execute(line);
        free(line);
        if (resume)
            return;
    }
}

/* ---- help ---------------------------------------------------------------------- */

bool dbg_help(const char *args)
{
    if (args[0]) {
        const dbg_cmd *c = dbg_cmd_lookup(args);
        if (c)
            fprintf(dbg_out, "usage: %s%s%s%s\n%s\n", c->usage, c->alias ? " (alias " : "",
                    c->alias ? c->alias : "", c->alias ? ")" : "", c->help);
        return false;
    }
    for (int g = 0; g < n_groups; g++) {
        fprintf(dbg_out, "%s:\n", titles[g]);
        for (const dbg_cmd *c = groups[g]; c->name; c++) {
            size_t first = strcspn(c->help, "\n");
            fprintf(dbg_out, "  %-34s %.*s\n", c->usage, (int)first, c->help);
        }
    }
    fprintf(dbg_out, "Commands may be abbreviated when unambiguous. Tensors: OP:out0, OP:in1, "
                     "param:NAME, grad:NAME.\n");
    return false;
}
