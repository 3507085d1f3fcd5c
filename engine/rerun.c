/*
 * rerun.c — an op's forward again, in f32, beside the program: what the op
 * would have given without the low precision. `compare f32` at a stop sets
 * it against the rounded output ("is this op's precision the cause?").
 *
 * The node is run as the shadow path runs it (tape.c: f32 copies in, the
 * f32 kernel), but on copies of everything it may write: its inputs (a
 * batch norm's running statistics are written in place), its outputs and
 * its saved state. The program's tensors are only read, and nothing is
 * rounded: the outputs are the f32 results themselves.
 */
#include "te_internal.h"

#include <string.h>

/* A persistent copy of t on its device: floats as f32 (cast up), i32 as
 * it is. */
static te_tensor *copy_up(const te_tensor *t)
{
    te_dtype dt = te_dtype_is_float(t->dtype) ? TE_F32 : t->dtype;
    te_tensor *c = te_tensor_alloc_on(t->device, dt, t->ndim, t->shape, TE_TENSOR_PERSISTENT);
    if (!c)
        return NULL;
    const te_backend *b = te_backend_for(t);
    if (dt == TE_F32 && t->dtype != TE_F32)
        b->widen(te_data(t), te_data(c), t->dtype, t->numel);
    else if (t->nbytes)
        b->copy(te_data(c), te_data(t), t->nbytes);
    memcpy(c->name, t->name, sizeof c->name);
    return c;
}

/* A persistent tensor shaped as t, on its device, f32 for a float one. */
static te_tensor *like_up(const te_tensor *t)
{
    te_dtype dt = te_dtype_is_float(t->dtype) ? TE_F32 : t->dtype;
    te_tensor *c = te_tensor_alloc_on(t->device, dt, t->ndim, t->shape, TE_TENSOR_PERSISTENT);
    if (c)
        memcpy(c->name, t->name, sizeof c->name);
    return c;
}

static void free_all(te_tensor **t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i]) {
            te_tensor_free(t[i]);
            t[i] = NULL;
        }
}

te_status te_node_rerun_f32(const te_node *n, te_tensor **out)
{
    te_node s = *n;
    te_tensor *in[TE_MAX_IN] = { 0 }, *saved[TE_MAX_SAVED] = { 0 };
    te_status st = TE_OK;
    for (int k = 0; k < n->n_out; k++)
        out[k] = NULL;
    for (int i = 0; i < n->n_in; i++) {
        const te_tensor *t = n->in[i];
        if (!t)
            continue;
        if (!te_data(t)) {
            te_set_error(TE_ERR_STATE, "%s: its input %s is not in memory (graph mode keeps only the tensors "
                         "it is asked to observe)", n->name, t->name);
            st = TE_ERR_STATE;
            goto done;
        }
        int j = 0;
        while (j < i && n->in[j] != t) /* x*x: one copy for both slots */
            j++;
        if (!(in[i] = j < i ? NULL : copy_up(t)))
            goto nomem;
        s.in[i] = j < i ? s.in[j] : in[i];
    }
    for (int k = 0; k < n->n_out; k++)
        if (!(s.out[k] = out[k] = like_up(n->out[k])))
            goto nomem;
    for (int j = 0; j < TE_MAX_SAVED; j++)
        if (n->saved[j] && !(s.saved[j] = saved[j] = like_up(n->saved[j])))
            goto nomem;
    st = te_backend_current()->forward[n->op](&s);
    goto done;
nomem:
    te_set_error(TE_ERR_NOMEM, "%s: no memory to re-run it in f32", n->name);
    st = TE_ERR_NOMEM;
done:
    free_all(in, TE_MAX_IN);
    free_all(saved, TE_MAX_SAVED);
    if (st != TE_OK)
        free_all(out, n->n_out);
    return st;
}

te_status te_rerun_f32(const te_op_record *rec, te_tensor **out, int max_out)
{
    if (!rec || !rec->name) {
        te_set_error(TE_ERR_ARG, "te_rerun_f32: no op record");
        return TE_ERR_ARG;
    }
    if (rec->phase != TE_PHASE_FORWARD) {
        te_set_error(TE_ERR_ARG, "%s (%s) is a %s op: only forward ops are re-run in f32", rec->name, rec->type,
                     te_phase_name(rec->phase));
        return TE_ERR_ARG;
    }
    /* Both modes report a forward op with its node's own outputs, and an
     * output knows the node that made it. */
    const te_tensor *t = rec->n_outputs > 0 ? rec->outputs[0] : NULL;
    const te_node *n = t ? t->node : NULL;
    if (!n || n->out[t->slot] != t || strcmp(n->name, rec->name) != 0) {
        te_set_error(TE_ERR_ARG, "%s (%s): its node is not at hand (not an op of the tape)", rec->name, rec->type);
        return TE_ERR_ARG;
    }
    if (max_out < n->n_out) {
        te_set_error(TE_ERR_ARG, "te_rerun_f32: %s has %d outputs, room for %d", rec->name, n->n_out, max_out);
        return TE_ERR_ARG;
    }
    return te_node_rerun_f32(n, out);
}
