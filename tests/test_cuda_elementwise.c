/* test_cuda_elementwise.c — the CUDA backend's elementwise, shape and cast
 * kernels against the CPU backend's.
 *
 * Host-only tests run everywhere: the per-element functions the kernels
 * run (k_math.h, compiled here as plain C) give the CPU's bits for
 * dropout's mask, f16/bf16 rounding and widening, the rounding counts and
 * GELU; the broadcast and transpose index arithmetic matches numpy's rules
 * and the CPU's transpose; every fusable op has a kernel formula.
 *
 * Device tests run each op's CPU kernel on a node the public op API made,
 * then the CUDA kernel on a copy of the node whose tensors live on the
 * device, and compare: f32 within 1e-5 relative (1e-7 absolute near 0),
 * casts and roundings bit for bit, forward and backward, acc 0 and 1.
 * Without a device they print why once and check nothing more.
 */
#include "cpu/cpu_math.h"
#include "cuda/cuda_cast.h"
#include "cuda/cuda_elementwise.h"
#include "cuda/cuda_shape.h"
#include "cuda/k_shape.h"
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* xorshift32: random f32 bit patterns, the same on every machine. */
static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* ---- host-only: the per-element functions ------------------------------------ */

START_TEST(test_dropout_mask_host)
{
    const uint64_t seeds[] = { 1, 42, 0xdeadbeefULL, te_dropout_seed("block0/dropout", 7) };
    const float ps[] = { 1e-7f, 0.1f, 0.5f, 0.9f, 0.999f };
    for (size_t s = 0; s < sizeof seeds / sizeof *seeds; s++) {
        const uint64_t key = te_rand_key(seeds[s], 0);
        ck_assert_msg(k_rand_key(seeds[s], 0) == key, "seed %zu: key differs", s);
        for (size_t q = 0; q < sizeof ps / sizeof *ps; q++) {
            const uint64_t thr = te_dropout_threshold(ps[q]);
            ck_assert_msg(k_dropout_threshold(ps[q]) == thr, "p %g: threshold differs", (double)ps[q]);
            int64_t kept = 0, bad = -1;
            for (int64_t i = 0; i < 200000; i++) {
                const int64_t at = i < 100000 ? i : ((int64_t)1 << 40) | i; /* large flat indices too */
                const bool want = te_dropout_kept(key, thr, at);
                if (k_dropout_kept(key, thr, at) != want && bad < 0)
                    bad = at;
                kept += want;
            }
            ck_assert_msg(bad < 0, "seed %zu p %g: element %lld differs", s, (double)ps[q], (long long)bad);
            /* the mask is a real one: about 1 - p of the elements kept */
            ck_assert_msg(fabs((double)kept / 200000 - (1.0 - ps[q])) < 0.01, "p %g: %lld of 200000 kept",
                          (double)ps[q], (long long)kept);
        }
    }
}
END_TEST

/* Check's assertions talk to the runner on every pass: the loops below
 * keep their first mismatch and assert once. */
static void check_round_one(float f, uint32_t *bad, int *nbad)
{
    if (k_f32_to_f16(f) != te_f32_to_f16(f) || k_f32_to_bf16(f) != te_f32_to_bf16(f)) {
        if (!(*nbad)++)
            *bad = bits(f);
    }
}

START_TEST(test_round_widen_host)
{
    uint32_t bad = 0;
    int nbad = 0, nwide = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = te_f16_to_f32((uint16_t)h), b = te_bf16_to_f32((uint16_t)h);
        if (bits(k_f16_to_f32((uint16_t)h)) != bits(a) || bits(k_bf16_to_f32((uint16_t)h)) != bits(b))
            nwide++;
        /* every half, its neighbours in f32, and the midpoints to the next */
        const uint32_t ua = bits(a), ub = bits(b);
        const float around[] = { a, from_bits(ua + 1), from_bits(ua - 1), b, from_bits(ub + 1), from_bits(ub - 1),
                                 from_bits(ua + 0x1000u), from_bits(ua + 0x0fffu), from_bits(ub + 0x8000u) };
        for (size_t k = 0; k < sizeof around / sizeof *around; k++)
            check_round_one(around[k], &bad, &nbad);
    }
    ck_assert_msg(nwide == 0, "%d half patterns widen differently", nwide);
    const float edges[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, from_bits(0x7f800001u), from_bits(0xffc12345u),
                            3.40282347e38f, 65504.0f, 65519.996f, 65520.0f, -65520.0f, 5.9604645e-8f, 2.9802322e-8f,
                            from_bits(0x33000001u), 1e-45f, 6.1035156e-5f, 3.3895314e38f, 3.3961e38f };
    for (size_t k = 0; k < sizeof edges / sizeof *edges; k++)
        check_round_one(edges[k], &bad, &nbad);
    uint32_t s = 12345;
    for (int i = 0; i < 2000000; i++)
        check_round_one(from_bits(next_rand(&s)), &bad, &nbad);
    ck_assert_msg(nbad == 0, "%d values round differently, the first 0x%08x: f16 0x%04x (CPU 0x%04x), bf16 0x%04x "
                  "(CPU 0x%04x)", nbad, bad, k_f32_to_f16(from_bits(bad)), te_f32_to_f16(from_bits(bad)),
                  k_f32_to_bf16(from_bits(bad)), te_f32_to_bf16(from_bits(bad)));
}
END_TEST

