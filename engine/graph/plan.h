/*
 * plan.h — static memory planning for a compiled step.
 *
 * The graph compiler knows, for every intermediate buffer, the kernel that
 * first writes it and the last kernel that reads it. Buffers whose live
 * intervals do not intersect may share bytes, so the whole step fits in one
 * arena far smaller than the sum of its buffers:
 *
 *   te_plan_buf b[] = { { .size = 4096, .def = 0, .last_use = 1 },
 *                       { .size = 4096, .def = 1, .last_use = 2 },
 *                       { .size = 4096, .def = 2, .last_use = 3 } };
 *   size_t off[3], arena;
 *   te_plan_arena(b, 3, off, &arena);   // off = {0, 4096, 0}, arena = 8192
 *   te_plan_verify(b, 3, off, arena);   // TE_OK
 *
 * Indices are positions in the compiled kernel order; a buffer is live on
 * [def, last_use], both ends included. A buffer that must survive the step
 * (an output, a tensor a hook observes) takes last_use = number of kernels.
 */
#ifndef TE_GRAPH_PLAN_H
#define TE_GRAPH_PLAN_H

#include "te.h"

#include <stddef.h>

#define TE_PLAN_ALIGN 64 /* bytes; the alignment of a buffer that gives 0 */

typedef struct te_plan_buf {
    size_t size;  /* bytes; a buffer of 0 bytes takes no room */
    int def;      /* first kernel that writes it */
    int last_use; /* last kernel that reads it, >= def */
    size_t align; /* power of two; 0 means TE_PLAN_ALIGN */
} te_plan_buf;

/* Gives every buffer an offset in one arena such that two buffers live at
 * the same time never share a byte, and stores the arena's size (the end of
 * its highest buffer). Greedy by size, largest first, each into the smallest
 * gap that fits among the already placed buffers it meets in time (TFLite's
 * and PyTorch's static planners do the same); deterministic, O(n^2).
 * On error returns TE_ERR_ARG (a message naming the buffer: def > last_use,
 * negative def, alignment not a power of two, arena past SIZE_MAX) or
 * TE_ERR_NOMEM, and leaves the outputs unspecified. */
te_status te_plan_arena(const te_plan_buf *bufs, int n, size_t *offsets, size_t *arena_bytes);

/* Checks a plan made by anyone: TE_OK, or TE_ERR_STATE with a message naming
 * the first (in index order) buffer that is misaligned or runs past the
 * arena, else the first pair of live-together buffers that overlap, with
 * both indices, intervals and byte ranges. TE_ERR_ARG for bad input as in
 * te_plan_arena. */
te_status te_plan_verify(const te_plan_buf *bufs, int n, const size_t *offsets, size_t arena_bytes);

/* The largest total size of buffers live at one kernel: no plan's arena is
 * smaller. 0 for bad input (n <= 0, NULL bufs). */
size_t te_plan_lower_bound(const te_plan_buf *bufs, int n);

#endif
