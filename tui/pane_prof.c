/*
 * pane_prof.c — the profile pane, in the tensor pane's place (p in a pane,
 * `focus profile`; p again or `focus tensor` gives the tensor back): the
 * last profiled step's ops by time, from the engine's te_profile_last
 * (merged by name, longest first), each with a bar of its share of the
 * step, its ms, calls, % of the step and GFLOP/s (where the cost model
 * counts FLOPs); above them the step's phase split. Without a finished
 * profiled step it says how to start the profiler. It reads the engine's
 * ring only while on show, once a frame.
 */
#include "tui_internal.h"

#include <math.h>
#include <string.h>

#define MAX_OPS 1024 /* rows shown; a step with more says so */
#define MS_W 8       /* each numeric column: a space, then the number right-aligned */
#define CALLS_W 6
#define PCT_W 7
#define GF_W 8
#define BAR_MIN 4

static te_profile_op ops[MAX_OPS];
static int head_rows = 3; /* the title, the phase split (one row or two), the column names */

void tui_prof_show(bool on)
{
    tui.pane[TUI_TENSOR].cls = on ? &tui_pane_prof : &tui_pane_tensor;
    tui.full = true; /* the other pane's cells go */
}

bool tui_prof_shown(void) { return tui.pane[TUI_TENSOR].cls == &tui_pane_prof; }

/* Where an op's row puts its columns at width w. */
typedef struct cols {
    int name, bar;
    bool calls, gf;
} cols;

static cols layout(int w, int longest)
{
    cols c = { .name = longest < 8 ? 8 : longest > 28 ? 28 : longest };
    int fixed = MS_W + PCT_W, least = c.name + 1 + BAR_MIN + fixed;
    c.calls = w >= least + 6 + CALLS_W;
    c.gf = w >= least + 6 + CALLS_W + GF_W;
    int rest = w - fixed - (c.calls ? CALLS_W : 0) - (c.gf ? GF_W : 0); /* the name, a space, the bar */
    if (rest - c.name - 1 < BAR_MIN)
        c.name = rest - 1 - BAR_MIN > 4 ? rest - 1 - BAR_MIN : 4;
    c.bar = rest - c.name - 1;
    int spare = c.bar - 30; /* a long bar says no more: the room goes to long names */
    if (spare > 0 && longest > c.name) {
        int give = longest - c.name < spare ? longest - c.name : spare;
        c.name += give;
        c.bar -= give;
    }
    if (c.bar < 0)
        c.bar = 0;
    return c;
}

static tui_color phase_color(te_phase ph)
{
    return ph == TE_PHASE_BACKWARD ? TUI_C_PROF_BWD : ph == TE_PHASE_UPDATE ? TUI_C_PROF_UPD : TUI_C_PROF_FWD;
}

/* The phase split from row y on: in ms when that fits on one row, else
 * in % of the step, on a second row when it must (items stay whole).
 * Returns the rows used. */
static int phases(WINDOW *w, int y, int width, int rows, const te_profile_step *s)
{
    static const char *const label[] = { "fwd", "bwd", "upd", "data", "hooks" };
    const double v[] = { s->phase_ms[TE_PHASE_FORWARD], s->phase_ms[TE_PHASE_BACKWARD], s->phase_ms[TE_PHASE_UPDATE],
                         s->data_ms, s->hooks_ms };
    const tui_color color[] = { TUI_C_PROF_FWD, TUI_C_PROF_BWD, TUI_C_PROF_UPD, TUI_C_DIM, TUI_C_DIM };
    char item[5][32];
    for (int pct = 0; pct < 2; pct++) {
        int len = -1;
        for (int i = 0; i < 5; i++) {
            char num[16];
            if (pct)
                snprintf(item[i], sizeof item[i], " %.0f%%", s->ms > 0 ? 100 * v[i] / s->ms : 0);
            else
                snprintf(item[i], sizeof item[i], " %s%s", tui_fmt_num(v[i], num, sizeof num), i == 4 ? " ms" : "");
            len += (int)(strlen(label[i]) + strlen(item[i])) + 1;
        }
        if (len <= width)
            break;
    }
    int used = 1, x = 0; /* x: not getcurx, which wraps at the last column */
    for (int i = 0; i < 5; i++) {
        int len = (int)(strlen(label[i]) + strlen(item[i]));
        if (x > 0 && x + 1 + len > width) {
            if (used == rows)
                break;
            used++;
            x = 0;
        }
        x += x > 0; /* a space between items */
        wmove(w, y + used - 1, x);
        wattrset(w, tui_attr(color[i]));
        tui_put(w, label[i], width - x);
        wattrset(w, A_NORMAL);
        tui_put(w, item[i], width - x - (int)strlen(label[i]));
        x += len;
    }
    return used;
}