/* The counts k_cast.cu makes per element, summed here, against
 * te_round_block's on the same values. */
START_TEST(test_round_counts_host)
{
    enum { N = 4099 };
    static float src[N];
    static uint16_t dst[N];
    uint32_t s = 777;
    for (int i = 0; i < N; i++) {
        const float mag = powf(2.0f, (float)(next_rand(&s) % 80) - 40.0f); /* 2^-40 .. 2^39 */
        src[i] = (next_rand(&s) & 1 ? -1.0f : 1.0f) * mag * (1.0f + (float)(next_rand(&s) % 1000) / 1000.0f);
    }
    src[0] = NAN;
    src[1] = INFINITY;
    src[2] = 0.0f;
    src[3] = 1e30f; /* beyond both... */
    src[4] = 3.4e38f; /* ...and bf16's max */
    src[5] = 1e-45f; /* below bf16 too */
    src[6] = -1e-40f;
    const te_dtype dts[] = { TE_F16, TE_BF16 };
    for (int d = 0; d < 2; d++) {
        te_round_stats cpu = { .dtype = dts[d] };
        te_round_block(src, dst, dts[d], N, &cpu);
        k_round_counts k = { 0, 0, 0, 0, 0 };
        int bad = -1;
        for (int i = 0; i < N; i++) {
            const uint16_t r = dts[d] == TE_F16 ? k_f32_to_f16(src[i]) : k_f32_to_bf16(src[i]);
            if (r != dst[i] && bad < 0)
                bad = i;
            k_round_count(bits(src[i]), r, dts[d] == TE_F16 ? 0x7c00u : 0x7f80u, &k);
        }
        ck_assert_msg(bad < 0, "%s element %d rounds differently", te_dtype_name(dts[d]), bad);
        ck_assert_msg(cpu.overflow > 0 && cpu.underflow > 0, "%s: the values should overflow and underflow",
                      te_dtype_name(dts[d]));
        ck_assert_msg((int64_t)k.over == cpu.overflow && (int64_t)k.under == cpu.underflow &&
                          (int64_t)k.nonzero == cpu.nonzero && from_bits(k.amax) == cpu.absmax,
                      "%s: counts %llu %llu %llu %g, CPU %lld %lld %lld %g", te_dtype_name(dts[d]), k.over, k.under,
                      k.nonzero, (double)from_bits(k.amax), (long long)cpu.overflow, (long long)cpu.underflow,
                      (long long)cpu.nonzero, (double)cpu.absmax);
    }
}
END_TEST

START_TEST(test_gelu_host)
{
    int nbad = 0;
    float bad = 0.0f;
    for (int i = -200000; i <= 200000; i++) {
        const float x = (float)i * 1e-4f * (i % 7 == 0 ? 100.0f : 1.0f);
        if ((bits(k_gelu(x)) != bits(cpu_gelu(x)) || bits(k_gelu_grad(x)) != bits(cpu_gelu_grad(x))) && !nbad++)
            bad = x;
    }
    ck_assert_msg(nbad == 0, "%d values differ, the first gelu(%.9g) = %.9g (CPU %.9g), gelu' %.9g (CPU %.9g)", nbad,
                  (double)bad, (double)k_gelu(bad), (double)cpu_gelu(bad), (double)k_gelu_grad(bad),
                  (double)cpu_gelu_grad(bad));
}
END_TEST

/* ---- host-only: index arithmetic --------------------------------------------- */

typedef struct {
    int na, nb;
    int64_t a[4], b[4];
} shape_pair;

static const shape_pair pairs[] = {
    { 2, 2, { 4, 3 }, { 4, 3 } },       { 2, 1, { 4, 3 }, { 3 } },        { 3, 3, { 2, 1, 3 }, { 1, 4, 1 } },
    { 1, 2, { 3 }, { 4, 3 } },          { 2, 1, { 5, 1 }, { 1 } },        { 2, 2, { 200, 2 }, { 1, 2 } },
    { 1, 2, { 1 }, { 100, 10 } },       { 4, 2, { 2, 3, 1, 5 }, { 4, 1 } }, { 3, 3, { 1, 3, 1 }, { 2, 1, 4 } },
    { 4, 4, { 2, 1, 3, 1 }, { 2, 4, 1, 5 } },
};

