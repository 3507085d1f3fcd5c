/*
 * cmd_record.c — time travel from the debugger (engine/te.h's "time
 * travel"; docs/debugger.md "Time travel"): `record`, `info record`,
 * `rewind STEP`, `reverse-step`, `reverse-next`, `replay A-B with SPEC`,
 * `locate [STEP]`, and the stops the engine's rewound, diverged and located
 * hooks make.
 *
 * Recording starts at the engine's defaults when the debugger starts; at
 * the first step, a program that does not take part (docs/engine.md "The
 * contract with the training loop") has it stopped again, so it pays
 * nothing. Every command that goes back is te_rewind and a resume: the
 * engine unwinds the step stopped in, restores the nearest snapshot at the
 * next te_step_begin, runs silently up to the target and calls `rewound`
 * at its begin. What the session does there (stop, step to an op, run a
 * replay) was set by the command and is asked for by the step's begin
 * hook (dbg_record_step_begin), after the session is in the step.
 */
#include "cmd.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>

#define INFO_STEPS 32      /* recorded steps `info record` lists, the newest */
#define PROFILE_FILE "tdbg-profile.json"

typedef enum {
    ARRIVE_STOP,    /* stop at the target's begin with `reason` */
    ARRIVE_STEP_TO, /* step to the target's op number `ops` and stop after it (reverse-step) */
    ARRIVE_RUN,     /* run on (a replay) */
} arrive_kind;

static struct {
    bool checked;          /* the first step looked whether the program takes part */
    bool not_taking_part;  /* it did not: recording was stopped */
    arrive_kind arrive;
    const char *reason;
    int64_t ops;
    bool arrived;          /* `rewound` came; the step's begin hook acts on it */
    /* a replay A-B under way */
    bool replaying, replay_dump;
    int64_t replay_a, replay_b;
    /* the last departure, for `locate` and the stop's report */
    int64_t diverged_step;
    double rec_loss, replay_loss;
    uint64_t rec_sum, replay_sum;
    te_record_located located;
} T = { .arrive = ARRIVE_STOP, .reason = "rewind", .diverged_step = -1 };

void dbg_record_detach(bool was_recording)
{
    if (!was_recording && te_record_active())
        te_record_stop();
    memset(&T, 0, sizeof T);
    T.arrive = ARRIVE_STOP;
    T.reason = "rewind";
    T.diverged_step = -1;
}

void dbg_record_setup(void)
{
    if (te_record_start(NULL) != TE_OK)
        fprintf(dbg_out, "warning: time travel: %s\n", te_error());
}

/* The snapshot a rewind to step starts from: the newest at or before it. */
static int64_t snapshot_for(int64_t step)
{
    te_record_entry e[1024];
    int n = te_record_list(e, 1024);
    int64_t from = -1;
    for (int i = 0; i < n && i < 1024; i++)
        if (e[i].step <= step)
            from = e[i].step;
    return from;
}

/* ---- replays ------------------------------------------------------------------ */

/* The replay's dump or profile ends (at B's end, or a rewind cancels it). */
static void replay_end(void)
{
    if (!T.replaying)
        return;
    T.replaying = false;
    if (T.replay_dump) {
        if (dbg_dump_running())
            dbg_dump_off("replay");
        return;
    }
    te_profile_info i;
    te_profile_info_get(&i);
    if (i.recording)
        te_profile_stop(); /* with its file: written */
    te_profile_info_get(&i);
    if (i.last_file[0])
        fprintf(dbg_out, "Profile of steps %lld-%lld written to %s; 'tdbg-prof %s' reads it\n",
                (long long)T.replay_a, (long long)T.replay_b, i.last_file, i.last_file);
}

const char *dbg_record_step_begin(int64_t step)
{
    if (!T.checked) {
        T.checked = true;
        if (te_record_active() && !te_record_participating()) {
            te_record_stop(); /* nothing a rewind could use: no cost */
            T.not_taking_part = true;
        }
    }
    if (T.replaying && step == T.replay_b + 1 && !T.arrived) {
        replay_end();
        return "replay";
    }
    if (!T.arrived)
        return NULL;
    T.arrived = false;
    switch (T.arrive) {
    case ARRIVE_STEP_TO:
        dbg.mode = RUN_STEP;
        dbg.repeat = T.ops;
        dbg.reversing = true;
        return NULL;
    case ARRIVE_RUN:
        dbg.mode = RUN_GO;
        return NULL;
    case ARRIVE_STOP:
        break;
    }
    return T.reason;
}

