/*
 * cpu_lowp.c — bf16 MatMul, Linear and Conv2D through oneDNN, forward and
 * backward, for CPUs with AVX512-BF16.
 *
 * The operands are the real bf16 tensors; oneDNN multiplies them in f32
 * (a product of two bf16 values is exact in f32) and accumulates in f32
 * into an f32 result, which te_round_f32 rounds once to bf16, counting
 * what rounding did, as the shadow path does (tape.c run_shadowed: f32
 * copies, an f32 OpenBLAS kernel, the result rounded). Only the order of
 * the f32 sums differs, so the two agree within a few bf16 ULPs (the test:
 * tests/test_lowp_native.c). Gradients alike: dx, dw and db in f32, added
 * to an accumulated gradient in f32, rounded once.
 *
 * Chosen at run time: oneDNN's effective ISA (which ONEDNN_MAX_CPU_ISA can
 * lower) must include AVX512-BF16; without it oneDNN emulates bf16 more
 * slowly than the f32 path. f16 stays on the shadow path: oneDNN 2.6 runs
 * f16 only on AVX512-FP16. A node oneDNN has no implementation for (a
 * broadcast operand it cannot take) is declined, nothing written, and runs
 * on the shadow path.
 *
 * Each call makes its primitive descriptor; oneDNN's primitive cache keeps
 * the compiled kernels, so a repeated shape costs a look-up. Convolutions
 * let oneDNN choose its layouts (blocked, for its AVX512-BF16 kernels:
 * twice as fast as its im2col GEMM on plain NCHW) and reorder around them.
 */
#include "cpu_dnnl.h"
#include "cpu_kernels.h"

#include <string.h>

static int lp_state = -1; /* -1: not asked yet */

const char *cpu_lowp_native(void)
{
    if (lp_state < 0) {
        dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
        lp_state = ((unsigned)isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16 &&
                   cpu_dnnl_engine();
    }
    return lp_state ? "oneDNN bf16 (avx512_bf16)" : NULL;
}

/* ---- operands ------------------------------------------------------------ */

/* A matrix operand of an nd-dim product: t's contiguous storage of shape
 * [ndim] with 1s added in front, its last two dims read swapped when tr. */
static cpu_dnnl_io mat(int arg, const int64_t *shape, int ndim, int nd, bool tr, dnnl_data_type_t dt,
                 const void *p)
{
    dnnl_dims_t d, s;
    int64_t stride = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int j = i - (nd - ndim);
        d[i] = j >= 0 ? shape[j] : 1;
        s[i] = stride;
        stride *= d[i];
    }
    if (tr) {
        int64_t t = d[nd - 1];
        d[nd - 1] = d[nd - 2];
        d[nd - 2] = t;
        t = s[nd - 1];
        s[nd - 1] = s[nd - 2];
        s[nd - 2] = t;
    }
    cpu_dnnl_io io = { .arg = arg, .p = p };
    dnnl_memory_desc_init_by_strides(&io.md, nd, d, dt, s);
    return io;
}

/* A rows x cols matrix at p, read transposed when tr. */
static cpu_dnnl_io mat2(int arg, int64_t rows, int64_t cols, bool tr, dnnl_data_type_t dt, const void *p)
{
    return mat(arg, (const int64_t[]){ tr ? cols : rows, tr ? rows : cols }, 2, 2, tr, dt, p);
}

/* dst = src @ wei (+ bias), dst f32. */
static bool lp_matmul(cpu_dnnl_io src, cpu_dnnl_io wei, const cpu_dnnl_io *bias, cpu_dnnl_io dst)
{
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &src.md, &wei.md, bias ? &bias->md : NULL, &dst.md) != dnnl_success)
        return false;
    cpu_dnnl_io io[4] = { src, wei, dst, { 0 } };
    if (bias)
        io[3] = *bias;
    return cpu_dnnl_run(&desc, NULL, io, bias ? 4 : 3);
}

