/*
 * prof.c — the profiler's recording: the spec, start and stop, and the
 * ring of the last `keep` steps that te_op_begin/te_op_done, the step and
 * phase changes, the loader, the hooks and the graph compiler feed.
 * Recording runs on the thread that drives the steps; only
 * te_profile_note_wait is called from others (an atomic add).
 */
#include "prof_internal.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int te_prof_on;
prof_state te_prof;
static uint64_t pending_dump_ns; /* te_profile_note_wait("dump"), any thread */

uint64_t te_prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int32_t thread_id(void)
{
    static _Thread_local int32_t tid;
    if (!tid)
        tid = (int32_t)syscall(SYS_gettid);
    return tid;
}

/* ---- the spec ---------------------------------------------------------- */

static te_status spec_fail(const char *fmt, const char *a, int an, const char *b, int bn)
{
    te_set_error(TE_ERR_ARG, fmt, an, a, bn, b);
    return TE_ERR_ARG;
}

static bool parse_i64(const char *s, const char *end, int64_t *v)
{
    if (s == end || *s < '0' || *s > '9')
        return false;
    errno = 0;
    char *e;
    long long x = strtoll(s, &e, 10);
    if (e != end || errno)
        return false;
    *v = x;
    return true;
}

te_status te_profile_parse(const char *spec, te_profile_opts *o)
{
    if (!spec || !o) {
        te_set_error(TE_ERR_ARG, "te_profile_parse: %s is NULL", !spec ? "spec" : "opts");
        return TE_ERR_ARG;
    }
    *o = (te_profile_opts){ .last = -1, .keep = TE_PROF_KEEP_DEFAULT, .when = TE_PROF_ALWAYS };
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ';');
        if (!end)
            end = p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        int n = (int)(end - p);
        if (n == 0) {
            p = *end ? end + 1 : end;
            continue;
        }
        if (!eq)
            return spec_fail("profile spec: '%.*s%.*s' is not key=value "
                             "(keys: file, steps, ops, keep, when)", p, n, "", 0);
        int kn = (int)(eq - p), vn = (int)(end - eq - 1);
        const char *v = eq + 1;
#define KEY(k) (kn == (int)strlen(k) && strncmp(p, k, (size_t)kn) == 0)
        if (KEY("file")) {
            if (vn == 0 || vn >= (int)sizeof o->file)
                return spec_fail("profile spec: file=%.*s: %.*s", v, vn,
                                 vn ? "the path is too long" : "the path is empty", -1);
            memcpy(o->file, v, (size_t)vn);
            o->file[vn] = 0;
        } else if (KEY("steps")) {
            const char *dash = memchr(v, '-', (size_t)vn);
            int64_t a, b = -1;
            bool ok = dash ? parse_i64(v, dash, &a) && (dash + 1 == end || parse_i64(dash + 1, end, &b))
                           : parse_i64(v, end, &a);
            if (ok && !dash)
                b = a;
            if (!ok)
                return spec_fail("profile spec: steps=%.*s: %.*s", v, vn,
                                 "expected N, A-B or A- (steps count from 0)", -1);
            if (b >= 0 && b < a)
                return spec_fail("profile spec: steps=%.*s: %.*s", v, vn, "the range ends before it starts", -1);
            o->first = a;
            o->last = b;
        } else if (KEY("ops")) {
            if (vn == 0 || vn >= (int)sizeof o->ops)
                return spec_fail("profile spec: ops=%.*s: %.*s", v, vn,
                                 vn ? "the glob is too long" : "the glob is empty", -1);
            memcpy(o->ops, v, (size_t)vn);
            o->ops[vn] = 0;
        } else if (KEY("keep")) {
            int64_t k;
            if (!parse_i64(v, end, &k) || k < 1 || k > TE_PROF_KEEP_MAX)
                return spec_fail("profile spec: keep=%.*s: %.*s", v, vn, "expected a step count from 1 to 1000", -1);
            o->keep = (int)k;
        } else if (KEY("when")) {
            if (vn == 6 && strncmp(v, "always", 6) == 0)
                o->when = TE_PROF_ALWAYS;
            else if (vn == 5 && strncmp(v, "break", 5) == 0)
                o->when = TE_PROF_BREAK;
            else
                return spec_fail("profile spec: when=%.*s: %.*s", v, vn, "expected always or break", -1);
        } else {
            return spec_fail("profile spec: unknown key '%.*s'%.*s", p, kn,
                             " (keys: file, steps, ops, keep, when)", -1);
        }
