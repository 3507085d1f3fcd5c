/*
 * job.c — `tdbg --mpi [-x FILE] [-ex CMD]... [--batch] -- mpirun -np N PROGRAM ...`:
 * one debugger for the whole data-parallel job.
 *
 * The launcher makes a private directory (mkdtemp: mode 0700) and runs
 * mpirun with TDBG_JOB=DIR in its environment: each rank listens on
 * DIR/rank-R.sock and waits in te_init until this process connects
 * (engine/listen.c), as `tdbg attach` would, with HELLO's job=1. Every
 * rank's session is then the attached one (attach.c, remote.c): the wire
 * protocol of docs/attach.md, one connection per rank.
 *
 * Commands go to the focused rank (`rank N`), except breakpoints and
 * other settings, which go to every rank, and the commands that resume
 * training, which go to every rank and then wait until each one is
 * paused again: the first rank to stop makes the others pause at once
 * (an INTR frame: they stop at their next op, or inside a collective
 * through the `waiting` hook), or, after `step` and `next`, after a
 * moment in which they may reach their own stop. The report then names
 * the rank that created the bad value first and what the others hold for
 * the same tensor.
 *
 * A rank whose connection ends without END died: mpirun's stderr, which
 * passes through here, says of which signal. mpirun then ends the other
 * ranks with SIGTERM, which their sessions turn into a stop (the flight
 * recorder writes, the stop is reported) before they die of it;
 * OMPI_MCA_odls_base_sigkill_timeout (30 s unless set) is how long they
 * can be looked at before mpirun's SIGKILL.
 *
 * `tdbg attach --mpi PID,PID,...` drives a job that is running already,
 * its ranks started with TDBG_LISTEN=1: each pid's socket is the one
 * `tdbg attach PID` connects to, HELLO says job=1 as the launcher's, and
 * WELCOME's rank=R ranks=N job=ID place each rank and check that the
 * pids are the whole of one job before the session begins. A rank may
 * take its session inside a gradient all-reduce, waiting for a rank that
 * paused at its step's start (engine/dist.c hands attaches off there).
 * Detach, the end of input and quit in --batch leave the job training.
 */
#include "job.h"
#include "term_line.h"

#include "te.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CONNECT_S 120        /* every rank connected within this, or the job is given up */
#define SETTLE_MS 300        /* step, next: the other ranks may reach their own stop meanwhile */
#define SIGNAL_WAIT_MS 5000  /* a rank lost: mpirun's stderr names its signal within this */
#define FRAME_MS 30000       /* a frame begun must be whole within this */
#define QUIT_WAIT_MS 3000    /* quit: each rank's END within this, else SIGKILL all the same */
#define RANKS_MAX 4096
#define SIGKILL_TIMEOUT "5"  /* seconds mpirun waits after SIGTERM before SIGKILL, unless set */

typedef enum { RK_NONE, RK_RUNNING, RK_PROMPT, RK_ENDED, RK_DEAD } rk_state;

/* One rank's session, as this side knows it. */
typedef struct rk {
    int fd;            /* -1: not connected, or gone */
    bool welcomed;
    int pid;
    rk_state state;
    char *out;         /* OUT text since the last command sent */
    size_t out_len, out_cap;
    bool stopped_new;  /* a STOP since the last resume */
    long long step;    /* the last STOP's fields */
    int exec;          /* its op's place in the step's execution order; -1 none */
    char phase[16], op[TE_NAME_MAX], reason[16], tensor[TE_NAME_MAX], origin[TE_NAME_MAX + 32];
    char prompt[128];
    char end[256];     /* END's text */
    int signal;        /* the signal it died of: /proc, else mpirun's "exited on signal N" */
    bool reported;     /* its death was told */
} rk;

static struct {
    rk *r;
    int n;             /* ranks in the job (WELCOME's ranks=); 0 until known */
    int cap;
    int focus;
    char dir[64];
    pid_t mpirun;
    bool mpirun_done;
    int mpirun_status;
    int err_fd;        /* mpirun's stderr; -1 once closed */
    char err_line[1024];
    size_t err_len;
    bool ever_stopped;
    bool attached;     /* tdbg attach --mpi: a running job, no mpirun of ours */
    bool batch;
    bool detached;     /* the session ended by detach: the job trains on */
    char *buf;         /* a frame's payload */
} J = { .err_fd = -1 };

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static volatile sig_atomic_t mpirun_pid;

/* SIGTERM, SIGHUP to the launcher: mpirun's to handle (it ends the job). */
static void forward(int sig)
{
    if (mpirun_pid > 0)
        kill((pid_t)mpirun_pid, sig);
}

/* ---- the ranks' frames ------------------------------------------------------------ */

static rk *rank_at(int i)
{
    if (i >= J.cap) {
        int cap = J.cap ? J.cap : 8;
        while (cap <= i)
            cap *= 2;
        rk *r = realloc(J.r, (size_t)cap * sizeof *r);
        if (!r) {
            fprintf(stderr, "tdbg: out of memory\n");
            exit(2);
        }
        for (int k = J.cap; k < cap; k++)
            r[k] = (rk){ .fd = -1, .exec = -1, .step = -1 };
        J.r = r;
        J.cap = cap;
    }
    return &J.r[i];
}

static void out_add(rk *r, const char *s, size_t n)
{
    if (r->out_len + n + 1 > r->out_cap) {
        size_t cap = (r->out_len + n + 1) * 2;
        char *o = realloc(r->out, cap);
        if (!o) {
            fprintf(stderr, "tdbg: out of memory\n");
            exit(2);
        }
        r->out = o;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, s, n);
    r->out_len += n;
    r->out[r->out_len] = '\0';
}

