/*
 * attach_client.c — `tdbg attach PID | SOCKET | tcp:HOST:PORT --token-file F`:
 * connects to a run started with TDBG_LISTEN (engine/listen.c), says HELLO
 * (and the token on TCP), then relays: OUT frames to stdout (the stop's
 * report and its `stopped:` line among them; STOP frames carry that line
 * again as data, for a front end that draws it), a PROMPT answered from
 * the -x/-ex script first, then by readline at a terminal or stdin's lines
 * (--batch: `detach` when the script is over), Ctrl-C as an INTR frame.
 * END and REFUSED say why the session is over. The frames are the
 * engine's (te_wire_send, te_wire_recv).
 *
 * --tui: the TUI runs in the run and draws on this terminal: TERM frames
 * are written to it as they come (the first puts it in the TUI's modes,
 * attach_term.c), what is typed goes back as KEYS, a new size as RESIZE.
 * The script goes with HELLO (script=N, then N LINE frames): there is no
 * prompt to answer. A run that cannot start the TUI says so and prompts:
 * the command line, as without --tui.
 */
#include "attach_client.h"
#include "attach_term.h"
#include "job.h"
#include "script_file.h"
#include "term_line.h"

#include "te.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define FRAME_MS 30000 /* a frame begun must be whole within this */
#define TOKEN_MAX 512

static void usage(FILE *f)
{
    fprintf(f, "usage: tdbg attach PID | SOCKET | tcp:HOST:PORT --token-file FILE [-x FILE] [-ex CMD]...\n"
               "                   [--batch | --cli | --tui]\n"
               "       tdbg attach --mpi PID,PID,... [-x FILE] [-ex CMD]... [--batch]\n"
               "Attaches to a training run started with TDBG_LISTEN=1 (or tcp:127.0.0.1:PORT),\n"
               "pauses it at the next op and gives the debugger's command line; 'detach' leaves\n"
               "it running.\n\n"
               "  PID         the run's pid: its socket in $XDG_RUNTIME_DIR/tdbg (else /tmp/tdbg-UID)\n"
               "  SOCKET      the socket's path, as the run printed it\n"
               "  tcp:HOST:PORT --token-file FILE\n"
               "              a run listening on the loopback, and the token file it printed\n"
               "  -x FILE     run the commands in FILE first (one per line, # comments)\n"
               "  -ex CMD     run CMD first (repeatable; after -x files, in order)\n"
               "  --batch     run only those commands, then detach\n"
               "  --cli       the command line (the default; readline at a terminal)\n"
               "  --tui       the terminal UI (docs/tui.md), drawn by the run on this terminal\n"
               "  --mpi PID,PID,...\n"
               "              every rank of a data-parallel job, in any order: one session for\n"
               "              the job, as tdbg --mpi's (docs/debugger.md \"Data-parallel jobs\")\n\n"
               "Exit status: 0 after a detach; 1 when the run ended while attached; 2 for\n"
               "trouble (cannot connect, refused, the connection lost). See docs/attach.md.\n");
}

/* ---- the script ---------------------------------------------------------------- */

static char **script;
static int n_script, script_pos;

static void add_line(const char *l, size_t n)
{
    char **s = realloc(script, (size_t)(n_script + 1) * sizeof *s);
    if (!s || !(s[n_script] = strndup(l, n))) {
        fprintf(stderr, "tdbg: out of memory\n");
        exit(2);
    }
    script = s;
    n_script++;
}

static bool add_file(const char *path)
{
    if (!script_file_read(path, add_line)) {
        fprintf(stderr, "tdbg: -x %s: %s\n", path, strerror(errno));
        return false;
    }
    return true;
}

/* ---- connecting ------------------------------------------------------------------- */

static int connect_unix(const char *path, const char *pid_text)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof a.sun_path) {
        fprintf(stderr, "tdbg: attach: %s: the path is too long for a Unix socket\n", path);
        return -1;
    }
    strcpy(a.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
        return fd;
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (pid_text && (e == ENOENT || e == ECONNREFUSED))
        fprintf(stderr, "tdbg: pid %s is not listening: start it with TDBG_LISTEN=1 (docs/attach.md); "
                        "no socket at %s\n", pid_text, path);
    else if (e == ENOENT || e == ECONNREFUSED)
        fprintf(stderr, "tdbg: nothing listens on %s (%s): is the run started with TDBG_LISTEN=1 still "
                        "going? (docs/attach.md)\n", path, strerror(e));
    else if (e == EACCES || e == EPERM)
        fprintf(stderr, "tdbg: cannot connect to %s: %s (only the run's user can attach)\n", path, strerror(e));
    else
        fprintf(stderr, "tdbg: cannot connect to %s: %s\n", path, strerror(e));
    return -1;
}

