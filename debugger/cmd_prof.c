/*
 * cmd_prof.c — the profiler from the debugger (engine/te.h te_profile_*;
 * docs/debugger.md "Profiling from the debugger"): `profile start [SPEC]`,
 * `profile stop`, `profile save [FILE]`, `profile around nan [keep=K]
 * [file=F]` and `info profile`.
 *
 * A profile started here with when=break (what `profile around nan`
 * starts) is written at every stop a breakpoint makes (dbg_prof_stopped,
 * from session.c's stop(), before the stop's report): the ring's last
 * K-1 steps and the step stopped in up to the stop. A stop of step, next,
 * finish, until or Ctrl-C writes nothing; `profile save` writes at any.
 *
 * A program's own profile (--profile with when=break) is written at the
 * same stops. What the messages say of the ring, its spec, steps and
 * files comes from the engine (te_profile_info_get), whoever started it.
 */
#include "cmd.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>

#define PROF_DEFAULT_FILE "tdbg-profile.json"

/* What the debugger itself keeps: whether it started the profile (and
 * so ends it at exit), and whether the profile was recording when it last
 * looked (the engine ends a steps=A-B range by itself, said once). */
static bool started_here, seen_recording;

static te_profile_info info(void)
{
    te_profile_info i;
    te_profile_info_get(&i);
    return i;
}

/* The spec in the parser's words, every key shown. */
static void spec_text(const te_profile_opts *o, char *buf, size_t n)
{
    char steps[64];
    if (o->last < 0)
        snprintf(steps, sizeof steps, "%lld-", (long long)o->first);
    else if (o->last == o->first)
        snprintf(steps, sizeof steps, "%lld", (long long)o->first);
    else
        snprintf(steps, sizeof steps, "%lld-%lld", (long long)o->first, (long long)o->last);
    snprintf(buf, n, "%s%s%ssteps=%s;ops=%s;keep=%d;when=%s", o->file[0] ? "file=" : "", o->file,
             o->file[0] ? ";" : "", steps, o->ops[0] ? o->ops : "*", o->keep,
             o->when == TE_PROF_BREAK ? "break" : "always");
}

/* The first step recorded, or before one the step recording starts at. */
static int64_t recorded_from(const te_profile_info *i)
{
    if (i->from >= 0)
        return i->from;
    int64_t next = dbg.in_step ? dbg.step : dbg.step + 1;
    return next > i->o.first ? next : i->o.first;
}

/* The steps a save now writes, *a to *b, and whether the last is the step
 * under way (written up to now); false when none. */
static bool held_steps(int64_t *a, int64_t *b, bool *partial)
{
    te_profile_info i = info();
    if (!i.started || i.first < 0)
        return false;
    *a = i.first;
    *b = i.last;
    *partial = i.partial;
    return true;
}

/* "steps 1-3 (3), step 3 up to the stop at fc2/linear" */
static void held_text(char *buf, size_t n)
{
    int64_t a, b;
    bool partial;
    if (!held_steps(&a, &b, &partial)) {
        snprintf(buf, n, "no step");
        return;
    }
    int len = a == b ? snprintf(buf, n, "step %lld", (long long)a)
                     : snprintf(buf, n, "steps %lld-%lld (%lld)", (long long)a, (long long)b, (long long)(b - a + 1));
    const dbg_stop *s = dbg_last_stop();
    if (partial && len > 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, ", step %lld up to %s%s", (long long)b,
                 s && s->active && s->op[0] ? "the stop at " : "now", s && s->active && s->op[0] ? s->op : "");
}

static void say_written(const char *what, const char *file)
{
    char held[TE_NAME_MAX + 128];
    held_text(held, sizeof held);
    fprintf(dbg_out, "%s %s: %s; 'tdbg-prof %s' reads it\n", what, file, held, file);
}

/* The engine ended a steps=A-B range by itself after step B (writing it
 * with when=always and a file): say so once. */
static void note_range_end(void)
{
    if (!seen_recording || te_profile_active())
        return;
    seen_recording = false;
    te_profile_info i = info();
    if (i.o.when == TE_PROF_ALWAYS && i.o.file[0] && i.last_file[0])
        say_written("profile: the steps are recorded; wrote", i.last_file);
}

