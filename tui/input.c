/*
 * input.c — keys, the mouse and the command line.
 *
 * GNU readline runs through its callback interface only: keys are fed to
 * it one byte at a time (rl_getc_function reads a small queue), it draws
 * through rl_redisplay_function into the command line window and lists
 * completions through the display-matches hook into a box above it. It
 * catches no signals, leaves the terminal to curses and writes nothing to
 * the screen itself (rl_outstream is /dev/null). History, ~/.inputrc and
 * completion are the CLI's (debugger/cli.c).
 *
 * Function keys, Esc, PgUp/PgDn and the mouse are taken before readline
 * sees them. The command line has the focus at start, so typing a command
 * and Enter always works; letters act as keys only while a pane has it.
 */
#include "tui_internal.h"

#include <readline/history.h>
#include <readline/readline.h>
#include <stdlib.h>
#include <string.h>

const tui_key tui_keys[] = {
    { KEY_F(1), '?', "F1", "?", "Help", "these keys", "keys", TUI_A_HELP },
    { KEY_F(2), 'b', "F2", "b", "Break", "breakpoint on the selected op: set/delete", "break OP | delete N",
      TUI_A_BREAK },
    { KEY_F(3), '/', "F3", "/", "Search", "search the ops by name", "search TEXT", TUI_A_SEARCH },
    { KEY_F(4), 'j', "F4", "j", "Jump", "jump to where training stopped", "jump", TUI_A_JUMP },
    { KEY_F(5), 'c', "F5", "c", "Cont", "continue (or start training)", "continue", TUI_A_CONT },
    { KEY_F(6), 0, "F6", NULL, "Pane", "focus the next pane", "focus next", TUI_A_PANE },
    { KEY_F(7), 's', "F7", "s", "Step", "step: run one op", "step", TUI_A_STEP },
    { KEY_F(8), 'n', "F8", "n", "Next", "next: run to the next step", "next", TUI_A_NEXT },
    { KEY_F(9), 'N', "F9", "N", "NaN", "break at the op that creates a NaN", "break nan", TUI_A_NAN },
    { KEY_F(10), 0, "F10", NULL, "Quit", "quit: end training and the program", "quit", TUI_A_QUIT },
    { 27, 0, "Esc", NULL, NULL, "command line <-> panes", "focus PANE|cmd", TUI_A_ESC },
    { 0, 't', NULL, "t", NULL, "record the tensor's statistics every step", "trend TENSOR", TUI_A_TREND },
    { 0, '[', NULL, "[", NULL, "the tensor's previous 2-D slice", "view [I,J]", TUI_A_SLICE_PREV },
    { 0, ']', NULL, "]", NULL, "the tensor's next 2-D slice", "view [I,J]", TUI_A_SLICE_NEXT },
    { 0, '{', NULL, "{", NULL, "previous batch: the dim before [ ]'s", "view [I,J]", TUI_A_OUTER_PREV },
    { 0, '}', NULL, "}", NULL, "next batch: the dim before [ ]'s", "view [I,J]", TUI_A_OUTER_NEXT },
    { 0, 'p', NULL, "p", NULL, "the profile pane, in the tensor's place", "focus profile|tensor", TUI_A_PROFILE },
    { 0, 'm', NULL, "m", NULL, "mouse off (the terminal selects text)/on", "set mouse off|on", TUI_A_MOUSE },
    { 12, 0, "C-l", NULL, NULL, "draw the screen again", "refresh", TUI_A_REFRESH },
    { 0, 0, NULL, NULL, NULL, NULL, NULL, 0 },
};

static WINDOW *inpad;        /* keys are read here: a pad, so reading refreshes nothing */
static unsigned char queue[16]; /* bytes for readline */
static int q_len, q_pos;
static char *ready;          /* a command line for the session */
static bool ended;           /* Ctrl-D on an empty line */
static bool installed;
static FILE *devnull;
static int back_to = -1;     /* the pane a prefilled line (/ search) goes back to */

/* ---- readline's side ----------------------------------------------------------- */

static int getc_cb(FILE *f)
{
    (void)f;
    return q_pos < q_len ? queue[q_pos++] : 0;
}

static int avail_cb(void) { return q_pos < q_len; }

static void prep_none(int meta) { (void)meta; }
static void deprep_none(void) {}

static void feed(const char *s, int n)
{
    if (!installed || n > (int)sizeof queue)
        return;
    memcpy(queue, s, (size_t)n);
    q_len = n;
    q_pos = 0;
    while (q_pos < q_len)
        rl_callback_read_char();
    q_len = q_pos = 0;
}

