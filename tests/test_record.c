/* test_record.c — time travel (engine/record.c): a small model trained from
 * a loader (dropout, Adam, with and without workers, eager and graph mode,
 * with and without AMP O2 bf16) records every 2 steps; a hook at step S
 * rewinds to S-3 and the loop goes on. The replayed steps must give the
 * recorded losses bit for bit and the run must end with the parameters of
 * a run that never rewound; the errors are exact; a replay perturbed on
 * purpose is caught at its step, and located at its op. */
#include "suites.h"
#include "testutil.h"

#include "checksum.h"
#include "te_internal.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 14
#define STOP 10 /* the hook rewinds at this step's fc2/linear (to STOP-3: from the snapshot of STOP-4) */

typedef struct {
    bool graph, amp, participate;
    int workers, keep;
    int64_t back;         /* te_rewind's target at STOP; -1: no rewind */
    int64_t perturb;      /* a replayed step whose logits the hook changes; -1 none */
    bool locate;          /* at STOP: te_record_locate(back) with an injection at back */
    bool outside;         /* the loop writes into each batch a count it does not register (no injection) */
} cfg;

typedef struct {
    te_tensor *w1, *b1, *w2, *b2;
    te_optim *opt;
} model;

typedef struct {
    const cfg *c;
    bool asked, replaying;
    te_status rewind_st;
    char rewind_msg[512];
    int rewound_calls, diverged_calls, located_calls;
    int64_t rewound_step, rewound_loop_s, diverged_step;
    double div_rec_loss, div_loss;
    uint64_t div_rec_sum, div_sum;
    int silent_ops;       /* op hooks of steps before the target, after the rewind: none allowed */
    int64_t *loop_s;
    te_record_located loc;
} watch;

typedef struct {
    float first[64], replay[64];
    bool seen[64];
    int replayed, rewound_status;
    float *params;
    int64_t n_params;
    double loss_sum;
} result;

static te_status train_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    model *m = ctx;
    te_scope_push("fc1");
    te_tensor *h = te_relu(te_linear(in[0], m->w1, m->b1));
    te_scope_pop();
    h = te_dropout(h, 0.25f);
    te_scope_push("fc2");
    te_tensor *z = te_linear(h, m->w2, m->b2);
    te_scope_pop();
    out[0] = te_cross_entropy(z, in[1]);
    te_status st = te_backward(te_scaler_scale_loss(out[0]));
    if (st == TE_OK)
        st = te_scaler_unscale(te_params(), te_param_count());
    return st == TE_OK ? te_optim_step(m->opt) : st;
}

static void on_op(const te_op_record *r, void *user)
{
    watch *w = user;
    if (w->asked && !w->replaying && w->rewound_calls == 0 && r->step < w->c->back)
        w->silent_ops++;
    const bool fc2 = r->phase == TE_PHASE_FORWARD && strcmp(r->name, "fc2/linear") == 0;
    if (fc2 && w->replaying && r->step == w->c->perturb && w->diverged_calls == 0) {
        float v;
        ck_assert_int_eq(te_tensor_read_f32(r->outputs[0], 0, 1, &v), TE_OK);
        te_set(r->outputs[0], 0, v + 0.5f); /* a replay that is not the recorded one */
    }
    if (!fc2 || r->step != STOP || w->asked || w->c->back < 0)
        return;
    w->asked = true;
    if (w->c->locate) {
        char spec[64];
        snprintf(spec, sizeof spec, "scale@op=fc2/linear,step=%lld,value=2", (long long)w->c->back);
        if (!w->c->outside)
            ck_assert_int_eq(te_inject_add(spec), TE_OK);
        w->rewind_st = te_record_locate(w->c->back);
    } else {
        w->rewind_st = te_rewind(w->c->back);
    }
    snprintf(w->rewind_msg, sizeof w->rewind_msg, "%s", te_error());
    if (w->rewind_st == TE_OK)
        ck_assert(te_rewind_pending());
}

static void on_rewound(int64_t step, void *user)
{
    watch *w = user;
    w->rewound_calls++;
    w->rewound_step = step;
    w->rewound_loop_s = *w->loop_s; /* the loop's counter, put back by then */
    ck_assert_int_eq(te_step(), step);
    ck_assert(!te_rewind_fast_forward());
    w->replaying = true;
}

