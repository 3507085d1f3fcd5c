/*
 * common.h — what the example programs share: the common flags, the
 * training loop and the final evaluation on held-out data.
 *
 * A program fills an ex_opts with its defaults, lists its own flags in an
 * ex_program, and then:
 *
 *     ex_parse(argc, argv, &prog, &opts);  // exits 0 on --help, 2 on a bad flag
 *     ex_start(&opts);                     // te_init, --inject, --dump, --profile; exits 2 on a bad spec
 *     ... build datasets and parameters ...
 *     return ex_train(&opts, &task);       // step=N loss=X acc=Y lines, then final:
 *
 * A program with a loop of its own calls ex_profile_finish() after it.
 */
#ifndef TDBG_EXAMPLES_COMMON_H
#define TDBG_EXAMPLES_COMMON_H

#include "checkpoint.h"
#include "te.h"

#define EX_MAX_INJECT 16
#define EX_MAX_CORRUPT 16
#define EX_MAX_ACCUM 32 /* micro-batches per step: a graph has at most 64 inputs */
#define EX_MAX_CKPT_ATTRS 16

typedef enum { EX_SGD, EX_ADAM, EX_ADAMW } ex_optim_kind;

typedef struct ex_opts {
    int steps;          /* optimizer steps */
    int batch;          /* samples per micro-batch */
    int accum;          /* micro-batches per step, gradients summed */
    int64_t train_size; /* samples in the training split */
    float lr;
    uint64_t seed;
    int threads;        /* 0: all cores */
    int workers;        /* loader threads; 0: the training thread loads */
    int log_every;
    ex_optim_kind optim;
    float momentum;     /* SGD only */
    float weight_decay;
    float clip;         /* max global gradient norm; 0: no clipping */
    bool time;          /* print ms per step and peak memory at the end */
    bool dp;            /* --dp: data parallel across the ranks of mpirun; --batch is the global batch */
    te_mode mode;       /* eager, or graph: the step traced, compiled and replayed */
    const char *save_graph; /* graph mode: write the IR after each pass here */
    const char *dump;       /* dump spec (--dump), else TDBG_DUMP's */
    const char *profile;    /* profile spec (--profile), else TDBG_PROFILE's */
    const char *inject[EX_MAX_INJECT];
    int n_inject;
    const char *corrupt[EX_MAX_CORRUPT]; /* --corrupt: bad samples planted in the training set */
    int n_corrupt;
    const char *backend; /* --backend: "cpu" or "cuda"; NULL: cpu */
    te_amp_level amp;   /* --amp: O0 (default) .. O3 */
    bool amp_bf16;      /* --amp-dtype bf16; f16 by default */
    /* --loss-scale: not given (dynamic at O2, none elsewhere), dynamic,
     * or a fixed scale; --scale-init, --scale-window and
     * --scale-hysteresis, 0: the scaler's defaults (2^16, 2000, 1). */
    enum { EX_SCALE_DEFAULT, EX_SCALE_DYNAMIC, EX_SCALE_FIXED } scale_mode;
    float loss_scale; /* EX_SCALE_FIXED's */
    float scale_init;
    int scale_window, scale_hysteresis;
    const char *save, *load; /* --save, --load: checkpoints (docs/examples.md "Checkpoints") */
    int save_every;          /* --save-every: also after every N steps; 0: when training stops only */
    int stop_at;             /* --stop-at: stop after N steps of the --steps schedule; 0: at --steps */
    ckpt_info resume;        /* with --load: the checkpoint's step, seed and data position (ex_parse) */
} ex_opts;

/* A flag of one program, beside the common ones. set() returns false when
 * the value is malformed, with what the valid values are in why (n bytes:
 * "unknown dataset; expected blobs or spirals"); the caller then prints
 * that and the usage and exits 2. */
typedef struct ex_flag {
    const char *name;   /* "--hidden" */
    const char *arg;    /* "LIST" */
    const char *help;   /* one line, ending with the default in parentheses */
    bool (*set)(const char *value, void *cfg, char *why, size_t n);
} ex_flag;