/* The value of KEY= in a line of words, up to the next space. */
static void field(const char *line, const char *key, char *v, size_t n)
{
    char k[32];
    snprintf(k, sizeof k, " %s=", key);
    const char *p = strstr(line, k);
    v[0] = '\0';
    if (p) {
        p += strlen(k);
        size_t len = strcspn(p, " ");
        snprintf(v, n, "%.*s", (int)(len < n ? len : n - 1), p);
    }
}

static void stop_in(rk *r, const char *line)
{
    char v[32];
    field(line, "step", v, sizeof v);
    r->step = atoll(v);
    field(line, "exec", v, sizeof v);
    r->exec = v[0] ? atoi(v) : -1;
    field(line, "phase", r->phase, sizeof r->phase);
    field(line, "op", r->op, sizeof r->op);
    field(line, "reason", r->reason, sizeof r->reason);
    field(line, "tensor", r->tensor, sizeof r->tensor);
    field(line, "origin", r->origin, sizeof r->origin);
    r->stopped_new = true;
    J.ever_stopped = true;
}

/* The signal that ended pid, read from /proc/PID/stat's exit_code (field
 * 52, as waitpid reports it) while the process is a zombie: the launcher
 * is not its parent (mpirun is), so this is the one place to see it
 * before mpirun reaps it. 0: it did not die of a signal, or it is gone. */
static int exit_signal(int pid)
{
    char path[64], text[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    for (int tries = 0; tries < 50; tries++) { /* the exit under way: 250 ms at most */
        FILE *f = fopen(path, "r");
        if (!f)
            return 0;
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        const char *p = strrchr(text, ')');
        char state = p && p[1] ? p[2] : '?';
        if (state == 'Z' || state == 'X') {
            int field = 2, code = 0;
            for (const char *q = p + 1; *q && field < 52; q++)
                if (*q == ' ' && ++field == 52)
                    code = atoi(q + 1);
            return WIFSIGNALED(code) ? WTERMSIG(code) : 0;
        }
        struct timespec t = { 0, 5000000 };
        nanosleep(&t, NULL);
    }
    return 0;
}

static void lost(rk *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    if (r->state != RK_ENDED) {
        r->state = RK_DEAD;
        if (!r->signal && r->pid > 0)
            r->signal = exit_signal(r->pid);
    }
}

/* One frame of rank i, ready to read. */
static void frame_in(int i)
{
    rk *r = &J.r[i];
    int type = 0;
    size_t len = 0;
    te_wire_status st = te_wire_recv(r->fd, &type, J.buf, TE_WIRE_MAX + 1, &len, FRAME_MS);
    if (st != TE_WIRE_FRAME) {
        lost(r);
        return;
    }
    char v[32];
    switch (type) {
    case TE_WIRE_WELCOME:
        field(J.buf, "pid", v, sizeof v);
        r->pid = atoi(v);
        field(J.buf, "ranks", v, sizeof v);
        if (atoi(v) > 0 && atoi(v) <= RANKS_MAX)
            J.n = atoi(v);
        r->welcomed = true;
        r->state = RK_RUNNING;
        break;
    case TE_WIRE_OUT:
        out_add(r, J.buf, len);
        break;
    case TE_WIRE_STOP:
        stop_in(r, J.buf);
        break;
    case TE_WIRE_PROMPT:
        snprintf(r->prompt, sizeof r->prompt, "%s", J.buf);
        r->state = RK_PROMPT;
        break;
    case TE_WIRE_END:
        snprintf(r->end, sizeof r->end, "%s", J.buf);
        r->state = RK_ENDED;
        lost(r);
        break;
    case TE_WIRE_REFUSED:
        fprintf(stderr, "tdbg: rank %d refused the debugger: %s\n", i, J.buf);
        lost(r);
        break;
    default:
        fprintf(stderr, "tdbg: rank %d sent a %s frame, which a run does not send: leaving it\n", i,
                te_wire_type_name(type));
        lost(r);
    }
}

static const char *signal_text(int sig)
{
    static char t[64];
    snprintf(t, sizeof t, "signal %d (%s)", sig, strsignal(sig));
    return t;
}

/* mpirun's stderr, passed on line by line; "process rank R ... exited on
 * signal N" says how a rank died. */
static void stderr_in(void)
{
    char chunk[4096];
    ssize_t k = read(J.err_fd, chunk, sizeof chunk);
    if (k < 0 && errno == EINTR)
        return;
    if (k <= 0) {
        close(J.err_fd);
        J.err_fd = -1;
        return;
    }
    ssize_t w = write(STDERR_FILENO, chunk, (size_t)k);
    (void)w;
    for (ssize_t i = 0; i < k; i++) {
        char c = chunk[i];
        if (c != '\n' && J.err_len + 1 < sizeof J.err_line) {
            J.err_line[J.err_len++] = c;
            continue;
        }
        J.err_line[J.err_len] = '\0';
        J.err_len = 0;
        const char *p = strstr(J.err_line, "process rank ");
        int rank, sig;
        const char *s = p ? strstr(p, " exited on signal ") : NULL;
        if (s && sscanf(p, "process rank %d", &rank) == 1 && sscanf(s, " exited on signal %d", &sig) == 1 &&
            rank >= 0 && rank < J.cap && !J.r[rank].signal) {
            J.r[rank].signal = sig;
            if (J.r[rank].reported) /* its death was told without it */
                printf("job: rank %d (pid %d) died of %s, as mpirun reports\n", rank, J.r[rank].pid,
                       signal_text(sig));
            fflush(stdout);
        }
    }
}

/* One round: waits up to ms for frames, mpirun's stderr or its end. */
static void pump(int ms)
{
    int n = J.cap + 1;
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    if (!pf) {
        fprintf(stderr, "tdbg: out of memory\n");
        exit(2);
    }
    for (int i = 0; i < J.cap; i++)
        pf[i] = (struct pollfd){ .fd = J.r[i].fd, .events = POLLIN };
    pf[J.cap] = (struct pollfd){ .fd = J.err_fd, .events = POLLIN };
    int ready = poll(pf, (nfds_t)n, ms);
    for (int i = 0; ready > 0 && i < J.cap; i++)
        if (pf[i].revents && J.r[i].fd >= 0)
            frame_in(i);
    if (ready > 0 && pf[J.cap].revents && J.err_fd >= 0)
        stderr_in();
    free(pf);
    int status;
    if (!J.mpirun_done && waitpid(J.mpirun, &status, WNOHANG) == J.mpirun) {
        J.mpirun_done = true;
        J.mpirun_status = status;
        mpirun_pid = 0;
    }
}

static bool live(const rk *r) { return r->state == RK_RUNNING || r->state == RK_PROMPT; }

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- starting the job --------------------------------------------------------------- */

/* mpirun in a process group of its own (the terminal's Ctrl-C is the
 * launcher's), stdin from /dev/null (mpirun would forward it to rank 0),
 * stderr through a pipe to the launcher. */
static bool start_mpirun(char **argv, const char *plugin)
{
    int err[2], exec_err[2];
    if (pipe2(err, O_CLOEXEC) != 0 || pipe2(exec_err, O_CLOEXEC) != 0) {
        fprintf(stderr, "tdbg: cannot make a pipe: %s\n", strerror(errno));
        return false;
    }
    if (setenv("TDBG_JOB", J.dir, 1) != 0 || (!getenv("TDBG_PLUGIN") && setenv("TDBG_PLUGIN", plugin, 1) != 0) ||
        setenv("OMPI_MCA_odls_base_sigkill_timeout", SIGKILL_TIMEOUT, 0) != 0) {
        fprintf(stderr, "tdbg: cannot set the environment: %s\n", strerror(errno));
        return false;
    }
    unsetenv("TDBG"); /* the ranks are attached to, not launched under the debugger */
    unsetenv("TDBG_HELLO_FD");
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        fprintf(stderr, "tdbg: cannot start %s: %s\n", argv[0], strerror(errno));
        return false;
    }
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
            _exit(127);
        setpgid(0, 0);
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, STDIN_FILENO);
        dup2(err[1], STDERR_FILENO);
        execvp(argv[0], argv);
        int e = errno;
        ssize_t w = write(exec_err[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    setpgid(pid, pid); /* as the child does: whichever comes first */
    close(err[1]);
    close(exec_err[1]);
    int e = 0;
    ssize_t got;
    while ((got = read(exec_err[0], &e, sizeof e)) < 0 && errno == EINTR)
        ;
    close(exec_err[0]);
    J.mpirun = pid;
    mpirun_pid = pid;
    J.err_fd = err[0];
    if (got == (ssize_t)sizeof e) {
        fprintf(stderr, "tdbg: cannot run %s: %s\n", argv[0], strerror(e));
        waitpid(pid, NULL, 0);
        J.mpirun_done = true;
        return false;
    }
    return true;
}

/* Connects to DIR/rank-R.sock once the rank made it; HELLO as `tdbg
 * attach` says it, with job=1. */
static void connect_rank(int i)
{
    rk *r = rank_at(i);
    if (r->fd >= 0 || r->welcomed || r->state != RK_NONE)
        return;
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s/rank-%d.sock", J.dir, i);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return; /* not listening yet */
    }
    char hello[128];
    int n = snprintf(hello, sizeof hello, "tdbg-attach 1 pid=%d mode=cli job=1", (int)getpid());
    if (te_wire_send(fd, TE_WIRE_HELLO, hello, (size_t)n) != 0) {
        close(fd);
        return;
    }
    r->fd = fd;
}

