/* cpu_services.c — the CPU backend's memory and services: its memory is the
 * host's, so copies are memcpy, and statistics, rounding and widening run
 * in place (stats.c and lowp.c hold the loops, on host arrays). */
#include "cpu_services.h"

#include <stdlib.h>
#include <string.h>

void *cpu_alloc(size_t bytes)
{
    /* 64-byte alignment for vector loads; size rounded as aligned_alloc wants. */
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

void cpu_free(void *p) { free(p); }

void cpu_to_host(void *host_dst, const void *src, size_t bytes) { memcpy(host_dst, src, bytes); }

void cpu_from_host(void *dst, const void *host_src, size_t bytes) { memcpy(dst, host_src, bytes); }

void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }

void cpu_sync(void) {} /* the host's own work is done when the call returns */

void cpu_stats(const te_tensor *t, te_stats *s, bool quick)
{
    te_stats_scan_host(t->data, t->dtype, t->numel, quick, s);
}

bool cpu_has_nonfinite(const te_tensor *t)
{
    if (t->dtype == TE_F32)
        return te_nonfinite_host(te_f32(t), t->numel);
    te_stats s;
    te_stats_scan_host(t->data, t->dtype, t->numel, true, &s);
    return s.nan || s.inf;
}

/* The deferred watch's flags: host memory, set as each op finishes (the
 * CPU has nothing to overlap; TDBG_WATCH_DEFER=1 runs it for the tests). */
static struct {
    unsigned char *f;
    int cap;
} flags;

void cpu_watch_flag(const te_tensor *t, unsigned kinds, int slot)
{
    if (!cpu_has_nonfinite(t))
        return;
    te_stats s;
    cpu_stats(t, &s, true);
    const unsigned found = (s.nan ? TE_WATCH_NAN : 0u) | (s.inf ? TE_WATCH_INF : 0u);
    if (!(found & kinds))
        return;
    if (slot >= flags.cap) {
        int cap = flags.cap ? flags.cap : 1024;
        while (cap <= slot)
            cap *= 2;
        unsigned char *nf = realloc(flags.f, (size_t)cap);
        if (!nf) { /* no room to say which op: the first slot says "some op" */
            if (flags.cap)
                flags.f[0] = 1;
            return;
        }
        memset(nf + flags.cap, 0, (size_t)(cap - flags.cap));
        flags.f = nf;
        flags.cap = cap;
    }
    flags.f[slot] = 1;
}

int cpu_watch_take(int n)
{
    int first = -1;
    for (int i = 0; i < n && i < flags.cap; i++)
        if (flags.f[i] && first < 0)
            first = i;
    if (flags.cap)
        memset(flags.f, 0, (size_t)flags.cap);
    return first;
}