static int connect_pid(const char *pid_text)
{
    char *end;
    long pid = strtol(pid_text, &end, 10);
    if (*end || pid <= 0 || pid > 1 << 30) {
        fprintf(stderr, "tdbg: attach: '%s' is no pid\n", pid_text);
        return -1;
    }
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
        fprintf(stderr, "tdbg: attach: no process with pid %ld\n", pid);
        return -1;
    }
    char path[256];
    if (te_listen_socket_path((int)pid, path, sizeof path) != 0) {
        fprintf(stderr, "tdbg: attach: XDG_RUNTIME_DIR is too long for a socket's path\n");
        return -1;
    }
    struct stat st;
    if (stat(path, &st) != 0 && errno == EACCES) {
        fprintf(stderr, "tdbg: cannot attach to pid %ld: %s: %s (only the run's user can attach)\n", pid, path,
                strerror(errno));
        return -1;
    }
    return connect_unix(path, pid_text);
}

static int connect_tcp(const char *target)
{
    const char *hp = target + 4, *colon = strrchr(hp, ':');
    if (!colon || colon == hp || !colon[1]) {
        fprintf(stderr, "tdbg: attach: %s: expected tcp:HOST:PORT\n", target);
        return -1;
    }
    char host[128];
    snprintf(host, sizeof host, "%.*s", (int)(colon - hp), hp);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1] */
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "tdbg: attach: %s: %s\n", target, gai_strerror(rc));
        return -1;
    }
    int fd = -1, e = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        fprintf(stderr, "tdbg: cannot connect to %s: %s%s\n", target, strerror(e),
                e == ECONNREFUSED ? " (is the run listening there? docs/attach.md)" : "");
    return fd;
}

/* The token file's first line. */
static bool read_token(const char *path, char *tok, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tdbg: attach: --token-file %s: %s\n", path, strerror(errno));
        return false;
    }
    bool ok = fgets(tok, (int)n, f) != NULL;
    fclose(f);
    if (!ok) {
        fprintf(stderr, "tdbg: attach: --token-file %s is empty\n", path);
        return false;
    }
    tok[strcspn(tok, "\r\n")] = '\0';
    return true;
}

/* ---- the session -------------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* The answer to a PROMPT: the script's next line (shown after the
 * prompt, as a launched session shows it), else the user's; NULL at the
 * end of input. batch: the script only, then `detach`. */
static char *answer(const char *prompt, bool batch, bool use_readline)
{
    if (script_pos < n_script || batch) {
        const char *l = script_pos < n_script ? script[script_pos++] : "detach";
        printf("%s%s\n", prompt, l);
        fflush(stdout);
        return strdup(l);
    }
    return term_line_read(prompt, use_readline);
}

static bool write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        s += (size_t)k;
        n -= (size_t)k;
    }
    return true;
}

/* --tui: what was typed, as KEYS; and the terminal's new size. 0, or -1
 * when the connection broke. The terminal gone (end of input): BYE,
 * and the run's END follows. */
static int send_keys(int fd, bool typed, bool *eof)
{
    char size[32];
    if (attach_term_resized(size, sizeof size) && te_wire_send(fd, TE_WIRE_RESIZE, size, strlen(size)) != 0)
        return -1;
    if (!typed || *eof)
        return 0;
    char keys[4096];
    ssize_t k = read(STDIN_FILENO, keys, sizeof keys);
    if (k < 0 && errno == EINTR)
        return 0;
    if (k <= 0) {
        *eof = true;
        return te_wire_send(fd, TE_WIRE_BYE, NULL, 0);
    }
    return te_wire_send(fd, TE_WIRE_KEYS, keys, (size_t)k);
}

