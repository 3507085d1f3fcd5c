/*
 * test_verdict.c — created or inherited, for every op of the op table: a
 * NaN placed in a forward tensor that an op's backward reads (an input, an
 * output or a saved tensor, as te_op_bwd_reads says) reaches the backward
 * op through its record's reads, so the debugger's verdict is
 * "propagated from that tensor", never "created", in eager and graph mode.
 *
 * Each op runs alone on leaf parameters, followed by a sum (whose backward
 * reads nothing) as the loss: the incoming gradient stays finite. The NaN
 * goes in when the backward phase begins, after every forward op ran, so
 * only the backward of the op under test can meet it.
 */
#include "dbg.h"
#include "session.h"
#include "te_internal.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEAVES 5

typedef struct op_case {
    te_op op;
    te_tensor *leaf[MAX_LEAVES];   /* parameters (float, with gradients) */
    int n_leaves;
    te_tensor *aux[3];             /* persistent tensors without gradients: labels, indices, stats */
    int n_aux;
} op_case;

/* ---- one op, its inputs and a loss ------------------------------------------ */

static te_tensor *leaf(op_case *c, int ndim, const int64_t *shape)
{
    char name[32];
    snprintf(name, sizeof name, "p%d", c->n_leaves);
    te_tensor *p = te_param_new(name, TE_F32, ndim, shape);
    ck_assert_msg(p != NULL, "%s", te_error());
    ck_assert(c->n_leaves < MAX_LEAVES);
    return c->leaf[c->n_leaves++] = p;
}

static te_tensor *aux(op_case *c, te_dtype dt, int ndim, const int64_t *shape)
{
    te_tensor *t = te_tensor_persistent(dt, ndim, shape);
    ck_assert(t != NULL && c->n_aux < 3);
    return c->aux[c->n_aux++] = t;
}

/* Makes the leaves and auxiliary tensors op c->op takes. */
static void make_inputs(op_case *c)
{
    switch (c->op) {
    case TE_OP_MATMUL: leaf(c, te_shape(3, 4)); leaf(c, te_shape(4, 5)); return;
    case TE_OP_LINEAR: leaf(c, te_shape(3, 4)); leaf(c, te_shape(5, 4)); leaf(c, te_shape(5)); return;
    case TE_OP_ADD: case TE_OP_SUB: case TE_OP_MUL: case TE_OP_DIV: case TE_OP_MSE:
        leaf(c, te_shape(3, 4)); leaf(c, te_shape(3, 4)); return;
    case TE_OP_SCALE: case TE_OP_RELU: case TE_OP_GELU: case TE_OP_TANH: case TE_OP_SIGMOID:
    case TE_OP_EXP: case TE_OP_LOG: case TE_OP_SQRT: case TE_OP_SOFTMAX: case TE_OP_LOG_SOFTMAX:
    case TE_OP_DROPOUT: case TE_OP_RESHAPE: case TE_OP_TRANSPOSE: case TE_OP_SUM: case TE_OP_MEAN:
    case TE_OP_CAST:
        leaf(c, te_shape(3, 4)); return;
    case TE_OP_CROSS_ENTROPY: {
        leaf(c, te_shape(3, 4));
        te_tensor *labels = aux(c, TE_I32, te_shape(3));
        for (int i = 0; i < 3; i++)
            te_set(labels, i, (float)i);
        return;
    }
    case TE_OP_CONV2D: leaf(c, te_shape(1, 2, 5, 5)); leaf(c, te_shape(3, 2, 3, 3)); leaf(c, te_shape(3)); return;
    case TE_OP_MAXPOOL2D: case TE_OP_AVGPOOL2D: case TE_OP_GLOBAL_AVGPOOL:
        leaf(c, te_shape(1, 2, 4, 4)); return;
    case TE_OP_BATCHNORM: {
        leaf(c, te_shape(4, 3)); leaf(c, te_shape(3)); leaf(c, te_shape(3));
        te_tensor *mean = aux(c, TE_F32, te_shape(3)), *var = aux(c, TE_F32, te_shape(3));
        for (int i = 0; i < 3; i++) {
            te_set(mean, i, 0);
            te_set(var, i, 1);
        }
        return;
    }
    case TE_OP_LAYERNORM: leaf(c, te_shape(3, 4)); leaf(c, te_shape(4)); leaf(c, te_shape(4)); return;
    case TE_OP_FLATTEN: leaf(c, te_shape(2, 3, 2)); return;
    case TE_OP_EMBEDDING: {
        leaf(c, te_shape(5, 3));
        te_tensor *idx = aux(c, TE_I32, te_shape(4));
        for (int i = 0; i < 4; i++)
            te_set(idx, i, (float)((i * 3) % 5));
        return;
    }
    case TE_OP_MASKED_FILL: {
        leaf(c, te_shape(3, 4));
        te_tensor *mask = aux(c, TE_F32, te_shape(4));
        for (int i = 0; i < 4; i++)
            te_set(mask, i, i % 3 == 0 ? 1.0f : 0.0f);
        return;
    }
    case TE_OP_COUNT: break;
    }
    ck_abort_msg("op %d (%s) has no case in test_verdict.c: add one", c->op,
                 c->op < TE_OP_COUNT ? te_op_type_name(c->op) : "?");
}