void dbg_prof_step_begin(void) { note_range_end(); }

/* Writes the next capture (te_profile_save(NULL)); false after an error. */
static bool save_capture(const char *cmd)
{
    if (te_profile_save(NULL) != TE_OK) {
        dbg_error("%s: %s", cmd, te_error());
        return false;
    }
    return true;
}

void dbg_prof_stopped(bool by_breakpoint)
{
    note_range_end();
    te_profile_info i = info();
    if (!by_breakpoint || !i.recording || i.o.when != TE_PROF_BREAK)
        return;
    if (save_capture("profile"))
        say_written("profile: wrote", info().last_file);
}

/* quit, the end of a batch script, the program's end: a profile with
 * when=always and a file is written, its steps finished so far. */
static void stop_at_exit(void)
{
    note_range_end();
    if (!started_here || !te_profile_active())
        return;
    seen_recording = false; /* the step under way is not written */
    const te_profile_info i = info();
    te_profile_step last;
    bool writes = i.o.when == TE_PROF_ALWAYS && i.o.file[0] && te_profile_last(&last, NULL, 0) == TE_OK;
    if (te_profile_stop() != TE_OK)
        fprintf(dbg_out, "tdbg: profile: %s\n", te_error());
    else if (writes)
        say_written("tdbg: profile ended; wrote", info().last_file);
}

void dbg_prof_detach(void)
{
    stop_at_exit();
    started_here = seen_recording = false;
}

/* Starts the engine's profiler with o, replacing one running. */
static bool start(const te_profile_opts *o)
{
    static bool registered;
    if (te_profile_active()) {
        note_range_end();
        const te_profile_info was = info();
        fprintf(dbg_out, "The profile running before%s is replaced%s.\n", started_here ? "" : " (the program's)",
                was.o.when == TE_PROF_ALWAYS && was.o.file[0] ? " (written first)" : " (its steps are dropped)");
        if (te_profile_stop() != TE_OK) /* with when=always and a file: written */
            fprintf(dbg_out, "warning: %s\n", te_error());
    }
    if (te_profile_start(o) != TE_OK) {
        dbg_error("profile: %s", te_error());
        return false;
    }
    started_here = seen_recording = true;
    if (!registered) {
        atexit(stop_at_exit);
        registered = true;
    }
    char text[1024];
    spec_text(o, text, sizeof text);
    const te_profile_info now = info();
    fprintf(dbg_out, "Profiling from step %lld: %s", (long long)recorded_from(&now), text);
    if (o->when == TE_PROF_BREAK)
        fprintf(dbg_out, "; the last %d steps are written to %s at each breakpoint stop\n", o->keep, o->file);
    else if (o->file[0])
        fprintf(dbg_out, "; written to %s at 'profile stop'%s\n", o->file,
                o->last >= 0 ? " or after the range's last step" : "");
    else
        fprintf(dbg_out, "; 'profile save FILE' writes the last %d steps\n", o->keep);
    return true;
}

/* The words of a spec as the parser takes it: "keep=3 file=a.json" and
 * "keep=3;file=a.json" alike. */
static void join_words(const char *args, char *spec, size_t n)
{
    size_t len = 0;
    char w[600];
    spec[0] = 0;
    while ((args = dbg_skip_space(args))[0] && len + 1 < n) {
        args = dbg_word(args, w, sizeof w);
        len += (size_t)snprintf(spec + len, n - len, "%s%s", len ? ";" : "", w);
    }
}

static bool profile_start(const char *args)
{
    char spec[1024];
    join_words(args, spec, sizeof spec);
    te_profile_opts o;
    if (te_profile_parse(spec, &o) != TE_OK) {
        dbg_error("%s", te_error());
        return false;
    }
    if (o.when == TE_PROF_BREAK && !o.file[0])
        snprintf(o.file, sizeof o.file, "%s", PROF_DEFAULT_FILE);
    start(&o);
    return false;
}

