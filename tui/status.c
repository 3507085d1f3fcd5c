/*
 * status.c — the status bar (top: running or paused, step, phase, op,
 * mode, why training stopped, read from the session's dbg_stop, and the
 * last step's time, dbg_last_step_ms(), profiler or not) and the
 * function bar (bottom: the function keys, or a one-line hint until the
 * next key).
 */
#include "tui_internal.h"

#include <stdio.h>
#include <string.h>

/* "NaN at conv2/bn:out0[0,0,0,7] created" and the like, from the stop. */
static void why(const dbg_stop *s, char *buf, size_t n)
{
    if (strcmp(s->reason, "nan") == 0 || strcmp(s->reason, "inf") == 0) {
        const char *from = s->origin.kind == DBG_ORIGIN_PROPAGATED ? s->origin.from : NULL;
        snprintf(buf, n, "%s at %s%s %s%s", strcmp(s->reason, "nan") == 0 ? "NaN" : "Inf", s->tensor,
                 s->index_text, from ? "from " : "created", from ? from : "");
    } else if (strcmp(s->reason, "condition") == 0) {
        snprintf(buf, n, "condition held%s%s", s->tensor[0] ? " on " : "", s->tensor);
    } else if (strcmp(s->reason, "breakpoint") == 0) {
        snprintf(buf, n, "breakpoint %d", s->break_id);
    } else if (strcmp(s->reason, "interrupt") == 0) {
        snprintf(buf, n, "interrupted (Ctrl-C)");
    } else {
        snprintf(buf, n, "%s", s->reason);
    }
}

const char *tui_fmt_num(double v, char *buf, size_t n)
{
    const char *fmt = v >= 99.95 ? "%.0f" : v >= 9.995 ? "%.1f" : v >= 0.9995 ? "%.2f" : "%.3f";
    snprintf(buf, n, fmt, v);
    return buf;
}

void tui_status_draw(void)
{
    WINDOW *w = tui.status;
    if (!w)
        return;
    int width = getmaxx(w);
    wattrset(w, tui_attr(TUI_C_BAR));
    mvwhline(w, 0, 0, ' ', width);
    /* paused at the session's stop: at an op, or between ops (step, finish) */
    const dbg_stop *stop = dbg_last_stop();
    bool at_stop = tui.state == TUI_PAUSED && stop && stop->active;
    bool stopped_here = at_stop && stop->op[0];
    bool bad = at_stop && (strcmp(stop->reason, "nan") == 0 || strcmp(stop->reason, "inf") == 0);
    static const char *const badge[] = { [TUI_READY] = " READY ", [TUI_RUNNING] = " RUNNING ",
                                         [TUI_PAUSED] = " PAUSED ", [TUI_FINISHED] = " FINISHED " };
    static const tui_color badge_color[] = { [TUI_READY] = TUI_C_READY, [TUI_RUNNING] = TUI_C_RUN,
                                             [TUI_PAUSED] = TUI_C_PAUSE, [TUI_FINISHED] = TUI_C_DONE };
    wmove(w, 0, 0);
    wattrset(w, tui_attr(bad ? TUI_C_BAD : badge_color[tui.state]));
    waddstr(w, badge[tui.state]);
    wattrset(w, tui_attr(TUI_C_BAR));
    char buf[1536], reason[1024] = "";
    const dbg_op *cur = dbg.n_ops ? &dbg.ops[dbg.n_ops - 1] : NULL;
    if (tui.state == TUI_READY) {
        snprintf(buf, sizeof buf, " %s: F5 or 'run' starts training", dbg.program);
    } else if (tui.state == TUI_FINISHED) {
        snprintf(buf, sizeof buf, " %s finished at step %lld: q, Enter or F10 leaves", dbg.program,
                 (long long)(dbg.step < 0 ? 0 : dbg.step));
    } else {
        const char *op = stopped_here ? stop->op : cur && dbg.in_step ? cur->name : "at its start";
        const char *type = stopped_here ? stop->type : cur && dbg.in_step ? cur->type : "";
        if (at_stop)
            why(stop, reason, sizeof reason);
        char with_type[2 * TE_NAME_MAX + 8];
        snprintf(with_type, sizeof with_type, "%s%s%s%s", op, type[0] ? " (" : "", type, type[0] ? ")" : "");
        for (int pass = 0; pass < 2; pass++) { /* the op's type only when everything fits */
            snprintf(buf, sizeof buf, " step %lld %s %s %s%s", (long long)(dbg.step < 0 ? 0 : dbg.step),
                     dbg.in_step ? te_phase_name(dbg.phase) : "(between steps)", pass ? op : with_type,
                     reason[0] ? "| " : "", reason);
            if ((int)strlen(buf) + 20 < width)
                break;
        }
    }
    /* the last step's ms (less the time stopped at the prompt), then the
     * mode; why it stopped matters more than both, the time more than the mode */
    char ms[32] = "", num[16], both[64], mode[16];
    double step_ms = dbg_last_step_ms();
    if (step_ms >= 0)
        snprintf(ms, sizeof ms, " %s ms/step ", tui_fmt_num(step_ms, num, sizeof num));
    snprintf(mode, sizeof mode, " %s ", tui.graph ? "graph" : "eager");
    snprintf(both, sizeof both, "%s%s", ms, mode);
    const char *const tails[] = { both, ms, mode, "" }, *tail = "";
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++)
        if (getcurx(w) + (int)(strlen(buf) + strlen(tails[i])) <= width) {
            tail = tails[i];
            break;
        }
    int len = (int)strlen(tail);
    tui_put(w, buf, width - getcurx(w) - len);
    if (len && getcurx(w) + len <= width) {
        wmove(w, 0, width - len);
        waddstr(w, tail);
    }
    wattrset(w, A_NORMAL);
    wnoutrefresh(w);
}

void tui_fbar_draw(void)
{
    WINDOW *w = tui.fbar;
    if (!w)
        return;
    int width = getmaxx(w);
    werase(w);
    wmove(w, 0, 0);
    if (tui.hint[0]) {
        wattrset(w, tui_attr(TUI_C_STOP));
        tui_put(w, tui.hint, width);
        wattrset(w, A_NORMAL);
        wnoutrefresh(w);
        return;
    }
    for (const tui_key *k = tui_keys; k->what; k++) {
        if (!k->bar)
            continue;
        int need = (int)(strlen(k->bar) + strlen(k->fkey_name) - 1) + 1;
        if (getcurx(w) + need > width)
            break;
        wattrset(w, tui_attr(TUI_C_KEY));
        waddstr(w, k->fkey_name + 1); /* "F5" -> "5" */
        wattrset(w, tui_attr(TUI_C_KEYLABEL));
        waddstr(w, k->bar);
        wattrset(w, A_NORMAL);
        waddch(w, ' ');
    }
    const char *where = tui.focus == TUI_CMDLINE ? " Esc: panes " : " Esc: cmd line ";
    int len = (int)strlen(where);
    if (getcurx(w) + len < width) {
        wmove(w, 0, width - len);
        wattrset(w, tui_attr(TUI_C_DIM));
        waddstr(w, where);
        wattrset(w, A_NORMAL);
    }
    wnoutrefresh(w);
}
