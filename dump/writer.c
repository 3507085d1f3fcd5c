/*
 * writer.c — the dump session: engine hooks pick the tensors the spec
 * selects, copy them, and queue them to one background thread that makes
 * every HDF5 call (h5write.c), a step file per step.
 *
 * A second thread, the syncer, deals with the disk: the writer seals a step
 * (its file complete in memory) and hands it over while it builds the next.
 * The syncer writes a step's file, then writes the next one (when it is
 * there) before it fsyncs and renames the first: copying one file into the
 * page cache overlaps the disk's work on the one before. It writes run.h5
 * too, once the first step's file is on its way to the disk.
 *
 * The queue holds copies up to a memory cap. When the disk is slower than
 * training and the cap is reached, the training thread waits for room: a
 * dump never drops a tensor silently. A write error (full disk, no
 * permission) stops dumping with a message naming the path; training goes
 * on, and the steps already written stay complete and readable.
 *
 * The flight recorder (when=nonfinite|break): a selected step's copies are
 * held in memory instead, the last `keep` steps of them. When a selected
 * tensor holds a NaN or Inf (nonfinite) or the debugger stops (break,
 * dump_stopped), the held steps are written at once: the keep-1 before
 * and the current step as far as it went (a copy of it: the step stays
 * held, and its whole file replaces that one when it ends), or at a stop
 * between steps the last `keep`. At a stop dump_stopped then waits until
 * they are fsynced and renamed, so a quit or a kill -9 next loses nothing.
 *
 * The counts (`info dump`) are of published files: a step and its tensors
 * count once its file has its final name, and a step written again (whole
 * after its part at a stop) counts once.
 */
#include "dump.h"
#include "h5file.h"

#include <errno.h>
#include <fnmatch.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_CAP_BYTES ((size_t)256 << 20) /* copies waiting for the disk */
#define MAX_OPS 4096                         /* rows of run.h5's op table */
#define MAX_SEALED 3                         /* steps sealed, not yet renamed */
#define POOL_MAX 256                         /* copy buffers kept for reuse */
#define WRITER_NICE 10                       /* added to the writer threads' nice value */
#define DIR_SYNC_EVERY 1.0                   /* seconds between syncs of the run directory */
#define COLLS_EVERY 1.0                      /* seconds between rewrites of run.h5 for its collectives */

typedef enum { ITEM_BEGIN, ITEM_TENSOR, ITEM_STATS, ITEM_COMMIT } item_kind;
static const char *const item_names[] = { "begin", "tensor", "stats", "commit" }; /* in the debug log */

typedef struct item {
    item_kind kind;
    int64_t step;
    dump_tensor_info ti;  /* ITEM_TENSOR */
    dump_stats_row row;   /* ITEM_STATS */
    void *data;           /* ITEM_TENSOR: the copy */
    te_copy_ticket ticket; /* ... queued there: waited for before data is read or reused */
    size_t bytes, cap;    /* the copy's size, its buffer's */
    dump_op_row *ops;     /* ITEM_COMMIT: the op table for run.h5, when it or the collectives grew */
    int n_ops;
    dump_coll_row *colls; /* ... and the collectives with it (data parallel) */
    int n_colls;
    uint64_t peak_bytes;  /* with ops: the allocator's peak then */
    bool again;           /* BEGIN, COMMIT: replaces the step's file written before */
    dump_step_scaler scaler; /* COMMIT: the step's loss scaler */
    dump_sample_row *samples; /* COMMIT: the samples of the batches the step took */
    int n_samples;
    int64_t was_tensors;  /* ... which held this many tensors */
    uint64_t was_bytes;   /* ... of this many bytes */
    struct item *next;
} item;

/* What publishing one step adds to the counts. */
typedef struct step_counts {
    int64_t steps, tensors;
    int64_t bytes; /* may be negative: a step written again smaller */
} step_counts;

/* One step's copies held by the flight recorder. */
typedef struct held_step {
    struct item *head, *tail;
} held_step;

struct dump_session {
    dump_spec spec;
    dump_run_meta meta;
    int hook;
    bool step_selected;
    int64_t step;
    te_scaler_state scaler_begin; /* the scaler as the step began (enabled false: none) */
    /* queue */
    pthread_t thread, syncer;
    pthread_mutex_t mu;
    pthread_cond_t nonempty, room, drained, to_sync, synced;
    item *head, *tail;
    size_t queued_bytes;
    int n_queued;                         /* items in the queue (the debug log's depth) */
    bool closing, busy;
    struct pooled { void *buf; size_t cap; } pool[POOL_MAX]; /* copy buffers for reuse */
    int n_pool;
    size_t pool_bytes;
    dump_step_writer *sealed[MAX_SEALED]; /* sealed steps for the syncer, a ring in step order */
    step_counts sealed_counts[MAX_SEALED]; /* what each adds to the counts once published */
    int64_t sealed_step[MAX_SEALED];       /* and its step */
    int sync_start, sync_queued;
    int n_sealed;                         /* queued or being synced: at most MAX_SEALED */
    bool sync_closing;
    dump_op_row *run_ops;                 /* run.h5's op table, for the syncer to write */
    int run_n_ops;
    dump_coll_row *run_colls;             /* and its collectives */
    int run_n_colls;
    uint64_t run_peak;                    /* its peak_bytes */
    bool run_pending;                     /* handed over, not yet written */
    int run_written;                      /* rows of the run.h5 on disk (0: none yet) */
    int run_written_colls;                /* and its collectives */
    uint64_t run_written_peak;            /* and its peak_bytes */
    /* what the writer did, for `info dump`: published files only */
    uint64_t bytes_written;
    uint64_t bytes_taken;   /* tensor bytes the writer took from the queue (max=) */
    int64_t steps_written, tensors_written;
    int active;             /* items and sealed steps being worked on */
    struct timespec active_since;
    double write_seconds;   /* wall time with a step being built, written or synced */
    bool failed, capped;
    char error[1024];
    char warning[1024];     /* ops= globs that matched no op of the first step */
    int names[DUMP_MAX_GLOBS]; /* their te_names_expect handles */
    /* op table of the first selected step (the training thread's), for run.h5 */
    dump_op_row *ops;
    int n_ops;
    bool ops_done;
    int run_sent;           /* rows of it handed to the writer so far */
    /* data parallel: the collectives of the selected steps (training thread) */
    dump_coll_row *colls;
    int n_colls, cap_colls;
    int colls_sent;         /* rows handed to the writer so far */
    struct timespec colls_sent_at;
    /* the op record last taken (dump_stopped takes the stopped op early) */
    const te_op_record *seen;
    int seen_exec;
    int64_t seen_step;
    bool seen_early;
    /* flight recorder */
    bool recording;
    held_step cur;
    held_step *ring;    /* the last `keep` completed steps, oldest at ring_start */
    int ring_cap, ring_n, ring_start;
    bool triggered;
    bool cur_on_disk;       /* the current step was written as far as it went */
    int64_t cur_disk_tensors; /* that file's tensors and bytes */
    uint64_t cur_disk_bytes;
};

