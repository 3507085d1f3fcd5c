/*
 * record.c — time travel: recording a run's state at step boundaries,
 * rewinding to an earlier step and replaying it, bit for bit.
 *
 * Recording takes a whole snapshot (snapshot.c) at te_step_begin of every
 * `every`-th step, and keeps each step's loss (the root of its backward)
 * and a checksum of the parameters after its update. A rewind marks the
 * current step as unwinding (every op returns TE_ERR_REWOUND) and, at the
 * next te_step_begin, restores the nearest snapshot at or before the
 * target; the steps up to the target then run with the hooks and the
 * profiler silenced, and the target's te_step_begin calls `rewound`. A
 * step run again is checked against its record at its end: the first
 * that differs calls `diverged`, and what was recorded after it goes (the
 * run has another history from there).
 *
 * Randomness is the engine's counter-based RNG, keyed by (seed, step, op)
 * and the loaders' positions, so restoring the step counter and the
 * positions restores it. The loop's own state is the program's: it takes
 * part by registering it (te_record_host) or saying it keeps none
 * (te_record_participate).
 *
 * te_record_locate replays a step twice from its start with a checksum of
 * every op's outputs (an observer on every op, the hooks silenced) and
 * compares the two runs, and the recording's per-op checksums when
 * op_sums kept them, to name the first op where they part.
 */
#include "te_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool te_rec_unwinding;
bool te_rec_on;

typedef struct {
    int handle;
    char name[64];
    void *ptr;
    size_t bytes;
} host_region;

typedef struct {
    bool valid;
    double loss;
    uint64_t sum;
    int n_ops;
    uint64_t *ops; /* per op output, in order (op_sums) */
} step_rec;

/* One op output's checksum in a locate run, and what names it. */
typedef struct {
    uint64_t h;
    te_phase phase;
    int exec, output;
    char name[TE_NAME_MAX];
    char type[32];
} op_out;

typedef struct {
    op_out *v;
    int n, cap;
} op_trace;

typedef struct {
    uint64_t *v;
    int n, cap;
} u64_vec;

static struct {
    /* taking part */
    bool participate;
    host_region *host;
    int n_host, cap_host, next_handle;
    te_loader **loaders;
    int n_loaders, cap_loaders;
    /* recording */
    bool on;
    te_record_opts o;   /* o.every 0: the default's interval, stretched */
    int stretch;        /* the default's factor: the interval is TE_RECORD_EVERY * stretch */
    double snap_ms;     /* the last snapshot's wall time */
    double step_min_ms; /* the shortest step since the last multiple of TE_RECORD_EVERY */
    double window_ms;   /* the same for the window before it, which sets the stretch */
    struct timespec step_t0;
    int64_t first;      /* the first step recorded; -1 before it */
    te_snapshot **snap; /* oldest first */
    int n_snap;
    size_t snap_bytes;
    step_rec *steps;    /* steps[s - base] */
    int64_t base, n_steps;
    /* the step running */
    double loss;
    int roots;
    u64_vec ops;
    /* a rewind */
    bool pending, ff;
    int64_t target;
    const te_snapshot *from;
    int prof_saved; /* te_prof_on while silenced; -1 when not */
    /* te_record_locate: 0 none, 1 its first run next, 2 its second */
    int locate;
    bool locate_run;
    te_snapshot *temp; /* the step's start, for its second run */
    op_trace run[2];
    double run_loss;
    uint64_t run_sum;
    bool have_located;
    te_record_located located;
} R = { .first = -1, .prof_saved = -1, .next_handle = 0 };

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* ---- taking part ---------------------------------------------------------- */

int te_record_host(const char *name, void *ptr, size_t bytes)
{
    if (!ptr || !bytes) {
        te_set_error(TE_ERR_ARG, "te_record_host(%s): %s", name ? name : "?", !ptr ? "the pointer is NULL" : "0 bytes");
        return -1;
    }
    if (R.n_host == R.cap_host) {
        int cap = R.cap_host ? 2 * R.cap_host : 8;
        host_region *h = realloc(R.host, (size_t)cap * sizeof *h);
        if (!h) {
            te_set_error(TE_ERR_NOMEM, "te_record_host(%s): out of memory", name ? name : "?");
            return -1;
        }
        R.host = h;
        R.cap_host = cap;
    }
    host_region *h = &R.host[R.n_host++];
    *h = (host_region){ .handle = R.next_handle++, .ptr = ptr, .bytes = bytes };
    snprintf(h->name, sizeof h->name, "%s", name ? name : "");
    return h->handle;
}