void dbg_on_rewound(int64_t step, void *user)
{
    (void)step;
    (void)user;
    T.arrived = true;
}

/* ---- departures and locate ------------------------------------------------------ */

static void fill_diverged(dbg_stop *s)
{
    s->rec_loss = T.rec_loss;
    s->replay_loss = T.replay_loss;
    s->rec_sum = T.rec_sum;
    s->replay_sum = T.replay_sum;
}

void dbg_on_diverged(int64_t step, double recorded_loss, double replayed_loss, uint64_t recorded_sum,
                     uint64_t replayed_sum, void *user)
{
    (void)user;
    T.diverged_step = step;
    T.rec_loss = recorded_loss;
    T.replay_loss = replayed_loss;
    T.rec_sum = recorded_sum;
    T.replay_sum = replayed_sum;
    dbg.step = step; /* also in a silent step, which the session did not see begin */
    dbg_stop_at("diverged", fill_diverged);
}

static void fill_located(dbg_stop *s)
{
    s->has_located = true;
    s->located = T.located;
    if (T.located.found) {
        s->phase = T.located.phase;
        snprintf(s->op, sizeof s->op, "%s", T.located.op);
        snprintf(s->type, sizeof s->type, "%s", T.located.type);
    }
}

void dbg_on_located(const te_record_located *r, void *user)
{
    (void)user;
    T.located = *r;
    dbg.step = r->step;
    dbg_stop_at("located", fill_located);
}

/* ---- going back ---------------------------------------------------------------- */

/* te_rewind(step), its error printed as the engine words it; on success
 * the arrival is set and training resumes towards it. */
static bool go_back(int64_t step, arrive_kind arrive, const char *reason, int64_t ops, const char *what)
{
    if (te_rewind(step) != TE_OK) {
        dbg_error("%s", te_error());
        return false;
    }
    replay_end(); /* a replay under way is cut short */
    T.arrive = arrive;
    T.reason = reason;
    T.ops = ops;
    T.arrived = false;
    fprintf(dbg_out, "%s: back to step %lld from the snapshot of step %lld\n", what, (long long)step,
            (long long)snapshot_for(step));
    dbg.started = true;
    dbg.mode = RUN_GO;
    return true;
}

static bool cmd_rewind(const char *args)
{
    long long step;
    if (!args[0]) {
        dbg_error("rewind: which step? (usage: rewind STEP)");
        return false;
    }
    if (!dbg_parse_int(args, "rewind STEP", 0, &step))
        return false;
    return go_back(step, ARRIVE_STOP, "rewind", 0, "rewind");
}

/* gdb's reverse-next: to the start of the previous step. */
static bool cmd_reverse_next(const char *args)
{
    (void)args;
    if (dbg.step < 1) {
        dbg_error("reverse-next: at step %lld, no step ran before it", (long long)(dbg.step < 0 ? 0 : dbg.step));
        return false;
    }
    return go_back(dbg.step - 1, ARRIVE_STOP, "reverse-next", 0, "reverse-next");
}

/* gdb's reverse-step: back one op. Stopped at an op (the step's k-th seen),
 * to the end of the op before it, k-1; between ops after k of them, to the
 * k-th; at the step's first op or begin, to the previous step's last op
 * (its count as the session last saw a whole step). */
static bool cmd_reverse_step(const char *args)
{
    (void)args;
    const int64_t k = dbg.in_step ? (dbg_stopped_at() ? dbg.n_ops - 1 : dbg.n_ops) : 0;
    if (k > 0)
        return go_back(dbg.step, ARRIVE_STEP_TO, "reverse-step", k, "reverse-step");
    if (dbg.step < 1) {
        dbg_error("reverse-step: at the first op of step %lld, no op ran before it",
                  (long long)(dbg.step < 0 ? 0 : dbg.step));
        return false;
    }
    if (dbg.n_last_ops == 0) {
        dbg_error("reverse-step: the ops of step %lld were not seen one by one; 'reverse-next' goes to its start",
                  (long long)(dbg.step - 1));
        return false;
    }
    return go_back(dbg.step - 1, ARRIVE_STEP_TO, "reverse-step", dbg.n_last_ops, "reverse-step");
}

