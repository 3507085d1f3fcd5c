/* tdbg_dump.c — `tdbg-dump`: lists, prints, summarises, exports and
 * verifies the step files of a dump run, through the reader of h5file.h.
 * Exit codes: 0 success, 1 damage found or nothing matched, 2 trouble. */
#include "dump.h"
#include "h5file.h"
#include "names.h"
#include "te.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


enum { RC_OK = 0, RC_FOUND = 1, RC_TROUBLE = 2 };

#define WHY_MAX (2 * PATH_MAX)   /* a message naming a file or two */

static const char usage_text[] =
    "usage: tdbg-dump ls DIR\n"
    "       tdbg-dump show DIR TENSOR [--step N] [SLICES]\n"
    "       tdbg-dump stats DIR [--step N] [GLOB]\n"
    "       tdbg-dump export DIR --npy OUTDIR [--step N] [GLOB]\n"
    "       tdbg-dump samples DIR [--step N]\n"
    "       tdbg-dump verify DIR|FILE\n"
    "TENSOR is a dataset path (/conv2/bn/in0) or the debugger's name for it\n"
    "(conv2/bn:in0, fc1/linear:out0, param:fc1.weight, grad:fc1.weight); a GLOB\n"
    "matches either spelling. SLICES index like numpy: \"[0, 1:3]\", \"[:, ::2]\".\n"
    "Exit status: 0 success, 1 damage found or nothing matched, 2 trouble.\n";

typedef struct args {
    char **pos;          /* positionals after the command */
    int n_pos;
    bool has_step;
    int64_t step;
    const char *npy;
} args;

/* One invocation: its streams, arguments, the run's step files and the
 * exit status so far (the worst seen). */
typedef struct ctx {
    FILE *out, *err;
    args a;
    const char *dir;
    dump_step_entry *e;
    int n_e;
    int rc;
} ctx;

/* "tdbg-dump: MESSAGE" on the error stream; raises the exit status to rc. */
static void complain(ctx *c, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tdbg-dump: ", c->err);
    if (rc == RC_OK)
        fputs("warning: ", c->err);
    vfprintf(c->err, fmt, ap);
    fputc('\n', c->err);
    va_end(ap);
    c->rc = rc > c->rc ? rc : c->rc;
}

/* ---- tensors: lookup, selection, sizes ------------------------------------------ */

/* Tensor want by any of its names (names.h): its path or the debugger's
 * name first, then the name it stores (an input "param:fc1.weight" is found
 * when phase=params did not dump the parameter itself); -1. */
static int tensor_find(const dump_step_reader *r, const char *want)
{
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < dump_step_count(r); i++) {
            const dump_tensor_info *ti = dump_step_tensor(r, i);
            if (dump_name_match(want, false, ti->path, ti->exec_index, pass ? ti->tensor : NULL))
                return i;
        }
    return -1;
}

/* Does glob (NULL: everything) match one of the tensor's names? A miss is
 * offered to near, for the "did you mean" when nothing matches. */
static bool glob_match(const char *glob, const char *path, int exec_index, const char *stored,
                       dump_near *near)
{
    if (!glob || dump_name_match(glob, true, path, exec_index, stored))
        return true;
    dump_near_offer(near, path, exec_index);
    return false;
}

/* " (did you mean NAME?)" when near found one, else "". */
static const char *near_hint(const dump_near *near, char *buf, size_t n)
{
    if (near->best[0])
        snprintf(buf, n, " (did you mean %s?)", near->best);
    else
        buf[0] = '\0';
    return buf;
}

static const char *io_str(dump_iokind io, int slot, char *buf, size_t n)
{
    snprintf(buf, n, "%s%d", io == DUMP_IN ? "in" : "out", slot);
    return buf;
}

static const char *size_str(uint64_t b, char *buf, size_t n)
{
    if (b < 1024)
        snprintf(buf, n, "%llu B", (unsigned long long)b);
    else if (b < 1024 * 1024)
        snprintf(buf, n, "%.1f KB", (double)b / 1024);
    else
        snprintf(buf, n, "%.1f MB", (double)b / (1024 * 1024));
    return buf;
}

/* ---- steps ---------------------------------------------------------------------- */

static void step_path(const ctx *c, const dump_step_entry *e, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", c->dir, e->name);
}

/* Called for each visited step: r is NULL for an incomplete one. Returning
 * false stops the visit. */
typedef bool (*step_fn)(ctx *c, const dump_step_entry *e, dump_step_reader *r, void *data);

/* Visits, in order, the steps --step selects. An incomplete step is warned
 * about and passed as NULL; a step that does not open is trouble, reported
 * and passed over. False when --step names no step. */