/* ---- copy buffers ---------------------------------------------------------------- */

/* A step's tensors have the same sizes every step, so their copies' buffers
 * are used again: a fresh buffer of megabytes is a fresh mapping, faulted in
 * a page at a time by the training thread and unmapped by the writer (a
 * tenth of both threads' time under a full dump); on a GPU it is also
 * pinned memory (te_host_buffer_alloc), which is slow to make and what lets
 * the device copy into it while training goes on. The pool and the queue
 * together hold at most QUEUE_CAP_BYTES. Both take d->mu held; a buffer
 * comes back only once its copy is done (copy_done). */
static void *copy_get(dump_session *d, size_t n, size_t *cap)
{
    int best = -1;
    for (int i = 0; i < d->n_pool; i++)
        if (d->pool[i].cap >= n && d->pool[i].cap / 2 <= n &&
            (best < 0 || d->pool[i].cap < d->pool[best].cap))
            best = i;
    if (best < 0) {
        *cap = n;
        return te_host_buffer_alloc(n);
    }
    void *p = d->pool[best].buf;
    *cap = d->pool[best].cap;
    d->pool_bytes -= *cap;
    d->pool[best] = d->pool[--d->n_pool];
    return p;
}

static void copy_put(dump_session *d, void *p, size_t cap)
{
    if (!p)
        return;
    if (d->n_pool < POOL_MAX && d->pool_bytes + d->queued_bytes + cap <= QUEUE_CAP_BYTES) {
        d->pool[d->n_pool++] = (struct pooled){ p, cap };
        d->pool_bytes += cap;
    } else {
        te_host_buffer_free(p);
    }
}

/* Waits until it's copy is in its buffer: the training thread only queued
 * it (te_tensor_read_async), so that it waits for neither the device nor
 * the disk. False, with the message in err, when the copy failed. */
static bool copy_done(item *it, char *err, size_t n)
{
    if (te_copy_wait(&it->ticket) == TE_OK)
        return true;
    snprintf(err, n, "copying %s from %s memory failed: %s", it->ti.tensor, te_device_name(it->ticket.device),
             te_error());
    return false;
}

/* ---- the writer thread --------------------------------------------------------- */

static void fail(dump_session *d, const char *msg)
{
    pthread_mutex_lock(&d->mu);
    if (!d->failed) {
        d->failed = true;
        snprintf(d->error, sizeof d->error, "%s", msg);
        TE_LOG(TE_LOG_DUMP, TE_LOG_ERROR,
               "tdbg: dump stopped: %s (training goes on; the steps written so far are complete)", msg);
    }
    pthread_mutex_unlock(&d->mu);
}

static bool failed(dump_session *d)
{
    pthread_mutex_lock(&d->mu);
    bool f = d->failed;
    pthread_mutex_unlock(&d->mu);
    return f;
}

/* Counts work in flight (d->mu held); write_seconds adds up the wall time
 * during which there was some, so that building one step and syncing the
 * one before it are not counted twice. */
static void activity(dump_session *d, int delta)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (d->active == 0 && delta > 0)
        d->active_since = now;
    d->active += delta;
    if (d->active == 0)
        d->write_seconds += (double)(now.tv_sec - d->active_since.tv_sec) +
                            1e-9 * (double)(now.tv_nsec - d->active_since.tv_nsec);
}

/* Hands a sealed step to the syncer, waiting while MAX_SEALED are ahead. */
static void hand_over(dump_session *d, dump_step_writer *w, step_counts c, int64_t step)
{
    pthread_mutex_lock(&d->mu);
    if (d->n_sealed >= MAX_SEALED)
        TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG, "writer: step %lld sealed; waits for the syncer (%d steps ahead)",
               (long long)step, d->n_sealed);
    while (d->n_sealed >= MAX_SEALED)
        pthread_cond_wait(&d->synced, &d->mu);
    int at = (d->sync_start + d->sync_queued++) % MAX_SEALED;
    d->sealed[at] = w;
    d->sealed_counts[at] = c;
    d->sealed_step[at] = step;
    d->n_sealed++;
    activity(d, +1);
    pthread_cond_signal(&d->to_sync);
    pthread_mutex_unlock(&d->mu);
}

/* Hands run.h5's op table to the syncer: writing it fsyncs twice, which
 * the writer thread used to wait for before it built the next step. A
 * table not written yet gives way to the newer, longer one. */
static void hand_over_run(dump_session *d, item *it)
{
    pthread_mutex_lock(&d->mu);
    free(d->run_ops);
    free(d->run_colls);
    d->run_ops = it->ops;
    d->run_n_ops = it->n_ops;
    d->run_colls = it->colls;
    d->run_n_colls = it->n_colls;
    const uint64_t peak = it->peak_bytes;
    it->ops = NULL; /* the syncer's now */
    it->colls = NULL;
    d->run_peak = peak;
    d->run_pending = true;
    pthread_cond_signal(&d->to_sync);
    pthread_mutex_unlock(&d->mu);
}

/* fsyncs and renames a written step (d->mu not held). */
static bool publish_step(dump_session *d, dump_step_writer *w)
{
    char err[1024];
    if (failed(d)) { /* dumping stopped: not published */
        dump_step_abort(w);
        return false;
    }
    if (dump_step_publish(w, err, sizeof err))
        return true;
    fail(d, err);
    return false;
}

/* A statistics-only dump's threads give way to training: their work is a
 * small table a step, which fits in the idle moments of training threads
 * that keep the cores busy, instead of taking their time slices (a raised
 * nice value needs no privilege; Linux applies it to the calling thread
 * alone). A full dump's writer keeps its priority: it is what training
 * waits for once the queue is full, and a thread cannot lower its nice
 * value again without privilege. */
static void yield_to_training(const dump_session *d)
{
    if (!d->spec.stats_only)
        return;
    id_t self = (id_t)gettid();
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, self); /* -1 is a value too: errno tells */
    if (errno == 0)
        setpriority(PRIO_PROCESS, self, nice + WRITER_NICE < 19 ? nice + WRITER_NICE : 19);
}

