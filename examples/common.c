/*
 * common.c — flags, the training loop and evaluation shared by the examples.
 */
#include "common.h"
#include "dump.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Steps before --time starts measuring: caches, allocator and BLAS warm up. */
#define WARMUP_STEPS 3

static const char *prog_name = "example";

/* ---- flags ----------------------------------------------------------------- */

typedef enum {
    F_STEPS, F_BATCH, F_LR, F_SEED, F_THREADS, F_MODE, F_INJECT, F_LOG_EVERY, F_OPTIM,
    F_MOMENTUM, F_WEIGHT_DECAY, F_CLIP, F_ACCUM, F_TRAIN_SIZE, F_WORKERS, F_TIME, F_SAVE_GRAPH, F_DUMP,
    F_PROFILE,    F_AMP, F_AMP_DTYPE, F_LOSS_SCALE, F_SCALE_INIT, F_SCALE_WINDOW, F_SCALE_HYSTERESIS, F_BACKEND,
    F_SAVE, F_SAVE_EVERY, F_LOAD, F_STOP_AT, F_CORRUPT, F_DP, F_HELP,
} flag_id;

typedef struct {
    flag_id id;
    const char *name, *arg, *help;
} common_flag;

static const common_flag common_flags[] = {
    { F_STEPS, "--steps", "N", "optimizer steps" },
    { F_BATCH, "--batch", "N", "samples per (micro-)batch" },
    { F_ACCUM, "--accum", "N", "micro-batches per step, gradients summed" },
    { F_LR, "--lr", "X", "learning rate" },
    { F_OPTIM, "--optim", "NAME", "sgd, adam or adamw" },
    { F_MOMENTUM, "--momentum", "X", "SGD momentum" },
    { F_WEIGHT_DECAY, "--weight-decay", "X", "L2 penalty (decoupled for adamw)" },
    { F_CLIP, "--clip", "X", "clip the global gradient norm to X; 0: off" },
    { F_TRAIN_SIZE, "--train-size", "N", "training samples (a few: check the model can overfit)" },
    { F_SEED, "--seed", "N", "seed of initialisation and data" },
    { F_THREADS, "--threads", "N", "compute threads; 0: all cores" },
    { F_WORKERS, "--workers", "N", "data loader threads; 0: load in the training thread" },
    { F_MODE, "--mode", "MODE", "eager, or graph: trace the step once, compile it, replay it" },
    { F_SAVE_GRAPH, "--save-graph", "DIR", "graph mode: write the IR after each pass into DIR" },
    { F_DUMP, "--dump", "SPEC", "HDF5 dumps: dir=D;ops=GLOB,...;steps=0|5-8;io=both;what=full|stats\n"
      "                         ... or @FILE (docs/dump-format.md; TDBG_DUMP does the same)" },
    { F_PROFILE, "--profile", "SPEC", "profile capture, Chrome trace JSON for tdbg-prof or Perfetto:\n"
      "                         file=P;steps=A-B;ops=GLOB;keep=K;when=always|break (docs/profiler.md;\n"
      "                         TDBG_PROFILE does the same; file: PROGRAM-profile.json)" },
    { F_LOG_EVERY, "--log-every", "N", "print a step line every N steps" },
    { F_INJECT, "--inject", "SPEC", "KIND@op=GLOB,step=N[,value=X][,index=I], KIND nan, inf,\n"
      "                         scale, noise or zero: alter that op's output; segv, abort\n"
      "                         or fpe: crash in that op (repeatable)" },
    { F_CORRUPT, "--corrupt", "SPEC", "KIND@sample=I[,value=X], KIND nan, inf, label, zero or scale:\n"
      "                         plant a bad training sample, as a broken pipeline would (repeatable)" },
    { F_AMP, "--amp", "LEVEL", "mixed precision: O0 f32, O1 matmuls/convs low, O2 weights and\n"
      "                         activations low with f32 master weights and loss scaling, O3 all low\n"
      "                         (docs/amp.md)" },
    { F_AMP_DTYPE, "--amp-dtype", "DT", "the low precision of --amp: f16 or bf16" },
    { F_LOSS_SCALE, "--loss-scale", "S", "dynamic, or a fixed scale N (skips non-finite steps); on at O2" },
    { F_SCALE_INIT, "--scale-init", "X", "the dynamic loss scale's first value (65536)" },
    { F_SCALE_WINDOW, "--scale-window", "N", "clean steps before the scale doubles (2000)" },
    { F_SCALE_HYSTERESIS, "--scale-hysteresis", "N", "non-finite steps before the scale halves (1)" },
    { F_BACKEND, "--backend", "NAME", "cpu, or cuda (a build with --with-cuda and a GPU)" },
    { F_SAVE, "--save", "FILE", "write the whole training state to an HDF5 checkpoint when training stops\n"
      "                         (docs/examples.md \"Checkpoints\")" },
    { F_SAVE_EVERY, "--save-every", "N", "with --save: also after every N steps; 0: at the end only" },
    { F_LOAD, "--load", "FILE", "resume from a checkpoint, bit for bit as if never stopped" },
    { F_STOP_AT, "--stop-at", "N", "stop after N steps of the --steps schedule (to resume with --load)" },
    { F_TIME, "--time", NULL, "print ms per step (median, min, max) after warm-up" },
    { F_DP, "--dp", NULL, "data parallel over the ranks of `mpirun -np N` (eager mode; --batch is the\n"
      "                         global batch, N must divide it; docs/examples.md \"Data parallel\")" },
    { F_HELP, "--help", NULL, "this text" },
};
#define N_COMMON (int)(sizeof common_flags / sizeof common_flags[0])