void te_record_host_remove(int handle)
{
    for (int i = 0; i < R.n_host; i++)
        if (R.host[i].handle == handle) {
            memmove(&R.host[i], &R.host[i + 1], (size_t)(R.n_host - i - 1) * sizeof *R.host);
            R.n_host--;
            return;
        }
}

void te_record_participate(bool on) { R.participate = on; }
bool te_record_participating(void) { return R.participate || R.n_host > 0; }

int te_record_host_count(void) { return R.n_host; }

void te_record_host_at(int i, int *handle, void **ptr, size_t *bytes)
{
    *handle = R.host[i].handle;
    *ptr = R.host[i].ptr;
    *bytes = R.host[i].bytes;
}

bool te_record_host_alive(int handle, const void *ptr, size_t bytes)
{
    for (int i = 0; i < R.n_host; i++)
        if (R.host[i].handle == handle)
            return R.host[i].ptr == ptr && R.host[i].bytes == bytes;
    return false;
}

te_status te_record_loader_add(te_loader *l)
{
    if (R.n_loaders == R.cap_loaders) {
        int cap = R.cap_loaders ? 2 * R.cap_loaders : 4;
        te_loader **n = realloc(R.loaders, (size_t)cap * sizeof *n);
        if (!n) {
            te_set_error(TE_ERR_NOMEM, "te_loader_new: out of memory");
            return TE_ERR_NOMEM;
        }
        R.loaders = n;
        R.cap_loaders = cap;
    }
    R.loaders[R.n_loaders++] = l;
    return TE_OK;
}

void te_record_loader_remove(te_loader *l)
{
    for (int i = 0; i < R.n_loaders; i++)
        if (R.loaders[i] == l) {
            R.loaders[i] = R.loaders[--R.n_loaders];
            return;
        }
}

int te_record_loader_count(void) { return R.n_loaders; }
te_loader *te_record_loader_at(int i) { return R.loaders[i]; }

bool te_record_loader_alive(const te_loader *l)
{
    for (int i = 0; i < R.n_loaders; i++)
        if (R.loaders[i] == l)
            return true;
    return false;
}

/* ---- checksums -------------------------------------------------------------
 * checksum.h's, on each tensor's own device (the backend's entry: only 8
 * bytes cross to the host), chained over the tensors in order with their
 * dtype and length. */

static uint64_t tensor_sum(uint64_t h, const te_tensor *t)
{
    if (!t || !te_data(t))
        return te_mix64(h ^ 0x6e6f6e65ull); /* "none": absent, or no data */
    h ^= (uint64_t)t->dtype << 56 ^ (uint64_t)t->numel;
    const te_backend *be = te_backend_for(t);
    if (be->checksum)
        return te_mix64(h + be->checksum(te_data(t), t->nbytes));
    void *buf = malloc(t->nbytes ? t->nbytes : 1); /* a backend without the entry (tests' stand-ins) */
    if (!buf || te_tensor_read(t, 0, t->numel, buf) != TE_OK) {
        free(buf);
        return te_mix64(h ^ 0x756e7265ull); /* unreadable: never equal to a read */
    }
    h = te_mix64(h + te_checksum_host(buf, t->nbytes));
    free(buf);
    return h;
}

/* The checksums the optimizer's update took this step (te_update_args.sum),
 * by parameter: reading a parameter again after its update costs a pass
 * over memory (+4% of the MLP's step). Cleared at each step's begin. */
static struct {
    const te_tensor **t;
    uint64_t *sum;
    int n, cap;
} notes;

bool te_record_sums_wanted(void) { return R.on && !R.locate_run && !te_inject_count; }

