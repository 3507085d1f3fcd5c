/*
 * dataset_csv.c — a dataset read from a CSV file, one record a line:
 * `features` numbers, then an integer label. Every record remembers its
 * line and byte offset, so a batch's provenance can name where a sample
 * came from (te_batch_source).
 *
 * What a real pipeline lets through is let through here too, for the
 * debugger to find: an empty field is a missing value (NaN), a number
 * beyond float's range is +-Inf, and a label is taken as written. What
 * cannot be read at all (text where a number goes, a record with another
 * number of fields) is an error naming the file, line and column.
 */
#include "te_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct csv_state {
    const char *path;   /* into the block, after the arrays */
    int64_t features;
    float *x;           /* [n, features] */
    int32_t *y;
    int64_t *line, *offset;
} csv_state;

/* Growing arrays while the file is read. */
typedef struct csv_read {
    float *x;
    int32_t *y;
    int64_t *line, *offset;
    int64_t n, cap, features;
} csv_read;

static void csv_get(const te_dataset *d, int64_t i, float *x, int32_t *y)
{
    const csv_state *s = d->state;
    memcpy(x, s->x + i * s->features, (size_t)s->features * sizeof *x);
    *y = s->y[i];
}

static void csv_source(const te_dataset *d, int64_t i, char *buf, size_t n)
{
    const csv_state *s = d->state;
    snprintf(buf, n, "%s:%lld (byte %lld)", s->path, (long long)s->line[i], (long long)s->offset[i]);
}

static bool grow(csv_read *r)
{
    if (r->n < r->cap)
        return true;
    int64_t cap = r->cap ? 2 * r->cap : 1024;
    float *x = realloc(r->x, (size_t)(cap * r->features) * sizeof *x);
    if (x)
        r->x = x;
    int32_t *y = x ? realloc(r->y, (size_t)cap * sizeof *y) : NULL;
    if (y)
        r->y = y;
    int64_t *line = y ? realloc(r->line, (size_t)cap * sizeof *line) : NULL;
    if (line)
        r->line = line;
    int64_t *off = line ? realloc(r->offset, (size_t)cap * sizeof *off) : NULL;
    if (off)
        r->offset = off;
    if (!off)
        return false;
    r->cap = cap;
    return true;
}

static bool blank(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p == end;
}

/* Fields of [p, end) split at commas: how many. */
static int64_t count_fields(const char *p, const char *end)
{
    int64_t n = 1;
    for (; p < end; p++)
        n += *p == ',';
    return n;
}

/* The field [p, q) without the blanks around it. */
static void trim(const char **p, const char **q)
{
    while (*p < *q && (**p == ' ' || **p == '\t'))
        (*p)++;
    while (*q > *p && ((*q)[-1] == ' ' || (*q)[-1] == '\t' || (*q)[-1] == '\r'))
        (*q)--;
}

/* A feature: NaN when empty; false when [p, q) is not a whole number. */
static bool parse_float(const char *p, const char *q, float *v)
{
    char tmp[64];
    if (p == q) {
        *v = NAN;
        return true;
    }
    if (q - p >= (long)sizeof tmp)
        return false;
    memcpy(tmp, p, (size_t)(q - p));
    tmp[q - p] = '\0';
    char *e;
    errno = 0;
    *v = strtof(tmp, &e);
    return *e == '\0' && e != tmp;
}

static bool parse_label(const char *p, const char *q, int32_t *v)
{
    char tmp[32];
    if (p == q || q - p >= (long)sizeof tmp)
        return false;
    memcpy(tmp, p, (size_t)(q - p));
    tmp[q - p] = '\0';
    char *e;
    errno = 0;
    long long l = strtoll(tmp, &e, 10);
    if (*e != '\0' || errno || l < INT32_MIN || l > INT32_MAX)
        return false;
    *v = (int32_t)l;
    return true;
}

/* One record line [p, end) at line `line`, byte `off`; false with the error set. */
static bool read_record(csv_read *r, const char *path, const char *p, const char *end, int64_t line, int64_t off)
{
    const int64_t fields = count_fields(p, end);
    if (fields != r->features + 1) {
        te_set_error(TE_ERR_ARG, "%s:%lld: %lld fields where the first record has %lld (%lld features and a label)",
                     path, (long long)line, (long long)fields, (long long)r->features + 1, (long long)r->features);
        return false;
    }
    if (!grow(r)) {
        te_set_error(TE_ERR_NOMEM, "%s: out of memory at record %lld", path, (long long)r->n + 1);
        return false;
    }
    const char *line_start = p;
    for (int64_t f = 0; f < fields; f++) {
        const char *q = memchr(p, ',', (size_t)(end - p));
        if (!q)
            q = end;
        const char *a = p, *b = q;
        trim(&a, &b);
        bool ok = f < r->features ? parse_float(a, b, &r->x[r->n * r->features + f]) : parse_label(a, b, &r->y[r->n]);
        if (!ok) {
            te_set_error(TE_ERR_ARG, "%s:%lld:%lld: '%.*s' is not %s", path, (long long)line,
                         (long long)(a - line_start) + 1, (int)(b - a < 40 ? b - a : 40), a,
                         f < r->features ? "a number" : "an integer label");
            return false;
        }
        p = q + 1;
    }
    r->line[r->n] = line;
    r->offset[r->n] = off;
    r->n++;
    return true;
}