static const char *const optim_names[] = { "sgd", "adam", "adamw" };

/* The default of a common flag as text, "" for those without a value. */
static const char *common_default(const common_flag *f, const ex_opts *d, char *buf, size_t n)
{
    switch (f->id) {
    case F_STEPS: snprintf(buf, n, "%d", d->steps); break;
    case F_BATCH: snprintf(buf, n, "%d", d->batch); break;
    case F_ACCUM: snprintf(buf, n, "%d", d->accum); break;
    case F_LR: snprintf(buf, n, "%g", d->lr); break;
    case F_OPTIM: snprintf(buf, n, "%s", optim_names[d->optim]); break;
    case F_MOMENTUM: snprintf(buf, n, "%g", d->momentum); break;
    case F_WEIGHT_DECAY: snprintf(buf, n, "%g", d->weight_decay); break;
    case F_CLIP: snprintf(buf, n, "%g", d->clip); break;
    case F_TRAIN_SIZE: snprintf(buf, n, "%lld", (long long)d->train_size); break;
    case F_SEED: snprintf(buf, n, "%llu", (unsigned long long)d->seed); break;
    case F_THREADS: snprintf(buf, n, "%d", d->threads); break;
    case F_WORKERS: snprintf(buf, n, "%d", d->workers); break;
    case F_MODE: snprintf(buf, n, "%s", te_mode_name(d->mode)); break;
    case F_SAVE_GRAPH: case F_DUMP: case F_PROFILE: buf[0] = '\0'; break;
    case F_LOG_EVERY: snprintf(buf, n, "%d", d->log_every); break;
    case F_AMP: snprintf(buf, n, "%s", te_amp_level_name(d->amp)); break;
    case F_AMP_DTYPE: snprintf(buf, n, "%s", d->amp_bf16 ? "bf16" : "f16"); break;
    case F_BACKEND: snprintf(buf, n, "%s", d->backend ? d->backend : "cpu"); break;
    case F_SAVE_EVERY: snprintf(buf, n, "%d", d->save_every); break;
    case F_INJECT: case F_TIME: case F_DP: case F_HELP: case F_LOSS_SCALE: case F_SCALE_INIT: case F_SCALE_WINDOW:
    case F_SCALE_HYSTERESIS: case F_SAVE: case F_LOAD: case F_STOP_AT: case F_CORRUPT: buf[0] = '\0'; break;
    }
    return buf;
}

/* Does p refuse the common flag named name? */
static bool unsupported(const ex_program *p, const char *name)
{
    for (const char *const *u = p->unsupported; u && *u; u++)
        if (strcmp(*u, name) == 0)
            return true;
    return false;
}

static void usage(FILE *f, const ex_program *p, const ex_opts *d)
{
    char left[64], def[64];
    fprintf(f, "usage: %s [FLAG VALUE | FLAG=VALUE]...\n%s\n\nmodel and data:\n", p->name, p->summary);
    for (const ex_flag *x = p->flags; x->name; x++) {
        snprintf(left, sizeof left, "%s %s", x->name, x->arg);
        fprintf(f, "  %-22s %s\n", left, x->help);
    }
    fprintf(f, "\ntraining:\n");
    for (int i = 0; i < N_COMMON; i++) {
        const common_flag *c = &common_flags[i];
        if (unsupported(p, c->name))
            continue;
        snprintf(left, sizeof left, "%s%s%s", c->name, c->arg ? " " : "", c->arg ? c->arg : "");
        common_default(c, d, def, sizeof def);
        fprintf(f, "  %-22s %s%s%s%s\n", left, c->help, def[0] ? " (" : "", def, def[0] ? ")" : "");
    }
    fprintf(f, "\n%s", p->output ? p->output
                                 : "Each logged step prints `step=N loss=X acc=Y`; the run ends with\n"
                                   "`final: loss=X acc=Y` on held-out data. Exit status 2 on a bad flag\n"
                                   "or checkpoint.\n");
}

/* Names the bad flag (and its value, when given) with what would do,
 * prints the usage to stderr and exits 2. */
_Noreturn static void bad_flag(const ex_program *p, const ex_opts *d, const char *flag,
                               const char *value, const char *why)
{
    if (value)
        fprintf(stderr, "%s: %s '%s': %s\n", p->name, flag, value, why);
    else
        fprintf(stderr, "%s: %s %s\n", p->name, flag, why);
    usage(stderr, p, d);
    exit(2);
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool parse_float(const char *s, float lo, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo)
        return false;
    *out = v;
    return true;
}

int ex_parse_list(const char *s, int *out, int max, int limit)
{
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 1 || v > limit || n == max)
            return 0;
        out[n++] = (int)v;
        if (*end == '\0')
            return n;
        if (*end != ',')
            return 0;
        p = end + 1;
    }
}

static bool set_int(const char *s, long lo, long hi, int *out)
{
    long v;
    if (!parse_long(s, lo, hi, &v))
        return false;
    *out = (int)v;
    return true;
}

/* Sets one common flag from value; false when value is malformed, with
 * *why saying what the valid values are. */