#undef KEY
        p = *end ? end + 1 : end;
    }
    return TE_OK;
}

/* ---- start, stop, save -------------------------------------------------- */

static void ring_free(void)
{
    if (te_prof.ring)
        for (int i = 0; i < te_prof.o.keep; i++) {
            free(te_prof.ring[i].ev);
            free(te_prof.ring[i].pool);
        }
    free(te_prof.ring);
    te_prof = (prof_state){ .open_phase = -1, .from = -1 };
}

te_status te_profile_start(const te_profile_opts *o)
{
    te_profile_opts d = { .last = -1, .keep = TE_PROF_KEEP_DEFAULT };
    if (!o)
        o = &d;
    if (o->keep < 1 || o->keep > TE_PROF_KEEP_MAX) {
        te_set_error(TE_ERR_ARG, "te_profile_start: keep=%d: expected a step count from 1 to %d", o->keep,
                     TE_PROF_KEEP_MAX);
        return TE_ERR_ARG;
    }
    te_prof_on = 0;
    ring_free();
    te_prof.o = *o;
    if (!(te_prof.ring = calloc((size_t)o->keep, sizeof *te_prof.ring))) {
        te_set_error(TE_ERR_NOMEM, "te_profile_start: out of memory for a ring of %d steps", o->keep);
        return TE_ERR_NOMEM;
    }
    __atomic_store_n(&pending_dump_ns, 0, __ATOMIC_RELAXED);
    te_prof_on = 1;
    if (te_in_step() && te_step() >= o->first && (o->last < 0 || te_step() <= o->last))
        te_prof_step(true); /* started mid-step: record the rest of it */
    return TE_OK;
}

bool te_profile_active(void) { return te_prof_on != 0; }

/* P, then P-1.json, P-2.json... for the captures that follow. */
static void capture_name(char *buf, size_t n, const char *file, int capture)
{
    const char *dot = strrchr(file, '.');
    const char *slash = strrchr(file, '/');
    if (capture == 0)
        snprintf(buf, n, "%s", file);
    else if (dot && (!slash || dot > slash))
        snprintf(buf, n, "%.*s-%d%s", (int)(dot - file), file, capture, dot);
    else
        snprintf(buf, n, "%s-%d", file, capture);
}

te_status te_profile_save(const char *file)
{
    if (!te_prof.ring) {
        te_set_error(TE_ERR_STATE, "te_profile_save: the profiler has not run (te_profile_start)");
        return TE_ERR_STATE;
    }
    char name[sizeof te_prof.o.file + 16];
    if (!file) {
        if (!te_prof.o.file[0]) {
            te_set_error(TE_ERR_STATE, "te_profile_save: no file given and the spec names none (file=)");
            return TE_ERR_STATE;
        }
        capture_name(name, sizeof name, te_prof.o.file, te_prof.captures);
        file = name;
    }
    te_status st = te_prof_write_json(&te_prof, file);
    if (st == TE_OK && file == name)
        te_prof.captures++;
    if (st == TE_OK)
        snprintf(te_prof.last_file, sizeof te_prof.last_file, "%s", file);
    return st;
}