/* ---- the node ------------------------------------------------------------ */

/* Every tensor of n bf16, none empty, no input in two slots (their
 * gradients would have to meet before rounding). */
static bool lp_takes(const te_node *n)
{
    if (!cpu_lowp_native())
        return false; /* no AVX512-BF16: the shadow path is faster than oneDNN's emulation */
    for (int i = 0; i < n->n_in; i++) {
        const te_tensor *x = n->in[i];
        if (!x)
            continue;
        if (x->dtype != TE_BF16 || x->numel == 0)
            return false;
        for (int j = 0; j < i; j++)
            if (n->in[j] == x)
                return false;
    }
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k]->dtype != TE_BF16 || n->out[k]->numel == 0)
            return false;
    return true;
}

/* Scratch f32 results: one per output or input gradient. */
typedef struct lp_bufs {
    float *p[TE_MAX_IN];
    size_t bytes[TE_MAX_IN];
} lp_bufs;

static float *lp_buf(lp_bufs *b, int i, int64_t numel)
{
    b->bytes[i] = (size_t)numel * sizeof(float);
    b->p[i] = te_mem_alloc(b->bytes[i]);
    return b->p[i];
}

static void lp_free(lp_bufs *b)
{
    for (int i = 0; i < TE_MAX_IN; i++)
        te_mem_free(b->p[i], b->bytes[i]);
}

/* A bf16 value as f32 (exact: its bits are the f32's upper half), inline
 * so the loops below vectorise. */
static inline float lp_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ok: output 0 rounded from its f32 result. */
static te_status lp_forward_done(te_node *n, lp_bufs *b, bool ok)
{
    if (ok) {
        te_round_f32(n->out[0], b->p[0], &n->round[0]);
        n->rounded = true;
    }
    lp_free(b);
    return ok ? TE_OK : TE_LOWP_DECLINED;
}

/* ok: each computed input gradient added to the old one in f32 when it
 * accumulates, then rounded once into the gradient buffer. */
static te_status lp_backward_done(te_node *n, lp_bufs *b, bool ok)
{
    for (int i = 0; ok && i < n->n_in; i++) {
        float *g = b->p[i];
        if (!g)
            continue;
        te_tensor *x = n->in[i];
        int acc;
        const uint16_t *old = (const uint16_t *)te_grad_buf(x, &acc);
        if (acc) {
#pragma omp parallel for simd if (x->numel >= TE_PAR_MIN)
            for (int64_t j = 0; j < x->numel; j++)
                g[j] += lp_f32(old[j]);
        }
        te_round_f32(x->grad, g, &n->round[i]);
        n->rounded = true;
    }
    lp_free(b);
    return ok ? TE_OK : TE_LOWP_DECLINED;
}

/* The column sums of a rows x cols bf16 matrix, row by row in f32. */
static void lp_col_sums(const uint16_t *dy, int64_t rows, int64_t cols, float *db)
{
    memset(db, 0, (size_t)cols * sizeof *db);
    for (int64_t i = 0; i < rows; i++) {
        const uint16_t *row = dy + i * cols;
#pragma omp simd
        for (int64_t o = 0; o < cols; o++)
            db[o] += lp_f32(row[o]);
    }
}

#define BF16 dnnl_bf16
#define F32 dnnl_f32

/* ---- linear: y [N,O] = x [N,K] @ w[O,K]^T + b[O] ------------------------- */

te_status cpu_linear_forward_lowp(te_node *n)
{
    if (!lp_takes(n))
        return TE_LOWP_DECLINED;
    const te_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    int64_t N = x->shape[0], K = x->shape[1], O = w->shape[0];
    lp_bufs b = { 0 };
    float *y = lp_buf(&b, 0, N * O);
    cpu_dnnl_io bio = mat2(DNNL_ARG_BIAS, 1, O, false, BF16, bias ? bias->data : NULL);
    bool ok = y && lp_matmul(mat2(DNNL_ARG_SRC, N, K, false, BF16, x->data),
                             mat2(DNNL_ARG_WEIGHTS, K, O, true, BF16, w->data), bias ? &bio : NULL,
                             mat2(DNNL_ARG_DST, N, O, false, F32, y));
    return lp_forward_done(n, &b, ok);
}

