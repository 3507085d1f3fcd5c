/*
 * cmd_inspect.c — looking around: info (breakpoints, ops, op, step), print,
 * stats, hist, trend, set, help.
 */
#include "cmd.h"
#include "names.h"
#include "session.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void dbg_info_breakpoints(void);
void dbg_info_dump(void);
void dbg_info_amp(void);
void dbg_info_profile(void);
void dbg_info_record(void);

static const dbg_op *ops_shown(int *n, const char **which)
{
    if (dbg.n_ops) {
        *n = dbg.n_ops;
        *which = "this step";
        return dbg.ops;
    }
    *n = dbg.n_last_ops;
    *which = "the last step";
    return dbg.last_ops;
}

static void info_ops(void)
{
    int n;
    const char *which;
    const dbg_op *ops = ops_shown(&n, &which);
    if (!n) {
        fprintf(dbg_out, "No op has run yet ('run' starts training).\n");
        return;
    }
    fprintf(dbg_out, "Ops of %s (step %lld), in execution order; ! made NaN/Inf:\n", which, (long long)dbg.step);
    fprintf(dbg_out, "  %-5s %-32s %-16s %-9s %-18s %s\n", "exec", "op", "type", "phase", "out0", "last statistics");
    for (int i = 0; i < n; i++) {
        const dbg_op *o = &ops[i];
        char sh[64] = "-", st[96] = "";
        const te_tensor *t = o->n_out ? o->out[0] : NULL;
        if (t)
            te_shape_str(t->ndim, t->shape, sh, sizeof sh);
        if (o->has_stats)
            snprintf(st, sizeof st, "abs_max %.4g l2norm %.4g nan %lld inf %lld", o->out_stats.abs_max,
                     o->out_stats.l2norm, (long long)o->out_stats.nan, (long long)o->out_stats.inf);
        fprintf(dbg_out, "%c %-5d %-32s %-16s %-9s %-18s %s\n", o->bad ? '!' : ' ', o->exec, o->name, o->type,
                te_phase_name(o->phase), sh, st);
    }
}

/* The ops of this step that made tensor `name` and that read it. */
static void producers_consumers(const char *name, bool want_producer)
{
    int n;
    const char *which;
    const dbg_op *ops = ops_shown(&n, &which);
    int shown = 0;
    for (int i = 0; i < n; i++) {
        const dbg_op *o = &ops[i];
        int cnt = want_producer ? o->n_out : o->n_in;
        for (int k = 0; k < cnt; k++)
            if (strcmp(want_producer ? o->out_name[k] : o->in_name[k], name) == 0 && shown < 8)
                fprintf(dbg_out, "%s%s", shown++ ? ", " : "", o->name);
    }
    if (!shown)
        fprintf(dbg_out, "%s", want_producer ? (strncmp(name, "param:", 6) == 0 ? "parameter" : "input")
                                             : "no op so far");
}

