/* test_attention_ops.c — the ops attention is made of: batched and
 * transposed matmul, masked fill, softmax over masked rows, te_name_next,
 * composed causal attention (PyTorch goldens from tests/fixtures/
 * attention.bin, finite differences, names, eager against graph mode), and a
 * parameter used twice (a tied embedding and output head). */
#include "fixture.h"
#include "gradcheck.h"
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATOL 1e-5
#define RTOL 1e-4

static void close_to(fx_file *f, const char *c, const char *field, const te_tensor *got)
{
    char what[128];
    snprintf(what, sizeof what, "%s.%s", c, field);
    fx_assert_close(got, fx_case(f, c, field), ATOL, RTOL, what);
}

/* ---- batched matmul ---------------------------------------------------------- */

/* The case CASE of attention.bin as te_matmul_t(a, b, ta, tb), forward and
 * backward. */
static void golden_mm(fx_file *f, const char *c, bool ta, bool tb)
{
    te_tensor *a = fx_case_param(f, c, "a"), *b = fx_case_param(f, c, "b");
    te_tensor *y = te_matmul_t(a, b, ta, tb);
    close_to(f, c, "y", y);
    ck_assert_msg(te_backward_with(y, fx_case(f, c, "dy")) == TE_OK, "%s: %s", c, te_error());
    close_to(f, c, "da", a->grad);
    close_to(f, c, "db", b->grad);
    te_tape_reset();
    te_tensor_free(a);
    te_tensor_free(b);
}

START_TEST(test_matmul_batched_golden)
{
    fx_file *f = fx_open("attention.bin");
    const char *plain[] = { "mm_2d", "mm_3d", "mm_4d", "mm_bcast", "mm_shared_b", "mm_shared_a" };
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++)
        golden_mm(f, plain[i], false, false);
    const char *bases[] = { "mm_2d", "mm_3d", "mm_4d", "mm_bcast", "mm_shared_b" };
    const bool flags[3][2] = { { false, true }, { true, false }, { true, true } };
    for (size_t i = 0; i < sizeof bases / sizeof *bases; i++)
        for (int t = 0; t < 3; t++) {
            char c[64];
            snprintf(c, sizeof c, "%s_t%d%d", bases[i], flags[t][0], flags[t][1]);
            golden_mm(f, c, flags[t][0], flags[t][1]);
        }
    fx_close(f);
}
END_TEST

typedef struct {
    bool ta, tb;
} mm_flags;

static te_tensor *gc_mm(te_tensor **in, void *ctx)
{
    const mm_flags *m = ctx;
    return te_matmul_t(in[0], in[1], m->ta, m->tb);
}

START_TEST(test_matmul_batched_gradcheck)
{
    /* a's and b's shapes as stored, for M=3, K=4, N=2 */
    static const struct {
        int na, nb;
        int64_t a[4], b[4];
        bool ta, tb;
    } cases[] = {
        { 3, 3, { 2, 3, 4 }, { 2, 4, 2 }, false, false },
        { 4, 3, { 2, 1, 3, 4 }, { 3, 4, 2 }, false, false },   /* both broadcast */
        { 3, 2, { 2, 3, 4 }, { 4, 2 }, false, false },         /* shared b: one tall GEMM */
        { 2, 3, { 3, 4 }, { 2, 4, 2 }, false, false },         /* shared a, summed */
        { 4, 4, { 2, 2, 3, 4 }, { 2, 2, 2, 4 }, false, true },  /* q @ k^T */
        { 4, 4, { 2, 1, 4, 3 }, { 1, 3, 4, 2 }, true, false },
        { 3, 3, { 2, 4, 3 }, { 1, 2, 4 }, true, true },
        { 3, 2, { 2, 3, 4 }, { 2, 4 }, false, true },          /* shared b, transposed */
        { 3, 2, { 2, 4, 3 }, { 4, 2 }, true, false },          /* shared b, a transposed */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        te_tensor *in[2] = { gc_random(cases[i].na, cases[i].a, -1, 1, 10 + i),
                             gc_random(cases[i].nb, cases[i].b, -1, 1, 30 + i) };
        mm_flags m = { cases[i].ta, cases[i].tb };
        char what[64];
        snprintf(what, sizeof what, "batched matmul case %zu", i);
        gc_check(what, gc_mm, &m, in, 2, (const bool[]){ true, true }, 1e-2f, 1e-2f);
        te_tensor_free(in[0]);
        te_tensor_free(in[1]);
    }
}
END_TEST

/* Batches that go parallel (enough of them, enough work) give what each
 * batch's own 2-D product gives, forward and backward, broadcast included. */