void te_profile_info_get(te_profile_info *i)
{
    *i = (te_profile_info){ .started = te_prof.ring != NULL, .recording = te_prof_on != 0, .o = te_prof.o,
                            .from = te_prof.from, .first = -1, .last = -1, .captures = te_prof.captures };
    snprintf(i->last_file, sizeof i->last_file, "%s", te_prof.last_file);
    if (!te_prof.ring)
        return;
    const prof_step *steps[TE_PROF_KEEP_MAX];
    const int n = te_prof_steps_in_order(&te_prof, steps);
    if (n) {
        i->first = steps[0]->step;
        i->last = steps[n - 1]->step;
        i->partial = steps[n - 1] == te_prof.cur;
    }
}

te_status te_profile_stop(void)
{
    if (!te_prof_on)
        return TE_OK;
    te_prof_on = 0;
    if (te_prof.cur)
        te_prof.cur->done = false; /* a step cut short is not written */
    te_prof.cur = NULL;
    if (te_prof.o.when == TE_PROF_ALWAYS && te_prof.o.file[0] && te_prof.recorded > 0)
        return te_profile_save(NULL);
    return TE_OK;
}

void te_prof_step_drop(void)
{
    if (te_prof.cur)
        te_prof.cur->done = false;
    te_prof.cur = NULL;
}

void te_profile_note_wait(const char *what, int64_t ns)
{
    if (te_prof_on && what && strcmp(what, "dump") == 0 && ns > 0)
        __atomic_add_fetch(&pending_dump_ns, (uint64_t)ns, __ATOMIC_RELAXED);
}

/* ---- recording ---------------------------------------------------------- */

/* Room for one more event; NULL (the event is dropped) when out of memory. */
/* ---- the device clock --------------------------------------------------- */

static const prof_clock *clock_override;
static prof_clock step_clock; /* the clock of the step being recorded; mark NULL: host */

void te_prof_clock_set(const prof_clock *c) { clock_override = c; }

static void clock_choose(void)
{
    const te_backend *b = te_backend_current();
    if (clock_override)
        step_clock = *clock_override;
    else if (b->timer_mark && b->timer_ms && b->timer_reset)
        step_clock = (prof_clock){ b->timer_mark, b->timer_ms, b->timer_reset };
    else
        step_clock = (prof_clock){ 0 };
}

/* Moves the step's ops onto the device's track, their times from its
 * clock: t0 + the device time from the step's first mark. An op whose
 * marks cannot be read keeps its host time. */
static void clock_resolve(prof_step *s)
{
    if (s->mark0 < 0)
        return;
    for (int i = 0; i < s->n; i++) {
        prof_ev *e = &s->ev[i];
        if (e->kind != PROF_OP || e->m0 < 0 || e->m1 < 0)
            continue;
        double a = step_clock.ms(s->mark0, e->m0), b = step_clock.ms(s->mark0, e->m1);
        if (a < 0 || b < a)
            continue;
        e->host_ns = e->t1 - e->t0;
        e->t0 = s->t0 + (uint64_t)llround(a * 1e6);
        e->t1 = s->t0 + (uint64_t)llround(b * 1e6);
        e->tid = PROF_DEVICE_TID;
    }
}

static prof_ev *push(prof_step *s, int kind)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        prof_ev *e = realloc(s->ev, (size_t)cap * sizeof *e);
        if (!e)
            return NULL;
        s->ev = e;
        s->cap = cap;
    }
    prof_ev *e = &s->ev[s->n++];
    *e = (prof_ev){ .kind = (uint8_t)kind, .name = PROF_NONE, .type = PROF_NONE, .kernel = PROF_NONE,
                    .tid = thread_id(), .m0 = -1, .m1 = -1, .coll_seq = -1 };
    return e;
}

static uint32_t intern(prof_step *s, const char *str)
{
    if (!str)
        return PROF_NONE;
    size_t n = strlen(str) + 1;
    if (s->pool_n + n > s->pool_cap) {
        size_t cap = s->pool_cap ? s->pool_cap : 4096;
        while (cap < s->pool_n + n)
            cap *= 2;
        char *p = realloc(s->pool, cap);
        if (!p)
            return PROF_NONE;
        s->pool = p;
        s->pool_cap = cap;
    }
    memcpy(s->pool + s->pool_n, str, n);
    s->pool_n += n;
    return (uint32_t)(s->pool_n - n);
}

