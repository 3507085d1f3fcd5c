/* linear.c — matmul and linear (fully connected) op front-ends: checks and
 * output shapes; the arithmetic is in the backend (cpu/cpu_linear.c). */
#include "te_internal.h"

#define SHAPE_BUF 96

/* a [M,K] @ b [K,N] -> [M,N]. NULL with a message on a shape mismatch. */
te_tensor *te_matmul_at(te_loc l, te_tensor *a, te_tensor *b)
{
    te_node *n = te_node_begin(TE_OP_MATMUL, l, (te_tensor *[]){ a, b });
    if (!n)
        return NULL;

    char sa[SHAPE_BUF], sb[SHAPE_BUF];
    te_shape_str(a->ndim, a->shape, sa, sizeof sa);
    te_shape_str(b->ndim, b->shape, sb, sizeof sb);
    if (a->ndim != 2 || b->ndim != 2)
        return te_node_fail(n, TE_ERR_SHAPE, "a %s and b %s: both must be 2-D", sa, sb);
    if (a->shape[1] != b->shape[0])
        return te_node_fail(n, TE_ERR_SHAPE, "a %s and b %s: inner dims %lld != %lld", sa, sb,
                            (long long)a->shape[1], (long long)b->shape[0]);

    te_node_output(n, te_result_dtype(2, n->in), 2, (const int64_t[]){ a->shape[0], b->shape[1] });
    return te_node_run(n);
}

/* x [N,I], w [O,I] (PyTorch's layout), b [O] or NULL -> x w^T + b [N,O]. */
te_tensor *te_linear_at(te_loc l, te_tensor *x, te_tensor *w, te_tensor *b)
{
    te_node *n = te_node_begin(TE_OP_LINEAR, l, (te_tensor *[]){ x, w, b });
    if (!n)
        return NULL;

    char sx[SHAPE_BUF], sw[SHAPE_BUF];
    te_shape_str(x->ndim, x->shape, sx, sizeof sx);
    te_shape_str(w->ndim, w->shape, sw, sizeof sw);
    if (x->ndim != 2 || w->ndim != 2)
        return te_node_fail(n, TE_ERR_SHAPE, "x %s and w %s: both must be 2-D", sx, sw);
    if (x->shape[1] != w->shape[1])
        return te_node_fail(n, TE_ERR_SHAPE, "x %s and w %s: inner dims %lld != %lld", sx, sw,
                            (long long)x->shape[1], (long long)w->shape[1]);
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
        char sbias[SHAPE_BUF];
        te_shape_str(b->ndim, b->shape, sbias, sizeof sbias);
        return te_node_fail(n, TE_ERR_SHAPE, "b %s and w %s: bias must be [%lld]", sbias, sw,
                            (long long)w->shape[0]);
    }

    te_node_output(n, te_result_dtype(3, n->in), 2,
                   (const int64_t[]){ x->shape[0], w->shape[0] });
    return te_node_run(n);
}
