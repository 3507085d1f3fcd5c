/*
 * tdbg.c — the launcher: `tdbg [OPTIONS] -- PROGRAM [ARGS]` puts the
 * debugger's settings in the environment (TDBG=tui|cli|batch: the front
 * end, the TUI by default at a terminal) and runs PROGRAM as its child;
 * the engine in PROGRAM loads the debugger when it starts
 * (engine/plugin.c), so any program linked with the engine can be
 * debugged without rebuilding it. The launcher waits: it says so when
 * PROGRAM never loaded the debugger, and ends with PROGRAM's status (or
 * dies of PROGRAM's signal). `tdbg attach` attaches to a run that is
 * already going instead (attach_client.c).
 */
#include "attach_client.h"
#include "job.h"
#include "script_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* The launcher's status when PROGRAM ended by itself without ever
 * loading the debugger (not linked with the engine, or TDBG dropped from
 * its environment): distinct from 0, 1 and 2, the statuses of a session. */
#define TDBG_NOT_CONNECTED 3

#ifndef TDBG_PLUGIN_PATH
#define TDBG_PLUGIN_PATH "libtdbg-debugger.so"
#endif

static void usage(FILE *f)
{
    fprintf(f, "usage: tdbg [-x FILE] [-ex CMD]... [--batch | --cli | --tui] -- PROGRAM [ARGS]\n"
               "       tdbg --mpi [-x FILE] [-ex CMD]... [--batch | --cli] -- mpirun -np N PROGRAM [ARGS]\n"
               "       tdbg attach PID | SOCKET | tcp:HOST:PORT --token-file F [-x FILE] [-ex CMD]... [--batch | --cli]\n"
               "Runs PROGRAM (any program linked with the tdbg engine) under the debugger.\n\n"
               "  -x FILE     run the commands in FILE first (one per line, # comments)\n"
               "  -ex CMD     run CMD first (repeatable; after -x files, in order)\n"
               "  --batch     run only those commands, without a prompt\n"
               "  --cli       the readline command line\n"
               "  --tui       the terminal UI (the default when stdin and stdout are\n"
               "              terminals; without one, the command line after a notice)\n"
               "  --mpi       the command is mpirun (or another MPI launcher): one debugger for\n"
               "              every rank of the job (docs/debugger.md \"Data-parallel jobs\")\n"
               "  -h, --help  this text\n\n"
               "Without --batch the commands run first, then the prompt takes over (plain\n"
               "lines from stdin when it is not a terminal). TDBG=tui|cli|batch set by hand\n"
               "in a program's environment does the same as this launcher.\n\n"
               "Exit status: PROGRAM's own (death by signal N: 128+N, as without tdbg); 1 when\n"
               "training stopped and then ended by quit, the script's end or (--batch) the\n"
               "program's end; 'quit N': N; 2 for a usage error or a program that cannot run;\n"
               "3 when PROGRAM ended without ever loading the debugger.\n\n"
               "'tdbg attach' attaches to a run started with TDBG_LISTEN=1 (tdbg attach --help,\n"
               "docs/attach.md).\n");
}

static char *script;
static size_t script_len;

static void add_line(const char *l, size_t n)
{
    char *s = realloc(script, script_len + n + 2);
    if (!s) {
        fprintf(stderr, "tdbg: out of memory\n");
        exit(2);
    }
    script = s;
    memcpy(script + script_len, l, n);
    script_len += n;
    script[script_len++] = '\n';
    script[script_len] = '\0';
}

static void add_file(const char *path)
{
    if (!script_file_read(path, add_line)) {
        fprintf(stderr, "tdbg: -x %s: %s\n", path, strerror(errno));
        exit(2);
    }
}

/* The debugger library beside this program in a build tree (this program
 * is debugger/.libs/tdbg there, run by libtool's wrapper, as it links the
 * engine's shared library), else installed. */
static const char *plugin_path(void)
{
    static char path[PATH_MAX + 64];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *dir = dirname(exe), *last = strrchr(dir, '/');
        snprintf(path, sizeof path, "%s/libtdbg-debugger.so", dir);
        if (strcmp(last ? last + 1 : dir, ".libs") == 0 && access(path, R_OK) == 0)
            return path;
        snprintf(path, sizeof path, "%s/.libs/libtdbg-debugger.so", dir);
        if (access(path, R_OK) == 0)
            return path;
    }
    return TDBG_PLUGIN_PATH;
}

/* ---- running the program ------------------------------------------------ */

static volatile sig_atomic_t child_pid;

/* SIGTERM, SIGHUP: the program's to handle (the debugger flushes its
 * dumps and gives the terminal back); the launcher then follows its end.
 * SIGINT, SIGQUIT from the terminal (si_code SI_KERNEL) reached the
 * program already, as the whole foreground group gets them: ignored here;
 * sent to the launcher alone by a process (`kill -INT PID`), passed on. */
static void forward(int sig, siginfo_t *info, void *ctx)
{
    (void)ctx;
    if ((sig == SIGINT || sig == SIGQUIT) && info->si_code == SI_KERNEL)
        return;
    if (child_pid > 0)
        kill((pid_t)child_pid, sig);
}

/* Ends the launcher as the program ended: the same status, or death by
 * the same signal, so that the shell's $? is what it would be without
 * the launcher (128+N for signal N). */
static int end_like(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    int sig = WTERMSIG(status);
    struct rlimit none = { 0, 0 };
    setrlimit(RLIMIT_CORE, &none); /* the program left its core already, if any */
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    return 128 + sig; /* a signal whose default is not to end the process */
}

