/* test_watch.c — the deferred NaN watch (engine/watch.c) and the step
 * snapshot it replays from (engine/snapshot.c), on the CPU with deferring
 * forced: the same stops as the op-by-op watch, and replays bit for bit. */
#include "suites.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* linear, batch norm, relu, dropout, a masked fill (its -inf intended),
 * a scale carrying the -inf on (flagged: the engine leaves intent to the
 * hooks), softmax, linear, cross entropy; Adam with clipping: every kind of state
 * a step changes (parameters, gradients, moments, running statistics, the
 * optimizer's count) and a random mask keyed by step and op. */
typedef struct {
    te_tensor *w1, *b1, *g, *beta, *rm, *rv, *w2, *mask;
    te_optim *opt;
} net;

static te_status net_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    net *m = ctx;
    te_tensor *h = te_linear(in[0], m->w1, m->b1);
    h = te_dropout(te_relu(te_batchnorm(h, m->g, m->beta, m->rm, m->rv, 0.1f, 1e-5f)), 0.25f);
    h = te_softmax(te_scale(te_masked_fill(h, m->mask, -INFINITY), 2.0f), -1);
    out[1] = te_linear(h, m->w2, NULL);
    out[0] = te_cross_entropy(out[1], in[1]);
    te_status st = te_backward(out[0]);
    if (st != TE_OK)
        return st;
    te_clip_grad_norm(te_params(), te_param_count(), 1.0f);
    return te_optim_step(m->opt);
}

static te_tensor *param(const char *name, int ndim, const int64_t *shape, float lo, float hi)
{
    te_tensor *p = te_param_new(name, TE_F32, ndim, shape);
    ck_assert_msg(p != NULL, "%s", te_error());
    te_init_uniform(p, lo, hi);
    return p;
}

static te_tensor *persistent(int ndim, const int64_t *shape, float v)
{
    te_tensor *t = te_tensor_persistent(TE_F32, ndim, shape);
    ck_assert(t != NULL);
    te_fill(t, v);
    return t;
}

static net net_new(void)
{
    net m = { .w1 = param("w1", te_shape(16, 8), -0.5f, 0.5f), .b1 = param("b1", te_shape(16), -0.1f, 0.1f),
              .g = param("g", te_shape(16), 0.9f, 1.1f), .beta = param("beta", te_shape(16), -0.1f, 0.1f),
              .w2 = param("w2", te_shape(4, 16), -0.5f, 0.5f), .rm = persistent(te_shape(16), 0.0f),
              .rv = persistent(te_shape(16), 1.0f), .mask = persistent(te_shape(16), 0.0f) };
    for (int i = 0; i < 16; i += 5)
        te_set(m.mask, i, 1.0f);
    m.opt = te_adam_new(te_params(), te_param_count(), &(te_adam_opts){ .lr = 0.05f, .decoupled = true });
    ck_assert(m.opt != NULL);
    return m;
}

static void net_free(net *m)
{
    te_optim_free(m->opt);
    te_tensor_free(m->rm);
    te_tensor_free(m->rv);
    te_tensor_free(m->mask);
}

/* Every parameter's and running statistic's bits, and the losses. */
typedef struct {
    float loss[8];
    float *values;
    int64_t n;
} run_result;

static void snapshot_values(run_result *r, const net *m)
{
    const te_tensor *ts[] = { m->w1, m->b1, m->g, m->beta, m->w2, m->rm, m->rv };
    r->n = 0;
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        r->n += ts[i]->numel;
    r->values = malloc((size_t)r->n * sizeof *r->values);
    ck_assert(r->values != NULL);
    int64_t at = 0;
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        ck_assert_int_eq(te_tensor_read_f32(ts[i], 0, ts[i]->numel, r->values + at), TE_OK);
        at += ts[i]->numel;
    }
}

/* A hook that defers on kinds and notes the ops it is shown. */
static struct {
    int calls;
    char first_bad[TE_NAME_MAX];
    int64_t first_bad_step;
} seen;

static bool has_nan(const te_tensor *t)
{
    te_stats s;
    te_stats_quick(t, &s);
    return s.nan > 0;
}

/* The first op whose output holds a NaN, and how many ops were shown. */
static void note_op(const te_op_record *r, void *user)
{
    (void)user;
    seen.calls++;
    for (int k = 0; k < r->n_outputs && !seen.first_bad[0]; k++)
        if (r->outputs[k] && r->outputs[k]->data && te_dtype_is_float(r->outputs[k]->dtype) && has_nan(r->outputs[k])) {
            snprintf(seen.first_bad, sizeof seen.first_bad, "%s", r->name);
            seen.first_bad_step = r->step;
        }
}

