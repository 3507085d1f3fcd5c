/*
 * watch.c — the deferred NaN watch: stops at the same op and step as the
 * watch that looks at every op, without a host round trip per op.
 *
 * On the GPU, handing each op's outputs to a hook means waiting for the
 * device after every op. When every attached hook only wants to hear of
 * ops whose outputs hold a NaN or an Inf (te_hook_defer: the debugger
 * with nothing but `break nan|inf|nonfinite` armed), a step run through
 * te_graph_run is run "deferred": each op's outputs are checked on the
 * device into a flag per op (the backend's watch_flag, queued, no wait),
 * the op hooks are not called, and the flags are read once at the step's
 * end (watch_take). No flag: the step is done. A flag: the step's state
 * is put back from a snapshot taken at its start (snapshot.c), and the
 * step runs again with every hook called per op, so the debugger stops
 * at the exact op, as it would have the first time. Replays are exact:
 * the same inputs, the same state, kernels that sum in a fixed order.
 *
 * Where it pays: backends whose kernels run asynchronously (the CUDA
 * backend's `async`). TDBG_WATCH_DEFER=1 defers on any backend (the tests
 * prove the stops the same on the CPU that way), =0 never.
 */
#include "te_internal.h"

#include <stdlib.h>
#include <string.h>

static struct {
    int policy;      /* TE_WATCH_AUTO, _ALWAYS, _NEVER; -1: not read yet */
    bool active;     /* this attempt of this step is deferred */
    unsigned kinds;  /* TE_WATCH_NAN | TE_WATCH_INF, what the hooks want */
    int slots;       /* ops checked so far this step */
    const te_backend *be;
    int64_t deferred, replayed;
} w = { .policy = -1 };

void te_watch_policy(te_watch_mode mode) { w.policy = (int)mode; }

static te_watch_mode policy(void)
{
    if (w.policy < 0) {
        const char *v = getenv("TDBG_WATCH_DEFER");
        w.policy = !v || !*v ? TE_WATCH_AUTO : strcmp(v, "0") == 0 ? TE_WATCH_NEVER : TE_WATCH_ALWAYS;
    }
    return (te_watch_mode)w.policy;
}

void te_watch_counts(int64_t *deferred, int64_t *replayed)
{
    if (deferred)
        *deferred = w.deferred;
    if (replayed)
        *replayed = w.replayed;
}

bool te_watch_active(void) { return w.active; }
int te_watch_slots(void) { return w.slots; }
void te_watch_advance(int n) { w.slots += n; }

/* Defer this step? Only with hooks attached, all of them deferrable, on a
 * backend that can flag and where the policy says so. */
static bool begin(void)
{
    const te_watch_mode p = policy();
    const unsigned kinds = te_hooks_defer_kinds();
    const te_backend *be = te_backend_current();
    if (p == TE_WATCH_NEVER || !kinds || !be->watch_flag || !be->watch_take || (p == TE_WATCH_AUTO && !be->async))
        return false;
    w.active = true;
    w.kinds = kinds;
    w.be = be;
    w.slots = 0;
    w.deferred++;
    return true;
}

void te_watch_op(const te_op_record *rec)
{
    /* An op whose non-finite values are intended (an attention mask's
     * -inf) flags nothing: an unintended NaN reaching it was flagged where
     * it was made. A value it made that a later op carries on is flagged
     * there: that step runs again, and the hooks judge it. */
    for (int k = 0; k < rec->n_outputs && !(rec->traits & TE_TRAIT_NONFINITE_OK); k++) {
        const te_tensor *t = rec->outputs[k];
        if (t && te_data(t) && te_dtype_is_float(t->dtype) && t->numel)
            te_backends[t->device]->watch_flag(t, w.kinds, w.slots);
    }
    w.slots++;
}

/* The first flagged op of the attempt, or -1; ends the deferred attempt. */
static int end(void)
{
    w.active = false;
    return w.be->watch_take(w.slots);
}

te_status te_watch_run(te_status (*run)(void *ctx), void *ctx)
{
    if (!begin())
        return run(ctx);
    te_snapshot *snap = te_snapshot_take(false);
    if (!snap) {
        w.active = false;
        return te_error_code();
    }
    const int tensors = te_tape_mark(), nodes = te_tape_node_mark();
    const te_phase phase = te_current_phase();
    te_names_saved *names = te_tape_names_save();
    if (!names) {
        te_snapshot_free(snap);
        w.active = false;
        return run(ctx);
    }
    const te_prof_mark prof = te_prof_mark_take();
    te_status st = run(ctx);
    const int hit = end();
    if ((hit < 0 && st == TE_OK) || st == TE_ERR_REWOUND) { /* a rewind: nothing to run again */
        te_tape_names_free(names);
        te_snapshot_free(snap);
        return st;
    }
    /* A flag, or a failure (an op's error stops a watched run too): the
     * step again from its start with every hook live. */
    te_tape_rollback(tensors, nodes);
    te_tape_names_restore(names);
    te_snapshot_restore(snap);
    te_snapshot_free(snap);
    te_phase_restore(phase);
    te_prof_rewind(&prof);
    w.replayed++;
    te_error_clear();
    return run(ctx);
}