void te_record_note_sum(const te_tensor *p, uint64_t sum)
{
    te_record_forget_sum(p);
    if (notes.n == notes.cap) {
        const int cap = notes.cap ? 2 * notes.cap : 64;
        const te_tensor **t = realloc(notes.t, (size_t)cap * sizeof *t);
        if (t)
            notes.t = t;
        uint64_t *s = t ? realloc(notes.sum, (size_t)cap * sizeof *s) : NULL;
        if (!s)
            return; /* not noted: the step's end reads the parameter */
        notes.sum = s;
        notes.cap = cap;
    }
    notes.t[notes.n] = p;
    notes.sum[notes.n++] = sum;
}

void te_record_forget_sum(const te_tensor *p)
{
    for (int i = 0; i < notes.n; i++)
        if (notes.t[i] == p) {
            notes.t[i] = notes.t[--notes.n];
            notes.sum[i] = notes.sum[notes.n];
            return;
        }
}

static uint64_t params_sum(void)
{
    te_tensor **p = te_params();
    uint64_t h = 0x7464626772656321ull;
    for (int i = 0; i < te_param_count(); i++) {
        int k = 0;
        while (k < notes.n && notes.t[k] != p[i])
            k++;
        if (k < notes.n) /* tensor_sum's chaining, over the update's checksum */
            h = te_mix64((h ^ ((uint64_t)p[i]->dtype << 56 ^ (uint64_t)p[i]->numel)) + notes.sum[k]);
        else
            h = tensor_sum(h, p[i]);
    }
    return h;
}

static bool same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* ---- the record -------------------------------------------------------- */

static void steps_free(void)
{
    for (int64_t i = 0; i < R.n_steps; i++)
        free(R.steps[i].ops);
    free(R.steps);
    R.steps = NULL;
    R.n_steps = 0;
}

/* Step s's record, the array grown to hold it; NULL before the first
 * recorded step or out of memory. */
static step_rec *rec_at(int64_t s, bool grow)
{
    if (s < R.base)
        return NULL;
    int64_t i = s - R.base;
    if (i < R.n_steps)
        return &R.steps[i];
    if (!grow)
        return NULL;
    int64_t n = R.n_steps ? 2 * R.n_steps : 256;
    while (n <= i)
        n *= 2;
    step_rec *v = realloc(R.steps, (size_t)n * sizeof *v);
    if (!v)
        return NULL;
    memset(v + R.n_steps, 0, (size_t)(n - R.n_steps) * sizeof *v);
    R.steps = v;
    R.n_steps = n;
    return &R.steps[i];
}

static void snap_drop(int i)
{
    R.snap_bytes -= te_snapshot_bytes(R.snap[i]);
    te_snapshot_free(R.snap[i]);
    memmove(&R.snap[i], &R.snap[i + 1], (size_t)(R.n_snap - i - 1) * sizeof *R.snap);
    R.n_snap--;
}

/* Per-op checksums are for locating: none is kept for a step no snapshot
 * can reach any more. */
static void ops_prune(void)
{
    const int64_t oldest = R.n_snap ? te_snapshot_step(R.snap[0]) : INT64_MAX;
    for (int64_t i = 0; i < R.n_steps && R.base + i < oldest; i++) {
        free(R.steps[i].ops);
        R.steps[i].ops = NULL;
        R.steps[i].n_ops = 0;
    }
}

static void snap_take(void)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    te_snapshot *s = te_snapshot_take(true);
    R.snap_ms = ms_since(&t0);
    if (!s) {
        TE_LOG(TE_LOG_ENGINE, TE_LOG_WARN, "warning: time travel: no snapshot of step %lld: %s", (long long)te_step(),
               te_error());
        te_error_clear();
        return;
    }
    if (R.n_snap == R.o.keep + 1) /* cannot happen: the ring drops past keep below */
        snap_drop(0);
    R.snap[R.n_snap++] = s;
    R.snap_bytes += te_snapshot_bytes(s);
    bool dropped = false;
    while (R.n_snap > 1 && (R.n_snap > R.o.keep || R.snap_bytes > R.o.budget_bytes)) {
        snap_drop(0);
        dropped = true;
    }
    if (dropped)
        ops_prune();
}