/* The op under test on the case's tensors. */
static te_tensor *run_op(const op_case *c)
{
    te_tensor *const *p = c->leaf;
    switch (c->op) {
    case TE_OP_MATMUL: return te_matmul(p[0], p[1]);
    case TE_OP_LINEAR: return te_linear(p[0], p[1], p[2]);
    case TE_OP_ADD: return te_add(p[0], p[1]);
    case TE_OP_SUB: return te_sub(p[0], p[1]);
    case TE_OP_MUL: return te_mul(p[0], p[1]);
    case TE_OP_DIV: return te_div(p[0], p[1]);
    case TE_OP_SCALE: return te_scale(p[0], 2.0f);
    case TE_OP_RELU: return te_relu(p[0]);
    case TE_OP_GELU: return te_gelu(p[0]);
    case TE_OP_TANH: return te_tanh(p[0]);
    case TE_OP_SIGMOID: return te_sigmoid(p[0]);
    case TE_OP_EXP: return te_exp(p[0]);
    case TE_OP_LOG: return te_log(p[0]);
    case TE_OP_SQRT: return te_sqrt(p[0]);
    case TE_OP_SOFTMAX: return te_softmax(p[0], -1);
    case TE_OP_LOG_SOFTMAX: return te_log_softmax(p[0], -1);
    case TE_OP_CROSS_ENTROPY: return te_cross_entropy(p[0], c->aux[0]);
    case TE_OP_MSE: return te_mse(p[0], p[1]);
    case TE_OP_CONV2D: return te_conv2d(p[0], p[1], p[2], 1, 1);
    case TE_OP_MAXPOOL2D: return te_maxpool2d(p[0], 2, 2, 0);
    case TE_OP_AVGPOOL2D: return te_avgpool2d(p[0], 2, 2, 0);
    case TE_OP_GLOBAL_AVGPOOL: return te_global_avgpool(p[0]);
    case TE_OP_BATCHNORM: return te_batchnorm(p[0], p[1], p[2], c->aux[0], c->aux[1], 0.1f, 1e-5f);
    case TE_OP_LAYERNORM: return te_layernorm(p[0], p[1], p[2], 1e-5f);
    case TE_OP_DROPOUT: return te_dropout(p[0], 0.5f);
    case TE_OP_RESHAPE: return te_reshape(p[0], 4, 3);
    case TE_OP_FLATTEN: return te_flatten(p[0]);
    case TE_OP_TRANSPOSE: return te_transpose(p[0], 0, 1);
    case TE_OP_SUM: return te_sum(p[0], 1, false);
    case TE_OP_MEAN: return te_mean(p[0], 1, false);
    case TE_OP_EMBEDDING: return te_embedding(p[0], c->aux[0]);
    case TE_OP_CAST: return te_cast(p[0], TE_F16);
    case TE_OP_MASKED_FILL: return te_masked_fill(p[0], c->aux[0], -INFINITY);
    case TE_OP_COUNT: break;
    }
    return NULL;
}

