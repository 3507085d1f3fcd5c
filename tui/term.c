/*
 * term.c — the terminal: which one (stdin and stdout when both are
 * terminals, else /dev/tty), curses on it, colour slots with a monochrome
 * fallback that honours NO_COLOR, and the terminal given back as it was on
 * exit, on error and on a crash signal. The debugger owns the fatal-signal
 * handler (debugger/frontend.c) and calls the TUI's fatal_signal,
 * tui_term_fatal(), from it. endwin() is not async-signal-safe: that
 * restores the saved termios with tcsetattr() and writes the terminal's
 * own reset sequences, read from terminfo at start.
 *
 * For `tdbg attach --tui` the terminal is the client's, far away: curses
 * runs on pipes (remote.c), with the client's TERM and size; the client
 * sets its terminal's modes, and a new size comes as tui_term_resize.
 */
#include "tui_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <term.h>
#include <termios.h>
#include <unistd.h>

static SCREEN *screen;
static FILE *tty_in, *tty_out;
static int tty_fd = -1; /* tty_out's fd, for the crash handler */
static struct termios saved;
static bool have_saved;
static volatile sig_atomic_t active;
static char reset_seq[512];
static size_t reset_len;
static _Atomic long new_size = -1;  /* rows << 16 | cols, from tui_term_resize; -1 none */
static char *saved_ctype;           /* a remote terminal's: LC_CTYPE as the program had it */
static bool remote;                 /* the terminal is an attached client's */

/* ---- crash ------------------------------------------------------------------- */

static void put(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

/* The terminal back, the last lines of output after it, and which signal
 * it was; the debugger's handler then lets the signal take its course. */
void tui_term_fatal(int sig)
{
    if (!active)
        return;
    int saved_errno = errno;
    active = 0;
    put(tty_fd, reset_seq);
    if (have_saved)
        tcsetattr(tty_fd, TCSANOW, &saved);
    put(tty_fd, "\r\n");
    tui_out_crash_tail(tty_fd, 12);
    tui_capture_crash_copy(tty_fd);
    static const char *const names[] = { [SIGSEGV] = "SIGSEGV", [SIGBUS] = "SIGBUS", [SIGFPE] = "SIGFPE",
                                         [SIGILL] = "SIGILL",   [SIGABRT] = "SIGABRT", [SIGTERM] = "SIGTERM",
                                         [SIGHUP] = "SIGHUP",   [SIGQUIT] = "SIGQUIT" };
    put(tty_fd, "tdbg: ");
    put(tty_fd, sig > 0 && sig < (int)(sizeof names / sizeof names[0]) && names[sig] ? names[sig] : "a signal");
    put(tty_fd, ": the terminal is restored\n");
    errno = saved_errno;
}

/* The sequences that undo what curses set: the alternate screen, the
 * keypad mode, attributes, a hidden cursor, mouse reporting. */
static void build_reset(void)
{
    static const char *const caps[] = { "rmcup", "rmkx", "sgr0", "cnorm" };
    reset_len = 0;
    reset_seq[0] = '\0';
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        const char *s = tigetstr(caps[i]);
        if (s && s != (char *)-1 && reset_len + strlen(s) + 1 < sizeof reset_seq) {
            strcat(reset_seq, s);
            reset_len += strlen(s);
        }
    }
    static const char mouse_off[] = "\033[?1000l\033[?1002l\033[?1006l";
    if (reset_len + sizeof mouse_off < sizeof reset_seq) {
        strcat(reset_seq, mouse_off);
        reset_len += sizeof mouse_off - 1;
    }
}

/* ---- colours ------------------------------------------------------------------ */

typedef struct slot {
    short fg, bg;
    attr_t extra; /* with colours */
    attr_t mono;  /* without */
} slot;