static void on_diverged(int64_t step, double rl, double l, uint64_t rs, uint64_t s, void *user)
{
    watch *w = user;
    if (w->diverged_calls++ == 0) {
        w->diverged_step = step;
        w->div_rec_loss = rl;
        w->div_loss = l;
        w->div_rec_sum = rs;
        w->div_sum = s;
    }
}

static void on_located(const te_record_located *r, void *user)
{
    watch *w = user;
    w->located_calls++;
    w->loc = *r;
}

static te_tensor *param(const char *name, int ndim, const int64_t *shape)
{
    te_tensor *p = te_param_new(name, TE_F32, ndim, shape);
    ck_assert_msg(p != NULL, "%s", te_error());
    return p;
}

/* A whole run of STEPS steps as c says; what it saw into r, what the hook
 * saw into w. */
static void run(const cfg *c, result *r, watch *w)
{
    memset(r, 0, sizeof *r);
    *w = (watch){ .c = c, .rewound_step = -1, .diverged_step = -1 };
    ck_assert_int_eq(te_init(&(te_config){ .seed = 7, .threads = 2 }), TE_OK);
    te_dataset *d = te_dataset_blobs(320, 8, 4, 3);
    te_loader *l = te_loader_new(d, &(te_loader_opts){ .batch = 16, .shuffle = true, .workers = c->workers });
    ck_assert_msg(l != NULL, "%s", te_error());
    model m = { param("fc1.weight", te_shape(16, 8)), param("fc1.bias", te_shape(16)),
                param("fc2.weight", te_shape(4, 16)), param("fc2.bias", te_shape(4)), NULL };
    te_init_linear(m.w1, m.b1);
    te_init_linear(m.w2, m.b2);
    if (c->amp) {
        ck_assert_int_eq(te_amp_set(TE_AMP_O2, TE_BF16), TE_OK);
        ck_assert_int_eq(te_scaler_enable(NULL), TE_OK);
    }
    m.opt = te_adam_new(te_params(), te_param_count(), &(te_adam_opts){ .lr = 0.01f, .decoupled = true });
    te_graph *g = te_graph_new(train_step, &m,
                               &(te_graph_opts){ .mode = c->graph ? TE_MODE_GRAPH : TE_MODE_EAGER,
                                                 .n_inputs = 2, .n_outputs = 1 });
    ck_assert(g != NULL);

    struct { int64_t s; double loss_sum; } loop = { 0, 0 };
    int64_t runs = 0; /* steps run, replays included: host state outside the engine, not registered */
    w->loop_s = &loop.s;
    if (c->participate)
        ck_assert_int_ge(te_record_host("loop", &loop, sizeof loop), 0);
    ck_assert_int_eq(te_record_start(&(te_record_opts){ .every = 2, .keep = c->keep, .op_sums = c->locate }), TE_OK);
    int h = te_hook_add(&(te_hooks){ .op_end = on_op, .rewound = on_rewound, .diverged = on_diverged,
                                     .located = on_located },
                        w);
    ck_assert_int_ge(h, 0);

    for (loop.s = 0; loop.s < STEPS || te_rewind_pending(); loop.s++) {
        te_step_begin();
        ck_assert_int_eq(te_step(), loop.s);
        te_tensor *x, *y, *out[1] = { NULL };
        te_status st = te_loader_next(l, &x, &y);
        runs++;
        if (st == TE_OK && c->outside)
            te_set(x, 0, (float)runs);
        if (st == TE_OK)
            st = c->graph ? te_graph_run(g, (te_tensor *[]){ x, y }, out) : train_step(&m, (te_tensor *[]){ x, y }, out);
        const float loss = st == TE_OK ? te_item(out[0]) : NAN;
        te_step_end();
        if (st == TE_ERR_REWOUND) {
            r->rewound_status++;
            continue;
        }
        ck_assert_msg(st == TE_OK, "step %lld: %s", (long long)loop.s, te_error());
        ck_assert(loop.s < 64);
        if (!r->seen[loop.s]) {
            r->seen[loop.s] = true;
            r->first[loop.s] = loss;
        } else {
            r->replay[loop.s] = loss;
            r->replayed++;
        }
        loop.loss_sum += loss;
    }
    r->loss_sum = loop.loss_sum;
    te_hook_remove(h);
    r->n_params = 0;
    for (int i = 0; i < te_param_count(); i++)
        r->n_params += te_params()[i]->numel;
    r->params = malloc((size_t)r->n_params * sizeof *r->params);
    ck_assert(r->params != NULL);
    for (int i = 0, at = 0; i < te_param_count(); at += (int)te_params()[i]->numel, i++)
        ck_assert_int_eq(te_tensor_read_f32(te_params()[i], 0, te_params()[i]->numel, r->params + at), TE_OK);
    te_graph_free(g);
    te_optim_free(m.opt);
    te_loader_free(l);
    te_dataset_free(d);
}

