/* diff.c — `tdbg-prof diff A B`: per op name and per op type, the self
 * time per step in each capture (self time, so that nested ops are not
 * counted twice; per step, so that captures of different lengths
 * compare), the change in ms and in %, sorted by the size of the change;
 * an op found in one capture only is listed with "only A" or "only B".
 * A capture without step events counts as one step. */
#include "prof.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct drow {
    const char *key;
    double a, b;        /* ms per step */
    bool in_a, in_b;
} drow;

static int by_change(const void *pa, const void *pb)
{
    const drow *x = pa, *y = pb;
    double dx = fabs(x->b - x->a), dy = fabs(y->b - y->a);
    if (dx != dy)
        return dx > dy ? -1 : 1;
    return strcmp(x->key, y->key);
}

static double steps_of(const prof_trace *t) { return t->n_steps ? (double)t->n_steps : 1; }

/* Merges the rows of both captures (each sorted by key) into *out; returns the count. */
static size_t merge(const prof_trace *ta, const prof_trace *tb, prof_key key, drow **out)
{
    prof_row *ra, *rb;
    size_t na = prof_rows(ta, key, &ra), nb = prof_rows(tb, key, &rb), i = 0, j = 0, n = 0;
    drow *d = calloc(na + nb + 1, sizeof *d);
    while (d && (i < na || j < nb)) {
        int c = i == na ? 1 : j == nb ? -1 : strcmp(ra[i].key, rb[j].key);
        drow *r = &d[n++];
        r->key = c <= 0 ? ra[i].key : rb[j].key;
        if (c <= 0) {
            r->a = ra[i++].self / 1e3 / steps_of(ta);
            r->in_a = true;
        }
        if (c >= 0) {
            r->b = rb[j++].self / 1e3 / steps_of(tb);
            r->in_b = true;
        }
    }
    free(ra);
    free(rb);
    if (d)
        qsort(d, n, sizeof *d, by_change);
    *out = d;
    return d ? n : 0;
}

/* "+12.5%", "only A", "only B", or "-" for a change from zero. */
static const char *pct_str(const drow *r, char *buf, size_t n)
{
    if (!r->in_b)
        return "only A";
    if (!r->in_a)
        return "only B";
    if (r->a <= 0)
        return "-";
    snprintf(buf, n, "%+.1f%%", 100 * (r->b - r->a) / r->a);
    return buf;
}

static void text_table(FILE *out, const char *title, const drow *d, size_t n, const prof_opts *o)
{
    size_t k = o->top > 0 && (size_t)o->top < n ? (size_t)o->top : n;
    char pct[32];
    fprintf(out, "\n%s\n      A ms       B ms  change ms  change %%  name\n", title);
    for (size_t i = 0; i < k; i++)
        fprintf(out, "%10.3f %10.3f %+10.3f %9s  %s\n", d[i].a, d[i].b, d[i].b - d[i].a,
                pct_str(&d[i], pct, sizeof pct), d[i].key);
    if (k < n)
        fprintf(out, "  (%zu more)\n", n - k);
}

static json_t *json_table(const drow *d, size_t n, const prof_opts *o)
{
    size_t k = o->top > 0 && (size_t)o->top < n ? (size_t)o->top : n;
    json_t *a = json_array();
    for (size_t i = 0; i < k; i++) {
        json_t *r = json_pack("{s:s, s:f, s:f, s:f}", "name", d[i].key, "a_ms", d[i].a, "b_ms", d[i].b,
                              "change_ms", d[i].b - d[i].a);
        json_object_set_new(r, "change_pct", d[i].in_a && d[i].in_b && d[i].a > 0
                                                 ? json_real(100 * (d[i].b - d[i].a) / d[i].a) : json_null());
        json_object_set_new(r, "only", !d[i].in_b ? json_string("A") : !d[i].in_a ? json_string("B") : json_null());
        json_array_append_new(a, r);
    }
    return a;
}

void prof_diff(const prof_trace *a, const prof_trace *b, const prof_opts *o, FILE *out)
{
    drow *names, *types;
    size_t n_names = merge(a, b, PROF_BY_NAME, &names), n_types = merge(a, b, PROF_BY_TYPE, &types);
    drow total = { .key = "total", .a = prof_op_time(a) / 1e3 / steps_of(a),
                   .b = prof_op_time(b) / 1e3 / steps_of(b), .in_a = true, .in_b = true };
    if (o->json) {
        json_t *j = json_pack("{s:s, s:s, s:I, s:I}", "a", a->file, "b", b->file, "a_steps", (json_int_t)a->n_steps,
                              "b_steps", (json_int_t)b->n_steps);
        json_object_set_new(j, "ops", json_table(names, n_names, o));
        json_object_set_new(j, "types", json_table(types, n_types, o));
        json_t *tot = json_table(&total, 1, o);
        json_object_set(j, "total", json_array_get(tot, 0));
        json_decref(tot);
        json_dumpf(j, out, JSON_INDENT(1) | JSON_REAL_PRECISION(12));
        fputc('\n', out);
        json_decref(j);
    } else {
        fprintf(out, "A: %s (%zu steps)\nB: %s (%zu steps)\nself time per step, largest change first\n", a->file,
                a->n_steps, b->file, b->n_steps);
        text_table(out, "by op", names, n_names, o);
        text_table(out, "by op type", types, n_types, o);
        char pct[32];
        fprintf(out, "\n%10.3f %10.3f %+10.3f %9s  total\n", total.a, total.b, total.b - total.a,
                pct_str(&total, pct, sizeof pct));
    }
    free(names);
    free(types);
}