static void on_line(char *line)
{
    if (!line) {
        ended = true;
        return;
    }
    const char *prompt = rl_prompt ? rl_prompt : "";
    if (strcmp(prompt, "(tdbg) ") == 0) /* a command, not an answer (quit's y or n) */
        dbg_history_add(line);
    fprintf(dbg_out, "%s%s\n", prompt, line);
    free(ready);
    ready = line;
    if (back_to >= 0)
        tui_focus(back_to);
    back_to = -1;
}

static void redisplay_cb(void)
{
    tui_cmdline_draw();
    doupdate();
}

static void free_matches(void)
{
    for (int i = 0; i < tui.n_matches; i++)
        free(tui.matches[i]);
    free(tui.matches);
    tui.matches = NULL;
    tui.n_matches = 0;
}

static void show_matches(char **m, int n, int max_len)
{
    (void)max_len;
    free_matches();
    tui.matches = calloc((size_t)n, sizeof *tui.matches);
    if (!tui.matches)
        return;
    for (int i = 0; i < n; i++)
        if ((tui.matches[tui.n_matches] = strdup(m[i + 1])) != NULL)
            tui.n_matches++;
}

static char **complete_cb(const char *text, int start, int end)
{
    char **m = dbg_complete(text, start, end);
    if (!m)
        snprintf(tui.hint, sizeof tui.hint, "no completions for '%s'", text);
    return m;
}

void tui_input_prep(FILE *in)
{
    devnull = fopen("/dev/null", "w");
    rl_readline_name = "tdbg"; /* $if tdbg in ~/.inputrc */
    rl_instream = in;
    rl_outstream = devnull;
    rl_catch_signals = 0;
    rl_catch_sigwinch = 0;
    rl_change_environment = 0;
    rl_prep_term_function = prep_none;
    rl_deprep_term_function = deprep_none;
    rl_getc_function = getc_cb;
    rl_input_available_hook = avail_cb;
    rl_redisplay_function = redisplay_cb;
    rl_completion_display_matches_hook = show_matches;
    rl_initialize();
}

void tui_input_install(const char *prompt)
{
    rl_attempted_completion_function = complete_cb; /* after the CLI's set-up */
    if (installed) {
        if (!rl_prompt || strcmp(rl_prompt, prompt) != 0) /* a question (quit's), or the commands' again */
            rl_set_prompt(prompt);
        return;
    }
    installed = true;
    inpad = newpad(1, 1);
    keypad(inpad, TRUE);
    rl_callback_handler_install(prompt, on_line);
    rl_variable_bind("bell-style", "none"); /* its bell goes to stderr: the output pane */
    rl_bind_keyseq("\033[3~", rl_delete);
}

void tui_input_close(void)
{
    if (installed)
        rl_callback_handler_remove();
    installed = false;
    if (inpad)
        delwin(inpad);
    inpad = NULL;
    free(ready);
    ready = NULL;
    free_matches();
    rl_outstream = NULL;
    if (devnull)
        fclose(devnull);
    devnull = NULL;
}

char *tui_input_take(void)
{
    char *l = ready;
    ready = NULL;
    ended = false;
    return l;
}

void tui_submit(const char *line)
{
    fprintf(dbg_out, "(tdbg) %s\n", line);
    free(ready);
    ready = strdup(line);
}

void tui_input_cancel(void)
{
    if (!installed)
        return;
    rl_callback_sigcleanup();
    rl_replace_line("", 0);
    rl_point = rl_end = rl_mark = 0;
    snprintf(tui.hint, sizeof tui.hint, "^C: line dropped (while training runs, Ctrl-C stops at the next op)");
}

void tui_input_prefill(const char *text)
{
    tui_focus(TUI_CMDLINE);
    if (!installed)
        return;
    rl_replace_line(text, 0);
    rl_point = rl_end;
}

void tui_cmdline_draw(void)
{
    WINDOW *w = tui.cmd;
    if (!w)
        return;
    int width = getmaxx(w);
    werase(w);
    const char *prompt = rl_display_prompt ? rl_display_prompt : rl_prompt ? rl_prompt : "";
    const char *line = rl_line_buffer ? rl_line_buffer : "";
    bool focused = tui.focus == TUI_CMDLINE || tui.geom.too_small;
    int plen = (int)strlen(prompt), room = width - plen - 1;
    if (room < 1) {
        prompt = "";
        plen = 0;
        room = width - 1;
    }
    int point = installed ? rl_point : 0, end = installed ? rl_end : 0;
    int start = point > room ? point - room : 0;
    wattrset(w, tui_attr(focused ? TUI_C_ECHO : TUI_C_DIM));
    mvwaddstr(w, 0, 0, prompt);
    wattrset(w, focused ? A_NORMAL : tui_attr(TUI_C_DIM));
    if (end > start)
        waddnstr(w, line + start, end - start < room ? end - start : room);
    wattrset(w, A_NORMAL);
    wmove(w, 0, plen + point - start);
    wnoutrefresh(w);
}

