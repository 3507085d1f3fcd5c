/* test_core.c — dtypes, allocator, tape and naming, errors, hooks, rng, injection. */
#include "suites.h"
#include "te.h"
#include "testutil.h"

#ifdef TE_HAVE_CUDA
#include "cuda/cuda_probe.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(test_dtypes)
{
    ck_assert_str_eq(te_dtype_name(TE_F32), "f32");
    ck_assert_str_eq(te_dtype_name(TE_BF16), "bf16");
    ck_assert_int_eq(te_dtype_size(TE_F16), 2);
    ck_assert_int_eq(te_dtype_size(TE_I32), 4);
    ck_assert(te_dtype_is_float(TE_BF16) && !te_dtype_is_float(TE_I32));
}
END_TEST

START_TEST(test_f16_bits)
{
    ck_assert_uint_eq(te_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(te_f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(te_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(te_f32_to_f16(65519.0f), 0x7bff); /* below the rounding midpoint */
    ck_assert_uint_eq(te_f32_to_f16(65520.0f), 0x7c00); /* ties to even: overflow */
    ck_assert_uint_eq(te_f32_to_f16(5.9604645e-8f), 0x0001); /* smallest subnormal */
    ck_assert_uint_eq(te_f32_to_f16(1e-8f), 0x0000);
    ck_assert_uint_eq(te_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even, down */
    ck_assert_uint_eq(te_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); /* tie to even, up */
    ck_assert_uint_eq(te_f32_to_f16(INFINITY), 0x7c00);
    ck_assert(isnan(te_f16_to_f32(te_f32_to_f16(NAN))));
    ck_assert_float_eq(te_f16_to_f32(0x3555), 0.333251953125f);
    ck_assert_float_eq(te_f16_to_f32(0x0001), 5.9604644775390625e-8f);
    /* every finite half survives the round trip */
    for (uint32_t h = 0; h < 0x7c00; h++)
        ck_assert_uint_eq(te_f32_to_f16(te_f16_to_f32((uint16_t)h)), h);
}
END_TEST

START_TEST(test_bf16_bits)
{
    ck_assert_uint_eq(te_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(te_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80); /* tie to even, down */
    ck_assert_uint_eq(te_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82); /* tie to even, up */
    ck_assert_float_eq(te_bf16_to_f32(0x4049), 3.140625f);
    ck_assert(isnan(te_bf16_to_f32(te_f32_to_bf16(NAN))));
}
END_TEST

START_TEST(test_tensor_create_and_access)
{
    te_tensor *t = te_tensor_zeros(TE_F16, te_shape(2, 3));
    ck_assert_int_eq(t->numel, 6);
    ck_assert_int_eq(t->nbytes, 12);
    te_set(t, 4, 0.1f);
    ck_assert_float_eq(te_get(t, 4), te_f16_to_f32(te_f32_to_f16(0.1f)));
    char buf[32];
    ck_assert_str_eq(te_shape_str(t->ndim, t->shape, buf, sizeof buf), "[2,3]");
    te_tensor *i = te_tensor_from(TE_I32, te_shape(3), (int32_t[]){ 7, -1, 3 });
    ck_assert_float_eq(te_get(i, 1), -1.0f);

    ck_assert_ptr_null(te_tensor_new(TE_F32, 5, (int64_t[]){ 1, 1, 1, 1, 1 }));
    ck_assert_int_eq(te_error_code(), TE_ERR_SHAPE);
    ck_assert_msg(strstr(te_error(), "5 dims") != NULL, "%s", te_error());
    ck_assert_ptr_null(te_tensor_new(TE_F32, te_shape(2, -3)));
    ck_assert_msg(strstr(te_error(), "[2,-3]") != NULL, "%s", te_error());
}
END_TEST

START_TEST(test_allocator_accounting)
{
    te_mem_stats s0 = te_mem_stats_get();
    te_tensor *a = te_tensor_persistent(TE_F32, te_shape(1000)); /* 4000 B -> 4096 class */
    te_mem_stats s1 = te_mem_stats_get();
    ck_assert_uint_eq(s1.current - s0.current, 4096);
    ck_assert_uint_eq(s1.requested - s0.requested, 4000); /* the bytes asked for */
    ck_assert_uint_ge(s1.peak, s1.current);
    ck_assert_uint_ge(s1.peak_requested, s1.requested);
    te_tensor_free(a);
    te_mem_stats s2 = te_mem_stats_get();
    ck_assert_uint_eq(s2.current, s0.current);
    ck_assert_uint_eq(s2.requested, s0.requested);
    ck_assert_uint_eq(s2.peak_requested, s1.peak_requested);
    ck_assert_uint_eq(s2.cached - s0.cached, 4096);
    ck_assert_uint_eq(s2.peak, s1.peak); /* peak remembers */
    /* the same size again comes from the cache */
    te_tensor *b = te_tensor_persistent(TE_F32, te_shape(1000));
    te_mem_stats s3 = te_mem_stats_get();
    ck_assert_uint_eq(s3.cache_hits, s2.cache_hits + 1);
    ck_assert_uint_eq(s3.cached, s0.cached);
    te_tensor_free(b);
    /* large sizes round up by at most a quarter */
    te_tensor *c = te_tensor_persistent(TE_F32, te_shape(300000)); /* 1.2 MB */
    te_mem_stats s4 = te_mem_stats_get();
    ck_assert_uint_ge(s4.current - s3.current + 4096, 1200000);
    ck_assert_uint_le(s4.current - s3.current + 4096, 1200000 * 5 / 4);
    ck_assert_uint_eq(s4.requested - s3.requested + 4000, 1200000);
    te_tensor_free(c);
    te_mem_reset_peak();
    ck_assert_uint_eq(te_mem_stats_get().peak, te_mem_stats_get().current);
    ck_assert_uint_eq(te_mem_stats_get().peak_requested, te_mem_stats_get().requested);
    te_mem_release_cached();
    ck_assert_uint_eq(te_mem_stats_get().cached, 0);
}
END_TEST

START_TEST(test_free_refuses_tape_tensors)
{
    te_tensor *t = te_tensor_new(TE_F32, te_shape(8));
    snprintf(t->name, sizeof t->name, "batch:x");
    te_tensor_free(t); /* would be a double free at the reset */
    tu_assert_error(TE_ERR_STATE, "batch:x belongs to the tape");
    te_set(t, 7, 1.0f);
    te_tape_reset();
}
END_TEST

START_TEST(test_tape_reset_frees)
{
    size_t before = te_mem_stats_get().current;
    te_step_begin();
    for (int i = 0; i < 10; i++)
        te_tensor_new(TE_F32, te_shape(64, 64));
    ck_assert_uint_gt(te_mem_stats_get().current, before);
    te_step_end();
    ck_assert_uint_eq(te_mem_stats_get().current, before);
}
END_TEST

START_TEST(test_scoped_names)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(2, 2));
    te_step_begin();
    te_scope_push("block1");
    te_scope_push("fc");
    te_tensor *a = te_scale(x, 2.0f);
    te_tensor *b = te_scale(a, 2.0f);
    te_scope_pop();
    te_tensor *c = te_relu(b);
    te_scope_pop();
    te_tensor *d = te_relu(c);
    ck_assert_str_eq(a->name, "block1/fc/scale:out0");
    ck_assert_str_eq(b->name, "block1/fc/scale_1:out0");
    ck_assert_str_eq(c->name, "block1/relu:out0");
    ck_assert_str_eq(d->name, "relu:out0");
    te_step_end();
    /* names restart each step, so they are stable across steps */
    te_step_begin();
    x = te_tensor_zeros(TE_F32, te_shape(2, 2));
    te_scope_push("block1");
    te_scope_push("fc");
    ck_assert_str_eq(te_scale(x, 1.0f)->name, "block1/fc/scale:out0");
    te_scope_pop();
    te_scope_pop();
    te_step_end();
}
END_TEST

/* A failed op gives its name back: the next op is named as if it never ran. */
START_TEST(test_failed_op_keeps_names_stable)
{
    te_step_begin();
    te_tensor *a = te_tensor_zeros(TE_F32, te_shape(2, 3));
    te_scope_push("fc");
    ck_assert_ptr_null(te_matmul(a, a)); /* [2,3]@[2,3]: inner dims differ */
    ck_assert_ptr_null(te_matmul(a, a));
    te_tensor *ok = te_matmul(a, te_tensor_zeros(TE_F32, te_shape(3, 4)));
    te_tensor *again = te_matmul(a, te_tensor_zeros(TE_F32, te_shape(3, 4)));
    te_scope_pop();
    ck_assert_str_eq(ok->name, "fc/matmul:out0");
    ck_assert_str_eq(again->name, "fc/matmul_1:out0");
    te_step_end();
}
END_TEST

/* Backward visits only ops the gradient reaches: an unrelated earlier op
 * whose persistent input was freed is never looked at (ASan checks this). */
START_TEST(test_backward_skips_unreached_ops)
{
    te_tensor *gone = te_tensor_persistent(TE_F32, te_shape(4));
    te_relu(gone);
    te_tensor_free(gone);
    te_tensor *p = te_param_new("p", TE_F32, te_shape(1));
    te_fill(p, 2.0f);
    ck_assert_int_eq(te_backward(te_scale(p, 3.0f)), TE_OK);
    ck_assert_float_eq(te_get(p->grad, 0), 3.0f);
}
END_TEST

START_TEST(test_error_names_op_location_shapes)
{
    te_tensor *a = te_tensor_zeros(TE_F32, te_shape(4, 3));
    te_tensor *b = te_tensor_zeros(TE_F32, te_shape(5, 2));
    te_scope_push("fc2");
    int line = __LINE__ + 1;
    te_tensor *y = te_matmul(a, b);
    te_scope_pop();
    ck_assert_ptr_null(y);
    tu_assert_error(TE_ERR_SHAPE, "fc2/matmul (MatMul)", tu_at(line), "[4,3]", "[5,2]");
    /* a NULL input propagates without replacing the first message */
    char first[512];
    snprintf(first, sizeof first, "%s", te_error());
    ck_assert_ptr_null(te_relu(te_scale(y, 2.0f)));
    ck_assert_str_eq(te_error(), first);
    te_error_clear();
    ck_assert_str_eq(te_error(), "");
}
END_TEST

START_TEST(test_backward_errors)
{
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(3));
    ck_assert_int_eq(te_backward(te_scale(x, 2.0f)), TE_ERR_SHAPE);
    ck_assert_msg(strstr(te_error(), "[3]") != NULL, "%s", te_error());
    te_tensor *s = te_sum(x, TE_ALL, false);
    ck_assert_int_eq(te_backward(s), TE_ERR_STATE);
    ck_assert_msg(strstr(te_error(), "does not depend") != NULL, "%s", te_error());
    ck_assert_int_eq(te_backward(NULL), TE_ERR_INPUT);
}
END_TEST

/* ---- hooks ---------------------------------------------------------------- */

typedef struct {
    int ops, steps_begun, steps_ended, phases[TE_PHASE_COUNT];
    char names[16][TE_NAME_MAX];
    char types[16][32];
    int exec[16];
    te_phase phase[16];
} trace;

static void on_op(const te_op_record *r, void *u)
{
    trace *t = u;
    if (t->ops < 16) {
        snprintf(t->names[t->ops], TE_NAME_MAX, "%s", r->name);
        snprintf(t->types[t->ops], 32, "%s", r->type);
        t->exec[t->ops] = r->exec_index;
        t->phase[t->ops] = r->phase;
    }
    t->ops++;
}
static void on_step(int64_t step, void *u) { (void)step; ((trace *)u)->steps_begun++; }
static void on_step_end(int64_t step, void *u) { (void)step; ((trace *)u)->steps_ended++; }
static void on_phase(int64_t step, te_phase p, void *u) { (void)step; ((trace *)u)->phases[p]++; }

START_TEST(test_hooks_see_every_op_in_order)
{
    te_tensor *w = te_param_new("fc.weight", TE_F32, te_shape(2, 3));
    te_fill(w, 0.5f);
    te_optim *opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.1f });
    trace t = { 0 };
    int h = te_hook_add(&(te_hooks){ .op_end = on_op, .step_begin = on_step, .step_end = on_step_end,
                                      .phase_begin = on_phase }, &t);
    ck_assert_int_ge(h, 0);
    te_step_begin();
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(4, 3));
    te_fill(x, 1.0f);
    te_scope_push("fc");
    te_tensor *y = te_linear(x, w, NULL);
    te_scope_pop();
    te_tensor *loss = te_mean(te_relu(y), TE_ALL, false);
    ck_assert_int_eq(te_backward(loss), TE_OK);
    te_optim_step(opt);
    te_step_end();

    const char *want[] = { "fc/linear", "relu", "mean", "grad/mean", "grad/relu", "grad/fc/linear",
                           "update/fc.weight" };
    const char *types[] = { "Linear", "Relu", "Mean", "MeanGrad", "ReluGrad", "LinearGrad", "SGD" };
    ck_assert_int_eq(t.ops, 7);
    for (int i = 0; i < 7; i++) {
        ck_assert_str_eq(t.names[i], want[i]);
        ck_assert_str_eq(t.types[i], types[i]);
        ck_assert_int_eq(t.exec[i], i);
    }
    ck_assert_int_eq(t.phase[2], TE_PHASE_FORWARD);
    ck_assert_int_eq(t.phase[3], TE_PHASE_BACKWARD);
    ck_assert_int_eq(t.phase[6], TE_PHASE_UPDATE);
    ck_assert_int_eq(t.steps_begun, 1);
    ck_assert_int_eq(t.steps_ended, 1);
    ck_assert_int_eq(t.phases[TE_PHASE_FORWARD], 1);
    ck_assert_int_eq(t.phases[TE_PHASE_BACKWARD], 1);
    ck_assert_int_eq(t.phases[TE_PHASE_UPDATE], 1);
    te_hook_remove(h);
    te_step_begin();
    te_relu(te_tensor_zeros(TE_F32, te_shape(4, 3)));
    te_step_end();
    ck_assert_int_eq(t.ops, 7); /* detached */
    te_optim_free(opt);
}
END_TEST