static te_status op_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    (void)in;
    te_tensor *y = run_op(ctx);
    te_tensor *loss = y ? te_sum(y, TE_ALL, false) : NULL; /* its backward reads nothing */
    te_status st = te_backward(loss);
    out[0] = loss;
    return st;
}

/* ---- what the hooks see -------------------------------------------------------- */

typedef struct watch {
    te_op op;
    int poison;                    /* which expected read gets the NaN; -1: none */
    char fwd[TE_NAME_MAX], bwd[TE_NAME_MAX];
    te_tensor *expect[TE_BWD_READS_MAX]; /* from the op table's bits, at the forward record */
    int n_expect;
    char expect_name[TE_BWD_READS_MAX][TE_NAME_MAX]; /* kept past the step, unlike the tensors */
    bool expect_float[TE_BWD_READS_MAX];
    /* the backward record of the op */
    bool seen;
    int n_reads;
    bool reads_match, poison_there, any_bad;
    dbg_origin origin;
    char created_in[TE_NAME_MAX];  /* a bad output the verdict called created */
} watch;

static void expect_add(watch *w, te_tensor *t)
{
    if (!t)
        return;
    for (int i = 0; i < w->n_expect; i++)
        if (w->expect[i] == t)
            return;
    snprintf(w->expect_name[w->n_expect], TE_NAME_MAX, "%s", t->name);
    w->expect_float[w->n_expect] = te_dtype_is_float(t->dtype);
    w->expect[w->n_expect++] = t;
}

static void on_op(const te_op_record *r, void *user)
{
    watch *w = user;
    if (r->phase == TE_PHASE_FORWARD && !w->fwd[0] && strcmp(r->type, te_op_type_name(w->op)) == 0) {
        /* What the op table says the backward reads, found independently
         * of te_node_bwd_reads: inputs, outputs, saved tensors. */
        snprintf(w->fwd, sizeof w->fwd, "%s", r->name);
        snprintf(w->bwd, sizeof w->bwd, "grad/%s", r->name);
        unsigned bits = te_op_bwd_reads(w->op);
        const te_node *n = r->outputs[0]->node;
        ck_assert_msg(n != NULL, "%s: its output knows no node", r->name);
        for (int i = 0; i < r->n_inputs; i++)
            if (bits & (1u << i))
                expect_add(w, r->inputs[i]);
        for (int k = 0; k < r->n_outputs; k++)
            if (bits & (TE_READS_OUT << k))
                expect_add(w, r->outputs[k]);
        for (int j = 0; (bits & TE_READS_SAVED) && j < n->n_saved; j++)
            expect_add(w, n->saved[j]);
        return;
    }
    if (r->phase != TE_PHASE_BACKWARD || strcmp(r->name, w->bwd) != 0)
        return;
    w->seen = true;
    w->n_reads = r->n_reads;
    w->reads_match = r->n_reads == w->n_expect;
    for (int i = 0; w->reads_match && i < r->n_reads; i++)
        w->reads_match = r->reads[i] == w->expect[i];
    if (w->poison >= 0)
        w->poison_there = te_has_nonfinite(w->expect[w->poison]);
    for (int k = 0; k < r->n_outputs; k++) {
        const te_tensor *g = r->outputs[k];
        if (!g || !g->data || !te_dtype_is_float(g->dtype) || !te_has_nonfinite(g))
            continue;
        dbg_origin o;
        if (dbg_origin_of(r, g, &o) == DBG_ORIGIN_CREATED && !w->created_in[0])
            snprintf(w->created_in, sizeof w->created_in, "%s", g->name);
        if (!w->any_bad)
            w->origin = o;
        w->any_bad = true;
    }
}

static void on_phase(int64_t step, te_phase p, void *user)
{
    (void)step;
    watch *w = user;
    if (p == TE_PHASE_BACKWARD && w->poison >= 0)
        te_set(w->expect[w->poison], 0, NAN);
}

