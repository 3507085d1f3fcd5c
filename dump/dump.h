/*
 * dump.h — selective HDF5 dumps: the spec language, the step files and
 * their reader. (The background writer, the engine hook and tdbg-dump are
 * built on these.)
 */
#ifndef TDBG_DUMP_H
#define TDBG_DUMP_H

#include "te.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- the spec (spec.c) ----------------------------------------------------------
 * `key=value` items joined by ';', lists by ','. Keys and defaults:
 *   dir=PATH          output run directory            (default "tdbg-dump")
 *   ops=GLOB,...      op name globs and type:TYPE     (default every op)
 *   steps=SPEC        N, A-B, every:N, A-B:every:N, joined by '|' or ','
 *                     (default every step: `*`)
 *   io=outputs|inputs|both                            (default outputs)
 *   phase=forward,backward,update,params,grads        (default forward,backward,update)
 *   what=full|stats                                   (default full)
 *   when=always|break|nonfinite                       (default always)
 *   keep=K            flight recorder: steps kept in memory (default 0: off;
 *                     K >= 1 needs when=nonfinite or break)
 *   max=SIZE          stop dumping after SIZE bytes: 500M, 2G, 100K, 123 (default: no cap)
 *   compress=none|gzip:N   N in 1..9                  (default none)
 * "params" dumps the parameters at each selected step, "grads" their
 * gradients. Whitespace around tokens is ignored. `@FILE` reads the spec
 * from FILE (items may be on separate lines; '#' starts a comment).
 */
#define DUMP_MAX_GLOBS 32
#define DUMP_MAX_RANGES 32

typedef enum { DUMP_IO_OUTPUTS = 1, DUMP_IO_INPUTS = 2, DUMP_IO_BOTH = 3 } dump_io;
typedef enum { DUMP_WHEN_ALWAYS, DUMP_WHEN_BREAK, DUMP_WHEN_NONFINITE } dump_when;

enum { /* dump_spec.phases bits */
    DUMP_PHASE_FORWARD = 1u << 0,
    DUMP_PHASE_BACKWARD = 1u << 1,
    DUMP_PHASE_UPDATE = 1u << 2,
    DUMP_PHASE_PARAMS = 1u << 3,
    DUMP_PHASE_GRADS = 1u << 4,
};

typedef struct dump_range {
    int64_t lo, hi;   /* inclusive; hi = INT64_MAX for "every" */
    int64_t every;    /* 1, or N for every:N (steps lo, lo+N, ...) */
} dump_range;

typedef struct dump_spec {
    char dir[4096];
    int n_ops;                          /* 0: every op */
    char ops[DUMP_MAX_GLOBS][TE_NAME_MAX]; /* globs; "type:Conv2D" entries match op types */
    int n_steps;                        /* 0: every step */
    dump_range steps[DUMP_MAX_RANGES];
    dump_io io;
    unsigned phases;
    bool stats_only;                    /* what=stats */
    dump_when when;
    int keep;
    uint64_t max_bytes;                 /* 0: no cap */
    int gzip;                           /* 0: none, else level 1..9 */
} dump_spec;

/* Fills s with the defaults, then parses text over them. On error s holds
 * the defaults again, and the call returns
 * false and writes into err a message naming the offending token and its
 * 1-based column, e.g. "column 12: unknown key 'stpes' (did you mean
 * steps?)", "column 20: bad step range '8-5' (the end is before the
 * start)", "column 33: bad size '2X' (use K, M or G)". For "@FILE" the
 * message names the file and its line instead of a column. */
bool dump_spec_parse(const char *text, dump_spec *s, char *err, size_t errlen);
/* Does the spec select this step / op (name and type; either may be NULL)? */
bool dump_spec_step(const dump_spec *s, int64_t step);
bool dump_spec_op(const dump_spec *s, const char *name, const char *type);
/* Does an ops= glob name this tensor of a step file by its path or the
 * debugger's name (names.h: "/conv2/bn/in0", "conv2/bn:in0", "param:W")?
 * tdbg-diff's --ops selects tensors so; a dump selects whole ops. */
bool dump_spec_tensor(const dump_spec *s, const char *path, int exec_index);
/* ---- dumping (writer.c) -----------------------------------------------------------
 * A session attaches to the engine's hooks, copies the tensors the spec
 * selects and hands them to a background thread that writes one HDF5 file
 * per step (docs/dump-format.md). Graph mode keeps the selected ops'
 * tensors visible (te_observe_add) while the session lasts.
 */
typedef struct dump_session dump_session;

typedef struct dump_run_info {   /* what run.h5 says of the run */
    te_mode mode;
    const char *amp;             /* NULL: "none" */
    const char *command_line;
} dump_run_info;

typedef struct dump_status {     /* the written counts are of published step files */
    uint64_t bytes_written;      /* tensor bytes in them */
    int64_t steps_written, tensors_written;
    size_t queued_bytes;         /* copies waiting for the disk */
    double write_seconds;        /* wall time with a step being written (HDF5, fsync, rename) */
    bool failed;                 /* a write failed: dumping stopped */
    bool capped;                 /* max= was reached */
    char error[1024];            /* why it failed, naming the path */
    char warning[1024];          /* "": none; else ops= globs that matched no op of the first step (te_names_expect) */
} dump_status;

/* Starts dumping with the next step whose start its hook sees (started
 * from another hook at a step's start, that step). NULL with err when the thread cannot
 * start. A caller flushing the session at exit registers its atexit
 * handler after this call (see writer.c). */
dump_session *dump_start(const dump_spec *spec, const dump_run_info *info, char *err, size_t n);
/* Waits until everything queued is on disk. */
void dump_flush(dump_session *d);
/* Flushes, stops the thread, detaches from the engine. A step in progress
 * (stopped inside it) stays an incomplete tmp file, as after a crash. */
void dump_stop(dump_session *d);
dump_status dump_status_get(const dump_session *d);
/* The debugger stopped training, at op `at` (its record; NULL at a stop
 * between ops), on the training thread. The flight recorder first takes
 * the stopped op's tensors (the debugger's hook runs before the session's;
 * the hook then skips that op), then writes what it holds: when=break
 * always, when=nonfinite once a non-finite value came (see writer.c for
 * which steps). Every session then waits until all it has queued is on
 * disk, fsynced under its final name, with run.h5: a quit or a kill -9
 * next loses none of it, and the counts of dump_status_get are the files'.
 * A part of the current step so written is replaced by the whole step
 * when training goes on to its end. d NULL: nothing. */
void dump_stopped(dump_session *d, const te_op_record *at);

/* ---- tdbg-dump (tdbg_dump.c) -------------------------------------------------------
 * The inspector's commands (ls, show, stats, export, verify) with argv as
 * the program gets it; output and messages go to out and err. Returns the
 * exit status: 0, 1 (damage, nothing matched), 2 (trouble). */
int tdbg_dump_main(int argc, char **argv, FILE *out, FILE *err);

/* The spec back as canonical text, defaults included, which parses back
 * to the same spec; a buffer of DUMP_SPEC_TEXT_MAX always holds it. */
#define DUMP_SPEC_TEXT_MAX 16384
void dump_spec_format(const dump_spec *s, char *buf, size_t n);

#endif
