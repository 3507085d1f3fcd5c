/* test_lowp_native.c — the native bf16 kernels (cpu_lowp.c, oneDNN) against
 * the shadow path (f32 copies, the f32 kernel, the result rounded): the
 * same op on the same bf16 inputs, once each way (te_lowp_native_allow),
 * outputs and gradients compared within a stated ULP bound, the rounding
 * counts alike, and the native path taken exactly where it should be.
 *
 * The bound: both accumulate in f32 and round once, so they differ only by
 * the order of the f32 sums. An element agrees when |native - shadow| <=
 * 2 bf16 ULPs of max(|shadow|, m/64), m the tensor's largest magnitude
 * (near-cancelling sums are off by the f32 error of the sum, which is
 * relative to m, not to the small result). At least 90% of the elements
 * must be bit-identical; a bf16 accumulation would miss both. On a machine
 * without the native kernels (no oneDNN, no AVX512-BF16) the same cases
 * check that nothing was taken natively.
 *
 * The portable kernels (ReLU, BatchNorm, MaxPool2D, f16 and bf16, any
 * machine) must match the shadow path bit for bit instead: test_lowp_native_ew.
 */
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

typedef struct lp_case {
    const char *name;
    int n_in;
    int ndim[3];
    int64_t shape[3][4];
    bool grad[3];
    bool trans_a, trans_b; /* MatMul */
    int stride, pad;       /* Conv2D */
    te_op op;
    int native_fwd, native_bwd; /* nodes run natively per forward/backward of one op */
} lp_case;

/* What one way of running a case gave: y and the gradients as f32, and
 * the rounding counts of the forward and of the backward. */
typedef struct lp_result {
    float *v[4]; /* y, then each input's gradient */
    int64_t n[4];
    te_round_stats fwd, bwd[3];
    int64_t runs;
} lp_result;

static te_tensor *lp_apply(const lp_case *c, te_tensor **in)
{
    switch (c->op) {
    case TE_OP_LINEAR: return te_linear(in[0], in[1], in[2]);
    case TE_OP_MATMUL: return te_matmul_t(in[0], in[1], c->trans_a, c->trans_b);
    case TE_OP_CONV2D: return te_conv2d(in[0], in[1], in[2], c->stride, c->pad);
    default: ck_abort_msg("no such op in the cases");
    }
    return NULL;
}

static float *lp_floats(const te_tensor *t, int64_t *n)
{
    float *v = malloc((size_t)t->numel * sizeof *v);
    te_copy_to_f32(t, v);
    *n = t->numel;
    return v;
}

/* Runs c with the native kernels allowed or not: y = op(in) + op(in), so
 * the second op's backward accumulates onto the first one's gradients. */
static void lp_run_case(const lp_case *c, te_dtype dt, bool native, lp_result *r)
{
    te_lowp_native_allow(native);
    memset(r, 0, sizeof *r);
    te_tensor *in[3] = { 0 };
    for (int i = 0; i < c->n_in; i++) {
        te_tensor *t = te_tensor_persistent(dt, c->ndim[i], c->shape[i]);
        float *v = malloc((size_t)t->numel * sizeof *v);
        tu_fill_uniform(v, t->numel, 11 + (uint32_t)i, -1.0f, 1.0f);
        te_copy_from_f32(t, v);
        free(v);
        t->requires_grad = c->grad[i];
        in[i] = t;
    }
    int64_t before = te_lowp_native_runs();
    te_tensor *y1 = lp_apply(c, in), *y2 = lp_apply(c, in);
    ck_assert_msg(y1 && y2, "%s: %s", c->name, te_error());
    ck_assert_msg(y1->dtype == dt, "%s: output %s", c->name, te_dtype_name(y1->dtype));
    ck_assert_msg(y1->node->rounded && y1->node->round[0].dtype == dt, "%s: forward not rounded", c->name);
    r->fwd = y1->node->round[0];
    te_tensor *y = te_add(y1, y2);
    te_tensor *dy = te_tensor_new(TE_F32, y->ndim, y->shape);
    float *dyv = tu_f32(dy);
    tu_fill_uniform(dyv, dy->numel, 7, -1.0f, 1.0f);
    tu_write(dy, dyv);
    free(dyv);
    ck_assert_msg(te_backward_with(y, dy) == TE_OK, "%s: %s", c->name, te_error());
    r->runs = te_lowp_native_runs() - before;
    r->v[0] = lp_floats(y1, &r->n[0]);
    for (int i = 0; i < c->n_in; i++) {
        if (!c->grad[i])
            continue;
        ck_assert_msg(in[i]->grad && in[i]->grad->dtype == dt, "%s: gradient %d", c->name, i);
        r->v[1 + i] = lp_floats(in[i]->grad, &r->n[1 + i]);
        /* y1's node ran its backward last (the tape runs backwards): it
         * accumulated onto y2's, and rounded the sum. */
        ck_assert_msg(y1->node->round[i].dtype == dt, "%s: gradient %d not rounded", c->name, i);
        r->bwd[i] = y1->node->round[i];
    }
    te_tape_reset();
    for (int i = 0; i < c->n_in; i++)
        te_tensor_free(in[i]);
}

