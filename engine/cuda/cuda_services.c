/* cuda_services.c — statistics, optimizer updates and unscale on the
 * device, for the backend table (cuda_services.h). */
#include "cuda/cuda_services.h"
#include "cuda/cuda_rt.h"
#include "cuda/k_optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* k_stats.h's element types are te_dtype's values. */
_Static_assert((int)KS_F32 == (int)TE_F32 && (int)KS_F16 == (int)TE_F16 && (int)KS_BF16 == (int)TE_BF16 &&
                   (int)KS_I32 == (int)TE_I32,
               "k_stats.h's KS_* must follow te_dtype");

/* ---- statistics ---------------------------------------------------------- */

/* Queues the statistics of n elements of x into the device slot; the
 * blocks' shares go to the workspace. */
static te_status stats_queue(const void *x, te_dtype dt, int64_t n, bool quick, te_kstats *slot, void *scratch_after)
{
    te_kstats *parts = scratch_after;
    if (!parts)
        parts = te_cuda_workspace((size_t)ks_blocks(n) * sizeof *parts);
    if (!parts)
        return te_cuda_ok(NULL, cudaErrorMemoryAllocation, "tensor statistics");
    return te_cuda_ok(NULL, ks_launch(x, (int)dt, n, quick, parts, slot, te_cuda_stream()), "tensor statistics");
}

/* The statistics of n elements of x, on the host in *k. */
static te_status stats_to_host(const void *x, te_dtype dt, int64_t n, bool quick, te_kstats *k)
{
    /* The slot first, then the blocks' shares, in one workspace. */
    te_kstats *ws = te_cuda_workspace((size_t)(1 + ks_blocks(n)) * sizeof *ws);
    if (!ws)
        return te_cuda_ok(NULL, cudaErrorMemoryAllocation, "tensor statistics");
    te_status st = stats_queue(x, dt, n, quick, ws, ws + 1);
    cudaStream_t s = te_cuda_stream();
    if (st == TE_OK)
        st = te_cuda_ok(NULL, cudaMemcpyAsync(k, ws, sizeof *k, cudaMemcpyDeviceToHost, s), "reading statistics");
    if (st == TE_OK)
        st = te_cuda_ok(NULL, cudaStreamSynchronize(s), "reading statistics");
    return st;
}

void cuda_stats_decode(const void *host_slot, bool quick, te_stats *s)
{
    te_kstats k;
    memcpy(&k, host_slot, sizeof k);
    *s = (te_stats){ .n = k.n, .nan = k.nan, .inf = k.n - k.fin - k.nan, .first_bad = k.first_bad,
                     .abs_max = k.abs_max, .l2norm = sqrt(k.sq) };
    if (quick)
        return;
    s->zero = k.zero;
    s->fp16_overflow = k.ovf;
    if (k.fin == 0)
        return;
    s->min = k.min;
    s->max = k.max;
    s->mean = k.mean;
    s->std = sqrt(k.m2 / (double)k.fin);
    s->abs_mean = k.abs_sum / (double)k.fin;
}

void cuda_stats(const te_tensor *t, te_stats *s, bool quick)
{
    te_kstats k;
    if (stats_to_host(t->data, t->dtype, t->numel, quick, &k) != TE_OK) {
        *s = (te_stats){ .n = t->numel, .first_bad = -1 };
        return;
    }
    cuda_stats_decode(&k, quick, s);
}

te_status cuda_stats_async(const te_tensor *t, bool quick, void *dev_slot)
{
    return stats_queue(t->data, t->dtype, t->numel, quick, dev_slot, NULL);
}

/* ---- multi-tensor tables -----------------------------------------------------
 * count entries of entry bytes (filled by the caller in the returned host
 * buffer) and their chunks, uploaded together into the workspace. The
 * host buffer may be freed once the copy is queued: a copy from pageable
 * memory has taken its data when cudaMemcpyAsync returns. */
typedef struct table {
    unsigned char *host;
    size_t tab, bytes;
    int64_t nch;
} table;

static te_status table_new(table *tb, size_t entry, int count, const long long *lens, const char *what)
{
    tb->nch = ko_chunks(lens, count, NULL);
    tb->tab = ((size_t)count * entry + 15) & ~(size_t)15;
    tb->bytes = tb->tab + (size_t)tb->nch * sizeof(ko_chunk);
    if (!(tb->host = malloc(tb->bytes ? tb->bytes : 1))) {
        te_set_error(TE_ERR_NOMEM, "%s: out of memory for a table of %d tensors", what, count);
        return TE_ERR_NOMEM;
    }
    ko_chunks(lens, count, (ko_chunk *)(tb->host + tb->tab));
    return TE_OK;
}

/* Uploads tb (and frees its host copy): *dev is the entries, then the chunks
 * at dev + tb->tab. */
static te_status table_upload(table *tb, unsigned char **dev, const char *what)
{
    te_status st = TE_OK;
    *dev = te_cuda_workspace(tb->bytes ? tb->bytes : 1);
    if (!*dev)
        st = te_cuda_ok(NULL, cudaErrorMemoryAllocation, what);
    else if (tb->bytes)
        st = te_cuda_ok(NULL, cudaMemcpyAsync(*dev, tb->host, tb->bytes, cudaMemcpyHostToDevice, te_cuda_stream()),
                        what);
    free(tb->host);
    tb->host = NULL;
    return st;
}

