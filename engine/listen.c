/*
 * listen.c — a run that a front end can attach to (docs/attach.md).
 *
 * TDBG_LISTEN at te_init starts a listener thread on a Unix socket in a
 * private directory (or the loopback, with a token file). The thread blocks
 * in accept(), checks each peer (its uid; HELLO, and AUTH's token on TCP,
 * within TE_LISTEN_AUTH_MS), refuses a second front end while one is
 * attached, and leaves an accepted connection for the training thread
 * behind one atomic flag. te_step_begin tests the flag (the whole cost
 * while nobody attaches) and calls te_listen_hand_off, which sends WELCOME
 * and gives the fd to the handler: by default the debugger module's
 * dbg_plugin_attach. Whoever owns the session calls te_listen_detached
 * when it has closed the fd.
 *
 * Every refusal is a REFUSED frame to the peer and a line on stderr; the
 * run never stops for a peer's sake.
 *
 * A rank of a job that `tdbg --mpi` launched (TDBG_JOB=DIR, the launcher's
 * private directory) listens on DIR/rank-R.sock instead, R from the
 * launcher's environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK), and
 * te_init waits there for the launcher (TDBG_JOB_WAIT seconds, 60 by
 * default) so that the session sees the first step whole; WELCOME then
 * says rank=R ranks=N. Nobody in time: a warning, and training goes on.
 */
#include "te_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define TE_LISTEN_AUTH_MS 5000 /* HELLO (and AUTH) must come within this */
#define TCP_STRIKES 3          /* failed TCP connections in a row that end listening */
#define TOKEN_BYTES 32
#define TOKEN_HEX (2 * TOKEN_BYTES)
#define FIRST_MAX 512          /* the longest HELLO or AUTH payload read */
#define JOB_WAIT_S 60          /* TDBG_JOB: how long te_init waits for the launcher by default */

int te_listen_ready;

static struct {
    bool started;            /* te_listen_start made a listener (files and thread) */
    bool tcp;
    int lfd;                 /* the listening socket; -1 once closed */
    int wake[2];             /* te_listen_stop -> the thread */
    pthread_t thread;
    pthread_mutex_t mu;      /* the fields below */
    pthread_cond_t came;     /* pending set: a job's rank waits for it in te_init */
    bool listening;
    int conn;                /* the connection the thread is checking, -1 none */
    int pending;             /* accepted, waiting for te_step_begin; -1 none */
    bool attached;           /* pending or handed out, until te_listen_detached */
    int peer_pid;
    char peer_mode[8];       /* its HELLO's mode= ("cli", "batch", "tui"; "" when none) */
    char peer_hello[256];    /* its HELLO as sent */
    time_t since;
    int strikes;             /* failed TCP connections in a row */
    char addr[128];
    char sock_path[sizeof ((struct sockaddr_un *)0)->sun_path];
    char token_path[256];
    char token[TOKEN_HEX + 1];
    pid_t owner;             /* the process that made the files (atexit in a fork's child leaves them) */
    te_listen_handler handler;
    void *user;
} L = { .lfd = -1, .wake = { -1, -1 }, .mu = PTHREAD_MUTEX_INITIALIZER, .came = PTHREAD_COND_INITIALIZER,
        .conn = -1, .pending = -1 };

/* ---- the files: the private directory, the socket, the token ------------- */

static void remove_files(void)
{
    if (L.owner != getpid())
        return;
    if (L.sock_path[0])
        unlink(L.sock_path);
    if (L.token_path[0])
        unlink(L.token_path);
    L.sock_path[0] = L.token_path[0] = '\0';
}

/* $XDG_RUNTIME_DIR/tdbg, else /tmp/tdbg-UID, made 0700 or checked to be a
 * real directory of ours that nobody else may enter. false with a warning. */
static int dir_name(char *dir, size_t n)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    return xdg && xdg[0] == '/' ? snprintf(dir, n, "%s/tdbg", xdg)
                                : snprintf(dir, n, "/tmp/tdbg-%u", (unsigned)geteuid());
}

