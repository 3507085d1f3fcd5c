/* hooks.c — the table of attached hooks and the calls into them. */
#include "te_internal.h"

#define MAX_HOOKS 8

static struct {
    te_hooks h;
    void *user;
    bool used;
    unsigned defer; /* TE_WATCH_* it defers on; 0: every op */
} hooks[MAX_HOOKS];

/* Read on every op: zero means the whole hook path is one untaken branch.
 * It counts the live hooks (none while time travel silences them) and
 * time travel's own observer of every op (record.c). */
int te_hook_count;
static int live;
static bool silenced, observing;

static void recount(void) { te_hook_count = (silenced ? 0 : live) + (observing ? 1 : 0); }

void te_hooks_silence(bool silence, bool observe)
{
    silenced = silence;
    observing = observe;
    recount();
}

int te_hook_add(const te_hooks *h, void *user)
{
    for (int i = 0; i < MAX_HOOKS; i++) {
        if (hooks[i].used)
            continue;
        hooks[i].h = *h;
        hooks[i].user = user;
        hooks[i].used = true;
        hooks[i].defer = 0;
        live++;
        recount();
        return i;
    }
    te_set_error(TE_ERR_STATE, "te_hook_add: all %d hook slots are taken", MAX_HOOKS);
    return -1;
}

void te_hook_remove(int handle)
{
    if (handle < 0 || handle >= MAX_HOOKS || !hooks[handle].used)
        return;
    hooks[handle].used = false;
    live--;
    recount();
}

void te_hook_defer(int handle, unsigned kinds)
{
    if (handle >= 0 && handle < MAX_HOOKS && hooks[handle].used)
        hooks[handle].defer = kinds & (TE_WATCH_NAN | TE_WATCH_INF | TE_HOOK_NO_DATA);
}

unsigned te_hooks_defer_kinds(void)
{
    unsigned kinds = 0;
    if (silenced || observing) /* nothing to stop at, or every op wanted */
        return 0;
    for (int i = 0; i < MAX_HOOKS; i++) {
        if (!hooks[i].used)
            continue;
        if (!hooks[i].defer)
            return 0;
        kinds |= hooks[i].defer & (TE_WATCH_NAN | TE_WATCH_INF);
    }
    return kinds;
}

void te_hooks_step(int64_t step, bool begin)
{
    for (int i = 0; i < MAX_HOOKS && !silenced; i++) {
        if (!hooks[i].used)
            continue;
        void (*fn)(int64_t, void *) = begin ? hooks[i].h.step_begin : hooks[i].h.step_end;
        if (fn)
            fn(step, hooks[i].user);
    }
}

void te_hooks_phase(int64_t step, te_phase p)
{
    if (te_watch_active() || silenced)
        return;
    for (int i = 0; i < MAX_HOOKS; i++)
        if (hooks[i].used && hooks[i].h.phase_begin)
            hooks[i].h.phase_begin(step, p, hooks[i].user);
}

/* Time travel's calls: never silenced (a divergence in a silent step is
 * news all the same). */
void te_hooks_rewound(int64_t step)
{
    for (int i = 0; i < MAX_HOOKS; i++)
        if (hooks[i].used && hooks[i].h.rewound)
            hooks[i].h.rewound(step, hooks[i].user);
}

void te_hooks_diverged(int64_t step, double rec_loss, double loss, uint64_t rec_sum, uint64_t sum)
{
    for (int i = 0; i < MAX_HOOKS; i++)
        if (hooks[i].used && hooks[i].h.diverged)
            hooks[i].h.diverged(step, rec_loss, loss, rec_sum, sum, hooks[i].user);
}

void te_hooks_located(const te_record_located *r)
{
    for (int i = 0; i < MAX_HOOKS; i++)
        if (hooks[i].used && hooks[i].h.located)
            hooks[i].h.located(r, hooks[i].user);
}

/* The data's calls: silenced with the rest (a rewind's silent steps hand
 * out the same batches again). */
void te_hooks_batch(const te_batch *b)
{
    for (int i = 0; i < MAX_HOOKS && !silenced; i++)
        if (hooks[i].used && hooks[i].h.batch)
            hooks[i].h.batch(b, hooks[i].user);
}

void te_hooks_op_failed(const te_op_record *rec, te_status code, const char *message)
{
    for (int i = 0; i < MAX_HOOKS && !silenced; i++)
        if (hooks[i].used && hooks[i].h.op_failed)
            hooks[i].h.op_failed(rec, code, message, hooks[i].user);
}

void te_hooks_waiting(const te_op_record *rec)
{
    for (int i = 0; i < MAX_HOOKS && !silenced; i++)
        if (hooks[i].used && hooks[i].h.waiting)
            hooks[i].h.waiting(rec, hooks[i].user);
}

/* no_data_only: a deferred step's calls, to the hooks that read no data. */
static void hooks_op_end(const te_op_record *rec, bool no_data_only)
{
    if (observing)
        te_record_op(rec);
    for (int i = 0; i < MAX_HOOKS && !silenced; i++)
        if (hooks[i].used && hooks[i].h.op_end && (!no_data_only || hooks[i].defer & TE_HOOK_NO_DATA))
            hooks[i].h.op_end(rec, hooks[i].user);
}

void te_op_begin(const te_op_record *rec)
{
    if (te_prof_on)
        te_prof_op_begin(rec);
    if (te_hook_count && !silenced)
        for (int i = 0; i < MAX_HOOKS; i++)
            if (hooks[i].used && hooks[i].h.op_begin)
                hooks[i].h.op_begin(rec, hooks[i].user);
    if (te_inject_count)
        te_inject_crash(rec);
}

void te_op_done(const te_op_record *rec)
{
    te_op_record altered;
    if (te_prof_on)
        te_prof_op_done(rec);
    te_names_seen(rec);
    if (te_inject_count) {
        /* An injection changes the values after the op: the statistics it
         * computed are of the value before, and its rounding counts are
         * what rounding the injected values did. */
        static _Thread_local te_round_stats round[TE_MAX_IN];
        const int n = rec->n_outputs < TE_MAX_IN ? rec->n_outputs : TE_MAX_IN;
        bool rounded = rec->round != NULL;
        for (int k = 0; k < n; k++)
            round[k] = rec->round ? rec->round[k] : (te_round_stats){ .dtype = TE_F32 };
        if (te_inject_apply(rec, round, &rounded)) {
            altered = *rec;
            altered.out_stats = NULL;
            altered.round = rounded ? round : NULL;
            rec = &altered;
        }
    }
    if (!te_watch_active() && !te_hook_count)
        return;
    /* The profiler counts the hooks' time (the debugger's) to the step. */
    uint64_t t0 = te_prof_on ? te_prof_now() : 0;
    if (te_watch_active()) {
        te_watch_op(rec);
        hooks_op_end(rec, true);
    } else {
        hooks_op_end(rec, false);
    }
    if (te_prof_on)
        te_prof_interval("hooks", t0, te_prof_now());
}
