/*
 * graph.h — graph mode inside the engine: the tracer, the IR of a compiled
 * step, its passes, the memory plan and the executor.
 *
 * te_graph_run() traces the step function once per variant (input shapes,
 * training flag, observed set): with te_tracing set, ops build their nodes
 * and abstract outputs (shape, no data) and record themselves here instead
 * of running; backward and the optimizer record themselves likewise. The
 * recording is already a program: a list of kernels over values. Passes
 * rewrite it (DCE, constant folding, CSE, batch-norm folding, activation
 * and elementwise fusion), the planner gives every temporary value an
 * offset in one arena, and the executor runs the kernels in order, calling
 * hooks with the original ops each kernel computes.
 */
#ifndef TE_GRAPH_GRAPH_H
#define TE_GRAPH_GRAPH_H

#include "te_internal.h"

#include <stdio.h>

/* ---- values ---------------------------------------------------------------- */

typedef enum {
    TG_TEMP,   /* made by a kernel of the step: lives in the arena */
    TG_INPUT,  /* the step's input k: bound to the caller's data on each run */
    TG_EXTERN, /* persistent (parameters, their gradients, running stats): used in place */
    TG_CONST,  /* a tensor the step function made from data: captured when traced */
} tg_kind;

typedef struct tg_value {
    te_tensor *t;       /* the graph's own tensor, or the EXTERN tensor itself */
    tg_kind kind;
    int input;          /* TG_INPUT: which input */
    int grad_of;        /* the value whose gradient this is, or -1 */
    bool output;        /* handed back to the caller */
    bool observed;      /* a consumer asked for it: kept in memory to the end of the step */
    bool materialized;  /* TG_TEMP: written to memory (false inside a fused kernel) */
    int def, last_use;  /* first kernel writing it, last kernel reading it; -1: none */
    size_t offset;      /* TG_TEMP: bytes into the arena */
    /* Recomputed for the backward (pass_recompute.c): the kernel that does
     * it, or -1. The value then has two lives: [def, fwd_last] at offset and
     * [recompute, last_use] at offset2. */
    int recompute, fwd_last;
    size_t offset2;
    /* TG_INPUT of a captured plan: a fixed slot in the arena at offset, into
     * which each step's input is copied, so that captured kernels find it. */
    bool staged;
    /* Written over this value's memory, which it takes (pass_fuse_sum.c):
     * the value it replaces, dead from then on, or -1. */
    int inplace_of;
} tg_value;

/* ---- kernels --------------------------------------------------------------- */

typedef enum {
    TG_K_FWD,       /* a node's forward kernel */
    TG_K_BWD,       /* a node's backward kernel */
    TG_K_SEED,      /* d(output) = given values: the start of a backward */
    TG_K_OPTIM,     /* te_optim_step() */
    TG_K_CLIP,      /* te_clip_grad_norm() */
    TG_K_UNSCALE,   /* te_scaler_unscale() */
    TG_K_ZERO_GRAD, /* te_zero_grad() */
    TG_K_ACT,       /* matmul / linear / conv / batch norm, then its activation in place */
    TG_K_ACT_BWD,   /* ReLU's backward inside batch norm's: node the batch norm, act the ReLU */
    TG_K_EW,        /* a chain of elementwise ops in one pass over memory */
    TG_K_BN_FOLD,   /* eval: conv with batch norm folded into weights and bias */
    TG_K_ATTN,      /* causal attention's chain scores..out in one kernel (tg_attn) */
    TG_K_ATTN_BWD,  /* the backward of that chain in one kernel */
    TG_K_RECOMPUTE, /* a forward node run again in the backward, unreported (pass_recompute.c) */
    TG_K_SUM,       /* conv, then add: the conv adds onto the addend, in place (pass_fuse_sum.c) */
} tg_kkind;

/* An op as the user wrote it, and where the kernel reports it. */
typedef struct tg_origin {
    te_node *node;  /* the graph's copy: name, type, location, tensors */
    bool backward;
    int exec;       /* its position in the step's order, from the start of the run */
} tg_origin;

#define TG_EW_MAX 16 /* ops (and inputs) in one elementwise kernel */

/* A fused elementwise chain as register code over blocks of elements:
 * registers 0..n_in-1 hold the inputs, each step writes register n_in+i. */
typedef struct tg_ew {
    int n_in;
    te_tensor *in[TG_EW_MAX];
    int n_steps;
    struct {
        te_op op;
        int a, b;   /* registers; b -1 for unary ops */
        float s;    /* Scale's factor */
    } step[TG_EW_MAX];
    te_tensor *out[TG_EW_MAX]; /* step i's result tensor; written where materialized */
    int64_t numel;             /* of every step's result */
} tg_ew;

/* A causal attention chain fused (pass_fuse_attn.c): its ops, dropout
 * NULL when it has none (the casts too), and the per-row log-sum-exp
 * [B,H,T] that the
 * forward keeps for the backward in place of the T x T probabilities.
 * The forward writes o: out's output [B,H,T,D], or, merged, the tensor the
 * heads' merge after it makes (transpose(1, 2), then reshapes), [B,T,H,D]
 * in memory; the backward reads o and its gradient. */