static bool same_float(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* A run that rewinds from STOP to STOP-3 against one that never does. */
static void rewind_case(bool graph, int workers, bool amp)
{
    cfg ref_c = { .graph = graph, .workers = workers, .amp = amp, .participate = true, .back = -1, .perturb = -1 };
    cfg c = ref_c;
    c.back = STOP - 3;
    result ref, got;
    watch wr, w;
    run(&ref_c, &ref, &wr);
    run(&c, &got, &w);

    ck_assert_msg(w.rewind_st == TE_OK, "%s", w.rewind_msg);
    ck_assert_int_eq(got.rewound_status, 1);       /* step STOP unwound once */
    ck_assert_int_eq(w.rewound_calls, 1);
    ck_assert_int_eq(w.rewound_step, STOP - 3);
    ck_assert_int_eq(w.rewound_loop_s, STOP - 3);  /* the host region went back */
    ck_assert_int_eq(w.silent_ops, 0);             /* the step before the target ran silently */
    ck_assert_int_eq(w.diverged_calls, 0);
    /* STOP-4 (the snapshot) to STOP-1 ran again; STOP ran once, whole. */
    ck_assert_int_eq(got.replayed, 3 + 1);
    for (int s = STOP - 4; s < STOP; s++)
        ck_assert_msg(same_float(got.first[s], got.replay[s]), "step %d: %.9g recorded, %.9g replayed", s,
                      got.first[s], got.replay[s]);
    for (int s = 0; s < STEPS; s++) {
        ck_assert_msg(same_float(got.first[s], ref.first[s]), "step %d: %.9g, never rewound %.9g", s, got.first[s],
                      ref.first[s]);
        double rl;
        ck_assert_int_eq(te_record_step_info(s, &rl, NULL), TE_OK);
        ck_assert_msg(rl == (double)got.first[s], "step %d: recorded loss %.17g, the loop's %.9g", s, rl,
                      got.first[s]);
    }
    ck_assert_int_eq(got.n_params, ref.n_params);
    ck_assert_msg(memcmp(got.params, ref.params, (size_t)ref.n_params * sizeof(float)) == 0,
                  "the final parameters differ from the run that never rewound");
    /* the loop's running sum went back with its region: the same sum */
    ck_assert_msg(memcmp(&got.loss_sum, &ref.loss_sum, sizeof(double)) == 0, "loss sum %.17g, never rewound %.17g",
                  got.loss_sum, ref.loss_sum);
    free(ref.params);
    free(got.params);
}

START_TEST(test_rewind_eager) { rewind_case(false, 0, false); }
END_TEST

START_TEST(test_rewind_eager_workers) { rewind_case(false, 2, false); }
END_TEST

START_TEST(test_rewind_graph) { rewind_case(true, 0, false); }
END_TEST

START_TEST(test_rewind_graph_workers) { rewind_case(true, 3, false); }
END_TEST

START_TEST(test_rewind_amp) { rewind_case(false, 0, true); }
END_TEST

START_TEST(test_rewind_graph_amp) { rewind_case(true, 2, true); }
END_TEST

/* The checksum is of the parameters: a run's checksums match a second
 * run's, and change from step to step. */
START_TEST(test_checksums)
{
    cfg c = { .participate = true, .back = -1, .perturb = -1 };
    result a, b;
    watch w;
    uint64_t sa[STEPS], sb[STEPS];
    double la[STEPS], lb[STEPS];
    run(&c, &a, &w);
    for (int s = 0; s < STEPS; s++)
        ck_assert_int_eq(te_record_step_info(s, &la[s], &sa[s]), TE_OK);
    run(&c, &b, &w);
    for (int s = 0; s < STEPS; s++) {
        ck_assert_int_eq(te_record_step_info(s, &lb[s], &sb[s]), TE_OK);
        ck_assert(sa[s] == sb[s] && la[s] == lb[s]);
        if (s)
            ck_assert(sa[s] != sa[s - 1]);
    }
    /* snapshots of steps 0, 2, ... 12 (keep's default is more) */
    te_record_entry e[16];
    ck_assert_int_eq(te_record_list(e, 16), 7);
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(e[i].step, 2 * i);
        ck_assert_uint_gt(e[i].bytes, sizeof(float) * 16 * 8); /* parameters, moments, the loop's region */
    }
    tu_assert_error(te_record_step_info(STEPS + 5, NULL, NULL), "step 19 was not recorded: the recorded steps are 0 to 13");
    free(a.params);
    free(b.params);
}
END_TEST

