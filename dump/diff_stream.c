/* diff_stream.c — the values of a step's pairs, compared on every core.
 *
 * A tensor tdbg wrote uncompressed is a list of checksummed chunks, each a
 * contiguous run of its values (dump_step_extents). Every chunk of every
 * pair of the step is one work item: a thread maps the chunk of each side
 * from the file (reads it when it cannot be mapped; the other side's
 * overlapping chunks when the two sides' chunks cover different elements),
 * verifies the checksums and adds the elements to the item's running sums;
 * the items of a pair are then merged in element order, so the result does
 * not depend on the number of threads. No HDF5 call runs in the items (HDF5
 * is not thread-safe): meanwhile one thread may open the next step.
 *
 * Compressed tensors, and chunks over DIFF_CHUNK_CAP, go through HDF5
 * hyperslabs instead, DIFF_BLOCK elements at a time on each side, the
 * arithmetic split over the threads.
 *
 * Memory for values: per thread, one mapped chunk of each side (plus, when
 * the sides' chunks differ, one assembled run); on the HDF5 path two blocks
 * of DIFF_BLOCK elements. With tdbg's chunks of at most 1 MiB, that is at
 * most 2 MiB a thread on the fast path and 8 MiB on the HDF5 path, whatever
 * the size of the tensors and of the dumps.
 */
#include "diff.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* One side of a pair on the fast path. */
typedef struct side {
    dump_step_reader *r;
    int i;                      /* tensor index */
    int fd;
    uint64_t file_size;
    long page;                  /* mappings start at a multiple */
    const dump_extent *e;
    int n;
    size_t esize;
} side;

/* A row on the fast path: its two sides. */
typedef struct fast_row {
    int row;
    side s[2];
    dump_extent *own[2];        /* the extent lists, freed at the end */
} fast_row;

/* Elements [first, first + count) of one fast row. */
typedef struct item {
    int fr;                     /* index in the fast rows */
    int64_t first, count;
    diff_acc acc;
    char *why;                  /* set when the values could not be read */
} item;

/* A thread's buffers, grown on demand, and the chunk of each side it has
 * mapped. */
typedef struct buffers {
    unsigned char *stage[2], *run[2];
    size_t stage_cap[2], run_cap[2];
    void *map[2];
    size_t map_len[2];
} buffers;

static bool grow(unsigned char **b, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    unsigned char *p = realloc(*b, need);
    if (!p)
        return false;
    *b = p;
    *cap = need;
    return true;
}

static void unmap(buffers *b, int k)
{
    if (b->map[k])
        munmap(b->map[k], b->map_len[k]);
    b->map[k] = NULL;
}

static char *message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *message(const char *fmt, ...)
{
    char buf[DIFF_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return strdup(buf);
}

/* Extent e of side k, verified, at *bytes: mapped from the file (no copy;
 * held in b->map[k] until the side's next extent), or read into the stage
 * buffer when it cannot be mapped. NULL, or why. */
static char *read_extent(const side *s, int k, const dump_extent *e, buffers *b,
                         const unsigned char **bytes)
{
    const char *file = dump_step_path(s->r), *path = dump_step_tensor(s->r, s->i)->path;
    unmap(b, k);
    if (e->offset + e->size > s->file_size)
        return message("%s: %s: cannot read the values: the file ends inside a chunk", file, path);
    const uint64_t base = e->offset - e->offset % (uint64_t)s->page;
    const size_t len = (size_t)(e->offset + e->size - base);
    void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, s->fd, (off_t)base);
    if (m != MAP_FAILED) {
        b->map[k] = m;
        b->map_len[k] = len;
        *bytes = (const unsigned char *)m + (e->offset - base);
    } else {
        if (!grow(&b->stage[k], &b->stage_cap[k], e->size))
            return strdup("out of memory");
        for (size_t done = 0; done < e->size;) {
            ssize_t got = pread(s->fd, b->stage[k] + done, e->size - done, (off_t)(e->offset + done));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                return message("%s: %s: cannot read the values: %s", file, path,
                               got < 0 ? strerror(errno) : "the file ends inside a chunk");
            done += (size_t)got;
        }
        *bytes = b->stage[k];
    }
    char why[DIFF_WHY_MAX];
    if (!dump_extent_verify(s->r, s->i, e, *bytes, why, sizeof why))
        return strdup(why);
    return NULL;
}

/* The last extent of s starting at or before element at. */
static int extent_at(const side *s, int64_t at)
{
    int lo = 0, hi = s->n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->e[mid].first <= at)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Elements [first, first + count) of side k as stored, at *values: the
 * chunk itself when one extent is exactly that run, else assembled from the
 * extents overlapping it. NULL, or why. */
