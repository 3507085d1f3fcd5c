/*
 * provenance.c — which samples each batch holds: the last TE_BATCH_KEEP
 * batches handed out, with the dataset index of every row, and the hooks'
 * `batch` call before the step's first op can read one.
 *
 * The loader (data.c) fills a record from its slot; a program with its own
 * pipeline publishes one (te_batch_publish). Records live in a ring whose
 * index arrays are reused, so a batch costs no allocation once the ring is
 * warm.
 */
#include "te_internal.h"

#include <stdlib.h>
#include <string.h>

static struct {
    te_batch b[TE_BATCH_KEEP];
    int64_t cap[TE_BATCH_KEEP]; /* rows each entry's arrays hold */
    int64_t *index[TE_BATCH_KEEP], *drawn[TE_BATCH_KEEP];
    int head, n;                /* the oldest entry, and how many are in use */
} ring;

/* TDBG_PROVENANCE=0 turns it off from the start. */
static bool enabled = true;

__attribute__((constructor)) static void provenance_env(void)
{
    const char *v = getenv("TDBG_PROVENANCE");
    if (v && strcmp(v, "0") == 0)
        enabled = false;
}

void te_provenance_enable(bool on) { enabled = on; }

bool te_provenance_on(void) { return enabled; }

int te_batch_count(void) { return ring.n; }

const te_batch *te_batch_at(int i)
{
    return i >= 0 && i < ring.n ? &ring.b[(ring.head + i) % TE_BATCH_KEEP] : NULL;
}

te_batch *te_batch_begin(int64_t rows, int64_t **index, int64_t **drawn)
{
    const int at = (ring.head + ring.n) % TE_BATCH_KEEP;
    if (ring.cap[at] < rows) {
        int64_t *i = realloc(ring.index[at], (size_t)rows * sizeof *i);
        if (i)
            ring.index[at] = i;
        int64_t *d = i ? realloc(ring.drawn[at], (size_t)rows * sizeof *d) : NULL;
        if (d)
            ring.drawn[at] = d;
        if (!i || !d) {
            te_set_error(TE_ERR_NOMEM, "batch provenance: out of memory for %lld rows", (long long)rows);
            return NULL;
        }
        ring.cap[at] = rows;
    }
    if (ring.n == TE_BATCH_KEEP)
        ring.head = (ring.head + 1) % TE_BATCH_KEEP;
    else
        ring.n++;
    te_batch *b = &ring.b[at];
    *b = (te_batch){ .step = te_step(), .rows = rows, .index = ring.index[at], .drawn = ring.drawn[at],
                     .finding = { .row = -1, .element = -1 } };
    *index = ring.index[at];
    *drawn = ring.drawn[at];
    return b;
}

void te_batch_end(const te_batch *b) { te_hooks_batch(b); }

const te_batch *te_batch_of(const te_tensor *t)
{
    if (!t)
        return NULL;
    const int64_t step = te_step();
    for (int i = ring.n - 1; i >= 0; i--) {
        const te_batch *b = te_batch_at(i);
        if (b->step != step)
            break;
        for (int k = 0; k < 2; k++) {
            const te_tensor *u = k ? b->y : b->x;
            if (u && (u == t || (te_data(t) && te_data(u) == te_data(t) && u->numel == t->numel)))
                return b;
        }
    }
    return NULL;
}

void te_batch_source(const te_batch *b, int64_t r, char *buf, size_t n)
{
    if (n)
        buf[0] = '\0';
    if (b && r >= 0 && r < b->rows && b->dataset && b->dataset->source)
        b->dataset->source(b->dataset, b->index[r], buf, n);
}

te_status te_batch_publish(const te_dataset *d, const int64_t *index, int64_t rows, const te_tensor *x,
                           const te_tensor *y)
{
    if (!d || (!index && rows > 0) || rows < 0) {
        te_set_error(TE_ERR_ARG, "te_batch_publish: %s", !d ? "the dataset is NULL"
                                                         : rows < 0 ? "rows is negative" : "index is NULL");
        return TE_ERR_ARG;
    }
    if (!enabled)
        return TE_OK;
    int64_t *idx, *drawn;
    te_batch *b = te_batch_begin(rows, &idx, &drawn);
    if (!b)
        return TE_ERR_NOMEM;
    memcpy(idx, index, (size_t)rows * sizeof *idx);
    memcpy(drawn, index, (size_t)rows * sizeof *drawn);
    b->dataset = d;
    b->x = x;
    b->y = y;
    b->x_dtype = x ? x->dtype : TE_F32;
    te_data_check c;
    if (te_data_check_current(&c) && x && x->dtype == TE_F32 && x->data && x->device == TE_DEV_CPU) {
        const int32_t *labels = y && y->dtype == TE_I32 && y->data && y->numel == rows ? te_data(y) : NULL;
        b->checked = true;
        te_data_check_rows(&c, te_data(x), labels, rows, rows ? x->numel / rows : 0, d->n_classes, &b->finding);
    }
    te_batch_end(b);
    return TE_OK;
}