static bool steps_visit(ctx *c, step_fn fn, void *data)
{
    char path[PATH_MAX + 64], why[WHY_MAX];
    int selected = 0;
    for (int i = 0; i < c->n_e; i++) {
        const dump_step_entry *e = &c->e[i];
        if (c->a.has_step && e->step != c->a.step)
            continue;
        selected++;
        step_path(c, e, path, sizeof path);
        if (!e->complete) {
            complain(c, RC_OK, "%s: step %lld is incomplete (the writer stopped inside it), "
                     "skipped", path, (long long)e->step);
            if (!fn(c, e, NULL, data))
                break;
            continue;
        }
        dump_step_reader *r = dump_step_open(path, why, sizeof why);
        if (!r) {
            complain(c, RC_TROUBLE, "%s", why);
            continue;
        }
        bool go = fn(c, e, r, data);
        dump_step_close(r);
        if (!go)
            break;
    }
    if (c->a.has_step && selected == 0) {
        complain(c, RC_FOUND, "%s: no step %lld", c->dir, (long long)c->a.step);
        return false;
    }
    return true;
}

/* ---- ls ------------------------------------------------------------------------- */

typedef struct ls_total {
    int steps;
    int64_t tensors;
    uint64_t bytes;
} ls_total;

static void ls_run(ctx *c)
{
    char path[PATH_MAX + 16], why[WHY_MAX];
    snprintf(path, sizeof path, "%s/run.h5", c->dir);
    struct stat st;
    if (stat(path, &st) != 0) {
        complain(c, RC_OK, "%s: no run.h5 (the run's mode, seed and command line are unknown)",
                 c->dir);
        return;
    }
    dump_run_meta m;
    dump_op_row *ops = NULL;
    int n_ops = 0;
    if (!dump_run_read(c->dir, &m, &ops, &n_ops, why, sizeof why)) {
        complain(c, RC_TROUBLE, "%s", why);   /* there but unreadable: the steps still list */
        return;
    }
    free(ops);
    fprintf(c->out, "run: mode %s, backend %s, amp %s, seed %llu, engine %s, created %s\n",
            te_mode_name(m.mode), m.backend, m.amp, (unsigned long long)m.seed, m.engine_version,
            m.created);
    if (m.amp_level[0])   /* files from before it was kept have none */
        fprintf(c->out, "precision: %s, low dtype %s\n", m.amp_level, m.amp_dtype);
    if (m.peak_bytes)     /* likewise */
        fprintf(c->out, "memory: peak %llu bytes (%.1f MiB)\n", (unsigned long long)m.peak_bytes,
                (double)m.peak_bytes / (1024.0 * 1024.0));
    if (m.ranks > 0) {    /* a rank of a data-parallel job: what its collectives were */
        dump_coll_row *colls = NULL;
        const int n = dump_run_colls(c->dir, &colls, why, sizeof why);
        char seqs[64] = "";
        if (n > 0)
            snprintf(seqs, sizeof seqs, " (seq %lld to %lld)", (long long)colls[0].seq, (long long)colls[n - 1].seq);
        if (n < 0)
            complain(c, RC_TROUBLE, "%s", why);
        else
            fprintf(c->out, "data parallel: rank %d of %d, %d collectives in the dumped steps%s\n", m.rank, m.ranks,
                    n, seqs);
        free(colls);
    }
    fprintf(c->out, "command: %s\n", m.command_line);
}

/* ", loss scale 65536" and ", skipped (grad of fc2.weight non-finite)" when
 * the step had a loss scaler; "" otherwise. */
static const char *scaler_str(const dump_step_scaler *s, char *buf, size_t n)
{
    buf[0] = '\0';
    if (!s->present)
        return buf;
    int len = snprintf(buf, n, ", loss scale %g", (double)s->scale);
    if (s->skipped == 1 && len >= 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, s->skip_param[0] ? ", skipped (the gradient of %s "
                 "non-finite)" : ", skipped%s", s->skip_param);
    return buf;
}

static int max_int(int a, int b) { return a > b ? a : b; }

static bool ls_step(ctx *c, const dump_step_entry *e, dump_step_reader *r, void *data)
{
    ls_total *t = data;
    if (!r) {
        fprintf(c->out, "step %lld: incomplete (the writer stopped inside it)\n",
                (long long)e->step);
        return true;
    }
    char why[WHY_MAX], io[16], shape[96], size[32];
    dump_stats_row *rows = NULL;
    int n = dump_step_count(r), n_rows = dump_step_stats(r, &rows, why, sizeof why);
    if (n_rows < 0)
        complain(c, RC_TROUBLE, "%s", why);
    int w[5] = { 0 };   /* path, op type, io, dtype, shape */
    for (int i = 0; i < n; i++) {
        const dump_tensor_info *ti = dump_step_tensor(r, i);
        w[0] = max_int(w[0], (int)strlen(ti->path));
        w[1] = max_int(w[1], (int)strlen(ti->op_type));
        w[2] = max_int(w[2], (int)strlen(io_str(ti->io, ti->slot, io, sizeof io)));
        w[3] = max_int(w[3], (int)strlen(te_dtype_name(ti->dtype)));
        w[4] = max_int(w[4], (int)strlen(te_shape_str(ti->ndim, ti->shape, shape, sizeof shape)));
    }
    for (int i = 0; i < n_rows; i++)
        w[0] = max_int(w[0], (int)strlen(rows[i].path));
    char sc[TE_NAME_MAX + 96];
    fprintf(c->out, "step %lld%s:\n", (long long)e->step,
            scaler_str(dump_step_scaler_of(r), sc, sizeof sc));
    for (int i = 0; i < n; i++) {
        const dump_tensor_info *ti = dump_step_tensor(r, i);
        te_shape_str(ti->ndim, ti->shape, shape, sizeof shape);
        fprintf(c->out, "  %-*s  %-*s  %-*s  %-*s  %-*s  %s\n", w[0], ti->path, w[1],
                ti->op_type, w[2], io_str(ti->io, ti->slot, io, sizeof io), w[3],
                te_dtype_name(ti->dtype), w[4], shape, size_str(ti->nbytes, size, sizeof size));
        t->bytes += ti->nbytes;
    }
    for (int i = 0; i < n_rows; i++)
        fprintf(c->out, "  %-*s  statistics only\n", w[0], rows[i].path);
    free(rows);
    t->steps++;
    t->tensors += n + (n_rows > 0 ? n_rows : 0);
    return true;
}

