/*
 * tape.c — engine state: steps, phases, scopes, op naming, the tape of nodes
 * and tape-owned tensors, and the dispatcher that runs a node's kernel.
 */
#include "te_internal.h"
#include "graph/graph.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NAME_SLOTS 4096
#define MAX_SCOPE_DEPTH 32

/* Open-addressing table: base op name -> uses this step. Entries from older
 * steps are stale by generation, so a reset costs nothing. */
typedef struct {
    uint32_t gen;
    int count;
    char key[TE_NAME_MAX];
} name_slot;

static struct {
    bool initialized;
    te_config cfg;
    int64_t step;
    te_phase phase;
    bool training;
    bool in_step;
    int exec_index;
    char scope[TE_NAME_MAX];
    size_t scope_len[MAX_SCOPE_DEPTH];
    int scope_depth;
    te_node **nodes;
    int n_nodes, cap_nodes;
    te_tensor **tensors;
    int n_tensors, cap_tensors;
    name_slot *names;
    name_slot *last_name; /* the slot the newest node counted in */
    char next_name[TE_NAME_MAX]; /* te_name_next's name for the next op, or "" */
    uint32_t name_gen;
} eng = { .step = -1, .training = true };

const te_op_info te_op_table[TE_OP_COUNT] = { TE_OP_LIST(TE_OP_ROW) };

const char *te_op_type_name(te_op op) { return te_op_table[op].type; }
const char *te_op_grad_type_name(te_op op) { return te_op_table[op].grad_type; }
const char *te_op_default_name(te_op op) { return te_op_table[op].name; }
unsigned te_op_traits(te_op op) { return te_op_table[op].traits; }
unsigned te_op_bwd_reads(te_op op) { return te_op_table[op].bwd_reads; }

unsigned te_node_inplace(const te_node *n)
{
    unsigned given = 0;
    for (int i = 0; i < n->n_in; i++)
        given |= n->in[i] ? 1u << i : 0;
    return n->a.training ? te_op_table[n->op].writes & given : 0;
}

/* ---- lifetime ------------------------------------------------------------ */

te_status te_init(const te_config *cfg)
{
    if (eng.initialized)
        te_shutdown();
    eng.cfg = cfg ? *cfg : (te_config){ 0 };
    if (eng.cfg.seed == 0)
        eng.cfg.seed = 1;
    if (eng.cfg.threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        eng.cfg.threads = n > 0 ? (int)n : 1;
    }
    omp_set_num_threads(eng.cfg.threads);
    openblas_set_num_threads(1); /* cpu_sgemm splits products across OpenMP instead */
    eng.names = calloc(NAME_SLOTS, sizeof *eng.names);
    if (!eng.names) {
        te_set_error(TE_ERR_NOMEM, "te_init: out of memory");
        return TE_ERR_NOMEM;
    }
    eng.name_gen = 1;
    eng.step = -1;
    eng.phase = TE_PHASE_FORWARD;
    eng.training = true;
    eng.in_step = false;
    eng.scope_depth = 0;
    eng.scope[0] = '\0';
    eng.initialized = true;
    te_error_clear();
    te_record_env();
    te_plugin_load();
    te_listen_start();
    return TE_OK;
}

void te_shutdown(void)
{
    te_listen_stop();
    te_dist_shutdown();
    te_record_shutdown(); /* its snapshots hold the allocator's memory */
    te_checkpoint_shutdown();
    te_tape_reset();
    te_attention_shutdown();
    for (int i = 0; i < eng.cap_nodes; i++)
        free(eng.nodes[i]);
    free(eng.nodes);
    free(eng.tensors);
    free(eng.names);
    eng.nodes = NULL;
    eng.tensors = NULL;
    eng.names = NULL;
    eng.n_nodes = eng.cap_nodes = eng.n_tensors = eng.cap_tensors = 0;
    te_params_shutdown();
    te_amp_reset();
    te_scaler_disable(); /* its tensors are the allocator's */
    te_inject_clear();
    te_names_reset();
    te_observe_clear();
    te_mem_shutdown();
    te_backend_reset();
    eng.initialized = false;
}

int te_threads(void) { return eng.cfg.threads; }
uint64_t te_seed(void) { return eng.cfg.seed; }

/* ---- steps, phases, scopes ---------------------------------------------- */

const char *te_phase_name(te_phase p)
{
    static const char *const names[] = { "forward", "backward", "update" };
    return (unsigned)p < TE_PHASE_COUNT ? names[p] : "?";
}

void te_step_begin(void)
{
    if (eng.in_step)
        te_step_end();
    eng.step++;
    eng.in_step = true;
    eng.exec_index = 0;
    eng.phase = TE_PHASE_FORWARD;
    te_record_begin(); /* may put an earlier step back (a rewind) */
    if (te_listen_waiting())
        te_listen_hand_off(); /* a front end attaches: its hooks see this step whole */
    if (te_prof_on)
        te_prof_step(true);
    if (te_hook_count) {
        te_hooks_step(eng.step, true);
        te_hooks_phase(eng.step, TE_PHASE_FORWARD);
    }
}

