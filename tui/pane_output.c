/*
 * pane_output.c — the output pane: the program's stdout and stderr and
 * the debugger's own lines (command echoes, reports, errors), kept as the
 * last OUT_LINES lines, wrapped to the pane's width, scrolled back with
 * PgUp/PgDn (from the command line too), the mouse wheel or `scroll output`.
 */
#include "tui_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OUT_LINES 4000
#define PART_MAX 2048 /* a longer line is cut into pieces */

typedef enum { K_PROG, K_PROG_ERR, K_DBG, K_ERROR, K_ECHO, K_STOP } kind;

typedef struct line {
    char *text;
    unsigned char kind;
} line;

static line ring[OUT_LINES];
static int head, count; /* head: the next slot */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* A line being written, per source; esc: inside an escape sequence. */
static struct partial {
    char s[PART_MAX + 1];
    int len, esc;
} part[3];

/* The pane's rows are the wrapped rows of the lines, the oldest first, in
 * tui.pane[TUI_OUTPUT].list (a scrollback: it follows the newest until
 * scrolled back). Under the lock: the reader thread moves it. wrap_w: the
 * width its rows were counted at. */
static tui_list *view(void) { return &tui.pane[TUI_OUTPUT].list; }
static int wrap_w = 1;

static int rows_of(const char *s, int w);

void tui_out_lock(void) { pthread_mutex_lock(&lock); }
void tui_out_unlock(void) { pthread_mutex_unlock(&lock); }

static kind kind_of(tui_source src, const char *s)
{
    if (src == TUI_SRC_STDOUT)
        return K_PROG;
    if (src == TUI_SRC_STDERR)
        return K_PROG_ERR;
    if (strncmp(s, "error: ", 7) == 0)
        return K_ERROR;
    if (strncmp(s, "(tdbg) ", 7) == 0)
        return K_ECHO;
    if (strncmp(s, "stopped: ", 9) == 0 || strncmp(s, "Breakpoint ", 11) == 0 ||
        strncmp(s, "Temporary breakpoint ", 21) == 0 || strncmp(s, "Stopped (", 9) == 0)
        return K_STOP;
    return K_DBG;
}

static void commit(tui_source src)
{
    struct partial *p = &part[src];
    p->s[p->len] = '\0';
    char *text = strdup(p->s);
    p->len = 0;
    if (!text)
        return;
    if (count == OUT_LINES) {
        /* a reader scrolled back keeps the same lines in view as the oldest go */
        if (!tui_list_at_end(view()))
            tui_list_scroll(view(), -rows_of(ring[head].text, wrap_w));
        free(ring[head].text);
    } else {
        count++;
    }
    ring[head] = (line){ text, (unsigned char)kind_of(src, text) };
    head = (head + 1) % OUT_LINES;
}

void tui_out_add(tui_source src, const char *s, size_t n)
{
    struct partial *p = &part[src];
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (p->esc) { /* ESC [ ... final byte: colours the program asked for */
            if (p->esc == 1)
                p->esc = c == '[' ? 2 : 0;
            else if (c >= 0x40 && c <= 0x7e)
                p->esc = 0;
            continue;
        }
        if (c == '\n') {
            commit(src);
        } else if (c == '\r') {
            if (i + 1 < n && s[i + 1] == '\n')
                continue;
            p->len = 0; /* a progress line written over itself */
        } else if (c == '\t') {
            do
                p->s[p->len++] = ' ';
            while (p->len % 8 && p->len < PART_MAX);
        } else if (c == 033) {
            p->esc = 1;
        } else if (c >= 0x20 && c != 0x7f) {
            p->s[p->len++] = (char)c;
        }
        if (p->len >= PART_MAX)
            commit(src);
    }
}

/* ---- layout of wrapped rows -------------------------------------------------- */