static char *fetch(const side *s, int k, buffers *b, int64_t first, int64_t count,
                   const unsigned char **values)
{
    int x = extent_at(s, first);
    const dump_extent *e = &s->e[x];
    if (e->first == first && e->count == count)
        return read_extent(s, k, e, b, values);
    if (!grow(&b->run[k], &b->run_cap[k], (size_t)count * s->esize))
        return strdup("out of memory");
    for (int64_t at = first; at < first + count; e = &s->e[++x]) {
        const unsigned char *bytes;
        char *why = read_extent(s, k, e, b, &bytes);
        if (why)
            return why;
        int64_t end = e->first + e->count < first + count ? e->first + e->count : first + count;
        memcpy(b->run[k] + (size_t)(at - first) * s->esize,
               bytes + (size_t)(at - e->first) * s->esize, (size_t)(end - at) * s->esize);
        at = end;
    }
    unmap(b, k);
    *values = b->run[k];
    return NULL;
}

static void compare_item(const fast_row *f, const diff_row *r, item *it, buffers *b)
{
    const unsigned char *v[2] = { NULL, NULL };
    diff_acc_init(&it->acc, r->a->dtype == r->b->dtype);
    for (int k = 0; k < 2 && !it->why; k++)
        it->why = fetch(&f->s[k], k, b, it->first, it->count, &v[k]);
    if (!it->why)
        diff_acc_add(&it->acc, v[0], r->a->dtype, v[1], r->b->dtype, it->first, it->count,
                     r->tol);
    unmap(b, 0);
    unmap(b, 1);
}

/* ---- the HDF5 path ----------------------------------------------------------------------- */

/* Compares one row DIFF_BLOCK elements at a time; the block's arithmetic
 * split over the threads. False with why. */
static bool compare_slow(dump_step_reader *ra, dump_step_reader *rb, diff_row *r, diff_acc *acc,
                         char *why, size_t wn)
{
    const int64_t numel = r->a->numel;
    const int64_t block = numel < DIFF_BLOCK ? numel : DIFF_BLOCK;
    unsigned char *va = malloc((size_t)block * te_dtype_size(r->a->dtype) + 1);
    unsigned char *vb = malloc((size_t)block * te_dtype_size(r->b->dtype) + 1);
    bool ok = va && vb;
    if (!ok)
        snprintf(why, wn, "%s: %s: out of memory", dump_step_path(ra), r->a->path);
    diff_acc_init(acc, r->a->dtype == r->b->dtype);
    for (int64_t at = 0; ok && at < numel; at += block) {
        const int64_t count = numel - at < block ? numel - at : block;
        ok = dump_step_read_range(ra, r->ia, at, count, va, why, wn) &&
             dump_step_read_range(rb, r->ib, at, count, vb, why, wn);
        if (!ok)
            break;
        enum { PARTS = 16 };
        diff_acc part[PARTS];
        const int64_t per = (count + PARTS - 1) / PARTS;
#pragma omp parallel for schedule(static) if (count >= 65536)
        for (int p = 0; p < PARTS; p++) {
            const int64_t lo = p * per < count ? p * per : count;
            const int64_t hi = lo + per < count ? lo + per : count;
            diff_acc_init(&part[p], r->a->dtype == r->b->dtype);
            diff_acc_add(&part[p], va + (size_t)lo * te_dtype_size(r->a->dtype), r->a->dtype,
                         vb + (size_t)lo * te_dtype_size(r->b->dtype), r->b->dtype, at + lo,
                         hi - lo, r->tol);
        }
        for (int p = 0; p < PARTS; p++)
            diff_acc_merge(acc, &part[p]);
    }
    free(va);
    free(vb);
    return ok;
}

/* ---- a step ---------------------------------------------------------------------------- */

static void row_done(diff_row *r, const diff_acc *acc)
{
    diff_metrics_finish(acc, &r->m);
    r->differs = r->m.n_fail > 0;
}

static void row_failed(diff_ctx *c, diff_row *r, const char *why)
{
    diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
    r->status = DIFF_UNREADABLE;
    r->differs = false;
}

/* The fast path's extents of both sides of row r, into f; false when the
 * row takes the HDF5 path (or is unreadable: *bad set). */
static bool plan_fast(diff_ctx *c, dump_step_reader *ra, dump_step_reader *rb, const int fd[2],
                      const uint64_t size[2], diff_row *r, int row, fast_row *f, bool *bad)
{
    char why[DIFF_WHY_MAX];
    dump_step_reader *rd[2] = { ra, rb };
    const int idx[2] = { r->ia, r->ib };
    bool fast = true;
    memset(f, 0, sizeof *f);
    f->row = row;
    *bad = false;
    for (int k = 0; k < 2 && !*bad; k++) {
        int n = dump_step_extents(rd[k], idx[k], &f->own[k], why, sizeof why);
        if (n < 0) {
            row_failed(c, r, why);
            *bad = true;
        }
        for (int x = 0; x < n; x++)
            fast = fast && f->own[k][x].size <= DIFF_CHUNK_CAP;
        fast = fast && n > 0 && fd[k] >= 0;
        f->s[k] = (side){ .r = rd[k], .i = idx[k], .fd = fd[k], .file_size = size[k],
                          .page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096,
                          .e = f->own[k], .n = n,
                          .esize = te_dtype_size(dump_step_tensor(rd[k], idx[k])->dtype) };
    }
    if (fast && !*bad)
        return true;
    free(f->own[0]);
    free(f->own[1]);
    f->own[0] = f->own[1] = NULL;
    return false;
}

