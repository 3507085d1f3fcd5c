/*
 * te_internal.h — what ops, kernels and backends share inside the engine.
 *
 * An op call makes a node (op, inputs, attributes, outputs) on the tape and
 * hands it to the backend's forward; te_backward() later hands each node to
 * the backend's backward. Kernels see only f32 floats (and i32 indices):
 * the dispatcher converts f16/bf16 tensors around them, for every op but
 * those the table marks NATIVE (Cast).
 */
#ifndef TE_INTERNAL_H
#define TE_INTERNAL_H

#include "te.h"

#include <stdarg.h>

/* ---- the op table ----------------------------------------------------------
 * One row per op with every fact the engine asks about it. A row with a
 * column missing does not build (the macro's argument count), and every
 * column is said explicitly: NONE is a token, not a default.
 *
 *   enum     suffix of TE_OP_*
 *   type     type name shown to users ("MatMul"; the backward is "MatMulGrad")
 *   name     default op name ("matmul", scoped and numbered on the tape)
 *   reads    what the backward reads besides its outputs' gradients:
 *            TE_IN<i>, TE_OUT0, TE_SAVED (every saved tensor), or TE_NONE.
 *            Graph mode frees or reuses everything else before it runs.
 *   ew       elementwise class, for the fused elementwise kernel:
 *            UNARY, BINARY (numpy broadcasting) or NONE
 *   fuse     ACT: an activation a PRODUCER (matmul, linear, conv, batch
 *            norm) runs in place on its output in graph mode; or NONE
 *   writes   inputs written in place in training mode when given (batch
 *            norm's running statistics): TE_IN<i>, or TE_NONE
 *   rng      RANDOM if its kernel draws from the RNG, keyed by the attribute
 *            seed, which graph mode sets afresh each step (dropout's mask),
 *            else DETERMINISTIC. With writes, what makes an op one that the
 *            graph passes never remove, fold or merge.
 *   finite   NONFINITE_OK if it may produce NaN/Inf on purpose, else FINITE
 *   loss     LOSS if its output is a training loss, else NOLOSS
 *   sees     the dtypes its kernels are handed: F32 (f16/bf16 tensors reach
 *            them as f32 copies, rounded back afterwards) or NATIVE (every
 *            dtype as it is: Cast, whose whole job is the conversion)
 *   amp      its precision under mixed precision (amp.c, docs/amp.md):
 *            LOWP runs in the low dtype from O1 on (its float inputs cast
 *            down), F32 stays f32 at O1 and O2 (low inputs cast up), FOLLOW
 *            computes in its inputs' dtype at O1 and in the low dtype from
 *            O2 on; at O3 all of them run in the low dtype. NONE: never
 *            cast (Cast itself)
 *   outs     number of outputs
 *   inputs   INk(...): the k inputs in order, each the dtypes it takes and
 *            its name in messages: F (f32, f16, bf16), F32, I32 (indices),
 *            ANY, F_OPT and F32_OPT (may be NULL)
 */
/*    enum            type             name             reads                       ew      fuse      writes           rng            finite  loss    sees    amp     outs inputs */
#define TE_OP_LIST(X)                                                                                                                                                                                                 \
    X(MATMUL,         "MatMul",        "matmul",        TE_IN0 | TE_IN1,            NONE,   PRODUCER, TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, LOWP,      1,    IN2(F(a), F(b)))                                  \
    X(LINEAR,         "Linear",        "linear",        TE_IN0 | TE_IN1,            NONE,   PRODUCER, TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, LOWP,      1,    IN3(F(x), F(w), F_OPT(b)))                        \
    X(ADD,            "Add",           "add",           TE_NONE,                    BINARY, NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN2(F(a), F(b)))                                  \
    X(SUB,            "Sub",           "sub",           TE_NONE,                    BINARY, NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN2(F(a), F(b)))                                  \
    X(MUL,            "Mul",           "mul",           TE_IN0 | TE_IN1,            BINARY, NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN2(F(a), F(b)))                                  \
    X(DIV,            "Div",           "div",           TE_IN0 | TE_IN1,            BINARY, NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN2(F(a), F(b)))                                  \
    X(SCALE,          "Scale",         "scale",         TE_NONE,                    UNARY,  NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(F(x)))                                        \
    X(RELU,           "Relu",          "relu",          TE_OUT0,                    UNARY,  ACT,      TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(F(x)))                                        \
    X(GELU,           "Gelu",          "gelu",          TE_IN0,                     UNARY,  ACT,      TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(F(x)))                                        \
    X(TANH,           "Tanh",          "tanh",          TE_OUT0,                    UNARY,  ACT,      TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(F(x)))                                        \
    X(SIGMOID,        "Sigmoid",       "sigmoid",       TE_OUT0,                    UNARY,  ACT,      TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(F(x)))                                        \
    X(EXP,            "Exp",           "exp",           TE_OUT0,                    UNARY,  NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, F32,       1,    IN1(F(x)))                                        \
    X(LOG,            "Log",           "log",           TE_IN0,                     UNARY,  NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, F32,       1,    IN1(F(x)))                                        \
    X(SQRT,           "Sqrt",          "sqrt",          TE_OUT0,                    UNARY,  NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(F(x)))                                        \
    X(SOFTMAX,        "Softmax",       "softmax",       TE_OUT0,                    NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, F32,       1,    IN1(F(x)))                                        \
    X(LOG_SOFTMAX,    "LogSoftmax",    "log_softmax",   TE_OUT0,                    NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, F32,       1,    IN1(F(x)))                                        \
    X(CROSS_ENTROPY,  "CrossEntropy",  "cross_entropy", TE_IN0 | TE_IN1 | TE_SAVED, NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, LOSS,   F32, F32,       1,    IN2(F(logits), I32(labels)))                      \
    X(MSE,            "MSE",           "mse",           TE_IN0 | TE_IN1,            NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, LOSS,   F32, F32,       1,    IN2(F(pred), F(target)))                          \
    X(CONV2D,         "Conv2D",        "conv",          TE_IN0 | TE_IN1,            NONE,   PRODUCER, TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, LOWP,      1,    IN3(F(x), F(w), F_OPT(b)))                        \
    X(MAXPOOL2D,      "MaxPool2D",     "maxpool",       TE_SAVED,                   NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(F(x)))                                        \
    X(AVGPOOL2D,      "AvgPool2D",     "avgpool",       TE_NONE,                    NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(F(x)))                                        \
    X(GLOBAL_AVGPOOL, "GlobalAvgPool", "gap",           TE_NONE,                    NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(F(x)))                                        \
    X(BATCHNORM,      "BatchNorm",     "bn",            TE_IN0 | TE_IN1 | TE_SAVED, NONE,   PRODUCER, TE_IN3 | TE_IN4, DETERMINISTIC, FINITE, NOLOSS, F32, NORM,      1,    IN5(F(x), F_OPT(gamma), F_OPT(beta),              \
                                                                                                                                                                        F32_OPT(running_mean), F32_OPT(running_var))) \
    X(LAYERNORM,      "LayerNorm",     "ln",            TE_IN0 | TE_IN1 | TE_SAVED, NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, F32,       1,    IN3(F(x), F_OPT(gamma), F_OPT(beta)))             \
    X(DROPOUT,        "Dropout",       "dropout",       TE_NONE,                    NONE,   NONE,     TE_NONE,         RANDOM,        FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(F(x)))                                        \
    X(RESHAPE,        "Reshape",       "reshape",       TE_NONE,                    NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(ANY(x)))                                      \
    X(FLATTEN,        "Flatten",       "flatten",       TE_NONE,                    NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(ANY(x)))                                      \
    X(TRANSPOSE,      "Transpose",     "transpose",     TE_NONE,                    NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN1(ANY(x)))                                      \
    X(SUM,            "Sum",           "sum",           TE_NONE,                    NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, F32,       1,    IN1(F(x)))                                        \
    X(MEAN,           "Mean",          "mean",          TE_NONE,                    NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, F32,       1,    IN1(F(x)))                                        \
    X(EMBEDDING,      "Embedding",     "embedding",     TE_IN1,                     NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, F32, FOLLOW,    1,    IN2(F(weight), I32(idx)))                         \
    X(CAST,           "Cast",          "cast",          TE_NONE,                    NONE,   NONE,     TE_NONE,         DETERMINISTIC, FINITE, NOLOSS, NATIVE, NONE,   1,    IN1(ANY(x)))                                      \
    X(MASKED_FILL,    "MaskedFill",    "masked_fill",   TE_IN1,                     NONE,   NONE,     TE_NONE,         DETERMINISTIC, NONFINITE_OK, NOLOSS, F32, FOLLOW, 1,  IN2(F(x), F32(mask)))