/* Flat offset in an operand of output multi-index idx (numpy's rules). */
static int64_t numpy_offset(const te_tensor *t, const te_tensor *y, const int64_t *idx)
{
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++) {
        const int64_t d = t->shape[i], v = idx[y->ndim - t->ndim + i];
        off = off * d + (d == 1 ? 0 : v);
    }
    return off;
}

static void unflatten(const te_tensor *y, int64_t i, int64_t *idx)
{
    for (int d = y->ndim - 1; d >= 0; d--) {
        idx[d] = i % y->shape[d];
        i /= y->shape[d];
    }
}

START_TEST(test_broadcast_index_host)
{
    for (size_t c = 0; c < sizeof pairs / sizeof *pairs; c++) {
        te_tensor *a = te_tensor_zeros(TE_F32, pairs[c].na, pairs[c].a);
        te_tensor *b = te_tensor_zeros(TE_F32, pairs[c].nb, pairs[c].b);
        te_tensor *y = te_add(a, b);
        ck_assert_msg(y != NULL, "case %zu: %s", c, te_error());
        k_bcast p;
        cuda_bcast_plan(&p, a, b, y);
        int64_t idx[4], bad = -1;
        for (int64_t i = 0; i < y->numel; i++) {
            int64_t oa, ob;
            k_bcast_offsets(&p, i, &oa, &ob);
            unflatten(y, i, idx);
            if ((oa != numpy_offset(a, y, idx) || ob != numpy_offset(b, y, idx)) && bad < 0)
                bad = i;
        }
        ck_assert_msg(bad < 0, "case %zu element %lld: wrong offsets", c, (long long)bad);
        /* the gradient's split: element j of x sums the output elements
         * that map to it, in increasing output order */
        for (int which = 0; which < 2; which++) {
            const te_tensor *x = which ? b : a;
            k_reduce r;
            k_reduce_make(&p, which, &r);
            ck_assert_msg(r.nx == x->numel && r.nx * r.R == y->numel, "case %zu x%d: nx %lld R %lld", c, which,
                          (long long)r.nx, (long long)r.R);
            for (int64_t j = 0; j < r.nx; j++) {
                int64_t y0, a0, b0, t = 0;
                bool ok = true;
                k_reduce_kept(&r, j, &y0, &a0, &b0);
                for (int64_t i = 0; i < y->numel && ok; i++) {
                    unflatten(y, i, idx);
                    if (numpy_offset(x, y, idx) != j)
                        continue;
                    int64_t oy, oa, ob;
                    k_reduce_term(&r, t++, &oy, &oa, &ob);
                    ok = t <= r.R && y0 + oy == i && a0 + oa == numpy_offset(a, y, idx) &&
                         b0 + ob == numpy_offset(b, y, idx);
                }
                ck_assert_msg(ok && t == r.R, "case %zu x%d element %lld: term %lld wrong or missing (R %lld)", c,
                              which, (long long)j, (long long)t - 1, (long long)r.R);
            }
        }
    }
}
END_TEST

START_TEST(test_transpose_index_host)
{
    const struct {
        int nd;
        int64_t s[4];
        int d0, d1;
    } cases[] = { { 2, { 3, 5 }, 0, 1 }, { 3, { 2, 3, 4 }, 0, 2 }, { 4, { 2, 3, 4, 5 }, 1, 2 }, { 4, { 2, 3, 4, 5 }, 1, 3 } };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        te_tensor *x = te_tensor_new(TE_F32, cases[c].nd, cases[c].s);
        for (int64_t i = 0; i < x->numel; i++)
            te_f32(x)[i] = (float)i;
        te_tensor *y = te_transpose(x, cases[c].d0, cases[c].d1);
        ck_assert_msg(y != NULL, "%s", te_error());
        k_tr_dims d = { 1, x->shape[cases[c].d0], 1, x->shape[cases[c].d1], 1 };
        for (int i = 0; i < x->ndim; i++) {
            if (i < cases[c].d0)
                d.pre *= x->shape[i];
            else if (i > cases[c].d0 && i < cases[c].d1)
                d.mid *= x->shape[i];
            else if (i > cases[c].d1)
                d.post *= x->shape[i];
        }
        int64_t bad = -1;
        for (int64_t t = 0; t < y->numel; t++)
            if (te_f32(y)[t] != (float)k_tr_source(d, t) && bad < 0)
                bad = t;
        ck_assert_msg(bad < 0, "case %zu element %lld: source %lld, CPU %g", c, (long long)bad,
                      (long long)k_tr_source(d, bad), (double)te_f32(y)[bad < 0 ? 0 : bad]);
    }
}
END_TEST