START_TEST(test_matmul_batched_parallel)
{
    te_tensor *a = gc_random(te_shape(4, 2, 48, 40), -1, 1, 3);
    te_tensor *b = gc_random(te_shape(2, 40, 48), -1, 1, 4); /* broadcast over dim 0 */
    te_tensor *dy = gc_random(te_shape(4, 2, 48, 48), -1, 1, 5);
    a->requires_grad = b->requires_grad = true;
    te_tensor *y = te_matmul(a, b);
    ck_assert_msg(y && y->ndim == 4 && y->shape[0] == 4 && y->shape[3] == 48, "%s", te_error());
    ck_assert(te_backward_with(y, dy) == TE_OK);
    float *db_sum = calloc((size_t)b->numel, sizeof *db_sum);
    float *av = tu_f32(a), *bv = tu_f32(b), *dyv = tu_f32(dy), *yv = tu_f32(y), *dav = tu_f32(a->grad),
          *dbv = tu_f32(b->grad);
    for (int i = 0; i < 4; i++)
        for (int h = 0; h < 2; h++) {
            int64_t r = i * 2 + h;
            te_tensor *ai = te_tensor_from(TE_F32, te_shape(48, 40), av + r * 48 * 40);
            te_tensor *bi = te_tensor_from(TE_F32, te_shape(40, 48), bv + h * 40 * 48);
            te_tensor *gi = te_tensor_from(TE_F32, te_shape(48, 48), dyv + r * 48 * 48);
            ai->requires_grad = bi->requires_grad = true;
            te_tensor *yi = te_matmul(ai, bi);
            ck_assert(te_backward_with(yi, gi) == TE_OK);
            float *yiv = tu_f32(yi), *daiv = tu_f32(ai->grad), *dbiv = tu_f32(bi->grad);
            for (int64_t e = 0; e < yi->numel; e++)
                ck_assert_msg(fabsf(yiv[e] - yv[r * yi->numel + e]) <= 1e-5f,
                              "y batch %lld element %lld", (long long)r, (long long)e);
            for (int64_t e = 0; e < ai->numel; e++)
                ck_assert_msg(fabsf(daiv[e] - dav[r * ai->numel + e]) <= 1e-5f,
                              "da batch %lld element %lld", (long long)r, (long long)e);
            for (int64_t e = 0; e < bi->numel; e++)
                db_sum[h * bi->numel + e] += dbiv[e];
            free(yiv);
            free(daiv);
            free(dbiv);
        }
    for (int64_t e = 0; e < b->numel; e++)
        ck_assert_msg(fabsf(db_sum[e] - dbv[e]) <= 1e-4f * fmaxf(1.0f, fabsf(db_sum[e])),
                      "db element %lld: %g, the batches' sum %g", (long long)e, dbv[e], db_sum[e]);
    free(db_sum);
    free(av);
    free(bv);
    free(dyv);
    free(yv);
    free(dav);
    free(dbv);
    te_tape_reset();
    te_tensor_free(a);
    te_tensor_free(b);
    te_tensor_free(dy);
}
END_TEST

START_TEST(test_matmul_batched_errors)
{
    te_tensor *a = te_tensor_zeros(TE_F32, te_shape(2, 3, 4)), *b = te_tensor_zeros(TE_F32, te_shape(3, 4, 5));
    int line = __LINE__ + 1;
    ck_assert(te_matmul(a, b) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "matmul", "MatMul", "[2,3,4]", "[3,4,5]", "do not broadcast");
    te_tensor *c = te_tensor_zeros(TE_F32, te_shape(2, 3, 5));
    line = __LINE__ + 1;
    ck_assert(te_matmul_t(a, c, false, true) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "[2,3,5] (transposed)", "inner dims 4 != 5");
    te_tensor *y = te_matmul_t(a, c, true, false); /* [2,4,3] @ [2,3,5] */
    ck_assert_msg(y && y->ndim == 3 && y->shape[1] == 4 && y->shape[2] == 5, "%s", te_error());
}
END_TEST

/* f16 and bf16 run through f32 copies like every float op. */
START_TEST(test_matmul_batched_half)
{
    te_tensor *a = gc_random(te_shape(2, 3, 8), -1, 1, 5), *b = gc_random(te_shape(2, 4, 8), -1, 1, 6);
    te_tensor *ah = tu_as_dtype(a, TE_F16), *bh = tu_as_dtype(b, TE_BF16);
    tu_copy(a, ah);
    te_tensor *bf = tu_as_dtype(b, TE_F16);
    tu_copy(b, bf);
    a->requires_grad = b->requires_grad = ah->requires_grad = bf->requires_grad = true;
    te_tensor *y = te_matmul_t(a, b, false, true), *yh = te_matmul_t(ah, bf, false, true);
    ck_assert_msg(yh && yh->dtype == TE_F16, "%s", te_error());
    fx_assert_close(yh, y, 1e-2, 1e-2, "f16 batched matmul");
    te_tensor *dy = gc_random(te_shape(2, 3, 4), -1, 1, 7);
    ck_assert(te_backward_with(y, dy) == TE_OK && te_backward_with(yh, dy) == TE_OK);
    fx_assert_close(ah->grad, a->grad, 1e-2, 1e-2, "f16 batched matmul da");
    fx_assert_close(bf->grad, b->grad, 1e-2, 1e-2, "f16 batched matmul db");
    te_tensor *ybf = te_matmul_t(a, bh, false, true);
    ck_assert(ybf && ybf->dtype == TE_F32); /* f32 wins when mixed */
    te_tape_reset();
    te_tensor *t[] = { a, b, ah, bh, bf, dy };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        te_tensor_free(t[i]);
}
END_TEST

