/* contain.c — a parse of an untrusted file in a child process with a time
 * limit (contain.h). Debian 12's libhdf5 1.10.8 dies of SIGSEGV or loops on
 * some damaged files (its global heap, object headers and B-trees of the
 * file formats tdbg writes carry no checksum), and no amount of checking
 * before the call can rule that out; a fork keeps it out of the reader. */
#include "contain.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* ---- blobs ------------------------------------------------------------------- */

void dump_blob_put(dump_blob *o, const void *p, size_t n)
{
    if (o->oom || n == 0)
        return;
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n)
            cap *= 2;
        unsigned char *b = realloc(o->b, cap);
        if (!b) {
            o->oom = true;
            return;
        }
        o->b = b;
        o->cap = cap;
    }
    memcpy(o->b + o->len, p, n);
    o->len += n;
}

void dump_blob_int(dump_blob *o, long long v) { dump_blob_put(o, &v, sizeof v); }

void dump_blob_str(dump_blob *o, const char *s)
{
    size_t len = strlen(s);
    dump_blob_int(o, (long long)len);
    dump_blob_put(o, s, len + 1);
}

void dump_blob_free(dump_blob *o)
{
    free(o->b);
    *o = (dump_blob){ 0 };
}

bool dump_cur_get(dump_cursor *c, void *dst, size_t n)
{
    if (c->bad || n > c->left) {
        c->bad = true;
        if (n)
            memset(dst, 0, n);
        return false;
    }
    if (n) /* an empty array comes with no buffer */
        memcpy(dst, c->p, n);
    c->p += n;
    c->left -= n;
    return true;
}

long long dump_cur_int(dump_cursor *c)
{
    long long v = 0;
    dump_cur_get(c, &v, sizeof v);
    return v;
}

const char *dump_cur_str(dump_cursor *c)
{
    long long len = dump_cur_int(c);
    if (c->bad || len < 0 || (unsigned long long)len >= c->left || c->p[len] != '\0') {
        c->bad = true;
        return "";
    }
    const char *s = (const char *)c->p;
    c->p += len + 1;
    c->left -= (size_t)len + 1;
    return s;
}

/* ---- the child --------------------------------------------------------------- */

#define AT_MAX 512
static char *at_page;   /* shared with the parent; set in the child only */

void dump_contain_at(const char *fmt, ...)
{
    if (!at_page)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(at_page, AT_MAX, fmt, ap);
    va_end(ap);
}

static bool write_all(int fd, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

/* The test hook of contain.h. */
static void test_fault(const char *path)
{
    const char *f = getenv("TDBG_DUMP_TEST_FAULT");
    if (!f)
        return;
    bool hang = strncmp(f, "hang:", 5) == 0, crash = strncmp(f, "crash:", 6) == 0;
    if ((hang || crash) && strstr(path, f + (hang ? 5 : 6))) {
        if (crash)
            raise(SIGSEGV);
        for (;;)
            pause();
    }
}

/* Under a fuzzer, a sanitizer's report in the child would run the
 * fuzzer's death callback, inherited through fork(), and record the
 * contained crash as the fuzzer's own. Weak: NULL without a sanitizer. */
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static _Noreturn void child(int fd, const char *path, dump_contain_fn fn, void *arg)
{
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(NULL);
    /* Die of the signal itself (a handler a sanitizer or the parent installed
     * would print a report), leave no core file, stay silent, and go when
     * the parent goes. */
    static const int fatal[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGPIPE };
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        signal(fatal[i], SIG_DFL);
    struct rlimit none = { 0, 0 };
    setrlimit(RLIMIT_CORE, &none);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
    }
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    test_fault(path);
    dump_blob out = { 0 };
    fn(arg, &out);
    uint64_t len = out.oom ? UINT64_MAX : out.len;
    bool ok = write_all(fd, &len, sizeof len) && (out.oom || write_all(fd, out.b, out.len));
    _exit(ok ? 0 : 3);
}

/* ---- the parent -------------------------------------------------------------- */

