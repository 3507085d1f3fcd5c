/*
 * test_cuda_linear.c — the CUDA backend's matmul, linear and fused
 * attention kernels (engine/cuda/cuda_linear.c, cuda_attention.c) against
 * the CPU's (engine/cpu/), on the same inputs: the CPU kernel runs on host
 * tensors, the CUDA one on device copies of them (made here with
 * cudaMemcpy, so the kernels are checked without the rest of the backend),
 * forward and backward, overwriting gradients (given NaN first, so a
 * gradient not written shows) and accumulating onto given ones.
 *
 * Tolerances (issue 18): f32 within 1e-5 relative to the larger of the
 * value and the tensor's largest magnitude (a sum's rounding error is
 * relative to its terms, not to a small result); f16/bf16 within 1 ULP
 * (of the larger of the value and a 64th of the largest magnitude), the
 * reference being the CPU's f32 kernel on the same low-precision values,
 * rounded once: what the shadow path computes.
 *
 * Without a device the tests that need one print "cuda_linear: skipped:
 * no CUDA device (REASON)" and return (tu_cuda_device); the host-only
 * ones (the batch plan, the native kernels declining) run.
 */
#include "cpu/cpu_kernels.h"
#include "cuda/cuda_attention.h"
#include "cuda/cuda_linear.h"
#include "kernel_geom.h"
#include "suites.h"
#include "testutil.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether device 0 can run the kernels; the tests that need it return
 * without one, saying why. */
static bool have_device(void) { return tu_cuda_device("cuda_linear"); }

/* ---- tensors made by hand: host ones, and device copies ------------------ */

#define MAX_ALLOCS 256
static struct {
    void *p;
    bool dev;
} allocs[MAX_ALLOCS];
static int n_allocs;

static void *track(void *p, bool dev)
{
    ck_assert(p != NULL && n_allocs < MAX_ALLOCS);
    allocs[n_allocs].p = p;
    allocs[n_allocs++].dev = dev;
    return p;
}

static void release_all(void)
{
    while (n_allocs > 0) {
        n_allocs--;
        if (allocs[n_allocs].dev)
            cudaFree(allocs[n_allocs].p);
        else
            free(allocs[n_allocs].p);
    }
}

static size_t dsize(te_dtype dt) { return dt == TE_F32 ? 4 : 2; }

/* A host tensor of dtype dt: values uniform in [-1, 1) from seed (rounded
 * to dt), or zeros when seed is 0. */
static te_tensor *host_t(te_dtype dt, int ndim, const int64_t *shape, uint32_t seed)
{
    te_tensor *t = track(calloc(1, sizeof *t), false);
    t->dtype = dt;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++)
        t->numel *= t->shape[i] = shape[i];
    t->nbytes = (size_t)t->numel * dsize(dt);
    t->data = track(calloc(1, t->nbytes + 4), false);
    t->device = TE_DEV_CPU;
    if (seed) {
        float *v = malloc((size_t)t->numel * sizeof *v + 4);
        tu_fill_uniform(v, t->numel, seed, -1.0f, 1.0f);
        te_round_f32(t, v, NULL);
        free(v);
    }
    return t;
}

/* h's values as f32 (a new host tensor). */
static te_tensor *host_f32(const te_tensor *h)
{
    te_tensor *f = host_t(TE_F32, h->ndim, h->shape, 0);
    te_copy_to_f32(h, te_f32(f));
    return f;
}

/* A device copy of h (data only: no gradient). */
static te_tensor *dev_copy(const te_tensor *h)
{
    te_tensor *d = track(calloc(1, sizeof *d), false);
    *d = *h;
    d->grad = NULL;
    d->requires_grad = false;
    d->grad_valid = false;
    d->device = TE_DEV_CUDA;
    void *p = NULL;
    ck_assert(cudaMalloc(&p, h->nbytes + 4) == cudaSuccess);
    d->data = track(p, true);
    ck_assert(cudaMemcpy(p, h->data, h->nbytes, cudaMemcpyHostToDevice) == cudaSuccess);
    return d;
}