START_TEST(test_fusable_ops_have_formulas_host)
{
    for (int op = 0; op < TE_OP_COUNT; op++) {
        const te_op_info *info = te_op_info_of((te_op)op);
        const int k = cuda_ew_op((te_op)op);
        if (info->ew == TE_EW_NONE && info->fuse != TE_FUSE_ACT) {
            ck_assert_msg(k < 0, "%s has a fused formula but is not fusable", te_op_type_name((te_op)op));
            continue;
        }
        ck_assert_msg(k >= 0, "%s is fusable but has no CUDA formula", te_op_type_name((te_op)op));
        ck_assert_msg((info->ew == TE_EW_BINARY) == (k <= K_OP_DIV), "%s: binary and unary mixed up",
                      te_op_type_name((te_op)op));
    }
}
END_TEST

/* ---- device: helpers ----------------------------------------------------------- */

/* Every test probes in its own (forked) child through tu_cuda_device:
 * CUDA does not survive a fork, so the runner must not start it. */
#define NEED_DEVICE()                                                                              \
    do {                                                                                           \
        if (!tu_cuda_device("cuda_elementwise"))                                                   \
            return;                                                                                \
    } while (0)

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                \
    } while (0)

/* A device copy of t (data only; grad NULL), freed with dev_free. NaN-filled
 * instead of copied when junk: where a kernel must write every element. */
static te_tensor *dev_tensor(const te_tensor *t, bool junk)
{
    te_tensor *d = calloc(1, sizeof *d);
    ck_assert_ptr_nonnull(d);
    *d = *t;
    d->grad = NULL;
    d->grad_valid = false;
    d->node = NULL;
    d->device = TE_DEV_CUDA;
    d->data = NULL;
    CUDA_CHECK(cudaMalloc(&d->data, t->nbytes ? t->nbytes : 4));
    if (junk)
        CUDA_CHECK(cudaMemset(d->data, 0xff, t->nbytes));
    else
        CUDA_CHECK(cudaMemcpy(d->data, t->data, t->nbytes, cudaMemcpyHostToDevice));
    return d;
}

static void dev_free(te_tensor *d)
{
    if (!d)
        return;
    dev_free(d->grad);
    cudaFree(d->data);
    free(d);
}

static void *dev_read(const te_tensor *d)
{
    void *h = malloc(d->nbytes ? d->nbytes : 4);
    ck_assert_ptr_nonnull(h);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h, d->data, d->nbytes, cudaMemcpyDeviceToHost));
    return h;
}

/* The device's tensor d against the CPU's c: f32 within 1e-5 relative
 * (1e-7 absolute near 0), NaN where the CPU has NaN; other dtypes bit for
 * bit. */
static void assert_same(const te_tensor *d, const te_tensor *c, const char *what)
{
    ck_assert_msg(d->numel == c->numel && d->dtype == c->dtype, "%s: shape or dtype differs", what);
    void *h = dev_read(d);
    if (c->dtype == TE_F32) {
        const float *g = h, *w = te_f32(c);
        int64_t bad = -1;
        for (int64_t i = 0; i < c->numel && bad < 0; i++) {
            const bool ok = isnan(w[i]) ? isnan(g[i])
                                        : fabsf(g[i] - w[i]) <= 1e-5f * fmaxf(fabsf(g[i]), fabsf(w[i])) + 1e-7f ||
                                              g[i] == w[i];
            bad = ok ? -1 : i;
        }
        ck_assert_msg(bad < 0, "%s: element %lld is %.9g, CPU %.9g", what, (long long)bad,
                      (double)g[bad < 0 ? 0 : bad], (double)w[bad < 0 ? 0 : bad]);
    } else {
        ck_assert_msg(memcmp(h, c->data, c->nbytes) == 0, "%s: bits differ from the CPU's", what);
    }
    free(h);
}

/* n's forward on the device: a copy of the node on device copies of its
 * inputs, its output NaN-filled; returned for the backward. */
static te_node dev_forward(const te_node *n)
{
    te_node d = *n;
    for (int i = 0; i < n->n_in; i++)
        d.in[i] = n->in[i] ? dev_tensor(n->in[i], false) : NULL;
    d.out[0] = dev_tensor(n->out[0], true);
    return d;
}

static void dev_node_free(te_node *d)
{
    for (int i = 0; i < d->n_in; i++)
        dev_free(d->in[i]);
    dev_free(d->out[0]);
}

/* The backward of CPU node n and its device copy d with output gradient
 * dy (values over the output), acc 0 (the gradients NaN-filled first) or
 * 1 (starting from ramp values); the gradients of every input that
 * requires one compared. */
