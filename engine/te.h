/*
 * te.h — the tdbg training engine.
 *
 * A small training engine in C: tensors, ops with forward and backward,
 * reverse-mode autograd on a tape, optimizers, data loading, and hook points
 * around every op for debuggers and dump writers.
 *
 * A whole training step, end to end:
 *
 *     te_init(&(te_config){ .seed = 1, .threads = 2 });
 *     te_tensor *w = te_param_new("fc.weight", TE_F32, te_shape(10, 784));
 *     te_tensor *b = te_param_new("fc.bias", TE_F32, te_shape(10));
 *     te_init_linear(w, b);                      // PyTorch's default init
 *     te_optim *opt = te_sgd_new(te_params(), te_param_count(),
 *                                &(te_sgd_opts){ .lr = 0.1f });
 *
 *     te_step_begin();                           // step 0, phase forward
 *     te_scope_push("fc");
 *     te_tensor *logits = te_linear(x, w, b);    // op "fc/linear"
 *     te_scope_pop();
 *     te_tensor *loss = te_cross_entropy(logits, labels);
 *     if (!loss) fprintf(stderr, "%s\n", te_error());   // names op, file:line, shapes
 *     te_backward(loss);                         // phase backward: "grad/fc/linear", ...
 *     te_optim_step(opt);                        // phase update
 *     te_step_end();                             // frees the step's tensors
 *
 * Ops return NULL on a user mistake (bad shape, bad argument) and leave a
 * message in te_error(); an op given a NULL input returns NULL without a new
 * message, so a whole forward pass can be checked once at the end.
 *
 * Tensors made between te_step_begin() and te_step_end() (or by ops at any
 * time) belong to the tape and are freed by te_tape_reset(), which
 * te_step_end() calls. Parameters, their gradients and tensors made with
 * te_tensor_persistent() live until freed explicitly.
 */
#ifndef TE_H
#define TE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* TE_API marks the engine's public API. The engine is compiled with
 * -fvisibility=hidden, so what this header declares with TE_API is all that
 * libtdbg-engine.so exports (tests/test_exports.c checks it); everything in
 * te_internal.h and the kernels stays inside the library. */
#if defined(__GNUC__)
#define TE_API __attribute__((visibility("default")))
#else
#define TE_API
#endif

#define TE_VERSION "0.1.0"
#define TE_MAX_DIMS 4
#define TE_NAME_MAX 128

/* ---- status codes ------------------------------------------------------ */

typedef enum {
    TE_OK = 0,
    TE_ERR_SHAPE = -1,   /* shapes do not fit the op */
    TE_ERR_DTYPE = -2,   /* dtype not supported by the op */
    TE_ERR_ARG = -3,     /* bad argument value (stride 0, axis out of range, ...) */
    TE_ERR_NOMEM = -4,   /* allocation failed */
    TE_ERR_STATE = -5,   /* call out of order (backward twice, no step begun, ...) */
    TE_ERR_INPUT = -6,   /* an input was NULL: an earlier op failed */
    TE_ERR_IO = -7,      /* file or thread trouble */
    TE_ERR_DEVICE = -8,  /* no usable device for the backend asked for */
    TE_ERR_REWOUND = -9, /* a rewind unwinds this step: go on to the next te_step_begin */
} te_status;

TE_API const char *te_status_str(te_status s);
/* The message of the last failed call on this thread: it names the op, its
 * type, the source file:line of the call and the offending shapes or values.
 * "" when nothing failed since te_error_clear(). */
TE_API const char *te_error(void);
TE_API te_status te_error_code(void);
TE_API void te_error_clear(void);

/* ---- dtypes and tensors ------------------------------------------------ */

typedef enum { TE_F32, TE_F16, TE_BF16, TE_I32, TE_DTYPE_COUNT } te_dtype;

TE_API const char *te_dtype_name(te_dtype dt);   /* "f32", "f16", "bf16", "i32" */
TE_API size_t te_dtype_size(te_dtype dt);
TE_API bool te_dtype_is_float(te_dtype dt);

/* IEEE half and bfloat16 conversions, round to nearest even. */
TE_API uint16_t te_f32_to_f16(float f);
TE_API float te_f16_to_f32(uint16_t h);
TE_API uint16_t te_f32_to_bf16(float f);
TE_API float te_bf16_to_f32(uint16_t h);
/* Where a tensor's data lives: the memory of the backend that made it. */
typedef enum { TE_DEV_CPU, TE_DEV_CUDA, TE_DEV_COUNT } te_device;
TE_API const char *te_device_name(te_device d);  /* "cpu", "cuda" */

/* The largest finite value of dt (65504 for f16). */
TE_API float te_dtype_max(te_dtype dt);

/* What rounding f32 results to a lower precision did (te_op_record.round). */
typedef struct te_round_stats {
    te_dtype dtype;    /* the precision rounded to; TE_F32: nothing was rounded */
    int64_t overflow;  /* finite results that became +-Inf (beyond te_dtype_max) */
    int64_t underflow; /* finite non-zero results that became zero */
    int64_t nonzero;   /* finite non-zero results: the base of underflow's fraction */
    float absmax;      /* the largest finite |result| before rounding */
} te_round_stats;

enum {
    TE_TENSOR_PERSISTENT = 1u << 0,  /* not freed by te_tape_reset() */
    TE_TENSOR_PARAM = 1u << 1,       /* registered parameter */
    /* Graph mode: its memory is reused after its last use, so its values
     * are valid only while the op that made or read it is reported to the
     * hooks. te_observe_add() keeps a tensor to the end of the step. */
    TE_TENSOR_TRANSIENT = 1u << 2,
};

typedef struct te_node te_node;
typedef struct te_tensor te_tensor;

