/* diff_opts.c — tdbg-diff's command line: options, the usage text, the
 * metric names and the --map file. A bad option is a usage error, exit 2. */
#include "diff.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const diff_metric_names[DIFF_M_COUNT] = {
    [DIFF_M_MAX_ABS] = "max_abs",
    [DIFF_M_MAX_ABS_INDEX] = "max_abs_index",
    [DIFF_M_MEAN_ABS] = "mean_abs",
    [DIFF_M_MAX_REL] = "max_rel",
    [DIFF_M_RMSE] = "rmse",
    [DIFF_M_COSINE] = "cosine",
    [DIFF_M_N_FAIL] = "n_fail",
    [DIFF_M_FRAC_FAIL] = "frac_fail",
    [DIFF_M_FRAC_REL_LOW] = "frac_rel_1e-3",
    [DIFF_M_FRAC_REL_HIGH] = "frac_rel_5e-3",
    [DIFF_M_MAX_ULP] = "max_ulp",
    [DIFF_M_NAN_A] = "nan_a",
    [DIFF_M_NAN_B] = "nan_b",
    [DIFF_M_INF_A] = "inf_a",
    [DIFF_M_INF_B] = "inf_b",
    [DIFF_M_MIN_ATOL] = "min_atol",
    [DIFF_M_MIN_RTOL] = "min_rtol",
};

static const char usage_text[] =
    "usage: tdbg-diff [OPTIONS] DUMP_A DUMP_B\n"
    "       tdbg-diff [--ranks-options] --ranks DIR\n"
    "Compares two tdbg dumps (run directories or step files) tensor by tensor, in A's\n"
    "execution order, and names the ops where they part. A is the reference.\n"
    "  --atol X, --rtol X      a tensor passes when |b - a| <= atol + rtol * |a| everywhere;\n"
    "                          defaults by the lower precision of the pair: f32 1e-05 and\n"
    "                          1.3e-06, f16 1e-05 and 1e-03, bf16 1e-05 and 1.6e-02, i32 exact;\n"
    "                          f16/bf16 with f32: atol 1e-05 plus 8 ulps of the lower one\n"
    "  --ulp K                 across precisions: |b - a| <= atol + K * ulp_low(|a|);\n"
    "                          0: the lower precision's rtol instead\n"
    "  --ops GLOB,...          only these ops (globs on op names; type:TYPE on op types)\n"
    "                          or tensors (conv2/bn:in0, /conv2/bn/in0, param:NAME)\n"
    "  --steps SPEC            only these steps: N, A-B, every:N, A-B:every:N, joined by | or ,\n"
    "  --io inputs|outputs|both  which tensors of each op (both)\n"
    "  --metrics LIST          the table's and CSV's metric columns, comma separated, or all\n"
    "                          (table: max_abs,max_rel,cosine; CSV: all; JSON always all)\n"
    "  --first                 stop after the first divergent tensor\n"
    "  --map FILE              rename B's ops to A's names: 'B_NAME A_NAME' on each line\n"
    "  --format table|csv|json (table)\n"
    "  --summary               print the summary only\n"
    "  --color auto|always|never  colour the table (auto: on a terminal, unless NO_COLOR)\n"
    "  -q, --quiet             print nothing: the exit status tells\n"
    "  --ranks DIR             a data-parallel dump (DIR/rank-0, rank-1, ...): every rank against\n"
    "                          rank 0; update, AllReduce and Broadcast outputs must agree bit for\n"
    "                          bit (with --steps, --ops, --io, -q). A data-parallel dump as DUMP_A\n"
    "                          or DUMP_B is compared as one run, its ranks combined\n"
    "Exit status: 0 everything compared is within tolerance, 1 something differs, 2 trouble.\n";

static int usage(FILE *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage(FILE *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tdbg-diff: ", err);
    vfprintf(err, fmt, ap);
    va_end(ap);
    fprintf(err, "\n%s", usage_text);
    return DIFF_RC_TROUBLE;
}

/* ---- the --map file --------------------------------------------------------------- */

static bool map_add(diff_map *m, const char *from, const char *to)
{
    struct diff_map_entry *e = realloc(m->e, (size_t)(m->n + 1) * sizeof *e);
    if (!e)
        return false;
    m->e = e;
    e = &m->e[m->n++];
    size_t fl = strlen(from), tl = strlen(to);
    e->prefix = fl >= 2 && tl >= 2 && strcmp(from + fl - 2, "/*") == 0 &&
                strcmp(to + tl - 2, "/*") == 0;
    snprintf(e->from, sizeof e->from, "%.*s", (int)(e->prefix ? fl - 1 : fl), from);
    snprintf(e->to, sizeof e->to, "%.*s", (int)(e->prefix ? tl - 1 : tl), to);
    return true;
}

/* Reads lines "B_NAME A_NAME" ('#' starts a comment); false with why naming
 * the file and line. */
static bool map_load(diff_map *m, const char *path, char *why, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, n, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    char line[1024];
    bool ok = true;
    for (int no = 1; ok && fgets(line, sizeof line, f); no++) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *save = NULL, *field[3] = { NULL, NULL, NULL };
        int k = 0;
        for (char *t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save))
            if (k < 3)
                field[k++] = t;
        if (k == 0)
            continue;
        if (k != 2 || strlen(field[0]) >= TE_NAME_MAX || strlen(field[1]) >= TE_NAME_MAX) {
            snprintf(why, n, "%s:%d: expected 'B_NAME A_NAME' (an op of B, then its name in A)",
                     path, no);
            ok = false;
        } else if (!map_add(m, field[0], field[1])) {
            snprintf(why, n, "%s: out of memory", path);
            ok = false;
        }
    }
    fclose(f);
    return ok;
}