/* The parameters' table, uploaded; *dev as table_upload's. */
static te_status params_upload(const te_update_args *u, int count, table *tb, unsigned char **dev, const char *what)
{
    long long *lens = calloc((size_t)(count > 0 ? count : 1), sizeof *lens);
    if (!lens) {
        te_set_error(TE_ERR_NOMEM, "%s: out of memory", what);
        return TE_ERR_NOMEM;
    }
    for (int i = 0; i < count; i++)
        lens[i] = u[i].n;
    te_status st = table_new(tb, sizeof(ko_param), count, lens, what);
    free(lens);
    if (st != TE_OK)
        return st;
    ko_param *p = (ko_param *)tb->host;
    for (int i = 0; i < count; i++)
        p[i] = (ko_param){ .p = u[i].p, .g = u[i].g, .m = u[i].m, .v = u[i].v, .n = u[i].n, .first = u[i].first };
    return table_upload(tb, dev, what);
}

/* The statistics the updates' callers want, of the new values. */
static void update_stats(const te_update_args *u, int count)
{
    for (int i = 0; i < count; i++) {
        if (!u[i].stats)
            continue;
        te_kstats k;
        if (stats_to_host(u[i].p, TE_F32, u[i].n, false, &k) == TE_OK)
            cuda_stats_decode(&k, false, u[i].stats);
        else
            *u[i].stats = (te_stats){ .n = u[i].n, .first_bad = -1 };
    }
}

void cuda_sgd(const te_sgd_opts *o, const te_update_args *u, int count)
{
    table tb;
    unsigned char *dev;
    if (params_upload(u, count, &tb, &dev, "sgd update") != TE_OK)
        return;
    const ko_sgd k = { .lr = o->lr, .momentum = o->momentum, .dampening = o->dampening,
                       .weight_decay = o->weight_decay, .nesterov = o->nesterov };
    if (te_cuda_ok(NULL, ko_sgd_launch(&k, (const ko_param *)dev, (const ko_chunk *)(dev + tb.tab), tb.nch,
                                       te_cuda_stream()),
                   "sgd update") == TE_OK)
        update_stats(u, count);
}

void cuda_adam(const te_adam_opts *o, int64_t t, const te_update_args *u, int count)
{
    table tb;
    unsigned char *dev;
    if (params_upload(u, count, &tb, &dev, "adam update") != TE_OK)
        return;
    /* optim.c's adam_range scalars, computed as there */
    const float b1 = o->beta1, b2 = o->beta2, wd = o->weight_decay;
    const ko_adam k = {
        .beta1 = b1, .beta2 = b2, .eps = o->eps, .one_m_beta1 = 1.0f - b1, .one_m_beta2 = 1.0f - b2,
        .step = o->lr / (1.0f - powf(b1, (float)t)),
        .inv_sqrt_bc2 = 1.0f / sqrtf(1.0f - powf(b2, (float)t)),
        .decay = o->decoupled ? 1.0f - o->lr * wd : 1.0f,
        .l2 = o->decoupled ? 0.0f : wd,
    };
    if (te_cuda_ok(NULL, ko_adam_launch(&k, (const ko_param *)dev, (const ko_chunk *)(dev + tb.tab), tb.nch,
                                        te_cuda_stream()),
                   "adam update") == TE_OK)
        update_stats(u, count);
}

int cuda_unscale_first(const te_unscale_args *u, int count, float inv, te_status *st)
{
    const char *what = "amp/unscale";
    long long *lens = calloc((size_t)(count > 0 ? count : 1), sizeof *lens);
    if (!lens) {
        te_set_error(TE_ERR_NOMEM, "%s: out of memory", what);
        *st = TE_ERR_NOMEM;
        return -1;
    }
    for (int i = 0; i < count; i++)
        lens[i] = u[i].n;
    table tb;
    *st = table_new(&tb, sizeof(ko_grad), count, lens, what);
    free(lens);
    if (*st != TE_OK)
        return -1;
    ko_grad *g = (ko_grad *)tb.host;
    for (int i = 0; i < count; i++)
        g[i] = (ko_grad){ .src = u[i].src, .dst = u[i].dst, .n = u[i].n, .type = (int)u[i].dt };
    unsigned char *dev;
    if ((*st = table_upload(&tb, &dev, what)) != TE_OK)
        return -1;
    unsigned long long *flag = te_cuda_flag();
    if (!flag) {
        *st = te_cuda_ok(NULL, cudaErrorMemoryAllocation, "the found-inf flag");
        return -1;
    }
    *st = te_cuda_ok(NULL, ko_unscale_launch((const ko_grad *)dev, (const ko_chunk *)(dev + tb.tab), tb.nch, inv,
                                             flag, te_cuda_stream()),
                     what);
    if (*st != TE_OK)
        return -1;
    const int64_t first = te_cuda_flag_read(NULL, st);
    return *st == TE_OK ? (int)first : -1;
}

double cuda_sumsq(const te_unscale_args *u, int count)
{
    /* Per tensor in a fixed order, the stats kernel's sum of squares (of
     * finite values, in double); a NaN or Inf makes the total what the
     * CPU's plain sum would be, so that clipping goes bad alike. */
    double total = 0.0;
    for (int i = 0; i < count; i++) {
        te_kstats k;
        if (stats_to_host(u[i].src, u[i].dt, u[i].n, true, &k) != TE_OK)
            return NAN;
        if (k.nan > 0)
            return NAN;
        total += k.n - k.fin - k.nan > 0 ? INFINITY : k.sq;
    }
    return total;
}

bool cuda_unscale(const te_unscale_args *u, int count, float inv)
{
    te_status st;
    const int first = cuda_unscale_first(u, count, inv, &st);
    return st != TE_OK || first >= 0;
}