static double bf16_ulp(double x)
{
    int e;
    frexp(x, &e);
    return ldexp(1.0, e - 8); /* 8 significant bits */
}

/* The bound of the file's comment, over one tensor. */
static void lp_assert_close(const float *nat, const float *sh, int64_t n, const char *what)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(sh[i]));
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) {
        same += memcmp(&nat[i], &sh[i], sizeof(float)) == 0;
        double bound = 2.0 * bf16_ulp(fmax(fabs(sh[i]), m / 64.0));
        ck_assert_msg(fabs((double)nat[i] - sh[i]) <= bound,
                      "%s[%lld]: native %.9g, shadow %.9g: more than 2 bf16 ulps (%.3g) apart", what,
                      (long long)i, nat[i], sh[i], bound);
    }
    ck_assert_msg(same * 10 >= n * 9, "%s: only %lld of %lld elements bit-identical", what,
                  (long long)same, (long long)n);
}

static void lp_assert_stats(const te_round_stats *a, const te_round_stats *b, const char *what)
{
    ck_assert_msg(a->overflow == b->overflow && a->underflow == b->underflow && a->nonzero == b->nonzero,
                  "%s: native counts %lld/%lld/%lld, shadow %lld/%lld/%lld (overflow/underflow/nonzero)",
                  what, (long long)a->overflow, (long long)a->underflow, (long long)a->nonzero,
                  (long long)b->overflow, (long long)b->underflow, (long long)b->nonzero);
    ck_assert_msg(fabsf(a->absmax - b->absmax) <= 1e-5f * b->absmax, "%s: absmax %g vs %g", what,
                  a->absmax, b->absmax);
}

static void lp_check(const lp_case *c)
{
    te_lowp_native_allow(true); /* whatever TDBG_NO_NATIVE_LOWP says */
    const bool have = te_lowp_native() != NULL;
    lp_result nat, sh;
    lp_run_case(c, TE_BF16, true, &nat);
    lp_run_case(c, TE_BF16, false, &sh);
    te_lowp_native_allow(true);
    int64_t want = have ? 2 * (c->native_fwd + c->native_bwd) : 0;
    ck_assert_msg(nat.runs == want, "%s: %lld nodes ran natively, expected %lld", c->name,
                  (long long)nat.runs, (long long)want);
    ck_assert_msg(sh.runs == 0, "%s: %lld native runs while turned off", c->name, (long long)sh.runs);
    char what[96];
    for (int k = 0; k < 4; k++) {
        if (!sh.v[k])
            continue;
        snprintf(what, sizeof what, "%s %s%d", c->name, k ? "grad" : "y", k ? k - 1 : 0);
        lp_assert_close(nat.v[k], sh.v[k], sh.n[k], what);
        lp_assert_stats(k ? &nat.bwd[k - 1] : &nat.fwd, k ? &sh.bwd[k - 1] : &sh.fwd, what);
        free(nat.v[k]);
        free(sh.v[k]);
    }
}