static int cmd_ls(ctx *c)
{
    ls_total t = { 0, 0, 0 };
    ls_run(c);
    steps_visit(c, ls_step, &t);
    fprintf(c->out, "%d steps, %lld tensors, %.2f MB\n", t.steps, (long long)t.tensors,
            (double)t.bytes / (1024 * 1024));
    return c->rc;
}

/* ---- slices and the value printer ------------------------------------------------ */

typedef struct slice {
    bool index;                   /* a single index: the dim goes away */
    bool has_start, has_stop;
    int64_t start, stop, step;
} slice;

/* A strided window on the flat values. */
typedef struct view {
    int ndim;
    int64_t offset, numel;
    int64_t shape[TE_MAX_DIMS], stride[TE_MAX_DIMS];
} view;

static const char *skip_space(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* An optional integer at *p: true when one was there. */
static bool parse_int(const char **p, int64_t *v)
{
    const char *s = skip_space(*p);
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || errno)
        return false;
    *v = x;
    *p = skip_space(end);
    return true;
}

/* "[0, 1:3, ::2]" into s; false with why naming the place. */
static bool slices_parse(const char *text, slice *s, int *n, char *why, size_t wn)
{
    const char *p = skip_space(text);
    *n = 0;
    if (*p != '[')
        goto bad;
    p++;
    if (*skip_space(p) == ']') {
        p = skip_space(p) + 1;
        goto end;
    }
    for (;;) {
        if (*n == TE_MAX_DIMS) {
            snprintf(why, wn, "slice '%s': more than %d dims", text, TE_MAX_DIMS);
            return false;
        }
        slice *d = &s[(*n)++];
        *d = (slice){ .step = 1 };
        d->has_start = parse_int(&p, &d->start);
        p = skip_space(p);
        if (*p != ':') {
            if (!d->has_start)
                goto bad;
            d->index = true;
        } else {
            p++;
            d->has_stop = parse_int(&p, &d->stop);
            p = skip_space(p);
            if (*p == ':') {
                p++;
                if (parse_int(&p, &d->step) && d->step == 0) {
                    snprintf(why, wn, "slice '%s': a step of 0", text);
                    return false;
                }
            }
        }
        p = skip_space(p);
        if (*p == ']') {
            p++;
            break;
        }
        if (*p != ',')
            goto bad;
        p++;
    }
end:
    if (*skip_space(p) == '\0')
        return true;
bad:
    snprintf(why, wn, "bad slice '%s' at '%s' (write it like numpy: [0, 1:3, ::2])", text,
             skip_space(p));
    return false;
}

/* numpy's bound of a slice along a dim of n: clamped into range. */
static int64_t slice_bound(bool has, int64_t v, int64_t step, int64_t n, bool is_stop)
{
    if (!has)
        return step > 0 ? (is_stop ? n : 0) : (is_stop ? -1 : n - 1);
    if (v < 0)
        v += n;
    if (v < 0)
        return step > 0 ? 0 : -1;
    if (v >= n)
        return step > 0 ? n : n - 1;
    return v;
}

/* The view of slices s[0..ns) on a tensor; false with why on a bad index. */
static bool view_make(const dump_tensor_info *ti, const slice *s, int ns, view *v, char *why,
                      size_t wn)
{
    if (ns > ti->ndim) {
        snprintf(why, wn, "%d slices for a tensor of %d dims", ns, ti->ndim);
        return false;
    }
    int64_t stride = 1, strides[TE_MAX_DIMS];
    for (int d = ti->ndim - 1; d >= 0; d--) {
        strides[d] = stride;
        stride *= ti->shape[d];
    }
    *v = (view){ .numel = 1 };
    for (int d = 0; d < ti->ndim; d++) {
        int64_t n = ti->shape[d], start = 0, len = n, step = 1;
        if (d < ns && s[d].index) {
            start = s[d].start < 0 ? s[d].start + n : s[d].start;
            if (start < 0 || start >= n) {
                snprintf(why, wn, "index %lld is out of range for dim %d of size %lld",
                         (long long)s[d].start, d, (long long)n);
                return false;
            }
            v->offset += start * strides[d];
            continue;
        }
        if (d < ns) {
            step = s[d].step;
            start = slice_bound(s[d].has_start, s[d].start, step, n, false);
            int64_t stop = slice_bound(s[d].has_stop, s[d].stop, step, n, true);
            len = step > 0 ? (stop > start ? (stop - start - 1) / step + 1 : 0)
                           : (start > stop ? (start - stop - 1) / -step + 1 : 0);
        }
        if (len > 0)
            v->offset += start * strides[d];
        v->shape[v->ndim] = len;
        v->stride[v->ndim++] = step * strides[d];
        v->numel *= len;
    }
    return true;
}