struct te_tensor {
    te_dtype dtype;
    int ndim;
    int64_t shape[TE_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    void *data;             /* contiguous, row-major, memory of device */
    te_device device;       /* only that backend's kernels dereference data */
    bool requires_grad;
    te_tensor *grad;        /* same shape and dtype; NULL until a backward reaches it */
    bool grad_valid;        /* grad holds a value (false after zero_grad) */
    te_node *node;          /* op that produced it on the current tape, or NULL */
    int slot;               /* which output of node */
    unsigned flags;
    char name[TE_NAME_MAX]; /* "fc1/matmul:out0", "param:fc1.weight", ... */
};

/* te_shape(2, 3) expands to the (ndim, shape) argument pair. */
#define te_shape(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

/* Tape-owned tensors, freed at te_tape_reset(). NULL on bad shape. */
TE_API te_tensor *te_tensor_new(te_dtype dt, int ndim, const int64_t *shape);
TE_API te_tensor *te_tensor_zeros(te_dtype dt, int ndim, const int64_t *shape);
/* Copies data (ndim/shape elements of dt) into a new tape tensor. */
TE_API te_tensor *te_tensor_from(te_dtype dt, int ndim, const int64_t *shape, const void *data);
/* A tensor that outlives the tape, zeroed; free it with te_tensor_free(),
 * which refuses tape tensors (TE_ERR_STATE) since the tape frees those. */
TE_API te_tensor *te_tensor_persistent(te_dtype dt, int ndim, const int64_t *shape);
TE_API void te_tensor_free(te_tensor *t);

/* Element access in f32 whatever the dtype (flat, row-major index). */
TE_API float te_get(const te_tensor *t, int64_t i);
TE_API void te_set(te_tensor *t, int64_t i, float v);
TE_API float te_item(const te_tensor *t);                      /* element 0 */
TE_API void te_copy_to_f32(const te_tensor *t, float *dst);    /* numel floats */
TE_API void te_copy_from_f32(te_tensor *t, const float *src);  /* rounds to t's dtype */
/* The same, to nearest even, with what rounding did in *st (NULL: not
 * wanted; dtype TE_F32 and zeros when t is not f16/bf16). */
TE_API void te_round_f32(te_tensor *t, const float *src, te_round_stats *st);
TE_API void te_fill(te_tensor *t, float v);
/* Slices between a tensor on any device and host memory: count elements
 * from flat index first, in t's dtype (read, write) or widened exactly to
 * f32 (read_f32; i32 converted). What print, the TUI's grid and the dumps
 * use: only the slice crosses. TE_ERR_ARG when the range is outside t. */
TE_API te_status te_tensor_read(const te_tensor *t, int64_t first, int64_t count, void *dst);
TE_API te_status te_tensor_read_f32(const te_tensor *t, int64_t first, int64_t count, float *dst);
TE_API te_status te_tensor_write(te_tensor *t, int64_t first, int64_t count, const void *src);
/* A whole tensor's read that the caller does not wait for (the dumps'):
 * te_tensor_read_async queues the copy of t's nbytes into pinned_dst (a
 * buffer from te_host_buffer_alloc), behind the work already queued on t's
 * device, and fills *tk; te_copy_wait, on any thread, waits until the
 * values are in pinned_dst. On the CPU the copy is done at once and the
 * wait returns at once. Every ticket of a TE_OK read is waited for once,
 * before its buffer is read, reused or freed. TE_ERR_STATE when t has no
 * data (traced); TE_ERR_DEVICE with the device's message when the copy
 * cannot be queued (read_async) or failed (wait). */
typedef struct te_copy_ticket {
    te_device device; /* whose backend the copy is queued on */
    void *pending;    /* the backend's ticket; NULL: nothing to wait for */
} te_copy_ticket;
TE_API te_status te_tensor_read_async(const te_tensor *t, void *pinned_dst, te_copy_ticket *tk);
TE_API te_status te_copy_wait(te_copy_ticket *tk);
/* Host memory for te_tensor_read_async, 64-byte aligned: page-locked
 * (pinned) when the current backend's device copies into such memory
 * directly (CUDA), ordinary memory on the CPU; NULL when out of memory.
 * te_host_buffer_free gives it back to the backend that made it, whichever
 * is current then (NULL: nothing). */
TE_API void *te_host_buffer_alloc(size_t bytes);
TE_API void te_host_buffer_free(void *p);
/* A new tape tensor on dev with t's dtype, shape, name and values (no
 * gradient flows through it); NULL with TE_ERR_DEVICE when dev has no
 * usable backend, TE_ERR_STATE when t has no data (traced). */
TE_API te_tensor *te_tensor_to(const te_tensor *t, te_device dev);
TE_API bool te_same_shape(const te_tensor *a, const te_tensor *b);
/* "[128,784]" into buf; returns buf. */
TE_API char *te_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* ---- engine lifetime, steps, scopes ------------------------------------ */

typedef struct te_config {
    uint64_t seed;   /* RNG seed for init, dropout and data (0 means 1) */
    int threads;     /* compute threads; 0 = all cores */
} te_config;

TE_API te_status te_init(const te_config *cfg);
TE_API void te_shutdown(void);
TE_API int te_threads(void);

/* The backend that runs the ops: "cpu" (the default) or "cuda". New
 * tensors go to its device (docs/engine.md "Residency"); an op runs on its
 * inputs' device. Call it after te_init, before the tensors it should hold
 * exist. "cuda" gives TE_ERR_DEVICE with the reason in te_error(): built
 * without CUDA, no driver, no device, out of memory. Another name gives
 * TE_ERR_ARG. te_shutdown goes back to the CPU. */
TE_API te_status te_backend_use(const char *name);
/* The current backend's device (TE_DEV_CPU until te_backend_use says otherwise). */
TE_API te_device te_backend_device(void);

typedef enum { TE_PHASE_FORWARD, TE_PHASE_BACKWARD, TE_PHASE_UPDATE, TE_PHASE_COUNT } te_phase;
TE_API const char *te_phase_name(te_phase p);   /* "forward", "backward", "update" */

/* Steps count from 0. te_step_begin() starts the forward phase. */
TE_API void te_step_begin(void);
TE_API void te_step_end(void);
TE_API int64_t te_step(void);
TE_API te_phase te_current_phase(void);
/* Frees every tape tensor and node; parameters and their grads stay. */
TE_API void te_tape_reset(void);

/* Training or evaluation: dropout and batch-norm follow this flag. */
TE_API void te_set_training(bool training);
TE_API bool te_training(void);

/* Hierarchical op names: ops made inside push("conv1") are "conv1/conv". */
TE_API void te_scope_push(const char *name);
TE_API void te_scope_pop(void);
/* The next op created is named NAME (in the current scope, with the "_K"
 * suffix of a repeat, as default names) instead of its type's default name;
 * its backward is "grad/" + that name. NULL or "" cancels. */
TE_API void te_name_next(const char *name);

/* ---- source locations -------------------------------------------------- */

typedef struct te_loc {
    const char *file;
    int line;
} te_loc;
#define TE_HERE ((te_loc){ __FILE__, __LINE__ })

/* ---- ops ----------------------------------------------------------------
 * Each op has an _at form taking the caller's location and a macro that
 * passes TE_HERE. Helpers that build layers can forward their own te_loc.
 * Float ops accept f32, f16 and bf16 (computed in f32, results rounded to
 * the inputs' dtype; f32 wins when mixed). Index inputs are i32.
 */

/* a[..., M, K] @ b[..., K, N]: 2-D to 4-D, the leading (batch) dims
 * broadcast as numpy's matmul ([B,H,T,D] @ [B,H,D,T], [B,T,C] @ [C,N]); the
 * gradient of a broadcast operand is summed over the dims it was repeated
 * along. */
TE_API te_tensor *te_matmul_at(te_loc l, te_tensor *a, te_tensor *b);
/* The same with a and/or b read transposed in their last two dims, without a
 * copy (the GEMM's trans flags): te_matmul_t(q, k, false, true) = q @ k^T. */
TE_API te_tensor *te_matmul_t_at(te_loc l, te_tensor *a, te_tensor *b, bool trans_a, bool trans_b);
TE_API te_tensor *te_linear_at(te_loc l, te_tensor *x, te_tensor *w, te_tensor *b); /* x[N,I] w[O,I] b[O]|NULL */
TE_API te_tensor *te_add_at(te_loc l, te_tensor *a, te_tensor *b);   /* numpy broadcasting */
TE_API te_tensor *te_sub_at(te_loc l, te_tensor *a, te_tensor *b);
TE_API te_tensor *te_mul_at(te_loc l, te_tensor *a, te_tensor *b);
TE_API te_tensor *te_div_at(te_loc l, te_tensor *a, te_tensor *b);
TE_API te_tensor *te_scale_at(te_loc l, te_tensor *x, float s);      /* x * s */
TE_API te_tensor *te_relu_at(te_loc l, te_tensor *x);
TE_API te_tensor *te_gelu_at(te_loc l, te_tensor *x);                /* exact (erf) form */
TE_API te_tensor *te_tanh_at(te_loc l, te_tensor *x);
TE_API te_tensor *te_sigmoid_at(te_loc l, te_tensor *x);
TE_API te_tensor *te_exp_at(te_loc l, te_tensor *x);
TE_API te_tensor *te_log_at(te_loc l, te_tensor *x);
TE_API te_tensor *te_sqrt_at(te_loc l, te_tensor *x);
/* axis < 0 counts from the end. A row whose inputs are all -inf (fully
 * masked) gives zeros, not PyTorch's NaN, and a zero gradient. */
TE_API te_tensor *te_softmax_at(te_loc l, te_tensor *x, int axis);
TE_API te_tensor *te_log_softmax_at(te_loc l, te_tensor *x, int axis);
TE_API te_tensor *te_cross_entropy_at(te_loc l, te_tensor *logits, te_tensor *labels); /* [N,C], i32 [N] -> mean */
TE_API te_tensor *te_mse_at(te_loc l, te_tensor *pred, te_tensor *target);            /* mean of squares */
TE_API te_tensor *te_conv2d_at(te_loc l, te_tensor *x, te_tensor *w, te_tensor *b,
                               int stride, int pad);   /* x[N,C,H,W] w[O,C,KH,KW] b[O]|NULL */
TE_API te_tensor *te_maxpool2d_at(te_loc l, te_tensor *x, int kernel, int stride, int pad);
TE_API te_tensor *te_avgpool2d_at(te_loc l, te_tensor *x, int kernel, int stride, int pad);
TE_API te_tensor *te_global_avgpool_at(te_loc l, te_tensor *x);    /* [N,C,H,W] -> [N,C] */
/* x [N,C] or [N,C,H,W]; running stats are persistent tensors [C], updated in
 * training mode (PyTorch's momentum convention), used in eval mode. */
TE_API te_tensor *te_batchnorm_at(te_loc l, te_tensor *x, te_tensor *gamma, te_tensor *beta,
                                  te_tensor *running_mean, te_tensor *running_var,
                                  float momentum, float eps);
TE_API te_tensor *te_layernorm_at(te_loc l, te_tensor *x, te_tensor *gamma, te_tensor *beta,
                                  float eps);   /* over the last dim */
TE_API te_tensor *te_dropout_at(te_loc l, te_tensor *x, float p);   /* identity in eval mode */
TE_API te_tensor *te_reshape_at(te_loc l, te_tensor *x, int ndim, const int64_t *shape); /* one -1 allowed */
TE_API te_tensor *te_flatten_at(te_loc l, te_tensor *x);           /* [N,...] -> [N,rest] */
TE_API te_tensor *te_transpose_at(te_loc l, te_tensor *x, int d0, int d1);
TE_API te_tensor *te_sum_at(te_loc l, te_tensor *x, int axis, bool keepdim);  /* axis TE_ALL: all */
TE_API te_tensor *te_mean_at(te_loc l, te_tensor *x, int axis, bool keepdim);
TE_API te_tensor *te_embedding_at(te_loc l, te_tensor *weight, te_tensor *idx); /* w[V,D], i32 idx[...] */
TE_API te_tensor *te_cast_at(te_loc l, te_tensor *x, te_dtype dt);
/* out = mask != 0 ? value : x. mask (f32, a constant: no gradient, it must
 * not require one) broadcasts to x's shape; the gradient reaches x where
 * mask == 0. Op type "MaskedFill", default name "masked_fill"; the op table
 * marks it NONFINITE_OK (an intended -inf), so `break nonfinite` skips it. */
TE_API te_tensor *te_masked_fill_at(te_loc l, te_tensor *x, te_tensor *mask, float value);
/* Causal self-attention: q, k, v [B,H,T,D] -> [B,H,T,D], composed of named
 * ops in the current scope, each an intermediate the debugger can stop on:
 *   scores = te_matmul_t(q, k, false, true)        MatMul      "scores"
 *   scaled = te_scale(scores, 1/sqrt(D))           Scale       "scale"
 *   masked = te_masked_fill(scaled, causal, -inf)  MaskedFill  "mask"
 *   att    = te_softmax(masked, -1)                Softmax     "softmax"
 *   att    = te_dropout(att, dropout)              Dropout     "dropout" (only when dropout > 0)
 *   out    = te_matmul(att, v)                     MatMul      "out"
 * causal is a constant [T,T] f32 mask, 1 above the diagonal, made once per T.
 * Graph mode may compute the chain as one fused kernel. */
TE_API te_tensor *te_causal_attention_at(te_loc l, te_tensor *q, te_tensor *k, te_tensor *v,
                                         float dropout);

#define TE_ALL (-100)

#define te_matmul(a, b) te_matmul_at(TE_HERE, a, b)
#define te_matmul_t(a, b, ta, tb) te_matmul_t_at(TE_HERE, a, b, ta, tb)
#define te_linear(x, w, b) te_linear_at(TE_HERE, x, w, b)
#define te_add(a, b) te_add_at(TE_HERE, a, b)
#define te_sub(a, b) te_sub_at(TE_HERE, a, b)
#define te_mul(a, b) te_mul_at(TE_HERE, a, b)
#define te_div(a, b) te_div_at(TE_HERE, a, b)
#define te_scale(x, s) te_scale_at(TE_HERE, x, s)
#define te_relu(x) te_relu_at(TE_HERE, x)
#define te_gelu(x) te_gelu_at(TE_HERE, x)
#define te_tanh(x) te_tanh_at(TE_HERE, x)
#define te_sigmoid(x) te_sigmoid_at(TE_HERE, x)
#define te_exp(x) te_exp_at(TE_HERE, x)
#define te_log(x) te_log_at(TE_HERE, x)
#define te_sqrt(x) te_sqrt_at(TE_HERE, x)
#define te_softmax(x, axis) te_softmax_at(TE_HERE, x, axis)
#define te_log_softmax(x, axis) te_log_softmax_at(TE_HERE, x, axis)
#define te_cross_entropy(z, y) te_cross_entropy_at(TE_HERE, z, y)
#define te_mse(p, t) te_mse_at(TE_HERE, p, t)
#define te_conv2d(x, w, b, s, p) te_conv2d_at(TE_HERE, x, w, b, s, p)
#define te_maxpool2d(x, k, s, p) te_maxpool2d_at(TE_HERE, x, k, s, p)
#define te_avgpool2d(x, k, s, p) te_avgpool2d_at(TE_HERE, x, k, s, p)
#define te_global_avgpool(x) te_global_avgpool_at(TE_HERE, x)
#define te_batchnorm(x, g, b, rm, rv, m, e) te_batchnorm_at(TE_HERE, x, g, b, rm, rv, m, e)
#define te_layernorm(x, g, b, e) te_layernorm_at(TE_HERE, x, g, b, e)
#define te_dropout(x, p) te_dropout_at(TE_HERE, x, p)
#define te_reshape(x, ...) te_reshape_at(TE_HERE, x, te_shape(__VA_ARGS__))
#define te_flatten(x) te_flatten_at(TE_HERE, x)
#define te_transpose(x, d0, d1) te_transpose_at(TE_HERE, x, d0, d1)
#define te_sum(x, axis, keep) te_sum_at(TE_HERE, x, axis, keep)
#define te_mean(x, axis, keep) te_mean_at(TE_HERE, x, axis, keep)
#define te_embedding(w, i) te_embedding_at(TE_HERE, w, i)
#define te_cast(x, dt) te_cast_at(TE_HERE, x, dt)
#define te_masked_fill(x, mask, value) te_masked_fill_at(TE_HERE, x, mask, value)
#define te_causal_attention(q, k, v, dropout) te_causal_attention_at(TE_HERE, q, k, v, dropout)

/* ---- autograd ---------------------------------------------------------- */

/* Backpropagates from a scalar: seeds d(loss)=1 and runs every recorded op's
 * backward in reverse order (phase backward). Gradients of parameters
 * accumulate (+=) across calls until te_zero_grad(), which makes gradient
 * accumulation over micro-batches a loop of forward, backward, te_tape_reset. */
TE_API te_status te_backward(te_tensor *loss);
/* Backpropagates from any tensor y given dL/dy (same shape as y). */
TE_API te_status te_backward_with(te_tensor *y, const te_tensor *dy);

/* ---- parameters, initialisation, optimizers ---------------------------- */

/* A persistent, registered tensor that requires grad, named "param:NAME". */
TE_API te_tensor *te_param_new(const char *name, te_dtype dt, int ndim, const int64_t *shape);
TE_API te_tensor **te_params(void);
TE_API int te_param_count(void);
TE_API te_tensor *te_param_find(const char *name);   /* by NAME or "param:NAME" */
TE_API void te_zero_grad(void);                      /* every registered parameter */

/* A buffer: a persistent tensor the model owns and changes that is not a
 * parameter (no gradient, no optimizer), as PyTorch's register_buffer:
 * batch norm's running mean and variance. Zeroed, named NAME (a
 * checkpoint's /buffers/NAME), registered until te_tensor_free or
 * te_shutdown (which frees it). te_buffers() lists them in the order made,
 * so that a checkpoint or a snapshot can find all of a model's state
 * without the program listing it. TE_ERR_ARG for a name in use. */
TE_API te_tensor *te_buffer_new(const char *name, te_dtype dt, int ndim, const int64_t *shape);
TE_API te_tensor **te_buffers(void);
TE_API int te_buffer_count(void);

/* PyTorch's defaults: Linear/Conv weight and bias U(-1/sqrt(fan_in), +). */
TE_API void te_init_linear(te_tensor *w, te_tensor *b);
TE_API void te_init_uniform(te_tensor *t, float lo, float hi);
TE_API void te_init_normal(te_tensor *t, float mean, float std);

typedef struct te_optim te_optim;
typedef struct te_sgd_opts {
    float lr, momentum, dampening, weight_decay;
    bool nesterov;
} te_sgd_opts;
typedef struct te_adam_opts {
    float lr, beta1, beta2, eps, weight_decay;  /* zeros mean 1e-3, 0.9, 0.999, 1e-8 */
    bool decoupled;                             /* AdamW */
} te_adam_opts;

TE_API te_optim *te_sgd_new(te_tensor **params, int n, const te_sgd_opts *o);
TE_API te_optim *te_adam_new(te_tensor **params, int n, const te_adam_opts *o);
/* One update of every parameter (phase update, an op "update/NAME" each),
 * then the gradients are marked empty. */
TE_API te_status te_optim_step(te_optim *opt);
TE_API void te_optim_set_lr(te_optim *opt, float lr);
TE_API float te_optim_lr(const te_optim *opt);
TE_API void te_optim_free(te_optim *opt);
/* Scales all gradients so their global L2 norm is at most max_norm; returns
 * the norm before clipping (NaN with the error set when the gradients are
 * on two devices, or out of memory). */
TE_API float te_clip_grad_norm(te_tensor **params, int n, float max_norm);

/* ---- training state, for checkpoints (optim.c) ---------------------------
 * What a run's next step depends on besides the parameters: the optimizer's
 * state, and the step counter that keys dropout masks (te_dropout with the
 * seed). Parameter i is the i-th of the array given to te_*_new. Slot 0 is
 * SGD's momentum buffer or Adam's first moment m, slot 1 Adam's second
 * moment v; each is numel f32 values of its parameter, and absent until the
 * parameter's first update (when SGD starts its buffer from the gradient).
 * At AMP level O2 (or once one was set) an f16/bf16 parameter's f32 master
 * copy is one more slot, the last ("master"; absent for f32 parameters).
 */
TE_API int te_optim_param_count(const te_optim *opt);
TE_API te_tensor *te_optim_param(const te_optim *opt, int i);
/* Buffers per parameter: 2 for Adam/AdamW, 1 for SGD with momentum, else
 * 0; one more when a parameter keeps a master copy. */
TE_API int te_optim_slots(const te_optim *opt);
/* "m", "v" or "master"; NULL out of range. */
TE_API const char *te_optim_slot_name(const te_optim *opt, int slot);
/* Updates done (Adam's bias correction counts them). */
TE_API int64_t te_optim_steps(const te_optim *opt);
TE_API void te_optim_set_steps(te_optim *opt, int64_t steps);
/* Buffer slot of parameter i, or NULL while absent or when i or slot is out
 * of range. The state lives beside its parameter: on a device other than
 * the CPU this is NULL with TE_ERR_DEVICE set; te_optim_state_read works
 * everywhere. */
TE_API const float *te_optim_state(const te_optim *opt, int i, int slot);
/* Copies the numel f32 values of parameter i's buffer slot into the host
 * memory dst; TE_ERR_ARG when i or slot is out of range, TE_ERR_STATE while
 * the buffer is absent (before the parameter's first update). */
TE_API te_status te_optim_state_read(const te_optim *opt, int i, int slot, float *dst);
/* Copies numel values of parameter i into buffer slot (made present);
 * TE_ERR_ARG naming i and slot when out of range, TE_ERR_NOMEM. */
TE_API te_status te_optim_state_set(te_optim *opt, int i, int slot, const float *values);
/* The next te_step_begin() begins step `step` (>= 0), as if that many steps
 * had run: a run resumed from a checkpoint numbers its steps, and draws its
 * dropout masks, as the uninterrupted run did. Out of a step only:
 * TE_ERR_STATE otherwise. */
TE_API te_status te_step_resume(int64_t step);

/* ---- random numbers ---------------------------------------------------- */

/* Counter-based: the value depends only on (seed, stream, counter), so the
 * same seed gives the same numbers on any thread count. */
TE_API uint64_t te_seed(void);
TE_API uint64_t te_rand_u64(uint64_t seed, uint64_t stream, uint64_t counter);
TE_API float te_rand_uniform(uint64_t seed, uint64_t stream, uint64_t counter);  /* [0,1) */
TE_API float te_rand_normal(uint64_t seed, uint64_t stream, uint64_t counter);

/* ---- hooks ----------------------------------------------------------------
 * The engine calls attached hooks around every op. A record describes the
 * op as the user named it: in backward, the op "grad/fc1/matmul" of type
 * "MatMulGrad" has the incoming gradients as inputs and the gradients it
 * produced as outputs (NULL where an input needs no gradient).
 */

typedef struct te_op_record {
    int64_t step;
    te_phase phase;
    int op_id;          /* index of the forward op in the step's tape */
    int exec_index;     /* position in this step's execution order */
    const char *name;   /* "fc1/matmul", "grad/fc1/matmul", "update/fc1.weight" */
    const char *type;   /* "MatMul", "MatMulGrad", "SGD" */
    te_loc loc;         /* the user's call that created the op */
    te_tensor *const *inputs;
    int n_inputs;
    te_tensor *const *outputs;
    int n_outputs;
    const char *kernel;  /* graph mode: "k3 fused-act: fc1/linear, fc1/relu"; NULL in eager mode */
    unsigned inplace;   /* bit i: the op wrote input i in place (a batch norm's running
                         * statistics, in training) */
    const struct te_stats *out_stats; /* NULL, or the outputs' statistics as the op computed
                                       * them (te_stats_want); read them with te_op_output_stats */
    /* Backward: the forward tensors its kernel reads besides the incoming
     * gradients (the forward op's inputs, outputs and saved state, as the
     * op table says); a NaN there reaches the op as surely as one in an
     * input. NULL and 0 in the other phases. */
    te_tensor *const *reads;
    int n_reads;
    unsigned traits;    /* TE_TRAIT_* of the op, from the engine's op table */
    /* Per output (as outputs), how its f32 results were rounded to f16 or
     * bf16: overflows, underflows, the largest magnitude before rounding.
     * NULL when no output of this op was rounded to a lower precision. */
    const te_round_stats *round;
    /* A collective (data parallel): its kind, sequence number and the
     * ranks taking part. NULL for every other op. */
    const struct te_collective *coll;
} te_op_record;

/* Facts about an op that consumers act on (te_op_record.traits). */
enum {
    TE_TRAIT_LOSS = 1u << 0,         /* its scalar output is a training loss */
    TE_TRAIT_ELEMENTWISE = 1u << 1,  /* output element i depends on input element i only */
    TE_TRAIT_NONFINITE_OK = 1u << 2, /* may produce NaN/Inf on purpose (an attention mask's -inf) */
};

typedef struct te_record_located te_record_located; /* time travel, below */
typedef struct te_batch te_batch;                   /* which sample did it, below */

typedef struct te_hooks {
    void (*step_begin)(int64_t step, void *user);                  /* optional */
    void (*step_end)(int64_t step, void *user);                    /* optional */
    void (*phase_begin)(int64_t step, te_phase phase, void *user); /* optional */
    void (*op_end)(const te_op_record *rec, void *user);           /* optional */
    /* optional: the op is about to run its kernel. The record says which
     * op it is (step, phase, op_id, exec_index, name, type, loc, kernel,
     * traits); it has no tensors yet. For what a crash report needs (the
     * last op started): keep it cheap, it runs before every op. */
    void (*op_begin)(const te_op_record *rec, void *user);
    /* optional, time travel (record.c): a rewind reached its target step,
     * called at that step's te_step_begin, before step_begin. */
    void (*rewound)(int64_t step, void *user);
    /* optional: a replayed step ended with another loss or parameter
     * checksum than when it was recorded (the first such step after each
     * rewind); called at its te_step_end, before step_end, even in the
     * silent steps before a rewind's target. */
    void (*diverged)(int64_t step, double recorded_loss, double replayed_loss, uint64_t recorded_sum,
                     uint64_t replayed_sum, void *user);
    /* optional: te_record_locate's answer, at the end of its last replay. */
    void (*located)(const te_record_located *r, void *user);
    /* optional: a batch was handed out (te_loader_next, te_batch_publish),
     * before any op can read it; b->finding says what the data check found. */
    void (*batch)(const te_batch *b, void *user);
    /* optional: an op failed (a label outside the classes, a bad shape):
     * the record names it, with its inputs; message is te_error()'s. The
     * failure returns to the program when the hook returns. */
    void (*op_failed)(const te_op_record *rec, te_status code, const char *message, void *user);
    /* optional, data parallel: a collective (rec->coll) waits for the
     * other ranks; called about every millisecond until it is done, on the
     * training thread, so a rank blocked there still answers (a pause, a
     * command). The record has no tensors. */
    void (*waiting)(const te_op_record *rec, void *user);
} te_hooks;

/* Returns a handle >= 0, or -1 when the hook table is full. */
TE_API int te_hook_add(const te_hooks *hooks, void *user);
TE_API void te_hook_remove(int handle);

/* ---- time travel (record.c; docs/engine.md "Time travel") ------------------
 * Recording keeps snapshots, in memory, of everything a step depends on,
 * taken at te_step_begin of every `every`-th step: every persistent tensor
 * (parameters, optimizer state, batch norm's running statistics, master
 * weights), the optimizers' counts and learning rates, the loss scaler, the
 * step counter and training flag, each live loader's position, and the
 * program's registered host regions. Randomness needs nothing more: it is
 * a function of (seed, step, op) and of the loaders' positions. Each step
 * also records its loss and a checksum of the parameters after its update.
 *
 * te_rewind(S) restores the nearest snapshot at or before S and runs the
 * program forward to the start of S with hooks, dumps and the profiler
 * silenced; the hooks' `rewound` is called there. The program's loop is its
 * own, so it must take part: keep its state (step counter, schedule, sums
 * it logs) in regions registered with te_record_host, call te_step_begin
 * before the step's te_loader_next, treat TE_ERR_REWOUND as "go on", and
 * keep looping while te_rewind_pending():
 *
 *     struct { int64_t s; double loss_sum; } loop = { 0 };
 *     te_record_host("loop", &loop, sizeof loop);
 *     for (loop.s = 0; loop.s < steps || te_rewind_pending(); loop.s++) {
 *         te_step_begin();              // a rewind puts `loop` back here
 *         te_status st = step(...);     // ops, te_backward, te_optim_step
 *         te_step_end();
 *         if (st == TE_ERR_REWOUND) continue;
 *         ...
 *     }
 */

/* Registers `bytes` of host memory at ptr that snapshots copy and rewinds
 * put back; name is for messages. Returns a handle >= 0, or -1 with
 * TE_ERR_ARG (NULL, 0 bytes) or TE_ERR_NOMEM. Registering a region marks
 * the program as taking part. */
TE_API int te_record_host(const char *name, void *ptr, size_t bytes);
TE_API void te_record_host_remove(int handle);
/* Marks the program as taking part without a region (its loop keeps no
 * state the engine does not hold), or not. */
TE_API void te_record_participate(bool on);
TE_API bool te_record_participating(void);

typedef struct te_record_opts {
    int every;           /* a snapshot every `every` steps; 0: the default, TE_RECORD_EVERY
                          * stretched (below) */
    int keep;            /* snapshots kept, the oldest dropped (0: TE_RECORD_KEEP) */
    size_t budget_bytes; /* their memory at most (0: TE_RECORD_BUDGET); the newest always stays */
    bool op_sums;        /* also keep a checksum of every op's outputs of every step, for
                          * te_record_locate (costly: off by default) */
} te_record_opts;
#define TE_RECORD_EVERY 20
#define TE_RECORD_KEEP 32
#define TE_RECORD_BUDGET ((size_t)1 << 30)
/* The default interval keeps snapshots under TE_RECORD_SNAP_SHARE of the
 * training time: at each multiple of TE_RECORD_EVERY steps it is
 * TE_RECORD_EVERY times the smallest power of two (up to
 * TE_RECORD_STRETCH_MAX) for which the last snapshot's time is at most that
 * share of that many steps (the shortest step of the last TE_RECORD_EVERY).
 * A large model with a cheap step gets fewer snapshots; a given `every` is
 * kept as it is. */
#define TE_RECORD_SNAP_SHARE 0.005
#define TE_RECORD_STRETCH_MAX 16
/* Starts recording from the next te_step_begin (its step is the first
 * snapshot), dropping what an earlier recording kept. NULL: the defaults.
 * TE_ERR_ARG for a negative field. */
TE_API te_status te_record_start(const te_record_opts *o);
/* Stops recording and frees every snapshot and step record. */
TE_API void te_record_stop(void);
TE_API bool te_record_active(void);
TE_API void te_record_opts_get(te_record_opts *o);   /* the options in force, defaults filled but
                                                      * `every` (0: the default's, te_record_pace_get) */
typedef struct te_record_pace {
    int every;      /* the interval in force */
    int stretch;    /* the default's factor (1, 2, 4..; 1 for a given `every`) */
    double snap_ms; /* the last snapshot's wall time (0 before one) */
    double step_ms; /* the shortest step of the last TE_RECORD_EVERY (0 before one) */
} te_record_pace;
TE_API void te_record_pace_get(te_record_pace *p);

typedef struct te_record_entry {
    int64_t step;  /* the step that starts from it */
    size_t bytes;  /* its memory: device copies and host regions */
} te_record_entry;
/* The snapshots, oldest first: fills up to max entries, returns how many
 * there are. */
TE_API int te_record_list(te_record_entry *out, int max);
/* A recorded step's loss (the root of its te_backward, divided by the loss
 * scale when it is the scaled loss; the sum of the roots when it has
 * several; NaN when it had none) and the 64-bit checksum of every
 * parameter's bytes after its update. TE_ERR_ARG naming the recorded
 * range when the step was not recorded. */
TE_API te_status te_record_step_info(int64_t step, double *loss, uint64_t *checksum);

/* Rewinds to the start of `step`, from a hook at a stop, inside a step or
 * between steps. TE_ERR_STATE when the program does not take part or
 * nothing is recorded; TE_ERR_ARG when no snapshot is at or before step
 * (the message names the oldest step it can reach) or step has not run.
 * Inside a step, the step unwinds: every op, te_backward, te_optim_step,
 * te_graph_run and te_loader_next returns TE_ERR_REWOUND at once (no
 * kernels, no hooks) until te_step_end; the next te_step_begin restores
 * the snapshot and the steps before `step` run silently. */
TE_API te_status te_rewind(int64_t step);
/* A rewind waits for the next te_step_begin: the loop must go on. */
TE_API bool te_rewind_pending(void);

/* Checkpoints on request (ckpt_request.c): a front end (the debugger's
 * `checkpoint save FILE`) asks, the program's loop writes. The program
 * says once that it honours requests (te_checkpoint_writer), and after
 * each step asks whether one is waiting (te_checkpoint_take: the file,
 * once). te_checkpoint_request: TE_ERR_STATE when the program writes no
 * checkpoints on request, TE_ERR_ARG on an empty or too long name. */
TE_API void te_checkpoint_writer(void);
TE_API te_status te_checkpoint_request(const char *file);
TE_API bool te_checkpoint_take(char *file, size_t n);
/* Steps are running silently towards a rewind's target. */
TE_API bool te_rewind_fast_forward(void);

/* Where a diverged step parts from its recording (te_record_locate). */
struct te_record_located {
    int64_t step;
    bool found;            /* an op was found: the fields below name it */
    te_phase phase;
    int exec_index;        /* its place in the step's order */
    char op[TE_NAME_MAX];  /* "fc1/linear", "grad/fc1/linear", "update/fc1.weight" */
    char type[32];
    int output;            /* which of its outputs differs first */
    bool replays_agree;    /* the two replays gave the same ops' outputs */
    bool matches_recorded; /* the replays' loss and checksum equal the recorded ones */
    char cause[640];       /* the likely cause, in words */
};
/* Finds the first op where `step` parts: rewinds to it (as te_rewind) and
 * runs it twice, silently, with a checksum of every op's outputs, then
 * compares the two runs op by op, and with the recording's per-op
 * checksums when op_sums was on. The answer goes to the hooks' `located`
 * at the end of the second run and to te_record_located_get; the run then
 * goes on from the step after. Errors as te_rewind's. */
TE_API te_status te_record_locate(int64_t step);
/* The last answer; false while none (or one is under way). */
TE_API bool te_record_located_get(te_record_located *r);

/* ---- the deferred watch (watch.c) ---------------------------------------
 * A hook that only needs to hear of ops whose outputs hold a NaN
 * (TE_WATCH_NAN) or an Inf (TE_WATCH_INF) says so with te_hook_defer;
 * 0 (the default) wants every op. When every attached hook defers, a step
 * run through te_graph_run checks each op's outputs on the device and
 * reads the flags once at its end, without calling the op hooks; on a
 * flag it puts back what the step changed and runs it again with every
 * hook called per op, so that a hook stops at the exact op (docs/engine.md
 * "The deferred watch"). Where: on an asynchronous backend (CUDA) by
 * default; te_watch_policy (or TDBG_WATCH_DEFER=1 / 0) forces it on any
 * backend or never. te_watch_counts: steps run deferred, and of them
 * replayed after a flag. */
enum { TE_WATCH_NAN = 1u << 0, TE_WATCH_INF = 1u << 1 };
/* te_hook_defer(h, TE_HOOK_NO_DATA): h never reads tensor data (a crash
 * reporter noting op names): it keeps its op calls in a deferred step and
 * does not keep steps from being deferred. */
enum { TE_HOOK_NO_DATA = 1u << 2 };
typedef enum { TE_WATCH_AUTO, TE_WATCH_ALWAYS, TE_WATCH_NEVER } te_watch_mode;
TE_API void te_hook_defer(int handle, unsigned kinds);
TE_API void te_watch_policy(te_watch_mode mode);
TE_API void te_watch_counts(int64_t *deferred, int64_t *replayed);

/* ---- fault injection ---------------------------------------------------
 * "KIND@op=GLOB,step=N[,value=X][,index=I]", KIND one of nan, inf, scale,
 * noise, zero, segv, abort, fpe. After an op whose name matches GLOB runs
 * at step N, its output 0 is altered before any hook sees it: nan/inf set
 * element I (default 0), scale multiplies by X (default 1000), noise adds
 * N(0, X^2) (default X 0.01), zero clears it; on an f16/bf16 output, scale
 * and noise compute in f32 and round once, as the op's results are (a value
 * beyond the dtype becomes +-Inf), and the record the hooks see carries
 * what that rounding did (te_op_record.round). segv, abort and fpe crash the
 * program instead, as the op starts its kernel (after the op_begin hooks):
 * a store through a NULL pointer (SIGSEGV), abort() (SIGABRT), an integer
 * division by zero (SIGFPE); forward, backward and update ops alike, in
 * eager and graph mode. Returns TE_ERR_ARG with a message naming the bad
 * token. */
TE_API te_status te_inject_add(const char *spec);
TE_API void te_inject_clear(void);

/* ---- names, checked when they become known (names.c) ------------------------
 * Op types are fixed: te_op_type_check() answers at once. Op names exist
 * once ops have run: the engine keeps the names and types of the first step
 * in which ops ran (with a hook or an injection set) and, at that step's
 * end, checks every pattern registered with te_names_expect(). A pattern
 * that matched none of them gets ONE message naming it (its label, as the
 * user typed it) and the closest op names, e.g. "--inject
 * 'nan@op=nosuch,step=1' matched none of the 25 ops of step 0; the closest
 * op names: loss, fc1/relu, fc2/relu". A pattern registered once the names
 * are known is checked at once. Breakpoints, `trend` names, --inject and the
 * dump selection's ops= all use this. Patterns: an fnmatch glob over op
 * names, or "type:T" (an op type).
 */
/* The message for a pattern that matched nothing; NULL sink: "warning: MSG"
 * on stderr. Called on the thread that ends the step. */
typedef void (*te_names_sink)(const char *message, void *user);
/* Returns a handle > 0 for te_names_forget (stale handles forget nothing),
 * or -1 (te_error()) when too many patterns wait. */
TE_API int te_names_expect(const char *label, const char *pattern, te_names_sink sink, void *user);
TE_API void te_names_forget(int handle);
/* Have the first step's ops run? Then the next three answer. */
TE_API bool te_names_known(void);
/* Ops of that step matching pattern. */
TE_API int te_names_count(const char *pattern);
/* Up to max of its distinct op names and their types (either array may be
 * NULL), in the order they first ran; 0 while unknown. */
TE_API int te_names_list(const char **names, const char **types, int max);
/* When pattern matched none of those ops, the message above into msg and
 * true; false while the names are unknown or when it matched. */
TE_API bool te_names_unmatched(const char *label, const char *pattern, char *msg, size_t n);

/* Every op type the engine reports: the op table's ("Linear"), their
 * backward ones ("LinearGrad") and the updates ("SGD", "Adam", "AdamW");
 * returns how many went into types (up to max). */
TE_API int te_op_types(const char **types, int max);
/* True for a type of te_op_types; else false with "no op type 'Lnear'; the
 * closest: Linear, LinearGrad, ..." in msg. */
TE_API bool te_op_type_check(const char *type, char *msg, size_t n);

/* Levenshtein distance of two words (INT_MAX when out of memory: "nothing
 * similar"), and the suggestions behind every "did you mean" in tdbg. */
TE_API int te_edit_distance(const char *a, const char *b);
#define TE_NEAR 3 /* the edit distance within which a word is suggested */
/* The nearest of n candidates to w within max_d edits (the first of
 * equals), or NULL. */
TE_API const char *te_suggest(const char *w, const char *const *cands, int n, int max_d);
/* Up to k (at most 16) indices of cands into idx, nearest to w first (ties
 * in list order), however far; returns how many. */
TE_API int te_nearest(const char *w, const char *const *cands, int n, int *idx, int k);

/* ---- graph mode ------------------------------------------------------------
 * A step function does one training (or evaluation) step with engine ops:
 * forward, te_backward, te_optim_step. It reads its tensors from inputs
 * and stores its results in outputs. It must not read tensor data (in graph
 * mode it runs once, while being traced, on tensors that have no data yet)
 * nor call te_step_begin/end or te_tape_reset.
 *
 *     te_graph *g = te_graph_new(train_step, &model,
 *                                &(te_graph_opts){ .mode = TE_MODE_GRAPH,
 *                                                  .n_inputs = 2, .n_outputs = 2 });
 *     te_step_begin();
 *     te_graph_run(g, (te_tensor *[]){ x, y }, out);   // out[0] loss, out[1] logits
 *     printf("%f\n", te_item(out[0]));
 *     te_step_end();
 *
 * In eager mode te_graph_run calls the function. In graph mode the first run
 * traces it (forward, backward, update) into a graph, compiles it (dead code
 * elimination, constant folding, common subexpressions, batch-norm folding
 * in eval graphs, activation and elementwise fusion, a static memory plan)
 * and runs it; later runs replay the compiled kernels. Ops keep their eager
 * names, types and source locations: hooks and injections see the same ops
 * in both modes. Tensors made inside the function from data (not inputs,
 * not persistent) are constants captured when traced, as in torch.jit.trace.
 * Outputs stay valid until the next run of the same graph.
 */
typedef enum { TE_MODE_EAGER, TE_MODE_GRAPH } te_mode;
TE_API const char *te_mode_name(te_mode m);      /* "eager", "graph" */

typedef te_status (*te_step_fn)(void *ctx, te_tensor *const *inputs, te_tensor **outputs);
typedef struct te_graph te_graph;

/* Passes, for te_graph_opts.disable (memory planning always runs). */
enum {
    TE_PASS_DCE = 1u << 0,       /* dead-code elimination */
    TE_PASS_FOLD = 1u << 1,      /* constant folding */
    TE_PASS_CSE = 1u << 2,       /* common-subexpression elimination */
    TE_PASS_BN_FOLD = 1u << 3,   /* eval: batch norm folded into the conv before it */
    TE_PASS_FUSE_ACT = 1u << 4,  /* matmul/linear/conv/batch norm + activation */
    TE_PASS_FUSE_EW = 1u << 5,   /* chains of elementwise ops */
    TE_PASS_FUSE_ATTN = 1u << 6, /* causal attention's composed chain as one kernel */
    TE_PASS_RECOMPUTE = 1u << 7, /* layer norm / activation outputs redone in the backward */
    TE_PASS_LAYOUT = 1u << 8,    /* CPU: conv -> batch norm -> pool -> conv values blocked (nChw16c) */
    TE_PASS_FUSE_SUM = 1u << 9,  /* CPU: conv + add, the conv adding onto the addend in place */
};

typedef struct te_graph_opts {
    te_mode mode;
    int n_inputs, n_outputs;  /* at most 64 each */
    const char *name;         /* in messages and saved file names; NULL: "step" */
    const char *const *input_names; /* in the shape-change message; NULL: "input K" */
    bool recompile;           /* a new input shape compiles (and caches) a new plan */
    const char *save_dir;     /* write the IR as text after each pass into this folder */
    unsigned disable;         /* TE_PASS_* bits */
} te_graph_opts;

TE_API te_graph *te_graph_new(te_step_fn fn, void *ctx, const te_graph_opts *o);
/* Runs one step. In graph mode an input whose shape or dtype differs from
 * the compiled one fails with TE_ERR_SHAPE naming it, both shapes and the
 * fixes, unless opts.recompile. */
TE_API te_status te_graph_run(te_graph *g, te_tensor *const *inputs, te_tensor **outputs);
TE_API void te_graph_free(te_graph *g);
/* Writes the IR of the variant compiled last, after each pass, into dir
 * (as opts.save_dir does at compile time); later compiles write there too. */
TE_API te_status te_graph_save(te_graph *g, const char *dir);

typedef struct te_graph_stats {
    int variants;          /* plans compiled (per shape, training flag, observed set) */
    int ops;               /* original ops of the last plan (forward and backward) */
    int kernels;           /* kernels it runs */
    int fused;             /* kernels that compute more than one op */
    size_t arena_bytes;    /* its planned peak of temporaries */
    size_t lower_bound;    /* most bytes live at once: no plan does better */
    size_t naive_bytes;    /* sum of its temporaries: no sharing at all */
    double compile_ms;     /* trace and compile time of the last plan */
    int captured_segments; /* runs of its kernels replayed as one device graph each (CUDA Graphs) */
} te_graph_stats;
TE_API te_graph_stats te_graph_stats_get(const te_graph *g);

/* Tensors a consumer must see in graph mode ("conv1/bn:out0", "fc*", a glob
 * over tensor or op names): they stay in memory to the end of the step and
 * no kernel fuses across them. Changing the set recompiles, and variants are
 * cached per set. */
TE_API te_status te_observe_add(const char *glob);
TE_API void te_observe_remove(const char *glob);   /* one glob added before */
TE_API void te_observe_clear(void);

/* ---- statistics (stats.c) -----------------------------------------------------
 * One pass over a tensor of any float dtype (f32, f16, bf16; i32 too, read
 * as float). min/max/mean/std/abs_max/abs_mean/l2norm are over the finite
 * elements (0 when there are none); counts are over all elements.
 */
typedef struct te_stats {
    int64_t n;              /* elements */
    int64_t nan, inf;       /* non-finite counts */
    int64_t zero;           /* elements == 0 */
    int64_t fp16_overflow;  /* finite elements with |x| > 65504, the largest f16 */
    int64_t first_bad;      /* flat index of the first NaN or Inf; -1 if none */
    double min, max, mean, std; /* std: population (divide by the finite count) */
    double abs_max, abs_mean, l2norm;
} te_stats;

/* Full statistics. t->data must not be NULL. Deterministic: the same tensor
 * gives the same result bit for bit whatever the thread count. */
TE_API void te_stats_compute(const te_tensor *t, te_stats *s);
/* The cheap pass of `break nonfinite` on every op: only n, nan, inf,
 * first_bad, abs_max and l2norm are set (the rest 0). */
TE_API void te_stats_quick(const te_tensor *t, te_stats *s);
/* Does t hold a NaN or Inf? The cheapest pass there is (x * 0 summed),
 * for tensors whose statistics nobody keeps (parameters after an update). */
TE_API bool te_has_nonfinite(const te_tensor *t);
/* A hook that takes the statistics of ops' outputs says so: ops that can
 * compute them while they write the output (the optimizer's update, a
 * strip at a time in cache) then do, and te_op_output_stats hands them
 * over instead of reading the tensor again. Calls nest: on, then off. */
TE_API void te_stats_want(bool on);
/* Output i's full statistics: those the op computed, else te_stats_compute.
 * The same bits either way. */
TE_API void te_op_output_stats(const te_op_record *r, int i, te_stats *s);
/* A forward record's op attributes as "key=value ..." text into buf: the
 * ones its type uses (MatMul "trans_a=0 trans_b=1", Conv2D "stride=1 pad=1",
 * Softmax "axis=-1", LayerNorm "eps=9.99999975e-06", Dropout "p=0.1
 * scale=1.11111116 training=1 seed=...", ...; "" for a type without any).
 * Floats have 9 significant digits (they read back exactly). Returns the
 * length snprintf would give; -1 (buf "") for a record of another phase. */
TE_API int te_op_attrs(const te_op_record *r, char *buf, size_t size);
/* Flat index -> "[3,17]" for t's shape; returns buf. */
TE_API char *te_index_str(const te_tensor *t, int64_t flat, char *buf, size_t n);

/* ---- mixed precision (amp.c, scaler.c; docs/amp.md) ------------------- */

/* O0: everything f32. O1: MatMul, Linear, Conv2D (and batched matmuls) in
 * the low precision, their inputs cast; softmax, losses, norms, reductions,
 * exp/log cast up to f32. O2: weights and activations in the low precision,
 * f32 master weights in the optimizer, norms and the loss in f32, dynamic
 * loss scaling. O3: everything in the low precision, no loss scaling. */
typedef enum { TE_AMP_O0, TE_AMP_O1, TE_AMP_O2, TE_AMP_O3, TE_AMP_LEVEL_COUNT } te_amp_level;

/* The level and the low dtype (TE_F16 or TE_BF16) for the ops made from now
 * on; TE_ERR_ARG for anything else, TE_ERR_STATE inside a step. Ops cast
 * their inputs as their class says (docs/amp.md "Levels"), each cast an op
 * named "<op name>/cast_in<i>". O2 and O3 convert the registered f32
 * parameters to the low dtype in place (rounded, gradients dropped); O0 and
 * O1 bring those back to f32. */
TE_API te_status te_amp_set(te_amp_level level, te_dtype low);
TE_API te_amp_level te_amp_level_get(void);
TE_API te_dtype te_amp_dtype(void);               /* the low dtype; TE_F32 at O0 */
TE_API const char *te_amp_level_name(te_amp_level level); /* "O2"; NULL when out of range */
/* Keeps parameter p in f32 at O2 (Apex's keep_batchnorm_fp32): te_amp_set
 * does not lower it, and at O2 it is brought back to f32 if it was. The
 * first batch norm at O2 does this for its gamma and beta; a program that
 * loads trained values before that (a checkpoint's resume) calls it when
 * it makes them, so they are never rounded. NULL, or not a parameter:
 * nothing (TE_OK); TE_ERR_NOMEM when the conversion cannot allocate. */
TE_API te_status te_amp_keep_f32(te_tensor *p);
/* The precision an op type ("MatMul" or its "MatMulGrad") runs in at the
 * current level: "low" (the low dtype), "f32", or "follows" (its inputs'
 * dtype; Cast: its target); NULL for an unknown type. At O0 every op is
 * "f32". The table is docs/amp.md's "Levels". */
TE_API const char *te_amp_op_precision(const char *type);
/* What runs bf16 MatMul, Linear and Conv2D natively (bf16 inputs, f32
 * accumulation, outputs rounded once), e.g. "oneDNN bf16 (avx512_bf16)";
 * NULL when they run on f32 copies instead: built without oneDNN, a CPU
 * without AVX512-BF16, or TDBG_NO_NATIVE_LOWP=1 in the environment. */
TE_API const char *te_lowp_native(void);
/* What runs f32 Conv2D on the CPU, forward and backward: "oneDNN (blocked
 * layouts)" where built with oneDNN, else (or with TDBG_CPU_CONV=ref in
 * the environment) "im2col + sgemm", the reference kernels. */
TE_API const char *te_cpu_conv(void);
/* What runs the CPU's matrix products (Linear, MatMul, the reference
 * convolutions): "oneDNN sgemm" where built with oneDNN, else (or with
 * TDBG_CPU_GEMM=openblas in the environment) "OpenBLAS sgemm". */
TE_API const char *te_cpu_gemm(void);

/* Dynamic loss scaling, PyTorch GradScaler's rule with Megatron's
 * hysteresis: a step whose unscaled gradients hold a non-finite value is
 * skipped (no update, the optimizer state untouched) and counts against
 * the hysteresis; when that runs out the scale is multiplied by backoff
 * (and the count restored only by growth); growth_interval clean steps in
 * a row multiply it by growth. hysteresis 1 is GradScaler exactly. */
typedef struct te_scaler_opts {
    bool fixed;           /* a fixed scale (--loss-scale N): skips, never changes */
    float init_scale;     /* 0: 65536 (2^16) */
    float growth_factor;  /* 0: 2 */
    float backoff_factor; /* 0: 0.5 */
    int growth_interval;  /* 0: 2000 clean steps */
    int hysteresis;       /* 0: 1, non-finite steps before backing off */
} te_scaler_opts;

typedef struct te_scaler_state {
    bool enabled;
    te_scaler_opts opts;    /* with the defaults filled in */
    float scale;            /* the scale of this step's loss */
    bool found_inf;         /* this step's unscale found a non-finite gradient: the update is skipped */
    char first_param[TE_NAME_MAX]; /* the parameter whose gradient was non-finite first
                                    * (registration order); "" when none */
    int64_t skipped;        /* steps skipped since enabled */
    int64_t growth_tracker; /* clean steps since the last change or non-finite step */
    int hysteresis_left;    /* non-finite steps left before the next back-off */
} te_scaler_state;

/* One scaler for the engine: enabled with o (NULL: the defaults), or
 * disabled. TE_ERR_ARG names a bad option (a scale not finite and > 0, a
 * growth <= 1, a backoff outside (0, 1), an interval or hysteresis < 0). */
TE_API te_status te_scaler_enable(const te_scaler_opts *o);
TE_API void te_scaler_disable(void);
/* The scaler's state; false (and *s zeroed) when none is enabled. */
TE_API bool te_scaler_state_get(te_scaler_state *s);
/* What this step's unscale found (first_param: the first parameter with a
 * non-finite gradient, or NULL), kept in the state until the next record.
 * The unscale reports itself to the hooks after this and before the
 * update, so that a stop there sees this step's scale. */
TE_API void te_scaler_record(bool found_inf, const char *first_param);
/* The end of the step: a step recorded non-finite counts as skipped and
 * backs off (per the hysteresis); a clean one counts towards growth; the
 * scale becomes the next step's. Nothing without a scaler, or when no
 * record was made since the last update (no unscale this step).
 * te_optim_step calls it after its update (or its skip). */
TE_API void te_scaler_update(void);
/* Restores a state (scale, growth_tracker, hysteresis_left, skipped,
 * found_inf, first_param; the options stay): checkpoints, replay, and
 * scripted tests. TE_ERR_STATE without a scaler, TE_ERR_ARG for a scale
 * not finite and > 0 or counts out of range. */
TE_API te_status te_scaler_state_set(const te_scaler_state *s);

/* The training step with a scaler (a no-op for each call without one):
 *
 *     te_backward(te_scaler_scale_loss(loss));
 *     te_scaler_unscale(te_params(), te_param_count());
 *     te_clip_grad_norm(te_params(), te_param_count(), 1.0f);  // optional
 *     te_optim_step(opt);   // skips the update when found_inf, then te_scaler_update()
 *
 * te_scaler_scale_loss: loss times the scale, an f32 op named
 * "amp/loss_scale" that reads the scale from the tensor "amp:scale" when
 * it runs (graph mode sees each step's scale). Without a scaler: loss. */
#define te_scaler_scale_loss(loss) te_scaler_scale_loss_at(TE_HERE, loss)
TE_API te_tensor *te_scaler_scale_loss_at(te_loc loc, te_tensor *loss);
/* One pass over each valid gradient: multiplies it by 1/scale and looks
 * for non-finite values (the values before unscaling, as GradScaler);
 * an f16/bf16 gradient is unscaled into an f32 copy ("master_grad:NAME")
 * that clipping and the optimizer read instead. Then te_scaler_record
 * (found, the first such parameter in params' order, its registered name
 * without "param:"), then the op "amp/unscale" (type "Unscale", phase
 * update, inputs the gradients, outputs the unscaled ones) is reported to
 * the hooks. In graph mode a kernel of the compiled step does this. */
TE_API te_status te_scaler_unscale(te_tensor **params, int n);

/* The forward op of rec (a record a hook is handed, while it is being
 * reported) run again in f32 (rerun.c): its inputs cast up to f32, its
 * kernel run on copies without rounding; nothing of the program is written
 * (in-place writes and saved state go to copies). out gets its outputs,
 * f32 (i32 ones stay i32), as persistent tensors to free with
 * te_tensor_free; max_out must hold them all. TE_ERR_ARG for a backward or
 * update op, TE_ERR_STATE when an input is not in memory (graph mode
 * keeps the tensors it is asked to observe), with a message naming it. */
TE_API te_status te_rerun_f32(const te_op_record *rec, te_tensor **out, int max_out);

/* ---- memory ------------------------------------------------------------ */

typedef struct te_mem_stats {
    size_t current;   /* bytes held by live tensors (each rounded up to its size class) */
    size_t peak;      /* highest current since start or te_mem_reset_peak() */
    size_t requested, peak_requested; /* the same, in the bytes the tensors asked for */
    size_t cached;    /* bytes kept in the allocator's free lists */
    uint64_t allocs, cache_hits;
} te_mem_stats;
/* The CPU's memory; te_mem_stats_of: device d's (zeros where none is used). */
TE_API te_mem_stats te_mem_stats_get(void);
TE_API te_mem_stats te_mem_stats_of(te_device d);
TE_API void te_mem_reset_peak(void);        /* every device's */
TE_API void te_mem_release_cached(void);    /* every device's */

/* ---- data --------------------------------------------------------------- */

/* A dataset yields sample i deterministically from (seed, i); get() is
 * called from several loader threads at once and must be thread-safe. */
typedef struct te_dataset te_dataset;
struct te_dataset {
    const char *name;
    int64_t size;                    /* samples */
    int ndim;                        /* per-sample feature dims */
    int64_t shape[3];
    int n_classes;
    uint64_t seed;
    void (*get)(const te_dataset *d, int64_t i, float *x, int32_t *y);
    void *state;
    /* optional: where sample i came from, for a file-backed dataset, as
     * "FILE:LINE (byte OFFSET)"; thread-safe as get is. */
    void (*source)(const te_dataset *d, int64_t i, char *buf, size_t n);
};

/* K interleaved spiral arms in 2-D, one per class, with noise. */
TE_API te_dataset *te_dataset_spirals(int64_t size, int classes, uint64_t seed);
/* Gaussian blobs in dim dimensions, one per class, overlapping. */
TE_API te_dataset *te_dataset_blobs(int64_t size, int dim, int classes, uint64_t seed);
/* 3x32x32 images of 10 procedurally drawn shape classes. */
TE_API te_dataset *te_dataset_shapes(int64_t size, uint64_t seed);
/* The records of a CSV file, one a line: `features` numbers, then the
 * label (an integer); blank lines and lines starting with '#' are not
 * records, and a first line that is not numbers is a header. An empty
 * field is a missing value, read as NaN; numbers out of float's range read
 * as +-Inf, as strtof reads them. classes 0 counts them from the labels
 * (the largest + 1). NULL with an error naming the file, line and column
 * of a malformed record. source() names each sample's line and byte. */
TE_API te_dataset *te_dataset_csv(const char *path, int classes);
TE_API void te_dataset_free(te_dataset *d);

typedef struct te_loader_opts {
    int batch;
    bool shuffle;          /* reshuffled each epoch from (seed, epoch) */
    bool drop_remainder;   /* drop the last short batch */
    int workers;           /* threads producing batches; 0 = in the caller */
    int prefetch;          /* batches queued ahead; 0 = 2 per worker */
    uint64_t seed;         /* 0 = the engine seed */
    /* Data parallel: the epoch's order is cut into global batches of
     * batch * shards samples, and this loader hands out slice `shard` of
     * each (rows shard * batch .. + batch), so that the ranks' batches, in
     * rank order, are the batches of one loader with batch * shards.
     * shards 0 or 1: the whole batch. drop_remainder is required. */
    int shard, shards;
} te_loader_opts;

typedef struct te_loader te_loader;
TE_API te_loader *te_loader_new(const te_dataset *d, const te_loader_opts *o);
/* Next batch as tape tensors x [B,...] f32 and y [B] i32 (named "batch:x"
 * and "batch:y"), in the same order whatever the worker count; starts the
 * next epoch after the last batch. */
TE_API te_status te_loader_next(te_loader *l, te_tensor **x, te_tensor **y);
/* The epoch the next batch comes from: `while (te_loader_epoch(l) < E)` runs E epochs. */
TE_API int64_t te_loader_epoch(const te_loader *l);
TE_API int64_t te_loader_batches_per_epoch(const te_loader *l);
/* Batches handed out so far, over all epochs: the number of the next one
 * (its epoch is position / te_loader_batches_per_epoch). */
TE_API int64_t te_loader_position(const te_loader *l);
/* Moves l so that its next batch is batch `consumed` of the sequence,
 * forward or back, without building the batches between (a checkpoint's
 * resume, a rewind): its workers are stopped, its queue emptied and the
 * workers started again from there. TE_ERR_ARG for NULL or a negative
 * position; TE_ERR_IO when the workers cannot be started again (the
 * loader then builds each batch in the caller: the same batches). */
TE_API te_status te_loader_seek(te_loader *l, int64_t consumed);
TE_API void te_loader_free(te_loader *l);

/* ---- which sample did it (provenance.c, data_check.c; docs/engine.md
 * "Batch provenance") -------------------------------------------------------
 * Every batch te_loader_next hands out is published with the dataset
 * index of each row (and, through the dataset's source(), where it came
 * from), the loader's seed and position. A program with a pipeline of its
 * own publishes its batches with te_batch_publish. The engine keeps the
 * last TE_BATCH_KEEP batches; hooks see each one (te_hooks.batch) before
 * the first op can use it. */
#define TE_BATCH_KEEP 32

/* What a data check looks for in a batch (te_data_check_set). */
typedef struct te_data_check {
    bool nonfinite;  /* x holds NaN or Inf */
    bool label;      /* y outside 0..classes-1 (datasets that name their classes) */
    bool empty;      /* no rows, or a row whose values are all zero (an empty record) */
    bool constant;   /* every value of x the same (more than one value) */
    bool above;      /* a finite value of x > hi */
    bool below;      /* a finite value of x < lo */
    float hi, lo;
} te_data_check;

typedef enum {
    TE_DATA_OK, TE_DATA_NONFINITE, TE_DATA_LABEL, TE_DATA_EMPTY, TE_DATA_CONSTANT, TE_DATA_ABOVE,
    TE_DATA_BELOW, TE_DATA_ISSUE_COUNT
} te_data_issue;

/* What a check found: the first row holding an issue and its first one
 * (in te_data_issue's order), the element (flat, in x, or in y for a
 * label) and its value; row -1 for the batch as a whole (constant, no
 * rows). bad_rows counts the rows holding any issue looked for. */
typedef struct te_data_finding {
    te_data_issue issue;
    int64_t row, element;
    double value;
    int64_t bad_rows;
} te_data_finding;

/* "nonfinite", "label", ...: the words of `break data if ...`. */
TE_API const char *te_data_issue_name(te_data_issue i);
/* Checks rows of row_numel floats x (and labels y, NULL for none) against
 * c; classes <= 0 skips the label check. Fills f; true when it found one. */
TE_API bool te_data_check_rows(const te_data_check *c, const float *x, const int32_t *y, int64_t rows,
                               int64_t row_numel, int classes, te_data_finding *f);
/* The check every batch gets from now on (NULL or all false: none), in the
 * loader's workers where it has them, else in te_loader_next; batches
 * already built are checked again in the caller. */
TE_API void te_data_check_set(const te_data_check *c);

struct te_batch {
    int64_t step;              /* te_step() when it was handed out */
    const te_dataset *dataset; /* its name, size, classes and source() */
    te_loader *loader;         /* NULL for a program's own pipeline */
    uint64_t seed;             /* the shuffle's (loaders) */
    bool shuffle;
    int64_t position;          /* its number in the loader's sequence, over all epochs */
    int64_t epoch, batch_in_epoch;
    int64_t rows;
    const int64_t *index;      /* [rows] the dataset index of each row */
    const int64_t *drawn;      /* [rows] what the order drew; != index where `data skip` replaced it */
    const te_tensor *x, *y;    /* the tensors it was handed out as (valid in its step only) */
    te_dtype x_dtype;          /* x's, kept past the step */
    bool checked;              /* a data check ran on it: finding says what it found */
    te_data_finding finding;
};

/* Provenance on (the default) or off (TDBG_PROVENANCE=0 at start): off,
 * loaders publish no records, so hooks see no batches and nothing names a
 * sample; the data check runs all the same. For measuring what it costs. */
TE_API void te_provenance_enable(bool on);
/* The batches kept, oldest first: i in 0..te_batch_count()-1. */
TE_API int te_batch_count(void);
TE_API const te_batch *te_batch_at(int i);
/* The batch of this step that t is (or is bound to: graph mode's inputs
 * share the batch's memory), or NULL. */
TE_API const te_batch *te_batch_of(const te_tensor *t);
/* "FILE:LINE (byte N)" or "" : where row r of b came from. */
TE_API void te_batch_source(const te_batch *b, int64_t r, char *buf, size_t n);
/* Publishes a batch a program made itself (rows samples of dataset d, at
 * index[r]; x and y the tensors it feeds the step), with the same data
 * check and hooks as a loader's; d (get may be NULL) must outlive the
 * batch's record. TE_ERR_ARG for NULL or rows < 0. */
TE_API te_status te_batch_publish(const te_dataset *d, const int64_t *index, int64_t rows, const te_tensor *x,
                                  const te_tensor *y);
/* Replaces sample `index` in every batch l makes from its next on: another
 * index, drawn from (seed, index) and not itself replaced, takes its place,
 * so batches keep their shape and a replay makes the same ones. Batches
 * already built are built again. *replacement (may be NULL) gets it.
 * TE_ERR_ARG for an index outside the dataset or one replaced already. */
TE_API te_status te_loader_skip(te_loader *l, int64_t index, int64_t *replacement);
/* The replacements in force, index -> replacement, sorted by index: the
 * first max into from[] and to[]; returns how many there are. */
TE_API int te_loader_skips(const te_loader *l, int64_t *from, int64_t *to, int max);
TE_API const te_dataset *te_loader_dataset(const te_loader *l);
TE_API uint64_t te_loader_seed(const te_loader *l);

/* ---- the profiler (prof.c, prof_json.c; docs/engine.md "Profiling") ------
 * Records every op of the selected steps (start and end, thread, shape,
 * dtype, FLOPs and bytes, the allocator's live and peak bytes after it)
 * and each step's phases into a ring of the last `keep` steps, and writes
 * them as Chrome trace event JSON (Perfetto, chrome://tracing). Off, it
 * costs one branch per op. */
typedef enum { TE_PROF_ALWAYS, TE_PROF_BREAK } te_profile_when;
typedef struct te_profile_opts {
    char file[512];        /* "" : written only by te_profile_save(FILE) */
    int64_t first, last;   /* steps recorded: first..last; last -1 = no end */
    char ops[128];         /* fnmatch glob on op names; "" or "*" = every op */
    int keep;              /* steps in the ring (1..TE_PROF_KEEP_MAX) */
    te_profile_when when;  /* ALWAYS: file written at stop or after step `last`;
                            * BREAK: only when a front end calls te_profile_save */
} te_profile_opts;
#define TE_PROF_KEEP_MAX 1000
#define TE_PROF_KEEP_DEFAULT 10
/* "file=P;steps=A-B;ops=GLOB;keep=K;when=always|break", every key optional
 * (steps: "N", "A-B", "A-"; defaults: every step, every op, keep 10,
 * when=always). TE_ERR_ARG naming the bad key or value in te_error(). */
TE_API te_status te_profile_parse(const char *spec, te_profile_opts *o);
/* Starts recording into an empty ring (NULL: the defaults). TE_ERR_NOMEM. */
TE_API te_status te_profile_start(const te_profile_opts *o);
/* Stops recording; with when=always and a file, writes it (te_profile_save).
 * The ring stays for te_profile_save until the next start. */
TE_API te_status te_profile_stop(void);
/* Writes the ring's finished steps to file (NULL: the opts' file, then
 * FILE-1.json, FILE-2.json... for later captures), with the step still
 * running up to now when called at a stop (args.partial), through a
 * temporary file renamed over it. TE_ERR_IO, TE_ERR_STATE when nothing
 * was recorded or no file is named. */
TE_API te_status te_profile_save(const char *file);
TE_API bool te_profile_active(void);
/* The last finished step in the ring, for a front end's live view: its
 * times, and its ops merged by name, longest total first. */
typedef struct te_profile_op {
    char name[TE_NAME_MAX];
    char type[32];
    te_phase phase;
    int calls;    /* times an op of this name ran in the step */
    double ms;    /* their total time */
    double flops; /* their total FLOPs (0 where the cost model has none) */
} te_profile_op;
typedef struct te_profile_step {
    int64_t step;
    double ms;                       /* wall time, the data wait included */
    double phase_ms[TE_PHASE_COUNT]; /* forward, backward, update */
    double data_ms, hooks_ms;        /* the loader's waits, the hooks' (debugger's) time */
    int n_ops;                       /* distinct op names (may be more than max) */
} te_profile_step;
/* Fills *s and the first min(max, s->n_ops) of ops. TE_ERR_STATE when no
 * step has finished since te_profile_start. */
TE_API te_status te_profile_last(te_profile_step *s, te_profile_op *ops, int max);
/* Where the profiler stands, whoever started it (a program's --profile, a
 * debugger's command): for a front end's messages. */
typedef struct te_profile_info {
    bool started;         /* te_profile_start ran: o and the ring exist */
    bool recording;       /* te_profile_active() */
    te_profile_opts o;    /* the spec it runs with */
    int64_t from;         /* the first step recorded; -1 before one */
    int64_t first, last;  /* the steps a te_profile_save now writes; -1 when none */
    bool partial;         /* the last of them is under way (written up to now) */
    int captures;         /* files named from o.file written so far (P, P-1.json, ...) */
    char last_file[sizeof ((te_profile_opts *)0)->file + 16]; /* the last file written, "" before one */
} te_profile_info;
TE_API void te_profile_info_get(te_profile_info *i);
/* Time another part of the program waited for its own reason ("dump": the
 * dump writer's queue), added to the current step's args; any thread. */
TE_API void te_profile_note_wait(const char *what, int64_t ns);

/* ---- attaching to a running job (wire.c, listen.c; docs/attach.md) --------
 *
 * With TDBG_LISTEN set at te_init ("1" or "unix": a Unix socket in a private
 * directory; "tcp:127.0.0.1:PORT": the loopback, with a token file), a
 * listener thread accepts one front end at a time, checks it (the peer's uid;
 * the token) and hands its connection to the training thread, which at the
 * next te_step_begin sends WELCOME and calls the attach handler with the fd:
 * by default the debugger module's `int dbg_plugin_attach(int fd)`, loaded
 * as the TDBG plugin is (TDBG_PLUGIN, else the installed one).
 *
 * The wire: each frame is a 4-byte big-endian payload length (at most
 * TE_WIRE_MAX), one type byte, then the payload (text, no NUL). */
#define TE_WIRE_MAX (1u << 20)
typedef enum te_wire_type {
    /* client -> run */
    TE_WIRE_HELLO = 1, /* "tdbg-attach 1 pid=N mode=cli|batch|tui [term=T rows=R cols=C utf8=0|1]", first */
    TE_WIRE_AUTH,      /* the token (TCP only), the second frame */
    TE_WIRE_LINE,      /* a command line, the answer to a PROMPT */
    TE_WIRE_INTR,      /* Ctrl-C: pause at the next op (no payload) */
    TE_WIRE_BYE,       /* detach and leave (no payload) */
    /* run -> client */
    TE_WIRE_WELCOME,   /* "tdbg-run 1 pid=N step=S program=PATH": the session begins */
    TE_WIRE_REFUSED,   /* why; the run closes the connection */
    TE_WIRE_OUT,       /* output text */
    TE_WIRE_PROMPT,    /* the prompt: the run waits for one LINE */
    TE_WIRE_STOP,      /* the `stopped:` line */
    TE_WIRE_END,       /* the session is over (detached, the program ended): why */
    /* the terminal UI (mode=tui): drawn in the run onto the client's terminal */
    TE_WIRE_TERM,      /* run -> client: bytes for the client's terminal, as they are */
    TE_WIRE_KEYS,      /* client -> run: bytes typed at the client's terminal */
    TE_WIRE_RESIZE,    /* client -> run: "ROWS COLS", the terminal's new size */
    TE_WIRE_TYPE_END   /* one past the last type */
} te_wire_type;

typedef enum te_wire_status {
    TE_WIRE_FRAME = 0,     /* a whole frame was read */
    TE_WIRE_CLOSED = 1,    /* the peer closed (or reset) the connection between frames */
    TE_WIRE_TIMEOUT = 2,   /* no frame began within the timeout; nothing was consumed */
    TE_WIRE_MALFORMED = 3, /* too long, unknown type, cut short, or late: close the fd */
    TE_WIRE_ERROR = 4,     /* another I/O error (errno and te_error() say which) */
} te_wire_status;

/* "hello", "auth", ... "end"; "?" for another value. */
TE_API const char *te_wire_type_name(int type);
TE_API const char *te_wire_status_str(te_wire_status s);
/* Sends one frame on the socket fd, whole (partial writes and EINTR
 * handled; MSG_NOSIGNAL: a closed peer is EPIPE, never SIGPIPE). Returns 0,
 * or -1 with errno and te_error() set (EINVAL: an unknown type or n over
 * TE_WIRE_MAX). One writer per fd at a time. */
TE_API int te_wire_send(int fd, int type, const void *payload, size_t n);
/* Reads one frame into buf (cap bytes: the payload and a NUL after it):
 * *type and *len set on TE_WIRE_FRAME. The length is checked before the
 * payload is read: over TE_WIRE_MAX or over cap - 1 is TE_WIRE_MALFORMED,
 * as are an unknown type and a frame cut short. timeout_ms bounds the
 * whole frame (-1: none): TE_WIRE_TIMEOUT when it runs out before the
 * first byte, TE_WIRE_MALFORMED after it. te_error() says why on every
 * status but TE_WIRE_FRAME. */
TE_API te_wire_status te_wire_recv(int fd, int *type, char *buf, size_t cap, size_t *len, int timeout_ms);

/* What the training thread does with an accepted, checked connection, at
 * the step boundary, after sending WELCOME: the handler owns fd from then
 * on, closes it when the session ends and then calls te_listen_detached().
 * NULL restores the default (the debugger module's dbg_plugin_attach; if
 * the module or the symbol is missing, the client gets REFUSED with
 * dlerror()'s text and the run goes on). Call it before te_init or between
 * steps. */
typedef void (*te_listen_handler)(int fd, void *user);
TE_API void te_listen_set_handler(te_listen_handler fn, void *user);
/* The session handed out ended and its fd is closed: the listener accepts
 * the next front end. Any thread; harmless when none is attached. */
TE_API void te_listen_detached(void);
typedef struct te_listen_info {
    bool listening;        /* a listener is up (false after 3 failed TCP tries) */
    bool attached;         /* a front end holds the session, or is being handed it */
    int peer_pid;          /* its HELLO's pid; 0 when none */
    char peer_mode[8];     /* its HELLO's mode=: "cli", "batch", "tui"; "" when none */
    char peer_hello[256];  /* its HELLO as sent (term=, rows=, ... for mode=tui); "" when none */
    int64_t since;         /* when it was accepted (time(NULL)); 0 when none */
    char addr[128];        /* "unix:PATH" or "tcp:127.0.0.1:PORT"; "" when not listening */
    char token_file[256];  /* TCP: the token's file; "" otherwise */
} te_listen_info;
TE_API void te_listen_info_get(te_listen_info *i);
/* The Unix socket a run of pid listens on with TDBG_LISTEN=1 under this
 * environment ($XDG_RUNTIME_DIR/tdbg/PID.sock, else /tmp/tdbg-UID/PID.sock):
 * what `tdbg attach PID` connects to. 0, or -1 when it does not fit in n. */
TE_API int te_listen_socket_path(int pid, char *buf, size_t n);

/* ---- logs with levels (log.c; te_log.h) ------------------------------------- */
#include "te_log.h"

/* ---- data parallel (dist.c; te_dist.h) -------------------------------------- */
#include "te_dist.h"

#ifdef __cplusplus
}
#endif
#endif
