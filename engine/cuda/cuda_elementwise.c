/* cuda_elementwise.c — binary ops with broadcasting, masked fill, scale,
 * activations and dropout on the CUDA backend; graph mode's fused chains.
 * Attributes and the acc rule as engine/cpu's kernels; the launchers are in
 * k_elementwise.cu. */
#include "cuda/cuda_elementwise.h"

#include "cuda/cuda_rt.h"
#include "cuda/k_shape.h"
#include "kernel_geom.h"

_Static_assert(K_MAX_DIMS == TE_MAX_DIMS, "k_bcast holds te.h's dims");
_Static_assert(K_EW_MAX == TG_EW_MAX, "k_ew_prog holds graph.h's fused chains");

/* kernel_geom.h's te_bcast_plan (the CPU's), into the kernels' struct. */
void cuda_bcast_plan(k_bcast *p, const te_tensor *a, const te_tensor *b, const te_tensor *y)
{
    te_bcast g;
    te_bcast_plan(&g, a, b, y);
    p->k = g.k;
    for (int i = 0; i < g.k; i++) {
        p->d[i] = g.d[i];
        p->sa[i] = g.sa[i];
        p->sb[i] = g.sb[i];
    }
}

/* ---- binary ops ------------------------------------------------------------- */

static te_status binary_forward(te_node *n, k_op op, const char *what)
{
    const te_tensor *a = n->in[0], *b = n->in[1];
    te_tensor *y = n->out[0];
    k_bcast p;
    cuda_bcast_plan(&p, a, b, y);
    return te_cuda_ok(n, k_binary_forward(op, &p, y->numel, te_f32(a), te_f32(b), te_f32(y), te_cuda_stream()),
                      what);
}

/* The gradient of input `which`, summed over the dims it was broadcast
 * along. Add's and Sub's terms read neither operand (te_op_bwd_reads:
 * none), so graph mode may have left them out of memory: not passed. */
static te_status binary_grad(te_node *n, int which, k_grad term, const char *what)
{
    te_tensor *x = n->in[which];
    if (!te_needs_grad(x))
        return TE_OK;
    const te_tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];
    int acc;
    float *d = te_grad_buf(x, &acc);
    k_bcast p;
    cuda_bcast_plan(&p, a, b, y);
    const bool reads = term != K_GRAD_PASS && term != K_GRAD_NEG;
    return te_cuda_ok(n,
                      k_binary_grad(term, &p, which, te_f32(y->grad), reads ? te_f32(a) : NULL,
                                    reads ? te_f32(b) : NULL, d, acc, te_cuda_stream()),
                      what);
}

static te_status binary_backward(te_node *n, k_grad ta, k_grad tb, const char *what)
{
    te_status st = binary_grad(n, 0, ta, what);
    return st != TE_OK ? st : binary_grad(n, 1, tb, what);
}

te_status cuda_add_forward(te_node *n) { return binary_forward(n, K_OP_ADD, "add forward"); }
te_status cuda_add_backward(te_node *n) { return binary_backward(n, K_GRAD_PASS, K_GRAD_PASS, "add backward"); }
te_status cuda_sub_forward(te_node *n) { return binary_forward(n, K_OP_SUB, "sub forward"); }
te_status cuda_sub_backward(te_node *n) { return binary_backward(n, K_GRAD_PASS, K_GRAD_NEG, "sub backward"); }
te_status cuda_mul_forward(te_node *n) { return binary_forward(n, K_OP_MUL, "mul forward"); }
te_status cuda_mul_backward(te_node *n) { return binary_backward(n, K_GRAD_MUL_A, K_GRAD_MUL_B, "mul backward"); }
te_status cuda_div_forward(te_node *n) { return binary_forward(n, K_OP_DIV, "div forward"); }
te_status cuda_div_backward(te_node *n) { return binary_backward(n, K_GRAD_DIV_A, K_GRAD_DIV_B, "div backward"); }

/* ---- masked fill: y = mask != 0 ? value : x; dx = mask != 0 ? 0 : dy -------- */

te_status cuda_masked_fill_forward(te_node *n)
{
    const te_tensor *x = n->in[0], *m = n->in[1];
    te_tensor *y = n->out[0];
    k_bcast p;
    cuda_bcast_plan(&p, x, m, y);
    return te_cuda_ok(n,
                      k_masked_fill_forward(&p, y->numel, te_f32(x), te_f32(m), n->a.value, te_f32(y),
                                            te_cuda_stream()),
                      "masked_fill forward");
}

te_status cuda_masked_fill_backward(te_node *n)
{
    te_tensor *x = n->in[0];
    if (!te_needs_grad(x))
        return TE_OK; /* the mask gets none: it is a constant */
    const te_tensor *m = n->in[1], *y = n->out[0];
    int acc;
    float *d = te_grad_buf(x, &acc);
    k_bcast p;
    cuda_bcast_plan(&p, x, m, y);
    return te_cuda_ok(n, k_masked_fill_backward(&p, y->numel, te_f32(m), te_f32(y->grad), d, acc, te_cuda_stream()),
                      "masked_fill backward");
}

/* ---- unary ops ------------------------------------------------------------------
 * The derivative reads what the CPU's does (te_op_bwd_reads): the output
 * (T = out) or the input (T = in); Scale's reads neither. */

static te_status unary_forward(te_node *n, k_op op, const char *what)
{
    return te_cuda_ok(n,
                      k_unary_forward(op, n->out[0]->numel, te_f32(n->in[0]), te_f32(n->out[0]), n->a.scale,
                                      te_cuda_stream()),
                      what);
}

