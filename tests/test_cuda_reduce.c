/* test_cuda_reduce.c — the CUDA reduction family (sum, mean, softmax,
 * log_softmax, cross entropy, MSE, layer norm, global average pool), the
 * device statistics, the fused optimizer updates and unscale, against the
 * CPU backend.
 *
 * Each op runs on the CPU through the public API; its node (attributes,
 * saved tensors, as the front end made them) is cloned with device copies
 * of its tensors and handed to the CUDA kernel, forward, then backward
 * with and without accumulation. Without a device those tests print the
 * reason and check only that it is one this build gives; the host-only
 * tests (the statistics' merge, the chunk tables) always run. */
#include "suites.h"
#include "testutil.h"

#include "cuda/cuda_reduce.h"
#include "cuda/cuda_rt.h"
#include "cuda/cuda_services.h"
#include "cuda/k_optim.h"
#include "cuda/k_reduce.h"
#include "cuda/k_stats.h"
#include "checksum.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- host only: the statistics' merge ---------------------------------------
 * The device's two levels simulated with the same functions: thread shares
 * in grid-stride order, the blocks' trees, the final block's strided merge
 * and tree; decoded and compared with te_stats_compute / te_stats_quick. */

static void tree(te_kstats *sh)
{
    for (int s = KS_THREADS / 2; s > 0; s >>= 1)
        for (int t = 0; t < s; t++)
            ks_merge(&sh[t], &sh[t + s]);
}

static te_kstats simulate(const te_tensor *t, bool quick)
{
    const long long n = t->numel;
    const int blocks = ks_blocks(n);
    te_kstats *parts = malloc((size_t)blocks * sizeof *parts), sh[KS_THREADS];
    ck_assert_ptr_nonnull(parts);
    for (int b = 0; n > 0 && b < blocks; b++) {
        for (int th = 0; th < KS_THREADS; th++) {
            te_kstats_acc a;
            ks_acc_init(&a);
            for (long long i = (long long)b * KS_THREADS + th; i < n; i += (long long)blocks * KS_THREADS)
                ks_acc_add(&a, te_get(t, i), i, quick);
            sh[th] = ks_acc_close(&a);
        }
        tree(sh);
        parts[b] = sh[0];
    }
    for (int th = 0; th < KS_THREADS; th++) {
        sh[th] = ks_empty();
        for (int i = th; n > 0 && i < blocks; i += KS_THREADS)
            ks_merge(&sh[th], &parts[i]);
    }
    tree(sh);
    free(parts);
    return sh[0];
}

static void close_enough(const char *what, const char *field, double got, double want, double tol)
{
    ck_assert_msg(fabs(got - want) <= tol * fabs(want) + 1e-12, "%s: %s %.17g, expected %.17g", what, field, got,
                  want);
}

/* s against the CPU's r: counts exactly, extremes exactly (or within tol
 * when the data may differ in the last bit), moments within tol. */
static void stats_match_ex(const char *what, const te_stats *s, const te_stats *r, double tol, bool exact)
{
    ck_assert_msg(s->n == r->n && s->nan == r->nan && s->inf == r->inf && s->zero == r->zero &&
                      s->fp16_overflow == r->fp16_overflow && s->first_bad == r->first_bad,
                  "%s: counts n %lld nan %lld inf %lld zero %lld ovf %lld first_bad %lld, expected "
                  "%lld %lld %lld %lld %lld %lld",
                  what, (long long)s->n, (long long)s->nan, (long long)s->inf, (long long)s->zero,
                  (long long)s->fp16_overflow, (long long)s->first_bad, (long long)r->n, (long long)r->nan,
                  (long long)r->inf, (long long)r->zero, (long long)r->fp16_overflow, (long long)r->first_bad);
    if (exact)
        ck_assert_msg(s->min == r->min && s->max == r->max && s->abs_max == r->abs_max,
                      "%s: min %g max %g abs_max %g, expected %g %g %g", what, s->min, s->max, s->abs_max, r->min,
                      r->max, r->abs_max);
    close_enough(what, "min", s->min, r->min, tol);
    close_enough(what, "max", s->max, r->max, tol);
    close_enough(what, "abs_max", s->abs_max, r->abs_max, tol);
    close_enough(what, "mean", s->mean, r->mean, tol);
    close_enough(what, "std", s->std, r->std, tol);
    close_enough(what, "abs_mean", s->abs_mean, r->abs_mean, tol);
    close_enough(what, "l2norm", s->l2norm, r->l2norm, tol);
}

