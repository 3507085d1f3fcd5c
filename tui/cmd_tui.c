/*
 * cmd_tui.c — the TUI's own commands, in the same table as the others
 * (help lists them under "terminal UI"), so that everything done with a
 * key can be typed or scripted: focus, view, scroll, search, jump, keys,
 * refresh; and the settings `set mouse on|off` and `set highlight X|off`.
 * `jump` goes to the session's last stop (dbg_last_stop(); its entry
 * needs DBG_CMD_EVER_STOPPED, so it works after the program's end), and a
 * condition's threshold comes from the condition module
 * (dbg_cond_preds()): no text of the debugger's is parsed here.
 */
#include "tui_internal.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* A pane (or the command line) by name or unambiguous prefix; -1 if none.
 * "tensor" and "profile" are the two panes of one slot (TUI_TENSOR): *cls
 * says which one was named (NULL for the other slots). */
static int pane_named(const char *w, const tui_pane_class **cls)
{
    static const struct { const char *name; int slot; const tui_pane_class *cls; } names[] = {
        { "ops", TUI_OPS, NULL },          { "tensor", TUI_TENSOR, &tui_pane_tensor },
        { "profile", TUI_TENSOR, &tui_pane_prof }, { "chart", TUI_CHART, NULL },
        { "breaks", TUI_BREAKS, NULL },    { "breakpoints", TUI_BREAKS, NULL },
        { "output", TUI_OUTPUT, NULL },    { "cmd", TUI_CMDLINE, NULL },
        { "command", TUI_CMDLINE, NULL },
    };
    size_t n = strlen(w);
    int found = -1;
    *cls = NULL;
    if (!n)
        return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(names[i].name, w, n) == 0) {
            if (found >= 0 && (found != names[i].slot || *cls != names[i].cls))
                return -2; /* two panes */
            found = names[i].slot;
            *cls = names[i].cls;
        }
    return found;
}

static bool cmd_focus(const char *args)
{
    int to;
    const tui_pane_class *cls = NULL;
    if (!args[0] || strcmp(args, "next") == 0)
        to = tui.focus == TUI_CMDLINE ? 0 : tui.focus + 1; /* ... then the command line again */
    else if (strcmp(args, "back") == 0)
        to = tui.last_pane;
    else if ((to = pane_named(args, &cls)) < 0) {
        dbg_error("focus: expected ops, tensor, profile, chart, breakpoints, output, cmd, next or back, got '%s'",
                  args);
        return false;
    }
    if (cls)
        tui_prof_show(cls == &tui_pane_prof);
    tui_focus(to);
    return false;
}

static bool cmd_view(const char *args)
{
    char err[512];
    if (!args[0]) {
        if (tui.view.name[0])
            fprintf(dbg_out, "The tensor pane shows %s.\n", tui.view.name);
        else
            dbg_error("view: which tensor? (OP, OP:out0, param:NAME, grad:NAME, [I,J] for a slice)");
        return false;
    }
    if (!tui_view_set(args, true, err, sizeof err))
        dbg_error("view: %s", err);
    else
        tui_prof_show(false);
    return false;
}

static bool cmd_scroll(const char *args)
{
    static const struct { const char *word; int rows, cols; bool page; } dirs[] = {
        { "up", -1, 0, false },   { "down", 1, 0, false },   { "left", 0, -1, false },
        { "right", 0, 1, false }, { "pgup", -1, 0, true },   { "pgdn", 1, 0, true },
        { "home", -TUI_FAR, -TUI_FAR, false }, { "end", TUI_FAR, 0, false },
    };
    char pw[32], dw[32];
    const char *rest = dbg_word(dbg_word(args, pw, sizeof pw), dw, sizeof dw);
    const tui_pane_class *cls;
    int i = pane_named(pw, &cls);
    if (i < 0 || i == TUI_CMDLINE) {
        dbg_error("scroll: expected a pane (ops, tensor, profile, breakpoints, output), got '%s'", pw);
        return false;
    }
    long long times = 1;
    if (rest[0] && !dbg_parse_int(rest, "scroll PANE DIRECTION N", 1, &times))
        return false;
    if (cls && cls != tui.pane[i].cls) /* the other pane of the tensor's slot: on show now */
        tui_prof_show(cls == &tui_pane_prof);
    tui_pane *p = &tui.pane[i];
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++)
        if (strcmp(dirs[d].word, dw) == 0) {
            int page = dirs[d].page ? (p->r.h - 2 > 1 ? p->r.h - 2 : 1) : 1;
            long long r = dirs[d].rows * page * times, c = dirs[d].cols * times;
            r = r > TUI_FAR ? TUI_FAR : r < -TUI_FAR ? -TUI_FAR : r;
            c = c > TUI_FAR ? TUI_FAR : c < -TUI_FAR ? -TUI_FAR : c;
            p->cls->shift(p, (int)r, (int)c);
            return false;
        }
    dbg_error("scroll: expected up, down, left, right, pgup, pgdn, home or end, got '%s'", dw);
    return false;
}

static bool cmd_search(const char *args)
{
    static char last[TE_NAME_MAX];
    if (args[0])
        snprintf(last, sizeof last, "%s", args);
    if (!last[0]) {
        dbg_error("search: what? (a part of an op name, or a glob: search conv2, search grad/*)");
        return false;
    }
    int n = tui_ops_count(), from = tui.pane[TUI_OPS].list.sel;
    bool later;
    for (int k = 1; k <= n; k++) {
        int i = (from + k) % n;
        const dbg_op *o = tui_ops_at(i, &later);
        if (o && (strstr(o->name, last) || fnmatch(last, o->name, 0) == 0)) {
            tui_ops_select(i, true);
            fprintf(dbg_out, "%s (op %d of %d)%s\n", o->name, i + 1, n, later ? ", not run yet in this step" : "");
            return false;
        }
    }
    dbg_error("search: no op matches '%s'%s", last, n ? "" : " (none has run yet)");
    return false;
}