#define PRINT_MAX 1000   /* more elements than this: long dims are cut */
#define EDGE 3           /* elements kept at each end of a cut dim */
#define LINE_WIDTH 75    /* numpy's: rows wrap before it */

typedef struct printer {
    FILE *f;
    const float *fv;     /* values as floats, or */
    const int32_t *iv;   /* as integers (i32 tensors) */
    view v;
    bool cut;
    int width;           /* of the widest shown element */
    int col;             /* length of the current line */
} printer;

static int elem_str(const printer *p, int64_t i, char *buf, size_t n)
{
    if (p->iv)
        return snprintf(buf, n, "%d", (int)p->iv[i]);
    if (isnan(p->fv[i]))
        return snprintf(buf, n, "nan");
    return snprintf(buf, n, "%.6g", (double)p->fv[i]);
}

/* Positions shown along dim a: k-th of shown_count, -1 for the "...". */
static int64_t shown_count(const printer *p, int a)
{
    return p->cut && p->v.shape[a] > 2 * EDGE ? 2 * EDGE + 1 : p->v.shape[a];
}

static int64_t shown_index(const printer *p, int a, int64_t k)
{
    if (shown_count(p, a) == p->v.shape[a] || k < EDGE)
        return k;
    return k == EDGE ? -1 : p->v.shape[a] - (2 * EDGE + 1 - k);
}

static void measure(printer *p, int a, int64_t off)
{
    char buf[48];
    for (int64_t k = 0; k < shown_count(p, a); k++) {
        int64_t i = shown_index(p, a, k);
        if (i < 0)
            continue;
        if (a + 1 < p->v.ndim)
            measure(p, a + 1, off + i * p->v.stride[a]);
        else
            p->width = max_int(p->width, elem_str(p, off + i * p->v.stride[a], buf, sizeof buf));
    }
}

/* Dim a from element off, numpy's way: rows of inner dims apart by one
 * newline per dim below them, indented past the open brackets; a row too
 * long for the line goes on below, indented the same. */
static void emit(printer *p, int a, int64_t off)
{
    char buf[48];
    fputc('[', p->f);
    p->col++;
    for (int64_t k = 0; k < shown_count(p, a); k++) {
        int64_t i = shown_index(p, a, k);
        if (a + 1 == p->v.ndim) {
            int len = i >= 0 ? p->width : 3;
            if (k > 0 && p->col + 1 + len > LINE_WIDTH - p->v.ndim) {
                p->col = fprintf(p->f, "\n%*s", p->v.ndim, "") - 1;
            } else if (k > 0) {
                fputc(' ', p->f);
                p->col++;
            }
            if (i >= 0)
                elem_str(p, off + i * p->v.stride[a], buf, sizeof buf);
            p->col += fprintf(p->f, "%*s", len, i >= 0 ? buf : "...");
            continue;
        }
        if (k > 0) {
            for (int nl = a + 1; nl < p->v.ndim; nl++)
                fputc('\n', p->f);
            p->col = fprintf(p->f, "%*s", a + 1, "");
        }
        if (i < 0)
            p->col += fprintf(p->f, "...");
        else
            emit(p, a + 1, off + i * p->v.stride[a]);
    }
    fputc(']', p->f);
    p->col++;
}

static void print_values(printer *p)
{
    char buf[48];
    if (p->v.ndim == 0) {
        elem_str(p, p->v.offset, buf, sizeof buf);
        fprintf(p->f, "%s\n", buf);
        return;
    }
    if (p->v.numel == 0) {
        fputs("[]\n", p->f);
        return;
    }
    p->cut = p->v.numel > PRINT_MAX;
    measure(p, 0, p->v.offset);
    emit(p, 0, p->v.offset);
    fputc('\n', p->f);
}

/* ---- show ----------------------------------------------------------------------- */

typedef struct show_req {
    const char *want;
    const char *slices;   /* NULL: the whole tensor */
    slice s[TE_MAX_DIMS];
    int ns;
    bool found;
    dump_near near;       /* the nearest name, when no step has want */
} show_req;