#define SH(...) { __VA_ARGS__ }

static const lp_case lp_cases[] = {
    { "linear", 3, { 2, 2, 1 }, { SH(37, 64), SH(29, 64), SH(29) }, { true, true, true },
      .op = TE_OP_LINEAR, .native_fwd = 1, .native_bwd = 1 },
    { "linear_k1024", 3, { 2, 2, 1 }, { SH(64, 1024), SH(48, 1024), SH(48) }, { true, true, true },
      .op = TE_OP_LINEAR, .native_fwd = 1, .native_bwd = 1 },
    { "linear_nobias", 2, { 2, 2 }, { SH(16, 40), SH(24, 40) }, { true, true },
      .op = TE_OP_LINEAR, .native_fwd = 1, .native_bwd = 1 },
    { "linear_frozen_x", 3, { 2, 2, 1 }, { SH(8, 32), SH(12, 32), SH(12) }, { false, true, true },
      .op = TE_OP_LINEAR, .native_fwd = 1, .native_bwd = 1 },
    { "matmul", 2, { 2, 2 }, { SH(20, 48), SH(48, 24) }, { true, true },
      .op = TE_OP_MATMUL, .native_fwd = 1, .native_bwd = 1 },
    { "matmul_tt", 2, { 2, 2 }, { SH(48, 20), SH(24, 48) }, { true, true }, .trans_a = true,
      .trans_b = true, .op = TE_OP_MATMUL, .native_fwd = 1, .native_bwd = 1 },
    { "matmul_3d_tb", 2, { 3, 3 }, { SH(3, 20, 16), SH(3, 12, 16) }, { true, true }, .trans_b = true,
      .op = TE_OP_MATMUL, .native_fwd = 1, .native_bwd = 1 },
    { "matmul_4d_ta", 2, { 4, 4 }, { SH(2, 3, 16, 10), SH(2, 3, 16, 8) }, { true, true }, .trans_a = true,
      .op = TE_OP_MATMUL, .native_fwd = 1, .native_bwd = 1 },
    { "matmul_scores", 2, { 4, 4 }, { SH(2, 3, 10, 8), SH(2, 3, 10, 8) }, { true, true }, .trans_b = true,
      .op = TE_OP_MATMUL, .native_fwd = 1, .native_bwd = 1 },
    { "matmul_tall", 2, { 3, 2 }, { SH(2, 5, 16), SH(16, 12) }, { true, true },
      .op = TE_OP_MATMUL, .native_fwd = 1, .native_bwd = 1 },
    { "matmul_tall_tb", 2, { 3, 2 }, { SH(2, 5, 16), SH(12, 16) }, { true, true }, .trans_b = true,
      .op = TE_OP_MATMUL, .native_fwd = 1, .native_bwd = 1 },
    /* a broadcast over b's batches: its gradient sums over them, which the
     * native kernel leaves to the shadow path. */
    { "matmul_bcast_a", 2, { 2, 3 }, { SH(6, 16), SH(3, 16, 8) }, { true, true },
      .op = TE_OP_MATMUL, .native_fwd = 1, .native_bwd = 0 },
    { "conv3x3", 3, { 4, 4, 1 }, { SH(2, 3, 9, 9), SH(4, 3, 3, 3), SH(4) }, { true, true, true },
      .stride = 1, .pad = 1, .op = TE_OP_CONV2D, .native_fwd = 1, .native_bwd = 1 },
    { "conv_stride2", 3, { 4, 4, 1 }, { SH(2, 4, 10, 10), SH(6, 4, 3, 3), SH(6) }, { true, true, true },
      .stride = 2, .pad = 1, .op = TE_OP_CONV2D, .native_fwd = 1, .native_bwd = 1 },
    { "conv_wide", 3, { 4, 4, 1 }, { SH(4, 64, 12, 12), SH(32, 64, 3, 3), SH(32) }, { true, true, true },
      .stride = 1, .pad = 1, .op = TE_OP_CONV2D, .native_fwd = 1, .native_bwd = 1 },
    { "conv_input", 2, { 4, 4 }, { SH(3, 2, 8, 8), SH(5, 2, 1, 1) }, { false, true },
      .stride = 1, .pad = 0, .op = TE_OP_CONV2D, .native_fwd = 1, .native_bwd = 1 },
};

