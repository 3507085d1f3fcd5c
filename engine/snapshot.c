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
 *
 * A whole snapshot (time travel, record.c) is taken between steps and
 * holds what the next step depends on besides: the step counter, the
 * training flag, each live loader's position and the program's host
 * regions. Either kind skips the bytes of a gradient its tensor marks
 * empty (grad_valid false): the next backward overwrites them unread.
 */
#include "te_internal.h"

#include <stdlib.h>
#include <string.h>

/* Each registered tensor with a serial number: a snapshot names a tensor
 * by both, so a tensor freed since, and another made at its address, are
 * told apart. */
static struct {
    te_tensor **t;
    uint64_t *serial;
    int n, cap;
    uint64_t next;
} reg;

void te_persist_track(te_tensor *t)
{
    if (reg.n == reg.cap) {
        int cap = reg.cap ? 2 * reg.cap : 64;
        te_tensor **nt = realloc(reg.t, (size_t)cap * sizeof *nt);
        if (nt)
            reg.t = nt;
        uint64_t *ns = nt ? realloc(reg.serial, (size_t)cap * sizeof *ns) : NULL;
        if (!ns)
            abort(); /* a few pointers: nothing sane to do without them */
        reg.serial = ns;
        reg.cap = cap;
    }
    reg.serial[reg.n] = ++reg.next;
    reg.t[reg.n++] = t;
}

void te_persist_forget(te_tensor *t)
{
    for (int i = reg.n - 1; i >= 0; i--)
        if (reg.t[i] == t) {
            reg.t[i] = reg.t[--reg.n];
            reg.serial[i] = reg.serial[reg.n];
            return;
        }
}

typedef struct {
    te_loader *l;
    int64_t pos;
    int n_skip;              /* its `data skip` replacements (te_loader_skips) */
    int64_t *skip;           /* [2 * n_skip]: from, then to */
} saved_loader;

typedef struct {
    int handle;
    void *ptr;
    size_t bytes;
    void *copy;
} saved_host;

/* What a snapshot keeps of each tensor besides its bytes: enough to free
 * the copy and to find the tensor again without touching a freed one. */
typedef struct {
    uint64_t serial;
    te_device device;
    size_t nbytes;
} saved_tensor;

struct te_snapshot {
    int n;
    te_tensor **t;   /* the tensors saved, as registered then */
    saved_tensor *id;
    void **copy;     /* each one's bytes, on its device (NULL: none, or an empty gradient) */
    bool *grad_valid;
    int exec_index;
    te_scaler_snap scaler;
    te_optim_snap optim;
    size_t bytes;    /* of the copies */
    bool whole;
    int64_t step;
    bool training;
    int n_loaders, n_host;
    saved_loader *loaders;
    saved_host *host;
};

int64_t te_snapshot_step(const te_snapshot *s) { return s->step; }
size_t te_snapshot_bytes(const te_snapshot *s) { return s->bytes; }

void te_snapshot_free(te_snapshot *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        if (s->copy[i])
            te_mem_free_on(s->id[i].device, s->copy[i], s->id[i].nbytes);
    free(s->t);
    free(s->id);
    free(s->copy);
    free(s->grad_valid);
    te_optim_snap_free(&s->optim);
    te_scaler_snap_free(&s->scaler);
    for (int i = 0; i < s->n_host; i++)
        free(s->host[i].copy);
    free(s->host);
    for (int i = 0; i < s->n_loaders; i++)
        free(s->loaders[i].skip);
    free(s->loaders);
    free(s);
}

/* Is t the gradient of a registered tensor that marks it empty? */
static bool empty_grad(const te_tensor *t)
{
    for (int i = 0; i < reg.n; i++)
        if (reg.t[i]->grad == t)
            return !reg.t[i]->grad_valid;
    return false;
}