START_TEST(test_rewind_past_oldest)
{
    cfg c = { .participate = true, .keep = 2, .back = 3, .perturb = -1 };
    result r;
    watch w;
    run(&c, &r, &w);
    ck_assert_int_eq(w.rewind_st, TE_ERR_ARG);
    ck_assert_str_eq(w.rewind_msg, "rewind 3: no snapshot at or before step 3; the oldest step it can reach is 8 "
                                   "(a snapshot every 2 steps, the last 2 kept)");
    ck_assert_int_eq(r.rewound_status, 0); /* nothing unwound: the run went on */
    ck_assert_int_eq(w.rewound_calls, 0);
    ck_assert_int_eq(r.replayed, 0);
    te_record_entry e[4];
    ck_assert_int_eq(te_record_list(e, 4), 2);
    ck_assert_int_eq(e[0].step, 10);
    ck_assert_int_eq(e[1].step, 12);
    free(r.params);
}
END_TEST

START_TEST(test_rewind_not_taking_part)
{
    cfg c = { .participate = false, .back = STOP - 3, .perturb = -1 };
    result r;
    watch w;
    run(&c, &r, &w);
    ck_assert_int_eq(w.rewind_st, TE_ERR_STATE);
    ck_assert_str_eq(w.rewind_msg,
                     "rewind 7: this program does not take part in time travel: the engine cannot put back its "
                     "loop's own state (step counter, schedule, running sums); register that state with "
                     "te_record_host(), or call te_record_participate(true) if the loop keeps none "
                     "(docs/engine.md \"Time travel\")");
    ck_assert_int_eq(r.rewound_status, 0);
    free(r.params);
}
END_TEST

/* A replay changed on purpose at step STOP-2: diverged names that step
 * with both losses and checksums. */
START_TEST(test_diverged)
{
    cfg c = { .participate = true, .back = STOP - 3, .perturb = STOP - 2 };
    result r;
    watch w;
    run(&c, &r, &w);
    ck_assert_int_eq(w.rewound_calls, 1);
    ck_assert_int_eq(w.diverged_calls, 1); /* the steps after it are a new history */
    ck_assert_int_eq(w.diverged_step, STOP - 2);
    ck_assert(w.div_rec_loss == (double)r.first[STOP - 2]);
    ck_assert(w.div_loss == (double)r.replay[STOP - 2]);
    ck_assert(w.div_loss != w.div_rec_loss);
    ck_assert(w.div_sum != w.div_rec_sum);
    ck_assert(same_float(r.first[STOP - 3], r.replay[STOP - 3])); /* the step before was exact */
    /* the record keeps what was recorded at the diverged step, the new run after it */
    double l;
    ck_assert_int_eq(te_record_step_info(STOP - 2, &l, NULL), TE_OK);
    ck_assert(l == (double)r.first[STOP - 2]);
    ck_assert_int_eq(te_record_step_info(STOP - 1, &l, NULL), TE_OK);
    ck_assert(l == (double)r.replay[STOP - 1]);
    free(r.params);
}
END_TEST

/* An injection that the recording did not have: locate replays step 6
 * twice, the replays agree with each other, and part from the recording's
 * per-op checksums at fc2/linear. */
