/*
 * test_prof.c — the profiler: the spec's values and errors, and a trace of
 * a small trained model checked in C: well-formed JSON, the ring's steps,
 * ops nested in phases nested in steps, phases summing to the step, exact
 * FLOPs of a known matmul, and nothing recorded while off; the live view
 * (te_profile_last), a save at a stop (the running step, partial), names
 * that need escaping read back by jansson, and graph mode (the compile,
 * fused kernels, the arena).
 */
#include "prof_internal.h"
#include "suites.h"
#include "te.h"
#include "testutil.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static te_profile_opts parse_ok(const char *spec)
{
    te_profile_opts o;
    ck_assert_msg(te_profile_parse(spec, &o) == TE_OK, "'%s': %s", spec, te_error());
    return o;
}

static void parse_bad(const char *spec, const char *msg)
{
    te_profile_opts o;
    ck_assert_int_eq(te_profile_parse(spec, &o), TE_ERR_ARG);
    ck_assert_str_eq(te_error(), msg);
}

START_TEST(test_spec_good)
{
    te_profile_opts o = parse_ok("");
    ck_assert_str_eq(o.file, "");
    ck_assert_int_eq(o.first, 0);
    ck_assert_int_eq(o.last, -1);
    ck_assert_int_eq(o.keep, TE_PROF_KEEP_DEFAULT);
    ck_assert_int_eq(o.when, TE_PROF_ALWAYS);
    o = parse_ok("file=out/p.json;steps=3-7;ops=grad/*;keep=4;when=break");
    ck_assert_str_eq(o.file, "out/p.json");
    ck_assert_int_eq(o.first, 3);
    ck_assert_int_eq(o.last, 7);
    ck_assert_str_eq(o.ops, "grad/*");
    ck_assert_int_eq(o.keep, 4);
    ck_assert_int_eq(o.when, TE_PROF_BREAK);
    o = parse_ok("steps=5;");
    ck_assert_int_eq(o.first, 5);
    ck_assert_int_eq(o.last, 5);
    o = parse_ok("steps=2-;keep=1000");
    ck_assert_int_eq(o.first, 2);
    ck_assert_int_eq(o.last, -1);
    ck_assert_int_eq(o.keep, 1000);
}
END_TEST

START_TEST(test_spec_bad)
{
    parse_bad("size=3", "profile spec: unknown key 'size' (keys: file, steps, ops, keep, when)");
    parse_bad("file", "profile spec: 'file' is not key=value (keys: file, steps, ops, keep, when)");
    parse_bad("file=", "profile spec: file=: the path is empty");
    parse_bad("steps=x", "profile spec: steps=x: expected N, A-B or A- (steps count from 0)");
    parse_bad("steps=-3", "profile spec: steps=-3: expected N, A-B or A- (steps count from 0)");
    parse_bad("steps=7-3", "profile spec: steps=7-3: the range ends before it starts");
    parse_bad("keep=0", "profile spec: keep=0: expected a step count from 1 to 1000");
    parse_bad("keep=1001", "profile spec: keep=1001: expected a step count from 1 to 1000");
    parse_bad("keep=2x", "profile spec: keep=2x: expected a step count from 1 to 1000");
    parse_bad("ops=", "profile spec: ops=: the glob is empty");
    parse_bad("when=sometimes", "profile spec: when=sometimes: expected always or break");
    parse_bad("keep=3;when=", "profile spec: when=: expected always or break");
    te_profile_opts o;
    ck_assert_int_eq(te_profile_parse(NULL, &o), TE_ERR_ARG);
    ck_assert_int_eq(te_profile_start(&(te_profile_opts){ .keep = 0 }), TE_ERR_ARG);
}
END_TEST

/* ---- a trace, read back ------------------------------------------------- */

typedef struct ev {
    char ph, cat[16], name[96];
    int tid;
    double ts, dur;
    long step;
    double flops;
} ev;

/* The JSON's structure: strings closed, escapes valid, braces and brackets
 * balanced outside strings, nothing after the top-level object. */
