/*
 * dbg.h — the debugger's parts that are not the session: breakpoint
 * conditions, tensor slices and printing.
 *
 * The session (session.h) attaches to the engine through te_hook_add() and
 * calls these on the tensors of each op record. Everything here works on
 * public engine types only (te.h).
 */
#ifndef TDBG_DBG_H
#define TDBG_DBG_H

#include "te.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Tensor statistics (te_stats, te_stats_compute, te_stats_quick) are the
 * engine's: te.h. */

/* ---- conditions (cond.c) ------------------------------------------------------
 * The language of `break ... if COND` and `condition N COND`:
 *
 *   cond    := or
 *   or      := and ('or' and)*
 *   and     := not ('and' not)*
 *   not     := 'not' not | primary
 *   primary := '(' cond ')' | 'phase' ('=='|'!=') PHASE
 *            | 'op' ('='|'=='|'!=') GLOB | 'type' ('='|'=='|'!=') TYPE | pred
 *   pred    := [SCOPE '.'] FUNC [CMP NUMBER]
 *   SCOPE   := inputs | outputs | params | grads | in0..in4 | out0..out4
 *   FUNC    := has_nan | has_inf | max | min | mean | std | abs_max | abs_mean
 *            | l2norm | zero_frac | fp16_overflow | rel_change
 *            | overflow | underflow | scale
 *   CMP     := > | >= | < | <= | == | !=
 *   PHASE   := forward | backward | update
 *   NUMBER  := a C float (1e3, -0.5, inf)
 *
 * GLOB: an fnmatch glob over the op's name, to the next blank or ')', or
 * quoted ("..." or '...'); TYPE: an op type, checked against the op table
 * when parsed.
 * Examples: `has_nan`, `abs_max > 1e4`, `inputs.has_inf or outputs.max > 100`,
 * `not op=h0/attn/mask`, `abs_max > 50 and op=h?/attn/softmax`, `type=Softmax`,
 * `grads.l2norm > 10 and phase == backward`, `not (out0.zero_frac < 0.9)`.
 * The default scope is outputs. A predicate over a scope holds when it
 * holds for ANY tensor in the scope (NULL tensors and tensors without data
 * are skipped). has_nan, has_inf and fp16_overflow without a comparison mean
 * "count > 0"; the numeric ones need a comparison. zero_frac = zero / n.
 * rel_change = ||x - x_prev||_2 / max(||x_prev||_2, 1e-12) where x_prev is
 * the same tensor (by name) at the previous step, supplied by the caller;
 * a tensor without a previous value makes rel_change false.
 * overflow and underflow read what rounding an output to f16/bf16 did
 * (te_op_record.round), not the tensor's values: overflow is the count of
 * finite results that became +-Inf, underflow the fraction of finite
 * non-zero results that became zero; bare, each means "> 0"; they take
 * the scopes outputs and out0..out4 only (inputs were not rounded by this
 * op), and never hold for an output that was not rounded. scale is the
 * loss scaler's scale of this step (false without a scaler); it takes no
 * scope and needs a comparison: `break type:Linear if underflow > 0.01`,
 * `break amp/unscale if scale < 1`.
 * Keywords are case-sensitive, whitespace free-form.
 */
typedef struct dbg_cond dbg_cond;

typedef enum { DBG_SCOPE_INPUTS, DBG_SCOPE_OUTPUTS, DBG_SCOPE_PARAMS, DBG_SCOPE_GRADS } dbg_scope_kind;

/* FUNC and CMP of the grammar, as the condition module knows them. */
typedef enum {
    DBG_FN_HAS_NAN, DBG_FN_HAS_INF, DBG_FN_MAX, DBG_FN_MIN, DBG_FN_MEAN, DBG_FN_STD, DBG_FN_ABS_MAX,
    DBG_FN_ABS_MEAN, DBG_FN_L2NORM, DBG_FN_ZERO_FRAC, DBG_FN_FP16_OVERFLOW, DBG_FN_REL_CHANGE,
    DBG_FN_OVERFLOW, DBG_FN_UNDERFLOW, DBG_FN_SCALE, DBG_FN_COUNT
} dbg_func;
typedef enum { DBG_CMP_NONE, DBG_CMP_GT, DBG_CMP_GE, DBG_CMP_LT, DBG_CMP_LE, DBG_CMP_EQ, DBG_CMP_NE } dbg_cmp;

