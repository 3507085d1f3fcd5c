/*
 * capture.c — what reaches the output pane. The program's stdout and
 * stderr become pipes (dup2), so nothing it prints tears the screen; a
 * reader thread appends what arrives to the pane's lines and passes it on
 * to the original file when that was not the terminal (`tdbg --tui --
 * ./train > log` keeps the log). The debugger's own output (dbg_out) is a
 * cookie stream that, before adding its text, reads what the program
 * wrote before it: the report of a stop comes after the step's last line.
 */
#include "crash.h"
#include "tui_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

static int saved_out = -1, saved_err = -1; /* fds 1 and 2 as they were */
static bool tee_out, tee_err;              /* they were not the terminal: copy on */
static int rd_out = -1, rd_err = -1;       /* the pipes' reading ends, non-blocking */
static bool eof_out, eof_err;
static int wake[2] = { -1, -1 };           /* tells the reader to stop */
static pthread_t reader;
static bool reader_on;
static atomic_bool fresh;
static FILE *dbg_stream;

static void write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

/* Reads what one pipe holds; sets *eof at its end. Caller holds the lock. */
static void take(int fd, bool *eof, tui_source src, int tee_fd)
{
    char buf[4096];
    while (!*eof) {
        ssize_t k = read(fd, buf, sizeof buf);
        if (k > 0) {
            tui_out_add(src, buf, (size_t)k);
            if (tee_fd >= 0)
                write_all(tee_fd, buf, (size_t)k);
            atomic_store(&fresh, true);
        } else if (k == 0) {
            *eof = true;
        } else if (errno != EINTR) {
            return; /* EAGAIN: empty for now */
        }
    }
}

static void take_all(void)
{
    if (rd_out >= 0)
        take(rd_out, &eof_out, TUI_SRC_STDOUT, tee_out ? saved_out : -1);
    if (rd_err >= 0)
        take(rd_err, &eof_err, TUI_SRC_STDERR, tee_err ? saved_err : -1);
}

static void *read_loop(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the training thread's */
    while (!(eof_out && eof_err)) {
        struct pollfd p[3] = { { eof_out ? -1 : rd_out, POLLIN, 0 },
                               { eof_err ? -1 : rd_err, POLLIN, 0 },
                               { wake[0], POLLIN, 0 } };
        if (poll(p, 3, -1) < 0)
            continue;
        if (p[2].revents)
            break;
        tui_out_lock();
        take_all();
        tui_out_unlock();
    }
    return NULL;
}

static ssize_t dbg_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    tui_out_lock();
    take_all(); /* the program's output written before this comes first */
    tui_out_add(TUI_SRC_DBG, buf, n);
    tui_out_unlock();
    atomic_store(&fresh, true);
    return (ssize_t)n;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static FILE *prev_stream; /* dbg_out_stream before: the attached session's OUT frames */

bool tui_capture_start(bool tee, char *why, size_t n)
{
    prev_stream = dbg_out_stream;
    int po[2] = { -1, -1 }, pe[2] = { -1, -1 };
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0 || pipe2(wake, O_CLOEXEC) != 0) {
        snprintf(why, n, "cannot make pipes for the program's output: %s", strerror(errno));
        close_fd(&po[0]), close_fd(&po[1]), close_fd(&pe[0]), close_fd(&pe[1]);
        close_fd(&wake[0]), close_fd(&wake[1]);
        return false;
    }
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    fflush(stdout);
    fflush(stderr);
    saved_out = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    saved_err = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    tee_out = saved_out >= 0 && (tee || !isatty(saved_out));
    tee_err = saved_err >= 0 && (tee || !isatty(saved_err));
    /* fds 1 and 2 are the writing ends now (children inherit them too) */
    dup2(po[1], STDOUT_FILENO);
    dup2(pe[1], STDERR_FILENO);
    close(po[1]);
    close(pe[1]);
    rd_out = po[0];
    rd_err = pe[0];
    eof_out = eof_err = false;
    dbg_stream = fopencookie(NULL, "w", (cookie_io_functions_t){ .write = dbg_write });
    if (dbg_stream)
        setvbuf(dbg_stream, NULL, _IONBF, 0); /* in order with the program's lines */
    reader_on = pthread_create(&reader, NULL, read_loop, NULL) == 0;
    if (!dbg_stream || !reader_on) {
        snprintf(why, n, "cannot capture the program's output");
        tui_capture_stop();
        return false;
    }
    dbg_out_stream = dbg_stream;
    dbg_crash_set_fd(saved_err); /* a crash report goes where stderr went */
    return true;
}

void tui_capture_stop(void)
{
    if (saved_out < 0 && saved_err < 0)
        return;
    dbg_out_stream = prev_stream;
    prev_stream = NULL;
    dbg_crash_set_fd(-1);
    fflush(stdout);
    fflush(stderr);
    /* the writing ends go with these (unless a child of the program holds one) */
    if (saved_out >= 0)
        dup2(saved_out, STDOUT_FILENO);
    if (saved_err >= 0)
        dup2(saved_err, STDERR_FILENO);
    if (reader_on) {
        write_all(wake[1], "x", 1);
        pthread_join(reader, NULL);
        reader_on = false;
    }
    tui_out_lock();
    take_all();
    tui_out_unlock();
    if (dbg_stream)
        fclose(dbg_stream);
    dbg_stream = NULL;
    close_fd(&rd_out), close_fd(&rd_err), close_fd(&saved_out), close_fd(&saved_err);
    close_fd(&wake[0]), close_fd(&wake[1]);
}

bool tui_capture_fresh(void) { return atomic_exchange(&fresh, false); }

void tui_capture_crash_copy(int fd)
{
    char buf[4096];
    int from[2] = { rd_out, rd_err };
    for (int i = 0; i < 2; i++)
        for (int rounds = 0; from[i] >= 0 && rounds < 64; rounds++) {
            ssize_t k = read(from[i], buf, sizeof buf);
            if (k <= 0)
                break;
            write_all(fd, buf, (size_t)k);
        }
}
