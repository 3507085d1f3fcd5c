/*
 * pane_ops.c — the ops pane: the step's ops in execution order (this
 * step's so far, then, dimmed, the rest of the last step's), each with its
 * exec index, name, type and, as the pane widens, output shape, dtype and
 * last statistics. The dtype column is the op's precision (its output's
 * dtype, also for the last step's rows). Marks: > the op training is at,
 * ! an op whose output holds NaN/Inf, a dot for a breakpoint that matches
 * it, then ^ an op whose rounding to f16/bf16 overflowed to +-Inf, v one
 * whose rounding underflowed finite values to zero (te_op_record.round). Moving the
 * selection shows the op's first output in the tensor pane.
 */
#include "tui_internal.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

/* Statistics worked out at a stop for rows the session did not check. */
static te_stats cache[DBG_MAX_OPS];
static unsigned char cache_state[DBG_MAX_OPS]; /* 0 not tried, 1 have, 2 none */

void tui_ops_forget(void) { memset(cache_state, 0, sizeof cache_state); }

int tui_ops_count(void) { return dbg.n_ops > dbg.n_last_ops ? dbg.n_ops : dbg.n_last_ops; }

const dbg_op *tui_ops_at(int i, bool *later)
{
    *later = i >= dbg.n_ops;
    if (i < 0)
        return NULL;
    if (i < dbg.n_ops)
        return &dbg.ops[i];
    return i < dbg.n_last_ops ? &dbg.last_ops[i] : NULL;
}

int tui_ops_find(const char *name)
{
    bool later;
    for (int i = tui_ops_count() - 1; i >= 0; i--) {
        const dbg_op *o = tui_ops_at(i, &later);
        if (o && strcmp(o->name, name) == 0)
            return i;
    }
    return -1;
}

void tui_ops_select(int i, bool show)
{
    tui_list *l = &tui.pane[TUI_OPS].list;
    tui_list_set_count(l, tui_ops_count());
    tui_list_select(l, i);
    bool later;
    const dbg_op *o = tui_ops_at(l->sel, &later);
    if (show && o && o->n_out && o->out_name[0][0] && strcmp(tui.view.name, o->out_name[0]) != 0) {
        char err[256];
        tui_view_name(o->out_name[0], err, sizeof err); /* one of the last step says why in its pane */
    }
}

/* Statistics of row i's first output: the session's, else computed now
 * while training is paused and the tensor is still readable. */
static const te_stats *row_stats(int i, const dbg_op *o, bool later)
{
    if (o->has_stats)
        return &o->out_stats;
    if (later || i >= DBG_MAX_OPS || tui.state == TUI_RUNNING || !o->n_out)
        return NULL;
    if (!cache_state[i]) {
        char err[8];
        const te_tensor *t = dbg_tensor_find(o->out_name[0], err, sizeof err);
        cache_state[i] = 2;
        if (t && t->data && te_dtype_is_float(t->dtype)) {
            te_stats_quick(t, &cache[i]);
            cache_state[i] = 1;
        }
    }
    return cache_state[i] == 1 ? &cache[i] : NULL;
}

/* The breakpoint that matches an op (an enabled one first), or NULL. */
static const dbg_break *break_on(const dbg_op *o)
{
    const dbg_break *found = NULL;
    for (int i = 0; i < dbg.n_breaks; i++) {
        const dbg_break *b = &dbg.breaks[i];
        bool m = (b->kind == BK_OP && fnmatch(b->what, o->name, 0) == 0) ||
                 (b->kind == BK_TYPE && strcmp(b->what, o->type) == 0);
        if (m && (!found || (b->enabled && !found->enabled)))
            found = b;
    }
    return found;
}

/* The row training is at: the last op run in this step. */
static int current_row(void)
{
    if (tui.state == TUI_READY || tui.state == TUI_FINISHED || !dbg.in_step)
        return -1;
    return dbg.n_ops - 1;
}

