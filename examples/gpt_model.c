/*
 * gpt_model.c — the GPT-2-style decoder of the gpt example.
 */
#include "gpt_model.h"

#include <math.h>
#include <stdio.h>

#define LN_EPS 1e-5f
#define INIT_STD 0.02f

bool gpt_config_check(const gpt_config *c, char *why, size_t n)
{
    if (c->embd % c->heads != 0) {
        snprintf(why, n, "--embd %d is not a multiple of --heads %d: each head gets embd/heads dims", c->embd,
                 c->heads);
        return false;
    }
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f)) {
        snprintf(why, n, "--dropout %g is not in [0, 1)", (double)c->dropout);
        return false;
    }
    return true;
}

static te_tensor *param(const char *name, int ndim, const int64_t *shape)
{
    return te_param_new(name, TE_F32, ndim, shape);
}

/* "h3.attn.c_attn.weight" and the like. */
static te_tensor *layer_param(int k, const char *what, int ndim, const int64_t *shape)
{
    char name[96];
    snprintf(name, sizeof name, "h%d.%s", k, what);
    return param(name, ndim, shape);
}

static bool layer_init(gpt_layer *l, int k, int64_t C, float proj_std)
{
    l->ln_1_w = layer_param(k, "ln_1.weight", te_shape(C));
    l->ln_1_b = layer_param(k, "ln_1.bias", te_shape(C));
    l->c_attn_w = layer_param(k, "attn.c_attn.weight", te_shape(3 * C, C));
    l->c_attn_b = layer_param(k, "attn.c_attn.bias", te_shape(3 * C));
    l->attn_proj_w = layer_param(k, "attn.c_proj.weight", te_shape(C, C));
    l->attn_proj_b = layer_param(k, "attn.c_proj.bias", te_shape(C));
    l->ln_2_w = layer_param(k, "ln_2.weight", te_shape(C));
    l->ln_2_b = layer_param(k, "ln_2.bias", te_shape(C));
    l->c_fc_w = layer_param(k, "mlp.c_fc.weight", te_shape(4 * C, C));
    l->c_fc_b = layer_param(k, "mlp.c_fc.bias", te_shape(4 * C));
    l->mlp_proj_w = layer_param(k, "mlp.c_proj.weight", te_shape(C, 4 * C));
    l->mlp_proj_b = layer_param(k, "mlp.c_proj.bias", te_shape(C));
    te_tensor *all[] = { l->ln_1_w, l->ln_1_b, l->c_attn_w, l->c_attn_b, l->attn_proj_w, l->attn_proj_b,
                         l->ln_2_w, l->ln_2_b, l->c_fc_w, l->c_fc_b, l->mlp_proj_w, l->mlp_proj_b };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!all[i])
            return false;
    /* parameters are zeroed when made: biases and layer norms' shifts stay so */
    te_fill(l->ln_1_w, 1.0f);
    te_fill(l->ln_2_w, 1.0f);
    te_init_normal(l->c_attn_w, 0.0f, INIT_STD);
    te_init_normal(l->attn_proj_w, 0.0f, proj_std);
    te_init_normal(l->c_fc_w, 0.0f, INIT_STD);
    te_init_normal(l->mlp_proj_w, 0.0f, proj_std);
    return true;
}

bool gpt_model_init(gpt_model *m, const gpt_config *c)
{
    *m = (gpt_model){ .cfg = *c };
    const int64_t C = c->embd;
    m->wte = param("wte", te_shape(GPT_VOCAB, C));
    m->wpe = param("wpe", te_shape(c->block, C));
    if (!m->wte || !m->wpe)
        return false;
    te_init_normal(m->wte, 0.0f, INIT_STD);
    te_init_normal(m->wpe, 0.0f, INIT_STD);
    /* GPT-2 scales the projections into the residual stream by the number
     * of residual adds, so its variance does not grow with depth */
    const float proj_std = INIT_STD / sqrtf(2.0f * (float)c->layers);
    for (int k = 0; k < c->layers; k++)
        if (!layer_init(&m->h[k], k, C, proj_std))
            return false;
    m->ln_f_w = param("ln_f.weight", te_shape(C));
    m->ln_f_b = param("ln_f.bias", te_shape(C));
    if (!m->ln_f_w || !m->ln_f_b)
        return false;
    te_fill(m->ln_f_w, 1.0f);
    return true;
}

int64_t gpt_param_numel(void)
{
    int64_t n = 0;
    for (int i = 0; i < te_param_count(); i++)
        n += te_params()[i]->numel;
    return n;
}

/* Rows [part*C, (part+1)*C) of c_attn's weight [3C, C] and bias [3C]: the
 * engine has no slice op, so the rows are gathered as one embedding row of
 * the weight seen as [3, C*C] (an index_select), and their gradient lands
 * in the one c_attn parameter as PyTorch's split would put it. */
