/*
 * tui.c — the TUI as the session's front end, registered with the
 * debugger from a constructor when the debugger library loads (TDBG=tui
 * picks it; the debugger names nothing of the TUI). tui_start() takes the
 * terminal, the session then shows it each stop (show_stop: the stop's op
 * and tensor on show, from the session's dbg_stop), asks it for command
 * lines (read_line: the key loop until a line is ready), and at the
 * program's end it gets a last look (finish) before the terminal goes
 * back; on a fatal signal it gives the terminal back (tui_term_fatal).
 * An attached session (tdbg attach --tui) starts it on the client's
 * terminal (start_on), tells it the terminal's new sizes (resize), and
 * ends it at a detach with no last look (leave).
 *
 * While training runs, the TUI's own engine hooks keep the screen live at
 * op boundaries, at most every TUI_FRAME_MS: keys are read (a command
 * typed then runs at once), the panes are drawn again. Between frames an
 * op costs a compare or two and a coarse clock read.
 */
#include "tui_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

tui_state tui;

static int hook = -1;
static long last_frame;

/* TDBG_TUI_STATS=1: what the live screen cost, said on stderr at the end
 * (bench/tui.sh reads it). */
static bool stats_on;
static long n_frames;
static double frame_s, start_s;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void draw_small(void)
{
    WINDOW *w = tui.small;
    if (!w)
        return;
    werase(w);
    char buf[256];
    snprintf(buf, sizeof buf, "tdbg: this terminal is %dx%d; the TUI needs at least %dx%d. Enlarge it, or "
             "type commands below ('quit' leaves).", COLS, LINES, TUI_MIN_W, TUI_MIN_H);
    int y = getmaxy(w) / 2 - 2;
    tui_wrap(w, y < 0 ? 0 : y, 0, getmaxy(w), buf);
    wnoutrefresh(w);
}

/* Draws the completion list in a box above the command line. */
static void draw_matches(void)
{
    int n = tui.n_matches, widest = 0;
    for (int i = 0; i < n; i++) {
        int len = (int)strlen(tui.matches[i]);
        widest = len > widest ? len : widest;
    }
    int col_w = widest + 2, ncols = (COLS - 2) / col_w;
    ncols = ncols < 1 ? 1 : ncols;
    int nrows = (n + ncols - 1) / ncols, room = tui.geom.cmd.y - 2;
    if (room > LINES / 2)
        room = LINES / 2 > 3 ? LINES / 2 : 3; /* the panes stay in sight */
    int rows = nrows < room ? nrows : room;
    if (rows < 1)
        return;
    int shown = n < rows * ncols ? n : rows * ncols; /* the first ones, column by column */
    int per_col = (shown + ncols - 1) / ncols;
    WINDOW *w = newwin(rows + 1, COLS, tui.geom.cmd.y - rows - 1, 0);
    if (!w)
        return;
    char title[96];
    snprintf(title, sizeof title, " %d completions%s ", n, shown < n ? "; type more to see the rest" : "");
    wattrset(w, tui_attr(TUI_C_TITLE_FOCUS));
    mvwhline(w, 0, 0, ' ', COLS);
    mvwaddnstr(w, 0, 0, title, COLS);
    wattrset(w, A_NORMAL);
    for (int r = 0; r < per_col; r++)
        for (int c = 0; c < ncols; c++) {
            int i = c * per_col + r;
            if (i < shown)
                mvwaddnstr(w, 1 + r, 1 + c * col_w, tui.matches[i], col_w - 1);
        }
    wnoutrefresh(w);
    delwin(w);
}

void tui_redraw(bool full)
{
    full |= tui.full;
    int h, w;
    getmaxyx(stdscr, h, w);
    tui_geom g;
    tui_layout_compute(h, w, dbg.n_breaks, &g);
    if (!tui.status || memcmp(&g, &tui.geom, sizeof g) != 0) { /* a resize, or the breakpoints pane grew */
        tui_layout_apply();
        clearok(curscr, TRUE);
        full = true;
    }
    tui.full = full;
    if (full) {
        WINDOW *all[] = { tui.status, tui.cmd, tui.fbar, tui.small };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (all[i])
                touchwin(all[i]);
        for (int i = 0; i < TUI_NPANES; i++)
            if (tui.pane[i].win)
                touchwin(tui.pane[i].win);
        tui_layout_rule();
    }
    if (tui.geom.too_small) {
        draw_small();
    } else {
        for (int i = 0; i < TUI_NPANES; i++) {
            tui_pane *p = &tui.pane[i];
            if (!p->win)
                continue;
            p->cls->draw(p);
            wnoutrefresh(p->win);
        }
    }
    tui_status_draw();
    tui_fbar_draw();
    if (tui.help)
        tui_help_draw();
    if (tui.n_matches)
        draw_matches();
    tui_cmdline_draw(); /* last: the cursor stays on the command line */
    doupdate();
    tui.full = false;
}

/* ---- the session's front end -------------------------------------------------------- */

static char *read_line(const char *prompt)
{
    tui_input_install(prompt);
    if (tui.state != TUI_FINISHED)
        tui.state = dbg.started ? TUI_PAUSED : TUI_READY;
    tui_ops_forget();
    tui.gen++;
    tui_redraw(false);
    for (;;) {
        if (tui_input_poll(100))
            return tui_input_take();
        if (tui_term_gone()) /* nobody to ask: as at the end of input */
            return NULL;
        if (dbg_interrupted) { /* Ctrl-C at the prompt drops the line */
            dbg_interrupted = 0;
            tui_input_cancel();
            tui_redraw(false);
        }
        if (tui_capture_fresh())
            tui_redraw(false);
    }
}

