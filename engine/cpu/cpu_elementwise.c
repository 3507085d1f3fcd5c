/* cpu_elementwise.c — binary ops with broadcasting, scale and activations. */
#include "cpu_kernels.h"
#include "cpu_math.h"

#include <math.h>
#include <string.h>

/* ---- broadcasting ----------------------------------------------------------
 * A binary op walks its output as rows of kernel_geom.h's plan
 * (te_bcast_plan). The innermost stride of each operand is 0 or 1, which
 * keeps the row loops simple enough to vectorise.
 */
/* Offsets of row r's first elements in a and b. */
static inline void bcast_row(const te_bcast *p, int64_t r, int64_t *oa, int64_t *ob)
{
    int64_t ja = 0, jb = 0;
    for (int i = p->k - 2; i >= 0; i--) {
        int64_t idx = r % p->d[i];
        r /= p->d[i];
        ja += idx * p->sa[i];
        jb += idx * p->sb[i];
    }
    *oa = ja;
    *ob = jb;
}

/* Long rows are cut into tiles so one big row still spreads over threads. */
#define TILE 8192

/* ---- binary forward: y = a OP b ------------------------------------------ */

typedef void (*bin_row_fn)(int64_t n, float *restrict y, const float *restrict a, int64_t sa,
                           const float *restrict b, int64_t sb);

/* One row for strides sa, sb in {0, 1}: four loops the compiler vectorises. */
#define BIN_ROW(NAME, EXPR)                                                               \
    static void NAME(int64_t n, float *restrict y, const float *restrict a, int64_t sa,   \
                     const float *restrict b, int64_t sb)                                 \
    {                                                                                     \
        if (sa && sb) {                                                                   \
            _Pragma("omp simd")                                                           \
            for (int64_t i = 0; i < n; i++) {                                             \
                const float u = a[i], v = b[i];                                           \
                y[i] = (EXPR);                                                            \
            }                                                                             \
        } else if (sa) {                                                                  \
            const float v = b[0];                                                         \
            _Pragma("omp simd")                                                           \
            for (int64_t i = 0; i < n; i++) {                                             \
                const float u = a[i];                                                     \
                y[i] = (EXPR);                                                            \
            }                                                                             \
        } else if (sb) {                                                                  \
            const float u = a[0];                                                         \
            _Pragma("omp simd")                                                           \
            for (int64_t i = 0; i < n; i++) {                                             \
                const float v = b[i];                                                     \
                y[i] = (EXPR);                                                            \
            }                                                                             \
        } else {                                                                          \
            const float u = a[0], v = b[0];                                               \
            _Pragma("omp simd")                                                           \
            for (int64_t i = 0; i < n; i++)                                               \
                y[i] = (EXPR);                                                            \
        }                                                                                 \
    }

BIN_ROW(add_row, u + v)
BIN_ROW(sub_row, u - v)
BIN_ROW(mul_row, u * v)
BIN_ROW(div_row, u / v)

static te_status binary_forward(te_node *n, bin_row_fn row)
{
    const te_tensor *a = n->in[0], *b = n->in[1];
    te_tensor *y = n->out[0];
    te_bcast p;
    te_bcast_plan(&p, a, b, y);
    const float *A = te_f32(a), *B = te_f32(b);
    float *Y = te_f32(y);
    const int64_t sa = p.sa[p.k - 1], sb = p.sb[p.k - 1];
    const int64_t per_row = (p.len + TILE - 1) / TILE, tiles = p.rows * per_row;
#pragma omp parallel for if (y->numel > TE_PAR_MIN) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t r = t / per_row, lo = (t % per_row) * TILE, oa, ob;
        int64_t m = p.len - lo < TILE ? p.len - lo : TILE;
        bcast_row(&p, r, &oa, &ob);
        row(m, Y + r * p.len + lo, A + oa + lo * sa, sa, B + ob + lo * sb, sb);
    }
    return TE_OK;
}

/* ---- binary backward ------------------------------------------------------
 * dL/da and dL/db are elementwise terms over the output, g the output's
 * gradient, summed into each input over the dims it was broadcast along.
 */

typedef void (*grad_row_fn)(int64_t n, const float *restrict g, const float *restrict a, int64_t sa,
                            const float *restrict b, int64_t sb, float *restrict d, int64_t sd,
                            bool acc);

/* d[i*sd] (+)= EXPR(gy, u, v) over one row. Where d's stride is 0 the row
 * sums into one element, and the caller always passes acc. */
