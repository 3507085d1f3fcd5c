/*
 * cpu_dnnl.c — oneDNN for the CPU backend's kernels: its engine and
 * stream, reorders, a primitive run on plain buffers, and a Conv2D's
 * primitives for the f32 and the bf16 kernels (cpu_dnnl.h).
 */
#include "cpu_dnnl.h"

#include <string.h>

dnnl_engine_t cpu_dnnl_eng;
static dnnl_stream_t stream;
static int state = -1; /* -1: not made yet */

bool cpu_dnnl_engine(void)
{
    if (state < 0)
        state = dnnl_engine_create(&cpu_dnnl_eng, dnnl_cpu, 0) == dnnl_success &&
                dnnl_stream_create(&stream, cpu_dnnl_eng, dnnl_stream_default_flags) == dnnl_success;
    return state;
}

/* from (at src) copied into layout to (at dst) by a oneDNN reorder. */
static bool reorder(const dnnl_memory_desc_t *from, const void *src, const dnnl_memory_desc_t *to, void *dst)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t m[2] = { 0 };
    bool ok = dnnl_reorder_primitive_desc_create(&pd, from, cpu_dnnl_eng, to, cpu_dnnl_eng, NULL) == dnnl_success &&
              dnnl_primitive_create(&prim, pd) == dnnl_success &&
              dnnl_memory_create(&m[0], from, cpu_dnnl_eng, (void *)src) == dnnl_success &&
              dnnl_memory_create(&m[1], to, cpu_dnnl_eng, dst) == dnnl_success;
    dnnl_exec_arg_t args[2] = { { DNNL_ARG_FROM, m[0] }, { DNNL_ARG_TO, m[1] } };
    ok = ok && dnnl_primitive_execute(prim, stream, 2, args) == dnnl_success;
    for (int i = 0; i < 2; i++)
        if (m[i])
            dnnl_memory_destroy(m[i]);
    if (prim)
        dnnl_primitive_destroy(prim);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return ok;
}

static bool is_output(int arg)
{
    return arg == DNNL_ARG_DST || arg == DNNL_ARG_DIFF_SRC || arg == DNNL_ARG_DIFF_WEIGHTS ||
           arg == DNNL_ARG_DIFF_BIAS;
}

/* cpu_dnnl_run with attributes (NULL: none); with a sum post-op among
 * them the primitive reads its dst before it writes it, so a dst in
 * another layout is reordered in as well as out. */
static bool run(const void *op_desc, const_dnnl_primitive_desc_t hint, const_dnnl_primitive_attr_t attr,
                const cpu_dnnl_io *io, int n)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t mem[8] = { 0 };
    dnnl_exec_arg_t args[8];
    void *tmp[8] = { 0 };
    size_t tmp_bytes[8] = { 0 };
    const dnnl_memory_desc_t *want[8];
    bool ok = n <= 8 && dnnl_primitive_desc_create(&pd, op_desc, attr, cpu_dnnl_eng, hint) == dnnl_success &&
              dnnl_primitive_create(&prim, pd) == dnnl_success;
    for (int i = 0; ok && i < n; i++) {
        want[i] = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, io[i].arg);
        void *p = (void *)io[i].p;
        if (!want[i] || !dnnl_memory_desc_equal(want[i], &io[i].md)) {
            tmp_bytes[i] = want[i] ? dnnl_memory_desc_get_size(want[i]) : 0;
            ok = want[i] && (p = tmp[i] = te_mem_alloc(tmp_bytes[i])) != NULL &&
                 ((is_output(io[i].arg) && !(attr && io[i].arg == DNNL_ARG_DST)) ||
                  reorder(&io[i].md, io[i].p, want[i], p));
        }
        ok = ok && dnnl_memory_create(&mem[i], ok ? want[i] : &io[i].md, cpu_dnnl_eng, p) == dnnl_success;
        args[i] = (dnnl_exec_arg_t){ io[i].arg, mem[i] };
    }
    ok = ok && dnnl_primitive_execute(prim, stream, n, args) == dnnl_success;
    for (int i = 0; ok && i < n; i++)
        if (tmp[i] && is_output(io[i].arg))
            ok = reorder(want[i], tmp[i], &io[i].md, (void *)io[i].p);
    ok = ok && dnnl_stream_wait(stream) == dnnl_success;
    for (int i = 0; i < n; i++) {
        if (mem[i])
            dnnl_memory_destroy(mem[i]);
        te_mem_free(tmp[i], tmp_bytes[i]);
    }
    if (prim)
        dnnl_primitive_destroy(prim);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return ok;
}

