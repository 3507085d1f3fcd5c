/*
 * plan.c — the static arena planner, its verifier and the lower bound.
 *
 * Placing the largest buffers first leaves the small ones to fill the holes
 * between them; each goes into the smallest hole that fits among the buffers
 * it meets in time, so large holes stay free for what still comes.
 */
#include "graph/plan.h"
#include "te_internal.h"

#include <stdint.h>
#include <stdlib.h>

static size_t buf_align(const te_plan_buf *b) { return b->align ? b->align : TE_PLAN_ALIGN; }

static bool live_together(const te_plan_buf *a, const te_plan_buf *b)
{
    return a->def <= b->last_use && b->def <= a->last_use;
}

/* x rounded up to a multiple of a (a power of two); false if that passes SIZE_MAX. */
static bool align_up(size_t x, size_t a, size_t *out)
{
    if (x > SIZE_MAX - (a - 1))
        return false;
    *out = (x + a - 1) & ~(a - 1);
    return true;
}

static te_status check_bufs(const char *fn, const te_plan_buf *bufs, int n)
{
    if (n < 0 || (n > 0 && !bufs)) {
        te_set_error(TE_ERR_ARG, "%s: %d buffers at %p", fn, n, (const void *)bufs);
        return TE_ERR_ARG;
    }
    for (int i = 0; i < n; i++) {
        const te_plan_buf *b = &bufs[i];
        size_t a = buf_align(b);
        if (b->def < 0) {
            te_set_error(TE_ERR_ARG, "%s: buffer %d: def %d is negative", fn, i, b->def);
            return TE_ERR_ARG;
        }
        if (b->def > b->last_use) {
            te_set_error(TE_ERR_ARG, "%s: buffer %d: def %d is after last_use %d", fn, i, b->def,
                         b->last_use);
            return TE_ERR_ARG;
        }
        if (a & (a - 1)) {
            te_set_error(TE_ERR_ARG, "%s: buffer %d: alignment %zu is not a power of two", fn, i, a);
            return TE_ERR_ARG;
        }
    }
    return TE_OK;
}

typedef struct {
    size_t size;
    int span, def, idx;
} order_key;

