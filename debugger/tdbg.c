/*
 * tdbg.c — the launcher: `tdbg [OPTIONS] -- PROGRAM [ARGS]` puts the
 * debugger's settings in the environment (TDBG=tui|cli|batch: the front
 * end, the TUI by default at a terminal) and execs PROGRAM; the engine in
 * PROGRAM loads the debugger when it starts (engine/plugin.c), so any
 * program linked with the engine can be debugged without rebuilding it.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TDBG_PLUGIN_PATH
#define TDBG_PLUGIN_PATH "libtdbg-debugger.so"
#endif

static void usage(FILE *f)
{
    fprintf(f, "usage: tdbg [-x FILE] [-ex CMD]... [--batch | --cli | --tui] -- PROGRAM [ARGS]\n"
               "Runs PROGRAM (any program linked with the tdbg engine) under the debugger.\n\n"
               "  -x FILE     run the commands in FILE first (one per line, # comments)\n"
               "  -ex CMD     run CMD first (repeatable; after -x files, in order)\n"
               "  --batch     run only those commands, without a prompt; exit 1 if the\n"
               "              program stopped on a breakpoint, else PROGRAM's status\n"
               "  --cli       the readline command line\n"
               "  --tui       the terminal UI (the default when stdin and stdout are\n"
               "              terminals; without one, the command line after a notice)\n"
               "  -h, --help  this text\n\n"
               "Without --batch the commands run first, then the prompt takes over (plain\n"
               "lines from stdin when it is not a terminal). TDBG=tui|cli|batch set by hand\n"
               "in a program's environment does the same as this launcher.\n");
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
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tdbg: -x %s: %s\n", path, strerror(errno));
        exit(2);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        size_t lead = strspn(line, " \t");
        if ((size_t)n > lead && line[lead] != '#')
            add_line(line + lead, (size_t)n - lead);
    }
    free(line);
    fclose(f);
}

/* The debugger library beside this program in a build tree, else installed. */
static const char *plugin_path(void)
{
    static char path[PATH_MAX + 64];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        snprintf(path, sizeof path, "%s/.libs/libtdbg-debugger.so", dirname(exe));
        if (access(path, R_OK) == 0)
            return path;
    }
    return TDBG_PLUGIN_PATH;
}

int main(int argc, char **argv)
{
    /* The TUI when there is a terminal to draw on and type into. */
    const char *mode = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO) ? "tui" : "cli";
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
    if (setenv("TDBG", mode, 1) != 0 || setenv("TDBG_SCRIPT", script ? script : "", 1) != 0 ||
        (!getenv("TDBG_PLUGIN") && setenv("TDBG_PLUGIN", plugin_path(), 1) != 0)) {
        fprintf(stderr, "tdbg: cannot set the environment: %s\n", strerror(errno));
        return 2;
    }
    execvp(argv[i], argv + i);
    fprintf(stderr, "tdbg: cannot run %s: %s\n", argv[i], strerror(errno));
    return 2;
}