static const slot slots[TUI_C_COUNT] = {
    [TUI_C_PLAIN] = { -1, -1, 0, 0 },
    [TUI_C_BAR] = { COLOR_BLACK, COLOR_CYAN, 0, A_REVERSE },
    [TUI_C_READY] = { COLOR_BLACK, COLOR_WHITE, A_BOLD, A_BOLD },
    [TUI_C_RUN] = { COLOR_BLACK, COLOR_GREEN, A_BOLD, A_BOLD },
    [TUI_C_PAUSE] = { COLOR_BLACK, COLOR_YELLOW, A_BOLD, A_BOLD },
    [TUI_C_BAD] = { COLOR_WHITE, COLOR_RED, A_BOLD, A_BOLD | A_UNDERLINE },
    [TUI_C_DONE] = { COLOR_WHITE, COLOR_BLUE, A_BOLD, A_BOLD },
    [TUI_C_TITLE] = { COLOR_CYAN, -1, A_BOLD, A_UNDERLINE },
    [TUI_C_TITLE_FOCUS] = { COLOR_BLACK, COLOR_CYAN, A_BOLD, A_REVERSE },
    [TUI_C_SELECT] = { COLOR_BLACK, COLOR_WHITE, 0, A_REVERSE },
    [TUI_C_CURRENT] = { COLOR_YELLOW, -1, A_BOLD, A_BOLD },
    [TUI_C_NAN] = { COLOR_WHITE, COLOR_RED, A_BOLD, A_BOLD | A_UNDERLINE },
    [TUI_C_INF] = { COLOR_WHITE, COLOR_MAGENTA, A_BOLD, A_BOLD | A_UNDERLINE },
    [TUI_C_THRESH] = { COLOR_BLACK, COLOR_YELLOW, 0, A_UNDERLINE },
    [TUI_C_BREAK] = { COLOR_RED, -1, A_BOLD, A_BOLD },
    [TUI_C_DIM] = { COLOR_BLUE, -1, A_BOLD, A_DIM },
    [TUI_C_ERROR] = { COLOR_RED, -1, A_BOLD, A_BOLD },
    [TUI_C_ECHO] = { COLOR_CYAN, -1, A_BOLD, A_BOLD },
    [TUI_C_STOP] = { COLOR_YELLOW, -1, A_BOLD, A_BOLD },
    [TUI_C_PROG_ERR] = { COLOR_MAGENTA, -1, 0, 0 },
    [TUI_C_LOSS] = { COLOR_GREEN, -1, 0, 0 },
    [TUI_C_TREND] = { COLOR_CYAN, -1, 0, 0 },
    [TUI_C_KEY] = { -1, -1, A_BOLD, A_BOLD },
    [TUI_C_KEYLABEL] = { COLOR_BLACK, COLOR_CYAN, 0, A_REVERSE },
    [TUI_C_PROF_FWD] = { COLOR_GREEN, -1, 0, 0 },
    [TUI_C_PROF_BWD] = { COLOR_MAGENTA, -1, 0, A_BOLD },
    [TUI_C_PROF_UPD] = { COLOR_YELLOW, -1, 0, A_UNDERLINE },
};

static void colors_init(void)
{
    const char *no = getenv("NO_COLOR"); /* no-color.org: set and not empty */
    tui.color = has_colors() && !(no && no[0]) && start_color() == OK && COLOR_PAIRS > TUI_C_COUNT;
    if (!tui.color)
        return;
    bool defaults = use_default_colors() == OK;
    for (int c = 1; c < TUI_C_COUNT; c++) {
        short fg = slots[c].fg, bg = slots[c].bg;
        if (!defaults) {
            fg = fg < 0 ? COLOR_WHITE : fg;
            bg = bg < 0 ? COLOR_BLACK : bg;
        }
        init_pair((short)c, fg, bg);
    }
}

attr_t tui_attr(tui_color c)
{
    if (!tui.color)
        return slots[c].mono;
    return c == TUI_C_PLAIN ? A_NORMAL : (attr_t)COLOR_PAIR(c) | slots[c].extra;
}

const char *tui_glyph_rule(void) { return tui.utf8 ? "\u2502" : "|"; }

const char *tui_glyph_level(int eighths)
{
    static const char *const utf8[] = { " ", "\u2581", "\u2582", "\u2583", "\u2584",
                                        "\u2585", "\u2586", "\u2587", "\u2588" };
    static const char *const ascii[] = { " ", ".", ".", "_", "o", "o", "O", "#", "#" };
    eighths = eighths < 0 ? 0 : eighths > 8 ? 8 : eighths;
    return tui.utf8 ? utf8[eighths] : ascii[eighths];
}

const char *tui_glyph_hbar(int eighths)
{
    static const char *const utf8[] = { " ", "\u258f", "\u258e", "\u258d", "\u258c",
                                        "\u258b", "\u258a", "\u2589", "\u2588" };
    static const char *const ascii[] = { " ", "-", "-", "-", "=", "=", "=", "=", "#" };
    eighths = eighths < 0 ? 0 : eighths > 8 ? 8 : eighths;
    return tui.utf8 ? utf8[eighths] : ascii[eighths];
}

/* ---- open and close ------------------------------------------------------------- */

static void fail(char *why, size_t n, const char *fmt, const char *arg)
{
    snprintf(why, n, fmt, arg);
}