/* Graph mode: a batched matmul is a producer the activation after it fuses
 * into, and gives eager's values and gradients. */
typedef struct {
    te_tensor *w;
} bmm_model;

static te_status bmm_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    bmm_model *m = ctx;
    out[1] = te_relu(te_matmul_t(in[0], m->w, false, true)); /* [2,3,4] @ [5,4]^T */
    out[0] = te_mean(out[1], TE_ALL, false);
    return te_backward(out[0]);
}

START_TEST(test_matmul_batched_graph)
{
    bmm_model m = { .w = te_param_new("w", TE_F32, te_shape(5, 4)) };
    te_init_uniform(m.w, -1.0f, 1.0f);
    te_tensor *x = gc_random(te_shape(2, 3, 4), -1, 1, 12);
    float y[2][30], g[2][20];
    for (int mode = 0; mode < 2; mode++) {
        te_graph *gr = te_graph_new(bmm_step, &m, &(te_graph_opts){ .mode = (te_mode)mode, .n_inputs = 1,
                                                                   .n_outputs = 2 });
        te_tensor *out[2];
        te_zero_grad();
        te_step_begin();
        ck_assert_msg(te_graph_run(gr, (te_tensor *[]){ x }, out) == TE_OK, "%s", te_error());
        te_copy_to_f32(out[1], y[mode]);
        te_copy_to_f32(m.w->grad, g[mode]);
        te_step_end();
        if (mode == TE_MODE_GRAPH)
            ck_assert_int_ge(te_graph_stats_get(gr).fused, 1);
        te_graph_free(gr);
    }
    for (int i = 0; i < 30; i++)
        ck_assert_msg(y[0][i] == y[1][i], "y[%d]: eager %g graph %g", i, y[0][i], y[1][i]);
    for (int i = 0; i < 20; i++)
        ck_assert_msg(g[0][i] == g[1][i], "dw[%d]: eager %g graph %g", i, g[0][i], g[1][i]);
    te_tensor_free(x);
}
END_TEST

/* ---- masked fill ------------------------------------------------------------- */

static void golden_masked_fill(fx_file *f, const char *c, float value)
{
    te_tensor *x = fx_case_param(f, c, "x"), *mask = fx_case(f, c, "mask");
    te_tensor *y = te_masked_fill(x, mask, value);
    ck_assert_msg(y != NULL, "%s: %s", c, te_error());
    close_to(f, c, "y", y);
    te_tensor *want = fx_case(f, c, "y");
    for (int64_t i = 0; i < y->numel; i++) /* -inf == -inf: close_to cannot tell */
        ck_assert_msg(te_get(y, i) == te_get(want, i), "%s.y[%lld] = %g, expected %g", c,
                      (long long)i, te_get(y, i), te_get(want, i));
    ck_assert(te_backward_with(y, fx_case(f, c, "dy")) == TE_OK);
    close_to(f, c, "dx", x->grad);
    te_tape_reset();
    te_tensor_free(x);
}

START_TEST(test_masked_fill_golden)
{
    fx_file *f = fx_open("attention.bin");
    golden_masked_fill(f, "masked_fill", -5.0f);         /* mask [3,1,4] into x [2,3,5,4] */
    golden_masked_fill(f, "masked_fill_inf", -INFINITY); /* causal [4,4] into [2,4,4] */
    fx_close(f);
}
END_TEST

static te_tensor *gc_masked_fill(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_masked_fill(in[0], in[1], -3.0f);
}

START_TEST(test_masked_fill_gradcheck)
{
    te_tensor *in[2] = { gc_random(te_shape(2, 3, 4), -1, 1, 1), gc_random(te_shape(3, 1), 0, 1, 2) };
    for (int64_t i = 0; i < in[1]->numel; i++) /* rows 0 and 2 masked */
        te_set(in[1], i, i % 2 == 0 ? 1.0f : 0.0f);
    gc_check("masked_fill", gc_masked_fill, NULL, in, 2, (const bool[]){ true, false }, 1e-2f, 1e-2f);
    ck_assert_msg(!in[1]->grad_valid, "the mask got a gradient");
    te_tensor_free(in[0]);
    te_tensor_free(in[1]);
}
END_TEST

/* The op table marks it: an intended -inf is no fault. */
START_TEST(test_masked_fill_table)
{
    const te_op_info *info = te_op_info_of(TE_OP_MASKED_FILL);
    ck_assert_str_eq(info->type, "MaskedFill");
    ck_assert_str_eq(info->name, "masked_fill");
    ck_assert_uint_eq(te_op_traits(TE_OP_MASKED_FILL) & TE_TRAIT_NONFINITE_OK, TE_TRAIT_NONFINITE_OK);
    ck_assert_uint_eq(te_op_bwd_reads(TE_OP_MASKED_FILL), TE_IN1);
    ck_assert_uint_eq(te_op_traits(TE_OP_MATMUL) & TE_TRAIT_NONFINITE_OK, 0);
}
END_TEST

