/*
 * symbolize.c — the helper process that names the addresses of a crash's
 * backtrace. Looking up a function and a source line reads ELF and DWARF
 * files and allocates: nothing a signal handler may do. So the lookup
 * lives in a process forked at plugin start, and the handler (crash.c)
 * only writes raw addresses to it and reads lines back.
 *
 * The helper asks libdw (elfutils) about its parent as the parent is at
 * the moment of the question: dwfl_linux_proc_report reads the parent's
 * /proc/PID/maps anew for every request, so libraries loaded after start
 * are known. It keeps nothing of the program: its fds 0-2 are /dev/null,
 * every other fd but its socket is closed (a pipe the program or the TUI
 * reads to its end is not held open), it ignores SIGINT (Ctrl-C in the
 * terminal is for the program), it dies with its parent (PR_SET_PDEATHSIG,
 * and the end of its socket), and it leaves only by _exit(): no atexit
 * handler or stdio buffer of the program runs twice.
 */
#include "crash.h"
#include "session.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

static bool read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

bool dbg_send_all(int fd, const void *s, size_t n)
{
    const char *p = s;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

static const char *base_name(const char *path)
{
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : path ? path : "?";
}

/* One reply line (without its newline) for address a. */
static void describe(Dwfl *d, uint64_t a, char *line, size_t n)
{
    Dwfl_Module *m = d ? dwfl_addrmodule(d, a) : NULL;
    if (!m) {
        snprintf(line, n, "??");
        return;
    }
    Dwarf_Addr start = 0;
    const char *mod = dwfl_module_info(m, NULL, &start, NULL, NULL, NULL, NULL, NULL);
    const char *fn = dwfl_module_addrname(m, a);
    Dwfl_Line *l = dwfl_module_getsrc(m, a);
    int lineno = 0;
    const char *file = l ? dwfl_lineinfo(l, NULL, &lineno, NULL, NULL, NULL) : NULL;
    if (fn && file)
        snprintf(line, n, "%s at %s:%d (%s)", fn, dbg_short_path(file), lineno, base_name(mod));
    else
        snprintf(line, n, "%s (%s+0x%llx)", fn ? fn : "??", base_name(mod), (unsigned long long)(a - start));
}

static void serve(int fd, pid_t parent)
{
    char *debuginfo_path = NULL;
    const Dwfl_Callbacks cb = { .find_elf = dwfl_linux_proc_find_elf,
                                .find_debuginfo = dwfl_standard_find_debuginfo,
                                .debuginfo_path = &debuginfo_path };
    for (;;) {
        uint32_t n;
        uint64_t addr[DBG_SYM_MAX];
        if (!read_full(fd, &n, sizeof n) || n > DBG_SYM_MAX || !read_full(fd, addr, n * sizeof *addr))
            _exit(0); /* the parent is gone (or speaks nonsense) */
        Dwfl *d = dwfl_begin(&cb);
        if (d && (dwfl_linux_proc_report(d, parent) != 0 || dwfl_report_end(d, NULL, NULL) != 0)) {
            dwfl_end(d);
            d = NULL; /* every line says ?? and the handler prints what it has */
        }
        for (uint32_t i = 0; i < n; i++) {
            char line[DBG_SYM_LINE];
            describe(d, addr[i], line, sizeof line - 1);
            size_t len = strlen(line);
            line[len++] = '\n';
            if (!dbg_send_all(fd, line, len))
                _exit(0);
        }
        if (d)
            dwfl_end(d);
    }
}

/* The child's side: a clean slate, then requests until the parent goes. */
static void helper(int sock, pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* it died before prctl */
        _exit(0);
    for (int sig = 1; sig < NSIG; sig++)
        signal(sig, SIG_DFL); /* none of the program's (or the debugger's) handlers */
    signal(SIGINT, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; fd++)
        dup2(null, fd);
    if (dup2(sock, 3) != 3)
        _exit(1);
    if (close_range(4, ~0U, 0) != 0)
        for (int fd = 4; fd < 4096; fd++) /* a kernel before 5.9 */
            close(fd);
    serve(3, parent);
}

int dbg_symbolizer_start(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        helper(sv[1], parent); /* never returns */
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return -1;
    }
    return sv[0];
}
