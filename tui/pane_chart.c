/*
 * pane_chart.c — the chart pane: the loss per training step as bars (all
 * steps so far, averaged into the columns there are; the loss scale in the
 * title when the step scales its loss; with the engine's loss scaler on, a
 * line of the scale per step, log2, under the loss, and an 'x' over the
 * steps whose update was skipped on both), and below it the selected tensor's
 * abs_max over the steps the session recorded (log scale: what explodes
 * shows), from the same history `trend` prints.
 */
#include "tui_internal.h"

#include <math.h>
#include <string.h>

#define LABEL_W 9
#define MAX_COLS 512

/* Bars of v[0..n) in an h x n box whose bottom-left is (y, x); non-finite
 * values are a '!' on the bottom row. */
static void bars(WINDOW *w, int y, int x, int h, const float *v, int n, double lo, double hi, tui_color color)
{
    for (int c = 0; c < n; c++) {
        if (!isfinite(v[c])) {
            wattrset(w, tui_attr(TUI_C_NAN));
            mvwaddstr(w, y, x + c, "!");
            continue;
        }
        double f = hi > lo ? (v[c] - lo) / (hi - lo) : 0.5;
        int e = (int)lround(f * (h * 8 - 1)) + 1; /* at least one eighth */
        wattrset(w, tui_attr(color));
        for (int r = 0; r < h; r++) {
            int cell = e - r * 8;
            if (cell > 0)
                mvwaddstr(w, y - r, x + c, tui_glyph_level(cell > 8 ? 8 : cell));
        }
    }
    wattrset(w, A_NORMAL);
}

static void range(const float *v, int n, double *lo, double *hi)
{
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) {
            *lo = v[i] < *lo ? v[i] : *lo;
            *hi = v[i] > *hi ? v[i] : *hi;
        }
    if (*lo > *hi)
        *lo = *hi = 0;
}

static void labels(WINDOW *w, int top, int bottom, double hi, double lo)
{
    char buf[32];
    wattrset(w, tui_attr(TUI_C_DIM));
    snprintf(buf, sizeof buf, "%8.4g", hi);
    mvwaddnstr(w, top, 0, buf, LABEL_W - 1);
    if (bottom > top) {
        snprintf(buf, sizeof buf, "%8.4g", lo);
        mvwaddnstr(w, bottom, 0, buf, LABEL_W - 1);
    }
    wattrset(w, A_NORMAL);
}

/* The selected tensor's abs_max per recorded step, as log10; returns n. */
static int trend_values(float *out, int max, const dbg_trend **tr)
{
    *tr = tui.view.name[0] ? dbg_trend_get(tui.view.name, false) : NULL;
    if (!*tr || !(*tr)->n)
        return 0;
    int n = (*tr)->n < max ? (*tr)->n : max;
    for (int i = 0; i < n; i++) {
        int j = ((*tr)->head - n + i + DBG_TREND_STEPS) % DBG_TREND_STEPS;
        const te_stats *s = &(*tr)->s[j];
        out[i] = s->nan || s->inf ? NAN : (float)log10(s->abs_max > 1e-30 ? s->abs_max : 1e-30);
    }
    return n;
}

/* An 'x' over each skipped column on row y. */
static void skips(WINDOW *w, int y, int x, const bool *skipped, int n)
{
    wattrset(w, tui_attr(TUI_C_NAN));
    for (int c = 0; c < n; c++)
        if (skipped[c])
            mvwaddstr(w, y, x + c, "x");
    wattrset(w, A_NORMAL);
}

/* The loss scale per column as log2 bars on rows [y - h + 1, y]. */
static void scale_line(WINDOW *w, int y, int h, const float *scale, const bool *skipped, int n)
{
    float v[MAX_COLS];
    for (int c = 0; c < n; c++)
        v[c] = scale[c] > 0 ? (float)log2(scale[c]) : NAN;
    double lo, hi;
    range(v, n, &lo, &hi);
    char buf[32];
    wattrset(w, tui_attr(TUI_C_DIM));
    mvwaddnstr(w, y - h + 1, 0, "scale", LABEL_W - 1);
    snprintf(buf, sizeof buf, "2^%.0f", hi);
    if (h > 1)
        mvwaddnstr(w, y - h + 2, 0, buf, LABEL_W - 1);
    wattrset(w, A_NORMAL);
    for (int c = 0; c < n; c++)
        if (!isfinite(v[c]))
            v[c] = (float)lo; /* a step without a scaler: the floor, not a NaN mark */
    bars(w, y, LABEL_W, h, v, n, lo, hi, TUI_C_TREND);
    skips(w, y - h + 1, LABEL_W, skipped, n);
}