static void compare_backward(te_node *n, te_node *d, te_kernel_fn dev_bwd, int acc, const char *what)
{
    te_tensor *y = n->out[0];
    y->grad = te_tensor_new(y->dtype, y->ndim, y->shape);
    float dyv[4096];
    ck_assert(y->numel <= 4096);
    for (int64_t i = 0; i < y->numel; i++)
        dyv[i] = 0.25f + (float)((i * 37) % 23) / 7.0f - (i % 3 ? 1.5f : 0.0f);
    if (y->dtype == TE_F32)
        memcpy(y->grad->data, dyv, (size_t)y->numel * 4);
    else
        te_copy_from_f32(y->grad, dyv);
    d->out[0]->grad = dev_tensor(y->grad, false);
    for (int i = 0; i < n->n_in; i++) {
        te_tensor *x = n->in[i];
        if (!te_needs_grad(x))
            continue;
        x->grad = te_tensor_new(x->dtype, x->ndim, x->shape);
        for (int64_t k = 0; k < x->numel; k++)
            te_set(x->grad, k, acc ? 0.5f - 0.125f * (float)(k % 9) : NAN);
        x->grad_valid = acc;
        d->in[i]->grad = dev_tensor(x->grad, false);
        d->in[i]->grad_valid = acc;
    }
    ck_assert_msg(te_backend_cpu.backward[n->op](n) == TE_OK, "%s CPU backward: %s", what, te_error());
    ck_assert_msg(dev_bwd(d) == TE_OK, "%s CUDA backward: %s", what, te_error());
    for (int i = 0; i < n->n_in; i++) {
        if (!te_needs_grad(n->in[i]))
            continue;
        char w[128];
        snprintf(w, sizeof w, "%s d%s (acc %d)", what, te_op_info_of(n->op)->in[i].name, acc);
        assert_same(d->in[i]->grad, n->in[i]->grad, w);
        dev_free(d->in[i]->grad);
        d->in[i]->grad = NULL;
    }
    dev_free(d->out[0]->grad);
    d->out[0]->grad = NULL;
}

static bool same_round(const te_round_stats *a, const te_round_stats *b)
{
    return a->dtype == b->dtype && a->overflow == b->overflow && a->underflow == b->underflow &&
           a->nonzero == b->nonzero && bits(a->absmax) == bits(b->absmax);
}

/* y from the op API on the CPU; its node's forward on the device compared,
 * then the backward at acc 0 and 1. */
static void check_op(te_tensor *y, te_kernel_fn fwd, te_kernel_fn bwd, const char *what)
{
    ck_assert_msg(y && y->node, "%s: %s", what, te_error());
    te_node *n = y->node;
    te_node d = dev_forward(n);
    ck_assert_msg(fwd(&d) == TE_OK, "%s CUDA forward: %s", what, te_error());
    char w[128];
    snprintf(w, sizeof w, "%s forward", what);
    assert_same(d.out[0], y, w);
    if (n->op == TE_OP_CAST)
        ck_assert_msg(same_round(&d.round[0], &n->round[0]) && d.rounded == n->rounded, "%s: round statistics differ",
                      what);
    for (int acc = 0; acc < 2; acc++)
        compare_backward(n, &d, bwd, acc, what);
    dev_node_free(&d);
}

static te_tensor *ramp(int ndim, const int64_t *shape, float lo, float step, bool grad)
{
    te_tensor *t = te_tensor_new(TE_F32, ndim, shape);
    for (int64_t i = 0; i < t->numel; i++)
        te_f32(t)[i] = lo + step * (float)((i * 7) % (t->numel + 3));
    t->requires_grad = grad;
    return t;
}

/* ---- device: the ops --------------------------------------------------------- */

/* The op API's calls are macros (they record the caller's line): functions
 * for the tables. */
#define BIN_FN(op) static te_tensor *op##_fn(te_tensor *a, te_tensor *b) { return te_##op(a, b); }
#define UN_FN(op) static te_tensor *op##_fn(te_tensor *x) { return te_##op(x); }
BIN_FN(add) BIN_FN(sub) BIN_FN(mul) BIN_FN(div)
UN_FN(relu) UN_FN(gelu) UN_FN(tanh) UN_FN(sigmoid) UN_FN(exp) UN_FN(log) UN_FN(sqrt)

START_TEST(test_binary_ops)
{
    NEED_DEVICE();
    const struct {
        te_tensor *(*op)(te_tensor *, te_tensor *);
        te_kernel_fn fwd, bwd;
        const char *name;
    } ops[] = {
        { add_fn, cuda_add_forward, cuda_add_backward, "add" },
        { sub_fn, cuda_sub_forward, cuda_sub_backward, "sub" },
        { mul_fn, cuda_mul_forward, cuda_mul_backward, "mul" },
        { div_fn, cuda_div_forward, cuda_div_backward, "div" },
    };
    for (size_t c = 0; c < sizeof pairs / sizeof *pairs; c++)
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
            te_tensor *a = ramp(pairs[c].na, pairs[c].a, -1.3f, 0.11f, true);
            te_tensor *b = ramp(pairs[c].nb, pairs[c].b, 0.7f, 0.05f, true);
            char w[64];
            snprintf(w, sizeof w, "%s case %zu", ops[o].name, c);
            check_op(ops[o].op(a, b), ops[o].fwd, ops[o].bwd, w);
        }
}
END_TEST

