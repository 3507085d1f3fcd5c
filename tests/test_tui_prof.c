/*
 * test_tui_prof.c — the TUI's profile pane and the status bar's ms/step,
 * drawn in this process: a small MLP trains a few steps under the
 * profiler (te_profile_start), the pane and the status bar draw into
 * curses windows of a screen that writes to /dev/null, and what they show
 * is read back cell by cell (winnstr) and checked against the engine's
 * te_profile_last and the session's dbg_last_step_ms. ASCII glyphs: a
 * bar's full cells are '#', its last partial cell '-' or '='.
 */
#include "suites.h"
#include "testutil.h"
#include "tui_internal.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static SCREEN *scr;
static FILE *scr_out, *scr_in;
static int hook = -1;

static void setup(void)
{
    scr_out = fopen("/dev/null", "w");
    scr_in = fopen("/dev/null", "r");
    ck_assert(scr_out && scr_in);
    scr = newterm("vt100", scr_out, scr_in);
    ck_assert_msg(scr != NULL, "newterm(vt100) failed: no terminfo entry?");
    set_term(scr);
    memset(&tui, 0, sizeof tui); /* ASCII glyphs, no colours */
    tui.focus = TUI_CMDLINE;
    tui.pane[TUI_TENSOR].cls = &tui_pane_tensor;
    te_init(&(te_config){ .seed = 1, .threads = 1 });
    /* the session's step timing, as when tdbg runs a program */
    hook = te_hook_add(&(te_hooks){ .step_begin = dbg_on_step_begin, .step_end = dbg_on_step_end }, NULL);
    ck_assert(hook >= 0);
}

static void teardown(void)
{
    te_hook_remove(hook);
    te_profile_stop();
    te_shutdown();
    if (tui.status)
        delwin(tui.status);
    tui.status = NULL;
    endwin();
    delscreen(scr);
    fclose(scr_out);
    fclose(scr_in);
}

/* The screen of one window: h rows of w cells. */
typedef struct shot {
    int h, w;
    char row[40][256];
} shot;

static void read_back(WINDOW *win, shot *s)
{
    getmaxyx(win, s->h, s->w);
    ck_assert(s->h <= 40 && s->w < 256);
    for (int y = 0; y < s->h; y++) {
        mvwinnstr(win, y, 0, s->row[y], s->w);
        s->row[y][s->w] = '\0';
    }
}

static char *joined(const shot *s)
{
    static char all[40 * 260];
    all[0] = '\0';
    for (int y = 0; y < s->h; y++) {
        strcat(all, s->row[y]);
        strcat(all, "\n");
    }
    return all;
}

/* The profile pane drawn in the tensor's slot at h x w. */
static void draw_prof(int h, int w, shot *s)
{
    tui_prof_show(true);
    ck_assert(tui_prof_shown());
    tui_pane *p = &tui.pane[TUI_TENSOR];
    p->r = (tui_rect){ 0, 0, h, w };
    p->win = newwin(h, w, 0, 0);
    ck_assert(p->win != NULL);
    p->cls->draw(p);
    read_back(p->win, s);
    delwin(p->win);
    p->win = NULL;
}

/* The status bar drawn w wide, its text. */
static const char *draw_status(int w)
{
    static shot s;
    if (tui.status)
        delwin(tui.status);
    tui.status = newwin(1, w, 0, 0);
    ck_assert(tui.status != NULL);
    tui_status_draw();
    read_back(tui.status, &s);
    return s.row[0];
}

/* ---- a small MLP: its first matmul, [64,256] by [256,256], does most of the work ---- */

static te_tensor *w1, *w2;
static te_optim *opt;

static void model(void)
{
    w1 = te_param_new("w1", TE_F32, te_shape(256, 256));
    w2 = te_param_new("w2", TE_F32, te_shape(10, 256));
    te_init_linear(w1, NULL);
    te_init_linear(w2, NULL);
    opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.01f });
    ck_assert(opt != NULL);
}

