/*
 * dist.c — data parallel: the job, the gradient buckets, collectives as ops.
 *
 * Gradients are reduced in buckets, as PyTorch's DDP does: the registered
 * parameters in reverse order (the order backward finishes them), cut
 * every `bucket_bytes`. At each backward, the lowest tape node that reads
 * a parameter says when its gradient is final (backward runs the nodes in
 * reverse); a bucket's all-reduce starts once every gradient in it is
 * final and the buckets before it have started (every rank must start
 * collectives in the same order), and each later op boundary tests the
 * ones in flight, which lets MPI move them on while backward computes. At
 * the end of the backward each is waited for in order (the hooks'
 * `waiting` called meanwhile), divided by the ranks and written back.
 *
 * Bucket k's op is "allreduce/bucketK" (type AllReduce, phase backward):
 * input 0 the rank's own gradients, flat, in f32; output 0 their mean
 * over the ranks, which every rank holds bit for bit alike.
 *
 * Buckets live in host memory and go to MPI, or, in a build with NCCL
 * (--with-cuda, MPI and NCCL found) and parameters on the GPU, in GPU
 * memory and go to NCCL on the backend's stream (cuda/cuda_nccl.c).
 */
#include "te_internal.h"
#include "graph/graph.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bucket {
    int first, count;    /* ds.params[first .. first + count) */
    bool on_gpu;         /* in GPU memory, reduced by NCCL; else on the host, by MPI */
    int64_t numel;
    te_tensor *in, *out; /* f32 [numel] on the host */
    int ready_node;      /* this backward: the node after which all its gradients are final */
    void *req;           /* in flight; NULL otherwise */
    bool kept_in;        /* this reduction kept its input in `in` (someone observes the ops) */
    te_collective coll;
    char name[32];
} bucket;

static struct {
    int rank, size;
    size_t bucket_bytes;
    bool no_sync;
    int64_t seq;
    te_tensor **params; /* the registered parameters that need a gradient, newest first */
    int n_params;
    int64_t *offset;    /* [n_params] where each starts in its bucket */
    int *first_use;     /* [n_params] this backward: the lowest node reading it; INT_MAX: none */
    bucket *b;
    int nb;
    bool armed;         /* this backward reduces */
    int next;           /* the next bucket to start */
    int n_registered;   /* te_param_count() the buckets were made for */
    bool nccl;          /* NCCL's communicator is made */
} ds = { .size = 1 };

bool te_dist_on;

/* ---- the job ------------------------------------------------------------- */

static size_t bucket_bytes_from(const te_dist_opts *o)
{
    if (o && o->bucket_bytes)
        return o->bucket_bytes;
    const char *env = getenv("TDBG_DP_BUCKET_KB");
    char *end;
    long kb = env && *env ? strtol(env, &end, 10) : 0;
    if (env && *env && (*end || kb <= 0)) {
        fprintf(stderr, "tdbg: TDBG_DP_BUCKET_KB=%s is not a positive number of KiB; using %zu\n", env,
                TE_DIST_BUCKET >> 10);
        kb = 0;
    }
    return kb > 0 ? (size_t)kb << 10 : TE_DIST_BUCKET;
}

/* Makes NCCL's communicator (collective) where the build has NCCL;
 * without it, GPU gradients go through the host to MPI. */
static te_status nccl_start(void)
{
#ifdef TE_HAVE_NCCL
    char why[256];
    if (!ds.nccl && !te_nccl_init(ds.rank, ds.size, why, sizeof why)) {
        te_set_error(TE_ERR_DEVICE, "data parallel: NCCL: %s", why);
        return TE_ERR_DEVICE;
    }
    ds.nccl = true;
#endif
    return TE_OK;
}