/* A replay parted at step s: what was recorded after it is of another run. */
static void forget_after(int64_t s)
{
    while (R.n_snap && te_snapshot_step(R.snap[R.n_snap - 1]) > s)
        snap_drop(R.n_snap - 1);
    for (int64_t i = s + 1 - R.base; i >= 0 && i < R.n_steps; i++) {
        free(R.steps[i].ops);
        R.steps[i] = (step_rec){ 0 };
    }
}

/* The hooks and the profiler silenced (the steps before a rewind's target,
 * a locate's runs) and every op observed (op_sums, a locate's runs). */
static void quiet(bool silence, bool observe)
{
    te_hooks_silence(silence, observe);
    if (silence && R.prof_saved < 0) {
        R.prof_saved = te_prof_on;
        te_prof_on = 0;
    } else if (!silence && R.prof_saved >= 0) {
        te_prof_on = R.prof_saved;
        R.prof_saved = -1;
    }
}

static void trace_free(op_trace *t)
{
    free(t->v);
    *t = (op_trace){ 0 };
}

static void locate_cancel(void)
{
    R.locate = 0;
    R.locate_run = false;
    te_snapshot_free(R.temp);
    R.temp = NULL;
    trace_free(&R.run[0]);
    trace_free(&R.run[1]);
}

/* ---- recording ------------------------------------------------------------ */

te_status te_record_start(const te_record_opts *o)
{
    te_record_opts d = { 0 };
    if (!o)
        o = &d;
    if (o->every < 0 || o->keep < 0) {
        te_set_error(TE_ERR_ARG, "te_record_start: %s %d must be >= 0 (0: the default)",
                     o->every < 0 ? "every" : "keep", o->every < 0 ? o->every : o->keep);
        return TE_ERR_ARG;
    }
    te_record_opts f = *o;
    f.keep = f.keep ? f.keep : TE_RECORD_KEEP;
    f.budget_bytes = f.budget_bytes ? f.budget_bytes : TE_RECORD_BUDGET;
    te_snapshot **snap = calloc((size_t)f.keep + 1, sizeof *snap);
    if (!snap) {
        te_set_error(TE_ERR_NOMEM, "te_record_start: out of memory for %d snapshots", f.keep);
        return TE_ERR_NOMEM;
    }
    te_record_stop();
    R.snap = snap;
    R.o = f;
    R.stretch = 1;
    R.snap_ms = R.step_min_ms = R.window_ms = 0;
    R.on = te_rec_on = true;
    R.first = -1;
    return TE_OK;
}

void te_record_stop(void)
{
    locate_cancel();
    while (R.n_snap)
        snap_drop(R.n_snap - 1);
    free(R.snap);
    R.snap = NULL;
    R.snap_bytes = 0;
    steps_free();
    free(R.ops.v);
    R.ops = (u64_vec){ 0 };
    R.pending = R.ff = false;
    R.from = NULL;
    quiet(false, false);
    R.on = te_rec_on = false;
    R.first = -1;
}

bool te_record_active(void) { return R.on; }

void te_record_opts_get(te_record_opts *o)
{
    *o = R.on ? R.o : (te_record_opts){ .keep = TE_RECORD_KEEP, .budget_bytes = TE_RECORD_BUDGET };
}

/* The interval in force: the given one, or the default's stretched. */
static int interval(void) { return R.o.every ? R.o.every : TE_RECORD_EVERY * R.stretch; }

void te_record_pace_get(te_record_pace *p)
{
    *p = (te_record_pace){ .every = R.on ? interval() : TE_RECORD_EVERY,
                           .stretch = R.on && !R.o.every ? R.stretch : 1,
                           .snap_ms = R.on ? R.snap_ms : 0,
                           .step_ms = R.on ? R.window_ms : 0 };
}

/* At a multiple of TE_RECORD_EVERY: the default's stretch for the steps
 * ahead, from the last snapshot's time and the window's shortest step (the
 * shortest, so that a stop at the prompt inside a step does not count). */