static void show_tensor(ctx *c, dump_step_reader *r, int i, const show_req *q)
{
    const dump_tensor_info *ti = dump_step_tensor(r, i);
    char why[WHY_MAX], shape[96], sc[TE_NAME_MAX + 96];
    te_shape_str(ti->ndim, ti->shape, shape, sizeof shape);
    fprintf(c->out, "%s  %s  step %lld  %s %s%s\n", ti->tensor, ti->path, (long long)ti->step,
            te_dtype_name(ti->dtype), shape, scaler_str(dump_step_scaler_of(r), sc, sizeof sc));
    fprintf(c->out, "op %s (%s), %s, %s%d", ti->op, ti->op_type, te_phase_name(ti->phase),
            ti->io == DUMP_IN ? "in" : "out", ti->slot);
    if (ti->exec_index >= 0)   /* parameters have none, nor a source line */
        fprintf(c->out, ", exec %d", ti->exec_index);
    if (ti->file[0])
        fprintf(c->out, ", at %s:%d", ti->file, ti->line);
    fputc('\n', c->out);
    if (ti->kernel[0])
        fprintf(c->out, "kernel %s\n", ti->kernel);
    printer p = { .f = c->out };
    if (!view_make(ti, q->s, q->ns, &p.v, why, sizeof why)) {
        complain(c, RC_TROUBLE, "%s: %s", ti->path, why);
        return;
    }
    if (q->slices)
        fprintf(c->out, "slice %s -> %s\n", q->slices,
                te_shape_str(p.v.ndim, p.v.shape, shape, sizeof shape));
    void *values = malloc(ti->numel > 0 ? (size_t)ti->numel * 4 : 4);   /* floats or int32 */
    bool ok = values && (ti->dtype == TE_I32 ? dump_step_read_raw(r, i, values, why, sizeof why)
                                             : dump_step_read_f32(r, i, values, why, sizeof why));
    if (!ok) {
        complain(c, RC_TROUBLE, "%s", values ? why : "out of memory");
    } else {
        if (ti->dtype == TE_I32)
            p.iv = values;
        else
            p.fv = values;
        print_values(&p);
    }
    free(values);
}

static bool show_step(ctx *c, const dump_step_entry *e, dump_step_reader *r, void *data)
{
    (void)e;
    show_req *q = data;
    int i = r ? tensor_find(r, q->want) : -1;
    if (i < 0) {
        for (int k = 0; r && k < dump_step_count(r); k++)
            dump_near_offer(&q->near, dump_step_tensor(r, k)->path, dump_step_tensor(r, k)->exec_index);
        return true;
    }
    show_tensor(c, r, i, q);
    q->found = true;
    return false;
}

/* The slices: the rest of TENSOR from its '[', then the positionals after
 * it joined by spaces (an unquoted "[0, 1:3]" arrives in pieces). */
static void slices_text(const args *a, const char *bracket, char *buf, size_t n)
{
    snprintf(buf, n, "%s", bracket ? bracket : "");
    for (int i = 2; i < a->n_pos; i++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? " " : "", a->pos[i]);
}

static int cmd_show(ctx *c)
{
    char want[DUMP_PATH_MAX + TE_NAME_MAX], text[512], why[WHY_MAX], hint[600];
    snprintf(want, sizeof want, "%s", c->a.pos[1]);
    char *bracket = strchr(want, '[');
    slices_text(&c->a, bracket, text, sizeof text);
    if (bracket)
        *bracket = '\0';
    show_req q = { .want = want, .slices = text[0] ? text : NULL };
    dump_near_init(&q.near, want);
    if (q.slices && !slices_parse(text, q.s, &q.ns, why, sizeof why)) {
        complain(c, RC_TROUBLE, "%s", why);
        return c->rc;
    }
    if (!steps_visit(c, show_step, &q) || q.found)
        return c->rc;
    if (c->a.has_step)
        complain(c, RC_FOUND, "%s: no tensor '%s' in step %lld%s", c->dir, want,
                 (long long)c->a.step, near_hint(&q.near, hint, sizeof hint));
    else
        complain(c, RC_FOUND, "%s: no tensor '%s' in any step%s", c->dir, want,
                 near_hint(&q.near, hint, sizeof hint));
    return c->rc;
}

/* ---- stats ---------------------------------------------------------------------- */

static void stats_print(FILE *f, int width, const char *label, double min, double max,
                        double mean, double std, double abs_max, double l2norm, int64_t nan,
                        int64_t inf, double zero_pct)
{
    fprintf(f, "  %-*s  min %.6g max %.6g mean %.6g std %.6g abs_max %.6g l2norm %.6g"
            " nan %lld inf %lld zero %.1f%%\n", width, label, min, max, mean, std, abs_max,
            l2norm, (long long)nan, (long long)inf, zero_pct);
}

/* Statistics of tensor i as te_stats_compute gives them. */
static bool tensor_stats(dump_step_reader *r, int i, te_stats *s, char *why, size_t n)
{
    const dump_tensor_info *ti = dump_step_tensor(r, i);
    te_tensor *t = te_tensor_persistent(TE_F32, ti->ndim, ti->shape);
    if (!t) {
        snprintf(why, n, "%s: %s", ti->path, te_error());
        return false;
    }
    float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    bool ok = v && dump_step_read_f32(r, i, v, why, n);
    if (!v)
        snprintf(why, n, "%s: out of memory for %lld values", ti->path, (long long)t->numel);
    if (ok && t->numel > 0 && te_tensor_write(t, 0, t->numel, v) == TE_OK)
        te_stats_compute(t, s);
    else
        *s = (te_stats){ .first_bad = -1 };
    free(v);
    te_tensor_free(t);
    return ok;
}

typedef struct stats_req {
    const char *glob;
    int shown;
    dump_near near;
} stats_req;