te_status cpu_linear_backward_lowp(te_node *n)
{
    if (!lp_takes(n))
        return TE_LOWP_DECLINED;
    te_tensor *x = n->in[0], *w = n->in[1];
    int64_t N = x->shape[0], K = x->shape[1], O = w->shape[0];
    const void *dy = n->out[0]->grad->data;
    lp_bufs b = { 0 };
    bool ok = true;
    if (te_needs_grad(x)) { /* dx [N,K] = dy [N,O] @ w [O,K] */
        float *g = lp_buf(&b, 0, N * K);
        ok = g && lp_matmul(mat2(DNNL_ARG_SRC, N, O, false, BF16, dy),
                            mat2(DNNL_ARG_WEIGHTS, O, K, false, BF16, w->data), NULL,
                            mat2(DNNL_ARG_DST, N, K, false, F32, g));
    }
    if (ok && te_needs_grad(w)) { /* dw [O,K] = dy^T @ x */
        float *g = lp_buf(&b, 1, O * K);
        ok = g && lp_matmul(mat2(DNNL_ARG_SRC, O, N, true, BF16, dy),
                            mat2(DNNL_ARG_WEIGHTS, N, K, false, BF16, x->data), NULL,
                            mat2(DNNL_ARG_DST, O, K, false, F32, g));
    }
    if (ok && te_needs_grad(n->in[2])) { /* db [O] = column sums of dy */
        float *g = lp_buf(&b, 2, O);
        if ((ok = g != NULL))
            lp_col_sums(dy, N, O, g);
    }
    return lp_backward_done(n, &b, ok);
}

/* ---- matmul: y[..., M, N] = op(a)[..., M, K] @ op(b)[..., K, N] ------------
 * The operands as oneDNN's batched matmul reads them: a's and b's batch
 * dims as y's, 1 where broadcast, op() a swap of the last two strides.
 * When b is one matrix and a is read as is, a's matrices are the rows of
 * one tall matrix, as in cpu_linear.c.
 */
typedef struct lp_mm {
    int nd;
    int64_t M, N, K, rows; /* rows: M times y's batches */
    bool ta, tb;
    bool a_full, b_full; /* batch dims as y's: not broadcast */
    bool tall;
} lp_mm;

/* x's batch dims, 1s added in front, equal y's (none is broadcast). */
static bool batch_full(const te_tensor *x, const te_tensor *y)
{
    for (int i = 0; i < y->ndim - 2; i++) {
        int j = i - (y->ndim - x->ndim);
        if ((j >= 0 ? x->shape[j] : 1) != y->shape[i])
            return false;
    }
    return true;
}

static bool batch_one(const te_tensor *x)
{
    for (int i = 0; i < x->ndim - 2; i++)
        if (x->shape[i] != 1)
            return false;
    return true;
}

static lp_mm lp_mm_of(const te_node *n)
{
    const te_tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];
    lp_mm p = { .nd = y->ndim, .ta = n->a.trans_a, .tb = n->a.trans_b };
    p.M = y->shape[y->ndim - 2];
    p.N = y->shape[y->ndim - 1];
    p.K = a->shape[a->ndim - (p.ta ? 2 : 1)];
    p.rows = y->numel / p.N;
    p.a_full = batch_full(a, y);
    p.b_full = batch_full(b, y);
    p.tall = batch_one(b) && !p.ta;
    return p;
}

