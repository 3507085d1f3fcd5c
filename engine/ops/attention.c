/*
 * attention.c — causal self-attention composed of engine ops, each named in
 * the caller's scope, so that every intermediate (the scores, the masked
 * scores, the attention weights) is an op output the debugger can stop on,
 * print or patch. Graph mode may replace the chain by one fused kernel
 * (engine/graph), which reports the same op names.
 */
#include "te_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The causal masks made so far, one per sequence length T: [T,T] f32, 1
 * above the diagonal (a query must not see later keys). Persistent tensors,
 * not parameters: graph mode reads them in place as it reads parameters. */
static struct {
    te_tensor **masks;
    int n, cap;
} causal;

static te_tensor *causal_mask(int64_t T)
{
    for (int i = 0; i < causal.n; i++)
        if (causal.masks[i]->shape[0] == T)
            return causal.masks[i];
    if (causal.n == causal.cap) {
        int cap = causal.cap ? 2 * causal.cap : 4;
        te_tensor **p = realloc(causal.masks, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        causal.masks = p;
        causal.cap = cap;
    }
    te_tensor *m = te_tensor_persistent(TE_F32, te_shape(T, T));
    if (!m)
        return NULL;
    float *row = malloc((size_t)T * sizeof *row); /* written a row at a time, wherever m lives */
    if (!row) {
        te_tensor_free(m);
        return NULL;
    }
    for (int64_t i = 0; i < T; i++) {
        for (int64_t j = 0; j < T; j++)
            row[j] = j > i ? 1.0f : 0.0f;
        te_tensor_write(m, i * T, T, row);
    }
    free(row);
    snprintf(m->name, sizeof m->name, "causal_mask[%lld]", (long long)T);
    causal.masks[causal.n++] = m;
    return m;
}

void te_attention_shutdown(void)
{
    for (int i = 0; i < causal.n; i++)
        te_tensor_free(causal.masks[i]);
    free(causal.masks);
    causal.masks = NULL;
    causal.n = causal.cap = 0;
}

/* q, k, v [B,H,T,D] -> softmax(mask(q k^T / sqrt(D))) (dropped out) @ v. */
te_tensor *te_causal_attention_at(te_loc l, te_tensor *q, te_tensor *k, te_tensor *v, float dropout)
{
    if (!q || !k || !v) {
        if (te_error_code() == TE_OK)
            te_set_error(TE_ERR_INPUT, "causal_attention at %s:%d: input %s is NULL", l.file,
                         l.line, !q ? "q" : !k ? "k" : "v");
        return NULL;
    }
    if (q->ndim != 4 || !te_same_shape(q, k) || !te_same_shape(q, v)) {
        char sq[96], sk[96], sv[96];
        te_set_error(TE_ERR_SHAPE,
                     "causal_attention at %s:%d: q %s, k %s and v %s must have one shape "
                     "[B,H,T,D]",
                     l.file, l.line, te_shape_str(q->ndim, q->shape, sq, sizeof sq),
                     te_shape_str(k->ndim, k->shape, sk, sizeof sk),
                     te_shape_str(v->ndim, v->shape, sv, sizeof sv));
        return NULL;
    }
    te_tensor *mask = causal_mask(q->shape[2]);
    if (!mask) {
        te_set_error(TE_ERR_NOMEM, "causal_attention at %s:%d: out of memory for the mask",
                     l.file, l.line);
        return NULL;
    }
    te_name_next("scores");
    te_tensor *att = te_matmul_t_at(l, q, k, false, true);
    te_name_next("scale");
    att = te_scale_at(l, att, 1.0f / sqrtf((float)q->shape[3]));
    te_name_next("mask");
    att = te_masked_fill_at(l, att, mask, -INFINITY);
    te_name_next("softmax");
    att = te_softmax_at(l, att, -1);
    if (dropout != 0.0f) {
        te_name_next("dropout");
        att = te_dropout_at(l, att, dropout);
    }
    te_name_next("out");
    return te_matmul_at(l, att, v);
}