/* Exact entries first, then the longest prefix. */
static const char *map_one(const diff_map *m, const char *name, char *buf, size_t n)
{
    const struct diff_map_entry *best = NULL;
    for (int i = 0; i < m->n; i++) {
        const struct diff_map_entry *e = &m->e[i];
        if (!e->prefix && strcmp(e->from, name) == 0) {
            snprintf(buf, n, "%s", e->to);
            return buf;
        }
        if (e->prefix && strncmp(e->from, name, strlen(e->from)) == 0 &&
            (!best || strlen(e->from) > strlen(best->from)))
            best = e;
    }
    if (!best)
        return NULL;
    snprintf(buf, n, "%s%s", best->to, name + strlen(best->from));
    return buf;
}

const char *diff_map_apply(const diff_map *m, const char *name, char *buf, size_t n)
{
    if (m->n > 0 && map_one(m, name, buf, n))
        return buf;
    /* A backward op follows its forward op: grad/X as grad/ + X's new name. */
    char inner[TE_NAME_MAX];
    if (m->n > 0 && strncmp(name, "grad/", 5) == 0 && map_one(m, name + 5, inner, sizeof inner)) {
        snprintf(buf, n, "grad/%s", inner);
        return buf;
    }
    snprintf(buf, n, "%s", name);
    return buf;
}

/* ---- options ---------------------------------------------------------------------------- */

/* A tolerance: a finite number >= 0. */
static bool parse_tol(const char *v, double *x)
{
    char *end;
    errno = 0;
    *x = strtod(v, &end);
    return end != v && !*end && !errno && isfinite(*x) && *x >= 0;
}

/* Parses "KEY=VALUE" as a dump spec item into s; why without the column. */
static bool spec_item(const char *key, const char *v, dump_spec *s, char *why, size_t n)
{
    char text[4096], err[512];
    snprintf(text, sizeof text, "%s=%s", key, v);
    if (dump_spec_parse(text, s, err, sizeof err))
        return true;
    const char *msg = err;
    if (strncmp(msg, "column ", 7) == 0 && strstr(msg, ": "))
        msg = strstr(msg, ": ") + 2;
    snprintf(why, n, "%s", msg);
    return false;
}

static int parse_metrics(diff_opts *o, const char *v, FILE *err)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", v);
    memset(o->metric, 0, sizeof o->metric);
    char *save = NULL;
    int n = 0;
    for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save), n++) {
        if (strcmp(t, "all") == 0) {
            for (int m = 0; m < DIFF_M_COUNT; m++)
                o->metric[m] = true;
            continue;
        }
        int m = 0;
        while (m < DIFF_M_COUNT && strcmp(t, diff_metric_names[m]) != 0)
            m++;
        if (m == DIFF_M_COUNT) {
            char list[512] = "";
            for (int k = 0; k < DIFF_M_COUNT; k++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "",
                         diff_metric_names[k]);
            return usage(err, "unknown metric '%s' (one of: %s, all)", t, list);
        }
        o->metric[m] = true;
    }
    if (n == 0)
        return usage(err, "--metrics needs at least one metric");
    o->metrics_given = true;
    return DIFF_RC_SAME;
}

/* The options that take a value. */
static const char *const valued[] = { "--atol", "--rtol", "--ulp", "--ops", "--steps", "--io", "--metrics",
                                      "--map", "--format", "--color", "--ranks", NULL };

