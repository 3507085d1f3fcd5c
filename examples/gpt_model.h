/*
 * gpt_model.h — a GPT-2-style decoder built from engine ops, shared by
 * examples/gpt.c and the PyTorch parity test (tests/test_gpt.c).
 *
 * Byte-level tokens (a vocabulary of 256); pre-norm blocks h0..hN-1, each
 *   x = x + attn(ln_1(x)),  x = x + mlp(ln_2(x))
 * where attn is c_attn (C -> 3C, split into q, k, v of H heads), causal
 * self-attention, c_proj (C -> C) and dropout, and mlp is c_fc (C -> 4C),
 * exact GELU, c_proj (4C -> C) and dropout; then ln_f and a head that is
 * the token embedding wte again (tied, no bias). The parameters are named
 * as nanoGPT's state dict without "transformer.": wte, wpe, h0.ln_1.weight,
 * h0.ln_1.bias, h0.attn.c_attn.weight, h0.attn.c_attn.bias,
 * h0.attn.c_proj.weight, ..., h0.mlp.c_fc.weight, ..., ln_f.weight,
 * ln_f.bias; linear weights are [out, in] as nn.Linear's. The ops are named
 * in scopes h0/attn, h0/mlp, ...: h0/attn/softmax, h0/mlp/c_fc, h0/ln_1.
 */
#ifndef TDBG_EXAMPLES_GPT_MODEL_H
#define TDBG_EXAMPLES_GPT_MODEL_H

#include "te.h"

#define GPT_VOCAB 256
#define GPT_MAX_LAYERS 32

typedef struct gpt_config {
    int layers, heads, embd, block; /* embd a multiple of heads; block: the longest context */
    float dropout;                  /* after attention's softmax, c_proj and the MLP */
} gpt_config;

typedef struct gpt_layer {
    te_tensor *ln_1_w, *ln_1_b;
    te_tensor *c_attn_w, *c_attn_b;   /* [3C, C], [3C]: q, k, v stacked */
    te_tensor *attn_proj_w, *attn_proj_b;
    te_tensor *ln_2_w, *ln_2_b;
    te_tensor *c_fc_w, *c_fc_b;       /* [4C, C], [4C] */
    te_tensor *mlp_proj_w, *mlp_proj_b;
} gpt_layer;

typedef struct gpt_model {
    gpt_config cfg;
    te_tensor *wte, *wpe;             /* [256, C] (also the head), [block, C] */
    gpt_layer h[GPT_MAX_LAYERS];
    te_tensor *ln_f_w, *ln_f_b;
} gpt_model;

/* Registers the model's parameters with the engine (te_init first) and
 * initialises them as GPT-2 does: N(0, 0.02) for the embeddings and the
 * linear weights, 0.02 / sqrt(2 layers) for the c_proj weights that end a
 * residual branch, zero biases, LayerNorm weights 1. Returns false with
 * te_error() set on a bad configuration or when out of memory. */
bool gpt_init(gpt_model *m, const gpt_config *c);

/* Logits [B*T, 256] of the tokens idx (i32 [B, T], T <= block), or NULL
 * with te_error() set. Usable inside a te_graph step function. */
te_tensor *gpt_forward(const gpt_model *m, te_tensor *idx);

/* Parameters in the model. */
int64_t gpt_param_count(const gpt_model *m);

/* The learning rate of step (from 0) of steps: lr * (step + 1) / warmup
 * during the warm-up, then a cosine from lr down to 10% of lr at the end. */
float gpt_lr(float lr, int warmup, int steps, int step);

#endif
