/*
 * tui_internal.h — the TUI's parts and the state they share.
 *
 *   tui.c          the session's front end (registered from a constructor:
 *                  start, the loop at a stop, showing a stop, the last look
 *                  at the end), the engine hooks, redraws
 *   term.c         the terminal: open, colours, restore on exit and crash
 *   capture.c      the program's stdout/stderr (pipes) and dbg_out
 *   layout.c       pane geometry for any size, windows, pane titles
 *   pane_ops.c     ops in execution order      pane_tensor.c  a 2-D slice
 *   pane_chart.c   loss and a tensor's trend   pane_breaks.c  breakpoints
 *   pane_output.c  the lines of output         status.c       status and key bars
 *   listview.c     a pane's rows: selection, scrolling (htop's Panel)
 *   input.c        keys, mouse, readline's callback interface, focus
 *   help.c         the key overlay             cmd_tui.c      the TUI's commands
 *   track.c        loss per step               pane_prof.c    the last profiled step's ops
 *
 * The stop on show is the session's (dbg_last_stop()), conditions answer
 * for themselves (dbg_cond_preds()): the TUI parses no debugger output.
 *
 * Everything runs on the training thread (the session's hooks and its
 * command loop) except capture.c's reader thread, which only appends to
 * the output pane's lines under tui_out_lock().
 */
#ifndef TDBG_TUI_INTERNAL_H
#define TDBG_TUI_INTERNAL_H

#include "cmd.h"
#include "session.h"
#include "tui.h"

#include <curses.h>
#include <stdbool.h>
#include <stdint.h>

/* Below this the TUI shows a message instead of panes. */
#define TUI_MIN_W 60
#define TUI_MIN_H 18
#define TUI_FRAME_MS 50 /* the least time between two redraws while training runs */

/* ---- panes ------------------------------------------------------------------ */

enum { TUI_OPS, TUI_TENSOR, TUI_CHART, TUI_BREAKS, TUI_OUTPUT, TUI_NPANES };
#define TUI_CMDLINE TUI_NPANES /* the focus is on the command line */

typedef struct tui_rect {
    int y, x, h, w;
} tui_rect;

/* Where everything goes on an h x w screen. */
typedef struct tui_geom {
    bool too_small;
    tui_rect status, cmd, fbar, pane[TUI_NPANES];
    tui_rect rule; /* the vertical line between the two columns */
} tui_geom;

typedef struct tui_pane tui_pane;

/* What a pane does, as a class (htop's panels): draw, its own keys, a click
 * and a move ("scroll") that commands and keys share. */
typedef struct tui_pane_class {
    const char *name;                            /* "ops": in `focus` and `scroll` */
    void (*draw)(tui_pane *p);
    bool (*key)(tui_pane *p, int key);           /* optional; true: used */
    void (*click)(tui_pane *p, int row, int col); /* inside the pane; row 0 is the title */
    /* Moves the selection, cursor or view by rows and columns; pages are
     * rows of the pane, and +-TUI_FAR goes to an end. */
    void (*shift)(tui_pane *p, int rows, int cols);
} tui_pane_class;

#define TUI_FAR 1000000000

/* ---- listview.c: the rows of a pane, selection and scrolling (htop's Panel) ---- */

/* count rows seen through a window of height rows. Kept true by every
 * call: 0 <= sel < count (0 when empty), 0 <= top <= count - height (0
 * when all fit), so no row below the end shows while rows above are hidden.
 * All zero is an empty list, and a scrollback that follows its tail. */
typedef struct tui_list {
    int count, height;
    int sel; /* the selected row */
    int top; /* the first row shown */
} tui_list;

/* The first row shown for a window of height rows, moved as little as
 * possible from top so that row keep is in view, then clamped as above
 * (the tensor pane's grid uses it for its rows and its columns). */
int64_t tui_list_top_for(int64_t top, int64_t keep, int64_t height, int64_t count);
/* A new count (rows came or went) or height (a resize): sel and top clamped. */
void tui_list_set_count(tui_list *l, int count);
void tui_list_set_height(tui_list *l, int height);
/* The same for a scrollback (rows only come at the end): a window at the
 * end stays at the end, following the newest rows; one scrolled back
 * keeps its top, so the same rows stay in view. */
void tui_list_follow(tui_list *l, int count, int height);
/* The window shows the last row (or all of them). */
bool tui_list_at_end(const tui_list *l);
/* Selects row i, or by n rows (pages, +-TUI_FAR: the ends), clamped;
 * the window stays where it is until tui_list_show. */
