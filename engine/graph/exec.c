/*
 * exec.c — running a compiled step: kernels in order through the function
 * pointers resolved at compile time, and after each kernel the hook and
 * injection calls for every original op it computed, under the names,
 * types, locations and execution indices the ops have in eager mode.
 */
#include "graph/graph.h"

#include <string.h>

static void report(const tg_kernel *k, const tg_origin *o, int base)
{
    const te_node *n = o->node;
    te_op_record rec = {
        .step = te_step(), .op_id = n->id, .exec_index = base + o->exec, .loc = n->loc, .kernel = k->desc,
        .traits = te_op_traits(n->op), .round = n->rounded ? n->round : NULL,
    };
    if (!o->backward) {
        rec.phase = TE_PHASE_FORWARD;
        rec.name = n->name;
        rec.type = te_op_type_name(n->op);
        rec.inputs = n->in;
        rec.n_inputs = n->n_in;
        rec.outputs = n->out;
        rec.n_outputs = n->n_out;
        rec.inplace = te_node_inplace(n);
        te_op_done(&rec);
        return;
    }
    te_tensor *grads_in[TE_MAX_OUT], *grads_out[TE_MAX_IN], *reads[TE_BWD_READS_MAX];
    for (int j = 0; j < n->n_out; j++)
        grads_in[j] = n->out[j]->grad;
    for (int i = 0; i < n->n_in; i++)
        grads_out[i] = te_needs_grad(n->in[i]) ? n->in[i]->grad : NULL;
    rec.phase = TE_PHASE_BACKWARD;
    rec.name = n->grad_name;
    rec.type = te_op_grad_type_name(n->op);
    rec.inputs = grads_in;
    rec.n_inputs = n->n_out;
    rec.outputs = grads_out;
    rec.n_outputs = n->n_in;
    /* The plan keeps what a backward kernel reads in memory up to that
     * kernel (tg_kernel_reads), so these hold the data it read. */
    rec.reads = reads;
    rec.n_reads = te_node_bwd_reads(n, reads);
    te_op_done(&rec);
}

static te_status run_node(const tg_kernel *k, te_node *n, bool backward)
{
    /* A fresh RNG key each step (dropout: a fresh mask), as in eager mode. */
    if (te_op_info_of(n->op)->rng == TE_RNG_RANDOM)
        n->a.seed = te_dropout_seed(n->name, te_step());
    if (k->shadow)
        return te_node_dispatch(n, backward);
    return k->fn(n);
}

/* The backend of the kernel's tensors: the one whose graph entries run it. */
static const te_backend *kernel_backend(const tg_kernel *k)
{
    if (k->node)
        return te_backends[k->node->device];
    if (k->ew)
        return te_backends[k->ew->out[0]->device];
    if (k->attn)
        return te_backends[k->attn->scores->device];
    return te_backend_current();
}

/* A graph entry the backend lacks: the kernel fails, named. */
static te_status missing(const tg_kernel *k, const te_backend *be, const char *entry)
{
    te_set_error(TE_ERR_DEVICE, "graph mode: %s: the %s backend has no %s kernel",
                 k->desc ? k->desc : tg_kernel_kind_name(k->kind), be->name, entry);
    return TE_ERR_DEVICE;
}

#define GRAPH_ENTRY(k, be, e) ((be)->graph.e ? TE_OK : missing(k, be, #e))

/* Producer then activation: in place in the activation's buffer when the
 * producer's own output is not needed in memory. */
static te_status run_act(const tg_kernel *k)
{
    te_node *n = k->node, *a = k->act;
    te_tensor *mid = n->out[0];
    const te_backend *be = kernel_backend(k);
    if (te_data(mid)) {
        te_status st = run_node(k, n, false);
        return st == TE_OK ? te_backend_for(a->out[0])->forward[a->op](a) : st;
    }
    te_status st;
    if (n->op == TE_OP_BATCHNORM && a->op == TE_OP_RELU && !k->shadow) /* one pass: normalise and clamp */
        return (st = GRAPH_ENTRY(k, be, bn_relu_forward)) == TE_OK ? be->graph.bn_relu_forward(n, a) : st;
    const bool one = n->op == TE_OP_LINEAR && be->graph.linear_act && !k->shadow;
    if (!one && (st = GRAPH_ENTRY(k, be, act_inplace)) != TE_OK)
        return st;
    mid->data = a->out[0]->data;
    st = one ? be->graph.linear_act(n, a->op) : run_node(k, n, false);
    mid->data = NULL;
    if (st == TE_OK && !one)
        st = be->graph.act_inplace(a->op, te_data(a->out[0]), a->out[0]->numel);
    return st;
}

static te_status run_seed(const tg_kernel *k)
{
    te_tensor *y = k->seed_y;
    int acc;
    te_grad_buf(y, &acc);
    for (int64_t i = 0; i < y->numel; i++)
        te_set(y->grad, i, acc ? te_get(y->grad, i) + k->seed_dy[i] : k->seed_dy[i]);
    if (te_rec_on)
        te_record_root(y);
    return TE_OK;
}