/* In backward, hooks get the incoming gradient as input and the produced
 * gradients as outputs, named after the forward op. */
static te_tensor *seen_grad_out;
static void grab_grad(const te_op_record *r, void *u)
{
    (void)u;
    if (strcmp(r->name, "grad/scale") == 0) {
        ck_assert_int_eq(r->n_inputs, 1);
        ck_assert_float_eq(te_get(r->inputs[0], 0), 1.0f);
        seen_grad_out = r->outputs[0];
        ck_assert_float_eq(te_get(r->outputs[0], 0), 3.0f);
    }
}

START_TEST(test_hook_backward_record)
{
    te_tensor *p = te_param_new("p", TE_F32, te_shape(1));
    int h = te_hook_add(&(te_hooks){ .op_end = grab_grad }, NULL);
    te_step_begin();
    te_backward(te_scale(p, 3.0f));
    ck_assert_ptr_nonnull(seen_grad_out);
    ck_assert_str_eq(seen_grad_out->name, "grad:p");
    te_step_end();
    te_hook_remove(h);
}
END_TEST

START_TEST(test_hook_table_full)
{
    te_hooks none = { 0 };
    int handles[8];
    for (int i = 0; i < 8; i++)
        ck_assert_int_ge(handles[i] = te_hook_add(&none, NULL), 0);
    ck_assert_int_eq(te_hook_add(&none, NULL), -1);
    ck_assert_msg(strstr(te_error(), "hook slots") != NULL, "%s", te_error());
    for (int i = 0; i < 8; i++)
        te_hook_remove(handles[i]);
}
END_TEST