static void open_phase(prof_step *s, int phase, uint64_t t)
{
    prof_ev *e = push(s, PROF_PHASE);
    te_prof.open_phase = e ? s->n - 1 : -1;
    if (e) {
        e->t0 = e->t1 = t;
        e->phase = (uint8_t)phase;
    }
}

static void close_phase(prof_step *s, uint64_t t)
{
    if (te_prof.open_phase >= 0)
        s->ev[te_prof.open_phase].t1 = t;
    te_prof.open_phase = -1;
}

/* Where the op's time starts: its te_op_begin, or for the second and later
 * ops of a fused graph kernel (begun together, reported one by one after
 * it), the previous report's end, so the kernel's ops tile its time. */
static _Thread_local uint64_t op_t0, last_done;
static _Thread_local bool op_open;
static _Thread_local int op_m0, last_m1; /* the same on the device clock, or -1 */

/* A step or phase boundary: an op reported without a te_op_begin (the
 * optimizer's batched updates) starts there, not in the phase before. */
static void op_mark(uint64_t t)
{
    last_done = t;
    op_open = false;
    last_m1 = te_prof.cur && te_prof.cur->mark0 >= 0 ? step_clock.mark() : -1;
}

void te_prof_step(bool begin)
{
    uint64_t t = te_prof_now();
    if (begin) {
        int64_t step = te_step();
        te_prof.cur = NULL;
        if (step < te_prof.o.first || (te_prof.o.last >= 0 && step > te_prof.o.last)) {
            te_prof.data_t0 = te_prof.data_t1 = 0;
            return;
        }
        prof_step *s = &te_prof.ring[te_prof.recorded % te_prof.o.keep];
        if (te_prof.from < 0)
            te_prof.from = step;
        s->step = step;
        s->t0 = te_prof.data_t1 ? te_prof.data_t0 : t;
        s->tid = thread_id();
        s->done = false;
        s->n = 0;
        s->pool_n = 0;
        s->hooks_ns = s->compile_ns = s->dump_ns = s->arena_bytes = 0;
        clock_choose();
        if (step_clock.mark)
            step_clock.reset();
        s->mark0 = step_clock.mark ? step_clock.mark() : -1;
        /* The wait for this step's batch came before it: the phase "data"
         * runs from it to here, with the batch's making after the wait, so
         * that the phases tile the step. */
        s->loader_ns = te_prof.data_t1 ? t - te_prof.data_t0 : 0;
        if (te_prof.data_t1) {
            prof_ev *e = push(s, PROF_DATA);
            if (e) {
                e->t0 = te_prof.data_t0;
                e->t1 = t;
            }
        }
        te_prof.data_t0 = te_prof.data_t1 = 0;
        te_prof.cur = s;
        op_mark(t);
        open_phase(s, te_current_phase(), t);
        return;
    }
    prof_step *s = te_prof.cur;
    if (!s)
        return;
    close_phase(s, t);
    s->t1 = t;
    clock_resolve(s);
    s->dump_ns = __atomic_exchange_n(&pending_dump_ns, 0, __ATOMIC_RELAXED);
    s->done = true;
    te_prof.cur = NULL;
    te_prof.recorded++;
    if (te_prof.o.last >= 0 && s->step >= te_prof.o.last) {
        te_prof_on = 0; /* the range is recorded: the capture is complete */
        if (te_prof.o.when == TE_PROF_ALWAYS && te_prof.o.file[0])
            te_profile_save(NULL);
    }
}

te_prof_mark te_prof_mark_take(void)
{
    const prof_step *s = te_prof_on ? te_prof.cur : NULL;
    return s ? (te_prof_mark){ s->n, te_prof.open_phase, te_prof_now(), true } : (te_prof_mark){ 0 };
}