/* One step of the case in mode, NaN in expected read `poison` (-1: none). */
static watch run_case(op_case *c, te_graph *g, int poison)
{
    for (int i = 0; i < c->n_leaves; i++)
        te_init_uniform(c->leaf[i], 0.5f, 2.0f); /* positive: log, sqrt and div stay finite */
    te_zero_grad(); /* gradients afresh, not added to the last run's NaN */
    watch w = { .op = c->op, .poison = poison };
    int h = te_hook_add(&(te_hooks){ .op_end = on_op, .phase_begin = on_phase }, &w);
    te_tensor *out[1];
    te_step_begin();
    te_status st = te_graph_run(g, NULL, out);
    te_step_end();
    te_hook_remove(h);
    ck_assert_msg(st == TE_OK, "%s: %s", te_op_type_name(c->op), te_error());
    ck_assert_msg(w.fwd[0] && w.seen, "%s: forward %s, backward %s reported", te_op_type_name(c->op),
                  w.fwd[0] ? "" : "not", w.seen ? "" : "not");
    return w;
}

START_TEST(test_backward_reads_every_op)
{
    op_case c = { .op = (te_op)_i };
    make_inputs(&c);
    for (int mode = 0; mode < 2; mode++) {
        const char *type = te_op_type_name(c.op), *mname = mode ? "graph" : "eager";
        te_graph *g = te_graph_new(op_step, &c, &(te_graph_opts){ .mode = mode ? TE_MODE_GRAPH : TE_MODE_EAGER,
                                                                  .n_outputs = 1 });
        ck_assert_msg(g != NULL, "%s", te_error());
        /* The record lists what the table says, in that order. */
        watch w = run_case(&c, g, -1);
        ck_assert_msg(w.reads_match, "%s %s: the backward record lists %d reads, the op table %d",
                      type, mname, w.n_reads, w.n_expect);
        ck_assert_msg(!w.any_bad, "%s %s: non-finite gradients without a NaN", type, mname);
        if (w.n_expect == 0) /* reshape, dropout, sum ...: nothing of the forward pass */
            ck_assert_int_eq(w.n_reads, 0);
        for (int j = 0; j < w.n_expect; j++) {
            if (!w.expect_float[j])
                continue; /* indices and labels hold no NaN */
            const char *name = w.expect_name[j];
            watch p = run_case(&c, g, j);
            ck_assert_msg(p.reads_match, "%s %s: reads changed with a NaN in %s", type, mname, name);
            ck_assert_msg(p.poison_there, "%s %s: the NaN in %s was gone when %s ran", type, mname, name,
                          p.bwd);
            ck_assert_msg(!p.created_in[0], "%s %s: NaN in %s, yet %s reports %s created", type, mname,
                          name, p.bwd, p.created_in);
            /* A NaN the kernel does not carry into a gradient (ReLU's derivative
             * is 1 where y is NaN; Add reads its inputs for their shapes) leaves
             * nothing to judge. */
            if (p.any_bad) {
                ck_assert_msg(p.origin.kind == DBG_ORIGIN_PROPAGATED && p.origin.from_read &&
                              strcmp(p.origin.from, name) == 0,
                              "%s %s: NaN in %s, %s's verdict is kind %d from '%s'", type, mname, name,
                              p.bwd, p.origin.kind, p.origin.from);
            }
        }
        te_graph_free(g);
    }
    for (int i = 0; i < c.n_aux; i++)
        te_tensor_free(c.aux[i]);
}
END_TEST

/* ---- intended non-finite values ---------------------------------------------
 * Hand-made records of a masked attention row, the mask's record carrying
 * TE_TRAIT_NONFINITE_OK as the op table's MaskedFill row does:
 *   scores [1,4] -> mask (-inf in the last two) -> scale (the -inf carried)
 *   -> softmax (finite) ; and masked @ zeros -> NaN (-inf * 0), made here. */