bool cpu_dnnl_run(const void *op_desc, const_dnnl_primitive_desc_t hint, const cpu_dnnl_io *io, int n)
{
    return run(op_desc, hint, NULL, io, n);
}

/* A Conv2D node's geometry as oneDNN's: x's, w's and y's dtypes as given,
 * in the layouts the tensors have (NCHW and OIHW; x or y, and so its
 * gradient, nChw16c where graph mode chose that: pass_layout.c), or `any` (the
 * primitive's choice); the right padding is what makes the output size y's (less
 * than the left when the stride leaves a remainder). */
typedef struct cpu_dnnl_conv {
    dnnl_memory_desc_t x, w, b, y;
    dnnl_dims_t stride, pad_l, pad_r;
} cpu_dnnl_conv;

static cpu_dnnl_conv conv_of(const te_node *n, dnnl_data_type_t xt, dnnl_data_type_t wt, dnnl_data_type_t yt, bool any)
{
    const te_tensor *x = n->in[0], *w = n->in[1], *y = n->out[0];
    cpu_dnnl_conv c;
    dnnl_dims_t xd, wd, bd = { w->shape[0] }, yd; /* oneDNN reads a whole dnnl_dims_t */
    memcpy(xd, x->shape, 4 * sizeof *xd);
    memcpy(wd, w->shape, 4 * sizeof *wd);
    memcpy(yd, y->shape, 4 * sizeof *yd);
    dnnl_memory_desc_init_by_tag(&c.x, 4, xd, xt,
                                 any ? dnnl_format_tag_any
                                     : x->flags & TE_TENSOR_BLOCKED16 ? dnnl_nChw16c : dnnl_nchw);
    dnnl_memory_desc_init_by_tag(&c.w, 4, wd, wt, any ? dnnl_format_tag_any : dnnl_oihw);
    dnnl_memory_desc_init_by_tag(&c.b, 1, bd, wt, dnnl_a);
    dnnl_memory_desc_init_by_tag(&c.y, 4, yd, yt,
                                 any ? dnnl_format_tag_any
                                     : y->flags & TE_TENSOR_BLOCKED16 ? dnnl_nChw16c : dnnl_nchw);
    for (int d = 0; d < 2; d++) {
        c.stride[d] = n->a.stride;
        c.pad_l[d] = n->a.pad;
        c.pad_r[d] = (y->shape[2 + d] - 1) * n->a.stride + w->shape[2 + d] - x->shape[2 + d] - n->a.pad;
    }
    return c;
}

static bool conv_forward(const te_node *n, dnnl_data_type_t xt, dnnl_data_type_t wt, dnnl_data_type_t yt,
                         const_dnnl_primitive_attr_t attr, const void *x, const void *w, const void *b, void *y)
{
    cpu_dnnl_conv a = conv_of(n, xt, wt, yt, true), c = conv_of(n, xt, wt, yt, false);
    dnnl_convolution_desc_t desc;
    cpu_dnnl_io io[] = { { DNNL_ARG_SRC, c.x, x },
                         { DNNL_ARG_WEIGHTS, c.w, w },
                         { DNNL_ARG_DST, c.y, y },
                         { DNNL_ARG_BIAS, c.b, b } };
    return dnnl_convolution_forward_desc_init(&desc, dnnl_forward_training, dnnl_convolution_direct, &a.x, &a.w,
                                              b ? &a.b : NULL, &a.y, a.stride, a.pad_l, a.pad_r) == dnnl_success &&
           run(&desc, NULL, attr, io, b ? 4 : 3);
}

