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

/* Producer then activation: in place in the activation's buffer when the
 * producer's own output is not needed in memory. */
static te_status run_act(const tg_kernel *k)
{
    te_node *n = k->node, *a = k->act;
    te_tensor *mid = n->out[0];
    if (te_data(mid)) {
        te_status st = run_node(k, n, false);
        return st == TE_OK ? te_backend_for(a->out[0])->forward[a->op](a) : st;
    }
    if (n->op == TE_OP_BATCHNORM && a->op == TE_OP_RELU && !k->shadow)
        return tg_bn_relu_forward(n, a); /* one pass: normalise and clamp */
    mid->data = a->out[0]->data;
    te_status st = run_node(k, n, false);
    mid->data = NULL;
    if (st == TE_OK)
        tg_act_inplace(a->op, te_data(a->out[0]), a->out[0]->numel);
    return st;
}

static te_status run_seed(const tg_kernel *k)
{
    te_tensor *y = k->seed_y;
    int acc;
    te_grad_buf(y, &acc);
    for (int64_t i = 0; i < y->numel; i++)
        te_set(y->grad, i, acc ? te_get(y->grad, i) + k->seed_dy[i] : k->seed_dy[i]);
    return TE_OK;
}

/* The fused kernels of the graph passes (tg_ew_run, tg_bn_relu_*,
 * tg_act_inplace, tg_bn_fold_run, tg_attn_*) are host code: on another
 * device they fail, naming the kernel, until that backend has its own. */
static te_status host_fused(const tg_kernel *k)
{
    const te_device d = k->node ? k->node->out[0]->device : te_backend_current()->device;
    if (d == TE_DEV_CPU)
        return TE_OK;
    te_set_error(TE_ERR_DEVICE, "graph mode: %s: this fused kernel runs on the cpu only, its tensors are on %s",
                 k->desc ? k->desc : "a kernel", te_device_name(d));
    return TE_ERR_DEVICE;
}

static bool is_fused(const tg_kernel *k)
{
    switch (k->kind) {
    case TG_K_ACT: return !te_data(k->node->out[0]); /* in place: tg_act_inplace or tg_bn_relu_forward */
    case TG_K_ACT_BWD: case TG_K_EW: case TG_K_BN_FOLD: case TG_K_ATTN: case TG_K_ATTN_BWD: return true;
    default: return false;
    }
}

static te_status run_kernel(const tg_kernel *k, int base)
{
    if (is_fused(k)) {
        te_status st = host_fused(k);
        if (st != TE_OK)
            return st;
    }
    switch (k->kind) {
    case TG_K_FWD: return run_node(k, k->node, false);
    case TG_K_BWD: return run_node(k, k->node, true);
    case TG_K_ACT: return run_act(k);
    case TG_K_ACT_BWD: return tg_bn_relu_backward(k->node, k->act);
    case TG_K_EW: tg_ew_run(k->ew); return TE_OK;
    case TG_K_BN_FOLD: return tg_bn_fold_run((tg_kernel *)k);
    case TG_K_ATTN: return tg_attn_forward(k->attn);
    case TG_K_ATTN_BWD: return tg_attn_backward(k->attn);
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

te_status tg_execute(tg_plan *p, te_tensor *const *inputs, te_tensor **outputs)
{
    for (int v = 0; v < p->n_values; v++) {
        tg_value *val = &p->values[v];
        if (val->kind == TG_EXTERN)
            continue;
        val->t->grad_valid = false;
        if (val->kind == TG_INPUT)
            val->t->data = inputs[val->input]->data;
        if (val->recompute >= 0) /* back to its forward life */
            val->t->data = (char *)p->arena + val->offset;
    }
    int base = te_exec_index();
    for (int i = 0; i < p->n_kernels; i++) {
        const tg_kernel *k = &p->kernels[i];
        te_set_phase(k->phase);
        if (te_hook_count || te_inject_count)
            for (int j = 0; j < k->n_orig; j++)
                te_node_starting(k->orig[j].node, k->orig[j].backward, base + k->orig[j].exec, k->desc);
        te_status st = run_kernel(k, base);
        if (st != TE_OK)
            return st;
        if (te_hook_count || te_inject_count)
            for (int j = 0; j < k->n_orig; j++)
                report(k, &k->orig[j], base);
    }
    te_set_exec_index(base + p->exec_total);
    for (int i = 0; i < p->n_outputs; i++)
        outputs[i] = p->values[p->outputs[i]].t;
    return TE_OK;
}