static bool stats_step(ctx *c, const dump_step_entry *e, dump_step_reader *r, void *data)
{
    if (!r)
        return true;
    stats_req *q = data;
    const char *glob = q->glob;
    char why[WHY_MAX], shape[96], label[512];
    dump_stats_row *rows = NULL;
    int n = dump_step_count(r), n_rows = dump_step_stats(r, &rows, why, sizeof why);
    if (n_rows < 0)
        complain(c, RC_TROUBLE, "%s", why);
    int width = 0, shown = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            const dump_tensor_info *ti = dump_step_tensor(r, i);
            if (!glob_match(glob, ti->path, ti->exec_index, ti->tensor, &q->near))
                continue;
            snprintf(label, sizeof label, "%s %s %s", ti->path, te_dtype_name(ti->dtype),
                     te_shape_str(ti->ndim, ti->shape, shape, sizeof shape));
            te_stats s;
            if (pass == 0) {
                width = max_int(width, (int)strlen(label));
            } else if (!tensor_stats(r, i, &s, why, sizeof why)) {
                complain(c, RC_TROUBLE, "%s", why);
            } else {
                if (shown++ == 0)
                    fprintf(c->out, "step %lld:\n", (long long)e->step);
                stats_print(c->out, width, label, s.min, s.max, s.mean, s.std, s.abs_max,
                            s.l2norm, s.nan, s.inf, s.n ? 100.0 * (double)s.zero / (double)s.n : 0);
            }
        }
        for (int i = 0; i < n_rows; i++) {
            const dump_stats_row *w = &rows[i];
            if (!glob_match(glob, w->path, w->exec_index, NULL, &q->near))
                continue;
            snprintf(label, sizeof label, "%s (stored)", w->path);
            if (pass == 0) {
                width = max_int(width, (int)strlen(label));
                continue;
            }
            if (shown++ == 0)
                fprintf(c->out, "step %lld:\n", (long long)e->step);
            stats_print(c->out, width, label, w->min, w->max, w->mean, w->std, w->abs_max,
                        w->l2norm, w->nan, w->inf, 100.0 * w->zero_frac);
        }
    }
    free(rows);
    q->shown += shown;
    return true;
}

static int cmd_stats(ctx *c)
{
    stats_req q = { .glob = c->a.n_pos > 1 ? c->a.pos[1] : NULL };
    char hint[600];
    dump_near_init(&q.near, q.glob ? q.glob : "");
    if (steps_visit(c, stats_step, &q) && q.shown == 0 && c->rc == RC_OK)
        complain(c, RC_FOUND, "%s: %s%s%s%s", c->dir, q.glob ? "no tensor matches '" : "no tensors",
                 q.glob ? q.glob : "", q.glob ? "'" : "", near_hint(&q.near, hint, sizeof hint));
    return c->rc;
}

/* ---- samples ------------------------------------------------------------------- */

/* A step's /samples: each batch's dataset, seed and place, then its rows. */
static bool samples_step(ctx *c, const dump_step_entry *e, dump_step_reader *r, void *data)
{
    int *shown = data;
    if (!r)
        return true;
    char why[WHY_MAX];
    dump_sample_row *rows = NULL;
    int n = dump_step_samples(r, &rows, why, sizeof why);
    if (n < 0)
        complain(c, RC_TROUBLE, "%s", why);
    for (int i = 0; i < n; i++) {
        const dump_sample_row *s = &rows[i];
        if (i == 0)
            fprintf(c->out, "step %lld:\n", (long long)e->step);
        if (i == 0 || s->batch != rows[i - 1].batch) {
            fprintf(c->out, "  batch %d: '%s'", s->batch, s->dataset);
            if (s->position >= 0)
                fprintf(c->out, ", loader seed %llu, epoch %lld, position %lld", (unsigned long long)s->seed,
                        (long long)s->epoch, (long long)s->position);
            else
                fprintf(c->out, ", published by the program");
            fprintf(c->out, "\n    %-5s %-10s %s\n", "row", "sample", "source");
        }
        fprintf(c->out, "    %-5d %-10lld %s", s->row, (long long)s->sample, s->source[0] ? s->source : "-");
        if (s->drawn != s->sample)
            fprintf(c->out, "  (in place of %lld: data skip)", (long long)s->drawn);
        fprintf(c->out, "\n");
    }
    *shown += n > 0;
    free(rows);
    return true;
}

static int cmd_samples(ctx *c)
{
    int shown = 0;
    if (steps_visit(c, samples_step, &shown) && shown == 0 && c->rc == RC_OK)
        complain(c, RC_FOUND, "%s: no step %srecords its samples (a run without a data loader, a dump "
                 "from before tdbg kept them, or TDBG_PROVENANCE=0)", c->dir, c->a.has_step ? "selected " : "");
    return c->rc;
}

/* ---- export --------------------------------------------------------------------- */