/* Every rank's socket as it appears, until all N said WELCOME and paused
 * (the attach's pause at the first op). false: the job ended first, or
 * CONNECT_S went by. */
static bool connect_all(void)
{
    int64_t t0 = now_ms();
    for (;;) {
        DIR *d = opendir(J.dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            int i;
            char tail[8];
            if (sscanf(e->d_name, "rank-%d.%7s", &i, tail) == 2 && strcmp(tail, "sock") == 0 && i >= 0 &&
                i < RANKS_MAX)
                connect_rank(i);
        }
        if (d)
            closedir(d);
        int prompts = 0;
        for (int i = 0; i < J.n && i < J.cap; i++)
            prompts += J.r[i].state == RK_PROMPT;
        if (J.n && prompts == J.n)
            return true;
        if (J.mpirun_done || interrupted || now_ms() - t0 > CONNECT_S * 1000) {
            int k = 0;
            for (int i = 0; i < J.cap; i++)
                k += J.r[i].welcomed;
            fprintf(stderr, "tdbg: %s before every rank connected (%d of %s)\n",
                    J.mpirun_done ? "the job ended" : interrupted ? "interrupted" : "gave up waiting", k,
                    J.n ? "the job's ranks" : "an unknown number");
            return false;
        }
        pump(20);
    }
}

/* ---- talking to ranks -------------------------------------------------------------- */

static void send_line(int i, const char *l)
{
    rk *r = &J.r[i];
    r->out_len = 0;
    if (r->out)
        r->out[0] = '\0';
    if (te_wire_send(r->fd, TE_WIRE_LINE, l, strlen(l)) != 0) {
        lost(r);
        return;
    }
    r->state = RK_RUNNING;
}