START_TEST(test_masked_fill_errors)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 3)), *m = te_tensor_zeros(TE_F32, te_shape(2));
    int line = __LINE__ + 1;
    ck_assert(te_masked_fill(x, m, 0.0f) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "masked_fill", "MaskedFill", "mask [2]", "x [2,3]");
    te_tensor *big = te_tensor_zeros(TE_F32, te_shape(4, 2, 3));
    ck_assert(te_masked_fill(x, big, 0.0f) == NULL); /* the mask may not enlarge x */
    tu_assert_error(TE_ERR_SHAPE, "does not broadcast");
    te_tensor *mi = te_tensor_zeros(TE_I32, te_shape(3));
    ck_assert(te_masked_fill(x, mi, 0.0f) == NULL);
    tu_assert_error(TE_ERR_DTYPE, "mask", "i32");
    te_tensor *mg = te_tensor_persistent(TE_F32, te_shape(3));
    mg->requires_grad = true;
    ck_assert(te_masked_fill(x, mg, 0.0f) == NULL);
    tu_assert_error(TE_ERR_ARG, "requires grad");
    te_tensor_free(mg);
}
END_TEST

/* ---- softmax over masked rows ------------------------------------------------- */

START_TEST(test_softmax_masked_rows)
{
    fx_file *f = fx_open("attention.bin");
    te_tensor *x = fx_case_param(f, "softmax_masked", "x");
    te_tensor *y = te_softmax(x, -1);
    close_to(f, "softmax_masked", "y", y);
    for (int64_t i = 0; i < 5; i++) /* row [0,1] is all -inf: zeros, not NaN */
        ck_assert_msg(te_get(y, 5 + i) == 0.0f, "masked row element %lld: %g", (long long)i,
                      te_get(y, 5 + i));
    ck_assert(te_backward_with(y, fx_case(f, "softmax_masked", "dy")) == TE_OK);
    close_to(f, "softmax_masked", "dx", x->grad);
    for (int64_t i = 0; i < 5; i++)
        ck_assert(te_get(x->grad, 5 + i) == 0.0f);
    te_tape_reset();
    te_tensor_free(x);
    fx_close(f);

    /* A NaN in a masked row still makes the row NaN. */
    te_tensor *z = te_tensor_from(TE_F32, te_shape(1, 3), (const float[]){ -INFINITY, NAN, -INFINITY });
    te_tensor *s = te_softmax(z, 1);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(isnan(te_get(s, i)), "element %d: %g", i, te_get(s, i));
}
END_TEST

static te_tensor *gc_softmax(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_softmax(in[0], -1);
}

START_TEST(test_softmax_masked_gradcheck)
{
    te_tensor *in[1] = { gc_random(te_shape(3, 4), -1, 1, 9) };
    for (int k = 0; k < 4; k++)
        te_set(in[0], 4 + k, -INFINITY); /* row 1 whole */
    te_set(in[0], 8, -INFINITY);         /* row 2 in part */
    gc_check("softmax masked", gc_softmax, NULL, in, 1, (const bool[]){ true }, 1e-2f, 1e-2f);
    te_tensor_free(in[0]);
}
END_TEST

/* ---- te_name_next --------------------------------------------------------------- */

typedef struct {
    char names[32][TE_NAME_MAX];
    char types[32][32];
    int n;
} name_log;

static void log_name(const te_op_record *r, void *user)
{
    name_log *l = user;
    if (l->n < 32) {
        snprintf(l->names[l->n], TE_NAME_MAX, "%s", r->name);
        snprintf(l->types[l->n], 32, "%s", r->type);
        l->n++;
    }
}

START_TEST(test_name_next)
{
    name_log l = { .n = 0 };
    int h = te_hook_add(&(te_hooks){ .op_end = log_name }, &l);
    te_tensor *x = gc_random(te_shape(2, 2), -1, 1, 1);
    x->requires_grad = true;
    te_step_begin();
    te_scope_push("blk");
    te_name_next("first");
    te_tensor *a = te_relu(x);           /* blk/first */
    te_tensor *b = te_relu(a);           /* blk/relu: the name is for one op */
    te_name_next("first");
    te_tensor *c = te_add(a, b);         /* blk/first_1 */
    te_name_next("gone");
    ck_assert(te_relu(NULL) == NULL);    /* an op that is not made still takes it */
    te_name_next("x");
    te_name_next(NULL);                  /* cancelled */
    te_tensor *d = te_scale(c, 2.0f);    /* blk/scale */
    te_scope_pop();
    ck_assert(te_backward(te_sum(d, TE_ALL, false)) == TE_OK);
    te_step_end();
    te_hook_remove(h);
    const char *want[] = { "blk/first", "blk/relu", "blk/first_1", "blk/scale", "sum",
                           "grad/sum", "grad/blk/scale", "grad/blk/first_1", "grad/blk/relu",
                           "grad/blk/first" };
    ck_assert_int_eq(l.n, 10);
    for (int i = 0; i < 10; i++)
        ck_assert_str_eq(l.names[i], want[i]);
    ck_assert_str_eq(l.types[2], "Add");
    te_tensor_free(x);
}
END_TEST