/* mkdir -p path; false with why naming the directory that failed. */
static bool make_dirs(const char *path, char *why, size_t n)
{
    char *p = strdup(path);
    bool ok = p != NULL;
    if (!p)
        snprintf(why, n, "%s: out of memory", path);
    for (char *s = p; ok; s++) {
        if ((*s != '/' || s == p) && *s != '\0')
            continue;
        char keep = *s;
        struct stat st;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            snprintf(why, n, "%s: cannot make the directory: %s", p, strerror(errno));
            ok = false;
        } else if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(why, n, "%s: exists and is not a directory", p);
            ok = false;
        }
        *s = keep;
        if (!keep)
            break;
    }
    free(p);
    return ok;
}

/* Writes one tensor as NPY 1.0: magic, version, header length, a Python
 * dict padded with spaces to a multiple of 64 bytes, then the C-order data
 * as stored (little-endian: the machines the engine runs on). bf16 has no
 * numpy dtype: its raw bits go out as uint16. */
static bool npy_write(const char *path, const dump_tensor_info *ti, const void *data, char *why,
                      size_t n)
{
    static const char *const descr[TE_DTYPE_COUNT] = {
        [TE_F32] = "<f4", [TE_F16] = "<f2", [TE_BF16] = "<u2", [TE_I32] = "<i4",
    };
    char shape[128] = "(", head[256];
    for (int d = 0; d < ti->ndim; d++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? ", " : "",
                 (long long)ti->shape[d]);
    strcat(shape, ti->ndim == 1 ? ",)" : ")");
    int len = snprintf(head, sizeof head, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                       descr[ti->dtype], shape);
    int pad = (64 - (10 + len + 1) % 64) % 64;
    memset(head + len, ' ', (size_t)pad);
    head[len + pad] = '\n';
    uint16_t hlen = (uint16_t)(len + pad + 1);
    unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                              (unsigned char)(hlen >> 8) };
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(pre, 1, sizeof pre, f) == sizeof pre &&
              fwrite(head, 1, hlen, f) == hlen &&
              (ti->nbytes == 0 || fwrite(data, 1, ti->nbytes, f) == ti->nbytes);
    int e = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        snprintf(why, n, "%s: cannot write: %s", path, strerror(e));
        if (f)
            remove(path);
    }
    return ok;
}

typedef struct export_req {
    const char *glob;
    int written;
    dump_near near;
} export_req;

static bool export_step(ctx *c, const dump_step_entry *e, dump_step_reader *r, void *data)
{
    if (!r)
        return true;
    export_req *x = data;
    char dir[PATH_MAX], path[PATH_MAX + DUMP_PATH_MAX + 8], why[WHY_MAX];
    bool made = false;
    snprintf(dir, sizeof dir, "%s/step-%lld", c->a.npy, (long long)e->step);
    for (int i = 0; i < dump_step_count(r); i++) {
        const dump_tensor_info *ti = dump_step_tensor(r, i);
        if (!glob_match(x->glob, ti->path, ti->exec_index, ti->tensor, &x->near))
            continue;
        if (!made && !(made = make_dirs(dir, why, sizeof why))) {
            complain(c, RC_TROUBLE, "%s", why);
            return false;
        }
        char name[DUMP_PATH_MAX];
        snprintf(name, sizeof name, "%s", ti->path + 1);
        for (char *s = name; *s; s++)
            *s = *s == '/' ? '.' : *s;
        snprintf(path, sizeof path, "%s/%s.npy", dir, name);
        void *raw = malloc(ti->nbytes ? ti->nbytes : 1);
        if (!raw || !dump_step_read_raw(r, i, raw, why, sizeof why)) {
            complain(c, RC_TROUBLE, "%s", raw ? why : "out of memory");
        } else if (!npy_write(path, ti, raw, why, sizeof why)) {
            complain(c, RC_TROUBLE, "%s", why);
        } else {
            fprintf(c->out, "%s\n", path);
            x->written++;
        }
        free(raw);
    }
    return true;
}

static int cmd_export(ctx *c)
{
    export_req x = { .glob = c->a.n_pos > 1 ? c->a.pos[1] : NULL };
    char hint[600];
    dump_near_init(&x.near, x.glob ? x.glob : "");
    if (steps_visit(c, export_step, &x) && x.written == 0 && c->rc == RC_OK)
        complain(c, RC_FOUND, "%s: nothing to export%s%s%s%s", c->dir, x.glob ? " matches '" : "",
                 x.glob ? x.glob : "", x.glob ? "'" : "", near_hint(&x.near, hint, sizeof hint));
    else if (x.written > 0)
        fprintf(c->out, "exported %d tensors to %s\n", x.written, c->a.npy);
    return c->rc;
}

/* ---- verify ---------------------------------------------------------------------- */

/* Does msg begin with "PATH:" for the step file of e? */
static bool about(const ctx *c, const dump_step_entry *e, const char *msg)
{
    char path[PATH_MAX + 64];
    step_path(c, e, path, sizeof path);
    size_t len = strlen(path);
    return strncmp(msg, path, len) == 0 && msg[len] == ':';
}