/* Waits until no rank in `who` (NULL: every rank) runs. */
static void wait_prompts(const bool *who)
{
    for (;;) {
        bool busy = false;
        for (int i = 0; i < J.n; i++)
            busy |= (!who || who[i]) && J.r[i].state == RK_RUNNING;
        if (!busy)
            return;
        if (interrupted) {
            interrupted = 0;
            for (int i = 0; i < J.n; i++)
                if ((!who || who[i]) && J.r[i].state == RK_RUNNING)
                    te_wire_send(J.r[i].fd, TE_WIRE_INTR, NULL, 0);
        }
        pump(100);
    }
}

/* Each line of text, with "[rank R] " before it. */
static void print_prefixed(int i, const char *text)
{
    text += strspn(text, "\n");
    while (*text) {
        size_t len = strcspn(text, "\n");
        printf("[rank %d] %.*s\n", i, (int)len, text);
        text += len + (text[len] == '\n');
    }
}

/* A command for the ranks in `who`: the focused rank's output as it is,
 * another's only where it says something else. */
static void run_on(const char *l, const bool *who)
{
    for (int i = 0; i < J.n; i++)
        if (who[i] && J.r[i].state == RK_PROMPT)
            send_line(i, l);
    wait_prompts(who);
    const rk *f = &J.r[J.focus];
    if (who[J.focus] && f->out_len)
        fputs(f->out, stdout);
    for (int i = 0; i < J.n; i++) {
        const rk *r = &J.r[i];
        if (i != J.focus && who[i] && r->out_len &&
            (!who[J.focus] || !f->out || strcmp(r->out, f->out) != 0))
            print_prefixed(i, r->out);
    }
    fflush(stdout);
}

/* ---- the report after training paused ----------------------------------------------- */

/* The rank that created the bad value first, by step and execution order;
 * -1 when no rank stopped at such a value. */
static int creator(void)
{
    int best = -1;
    for (int i = 0; i < J.n; i++) {
        const rk *r = &J.r[i];
        if (r->state != RK_PROMPT || !r->stopped_new || strcmp(r->origin, "created") != 0 || !r->tensor[0] ||
            strcmp(r->tensor, "-") == 0)
            continue;
        if (best < 0 || r->step < J.r[best].step || (r->step == J.r[best].step && r->exec < J.r[best].exec))
            best = i;
    }
    return best;
}

/* What the other ranks hold for the creator's tensor: their `stats`, or
 * why not. */
static void others_hold(int c)
{
    const rk *cr = &J.r[c];
    printf("job: rank %d created the bad value first: step %lld, %s, %s, %s\n", c, cr->step, cr->phase, cr->op,
           cr->tensor);
    char cmd[TE_NAME_MAX + 16];
    snprintf(cmd, sizeof cmd, "stats %s", cr->tensor);
    for (int i = 0; i < J.n; i++) {
        rk *r = &J.r[i];
        if (i == c)
            continue;
        if (r->state != RK_PROMPT) {
            printf("  rank %d: %s\n", i, r->state == RK_DEAD ? "dead" : "ended");
            continue;
        }
        if (r->step < cr->step || (r->step == cr->step && r->exec < cr->exec)) {
            printf("  rank %d: not computed yet at this step (rank %d is at step %lld, %s, %s)\n", i, i, r->step,
                   r->phase, r->op);
            continue;
        }
        send_line(i, cmd);
        bool who[RANKS_MAX] = { false };
        who[i] = true;
        wait_prompts(who);
        printf("  rank %d: ", i);
        fputs(r->out_len ? r->out : "(nothing)\n", stdout);
        r->out_len = 0;
    }
}

/* After a resume: every rank's stop, the dead named, the creator found. */
static void report(void)
{
    int c = creator();
    for (int i = 0; i < J.n; i++) { /* the dead first: the cause of what the others say */
        rk *r = &J.r[i];
        if (r->state == RK_DEAD && !r->reported) {
            if (r->signal)
                printf("job: rank %d (pid %d) died of %s: its connection ended without END\n", i, r->pid,
                       signal_text(r->signal));
            else
                printf("job: rank %d (pid %d) died: its connection ended without END%s\n", i, r->pid,
                       J.attached ? "" : " (of which signal, mpirun says when the job ends)");
            r->reported = true;
        }
    }
    for (int k = -1; k < J.n; k++) { /* then the creator */
        int i = k < 0 ? c : k;
        if (i < 0 || (k >= 0 && i == c))
            continue;
        rk *r = &J.r[i];
        if (r->state != RK_DEAD && r->out_len) {
            bool paused = strcmp(r->reason, "interrupt") == 0 && r->stopped_new;
            if (paused) { /* the pause this side asked for: its first line and the stop's */
                const char *first = r->out + strspn(r->out, "\n");
                const char *stopped = strstr(r->out, "stopped: ");
                printf("[rank %d] %.*s\n", i, (int)strcspn(first, "\n"), first);
                if (stopped)
                    printf("[rank %d] %.*s\n", i, (int)strcspn(stopped, "\n"), stopped);
            } else {
                print_prefixed(i, r->out);
            }
            r->out_len = 0;
        }
        if (r->state == RK_ENDED && r->end[0] && strcmp(r->end, "detached") != 0) {
            printf("[rank %d] tdbg: %s\n", i, r->end);
            r->end[0] = '\0';
        }
    }
    if (c >= 0 && J.n > 1)
        others_hold(c);
    fflush(stdout);
}

/* Every live rank resumes with l; waits until each is paused again, dead
 * or ended. settle: after the first stop the others get SETTLE_MS to make
 * their own (step, next) before they are paused. */