static te_tensor *scale_half(te_tensor *x) { return te_scale(x, -0.5f); }

START_TEST(test_unary_ops)
{
    NEED_DEVICE();
    const struct {
        te_tensor *(*op)(te_tensor *);
        te_kernel_fn fwd, bwd;
        const char *name;
        float lo, hi; /* tanh within +-1.5: 1 - y^2 would magnify an ulp of y */
    } ops[] = {
        { scale_half, cuda_scale_forward, cuda_scale_backward, "scale", -3.0f, 3.0f },
        { relu_fn, cuda_relu_forward, cuda_relu_backward, "relu", -3.0f, 3.0f },
        { gelu_fn, cuda_gelu_forward, cuda_gelu_backward, "gelu", -6.0f, 4.0f },
        { tanh_fn, cuda_tanh_forward, cuda_tanh_backward, "tanh", -1.5f, 1.5f },
        { sigmoid_fn, cuda_sigmoid_forward, cuda_sigmoid_backward, "sigmoid", -8.0f, 4.0f },
        { exp_fn, cuda_exp_forward, cuda_exp_backward, "exp", -5.0f, 3.0f },
        { log_fn, cuda_log_forward, cuda_log_backward, "log", 0.01f, 5.0f },
        { sqrt_fn, cuda_sqrt_forward, cuda_sqrt_backward, "sqrt", 0.01f, 5.0f },
    };
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
        /* ramp's values run over lo + step * [0, numel + 3) */
        te_tensor *x = ramp(te_shape(37, 29), ops[o].lo, (ops[o].hi - ops[o].lo) / (37 * 29 + 3), true);
        check_op(ops[o].op(x), ops[o].fwd, ops[o].bwd, ops[o].name);
    }
}
END_TEST

START_TEST(test_masked_fill_and_dropout)
{
    NEED_DEVICE();
    te_tensor *x = ramp(te_shape(3, 4, 5), -1.0f, 0.1f, true);
    te_tensor *m = te_tensor_zeros(TE_F32, te_shape(4, 1));
    te_f32(m)[1] = te_f32(m)[3] = 1.0f;
    check_op(te_masked_fill(x, m, -INFINITY), cuda_masked_fill_forward, cuda_masked_fill_backward, "masked_fill");
    te_set_training(true);
    const float ps[] = { 0.0f, 0.3f, 0.9f };
    for (size_t q = 0; q < sizeof ps / sizeof *ps; q++) {
        te_tensor *xd = ramp(te_shape(33, 31), -1.0f, 0.01f, true);
        check_op(te_dropout(xd, ps[q]), cuda_dropout_forward, cuda_dropout_backward, "dropout");
    }
    te_set_training(false);
    check_op(te_dropout(ramp(te_shape(10), 1.0f, 1.0f, true), 0.5f), cuda_dropout_forward, cuda_dropout_backward,
             "dropout (eval)");
}
END_TEST

START_TEST(test_shape_ops)
{
    NEED_DEVICE();
    te_tensor *x = ramp(te_shape(2, 3, 4, 5), -1.0f, 0.1f, true);
    check_op(te_reshape(x, 6, -1), cuda_reshape_forward, cuda_reshape_backward, "reshape");
    check_op(te_flatten(x), cuda_reshape_forward, cuda_reshape_backward, "flatten");
    check_op(te_transpose(x, 1, 3), cuda_transpose_forward, cuda_transpose_backward, "transpose");
    check_op(te_transpose(x, -1, 0), cuda_transpose_forward, cuda_transpose_backward, "transpose(-1, 0)");
    te_tensor *w = ramp(te_shape(5, 3), -1.0f, 0.1f, true);
    int32_t iv[] = { 4, 0, 2, 2, 4, 1, 4, 4 };
    te_tensor *idx = te_tensor_from(TE_I32, te_shape(2, 4), iv);
    check_op(te_embedding(w, idx), cuda_embedding_forward, cuda_embedding_backward, "embedding");
}
END_TEST

