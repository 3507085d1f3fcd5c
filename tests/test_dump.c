/*
 * test_dump.c — dump sessions end to end: a small training step dumped
 * under several specs, read back with the reader and compared bit for bit
 * with the tensors the engine's hooks saw; selection by each spec key;
 * statistics mode; the size cap; eager and graph dumps alike; a write error;
 * copies off a device queued by training and waited for by the writer.
 */
#include "dump.h"
#include "h5file.h"
#include "suites.h"
#include "te_internal.h"
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a step to dump ------------------------------------------------------------- */

typedef struct {
    te_tensor *w1, *b1, *w2;
    te_optim *opt;
} net;

static te_status step_fn(void *ctx, te_tensor *const *in, te_tensor **out)
{
    net *n = ctx;
    te_scope_push("fc1");
    te_tensor *h = te_relu(te_linear(in[0], n->w1, n->b1));
    te_scope_pop();
    te_scope_push("fc2");
    out[0] = te_mse(te_linear(h, n->w2, NULL), in[1]);
    te_scope_pop();
    te_status st = te_backward(out[0]);
    return st == TE_OK ? te_optim_step(n->opt) : st;
}

/* What the hooks saw: copies of every op's tensors, by dataset path. */
#define MAX_SEEN 256
typedef struct {
    char path[DUMP_PATH_MAX];
    int64_t step;
    te_dtype dtype;
    size_t bytes;
    void *data;
} seen_tensor;

static seen_tensor seen[MAX_SEEN];
static int n_seen;

static void see(const te_op_record *r, void *user)
{
    (void)user;
    for (int io = 0; io < 2; io++) {
        int n = io ? r->n_outputs : r->n_inputs;
        for (int k = 0; k < n && n_seen < MAX_SEEN; k++) {
            const te_tensor *t = io ? r->outputs[k] : r->inputs[k];
            if (!t || !t->data)
                continue;
            seen_tensor *s = &seen[n_seen++];
            ck_assert(dump_tensor_path(r->name, io ? DUMP_OUT : DUMP_IN, k, s->path, sizeof s->path));
            s->step = r->step;
            s->dtype = t->dtype;
            s->bytes = t->nbytes;
            s->data = malloc(t->nbytes);
            ck_assert_int_eq(te_tensor_read(t, 0, t->numel, s->data), TE_OK);
        }
    }
}

static char dir[128];

static void setup(void)
{
    tu_setup();
    snprintf(dir, sizeof dir, "/tmp/tdbg-dump-XXXXXX");
    ck_assert(mkdtemp(dir) != NULL);
    n_seen = 0;
}

static void teardown(void)
{
    for (int i = 0; i < n_seen; i++)
        free(seen[i].data);
    n_seen = 0;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert(system(cmd) == 0);
    tu_teardown();
}

static int64_t burst_before_stop; /* bytes train() allocates and frees before dump_stop */

/* Trains `steps` steps in mode with spec text (dir prepended) and the
 * recording hook; returns after the dump is flushed and stopped. */
static void train(const char *spec_text, te_mode mode, int steps)
{
    net n = { .w1 = te_param_new("fc1.weight", TE_F32, te_shape(8, 6)),
              .b1 = te_param_new("fc1.bias", TE_F32, te_shape(8)),
              .w2 = te_param_new("fc2.weight", TE_F32, te_shape(3, 8)) };
    te_init_linear(n.w1, n.b1);
    te_init_linear(n.w2, NULL);
    n.opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.1f, .momentum = 0.9f });
    char text[1024], err[1024];
    snprintf(text, sizeof text, "dir=%s;%s", dir, spec_text);
    dump_spec spec;
    ck_assert_msg(dump_spec_parse(text, &spec, err, sizeof err), "%s", err);
    dump_session *d = dump_start(&spec, &(dump_run_info){ .mode = mode, .command_line = "test" }, err,
                                 sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    int h = te_hook_add(&(te_hooks){ .op_end = see }, NULL);
    te_graph *g = te_graph_new(step_fn, &n, &(te_graph_opts){ .mode = mode, .n_inputs = 2, .n_outputs = 1 });
    for (int s = 0; s < steps; s++) {
        te_tensor *in[2] = { te_tensor_new(TE_F32, te_shape(4, 6)), te_tensor_new(TE_F32, te_shape(4, 3)) }, *out[1];
        for (int64_t i = 0; i < in[0]->numel; i++)
            te_set(in[0], i, sinf((float)(i + s)));
        for (int64_t i = 0; i < in[1]->numel; i++)
            te_set(in[1], i, cosf((float)(2 * i + s)));
        te_step_begin();
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s", te_error());
        te_step_end();
    }
    te_graph_free(g);
    te_hook_remove(h);
    if (burst_before_stop) { /* a peak after the last step run.h5 was written with */
        te_tensor *b = te_tensor_persistent(TE_F32, te_shape(burst_before_stop / 4));
        ck_assert_ptr_nonnull(b);
        te_tensor_free(b);
    }
    dump_stop(d);
    te_optim_free(n.opt);
}