typedef struct chain {
    te_tensor *x, *masked, *scaled, *att, *zeros, *prod, *after;
    te_op_record mask, scale, softmax, matmul, add;
} chain;

static te_tensor *named(const char *name, int64_t n, const float *v)
{
    te_tensor *t = te_tensor_persistent(TE_F32, 1, (int64_t[]){ n });
    ck_assert(t != NULL);
    snprintf(t->name, sizeof t->name, "%s", name);
    for (int64_t i = 0; i < n; i++)
        te_set(t, i, v[i]);
    return t;
}

static te_op_record record(const char *name, const char *type, te_tensor **in, int n_in, te_tensor **out,
                           unsigned traits)
{
    return (te_op_record){ .phase = TE_PHASE_FORWARD, .name = name, .type = type, .inputs = in,
                           .n_inputs = n_in, .outputs = out, .n_outputs = 1, .traits = traits };
}

static te_tensor *in_mask[1], *out_mask[1], *in_scale[1], *out_scale[1], *in_sm[1], *out_sm[1], *in_mm[2],
    *out_mm[1], *in_add[2], *out_add[1];

static unsigned mask_traits = TE_TRAIT_NONFINITE_OK; /* as the op table's MaskedFill row */

static chain chain_make(void)
{
    const float inf = INFINITY;
    chain c;
    c.x = named("data:scores", 4, (const float[]){ 1, 2, 3, 4 });
    c.masked = named("h0/attn/mask:out0", 4, (const float[]){ 1, 2, -inf, -inf });
    c.scaled = named("h0/attn/scale:out0", 4, (const float[]){ 0.5f, 1, -inf, -inf });
    /* softmax of the scaled row, computed here: e^0.5, e^1 over their sum */
    const float e0 = expf(0.5f), e1 = expf(1.0f);
    c.att = named("h0/attn/softmax:out0", 4, (const float[]){ e0 / (e0 + e1), e1 / (e0 + e1), 0, 0 });
    c.zeros = named("data:zeros", 4, (const float[]){ 0, 0, 0, 0 });
    c.prod = named("h0/attn/mul:out0", 4, (const float[]){ 0, 0, NAN, NAN }); /* -inf * 0 */
    c.after = named("h0/add:out0", 4, (const float[]){ 1, 1, NAN, NAN });
    in_mask[0] = c.x;
    out_mask[0] = c.masked;
    in_scale[0] = c.masked;
    out_scale[0] = c.scaled;
    in_sm[0] = c.scaled;
    out_sm[0] = c.att;
    in_mm[0] = c.scaled;
    in_mm[1] = c.zeros;
    out_mm[0] = c.prod;
    in_add[0] = c.prod;
    in_add[1] = c.zeros;
    out_add[0] = c.after;
    c.mask = record("h0/attn/mask", "MaskedFill", in_mask, 1, out_mask, mask_traits);
    c.scale = record("h0/attn/scale", "Scale", in_scale, 1, out_scale, TE_TRAIT_ELEMENTWISE);
    c.softmax = record("h0/attn/softmax", "Softmax", in_sm, 1, out_sm, 0);
    c.matmul = record("h0/attn/mul", "Mul", in_mm, 2, out_mm, TE_TRAIT_ELEMENTWISE);
    c.add = record("h0/add", "Add", in_add, 2, out_add, TE_TRAIT_ELEMENTWISE);
    return c;
}

static void chain_free(chain *c)
{
    te_tensor *all[] = { c->x, c->masked, c->scaled, c->att, c->zeros, c->prod, c->after };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        te_tensor_free(all[i]);
}