void tui_list_select(tui_list *l, int i);
void tui_list_move(tui_list *l, int n);
/* Scrolls the window so that row i is in view. */
void tui_list_show(tui_list *l, int i);
/* Scrolls the window by n rows (+-TUI_FAR: to an end), clamped; the
 * selection stays. */
void tui_list_scroll(tui_list *l, int n);
/* The row shown on window row `row` (0: the first below the title), or -1. */
int tui_list_item_at(const tui_list *l, int row);

struct tui_pane {
    const tui_pane_class *cls;
    WINDOW *win;
    tui_rect r;
    tui_list list; /* ops, breaks: their rows; output: the rows of its wrapped lines */
};

extern const tui_pane_class tui_pane_ops, tui_pane_tensor, tui_pane_chart, tui_pane_breaks, tui_pane_output;
/* The profile pane: not a slot of its own, it takes the tensor pane's
 * (tui.pane[TUI_TENSOR].cls says which of the two is on show). */
extern const tui_pane_class tui_pane_prof;

/* ---- state -------------------------------------------------------------------- */

typedef enum { TUI_READY, TUI_RUNNING, TUI_PAUSED, TUI_FINISHED } tui_run_state;

/* The tensor pane's tensor and the 2-D slice of it shown. */
typedef struct tui_view {
    char name[TE_NAME_MAX];    /* "" : none */
    int64_t lead[TE_MAX_DIMS]; /* indices of the dims before the grid's two */
    int64_t row, col;          /* the cursor cell */
    int64_t top, left;         /* the first row and column shown */
    double highlight;          /* |x| >= highlight is marked; 0: off */
} tui_view;

typedef struct tui_state {
    tui_pane pane[TUI_NPANES];
    WINDOW *status, *cmd, *fbar, *small;
    tui_geom geom;
    int focus, last_pane; /* a pane or TUI_CMDLINE; the pane Esc goes back to */
    tui_run_state state;
    bool color, utf8, mouse;
    bool help; /* the key overlay is up */
    char **matches; /* a completion list on show (matches[0] the common part) */
    int n_matches;
    tui_view view;
    bool graph;     /* ops run in compiled kernels */
    bool full;      /* a full redraw is under way (a resize, Ctrl-L) */
    unsigned gen;   /* counts the pauses for commands: values may have changed */
    char hint[160]; /* one message for the status bar, until the next key */
} tui_state;

extern tui_state tui;

/* ---- term.c ------------------------------------------------------------------- */

typedef enum {
    TUI_C_PLAIN,
    TUI_C_BAR, TUI_C_READY, TUI_C_RUN, TUI_C_PAUSE, TUI_C_BAD, TUI_C_DONE,
    TUI_C_TITLE, TUI_C_TITLE_FOCUS, TUI_C_SELECT, TUI_C_CURRENT,
    TUI_C_NAN, TUI_C_INF, TUI_C_THRESH, TUI_C_BREAK, TUI_C_DIM,
    TUI_C_ERROR, TUI_C_ECHO, TUI_C_STOP, TUI_C_PROG_ERR,
    TUI_C_LOSS, TUI_C_TREND, TUI_C_KEY, TUI_C_KEYLABEL,
    TUI_C_PROF_FWD, TUI_C_PROF_BWD, TUI_C_PROF_UPD, /* the profile's bars, by phase */
    TUI_C_COUNT
} tui_color;

/* Opens the terminal and starts curses; false with why written. remote:
 * the terminal of an attached client (tdbg attach --tui) instead of this
 * process's: its pipes, TERM, size and UTF-8 as the client said. */
bool tui_term_open(const dbg_term *remote, char *why, size_t n);
/* The remote terminal's new size (any thread); curses learns it at the
 * next key read (tui_term_resized), as KEY_RESIZE. */
void tui_term_resize(int rows, int cols);
/* The training thread: a size given by tui_term_resize is put in place. */
void tui_term_resized(void);
/* The terminal hung up (the ssh connection or the tmux pane is gone). */
bool tui_term_gone(void);
/* Ends curses and gives the terminal back as it was; safe to call twice. */
void tui_term_close(void);
/* The front end's fatal_signal: the terminal back, async-signal-safe. */
void tui_term_fatal(int sig);
/* The attributes of a colour slot: a colour pair, or without colours
 * (NO_COLOR, a monochrome terminal) bold, reverse, underline. */