int te_listen_socket_path(int pid, char *buf, size_t n)
{
    char dir[200];
    int len = dir_name(dir, sizeof dir);
    if (len < 0 || (size_t)len >= sizeof dir)
        return -1;
    len = snprintf(buf, n, "%s/%d.sock", dir, pid);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

/* dir is a real directory of ours that nobody else may enter; else a
 * warning and false. */
static bool dir_ok(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0) {
        fprintf(stderr, "tdbg: not listening: %s: %s\n", dir, strerror(errno));
        return false;
    }
    const char *bad = S_ISLNK(st.st_mode)      ? "is a symbolic link"
                      : !S_ISDIR(st.st_mode)   ? "is not a directory"
                      : st.st_uid != geteuid() ? "belongs to another user"
                      : st.st_mode & 077       ? "is open to other users (it must be mode 0700)"
                                               : NULL;
    if (bad) {
        fprintf(stderr, "tdbg: not listening: %s %s\n", dir, bad);
        return false;
    }
    return true;
}

static bool private_dir(char *dir, size_t n)
{
    int len = dir_name(dir, n);
    if (len < 0 || (size_t)len >= n) {
        fprintf(stderr, "tdbg: not listening: XDG_RUNTIME_DIR is too long for a socket's path\n");
        return false;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "tdbg: not listening: cannot make %s: %s\n", dir, strerror(errno));
        return false;
    }
    return dir_ok(dir);
}

/* A file of ours left at path by an earlier process of the same pid goes;
 * anything else there is an error. */
static bool clear_stale(const char *path, bool sock)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return true;
    if (st.st_uid == geteuid() && (sock ? S_ISSOCK(st.st_mode) : S_ISREG(st.st_mode)) && unlink(path) == 0)
        return true;
    fprintf(stderr, "tdbg: not listening: %s is in the way\n", path);
    return false;
}

/* Listens on DIR/NAME ("4711.sock", a job's "rank-1.sock"). */
static int listen_unix(const char *dir, const char *name)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int len = snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= sizeof a.sun_path) {
        fprintf(stderr, "tdbg: not listening: the socket's path under %s is too long for a Unix socket\n", dir);
        return -1;
    }
    if (!clear_stale(a.sun_path, true))
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "tdbg: not listening: socket: %s\n", strerror(errno));
        return -1;
    }
    mode_t old = umask(077);
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    umask(old);
    if (rc != 0 || chmod(a.sun_path, 0600) != 0 || listen(fd, 4) != 0) {
        fprintf(stderr, "tdbg: not listening on %s: %s\n", a.sun_path, strerror(errno));
        if (rc == 0)
            unlink(a.sun_path);
        close(fd);
        return -1;
    }
    strcpy(L.sock_path, a.sun_path);
    snprintf(L.addr, sizeof L.addr, "unix:%s", a.sun_path);
    return fd;
}

/* HOST of tcp:HOST:PORT into a (loopback only), else a warning. */
static bool loopback(const char *host, int port, struct sockaddr_storage *a, socklen_t *alen, const char *value)
{
    struct sockaddr_in *v4 = (struct sockaddr_in *)a;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)a;
    memset(a, 0, sizeof *a);
    if (strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *alen = sizeof *v4;
        if ((ntohl(v4->sin_addr.s_addr) >> 24) == 127)
            return true;
    } else if (strcmp(host, "[::1]") == 0 || strcmp(host, "::1") == 0) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        v6->sin6_addr = in6addr_loopback;
        *alen = sizeof *v6;
        return true;
    }
    fprintf(stderr, "tdbg: not listening: TDBG_LISTEN=%s: only a loopback address may listen "
                    "(127.0.0.1, localhost or [::1]): anyone who can reach the port could try the token\n", value);
    return false;
}