static void info_op(const char *name)
{
    const dbg_op *o = dbg_op_find(name);
    if (!o) {
        static const char *names[2 * DBG_MAX_OPS];
        int n = dbg_op_names(names);
        const char *near = dump_suggest(name, names, n, DUMP_NEAR);
        dbg_error("info op: no op '%s' in this step or the last%s%s%s", name, near ? " (did you mean " : "",
                  near ? near : "", near ? "?)" : "");
        return;
    }
    fprintf(dbg_out, "%s (%s), %s phase, execution index %d\n  created at %s:%d\n", o->name, o->type,
            te_phase_name(o->phase), o->exec, dbg_short_path(o->loc.file), o->loc.line);
    for (int k = 0; k < o->n_in; k++) {
        if (!o->in_name[k][0]) { /* an optional input not given */
            fprintf(dbg_out, "  in%d  (none)\n", k);
            continue;
        }
        fprintf(dbg_out, "  in%d  %s%s  from ", k, o->in_name[k], dbg_on_device(o->in_dev[k]));
        producers_consumers(o->in_name[k], true);
        fprintf(dbg_out, "\n");
    }
    for (int k = 0; k < o->n_reads; k++) { /* backward: forward tensors its kernel reads */
        fprintf(dbg_out, "  read%d %s%s  from ", k, o->read_name[k], dbg_on_device(o->read_dev[k]));
        if (strstr(o->read_name[k], ":saved")) /* "OP:savedN": state OP kept for its backward */
            fprintf(dbg_out, "%.*s", (int)(strstr(o->read_name[k], ":saved") - o->read_name[k]),
                    o->read_name[k]);
        else
            producers_consumers(o->read_name[k], true);
        fprintf(dbg_out, "\n");
    }
    for (int k = 0; k < o->n_out; k++) {
        if (!o->out_name[k][0]) { /* not computed: a gradient nothing needs */
            fprintf(dbg_out, "  out%d (none: not needed)\n", k);
            continue;
        }
        fprintf(dbg_out, "  out%d %s%s  to ", k, o->out_name[k], dbg_on_device(o->out_dev[k]));
        producers_consumers(o->out_name[k], false);
        fprintf(dbg_out, "\n");
    }
    if (o->kernel[0])
        fprintf(dbg_out, "  graph mode: runs in kernel %s\n", o->kernel);
}

/* `info op` alone: the op training is stopped at. */
static void info_op_here(void)
{
    const te_op_record *r = dbg_stopped_at();
    const dbg_stop *s = dbg_last_stop();
    if (r)
        info_op(r->name);
    else if (s && s->active)
        dbg_error("info op: stopped between ops (step %lld, %s phase), not at an op; 'info op NAME' describes "
                  "one, 'step' runs the next op", (long long)s->step, te_phase_name(s->phase));
    else
        dbg_error("info op: training is not stopped at an op%s; 'info op NAME' describes one",
                  dbg.started ? "" : " (it has not started)");
}

/* The allocator's bytes per device in use: what live tensors hold, the
 * peak since start (or the last te_mem_reset_peak), and what its free
 * lists keep. The CPU's always; a device's once it has allocated. */
static void info_memory(void)
{
    const double mib = 1024.0 * 1024.0;
    for (int d = 0; d < TE_DEV_COUNT; d++) {
        const te_mem_stats m = te_mem_stats_of((te_device)d);
        if (d != TE_DEV_CPU && m.allocs == 0)
            continue;
        fprintf(dbg_out, "memory%s%s: current %zu bytes (%.1f MiB), peak %zu bytes (%.1f MiB)\n",
                d == TE_DEV_CPU ? "" : " on ", d == TE_DEV_CPU ? "" : te_device_name((te_device)d), m.current,
                (double)m.current / mib, m.peak, (double)m.peak / mib);
        fprintf(dbg_out, "  requested by tensors: current %zu bytes, peak %zu bytes; cached in free lists %zu bytes\n",
                m.requested, m.peak_requested, m.cached);
        fprintf(dbg_out, "  allocations %llu, %llu of them from the cache\n", (unsigned long long)m.allocs,
                (unsigned long long)m.cache_hits);
    }
}

/* The deferred watch (engine/watch.c): how many steps ran with the
 * non-finite check on the device and op hooks skipped, and how many of
 * them ran again op by op after a flag. */
static void info_watch(void)
{
    int64_t deferred, replayed;
    te_watch_counts(&deferred, &replayed);
    fprintf(dbg_out, "watch: %lld steps deferred (checked on the device, read once at the step's end), %lld of them "
                     "run again op by op after a NaN or Inf\n",
            (long long)deferred, (long long)replayed);
}