attr_t tui_attr(tui_color c);
/* Glyphs: UTF-8 when the locale is, else ASCII. */
const char *tui_glyph_rule(void);  /* the vertical line */
const char *tui_glyph_level(int eighths); /* 0..8: a bar's top cell */
const char *tui_glyph_hbar(int eighths);  /* 0..8: a horizontal bar's last cell */

/* ---- capture.c ------------------------------------------------------------------ */

/* Sends the program's stdout and stderr through pipes into the output
 * pane (and on to the original file when that was not the terminal, or
 * always: tee, for an attached run whose terminal is not the TUI's), and
 * dbg_out into it as the debugger's own lines. false with why written. */
bool tui_capture_start(bool tee, char *why, size_t n);
/* Gives fds 1 and 2 back, reads what is left, stops the reader thread. */
void tui_capture_stop(void);
/* Output arrived since the last call. */
bool tui_capture_fresh(void);
/* From a crash handler: what is still in the pipes, to fd. */
void tui_capture_crash_copy(int fd);

/* ---- pane_output.c ------------------------------------------------------------- */

typedef enum { TUI_SRC_STDOUT, TUI_SRC_STDERR, TUI_SRC_DBG } tui_source;

void tui_out_lock(void);
void tui_out_unlock(void);
/* Appends text from a source (caller holds the lock): lines end at '\n',
 * a '\r' starts the line again, tabs expand, other control bytes go. */
void tui_out_add(tui_source src, const char *s, size_t n);
/* The last n lines, plain, to f (after the TUI has closed). */
void tui_out_tail(FILE *f, int n, const char *eol);
/* From a crash handler: the last lines to fd, without locking. */
void tui_out_crash_tail(int fd, int n);
void tui_out_free(void);

/* ---- track.c -------------------------------------------------------------------- */

/* From the TUI's op_end hook: the loss (a CrossEntropy or MSE output of
 * the forward phase) and a Scale applied to it. */
void tui_track_op(const te_op_record *r);
void tui_track_step_end(int64_t step);
/* Loss per training step, averaged into `cols` columns over all steps seen
 * (one step per column when there are fewer). Returns the columns filled;
 * first and last steps into *s0, *s1. NaN where a step's loss was. */
int tui_track_loss(float *out, int cols, int64_t *s0, int64_t *s1);
/* The last loss, its step, and the loss scale (1 when none). false: none yet. */
bool tui_track_last(float *loss, int64_t *step, float *scale);
/* With the engine's loss scaler on in some step: true, and per column of
 * tui_track_loss (same cols) the least loss scale (0: none that step) and
 * whether a step in it was skipped (a non-finite gradient). */
bool tui_track_amp(float *scale, bool *skipped, int cols);
/* An op's output precision and what rounding to it did, by exec index, in
 * this step or the last; NULL when not seen. */
#define TUI_ROUND_OPS 4096
typedef struct tui_op_round {
    bool seen;
    te_dtype dtype;              /* its first output's */
    int64_t overflow, underflow; /* over its outputs (te_op_record.round) */
} tui_op_round;
const tui_op_round *tui_track_round(int exec, bool last);
/* Notes what rounding did in r, the op training stopped at: a stop comes
 * from the debugger's op_end hook, before the TUI's own sees that op. */
void tui_track_stopped(const te_op_record *r);
void tui_track_free(void);

/* ---- layout.c -------------------------------------------------------------------- */

void tui_layout_compute(int h, int w, int n_breaks, tui_geom *g);
/* (Re)makes the windows for the screen's size. */
void tui_layout_apply(void);
void tui_layout_free(void);
/* The rule between the columns, drawn again. */
void tui_layout_rule(void);
/* A pane's title line: reverse when focused; `right` at its end (may be NULL). */
void tui_pane_title(tui_pane *p, const char *title, const char *right);
/* Writes text from (y, x) on, word-wrapped, in at most rows rows; returns
 * the rows used. */
int tui_wrap(WINDOW *w, int y, int x, int rows, const char *text);
/* Writes s clipped to n columns at the cursor. */
void tui_put(WINDOW *w, const char *s, int n);

/* ---- the panes' own helpers -------------------------------------------------------- */