/* ---- rng ------------------------------------------------------------------ */

START_TEST(test_rng)
{
    ck_assert_uint_eq(te_rand_u64(1, 2, 3), te_rand_u64(1, 2, 3));
    ck_assert_uint_ne(te_rand_u64(1, 2, 3), te_rand_u64(2, 2, 3));
    ck_assert_uint_ne(te_rand_u64(1, 2, 3), te_rand_u64(1, 3, 3));
    double sum = 0, sq = 0, nsum = 0, nsq = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        float u = te_rand_uniform(7, 0, (uint64_t)i);
        ck_assert(u >= 0.0f && u < 1.0f);
        sum += u;
        sq += (double)u * u;
        float z = te_rand_normal(7, 1, (uint64_t)i);
        nsum += z;
        nsq += (double)z * z;
    }
    ck_assert_double_eq_tol(sum / n, 0.5, 0.005);
    ck_assert_double_eq_tol(sq / n - (sum / n) * (sum / n), 1.0 / 12, 0.002);
    ck_assert_double_eq_tol(nsum / n, 0.0, 0.01);
    ck_assert_double_eq_tol(nsq / n, 1.0, 0.01);
}
END_TEST

START_TEST(test_init_deterministic)
{
    te_tensor *w = te_param_new("w", TE_F32, te_shape(64, 100));
    te_init_linear(w, NULL);
    float first = te_get(w, 5);
    for (int64_t i = 0; i < w->numel; i++)
        ck_assert(fabsf(te_get(w, i)) <= 0.1f); /* 1/sqrt(100) */
    te_shutdown();
    te_init(&(te_config){ .seed = 1, .threads = 1 });
    w = te_param_new("w", TE_F32, te_shape(64, 100));
    te_init_linear(w, NULL);
    ck_assert_float_eq(te_get(w, 5), first); /* same seed, other thread count */
    te_shutdown();
    te_init(&(te_config){ .seed = 2, .threads = 2 });
    w = te_param_new("w", TE_F32, te_shape(64, 100));
    te_init_linear(w, NULL);
    ck_assert_float_ne(te_get(w, 5), first);
}
END_TEST