/* Device tensor d's values as f32, into a new host array. */
static float *dev_f32(const te_tensor *d)
{
    te_tensor *h = host_t(d->dtype, d->ndim, d->shape, 0);
    ck_assert(cudaDeviceSynchronize() == cudaSuccess);
    ck_assert(cudaMemcpy(h->data, d->data, d->nbytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    return te_f32(host_f32(h));
}

/* x (host) and dx (its device copy) get gradients: when acc, the same
 * given values (accumulated onto); otherwise zeros on the host and NaN on
 * the device (overwritten, or the comparison fails). */
static void give_grads(te_tensor *x, te_tensor *dx, bool acc, uint32_t seed)
{
    x->requires_grad = dx->requires_grad = true;
    x->grad = host_t(x->dtype, x->ndim, x->shape, acc ? seed : 0);
    dx->grad = dev_copy(x->grad);
    if (!acc)
        ck_assert(cudaMemset(dx->grad->data, 0xff, dx->grad->nbytes) == cudaSuccess);
    x->grad_valid = dx->grad_valid = acc;
}

/* ---- comparisons ----------------------------------------------------------- */

static float max_abs(const float *v, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++)
        m = fabsf(v[i]) > m ? fabsf(v[i]) : m;
    return m;
}

/* got within 1e-5 of ref relative to max(|ref|, ref's largest magnitude). */
static void assert_f32(const float *got, const float *ref, int64_t n, const char *what)
{
    const float m = max_abs(ref, n);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(got[i] - ref[i]) <= 1e-5f * fmaxf(fabsf(ref[i]), m), "%s[%lld]: cuda %.9g, cpu %.9g", what,
                      (long long)i, (double)got[i], (double)ref[i]);
}

/* One ULP of dt at magnitude x. */
static float ulp(te_dtype dt, float x)
{
    int e;
    frexpf(x, &e); /* x = f 2^e, f in [0.5, 1) */
    const int mant = dt == TE_BF16 ? 7 : 10, emin = dt == TE_BF16 ? -126 : -14;
    return ldexpf(1.0f, (e - 1 < emin ? emin : e - 1) - mant);
}

static void assert_lowp(te_dtype dt, const float *got, const float *ref, int64_t n, const char *what)
{
    const float m = max_abs(ref, n);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(got[i] - ref[i]) <= ulp(dt, fmaxf(fabsf(ref[i]), m / 64)), "%s[%lld]: cuda %.9g, cpu %.9g",
                      what, (long long)i, (double)got[i], (double)ref[i]);
}

/* ---- matmul ------------------------------------------------------------------ */

typedef struct mm_case {
    int na, nb;
    int64_t as[4], bs[4];
    bool ta, tb;
    bool tall, strided; /* the plan expected */
} mm_case;

static const mm_case mm_cases[] = {
    { 2, 2, { 5, 7 }, { 7, 3 }, false, false, true, true },                       /* one product */
    { 4, 4, { 2, 3, 4, 5 }, { 2, 3, 5, 6 }, false, false, false, true },          /* batched */
    { 4, 2, { 2, 3, 4, 5 }, { 5, 6 }, false, false, true, true },                 /* b shared: tall */
    { 3, 2, { 3, 5, 4 }, { 5, 6 }, true, false, false, true },                    /* b shared, a transposed */
    { 4, 4, { 2, 1, 4, 5 }, { 1, 3, 6, 5 }, false, true, false, false },          /* both broadcast */
    { 2, 3, { 4, 5 }, { 3, 6, 5 }, false, true, false, true },                    /* a shared: summed gradient */
    { 3, 3, { 2, 5, 4 }, { 2, 6, 5 }, true, true, false, true },                  /* both transposed */
    { 2, 2, { 4, 0 }, { 0, 3 }, false, false, true, true },                       /* K = 0: zeros */
};
#define N_MM ((int)(sizeof mm_cases / sizeof mm_cases[0]))

/* The output shape, as te_matmul's front end makes it. */
static int mm_out_shape(const mm_case *c, int64_t *y)
{
    const int nd = c->na > c->nb ? c->na : c->nb;
    for (int i = 0; i < nd - 2; i++) {
        int ia = i - (nd - c->na), ib = i - (nd - c->nb);
        int64_t da = ia >= 0 ? c->as[ia] : 1, db = ib >= 0 ? c->bs[ib] : 1;
        y[i] = da == 1 ? db : da;
    }
    y[nd - 2] = c->as[c->na - (c->ta ? 1 : 2)];
    y[nd - 1] = c->bs[c->nb - (c->tb ? 2 : 1)];
    return nd;
}