START_TEST(test_locate)
{
    cfg c = { .participate = true, .back = 6, .perturb = -1, .locate = true };
    result r;
    watch w;
    run(&c, &r, &w);
    ck_assert_msg(w.rewind_st == TE_OK, "%s", w.rewind_msg);
    ck_assert_int_eq(w.located_calls, 1);
    ck_assert_int_eq(w.rewound_calls, 0);
    ck_assert_int_eq(w.loc.step, 6);
    ck_assert(w.loc.replays_agree);
    ck_assert(!w.loc.matches_recorded);
    ck_assert_msg(w.loc.found, "%s", w.loc.cause);
    ck_assert_str_eq(w.loc.op, "fc2/linear");
    ck_assert_str_eq(w.loc.type, "Linear");
    ck_assert_int_eq(w.loc.phase, TE_PHASE_FORWARD);
    ck_assert_int_eq(w.loc.output, 0);
    ck_assert_msg(strstr(w.loc.cause, "part from the recording of step 6 at fc2/linear") != NULL, "%s", w.loc.cause);
    te_record_located got;
    ck_assert(te_record_located_get(&got));
    ck_assert_str_eq(got.op, "fc2/linear");
    free(r.params);
}
END_TEST

/* An input read from outside the engine (a count of the steps run, which
 * no rewind puts back): each replay of step 6 feeds another value, the two
 * replays part at the first op that reads it, and the cause says so. */
START_TEST(test_locate_replays_disagree)
{
    cfg c = { .participate = true, .back = 6, .perturb = -1, .locate = true, .outside = true };
    result r;
    watch w;
    run(&c, &r, &w);
    ck_assert_msg(w.rewind_st == TE_OK, "%s", w.rewind_msg);
    ck_assert_int_eq(w.located_calls, 1);
    ck_assert_int_eq(w.loc.step, 6);
    ck_assert(!w.loc.replays_agree);
    ck_assert(!w.loc.matches_recorded);
    ck_assert_msg(w.loc.found, "%s", w.loc.cause);
    ck_assert_str_eq(w.loc.op, "fc1/linear");
    ck_assert_str_eq(w.loc.type, "Linear");
    ck_assert_int_eq(w.loc.phase, TE_PHASE_FORWARD);
    ck_assert_int_eq(w.loc.output, 0);
    ck_assert_msg(strstr(w.loc.cause, "two replays of step 6 from the same state part at fc1/linear") != NULL, "%s",
                  w.loc.cause);
    ck_assert_msg(strstr(w.loc.cause, "reads an input from outside the engine") != NULL, "%s", w.loc.cause);
    free(r.params);
}
END_TEST

START_TEST(test_errors)
{
    ck_assert_str_eq(te_status_str(TE_ERR_REWOUND), "step unwound by a rewind");
    te_record_participate(true);
    tu_assert_error(te_rewind(0), "rewind 0: nothing is recorded");
    ck_assert_int_eq(te_record_start(&(te_record_opts){ .every = -1 }), TE_ERR_ARG);
    ck_assert_int_eq(te_record_start(NULL), TE_OK);
    te_record_opts o;
    te_record_opts_get(&o);
    ck_assert_int_eq(o.every, 0); /* the default's, stretched */
    ck_assert_int_eq(o.keep, TE_RECORD_KEEP);
    te_record_pace p;
    te_record_pace_get(&p);
    ck_assert_int_eq(p.every, TE_RECORD_EVERY);
    ck_assert_int_eq(p.stretch, 1);
    tu_assert_error(te_rewind(0), "rewind 0: no snapshot yet");
    ck_assert_int_eq(te_record_host("x", NULL, 4), -1);
    te_step_begin();
    te_step_end();
    tu_assert_error(te_rewind(5), "rewind 5: step 5 has not run yet (the current step is 0)");
    te_record_stop();
    ck_assert(!te_record_active());
}
END_TEST

/* The first sample's features of the next batch. */
static void next_first(te_loader *l, float *out)
{
    te_tensor *x, *y;
    ck_assert_int_eq(te_loader_next(l, &x, &y), TE_OK);
    ck_assert_int_eq(te_tensor_read_f32(x, 0, 4, out), TE_OK);
    te_tape_reset();
}

/* te_loader_seek, forward and back, over an epoch's end, with and without
 * workers: the next batch is the one a loader that never moved hands out
 * at that position. */