static void draw(tui_pane *p)
{
    WINDOW *w = p->win;
    werase(w);
    float l, scale;
    int64_t step;
    char right[96] = "";
    bool any = tui_track_last(&l, &step, &scale);
    if (any)
        snprintf(right, sizeof right, "step %lld: %.4g%s", (long long)step, (double)l, "");
    if (any && scale != 1) {
        size_t u = strlen(right);
        snprintf(right + u, sizeof right - u, "  scale %.3g", (double)scale);
    }
    tui_pane_title(p, "loss", right);
    int rows = p->r.h - 1, cols = p->r.w - LABEL_W;
    if (rows < 1 || cols < 4)
        return;
    if (cols > MAX_COLS)
        cols = MAX_COLS;
    float tv[DBG_TREND_STEPS];
    const dbg_trend *tr;
    int tn = trend_values(tv, DBG_TREND_STEPS, &tr);
    int trend_h = rows >= 3 ? (rows >= 7 ? rows / 3 : 1) : 0;
    int loss_h = rows - trend_h;

    float v[MAX_COLS], sc[MAX_COLS];
    bool skipped[MAX_COLS];
    int64_t s0, s1;
    int n = tui_track_loss(v, cols, &s0, &s1);
    bool scaler = n && tui_track_amp(sc, skipped, cols);
    int scale_h = scaler && loss_h >= 4 ? (loss_h >= 8 ? 2 : 1) : 0;
    loss_h -= scale_h;
    if (!n) {
        wattrset(w, tui_attr(TUI_C_DIM));
        mvwaddnstr(w, 1, 1, "no loss yet: CrossEntropy and MSE outputs, per step", p->r.w - 2);
        wattrset(w, A_NORMAL);
    } else {
        double lo, hi;
        range(v, n, &lo, &hi);
        labels(w, 1, loss_h, hi, lo);
        bars(w, loss_h, LABEL_W, loss_h, v, n, lo, hi, TUI_C_LOSS);
        if (scaler)
            skips(w, 1, LABEL_W, skipped, n);
        if (scale_h)
            scale_line(w, loss_h + scale_h, scale_h, sc, skipped, n);
    }
    loss_h += scale_h;
    if (!trend_h)
        return;
    int y = loss_h + 1;
    if (!tn) {
        char buf[TE_NAME_MAX + 64];
        snprintf(buf, sizeof buf, "%s: no history (t records it)", tui.view.name[0] ? tui.view.name : "trend");
        wattrset(w, tui_attr(TUI_C_DIM));
        mvwaddnstr(w, y, 0, buf, p->r.w);
        wattrset(w, A_NORMAL);
        return;
    }
    double lo, hi;
    range(tv, tn, &lo, &hi);
    char buf[32];
    int j = (tr->head - 1 + DBG_TREND_STEPS) % DBG_TREND_STEPS;
    snprintf(buf, sizeof buf, "%.2g", tr->s[j].abs_max);
    wattrset(w, tui_attr(TUI_C_DIM));
    mvwaddnstr(w, y, 0, "abs_max", LABEL_W - 1);
    if (trend_h > 1)
        mvwaddnstr(w, y + 1, 0, buf, LABEL_W - 1);
    wattrset(w, A_NORMAL);
    bars(w, y + trend_h - 1, LABEL_W, trend_h, tv, tn < cols ? tn : cols, lo, hi, TUI_C_TREND);
    if (trend_h == 1 && LABEL_W + tn + 2 + (int)strlen(buf) < p->r.w)
        mvwaddstr(w, y, LABEL_W + tn + 1, buf);
}

static void move_none(tui_pane *p, int rows, int cols)
{
    (void)p, (void)rows, (void)cols;
}

static void click(tui_pane *p, int row, int col)
{
    (void)p, (void)row, (void)col;
}

const tui_pane_class tui_pane_chart = { .name = "chart", .draw = draw, .click = click, .shift = move_none };