te_status te_dist_init(const te_dist_opts *o)
{
    if (te_dist_on) {
        te_set_error(TE_ERR_STATE, "te_dist_init: this process is in a job already (rank %d of %d)", ds.rank,
                     ds.size);
        return TE_ERR_STATE;
    }
    char why[256];
    if (!dist_tx_init(&ds.rank, &ds.size, why, sizeof why)) {
        te_set_error(TE_ERR_DEVICE, "data parallel: %s", why);
        return TE_ERR_DEVICE;
    }
    ds.bucket_bytes = bucket_bytes_from(o);
    te_dist_on = true;
    ds.seq = 0;
    /* The GPU backend in use: its gradients will be reduced by NCCL. */
    return te_backend_device() == TE_DEV_CUDA ? nccl_start() : TE_OK;
}

bool te_dist_active(void) { return te_dist_on; }
int te_dist_rank(void) { return te_dist_on ? ds.rank : 0; }
int te_dist_size(void) { return te_dist_on ? ds.size : 1; }
const char *te_dist_transport(void) { return !te_dist_on ? "none" : ds.nccl ? "mpi+nccl" : "mpi"; }
int64_t te_dist_seq(void) { return ds.seq; }
void te_dist_no_sync(bool on) { ds.no_sync = on; }

void te_dist_abort(int code)
{
    if (te_dist_on)
        dist_tx_abort(code);
    exit(code);
}

static void buckets_free(void)
{
    for (int k = 0; k < ds.nb; k++) {
        if (ds.b[k].in)
            te_tensor_free(ds.b[k].in);
        if (ds.b[k].out)
            te_tensor_free(ds.b[k].out);
    }
    free(ds.b);
    free(ds.params);
    free(ds.offset);
    free(ds.first_use);
    ds.b = NULL;
    ds.params = NULL;
    ds.offset = NULL;
    ds.first_use = NULL;
    ds.nb = ds.n_params = ds.n_registered = 0;
}

void te_dist_shutdown(void)
{
    buckets_free();
#ifdef TE_HAVE_NCCL
    if (ds.nccl)
        te_nccl_finalize();
#endif
    ds.nccl = false;
    if (te_dist_on)
        dist_tx_finalize();
    te_dist_on = false;
    ds.rank = 0;
    ds.size = 1;
    ds.no_sync = ds.armed = false;
}

/* ---- collectives as ops ---------------------------------------------------- */

