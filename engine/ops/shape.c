/* shape.c — reshape, flatten, transpose, cast, embedding and dropout op
 * front-ends: argument and shape checks, output shapes and dtypes; the data
 * movement is in the backend (cpu/cpu_shape.c).
 *
 * Reshape and transpose materialise a copy rather than a view, so a debugger
 * that patches one tensor never changes another behind the user's back. */
#include "te_internal.h"

#include <math.h>

#define SHAPE_BUF 96

/* x to `shape` (ndim dims, one of them may be -1: inferred), same count. */
te_tensor *te_reshape_at(te_loc l, te_tensor *x, int ndim, const int64_t *shape)
{
    te_node *n = te_node_begin(TE_OP_RESHAPE, l, (te_tensor *[]){ x });
    if (!n)
        return NULL;
    char sx[SHAPE_BUF], ss[SHAPE_BUF];
    te_shape_str(x->ndim, x->shape, sx, sizeof sx);
    if (ndim < 0 || ndim > TE_MAX_DIMS)
        return te_node_fail(n, TE_ERR_ARG, "x %s: %d dims asked, 0 to %d supported", sx, ndim,
                            TE_MAX_DIMS);
    te_shape_str(ndim, shape, ss, sizeof ss);
    int64_t out[TE_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (shape[i] < 0)
            return te_node_fail(n, TE_ERR_ARG,
                                "x %s to %s: dim %d is %lld (sizes are >= 0, one -1 allowed)", sx,
                                ss, i, (long long)shape[i]);
        known *= shape[i];
    }
    if (infer >= 0) {
        if (known == 0 || x->numel % known)
            return te_node_fail(n, TE_ERR_SHAPE, "x %s (%lld elements) cannot be reshaped to %s",
                                sx, (long long)x->numel, ss);
        out[infer] = x->numel / known;
    } else if (known != x->numel) {
        return te_node_fail(n, TE_ERR_SHAPE,
                            "x %s (%lld elements) cannot be reshaped to %s (%lld elements)", sx,
                            (long long)x->numel, ss, (long long)known);
    }
    te_node_output(n, n->in[0]->dtype, ndim, out);
    return te_node_run(n);
}

/* x [N,...] -> [N, product of the rest]; its own op type so that names
 * say what the user called, the data movement is Reshape's. */
te_tensor *te_flatten_at(te_loc l, te_tensor *x)
{
    te_node *n = te_node_begin(TE_OP_FLATTEN, l, (te_tensor *[]){ x });
    if (!n)
        return NULL;
    if (x->ndim < 2) {
        char sx[SHAPE_BUF];
        return te_node_fail(n, TE_ERR_SHAPE, "flatten of x %s: [N,...] with 2 or more dims needed",
                            te_shape_str(x->ndim, x->shape, sx, sizeof sx));
    }
    int64_t rest = 1;
    for (int i = 1; i < x->ndim; i++)
        rest *= x->shape[i];
    te_node_output(n, n->in[0]->dtype, 2, (const int64_t[]){ x->shape[0], rest });
    return te_node_run(n);
}