static void stats_match(const char *what, const te_stats *s, const te_stats *r, double tol)
{
    stats_match_ex(what, s, r, tol, true);
}

/* Data for the statistics: kind 0 plain, 1 a large offset (the shift's
 * reason), 2 with NaN, Inf, zeros and values beyond f16, 3 non-finite only. */
static te_tensor *stats_data(int kind, int64_t n, te_dtype dt)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    tu_fill_uniform(x, n, 7 + (uint32_t)kind, -2.0f, 2.0f);
    for (int64_t i = 0; i < n; i++) {
        if (kind == 1)
            x[i] += 1e4f;
        if (kind == 2 && i % 97 == 5)
            x[i] = 0.0f;
        if (kind == 2 && i % 1009 == 77)
            x[i] = dt == TE_F16 ? 60000.0f : 1e5f;
        if (kind == 3)
            x[i] = i % 2 ? INFINITY : NAN;
    }
    if (kind == 2 && n > 70000) {
        x[70000] = NAN;
        x[n - 1] = -INFINITY;
        x[12345] = INFINITY;
    }
    te_tensor *f = te_tensor_from(TE_F32, 1, (const int64_t[]){ n }, x);
    free(x);
    return dt == TE_F32 ? f : tu_as_dtype(f, dt);
}

START_TEST(test_stats_merge_host)
{
    static const int64_t sizes[] = { 0, 1, 255, 4097, 300001 };
    static const te_dtype dts[] = { TE_F32, TE_F16, TE_BF16 };
    for (int kind = 0; kind < 4; kind++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t di = 0; di < 3; di++) {
                if (kind == 1 && dts[di] != TE_F32)
                    continue; /* 1e4 + noise is not representable in half */
                te_tensor *t = stats_data(kind, sizes[si], dts[di]);
                char what[96];
                for (int quick = 0; quick < 2; quick++) {
                    snprintf(what, sizeof what, "kind %d n %lld %s%s", kind, (long long)sizes[si],
                             te_dtype_name(dts[di]), quick ? " quick" : "");
                    te_kstats k = simulate(t, quick);
                    te_stats s, r;
                    cuda_stats_decode(&k, quick, &s);
                    if (quick)
                        te_stats_quick(t, &r);
                    else
                        te_stats_compute(t, &r);
                    stats_match(what, &s, &r, 1e-5);
                }
            }
}
END_TEST

/* The launch arithmetic the kernels rely on. */
START_TEST(test_tables_host)
{
    const long long lens[] = { 0, 1, KO_CHUNK, KO_CHUNK + 1, 3 };
    ko_chunk ch[8];
    ck_assert_int_eq(ko_chunks(lens, 5, NULL), 5);
    ck_assert_int_eq(ko_chunks(lens, 5, ch), 5);
    const int want[5][2] = { { 1, 0 }, { 2, 0 }, { 3, 0 }, { 3, KO_CHUNK }, { 4, 0 } };
    for (int i = 0; i < 5; i++)
        ck_assert_msg(ch[i].tensor == want[i][0] && ch[i].start == want[i][1], "chunk %d: tensor %d start %lld", i,
                      ch[i].tensor, ch[i].start);
    ck_assert_int_eq(ks_blocks(0), 1);
    ck_assert_int_eq(ks_blocks(KS_THREADS * KS_PER_THREAD), 1);
    ck_assert_int_eq(ks_blocks(KS_THREADS * KS_PER_THREAD + 1), 2);
    ck_assert_int_eq(ks_blocks(1LL << 40), KS_MAX_BLOCKS);
    ck_assert_int_eq(kr_row_sum_scratch(3, KR_CHUNK), 0);
    ck_assert_int_eq(kr_row_sum_scratch(3, KR_CHUNK + 1), 6);
    ck_assert_int_eq(kr_row_sum_scratch(3, 0), 0);
    ck_assert_int_eq(kr_mse_parts(1), 1);
    ck_assert_int_eq(kr_mse_parts(1LL << 40), KR_MAX_PARTS);
    ck_assert_int_eq(kr_layernorm_dparams_scratch(KR_LN_ROWS + 1, 10), 40);
}
END_TEST

/* ---- device helpers ---------------------------------------------------------- */

/* True when a device runs this build; otherwise prints why (a reason this
 * build gives, checked) and the caller returns. */