static void stop_tui(void)
{
    if (hook >= 0)
        te_hook_remove(hook);
    hook = -1;
    tui_cmds_unregister();
    tui_input_close();
    tui_capture_stop();
    tui_layout_free();
    tui_term_close();
    if (stats_on) /* stderr is the program's own again, the terminal as it was */
        fprintf(stderr, "tdbg tui: frames=%ld frame_s=%.4f run_s=%.3f\n", n_frames, frame_s, now_s() - start_s);
    tui_out_free();
    tui_track_free();
}

/* The program ended. When it ended by itself, the screen stays for a last
 * look: commands still work, until q, an empty line, or a command that
 * would run training (its entry says .resumes). Then the terminal goes
 * back. */
static void finish(void)
{
    if (!dbg.ending && dbg.interactive) {
        tui.state = TUI_FINISHED;
        /* the tensors went with the program (te_shutdown): names and statistics stay */
        for (int i = 0; i < dbg.n_ops; i++) {
            memset(dbg.ops[i].in, 0, sizeof dbg.ops[i].in);
            memset(dbg.ops[i].out, 0, sizeof dbg.ops[i].out);
        }
        for (;;) {
            char *line = dbg_read_line("(tdbg) ");
            char word[64];
            if (line)
                dbg_word(line, word, sizeof word);
            if (!line || !word[0]) {
                free(line);
                break;
            }
            const dbg_cmd *c = dbg_cmd_lookup(word);
            if (c && c->resumes) { /* nothing left to run: leave */
                free(line);
                break;
            }
            if (c)
                dbg_execute(line);
            free(line);
        }
    }
    stop_tui();
}

/* A new stop: its op and tensor on show before the first command. */
static void show_stop(const dbg_stop *s)
{
    (void)s; /* tui_jump reads the same dbg_last_stop() */
    const te_op_record *r = dbg_stopped_at();
    if (r) /* the ops pane's ^ and v for the op stopped at, too */
        tui_track_stopped(r);
    tui.state = TUI_PAUSED;
    tui_ops_forget();
    tui_jump();
}

static int start(const dbg_term *remote, char *why, size_t n);

static const dbg_frontend frontend = {
    .name = "tui",
    .start = tui_start,
    .read_line = read_line,
    .show_stop = show_stop,
    .finish = finish,
    .fatal_signal = tui_term_fatal,
    .start_on = start,
    .resize = tui_term_resize,
    .leave = stop_tui,
};

/* The TUI's objects are linked into the debugger library (libtool links
 * a convenience library into a shared one whole), so this runs when the
 * engine loads the debugger, before dbg_plugin_start() picks a front end. */
__attribute__((constructor)) static void register_frontend(void) { dbg_frontend_register(&frontend); }

/* ---- live while training runs ------------------------------------------------------- */

static void frame(void)
{
    tui.state = TUI_RUNNING;
    if (tui_term_gone())
        return; /* training goes on without a screen */
    if (tui_input_poll(0)) {
        char *line = tui_input_take();
        if (line) /* typed while running: runs now, at this op boundary */
            dbg_execute(line);
        else
            snprintf(tui.hint, sizeof tui.hint, "Ctrl-D leaves at a stop; Ctrl-C stops training first");
        free(line);
        if (hook < 0) /* it was `detach`: the TUI is gone */
            return;
    }
    if (dbg_interrupted)
        snprintf(tui.hint, sizeof tui.hint, "Ctrl-C: stopping at the next op");
    tui_redraw(false);
}

static void on_op_end(const te_op_record *r, void *user)
{
    (void)user;
    tui_track_op(r);
    if (r->kernel)
        tui.graph = true;
    long t = now_ms();
    if (t - last_frame >= TUI_FRAME_MS) {
        last_frame = t;
        double t0 = stats_on ? now_s() : 0;
        frame();
        if (stats_on) {
            n_frames++;
            frame_s += now_s() - t0;
        }
    }
}

static void on_step_end(int64_t step, void *user)
{
    (void)user;
    tui_track_step_end(step);
}

static int start(const dbg_term *remote, char *why, size_t n)
{
    memset(&tui, 0, sizeof tui);
    const char *st = getenv("TDBG_TUI_STATS");
    stats_on = st && st[0] && strcmp(st, "0") != 0;
    start_s = now_s();
    static const tui_pane_class *const classes[TUI_NPANES] = {
        [TUI_OPS] = &tui_pane_ops,       [TUI_TENSOR] = &tui_pane_tensor, [TUI_CHART] = &tui_pane_chart,
        [TUI_BREAKS] = &tui_pane_breaks, [TUI_OUTPUT] = &tui_pane_output,
    };
    for (int i = 0; i < TUI_NPANES; i++)
        tui.pane[i].cls = classes[i];
    if (!tui_term_open(remote, why, n))
        return -1;
    if (!tui_capture_start(remote != NULL, why, n)) {
        tui_term_close();
        return -1;
    }
    if (!tui_cmds_register(why, n)) {
        tui_capture_stop();
        tui_term_close();
        return -1;
    }
    hook = te_hook_add(&(te_hooks){ .op_end = on_op_end, .step_end = on_step_end }, NULL);
    tui_mouse_set(true);
    tui_focus(TUI_CMDLINE); /* typing a command and Enter always works */
    tui.last_pane = TUI_OPS;
    tui_layout_apply();
    dbg_readline_setup(); /* the CLI's completion and history; the TUI's hooks go over them */
    tui_input_install("(tdbg) ");
    tui_redraw(true);
    return 0;
}

int tui_start(char *why, size_t n) { return start(NULL, why, n); }
