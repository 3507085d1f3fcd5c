/*
 * graph.c — te_graph: one step function, run eagerly or as compiled plans,
 * one plan per variant (input shapes and dtypes, training flag, the set of
 * observed tensors), compiled on first need and cached.
 */
#include "graph/graph.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_IO 64
#define MAX_OBSERVED 64

struct te_graph {
    te_step_fn fn;
    void *ctx;
    te_graph_opts o;
    char name[64];
    char *save_dir;
    tg_plan **plans;
    int n_plans;
    tg_plan *last;
};

const char *te_mode_name(te_mode m) { return m == TE_MODE_GRAPH ? "graph" : "eager"; }

/* ---- observed tensors ------------------------------------------------------ */

static char observed[MAX_OBSERVED][TE_NAME_MAX];
static int n_observed;

te_status te_observe_add(const char *glob)
{
    if (!glob || !glob[0] || strlen(glob) >= TE_NAME_MAX) {
        te_set_error(TE_ERR_ARG, "te_observe_add: '%s' is not a tensor or op glob", glob ? glob : "(null)");
        return TE_ERR_ARG;
    }
    for (int i = 0; i < n_observed; i++)
        if (strcmp(observed[i], glob) == 0)
            return TE_OK;
    if (n_observed == MAX_OBSERVED) {
        te_set_error(TE_ERR_ARG, "te_observe_add: at most %d globs", MAX_OBSERVED);
        return TE_ERR_ARG;
    }
    snprintf(observed[n_observed++], TE_NAME_MAX, "%s", glob);
    return TE_OK;
}

void te_observe_remove(const char *glob)
{
    for (int i = 0; i < n_observed; i++)
        if (strcmp(observed[i], glob) == 0) {
            memmove(observed[i], observed[i + 1], (size_t)(n_observed - i - 1) * sizeof observed[0]);
            n_observed--;
            return;
        }
}

void te_observe_clear(void) { n_observed = 0; }

/* "conv1/bn:out0" matches a glob of the tensor or of its op ("conv1/bn", "conv1/x*"). */
bool te_observed_name(const char *tensor_name, const char *op_name)
{
    for (int i = 0; i < n_observed; i++)
        if (fnmatch(observed[i], tensor_name, 0) == 0 || (op_name && fnmatch(observed[i], op_name, 0) == 0))
            return true;
    return op_name && te_inject_targets(op_name);
}

static int by_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The observed set and the injected ops as text, the same for the same set
 * in any order: the part of a variant's key that says what stays visible;
 * and the AMP level and dtype, which decide the casts a trace records. */
static char *observe_key(void)
{
    const char *sorted[MAX_OBSERVED];
    for (int i = 0; i < n_observed; i++)
        sorted[i] = observed[i];
    qsort(sorted, (size_t)n_observed, sizeof *sorted, by_str);
    size_t cap = (size_t)n_observed * (TE_NAME_MAX + 1) + 4096, len = 0;
    char *key = malloc(cap);
    if (!key)
        return NULL;
    for (int i = 0; i < n_observed; i++)
        len += (size_t)snprintf(key + len, cap - len, "%s\n", sorted[i]);
    len += (size_t)snprintf(key + len, cap - len, "|amp %s %s|", te_amp_level_name(te_amp_level_get()),
                            te_dtype_name(te_amp_dtype()));
    te_inject_key(key + len, cap - len);
    return key;
}

/* ---- the graph ----------------------------------------------------------------- */

te_graph *te_graph_new(te_step_fn fn, void *ctx, const te_graph_opts *o)
{
    if (!fn || !o || o->n_inputs < 0 || o->n_inputs > MAX_IO || o->n_outputs < 0 ||
        o->n_outputs > MAX_IO || (o->mode != TE_MODE_EAGER && o->mode != TE_MODE_GRAPH)) {
        te_set_error(TE_ERR_ARG, "te_graph_new: needs a step function, a mode and 0..%d inputs and outputs",
                     MAX_IO);
        return NULL;
    }
    te_graph *g = calloc(1, sizeof *g);
    if (!g) {
        te_set_error(TE_ERR_NOMEM, "te_graph_new: out of memory");
        return NULL;
    }
    g->fn = fn;
    g->ctx = ctx;
    g->o = *o;
    snprintf(g->name, sizeof g->name, "%s", o->name ? o->name : "step");
    g->o.name = g->name;
    g->o.save_dir = NULL;
    g->o.input_names = NULL; /* not kept: the caller's array may go */
    if (o->save_dir && te_graph_save(g, o->save_dir) != TE_OK) {
        te_graph_free(g);
        return NULL;
    }
    return g;
}