static int attach(unsigned kinds)
{
    memset(&seen, 0, sizeof seen);
    int h = te_hook_add(&(te_hooks){ .op_end = note_op }, NULL);
    ck_assert_int_ge(h, 0);
    te_hook_defer(h, kinds);
    return h;
}

/* Trains steps steps of net_step in mode under policy, on a fresh engine,
 * with a hook deferring on kinds (none when kinds < 0) and an injection
 * (NULL: none). */
static const char *profile_to; /* a trace of train()'s steps, when set */

static run_result train(te_mode mode, te_watch_mode policy, int steps, int kinds, const char *inject)
{
    tu_teardown();
    tu_setup();
    if (profile_to) {
        te_profile_opts o = { .last = -1, .keep = 10 };
        snprintf(o.file, sizeof o.file, "%s", profile_to);
        ck_assert_int_eq(te_profile_start(&o), TE_OK);
    }
    te_watch_policy(policy);
    if (inject)
        ck_assert_int_eq(te_inject_add(inject), TE_OK);
    const int h = kinds >= 0 ? attach((unsigned)kinds) : -1;
    net m = net_new();
    te_tensor *x = te_tensor_persistent(TE_F32, te_shape(8, 8));
    te_tensor *y = te_tensor_persistent(TE_I32, te_shape(8));
    ck_assert(x && y);
    for (int64_t i = 0; i < x->numel; i++)
        te_set(x, i, te_rand_uniform(9, 1, (uint64_t)i) * 2.0f - 1.0f);
    for (int64_t i = 0; i < y->numel; i++)
        te_set(y, i, (float)(i % 4));
    te_graph *g = te_graph_new(net_step, &m, &(te_graph_opts){ .mode = mode, .n_inputs = 2, .n_outputs = 2 });
    ck_assert(g != NULL);
    run_result r = { .n = 0 };
    for (int s = 0; s < steps; s++) {
        te_tensor *in[2] = { x, y }, *out[2];
        te_step_begin();
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "step %d: %s", s, te_error());
        r.loss[s] = te_item(out[0]);
        te_step_end();
    }
    if (profile_to)
        ck_assert_int_eq(te_profile_stop(), TE_OK);
    snapshot_values(&r, &m);
    te_graph_free(g);
    te_tensor_free(x);
    te_tensor_free(y);
    net_free(&m);
    te_watch_policy(TE_WATCH_AUTO);
    if (h >= 0)
        te_hook_remove(h);
    return r;
}

/* The scale's -inf is flagged every step (the engine does not judge
 * intent beyond the op table: that is the hook's business), so every step
 * is replayed from its snapshot; the result must be the one of the run that never deferred, bit
 * for bit, in both modes. */
START_TEST(test_replay_exact)
{
    static const te_mode modes[] = { TE_MODE_EAGER, TE_MODE_GRAPH };
    const int all = TE_WATCH_NAN | TE_WATCH_INF;
    for (int i = 0; i < 2; i++) {
        run_result ref = train(modes[i], TE_WATCH_NEVER, 6, all, NULL);
        int64_t d0, r0, d1, r1;
        te_watch_counts(&d0, &r0);
        run_result got = train(modes[i], TE_WATCH_ALWAYS, 6, all, NULL);
        te_watch_counts(&d1, &r1);
        ck_assert_int_eq(d1 - d0, 6);
        ck_assert_int_eq(r1 - r0, 6);
        ck_assert_int_eq(ref.n, got.n);
        ck_assert_msg(memcmp(ref.loss, got.loss, sizeof ref.loss) == 0, "%s: the losses differ (%g vs %g at 5)",
                      te_mode_name(modes[i]), ref.loss[5], got.loss[5]);
        for (int64_t k = 0; k < ref.n; k++)
            ck_assert_msg(memcmp(&ref.values[k], &got.values[k], sizeof(float)) == 0,
                          "%s: value %lld differs after replays: %.9g vs %.9g", te_mode_name(modes[i]),
                          (long long)k, ref.values[k], got.values[k]);
        free(ref.values);
        free(got.values);
    }
}
END_TEST

/* Only NaN wanted: the -inf is no flag, nothing is replayed, and the hook
 * hears of no op at all; the losses are those of the undeferred run. */