/* Ops shown: this step's so far, then the rest of the last step's. */
int tui_ops_count(void);
/* Row i; *later: not run yet in this step (the last step's). */
const dbg_op *tui_ops_at(int i, bool *later);
/* Selects row i (clamped) and shows its first output in the tensor pane. */
void tui_ops_select(int i, bool show);
/* The row of the op with that name, or -1. */
int tui_ops_find(const char *name);
/* Forgets the statistics cached for this step's rows. */
void tui_ops_forget(void);
/* The tensor pane's slot shows the profile (true) or the tensor again. */
void tui_prof_show(bool on);
bool tui_prof_shown(void);
/* The breakpoint on the selected row, or NULL. */
const dbg_break *tui_breaks_selected(void);
/* Shows `name[lead...]` (or an op's out0) in the tensor pane: true, or
 * false with err written. Unless must_exist, a tensor that cannot be read
 * now is shown anyway (its pane says why). */
bool tui_view_set(const char *text, bool must_exist, char *err, size_t n);
/* Shows the tensor (or an op's out0) of exactly that name, as names come
 * from the session (spaces and all, no slice): true, or false with err. */
bool tui_view_name(const char *name, char *err, size_t n);
/* Puts the tensor pane's cursor on a flat index of its tensor. */
void tui_view_focus_index(const te_tensor *t, int64_t flat);
/* The tensor on show, readable now, or NULL with why. */
const te_tensor *tui_view_tensor(char *why, size_t n);
void tui_view_slice_step(int delta); /* the next or previous 2-D slice */
/* The dim before the last leading one (of [B,H,T,T]: the batch, the head
 * kept) one up or down, stopping at its ends. */
void tui_view_outer_step(int delta);

/* ---- status.c, help.c ------------------------------------------------------------- */

void tui_status_draw(void);
void tui_fbar_draw(void);
/* A non-negative number (ms, GFLOP/s) in at most 7 columns with 3 or 4
 * significant digits: 0.047, 3.41, 12.3, 153, 1530. Returns buf. */
const char *tui_fmt_num(double v, char *buf, size_t n);
void tui_help_draw(void);

/* ---- input.c ----------------------------------------------------------------------- */

/* What a key does; the command underneath is in its tui_key. */
typedef enum {
    TUI_A_HELP, TUI_A_BREAK, TUI_A_SEARCH, TUI_A_JUMP, TUI_A_CONT, TUI_A_PANE, TUI_A_STEP, TUI_A_NEXT,
    TUI_A_NAN, TUI_A_QUIT, TUI_A_TREND, TUI_A_SLICE_PREV, TUI_A_SLICE_NEXT, TUI_A_OUTER_PREV,
    TUI_A_OUTER_NEXT, TUI_A_MOUSE, TUI_A_ESC,
    TUI_A_REFRESH, TUI_A_PROFILE,
} tui_action;

/* A key: a function key works everywhere, a letter only while a pane has
 * the focus (the command line takes letters as text). */
typedef struct tui_key {
    int fkey, letter;                    /* 0: none */
    const char *fkey_name, *letter_name; /* "F5", "c" */
    const char *bar;                     /* its label on the function bar, or NULL */
    const char *what;                    /* NULL ends the table */
    const char *command;                 /* the command it runs */
    tui_action action;
} tui_key;
extern const tui_key tui_keys[];

/* Readline set up for callbacks before curses starts; installed after. */
void tui_input_prep(FILE *in);
void tui_input_install(const char *prompt);
void tui_input_close(void);
/* Waits up to timeout_ms (0: only what is there) for keys and handles
 * them. true when a command line is ready, or input ended (Ctrl-D on an
 * empty line): tui_input_take() gives the line, NULL for the end. */
bool tui_input_poll(int timeout_ms);
char *tui_input_take(void);
/* A key's command: queued for the session (echoed as typed). */
void tui_submit(const char *line);
/* Draws the command line (readline's prompt, line and cursor). */
void tui_cmdline_draw(void);
/* Drops a half-typed line (Ctrl-C). */
void tui_input_cancel(void);
/* Text into the command line, the focus there ("search " for /). */
void tui_input_prefill(const char *text);
void tui_focus(int where);
void tui_mouse_set(bool on);

/* ---- cmd_tui.c ------------------------------------------------------------------- */

/* Adds the TUI's commands and settings; false with why when they clash. */
bool tui_cmds_register(char *why, size_t n);
/* ...and away again when the TUI stops (an attached session detaches). */
void tui_cmds_unregister(void);
/* The op and tensor of the last stop: selected, shown, the cursor on the
 * bad element, a condition's threshold highlighted. */
void tui_jump(void);

/* ---- tui.c ---------------------------------------------------------------------- */

/* Everything drawn again (full: cleared first), then shown. */
void tui_redraw(bool full);

#endif