static bool have_device(void) { return tu_cuda_device("cuda_reduce"); }

static void cu(cudaError_t e, const char *what)
{
    ck_assert_msg(e == cudaSuccess, "%s: %s", what, cudaGetErrorString(e));
}

/* A device tensor of t's dtype and shape (host data, or NaN bytes). */
static te_tensor *dev_like(const te_tensor *t, const void *host)
{
    te_tensor *d = calloc(1, sizeof *d);
    ck_assert_ptr_nonnull(d);
    d->dtype = t->dtype;
    d->ndim = t->ndim;
    memcpy(d->shape, t->shape, sizeof d->shape);
    d->numel = t->numel;
    d->nbytes = (size_t)t->numel * te_dtype_size(t->dtype);
    d->device = TE_DEV_CUDA;
    snprintf(d->name, sizeof d->name, "dev:%.100s", t->name);
    cu(cudaMalloc(&d->data, d->nbytes ? d->nbytes : 1), "cudaMalloc");
    if (host)
        cu(cudaMemcpy(d->data, host, d->nbytes, cudaMemcpyHostToDevice), "upload");
    else
        cu(cudaMemset(d->data, 0xff, d->nbytes), "fill");
    cu(cudaDeviceSynchronize(), "upload");
    return d;
}

static te_tensor *dev_copy(const te_tensor *t) { return t ? dev_like(t, t->data) : NULL; }

/* n floats on the device (cudaFree them). */
static float *upload(const float *x, int64_t n)
{
    float *d;
    cu(cudaMalloc((void **)&d, (size_t)n * sizeof *d), "cudaMalloc");
    cu(cudaMemcpy(d, x, (size_t)n * sizeof *d, cudaMemcpyHostToDevice), "upload");
    cu(cudaDeviceSynchronize(), "upload");
    return d;
}

static void dev_free(te_tensor *d)
{
    if (!d)
        return;
    dev_free(d->grad);
    cudaFree(d->data);
    free(d);
}

/* d's f32 values on the host (malloc'd), after the stream's work. */
static float *fetch(const te_tensor *d)
{
    cu(cudaStreamSynchronize(te_cuda_stream()), "stream");
    float *h = malloc(d->nbytes ? d->nbytes : 1);
    ck_assert_ptr_nonnull(h);
    cu(cudaMemcpy(h, d->data, d->nbytes, cudaMemcpyDeviceToHost), "download");
    return h;
}

/* f32 within 1e-5 relative plus a small floor; NaN only where expected. */
static void assert_close(const char *what, const float *got, const float *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (got[i] == want[i]) /* infinities too */
            continue;
        if (isnan(want[i])) {
            ck_assert_msg(isnan(got[i]), "%s[%lld]: %.9g, expected NaN", what, (long long)i, got[i]);
            continue;
        }
        ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-5f * fabsf(want[i]) + 1e-6f, "%s[%lld]: %.9g, expected %.9g",
                      what, (long long)i, got[i], want[i]);
    }
}

/* ---- ops ------------------------------------------------------------------- */

typedef struct opcase {
    const char *name;
    te_op op;
    int ndim;
    int64_t shape[4];
    int axis;
    bool keepdim, affine, special; /* layer norm's gamma and beta; softmax's masked and NaN rows */
    float lo, hi;
} opcase;