/* "A-B" or "A" into *a, *b; false after an error. */
static bool parse_range(const char *w, long long *a, long long *b)
{
    char *end;
    *a = strtoll(w, &end, 10);
    *b = *a;
    if (end != w && *end == '-')
        *b = strtoll(end + 1, &end, 10);
    if (end == w || *end || *a < 0 || *b < *a) {
        dbg_error("replay: expected steps A-B (A <= B) or A, got '%s' (usage: replay A-B with dump SPEC|profile SPEC)",
                  w);
        return false;
    }
    return true;
}

/* `replay A-B with dump SPEC` / `with profile SPEC` (also dump=SPEC): the
 * spec's steps are the replay's, so it must not name any. */
static bool cmd_replay(const char *args)
{
    char range[64], with[16], kind[600];
    const char *rest = dbg_word(args, range, sizeof range);
    rest = dbg_word(rest, with, sizeof with);
    long long a, b;
    if (!parse_range(range, &a, &b))
        return false;
    size_t klen = strcspn(rest, " \t=");
    snprintf(kind, sizeof kind, "%.*s", (int)klen, rest);
    const char *spec = dbg_skip_space(rest + klen + (rest[klen] == '=' ? 1 : 0));
    const bool dump = strcmp(kind, "dump") == 0, prof = strcmp(kind, "profile") == 0;
    if (strcmp(with, "with") != 0 || (!dump && !prof) || !spec[0]) {
        dbg_error("replay: expected 'with dump SPEC' or 'with profile SPEC' after the steps, got '%s' (usage: replay "
                  "A-B with dump SPEC|profile SPEC)", dbg_skip_space(args + strlen(range) + 1));
        return false;
    }
    if (strstr(spec, "steps=")) {
        dbg_error("replay: the steps are the replay's (%lld-%lld): leave steps= out of the spec", a, b);
        return false;
    }
    char full[1200];
    snprintf(full, sizeof full, "%s;steps=%lld-%lld", spec, a, b);
    te_profile_opts po;
    if (dump && dbg_dump_running()) {
        dbg_error("replay: a dump is running; 'dump off' first (the replay writes a dump of its own)");
        return false;
    }
    if (prof) {
        te_profile_info i;
        te_profile_info_get(&i);
        if (i.recording) {
            dbg_error("replay: a profile is recording; 'profile stop' first (the replay records one of its own)");
            return false;
        }
        if (te_profile_parse(full, &po) != TE_OK) {
            dbg_error("replay: %s", te_error());
            return false;
        }
        if (!po.file[0])
            snprintf(po.file, sizeof po.file, "%s", PROFILE_FILE);
        po.when = TE_PROF_ALWAYS; /* written after step B */
    }
    if (!go_back(a, ARRIVE_RUN, NULL, 0, "replay"))
        return false;
    const bool started = dump ? dbg_dump_begin(full, a) : te_profile_start(&po) == TE_OK;
    if (!started) {
        if (prof)
            dbg_error("replay: %s", te_error());
        T.arrive = ARRIVE_STOP; /* the rewind stands: stop at A instead */
        T.reason = "rewind";
        return true;
    }
    if (prof)
        fprintf(dbg_out, "Profiling steps %lld-%lld into %s\n", a, b, po.file);
    T.replaying = true;
    T.replay_dump = dump;
    T.replay_a = a;
    T.replay_b = b;
    return true;
}

static bool cmd_locate(const char *args)
{
    long long step = T.diverged_step;
    if (args[0] && !dbg_parse_int(args, "locate STEP", 0, &step))
        return false;
    if (step < 0) {
        dbg_error("locate: which step? no replay has diverged yet (usage: locate [STEP])");
        return false;
    }
    if (te_record_locate(step) != TE_OK) {
        dbg_error("%s", te_error());
        return false;
    }
    replay_end();
    T.arrived = false;
    fprintf(dbg_out, "locate: replaying step %lld twice from its start, every op's outputs checksummed\n", step);
    dbg.started = true;
    dbg.mode = RUN_GO;
    return true;
}

/* ---- record and info record ------------------------------------------------------- */

static void say_opts(const char *lead)
{
    te_record_opts o;
    te_record_pace p;
    te_record_opts_get(&o);
    te_record_pace_get(&p);
    char why[160] = "";
    if (!o.every && p.snap_ms > 0 && p.step_ms > 0)
        snprintf(why, sizeof why, " (the default %d x%d: a snapshot takes %.1f ms, a step %.1f ms)", TE_RECORD_EVERY,
                 p.stretch, p.snap_ms, p.step_ms);
    else if (!o.every)
        snprintf(why, sizeof why, " (the default: stretched while a snapshot costs over %.1f%% of the steps)",
                 100 * TE_RECORD_SNAP_SHARE);
    fprintf(dbg_out, "%sa snapshot every %d steps%s, the last %d kept, at most %.1f MB\n", lead, p.every, why, o.keep,
            (double)o.budget_bytes / (1 << 20));
}

