/*
 * test_dbg_prof.c — the debugger's profile commands in `tdbg --batch`
 * sessions on examples/mlp: `profile around nan` writes the ring with the
 * stopped step up to the stop's op at a NaN stop (eager and graph, before
 * and after the ring is full, numbered captures), when=break writes at
 * breakpoint stops only, `profile start/stop/save` write the steps run,
 * the ring's bound, a steps=A-B range, the write at the program's end,
 * the exact errors, and `info profile`'s numbers against the trace saved
 * at the same stop. The traces are read back with jansson.
 */
#include "cmd.h"
#include "prof.h"
#include "session.h"
#include "suites.h"
#include "testutil.h"
#include "tsession.h"

#include <jansson.h>
#include <math.h>
#include <readline/readline.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const MLP = "--hidden 64,64 --batch 32 --threads 2 --log-every 1";

static char suite_dir[64];
static void suite_dir_make(void) { tu_scratch_make(suite_dir, sizeof suite_dir, "tdbg-dbgprof"); }
static void suite_dir_remove(void) { tu_scratch_remove(suite_dir); }

/* ---- a trace, read back ------------------------------------------------------- */

#define MAX_STEPS 16
#define MAX_OPS 64

typedef struct trace_step {
    long long step;
    bool partial;
    double ms;                 /* the step event's dur */
    double phase_ms[3];        /* forward, backward, update phase events' dur */
    long long data_ns, hooks_ns;
    char ops[MAX_OPS][64];     /* its op events' names, in the file's order */
    double op_ms[MAX_OPS];
    int n_ops;
} trace_step;

typedef struct trace {
    trace_step steps[MAX_STEPS]; /* in the file's order */
    int n_steps;
    long long first, last;       /* otherData.steps */
} trace;

static const char *str_of(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

static trace_step *step_of(trace *t, long long step)
{
    for (int i = 0; i < t->n_steps; i++)
        if (t->steps[i].step == step)
            return &t->steps[i];
    return NULL;
}

/* Parses path with jansson; fails the test unless it is a trace. */
static void trace_load(const char *path, trace *t)
{
    memset(t, 0, sizeof *t);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    ck_assert_msg(root != NULL, "%s: %s (line %d)", path, je.text, je.line);
    json_t *events = json_object_get(root, "traceEvents");
    ck_assert_msg(json_is_array(events), "%s: no traceEvents", path);
    json_t *range = json_object_get(json_object_get(root, "otherData"), "steps");
    ck_assert_msg(json_array_size(range) == 2, "%s: otherData.steps", path);
    t->first = json_integer_value(json_array_get(range, 0));
    t->last = json_integer_value(json_array_get(range, 1));
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *cat = str_of(e, "cat");
        json_t *args = json_object_get(e, "args");
        const long long step = json_integer_value(json_object_get(args, "step"));
        const double ms = json_number_value(json_object_get(e, "dur")) / 1000;
        if (strcmp(cat, "step") == 0) {
            ck_assert_msg(t->n_steps < MAX_STEPS, "%s: too many steps", path);
            trace_step *s = &t->steps[t->n_steps++];
            s->step = step;
            s->partial = json_is_true(json_object_get(args, "partial"));
            s->ms = ms;
            s->data_ns = json_integer_value(json_object_get(args, "data_ns"));
            s->hooks_ns = json_integer_value(json_object_get(args, "hooks_ns"));
            continue;
        }
        trace_step *s = step_of(t, step);
        if (strcmp(cat, "phase") == 0 && s) {
            static const char *const names[] = { "forward", "backward", "update" };
            for (int p = 0; p < 3; p++)
                if (strcmp(str_of(e, "name"), names[p]) == 0)
                    s->phase_ms[p] += ms;
        } else if (strcmp(cat, "op") == 0) {
            ck_assert_msg(s != NULL, "%s: op %s of step %lld before its step event", path, str_of(e, "name"), step);
            ck_assert(s->n_ops < MAX_OPS);
            snprintf(s->ops[s->n_ops], sizeof s->ops[0], "%s", str_of(e, "name"));
            s->op_ms[s->n_ops++] = ms;
        }
    }
    json_decref(root);
}