/* Parses text. On error returns NULL and writes into err a message naming
 * the offending token and its column, e.g.
 * "column 9: unknown function 'abs_mx' (did you mean abs_max?)" or
 * "column 5: expected a number after '>', got 'foo'". */
dbg_cond *dbg_cond_parse(const char *text, char *err, size_t errlen);
void dbg_cond_free(dbg_cond *c);
/* The condition back as canonical text (for `info breakpoints`). */
const char *dbg_cond_text(const dbg_cond *c);
/* Does it use rel_change (the caller then keeps previous values)? */
bool dbg_cond_uses_rel_change(const dbg_cond *c);
/* A copy that lives on its own (NULL when out of memory): a stop keeps
 * the condition it stopped on after its breakpoint is deleted. */
dbg_cond *dbg_cond_copy(const dbg_cond *c);

/* What a condition asks, for a front end that shows it (the thresholds
 * the TUI highlights) without a parser of its own: one entry per
 * predicate `[SCOPE.]FUNC [CMP NUMBER]`, in the order of the text. */
typedef struct dbg_pred {
    dbg_scope_kind scope; /* the tensors it watches */
    int slot;             /* in2, out0: the slot; -1: every tensor of the scope */
    dbg_func func;        /* the statistic */
    dbg_cmp cmp;          /* DBG_CMP_NONE: a count without comparison ("count > 0") */
    double number;        /* the threshold cmp compares against (0 with DBG_CMP_NONE) */
    bool negated;         /* under an odd number of 'not': the condition wants it false */
} dbg_pred;

/* The globs of c's op= and op!= tests, in the order of the text (the first
 * max into out, pointers into c); returns how many c has. */
int dbg_cond_op_globs(const dbg_cond *c, const char **out, int max);
/* Writes the first max predicates of c into out; returns how many c has. */
int dbg_cond_preds(const dbg_cond *c, dbg_pred *out, int max);
/* "abs_max", ">=", "outputs" / "out0": the words of the grammar. */
const char *dbg_func_name(dbg_func f);
const char *dbg_cmp_name(dbg_cmp c);
const char *dbg_scope_name(dbg_scope_kind k, int slot);

/* What a condition is evaluated against: one op record, and how to find a
 * tensor's previous-step value. Params of an op are its inputs with
 * TE_TENSOR_PARAM set; grads are tensors whose name starts with "grad:"
 * among its inputs and outputs. */
typedef struct dbg_eval_ctx {
    const te_op_record *rec;
    /* x_prev for rel_change, or NULL when there is none; may be NULL itself */
    const te_tensor *(*prev)(const te_tensor *t, void *user);
    void *user;
} dbg_eval_ctx;

/* What made a condition true: the first tensor (in scope order: inputs,
 * then outputs) whose predicate held, and for has_nan/has_inf the first bad
 * flat index (else -1). */
typedef struct dbg_hit {
    const te_tensor *tensor;
    int slot;          /* its index among the record's inputs or outputs */
    bool is_output;
    int64_t index;
    double value;      /* the function's value for that tensor */
    char func[16];     /* "has_nan", "abs_max", ... */
} dbg_hit;

/* ---- the verdict (verdict.c) ------------------------------------------------------
 * Did the op whose record this is create a non-finite value in `bad` (one of
 * its outputs), or did the value reach it? An op is given a NaN through its
 * inputs and, in backward, through the forward tensors it reads
 * (te_op_record.reads): the saved logits of a cross entropy count as surely
 * as its incoming gradient. */
typedef enum {
    DBG_ORIGIN_NONE,        /* bad is finite (or has no data): no verdict */
    DBG_ORIGIN_CREATED,     /* every input and read tensor is finite */
    DBG_ORIGIN_PROPAGATED,  /* `from` is the first non-finite one */
} dbg_origin_kind;

typedef struct dbg_origin {
    dbg_origin_kind kind;
    bool from_read;             /* `from` is one of rec->reads, not an input */
    char from[TE_NAME_MAX];     /* the tensor's name, when propagated */
    /* The value is one the op table calls intended: made by a NONFINITE_OK
     * op (CREATED) or carried on from one's output (PROPAGATED). */
    bool intended;
    /* CREATED although this input (or read) was non-finite: it held only
     * intended values, of another kind (a mask's -inf this op made a NaN of). */
    char despite[TE_NAME_MAX];
} dbg_origin;