START_TEST(test_param_registry)
{
    te_tensor *w = te_param_new("fc1.weight", TE_F32, te_shape(2, 2));
    ck_assert_str_eq(w->name, "param:fc1.weight");
    ck_assert_ptr_eq(te_param_find("fc1.weight"), w);
    ck_assert_ptr_eq(te_param_find("param:fc1.weight"), w);
    ck_assert_ptr_null(te_param_find("fc2.weight"));
    ck_assert_ptr_null(te_param_new("fc1.weight", TE_F32, te_shape(2)));
    ck_assert_msg(strstr(te_error(), "exists already") != NULL, "%s", te_error());
    ck_assert_ptr_null(te_param_new("idx", TE_I32, te_shape(2)));
    ck_assert_int_eq(te_param_count(), 1);
}
END_TEST

/* ---- fault injection ------------------------------------------------------- */

START_TEST(test_inject_parse_errors)
{
    const char *bad[][2] = {
        { "nan", "missing '@'" },
        { "bogus@op=a,step=1", "unknown kind 'bogus'" },
        { "nan@op=a", "missing step" },
        { "nan@step=3", "missing op" },
        { "nan@op=a,step=x", "bad step 'x'" },
        { "scale@op=a,step=1,value=big", "bad value 'big'" },
        { "nan@op=a,step=1,colour=red", "unknown key 'colour'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(te_inject_add(bad[i][0]), TE_ERR_ARG);
        ck_assert_msg(strstr(te_error(), bad[i][1]) != NULL, "'%s' -> %s", bad[i][0], te_error());
    }
    ck_assert_int_eq(te_inject_add("noise@op=fc*,step=2,value=0.5"), TE_OK);
}
END_TEST

/* y = relu(x * 2) over 4096 positive values, so relu passes every value on:
 * ops fc1/scale and fc1/relu, the same in eager and graph mode. */
#define INJ_N 4096
#define INJ_STEPS 3

static te_status inj_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    (void)ctx;
    te_scope_push("fc1");
    out[0] = te_relu(te_scale(in[0], 2.0f));
    te_scope_pop();
    return TE_OK;
}

