/*
 * data_check.c — what `break data` looks for in a batch: non-finite
 * values, labels outside the classes, empty records, a constant batch,
 * values beyond a bound. The loader runs the check in its workers (off the
 * training thread) with the spec in force when it built the batch; the
 * spec carries a generation so that te_loader_next checks again a batch
 * built under an older one.
 */
#include "te_internal.h"
#include "cpu/cpu_math.h" /* CPU_CLONES */

#include <math.h>
#include <pthread.h>
#include <stdint.h>
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

/* What one pass over a row saw, as bits: a non-finite value, a finite one
 * above hi or below lo, a non-zero one, one unlike `first`. One branch-free
 * pass the compiler vectorises; the element is looked for only when a row
 * holds an issue (rare), by first_at. Built for AVX-512, AVX2 and the
 * baseline: it reads every value of every batch. */
enum { SAW_NONFINITE = 1, SAW_ABOVE = 2, SAW_BELOW = 4, SAW_NONZERO = 8, SAW_OTHER = 16 };

CPU_CLONES static unsigned row_pass(const float *x, int64_t n, float hi, float lo, float first)
{
    unsigned nf = 0, above = 0, below = 0, nonzero = 0, other = 0;
#pragma omp simd reduction(| : nf, above, below, nonzero, other)
    for (int64_t k = 0; k < n; k++) {
        uint32_t bits;
        memcpy(&bits, &x[k], sizeof bits);
        const unsigned inf_nan = (bits & 0x7f800000u) == 0x7f800000u;
        nf |= inf_nan;
        above |= (x[k] > hi) & !inf_nan;
        below |= (x[k] < lo) & !inf_nan;
        nonzero |= x[k] != 0.0f;
        other |= x[k] != first;
    }
    return (nf ? SAW_NONFINITE : 0u) | (above ? SAW_ABOVE : 0u) | (below ? SAW_BELOW : 0u) |
           (nonzero ? SAW_NONZERO : 0u) | (other ? SAW_OTHER : 0u);
}

/* The first element of x (n of them) that issue i names. */
static int64_t first_at(te_data_issue i, const te_data_check *c, const float *x, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        if ((i == TE_DATA_NONFINITE && !isfinite(x[k])) || (i == TE_DATA_ABOVE && isfinite(x[k]) && x[k] > c->hi) ||
            (i == TE_DATA_BELOW && isfinite(x[k]) && x[k] < c->lo))
            return k;
    return 0;
}

/* The first issue of one row (TE_DATA_OK: none), in te_data_issue's order,
 * from what its pass saw. */
static te_data_issue row_issue(const te_data_check *c, unsigned saw, const int32_t *y, int classes)
{
    if (c->nonfinite && saw & SAW_NONFINITE)
        return TE_DATA_NONFINITE;
    if (c->label && y && classes > 0 && (*y < 0 || *y >= classes))
        return TE_DATA_LABEL;
    if (c->empty && !(saw & (SAW_NONZERO | SAW_NONFINITE)))
        return TE_DATA_EMPTY;
    if (c->above && saw & SAW_ABOVE)
        return TE_DATA_ABOVE;
    if (c->below && saw & SAW_BELOW)
        return TE_DATA_BELOW;
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
    const float hi = c->above ? c->hi : INFINITY, lo = c->below ? c->lo : -INFINITY;
    bool all_same = true; /* every value equal to the batch's first */
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * row_numel;
        const unsigned saw = row_pass(xr, row_numel, hi, lo, x[0]);
        all_same &= !(saw & (SAW_OTHER | SAW_NONFINITE));
        const te_data_issue i = row_issue(c, saw, y ? y + r : NULL, classes);
        if (i == TE_DATA_OK || f->bad_rows++ > 0)
            continue;
        f->issue = i;
        f->row = r;
        if (i == TE_DATA_LABEL) {
            f->element = r;
            f->value = y[r];
        } else if (i == TE_DATA_EMPTY) {
            f->element = r * row_numel;
            f->value = 0;
        } else {
            const int64_t k = first_at(i, c, xr, row_numel);
            f->element = r * row_numel + k;
            f->value = xr[k];
        }
    }
    if (f->issue == TE_DATA_OK && c->constant && rows * row_numel > 1 && all_same) {
        f->issue = TE_DATA_CONSTANT;
        f->element = 0;
        f->value = x[0];
    }
    return f->issue != TE_DATA_OK;
}