/* ---- focus, mouse ------------------------------------------------------------------ */

void tui_focus(int where)
{
    if (where < TUI_NPANES) {
        tui.last_pane = where;
        back_to = -1;
    }
    tui.focus = where;
    curs_set(where == TUI_CMDLINE ? 1 : 0);
}

void tui_mouse_set(bool on)
{
    tui.mouse = on;
    mmask_t want = BUTTON1_PRESSED | BUTTON4_PRESSED;
#ifdef BUTTON5_PRESSED
    want |= BUTTON5_PRESSED;
#endif
    mousemask(on ? want : 0, NULL);
    mouseinterval(0);
}

static bool inside(tui_rect r, int y, int x) { return y >= r.y && y < r.y + r.h && x >= r.x && x < r.x + r.w; }

static void act(const tui_key *k);

/* The function bar's key under column x, as tui_fbar_draw lays them out. */
static const tui_key *bar_key(int x)
{
    int at = 0;
    for (const tui_key *k = tui_keys; k->what; k++) {
        if (!k->bar)
            continue;
        int len = (int)(strlen(k->fkey_name) - 1 + strlen(k->bar));
        if (x >= at && x < at + len)
            return k;
        at += len + 1;
    }
    return NULL;
}

static void mouse(void)
{
    MEVENT ev;
    if (getmouse(&ev) != OK)
        return;
    int wheel = ev.bstate & BUTTON4_PRESSED ? -3 : 0;
#ifdef BUTTON5_PRESSED
    if (ev.bstate & BUTTON5_PRESSED)
        wheel = 3;
#endif
    if (!wheel && !(ev.bstate & BUTTON1_PRESSED))
        return;
    const tui_geom *g = &tui.geom;
    if (inside(g->fbar, ev.y, ev.x) && !wheel) {
        const tui_key *k = tui.hint[0] ? NULL : bar_key(ev.x);
        if (k)
            act(k);
        return;
    }
    if (inside(g->cmd, ev.y, ev.x)) {
        tui_focus(TUI_CMDLINE);
        return;
    }
    for (int i = 0; i < TUI_NPANES && !g->too_small; i++)
        if (inside(g->pane[i], ev.y, ev.x)) {
            tui_pane *p = &tui.pane[i];
            if (wheel) {
                p->cls->shift(p, wheel, 0);
            } else {
                tui_focus(i);
                p->cls->click(p, ev.y - p->r.y, ev.x - p->r.x);
            }
            return;
        }
}

/* ---- keys ---------------------------------------------------------------------------- */

static void toggle_break(void)
{
    bool later;
    const dbg_op *o = tui_ops_at(tui.pane[TUI_OPS].list.sel, &later);
    char line[TE_NAME_MAX + 16];
    if (!o) {
        snprintf(tui.hint, sizeof tui.hint, "no op to break on yet: F5 or 'run' starts training");
        return;
    }
    for (int i = 0; i < dbg.n_breaks; i++)
        if (dbg.breaks[i].kind == BK_OP && strcmp(dbg.breaks[i].what, o->name) == 0) {
            snprintf(line, sizeof line, "delete %d", dbg.breaks[i].id);
            tui_submit(line);
            return;
        }
    snprintf(line, sizeof line, "break %s", o->name);
    tui_submit(line);
}

static void act(const tui_key *k)
{
    char line[TE_NAME_MAX + 16];
    switch (k->action) {
    case TUI_A_HELP: dbg_execute("keys"); break;
    case TUI_A_BREAK: toggle_break(); break;
    case TUI_A_SEARCH:
        back_to = tui.focus < TUI_NPANES ? tui.focus : -1;
        tui_input_prefill("search ");
        break;
    case TUI_A_JUMP: dbg_execute("jump"); break;
    case TUI_A_PANE: dbg_execute("focus next"); break;
    case TUI_A_ESC: dbg_execute(tui.focus == TUI_CMDLINE ? "focus back" : "focus cmd"); break;
    case TUI_A_REFRESH: dbg_execute("refresh"); break;
    case TUI_A_PROFILE: dbg_execute(tui_prof_shown() ? "focus tensor" : "focus profile"); break;
    case TUI_A_SLICE_PREV: tui_view_slice_step(-1); break;
    case TUI_A_SLICE_NEXT: tui_view_slice_step(1); break;
    case TUI_A_OUTER_PREV: tui_view_outer_step(-1); break;
    case TUI_A_OUTER_NEXT: tui_view_outer_step(1); break;
    case TUI_A_MOUSE: tui_submit(tui.mouse ? "set mouse off" : "set mouse on"); break;
    case TUI_A_TREND:
        if (!tui.view.name[0]) {
            snprintf(tui.hint, sizeof tui.hint, "no tensor on show: select an op first");
            break;
        }
        snprintf(line, sizeof line, "trend %s", tui.view.name);
        tui_submit(line);
        break;
    default: tui_submit(k->command); break;
    }
}