static void resume(const char *l, bool settle)
{
    for (int i = 0; i < J.n; i++) {
        J.r[i].stopped_new = false;
        if (J.r[i].state == RK_PROMPT)
            send_line(i, l);
    }
    int64_t first_stop = -1, first_death = -1;
    bool paused_all = false;
    for (;;) {
        pump(50);
        int running = 0, dead_unnamed = 0;
        bool stopped = false;
        for (int i = 0; i < J.n; i++) {
            const rk *r = &J.r[i];
            running += r->state == RK_RUNNING;
            stopped |= r->state == RK_PROMPT && r->stopped_new;
            dead_unnamed += r->state == RK_DEAD && !r->signal;
            if (r->state == RK_DEAD && first_death < 0)
                first_death = now_ms();
        }
        if (stopped && first_stop < 0)
            first_stop = now_ms();
        bool intr = interrupted || (first_stop >= 0 && (!settle || now_ms() - first_stop >= SETTLE_MS));
        if (intr && !paused_all && running) {
            interrupted = 0;
            paused_all = true; /* once: a rank pauses at its next op, or in a collective's wait */
            for (int i = 0; i < J.n; i++)
                if (J.r[i].state == RK_RUNNING)
                    te_wire_send(J.r[i].fd, TE_WIRE_INTR, NULL, 0);
        }
        if (!running && (!dead_unnamed || J.mpirun_done || (first_death >= 0 && now_ms() - first_death > SIGNAL_WAIT_MS)))
            break;
    }
    report();
}

/* ---- the job's own commands ------------------------------------------------------- */

static const char *state_name(const rk *r, char *buf, size_t n)
{
    switch (r->state) {
    case RK_RUNNING:
        return "running";
    case RK_PROMPT:
        return strcmp(r->reason, "interrupt") == 0 ? "paused" : "stopped";
    case RK_ENDED:
        return "ended";
    case RK_DEAD:
        if (r->signal)
            snprintf(buf, n, "dead (signal %d)", r->signal);
        return r->signal ? buf : "dead";
    default:
        return "connecting";
    }
}

static void info_ranks(void)
{
    printf("rank  pid      state             step   phase     op\n");
    for (int i = 0; i < J.n; i++) {
        const rk *r = &J.r[i];
        char st[32];
        const char *op = r->op[0] ? r->op : "-";
        printf("%-5d %-8d %-17s %-6lld %-9s %s%s%s\n", i, r->pid, state_name(r, st, sizeof st), r->step,
               r->phase[0] ? r->phase : "-", op, i == J.focus ? "   <- focus" : "",
               r->state == RK_PROMPT && strcmp(r->reason, "interrupt") == 0 && strncmp(op, "allreduce/", 10) == 0
                   ? "   (waiting for the other ranks)" : "");
    }
    fflush(stdout);
}

/* The first word of l is one of names (a space-separated list). */
static bool word_in(const char *l, const char *names)
{
    size_t len = strcspn(l, " \t");
    for (const char *p = names; *p;) {
        size_t k = strcspn(p, " ");
        if (k == len && strncmp(p, l, len) == 0)
            return true;
        p += k + (p[k] == ' ');
    }
    return false;
}

static bool any_live(void)
{
    for (int i = 0; i < J.n; i++)
        if (live(&J.r[i]))
            return true;
    return false;
}

/* Ends every live rank (quit, answered y). Once each has said END (its
 * dumps written at its exit), the rest of the job goes with SIGKILL:
 * mpirun would otherwise SIGTERM the ranks a status 1 left and wait
 * odls_base_sigkill_timeout for each. */
static void quit_all(void)
{
    for (int i = 0; i < J.n; i++)
        if (J.r[i].state == RK_PROMPT)
            send_line(i, "quit");
    for (int round = 0; round < 2; round++) {
        wait_prompts(NULL);
        for (int i = 0; i < J.n; i++)
            if (J.r[i].state == RK_PROMPT && strstr(J.r[i].prompt, "(y or n)"))
                send_line(i, "y");
    }
    for (int64_t t0 = now_ms(); any_live() && now_ms() - t0 < QUIT_WAIT_MS;)
        pump(100);
    bool unnamed = false; /* a death mpirun has yet to name: it ends the job itself, and says */
    for (int i = 0; i < J.n; i++)
        unnamed |= J.r[i].state == RK_DEAD && !J.r[i].signal;
    if (!J.mpirun_done && !unnamed)
        kill(-J.mpirun, SIGKILL);
}

static int finish(void)
{
    while (!J.mpirun_done)
        pump(100);
    while (J.err_fd >= 0)
        pump(100);
    int s = J.mpirun_status;
    return WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
}

static void detach_all(void)
{
    bool every[RANKS_MAX];
    for (int i = 0; i < J.n; i++)
        every[i] = true;
    run_on("detach", every);
    J.detached = true;
    printf("Detached from every rank; the job trains on.\n");
}

/* quit, attached: the job is not this process's to end unasked. The end
 * of input answers y, as in a launched session. */
static bool confirm_kill(void)
{
    char *a = term_line_read("Kill every rank of the job being debugged? (y or n) ",
                             isatty(STDIN_FILENO) && isatty(STDOUT_FILENO));
    bool yes = !a || a[0] == 'y' || a[0] == 'Y';
    if (!a)
        printf("(end of input: y)\n");
    else if (!yes)
        printf("Not confirmed.\n");
    free(a);
    return yes;
}