te_status cpu_matmul_forward_lowp(te_node *n)
{
    if (!lp_takes(n))
        return TE_LOWP_DECLINED;
    const te_tensor *a = n->in[0], *bt = n->in[1], *y = n->out[0];
    lp_mm p = lp_mm_of(n);
    lp_bufs b = { 0 };
    float *Y = lp_buf(&b, 0, y->numel);
    bool ok = Y != NULL;
    if (ok && p.tall)
        ok = lp_matmul(mat2(DNNL_ARG_SRC, p.rows, p.K, false, BF16, a->data),
                       mat2(DNNL_ARG_WEIGHTS, p.K, p.N, p.tb, BF16, bt->data), NULL,
                       mat2(DNNL_ARG_DST, p.rows, p.N, false, F32, Y));
    else if (ok)
        ok = lp_matmul(mat(DNNL_ARG_SRC, a->shape, a->ndim, p.nd, p.ta, BF16, a->data),
                       mat(DNNL_ARG_WEIGHTS, bt->shape, bt->ndim, p.nd, p.tb, BF16, bt->data), NULL,
                       mat(DNNL_ARG_DST, y->shape, y->ndim, p.nd, false, F32, Y));
    return lp_forward_done(n, &b, ok);
}

/* The tall product's gradients: a [rows,K], op(b) [K,N], dy [rows,N]. */
static bool lp_mm_grads_tall(te_node *n, const lp_mm *p, lp_bufs *b)
{
    const te_tensor *a = n->in[0], *bt = n->in[1];
    const void *G = n->out[0]->grad->data;
    bool ok = true;
    if (te_needs_grad(a)) { /* da [rows,K] = dy @ op(b)^T */
        float *g = lp_buf(b, 0, a->numel);
        ok = g && lp_matmul(mat2(DNNL_ARG_SRC, p->rows, p->N, false, BF16, G),
                            mat2(DNNL_ARG_WEIGHTS, p->N, p->K, !p->tb, BF16, bt->data), NULL,
                            mat2(DNNL_ARG_DST, p->rows, p->K, false, F32, g));
    }
    if (ok && te_needs_grad(bt)) {
        float *g = lp_buf(b, 1, bt->numel);
        if (!p->tb) /* db [K,N] = a^T @ dy */
            ok = g && lp_matmul(mat2(DNNL_ARG_SRC, p->K, p->rows, true, BF16, a->data),
                                mat2(DNNL_ARG_WEIGHTS, p->rows, p->N, false, BF16, G), NULL,
                                mat2(DNNL_ARG_DST, p->K, p->N, false, F32, g));
        else /* b is [N,K]: db = dy^T @ a */
            ok = g && lp_matmul(mat2(DNNL_ARG_SRC, p->N, p->rows, true, BF16, G),
                                mat2(DNNL_ARG_WEIGHTS, p->rows, p->K, false, BF16, a->data), NULL,
                                mat2(DNNL_ARG_DST, p->N, p->K, false, F32, g));
    }
    return ok;
}

/* Batched: each operand's gradient as one batched product, which needs
 * that operand not broadcast (a broadcast one sums over the batches: the
 * shadow path does that). */
