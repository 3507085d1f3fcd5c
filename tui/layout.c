/*
 * layout.c — where the panes go. One function maps a screen size to
 * rectangles (readable at 80x24, the extra room of larger terminals shared
 * out), one makes the windows; KEY_RESIZE and a change in the number of
 * breakpoints call them again.
 *
 *   status bar                                              row 0
 *   ops (execution order)        | chart (loss, trend)
 *                                | tensor (a 2-D slice)
 *   breakpoints                  |
 *   output (program and debugger), full width
 *   command line                                            row h-2
 *   function keys                                           row h-1
 */
#include "tui_internal.h"

#include <string.h>

static int clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

void tui_layout_compute(int h, int w, int n_breaks, tui_geom *g)
{
    memset(g, 0, sizeof *g);
    g->too_small = h < TUI_MIN_H || w < TUI_MIN_W;
    g->status = (tui_rect){ 0, 0, 1, w };
    g->cmd = (tui_rect){ h - 2, 0, 1, w };
    g->fbar = (tui_rect){ h - 1, 0, 1, w };
    if (g->too_small) {
        g->cmd = (tui_rect){ h - 1, 0, 1, w }; /* a message above, commands still work */
        return;
    }
    int avail = h - 3;
    int out_h = clamp(avail * 3 / 10, 5, 24);
    int top = avail - out_h;
    int left = w >= 120 ? w * 45 / 100 : w / 2;
    int right_x = left + 1, right_w = w - right_x;
    int breaks_h = clamp(n_breaks + 1, 3, top / 3);
    int chart_h = clamp(top * 3 / 10, 3, 16);
    g->pane[TUI_OPS] = (tui_rect){ 1, 0, top - breaks_h, left };
    g->pane[TUI_BREAKS] = (tui_rect){ 1 + top - breaks_h, 0, breaks_h, left };
    g->pane[TUI_CHART] = (tui_rect){ 1, right_x, chart_h, right_w };
    g->pane[TUI_TENSOR] = (tui_rect){ 1 + chart_h, right_x, top - chart_h, right_w };
    g->pane[TUI_OUTPUT] = (tui_rect){ 1 + top, 0, out_h, w };
    g->rule = (tui_rect){ 1, left, top, 1 };
}

static WINDOW *make(tui_rect r) { return r.h > 0 && r.w > 0 ? newwin(r.h, r.w, r.y, r.x) : NULL; }

static WINDOW *rule;

void tui_layout_free(void)
{
    WINDOW **all[] = { &tui.status, &tui.cmd, &tui.fbar, &tui.small, &rule };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (*all[i]) {
            delwin(*all[i]);
            *all[i] = NULL;
        }
    for (int i = 0; i < TUI_NPANES; i++)
        if (tui.pane[i].win) {
            delwin(tui.pane[i].win);
            tui.pane[i].win = NULL;
        }
}

static void draw_rule(void)
{
    if (!rule)
        return;
    wattrset(rule, tui_attr(TUI_C_DIM));
    for (int y = 0; y < tui.geom.rule.h; y++)
        mvwaddstr(rule, y, 0, tui_glyph_rule());
    wnoutrefresh(rule);
}

void tui_layout_apply(void)
{
    int h, w;
    getmaxyx(stdscr, h, w);
    tui_layout_free();
    tui_layout_compute(h, w, dbg.n_breaks, &tui.geom);
    const tui_geom *g = &tui.geom;
    tui.status = make(g->status);
    tui.cmd = make(g->cmd);
    tui.fbar = g->too_small ? NULL : make(g->fbar);
    if (g->too_small) {
        tui.small = make((tui_rect){ 0, 0, h - 1, w });
        return;
    }
    for (int i = 0; i < TUI_NPANES; i++) {
        tui.pane[i].r = g->pane[i];
        tui.pane[i].win = make(g->pane[i]);
    }
    rule = make(g->rule);
    draw_rule();
}

void tui_layout_rule(void) { draw_rule(); }

/* Writes at most n columns of s (UTF-8) at the cursor. */
void tui_put(WINDOW *w, const char *s, int n)
{
    int i = 0, c = 0;
    while (s[i] && c < n) {
        i++;
        while (s[i] && ((unsigned char)s[i] & 0xc0) == 0x80)
            i++;
        c++;
    }
    if (i)
        waddnstr(w, s, i);
}

int tui_wrap(WINDOW *w, int y, int x, int rows, const char *text)
{
    int width = getmaxx(w) - x, used = 0;
    if (width < 1)
        return 0;
    for (const char *s = text; *s && used < rows; used++) {
        int len = (int)strlen(s), cut = len;
        if (len > width) { /* at the last space that fits, else mid-word */
            cut = width;
            while (cut > 0 && s[cut] != ' ')
                cut--;
            cut = cut ? cut : width;
        }
        mvwaddnstr(w, y + used, x, s, cut);
        s += cut;
        while (*s == ' ')
            s++;
    }
    return used;
}

void tui_pane_title(tui_pane *p, const char *title, const char *right)
{
    bool focused = tui.focus == p - tui.pane;
    int w = p->r.w;
    wattrset(p->win, tui_attr(focused ? TUI_C_TITLE_FOCUS : TUI_C_TITLE));
    mvwhline(p->win, 0, 0, ' ', w);
    wmove(p->win, 0, 0);
    char buf[256];
    snprintf(buf, sizeof buf, "%s%s ", focused ? ">" : " ", title);
    tui_put(p->win, buf, w);
    int used = (int)strlen(buf);
    int len = right ? (int)strlen(right) : 0;
    if (len && used + len + 1 <= w) { /* only whole: a cut shape or count misleads */
        wmove(p->win, 0, w - len - 1);
        tui_put(p->win, right, len);
    }
    wattrset(p->win, A_NORMAL);
}