START_TEST(test_intended_verdicts)
{
    chain c = chain_make();
    dbg_origin o;
    dbg_verdict_reset();
    /* the mask makes its -inf on purpose */
    dbg_verdict_note(&c.mask);
    ck_assert_uint_eq(dbg_verdict_intended(c.masked), DBG_NF_INF);
    ck_assert_int_eq(dbg_origin_of(&c.mask, c.masked, &o), DBG_ORIGIN_CREATED);
    ck_assert(o.intended);
    /* a scale carries it on: intended still, from the mask */
    dbg_verdict_note(&c.scale);
    ck_assert_uint_eq(dbg_verdict_intended(c.scaled), DBG_NF_INF);
    ck_assert_int_eq(dbg_origin_of(&c.scale, c.scaled, &o), DBG_ORIGIN_PROPAGATED);
    ck_assert(o.intended);
    ck_assert_str_eq(o.from, "h0/attn/mask:out0");
    /* softmax over the masked row: finite, no verdict, nothing intended */
    dbg_verdict_note(&c.softmax);
    ck_assert_uint_eq(dbg_verdict_intended(c.att), 0);
    ck_assert_int_eq(dbg_origin_of(&c.softmax, c.att, &o), DBG_ORIGIN_NONE);
    /* -inf * 0: the NaN is made here, not inherited from the mask */
    dbg_verdict_note(&c.matmul);
    ck_assert_uint_eq(dbg_verdict_intended(c.prod), 0);
    ck_assert_int_eq(dbg_origin_of(&c.matmul, c.prod, &o), DBG_ORIGIN_CREATED);
    ck_assert(!o.intended);
    ck_assert_str_eq(o.despite, "h0/attn/scale:out0");
    /* and downstream of that NaN, an heir as ever */
    dbg_verdict_note(&c.add);
    ck_assert_int_eq(dbg_origin_of(&c.add, c.after, &o), DBG_ORIGIN_PROPAGATED);
    ck_assert(!o.intended);
    ck_assert_str_eq(o.from, "h0/attn/mul:out0");
    /* A new step forgets: the same -inf without the mask's record is
     * nobody's intention, and the product inherits it as before. */
    dbg_verdict_reset();
    ck_assert_uint_eq(dbg_verdict_intended(c.masked), 0);
    ck_assert_int_eq(dbg_origin_of(&c.matmul, c.prod, &o), DBG_ORIGIN_PROPAGATED);
    ck_assert_str_eq(o.from, "h0/attn/scale:out0");
    chain_free(&c);
}
END_TEST

/* The session's decision, through its hook, on the same records. */
static int n_stops;
static dbg_stop last;

static void fe_show(const dbg_stop *s)
{
    n_stops++;
    last = *s;
    last.cond = NULL;
}

static char *fe_read(const char *prompt)
{
    (void)prompt;
    return strdup("continue");
}

static const dbg_frontend fe_test = { .name = "test-verdict", .read_line = fe_read, .show_stop = fe_show };

static void session_setup(void)
{
    tu_setup();
    memset(&dbg, 0, sizeof dbg);
    dbg.next_id = 1;
    dbg.ops = calloc(DBG_MAX_OPS, sizeof *dbg.ops);
    dbg.last_ops = calloc(DBG_MAX_OPS, sizeof *dbg.last_ops);
    dbg.trends = calloc(DBG_MAX_TRENDS, sizeof *dbg.trends);
    ck_assert(dbg.ops && dbg.last_ops && dbg.trends);
    dbg.interactive = true;
    dbg.started = true;
    dbg_frontend_active = &fe_test;
    dbg_out_stream = fopen("/dev/null", "w");
    n_stops = 0;
}

static void session_teardown(void)
{
    for (int i = 0; i < dbg.n_breaks; i++)
        dbg_cond_free(dbg.breaks[i].cond);
    dbg.n_breaks = 0;
    fclose(dbg_out_stream);
    dbg_out_stream = NULL;
    dbg_frontend_active = NULL;
    free(dbg.ops);
    free(dbg.last_ops);
    free(dbg.trends);
    tu_teardown();
}

/* Runs the chain as one step under breakpoint `brk`, the product's NaN
 * planted or not; returns the number of stops. */