bool cpu_dnnl_conv_forward(const te_node *n, dnnl_data_type_t xt, dnnl_data_type_t wt, dnnl_data_type_t yt,
                           const void *x, const void *w, const void *b, void *y)
{
    return conv_forward(n, xt, wt, yt, NULL, x, w, b, y);
}

bool cpu_dnnl_conv_forward_sum(const te_node *n, const void *x, const void *w, const void *b, void *y)
{
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_attr_t attr = NULL;
    bool ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
              dnnl_primitive_attr_create(&attr) == dnnl_success &&
              dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success &&
              conv_forward(n, dnnl_f32, dnnl_f32, dnnl_f32, attr, x, w, b, y);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (po)
        dnnl_post_ops_destroy(po);
    return ok;
}

dnnl_primitive_desc_t cpu_dnnl_conv_hint(const te_node *n, dnnl_data_type_t dt, bool bias)
{
    cpu_dnnl_conv a = conv_of(n, dt, dt, dt, true);
    dnnl_convolution_desc_t fwd;
    dnnl_primitive_desc_t hint = NULL;
    if (dnnl_convolution_forward_desc_init(&fwd, dnnl_forward_training, dnnl_convolution_direct, &a.x, &a.w,
                                           bias ? &a.b : NULL, &a.y, a.stride, a.pad_l, a.pad_r) != dnnl_success ||
        dnnl_primitive_desc_create(&hint, &fwd, NULL, cpu_dnnl_eng, NULL) != dnnl_success)
        return NULL;
    return hint;
}

bool cpu_dnnl_conv_backward_data(const te_node *n, dnnl_data_type_t xt, dnnl_data_type_t wt, dnnl_data_type_t yt,
                                 const_dnnl_primitive_desc_t hint, void *dx, const void *w, const void *dy)
{
    cpu_dnnl_conv a = conv_of(n, xt, wt, yt, true), c = conv_of(n, xt, wt, yt, false);
    dnnl_convolution_desc_t desc;
    cpu_dnnl_io io[] = { { DNNL_ARG_DIFF_SRC, c.x, dx }, { DNNL_ARG_WEIGHTS, c.w, w }, { DNNL_ARG_DIFF_DST, c.y, dy } };
    return dnnl_convolution_backward_data_desc_init(&desc, dnnl_convolution_direct, &a.x, &a.w, &a.y, a.stride,
                                                    a.pad_l, a.pad_r) == dnnl_success &&
           cpu_dnnl_run(&desc, hint, io, 3);
}

bool cpu_dnnl_conv_backward_weights(const te_node *n, dnnl_data_type_t xt, dnnl_data_type_t wt, dnnl_data_type_t yt,
                                    const_dnnl_primitive_desc_t hint, const void *x, const void *dy, void *dw,
                                    void *db)
{
    cpu_dnnl_conv a = conv_of(n, xt, wt, yt, true), c = conv_of(n, xt, wt, yt, false);
    dnnl_convolution_desc_t desc;
    cpu_dnnl_io io[] = { { DNNL_ARG_SRC, c.x, x },
                         { DNNL_ARG_DIFF_DST, c.y, dy },
                         { DNNL_ARG_DIFF_WEIGHTS, c.w, dw },
                         { DNNL_ARG_DIFF_BIAS, c.b, db } };
    return dnnl_convolution_backward_weights_desc_init(&desc, dnnl_convolution_direct, &a.x, &a.w, db ? &a.b : NULL,
                                                       &a.y, a.stride, a.pad_l, a.pad_r) == dnnl_success &&
           cpu_dnnl_run(&desc, hint, io, db ? 4 : 3);
}