static bool set_common(const common_flag *f, const char *v, ex_opts *o, const char **why)
{
    long l;
    *why = "expected a whole number >= 1, e.g. 100";
    switch (f->id) {
    case F_STEPS: return set_int(v, 1, INT_MAX, &o->steps);
    case F_LOG_EVERY: return set_int(v, 1, INT_MAX, &o->log_every);
    case F_BATCH:
        *why = "expected a whole number in 1..1048576, e.g. 128";
        return set_int(v, 1, 1 << 20, &o->batch);
    case F_ACCUM:
        *why = "expected a whole number in 1..32 (1: no accumulation)";
        return set_int(v, 1, EX_MAX_ACCUM, &o->accum);
    case F_THREADS:
        *why = "expected a whole number in 0..256 (0: all cores)";
        return set_int(v, 0, 256, &o->threads);
    case F_WORKERS:
        *why = "expected a whole number in 0..64 (0: load in the training thread)";
        return set_int(v, 0, 64, &o->workers);
    case F_TRAIN_SIZE:
        *why = "expected a whole number in 1..1073741824 (2^30)";
        if (!parse_long(v, 1, 1L << 30, &l))
            return false;
        o->train_size = l;
        return true;
    case F_SEED:
        *why = "expected a whole number >= 1, e.g. 1";
        if (!parse_long(v, 1, LONG_MAX, &l))
            return false;
        o->seed = (uint64_t)l;
        return true;
    case F_LR:
        *why = "expected a finite number >= 0, e.g. 3e-4";
        return parse_float(v, 0.0f, &o->lr);
    case F_MOMENTUM:
        *why = "expected a finite number >= 0, e.g. 0.9";
        return parse_float(v, 0.0f, &o->momentum);
    case F_WEIGHT_DECAY:
        *why = "expected a finite number >= 0, e.g. 0.01";
        return parse_float(v, 0.0f, &o->weight_decay);
    case F_CLIP:
        *why = "expected a finite number >= 0 (0: off), e.g. 1";
        return parse_float(v, 0.0f, &o->clip);
    case F_OPTIM:
        *why = "unknown optimizer; expected sgd, adam or adamw";
        for (int k = 0; k < 3; k++)
            if (strcmp(v, optim_names[k]) == 0) {
                o->optim = (ex_optim_kind)k;
                return true;
            }
        return false;
    case F_MODE:
        *why = "unknown mode; expected eager or graph";
        if (strcmp(v, "graph") == 0)
            o->mode = TE_MODE_GRAPH;
        else if (strcmp(v, "eager") == 0)
            o->mode = TE_MODE_EAGER;
        else
            return false;
        return true;
    case F_SAVE_GRAPH:
        *why = "expected a folder name, e.g. ir";
        o->save_graph = v;
        return v[0] != '\0';
    case F_DUMP:
        *why = "expected a dump spec, dir=D;ops=GLOB,...;steps=0|5-8;io=both;what=full|stats, or @FILE "
               "(docs/dump-format.md)";
        o->dump = v;
        return v[0] != '\0';
    case F_PROFILE:
        *why = "expected a profile spec, file=P;steps=A-B;ops=GLOB;keep=K;when=always|break (docs/profiler.md)";
        o->profile = v;
        return v[0] != '\0';
    case F_CORRUPT: {
        static char msg[160];
        *why = msg;
        if (o->n_corrupt == EX_MAX_CORRUPT) {
            snprintf(msg, sizeof msg, "one too many: at most %d", EX_MAX_CORRUPT);
            return false;
        }
        if (!ex_corrupt_check(v, msg, sizeof msg))
            return false;
        o->corrupt[o->n_corrupt++] = v;
        return true;
    }
    case F_INJECT:
        *why = "one too many: at most 16 injections";
        if (o->n_inject == EX_MAX_INJECT)
            return false;
        o->inject[o->n_inject++] = v;
        return true;
    case F_AMP:
        *why = "unknown level; expected O0, O1, O2 or O3";
        for (int k = 0; k < TE_AMP_LEVEL_COUNT; k++)
            if (strcmp(v, te_amp_level_name((te_amp_level)k)) == 0) {
                o->amp = (te_amp_level)k;
                return true;
            }
        return false;
    case F_AMP_DTYPE:
        *why = "unknown dtype; expected f16 or bf16";
        if (strcmp(v, "f16") != 0 && strcmp(v, "bf16") != 0)
            return false;
        o->amp_bf16 = v[0] == 'b';
        return true;
    case F_LOSS_SCALE:
        *why = "expected dynamic or a fixed scale, a finite number > 0, e.g. 1024";
        if (strcmp(v, "dynamic") == 0) {
            o->scale_mode = EX_SCALE_DYNAMIC;
            return true;
        }
        o->scale_mode = EX_SCALE_FIXED;
        return parse_float(v, 0.0f, &o->loss_scale) && o->loss_scale > 0.0f;
    case F_SCALE_INIT:
        *why = "expected a finite number > 0, e.g. 65536";
        return parse_float(v, 0.0f, &o->scale_init) && o->scale_init > 0.0f;
    case F_SCALE_WINDOW:
        *why = "expected a whole number >= 1, e.g. 2000";
        return set_int(v, 1, INT_MAX, &o->scale_window);
    case F_SCALE_HYSTERESIS:
        *why = "expected a whole number >= 1, e.g. 2";
        return set_int(v, 1, INT_MAX, &o->scale_hysteresis);
    case F_BACKEND:
        *why = "unknown backend; expected cpu or cuda";
        if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0)
            return false;
        o->backend = v;
        return true;
    case F_SAVE:
    case F_LOAD:
        *why = "expected a file name, e.g. ck.h5";
        *(f->id == F_SAVE ? &o->save : &o->load) = v;
        return v[0] != '\0';
    case F_SAVE_EVERY:
        *why = "expected a whole number >= 0 (0: at the end only), e.g. 100";
        return set_int(v, 0, INT_MAX, &o->save_every);
    case F_STOP_AT:
        *why = "expected a whole number >= 1, e.g. 500";
        return set_int(v, 1, INT_MAX, &o->stop_at);
    case F_TIME:
    case F_DP:
    case F_HELP:
        break;
    }
    return false;
}

