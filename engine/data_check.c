/*
 * data_check.c — what `break data` looks for in a batch: non-finite
 * values, labels outside the classes, empty records, a constant batch,
 * values beyond a bound. The loader runs the check in its workers (off the
 * training thread) with the spec in force when it built the batch; the
 * spec carries a generation so that te_loader_next checks again a batch
 * built under an older one.
 */
#include "te_internal.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static pthread_mutex_t spec_mu = PTHREAD_MUTEX_INITIALIZER;
static te_data_check spec;
static bool spec_any;
static unsigned spec_gen = 1;

static const char *const issue_names[TE_DATA_ISSUE_COUNT] = {
    [TE_DATA_OK] = "ok", [TE_DATA_NONFINITE] = "nonfinite", [TE_DATA_LABEL] = "label",
    [TE_DATA_EMPTY] = "empty", [TE_DATA_CONSTANT] = "constant", [TE_DATA_ABOVE] = "max",
    [TE_DATA_BELOW] = "min",
};

const char *te_data_issue_name(te_data_issue i)
{
    return (unsigned)i < TE_DATA_ISSUE_COUNT ? issue_names[i] : "?";
}

static bool check_any(const te_data_check *c)
{
    return c && (c->nonfinite || c->label || c->empty || c->constant || c->above || c->below);
}

void te_data_check_set(const te_data_check *c)
{
    pthread_mutex_lock(&spec_mu);
    spec_any = check_any(c);
    spec = spec_any ? *c : (te_data_check){ 0 };
    spec_gen++;
    pthread_mutex_unlock(&spec_mu);
}

unsigned te_data_check_current(te_data_check *c)
{
    pthread_mutex_lock(&spec_mu);
    *c = spec;
    unsigned gen = spec_any ? spec_gen : 0;
    pthread_mutex_unlock(&spec_mu);
    return gen;
}

/* The first issue of one row (TE_DATA_OK: none) and its element. */
static te_data_issue row_issue(const te_data_check *c, const float *x, const int32_t *y, int64_t n, int classes,
                               int64_t *at, double *value)
{
    if (c->nonfinite)
        for (int64_t k = 0; k < n; k++)
            if (!isfinite(x[k])) {
                *at = k;
                *value = x[k];
                return TE_DATA_NONFINITE;
            }
    if (c->label && y && classes > 0 && (*y < 0 || *y >= classes)) {
        *at = 0;
        *value = *y;
        return TE_DATA_LABEL;
    }
    if (c->empty) {
        int64_t k = 0;
        while (k < n && x[k] == 0.0f)
            k++;
        if (k == n) {
            *at = 0;
            *value = 0;
            return TE_DATA_EMPTY;
        }
    }
    if (c->above || c->below)
        for (int64_t k = 0; k < n; k++) {
            if (c->above && isfinite(x[k]) && x[k] > c->hi) {
                *at = k;
                *value = x[k];
                return TE_DATA_ABOVE;
            }
            if (c->below && isfinite(x[k]) && x[k] < c->lo) {
                *at = k;
                *value = x[k];
                return TE_DATA_BELOW;
            }
        }
    return TE_DATA_OK;
}

bool te_data_check_rows(const te_data_check *c, const float *x, const int32_t *y, int64_t rows, int64_t row_numel,
                        int classes, te_data_finding *f)
{
    *f = (te_data_finding){ .row = -1, .element = -1 };
    if (!check_any(c))
        return false;
    if (rows <= 0) {
        if (c->empty)
            f->issue = TE_DATA_EMPTY;
        return f->issue != TE_DATA_OK;
    }
    for (int64_t r = 0; r < rows; r++) {
        int64_t at = 0;
        double v = 0;
        te_data_issue i = row_issue(c, x + r * row_numel, y ? y + r : NULL, row_numel, classes, &at, &v);
        if (i == TE_DATA_OK)
            continue;
        if (f->bad_rows++ == 0) {
            f->issue = i;
            f->row = r;
            f->element = i == TE_DATA_LABEL ? r : r * row_numel + at;
            f->value = v;
        }
    }
    if (f->issue == TE_DATA_OK && c->constant && rows * row_numel > 1) {
        const int64_t n = rows * row_numel;
        int64_t k = 1;
        while (k < n && x[k] == x[0])
            k++;
        if (k == n) {
            f->issue = TE_DATA_CONSTANT;
            f->element = 0;
            f->value = x[0];
        }
    }
    return f->issue != TE_DATA_OK;
}