void te_graph_free(te_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_plans; i++)
        tg_plan_free(g->plans[i]);
    free(g->plans);
    free(g->save_dir);
    free(g);
}

static bool same_sig(const tg_input_sig *s, const te_tensor *t)
{
    return s->dtype == t->dtype && s->ndim == t->ndim &&
           memcmp(s->shape, t->shape, (size_t)t->ndim * sizeof *t->shape) == 0;
}

static bool plan_matches(const tg_plan *p, te_tensor *const *inputs, bool training, const char *key)
{
    if (p->training != training || strcmp(p->observe_key, key) != 0)
        return false;
    for (int i = 0; i < p->n_inputs; i++)
        if (!same_sig(&p->sig[i], inputs[i]))
            return false;
    return true;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Writes the plan after a pass to DIR/NAME-vK-NN-PASS.txt. */
static void save_stage(const te_graph *g, const tg_plan *p, int stage, const char *pass)
{
    if (!g->save_dir)
        return;
    char path[4096], title[128];
    snprintf(path, sizeof path, "%s/%s-v%d-%02d-%s.txt", g->save_dir, g->name, g->n_plans, stage, pass);
    FILE *f = fopen(path, "w");
    if (!f) {
        TE_LOG(TE_LOG_GRAPH, TE_LOG_WARN, "tdbg: cannot write the graph to %s: %s", path, strerror(errno));
        return;
    }
    snprintf(title, sizeof title, "%s, variant %d, after %s", g->name, g->n_plans, pass);
    tg_print(p, f, title);
    fclose(f);
}

/* "k3 fused-act: fc1/linear, fc1/relu": what hooks say a kernel is. */
static void describe_kernel(tg_kernel *k, int index)
{
    size_t cap = 64 + (size_t)k->n_orig * TE_NAME_MAX, len;
    if (!(k->desc = malloc(cap)))
        abort(); /* out of memory while compiling */
    len = (size_t)snprintf(k->desc, cap, "k%d %s", index, tg_kernel_kind_name(k->kind));
    for (int j = 0; j < k->n_orig && k->n_orig > 1; j++) {
        const te_node *n = k->orig[j].node;
        len += (size_t)snprintf(k->desc + len, cap - len, "%s%s", j ? ", " : ": ",
                                k->orig[j].backward ? n->grad_name : n->name);
    }
}

/* TDBG_GRAPH_DISABLE=fuse-ew,cse turns passes off without rebuilding: the
 * way to find which pass makes a graph-mode run differ from eager mode. */
static unsigned env_disabled(void)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = { { "dce", TE_PASS_DCE }, { "fold", TE_PASS_FOLD }, { "cse", TE_PASS_CSE },
                  { "bn-fold", TE_PASS_BN_FOLD }, { "fuse-act", TE_PASS_FUSE_ACT },
                  { "fuse-ew", TE_PASS_FUSE_EW }, { "fuse-attn", TE_PASS_FUSE_ATTN },
                  { "recompute", TE_PASS_RECOMPUTE }, { "layout", TE_PASS_LAYOUT },
                  { "fuse-sum", TE_PASS_FUSE_SUM },
                  { "capture", 0 } /* not a pass: capture.c reads it */ };
    const char *env = getenv("TDBG_GRAPH_DISABLE");
    unsigned bits = 0;
    while (env && *env) {
        size_t len = strcspn(env, ",");
        bool known = len == 3 && strncmp(env, "all", 3) == 0;
        if (known)
            bits = ~0u;
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !known; i++)
            if (strlen(names[i].name) == len && strncmp(env, names[i].name, len) == 0) {
                bits |= names[i].bit;
                known = true;
            }
        static bool warned;
        if (!known && len && !warned) {
            warned = true;
            TE_LOG(TE_LOG_GRAPH, TE_LOG_WARN,
                   "tdbg: TDBG_GRAPH_DISABLE: no pass '%.*s' (dce, fold, cse, bn-fold, fuse-act, "
                   "fuse-ew, fuse-attn, fuse-sum, recompute, layout, capture, all)", (int)len, env);
        }
        env += len + (env[len] == ',');
    }
    return bits;
}