/* The command line, for the dump's run.h5. */
static char command_line[4096];

void ex_parse(int argc, char **argv, const ex_program *p, ex_opts *o)
{
    const ex_opts def = *o;
    prog_name = p->name;
    size_t used = 0;
    for (int i = 0; i < argc && used < sizeof command_line; i++)
        used += (size_t)snprintf(command_line + used, sizeof command_line - used, "%s%s", i ? " " : "", argv[i]);
    for (int i = 1; i < argc; i++) {
        /* "--flag value" or "--flag=value" */
        char name[64];
        const char *arg = argv[i], *value = NULL, *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof name)
            len = sizeof name - 1;
        memcpy(name, arg, len);
        name[len] = '\0';
        if (eq)
            value = eq + 1;

        const common_flag *c = NULL;
        const ex_flag *x = NULL;
        for (int k = 0; k < N_COMMON && !c; k++)
            if (strcmp(name, common_flags[k].name) == 0)
                c = &common_flags[k];
        for (const ex_flag *f = p->flags; f->name && !c && !x; f++)
            if (strcmp(name, f->name) == 0)
                x = f;
        if (!c && !x)
            bad_flag(p, &def, arg, NULL, "is not a flag; the flags are listed below");
        if (c && unsupported(p, c->name))
            bad_flag(p, &def, name, NULL, p->unsupported_why);

        if (c && !c->arg) {
            if (value)
                bad_flag(p, &def, name, NULL, "takes no value");
            if (c->id == F_HELP) {
                usage(stdout, p, &def);
                exit(0);
            }
            if (c->id == F_DP)
                o->dp = true;
            else
                o->time = true;
            continue;
        }
        if (!value) {
            if (i + 1 == argc)
                bad_flag(p, &def, name, NULL, "needs a value");
            value = argv[++i];
        }
        const char *why = NULL;
        char own[256];
        if (c ? !set_common(c, value, o, &why) : !x->set(value, p->cfg, own, sizeof own))
            bad_flag(p, &def, name, value, c ? why : own);
    }
    /* the scaler's options without a dynamic scaler to take them */
    const char *lonely = o->scale_init > 0 ? "--scale-init" : o->scale_window ? "--scale-window"
                         : o->scale_hysteresis ? "--scale-hysteresis" : NULL;
    if (lonely && !(ex_scaler_on(o) && o->scale_mode != EX_SCALE_FIXED))
        bad_flag(p, &def, lonely, NULL,
                 o->scale_mode == EX_SCALE_FIXED ? "is for a dynamic scale, and --loss-scale sets a fixed one"
                                                 : "needs a dynamic loss scaler: --amp O2 or --loss-scale dynamic");
    if (o->dp && o->mode == TE_MODE_GRAPH)
        bad_flag(p, &def, "--dp", NULL, "runs in eager mode: graph mode's compiled step has no collectives");
    if (o->save_every && !o->save)
        bad_flag(p, &def, "--save-every", NULL, "needs --save FILE, the checkpoint it writes");
    ex_resume_read(p, o);
}

bool ex_scaler_on(const ex_opts *o) { return o->scale_mode != EX_SCALE_DEFAULT || o->amp == TE_AMP_O2; }

te_status ex_amp_start(const ex_opts *o)
{
    te_status st = te_amp_set(o->amp, o->amp_bf16 ? TE_BF16 : TE_F16);
    if (st != TE_OK || !ex_scaler_on(o))
        return st;
    const bool fixed = o->scale_mode == EX_SCALE_FIXED;
    return te_scaler_enable(&(te_scaler_opts){ .fixed = fixed, .init_scale = fixed ? o->loss_scale : o->scale_init,
                                               .growth_interval = o->scale_window,
                                               .hysteresis = o->scale_hysteresis });
}

float ex_scale_now(void)
{
    te_scaler_state s;
    return te_scaler_state_get(&s) ? s.scale : 0.0f;
}

void ex_print_scale(float used)
{
    te_scaler_state s;
    if (!te_scaler_state_get(&s))
        return;
    printf(" scale=%.9g%s", (double)used, s.found_inf ? " skipped" : "");
}

static dump_session *dumping;
static bool dump_report; /* --time: say how fast the dump wrote */

/* Everything queued reaches the disk however the program ends. */
static void stop_dumping(void)
{
    if (dumping && dump_report) {
        dump_flush(dumping);
        dump_status s = dump_status_get(dumping);
        printf("dump: steps=%lld tensors=%lld bytes=%llu write_s=%.3f MB_per_s=%.1f\n",
               (long long)s.steps_written, (long long)s.tensors_written, (unsigned long long)s.bytes_written,
               s.write_seconds, s.write_seconds > 0 ? (double)s.bytes_written / 1e6 / s.write_seconds : 0.0);
    }
    dump_stop(dumping);
    dumping = NULL;
}

static void start_dumping(const ex_opts *o)
{
    const char *text = o->dump ? o->dump : getenv("TDBG_DUMP");
    if (!text || !text[0])
        return;
    dump_spec spec;
    char err[1024];
    if (!dump_spec_parse(text, &spec, err, sizeof err)) {
        fprintf(stderr, "%s: %s '%s': %s\n", prog_name, o->dump ? "--dump" : "TDBG_DUMP", text, err);
        exit(2);
    }
    dump_run_info info = { .mode = o->mode, .command_line = command_line };
    if (!(dumping = dump_start(&spec, &info, err, sizeof err))) {
        fprintf(stderr, "%s: %s\n", prog_name, err);
        exit(2);
    }
    dump_report = o->time;
    atexit(stop_dumping);
}

