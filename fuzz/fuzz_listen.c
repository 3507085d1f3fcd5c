/* fuzz_listen.c — the first bytes a client sends to a listening run
 * (engine/listen.c's checks, wire.c's frames: HELLO, AUTH, anything): the
 * run refuses them or hands the connection over, never crashes or hangs,
 * and keeps listening: after every input, a well-formed HELLO still
 * reaches the attach handler at the next step. */
#include "fuzz.h"
#include "te.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int handed; /* connections the handler got */

/* The attach handler: drains what the client sent (frames or not) and
 * ends the session, as a debugger that detaches at once would. */
static void handler(int fd, void *user)
{
    (void)user;
    char buf[256];
    size_t len;
    int type;
    while (te_wire_recv(fd, &type, buf, sizeof buf, &len, 200) == TE_WIRE_FRAME)
        ;
    close(fd);
    handed++;
    te_listen_detached();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("XDG_RUNTIME_DIR", fuzz_tmpdir(), 1);
    setenv("TDBG_LISTEN", "1", 1);
    if (te_init(&(te_config){ .seed = 1, .threads = 1 }) != TE_OK)
        abort();
    te_listen_info i;
    te_listen_info_get(&i);
    if (!i.listening)
        abort();
    te_listen_set_handler(handler, NULL);
    return 0;
}

static int dial(void)
{
    te_listen_info i;
    te_listen_info_get(&i);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    if (strncmp(i.addr, "unix:", 5) != 0 || strlen(i.addr + 5) >= sizeof a.sun_path)
        abort();
    strcpy(a.sun_path, i.addr + 5);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        abort(); /* the run stopped listening: the bug this target looks for */
    return fd;
}

/* Sends data, says it is all, and runs steps until the run has closed the
 * connection (refused, or handed over and detached). At most 10 s. */
static void session(const uint8_t *data, size_t size)
{
    int fd = dial();
    for (size_t at = 0; at < size;) {
        ssize_t w = send(fd, data + at, size - at, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* refused before the end of it */
        at += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    for (int i = 0; i < 1000; i++) {
        te_step_begin();
        te_step_end();
        struct pollfd p = { .fd = fd, .events = POLLIN };
        char buf[4096];
        if (poll(&p, 1, 10) == 1 && recv(fd, buf, sizeof buf, 0) <= 0)
            break;
        if (i == 999)
            abort(); /* a connection the run never ends: a hang */
    }
    close(fd);
    /* te_listen_detached() came from the handler, or the refusal freed
     * the slot: wait for the listener to see it before the next input */
    for (int i = 0; i < 1000; i++) {
        te_listen_info li;
        te_listen_info_get(&li);
        if (!li.attached)
            return;
        struct timespec t = { 0, 5000000 };
        nanosleep(&t, NULL);
    }
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    session(data, size);
    /* the run still takes a good client */
    static const char hello[] = "tdbg-attach 1 pid=1 mode=batch";
    uint8_t frame[5 + sizeof hello - 1];
    const uint32_t n = sizeof hello - 1;
    frame[0] = (uint8_t)(n >> 24), frame[1] = (uint8_t)(n >> 16), frame[2] = (uint8_t)(n >> 8), frame[3] = (uint8_t)n;
    frame[4] = TE_WIRE_HELLO;
    memcpy(frame + 5, hello, n);
    const int before = handed;
    session(frame, sizeof frame);
    if (handed != before + 1)
        abort();
    return 0;
}
