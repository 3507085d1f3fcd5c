/* norm.c — batch norm and layer norm op front-ends: argument and shape
 * checks and the recorded mode; the arithmetic is in the backend
 * (cpu/cpu_norm.c). */
#include "te_internal.h"

#include <math.h>

#define SHAPE_BUF 96

/* Checks an optional per-feature vector t (gamma, beta, running stats) is
 * [len]; false after failing n with a message naming it and x. */
static bool check_vec(te_node *n, const char *what, const te_tensor *t, int64_t len, const char *sx)
{
    if (!t)
        return true;
    if (t->ndim == 1 && t->shape[0] == len)
        return true;
    char st[SHAPE_BUF];
    te_node_fail(n, TE_ERR_SHAPE, "%s %s and x %s: must be [%lld]", what,
                 te_shape_str(t->ndim, t->shape, st, sizeof st), sx, (long long)len);
    return false;
}

static bool bad_eps(float eps) { return !(eps > 0.0f) || !isfinite(eps); }

/* x [N,C] or [N,C,H,W], per-channel gamma, beta (NULL: scale 1, shift 0)
 * and running stats (persistent f32 [C], or both NULL: training only). The
 * mode is taken from te_training() now, so a later mode switch does not
 * change how this node's backward runs. */
te_tensor *te_batchnorm_at(te_loc l, te_tensor *x, te_tensor *gamma, te_tensor *beta,
                           te_tensor *running_mean, te_tensor *running_var, float momentum,
                           float eps)
{
    /* before the autocast of te_node_begin: at O2 gamma and beta stay f32 */
    if (te_amp_keep_f32(gamma) != TE_OK || te_amp_keep_f32(beta) != TE_OK)
        return NULL;
    te_node *n = te_node_begin(TE_OP_BATCHNORM, l,
                               (te_tensor *[]){ x, gamma, beta, running_mean, running_var });
    if (!n)
        return NULL;

    char sx[SHAPE_BUF];
    te_shape_str(x->ndim, x->shape, sx, sizeof sx);
    if (x->ndim != 2 && x->ndim != 4)
        return te_node_fail(n, TE_ERR_SHAPE, "x %s: [N,C] or [N,C,H,W] input needed", sx);
    const int64_t C = x->shape[1];
    if (!check_vec(n, "gamma", gamma, C, sx) || !check_vec(n, "beta", beta, C, sx))
        return NULL;
    if (!running_mean != !running_var)
        return te_node_fail(n, TE_ERR_ARG, "x %s: %s given without %s", sx,
                            running_mean ? "running_mean" : "running_var",
                            running_mean ? "running_var" : "running_mean");
    const te_tensor *rs[2] = { running_mean, running_var };
    const char *rname[2] = { "running_mean", "running_var" };
    for (int i = 0; i < 2 && rs[i]; i++) {
        if (!check_vec(n, rname[i], rs[i], C, sx))
            return NULL;
        /* a tape tensor would be freed at the step's end, losing the stats */
        if (!(rs[i]->flags & TE_TENSOR_PERSISTENT))
            return te_node_fail(n, TE_ERR_ARG,
                                "%s is a tape tensor: it must be persistent "
                                "(te_tensor_persistent) to carry across steps",
                                rname[i]);
    }
    if (!(momentum >= 0.0f && momentum <= 1.0f))
        return te_node_fail(n, TE_ERR_ARG, "x %s: momentum %g not in [0, 1]", sx, (double)momentum);
    if (bad_eps(eps))
        return te_node_fail(n, TE_ERR_ARG, "x %s: eps %g must be > 0", sx, (double)eps);

    n->a.training = te_training();
    n->a.momentum = momentum;
    n->a.eps = eps;
    const int64_t per_channel = x->numel / (C ? C : 1);
    if (n->a.training && per_channel < 2)
        return te_node_fail(n, TE_ERR_SHAPE,
                            "x %s: training needs more than 1 value per channel (got %lld)", sx,
                            (long long)per_channel);
    if (!n->a.training && !running_mean)
        return te_node_fail(n, TE_ERR_ARG,
                            "x %s: eval mode normalises by running_mean and running_var, "
                            "and none were given",
                            sx);

    /* the output takes x's dtype: at O2 the activations stay low while gamma
     * and beta are f32 (TE_AMPC_NORM); running stats stay f32 whatever the
     * model computes in */
    te_node_output(n, n->in[0]->dtype, x->ndim, x->shape);
    te_node_save(n, 0, TE_F32, te_shape(C)); /* mean */
    te_node_save(n, 1, TE_F32, te_shape(C)); /* rstd */
    return te_node_run(n);
}

/* Normalises x over its last dim D, then scales by gamma [D] and shifts by
 * beta [D] (either NULL: 1 and 0). */
te_tensor *te_layernorm_at(te_loc l, te_tensor *x, te_tensor *gamma, te_tensor *beta, float eps)
{
    te_node *n = te_node_begin(TE_OP_LAYERNORM, l, (te_tensor *[]){ x, gamma, beta });
    if (!n)
        return NULL;

    char sx[SHAPE_BUF];
    te_shape_str(x->ndim, x->shape, sx, sizeof sx);
    if (x->ndim < 1)
        return te_node_fail(n, TE_ERR_SHAPE, "x %s: at least 1 dim needed", sx);
    const int64_t D = x->shape[x->ndim - 1];
    if (!check_vec(n, "gamma", gamma, D, sx) || !check_vec(n, "beta", beta, D, sx))
        return NULL;
    if (bad_eps(eps))
        return te_node_fail(n, TE_ERR_ARG, "x %s: eps %g must be > 0", sx, (double)eps);

    n->a.eps = eps;
    te_node_output(n, te_result_dtype(3, n->in), x->ndim, x->shape);
    const int64_t rows = D ? x->numel / D : 0;
    te_node_save(n, 0, TE_F32, te_shape(rows)); /* mean */
    te_node_save(n, 1, TE_F32, te_shape(rows)); /* rstd */
    return te_node_run(n);
}
