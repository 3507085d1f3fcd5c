/* cuda_timer.h — the profiler's device clock on the CUDA backend (the
 * te_backend timer entries; engine/prof.c). */
#ifndef TE_CUDA_TIMER_H
#define TE_CUDA_TIMER_H

/* Marks the stream now: a handle for cuda_timer_ms, or -1 (error set). */
int cuda_timer_mark(void);
/* Milliseconds of device time from mark a to mark b, waiting for b; -1
 * on a bad handle or a CUDA error. */
double cuda_timer_ms(int a, int b);
/* The marks made so far are spent; their events are reused. */
void cuda_timer_reset(void);
#endif