static double seconds_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) + 1e-9 * (double)(now.tv_nsec - t->tv_nsec);
}

/* The syncer fsyncs the run directory (which makes the renames in it
 * survive a power loss) when it has no step in hand, and at least every
 * DIR_SYNC_EVERY seconds, not after every rename: each sync is a journal
 * commit of its own, 50-70 ms a step here. A rename not synced yet can be
 * lost to a power cut, leaving the step's complete tmp file; a file under a
 * final name is always complete, as it is renamed only after its fsync. */
static void *syncer_main(void *arg)
{
    dump_session *d = arg;
    yield_to_training(d);
    bool dir_dirty = false;
    struct timespec dir_synced;
    clock_gettime(CLOCK_MONOTONIC, &dir_synced);
    dump_step_writer *written = NULL; /* written, its fsync still to come */
    step_counts written_counts = { 0 };
    int64_t written_step = -1;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->sync_queued && !d->sync_closing && !written && !d->run_ops)
            pthread_cond_wait(&d->to_sync, &d->mu);
        dump_step_writer *s = NULL;
        step_counts s_counts = { 0 }, add = { 0 };
        int64_t s_step = -1;
        dump_op_row *run_ops = d->run_ops;
        const int run_n_ops = d->run_n_ops;
        dump_coll_row *run_colls = d->run_colls;
        const int run_n_colls = d->run_n_colls;
        dump_run_meta meta = d->meta;
        meta.peak_bytes = d->run_peak;
        d->run_ops = NULL;
        d->run_colls = NULL;
        if (d->sync_queued) {
            s = d->sealed[d->sync_start];
            s_counts = d->sealed_counts[d->sync_start];
            s_step = d->sealed_step[d->sync_start];
            d->sync_start = (d->sync_start + 1) % MAX_SEALED;
            d->sync_queued--;
        } else if (!written && !run_ops) {
            break; /* closing, nothing left */
        }
        pthread_mutex_unlock(&d->mu);
        dump_step_writer *next = NULL;
        char err[1024];
        int done = 0, gone = 0; /* steps published; steps finished either way */
        if (s && failed(d)) {
            dump_step_abort(s);
            gone++;
        } else if (s && dump_step_write(s, err, sizeof err)) {
            next = s;
            TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG, "syncer: step %lld written (%lld tensors, %lld bytes), its fsync next",
                   (long long)s_step, (long long)s_counts.tensors, (long long)s_counts.bytes);
        } else if (s) {
            fail(d, err);
            gone++;
        }
        /* run.h5 after the first step's file went to the disk, which then
         * has that to work on while run.h5 is synced */
        bool run_ok = false;
        if (run_ops && !failed(d)) {
            run_ok = dump_run_write_dp(d->spec.dir, &meta, run_ops, run_n_ops, run_colls, run_n_colls, err,
                                       sizeof err);
            if (!run_ok)
                fail(d, err);
            else
                TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG, "syncer: run.h5 written and synced (%d ops, %d collectives)",
                       run_n_ops, run_n_colls);
        }
        free(run_ops);
        free(run_colls);
        if (written) {
            const double t0 = te_log_on(TE_LOG_DUMP, TE_LOG_DEBUG) ? seconds_since(&dir_synced) : 0;
            if (publish_step(d, written)) {
                done++;
                add = written_counts;
                TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG, "syncer: step %lld fsynced and renamed in %.1f ms",
                       (long long)written_step, 1e3 * (seconds_since(&dir_synced) - t0));
            }
            dir_dirty = dir_dirty || done;
            gone++;
        }
        written = next;
        written_counts = s_counts;
        written_step = s_step;
        if (dir_dirty && (!written || seconds_since(&dir_synced) >= DIR_SYNC_EVERY)) {
            if (!dump_dir_sync(d->spec.dir, err, sizeof err))
                fail(d, err);
            else
                TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG, "syncer: directory %s synced", d->spec.dir);
            dir_dirty = false;
            clock_gettime(CLOCK_MONOTONIC, &dir_synced);
        }
        pthread_mutex_lock(&d->mu);
        if (run_ok) {
            d->run_written = run_n_ops;
            d->run_written_colls = run_n_colls;
            d->run_written_peak = meta.peak_bytes;
        }
        if (run_ops && !d->run_ops)
            d->run_pending = false;
        d->steps_written += add.steps;
        d->tensors_written += add.tensors;
        d->bytes_written = (uint64_t)((int64_t)d->bytes_written + add.bytes);
        d->n_sealed -= gone;
        activity(d, -gone);
        pthread_cond_broadcast(&d->synced);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* Writes one item into the step *w; *c counts what the step holds, for
 * the syncer to add when it is published. */
static void write_item(dump_session *d, dump_step_writer **w, step_counts *c, item *it)
{
    char err[1024];
    switch (it->kind) {
    case ITEM_BEGIN:
        *c = (step_counts){ .steps = 1 };
        if (it->again) { /* the file before must have its name first: the tmp name is the same */
            pthread_mutex_lock(&d->mu);
            while (d->n_sealed > 0)
                pthread_cond_wait(&d->synced, &d->mu);
            pthread_mutex_unlock(&d->mu);
        }
        if (!(*w = dump_step_create(d->spec.dir, it->step, d->spec.gzip, err, sizeof err)))
            fail(d, err);
        break;
    case ITEM_TENSOR:
        if (*w && !dump_step_add_copy(*w, &it->ti, it->data, err, sizeof err))
            fail(d, err);
        else if (*w)
            c->tensors++, c->bytes += (int64_t)it->bytes;
        break;
    case ITEM_STATS:
        if (*w && !dump_step_add_stats(*w, &it->row, 1, err, sizeof err))
            fail(d, err);
        else if (*w)
            c->tensors++;
        break;
    case ITEM_COMMIT:
        if (it->again) { /* the file it replaces was counted */
            c->steps = 0;
            c->tensors -= it->was_tensors;
            c->bytes -= (int64_t)it->was_bytes;
        }
        if (*w && !d->failed) {
            dump_step_set_scaler(*w, &it->scaler);
            if (it->n_samples && !dump_step_set_samples(*w, it->samples, it->n_samples, err, sizeof err))
                fail(d, err);
            else if (dump_step_seal(*w, err, sizeof err))
                hand_over(d, *w, *c, it->step);
            else
                fail(d, err);
        } else if (*w) {
            dump_step_abort(*w);
        }
        *w = NULL;
        if (it->ops && !d->failed)
            hand_over_run(d, it);
        break;
    }
}