/* `record off` | `record [every K] [keep N] [budget MB]`: words not given
 * keep the options in force. */
static bool cmd_record(const char *args)
{
    if (strcmp(args, "off") == 0) {
        if (!te_record_active()) {
            dbg_error("record off: not recording");
            return false;
        }
        te_record_stop();
        fprintf(dbg_out, "Recording stopped; its snapshots and steps are dropped.\n");
        return false;
    }
    if (T.not_taking_part) {
        dbg_error("record: this program does not take part in time travel: the engine cannot put back its loop's "
                  "own state; it must register it with te_record_host() (docs/engine.md \"Time travel\")");
        return false;
    }
    te_record_opts o;
    te_record_opts_get(&o);
    char key[32], val[64];
    while (args[0]) {
        args = dbg_word(args, key, sizeof key);
        if (!args[0]) {
            dbg_error("record: '%s' needs a value (usage: record [every K] [keep N] [budget MB] | record off)", key);
            return false;
        }
        args = dbg_word(args, val, sizeof val);
        long long v;
        if (strcmp(key, "every") != 0 && strcmp(key, "keep") != 0 && strcmp(key, "budget") != 0) {
            dbg_error("record: unknown '%s'; expected every, keep or budget (usage: record [every K] [keep N] "
                      "[budget MB] | record off)", key);
            return false;
        }
        if (!dbg_parse_int(val, key, 1, &v))
            return false;
        if (strcmp(key, "every") == 0)
            o.every = (int)(v > 1000000 ? 1000000 : v);
        else if (strcmp(key, "keep") == 0)
            o.keep = (int)(v > 100000 ? 100000 : v);
        else
            o.budget_bytes = (size_t)v << 20;
    }
    if (te_record_start(&o) != TE_OK) {
        dbg_error("record: %s", te_error());
        return false;
    }
    say_opts("Recording from the next step: ");
    return false;
}

void dbg_info_record(void);
void dbg_info_record(void)
{
    if (!te_record_active()) {
        fprintf(dbg_out, "Not recording%s.\n",
                T.not_taking_part ? ": this program does not take part in time travel (docs/engine.md \"Time "
                                    "travel\")"
                                  : " ('record' starts it)");
        return;
    }
    say_opts("Recording: ");
    te_record_entry e[1024];
    const int n = te_record_list(e, 1024);
    size_t used = 0;
    for (int i = 0; i < n && i < 1024; i++)
        used += e[i].bytes;
    te_record_opts o;
    te_record_opts_get(&o);
    fprintf(dbg_out, "snapshots: %d, %.3f MB of the %.1f MB budget\n", n, (double)used / (1 << 20),
            (double)o.budget_bytes / (1 << 20));
    for (int i = 0; i < n && i < 1024; i++)
        fprintf(dbg_out, "  step %-8lld %10.3f MB\n", (long long)e[i].step, (double)e[i].bytes / (1 << 20));
    /* the recorded steps, the newest INFO_STEPS of them */
    const int64_t now = te_step();
    int64_t first = -1, last = -1, count = 0;
    /* recorded steps are consecutive; after a rewind they go past the step now */
    for (int64_t s = 0; s <= now || s == last + 1; s++)
        if (te_record_step_info(s, NULL, NULL) == TE_OK) {
            if (first < 0)
                first = s;
            last = s;
            count++;
        }
    te_error_clear();
    if (!count) {
        fprintf(dbg_out, "steps recorded: none yet\n");
        return;
    }
    fprintf(dbg_out, "steps recorded: %lld (%lld to %lld)%s\n", (long long)count, (long long)first,
            (long long)last, count > INFO_STEPS ? ", the newest listed" : "");
    int64_t shown = 0;
    for (int64_t s = last; s >= 0 && shown < INFO_STEPS; s--)
        if (te_record_step_info(s, NULL, NULL) == TE_OK)
            shown++, first = s;
    te_error_clear();
    for (int64_t s = first; s <= last; s++) {
        double loss;
        uint64_t sum;
        if (te_record_step_info(s, &loss, &sum) == TE_OK)
            fprintf(dbg_out, "  step %-8lld loss %.9g checksum %016llx\n", (long long)s, loss,
                    (unsigned long long)sum);
    }
    te_error_clear();
}