static void pace(void)
{
    if (R.step_min_ms > 0)
        R.window_ms = R.step_min_ms;
    R.step_min_ms = 0;
    if (R.o.every || R.snap_ms <= 0 || R.window_ms <= 0)
        return;
    int m = 1;
    while (m < TE_RECORD_STRETCH_MAX && R.snap_ms > TE_RECORD_SNAP_SHARE * TE_RECORD_EVERY * m * R.window_ms)
        m *= 2;
    R.stretch = m;
}

int te_record_list(te_record_entry *out, int max)
{
    for (int i = 0; i < R.n_snap && i < max; i++)
        out[i] = (te_record_entry){ te_snapshot_step(R.snap[i]), te_snapshot_bytes(R.snap[i]) };
    return R.n_snap;
}

/* The first and last recorded steps, into *a and *b; false when none. */
static bool recorded_range(int64_t *a, int64_t *b)
{
    *a = *b = -1;
    for (int64_t i = 0; i < R.n_steps; i++)
        if (R.steps[i].valid) {
            if (*a < 0)
                *a = R.base + i;
            *b = R.base + i;
        }
    return *a >= 0;
}

te_status te_record_step_info(int64_t step, double *loss, uint64_t *checksum)
{
    const step_rec *r = rec_at(step, false);
    if (!r || !r->valid) {
        int64_t a, b;
        if (recorded_range(&a, &b))
            te_set_error(TE_ERR_ARG, "step %lld was not recorded: the recorded steps are %lld to %lld",
                         (long long)step, (long long)a, (long long)b);
        else
            te_set_error(TE_ERR_ARG, "step %lld was not recorded: no step is (%s)", (long long)step,
                         R.on ? "recording starts at the next te_step_begin" : "recording is off");
        return TE_ERR_ARG;
    }
    if (loss)
        *loss = r->loss;
    if (checksum)
        *checksum = r->sum;
    return TE_OK;
}

void te_record_root(const te_tensor *y)
{
    /* te_scaler_scale_loss's product: the loss is its first input (graph
     * mode may not keep the product in memory), else the product over the
     * scale (a power of two: exact). */
    const te_tensor *src = y;
    double scale = 1;
    const char *n = y->node ? y->node->name : "";
    const size_t len = strlen(n), tail = strlen("amp/loss_scale");
    te_scaler_state sc;
    if (len >= tail && strcmp(n + len - tail, "amp/loss_scale") == 0 && te_scaler_state_get(&sc) && sc.scale > 0) {
        const te_tensor *in = y->node->in[0];
        if (in && in->numel == 1 && te_data(in))
            src = in;
        else
            scale = sc.scale;
    }
    float v;
    if (src->numel != 1 || !te_data(src) || te_tensor_read_f32(src, 0, 1, &v) != TE_OK)
        return;
    R.loss += v / scale;
    R.roots++;
}

static bool u64_push(u64_vec *v, uint64_t h)
{
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 256;
        uint64_t *n = realloc(v->v, (size_t)cap * sizeof *n);
        if (!n)
            return false;
        v->v = n;
        v->cap = cap;
    }
    v->v[v->n++] = h;
    return true;
}

static void trace_push(op_trace *t, const te_op_record *rec, int k, uint64_t h)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 256;
        op_out *n = realloc(t->v, (size_t)cap * sizeof *n);
        if (!n)
            return;
        t->v = n;
        t->cap = cap;
    }
    op_out *o = &t->v[t->n++];
    *o = (op_out){ .h = h, .phase = rec->phase, .exec = rec->exec_index, .output = k };
    snprintf(o->name, sizeof o->name, "%s", rec->name ? rec->name : "?");
    snprintf(o->type, sizeof o->type, "%s", rec->type ? rec->type : "?");
}

void te_record_op(const te_op_record *rec)
{
    for (int k = 0; k < rec->n_outputs; k++) {
        const uint64_t h = tensor_sum((uint64_t)rec->exec_index, rec->outputs[k]);
        if (R.locate_run)
            trace_push(&R.run[R.locate - 1], rec, k, h);
        else if (R.on && R.o.op_sums)
            u64_push(&R.ops, h);
    }
}

