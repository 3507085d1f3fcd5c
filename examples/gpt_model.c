/*
 * gpt_model.c — the GPT-2-style decoder of gpt_model.h, from engine ops.
 */
#include "gpt_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS 1e-5f

/* A parameter "PREFIX.NAME" (PREFIX "" for none) of the given shape. */
static te_tensor *param(const char *prefix, const char *name, int ndim, const int64_t *shape)
{
    char full[TE_NAME_MAX];
    snprintf(full, sizeof full, "%s%s%s", prefix, prefix[0] ? "." : "", name);
    return te_param_new(full, TE_F32, ndim, shape);
}

static bool layer_init(gpt_layer *l, int i, int64_t C, float proj_std)
{
    char h[16];
    snprintf(h, sizeof h, "h%d", i);
    l->ln_1_w = param(h, "ln_1.weight", te_shape(C));
    l->ln_1_b = param(h, "ln_1.bias", te_shape(C));
    l->c_attn_w = param(h, "attn.c_attn.weight", te_shape(3 * C, C));
    l->c_attn_b = param(h, "attn.c_attn.bias", te_shape(3 * C));
    l->attn_proj_w = param(h, "attn.c_proj.weight", te_shape(C, C));
    l->attn_proj_b = param(h, "attn.c_proj.bias", te_shape(C));
    l->ln_2_w = param(h, "ln_2.weight", te_shape(C));
    l->ln_2_b = param(h, "ln_2.bias", te_shape(C));
    l->c_fc_w = param(h, "mlp.c_fc.weight", te_shape(4 * C, C));
    l->c_fc_b = param(h, "mlp.c_fc.bias", te_shape(4 * C));
    l->mlp_proj_w = param(h, "mlp.c_proj.weight", te_shape(C, 4 * C));
    l->mlp_proj_b = param(h, "mlp.c_proj.bias", te_shape(C));
    if (!l->ln_1_w || !l->ln_1_b || !l->c_attn_w || !l->c_attn_b || !l->attn_proj_w ||
        !l->attn_proj_b || !l->ln_2_w || !l->ln_2_b || !l->c_fc_w || !l->c_fc_b || !l->mlp_proj_w ||
        !l->mlp_proj_b)
        return false;
    /* biases start at zero: te_param_new zeroes */
    te_fill(l->ln_1_w, 1.0f);
    te_fill(l->ln_2_w, 1.0f);
    te_init_normal(l->c_attn_w, 0.0f, 0.02f);
    te_init_normal(l->c_fc_w, 0.0f, 0.02f);
    te_init_normal(l->attn_proj_w, 0.0f, proj_std);
    te_init_normal(l->mlp_proj_w, 0.0f, proj_std);
    return true;
}

bool gpt_init(gpt_model *m, const gpt_config *c)
{
    if (c->layers < 1 || c->layers > GPT_MAX_LAYERS || c->heads < 1 || c->embd < 1 ||
        c->embd % c->heads != 0 || c->block < 1 || !(c->dropout >= 0.0f && c->dropout < 1.0f)) {
        fprintf(stderr, "gpt: bad configuration: %d layers (1..%d), %d heads, embd %d (a multiple of "
                        "the heads), block %d, dropout %g (in [0, 1))\n",
                c->layers, GPT_MAX_LAYERS, c->heads, c->embd, c->block, (double)c->dropout);
        return false;
    }
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    const int64_t C = c->embd;
    m->wte = param("", "wte", te_shape(GPT_VOCAB, C));
    m->wpe = param("", "wpe", te_shape(c->block, C));
    if (!m->wte || !m->wpe)
        return false;
    te_init_normal(m->wte, 0.0f, 0.02f);
    te_init_normal(m->wpe, 0.0f, 0.02f);
    const float proj_std = 0.02f / sqrtf(2.0f * (float)c->layers);
    for (int i = 0; i < c->layers; i++)
        if (!layer_init(&m->h[i], i, C, proj_std))
            return false;
    m->ln_f_w = param("", "ln_f.weight", te_shape(C));
    m->ln_f_b = param("", "ln_f.bias", te_shape(C));
    if (!m->ln_f_w || !m->ln_f_b)
        return false;
    te_fill(m->ln_f_w, 1.0f);
    return true;
}

int64_t gpt_param_count(const gpt_model *m)
{
    const int64_t C = m->cfg.embd;
    const int64_t per_layer = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) +
                              (4 * C * C + C);
    return GPT_VOCAB * C + (int64_t)m->cfg.block * C + m->cfg.layers * per_layer + 2 * C;
}

float gpt_lr(float lr, int warmup, int steps, int step)
{
    if (step < warmup)
        return lr * (float)(step + 1) / (float)warmup;
    const float lo = 0.1f * lr;
    const int span = steps - warmup;
    double ratio = span > 0 ? (double)(step - warmup) / span : 1.0;
    if (ratio > 1.0)
        ratio = 1.0;
    return lo + (lr - lo) * 0.5f * (1.0f + (float)cos(M_PI * ratio));
}

/* The constant i32 tensor [n] holding first, first + 1, ..., first + n - 1. */
static te_tensor *arange(int64_t first, int64_t n)
{
    int32_t *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        v[i] = (int32_t)(first + i);
    te_tensor *t = te_tensor_from(TE_I32, te_shape(n), v);
    free(v);
    return t;
}

