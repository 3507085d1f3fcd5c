/* diff_align.c — what tdbg-diff compares: the two dumps (run directories or
 * step files), the steps they share, and the tensors of a step paired by
 * (op, in/out, slot) in A's execution order. */
#include "diff.h"

#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the sides --------------------------------------------------------------------- */

/* run.h5 of s->dir when there is one; false when it is there but unreadable
 * (damaged, or a format this tdbg does not read). */
static bool side_run(diff_ctx *c, diff_side *s)
{
    char path[PATH_MAX + 16], why[DIFF_WHY_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/run.h5", s->dir);
    if (stat(path, &st) != 0) {
        if (!s->file)
            diff_complain(c, DIFF_RC_SAME, "%s: no run.h5 (no op graph: verdicts follow the dumped "
                          "tensors only)", s->dir);
        return true;
    }
    if (!dump_run_read(s->dir, &s->meta, &s->ops, &s->n_ops, why, sizeof why)) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
        return false;
    }
    s->has_run = true;
    return true;
}

bool diff_side_open(diff_ctx *c, diff_side *s, const char *arg)
{
    char why[DIFF_WHY_MAX];
    struct stat st;
    memset(s, 0, sizeof *s);
    s->arg = arg;
    if (stat(arg, &st) != 0) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s: cannot open: %s", arg, strerror(errno));
        return false;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(s->dir, sizeof s->dir, "%s", arg);
        dump_step_entry *e;
        int n = dump_run_list(arg, &e, why, sizeof why);
        if (n < 0) {
            diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
            return false;
        }
        for (int i = 0; i < n; i++) {
            if (e[i].complete)
                e[s->n_e++] = e[i];
            else
                diff_complain(c, DIFF_RC_SAME, "%s/%s: step %lld is incomplete (the writer "
                              "stopped inside it), skipped", arg, e[i].name, (long long)e[i].step);
        }
        s->e = e;
        return side_run(c, s);
    }
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", arg);
    const char *base = strrchr(arg, '/') ? strrchr(arg, '/') + 1 : arg;
    if (strcmp(base, "run.h5") == 0) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s: run.h5 holds no tensors: give the run directory "
                      "or a step file", arg);
        return false;
    }
    dump_step_reader *r = dump_step_open(arg, why, sizeof why);
    if (!r) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
        return false;
    }
    s->file = arg;
    snprintf(s->dir, sizeof s->dir, "%s", dirname(copy));
    s->e = calloc(1, sizeof *s->e);
    if (!s->e) {
        dump_step_close(r);
        diff_complain(c, DIFF_RC_TROUBLE, "out of memory");
        return false;
    }
    s->e[0].step = dump_step_number(r);
    s->e[0].complete = true;
    snprintf(s->e[0].name, sizeof s->e[0].name, "%.*s", (int)sizeof s->e[0].name - 1, base);
    s->n_e = 1;
    dump_step_close(r);
    return side_run(c, s);
}

void diff_side_close(diff_side *s)
{
    free(s->e);
    free(s->ops);
    s->e = NULL;
    s->ops = NULL;
}

/* ---- steps ------------------------------------------------------------------------- */

static void step_file(const diff_side *s, int i, char *buf, size_t n)
{
    if (s->file)
        snprintf(buf, n, "%s", s->file);
    else
        snprintf(buf, n, "%s/%s", s->dir, s->e[i].name);
}

/* Appends step to a list of ranges, "0-3, 7" ('last' is the list's last step). */
static void range_add(char *buf, size_t n, int64_t *lo, int64_t *last, int64_t step)
{
    if (*lo >= 0 && step == *last + 1) {
        *last = step;
        return;
    }
    if (*lo >= 0) {
        size_t len = strlen(buf);
        if (*last > *lo)
            snprintf(buf + len, n - len, "%s%lld-%lld", len ? ", " : "", (long long)*lo,
                     (long long)*last);
        else
            snprintf(buf + len, n - len, "%s%lld", len ? ", " : "", (long long)*lo);
    }
    *lo = *last = step;
}

static void range_end(char *buf, size_t n, int64_t *lo, int64_t *last)
{
    range_add(buf, n, lo, last, INT64_MIN);
}