/* ---- steps ---------------------------------------------------------------- */

void te_record_begin(void)
{
    notes.n = 0;
    if (!R.on)
        return;
    R.loss = 0;
    R.roots = 0;
    R.ops.n = 0;
    bool arrived = false;
    if (R.pending) {
        R.pending = false;
        te_snapshot_restore(R.from);
        /* The restore freed what the run made after it (an optimizer's
         * state made by a later first update): a newer snapshot may name
         * those tensors, so it goes; the replay takes it again. */
        const int64_t from = te_snapshot_step(R.from);
        while (R.n_snap && te_snapshot_step(R.snap[R.n_snap - 1]) > from)
            snap_drop(R.n_snap - 1);
        R.ff = te_step() < R.target;
        arrived = !R.ff;
    } else if (R.ff && te_step() >= R.target) {
        R.ff = false;
        arrived = true;
    }
    const int64_t s = te_step();
    if (R.first < 0)
        R.first = R.base = s;
    const int64_t base = R.o.every ? R.o.every : TE_RECORD_EVERY;
    if ((s - R.first) % base == 0)
        pace();
    if ((s - R.first) % interval() == 0 && (!R.n_snap || s > te_snapshot_step(R.snap[R.n_snap - 1])))
        snap_take();
    clock_gettime(CLOCK_MONOTONIC, &R.step_t0);
    if (arrived && R.locate) {
        if (R.locate == 1 && !(R.temp = te_snapshot_take(true))) {
            TE_LOG(TE_LOG_ENGINE, TE_LOG_WARN, "warning: time travel: locate: %s", te_error());
            te_error_clear();
            locate_cancel();
        } else {
            R.locate_run = true;
            R.run[R.locate - 1].n = 0;
        }
    }
    quiet(R.ff || R.locate_run, R.locate_run || (R.o.op_sums && !R.ff));
    if (arrived && !R.locate_run)
        te_hooks_rewound(s);
}

/* First index where two runs' op outputs differ, or -1. */
static int first_diff(const uint64_t *a, int na, const op_trace *b)
{
    for (int i = 0; i < na || i < b->n; i++)
        if (i >= na || i >= b->n || a[i] != b->v[i].h)
            return i;
    return -1;
}

static int first_diff_runs(const op_trace *a, const op_trace *b)
{
    for (int i = 0; i < a->n || i < b->n; i++)
        if (i >= a->n || i >= b->n || a->v[i].h != b->v[i].h)
            return i;
    return -1;
}

static void name_op(te_record_located *r, const op_trace *a, const op_trace *b, int i)
{
    const op_out *o = i < b->n ? &b->v[i] : &a->v[i];
    r->found = true;
    r->phase = o->phase;
    r->exec_index = o->exec;
    r->output = o->output;
    snprintf(r->op, sizeof r->op, "%s", o->name);
    snprintf(r->type, sizeof r->type, "%s", o->type);
}