#define GRAD_ROW(NAME, EXPR)                                                                 \
    static void NAME(int64_t n, const float *restrict g, const float *restrict a, int64_t sa,  \
                     const float *restrict b, int64_t sb, float *restrict d, int64_t sd,       \
                     bool acc)                                                                 \
    {                                                                                          \
        if (sa && sb && sd) {                                                                  \
            if (acc) {                                                                         \
                _Pragma("omp simd")                                                            \
                for (int64_t i = 0; i < n; i++) {                                              \
                    const float gy = g[i], u = a[i], v = b[i];                                 \
                    (void)u, (void)v;                                                          \
                    d[i] += (EXPR);                                                            \
                }                                                                              \
            } else {                                                                           \
                _Pragma("omp simd")                                                            \
                for (int64_t i = 0; i < n; i++) {                                              \
                    const float gy = g[i], u = a[i], v = b[i];                                 \
                    (void)u, (void)v;                                                          \
                    d[i] = (EXPR);                                                             \
                }                                                                              \
            }                                                                                  \
        } else { /* strided: no simd, lanes could sum into one element */                     \
            if (acc)                                                                           \
                for (int64_t i = 0; i < n; i++) {                                              \
                    const float gy = g[i], u = a[i * sa], v = b[i * sb];                       \
                    (void)u, (void)v;                                                          \
                    d[i * sd] += (EXPR);                                                       \
                }                                                                              \
            else                                                                               \
                for (int64_t i = 0; i < n; i++) {                                              \
                    const float gy = g[i], u = a[i * sa], v = b[i * sb];                       \
                    (void)u, (void)v;                                                          \
                    d[i * sd] = (EXPR);                                                        \
                }                                                                              \
        }                                                                                      \
    }

GRAD_ROW(pass_grad, gy)
GRAD_ROW(neg_grad, -gy)
GRAD_ROW(mul_grad_a, gy * v)
GRAD_ROW(mul_grad_b, gy * u)
GRAD_ROW(div_grad_a, gy / v)
GRAD_ROW(div_grad_b, -gy * ((u / v) / v)) /* PyTorch's order of operations */

/* Writes the gradient of input `which` (0 a, 1 b). An input that spans the
 * whole output gets each element once, so its rows run in parallel; a
 * broadcast one sums many rows into the same elements, serially, which also
 * keeps the sum order fixed whatever the thread count. */
static void binary_grad(te_node *n, int which, grad_row_fn row)
{
    te_tensor *x = n->in[which];
    if (!te_needs_grad(x))
        return;
    const te_tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];
    int acc;
    float *D = te_grad_buf(x, &acc);
    te_bcast p;
    te_bcast_plan(&p, a, b, y);
    const float *A = te_f32(a), *B = te_f32(b), *G = te_f32(y->grad);
    /* Add's and Sub's rows read neither operand (te_op_bwd_reads: none), so
     * graph mode may have left them out of memory: point at the gradient,
     * which spans every index an operand's row takes. */
    if (row == pass_grad || row == neg_grad)
        A = B = G;
    const int64_t sa = p.sa[p.k - 1], sb = p.sb[p.k - 1], sd = which ? sb : sa;
    const bool full = x->numel == y->numel;
    if (!full && !acc)
        memset(D, 0, (size_t)x->numel * sizeof *D);
    const bool add = acc || !full;
    const int64_t per_row = (p.len + TILE - 1) / TILE, tiles = p.rows * per_row;
#pragma omp parallel for if (full && y->numel > TE_PAR_MIN) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t r = t / per_row, lo = (t % per_row) * TILE, oa, ob;
        int64_t m = p.len - lo < TILE ? p.len - lo : TILE;
        bcast_row(&p, r, &oa, &ob);
        int64_t od = which ? ob : oa;
        row(m, G + r * p.len + lo, A + oa + lo * sa, sa, B + ob + lo * sb, sb, D + od + lo * sd, sd,
            add);
    }
}

te_status cpu_add_forward(te_node *n) { return binary_forward(n, add_row); }
te_status cpu_add_backward(te_node *n)
{
    binary_grad(n, 0, pass_grad);
    binary_grad(n, 1, pass_grad);
    return TE_OK;
}

te_status cpu_sub_forward(te_node *n) { return binary_forward(n, sub_row); }
te_status cpu_sub_backward(te_node *n)
{
    binary_grad(n, 0, pass_grad);
    binary_grad(n, 1, neg_grad);
    return TE_OK;
}

