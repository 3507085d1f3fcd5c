/*
 * alloc.c — the caching allocator between tensors and the backend.
 *
 * Training allocates the same sizes every step, so freed blocks are kept in
 * per-size-class free lists and handed out again without touching the
 * backend. Sizes round up to a class: multiples of 256 bytes up to 16 KiB,
 * then four classes per power of two (at most 25% slack).
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

static struct {
    pthread_mutex_t lock;
    block *free_list[N_CLASSES];
    block *spare;            /* recycled list cells */
    te_mem_stats stats;
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

void *te_mem_alloc(size_t bytes)
{
    size_t rounded;
    int c = size_class(bytes, &rounded);
    void *p = NULL;
    pthread_mutex_lock(&mem.lock);
    mem.stats.allocs++;
    block *b = mem.free_list[c];
    if (b) {
        mem.free_list[c] = b->next;
        p = b->ptr;
        b->next = mem.spare;
        mem.spare = b;
        mem.stats.cached -= rounded;
        mem.stats.cache_hits++;
    }
    pthread_mutex_unlock(&mem.lock);
    if (!p)
        p = te_backend_current()->alloc(rounded);
    if (!p)
        return NULL;
    pthread_mutex_lock(&mem.lock);
    mem.stats.current += rounded;
    if (mem.stats.current > mem.stats.peak)
        mem.stats.peak = mem.stats.current;
    mem.stats.requested += bytes;
    if (mem.stats.requested > mem.stats.peak_requested)
        mem.stats.peak_requested = mem.stats.requested;
    pthread_mutex_unlock(&mem.lock);
    return p;
}

void te_mem_free(void *p, size_t bytes)
{
    if (!p)
        return;
    size_t rounded;
    int c = size_class(bytes, &rounded);
    pthread_mutex_lock(&mem.lock);
    block *b = mem.spare;
    if (b)
        mem.spare = b->next;
    else
        b = malloc(sizeof *b);
    mem.stats.current -= rounded;
    mem.stats.requested -= bytes;
    if (b) {
        b->ptr = p;
        b->next = mem.free_list[c];
        mem.free_list[c] = b;
        mem.stats.cached += rounded;
        p = NULL;
    }
    pthread_mutex_unlock(&mem.lock);
    if (p) /* no list cell: give the block straight back */
        te_backend_current()->free(p);
}

te_mem_stats te_mem_stats_get(void)
{
    pthread_mutex_lock(&mem.lock);
    te_mem_stats s = mem.stats;
    pthread_mutex_unlock(&mem.lock);
    return s;
}

void te_mem_reset_peak(void)
{
    pthread_mutex_lock(&mem.lock);
    mem.stats.peak = mem.stats.current;
    mem.stats.peak_requested = mem.stats.requested;
    pthread_mutex_unlock(&mem.lock);
}

void te_mem_release_cached(void)
{
    pthread_mutex_lock(&mem.lock);
    for (int c = 0; c < N_CLASSES; c++) {
        while (mem.free_list[c]) {
            block *b = mem.free_list[c];
            mem.free_list[c] = b->next;
            te_backend_current()->free(b->ptr);
            b->next = mem.spare;
            mem.spare = b;
        }
    }
    mem.stats.cached = 0;
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
    mem.stats = (te_mem_stats){ 0 };
    pthread_mutex_unlock(&mem.lock);
}