static te_tensor *c_attn_part(te_tensor *x2, const gpt_layer *l, int part, const char *name, int64_t C)
{
    static const int32_t parts[3] = { 0, 1, 2 };
    te_tensor *idx = te_tensor_from(TE_I32, te_shape(1), &parts[part]);
    te_tensor *w = te_reshape(te_embedding(te_reshape(l->c_attn_w, 3, C * C), idx), C, C);
    te_tensor *b = te_reshape(te_embedding(te_reshape(l->c_attn_b, 3, C), idx), C);
    te_name_next(name);
    return te_linear(x2, w, b);
}

/* [B*T, C] -> [B, H, T, D] */
static te_tensor *split_heads(te_tensor *x2, int64_t B, int64_t T, int64_t H, int64_t D)
{
    return te_transpose(te_reshape(x2, B, T, H, D), 1, 2);
}

/* Causal self-attention of ln_1(x) [B*T, C], under the current scope hK/attn. */
static te_tensor *attention(const gpt_model *m, const gpt_layer *l, te_tensor *x2, int64_t B, int64_t T)
{
    const int64_t C = m->cfg.embd, H = m->cfg.heads, D = C / H;
    te_tensor *q = split_heads(c_attn_part(x2, l, 0, "q", C), B, T, H, D);
    te_tensor *k = split_heads(c_attn_part(x2, l, 1, "k", C), B, T, H, D);
    te_tensor *v = split_heads(c_attn_part(x2, l, 2, "v", C), B, T, H, D);
    te_tensor *y = te_causal_attention(q, k, v, m->cfg.dropout);
    y = te_reshape(te_transpose(y, 1, 2), B * T, C); /* heads merged: [B,T,H,D] -> [B*T, C] */
    te_name_next("c_proj");
    y = te_linear(y, l->attn_proj_w, l->attn_proj_b);
    te_name_next("resid_dropout");
    return te_dropout(y, m->cfg.dropout);
}

/* The MLP of ln_2(x) [B*T, C], under the current scope hK/mlp. */
static te_tensor *mlp(const gpt_model *m, const gpt_layer *l, te_tensor *x2)
{
    te_name_next("c_fc");
    te_tensor *y = te_gelu(te_linear(x2, l->c_fc_w, l->c_fc_b));
    te_name_next("c_proj");
    y = te_linear(y, l->mlp_proj_w, l->mlp_proj_b);
    te_name_next("resid_dropout");
    return te_dropout(y, m->cfg.dropout);
}

/* One pre-norm block on the residual stream x [B*T, C], scope hK. */
static te_tensor *block(const gpt_model *m, int k, te_tensor *x, int64_t B, int64_t T)
{
    const gpt_layer *l = &m->h[k];
    char scope[16];
    snprintf(scope, sizeof scope, "h%d", k);
    te_scope_push(scope);
    te_name_next("ln_1");
    te_tensor *a = te_layernorm(x, l->ln_1_w, l->ln_1_b, LN_EPS);
    te_scope_push("attn");
    a = attention(m, l, a, B, T);
    te_scope_pop();
    te_name_next("res_attn");
    x = te_add(x, a);
    te_name_next("ln_2");
    te_tensor *f = te_layernorm(x, l->ln_2_w, l->ln_2_b, LN_EPS);
    te_scope_push("mlp");
    f = mlp(m, l, f);
    te_scope_pop();
    te_name_next("res_mlp");
    x = te_add(x, f);
    te_scope_pop();
    return x;
}

te_tensor *gpt_forward(const gpt_model *m, te_tensor *x)
{
    if (!x)
        return NULL;
    const int64_t B = x->shape[0], T = x->shape[1], C = m->cfg.embd; /* x [B,T] */
    int32_t pos[GPT_MAX_BLOCK]; /* the flags keep T <= block <= GPT_MAX_BLOCK */
    for (int64_t t = 0; t < T; t++)
        pos[t] = (int32_t)t;
    te_name_next("wte");
    te_tensor *tok = te_embedding(m->wte, x);
    te_name_next("wpe");
    te_tensor *h = te_embedding(m->wpe, te_tensor_from(TE_I32, te_shape(T), pos));
    te_name_next("embed");
    h = te_reshape(te_add(tok, h), B * T, C); /* [B,T,C] + [T,C] */
    for (int k = 0; k < m->cfg.layers; k++)
        h = block(m, k, h, B, T);
    te_name_next("ln_f");
    h = te_layernorm(h, m->ln_f_w, m->ln_f_b, LN_EPS);
    te_name_next("lm_head");
    return te_linear(h, m->wte, NULL); /* tied: the head's weight is wte */
}