/* A fresh engine with `seed` (steps count from 0 again) and the injections
 * in specs (NULL-terminated), each accepted. */
static void inj_fresh(uint32_t seed, const char *const *specs)
{
    te_inject_clear();
    te_shutdown();
    te_init(&(te_config){ .seed = seed, .threads = 2 });
    for (int i = 0; specs[i]; i++)
        ck_assert_msg(te_inject_add(specs[i]) == TE_OK, "te_inject_add(\"%s\"): %s", specs[i], te_error());
}

/* Runs INJ_STEPS steps in `mode` and returns y of each step in out. */
static void inj_run(te_mode mode, float (*out)[INJ_N])
{
    te_tensor *x = te_tensor_persistent(TE_F32, 1, (int64_t[]){ INJ_N });
    float xv[INJ_N];
    tu_fill_uniform(xv, INJ_N, 7, 0.5f, 1.5f);
    te_copy_from_f32(x, xv);
    te_graph *g = te_graph_new(inj_step, NULL, &(te_graph_opts){ .mode = mode, .n_inputs = 1, .n_outputs = 1 });
    ck_assert_msg(g != NULL, "%s", te_error());
    for (int s = 0; s < INJ_STEPS; s++) {
        te_tensor *y;
        te_step_begin();
        ck_assert_msg(te_graph_run(g, &x, &y) == TE_OK, "%s step %d: %s", te_mode_name(mode), s, te_error());
        ck_assert_int_eq(y->numel, INJ_N);
        te_copy_to_f32(y, out[s]);
        te_step_end();
    }
    te_graph_free(g);
    te_tensor_free(x);
}

/* Every element of got[step] equals want[step]'s (bit for bit), but `except`. */
static void inj_same(const char *what, float (*got)[INJ_N], float (*want)[INJ_N], int step, int except)
{
    for (int i = 0; i < INJ_N; i++)
        ck_assert_msg(i == except || memcmp(&got[step][i], &want[step][i], sizeof(float)) == 0,
                      "%s: step %d [%d] = %.9g, clean %.9g", what, step, i, got[step][i], want[step][i]);
}

static float inj_clean[INJ_STEPS][INJ_N], inj_got[INJ_STEPS][INJ_N], inj_other[INJ_STEPS][INJ_N];