static void *writer_main(void *arg)
{
    dump_session *d = arg;
    yield_to_training(d);
    dump_step_writer *w = NULL;
    step_counts c = { 0 };
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->head && !d->closing)
            pthread_cond_wait(&d->nonempty, &d->mu);
        if (!d->head)
            break;
        item *it = d->head;
        d->head = it->next;
        if (!d->head)
            d->tail = NULL;
        d->n_queued--;
        d->busy = true;
        activity(d, +1);
        bool failed = d->failed;
        const int left = d->n_queued;
        const size_t left_bytes = d->queued_bytes - it->bytes;
        pthread_mutex_unlock(&d->mu);
        TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG, "dequeued %s of step %lld (%zu bytes): depth %d, %zu bytes left",
               item_names[it->kind], (long long)it->step, it->bytes, left, left_bytes);
        char err[1024];
        if (!copy_done(it, err, sizeof err)) { /* waited for even when failed: the buffer goes back */
            fail(d, err);
            failed = true;
        }
        if (!failed)
            write_item(d, &w, &c, it);
        pthread_mutex_lock(&d->mu);
        activity(d, -1);
        d->busy = false;
        d->queued_bytes -= it->bytes;
        d->bytes_taken += it->kind == ITEM_TENSOR ? it->bytes : 0;
        copy_put(d, it->data, it->cap);
        free(it->ops);
        free(it->colls);
        free(it->samples);
        free(it);
        pthread_cond_broadcast(&d->room);
        if (!d->head)
            pthread_cond_broadcast(&d->drained);
    }
    pthread_mutex_unlock(&d->mu);
    if (w)
        dump_step_abort(w); /* stopped inside a step: it stays incomplete, by design */
    return NULL;
}

/* The op table goes to run.h5 with the first step handed to the writer,
 * and again when it has grown since (a step written in part at a stop
 * before the first selected step had ended). A rank's dump rewrites it for
 * the collectives of the steps since, at most every COLLS_EVERY seconds
 * (each write fsyncs twice; dump_stop writes the last ones). Training
 * thread. */
static void attach_run(dump_session *d, item *it)
{
    const bool colls_due = d->n_colls > d->colls_sent &&
                           (d->colls_sent == 0 || seconds_since(&d->colls_sent_at) >= COLLS_EVERY);
    if (d->run_sent >= d->n_ops && !colls_due)
        return;
    if (!(it->ops = malloc((size_t)d->n_ops * sizeof *it->ops)) ||
        (d->n_colls && !(it->colls = malloc((size_t)d->n_colls * sizeof *it->colls)))) {
        free(it->ops);
        it->ops = NULL;
        return;
    }
    memcpy(it->ops, d->ops, (size_t)d->n_ops * sizeof *it->ops);
    it->n_ops = d->run_sent = d->n_ops;
    if (d->n_colls)
        memcpy(it->colls, d->colls, (size_t)d->n_colls * sizeof *it->colls);
    it->n_colls = d->colls_sent = d->n_colls;
    clock_gettime(CLOCK_MONOTONIC, &d->colls_sent_at);
    it->peak_bytes = te_mem_stats_of(te_backend_device()).peak;
}

static void enqueue(dump_session *d, item *it)
{
    if (it->kind == ITEM_COMMIT)
        attach_run(d, it);
    pthread_mutex_lock(&d->mu);
    int64_t waited_ns = -1;
    if (d->queued_bytes > 0 && d->queued_bytes + it->bytes > QUEUE_CAP_BYTES && !d->failed) {
        /* The training thread waits for the writer: the profiler's "dump" time. */
        TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG,
               "dump: queue full (%d items, %zu bytes of %zu): training waits for room for %zu bytes", d->n_queued,
               d->queued_bytes, QUEUE_CAP_BYTES, it->bytes);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (d->queued_bytes > 0 && d->queued_bytes + it->bytes > QUEUE_CAP_BYTES && !d->failed)
            pthread_cond_wait(&d->room, &d->mu);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        waited_ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
        te_profile_note_wait("dump", waited_ns);
    }
    it->next = NULL;
    if (d->tail)
        d->tail->next = it;
    else
        d->head = it;
    d->tail = it;
    d->queued_bytes += it->bytes;
    d->n_queued++;
    const int depth = d->n_queued;
    const size_t bytes = d->queued_bytes;
    const char *kind = item_names[it->kind];
    const int64_t step = it->step;
    const size_t size = it->bytes;
    pthread_cond_signal(&d->nonempty);
    pthread_mutex_unlock(&d->mu);
    if (waited_ns >= 0)
        TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG, "training waited %.1f ms for room in the queue", 1e-6 * (double)waited_ns);
    TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG, "enqueued %s of step %lld (%zu bytes): depth %d, %zu bytes queued", kind,
           (long long)step, size, depth, bytes);
}

static void free_items(dump_session *d, item *it)
{
    while (it) {
        item *next = it->next;
        char err[1024];
        copy_done(it, err, sizeof err); /* dropped unwritten: only the buffer matters */
        pthread_mutex_lock(&d->mu);
        copy_put(d, it->data, it->cap);
        pthread_mutex_unlock(&d->mu);
        free(it->ops);
        free(it->colls);
        free(it->samples);
        free(it);
        it = next;
    }
}

static item *new_item(item_kind kind, int64_t step)
{
    item *it = calloc(1, sizeof *it);
    if (it) {
        it->kind = kind;
        it->step = step;
    }
    return it;
}

/* To the writer, or into the held step while the flight recorder runs. */
static void put(dump_session *d, item *it)
{
    if (!d->recording) {
        enqueue(d, it);
        return;
    }
    it->next = NULL;
    if (d->cur.tail)
        d->cur.tail->next = it;
    else
        d->cur.head = it;
    d->cur.tail = it;
}

static void enqueue_list(dump_session *d, item *it)
{
    while (it) {
        item *next = it->next;
        enqueue(d, it);
        it = next;
    }
}

static void drop_oldest(dump_session *d)
{
    free_items(d, d->ring[d->ring_start].head);
    d->ring_start = (d->ring_start + 1) % d->ring_cap;
    d->ring_n--;
}

/* The step's loss scaler for its file: the scale its loss had, and once
 * it ended whether its update was skipped (te_scaler_update counted it). */
static dump_step_scaler step_scaler(const dump_session *d, bool ended)
{
    dump_step_scaler s = { .present = d->scaler_begin.enabled, .skipped = -1 };
    te_scaler_state now;
    if (!s.present)
        return s;
    s.scale = d->scaler_begin.scale;
    if (ended && te_scaler_state_get(&now)) {
        s.skipped = now.skipped > d->scaler_begin.skipped;
        if (s.skipped)
            snprintf(s.skip_param, sizeof s.skip_param, "%s", now.first_param);
    }
    return s;
}