/* Fails unless the trace holds exactly steps first..last in order, only
 * the last partial when partial says so. */
static void steps_are(const trace *t, const char *what, long long first, long long last, bool partial)
{
    ck_assert_msg(t->n_steps == last - first + 1, "%s: %d steps, want %lld-%lld", what, t->n_steps, first, last);
    for (int i = 0; i < t->n_steps; i++) {
        ck_assert_msg(t->steps[i].step == first + i, "%s: step %d is %lld, want %lld", what, i, t->steps[i].step,
                      first + i);
        const bool want = partial && i == t->n_steps - 1;
        ck_assert_msg(t->steps[i].partial == want, "%s: step %lld partial %d", what, t->steps[i].step, want);
    }
    ck_assert_msg(t->first == first && t->last == last, "%s: otherData.steps [%lld,%lld]", what, t->first, t->last);
}

/* The MLP's 18 ops of a whole step end with the last parameter's update. */
static void whole_steps(const trace *t, const char *what)
{
    for (int i = 0; i < t->n_steps; i++) {
        const trace_step *s = &t->steps[i];
        if (s->partial)
            continue;
        ck_assert_msg(s->n_ops == 18 && strcmp(s->ops[0], "fc1/linear") == 0 &&
                          strcmp(s->ops[s->n_ops - 1], "update/fc3.bias") == 0,
                      "%s: step %lld: %d ops, %s ... %s", what, s->step, s->n_ops, s->n_ops ? s->ops[0] : "-",
                      s->n_ops ? s->ops[s->n_ops - 1] : "-");
    }
}

