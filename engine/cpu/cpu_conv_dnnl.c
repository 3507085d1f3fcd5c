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

/* Graph mode chose nChw16c for x or y and its gradient (pass_layout.c):
 * the reference kernels cannot read that layout, so these run whatever
 * TDBG_CPU_CONV says now (it was read when the plan compiled), and cannot
 * decline. */
static bool blocked(const te_node *n)
{
    return (n->in[0]->flags | n->out[0]->flags) & TE_TENSOR_BLOCKED16;
}

bool cpu_conv_blocked16(void) { return cpu_conv_dnnl() && __builtin_cpu_supports("avx512f"); }

/* Every tensor f32 and not empty; x and w distinct (their gradients would
 * meet). */
static bool takes(const te_node *n)
{
    if (!blocked(n) && !cpu_conv_dnnl())
        return false;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && (n->in[i]->dtype != TE_F32 || n->in[i]->numel == 0))
            return false;
    return n->in[0] != n->in[1] && n->out[0]->dtype == TE_F32 && n->out[0]->numel > 0;
}

/* Declined: the reference kernels take over, unless x or y is blocked. */
static te_status declined(te_node *n)
{
    return blocked(n) ? te_kernel_fail(n, TE_ERR_STATE, "oneDNN failed it, and only oneDNN takes the nChw16c "
                                                        "layout graph mode chose for its input or output")
                      : TE_LOWP_DECLINED;
}

te_status cpu_conv2d_forward_dnnl(te_node *n)
{
    if (!takes(n))
        return declined(n);
    const te_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    return cpu_dnnl_conv_forward(n, dnnl_f32, dnnl_f32, dnnl_f32, x->data, w->data, b ? b->data : NULL,
                                 n->out[0]->data)
               ? TE_OK
               : declined(n);
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
        return declined(n);
    te_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2];
    const void *dy = n->out[0]->grad->data;
    /* The backward primitives want the forward one as a hint. */
    dnnl_primitive_desc_t hint = cpu_dnnl_conv_hint(n, dnnl_f32, b != NULL);
    grad_out gx = { 0 }, gw = { 0 }, gb = { 0 };
    bool ok = hint && grad_take(&gx, x) && grad_take(&gw, w) && grad_take(&gb, b);
    if (ok && gx.to)
        ok = cpu_dnnl_conv_backward_data(n, dnnl_f32, dnnl_f32, dnnl_f32, hint, gx.to, w->data, dy);
    if (ok && (gw.to || gb.to)) {
        /* db alone still needs somewhere for dw: scratch, dropped after */
        float *dw = gw.to ? gw.to : te_mem_alloc((size_t)w->numel * sizeof(float));
        ok = dw && cpu_dnnl_conv_backward_weights(n, dnnl_f32, dnnl_f32, dnnl_f32, hint, x->data, dy, dw, gb.to);
        if (!gw.to)
            te_mem_free(dw, (size_t)w->numel * sizeof(float));
    }
    grad_finish(&gx, ok);
    grad_finish(&gw, ok);
    grad_finish(&gb, ok);
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    return ok ? TE_OK : declined(n);
}

/* Graph mode's conv + add (pass_fuse_sum.c): y, the add's output, holds
 * the addend already (it took the addend's memory; copied here if not),
 * and oneDNN's sum post-op adds the conv's result onto it in the conv's
 * own pass. Where oneDNN does not take the node (TDBG_CPU_CONV=ref), the
 * conv runs into scratch and is added after: the same sum, y = conv + r. */
te_status cpu_conv_sum_forward(te_node *conv, te_node *add)
{
    te_tensor *yt = add->out[0], *c = conv->out[0];
    const te_tensor *r = add->in[0] == c ? add->in[1] : add->in[0];
    float *y = te_f32(yt);
    if (y != te_f32(r))
        memcpy(y, te_f32(r), yt->nbytes);
    const te_tensor *x = conv->in[0], *w = conv->in[1], *b = conv->in[2];
    if (takes(conv) && cpu_dnnl_conv_forward_sum(conv, x->data, w->data, b ? b->data : NULL, y))
        return TE_OK;
    float *tmp = te_mem_alloc(yt->nbytes);
    if (!tmp)
        return te_kernel_fail(conv, TE_ERR_NOMEM, "no memory for the conv's output");
    c->data = tmp;
    te_status st = cpu_conv2d_forward(conv);
    c->data = NULL;
    const int64_t n = st == TE_OK ? yt->numel : 0;
#pragma omp parallel for simd schedule(static) if (n >= TE_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = tmp[i] + y[i]; /* the add's order: the conv's output first */
    te_mem_free(tmp, yt->nbytes);
    return st;
}