/* The samples of the batches step took so far (engine/te.h, te_batch) into
 * it, for its file's /samples table; none when provenance is off. */
static void step_samples(item *it, int64_t step)
{
    int rows = 0, first = te_batch_count();
    while (first > 0 && te_batch_at(first - 1)->step == step)
        rows += (int)te_batch_at(--first)->rows;
    if (!rows || !(it->samples = calloc((size_t)rows, sizeof *it->samples)))
        return;
    for (int i = first, k = 0; i < te_batch_count(); i++) {
        const te_batch *b = te_batch_at(i);
        for (int64_t r = 0; r < b->rows; r++, k++) {
            dump_sample_row *s = &it->samples[k];
            *s = (dump_sample_row){ .batch = i - first, .row = (int32_t)r, .sample = b->index[r], .drawn = b->drawn[r],
                                    .position = b->loader ? b->position : -1, .epoch = b->loader ? b->epoch : -1,
                                    .seed = (int64_t)b->seed };
            snprintf(s->dataset, sizeof s->dataset, "%s", b->dataset && b->dataset->name ? b->dataset->name : "");
            te_batch_source(b, r, s->source, sizeof s->source);
        }
    }
    it->n_samples = rows;
}

/* The current step as far as it went, copied (the step stays held), and a
 * commit; the file it makes replaces one written at an earlier stop in
 * this step. */
static void write_current_part(dump_session *d)
{
    int64_t tensors = 0;
    uint64_t bytes = 0;
    for (item *h = d->cur.head; h; h = h->next) {
        item *it = new_item(h->kind, h->step);
        if (!it)
            return;
        it->ti = h->ti;
        it->row = h->row;
        if (h->data) {
            char err[1024];
            if (!copy_done(h, err, sizeof err)) { /* h's copy came this far */
                fail(d, err);
                free(it);
                return;
            }
            pthread_mutex_lock(&d->mu);
            it->data = copy_get(d, h->bytes + 4, &it->cap); /* 4 to spare: dump_step_add_copy */
            pthread_mutex_unlock(&d->mu);
            if (!it->data) {
                free(it);
                return;
            }
            memcpy(it->data, h->data, h->bytes);
            it->bytes = h->bytes;
        }
        it->again = d->cur_on_disk && h->kind == ITEM_BEGIN;
        tensors += h->kind == ITEM_TENSOR || h->kind == ITEM_STATS;
        bytes += h->bytes;
        enqueue(d, it);
    }
    item *commit = new_item(ITEM_COMMIT, d->step);
    if (!commit)
        return;
    commit->scaler = step_scaler(d, false);
    step_samples(commit, d->step);
    commit->again = d->cur_on_disk;
    commit->was_tensors = d->cur_disk_tensors;
    commit->was_bytes = d->cur_disk_bytes;
    enqueue(d, commit);
    d->cur_on_disk = true;
    d->cur_disk_tensors = tensors;
    d->cur_disk_bytes = bytes;
}

/* Writes what the flight recorder holds: the newest keep-1 completed steps
 * and the current one (whole when `ended`, else as far as it went), or
 * the newest `keep` when no selected step is under way. Older ones go. */
static void recorder_write(dump_session *d, bool ended)
{
    int old = d->cur.head ? d->ring_cap - 1 : d->ring_cap;
    while (d->ring_n > old)
        drop_oldest(d);
    for (int i = 0; i < d->ring_n; i++)
        enqueue_list(d, d->ring[(d->ring_start + i) % d->ring_cap].head);
    d->ring_n = 0;
    if (!d->cur.head)
        return;
    if (!ended) {
        write_current_part(d);
        return;
    }
    d->cur.head->again = d->cur_on_disk; /* the head is the step's begin, */
    d->cur.tail->again = d->cur_on_disk; /* the tail its commit */
    d->cur.tail->was_tensors = d->cur_disk_tensors;
    d->cur.tail->was_bytes = d->cur_disk_bytes;
    enqueue_list(d, d->cur.head);
    d->cur = (held_step){ 0 };
}

/* At a selected step's end (its commit held last): writes it whole when a
 * non-finite value came in it or a part of it is on disk, else keeps it
 * as the newest of the last `keep`. */
static void recorder_step_end(dump_session *d)
{
    if (d->triggered || d->cur_on_disk) {
        recorder_write(d, true);
    } else {
        if (d->ring_n == d->ring_cap)
            drop_oldest(d);
        d->ring[(d->ring_start + d->ring_n++) % d->ring_cap] = d->cur;
    }
    d->cur = (held_step){ 0 };
    d->triggered = d->cur_on_disk = false;
}

/* ---- selection ------------------------------------------------------------------ */

static bool capped(dump_session *d, size_t more)
{
    pthread_mutex_lock(&d->mu);
    bool over = d->spec.max_bytes && d->bytes_taken + d->queued_bytes + more > d->spec.max_bytes;
    pthread_mutex_unlock(&d->mu);
    if (!over)
        return false;
    if (!d->capped) {
        d->capped = true;
        TE_LOG(TE_LOG_DUMP, TE_LOG_WARN,
               "tdbg: dump reached its size cap (max=%llu bytes): no more tensors are written",
               (unsigned long long)d->spec.max_bytes);
    }
    return true;
}

