/* tdbg_prof.c — tdbg_prof_main: the command line of `tdbg-prof`. Exit
 * status 0 success, 2 trouble (usage; a trace unreadable or damaged). */
#include "prof.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { RC_OK = 0, RC_TROUBLE = 2 };

static const char usage_text[] =
    "usage: tdbg-prof [--top N] [--peak-gflops X] [--json] FILE\n"
    "       tdbg-prof diff [--top N] [--json] A B\n"
    "FILE, A and B are the profiler's Chrome trace files (docs/profiler.md).\n"
    "--top N          rows per table (default 10; 0: all)\n"
    "--peak-gflops X  the machine's peak, for each op's fraction of it\n"
    "--json           one JSON object instead of the tables\n"
    "Exit status: 0 success, 2 trouble.\n";

static int usage(FILE *err, const char *why, const char *arg)
{
    if (why)
        fprintf(err, "tdbg-prof: %s%s%s\n", why, arg ? ": " : "", arg ? arg : "");
    fputs(usage_text, err);
    return RC_TROUBLE;
}

/* Loads file and nests its ops; false after a message on err. */
static bool load(prof_trace *t, const char *file, FILE *err)
{
    char why[PATH_MAX + 512];
    if (!prof_trace_load(t, file, why, sizeof why)) {
        fprintf(err, "tdbg-prof: %s\n", why);
        return false;
    }
    if (!prof_nest(t, why, sizeof why)) {
        fprintf(err, "tdbg-prof: %s\n", why);
        prof_trace_free(t);
        return false;
    }
    return true;
}

static int run_report(const char *file, const prof_opts *o, FILE *out, FILE *err)
{
    prof_trace t;
    if (!load(&t, file, err))
        return RC_TROUBLE;
    char why[PATH_MAX + 512];
    prof_step *steps;
    size_t n_steps;
    if (!prof_steps(&t, &steps, &n_steps, why, sizeof why)) {
        fprintf(err, "tdbg-prof: %s\n", why);
        prof_trace_free(&t);
        return RC_TROUBLE;
    }
    prof_report(&t, steps, n_steps, o, out);
    free(steps);
    prof_trace_free(&t);
    return RC_OK;
}

static int run_diff(const char *fa, const char *fb, const prof_opts *o, FILE *out, FILE *err)
{
    prof_trace a, b;
    if (!load(&a, fa, err))
        return RC_TROUBLE;
    if (!load(&b, fb, err)) {
        prof_trace_free(&a);
        return RC_TROUBLE;
    }
    prof_diff(&a, &b, o, out);
    prof_trace_free(&a);
    prof_trace_free(&b);
    return RC_OK;
}

int tdbg_prof_main(int argc, char **argv, FILE *out, FILE *err)
{
    prof_opts o = { .top = 10 };
    const char *pos[3];
    int n_pos = 0;
    bool diff = argc > 1 && !strcmp(argv[1], "diff");
    for (int i = diff ? 2 : 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, out);
            return RC_OK;
        } else if (!strcmp(a, "--json")) {
            o.json = true;
        } else if (!strcmp(a, "--top") || !strcmp(a, "--peak-gflops")) {
            if (i + 1 == argc)
                return usage(err, "missing value after", a);
            const char *v = argv[++i];
            char *end;
            errno = 0;
            if (!strcmp(a, "--top")) {
                long n = strtol(v, &end, 10);
                if (end == v || *end || errno || n < 0 || n > INT_MAX)
                    return usage(err, "--top wants a count (0 or more)", v);
                o.top = (int)n;
            } else {
                double x = strtod(v, &end);
                if (end == v || *end || errno || !isfinite(x) || x <= 0)
                    return usage(err, "--peak-gflops wants a positive number", v);
                if (diff)
                    return usage(err, "--peak-gflops is for the report, not diff", NULL);
                o.peak_gflops = x;
            }
        } else if (a[0] == '-' && a[1]) {
            return usage(err, "unknown option", a);
        } else if (n_pos == 2) {
            return usage(err, "too many files", a);
        } else {
            pos[n_pos++] = a;
        }
    }
    if (diff && n_pos != 2)
        return usage(err, "diff wants two trace files", NULL);
    if (!diff && n_pos != 1)
        return usage(err, n_pos ? "one trace file, or diff A B" : "no trace file given", NULL);
    return diff ? run_diff(pos[0], pos[1], &o, out, err) : run_report(pos[0], &o, out, err);
}
