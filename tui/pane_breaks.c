/*
 * pane_breaks.c — the breakpoints pane: the session's breakpoints with
 * what they stop at, their condition and hit counts; the one training
 * stopped at stands out. In the pane, d deletes the selected one and e or
 * Space enables or disables it, as the commands `delete N`, `enable N`,
 * `disable N` (the keys run them).
 */
#include "tui_internal.h"

#include <stdio.h>
#include <string.h>

const dbg_break *tui_breaks_selected(void)
{
    int i = tui.pane[TUI_BREAKS].list.sel;
    return i >= 0 && i < dbg.n_breaks ? &dbg.breaks[i] : NULL;
}

static void draw(tui_pane *p)
{
    WINDOW *w = p->win;
    tui_list *l = &p->list;
    int n = dbg.n_breaks;
    werase(w);
    char right[32];
    snprintf(right, sizeof right, "%d", n);
    tui_pane_title(p, "breakpoints", right);
    if (!n) {
        wattrset(w, tui_attr(TUI_C_DIM));
        mvwaddnstr(w, 1, 1, "none: b on an op, F9 for NaN", p->r.w - 1);
        wattrset(w, A_NORMAL);
        return;
    }
    const dbg_stop *stop = dbg_last_stop();
    int here_id = stop && stop->active ? stop->break_id : 0; /* the breakpoint training is paused at */
    tui_list_set_height(l, p->r.h - 1);
    tui_list_set_count(l, n);
    tui_list_show(l, l->sel);
    for (int y = 0, i; (i = tui_list_item_at(l, y)) >= 0; y++) {
        const dbg_break *b = &dbg.breaks[i];
        bool sel = i == l->sel, here = b->id == here_id;
        attr_t base = here ? tui_attr(TUI_C_CURRENT) : b->enabled ? A_NORMAL : tui_attr(TUI_C_DIM);
        if (sel)
            base = tui.focus == TUI_BREAKS ? tui_attr(TUI_C_SELECT) : base | A_UNDERLINE;
        wmove(w, 1 + y, 0);
        wattrset(w, b->enabled ? tui_attr(TUI_C_BREAK) | (base & A_UNDERLINE) : base);
        waddstr(w, tui.utf8 ? (b->enabled ? "\u25cf" : "\u25cb") : (b->enabled ? "*" : "o"));
        wattrset(w, base);
        char what[TE_NAME_MAX + 300], hits[32];
        if (b->kind == BK_STEP)
            snprintf(what, sizeof what, "%-3d step %lld", b->id, (long long)b->step);
        else
            snprintf(what, sizeof what, "%-3d %s%s%s%s", b->id, b->kind == BK_TYPE ? "type:" : "", b->what,
                     b->cond ? " if " : "", b->cond ? dbg_cond_text(b->cond) : "");
        snprintf(hits, sizeof hits, "%s hits %lld", b->temporary ? " once" : "", (long long)b->hits);
        int room = p->r.w - 2 - (int)strlen(hits);
        wprintw(w, " %-*.*s", room > 0 ? room : 0, room > 0 ? room : 0, what);
        tui_put(w, hits, p->r.w - getcurx(w));
        wattrset(w, A_NORMAL);
    }
}

static bool key(tui_pane *p, int k)
{
    (void)p;
    const dbg_break *b = tui_breaks_selected();
    char line[64];
    if (!b)
        return false;
    if (k == 'd' || k == KEY_DC)
        snprintf(line, sizeof line, "delete %d", b->id);
    else if (k == 'e' || k == ' ')
        snprintf(line, sizeof line, "%s %d", b->enabled ? "disable" : "enable", b->id);
    else
        return false;
    tui_submit(line);
    return true;
}

static void click(tui_pane *p, int row, int col)
{
    (void)col;
    tui_list_set_count(&p->list, dbg.n_breaks);
    int i = tui_list_item_at(&p->list, row - 1);
    if (i >= 0)
        tui_list_select(&p->list, i);
}

static void move_sel(tui_pane *p, int rows, int cols)
{
    (void)cols;
    tui_list_set_count(&p->list, dbg.n_breaks);
    tui_list_move(&p->list, rows);
}

const tui_pane_class tui_pane_breaks = { .name = "breaks", .draw = draw, .key = key, .click = click,
                                         .shift = move_sel };