/* A bad index fails on the device with the CPU front end's message. */
START_TEST(test_embedding_bad_index)
{
    NEED_DEVICE();
    te_tensor *w = ramp(te_shape(5, 3), -1.0f, 0.1f, false);
    int32_t iv[] = { 0, 1, 2, 3, 4, 0, 1, 2 };
    te_tensor *y = te_embedding(w, te_tensor_from(TE_I32, te_shape(2, 4), iv));
    ck_assert_ptr_nonnull(y);
    te_node d = dev_forward(y->node);
    const int32_t bad[] = { 7, -1 };
    CUDA_CHECK(cudaMemcpy((int32_t *)d.in[1]->data + 5, &bad[0], 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy((int32_t *)d.in[1]->data + 6, &bad[1], 4, cudaMemcpyHostToDevice));
    ck_assert_int_eq(cuda_embedding_forward(&d), TE_ERR_ARG);
    char dev_msg[512];
    snprintf(dev_msg, sizeof dev_msg, "%s", te_error());
    iv[5] = 7;
    iv[6] = -1;
    ck_assert_ptr_null(te_embedding(w, te_tensor_from(TE_I32, te_shape(2, 4), iv)));
    const char *cpu = strstr(te_error(), "idx["), *dev = strstr(dev_msg, "idx[");
    ck_assert_msg(cpu && dev && strcmp(cpu, dev) == 0, "device: %s\nCPU: %s", dev_msg, te_error());
    ck_assert_msg(strstr(dev_msg, "idx[1,1] = 7 (flat position 5)"), "%s", dev_msg);
    dev_node_free(&d);
}
END_TEST

START_TEST(test_cast)
{
    NEED_DEVICE();
    const te_dtype dts[] = { TE_F32, TE_F16, TE_BF16 };
    te_tensor *x32 = ramp(te_shape(7, 50), -4.0f, 0.9f, true);
    te_f32(x32)[0] = 70000.0f; /* f16 overflow */
    te_f32(x32)[1] = 1e-9f;    /* f16 underflow */
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < 3; t++) {
            te_tensor *x = s ? te_cast(x32, dts[s]) : x32;
            ck_assert_ptr_nonnull(x);
            x->requires_grad = true;
            char w[64];
            snprintf(w, sizeof w, "cast %s to %s", te_dtype_name(dts[s]), te_dtype_name(dts[t]));
            check_op(te_cast(x, dts[t]), cuda_cast_forward, cuda_cast_backward, w);
        }
    /* to and from i32: forward only, no gradient */
    te_tensor *xi = te_cast(x32, TE_I32);
    ck_assert_ptr_nonnull(xi);
    te_node d = dev_forward(xi->node);
    ck_assert_int_eq(cuda_cast_forward(&d), TE_OK);
    assert_same(d.out[0], xi, "cast f32 to i32");
    dev_node_free(&d);
}
END_TEST

/* The services on the device against te_round_block and te_half_to_f32. */
START_TEST(test_round_widen_services)
{
    NEED_DEVICE();
    enum { N = 65536 };
    static float src[N], back[N], cpu_back[N];
    static uint16_t half[N], cpu_half[N], all[N];
    uint32_t s = 99;
    for (int i = 0; i < N; i++) {
        src[i] = from_bits(next_rand(&s));
        all[i] = (uint16_t)i;
    }
    src[0] = 70000.0f;
    src[1] = 1e-9f;
    const te_dtype dts[] = { TE_F16, TE_BF16 };
    float *dsrc, *dback;
    uint16_t *dhalf;
    CUDA_CHECK(cudaMalloc((void **)&dsrc, sizeof src));
    CUDA_CHECK(cudaMalloc((void **)&dback, sizeof back));
    CUDA_CHECK(cudaMalloc((void **)&dhalf, sizeof half));
    CUDA_CHECK(cudaMemcpy(dsrc, src, sizeof src, cudaMemcpyHostToDevice));
    for (int d = 0; d < 2; d++) {
        te_round_stats cpu = { .dtype = dts[d], .overflow = 3, .absmax = 1.0f };
        te_round_stats dev = cpu; /* both add to what is there */
        te_round_block(src, cpu_half, dts[d], N, &cpu);
        cuda_round(dsrc, dhalf, dts[d], N, &dev);
        CUDA_CHECK(cudaMemcpy(half, dhalf, sizeof half, cudaMemcpyDeviceToHost));
        ck_assert_msg(memcmp(half, cpu_half, sizeof half) == 0, "%s: rounded bits differ", te_dtype_name(dts[d]));
        ck_assert_msg(same_round(&dev, &cpu), "%s: statistics %lld %lld %lld %g, CPU %lld %lld %lld %g",
                      te_dtype_name(dts[d]), (long long)dev.overflow, (long long)dev.underflow,
                      (long long)dev.nonzero, (double)dev.absmax, (long long)cpu.overflow,
                      (long long)cpu.underflow, (long long)cpu.nonzero, (double)cpu.absmax);
        CUDA_CHECK(cudaMemcpy(dhalf, all, sizeof all, cudaMemcpyHostToDevice));
        cuda_widen(dhalf, dback, dts[d], N);
        CUDA_CHECK(cudaMemcpy(back, dback, sizeof back, cudaMemcpyDeviceToHost));
        te_half_to_f32(all, cpu_back, dts[d], N);
        ck_assert_msg(memcmp(back, cpu_back, sizeof back) == 0, "%s: widened bits differ", te_dtype_name(dts[d]));
    }
    cudaFree(dsrc);
    cudaFree(dback);
    cudaFree(dhalf);
}
END_TEST