typedef struct tg_attn {
    te_node *scores, *scale, *mask, *softmax, *dropout, *out;
    te_node *cast_up, *cast_down; /* AMP's Casts around softmax (softmax/cast_in0, out/cast_in0), or NULL */
    te_tensor *lse, *o;
    bool merged;
} tg_attn;

typedef struct tg_kernel {
    tg_kkind kind;
    te_phase phase;
    bool removed;           /* dropped by a pass; compacted away after each */
    te_node *node;          /* FWD, BWD, ACT (the producer), BN_FOLD and SUM (the conv) */
    te_node *act;           /* ACT: the activation; BN_FOLD: the batch norm; SUM: the add */
    te_node *act2;          /* BN_FOLD: an activation after the batch norm, or NULL */
    te_kernel_fn fn;        /* resolved at compile time: no dispatch per op */
    bool shadow;            /* f16/bf16 tensors: run through te_node_dispatch */
    int n_orig;
    tg_origin *orig;
    te_tensor *seed_y;      /* SEED: the tensor whose gradient is seeded */
    float *seed_dy;         /* SEED: its values (f32, numel of seed_y) */
    te_optim *optim;        /* OPTIM */
    int exec;               /* OPTIM, UNSCALE: the step's execution index at its first record */
    te_tensor **params;     /* CLIP, UNSCALE */
    int n_params;
    float max_norm;
    tg_ew *ew;              /* EW */
    tg_attn *attn;          /* ATTN, ATTN_BWD */
    char *desc;             /* "k3 fused-act: fc1/linear, fc1/relu", for hooks */
    te_tensor *fold_w, *fold_b; /* BN_FOLD: the folded weight and bias (arena scratch) */
    void *redo_data;        /* RECOMPUTE: where the node's output lives from this kernel on */
} tg_kernel;

/* ---- a compiled variant ---------------------------------------------------- */

typedef struct tg_input_sig {
    te_dtype dtype;
    int ndim;
    int64_t shape[TE_MAX_DIMS];
} tg_input_sig;

typedef struct tg_plan {
    /* the key */
    int n_inputs;
    tg_input_sig *sig;
    bool training;
    char *observe_key;

    tg_value *values;
    int n_values, cap_values;
    tg_kernel *kernels;
    int n_kernels, cap_kernels;
    te_node **nodes;        /* the graph's copies of the traced nodes */
    int n_nodes, cap_nodes;
    int *outputs;           /* value ids */
    int n_outputs;
    int exec_total;         /* ops the step reports */
    int traced_ops;         /* forward + backward ops traced */

    te_device device;       /* of its inputs and parameters: the arena's, its kernels' */
    void *arena;            /* one allocation on device */
    size_t arena_bytes, lower_bound, naive_bytes;
    double compile_ms;
    struct tg_ptrmap *map;  /* tensor -> value id */
    struct tg_capture *cap; /* capture.c's state, or NULL: kernels run one by one */
} tg_plan;

/* ---- tracing (called by tape.c, optim.c, params.c) ------------------------ */

typedef struct tg_trace tg_trace;
extern tg_trace *te_tracing; /* set while a step function is traced */

void te_trace_fwd(te_node *n, int exec);
void te_trace_bwd(te_node *n, int exec);
void te_trace_seed(te_tensor *y, const te_tensor *dy);
void te_trace_optim(te_optim *o);
void te_trace_clip(te_tensor **params, int n, float max_norm);
void te_trace_unscale(te_tensor **params, int n);
void te_trace_zero_grad(void);
/* The step function did something a trace cannot hold: the trace fails with why. */
void te_trace_misuse(const char *what);

/* Runs fn under the tracer and returns the recorded plan (kernels and
 * values, not yet compiled), or NULL with te_error() set. */
tg_plan *tg_trace_step(te_step_fn fn, void *ctx, te_tensor *const *inputs, int n_inputs,
                       te_tensor **outputs, int n_outputs);

/* ---- the IR ------------------------------------------------------------------ */

int tg_value_of(const tg_plan *p, const te_tensor *t); /* -1 if t is not in the plan */
int tg_value_add(tg_plan *p, te_tensor *t, tg_kind kind);
tg_kernel *tg_kernel_add(tg_plan *p, tg_kkind kind, te_phase phase);
/* A new kernel at position pos; the kernels from pos on move up one. */
tg_kernel *tg_kernel_insert(tg_plan *p, int pos, tg_kkind kind, te_phase phase);
void tg_compact(tg_plan *p);  /* drops removed kernels */
/* Appends from's original ops to to's (fusing kernels, merging ops). */
void tg_origin_move(tg_kernel *to, tg_kernel *from);
void tg_plan_free(tg_plan *p);
bool tg_has_side_effects(const te_node *n);

/* Value ids a kernel reads and writes (each at most TG_IO_MAX). */
#define TG_IO_MAX 64
int tg_kernel_reads(const tg_plan *p, const tg_kernel *k, int *ids);
int tg_kernel_writes(const tg_plan *p, const tg_kernel *k, int *ids);
/* For each value, how many kernels read it, plus 1 if it must outlive the
 * kernels (an output, observed). */