START_TEST(test_lowp_native_vs_shadow)
{
    lp_check(&lp_cases[_i]);
}
END_TEST

/* f16, and bf16 mixed with f32, stay on the shadow path. */
START_TEST(test_lowp_native_not_f16)
{
    lp_case c = lp_cases[0];
    lp_result r;
    lp_run_case(&c, TE_F16, true, &r);
    ck_assert_msg(r.runs == 0, "f16 linear: %lld native runs", (long long)r.runs);
    for (int k = 0; k < 4; k++)
        free(r.v[k]);

    te_tensor *x = te_tensor_persistent(TE_BF16, te_shape(4, 8));
    te_tensor *w = te_tensor_persistent(TE_F32, te_shape(3, 8));
    int64_t before = te_lowp_native_runs();
    te_tensor *y = te_linear(x, w, NULL);
    ck_assert(y && y->dtype == TE_F32);
    ck_assert(te_lowp_native_runs() == before);
    te_tape_reset();
    te_tensor_free(x);
    te_tensor_free(w);
}
END_TEST

/* ---- the portable kernels: ReLU, BatchNorm, MaxPool2D ----------------------
 * They must give the shadow path's bits: outputs, gradients (an input used
 * twice: the second backward accumulates onto the first's gradient), BN's
 * f32 parameter gradients and running stats, and every rounding record,
 * in f16 and bf16, with values that overflow and underflow the dtype and
 * NaN, +-Inf and -0 where the op passes them on. */

typedef enum { EW_RELU, EW_BN, EW_BN_EVAL, EW_POOL } ew_op;

typedef struct ew_result {
    uint16_t *y, *dx;
    float *dg, *db, *rm, *rv;
    int64_t ny, nx, nc;
    te_round_stats fwd, bwd;
    bool fwd_rounded, bwd_rounded;
    int64_t runs;
} ew_result;

static uint16_t *ew_bits(const te_tensor *t) { return tu_bytes(t); }

static float *ew_f32(const te_tensor *t) { return tu_bytes(t); }

/* x [4,3,6,6] (for BN [4,6,5,5]) with specials planted. */
static te_tensor *ew_input(ew_op op, te_dtype dt)
{
    const bool bn = op == EW_BN || op == EW_BN_EVAL;
    te_tensor *x = bn ? te_tensor_persistent(dt, te_shape(4, 6, 5, 5)) : te_tensor_persistent(dt, te_shape(4, 3, 6, 6));
    float *v = malloc((size_t)x->numel * sizeof *v);
    tu_fill_uniform(v, x->numel, 5, -3.0f, 3.0f);
    const float big = dt == TE_F16 ? 60000.0f : 3.0e38f, tiny = dt == TE_F16 ? 1e-7f : 1e-38f;
    if (!bn) {
        for (int64_t i = 0; i < x->numel; i += 7)
            v[i] = (i / 7) % 2 ? big : -big;
        v[3] = NAN;
        v[10] = -0.0f;
        v[11] = 0.0f;
        v[12] = INFINITY;
        v[13] = -INFINITY;
        v[20] = -tiny;
        v[21] = tiny;
        v[40] = v[41] = v[46] = v[47] = 1.5f; /* ties in a pooling window */
    }
    te_copy_from_f32(x, v);
    free(v);
    if (!bn) /* a signalling NaN: the shadow path's rounding quiets it */
        ck_assert_int_eq(te_tensor_write(x, 4, 1, &(uint16_t){ dt == TE_F16 ? 0xfc01u : 0xff81u }), TE_OK);
    x->requires_grad = true;
    return x;
}