static double time_limit(void)
{
    const char *s = getenv("TDBG_DUMP_TIMEOUT");
    char *end;
    double t = s ? strtod(s, &end) : 10;
    return s && (end == s || *end || !(t > 0)) ? 10 : t;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads the child's answer until end of file or the deadline: 1 complete,
 * 0 the child closed early, -1 out of time, -2 too long or out of memory. */
static int answer_read(int fd, double deadline, size_t max, dump_blob *out)
{
    uint64_t len = 0;
    size_t got_len = 0;
    unsigned char buf[65536];
    for (;;) {
        double left = deadline - now();
        if (left <= 0)
            return -1;
        struct pollfd p = { fd, POLLIN, 0 };
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            continue;
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return got_len == sizeof len && out->len == len ? 1 : 0;
        size_t off = 0;
        while (got_len < sizeof len && off < (size_t)k)
            ((unsigned char *)&len)[got_len++] = buf[off++];
        if (got_len == sizeof len && (len > max || out->len + ((size_t)k - off) > len))
            return -2;
        dump_blob_put(out, buf + off, (size_t)k - off);
        if (out->oom)
            return -2;
    }
}

/* Files whose parse crashed or hung, by identity, with the message: the
 * same file opened again in this process (tdbg-dump and tdbg-diff open a
 * file several times) fails at once instead of waiting out the time limit
 * again. A small ring: a file pushed out is only parsed again. */
#define FAILED_MAX 16
static struct failed {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    char msg[512];
} failed[FAILED_MAX];
static int n_failed, next_failed;
static pthread_mutex_t failed_mu = PTHREAD_MUTEX_INITIALIZER;

static bool same_file(const struct failed *f, const struct stat *st)
{
    return f->dev == st->st_dev && f->ino == st->st_ino && f->size == st->st_size &&
           f->mtime.tv_sec == st->st_mtim.tv_sec && f->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

static bool failed_before(const char *path, char *err, size_t n)
{
    struct stat st;
    bool hit = false;
    if (stat(path, &st) != 0)
        return false;
    pthread_mutex_lock(&failed_mu);
    for (int i = 0; i < n_failed && !hit; i++)
        if ((hit = same_file(&failed[i], &st)))
            snprintf(err, n, "%s", failed[i].msg);
    pthread_mutex_unlock(&failed_mu);
    return hit;
}

static void failed_add(const char *path, const char *msg)
{
    struct stat st;
    /* a fault the test hook made belongs to the environment, not the file */
    if (getenv("TDBG_DUMP_TEST_FAULT") || stat(path, &st) != 0)
        return;
    pthread_mutex_lock(&failed_mu);
    struct failed *f = &failed[next_failed];
    *f = (struct failed){ .dev = st.st_dev, .ino = st.st_ino, .size = st.st_size, .mtime = st.st_mtim };
    snprintf(f->msg, sizeof f->msg, "%s", msg);
    next_failed = (next_failed + 1) % FAILED_MAX;
    if (n_failed < FAILED_MAX)
        n_failed++;
    pthread_mutex_unlock(&failed_mu);
}

bool dump_contain(const char *path, dump_contain_fn fn, void *arg, size_t max, dump_blob *out,
                  char *err, size_t n)
{
    *out = (dump_blob){ 0 };
    if (failed_before(path, err, n))
        return false;
    const char *mode = getenv("TDBG_DUMP_CONTAIN");
    if (mode && strcmp(mode, "off") == 0) {
        fn(arg, out);
        if (!out->oom)
            return true;
        dump_blob_free(out);
        snprintf(err, n, "%s: out of memory", path);
        return false;
    }
    int fd[2];
    char *page = mmap(NULL, AT_MAX, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED || pipe2(fd, O_CLOEXEC) != 0) {
        snprintf(err, n, "%s: cannot start the reader: %s", path, strerror(errno));
        if (page != MAP_FAILED)
            munmap(page, AT_MAX);
        return false;
    }
    snprintf(page, AT_MAX, "the superblock");
    double limit = time_limit();
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        at_page = page;
        child(fd[1], path, fn, arg);
    }
    close(fd[1]);
    if (pid < 0) {
        snprintf(err, n, "%s: cannot start the reader: %s", path, strerror(errno));
        close(fd[0]);
        munmap(page, AT_MAX);
        return false;
    }
    int got = answer_read(fd[0], now() + limit, max, out);
    close(fd[0]);
    if (got != 1)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    char at[AT_MAX];
    snprintf(at, sizeof at, "%s", page);
    munmap(page, AT_MAX);
    if (got == 1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return true;
    dump_blob_free(out);
    if (got == -1) {
        snprintf(err, n, "%s: damaged HDF5 metadata in %s (no answer from the HDF5 library in "
                 "%g s: stopped)", path, at, limit);
        failed_add(path, err);
    }
    else if (got == -2)
        snprintf(err, n, "%s: damaged HDF5 metadata in %s (the HDF5 library answered with too "
                 "much or ran out of memory)", path, at);
    else if (WIFSIGNALED(status)) {
        snprintf(err, n, "%s: damaged HDF5 metadata in %s (the HDF5 library died of signal %d, "
                 "%s)", path, at, WTERMSIG(status), strsignal(WTERMSIG(status)));
        failed_add(path, err);
    }
    else
        snprintf(err, n, "%s: damaged HDF5 metadata in %s (the reader exited with status %d "
                 "without an answer)", path, at, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return false;
}