static bool write_token(const char *dir)
{
    unsigned char raw[TOKEN_BYTES];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        fprintf(stderr, "tdbg: not listening: getrandom: %s\n", strerror(errno));
        return false;
    }
    for (int i = 0; i < TOKEN_BYTES; i++)
        snprintf(L.token + 2 * i, 3, "%02x", raw[i]);
    char path[sizeof L.token_path];
    int len = snprintf(path, sizeof path, "%s/%d.token", dir, (int)getpid());
    if (len < 0 || (size_t)len >= sizeof path) {
        fprintf(stderr, "tdbg: not listening: the token's path under %s is too long\n", dir);
        return false;
    }
    if (!clear_stale(path, false))
        return false;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    char line[TOKEN_HEX + 2];
    snprintf(line, sizeof line, "%s\n", L.token);
    bool ok = fd >= 0 && write(fd, line, TOKEN_HEX + 1) == TOKEN_HEX + 1;
    int e = errno;
    if (fd >= 0 && close(fd) != 0)
        ok = false;
    if (!ok) {
        fprintf(stderr, "tdbg: not listening: cannot write %s: %s\n", path, strerror(e));
        if (fd >= 0)
            unlink(path);
        return false;
    }
    strcpy(L.token_path, path);
    return true;
}

static int listen_tcp(const char *dir, const char *value)
{
    /* tcp:HOST:PORT, the port after the last colon ([::1]:PORT too). */
    const char *hp = value + 4, *colon = strrchr(hp, ':');
    char host[64], *end;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == hp || (size_t)(colon - hp) >= sizeof host || !colon[1] || *end || port < 0 || port > 65535) {
        fprintf(stderr, "tdbg: not listening: TDBG_LISTEN=%s: expected tcp:127.0.0.1:PORT (PORT 0 picks one)\n", value);
        return -1;
    }
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = '\0';
    struct sockaddr_storage a;
    socklen_t alen;
    if (!loopback(host, (int)port, &a, &alen, value) || !write_token(dir))
        return -1;
    int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&a, alen) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        fprintf(stderr, "tdbg: not listening on %s: %s\n", value + 4, strerror(errno));
        if (fd >= 0)
            close(fd);
        remove_files();
        return -1;
    }
    char ip[INET6_ADDRSTRLEN] = "";
    bool v4 = a.ss_family == AF_INET;
    inet_ntop(a.ss_family, v4 ? (void *)&((struct sockaddr_in *)&a)->sin_addr : (void *)&((struct sockaddr_in6 *)&a)->sin6_addr,
              ip, sizeof ip);
    unsigned p = ntohs(v4 ? ((struct sockaddr_in *)&a)->sin_port : ((struct sockaddr_in6 *)&a)->sin6_port);
    snprintf(L.addr, sizeof L.addr, v4 ? "tcp:%s:%u" : "tcp:[%s]:%u", ip, p);
    return fd;
}

/* ---- one connection ------------------------------------------------------- */

const char *te_listen_check_uid(unsigned peer, unsigned self, char *buf, size_t n)
{
    if (peer == self)
        return NULL;
    snprintf(buf, n, "another user (uid %u)", peer);
    return buf;
}

/* The peer's address for stderr lines: "uid 1000" on the Unix socket,
 * "127.0.0.1:53122" on TCP. */
static void peer_name(int fd, char *buf, size_t n)
{
    if (!L.tcp) {
        struct ucred c;
        socklen_t cl = sizeof c;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &cl) == 0)
            snprintf(buf, n, "pid %d, uid %u", (int)c.pid, (unsigned)c.uid);
        else
            snprintf(buf, n, "an unknown peer");
        return;
    }
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (getpeername(fd, (struct sockaddr *)&a, &al) == 0) {
        bool v4 = a.ss_family == AF_INET;
        inet_ntop(a.ss_family, v4 ? (void *)&((struct sockaddr_in *)&a)->sin_addr : (void *)&((struct sockaddr_in6 *)&a)->sin6_addr,
                  ip, sizeof ip);
        port = ntohs(v4 ? ((struct sockaddr_in *)&a)->sin_port : ((struct sockaddr_in6 *)&a)->sin6_port);
    }
    snprintf(buf, n, "%s:%u", ip, port);
}