void te_step_end(void)
{
    /* A step unwound by a rewind did not happen: no names checked on its
     * part, no step_end, nothing recorded or profiled. */
    if (eng.in_step && !te_rec_unwinding)
        te_record_end();
    if (eng.in_step && !te_rec_unwinding) {
        te_names_step_end();
        if (te_hook_count)
            te_hooks_step(eng.step, false);
        if (te_prof_on)
            te_prof_step(false);
    } else if (eng.in_step && te_prof_on) {
        te_prof_step_drop();
    }
    te_rec_unwinding = false;
    eng.in_step = false;
    te_tape_reset();
}

int64_t te_step(void) { return eng.step < 0 ? 0 : eng.step; }
void te_step_set(int64_t step) { eng.step = step; }

te_status te_step_resume(int64_t step)
{
    if (eng.in_step || step < 0) {
        te_set_error(eng.in_step ? TE_ERR_STATE : TE_ERR_ARG, "te_step_resume(%lld): %s", (long long)step,
                     eng.in_step ? "a step is running: call it between steps" : "steps count from 0");
        return eng.in_step ? TE_ERR_STATE : TE_ERR_ARG;
    }
    eng.step = step - 1; /* te_step_begin() counts up to it */
    return TE_OK;
}
te_phase te_current_phase(void) { return eng.phase; }
void te_phase_restore(te_phase p) { eng.phase = p; }
int te_next_exec_index(void) { return eng.exec_index++; }
int te_exec_index(void) { return eng.exec_index; }
void te_set_exec_index(int i) { eng.exec_index = i; }
bool te_in_step(void) { return eng.in_step; }

void te_set_phase(te_phase p)
{
    if (p == eng.phase)
        return;
    eng.phase = p;
    if (te_prof_on && !te_tracing)
        te_prof_phase(p);
    if (te_hook_count && !te_tracing)
        te_hooks_phase(te_step(), p);
}

void te_set_training(bool training) { eng.training = training; }
bool te_training(void) { return eng.training; }

void te_scope_push(const char *name)
{
    size_t len = strlen(eng.scope);
    if (eng.scope_depth == MAX_SCOPE_DEPTH)
        abort(); /* unbalanced push/pop in the program: a bug, not input */
    eng.scope_len[eng.scope_depth++] = len;
    snprintf(eng.scope + len, sizeof eng.scope - len, "%s%s", len ? "/" : "", name);
}

void te_scope_pop(void)
{
    if (eng.scope_depth == 0)
        abort();
    eng.scope[eng.scope_len[--eng.scope_depth]] = '\0';
}

/* ---- the tape ------------------------------------------------------------ */

void te_tape_track(te_tensor *t)
{
    if (eng.n_tensors == eng.cap_tensors) {
        int cap = eng.cap_tensors ? 2 * eng.cap_tensors : 256;
        te_tensor **p = realloc(eng.tensors, (size_t)cap * sizeof *p);
        if (!p)
            abort(); /* cannot track: freeing would leak or double free later */
        eng.tensors = p;
        eng.cap_tensors = cap;
    }
    eng.tensors[eng.n_tensors++] = t;
}

void te_tape_reset(void)
{
    if (te_tracing) { /* it would free the step's inputs under the tracer */
        te_trace_misuse("te_tape_reset() was called inside the step function");
        return;
    }
    for (int i = 0; i < eng.n_tensors; i++) {
        te_tensor *t = eng.tensors[i];
        te_mem_free_on(t->device, te_data(t), t->nbytes);
        free(t);
    }
    eng.n_tensors = 0;
    eng.n_nodes = 0;
    eng.name_gen++;
    eng.next_name[0] = '\0';
}

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

void te_name_next(const char *name)
{
    snprintf(eng.next_name, sizeof eng.next_name, "%s", name ? name : "");
}

/* Scoped name (own, from te_name_next, or the op's default), with "_K"
 * appended for the K-th repeat in a step; eng.last_name is the slot it
 * counted in. */
static void name_op(te_op op, const char *own, char name[TE_NAME_MAX])
{
    char base[TE_NAME_MAX];
    snprintf(base, sizeof base, "%.100s%s%s", eng.scope, eng.scope[0] ? "/" : "",
             own[0] ? own : te_op_default_name(op));
    uint32_t h = hash_name(base);
    int count = 0;
    eng.last_name = NULL;
    for (uint32_t probe = 0; probe < NAME_SLOTS; probe++) {
        name_slot *s = &eng.names[(h + probe) % NAME_SLOTS];
        if (s->gen != eng.name_gen) {
            s->gen = eng.name_gen;
            s->count = 1;
            snprintf(s->key, sizeof s->key, "%s", base);
            eng.last_name = s;
            break;
        }
        if (strcmp(s->key, base) == 0) {
            count = s->count++;
            eng.last_name = s;
            break;
        }
    }
    if (count)
        snprintf(name, TE_NAME_MAX, "%.100s_%d", base, count);
    else
        snprintf(name, TE_NAME_MAX, "%s", base);
}

