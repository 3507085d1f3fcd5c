/*
 * print.c — tensor references ("fc1/linear:out0[0, 1:3]"), numpy-style
 * printing of the selected elements, one-line statistics and histograms.
 */
#include "dbg.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define LINE_WIDTH 80
#define EDGE_ITEMS 3   /* shown at each end of a summarised dim, as numpy */
#define HIST_CHUNK 65536 /* elements a histogram reads at once */
#define ELEM_MAX 32    /* longest formatted element: "-2147483648", "-1.17549e-38" */

/* ---- parsing ----------------------------------------------------------- */

/* Writes the message into err; returns false for the caller to return. */
static bool refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

/* One token of the slice list: a punctuation character, a word (a run of
 * anything else up to a space or punctuation) or the end of the text. */
typedef struct token {
    const char *at;
    int len;       /* 0 at the end of the text */
    int col;       /* 1-based */
} token;

typedef struct lexer {
    const char *text, *p;
} lexer;

static bool is_punct(char c) { return c && strchr(",:[]", c) != NULL; }

static token next_token(lexer *lx)
{
    while (isspace((unsigned char)*lx->p))
        lx->p++;
    token k = { .at = lx->p, .col = (int)(lx->p - lx->text) + 1 };
    if (is_punct(*lx->p))
        k.len = 1;
    else
        while (lx->p[k.len] && !isspace((unsigned char)lx->p[k.len]) && !is_punct(lx->p[k.len]))
            k.len++;
    lx->p += k.len;
    return k;
}

static bool is_char(token k, char c) { return k.len == 1 && *k.at == c; }

/* The token quoted for a message. */
static const char *quote(token k, char *buf, size_t n)
{
    if (k.len == 0)
        snprintf(buf, n, "end of input");
    else
        snprintf(buf, n, "'%.*s'", k.len > 40 ? 40 : k.len, k.at);
    return buf;
}

static bool expected(token k, const char *what, char *err, size_t errlen)
{
    char q[64];
    return refuse(err, errlen, "column %d: expected %s, got %s", k.col, what, quote(k, q, sizeof q));
}