int diff_steps_common(const diff_ctx *c, const diff_side *a, const diff_side *b,
                      diff_step **steps, char *only_a, char *only_b, size_t n)
{
    only_a[0] = only_b[0] = '\0';
    *steps = calloc((size_t)(a->n_e > 0 ? a->n_e : 1), sizeof **steps);
    if (!*steps)
        return 0;
    int count = 0;
    if (a->file && b->file) {   /* two step files: compared whatever their numbers */
        if (!dump_spec_step(&c->o.sel, a->e[0].step))
            return 0;
        diff_step *d = &(*steps)[count++];
        d->step = a->e[0].step;
        d->step_b = b->e[0].step;
        step_file(a, 0, d->path_a, sizeof d->path_a);
        step_file(b, 0, d->path_b, sizeof d->path_b);
        return count;
    }
    int64_t lo_a = -1, last_a = -1, lo_b = -1, last_b = -1;
    int i = 0, j = 0;
    while (i < a->n_e || j < b->n_e) {
        int64_t sa = i < a->n_e ? a->e[i].step : INT64_MAX, sb = j < b->n_e ? b->e[j].step : INT64_MAX;
        int64_t s = sa < sb ? sa : sb;
        bool selected = dump_spec_step(&c->o.sel, s);
        if (sa == sb && selected) {
            diff_step *d = &(*steps)[count++];
            d->step = d->step_b = s;
            step_file(a, i, d->path_a, sizeof d->path_a);
            step_file(b, j, d->path_b, sizeof d->path_b);
        } else if (sa != sb && selected) {
            if (sa < sb)
                range_add(only_a, n, &lo_a, &last_a, s);
            else
                range_add(only_b, n, &lo_b, &last_b, s);
        }
        i += sa == s;
        j += sb == s;
    }
    range_end(only_a, n, &lo_a, &last_a);
    range_end(only_b, n, &lo_b, &last_b);
    return count;
}

/* ---- pairing a step's tensors -------------------------------------------------------- */

typedef struct key {
    char path[DUMP_PATH_MAX + 8];   /* B's dataset path under A's op name */
    char op[TE_NAME_MAX];
    int i;
    bool used;
} key;

static int key_order(const void *pa, const void *pb)
{
    return strcmp(((const key *)pa)->path, ((const key *)pb)->path);
}

static bool selected(const diff_ctx *c, const char *op, const dump_tensor_info *t)
{
    if (!(c->o.io & (t->io == DUMP_IN ? DUMP_IO_INPUTS : DUMP_IO_OUTPUTS)))
        return false;
    return !c->o.has_ops || dump_spec_op(&c->o.sel, op, t->op_type) ||
           dump_spec_tensor(&c->o.sel, t->path, t->exec_index);
}

static bool same_shape(const dump_tensor_info *a, const dump_tensor_info *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return true;
}

/* Execution order, then as listed (qsort is not stable). */
typedef struct ordered {
    diff_row r;
    int seq;
} ordered;