static te_node *new_node(void)
{
    if (eng.n_nodes == eng.cap_nodes) {
        int cap = eng.cap_nodes ? 2 * eng.cap_nodes : 128;
        te_node **p = realloc(eng.nodes, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        for (int i = eng.cap_nodes; i < cap; i++)
            p[i] = NULL;
        eng.nodes = p;
        eng.cap_nodes = cap;
    }
    te_node **slot = &eng.nodes[eng.n_nodes];
    if (!*slot && !(*slot = malloc(sizeof **slot)))
        return NULL;
    eng.n_nodes++;
    memset(*slot, 0, sizeof **slot);
    return *slot;
}

/* "float input (f32, f16, bf16)", "f32", "i32 indices": what a dtype mask takes. */
static const char *dtypes_text(unsigned dtypes)
{
    if (dtypes == TE_DT_FLOAT)
        return "float input (f32, f16, bf16)";
    if (dtypes == 1u << TE_I32)
        return "i32 indices";
    return te_dtype_name((te_dtype)__builtin_ctz(dtypes));
}

/* Autocast (amp.c): each float input of op that the AMP level wants in
 * another dtype is replaced in args by the output of a Cast op named
 * "NAME/cast_in<i>" (NAME: the op's own name), made before the op, so that
 * the tape runs it first and its backward after the op's. A tensor in two
 * slots is cast once. The casts are ordinary ops that ran: should the op
 * then fail its checks, they stay on the tape. False when a cast failed. */
static bool autocast(te_op op, te_loc loc, const char *name, te_tensor *const *in, te_tensor **args)
{
    const te_op_info *info = &te_op_table[op];
    name_slot *mine = eng.last_name;
    bool ok = true, any_low = false;
    for (int i = 0; i < info->n_in; i++)
        any_low |= args[i] && args[i]->dtype == te_amp_dtype() && te_amp_dtype() != TE_F32;
    for (int i = 0; ok && i < info->n_in; i++) {
        te_tensor *x = args[i];
        if (!x || (info->in[i].dtypes & TE_DT_FLOAT) != TE_DT_FLOAT)
            continue; /* absent, or a slot of one dtype (f32 masks and statistics, i32 indices) */
        const te_dtype want = te_amp_input_dtype(op, x->dtype, any_low);
        if (want == x->dtype)
            continue;
        int j = 0;
        while (j < i && in[j] != x)
            j++;
        if (j < i) {
            args[i] = args[j];
            continue;
        }
        /* the cast's name is NAME/cast_in<i> whatever the scope: NAME has it */
        char cast_name[TE_NAME_MAX], scope0 = eng.scope[0];
        snprintf(cast_name, sizeof cast_name, "%.110s/cast_in%d", name, i);
        eng.scope[0] = '\0';
        te_name_next(cast_name);
        args[i] = te_cast_at(loc, x, want);
        eng.scope[0] = scope0;
        ok = args[i] != NULL;
    }
    eng.last_name = mine; /* dropping the op gives back its name, not a cast's */
    return ok;
}

/* The device an op on these inputs runs on: theirs (the current
 * backend's when none is given); TE_DEV_COUNT, with the error set, when
 * two inputs are on different devices. */
static te_device node_device(const te_op_info *info, const char *name, te_loc loc, te_tensor *const *in)
{
    int first = -1;
    for (int i = 0; i < info->n_in; i++) {
        if (!in[i])
            continue;
        if (first < 0) {
            first = i;
        } else if (in[i]->device != in[first]->device) {
            const te_tensor *a = in[first], *b = in[i];
            te_set_error(TE_ERR_DEVICE,
                         "%s (%s) at %s:%d: expected all inputs on one device, but %s (%s) is on %s and %s (%s) on %s; "
                         "move one with te_tensor_to",
                         name, info->type, loc.file, loc.line, info->in[first].name,
                         a->name[0] ? a->name : "unnamed", te_device_name(a->device), info->in[i].name,
                         b->name[0] ? b->name : "unnamed", te_device_name(b->device));
            return TE_DEV_COUNT;
        }
    }
    return first < 0 ? te_backend_current()->device : in[first]->device;
}

te_node *te_node_begin(te_op op, te_loc loc, te_tensor *const *in)
{
    const te_op_info *info = &te_op_table[op];
    /* te_name_next names this op whether or not it is made. */
    char own[TE_NAME_MAX];
    memcpy(own, eng.next_name, sizeof own);
    eng.next_name[0] = '\0';
    if (te_rec_unwinding) {
        te_rewound(info->type);
        return NULL;
    }
    for (int i = 0; i < info->n_in; i++) {
        if (in[i] || info->in[i].optional)
            continue;
        /* An earlier op failed and already said why; keep its message. */
        if (te_error_code() == TE_OK)
            te_set_error(TE_ERR_INPUT, "%s (%s) at %s:%d: input %d (%s) is NULL", info->name,
                         info->type, loc.file, loc.line, i, info->in[i].name);
        return NULL;
    }
    if (!eng.initialized)
        te_init(NULL);
    /* A forward op after a backward (next micro-batch, evaluation) starts a
     * forward phase again. */
    te_set_phase(TE_PHASE_FORWARD);
    char name[TE_NAME_MAX];
    name_op(op, own, name);
    te_tensor *args[TE_MAX_IN];
    bool dtypes_ok = true;
    for (int i = 0; i < info->n_in; i++) {
        args[i] = in[i];
        dtypes_ok &= !in[i] || (info->in[i].dtypes & 1u << in[i]->dtype) != 0;
    }
    /* A wrong dtype is reported as given, not after a cast. */
    if (dtypes_ok && te_amp_level_get() != TE_AMP_O0 && !autocast(op, loc, name, in, args)) {
        if (eng.last_name)
            eng.last_name->count--;
        return NULL;
    }
    const te_device dev = node_device(info, name, loc, args);
    if (dev == TE_DEV_COUNT) {
        if (eng.last_name)
            eng.last_name->count--;
        return NULL;
    }
    te_node *n = new_node();
    if (!n) {
        if (eng.last_name)
            eng.last_name->count--;
        te_set_error(TE_ERR_NOMEM, "%s at %s:%d: out of memory", info->type, loc.file, loc.line);
        return NULL;
    }
    n->op = op;
    n->id = eng.n_nodes - 1;
    n->loc = loc;
    n->device = dev;
    n->n_in = info->n_in;
    for (int i = 0; i < info->n_in; i++)
        n->in[i] = args[i];
    memcpy(n->name, name, sizeof n->name);
    snprintf(n->grad_name, sizeof n->grad_name, "grad/%.122s", n->name);
    for (int i = 0; i < info->n_in; i++) {
        const te_tensor *x = in[i];
        if (!x || info->in[i].dtypes & 1u << x->dtype)
            continue;
        char sx[96];
        te_node_fail(n, TE_ERR_DTYPE, "%s %s is %s: %s needed", info->in[i].name,
                     te_shape_str(x->ndim, x->shape, sx, sizeof sx), te_dtype_name(x->dtype),
                     dtypes_text(info->in[i].dtypes));
        return NULL;
    }
    return n;
}

/* Drops the newest node, n, and gives its name back, so that the tape holds
 * only ops that ran and the next op gets the name this one had. */
static void drop_node(te_node *n)
{
    if (eng.n_nodes > 0 && eng.nodes[eng.n_nodes - 1] == n) {
        eng.n_nodes--;
        if (eng.last_name)
            eng.last_name->count--;
        eng.last_name = NULL;
    }
}

/* "NAME (Type) at FILE:LINE: message" as the error of the moment. */
static void node_error(const te_node *n, te_status code, const char *fmt, va_list ap)
{
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    te_set_error(code, "%s (%s) at %s:%d: %s", n->name, te_op_type_name(n->op), n->loc.file,
                 n->loc.line, msg);
}

te_tensor *te_node_fail(te_node *n, te_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    node_error(n, code, fmt, ap);
    va_end(ap);
    te_op_failed(n, false, code);
    drop_node(n);
    return NULL;
}

te_dtype te_result_dtype(int n, te_tensor *const *in)
{
    te_dtype dt = TE_DTYPE_COUNT;
    for (int i = 0; i < n; i++) {
        if (!in[i] || !te_dtype_is_float(in[i]->dtype))
            continue;
        if (in[i]->dtype == TE_F32 || dt == TE_DTYPE_COUNT)
            dt = in[i]->dtype;
        else if (dt != in[i]->dtype && dt != TE_F32)
            dt = TE_F32; /* f16 with bf16: neither holds the other */
    }
    return dt == TE_DTYPE_COUNT ? TE_F32 : dt;
}

bool te_is_float(const te_tensor *t) { return te_dtype_is_float(t->dtype); }

/* While tracing, op results are abstract: a shape and no data. */
static unsigned result_flags(void) { return te_tracing ? TE_TENSOR_ABSTRACT : 0; }

/* Tape tensors made so far: a tracer rolls back to this mark. */
int te_tape_mark(void) { return eng.n_tensors; }
int te_tape_node_mark(void) { return eng.n_nodes; }

/* The names counted so far this step (name_op's "_K"), for a step that
 * runs again from a mark: nothing to copy when no op ran before it. */
struct te_names_saved {
    uint32_t gen;
    name_slot *slots; /* NULL: none counted then */
};

te_names_saved *te_tape_names_save(void)
{
    te_names_saved *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->gen = eng.name_gen;
    if (eng.n_nodes > 0) {
        n->slots = malloc(NAME_SLOTS * sizeof *n->slots);
        if (!n->slots) {
            free(n);
            return NULL;
        }
        memcpy(n->slots, eng.names, NAME_SLOTS * sizeof *n->slots);
    }
    return n;
}

void te_tape_names_free(te_names_saved *n)
{
    if (n)
        free(n->slots);
    free(n);
}

void te_tape_names_restore(te_names_saved *n)
{
    if (n->slots)
        memcpy(eng.names, n->slots, NAME_SLOTS * sizeof *n->slots);
    else if (eng.name_gen == n->gen)
        eng.name_gen++; /* every count of this step stale: as at its start */
    te_tape_names_free(n);
}

void te_tape_rollback(int tensors, int nodes)
{
    for (int i = tensors; i < eng.n_tensors; i++) {
        te_tensor *t = eng.tensors[i];
        te_mem_free_on(t->device, te_data(t), t->nbytes);
        free(t);
    }
    eng.n_tensors = tensors;
    eng.n_nodes = nodes;
}

te_tensor *te_node_output(te_node *n, te_dtype dt, int ndim, const int64_t *shape)
{
    te_tensor *t = te_tensor_alloc_on(n->device, dt, ndim, shape, result_flags());
    if (!t)
        return NULL;
    int k = n->n_out++;
    n->out[k] = t;
    t->node = n;
    t->slot = k;
    snprintf(t->name, sizeof t->name, "%.118s:out%d", n->name, k);
    if (te_dtype_is_float(dt))
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] && n->in[i]->requires_grad)
                t->requires_grad = true;
    return t;
}

