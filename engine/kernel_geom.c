/* kernel_geom.c — the shape logic both backends share (kernel_geom.h). */
#include "kernel_geom.h"

#include <string.h>

void te_axis_split(const te_tensor *x, int axis, int64_t *outer, int64_t *len, int64_t *inner)
{
    if (axis == TE_ALL) {
        *outer = 1, *len = x->numel, *inner = 1;
        return;
    }
    int64_t o = 1, i = 1;
    for (int d = 0; d < axis; d++)
        o *= x->shape[d];
    for (int d = axis + 1; d < x->ndim; d++)
        i *= x->shape[d];
    *outer = o, *len = x->shape[axis], *inner = i;
}

te_tr_dims te_tr_split(const te_tensor *t, int a, int b)
{
    te_tr_dims d = { 1, t->shape[a], 1, t->shape[b], 1 };
    for (int i = 0; i < a; i++)
        d.pre *= t->shape[i];
    for (int i = a + 1; i < b; i++)
        d.mid *= t->shape[i];
    for (int i = b + 1; i < t->ndim; i++)
        d.post *= t->shape[i];
    return d;
}

void te_bcast_plan(te_bcast *p, const te_tensor *a, const te_tensor *b, const te_tensor *y)
{
    bool fa[TE_MAX_DIMS], fb[TE_MAX_DIMS]; /* operand spans the dim (not broadcast) */
    int k = 0;
    for (int i = 0; i < y->ndim; i++) {
        int64_t dy = y->shape[i];
        if (dy == 1)
            continue;
        int ia = i - (y->ndim - a->ndim), ib = i - (y->ndim - b->ndim);
        bool ha = ia >= 0 && a->shape[ia] == dy, hb = ib >= 0 && b->shape[ib] == dy;
        if (k > 0 && fa[k - 1] == ha && fb[k - 1] == hb) {
            p->d[k - 1] *= dy;
        } else {
            p->d[k] = dy;
            fa[k] = ha;
            fb[k] = hb;
            k++;
        }
    }
    if (k == 0) { /* one element */
        p->d[0] = 1;
        fa[0] = fb[0] = true;
        k = 1;
    }
    int64_t ma = 1, mb = 1;
    for (int i = k - 1; i >= 0; i--) {
        p->sa[i] = fa[i] ? ma : 0;
        p->sb[i] = fb[i] ? mb : 0;
        ma *= fa[i] ? p->d[i] : 1;
        mb *= fb[i] ? p->d[i] : 1;
    }
    p->k = k;
    p->len = p->d[k - 1];
    p->rows = p->len ? y->numel / p->len : 0; /* an empty tensor has no rows */
}

/* A leading dimension BLAS accepts: at least 1 even for an empty dim. */
static int ld(int64_t cols) { return cols > 0 ? (int)cols : 1; }

void te_mm_plan_of(const te_node *n, te_mm_plan *p)
{
    const te_tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];
    memset(p, 0, sizeof *p);
    p->ta = n->a.trans_a;
    p->tb = n->a.trans_b;
    p->M = (int)y->shape[y->ndim - 2];
    p->N = (int)y->shape[y->ndim - 1];
    p->K = (int)a->shape[a->ndim - (p->ta ? 2 : 1)];
    p->lda = ld(p->ta ? p->M : p->K);
    p->ldb = ld(p->tb ? p->K : p->N);
    p->nb = y->ndim - 2;
    int64_t ma = 1, mb = 1, my = 1;
    for (int i = p->nb - 1; i >= 0; i--) {
        int ia = i - (y->ndim - a->ndim), ib = i - (y->ndim - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        p->d[i] = y->shape[i];
        p->sa[i] = da == 1 ? 0 : ma;
        p->sb[i] = db == 1 ? 0 : mb;
        ma *= da;
        mb *= db;
        my *= y->shape[i];
    }
    p->na = ma;
    p->nbm = mb;
    p->batches = my;
    p->tall = p->nbm == 1 && !p->ta;
    /* A dim of a either y's or 1, so na == batches only when none is 1
     * where y's is not: then batch r reads a's matrix r. */
    p->strided = (p->na == p->batches || p->na == 1) && (p->nbm == p->batches || p->nbm == 1);
}