static te_op_record coll_record(const char *name, const char *type, te_phase phase, const te_collective *c)
{
    return (te_op_record){ .step = te_step(), .phase = phase, .op_id = -1, .exec_index = te_exec_index(),
                           .name = name, .type = type, .loc = { __FILE__, __LINE__ }, .coll = c };
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A request's test and release: MPI's, or NCCL's for a bucket on the GPU. */
static int req_test(void *req, bool gpu)
{
#ifdef TE_HAVE_NCCL
    if (gpu)
        return te_nccl_test(req);
#endif
    (void)gpu;
    return dist_tx_test(req);
}

static void req_release(void *req, bool gpu)
{
#ifdef TE_HAVE_NCCL
    if (gpu) {
        te_nccl_release(req);
        return;
    }
#endif
    (void)gpu;
    dist_tx_release(req);
}

/* Waits for req, calling the hooks' `waiting` about every millisecond.
 * TE_ERR_IO when the transport fails it. */
static te_status wait_for(void *req, bool gpu, const te_op_record *rec)
{
    uint64_t last = now_ns();
    for (;;) {
        const int done = req_test(req, gpu);
        if (done > 0) {
            req_release(req, gpu);
            return TE_OK;
        }
        if (done < 0) {
            req_release(req, gpu);
            te_set_error(TE_ERR_IO, "%s: the collective failed", rec->name);
            return TE_ERR_IO;
        }
        const uint64_t t = now_ns();
        if (t - last >= 1000000u) {
            last = t;
            if (te_listen_waiting()) /* an attach: this rank may wait here for one that paused at its step's start */
                te_listen_hand_off();
            if (te_in_step())
                te_hooks_waiting(rec);
        }
    }
}

static te_collective coll_new(const char *kind, int root, int bucket_index, size_t bytes)
{
    return (te_collective){ .kind = kind, .seq = ds.seq++, .rank = ds.rank, .ranks = ds.size, .root = root,
                            .bucket = bucket_index, .bytes = bytes };
}

/* A collective that succeeded takes its place in the step's execution
 * order, and with report the hooks see it with its tensors. */
static void coll_done(te_op_record *rec, bool report, te_tensor **in, int n_in, te_tensor **out, int n_out)
{
    if (!te_in_step())
        return;
    rec->exec_index = te_next_exec_index();
    if (!report)
        return;
    rec->inputs = in;
    rec->n_inputs = n_in;
    rec->outputs = out;
    rec->n_outputs = n_out;
    te_op_done(rec);
}

/* Runs a broadcast of n tensors from rank 0 as the op `name`; reported to
 * the hooks within a step only (the first one, before training, is not). */
static te_status broadcast(const char *name, te_tensor **ts, int n)
{
    if (!te_dist_on || n == 0)
        return TE_OK;
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += ts[i]->nbytes;
    char *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        te_set_error(TE_ERR_NOMEM, "%s: out of memory for %zu bytes", name, bytes);
        return TE_ERR_NOMEM;
    }
    size_t at = 0;
    if (ds.rank == 0)
        for (int i = 0; i < n; at += ts[i]->nbytes, i++)
            te_backend_for(ts[i])->to_host(buf + at, te_data(ts[i]), ts[i]->nbytes);
    const te_collective c = coll_new("broadcast", 0, -1, bytes);
    const bool report = te_in_step() && te_prof_observed();
    te_op_record rec = coll_record(name, "Broadcast", te_current_phase(), &c);
    if (report)
        te_op_begin(&rec);
    void *req = dist_tx_bcast(buf, bytes, 0, name);
    te_status st = req ? wait_for(req, false, &rec) : te_error_code();
    at = 0;
    if (st == TE_OK && ds.rank != 0)
        for (int i = 0; i < n; at += ts[i]->nbytes, i++)
            te_backend_for(ts[i])->from_host(te_data(ts[i]), buf + at, ts[i]->nbytes);
    free(buf);
    if (st == TE_OK)
        coll_done(&rec, report, NULL, 0, ts, n);
    return st;
}

te_status te_dist_broadcast_params(void)
{
    const int np = te_param_count(), nbuf = te_buffer_count();
    te_tensor **ts = malloc((size_t)(np + nbuf + 1) * sizeof *ts);
    if (!ts) {
        te_set_error(TE_ERR_NOMEM, "broadcast/params: out of memory");
        return TE_ERR_NOMEM;
    }
    memcpy(ts, te_params(), (size_t)np * sizeof *ts);
    if (nbuf)
        memcpy(ts + np, te_buffers(), (size_t)nbuf * sizeof *ts);
    te_status st = broadcast("broadcast/params", ts, np + nbuf);
    free(ts);
    return st;
}

te_status te_dist_broadcast_buffers(void)
{
    return broadcast("broadcast/buffers", te_buffers(), te_buffer_count());
}

te_status te_dist_allreduce_host(const char *name, double *v, int n)
{
    if (!te_dist_on)
        return TE_OK;
    char op[TE_NAME_MAX];
    snprintf(op, sizeof op, "allreduce/%.100s", name);
    const te_collective c = coll_new("allreduce", -1, -1, (size_t)n * sizeof *v);
    const bool report = te_in_step() && te_prof_observed();
    te_op_record rec = coll_record(op, "AllReduce", te_current_phase(), &c);
    if (report)
        te_op_begin(&rec);
    void *req = dist_tx_allreduce_f64(v, n, op);
    te_status st = req ? wait_for(req, false, &rec) : te_error_code();
    if (st == TE_OK)
        coll_done(&rec, report, NULL, 0, NULL, 0);
    return st;
}