static const opcase op_cases[] = {
    { "sum all, 3 chunks", TE_OP_SUM, 2, { 3, 3000 }, TE_ALL, false, false, false, 0.5f, 1.5f },
    { "sum rows of 2 chunks", TE_OP_SUM, 2, { 5, 4100 }, 1, false, false, false, 0.5f, 1.5f },
    { "sum last axis", TE_OP_SUM, 2, { 6, 33 }, -1, true, false, false, 0.5f, 1.5f },
    { "mean axis 0", TE_OP_MEAN, 2, { 300, 7 }, 0, false, false, false, 0.5f, 1.5f },
    { "mean middle axis", TE_OP_MEAN, 3, { 4, 6, 5 }, 1, true, false, false, 0.5f, 1.5f },
    { "mean all", TE_OP_MEAN, 1, { 9000 }, TE_ALL, false, false, false, 0.5f, 1.5f },
    { "softmax last axis", TE_OP_SOFTMAX, 2, { 8, 1000 }, -1, false, false, false, -3.0f, 3.0f },
    { "softmax axis 0", TE_OP_SOFTMAX, 2, { 33, 5 }, 0, false, false, false, -3.0f, 3.0f },
    { "softmax masked and NaN rows", TE_OP_SOFTMAX, 2, { 4, 7 }, 1, false, false, true, -3.0f, 3.0f },
    { "log_softmax middle axis", TE_OP_LOG_SOFTMAX, 3, { 4, 300, 3 }, 1, false, false, false, -3.0f, 3.0f },
    { "log_softmax last axis", TE_OP_LOG_SOFTMAX, 2, { 16, 10 }, -1, false, false, false, -3.0f, 3.0f },
    { "cross_entropy small", TE_OP_CROSS_ENTROPY, 2, { 16, 10 }, 0, false, false, false, -3.0f, 3.0f },
    { "cross_entropy wide", TE_OP_CROSS_ENTROPY, 2, { 3, 1000 }, 0, false, false, false, -3.0f, 3.0f },
    { "mse", TE_OP_MSE, 2, { 37, 300 }, 0, false, false, false, -3.0f, 3.0f },
    { "layernorm affine", TE_OP_LAYERNORM, 2, { 130, 40 }, 0, false, true, false, -3.0f, 3.0f },
    { "layernorm wide", TE_OP_LAYERNORM, 3, { 2, 3, 300 }, 0, false, true, false, -3.0f, 3.0f },
    { "layernorm plain", TE_OP_LAYERNORM, 2, { 6, 17 }, 0, false, false, false, -3.0f, 3.0f },
    { "global_avgpool", TE_OP_GLOBAL_AVGPOOL, 4, { 2, 3, 5, 7 }, 0, false, false, false, 0.5f, 1.5f },
    { "global_avgpool 2 chunks", TE_OP_GLOBAL_AVGPOOL, 4, { 1, 2, 70, 70 }, 0, false, false, false, 0.5f, 1.5f },
};

static const struct {
    te_op op;
    te_kernel_fn fwd, bwd;
} kernels[] = {
    { TE_OP_SUM, cuda_sum_forward, cuda_sum_backward },
    { TE_OP_MEAN, cuda_mean_forward, cuda_mean_backward },
    { TE_OP_SOFTMAX, cuda_softmax_forward, cuda_softmax_backward },
    { TE_OP_LOG_SOFTMAX, cuda_log_softmax_forward, cuda_log_softmax_backward },
    { TE_OP_CROSS_ENTROPY, cuda_cross_entropy_forward, cuda_cross_entropy_backward },
    { TE_OP_MSE, cuda_mse_forward, cuda_mse_backward },
    { TE_OP_LAYERNORM, cuda_layernorm_forward, cuda_layernorm_backward },
    { TE_OP_GLOBAL_AVGPOOL, cuda_global_avgpool_forward, cuda_global_avgpool_backward },
};

static te_tensor *uniform(int ndim, const int64_t *shape, uint32_t seed, float lo, float hi)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    float *x = malloc((size_t)n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    tu_fill_uniform(x, n, seed, lo, hi);
    te_tensor *t = te_tensor_from(TE_F32, ndim, shape, x);
    free(x);
    t->requires_grad = true;
    return t;
}

/* The op of c on the CPU, its inputs made here. */
static te_tensor *cpu_op(const opcase *c, uint32_t seed)
{
    te_tensor *x = uniform(c->ndim, c->shape, seed, c->lo, c->hi);
    if (c->special) { /* row 2 all -inf (masked whole), row 3 with a NaN */
        float *v = x->data;
        for (int k = 0; k < c->shape[1]; k++)
            v[2 * c->shape[1] + k] = -INFINITY;
        v[3 * c->shape[1] + 4] = NAN;
    }
    const int64_t last = c->shape[c->ndim - 1];
    switch (c->op) {
    case TE_OP_SUM: return te_sum(x, c->axis, c->keepdim);
    case TE_OP_MEAN: return te_mean(x, c->axis, c->keepdim);
    case TE_OP_SOFTMAX: return te_softmax(x, c->axis);
    case TE_OP_LOG_SOFTMAX: return te_log_softmax(x, c->axis);
    case TE_OP_CROSS_ENTROPY: {
        int32_t y[64];
        for (int64_t r = 0; r < c->shape[0]; r++)
            y[r] = (int32_t)((r * 7 + 3) % last);
        return te_cross_entropy(x, te_tensor_from(TE_I32, 1, c->shape, y));
    }
    case TE_OP_MSE: return te_mse(x, uniform(c->ndim, c->shape, seed + 1, c->lo, c->hi));
    case TE_OP_LAYERNORM: {
        te_tensor *g = c->affine ? uniform(1, &last, seed + 2, 0.5f, 1.5f) : NULL;
        te_tensor *b = c->affine ? uniform(1, &last, seed + 3, -0.5f, 0.5f) : NULL;
        return te_layernorm(x, g, b, 1e-5f);
    }
    default: return te_global_avgpool(x);
    }
}

