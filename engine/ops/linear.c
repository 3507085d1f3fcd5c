/* linear.c — matmul and linear (fully connected) op front-ends: checks and
 * output shapes; the arithmetic is in the backend (cpu/cpu_linear.c). */
#include "te_internal.h"

#define SHAPE_BUF 96

/* op(a)[..., M, K] @ op(b)[..., K, N] -> [..., M, N], op() transposing the
 * last two dims when asked (the kernel reads the operand so, no copy). The
 * leading dims broadcast as in numpy: aligned at the end, each pair equal or
 * one of them 1 or absent. NULL with a message on a shape mismatch. */
te_tensor *te_matmul_t_at(te_loc l, te_tensor *a, te_tensor *b, bool trans_a, bool trans_b)
{
    te_node *n = te_node_begin(TE_OP_MATMUL, l, (te_tensor *[]){ a, b });
    if (!n)
        return NULL;

    char sa[SHAPE_BUF], sb[SHAPE_BUF];
    te_shape_str(a->ndim, a->shape, sa, sizeof sa);
    te_shape_str(b->ndim, b->shape, sb, sizeof sb);
    if (a->ndim < 2 || b->ndim < 2)
        return te_node_fail(n, TE_ERR_SHAPE, "a %s and b %s: both must have 2 to %d dims", sa, sb,
                            TE_MAX_DIMS);
    const int64_t M = a->shape[a->ndim - (trans_a ? 1 : 2)], Ka = a->shape[a->ndim - (trans_a ? 2 : 1)];
    const int64_t Kb = b->shape[b->ndim - (trans_b ? 1 : 2)], N = b->shape[b->ndim - (trans_b ? 2 : 1)];
    if (Ka != Kb)
        return te_node_fail(n, TE_ERR_SHAPE, "a %s%s and b %s%s: inner dims %lld != %lld", sa,
                            trans_a ? " (transposed)" : "", sb, trans_b ? " (transposed)" : "",
                            (long long)Ka, (long long)Kb);

    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t shape[TE_MAX_DIMS];
    for (int i = 0; i < nd - 2; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return te_node_fail(n, TE_ERR_SHAPE,
                                "a %s and b %s: batch dims do not broadcast (dim %d of the "
                                "result: %lld vs %lld)",
                                sa, sb, i, (long long)da, (long long)db);
        shape[i] = da == 1 ? db : da;
    }
    shape[nd - 2] = M;
    shape[nd - 1] = N;
    n->a.trans_a = trans_a;
    n->a.trans_b = trans_b;
    te_node_output(n, te_result_dtype(2, n->in), nd, shape);
    return te_node_run(n);
}

te_tensor *te_matmul_at(te_loc l, te_tensor *a, te_tensor *b)
{
    return te_matmul_t_at(l, a, b, false, false);
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
