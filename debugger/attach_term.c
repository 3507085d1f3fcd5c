/*
 * attach_term.c — the client's terminal under `tdbg attach --tui`: what it
 * is (for HELLO), its modes while the run draws on it, and its size.
 * The run's curses draws on a pipe, so it can set no terminal mode: the
 * client sets what curses would (cbreak, noecho, nonl, no output
 * translation), and gives the modes back however it leaves but SIGKILL.
 */
#include "attach_term.h"

#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

static struct termios saved;
static volatile sig_atomic_t raw_on;
static volatile sig_atomic_t resized;

bool attach_term_usable(char *why, size_t n)
{
    const char *term = getenv("TERM");
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        snprintf(why, n, "stdin and stdout must be a terminal");
        return false;
    }
    if (!term || !term[0] || strcmp(term, "dumb") == 0) {
        snprintf(why, n, "TERM is '%s': the TUI needs a terminal that moves the cursor", term ? term : "");
        return false;
    }
    return true;
}

static void size(int *rows, int *cols)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
        *rows = ws.ws_row;
        *cols = ws.ws_col;
    } else {
        *rows = 24;
        *cols = 80;
    }
}

void attach_term_describe(char *buf, size_t n)
{
    int rows, cols;
    size(&rows, &cols);
    setlocale(LC_CTYPE, "");
    bool utf8 = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
    snprintf(buf, n, " term=%.63s rows=%d cols=%d utf8=%d", getenv("TERM"), rows, cols, utf8);
}

void attach_term_restore(void)
{
    if (!raw_on)
        return;
    raw_on = 0;
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
}

bool attach_term_is_raw(void) { return raw_on; }

/* SIGTERM, SIGHUP, SIGQUIT: the modes back, then the signal's own end. */
static void on_fatal(int sig)
{
    if (raw_on)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    raw_on = 0;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_winch(int sig)
{
    (void)sig;
    resized = 1;
}

bool attach_term_raw(void)
{
    static bool installed;
    if (raw_on)
        return true;
    if (tcgetattr(STDIN_FILENO, &saved) != 0)
        return false;
    if (!installed) {
        installed = true;
        atexit(attach_term_restore);
        struct sigaction sa = { .sa_handler = on_fatal };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        sigaction(SIGQUIT, &sa, NULL);
        sa.sa_handler = on_winch; /* no SA_RESTART: the relay's poll wakes up to send the size */
        sigaction(SIGWINCH, &sa, NULL);
    }
    struct termios t = saved;
    cfmakeraw(&t);
    t.c_lflag |= ISIG; /* Ctrl-C: SIGINT, sent as INTR */
    t.c_cc[VQUIT] = _POSIX_VDISABLE;
    t.c_cc[VSUSP] = _POSIX_VDISABLE;
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) != 0)
        return false;
    raw_on = 1;
    return true;
}

bool attach_term_resized(char *buf, size_t n)
{
    if (!resized)
        return false;
    resized = 0;
    int rows, cols;
    size(&rows, &cols);
    snprintf(buf, n, "%d %d", rows, cols);
    return true;
}