/* A matmul or linear node on tensors in[n_in] and out. */
static te_node node_of(te_op op, te_tensor *const *in, int n_in, te_tensor *out, bool ta, bool tb)
{
    te_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.n_in = n_in;
    n.n_out = 1;
    snprintf(n.name, sizeof n.name, "%s", te_op_default_name(op));
    for (int i = 0; i < n_in; i++)
        n.in[i] = in[i];
    n.out[0] = out;
    n.a.trans_a = ta;
    n.a.trans_b = tb;
    return n;
}

/* The plan's shape logic needs no device. */
START_TEST(test_cuda_mm_plan)
{
    const mm_case *c = &mm_cases[_i];
    int64_t ys[4];
    const int ny = mm_out_shape(c, ys);
    te_tensor *a = host_t(TE_F32, c->na, c->as, 0), *b = host_t(TE_F32, c->nb, c->bs, 0),
              *y = host_t(TE_F32, ny, ys, 0);
    te_node n = node_of(TE_OP_MATMUL, (te_tensor *[]){ a, b }, 2, y, c->ta, c->tb);
    te_mm_plan p;
    te_mm_plan_of(&n, &p);
    ck_assert_msg(p.tall == c->tall && p.strided == c->strided, "case %d: tall %d strided %d", _i, p.tall, p.strided);
    int64_t batches = 1;
    for (int i = 0; i < ny - 2; i++)
        batches *= ys[i];
    ck_assert_int_eq(p.batches, batches);
    if (_i == 4) { /* a [2,1], b [1,3]: batch r = (i, j) reads a's i and b's j */
        for (int64_t r = 0; r < 6; r++) {
            int64_t ia, ib;
            te_mm_batch(&p, r, &ia, &ib);
            ck_assert_int_eq(ia, r / 3);
            ck_assert_int_eq(ib, r % 3);
        }
    }
    release_all();
}
END_TEST

static void check_matmul(const mm_case *c, te_dtype dt, bool acc)
{
    int64_t ys[4];
    const int ny = mm_out_shape(c, ys);
    te_tensor *a = host_t(dt, c->na, c->as, 3), *b = host_t(dt, c->nb, c->bs, 5), *y = host_t(dt, ny, ys, 0);
    te_tensor *da = dev_copy(a), *db = dev_copy(b), *dy = dev_copy(y);
    /* the CPU's f32 kernel on the same values (rounded once when dt is low) */
    te_tensor *af = host_f32(a), *bf = host_f32(b), *yf = host_t(TE_F32, ny, ys, 0);
    te_node cn = node_of(TE_OP_MATMUL, (te_tensor *[]){ af, bf }, 2, yf, c->ta, c->tb);
    te_node dn = node_of(TE_OP_MATMUL, (te_tensor *[]){ da, db }, 2, dy, c->ta, c->tb);
    char what[64];
    snprintf(what, sizeof what, "matmul case %d %s y", (int)(c - mm_cases), te_dtype_name(dt));
    ck_assert_int_eq(cpu_matmul_forward(&cn), TE_OK);
    ck_assert_int_eq(dt == TE_F32 ? cuda_matmul_forward(&dn) : cuda_matmul_forward_lowp(&dn), TE_OK);
    te_round_stats rs;
    te_round_f32(y, te_f32(yf), &rs); /* y: the reference in dt */
    if (dt == TE_F32) {
        assert_f32(dev_f32(dy), te_f32(yf), y->numel, what);
    } else {
        assert_lowp(dt, dev_f32(dy), te_f32(host_f32(y)), y->numel, what);
        ck_assert(dn.rounded && dn.round[0].dtype == dt);
        ck_assert_int_eq(dn.round[0].nonzero, rs.nonzero);
        ck_assert_int_eq(dn.round[0].overflow, rs.overflow);
    }

    /* backward: dy given; a's and b's gradients */
    yf->grad = host_t(dt, ny, ys, 7); /* in dt, so both sides see the same values */
    dy->grad = dev_copy(yf->grad);
    yf->grad = host_f32(yf->grad);
    give_grads(a, da, acc, 11);
    give_grads(b, db, acc, 13);
    af->requires_grad = bf->requires_grad = true;
    af->grad = host_f32(a->grad);
    bf->grad = host_f32(b->grad);
    af->grad_valid = bf->grad_valid = acc;
    ck_assert_int_eq(cpu_matmul_backward(&cn), TE_OK);
    ck_assert_int_eq(dt == TE_F32 ? cuda_matmul_backward(&dn) : cuda_matmul_backward_lowp(&dn), TE_OK);
    te_tensor *const hx[2] = { a, b }, *const fx[2] = { af, bf }, *const dx[2] = { da, db };
    for (int i = 0; i < 2; i++) {
        snprintf(what, sizeof what, "matmul case %d %s d%c%s", (int)(c - mm_cases), te_dtype_name(dt), "ab"[i],
                 acc ? " acc" : "");
        if (dt == TE_F32) {
            assert_f32(dev_f32(dx[i]->grad), te_f32(fx[i]->grad), hx[i]->numel, what);
        } else {
            te_round_f32(hx[i]->grad, te_f32(fx[i]->grad), &rs);
            assert_lowp(dt, dev_f32(dx[i]->grad), te_f32(host_f32(hx[i]->grad)), hx[i]->numel, what);
            ck_assert_int_eq(dn.round[i].nonzero, rs.nonzero);
        }
    }
    release_all();
}