/* The capture's file, and whether ex_profile_finish writes it (when=always):
 * the engine is started without the file so that it writes nothing itself
 * when the steps= range ends, and the one write comes at the end. */
static char profile_file[sizeof ((te_profile_opts *)0)->file];
static bool profile_on, profile_write;

static void start_profiling(const ex_opts *o)
{
    const char *text = o->profile ? o->profile : getenv("TDBG_PROFILE");
    if (!text || !text[0])
        return;
    te_profile_opts po;
    if (te_profile_parse(text, &po) != TE_OK) {
        fprintf(stderr, "%s: %s '%s': %s\n", prog_name, o->profile ? "--profile" : "TDBG_PROFILE", text,
                te_error());
        te_shutdown();
        exit(2);
    }
    if (!po.file[0])
        snprintf(po.file, sizeof po.file, "%s-profile.json", prog_name);
    if (o->dp) { /* one file per rank: FILE.rank-R.json */
        char base[sizeof po.file];
        const size_t len = strlen(po.file);
        const bool json = len > 5 && strcmp(po.file + len - 5, ".json") == 0;
        snprintf(base, sizeof base, "%.*s", (int)(json ? len - 5 : len), po.file);
        snprintf(po.file, sizeof po.file, "%.200s.rank-%d.json", base, te_dist_rank());
    }
    snprintf(profile_file, sizeof profile_file, "%s", po.file);
    profile_write = po.when == TE_PROF_ALWAYS;
    if (profile_write) /* when=break keeps it: the debugger writes the ring to it at a stop */
        po.file[0] = '\0';
    if (te_profile_start(&po) != TE_OK) {
        fprintf(stderr, "%s: --profile: %s\n", prog_name, te_error());
        te_shutdown();
        exit(2);
    }
    profile_on = true;
}

int ex_profile_finish(void)
{
    if (!profile_on)
        return 0;
    profile_on = false;
    te_profile_stop();
    if (!profile_write) {
        printf("profile: when=break: %s is written only when a breakpoint stops (under tdbg)\n", profile_file);
        return 0;
    }
    const te_status st = te_profile_save(profile_file);
    if (st == TE_ERR_STATE) { /* the file is named: nothing was recorded */
        printf("profile: no step of the steps= range ran: %s not written\n", profile_file);
        return 0;
    }
    if (st != TE_OK) {
        fprintf(stderr, "%s: --profile: %s\n", prog_name, te_error());
        return 2;
    }
    printf("profile: wrote %s; read it with: tdbg-prof %s\n", profile_file, profile_file);
    return 0;
}

/* --dp: joins the job; the global batch must split evenly over its ranks. */
static void start_dp(const ex_opts *o)
{
    if (te_dist_init(NULL) != TE_OK) {
        fprintf(stderr, "%s: --dp: %s\n", prog_name, te_error());
        te_shutdown();
        exit(2);
    }
    const int ranks = te_dist_size();
    if (o->batch % ranks != 0) {
        if (te_dist_rank() == 0)
            fprintf(stderr, "%s: --dp: --batch %d does not split evenly over %d ranks (it is the global batch: "
                    "use a multiple of %d)\n", prog_name, o->batch, ranks, ranks);
        te_shutdown();
        exit(2);
    }
}

void ex_start(const ex_opts *o)
{
    if (te_init(&(te_config){ .seed = o->seed, .threads = o->threads }) != TE_OK)
        exit(ex_fail("cannot start the engine"));
    /* No usable device is a bad flag's exit: the reason, then status 2. */
    if (o->backend && te_backend_use(o->backend) != TE_OK) {
        fprintf(stderr, "%s: --backend %s: %s\n", prog_name, o->backend, te_error());
        te_shutdown();
        exit(2);
    }
    for (int i = 0; i < o->n_inject; i++)
        if (te_inject_add(o->inject[i]) != TE_OK) {
            fprintf(stderr, "%s: %s\n", prog_name, te_error());
            te_shutdown();
            exit(2);
        }
    if (o->dp)
        start_dp(o);
    start_dumping(o);
    start_profiling(o);
}

int ex_rank_batch(const ex_opts *o, int n) { return o->dp ? n / te_dist_size() : n; }
bool ex_prints(void) { return te_dist_rank() == 0; }

int ex_fail(const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", prog_name, what, te_error());
    return 2;
}

/* ---- held-out splits ------------------------------------------------------- */

typedef struct {
    const te_dataset *base;
    int64_t offset;
} split_state;

static void split_get(const te_dataset *d, int64_t i, float *x, int32_t *y)
{
    const split_state *s = d->state;
    s->base->get(s->base, s->offset + i, x, y);
}

static void split_source(const te_dataset *d, int64_t i, char *buf, size_t n)
{
    const split_state *s = d->state;
    s->base->source(s->base, s->offset + i, buf, n);
}

te_dataset *ex_split(const te_dataset *d, int64_t offset, int64_t size)
{
    te_dataset *s = malloc(sizeof *s);
    split_state *st = malloc(sizeof *st);
    if (!s || !st) {
        free(s);
        free(st);
        return NULL;
    }
    *s = *d;
    *st = (split_state){ .base = d, .offset = offset };
    s->size = size;
    s->get = split_get;
    s->source = d->source ? split_source : NULL;
    s->state = st;
    return s;
}

void ex_split_free(te_dataset *split)
{
    if (split)
        free(split->state);
    free(split);
}

