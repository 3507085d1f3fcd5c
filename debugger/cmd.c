/*
 * cmd.c — command lookup, execution, the loop that runs at a stop, help,
 * and the seams a front end adds its own commands and settings through.
 */
#include "cmd.h"
#include "names.h"
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The groups, the built-in ones first; a front end's are added after them
 * (the array then moves to the heap). */
static dbg_cmd_group builtin[] = {
    { "running", dbg_cmds_exec, NULL },
    { "breakpoints", dbg_cmds_break, NULL },
    { "looking around", dbg_cmds_inspect, NULL },
    { "dumps", dbg_cmds_dump, NULL },
    { "precision", dbg_cmds_amp, NULL },
    { "profiling", dbg_cmds_prof, NULL },
    { "time travel", dbg_cmds_record, NULL },
    { "data", dbg_cmds_data, NULL },
};
static dbg_cmd_group *groups = builtin;
static int n_groups = sizeof builtin / sizeof builtin[0];

/* Every group's command names, NULL-terminated, rebuilt when a group comes. */
static const char **names;

static int count_cmds(const dbg_cmd *t)
{
    int n = 0;
    while (t[n].name)
        n++;
    return n;
}

/* Fills names (with room for them all) from the groups. */
static void names_fill(const char **to)
{
    int n = 0;
    for (int g = 0; g < n_groups; g++)
        for (const dbg_cmd *c = groups[g].cmds; c->name; c++)
            to[n++] = c->name;
    to[n] = NULL;
}

/* The command of the groups, or of table's entries before upto, whose name
 * or alias is w; NULL if none. */
static const dbg_cmd *taken(const char *w, const dbg_cmd *table, const dbg_cmd *upto)
{
    for (int g = 0; g < n_groups; g++)
        for (const dbg_cmd *c = groups[g].cmds; c->name; c++)
            if (strcmp(c->name, w) == 0 || (c->alias && strcmp(c->alias, w) == 0))
                return c;
    for (const dbg_cmd *c = table; c < upto; c++)
        if (strcmp(c->name, w) == 0 || (c->alias && strcmp(c->alias, w) == 0))
            return c;
    return NULL;
}