START_TEST(test_loader_seek)
{
    te_dataset *d = te_dataset_blobs(40, 4, 3, 5);
    ck_assert_ptr_nonnull(d);
    float ref[12][4], got[4];
    te_loader *a = te_loader_new(d, &(te_loader_opts){ .batch = 8, .shuffle = true, .drop_remainder = true });
    for (int b = 0; b < 12; b++) /* 5 batches an epoch: epochs 0, 1 and 2 */
        next_first(a, ref[b]);
    ck_assert_int_eq(te_loader_position(a), 12);
    te_loader_free(a);
    for (int workers = 0; workers <= 3; workers += 3) {
        te_loader *l = te_loader_new(d, &(te_loader_opts){ .batch = 8, .shuffle = true, .drop_remainder = true,
                                                           .workers = workers });
        const int64_t to[] = { 7, 2, 11, 0, 6 };
        for (int i = 0; i < 5; i++) {
            ck_assert_int_eq(te_loader_seek(l, to[i]), TE_OK);
            ck_assert_int_eq(te_loader_position(l), to[i]);
            ck_assert_int_eq(te_loader_epoch(l), to[i] / 5);
            next_first(l, got);
            ck_assert_mem_eq(got, ref[to[i]], sizeof got);
            ck_assert_int_eq(te_loader_position(l), to[i] + 1);
        }
        tu_assert_error(te_loader_seek(l, -1), "te_loader_seek: the position is negative");
        ck_assert_int_eq(te_loader_position(l), 7);
        te_loader_free(l);
    }
    tu_assert_error(te_loader_seek(NULL, 0), "te_loader_seek: the loader is NULL");
    te_dataset_free(d);
}
END_TEST

/* Buffers: listed in the order made, in every snapshot, out of the list
 * when freed, a name once; te_shutdown frees the rest (LSan would say). */
/* The default interval: 20 steps while a snapshot is cheap beside them (a
 * few bytes of state against 20 ms steps), stretched to 20 x 16 when it is
 * not (64 MB of state against steps of next to nothing). Wall times, with
 * margins of 50x and more either way: a snapshot of 16 bytes (some 30 us)
 * would have to take 2 ms to stretch; against the 2 ms steps this test had
 * first, the threshold was 0.2 ms, which one under ASan on a loaded machine
 * reached. */
static void default_pace(int64_t numel, unsigned step_us, int steps, int want_stretch, const int64_t *want,
                         int n_want)
{
    te_tensor *big = te_buffer_new("state", TE_F32, te_shape(numel));
    ck_assert(big != NULL);
    te_fill(big, 1.0f);
    te_record_participate(true);
    ck_assert_int_eq(te_record_start(NULL), TE_OK);
    for (int s = 0; s < steps; s++) {
        te_step_begin();
        if (step_us)
            usleep(step_us);
        te_step_end();
    }
    te_record_pace p;
    te_record_pace_get(&p);
    ck_assert_msg(p.stretch == want_stretch, "stretch %d: a snapshot took %.3f ms, a step %.3f ms", p.stretch,
                  p.snap_ms, p.step_ms);
    ck_assert_int_eq(p.every, TE_RECORD_EVERY * want_stretch);
    ck_assert(p.snap_ms > 0 && p.step_ms > 0);
    te_record_entry e[8];
    ck_assert_int_eq(te_record_list(e, 8), n_want);
    for (int i = 0; i < n_want; i++)
        ck_assert_int_eq(e[i].step, want[i]);
    te_record_stop();
    te_tensor_free(big);
}

START_TEST(test_default_interval)
{
    default_pace(4, 20000, 50, 1, (int64_t[]){ 0, 20, 40 }, 3);
}
END_TEST

START_TEST(test_default_interval_stretched)
{
    default_pace((int64_t)16 << 20, 0, 50, TE_RECORD_STRETCH_MAX, (int64_t[]){ 0 }, 1);
}
END_TEST

