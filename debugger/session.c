/*
 * session.c — the debugger in the training process: the plugin entry
 * point, the hooks, and the decision to stop.
 *
 * A stop is kept as data (dbg_stop, dbg_last_stop()): report.c prints it,
 * the active front end is shown it, and it stays after training goes on
 * (its pointers into the program do not).
 *
 * Checks run on the training thread after each op. `break nan` (inf,
 * nonfinite) stops only at an op that creates the value: an output is
 * non-finite while every input is finite (for a backward op, every forward
 * tensor it reads too). An op that merely passes a NaN on is not a stop,
 * so the answer is the origin, not the hundreds of ops downstream. Values
 * the op table calls intended (an attention mask's -inf) are no stop, and
 * do not make an op that turns them into a NaN an heir (verdict.c). Graph mode is asked to keep every op's tensors visible while
 * any breakpoint exists (te_observe_add), so both modes stop at the same op.
 */
#include "session.h"

#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

dbg_session dbg;
volatile sig_atomic_t dbg_interrupted;
FILE *dbg_out_stream;

void dbg_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(dbg_out, "error: ");
    vfprintf(dbg_out, fmt, ap);
    fprintf(dbg_out, "\n");
    va_end(ap);
    fflush(dbg_out);
}

void dbg_on_sigint(int sig)
{
    (void)sig;
    dbg_interrupted = 1;
}

/* ---- breakpoints and the engine --------------------------------------- */

static void unmatched(const char *msg, void *user)
{
    (void)user;
    fprintf(dbg_out, "warning: %s\n", msg);
    fflush(dbg_out);
}

/* A `trend` name "OP:outK" (not a parameter's) waits for its op to exist:
 * the engine warns once if no op of the first step is called OP. */
static void expect_op_of(const char *tensor)
{
    const char *colon = strrchr(tensor, ':');
    if (!colon || strncmp(tensor, "param:", 6) == 0 || strncmp(tensor, "grad:", 5) == 0)
        return;
    char label[TE_NAME_MAX + 16], op[TE_NAME_MAX];
    snprintf(label, sizeof label, "trend %s", tensor);
    snprintf(op, sizeof op, "%.*s", (int)(colon - tensor), tensor);
    te_names_expect(label, op, unmatched, NULL);
}

void dbg_breaks_changed(void)
{
    bool any = false; /* a breakpoint that looks at ops (not a step's start, not a batch) */
    for (int i = 0; i < dbg.n_breaks; i++)
        any |= dbg.breaks[i].enabled && dbg.breaks[i].kind != BK_STEP && dbg.breaks[i].kind != BK_DATA;
    dbg_data_checks_changed();
    if (any && !dbg.observing)
        te_observe_add("*");
    else if (!any && dbg.observing)
        te_observe_remove("*");
    dbg.observing = any;
    for (; dbg.n_observed_watch < dbg.n_watch; dbg.n_observed_watch++) {
        te_observe_add(dbg.watch[dbg.n_observed_watch]);
        expect_op_of(dbg.watch[dbg.n_observed_watch]);
    }
}

/* ---- the ops of this step ------------------------------------------------ */