/* ---- composed causal attention ------------------------------------------------- */

START_TEST(test_attention_golden)
{
    fx_file *f = fx_open("attention.bin");
    te_tensor *q = fx_case_param(f, "attention", "q"), *k = fx_case_param(f, "attention", "k");
    te_tensor *v = fx_case_param(f, "attention", "v");
    te_tensor *y = te_causal_attention(q, k, v, 0.0f);
    close_to(f, "attention", "y", y);
    ck_assert(te_backward_with(y, fx_case(f, "attention", "dy")) == TE_OK);
    close_to(f, "attention", "dq", q->grad);
    close_to(f, "attention", "dk", k->grad);
    close_to(f, "attention", "dv", v->grad);
    te_tape_reset();
    te_tensor_free(q);
    te_tensor_free(k);
    te_tensor_free(v);
    fx_close(f);
}
END_TEST

/* f16 q, k, v: the -inf of the mask survives the f16 scores, the output
 * follows f32's within f16's precision, gradients too. */
START_TEST(test_attention_half)
{
    te_tensor *in[3], *half[3];
    for (int i = 0; i < 3; i++) {
        in[i] = gc_random(te_shape(1, 2, 5, 4), -1, 1, 40 + i);
        half[i] = tu_as_dtype(in[i], TE_F16);
        tu_copy(in[i], half[i]);
        in[i]->requires_grad = half[i]->requires_grad = true;
    }
    te_tensor *y = te_causal_attention(in[0], in[1], in[2], 0.0f);
    te_tensor *yh = te_causal_attention(half[0], half[1], half[2], 0.0f);
    ck_assert_msg(yh && yh->dtype == TE_F16, "%s", te_error());
    fx_assert_close(yh, y, 1e-2, 1e-2, "f16 attention");
    te_tensor *dy = gc_random(te_shape(1, 2, 5, 4), -1, 1, 44);
    ck_assert(te_backward_with(y, dy) == TE_OK && te_backward_with(yh, dy) == TE_OK);
    for (int i = 0; i < 3; i++)
        fx_assert_close(half[i]->grad, in[i]->grad, 2e-2, 2e-2, "f16 attention gradient");
    te_tape_reset();
    te_tensor_free(dy);
    for (int i = 0; i < 3; i++) {
        te_tensor_free(in[i]);
        te_tensor_free(half[i]);
    }
}
END_TEST

static te_tensor *gc_attention(te_tensor **in, void *ctx)
{
    (void)ctx;
    return te_causal_attention(in[0], in[1], in[2], 0.0f);
}

START_TEST(test_attention_gradcheck)
{
    te_tensor *in[3] = { gc_random(te_shape(1, 2, 4, 3), -1, 1, 21), gc_random(te_shape(1, 2, 4, 3), -1, 1, 22),
                         gc_random(te_shape(1, 2, 4, 3), -1, 1, 23) };
    gc_check("causal attention", gc_attention, NULL, in, 3, (const bool[]){ true, true, true }, 1e-2f,
             1e-2f);
    for (int i = 0; i < 3; i++)
        te_tensor_free(in[i]);
}
END_TEST

/* In scope h0/attn the ops are named after their role, forward and backward. */
START_TEST(test_attention_names)
{
    te_tensor *q = gc_random(te_shape(1, 2, 3, 4), -1, 1, 1), *k = gc_random(te_shape(1, 2, 3, 4), -1, 1, 2);
    te_tensor *v = gc_random(te_shape(1, 2, 3, 4), -1, 1, 3);
    q->requires_grad = true;
    for (int drop = 0; drop < 2; drop++) {
        name_log l = { .n = 0 };
        int h = te_hook_add(&(te_hooks){ .op_end = log_name }, &l);
        te_step_begin();
        te_scope_push("h0");
        te_scope_push("attn");
        te_tensor *y = te_causal_attention(q, k, v, drop ? 0.5f : 0.0f);
        te_scope_pop();
        te_scope_pop();
        ck_assert_msg(y != NULL, "%s", te_error());
        ck_assert(te_backward(te_sum(y, TE_ALL, false)) == TE_OK);
        te_step_end();
        te_hook_remove(h);
        const char *fwd[] = { "h0/attn/scores", "h0/attn/scale", "h0/attn/mask", "h0/attn/softmax",
                              "h0/attn/dropout", "h0/attn/out" };
        const char *types[] = { "MatMul", "Scale", "MaskedFill", "Softmax", "Dropout", "MatMul" };
        int n = 0;
        for (int i = 0; i < 6; i++) {
            if (i == 4 && !drop)
                continue;
            ck_assert_str_eq(l.names[n], fwd[i]);
            ck_assert_str_eq(l.types[n], types[i]);
            n++;
        }
        ck_assert_str_eq(l.names[n], "sum");
        ck_assert_int_eq(l.n, 2 * (n + 1));
        for (int i = 0; i <= n; i++) {
            char g[TE_NAME_MAX + 8];
            snprintf(g, sizeof g, "grad/%s", l.names[n - i]);
            ck_assert_str_eq(l.names[n + 1 + i], g);
        }
    }
    /* The mask is one persistent tensor per T, and no parameter. */
    ck_assert_int_eq(te_param_count(), 0);
    te_tensor_free(q);
    te_tensor_free(k);
    te_tensor_free(v);
}
END_TEST