START_TEST(test_buffers)
{
    ck_assert_int_eq(te_buffer_count(), 0);
    te_tensor *m = te_buffer_new("bn1.running_mean", TE_F32, te_shape(3));
    te_tensor *v = te_buffer_new("bn1.running_var", TE_F32, te_shape(3));
    te_tensor *n = te_buffer_new("bn1.num_batches", TE_F32, te_shape(1));
    ck_assert(m && v && n);
    ck_assert_str_eq(v->name, "bn1.running_var");
    ck_assert_float_eq(te_get(v, 2), 0.0f);
    ck_assert(!v->requires_grad);
    ck_assert_int_eq(te_param_count(), 0);
    ck_assert_ptr_null(te_buffer_new("bn1.running_var", TE_F32, te_shape(3)));
    tu_assert_error(te_error_code(), "buffer bn1.running_var: a buffer of that name exists already");
    ck_assert_ptr_null(te_buffer_new("", TE_F32, te_shape(3)));
    ck_assert_int_eq(te_buffer_count(), 3);
    te_tensor_free(v);
    ck_assert_int_eq(te_buffer_count(), 2);
    ck_assert_ptr_eq(te_buffers()[0], m);
    ck_assert_ptr_eq(te_buffers()[1], n);
    /* a rewind puts a buffer back: it is in the snapshot */
    te_record_participate(true);
    ck_assert_int_eq(te_record_start(&(te_record_opts){ .every = 1 }), TE_OK);
    te_step_begin();
    te_fill(m, 2.5f);
    te_step_end();
    te_step_begin();
    te_fill(m, 7.0f);
    te_step_end();
    ck_assert_int_eq(te_rewind(0), TE_OK);
    te_step_begin();
    ck_assert_float_eq(te_get(m, 1), 0.0f);
    te_step_end();
    te_record_stop();
}
END_TEST

/* te_amp_keep_f32: a kept parameter stays f32 at O2 while the others are
 * lowered, with its value unrounded; O3 lowers it all the same. */
START_TEST(test_amp_keep_f32)
{
    te_tensor *g = te_param_new("bn.weight", TE_F32, te_shape(2));
    te_tensor *w = te_param_new("fc.weight", TE_F32, te_shape(2));
    const float x = 1.0009765625f + 0x1p-20f; /* not a bf16 */
    te_fill(g, x);
    te_fill(w, x);
    ck_assert_int_eq(te_amp_keep_f32(g), TE_OK);
    ck_assert_int_eq(te_amp_keep_f32(NULL), TE_OK);
    ck_assert_int_eq(te_amp_set(TE_AMP_O2, TE_BF16), TE_OK);
    ck_assert_int_eq(g->dtype, TE_F32);
    ck_assert_int_eq(w->dtype, TE_BF16);
    ck_assert_float_eq(te_get(g, 0), x);
    ck_assert_float_ne(te_get(w, 0), x);
    ck_assert_int_eq(te_amp_set(TE_AMP_O3, TE_BF16), TE_OK);
    ck_assert_int_eq(g->dtype, TE_BF16);
}
END_TEST

/* The CPU's checksum (the reference the device's equals): its word loop
 * is checksum.h's definition read byte by byte, whatever the alignment;
 * any flipped bit and the length change it. */
/* The parameters' checksum the optimizer's update takes while the strip is
 * in cache (te_update_args.sum) is the one a fresh read gives: against
 * checksum.h's chaining over the parameters' bytes, and against the same
 * run where a hook rewrites each parameter after its update (a debugger's
 * set: the engine then reads it again). Odd sizes and more than one strip. */
static void rewrite_param(const te_op_record *r, void *user)
{
    (void)user;
    if (r->n_outputs > 0 && r->outputs[0] && strncmp(r->name, "update/", 7) == 0)
        te_set(r->outputs[0], 0, te_get(r->outputs[0], 0));
}

static void sums_of_run(bool rewrite, uint64_t *sums, uint64_t *fresh)
{
    tu_teardown();
    tu_setup();
    te_tensor *w1 = te_param_new("w1", TE_F32, te_shape(21)), *w2 = te_param_new("w2", TE_F32, te_shape(2 * 4096 + 5));
    te_init_uniform(w1, -1.0f, 1.0f);
    te_init_uniform(w2, -1.0f, 1.0f);
    te_optim *opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.01f, .momentum = 0.9f });
    te_record_participate(true);
    ck_assert_int_eq(te_record_start(&(te_record_opts){ .every = 1, .keep = 4, .budget_bytes = 1 << 24 }), TE_OK);
    const int h = rewrite ? te_hook_add(&(te_hooks){ .op_end = rewrite_param }, NULL) : -1;
    for (int s = 0; s < 3; s++) {
        te_step_begin();
        te_tensor *loss = te_add(te_sum(te_mul(w1, w1), TE_ALL, false), te_sum(te_mul(w2, w2), TE_ALL, false));
        ck_assert_int_eq(te_backward(loss), TE_OK);
        ck_assert_int_eq(te_optim_step(opt), TE_OK);
        te_step_end();
        ck_assert_int_eq(te_record_step_info(s, NULL, &sums[s]), TE_OK);
        uint64_t x = 0x7464626772656321ull;
        for (int i = 0; i < te_param_count(); i++) {
            const te_tensor *p = te_params()[i];
            x ^= (uint64_t)p->dtype << 56 ^ (uint64_t)p->numel;
            x = te_mix64(x + te_checksum_host(p->data, p->nbytes));
        }
        fresh[s] = x;
    }
    if (h >= 0)
        te_hook_remove(h);
    te_record_stop();
    te_optim_free(opt);
}

