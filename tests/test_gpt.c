/*
 * test_gpt.c — examples/gpt's model (examples/gpt_model.c) against PyTorch.
 *
 * tests/fixtures/gpt.bin (tests/fixtures/gen_gpt.py) holds a 2-layer model's
 * initial weights, a batch, and PyTorch's logits, loss and every parameter's
 * gradient at step 0, then the losses of 20 steps of AdamW with warm-up,
 * cosine decay and clipping. The engine builds the same model, takes the
 * fixture's weights by parameter name and must agree, in eager mode and in
 * graph mode, where every layer's attention must run as the fused kernel.
 */
#include "fixture.h"
#include "gpt_model.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tolerances: rtol 1e-5 and an atol of 1e-5 times the tensor's
 * largest magnitude at step 0; 1e-4 relative for the training losses. */
#define RTOL 1e-5
#define LOSS_RTOL 1e-4

/* config's fields, in gen_gpt.py's order */
enum { CF_LAYERS, CF_HEADS, CF_EMBD, CF_BLOCK, CF_BATCH, CF_STEPS, CF_WARMUP, CF_COUNT };
/* hyper's */
enum { HY_LR, HY_BETA1, HY_BETA2, HY_EPS, HY_WEIGHT_DECAY, HY_CLIP, HY_COUNT };

typedef struct {
    fx_file *fx;
    int cf[CF_COUNT];
    float hy[HY_COUNT];
    gpt_model m;
    te_tensor *tokens; /* i32 [steps, batch, block + 1], persistent */
} parity;

/* te_param_find's name of a parameter: "param:wte" -> "wte". */
static const char *bare_name(const te_tensor *p)
{
    return strncmp(p->name, "param:", 6) == 0 ? p->name + 6 : p->name;
}

/* The model with the fixture's configuration and initial weights. */
static void parity_open(parity *p)
{
    p->fx = fx_open("gpt.bin");
    te_tensor *cf = fx_tensor(p->fx, "config"), *hy = fx_tensor(p->fx, "hyper");
    ck_assert_int_eq(cf->numel, CF_COUNT);
    ck_assert_int_eq(hy->numel, HY_COUNT);
    for (int i = 0; i < CF_COUNT; i++)
        p->cf[i] = (int)te_get(cf, i);
    for (int i = 0; i < HY_COUNT; i++)
        p->hy[i] = te_get(hy, i);
    gpt_config c = { .layers = p->cf[CF_LAYERS], .heads = p->cf[CF_HEADS], .embd = p->cf[CF_EMBD],
                     .block = p->cf[CF_BLOCK], .dropout = 0.0f };
    char why[256];
    ck_assert_msg(gpt_config_check(&c, why, sizeof why), "gpt_config_check: %s", why);
    ck_assert_msg(gpt_model_init(&p->m, &c), "gpt_model_init: %s", te_error());

    /* every parameter gets its weights: a name the fixture lacks fails */
    int64_t total = 0;
    for (int i = 0; i < te_param_count(); i++) {
        te_tensor *param = te_params()[i];
        char key[TE_NAME_MAX + 8];
        snprintf(key, sizeof key, "init/%s", bare_name(param));
        te_tensor *w = fx_tensor(p->fx, key);
        ck_assert_msg(te_same_shape(param, w), "%s: shape differs from the fixture's", key);
        tu_copy(param, w);
        total += param->numel;
    }
    ck_assert_int_eq(total, gpt_param_numel());
    ck_assert_ptr_eq(te_param_find("h1.mlp.c_proj.bias"), p->m.h[1].mlp_proj_b);

    te_tensor *t = fx_tensor(p->fx, "tokens");
    ck_assert_int_eq(t->shape[0], p->cf[CF_STEPS]);
    ck_assert_int_eq(t->shape[1], p->cf[CF_BATCH]);
    ck_assert_int_eq(t->shape[2], p->cf[CF_BLOCK] + 1);
    p->tokens = te_tensor_persistent(TE_I32, t->ndim, t->shape);
    tu_copy(p->tokens, t);
    te_tape_reset();
}

static void parity_close(parity *p)
{
    te_tensor_free(p->tokens);
    fx_close(p->fx);
}

/* The inputs of step s: x = tokens[s, :, :-1] i32 [B, T] and the targets
 * y = tokens[s, :, 1:] flattened to [B*T]. */
static void batch(const parity *p, int s, te_tensor **x, te_tensor **y)
{
    const int B = p->cf[CF_BATCH], T = p->cf[CF_BLOCK];
    const int64_t at = (int64_t)s * B * (T + 1);
    int32_t *row = malloc((size_t)(T + 1) * sizeof *row);
    ck_assert(row != NULL);
    *x = te_tensor_new(TE_I32, te_shape(B, T));
    *y = te_tensor_new(TE_I32, te_shape(B * T));
    for (int b = 0; b < B; b++) {
        ck_assert_int_eq(te_tensor_read(p->tokens, at + b * (T + 1), T + 1, row), TE_OK);
        ck_assert_int_eq(te_tensor_write(*x, b * T, T, row), TE_OK);
        ck_assert_int_eq(te_tensor_write(*y, b * T, T, row + 1), TE_OK);
    }
    free(row);
}

/* got against the fixture's record NAME, the atol scaled by its largest
 * magnitude. */
static void check_close(parity *p, const te_tensor *got, const char *name, const char *what)
{
    te_tensor *want = fx_tensor(p->fx, name);
    double big = 0;
    for (int64_t i = 0; i < want->numel; i++)
        big = fmax(big, fabs(te_get(want, i)));
    fx_assert_close(got, want, RTOL * big, RTOL, what);
}