static void check_json_structure(const char *s)
{
    char stack[64];
    int depth = 0;
    bool in_str = false, closed = false;
    for (const char *p = s; *p; p++) {
        if (closed) {
            ck_assert_msg(*p == '\n' || *p == ' ', "text after the top-level object at %ld", (long)(p - s));
            continue;
        }
        if (in_str) {
            ck_assert_msg((unsigned char)*p >= 0x20, "control byte in a string at %ld", (long)(p - s));
            if (*p == '\\') {
                p++;
                ck_assert_msg(*p && strchr("\"\\/bfnrtu", *p), "bad escape at %ld", (long)(p - s));
            } else if (*p == '"') {
                in_str = false;
            }
            continue;
        }
        if (*p == '"')
            in_str = true;
        else if (*p == '{' || *p == '[') {
            ck_assert(depth < 64);
            stack[depth++] = *p;
        } else if (*p == '}' || *p == ']') {
            ck_assert_msg(depth > 0 && stack[depth - 1] == (*p == '}' ? '{' : '['), "unbalanced at %ld",
                          (long)(p - s));
            closed = --depth == 0;
        }
    }
    ck_assert(!in_str && depth == 0 && closed);
}

static const char *field(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    return p ? p + strlen(key) : NULL;
}

static void str_field(const char *line, const char *key, char *out, size_t n)
{
    const char *p = field(line, key);
    ck_assert_msg(p && *p == '"', "no %s in %s", key, line);
    size_t i = 0;
    for (p++; *p && *p != '"' && i + 1 < n; p++)
        out[i++] = *p;
    out[i] = 0;
}

/* Reads the file: one event a line, as prof_json.c writes them. */
static char *read_trace(const char *path, ev **out, int *n_out)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no trace at %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)len + 1);
    ck_assert(fread(text, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    check_json_structure(text);
    ck_assert_msg(strncmp(text, "{\"traceEvents\":[", 16) == 0, "starts %.40s", text);
    ck_assert(strstr(text, "\"displayTimeUnit\":\"ms\",\"otherData\":{\"tdbg\":1,\"program\":") != NULL);
    ev *evs = calloc(100000, sizeof *evs);
    int n = 0;
    char *copy = strdup(text);
    for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] != '{' || !strstr(line, "\"ph\":"))
            continue;
        ck_assert(n < 100000);
        ev *e = &evs[n++];
        char ph[4];
        str_field(line, "\"ph\":", ph, sizeof ph);
        e->ph = ph[0];
        str_field(line, "\"cat\":", e->cat, sizeof e->cat);
        str_field(line, "\"name\":", e->name, sizeof e->name);
        ck_assert_msg(field(line, "\"pid\":") && field(line, "\"tid\":") && field(line, "\"ts\":"), "%s", line);
        ck_assert_int_eq(atoi(field(line, "\"pid\":")), getpid());
        e->tid = atoi(field(line, "\"tid\":"));
        e->ts = strtod(field(line, "\"ts\":"), NULL);
        if (e->ph == 'X') {
            ck_assert_msg(field(line, "\"dur\":"), "%s", line);
            e->dur = strtod(field(line, "\"dur\":"), NULL);
            ck_assert_msg(field(line, "\"step\":"), "%s", line);
            e->step = atol(field(line, "\"step\":"));
        }
        if (field(line, "\"flops\":"))
            e->flops = strtod(field(line, "\"flops\":"), NULL);
        if (e->ph == 'C') {
            ck_assert_str_eq(e->name, "memory");
            ck_assert(field(line, "\"live\":") && field(line, "\"peak\":"));
            ck_assert(strtod(field(line, "\"peak\":"), NULL) >= strtod(field(line, "\"live\":"), NULL));
        }
    }
    free(copy);
    *out = evs;
    *n_out = n;
    return text;
}

static te_tensor *w1, *w2;

/* One training step of a two-layer MLP; its first op is the matmul
 * "mm/matmul" of [8,16] by [16,32]. */
