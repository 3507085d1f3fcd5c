/*
 * diff.h — `tdbg-diff`: compares two dumps tensor by tensor, in the
 * execution order of the first, and names the op where they part.
 *
 *     tdbg-diff dumps/eager dumps/graph
 *
 * Tensors pair up by (step, op, in/out, slot); for each pair the values are
 * streamed chunk by chunk (diff_stream.c) into running sums (diff_metrics.c);
 * the op graph of run.h5 then says which divergent op is a root cause and
 * which only inherited a difference (diff_verdict.c); diff_output.c prints
 * the table, CSV or JSON and the summary. docs/diff.md is the user's guide.
 *
 * The parts, one file each:
 *   diff.c          tdbg_diff_main: the run, step after step
 *   diff_opts.c     options, the usage text, the --map file
 *   diff_align.c    the two dumps' steps, and pairing a step's tensors
 *   diff_stream.c   reading and comparing a step's pairs on every core
 *   diff_metrics.c  per-element metrics and default tolerances
 *   diff_verdict.c  divergence verdicts over the op graph
 *   diff_output.c   table, CSV, JSON and the summary
 */
#ifndef TDBG_DIFF_H
#define TDBG_DIFF_H

#include "dump.h"
#include "h5file.h"
#include "te.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Runs `tdbg-diff ARGS` (argv as a program gets it), writing the report to
 * out and messages to err. Returns the exit status: 0 everything compared
 * is within tolerance, 1 something differs, 2 trouble. */
int tdbg_diff_main(int argc, char **argv, FILE *out, FILE *err);

enum { DIFF_RC_SAME = 0, DIFF_RC_DIFFER = 1, DIFF_RC_TROUBLE = 2 };

#define DIFF_REL_EPS 1e-12            /* relative error: |b - a| / max(|a|, DIFF_REL_EPS) */
#define DIFF_REL_LOW 1e-3             /* the two relative-error thresholds counted */
#define DIFF_REL_HIGH 5e-3
#define DIFF_CHUNK_CAP (4u << 20)     /* a stored chunk larger than this takes the HDF5 path */
#define DIFF_BLOCK ((int64_t)1 << 20) /* elements per side read at once on the HDF5 path */
#define DIFF_WHY_MAX (2 * PATH_MAX)   /* a message naming a file and a dataset */

/* ---- tolerances and metrics (diff_metrics.c) ------------------------------------ */

/* A pair passes when |b - a| <= atol + rtol * |a| + ulp * ulp_low(|a|) for
 * every element (A is the reference), NaN matching NaN and an infinity the
 * same infinity. ulp_low(x) is the spacing of ulp_dt's values at x (2^(e-10)
 * for f16 with x in [2^e, 2^(e+1)), 2^(e-7) for bf16; f16's subnormal
 * spacing 2^-24 below 2^-14); ulp is 0 for pairs of the same dtype. */
typedef struct diff_tol {
    double atol, rtol;
    double ulp;                 /* k: pairs across dtypes (f16/bf16 with f32) */
    te_dtype ulp_dt;            /* the lower precision, whose ULPs count */
} diff_tol;

/* ULPs of the lower precision a pair across dtypes may differ by: each
 * output is rounded once (0.5 ulp) from inputs that carry the rounding of
 * every op before it; DIFF_ULP_K covers a few ops' worth of it on
 * well-conditioned values (docs/diff.md, "Across precisions"). */
#define DIFF_ULP_K 8.0

/* The defaults of a pair: the lower precision of the two decides (i32 with
 * i32: exact; f16 or bf16 with f32: atol + DIFF_ULP_K ulps of it, rtol 0;
 * user.ulp 0: its rtol instead). Negative fields of user (--atol, --rtol,
 * --ulp not given) take them. */
diff_tol diff_tol_for(te_dtype a, te_dtype b, diff_tol user);
/* The spacing of dt's values (f16 or bf16) at magnitude x; 0 for f32. */
double diff_ulp_low(te_dtype dt, double x);
/* What the pair may differ by beyond atol at reference magnitude ax. */
double diff_tol_slack(diff_tol t, double ax);

/* Running sums over element pairs, merged in element order (so that the
 * result does not depend on the number of threads). */