START_TEST(test_attention_errors)
{
    te_tensor *q = te_tensor_zeros(TE_F32, te_shape(1, 2, 3, 4)), *k = te_tensor_zeros(TE_F32, te_shape(1, 2, 4, 4));
    int line = __LINE__ + 1;
    ck_assert(te_causal_attention(q, k, q, 0.0f) == NULL);
    tu_assert_error(TE_ERR_SHAPE, tu_at(line), "causal_attention", "q [1,2,3,4]", "k [1,2,4,4]");
    te_error_clear();
    ck_assert(te_causal_attention(q, NULL, q, 0.0f) == NULL);
    tu_assert_error(TE_ERR_INPUT, "k is NULL");
    ck_assert(te_causal_attention(q, q, q, 1.5f) == NULL);
    tu_assert_error(TE_ERR_ARG, "dropout", "1.5");
}
END_TEST

/* Dropout's mask is te_dropout_keep's, keyed by the op's name and step: the
 * function a fused kernel calls to drop the same elements. */
START_TEST(test_dropout_keep)
{
    te_tensor *x = gc_random(te_shape(4, 50), 1, 2, 4);
    te_step_begin();
    te_scope_push("h0/attn");
    te_name_next("dropout");
    te_tensor *y = te_dropout(x, 0.25f);
    te_scope_pop();
    ck_assert_str_eq(y->node->name, "h0/attn/dropout");
    uint64_t seed = te_dropout_seed("h0/attn/dropout", te_step());
    int dropped = 0;
    for (int64_t i = 0; i < x->numel; i++) {
        float want = te_get(x, i) * te_dropout_keep(seed, i, 0.25f) * (1.0f / 0.75f);
        ck_assert_msg(te_get(y, i) == want, "element %lld: %g, keep says %g", (long long)i,
                      te_get(y, i), want);
        dropped += te_dropout_keep(seed, i, 0.25f) == 0.0f;
    }
    ck_assert_msg(dropped > 20 && dropped < 80, "%d of 200 dropped at p 0.25", dropped);
    te_step_end();
    te_tensor_free(x);
}
END_TEST

/* The mask's integer test (te_dropout_kept against te_dropout_threshold) is
 * the draw te_rand_uniform(seed, 0, i) >= p, bit for bit, at every p; over a
 * million elements the keep rate is 1 - p within 5 standard deviations and
 * neighbours (lag 1, a vector's width, the kernels' chunk) are uncorrelated. */
START_TEST(test_dropout_mask_quality)
{
    const uint64_t seed = te_dropout_seed("h3/mlp/dropout", 17);
    const float ps[] = { 0.0f, 1e-6f, 0.1f, 0.25f, 0.5f, 0.9f, 0.99999994f };
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++)
        for (int64_t i = 0; i < 20000; i++) {
            float want = te_rand_uniform(seed, 0, (uint64_t)i) >= ps[k] ? 1.0f : 0.0f;
            ck_assert_msg(te_dropout_keep(seed, i, ps[k]) == want, "p %g element %lld: keep %g, draw says %g",
                          (double)ps[k], (long long)i, te_dropout_keep(seed, i, ps[k]), want);
        }
    enum { N = 1 << 20 };
    const int lags[] = { 1, 16, 4096 };
    const float pr[] = { 0.1f, 0.5f };
    for (int k = 0; k < 2; k++) {
        const uint64_t key = te_rand_key(seed, 0), thr = te_dropout_threshold(pr[k]);
        double kept = 0, later[3] = { 0 }, both[3] = { 0 };
        for (int64_t i = 0; i < N; i++) {
            const bool a = te_dropout_kept(key, thr, i);
            kept += a;
            for (int l = 0; l < 3; l++) {
                const bool b = te_dropout_kept(key, thr, i + lags[l]);
                later[l] += b;
                both[l] += a && b;
            }
        }
        const double q = 1.0 - pr[k], sd = sqrt(q * (1 - q) / N), m = kept / N;
        ck_assert_msg(fabs(m - q) < 5 * sd, "p %g: keep rate %g", (double)pr[k], m);
        for (int l = 0; l < 3; l++) {
            /* Pearson's correlation of the keep indicators at this lag:
             * about normal, standard deviation 1/sqrt(N), when independent */
            const double ml = later[l] / N;
            const double r = (both[l] / N - m * ml) / sqrt(m * (1 - m) * ml * (1 - ml));
            ck_assert_msg(fabs(r) < 5 / sqrt((double)N), "p %g lag %d: correlation %g", (double)pr[k],
                          lags[l], r);
        }
    }
}
END_TEST

