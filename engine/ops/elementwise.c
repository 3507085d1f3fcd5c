/* elementwise.c — binary ops with numpy broadcasting, masked fill, scale,
 * activations. */
#include "../te_internal.h"

/* a OP b. Shapes broadcast as in numpy: aligned at the last dim, each pair of
 * dims equal or one of them 1; the output has the larger rank. Fails with
 * TE_ERR_SHAPE when shapes do not fit. */
static te_tensor *binary(te_op op, te_loc l, te_tensor *a, te_tensor *b)
{
    te_node *n = te_node_begin(op, l, (te_tensor *[]){ a, b });
    if (!n)
        return NULL;
    char sa[96], sb[96];
    te_shape_str(a->ndim, a->shape, sa, sizeof sa);
    te_shape_str(b->ndim, b->shape, sb, sizeof sb);

    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t shape[TE_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return te_node_fail(
                n, TE_ERR_SHAPE,
                "a %s and b %s do not broadcast (dim %d of the result: %lld vs %lld)", sa, sb, i,
                (long long)da, (long long)db);
        shape[i] = da == 1 ? db : da;
    }
    te_node_output(n, te_result_dtype(2, n->in), nd, shape);
    return te_node_run(n);
}

/* A float op of one input whose output has the input's shape and dtype. */
static te_tensor *unary(te_op op, te_loc l, te_tensor *x, float scale)
{
    te_node *n = te_node_begin(op, l, &x);
    if (!n)
        return NULL;
    n->a.scale = scale;
    te_node_output(n, te_result_dtype(1, n->in), x->ndim, x->shape);
    return te_node_run(n);
}

te_tensor *te_add_at(te_loc l, te_tensor *a, te_tensor *b) { return binary(TE_OP_ADD, l, a, b); }
te_tensor *te_sub_at(te_loc l, te_tensor *a, te_tensor *b) { return binary(TE_OP_SUB, l, a, b); }
te_tensor *te_mul_at(te_loc l, te_tensor *a, te_tensor *b) { return binary(TE_OP_MUL, l, a, b); }
te_tensor *te_div_at(te_loc l, te_tensor *a, te_tensor *b) { return binary(TE_OP_DIV, l, a, b); }

te_tensor *te_scale_at(te_loc l, te_tensor *x, float s) { return unary(TE_OP_SCALE, l, x, s); }
te_tensor *te_relu_at(te_loc l, te_tensor *x) { return unary(TE_OP_RELU, l, x, 1.0f); }
te_tensor *te_gelu_at(te_loc l, te_tensor *x) { return unary(TE_OP_GELU, l, x, 1.0f); }
te_tensor *te_tanh_at(te_loc l, te_tensor *x) { return unary(TE_OP_TANH, l, x, 1.0f); }
te_tensor *te_sigmoid_at(te_loc l, te_tensor *x) { return unary(TE_OP_SIGMOID, l, x, 1.0f); }
te_tensor *te_exp_at(te_loc l, te_tensor *x) { return unary(TE_OP_EXP, l, x, 1.0f); }
te_tensor *te_log_at(te_loc l, te_tensor *x) { return unary(TE_OP_LOG, l, x, 1.0f); }
te_tensor *te_sqrt_at(te_loc l, te_tensor *x) { return unary(TE_OP_SQRT, l, x, 1.0f); }

/* mask != 0 ? value : x, the mask broadcast to x's shape (the output has x's
 * shape: the mask may not enlarge it). The mask is a constant: one that
 * requires grad is refused, since no gradient would reach it. */
te_tensor *te_masked_fill_at(te_loc l, te_tensor *x, te_tensor *mask, float value)
{
    te_node *n = te_node_begin(TE_OP_MASKED_FILL, l, (te_tensor *[]){ x, mask });
    if (!n)
        return NULL;
    char sx[96], sm[96];
    te_shape_str(x->ndim, x->shape, sx, sizeof sx);
    te_shape_str(mask->ndim, mask->shape, sm, sizeof sm);
    if (mask->requires_grad)
        return te_node_fail(n, TE_ERR_ARG, "mask %s requires grad: a mask is a constant", sm);
    bool fits = mask->ndim <= x->ndim;
    for (int i = 0; fits && i < mask->ndim; i++) {
        int64_t dm = mask->shape[i], dx = x->shape[x->ndim - mask->ndim + i];
        fits = dm == dx || dm == 1;
    }
    if (!fits)
        return te_node_fail(n, TE_ERR_SHAPE, "mask %s does not broadcast to x %s", sm, sx);
    n->a.value = value;
    te_node_output(n, n->in[0]->dtype, x->ndim, x->shape);
    return te_node_run(n);
}