/* One command line; false when the session is over. */
static bool command(const char *line, bool *quit)
{
    const char *l = line + strspn(line, " \t");
    if (!*l)
        return true;
    bool every[RANKS_MAX], one[RANKS_MAX] = { false };
    for (int i = 0; i < J.n; i++)
        every[i] = true;
    char w1[32] = "", w2[32] = "";
    sscanf(l, "%31s %31s", w1, w2);
    if ((strcmp(w1, "info") == 0 || strcmp(w1, "i") == 0) && strcmp(w2, "ranks") == 0) {
        info_ranks();
    } else if (strcmp(w1, "rank") == 0) {
        char *end;
        long n = w2[0] ? strtol(w2, &end, 10) : -1;
        if (!w2[0]) {
            printf("Focus: rank %d of %d.\n", J.focus, J.n);
        } else if (*end || n < 0 || n >= J.n) {
            printf("error: rank: '%s' is no rank of this job (0 to %d)\n", w2, J.n - 1);
        } else if (!live(&J.r[n])) {
            printf("error: rank %ld is %s\n", n, J.r[n].state == RK_DEAD ? "dead" : "ended");
        } else {
            const char *rest = l + strspn(l, " \t") + 4;
            rest += strspn(rest, " \t");
            rest += strcspn(rest, " \t");
            rest += strspn(rest, " \t");
            if (*rest) { /* rank N CMD: CMD on rank N only */
                one[n] = true;
                int f = J.focus;
                J.focus = (int)n;
                run_on(rest, one);
                J.focus = f;
            } else {
                J.focus = (int)n;
                printf("Focus: rank %d (pid %d), %s at step %lld.\n", J.focus, J.r[n].pid,
                       J.r[n].state == RK_PROMPT ? "paused" : "running", J.r[n].step);
            }
        }
    } else if (word_in(l, "quit q") && J.attached && J.batch) { /* as tdbg attach --batch: the job trains on */
        detach_all();
        return false;
    } else if (word_in(l, "quit q")) {
        *quit = !J.attached || confirm_kill();
        return !*quit;
    } else if (word_in(l, "detach")) {
        detach_all();
        return false;
    } else if (word_in(l, "run r continue c")) {
        resume(word_in(l, "run r") ? "continue" : l, false); /* the ranks started at the attach's pause */
    } else if (word_in(l, "step s next n finish until u")) {
        resume(l, true);
    } else if (word_in(l, "break b tbreak delete d disable enable condition ignore dump data set")) {
        run_on(l, every);
    } else if (!live(&J.r[J.focus])) {
        printf("error: rank %d (the focus) is %s: 'rank N' focuses another\n", J.focus,
               J.r[J.focus].state == RK_DEAD ? "dead" : "ended");
    } else {
        one[J.focus] = true;
        run_on(l, one);
    }
    fflush(stdout);
    return true;
}

/* ---- the session --------------------------------------------------------------------- */

static char *next_line(const char *prompt, const char **script, bool batch, bool use_readline)
{
    if (**script) {
        size_t len = strcspn(*script, "\n");
        char *l = strndup(*script, len);
        *script += len + ((*script)[len] == '\n');
        printf("%s%s\n", prompt, l ? l : "");
        fflush(stdout);
        return l;
    }
    if (batch)
        return NULL;
    return term_line_read(prompt, use_readline);
}

static void cleanup_dir(void)
{
    char p[128];
    for (int i = 0; i < J.cap; i++) {
        snprintf(p, sizeof p, "%s/rank-%d.sock", J.dir, i);
        unlink(p);
    }
    rmdir(J.dir);
}

/* The job's command line until detach, quit or every rank's end; the
 * exit status (docs/debugger.md "Data-parallel jobs", docs/attach.md). */
static int session(const char *script)
{
    for (int i = 0; i < J.n; i++)
        J.r[i].out_len = 0, J.r[i].stopped_new = false;
    bool use_readline = !J.batch && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    bool quit = false;
    for (;;) {
        if (!any_live())
            break;
        if (!live(&J.r[J.focus]))
            for (int i = 0; i < J.n; i++)
                if (live(&J.r[i])) {
                    printf("Focus: rank %d (rank %d is %s).\n", i, J.focus,
                           J.r[J.focus].state == RK_DEAD ? "dead" : "ended");
                    J.focus = i;
                    break;
                }
        char prompt[32];
        snprintf(prompt, sizeof prompt, "(tdbg rank %d) ", J.focus);
        interrupted = 0;
        char *l = next_line(prompt, &script, J.batch, use_readline);
        if (!l && J.attached) { /* the end of input: as tdbg attach, a detach */
            printf("\n");
            detach_all();
            break;
        }
        if (!l) {
            quit = true;
            break;
        }
        bool go_on = command(l, &quit);
        free(l);
        if (!go_on)
            break;
    }
    if (quit && any_live())
        quit_all();
    if (J.attached) {
        for (int64_t t0 = now_ms(); any_live() && now_ms() - t0 < QUIT_WAIT_MS;)
            pump(100); /* each rank's END */
        return J.detached ? 0 : 1;
    }
    int status = finish();
    return quit && J.ever_stopped ? 1 : status;
}