/* One case: forward (output and saved tensors), then backward with acc 0
 * and 1 for every float input that wants a gradient. */
static void check_op(const opcase *c, uint32_t seed)
{
    size_t k = 0;
    while (kernels[k].op != c->op)
        k++;
    te_tensor *y = cpu_op(c, seed);
    ck_assert_msg(y != NULL, "%s: %s", c->name, te_error());
    te_node *n = y->node;
    te_tensor *dy = uniform(y->ndim, y->shape, seed + 9, -1.0f, 1.0f);
    dy->requires_grad = false;
    ck_assert_msg(te_backward_with(y, dy) == TE_OK, "%s backward: %s", c->name, te_error());

    te_node dn = *n;
    for (int i = 0; i < n->n_in; i++)
        dn.in[i] = dev_copy(n->in[i]);
    dn.out[0] = dev_like(n->out[0], NULL);
    for (int i = 0; i < n->n_saved; i++)
        dn.saved[i] = dev_like(n->saved[i], NULL);
    char what[128];
    ck_assert_msg(kernels[k].fwd(&dn) == TE_OK, "%s forward: %s", c->name, te_error());
    float *got = fetch(dn.out[0]);
    snprintf(what, sizeof what, "%s forward", c->name);
    assert_close(what, got, n->out[0]->data, y->numel);
    free(got);
    for (int i = 0; i < n->n_saved; i++) {
        got = fetch(dn.saved[i]);
        snprintf(what, sizeof what, "%s saved[%d]", c->name, i);
        assert_close(what, got, n->saved[i]->data, n->saved[i]->numel);
        free(got);
    }

    dn.out[0]->grad = dev_copy(dy);
    for (int acc = 0; acc < 2; acc++) {
        for (int i = 0; i < n->n_in; i++) {
            te_tensor *x = n->in[i];
            if (!x || x->dtype != TE_F32 || !x->requires_grad)
                continue;
            te_tensor *old = uniform(x->ndim, x->shape, seed + 20 + (uint32_t)i, -1.0f, 1.0f);
            dn.in[i]->requires_grad = true;
            dev_free(dn.in[i]->grad);
            dn.in[i]->grad = acc ? dev_copy(old) : dev_like(x, NULL);
            dn.in[i]->grad_valid = acc;
        }
        ck_assert_msg(kernels[k].bwd(&dn) == TE_OK, "%s backward: %s", c->name, te_error());
        for (int i = 0; i < n->n_in; i++) {
            te_tensor *x = n->in[i];
            if (!x || x->dtype != TE_F32 || !x->requires_grad)
                continue;
            te_tensor *old = uniform(x->ndim, x->shape, seed + 20 + (uint32_t)i, -1.0f, 1.0f);
            float *want = malloc((size_t)x->numel * sizeof *want);
            for (int64_t j = 0; j < x->numel; j++)
                want[j] = ((float *)x->grad->data)[j] + (acc ? ((float *)old->data)[j] : 0.0f);
            got = fetch(dn.in[i]->grad);
            snprintf(what, sizeof what, "%s gradient of input %d, acc %d", c->name, i, acc);
            assert_close(what, got, want, x->numel);
            free(got);
            free(want);
        }
    }
    for (int i = 0; i < n->n_in; i++)
        dev_free(dn.in[i]);
    dev_free(dn.out[0]);
    for (int i = 0; i < n->n_saved; i++)
        dev_free(dn.saved[i]);
}

START_TEST(test_ops)
{
    if (!have_device())
        return;
    for (size_t i = 0; i < sizeof op_cases / sizeof op_cases[0]; i++) {
        check_op(&op_cases[i], 100 + 10 * (uint32_t)i);
        te_tape_reset();
    }
}
END_TEST