/* Observed values (by name) and the passes, in order. */
static te_status compile(te_graph *g, tg_plan *p)
{
    p->device = tg_plan_device(p);
    for (int v = 0; v < p->n_values; v++) {
        te_tensor *t = p->values[v].t;
        const te_node *n = p->values[v].kind == TG_TEMP && p->values[v].grad_of < 0 ? t->node : NULL;
        if (p->values[v].kind == TG_TEMP && te_observed_name(t->name, n ? n->name : NULL))
            p->values[v].observed = true;
    }
    static const struct {
        const char *name;
        unsigned bit;
        int (*run)(tg_plan *);
    } passes[] = {
        { "dce", TE_PASS_DCE, tg_pass_dce },
        { "fold", TE_PASS_FOLD, tg_pass_fold },
        { "cse", TE_PASS_CSE, tg_pass_cse },
        { "dce2", TE_PASS_DCE, tg_pass_dce },
        { "bn-fold", TE_PASS_BN_FOLD, tg_pass_bn_fold },
        { "fuse-sum", TE_PASS_FUSE_SUM, tg_pass_fuse_sum }, /* before fuse-ew takes the add */
        { "fuse-attn", TE_PASS_FUSE_ATTN, tg_pass_fuse_attention }, /* before fuse-ew takes its links */

        { "fuse-act", TE_PASS_FUSE_ACT, tg_pass_fuse_act },
        { "fuse-act-grad", TE_PASS_FUSE_ACT, tg_pass_fuse_act_grad },
        { "fuse-ew", TE_PASS_FUSE_EW, tg_pass_fuse_elementwise },
        { "recompute", TE_PASS_RECOMPUTE, tg_pass_recompute }, /* it sees the final kernels */
        { "layout", TE_PASS_LAYOUT, tg_pass_layout }, /* last: of the final kernels, the values recompute left */
    };
    int stage = 0;
    save_stage(g, p, stage++, "trace");
    unsigned dis = g->o.disable | env_disabled();
    TE_LOG(TE_LOG_GRAPH, TE_LOG_DEBUG, "graph %s: plan %d: %d kernels traced (%d ops)", g->name, g->n_plans + 1,
           p->n_kernels, p->traced_ops);
    for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) {
        if (dis & passes[i].bit) {
            TE_LOG(TE_LOG_GRAPH, TE_LOG_DEBUG, "graph %s: pass %s: disabled", g->name, passes[i].name);
            continue;
        }
        const double t0 = te_log_on(TE_LOG_GRAPH, TE_LOG_DEBUG) ? now_ms() : 0;
        const int before = p->n_kernels, done = passes[i].run(p);
        if (done < 0)
            return te_error_code() != TE_OK ? te_error_code() : TE_ERR_STATE;
        tg_compact(p);
        TE_LOG(TE_LOG_GRAPH, TE_LOG_DEBUG, "graph %s: pass %s: %d changed, kernels %d -> %d, %.2f ms", g->name,
               passes[i].name, done, before, p->n_kernels, now_ms() - t0);
        save_stage(g, p, stage++, passes[i].name);
    }
    te_status st = tg_plan_memory(p);
    if (st == TE_OK)
        save_stage(g, p, stage, "memory");
    for (int i = 0; i < p->n_kernels && st == TE_OK; i++)
        describe_kernel(&p->kernels[i], i);
    return st;
}

