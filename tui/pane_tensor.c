/*
 * pane_tensor.c — the tensor pane: one tensor as a scrollable grid of its
 * last two dims (a 1-D tensor wraps into rows; the leading dims are fixed
 * indices, stepped with [ and ] (the last leading dim: an attention
 * tensor's head), { and } (the one before: its batch) or chosen with
 * `view NAME[i,j]`; the title names the slice, NAME[0,2,:,:]). NaN and
 * Inf cells and cells at or above the highlight threshold stand out; the
 * cursor cell's index and value sit at the bottom, the statistics and a
 * one-line histogram of the finite values at the top. Values are read only
 * while training is paused; while it runs the pane keeps what it showed.
 */
#include "tui_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CELL_W 10 /* "-1.23e+05" and a space */
#define MAX_COLS 512 /* cells of a row on show, the widest terminal's */

/* Where the view's cells are in the tensor's flat data. */
typedef struct grid {
    int64_t rows, cols; /* of the grid */
    int64_t base;       /* flat index of cell (0, 0) */
    int64_t n;          /* elements (1-D: cells past n are empty) */
    int64_t slices;     /* 2-D slices in all (product of the leading dims) */
    int64_t slice;      /* this one's number */
    bool flat;          /* 1-D, wrapped */
} grid;

static int cols_1d(const tui_pane *p, int label_w)
{
    int c = (p->r.w - label_w) / CELL_W;
    return c < 1 ? 1 : c;
}