static void ew_run(ew_op op, te_dtype dt, bool twice, bool native, ew_result *r)
{
    te_lowp_native_allow(native);
    memset(r, 0, sizeof *r);
    te_tensor *x = ew_input(op, dt), *g = NULL, *b = NULL, *rm = NULL, *rv = NULL;
    const bool bn = op == EW_BN || op == EW_BN_EVAL;
    if (bn) {
        /* channel 1 overflows the dtype, channel 2 underflows it */
        const float big = dt == TE_F16 ? 1e5f : 1.5e38f, tiny = dt == TE_F16 ? 1e-8f : 1e-39f;
        g = te_tensor_persistent(TE_F32, te_shape(6));
        b = te_tensor_persistent(TE_F32, te_shape(6));
        rm = te_tensor_persistent(TE_F32, te_shape(6));
        rv = te_tensor_persistent(TE_F32, te_shape(6));
        tu_write(g, (float[]){ 0.75f, big, tiny, -1.25f, 2.0f, -tiny });
        tu_write(b, (float[]){ 0.1f, 0.0f, 0.0f, -0.3f, 0.5f, 0.0f });
        tu_write(rm, (float[]){ 0.1f, -0.2f, 0.0f, 0.3f, -0.1f, 0.2f });
        tu_write(rv, (float[]){ 1.0f, 0.5f, 2.0f, 1.5f, 0.8f, 1.2f });
        g->requires_grad = b->requires_grad = true;
    }
    te_set_training(op != EW_BN_EVAL);
    int64_t before = te_lowp_native_runs();
    te_tensor *y1 = NULL, *y2 = NULL;
    for (int k = 0; k < (twice ? 2 : 1); k++) {
        te_tensor *y = op == EW_RELU ? te_relu(x)
                       : op == EW_POOL ? te_maxpool2d(x, 3, 2, 1)
                                       : te_batchnorm(x, g, b, rm, rv, 0.1f, 1e-5f);
        ck_assert_msg(y != NULL, "%s", te_error());
        *(k ? &y2 : &y1) = y;
    }
    te_set_training(true);
    r->fwd = y1->node->round[0];
    r->fwd_rounded = y1->node->rounded;
    te_tensor *y = twice ? te_add(y1, y2) : y1;
    te_tensor *dy = te_tensor_new(TE_F32, y->ndim, y->shape);
    float *d = tu_f32(dy);
    tu_fill_uniform(d, dy->numel, 9, -2.0f, 2.0f);
    const float big = dt == TE_F16 ? 40000.0f : 2.0e38f, tiny = dt == TE_F16 ? 3e-8f : 1e-38f;
    for (int64_t i = 0; i < dy->numel; i += 5)
        d[i] = (i / 5) % 3 == 0 ? big : (i / 5) % 3 == 1 ? -tiny : d[i];
    d[1] = INFINITY;
    d[2] = NAN;
    d[10] = NAN;      /* at ReLU's x = -0: NaN * 0 */
    d[13] = INFINITY; /* at ReLU's x = -Inf: Inf * 0 */
    tu_write(dy, d);
    free(d);
    ck_assert_msg(te_backward_with(y, dy) == TE_OK, "%s", te_error());
    r->runs = te_lowp_native_runs() - before;
    r->bwd = y1->node->round[0];
    r->bwd_rounded = y1->node->rounded;
    r->y = ew_bits(y1);
    r->ny = y1->numel;
    ck_assert(x->grad && x->grad->dtype == dt);
    r->dx = ew_bits(x->grad);
    r->nx = x->numel;
    if (bn) {
        r->dg = ew_f32(g->grad);
        r->db = ew_f32(b->grad);
        r->rm = ew_f32(rm);
        r->rv = ew_f32(rv);
        r->nc = 6;
    }
    te_tape_reset();
    te_tensor *ts[] = { x, g, b, rm, rv };
    for (int i = 0; i < 5; i++)
        if (ts[i])
            te_tensor_free(ts[i]);
}