typedef enum {
#define TE_OP_ENUM(e, ...) TE_OP_##e,
    TE_OP_LIST(TE_OP_ENUM)
#undef TE_OP_ENUM
    TE_OP_COUNT
} te_op;

#define TE_MAX_IN 5
#define TE_MAX_OUT 2
#define TE_MAX_SAVED 3

/* Bits of the reads and writes columns: input i (bit i), output k's data
 * (TE_READS_OUT << k), the saved tensors. */
enum {
    TE_NONE = 0,
    TE_IN0 = 1u << 0, TE_IN1 = 1u << 1, TE_IN2 = 1u << 2, TE_IN3 = 1u << 3, TE_IN4 = 1u << 4,
    TE_READS_OUT = 1u << 8, TE_OUT0 = TE_READS_OUT,
    TE_READS_SAVED = 1u << 16, TE_SAVED = TE_READS_SAVED,
};

typedef enum { TE_EW_NONE, TE_EW_UNARY, TE_EW_BINARY } te_ew_class;
typedef enum { TE_FUSE_NONE, TE_FUSE_ACT, TE_FUSE_PRODUCER } te_fuse_role;
typedef enum { TE_RNG_DETERMINISTIC, TE_RNG_RANDOM } te_rng_use;
typedef enum { TE_SEES_F32, TE_SEES_NATIVE } te_kernel_dtypes;
/* AMP classes (docs/amp.md "Levels"); NORM: an F32 op, except at O2 where it
 * reads the activations low and writes them low, computing in f32 inside
 * (Apex's O2 batch norm: half in and out, f32 parameters and statistics). */
typedef enum { TE_AMPC_LOWP, TE_AMPC_F32, TE_AMPC_NORM, TE_AMPC_FOLLOW, TE_AMPC_NONE } te_amp_class;

typedef struct te_op_input {
    unsigned dtypes; /* bit d: dtype d is accepted */
    bool optional;   /* may be NULL */
    const char *name;
} te_op_input;

typedef struct te_op_info {
    const char *type, *grad_type, *name;
    int n_in, n_out;
    te_op_input in[TE_MAX_IN];
    unsigned bwd_reads;
    te_ew_class ew;
    te_fuse_role fuse;
    unsigned writes; /* in training mode, those of these inputs that are given */
    te_rng_use rng;
    te_kernel_dtypes sees;
    te_amp_class amp;
    unsigned traits; /* TE_TRAIT_*: loss, elementwise, non-finite on purpose */
} te_op_info;

/* A row of TE_OP_LIST as a te_op_info initializer. Each column lands in an
 * expression that is a syntax error when the column is empty, and the
 * word columns are pasted onto their own prefix, so a word from another
 * column (or a typo) is an undeclared identifier. */