static int cmd_verify(ctx *c)
{
    struct stat st;
    if (stat(c->dir, &st) != 0) {
        complain(c, RC_TROUBLE, "%s: cannot open: %s", c->dir, strerror(errno));
        return c->rc;
    }
    char why[WHY_MAX];
    dump_problems p;
    dump_verify(c->dir, &p);
    int intact = 0, incomplete = 0, damage = 0;
    if (S_ISDIR(st.st_mode)) {
        c->n_e = dump_run_list(c->dir, &c->e, why, sizeof why);
        for (int i = 0; i < c->n_e; i++) {
            bool hit = false;
            for (int k = 0; !hit && k < p.n; k++)
                hit = about(c, &c->e[i], p.msg[k]);
            intact += c->e[i].complete && !hit;
            incomplete += !c->e[i].complete;
        }
    } else {
        const char *base = strrchr(c->dir, '/');
        intact = strcmp(base ? base + 1 : c->dir, "run.h5") != 0 && p.n == 0;
    }
    for (int k = 0; k < p.n; k++) {
        bool tmp = false;
        for (int i = 0; !tmp && i < c->n_e; i++)
            tmp = !c->e[i].complete && about(c, &c->e[i], p.msg[k]);
        damage += !tmp;
        fprintf(c->out, "%s\n", p.msg[k]);
    }
    if (p.fletcher_only > 0)
        fprintf(c->out, "verify: %d step file%s without CRC-32C (written before tdbg kept it): "
                "values checked with Fletcher-32 only\n", p.fletcher_only,
                p.fletcher_only == 1 ? "" : "s");
    fprintf(c->out, "verify: %d steps intact, %d incomplete, %d problems\n", intact, incomplete,
            damage);
    dump_problems_free(&p);
    c->rc = damage && c->rc < RC_FOUND ? RC_FOUND : c->rc;
    return c->rc;
}

/* ---- commands and arguments ------------------------------------------------------ */

typedef struct command {
    const char *name;
    int min_pos, max_pos;   /* positionals after the command */
    bool step, npy;         /* which options it takes */
    bool listed;            /* needs the run's step files */
    int (*run)(ctx *c);
} command;

static const command commands[] = {
    { "ls", 1, 1, false, false, true, cmd_ls },
    { "show", 2, INT_MAX, true, false, true, cmd_show },
    { "stats", 1, 2, true, false, true, cmd_stats },
    { "export", 1, 2, true, true, true, cmd_export },
    { "samples", 1, 1, true, false, true, cmd_samples },
    { "verify", 1, 1, false, false, false, cmd_verify },
};

static int usage(ctx *c, const char *fmt, const char *arg)
{
    fputs("tdbg-dump: ", c->err);
    fprintf(c->err, fmt, arg);
    fprintf(c->err, "\n%s", usage_text);
    return RC_TROUBLE;
}

/* Splits argv[2..] into options and positionals; 0, or the usage exit. */
static int args_parse(ctx *c, const command *cmd, int argc, char **argv)
{
    args *a = &c->a;
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i], *v = NULL;
        if (strncmp(o, "--", 2) != 0) {
            a->pos[a->n_pos++] = argv[i];
            continue;
        }
        size_t olen = strcspn(o, "=");
        bool is_step = olen == 6 && strncmp(o, "--step", 6) == 0;
        bool is_npy = olen == 5 && strncmp(o, "--npy", 5) == 0;
        if ((!is_step || !cmd->step) && (!is_npy || !cmd->npy))
            return usage(c, "unknown option '%s'", o);
        v = o[olen] == '=' ? o + olen + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!v)
            return usage(c, "option '%s' needs a value", o);
        if (is_npy) {
            a->npy = v;
            continue;
        }
        char *end;
        errno = 0;
        long long s = strtoll(v, &end, 10);
        if (end == v || *end || errno || s < 0)
            return usage(c, "bad step '%s' (a step number: 0, 1, ...)", v);
        a->has_step = true;
        a->step = s;
    }
    if (a->n_pos < cmd->min_pos || a->n_pos > cmd->max_pos)
        return usage(c, "wrong number of arguments for '%s'", cmd->name);
    if (cmd->npy && !a->npy)
        return usage(c, "'%s' needs --npy OUTDIR", cmd->name);
    return RC_OK;
}

/* Runs `tdbg-dump ARGS`, writing to out and err; returns the exit status. */
int tdbg_dump_main(int argc, char **argv, FILE *out, FILE *err)
{
    ctx c = { .out = out, .err = err };
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, out);
            return RC_OK;
        }
    if (argc < 2)
        return usage(&c, "%s", "no command given");
    const command *cmd = NULL;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            cmd = &commands[i];
    if (!cmd)
        return usage(&c, "unknown command '%s'", argv[1]);
    c.a.pos = calloc((size_t)argc, sizeof *c.a.pos);
    if (!c.a.pos) {
        complain(&c, RC_TROUBLE, "out of memory");
        return c.rc;
    }
    int rc = args_parse(&c, cmd, argc, argv);
    if (rc == RC_OK) {
        char why[WHY_MAX];
        c.dir = c.a.pos[0];
        if (cmd->listed && (c.n_e = dump_run_list(c.dir, &c.e, why, sizeof why)) < 0)
            complain(&c, RC_TROUBLE, "%s", why);
        else
            cmd->run(&c);
        rc = c.rc;
    }
    free(c.e);
    free(c.a.pos);
    return rc;
}