typedef struct ex_program {
    const char *name;       /* "mlp" */
    const char *summary;    /* one line: what it trains on what */
    const ex_flag *flags;   /* terminated by an entry with name NULL */
    void *cfg;              /* handed to each flag's set() */
    /* Common flags the program does not take ("--train-size", ...; NULL-
     * terminated, or NULL for none): left out of the usage and refused,
     * with `unsupported_why`. */
    const char *const *unsupported;
    const char *unsupported_why;
    const char *output;     /* the usage's last lines, on what a run prints; NULL: the classifiers' */
    /* What a checkpoint of this program must match (the model's shape, the
     * data): fills out (at most EX_MAX_CKPT_ATTRS) and returns the count.
     * Strings it points to must live as long as cfg. */
    int (*ckpt_attrs)(const void *cfg, const ex_opts *o, ckpt_attr *out);
} ex_program;

/* Parses argv into o (which holds the defaults on entry) and the program's
 * own flags. Prints the usage and exits 0 on --help; on an unknown or
 * malformed flag, names it, prints the usage to stderr and exits 2. With
 * --load it reads the checkpoint's info into o->resume and takes its seed;
 * a checkpoint that does not fit (its program, p->ckpt_attrs, nothing left
 * of --steps) is one line naming the file and exit 2. */
void ex_parse(int argc, char **argv, const ex_program *p, ex_opts *o);

/* Starts the engine with o's seed, threads and backend, adds o's injections
 * and starts the dump and the profiler. A bad injection, dump or profile
 * spec, or a --backend with no usable device, prints te_error() and exits 2. */
void ex_start(const ex_opts *o);
/* After the training loop: stops the profiler of --profile (TDBG_PROFILE)
 * and, with when=always, writes its capture, printing `profile: wrote FILE
 * ...`. Returns 0 (also when no profile was asked for), or 2 after saying
 * why the file could not be written. ex_train calls it. */
int ex_profile_finish(void);
/* The AMP level and the loss scaler of o's flags, once the model's
 * parameters are registered (O2/O3 convert them); TE_OK, or te_error(). */
te_status ex_amp_start(const ex_opts *o);
/* Does o run with a loss scaler (--loss-scale, or --amp O2)? */
bool ex_scaler_on(const ex_opts *o);
/* The scale the next step's loss is scaled by; 0 without a scaler. */
float ex_scale_now(void);
/* A step line's end for a step whose loss was scaled by `used`:
 * " scale=65536", then " skipped" when the step was skipped; nothing
 * without a scaler. */
void ex_print_scale(float used);

/* A classifier: logits [N, classes] of a batch x, or NULL with te_error() set. */
typedef te_tensor *(*ex_forward_fn)(const void *model, te_tensor *x);

typedef struct ex_task {
    const te_dataset *train, *test;
    ex_forward_fn forward;
    const void *model;
    /* Persistent tensors the model changes as it trains beside its
     * parameters (batch norm's running statistics), each with a unique
     * name: checkpoints keep them. */
    te_tensor *const *buffers;
    int n_buffers;
} ex_task;

/* Trains with cross-entropy for o->steps steps (from the checkpoint's step
 * with --load, to --stop-at), logging `step=N loss=X acc=Y` every
 * o->log_every steps (and at the last), saving per --save and
 * --save-every, then evaluates on t->test in eval mode and prints `final:
 * loss=X acc=Y`. Returns the exit status: 0, or 2 after printing
 * te_error() when an op fails or the reason a checkpoint did not load or
 * save. */
int ex_train(const ex_opts *o, const ex_task *t);

/* Samples [offset, offset + size) of d as a dataset of their own: a
 * held-out split from the same generator. Free with ex_split_free(). */
te_dataset *ex_split(const te_dataset *d, int64_t offset, int64_t size);
void ex_split_free(te_dataset *split);
/* --corrupt KIND@sample=I[,value=X] (corrupt.c): d with those samples
 * altered, as a broken pipeline would (nan, inf: one value; label: the
 * label, value or the class count; zero: every value; scale: every value
 * times value or 255). Free with ex_split_free(). ex_corrupt_parse checks
 * one spec (out: an internal struct), false with why. */
te_dataset *ex_corrupt(const te_dataset *d, const char *const *specs, int n_specs);
bool ex_corrupt_parse(const char *spec, void *out, char *why, size_t n);
bool ex_corrupt_check(const char *spec, char *why, size_t n);

/* ---- for programs with a loop of their own (gpt) ---------------------------- */