/* Larger first; then longer-lived (harder to fit later), earlier, lower index. */
static int by_size_desc(const void *pa, const void *pb)
{
    const order_key *a = pa, *b = pb;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    if (a->span != b->span)
        return a->span > b->span ? -1 : 1;
    if (a->def != b->def)
        return a->def < b->def ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* The offset for buffer b among the placed ones (indices sorted by offset):
 * the smallest hole between the buffers it meets in time that holds it,
 * else above them all. False if that passes SIZE_MAX. */
static bool place(const te_plan_buf *bufs, const size_t *offsets, const int *placed, int n_placed,
                  const te_plan_buf *b, size_t *out)
{
    size_t a = buf_align(b), lo = 0; /* lo: end of the met buffers below */
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cand;
    for (int p = 0; p < n_placed; p++) {
        const te_plan_buf *o = &bufs[placed[p]];
        size_t at = offsets[placed[p]];
        if (!live_together(b, o))
            continue;
        if (align_up(lo, a, &cand) && cand <= at && at - cand >= b->size && at - lo < best_gap) {
            best_gap = at - lo;
            best = cand;
        }
        if (at + o->size > lo)
            lo = at + o->size;
    }
    if (best_gap == SIZE_MAX) {
        if (!align_up(lo, a, &best) || best > SIZE_MAX - b->size)
            return false;
    }
    *out = best;
    return true;
}

te_status te_plan_arena(const te_plan_buf *bufs, int n, size_t *offsets, size_t *arena_bytes)
{
    te_status st = check_bufs("te_plan_arena", bufs, n);
    if (st != TE_OK)
        return st;
    if (n > 0 && (!offsets || !arena_bytes)) {
        te_set_error(TE_ERR_ARG, "te_plan_arena: NULL %s", offsets ? "arena_bytes" : "offsets");
        return TE_ERR_ARG;
    }
    if (n <= 0) { /* only 0 gets here */
        if (arena_bytes)
            *arena_bytes = 0;
        return TE_OK;
    }
    order_key *order = malloc((size_t)n * sizeof *order);
    int *placed = malloc((size_t)n * sizeof *placed); /* sorted by offset */
    if (!order || !placed) {
        free(order);
        free(placed);
        te_set_error(TE_ERR_NOMEM, "te_plan_arena: no memory to plan %d buffers", n);
        return TE_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++)
        order[i] = (order_key){ bufs[i].size, bufs[i].last_use - bufs[i].def, bufs[i].def, i };
    qsort(order, (size_t)n, sizeof *order, by_size_desc);

    size_t arena = 0;
    int n_placed = 0;
    st = TE_OK;
    for (int k = 0; k < n; k++) {
        int i = order[k].idx;
        const te_plan_buf *b = &bufs[i];
        if (b->size == 0) { /* meets nothing */
            offsets[i] = 0;
            continue;
        }
        size_t off;
        if (!place(bufs, offsets, placed, n_placed, b, &off)) {
            te_set_error(TE_ERR_ARG, "te_plan_arena: buffer %d (%zu bytes): arena would pass SIZE_MAX",
                         i, b->size);
            st = TE_ERR_ARG;
            break;
        }
        offsets[i] = off;
        if (off + b->size > arena)
            arena = off + b->size;
        int p = n_placed++;
        for (; p > 0 && offsets[placed[p - 1]] > off; p--)
            placed[p] = placed[p - 1];
        placed[p] = i;
    }
    free(order);
    free(placed);
    if (st == TE_OK)
        *arena_bytes = arena;
    return st;
}

te_status te_plan_verify(const te_plan_buf *bufs, int n, const size_t *offsets, size_t arena_bytes)
{
    te_status st = check_bufs("te_plan_verify", bufs, n);
    if (st != TE_OK)
        return st;
    if (n > 0 && !offsets) {
        te_set_error(TE_ERR_ARG, "te_plan_verify: NULL offsets");
        return TE_ERR_ARG;
    }
    for (int i = 0; i < n; i++) {
        const te_plan_buf *b = &bufs[i];
        size_t a = buf_align(b);
        if (offsets[i] % a) {
            te_set_error(TE_ERR_STATE, "te_plan_verify: buffer %d at offset %zu is not %zu-byte aligned",
                         i, offsets[i], a);
            return TE_ERR_STATE;
        }
        if (offsets[i] > arena_bytes || b->size > arena_bytes - offsets[i]) {
            te_set_error(TE_ERR_STATE,
                         "te_plan_verify: buffer %d at bytes [%zu, +%zu) runs past the arena of %zu bytes",
                         i, offsets[i], b->size, arena_bytes);
            return TE_ERR_STATE;
        }
    }
    /* Every range now lies inside the arena, so no end below overflows. */
    for (int i = 0; i < n; i++) {
        const te_plan_buf *x = &bufs[i];
        for (int j = i + 1; j < n; j++) {
            const te_plan_buf *y = &bufs[j];
            if (x->size == 0 || y->size == 0 || !live_together(x, y))
                continue;
            if (offsets[i] < offsets[j] + y->size && offsets[j] < offsets[i] + x->size) {
                te_set_error(TE_ERR_STATE,
                             "te_plan_verify: buffers %d and %d overlap: buffer %d live [%d, %d] at "
                             "bytes [%zu, %zu), buffer %d live [%d, %d] at bytes [%zu, %zu)",
                             i, j, i, x->def, x->last_use, offsets[i], offsets[i] + x->size, j, y->def,
                             y->last_use, offsets[j], offsets[j] + y->size);
                return TE_ERR_STATE;
            }
        }
    }
    return TE_OK;
}

size_t te_plan_lower_bound(const te_plan_buf *bufs, int n)
{
    if (n <= 0 || !bufs)
        return 0;
    /* The live total only rises where a buffer begins. */
    size_t best = 0;
    for (int i = 0; i < n; i++) {
        int t = bufs[i].def;
        size_t live = 0;
        for (int j = 0; j < n; j++)
            if (bufs[j].def <= t && t <= bufs[j].last_use)
                live += bufs[j].size;
        if (live > best)
            best = live;
    }
    return best;
}
