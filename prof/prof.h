/* prof.h — `tdbg-prof`: reads the profiler's Chrome trace event JSON
 * (docs/profiler.md, "the trace format") and reports where the time went.
 *
 *   trace.c       prof_trace_load: the file, checked event by event
 *   nest.c        self time: ops nested on one thread
 *   table.c       rows by op name, type or phase; the step breakdown
 *   report.c      `tdbg-prof FILE`: the tables, as text or JSON
 *   diff.c        `tdbg-prof diff A B`
 *   tdbg_prof.c   tdbg_prof_main: the command line
 *
 * The input is untrusted: every damaged file ends in one message naming
 * the file, the event's index and what is wrong, never in a crash. */
#ifndef TDBG_PROF_H
#define TDBG_PROF_H

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The categories of "X" events the tool reads; others are skipped. */
typedef enum prof_cat { PROF_STEP, PROF_PHASE, PROF_OP } prof_cat;

/* The step-time breakdown's columns: phase event names map onto them
 * (prof_phase_class); PROF_OTHER is the rest of the step's wall time. */
typedef enum prof_class {
    PROF_DATA, PROF_FORWARD, PROF_BACKWARD, PROF_UPDATE, PROF_HOOKS, PROF_DUMP, PROF_OTHER, PROF_CLASS_COUNT
} prof_class;

typedef struct prof_event {
    size_t index;           /* in traceEvents, for messages */
    prof_cat cat;
    const char *name;       /* strings live in the trace's JSON */
    const char *type;       /* args.type, or NULL */
    const char *phase;      /* args.phase, or NULL */
    const char *kernel;     /* args.kernel (graph mode's fused kernel), or NULL */
    double ts, dur;         /* microseconds */
    double self;            /* dur less its nested ops' (ops only; nest.c) */
    int64_t pid, tid;
    int64_t step;           /* args.step, when has_step */
    bool has_step;
    double hooks, data;     /* a phase's args.hooks_ns and args.data_ns, in us (0 when absent) */
    double dump;            /* a step's args.dump_ns (the dump writer's queue waits, inside hooks), in us */
    double flops;           /* args.flops, when has_flops */
    bool has_flops;
    double bytes;           /* args.bytes (moved by the op), when has_bytes */
    bool has_bytes;
} prof_event;

typedef struct prof_trace {
    char *file;
    json_t *root;
    prof_event *ev;         /* the step, phase and op events, in file order */
    size_t n;
    size_t n_steps, n_ops, n_threads;
} prof_trace;

/* Largest ts or dur accepted, in microseconds (about 31 years): sums of
 * a few million of them stay exact enough in a double. */
#define PROF_MAX_US 1e15
/* Nesting slack: an op ending up to this many us after its parent still nests. */
#define PROF_NEST_EPS_US 1e-3

/* Loads and checks file; on failure writes "FILE: why" into err (n
 * bytes) and returns false (t is then empty). */
bool prof_trace_load(prof_trace *t, const char *file, char *err, size_t n);
void prof_trace_free(prof_trace *t);

/* Fills every op's self time and counts the threads; false with the
 * message in err when two ops on one thread overlap without nesting. */
bool prof_nest(prof_trace *t, char *err, size_t n);

/* One row of a table: the ops sharing a key. */
typedef struct prof_row {
    const char *key;
    size_t count;
    double total, self;     /* us */
    double flops;           /* summed over the ops that carry flops */
    size_t n_flops;         /* how many of them */
    double flops_us;        /* their total time */
    double bytes;           /* args.bytes summed over the ops that carry flops and bytes */
    size_t n_bytes;         /* how many of them */
    double bytes_us;        /* their total time */
} prof_row;

typedef enum prof_key { PROF_BY_NAME, PROF_BY_TYPE, PROF_BY_PHASE, PROF_BY_KERNEL } prof_key;

/* The ops grouped by key (a missing type, phase or kernel is "-"), sorted by key;
 * returns the count, *rows malloc'd (NULL when there is no op). */
size_t prof_rows(const prof_trace *t, prof_key key, prof_row **rows);
/* Sum of every op's self time: the time spent in ops, counted once. */
double prof_op_time(const prof_trace *t);

/* One step's breakdown. */
typedef struct prof_step {
    int64_t step;
    double wall;                    /* the step event's dur, us */
    double cls[PROF_CLASS_COUNT];   /* us; PROF_OTHER = wall less the rest */
} prof_step;

prof_class prof_phase_class(const char *name);
extern const char *const prof_class_names[PROF_CLASS_COUNT];
/* The steps, sorted by number; false with the message in err when a step
 * number appears twice. */
bool prof_steps(const prof_trace *t, prof_step **steps, size_t *n_steps, char *err, size_t n);

typedef struct prof_opts {
    int top;                /* rows per table */
    double peak_gflops;     /* 0: not given */
    bool json;
} prof_opts;

/* `tdbg-prof FILE` and `tdbg-prof diff A B` on loaded traces. */
void prof_report(const prof_trace *t, const prof_step *steps, size_t n_steps, const prof_opts *o, FILE *out);
void prof_diff(const prof_trace *a, const prof_trace *b, const prof_opts *o, FILE *out);

/* The program: exit 0 success, 2 trouble (usage, unreadable or damaged trace). */
int tdbg_prof_main(int argc, char **argv, FILE *out, FILE *err);

#endif