te_status cpu_mul_forward(te_node *n) { return binary_forward(n, mul_row); }
te_status cpu_mul_backward(te_node *n)
{
    binary_grad(n, 0, mul_grad_a);
    binary_grad(n, 1, mul_grad_b);
    return TE_OK;
}

te_status cpu_div_forward(te_node *n) { return binary_forward(n, div_row); }
te_status cpu_div_backward(te_node *n)
{
    binary_grad(n, 0, div_grad_a);
    binary_grad(n, 1, div_grad_b);
    return TE_OK;
}

/* ---- masked fill: y = mask != 0 ? value : x ------------------------------
 * x spans the output; the mask broadcasts (stride 0 or 1 within a row). A
 * select, not arithmetic: x's NaN or Inf under the mask is gone, as in
 * PyTorch's masked_fill, and so is its gradient. */

te_status cpu_masked_fill_forward(te_node *n)
{
    const te_tensor *x = n->in[0], *m = n->in[1];
    te_tensor *y = n->out[0];
    te_bcast p;
    te_bcast_plan(&p, x, m, y);
    const float *X = te_f32(x), *M = te_f32(m);
    float *Y = te_f32(y);
    const float value = n->a.value;
    const int64_t sm = p.sb[p.k - 1];
#pragma omp parallel for if (y->numel > TE_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < p.rows; r++) {
        int64_t ox, om;
        bcast_row(&p, r, &ox, &om);
        const float *xr = X + ox, *mr = M + om;
        float *yr = Y + r * p.len;
#pragma omp simd
        for (int64_t i = 0; i < p.len; i++)
            yr[i] = mr[i * sm] != 0.0f ? value : xr[i];
    }
    return TE_OK;
}

/* dx = mask != 0 ? 0 : dy; reads the mask only (the op table's reads). */
te_status cpu_masked_fill_backward(te_node *n)
{
    te_tensor *x = n->in[0];
    if (!te_needs_grad(x))
        return TE_OK; /* the mask gets none: it is a constant */
    const te_tensor *m = n->in[1], *y = n->out[0];
    int acc;
    float *D = te_grad_buf(x, &acc);
    te_bcast p;
    te_bcast_plan(&p, x, m, y);
    const float *M = te_f32(m), *G = te_f32(y->grad);
    const int64_t sm = p.sb[p.k - 1];
#pragma omp parallel for if (y->numel > TE_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < p.rows; r++) {
        int64_t ox, om;
        bcast_row(&p, r, &ox, &om);
        const float *mr = M + om, *gr = G + r * p.len;
        float *dr = D + r * p.len;
        if (acc) {
#pragma omp simd
            for (int64_t i = 0; i < p.len; i++)
                dr[i] += mr[i * sm] != 0.0f ? 0.0f : gr[i];
        } else {
#pragma omp simd
            for (int64_t i = 0; i < p.len; i++)
                dr[i] = mr[i * sm] != 0.0f ? 0.0f : gr[i];
        }
    }
    return TE_OK;
}

/* ---- unary ops --------------------------------------------------------------
 * UNARY(name, y of x, dy/dx, V, T): the forward and backward kernels of an
 * op whose output has its input's shape. The derivative is written in terms
 * of V, either x (the input, T = in) or y (the output, T = out, where that is
 * cheaper than recomputing, as in PyTorch). The backward reads only that
 * tensor: graph mode frees or never writes the other (te_op_bwd_reads()).
 */
#define UNARY_FORWARD(NAME, FWD)                                                                   \
    te_status cpu_##NAME##_forward(te_node *n)                                                     \
    {                                                                                              \
        const float *restrict X = te_f32(n->in[0]);                                                \
        float *restrict Y = te_f32(n->out[0]);                                                     \
        const int64_t N = n->out[0]->numel;                                                        \
        const float s = n->a.scale;                                                                \
        (void)s;                                                                                   \
        _Pragma("omp parallel for simd if (parallel : N > TE_PAR_MIN) schedule(static)")           \
        for (int64_t i = 0; i < N; i++) {                                                          \
            const float x = X[i];                                                                  \
            Y[i] = (FWD);                                                                          \
        }                                                                                          \
        return TE_OK;                                                                              \
    }

