/*
 * amp.c — the mixed-precision level, its low dtype, and what they mean for
 * each op (the amp column of TE_OP_LIST; docs/amp.md "Levels").
 *
 * Autocast happens when an op is made (tape.c te_node_begin): an input
 * whose dtype te_amp_input_dtype() changes gets a Cast op of its own before
 * the op, named "<op name>/cast_in<i>". The casts are ordinary ops, so the
 * rounding they do is visible to hooks, breakpoints, dumps and graph mode.
 */
#include "te_internal.h"

#include <stdlib.h>
#include <string.h>

static struct {
    te_amp_level level;
    te_dtype low;
} amp = { TE_AMP_O0, TE_F32 };

static bool is_half(te_dtype dt) { return dt == TE_F16 || dt == TE_BF16; }

/* Gives parameter p the dtype dt, its values rounded once to nearest even
 * (through f32, which holds f16 and bf16 exactly), on p's device. Its
 * gradient is dropped: the next backward makes one of the new dtype. */
static te_status param_to(te_tensor *p, te_dtype dt)
{
    const te_backend *b = te_backend_for(p);
    const size_t bytes = (size_t)p->numel * te_dtype_size(dt);
    /* f32 scratch only from one half dtype to the other */
    const size_t tmp_bytes = p->dtype != TE_F32 && dt != TE_F32 ? (size_t)p->numel * sizeof(float) : 0;
    void *data = te_mem_alloc_on(p->device, bytes);
    float *tmp = tmp_bytes ? te_mem_alloc_on(p->device, tmp_bytes) : NULL;
    if (!data || (tmp_bytes && !tmp)) {
        if (data)
            te_mem_free_on(p->device, data, bytes);
        if (tmp)
            te_mem_free_on(p->device, tmp, tmp_bytes);
        te_set_error(TE_ERR_NOMEM, "amp: out of memory converting %s to %s", p->name, te_dtype_name(dt));
        return TE_ERR_NOMEM;
    }
    if (p->dtype == TE_F32) {
        b->round(te_data(p), data, dt, p->numel, NULL);
    } else if (dt == TE_F32) {
        b->widen(te_data(p), data, p->dtype, p->numel);
    } else {
        b->widen(te_data(p), tmp, p->dtype, p->numel);
        b->round(tmp, data, dt, p->numel, NULL);
        te_mem_free_on(p->device, tmp, tmp_bytes);
    }
    te_mem_free_on(p->device, te_data(p), p->nbytes);
    p->data = data;
    p->dtype = dt;
    p->nbytes = bytes;
    if (p->grad) {
        te_tensor_free(p->grad);
        p->grad = NULL;
        p->grad_valid = false;
    }
    return TE_OK;
}

/* The dtype parameter p should have at level: O2/O3 lower every f32
 * parameter (and any converted before), except at O2 those kept f32
 * (te_amp_keep_f32); O0/O1 bring the converted ones back to f32.
 * Parameters made in a low dtype by the program are its own and stay. */
static te_dtype param_dtype(const te_tensor *p, te_amp_level level, te_dtype low)
{
    const bool converted = p->flags & TE_TENSOR_AMP_LOWERED;
    const bool lower = level == TE_AMP_O3 || (level == TE_AMP_O2 && !(p->flags & TE_TENSOR_AMP_KEEP_F32));
    if (lower && (p->dtype == TE_F32 || converted))
        return low;
    if (!lower && converted)
        return TE_F32;
    return p->dtype;
}

/* Converts p to want, marking it converted when want is low. */
static te_status param_set(te_tensor *p, te_dtype want)
{
    if (want == p->dtype)
        return TE_OK;
    te_status st = param_to(p, want);
    if (st != TE_OK)
        return st;
    p->flags = want == TE_F32 ? p->flags & ~(unsigned)TE_TENSOR_AMP_LOWERED : p->flags | TE_TENSOR_AMP_LOWERED;
    return TE_OK;
}

static te_status convert_params(te_amp_level level, te_dtype low)
{
    te_tensor **ps = te_params();
    for (int i = 0; i < te_param_count(); i++) {
        te_status st = param_set(ps[i], param_dtype(ps[i], level, low));
        if (st != TE_OK)
            return st;
    }
    return TE_OK;
}