static void queue_tensor(dump_session *d, const te_op_record *r, const te_tensor *t, dump_iokind io, int slot)
{
    if (!t || !t->data || failed(d))
        return;
    item *it = new_item(d->spec.stats_only ? ITEM_STATS : ITEM_TENSOR, d->step);
    if (!it)
        return;
    if (d->spec.stats_only) {
        te_stats s;
        if (io == DUMP_OUT && slot < r->n_outputs && r->outputs[slot] == t)
            te_op_output_stats(r, slot, &s);
        else /* an input, or a parameter or gradient at the step's end */
            te_stats_compute(t, &s);
        dump_stats_row *row = &it->row;
        snprintf(row->op, sizeof row->op, "%s", r->name);
        row->io = io;
        row->slot = slot;
        row->exec_index = r->exec_index;
        row->min = s.min, row->max = s.max, row->mean = s.mean, row->std = s.std;
        row->abs_max = s.abs_max, row->l2norm = s.l2norm, row->nan = s.nan, row->inf = s.inf;
        row->zero_frac = s.n ? (double)s.zero / (double)s.n : 0.0;
        if (d->spec.when == DUMP_WHEN_NONFINITE && (s.nan || s.inf))
            d->triggered = true;
        put(d, it);
        return;
    }
    if (capped(d, t->nbytes)) {
        free(it);
        return;
    }
    pthread_mutex_lock(&d->mu);
    it->data = copy_get(d, t->nbytes + 4, &it->cap); /* 4 to spare: dump_step_add_copy */
    pthread_mutex_unlock(&d->mu);
    if (!it->data) {
        free(it);
        return;
    }
    /* the one copy off t's device, queued: the writer thread waits for it */
    if (te_tensor_read_async(t, it->data, &it->ticket) != TE_OK) {
        pthread_mutex_lock(&d->mu);
        copy_put(d, it->data, it->cap);
        pthread_mutex_unlock(&d->mu);
        free(it);
        return;
    }
    it->bytes = t->nbytes;
    dump_tensor_info *ti = &it->ti;
    snprintf(ti->op, sizeof ti->op, "%s", r->name);
    snprintf(ti->op_type, sizeof ti->op_type, "%s", r->type);
    snprintf(ti->tensor, sizeof ti->tensor, "%s", t->name);
    snprintf(ti->file, sizeof ti->file, "%s", r->loc.file ? r->loc.file : "");
    snprintf(ti->kernel, sizeof ti->kernel, "%s", r->kernel ? r->kernel : "");
    ti->exec_index = r->exec_index;
    ti->phase = r->phase;
    ti->io = io;
    ti->slot = slot;
    ti->line = r->loc.line;
    ti->dtype = t->dtype;
    ti->ndim = t->ndim;
    memcpy(ti->shape, t->shape, sizeof ti->shape);
    if (d->spec.when == DUMP_WHEN_NONFINITE && te_dtype_is_float(t->dtype) && te_has_nonfinite(t))
        d->triggered = true;
    put(d, it);
}

static void join_names(char *buf, size_t n, te_tensor *const *ts, int count)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? "," : "", ts[i] ? ts[i]->name : "");
}

static void remember_op(dump_session *d, const te_op_record *r)
{
    if (d->ops_done || d->n_ops == MAX_OPS)
        return;
    dump_op_row *o = &d->ops[d->n_ops++];
    memset(o, 0, sizeof *o);
    o->exec = r->exec_index;
    snprintf(o->name, sizeof o->name, "%s", r->name);
    snprintf(o->type, sizeof o->type, "%s", r->type);
    o->phase = r->phase;
    snprintf(o->file, sizeof o->file, "%s", r->loc.file ? r->loc.file : "");
    o->line = r->loc.line;
    join_names(o->inputs, sizeof o->inputs, r->inputs, r->n_inputs);
    join_names(o->outputs, sizeof o->outputs, r->outputs, r->n_outputs);
    te_tensor *inplace[8];
    int n_inplace = 0;
    for (int i = 0; i < r->n_inputs && i < 32 && n_inplace < 8; i++)
        if (r->inplace >> i & 1u)
            inplace[n_inplace++] = r->inputs[i];
    join_names(o->inplace, sizeof o->inplace, inplace, n_inplace);
    join_names(o->reads, sizeof o->reads, r->reads, r->n_reads);
    te_op_attrs(r, o->attrs, sizeof o->attrs);
    snprintf(o->kernel, sizeof o->kernel, "%s", r->kernel ? r->kernel : "");
}

static unsigned phase_bit(te_phase p)
{
    return p == TE_PHASE_FORWARD ? DUMP_PHASE_FORWARD : p == TE_PHASE_BACKWARD ? DUMP_PHASE_BACKWARD
                                                                               : DUMP_PHASE_UPDATE;
}

/* run.h5's precision, as the engine has it when the first selected step
 * begins (before run.h5 is handed to the syncer, which reads d->meta). */
static void amp_meta(dump_session *d)
{
    te_amp_level level = te_amp_level_get();
    const char *name = te_amp_level_name(level);
    snprintf(d->meta.amp_level, sizeof d->meta.amp_level, "%s", name ? name : "O0");
    snprintf(d->meta.amp_dtype, sizeof d->meta.amp_dtype, "%s", te_dtype_name(te_amp_dtype()));
    if (level != TE_AMP_O0 && strcmp(d->meta.amp, "none") == 0)
        snprintf(d->meta.amp, sizeof d->meta.amp, "%s", te_dtype_name(te_amp_dtype()));
}

static void on_step_begin(int64_t step, void *user)
{
    dump_session *d = user;
    d->step = step;
    d->step_selected = !failed(d) && dump_spec_step(&d->spec, step);
    te_scaler_state_get(&d->scaler_begin);
    if (d->step_selected && d->run_sent == 0)
        amp_meta(d);
    d->seen = NULL;
    if (d->step_selected && d->recording && d->ring_n == d->ring_cap)
        drop_oldest(d); /* keep-1 of them and this one are the last `keep` now */
    if (d->step_selected) {
        item *it = new_item(ITEM_BEGIN, step);
        if (it)
            put(d, it);
    }
}

/* A collective of a selected step, for run.h5's /collectives (every one,
 * whatever ops= selects: the table is the rank's record of the job). */
static void remember_coll(dump_session *d, const te_op_record *r)
{
    if (d->n_colls == d->cap_colls) {
        const int cap = d->cap_colls ? 2 * d->cap_colls : 64;
        dump_coll_row *c = realloc(d->colls, (size_t)cap * sizeof *c);
        if (!c) {
            fail(d, "dump: out of memory for the table of collectives");
            return;
        }
        d->colls = c;
        d->cap_colls = cap;
    }
    const te_collective *k = r->coll;
    dump_coll_row *c = &d->colls[d->n_colls++];
    *c = (dump_coll_row){ .step = d->step, .exec = r->exec_index, .seq = k->seq, .ranks = k->ranks,
                          .root = k->root, .bucket = k->bucket, .bytes = (int64_t)k->bytes };
    snprintf(c->op, sizeof c->op, "%s", r->name);
    snprintf(c->kind, sizeof c->kind, "%s", k->kind ? k->kind : "");
}

/* Queues (or holds) the tensors of r the spec selects. */
static void take_op(dump_session *d, const te_op_record *r)
{
    d->seen = r;
    d->seen_exec = r->exec_index;
    d->seen_step = d->step;
    remember_op(d, r);
    if (r->coll && d->meta.ranks > 0)
        remember_coll(d, r);
    if (!(d->spec.phases & phase_bit(r->phase)) || !dump_spec_op(&d->spec, r->name, r->type))
        return;
    if (d->spec.io & DUMP_IO_INPUTS)
        for (int i = 0; i < r->n_inputs; i++)
            queue_tensor(d, r, r->inputs[i], DUMP_IN, i);
    if (d->spec.io & DUMP_IO_OUTPUTS)
        for (int i = 0; i < r->n_outputs; i++)
            queue_tensor(d, r, r->outputs[i], DUMP_OUT, i);
}