/* Says why to the peer and to stderr, then lets the peer read it: our side
 * shuts down, what the peer still sends is drained for a moment (a close
 * with unread data would reset the connection and lose the REFUSED). */
static void refuse(int fd, const char *why)
{
    char who[96];
    peer_name(fd, who, sizeof who);
    fprintf(stderr, "tdbg: attach refused (%s, %s): %s\n", L.addr, who, why);
    te_wire_send(fd, TE_WIRE_REFUSED, why, strlen(why));
    shutdown(fd, SHUT_WR);
    char sink[4096];
    for (int i = 0; i < 16; i++) {
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        if (poll(&pf, 1, 200) <= 0 || recv(fd, sink, sizeof sink, MSG_DONTWAIT) <= 0)
            break;
    }
}

/* Constant time in the token's length whatever was sent. */
static bool token_ok(const char *got, size_t len)
{
    unsigned diff = len != TOKEN_HEX;
    for (size_t i = 0; i < TOKEN_HEX; i++)
        diff |= (unsigned char)L.token[i] ^ (unsigned char)(i < len ? got[i] : 0);
    return diff == 0;
}

/* The checks of a fresh connection. NULL: it may attach (*pid from its
 * HELLO); else the refusal's text (in buf or static). */
static const char *check(int fd, int *pid, char *mode, char *hello, size_t hello_n, char *buf, size_t n)
{
    if (!L.tcp) {
        struct ucred c;
        socklen_t cl = sizeof c;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &cl) != 0)
            return "the peer's credentials cannot be read";
        const char *bad = te_listen_check_uid((unsigned)c.uid, (unsigned)geteuid(), buf, n);
        if (bad)
            return bad;
    }
    char f[FIRST_MAX + 1];
    size_t len;
    int type;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    te_wire_status st = te_wire_recv(fd, &type, f, sizeof f, &len, TE_LISTEN_AUTH_MS);
    if (st == TE_WIRE_TIMEOUT)
        return "no HELLO within 5 s";
    if (st != TE_WIRE_FRAME || type != TE_WIRE_HELLO) {
        snprintf(buf, n, "expected HELLO first: %s", st == TE_WIRE_FRAME ? te_wire_type_name(type) : te_error());
        return buf;
    }
    int version = 0;
    if (sscanf(f, "tdbg-attach %d pid=%d", &version, pid) != 2 || version != 1 || *pid <= 0) {
        snprintf(buf, n, "a HELLO tdbg does not know: \"%.64s\" (expected \"tdbg-attach 1 pid=N mode=cli|batch|tui\")",
                 f);
        return buf;
    }
    size_t k = strnlen(f, hello_n - 1);
    memcpy(hello, f, k);
    hello[k] = '\0';
    const char *m = strstr(f, " mode=");
    if (m)
        sscanf(m + 6, "%7[a-z]", mode);
    if (!L.tcp)
        return NULL;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int left = TE_LISTEN_AUTH_MS - (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
    st = te_wire_recv(fd, &type, f, sizeof f, &len, left > 0 ? left : 0);
    if (st == TE_WIRE_MALFORMED && strstr(te_error(), "too long"))
        return "the token is too long";
    if (st == TE_WIRE_TIMEOUT)
        return "no token within 5 s";
    if (st != TE_WIRE_FRAME) {
        snprintf(buf, n, "no token: %s", te_error());
        return buf;
    }
    if (type != TE_WIRE_AUTH) {
        snprintf(buf, n, "no token: expected AUTH after HELLO, got %s", te_wire_type_name(type));
        return buf;
    }
    return token_ok(f, len) ? NULL : "wrong token";
}

static void stop_tcp_locked(void)
{
    fprintf(stderr, "tdbg: %d failed attaches in a row on %s: no longer listening\n", TCP_STRIKES, L.addr);
    L.listening = false;
    close(L.lfd); /* refused from now on, not left in the backlog */
    L.lfd = -1;
    unlink(L.token_path);
    L.token_path[0] = '\0';
}