/* The vectorised kernels over several chunks and a ragged tail: forward and
 * an accumulating backward drop exactly te_dropout_keep's elements. */
START_TEST(test_dropout_kernel_chunks)
{
    enum { N = 3 * 4096 + 77 };
    te_tensor *x = gc_random(te_shape(N), -1, 1, 8);
    te_tensor *w = gc_random(te_shape(N), -1, 1, 9);
    x->requires_grad = true;
    te_step_begin();
    te_name_next("drop");
    te_tensor *y = te_dropout(x, 0.3f);
    ck_assert(te_backward(te_sum(te_add(te_mul(y, w), x), TE_ALL, false)) == TE_OK);
    const uint64_t seed = te_dropout_seed(y->node->name, te_step());
    const float scale = 1.0f / 0.7f;
    int dropped = 0;
    for (int64_t i = 0; i < N; i++) {
        const float keep = te_dropout_keep(seed, i, 0.3f);
        dropped += keep == 0.0f;
        ck_assert_msg(te_get(y, i) == te_get(x, i) * (keep * scale), "forward %lld: %g", (long long)i,
                      te_get(y, i));
        const float g = te_get(w, i) * (keep * scale) + 1.0f;
        ck_assert_msg(te_get(x->grad, i) == g, "backward %lld: %g, want %g", (long long)i,
                      te_get(x->grad, i), g);
    }
    ck_assert_msg(dropped > 0.27 * N && dropped < 0.33 * N, "%d of %d dropped at p 0.3", dropped, N);
    te_step_end();
    te_tensor_free(x);
    te_tensor_free(w);
}
END_TEST

/* ---- a parameter used twice ------------------------------------------------------- */

/* wte [V,C] embeds the tokens and is the head's linear weight: its gradient
 * is the sum of both uses' gradients, each taken alone with its own copy. */
START_TEST(test_tied_weight)
{
    enum { V = 7, C = 5, N = 6 };
    te_tensor *wte = te_param_new("wte", TE_F32, te_shape(V, C));
    te_tensor *w_emb = te_param_new("emb_only", TE_F32, te_shape(V, C));
    te_tensor *w_head = te_param_new("head_only", TE_F32, te_shape(V, C));
    te_init_normal(wte, 0.0f, 0.5f);
    tu_copy(w_emb, wte);
    tu_copy(w_head, wte);
    te_tensor *idx = te_tensor_persistent(TE_I32, te_shape(N)), *labels = te_tensor_persistent(TE_I32, te_shape(N));
    for (int i = 0; i < N; i++) {
        te_set(idx, i, (float)((i * 3) % V));
        te_set(labels, i, (float)((i * 5 + 1) % V));
    }
    te_zero_grad();
    te_step_begin();
    te_tensor *tied = te_cross_entropy(te_linear(te_embedding(wte, idx), wte, NULL), labels);
    te_tensor *split = te_cross_entropy(te_linear(te_embedding(w_emb, idx), w_head, NULL), labels);
    ck_assert(te_backward(tied) == TE_OK && te_backward(split) == TE_OK);
    ck_assert(te_item(tied) == te_item(split));
    for (int64_t i = 0; i < wte->numel; i++) {
        float want = te_get(w_emb->grad, i) + te_get(w_head->grad, i);
        ck_assert_msg(fabsf(te_get(wte->grad, i) - want) <= 1e-6f * fmaxf(1.0f, fabsf(want)),
                      "wte grad [%lld]: %g, the two uses' sum %g", (long long)i, te_get(wte->grad, i), want);
    }
    ck_assert(te_get(w_emb->grad, 0) != 0.0f || te_get(w_emb->grad, 1) != 0.0f); /* both uses count */
    te_step_end();
    te_tensor_free(idx);
    te_tensor_free(labels);
}
END_TEST

/* ---- eager against graph mode --------------------------------------------------- */

typedef struct {
    te_tensor *wq, *wk, *wv; /* [D,D] each */
    float dropout;
} attn_model;

/* x [B,H,T,D] -> q, k, v by matmul with a shared [D,D] (a broadcast operand,
 * its gradient summed), attention, a loss against the target. */
static te_status attn_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    attn_model *m = ctx;
    te_scope_push("h0/attn");
    te_tensor *y = te_causal_attention(te_matmul(in[0], m->wq), te_matmul(in[0], m->wk),
                                       te_matmul(in[0], m->wv), m->dropout);
    te_scope_pop();
    out[1] = y;
    out[0] = te_mse(y, in[1]);
    return te_backward(out[0]);
}

