/* diff_ranks.c — tdbg-diff --ranks DIR: the ranks of one data-parallel run
 * against rank 0, step by step. What data parallelism keeps identical on
 * every rank (the parameters after each update, what an all-reduce or a
 * broadcast hands out) must agree bit for bit: the first step, op, tensor
 * and rank where it does not is drift. The rest (activations, local
 * gradients) is each rank's own shard: only the spread of its statistics
 * across the ranks is shown. */
#include "diff.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the ranks --------------------------------------------------------------------- */

/* R when name is "rank-R" (digits only), else -1. */
static int rank_of(const char *name)
{
    if (strncmp(name, "rank-", 5) != 0 || !name[5])
        return -1;
    long r = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || r > 100000)
            return -1;
        r = r * 10 + (*p - '0');
    }
    return (int)r;
}

bool diff_is_ranks(const char *dir)
{
    char path[PATH_MAX + 16];
    struct stat st;
    snprintf(path, sizeof path, "%s/run.h5", dir);
    if (stat(path, &st) == 0)
        return false;
    snprintf(path, sizeof path, "%s/rank-0", dir);
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The number of ranks: one more than the highest rank-R in dir; -1 with a
 * message when dir cannot be read or has no rank-0. */
static int ranks_count(diff_ctx *c, const char *dir, bool **there)
{
    DIR *d = opendir(dir);
    if (!d) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s: cannot open: %s", dir, strerror(errno));
        return -1;
    }
    int n = 0, cap = 0;
    bool *seen = NULL;
    for (struct dirent *e; (e = readdir(d));) {
        const int r = rank_of(e->d_name);
        if (r < 0)
            continue;
        if (r >= cap) {
            const int ncap = r + 8;
            bool *s = realloc(seen, (size_t)ncap * sizeof *s);
            if (!s)
                break;
            memset(s + cap, 0, (size_t)(ncap - cap) * sizeof *s);
            seen = s;
            cap = ncap;
        }
        seen[r] = true;
        n = r + 1 > n ? r + 1 : n;
    }
    closedir(d);
    if (n == 0 || !seen[0]) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s: not a data-parallel dump (no rank-0 directory in it)", dir);
        free(seen);
        return -1;
    }
    *there = seen;
    return n;
}

/* The steps of s as text, for messages: "0-3, 7". */
static void steps_text(const diff_side *s, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->n_e && len < n; i++) {
        const bool run_on = i > 0 && s->e[i].step == s->e[i - 1].step + 1;
        const bool run_ends = i + 1 == s->n_e || s->e[i + 1].step != s->e[i].step + 1;
        if (!run_on)
            len += (size_t)snprintf(buf + len, n - len, "%s%lld", len ? ", " : "", (long long)s->e[i].step);
        else if (run_ends)
            len += (size_t)snprintf(buf + len, n - len, "-%lld", (long long)s->e[i].step);
    }
}

static bool same_steps(const diff_side *a, const diff_side *b)
{
    if (a->n_e != b->n_e)
        return false;
    for (int i = 0; i < a->n_e; i++)
        if (a->e[i].step != b->e[i].step)
            return false;
    return true;
}