te_tensor *te_node_save(te_node *n, int slot, te_dtype dt, int ndim, const int64_t *shape)
{
    te_tensor *t = te_tensor_alloc_on(n->device, dt, ndim, shape, result_flags());
    n->saved[slot] = t;
    if (t)
        snprintf(t->name, sizeof t->name, "%.116s:saved%d", n->name, slot);
    if (slot >= n->n_saved)
        n->n_saved = slot + 1;
    return t;
}

bool te_needs_grad(const te_tensor *x) { return x && x->requires_grad; }

float *te_grad_buf(te_tensor *x, int *acc)
{
    if (!x->grad) {
        unsigned flags = x->flags & TE_TENSOR_PERSISTENT ? TE_TENSOR_PERSISTENT : result_flags();
        x->grad = te_tensor_alloc_on(x->device, x->dtype, x->ndim, x->shape, flags);
        if (!x->grad)
            abort(); /* out of memory mid-backward: nothing sane to return */
        snprintf(x->grad->name, sizeof x->grad->name, "grad:%.122s",
                 strncmp(x->name, "param:", 6) == 0 ? x->name + 6 : x->name);
        x->grad_valid = false;
    }
    *acc = x->grad_valid;
    x->grad_valid = true;
    return te_data(x->grad);
}

/* ---- dispatch -------------------------------------------------------------
 * Kernels compute in f32. A node touching f16/bf16 tensors runs on a shadow
 * node whose half tensors are replaced by f32 copies; results are rounded
 * back into the real tensors afterwards. The backend's native low-precision
 * kernel, where it has one and takes the node, runs instead (lowp_native.c).
 */