void te_prof_rewind(const te_prof_mark *m)
{
    prof_step *s = te_prof.cur;
    if (!m->valid || !s || s->n < m->n)
        return;
    uint64_t t = te_prof_now();
    s->n = m->n; /* the attempt's events, phases included: the step goes on from the mark */
    te_prof.open_phase = m->open_phase;
    prof_ev *e = push(s, PROF_REPLAY);
    if (e) {
        e->t0 = m->t;
        e->t1 = t;
        e->phase = (uint8_t)te_current_phase();
    }
    op_mark(t);
}

void te_prof_arena(size_t bytes)
{
    if (te_prof.cur && bytes > te_prof.cur->arena_bytes)
        te_prof.cur->arena_bytes = bytes;
}

void te_prof_phase(te_phase p)
{
    prof_step *s = te_prof.cur;
    if (!s)
        return;
    uint64_t t = te_prof_now();
    close_phase(s, t);
    op_mark(t);
    open_phase(s, p, t);
}

void te_prof_interval(const char *what, uint64_t t0, uint64_t t1)
{
    prof_step *s = te_prof.cur;
    prof_ev *ph = s && te_prof.open_phase >= 0 ? &s->ev[te_prof.open_phase] : NULL;
    if (strcmp(what, "hooks") == 0) {
        if (s)
            s->hooks_ns += t1 - t0;
        if (ph)
            ph->hooks_ns += t1 - t0;
        if (!op_open) /* an op reported without te_op_begin starts after them */
            last_done = t1;
        return;
    }
    bool data = strcmp(what, "data") == 0;
    if (!s) {
        if (data) { /* before the step: it opens the next one */
            te_prof.data_t0 = te_prof.data_t1 ? te_prof.data_t0 : t0;
            te_prof.data_t1 = t1;
        }
        return;
    }
    if (data) {
        s->loader_ns += t1 - t0;
        if (ph)
            ph->loader_ns += t1 - t0;
    } else {
        s->compile_ns += t1 - t0;
    }
    prof_ev *e = push(s, data ? PROF_WAIT : PROF_COMPILE);
    if (e) {
        e->t0 = t0;
        e->t1 = t1;
        e->phase = (uint8_t)te_current_phase();
    }
}


void te_prof_op_begin(const te_op_record *rec)
{
    (void)rec;
    if (!op_open) {
        op_t0 = te_prof_now();
        op_open = true;
        op_m0 = te_prof.cur && te_prof.cur->mark0 >= 0 ? step_clock.mark() : -1;
    }
}

void te_prof_op_done(const te_op_record *rec)
{
    uint64_t t = te_prof_now();
    uint64_t t0 = op_open ? op_t0 : last_done ? last_done : t;
    prof_step *s = te_prof.cur;
    int m1 = s && s->mark0 >= 0 ? step_clock.mark() : -1;
    int m0 = op_open ? op_m0 : last_m1 >= 0 ? last_m1 : m1;
    op_open = false;
    last_done = t;
    last_m1 = m1;
    if (!s || (te_prof.o.ops[0] && fnmatch(te_prof.o.ops, rec->name ? rec->name : "", 0) != 0))
        return;
    prof_ev *e = push(s, PROF_OP);
    if (!e)
        return;
    e->t0 = t0;
    e->t1 = t;
    e->m0 = m0;
    e->m1 = m1;
    e->phase = (uint8_t)rec->phase;
    e->name = intern(s, rec->name);
    e->type = intern(s, rec->type);
    e->kernel = intern(s, rec->kernel);
    if (rec->coll) {
        e->coll_seq = rec->coll->seq;
        e->coll_rank = rec->coll->rank;
        e->coll_ranks = rec->coll->ranks;
    }
    const te_tensor *out = NULL;
    for (int k = 0; k < rec->n_outputs && !out; k++)
        out = rec->outputs[k];
    te_device dev = out ? out->device : te_backend_device();
    if (out) {
        e->dtype = (uint8_t)out->dtype;
        e->ndim = (uint8_t)out->ndim;
        memcpy(e->shape, out->shape, (size_t)out->ndim * sizeof *e->shape);
    }
    e->device = (uint8_t)dev;
    e->flops = te_prof_flops(rec);
    e->bytes = te_prof_bytes(rec);
    te_mem_stats m = te_mem_stats_of(dev);
    e->live = m.current;
    e->peak = m.peak;
}

