/*
 * provenance.c — which sample did it: the rows of a batch that hold bad
 * values, named by row, dataset index and source, for the stop report and
 * `info batch`; and the checks of `break data`.
 */
#include "cmd.h"
#include "session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_SHOWN 8 /* rows a report names before "and N more" */

/* Does row r of t (b's x or y) hold a bad value? */
static bool row_bad(const te_batch *b, const te_tensor *t, int64_t r, int64_t per_row)
{
    if (t->dtype == TE_I32) {
        const int classes = b->dataset ? b->dataset->n_classes : 0;
        for (int64_t k = 0; k < per_row && classes > 0; k++) {
            const int32_t v = ((const int32_t *)t->data)[r * per_row + k];
            if (v < 0 || v >= classes)
                return true;
        }
        return false;
    }
    for (int64_t k = 0; k < per_row; k++)
        if (!isfinite(te_get(t, r * per_row + k)))
            return true;
    return false;
}

int64_t dbg_batch_bad_rows(const te_batch *b, const te_tensor *t, int64_t *rows, int max)
{
    if (!b || !t || !t->data || t->device != TE_DEV_CPU || b->rows <= 0 || t->numel % b->rows)
        return 0;
    if (t->dtype != TE_I32 && !te_dtype_is_float(t->dtype))
        return 0;
    const int64_t per_row = t->numel / b->rows;
    int64_t n = 0;
    for (int64_t r = 0; r < b->rows; r++)
        if (row_bad(b, t, r, per_row)) {
            if (n < max)
                rows[n] = r;
            n++;
        }
    return n;
}

void dbg_describe_rows(const te_batch *b, const int64_t *rows, int n, int64_t total)
{
    for (int i = 0; i < n && i < ROWS_SHOWN; i++) {
        const int64_t r = rows[i];
        char src[256];
        te_batch_source(b, r, src, sizeof src);
        fprintf(dbg_out, "    row %lld: sample %lld%s%s", (long long)r, (long long)b->index[r], src[0] ? ", " : "",
                src);
        if (b->drawn[r] != b->index[r])
            fprintf(dbg_out, " (in place of sample %lld: data skip)", (long long)b->drawn[r]);
        fprintf(dbg_out, "\n");
    }
    if (total > ROWS_SHOWN)
        fprintf(dbg_out, "    ... and %lld more rows\n", (long long)(total - ROWS_SHOWN));
}

/* s's sample from row r of b. */
static void set_sample(dbg_stop *s, const te_batch *b, int64_t r, int64_t bad_rows)
{
    s->batch = b;
    s->row = r;
    s->sample = b->index[r];
    s->bad_rows = bad_rows;
    te_batch_source(b, r, s->source, sizeof s->source);
}

/* Is t (a batch tensor with bad rows) the one? Sets s from its first bad row. */
static bool sample_of(dbg_stop *s, const te_tensor *t)
{
    const te_batch *b = te_batch_of(t);
    int64_t row;
    int64_t n = b ? dbg_batch_bad_rows(b, t, &row, 1) : 0;
    if (n > 0)
        set_sample(s, b, row, n);
    return n > 0;
}

void dbg_stop_sample(dbg_stop *s, const te_op_record *rec, const te_tensor *t)
{
    if (t) {
        sample_of(s, t);
        return;
    }
    for (int i = 0; rec && i < rec->n_inputs; i++)
        if (rec->inputs[i] && sample_of(s, rec->inputs[i]))
            return;
    for (int i = 0; rec && i < rec->n_reads; i++)
        if (rec->reads[i] && sample_of(s, rec->reads[i]))
            return;
}

/* ---- break data ------------------------------------------------------------ */

bool dbg_data_check_parse(const char *text, te_data_check *c, char *err, size_t n)
{
    *c = (te_data_check){ 0 };
    text = dbg_skip_space(text);
    if (!text[0]) {
        *c = (te_data_check){ .nonfinite = true, .label = true, .empty = true, .constant = true };
        return true;
    }
    for (const char *p = text; *p;) {
        char w[32];
        p = dbg_word(p, w, sizeof w);
        if (strcmp(w, "nonfinite") == 0)
            c->nonfinite = true;
        else if (strcmp(w, "label") == 0)
            c->label = true;
        else if (strcmp(w, "empty") == 0)
            c->empty = true;
        else if (strcmp(w, "constant") == 0)
            c->constant = true;
        else if (strcmp(w, "max") == 0 || strcmp(w, "min") == 0 || strcmp(w, "abs_max") == 0) {
            const bool min = w[1] == 'i';
            char op[8];
            p = dbg_word(p, op, sizeof op);
            if (strcmp(op, min ? "<" : ">") != 0) {
                snprintf(err, n, "'%s' takes '%s N', got '%s'", w, min ? "<" : ">", op);
                return false;
            }
            char num[64], *end;
            p = dbg_word(p, num, sizeof num);
            const float v = strtof(num, &end);
            if (!num[0] || *end || !isfinite(v)) {
                snprintf(err, n, "expected a number after '%s %s', got '%s'", w, op, num);
                return false;
            }
            if (w[0] == 'a') {
                c->above = c->below = true;
                c->hi = fabsf(v);
                c->lo = -fabsf(v);
            } else if (min) {
                c->below = true;
                c->lo = v;
            } else {
                c->above = true;
                c->hi = v;
            }
        } else {
            snprintf(err, n, "unknown check '%s': expected nonfinite, label, empty, constant, max > N, min < N or "
                     "abs_max > N, joined by 'or'", w);
            return false;
        }
        if (!*p)
            break;
        p = dbg_word(p, w, sizeof w);
        if (strcmp(w, "or") != 0 || !*p) {
            snprintf(err, n, "expected 'or' and another check, got '%s'", w);
            return false;
        }
    }
    return true;
}

void dbg_data_check_text(const te_data_check *c, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
#define ADD(...) (at += at < n ? (size_t)snprintf(buf + at, n - at, __VA_ARGS__) : 0)
    if (c->nonfinite)
        ADD("%snonfinite", at ? " or " : "");
    if (c->label)
        ADD("%slabel", at ? " or " : "");
    if (c->empty)
        ADD("%sempty", at ? " or " : "");
    if (c->constant)
        ADD("%sconstant", at ? " or " : "");
    if (c->above && c->below && c->hi == -c->lo)
        ADD("%sabs_max > %g", at ? " or " : "", (double)c->hi);
    else {
        if (c->above)
            ADD("%smax > %g", at ? " or " : "", (double)c->hi);
        if (c->below)
            ADD("%smin < %g", at ? " or " : "", (double)c->lo);
    }
#undef ADD
}

void dbg_data_checks_changed(void)
{
    te_data_check u = { .hi = INFINITY, .lo = -INFINITY };
    bool any = false;
    for (int i = 0; i < dbg.n_breaks; i++) {
        const dbg_break *b = &dbg.breaks[i];
        if (!b->enabled || b->kind != BK_DATA)
            continue;
        any = true;
        u.nonfinite |= b->data.nonfinite;
        u.label |= b->data.label;
        u.empty |= b->data.empty;
        u.constant |= b->data.constant;
        if (b->data.above) /* the lowest bound finds every breakpoint's values */
            u.hi = u.above ? fminf(u.hi, b->data.hi) : b->data.hi;
        if (b->data.below)
            u.lo = u.below ? fmaxf(u.lo, b->data.lo) : b->data.lo;
        u.above |= b->data.above;
        u.below |= b->data.below;
    }
    te_data_check_set(any ? &u : NULL);
}