/* ---- training -------------------------------------------------------------- */

double ex_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double ex_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

#define CORRECT_CHUNK 16384 /* logits count_correct reads at once (one row at least) */

/* Rows of logits [N, C] whose largest entry is at the label; the values come
 * to the host a few rows at a time, wherever the tensors live. */
static int count_correct(const te_tensor *logits, const te_tensor *labels)
{
    static float small[CORRECT_CHUNK], label[CORRECT_CHUNK];
    const int64_t n = logits->shape[0], c = logits->shape[1];
    const int64_t rows = c > 0 && c <= CORRECT_CHUNK ? CORRECT_CHUNK / c : 1;
    float *v = c <= CORRECT_CHUNK ? small : malloc((size_t)c * sizeof *v);
    int correct = 0;
    for (int64_t i0 = 0; v && i0 < n; i0 += rows) {
        const int64_t k = n - i0 < rows ? n - i0 : rows;
        if (te_tensor_read_f32(logits, i0 * c, k * c, v) != TE_OK || te_tensor_read_f32(labels, i0, k, label) != TE_OK)
            break;
        for (int64_t i = 0; i < k; i++) {
            int64_t best = 0;
            for (int64_t j = 1; j < c; j++)
                if (v[i * c + j] > v[i * c + best])
                    best = j;
            correct += best == (int64_t)label[i];
        }
    }
    if (v != small)
        free(v);
    return correct;
}

const char *ex_optim_name(const ex_opts *o) { return optim_names[o->optim]; }

