/*
 * cpu_dnnl.c — oneDNN for the CPU backend's kernels: its engine and
 * stream, reorders, and a primitive run on plain buffers (cpu_dnnl.h).
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

bool cpu_dnnl_run(const void *op_desc, const_dnnl_primitive_desc_t hint, const cpu_dnnl_io *io, int n)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t mem[8] = { 0 };
    dnnl_exec_arg_t args[8];
    void *tmp[8] = { 0 };
    size_t tmp_bytes[8] = { 0 };
    const dnnl_memory_desc_t *want[8];
    bool ok = n <= 8 && dnnl_primitive_desc_create(&pd, op_desc, NULL, cpu_dnnl_eng, hint) == dnnl_success &&
              dnnl_primitive_create(&prim, pd) == dnnl_success;
    for (int i = 0; ok && i < n; i++) {
        want[i] = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, io[i].arg);
        void *p = (void *)io[i].p;
        if (!want[i] || !dnnl_memory_desc_equal(want[i], &io[i].md)) {
            tmp_bytes[i] = want[i] ? dnnl_memory_desc_get_size(want[i]) : 0;
            ok = want[i] && (p = tmp[i] = te_mem_alloc(tmp_bytes[i])) != NULL &&
                 (is_output(io[i].arg) || reorder(&io[i].md, io[i].p, want[i], p));
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

cpu_dnnl_conv cpu_dnnl_conv_of(const te_node *n, dnnl_data_type_t xt, dnnl_data_type_t wt, dnnl_data_type_t yt,
                               bool any)
{
    const te_tensor *x = n->in[0], *w = n->in[1], *y = n->out[0];
    cpu_dnnl_conv c;
    dnnl_dims_t xd, wd, bd = { w->shape[0] }, yd; /* oneDNN reads a whole dnnl_dims_t */
    memcpy(xd, x->shape, 4 * sizeof *xd);
    memcpy(wd, w->shape, 4 * sizeof *wd);
    memcpy(yd, y->shape, 4 * sizeof *yd);
    dnnl_memory_desc_init_by_tag(&c.x, 4, xd, xt, any ? dnnl_format_tag_any : dnnl_nchw);
    dnnl_memory_desc_init_by_tag(&c.w, 4, wd, wt, any ? dnnl_format_tag_any : dnnl_oihw);
    dnnl_memory_desc_init_by_tag(&c.b, 1, bd, wt, dnnl_a);
    dnnl_memory_desc_init_by_tag(&c.y, 4, yd, yt, any ? dnnl_format_tag_any : dnnl_nchw);
    for (int d = 0; d < 2; d++) {
        c.stride[d] = n->a.stride;
        c.pad_l[d] = n->a.pad;
        c.pad_r[d] = (y->shape[2 + d] - 1) * n->a.stride + w->shape[2 + d] - x->shape[2 + d] - n->a.pad;
    }
    return c;
}

