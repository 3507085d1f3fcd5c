/* loss.c — cross entropy and mean squared error, both reduced to a mean of
 * shape [1]. */
#include "../te_internal.h"

/* mean over rows of -log softmax(logits)[label]. logits [N,C] float, labels
 * i32 [N] with values in [0, C); a label out of range fails with TE_ERR_ARG
 * naming the label and its index. */
te_tensor *te_cross_entropy_at(te_loc l, te_tensor *logits, te_tensor *labels)
{
    te_node *n = te_node_begin(TE_OP_CROSS_ENTROPY, l, (te_tensor *[]){ logits, labels });
    if (!n)
        return NULL;
    char sz[96], sy[96];
    te_shape_str(logits->ndim, logits->shape, sz, sizeof sz);
    te_shape_str(labels->ndim, labels->shape, sy, sizeof sy);
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0])
        return te_node_fail(n, TE_ERR_SHAPE,
                            "logits %s and labels %s: expected logits [N,C] and labels [N]", sz,
                            sy);
    /* The kernel checks the labels' range: it sees them on every step, in
     * graph mode too, where this front-end runs only while tracing. */
    te_node_output(n, te_result_dtype(1, n->in), te_shape(1));
    te_node_save(n, 0, TE_F32, te_shape(logits->shape[0])); /* log-sum-exp per row */
    return te_node_run(n);
}

/* mean((pred - target)^2) over all elements; pred and target of one shape. */
te_tensor *te_mse_at(te_loc l, te_tensor *pred, te_tensor *target)
{
    te_node *n = te_node_begin(TE_OP_MSE, l, (te_tensor *[]){ pred, target });
    if (!n)
        return NULL;
    char sp[96], st[96];
    te_shape_str(pred->ndim, pred->shape, sp, sizeof sp);
    te_shape_str(target->ndim, target->shape, st, sizeof st);
    if (!te_same_shape(pred, target))
        return te_node_fail(n, TE_ERR_SHAPE, "pred %s and target %s must have the same shape", sp,
                            st);
    te_node_output(n, te_result_dtype(2, n->in), te_shape(1));
    return te_node_run(n);
}