static bool is_half(const te_tensor *t) { return t && (t->dtype == TE_F16 || t->dtype == TE_BF16); }

static bool needs_shadow(const te_node *n)
{
    if (te_op_table[n->op].sees == TE_SEES_NATIVE)
        return false; /* its kernels handle every dtype themselves */
    for (int i = 0; i < n->n_in; i++)
        if (is_half(n->in[i]))
            return true;
    for (int k = 0; k < n->n_out; k++)
        if (is_half(n->out[k]))
            return true;
    return false;
}

/* An f32 copy of the half tensor t on its device, widened by its backend. */
static te_tensor *f32_copy(const te_tensor *t, bool with_data)
{
    te_tensor *c = te_tensor_alloc_on(t->device, TE_F32, t->ndim, t->shape, TE_TENSOR_PERSISTENT);
    if (!c)
        abort();
    if (with_data)
        te_backend_for(t)->widen(te_data(t), te_data(c), t->dtype, t->numel);
    c->requires_grad = t->requires_grad;
    memcpy(c->name, t->name, sizeof c->name);
    return c;
}

/* The f32 shadow src rounded into the half tensor dst, what that did in *st. */
static void round_into(te_tensor *dst, const te_tensor *src, te_round_stats *st)
{
    te_round_stats_clear(st, dst->dtype);
    te_backend_for(dst)->round(te_data(src), te_data(dst), dst->dtype, dst->numel, st);
}

