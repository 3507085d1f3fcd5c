/*
 * wire.c — the frames of an attached session (docs/attach.md "Protocol"):
 * a 4-byte big-endian payload length, a type byte, the payload. Shared by
 * the run (listen.c, the debugger's remote front end) and the client.
 *
 * The reader checks the length and the type before it reads a payload, so
 * a peer cannot make it allocate or wait for more than the caller allows.
 */
#include "te_internal.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define HEADER 5

static const char *const type_names[TE_WIRE_TYPE_END] = {
    [TE_WIRE_HELLO] = "hello", [TE_WIRE_AUTH] = "auth",       [TE_WIRE_LINE] = "line",
    [TE_WIRE_INTR] = "intr",   [TE_WIRE_BYE] = "bye",         [TE_WIRE_WELCOME] = "welcome",
    [TE_WIRE_REFUSED] = "refused", [TE_WIRE_OUT] = "out",     [TE_WIRE_PROMPT] = "prompt",
    [TE_WIRE_STOP] = "stop",   [TE_WIRE_END] = "end",         [TE_WIRE_TERM] = "term",
    [TE_WIRE_KEYS] = "keys",   [TE_WIRE_RESIZE] = "resize",
};

static bool known(int type) { return type > 0 && type < TE_WIRE_TYPE_END; }

const char *te_wire_type_name(int type) { return known(type) ? type_names[type] : "?"; }

const char *te_wire_status_str(te_wire_status s)
{
    switch (s) {
    case TE_WIRE_FRAME: return "frame";
    case TE_WIRE_CLOSED: return "closed";
    case TE_WIRE_TIMEOUT: return "timeout";
    case TE_WIRE_MALFORMED: return "malformed";
    case TE_WIRE_ERROR: return "error";
    }
    return "?";
}

int te_wire_send(int fd, int type, const void *payload, size_t n)
{
    if (!known(type) || n > TE_WIRE_MAX) {
        te_set_error(TE_ERR_ARG, "te_wire_send: %s", !known(type) ? "unknown frame type" : "payload over TE_WIRE_MAX");
        errno = EINVAL;
        return -1;
    }
    unsigned char h[HEADER] = { (unsigned char)(n >> 24), (unsigned char)(n >> 16), (unsigned char)(n >> 8),
                                (unsigned char)n, (unsigned char)type };
    struct iovec iov[2] = { { h, HEADER }, { (void *)payload, n } };
    struct msghdr m = { .msg_iov = iov, .msg_iovlen = n ? 2 : 1 };
    while (m.msg_iovlen) {
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            int e = errno;
            te_set_error(TE_ERR_IO, "te_wire_send(%s): %s", type_names[type], strerror(e));
            errno = e;
            return -1;
        }
        /* A partial write: step over what went. */
        size_t done = (size_t)w;
        while (m.msg_iovlen && done >= m.msg_iov[0].iov_len) {
            done -= m.msg_iov[0].iov_len;
            m.msg_iov++;
            m.msg_iovlen--;
        }
        if (m.msg_iovlen) {
            m.msg_iov[0].iov_base = (char *)m.msg_iov[0].iov_base + done;
            m.msg_iov[0].iov_len -= done;
        }
    }
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads exactly n bytes before the deadline (-1: none). Returns
 * TE_WIRE_FRAME when they came, else what stopped it; *got says how many. */
static te_wire_status read_all(int fd, unsigned char *p, size_t n, int64_t deadline, size_t *got)
{
    *got = 0;
    while (*got < n) {
        int wait = -1;
        if (deadline >= 0) {
            int64_t left = deadline - now_ms();
            wait = left > 0 ? (int)(left < INT32_MAX ? left : INT32_MAX) : 0;
        }
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        int r = poll(&pf, 1, wait);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return TE_WIRE_ERROR;
        if (r == 0)
            return TE_WIRE_TIMEOUT;
        ssize_t k = recv(fd, p + *got, n - *got, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (k < 0)
            return errno == ECONNRESET ? TE_WIRE_CLOSED : TE_WIRE_ERROR;
        if (k == 0)
            return TE_WIRE_CLOSED;
        *got += (size_t)k;
    }
    return TE_WIRE_FRAME;
}

te_wire_status te_wire_recv(int fd, int *type, char *buf, size_t cap, size_t *len, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    unsigned char h[HEADER];
    size_t got;
    te_wire_status st = read_all(fd, h, HEADER, deadline, &got);
    if (st != TE_WIRE_FRAME) {
        int e = errno;
        if (got && st != TE_WIRE_ERROR) {
            te_set_error(TE_ERR_IO, "malformed frame: cut short after %zu of %d header bytes (%s)", got, HEADER,
                         st == TE_WIRE_TIMEOUT ? "too late" : "connection closed");
            return TE_WIRE_MALFORMED;
        }
        if (st == TE_WIRE_ERROR)
            te_set_error(TE_ERR_IO, "reading a frame: %s", strerror(e));
        else
            te_set_error(TE_ERR_IO, "%s", st == TE_WIRE_TIMEOUT ? "no frame within the timeout" : "connection closed");
        errno = e;
        return st;
    }
    uint32_t n = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    if (!known(h[4])) {
        te_set_error(TE_ERR_IO, "malformed frame: unknown type %u", h[4]);
        return TE_WIRE_MALFORMED;
    }
    if (n > TE_WIRE_MAX || cap == 0 || n > cap - 1) {
        te_set_error(TE_ERR_IO, "malformed frame: %s of %lu bytes is too long (at most %lu)", type_names[h[4]],
                     (unsigned long)n, (unsigned long)(cap && cap - 1 < TE_WIRE_MAX ? cap - 1 : TE_WIRE_MAX));
        return TE_WIRE_MALFORMED;
    }
    st = read_all(fd, (unsigned char *)buf, n, deadline, &got);
    if (st == TE_WIRE_ERROR) {
        te_set_error(TE_ERR_IO, "reading a frame: %s", strerror(errno));
        return st;
    }
    if (st != TE_WIRE_FRAME) {
        te_set_error(TE_ERR_IO, "malformed frame: %s cut short after %zu of %lu payload bytes (%s)",
                     type_names[h[4]], got, (unsigned long)n,
                     st == TE_WIRE_TIMEOUT ? "too late" : "connection closed");
        return TE_WIRE_MALFORMED;
    }
    buf[n] = '\0';
    *type = h[4];
    *len = n;
    return TE_WIRE_FRAME;
}