int tdbg_job_main(char **argv, const char *script, bool batch, const char *plugin)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(J.dir, sizeof J.dir, "%s/tdbg-job-XXXXXX", tmp && tmp[0] == '/' && strlen(tmp) < 30 ? tmp : "/tmp");
    if (!mkdtemp(J.dir)) {
        fprintf(stderr, "tdbg: --mpi: cannot make the job's directory %s: %s\n", J.dir, strerror(errno));
        return 2;
    }
    J.buf = malloc(TE_WIRE_MAX + 1);
    if (!J.buf) {
        fprintf(stderr, "tdbg: out of memory\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_sigint }, fw = { .sa_handler = forward };
    sigemptyset(&sa.sa_mask);
    sigemptyset(&fw.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &fw, NULL);
    sigaction(SIGHUP, &fw, NULL);
    if (!start_mpirun(argv, plugin)) {
        cleanup_dir();
        return 2;
    }
    if (!connect_all()) {
        if (!J.mpirun_done)
            kill(J.mpirun, SIGTERM);
        int s = finish();
        cleanup_dir();
        return s ? s : 2;
    }
    cleanup_dir(); /* every rank is connected: nobody else may come */
    J.ever_stopped = false;
    J.batch = batch;
    printf("tdbg %s: a job of %d ranks under %s (pid %d): ", TE_VERSION, J.n, argv[0], (int)J.mpirun);
    for (int i = 0; i < J.n; i++)
        printf("%srank %d pid %d", i ? ", " : "", i, J.r[i].pid);
    printf(".\nEvery rank is paused at step %lld, before %s. Commands go to the focused rank ('rank N'); "
           "breakpoints, continue and step go to every rank.\n", J.r[0].step, J.r[0].op);
    int status = session(script);
    free(J.buf);
    return status;
}

/* ---- attaching to a running job ------------------------------------------------------ */

/* One pid of the list, until its WELCOME places it. */
typedef struct named {
    int pid, fd, rank, ranks;
    char job[128];
    char why[320]; /* why it cannot be, or "" */
} named;

/* Says BYE on every connection (a session begun detaches, and its rank
 * trains on) and closes it. */
static void let_go(named *p, int k)
{
    for (int i = 0; i < k; i++)
        if (p[i].fd >= 0) {
            te_wire_send(p[i].fd, TE_WIRE_BYE, NULL, 0);
            close(p[i].fd);
            p[i].fd = -1;
        }
}

/* "PID,PID,...": k pids, each a process here, once. false with why. */
static bool parse_pids(const char *list, named **out, int *k)
{
    named *p = NULL;
    int n = 0;
    for (const char *s = list; *s;) {
        char *end;
        long pid = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || pid <= 0 || pid > 1 << 30) {
            fprintf(stderr, "tdbg: attach --mpi: '%s' is no list of pids (PID,PID,...)\n", list);
            free(p);
            return false;
        }
        for (int i = 0; i < n; i++)
            if (p[i].pid == pid) {
                fprintf(stderr, "tdbg: attach --mpi: pid %ld is named twice\n", pid);
                free(p);
                return false;
            }
        named *q = n < RANKS_MAX ? realloc(p, (size_t)(n + 1) * sizeof *p) : NULL;
        if (!q) {
            fprintf(stderr, "tdbg: attach --mpi: %s\n", n < RANKS_MAX ? "out of memory" : "too many pids");
            free(p);
            return false;
        }
        p = q;
        p[n++] = (named){ .pid = (int)pid, .fd = -1, .rank = -1 };
        s = *end ? end + 1 : end;
    }
    *out = p;
    *k = n;
    return n > 0 || (fprintf(stderr, "tdbg: attach --mpi: no pid named\n"), false);
}

/* Each pid's socket, checked before any is connected to (a bad list
 * leaves the job alone), then HELLO on each. */
static bool connect_pids(named *p, int k)
{
    char path[256];
    for (int i = 0; i < k; i++) {
        struct stat st;
        if (kill((pid_t)p[i].pid, 0) != 0 && errno == ESRCH) {
            fprintf(stderr, "tdbg: attach --mpi: no process with pid %d\n", p[i].pid);
            return false;
        }
        if (te_listen_socket_path(p[i].pid, path, sizeof path) != 0) {
            fprintf(stderr, "tdbg: attach --mpi: XDG_RUNTIME_DIR is too long for a socket's path\n");
            return false;
        }
        if (stat(path, &st) != 0 || !S_ISSOCK(st.st_mode)) {
            fprintf(stderr, "tdbg: attach --mpi: pid %d is not listening: start the job with TDBG_LISTEN=1 "
                            "(docs/attach.md); no socket at %s\n", p[i].pid, path);
            return false;
        }
    }
    for (int i = 0; i < k; i++) {
        te_listen_socket_path(p[i].pid, path, sizeof path);
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof a.sun_path) {
            fprintf(stderr, "tdbg: attach --mpi: %s: the path is too long for a Unix socket\n", path);
            return false;
        }
        memcpy(a.sun_path, path, strlen(path) + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            fprintf(stderr, "tdbg: attach --mpi: cannot connect to pid %d at %s: %s\n", p[i].pid, path,
                    strerror(errno));
            if (fd >= 0)
                close(fd);
            return false;
        }
        p[i].fd = fd;
        char hello[128];
        int n = snprintf(hello, sizeof hello, "tdbg-attach 1 pid=%d mode=cli job=1", (int)getpid());
        if (te_wire_send(fd, TE_WIRE_HELLO, hello, (size_t)n) != 0) {
            fprintf(stderr, "tdbg: attach --mpi: cannot talk to pid %d: %s\n", p[i].pid, strerror(errno));
            return false;
        }
    }
    return true;
}

/* Each connection's first frame: WELCOME (its rank, the job's size and
 * name) or why not. false: a connection failed, or Ctrl-C, or CONNECT_S
 * went by (the pids that did not answer are named). */