static void train_step(te_optim *opt)
{
    static float xs[8 * 16];
    static int32_t ys[8];
    for (int i = 0; i < 8 * 16; i++)
        xs[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (int i = 0; i < 8; i++)
        ys[i] = i % 4;
    tu_mlp2_step(te_tensor_from(TE_F32, te_shape(8, 16), xs), te_tensor_from(TE_I32, te_shape(8), ys), w1, w2, opt);
}

static te_optim *model(void)
{
    w1 = te_param_new("w1", TE_F32, te_shape(16, 32));
    w2 = te_param_new("w2", TE_F32, te_shape(4, 32));
    te_init_linear(w1, NULL);
    te_init_linear(w2, NULL);
    return te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.1f });
}

static bool within(const ev *in, const ev *out)
{
    /* ts and dur are exact in ns, written with 3 decimals: compare in ns. */
    long long a0 = llround(in->ts * 1000), a1 = a0 + llround(in->dur * 1000);
    long long b0 = llround(out->ts * 1000), b1 = b0 + llround(out->dur * 1000);
    return in->tid == out->tid && a0 >= b0 && a1 <= b1;
}

START_TEST(test_trace_of_training)
{
    char dir[256], path[300];
    tu_scratch_make(dir, sizeof dir, "prof");
    snprintf(path, sizeof path, "%s/p.json", dir);
    te_optim *opt = model();
    te_profile_opts o;
    char spec[400];
    snprintf(spec, sizeof spec, "file=%s;keep=3", path);
    ck_assert_int_eq(te_profile_parse(spec, &o), TE_OK);
    ck_assert_int_eq(te_profile_start(&o), TE_OK);
    ck_assert(te_profile_active());
    for (int s = 0; s < 5; s++)
        train_step(opt);
    ck_assert_int_eq(te_profile_stop(), TE_OK); /* when=always: writes the file */
    ck_assert(!te_profile_active());

    ev *e;
    int n;
    char *text = read_trace(path, &e, &n);
    ck_assert(strstr(text, "\"steps\":[2,4]}}") != NULL);
    int steps[8] = { 0 }, n_steps = 0, n_ops = 0, n_meta = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].ph == 'M')
            n_meta++;
        if (e[i].ph != 'X')
            continue;
        ck_assert_msg(e[i].step >= 2 && e[i].step <= 4, "step %ld in a ring of 2-4", e[i].step);
        if (strcmp(e[i].cat, "step") == 0) {
            ck_assert(n_steps < 8);
            steps[n_steps++] = (int)e[i].step;
            /* The phases tile the step: their sum within 10% of its wall time. */
            double sum = 0;
            for (int j = 0; j < n; j++)
                if (e[j].ph == 'X' && strcmp(e[j].cat, "phase") == 0 && e[j].step == e[i].step) {
                    ck_assert_msg(within(&e[j], &e[i]), "phase %s outside step %ld", e[j].name, e[i].step);
                    sum += e[j].dur;
                }
            ck_assert_msg(sum >= 0.9 * e[i].dur && sum <= e[i].dur * 1.0000001, "phases %.3f of step %.3f us",
                          sum, e[i].dur);
        }
        if (strcmp(e[i].cat, "op") == 0) {
            n_ops++;
            bool nested = false;
            for (int j = 0; j < n && !nested; j++)
                nested = e[j].ph == 'X' && strcmp(e[j].cat, "phase") == 0 && e[j].step == e[i].step &&
                         within(&e[i], &e[j]);
            ck_assert_msg(nested, "op %s of step %ld is in no phase", e[i].name, e[i].step);
            if (strcmp(e[i].name, "mm/matmul") == 0)
                ck_assert_msg(e[i].flops == 2.0 * 8 * 32 * 16, "matmul flops %.0f", e[i].flops);
            if (strcmp(e[i].name, "grad/mm/matmul") == 0) /* dW only: x needs no gradient */
                ck_assert_msg(e[i].flops == 2.0 * 8 * 32 * 16, "matmul grad flops %.0f", e[i].flops);
            if (strcmp(e[i].name, "out/linear") == 0)
                ck_assert_msg(e[i].flops == 2.0 * 8 * 4 * 32, "linear flops %.0f", e[i].flops);
        }
    }
    ck_assert_int_eq(n_steps, 3);
    ck_assert_int_eq(steps[0], 2);
    ck_assert_int_eq(steps[1], 3);
    ck_assert_int_eq(steps[2], 4);
    /* Per step: matmul, relu, linear, cross entropy, their 4 grads, 2 updates. */
    ck_assert_int_eq(n_ops, 3 * 10);
    ck_assert_int_ge(n_meta, 1);
    ck_assert(strstr(text, "\"name\":\"mm/matmul\"") && strstr(text, "\"type\":\"MatMul\",\"shape\":[8,32],\"dtype\":\"f32\""));
    ck_assert(strstr(text, "\"name\":\"update/w1\"") != NULL);
    free(e);
    free(text);
    tu_scratch_remove(dir);
}
END_TEST