static te_tensor *shadow_of(te_tensor *t, bool with_grad)
{
    if (!is_half(t))
        return t;
    te_tensor *c = f32_copy(t, true);
    if (with_grad && t->grad && t->grad_valid) {
        c->grad = f32_copy(t->grad, true);
        c->grad_valid = true;
    }
    return c;
}

/* The first slot holding the same tensor as slot i (x*x uses x twice). */
static int first_slot(const te_node *n, int i)
{
    for (int j = 0; j < i; j++)
        if (n->in[j] == n->in[i])
            return j;
    return i;
}

/* n's kernel on its device's backend; a backend without one fails clearly. */
static te_status run_kernel(te_node *n, bool backward)
{
    const te_backend *be = te_backends[n->device];
    te_kernel_fn fn = backward ? be->backward[n->op] : be->forward[n->op];
    if (!fn)
        return te_kernel_fail(n, TE_ERR_DEVICE, "%s has no %s kernel",
                              backward ? te_op_grad_type_name(n->op) : te_op_type_name(n->op), be->name);
    return fn(n);
}

static te_status run_shadowed(te_node *n, bool backward)
{
    const te_backend *be = te_backends[n->device];
    if (!be->widen || !be->round)
        return te_kernel_fail(n, TE_ERR_DEVICE, "f16/bf16 tensors need the %s backend's %s, which it does not have",
                              be->name, !be->widen ? "widen" : "round");
    te_node s = *n;
    /* One shadow per distinct tensor, so gradients from all its slots meet. */
    for (int i = 0; i < n->n_in; i++) {
        int j = first_slot(n, i);
        s.in[i] = j < i ? s.in[j] : shadow_of(n->in[i], backward);
    }
    for (int k = 0; k < n->n_out; k++) {
        s.out[k] = is_half(n->out[k]) ? f32_copy(n->out[k], backward) : n->out[k];
        if (backward && s.out[k] != n->out[k] && n->out[k]->grad_valid) {
            s.out[k]->grad = f32_copy(n->out[k]->grad, true);
            s.out[k]->grad_valid = true;
        }
    }
    te_status st = run_kernel(&s, backward);
    for (int j = 0; j < TE_MAX_SAVED; j++)
        n->saved[j] = s.saved[j];
    for (int k = 0; k < n->n_out; k++) {
        if (s.out[k] == n->out[k])
            continue;
        if (!backward) {
            round_into(n->out[k], s.out[k], &n->round[k]);
            n->rounded = true;
        }
        te_tensor_free(s.out[k]);
    }
    for (int i = 0; i < n->n_in; i++) {
        if (s.in[i] == n->in[i] || first_slot(n, i) < i)
            continue;
        if (backward && s.in[i]->grad_valid) {
            int acc;
            te_grad_buf(n->in[i], &acc); /* overwrite: the shadow already accumulated */
            round_into(n->in[i]->grad, s.in[i]->grad, &n->round[i]);
            n->rounded = true;
        }
        te_tensor_free(s.in[i]);
    }
    return st;
}

/* Before a run: nothing rounded yet (entries stay TE_F32 unless rounded). */
static void round_clear(te_node *n)
{
    memset(n->round, 0, sizeof n->round);
    n->rounded = false;
}

te_status te_node_dispatch(te_node *n, bool backward)
{
    round_clear(n);
    if (needs_shadow(n)) {
        te_status st = te_lowp_run_native(n, backward);
        return st != TE_LOWP_DECLINED ? st : run_shadowed(n, backward);
    }
    return run_kernel(n, backward);
}

bool te_node_needs_shadow(const te_node *n) { return needs_shadow(n); }

te_status te_kernel_fail(te_node *n, te_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    node_error(n, code, fmt, ap);
    va_end(ap);
    return code;
}

void te_op_failed(const te_node *n, bool backward, te_status code)
{
    if (!te_hook_count || code == TE_ERR_REWOUND || te_rec_unwinding)
        return;
    /* Backward: the forward op's inputs are what its kernel read; no
     * output holds a result. */
    te_op_record rec = {
        .step = te_step(), .phase = backward ? TE_PHASE_BACKWARD : TE_PHASE_FORWARD, .op_id = n->id,
        .exec_index = te_exec_index(), .name = backward ? n->grad_name : n->name,
        .type = backward ? te_op_grad_type_name(n->op) : te_op_type_name(n->op), .loc = n->loc,
        .inputs = backward ? NULL : n->in, .n_inputs = backward ? 0 : n->n_in,
        .reads = backward ? n->in : NULL, .n_reads = backward ? n->n_in : 0, .traits = te_op_traits(n->op),
    };
    te_hooks_op_failed(&rec, code, te_error());
}