static void draw(tui_pane *p)
{
    WINDOW *w = p->win;
    tui_list *l = &p->list;
    int width = p->r.w, n = tui_ops_count();
    werase(w);
    char right[96];
    if (!n)
        snprintf(right, sizeof right, "none yet");
    else
        snprintf(right, sizeof right, "step %lld: %d of %d run", (long long)(dbg.step < 0 ? 0 : dbg.step),
                 dbg.n_ops, n);
    tui_pane_title(p, "ops", right);
    if (!n) {
        wattrset(w, tui_attr(TUI_C_DIM));
        mvwaddstr(w, 1, 1, "No op has run yet.");
        mvwaddstr(w, 2, 1, "F5 or 'run' starts training.");
        wattrset(w, A_NORMAL);
        return;
    }
    tui_list_set_height(l, p->r.h - 1);
    tui_list_set_count(l, n);
    int cur = current_row();
    /* in view: the selection; while training runs, the op it is at (unless
     * the pane has the focus, where the user moves) */
    tui_list_show(l, tui.state == TUI_RUNNING && tui.focus != TUI_OPS && cur >= 0 ? cur : l->sel);
    /* columns: marks(4) exec(5) name type shape dtype stats */
    int rest = width - 9;
    int type_w = rest >= 28 ? 13 : 0, shape_w = rest >= 46 ? 16 : 0, dtype_w = rest >= 50 ? 5 : 0;
    int stats_w = rest >= 68 ? 22 : 0;
    int name_w = rest - type_w - shape_w - dtype_w - stats_w;
    for (int y = 0, i; (i = tui_list_item_at(l, y)) >= 0; y++) {
        bool later;
        const dbg_op *o = tui_ops_at(i, &later);
        if (!o)
            continue;
        const te_stats *s = row_stats(i, o, later);
        bool bad = (!later && o->bad) || (s && (s->nan || s->inf));
        const dbg_break *b = break_on(o);
        attr_t base = i == cur ? tui_attr(TUI_C_CURRENT) : later ? tui_attr(TUI_C_DIM) : A_NORMAL;
        if (i == l->sel)
            base = tui.focus == TUI_OPS ? tui_attr(TUI_C_SELECT) : base | A_UNDERLINE;
        wmove(w, 1 + y, 0);
        wattrset(w, i == cur ? tui_attr(TUI_C_CURRENT) | (base & A_UNDERLINE) : base);
        waddstr(w, i == cur ? ">" : " ");
        wattrset(w, bad ? tui_attr(TUI_C_NAN) : base);
        waddstr(w, bad ? "!" : " ");
        wattrset(w, b ? tui_attr(b->enabled ? TUI_C_BREAK : TUI_C_DIM) : base);
        waddstr(w, b ? (tui.utf8 ? (b->enabled ? "\u25cf" : "\u25cb") : (b->enabled ? "*" : "o")) : " ");
        const tui_op_round *rd = tui_track_round(o->exec, later);
        bool over = rd && rd->overflow, under = rd && rd->underflow;
        wattrset(w, over ? tui_attr(TUI_C_NAN) : under ? tui_attr(TUI_C_THRESH) : base);
        waddstr(w, over ? "^" : under ? "v" : " ");
        wattrset(w, base);
        char buf[512], shape[64] = "-", st[64] = "";
        const te_tensor *t = !later && o->n_out ? o->out[0] : NULL;
        if (t)
            te_shape_str(t->ndim, t->shape, shape, sizeof shape);
        if (s)
            snprintf(st, sizeof st, "abs_max %.3g%s", s->abs_max, s->nan ? " NaN" : s->inf ? " Inf" : "");
        /* each column of width W: a space, then W-1 characters */
        size_t len = (size_t)snprintf(buf, sizeof buf, "%4d %-*.*s", o->exec, name_w - 1, name_w - 1, o->name);
        const struct { int w; const char *s; } cols[] = {
            { type_w, o->type }, { shape_w, shape }, { dtype_w, t ? te_dtype_name(t->dtype) : rd ? te_dtype_name(rd->dtype) : "" }, { stats_w, st },
        };
        for (size_t c = 0; c < sizeof cols / sizeof cols[0] && len < sizeof buf; c++)
            if (cols[c].w)
                len += (size_t)snprintf(buf + len, sizeof buf - len, " %-*.*s", cols[c].w - 1, cols[c].w - 1,
                                        cols[c].s);
        tui_put(w, buf, width - 4);
        wattrset(w, A_NORMAL);
    }
}

static bool key(tui_pane *p, int k)
{
    bool later;
    const dbg_op *o = tui_ops_at(p->list.sel, &later);
    if ((k == '\r' || k == '\n' || k == KEY_ENTER) && o) {
        tui_ops_select(p->list.sel, true);
        tui_prof_show(false);
        tui_focus(TUI_TENSOR);
        return true;
    }
    return false;
}

static void click(tui_pane *p, int row, int col)
{
    (void)col;
    int i = tui_list_item_at(&p->list, row - 1);
    if (i >= 0)
        tui_ops_select(i, true);
}

static void move_sel(tui_pane *p, int rows, int cols)
{
    (void)cols;
    tui_list_set_count(&p->list, tui_ops_count());
    tui_list_move(&p->list, rows);
    tui_ops_select(p->list.sel, true);
}

const tui_pane_class tui_pane_ops = { .name = "ops", .draw = draw, .key = key, .click = click, .shift = move_sel };