static int run_chain(const char *brk, bool with_nan)
{
    for (int i = 0; i < dbg.n_breaks; i++)
        dbg_cond_free(dbg.breaks[i].cond);
    dbg.n_breaks = 0;
    ck_assert(!dbg_execute(brk));
    chain c = chain_make();
    if (!with_nan) { /* masked @ finite values: the -inf reaches no output */
        te_set(c.prod, 2, 0);
        te_set(c.prod, 3, 0);
        te_set(c.after, 2, 1);
        te_set(c.after, 3, 1);
    }
    n_stops = 0;
    dbg_on_step_begin(0, NULL);
    const te_op_record *recs[] = { &c.mask, &c.scale, &c.softmax, &c.matmul, &c.add };
    for (size_t i = 0; i < sizeof recs / sizeof *recs; i++)
        dbg_on_op_end(recs[i], NULL);
    dbg_on_step_end(0, NULL);
    chain_free(&c);
    return n_stops;
}

START_TEST(test_intended_no_stop)
{
    static const char *const kinds[] = { "break nonfinite", "break inf", "break nan" };
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(run_chain(kinds[k], false) == 0, "%s stopped at %s (the mask's intended -inf)", kinds[k],
                      last.op);
        int stops = run_chain(kinds[k], true);
        if (k == 1) { /* the product has no Inf of its own */
            ck_assert_msg(stops == 0, "break inf stopped at %s", last.op);
            continue;
        }
        ck_assert_msg(stops == 1, "%s: %d stops", kinds[k], stops);
        ck_assert_str_eq(last.op, "h0/attn/mul");
        ck_assert_str_eq(last.reason, "nan");
        ck_assert_str_eq(last.tensor, "h0/attn/mul:out0");
        ck_assert_int_eq(last.index, 2);
        ck_assert_int_eq(last.origin.kind, DBG_ORIGIN_CREATED);
    }
    /* A mask the op table does not mark: its -inf stops, unless the
     * condition exempts it by name (then the scale, carrying it, is the
     * first op to show it). */
    mask_traits = 0;
    ck_assert_int_eq(run_chain("break nonfinite", false), 1);
    ck_assert_str_eq(last.op, "h0/attn/mask");
    ck_assert_int_eq(run_chain("break nonfinite if not op=*/mask", false), 0);
    ck_assert_int_eq(run_chain("break nonfinite if not op=*/mask and not op=h0/attn/sc*", false), 0);
    mask_traits = TE_TRAIT_NONFINITE_OK;
}
END_TEST

/* ---- end to end: te_masked_fill, in eager and graph mode --------------------------
 * scores [2,4] (a parameter) -> h0/attn/mask (te_masked_fill, -inf where
 * the mask is 1: row 0's last two, row 1 whole) -> h0/attn/softmax: finite
 * (a fully masked row gives zeros). With `nan_too`, the masked scores also
 * go through h0/attn/leak = masked @ zeros[4,3]: -inf * 0 is a NaN made
 * there. */
typedef struct masked_model {
    te_tensor *scores, *mask, *zeros;
    bool nan_too;
} masked_model;

static te_status masked_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    (void)in;
    masked_model *m = ctx;
    te_scope_push("h0/attn");
    te_name_next("mask");
    te_tensor *masked = te_masked_fill(m->scores, m->mask, -INFINITY);
    te_name_next("softmax");
    te_tensor *att = te_softmax(masked, -1);
    te_tensor *loss = te_sum(att, TE_ALL, false);
    if (m->nan_too) {
        te_name_next("leak");
        te_tensor *leak = te_matmul(masked, m->zeros);
        loss = te_add(loss, te_sum(leak, TE_ALL, false));
    }
    te_scope_pop();
    te_status st = te_backward(loss);
    out[0] = loss;
    return st;
}