/* Checks fd and either refuses and closes it or leaves it for the training
 * thread. Returns false when the listener must stop (TCP strikes). */
static bool serve(int fd)
{
    char buf[256];
    int pid = 0;
    char mode[8] = "", hello[sizeof L.peer_hello] = "";
    const char *bad = check(fd, &pid, mode, hello, sizeof hello, buf, sizeof buf);
    bool go_on = true;
    pthread_mutex_lock(&L.mu);
    if (!bad && L.attached) {
        struct tm tm;
        localtime_r(&L.since, &tm);
        snprintf(buf, sizeof buf, "tdbg is attached already: pid %d, since %02d:%02d:%02d", L.peer_pid, tm.tm_hour,
                 tm.tm_min, tm.tm_sec);
        bad = buf;
    } else if (!bad) {
        L.attached = true;
        L.pending = fd;
        L.peer_pid = pid;
        snprintf(L.peer_mode, sizeof L.peer_mode, "%s", mode);
        snprintf(L.peer_hello, sizeof L.peer_hello, "%s", hello);
        L.since = time(NULL);
        L.strikes = 0;
        L.conn = -1;
        __atomic_store_n(&te_listen_ready, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&L.came);
    }
    if (bad && L.tcp && strncmp(bad, "tdbg is attached", 16) != 0)
        go_on = ++L.strikes < TCP_STRIKES;
    pthread_mutex_unlock(&L.mu);
    if (!bad)
        return true;
    refuse(fd, bad);
    pthread_mutex_lock(&L.mu);
    L.conn = -1;
    if (!go_on)
        stop_tcp_locked();
    pthread_mutex_unlock(&L.mu);
    close(fd);
    return go_on;
}

static void *listener(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd pf[2] = { { .fd = L.wake[0], .events = POLLIN }, { .fd = L.lfd, .events = POLLIN } };
        int r = poll(pf, 2, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || pf[0].revents)
            break;
        int fd = accept4(L.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue; /* the peer gave up already (ECONNABORTED), or EMFILE: the next poll tries again */
        pthread_mutex_lock(&L.mu);
        bool stopping = pf[0].revents || !L.listening;
        L.conn = stopping ? -1 : fd;
        pthread_mutex_unlock(&L.mu);
        if (stopping) {
            close(fd);
            break;
        }
        if (!serve(fd))
            break;
    }
    return NULL;
}

/* ---- lifetime ------------------------------------------------------------- */

static void at_exit(void) { remove_files(); }

/* The rank the launcher gave this process, from mpirun's environment
 * (Open MPI, PMIx, MPICH's PMI); -1 when none says. */
static int env_rank(const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        char *end;
        long r = v && v[0] ? strtol(v, &end, 10) : -1;
        if (v && v[0] && !*end && r >= 0 && r < 1 << 24)
            return (int)r;
    }
    return -1;
}

/* TDBG_JOB_WAIT: seconds te_init waits for the launcher. */
static int job_wait_s(void)
{
    const char *v = getenv("TDBG_JOB_WAIT");
    char *end;
    long s = v && v[0] ? strtol(v, &end, 10) : JOB_WAIT_S;
    if (v && v[0] && (*end || s < 1 || s > 86400)) {
        fprintf(stderr, "tdbg: TDBG_JOB_WAIT=%s: expected seconds from 1 to 86400; waiting %d s\n", v, JOB_WAIT_S);
        s = JOB_WAIT_S;
    }
    return (int)s;
}

/* A rank of a job under `tdbg --mpi`: waits up to TDBG_JOB_WAIT for the
 * launcher's connection, which te_step_begin then hands off. */