/* `profile around nan [keep=K] [file=F]`: when=break, with a `break nan`
 * set when no NaN breakpoint is armed. */
static bool profile_around(const char *args)
{
    char w[32];
    const char *rest = dbg_word(args, w, sizeof w);
    if (strcmp(w, "nan") != 0) {
        dbg_error("profile around: expected 'nan'%s%s%s (usage: profile around nan [keep=K] [file=F])",
                  w[0] ? ", got '" : "", w, w[0] ? "'" : "");
        return false;
    }
    char spec[1024];
    join_words(rest, spec, sizeof spec);
    te_profile_opts o;
    if (te_profile_parse(spec, &o) != TE_OK) {
        dbg_error("%s", te_error());
        return false;
    }
    if (o.first != 0 || o.last >= 0 || o.ops[0] || strstr(spec, "when=")) {
        dbg_error("profile around nan: it takes keep=K and file=F only, got '%s' ('profile start "
                  "when=break;...' takes every key)",
                  spec);
        return false;
    }
    o.when = TE_PROF_BREAK;
    if (!o.file[0])
        snprintf(o.file, sizeof o.file, "%s", PROF_DEFAULT_FILE);
    if (!start(&o))
        return false;
    for (int i = 0; i < dbg.n_breaks; i++)
        if (dbg.breaks[i].enabled && (dbg.breaks[i].kind == BK_NAN || dbg.breaks[i].kind == BK_NONFINITE))
            return false;
    dbg_execute("break nan");
    return false;
}

static bool profile_stop(void)
{
    note_range_end();
    if (!te_profile_active()) {
        dbg_error("profile stop: the profiler is not recording ('profile start' starts it)");
        return false;
    }
    seen_recording = false; /* a step under way is cut short: not written */
    const te_profile_info i = info();
    te_profile_step last;
    bool writes = i.o.when == TE_PROF_ALWAYS && i.o.file[0] && te_profile_last(&last, NULL, 0) == TE_OK;
    te_status st = te_profile_stop();
    if (st != TE_OK)
        dbg_error("profile stop: %s", te_error());
    else if (writes) {
        say_written("Profile stopped; wrote", info().last_file);
    } else {
        char held[TE_NAME_MAX + 128];
        held_text(held, sizeof held);
        int64_t a, b;
        bool partial;
        const bool any = held_steps(&a, &b, &partial);
        fprintf(dbg_out, "Profile stopped: %s recorded%s\n", held,
                !any ? "" : a == b ? "; 'profile save FILE' writes it" : "; 'profile save FILE' writes them");
    }
    return false;
}

static bool profile_save(const char *args)
{
    char file[sizeof ((te_profile_opts *)0)->file], extra[64];
    const char *rest = dbg_word(args, file, sizeof file);
    if (rest[0]) {
        dbg_word(rest, extra, sizeof extra);
        dbg_error("profile save: unexpected argument '%s' (usage: profile save [FILE])", extra);
        return false;
    }
    note_range_end();
    int64_t a, b;
    bool partial;
    const te_profile_info i = info();
    if (!i.started) {
        dbg_error("profile save: nothing recorded ('profile start' or 'profile around nan' records first)");
        return false;
    }
    if (!file[0] && !i.o.file[0]) {
        dbg_error("profile save: which file? the spec names none (usage: profile save FILE)");
        return false;
    }
    if (!held_steps(&a, &b, &partial)) {
        dbg_error("profile save: no step recorded yet (the profile records from step %lld)",
                  (long long)recorded_from(&i));
        return false;
    }
    if (!file[0]) {
        if (save_capture("profile save"))
            say_written("Wrote", info().last_file);
        return false;
    }
    if (te_profile_save(file) != TE_OK) {
        dbg_error("profile save: %s", te_error());
        return false;
    }
    say_written("Wrote", file);
    return false;
}