/* x [N, C] @ rows [part*C, (part+1)*C) of c_attn, the part-th of q, k and v
 * as one linear of its own: the rows of the weight and the bias are picked
 * with an embedding (whose backward adds into the stacked parameter), which
 * costs [C, C] where splitting the product would cost [N, 3C]. */
static te_tensor *qkv_part(const gpt_layer *l, te_tensor *x, int part, int64_t C)
{
    static const char *const names[3][3] = { { "w_q", "b_q", "q" }, { "w_k", "b_k", "k" },
                                              { "w_v", "b_v", "v" } };
    te_tensor *rows = arange(part * C, C);
    if (!rows)
        return NULL;
    te_name_next(names[part][0]);
    te_tensor *w = te_embedding(l->c_attn_w, rows);
    te_tensor *b = te_reshape(l->c_attn_b, 3 * C, 1);
    te_name_next(names[part][1]);
    b = te_embedding(b, rows);
    b = te_reshape(b, C);
    te_name_next(names[part][2]);
    return te_linear(x, w, b);
}

/* [B*T, C] -> [B, H, T, D] */
static te_tensor *split_heads(te_tensor *x, int64_t B, int64_t T, int64_t H, int64_t D)
{
    return te_transpose(te_reshape(x, B, T, H, D), 1, 2);
}

/* x [B*T, C] -> [B*T, C]: causal self-attention of H heads, scope "attn". */
static te_tensor *attention(const gpt_model *m, const gpt_layer *l, te_tensor *x, int64_t B,
                            int64_t T)
{
    const int64_t C = m->cfg.embd, H = m->cfg.heads, D = C / H;
    te_scope_push("attn");
    te_tensor *q = split_heads(qkv_part(l, x, 0, C), B, T, H, D);
    te_tensor *k = split_heads(qkv_part(l, x, 1, C), B, T, H, D);
    te_tensor *v = split_heads(qkv_part(l, x, 2, C), B, T, H, D);
    te_tensor *y = te_causal_attention(q, k, v, m->cfg.dropout);
    y = te_reshape(te_transpose(y, 1, 2), B * T, C); /* heads side by side again */
    te_name_next("c_proj");
    y = te_linear(y, l->attn_proj_w, l->attn_proj_b);
    if (m->cfg.dropout > 0.0f)
        y = te_dropout(y, m->cfg.dropout);
    te_scope_pop();
    return y;
}

/* x [B*T, C] -> [B*T, C]: c_fc, GELU, c_proj, dropout, scope "mlp". */
static te_tensor *mlp(const gpt_model *m, const gpt_layer *l, te_tensor *x)
{
    te_scope_push("mlp");
    te_name_next("c_fc");
    x = te_gelu(te_linear(x, l->c_fc_w, l->c_fc_b));
    te_name_next("c_proj");
    x = te_linear(x, l->mlp_proj_w, l->mlp_proj_b);
    if (m->cfg.dropout > 0.0f)
        x = te_dropout(x, m->cfg.dropout);
    te_scope_pop();
    return x;
}

te_tensor *gpt_forward(const gpt_model *m, te_tensor *idx)
{
    if (!idx)
        return NULL;
    if (idx->ndim != 2 || idx->dtype != TE_I32 || idx->shape[1] > m->cfg.block) {
        char s[64];
        fprintf(stderr, "gpt: tokens %s %s: expected i32 [batch, T] with T <= block %d\n",
                te_dtype_name(idx->dtype), te_shape_str(idx->ndim, idx->shape, s, sizeof s), m->cfg.block);
        return NULL;
    }
    const int64_t B = idx->shape[0], T = idx->shape[1], C = m->cfg.embd;
    te_name_next("wte");
    te_tensor *tok = te_embedding(m->wte, idx); /* [B, T, C] */
    te_tensor *pos_idx = arange(0, T);
    te_name_next("wpe");
    te_tensor *pos = pos_idx ? te_embedding(m->wpe, pos_idx) : NULL; /* [T, C] */
    te_tensor *x = te_reshape(te_add(tok, pos), B * T, C);
    if (m->cfg.dropout > 0.0f)
        x = te_dropout(x, m->cfg.dropout);
    for (int i = 0; i < m->cfg.layers; i++) {
        const gpt_layer *l = &m->h[i];
        char scope[16];
        snprintf(scope, sizeof scope, "h%d", i);
        te_scope_push(scope);
        te_name_next("ln_1");
        te_tensor *a = te_layernorm(x, l->ln_1_w, l->ln_1_b, LN_EPS);
        x = te_add(x, attention(m, l, a, B, T));
        te_name_next("ln_2");
        te_tensor *f = te_layernorm(x, l->ln_2_w, l->ln_2_b, LN_EPS);
        x = te_add(x, mlp(m, l, f));
        te_scope_pop();
    }
    te_name_next("ln_f");
    x = te_layernorm(x, m->ln_f_w, m->ln_f_b, LN_EPS);
    te_name_next("head");
    return te_linear(x, m->wte, NULL); /* tied: wte's gradient sums both uses */
}
