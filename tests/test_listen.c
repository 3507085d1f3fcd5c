/* test_listen.c — a run that a front end attaches to, the run's side
 * (engine/wire.c, engine/listen.c): the frames and their malformed kinds;
 * TDBG_LISTEN's values; the private directory and the socket's modes; the
 * peer's uid (a real other user when root); the TCP token and its three
 * strikes; the second front end refused naming the first; the hand-off at
 * te_step_begin to a handler whose fd talks to the client; the debugger
 * module's entry looked up (missing, or present and declining); the
 * 5 s deadline; and many cycles leaving no descriptor or thread behind.
 * Every test runs under its own XDG_RUNTIME_DIR in /tmp. */
#include "suites.h"
#include "testutil.h"

#include "te_internal.h"

#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 5000

/* ---- the scene: a runtime dir, stderr in a file, the handler ------------- */

static char xdg[64], err_path[96];
static int saved_err = -1;

/* A fresh XDG_RUNTIME_DIR, stderr into a file, no TDBG_LISTEN yet. */
static void scene_begin(void)
{
    snprintf(xdg, sizeof xdg, "/tmp/tdbg-listen-XXXXXX");
    ck_assert(mkdtemp(xdg) != NULL);
    ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", xdg, 1), 0);
    unsetenv("TDBG_LISTEN");
    unsetenv("TDBG_PLUGIN");
    snprintf(err_path, sizeof err_path, "%s.stderr", xdg);
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert(fd >= 0);
    fflush(stderr);
    saved_err = dup(2);
    ck_assert(saved_err >= 0);
    ck_assert(dup2(fd, 2) == 2);
    close(fd);
    te_listen_set_handler(NULL, NULL);
}

static void scene_end(void)
{
    te_shutdown();
    te_listen_set_handler(NULL, NULL);
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    saved_err = -1;
    tu_scratch_remove(xdg);
    unlink(err_path);
    unsetenv("TDBG_LISTEN");
    unsetenv("TDBG_PLUGIN");
}