START_TEST(test_inject_kinds)
{
    static const te_mode modes[] = { TE_MODE_EAGER, TE_MODE_GRAPH };
    for (int m = 0; m < 2; m++) {
        const char *mode = te_mode_name(modes[m]);
        inj_fresh(1, (const char *const[]){ NULL });
        inj_run(modes[m], inj_clean);
        for (int s = 0; s < INJ_STEPS; s++)
            for (int i = 0; i < INJ_N; i++)
                ck_assert_msg(inj_clean[s][i] >= 1.0f, "%s: clean y[%d] = %g", mode, i, inj_clean[s][i]);

        /* nan and inf land on element `index`, and nowhere else */
        inj_fresh(1, (const char *const[]){ "nan@op=fc1/relu,step=1,index=1234",
                                            "inf@op=fc1/scale,step=2,index=4095", NULL });
        inj_run(modes[m], inj_got);
        inj_same(mode, inj_got, inj_clean, 0, -1);
        ck_assert_msg(isnan(inj_got[1][1234]), "%s: y[1234] = %g, not the NaN", mode, inj_got[1][1234]);
        inj_same(mode, inj_got, inj_clean, 1, 1234);
        ck_assert_msg(isinf(inj_got[2][4095]) && inj_got[2][4095] > 0, "%s: y[4095] = %g, not +inf (through relu)",
                      mode, inj_got[2][4095]);
        inj_same(mode, inj_got, inj_clean, 2, 4095);

        /* scale: the clean output times value, element by element; zero clears */
        inj_fresh(1, (const char *const[]){ "zero@op=fc1/relu,step=0", "scale@op=fc1/relu,step=1,value=10",
                                            "scale@op=fc1/scale,step=2,value=-3", NULL });
        inj_run(modes[m], inj_got);
        for (int i = 0; i < INJ_N; i++) {
            ck_assert_msg(inj_got[0][i] == 0.0f, "%s: zeroed y[%d] = %g", mode, i, inj_got[0][i]);
            ck_assert_msg(inj_got[1][i] == inj_clean[1][i] * 10.0f, "%s: scaled y[%d] = %.9g, want 10 x %.9g",
                          mode, i, inj_got[1][i], inj_clean[1][i]);
            ck_assert_msg(inj_got[2][i] == 0.0f, "%s: y[%d] = %g, relu of a negative scale", mode, i,
                          inj_got[2][i]);
        }
    }
}
END_TEST

/* noise adds N(0, value^2), drawn from the seed, the op and the step: the
 * same seed gives the same bits (in either mode), another seed other noise,
 * and the noise's spread is value's, closely enough that 0.2 or 0.05 fail. */
START_TEST(test_inject_noise)
{
    static const te_mode modes[] = { TE_MODE_EAGER, TE_MODE_GRAPH };
    static const char *const noise[] = { "noise@op=fc1/relu,step=1,value=0.1", NULL };
    for (int m = 0; m < 2; m++) {
        const char *mode = te_mode_name(modes[m]);
        inj_fresh(1, (const char *const[]){ NULL });
        inj_run(modes[m], inj_clean);
        inj_fresh(1, noise);
        inj_run(modes[m], inj_got);
        inj_same(mode, inj_got, inj_clean, 0, -1);
        inj_same(mode, inj_got, inj_clean, 2, -1);
        double sum = 0, sq = 0;
        for (int i = 0; i < INJ_N; i++) {
            double d = (double)inj_got[1][i] - inj_clean[1][i];
            sum += d;
            sq += d * d;
        }
        double mean = sum / INJ_N, sd = sqrt((sq - sum * mean) / (INJ_N - 1));
        /* over 4096 values the sample std is within 1.1% of sigma (one s.d.):
         * +-10% is nine of those, and far from 0.2 or 0.05 */
        ck_assert_msg(fabs(sd - 0.1) < 0.01, "%s: noise std %g, want 0.1", mode, sd);
        ck_assert_msg(fabs(mean) < 0.01, "%s: noise mean %g, want 0", mode, mean); /* 6 s.e. */

        inj_fresh(1, noise);
        inj_run(modes[m], inj_other);
        ck_assert_msg(memcmp(inj_other, inj_got, sizeof inj_got) == 0, "%s: seed 1 twice, other noise", mode);
        if (m == 1) { /* graph mode: the same bits as eager's (inj_got held them before this pass) */
            float (*eager)[INJ_N] = inj_other;
            inj_fresh(1, noise);
            inj_run(TE_MODE_EAGER, eager);
            ck_assert_msg(memcmp(eager, inj_got, sizeof inj_got) == 0, "graph and eager noise differ");
        }
        inj_fresh(2, noise);
        inj_run(modes[m], inj_other);
        int differ = 0;
        for (int i = 0; i < INJ_N; i++)
            differ += inj_other[1][i] != inj_got[1][i];
        ck_assert_msg(differ > INJ_N * 9 / 10, "%s: seed 2 changed %d of %d values", mode, differ, INJ_N);
    }
}
END_TEST