struct diff_plan {
    dump_step_reader *ra, *rb;
    diff_row *rows;
    int n_rows;
    int fd[2];
    uint64_t size[2];
    fast_row *fast;
    int n_fast;
    item *items;
    int n_items;
    bool *slow;                 /* rows for the HDF5 path */
};

diff_plan *diff_plan_new(diff_ctx *c, dump_step_reader *ra, dump_step_reader *rb, diff_row *rows,
                         int n_rows)
{
    diff_plan *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    *p = (diff_plan){ .ra = ra, .rb = rb, .rows = rows, .n_rows = n_rows,
                      .fd = { open(dump_step_path(ra), O_RDONLY | O_CLOEXEC),
                              open(dump_step_path(rb), O_RDONLY | O_CLOEXEC) } };
    for (int k = 0; k < 2; k++) {
        struct stat st;
        if (p->fd[k] >= 0 && fstat(p->fd[k], &st) == 0)
            p->size[k] = (uint64_t)st.st_size;
    }
    p->fast = calloc((size_t)(n_rows ? n_rows : 1), sizeof *p->fast);
    p->slow = calloc((size_t)(n_rows ? n_rows : 1), sizeof *p->slow);
    if (!p->fast || !p->slow) {
        diff_plan_free(p);
        return NULL;
    }
    for (int i = 0; i < n_rows; i++) {
        diff_row *r = &rows[i];
        if (r->status == DIFF_SHAPE)
            r->differs = true;
        if (r->status != DIFF_COMPARED)
            continue;
        if (r->a->numel == 0) {
            diff_acc acc;
            diff_acc_init(&acc, r->a->dtype == r->b->dtype);
            row_done(r, &acc);
            continue;
        }
        bool bad;
        if (plan_fast(c, ra, rb, p->fd, p->size, r, i, &p->fast[p->n_fast], &bad)) {
            /* Work items: the chunks of the side with the longer ones. */
            const fast_row *f = &p->fast[p->n_fast++];
            p->n_items += f->s[0].e[0].count >= f->s[1].e[0].count ? f->s[0].n : f->s[1].n;
        } else if (!bad) {
            p->slow[i] = true;
        }
    }
    p->items = calloc((size_t)(p->n_items ? p->n_items : 1), sizeof *p->items);
    if (!p->items) {
        diff_plan_free(p);
        return NULL;
    }
    int k = 0;
    for (int f = 0; f < p->n_fast; f++) {
        const fast_row *fr = &p->fast[f];
        const side *sd = fr->s[0].e[0].count >= fr->s[1].e[0].count ? &fr->s[0] : &fr->s[1];
        for (int x = 0; x < sd->n; x++)
            p->items[k++] = (item){ .fr = f, .first = sd->e[x].first, .count = sd->e[x].count };
    }
    return p;
}

void diff_plan_run(diff_plan *p, void (*also)(void *), void *arg)
{
#pragma omp parallel
    {
#pragma omp single nowait
        if (also)
            also(arg);
        buffers b;
        memset(&b, 0, sizeof b);
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < p->n_items; i++)
            compare_item(&p->fast[p->items[i].fr], &p->rows[p->fast[p->items[i].fr].row],
                         &p->items[i], &b);
        for (int s = 0; s < 2; s++) {
            free(b.stage[s]);
            free(b.run[s]);
        }
    }
}

void diff_plan_finish(diff_ctx *c, diff_plan *p)
{
    for (int i = 0, f = 0; f < p->n_fast; f++) {
        diff_row *r = &p->rows[p->fast[f].row];
        diff_acc acc;
        diff_acc_init(&acc, r->a->dtype == r->b->dtype);
        const char *why = NULL;
        for (; i < p->n_items && p->items[i].fr == f; i++) {
            if (p->items[i].why && !why)
                why = p->items[i].why;
            diff_acc_merge(&acc, &p->items[i].acc);
        }
        if (why)
            row_failed(c, r, why);
        else
            row_done(r, &acc);
    }
    for (int i = 0; i < p->n_rows; i++) {
        if (!p->slow[i])
            continue;
        char why[DIFF_WHY_MAX];
        diff_acc acc;
        if (compare_slow(p->ra, p->rb, &p->rows[i], &acc, why, sizeof why))
            row_done(&p->rows[i], &acc);
        else
            row_failed(c, &p->rows[i], why);
    }
    diff_plan_free(p);
}

void diff_plan_free(diff_plan *p)
{
    if (!p)
        return;
    for (int i = 0; p->items && i < p->n_items; i++)
        free(p->items[i].why);
    for (int f = 0; p->fast && f < p->n_fast; f++) {
        free(p->fast[f].own[0]);
        free(p->fast[f].own[1]);
    }
    free(p->items);
    free(p->fast);
    free(p->slow);
    for (int s = 0; s < 2; s++)
        if (p->fd[s] >= 0)
            close(p->fd[s]);
    free(p);
}