START_TEST(test_defer_without_hit)
{
    run_result ref = train(TE_MODE_EAGER, TE_WATCH_NEVER, 4, TE_WATCH_NAN, NULL);
    const int calls_ref = seen.calls;
    int64_t d0, r0, d1, r1;
    te_watch_counts(&d0, &r0);
    run_result got = train(TE_MODE_EAGER, TE_WATCH_ALWAYS, 4, TE_WATCH_NAN, NULL);
    te_watch_counts(&d1, &r1);
    ck_assert_int_gt(calls_ref, 40);
    ck_assert_int_eq(seen.calls, 0);
    ck_assert_int_eq(d1 - d0, 4);
    ck_assert_int_eq(r1 - r0, 0);
    ck_assert(memcmp(ref.loss, got.loss, sizeof ref.loss) == 0);
    free(ref.values);
    free(got.values);
}
END_TEST

/* An injected NaN: the first op with a NaN the hook is shown is the one
 * it is shown without deferring, at the same step; one step is replayed. */
START_TEST(test_injected_nan_found_on_replay)
{
    static const te_mode modes[] = { TE_MODE_EAGER, TE_MODE_GRAPH };
    static const char *const where[] = { "nan@op=linear,step=2", "nan@op=grad/bn,step=1",
                                         "nan@op=update/w2,step=3,index=5" };
    for (int i = 0; i < 2; i++)
        for (size_t j = 0; j < sizeof where / sizeof where[0]; j++) {
            char ref_op[TE_NAME_MAX];
            run_result ref = train(modes[i], TE_WATCH_NEVER, 5, TE_WATCH_NAN, where[j]);
            const int64_t ref_step = seen.first_bad_step;
            snprintf(ref_op, sizeof ref_op, "%s", seen.first_bad);
            int64_t r0, r1;
            te_watch_counts(NULL, &r0);
            run_result got = train(modes[i], TE_WATCH_ALWAYS, 5, TE_WATCH_NAN, where[j]);
            te_watch_counts(NULL, &r1);
            ck_assert_msg(ref_op[0], "%s: no NaN seen without deferring", where[j]);
            ck_assert_msg(strcmp(seen.first_bad, ref_op) == 0 && seen.first_bad_step == ref_step,
                          "%s %s: first NaN at %s step %lld deferred, %s step %lld not", te_mode_name(modes[i]),
                          where[j], seen.first_bad, (long long)seen.first_bad_step, ref_op, (long long)ref_step);
            ck_assert_int_ge(r1 - r0, 1);
            free(ref.values);
            free(got.values);
        }
}
END_TEST

/* A hook that defers on nothing (0) keeps every step op by op; one that
 * reads no data (TE_HOOK_NO_DATA) neither blocks deferring nor misses an
 * op. */
static int no_data_calls;
static void count_op(const te_op_record *r, void *user)
{
    (void)r;
    (void)user;
    no_data_calls++;
}

START_TEST(test_who_defers)
{
    int64_t d0, d1;
    te_watch_counts(&d0, NULL);
    run_result r = train(TE_MODE_EAGER, TE_WATCH_ALWAYS, 2, 0, NULL);
    te_watch_counts(&d1, NULL);
    ck_assert_int_eq(d1, d0);
    ck_assert_int_gt(seen.calls, 40);
    free(r.values);

    no_data_calls = 0;
    int counter = te_hook_add(&(te_hooks){ .op_end = count_op }, NULL);
    te_hook_defer(counter, TE_HOOK_NO_DATA);
    te_watch_counts(&d0, NULL);
    r = train(TE_MODE_EAGER, TE_WATCH_ALWAYS, 2, TE_WATCH_NAN, NULL);
    te_watch_counts(&d1, NULL);
    te_hook_remove(counter);
    ck_assert_int_eq(d1 - d0, 2);
    ck_assert_int_eq(seen.calls, 0);
    ck_assert_int_gt(no_data_calls, 40);
    free(r.values);
}
END_TEST

/* The debugger: `break nonfinite` alone is a session that defers; every
 * line it prints (stops, verdicts, info op, print, the losses) is the
 * same with deferring forced as without, for faults made in each phase,
 * in both modes. The pid line aside. */