void tg_count_uses(const tg_plan *p, int *uses);
/* Does a kernel strictly between lo and hi (kernel positions) read value v? */
bool tg_read_between(const tg_plan *p, int lo, int hi, int v);
/* Replaces every use of tensor from by to (in nodes, fused programs, outputs). */
void tg_replace_uses(tg_plan *p, te_tensor *from, te_tensor *to);

/* ---- passes: each returns how many kernels it removed, fused or folded,
 * or -1 with te_error() set ---------------------------------------------- */

int tg_pass_dce(tg_plan *p);
int tg_pass_fold(tg_plan *p);
int tg_pass_cse(tg_plan *p);
int tg_pass_bn_fold(tg_plan *p);
int tg_pass_fuse_act(tg_plan *p);
int tg_pass_fuse_act_grad(tg_plan *p);
int tg_pass_fuse_elementwise(tg_plan *p);
int tg_pass_fuse_attention(tg_plan *p);
int tg_pass_recompute(tg_plan *p);
int tg_pass_layout(tg_plan *p);
int tg_pass_fuse_sum(tg_plan *p);
/* Liveness, arena offsets, binding; verifies the plan. */
te_status tg_plan_memory(tg_plan *p);
/* The device of the step's inputs and parameters (the first one seen; the
 * trace has checked that ops do not mix devices), else of its first op:
 * set in p->device before the passes, which ask its backend. */
te_device tg_plan_device(const tg_plan *p);

/* "fwd", "fused-act", ...: a kernel kind as the text IR names it. */
const char *tg_kernel_kind_name(tg_kkind k);
/* Writes the plan as text: kernels, values, fused groups, offsets, peak. */
void tg_print(const tg_plan *p, FILE *f, const char *title);

/* ---- running ----------------------------------------------------------------- */

te_status tg_execute(tg_plan *p, te_tensor *const *inputs, te_tensor **outputs);
/* Kernel i of p with its hook and injection calls around it (exec.c). */
te_status tg_kernel_exec(const tg_plan *p, int i, int base);
/* Kernel k alone, through the graph entries of its device's backend. */
te_status tg_kernel_run(const tg_kernel *k, int base);

/* ---- capture into device graphs (segments.c, capture.c) -------------------
 * On a backend with capture entries (CUDA Graphs), the kernel list is cut
 * at host points into segments; a segment of two or more capturable
 * kernels is captured once and then replayed with one launch. */

typedef struct tg_segment {
    int first, count; /* kernels [first, first + count) */
    bool capture;     /* count >= 2 capturable kernels: captured, replayed */
} tg_segment;

/* Whether kernel k may be captured; ctx is the predicate's own. */
typedef bool (*tg_capturable_fn)(const tg_plan *p, const tg_kernel *k, void *ctx);
/* Must the host act right after k (it writes an observed value)? */
bool tg_host_after(const tg_plan *p, const tg_kernel *k);
/* The executor's predicate, ctx the plan device's te_backend: false for
 * kernels that need the host inside the step (the gradient seed, the
 * optimizer, unscale, clipping, zero_grad, f16/bf16 shadow kernels,
 * dropout's per-step seed, a kernel that reads a bad-data flag back,
 * every op kernel while hooks or injections are attached). */
bool tg_kernel_capturable(const tg_plan *p, const tg_kernel *k, void *ctx);
/* Cuts p's kernels into segments (seg has room for p->n_kernels): maximal
 * runs of capturable kernels, cut after every host point; a kernel that is
 * not capturable is a segment of its own. Returns how many. */
int tg_segments_cut(const tg_plan *p, tg_capturable_fn ok, void *ctx, tg_segment *seg);

/* Whether p will be captured: its device's backend captures and
 * TDBG_GRAPH_DISABLE does not name "capture". */
bool tg_capture_wanted(const tg_plan *p);
/* Makes p->cap (after the memory plan): captures happen on later runs. */
te_status tg_capture_init(tg_plan *p);
/* Runs p's kernels by segments, capturing and replaying (capture.c). */
te_status tg_capture_run(tg_plan *p, int base);
/* Segments captured and replayed now (te_graph_stats.captured_segments). */
int tg_captured_segments(const tg_plan *p);
void tg_capture_free(tg_plan *p);
/* The plan g ran last (for tests and tools that inspect it), or NULL. */
const tg_plan *tg_graph_plan(const te_graph *g);

/* The fused CPU kernels: the CPU backend's graph entries (te_graph_kernels). */
te_status tg_ew_run(const tg_ew *ew);
te_status tg_act_inplace(te_op act, float *y, int64_t n);
te_status tg_bn_fold_run(tg_kernel *k);
te_status tg_bn_relu_forward(te_node *bn, te_node *relu);
te_status tg_bn_relu_backward(te_node *bn, te_node *relu);
te_status tg_attn_forward(const tg_attn *a);
te_status tg_attn_backward(const tg_attn *a);

/* Observed tensors (te_observe_add): does this tensor name match? */
bool te_observed_name(const char *tensor_name, const char *op_name);
const char *te_observe_key(void);

#endif