te_optim *ex_optim_new(const ex_opts *o)
{
    if (o->optim == EX_SGD)
        return te_sgd_new(te_params(), te_param_count(),
                          &(te_sgd_opts){ .lr = o->lr, .momentum = o->momentum,
                                          .weight_decay = o->weight_decay });
    return te_adam_new(te_params(), te_param_count(),
                       &(te_adam_opts){ .lr = o->lr, .weight_decay = o->weight_decay,
                                        .decoupled = o->optim == EX_ADAMW });
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ex_print_times(double *ms, const double *cpu_ms, int n)
{
    int skip = n > WARMUP_STEPS ? WARMUP_STEPS : 0;
    ms += skip;
    cpu_ms += skip;
    n -= skip;
    double total = 0, cpu = 0;
    for (int i = 0; i < n; i++) {
        total += ms[i];
        cpu += cpu_ms[i];
    }
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    double median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    printf("time: ms_per_step median=%.3f min=%.3f max=%.3f steps=%d total_ms=%.3f cpu_ms=%.3f\n", median, ms[0],
           ms[n - 1], n, total, cpu);
}

/* What the step functions need; inputs and outputs come per micro-batch. */
typedef struct {
    const ex_opts *o;
    const ex_task *t;
    te_optim *opt;
} step_ctx;

/* The most bytes one eager forward (loss included) left allocated for its
 * backward: what the tape keeps, the activations' memory. */
static size_t activation_bytes;

te_status ex_train_step(const ex_opts *o, ex_forward_fn forward, const void *model, te_optim *opt,
                        te_tensor *const *in, te_tensor **out, bool with_logits)
{
    const int accum = o->accum, per = with_logits ? 2 : 1;
    /* Data parallel: every rank normalises with rank 0's running
     * statistics, as DDP's broadcast_buffers (docs/examples.md). */
    if (o->dp && te_buffer_count() > 0) {
        te_status st = te_dist_broadcast_buffers();
        if (st != TE_OK)
            return st;
    }
    for (int m = 0; m < accum; m++) {
        te_dist_no_sync(m < accum - 1); /* the gradients are reduced once, after the last micro-batch */
        const size_t before = te_mem_stats_get().requested;
        te_tensor *logits = forward(model, in[2 * m]);
        te_tensor *l = te_cross_entropy(logits, in[2 * m + 1]);
        if (accum > 1)
            l = te_scale(l, 1.0f / (float)accum);
        const size_t after = te_mem_stats_get().requested;
        if (after > before && after - before > activation_bytes)
            activation_bytes = after - before;
        te_status st = te_backward(te_scaler_scale_loss(l));
        if (st != TE_OK)
            return st;
        out[per * m] = l;
        if (with_logits)
            out[per * m + 1] = logits;
    }
    te_status st = te_scaler_unscale(te_params(), te_param_count()); /* before clipping: true norms */
    if (st != TE_OK)
        return st;
    if (o->clip > 0)
        te_clip_grad_norm(te_params(), te_param_count(), o->clip);
    return te_optim_step(opt);
}

/* The training step of ex_train: outputs loss0, logits0, loss1, ... */
static te_status train_step_fn(void *ctx, te_tensor *const *in, te_tensor **out)
{
    const step_ctx *c = ctx;
    return ex_train_step(c->o, c->t->forward, c->t->model, c->opt, in, out, true);
}

/* One evaluation batch: outputs loss, logits. */
static te_status eval_step_fn(void *ctx, te_tensor *const *in, te_tensor **out)
{
    const step_ctx *c = ctx;
    out[1] = c->t->forward(c->t->model, in[0]);
    out[0] = te_cross_entropy(out[1], in[1]);
    return out[0] ? TE_OK : te_error_code();
}

te_graph *ex_graph_new(const ex_opts *o, te_step_fn fn, void *ctx, const char *name, int n_in, int n_out,
                       bool recompile)
{
    te_graph *g = te_graph_new(fn, ctx, &(te_graph_opts){ .mode = o->mode, .name = name, .n_inputs = n_in,
                                                         .n_outputs = n_out, .recompile = recompile });
    if (g && o->save_graph && te_graph_save(g, o->save_graph) != TE_OK) {
        te_graph_free(g);
        return NULL;
    }
    return g;
}

/* One step through g: loads the micro-batches, runs, adds up the mean
 * loss and the correct predictions; *load_ms and *load_cpu_ms get the
 * time spent waiting for data and the process's CPU time meanwhile.
 * TE_ERR_REWOUND: a rewind unwound the step (the loop goes on). */
static te_status train_step(const ex_opts *o, te_loader *ld, te_graph *g, float *loss, int *correct,
                            double *load_ms, double *load_cpu_ms)
{
    te_tensor *in[2 * EX_MAX_ACCUM], *out[2 * EX_MAX_ACCUM];
    *loss = 0.0f;
    *correct = 0;
    *load_ms = *load_cpu_ms = 0.0;
    te_status st = TE_OK;
    for (int m = 0; m < o->accum && st == TE_OK; m++) {
        double t0 = ex_now_ms(), c0 = ex_cpu_ms();
        st = te_loader_next(ld, &in[2 * m], &in[2 * m + 1]);
        *load_ms += ex_now_ms() - t0;
        *load_cpu_ms += ex_cpu_ms() - c0;
    }
    if (st == TE_OK)
        st = te_graph_run(g, in, out);
    for (int m = 0; m < o->accum && st == TE_OK; m++) {
        *loss += te_item(out[2 * m]);
        *correct += count_correct(out[2 * m + 1], in[2 * m + 1]);
    }
    te_step_end();
    return st;
}

/* Mean loss and accuracy over all of t->test in eval mode; its ops are named
 * under the scope "eval" so that they do not match the training ops' names.
 * In graph mode a short last batch gets a plan of its own. */
static te_status evaluate(const ex_opts *o, const ex_task *t, float *loss, float *acc)
{
    te_loader *ld = te_loader_new(t->test, &(te_loader_opts){ .batch = o->batch, .workers = o->workers,
                                                              .seed = o->seed });
    step_ctx c = { .o = o, .t = t };
    te_graph *g = ld ? ex_graph_new(o, eval_step_fn, &c, "eval", 2, 2, true) : NULL;
    if (!g) {
        te_loader_free(ld);
        return te_error_code();
    }
    te_set_training(false);
    te_scope_push("eval");
    double sum = 0.0;
    int64_t correct = 0, seen = 0;
    te_status st = TE_OK;
    for (int64_t b = 0; b < te_loader_batches_per_epoch(ld) && st == TE_OK; b++) {
        te_tensor *in[2], *out[2];
        if ((st = te_loader_next(ld, &in[0], &in[1])) != TE_OK ||
            (st = te_graph_run(g, in, out)) != TE_OK)
            break;
        sum += (double)te_item(out[0]) * (double)in[1]->numel;
        correct += count_correct(out[1], in[1]);
        seen += in[1]->numel;
        te_tape_reset();
    }
    te_scope_pop();
    te_set_training(true);
    te_tape_reset();
    te_graph_free(g);
    te_loader_free(ld);
    *loss = (float)(sum / (double)seen);
    *acc = (float)correct / (float)seen;
    return st;
}

void ex_print_memory(const te_graph *g, const ex_opts *o)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const te_mem_stats m = te_mem_stats_get();
    printf("memory: peak_alloc_bytes=%zu peak_tensor_bytes=%zu peak_rss_kb=%ld", m.peak, m.peak_requested,
           ru.ru_maxrss);
    if (te_backend_device() != TE_DEV_CPU) /* the tensors' memory is the device's */
        printf(" peak_device_bytes=%zu", te_mem_stats_of(te_backend_device()).peak);
    if (o->mode != TE_MODE_GRAPH) { /* a compiled step keeps its activations in its arena */
        printf(" activation_bytes=%zu\n", activation_bytes);
        return;
    }
    printf("\n");
    te_graph_stats s = te_graph_stats_get(g);
    printf("graph: ops=%d kernels=%d fused=%d arena_bytes=%zu lower_bound=%zu unshared_bytes=%zu "
           "compile_ms=%.2f\n",
           s.ops, s.kernels, s.fused, s.arena_bytes, s.lower_bound, s.naive_bytes, s.compile_ms);
}

/* With --load: the state of the file, and ld moved to its data position
 * (a whole number of batches into the same order: its epoch must be the
 * file's). Returns 0 or 2. */
static int resume_train(const ex_opts *o, const ckpt_model *m, te_loader *ld)
{
    const ckpt_info *in = &o->resume;
    int rc = ex_resume(o, m);
    if (rc != 0)
        return rc;
    if (in->data_position % o->batch != 0) {
        fprintf(stderr, "%s: checkpoint %s: data position %lld is not a whole number of --batch %d batches\n",
                prog_name, o->load, (long long)in->data_position, o->batch);
        return 2;
    }
    if (te_loader_seek(ld, in->data_position / o->batch) != TE_OK)
        return ex_fail("cannot move the loader to the checkpoint's data position");
    if (in->epoch >= 0 && te_loader_epoch(ld) != in->epoch) {
        fprintf(stderr, "%s: checkpoint %s: data position %lld is in epoch %lld of this run's loader; the file "
                "says epoch %lld\n", prog_name, o->load, (long long)in->data_position,
                (long long)te_loader_epoch(ld), (long long)in->epoch);
        return 2;
    }
    return 0;
}

static int train_on(const ex_opts *o, const ex_task *t, const te_dataset *train);