static bool lp_mm_grads(te_node *n, const lp_mm *p, lp_bufs *b)
{
    const te_tensor *a = n->in[0], *bt = n->in[1], *y = n->out[0];
    const void *G = y->grad->data;
    const int nd = p->nd;
    if ((te_needs_grad(a) && !p->a_full) || (te_needs_grad(bt) && !p->b_full))
        return false;
    bool ok = true;
    if (te_needs_grad(a)) {
        float *g = lp_buf(b, 0, a->numel);
        cpu_dnnl_io dst = mat(DNNL_ARG_DST, a->shape, a->ndim, nd, false, F32, g);
        if (!g)
            ok = false;
        else if (!p->ta) /* da [..,M,K] = dy @ op(b)^T */
            ok = lp_matmul(mat(DNNL_ARG_SRC, y->shape, y->ndim, nd, false, BF16, G),
                           mat(DNNL_ARG_WEIGHTS, bt->shape, bt->ndim, nd, !p->tb, BF16, bt->data), NULL,
                           dst);
        else /* a is [..,K,M]: da = op(b) @ dy^T */
            ok = lp_matmul(mat(DNNL_ARG_SRC, bt->shape, bt->ndim, nd, p->tb, BF16, bt->data),
                           mat(DNNL_ARG_WEIGHTS, y->shape, y->ndim, nd, true, BF16, G), NULL, dst);
    }
    if (ok && te_needs_grad(bt)) {
        float *g = lp_buf(b, 1, bt->numel);
        cpu_dnnl_io dst = mat(DNNL_ARG_DST, bt->shape, bt->ndim, nd, false, F32, g);
        if (!g)
            ok = false;
        else if (!p->tb) /* db [..,K,N] = op(a)^T @ dy */
            ok = lp_matmul(mat(DNNL_ARG_SRC, a->shape, a->ndim, nd, !p->ta, BF16, a->data),
                           mat(DNNL_ARG_WEIGHTS, y->shape, y->ndim, nd, false, BF16, G), NULL, dst);
        else /* b is [..,N,K]: db = dy^T @ op(a) */
            ok = lp_matmul(mat(DNNL_ARG_SRC, y->shape, y->ndim, nd, true, BF16, G),
                           mat(DNNL_ARG_WEIGHTS, a->shape, a->ndim, nd, p->ta, BF16, a->data), NULL,
                           dst);
    }
    return ok;
}

te_status cpu_matmul_backward_lowp(te_node *n)
{
    if (!lp_takes(n))
        return TE_LOWP_DECLINED;
    lp_mm p = lp_mm_of(n);
    lp_bufs b = { 0 };
    bool ok = p.tall ? lp_mm_grads_tall(n, &p, &b) : lp_mm_grads(n, &p, &b);
    return lp_backward_done(n, &b, ok);
}

/* ---- conv2d: y [N,O,OH,OW] = x [N,C,H,W] * w [O,C,KH,KW] + b [O], NCHW ---- */

te_status cpu_conv2d_forward_lowp(te_node *n)
{
    if (!lp_takes(n))
        return TE_LOWP_DECLINED;
    const te_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    lp_bufs b = { 0 };
    float *y = lp_buf(&b, 0, n->out[0]->numel);
    bool ok = y && cpu_dnnl_conv_forward(n, BF16, BF16, F32, x->data, w->data, bias ? bias->data : NULL, y);
    return lp_forward_done(n, &b, ok);
}

te_status cpu_conv2d_backward_lowp(te_node *n)
{
    if (!lp_takes(n))
        return TE_LOWP_DECLINED;
    te_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    const void *dy = n->out[0]->grad->data;
    /* The backward primitives want the forward one as a hint: all bf16. */
    dnnl_primitive_desc_t hint = cpu_dnnl_conv_hint(n, BF16, bias != NULL);
    lp_bufs b = { 0 };
    bool ok = hint != NULL;
    if (ok && te_needs_grad(x)) { /* dx: f32, from bf16 w and dy */
        float *g = lp_buf(&b, 0, x->numel);
        ok = g && cpu_dnnl_conv_backward_data(n, F32, BF16, BF16, hint, g, w->data, dy);
    }
    bool want_b = te_needs_grad(bias);
    if (ok && (te_needs_grad(w) || want_b)) { /* dw (and db): f32, from bf16 x and dy */
        float *gw = lp_buf(&b, 1, w->numel), *gb = want_b ? lp_buf(&b, 2, bias->numel) : NULL;
        ok = gw && (gb || !want_b) && cpu_dnnl_conv_backward_weights(n, BF16, F32, BF16, hint, x->data, dy, gw, gb);
        if (!te_needs_grad(w)) { /* computed with db only: not a gradient to keep */
            te_mem_free(b.p[1], b.bytes[1]);
            b.p[1] = NULL;
        }
    }
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    return lp_backward_done(n, &b, ok);
}