bool diff_ranks_open(diff_ctx *c, diff_ranks *r, const char *dir)
{
    memset(r, 0, sizeof *r);
    r->dir = dir;
    bool *there = NULL;
    const int n = ranks_count(c, dir, &there);
    if (n < 0)
        return false;
    r->path = calloc((size_t)n, sizeof *r->path);
    r->side = calloc((size_t)n, sizeof *r->side);
    if (!r->path || !r->side) {
        free(there);
        diff_complain(c, DIFF_RC_TROUBLE, "out of memory");
        return false;
    }
    bool ok = true;
    for (int i = 0; i < n; i++) {
        snprintf(r->path[i], sizeof r->path[i], "%s/rank-%d", dir, i);
        if (!there[i]) {
            diff_complain(c, DIFF_RC_TROUBLE, "%s: missing (the ranks found go up to rank-%d)", r->path[i], n - 1);
            ok = false;
        }
    }
    free(there);
    for (int i = 0; ok && i < n; i++) {
        diff_side *s = &r->side[i];
        if (!diff_side_open(c, s, r->path[i])) {
            ok = false;
        } else if (s->n_e == 0 && !s->has_run) {
            diff_complain(c, DIFF_RC_TROUBLE, "%s: not a dump (no run.h5 and no step file)", r->path[i]);
            ok = false;
        } else if (i > 0 && !same_steps(&r->side[0], s)) {
            char s0[512], si[512];
            steps_text(&r->side[0], s0, sizeof s0);
            steps_text(s, si, sizeof si);
            diff_complain(c, DIFF_RC_TROUBLE, "%s: holds steps %s, rank-0 holds %s: the ranks of a run dump the "
                          "same steps", r->path[i], si[0] ? si : "none", s0[0] ? s0 : "none");
            ok = false;
        }
    }
    const diff_side *s0 = &r->side[0];
    if (ok && s0->has_run && s0->meta.ranks > 0 && s0->meta.ranks != n) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s/rank-%d: missing (%s/run.h5 says the job had %d ranks, %s holds %d)",
                      dir, s0->meta.ranks > n ? n : s0->meta.ranks, r->path[0], s0->meta.ranks, dir, n);
        ok = false;
    }
    r->n = n;
    return ok;
}

void diff_ranks_close(diff_ranks *r)
{
    for (int i = 0; r->side && i < r->n; i++)
        diff_side_close(&r->side[i]);
    free(r->side);
    free(r->path);
    memset(r, 0, sizeof *r);
}

/* ---- one step ---------------------------------------------------------------------- */

/* Must this tensor be the same on every rank? The parameters after each
 * update (update outputs, and the params and grads pseudo-ops, taken as
 * the step ends), and what a collective hands out. */
static bool must_agree(const dump_tensor_info *t)
{
    return t->io == DUMP_OUT && (t->phase == TE_PHASE_UPDATE || strcmp(t->op_type, "AllReduce") == 0 ||
                                 strcmp(t->op_type, "Broadcast") == 0);
}

typedef struct stats {
    double mean, rms, min, max;
    int64_t nonfinite;
} stats;

static stats stats_of(const float *v, int64_t n)
{
    stats s = { 0, 0, INFINITY, -INFINITY, 0 };
    double sum = 0, sq = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) {
            s.nonfinite++;
            continue;
        }
        sum += v[i];
        sq += (double)v[i] * v[i];
        s.min = v[i] < s.min ? v[i] : s.min;
        s.max = v[i] > s.max ? v[i] : s.max;
        k++;
    }
    s.mean = k ? sum / (double)k : 0;
    s.rms = k ? sqrt(sq / (double)k) : 0;
    if (!k)
        s.min = s.max = 0;
    return s;
}

/* A tensor whose statistics are compared: its spread across the ranks,
 * the largest over the steps of max - min over the ranks. */
typedef struct spread {
    char op[TE_NAME_MAX], io[16];
    int exec;
    double mean, rms, min, max;
    int64_t nonfinite;          /* all ranks, all steps */
} spread;

/* What the comparison found so far. */
typedef struct ranks_run {
    diff_ranks r;
    int steps, agreed, drifted;        /* tensors that must agree: compared, differing */
    bool has_drift;
    int64_t drift_step;
    char drift_op[TE_NAME_MAX], drift_type[TE_NAME_MAX], drift_io[16], drift_tensor[TE_NAME_MAX];
    int drift_rank;
    double drift_max_abs;
    char drift_shape[160];             /* "" or the shapes that differ */
    bool has_nonfinite;                /* a rank non-finite where rank 0 is finite */
    int64_t nf_step, nf_count;
    int nf_rank;
    char nf_op[TE_NAME_MAX], nf_io[16];
    spread *sp;
    int n_sp, cap_sp;
} ranks_run;