/* ---- gradient buckets ------------------------------------------------------ */

/* Cuts the parameters that need a gradient, newest first, into buckets of
 * about ds.bucket_bytes of f32. */
static te_status buckets_make(void)
{
    buckets_free();
    const int n = te_param_count();
    te_tensor **all = te_params();
    ds.params = malloc((size_t)(n ? n : 1) * sizeof *ds.params);
    ds.offset = malloc((size_t)(n ? n : 1) * sizeof *ds.offset);
    ds.first_use = malloc((size_t)(n ? n : 1) * sizeof *ds.first_use);
    ds.b = calloc((size_t)(n ? n : 1), sizeof *ds.b);
    if (!ds.params || !ds.offset || !ds.first_use || !ds.b) {
        buckets_free();
        te_set_error(TE_ERR_NOMEM, "data parallel: out of memory for the gradient buckets");
        return TE_ERR_NOMEM;
    }
    for (int i = n - 1; i >= 0; i--)
        if (all[i]->requires_grad)
            ds.params[ds.n_params++] = all[i];
    for (int i = 0; i < ds.n_params; i++) {
        bucket *b = &ds.b[ds.nb];
        if (b->count > 0 && (size_t)(b->numel + ds.params[i]->numel) * sizeof(float) > ds.bucket_bytes)
            b = &ds.b[++ds.nb];
        if (b->count == 0)
            b->first = i;
        ds.offset[i] = b->numel;
        b->numel += ds.params[i]->numel;
        b->count++;
    }
    if (ds.n_params)
        ds.nb++;
    bool gpu = false;
    for (int i = 0; i < ds.n_params; i++)
        gpu |= ds.params[i]->device == TE_DEV_CUDA;
    if (gpu && nccl_start() != TE_OK) {
        buckets_free();
        return te_error_code();
    }
    for (int k = 0; k < ds.nb; k++) {
        bucket *b = &ds.b[k];
        snprintf(b->name, sizeof b->name, "allreduce/bucket%d", k);
        b->on_gpu = ds.nccl;
        for (int j = 0; j < b->count; j++)
            b->on_gpu &= ds.params[b->first + j]->device == TE_DEV_CUDA;
        const te_device d = b->on_gpu ? TE_DEV_CUDA : TE_DEV_CPU;
        b->in = te_tensor_alloc_on(d, TE_F32, 1, &b->numel, TE_TENSOR_PERSISTENT);
        b->out = b->in ? te_tensor_alloc_on(d, TE_F32, 1, &b->numel, TE_TENSOR_PERSISTENT) : NULL;
        if (!b->out) {
            buckets_free();
            return te_error_code();
        }
        snprintf(b->in->name, sizeof b->in->name, "dp:bucket%d.local", k);
        snprintf(b->out->name, sizeof b->out->name, "dp:bucket%d.mean", k);
    }
    ds.n_registered = n;
    return TE_OK;
}

static int param_index(const te_tensor *p)
{
    for (int i = 0; i < ds.n_params; i++)
        if (ds.params[i] == p)
            return i;
    return -1;
}

/* ---- buckets in GPU memory (NCCL): the same steps through the backend ---- */
#ifdef TE_HAVE_NCCL

/* Where parameter i's gradient sits in bucket b's buffer t (device memory). */
static float *slice(const te_tensor *t, int i) { return (float *)te_data(t) + ds.offset[i]; }