#define TE_OP_ROW(e, type_, name_, reads, ew_, fuse_, writes_, rng_, finite, loss, sees_, amp_, outs, ins) \
    [TE_OP_##e] = { .type = type_, .grad_type = type_ "Grad", .name = name_, TE_OPROW_##ins,     \
                    .n_out = (outs), .bwd_reads = (reads), .ew = TE_EW_##ew_,                    \
                    .fuse = TE_FUSE_##fuse_, .writes = (writes_), .rng = TE_RNG_##rng_,          \
                    .sees = TE_SEES_##sees_, .amp = TE_AMPC_##amp_,                              \
                    .traits = TE_OPROW_##finite | TE_OPROW_##loss |                              \
                              (TE_EW_##ew_ != TE_EW_NONE ? TE_TRAIT_ELEMENTWISE : 0) },
#define TE_OPROW_IN1(a) .n_in = 1, .in = { TE_OPROW_##a }
#define TE_OPROW_IN2(a, b) .n_in = 2, .in = { TE_OPROW_##a, TE_OPROW_##b }
#define TE_OPROW_IN3(a, b, c) .n_in = 3, .in = { TE_OPROW_##a, TE_OPROW_##b, TE_OPROW_##c }
#define TE_OPROW_IN4(a, b, c, d)                                                                 \
    .n_in = 4, .in = { TE_OPROW_##a, TE_OPROW_##b, TE_OPROW_##c, TE_OPROW_##d }
#define TE_OPROW_IN5(a, b, c, d, e)                                                              \
    .n_in = 5, .in = { TE_OPROW_##a, TE_OPROW_##b, TE_OPROW_##c, TE_OPROW_##d, TE_OPROW_##e }
#define TE_DT_FLOAT (1u << TE_F32 | 1u << TE_F16 | 1u << TE_BF16)
#define TE_OPROW_F(n) { TE_DT_FLOAT, false, #n }
#define TE_OPROW_F_OPT(n) { TE_DT_FLOAT, true, #n }
#define TE_OPROW_F32(n) { 1u << TE_F32, false, #n }
#define TE_OPROW_F32_OPT(n) { 1u << TE_F32, true, #n }
#define TE_OPROW_I32(n) { 1u << TE_I32, false, #n }
#define TE_OPROW_ANY(n) { (1u << TE_DTYPE_COUNT) - 1, false, #n }
#define TE_OPROW_FINITE 0
#define TE_OPROW_NONFINITE_OK TE_TRAIT_NONFINITE_OK
#define TE_OPROW_NOLOSS 0
#define TE_OPROW_LOSS TE_TRAIT_LOSS

extern const te_op_info te_op_table[TE_OP_COUNT];
static inline const te_op_info *te_op_info_of(te_op op) { return &te_op_table[op]; }

const char *te_op_type_name(te_op op);      /* "MatMul" */
const char *te_op_grad_type_name(te_op op); /* "MatMulGrad" */
const char *te_op_default_name(te_op op);   /* "matmul" */
/* The TE_TRAIT_* of op, for te_op_record.traits. */
unsigned te_op_traits(te_op op);

/* Attributes of all ops in one flat struct; each op uses what it needs. */
typedef struct te_attrs {
    int kernel, stride, pad;    /* conv2d, pools */
    int axis;                   /* softmax, log_softmax, sum, mean (TE_ALL) */
    bool keepdim;               /* sum, mean */
    int dim0, dim1;             /* transpose */
    float scale;                /* scale; dropout: 1/(1-p) */
    float p;                    /* dropout probability */
    float value;                /* masked_fill: what masked elements become */
    bool trans_a, trans_b;      /* matmul: operands read transposed in their last two dims */
    float eps, momentum;        /* batchnorm, layernorm */
    bool training;              /* batchnorm, dropout: mode at record time */
    uint64_t seed;              /* RANDOM ops (dropout): counter-based key, set each step */
    /* dropout: the flat index of element 0 in the global batch (data
     * parallel: rank r's element i is element r * numel + i), so that the
     * masks of N ranks are those of one process with the whole batch */
    int64_t elem_offset;
} te_attrs;

struct te_node {
    te_op op;
    int id;                      /* creation index on this step's tape */
    char name[TE_NAME_MAX];      /* scoped, unique within the step */
    char grad_name[TE_NAME_MAX]; /* "grad/" + name */
    te_loc loc;
    int n_in, n_out, n_saved;
    te_tensor *in[TE_MAX_IN];
    te_tensor *out[TE_MAX_OUT];
    te_tensor *saved[TE_MAX_SAVED]; /* kernel-private state for backward (f32/i32) */
    te_attrs a;
    /* What the last run (forward: per output; backward: per input's
     * gradient) rounded to f16/bf16; rounded false when nothing was. */
    te_round_stats round[TE_MAX_IN];
    bool rounded;
    te_device device; /* its inputs' device: where it runs and its outputs live */
};

/* ---- making an op (used by the files of engine/ops) -------------------------------
 *
 *   te_node *n = te_node_begin(TE_OP_RELU, loc, (te_tensor *[]){ x });
 *   if (!n) return NULL;                       // an input was NULL or of a wrong dtype
 *   if (bad) return te_node_fail(n, TE_ERR_SHAPE, "x %s: ...", te_shape_str(...));
 *   te_node_output(n, x->dtype, x->ndim, x->shape);
 *   return te_node_run(n);                     // runs forward, calls hooks
 */
/* Starts a node of op on `in`, which holds the op's n_in inputs (its row in
 * TE_OP_LIST), optional ones possibly NULL: kernels see NULL there. Checks
 * each input against the row: NULL where it is required, or a dtype the
 * row does not take, fails with a message naming the input. */
te_node *te_node_begin(te_op op, te_loc loc, te_tensor *const *in);
/* Discards n and records "NAME (Type) at FILE:LINE: message"; returns NULL. */
te_tensor *te_node_fail(te_node *n, te_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
te_tensor *te_node_output(te_node *n, te_dtype dt, int ndim, const int64_t *shape);
/* Runs the forward kernel and the hooks; returns n->out[0] or NULL. */
te_tensor *te_node_run(te_node *n);
/* The float dtype an op computes in for these inputs: f32 if any is f32. */
te_dtype te_result_dtype(int n, te_tensor *const *in);
bool te_is_float(const te_tensor *t);

/* Saved tensors: kernel-private state the backward needs (BN's batch mean
 * and rstd, maxpool's argmax), f32 or i32. The front-end declares them
 * after its outputs, so a traced graph knows every buffer before it runs. */
te_tensor *te_node_save(te_node *n, int slot, te_dtype dt, int ndim, const int64_t *shape);

/* ---- for kernels ----------------------------------------------------------
 * Forward kernels fill n->out[*] and n->saved[*]. Backward kernels read
 * n->out[k]->grad (never NULL for a single-output op) and, for each input x
 * with te_needs_grad(x), write te_grad_buf(x, &acc): overwrite when acc is
 * 0, add when acc is 1. The buffer has x's dtype: f32 for every kernel but
 * those of a NATIVE op (the sees column: Cast), which see the real dtypes. A backward reads no tensor data
 * beyond what te_op_bwd_reads() says: graph mode plans memory by it.
 */
typedef te_status (*te_kernel_fn)(te_node *n);
bool te_needs_grad(const te_tensor *x);
float *te_grad_buf(te_tensor *x, int *acc);
/* A kernel's failure on bad data: records "NAME (Type) at FILE:LINE: message"
 * and returns code. */
te_status te_kernel_fail(te_node *n, te_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* What a backward kernel reads besides its outputs' gradients (the reads
 * column: TE_IN<i>, TE_READS_OUT << k, TE_READS_SAVED). */
unsigned te_op_bwd_reads(te_op op);
/* Those tensors of node n (inputs, then outputs, then saved tensors; absent
 * and repeated ones once), into reads; returns how many. They are the
 * backward record's te_op_record.reads, in eager and graph mode alike. */
#define TE_BWD_READS_MAX (TE_MAX_IN + TE_MAX_OUT + TE_MAX_SAVED)
int te_node_bwd_reads(const te_node *n, te_tensor **reads);
/* The inputs node n writes in place, as te_op_record.inplace: the writes
 * column's inputs that n was given, in training mode. */
unsigned te_node_inplace(const te_node *n);

/* Kernels only (engine/cpu/, engine/cuda/): t's data as its backend's
 * pointer, which the backend's own code may dereference. */
static inline float *te_f32(const te_tensor *t) { return (float *)t->data; }
static inline int32_t *te_i32(const te_tensor *t) { return (int32_t *)t->data; }

/* Minimum elements per thread before an elementwise loop goes parallel. */
#define TE_PAR_MIN 32768
/* n floats of src rounded to nearest even into dst of dtype dt (f16 or
 * bf16), what rounding did added to *st (NULL: not counted): lowp.c. */
void te_round_block(const float *src, void *dst, te_dtype dt, int64_t n, te_round_stats *st);
/* n f16 or bf16 values (dt) widened exactly to f32, as te_f16_to_f32 and
 * te_bf16_to_f32 do, in vector loops: lowp.c. */
void te_half_to_f32(const uint16_t *src, float *dst, te_dtype dt, int64_t n);
/* The same on host memory, in parallel chunks for big n: what the CPU
 * backend's round and widen entries are. te_round_host adds to *st as
 * te_round_block does (NULL: not counted). */
void te_round_host(const float *src, void *dst, te_dtype dt, int64_t n, te_round_stats *st);
void te_widen_host(const uint16_t *src, float *dst, te_dtype dt, int64_t n);
/* *st cleared for a rounding to dt. */
void te_round_stats_clear(te_round_stats *st, te_dtype dt);
/* Tests: true makes the conversions take the portable paths on a CPU with
 * AVX2 and F16C too, so both are checked against the scalar functions. */
extern bool te_lowp_portable;

/* ---- statistics where a tensor is written (stats.c) ------------------------
 * The optimizer computes a parameter's statistics inside its update loop,
 * a strip at a time while the strip is in cache, when a hook wants them
 * (te_stats_wanted): the same chunks and the same arithmetic as
 * te_stats_compute, so the same result bit for bit.
 *
 *     int64_t size;
 *     int nch = te_stats_chunks(n, &size);
 *     for each chunk c, [lo, hi) = [c * size, min(lo + size, n)), any thread:
 *         for each strip [b, b + TE_STATS_STRIP) of it, in order:
 *             write x[b ..];
 *             if (b == lo) te_stats_part_begin(&parts[c], x, lo, hi);
 *             te_stats_part_add(&parts[c], x, b, strip length);
 *     te_stats_merge(parts, nch, n, &s);
 */
#define TE_STATS_MAX_CHUNKS 256 /* bigger tensors get bigger chunks, never more of them */
#define TE_STATS_STRIP 4096     /* elements scanned per call; chunks are a multiple */

/* One chunk's share. Moments are of (x - shift), shift being one of the
 * chunk's own values, so that a large mean does not cancel the variance. */
typedef struct te_stats_part {
    int64_t n, fin, nan, zero, ovf, first_bad;
    float min, max, abs_max, shift;
    double s1, s2;      /* sum and sum of squares of x - shift, finite x */
    double sq, abs_sum; /* sum of x^2 and of |x|, finite x */
} te_stats_part;

extern int te_stats_wanted;   /* hooks that want op outputs' statistics */
int te_stats_chunks(int64_t n, int64_t *size);
/* Needs the chunk's first 64 values (or all of a shorter chunk) written. */
void te_stats_part_begin(te_stats_part *p, const float *x, int64_t lo, int64_t hi);
void te_stats_part_add(te_stats_part *p, const float *x, int64_t first, int64_t count);
void te_stats_merge(const te_stats_part *parts, int nch, int64_t n, te_stats *s);
/* te_stats_compute (quick: te_stats_quick) of n values of dtype dt in host
 * memory, and whether n f32 values hold a NaN or an Inf: the CPU backend's
 * stats and has_nonfinite. */
void te_stats_scan_host(const void *x, te_dtype dt, int64_t n, bool quick, te_stats *s);
bool te_nonfinite_host(const float *x, int64_t n);

/* ---- backends ------------------------------------------------------------ */

/* One parameter of a multi-tensor optimizer update (the backend's sgd and
 * adam): its data, gradient, state (NULL where unused), length, whether
 * SGD's momentum buffer takes its first step, and where to put the new
 * values' statistics (NULL: nobody wants them). */
typedef struct te_update_args {
    float *p;
    const float *g;
    float *m, *v;
    int64_t n;
    bool first;
    te_stats *stats;
    /* When set (a backend with update_sums): checksum.h's checksum of the
     * new values (te_checksum_host of p's n floats), taken a strip at a
     * time while the strip is in cache, for time travel's record. */
    uint64_t *sum;
} te_update_args;

/* One gradient for the loss scaler's unscale: src (f32, f16 or bf16)
 * times inv into the f32 dst (dst may be src when f32). */
typedef struct te_unscale_args {
    const void *src;
    te_dtype dt;
    float *dst;
    int64_t n;
} te_unscale_args;

/* Graph mode's fused kernels (engine/graph/exec.c runs them through the
 * backend of the kernel's tensors) and its stream capture. An entry left
 * NULL is a kernel this backend lacks: the executor fails naming it. */
struct tg_ew;
struct tg_kernel;
struct tg_attn;
typedef struct te_graph_kernels {
    te_status (*ew_run)(const struct tg_ew *ew);             /* TG_K_EW */
    te_status (*act_inplace)(te_op act, float *y, int64_t n); /* TG_K_ACT's activation */
    te_status (*bn_relu_forward)(te_node *bn, te_node *relu);
    te_status (*bn_relu_backward)(te_node *bn, te_node *relu);
    te_status (*bn_fold_run)(struct tg_kernel *k);
    te_status (*attn_forward)(const struct tg_attn *a);
    te_status (*attn_backward)(const struct tg_attn *a);
    /* Optional: a linear and its activation in one kernel, written into
     * lin->out[0]; NULL: the linear, then act_inplace. */
    te_status (*linear_act)(te_node *lin, te_op act);
    /* Optional: TG_K_SUM, a conv's result added onto add's output, which
     * holds the add's other operand already (it took that one's memory:
     * pass_fuse_sum.c); NULL: never fused. Read when a plan compiles. */
    te_status (*conv_sum)(te_node *conv, te_node *add);
    /* Optional: whether values may stay in nChw16c along conv -> batch
     * norm -> pool -> conv chains and back (pass_layout.c), read when a
     * plan compiles; NULL: never. */
    bool (*blocked16)(void);
    /* Optional, with the four below: whether n's kernel waits for the host
     * (reads a bad-data flag back), so that it cannot be captured. */
    bool (*host_wait)(const te_node *n, bool backward);
    /* Capture of this backend's queued work into a replayable graph (CUDA
     * Graphs); NULL: none, kernels run one by one. capture_end instantiates
     * into *exec, or fails with TE_ERR_DEVICE and the reason set. */
    te_status (*capture_begin)(void);
    te_status (*capture_end)(void **exec);
    te_status (*launch)(void *exec);
    void (*exec_free)(void *exec);
    /* Whether memory exec uses beside the plan's (a workspace) has moved
     * since its capture: it is captured again. */
    bool (*exec_stale)(const void *exec);
} te_graph_kernels;

/* A backend: its memory, the services the engine needs on that memory,
 * and its kernels. Only a backend's own code dereferences its memory; the
 * rest of the engine goes through these entries (docs/engine.md
 * "Residency"). Pointers are the backend's; host ones are marked. */
typedef struct te_backend {
    const char *name;
    te_device device;
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void (*to_host)(void *host_dst, const void *src, size_t bytes);
    /* Copies to the host that the caller does not wait for (the dumps'):
     * host_alloc gives host memory the device copies into directly
     * (pinned; NULL when out of memory), host_free returns it.
     * to_host_async queues a copy of bytes from src into host_dst (from
     * host_alloc), ordered after the work queued before it, and sets
     * *ticket (NULL: the copy is done already); false, with the error set,
     * when it could not be queued. wait blocks until the ticket's copy is
     * in host memory and releases the ticket, on any thread; false, with
     * the error set, when the copy failed. Every ticket is waited for once. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    bool (*to_host_async)(void *host_dst, const void *src, size_t bytes, void **ticket);
    bool (*wait)(void *ticket);
    void (*from_host)(void *dst, const void *host_src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *p, size_t bytes);
    void (*sync)(void); /* waits for queued work; the host may then read */
    /* te_stats of t in one pass on the device (quick: te_stats_quick's
     * fields only); only the struct crosses to the host. */
    void (*stats)(const te_tensor *t, te_stats *s, bool quick);
    /* Whether t holds a NaN or an Inf, faster than stats; NULL: stats
     * (quick) answers. */
    bool (*has_nonfinite)(const te_tensor *t);
    /* te_round_block and te_half_to_f32 on this backend's memory. */
    void (*round)(const float *src, void *dst, te_dtype dt, int64_t n, te_round_stats *st);
    void (*widen)(const uint16_t *src, float *dst, te_dtype dt, int64_t n);
    /* The optimizer's update of count parameters, fused where it can be. */
    void (*sgd)(const te_sgd_opts *o, const te_update_args *u, int count);
    void (*adam)(const te_adam_opts *o, int64_t t, const te_update_args *u, int count);
    /* The deferred watch (watch.c): watch_flag marks flag `slot` when t
     * holds a NaN (TE_WATCH_NAN) or an Inf (TE_WATCH_INF) among kinds,
     * queued without waiting; watch_take waits, returns the first marked
     * slot below n (-1 when none) and clears them all. async: kernels run
     * behind the host's back, so deferring pays (the CPU's: false). */
    void (*watch_flag)(const te_tensor *t, unsigned kinds, int slot);
    int (*watch_take)(int n);
    bool async;
    bool update_sums; /* sgd/adam fill te_update_args.sum */
    /* The profiler's device clock (prof.c), NULL where host time is the
     * device's: timer_mark records a mark on the queue and returns its
     * handle (-1 on failure); timer_ms waits for mark b and gives the
     * device milliseconds from a to b (-1 on failure); timer_reset spends
     * every handle (the step's end). */
    int (*timer_mark)(void);
    double (*timer_ms)(int a, int b);
    void (*timer_reset)(void);
    /* The scaler's unscale of count gradients; true if any held NaN/Inf. */
    bool (*unscale)(const te_unscale_args *u, int count, float inv);
    /* Gradient clipping's sum of squares of count sources (src, dt, n;
     * dst unused), in double: each source's sum, then those in order. */
    double (*sumsq)(const te_unscale_args *u, int count);
    /* checksum.h's checksum of bytes at p in this backend's memory, the
     * value te_checksum_host gives for the same bytes; only the 8 bytes
     * of the result reach the host. */
    uint64_t (*checksum)(const void *p, size_t bytes);
    te_kernel_fn forward[TE_OP_COUNT];  /* one kernel per op and direction */
    te_kernel_fn backward[TE_OP_COUNT];
    /* Native low-precision kernels, NULL where none: see te_lowp_run_native. */
    te_kernel_fn forward_lowp[TE_OP_COUNT];
    te_kernel_fn backward_lowp[TE_OP_COUNT];
    /* Names what runs them, or NULL when this machine cannot (NULL: never). */
    const char *(*lowp_native)(void);
    te_graph_kernels graph;
} te_backend;

/* ---- native low-precision kernels (lowp_native.c) ----------------------
 * te_node_dispatch offers a node that would run on f32 shadows to the
 * backend's forward_lowp/backward_lowp kernel first. Such a kernel takes
 * the node when it can compute it natively (for cpu_lowp.c: every float
 * tensor bf16), reads the real low-precision tensors, accumulates in f32
 * and rounds through te_round_f32/te_round_block into n->round[] and
 * n->rounded exactly as the shadow path does: forward per output, backward
 * per input gradient (an accumulated gradient: the old one added in f32,
 * then the sum rounded once). It returns TE_LOWP_DECLINED, having written
 * nothing, for a node it does not take; the shadow path runs it then. */
#define TE_LOWP_DECLINED ((te_status)1)
te_status te_lowp_run_native(te_node *n, bool backward);
/* Tests: turn the native kernels off and on (the environment's
 * TDBG_NO_NATIVE_LOWP is read once otherwise), and count the nodes they ran. */
void te_lowp_native_allow(bool on);
/* Lets f32 Conv2D run on oneDNN (the default where built with it) or not
 * (the reference kernels): what TDBG_CPU_CONV=ref says, for the tests. */
void te_cpu_conv_dnnl_allow(bool on);
/* Lets the CPU's matrix products run on oneDNN's sgemm (the default where
 * built with it) or on OpenBLAS's: TDBG_CPU_GEMM=openblas, for the tests. */
void te_cpu_gemm_dnnl_allow(bool on);
int64_t te_lowp_native_runs(void);

extern const te_backend te_backend_cpu;
#ifdef TE_HAVE_CUDA
extern const te_backend te_backend_cuda;
#endif
/* The backend new tensors go to (te_backend_use; the CPU's by default). */
const te_backend *te_backend_current(void);
/* The backend of device d, NULL when this build or machine has none usable
 * (the first ask for CUDA probes the device once). */
const te_backend *te_backend_of(te_device d);
/* The backends by device; a tensor's is never NULL (it was made there). */
extern const te_backend *te_backends[TE_DEV_COUNT];
static inline const te_backend *te_backend_for(const te_tensor *t) { return te_backends[t->device]; }
/* Whether be's memory is the host's: host buffers may then stand in for
 * its own (no staging copy). */
static inline bool te_backend_is_host(const te_backend *be) { return be->device == TE_DEV_CPU; }
/* te_backend_of, or NULL with TE_ERR_DEVICE "WHO: cuda: REASON" set
 * (TE_ERR_ARG for a device that does not exist). */
const te_backend *te_backend_need(const char *who, te_device d);
/* te_shutdown: new tensors go to the CPU again. */
void te_backend_reset(void);
/* Tests: installs be as device d's backend (NULL: none), so that a second
 * device can be faked with host memory. */
void te_backend_set_test(te_device d, const te_backend *be);
/* t's memory, at element i, as its backend's pointer: to hand to that
 * backend's entries, never to dereference outside the backends. */
static inline void *te_data_at(const te_tensor *t, int64_t i)
{
    return (char *)t->data + (size_t)i * te_dtype_size(t->dtype);
}
static inline void *te_data(const te_tensor *t) { return t->data; }

/* ---- engine internals shared between files ---------------------------- */

void te_set_error(te_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void te_set_errorv(te_status code, const char *fmt, va_list ap);

/* The caching allocator (alloc.c), per device: bytes of device d's
 * memory; te_mem_alloc and te_mem_free are the current backend's. */
void *te_mem_alloc_on(te_device d, size_t bytes);
void te_mem_free_on(te_device d, void *p, size_t bytes);
void *te_mem_alloc(size_t bytes);
void te_mem_free(void *p, size_t bytes);
void te_mem_shutdown(void);

/* Internal tensor flags beside te.h's. */
enum {
    TE_TENSOR_ABSTRACT = 1u << 4, /* traced: shape only, no data */
    TE_TENSOR_GRAPH = 1u << 5,    /* owned by a compiled graph */
    TE_TENSOR_AMP_LOWERED = 1u << 6, /* a parameter te_amp_set converted from f32 */
    TE_TENSOR_AMP_KEEP_F32 = 1u << 7, /* a batch norm's parameter: f32 at O2 (te_amp_keep_f32) */
    TE_TENSOR_BUFFER = 1u << 8,   /* registered buffer (te_buffer_new) */
    /* a graph-private CPU value in oneDNN's nChw16c (aBcd16b): channel
     * blocks of 16 innermost, no padding (C % 16 == 0); pass_layout.c */
    TE_TENSOR_BLOCKED16 = 1u << 9,
};

/* Registers a tape tensor so te_tape_reset() frees it. */
void te_tape_track(te_tensor *t);
te_tensor *te_tensor_alloc(te_dtype dt, int ndim, const int64_t *shape, unsigned flags);
/* The same on device d (te_tensor_alloc: the current backend's). */
te_tensor *te_tensor_alloc_on(te_device d, te_dtype dt, int ndim, const int64_t *shape, unsigned flags);

void te_params_shutdown(void);
/* checksum.c: the checksum of n bytes of host memory (checksum.h). */
uint64_t te_checksum_host(const void *p, size_t n);
/* te_tensor_free of a buffer: it leaves the registry. */
void te_buffer_forget(te_tensor *t);
/* The loss scaler (scaler.c), for the optimizer: this step's unscale found
 * a non-finite gradient (skip the update); the unscaled f32 gradient of
 * the f16/bf16 parameter p this step (a tensor on p's device), or NULL. */
bool te_scaler_skip_step(void);
te_tensor *te_scaler_master_grad(const te_tensor *p);

/* ---- the deferred watch (watch.c) ---------------------------------------
 * te_graph_run runs a step through te_watch_run, which defers it when the
 * hooks allow. While a deferred attempt runs, te_op_done hands each record
 * to te_watch_op instead of the op hooks, and phase hooks are not called.
 * te_hooks_defer_kinds: what every attached hook defers on (0 when any
 * wants every op, or none is attached). */
te_status te_watch_run(te_status (*run)(void *ctx), void *ctx);
bool te_watch_active(void);
void te_watch_op(const te_op_record *rec);
/* The flags taken so far this step; a replayed device graph (graph/capture.c)
 * moves the count on by what its captured flag kernels took. */
int te_watch_slots(void);
void te_watch_advance(int n);
unsigned te_hooks_defer_kinds(void);
/* The phase as it was at a step's start, without phase hooks. */
void te_phase_restore(te_phase p);

/* ---- a step's snapshot (snapshot.c) -------------------------------------
 * What one step changes, saved at its start and put back: every persistent
 * tensor's bytes (on its device) and grad_valid, the optimizers' and the
 * scaler's host state, the step's op counter. tensor.c registers each
 * persistent tensor with memory (te_persist_track) and forgets it when
 * freed. NULL from take: out of memory, the error set. */
typedef struct te_snapshot te_snapshot;
void te_persist_track(te_tensor *t);
void te_persist_forget(te_tensor *t);
/* whole: a step boundary's snapshot for time travel (record.c), which also
 * holds the step counter, the training flag, the loaders' positions and
 * the host regions; without, what the deferred watch needs. */
te_snapshot *te_snapshot_take(bool whole);
void te_snapshot_restore(const te_snapshot *s);
void te_snapshot_free(te_snapshot *s);
int64_t te_snapshot_step(const te_snapshot *s);
size_t te_snapshot_bytes(const te_snapshot *s);

/* ---- time travel (record.c) ---------------------------------------------
 * te_rec_unwinding: a rewind unwinds the current step; every op and step
 * call checks it first and returns te_rewound() (TE_ERR_REWOUND, the
 * message set). te_rec_on: recording, the backward roots are read. */
extern bool te_rec_unwinding;
extern bool te_rec_on;
te_status te_rewound(const char *what);
/* From te_step_begin once the counter moved (restore, snapshots, the
 * silent run's start and end, `rewound`); from te_step_end, in a step not
 * unwound, before its hooks (the loss and checksum, the replay check). */
void te_record_begin(void);
void te_record_end(void);
/* te_init: TDBG_RECORD=1 in the environment starts recording at the
 * defaults, and te_shutdown then prints what it kept to stderr (a
 * program that knows nothing of time travel, measured: bench/record.sh). */
void te_record_env(void);
void te_record_shutdown(void); /* te_shutdown: everything dropped, registries too */
void te_checkpoint_shutdown(void); /* te_shutdown: no writer, no request */
/* Time travel's parameter checksum, taken by the optimizer's update
 * (te_update_args.sum) and used at the step's end instead of reading the
 * parameter again; a write to the parameter after it (a debugger's set)
 * forgets it. te_record_sums_wanted: whether to take them at all. */
bool te_record_sums_wanted(void);
void te_record_note_sum(const te_tensor *p, uint64_t sum);
void te_record_forget_sum(const te_tensor *p);
void te_record_root(const te_tensor *y);        /* a te_backward's root (both modes) */
void te_record_op(const te_op_record *rec);     /* every op, while observing */
/* The registries a whole snapshot reads: host regions and live loaders. */
int te_record_host_count(void);
void te_record_host_at(int i, int *handle, void **ptr, size_t *bytes);
bool te_record_host_alive(int handle, const void *ptr, size_t bytes);
te_status te_record_loader_add(te_loader *l);
void te_record_loader_remove(te_loader *l);
int te_record_loader_count(void);
te_loader *te_record_loader_at(int i);
bool te_record_loader_alive(const te_loader *l);
/* tape.c: the step counter as a snapshot had it. */
void te_step_set(int64_t step);
/* hooks.c: silence the attached hooks (silence: no op, step or phase
 * calls) and/or call te_record_op on every op (observe); the time-travel
 * calls below are never silenced. */
void te_hooks_silence(bool silence, bool observe);
void te_hooks_rewound(int64_t step);
void te_hooks_diverged(int64_t step, double rec_loss, double loss, uint64_t rec_sum, uint64_t sum);
void te_hooks_located(const te_record_located *r);
void te_hooks_batch(const te_batch *b);
void te_hooks_op_failed(const te_op_record *rec, te_status code, const char *message);
/* An op failed (te_node_fail, or its kernel's failure): the hooks' op_failed
 * see it with te_error()'s message, unless it is a rewind's unwinding. */
void te_op_failed(const te_node *n, bool backward, te_status code);

/* provenance.c: the next ring entry for a batch of rows (its index and
 * drawn arrays to fill), NULL when out of memory; te_batch_end hands the
 * filled record to the hooks. data_check.c: the check in force into c,
 * and its generation (0: no check). */
te_batch *te_batch_begin(int64_t rows, int64_t **index, int64_t **drawn);
bool te_provenance_on(void);
void te_batch_end(const te_batch *b);
unsigned te_data_check_current(te_data_check *c);
/* data.c: a snapshot's table of replacements back (restarting the workers
 * when it differs). */
te_status te_loader_skips_restore(te_loader *l, int n, const int64_t *from, const int64_t *to);
/* prof.c: the current step is dropped (unwound by a rewind), not written. */
void te_prof_step_drop(void);

/* The optimizers' part: each live optimizer's update count and which state
 * tensors it had (state made since is freed again on restore, so that a
 * first step starts from nothing twice alike). */
typedef struct te_optim_snap {
    int n;
    struct te_optim_saved *o;
} te_optim_snap;
te_status te_optim_snap_take(te_optim_snap *s);
void te_optim_snap_restore(const te_optim_snap *s);
void te_optim_snap_free(te_optim_snap *s);

/* The scaler's part: its state, whether this step's unscale has run, and
 * which master gradients held this step's values. */
typedef struct te_scaler_snap {
    te_scaler_state sc;
    bool pending;
    int n_mg;
    bool *valid;
} te_scaler_snap;
void te_scaler_snap_take(te_scaler_snap *s);
void te_scaler_snap_restore(const te_scaler_snap *s);
void te_scaler_snap_free(te_scaler_snap *s);
/* With TDBG set, loads the debugger once per process (plugin.c). */
void te_plugin_load(void);
/* The debugger module's `int dbg_plugin_attach(int fd)` (0: it took fd and
 * calls te_listen_detached when the session ends), loaded as te_plugin_load
 * loads the module; NULL with dlerror()'s text in why when it cannot be. */
typedef int (*te_plugin_attach_fn)(int fd);
te_plugin_attach_fn te_plugin_attach_entry(char *why, size_t n);

/* ---- attaching (listen.c) ---- */
/* Set by the listener thread when a checked connection waits for the
 * training thread; te_step_begin tests it (one branch with nobody there). */
extern int te_listen_ready;
static inline bool te_listen_waiting(void) { return __atomic_load_n(&te_listen_ready, __ATOMIC_RELAXED) != 0; }
void te_listen_hand_off(void);   /* te_step_begin, when te_listen_waiting() */
void te_listen_start(void);      /* te_init: TDBG_LISTEN */
void te_listen_stop(void);       /* te_shutdown: thread joined, files removed */
/* NULL when a peer of uid peer may attach to a run of euid self, else the
 * REFUSED text ("another user (uid N)") written into buf. */
const char *te_listen_check_uid(unsigned peer, unsigned self, char *buf, size_t n);

/* Hooks and injections cost one predictable branch each when none is set. */
extern int te_hook_count;
extern int te_inject_count;
/* The profiler's part (prof.c): nonzero while it records. te_prof_observed()
 * is the one branch op call sites take to build records at all. */
extern int te_prof_on;
static inline bool te_prof_observed(void) { return (te_hook_count | te_inject_count | te_prof_on) != 0; }
/* Someone on the host looks at each op as it happens: a hook that is not
 * deferred (watch.c), an injection, or the profiler timing each op. Then
 * updates run one parameter at a time and CUDA graphs capture no ops. */
static inline bool te_ops_seen_one_by_one(void)
{
    return (te_hook_count && !te_watch_active()) || te_inject_count || te_prof_on;
}
void te_prof_op_begin(const te_op_record *rec);
void te_prof_op_done(const te_op_record *rec);
void te_prof_step(bool begin);
void te_prof_phase(te_phase p);
/* An interval of the current step outside any op: "data" (the loader's wait),
 * "compile" (a graph's compile), "hooks" (adds to the step's hooks time). */
void te_prof_interval(const char *what, uint64_t t0_ns, uint64_t t1_ns);
uint64_t te_prof_now(void);
/* The deferred watch's replay (watch.c): where the step's recording stood
 * before an attempt, and the attempt dropped again when the step is run
 * once more, its time left as one "replay" event. */
typedef struct te_prof_mark {
    int n, open_phase;
    uint64_t t;
    bool valid;
} te_prof_mark;
te_prof_mark te_prof_mark_take(void);
void te_prof_rewind(const te_prof_mark *m);
/* A compiled graph ran in this step with an arena of this many bytes. */
void te_prof_arena(size_t bytes);
/* The cost model beside the op table (prof_cost.c): the FLOPs and bytes
 * moved of the op a record describes; 0 FLOPs where the table cannot say. */
double te_prof_flops(const te_op_record *rec);
uint64_t te_prof_bytes(const te_op_record *rec);
void te_hooks_step(int64_t step, bool begin);
void te_hooks_phase(int64_t step, te_phase p);
/* True when it altered the op's output. round holds rec->n_outputs
 * entries (rec->round's, or TE_F32 ones): an f16/bf16 output that scale or
 * noise altered is rounded again and its entry replaced by what that
 * rounding did (*rounded set). */
bool te_inject_apply(const te_op_record *rec, te_round_stats *round, bool *rounded);
/* Does an injection target this op? Graph mode keeps its output visible. */
bool te_inject_targets(const char *op_name);
/* The injected op globs as text, for the key of a compiled graph variant. */
void te_inject_key(char *buf, size_t n);
/* After an op ran: injections alter its output, then hooks see it. */
void te_op_done(const te_op_record *rec);
/* names.c: an op ran (its name is kept while the first step runs); a step
 * ended (the first with ops: registered names are checked); the engine
 * shuts down (all forgotten). */
void te_names_seen(const te_op_record *rec);
void te_names_step_end(void);
void te_names_reset(void);
/* Before an op's kernel runs: hooks' op_begin see it (rec holds its
 * identity only: no tensors), then a crash injection (segv, abort, fpe)
 * for this op and step crashes here, on the op's way into its kernel. */
void te_op_begin(const te_op_record *rec);
/* The crash injections' part of te_op_begin (inject.c). */
void te_inject_crash(const te_op_record *rec);
/* te_op_begin for a node about to run forward or backward (tape.c):
 * exec is its execution index, kernel graph mode's kernel or NULL. */
void te_node_starting(const te_node *n, bool backward, int exec, const char *kernel);
void te_set_phase(te_phase p);
int te_next_exec_index(void);
int te_exec_index(void);
void te_set_exec_index(int i);
bool te_in_step(void);

/* amp.c: the dtype an input of dtype dt is cast to before op runs at the
 * current AMP level (dt itself: no cast; non-float dtypes are never cast);
 * any_low: some input of the op is already in the low dtype. */
te_dtype te_amp_input_dtype(te_op op, te_dtype dt, bool any_low);
/* te_shutdown: back to O0 (the parameters are gone). */
void te_amp_reset(void);

/* n's forward again in f32 (rerun.c): its inputs copied and cast up, the
 * kernel run on the copies without rounding, nothing of the program
 * written (inputs, saved state: copies). out gets n->n_out persistent
 * tensors (f32; i32 outputs stay i32) the caller frees. TE_ERR_STATE when
 * an input is not in memory. */
te_status te_node_rerun_f32(const te_node *n, te_tensor **out);
/* Runs n's kernel (through f32 shadows for f16/bf16 tensors). */
te_status te_node_dispatch(te_node *n, bool backward);
bool te_node_needs_shadow(const te_node *n);

/* The tape as a stack: marks to roll a failed or finished trace back to. */
int te_tape_mark(void);
int te_tape_node_mark(void);
void te_tape_rollback(int tensors, int nodes);
/* The op names counted this step (for "_K" suffixes), saved at a mark and
 * put back (and freed) when the step runs again from it; NULL: no memory. */
typedef struct te_names_saved te_names_saved;
te_names_saved *te_tape_names_save(void);
void te_tape_names_restore(te_names_saved *n);
void te_tape_names_free(te_names_saved *n);

/* The RNG key of the RANDOM op NAME at a step (dropout's mask). */
uint64_t te_dropout_seed(const char *name, int64_t step);
/* splitmix64's finaliser: a bijective mix with full avalanche (engine/rng.c
 * draws every te_rand_* number through it). */
static inline uint64_t te_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
#define TE_RAND_GAMMA 0x9e3779b97f4a7c15ULL /* splitmix64's increment */
/* The key of te_rand_u64's (seed, stream):
 * te_rand_u64(seed, stream, c) == te_mix64(te_rand_key(seed, stream) + c * TE_RAND_GAMMA). */
static inline uint64_t te_rand_key(uint64_t seed, uint64_t stream)
{
    return te_mix64(te_mix64(seed + TE_RAND_GAMMA) ^ (stream * 0xd6e8feb86659fd93ULL));
}

/* Dropout's mask, element by element: element i (flat index of the
 * dropout's input) is kept under key seed (te_dropout_seed) and drop
 * probability p exactly when te_rand_uniform(seed, 0, i) >= p. The only
 * definition of the mask: a fused kernel that calls these drops exactly the
 * elements the Dropout op drops. The test is done on integers, one mix per
 * element, so loops over it vectorise: te_rand_uniform is the draw's high 24
 * bits over 2^24, and u / 2^24 >= p  <=>  u >= ceil(p * 2^24) (u an integer)
 * <=>  draw >= ceil(p * 2^24) << 40. p < 1, so the threshold fits. */
static inline uint64_t te_dropout_threshold(float p)
{
    const float t = p * 16777216.0f; /* exact: a power-of-two scale */
    uint64_t u = (uint64_t)t;
    return (u + ((float)u < t)) << 40;
}
static inline bool te_dropout_kept(uint64_t key, uint64_t threshold, int64_t i)
{
    return te_mix64(key + (uint64_t)i * TE_RAND_GAMMA) >= threshold;
}
/* The key of a dropout mask: te_rand_key(seed, 0) moved on by the
 * element offset (te_attrs.elem_offset) (te_dropout_kept adds i * TE_RAND_GAMMA to the key). */
static inline uint64_t te_dropout_key(uint64_t seed, int64_t elem_offset)
{
    return te_rand_key(seed, 0) + (uint64_t)elem_offset * TE_RAND_GAMMA;
}
/* 1 when element i is kept, else 0 (key and threshold are loop invariants:
 * inlined in a loop, they are computed once). */
static inline float te_dropout_keep(uint64_t seed, int64_t i, float p)
{
    return te_dropout_kept(te_rand_key(seed, 0), te_dropout_threshold(p), i) ? 1.0f : 0.0f;
}

/* ---- data parallel (dist.c, dist_mpi.c) ---- */
/* True once te_dist_init succeeded: te_backward reduces the gradients. */
extern bool te_dist_on;
/* te_backward around its loop over nodes[last..0]: begin decides whether
 * this backward reduces (TE_ERR_STATE while tracing a graph) and when each
 * bucket's gradients are final; node_done after node id's backward starts
 * the buckets then ready and moves those in flight on; end starts the rest,
 * waits for them all and writes the means back. */
te_status te_dist_backward_begin(te_node *const *nodes, int last);
te_status te_dist_node_done(int id);
te_status te_dist_backward_end(void);
void te_dist_shutdown(void); /* te_shutdown: buckets freed, MPI_Finalize */
/* hooks.c: a collective waits (te_hooks.waiting). */
void te_hooks_waiting(const te_op_record *rec);
/* The transport (dist_mpi.c): init false with why when there is none;
 * the collectives return a request, or NULL with te_error() set (an
 * all-reduce with in NULL sums out in place); test
 * says 1 once it is done (and again after), 0 while not, -1 on failure;
 * release frees a request that is done or failed. */
bool dist_tx_init(int *rank, int *size, char *why, size_t n);
void dist_tx_finalize(void);
void *dist_tx_allreduce_f32(const float *in, float *out, int64_t n, const char *what);
void *dist_tx_allreduce_f64(double *v, int n, const char *what);
void *dist_tx_bcast(void *buf, size_t bytes, int root, const char *what);
int dist_tx_test(void *req);
void dist_tx_release(void *req);
void dist_tx_abort(int code) __attribute__((noreturn));
/* The transport of buckets in GPU memory (cuda/cuda_nccl.c; built with
 * CUDA, MPI and NCCL): init makes the communicator (collective: rank 0's
 * id goes out over MPI), false with why; the all-reduce sums buf in place
 * on the backend's stream; test and release as dist_tx_*'s. */
bool te_nccl_init(int rank, int size, char *why, size_t n);
void *te_nccl_allreduce_f32(float *buf, int64_t count, const char *what);
int te_nccl_test(void *req);
void te_nccl_release(void *req);
void te_nccl_finalize(void);

/* attention.c: frees the cached causal masks (te_shutdown). */
void te_attention_shutdown(void);

#endif