/* This process's terminal: stdin and stdout when both are, else /dev/tty. */
static bool local_fds(int *in, int *out, char *why, size_t n)
{
    if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) {
        *in = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
        *out = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    } else {
        *in = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
        if (*in < 0) {
            fail(why, n, "no terminal for the TUI (stdin or stdout is not one, and /dev/tty: %s)", strerror(errno));
            return false;
        }
        *out = fcntl(*in, F_DUPFD_CLOEXEC, 3);
    }
    return true;
}

/* The locale's character type: the user's for a terminal of this
 * process; for a client's, UTF-8 when it takes it (the program's own is
 * given back at the end). Numbers keep the C locale. */
static void pick_ctype(const dbg_term *far)
{
    if (!far) {
        setlocale(LC_CTYPE, "");
    } else if (far->utf8 && strcmp(nl_langinfo(CODESET), "UTF-8") != 0) {
        const char *cur = setlocale(LC_CTYPE, NULL);
        saved_ctype = cur ? strdup(cur) : NULL;
        if (saved_ctype && !setlocale(LC_CTYPE, "C.UTF-8")) {
            free(saved_ctype);
            saved_ctype = NULL;
        }
    }
    tui.utf8 = strcmp(nl_langinfo(CODESET), "UTF-8") == 0 && (!far || far->utf8);
}

static void restore_ctype(void)
{
    if (!saved_ctype)
        return;
    setlocale(LC_CTYPE, saved_ctype);
    free(saved_ctype);
    saved_ctype = NULL;
}

bool tui_term_open(const dbg_term *far, char *why, size_t n)
{
    remote = far != NULL;
    int in = -1, out = -1;
    if (far) {
        in = fcntl(far->in_fd, F_DUPFD_CLOEXEC, 3);
        out = fcntl(far->out_fd, F_DUPFD_CLOEXEC, 3);
    } else if (!local_fds(&in, &out, why, n)) {
        return false;
    }
    const char *term = far ? far->name : getenv("TERM");
    if (in < 0 || out < 0 || !term || !term[0] || strcmp(term, "dumb") == 0) {
        fail(why, n, in < 0 || out < 0 ? "cannot use the terminal: %s"
                     : "TERM is '%s': the TUI needs a terminal that moves the cursor",
             in < 0 || out < 0 ? strerror(errno) : term ? term : "");
        if (in >= 0)
            close(in);
        if (out >= 0)
            close(out);
        return false;
    }
    tty_in = fdopen(in, "r");
    tty_out = fdopen(out, "w");
    tty_fd = out;
    have_saved = !far && tcgetattr(out, &saved) == 0; /* the client keeps its own modes */
    pick_ctype(far);
    /* readline's terminal set-up takes curses' cur_term: it goes first */
    tui_input_prep(tty_in);
    /* curses catches SIGTERM only when nobody does: the debugger's fatal
     * handler is in place already (dbg_fatal_handlers_install) */
    screen = newterm(term, tty_out, tty_in);
    if (!screen) {
        fail(why, n, far ? "no terminfo here for the client's TERM=%s" : "cannot start curses on TERM=%s (no terminfo entry?)",
             term);
        fclose(tty_in);
        fclose(tty_out);
        tty_in = tty_out = NULL;
        restore_ctype();
        return false;
    }
    set_term(screen);
    if (far) /* a pipe has no size: the client's */
        resizeterm(far->rows, far->cols);
    atomic_store(&new_size, -1);
    cbreak(); /* Ctrl-C stays a signal: the session's interrupt */
    noecho();
    nonl();
    set_escdelay(25);
    build_reset();
    colors_init();
    active = 1;
    return true;
}

void tui_term_resize(int rows, int cols) { atomic_store(&new_size, (long)rows << 16 | cols); }

void tui_term_resized(void)
{
    long sz = atomic_exchange(&new_size, -1);
    if (sz >= 0 && screen)
        resizeterm((int)(sz >> 16), (int)(sz & 0xffff)); /* queues KEY_RESIZE */
}

bool tui_term_gone(void)
{
    if (!tty_in)
        return true;
    struct pollfd p = { fileno(tty_in), POLLIN, 0 };
    return poll(&p, 1, 0) < 0 || (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

void tui_term_close(void)
{
    if (!screen)
        return;
    active = 0;
    mousemask(0, NULL);
    endwin();
    fflush(tty_out);
    delscreen(screen);
    screen = NULL;
    if (have_saved)
        tcsetattr(tty_fd, TCSANOW, &saved);
    /* what the program and the debugger said last, on the terminal again */
    tui_out_tail(tty_out, 6, remote ? "\r\n" : "\n"); /* a client's terminal translates nothing yet */
    fflush(tty_out);
    fclose(tty_in);
    fclose(tty_out);
    tty_in = tty_out = NULL;
    tty_fd = -1;
    restore_ctype();
}