static bool skip_lowp_case(const mm_case *c)
{
    return c->as[c->na - 1] == 0; /* empty operands: the native kernels decline them */
}

START_TEST(test_cuda_matmul_f32)
{
    if (!have_device())
        return;
    check_matmul(&mm_cases[_i], TE_F32, false);
    check_matmul(&mm_cases[_i], TE_F32, true);
}
END_TEST

START_TEST(test_cuda_matmul_lowp)
{
    if (!have_device() || skip_lowp_case(&mm_cases[_i]))
        return;
    check_matmul(&mm_cases[_i], TE_BF16, false);
    check_matmul(&mm_cases[_i], TE_F16, true);
}
END_TEST

/* ---- linear --------------------------------------------------------------------- */

typedef struct lin_case {
    int64_t N, K, O;
    bool bias;
} lin_case;

static const lin_case lin_cases[] = {
    { 5, 7, 3, true }, { 8, 16, 4, false }, { 1, 1, 1, true }, { 33, 70, 65, true },
};
#define N_LIN ((int)(sizeof lin_cases / sizeof lin_cases[0]))

typedef struct lin_pair {
    te_tensor *x, *w, *b, *y;       /* host, in dt */
    te_tensor *xf, *wf, *bf, *yf;   /* host f32 copies, for the CPU kernel */
    te_tensor *dx, *dw, *db, *dy;   /* device */
    te_node cn, dn;
} lin_pair;

static void lin_make(lin_pair *p, const lin_case *c, te_dtype dt)
{
    memset(p, 0, sizeof *p);
    p->x = host_t(dt, 2, (int64_t[]){ c->N, c->K }, 17);
    p->w = host_t(dt, 2, (int64_t[]){ c->O, c->K }, 19);
    p->b = c->bias ? host_t(dt, 1, (int64_t[]){ c->O }, 23) : NULL;
    p->y = host_t(dt, 2, (int64_t[]){ c->N, c->O }, 0);
    p->xf = host_f32(p->x);
    p->wf = host_f32(p->w);
    p->bf = p->b ? host_f32(p->b) : NULL;
    p->yf = host_f32(p->y);
    p->dx = dev_copy(p->x);
    p->dw = dev_copy(p->w);
    p->db = p->b ? dev_copy(p->b) : NULL;
    p->dy = dev_copy(p->y);
    p->cn = node_of(TE_OP_LINEAR, (te_tensor *[]){ p->xf, p->wf, p->bf }, 3, p->yf, false, false);
    p->dn = node_of(TE_OP_LINEAR, (te_tensor *[]){ p->dx, p->dw, p->db }, 3, p->dy, false, false);
}