/* Was r taken already, by dump_stopped before this hook saw it? */
static bool taken_early(const dump_session *d, const te_op_record *r)
{
    return d->seen_early && r == d->seen && r->exec_index == d->seen_exec && d->step == d->seen_step;
}

static void on_op_end(const te_op_record *r, void *user)
{
    dump_session *d = user;
    if (!d->step_selected)
        return;
    if (taken_early(d, r)) {
        d->seen_early = false;
        return;
    }
    d->seen_early = false;
    take_op(d, r);
    /* when=nonfinite: the first non-finite value of a step writes the
     * held steps at once, a crash after it loses nothing; the step's
     * whole file follows at its end */
    if (d->triggered) {
        d->triggered = false;
        if (!d->cur_on_disk)
            recorder_write(d, false);
    }
}

/* params and grads: every parameter (and its gradient) as the step ends,
 * recorded as outputs of pseudo-ops "param" and "grad". */
static void dump_params(dump_session *d)
{
    te_tensor **p = te_params();
    for (int i = 0; i < te_param_count(); i++) {
        te_op_record r = { .step = d->step, .phase = TE_PHASE_UPDATE, .op_id = -1, .exec_index = -1,
                           .type = "Parameter" };
        char name[TE_NAME_MAX + 8];
        const char *pname = p[i]->name + 6; /* after "param:" */
        if (d->spec.phases & DUMP_PHASE_PARAMS) {
            snprintf(name, sizeof name, "param/%s", pname);
            r.name = name;
            queue_tensor(d, &r, p[i], DUMP_OUT, 0);
        }
        if ((d->spec.phases & DUMP_PHASE_GRADS) && p[i]->grad) {
            snprintf(name, sizeof name, "grad/%s", pname);
            r.name = name;
            r.type = "Gradient";
            queue_tensor(d, &r, p[i]->grad, DUMP_OUT, 0);
        }
    }
}

/* An ops= glob matched no op of the first step (te_names_expect): said on
 * stderr and kept for `info dump`. */
static void selection_unmatched(const char *msg, void *user)
{
    dump_session *d = user;
    TE_LOG(TE_LOG_DUMP, TE_LOG_WARN, "tdbg: dump warning: %s", msg);
    pthread_mutex_lock(&d->mu);
    size_t len = strlen(d->warning);
    snprintf(d->warning + len, sizeof d->warning - len, "%s%s", len ? "; " : "", msg);
    pthread_mutex_unlock(&d->mu);
}

static void on_step_end(int64_t step, void *user)
{
    dump_session *d = user;
    if (!d->step_selected)
        return;
    if (d->spec.phases & (DUMP_PHASE_PARAMS | DUMP_PHASE_GRADS))
        dump_params(d);
    d->ops_done = true; /* the first selected step's op table is run.h5's */
    item *it = new_item(ITEM_COMMIT, step);
    if (it) {
        it->scaler = step_scaler(d, true);
        step_samples(it, step);
        put(d, it);
    }
    if (d->recording && it) {
        recorder_step_end(d);
    } else if (d->recording) { /* out of memory: the step cannot be committed */
        free_items(d, d->cur.head);
        d->cur = (held_step){ 0 };
    }
    d->step_selected = false;
    d->seen = NULL;
}

/* ---- the session ----------------------------------------------------------------- */

/* Lets the syncer finish the sealed steps, then joins it. */
static void stop_syncer(dump_session *d)
{
    pthread_mutex_lock(&d->mu);
    d->sync_closing = true;
    pthread_cond_signal(&d->to_sync);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->syncer, NULL);
}

dump_session *dump_start(const dump_spec *spec, const dump_run_info *info, char *err, size_t n)
{
    /* HDF5 shuts itself down in an atexit handler registered when it starts.
     * Started here, before the caller registers its own handler that flushes
     * this session, HDF5's runs after it; started lazily on the writer thread,
     * it would run first and pull the library from under a writer that still
     * has steps queued when the program ends. */
    if (H5open() < 0) {
        snprintf(err, n, "dump: cannot start the HDF5 library");
        return NULL;
    }
    dump_session *d = calloc(1, sizeof *d);
    /* the flight recorder's ring: the last `keep` completed steps (keep=0 is 1) */
    int held = spec->when == DUMP_WHEN_ALWAYS ? 0 : spec->keep > 1 ? spec->keep : 1;
    if (!d || !(d->ops = calloc(MAX_OPS, sizeof *d->ops)) ||
        (held && !(d->ring = calloc((size_t)held, sizeof *d->ring)))) {
        if (d)
            free(d->ops);
        free(d);
        snprintf(err, n, "dump: out of memory");
        return NULL;
    }
    d->recording = spec->when != DUMP_WHEN_ALWAYS;
    d->ring_cap = held;
    d->spec = *spec;
    d->hook = -1;
    if (te_dist_active()) { /* each rank writes a dump of its own: DIR/rank-R */
        d->meta.rank = te_dist_rank();
        d->meta.ranks = te_dist_size();
        size_t len = strlen(d->spec.dir);
        if (snprintf(d->spec.dir + len, sizeof d->spec.dir - len, "/rank-%d", d->meta.rank) >=
            (int)(sizeof d->spec.dir - len)) {
            snprintf(err, n, "dump: dir=%s: too long with /rank-%d", spec->dir, d->meta.rank);
            free(d->ops);
            free(d->ring);
            free(d);
            return NULL;
        }
    }
    snprintf(d->meta.engine_version, sizeof d->meta.engine_version, "%s", TE_VERSION);
    d->meta.mode = info ? info->mode : TE_MODE_EAGER;
    snprintf(d->meta.amp, sizeof d->meta.amp, "%s", info && info->amp ? info->amp : "none");
    amp_meta(d);
    snprintf(d->meta.backend, sizeof d->meta.backend, "%s", te_device_name(te_backend_device()));
    d->meta.seed = te_seed();
    time_t now = time(NULL); /* once: run.h5 written again at the end keeps it */
    struct tm tm;
    strftime(d->meta.created, sizeof d->meta.created, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    snprintf(d->meta.command_line, sizeof d->meta.command_line, "%s", info && info->command_line ? info->command_line : "");
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->nonempty, NULL);
    pthread_cond_init(&d->room, NULL);
    pthread_cond_init(&d->drained, NULL);
    pthread_cond_init(&d->to_sync, NULL);
    pthread_cond_init(&d->synced, NULL);
    if (pthread_create(&d->syncer, NULL, syncer_main, d) != 0) {
        snprintf(err, n, "dump: cannot start the writer's sync thread");
        free(d->ops);
        free(d->ring);
        free(d);
        return NULL;
    }
    if (pthread_create(&d->thread, NULL, writer_main, d) != 0) {
        snprintf(err, n, "dump: cannot start the writer thread");
        stop_syncer(d);
        free(d->ops);
        free(d->ring);
        free(d);
        return NULL;
    }
    te_hooks h = { .step_begin = on_step_begin, .step_end = on_step_end, .op_end = on_op_end };
    if ((d->hook = te_hook_add(&h, d)) < 0) {
        snprintf(err, n, "dump: %s", te_error());
        dump_stop(d);
        return NULL;
    }
    if (spec->stats_only)
        te_stats_want(true);
    for (int i = 0; i < spec->n_ops; i++) { /* each glob is checked once the ops exist */
        char label[TE_NAME_MAX + 32];
        snprintf(label, sizeof label, "dump selection ops=%s", spec->ops[i]);
        d->names[i] = te_names_expect(label, spec->ops[i], selection_unmatched, d);
    }
    /* graph mode keeps the selected ops' tensors visible */
    if (spec->n_ops == 0)
        te_observe_add("*");
    for (int i = 0; i < spec->n_ops; i++)
        if (strncmp(spec->ops[i], "type:", 5) != 0)
            te_observe_add(spec->ops[i]);
        else
            te_observe_add("*"); /* types are not names: keep everything */
    if (held)
        TE_LOG(TE_LOG_DUMP, TE_LOG_INFO,
               "writing to %s (%s, a flight recorder of the last %d steps), queue cap %zu bytes", spec->dir, spec->stats_only ? "statistics" : "full tensors", held, QUEUE_CAP_BYTES);
    else
        TE_LOG(TE_LOG_DUMP, TE_LOG_INFO, "writing to %s (%s, every selected step), queue cap %zu bytes", spec->dir,
               spec->stats_only ? "statistics" : "full tensors", QUEUE_CAP_BYTES);
    return d;
}

