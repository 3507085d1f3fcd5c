/*
 * data.c — the batch loader.
 *
 * Batches are numbered in one sequence over all epochs: seq = epoch *
 * batches_per_epoch + b. Batch b of every epoch is built by worker b % W
 * into slot seq % capacity of a ring; a worker may run at most `capacity`
 * batches ahead of the caller, and the caller takes batches strictly in
 * sequence. A batch's contents depend only on (seed, epoch, b), so the
 * order and contents are the same for any worker count, 0 included (then
 * the caller builds each batch itself when it asks for it).
 *
 * Time travel (record.c) keeps each loader's position in its snapshots;
 * te_loader_seek moves a loader back by stopping its workers, emptying the
 * ring and starting them again from there.
 *
 * Each slot keeps the dataset index of its rows and what the data check
 * (data_check.c) found in it, both made by the worker that built it; the
 * caller publishes them with the batch (provenance.c). `data skip`
 * (te_loader_skip) replaces samples by others: the table of replacements
 * changes only while the workers are stopped, so they read it unlocked.
 */
#include "te_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define LOADER_MAX_WORKERS 256
#define STREAM_SHUFFLE 0x5348554646000000ull   /* "SHUFF" + epoch */
#define STREAM_SKIP 0x534b4950ull               /* "SKIP": replacements of skipped samples */
#define SKIP_TRIES 4096                         /* draws for a replacement before giving up */

typedef struct slot {
    int64_t seq;     /* batch held here once built; -1 before the first */
    int64_t count;   /* samples in it */
    float *x;        /* [batch, sample_numel] */
    int32_t *y;      /* [batch] */
    int64_t *index;  /* [batch] the dataset index of each row */
    int64_t *drawn;  /* [batch] the index the epoch's order drew (before replacements) */
    unsigned check_gen;       /* the data check it was checked under; 0: none */
    te_data_finding finding;  /* what that found */
} slot;

/* A worker thread, or the caller when there are none. Each keeps the sample
 * order of the epoch it is building: workers may be in different epochs. */
typedef struct producer {
    te_loader *l;
    int index;
    int64_t epoch;     /* epoch that order belongs to; -1 none yet */
    int64_t *order;    /* [dataset size] */
    pthread_t thread;
} producer;

struct te_loader {
    const te_dataset *d;
    te_loader_opts o;
    int shards;         /* o.shards, at least 1 */
    uint64_t seed;
    int64_t sample_numel;
    int64_t batches;     /* per epoch */
    int n_workers;       /* worker threads; 0 = the caller builds */
    int n_prod;          /* producers made: n_workers, or 1 for the caller */
    int n_started;       /* of them running, to join */
    int capacity;        /* slots in the ring */
    slot *slots;
    producer *prod;      /* n_workers of them, or one for the caller */
    int64_t consumed;    /* batches handed to the caller, over all epochs */
    int64_t start;       /* the batch the workers started from */
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t ready;   /* a slot was filled */
    pthread_cond_t space;   /* the caller took a batch, or stop */
    int n_skip;             /* replacements: skip_from[k] -> skip_to[k], sorted by from */
    int64_t *skip_from, *skip_to;
};

/* The sample order of epoch e: identity, or a Fisher-Yates shuffle driven
 * by the counter-based RNG keyed on (seed, e). */
static void epoch_order(const te_loader *l, int64_t e, int64_t *order)
{
    int64_t n = l->d->size;
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!l->o.shuffle)
        return;
    for (int64_t k = n - 1; k > 0; k--) {
        uint64_t r = te_rand_u64(l->seed, STREAM_SHUFFLE + (uint64_t)e, (uint64_t)k);
        int64_t j = (int64_t)(r % (uint64_t)(k + 1));
        int64_t t = order[k];
        order[k] = order[j];
        order[j] = t;
    }
}