static void run_attn(attn_model *m, te_mode mode, te_tensor *const *in, float *loss, float *y, float *dwq)
{
    te_graph *g = te_graph_new(attn_step, m, &(te_graph_opts){ .mode = mode, .n_inputs = 2, .n_outputs = 2 });
    ck_assert_msg(g != NULL, "%s", te_error());
    for (int s = 0; s < 3; s++) {
        te_tensor *out[2];
        te_zero_grad();
        te_step_begin();
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s: %s", te_mode_name(mode), te_error());
        loss[s] = te_item(out[0]);
        if (s == 2) {
            te_copy_to_f32(out[1], y);
            te_copy_to_f32(m->wq->grad, dwq);
        }
        te_step_end();
    }
    te_graph_free(g);
}

/* A fresh engine (seed 1: the same init and the same dropout masks), the
 * model's weights and its input and target, persistent. */
static void attn_fresh(attn_model *m, te_tensor **io)
{
    te_init(&(te_config){ .seed = 1, .threads = 2 });
    te_tensor **w[] = { &m->wq, &m->wk, &m->wv };
    const char *names[] = { "wq", "wk", "wv" };
    for (int i = 0; i < 3; i++) {
        *w[i] = te_param_new(names[i], TE_F32, te_shape(4, 4));
        te_init_uniform(*w[i], -0.5f, 0.5f);
    }
    io[0] = gc_random(te_shape(2, 2, 6, 4), -1, 1, 8);
    io[1] = gc_random(te_shape(2, 2, 6, 4), -1, 1, 9);
}

/* Graph mode (its own passes; no fused attention is asked for here) gives
 * eager's losses, outputs and gradients, with and without dropout. */
START_TEST(test_attention_eager_graph)
{
    for (int drop = 0; drop < 2; drop++) {
        attn_model m = { .dropout = drop ? 0.2f : 0.0f };
        float le[3], lg[3], ye[96], yg[96], ge[16], gg[16];
        te_tensor *io[2];
        attn_fresh(&m, io);
        run_attn(&m, TE_MODE_EAGER, io, le, ye, ge);
        te_tensor_free(io[0]);
        te_tensor_free(io[1]);
        attn_fresh(&m, io);
        run_attn(&m, TE_MODE_GRAPH, io, lg, yg, gg);
        te_tensor_free(io[0]);
        te_tensor_free(io[1]);
        for (int s = 0; s < 3; s++)
            ck_assert_msg(fabsf(le[s] - lg[s]) <= 1e-5f * fabsf(le[s]),
                          "dropout %g step %d: eager %.9g graph %.9g", (double)m.dropout, s, le[s], lg[s]);
        for (int i = 0; i < 96; i++)
            ck_assert_msg(fabsf(ye[i] - yg[i]) <= 1e-5f * fmaxf(1.0f, fabsf(ye[i])), "y[%d]: %g vs %g", i,
                          ye[i], yg[i]);
        for (int i = 0; i < 16; i++)
            ck_assert_msg(fabsf(ge[i] - gg[i]) <= 1e-5f * fmaxf(1.0f, fabsf(ge[i])), "dwq[%d]: %g vs %g",
                          i, ge[i], gg[i]);
        if (drop)
            ck_assert_msg(le[0] != le[1], "dropout: a fresh mask each step");
    }
}
END_TEST

Suite *suite_attention_ops(void)
{
    Suite *s = suite_create("attention_ops");
    TCase *tc = tcase_create("attention_ops");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_matmul_batched_golden);
    tcase_add_test(tc, test_matmul_batched_gradcheck);
    tcase_add_test(tc, test_matmul_batched_parallel);
    tcase_add_test(tc, test_matmul_batched_errors);
    tcase_add_test(tc, test_matmul_batched_half);
    tcase_add_test(tc, test_matmul_batched_graph);
    tcase_add_test(tc, test_masked_fill_golden);
    tcase_add_test(tc, test_masked_fill_gradcheck);
    tcase_add_test(tc, test_masked_fill_table);
    tcase_add_test(tc, test_masked_fill_errors);
    tcase_add_test(tc, test_softmax_masked_rows);
    tcase_add_test(tc, test_softmax_masked_gradcheck);
    tcase_add_test(tc, test_name_next);
    tcase_add_test(tc, test_attention_golden);
    tcase_add_test(tc, test_attention_gradcheck);
    tcase_add_test(tc, test_attention_half);
    tcase_add_test(tc, test_attention_names);
    tcase_add_test(tc, test_attention_errors);
    tcase_add_test(tc, test_dropout_keep);
    tcase_add_test(tc, test_dropout_mask_quality);
    tcase_add_test(tc, test_dropout_kernel_chunks);
    tcase_add_test(tc, test_tied_weight);
    tcase_add_test(tc, test_attention_eager_graph);
    suite_add_tcase(s, tc);
    return s;
}