static void check_linear(const lin_case *c, te_dtype dt, bool acc)
{
    lin_pair p;
    lin_make(&p, c, dt);
    char what[64];
    snprintf(what, sizeof what, "linear case %d %s y", (int)(c - lin_cases), te_dtype_name(dt));
    ck_assert_int_eq(cpu_linear_forward(&p.cn), TE_OK);
    ck_assert_int_eq(dt == TE_F32 ? cuda_linear_forward(&p.dn) : cuda_linear_forward_lowp(&p.dn), TE_OK);
    te_round_stats rs;
    te_round_f32(p.y, te_f32(p.yf), &rs);
    if (dt == TE_F32)
        assert_f32(dev_f32(p.dy), te_f32(p.yf), p.y->numel, what);
    else
        assert_lowp(dt, dev_f32(p.dy), te_f32(host_f32(p.y)), p.y->numel, what);

    te_tensor *g = host_t(dt, 2, p.y->shape, 29);
    p.dy->grad = dev_copy(g);
    p.yf->grad = host_f32(g);
    te_tensor *const hx[3] = { p.x, p.w, p.b }, *const fx[3] = { p.xf, p.wf, p.bf }, *const dx[3] = { p.dx, p.dw, p.db };
    for (int i = 0; i < 3; i++)
        if (hx[i]) {
            give_grads(hx[i], dx[i], acc, 31 + (uint32_t)i);
            fx[i]->requires_grad = true;
            fx[i]->grad = host_f32(hx[i]->grad);
            fx[i]->grad_valid = acc;
        }
    ck_assert_int_eq(cpu_linear_backward(&p.cn), TE_OK);
    ck_assert_int_eq(dt == TE_F32 ? cuda_linear_backward(&p.dn) : cuda_linear_backward_lowp(&p.dn), TE_OK);
    for (int i = 0; i < 3; i++) {
        if (!hx[i])
            continue;
        snprintf(what, sizeof what, "linear case %d %s d%s%s", (int)(c - lin_cases), te_dtype_name(dt),
                 (const char *[]){ "x", "w", "b" }[i], acc ? " acc" : "");
        if (dt == TE_F32) {
            assert_f32(dev_f32(dx[i]->grad), te_f32(fx[i]->grad), hx[i]->numel, what);
        } else {
            te_round_f32(hx[i]->grad, te_f32(fx[i]->grad), &rs);
            assert_lowp(dt, dev_f32(dx[i]->grad), te_f32(host_f32(hx[i]->grad)), hx[i]->numel, what);
            ck_assert_int_eq(p.dn.round[i].nonzero, rs.nonzero);
        }
    }
    release_all();
}

START_TEST(test_cuda_linear_f32)
{
    if (!have_device())
        return;
    check_linear(&lin_cases[_i], TE_F32, false);
    check_linear(&lin_cases[_i], TE_F32, true);
}
END_TEST

START_TEST(test_cuda_linear_lowp)
{
    if (!have_device())
        return;
    check_linear(&lin_cases[_i], TE_F16, false);
    check_linear(&lin_cases[_i], TE_BF16, true);
}
END_TEST

/* Graph mode's fused linear + activation: the CPU's linear, then its
 * activation in place (tg_act_inplace), against the cuBLASLt epilogue. */
START_TEST(test_cuda_linear_act)
{
    if (!have_device())
        return;
    const te_op acts[] = { TE_OP_RELU, TE_OP_GELU, TE_OP_TANH, TE_OP_SIGMOID };
    for (int li = 0; li < N_LIN; li++)
        for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++) {
            lin_pair p;
            lin_make(&p, &lin_cases[li], TE_F32);
            ck_assert_int_eq(cpu_linear_forward(&p.cn), TE_OK);
            tg_act_inplace(acts[k], te_f32(p.yf), p.yf->numel);
            ck_assert_int_eq(cuda_linear_act_forward(&p.dn, acts[k]), TE_OK);
            char what[64];
            snprintf(what, sizeof what, "linear case %d + %s", li, te_op_type_name(acts[k]));
            assert_f32(dev_f32(p.dy), te_f32(p.yf), p.y->numel, what);
            release_all();
        }
}
END_TEST