static te_status shape_error(const te_graph *g, te_tensor *const *inputs, const te_graph_opts *o)
{
    const tg_plan *p = g->last ? g->last : g->plans[0];
    for (int i = 0; i < p->n_inputs; i++) {
        if (same_sig(&p->sig[i], inputs[i]))
            continue;
        char want[96], got[96], name[64];
        const tg_input_sig *s = &p->sig[i];
        te_shape_str(s->ndim, s->shape, want, sizeof want);
        te_shape_str(inputs[i]->ndim, inputs[i]->shape, got, sizeof got);
        if (o && o->input_names && o->input_names[i])
            snprintf(name, sizeof name, "'%s'", o->input_names[i]);
        else
            snprintf(name, sizeof name, "%d", i);
        te_set_error(TE_ERR_SHAPE,
                     "graph %s: input %s is %s %s but the graph was compiled for %s %s: drop the "
                     "short batch (te_loader_opts.drop_remainder), pad it to %s, or create the graph "
                     "with .recompile = true to compile a plan per shape",
                     g->name, name, te_dtype_name(inputs[i]->dtype), got, te_dtype_name(s->dtype), want,
                     want);
        return TE_ERR_SHAPE;
    }
    return TE_OK;
}

/* "graph step: plan 1 compiled for in0 f32[64,784], in1 i32[64] (training):
 * 9 ops traced, 6 kernels, arena 1234 bytes, 3.1 ms". */
static void log_compiled(const te_graph *g, const tg_plan *p)
{
    char sig[512] = "", shape[96];
    size_t at = 0;
    for (int i = 0; i < p->n_inputs && at < sizeof sig; i++) {
        te_shape_str(p->sig[i].ndim, p->sig[i].shape, shape, sizeof shape);
        at += (size_t)snprintf(sig + at, sizeof sig - at, "%sin%d %s%s", i ? ", " : "", i,
                               te_dtype_name(p->sig[i].dtype), shape);
    }
    te_log_write(TE_LOG_GRAPH, TE_LOG_INFO,
                 "graph %s: plan %d compiled for %s (%s%s): %d ops traced, %d kernels, arena %zu bytes, %.1f ms",
                 g->name, g->n_plans + 1, p->n_inputs ? sig : "no inputs", p->training ? "training" : "eval",
                 p->observe_key[0] && p->observe_key[0] != '|' ? ", tensors observed" : "", p->traced_ops,
                 p->n_kernels, p->arena_bytes, p->compile_ms);
}

static tg_plan *find_or_compile(te_graph *g, te_tensor *const *inputs, te_tensor **outputs)
{
    bool training = te_training();
    char *key = observe_key();
    if (!key) {
        te_set_error(TE_ERR_NOMEM, "graph %s: out of memory", g->name);
        return NULL;
    }
    for (int i = 0; i < g->n_plans; i++)
        if (plan_matches(g->plans[i], inputs, training, key)) {
            free(key);
            return g->plans[i];
        }
    /* Only the shape differs from a plan we have: that is the user's call. */
    if (!g->o.recompile && g->last && g->last->training == training &&
        strcmp(g->last->observe_key, key) == 0 && shape_error(g, inputs, &g->o) != TE_OK) {
        free(key);
        return NULL;
    }
    double t0 = now_ms();
    uint64_t prof_t0 = te_prof_on ? te_prof_now() : 0;
    tg_plan *p = tg_trace_step(g->fn, g->ctx, inputs, g->o.n_inputs, outputs, g->o.n_outputs);
    if (!p) {
        free(key);
        return NULL;
    }
    p->observe_key = key;
    p->training = training;
    p->n_inputs = g->o.n_inputs;
    if (!(p->sig = calloc((size_t)(p->n_inputs ? p->n_inputs : 1), sizeof *p->sig)))
        abort();
    for (int i = 0; i < p->n_inputs; i++) {
        p->sig[i].dtype = inputs[i]->dtype;
        p->sig[i].ndim = inputs[i]->ndim;
        memcpy(p->sig[i].shape, inputs[i]->shape, sizeof p->sig[i].shape);
    }
    if (compile(g, p) != TE_OK) {
        tg_plan_free(p);
        return NULL;
    }
    p->compile_ms = now_ms() - t0;
    if (te_log_on(TE_LOG_GRAPH, TE_LOG_INFO))
        log_compiled(g, p);
    if (te_prof_on)
        te_prof_interval("compile", prof_t0, te_prof_now());
    tg_plan **q = realloc(g->plans, (size_t)(g->n_plans + 1) * sizeof *q);
    if (!q) {
        tg_plan_free(p);
        te_set_error(TE_ERR_NOMEM, "graph %s: out of memory", g->name);
        return NULL;
    }
    g->plans = q;
    g->plans[g->n_plans++] = p;
    return p;
}