static void esc(void)
{
    wtimeout(inpad, 0);
    int next = wgetch(inpad);
    if (next != ERR && next < 256 && tui.focus == TUI_CMDLINE) { /* Alt-x: readline's meta keys */
        char s[2] = { 27, (char)next };
        feed(s, 2);
        return;
    }
    if (next != ERR)
        ungetch(next);
    for (const tui_key *k = tui_keys; k->what; k++)
        if (k->action == TUI_A_ESC)
            act(k);
}

static void cmdline_key(int ch)
{
    static const struct { int code; const char *seq; } seqs[] = {
        { KEY_UP, "\033[A" },   { KEY_DOWN, "\033[B" }, { KEY_RIGHT, "\033[C" }, { KEY_LEFT, "\033[D" },
        { KEY_HOME, "\033[H" }, { KEY_END, "\033[F" },  { KEY_DC, "\033[3~" },   { KEY_BACKSPACE, "\177" },
        { KEY_ENTER, "\r" },    { '\n', "\r" },
    };
    tui_pane *out = &tui.pane[TUI_OUTPUT];
    if ((ch == KEY_PPAGE || ch == KEY_NPAGE) && !tui.geom.too_small) {
        int page = out->r.h - 2 > 1 ? out->r.h - 2 : 1;
        out->cls->shift(out, ch == KEY_PPAGE ? -page : page, 0);
        return;
    }
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++)
        if (seqs[i].code == ch) {
            feed(seqs[i].seq, (int)strlen(seqs[i].seq));
            return;
        }
    if (ch >= 0 && ch < 256) {
        char c = (char)ch;
        feed(&c, 1);
    }
}

static void pane_key(int ch)
{
    tui_pane *p = &tui.pane[tui.focus];
    if (p->cls->key && p->cls->key(p, ch))
        return;
    int page = p->r.h - 2 > 1 ? p->r.h - 2 : 1;
    switch (ch) {
    case KEY_UP: p->cls->shift(p, -1, 0); return;
    case KEY_DOWN: p->cls->shift(p, 1, 0); return;
    case KEY_LEFT: p->cls->shift(p, 0, -1); return;
    case KEY_RIGHT: p->cls->shift(p, 0, 1); return;
    case KEY_PPAGE: p->cls->shift(p, -page, 0); return;
    case KEY_NPAGE: p->cls->shift(p, page, 0); return;
    case KEY_HOME: p->cls->shift(p, -TUI_FAR, -TUI_FAR); return;
    case KEY_END: p->cls->shift(p, TUI_FAR, 0); return;
    case ':': tui_focus(TUI_CMDLINE); return;
    case 'q':
        if (tui.state == TUI_FINISHED) {
            tui_submit("quit");
            return;
        }
        break;
    default: break;
    }
    for (const tui_key *k = tui_keys; k->what; k++)
        if (k->letter && k->letter == ch) {
            act(k);
            return;
        }
    snprintf(tui.hint, sizeof tui.hint, "'%s' does nothing here: ? lists the keys, Esc goes to the command line",
             keyname(ch) ? keyname(ch) : "?");
}

static void handle(int ch)
{
    if (ch == KEY_RESIZE)
        return; /* tui_redraw() lays out again */
    tui.hint[0] = '\0';
    if (tui.help) { /* any key closes the overlay */
        tui.help = false;
        tui.full = true;
        if (ch != KEY_MOUSE)
            return;
    }
    if (tui.n_matches) {
        free_matches();
        tui.full = true;
    }
    if (ch == KEY_MOUSE) {
        mouse();
        return;
    }
    if (ch == 27) {
        esc();
        return;
    }
    for (const tui_key *k = tui_keys; k->what; k++)
        if (k->fkey && k->fkey == ch && k->action != TUI_A_ESC) {
            act(k);
            return;
        }
    if (tui.focus == TUI_CMDLINE || tui.geom.too_small)
        cmdline_key(ch);
    else
        pane_key(ch);
}

bool tui_input_poll(int timeout_ms)
{
    if (!installed)
        return false;
    tui_term_resized(); /* a remote terminal's new size: KEY_RESIZE below */
    wtimeout(inpad, timeout_ms);
    int ch = wgetch(inpad);
    bool any = false;
    while (ch != ERR) {
        any = true;
        handle(ch);
        if (ready || ended)
            break;
        wtimeout(inpad, 0);
        ch = wgetch(inpad);
    }
    if (any)
        tui_redraw(tui.full);
    return ready || ended;
}