static void train_step(void)
{
    static float xs[64 * 256];
    static int32_t ys[64];
    for (int i = 0; i < 64 * 256; i++)
        xs[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (int i = 0; i < 64; i++)
        ys[i] = i % 10;
    tu_mlp2_step(te_tensor_from(TE_F32, te_shape(64, 256), xs), te_tensor_from(TE_I32, te_shape(64), ys), w1, w2,
                 opt);
}

/* ---- checks --------------------------------------------------------------------------- */

START_TEST(test_fmt_num)
{
    static const struct { double v; const char *want; } cases[] = {
        { 0, "0.000" },    { 0.0471, "0.047" }, { 0.99949, "0.999" }, { 0.9996, "1.00" }, { 3.414, "3.41" },
        { 9.996, "10.0" }, { 12.34, "12.3" },   { 99.96, "100" },     { 153.4, "153" },   { 1530.2, "1530" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[16];
        ck_assert_str_eq(tui_fmt_num(cases[i].v, buf, sizeof buf), cases[i].want);
    }
}
END_TEST

/* Without a finished profiled step the pane says how to start one. */
START_TEST(test_prof_empty)
{
    shot s;
    draw_prof(12, 40, &s);
    const char *all = joined(&s);
    ck_assert_msg(strncmp(s.row[0], " profile ", 9) == 0, "title:\n%s", all);
    ck_assert_msg(strstr(all, "no profile: 'profile start' records") && strstr(all, "--profile"),
                  "no way to start the profiler said:\n%s", all);
    ck_assert_int_eq(te_profile_start(NULL), TE_OK);
    draw_prof(12, 40, &s);
    all = joined(&s);
    ck_assert_msg(strstr(all, "profiling: no step has finished yet") && !strstr(all, "no profile:"),
                  "profiling, before a step ended:\n%s", all);
    model();
    train_step();
    draw_prof(12, 40, &s);
    all = joined(&s);
    ck_assert_msg(!strstr(all, "profiling: no step") && strstr(s.row[0], "step 0: "), "after a step:\n%s", all);
}
END_TEST

/* The bar's cells in an op's row: every '#', '=' and '-' after the name
 * (the numbers after the bar are not negative). */
static int bar_cells(const char *row, const char *name)
{
    ck_assert_msg(strncmp(row, name, strlen(name)) == 0, "row '%s' is not op %s", row, name);
    int n = 0;
    for (const char *c = row + strlen(name); *c; c++)
        n += *c == '#' || *c == '=' || *c == '-';
    return n;
}

/* The ms of an op's row: the first number after its bar. */
static double row_ms(const char *row, const char *name)
{
    const char *c = row + strlen(name);
    while (*c == ' ' || *c == '#' || *c == '=' || *c == '-')
        c++;
    char *end;
    double v = strtod(c, &end);
    ck_assert_msg(end != c, "no ms in row '%s'", row);
    return v;
}

START_TEST(test_prof_rows)
{
    model();
    ck_assert_int_eq(te_profile_start(NULL), TE_OK);
    for (int i = 0; i < 3; i++)
        train_step();
    te_profile_step st;
    static te_profile_op ops[64];
    ck_assert_int_eq(te_profile_last(&st, ops, 64), TE_OK);
    ck_assert_int_eq(st.step, 2);
    ck_assert_msg(st.n_ops >= 8 && st.n_ops <= 64, "%d ops", st.n_ops);

    char num[16], want[128];
    for (int wide = 0; wide < 2; wide++) {
        int h = 24, w = wide ? 110 : 40; /* the tensor's slot at 80x24, and on a wide terminal */
        shot s;
        draw_prof(h, w, &s);
        const char *all = joined(&s);
        snprintf(want, sizeof want, "step 2: %s ms", tui_fmt_num(st.ms, num, sizeof num));
        ck_assert_msg(strstr(s.row[0], want), "no '%s' in the title:\n%s", want, all);
        /* the phase split (one row, or two when narrow), the column names, the ops */
        int head = 2;
        while (head < 4 && strncmp(s.row[head], "op ", 3) != 0)
            head++;
        ck_assert_msg(head < 4, "no column names:\n%s", all);
        char split[600];
        snprintf(split, sizeof split, "%s %s", s.row[1], head == 3 ? s.row[2] : "");
        for (const char *const *ph = (const char *const[]){ "fwd ", "bwd ", "upd ", "data ", "hooks ", NULL }; *ph; ph++)
            ck_assert_msg(strstr(split, *ph), "no %s in the phase split:\n%s", *ph, all);
        ck_assert_msg(strstr(s.row[head], " ms ") && strstr(s.row[head], "%"), "column names:\n%s", all);
        ck_assert_msg(!strstr(s.row[head], "GFLOP/s") == !wide, "GFLOP/s column %s at width %d:\n%s",
                      wide ? "missing" : "shown", w, all);
        ck_assert_msg(!strstr(s.row[head], "calls") == !wide, "calls column at width %d:\n%s", w, all);

        /* the top row: the longest op, its ms as the engine has it, its share */
        const char *top = s.row[head + 1];
        snprintf(want, sizeof want, " %s ", tui_fmt_num(ops[0].ms, num, sizeof num));
        ck_assert_msg(strstr(top + strlen(ops[0].name), want), "no ms '%s' on the top row:\n%s", want, all);
        snprintf(want, sizeof want, " %.1f%%", 100 * ops[0].ms / st.ms);
        ck_assert_msg(strstr(top, want), "no share '%s' on the top row:\n%s", want, all);

        /* every op on show, by time: names in the engine's order, ms and bars never growing */
        int rows = st.n_ops < h - head - 1 ? st.n_ops : h - head - 1;
        if (wide) { /* the first op on show with FLOPs (which is longest depends on the build: ASan) */
            int k = 0;
            while (k < rows && !(ops[k].flops > 0))
                k++;
            ck_assert_msg(k < rows, "no op with FLOPs on show:\n%s", all);
            snprintf(want, sizeof want, " %s", tui_fmt_num(ops[k].flops / (ops[k].ms * 1e6), num, sizeof num));
            ck_assert_msg(strstr(s.row[head + 1 + k], want), "no GFLOP/s '%s' on row %d (%s):\n%s", want, k,
                          ops[k].name, all);
        }
        int prev_bar = 1 << 30, top_bar = bar_cells(top, ops[0].name);
        double prev_ms = 1e300;
        ck_assert_msg(top_bar > 0, "the top op has no bar:\n%s", all);
        for (int i = 0; i < rows; i++) {
            int b = bar_cells(s.row[head + 1 + i], ops[i].name);
            double ms = row_ms(s.row[head + 1 + i], ops[i].name);
            ck_assert_msg(b <= prev_bar && ms <= prev_ms, "row %d (%s): bar %d ms %g after bar %d ms %g:\n%s", i,
                          ops[i].name, b, ms, prev_bar, prev_ms, all);
            prev_bar = b;
            prev_ms = ms;
        }
        /* the bar is the share of the step: the top op's cells over the bar's width */
        ck_assert_msg(bar_cells(s.row[head + rows], ops[rows - 1].name) < top_bar, "bars all alike:\n%s", all);
    }

    /* narrow: the split takes a second row rather than lose a phase */
    shot n;
    draw_prof(11, 30, &n);
    char split[600];
    snprintf(split, sizeof split, "%s %s", n.row[1], n.row[2]);
    ck_assert_msg(strstr(split, "fwd ") && strstr(split, "hooks "), "30 columns:\n%s", joined(&n));

    /* the profiler stopped: the last step stays, the title says so */
    ck_assert_int_eq(te_profile_stop(), TE_OK);
    shot s;
    draw_prof(12, 40, &s);
    ck_assert_msg(strstr(s.row[0], "profile (stopped)") && strstr(s.row[0], "step 2: "), "%s", joined(&s));
}
END_TEST

/* ms/step in the status bar: the session's dbg_last_step_ms, with the
 * profiler off and on. */
START_TEST(test_status_ms_per_step)
{
    tui.state = TUI_RUNNING;
    const char *line = draw_status(100);
    if (dbg_last_step_ms() < 0) /* no step yet in this process */
        ck_assert_msg(!strstr(line, "ms/step"), "ms/step before any step: '%s'", line);
    model();
    char want[64], num[16];
    for (int profiled = 0; profiled < 2; profiled++) {
        if (profiled)
            ck_assert_int_eq(te_profile_start(NULL), TE_OK);
        train_step();
        train_step();
        double ms = dbg_last_step_ms();
        ck_assert_msg(ms > 0, "dbg_last_step_ms() = %g after a step", ms);
        snprintf(want, sizeof want, " %s ms/step  eager ", tui_fmt_num(ms, num, sizeof num));
        line = draw_status(100);
        ck_assert_msg(strstr(line, want), "no '%s' in the status bar '%s'", want, line);
        /* 64 columns: the mode goes first, the time stays */
        line = draw_status(64);
        snprintf(want, sizeof want, " %s ms/step ", num);
        ck_assert_msg(strstr(line, want) && !strstr(line, "eager"), "no '%s' alone in '%s'", want, line);
    }
}
END_TEST

/* p shows the profile in the tensor's slot, `focus tensor` and a stop's
 * tensor give it back; `scroll profile` moves its rows. */
START_TEST(test_prof_slot_commands)
{
    char why[256];
    /* the TUI's commands, as tui_start adds them (once in a process) */
    ck_assert_msg(tui_cmds_register(why, sizeof why) || strstr(why, "exists already"), "%s", why);
    ck_assert(!tui_prof_shown());
    ck_assert(!dbg_execute("focus profile"));
    ck_assert(tui_prof_shown());
    ck_assert_int_eq(tui.focus, TUI_TENSOR);
    ck_assert(!dbg_execute("focus tensor"));
    ck_assert(!tui_prof_shown());
    ck_assert_int_eq(tui.focus, TUI_TENSOR);
    ck_assert(!dbg_execute("focus pro"));
    ck_assert(tui_prof_shown());
    ck_assert(!dbg_execute("focus ops"));
    ck_assert(tui_prof_shown()); /* another pane: the slot keeps the profile */

    model();
    ck_assert_int_eq(te_profile_start(NULL), TE_OK);
    train_step();
    shot s;
    draw_prof(6, 40, &s); /* three rows of ops */
    ck_assert(!dbg_execute("focus tensor"));
    ck_assert(!dbg_execute("scroll profile down 4"));
    ck_assert_msg(tui_prof_shown(), "scroll profile left the tensor on show");
    ck_assert_int_eq(tui.pane[TUI_TENSOR].list.sel, 4);
    te_profile_step st;
    static te_profile_op ops[64];
    ck_assert_int_eq(te_profile_last(&st, ops, 64), TE_OK);
    draw_prof(6, 40, &s);
    ck_assert_msg(strncmp(s.row[5], ops[4].name, strlen(ops[4].name)) == 0, "the 5th op %s is not on the last row:\n%s",
                  ops[4].name, joined(&s));
}
END_TEST

Suite *suite_tui_prof(void)
{
    Suite *s = suite_create("tui_prof");
    TCase *tc = tcase_create("pane");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fmt_num);
    tcase_add_test(tc, test_prof_empty);
    tcase_add_test(tc, test_prof_rows);
    tcase_add_test(tc, test_status_ms_per_step);
    tcase_add_test(tc, test_prof_slot_commands);
    suite_add_tcase(s, tc);
    return s;
}