static int option(diff_opts *o, const char *name, const char *v, FILE *err)
{
    char why[1024];
    if (strcmp(name, "--atol") == 0 || strcmp(name, "--rtol") == 0 || strcmp(name, "--ulp") == 0) {
        double x;
        if (!parse_tol(v, &x))
            return usage(err, "bad %s '%s' (a number >= 0, e.g. %s)", name, v,
                         name[2] == 'u' ? "8" : "1e-5");
        *(name[2] == 'a' ? &o->tol.atol : name[2] == 'r' ? &o->tol.rtol : &o->tol.ulp) = x;
    } else if (strcmp(name, "--ops") == 0) {
        dump_spec s;
        if (!spec_item("ops", v, &s, why, sizeof why))
            return usage(err, "bad --ops '%s': %s", v, why);
        o->sel.n_ops = s.n_ops;
        memcpy(o->sel.ops, s.ops, sizeof s.ops);
        o->has_ops = true;
    } else if (strcmp(name, "--steps") == 0) {
        dump_spec s;
        if (!spec_item("steps", v, &s, why, sizeof why))
            return usage(err, "bad --steps '%s': %s", v, why);
        o->sel.n_steps = s.n_steps;
        memcpy(o->sel.steps, s.steps, sizeof s.steps);
        o->has_steps = true;
    } else if (strcmp(name, "--io") == 0) {
        if (strcmp(v, "inputs") == 0)
            o->io = DUMP_IO_INPUTS;
        else if (strcmp(v, "outputs") == 0)
            o->io = DUMP_IO_OUTPUTS;
        else if (strcmp(v, "both") == 0)
            o->io = DUMP_IO_BOTH;
        else
            return usage(err, "bad --io '%s' (inputs, outputs or both)", v);
    } else if (strcmp(name, "--metrics") == 0) {
        return parse_metrics(o, v, err);
    } else if (strcmp(name, "--map") == 0) {
        if (!map_load(&o->map, v, why, sizeof why))
            return usage(err, "--map: %s", why);
    } else if (strcmp(name, "--format") == 0) {
        if (strcmp(v, "table") == 0)
            o->format = DIFF_TABLE;
        else if (strcmp(v, "csv") == 0)
            o->format = DIFF_CSV;
        else if (strcmp(v, "json") == 0)
            o->format = DIFF_JSON;
        else
            return usage(err, "bad --format '%s' (table, csv or json)", v);
    } else if (strcmp(name, "--ranks") == 0) {
        o->ranks = v;
    } else if (strcmp(name, "--color") == 0 || strcmp(name, "--colour") == 0) {
        if (strcmp(v, "auto") == 0)
            o->color = -1;
        else if (strcmp(v, "always") == 0)
            o->color = 1;
        else if (strcmp(v, "never") == 0)
            o->color = 0;
        else
            return usage(err, "bad --color '%s' (auto, always or never)", v);
    }
    return DIFF_RC_SAME;
}

int diff_opts_parse(int argc, char **argv, diff_opts *o, bool *done, FILE *out, FILE *err)
{
    memset(o, 0, sizeof *o);
    char why[512];
    dump_spec_parse("", &o->sel, why, sizeof why);   /* the defaults: every op, every step */
    o->tol = (diff_tol){ -1, -1, -1, TE_F32 };
    o->io = DUMP_IO_BOTH;
    o->color = -1;
    o->metric[DIFF_M_MAX_ABS] = o->metric[DIFF_M_MAX_REL] = o->metric[DIFF_M_COSINE] = true;
    *done = false;
    const char *pos[2];
    int n_pos = 0;
    bool options = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!options || a[0] != '-' || strcmp(a, "-") == 0) {
            if (n_pos == 2)
                return usage(err, "too many arguments: '%s' (two dumps are compared)", a);
            pos[n_pos++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            options = false;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, out);
            *done = true;
            return DIFF_RC_SAME;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            o->quiet = true;
        } else if (strcmp(a, "--first") == 0) {
            o->first = true;
        } else if (strcmp(a, "--summary") == 0) {
            o->summary_only = true;
        } else {
            size_t len = strcspn(a, "=");
            int k = 0;
            while (valued[k] && (strlen(valued[k]) != len || strncmp(a, valued[k], len) != 0))
                k++;
            if (!valued[k] && len == 8 && strncmp(a, "--colour", 8) == 0)
                k = 9;   /* --color's other spelling */
            if (!valued[k])
                return usage(err, "unknown option '%s'", a);
            const char *v = a[len] == '=' ? a + len + 1 : i + 1 < argc ? argv[++i] : NULL;
            if (!v)
                return usage(err, "option '%s' needs a value", valued[k]);
            int rc = option(o, valued[k], v, err);
            if (rc != DIFF_RC_SAME)
                return rc;
        }
    }
    if (o->ranks && n_pos > 0)
        return usage(err, "--ranks DIR compares the ranks of one dump: no DUMP_A DUMP_B with it ('%s')", pos[0]);
    if (o->ranks && (o->format != DIFF_TABLE || o->map.n || o->first || o->summary_only || o->metrics_given))
        return usage(err, "--ranks takes --steps, --ops, --io and -q only (a table of its own)");
    if (o->ranks)
        return DIFF_RC_SAME;
    if (n_pos < 2)
        return usage(err, "%s", n_pos == 0 ? "no dumps given (DUMP_A DUMP_B)"
                                           : "only one dump given (DUMP_A DUMP_B)");
    o->a = pos[0];
    o->b = pos[1];
    if (o->format == DIFF_CSV && !o->metrics_given)
        for (int m = 0; m < DIFF_M_COUNT; m++)
            o->metric[m] = true;
    return DIFF_RC_SAME;
}

void diff_opts_free(diff_opts *o)
{
    free(o->map.e);
    o->map.e = NULL;
    o->map.n = 0;
}