/* ---- half precision through ops ------------------------------------------- */

START_TEST(test_half_inputs_round_outputs)
{
    te_tensor *x = te_tensor_from(TE_F32, te_shape(3), (float[]){ 0.1f, 1000.0f, 70000.0f });
    te_tensor *h = te_cast(x, TE_F16);
    ck_assert_int_eq(h->dtype, TE_F16);
    te_tensor *y = te_scale(h, 3.0f);
    ck_assert_int_eq(y->dtype, TE_F16);
    ck_assert_float_eq(te_get(y, 0), te_f16_to_f32(te_f32_to_f16(3.0f * te_get(h, 0))));
    ck_assert_float_eq(te_get(y, 1), 3000.0f);
    ck_assert(isinf(te_get(y, 2))); /* 70000 overflowed already in the cast */
    te_tensor *b = te_scale(te_cast(x, TE_BF16), 1.0f);
    ck_assert_int_eq(b->dtype, TE_BF16);
    ck_assert_float_eq(te_get(b, 2), 70144.0f); /* bf16 keeps the range */
}
END_TEST

START_TEST(test_half_backward)
{
    te_tensor *p = te_param_new("hp", TE_BF16, te_shape(2));
    te_fill(p, 1.5f);
    te_tensor *loss = te_sum(te_scale(p, 0.5f), TE_ALL, false);
    ck_assert_int_eq(loss->dtype, TE_BF16);
    ck_assert_int_eq(te_backward(loss), TE_OK);
    ck_assert_int_eq(p->grad->dtype, TE_BF16);
    ck_assert_float_eq(te_get(p->grad, 0), 0.5f);
    ck_assert_float_eq(te_get(p->grad, 1), 0.5f);
}
END_TEST