static void job_wait(const char *dir, int rank)
{
    int wait_s = job_wait_s();
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_s;
    pthread_mutex_lock(&L.mu);
    int rc = 0;
    while (L.pending < 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&L.came, &L.mu, &until);
    bool came = L.pending >= 0;
    pthread_mutex_unlock(&L.mu);
    if (!came)
        fprintf(stderr, "tdbg: rank %d: the debugger did not connect to %s/rank-%d.sock within %d s "
                        "(TDBG_JOB_WAIT); training without it, still listening there\n", rank, dir, rank, wait_s);
}

void te_listen_start(void)
{
    const char *v = getenv("TDBG_LISTEN"), *job = getenv("TDBG_JOB");
    static const char *const rank_vars[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", NULL };
    int rank = -1;
    if (job && job[0] && !L.started) {
        rank = env_rank(rank_vars);
        if (rank < 0) {
            fprintf(stderr, "tdbg: TDBG_JOB=%s but no rank in the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, "
                            "PMI_RANK): not started by mpirun? Not waiting for the debugger\n", job);
            return;
        }
        v = "unix";
    }
    if (!v || !v[0] || L.started)
        return;
    bool tcp = strncmp(v, "tcp:", 4) == 0;
    if (!tcp && strcmp(v, "1") != 0 && strcmp(v, "unix") != 0) {
        fprintf(stderr, "tdbg: TDBG_LISTEN=%s is not understood: expected 1 or unix (a Unix socket), "
                        "or tcp:127.0.0.1:PORT; not listening\n", v);
        return;
    }
    static bool registered;
    if (!registered)
        registered = atexit(at_exit) == 0;
    char dir[200];
    L.owner = getpid();
    L.tcp = tcp;
    L.strikes = 0;
    char name[32];
    if (rank >= 0) {
        snprintf(dir, sizeof dir, "%s", job);
        snprintf(name, sizeof name, "rank-%d.sock", rank);
        if (strlen(job) >= sizeof dir || !dir_ok(dir))
            return;
    } else {
        snprintf(name, sizeof name, "%d.sock", (int)getpid());
        if (!private_dir(dir, sizeof dir))
            return;
    }
    L.lfd = tcp ? listen_tcp(dir, v) : listen_unix(dir, name);
    if (L.lfd < 0)
        return;
    if (pipe2(L.wake, O_CLOEXEC) != 0) {
        fprintf(stderr, "tdbg: not listening: pipe: %s\n", strerror(errno));
        close(L.lfd);
        L.lfd = -1;
        remove_files();
        return;
    }
    L.listening = true;
    int rc = pthread_create(&L.thread, NULL, listener, NULL);
    if (rc != 0) {
        fprintf(stderr, "tdbg: not listening: cannot start its thread: %s\n", strerror(rc));
        L.listening = false;
        close(L.lfd);
        close(L.wake[0]);
        close(L.wake[1]);
        L.lfd = L.wake[0] = L.wake[1] = -1;
        remove_files();
        return;
    }
    pthread_setname_np(L.thread, "tdbg-listen"); /* what top -H and /proc/PID/task show */
    L.started = true;
    if (rank >= 0)
        job_wait(dir, rank);
    else if (tcp)
        fprintf(stderr, "tdbg: listening on %s (the token is in %s); attach with: tdbg attach %s --token-file %s\n",
                L.addr, L.token_path, L.addr, L.token_path);
    else
        fprintf(stderr, "tdbg: listening on %s; attach with: tdbg attach %d\n", L.addr, (int)getpid());
}

void te_listen_stop(void)
{
    if (!L.started)
        return;
    pthread_mutex_lock(&L.mu);
    L.listening = false;
    if (L.conn >= 0)
        shutdown(L.conn, SHUT_RDWR); /* a check under way ends now, not after its 5 s */
    pthread_mutex_unlock(&L.mu);
    ssize_t w;
    do
        w = write(L.wake[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(L.thread, NULL);
    if (L.lfd >= 0)
        close(L.lfd);
    close(L.wake[0]);
    close(L.wake[1]);
    L.lfd = L.wake[0] = L.wake[1] = -1;
    if (L.pending >= 0) {
        static const char why[] = "the run's engine shut down before the session began";
        te_wire_send(L.pending, TE_WIRE_END, why, sizeof why - 1);
        close(L.pending);
        L.pending = -1;
        L.attached = false;
        L.peer_pid = 0;
    }
    __atomic_store_n(&te_listen_ready, 0, __ATOMIC_RELAXED);
    remove_files();
    L.addr[0] = '\0';
    L.started = false;
}

/* ---- the hand-off, on the training thread ---------------------------------- */

/* The launcher's name for this job, alike on every rank of it ("-" when
 * it gives none): WELCOME says it, so that `tdbg attach --mpi` can tell
 * the ranks of two jobs apart. */
static const char *job_id(void)
{
    static const char *const names[] = { "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME", NULL };
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && v[0] && strlen(v) < 128 && !strpbrk(v, " \t\n"))
            return v;
    }
    return "-";
}

void te_listen_hand_off(void)
{
    pthread_mutex_lock(&L.mu);
    int fd = L.pending;
    L.pending = -1;
    __atomic_store_n(&te_listen_ready, 0, __ATOMIC_RELAXED);
    te_listen_handler fn = L.handler;
    void *user = L.user;
    pthread_mutex_unlock(&L.mu);
    if (fd < 0)
        return;
    te_plugin_attach_fn attach = NULL;
    char why[512];
    if (!fn && !(attach = te_plugin_attach_entry(why, sizeof why))) {
        fprintf(stderr, "tdbg: attach refused: %s\n", why);
        te_wire_send(fd, TE_WIRE_REFUSED, why, strlen(why));
        close(fd);
        te_listen_detached();
        return;
    }
    char prog[256] = "?", hello[400];
    ssize_t k = readlink("/proc/self/exe", prog, sizeof prog - 1);
    prog[k > 0 ? k : 1] = '\0';
    int n = te_dist_active()
                ? snprintf(hello, sizeof hello, "tdbg-run 1 pid=%d step=%lld rank=%d ranks=%d job=%s program=%s",
                           (int)getpid(), (long long)te_step(), te_dist_rank(), te_dist_size(), job_id(), prog)
                : snprintf(hello, sizeof hello, "tdbg-run 1 pid=%d step=%lld program=%s", (int)getpid(),
                           (long long)te_step(), prog);
    te_wire_send(fd, TE_WIRE_WELCOME, hello, (size_t)n < sizeof hello ? (size_t)n : sizeof hello - 1);
    if (fn) {
        fn(fd, user);
        return;
    }
    int rc = attach(fd);
    if (rc != 0) {
        snprintf(why, sizeof why, "the debugger could not attach (status %d)", rc);
        fprintf(stderr, "tdbg: %s\n", why);
        te_wire_send(fd, TE_WIRE_END, why, strlen(why));
        close(fd);
        te_listen_detached();
    }
}

void te_listen_set_handler(te_listen_handler fn, void *user)
{
    pthread_mutex_lock(&L.mu);
    L.handler = fn;
    L.user = user;
    pthread_mutex_unlock(&L.mu);
}

void te_listen_detached(void)
{
    pthread_mutex_lock(&L.mu);
    if (L.pending < 0) {
        L.attached = false;
        L.peer_pid = 0;
        L.since = 0;
    }
    pthread_mutex_unlock(&L.mu);
}

void te_listen_info_get(te_listen_info *i)
{
    pthread_mutex_lock(&L.mu);
    *i = (te_listen_info){ .listening = L.started && L.listening, .attached = L.attached, .peer_pid = L.peer_pid,
                           .since = L.since };
    snprintf(i->peer_mode, sizeof i->peer_mode, "%s", L.attached ? L.peer_mode : "");
    snprintf(i->peer_hello, sizeof i->peer_hello, "%s", L.attached ? L.peer_hello : "");
    if (i->listening) {
        snprintf(i->addr, sizeof i->addr, "%s", L.addr);
        snprintf(i->token_file, sizeof i->token_file, "%s", L.token_path);
    }
    pthread_mutex_unlock(&L.mu);
}