/* The native kernels decline f32 nodes and mixed dtypes before touching
 * memory (no device needed), and empty tensors. */
START_TEST(test_cuda_lowp_declines)
{
    const te_dtype xs[] = { TE_F32, TE_BF16, TE_F16 }, ws[] = { TE_F32, TE_F16, TE_F16 };
    for (int i = 0; i < 3; i++) {
        te_tensor *x = host_t(xs[i], 2, (int64_t[]){ 4, i == 2 ? 0 : 3 }, 0);
        te_tensor *w = host_t(ws[i], 2, (int64_t[]){ 5, i == 2 ? 0 : 3 }, 0);
        te_tensor *y = host_t(xs[i], 2, (int64_t[]){ 4, 5 }, 0);
        te_node n = node_of(TE_OP_LINEAR, (te_tensor *[]){ x, w, NULL }, 3, y, false, false);
        ck_assert_int_eq(cuda_linear_forward_lowp(&n), TE_LOWP_DECLINED);
        ck_assert_int_eq(cuda_linear_backward_lowp(&n), TE_LOWP_DECLINED);
        n.op = TE_OP_MATMUL;
        n.n_in = 2;
        ck_assert_int_eq(cuda_matmul_forward_lowp(&n), TE_LOWP_DECLINED);
        ck_assert(!n.rounded);
    }
    release_all();
}
END_TEST

/* ---- fused attention -------------------------------------------------------------- */

typedef struct shape4 {
    int B, H, T, D;
} shape4;

/* T not a multiple of the 32-row tiles, and exactly one; D 16 to 64 and 24. */
static const shape4 at_shapes[] = {
    { 1, 1, 5, 16 }, { 2, 3, 37, 32 }, { 1, 2, 70, 64 }, { 2, 1, 64, 24 }, { 1, 1, 130, 8 },
};
#define N_AT ((int)(sizeof at_shapes / sizeof at_shapes[0]))