/* run.h5 went to disk with the peak of its first step; at the end the run's
 * peak replaces it, when higher, and a rank's collectives not written yet
 * go with it (both threads joined). */
static void rewrite_run_end(dump_session *d)
{
    const uint64_t peak = te_mem_stats_of(te_backend_device()).peak;
    if (!d->run_written || (peak <= d->run_written_peak && d->n_colls <= d->run_written_colls) || failed(d))
        return;
    dump_run_meta meta = d->meta;
    meta.peak_bytes = peak > d->run_written_peak ? peak : d->run_written_peak;
    char err[1024];
    if (!dump_run_write_dp(d->spec.dir, &meta, d->ops, d->run_written, d->colls, d->n_colls, err, sizeof err))
        fail(d, err);
}

void dump_stop(dump_session *d)
{
    if (!d)
        return;
    for (int i = 0; d->hook >= 0 && i < d->spec.n_ops; i++)
        te_names_forget(d->names[i]);
    if (d->hook >= 0) {
        te_hook_remove(d->hook);
        if (d->spec.stats_only)
            te_stats_want(false);
    }
    pthread_mutex_lock(&d->mu);
    d->closing = true;
    pthread_cond_signal(&d->nonempty);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    stop_syncer(d);
    rewrite_run_end(d);
    TE_LOG(TE_LOG_DUMP, TE_LOG_INFO, "stopped: %lld steps, %lld tensors, %llu bytes written to %s in %.2f s%s",
           (long long)d->steps_written, (long long)d->tensors_written, (unsigned long long)d->bytes_written,
           d->spec.dir, d->write_seconds, d->failed ? " (failed)" : "");
    if (d->spec.n_ops == 0)
        te_observe_remove("*");
    for (int i = 0; i < d->spec.n_ops; i++)
        te_observe_remove(strncmp(d->spec.ops[i], "type:", 5) != 0 ? d->spec.ops[i] : "*");
    free_items(d, d->cur.head); /* held, never triggered: not written */
    for (int i = 0; i < d->ring_n; i++)
        free_items(d, d->ring[(d->ring_start + i) % d->ring_cap].head);
    free(d->ring);
    for (int i = 0; i < d->n_pool; i++)
        te_host_buffer_free(d->pool[i].buf);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->nonempty);
    pthread_cond_destroy(&d->room);
    pthread_cond_destroy(&d->drained);
    pthread_cond_destroy(&d->to_sync);
    pthread_cond_destroy(&d->synced);
    free(d->ops);
    free(d->colls);
    free(d);
}

void dump_stopped(dump_session *d, const te_op_record *at)
{
    if (!d)
        return;
    if (d->recording) {
        if (at && d->step_selected && !(at == d->seen && at->exec_index == d->seen_exec &&
                                        d->step == d->seen_step)) {
            take_op(d, at); /* the debugger's hook runs before this session's */
            d->seen_early = true;
        }
        if (d->spec.when == DUMP_WHEN_BREAK || d->triggered || d->cur_on_disk) {
            d->triggered = false;
            recorder_write(d, false);
        }
    }
    dump_flush(d);
}

void dump_flush(dump_session *d)
{
    pthread_mutex_lock(&d->mu);
    TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG, "flush: waits for the queue (depth %d, %zu bytes) and %d sealed steps",
           d->n_queued, d->queued_bytes, d->n_sealed);
    while (d->head || d->busy)
        pthread_cond_wait(&d->drained, &d->mu);
    while (d->n_sealed > 0 || d->run_pending)
        pthread_cond_wait(&d->synced, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

dump_status dump_status_get(const dump_session *d)
{
    dump_session *m = (dump_session *)d;
    pthread_mutex_lock(&m->mu);
    dump_status s = { .bytes_written = d->bytes_written, .steps_written = d->steps_written,
                      .tensors_written = d->tensors_written, .queued_bytes = d->queued_bytes,
                      .write_seconds = d->write_seconds, .failed = d->failed, .capped = d->capped };
    snprintf(s.error, sizeof s.error, "%s", d->error);
    snprintf(s.warning, sizeof s.warning, "%s", d->warning);
    pthread_mutex_unlock(&m->mu);
    return s;
}