/* x*x with x in f16: both slots' gradients must reach x (2x, not x). */
START_TEST(test_half_same_input_twice)
{
    te_tensor *x = te_param_new("x", TE_F16, te_shape(3));
    for (int i = 0; i < 3; i++)
        te_set(x, i, (float)(i + 1));
    ck_assert_int_eq(te_backward(te_sum(te_mul(x, x), TE_ALL, false)), TE_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(te_get(x->grad, i), 2.0f * (float)(i + 1));
}
END_TEST

/* ---- the op table: a row without a fact does not build ------------------ */

/* One op row, complete or with its backward-reads column left out or
 * empty, expanded by te_internal.h's TE_OP_ROW as the engine does. */
static const char op_row_probe[] =
    "#include \"te_internal.h\"\n"
    "#if defined(ROW_COMPLETE)\n"
    "#define ROWS(X) X(RELU, \"Relu\", \"relu\", TE_OUT0, UNARY, ACT, TE_NONE, DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW, 1, IN1(F(x)))\n"
    "#elif defined(ROW_NO_READS)\n"
    "#define ROWS(X) X(RELU, \"Relu\", \"relu\", UNARY, ACT, TE_NONE, DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW, 1, IN1(F(x)))\n"
    "#else\n"
    "#define ROWS(X) X(RELU, \"Relu\", \"relu\", , UNARY, ACT, TE_NONE, DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW, 1, IN1(F(x)))\n"
    "#endif\n"
    "const te_op_info probe[TE_OP_COUNT] = { ROWS(TE_OP_ROW) };\n";

/* Compiles the probe with -D`variant`; returns the compiler's status. */
static int compile_probe(const char *dir, const char *variant, char *out, size_t n)
{
    return tu_shell(out, n, "%s -std=c11 -D_GNU_SOURCE -fsyntax-only -I%s/engine -D%s %s/probe.c 2>&1",
                    TDBG_CC, TDBG_SRCDIR, variant, dir);
}

START_TEST(test_op_row_missing_fact_does_not_build)
{
    char dir[] = "/tmp/tdbg-oprow-XXXXXX", path[64], out[4096];
    ck_assert(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/probe.c", dir);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fputs(op_row_probe, f);
    ck_assert_int_eq(fclose(f), 0);

    int st = compile_probe(dir, "ROW_COMPLETE", out, sizeof out);
    ck_assert_msg(st == 0, "the complete row does not build (%d):\n%s", st, out);
    st = compile_probe(dir, "ROW_NO_READS", out, sizeof out);
    ck_assert_msg(st != 0, "a row without its reads column builds");
    ck_assert_msg(strstr(out, "argument"), "not the macro's argument count:\n%s", out);
    st = compile_probe(dir, "ROW_EMPTY_READS", out, sizeof out);
    ck_assert_msg(st != 0, "a row with an empty reads column builds");

    remove(path);
    rmdir(dir);
}
END_TEST

/* cpu runs as it always has; cuda says why it cannot (this machine has no
 * GPU, and until issue 18's kernels exist a GPU gives a reason too). */
START_TEST(test_backend_use)
{
    ck_assert_int_eq(te_backend_use("cpu"), TE_OK);
    te_tensor *a = te_tensor_from(TE_F32, te_shape(1, 2), (const float[]){ 1, 2 });
    te_tensor *b = te_tensor_from(TE_F32, te_shape(2, 1), (const float[]){ 3, 4 });
    te_tensor *y = te_matmul(a, b);
    ck_assert_ptr_nonnull(y);
    ck_assert_float_eq(te_item(y), 11.0f);

    /* "cuda" works where the probe finds a device, and says why not elsewhere */
    char why[512] = "";
#ifdef TE_HAVE_CUDA
    const bool usable = te_cuda_probe(why, sizeof why);
#else
    const bool usable = false;
#endif
    if (usable) {
        ck_assert_msg(te_backend_use("cuda") == TE_OK, "%s: %s", why, te_error());
        ck_assert_int_eq(te_backend_device(), TE_DEV_CUDA);
        ck_assert_int_eq(te_backend_use("cpu"), TE_OK);
        ck_assert_int_eq(te_backend_device(), TE_DEV_CPU);
    } else {
        ck_assert_int_eq(te_backend_use("cuda"), TE_ERR_DEVICE);
        tu_assert_error(TE_ERR_DEVICE, "te_backend_use: cuda: ");
        ck_assert_msg(tu_cuda_reason(te_error()) != NULL, "no reason this build can give in: %s", te_error());
        ck_assert_int_eq(te_backend_device(), TE_DEV_CPU);
    }
#ifndef TE_HAVE_CUDA
    ck_assert_str_eq(te_error(), "te_backend_use: cuda: built without CUDA (./configure --with-cuda)");
#endif
    ck_assert_str_eq(te_status_str(TE_ERR_DEVICE), "no usable device");

    ck_assert_int_eq(te_backend_use("tpu"), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_backend_use: unknown backend 'tpu'; expected cpu or cuda");
    ck_assert_int_eq(te_backend_use(NULL), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "unknown backend '(null)'");
    /* a refusal leaves the CPU backend running */
    ck_assert_float_eq(te_item(te_matmul(a, b)), 11.0f);
}
END_TEST

Suite *suite_core(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    /* The runner's first test: in the CUDA build its te_init is the first to
     * touch the toolkit's libraries, read from disk on a cold start while
     * the fuzz replay builds beside it (CI once took more than Check's 4 s). */
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_dtypes);
    tcase_add_test(tc, test_f16_bits);
    tcase_add_test(tc, test_bf16_bits);
    tcase_add_test(tc, test_tensor_create_and_access);
    tcase_add_test(tc, test_allocator_accounting);
    tcase_add_test(tc, test_tape_reset_frees);
    tcase_add_test(tc, test_free_refuses_tape_tensors);
    tcase_add_test(tc, test_scoped_names);
    tcase_add_test(tc, test_error_names_op_location_shapes);
    tcase_add_test(tc, test_failed_op_keeps_names_stable);
    tcase_add_test(tc, test_backward_skips_unreached_ops);
    tcase_add_test(tc, test_backward_errors);
    tcase_add_test(tc, test_hooks_see_every_op_in_order);
    tcase_add_test(tc, test_hook_backward_record);
    tcase_add_test(tc, test_hook_table_full);
    tcase_add_test(tc, test_rng);
    tcase_add_test(tc, test_init_deterministic);
    tcase_add_test(tc, test_param_registry);
    tcase_add_test(tc, test_inject_parse_errors);
    tcase_add_test(tc, test_inject_kinds);
    tcase_add_test(tc, test_inject_noise);
    tcase_add_test(tc, test_half_inputs_round_outputs);
    tcase_add_test(tc, test_half_backward);
    tcase_add_test(tc, test_half_same_input_twice);
    tcase_add_test(tc, test_op_row_missing_fact_does_not_build);
    tcase_add_test(tc, test_backend_use);
    suite_add_tcase(s, tc);
    return s;
}