/* Off: no events, nothing to save; after a stop, steps add nothing. */
START_TEST(test_off_records_nothing)
{
    char dir[256], a[300], b[300];
    tu_scratch_make(dir, sizeof dir, "prof");
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    te_optim *opt = model();
    train_step(opt);
    ck_assert(!te_profile_active());
    ck_assert_int_eq(te_profile_save(a), TE_ERR_STATE);
    ck_assert_int_eq(access(a, F_OK), -1);

    ck_assert_int_eq(te_profile_start(&(te_profile_opts){ .last = -1, .keep = 5, .when = TE_PROF_BREAK }), TE_OK);
    train_step(opt);
    ck_assert_int_eq(te_profile_stop(), TE_OK); /* when=break: no file of its own */
    ck_assert_int_eq(te_profile_save(a), TE_OK);
    train_step(opt);
    train_step(opt);
    ck_assert_int_eq(te_profile_save(b), TE_OK);
    ev *e;
    int n, m;
    char *ta = read_trace(a, &e, &n);
    free(e);
    char *tb = read_trace(b, &e, &m);
    free(e);
    ck_assert_int_eq(n, m);
    ck_assert(strstr(ta, "\"steps\":[1,1]}}") && strstr(tb, "\"steps\":[1,1]}}"));
    free(ta);
    free(tb);
    tu_scratch_remove(dir);
}
END_TEST

/* steps=A-B with a file: written once step B ends, then off; ops= filters. */
START_TEST(test_range_and_glob)
{
    char dir[256], path[300], spec[400];
    tu_scratch_make(dir, sizeof dir, "prof");
    snprintf(path, sizeof path, "%s/r.json", dir);
    snprintf(spec, sizeof spec, "file=%s;steps=1-2;ops=grad/*", path);
    te_profile_opts o = parse_ok(spec);
    te_optim *opt = model();
    ck_assert_int_eq(te_profile_start(&o), TE_OK);
    for (int s = 0; s < 4; s++)
        train_step(opt);
    ck_assert(!te_profile_active());
    ev *e;
    int n, ops = 0;
    char *text = read_trace(path, &e, &n);
    ck_assert(strstr(text, "\"steps\":[1,2]}}") != NULL);
    for (int i = 0; i < n; i++)
        if (e[i].ph == 'X' && strcmp(e[i].cat, "op") == 0) {
            ck_assert_msg(strncmp(e[i].name, "grad/", 5) == 0, "op %s passed ops=grad/*", e[i].name);
            ops++;
        }
    ck_assert_int_eq(ops, 2 * 4);
    free(e);
    free(text);
    tu_scratch_remove(dir);
}
END_TEST

/* The trace through jansson: the whole file parses; its traceEvents. */
static json_t *load_json(const char *path, json_t **events)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    ck_assert_msg(root != NULL, "%s: line %d: %s", path, err.line, err.text);
    *events = json_object_get(root, "traceEvents");
    ck_assert(json_is_array(*events));
    return root;
}