static bool welcome_all(named *p, int k)
{
    struct pollfd *pf = calloc((size_t)k, sizeof *pf);
    if (!pf) {
        fprintf(stderr, "tdbg: out of memory\n");
        return false;
    }
    bool ok = true;
    int64_t t0 = now_ms();
    for (int left = k; ok && left > 0;) {
        for (int i = 0; i < k; i++)
            pf[i] = (struct pollfd){ .fd = p[i].rank < 0 ? p[i].fd : -1, .events = POLLIN };
        int ready = poll(pf, (nfds_t)k, 100);
        for (int i = 0; ready > 0 && i < k; i++) {
            if (!pf[i].revents)
                continue;
            int type = 0;
            size_t len = 0;
            te_wire_status st = te_wire_recv(p[i].fd, &type, J.buf, TE_WIRE_MAX + 1, &len, FRAME_MS);
            char v[32];
            if (st != TE_WIRE_FRAME || type != TE_WIRE_WELCOME) {
                fprintf(stderr, "tdbg: attach --mpi: pid %d %s%s\n", p[i].pid,
                        st != TE_WIRE_FRAME      ? "closed the connection: "
                        : type == TE_WIRE_REFUSED ? "refused: "
                                                  : "sent no WELCOME: ",
                        st != TE_WIRE_FRAME ? te_error() : type == TE_WIRE_REFUSED ? J.buf : te_wire_type_name(type));
                close(p[i].fd);
                p[i].fd = -1;
                ok = false;
                continue;
            }
            field(J.buf, "rank", v, sizeof v);
            p[i].rank = v[0] ? atoi(v) : -1;
            field(J.buf, "ranks", v, sizeof v);
            p[i].ranks = atoi(v);
            field(J.buf, "job", p[i].job, sizeof p[i].job);
            left--;
            if (p[i].rank < 0 || p[i].ranks <= 0 || p[i].ranks > RANKS_MAX || p[i].rank >= p[i].ranks) {
                fprintf(stderr, "tdbg: attach --mpi: pid %d is no rank of a data-parallel job (its WELCOME says "
                                "no rank): attach to it with 'tdbg attach %d'\n", p[i].pid, p[i].pid);
                ok = false;
            }
        }
        if (ok && left > 0 && (interrupted || now_ms() - t0 > CONNECT_S * 1000)) {
            fprintf(stderr, "tdbg: attach --mpi: %s before every rank answered; not answering:",
                    interrupted ? "interrupted" : "gave up waiting");
            for (int i = 0; i < k; i++)
                if (p[i].rank < 0)
                    fprintf(stderr, " pid %d", p[i].pid);
            fprintf(stderr, "\n");
            ok = false;
        }
    }
    free(pf);
    return ok;
}

/* The pids are the whole of one job, each rank once. false with why. */
static bool one_whole_job(const named *p, int k)
{
    for (int i = 1; i < k; i++)
        if (strcmp(p[i].job, p[0].job) != 0 || p[i].ranks != p[0].ranks) {
            fprintf(stderr, "tdbg: attach --mpi: pids %d and %d are of two jobs (%s of %d ranks, %s of %d ranks)\n",
                    p[0].pid, p[i].pid, p[0].job, p[0].ranks, p[i].job, p[i].ranks);
            return false;
        }
    for (int i = 0; i < k; i++)
        for (int j = 0; j < i; j++)
            if (p[i].rank == p[j].rank) {
                fprintf(stderr, "tdbg: attach --mpi: pids %d and %d are both rank %d: two jobs\n", p[j].pid,
                        p[i].pid, p[i].rank);
                return false;
            }
    if (k == p[0].ranks)
        return true;
    fprintf(stderr, "tdbg: attach --mpi: the job has %d ranks and %d pids are named; missing:", p[0].ranks, k);
    for (int r = 0; r < p[0].ranks; r++) {
        bool named_r = false;
        for (int i = 0; i < k; i++)
            named_r |= p[i].rank == r;
        if (!named_r)
            fprintf(stderr, " rank %d", r);
    }
    fprintf(stderr, "\n");
    return false;
}

int tdbg_job_attach(const char *pids, const char *script, bool batch)
{
    named *p;
    int k;
    J.buf = malloc(TE_WIRE_MAX + 1);
    if (!J.buf) {
        fprintf(stderr, "tdbg: out of memory\n");
        return 2;
    }
    if (!parse_pids(pids, &p, &k)) {
        free(J.buf);
        return 2;
    }
    J.attached = true;
    J.batch = batch;
    J.mpirun_done = true; /* no mpirun of ours */
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_sigint };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    if (!connect_pids(p, k) || !welcome_all(p, k) || !one_whole_job(p, k)) {
        let_go(p, k);
        free(p);
        free(J.buf);
        return 2;
    }
    J.n = p[0].ranks;
    for (int i = 0; i < k; i++) {
        rk *r = rank_at(p[i].rank);
        r->fd = p[i].fd;
        r->pid = p[i].pid;
        r->welcomed = true;
        r->state = RK_RUNNING;
    }
    free(p);
    wait_prompts(NULL); /* each rank's pause: at its next op, or in the collective it waits in */
    printf("tdbg %s: attached to a job of %d ranks: ", TE_VERSION, J.n);
    for (int i = 0; i < J.n; i++)
        printf("%srank %d pid %d", i ? ", " : "", i, J.r[i].pid);
    printf(".\nEvery rank is paused:");
    for (int i = 0; i < J.n; i++)
        printf("%s rank %d at step %lld, %s%s", i ? ";" : "", i, J.r[i].step, J.r[i].op[0] ? J.r[i].op : "-",
               strncmp(J.r[i].op, "allreduce/", 10) == 0 ? " (waiting for the other ranks)" : "");
    printf(". Commands go to the focused rank ('rank N'); breakpoints, continue and step go to every rank; "
           "'detach' leaves the job training.\n");
    int status = session(script);
    free(J.buf);
    return status;
}