static int row_order(const void *pa, const void *pb)
{
    const ordered *a = pa, *b = pb;
    if (a->r.order != b->r.order)
        return a->r.order < b->r.order ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

int diff_pair_step(const diff_ctx *c, int64_t step, dump_step_reader *ra, dump_step_reader *rb,
                   diff_row **rows)
{
    int na = dump_step_count(ra), nb = dump_step_count(rb), n = 0;
    key *keys = calloc((size_t)(nb ? nb : 1), sizeof *keys);
    ordered *o = calloc((size_t)(na + nb ? na + nb : 1), sizeof *o);
    *rows = NULL;
    if (!keys || !o) {
        free(keys);
        free(o);
        return -1;
    }
    for (int j = 0; j < nb; j++) {
        const dump_tensor_info *t = dump_step_tensor(rb, j);
        diff_map_apply(&c->o.map, t->op, keys[j].op, sizeof keys[j].op);
        if (!dump_tensor_path(keys[j].op, t->io, t->slot, keys[j].path, sizeof keys[j].path))
            snprintf(keys[j].path, sizeof keys[j].path, "%s", t->path);
        keys[j].i = j;
    }
    qsort(keys, (size_t)nb, sizeof *keys, key_order);
    for (int i = 0; i < na; i++) {
        const dump_tensor_info *t = dump_step_tensor(ra, i);
        if (!selected(c, t->op, t))
            continue;
        key want;
        snprintf(want.path, sizeof want.path, "%s", t->path);
        key *k = bsearch(&want, keys, (size_t)nb, sizeof *keys, key_order);
        diff_row *r = &o[n].r;
        o[n].seq = n;
        n++;
        r->step = step;
        r->a = r->info = t;
        r->ia = i;
        r->ib = -1;
        snprintf(r->op, sizeof r->op, "%s", t->op);
        r->status = DIFF_ONLY_A;
        if (k) {
            k->used = true;
            r->b = dump_step_tensor(rb, k->i);
            r->ib = k->i;
            r->status = same_shape(t, r->b) ? DIFF_COMPARED : DIFF_SHAPE;
            r->tol = diff_tol_for(t->dtype, r->b->dtype, c->o.tol);
        }
    }
    for (int j = 0; j < nb; j++) {
        const dump_tensor_info *t = dump_step_tensor(rb, keys[j].i);
        if (keys[j].used || !selected(c, keys[j].op, t))
            continue;
        diff_row *r = &o[n].r;
        o[n].seq = n;
        n++;
        r->step = step;
        r->b = r->info = t;
        r->ia = -1;
        r->ib = keys[j].i;
        snprintf(r->op, sizeof r->op, "%s", keys[j].op);
        r->status = DIFF_ONLY_B;
    }
    for (int k = 0; k < n; k++) {
        const dump_tensor_info *t = o[k].r.info;
        /* Parameters and gradients (exec_index -1) are taken as the step ends;
         * what A lacks goes last. */
        o[k].r.order = o[k].r.status == DIFF_ONLY_B || t->exec_index < 0 ? INT_MAX : t->exec_index;
    }
    qsort(o, (size_t)n, sizeof *o, row_order);
    free(keys);
    *rows = calloc((size_t)(n ? n : 1), sizeof **rows);
    if (*rows)
        for (int k = 0; k < n; k++)
            (*rows)[k] = o[k].r;
    free(o);
    return *rows ? n : -1;
}

/* ---- tensors the other side fused away ---------------------------------------------
 * Graph mode computes a chain of ops (causal attention: scores, scale,
 * mask, softmax, dropout, out) as one kernel that never holds the
 * intermediates; its hooks still report every op of the chain, under the
 * kernel "k4 fused-attention: h0/attn/scores, ..., h0/attn/out", and the
 * dump keeps what exists. An eager dump has the intermediates too: they are
 * no difference, and the report says which kernel holds them. */

/* Does kernel ("kN KIND: OP, OP, ...") stand for two or more ops, op one
 * of them? */
static bool kernel_lists(const char *kernel, const char *op)
{
    const char *list = strstr(kernel, ": ");
    if (!list || !strchr(list, ',') || !strstr(list, op))
        return false;
    size_t n = strlen(op);
    for (const char *p = list + 2; *p;) {
        const char *end = strstr(p, ", ");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, op, n) == 0)
            return true;
        if (!end)
            break;
        p = end + 2;
    }
    return false;
}

/* The kernel of side `other` (its run.h5's op table, else the kernels its
 * step file names) that fused op away, or NULL. */
static const char *fused_by(const char *op, const diff_side *other, dump_step_reader *r)
{
    for (int i = 0; i < other->n_ops; i++)
        if (other->ops[i].kernel[0] && kernel_lists(other->ops[i].kernel, op))
            return other->ops[i].kernel;
    for (int j = 0, n = r ? dump_step_count(r) : 0; j < n; j++) {
        const dump_tensor_info *t = dump_step_tensor(r, j);
        if (t->kernel[0] && kernel_lists(t->kernel, op))
            return t->kernel;
    }
    return NULL;
}

void diff_mark_fused(diff_row *rows, int n_rows, const diff_side *a, const diff_side *b,
                     dump_step_reader *ra, dump_step_reader *rb)
{
    for (int i = 0; i < n_rows; i++) {
        diff_row *r = &rows[i];
        if (r->status == DIFF_ONLY_A)
            r->fused_in = fused_by(r->op, b, rb);
        else if (r->status == DIFF_ONLY_B)
            r->fused_in = fused_by(r->info->op, a, ra);
    }
}