static spread *spread_of(ranks_run *k, const dump_tensor_info *t, const char *io)
{
    for (int i = 0; i < k->n_sp; i++)
        if (strcmp(k->sp[i].op, t->op) == 0 && strcmp(k->sp[i].io, io) == 0)
            return &k->sp[i];
    if (k->n_sp == k->cap_sp) {
        const int cap = k->cap_sp ? 2 * k->cap_sp : 32;
        spread *s = realloc(k->sp, (size_t)cap * sizeof *s);
        if (!s)
            return NULL;
        k->sp = s;
        k->cap_sp = cap;
    }
    spread *s = &k->sp[k->n_sp++];
    memset(s, 0, sizeof *s);
    snprintf(s->op, sizeof s->op, "%s", t->op);
    snprintf(s->io, sizeof s->io, "%s", io);
    s->exec = t->exec_index;
    return s;
}

/* Is t an input that no dumped op of the step wrote (a batch, a
 * parameter)? Those are shown once, as the first op's input. */
static bool input_of_its_own(dump_step_reader *r0, const dump_tensor_info *t)
{
    for (int i = 0; i < dump_step_count(r0); i++) {
        const dump_tensor_info *o = dump_step_tensor(r0, i);
        if (strcmp(o->tensor, t->tensor) == 0 && (o->io == DUMP_OUT || o->exec_index < t->exec_index ||
                                                  (o->exec_index == t->exec_index && o->slot < t->slot)))
            return o == t;
    }
    return true;
}

static bool read_f32(diff_ctx *c, dump_step_reader *rd, int i, float **v)
{
    char why[DIFF_WHY_MAX];
    const dump_tensor_info *t = dump_step_tensor(rd, i);
    *v = malloc(t->numel ? (size_t)t->numel * sizeof **v : 1);
    if (!*v) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s: %s: out of memory", dump_step_path(rd), t->path);
        return false;
    }
    if (!dump_step_read_f32(rd, i, *v, why, sizeof why)) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
        free(*v);
        *v = NULL;
        return false;
    }
    return true;
}

static bool same_shape(const dump_tensor_info *a, const dump_tensor_info *b)
{
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape) == 0 &&
           a->dtype == b->dtype;
}

/* A tensor that must agree: rank `rank`'s bytes against rank 0's. */
static void agree(diff_ctx *c, ranks_run *k, int64_t step, dump_step_reader *r0, int i0, dump_step_reader *rr,
                  int ir, int rank)
{
    const dump_tensor_info *a = dump_step_tensor(r0, i0), *b = dump_step_tensor(rr, ir);
    char io[16], shape[160] = "";
    snprintf(io, sizeof io, "%s%d", a->io == DUMP_IN ? "in" : "out", a->slot);
    double max_abs = 0;
    bool differs;
    if (!same_shape(a, b)) {
        char sa[64], sb[64];
        snprintf(shape, sizeof shape, "%s %s on rank 0, %s %s on rank %d", te_dtype_name(a->dtype),
                 te_shape_str(a->ndim, a->shape, sa, sizeof sa), te_dtype_name(b->dtype),
                 te_shape_str(b->ndim, b->shape, sb, sizeof sb), rank);
        differs = true;
    } else {
        float *va, *vb = NULL;
        if (!read_f32(c, r0, i0, &va) || !read_f32(c, rr, ir, &vb)) {
            free(va);
            return;
        }
        char why[DIFF_WHY_MAX];
        void *ra = malloc(a->nbytes ? a->nbytes : 1), *rb = malloc(b->nbytes ? b->nbytes : 1);
        differs = !ra || !rb || !dump_step_read_raw(r0, i0, ra, why, sizeof why) ||
                  !dump_step_read_raw(rr, ir, rb, why, sizeof why) || memcmp(ra, rb, a->nbytes) != 0;
        for (int64_t e = 0; differs && e < a->numel; e++) {
            const double d = fabs((double)vb[e] - (double)va[e]);
            max_abs = isnan(d) ? INFINITY : d > max_abs ? d : max_abs;
        }
        free(ra);
        free(rb);
        free(va);
        free(vb);
    }
    k->agreed++;
    if (!differs)
        return;
    k->drifted++;
    if (k->has_drift)
        return;
    k->has_drift = true;
    k->drift_step = step;
    k->drift_rank = rank;
    k->drift_max_abs = max_abs;
    snprintf(k->drift_op, sizeof k->drift_op, "%s", a->op);
    snprintf(k->drift_type, sizeof k->drift_type, "%s", a->op_type);
    snprintf(k->drift_io, sizeof k->drift_io, "%s", io);
    snprintf(k->drift_tensor, sizeof k->drift_tensor, "%s", a->tensor);
    snprintf(k->drift_shape, sizeof k->drift_shape, "%s", shape);
}