static void ew_assert_stats(const te_round_stats *a, const te_round_stats *b, const char *what)
{
    ck_assert_msg(a->dtype == b->dtype && a->overflow == b->overflow && a->underflow == b->underflow &&
                      a->nonzero == b->nonzero && memcmp(&a->absmax, &b->absmax, sizeof(float)) == 0,
                  "%s: native %d %lld/%lld/%lld absmax %g, shadow %d %lld/%lld/%lld absmax %g", what, a->dtype,
                  (long long)a->overflow, (long long)a->underflow, (long long)a->nonzero, a->absmax, b->dtype,
                  (long long)b->overflow, (long long)b->underflow, (long long)b->nonzero, b->absmax);
}

static void ew_assert_same(const void *a, const void *b, int64_t n, size_t elem, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(memcmp((const char *)a + i * elem, (const char *)b + i * elem, elem) == 0,
                      "%s[%lld] differs from the shadow path's", what, (long long)i);
}

/* twice: y = op(x) + op(x), the second backward accumulating onto the
 * first's gradient; else y = op(x). */
static void ew_check(ew_op op, te_dtype dt, bool twice, const char *name)
{
    ew_result nat, sh;
    ew_run(op, dt, twice, true, &nat);
    ew_run(op, dt, twice, false, &sh);
    te_lowp_native_allow(true);
    char what[64];
    snprintf(what, sizeof what, "%s %s%s", name, te_dtype_name(dt), twice ? " twice" : "");
    ck_assert_msg(nat.runs == (twice ? 4 : 2) && sh.runs == 0, "%s: %lld native runs, %lld turned off", what,
                  (long long)nat.runs, (long long)sh.runs);
    ck_assert_msg(nat.fwd_rounded && sh.fwd_rounded && nat.bwd_rounded && sh.bwd_rounded, "%s: not rounded",
                  what);
    ew_assert_stats(&nat.fwd, &sh.fwd, what);
    ew_assert_stats(&nat.bwd, &sh.bwd, what);
    ew_assert_same(nat.y, sh.y, sh.ny, 2, "y");
    ew_assert_same(nat.dx, sh.dx, sh.nx, 2, "dx");
    if (op == EW_BN || op == EW_BN_EVAL) {
        ew_assert_same(nat.dg, sh.dg, sh.nc, 4, "dgamma");
        ew_assert_same(nat.db, sh.db, sh.nc, 4, "dbeta");
        ew_assert_same(nat.rm, sh.rm, sh.nc, 4, "running_mean");
        ew_assert_same(nat.rv, sh.rv, sh.nc, 4, "running_var");
    }
    /* the cases reach what they are for: forward BN underflows (and
     * overflows in f16); in f16, ReLU's accumulated gradient (dy + dy) and BN's
     * eval-mode gradient (gamma * rstd * dy) overflow (bf16's range is
     * f32's: a doubled value that overflows it is already Inf in f32) */
    if (dt == TE_F16 && twice && (op == EW_RELU || op == EW_BN_EVAL))
        ck_assert_msg(sh.bwd.overflow > 0, "%s: no overflow in backward", what);
    if (op == EW_BN)
        ck_assert_msg((dt == TE_BF16 || sh.fwd.overflow > 0) && sh.fwd.underflow > 0, "%s: forward overflow %lld underflow %lld",
                      what, (long long)sh.fwd.overflow, (long long)sh.fwd.underflow);
    free(nat.y), free(sh.y), free(nat.dx), free(sh.dx);
    free(nat.dg), free(sh.dg), free(nat.db), free(sh.db);
    free(nat.rm), free(sh.rm), free(nat.rv), free(sh.rv);
}

START_TEST(test_lowp_native_ew)
{
    static const struct {
        ew_op op;
        const char *name;
    } ops[] = { { EW_RELU, "relu" }, { EW_BN, "batchnorm" }, { EW_BN_EVAL, "batchnorm_eval" }, { EW_POOL, "maxpool" } };
    ew_check(ops[_i / 4].op, _i % 2 ? TE_BF16 : TE_F16, _i / 2 % 2 == 0, ops[_i / 4].name);
}
END_TEST

typedef struct lp_net {
    te_tensor *w, *b;
} lp_net;