typedef struct diff_acc {
    int64_t n, n_finite;            /* pairs seen; pairs with both values finite */
    double sum_abs, sum_sq, dot, sq_a, sq_b;
    double max_abs, max_rel;
    int64_t max_abs_at, max_rel_at; /* flat index, -1 before any finite pair */
    int64_t n_fail;                 /* outside tolerance (non-finite mismatches too) */
    int64_t n_rel_low, n_rel_high;  /* relative error above DIFF_REL_LOW / HIGH */
    int64_t nan_a, nan_b, inf_a, inf_b;
    int64_t n_nonfinite;            /* a NaN or Inf facing anything but the same */
    int64_t first_fail;             /* flat index, -1 */
    double min_atol, min_rtol;      /* the least atol (at rtol) and rtol (at atol) passing */
    int64_t max_ulp;                /* -1 when the dtypes differ */
} diff_acc;

void diff_acc_init(diff_acc *acc, bool same_dtype);
/* Adds pairs first .. first + count - 1, a and b holding those elements as
 * stored (dtypes ta and tb). */
void diff_acc_add(diff_acc *acc, const void *a, te_dtype ta, const void *b, te_dtype tb,
                  int64_t first, int64_t count, diff_tol tol);
/* Adds the sums of the elements after into's. */
void diff_acc_merge(diff_acc *into, const diff_acc *after);

/* A compared pair's metrics; errors are over pairs with both values finite. */
typedef struct diff_metrics {
    double max_abs, mean_abs, max_rel, rmse, cosine;
    int64_t max_abs_at, max_rel_at;      /* flat index, -1 */
    int64_t n_fail;
    double frac_fail, frac_rel_low, frac_rel_high;
    int64_t max_ulp;                     /* -1: different dtypes */
    int64_t nan_a, nan_b, inf_a, inf_b, n_nonfinite;
    double min_atol, min_rtol;
} diff_metrics;

void diff_metrics_finish(const diff_acc *acc, diff_metrics *m);

/* ---- options (diff_opts.c) ----------------------------------------------------- */

/* Metric columns of the table and CSV, in this order. */
typedef enum {
    DIFF_M_MAX_ABS, DIFF_M_MAX_ABS_INDEX, DIFF_M_MEAN_ABS, DIFF_M_MAX_REL, DIFF_M_RMSE,
    DIFF_M_COSINE, DIFF_M_N_FAIL, DIFF_M_FRAC_FAIL, DIFF_M_FRAC_REL_LOW, DIFF_M_FRAC_REL_HIGH,
    DIFF_M_MAX_ULP, DIFF_M_NAN_A, DIFF_M_NAN_B, DIFF_M_INF_A, DIFF_M_INF_B, DIFF_M_MIN_ATOL,
    DIFF_M_MIN_RTOL, DIFF_M_COUNT
} diff_metric;
extern const char *const diff_metric_names[DIFF_M_COUNT];

typedef enum { DIFF_TABLE, DIFF_CSV, DIFF_JSON } diff_format;

/* --map: B's op names renamed to A's. An entry whose two names end in "/"
 * and a star renames a prefix ("enc/", star -> "encoder/", star). */
typedef struct diff_map {
    int n;
    struct diff_map_entry {
        char from[TE_NAME_MAX], to[TE_NAME_MAX];
        bool prefix;
    } *e;
} diff_map;

typedef struct diff_opts {
    const char *a, *b;          /* the two dumps as given */
    diff_tol tol;               /* -1: per dtype */
    dump_spec sel;              /* --ops and --steps, parsed as in a dump spec */
    bool has_ops, has_steps;
    dump_io io;
    bool metric[DIFF_M_COUNT];  /* the table's and CSV's columns */
    bool metrics_given;
    bool first, summary_only, quiet;
    diff_format format;
    int color;                  /* -1 auto, 0 never, 1 always */
    diff_map map;
    const char *ranks;          /* --ranks DIR: the ranks of a data-parallel dump, each against rank 0 */
} diff_opts;

/* Parses argv; 0, or the exit status (usage printed: 2; --help: 0 with
 * *done set). */
int diff_opts_parse(int argc, char **argv, diff_opts *o, bool *done, FILE *out, FILE *err);
void diff_opts_free(diff_opts *o);
/* B's op name as A calls it, into buf (name itself when unmapped). */
const char *diff_map_apply(const diff_map *m, const char *name, char *buf, size_t n);

/* ---- one invocation ---------------------------------------------------------- */

typedef struct diff_ctx {
    FILE *out, *err;
    diff_opts o;
    int rc;                     /* the worst exit status so far */
    bool color;
    int op_width, step_width;   /* the table's first columns */
    int n_out;                  /* rows written so far */
} diff_ctx;