void te_node_starting(const te_node *n, bool backward, int exec, const char *kernel)
{
    te_op_record rec = {
        .step = te_step(), .phase = backward ? TE_PHASE_BACKWARD : TE_PHASE_FORWARD, .op_id = n->id,
        .exec_index = exec, .name = backward ? n->grad_name : n->name,
        .type = backward ? te_op_grad_type_name(n->op) : te_op_type_name(n->op), .loc = n->loc,
        .kernel = kernel, .traits = te_op_traits(n->op),
    };
    te_op_begin(&rec);
}

te_tensor *te_node_run(te_node *n)
{
    for (int k = 0; k < te_op_table[n->op].n_out; k++)
        if (!n->out[k])
            return te_node_fail(n, TE_ERR_NOMEM, "cannot allocate output %d", k);
    for (int k = 0; k < TE_MAX_SAVED; k++)
        if (n->saved[k] == NULL && k < n->n_saved)
            return te_node_fail(n, TE_ERR_NOMEM, "cannot allocate saved tensor %d", k);
    if (te_tracing) { /* recorded, run later by the compiled graph */
        te_trace_fwd(n, te_next_exec_index());
        return n->out[0];
    }
    if (te_prof_observed())
        te_node_starting(n, false, te_exec_index(), NULL);
    te_status st = te_node_dispatch(n, false);
    if (st != TE_OK) {
        te_op_failed(n, false, st);
        drop_node(n);
        return NULL;
    }
    if (te_prof_observed()) {
        te_op_record rec = {
            .step = te_step(), .phase = eng.phase, .op_id = n->id,
            .exec_index = te_next_exec_index(), .name = n->name, .type = te_op_type_name(n->op),
            .loc = n->loc, .inputs = n->in, .n_inputs = n->n_in, .outputs = n->out,
            .n_outputs = n->n_out, .inplace = te_node_inplace(n),
            .traits = te_op_traits(n->op), .round = n->rounded ? n->round : NULL,
        };
        te_op_done(&rec);
    } else {
        eng.exec_index++;
    }
    return n->out[0];
}

/* ---- backward ------------------------------------------------------------ */

static int add_read(te_tensor **reads, int n, te_tensor *t)
{
    if (!t)
        return n;
    for (int i = 0; i < n; i++)
        if (reads[i] == t)
            return n;
    reads[n] = t;
    return n + 1;
}

int te_node_bwd_reads(const te_node *n, te_tensor **reads)
{
    unsigned r = te_op_bwd_reads(n->op);
    int c = 0;
    for (int i = 0; i < n->n_in; i++)
        if (r & (1u << i))
            c = add_read(reads, c, n->in[i]);
    for (int k = 0; k < n->n_out; k++)
        if (r & (TE_READS_OUT << k))
            c = add_read(reads, c, n->out[k]);
    if (r & TE_READS_SAVED)
        for (int j = 0; j < n->n_saved; j++)
            c = add_read(reads, c, n->saved[j]);
    return c;
}

static te_status backward_node(te_node *n)
{
    te_tensor *grads_in[TE_MAX_OUT], *grads_out[TE_MAX_IN];
    bool any_out = false, any_in = false;
    for (int k = 0; k < n->n_out; k++) {
        grads_in[k] = n->out[k]->grad_valid ? n->out[k]->grad : NULL;
        any_out |= grads_in[k] != NULL;
    }
    /* Only nodes the gradient reached look at their inputs: an unrelated
     * earlier node may hold a persistent input the caller has freed. */
    if (!any_out)
        return TE_OK;
    for (int i = 0; i < n->n_in; i++)
        any_in |= te_needs_grad(n->in[i]);
    if (!any_in)
        return TE_OK;
    if (te_tracing) {
        /* Make the gradient tensors the kernel would write, so that the
         * ops below see which gradients reach them. */
        int acc;
        for (int i = 0; i < n->n_in; i++)
            if (te_needs_grad(n->in[i]))
                te_grad_buf(n->in[i], &acc);
        te_trace_bwd(n, te_next_exec_index());
    } else {
        if (te_prof_observed())
            te_node_starting(n, true, te_exec_index(), NULL);
        te_status st = te_node_dispatch(n, true);
        if (st != TE_OK) {
            te_op_failed(n, true, st);
            return st;
        }
    }
    for (int i = 0; i < n->n_in; i++)
        grads_out[i] = te_needs_grad(n->in[i]) ? n->in[i]->grad : NULL;
    int exec = te_tracing ? -1 : te_next_exec_index();
    if (!te_tracing && te_prof_observed()) {
        te_tensor *reads[TE_BWD_READS_MAX];
        te_op_record rec = {
            .step = te_step(), .phase = TE_PHASE_BACKWARD, .op_id = n->id, .exec_index = exec,
            .name = n->grad_name, .type = te_op_grad_type_name(n->op), .loc = n->loc,
            .inputs = grads_in, .n_inputs = n->n_out, .outputs = grads_out, .n_outputs = n->n_in,
            .reads = reads, .n_reads = te_node_bwd_reads(n, reads),
            .traits = te_op_traits(n->op), .round = n->rounded ? n->round : NULL,
        };
        te_op_done(&rec);
    }
    /* Every consumer of these outputs ran its backward already (reverse
     * order), so their gradients are spent: give the memory back now. */
    for (int k = 0; k < n->n_out; k++) {
        te_tensor *g = n->out[k]->grad;
        if (g && !(g->flags & TE_TENSOR_PERSISTENT)) {
            te_mem_free_on(g->device, te_data(g), g->nbytes);
            g->data = NULL;
            g->nbytes = 0;
            n->out[k]->grad = NULL;
            n->out[k]->grad_valid = false;
        }
    }
    return TE_OK;
}

