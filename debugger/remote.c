/*
 * remote.c — the front end of an attached session (docs/attach.md): the
 * connection a listening run handed to dbg_plugin_attach (attach.c).
 *
 * Output goes out as OUT frames (dbg_out_stream is a stream whose writes
 * become frames, a line at a time), a stop as its `stopped:` line in a
 * STOP frame after the report, and a command line is asked for with a
 * PROMPT frame and comes back as a LINE. A reader thread takes every frame
 * the client sends: LINEs wait in a queue for read_line, INTR (Ctrl-C) sets
 * the flag SIGINT sets in a launched session, and BYE or a lost or
 * malformed connection marks the session gone: a prompt returns at once,
 * and the session detaches at the next op or step boundary
 * (dbg_remote_gone).
 *
 * For `tdbg attach --tui` the TUI runs here, in the run, on two pipes
 * (dbg_remote_term_open): the reader writes the KEYS the client sends
 * into one, a forwarder thread sends what the TUI draws on the other as
 * TERM frames, and a RESIZE calls the front end's resize. Frames go out
 * under one lock (send_frame): the training thread and the forwarder
 * both send.
 */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LINE_MAX_BYTES 4096 /* a LINE longer than this is malformed */
#define QUEUE_MAX 64        /* LINEs waiting; more is a client out of step: malformed */
#define FRAME_MS 10000      /* a frame begun must be whole within this */