static void check_attention(const shape4 *s, te_dtype dt, float p, bool acc, bool merged)
{
    const int64_t shape[4] = { s->B, s->H, s->T, s->D }, oshape[4] = { s->B, s->T, s->H, s->D };
    const int64_t rshape[3] = { s->B, s->H, s->T };
    te_tensor *q = host_t(dt, 4, shape, 41), *k = host_t(dt, 4, shape, 43), *v = host_t(dt, 4, shape, 47);
    te_tensor *o = host_t(dt, 4, merged ? oshape : shape, 0), *lse = host_t(TE_F32, 3, rshape, 0);
    te_tensor *dout = host_t(dt, 4, merged ? oshape : shape, 53);
    te_tensor *dq = host_t(dt, 4, shape, acc ? 59 : 0), *dk = host_t(dt, 4, shape, acc ? 61 : 0),
              *dv = host_t(dt, 4, shape, acc ? 67 : 0);
    te_tensor *Dq = dev_copy(q), *Dk = dev_copy(k), *Dv = dev_copy(v), *Do = dev_copy(o), *Dlse = dev_copy(lse), *Ddout = dev_copy(dout);
    te_tensor *Ddq = dev_copy(dq), *Ddk = dev_copy(dk), *Ddv = dev_copy(dv);
    if (!acc) /* NaN: must be overwritten */
        for (te_tensor *const *t = (te_tensor *const[]){ Ddq, Ddk, Ddv, NULL }; *t; t++)
            ck_assert(cudaMemset((*t)->data, 0xff, (*t)->nbytes) == cudaSuccess);
    te_round_stats ro = { .dtype = dt }, ro_d = { .dtype = dt }, rg[3] = { { .dtype = dt }, { .dtype = dt }, { .dtype = dt } },
                   rg_d[3] = { { .dtype = dt }, { .dtype = dt }, { .dtype = dt } };
    const bool low = dt != TE_F32;
    const float scale = 1.0f / sqrtf((float)s->D);
    const uint64_t seed = 0x1234567;
    te_attn ca = { .B = s->B, .H = s->H, .T = s->T, .D = s->D, .scale = scale, .p = p, .seed = seed,
                    .merged = merged, .dt = dt, .round_o = low ? &ro : NULL };
    te_attn da = { .B = s->B, .H = s->H, .T = s->T, .D = s->D, .scale = scale, .p = p, .seed = seed,
                     .merged = merged, .dt = dt, .round_o = low ? &ro_d : NULL };
    cpu_attention_forward(&ca, q->data, k->data, v->data, o->data, te_f32(lse));
    ck_assert_msg(cuda_attention_forward(NULL, &da, Dq->data, Dk->data, Dv->data, Do->data, te_f32(Dlse)) == TE_OK,
                  "%s", te_error());
    te_attn_grads cg = { dq->data, dk->data, dv->data, acc, acc, acc, low ? &rg[0] : NULL, low ? &rg[1] : NULL,
                          low ? &rg[2] : NULL };
    te_attn_grads dg = { Ddq->data, Ddk->data, Ddv->data, acc, acc, acc, low ? &rg_d[0] : NULL,
                           low ? &rg_d[1] : NULL, low ? &rg_d[2] : NULL };
    cpu_attention_backward(&ca, q->data, k->data, v->data, o->data, te_f32(lse), dout->data, &cg);
    ck_assert_msg(cuda_attention_backward(NULL, &da, Dq->data, Dk->data, Dv->data, Do->data, te_f32(Dlse),
                                          Ddout->data, &dg) == TE_OK,
                  "%s", te_error());
    te_tensor *const ref[5] = { o, lse, dq, dk, dv }, *const got[5] = { Do, Dlse, Ddq, Ddk, Ddv };
    const char *names[5] = { "o", "lse", "dq", "dk", "dv" };
    for (int i = 0; i < 5; i++) {
        char what[96];
        snprintf(what, sizeof what, "attention [%d,%d,%d,%d] %s p=%g%s%s %s", s->B, s->H, s->T, s->D,
                 te_dtype_name(dt), (double)p, acc ? " acc" : "", merged ? " merged" : "", names[i]);
        const float *r = te_f32(host_f32(ref[i]));
        if (ref[i]->dtype == TE_F32)
            assert_f32(dev_f32(got[i]), r, ref[i]->numel, what);
        else
            assert_lowp(dt, dev_f32(got[i]), r, ref[i]->numel, what);
    }
    if (low) {
        ck_assert_int_eq(ro_d.nonzero, ro.nonzero);
        for (int i = 0; i < 3; i++)
            ck_assert_int_eq(rg_d[i].nonzero, rg[i].nonzero);
    }
    release_all();
}

START_TEST(test_cuda_attention_f32)
{
    if (!have_device())
        return;
    check_attention(&at_shapes[_i], TE_F32, 0.0f, false, false);
    check_attention(&at_shapes[_i], TE_F32, 0.0f, true, false);
    check_attention(&at_shapes[_i], TE_F32, 0.25f, false, true);
}
END_TEST

START_TEST(test_cuda_attention_lowp)
{
    if (!have_device())
        return;
    check_attention(&at_shapes[_i], TE_BF16, 0.0f, false, false);
    check_attention(&at_shapes[_i], TE_F16, 0.25f, true, true);
}
END_TEST

Suite *suite_cuda_linear(void)
{
    Suite *s = suite_create("cuda_linear");
    TCase *tc = tcase_create("cuda_linear");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_cuda_mm_plan, 0, N_MM);
    tcase_add_test(tc, test_cuda_lowp_declines);
    tcase_add_loop_test(tc, test_cuda_matmul_f32, 0, N_MM);
    tcase_add_loop_test(tc, test_cuda_matmul_lowp, 0, N_MM);
    tcase_add_loop_test(tc, test_cuda_linear_f32, 0, N_LIN);
    tcase_add_loop_test(tc, test_cuda_linear_lowp, 0, N_LIN);
    tcase_add_test(tc, test_cuda_linear_act);
    tcase_add_loop_test(tc, test_cuda_attention_f32, 0, N_AT);
    tcase_add_loop_test(tc, test_cuda_attention_lowp, 0, N_AT);
    suite_add_tcase(s, tc);
    return s;
}