/* Graph mode's fused chain and in-place activations against the CPU's. */
START_TEST(test_fused)
{
    NEED_DEVICE();
    te_tensor *a = ramp(te_shape(40, 30), -2.0f, 0.01f, false), *b = ramp(te_shape(30), -0.5f, 0.03f, false);
    te_tensor *c = ramp(te_shape(1), 1.5f, 0.0f, false);
    te_tensor *t[4];
    for (int i = 0; i < 4; i++)
        t[i] = te_tensor_new(TE_F32, te_shape(40, 30));
    tg_ew ew = { .n_in = 3, .in = { a, b, c }, .n_steps = 4, .numel = a->numel };
    ew.step[0].op = TE_OP_ADD, ew.step[0].a = 0, ew.step[0].b = 1;
    ew.step[1].op = TE_OP_GELU, ew.step[1].a = 3, ew.step[1].b = -1;
    ew.step[2].op = TE_OP_MUL, ew.step[2].a = 4, ew.step[2].b = 2;
    ew.step[3].op = TE_OP_SCALE, ew.step[3].a = 5, ew.step[3].b = -1, ew.step[3].s = 0.25f;
    for (int i = 0; i < 4; i++)
        ew.out[i] = t[i];
    tg_ew_run(&ew);
    tg_ew dew = ew;
    te_tensor *din[3] = { dev_tensor(a, false), dev_tensor(b, false), dev_tensor(c, false) }, *dout[4];
    for (int i = 0; i < 3; i++)
        dew.in[i] = din[i];
    for (int i = 0; i < 4; i++) {
        dout[i] = dev_tensor(t[i], true);
        dew.out[i] = dout[i];
    }
    void *kept = dout[0]->data; /* step 0 not materialised: data NULL */
    dout[0]->data = NULL;
    ck_assert_msg(cuda_tg_ew_run(&dew) == TE_OK, "%s", te_error());
    dout[0]->data = kept;
    for (int i = 1; i < 4; i++)
        assert_same(dout[i], t[i], "fused chain");
    const te_op acts[] = { TE_OP_RELU, TE_OP_GELU, TE_OP_TANH, TE_OP_SIGMOID };
    for (size_t k = 0; k < sizeof acts / sizeof *acts; k++) {
        te_tensor *y = ramp(te_shape(40, 30), -4.0f, 0.01f, false), *dy = dev_tensor(y, false);
        tg_act_inplace(acts[k], te_f32(y), y->numel);
        ck_assert_int_eq(cuda_tg_act_inplace(acts[k], te_f32(dy), dy->numel), TE_OK);
        assert_same(dy, y, te_op_type_name(acts[k]));
        dev_free(dy);
    }
    for (int i = 0; i < 3; i++)
        dev_free(din[i]);
    for (int i = 0; i < 4; i++)
        dev_free(dout[i]);
}
END_TEST

Suite *suite_cuda_elementwise(void)
{
    Suite *s = suite_create("cuda_elementwise");
    TCase *host = tcase_create("host");
    tcase_add_checked_fixture(host, tu_setup, tu_teardown);
    tcase_set_timeout(host, 60);
    tcase_add_test(host, test_dropout_mask_host);
    tcase_add_test(host, test_round_widen_host);
    tcase_add_test(host, test_round_counts_host);
    tcase_add_test(host, test_gelu_host);
    tcase_add_test(host, test_broadcast_index_host);
    tcase_add_test(host, test_transpose_index_host);
    tcase_add_test(host, test_fusable_ops_have_formulas_host);
    suite_add_tcase(s, host);
    TCase *dev = tcase_create("device");
    tcase_add_checked_fixture(dev, tu_setup, tu_teardown);
    tcase_set_timeout(dev, 60);
    tcase_add_test(dev, test_binary_ops);
    tcase_add_test(dev, test_unary_ops);
    tcase_add_test(dev, test_masked_fill_and_dropout);
    tcase_add_test(dev, test_shape_ops);
    tcase_add_test(dev, test_embedding_bad_index);
    tcase_add_test(dev, test_cast);
    tcase_add_test(dev, test_round_widen_services);
    tcase_add_test(dev, test_fused);
    suite_add_tcase(s, dev);
    return s;
}