/* Relays frames until the session ends; returns the exit status. */
static int relay(int fd, const char *target, bool batch)
{
    bool use_readline = !batch && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    char *buf = malloc(TE_WIRE_MAX + 1);
    if (!buf) {
        fprintf(stderr, "tdbg: out of memory\n");
        return 2;
    }
    int status = 2;
    bool keys_eof = false;
    for (;;) {
        if (interrupted) {
            interrupted = 0;
            if (te_wire_send(fd, TE_WIRE_INTR, NULL, 0) != 0)
                fprintf(stderr, "tdbg: cannot send the interrupt: %s\n", strerror(errno));
        }
        bool screen = attach_term_is_raw();
        struct pollfd pf[2] = { { .fd = fd, .events = POLLIN },
                                { .fd = screen && !keys_eof ? STDIN_FILENO : -1, .events = POLLIN } };
        int ready = poll(pf, 2, -1);
        if (screen && send_keys(fd, ready > 0 && pf[1].revents, &keys_eof) != 0) {
            attach_term_restore();
            fprintf(stderr, "tdbg: the connection to %s was lost: %s\n", target, strerror(errno));
            break;
        }
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "tdbg: poll: %s\n", strerror(errno));
            break;
        }
        if (!pf[0].revents)
            continue;
        int type = 0;
        size_t len;
        te_wire_status st = te_wire_recv(fd, &type, buf, TE_WIRE_MAX + 1, &len, FRAME_MS);
        if (st != TE_WIRE_FRAME || type != TE_WIRE_TERM)
            attach_term_restore(); /* the TUI left (or never came): the command line's terminal */
        if (st != TE_WIRE_FRAME) {
            fprintf(stderr, "tdbg: the connection to %s was lost: %s\n", target,
                    st == TE_WIRE_CLOSED ? "the run closed it" : te_error());
            break;
        }
        if (type == TE_WIRE_WELCOME) {
            /* the run's banner follows in an OUT frame */
        } else if (type == TE_WIRE_REFUSED) {
            fprintf(stderr, "tdbg: attach refused: %s\n", buf);
            break;
        } else if (type == TE_WIRE_TERM) {
            if (!screen && !attach_term_raw()) {
                fprintf(stderr, "tdbg: cannot set the terminal's modes for the TUI: %s\n", strerror(errno));
                break;
            }
            if (!write_all(STDOUT_FILENO, buf, len))
                break;
        } else if (type == TE_WIRE_OUT) {
            fwrite(buf, 1, len, stdout);
            fflush(stdout);
        } else if (type == TE_WIRE_STOP) {
            /* the same line came in the report's OUT already */
        } else if (type == TE_WIRE_PROMPT) {
            char *l = answer(buf, batch, use_readline);
            interrupted = 0; /* Ctrl-C at the prompt pauses nothing */
            int rc = l ? te_wire_send(fd, TE_WIRE_LINE, l, strlen(l)) : te_wire_send(fd, TE_WIRE_BYE, NULL, 0);
            if (!l) {
                printf("\n");
                fflush(stdout);
            }
            free(l);
            if (rc != 0) {
                fprintf(stderr, "tdbg: the connection to %s was lost: %s\n", target, strerror(errno));
                break;
            }
        } else if (type == TE_WIRE_END) {
            if (strcmp(buf, "detached") != 0)
                printf("tdbg: %s\n", buf);
            fflush(stdout);
            status = strcmp(buf, "detached") == 0 ? 0 : 1;
            break;
        } else {
            fprintf(stderr, "tdbg: the run sent a %s frame, which a run does not send: leaving\n",
                    te_wire_type_name(type));
            break;
        }
    }
    free(buf);
    return status;
}

/* --mpi PIDS: the job's session (job.c), the script as its lines. */
static int attach_job(const char *pids, const char *target, const char *token_file, bool batch, bool tui)
{
    if (target || token_file || tui) {
        fprintf(stderr, "tdbg: attach --mpi: %s%s goes with one run, not a job's pids\n",
                target ? "the target " : "", target ? target : token_file ? "--token-file" : "--tui");
        return 2;
    }
    size_t n = 1;
    for (int i = 0; i < n_script; i++)
        n += strlen(script[i]) + 1;
    char *text = malloc(n);
    if (!text) {
        fprintf(stderr, "tdbg: out of memory\n");
        return 2;
    }
    text[0] = '\0';
    for (int i = 0; i < n_script; i++)
        strcat(strcat(text, script[i]), "\n");
    int status = tdbg_job_attach(pids, text, batch);
    free(text);
    for (int i = 0; i < n_script; i++)
        free(script[i]);
    free(script);
    return status;
}