/* The optimizer o's flags ask for, over every registered parameter. */
te_optim *ex_optim_new(const ex_opts *o);
/* One training step, for a te_graph step function: o->accum micro-batches
 * (inputs x0, y0, x1, y1, ...) of forward and cross-entropy, each loss
 * scaled by 1/accum so the summed gradients are those of the mean over all
 * of them, and by the loss scale (te_scaler_scale_loss), and backward;
 * then the gradients unscaled (te_scaler_unscale), clipped, and opt's
 * update (skipped on a non-finite gradient). Outputs loss0,
 * loss1, ..., or with_logits loss0, logits0, loss1, logits1, ... */
te_status ex_train_step(const ex_opts *o, ex_forward_fn forward, const void *model, te_optim *opt,
                        te_tensor *const *in, te_tensor **out, bool with_logits);
/* --optim's name of o->optim: "sgd", "adam" or "adamw". */
const char *ex_optim_name(const ex_opts *o);
/* A graph of fn in o's mode, its IR saved per --save-graph; NULL with
 * te_error() on failure. */
te_graph *ex_graph_new(const ex_opts *o, te_step_fn fn, void *ctx, const char *name, int n_in, int n_out,
                       bool recompile);
double ex_now_ms(void);
/* The process's CPU time (all its threads, user and system), in ms. */
double ex_cpu_ms(void);
/* --time's lines: `time: ms_per_step median=... total_ms=... cpu_ms=...`
 * over ms[0..n) (wall) and cpu_ms[0..n) (ex_cpu_ms) after the warm-up
 * steps, then `memory: ...` (and `graph: ...` in graph mode). */
void ex_print_times(double *ms, const double *cpu_ms, int n);
void ex_print_memory(const te_graph *g, const ex_opts *o);

/* ---- checkpoints (resume.c) ------------------------------------------------ */

/* ex_parse's last part: remembers p for the checkpoints and, with --load,
 * reads the file's info into o->resume and its seed into o->seed, or
 * says why not and exits 2. */
void ex_resume_read(const ex_program *p, ex_opts *o);
/* The step a run stops after: --stop-at, or --steps. */
int ex_last_step(const ex_opts *o);
/* The checkpoint description of this run: the program's name and
 * ckpt_attrs (into attrs, EX_MAX_CKPT_ATTRS of them), opt, and buffers. */
ckpt_model ex_ckpt_model(const ex_opts *o, te_optim *opt, te_tensor *const *buffers, int n_buffers,
                         ckpt_attr *attrs);
/* --batch and --train-size as attributes (a loader's order depends on
 * them): a ckpt_attrs function of a program with a te_loader adds them. */
int ex_loader_attrs(const ex_opts *o, ckpt_attr *out);
/* With --load: the parameters, buffers, optimizer and scaler from the file
 * into m's, and the engine's step counter set to the checkpoint's; prints
 * `resumed: FILE at step S, data position P`. After ex_amp_start and the
 * optimizer, before the first step. Returns 0, or 2 after saying why. */
int ex_resume(const ex_opts *o, const ckpt_model *m);
/* Whether --save-every asks for a checkpoint once `done` steps are done
 * (the one at the last step is --save's own). */
bool ex_save_due(const ex_opts *o, int done);
/* Writes --save's checkpoint of m with info; prints `saved: FILE at step
 * N`. Returns 0, or 2 after saying why. */
int ex_save(const ex_opts *o, const ckpt_model *m, const ckpt_info *info);
/* After a step: the checkpoint a front end asked for (the debugger's
 * `checkpoint save FILE`, te_checkpoint_take), written as --save's; a
 * failure is said and training goes on. */
void ex_save_requested(const ckpt_model *m, const ckpt_info *info);

/* Parses "a,b,c" into at most max positive ints no larger than limit;
 * returns the count, or 0 when s is malformed. */
int ex_parse_list(const char *s, int *out, int max, int limit);

/* Prints "NAME: what failed: te_error()" to stderr; returns 2 for exit(). */
int ex_fail(const char *what);
/* Data parallel (--dp): this rank's share of a global batch of n samples
 * (n / ranks; n itself without --dp), and whether this process prints the
 * run's lines (rank 0, or no --dp). */
int ex_rank_batch(const ex_opts *o, int n);
bool ex_prints(void);

#endif