static bool cmd_info(const char *args)
{
    char w[32];
    const char *rest = dbg_word(args, w, sizeof w);
    size_t n = strlen(w);
    const char *sub = !n ? NULL
                      : strncmp(w, "breakpoints", n) == 0 ? "breakpoints"
                      : strcmp(w, "ops") == 0             ? "ops"
                      : strcmp(w, "dump") == 0            ? "dump"
                      : strcmp(w, "amp") == 0             ? "amp"
                      : strcmp(w, "profile") == 0         ? "profile"
                      : strcmp(w, "memory") == 0          ? "memory"
                      : strcmp(w, "watch") == 0           ? "watch"
                      : strcmp(w, "record") == 0          ? "record"
                      : strcmp(w, "batch") == 0           ? "batch"
                      : strcmp(w, "op") == 0              ? "op"
                      : n >= 2 && strncmp(w, "step", n) == 0 ? "step"
                                                             : NULL;
    if (!sub) {
        dbg_error("info: expected breakpoints, ops, op [NAME], step, batch, dump, amp, profile, memory, watch or record%s%s%s", n ? ", got '" : "", w,
                  n ? "'" : "");
        return false;
    }
    if (rest[0] && strcmp(sub, "op") != 0) { /* only `info op` takes a word more */
        char extra[64];
        dbg_word(rest, extra, sizeof extra);
        dbg_error("info %s: unexpected argument '%s' (usage: info breakpoints|ops|op [NAME]|step|batch|dump|amp|profile|memory|watch|record)",
                  sub, extra);
        return false;
    }
    if (strcmp(sub, "breakpoints") == 0)
        dbg_info_breakpoints();
    else if (strcmp(sub, "ops") == 0)
        info_ops();
    else if (strcmp(sub, "dump") == 0)
        dbg_info_dump();
    else if (strcmp(sub, "amp") == 0)
        dbg_info_amp();
    else if (strcmp(sub, "batch") == 0)
        dbg_info_batch();
    else if (strcmp(sub, "profile") == 0)
        dbg_info_profile();
    else if (strcmp(sub, "memory") == 0)
        info_memory();
    else if (strcmp(sub, "watch") == 0)
        info_watch();
    else if (strcmp(sub, "record") == 0)
        dbg_info_record();
    else if (strcmp(sub, "op") == 0 && rest[0])
        info_op(rest);
    else if (strcmp(sub, "op") == 0)
        info_op_here();
    else
        fprintf(dbg_out, "step %lld, %s phase, %d ops run in it%s\n", (long long)(dbg.step < 0 ? 0 : dbg.step),
                te_phase_name(dbg.phase), dbg.n_ops, dbg.started ? "" : " (training not started)");
    return false;
}

static bool cmd_print(const char *args)
{
    dbg_ref r;
    char err[512];
    const te_tensor *t;
    if (!dbg_ref_parse(args, &r, err, sizeof err) || !(t = dbg_tensor_find(r.name, err, sizeof err)) ||
        !dbg_ref_resolve(&r, t, err, sizeof err)) {
        dbg_error("print: %s", err);
        return false;
    }
    if (r.n_slices == 0)
        dbg_print_stats(dbg_out, r.name, t);
    dbg_print_tensor(dbg_out, r.name, t, &r, r.n_slices ? 1000 : 100);
    return false;
}

static const te_tensor *tensor_arg(const char *cmd, const char *name)
{
    char err[512];
    const te_tensor *t = name[0] ? dbg_tensor_find(name, err, sizeof err) : NULL;
    if (!name[0])
        dbg_error("%s: which tensor? (OP:out0, OP:in1, param:NAME, grad:NAME)", cmd);
    else if (!t)
        dbg_error("%s: %s", cmd, err);
    return t;
}

static bool cmd_stats(const char *args)
{
    const te_tensor *t = tensor_arg("stats", args);
    if (t)
        dbg_print_stats(dbg_out, args, t);
    return false;
}

static bool cmd_hist(const char *args)
{
    char name[TE_NAME_MAX];
    const char *rest = dbg_word(args, name, sizeof name);
    long long bins = 10;
    if (rest[0] && !dbg_parse_int(rest, "hist TENSOR [BINS]", 1, &bins))
        return false;
    const te_tensor *t = tensor_arg("hist", name);
    if (t) {
        char sh[96];
        fprintf(dbg_out, "%s %s %s, %d bins over the finite values:\n", name, te_dtype_name(t->dtype),
                te_shape_str(t->ndim, t->shape, sh, sizeof sh), (int)(bins > 100 ? 100 : bins));
        dbg_print_hist(dbg_out, name, t, (int)(bins > 100 ? 100 : bins), 40);
    }
    return false;
}