static te_status lp_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    lp_net *m = ctx;
    out[1] = te_relu(te_linear(in[0], m->w, m->b));
    out[0] = te_sum(out[1], TE_ALL, false);
    return te_backward(out[0]);
}

/* Graph mode dispatches its shadowed nodes the same way: a replayed step
 * runs the linear's and the ReLU's forward and backward natively, and its loss and
 * weight gradient equal eager mode's bit for bit. */
START_TEST(test_lowp_native_graph)
{
    te_lowp_native_allow(true);
    const bool have = te_lowp_native() != NULL;
    lp_net m = { te_param_new("lpn.w", TE_BF16, te_shape(24, 40)), te_param_new("lpn.b", TE_BF16, te_shape(24)) };
    ck_assert_msg(m.w && m.b, "%s", te_error());
    te_init_uniform(m.w, -0.5f, 0.5f);
    te_init_uniform(m.b, -0.5f, 0.5f);
    te_tensor *x = te_tensor_persistent(TE_BF16, te_shape(16, 40));
    te_init_uniform(x, -1.0f, 1.0f);
    int64_t n_w = m.w->numel, runs[2] = { 0 };
    float loss[2], *gw[2];
    for (int mode = 0; mode < 2; mode++) {
        te_graph *g = te_graph_new(lp_step, &m, &(te_graph_opts){ .mode = (te_mode)mode, .n_inputs = 1,
                                                                 .n_outputs = 2 });
        ck_assert(g != NULL);
        for (int step = 0; step < 2; step++) { /* graph mode: traced, then replayed */
            te_tensor *out[2];
            te_zero_grad();
            te_step_begin();
            int64_t before = te_lowp_native_runs();
            ck_assert_msg(te_graph_run(g, (te_tensor *[]){ x }, out) == TE_OK, "%s", te_error());
            runs[mode] = te_lowp_native_runs() - before;
            loss[mode] = te_item(out[0]);
            te_step_end();
        }
        gw[mode] = malloc((size_t)n_w * sizeof(float));
        te_copy_to_f32(m.w->grad, gw[mode]);
        te_graph_free(g);
    }
    /* the ReLU's forward and backward run natively everywhere, the linear's with oneDNN */
    ck_assert_msg(runs[0] == (have ? 4 : 2) && runs[1] == runs[0], "native runs: eager %lld, graph %lld",
                  (long long)runs[0], (long long)runs[1]);
    ck_assert_msg(memcmp(&loss[0], &loss[1], sizeof(float)) == 0, "loss: eager %.9g, graph %.9g", loss[0],
                  loss[1]);
    ck_assert_msg(memcmp(gw[0], gw[1], (size_t)n_w * sizeof(float)) == 0, "weight gradients differ");
    free(gw[0]);
    free(gw[1]);
    te_tensor_free(x);
}
END_TEST

/* The switch: te_lowp_native names the kernels or says NULL when turned off. */
START_TEST(test_lowp_native_switch)
{
    te_lowp_native_allow(true);
    const char *name = te_lowp_native();
#ifdef HAVE_DNNL
    if (__builtin_cpu_supports("avx512bf16") && !getenv("ONEDNN_MAX_CPU_ISA"))
        ck_assert_msg(name && strstr(name, "oneDNN"), "native kernels: %s", name ? name : "none");
#endif
    te_lowp_native_allow(false);
    ck_assert(te_lowp_native() == NULL);
    te_lowp_native_allow(true);
    ck_assert(te_lowp_native() == name);
}
END_TEST

Suite *suite_lowp_native(void)
{
    Suite *s = suite_create("lowp_native");
    TCase *tc = tcase_create("lowp_native");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_lowp_native_vs_shadow, 0, (int)(sizeof lp_cases / sizeof lp_cases[0]));
    tcase_add_test(tc, test_lowp_native_not_f16);
    tcase_add_loop_test(tc, test_lowp_native_ew, 0, 16);
    tcase_add_test(tc, test_lowp_native_graph);
    tcase_add_test(tc, test_lowp_native_switch);
    suite_add_tcase(s, tc);
    return s;
}
