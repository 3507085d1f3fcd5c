/* reduce.c — sum, mean, softmax and log_softmax along an axis.
 *
 * Shapes of sum and mean: reducing axis k removes dim k, or keeps it as 1
 * with keepdim. TE_ALL reduces every dim: the result is [1] (ndim 1), or
 * all ones in x's rank with keepdim. The engine has no 0-dim tensors, so
 * wherever PyTorch returns a scalar (TE_ALL, or the one axis of a 1-D x
 * without keepdim) the result here is [1].
 */
#include "../te_internal.h"

/* axis in [-ndim, ndim) as a dim index, or -1 when out of range. */
static int norm_axis(int axis, int ndim)
{
    if (axis < -ndim || axis >= ndim)
        return -1;
    return axis < 0 ? axis + ndim : axis;
}

static te_tensor *reduction(te_op op, te_loc l, te_tensor *x, int axis, bool keepdim)
{
    te_node *n = te_node_begin(op, l, &x);
    if (!n)
        return NULL;
    char sx[96];
    te_shape_str(x->ndim, x->shape, sx, sizeof sx);
    int64_t shape[TE_MAX_DIMS];
    int nd = 0;
    if (axis == TE_ALL) {
        for (int i = 0; keepdim && i < x->ndim; i++)
            shape[nd++] = 1;
    } else {
        int ax = norm_axis(axis, x->ndim);
        if (ax < 0)
            return te_node_fail(n, TE_ERR_ARG, "axis %d is out of range for x %s (%d dims)", axis,
                                sx, x->ndim);
        for (int i = 0; i < x->ndim; i++)
            if (i != ax)
                shape[nd++] = x->shape[i];
            else if (keepdim)
                shape[nd++] = 1;
        axis = ax;
    }
    if (nd == 0)
        shape[nd++] = 1;
    n->a.axis = axis;
    n->a.keepdim = keepdim;
    te_node_output(n, te_result_dtype(1, n->in), nd, shape);
    return te_node_run(n);
}

te_tensor *te_sum_at(te_loc l, te_tensor *x, int axis, bool keepdim)
{
    return reduction(TE_OP_SUM, l, x, axis, keepdim);
}

te_tensor *te_mean_at(te_loc l, te_tensor *x, int axis, bool keepdim)
{
    return reduction(TE_OP_MEAN, l, x, axis, keepdim);
}

/* Softmax along one axis; the output has x's shape. */
static te_tensor *softmax(te_op op, te_loc l, te_tensor *x, int axis)
{
    te_node *n = te_node_begin(op, l, &x);
    if (!n)
        return NULL;
    char sx[96];
    te_shape_str(x->ndim, x->shape, sx, sizeof sx);
    int ax = norm_axis(axis, x->ndim);
    if (ax < 0)
        return te_node_fail(n, TE_ERR_ARG, "axis %d is out of range for x %s (%d dims)", axis, sx,
                            x->ndim);
    n->a.axis = ax;
    te_node_output(n, te_result_dtype(1, n->in), x->ndim, x->shape);
    return te_node_run(n);
}

te_tensor *te_softmax_at(te_loc l, te_tensor *x, int axis)
{
    return softmax(TE_OP_SOFTMAX, l, x, axis);
}

te_tensor *te_log_softmax_at(te_loc l, te_tensor *x, int axis)
{
    return softmax(TE_OP_LOG_SOFTMAX, l, x, axis);
}