/* The step boundary's part: counter, training flag, loaders, host regions. */
static bool take_run_state(te_snapshot *s)
{
    s->whole = true;
    s->step = te_step();
    s->training = te_training();
    const int nl = te_record_loader_count(), nh = te_record_host_count();
    s->loaders = calloc((size_t)(nl ? nl : 1), sizeof *s->loaders);
    s->host = calloc((size_t)(nh ? nh : 1), sizeof *s->host);
    if (!s->loaders || !s->host)
        return false;
    for (int i = 0; i < nl; i++) {
        te_loader *l = te_record_loader_at(i);
        saved_loader *sl = &s->loaders[s->n_loaders++];
        *sl = (saved_loader){ l, te_loader_position(l), te_loader_skips(l, NULL, NULL, 0), NULL };
        if (sl->n_skip && !(sl->skip = malloc(2 * (size_t)sl->n_skip * sizeof *sl->skip)))
            return false;
        te_loader_skips(l, sl->skip, sl->skip + sl->n_skip, sl->n_skip);
    }
    for (int i = 0; i < nh; i++) {
        saved_host *h = &s->host[s->n_host];
        te_record_host_at(i, &h->handle, &h->ptr, &h->bytes);
        if (!(h->copy = malloc(h->bytes)))
            return false;
        memcpy(h->copy, h->ptr, h->bytes);
        s->bytes += h->bytes;
        s->n_host++;
    }
    return true;
}

te_snapshot *te_snapshot_take(bool whole)
{
    te_snapshot *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->t = malloc((size_t)(reg.n ? reg.n : 1) * sizeof *s->t);
    s->copy = calloc((size_t)(reg.n ? reg.n : 1), sizeof *s->copy);
    s->grad_valid = malloc((size_t)(reg.n ? reg.n : 1) * sizeof *s->grad_valid);
    s->id = malloc((size_t)(reg.n ? reg.n : 1) * sizeof *s->id);
    if (!s->t || !s->copy || !s->grad_valid || !s->id)
        goto nomem;
    for (int i = 0; i < reg.n; i++) {
        te_tensor *t = reg.t[i];
        s->t[s->n] = t;
        s->id[s->n] = (saved_tensor){ reg.serial[i], t->device, t->nbytes };
        s->grad_valid[s->n] = t->grad_valid;
        if (t->nbytes && !empty_grad(t)) {
            s->copy[s->n] = te_mem_alloc_on(t->device, t->nbytes);
            if (!s->copy[s->n])
                goto nomem;
            te_backend_for(t)->copy(s->copy[s->n], te_data(t), t->nbytes);
            s->bytes += t->nbytes;
        }
        s->n++;
    }
    s->exec_index = te_exec_index();
    te_scaler_snap_take(&s->scaler);
    if ((s->scaler.n_mg && !s->scaler.valid) || te_optim_snap_take(&s->optim) != TE_OK)
        goto nomem;
    if (whole && !take_run_state(s))
        goto nomem;
    return s;
nomem:
    te_snapshot_free(s);
    te_set_error(TE_ERR_NOMEM, "snapshot of the step's state: out of memory");
    return NULL;
}

/* A tensor freed since the snapshot (an optimizer's state dropped by an
 * older snapshot's restore) is skipped: it is no longer registered, or
 * another tensor has its address under another serial. */
static bool registered(const te_tensor *t, uint64_t serial)
{
    for (int i = 0; i < reg.n; i++)
        if (reg.t[i] == t)
            return reg.serial[i] == serial;
    return false;
}

void te_snapshot_restore(const te_snapshot *s)
{
    for (int i = 0; i < s->n; i++) {
        te_tensor *t = s->t[i];
        if (!registered(t, s->id[i].serial))
            continue;
        t->grad_valid = s->grad_valid[i];
        if (s->copy[i])
            te_backend_for(t)->copy(te_data(t), s->copy[i], t->nbytes);
    }
    te_set_exec_index(s->exec_index);
    te_scaler_snap_restore(&s->scaler);
    te_optim_snap_restore(&s->optim);
    if (!s->whole)
        return;
    te_step_set(s->step);
    te_set_training(s->training);
    for (int i = 0; i < s->n_loaders; i++) {
        const saved_loader *sl = &s->loaders[i];
        if (!te_record_loader_alive(sl->l))
            continue;
        te_loader_seek(sl->l, sl->pos);
        te_loader_skips_restore(sl->l, sl->n_skip, sl->skip, sl->skip + sl->n_skip);
    }
    /* A region removed since (or moved: another pointer or size) is left alone. */
    for (int i = 0; i < s->n_host; i++)
        if (te_record_host_alive(s->host[i].handle, s->host[i].ptr, s->host[i].bytes))
            memcpy(s->host[i].ptr, s->host[i].copy, s->host[i].bytes);
}