/* Is [p, end) a header: a first field that is not a number? */
static bool header(const char *p, const char *end)
{
    const char *q = memchr(p, ',', (size_t)(end - p));
    const char *a = p, *b = q ? q : end;
    trim(&a, &b);
    float v;
    return a != b && !parse_float(a, b, &v);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        te_set_error(TE_ERR_IO, "te_dataset_csv: cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got = 1; buf && got > 0;) {
        if (n == cap) {
            char *more = realloc(buf, cap * 2);
            if (!more) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = more;
            cap *= 2;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        te_set_error(buf ? TE_ERR_IO : TE_ERR_NOMEM, "te_dataset_csv: cannot read %s: %s", path,
                     buf ? "read error" : "out of memory");
        return NULL;
    }
    *len = n;
    return buf;
}

static bool read_records(csv_read *r, const char *path, const char *buf, size_t len)
{
    int64_t line = 0;
    bool first = true, may_be_header = true;
    for (size_t at = 0; at < len;) {
        const char *p = buf + at, *nl = memchr(p, '\n', len - at), *end = nl ? nl : buf + len;
        const size_t next = (size_t)(end - buf) + 1;
        line++;
        if (!blank(p, end) && *p != '#') {
            if (may_be_header && header(p, end)) {
                may_be_header = false;
                at = next;
                continue;
            }
            may_be_header = false;
            if (first)
                r->features = count_fields(p, end) - 1;
            if (first && r->features < 1) {
                te_set_error(TE_ERR_ARG, "%s:%lld: a record needs at least one feature and a label", path,
                             (long long)line);
                return false;
            }
            if (first && r->features > INT32_MAX) {
                te_set_error(TE_ERR_ARG, "%s:%lld: too many fields", path, (long long)line);
                return false;
            }
            first = false;
            if (!read_record(r, path, p, end, line, (int64_t)at))
                return false;
        }
        at = next;
    }
    if (r->n == 0) {
        te_set_error(TE_ERR_ARG, "te_dataset_csv: %s has no records", path);
        return false;
    }
    return true;
}

static void read_free(csv_read *r)
{
    free(r->x);
    free(r->y);
    free(r->line);
    free(r->offset);
}

te_dataset *te_dataset_csv(const char *path, int classes)
{
    if (!path || classes < 0) {
        te_set_error(TE_ERR_ARG, "te_dataset_csv: %s", !path ? "the path is NULL" : "classes is negative");
        return NULL;
    }
    size_t len = 0;
    char *buf = read_file(path, &len);
    if (!buf)
        return NULL;
    csv_read r = { 0 };
    bool ok = read_records(&r, path, buf, len);
    free(buf);
    if (ok && classes == 0) {
        int32_t top = -1;
        for (int64_t i = 0; i < r.n; i++)
            top = r.y[i] > top ? r.y[i] : top;
        classes = top + 1;
        if (classes < 2) {
            te_set_error(TE_ERR_ARG, "te_dataset_csv: %s: the labels name fewer than 2 classes (the largest is %d)",
                         path, (int)top);
            ok = false;
        }
    }
    /* One block for the state, so te_dataset_free frees it all. */
    const size_t nx = (size_t)(r.n * r.features) * sizeof(float), ny = (size_t)r.n * sizeof(int32_t);
    const size_t n64 = (size_t)r.n * sizeof(int64_t), np = strlen(path) + 1;
    csv_state *s = ok ? malloc(sizeof *s + 2 * n64 + nx + ny + np) : NULL;
    te_dataset *d = s ? calloc(1, sizeof *d) : NULL;
    if (!d) {
        if (ok)
            te_set_error(TE_ERR_NOMEM, "te_dataset_csv: out of memory for %lld records of %s", (long long)r.n, path);
        free(s);
        read_free(&r);
        return NULL;
    }
    char *at = (char *)(s + 1);
    s->line = memcpy(at, r.line, n64);
    s->offset = memcpy(at += n64, r.offset, n64);
    s->x = memcpy(at += n64, r.x, nx);
    s->y = memcpy(at += nx, r.y, ny);
    s->path = memcpy(at += ny, path, np);
    s->features = r.features;
    read_free(&r);
    *d = (te_dataset){ .name = s->path, .size = r.n, .ndim = 1, .shape = { s->features }, .n_classes = classes,
                       .get = csv_get, .source = csv_source, .state = s };
    return d;
}
