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
    tu_fill_uniform(te_f32(dy), dy->numel, 7, -1.0f, 1.0f);
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
 * runs the linear's forward and backward natively, and its loss and
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
    ck_assert_msg(runs[0] == (have ? 2 : 0) && runs[1] == runs[0], "native runs: eager %lld, graph %lld",
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
    tcase_add_test(tc, test_lowp_native_graph);
    tcase_add_test(tc, test_lowp_native_switch);
    suite_add_tcase(s, tc);
    return s;
}