static te_status bucket_start_gpu(bucket *b, int k)
{
    const te_backend *be = te_backend_for(b->out);
    for (int j = 0; j < b->count; j++) {
        const int i = b->first + j;
        const te_tensor *p = ds.params[i];
        if (!p->grad || !p->grad_valid)
            be->zero(slice(b->out, i), (size_t)p->numel * sizeof(float));
        else if (p->grad->dtype == TE_F32)
            be->copy(slice(b->out, i), te_data(p->grad), p->grad->nbytes);
        else
            be->widen(te_data(p->grad), slice(b->out, i), p->grad->dtype, p->numel);
    }
    b->kept_in = te_prof_observed();
    if (b->kept_in)
        be->copy(te_data(b->in), te_data(b->out), b->out->nbytes);
    b->coll = coll_new("allreduce", -1, k, b->out->nbytes);
    b->req = te_nccl_allreduce_f32(te_data(b->out), b->numel, b->name);
    return b->req ? TE_OK : te_error_code();
}

/* The sums in b become each gradient's mean: scaled on the device, then
 * rounded for an f16/bf16 gradient; with report, b's output is left
 * holding what the gradients hold. */
static void bucket_mean_gpu(bucket *b, bool report)
{
    const te_backend *be = te_backend_for(b->out);
    const float inv = 1.0f / (float)ds.size;
    for (int j = 0; j < b->count; j++) {
        const int i = b->first + j;
        te_tensor *p = ds.params[i];
        float *s = slice(b->out, i);
        const bool has = p->grad && p->grad_valid;
        if (has && p->grad->dtype == TE_F32) {
            be->unscale(&(te_unscale_args){ .src = s, .dt = TE_F32, .dst = te_data(p->grad), .n = p->numel }, 1, inv);
            if (report)
                be->copy(s, te_data(p->grad), p->grad->nbytes);
            continue;
        }
        be->unscale(&(te_unscale_args){ .src = s, .dt = TE_F32, .dst = s, .n = p->numel }, 1, inv);
        if (has) {
            be->round(s, te_data(p->grad), p->grad->dtype, p->numel, NULL);
            if (report)
                be->widen(te_data(p->grad), s, p->grad->dtype, p->numel);
        }
    }
}
#endif

/* Starts bucket k's all-reduce, in place in `out`: the gradients, flat, in
 * f32 (zeros for a parameter the gradient did not reach). Their copy in
 * `in`, the op's input, is made only for someone who looks at the ops. */
static te_status bucket_start(int k)
{
    bucket *b = &ds.b[k];
#ifdef TE_HAVE_NCCL
    if (b->on_gpu)
        return bucket_start_gpu(b, k);
#endif
    float *out = te_data(b->out);
    for (int j = 0; j < b->count; j++) {
        const te_tensor *p = ds.params[b->first + j];
        float *dst = out + ds.offset[b->first + j];
        if (p->grad && p->grad_valid)
            te_copy_to_f32(p->grad, dst);
        else
            memset(dst, 0, (size_t)p->numel * sizeof *dst);
    }
    b->kept_in = te_prof_observed();
    if (b->kept_in)
        memcpy(te_data(b->in), out, (size_t)b->numel * sizeof *out);
    b->coll = coll_new("allreduce", -1, k, (size_t)b->numel * sizeof(float));
    b->req = dist_tx_allreduce_f32(NULL, out, b->numel, b->name);
    return b->req ? TE_OK : te_error_code();
}

/* Gradient p gets the mean sum / ranks: in one pass for an f32 gradient
 * in host memory, else through te_copy_from_f32 (sum scaled in place). */
static void mean_into(te_tensor *p, float *sum, float inv)
{
    if (p->grad->dtype == TE_F32 && te_backend_is_host(te_backend_for(p->grad))) {
        float *g = te_data(p->grad);
        for (int64_t i = 0; i < p->numel; i++)
            g[i] = sum[i] * inv;
        return;
    }
    for (int64_t i = 0; i < p->numel; i++)
        sum[i] *= inv;
    te_copy_from_f32(p->grad, sum);
}