/* One attempt at a step: the step function (eager) or the plan. */
typedef struct {
    te_graph *g;
    te_tensor *const *inputs;
    te_tensor **outputs;
} graph_call;

static te_status run_step(void *ctx)
{
    const graph_call *c = ctx;
    te_graph *g = c->g;
    if (g->o.mode == TE_MODE_EAGER) {
        for (int i = 0; i < g->o.n_outputs; i++)
            c->outputs[i] = NULL;
        te_status st = g->fn(g->ctx, c->inputs, c->outputs);
        for (int i = 0; i < g->o.n_outputs && st == TE_OK; i++)
            if (!c->outputs[i]) {
                te_set_error(TE_ERR_STATE, "graph %s: the step function left output %d unset", g->name, i);
                st = TE_ERR_STATE;
            }
        return st;
    }
    tg_plan *p = find_or_compile(g, c->inputs, c->outputs);
    if (!p)
        return te_error_code() != TE_OK ? te_error_code() : TE_ERR_STATE;
    g->last = p;
    if (te_prof_on)
        te_prof_arena(p->arena_bytes);
    return tg_execute(p, c->inputs, c->outputs);
}

te_status te_graph_run(te_graph *g, te_tensor *const *inputs, te_tensor **outputs)
{
    if (te_rec_unwinding)
        return te_rewound("graph run");
    for (int i = 0; i < g->o.n_inputs; i++)
        if (!inputs[i]) {
            if (te_error_code() == TE_OK)
                te_set_error(TE_ERR_INPUT, "graph %s: input %d is NULL", g->name, i);
            return TE_ERR_INPUT;
        }
    /* Through the deferred watch (watch.c): a step it defers and finds a
     * NaN in runs again, op by op, from its start. */
    graph_call c = { g, inputs, outputs };
    return te_watch_run(run_step, &c);
}

te_status te_graph_save(te_graph *g, const char *dir)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        te_set_error(TE_ERR_IO, "graph %s: cannot create %s: %s", g->name, dir, strerror(errno));
        return TE_ERR_IO;
    }
    char *d = strdup(dir);
    if (!d) {
        te_set_error(TE_ERR_NOMEM, "graph %s: out of memory", g->name);
        return TE_ERR_NOMEM;
    }
    free(g->save_dir);
    g->save_dir = d;
    if (g->last) { /* the stages are gone: write the finished plan */
        char path[4096];
        snprintf(path, sizeof path, "%s/%s-v%d-final.txt", dir, g->name, g->n_plans - 1);
        FILE *f = fopen(path, "w");
        if (!f) {
            te_set_error(TE_ERR_IO, "graph %s: cannot write %s: %s", g->name, path, strerror(errno));
            return TE_ERR_IO;
        }
        tg_print(g->last, f, "final plan");
        fclose(f);
    }
    return TE_OK;
}

te_graph_stats te_graph_stats_get(const te_graph *g)
{
    te_graph_stats s = { .variants = g->n_plans };
    const tg_plan *p = g->last;
    if (!p)
        return s;
    s.ops = p->traced_ops;
    s.kernels = p->n_kernels;
    for (int i = 0; i < p->n_kernels; i++)
        s.fused += p->kernels[i].n_orig > 1;
    s.arena_bytes = p->arena_bytes;
    s.lower_bound = p->lower_bound;
    s.naive_bytes = p->naive_bytes;
    s.compile_ms = p->compile_ms;
    s.captured_segments = tg_captured_segments(p);
    return s;
}

const tg_plan *tg_graph_plan(const te_graph *g) { return g->last; }