START_TEST(test_debugger_same_session)
{
    static const char *const faults[] = { "nan@op=fc2/linear,step=3", "inf@op=grad/fc1/linear,step=2",
                                          "nan@op=update/fc2.weight,step=2,index=9" };
    static const char *const modes[] = { "eager", "graph" };
    static char out[2][16384];
    for (int m = 0; m < 2; m++)
        for (size_t f = 0; f < sizeof faults / sizeof faults[0]; f++) {
            for (int d = 0; d < 2; d++)
                tu_shell(out[d], sizeof out[d],
                         "TDBG_WATCH_DEFER=%d '%s/debugger/tdbg' --batch -ex 'break nonfinite' -ex run -ex 'info op' "
                         "-ex 'print fc1/linear:out0[0,0:4]' -ex 'info watch' -ex continue -- '%s/examples/mlp' "
                         "--steps 5 --mode %s --batch 16 --train-size 64 --log-every 1 --threads 2 --inject %s 2>&1 | "
                         "grep -v '(pid '",
                         d, TDBG_BUILDDIR, TDBG_BUILDDIR, modes[m], faults[f]);
            /* Stopped in the replay of the step that hit, every step before it deferred. */
            char *w0 = strstr(out[0], "watch: "), *w1 = strstr(out[1], "watch: ");
            ck_assert_msg(w0 && w1, "no 'info watch' line:\n%s", out[1]);
            ck_assert_msg(strncmp(w0, "watch: 0 steps deferred", 23) == 0, "%s", w0);
            long long deferred = -1, replayed = -1;
            ck_assert_int_eq(sscanf(w1, "watch: %lld steps deferred (checked on the device, read once at the step's "
                                        "end), %lld of them", &deferred, &replayed), 2);
            ck_assert_msg(deferred >= 2 && replayed == 1, "%s %s: %s", modes[m], faults[f], w1);
            /* the rest alike, line for line */
            char *e0 = strchr(w0, '\n'), *e1 = strchr(w1, '\n');
            ck_assert(e0 && e1);
            memmove(w0, e0 + 1, strlen(e0 + 1) + 1);
            memmove(w1, e1 + 1, strlen(e1 + 1) + 1);
            ck_assert_msg(strstr(out[0], "stopped: step="), "%s %s: no stop:\n%s", modes[m], faults[f], out[0]);
            ck_assert_msg(strcmp(out[0], out[1]) == 0, "%s %s: the sessions differ:\n--- op by op:\n%s\n--- deferred:\n%s",
                          modes[m], faults[f], out[0], out[1]);
        }
}
END_TEST

static int count_in_file(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)len + 1);
    ck_assert(text && fread(text, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p++)
        n++;
    free(text);
    return n;
}

/* Profiled, a replayed step's dropped attempt leaves its time as one
 * "replay" event, not its ops: the same ops as the run that never
 * deferred, in both modes. */
START_TEST(test_replay_profiled)
{
    static const te_mode modes[] = { TE_MODE_EAGER, TE_MODE_GRAPH };
    char dir[256], a[300], b[300];
    tu_scratch_make(dir, sizeof dir, "watchprof");
    snprintf(a, sizeof a, "%s/never.json", dir);
    snprintf(b, sizeof b, "%s/always.json", dir);
    for (int i = 0; i < 2; i++) {
        profile_to = a;
        run_result ref = train(modes[i], TE_WATCH_NEVER, 4, TE_WATCH_NAN | TE_WATCH_INF, NULL);
        profile_to = b;
        run_result got = train(modes[i], TE_WATCH_ALWAYS, 4, TE_WATCH_NAN | TE_WATCH_INF, NULL);
        profile_to = NULL;
        int ops_ref = count_in_file(a, "\"cat\":\"op\""), ops_got = count_in_file(b, "\"cat\":\"op\"");
        ck_assert_int_gt(ops_ref, 4 * 10);
        ck_assert_msg(ops_got == ops_ref, "%s: %d ops replayed against %d", te_mode_name(modes[i]), ops_got, ops_ref);
        ck_assert_int_eq(count_in_file(a, "\"cat\":\"replay\""), 0);
        ck_assert_int_eq(count_in_file(b, "\"cat\":\"replay\""), 4);
        free(ref.values);
        free(got.values);
    }
    tu_scratch_remove(dir);
}
END_TEST

Suite *suite_watch(void)
{
    Suite *s = suite_create("watch");
    TCase *tc = tcase_create("deferred");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_replay_exact);
    tcase_add_test(tc, test_replay_profiled);
    tcase_add_test(tc, test_defer_without_hit);
    tcase_add_test(tc, test_injected_nan_found_on_replay);
    tcase_add_test(tc, test_who_defers);
    tcase_add_test(tc, test_debugger_same_session);
    suite_add_tcase(s, tc);
    return s;
}