/* The same for a setting's name. */
static const dbg_setting *setting_named(const char *name, const dbg_setting *table, const dbg_setting *upto)
{
    for (int g = 0; g < n_groups; g++)
        for (const dbg_setting *s = groups[g].settings; s && s->name; s++)
            if (strcmp(s->name, name) == 0)
                return s;
    for (const dbg_setting *s = table; s && s < upto; s++)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

/* Can group not join the others? true with err saying why. */
static bool clashes(const dbg_cmd_group *group, char *err, size_t n)
{
    const char *title = group->title ? group->title : "?";
    if (!group->title || !group->cmds) {
        snprintf(err, n, "command group '%s' has no title or no table", title);
        return true;
    }
    for (const dbg_cmd *c = group->cmds; c->name; c++) {
        const dbg_cmd *other;
        if (!c->usage || !c->help || !c->run) {
            snprintf(err, n, "%s: the command '%s' lacks its usage, help or function", title, c->name);
            return true;
        }
        if ((other = taken(c->name, group->cmds, c)) || (c->alias && (other = taken(c->alias, group->cmds, c)))) {
            snprintf(err, n, "%s: the command '%s' (alias %s) clashes with '%s' (alias %s)", title, c->name,
                     c->alias ? c->alias : "none", other->name, other->alias ? other->alias : "none");
            return true;
        }
    }
    for (const dbg_setting *s = group->settings; s && s->name; s++)
        if (!s->set || setting_named(s->name, group->settings, s)) {
            snprintf(err, n, "%s: the setting '%s' %s", title, s->name, s->set ? "exists already" : "has no handler");
            return true;
        }
    return false;
}

bool dbg_cmd_add_group(const dbg_cmd_group *group, char *err, size_t errlen)
{
    if (clashes(group, err, errlen))
        return false;
    int n_names = count_cmds(group->cmds);
    for (int g = 0; g < n_groups; g++)
        n_names += count_cmds(groups[g].cmds);
    /* both arrays grow before either changes: a failure leaves the tables as they were */
    const char **to = realloc(names, (size_t)(n_names + 1) * sizeof *to);
    if (to)
        names = to;
    dbg_cmd_group *grown = to ? malloc((size_t)(n_groups + 1) * sizeof *grown) : NULL;
    if (!grown) {
        snprintf(err, errlen, "%s: out of memory for its commands", group->title);
        if (to) /* the names list is whole still, only longer */
            names_fill(names);
        return false;
    }
    memcpy(grown, groups, (size_t)n_groups * sizeof *grown);
    grown[n_groups] = *group;
    if (groups != builtin)
        free(groups);
    groups = grown;
    n_groups++;
    names_fill(names);
    return true;
}

void dbg_cmd_remove_group(const dbg_cmd_group *group)
{
    if (groups == builtin) /* none added */
        return;
    for (int g = 0; g < n_groups; g++)
        if (groups[g].cmds == group->cmds) {
            memmove(&groups[g], &groups[g + 1], (size_t)(n_groups - g - 1) * sizeof *groups);
            n_groups--;
            names_fill(names); /* shorter: the room is there */
            return;
        }
}

const dbg_cmd_group *dbg_cmd_groups(int *n)
{
    *n = n_groups;
    return groups;
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
    static const char *const none[] = { NULL };
    if (!names) { /* the built-in groups' names, on first use */
        int n = 0;
        for (int g = 0; g < n_groups; g++)
            n += count_cmds(groups[g].cmds);
        if (!(names = malloc((size_t)(n + 1) * sizeof *names))) {
            dbg_error("out of memory listing the commands");
            return none;
        }
        names_fill(names);
    }
    return names;
}

/* The command word names: its name or alias exactly, else the one command
 * it begins; *n_prefix gets how many commands it begins, amb their names. */
static const dbg_cmd *find(const char *word, int *n_prefix, char *amb, size_t n_amb)
{
    const dbg_cmd *prefix = NULL;
    size_t len = strlen(word);
    *n_prefix = 0;
    for (int g = 0; g < n_groups; g++)
        for (const dbg_cmd *c = groups[g].cmds; c->name; c++) {
            if (strcmp(c->name, word) == 0 || (c->alias && strcmp(c->alias, word) == 0))
                return c;
            if (len && strncmp(c->name, word, len) == 0) {
                prefix = c;
                (*n_prefix)++;
                size_t used = strlen(amb);
                snprintf(amb + used, n_amb - used, "%s%s", used ? ", " : "", c->name);
            }
        }
    return *n_prefix == 1 ? prefix : NULL;
}

const dbg_cmd *dbg_cmd_find(const char *word)
{
    char amb[256] = "";
    int n_prefix;
    return find(word, &n_prefix, amb, sizeof amb);
}

const dbg_cmd *dbg_cmd_lookup(const char *word)
{
    char amb[256] = "";
    int n_prefix;
    const dbg_cmd *c = find(word, &n_prefix, amb, sizeof amb);
    if (c)
        return c;
    if (n_prefix > 1) {
        dbg_error("'%s' is ambiguous: %s", word, amb);
        return NULL;
    }
    const char *const *list = dbg_cmd_names();
    int n = 0;
    while (list[n])
        n++;
    const char *near = dump_suggest(word, list, n, DUMP_NEAR);
    if (near)
        dbg_error("unknown command '%s' (did you mean %s?); 'help' lists them", word, near);
    else
        dbg_error("unknown command '%s'; 'help' lists them", word);
    return NULL;
}

/* Does the session give c what its entry says it needs? Says what is
 * missing otherwise, in the same form for every command. */
static bool needs_met(const dbg_cmd *c)
{
    if ((c->needs & DBG_CMD_NOT_STARTED) && dbg.started) {
        dbg_error("%s: training is already running (step %lld); 'continue' goes on", c->name, (long long)dbg.step);
        return false;
    }
    if ((c->needs & DBG_CMD_STARTED) && !dbg.started) {
        dbg_error("%s: training has not started; 'run' starts it", c->name);
        return false;
    }
    if ((c->needs & DBG_CMD_STOPPED) && !dbg.in_step) {
        dbg_error("%s: no step is running; 'next' stops at the start of the next one", c->name);
        return false;
    }
    if ((c->needs & DBG_CMD_EVER_STOPPED) && !dbg_last_stop()) {
        dbg_error("%s: training has not stopped yet; a breakpoint, 'step' or Ctrl-C stops it", c->name);
        return false;
    }
    return true;
}

/* Does the line give c no more words than its entry says it takes? Names
 * the first extra one otherwise, with the usage: an argument a command
 * does not take is an error, never silently dropped. */
static bool words_fit(const dbg_cmd *c, const char *rest)
{
    if (c->max_words == DBG_WORDS_ANY)
        return true;
    char w[128];
    for (int n = 0; *rest; n++) {
        const char *next = dbg_word(rest, w, sizeof w);
        if (n == c->max_words) {
            dbg_error("%s: unexpected argument '%s' (usage: %s)", c->name, w, c->usage);
            return false;
        }
        rest = next;
    }
    return true;
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
        const dbg_setting *s = setting_named(name, NULL, NULL);
        if (s)
            return s->set(value);
    }
    if (!words_fit(c, rest) || !needs_met(c))
        return false;
    return c->run(rest);
}

void dbg_command_loop(void)
{
    for (;;) {
        char *line = dbg_read_line("(tdbg) ");
        if (!line && dbg_remote_on()) { /* an attached front end went away: the run goes on */
            dbg_detach_if_gone();
            return;
        }
        if (!line) {
            /* End of input: an interactive user left; a script ran out. */
            if (dbg.started || !dbg.batch) { /* as `quit`, with its status */
                dbg.ending = true;
                if (dbg.batch)
                    fprintf(dbg_out, "tdbg: the script ended while stopped at step %lld; ending the program\n",
                            (long long)dbg.step);
                else
                    fprintf(dbg_out, "\n");
                exit(dbg_quit_status());
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
        if (c) {
            fprintf(dbg_out, "usage: %s%s%s%s\n%s\n", c->usage, c->alias ? " (alias " : "",
                    c->alias ? c->alias : "", c->alias ? ")" : "", c->help);
            if (c->needs & DBG_CMD_NOT_STARTED)
                fprintf(dbg_out, "Only before training starts.\n");
            else if (c->needs & DBG_CMD_STOPPED)
                fprintf(dbg_out, "Only while training is stopped in a step.\n");
            else if (c->needs & DBG_CMD_STARTED)
                fprintf(dbg_out, "Only once training started.\n");
            else if (c->needs & DBG_CMD_EVER_STOPPED)
                fprintf(dbg_out, "Only once training has stopped (the last stop, also after the program's end).\n");
        }
        return false;
    }
    for (int g = 0; g < n_groups; g++) {
        fprintf(dbg_out, "%s:\n", groups[g].title);
        for (const dbg_cmd *c = groups[g].cmds; c->name; c++) {
            size_t first = strcspn(c->help, "\n");
            fprintf(dbg_out, "  %-34s %.*s\n", c->usage, (int)first, c->help);
        }
    }
    fprintf(dbg_out, "Commands may be abbreviated when unambiguous. Tensors: OP:out0, OP:in1, "
                     "param:NAME, grad:NAME.\n");
    return false;
}
