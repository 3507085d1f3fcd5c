/* diff_combine.c — a data-parallel dump as one run, for tdbg-diff against a
 * one-process run: the ranks' tensors combined into the tensors one
 * process with the global batch would have dumped, written as a dump of
 * its own in a temporary directory that the comparison then reads like any
 * other (and removes).
 *
 * Per tensor, against the one-process run's shape of it:
 * - every rank has that shape: the mean over the ranks (the loss of each
 *   rank is the mean over its shard, a parameter's gradient the gradient of
 *   that loss; what every rank holds the same, the parameters, stays as it
 *   is, bit for bit);
 * - the ranks' dim 0 adds up to its dim 0, the other dims the same: the
 *   ranks' tensors one after the other in rank order (activations; rank R
 *   took rows R*B/N .. (R+1)*B/N-1 of each global batch). A backward
 *   tensor is then divided by the number of ranks: each rank's loss is the
 *   mean over B/N rows, so its activation gradients are N times those of
 *   the mean over B;
 * - anything else: rank 0's, which the comparison then reports (a shape).
 * Collective ops (AllReduce, Broadcast) only the data-parallel run has:
 * they are left out, of the op table too. */
#include "diff.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool collective(const char *type)
{
    return strcmp(type, "AllReduce") == 0 || strcmp(type, "Broadcast") == 0;
}

/* How the ranks' tensors t[0..n-1] make ref's tensor. */
typedef enum { COMBINE_MEAN, COMBINE_CONCAT, COMBINE_RANK0 } combine_how;

static combine_how how_to_combine(const dump_tensor_info *const *t, int n, const dump_tensor_info *ref)
{
    bool all_same = true, rest_same = true;
    int64_t dim0 = 0;
    for (int r = 0; r < n; r++) {
        all_same &= t[r]->ndim == t[0]->ndim &&
                    memcmp(t[r]->shape, t[0]->shape, (size_t)t[0]->ndim * sizeof *t[0]->shape) == 0;
        rest_same &= t[r]->ndim == t[0]->ndim && t[r]->ndim >= 1 &&
                     memcmp(t[r]->shape + 1, t[0]->shape + 1, (size_t)(t[0]->ndim - 1) * sizeof *t[0]->shape) == 0;
        dim0 += t[r]->ndim >= 1 ? t[r]->shape[0] : 0;
        if (t[r]->dtype != t[0]->dtype)
            return COMBINE_RANK0;
    }
    if (!ref)   /* only this run has it: nothing to match, one rank's shape */
        return all_same ? COMBINE_MEAN : COMBINE_RANK0;
    if (all_same && t[0]->ndim == ref->ndim &&
        memcmp(t[0]->shape, ref->shape, (size_t)ref->ndim * sizeof *ref->shape) == 0)
        return COMBINE_MEAN;
    if (rest_same && t[0]->ndim == ref->ndim && dim0 == ref->shape[0] &&
        memcmp(t[0]->shape + 1, ref->shape + 1, (size_t)(ref->ndim - 1) * sizeof *ref->shape) == 0)
        return COMBINE_CONCAT;
    return COMBINE_RANK0;
}

/* Reads every rank's values as stored into one buffer, rank after rank. */
static void *read_all(diff_ctx *c, dump_step_reader **rd, const int *idx, int n, size_t *total)
{
    *total = 0;
    for (int r = 0; r < n; r++)
        *total += dump_step_tensor(rd[r], idx[r])->nbytes;
    char *buf = malloc(*total + 4), why[DIFF_WHY_MAX]; /* dump_step_add_copy's 4 spare bytes */
    if (!buf) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s: out of memory", dump_step_path(rd[0]));
        return NULL;
    }
    size_t at = 0;
    for (int r = 0; r < n; r++) {
        if (!dump_step_read_raw(rd[r], idx[r], buf + at, why, sizeof why)) {
            diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
            free(buf);
            return NULL;
        }
        at += dump_step_tensor(rd[r], idx[r])->nbytes;
    }
    return buf;
}

/* The mean over n ranks of count f32 values each, in place into the first
 * rank's (a sum in double: values every rank holds the same stay bit for
 * bit). Another dtype keeps rank 0's values. */
static void mean_f32(float *v, int64_t count, int n)
{
    for (int64_t i = 0; i < count; i++) {
        double sum = 0;
        for (int r = 0; r < n; r++)
            sum += v[(int64_t)r * count + i];
        v[i] = (float)(sum / n);
    }
}

static bool combine_tensor(diff_ctx *c, dump_step_writer *w, dump_step_reader **rd, const int *idx, int n,
                           const dump_tensor_info *ref, int *counts)
{
    const dump_tensor_info **t = malloc((size_t)n * sizeof *t);
    size_t total;
    char *buf = t ? read_all(c, rd, idx, n, &total) : NULL;
    if (!buf) {
        if (!t)
            diff_complain(c, DIFF_RC_TROUBLE, "out of memory");
        free(t);
        return false;
    }
    for (int r = 0; r < n; r++)
        t[r] = dump_step_tensor(rd[r], idx[r]);
    const combine_how how = how_to_combine(t, n, ref);
    dump_tensor_info ti = *t[0];
    if (how == COMBINE_MEAN && t[0]->dtype == TE_F32) {
        mean_f32((float *)(void *)buf, t[0]->numel, n);
    } else if (how == COMBINE_CONCAT) {
        ti.shape[0] = ref->shape[0];
        if (ti.phase == TE_PHASE_BACKWARD && ti.dtype == TE_F32)
            for (int64_t i = 0; i < (int64_t)(total / sizeof(float)); i++)
                ((float *)(void *)buf)[i] /= (float)n;
    }
    counts[how]++;
    char why[DIFF_WHY_MAX];
    bool ok = dump_step_add_copy(w, &ti, buf, why, sizeof why);
    if (!ok)
        diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
    free(buf);
    free(t);
    return ok;
}