/* A batch norm's gamma and beta are O(1) scales and shifts: in bf16 their
 * values near 1 are 2^-8..2^-7 apart, more than an update of lr 1e-3..3e-3,
 * so the forward pass would see most updates of the f32 master only after
 * several steps (docs/amp.md, "Levels"). Known only when the batch norm is
 * made, after te_amp_set: the first batch norm at O2 converts them back
 * (before any optimizer step has used them, so no master copy exists). An
 * op before it in that step that read the same tensor (a gamma shared
 * with another op) would see its data change: not supported. */
te_status te_amp_keep_f32(te_tensor *p)
{
    if (!p || !(p->flags & TE_TENSOR_PARAM))
        return TE_OK;
    p->flags |= TE_TENSOR_AMP_KEEP_F32;
    return param_set(p, param_dtype(p, amp.level, amp.low));
}

te_status te_amp_set(te_amp_level level, te_dtype low)
{
    if ((unsigned)level >= TE_AMP_LEVEL_COUNT) {
        te_set_error(TE_ERR_ARG, "amp: level %d is not one of O0, O1, O2, O3", (int)level);
        return TE_ERR_ARG;
    }
    if (level != TE_AMP_O0 && low != TE_F16 && low != TE_BF16) {
        te_set_error(TE_ERR_ARG, "amp: the low precision must be f16 or bf16, not %s", te_dtype_name(low));
        return TE_ERR_ARG;
    }
    if (te_in_step()) {
        te_set_error(TE_ERR_STATE, "amp: te_amp_set(%s) inside a step: call it between steps",
                     te_amp_level_name(level));
        return TE_ERR_STATE;
    }
    te_status st = convert_params(level, low);
    if (st != TE_OK)
        return st;
    amp.level = level;
    amp.low = level == TE_AMP_O0 ? TE_F32 : low;
    return TE_OK;
}

void te_amp_reset(void)
{
    amp.level = TE_AMP_O0;
    amp.low = TE_F32;
}

te_amp_level te_amp_level_get(void) { return amp.level; }

te_dtype te_amp_dtype(void) { return amp.low; }

const char *te_amp_level_name(te_amp_level level)
{
    static const char *const names[TE_AMP_LEVEL_COUNT] = { "O0", "O1", "O2", "O3" };
    return (unsigned)level < TE_AMP_LEVEL_COUNT ? names[level] : NULL;
}

/* The dtype op computes in at the current level for float inputs, or
 * TE_DTYPE_COUNT when it follows its inputs (no cast). */
static te_dtype compute_dtype(te_amp_class c)
{
    if (amp.level == TE_AMP_O0 || c == TE_AMPC_NONE)
        return TE_DTYPE_COUNT;
    if (amp.level == TE_AMP_O3 || c == TE_AMPC_LOWP)
        return amp.low;
    if (c == TE_AMPC_F32 || c == TE_AMPC_NORM)
        return TE_F32;
    return TE_DTYPE_COUNT; /* FOLLOW */
}

te_dtype te_amp_input_dtype(te_op op, te_dtype dt, bool any_low)
{
    if (!te_dtype_is_float(dt))
        return dt;
    const te_amp_class c = te_op_info_of(op)->amp;
    /* O2: a FOLLOW op on the activations (low) runs low, its f32 inputs cast
     * down; on f32 tensors only (the loss, its scaling, what follows the
     * loss) it stays f32 */
    if (amp.level == TE_AMP_O2 && c == TE_AMPC_FOLLOW)
        return any_low ? amp.low : dt;
    if (amp.level == TE_AMP_O2 && c == TE_AMPC_NORM)
        return dt; /* no casts: the op computes in f32 and rounds to its input's dtype */
    const te_dtype want = compute_dtype(c);
    return want == TE_DTYPE_COUNT ? dt : want;
}

const char *te_amp_op_precision(const char *type)
{
    if (!type)
        return NULL;
    for (int op = 0; op < TE_OP_COUNT; op++) {
        if (strcmp(type, te_op_type_name(op)) != 0 && strcmp(type, te_op_grad_type_name(op)) != 0)
            continue;
        const te_dtype dt = compute_dtype(te_op_info_of(op)->amp);
        if (amp.level == TE_AMP_O0)
            return "f32";
        return dt == TE_DTYPE_COUNT ? "follows" : is_half(dt) ? "low" : "f32";
    }
    return NULL;
}
