/*
 * cpu_conv_dnnl.c — f32 Conv2D on oneDNN, forward and backward: the CPU's
 * convolution where the engine is built with oneDNN. The im2col + sgemm
 * kernels of cpu_conv.c stay as the reference the tests compare against,
 * and run where oneDNN declines a node or TDBG_CPU_CONV=ref says so.
 *
 * Why oneDNN: its direct convolutions on blocked layouts (nChw16c on
 * AVX-512) reach about 1.5x the rate of im2col + OpenBLAS sgemm on this
 * CNN's layers, reorders to and from NCHW included (docs/benchmarks.md,
 * "CPU convolution"). Its im2col GEMM on plain NCHW is no faster than
 * ours, so the primitives choose their layouts (`any`) and cpu_dnnl_run
 * reorders around them.
 *
 * Gradients follow the engine's rule: a gradient already valid is added
 * to. oneDNN writes, so those go through scratch and are added after. A
 * node oneDNN cannot take is declined with nothing changed: a gradient
 * buffer taken for writing is marked invalid again, and the reference
 * kernel starts afresh. Results do not depend on scheduling: for a given
 * thread count oneDNN's CPU convolutions are deterministic.
 */
#include "cpu_dnnl.h"
#include "cpu_kernels.h"

#include <stdlib.h>
#include <string.h>

static int allowed = -1; /* -1: TDBG_CPU_CONV not read yet */

void te_cpu_conv_dnnl_allow(bool on) { allowed = on; }

const char *cpu_conv_dnnl(void)
{
    if (allowed < 0) {
        const char *v = getenv("TDBG_CPU_CONV");
        allowed = !(v && strcmp(v, "ref") == 0);
    }
    return allowed && cpu_dnnl_engine() ? "oneDNN (blocked layouts)" : NULL;
}

/* Every tensor f32 and not empty; x and w distinct (their gradients would
 * meet). */
static bool takes(const te_node *n)
{
    if (!cpu_conv_dnnl())
        return false;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && (n->in[i]->dtype != TE_F32 || n->in[i]->numel == 0))
            return false;
    return n->in[0] != n->in[1] && n->out[0]->dtype == TE_F32 && n->out[0]->numel > 0;
}

te_status cpu_conv2d_forward_dnnl(te_node *n)
{
    if (!takes(n))
        return TE_LOWP_DECLINED;
    const te_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    cpu_dnnl_conv a = cpu_dnnl_conv_of(n, dnnl_f32, dnnl_f32, dnnl_f32, true);
    cpu_dnnl_conv c = cpu_dnnl_conv_of(n, dnnl_f32, dnnl_f32, dnnl_f32, false);
    dnnl_convolution_desc_t desc;
    cpu_dnnl_io io[] = { { DNNL_ARG_SRC, c.x, x->data },
                         { DNNL_ARG_WEIGHTS, c.w, w->data },
                         { DNNL_ARG_DST, c.y, n->out[0]->data },
                         { DNNL_ARG_BIAS, c.b, b ? b->data : NULL } };
    bool ok = dnnl_convolution_forward_desc_init(&desc, dnnl_forward_training, dnnl_convolution_direct, &a.x,
                                                 &a.w, b ? &a.b : NULL, &a.y, a.stride, a.pad_l,
                                                 a.pad_r) == dnnl_success &&
              cpu_dnnl_run(&desc, NULL, io, b ? 4 : 3);
    return ok ? TE_OK : TE_LOWP_DECLINED;
}

/* A gradient oneDNN writes: t's own buffer when t's gradient is not valid
 * yet (taken for writing, *fresh set), else scratch to add from. */
typedef struct grad_out {
    te_tensor *t;
    float *to;      /* where oneDNN writes */
    float *scratch; /* or NULL */
    bool fresh;     /* te_grad_buf took t's gradient for writing */
} grad_out;