/* x with dims d0 and d1 swapped (negative dims count from the end). */
te_tensor *te_transpose_at(te_loc l, te_tensor *x, int d0, int d1)
{
    te_node *n = te_node_begin(TE_OP_TRANSPOSE, l, (te_tensor *[]){ x });
    if (!n)
        return NULL;
    int a = d0 < 0 ? d0 + x->ndim : d0, b = d1 < 0 ? d1 + x->ndim : d1;
    if (a < 0 || a >= x->ndim || b < 0 || b >= x->ndim) {
        char sx[SHAPE_BUF];
        return te_node_fail(n, TE_ERR_ARG, "dims (%d, %d) out of range for x %s (%d dims)", d0, d1,
                            te_shape_str(x->ndim, x->shape, sx, sizeof sx), x->ndim);
    }
    int64_t out[TE_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        out[i] = x->shape[i];
    out[a] = x->shape[b];
    out[b] = x->shape[a];
    /* the kernel wants dim0 < dim1; swapping is symmetric */
    n->a.dim0 = a < b ? a : b;
    n->a.dim1 = a < b ? b : a;
    te_node_output(n, n->in[0]->dtype, x->ndim, out);
    return te_node_run(n);
}

/* x converted to dt, rounding to nearest even between floats; float to i32
 * truncates toward zero. Gradients flow only between float dtypes. */
te_tensor *te_cast_at(te_loc l, te_tensor *x, te_dtype dt)
{
    te_node *n = te_node_begin(TE_OP_CAST, l, (te_tensor *[]){ x });
    if (!n)
        return NULL;
    if ((unsigned)dt >= TE_DTYPE_COUNT) {
        char sx[SHAPE_BUF];
        return te_node_fail(n, TE_ERR_ARG, "x %s %s: unknown target dtype %d",
                            te_dtype_name(x->dtype), te_shape_str(x->ndim, x->shape, sx, sizeof sx),
                            (int)dt);
    }
    te_node_output(n, dt, x->ndim, x->shape);
    return te_node_run(n);
}

/* Rows of weight [V,D] picked by i32 idx [...] (1 to 3 dims) -> [...,D]. An
 * index outside [0,V) fails here, naming its value and position, rather than
 * reading outside the table in the kernel. */
te_tensor *te_embedding_at(te_loc l, te_tensor *weight, te_tensor *idx)
{
    te_node *n = te_node_begin(TE_OP_EMBEDDING, l, (te_tensor *[]){ weight, idx });
    if (!n)
        return NULL;
    char sw[SHAPE_BUF], si[SHAPE_BUF];
    te_shape_str(weight->ndim, weight->shape, sw, sizeof sw);
    te_shape_str(idx->ndim, idx->shape, si, sizeof si);
    if (weight->ndim != 2)
        return te_node_fail(n, TE_ERR_SHAPE, "weight %s and idx %s: weight must be [V,D]", sw, si);
    if (idx->ndim < 1 || idx->ndim > TE_MAX_DIMS - 1)
        return te_node_fail(n, TE_ERR_SHAPE, "weight %s and idx %s: idx must have 1 to %d dims", sw,
                            si, TE_MAX_DIMS - 1);
    const int64_t V = weight->shape[0];
    /* read to the host a block at a time, wherever idx lives */
    int32_t ip[1024];
    for (int64_t i = 0, b = 0; i < idx->numel; i++) {
        if (i == b + (int64_t)(sizeof ip / sizeof *ip) || i == 0) {
            b = i;
            const int64_t m = idx->numel - b < 1024 ? idx->numel - b : 1024;
            if (te_tensor_read(idx, b, m, ip) != TE_OK)
                return te_node_fail(n, te_error_code(), "idx %s: %s", si, te_error());
        }
        if (ip[i - b] >= 0 && ip[i - b] < V)
            continue;
        /* the position as a multi-index, as the user would write it */
        char pos[SHAPE_BUF];
        int64_t coord[TE_MAX_DIMS], rest = i;
        for (int d = idx->ndim - 1; d >= 0; d--) {
            coord[d] = rest % idx->shape[d];
            rest /= idx->shape[d];
        }
        te_shape_str(idx->ndim, coord, pos, sizeof pos);
        return te_node_fail(n, TE_ERR_ARG,
                            "idx%s = %d (flat position %lld) out of range for weight %s: "
                            "indices must be in [0, %lld)",
                            pos, (int)ip[i - b], (long long)i, sw, (long long)V);
    }
    int64_t out[TE_MAX_DIMS];
    for (int d = 0; d < idx->ndim; d++)
        out[d] = idx->shape[d];
    out[idx->ndim] = weight->shape[1];
    te_node_output(n, n->in[0]->dtype, idx->ndim + 1, out);
    return te_node_run(n);
}

/* FNV-1a of the op's scoped name: the same op gets the same stream in every
 * step and every run, whatever ops ran before it. */
static uint64_t name_stream(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 1099511628211ULL;
    return h;
}

uint64_t te_dropout_seed(const char *name, int64_t step)
{
    return te_rand_u64(te_seed(), name_stream(name), (uint64_t)step);
}

/* Zeroes each element with probability p and scales the rest by 1/(1-p) in
 * training mode; a copy in eval mode or when p is 0. The mask is keyed by
 * (seed, op name, step), so it differs between ops and steps and is the
 * same for the same seed. */
te_tensor *te_dropout_at(te_loc l, te_tensor *x, float p)
{
    te_node *n = te_node_begin(TE_OP_DROPOUT, l, (te_tensor *[]){ x });
    if (!n)
        return NULL;
    if (!(p >= 0.0f && p < 1.0f)) {
        char sx[SHAPE_BUF];
        return te_node_fail(n, TE_ERR_ARG, "x %s: p = %g not in [0, 1)",
                            te_shape_str(x->ndim, x->shape, sx, sizeof sx), (double)p);
    }
    n->a.training = te_training();
    n->a.p = p;
    n->a.scale = 1.0f / (1.0f - p);
    n->a.seed = te_dropout_seed(n->name, te_step());
    n->a.elem_offset = (int64_t)te_dist_rank() * x->numel;
    te_node_output(n, n->in[0]->dtype, x->ndim, x->shape);
    return te_node_run(n);
}