typedef struct {
    const gpt_model *m;
    te_optim *opt; /* NULL: forward and backward only */
    float clip;
} step_ctx;

/* in: tokens, targets; out: loss, logits. */
static te_status step_fn(void *ctx, te_tensor *const *in, te_tensor **out)
{
    const step_ctx *c = ctx;
    out[1] = gpt_forward(c->m, in[0]);
    out[0] = te_cross_entropy(out[1], in[1]);
    te_status st = te_backward(out[0]);
    if (st != TE_OK || !c->opt)
        return st;
    te_clip_grad_norm(te_params(), te_param_count(), c->clip);
    return te_optim_step(c->opt);
}

static te_graph *graph(te_mode mode, step_ctx *c)
{
    te_graph *g = te_graph_new(step_fn, c, &(te_graph_opts){ .mode = mode, .name = "gpt", .n_inputs = 2,
                                                              .n_outputs = 2 });
    ck_assert_msg(g != NULL, "te_graph_new: %s", te_error());
    return g;
}

/* How the attention ran: softmax ops seen forward, and how many of them in
 * a fused attention kernel (graph mode's record names the kernel). */
typedef struct {
    int softmax, fused;
} attn_seen;

static void seen_op(const te_op_record *r, void *user)
{
    attn_seen *a = user;
    if (r->phase != TE_PHASE_FORWARD || !strstr(r->name, "/attn/softmax"))
        return;
    a->softmax++;
    a->fused += r->kernel && strstr(r->kernel, "fused-attention: ") != NULL;
}

/* Logits, loss and every gradient at step 0; graph mode must have fused
 * every layer's attention. */
START_TEST(test_step0)
{
    const te_mode mode = (te_mode)_i;
    parity p;
    parity_open(&p);
    step_ctx c = { .m = &p.m };
    te_graph *g = graph(mode, &c);
    attn_seen seen = { 0, 0 };
    int hook = te_hook_add(&(te_hooks){ .op_end = seen_op }, &seen);
    ck_assert_int_ge(hook, 0);
    te_tensor *in[2], *out[2];
    te_step_begin();
    batch(&p, 0, &in[0], &in[1]);
    ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s step: %s", te_mode_name(mode), te_error());
    te_hook_remove(hook);
    ck_assert_int_eq(seen.softmax, p.cf[CF_LAYERS]);
    ck_assert_int_eq(seen.fused, mode == TE_MODE_GRAPH ? p.cf[CF_LAYERS] : 0);
    check_close(&p, out[1], "logits", "logits");
    check_close(&p, out[0], "loss", "loss");
    for (int i = 0; i < te_param_count(); i++) {
        te_tensor *param = te_params()[i];
        char key[TE_NAME_MAX + 8];
        snprintf(key, sizeof key, "grad/%s", bare_name(param));
        ck_assert_msg(param->grad && param->grad_valid, "%s: no gradient", bare_name(param));
        check_close(&p, param->grad, key, key);
    }
    te_step_end();
    te_graph_free(g);
    parity_close(&p);
}
END_TEST

/* The first steps of AdamW with the example's schedule and clipping. */
START_TEST(test_training_losses)
{
    const te_mode mode = (te_mode)_i;
    parity p;
    parity_open(&p);
    te_optim *opt = te_adam_new(te_params(), te_param_count(),
                                &(te_adam_opts){ .lr = p.hy[HY_LR], .beta1 = p.hy[HY_BETA1],
                                                 .beta2 = p.hy[HY_BETA2], .eps = p.hy[HY_EPS],
                                                 .weight_decay = p.hy[HY_WEIGHT_DECAY],
                                                 .decoupled = true });
    ck_assert_msg(opt != NULL, "te_adam_new: %s", te_error());
    step_ctx c = { .m = &p.m, .opt = opt, .clip = p.hy[HY_CLIP] };
    te_graph *g = graph(mode, &c);
    te_tensor *lrs = fx_tensor(p.fx, "lr"), *losses = fx_tensor(p.fx, "losses");
    /* the tape tensors above go at the first te_step_end: keep copies */
    float want_lr[64], want_loss[64];
    const int steps = p.cf[CF_STEPS];
    ck_assert_int_le(steps, 64);
    te_copy_to_f32(lrs, want_lr);
    te_copy_to_f32(losses, want_loss);
    for (int s = 0; s < steps; s++) {
        te_optim_set_lr(opt, want_lr[s]);
        te_tensor *in[2], *out[2];
        te_step_begin();
        batch(&p, s, &in[0], &in[1]);
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s step %d: %s", te_mode_name(mode), s,
                      te_error());
        float got = te_item(out[0]);
        ck_assert_msg(fabs(got - want_loss[s]) <= LOSS_RTOL * fabs(want_loss[s]),
                      "%s step %d: loss %.7f, PyTorch's %.7f (relative error %.2e)", te_mode_name(mode), s,
                      (double)got, (double)want_loss[s], fabs(got - want_loss[s]) / fabs(want_loss[s]));
        te_step_end();
    }
    /* the fixture's run learns: a loss that did not move would pass trivially */
    ck_assert_float_lt(want_loss[steps - 1], 0.9f * want_loss[0]);
    te_graph_free(g);
    te_optim_free(opt);
    parity_close(&p);
}
END_TEST

Suite *suite_gpt(void)
{
    Suite *s = suite_create("gpt");
    TCase *tc = tcase_create("pytorch");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_step0, TE_MODE_EAGER, TE_MODE_GRAPH + 1);
    tcase_add_loop_test(tc, test_training_losses, TE_MODE_EAGER, TE_MODE_GRAPH + 1);
    suite_add_tcase(s, tc);
    return s;
}