/* The value a condition's cells stand out from: the threshold of its
 * first predicate that holds above a number (max or abs_max, > or >=,
 * not negated), or 0 for none. */
static double cond_threshold(const dbg_cond *c)
{
    dbg_pred p[16];
    int n = dbg_cond_preds(c, p, 16);
    for (int i = 0; i < n && i < 16; i++)
        if ((p[i].func == DBG_FN_ABS_MAX || p[i].func == DBG_FN_MAX) &&
            (p[i].cmp == DBG_CMP_GT || p[i].cmp == DBG_CMP_GE) && !p[i].negated && p[i].number > 0)
            return p[i].number;
    return 0;
}

void tui_jump(void)
{
    const dbg_stop *s = dbg_last_stop();
    if (!s)
        return;
    int row = s->op[0] ? tui_ops_find(s->op) : -1;
    if (row >= 0)
        tui_ops_select(row, !s->tensor[0]);
    if (s->tensor[0]) { /* the tensor comes back in place of the profile */
        char err[256];
        tui_prof_show(false);
        if (tui_view_name(s->tensor, err, sizeof err) && s->index >= 0) {
            const te_tensor *t = tui_view_tensor(err, sizeof err);
            if (t)
                tui_view_focus_index(t, s->index);
        }
    }
    double v = s->cond && strcmp(s->reason, "condition") == 0 ? cond_threshold(s->cond) : 0;
    if (v > 0)
        tui.view.highlight = v;
}

static bool cmd_jump(const char *args)
{
    (void)args;
    tui_jump();
    return false;
}

static bool cmd_keys(const char *args)
{
    (void)args;
    tui.help = true;
    return false;
}

static bool cmd_refresh(const char *args)
{
    (void)args;
    clearok(curscr, TRUE);
    tui.full = true;
    return false;
}

static bool set_mouse(const char *v)
{
    if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
        dbg_error("set mouse: expected on or off, got '%s'", v);
        return false;
    }
    tui_mouse_set(strcmp(v, "on") == 0);
    fprintf(dbg_out, "%s\n", tui.mouse ? "Mouse on: click selects, the wheel scrolls."
                                       : "Mouse off: the terminal selects text (copy and paste) again.");
    return false;
}

static bool set_highlight(const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0) {
        tui.view.highlight = 0;
        fprintf(dbg_out, "No cells highlighted but NaN and Inf.\n");
    } else if (end == v || *dbg_skip_space(end) || !(x > 0)) {
        dbg_error("set highlight: expected a positive number or off, got '%s'", v);
    } else {
        tui.view.highlight = x;
        fprintf(dbg_out, "Cells with |x| >= %g are highlighted.\n", x);
    }
    return false;
}

static const dbg_cmd cmds[] = {
    { .name = "focus", .usage = "focus PANE|cmd|next|back", .help = "move the focus (F6, Esc)\n"
      "PANE: ops, tensor, profile, chart, breakpoints, output; cmd: the command line; back: the last pane.\n"
      "The profile (the last profiled step's ops by time) takes the tensor's place; 'focus tensor' gives it back.",
      .args = { { .words = DBG_WORDS("ops", "tensor", "profile", "chart", "breakpoints", "output", "cmd", "next",
                                     "back") } },
      .max_words = 1, .run = cmd_focus },
    { .name = "view", .usage = "view TENSOR[I,J]|OP|[I,J]", .help = "show a tensor in the tensor pane\n"
      "An op stands for its first output; the indices fix the leading dims, the grid shows the last two.\n"
      "'view [I,J]' picks another slice of the tensor on show.",
      .args = { { DBG_ARG_OP | DBG_ARG_TENSOR } }, .max_words = DBG_WORDS_ANY, .run = cmd_view },
    { .name = "scroll", .usage = "scroll PANE up|down|left|right|pgup|pgdn|home|end [N]",
      .help = "move in a pane as the keys do (the selection, the tensor's cursor, the output)",
      .args = { { .words = DBG_WORDS("ops", "tensor", "profile", "chart", "breakpoints", "output") },
                { .words = DBG_WORDS("up", "down", "left", "right", "pgup", "pgdn", "home", "end") } },
      .max_words = 3, .run = cmd_scroll },
    { .name = "search", .usage = "search [TEXT]",
      .help = "select the next op whose name holds TEXT or matches it as a glob (/, F3)",
      .args = { { DBG_ARG_OP } }, .max_words = DBG_WORDS_ANY, .run = cmd_search },
    { .name = "jump", .usage = "jump", .help = "select the op training stopped at and show its bad element (j, F4)",
      .needs = DBG_CMD_EVER_STOPPED, .run = cmd_jump },
    { .name = "keys", .usage = "keys", .help = "the keys and the commands underneath (?, F1)\n"
      "The TUI's settings: 'set mouse on|off' (off lets the terminal select text again),\n"
      "'set highlight X|off' (tensor cells with |x| >= X stand out).", .run = cmd_keys },
    { .name = "refresh", .usage = "refresh", .help = "draw the screen again (Ctrl-L)", .run = cmd_refresh },
    { .name = NULL },
};

static const dbg_setting settings[] = {
    { "mouse", set_mouse },
    { "highlight", set_highlight },
    { NULL, NULL },
};

static const dbg_cmd_group group = { "terminal UI", cmds, settings };

bool tui_cmds_register(char *why, size_t n) { return dbg_cmd_add_group(&group, why, n); }

void tui_cmds_unregister(void) { dbg_cmd_remove_group(&group); }