/* A rank's own tensor: its statistics against the other ranks'. */
static void spread_add(diff_ctx *c, ranks_run *k, int64_t step, dump_step_reader **rd, const int *idx)
{
    const dump_tensor_info *t = dump_step_tensor(rd[0], idx[0]);
    char io[16];
    snprintf(io, sizeof io, "%s%d", t->io == DUMP_IN ? "in" : "out", t->slot);
    stats lo = { INFINITY, INFINITY, INFINITY, INFINITY, 0 }, hi = { -INFINITY, -INFINITY, -INFINITY, -INFINITY, 0 };
    int64_t nonfinite = 0, nf0 = 0;
    for (int r = 0; r < k->r.n; r++) {
        float *v;
        if (idx[r] < 0 || !read_f32(c, rd[r], idx[r], &v))
            continue;
        const stats s = stats_of(v, dump_step_tensor(rd[r], idx[r])->numel);
        free(v);
        lo = (stats){ fmin(lo.mean, s.mean), fmin(lo.rms, s.rms), fmin(lo.min, s.min), fmin(lo.max, s.max), 0 };
        hi = (stats){ fmax(hi.mean, s.mean), fmax(hi.rms, s.rms), fmax(hi.min, s.min), fmax(hi.max, s.max), 0 };
        nonfinite += s.nonfinite;
        if (r == 0)
            nf0 = s.nonfinite;
        if (r > 0 && nf0 == 0 && s.nonfinite > 0 && !k->has_nonfinite) {
            k->has_nonfinite = true;
            k->nf_step = step;
            k->nf_rank = r;
            k->nf_count = s.nonfinite;
            snprintf(k->nf_op, sizeof k->nf_op, "%s", t->op);
            snprintf(k->nf_io, sizeof k->nf_io, "%s", io);
        }
    }
    spread *s = spread_of(k, t, io);
    if (!s || hi.mean < lo.mean)
        return;
    s->mean = fmax(s->mean, hi.mean - lo.mean);
    s->rms = fmax(s->rms, hi.rms - lo.rms);
    s->min = fmax(s->min, hi.min - lo.min);
    s->max = fmax(s->max, hi.max - lo.max);
    s->nonfinite += nonfinite;
}

static bool selected(const diff_ctx *c, const dump_tensor_info *t)
{
    if (c->o.has_ops && !dump_spec_tensor(&c->o.sel, t->path, t->exec_index))
        return false;
    return t->io == DUMP_IN ? (c->o.io & DUMP_IO_INPUTS) != 0 : (c->o.io & DUMP_IO_OUTPUTS) != 0;
}

static void step_compare(diff_ctx *c, ranks_run *k, int e)
{
    const int n = k->r.n;
    dump_step_reader **rd = calloc((size_t)n, sizeof *rd);
    int *idx = calloc((size_t)n, sizeof *idx);
    bool ok = rd && idx;
    if (!ok)
        diff_complain(c, DIFF_RC_TROUBLE, "out of memory");
    const int64_t step = k->r.side[0].e[e].step;
    for (int r = 0; ok && r < n; r++) {
        char path[PATH_MAX + 64], why[DIFF_WHY_MAX];
        snprintf(path, sizeof path, "%s/%s", k->r.path[r], k->r.side[r].e[e].name);
        if (!(rd[r] = dump_step_open(path, why, sizeof why))) {
            diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
            ok = false;
        }
    }
    for (int i = 0; ok && i < dump_step_count(rd[0]); i++) {
        const dump_tensor_info *t = dump_step_tensor(rd[0], i);
        if (!selected(c, t))
            continue;
        idx[0] = i;
        for (int r = 1; r < n; r++)
            if ((idx[r] = dump_step_find(rd[r], t->path)) < 0)
                diff_complain(c, DIFF_RC_SAME, "%s: step %lld: no %s (rank-0 has it)", k->r.path[r],
                              (long long)step, t->path);
        if (must_agree(t)) {
            for (int r = 1; r < n; r++)
                if (idx[r] >= 0)
                    agree(c, k, step, rd[0], i, rd[r], idx[r], r);
        } else if (t->io == DUMP_OUT || input_of_its_own(rd[0], t)) {
            spread_add(c, k, step, rd, idx);
        }
    }
    for (int r = 0; rd && r < n; r++)
        dump_step_close(rd[r]);
    free(rd);
    free(idx);
    k->steps += ok;
}

