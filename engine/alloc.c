/*
 * alloc.c — the caching allocator between tensors and the backend.
 *
 * Training allocates the same sizes every step, so freed blocks are kept in
 * per-size-class free lists and handed out again without touching the
 * backend. Sizes round up to a class: multiples of 256 bytes up to 16 KiB,
 * then four classes per power of two (at most 25% slack). Each device has
 * its own lists and statistics: a block goes back to the backend it came
 * from, and peak device memory is told apart from the host's.
 */
#include "te_internal.h"

#include <pthread.h>
#include <stdlib.h>

#define SMALL_STEP 256
#define SMALL_MAX 16384
#define N_SMALL (SMALL_MAX / SMALL_STEP)
#define N_CLASSES (N_SMALL + 4 * 64)

typedef struct block {
    struct block *next;
    void *ptr;
} block;

typedef struct pool {
    block *free_list[N_CLASSES];
    te_mem_stats stats;
} pool;

static struct {
    pthread_mutex_t lock;
    pool dev[TE_DEV_COUNT];
    block *spare; /* recycled list cells, shared */
} mem = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Class index and the rounded size of that class. */
static int size_class(size_t bytes, size_t *rounded)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes <= SMALL_MAX) {
        size_t k = (bytes + SMALL_STEP - 1) / SMALL_STEP;
        *rounded = k * SMALL_STEP;
        return (int)k - 1;
    }
    int p = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^p < bytes <= 2^(p+1) */
    size_t quarter = (size_t)1 << (p - 2);
    size_t base = (size_t)1 << p;
    size_t q = (bytes - base + quarter - 1) / quarter; /* 1..4 */
    *rounded = base + q * quarter;
    return N_SMALL + (p - 14) * 4 + (int)q - 1;
}

void *te_mem_alloc_on(te_device d, size_t bytes)
{
    const te_backend *be = te_backend_of(d);
    if (!be)
        return NULL;
    size_t rounded;
    int c = size_class(bytes, &rounded);
    pool *m = &mem.dev[d];
    void *p = NULL;
    pthread_mutex_lock(&mem.lock);
    m->stats.allocs++;
    block *b = m->free_list[c];
    if (b) {
        m->free_list[c] = b->next;
        p = b->ptr;
        b->next = mem.spare;
        mem.spare = b;
        m->stats.cached -= rounded;
        m->stats.cache_hits++;
    }
    pthread_mutex_unlock(&mem.lock);
    if (!p)
        p = be->alloc(rounded);
    if (!p)
        return NULL;
    pthread_mutex_lock(&mem.lock);
    m->stats.current += rounded;
    if (m->stats.current > m->stats.peak)
        m->stats.peak = m->stats.current;
    m->stats.requested += bytes;
    if (m->stats.requested > m->stats.peak_requested)
        m->stats.peak_requested = m->stats.requested;
    pthread_mutex_unlock(&mem.lock);
    return p;
}

void te_mem_free_on(te_device d, void *p, size_t bytes)
{
    if (!p)
        return;
    size_t rounded;
    int c = size_class(bytes, &rounded);
    pool *m = &mem.dev[d];
    pthread_mutex_lock(&mem.lock);
    block *b = mem.spare;
    if (b)
        mem.spare = b->next;
    else
        b = malloc(sizeof *b);
    m->stats.current -= rounded;
    m->stats.requested -= bytes;
    if (b) {
        b->ptr = p;
        b->next = m->free_list[c];
        m->free_list[c] = b;
        m->stats.cached += rounded;
        p = NULL;
    }
    pthread_mutex_unlock(&mem.lock);
    if (p) /* no list cell: give the block straight back */
        te_backends[d]->free(p);
}

void *te_mem_alloc(size_t bytes) { return te_mem_alloc_on(te_backend_current()->device, bytes); }

void te_mem_free(void *p, size_t bytes) { te_mem_free_on(te_backend_current()->device, p, bytes); }

te_mem_stats te_mem_stats_of(te_device d)
{
    if ((unsigned)d >= TE_DEV_COUNT)
        return (te_mem_stats){ 0 };
    pthread_mutex_lock(&mem.lock);
    te_mem_stats s = mem.dev[d].stats;
    pthread_mutex_unlock(&mem.lock);
    return s;
}

te_mem_stats te_mem_stats_get(void) { return te_mem_stats_of(TE_DEV_CPU); }

void te_mem_reset_peak(void)
{
    pthread_mutex_lock(&mem.lock);
    for (int d = 0; d < TE_DEV_COUNT; d++) {
        te_mem_stats *s = &mem.dev[d].stats;
        s->peak = s->current;
        s->peak_requested = s->requested;
    }
    pthread_mutex_unlock(&mem.lock);
}

void te_mem_release_cached(void)
{
    pthread_mutex_lock(&mem.lock);
    for (int d = 0; d < TE_DEV_COUNT; d++) {
        pool *m = &mem.dev[d];
        for (int c = 0; c < N_CLASSES; c++) {
            while (m->free_list[c]) {
                block *b = m->free_list[c];
                m->free_list[c] = b->next;
                te_backends[d]->free(b->ptr); /* a device with blocks has its backend */
                b->next = mem.spare;
                mem.spare = b;
            }
        }
        m->stats.cached = 0;
    }
    pthread_mutex_unlock(&mem.lock);
}

void te_mem_shutdown(void)
{
    te_mem_release_cached();
    pthread_mutex_lock(&mem.lock);
    while (mem.spare) {
        block *b = mem.spare;
        mem.spare = b->next;
        free(b);
    }
    for (int d = 0; d < TE_DEV_COUNT; d++)
        mem.dev[d].stats = (te_mem_stats){ 0 };
    pthread_mutex_unlock(&mem.lock);
}