#define UNARY(NAME, FWD, DER, V, T)                                                                \
    UNARY_FORWARD(NAME, FWD)                                                                       \
    te_status cpu_##NAME##_backward(te_node *n)                                                    \
    {                                                                                              \
        if (!te_needs_grad(n->in[0]))                                                              \
            return TE_OK;                                                                          \
        int acc;                                                                                   \
        float *restrict D = te_grad_buf(n->in[0], &acc);                                           \
        const float *restrict S = te_f32(n->T[0]);                                                 \
        const float *restrict G = te_f32(n->out[0]->grad);                                         \
        const int64_t N = n->out[0]->numel;                                                        \
        if (acc) {                                                                                 \
            _Pragma("omp parallel for simd if (parallel : N > TE_PAR_MIN) schedule(static)")       \
            for (int64_t i = 0; i < N; i++) {                                                      \
                const float V = S[i];                                                              \
                D[i] += G[i] * (DER);                                                              \
            }                                                                                      \
        } else {                                                                                   \
            _Pragma("omp parallel for simd if (parallel : N > TE_PAR_MIN) schedule(static)")       \
            for (int64_t i = 0; i < N; i++) {                                                      \
                const float V = S[i];                                                              \
                D[i] = G[i] * (DER);                                                               \
            }                                                                                      \
        }                                                                                          \
        return TE_OK;                                                                              \
    }


/* Scale's derivative is the constant s: its backward reads neither tensor. */
UNARY_FORWARD(scale, x * s)
te_status cpu_scale_backward(te_node *n)
{
    if (!te_needs_grad(n->in[0]))
        return TE_OK;
    int acc;
    float *restrict D = te_grad_buf(n->in[0], &acc);
    const float *restrict G = te_f32(n->out[0]->grad);
    const int64_t N = n->out[0]->numel;
    const float s = n->a.scale;
    if (acc) {
#pragma omp parallel for simd if (N > TE_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < N; i++)
            D[i] += G[i] * s;
    } else {
#pragma omp parallel for simd if (N > TE_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < N; i++)
            D[i] = G[i] * s;
    }
    return TE_OK;
}
/* NaN passes through relu, forward and backward, as in PyTorch. */
UNARY(relu, x < 0.0f ? 0.0f : x, (float)!(y <= 0.0f), y, out) /* the derivative as a mask: it vectorises */
UNARY(tanh, tanhf(x), 1.0f - y * y, y, out)
UNARY(sigmoid, 1.0f / (1.0f + expf(-x)), y * (1.0f - y), y, out)
UNARY(exp, expf(x), y, y, out)
UNARY(log, logf(x), 1.0f / x, x, in)
UNARY(sqrt, sqrtf(x), 0.5f / y, y, out)

/* Exact GELU, x Phi(x), and its derivative Phi(x) + x phi(x), through
 * cpu_math.h's vectorising exp and erf (libm's are scalar calls). The
 * kernels are cloned per vector unit, so the OpenMP loops run them on
 * CPU_CHUNK-element pieces. */
CPU_CLONES static void gelu_chunk(const float *restrict X, float *restrict Y, int64_t m)
{
#pragma omp simd
    for (int64_t i = 0; i < m; i++)
        Y[i] = cpu_gelu(X[i]);
}

CPU_CLONES static void gelu_grad_chunk(const float *restrict X, const float *restrict G,
                                       float *restrict D, int64_t m, int acc)
{
    if (acc) {
#pragma omp simd
        for (int64_t i = 0; i < m; i++)
            D[i] += G[i] * cpu_gelu_grad(X[i]);
    } else {
#pragma omp simd
        for (int64_t i = 0; i < m; i++)
            D[i] = G[i] * cpu_gelu_grad(X[i]);
    }
}

te_status cpu_gelu_forward(te_node *n)
{
    const float *X = te_f32(n->in[0]);
    float *Y = te_f32(n->out[0]);
    const int64_t N = n->out[0]->numel;
#pragma omp parallel for if (N > TE_PAR_MIN) schedule(static)
    for (int64_t c = 0; c < N; c += CPU_CHUNK)
        gelu_chunk(X + c, Y + c, N - c < CPU_CHUNK ? N - c : CPU_CHUNK);
    return TE_OK;
}

te_status cpu_gelu_backward(te_node *n)
{
    if (!te_needs_grad(n->in[0]))
        return TE_OK;
    int acc;
    float *D = te_grad_buf(n->in[0], &acc);
    const float *X = te_f32(n->in[0]);
    const float *G = te_f32(n->out[0]->grad);
    const int64_t N = n->out[0]->numel;
#pragma omp parallel for if (N > TE_PAR_MIN) schedule(static)
    for (int64_t c = 0; c < N; c += CPU_CHUNK)
        gelu_grad_chunk(X + c, G + c, D + c, N - c < CPU_CHUNK ? N - c : CPU_CHUNK, acc);
    return TE_OK;
}
