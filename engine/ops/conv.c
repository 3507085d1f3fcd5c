/* conv.c — conv2d and pooling op front-ends: argument and shape checks and
 * the output shape (floor mode, symmetric zero padding, NCHW layout). The
 * arithmetic is in the backend (cpu/cpu_conv.c). */
#include "te_internal.h"

#include <stdio.h>

#define SHAPE_BUF 96

/* Checks x is [N,C,H,W] and that a kh x kw window with this stride
 * and padding fits; on success records stride and pad in n and writes the
 * output height and width. On failure n is discarded with a message that
 * starts with `shapes`, the op's inputs as "x [..]" or "x [..] and w [..]". */
static bool check_window(te_node *n, const char *shapes, const te_tensor *x, int64_t kh,
                         int64_t kw, int stride, int pad, int64_t *oh, int64_t *ow)
{
    if (x->ndim != 4) {
        te_node_fail(n, TE_ERR_SHAPE, "%s: x must be 4-D [N,C,H,W]", shapes);
        return false;
    }
    if (stride < 1) {
        te_node_fail(n, TE_ERR_ARG, "%s: stride %d must be >= 1", shapes, stride);
        return false;
    }
    if (pad < 0) {
        te_node_fail(n, TE_ERR_ARG, "%s: pad %d must be >= 0", shapes, pad);
        return false;
    }
    int64_t ph = x->shape[2] + 2 * (int64_t)pad, pw = x->shape[3] + 2 * (int64_t)pad;
    if (kh > ph || kw > pw) {
        te_node_fail(n, TE_ERR_ARG,
                     "%s: kernel %lldx%lld larger than the padded input %lldx%lld (pad %d)",
                     shapes, (long long)kh, (long long)kw, (long long)ph, (long long)pw, pad);
        return false;
    }
    *oh = (ph - kh) / stride + 1;
    *ow = (pw - kw) / stride + 1;
    n->a.stride = stride;
    n->a.pad = pad;
    return true;
}

/* x [N,C,H,W] * w [O,C,KH,KW] + b [O] -> [N,O,OH,OW]. */
te_tensor *te_conv2d_at(te_loc l, te_tensor *x, te_tensor *w, te_tensor *b, int stride, int pad)
{
    te_node *n = te_node_begin(TE_OP_CONV2D, l, (te_tensor *[]){ x, w, b });
    if (!n)
        return NULL;

    char sx[SHAPE_BUF], sw[SHAPE_BUF], shapes[2 * SHAPE_BUF + 16];
    te_shape_str(x->ndim, x->shape, sx, sizeof sx);
    te_shape_str(w->ndim, w->shape, sw, sizeof sw);
    snprintf(shapes, sizeof shapes, "x %s and w %s", sx, sw);
    if (w->ndim != 4)
        return te_node_fail(n, TE_ERR_SHAPE, "%s: w must be 4-D [O,C,KH,KW]", shapes);
    if (x->ndim == 4 && x->shape[1] != w->shape[1])
        return te_node_fail(n, TE_ERR_SHAPE, "%s: input channels %lld != %lld", shapes,
                            (long long)x->shape[1], (long long)w->shape[1]);
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
        char sb[SHAPE_BUF];
        te_shape_str(b->ndim, b->shape, sb, sizeof sb);
        return te_node_fail(n, TE_ERR_SHAPE, "b %s and w %s: bias must be [%lld]", sb, sw,
                            (long long)w->shape[0]);
    }
    int64_t oh, ow;
    if (!check_window(n, shapes, x, w->shape[2], w->shape[3], stride, pad, &oh, &ow))
        return NULL;

    te_node_output(n, te_result_dtype(3, n->in), 4,
                   (const int64_t[]){ x->shape[0], w->shape[0], oh, ow });
    return te_node_run(n);
}

/* The shared front-end of max and average pooling. */
static te_tensor *pool2d(te_op op, te_loc l, te_tensor *x, int kernel, int stride, int pad)
{
    te_node *n = te_node_begin(op, l, (te_tensor *[]){ x });
    if (!n)
        return NULL;
    char sx[SHAPE_BUF], shapes[SHAPE_BUF + 8];
    snprintf(shapes, sizeof shapes, "x %s", te_shape_str(x->ndim, x->shape, sx, sizeof sx));
    if (kernel < 1)
        return te_node_fail(n, TE_ERR_ARG, "%s: kernel %d must be >= 1", shapes, kernel);
    /* As in PyTorch: every window then holds at least one real element. */
    if (pad > kernel / 2)
        return te_node_fail(n, TE_ERR_ARG, "%s: pad %d must be at most half the kernel %d",
                            shapes, pad, kernel);
    int64_t oh, ow;
    if (!check_window(n, shapes, x, kernel, kernel, stride, pad, &oh, &ow))
        return NULL;
    n->a.kernel = kernel;

    const int64_t shape[4] = { x->shape[0], x->shape[1], oh, ow };
    te_node_output(n, te_result_dtype(1, n->in), 4, shape);
    if (op == TE_OP_MAXPOOL2D) /* argmax: the flat index in the plane */
        te_node_save(n, 0, TE_I32, 4, shape);
    return te_node_run(n);
}

/* Max over kernel x kernel windows; padding counts as -inf. */
te_tensor *te_maxpool2d_at(te_loc l, te_tensor *x, int kernel, int stride, int pad)
{
    return pool2d(TE_OP_MAXPOOL2D, l, x, kernel, stride, pad);
}

/* Mean over kernel x kernel windows; padding counts as zeros in the mean
 * (PyTorch's count_include_pad=True). */
te_tensor *te_avgpool2d_at(te_loc l, te_tensor *x, int kernel, int stride, int pad)
{
    return pool2d(TE_OP_AVGPOOL2D, l, x, kernel, stride, pad);
}

/* x [N,C,H,W] -> mean over H and W, [N,C]. */
te_tensor *te_global_avgpool_at(te_loc l, te_tensor *x)
{
    te_node *n = te_node_begin(TE_OP_GLOBAL_AVGPOOL, l, (te_tensor *[]){ x });
    if (!n)
        return NULL;
    if (x->ndim != 4) {
        char sx[SHAPE_BUF];
        te_shape_str(x->ndim, x->shape, sx, sizeof sx);
        return te_node_fail(n, TE_ERR_SHAPE, "x %s: x must be 4-D [N,C,H,W]", sx);
    }
    te_node_output(n, te_result_dtype(1, n->in), 2, (const int64_t[]){ x->shape[0], x->shape[1] });
    return te_node_run(n);
}
