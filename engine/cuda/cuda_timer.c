/*
 * cuda_timer.c — the profiler's device clock: timing events recorded on
 * the backend's stream, read back at the step's end. The events are kept
 * from step to step (a step's marks reuse the last step's), so recording
 * costs a cudaEventRecord per op, not a create.
 */
#include "cuda/cuda_timer.h"

#include "cuda/cuda_rt.h"

#include <stdlib.h>

static cudaEvent_t *ev;
static int n_used, n_made, cap;

void cuda_timer_reset(void) { n_used = 0; }

int cuda_timer_mark(void)
{
    if (n_used == n_made) {
        if (n_made == cap) {
            int c = cap ? 2 * cap : 256;
            cudaEvent_t *e = realloc(ev, (size_t)c * sizeof *e);
            if (!e)
                return -1;
            ev = e;
            cap = c;
        }
        if (te_cuda_ok(NULL, cudaEventCreate(&ev[n_made]), "cudaEventCreate for the profiler") != TE_OK)
            return -1;
        n_made++;
    }
    if (te_cuda_ok(NULL, cudaEventRecord(ev[n_used], te_cuda_stream()), "cudaEventRecord for the profiler") != TE_OK)
        return -1;
    return n_used++;
}

double cuda_timer_ms(int a, int b)
{
    float ms = 0;
    if (a < 0 || b < 0 || a >= n_used || b >= n_used ||
        te_cuda_ok(NULL, cudaEventSynchronize(ev[b]), "cudaEventSynchronize for the profiler") != TE_OK ||
        te_cuda_ok(NULL, cudaEventElapsedTime(&ms, ev[a], ev[b]), "cudaEventElapsedTime") != TE_OK)
        return -1;
    return (double)ms;
}