START_TEST(test_update_takes_the_checksum)
{
    uint64_t a[3], fa[3], b[3], fb[3];
    sums_of_run(false, a, fa);
    sums_of_run(true, b, fb);
    for (int s = 0; s < 3; s++) {
        ck_assert_msg(a[s] == fa[s], "step %d: the update's checksum %016llx, a fresh read %016llx", s,
                      (unsigned long long)a[s], (unsigned long long)fa[s]);
        ck_assert_msg(b[s] == fb[s] && b[s] == a[s], "step %d: with the parameters rewritten %016llx", s,
                      (unsigned long long)b[s]);
    }
}
END_TEST

START_TEST(test_checksum_host)
{
    unsigned char buf[301];
    for (int i = 0; i < 301; i++)
        buf[i] = (unsigned char)(i * 37 + 11);
    for (size_t n = 0; n <= 290; n += (n < 40 ? 1 : 61))
        for (size_t off = 0; off < 4; off++) {
            uint64_t sum = 0;
            for (size_t i = 0; i < te_sum_words(n); i++)
                sum += te_sum_term(i, te_sum_word(buf + off, n, i));
            ck_assert_msg(te_checksum_host(buf + off, n) == te_sum_final(sum, n), "n %zu offset %zu", n, off);
        }
    const uint64_t h = te_checksum_host(buf, 300);
    for (int i = 0; i < 300; i += 7)
        for (int b = 0; b < 8; b += 3) {
            buf[i] ^= (unsigned char)(1u << b);
            ck_assert_msg(te_checksum_host(buf, 300) != h, "byte %d bit %d", i, b);
            buf[i] ^= (unsigned char)(1u << b);
        }
    ck_assert(te_checksum_host(buf, 300) == h);
    buf[300] = 0;
    ck_assert(te_checksum_host(buf, 301) != h); /* a zero byte more: another length */
    /* words swapped: the index is in each term */
    uint64_t w[2] = { 1, 2 }, v[2] = { 2, 1 };
    ck_assert(te_checksum_host(w, 16) != te_checksum_host(v, 16));
    ck_assert_ptr_eq((void *)te_backend_cpu.checksum, (void *)te_checksum_host);
}
END_TEST

Suite *suite_record(void)
{
    Suite *s = suite_create("record");
    TCase *tc = tcase_create("record");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rewind_eager);
    tcase_add_test(tc, test_rewind_eager_workers);
    tcase_add_test(tc, test_rewind_graph);
    tcase_add_test(tc, test_rewind_graph_workers);
    tcase_add_test(tc, test_rewind_amp);
    tcase_add_test(tc, test_rewind_graph_amp);
    tcase_add_test(tc, test_checksums);
    tcase_add_test(tc, test_rewind_past_oldest);
    tcase_add_test(tc, test_rewind_not_taking_part);
    tcase_add_test(tc, test_diverged);
    tcase_add_test(tc, test_locate);
    tcase_add_test(tc, test_locate_replays_disagree);
    tcase_add_test(tc, test_default_interval);
    tcase_add_test(tc, test_default_interval_stretched);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_loader_seek);
    tcase_add_test(tc, test_buffers);
    tcase_add_test(tc, test_amp_keep_f32);
    tcase_add_test(tc, test_checksum_host);
    tcase_add_test(tc, test_update_takes_the_checksum);
    suite_add_tcase(s, tc);
    return s;
}