/* A fused kernel through its backend's graph entry. */
static te_status run_fused(const tg_kernel *k)
{
    const te_backend *be = kernel_backend(k);
    te_status st;
    switch (k->kind) {
    case TG_K_ACT_BWD:
        return (st = GRAPH_ENTRY(k, be, bn_relu_backward)) == TE_OK ? be->graph.bn_relu_backward(k->node, k->act) : st;
    case TG_K_EW: return (st = GRAPH_ENTRY(k, be, ew_run)) == TE_OK ? be->graph.ew_run(k->ew) : st;
    case TG_K_BN_FOLD:
        return (st = GRAPH_ENTRY(k, be, bn_fold_run)) == TE_OK ? be->graph.bn_fold_run((tg_kernel *)k) : st;
    case TG_K_ATTN: return (st = GRAPH_ENTRY(k, be, attn_forward)) == TE_OK ? be->graph.attn_forward(k->attn) : st;
    case TG_K_ATTN_BWD:
        return (st = GRAPH_ENTRY(k, be, attn_backward)) == TE_OK ? be->graph.attn_backward(k->attn) : st;
    case TG_K_SUM: return (st = GRAPH_ENTRY(k, be, conv_sum)) == TE_OK ? be->graph.conv_sum(k->node, k->act) : st;
    default: return TE_ERR_STATE;
    }
}

te_status tg_kernel_run(const tg_kernel *k, int base)
{
    switch (k->kind) {
    case TG_K_FWD: return run_node(k, k->node, false);
    case TG_K_BWD: return run_node(k, k->node, true);
    case TG_K_ACT: return run_act(k);
    case TG_K_ACT_BWD: case TG_K_EW: case TG_K_BN_FOLD: case TG_K_ATTN: case TG_K_ATTN_BWD: case TG_K_SUM:
        return run_fused(k);
    case TG_K_RECOMPUTE: /* into the output's backward life; the same bits again */
        k->node->out[0]->data = k->redo_data;
        return run_node(k, k->node, false);
    case TG_K_SEED: return run_seed(k);
    case TG_K_OPTIM: /* it reports its updates itself, numbered from here */
        te_set_exec_index(base + k->exec);
        return te_optim_step(k->optim);
    case TG_K_UNSCALE: /* it reports amp/unscale itself, at its place in the order */
        te_set_exec_index(base + k->exec);
        return te_scaler_unscale(k->params, k->n_params);
    case TG_K_CLIP: te_clip_grad_norm(k->params, k->n_params, k->max_norm); return TE_OK;
    case TG_K_ZERO_GRAD: te_zero_grad(); return TE_OK;
    }
    return TE_ERR_STATE;
}

te_status tg_kernel_exec(const tg_plan *p, int i, int base)
{
    const tg_kernel *k = &p->kernels[i];
    if (te_rec_unwinding) /* a hook rewound at the kernel before */
        return te_rewound(k->desc ? k->desc : tg_kernel_kind_name(k->kind));
    te_set_phase(k->phase);
    if (te_prof_observed())
        for (int j = 0; j < k->n_orig; j++)
            te_node_starting(k->orig[j].node, k->orig[j].backward, base + k->orig[j].exec, k->desc);
    te_status st = tg_kernel_run(k, base);
    if (st != TE_OK) {
        if (k->n_orig > 0) /* an op's kernel: the first op it computes names it */
            te_op_failed(k->orig[0].node, k->orig[0].backward, st);
        return st;
    }
    if (te_prof_observed())
        for (int j = 0; j < k->n_orig; j++)
            report(k, &k->orig[j], base);
    return TE_OK;
}

/* Binds the step's inputs: their memory, or (captured plans) a copy in
 * their fixed arena slot, queued on the device like the kernels. */
static te_status bind_inputs(tg_plan *p, te_tensor *const *inputs)
{
    for (int v = 0; v < p->n_values; v++) {
        tg_value *val = &p->values[v];
        if (val->kind != TG_INPUT)
            continue;
        const te_tensor *in = inputs[val->input];
        if (!val->staged) {
            val->t->data = in->data;
            continue;
        }
        if (in->device != p->device) {
            te_set_error(TE_ERR_DEVICE, "graph mode: input %d (%s) is on %s but the step's parameters are on %s",
                         val->input, in->name[0] ? in->name : "unnamed", te_device_name(in->device),
                         te_device_name(p->device));
            return TE_ERR_DEVICE;
        }
        val->t->data = (char *)p->arena + val->offset;
        if (val->t->nbytes)
            te_backends[p->device]->copy(te_data(val->t), te_data(in), val->t->nbytes);
    }
    return TE_OK;
}

te_status tg_execute(tg_plan *p, te_tensor *const *inputs, te_tensor **outputs)
{
    for (int v = 0; v < p->n_values; v++) {
        tg_value *val = &p->values[v];
        if (val->kind == TG_EXTERN)
            continue;
        val->t->grad_valid = false;
        if (val->recompute >= 0) /* back to its forward life */
            val->t->data = (char *)p->arena + val->offset;
    }
    te_status st = bind_inputs(p, inputs);
    if (st != TE_OK)
        return st;
    int base = te_exec_index();
    if (p->cap)
        st = tg_capture_run(p, base);
    for (int i = 0; i < p->n_kernels && st == TE_OK && !p->cap; i++)
        st = tg_kernel_exec(p, i, base);
    if (st != TE_OK)
        return st;
    te_set_exec_index(base + p->exec_total);
    for (int i = 0; i < p->n_outputs; i++)
        outputs[i] = p->values[p->outputs[i]].t;
    return TE_OK;
}