int ex_train(const ex_opts *o, const ex_task *t)
{
    te_dataset *corrupted = o->n_corrupt ? ex_corrupt(t->train, o->corrupt, o->n_corrupt) : NULL;
    if (o->n_corrupt && !corrupted)
        return ex_fail("out of memory");
    int rc = train_on(o, t, corrupted ? corrupted : t->train);
    ex_split_free(corrupted);
    return rc;
}

static int train_on(const ex_opts *o, const ex_task *t, const te_dataset *train)
{
    te_loader *ld = te_loader_new(train, &(te_loader_opts){ .batch = ex_rank_batch(o, o->batch), .shuffle = true,
                                                               .drop_remainder = true,
                                                               .workers = o->workers,
                                                               .seed = o->seed, .shard = te_dist_rank(),
                                                               .shards = te_dist_size() });
    te_optim *opt = ld && ex_amp_start(o) == TE_OK ? ex_optim_new(o) : NULL;
    step_ctx c = { .o = o, .t = t, .opt = opt };
    ckpt_attr attrs[EX_MAX_CKPT_ATTRS];
    const ckpt_model cm = ex_ckpt_model(o, opt, t->buffers, t->n_buffers, attrs);
    int rc = opt && o->load ? resume_train(o, &cm, ld) : 0;
    if (opt && rc == 0 && o->dp && te_dist_broadcast_params() != TE_OK)
        rc = ex_fail("cannot broadcast the parameters");
    if (o->dp && ex_prints())
        printf("dp: %d ranks over %s, %d samples each\n", te_dist_size(), te_dist_transport(),
               ex_rank_batch(o, o->batch));
    te_graph *g = opt && rc == 0 ? ex_graph_new(o, train_step_fn, &c, "train", 2 * o->accum, 2 * o->accum, false)
                                 : NULL;
    double *ms = g ? malloc(2 * (size_t)o->steps * sizeof *ms) : NULL, *cpu = ms ? ms + o->steps : NULL;
    if (!ms) {
        if (rc == 0)
            rc = ex_fail(g ? "out of memory" : "cannot set up training");
        te_graph_free(g);
        te_optim_free(opt);
        te_loader_free(ld);
        return rc;
    }
    /* The loop's own state, its step and the samples it drew, in a region
     * time travel puts back (docs/engine.md "Time travel"); `ran` is not
     * in it: a step at or below it runs again after a rewind. */
    const int first = o->load ? (int)o->resume.step : 0, last = ex_last_step(o);
    int timed = 0;
    struct { int64_t step, position; } loop = { first, o->load ? o->resume.data_position : 0 };
    const int region = te_record_host("loop", &loop, sizeof loop);
    te_checkpoint_writer(); /* the debugger's `checkpoint save FILE`: ex_save_requested */
    int64_t ran = first - 1;
    if (region < 0)
        rc = ex_fail("cannot register the loop's state");
    for (; rc == 0 && (loop.step < last || te_rewind_pending()); loop.step++) {
        double load_ms, load_cpu, t0 = ex_now_ms(), c0 = ex_cpu_ms();
        te_step_begin(); /* a rewind puts `loop` back here */
        const int step = (int)loop.step;
        const float scale = ex_scale_now();
        float loss;
        int correct;
        te_status st = train_step(o, ld, g, &loss, &correct, &load_ms, &load_cpu);
        if (st == TE_ERR_REWOUND)
            continue;
        if (st != TE_OK) {
            char what[64];
            snprintf(what, sizeof what, "step %d failed", step);
            rc = ex_fail(what);
            te_tape_reset();
            break;
        }
        const bool replayed = step <= ran;
        ran = step > ran ? step : ran;
        loop.position += (int64_t)o->batch * o->accum;
        ms[step - first] = ex_now_ms() - t0 - load_ms; /* a replayed step's time replaces its first */
        cpu[step - first] = ex_cpu_ms() - c0 - load_cpu;
        timed = step - first + 1 > timed ? step - first + 1 : timed;
        if (step % o->log_every == 0 || step == last - 1) {
            double sums[2] = { loss, correct }; /* data parallel: over every rank's share */
            if (o->dp && te_dist_allreduce_host("loss", sums, 2) != TE_OK) {
                rc = ex_fail("cannot sum the loss over the ranks");
                break;
            }
            if (ex_prints()) {
                printf("step=%d loss=%.6f acc=%.4f", step, sums[0] / te_dist_size(),
                       sums[1] / (double)(o->batch * o->accum));
                ex_print_scale(scale);
                printf("%s\n", replayed ? " (replayed)" : "");
            }
        }
        const ckpt_info now = { .step = step + 1, .seed = te_seed(), .rng_step = step + 1,
                                .data_position = loop.position, .epoch = te_loader_epoch(ld) };
        if (ex_prints() && (ex_save_due(o, step + 1) || (o->save && step == last - 1)))
            rc = ex_save(o, &cm, &now);
        ex_save_requested(&cm, &now);
    }
    te_record_host_remove(region);
    const int prof_rc = ex_profile_finish();
    float loss = 0.0f, acc = 0.0f;
    if (rc == 0 && o->time && timed > 0 && ex_prints()) {
        ex_print_times(ms, cpu, timed);
        ex_print_memory(g, o);
    }
    if (rc == 0 && evaluate(o, t, &loss, &acc) != TE_OK) /* every rank: the same parameters, all the test set */
        rc = ex_fail("evaluation failed");
    if (rc == 0 && ex_prints())
        printf("final: loss=%.6f acc=%.4f\n", loss, acc);
    if (rc == 0)
        rc = prof_rc;
    free(ms);
    te_graph_free(g);
    te_optim_free(opt);
    te_loader_free(ld);
    return rc;
}