static struct {
    int fd;                  /* -1: no session */
    FILE *out;               /* dbg_out_stream while attached */
    pthread_t reader;
    pthread_mutex_t send_mu; /* one frame at a time on fd */
    pthread_mutex_t mu;      /* the fields below */
    pthread_cond_t cv;
    bool prompting;          /* a PROMPT waits for its LINE */
    char *queue[QUEUE_MAX];
    int head, n;
    char why[160];           /* why the session is gone */
    /* the TUI's terminal (dbg_remote_term_open) */
    int keys_w;              /* KEYS go in here (non-blocking); -1 none */
    int screen_r;            /* the forwarder reads the screen here; -1 none */
    pthread_t forwarder;
    void (*resize)(int rows, int cols);
} R = { .fd = -1, .keys_w = -1, .screen_r = -1, .send_mu = PTHREAD_MUTEX_INITIALIZER,
        .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static atomic_bool gone;     /* BYE, closed, malformed: tested at every op while attached */

bool dbg_remote_on(void) { return R.fd >= 0; }

const char *dbg_remote_gone(void)
{
    return atomic_load_explicit(&gone, memory_order_acquire) ? R.why : NULL; /* why is written before */
}

/* The session is over from the client's side; why says how (under R.mu). */
static void mark_gone_locked(const char *fmt, const char *detail)
{
    if (!atomic_load(&gone))
        snprintf(R.why, sizeof R.why, fmt, detail);
    atomic_store(&gone, true);
    pthread_cond_broadcast(&R.cv);
}

static int send_frame(int type, const void *payload, size_t n)
{
    pthread_mutex_lock(&R.send_mu);
    int rc = te_wire_send(R.fd, type, payload, n);
    pthread_mutex_unlock(&R.send_mu);
    return rc;
}

/* Typed keys for the TUI. A full pipe (the TUI busy, a huge paste) drops
 * them rather than stall the reader. */
static void keys_in(const char *buf, size_t len)
{
    while (R.keys_w >= 0 && len) {
        ssize_t k = write(R.keys_w, buf, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        buf += k;
        len -= (size_t)k;
    }
}

/* "ROWS COLS": the client's terminal changed size. false: malformed. */
static bool resize_in(const char *buf)
{
    int rows, cols, used = 0;
    if (sscanf(buf, "%d %d%n", &rows, &cols, &used) != 2 || buf[used] || rows < 1 || cols < 1)
        return false;
    if (R.resize)
        R.resize(rows < DBG_TERM_MAX ? rows : DBG_TERM_MAX, cols < DBG_TERM_MAX ? cols : DBG_TERM_MAX);
    return true;
}

static void *reader(void *arg)
{
    (void)arg;
    char *buf = malloc(LINE_MAX_BYTES + 1);
    for (;;) {
        struct pollfd pf = { .fd = R.fd, .events = POLLIN };
        int r = poll(&pf, 1, -1);
        if (r < 0 && errno == EINTR)
            continue;
        int type = 0;
        size_t len = 0;
        te_wire_status st = r < 0 || !buf ? TE_WIRE_ERROR : te_wire_recv(R.fd, &type, buf, LINE_MAX_BYTES + 1, &len, FRAME_MS);
        pthread_mutex_lock(&R.mu);
        if (st == TE_WIRE_CLOSED) {
            mark_gone_locked("the front end closed the connection%s", "");
        } else if (st != TE_WIRE_FRAME) {
            mark_gone_locked("a malformed message from the front end: %s", buf ? te_error() : "out of memory");
        } else if (type == TE_WIRE_INTR) {
            if (!R.prompting) /* Ctrl-C at a prompt is not a pause of the next `continue` */
                dbg_interrupted = 1;
        } else if (type == TE_WIRE_KEYS && R.keys_w >= 0) {
            keys_in(buf, len);
        } else if (type == TE_WIRE_RESIZE && R.keys_w >= 0) {
            if (!resize_in(buf))
                mark_gone_locked("a malformed message from the front end: resize \"%.40s\"", buf);
        } else if (type == TE_WIRE_BYE) {
            mark_gone_locked("detached%s", "");
        } else if (type == TE_WIRE_LINE && R.n < QUEUE_MAX) {
            char *l = strdup(buf);
            if (l) {
                R.queue[(R.head + R.n++) % QUEUE_MAX] = l;
                pthread_cond_broadcast(&R.cv);
            }
        } else {
            mark_gone_locked("a message out of place from the front end: %s",
                             type == TE_WIRE_LINE ? "too many lines ahead of the prompts" : te_wire_type_name(type));
        }
        bool stop = atomic_load(&gone);
        if (stop && R.keys_w >= 0) { /* the TUI reads the end of its keys: nobody to ask */
            close(R.keys_w);
            R.keys_w = -1;
        }
        pthread_mutex_unlock(&R.mu);
        if (stop)
            break;
    }
    free(buf);
    return NULL;
}

/* What the TUI draws, to the client as TERM frames, until every copy of
 * the screen pipe's writing end is closed. A client gone: read on and
 * drop, so that drawing never blocks training. */
static void *forward(void *arg)
{
    (void)arg;
    char buf[16384];
    bool lost = false;
    for (;;) {
        ssize_t k = read(R.screen_r, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        if (!lost && send_frame(TE_WIRE_TERM, buf, (size_t)k) != 0)
            lost = true; /* the reader sees the connection go */
    }
    return NULL;
}

/* ---- output ------------------------------------------------------------------- */

static ssize_t out_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    for (size_t done = 0; done < n;) {
        size_t k = n - done < TE_WIRE_MAX ? n - done : TE_WIRE_MAX;
        if (send_frame(TE_WIRE_OUT, buf + done, k) != 0)
            break; /* a lost client: the reader sees it, the session detaches */
        done += k;
    }
    return (ssize_t)n;
}

/* ---- the front end -------------------------------------------------------------- */

static char *remote_read_line(const char *prompt)
{
    fflush(R.out);
    pthread_mutex_lock(&R.mu);
    R.prompting = true;
    pthread_mutex_unlock(&R.mu);
    if (send_frame(TE_WIRE_PROMPT, prompt, strlen(prompt)) != 0) {
        pthread_mutex_lock(&R.mu);
        mark_gone_locked("the connection to the front end broke: %s", strerror(errno));
        pthread_mutex_unlock(&R.mu);
    }
    pthread_mutex_lock(&R.mu);
    while (!R.n && !atomic_load(&gone))
        pthread_cond_wait(&R.cv, &R.mu);
    char *l = NULL;
    if (!atomic_load(&gone)) {
        l = R.queue[R.head];
        R.head = (R.head + 1) % QUEUE_MAX;
        R.n--;
    }
    R.prompting = false;
    pthread_mutex_unlock(&R.mu);
    return l;
}

static void remote_show_stop(const dbg_stop *s)
{
    char line[DBG_STOP_LINE_MAX + 32];
    dbg_stop_line(s, line, DBG_STOP_LINE_MAX);
    if (s->rec) /* for a job's front end: which rank's stop came first in the step */
        snprintf(line + strlen(line), sizeof line - strlen(line), " exec=%d", s->rec->exec_index);
    fflush(R.out);
    send_frame(TE_WIRE_STOP, line, strlen(line));
}

const dbg_frontend dbg_frontend_remote = { .name = "remote", .read_line = remote_read_line,
                                           .show_stop = remote_show_stop };

/* ---- the session's life ------------------------------------------------------------ */

/* The reader and the forwarder take no signal of the program's. */
static int start_thread(pthread_t *t, void *(*fn)(void *))
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(t, NULL, fn, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

bool dbg_remote_open(int fd, char *why, size_t n)
{
    static const cookie_io_functions_t io = { .write = out_write };
    atomic_store(&gone, false);
    R.why[0] = '\0';
    R.fd = fd;
    R.out = fopencookie(NULL, "w", io);
    if (!R.out || setvbuf(R.out, NULL, _IOLBF, 0) != 0) {
        snprintf(why, n, "cannot make the output stream: %s", strerror(errno));
        if (R.out)
            fclose(R.out);
        R.out = NULL;
        R.fd = -1;
        return false;
    }
    int rc = start_thread(&R.reader, reader);
    if (rc != 0) {
        snprintf(why, n, "cannot start the reader thread: %s", strerror(rc));
        fclose(R.out);
        R.out = NULL;
        R.fd = -1;
        return false;
    }
    dbg_out_stream = R.out;
    return true;
}

bool dbg_remote_term_open(dbg_term *t, void (*resize)(int rows, int cols), char *why, size_t n)
{
    int keys[2] = { -1, -1 }, screen[2] = { -1, -1 };
    if (pipe2(keys, O_CLOEXEC) != 0 || pipe2(screen, O_CLOEXEC) != 0) {
        snprintf(why, n, "cannot make the terminal's pipes: %s", strerror(errno));
        if (keys[0] >= 0)
            close(keys[0]), close(keys[1]);
        return false;
    }
    fcntl(keys[1], F_SETFL, O_NONBLOCK);
    R.screen_r = screen[0];
    int rc = start_thread(&R.forwarder, forward);
    if (rc != 0) {
        snprintf(why, n, "cannot start the terminal's forwarder: %s", strerror(rc));
        close(keys[0]), close(keys[1]), close(screen[0]), close(screen[1]);
        R.screen_r = -1;
        return false;
    }
    pthread_mutex_lock(&R.mu);
    R.resize = resize;
    R.keys_w = keys[1];
    pthread_mutex_unlock(&R.mu);
    t->in_fd = keys[0];
    t->out_fd = screen[1];
    return true;
}

void dbg_remote_term_close(void)
{
    if (R.screen_r < 0)
        return;
    pthread_join(R.forwarder, NULL); /* the front end closed its copy of the screen: the last bytes are out */
    close(R.screen_r);
    R.screen_r = -1;
    pthread_mutex_lock(&R.mu);
    R.resize = NULL;
    if (R.keys_w >= 0)
        close(R.keys_w);
    R.keys_w = -1;
    pthread_mutex_unlock(&R.mu);
}

void dbg_remote_close(const char *why)
{
    if (R.fd < 0)
        return;
    dbg_remote_term_close();
    if (dbg_out_stream == R.out)
        dbg_out_stream = NULL;
    fclose(R.out); /* what it holds goes out first */
    R.out = NULL;
    send_frame(TE_WIRE_END, why, strlen(why)); /* EPIPE when the client is gone: nothing to tell */
    shutdown(R.fd, SHUT_RDWR); /* the reader's poll wakes up to a closed connection */
    pthread_join(R.reader, NULL);
    close(R.fd);
    R.fd = -1;
    for (; R.n; R.n--, R.head = (R.head + 1) % QUEUE_MAX)
        free(R.queue[R.head]);
    R.head = 0;
    R.prompting = false;
    atomic_store(&gone, false);
    te_listen_detached();
}