static const char *jstr(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

static json_t *jarg(json_t *event, const char *k) { return json_object_get(json_object_get(event, "args"), k); }

/* The live view: the last finished step, its ops merged by name, longest
 * first, their times within the step's. */
START_TEST(test_last_step)
{
    te_profile_step s;
    te_profile_op ops[4];
    ck_assert_int_eq(te_profile_last(&s, ops, 4), TE_ERR_STATE); /* never started */
    te_optim *opt = model();
    ck_assert_int_eq(te_profile_start(&(te_profile_opts){ .last = -1, .keep = 2, .when = TE_PROF_BREAK }), TE_OK);
    ck_assert_int_eq(te_profile_last(&s, ops, 4), TE_ERR_STATE); /* nothing finished yet */
    train_step(opt);
    train_step(opt);
    ck_assert_int_eq(te_profile_last(&s, ops, 4), TE_OK);
    ck_assert_int_eq(s.step, 1);
    ck_assert_int_eq(s.n_ops, 10); /* matmul, relu, linear, cross entropy, 4 grads, 2 updates */
    double phases = s.phase_ms[TE_PHASE_FORWARD] + s.phase_ms[TE_PHASE_BACKWARD] + s.phase_ms[TE_PHASE_UPDATE];
    ck_assert_msg(phases > 0 && phases <= s.ms * 1.0000001, "phases %.6f of %.6f ms", phases, s.ms);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(ops[i].calls, 1);
        ck_assert(ops[i].ms >= 0 && ops[i].ms <= s.ms);
        if (i)
            ck_assert_msg(ops[i].ms <= ops[i - 1].ms, "%s %.6f after %s %.6f", ops[i].name, ops[i].ms,
                          ops[i - 1].name, ops[i - 1].ms);
    }
    te_profile_op all[16];
    ck_assert_int_eq(te_profile_last(&s, all, 16), TE_OK);
    bool mm = false;
    for (int i = 0; i < s.n_ops; i++)
        if (strcmp(all[i].name, "mm/matmul") == 0) {
            mm = true;
            ck_assert_str_eq(all[i].type, "MatMul");
            ck_assert_int_eq(all[i].phase, TE_PHASE_FORWARD);
            ck_assert(all[i].flops == 2.0 * 8 * 32 * 16);
        }
    ck_assert(mm);
    te_profile_stop();
}
END_TEST

/* A save at a stop (a hook, as the debugger's breakpoint) writes the ring
 * and the running step up to the op that stopped, marked partial. */
static char saved_at[300];
static void save_at_linear(const te_op_record *r, void *user)
{
    (void)user;
    if (r->name && strcmp(r->name, "out/linear") == 0)
        ck_assert_msg(te_profile_save(saved_at) == TE_OK, "%s", te_error());
}

START_TEST(test_save_at_stop)
{
    char dir[256];
    tu_scratch_make(dir, sizeof dir, "prof");
    snprintf(saved_at, sizeof saved_at, "%s/stop.json", dir);
    te_optim *opt = model();
    ck_assert_int_eq(te_profile_start(&(te_profile_opts){ .last = -1, .keep = 2, .when = TE_PROF_BREAK }), TE_OK);
    train_step(opt);
    train_step(opt);
    int hook = te_hook_add(&(te_hooks){ .op_end = save_at_linear }, NULL);
    ck_assert_int_ge(hook, 0);
    train_step(opt); /* step 2: saved at its linear */
    te_hook_remove(hook);
    te_profile_stop();
    json_t *evs, *root = load_json(saved_at, &evs);
    json_t *steps = json_object_get(json_object_get(root, "otherData"), "steps");
    ck_assert_int_eq(json_integer_value(json_array_get(steps, 0)), 1); /* keep=2: step 0 left the ring */
    ck_assert_int_eq(json_integer_value(json_array_get(steps, 1)), 2);
    size_t i;
    json_t *e;
    int step2_ops = 0, partial = 0, whole = 0;
    const char *last = NULL;
    json_array_foreach(evs, i, e) {
        if (strcmp(jstr(e, "ph"), "X"))
            continue;
        json_int_t step = json_integer_value(jarg(e, "step"));
        if (!strcmp(jstr(e, "cat"), "step")) {
            if (json_is_true(jarg(e, "partial"))) {
                ck_assert_int_eq(step, 2);
                partial++;
            } else {
                ck_assert_int_eq(step, 1);
                ck_assert_ptr_null(jarg(e, "partial"));
                whole++;
            }
        }
        if (!strcmp(jstr(e, "cat"), "op") && step == 2) {
            step2_ops++;
            last = jstr(e, "name");
        }
    }
    ck_assert_int_eq(partial, 1);
    ck_assert_int_eq(whole, 1);
    ck_assert_int_eq(step2_ops, 3); /* mm/matmul, mm/relu, out/linear */
    ck_assert_str_eq(last, "out/linear");
    json_decref(root);
    tu_scratch_remove(dir);
}
END_TEST