/* y's gradient seeded with dy (added to it when acc), in f32 on the host:
 * the same bits as element by element. */
static te_status seed_grad(te_tensor *y, const te_tensor *dy, int acc)
{
    float d1, g1; /* a loss: one value, no allocation */
    const bool one = y->numel <= 1;
    float *d = one ? &d1 : malloc((size_t)y->numel * sizeof *d);
    float *g = one ? &g1 : acc ? malloc((size_t)y->numel * sizeof *g) : NULL;
    if (!d || (acc && !g)) {
        if (!one) {
            free(d);
            free(g);
        }
        te_set_error(TE_ERR_NOMEM, "backward: out of memory seeding the gradient of %s", y->name);
        return TE_ERR_NOMEM;
    }
    te_copy_to_f32(dy, d);
    if (acc) {
        te_copy_to_f32(y->grad, g);
        for (int64_t i = 0; i < y->numel; i++)
            d[i] = g[i] + d[i];
    }
    te_copy_from_f32(y->grad, d);
    if (!one) {
        free(d);
        free(g);
    }
    return TE_OK;
}

te_status te_backward_with(te_tensor *y, const te_tensor *dy)
{
    if (te_rec_unwinding)
        return te_rewound("backward");
    if (!y) {
        if (te_error_code() == TE_OK)
            te_set_error(TE_ERR_INPUT, "backward: the output is NULL");
        return TE_ERR_INPUT;
    }
    if (!y->requires_grad) {
        te_set_error(TE_ERR_STATE, "backward: %s does not depend on any tensor that requires grad",
                     y->name);
        return TE_ERR_STATE;
    }
    if (!te_same_shape(y, dy)) {
        char a[96], b[96];
        te_set_error(TE_ERR_SHAPE, "backward: gradient %s does not match %s %s",
                     te_shape_str(dy->ndim, dy->shape, b, sizeof b), y->name,
                     te_shape_str(y->ndim, y->shape, a, sizeof a));
        return TE_ERR_SHAPE;
    }
    int acc;
    te_grad_buf(y, &acc);
    if (te_tracing) {
        te_trace_seed(y, dy);
    } else if (seed_grad(y, dy, acc) != TE_OK) {
        return te_error_code();
    } else if (te_rec_on) {
        te_record_root(y);
    }
    te_set_phase(TE_PHASE_BACKWARD);
    int last = y->node ? y->node->id : -1;
    if (te_dist_on && te_dist_backward_begin(eng.nodes, last) != TE_OK)
        return te_error_code();
    for (int i = last; i >= 0; i--) {
        te_status st = backward_node(eng.nodes[i]);
        if (st == TE_OK && te_dist_on)
            st = te_dist_node_done(i);
        if (st != TE_OK)
            return st;
        if (te_rec_unwinding) /* a hook rewound at this op */
            return te_rewound("backward");
    }
    return te_dist_on ? te_dist_backward_end() : TE_OK;
}

te_status te_backward(te_tensor *loss)
{
    if (te_rec_unwinding)
        return te_rewound("backward");
    if (!loss) {
        if (te_error_code() == TE_OK)
            te_set_error(TE_ERR_INPUT, "backward: the loss is NULL");
        return TE_ERR_INPUT;
    }
    if (loss->numel != 1) {
        char b[96];
        te_set_error(TE_ERR_SHAPE, "backward: loss %s has shape %s; it must hold one value",
                     loss->name, te_shape_str(loss->ndim, loss->shape, b, sizeof b));
        return TE_ERR_SHAPE;
    }
    float one = 1.0f;
    te_tensor seed = { .dtype = TE_F32, .ndim = loss->ndim, .numel = 1, .nbytes = 4, .data = &one };
    memcpy(seed.shape, loss->shape, sizeof seed.shape);
    return te_backward_with(loss, &seed);
}