/* A label outside the classes: the CPU kernel's message, its first bad row. */
START_TEST(test_bad_label)
{
    if (!have_device())
        return;
    te_tensor *z = uniform(te_shape(3, 5), 1, -1.0f, 1.0f);
    te_tensor *y = te_cross_entropy(z, te_tensor_from(TE_I32, te_shape(3), (const int32_t[]){ 0, 1, 2 }));
    ck_assert_ptr_nonnull(y);
    const int32_t bad[3] = { 0, 7, -1 };
    ck_assert_ptr_null(te_cross_entropy(z, te_tensor_from(TE_I32, te_shape(3), bad)));
    const char *msg = strstr(te_error(), "label 7");
    ck_assert_msg(msg != NULL, "CPU: %s", te_error());
    char want[256];
    snprintf(want, sizeof want, "%s", msg);
    te_node dn = *y->node;
    dn.in[0] = dev_copy(z);
    dn.in[1] = dev_like(y->node->in[1], bad);
    dn.out[0] = dev_like(y, NULL);
    dn.saved[0] = dev_like(y->node->saved[0], NULL);
    ck_assert_int_eq(cuda_cross_entropy_forward(&dn), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "(CrossEntropy)", want);
    /* the flag is reset for the next node: good labels pass */
    cu(cudaMemcpy(dn.in[1]->data, (const int32_t[]){ 4, 0, 3 }, 3 * sizeof(int32_t), cudaMemcpyHostToDevice), "labels");
    ck_assert_msg(cuda_cross_entropy_forward(&dn) == TE_OK, "%s", te_error());
    for (int i = 0; i < 2; i++)
        dev_free(dn.in[i]);
    dev_free(dn.out[0]);
    dev_free(dn.saved[0]);
}
END_TEST

/* ---- services ------------------------------------------------------------ */

START_TEST(test_stats_device)
{
    if (!have_device())
        return;
    static const int64_t sizes[] = { 0, 1, 4097, 300001, 5000000 };
    static const te_dtype dts[] = { TE_F32, TE_F16, TE_BF16 };
    te_kstats *slot;
    cu(cudaMalloc((void **)&slot, CUDA_STATS_SLOT_BYTES), "slot");
    for (int kind = 0; kind < 4; kind++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t di = 0; di < 3; di++) {
                if (kind == 1 && dts[di] != TE_F32)
                    continue;
                te_tensor *t = stats_data(kind, sizes[si], dts[di]);
                te_tensor *d = dev_copy(t);
                for (int quick = 0; quick < 2; quick++) {
                    char what[96];
                    snprintf(what, sizeof what, "device kind %d n %lld %s%s", kind, (long long)sizes[si],
                             te_dtype_name(dts[di]), quick ? " quick" : "");
                    te_stats s, again, async, r;
                    cuda_stats(d, &s, quick);
                    cuda_stats(d, &again, quick);
                    ck_assert_msg(memcmp(&s, &again, sizeof s) == 0, "%s: not the same bits twice", what);
                    ck_assert_int_eq(cuda_stats_async(d, quick, slot), TE_OK);
                    te_kstats k;
                    cu(cudaMemcpyAsync(&k, slot, sizeof k, cudaMemcpyDeviceToHost, te_cuda_stream()), "slot");
                    cu(cudaStreamSynchronize(te_cuda_stream()), "slot");
                    cuda_stats_decode(&k, quick, &async);
                    ck_assert_msg(memcmp(&s, &async, sizeof s) == 0, "%s: the async slot differs", what);
                    if (quick)
                        te_stats_quick(t, &r);
                    else
                        te_stats_compute(t, &r);
                    stats_match(what, &s, &r, 1e-5);
                }
                dev_free(d);
            }
    cudaFree(slot);
}
END_TEST

/* Two steps of each optimizer on three parameters (one of two chunks)
 * against te_optim_step on the CPU. */
typedef struct optcase {
    const char *name;
    bool adam;
    te_sgd_opts sgd;
    te_adam_opts ad;
} optcase;

static const optcase opt_cases[] = {
    { .name = "sgd", .sgd = { .lr = 0.1f, .weight_decay = 0.01f } },
    { .name = "sgd momentum", .sgd = { .lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 0.01f } },
    { .name = "sgd nesterov", .sgd = { .lr = 0.05f, .momentum = 0.9f, .nesterov = true } },
    { .name = "adam", .adam = true, .ad = { .lr = 0.01f, .weight_decay = 0.01f } },
    { .name = "adamw", .adam = true, .ad = { .lr = 0.01f, .weight_decay = 0.1f, .decoupled = true } },
};

