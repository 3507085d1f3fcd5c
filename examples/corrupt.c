/*
 * corrupt.c — --corrupt: bad samples planted in a training set, as a data
 * pipeline makes them (a NaN read from a broken record, a label outside
 * the classes, an empty record read as zeros, a value scaled twice), so
 * that the debugger's data checks and provenance can be shown and tested
 * on the built-in datasets. The dataset is wrapped: sample `index` comes
 * out altered, every other one as it was.
 */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { C_NAN, C_INF, C_LABEL, C_ZERO, C_SCALE } corrupt_kind;

typedef struct {
    corrupt_kind kind;
    int64_t index;
    double value;
    bool has_value;
} corruption;

typedef struct {
    const te_dataset *base;
    int n;
    corruption c[EX_MAX_CORRUPT];
} corrupt_state;

static const char *const kind_names[] = { "nan", "inf", "label", "zero", "scale" };

bool ex_corrupt_check(const char *spec, char *why, size_t n)
{
    corruption c;
    return ex_corrupt_parse(spec, &c, why, n);
}

/* KIND@sample=I[,value=X] into c; false with why. */
bool ex_corrupt_parse(const char *spec, void *out, char *why, size_t n)
{
    corruption *c = out;
    *c = (corruption){ .index = -1 };
    const char *at = strchr(spec, '@');
    size_t k = 0;
    while (k < sizeof kind_names / sizeof kind_names[0] &&
           (!at || strlen(kind_names[k]) != (size_t)(at - spec) || strncmp(spec, kind_names[k], (size_t)(at - spec))))
        k++;
    if (!at || k == sizeof kind_names / sizeof kind_names[0]) {
        snprintf(why, n, "expected KIND@sample=I[,value=X] with KIND nan, inf, label, zero or scale");
        return false;
    }
    c->kind = (corrupt_kind)k;
    for (const char *p = at + 1; *p;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char *end;
        if (strncmp(p, "sample=", 7) == 0) {
            c->index = strtoll(p + 7, &end, 10);
            if (end != p + len || c->index < 0) {
                snprintf(why, n, "sample= takes a dataset index >= 0, got '%.*s'", (int)len - 7, p + 7);
                return false;
            }
        } else if (strncmp(p, "value=", 6) == 0) {
            c->value = strtod(p + 6, &end);
            c->has_value = true;
            if (end != p + len || end == p + 6) {
                snprintf(why, n, "value= takes a number, got '%.*s'", (int)len - 6, p + 6);
                return false;
            }
        } else {
            snprintf(why, n, "unknown field '%.*s': expected sample=I or value=X", (int)len, p);
            return false;
        }
        p += len + (comma ? 1 : 0);
    }
    if (c->index < 0) {
        snprintf(why, n, "sample=I is missing");
        return false;
    }
    return true;
}

static void corrupt_get(const te_dataset *d, int64_t i, float *x, int32_t *y)
{
    const corrupt_state *s = d->state;
    s->base->get(s->base, i, x, y);
    int64_t numel = 1;
    for (int k = 0; k < d->ndim; k++)
        numel *= d->shape[k];
    for (int k = 0; k < s->n; k++) {
        const corruption *c = &s->c[k];
        if (c->index != i)
            continue;
        switch (c->kind) {
        case C_NAN: x[numel / 2] = NAN; break;
        case C_INF: x[numel / 2] = INFINITY; break;
        case C_LABEL: *y = c->has_value ? (int32_t)c->value : d->n_classes; break;
        case C_ZERO: memset(x, 0, (size_t)numel * sizeof *x); break;
        case C_SCALE:
            for (int64_t j = 0; j < numel; j++)
                x[j] *= c->has_value ? (float)c->value : 255.0f;
            break;
        }
    }
}

static void corrupt_source(const te_dataset *d, int64_t i, char *buf, size_t n)
{
    const corrupt_state *s = d->state;
    s->base->source(s->base, i, buf, n);
}

te_dataset *ex_corrupt(const te_dataset *d, const char *const *specs, int n_specs)
{
    te_dataset *w = malloc(sizeof *w);
    corrupt_state *s = calloc(1, sizeof *s);
    if (!w || !s) {
        free(w);
        free(s);
        return NULL;
    }
    *w = *d;
    s->base = d;
    char why[128];
    for (int k = 0; k < n_specs && k < EX_MAX_CORRUPT; k++)
        if (ex_corrupt_parse(specs[k], &s->c[s->n], why, sizeof why))
            s->n++;
    w->get = corrupt_get;
    w->source = d->source ? corrupt_source : NULL;
    w->state = s;
    return w;
}