/* ---- the report -------------------------------------------------------------------- */

static void report(diff_ctx *c, const ranks_run *k)
{
    FILE *f = c->out;
    const diff_side *s0 = &k->r.side[0];
    char steps[512];
    steps_text(s0, steps, sizeof steps);
    fprintf(f, "%d ranks in %s (rank-0 .. rank-%d), steps %s\n", k->r.n, k->r.dir, k->r.n - 1, steps);
    if (k->n_sp > 0) {
        int w = 2;
        for (int i = 0; i < k->n_sp; i++)
            w = (int)strlen(k->sp[i].op) > w ? (int)strlen(k->sp[i].op) : w;
        fprintf(f, "\neach rank's own tensors: spread of their statistics across the ranks (the largest max - min "
                "over the ranks in a step; informational)\n");
        fprintf(f, "%-*s  %-5s  %9s  %9s  %9s  %9s  %9s\n", w, "op", "io", "mean", "rms", "min", "max",
                "nonfinite");
        for (int i = 0; i < k->n_sp; i++) {
            const spread *p = &k->sp[i];
            fprintf(f, "%-*s  %-5s  %9.2e  %9.2e  %9.2e  %9.2e  %9lld\n", w, p->op, p->io, p->mean, p->rms, p->min,
                    p->max, (long long)p->nonfinite);
        }
    }
    fputc('\n', f);
    if (k->has_nonfinite)
        fprintf(f, "non-finite: step %lld, %s %s: %lld non-finite values on rank %d, none on rank 0\n",
                (long long)k->nf_step, k->nf_op, k->nf_io, (long long)k->nf_count, k->nf_rank);
    if (k->has_drift && k->drift_shape[0])
        fprintf(f, "drift: step %lld, %s (%s) %s %s: %s\n", (long long)k->drift_step, k->drift_op, k->drift_type,
                k->drift_io, k->drift_tensor, k->drift_shape);
    else if (k->has_drift)
        fprintf(f, "drift: step %lld, %s (%s) %s %s differs on rank %d from rank 0: max_abs %.2e\n",
                (long long)k->drift_step, k->drift_op, k->drift_type, k->drift_io, k->drift_tensor, k->drift_rank,
                k->drift_max_abs);
    if (k->has_drift)
        fprintf(f, "%d of %d comparisons of tensors that must agree differ (from step %lld on)\n", k->drifted,
                k->agreed, (long long)k->drift_step);
    else
        fprintf(f, "no drift: %d comparisons of tensors that must agree (update outputs, AllReduce and "
                "Broadcast outputs) bit for bit identical in %d steps\n", k->agreed, k->steps);
}

int diff_ranks_main(diff_ctx *c)
{
    ranks_run k;
    memset(&k, 0, sizeof k);
    if (diff_ranks_open(c, &k.r, c->o.ranks)) {
        for (int e = 0; e < k.r.side[0].n_e; e++)
            if (!c->o.has_steps || dump_spec_step(&c->o.sel, k.r.side[0].e[e].step))
                step_compare(c, &k, e);
        if (k.steps == 0 && c->rc < DIFF_RC_TROUBLE)
            diff_complain(c, DIFF_RC_TROUBLE, "%s: no step to compare%s", c->o.ranks,
                          c->o.has_steps ? " among --steps" : "");
        else if (k.r.n < 2)
            diff_complain(c, DIFF_RC_SAME, "%s: one rank only: nothing to compare it with", c->o.ranks);
        if (!c->o.quiet && k.steps > 0)
            report(c, &k);
        if ((k.has_drift || k.has_nonfinite) && c->rc < DIFF_RC_DIFFER)
            c->rc = DIFF_RC_DIFFER;
    }
    diff_ranks_close(&k.r);
    free(k.sp);
    return c->rc;
}