void te_mm_batch(const te_mm_plan *p, int64_t r, int64_t *ia, int64_t *ib)
{
    int64_t ja = 0, jb = 0;
    for (int i = p->nb - 1; i >= 0; i--) {
        int64_t idx = r % p->d[i];
        r /= p->d[i];
        ja += idx * p->sa[i];
        jb += idx * p->sb[i];
    }
    *ia = ja;
    *ib = jb;
}

static te_attn attn_args(const tg_attn *t)
{
    const te_tensor *q = t->scores->in[0];
    const te_node *dr = t->dropout;
    const bool drop = dr && dr->a.training && dr->a.p > 0.0f;
    return (te_attn){ .B = (int)q->shape[0], .H = (int)q->shape[1], .T = (int)q->shape[2],
                      .D = (int)q->shape[3], .scale = t->scale->a.scale, .p = drop ? dr->a.p : 0.0f,
                      .seed = drop ? dr->a.seed : 0, .elem_offset = drop ? dr->a.elem_offset : 0, .merged = t->merged, .dt = q->dtype };
}

/* Nothing of the chain's ops rounded yet: the fused kernel rounds only
 * what leaves it, and reports that on the ops whose results those are. */
static void round_clear(const tg_attn *t)
{
    te_node *const ns[] = { t->scores, t->scale, t->mask, t->cast_up, t->softmax, t->dropout, t->cast_down, t->out };
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        if (ns[i]) {
            memset(ns[i]->round, 0, sizeof ns[i]->round);
            ns[i]->rounded = false;
        }
}

te_attn tg_attn_forward_args(const tg_attn *t)
{
    /* The Dropout op's key for this step, as its own kernel would draw it. */
    if (t->dropout)
        t->dropout->a.seed = te_dropout_seed(t->dropout->name, te_step());
    te_attn a = attn_args(t);
    round_clear(t);
    if (a.dt != TE_F32) { /* o's rounding is out's (the merge's copies round nothing) */
        t->out->round[0].dtype = a.dt;
        t->out->rounded = true;
        a.round_o = &t->out->round[0];
    }
    return a;
}

te_attn tg_attn_backward_args(const tg_attn *t, te_attn_grads *g)
{
    te_tensor *q = t->scores->in[0], *k = t->scores->in[1], *v = t->out->in[1];
    const te_attn a = attn_args(t);
    int acc;
    memset(g, 0, sizeof *g);
    round_clear(t);
    const bool low = a.dt != TE_F32;
    /* dq, dk are the scores' input gradients, dv out's second */
    te_round_stats *rs[3] = { &t->scores->round[0], &t->scores->round[1], &t->out->round[1] };
    if (te_needs_grad(q)) {
        g->dq = te_grad_buf(q, &acc);
        g->acc_q = acc;
        g->round_q = low ? rs[0] : NULL;
    }
    if (te_needs_grad(k)) {
        g->dk = te_grad_buf(k, &acc);
        g->acc_k = acc;
        g->round_k = low ? rs[1] : NULL;
    }
    if (te_needs_grad(v)) {
        g->dv = te_grad_buf(v, &acc);
        g->acc_v = acc;
        g->round_v = low ? rs[2] : NULL;
    }
    for (int i = 0; i < 3 && low; i++)
        rs[i]->dtype = a.dt;
    t->scores->rounded = t->out->rounded = low;
    return a;
}

te_tensor *tg_bn_fold_conv(const tg_kernel *k, te_node *tmp, te_tensor *out)
{
    const te_node *conv = k->node;
    *tmp = *conv;
    tmp->in[1] = k->fold_w;
    tmp->in[2] = k->fold_b;
    tmp->n_in = 3;
    te_tensor *dst = k->act2 ? k->act2->out[0] : k->act->out[0];
    *out = *conv->out[0];
    out->data = dst->data;
    tmp->out[0] = out;
    return dst;
}
