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
#include "te_internal.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
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
            ((int32_t *)labels->data)[i] = i;
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
            ((int32_t *)idx->data)[i] = (i * 3) % 5;
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

Suite *suite_verdict(void)
{
    Suite *s = suite_create("verdict");
    TCase *tc = tcase_create("every op");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_loop_test(tc, test_backward_reads_every_op, 0, TE_OP_COUNT);
    suite_add_tcase(s, tc);
    return s;
}