START_TEST(test_optim_device)
{
    if (!have_device())
        return;
    const optcase *c = &opt_cases[_i];
    enum { NP = 3 };
    const int64_t len[NP] = { 5, KO_CHUNK + 70, 1 };
    te_tensor *p[NP];
    te_update_args u[NP];
    float *dstate[NP][3];
    for (int i = 0; i < NP; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        p[i] = te_param_new(name, TE_F32, 1, &len[i]);
        tu_fill_uniform(p[i]->data, len[i], 50 + (uint32_t)i, -1.0f, 1.0f);
        for (int s = 0; s < 3; s++) {
            cu(cudaMalloc((void **)&dstate[i][s], (size_t)len[i] * sizeof(float)), "state");
            cu(cudaMemset(dstate[i][s], 0, (size_t)len[i] * sizeof(float)), "state");
        }
        cu(cudaMemcpy(dstate[i][0], p[i]->data, (size_t)len[i] * sizeof(float), cudaMemcpyHostToDevice), "p");
        u[i] = (te_update_args){ .p = dstate[i][0], .g = NULL, .n = len[i], .first = true,
                                 .m = c->adam || c->sgd.momentum > 0 ? dstate[i][1] : NULL,
                                 .v = c->adam ? dstate[i][2] : NULL };
    }
    te_optim *o = c->adam ? te_adam_new(p, NP, &c->ad) : te_sgd_new(p, NP, &c->sgd);
    ck_assert_ptr_nonnull(o);
    te_adam_opts ad = c->ad; /* te_adam_new's defaults */
    ad.beta1 = 0.9f, ad.beta2 = 0.999f, ad.eps = 1e-8f;
    float *dg[NP];
    te_stats st1;
    for (int step = 1; step <= 2; step++) {
        te_step_begin();
        for (int i = 0; i < NP; i++) { /* d/dp sum(p * c) = c: the gradient, exactly */
            te_tensor *g = uniform(1, &len[i], 60 + (uint32_t)(10 * step + i), -1.0f, 1.0f);
            g->requires_grad = false;
            ck_assert_int_eq(te_backward(te_sum(te_mul(p[i], g), TE_ALL, false)), TE_OK);
            u[i].g = dg[i] = upload(g->data, len[i]);
            u[i].first = step == 1;
            u[i].stats = i == 1 ? &st1 : NULL;
        }
        ck_assert_int_eq(te_optim_step(o), TE_OK);
        if (c->adam)
            cuda_adam(&ad, step, u, NP);
        else
            cuda_sgd(&c->sgd, u, NP);
        for (int i = 0; i < NP; i++) {
            float *got = malloc((size_t)len[i] * sizeof *got);
            cu(cudaStreamSynchronize(te_cuda_stream()), "update");
            cu(cudaMemcpy(got, dstate[i][0], (size_t)len[i] * sizeof *got, cudaMemcpyDeviceToHost), "p");
            char what[96];
            snprintf(what, sizeof what, "%s step %d parameter %d", c->name, step, i);
            assert_close(what, got, p[i]->data, len[i]);
            free(got);
            cudaFree(dg[i]);
        }
        te_stats r;
        te_stats_compute(p[1], &r);
        stats_match_ex("statistics of the updated parameter 1", &st1, &r, 1e-5, false);
        te_step_end();
    }
    te_optim_free(o);
    for (int i = 0; i < NP; i++)
        for (int s = 0; s < 3; s++)
            cudaFree(dstate[i][s]);
}
END_TEST

/* f32, f16 (two chunks) and bf16 gradients times inv; the first gradient
 * with a NaN or Inf found. */