/* "tdbg-diff: MESSAGE" on the error stream ("warning: " first when rc is 0);
 * raises the exit status to rc. */
void diff_complain(diff_ctx *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- the two dumps and their steps (diff_align.c) ------------------------------- */

/* One side: a run directory, or a step file (then its directory's run.h5,
 * when there is one, gives the op graph). */
typedef struct diff_side {
    const char *arg;
    char dir[PATH_MAX];
    const char *file;           /* the step file given, or NULL */
    dump_step_entry *e;         /* its complete step files */
    int n_e;
    bool has_run;
    dump_run_meta meta;
    dump_op_row *ops;           /* run.h5's /ops, in execution order */
    int n_ops;
} diff_side;

/* Opens one side; false (trouble reported) when it cannot be compared. */
bool diff_side_open(diff_ctx *c, diff_side *s, const char *arg);
void diff_side_close(diff_side *s);

/* A step both sides have (after --steps). */
typedef struct diff_step {
    int64_t step, step_b;       /* step_b differs only for two step files */
    char path_a[PATH_MAX + 64], path_b[PATH_MAX + 64];
} diff_step;

/* The steps to compare into *steps (free() it), and the steps only one side
 * has as text ("3-5, 9", "" for none). Count, 0 when nothing is in common. */
int diff_steps_common(const diff_ctx *c, const diff_side *a, const diff_side *b,
                      diff_step **steps, char *only_a, char *only_b, size_t n);

typedef enum {
    DIFF_COMPARED,      /* both sides, same shape: values compared */
    DIFF_SHAPE,         /* both sides, shapes differ */
    DIFF_ONLY_A, DIFF_ONLY_B,
    DIFF_UNREADABLE,    /* could not be read (trouble reported) */
} diff_status;

typedef enum { DIFF_NONE, DIFF_SAME, DIFF_ROOT, DIFF_INHERITED } diff_verdict;

enum diff_lowp_state { DIFF_LOWP_NONE, DIFF_LOWP_OK, DIFF_LOWP_OVER, DIFF_LOWP_SKIP };

/* What recomputing an op of the low-precision run in f32 said (diff_lowp.c):
 * its out0 against the recomputation. The bound of an element is bound_ulp
 * ulps of the output's dtype at the recomputed value plus slack. */
typedef struct diff_lowp_res {
    int state;                  /* enum diff_lowp_state */
    double ulp;                 /* OVER: the largest distance in ulps of the dtype among the
                                 * elements beyond the bound (inf: overflow, NaN) */
    double max_abs;             /* OK, OVER: the largest |output - recomputation| (inf: a
                                 * non-finite value where the other is finite) */
    double max_ulp;             /* OK, OVER: the same in ulps of an f16/bf16 output, element
                                 * by element (NaN for an f32 output) */
    double bound_ulp;           /* 0.5 for an f16/bf16 output (one rounding), 0 for f32 */
    double slack;               /* DIFF_LOWP_SLACK times the largest |recomputed value| */
    int64_t n_over;             /* elements beyond the bound */
    bool first;                 /* the run's first op beyond rounding: diverges here */
    char skip[TE_NAME_MAX + 48]; /* SKIP: "Dropout: random", "Foo" (a type not rebuilt) */
} diff_lowp_res;

/* One tensor of a step: a pair, or a tensor one side lacks. The info
 * pointers live as long as the step's readers. */
typedef struct diff_row {
    int64_t step;
    int order;                  /* execution order: exec_index; the step's end for
                                 * parameters and gradients (exec_index -1) */
    const dump_tensor_info *a, *b;   /* NULL on the side that lacks it */
    const dump_tensor_info *info;    /* a, else b: op, io, slot, tensor, location */
    char op[TE_NAME_MAX];       /* A's name (B's after --map for only-in-B) */
    int ia, ib;                 /* indices in the step readers, -1 */
    diff_status status;
    diff_tol tol;
    diff_metrics m;
    bool differs;               /* outside tolerance, or shapes differ */
    diff_verdict verdict;
    bool unchecked_inputs;      /* a root cause none of whose inputs was compared */
    bool first;                 /* the first divergent tensor of the run */
    diff_lowp_res lowp;         /* its op's recomputation (diff_lowp.c); state NONE: none */
    const char *fused_in;       /* one-sided: the other side's fused kernel that never
                                 * materialised it ("k4 fused-attention: h0/attn/scores,
                                 * ..."), or NULL; lives as long as the step's readers */
} diff_row;

/* Pairs the tensors of one step: A's in execution order (--ops, --io
 * applied), each with B's of the same op (after --map), io and slot, then
 * those of B that A lacks. Count of rows into *rows (free() it), -1 when
 * out of memory. */
int diff_pair_step(const diff_ctx *c, int64_t step, dump_step_reader *ra, dump_step_reader *rb,
                   diff_row **rows);

/* Sets fused_in of the one-sided rows whose op the other side computed
 * inside a fused kernel (its run.h5's kernel column, else its step file's):
 * intermediates that side never held, not a difference (diff_align.c). */
void diff_mark_fused(diff_row *rows, int n_rows, const diff_side *a, const diff_side *b,
                     dump_step_reader *ra, dump_step_reader *rb);

/* ---- values (diff_stream.c) ------------------------------------------------------ */

/* Compares the values of a step's DIFF_COMPARED rows and sets their
 * metrics and differs (and differs of DIFF_SHAPE rows); a tensor that cannot
 * be read becomes DIFF_UNREADABLE, with the reason reported as trouble.
 * Memory for values: one stored chunk of each side per thread, whatever the
 * tensors' sizes. In three parts, so that the next step can be opened
 * (HDF5) while this one is compared (no HDF5): */
typedef struct diff_plan diff_plan;
/* Where each pair's chunks are (HDF5 calls); NULL when out of memory. */
diff_plan *diff_plan_new(diff_ctx *c, dump_step_reader *ra, dump_step_reader *rb, diff_row *rows,
                         int n_rows);
/* Compares the chunks on every thread, with no HDF5 call; one of the
 * threads runs also(arg) first, when given (it may call HDF5). */
void diff_plan_run(diff_plan *p, void (*also)(void *), void *arg);
/* Merges the chunks' sums into the rows' metrics, compares the rest
 * (compressed tensors) through HDF5 and frees p. */
void diff_plan_finish(diff_ctx *c, diff_plan *p);
void diff_plan_free(diff_plan *p);

/* ---- verdicts (diff_verdict.c) ------------------------------------------------- */

typedef struct diff_graph diff_graph;

/* The op graph of A's run.h5 (ops may be NULL): each op's inputs and
 * outputs by tensor name; a backward op grad/X also reads its reads list
 * when lists_reads (run.h5 has them), else X's inputs and outputs; an update
 * op its parameter and its optimizer state. In-place writes are the ops'
 * inplace lists when lists_inplace, else every input no op writes. NULL
 * when out of memory. */
diff_graph *diff_graph_new(const dump_op_row *ops, int n_ops, bool lists_inplace, bool lists_reads);
void diff_graph_free(diff_graph *g);
/* Gives each row of a step its verdict, in execution order: a divergent
 * tensor is inherited when an input of its op differs or was computed from a
 * tensor that differed before (this step or an earlier one, through the
 * parameters), else the op diverges here. Steps go in order. */
void diff_graph_step(diff_graph *g, diff_row *rows, int n_rows);

/* ---- across precisions (diff_lowp.c) ------------------------------------------------ */

/* An op of the low-precision run recomputed in f32 from its own dumped
 * inputs: its output may differ from that by one rounding of its dtype (0.5
 * ulp; nothing for an f32 output) plus DIFF_LOWP_SLACK times the largest
 * |value| of the recomputed tensor: f32 accumulation in another order (a
 * native bf16 GEMM's blocks against the f32 kernel's; 2^-16 covers sums of
 * 65536 terms at 2^-24 each, relative to the largest output). */
#define DIFF_LOWP_SLACK 0x1p-16

typedef struct diff_lowp_op {
    int64_t step;
    char op[TE_NAME_MAX], type[TE_NAME_MAX];
    te_dtype dtype;             /* its output's */
    diff_lowp_res res;
} diff_lowp_op;

typedef struct diff_lowp {
    int low;                    /* the low-precision side: 0 A, 1 B; -1 none (no analysis) */
    const diff_side *side;
    char level[24];             /* "O2 f16" */
    bool engine;                /* te_init was called */
    int recomputed, over, n_skipped;
    char skipped[512];          /* the kinds not recomputed, "Dropout: random, ..." */
    bool has_first;
    diff_lowp_op first;         /* the first op beyond rounding: diverges here */
} diff_lowp;

/* The side whose run.h5 says O1-O3 while the other's does not; none else. */
void diff_lowp_init(diff_lowp *lp, const diff_side *a, const diff_side *b);
/* Recomputes the step's forward ops of the low side (after the verdicts of
 * diff_graph_step): rows of an op beyond rounding become DIFF_ROOT, divergent
 * rows of an op within it DIFF_INHERITED. */
void diff_lowp_step(diff_ctx *c, diff_lowp *lp, dump_step_reader *ra, dump_step_reader *rb,
                    diff_row *rows, int n_rows);
void diff_lowp_end(diff_lowp *lp);

/* ---- data parallel (diff_ranks.c, diff_combine.c) ---------------------------------- */

/* A data-parallel dump: DIR/rank-0 .. DIR/rank-(n-1), each a run of its own
 * (docs/dump-format.md, "A rank's dump"), holding the same steps. */
typedef struct diff_ranks {
    const char *dir;
    int n;
    char (*path)[PATH_MAX];     /* DIR/rank-R */
    diff_side *side;            /* each opened */
} diff_ranks;

/* Is dir a data-parallel dump (a rank-0 directory in it and no run.h5)? */
bool diff_is_ranks(const char *dir);
/* Opens every rank; false (trouble reported, naming the directory) when a
 * rank is missing, is not a dump, or holds other steps than rank 0. */
bool diff_ranks_open(diff_ctx *c, diff_ranks *r, const char *dir);
void diff_ranks_close(diff_ranks *r);
/* tdbg-diff --ranks DIR: each rank against rank 0, step by step (update
 * outputs, AllReduce and Broadcast outputs bit for bit; the rest's
 * statistics as a table of spread). Returns the exit status. */
int diff_ranks_main(diff_ctx *c);

/* The ranks combined into one run, as one process with their global batch
 * would have dumped it, written as a dump in a new temporary directory
 * (its path into dir): per tensor, the mean over the ranks where each has
 * ref's shape, the ranks' tensors one after the other along dim 0 where
 * their dim 0 adds up to ref's (a backward tensor divided by the ranks);
 * collectives left out. ref: the one-process side (its shapes). False
 * (trouble reported) when it cannot be written. */
bool diff_combine(diff_ctx *c, const diff_ranks *r, const diff_side *ref, char *dir, size_t n);
/* Removes what diff_combine wrote. */
void diff_combine_remove(const char *dir);

/* ---- output (diff_output.c) ------------------------------------------------------- */

/* What the summary tells; kept over the whole run. */
typedef struct diff_cause {
    int64_t step;
    char op[TE_NAME_MAX], op_type[TE_NAME_MAX], file[DUMP_FILE_MAX], kernel[DUMP_TEXT_MAX];
    te_phase phase;
    int line;
    char tensors[256];          /* "out0 out1" */
    double max_abs, max_rel, cosine;
    bool no_inputs;             /* none of its inputs was compared */
    bool input;                 /* an input of it differs though nothing compared before it
                                 * did: what wrote it was not compared */
} diff_cause;

typedef struct diff_summary {
    int steps, tensors;         /* compared */
    int same, root, inherited, only_a, only_b, unreadable;
    int fused_a, fused_b;       /* one-sided, inside the other side's fused kernels (not in only_*) */
    char fused_kernel[DUMP_TEXT_MAX]; /* the first such kernel */
    int n_causes, cap_causes;
    diff_cause *causes;
    bool has_first;
    diff_cause first;           /* the first divergent tensor's op */
    char first_io[16], first_tensor[TE_NAME_MAX];
    double need_atol, need_rtol;   /* the least tolerances that would pass everything */
    char only_a_steps[512], only_b_steps[512];
    bool stopped;               /* --first stopped the run */
    const diff_lowp *lowp;      /* the analysis across precisions, or NULL */
} diff_summary;

/* Opens the report: the table's header (c->op_width and step_width set),
 * CSV's, or JSON's opening. */
void diff_out_begin(diff_ctx *c, const diff_side *a, const diff_side *b);
/* One step's rows (up to the first divergence with --first). */
void diff_out_rows(diff_ctx *c, const diff_row *rows, int n_rows);
/* The summary: root causes first, then the first divergence, the least
 * tolerances and the counts; closes JSON. */
void diff_out_end(diff_ctx *c, const diff_summary *s);
/* Adds a step's rows to the summary. */
void diff_summary_add(diff_summary *s, const diff_row *rows, int n_rows);

#endif