/* The second run's end: the two runs and the recording compared. */
static void locate_finish(int64_t s, double loss, uint64_t sum)
{
    te_record_located *r = &R.located;
    *r = (te_record_located){ .step = s };
    const step_rec *rec = rec_at(s, false);
    const bool recorded = rec && rec->valid;
    r->matches_recorded = recorded && same_bits(rec->loss, loss) && rec->sum == sum && same_bits(R.run_loss, loss) &&
                          R.run_sum == sum;
    const int i = first_diff_runs(&R.run[0], &R.run[1]);
    r->replays_agree = i < 0;
    if (i >= 0) {
        name_op(r, &R.run[0], &R.run[1], i);
        snprintf(r->cause, sizeof r->cause,
                 "two replays of step %lld from the same state part at %s (%s, output %d): its kernel is "
                 "nondeterministic, the thread count changed between them, or it reads an input from outside "
                 "the engine",
                 (long long)s, r->op, r->type, r->output);
    } else if (recorded && rec->ops && first_diff(rec->ops, rec->n_ops, &R.run[1]) >= 0) {
        const int j = first_diff(rec->ops, rec->n_ops, &R.run[1]);
        if (j < R.run[1].n)
            name_op(r, &R.run[1], &R.run[1], j);
        snprintf(r->cause, sizeof r->cause,
                 "the replays agree with each other but part from the recording of step %lld at %s (%s, output %d): "
                 "the recorded run computed it otherwise (another thread count or build, an injection or input "
                 "that differs now, host state the loop did not register)",
                 (long long)s, r->found ? r->op : "the end of the step (the recording ran more ops)",
                 r->found ? r->type : "-", r->found ? r->output : -1);
    } else if (!recorded) {
        snprintf(r->cause, sizeof r->cause, "step %lld was not recorded: the replays agree op by op", (long long)s);
    } else if (r->matches_recorded) {
        snprintf(r->cause, sizeof r->cause, "step %lld replays exactly: the same ops, loss and checksum as recorded",
                 (long long)s);
    } else {
        snprintf(r->cause, sizeof r->cause,
                 "the replays of step %lld agree op by op but not with its recording; %s", (long long)s,
                 rec->ops ? "the recording's ops agree too: the state after the step differs outside the ops "
                            "(host state the loop did not register)"
                          : "without per-op checksums recorded (te_record_opts.op_sums) the op cannot be named: "
                            "the run that was recorded differed (another thread count or build, an input read "
                            "outside the engine, host state the loop did not register)");
    }
    R.have_located = true;
    if (recorded && !(same_bits(rec->loss, loss) && rec->sum == sum))
        forget_after(s); /* reported here: the steps after are new */
    locate_cancel();
    te_hooks_located(r);
}

void te_record_end(void)
{
    if (!R.on || R.first < 0) /* started inside this step: from the next */
        return;
    const int64_t s = te_step();
    const double ms = ms_since(&R.step_t0);
    if (R.step_min_ms <= 0 || ms < R.step_min_ms)
        R.step_min_ms = ms;
    const double loss = R.roots ? R.loss : NAN;
    const uint64_t sum = params_sum();
    if (R.locate_run) {
        if (R.locate == 1) { /* once more from the same start */
            R.run_loss = loss;
            R.run_sum = sum;
            R.locate = 2;
            R.locate_run = false;
            R.pending = true;
            R.target = s;
            R.from = R.temp;
        } else {
            locate_finish(s, loss, sum);
        }
        return;
    }
    step_rec *r = rec_at(s, true);
    if (!r)
        return; /* out of memory: this step is not recorded */
    if (r->valid) { /* a replay */
        if (!same_bits(r->loss, loss) || r->sum != sum) {
            forget_after(s);
            te_hooks_diverged(s, r->loss, loss, r->sum, sum);
        }
        return;
    }
    *r = (step_rec){ .valid = true, .loss = loss, .sum = sum };
    if (R.o.op_sums && R.ops.n && (r->ops = malloc((size_t)R.ops.n * sizeof *r->ops))) {
        memcpy(r->ops, R.ops.v, (size_t)R.ops.n * sizeof *r->ops);
        r->n_ops = R.ops.n;
    }
}

/* ---- rewinding ----------------------------------------------------------- */

te_status te_rewound(const char *what)
{
    te_set_error(TE_ERR_REWOUND, "%s: step %lld is being unwound by a rewind to step %lld; go on to the next "
                 "te_step_begin", what, (long long)te_step(), (long long)R.target);
    return TE_ERR_REWOUND;
}