static int digits(int64_t v)
{
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

static grid grid_of(const te_tensor *t, const tui_view *v, const tui_pane *p, int label_w)
{
    grid g = { .rows = 1, .cols = 1, .n = t->numel, .slices = 1 };
    int nd = t->ndim;
    if (nd == 1) {
        g.flat = true;
        g.cols = cols_1d(p, label_w);
        g.rows = (t->numel + g.cols - 1) / g.cols;
        return g;
    }
    if (nd >= 2) {
        g.rows = t->shape[nd - 2];
        g.cols = t->shape[nd - 1];
        int64_t stride = g.rows * g.cols;
        for (int d = nd - 3; d >= 0; d--) {
            g.base += v->lead[d] * stride;
            g.slice += v->lead[d] * (g.slices);
            g.slices *= t->shape[d];
            stride *= t->shape[d];
        }
    }
    return g;
}

/* The tensor on show, if it can be read now. */
const te_tensor *tui_view_tensor(char *why, size_t n)
{
    if (!tui.view.name[0]) {
        snprintf(why, n, "no tensor: select an op, or 'view TENSOR'");
        return NULL;
    }
    const te_tensor *t = dbg_tensor_find(tui.view.name, why, n);
    if (t && (!t->data || t->numel == 0)) {
        snprintf(why, n, "%s holds no values", tui.view.name);
        return NULL;
    }
    return t;
}

/* A pending flat index (tui_view_focus_index) and the leading indices
 * brought into range for t. */
static int64_t want_flat = -1;

static void settle(const te_tensor *t, tui_view *v, const tui_pane *p, int label_w)
{
    int nd = t->ndim;
    for (int d = 0; d < nd - 2; d++)
        v->lead[d] = v->lead[d] < 0 ? 0 : v->lead[d] >= t->shape[d] ? t->shape[d] - 1 : v->lead[d];
    if (want_flat >= 0 && want_flat < t->numel) {
        int64_t f = want_flat;
        if (nd == 1) {
            int c = cols_1d(p, label_w);
            v->row = f / c;
            v->col = f % c;
        } else if (nd >= 2) {
            v->col = f % t->shape[nd - 1];
            f /= t->shape[nd - 1];
            v->row = f % t->shape[nd - 2];
            f /= t->shape[nd - 2];
            for (int d = nd - 3; d >= 0; d--) {
                v->lead[d] = f % t->shape[d];
                f /= t->shape[d];
            }
        }
    }
    want_flat = -1;
}

void tui_view_focus_index(const te_tensor *t, int64_t flat)
{
    (void)t;
    want_flat = flat;
}

static bool view_ref(dbg_ref *rp, bool must_exist, char *err, size_t n);

bool tui_view_set(const char *text, bool must_exist, char *err, size_t n)
{
    char buf[TE_NAME_MAX + 128];
    text = dbg_skip_space(text);
    if (text[0] == '[') { /* `view [i,j]`: another slice of the same tensor */
        if (!tui.view.name[0]) {
            snprintf(err, n, "no tensor on show to slice");
            return false;
        }
        snprintf(buf, sizeof buf, "%s%s", tui.view.name, text);
        text = buf;
    }
    dbg_ref r;
    if (!dbg_ref_parse(text, &r, err, n))
        return false;
    return view_ref(&r, must_exist, err, n);
}

bool tui_view_name(const char *name, char *err, size_t n)
{
    dbg_ref r = { .n_slices = 0 };
    snprintf(r.name, sizeof r.name, "%s", name);
    return view_ref(&r, false, err, n);
}

/* tui_view_set after the text: r names a tensor or an op, its slices the
 * leading indices. */
static bool view_ref(dbg_ref *rp, bool must_exist, char *err, size_t n)
{
    dbg_ref r = *rp;
    /* an op's name stands for its first output */
    int row = tui_ops_find(r.name);
    bool later;
    const dbg_op *o = row >= 0 ? tui_ops_at(row, &later) : NULL;
    if (o && o->n_out && o->out_name[0][0])
        snprintf(r.name, sizeof r.name, "%s", o->out_name[0]);
    const te_tensor *t = dbg_tensor_find(r.name, err, n);
    if (!t && must_exist)
        return false;
    if (t) {
        int nd = t->ndim, lead = nd > 2 ? nd - 2 : 0;
        if (r.n_slices > lead) {
            snprintf(err, n, "%s is %d-d: give the indices of its first %d dims (the grid shows the last %s)",
                     r.name, nd, lead, nd >= 2 ? "two" : "one");
            return false;
        }
        for (int d = 0; d < r.n_slices; d++)
            if (!r.slices[d].index) {
                snprintf(err, n, "give single indices (%s[0,3]): the grid shows the last dims whole", r.name);
                return false;
            }
        if (!dbg_ref_resolve(&r, t, err, n))
            return false;
    }
    bool same = strcmp(tui.view.name, r.name) == 0;
    double hl = tui.view.highlight;
    if (!same) {
        memset(&tui.view, 0, sizeof tui.view);
        snprintf(tui.view.name, sizeof tui.view.name, "%s", r.name);
        tui.view.highlight = hl;
    }
    for (int d = 0; d < r.n_slices; d++)
        tui.view.lead[d] = r.slices[d].start;
    if (row < 0) /* a tensor by its own name: select the op that made it */
        for (int i = 0; i < tui_ops_count() && row < 0; i++) {
            const dbg_op *op = tui_ops_at(i, &later);
            for (int k = 0; op && k < op->n_out; k++)
                if (strcmp(op->out_name[k], r.name) == 0)
                    row = i;
        }
    if (row >= 0)
        tui_ops_select(row, false);
    return true;
}

void tui_view_slice_step(int delta)
{
    char why[256];
    const te_tensor *t = tui_view_tensor(why, sizeof why);
    if (!t || t->ndim < 3) {
        snprintf(tui.hint, sizeof tui.hint, "%.150s", t ? "one 2-D slice only" : why);
        return;
    }
    /* an odometer over the leading dims, the last one fastest */
    for (int d = t->ndim - 3; d >= 0; d--) {
        int64_t v = tui.view.lead[d] + delta;
        if (v >= 0 && v < t->shape[d]) {
            tui.view.lead[d] = v;
            return;
        }
        tui.view.lead[d] = delta > 0 ? 0 : t->shape[d] - 1;
    }
}

void tui_view_outer_step(int delta)
{
    char why[256];
    const te_tensor *t = tui_view_tensor(why, sizeof why);
    if (!t || t->ndim < 4) {
        snprintf(tui.hint, sizeof tui.hint, "%.150s",
                 !t ? why : t->ndim == 3 ? "one leading dim: [ and ] step it" : "one 2-D slice only");
        return;
    }
    int d = t->ndim - 4;
    int64_t v = tui.view.lead[d] + delta;
    if (v < 0 || v >= t->shape[d]) {
        snprintf(tui.hint, sizeof tui.hint, "dim %d has %lld: this is its %s", d, (long long)t->shape[d],
                 v < 0 ? "first" : "last");
        return;
    }
    tui.view.lead[d] = v;
}

/* ---- drawing ----------------------------------------------------------------------- */

/* Element k of raw, a host copy in dt. */
static float value(te_dtype dt, const void *raw, int64_t k)
{
    switch (dt) {
    case TE_F32: return ((const float *)raw)[k];
    case TE_F16: return te_f16_to_f32(((const uint16_t *)raw)[k]);
    case TE_BF16: return te_bf16_to_f32(((const uint16_t *)raw)[k]);
    default: return (float)((const int32_t *)raw)[k];
    }
}

static void fmt(te_dtype dt, const void *raw, int64_t k, char *buf, size_t n)
{
    if (dt == TE_I32) {
        snprintf(buf, n, "%d", (int)((const int32_t *)raw)[k]);
        return;
    }
    float x = value(dt, raw, k);
    if (isnan(x))
        snprintf(buf, n, "nan");
    else if (isinf(x))
        snprintf(buf, n, x > 0 ? "inf" : "-inf");
    else
        snprintf(buf, n, "%.4g", (double)x);
    if (strlen(buf) > CELL_W - 1)
        snprintf(buf, n, "%.3g", (double)x);
    if (strlen(buf) > CELL_W - 1)
        snprintf(buf, n, "%.2g", (double)x);
}

static attr_t cell_attr(te_dtype dt, const void *raw, int64_t k)
{
    float x = value(dt, raw, k);
    if (isnan(x))
        return tui_attr(TUI_C_NAN);
    if (isinf(x))
        return tui_attr(TUI_C_INF);
    if (tui.view.highlight > 0 && fabs(x) >= tui.view.highlight)
        return tui_attr(TUI_C_THRESH);
    return A_NORMAL;
}

#define MAX_BINS 120
#define HIST_CHUNK 16384 /* elements the histogram reads at once */

/* The statistics and the histogram of the tensor on show, worked out once
 * per tensor, step and pause (a big tensor takes a while). */
static struct {
    const te_tensor *t;
    const void *data;
    int64_t step;
    unsigned gen;
    int bins;
    te_stats s;
    int64_t count[MAX_BINS];
} memo;

static const te_stats *stats_of(const te_tensor *t, int bins)
{
    if (memo.t == t && memo.data == t->data && memo.step == dbg.step && memo.gen == tui.gen && memo.bins == bins)
        return &memo.s;
    memo.t = t;
    memo.data = t->data;
    memo.step = dbg.step;
    memo.gen = tui.gen;
    memo.bins = bins;
    te_stats_compute(t, &memo.s);
    const te_stats *s = &memo.s;
    memset(memo.count, 0, sizeof memo.count);
    if (bins <= 0 || s->n - s->nan - s->inf <= 0)
        return s;
    static float chunk[HIST_CHUNK];
    for (int64_t at = 0; at < t->numel; at += HIST_CHUNK) { /* a chunk at a time from t's device */
        const int64_t n = t->numel - at < HIST_CHUNK ? t->numel - at : HIST_CHUNK;
        te_tensor_read_f32(t, at, n, chunk);
        for (int64_t i = 0; i < n; i++) {
            double x = chunk[i];
            if (!isfinite(x))
                continue;
            int b = s->max == s->min ? 0 : (int)((x - s->min) / (s->max - s->min) * bins);
            memo.count[b < bins ? b : bins - 1]++;
        }
    }
    return s;
}

/* One line: the statistics. One more: a histogram bar of the finite values. */
static void summary(tui_pane *p, const te_tensor *t, int y, bool hist)
{
    WINDOW *w = p->win;
    int bins = hist ? p->r.w - 26 : 0;
    bins = bins > MAX_BINS ? MAX_BINS : bins;
    const te_stats *sp = stats_of(t, bins >= 4 ? bins : 0);
    te_stats s = *sp;
    char buf[256];
    snprintf(buf, sizeof buf, " min %.4g max %.4g mean %.4g std %.4g", s.min, s.max, s.mean, s.std);
    wmove(w, y, 0);
    if (s.nan || s.inf) {
        char bad[64];
        snprintf(bad, sizeof bad, " nan %lld inf %lld ", (long long)s.nan, (long long)s.inf);
        wattrset(w, tui_attr(TUI_C_NAN));
        tui_put(w, bad, p->r.w);
        wattrset(w, A_NORMAL);
    }
    tui_put(w, buf, p->r.w - getcurx(w));
    if (!hist || bins < 4 || s.n - s.nan - s.inf <= 0)
        return;
    const int64_t *count = memo.count;
    int64_t most = 0;
    for (int b = 0; b < bins; b++)
        most = count[b] > most ? count[b] : most;
    snprintf(buf, sizeof buf, " %9.3g ", s.min);
    mvwaddstr(w, y + 1, 0, buf);
    wattrset(w, tui_attr(TUI_C_TREND));
    for (int b = 0; b < bins; b++)
        waddstr(w, tui_glyph_level(count[b] ? (int)((count[b] * 8 + most - 1) / most) : 0));
    wattrset(w, A_NORMAL);
    snprintf(buf, sizeof buf, " %.3g", s.max);
    tui_put(w, buf, p->r.w - getcurx(w));
}

static void draw(tui_pane *p)
{
    static bool drawn_once;
    if (tui.state == TUI_RUNNING && drawn_once && !tui.full)
        return; /* values are read at stops; the last ones stay on show */
    drawn_once = true;
    WINDOW *w = p->win;
    werase(w);
    tui_view *v = &tui.view;
    char why[512], shape[96], right[160];
    if (tui.state == TUI_RUNNING) {
        tui_pane_title(p, "tensor", v->name);
        wattrset(w, tui_attr(TUI_C_DIM));
        mvwaddstr(w, 1, 1, "training is running: values show at the next stop");
        wattrset(w, A_NORMAL);
        return;
    }
    const te_tensor *t = tui_view_tensor(why, sizeof why);
    if (!t) {
        tui_pane_title(p, "tensor", v->name);
        tui_wrap(w, 1, 1, p->r.h - 1, why);
        return;
    }
    te_shape_str(t->ndim, t->shape, shape, sizeof shape);
    int nd = t->ndim;
    /* the slice as an index: [0,3,:,:], in the title after the name */
    int64_t max_label = nd == 1 ? t->numel : nd >= 2 ? t->shape[nd - 2] : 1;
    int label_w = digits(max_label) + 2;
    settle(t, v, p, label_w);
    char sl[96] = "";
    if (nd > 2) {
        size_t u = (size_t)snprintf(sl, sizeof sl, "[");
        for (int d = 0; d < nd - 2 && u < sizeof sl; d++)
            u += (size_t)snprintf(sl + u, sizeof sl - u, "%lld,", (long long)v->lead[d]);
        if (u < sizeof sl)
            snprintf(sl + u, sizeof sl - u, ":,:]");
    }
    snprintf(right, sizeof right, "%s %s", te_dtype_name(t->dtype), shape);
    char title[TE_NAME_MAX + 112];
    snprintf(title, sizeof title, "tensor %s%s", v->name, sl);
    tui_pane_title(p, title, right);

    int h = p->r.h;
    bool stats = h >= 7, hist = h >= 9;
    int y0 = 1 + stats + hist;     /* the column header */
    int rows_shown = h - y0 - 2;   /* above the footer */
    if (stats)
        summary(p, t, 1, hist);

    grid g = grid_of(t, v, p, label_w);
    int cols_shown = (p->r.w - label_w) / CELL_W;
    cols_shown = cols_shown < 1 ? 1 : cols_shown > MAX_COLS ? MAX_COLS : cols_shown;
    if (rows_shown < 1)
        rows_shown = 1;
    /* cursor in range, view around it */
    v->row = v->row < 0 ? 0 : v->row >= g.rows ? g.rows - 1 : v->row;
    v->col = v->col < 0 ? 0 : v->col >= g.cols ? g.cols - 1 : v->col;
    if (g.flat && v->row * g.cols + v->col >= g.n)
        v->col = (g.n - 1) % g.cols;
    v->top = tui_list_top_for(v->top, v->row, rows_shown, g.rows);
    v->left = tui_list_top_for(v->left, v->col, cols_shown, g.cols);

    char buf[64];
    wattrset(w, tui_attr(TUI_C_DIM));
    wmove(w, y0, 0);
    wprintw(w, "%*s", label_w, "");
    for (int64_t c = v->left; c < g.cols && c < v->left + cols_shown; c++) {
        snprintf(buf, sizeof buf, "%*lld", CELL_W - 1, (long long)c);
        waddstr(w, buf);
        waddch(w, ' ');
    }
    bool focused = tui.focus == TUI_TENSOR;
    static uint32_t row[MAX_COLS]; /* the visible cells of one row, host copy; 4 bytes hold any dtype */
    for (int y = 0; y < rows_shown && v->top + y < g.rows; y++) {
        int64_t r = v->top + y;
        wattrset(w, tui_attr(TUI_C_DIM));
        snprintf(buf, sizeof buf, "%*lld ", label_w > 24 ? 23 : label_w - 1, /* at most 21: int64's digits + 2 */
                 (long long)(g.flat ? r * g.cols : r));
        mvwaddstr(w, y0 + 1 + y, 0, buf);
        /* only the cells on screen leave the tensor's device: one read per row */
        int64_t end = v->left + cols_shown < g.cols ? v->left + cols_shown : g.cols;
        if (g.flat && r * g.cols + end > g.n)
            end = g.n - r * g.cols;
        if (end <= v->left || te_tensor_read(t, g.base + r * g.cols + v->left, end - v->left, row) != TE_OK)
            continue;
        for (int64_t c = v->left; c < end; c++) {
            char cell[32];
            fmt(t->dtype, row, c - v->left, cell, sizeof cell);
            attr_t a = cell_attr(t->dtype, row, c - v->left);
            if (r == v->row && c == v->col)
                a |= focused ? A_REVERSE : A_UNDERLINE;
            wattrset(w, a);
            snprintf(buf, sizeof buf, "%*s", CELL_W - 1, cell);
            waddstr(w, buf);
            wattrset(w, A_NORMAL);
            waddch(w, ' ');
        }
    }
    wattrset(w, A_NORMAL);
    /* the footer: the cursor cell */
    int64_t flat = g.base + v->row * g.cols + v->col;
    char idx[96], val[32];
    uint32_t at = 0;
    te_index_str(t, flat, idx, sizeof idx);
    te_tensor_read(t, flat, 1, &at);
    fmt(t->dtype, &at, 0, val, sizeof val);
    char foot[256];
    int len = snprintf(foot, sizeof foot, " %s = %s", idx, val);
    if (g.slices > 1)
        snprintf(foot + len, sizeof foot - len, "   slice %lld/%lld ([ ]%s)", (long long)g.slice + 1,
                 (long long)g.slices, nd >= 4 ? " { }" : "");
    wmove(w, h - 1, 0);
    wattrset(w, cell_attr(t->dtype, &at, 0) | A_BOLD);
    tui_put(w, foot, p->r.w);
    wattrset(w, A_NORMAL);
}

static bool key(tui_pane *p, int k)
{
    (void)p;
    if (k == '[' || k == ']') {
        tui_view_slice_step(k == ']' ? 1 : -1);
        return true;
    }
    if (k == '{' || k == '}') {
        tui_view_outer_step(k == '}' ? 1 : -1);
        return true;
    }
    return false;
}

static void click(tui_pane *p, int row, int col)
{
    tui_view *v = &tui.view;
    char why[8];
    const te_tensor *t = tui_view_tensor(why, sizeof why);
    if (!t || tui.state == TUI_RUNNING)
        return;
    int y0 = 1 + (p->r.h >= 7) + (p->r.h >= 9);
    int64_t max_label = t->ndim == 1 ? t->numel : t->ndim >= 2 ? t->shape[t->ndim - 2] : 1;
    int label_w = digits(max_label) + 2;
    if (row > y0 && col >= label_w) {
        v->row = v->top + (row - y0 - 1);
        v->col = v->left + (col - label_w) / CELL_W;
    }
}

static void move_cursor(tui_pane *p, int rows, int cols)
{
    (void)p;
    tui_view *v = &tui.view;
    v->row = rows <= -TUI_FAR ? 0 : rows >= TUI_FAR ? INT64_MAX / 2 : v->row + rows;
    v->col = cols <= -TUI_FAR ? 0 : cols >= TUI_FAR ? INT64_MAX / 2 : v->col + cols;
    /* draw() brings them into range */
}

const tui_pane_class tui_pane_tensor = { .name = "tensor", .draw = draw, .key = key, .click = click,
                                         .shift = move_cursor };