int tdbg_attach_main(int argc, char **argv)
{
    const char *target = NULL, *token_file = NULL, *pids = NULL;
    bool batch = false, tui = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((strcmp(a, "-x") == 0 || strcmp(a, "-ex") == 0 || strcmp(a, "--token-file") == 0 ||
             strcmp(a, "--mpi") == 0) && i + 1 < argc) {
            if (a[1] == 'x') {
                if (!add_file(argv[++i]))
                    return 2;
            } else if (a[1] == 'e') {
                add_line(argv[i + 1], strlen(argv[i + 1])), i++;
            } else if (a[2] == 'm') {
                pids = argv[++i];
            } else {
                token_file = argv[++i];
            }
        } else if (strcmp(a, "--batch") == 0 || strcmp(a, "--cli") == 0 || strcmp(a, "--tui") == 0) {
            batch = a[2] == 'b'; /* the last one given */
            tui = a[2] == 't';
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' || target) {
            fprintf(stderr, "tdbg: attach: %s '%s'%s\n", a[0] == '-' ? "unknown option" : "one target only, not",
                    a, a[0] == '-' && i + 1 == argc ? " (or its argument is missing)" : "");
            usage(stderr);
            return 2;
        } else {
            target = a;
        }
    }
    if (pids)
        return attach_job(pids, target, token_file, batch, tui);
    if (!target) {
        fprintf(stderr, "tdbg: attach: no run named (a pid, a socket's path or tcp:HOST:PORT)\n");
        usage(stderr);
        return 2;
    }
    bool tcp = strncmp(target, "tcp:", 4) == 0;
    char token[TOKEN_MAX + 2];
    if (tcp && !token_file) {
        fprintf(stderr, "tdbg: attach %s: needs --token-file FILE (the run printed its path)\n", target);
        return 2;
    }
    if (!tcp && token_file) {
        fprintf(stderr, "tdbg: attach: --token-file is for tcp:HOST:PORT; a Unix socket checks the user instead\n");
        return 2;
    }
    if (tcp && !read_token(token_file, token, sizeof token))
        return 2;
    int fd = tcp ? connect_tcp(target) : strchr(target, '/') ? connect_unix(target, NULL) : connect_pid(target);
    if (fd < 0)
        return 2;
    char why[160], term[128] = "";
    if (tui && !attach_term_usable(why, sizeof why)) {
        fprintf(stderr, "tdbg: attach --tui: %s; the command line instead\n", why);
        tui = false;
    }
    if (tui)
        attach_term_describe(term, sizeof term);
    char hello[256];
    int n = snprintf(hello, sizeof hello, "tdbg-attach 1 pid=%d mode=%s%s", (int)getpid(),
                     batch ? "batch" : tui ? "tui" : "cli", term);
    if (tui) /* the script goes first: the TUI asks for no line the client could answer */
        n += snprintf(hello + n, sizeof hello - (size_t)n, " script=%d", n_script);
    bool sent = te_wire_send(fd, TE_WIRE_HELLO, hello, (size_t)n) == 0 &&
                (!tcp || te_wire_send(fd, TE_WIRE_AUTH, token, strlen(token)) == 0);
    for (int i = 0; sent && tui && i < n_script; i++)
        sent = te_wire_send(fd, TE_WIRE_LINE, script[i], strlen(script[i])) == 0;
    if (!sent) {
        fprintf(stderr, "tdbg: cannot talk to %s: %s\n", target, strerror(errno));
        close(fd);
        return 2;
    }
    if (tui)
        script_pos = n_script;
    memset(token, 0, sizeof token);
    /* Ctrl-C pauses the run (INTR); it never ends the client. No
     * SA_RESTART: poll returns at once to send it. */
    struct sigaction sa = { .sa_handler = on_sigint };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int status = relay(fd, target, batch);
    close(fd);
    for (int i = 0; i < n_script; i++)
        free(script[i]);
    free(script);
    return status;
}