/* The name `trend` records under: what record_watched (session.c) meets,
 * the tensor's own name. An op stands for its first output, OP:in1 for
 * the tensor it names. false (after an error) for a name that is no
 * tensor's. */
static bool trend_name(const char *arg, char *name, size_t n)
{
    char err[512];
    const dbg_op *o;
    const te_tensor *t;
    if (!strchr(arg, ':')) {
        if (!(o = dbg_op_find(arg)) || !o->n_out) {
            dbg_error("trend: expected a tensor (OP:out0, OP:in1, param:NAME, grad:NAME) or an op that has run, "
                      "got '%s'", arg);
            return false;
        }
        snprintf(name, n, "%s", o->out_name[0]);
    } else {
        t = dbg.in_step ? dbg_tensor_find(arg, err, sizeof err) : NULL;
        snprintf(name, n, "%s", t && t->name[0] ? t->name : arg);
    }
    return true;
}

static bool cmd_trend(const char *args)
{
    char name[TE_NAME_MAX], err[512];
    if (!args[0]) {
        dbg_error("trend: which tensor? e.g. trend fc1/linear:out0");
        return false;
    }
    if (!trend_name(args, name, sizeof name))
        return false;
    bool watched = false;
    for (int i = 0; i < dbg.n_watch; i++)
        watched |= strcmp(dbg.watch[i], name) == 0;
    if (!watched) {
        if (dbg.n_watch == DBG_MAX_WATCH) {
            dbg_error("trend: %d tensors are recorded already, the most there can be", DBG_MAX_WATCH);
            return false;
        }
        snprintf(dbg.watch[dbg.n_watch++], TE_NAME_MAX, "%s", name);
        dbg_breaks_changed();
    }
    /* Readable now (the stop's tensors, parameters): this step's
     * statistics join the history at once. */
    const te_tensor *now = dbg.in_step ? dbg_tensor_find(name, err, sizeof err) : NULL;
    if (now && now->data && te_dtype_is_float(now->dtype)) {
        te_stats st;
        te_stats_compute(now, &st);
        dbg_trend_add(name, dbg.step, &st);
    }
    const dbg_trend *t = dbg_trend_get(name, false);
    if (!t || !t->n) {
        if (watched)
            fprintf(dbg_out, "No statistics of %s yet; they are recorded every step it is made.\n", name);
        else
            fprintf(dbg_out, "No statistics of %s yet; recording them from now on, every step.\n", name);
        return false;
    }
    if (!watched)
        fprintf(dbg_out, "Recording %s every step from now on.\n", name);
    fprintf(dbg_out, "%-7s %-11s %-11s %-11s %-7s %s\n", "step", "abs_max", "l2norm", "mean", "nan", "inf");
    for (int i = 0; i < t->n; i++) {
        int j = (t->head - t->n + i + DBG_TREND_STEPS) % DBG_TREND_STEPS;
        const te_stats *s = &t->s[j];
        fprintf(dbg_out, "%-7lld %-11.4g %-11.4g %-11.4g %-7lld %lld\n", (long long)t->step[j], s->abs_max,
                s->l2norm, s->mean, (long long)s->nan, (long long)s->inf);
    }
    return false;
}