/* Where a replacement table has i, k; else -1. */
static int skip_find(const te_loader *l, int64_t i)
{
    int lo = 0, hi = l->n_skip - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (l->skip_from[mid] == i)
            return mid;
        if (l->skip_from[mid] < i)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* The sample that stands for i: i, or its replacement (followed on: a
 * replacement may have been skipped since). */
static int64_t substitute(const te_loader *l, int64_t i)
{
    for (int hops = 0, k; hops <= l->n_skip && (k = skip_find(l, i)) >= 0; hops++)
        i = l->skip_to[k];
    return i;
}

/* Checks s under the data check in force, unless it was checked under it. */
static void check_slot(const te_loader *l, slot *s)
{
    te_data_check c;
    const unsigned gen = te_data_check_current(&c);
    if (gen == s->check_gen)
        return;
    s->check_gen = gen;
    if (gen)
        te_data_check_rows(&c, s->x, s->y, s->count, l->sample_numel, l->d->n_classes, &s->finding);
    else
        s->finding = (te_data_finding){ .row = -1, .element = -1 };
}

/* Builds batch b of epoch e into s and checks it. Returns false when the
 * loader is stopping, leaving s partly written. */
static bool build_batch(te_loader *l, producer *p, int64_t e, int64_t b, slot *s)
{
    if (p->epoch != e) {
        epoch_order(l, e, p->order);
        p->epoch = e;
    }
    int64_t start = b * l->o.batch * l->shards + (int64_t)l->o.shard * l->o.batch;
    int64_t count = l->d->size - start < l->o.batch ? l->d->size - start : l->o.batch;
    for (int64_t k = 0; k < count; k++) {
        if (atomic_load_explicit(&l->stop, memory_order_relaxed))
            return false;
        const int64_t i = p->order[start + k];
        s->drawn[k] = i;
        s->index[k] = l->n_skip ? substitute(l, i) : i;
        l->d->get(l->d, s->index[k], s->x + k * l->sample_numel, s->y + k);
    }
    s->count = count;
    s->check_gen = 0;
    check_slot(l, s);
    return true;
}

static void *worker_main(void *arg)
{
    producer *p = arg;
    te_loader *l = p->l;
    for (int64_t e = l->start / l->batches;; e++)
        for (int64_t b = p->index; b < l->batches; b += l->n_workers) {
            int64_t seq = e * l->batches + b;
            if (seq < l->start)
                continue;
            pthread_mutex_lock(&l->mu);
            while (!atomic_load(&l->stop) && seq >= l->consumed + l->capacity)
                pthread_cond_wait(&l->space, &l->mu);
            pthread_mutex_unlock(&l->mu);
            /* The slot is ours alone until we publish seq: the caller reads
             * it only once s->seq == seq. */
            slot *s = &l->slots[seq % l->capacity];
            if (atomic_load(&l->stop) || !build_batch(l, p, e, b, s))
                return NULL;
            pthread_mutex_lock(&l->mu);
            s->seq = seq;
            pthread_cond_broadcast(&l->ready);
            pthread_mutex_unlock(&l->mu);
        }
}

/* Stops the workers, waking any that wait for space. */
static void stop_workers(te_loader *l)
{
    pthread_mutex_lock(&l->mu);
    atomic_store(&l->stop, true);
    pthread_cond_broadcast(&l->space);
    pthread_mutex_unlock(&l->mu);
    for (int w = 0; w < l->n_started; w++)
        pthread_join(l->prod[w].thread, NULL);
    l->n_started = 0;
}

/* Starts the workers from batch l->start; false with the error set. */
static bool start_workers(te_loader *l)
{
    atomic_store(&l->stop, false);
    for (int w = 0; w < l->n_workers; w++) {
        int rc = pthread_create(&l->prod[w].thread, NULL, worker_main, &l->prod[w]);
        if (rc != 0) {
            te_set_error(TE_ERR_IO, "loader: cannot start worker %d of %d: %s", w, l->n_workers,
                         strerror(rc));
            return false;
        }
        l->n_started = w + 1;
    }
    return true;
}

/* Stops the workers and frees everything. */
static void loader_destroy(te_loader *l)
{
    te_record_loader_remove(l);
    stop_workers(l);
    for (int w = 0; w < l->n_prod && l->prod; w++)
        free(l->prod[w].order);
    for (int k = 0; k < l->capacity && l->slots; k++) {
        free(l->slots[k].x);
        free(l->slots[k].y);
        free(l->slots[k].index);
        free(l->slots[k].drawn);
    }
    free(l->skip_from);
    free(l->skip_to);
    free(l->prod);
    free(l->slots);
    pthread_cond_destroy(&l->space);
    pthread_cond_destroy(&l->ready);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static bool check_opts(const te_dataset *d, const te_loader_opts *o)
{
    if (!d || !o) {
        te_set_error(TE_ERR_ARG, "te_loader_new: %s is NULL", !d ? "dataset" : "options");
        return false;
    }
    if (!d->get || d->size < 1 || d->ndim < 1 || d->ndim > TE_MAX_DIMS - 1) {
        te_set_error(TE_ERR_ARG,
                     "te_loader_new: dataset '%s' is malformed (size %lld, ndim %d, get %s)",
                     d->name ? d->name : "?", (long long)d->size, d->ndim,
                     d->get ? "set" : "NULL");
        return false;
    }
    for (int k = 0; k < d->ndim; k++)
        if (d->shape[k] < 1) {
            char buf[64];
            te_set_error(TE_ERR_ARG, "te_loader_new: dataset '%s' has sample shape %s",
                         d->name ? d->name : "?",
                         te_shape_str(d->ndim, d->shape, buf, sizeof(buf)));
            return false;
        }
    if (o->batch < 1) {
        te_set_error(TE_ERR_ARG, "te_loader_new: batch %d must be >= 1", o->batch);
        return false;
    }
    if (o->workers < 0 || o->workers > LOADER_MAX_WORKERS) {
        te_set_error(TE_ERR_ARG, "te_loader_new: workers %d must be in 0..%d", o->workers,
                     LOADER_MAX_WORKERS);
        return false;
    }
    if (o->prefetch < 0) {
        te_set_error(TE_ERR_ARG, "te_loader_new: prefetch %d must be >= 0", o->prefetch);
        return false;
    }
    if (o->shards < 0 || o->shard < 0 || (o->shards > 1 && o->shard >= o->shards) ||
        (o->shards <= 1 && o->shard != 0)) {
        te_set_error(TE_ERR_ARG, "te_loader_new: shard %d of %d shards is not one of them", o->shard, o->shards);
        return false;
    }
    if (o->shards > 1 && !o->drop_remainder) {
        te_set_error(TE_ERR_ARG, "te_loader_new: %d shards need drop_remainder (every rank takes a whole "
                     "batch)", o->shards);
        return false;
    }
    const int64_t global = (int64_t)o->batch * (o->shards > 1 ? o->shards : 1);
    if (o->drop_remainder && d->size < global) {
        te_set_error(TE_ERR_ARG,
                     "te_loader_new: batch %lld with drop_remainder leaves no batch of dataset '%s' "
                     "(size %lld)",
                     (long long)global, d->name ? d->name : "?", (long long)d->size);
        return false;
    }
    return true;
}

/* A loader over d, which must outlive it; with workers, d->get is called
 * from several threads at once (the built-in datasets are pure functions).
 * Seed 0 takes the engine's seed. On error, NULL is returned and te_error()
 * says why. */
te_loader *te_loader_new(const te_dataset *d, const te_loader_opts *o)
{
    if (!check_opts(d, o))
        return NULL;
    te_loader *l = calloc(1, sizeof(*l));
    if (!l) {
        te_set_error(TE_ERR_NOMEM, "te_loader_new: out of memory");
        return NULL;
    }
    l->d = d;
    l->o = *o;
    l->seed = o->seed ? o->seed : te_seed();
    l->sample_numel = 1;
    for (int k = 0; k < d->ndim; k++)
        l->sample_numel *= d->shape[k];
    l->shards = o->shards > 1 ? o->shards : 1;
    const int64_t global = (int64_t)o->batch * l->shards;
    l->batches = o->drop_remainder ? d->size / global : (d->size + global - 1) / global;
    /* Workers beyond the batch count would never have a batch to build. */
    int workers = (int64_t)o->workers < l->batches ? o->workers : (int)l->batches;
    l->n_workers = workers;
    l->capacity = workers == 0 ? 1 : o->prefetch > 0 ? o->prefetch : 2 * workers;
    atomic_init(&l->stop, false);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->ready, NULL);
    pthread_cond_init(&l->space, NULL);

    int n_prod = l->n_prod = workers > 0 ? workers : 1;
    int64_t rows = d->size < o->batch ? d->size : o->batch;   /* largest batch made */
    l->slots = calloc((size_t)l->capacity, sizeof(*l->slots));
    l->prod = calloc((size_t)n_prod, sizeof(*l->prod));
    bool ok = l->slots && l->prod;
    for (int k = 0; ok && k < l->capacity; k++) {
        l->slots[k].seq = -1;
        l->slots[k].x = malloc((size_t)(rows * l->sample_numel) * sizeof(float));
        l->slots[k].y = malloc((size_t)rows * sizeof(int32_t));
        l->slots[k].index = malloc((size_t)rows * sizeof(int64_t));
        l->slots[k].drawn = malloc((size_t)rows * sizeof(int64_t));
        ok = l->slots[k].x && l->slots[k].y && l->slots[k].index && l->slots[k].drawn;
    }
    for (int w = 0; ok && w < n_prod; w++) {
        l->prod[w] = (producer){ .l = l, .index = w, .epoch = -1 };
        l->prod[w].order = malloc((size_t)d->size * sizeof(int64_t));
        ok = l->prod[w].order != NULL;
    }
    if (!ok) {
        te_set_error(TE_ERR_NOMEM,
                     "te_loader_new: out of memory for %d batches of %lld x %lld floats",
                     l->capacity, (long long)rows, (long long)l->sample_numel);
        loader_destroy(l);
        return NULL;
    }
    if (te_record_loader_add(l) != TE_OK || !start_workers(l)) {
        loader_destroy(l);
        return NULL;
    }
    return l;
}

int64_t te_loader_position(const te_loader *l) { return l ? l->consumed : 0; }

/* Stops the workers, runs change (which may alter what batches hold), and
 * starts them again from batch pos with an empty ring. */
static te_status restart_at(te_loader *l, int64_t pos, void (*change)(te_loader *, void *), void *arg)
{
    stop_workers(l);
    if (change)
        change(l, arg);
    for (int k = 0; k < l->capacity; k++)
        l->slots[k].seq = -1;
    l->consumed = l->start = pos;
    if (start_workers(l))
        return TE_OK;
    /* Too few threads now: the caller builds each batch from here on (the
     * same batches), with the started workers stopped again. */
    stop_workers(l);
    l->n_workers = 0;
    return TE_ERR_IO;
}

te_status te_loader_seek(te_loader *l, int64_t pos)
{
    if (!l || pos < 0) {
        te_set_error(TE_ERR_ARG, "te_loader_seek: %s", !l ? "the loader is NULL" : "the position is negative");
        return TE_ERR_ARG;
    }
    return pos == l->consumed ? TE_OK : restart_at(l, pos, NULL, NULL);
}

/* A table of n replacements to put in force (restart_at's change). */
typedef struct skip_table {
    int n;
    const int64_t *from, *to;
    te_status st;
} skip_table;

static void set_table(te_loader *l, void *arg)
{
    skip_table *t = arg;
    int64_t *from = t->n ? malloc((size_t)t->n * sizeof *from) : NULL;
    int64_t *to = t->n ? malloc((size_t)t->n * sizeof *to) : NULL;
    if (t->n && (!from || !to)) {
        free(from);
        free(to);
        te_set_error(TE_ERR_NOMEM, "data skip: out of memory for %d replacements", t->n);
        t->st = TE_ERR_NOMEM;
        return;
    }
    if (t->n) {
        memcpy(from, t->from, (size_t)t->n * sizeof *from);
        memcpy(to, t->to, (size_t)t->n * sizeof *to);
    }
    free(l->skip_from);
    free(l->skip_to);
    l->skip_from = from;
    l->skip_to = to;
    l->n_skip = t->n;
}

/* Puts n replacements in force: the workers stop, take the table and
 * start again at the loader's position. */
static te_status skips_set(te_loader *l, int n, const int64_t *from, const int64_t *to)
{
    skip_table t = { n, from, to, TE_OK };
    te_status st = restart_at(l, l->consumed, set_table, &t);
    return t.st != TE_OK ? t.st : st;
}

te_status te_loader_skip(te_loader *l, int64_t index, int64_t *replacement)
{
    if (!l) {
        te_set_error(TE_ERR_ARG, "data skip: the loader is NULL");
        return TE_ERR_ARG;
    }
    if (index < 0 || index >= l->d->size) {
        te_set_error(TE_ERR_ARG, "data skip: sample %lld is outside dataset '%s' (0..%lld)", (long long)index,
                     l->d->name ? l->d->name : "?", (long long)l->d->size - 1);
        return TE_ERR_ARG;
    }
    if (skip_find(l, index) >= 0) {
        te_set_error(TE_ERR_ARG, "data skip: sample %lld is replaced already (by %lld)", (long long)index,
                     (long long)substitute(l, index));
        return TE_ERR_ARG;
    }
    /* Drawn from (seed, index): the same replacement in every run. */
    int64_t to = -1;
    for (uint64_t k = 0; k < SKIP_TRIES && to < 0; k++) {
        int64_t r = (int64_t)(te_rand_u64(l->seed, STREAM_SKIP, (uint64_t)index * SKIP_TRIES + k) %
                              (uint64_t)l->d->size);
        if (r != index && skip_find(l, r) < 0)
            to = r;
    }
    if (to < 0) {
        te_set_error(TE_ERR_ARG, "data skip: no sample left to take the place of %lld (%d of %lld replaced)",
                     (long long)index, l->n_skip, (long long)l->d->size);
        return TE_ERR_ARG;
    }
    /* The table with (index, to) in its sorted place. */
    const int n = l->n_skip + 1;
    int64_t *from = malloc((size_t)n * sizeof *from), *dest = malloc((size_t)n * sizeof *dest);
    if (!from || !dest) {
        free(from);
        free(dest);
        te_set_error(TE_ERR_NOMEM, "data skip: out of memory for %d replacements", n);
        return TE_ERR_NOMEM;
    }
    int k = 0;
    for (; k < l->n_skip && l->skip_from[k] < index; k++) {
        from[k] = l->skip_from[k];
        dest[k] = l->skip_to[k];
    }
    from[k] = index;
    dest[k] = to;
    for (; k < l->n_skip; k++) {
        from[k + 1] = l->skip_from[k];
        dest[k + 1] = l->skip_to[k];
    }
    te_status st = skips_set(l, n, from, dest);
    free(from);
    free(dest);
    if ((st == TE_OK || st == TE_ERR_IO) && replacement) /* TE_ERR_IO: in force, the caller builds batches */
        *replacement = to;
    return st;
}

int te_loader_skips(const te_loader *l, int64_t *from, int64_t *to, int max)
{
    if (!l)
        return 0;
    for (int k = 0; k < l->n_skip && k < max; k++) {
        from[k] = l->skip_from[k];
        to[k] = l->skip_to[k];
    }
    return l->n_skip;
}

te_status te_loader_skips_restore(te_loader *l, int n, const int64_t *from, const int64_t *to)
{
    if (n == l->n_skip && (n == 0 || (memcmp(from, l->skip_from, (size_t)n * sizeof *from) == 0 &&
                                      memcmp(to, l->skip_to, (size_t)n * sizeof *to) == 0)))
        return TE_OK;
    return skips_set(l, n, from, to);
}

const te_dataset *te_loader_dataset(const te_loader *l) { return l ? l->d : NULL; }
uint64_t te_loader_seed(const te_loader *l) { return l ? l->seed : 0; }

/* The batch's record (provenance.c): its rows' indices and its check;
 * NULL when out of memory. */
static te_batch *record_batch(te_loader *l, const slot *s, int64_t seq, const te_tensor *x, const te_tensor *y)
{
    int64_t *index, *drawn;
    te_batch *b = te_batch_begin(s->count, &index, &drawn);
    if (!b)
        return NULL;
    memcpy(index, s->index, (size_t)s->count * sizeof *index);
    memcpy(drawn, s->drawn, (size_t)s->count * sizeof *drawn);
    b->dataset = l->d;
    b->loader = l;
    b->seed = l->seed;
    b->shuffle = l->o.shuffle;
    b->position = seq;
    b->epoch = seq / l->batches;
    b->batch_in_epoch = seq % l->batches;
    b->x = x;
    b->y = y;
    b->x_dtype = TE_F32;
    b->checked = s->check_gen != 0;
    b->finding = s->finding;
    return b;
}

/* Waits for the next batch in sequence (or builds it, without workers) and
 * copies it into new tape tensors. On error the batch stays next. */
te_status te_loader_next(te_loader *l, te_tensor **x, te_tensor **y)
{
    if (!l || !x || !y) {
        te_set_error(TE_ERR_ARG, "te_loader_next: %s is NULL", !l ? "loader" : !x ? "x" : "y");
        return TE_ERR_ARG;
    }
    if (te_rec_unwinding) /* the batch stays next: the restore moves it anyway */
        return te_rewound("te_loader_next");
    int64_t seq = l->consumed;
    /* The profiler's "data": the training thread's time here, the batch
     * made in place (no workers) or waited for, and its tensors. */
    const uint64_t t0 = te_prof_on ? te_prof_now() : 0;
    slot *s;
    if (l->n_workers == 0) {
        s = &l->slots[0];
        build_batch(l, &l->prod[0], seq / l->batches, seq % l->batches, s);
    } else {
        s = &l->slots[seq % l->capacity];
        pthread_mutex_lock(&l->mu);
        if (s->seq != seq && te_log_on(TE_LOG_DATA, TE_LOG_DEBUG)) {
            const uint64_t w0 = te_prof_now();
            while (s->seq != seq)
                pthread_cond_wait(&l->ready, &l->mu);
            te_log_write(TE_LOG_DATA, TE_LOG_DEBUG, "loader '%s': waited %.3f ms for batch %lld (%d worker%s)",
                         l->d->name ? l->d->name : "?", (double)(te_prof_now() - w0) / 1e6, (long long)seq,
                         l->n_workers, l->n_workers == 1 ? "" : "s");
        }
        while (s->seq != seq)
            pthread_cond_wait(&l->ready, &l->mu);
        pthread_mutex_unlock(&l->mu);
        check_slot(l, s); /* the check changed since the worker built it */
    }

    int64_t xshape[TE_MAX_DIMS] = { s->count };
    memcpy(xshape + 1, l->d->shape, (size_t)l->d->ndim * sizeof(int64_t));
    te_tensor *tx = te_tensor_from(TE_F32, 1 + l->d->ndim, xshape, s->x);
    te_tensor *ty = tx ? te_tensor_from(TE_I32, 1, (const int64_t[]){ s->count }, s->y) : NULL;
    if (!tx || !ty)
        return te_error_code() != TE_OK ? te_error_code() : TE_ERR_NOMEM;
    snprintf(tx->name, sizeof tx->name, "batch:x"); /* what a debugger calls them */
    snprintf(ty->name, sizeof ty->name, "batch:y");
    const te_batch *b = te_provenance_on() ? record_batch(l, s, seq, tx, ty) : NULL;
    if (!b && te_provenance_on())
        return TE_ERR_NOMEM;

    pthread_mutex_lock(&l->mu);
    l->consumed++;
    pthread_cond_broadcast(&l->space);
    pthread_mutex_unlock(&l->mu);
    *x = tx;
    *y = ty;
    if (te_prof_on)
        te_prof_interval("data", t0, te_prof_now());
    if (b)
        te_batch_end(b); /* after consumed: a `data skip` in a hook takes effect from the next batch */
    return TE_OK;
}

/* The epoch the next batch comes from: 0 at first, 1 once every batch of
 * epoch 0 has been handed out. */
int64_t te_loader_epoch(const te_loader *l) { return l ? l->consumed / l->batches : 0; }

int64_t te_loader_batches_per_epoch(const te_loader *l) { return l ? l->batches : 0; }

void te_loader_free(te_loader *l)
{
    if (l)
        loader_destroy(l);
}