START_TEST(test_unscale_device)
{
    if (!have_device())
        return;
    static const te_dtype dts[3] = { TE_F32, TE_F16, TE_BF16 };
    const int64_t len[3] = { 1000, KO_CHUNK + 9, 10 };
    const float inv = 1.0f / 1024.0f;
    for (int bad = -1; bad < 3; bad++) {
        te_unscale_args u[3];
        te_tensor *h[3], *d[3];
        for (int i = 0; i < 3; i++) {
            te_tensor *f = uniform(1, &len[i], 80 + (uint32_t)i, -1000.0f, 1000.0f);
            if (i == bad || (bad == 0 && i == 2)) /* bad 0: two bad gradients, the first named */
                ((float *)f->data)[len[i] - 1] = i == 1 ? INFINITY : NAN;
            h[i] = dts[i] == TE_F32 ? f : tu_as_dtype(f, dts[i]);
            d[i] = dev_copy(h[i]);
            u[i] = (te_unscale_args){ .src = d[i]->data, .dt = dts[i], .n = len[i] };
            if (dts[i] == TE_F32)
                u[i].dst = d[i]->data; /* in place */
            else
                cu(cudaMalloc((void **)&u[i].dst, (size_t)len[i] * sizeof(float)), "dst");
        }
        te_status st;
        const int first = cuda_unscale_first(u, 3, inv, &st);
        ck_assert_int_eq(st, TE_OK);
        ck_assert_msg(first == bad, "first bad gradient %d, expected %d", first, bad);
        ck_assert(cuda_unscale(u, 0, inv) == false);
        for (int i = 0; i < 3; i++) {
            float *got = malloc((size_t)len[i] * sizeof *got), *want = malloc((size_t)len[i] * sizeof *want);
            cu(cudaMemcpy(got, u[i].dst, (size_t)len[i] * sizeof *got, cudaMemcpyDeviceToHost), "dst");
            for (int64_t j = 0; j < len[i]; j++)
                want[j] = te_get(h[i], j) * inv;
            char what[64];
            snprintf(what, sizeof what, "unscaled gradient %d (bad %d)", i, bad);
            assert_close(what, got, want, len[i]);
            free(got);
            free(want);
            if (dts[i] != TE_F32)
                cudaFree(u[i].dst);
            dev_free(d[i]);
        }
    }
}
END_TEST

/* Time travel's checksum on the device equals the CPU's (te_checksum_host)
 * for the same bytes: random buffers of every tail length, small and
 * large, aligned and not; the same bits twice; a flipped bit seen by
 * both. */
START_TEST(test_checksum_device)
{
    if (!have_device())
        return;
    static const size_t sizes[] = { 0, 1, 7, 8, 9, 31, 33, 4096 + 5, 3000003, (size_t)64 << 20 };
    const size_t max = ((size_t)64 << 20) + 1;
    unsigned char *h = malloc(max);
    ck_assert_ptr_nonnull(h);
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < max; i++) { /* xorshift64 */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        h[i] = (unsigned char)(x >> 24);
    }
    unsigned char *d;
    cu(cudaMalloc((void **)&d, max), "cudaMalloc");
    cu(cudaMemcpy(d, h, max, cudaMemcpyHostToDevice), "cudaMemcpy");
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t off = 0; off < 2; off++) { /* off 1: an unaligned start */
            const size_t n = sizes[si];
            const uint64_t want = te_checksum_host(h + off, n);
            const uint64_t got = te_backend_cuda.checksum(d + off, n);
            ck_assert_msg(got == want, "n %zu offset %zu: device %016llx, CPU %016llx", n, off,
                          (unsigned long long)got, (unsigned long long)want);
            ck_assert(te_backend_cuda.checksum(d + off, n) == got);
        }
    /* one bit of the last word, then of the first, flipped on both sides */
    const size_t n = 3000003;
    for (size_t at = n - 1; at != (size_t)-1; at = at ? 0 : (size_t)-1) {
        h[at] ^= 0x10;
        cu(cudaMemcpy(d + at, h + at, 1, cudaMemcpyHostToDevice), "cudaMemcpy");
        const uint64_t want = te_checksum_host(h, n), got = te_backend_cuda.checksum(d, n);
        ck_assert(got == want);
        h[at] ^= 0x10;
        ck_assert(te_checksum_host(h, n) != want);
    }
    ck_assert_ptr_nonnull(te_backend_cuda.checksum);
    cudaFree(d);
    free(h);
}
END_TEST

Suite *suite_cuda_reduce(void)
{
    Suite *s = suite_create("cuda_reduce");
    TCase *tc = tcase_create("cuda_reduce");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_stats_merge_host);
    tcase_add_test(tc, test_tables_host);
    tcase_add_test(tc, test_ops);
    tcase_add_test(tc, test_bad_label);
    tcase_add_test(tc, test_stats_device);
    tcase_add_loop_test(tc, test_optim_device, 0, (int)(sizeof opt_cases / sizeof opt_cases[0]));
    tcase_add_test(tc, test_unscale_device);
    tcase_add_test(tc, test_checksum_device);
    suite_add_tcase(s, tc);
    return s;
}