/* Waits for bucket k, reports it, and gives each gradient its mean. */
static te_status bucket_finish(int k)
{
    bucket *b = &ds.b[k];
    const bool report = te_prof_observed();
    te_op_record rec = coll_record(b->name, "AllReduce", TE_PHASE_BACKWARD, &b->coll);
    if (report)
        te_op_begin(&rec);
    te_status st = wait_for(b->req, b->on_gpu, &rec);
    b->req = NULL;
    if (st != TE_OK)
        return st;
    float *out = te_data(b->out);
    const float inv = 1.0f / (float)ds.size;
#ifdef TE_HAVE_NCCL
    if (b->on_gpu)
        bucket_mean_gpu(b, report);
#endif
    for (int j = 0; j < b->count && !b->on_gpu; j++) {
        te_tensor *p = ds.params[b->first + j];
        if (p->grad && p->grad_valid)
            mean_into(p, out + ds.offset[b->first + j], inv);
    }
    if (report && !b->on_gpu) { /* the op's output is the mean: what the gradients hold */
        for (int j = 0; j < b->count; j++) {
            te_tensor *p = ds.params[b->first + j];
            float *o = out + ds.offset[b->first + j];
            if (p->grad && p->grad_valid)
                te_copy_to_f32(p->grad, o);
            else
                for (int64_t i = 0; i < p->numel; i++)
                    o[i] *= inv;
        }
    }
    te_tensor *ins[1] = { b->in }, *outs[1] = { b->out };
    coll_done(&rec, report, ins, b->kept_in ? 1 : 0, outs, 1);
    return TE_OK;
}

te_status te_dist_backward_begin(te_node *const *nodes, int last)
{
    ds.armed = false;
    if (ds.no_sync)
        return TE_OK;
    if (te_tracing) {
        te_set_error(TE_ERR_STATE, "data parallel runs in eager mode: graph mode's compiled step has no "
                                   "collectives (run without --mode graph)");
        return TE_ERR_STATE;
    }
    if (ds.n_registered != te_param_count() && buckets_make() != TE_OK)
        return te_error_code();
    for (int i = 0; i < ds.n_params; i++)
        ds.first_use[i] = INT_MAX;
    for (int i = 0; i <= last; i++)
        for (int j = 0; j < nodes[i]->n_in; j++) {
            const te_tensor *t = nodes[i]->in[j];
            if (!t || !(t->flags & TE_TENSOR_PARAM))
                continue;
            const int k = param_index(t);
            if (k >= 0 && ds.first_use[k] == INT_MAX)
                ds.first_use[k] = i;
        }
    for (int k = 0; k < ds.nb; k++) {
        bucket *b = &ds.b[k];
        b->ready_node = INT_MAX;
        for (int j = 0; j < b->count; j++)
            if (ds.first_use[b->first + j] < b->ready_node)
                b->ready_node = ds.first_use[b->first + j];
        if (b->ready_node == INT_MAX) /* nothing in it is read: ready at the end */
            b->ready_node = -1;
    }
    ds.next = 0;
    ds.armed = true;
    return TE_OK;
}

te_status te_dist_node_done(int id)
{
    while (ds.next < ds.nb && ds.b[ds.next].ready_node >= id) {
        te_status st = bucket_start(ds.next++);
        if (st != TE_OK) {
            ds.armed = false;
            return st;
        }
    }
    /* A test moves the ones in flight on (MPI progresses inside its calls). */
    for (int k = 0; k < ds.next; k++)
        if (ds.b[k].req)
            (void)req_test(ds.b[k].req, ds.b[k].on_gpu);
    return TE_OK;
}

te_status te_dist_backward_end(void)
{
    if (!ds.armed)
        return TE_OK;
    ds.armed = false;
    while (ds.next < ds.nb) {
        te_status st = bucket_start(ds.next++);
        if (st != TE_OK)
            return st;
    }
    for (int k = 0; k < ds.nb; k++) {
        te_status st = bucket_finish(k);
        if (st != TE_OK)
            return st;
    }
    return TE_OK;
}