static bool grad_take(grad_out *g, te_tensor *t)
{
    *g = (grad_out){ .t = t };
    if (!te_needs_grad(t))
        return true;
    if (t->grad && t->grad_valid) {
        g->scratch = te_mem_alloc((size_t)t->numel * sizeof(float));
        g->to = g->scratch;
        return g->to != NULL;
    }
    int acc;
    g->to = te_grad_buf(t, &acc);
    g->fresh = true;
    return true;
}

/* Done: scratch added to the gradient; or undone (declined): a gradient
 * taken for writing is invalid again, as before. */
static void grad_finish(grad_out *g, bool ok)
{
    if (ok && g->scratch) {
        int acc;
        float *dst = te_grad_buf(g->t, &acc);
        const float *src = g->scratch;
        int64_t n = g->t->numel;
#pragma omp parallel for simd schedule(static) if (n >= TE_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            dst[i] += src[i];
    }
    if (!ok && g->fresh)
        g->t->grad_valid = false;
    if (g->scratch)
        te_mem_free(g->scratch, (size_t)g->t->numel * sizeof(float));
}

te_status cpu_conv2d_backward_dnnl(te_node *n)
{
    if (!takes(n))
        return TE_LOWP_DECLINED;
    te_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    const void *dy = n->out[0]->grad->data;
    cpu_dnnl_conv a = cpu_dnnl_conv_of(n, dnnl_f32, dnnl_f32, dnnl_f32, true);
    cpu_dnnl_conv c = cpu_dnnl_conv_of(n, dnnl_f32, dnnl_f32, dnnl_f32, false);
    /* The backward primitives want the forward one as a hint. */
    dnnl_convolution_desc_t fwd, desc;
    dnnl_primitive_desc_t hint = NULL;
    bool ok = dnnl_convolution_forward_desc_init(&fwd, dnnl_forward_training, dnnl_convolution_direct, &a.x, &a.w,
                                                 b ? &a.b : NULL, &a.y, a.stride, a.pad_l, a.pad_r) == dnnl_success &&
              dnnl_primitive_desc_create(&hint, &fwd, NULL, cpu_dnnl_eng, NULL) == dnnl_success;
    grad_out gx = { 0 }, gw = { 0 }, gb = { 0 };
    ok = ok && grad_take(&gx, x) && grad_take(&gw, w) && grad_take(&gb, b);
    if (ok && gx.to) {
        cpu_dnnl_io io[] = { { DNNL_ARG_DIFF_SRC, c.x, gx.to },
                             { DNNL_ARG_WEIGHTS, c.w, w->data },
                             { DNNL_ARG_DIFF_DST, c.y, dy } };
        ok = dnnl_convolution_backward_data_desc_init(&desc, dnnl_convolution_direct, &a.x, &a.w, &a.y, a.stride,
                                                      a.pad_l, a.pad_r) == dnnl_success &&
             cpu_dnnl_run(&desc, hint, io, 3);
    }
    if (ok && (gw.to || gb.to)) {
        /* db alone still needs somewhere for dw: scratch, dropped after */
        float *dw = gw.to ? gw.to : te_mem_alloc((size_t)w->numel * sizeof(float));
        cpu_dnnl_io io[] = { { DNNL_ARG_SRC, c.x, x->data },
                             { DNNL_ARG_DIFF_DST, c.y, dy },
                             { DNNL_ARG_DIFF_WEIGHTS, c.w, dw },
                             { DNNL_ARG_DIFF_BIAS, c.b, gb.to } };
        ok = dw && dnnl_convolution_backward_weights_desc_init(&desc, dnnl_convolution_direct, &a.x, &a.w,
                                                               gb.to ? &a.b : NULL, &a.y, a.stride, a.pad_l,
                                                               a.pad_r) == dnnl_success &&
             cpu_dnnl_run(&desc, hint, io, gb.to ? 4 : 3);
        if (!gw.to)
            te_mem_free(dw, (size_t)w->numel * sizeof(float));
    }
    grad_finish(&gx, ok);
    grad_finish(&gw, ok);
    grad_finish(&gb, ok);
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    return ok ? TE_OK : TE_LOWP_DECLINED;
}