/* `checkpoint save FILE`: the program's loop writes it when the step under
 * way ends (te_checkpoint_request; examples/resume.c ex_save_requested). */
static bool cmd_checkpoint(const char *args)
{
    char w[16], file[4096];
    const char *rest = dbg_word(args, w, sizeof w);
    if (strcmp(w, "save") != 0) {
        dbg_error("checkpoint: expected 'save FILE'%s%s%s", w[0] ? ", got '" : "", w, w[0] ? "'" : "");
        return false;
    }
    dbg_word(rest, file, sizeof file); /* more words: the table's max_words refuses them */
    if (!file[0]) {
        dbg_error("checkpoint save: which file? (usage: checkpoint save FILE)");
        return false;
    }
    if (te_checkpoint_request(file) != TE_OK) {
        dbg_error("checkpoint save: %s", te_error());
        return false;
    }
    const long long step = dbg.step < 0 ? 0 : dbg.step;
    if (dbg.in_step)
        fprintf(dbg_out, "Checkpoint: %s is written when step %lld ends, the state after it ('--load %s' "
                         "resumes at step %lld).\n", file, step, file, step + 1);
    else
        fprintf(dbg_out, "Checkpoint: %s is written when the next step ends.\n", file);
    return false;
}

const dbg_cmd dbg_cmds_record[] = {
    { .name = "record", .usage = "record [every K] [keep N] [budget MB] | record off",
      .help = "keep snapshots to rewind to (on at every 20, keep 32, 1024 MB), or stop\n"
      "A snapshot every K steps, the last N kept, at most MB of them; words not given keep their\n"
      "values. Without 'every', 20 steps, doubled while a snapshot costs over 0.5% of the steps it\n"
      "covers. Starting again drops what was recorded. 'info record' lists snapshots and steps.",
      .args = { { .words = DBG_WORDS("every", "keep", "budget", "off") },
                { .words = DBG_WORDS("every", "keep", "budget") } },
      .max_words = 6, .run = cmd_record },
    { .name = "rewind", .usage = "rewind STEP", .help = "go back to the start of STEP and stop there\n"
      "The nearest snapshot at or before STEP is restored and the steps up to STEP run again with\n"
      "no stops; then 'continue' replays with every breakpoint live. The replay is checked against\n"
      "the recording: a step that differs stops with reason diverged.",
      .needs = DBG_CMD_STARTED, .max_words = 1, .resumes = true, .run = cmd_rewind },
    { .name = "reverse-step", .alias = "rs", .usage = "reverse-step",
      .help = "go back one op: stop after the op before the one stopped at\n"
      "By rewinding to the step's start and stepping to that op.",
      .needs = DBG_CMD_STARTED, .resumes = true, .run = cmd_reverse_step },
    { .name = "reverse-next", .alias = "rn", .usage = "reverse-next",
      .help = "go back one step: stop at the start of the previous step",
      .needs = DBG_CMD_STARTED, .resumes = true, .run = cmd_reverse_next },
    { .name = "replay", .usage = "replay A-B with dump SPEC|profile SPEC",
      .help = "run steps A-B again with a dump or profile spec, then stop at B's end\n"
      "SPEC as for 'dump' or 'profile start', without steps= (the replay's are A-B); 'dump=SPEC'\n"
      "works too. Breakpoints stay live on the way; the stop comes at the start of step B+1.",
      .needs = DBG_CMD_STARTED, .args = { { 0 }, { .words = DBG_WORDS("with", "dump", "profile") } },
      .max_words = DBG_WORDS_ANY, .resumes = true, .run = cmd_replay },
    { .name = "locate", .usage = "locate [STEP]",
      .help = "find the op where a replayed step parts from its recording\n"
      "Replays STEP (the last diverged step) twice, every op's outputs checksummed, and stops\n"
      "with reason located, naming the op and the likely cause.",
      .needs = DBG_CMD_STARTED, .max_words = 1, .resumes = true, .run = cmd_locate },
    { .name = "checkpoint", .usage = "checkpoint save FILE",
      .help = "write the training state to FILE (HDF5) when the step under way ends\n"
      "The program's own checkpoint, as its --save writes: '--load FILE' resumes from the next step,\n"
      "bit for bit. The program says 'saved: FILE at step N' once written.",
      .needs = DBG_CMD_STARTED, .args = { { .words = DBG_WORDS("save") } }, .max_words = 2,
      .run = cmd_checkpoint },
    { .name = NULL },
};