static bool cmd_set(const char *args)
{
    const char *eq = strchr(args, '=');
    if (!eq) {
        dbg_error("set: expected TENSOR[INDEX] = VALUE");
        return false;
    }
    char lhs[TE_NAME_MAX + 64], err[512];
    size_t len = (size_t)(eq - args);
    if (len >= sizeof lhs)
        len = sizeof lhs - 1;
    while (len && (args[len - 1] == ' ' || args[len - 1] == '\t'))
        len--;
    memcpy(lhs, args, len);
    lhs[len] = '\0';
    const char *rhs = dbg_skip_space(eq + 1);
    char *end;
    errno = 0;
    double v = strtod(rhs, &end);
    if (end == rhs || *dbg_skip_space(end)) {
        dbg_error("set: '%s' is not a number (nan and inf are)", rhs);
        return false;
    }
    dbg_ref r;
    const te_tensor *t;
    if (!dbg_ref_parse(lhs, &r, err, sizeof err) || !(t = dbg_tensor_find(r.name, err, sizeof err)) ||
        !dbg_ref_resolve(&r, t, err, sizeof err)) {
        dbg_error("set: %s", err);
        return false;
    }
    int64_t flat = 0, stride = 1;
    bool single = r.n_slices == t->ndim;
    for (int d = t->ndim - 1; d >= 0 && single; d--) {
        single = r.slices[d].index;
        flat += r.slices[d].start * stride;
        stride *= t->shape[d];
    }
    if (!single) {
        dbg_error("set: give one index per dim of %s (%d-d): one element at a time", r.name, t->ndim);
        return false;
    }
    float old = te_get(t, flat);
    te_set((te_tensor *)t, flat, (float)v);
    fprintf(dbg_out, "%s: %g -> %g\n", lhs, (double)old, (double)te_get(t, flat));
    return false;
}

const dbg_cmd dbg_cmds_inspect[] = {
    { .name = "info", .alias = "i", .usage = "info breakpoints|ops|op [NAME]|step|batch|dump|amp|profile|memory|watch|record",
      .help = "the breakpoints, the step's ops, one op (the one stopped at without NAME), the step, the step's\n"
      "batches (each row's sample and source, the data check, replacements), the dump,\n"
      "mixed precision (level, dtype, each op's precision, the loss scale's history and skipped steps),\n"
      "the engine's memory (bytes held by tensors now and at the peak), the profile (its spec, steps, the\n"
      "last step's phases and top ops), time travel's snapshots and recorded steps",
      .args = { { .words = DBG_WORDS("breakpoints", "ops", "op", "step", "batch", "dump", "amp", "profile", "memory", "watch", "record") }, { DBG_ARG_OP } },
      .max_words = 2, .run = cmd_info },
    { .name = "print", .alias = "p", .usage = "print TENSOR[SLICES]", .help = "a tensor's values, numpy-style\n"
      "TENSOR: OP:out0, OP:in1, param:NAME, grad:NAME or a name from 'info op';\n"
      "SLICES: one per dim: 3, -1, 1:4, :, ::2. Without slices: statistics and a summary.",
      .args = { { DBG_ARG_TENSOR } }, .max_words = DBG_WORDS_ANY, .run = cmd_print },
    { .name = "stats", .usage = "stats TENSOR", .help = "min, max, mean, std, abs_max, l2norm, zeros, NaN, Inf",
      .args = { { DBG_ARG_TENSOR } }, .max_words = 1, .run = cmd_stats },
    { .name = "hist", .usage = "hist TENSOR [BINS]", .help = "a text histogram of the finite values",
      .args = { { DBG_ARG_TENSOR } }, .max_words = 2, .run = cmd_hist },
    { .name = "trend", .usage = "trend TENSOR", .help = "the tensor's statistics over the last steps recorded\n"
      "Recorded while a breakpoint checks it, and every step once 'trend' named it.",
      .args = { { DBG_ARG_TENSOR } }, .max_words = 1, .run = cmd_trend },
    { .name = "set", .usage = "set TENSOR[INDEX] = VALUE", .help = "change one element, then go on",
      .args = { { DBG_ARG_TENSOR | DBG_ARG_SETTING } }, .max_words = DBG_WORDS_ANY, .run = cmd_set },
    { .name = "help", .alias = "h", .usage = "help [COMMAND]", .help = "list the commands, or explain one",
      .args = { { DBG_ARG_COMMAND } }, .max_words = 1, .run = dbg_help },
    { .name = NULL },
};