static bool cmd_profile(const char *args)
{
    char w[32];
    const char *rest = dbg_word(args, w, sizeof w);
    if (strcmp(w, "start") == 0)
        return profile_start(rest);
    if (strcmp(w, "around") == 0)
        return profile_around(rest);
    if (strcmp(w, "save") == 0)
        return profile_save(rest);
    if (strcmp(w, "stop") == 0 && !rest[0])
        return profile_stop();
    if (strcmp(w, "stop") == 0) {
        dbg_word(rest, w, sizeof w);
        dbg_error("profile stop: unexpected argument '%s' (usage: profile stop)", w);
        return false;
    }
    dbg_error("profile: expected start, stop, save or around%s%s%s", w[0] ? ", got '" : "", w, w[0] ? "'" : "");
    return false;
}

#define INFO_TOP_OPS 5

void dbg_info_profile(void);
void dbg_info_profile(void)
{
    note_range_end();
    const te_profile_info i = info();
    if (!i.started) {
        fprintf(dbg_out, "The profiler is off ('profile start [SPEC]' or 'profile around nan' starts it).\n");
    } else {
        char text[1024], held[TE_NAME_MAX + 128];
        spec_text(&i.o, text, sizeof text);
        held_text(held, sizeof held);
        const int64_t from = recorded_from(&i);
        const long long n = i.last >= 0 ? (long long)(i.last - from + 1) : 0;
        fprintf(dbg_out, "Profiling: %s%s, %s\n  %lld step%s recorded from step %lld; the ring (keep=%d) holds %s\n",
                i.recording ? "recording" : "stopped", started_here ? "" : " (the program's profile)", text, n,
                n == 1 ? "" : "s", (long long)from, i.o.keep, held);
        if (i.last_file[0])
            fprintf(dbg_out, "  last written to %s\n", i.last_file);
    }
    te_profile_step s;
    te_profile_op ops[INFO_TOP_OPS];
    if (te_profile_last(&s, ops, INFO_TOP_OPS) != TE_OK) {
        if (i.started)
            fprintf(dbg_out, "  no step has finished since it started\n");
        return;
    }
    fprintf(dbg_out, "  last step %lld: %.3f ms: data %.3f, forward %.3f, backward %.3f, update %.3f, hooks %.3f ms; "
                     "%d ops\n",
            (long long)s.step, s.ms, s.data_ms, s.phase_ms[TE_PHASE_FORWARD], s.phase_ms[TE_PHASE_BACKWARD],
            s.phase_ms[TE_PHASE_UPDATE], s.hooks_ms, s.n_ops);
    const int n = s.n_ops < INFO_TOP_OPS ? s.n_ops : INFO_TOP_OPS;
    if (!n)
        return;
    fprintf(dbg_out, "  top %d ops by time:\n  %10s %6s  %-9s %-16s %s\n", n, "ms", "calls", "phase", "type", "op");
    for (int k = 0; k < n; k++)
        fprintf(dbg_out, "  %10.3f %6d  %-9s %-16s %s\n", ops[k].ms, ops[k].calls, te_phase_name(ops[k].phase),
                ops[k].type, ops[k].name);
}

const dbg_cmd dbg_cmds_prof[] = {
    { .name = "profile", .usage = "profile start [SPEC]|stop|save [FILE]|around nan [keep=K] [file=F]",
      .help = "record where each step's time goes (per op and phase), as a Chrome trace tdbg-prof reads\n"
      "start: SPEC as for --profile, file=P;steps=A-B;ops=GLOB;keep=K;when=always|break (words or\n"
      "';'-separated); keep the last K steps (10), write them to P at 'profile stop' (when=always)\n"
      "or at each breakpoint stop (when=break; P defaults to " PROF_DEFAULT_FILE ", then P-1.json...).\n"
      "stop: end recording. save: write the last K steps now, with the step under way up to now.\n"
      "around nan: when=break with a ring of K steps (10) into F (" PROF_DEFAULT_FILE "), and\n"
      "'break nan' unless a NaN breakpoint is set. 'info profile' shows the last step's times.",
      .args = { { .words = DBG_WORDS("start", "stop", "save", "around") },
                { .words = DBG_WORDS("nan", "keep=", "file=", "steps=", "ops=", "when=break", "when=always") } },
      .max_words = DBG_WORDS_ANY, .run = cmd_profile },
    { .name = NULL },
};