/* Columns of a UTF-8 string (one per character). */
static int columns(const char *s, int len)
{
    int c = 0;
    for (int i = 0; i < len; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

/* The byte offset after `cols` columns of s. */
static int bytes_for(const char *s, int len, int cols)
{
    int i = 0, c = 0;
    while (i < len && c < cols) {
        i++;
        while (i < len && ((unsigned char)s[i] & 0xc0) == 0x80)
            i++;
        c++;
    }
    return i;
}

static int rows_of(const char *s, int w)
{
    int c = columns(s, (int)strlen(s));
    return c == 0 ? 1 : (c + w - 1) / w;
}

/* Line k from the newest (0) back, with the lines still being written
 * counted first; NULL past the oldest. */
static const char *line_at(int k, kind *kd)
{
    static const kind part_kind[3] = { K_PROG, K_PROG_ERR, K_DBG };
    for (int src = 0; src < 3; src++) {
        if (!part[src].len)
            continue;
        if (k-- == 0) {
            part[src].s[part[src].len] = '\0';
            *kd = part_kind[src];
            return part[src].s;
        }
    }
    if (k >= count)
        return NULL;
    const line *l = &ring[(head - 1 - k + 2 * OUT_LINES) % OUT_LINES];
    *kd = (kind)l->kind;
    return l->text;
}

static attr_t attr_of(kind k)
{
    switch (k) {
    case K_PROG_ERR: return tui_attr(TUI_C_PROG_ERR);
    case K_ERROR: return tui_attr(TUI_C_ERROR);
    case K_ECHO: return tui_attr(TUI_C_ECHO);
    case K_STOP: return tui_attr(TUI_C_STOP);
    default: return A_NORMAL;
    }
}

static int total_rows(int w)
{
    int rows = 0;
    kind k;
    const char *s;
    for (int i = 0; (s = line_at(i, &k)) != NULL; i++)
        rows += rows_of(s, w);
    return rows;
}

/* The view's rows counted again (under the lock); while it follows the
 * newest, drawing needs no count and skips it. */
static void count_rows(tui_pane *p)
{
    wrap_w = p->r.w > 0 ? p->r.w : 1;
    tui_list_follow(&p->list, total_rows(wrap_w), p->r.h - 1);
}

static void draw(tui_pane *p)
{
    int h = p->r.h - 1, w = p->r.w;
    werase(p->win);
    tui_out_lock();
    int back = 0; /* rows below the window */
    if (!tui_list_at_end(&p->list)) { /* scrolled back: where to, now */
        count_rows(p);
        back = p->list.count - p->list.height - p->list.top;
        back = back > 0 ? back : 0;
    }
    char right[64];
    if (back)
        snprintf(right, sizeof right, "%d rows back; End: newest", back);
    else if (!tui.mouse)
        snprintf(right, sizeof right, "mouse off: select text to copy");
    else
        snprintf(right, sizeof right, "program and debugger");
    tui_pane_title(p, "output", right);
    /* from the bottom row up: skip `back` rows, then fill */
    int skip = back, y = h;
    kind k;
    const char *s;
    for (int i = 0; y > 0 && (s = line_at(i, &k)) != NULL; i++) {
        int len = (int)strlen(s), n = rows_of(s, w);
        for (int r = n - 1; r >= 0 && y > 0; r--) {
            if (skip > 0) {
                skip--;
                continue;
            }
            int b0 = bytes_for(s, len, r * w), b1 = bytes_for(s, len, (r + 1) * w);
            wattrset(p->win, attr_of(k));
            mvwaddnstr(p->win, y--, 0, s + b0, b1 - b0);
            wattrset(p->win, A_NORMAL);
        }
    }
    tui_out_unlock();
}

static void move_back(tui_pane *p, int rows, int cols)
{
    (void)cols;
    tui_out_lock();
    count_rows(p);
    tui_list_scroll(&p->list, rows);
    tui_out_unlock();
}

static void click(tui_pane *p, int row, int col)
{
    (void)p, (void)row, (void)col;
}

const tui_pane_class tui_pane_output = { .name = "output", .draw = draw, .click = click, .shift = move_back };

/* ---- after the TUI, and in a crash ------------------------------------------------ */

void tui_out_tail(FILE *f, int n, const char *eol)
{
    tui_out_lock();
    int have = 0;
    kind k;
    while (have < n && line_at(have, &k))
        have++;
    for (int i = have - 1; i >= 0; i--)
        fprintf(f, "%s%s", line_at(i, &k), eol);
    tui_out_unlock();
}

void tui_out_crash_tail(int fd, int n)
{
    int have = count < n ? count : n;
    for (int i = have - 1; i >= 0; i--) {
        const char *s = ring[(head - 1 - i + 2 * OUT_LINES) % OUT_LINES].text;
        if (s && write(fd, s, strlen(s)) >= 0 && write(fd, "\n", 1) >= 0)
            continue;
    }
}

void tui_out_free(void)
{
    for (int i = 0; i < count; i++)
        free(ring[(head - 1 - i + 2 * OUT_LINES) % OUT_LINES].text);
    count = head = 0;
    memset(part, 0, sizeof part);
    *view() = (tui_list){ 0 };
}