static const seen_tensor *find_seen(int64_t step, const char *path)
{
    for (int i = 0; i < n_seen; i++)
        if (seen[i].step == step && strcmp(seen[i].path, path) == 0)
            return &seen[i];
    return NULL;
}

static dump_step_reader *open_step(int64_t step)
{
    char path[256], err[1024];
    snprintf(path, sizeof path, "%s/step-%08lld.h5", dir, (long long)step);
    dump_step_reader *r = dump_step_open(path, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    return r;
}

/* Every dumped tensor equals, byte for byte, what the hook saw. */
static int check_against_hooks(int64_t step)
{
    dump_step_reader *r = open_step(step);
    char err[1024];
    for (int i = 0; i < dump_step_count(r); i++) {
        const dump_tensor_info *ti = dump_step_tensor(r, i);
        const seen_tensor *s = find_seen(step, ti->path);
        ck_assert_msg(s, "step %lld: %s was dumped but the hooks never saw it", (long long)step, ti->path);
        ck_assert_msg(s->bytes == ti->nbytes && s->dtype == ti->dtype, "%s: %zu bytes %s, hook %zu %s", ti->path,
                      ti->nbytes, te_dtype_name(ti->dtype), s->bytes, te_dtype_name(s->dtype));
        void *buf = malloc(ti->nbytes ? ti->nbytes : 1);
        ck_assert_msg(dump_step_read_raw(r, i, buf, err, sizeof err), "%s", err);
        ck_assert_msg(memcmp(buf, s->data, s->bytes) == 0, "step %lld: %s differs from the engine's tensor",
                      (long long)step, ti->path);
        free(buf);
    }
    int n = dump_step_count(r);
    dump_step_close(r);
    return n;
}

/* run.h5's peak_bytes: the allocator's peak, the one at the end of the
 * run when it rose after run.h5 was first written (with the first step). */
START_TEST(test_run_peak_memory)
{
    burst_before_stop = 8 << 20;
    train("io=outputs;phase=forward", TE_MODE_EAGER, 2);
    burst_before_stop = 0;
    const uint64_t peak = te_mem_stats_get().peak;
    dump_run_meta m;
    dump_op_row *ops;
    int n_ops;
    char err[1024];
    ck_assert_msg(dump_run_read(dir, &m, &ops, &n_ops, err, sizeof err), "%s", err);
    free(ops);
    ck_assert_msg(m.peak_bytes >= (8u << 20), "peak_bytes %llu below the 8 MiB burst", (unsigned long long)m.peak_bytes);
    ck_assert_uint_eq(m.peak_bytes, peak);
}
END_TEST

START_TEST(test_round_trip_every_tensor)
{
    train("io=both;phase=forward,backward,update", TE_MODE_EAGER, 3);
    for (int s = 0; s < 3; s++)
        ck_assert_int_gt(check_against_hooks(s), 20);
    dump_run_meta m;
    dump_op_row *ops;
    int n_ops;
    char err[1024];
    ck_assert_msg(dump_run_read(dir, &m, &ops, &n_ops, err, sizeof err), "%s", err);
    ck_assert_str_eq(m.command_line, "test");
    ck_assert_int_eq(m.mode, TE_MODE_EAGER);
    ck_assert_str_eq(ops[0].name, "fc1/linear");
    ck_assert_str_eq(ops[0].type, "Linear");
    ck_assert_str_eq(ops[0].outputs, "fc1/linear:out0");
    free(ops);
    dump_problems p;
    ck_assert_msg(dump_verify(dir, &p) == 0, "verify: %s", p.n ? p.msg[0] : "");
    dump_problems_free(&p);
}
END_TEST

START_TEST(test_graph_mode_dumps_the_same)
{
    /* Graph mode keeps the selected tensors visible under their eager names. */
    train("ops=fc1/*;io=outputs", TE_MODE_GRAPH, 2);
    dump_step_reader *r = open_step(1);
    ck_assert_int_eq(dump_step_count(r), 2); /* fc1/linear:out0 and fc1/relu:out0 */
    ck_assert(dump_step_find(r, "/fc1/linear/out0") >= 0 && dump_step_find(r, "/fc1/relu/out0") >= 0);
    dump_step_close(r);
    check_against_hooks(1);
}
END_TEST

START_TEST(test_selection)
{
    train("ops=type:Relu,fc2/*;steps=1|3-4;io=inputs;phase=forward", TE_MODE_EAGER, 6);
    dump_step_entry *e;
    char err[1024];
    int n = dump_run_list(dir, &e, err, sizeof err);
    ck_assert_int_eq(n, 3);
    ck_assert(e[0].step == 1 && e[1].step == 3 && e[2].step == 4 && e[0].complete);
    free(e);
    dump_step_reader *r = open_step(3);
    for (int i = 0; i < dump_step_count(r); i++) {
        const dump_tensor_info *ti = dump_step_tensor(r, i);
        ck_assert_msg(ti->io == DUMP_IN && ti->phase == TE_PHASE_FORWARD &&
                      (strcmp(ti->op_type, "Relu") == 0 || strncmp(ti->op, "fc2/", 4) == 0),
                      "%s selected", ti->path);
    }
    ck_assert(dump_step_find(r, "/fc1/relu/in0") >= 0 && dump_step_find(r, "/fc2/linear/in1") >= 0);
    ck_assert(dump_step_find(r, "/fc1/linear/in0") < 0);
    dump_step_close(r);
    check_against_hooks(4);
}
END_TEST

START_TEST(test_params_and_grads)
{
    train("ops=nothing;phase=params,grads", TE_MODE_EAGER, 2);
    dump_step_reader *r = open_step(1);
    ck_assert_int_eq(dump_step_count(r), 6); /* 3 parameters, 3 gradients */
    int i = dump_step_find(r, "/param/fc1.weight/out0");
    ck_assert(i >= 0);
    ck_assert_str_eq(dump_step_tensor(r, i)->tensor, "param:fc1.weight");
    ck_assert(dump_step_find(r, "/grad/fc2.weight/out0") >= 0);
    dump_step_close(r);
}
END_TEST

START_TEST(test_stats_mode)
{
    train("ops=fc1/relu;what=stats", TE_MODE_EAGER, 2);
    dump_step_reader *r = open_step(0);
    dump_stats_row *rows;
    char err[1024];
    int n = dump_step_stats(r, &rows, err, sizeof err);
    ck_assert_msg(n == 1, "%d rows: %s", n, err);
    const seen_tensor *s = find_seen(0, "/fc1/relu/out0");
    te_tensor *t = te_tensor_from(TE_F32, te_shape(4, 8), s->data);
    te_stats st;
    te_stats_compute(t, &st);
    ck_assert_str_eq(rows[0].op, "fc1/relu");
    ck_assert(rows[0].min == st.min && rows[0].max == st.max && rows[0].l2norm == st.l2norm &&
              rows[0].zero_frac == (double)st.zero / 32.0 && rows[0].nan == 0);
    free(rows);
    ck_assert_int_eq(dump_step_count(r), 0); /* no tensor datasets */
    dump_step_close(r);
}
END_TEST

/* Statistics of everything: every row matches a fresh pass over what the
 * hooks saw, bit for bit; the updates' rows (taken inside the optimizer's
 * loop) included, and the parameters' rows at the step's end equal them. */
START_TEST(test_stats_mode_everything)
{
    train("what=stats;io=both;phase=forward,backward,update,params,grads", TE_MODE_EAGER, 2);
    dump_step_reader *r = open_step(1);
    dump_stats_row *rows;
    char err[1024];
    int n = dump_step_stats(r, &rows, err, sizeof err);
    ck_assert_msg(n > 0, "%d rows: %s", n, err);
    int matched = 0;
    const dump_stats_row *update = NULL, *param = NULL, *grad = NULL;
    for (int i = 0; i < n; i++) {
        const dump_stats_row *row = &rows[i];
        if (strcmp(row->path, "/update/fc1.weight/out0") == 0)
            update = row;
        if (strcmp(row->path, "/param/fc1.weight/out0") == 0)
            param = row;
        if (strcmp(row->path, "/grad/fc1.weight/out0") == 0)
            grad = row;
        const seen_tensor *s = find_seen(1, row->path);
        if (!s)
            continue; /* parameters and gradients are no op's tensors */
        te_tensor *t = te_tensor_from(TE_F32, te_shape((int64_t)(s->bytes / sizeof(float))), s->data);
        te_stats st;
        te_stats_compute(t, &st);
        ck_assert_msg(row->min == st.min && row->max == st.max && row->mean == st.mean &&
                          row->std == st.std && row->l2norm == st.l2norm,
                      "%s: mean %.17g std %.17g, a fresh pass gives %.17g %.17g", row->path, row->mean,
                      row->std, st.mean, st.std);
        matched++;
    }
    ck_assert_msg(update && param && grad, "rows for fc1.weight: update %d, param %d, grad %d",
                  update != NULL, param != NULL, grad != NULL);
    ck_assert(param->mean == update->mean && param->std == update->std &&
              param->l2norm == update->l2norm);
    ck_assert_int_ge(matched, 20);
    free(rows);
    dump_step_close(r);
}
END_TEST

START_TEST(test_flight_recorder)
{
    /* keep=3: nothing is written until fc1/relu holds a NaN at step 4, then
     * steps 2, 3 and 4 (not 0 and 1). The NaN reaches the weights through the
     * update, so every later step fires again and is written too. */
    ck_assert(te_inject_add("nan@op=fc1/relu,step=4,index=5") == TE_OK);
    train("ops=fc1/relu;when=nonfinite;keep=3", TE_MODE_EAGER, 8);
    te_inject_clear();
    dump_step_entry *e;
    char err[1024];
    int n = dump_run_list(dir, &e, err, sizeof err);
    ck_assert_msg(n == 6, "%d steps: %s", n, n >= 0 ? "" : err);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(e[i].step == 2 + i && e[i].complete, "entry %d is step %lld", i, (long long)e[i].step);
    free(e);
    dump_step_reader *r = open_step(4);
    float v[32];
    ck_assert(dump_step_read_f32(r, dump_step_find(r, "/fc1/relu/out0"), v, err, sizeof err));
    ck_assert(isnan(v[5]) && !isnan(v[4]));
    dump_step_close(r);
    check_against_hooks(2);
}
END_TEST

START_TEST(test_size_cap)
{
    /* fc1/linear:out0 is 128 bytes: a 300-byte cap holds two of them. */
    train("ops=fc1/linear;max=300", TE_MODE_EAGER, 4);
    int total = 0;
    for (int s = 0; s < 4; s++) {
        dump_step_reader *r = open_step(s);
        total += dump_step_count(r);
        dump_step_close(r);
    }
    ck_assert_int_eq(total, 2);
}
END_TEST

START_TEST(test_unwritable_dir)
{
    /* A run directory that cannot be made (a file is in the way; root
     * cannot either): dumping stops with the path named, training goes on. */
    char file[256], err[1024], text[512];
    snprintf(file, sizeof file, "%s/plain-file", dir);
    FILE *f = fopen(file, "w");
    ck_assert(f != NULL);
    fclose(f);
    snprintf(text, sizeof text, "dir=%s/run", file);
    dump_spec spec;
    ck_assert(dump_spec_parse(text, &spec, err, sizeof err));
    dump_session *d = dump_start(&spec, NULL, err, sizeof err);
    ck_assert(d != NULL);
    te_step_begin();
    te_tensor *x = te_relu(te_tensor_zeros(TE_F32, te_shape(4)));
    ck_assert(x != NULL);
    te_step_end();
    te_step_begin(); /* training goes on */
    te_step_end();
    dump_flush(d);
    dump_status st = dump_status_get(d);
    ck_assert_msg(st.failed && strstr(st.error, file), "failed %d: %s", st.failed, st.error);
    ck_assert_int_eq(st.steps_written, 0);
    dump_stop(d);
}
END_TEST

/* An ops= selection that matches no op of the first step is reported in
 * the status, with the closest names; one that matches is not. */
START_TEST(test_unmatched_selection_status)
{
    static const struct {
        const char *ops;
        const char *warning; /* NULL: none */
    } cases[] = {
        { "rellu", "dump selection ops=rellu matched none of the 2 ops of step 0; "
                   "the closest op names: relu, sigmoid" },
        { "type:Relu", NULL },
        { "sig*,type:Relu", NULL },
        /* each glob on its own: one that matches hides no typo in another */
        { "sig*,nosuch", "dump selection ops=nosuch matched none of the 2 ops of step 0; "
                         "the closest op names: relu, sigmoid" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char err[1024], text[512];
        snprintf(text, sizeof text, "dir=%s/%zu;ops=%s", dir, i, cases[i].ops);
        dump_spec spec;
        ck_assert_msg(dump_spec_parse(text, &spec, err, sizeof err), "%s", err);
        dump_session *d = dump_start(&spec, NULL, err, sizeof err);
        ck_assert_msg(d != NULL, "%s", err);
        for (int step = 0; step < 2; step++) {
            te_step_begin();
            ck_assert(te_sigmoid(te_relu(te_tensor_zeros(TE_F32, te_shape(4)))) != NULL);
            te_step_end();
        }
        dump_flush(d);
        dump_status st = dump_status_get(d);
        if (cases[i].warning)
            ck_assert_str_eq(st.warning, cases[i].warning);
        else
            ck_assert_msg(st.warning[0] == '\0', "%s: %s", cases[i].ops, st.warning);
        ck_assert_int_eq(st.steps_written, 2);
        dump_stop(d);
    }
}
END_TEST

/* ---- the examples dumping, killed and starved ------------------------------------ */

static char out[1 << 16]; /* what the last command run with tu_shell printed */

/* Every complete step of dir opens and reads; returns how many there are
 * and stores the count of incomplete ones. */
static int readable_steps(const char *where, int *incomplete)
{
    dump_step_entry *e;
    char err[1024], path[512];
    int n = dump_run_list(where, &e, err, sizeof err), complete = 0;
    ck_assert_msg(n >= 0, "%s", err);
    *incomplete = 0;
    for (int i = 0; i < n; i++) {
        if (!e[i].complete) {
            (*incomplete)++;
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", where, e[i].name);
        dump_step_reader *r = dump_step_open(path, err, sizeof err);
        ck_assert_msg(r != NULL, "a completed step is damaged: %s", err);
        for (int k = 0; k < dump_step_count(r); k++) {
            float *v = malloc(dump_step_tensor(r, k)->numel * sizeof *v + 1);
            ck_assert_msg(dump_step_read_f32(r, k, v, err, sizeof err), "%s", err);
            free(v);
        }
        dump_step_close(r);
        complete++;
    }
    free(e);
    return complete;
}

START_TEST(test_backlog_at_exit)
{
    /* Training ends with steps still queued (every tensor of a wide MLP):
     * the program's exit waits for them, and every one is complete. HDF5's
     * own exit handler once ran first and cut the writer off mid-queue. */
    int st = tu_shell(out, sizeof out,
                      "'%s/examples/mlp' --batch 128 --threads 2 --steps 20 --log-every 1000 "
                      "--dump 'dir=%s;io=both;phase=forward,backward,update,params,grads' 2>&1; echo status=$?",
                      TDBG_BUILDDIR, dir);
    ck_assert_msg(st == 0 && strstr(out, "status=0") && !strstr(out, "dump stopped"), "%s", out);
    int incomplete, complete = readable_steps(dir, &incomplete);
    ck_assert_int_eq(complete, 20);
    ck_assert_int_eq(incomplete, 0);
}
END_TEST

/* The warning comes on stderr once, after the first step, for a whole
 * run; never for a selection that matches. */
START_TEST(test_unmatched_selection_warns_once)
{
    int st = tu_shell(out, sizeof out,
                      "'%s/examples/mlp' --batch 8 --steps 4 --log-every 1000 --dump 'dir=%s/a;ops=fc4/*' 2>&1 "
                      "| grep -c 'tdbg: dump warning: dump selection ops=fc4/\\* matched none of the 18 ops of step 0; "
                      "the closest op names: fc1/relu, fc2/relu, fc1/linear$'",
                      TDBG_BUILDDIR, dir);
    ck_assert_msg(st == 0 && strcmp(out, "1\n") == 0, "%s", out);
    st = tu_shell(out, sizeof out,
                  "'%s/examples/mlp' --batch 8 --steps 2 --log-every 1000 --dump 'dir=%s/b;ops=fc2/*' 2>&1",
                  TDBG_BUILDDIR, dir);
    ck_assert_msg(st == 0 && !strstr(out, "warning"), "%s", out);
}
END_TEST

START_TEST(test_kill_9)
{
    /* A completed step survives kill -9; a half-written one is a .tmp: the
     * step being built, and up to three sealed ones the syncer had not
     * renamed yet (writer.c's MAX_SEALED). */
    tu_shell(out, sizeof out,
             "'%s/examples/mlp' --hidden 256,256 --batch 64 --threads 2 --steps 1000000 --log-every 1000000 "
             "--dump 'dir=%s;io=both' >/dev/null 2>&1 & pid=$!; sleep 4; kill -9 $pid; wait $pid; echo $?",
             TDBG_BUILDDIR, dir);
    ck_assert_msg(atoi(out) == 137, "the program was not killed: %s", out);
    int incomplete, complete = readable_steps(dir, &incomplete);
    ck_assert_msg(complete >= 2, "only %d complete steps after 4 s", complete);
    ck_assert_int_le(incomplete, 4);
}
END_TEST

START_TEST(test_disk_full)
{
    /* A 4 MB tmpfs holds a few steps of this dump (about 1.2 MB each),
     * then writing fails with ENOSPC. Dumping stops with the path named,
     * training finishes, the steps written stay readable and the failed one
     * leaves no tmp file. Without the right to mount, a file-size limit below one
     * step's size stands in (SIGXFSZ ignored, as a daemon would). */
    char fs[256];
    snprintf(fs, sizeof fs, "%s/fs", dir);
    bool mounted = tu_shell(out, sizeof out,
                            "mkdir -p %s && mount -t tmpfs -o size=4m tmpfs %s 2>&1 && echo ok", fs, fs) == 0 &&
                   strstr(out, "ok");
    char run[320];
    snprintf(run, sizeof run, "%s/run", mounted ? fs : dir);
    int st = tu_shell(out, sizeof out,
                      "trap '' XFSZ; %s '%s/examples/mlp' --hidden 64,64 --batch 32 --threads 2 --steps 12 "
                      "--log-every 1000 --dump 'dir=%s;io=both' 2>&1; echo status=$?",
                      mounted ? "" : "ulimit -f 600;", TDBG_BUILDDIR, run);
    char log[sizeof out];
    memcpy(log, out, sizeof out);
    ck_assert_int_eq(st, 0);
    ck_assert_msg(strstr(log, "tdbg: dump stopped: ") && strstr(log, run), "no message naming the path:\n%s", log);
    ck_assert_msg(strstr(log, "final: loss=") && strstr(log, "status=0"), "training did not finish:\n%s", log);
    int incomplete, complete = readable_steps(run, &incomplete);
    if (mounted)
        tu_shell(out, sizeof out, "umount %s", fs);
    if (mounted)
        ck_assert_msg(complete >= 1 && complete < 12, "%d complete steps on a 4 MB disk", complete);
    ck_assert_int_eq(incomplete, 0);
}
END_TEST

/* A one-step CNN run dumped in mode ("eager" or "graph"); its /ops table
 * into *ops (free it), *n rows. */
static void cnn_op_table(const char *mode, dump_run_meta *m, dump_op_row **ops, int *n)
{
    char run[256], err[1024];
    snprintf(run, sizeof run, "%s/%s", dir, mode);
    int st = tu_shell(out, sizeof out,
                      "'%s/examples/cnn' --channels 4,8,8 --batch 4 --threads 2 --steps 1 "
                      "--train-size 16 --mode %s --dump 'dir=%s;steps=0' 2>&1",
                      TDBG_BUILDDIR, mode, run);
    ck_assert_msg(st == 0, "%s", out);
    ck_assert_msg(dump_run_read(run, m, ops, n, err, sizeof err), "%s", err);
}

/* run.h5 says which inputs an op writes in place: a batch norm's running
 * statistics in training, in eager and in graph mode alike. */
START_TEST(test_ops_list_inplace_writes)
{
    static const char *const modes[2] = { "eager", "graph" };
    for (int k = 0; k < 2; k++) {
        dump_run_meta m;
        dump_op_row *ops;
        int n, bn = 0;
        cnn_op_table(modes[k], &m, &ops, &n);
        ck_assert(m.lists_inplace);
        for (int i = 0; i < n; i++) {
            if (strcmp(ops[i].name, "conv1/bn") == 0) {
                ck_assert_str_eq(ops[i].inplace, "bn1.running_mean,bn1.running_var");
                bn++;
            } else if (strcmp(ops[i].type, "BatchNorm") != 0) {
                ck_assert_msg(ops[i].inplace[0] == '\0', "%s writes %s in place", ops[i].name,
                              ops[i].inplace);
            }
        }
        ck_assert_int_eq(bn, 1);
        free(ops);
    }
}
END_TEST

/* run.h5 lists what each backward op reads of the forward pass, by the
 * same names in eager and graph mode; forward and update ops read nothing
 * there. */
START_TEST(test_ops_list_backward_reads)
{
    static const char *const modes[2] = { "eager", "graph" };
    dump_op_row *ops[2];
    int n[2];
    for (int k = 0; k < 2; k++) {
        dump_run_meta m;
        cnn_op_table(modes[k], &m, &ops[k], &n[k]);
        ck_assert(m.lists_reads);
        int found = 0;
        for (int i = 0; i < n[k]; i++) {
            const dump_op_row *o = &ops[k][i];
            const char *want = strcmp(o->name, "grad/conv1/bn") == 0
                                   ? "conv1/conv:out0,param:bn1.weight,conv1/bn:saved0,conv1/bn:saved1"
                               : strcmp(o->name, "grad/cross_entropy") == 0
                                   ? "fc/linear:out0,batch:y,cross_entropy:saved0"
                               : strcmp(o->name, "grad/gap") == 0 || o->phase != TE_PHASE_BACKWARD ? ""
                                                                                                   : NULL;
            if (!want)
                continue;
            found += o->phase == TE_PHASE_BACKWARD;
            ck_assert_msg(strcmp(o->reads, want) == 0, "%s %s reads '%s', want '%s'", modes[k], o->name,
                          o->reads, want);
        }
        ck_assert_int_eq(found, 3);
    }
    ck_assert_int_eq(n[0], n[1]);
    for (int i = 0; i < n[0]; i++) {
        ck_assert_str_eq(ops[0][i].name, ops[1][i].name);
        ck_assert_msg(strcmp(ops[0][i].reads, ops[1][i].reads) == 0, "%s: eager reads %s, graph %s",
                      ops[0][i].name, ops[0][i].reads, ops[1][i].reads);
    }
    free(ops[0]);
    free(ops[1]);
}
END_TEST

START_TEST(test_h5py_interop)
{
    /* h5py alone (no tdbg code) reads the dump, and numpy recomputes a conv
     * and a linear op from their dumped inputs. Skipped (tdbg_skip) without them. */
    int st = tu_shell(out, sizeof out,
                      "'%s/examples/cnn' --channels 4,8,8 --batch 4 --threads 2 --steps 1 --train-size 16 "
                      "--dump 'dir=%s;ops=conv1/conv,fc/linear;io=both;steps=0' >/dev/null 2>&1 && "
                      "/usr/bin/python3 '%s/tests/interop_dump.py' %s 2>&1; echo status=$?",
                      TDBG_BUILDDIR, dir, TDBG_SRCDIR, dir);
    ck_assert_int_eq(st, 0);
    if (strstr(out, "status=77")) {
        tdbg_skip("dump", "h5py or numpy not found for /usr/bin/python3 (apt-get install python3-h5py "
                          "python3-numpy)");
        return;
    }
    ck_assert_msg(strstr(out, "interop: conv and linear agree") && strstr(out, "status=0"), "%s", out);
}
END_TEST

/* ---- copies the training thread does not wait for ------------------------------ */

/* te_tensor_read_async on the CPU: done at once (no ticket), into an aligned
 * buffer, the same bytes as te_tensor_read, for every dtype. */
START_TEST(test_read_async_equals_read)
{
    static const te_dtype dts[] = { TE_F32, TE_F16, TE_BF16, TE_I32 };
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        te_tensor *t = te_tensor_new(dts[k], te_shape(37, 29));
        for (int64_t i = 0; i < t->numel; i++)
            te_set(t, i, (float)(i % 101) * 0.37f - 11.0f);
        unsigned char *want = malloc(t->nbytes), *buf = te_host_buffer_alloc(t->nbytes);
        ck_assert_ptr_nonnull(buf);
        ck_assert_uint_eq((uintptr_t)buf % 64, 0);
        memset(buf, 0xa5, t->nbytes);
        te_copy_ticket tk;
        ck_assert_int_eq(te_tensor_read_async(t, buf, &tk), TE_OK);
        ck_assert_int_eq(tk.device, TE_DEV_CPU);
        ck_assert_ptr_null(tk.pending); /* the CPU's copy is done when the call returns */
        ck_assert_int_eq(te_copy_wait(&tk), TE_OK);
        ck_assert_int_eq(te_tensor_read(t, 0, t->numel, want), TE_OK);
        ck_assert_msg(memcmp(buf, want, t->nbytes) == 0, "%s: the async copy differs", te_dtype_name(dts[k]));
        te_host_buffer_free(buf);
        free(want);
    }
    te_host_buffer_free(NULL);
}
END_TEST

/* A device whose copies to the host really are deferred: host memory behind
 * a table whose to_host_async only queues the copy, done by wait or by the
 * next device work that writes or frees memory (a stream orders it after
 * the copies). Every wait says on which thread it ran. */
#define DEFER_MAX 256
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    bool done, waited;
} deferred_copy;
static struct {
    pthread_mutex_t mu;
    deferred_copy q[DEFER_MAX];
    int n, waits, waits_training, waited_twice, done_by_wait, host_allocs, host_frees;
    pthread_t training;
} defer = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void defer_drain(void) /* what the device does before later work */
{
    pthread_mutex_lock(&defer.mu);
    for (int i = 0; i < defer.n; i++)
        if (!defer.q[i].done) {
            memcpy(defer.q[i].dst, defer.q[i].src, defer.q[i].bytes);
            defer.q[i].done = true;
        }
    pthread_mutex_unlock(&defer.mu);
}
static void *defer_alloc(size_t n) { return malloc(n); }
static void defer_free(void *p) { defer_drain(); free(p); }
static void *defer_host_alloc(size_t n)
{
    defer.host_allocs++; /* the training thread's */
    return aligned_alloc(64, (n + 63) & ~(size_t)63);
}
static void defer_host_free(void *p)
{
    pthread_mutex_lock(&defer.mu);
    defer.host_frees++;
    pthread_mutex_unlock(&defer.mu);
    free(p);
}
static void defer_to_host(void *dst, const void *src, size_t n) { memcpy(dst, src, n); } /* reads: no conflict */
static void defer_from_host(void *dst, const void *src, size_t n) { defer_drain(); memcpy(dst, src, n); }
static void defer_copy(void *dst, const void *src, size_t n) { defer_drain(); memcpy(dst, src, n); }
static void defer_zero(void *p, size_t n) { defer_drain(); memset(p, 0, n); }
static void defer_sync(void) { defer_drain(); }
static bool defer_to_host_async(void *dst, const void *src, size_t bytes, void **ticket)
{
    pthread_mutex_lock(&defer.mu);
    ck_assert_int_lt(defer.n, DEFER_MAX);
    defer.q[defer.n] = (deferred_copy){ dst, src, bytes, false, false };
    *ticket = (void *)(uintptr_t)++defer.n;
    pthread_mutex_unlock(&defer.mu);
    return true;
}
static bool defer_wait(void *ticket)
{
    pthread_mutex_lock(&defer.mu);
    const int i = (int)(uintptr_t)ticket - 1;
    if (!defer.q[i].done) {
        memcpy(defer.q[i].dst, defer.q[i].src, defer.q[i].bytes);
        defer.q[i].done = true;
        defer.done_by_wait++;
    }
    defer.waited_twice += defer.q[i].waited;
    defer.q[i].waited = true;
    defer.waits++;
    defer.waits_training += pthread_equal(pthread_self(), defer.training) != 0;
    pthread_mutex_unlock(&defer.mu);
    return true;
}
static te_status defer_add(te_node *n)
{
    defer_drain();
    const float *a = te_f32(n->in[0]), *b = te_f32(n->in[1]);
    for (int64_t i = 0; i < n->out[0]->numel; i++)
        te_f32(n->out[0])[i] = a[i] + b[i];
    return TE_OK;
}
static const te_backend defer_backend = {
    .name = "cuda-deferred",
    .device = TE_DEV_CUDA,
    .alloc = defer_alloc,
    .free = defer_free,
    .to_host = defer_to_host,
    .host_alloc = defer_host_alloc,
    .host_free = defer_host_free,
    .to_host_async = defer_to_host_async,
    .wait = defer_wait,
    .from_host = defer_from_host,
    .copy = defer_copy,
    .zero = defer_zero,
    .sync = defer_sync,
    .widen = te_widen_host,
    .forward = { [TE_OP_ADD] = defer_add },
};

/* A dump of tensors on a device: the training thread only queues their
 * copies into the device's host buffers, the writer thread waits for each
 * (once), and the files hold the tensors' values. */
START_TEST(test_device_copies_waited_by_writer)
{
    defer.n = defer.waits = defer.waits_training = defer.waited_twice = defer.done_by_wait = 0;
    defer.host_allocs = defer.host_frees = 0;
    defer.training = pthread_self();
    te_backend_set_test(TE_DEV_CUDA, &defer_backend);
    ck_assert_int_eq(te_backend_use("cuda"), TE_OK);
    float va[20], vb[20];
    for (int i = 0; i < 20; i++)
        va[i] = (float)i * 0.5f, vb[i] = 3.0f - (float)i;
    te_tensor *a = te_tensor_persistent(TE_F32, te_shape(4, 5)), *b = te_tensor_persistent(TE_F32, te_shape(4, 5));
    ck_assert_int_eq(te_tensor_write(a, 0, 20, va), TE_OK);
    ck_assert_int_eq(te_tensor_write(b, 0, 20, vb), TE_OK);
    char text[256], err[1024];
    snprintf(text, sizeof text, "dir=%s;io=both", dir);
    dump_spec spec;
    ck_assert_msg(dump_spec_parse(text, &spec, err, sizeof err), "%s", err);
    dump_session *d = dump_start(&spec, &(dump_run_info){ .command_line = "test" }, err, sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    int h = te_hook_add(&(te_hooks){ .op_end = see }, NULL);
    for (int s = 0; s < 3; s++) {
        te_step_begin();
        te_tensor *y = te_add(a, b);
        ck_assert_msg(y != NULL, "%s", te_error());
        ck_assert_msg(te_add(y, a) != NULL, "%s", te_error());
        if (s < 2)
            te_set(a, s, (float)(100 + s)); /* a written after its copies were queued */
        te_step_end();
    }
    te_hook_remove(h);
    dump_stop(d);
    ck_assert_int_eq(defer.n, 3 * 6); /* 2 ops x (2 inputs + 1 output) x 3 steps */
    ck_assert_int_eq(defer.waits, defer.n);
    ck_assert_int_eq(defer.waited_twice, 0);
    ck_assert_int_eq(defer.waits_training, 0);
    ck_assert_int_gt(defer.done_by_wait, 0); /* the last step's: no device work came after them */
    ck_assert_int_gt(defer.host_allocs, 0);
    ck_assert_int_eq(defer.host_frees, defer.host_allocs);
    for (int s = 0; s < 3; s++)
        ck_assert_int_eq(check_against_hooks(s), 6);
    dump_step_reader *r = open_step(2);
    float y[20];
    ck_assert(dump_step_read_f32(r, dump_step_find(r, "/add/out0"), y, err, sizeof err));
    ck_assert_float_eq(y[0], 100.0f + vb[0]); /* a as steps 0 and 1 left it */
    ck_assert_float_eq(y[1], 101.0f + vb[1]);
    ck_assert_float_eq(y[2], va[2] + vb[2]);
    dump_step_close(r);
    te_tensor_free(a);
    te_tensor_free(b);
    tu_teardown(); /* the device's memory goes back before the device does */
    te_backend_set_test(TE_DEV_CUDA, NULL);
    tu_setup();
}
END_TEST

Suite *suite_dump(void)
{
    Suite *s = suite_create("dump");
    TCase *tc = tcase_create("sessions");
    tcase_set_timeout(tc, 120); /* some run the examples (the CNN twice): seconds under a sanitizer or load */
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_round_trip_every_tensor);
    tcase_add_test(tc, test_read_async_equals_read);
    tcase_add_test(tc, test_device_copies_waited_by_writer);
    tcase_add_test(tc, test_run_peak_memory);
    tcase_add_test(tc, test_graph_mode_dumps_the_same);
    tcase_add_test(tc, test_selection);
    tcase_add_test(tc, test_params_and_grads);
    tcase_add_test(tc, test_stats_mode);
    tcase_add_test(tc, test_stats_mode_everything);
    tcase_add_test(tc, test_ops_list_inplace_writes);
    tcase_add_test(tc, test_ops_list_backward_reads);
    tcase_add_test(tc, test_size_cap);
    tcase_add_test(tc, test_flight_recorder);
    tcase_add_test(tc, test_unwritable_dir);
    tcase_add_test(tc, test_unmatched_selection_status);
    suite_add_tcase(s, tc);

    tc = tcase_create("crashes");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_backlog_at_exit);
    tcase_add_test(tc, test_unmatched_selection_warns_once);
    tcase_add_test(tc, test_kill_9);
    tcase_add_test(tc, test_disk_full);
    tcase_add_test(tc, test_h5py_interop);
    suite_add_tcase(s, tc);
    return s;
}