static void remember_op(const te_op_record *r)
{
    if (dbg.n_ops == DBG_MAX_OPS)
        return;
    dbg_op *o = &dbg.ops[dbg.n_ops++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", r->name);
    o->type = r->type;
    o->phase = r->phase;
    o->exec = r->exec_index;
    o->loc = r->loc;
    o->n_in = r->n_inputs < 8 ? r->n_inputs : 8;
    o->n_out = r->n_outputs < 8 ? r->n_outputs : 8;
    for (int i = 0; i < o->n_in; i++) {
        o->in[i] = r->inputs[i];
        o->in_dev[i] = r->inputs[i] ? r->inputs[i]->device : TE_DEV_CPU;
        snprintf(o->in_name[i], TE_NAME_MAX, "%s", r->inputs[i] ? r->inputs[i]->name : "");
    }
    for (int i = 0; i < o->n_out; i++) {
        o->out[i] = r->outputs[i];
        o->out_dev[i] = r->outputs[i] ? r->outputs[i]->device : TE_DEV_CPU;
        snprintf(o->out_name[i], TE_NAME_MAX, "%s", r->outputs[i] ? r->outputs[i]->name : "");
    }
    o->n_reads = r->n_reads < 8 ? r->n_reads : 8;
    for (int i = 0; i < o->n_reads; i++) {
        o->reads[i] = r->reads[i];
        o->read_dev[i] = r->reads[i]->device;
        snprintf(o->read_name[i], TE_NAME_MAX, "%s", r->reads[i]->name);
    }
    if (r->kernel)
        snprintf(o->kernel, sizeof o->kernel, "%s", r->kernel);
    o->dtype = o->n_out && r->outputs[0] ? r->outputs[0]->dtype : TE_F32;
    for (int k = 0; r->round && k < r->n_outputs; k++) {
        o->overflow += r->round[k].overflow;
        o->underflow += r->round[k].underflow;
    }
}

/* `trend` names: their statistics every step. */
static void record_watched(const te_op_record *r)
{
    for (int k = 0; k < r->n_outputs; k++) {
        const te_tensor *t = r->outputs[k];
        if (!t || !t->data || !te_dtype_is_float(t->dtype))
            continue;
        for (int w = 0; w < dbg.n_watch; w++)
            if (strcmp(dbg.watch[w], t->name) == 0) {
                te_stats s;
                te_stats_compute(t, &s);
                dbg_trend_add(t->name, dbg.step, &s);
            }
    }
}

/* The last step's wall time, less the time it spent stopped at the
 * prompt: what the TUI's status bar shows as ms/step. */
static uint64_t step_t0_ns, paused_ns;
static double last_step_ms = -1;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double dbg_last_step_ms(void) { return last_step_ms; }

void dbg_on_step_end(int64_t step, void *user)
{
    (void)user;
    if (step_t0_ns)
        last_step_ms = (double)(now_ns() - step_t0_ns - paused_ns) / 1e6;
    dbg_amp_step_end(step);
    /* The tensors go with the step: keep names and statistics only. */
    dbg_op *t = dbg.last_ops;
    dbg.last_ops = dbg.ops;
    dbg.n_last_ops = dbg.n_ops;
    dbg.ops = t;
    dbg.n_ops = 0;
    for (int i = 0; i < dbg.n_last_ops; i++) {
        memset(dbg.last_ops[i].in, 0, sizeof dbg.last_ops[i].in);
        memset(dbg.last_ops[i].out, 0, sizeof dbg.last_ops[i].out);
        memset(dbg.last_ops[i].reads, 0, sizeof dbg.last_ops[i].reads);
    }
    dbg.in_step = false;
}

/* ---- stops ---------------------------------------------------------------- */

static dbg_stop last_stop;

const dbg_stop *dbg_last_stop(void) { return last_stop.seq ? &last_stop : NULL; }

bool dbg_session_tables(void)
{
    if (!dbg.ops) {
        dbg.ops = calloc(DBG_MAX_OPS, sizeof *dbg.ops);
        dbg.last_ops = calloc(DBG_MAX_OPS, sizeof *dbg.last_ops);
        dbg.trends = calloc(DBG_MAX_TRENDS, sizeof *dbg.trends);
    }
    return dbg.ops && dbg.last_ops && dbg.trends;
}

int dbg_session_hook_add(void)
{
    te_hooks h = { .step_begin = dbg_on_step_begin, .step_end = dbg_on_step_end, .phase_begin = dbg_on_phase,
                   .op_end = dbg_on_op_end, .rewound = dbg_on_rewound, .diverged = dbg_on_diverged,
                   .located = dbg_on_located, .batch = dbg_on_batch, .op_failed = dbg_on_op_failed };
    h.waiting = dbg_on_waiting;
    return dbg.hook = te_hook_add(&h, NULL);
}

void dbg_session_reset(void)
{
    dbg_op *ops = dbg.ops, *last_ops = dbg.last_ops;
    dbg_trend *trends = dbg.trends;
    memset(&dbg, 0, sizeof dbg);
    dbg.ops = ops;
    dbg.last_ops = last_ops;
    dbg.trends = trends;
    dbg.hook = -1;
    dbg_cond_free(last_stop.cond);
    memset(&last_stop, 0, sizeof last_stop);
    step_t0_ns = paused_ns = 0;
    last_step_ms = -1;
    dbg_interrupted = 0;
}

const te_op_record *dbg_stopped_at(void) { return last_stop.active ? last_stop.rec : NULL; }

void dbg_stop_leave(void)
{
    last_stop.active = false;
    last_stop.rec = NULL;
    last_stop.t = NULL;
}

/* The stop as data first; the report, the front end and the commands
 * read it. */
static void stop_fill(const dbg_break *b, const char *reason, const dbg_hit *hit, const te_op_record *rec,
                      void (*fill)(dbg_stop *s))
{
    dbg.mode = RUN_GO;
    dbg.reversing = false;
    dbg.attach_pause = false;
    unsigned seq = last_stop.seq + 1;
    dbg_stop_make(&last_stop, b, reason, hit, rec);
    if (fill)
        fill(&last_stop);
    last_stop.seq = seq;
    last_stop.active = true;
    dbg_dump_stopped();
    dbg_prof_stopped(b != NULL);
    dbg_stop_report(&last_stop);
    if (dbg_frontend_active && dbg_frontend_active->show_stop)
        dbg_frontend_active->show_stop(&last_stop);
    if (b && b->temporary) /* as gdb: a tbreak is gone once it stopped */
        dbg_break_remove(b->id);
    uint64_t t0 = now_ns();
    dbg_command_loop();
    paused_ns += now_ns() - t0;
    dbg_stop_leave();
}

static void stop(const dbg_break *b, const char *reason, const dbg_hit *hit, const te_op_record *rec)
{
    stop_fill(b, reason, hit, rec, NULL);
}

void dbg_stop_at(const char *reason, void (*fill)(dbg_stop *s)) { stop_fill(NULL, reason, NULL, NULL, fill); }

/* ---- a rank of a job ---------------------------------------------------------- */

static volatile sig_atomic_t job_signal; /* SIGTERM came: the stop to make, then its death */

static void on_job_term(int sig)
{
    job_signal = sig;
    dbg_interrupted = 1;
}

static struct sigaction job_term_was; /* the program's own SIGTERM action */
static bool job_term_set;

void dbg_job_signals(void)
{
    struct sigaction sa = { .sa_handler = on_job_term };
    sigemptyset(&sa.sa_mask);
    job_term_set = sigaction(SIGTERM, &sa, &job_term_was) == 0;
}

void dbg_job_signals_off(void)
{
    if (job_term_set)
        sigaction(SIGTERM, &job_term_was, NULL);
    job_term_set = false;
}

static void fill_signal(dbg_stop *s) { s->signal = job_signal; }

/* The pause an interrupt asks for, at rec: Ctrl-C (INTR), another rank's
 * stop, or the job's SIGTERM. After SIGTERM's stop the rank dies of it,
 * its front end told why first. */
static void interrupt_at(const te_op_record *rec, bool waiting)
{
    dbg_interrupted = 0;
    int sig = job_signal;
    if (sig)
        fprintf(dbg_out, "\nReceived SIG%s (mpirun ends the job's ranks when one of them dies)%s.\n",
                sigabbrev_np(sig), waiting ? ", waiting for the other ranks in the collective" : "");
    else if (waiting)
        fprintf(dbg_out, "\nInterrupted in %s (%s), waiting for the other ranks.\n", rec->name, rec->type);
    else
        fprintf(dbg_out, "\nInterrupted.\n");
    stop_fill(NULL, sig ? "signal" : "interrupt", NULL, rec, sig ? fill_signal : NULL);
    if (!sig)
        return;
    char why[64];
    snprintf(why, sizeof why, "the rank ended by SIG%s", sigabbrev_np(sig));
    dbg_detach(why);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    signal(sig, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
}

/* A collective waits for the other ranks (about every millisecond): a
 * pause asked for stops here, so that a rank blocked in an all-reduce
 * still answers commands and a stop elsewhere never hangs the job. The
 * attach's own pause too: the engine hands an attach off inside the wait
 * (engine/dist.c), where this rank may wait for one that took its
 * session at its step's start and paused; the step is then under way,
 * its earlier ops unseen. */
void dbg_on_waiting(const te_op_record *rec, void *user)
{
    (void)user;
    if (dbg_detach_if_gone() || !(dbg_interrupted || dbg.attach_pause))
        return;
    if (dbg.attach_pause && !dbg.in_step) {
        dbg.in_step = true;
        dbg.step = rec->step;
        dbg.phase = rec->phase;
    }
    interrupt_at(rec, true);
}

/* What this step may defer on (engine/watch.c): with only non-finite
 * breakpoints armed, running on, nothing to trace and no terminal UI to
 * keep current, the session needs to hear of an op only when its outputs
 * hold a NaN or an Inf; a step where one does is run again op by op. 0:
 * every op, as always. */
static unsigned defer_kinds(void)
{
    if (dbg.mode != RUN_GO || dbg.n_watch || dbg_interrupted ||
        (dbg_frontend_active && strcmp(dbg_frontend_active->name, "tui") == 0))
        return 0;
    unsigned kinds = 0;
    for (int i = 0; i < dbg.n_breaks; i++) {
        const dbg_break *b = &dbg.breaks[i];
        if (!b->enabled || b->kind == BK_STEP || b->kind == BK_DATA)
            continue;
        if (b->cond || (b->kind != BK_NAN && b->kind != BK_INF && b->kind != BK_NONFINITE))
            return 0;
        kinds |= b->kind == BK_NAN ? TE_WATCH_NAN : b->kind == BK_INF ? TE_WATCH_INF : TE_WATCH_NAN | TE_WATCH_INF;
    }
    return kinds;
}

void dbg_on_step_begin(int64_t step, void *user)
{
    (void)user;
    if (dbg_detach_if_gone())
        return;
    step_t0_ns = now_ns();
    paused_ns = 0;
    dbg_prof_step_begin();
    const char *arrival = dbg_record_step_begin(step); /* a rewind's end may stop here or set the mode */
    te_hook_defer(dbg.hook, defer_kinds());
    dbg.step = step;
    dbg.in_step = true;
    dbg.phase = TE_PHASE_FORWARD;
    dbg.n_ops = 0;
    dbg_verdict_reset();
    dbg_amp_step_begin(step);
    if (arrival) {
        stop(NULL, arrival, NULL, NULL);
        return;
    }
    for (int i = 0; i < dbg.n_breaks; i++) {
        dbg_break *b = &dbg.breaks[i];
        if (b->enabled && b->kind == BK_STEP && b->step == step) {
            b->hits++;
            if (b->ignore > 0) {
                b->ignore--;
                continue;
            }
            stop(b, "step", NULL, NULL);
            return;
        }
    }
    if ((dbg.mode == RUN_NEXT && --dbg.repeat <= 0) || (dbg.mode == RUN_UNTIL && step >= dbg.until_step) ||
        (dbg.mode == RUN_FINISH && step > dbg.finish_step))
        stop(NULL, dbg.mode == RUN_FINISH ? "finish" : "step", NULL, NULL);
}

void dbg_on_phase(int64_t step, te_phase p, void *user)
{
    (void)user;
    dbg.phase = p;
    if (dbg.mode == RUN_FINISH && (step > dbg.finish_step || p != dbg.finish_phase))
        stop(NULL, "finish", NULL, NULL);
}

static bool tensor_bad(const te_tensor *t, bool want_nan, bool want_inf, te_stats *s)
{
    if (!t || !t->data || !te_dtype_is_float(t->dtype))
        return false;
    te_stats_quick(t, s);
    return (want_nan && s->nan > 0) || (want_inf && s->inf > 0);
}

/* An update's output is the whole parameter: check it with the cheapest
 * pass, and count it only when that finds something. */
static bool update_bad(const te_tensor *t, bool want_nan, bool want_inf, te_stats *s)
{
    *s = (te_stats){ .first_bad = -1 };
    if (!t || !t->data || !te_dtype_is_float(t->dtype) || !te_has_nonfinite(t))
        return false;
    return tensor_bad(t, want_nan, want_inf, s);
}

/* Did an op of this step produce t? Parameters, data and constants did
 * not: a NaN coming from them first appears at the op reading them. */
bool dbg_made_this_step(const te_tensor *t)
{
    for (int i = dbg.n_ops - 2; i >= 0; i--) /* the last entry is the op being checked */
        for (int k = 0; k < dbg.ops[i].n_out; k++)
            if (dbg.ops[i].out[k] == t)
                return true;
    return false;
}

/* Did this step make t, a forward tensor a backward op reads? An op's
 * output, or state a forward op saved for its backward: no op lists that
 * as an input or output. Parameters and data are listed as inputs. */
static bool read_made_this_step(const te_tensor *t)
{
    if (dbg_made_this_step(t))
        return true;
    for (int i = dbg.n_ops - 2; i >= 0; i--)
        for (int k = 0; k < dbg.ops[i].n_in; k++)
            if (dbg.ops[i].in[k] == t)
                return false;
    return true;
}

/* Does t hold a NaN or Inf beyond the intended ones? */
static bool unintended(const te_tensor *t)
{
    return (dbg_nonfinite_kinds(t) & ~dbg_verdict_intended(t)) != 0;
}

/* For a nonfinite breakpoint: does this op create such a value? Sets hit
 * to the first bad output and its first bad element. An op the op table
 * marks NONFINITE_OK never does; a value carried on from its output is
 * intended too; an op making another kind out of it (a NaN from a mask's
 * -inf) creates that (dbg_verdict_note). */
static bool creates_nonfinite(const te_op_record *r, dbg_break_kind kind, dbg_hit *hit, dbg_op *o)
{
    bool want_nan = kind != BK_INF, want_inf = kind != BK_NAN;
    te_stats s;
    const bool update = r->phase == TE_PHASE_UPDATE;
    for (int k = 0; k < r->n_outputs; k++) {
        bool bad = update ? update_bad(r->outputs[k], want_nan, want_inf, &s)
                          : tensor_bad(r->outputs[k], want_nan, want_inf, &s);
        if (!update && r->outputs[k] && r->outputs[k]->data && te_dtype_is_float(r->outputs[k]->dtype))
            dbg_trend_add(r->outputs[k]->name, dbg.step, &s); /* the history `trend` shows */
        /* What the op table calls intended (a mask's -inf, or that -inf
         * carried on) is no stop: only the kinds this op made beyond it. */
        const unsigned made = bad ? ((s.nan && want_nan ? DBG_NF_NAN : 0u) | (s.inf && want_inf ? DBG_NF_INF : 0u)) &
                                        ~dbg_verdict_intended(r->outputs[k])
                                  : 0u;
        if (!made) {
            if (k == 0 && !update && r->outputs[0] && r->outputs[0]->data && o) {
                o->out_stats = s;
                o->has_stats = true;
            }
            continue;
        }
        if (o) {
            o->bad = true;
            if (k == 0) {
                o->out_stats = s;
                o->has_stats = true;
            }
        }
        /* Inherited from an op of this step, the origin that stopped already;
         * an input holding only intended values is no such origin. */
        for (int i = 0; i < r->n_inputs; i++)
            if (unintended(r->inputs[i]) && dbg_made_this_step(r->inputs[i]))
                return false;
        for (int i = 0; i < r->n_reads; i++) /* backward: the forward tensors it reads, likewise */
            if (unintended(r->reads[i]) && read_made_this_step(r->reads[i]))
                return false;
        /* The first element of a kind it made (for nonfinite: of either). */
        const te_tensor *t = r->outputs[k];
        const int64_t at = dbg_find_nonfinite(t, s.first_bad, made); /* none is bad before first_bad */
        const bool is_nan = at >= 0 && isnan(te_get(t, at));
        *hit = (dbg_hit){ .tensor = t, .slot = k, .is_output = true, .index = at };
        snprintf(hit->func, sizeof hit->func, "%s", is_nan ? "has_nan" : "has_inf");
        hit->value = is_nan ? (double)s.nan : (double)s.inf;
        return true;
    }
    return false;
}

static const te_tensor *prev_value(const te_tensor *t, void *user)
{
    (void)user;
    dbg_trend *tr = dbg_trend_get(t->name, false);
    return tr && tr->prev && tr->prev_step == dbg.step - 1 ? tr->prev : NULL;
}

#define COPY_CHUNK 16384 /* elements copy_values stages at once */

/* dst = src (same dtype and size, any devices), through a host buffer. */
static bool copy_values(te_tensor *dst, const te_tensor *src)
{
    static uint32_t buf[COPY_CHUNK]; /* the widest dtype is 4 bytes */
    for (int64_t at = 0; at < src->numel; at += COPY_CHUNK) {
        const int64_t n = src->numel - at < COPY_CHUNK ? src->numel - at : COPY_CHUNK;
        if (te_tensor_read(src, at, n, buf) != TE_OK || te_tensor_write(dst, at, n, buf) != TE_OK)
            return false;
    }
    return true;
}

/* Keeps a copy of the outputs of ops whose conditions use rel_change. */
static void keep_previous(const te_op_record *r)
{
    for (int k = 0; k < r->n_outputs; k++) {
        const te_tensor *t = r->outputs[k];
        if (!t || !t->data)
            continue;
        dbg_trend *tr = dbg_trend_get(t->name, true);
        if (!tr)
            return;
        if (tr->prev && (tr->prev->numel != t->numel || tr->prev->dtype != t->dtype)) {
            te_tensor_free(tr->prev);
            tr->prev = NULL;
        }
        if (!tr->prev && !(tr->prev = te_tensor_persistent(t->dtype, t->ndim, t->shape)))
            return;
        if (!copy_values(tr->prev, t))
            return;
        tr->prev_step = dbg.step;
    }
}

static bool op_matches(const dbg_break *b, const te_op_record *r)
{
    switch (b->kind) {
    case BK_OP: return fnmatch(b->what, r->name, 0) == 0;
    case BK_TYPE: return strcmp(b->what, r->type) == 0;
    case BK_NAN: case BK_INF: case BK_NONFINITE: return true;
    case BK_OVERFLOW: case BK_UNDERFLOW: return r->round != NULL;
    case BK_SKIP: return strcmp(r->name, DBG_AMP_OP) == 0;
    case BK_STEP: case BK_DATA: return false;
    }
    return false;
}

/* Are all of the op's inputs (and, backward, the forward tensors it
 * reads) finite? Those not in memory are taken as they are reported. */
static bool inputs_finite(const te_op_record *r)
{
    for (int i = 0; i < r->n_inputs; i++) {
        const te_tensor *t = r->inputs[i];
        if (t && t->data && te_dtype_is_float(t->dtype) && te_has_nonfinite(t))
            return false;
    }
    for (int i = 0; i < r->n_reads; i++) {
        const te_tensor *t = r->reads[i];
        if (t && t->data && te_dtype_is_float(t->dtype) && te_has_nonfinite(t))
            return false;
    }
    return true;
}

/* `break overflow`: an output rounded to +-Inf from finite results while
 * every input is finite (the op saturated the dtype, it did not inherit
 * an Inf). The hit is the output, at its first +-Inf. */
static bool rounds_to_inf(const te_op_record *r, dbg_hit *hit)
{
    for (int k = 0; k < r->n_outputs; k++) {
        if (r->round[k].dtype == TE_F32 || r->round[k].overflow == 0)
            continue;
        if (!inputs_finite(r))
            return false;
        const te_tensor *t = r->outputs[k];
        const int64_t at = t && t->data ? dbg_find_nonfinite(t, 0, DBG_NF_INF) : -1;
        *hit = (dbg_hit){ .tensor = t, .slot = k, .is_output = true, .index = at,
                          .value = (double)r->round[k].overflow };
        snprintf(hit->func, sizeof hit->func, "overflow");
        return t != NULL;
    }
    return false;
}

/* `break underflow [if fraction > X]`: finite non-zero results rounded to
 * zero, more than X of them (any without X). */
static bool rounds_to_zero(const te_op_record *r, double fraction, dbg_hit *hit)
{
    for (int k = 0; k < r->n_outputs; k++) {
        const te_round_stats *st = &r->round[k];
        if (st->dtype == TE_F32 || st->underflow == 0 || !r->outputs[k])
            continue;
        double f = (double)st->underflow / (double)st->nonzero;
        if (f <= fraction)
            continue;
        *hit = (dbg_hit){ .tensor = r->outputs[k], .slot = k, .is_output = true, .index = -1, .value = f };
        snprintf(hit->func, sizeof hit->func, "underflow");
        return true;
    }
    return false;
}

/* `break skip`: the scaler found a non-finite gradient this step. The hit
 * is that parameter's gradient among the unscale's inputs, when listed. */
static bool scaler_skips(const te_op_record *r, dbg_hit *hit)
{
    te_scaler_state st;
    if (!te_scaler_state_get(&st) || !st.found_inf)
        return false;
    char grad[TE_NAME_MAX + 8];
    snprintf(grad, sizeof grad, "grad:%s", st.first_param);
    for (int i = 0; i < r->n_inputs; i++)
        if (r->inputs[i] && strcmp(r->inputs[i]->name, grad) == 0) {
            *hit = (dbg_hit){ .tensor = r->inputs[i], .slot = i, .index = -1, .value = st.scale };
            break;
        }
    snprintf(hit->func, sizeof hit->func, "skip");
    return true;
}

static bool skip_armed(void)
{
    for (int i = 0; i < dbg.n_breaks; i++)
        if (dbg.breaks[i].enabled && dbg.breaks[i].kind == BK_SKIP)
            return true;
    return false;
}

void dbg_on_op_end(const te_op_record *r, void *user)
{
    (void)user;
    if (dbg_detach_if_gone())
        return;
    remember_op(r);
    dbg_verdict_note(r); /* before any check: which of its non-finite values are intended */
    dbg_op *o = &dbg.ops[dbg.n_ops - 1];
    if (dbg.n_watch)
        record_watched(r);
    dbg_amp_op(r, skip_armed());
    for (int i = 0; i < dbg.n_breaks; i++) {
        dbg_break *b = &dbg.breaks[i];
        if (!b->enabled || !op_matches(b, r))
            continue;
        dbg_hit hit = { .index = -1 };
        bool fire;
        if (b->kind == BK_NAN || b->kind == BK_INF || b->kind == BK_NONFINITE)
            fire = creates_nonfinite(r, b->kind, &hit, o);
        else if (b->kind == BK_OVERFLOW)
            fire = rounds_to_inf(r, &hit);
        else if (b->kind == BK_UNDERFLOW)
            fire = rounds_to_zero(r, b->fraction, &hit);
        else if (b->kind == BK_SKIP)
            fire = scaler_skips(r, &hit);
        else
            fire = true;
        if (fire && b->cond) {
            dbg_eval_ctx ctx = { .rec = r, .prev = prev_value };
            dbg_hit ch = { .index = -1 };
            fire = dbg_cond_eval(b->cond, &ctx, &ch);
            if (fire && !hit.tensor)
                hit = ch;
        }
        if (b->cond && dbg_cond_uses_rel_change(b->cond))
            keep_previous(r);
        if (fire && hit.tensor && hit.tensor->data && hit.is_output && hit.slot == 0) {
            te_stats s;
            te_stats_quick(hit.tensor, &s);
            dbg_trend_add(hit.tensor->name, dbg.step, &s);
        }
        if (!fire)
            continue;
        b->hits++;
        if (b->ignore > 0) {
            b->ignore--;
            continue;
        }
        const char *reason = b->kind == BK_NAN ? "nan" : b->kind == BK_INF ? "inf"
                             : b->kind == BK_NONFINITE ? (strcmp(hit.func, "has_inf") == 0 ? "inf" : "nan")
                             : b->kind == BK_OVERFLOW ? "overflow" : b->kind == BK_UNDERFLOW ? "underflow"
                             : b->kind == BK_SKIP ? "skip"
                             : b->cond ? "condition" : "breakpoint";
        stop(b, reason, &hit, r);
        return;
    }
    if (dbg_interrupted) {
        interrupt_at(r, false);
    } else if (dbg.mode == RUN_STEP && --dbg.repeat <= 0) { /* `step N`: the Nth op */
        stop(NULL, dbg.reversing ? "reverse-step" : "step", NULL, r);
    }
}

/* ---- the data, and ops that fail ---------------------------------------- */

/* What the stop being made is about (the fill functions take no argument). */
static const te_batch *stop_batch;
static te_data_finding stop_finding;
static const char *stop_error;

static void fill_data(dbg_stop *s)
{
    const te_batch *b = stop_batch;
    const te_data_finding *f = &stop_finding;
    const te_tensor *t = f->issue == TE_DATA_LABEL ? b->y : b->x;
    s->batch = b;
    s->t = t;
    s->bad_rows = f->bad_rows;
    snprintf(s->tensor, sizeof s->tensor, "%s", t ? t->name : "");
    snprintf(s->data_issue, sizeof s->data_issue, "%s", te_data_issue_name(f->issue));
    snprintf(s->func, sizeof s->func, "%s", te_data_issue_name(f->issue));
    s->value = f->value;
    s->index = f->element;
    if (t && f->element >= 0)
        te_index_str(t, f->element, s->index_text, sizeof s->index_text);
    if (f->row >= 0) {
        s->row = f->row;
        s->sample = b->index[f->row];
        te_batch_source(b, f->row, s->source, sizeof s->source);
    }
}

/* Does b fail bk's checks? The engine checked it against every data
 * breakpoint's at once; this says which one it was. */
static bool data_fails(const dbg_break *bk, const te_batch *b, te_data_finding *f)
{
    const te_tensor *x = b->x, *y = b->y;
    if (!x || x->dtype != TE_F32 || !x->data || x->device != TE_DEV_CPU)
        return false;
    const int32_t *labels = y && y->dtype == TE_I32 && y->data && y->numel == b->rows ? y->data : NULL;
    return te_data_check_rows(&bk->data, x->data, labels, b->rows, b->rows ? x->numel / b->rows : 0,
                              b->dataset ? b->dataset->n_classes : 0, f);
}

void dbg_on_batch(const te_batch *b, void *user)
{
    (void)user;
    if (dbg_detach_if_gone() || !b->checked || b->finding.issue == TE_DATA_OK)
        return;
    for (int i = 0; i < dbg.n_breaks; i++) {
        dbg_break *bk = &dbg.breaks[i];
        te_data_finding f;
        if (!bk->enabled || bk->kind != BK_DATA || !data_fails(bk, b, &f))
            continue;
        bk->hits++;
        if (bk->ignore > 0) {
            bk->ignore--;
            continue;
        }
        stop_batch = b;
        stop_finding = f;
        stop_fill(bk, "data", NULL, NULL, fill_data);
        return;
    }
}

static void fill_error(dbg_stop *s)
{
    /* The report's first line names the op and its call: the message without them. */
    const char *msg = stop_error ? stop_error : "";
    const char *at = s->rec && strncmp(msg, s->rec->name, strlen(s->rec->name)) == 0 ? strstr(msg, ") at ") : NULL;
    const char *rest = at ? strstr(at, ": ") : NULL;
    snprintf(s->error, sizeof s->error, "%s", rest ? rest + 2 : msg);
    dbg_stop_sample(s, s->rec, NULL);
}

void dbg_on_op_failed(const te_op_record *rec, te_status code, const char *message, void *user)
{
    (void)user;
    (void)code;
    if (dbg_detach_if_gone())
        return;
    stop_error = message;
    stop_fill(NULL, "error", NULL, rec, fill_error);
    stop_error = NULL;
}