/* Is k a whole decimal integer? 0: no; 1: yes, in *v; -1: out of range. */
static int integer(token k, int64_t *v)
{
    bool neg = k.len > 0 && *k.at == '-';
    int i = k.len > 0 && (*k.at == '-' || *k.at == '+');
    if (i == k.len)
        return 0;
    for (int j = i; j < k.len; j++)
        if (!isdigit((unsigned char)k.at[j]))
            return 0;
    int64_t x = 0;
    for (; i < k.len; i++) {
        int d = k.at[i] - '0';
        if (x > (INT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *v = neg ? -x : x;
    return 1;
}

/* Reads an optional integer: true with *has set when k is one (k moves on),
 * true with *has clear when it is not, false (err written) when it is out of
 * range. */
static bool opt_integer(lexer *lx, token *k, int64_t *v, bool *has, char *err, size_t errlen)
{
    int r = integer(*k, v);
    if (r < 0) {
        char q[64];
        return refuse(err, errlen, "column %d: integer %s out of range", k->col, quote(*k, q, sizeof q));
    }
    *has = r == 1;
    if (*has)
        *k = next_token(lx);
    return true;
}

/* NAME: everything before the first '[', trimmed, non-empty, no spaces. */
static bool parse_name(const char *text, const char *end, dbg_ref *r, char *err, size_t errlen)
{
    const char *s = text, *e = end;
    while (s < e && isspace((unsigned char)*s))
        s++;
    while (e > s && isspace((unsigned char)e[-1]))
        e--;
    if (s == e)
        return refuse(err, errlen, "column %d: missing tensor name", (int)(s - text) + 1);
    for (const char *c = s; c < e; c++) {
        if (isspace((unsigned char)*c))
            return refuse(err, errlen, "column %d: space in tensor name '%.*s'",
                          (int)(c - text) + 1, (int)(e - s), s);
        if (*c == ']')
            return refuse(err, errlen, "column %d: ']' without '['", (int)(c - text) + 1);
    }
    if (e - s >= TE_NAME_MAX)
        return refuse(err, errlen, "column %d: tensor name longer than %d characters",
                      (int)(s - text) + 1, TE_NAME_MAX - 1);
    memcpy(r->name, s, (size_t)(e - s));
    r->name[e - s] = '\0';
    return true;
}

/* One entry: INT | [INT] ':' [INT] [':' [INT]]. k is its first token and
 * is left on the token after it. */
static bool parse_entry(lexer *lx, token *k, dbg_slice *s, char *err, size_t errlen)
{
    *s = (dbg_slice){ .step = 1 };
    if (!opt_integer(lx, k, &s->start, &s->has_start, err, errlen))
        return false;
    if (!is_char(*k, ':')) {
        if (!s->has_start)
            return expected(*k, "an integer, ':' or ']'", err, errlen);
        s->index = true;
        return is_char(*k, ',') || is_char(*k, ']') || expected(*k, "':', ',' or ']'", err, errlen);
    }
    *k = next_token(lx);
    if (!opt_integer(lx, k, &s->stop, &s->has_stop, err, errlen))
        return false;
    if (is_char(*k, ':')) {
        *k = next_token(lx);
        token at = *k;
        bool has_step;
        if (!opt_integer(lx, k, &s->step, &has_step, err, errlen))
            return false;
        if (has_step && s->step == 0)
            return refuse(err, errlen, "column %d: step 0 is not allowed", at.col);
        if (!has_step)
            s->step = 1;
        if (is_char(*k, ',') || is_char(*k, ']'))
            return true;
        return expected(*k, has_step ? "',' or ']'" : "an integer, ',' or ']'", err, errlen);
    }
    if (is_char(*k, ',') || is_char(*k, ']'))
        return true;
    return expected(*k, s->has_stop ? "':', ',' or ']'" : "an integer, ':', ',' or ']'", err, errlen);
}

bool dbg_ref_parse(const char *text, dbg_ref *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    const char *open = strchr(text, '[');
    if (!parse_name(text, open ? open : text + strlen(text), r, err, errlen))
        return false;
    if (!open)
        return true;
    lexer lx = { text, open + 1 };
    token k = next_token(&lx);
    while (!is_char(k, ']')) { /* k starts an entry */
        int64_t v;
        if (r->n_slices == TE_MAX_DIMS && (is_char(k, ':') || integer(k, &v) != 0))
            return refuse(err, errlen, "column %d: more than %d indices", k.col, TE_MAX_DIMS);
        if (r->n_slices == TE_MAX_DIMS)
            return expected(k, "']'", err, errlen);
        if (!parse_entry(&lx, &k, &r->slices[r->n_slices], err, errlen))
            return false;
        r->n_slices++;
        if (is_char(k, ','))
            k = next_token(&lx);
    }
    k = next_token(&lx);
    if (k.len) {
        char q[64];
        return refuse(err, errlen, "column %d: unexpected %s after ']'", k.col, quote(k, q, sizeof q));
    }
    return true;
}

/* ---- resolving ------------------------------------------------------------ */

static int64_t slice_len(const dbg_slice *s)
{
    if (s->index)
        return 1;
    if (s->step > 0)
        return s->stop > s->start ? (s->stop - s->start - 1) / s->step + 1 : 0;
    return s->start > s->stop ? (s->start - s->stop - 1) / -s->step + 1 : 0;
}

/* Python's slice.indices(). The result resolves to itself again: a stop
 * before element 0 is stored as "omitted", an empty backward slice as 0:0. */
static void resolve_slice(dbg_slice *s, int64_t size)
{
    int64_t lo = s->step > 0 ? 0 : -1, hi = s->step > 0 ? size : size - 1;
    if (s->has_start) {
        if (s->start < 0)
            s->start += size;
        s->start = s->start < lo ? lo : s->start > hi ? hi : s->start;
    } else {
        s->start = s->step > 0 ? 0 : size - 1;
    }
    if (s->has_stop) {
        if (s->stop < 0)
            s->stop += size;
        s->stop = s->stop < lo ? lo : s->stop > hi ? hi : s->stop;
    } else {
        s->stop = s->step > 0 ? size : -1;
    }
    if (s->step < 0 && s->stop == -1)
        s->has_stop = false;
    if (s->step < 0 && slice_len(s) == 0)
        *s = (dbg_slice){ .start = 0, .stop = 0, .step = s->step, .has_start = true, .has_stop = true };
}

bool dbg_ref_resolve(dbg_ref *r, const te_tensor *t, char *err, size_t errlen)
{
    if (r->n_slices > t->ndim)
        return refuse(err, errlen, "%d %s for a %d-d tensor", r->n_slices,
                      r->n_slices == 1 ? "index" : "indices", t->ndim);
    for (int d = 0; d < r->n_slices; d++) {
        dbg_slice *s = &r->slices[d];
        int64_t size = t->shape[d];
        if (s->index) {
            int64_t i = s->start < 0 ? s->start + size : s->start;
            if (i < 0 || i >= size)
                return refuse(err, errlen, "index %lld out of range for dim %d of size %lld",
                              (long long)s->start, d, (long long)size);
            s->start = i;
            s->stop = i + 1;
            s->step = 1;
        } else {
            resolve_slice(s, size);
        }
    }
    return true;
}

/* ---- printing values --------------------------------------------------------- */

/* The selection as a strided view of t's flat data. */
typedef struct view {
    int ndim;
    int64_t shape[TE_MAX_DIMS];
    int64_t stride[TE_MAX_DIMS];  /* in elements; negative for backward slices */
    int64_t offset;
    int64_t numel;
} view;

static void view_make(const te_tensor *t, const dbg_ref *r, view *v)
{
    int64_t strides[TE_MAX_DIMS], stride = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        strides[d] = stride;
        stride *= t->shape[d];
    }
    *v = (view){ .numel = 1 };
    for (int d = 0; d < t->ndim; d++) {
        const dbg_slice *s = d < r->n_slices ? &r->slices[d] : NULL;
        int64_t n = s ? slice_len(s) : t->shape[d];
        if (n > 0 && s)
            v->offset += s->start * strides[d];
        if (s && s->index)
            continue;
        v->shape[v->ndim] = n;
        v->stride[v->ndim] = (s ? s->step : 1) * strides[d];
        v->numel *= n;
        v->ndim++;
    }
}

/* Element k of raw, a host copy in t's dtype. */
static int format_elem(te_dtype dt, const void *raw, int64_t k, char *buf)
{
    if (dt == TE_I32)
        return snprintf(buf, ELEM_MAX, "%d", (int)((const int32_t *)raw)[k]);
    float x = dt == TE_F32 ? ((const float *)raw)[k]
              : dt == TE_F16 ? te_f16_to_f32(((const uint16_t *)raw)[k])
                             : te_bf16_to_f32(((const uint16_t *)raw)[k]);
    if (isnan(x))
        return snprintf(buf, ELEM_MAX, "nan");
    if (isinf(x))
        return snprintf(buf, ELEM_MAX, x > 0 ? "inf" : "-inf");
    return snprintf(buf, ELEM_MAX, "%.6g", (double)x);
}

typedef struct printer {
    FILE *f;
    const te_tensor *t;
    view v;
    bool summary;   /* cut dims longer than 2 * EDGE_ITEMS */
    int width;      /* of the widest shown element */
    int col;        /* length of the current line */
    char *vals;     /* the shown elements in visiting order, t's dtype, host memory */
    size_t esize;
    int64_t next;   /* the next of vals to visit */
    te_status read; /* the first failed read, or TE_OK */
} printer;

/* Positions shown along dim a: all of it, or when it is cut the first and
 * last EDGE_ITEMS around a "..." (index -1). */
static int64_t shown_count(const printer *p, int a)
{
    int64_t n = p->v.shape[a];
    return p->summary && n > 2 * EDGE_ITEMS ? 2 * EDGE_ITEMS + 1 : n;
}

static int64_t shown_index(const printer *p, int a, int64_t k)
{
    int64_t n = p->v.shape[a];
    if (!(p->summary && n > 2 * EDGE_ITEMS) || k < EDGE_ITEMS)
        return k;
    return k == EDGE_ITEMS ? -1 : n - (2 * EDGE_ITEMS + 1 - k);
}

static void measure(printer *p, int a, int64_t off)
{
    char buf[ELEM_MAX];
    for (int64_t k = 0; k < shown_count(p, a); k++) {
        int64_t i = shown_index(p, a, k);
        if (i < 0)
            continue;
        if (a + 1 < p->v.ndim) {
            measure(p, a + 1, off + i * p->v.stride[a]);
        } else {
            int w = format_elem(p->t->dtype, p->vals, p->next++, buf);
            p->width = w > p->width ? w : p->width;
        }
    }
}

/* Elements shown, the length of vals. */
static int64_t shown_total(const printer *p)
{
    int64_t n = 1;
    for (int a = 0; a < p->v.ndim; a++)
        n *= shown_count(p, a) - (shown_count(p, a) < p->v.shape[a]); /* less the "..." */
    return n;
}

/* n elements of the innermost dim from flat index o, stride apart, into
 * vals at next: adjacent ones (stride +-1) in one read. */
static void gather_run(printer *p, int64_t o, int64_t stride, int64_t n)
{
    char *dst = p->vals + (size_t)p->next * p->esize;
    te_status st = TE_OK;
    if (stride == 1 || stride == -1) {
        st = te_tensor_read(p->t, stride == 1 ? o : o - (n - 1), n, dst);
        for (int64_t i = 0; stride == -1 && i < n / 2; i++) { /* read forwards, shown backwards */
            char tmp[8], *x = dst + (size_t)i * p->esize, *y = dst + (size_t)(n - 1 - i) * p->esize;
            memcpy(tmp, x, p->esize);
            memcpy(x, y, p->esize);
            memcpy(y, tmp, p->esize);
        }
    } else {
        for (int64_t i = 0; i < n && st == TE_OK; i++)
            st = te_tensor_read(p->t, o + i * stride, 1, dst + (size_t)i * p->esize);
    }
    if (st != TE_OK && p->read == TE_OK)
        p->read = st;
    p->next += n;
}

/* Copies the shown elements of dim a from element off into vals, in the
 * order measure() and emit() visit them: only what is shown leaves t's
 * device. */
static void gather(printer *p, int a, int64_t off)
{
    const int64_t stride = p->v.stride[a];
    for (int64_t k = 0; k < shown_count(p, a); k++) {
        int64_t i = shown_index(p, a, k);
        if (i < 0)
            continue;
        if (a + 1 < p->v.ndim) {
            gather(p, a + 1, off + i * stride);
            continue;
        }
        int64_t n = 1; /* the run of consecutive shown positions from i */
        while (k + n < shown_count(p, a) && shown_index(p, a, k + n) == i + n)
            n++;
        gather_run(p, off + i * stride, stride, n);
        k += n - 1;
    }
}

/* A word of the innermost dim, wrapped as numpy does: a line keeps room for
 * the closing brackets, and a continuation line is indented past the
 * opening ones. */
static void put_word(printer *p, const char *w, int len, bool first)
{
    if (!first && p->col + 1 + len > LINE_WIDTH - p->v.ndim) {
        fprintf(p->f, "\n%*s", p->v.ndim, "");
        p->col = p->v.ndim;
    } else if (!first) {
        fputc(' ', p->f);
        p->col++;
    }
    fputs(w, p->f);
    p->col += len;
}

/* Dim a starting at element off: "[...]", rows of the inner dims apart by
 * one newline per dim below them. */
static void emit(printer *p, int a, int64_t off)
{
    char buf[ELEM_MAX], word[2 * ELEM_MAX];
    fputc('[', p->f);
    p->col++;
    for (int64_t k = 0; k < shown_count(p, a); k++) {
        int64_t i = shown_index(p, a, k);
        int64_t o = i < 0 ? -1 : off + i * p->v.stride[a];
        if (a + 1 == p->v.ndim) {
            if (i < 0) {
                put_word(p, "...", 3, k == 0);
            } else {
                format_elem(p->t->dtype, p->vals, p->next++, buf);
                int len = snprintf(word, sizeof word, "%*s", p->width, buf);
                put_word(p, word, len, k == 0);
            }
            continue;
        }
        if (k > 0) {
            for (int nl = a + 1; nl < p->v.ndim; nl++)
                fputc('\n', p->f);
            fprintf(p->f, "%*s", a + 1, "");
            p->col = a + 1;
        }
        if (i < 0) {
            fputs("...", p->f);
            p->col += 3;
        } else {
            emit(p, a + 1, o);
        }
    }
    fputc(']', p->f);
    p->col++;
}

/* "[0,1:3]": the slices as resolved, omitted bounds left out. */
static void slice_str(const dbg_ref *r, char *buf, size_t n)
{
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < r->n_slices && u < n; d++) {
        const dbg_slice *s = &r->slices[d];
        if (d)
            u += (size_t)snprintf(buf + u, n - u, ",");
        if (u < n && s->index)
            u += (size_t)snprintf(buf + u, n - u, "%lld", (long long)s->start);
        if (u < n && !s->index && s->has_start)
            u += (size_t)snprintf(buf + u, n - u, "%lld", (long long)s->start);
        if (u < n && !s->index)
            u += (size_t)snprintf(buf + u, n - u, ":");
        if (u < n && !s->index && s->has_stop)
            u += (size_t)snprintf(buf + u, n - u, "%lld", (long long)s->stop);
        if (u < n && !s->index && s->step != 1)
            u += (size_t)snprintf(buf + u, n - u, ":%lld", (long long)s->step);
    }
    if (u < n)
        snprintf(buf + u, n - u, "]");
}

/* r may be NULL (the whole tensor), resolved or not; max_elems <= 0 never
 * summarises. */
void dbg_print_tensor(FILE *f, const char *name, const te_tensor *t, const dbg_ref *r, int64_t max_elems)
{
    dbg_ref ref = { 0 };
    char err[160], shape[96], sel[96], slices[256];
    if (r)
        ref = *r;
    if (!name)
        name = ref.name[0] ? ref.name : t->name;
    te_shape_str(t->ndim, t->shape, shape, sizeof shape);
    fprintf(f, "%s %s %s", name, te_dtype_name(t->dtype), shape);
    if (!dbg_ref_resolve(&ref, t, err, sizeof err)) {
        fprintf(f, "\n%s\n", err);
        return;
    }
    printer p = { .f = f, .t = t };
    view_make(t, &ref, &p.v);
    if (ref.n_slices > 0) {
        slice_str(&ref, slices, sizeof slices);
        fprintf(f, " (slice %s -> %s)", slices, te_shape_str(p.v.ndim, p.v.shape, sel, sizeof sel));
    }
    fputc('\n', f);
    if (!t->data) {
        fprintf(f, "no data\n");
        return;
    }
    p.summary = max_elems > 0 && p.v.numel > max_elems;
    p.esize = te_dtype_size(t->dtype);
    if (p.v.numel == 0) {
        fprintf(f, "[]\n");
        return;
    }
    p.vals = malloc((size_t)shown_total(&p) * p.esize);
    if (!p.vals) {
        fprintf(f, "out of memory for %lld elements\n", (long long)shown_total(&p));
        return;
    }
    if (p.v.ndim == 0)
        gather_run(&p, p.v.offset, 1, 1);
    else
        gather(&p, 0, p.v.offset);
    if (p.read != TE_OK) {
        fprintf(f, "cannot read the data: %s\n", te_error());
    } else if (p.v.ndim == 0) {
        char buf[ELEM_MAX];
        format_elem(t->dtype, p.vals, 0, buf);
        fprintf(f, "%s\n", buf);
    } else {
        p.next = 0;
        measure(&p, 0, p.v.offset);
        p.next = 0;
        emit(&p, 0, p.v.offset);
        fputc('\n', f);
    }
    free(p.vals);
}

/* ---- statistics and histograms ---------------------------------------------- */

/* name NULL: the tensor's own. */
void dbg_print_stats(FILE *f, const char *name, const te_tensor *t)
{
    char shape[96];
    if (!name)
        name = t->name;
    te_shape_str(t->ndim, t->shape, shape, sizeof shape);
    fprintf(f, "%s %s %s", name, te_dtype_name(t->dtype), shape);
    if (!t->data) {
        fprintf(f, " no data\n");
        return;
    }
    te_stats s;
    te_stats_compute(t, &s);
    fprintf(f, " min %.6g max %.6g mean %.6g std %.6g abs_max %.6g l2norm %.6g zero %.1f%%"
            " nan %lld inf %lld fp16_overflow %lld\n",
            s.min, s.max, s.mean, s.std, s.abs_max, s.l2norm,
            s.n ? 100.0 * (double)s.zero / (double)s.n : 0.0,
            (long long)s.nan, (long long)s.inf, (long long)s.fp16_overflow);
}

static double edge(double lo, double hi, int b, int bins)
{
    return b == bins ? hi : lo + (hi - lo) * b / bins;
}

/* The rows "[lo, hi)  count  ####" of the finite values in [lo, hi];
 * false when out of memory. */
static bool hist_rows(FILE *f, const te_tensor *t, double lo, double hi, int bins, int width)
{
    int64_t *count = calloc((size_t)bins, sizeof *count);
    float *chunk = malloc(HIST_CHUNK * sizeof *chunk);
    if (!count || !chunk) {
        free(count);
        free(chunk);
        return false;
    }
    for (int64_t at = 0; at < t->numel; at += HIST_CHUNK) { /* a chunk at a time from t's device */
        int64_t n = t->numel - at < HIST_CHUNK ? t->numel - at : HIST_CHUNK;
        te_tensor_read_f32(t, at, n, chunk);
        for (int64_t i = 0; i < n; i++) {
            double x = chunk[i];
            if (!isfinite(x))
                continue;
            int b = lo == hi ? 0 : (int)((x - lo) / (hi - lo) * bins);
            count[b < bins ? b : bins - 1]++; /* the last bin is closed */
        }
    }
    free(chunk);
    int64_t most = 0;
    int label_w = 0, count_w = 0;
    char label[96];
    for (int b = 0; b < bins; b++) {
        int lw = snprintf(label, sizeof label, "[%.6g, %.6g)", edge(lo, hi, b, bins),
                          edge(lo, hi, b + 1, bins));
        int cw = snprintf(NULL, 0, "%lld", (long long)count[b]);
        most = count[b] > most ? count[b] : most;
        label_w = lw > label_w ? lw : label_w;
        count_w = cw > count_w ? cw : count_w;
    }
    for (int b = 0; b < bins; b++) {
        snprintf(label, sizeof label, "[%.6g, %.6g%c", edge(lo, hi, b, bins),
                 edge(lo, hi, b + 1, bins), b + 1 == bins ? ']' : ')');
        fprintf(f, "%-*s  %*lld", label_w, label, count_w, (long long)count[b]);
        if (count[b] > 0) {
            int64_t bar = (count[b] * width + most / 2) / most;
            fputs("  ", f);
            for (int64_t i = 0; i < (bar > 0 ? bar : 1); i++)
                fputc('#', f);
        }
        fputc('\n', f);
    }
    free(count);
    return true;
}

/* bins < 1 and width < 1 count as 1; name (NULL: the tensor's own) only
 * appears in messages. */
void dbg_print_hist(FILE *f, const char *name, const te_tensor *t, int bins, int width)
{
    if (!name)
        name = t->name;
    if (!t->data) {
        fprintf(f, "%s: no data\n", name);
        return;
    }
    te_stats s;
    te_stats_compute(t, &s);
    if (s.n - s.nan - s.inf > 0) {
        bins = bins < 1 || s.min == s.max ? 1 : bins;
        if (!hist_rows(f, t, s.min, s.max, bins, width < 1 ? 1 : width)) {
            fprintf(f, "%s: out of memory for %d bins\n", name, bins);
            return;
        }
    }
    fprintf(f, "nan %lld  inf %lld\n", (long long)s.nan, (long long)s.inf);
}