/* Op names are user text: quotes, backslashes, control bytes and UTF-8
 * come back from a JSON parser as they went in. */
START_TEST(test_names_escaped)
{
    char dir[256], path[300];
    tu_scratch_make(dir, sizeof dir, "prof");
    snprintf(path, sizeof path, "%s/esc.json", dir);
    static const char scope[] = "q\"b\\n\nt\tc\x01u\xc3\xa9";
    w1 = te_param_new("w1", TE_F32, te_shape(16, 32));
    te_init_linear(w1, NULL);
    char spec[400];
    snprintf(spec, sizeof spec, "file=%s", path);
    te_profile_opts o = parse_ok(spec);
    ck_assert_int_eq(te_profile_start(&o), TE_OK);
    te_step_begin();
    float xs[8 * 16] = { 0 };
    te_tensor *x = te_tensor_from(TE_F32, te_shape(8, 16), xs);
    te_scope_push(scope);
    ck_assert(te_matmul(x, w1) != NULL);
    te_scope_pop();
    te_step_end();
    ck_assert_int_eq(te_profile_stop(), TE_OK);
    char want[64];
    snprintf(want, sizeof want, "%s/matmul", scope);
    json_t *evs, *root = load_json(path, &evs);
    size_t i;
    json_t *e;
    bool found = false;
    json_array_foreach(evs, i, e)
        found |= !strcmp(jstr(e, "ph"), "X") && !strcmp(jstr(e, "cat"), "op") && !strcmp(jstr(e, "name"), want);
    ck_assert_msg(found, "no op named as the scope made it");
    json_decref(root);
    tu_scratch_remove(dir);
}
END_TEST

typedef struct { te_optim *opt; } graph_model;

/* train_step's model as a graph step function. */
static te_status graph_step(void *ctx, te_tensor *const *in, te_tensor **out)
{
    graph_model *m = ctx;
    te_scope_push("mm");
    te_tensor *h = te_relu(te_matmul(in[0], w1));
    te_scope_pop();
    te_scope_push("out");
    te_tensor *z = te_linear(h, w2, NULL);
    te_scope_pop();
    out[0] = te_cross_entropy(z, in[1]);
    te_status st = te_backward(out[0]);
    return st == TE_OK ? te_optim_step(m->opt) : st;
}

/* Graph mode: the first step compiles (a compile event inside it), every
 * step carries the plan's arena, fused ops name their kernel, and the
 * phases still tile the step. */