/* The newest snapshot at or before step; NULL with the error set. */
static const te_snapshot *reachable(int64_t step, const char *who)
{
    if (te_dist_size() > 1) { /* its replay's collectives would wait for ranks that do not replay */
        te_set_error(TE_ERR_STATE,
                     "%s %lld: rank %d of a data-parallel job of %d ranks cannot go back alone: the other "
                     "ranks would have to replay with it (docs/engine.md \"Data parallel\")",
                     who, (long long)step, te_dist_rank(), te_dist_size());
        return NULL;
    }
    if (!te_record_participating()) {
        te_set_error(TE_ERR_STATE,
                     "%s %lld: this program does not take part in time travel: the engine cannot put back "
                     "its loop's own state (step counter, schedule, running sums); register that state with "
                     "te_record_host(), or call te_record_participate(true) if the loop keeps none "
                     "(docs/engine.md \"Time travel\")",
                     who, (long long)step);
        return NULL;
    }
    if (!R.on) {
        te_set_error(TE_ERR_STATE,
                     "%s %lld: nothing is recorded: start recording (te_record_start, the debugger's `record`) "
                     "before the steps to go back to",
                     who, (long long)step);
        return NULL;
    }
    if (step < 0 || step > te_step()) {
        te_set_error(TE_ERR_ARG, "%s %lld: step %lld has not run yet (the current step is %lld)", who,
                     (long long)step, (long long)step, (long long)te_step());
        return NULL;
    }
    for (int i = R.n_snap - 1; i >= 0; i--)
        if (te_snapshot_step(R.snap[i]) <= step)
            return R.snap[i];
    if (!R.n_snap)
        te_set_error(TE_ERR_ARG, "%s %lld: no snapshot yet (recording starts at the next te_step_begin)", who,
                     (long long)step);
    else
        te_set_error(TE_ERR_ARG,
                     "%s %lld: no snapshot at or before step %lld; the oldest step it can reach is %lld "
                     "(a snapshot every %d steps, the last %d kept)",
                     who, (long long)step, (long long)step, (long long)te_snapshot_step(R.snap[0]), interval(),
                     R.o.keep);
    return NULL;
}

te_status te_rewind(int64_t step)
{
    const te_snapshot *s = reachable(step, "rewind");
    if (!s)
        return te_error_code();
    locate_cancel();
    R.pending = true;
    R.target = step;
    R.from = s;
    if (te_in_step())
        te_rec_unwinding = true;
    return TE_OK;
}

bool te_rewind_pending(void) { return R.pending; }
bool te_rewind_fast_forward(void) { return R.ff; }

te_status te_record_locate(int64_t step)
{
    const te_snapshot *s = reachable(step, "locate");
    if (!s)
        return te_error_code();
    te_status st = te_rewind(step);
    if (st == TE_OK) {
        R.locate = 1;
        R.have_located = false;
    }
    return st;
}

bool te_record_located_get(te_record_located *r)
{
    if (R.have_located)
        *r = R.located;
    return R.have_located;
}

static bool from_env; /* TDBG_RECORD started it: te_shutdown reports */

void te_record_env(void)
{
    const char *v = getenv("TDBG_RECORD");
    from_env = false;
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
    if (strcmp(v, "1") != 0) {
        TE_LOG(TE_LOG_ENGINE, TE_LOG_WARN,
               "warning: TDBG_RECORD=%s: expected 1 (record at the defaults) or 0; not recording", v);
        return;
    }
    if (te_record_start(NULL) != TE_OK) {
        TE_LOG(TE_LOG_ENGINE, TE_LOG_WARN, "warning: TDBG_RECORD: %s", te_error());
        te_error_clear();
        return;
    }
    from_env = true;
}

/* One line: the steps recorded, the snapshots kept and their bytes. */
static void env_report(void)
{
    int64_t a, b;
    if (!recorded_range(&a, &b))
        a = b = -1;
    const size_t last = R.n_snap ? te_snapshot_bytes(R.snap[R.n_snap - 1]) : 0;
    fprintf(stderr, "record: steps=%lld..%lld snapshots=%d snapshot_bytes=%zu total_bytes=%zu every=%d keep=%d\n",
            (long long)a, (long long)b, R.n_snap, last, R.snap_bytes, interval(), R.o.keep);
}

void te_record_shutdown(void)
{
    if (from_env && R.on)
        env_report();
    from_env = false;
    te_record_stop();
    free(notes.t);
    free(notes.sum);
    notes.t = NULL;
    notes.sum = NULL;
    notes.n = notes.cap = 0;
    free(R.host);
    free(R.loaders);
    R.host = NULL;
    R.loaders = NULL;
    R.n_host = R.cap_host = R.n_loaders = R.cap_loaders = 0;
    R.participate = false;
    R.have_located = false;
    te_rec_unwinding = false;
}
