/*
 * snapshot.c — what one training step changes, saved at its start and put
 * back, so that the step can run again and give the same bits: the
 * deferred watch (watch.c) re-runs a step that hit, op by op, to stop at
 * the exact op.
 *
 * A step writes persistent tensors only: parameters, their gradients
 * (and whether they hold one), optimizer state, batch norm's running
 * statistics, the loss scale. Every persistent tensor with memory is
 * registered here when made and forgotten when freed; a snapshot copies
 * each on its own device (no host round trip), with its grad_valid flag.
 * Host state beside them: the optimizers' step counts, the scaler's state
 * and the step's op counter. Randomness needs nothing: dropout's mask is a
 * function of (seed, step, op), and batches are the step's inputs.
 */
#include "te_internal.h"

#include <stdlib.h>
#include <string.h>

static struct {
    te_tensor **t;
    int n, cap;
} reg;

void te_persist_track(te_tensor *t)
{
    if (reg.n == reg.cap) {
        int cap = reg.cap ? 2 * reg.cap : 64;
        te_tensor **nt = realloc(reg.t, (size_t)cap * sizeof *nt);
        if (!nt)
            abort(); /* a few pointers: nothing sane to do without them */
        reg.t = nt;
        reg.cap = cap;
    }
    reg.t[reg.n++] = t;
}

void te_persist_forget(te_tensor *t)
{
    for (int i = reg.n - 1; i >= 0; i--)
        if (reg.t[i] == t) {
            reg.t[i] = reg.t[--reg.n];
            return;
        }
}

struct te_snapshot {
    int n;
    te_tensor **t;   /* the tensors saved, as registered then */
    void **copy;     /* each one's bytes, on its device */
    bool *grad_valid;
    int exec_index;
    te_scaler_snap scaler;
    te_optim_snap optim;
};

void te_snapshot_free(te_snapshot *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        if (s->copy[i])
            te_mem_free_on(s->t[i]->device, s->copy[i], s->t[i]->nbytes);
    free(s->t);
    free(s->copy);
    free(s->grad_valid);
    te_optim_snap_free(&s->optim);
    te_scaler_snap_free(&s->scaler);
    free(s);
}

te_snapshot *te_snapshot_take(void)
{
    te_snapshot *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->t = malloc((size_t)(reg.n ? reg.n : 1) * sizeof *s->t);
    s->copy = calloc((size_t)(reg.n ? reg.n : 1), sizeof *s->copy);
    s->grad_valid = malloc((size_t)(reg.n ? reg.n : 1) * sizeof *s->grad_valid);
    if (!s->t || !s->copy || !s->grad_valid)
        goto nomem;
    for (int i = 0; i < reg.n; i++) {
        te_tensor *t = reg.t[i];
        s->t[s->n] = t;
        s->grad_valid[s->n] = t->grad_valid;
        if (t->nbytes) {
            s->copy[s->n] = te_mem_alloc_on(t->device, t->nbytes);
            if (!s->copy[s->n])
                goto nomem;
            te_backend_for(t)->copy(s->copy[s->n], te_data(t), t->nbytes);
        }
        s->n++;
    }
    s->exec_index = te_exec_index();
    te_scaler_snap_take(&s->scaler);
    if ((s->scaler.n_mg && !s->scaler.valid) || te_optim_snap_take(&s->optim) != TE_OK)
        goto nomem;
    return s;
nomem:
    te_snapshot_free(s);
    te_set_error(TE_ERR_NOMEM, "snapshot of the step's state: out of memory");
    return NULL;
}

/* A tensor freed since the snapshot (none is, within a step) is skipped:
 * it is no longer registered. */
static bool registered(const te_tensor *t)
{
    for (int i = 0; i < reg.n; i++)
        if (reg.t[i] == t)
            return true;
    return false;
}

void te_snapshot_restore(const te_snapshot *s)
{
    for (int i = 0; i < s->n; i++) {
        te_tensor *t = s->t[i];
        if (!registered(t))
            continue;
        t->grad_valid = s->grad_valid[i];
        if (s->copy[i])
            te_backend_for(t)->copy(te_data(t), s->copy[i], t->nbytes);
    }
    te_set_exec_index(s->exec_index);
    te_scaler_snap_restore(&s->scaler);
    te_optim_snap_restore(&s->optim);
}