/* Fills o and returns o->kind. A non-finite input holding only intended
 * values (see dbg_verdict_note) does not make a value of another kind
 * "propagated": the op that turned a mask's -inf into a NaN created it. */
dbg_origin_kind dbg_origin_of(const te_op_record *rec, const te_tensor *bad, dbg_origin *o);

/* Intended non-finite values, tracked through a step. An op whose record
 * has TE_TRAIT_NONFINITE_OK makes its NaN/Inf on purpose; an op whose
 * non-finite inputs hold only intended values and whose output holds only
 * those kinds carries them on (intended still); any other kind it makes
 * (a NaN from -inf) it creates. dbg_verdict_note(rec) after every op keeps
 * the record (cheap: it reads data only when an intended value comes in or
 * the op makes them); dbg_verdict_reset() at each step's start. */
enum { DBG_NF_NAN = 1u, DBG_NF_INF = 2u };
void dbg_verdict_note(const te_op_record *rec);
void dbg_verdict_reset(void);
/* The DBG_NF_* kinds t holds on purpose this step (0: none, or not known). */
unsigned dbg_verdict_intended(const te_tensor *t);
/* The DBG_NF_* kinds of non-finite value in t (0 for non-float or no data). */
unsigned dbg_nonfinite_kinds(const te_tensor *t);
/* " on cuda" for a tensor off the CPU, "" on it: what info op and the stop
 * report add to a tensor's line (CPU lines read as before devices). */
const char *dbg_on_device(te_device d);
/* The first element at or after from holding a kind in kinds (DBG_NF_*),
 * read a chunk at a time from t's device; -1 when none or from < 0. */
int64_t dbg_find_nonfinite(const te_tensor *t, int64_t from, unsigned kinds);
/* The `stopped:` line's token: "created", "propagated:NAME" or "-". */
const char *dbg_origin_token(const dbg_origin *o, char *buf, size_t n);

/* Evaluates c; statistics are computed once per tensor per call. hit may
 * be NULL. */
bool dbg_cond_eval(const dbg_cond *c, const dbg_eval_ctx *ctx, dbg_hit *hit);

/* ---- slices and printing (print.c) --------------------------------------------
 * A tensor reference as typed by the user: NAME[SLICES], NAME one of
 * "OP:out0", "OP:in1", "param:NAME", "grad:NAME"; SLICES numpy-style, one
 * per dim, comma separated: "3", "-1", "1:4", ":", "::2", "2:-1:3"; fewer
 * than ndim means the rest are ':'. */
typedef struct dbg_slice {
    int64_t start, stop, step; /* made concrete for a shape by dbg_ref_resolve */
    bool index;                /* a single index: the dim is dropped */
    bool has_start, has_stop;
} dbg_slice;

typedef struct dbg_ref {
    char name[TE_NAME_MAX];
    int n_slices;
    dbg_slice slices[TE_MAX_DIMS];
} dbg_ref;

/* Parses "fc1/linear:out0[0, 1:3]"; false with err (naming the column and
 * token) on malformed text. */
bool dbg_ref_parse(const char *text, dbg_ref *r, char *err, size_t errlen);
/* Checks the slices against t's shape and makes negative / missing bounds
 * concrete; false with err ("index 7 out of range for dim 1 of size 4"). */
bool dbg_ref_resolve(dbg_ref *r, const te_tensor *t, char *err, size_t errlen);

/* Prints the selected elements numpy-style (nested brackets, %.6g, rows
 * wrapped at 80 columns), at most max_elems of them with "..." in the
 * middle of long dims, after a header line
 * "NAME f32 [4,16] (slice [0,1:3] -> [2])". NaN prints as nan, Inf as inf. */
void dbg_print_tensor(FILE *f, const char *name, const te_tensor *t, const dbg_ref *r, int64_t max_elems);
/* "min -1.2 max 3.4 mean 0.12 std 0.9 abs_max 3.4 l2norm 12.3 zero 0.0% nan 0 inf 0 fp16_overflow 0"
 * and the shape/dtype, over the whole tensor. */
void dbg_print_stats(FILE *f, const char *name, const te_tensor *t);
/* A text histogram of the finite values: `bins` rows "[lo, hi)  count  ####",
 * bars scaled to width; NaN and Inf counts on a last line. */
void dbg_print_hist(FILE *f, const char *name, const te_tensor *t, int bins, int width);

/* ---- words (util.c) ---------------------------------------------------------- */

#endif