static te_status unary_backward(te_node *n, k_op op, const te_tensor *v, const char *what)
{
    if (!te_needs_grad(n->in[0]))
        return TE_OK;
    int acc;
    float *d = te_grad_buf(n->in[0], &acc);
    return te_cuda_ok(n,
                      k_unary_backward(op, n->out[0]->numel, v ? te_f32(v) : NULL, te_f32(n->out[0]->grad), d,
                                       n->a.scale, acc, te_cuda_stream()),
                      what);
}

#define UNARY(NAME, OP, V)                                                                         \
    te_status cuda_##NAME##_forward(te_node *n) { return unary_forward(n, OP, #NAME " forward"); } \
    te_status cuda_##NAME##_backward(te_node *n) { return unary_backward(n, OP, V, #NAME " backward"); }

UNARY(scale, K_OP_SCALE, NULL)
UNARY(relu, K_OP_RELU, n->out[0])
UNARY(gelu, K_OP_GELU, n->in[0])
UNARY(tanh, K_OP_TANH, n->out[0])
UNARY(sigmoid, K_OP_SIGMOID, n->out[0])
UNARY(exp, K_OP_EXP, n->out[0])
UNARY(log, K_OP_LOG, n->in[0])
UNARY(sqrt, K_OP_SQRT, n->out[0])

/* ---- dropout ---------------------------------------------------------------------
 * Element i kept exactly when the CPU keeps it (te_dropout_kept under the
 * node's seed); the backward draws the mask again, as the CPU's does. A
 * copy in eval mode or when p is 0. */

static te_status dropout_apply(te_node *n, const float *x, float *y, int64_t N, int acc, const char *what)
{
    cudaStream_t s = te_cuda_stream();
    if (!n->a.training || n->a.p == 0.0f) {
        if (acc)
            return te_cuda_ok(n, k_add_into(y, x, N, s), what);
        return te_cuda_ok(n, cudaMemcpyAsync(y, x, (size_t)N * sizeof *y, cudaMemcpyDeviceToDevice, s), what);
    }
    const uint64_t key = te_dropout_key(n->a.seed, n->a.elem_offset), thr = te_dropout_threshold(n->a.p);
    return te_cuda_ok(n, k_dropout(N, x, y, key, thr, n->a.scale, acc, s), what);
}

te_status cuda_dropout_forward(te_node *n)
{
    return dropout_apply(n, te_f32(n->in[0]), te_f32(n->out[0]), n->in[0]->numel, 0, "dropout forward");
}

te_status cuda_dropout_backward(te_node *n)
{
    te_tensor *x = n->in[0];
    int acc;
    float *dx = te_grad_buf(x, &acc);
    return dropout_apply(n, te_f32(n->out[0]->grad), dx, x->numel, acc, "dropout backward");
}

/* ---- graph mode's fused kernels (cpu_fused.c) ---------------------------------- */

int cuda_ew_op(te_op op)
{
    switch (op) {
    case TE_OP_ADD: return K_OP_ADD;
    case TE_OP_SUB: return K_OP_SUB;
    case TE_OP_MUL: return K_OP_MUL;
    case TE_OP_DIV: return K_OP_DIV;
    case TE_OP_SCALE: return K_OP_SCALE;
    case TE_OP_RELU: return K_OP_RELU;
    case TE_OP_GELU: return K_OP_GELU;
    case TE_OP_TANH: return K_OP_TANH;
    case TE_OP_SIGMOID: return K_OP_SIGMOID;
    case TE_OP_EXP: return K_OP_EXP;
    case TE_OP_LOG: return K_OP_LOG;
    case TE_OP_SQRT: return K_OP_SQRT;
    default: return -1;
    }
}

/* As cpu_fused.c's no_formula, but an error rather than an abort: the
 * passes fused an op this file has no formula for. */
static te_status no_formula(te_op op)
{
    te_set_error(TE_ERR_STATE, "graph: %s is fusable in TE_OP_LIST but has no formula in cuda_elementwise.c",
                 te_op_type_name(op));
    return TE_ERR_STATE;
}

te_status cuda_tg_ew_run(const tg_ew *ew)
{
    k_ew_prog p = { .n_in = ew->n_in, .n_steps = ew->n_steps, .numel = ew->numel };
    for (int i = 0; i < ew->n_in; i++) {
        p.in[i] = te_f32(ew->in[i]);
        p.in_n[i] = ew->in[i]->numel;
    }
    for (int s = 0; s < ew->n_steps; s++) {
        const te_op op = ew->step[s].op;
        const int k = cuda_ew_op(op);
        const bool binary = k >= K_OP_ADD && k <= K_OP_DIV;
        if (k < 0 || binary != (ew->step[s].b >= 0))
            return no_formula(op);
        p.step[s].op = k;
        p.step[s].a = ew->step[s].a;
        p.step[s].b = ew->step[s].b;
        p.step[s].s = ew->step[s].s;
        p.out[s] = te_f32(ew->out[s]); /* NULL data: not materialised */
    }
    return te_cuda_ok(NULL, k_ew_run(&p, te_cuda_stream()), "fused elementwise kernel");
}

te_status cuda_tg_act_inplace(te_op act, float *y, int64_t n)
{
    const int k = cuda_ew_op(act);
    if (k < K_OP_RELU)
        return no_formula(act);
    return te_cuda_ok(NULL, k_unary_forward((k_op)k, n, y, y, 1.0f, te_cuda_stream()), "fused activation");
}
