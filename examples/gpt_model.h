/*
 * gpt_model.h — a GPT-2-style decoder on byte tokens, built with engine ops.
 *
 *   x [B,T] bytes -> wte[x] + wpe[0..T-1]                       [B,T,C]
 *   blocks h0..hL-1, pre-norm:
 *     x = x + dropout(c_proj(attention(c_attn(ln_1(x)))))      scope hK/attn
 *     x = x + dropout(c_proj(gelu(c_fc(ln_2(x)))))             scope hK/mlp
 *   ln_f, then the head: x @ wte^T (the embedding tied to it)  [B*T,256]
 *
 * Parameter names follow GPT-2's PyTorch modules (wte, wpe, h0.ln_1.weight,
 * h0.attn.c_attn.weight, ..., ln_f.bias), weights [out, in] as nn.Linear's,
 * so a PyTorch state dict maps onto te_param_find() name by name.
 */
#ifndef TDBG_EXAMPLES_GPT_MODEL_H
#define TDBG_EXAMPLES_GPT_MODEL_H

#include "te.h"

#define GPT_VOCAB 256
#define GPT_MAX_LAYERS 64
#define GPT_MAX_BLOCK 4096

typedef struct gpt_config {
    int layers, heads, embd, block;
    float dropout; /* attention weights and both residual branches */
} gpt_config;

typedef struct gpt_layer {
    te_tensor *ln_1_w, *ln_1_b;
    te_tensor *c_attn_w, *c_attn_b;  /* [3C, C], [3C]: q, k, v rows in that order */
    te_tensor *attn_proj_w, *attn_proj_b;
    te_tensor *ln_2_w, *ln_2_b;
    te_tensor *c_fc_w, *c_fc_b;      /* [4C, C] */
    te_tensor *mlp_proj_w, *mlp_proj_b;
} gpt_layer;

typedef struct gpt_model {
    gpt_config cfg;
    te_tensor *wte, *wpe;            /* [256, C], [block, C] */
    gpt_layer h[GPT_MAX_LAYERS];
    te_tensor *ln_f_w, *ln_f_b;
} gpt_model;

/* Checks c (embd divisible by heads, sizes in range): false with the
 * reason in why (n bytes). */
bool gpt_config_check(const gpt_config *c, char *why, size_t n);

/* Registers the parameters and initialises them as GPT-2 does: weights
 * N(0, 0.02), the residual projections N(0, 0.02/sqrt(2 layers)), biases
 * 0, layer norms 1 and 0. False with te_error() set when out of memory. */
bool gpt_model_init(gpt_model *m, const gpt_config *c);

/* x i32 [B,T], T <= block -> logits [B*T, 256], or NULL with te_error(). */
te_tensor *gpt_forward(const gpt_model *m, te_tensor *x);

/* Parameters in the model: the sum of their sizes. */
int64_t gpt_param_numel(void);

#endif