/* ---- the last step, for a live view ------------------------------------- */

static int by_name(const void *a, const void *b, void *s)
{
    const prof_step *st = s;
    const prof_ev *x = *(const prof_ev *const *)a, *y = *(const prof_ev *const *)b;
    int c = strcmp(prof_str(st, x->name) ? prof_str(st, x->name) : "", prof_str(st, y->name) ? prof_str(st, y->name) : "");
    return c ? c : (x->phase > y->phase) - (x->phase < y->phase);
}

static int by_ms(const void *a, const void *b)
{
    const te_profile_op *x = a, *y = b;
    return (x->ms < y->ms) - (x->ms > y->ms);
}

te_status te_profile_last(te_profile_step *out, te_profile_op *ops, int max)
{
    const prof_step *s = NULL;
    for (int64_t i = te_prof.recorded - 1; te_prof.ring && i >= 0 && i >= te_prof.recorded - te_prof.o.keep; i--)
        if (te_prof.ring[i % te_prof.o.keep].done) {
            s = &te_prof.ring[i % te_prof.o.keep];
            break;
        }
    if (!s || !out) {
        te_set_error(TE_ERR_STATE, "te_profile_last: %s", !out ? "no step to fill" : "no step has finished since te_profile_start");
        return TE_ERR_STATE;
    }
    *out = (te_profile_step){ .step = s->step, .ms = (double)(s->t1 - s->t0) / 1e6,
                              .data_ms = (double)s->loader_ns / 1e6, .hooks_ms = (double)s->hooks_ns / 1e6 };
    const prof_ev **op = malloc((size_t)(s->n ? s->n : 1) * sizeof *op);
    if (!op) {
        te_set_error(TE_ERR_NOMEM, "te_profile_last: out of memory for %d events", s->n);
        return TE_ERR_NOMEM;
    }
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        const prof_ev *e = &s->ev[i];
        if (e->kind == PROF_OP)
            op[n++] = e;
        else if (e->kind == PROF_PHASE && e->phase < TE_PHASE_COUNT)
            out->phase_ms[e->phase] += (double)(e->t1 - e->t0) / 1e6;
    }
    qsort_r(op, (size_t)n, sizeof *op, by_name, (void *)s);
    te_profile_op *all = calloc((size_t)(n ? n : 1), sizeof *all);
    if (!all) {
        free(op);
        te_set_error(TE_ERR_NOMEM, "te_profile_last: out of memory for %d ops", n);
        return TE_ERR_NOMEM;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || by_name(&op[i - 1], &op[i], (void *)s) != 0) {
            te_profile_op *o = &all[m++];
            snprintf(o->name, sizeof o->name, "%s", prof_str(s, op[i]->name) ? prof_str(s, op[i]->name) : "");
            snprintf(o->type, sizeof o->type, "%s", prof_str(s, op[i]->type) ? prof_str(s, op[i]->type) : "");
            o->phase = (te_phase)op[i]->phase;
        }
        all[m - 1].calls++;
        all[m - 1].ms += (double)(op[i]->t1 - op[i]->t0) / 1e6;
        all[m - 1].flops += op[i]->flops;
    }
    qsort(all, (size_t)m, sizeof *all, by_ms);
    out->n_ops = m;
    if (ops && max > 0)
        memcpy(ops, all, (size_t)(m < max ? m : max) * sizeof *ops);
    free(all);
    free(op);
    return TE_OK;
}