/* One op's row: name, bar, ms, calls, %, GFLOP/s. */
static void row(WINDOW *w, int y, const cols *c, const te_profile_op *o, double step_ms, attr_t base)
{
    char buf[TE_NAME_MAX + 128], num[16];
    int width = getmaxx(w);
    wattrset(w, base);
    mvwhline(w, y, 0, ' ', width);
    snprintf(buf, sizeof buf, "%-*.*s ", c->name, c->name, o->name);
    wmove(w, y, 0);
    tui_put(w, buf, width);
    double share = step_ms > 0 ? o->ms / step_ms : 0;
    share = share < 0 ? 0 : share > 1 ? 1 : share;
    long e = lround(share * c->bar * 8); /* in eighths of a cell */
    wattrset(w, base == A_NORMAL ? tui_attr(phase_color(o->phase)) : base);
    for (int x = 0; x < c->bar; x++, e -= 8)
        waddstr(w, tui_glyph_hbar(e >= 8 ? 8 : (int)(e > 0 ? e : 0)));
    wattrset(w, base);
    int len = snprintf(buf, sizeof buf, "%*s", MS_W, tui_fmt_num(o->ms, num, sizeof num));
    if (c->calls)
        len += snprintf(buf + len, sizeof buf - (size_t)len, "%*d", CALLS_W, o->calls);
    len += snprintf(buf + len, sizeof buf - (size_t)len, "%*.1f%%", PCT_W - 1, 100 * share);
    if (c->gf && o->flops > 0 && o->ms > 0)
        snprintf(buf + len, sizeof buf - (size_t)len, "%*s", GF_W, tui_fmt_num(o->flops / (o->ms * 1e6), num, sizeof num));
    tui_put(w, buf, width - getcurx(w));
    wattrset(w, A_NORMAL);
}

static void draw(tui_pane *p)
{
    WINDOW *w = p->win;
    tui_list *l = &p->list;
    werase(w);
    te_profile_step s;
    bool any = te_profile_last(&s, ops, MAX_OPS) == TE_OK;
    char right[96] = "", num[16];
    if (any)
        snprintf(right, sizeof right, "step %lld: %s ms", (long long)s.step, tui_fmt_num(s.ms, num, sizeof num));
    tui_pane_title(p, te_profile_active() || !any ? "profile" : "profile (stopped)", right);
    if (!any) {
        wattrset(w, tui_attr(TUI_C_DIM));
        tui_wrap(w, 1, 1, p->r.h - 1,
                 te_profile_active() ? "profiling: no step has finished yet"
                                     : "no profile: 'profile start' records the next steps (or run the example "
                                       "with --profile SPEC); p or 'focus tensor' gives the tensor back");
        wattrset(w, A_NORMAL);
        tui_list_set_count(l, 0);
        return;
    }
    int n = s.n_ops < MAX_OPS ? s.n_ops : MAX_OPS, longest = 0;
    for (int i = 0; i < n; i++) {
        int len = (int)strlen(ops[i].name);
        longest = len > longest ? len : longest;
    }
    int width = p->r.w, split = p->r.h > 1 ? phases(w, 1, width, p->r.h >= 8 ? 2 : 1, &s) : 0;
    head_rows = 1 + split + 1;
    cols c = layout(width, longest);
    if (p->r.h > head_rows - 1) {
        char head[256], ops_n[32];
        if (n < s.n_ops)
            snprintf(ops_n, sizeof ops_n, "op (%d of %d)", n, s.n_ops);
        else
            snprintf(ops_n, sizeof ops_n, "op");
        int len = snprintf(head, sizeof head, "%-*.*s %-*s%*s", c.name, c.name, ops_n, c.bar, "", MS_W, "ms");
        if (c.calls)
            len += snprintf(head + len, sizeof head - (size_t)len, "%*s", CALLS_W, "calls");
        len += snprintf(head + len, sizeof head - (size_t)len, "%*s", PCT_W, "%");
        if (c.gf)
            snprintf(head + len, sizeof head - (size_t)len, "%*s", GF_W, "GFLOP/s");
        wattrset(w, tui_attr(TUI_C_DIM));
        mvwaddnstr(w, head_rows - 1, 0, head, width);
        wattrset(w, A_NORMAL);
    }
    tui_list_set_height(l, p->r.h - head_rows > 0 ? p->r.h - head_rows : 0);
    tui_list_set_count(l, n);
    tui_list_show(l, l->sel);
    bool focused = tui.focus == TUI_TENSOR;
    for (int y = 0, i; (i = tui_list_item_at(l, y)) >= 0; y++)
        row(w, head_rows + y, &c, &ops[i], s.ms, focused && i == l->sel ? tui_attr(TUI_C_SELECT) : A_NORMAL);
}

static void click(tui_pane *p, int row_at, int col)
{
    (void)col;
    int i = tui_list_item_at(&p->list, row_at - head_rows);
    if (i >= 0)
        tui_list_select(&p->list, i);
}

static void move_sel(tui_pane *p, int rows, int cols_by)
{
    (void)cols_by;
    tui_list_move(&p->list, rows);
}

const tui_pane_class tui_pane_prof = { .name = "profile", .draw = draw, .click = click, .shift = move_sel };