/* Fails unless the step's ops are exactly names, in order. */
static void ops_are(const trace_step *s, const char *what, const char *const *names, int n)
{
    ck_assert_msg(s->n_ops == n, "%s: step %lld has %d ops, want %d", what, s->step, s->n_ops, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(strcmp(s->ops[i], names[i]) == 0, "%s: op %d is %s, want %s", what, i, s->ops[i], names[i]);
}

static void reads_it(const char *path, const char *steps_line)
{
    tu_result r = tu_run_tool(tdbg_prof_main, "tdbg-prof", (const char *const[]){ path, NULL });
    ck_assert_msg(r.rc == 0, "tdbg-prof %s: %d: %s", path, r.rc, r.err);
    ck_assert_msg(strstr(r.out, steps_line) != NULL, "tdbg-prof %s: no '%s' in:\n%s", path, steps_line, r.out);
    tu_result_free(&r);
}

static bool exists(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* ---- profile around nan -------------------------------------------------------- */

static const char *const UP_TO_FC2[] = { "fc1/linear", "fc1/relu", "fc2/linear" };

/* A NaN made by fc2/linear in step 3, keep=3: the file holds steps 1 and
 * 2 whole and step 3 up to fc2/linear; continuing, the NaN in the weights
 * stops step 4 at its first op, written as the second capture. An
 * explicit `break nan` is kept; without one, around nan sets it. */
START_TEST(test_around_nan)
{
    static const char *const modes[] = { "eager", "graph" };
    const char *mode = modes[_i];
    char dir[256], cmds[1024], want[2048], path[512];
    tu_scratch_sub(suite_dir, dir, sizeof dir);
    snprintf(cmds, sizeof cmds, "break nan;profile around nan keep=3 file=%s/p.json;run;continue", dir);
    ts_session s = ts_tdbg("--batch", cmds, "mlp", "%s --steps 6 --mode %s --inject nan@op=fc2/linear,step=3", MLP,
                           mode);
    ts_stop_is(&s, 0, "stopped: step=3 phase=forward op=fc2/linear type=Linear reason=nan "
                      "tensor=fc2/linear:out0 index=[0,0] origin=created");
    snprintf(want, sizeof want,
             "Profiling from step 0: file=%s/p.json;steps=0-;ops=*;keep=3;when=break; the last 3 steps are written to "
             "%s/p.json at each breakpoint stop\n(tdbg) run",
             dir, dir);
    ts_has(&s, want); /* the breakpoint set before is the one: none added */
    ck_assert_int_eq(ts_count(&s, "Breakpoint 1: the first op creating a NaN"), 1);
    ts_lacks(&s, "Breakpoint 2");
    /* the line comes before the stop's report */
    snprintf(want, sizeof want,
             "\nprofile: wrote %s/p.json: steps 1-3 (3), step 3 up to the stop at fc2/linear; "
             "'tdbg-prof %s/p.json' reads it\n\nBreakpoint 1 (nan), step 3",
             dir, dir);
    ts_has(&s, want);

    trace t;
    snprintf(path, sizeof path, "%s/p.json", dir);
    trace_load(path, &t);
    steps_are(&t, path, 1, 3, true);
    whole_steps(&t, path);
    ops_are(&t.steps[2], path, UP_TO_FC2, 3);
    reads_it(path, "p.json: 3 steps");

    /* the second stop: step 4's first op, numbered -1 */
    ts_stop_is(&s, 1, "stopped: step=4 phase=forward op=fc1/linear type=Linear reason=nan "
                      "tensor=fc1/linear:out0 index=[0,0] origin=propagated:param:fc1.weight");
    snprintf(want, sizeof want,
             "profile: wrote %s/p-1.json: steps 2-4 (3), step 4 up to the stop at fc1/linear; "
             "'tdbg-prof %s/p-1.json' reads it\n",
             dir, dir);
    ts_has(&s, want);
    snprintf(path, sizeof path, "%s/p-1.json", dir);
    trace_load(path, &t);
    steps_are(&t, path, 2, 4, true);
    whole_steps(&t, path);
    ops_are(&t.steps[2], path, UP_TO_FC2, 1);
    ts_free(&s);

    /* before the ring is full: step 0 whole and step 1 up to the stop; no
     * NaN breakpoint set: around nan sets it */
    snprintf(cmds, sizeof cmds, "profile around nan file=%s/q.json;run", dir);
    s = ts_tdbg("--batch", cmds, "mlp", "%s --steps 6 --mode %s --inject nan@op=fc2/linear,step=1", MLP, mode);
    ts_has(&s, "at each breakpoint stop\nBreakpoint 1: the first op creating a NaN\n");
    ts_stop_is(&s, 0, "stopped: step=1 phase=forward op=fc2/linear type=Linear reason=nan "
                      "tensor=fc2/linear:out0 index=[0,0] origin=created");
    snprintf(want, sizeof want, "profile: wrote %s/q.json: steps 0-1 (2), step 1 up to the stop at fc2/linear;", dir);
    ts_has(&s, want);
    snprintf(path, sizeof path, "%s/q.json", dir);
    trace_load(path, &t);
    steps_are(&t, path, 0, 1, true);
    whole_steps(&t, path);
    ops_are(&t.steps[1], path, UP_TO_FC2, 3);
    ts_free(&s);
}
END_TEST

/* The program's own --profile with when=break: the debugger writes it at
 * the breakpoint's stop all the same, the engine knowing its spec. */
START_TEST(test_program_profile_at_stop)
{
    char dir[256], want[1024], path[512];
    tu_scratch_sub(suite_dir, dir, sizeof dir);
    ts_session s = ts_tdbg("--batch", "break nan;run;info profile", "mlp",
                           "%s --steps 6 --inject nan@op=fc2/linear,step=3 --profile 'when=break;keep=2;file=%s/w.json'",
                           MLP, dir);
    ts_stop_is(&s, 0, "stopped: step=3 phase=forward op=fc2/linear type=Linear reason=nan "
                      "tensor=fc2/linear:out0 index=[0,0] origin=created");
    snprintf(want, sizeof want,
             "profile: wrote %s/w.json: steps 2-3 (2), step 3 up to the stop at fc2/linear; "
             "'tdbg-prof %s/w.json' reads it\n",
             dir, dir);
    ts_has(&s, want);
    snprintf(want, sizeof want,
             "Profiling: recording (the program's profile), file=%s/w.json;steps=0-;ops=*;keep=2;when=break\n", dir);
    ts_has(&s, want);
    trace t;
    snprintf(path, sizeof path, "%s/w.json", dir);
    trace_load(path, &t);
    steps_are(&t, path, 2, 3, true);
    ops_are(&t.steps[1], path, UP_TO_FC2, 3);
    ts_free(&s);
}
END_TEST

/* when=break through `profile start`: written at a breakpoint's stop, not
 * at the stops of next and step; the default file name. */
START_TEST(test_when_break_breakpoints_only)
{
    char dir[256], want[1024], path[512], args[512];
    tu_scratch_sub(suite_dir, dir, sizeof dir);
    snprintf(args, sizeof args, "%s --steps 4", MLP);
    ts_session s = ts_sh("cd '%s' && '%s/debugger/tdbg' --batch -ex 'profile start when=break keep=2' "
                         "-ex 'break step 2' -ex run -ex next -ex step -ex step -ex continue -- '%s/examples/mlp' %s "
                         "</dev/null",
                         dir, TDBG_BUILDDIR, TDBG_BUILDDIR, args);
    ts_has(&s, "Profiling from step 0: file=tdbg-profile.json;steps=0-;ops=*;keep=2;when=break; the last 2 steps are "
               "written to tdbg-profile.json at each breakpoint stop\n");
    ts_stop_is(&s, 0, "stopped: step=2 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    ts_stop_is(&s, 1, "stopped: step=3 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    ts_stop_is(&s, 3, "stopped: step=3 phase=forward op=fc1/relu type=Relu reason=step tensor=- index=- origin=-");
    snprintf(want, sizeof want, "profile: wrote tdbg-profile.json: steps 1-2 (2), step 2 up to now; "
                                "'tdbg-prof tdbg-profile.json' reads it\n");
    ts_has(&s, want);
    ck_assert_int_eq(ts_count(&s, "profile: wrote"), 1);
    ck_assert_msg(!exists(dir, "tdbg-profile-1.json"), "a step stop wrote a capture:\n%s", s.out);
    snprintf(path, sizeof path, "%s/tdbg-profile.json", dir);
    trace t;
    trace_load(path, &t);
    steps_are(&t, path, 1, 2, true);
    whole_steps(&t, path);
    ck_assert_int_eq(t.steps[1].n_ops, 0); /* stopped at step 2's start */
    ts_free(&s);
}
END_TEST

/* ---- start, stop, save ------------------------------------------------------------ */

START_TEST(test_start_stop_save)
{
    char dir[256], cmds[1024], want[1024], path[512];
    tu_scratch_sub(suite_dir, dir, sizeof dir);
    /* save at step 3's start: steps 0-2 whole and 3 begun; stop: the
     * spec's file (when=always), without the step cut short (ts_tdbg
     * splits commands at ';': the spec's words are apart) */
    snprintf(cmds, sizeof cmds, "profile start file=%s/a.json keep=4;break step 3;run;profile save %s/b.json;"
                                "profile stop;continue", dir, dir);
    ts_session s = ts_tdbg("--batch", cmds, "mlp", "%s --steps 5", MLP);
    snprintf(want, sizeof want, "Profiling from step 0: file=%s/a.json;steps=0-;ops=*;keep=4;when=always; written to "
                                "%s/a.json at 'profile stop'\n", dir, dir);
    ts_has(&s, want);
    snprintf(want, sizeof want, "Wrote %s/b.json: steps 0-3 (4), step 3 up to now; 'tdbg-prof %s/b.json' reads it\n",
             dir, dir);
    ts_has(&s, want);
    snprintf(want, sizeof want, "Profile stopped; wrote %s/a.json: steps 0-2 (3); 'tdbg-prof %s/a.json' reads it\n",
             dir, dir);
    ts_has(&s, want);
    ts_lacks(&s, "tdbg: profile ended"); /* stopped: nothing more at the end */
    ts_has(&s, "final: loss=");
    trace t;
    snprintf(path, sizeof path, "%s/b.json", dir);
    trace_load(path, &t);
    steps_are(&t, path, 0, 3, true);
    whole_steps(&t, path);
    ck_assert_int_eq(t.steps[3].n_ops, 0);
    snprintf(path, sizeof path, "%s/a.json", dir);
    trace_load(path, &t);
    steps_are(&t, path, 0, 2, false);
    whole_steps(&t, path);
    reads_it(path, "a.json: 3 steps");
    ts_free(&s);

    /* the ring's bound: keep=2 of 5 steps, written at the program's end */
    snprintf(cmds, sizeof cmds, "profile start file=%s/c.json keep=2;run", dir);
    s = ts_tdbg("--batch", cmds, "mlp", "%s --steps 5", MLP);
    snprintf(want, sizeof want, "tdbg: profile ended; wrote %s/c.json: steps 3-4 (2); 'tdbg-prof %s/c.json' reads it\n",
             dir, dir);
    ts_has(&s, want);
    ts_status_is(&s, 0);
    snprintf(path, sizeof path, "%s/c.json", dir);
    trace_load(path, &t);
    steps_are(&t, path, 3, 4, false);
    whole_steps(&t, path);
    ts_free(&s);

    /* a range: the engine writes it after its last step, and says so */
    snprintf(cmds, sizeof cmds, "profile start file=%s/r.json steps=1-2;run", dir);
    s = ts_tdbg("--batch", cmds, "mlp", "%s --steps 5", MLP);
    snprintf(want, sizeof want, "profile: the steps are recorded; wrote %s/r.json: steps 1-2 (2); "
                                "'tdbg-prof %s/r.json' reads it\n", dir, dir);
    ts_has(&s, want);
    ts_lacks(&s, "tdbg: profile ended");
    snprintf(path, sizeof path, "%s/r.json", dir);
    trace_load(path, &t);
    steps_are(&t, path, 1, 2, false);
    whole_steps(&t, path);
    ts_free(&s);
}
END_TEST

/* ---- mistakes ------------------------------------------------------------------------- */

START_TEST(test_errors)
{
    char dir[256], cmds[2048], want[1024];
    tu_scratch_sub(suite_dir, dir, sizeof dir);
    snprintf(cmds, sizeof cmds,
             "info profile;profile save %s/x.json;profile stop;profile start keep=0;profile start size=3;"
             "profile start steps=7-3;profile around inf;profile around nan steps=3;profile around nan when=always;"
             "profile bogus;profile;profile stop now;profile save a b;"
             "profile start keep=2;info profile;profile save;profile save %s/y.json;profile start file=%s/z.json;"
             "profile save /nonexistent-dir/p.json;run",
             dir, dir, dir);
    ts_session s = ts_tdbg("--batch", cmds, "mlp", "%s --steps 3", MLP);
    ts_has(&s, "(tdbg) info profile\nThe profiler is off ('profile start [SPEC]' or 'profile around nan' starts it).\n");
    ts_has(&s, "error: profile save: nothing recorded ('profile start' or 'profile around nan' records first)\n");
    ts_has(&s, "error: profile stop: the profiler is not recording ('profile start' starts it)\n");
    ts_has(&s, "error: profile spec: keep=0: expected a step count from 1 to 1000\n");
    ts_has(&s, "error: profile spec: unknown key 'size' (keys: file, steps, ops, keep, when)\n");
    ts_has(&s, "error: profile spec: steps=7-3: the range ends before it starts\n");
    ts_has(&s, "error: profile around: expected 'nan', got 'inf' (usage: profile around nan [keep=K] [file=F])\n");
    ts_has(&s, "error: profile around nan: it takes keep=K and file=F only, got 'steps=3' ('profile start "
               "when=break;...' takes every key)\n");
    ts_has(&s, "error: profile around nan: it takes keep=K and file=F only, got 'when=always'");
    ts_has(&s, "error: profile: expected start, stop, save or around, got 'bogus'\n");
    ts_has(&s, "(tdbg) profile\nerror: profile: expected start, stop, save or around\n");
    ts_has(&s, "error: profile stop: unexpected argument 'now' (usage: profile stop)\n");
    ts_has(&s, "error: profile save: unexpected argument 'b' (usage: profile save [FILE])\n");
    /* recording, nothing finished yet */
    ts_has(&s, "Profiling: recording, steps=0-;ops=*;keep=2;when=always\n  0 steps recorded from step 0; the ring "
               "(keep=2) holds no step\n  no step has finished since it started\n");
    ts_has(&s, "error: profile save: which file? the spec names none (usage: profile save FILE)\n");
    ts_has(&s, "error: profile save: no step recorded yet (the profile records from step 0)\n");
    ts_has(&s, "The profile running before is replaced (its steps are dropped).\n");
    ts_has(&s, "error: profile save: no step recorded yet");
    /* nothing was written, and training went on to its end */
    ck_assert_msg(!exists(dir, "x.json") && !exists(dir, "y.json"), "%s", s.out);
    snprintf(want, sizeof want, "tdbg: profile ended; wrote %s/z.json: steps 0-2 (3)", dir);
    ts_has(&s, want);
    ts_has(&s, "final: loss=");
    ts_status_is(&s, 0);
    ts_free(&s);

    /* a file that cannot be written: the engine's reason, the session goes on */
    snprintf(cmds, sizeof cmds, "profile start;break step 1;run;profile save /nonexistent-dir/p.json;continue");
    s = ts_tdbg("--batch", cmds, "mlp", "%s --steps 3", MLP);
    ts_has(&s, "error: profile save: profile: cannot write /nonexistent-dir/p.json: No such file or directory\n");
    ts_has(&s, "final: loss=");
    ts_free(&s);
}
END_TEST

/* ---- info profile ----------------------------------------------------------------- */

/* The numbers `info profile` prints of the last finished step against the
 * trace saved at the same stop: wall, phases, data and hooks time, the
 * count of op names, and the top 5 ops with their calls and time. */
START_TEST(test_info_profile)
{
    char dir[256], cmds[1024], path[512];
    tu_scratch_sub(suite_dir, dir, sizeof dir);
    snprintf(cmds, sizeof cmds, "profile start;break step 2;run;profile save %s/i.json;info profile", dir);
    ts_session s = ts_tdbg("--batch", cmds, "mlp", "%s --steps 4", MLP);
    ts_has(&s, "Profiling: recording, steps=0-;ops=*;keep=10;when=always\n  3 steps recorded from step 0; the ring "
               "(keep=10) holds steps 0-2 (3), step 2 up to now\n");
    trace t;
    snprintf(path, sizeof path, "%s/i.json", dir);
    trace_load(path, &t);
    steps_are(&t, path, 0, 2, true);
    const trace_step *st = &t.steps[1];

    const char *at = strstr(s.out, "  last step ");
    ck_assert_msg(at != NULL, "%s", s.out);
    long long step;
    double ms, data, fwd, bwd, upd, hooks;
    int n_ops;
    ck_assert_msg(sscanf(at, "  last step %lld: %lf ms: data %lf, forward %lf, backward %lf, update %lf, hooks %lf ms; "
                             "%d ops",
                         &step, &ms, &data, &fwd, &bwd, &upd, &hooks, &n_ops) == 8,
                  "%s", at);
    ck_assert_int_eq(step, 1);
    const double tol = 0.0011; /* both are the same nanoseconds, printed to 3 decimals of a ms */
    ck_assert_msg(fabs(ms - st->ms) < tol, "wall %.3f, trace %.6f", ms, st->ms);
    ck_assert_msg(fabs(fwd - st->phase_ms[0]) < tol, "forward %.3f, trace %.6f", fwd, st->phase_ms[0]);
    ck_assert_msg(fabs(bwd - st->phase_ms[1]) < tol, "backward %.3f, trace %.6f", bwd, st->phase_ms[1]);
    ck_assert_msg(fabs(upd - st->phase_ms[2]) < tol, "update %.3f, trace %.6f", upd, st->phase_ms[2]);
    ck_assert_msg(fabs(data - st->data_ns / 1e6) < tol, "data %.3f, trace %lld ns", data, st->data_ns);
    ck_assert_msg(fabs(hooks - st->hooks_ns / 1e6) < tol, "hooks %.3f, trace %lld ns", hooks, st->hooks_ns);
    ck_assert_msg(st->hooks_ns > 0, "the debugger's hooks took no time");
    ck_assert_int_eq(n_ops, 18); /* every op of the MLP's step has a name of its own */

    /* the trace's ops of step 1 by name: total time and calls */
    char names[MAX_OPS][64];
    double total[MAX_OPS] = { 0 };
    int calls[MAX_OPS] = { 0 }, n = 0;
    for (int i = 0; i < st->n_ops; i++) {
        int k = 0;
        while (k < n && strcmp(names[k], st->ops[i]) != 0)
            k++;
        if (k == n)
            snprintf(names[n++], sizeof names[0], "%s", st->ops[i]);
        total[k] += st->op_ms[i];
        calls[k]++;
    }
    ck_assert_int_eq(n, n_ops);
    at = strstr(at, "  top 5 ops by time:\n");
    ck_assert_msg(at != NULL, "%s", s.out);
    at = strchr(strchr(at, '\n') + 1, '\n') + 1; /* past the header line */
    double printed_min = INFINITY;
    bool shown[MAX_OPS] = { false };
    for (int r = 0; r < 5; r++) {
        double row_ms;
        int row_calls;
        char phase[16], type[32], name[64];
        ck_assert_msg(sscanf(at, " %lf %d %15s %31s %63s", &row_ms, &row_calls, phase, type, name) == 5, "row %d: %s",
                      r, at);
        int k = 0;
        while (k < n && strcmp(names[k], name) != 0)
            k++;
        ck_assert_msg(k < n, "row %d: %s is no op of step 1", r, name);
        ck_assert_msg(fabs(row_ms - total[k]) < tol && row_calls == calls[k], "%s: %.3f ms %d calls, trace %.6f %d",
                      name, row_ms, row_calls, total[k], calls[k]);
        ck_assert_msg(row_ms <= printed_min + tol, "row %d (%s) is out of order", r, name);
        printed_min = fmin(printed_min, row_ms);
        shown[k] = true;
        at = strchr(at, '\n') + 1;
    }
    for (int k = 0; k < n; k++) /* no op left out takes longer than the shortest shown */
        ck_assert_msg(shown[k] || total[k] <= printed_min + tol, "%s (%.3f ms) is not in the top 5", names[k],
                      total[k]);
    ts_free(&s);
}
END_TEST

/* ---- the entry: lookup, help, completion ---------------------------------------- */

/* The words Tab offers for the last word of line, space-separated. */
static void completes(const char *line, const char *want)
{
    char buf[128], list[512] = "";
    snprintf(buf, sizeof buf, "%s", line);
    const char *space = strrchr(buf, ' ');
    const int start = space ? (int)(space - buf) + 1 : 0;
    char *saved = rl_line_buffer;
    rl_line_buffer = buf;
    char **m = dbg_complete(buf + start, start, (int)strlen(buf));
    rl_line_buffer = saved;
    for (int i = m && m[1] ? 1 : 0; m && m[i]; i++) {
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", used ? " " : "", m[i]);
    }
    for (int i = 0; m && m[i]; i++)
        free(m[i]);
    free(m);
    ck_assert_msg(strcmp(list, want) == 0, "'%s' completes to '%s', want '%s'", line, list, want);
}

START_TEST(test_entry)
{
    memset(&dbg, 0, sizeof dbg);
    dbg.step = -1;
    ck_assert_ptr_eq(dbg_cmd_find("prof"), dbg_cmd_find("profile"));
    ck_assert_str_eq(dbg_cmd_find("profile")->usage, "profile start [SPEC]|stop|save [FILE]|around nan [keep=K] "
                                                      "[file=F]");
    ck_assert(!ts_exec("help profile"));
    ck_assert_msg(strstr(ts_captured, "around nan: when=break with a ring of K steps (10) into F (tdbg-profile.json)"),
                  "%s", ts_captured);
    completes("profile ", "start stop save around");
    completes("profile a", "around");
    completes("profile around n", "nan");
    completes("profile around nan ke", "keep=");
    completes("info prof", "profile");
}
END_TEST

Suite *suite_dbg_prof(void)
{
    Suite *s = suite_create("dbg_prof");
    TCase *tc = tcase_create("profile");
    tcase_add_unchecked_fixture(tc, suite_dir_make, suite_dir_remove);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_entry);
    tcase_add_loop_test(tc, test_around_nan, 0, 2);
    tcase_add_test(tc, test_program_profile_at_stop);
    tcase_add_test(tc, test_when_break_breakpoints_only);
    tcase_add_test(tc, test_start_stop_save);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_info_profile);
    suite_add_tcase(s, tc);
    return s;
}
