/* prof_internal.h — the profiler's ring, shared by prof.c (recording) and
 * prof_json.c (writing). */
#ifndef TE_PROF_INTERNAL_H
#define TE_PROF_INTERNAL_H
#include "te_internal.h"

/* What an event is: an op, a phase of the step, or an interval inside one. */
/* DATA: the wait for a batch before the step (a phase); WAIT: one inside a phase. */
/* REPLAY: an attempt of the step the deferred watch dropped and ran again. */
enum { PROF_OP, PROF_PHASE, PROF_DATA, PROF_WAIT, PROF_COMPILE, PROF_REPLAY };
#define PROF_NONE UINT32_MAX /* no string */

/* One fixed-size record; its strings live in the step's pool. */
typedef struct prof_ev {
    uint64_t t0, t1; /* CLOCK_MONOTONIC ns */
    union {
        struct { uint64_t live, peak; };        /* an op: the allocator's bytes after it */
        struct { uint64_t hooks_ns, loader_ns; }; /* a phase: time inside it in hooks and loader waits */
    };
    uint64_t bytes;
    double flops;
    int64_t shape[TE_MAX_DIMS];
    uint32_t name, type, kernel; /* offsets into the pool, or PROF_NONE */
    int32_t tid;                 /* PROF_DEVICE_TID: t0, t1 are device time */
    int32_t m0, m1;              /* an op's device-clock marks, or -1 */
    uint64_t host_ns;            /* a device-timed op: its time on the host */
    int64_t coll_seq;            /* a collective: its sequence number; -1 for other ops */
    int32_t coll_rank, coll_ranks;
    uint8_t kind, phase, dtype, ndim, device;
} prof_ev;

typedef struct prof_step {
    int64_t step;
    uint64_t t0, t1;
    int32_t tid;
    bool done;
    prof_ev *ev; /* grown geometrically, kept across the steps the slot holds */
    int n, cap;
    char *pool;
    size_t pool_n, pool_cap;
    uint64_t hooks_ns, loader_ns, compile_ns, dump_ns;
    uint64_t arena_bytes; /* graph mode: the largest arena of the plans that ran */
    int mark0;            /* the device clock's mark at t0, or -1: host time */
} prof_step;

/* The device clock: the backend's timer entries (or a test's). */
typedef struct prof_clock {
    int (*mark)(void);
    double (*ms)(int a, int b);
    void (*reset)(void);
} prof_clock;
/* Replaces the backend's clock (NULL: back to the backend's); tests. */
void te_prof_clock_set(const prof_clock *c);
/* The track of device-timed ops: one per process, beside the threads'. */
#define PROF_DEVICE_TID 0x40000000

typedef struct prof_state {
    te_profile_opts o;
    prof_step *ring; /* o.keep slots; step k's slot: its count modulo keep */
    int64_t recorded; /* steps finished since start */
    prof_step *cur;   /* the step being recorded, or NULL */
    int open_phase;   /* index of the open phase event in cur, or -1 */
    uint64_t data_t0, data_t1; /* a loader wait before the step it feeds */
    int captures;     /* files named from o.file written since start */
    int64_t from;     /* the first step recorded, -1 before one */
    char last_file[sizeof ((te_profile_opts *)0)->file + 16]; /* the last file written */
} prof_state;

extern prof_state te_prof;
static inline const char *prof_str(const prof_step *s, uint32_t off) { return off == PROF_NONE ? NULL : s->pool + off; }
/* The steps a save writes, oldest first (at most keep, into out): the
 * ring's finished ones, then the one under way; their count. */
int te_prof_steps_in_order(const prof_state *p, const prof_step **out);
/* Writes the ring's finished steps, oldest first, and last the step still
 * being recorded (args.partial: a save at a stop), keep steps at most, as
 * Chrome trace JSON. */
te_status te_prof_write_json(const prof_state *p, const char *file);
#endif