/* Forks, runs the program in the child and waits: the launcher stays to
 * tell whether the debugger ever started (the plugin writes one byte to
 * the pipe named by TDBG_HELLO_FD) and to pass the program's end on. The
 * child keeps the terminal to itself (the TUI); the parent never reads or
 * writes it, and ignores the terminal's SIGINT and SIGQUIT, which reach
 * the program in the same process group (see forward()). */
static int run(char **argv)
{
    int hello[2], exec_err[2];
    char fd_text[16];
    /* the exec error pipe closes on exec: a byte on it is errno, EOF is success */
    if (pipe(hello) != 0 || pipe2(exec_err, O_CLOEXEC) != 0 || fcntl(hello[0], F_SETFD, FD_CLOEXEC) != 0) {
        fprintf(stderr, "tdbg: cannot make a pipe: %s\n", strerror(errno));
        return 2;
    }
    snprintf(fd_text, sizeof fd_text, "%d", hello[1]);
    if (setenv("TDBG_HELLO_FD", fd_text, 1) != 0) {
        fprintf(stderr, "tdbg: cannot set the environment: %s\n", strerror(errno));
        return 2;
    }
    /* blocked over the fork: no signal reaches the parent before its handlers are set */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGQUIT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigprocmask(SIG_BLOCK, &block, &old);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        fprintf(stderr, "tdbg: cannot start %s: %s\n", argv[0], strerror(errno));
        return 2;
    }
    if (pid == 0) {
        /* killed with the launcher (kill -9 of tdbg's pid ends the program, as before it forked) */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        sigprocmask(SIG_SETMASK, &old, NULL);
        close(exec_err[0]);
        execvp(argv[0], argv);
        int e = errno;
        ssize_t w = write(exec_err[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    child_pid = pid;
    close(hello[1]);
    close(exec_err[1]);
    struct sigaction fwd = { .sa_sigaction = forward, .sa_flags = SA_SIGINFO };
    sigemptyset(&fwd.sa_mask);
    sigaction(SIGINT, &fwd, NULL);
    sigaction(SIGQUIT, &fwd, NULL);
    sigaction(SIGTERM, &fwd, NULL);
    sigaction(SIGHUP, &fwd, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);

    int e = 0, status;
    ssize_t got;
    while ((got = read(exec_err[0], &e, sizeof e)) < 0 && errno == EINTR)
        ;
    close(exec_err[0]);
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
        ;
    if (w < 0) {
        fprintf(stderr, "tdbg: lost %s: %s\n", argv[0], strerror(errno));
        return 2;
    }
    if (got == (ssize_t)sizeof e) {
        fprintf(stderr, "tdbg: cannot run %s: %s\n", argv[0], strerror(e));
        return 2;
    }
    /* The hello byte is in the pipe if the debugger started: read without
     * waiting, as a grandchild may hold the write end still. */
    fcntl(hello[0], F_SETFL, O_NONBLOCK);
    char byte;
    bool connected = read(hello[0], &byte, 1) == 1;
    close(hello[0]);
    if (!connected) {
        if (WIFEXITED(status))
            fprintf(stderr, "tdbg: %s exited with status %d without loading the debugger: is it linked with the "
                            "tdbg engine?\n", argv[0], WEXITSTATUS(status));
        else
            fprintf(stderr, "tdbg: %s died of signal %d (%s) without loading the debugger: is it linked with "
                            "the tdbg engine?\n", argv[0], WTERMSIG(status), strsignal(WTERMSIG(status)));
        if (WIFEXITED(status))
            return TDBG_NOT_CONNECTED;
    }
    return end_like(status);
}

int main(int argc, char **argv)
{
    /* The TUI when there is a terminal to draw on and type into. */
    if (argc > 1 && strcmp(argv[1], "attach") == 0)
        return tdbg_attach_main(argc - 1, argv + 1);
    const char *mode = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO) ? "tui" : "cli";
    bool mpi = false, tui_asked = false;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if ((strcmp(a, "-x") == 0 || strcmp(a, "-ex") == 0) && i + 1 < argc) {
            if (a[1] == 'x')
                add_file(argv[++i]);
            else
                add_line(argv[i + 1], strlen(argv[i + 1])), i++;
        } else if (strcmp(a, "--batch") == 0) {
            mode = "batch";
        } else if (strcmp(a, "--cli") == 0) {
            mode = "cli";
        } else if (strcmp(a, "--tui") == 0) {
            mode = "tui";
            tui_asked = true;
        } else if (strcmp(a, "--mpi") == 0) {
            mpi = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-') {
            fprintf(stderr, "tdbg: unknown option '%s'%s\n", a,
                    strcmp(a, "-x") == 0 || strcmp(a, "-ex") == 0 ? " (it needs an argument)" : "");
            usage(stderr);
            return 2;
        } else {
            break; /* the program, without "--" */
        }
    }
    if (i >= argc) {
        fprintf(stderr, "tdbg: no program to run\n");
        usage(stderr);
        return 2;
    }
    if (mpi && strcmp(mode, "tui") == 0 && tui_asked) {
        fprintf(stderr, "tdbg: --mpi has no terminal UI yet: the command line (--cli) or --batch\n");
        return 2;
    }
    if (mpi) /* the TUI by default at a terminal: a job has the command line */
        return tdbg_job_main(argv + i, script ? script : "", strcmp(mode, "batch") == 0, plugin_path());
    if (setenv("TDBG", mode, 1) != 0 || setenv("TDBG_SCRIPT", script ? script : "", 1) != 0 ||
        (!getenv("TDBG_PLUGIN") && setenv("TDBG_PLUGIN", plugin_path(), 1) != 0)) {
        fprintf(stderr, "tdbg: cannot set the environment: %s\n", strerror(errno));
        return 2;
    }
    return run(argv + i);
}