/* What the run wrote to stderr so far. */
static const char *err_text(void)
{
    static char buf[16384];
    FILE *f = fopen(err_path, "r");
    ck_assert(f != NULL);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void listen_on(const char *value)
{
    ck_assert_int_eq(setenv("TDBG_LISTEN", value, 1), 0);
    ck_assert_int_eq(te_init(&(te_config){ .seed = 1, .threads = 1 }), TE_OK);
}

/* The handler the tests install: answers the LINE the client sent ahead
 * with an OUT, then closes and detaches, or keeps the fd (keep). */
typedef struct {
    int calls;
    int fd;
    int64_t step;
    bool keep;
    char line[256];
} handler_state;
static handler_state H;

static void handler(int fd, void *user)
{
    ck_assert_ptr_eq(user, &H);
    H.calls++;
    H.fd = fd;
    H.step = te_step();
    if (H.keep)
        return;
    int type = 0;
    size_t len = 0;
    H.line[0] = '\0';
    if (te_wire_recv(fd, &type, H.line, sizeof H.line, &len, WAIT_MS) == TE_WIRE_FRAME && type == TE_WIRE_LINE) {
        char out[300];
        int n = snprintf(out, sizeof out, "echo: %s", H.line);
        te_wire_send(fd, TE_WIRE_OUT, out, (size_t)n);
    }
    close(fd);
    te_listen_detached();
}

/* Steps until the handler has run `calls` times (false after WAIT_MS). */
static bool pump(int calls)
{
    for (int i = 0; i < WAIT_MS; i++) {
        te_step_begin();
        te_step_end();
        if (H.calls >= calls)
            return true;
        usleep(1000);
    }
    return false;
}

/* ---- clients ------------------------------------------------------------- */

/* The socket's path of in.addr ("unix:PATH") into a. */
static void sun_path_of(const te_listen_info *in, struct sockaddr_un *a)
{
    size_t n = strlen(in->addr + 5);
    ck_assert(n < sizeof a->sun_path);
    memcpy(a->sun_path, in->addr + 5, n + 1);
}

static int connect_unix(void)
{
    te_listen_info in;
    te_listen_info_get(&in);
    ck_assert_msg(strncmp(in.addr, "unix:", 5) == 0, "not on a Unix socket: \"%s\"", in.addr);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    sun_path_of(&in, &a);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert(fd >= 0);
    ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect %s: %s", a.sun_path, strerror(errno));
    return fd;
}

static int tcp_port(void)
{
    te_listen_info in;
    te_listen_info_get(&in);
    const char *colon = strrchr(in.addr, ':');
    ck_assert_msg(strncmp(in.addr, "tcp:127.0.0.1:", 14) == 0 && colon, "not on TCP: \"%s\"", in.addr);
    return atoi(colon + 1);
}

/* A TCP connection to port; -1 with errno when refused. */
static int connect_tcp(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert(fd >= 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static void send_ok(int fd, int type, const char *text)
{
    ck_assert_msg(te_wire_send(fd, type, text, text ? strlen(text) : 0) == 0, "te_wire_send(%s): %s",
                  te_wire_type_name(type), te_error());
}

static void hello(int fd, int pid)
{
    char h[64];
    snprintf(h, sizeof h, "tdbg-attach 1 pid=%d mode=cli", pid);
    send_ok(fd, TE_WIRE_HELLO, h);
}

/* The next frame, which must be of type; its text (static). */
static const char *expect(int fd, int type)
{
    static char buf[4096];
    int t = 0;
    size_t len = 0;
    te_wire_status st = te_wire_recv(fd, &t, buf, sizeof buf, &len, WAIT_MS);
    ck_assert_msg(st == TE_WIRE_FRAME, "no frame: %s (%s)", te_wire_status_str(st), te_error());
    ck_assert_msg(t == type, "a %s frame (\"%s\"), expected %s", te_wire_type_name(t), buf, te_wire_type_name(type));
    return buf;
}

static void expect_closed(int fd)
{
    int t;
    size_t len;
    char buf[64];
    te_wire_status st = te_wire_recv(fd, &t, buf, sizeof buf, &len, WAIT_MS);
    ck_assert_msg(st == TE_WIRE_CLOSED, "not closed: %s (a %s frame?)", te_wire_status_str(st),
                  st == TE_WIRE_FRAME ? te_wire_type_name(t) : "-");
}

/* The run refuses fd with a message holding `why`, then closes it. */
static void expect_refused(int fd, const char *why)
{
    const char *got = expect(fd, TE_WIRE_REFUSED);
    ck_assert_msg(strstr(got, why), "refused with \"%s\", expected \"%s\"", got, why);
    expect_closed(fd);
    close(fd);
}

/* Five raw bytes of a header: length n, type t. */
static void raw_header(int fd, uint32_t n, unsigned char t)
{
    unsigned char h[5] = { (unsigned char)(n >> 24), (unsigned char)(n >> 16), (unsigned char)(n >> 8),
                           (unsigned char)n, t };
    ck_assert_int_eq(write(fd, h, 5), 5);
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    ck_assert(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* opendir's own descriptor, for /proc/self/fd */
}

/* ---- the wire -------------------------------------------------------------- */

typedef struct {
    int fd;
    size_t n;
} big_send;

static void *send_big(void *arg)
{
    big_send *b = arg;
    char *p = malloc(b->n);
    for (size_t i = 0; i < b->n; i++)
        p[i] = (char)('a' + i % 26);
    intptr_t rc = te_wire_send(b->fd, TE_WIRE_OUT, p, b->n);
    free(p);
    return (void *)rc;
}

START_TEST(test_wire_round_trip)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    char buf[128];
    int type;
    size_t len;
    for (int t = TE_WIRE_HELLO; t < TE_WIRE_TYPE_END; t++) {
        char text[64];
        snprintf(text, sizeof text, t % 2 ? "frame %d: %s" : "", t, te_wire_type_name(t));
        send_ok(sv[0], t, text);
        ck_assert_int_eq(te_wire_recv(sv[1], &type, buf, sizeof buf, &len, WAIT_MS), TE_WIRE_FRAME);
        ck_assert_int_eq(type, t);
        ck_assert_uint_eq(len, strlen(text));
        ck_assert_str_eq(buf, text);
    }
    ck_assert_str_eq(te_wire_type_name(TE_WIRE_HELLO), "hello");
    ck_assert_str_eq(te_wire_type_name(TE_WIRE_END), "end");
    ck_assert_str_eq(te_wire_type_name(0), "?");

    /* The largest frame, from another thread (it outgrows the socket's buffer). */
    big_send b = { sv[0], TE_WIRE_MAX };
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, send_big, &b), 0);
    char *big = malloc(TE_WIRE_MAX + 1);
    ck_assert_int_eq(te_wire_recv(sv[1], &type, big, TE_WIRE_MAX + 1, &len, WAIT_MS), TE_WIRE_FRAME);
    void *rc;
    pthread_join(th, &rc);
    ck_assert_int_eq((intptr_t)rc, 0);
    ck_assert_int_eq(type, TE_WIRE_OUT);
    ck_assert_uint_eq(len, TE_WIRE_MAX);
    ck_assert_int_eq(big[0], 'a');
    ck_assert_int_eq(big[TE_WIRE_MAX - 1], 'a' + (TE_WIRE_MAX - 1) % 26);
    ck_assert_int_eq(big[TE_WIRE_MAX], '\0');
    free(big);

    /* What the sender refuses. */
    errno = 0;
    ck_assert_int_eq(te_wire_send(sv[0], 0, "x", 1), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(te_wire_send(sv[0], TE_WIRE_TYPE_END, "x", 1), -1);
    ck_assert_int_eq(te_wire_send(sv[0], TE_WIRE_OUT, "x", (size_t)TE_WIRE_MAX + 1), -1);
    ck_assert_int_eq(errno, EINVAL);

    /* Nothing sent: a timeout, after about the time asked. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(te_wire_recv(sv[1], &type, buf, sizeof buf, &len, 100), TE_WIRE_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    ck_assert_msg(ms >= 90 && ms < 2000, "a 100 ms timeout took %.0f ms", ms);

    /* A peer gone: CLOSED for the reader; EPIPE, not SIGPIPE, for the writer. */
    close(sv[0]);
    ck_assert_int_eq(te_wire_recv(sv[1], &type, buf, sizeof buf, &len, WAIT_MS), TE_WIRE_CLOSED);
    ck_assert_int_eq(te_wire_send(sv[1], TE_WIRE_OUT, "x", 1), -1);
    ck_assert_int_eq(errno, EPIPE);
    close(sv[1]);
}
END_TEST

/* One malformed frame written raw; the reader's status and message. */
static void malformed_case(const unsigned char *bytes, size_t n, bool hang_up, size_t cap, int timeout_ms,
                           const char *why)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ck_assert_int_eq(write(sv[0], bytes, n), (ssize_t)n);
    if (hang_up)
        close(sv[0]);
    char buf[64];
    int type = -1;
    size_t len = 0;
    te_wire_status st = te_wire_recv(sv[1], &type, buf, cap, &len, timeout_ms);
    ck_assert_msg(st == TE_WIRE_MALFORMED, "%s: status %s (%s)", why, te_wire_status_str(st), te_error());
    ck_assert_msg(strstr(te_error(), why), "the message \"%s\" lacks \"%s\"", te_error(), why);
    if (!hang_up)
        close(sv[0]);
    close(sv[1]);
}

START_TEST(test_wire_malformed)
{
    const unsigned char too_long[] = { 0x00, 0x10, 0x00, 0x01, TE_WIRE_LINE };      /* TE_WIRE_MAX + 1 */
    const unsigned char huge[] = { 0xff, 0xff, 0xff, 0xff, TE_WIRE_LINE };
    const unsigned char over_cap[] = { 0, 0, 0, 64, TE_WIRE_LINE, 'x' };             /* cap 64: 63 at most */
    const unsigned char type0[] = { 0, 0, 0, 1, 0, 'x' };
    const unsigned char type99[] = { 0, 0, 0, 1, 99, 'x' };
    const unsigned char half_header[] = { 0, 0, 0 };
    const unsigned char short_payload[] = { 0, 0, 0, 10, TE_WIRE_LINE, 'a', 'b', 'c', 'd' };
    malformed_case(too_long, sizeof too_long, false, 64, WAIT_MS, "line of 1048577 bytes is too long (at most 63)");
    malformed_case(huge, sizeof huge, false, TE_WIRE_MAX + 1, WAIT_MS, "line of 4294967295 bytes is too long (at most 1048576)");
    malformed_case(over_cap, sizeof over_cap, false, 64, WAIT_MS, "line of 64 bytes is too long (at most 63)");
    malformed_case(type0, sizeof type0, false, 64, WAIT_MS, "unknown type 0");
    malformed_case(type99, sizeof type99, false, 64, WAIT_MS, "unknown type 99");
    malformed_case(half_header, sizeof half_header, true, 64, WAIT_MS, "cut short after 3 of 5 header bytes (connection closed)");
    malformed_case(half_header, sizeof half_header, false, 64, 100, "cut short after 3 of 5 header bytes (too late)");
    malformed_case(short_payload, sizeof short_payload, true, 64, WAIT_MS,
                   "line cut short after 4 of 10 payload bytes (connection closed)");
}
END_TEST

/* ---- TDBG_LISTEN's values, the files -------------------------------------- */

START_TEST(test_unix_files)
{
    const char *values[] = { "1", "unix" };
    for (int v = 0; v < 2; v++) {
        scene_begin();
        listen_on(values[v]);
        te_listen_info in;
        te_listen_info_get(&in);
        char sock[128], dir[96], line[256];
        snprintf(dir, sizeof dir, "%s/tdbg", xdg);
        snprintf(sock, sizeof sock, "%s/%d.sock", dir, (int)getpid());
        ck_assert(in.listening);
        ck_assert(!in.attached);
        ck_assert_str_eq(in.addr + 5, sock);
        ck_assert_str_eq(in.token_file, "");
        struct stat st;
        ck_assert_int_eq(lstat(dir, &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
        ck_assert_uint_eq(st.st_mode & 07777, 0700);
        ck_assert_int_eq(lstat(sock, &st), 0);
        ck_assert(S_ISSOCK(st.st_mode));
        ck_assert_uint_eq(st.st_mode & 07777, 0600);
        snprintf(line, sizeof line, "tdbg: listening on unix:%s; attach with: tdbg attach %d\n", sock, (int)getpid());
        ck_assert_str_eq(err_text(), line);
        te_shutdown();
        ck_assert_int_eq(lstat(sock, &st), -1);
        te_listen_info_get(&in);
        ck_assert(!in.listening);
        ck_assert_str_eq(in.addr, "");
        scene_end();
    }
}
END_TEST

/* The run does not listen, says why, and trains on. */
static void not_listening(const char *value, const char *why)
{
    listen_on(value);
    te_listen_info in;
    te_listen_info_get(&in);
    ck_assert_msg(!in.listening, "TDBG_LISTEN=%s listens on %s", value, in.addr);
    ck_assert_msg(strstr(err_text(), why), "TDBG_LISTEN=%s: stderr \"%s\" lacks \"%s\"", value, err_text(), why);
    ck_assert(!strstr(err_text(), "tdbg: listening"));
    for (int i = 0; i < 3; i++) {
        te_step_begin();
        te_step_end();
    }
    ck_assert_int_eq(te_step(), 2);
}

START_TEST(test_bad_values)
{
    static const char *const cases[][2] = {
        { "yes", "tdbg: TDBG_LISTEN=yes is not understood: expected 1 or unix (a Unix socket), or tcp:127.0.0.1:PORT; not listening" },
        { "tcp:0.0.0.0:0", "TDBG_LISTEN=tcp:0.0.0.0:0: only a loopback address may listen" },
        { "tcp:192.168.1.5:9000", "TDBG_LISTEN=tcp:192.168.1.5:9000: only a loopback address may listen" },
        { "tcp:127.0.0.1:x", "TDBG_LISTEN=tcp:127.0.0.1:x: expected tcp:127.0.0.1:PORT (PORT 0 picks one)" },
        { "tcp:127.0.0.1:70000", "TDBG_LISTEN=tcp:127.0.0.1:70000: expected tcp:127.0.0.1:PORT" },
        { "tcp:", "TDBG_LISTEN=tcp:: expected tcp:127.0.0.1:PORT" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        scene_begin();
        not_listening(cases[i][0], cases[i][1]);
        scene_end();
    }
}
END_TEST

START_TEST(test_dir_refused)
{
    char dir[96], other[96];
    /* open to others */
    scene_begin();
    snprintf(dir, sizeof dir, "%s/tdbg", xdg);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(chmod(dir, 0755), 0);
    not_listening("1", "is open to other users (it must be mode 0700)");
    scene_end();
    /* a symbolic link to a private directory */
    scene_begin();
    snprintf(dir, sizeof dir, "%s/tdbg", xdg);
    snprintf(other, sizeof other, "%s/elsewhere", xdg);
    ck_assert_int_eq(mkdir(other, 0700), 0);
    ck_assert_int_eq(symlink(other, dir), 0);
    not_listening("1", "tdbg is a symbolic link");
    scene_end();
    /* a file */
    scene_begin();
    snprintf(dir, sizeof dir, "%s/tdbg", xdg);
    int fd = open(dir, O_CREAT | O_WRONLY, 0600);
    ck_assert(fd >= 0);
    close(fd);
    not_listening("1", "tdbg is not a directory");
    scene_end();
    /* another user's (when root can make one) */
    if (geteuid() == 0) {
        scene_begin();
        snprintf(dir, sizeof dir, "%s/tdbg", xdg);
        ck_assert_int_eq(mkdir(dir, 0700), 0);
        ck_assert_int_eq(chown(dir, 65534, 65534), 0);
        not_listening("1", "tdbg belongs to another user");
        scene_end();
    }
}
END_TEST

/* ---- who may attach ---------------------------------------------------------- */

START_TEST(test_peer_uid)
{
    char buf[64];
    ck_assert_ptr_null(te_listen_check_uid(1000, 1000, buf, sizeof buf));
    ck_assert_str_eq(te_listen_check_uid(65534, 1000, buf, sizeof buf), "another user (uid 65534)");
    ck_assert_str_eq(te_listen_check_uid(0, 1000, buf, sizeof buf), "another user (uid 0)");
    if (geteuid() != 0)
        return; /* no other user to be: the check itself is what ran */

    /* A real other user: the socket opened to it for this test only, so
     * that only the credentials stand in its way. */
    scene_begin();
    H = (handler_state){ 0 };
    te_listen_set_handler(handler, &H);
    listen_on("1");
    char dir[96];
    snprintf(dir, sizeof dir, "%s/tdbg", xdg);
    te_listen_info in;
    te_listen_info_get(&in);
    ck_assert_int_eq(chmod(xdg, 0711), 0);
    ck_assert_int_eq(chmod(dir, 0711), 0);
    ck_assert_int_eq(chmod(in.addr + 5, 0666), 0);
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t child = fork();
    ck_assert(child >= 0);
    if (child == 0) {
        close(pipefd[0]);
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(3);
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        sun_path_of(&in, &a);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
            _exit(4);
        te_wire_send(fd, TE_WIRE_HELLO, "tdbg-attach 1 pid=9 mode=cli", 28);
        char got[256];
        int type = 0;
        size_t len = 0;
        te_wire_status st = te_wire_recv(fd, &type, got, sizeof got, &len, WAIT_MS);
        if (st != TE_WIRE_FRAME)
            snprintf(got, sizeof got, "status %s", te_wire_status_str(st));
        ssize_t w = write(pipefd[1], got, strlen(got) + 1);
        _exit(w > 0 && type == TE_WIRE_REFUSED ? 0 : 5);
    }
    close(pipefd[1]);
    char got[256] = "";
    ssize_t r = read(pipefd[0], got, sizeof got - 1);
    close(pipefd[0]);
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the uid 65534 client ended with %d, read \"%s\"",
                  status, r > 0 ? got : "");
    ck_assert_str_eq(got, "another user (uid 65534)");
    ck_assert_msg(strstr(err_text(), "uid 65534): another user (uid 65534)\n"), "stderr: %s", err_text());
    ck_assert_int_eq(H.calls, 0);
    /* The run goes on, and its own user attaches. */
    int fd = connect_unix();
    hello(fd, 11);
    send_ok(fd, TE_WIRE_LINE, "info");
    ck_assert(pump(1));
    expect(fd, TE_WIRE_WELCOME);
    ck_assert_str_eq(expect(fd, TE_WIRE_OUT), "echo: info");
    close(fd);
    scene_end();
}
END_TEST

/* ---- the hand-off ------------------------------------------------------------ */

START_TEST(test_hand_off)
{
    scene_begin();
    H = (handler_state){ 0 };
    te_listen_set_handler(handler, &H);
    listen_on("1");
    for (int i = 0; i < 5; i++) {
        te_step_begin();
        te_step_end();
    }
    ck_assert_int_eq(H.calls, 0);
    int fd = connect_unix();
    hello(fd, 4242);
    send_ok(fd, TE_WIRE_LINE, "print fc1/linear:out0");
    ck_assert(pump(1));
    ck_assert_int_eq(H.calls, 1);
    ck_assert_str_eq(H.line, "print fc1/linear:out0");
    /* WELCOME names the run and the step the handler got it at. */
    char want[128];
    snprintf(want, sizeof want, "tdbg-run 1 pid=%d step=%lld program=", (int)getpid(), (long long)H.step);
    const char *w = expect(fd, TE_WIRE_WELCOME);
    ck_assert_msg(strncmp(w, want, strlen(want)) == 0 && strstr(w, "run_tests"), "WELCOME \"%s\"", w);
    ck_assert_int_ge(H.step, 5);
    ck_assert_str_eq(expect(fd, TE_WIRE_OUT), "echo: print fc1/linear:out0");
    expect_closed(fd);
    close(fd);
    te_listen_info in;
    te_listen_info_get(&in);
    ck_assert(in.listening);
    ck_assert(!in.attached);
    ck_assert_int_eq(in.peer_pid, 0);
    /* And again. */
    fd = connect_unix();
    hello(fd, 4243);
    send_ok(fd, TE_WIRE_LINE, "detach");
    ck_assert(pump(2));
    expect(fd, TE_WIRE_WELCOME);
    ck_assert_str_eq(expect(fd, TE_WIRE_OUT), "echo: detach");
    close(fd);
    scene_end();
}
END_TEST

START_TEST(test_second_front_end)
{
    scene_begin();
    H = (handler_state){ .keep = true };
    te_listen_set_handler(handler, &H);
    listen_on("1");
    time_t before = time(NULL);
    int a = connect_unix();
    hello(a, 4242);
    ck_assert(pump(1));
    te_listen_info in;
    te_listen_info_get(&in);
    ck_assert(in.attached);
    ck_assert_int_eq(in.peer_pid, 4242);
    ck_assert(in.since >= before && in.since <= time(NULL));
    int b = connect_unix();
    hello(b, 777);
    struct tm tm;
    localtime_r(&(time_t){ in.since }, &tm);
    char why[96];
    snprintf(why, sizeof why, "tdbg is attached already: pid 4242, since %02d:%02d:%02d", tm.tm_hour, tm.tm_min,
             tm.tm_sec);
    const char *got = expect(b, TE_WIRE_REFUSED);
    ck_assert_str_eq(got, why);
    expect_closed(b);
    close(b);
    ck_assert_msg(strstr(err_text(), why), "stderr: %s", err_text());
    ck_assert_int_eq(H.calls, 1);
    /* The first one still talks to the handler's fd. */
    expect(a, TE_WIRE_WELCOME);
    send_ok(H.fd, TE_WIRE_OUT, "still here");
    ck_assert_str_eq(expect(a, TE_WIRE_OUT), "still here");
    close(H.fd);
    close(a);
    te_listen_detached();
    /* Then a next one may. */
    int c = connect_unix();
    hello(c, 778);
    ck_assert(pump(2));
    te_listen_info_get(&in);
    ck_assert_int_eq(in.peer_pid, 778);
    close(H.fd);
    close(c);
    te_listen_detached();
    scene_end();
}
END_TEST

START_TEST(test_malformed_closes_connection)
{
    scene_begin();
    H = (handler_state){ 0 };
    te_listen_set_handler(handler, &H);
    listen_on("1");
    for (int i = 0; i < 2; i++) {
        te_step_begin();
        te_step_end();
    }
    int fd = connect_unix();
    raw_header(fd, 2u << 20, TE_WIRE_HELLO);
    expect_refused(fd, "expected HELLO first: malformed frame: hello of 2097152 bytes is too long (at most 512)");
    fd = connect_unix();
    raw_header(fd, 1, 77);
    expect_refused(fd, "expected HELLO first: malformed frame: unknown type 77");
    fd = connect_unix();
    send_ok(fd, TE_WIRE_LINE, "print x");
    expect_refused(fd, "expected HELLO first: line");
    fd = connect_unix();
    send_ok(fd, TE_WIRE_HELLO, "hello there");
    expect_refused(fd, "a HELLO tdbg does not know: \"hello there\"");
    fd = connect_unix();
    raw_header(fd, 10, TE_WIRE_HELLO);
    ck_assert_int_eq(write(fd, "tdbg", 4), 4);
    shutdown(fd, SHUT_WR);
    expect_refused(fd, "cut short after 4 of 10 payload bytes");
    ck_assert_msg(strstr(err_text(), "attach refused (unix:") && strstr(err_text(), "unknown type 77"), "stderr: %s",
                  err_text());
    /* The run trained on, and a good front end attaches. */
    int64_t s0 = te_step(); /* 1 */
    fd = connect_unix();
    hello(fd, 12);
    send_ok(fd, TE_WIRE_LINE, "continue");
    ck_assert(pump(1));
    ck_assert_int_gt(te_step(), s0);
    expect(fd, TE_WIRE_WELCOME);
    ck_assert_str_eq(expect(fd, TE_WIRE_OUT), "echo: continue");
    close(fd);
    scene_end();
}
END_TEST

START_TEST(test_auth_deadline)
{
    scene_begin();
    listen_on("1");
    int fd = connect_unix();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char got[128] = "";
    int type = 0;
    size_t len;
    te_wire_status st = te_wire_recv(fd, &type, got, sizeof got, &len, 3 * WAIT_MS);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    ck_assert_msg(st == TE_WIRE_FRAME && type == TE_WIRE_REFUSED, "%s, a %s frame", te_wire_status_str(st),
                  te_wire_type_name(type));
    ck_assert_str_eq(got, "no HELLO within 5 s");
    ck_assert_msg(s > 4.8 && s < 6.5, "refused after %.2f s", s);
    close(fd);
    scene_end();
}
END_TEST

/* ---- TCP ----------------------------------------------------------------------- */

static void read_token(char *tok, size_t n)
{
    te_listen_info in;
    te_listen_info_get(&in);
    FILE *f = fopen(in.token_file, "r");
    ck_assert_msg(f != NULL, "token file \"%s\"", in.token_file);
    ck_assert(fgets(tok, (int)n, f) != NULL);
    fclose(f);
    tok[strcspn(tok, "\n")] = '\0';
}

START_TEST(test_tcp_token)
{
    scene_begin();
    H = (handler_state){ 0 };
    te_listen_set_handler(handler, &H);
    listen_on("tcp:127.0.0.1:0");
    int port = tcp_port();
    ck_assert_int_gt(port, 0);
    te_listen_info in;
    te_listen_info_get(&in);
    char path[128], tok[128];
    snprintf(path, sizeof path, "%s/tdbg/%d.token", xdg, (int)getpid());
    ck_assert_str_eq(in.token_file, path);
    struct stat st;
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    ck_assert_uint_eq(st.st_mode & 07777, 0600);
    ck_assert_int_eq(st.st_size, 65);
    read_token(tok, sizeof tok);
    ck_assert_uint_eq(strlen(tok), 64);
    ck_assert_uint_eq(strspn(tok, "0123456789abcdef"), 64);
    /* stderr names the port and the file, never the token */
    char line[1024];
    snprintf(line, sizeof line, "tdbg: listening on %s (the token is in %s); attach with: tdbg attach %s --token-file %s\n",
             in.addr, path, in.addr, path);
    ck_assert_str_eq(err_text(), line);
    ck_assert_ptr_null(strstr(err_text(), tok));

    /* two wrong, then the right one: the strikes start over */
    for (int i = 0; i < 2; i++) {
        int fd = connect_tcp(port);
        ck_assert(fd >= 0);
        hello(fd, 50 + i);
        char wrong[65];
        memcpy(wrong, tok, 65);
        wrong[i * 63] ^= 1; /* the first byte, then the last */
        send_ok(fd, TE_WIRE_AUTH, wrong);
        expect_refused(fd, "wrong token");
    }
    int fd = connect_tcp(port);
    hello(fd, 60);
    send_ok(fd, TE_WIRE_AUTH, tok);
    send_ok(fd, TE_WIRE_LINE, "where");
    ck_assert(pump(1));
    expect(fd, TE_WIRE_WELCOME);
    ck_assert_str_eq(expect(fd, TE_WIRE_OUT), "echo: where");
    close(fd);
    for (int i = 0; i < 2; i++) {
        fd = connect_tcp(port);
        hello(fd, 70 + i);
        send_ok(fd, TE_WIRE_AUTH, "0123");
        expect_refused(fd, "wrong token");
    }
    te_listen_info_get(&in);
    ck_assert(in.listening);
    ck_assert_ptr_null(strstr(err_text(), "failed attaches"));
    scene_end();
}
END_TEST

START_TEST(test_tcp_three_strikes)
{
    scene_begin();
    H = (handler_state){ 0 };
    te_listen_set_handler(handler, &H);
    listen_on("tcp:localhost:0");
    int port = tcp_port();
    char tok[128], path[256];
    read_token(tok, sizeof tok);
    te_listen_info in;
    te_listen_info_get(&in);
    snprintf(path, sizeof path, "%s", in.token_file);

    int fd = connect_tcp(port);
    hello(fd, 80);
    char wrong[65];
    memcpy(wrong, tok, 65);
    wrong[31] = wrong[31] == '0' ? '1' : '0';
    send_ok(fd, TE_WIRE_AUTH, wrong);
    expect_refused(fd, "wrong token");

    fd = connect_tcp(port);
    hello(fd, 81);
    send_ok(fd, TE_WIRE_BYE, NULL);
    expect_refused(fd, "no token: expected AUTH after HELLO, got bye");

    fd = connect_tcp(port);
    hello(fd, 82);
    char *longer = malloc(4097);
    memset(longer, 'a', 4096);
    memcpy(longer, tok, 64); /* the right token, and more */
    longer[4096] = '\0';
    send_ok(fd, TE_WIRE_AUTH, longer);
    free(longer);
    expect_refused(fd, "the token is too long");

    /* three in a row: no longer listening, and said so */
    te_listen_info_get(&in);
    for (int i = 0; i < 1000 && in.listening; i++) {
        usleep(1000);
        te_listen_info_get(&in);
    }
    ck_assert(!in.listening);
    char line[160];
    snprintf(line, sizeof line, "tdbg: 3 failed attaches in a row on tcp:127.0.0.1:%d: no longer listening\n", port);
    ck_assert_msg(strstr(err_text(), line), "stderr: %s", err_text());
    ck_assert_msg(strstr(err_text(), "): wrong token\n") && strstr(err_text(), "): the token is too long\n"),
                  "stderr: %s", err_text());
    ck_assert_int_eq(access(path, F_OK), -1);
    ck_assert_int_eq(connect_tcp(port), -1);
    ck_assert_int_eq(errno, ECONNREFUSED);
    /* the run goes on (it had taken no step) */
    for (int i = 0; i < 3; i++) {
        te_step_begin();
        te_step_end();
    }
    ck_assert_int_eq(te_step(), 2);
    ck_assert_int_eq(H.calls, 0);
    scene_end();
}
END_TEST

/* ---- the default handler: the debugger module's entry --------------------------- */

START_TEST(test_plugin_missing)
{
    static const char *const cases[][2] = {
        { "/nonexistent/libtdbg-debugger.so", "cannot load the debugger from /nonexistent/libtdbg-debugger.so: " },
        { "libm.so.6", "dbg_plugin_attach" },
    };
    for (int i = 0; i < 2; i++) {
        scene_begin();
        H = (handler_state){ 0 };
        ck_assert_int_eq(setenv("TDBG_PLUGIN", cases[i][0], 1), 0);
        listen_on("1");
        int fd = connect_unix();
        hello(fd, 90);
        te_listen_info in;
        te_listen_info_get(&in);
        for (int k = 0; k < WAIT_MS && !in.attached; k++) {
            usleep(1000);
            te_listen_info_get(&in);
        }
        ck_assert(in.attached);
        te_step_begin();
        te_step_end();
        const char *got = expect(fd, TE_WIRE_REFUSED);
        ck_assert_msg(strstr(got, cases[i][1]), "refused with \"%s\"", got);
        expect_closed(fd);
        close(fd);
        ck_assert_msg(strstr(err_text(), "tdbg: attach refused: cannot load the debugger from "), "stderr: %s",
                      err_text());
        te_listen_info_get(&in);
        ck_assert(!in.attached);
        ck_assert(in.listening);
        scene_end();
    }
}
END_TEST

/* A module whose entry writes an OUT frame on the fd it is given and
 * declines (status 7): the engine ends the session with END. */
static const char plugin_src[] =
    "#include <string.h>\n"
    "#include <unistd.h>\n"
    "int dbg_plugin_attach(int fd)\n"
    "{\n"
    "    static const char msg[] = \"module here\";\n"
    "    unsigned char h[5] = { 0, 0, 0, sizeof msg - 1, 8 };\n"
    "    if (write(fd, h, 5) != 5 || write(fd, msg, sizeof msg - 1) != sizeof msg - 1)\n"
    "        return 1;\n"
    "    return 7;\n"
    "}\n";

START_TEST(test_plugin_attach)
{
    ck_assert_int_eq(TE_WIRE_OUT, 8); /* the module writes the frame by hand */
    scene_begin();
    char src[128], so[128], out[4096];
    snprintf(src, sizeof src, "%s/mod.c", xdg);
    snprintf(so, sizeof so, "%s/mod.so", xdg);
    FILE *f = fopen(src, "w");
    ck_assert(f != NULL);
    fputs(plugin_src, f);
    ck_assert_int_eq(fclose(f), 0);
    int st = tu_shell(out, sizeof out, "%s -shared -fPIC -o %s %s 2>&1", TDBG_CC, so, src);
    ck_assert_msg(st == 0, "cannot build the module (%d): %s", st, out);
    ck_assert_int_eq(setenv("TDBG_PLUGIN", so, 1), 0);
    listen_on("1");
    int fd = connect_unix();
    hello(fd, 91);
    te_listen_info in;
    te_listen_info_get(&in);
    for (int k = 0; k < WAIT_MS && !in.attached; k++) {
        usleep(1000);
        te_listen_info_get(&in);
    }
    te_step_begin();
    te_step_end();
    expect(fd, TE_WIRE_WELCOME);
    ck_assert_str_eq(expect(fd, TE_WIRE_OUT), "module here");
    ck_assert_str_eq(expect(fd, TE_WIRE_END), "the debugger could not attach (status 7)");
    expect_closed(fd);
    close(fd);
    te_listen_info_get(&in);
    ck_assert(!in.attached);
    scene_end();
}
END_TEST

/* ---- nothing left behind ----------------------------------------------------------- */

START_TEST(test_no_leaks)
{
    scene_begin();
    ck_assert_int_eq(te_init(&(te_config){ .seed = 1, .threads = 1 }), TE_OK);
    int fds0 = count_dir("/proc/self/fd"), tasks0 = count_dir("/proc/self/task") + 1;
    H = (handler_state){ 0 };
    te_listen_set_handler(handler, &H);
    listen_on("1");
    ck_assert_int_eq(count_dir("/proc/self/task") + 1, tasks0 + 1); /* the listener */
    for (int i = 0; i < 40; i++) {
        int fd = connect_unix();
        hello(fd, 100 + i);
        send_ok(fd, TE_WIRE_LINE, "detach");
        ck_assert(pump(i + 1));
        expect(fd, TE_WIRE_WELCOME);
        ck_assert_str_eq(expect(fd, TE_WIRE_OUT), "echo: detach");
        close(fd);
        fd = connect_unix(); /* a malformed one */
        raw_header(fd, 3u << 20, TE_WIRE_HELLO);
        expect_refused(fd, "too long");
        fd = connect_unix(); /* one that gives up before its HELLO */
        close(fd);
    }
    ck_assert_int_eq(H.calls, 40);
    /* a listener stopped with a connection pending and one under its check */
    int pend = connect_unix();
    hello(pend, 200);
    te_listen_info in;
    te_listen_info_get(&in);
    for (int k = 0; k < WAIT_MS && !in.attached; k++) {
        usleep(1000);
        te_listen_info_get(&in);
    }
    ck_assert(in.attached);
    int checking = connect_unix();
    for (int round = 0; round < 5; round++)
        listen_on("1"); /* te_init again: shut down, listen anew */
    ck_assert_str_eq(expect(pend, TE_WIRE_END), "the run's engine shut down before the session began");
    close(pend);
    close(checking);
    te_shutdown();
    ck_assert_int_eq(count_dir("/proc/self/fd"), fds0);
    ck_assert_int_eq(count_dir("/proc/self/task") + 1, tasks0);
    char dir[96];
    snprintf(dir, sizeof dir, "%s/tdbg", xdg);
    ck_assert_int_eq(count_dir(dir) + 1, 0); /* the socket is gone */
    scene_end();
}
END_TEST

Suite *suite_listen(void)
{
    Suite *s = suite_create("listen");
    TCase *tc = tcase_create("listen");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_wire_round_trip);
    tcase_add_test(tc, test_wire_malformed);
    tcase_add_test(tc, test_unix_files);
    tcase_add_test(tc, test_bad_values);
    tcase_add_test(tc, test_dir_refused);
    tcase_add_test(tc, test_peer_uid);
    tcase_add_test(tc, test_hand_off);
    tcase_add_test(tc, test_second_front_end);
    tcase_add_test(tc, test_malformed_closes_connection);
    tcase_add_test(tc, test_auth_deadline);
    tcase_add_test(tc, test_tcp_token);
    tcase_add_test(tc, test_tcp_three_strikes);
    tcase_add_test(tc, test_plugin_missing);
    tcase_add_test(tc, test_plugin_attach);
    tcase_add_test(tc, test_no_leaks);
    suite_add_tcase(s, tc);
    return s;
}