START_TEST(test_graph_mode)
{
    char dir[256], path[300], spec[400];
    tu_scratch_make(dir, sizeof dir, "prof");
    snprintf(path, sizeof path, "%s/g.json", dir);
    graph_model m = { model() };
    te_graph *g = te_graph_new(graph_step, &m, &(te_graph_opts){ .mode = TE_MODE_GRAPH, .n_inputs = 2,
                                                               .n_outputs = 1 });
    ck_assert(g != NULL);
    snprintf(spec, sizeof spec, "file=%s", path);
    te_profile_opts o = parse_ok(spec);
    ck_assert_int_eq(te_profile_start(&o), TE_OK);
    float xs[8 * 16];
    int32_t ys[8];
    for (int i = 0; i < 8 * 16; i++)
        xs[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (int i = 0; i < 8; i++)
        ys[i] = i % 4;
    for (int s = 0; s < 3; s++) {
        te_step_begin();
        te_tensor *out[1], *in[2] = { te_tensor_from(TE_F32, te_shape(8, 16), xs),
                                      te_tensor_from(TE_I32, te_shape(8), ys) };
        ck_assert_msg(te_graph_run(g, in, out) == TE_OK, "%s", te_error());
        te_step_end();
    }
    ck_assert_int_eq(te_profile_stop(), TE_OK);
    te_graph_stats gs = te_graph_stats_get(g);
    ck_assert_int_gt(gs.fused, 0);
    json_t *evs, *root = load_json(path, &evs);
    size_t i, j;
    json_t *e, *f;
    int compiles[3] = { 0 }, steps = 0, fused_ops = 0;
    json_array_foreach(evs, i, e) {
        if (strcmp(jstr(e, "ph"), "X"))
            continue;
        json_int_t step = json_integer_value(jarg(e, "step"));
        ck_assert(step >= 0 && step < 3);
        if (!strcmp(jstr(e, "cat"), "compile"))
            compiles[step]++;
        if (!strcmp(jstr(e, "cat"), "op") && jarg(e, "kernel"))
            fused_ops++;
        if (strcmp(jstr(e, "cat"), "step"))
            continue;
        steps++;
        ck_assert_int_eq(json_integer_value(jarg(e, "arena_bytes")), (json_int_t)gs.arena_bytes);
        if (step == 0)
            ck_assert_int_gt(json_integer_value(jarg(e, "compile_ns")), 0);
        else
            ck_assert_int_eq(json_integer_value(jarg(e, "compile_ns")), 0);
        double sum = 0, dur = json_number_value(json_object_get(e, "dur"));
        json_array_foreach(evs, j, f)
            if (!strcmp(jstr(f, "ph"), "X") && !strcmp(jstr(f, "cat"), "phase") &&
                json_integer_value(jarg(f, "step")) == step)
                sum += json_number_value(json_object_get(f, "dur"));
        ck_assert_msg(sum >= 0.9 * dur && sum <= dur * 1.0000001, "step %d: phases %.3f of %.3f us", (int)step,
                      sum, dur);
    }
    ck_assert_int_eq(steps, 3);
    ck_assert_int_eq(compiles[0], 1);
    ck_assert_int_eq(compiles[1] + compiles[2], 0);
    ck_assert_int_ge(fused_ops, 3 * 2); /* at least the matmul and its relu, each step */
    json_decref(root);
    te_graph_free(g);
    tu_scratch_remove(dir);
}
END_TEST

/* A viewer's view: Python's json module alone reads the trace of a few
 * eager steps and finds it well formed. */
START_TEST(test_interop_python_json)
{
    if (access("/usr/bin/python3", X_OK) != 0) {
        tdbg_skip("prof", "no /usr/bin/python3 for the json interop check (apt-get install python3)");
        return;
    }
    char dir[256], path[300], spec[400], out[4096] = "";
    tu_scratch_make(dir, sizeof dir, "prof");
    snprintf(path, sizeof path, "%s/py.json", dir);
    snprintf(spec, sizeof spec, "file=%s;keep=3", path);
    te_optim *opt = model();
    te_profile_opts o = parse_ok(spec);
    ck_assert_int_eq(te_profile_start(&o), TE_OK);
    for (int s = 0; s < 4; s++)
        train_step(opt);
    ck_assert_int_eq(te_profile_stop(), TE_OK);
    int status = tu_shell(out, sizeof out, "/usr/bin/python3 '%s/tests/interop_prof_json.py' '%s' mm/matmul "
                          "grad/out/linear update/w2 2>&1", TDBG_SRCDIR, path);
    ck_assert_msg(status == 0, "interop failed:\n%s", out);
    ck_assert_msg(strstr(out, "interop ok: 3 steps, 30 ops"), "%s", out);
    tu_scratch_remove(dir);
}
END_TEST

/* A device clock for the CPU: mark k is at k * 0.5 ms; `broken` makes it
 * unreadable. */
static int fake_marks;
static bool fake_broken;
static int fake_mark(void) { return fake_marks++; }
static double fake_ms(int a, int b) { return fake_broken ? -1 : (b - a) * 0.5; }
static void fake_reset(void) { fake_marks = 0; }

/* With a device clock, ops move to the device's track with its times (the
 * host's kept in args.host_us); an unreadable clock leaves host times. */
START_TEST(test_device_clock)
{
    char dir[256], path[300], spec[400];
    tu_scratch_make(dir, sizeof dir, "prof");
    te_optim *opt = model();
    for (int broken = 0; broken < 2; broken++) {
        fake_broken = broken;
        te_prof_clock_set(&(prof_clock){ fake_mark, fake_ms, fake_reset });
        snprintf(path, sizeof path, "%s/dev%d.json", dir, broken);
        snprintf(spec, sizeof spec, "file=%s;keep=2", path);
        te_profile_opts o = parse_ok(spec);
        ck_assert_int_eq(te_profile_start(&o), TE_OK);
        train_step(opt);
        train_step(opt);
        ck_assert_int_eq(te_profile_stop(), TE_OK);
        te_prof_clock_set(NULL);
        json_t *evs, *root = load_json(path, &evs);
        size_t i;
        json_t *e;
        int ops = 0, named = 0;
        double step_ts[8] = { 0 }, last_end = 0;
        json_array_foreach(evs, i, e) {
            if (!strcmp(jstr(e, "ph"), "M") && json_integer_value(json_object_get(e, "tid")) == PROF_DEVICE_TID) {
                ck_assert_str_eq(json_string_value(jarg(e, "name")), "device (event time)");
                named++;
            }
            if (strcmp(jstr(e, "ph"), "X"))
                continue;
            json_int_t step = json_integer_value(jarg(e, "step"));
            double ts = json_number_value(json_object_get(e, "ts")), dur = json_number_value(json_object_get(e, "dur"));
            if (!strcmp(jstr(e, "cat"), "step")) {
                step_ts[step] = ts;
                last_end = ts;
            }
            if (strcmp(jstr(e, "cat"), "op"))
                continue;
            ops++;
            json_int_t tid = json_integer_value(json_object_get(e, "tid"));
            if (broken) {
                ck_assert_int_ne(tid, PROF_DEVICE_TID);
                ck_assert_ptr_null(jarg(e, "host_us"));
                continue;
            }
            ck_assert_int_eq(tid, PROF_DEVICE_TID);
            ck_assert(json_is_number(jarg(e, "host_us")));
            /* whole marks apart: a multiple of 500 us, after the step's start, one after another */
            double k = dur / 500.0;
            ck_assert_msg(k >= 1 && fabs(k - round(k)) < 1e-9, "%s: dur %.3f us", jstr(e, "name"), dur);
            ck_assert(ts >= step_ts[step] + 500.0);
            ck_assert_msg(ts >= last_end - 1e-6, "%s overlaps the op before", jstr(e, "name"));
            last_end = ts + dur;
        }
        ck_assert_int_eq(ops, 2 * 10);
        ck_assert_int_eq(named, broken ? 0 : 1);
        json_decref(root);
    }
    tu_scratch_remove(dir);
}
END_TEST

Suite *suite_prof(void)
{
    Suite *s = suite_create("prof");
    TCase *tc = tcase_create("prof");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_spec_good);
    tcase_add_test(tc, test_spec_bad);
    tcase_add_test(tc, test_trace_of_training);
    tcase_add_test(tc, test_off_records_nothing);
    tcase_add_test(tc, test_range_and_glob);
    tcase_add_test(tc, test_last_step);
    tcase_add_test(tc, test_save_at_stop);
    tcase_add_test(tc, test_names_escaped);
    tcase_add_test(tc, test_graph_mode);
    tcase_add_test(tc, test_interop_python_json);
    tcase_add_test(tc, test_device_clock);
    suite_add_tcase(s, tc);
    return s;
}