/* The step file of ref holding step, or NULL. */
static dump_step_reader *ref_step(diff_ctx *c, const diff_side *ref, int64_t step)
{
    for (int i = 0; i < ref->n_e; i++) {
        if (ref->e[i].step != step && !ref->file)
            continue;
        char path[PATH_MAX + 64], why[DIFF_WHY_MAX];
        if (ref->file)
            snprintf(path, sizeof path, "%s", ref->file);
        else
            snprintf(path, sizeof path, "%s/%s", ref->dir, ref->e[i].name);
        dump_step_reader *r = dump_step_open(path, why, sizeof why);
        if (!r)
            diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
        return r;
    }
    return NULL;
}

static bool combine_step(diff_ctx *c, const diff_ranks *k, const diff_side *ref, int e, const char *dir,
                         int *counts)
{
    const int n = k->n;
    dump_step_reader **rd = calloc((size_t)n, sizeof *rd);
    int *idx = calloc((size_t)n, sizeof *idx);
    const int64_t step = k->side[0].e[e].step;
    char why[DIFF_WHY_MAX];
    bool ok = rd && idx;
    if (!ok)
        diff_complain(c, DIFF_RC_TROUBLE, "out of memory");
    for (int r = 0; ok && r < n; r++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s", k->path[r], k->side[r].e[e].name);
        if (!(rd[r] = dump_step_open(path, why, sizeof why))) {
            diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
            ok = false;
        }
    }
    dump_step_reader *rf = ok ? ref_step(c, ref, step) : NULL;
    dump_step_writer *w = ok ? dump_step_create(dir, step, 0, why, sizeof why) : NULL;
    if (ok && !w) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
        ok = false;
    }
    for (int i = 0; ok && i < dump_step_count(rd[0]); i++) {
        const dump_tensor_info *t = dump_step_tensor(rd[0], i);
        if (collective(t->op_type))
            continue;
        idx[0] = i;
        bool everywhere = true;
        for (int r = 1; r < n; r++)
            everywhere &= (idx[r] = dump_step_find(rd[r], t->path)) >= 0;
        if (!everywhere) {
            diff_complain(c, DIFF_RC_SAME, "%s: step %lld: %s is not on every rank: left out", k->dir,
                          (long long)step, t->path);
            continue;
        }
        const int j = rf ? dump_step_find(rf, t->path) : -1;
        ok = combine_tensor(c, w, rd, idx, n, j >= 0 ? dump_step_tensor(rf, j) : NULL, counts);
    }
    if (w && ok && !dump_step_commit(w, why, sizeof why)) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
        ok = false;
    } else if (w && !ok) {
        dump_step_abort(w);
    }
    dump_step_close(rf);
    for (int r = 0; rd && r < n; r++)
        dump_step_close(rd[r]);
    free(rd);
    free(idx);
    return ok;
}

bool diff_combine(diff_ctx *c, const diff_ranks *k, const diff_side *ref, char *dir, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, n, "%s/tdbg-diff-ranks-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s: cannot make a temporary directory to combine the ranks in (%s)",
                      k->dir, dir);
        dir[0] = '\0';
        return false;
    }
    const diff_side *s0 = &k->side[0];
    char why[DIFF_WHY_MAX];
    bool ok = true;
    if (s0->has_run) {
        dump_op_row *ops = malloc((size_t)(s0->n_ops ? s0->n_ops : 1) * sizeof *ops);
        int n_ops = 0;
        for (int i = 0; ops && i < s0->n_ops; i++)
            if (!collective(s0->ops[i].type))
                ops[n_ops++] = s0->ops[i];
        if (!ops || !dump_run_write(dir, &s0->meta, ops, n_ops, why, sizeof why)) {
            diff_complain(c, DIFF_RC_TROUBLE, "%s", ops ? why : "out of memory");
            ok = false;
        }
        free(ops);
    }
    int counts[3] = { 0 };
    for (int e = 0; ok && e < s0->n_e; e++)
        if (!c->o.has_steps || dump_spec_step(&c->o.sel, s0->e[e].step))
            ok = combine_step(c, k, ref, e, dir, counts);
    if (ok)
        fprintf(c->err, "tdbg-diff: %s: %d ranks compared as one run: %d tensors their mean, %d their rows "
                "concatenated, %d rank 0's (shapes that match neither)\n", k->dir, k->n, counts[COMBINE_MEAN],
                counts[COMBINE_CONCAT], counts[COMBINE_RANK0]);
    return ok;
}

void diff_combine_remove(const char *dir)
{
    if (!dir[0])
        return;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}