START_TEST(test_masked_fill_end_to_end)
{
    int hook = te_hook_add(&(te_hooks){ .step_begin = dbg_on_step_begin, .step_end = dbg_on_step_end,
                                        .phase_begin = dbg_on_phase, .op_end = dbg_on_op_end },
                           NULL);
    ck_assert(hook >= 0);
    masked_model m = { .scores = te_param_new("scores", TE_F32, te_shape(2, 4)),
                       .mask = te_tensor_persistent(TE_F32, te_shape(2, 4)),
                       .zeros = te_tensor_persistent(TE_F32, te_shape(4, 3)) };
    ck_assert(m.scores && m.mask && m.zeros);
    static const float mask[8] = { 0, 0, 1, 1, 1, 1, 1, 1 };
    for (int i = 0; i < 8; i++) {
        te_set(m.scores, i, 0.25f * (float)i - 1);
        te_set(m.mask, i, mask[i]);
    }
    for (int i = 0; i < 12; i++)
        te_set(m.zeros, i, 0);
    static const char *const kinds[] = { "break nonfinite", "break nan", "break inf" };
    for (int mode = 0; mode < 2; mode++) {
        for (int nan_too = 0; nan_too < 2; nan_too++) {
            m.nan_too = nan_too;
            te_graph *g = te_graph_new(masked_step, &m,
                                       &(te_graph_opts){ .mode = mode ? TE_MODE_GRAPH : TE_MODE_EAGER, .n_outputs = 1 });
            ck_assert_msg(g != NULL, "%s", te_error());
            for (int k = 0; k < 3; k++) {
                for (int i = 0; i < dbg.n_breaks; i++)
                    dbg_cond_free(dbg.breaks[i].cond);
                dbg.n_breaks = 0;
                dbg_breaks_changed();
                ck_assert(!dbg_execute(kinds[k]));
                n_stops = 0;
                te_zero_grad();
                te_tensor *out[1];
                te_step_begin();
                te_status st = te_graph_run(g, NULL, out);
                te_step_end();
                ck_assert_msg(st == TE_OK, "%s", te_error());
                const char *what = mode ? "graph" : "eager";
                /* the mask's -inf and the softmax over it never stop */
                bool want = nan_too && k != 2; /* the leak's NaN; it makes no Inf */
                ck_assert_msg(n_stops == (want ? 1 : 0), "%s %s, leak %d: %d stops (last at %s)", what, kinds[k],
                              nan_too, n_stops, last.op);
                if (!want)
                    continue;
                ck_assert_str_eq(last.op, "h0/attn/leak");
                ck_assert_str_eq(last.reason, "nan");
                ck_assert_int_eq(last.phase, TE_PHASE_FORWARD);
                ck_assert_msg(last.origin.kind == DBG_ORIGIN_CREATED, "%s: origin %d from %s", what,
                              last.origin.kind, last.origin.from);
                ck_assert_str_eq(last.origin.despite, "h0/attn/mask:out0");
                ck_assert_int_eq(last.index, 0); /* row 0 meets the -inf at columns 2 and 3 */
            }
            te_graph_free(g);
        }
    }
    /* The ops are known now: a condition's op glob that matches none is
     * said at once, with the closest names, as a breakpoint's own glob. */
    char said[2048] = "";
    FILE *f = fmemopen(said, sizeof said - 1, "w");
    ck_assert(f != NULL);
    FILE *saved = dbg_out_stream;
    dbg_out_stream = f;
    ck_assert(!dbg_execute("break nonfinite if not op=*/msk and not op=h0/attn/softmax"));
    fclose(f);
    dbg_out_stream = saved;
    ck_assert_msg(strstr(said, "warning: breakpoint ") && strstr(said, "'s condition op=*/msk matched none of the ") &&
                  strstr(said, "h0/attn/mask"), "%s", said);
    ck_assert_msg(!strstr(said, "op=h0/attn/softmax matched none"), "%s", said);
    te_hook_remove(hook);
    te_tensor_free(m.mask);
    te_tensor_free(m.zeros);
}
END_TEST

Suite *suite_verdict(void)
{
    Suite *s = suite_create("verdict");
    TCase *tc = tcase_create("every op");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_backward_reads_every_op, 0, TE_OP_COUNT);
    suite_add_tcase(s, tc);
    TCase *ti = tcase_create("intended");
    tcase_add_checked_fixture(ti, session_setup, session_teardown);
    tcase_add_test(ti, test_intended_verdicts);
    tcase_add_test(ti, test_intended_no_stop);
    tcase_add_test(ti, test_masked_fill_end_to_end);
    suite_add_tcase(s, ti);
    return s;
}
