/*
 * cnn.c — a small convolutional network on procedurally drawn shapes.
 *
 *   conv1: conv3x3 3->C1 + batch norm + ReLU        [N,C1,32,32]
 *   conv2: conv3x3 C1->C2 + batch norm + ReLU       [N,C2,32,32]
 *   maxpool 2x2                                     [N,C2,16,16]
 *   conv3: conv3x3 C2->C3 + batch norm + ReLU       [N,C3,16,16]
 *   global average pool                             [N,C3]
 *   fc: linear C3->10                               [N,10]
 *
 * with (C1, C2, C3) = (32, 64, 128) unless --channels says otherwise.
 * Convolutions have no bias: the batch norm after each one has its own.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

#define TEST_SIZE 1024
#define BN_MOMENTUM 0.1f
#define BN_EPS 1e-5f

typedef struct {
    int channels[3];
} cnn_cfg;

typedef struct {
    te_tensor *w;                       /* convK.weight [out, in, 3, 3] */
    te_tensor *gamma, *beta;            /* bnK.weight, bnK.bias [out] */
    te_tensor *running_mean, *running_var;
} conv_block;

typedef struct {
    conv_block conv[3];
    te_tensor *fc_w, *fc_b;
} cnn;

static bool set_channels(const char *v, void *cfg, char *why, size_t n)
{
    cnn_cfg *c = cfg;
    snprintf(why, n, "expected three widths, comma separated, each a whole number in 1..4096, e.g. 32,64,128");
    return ex_parse_list(v, c->channels, 3, 4096) == 3;
}

static const ex_flag cnn_flags[] = {
    { "--channels", "C1,C2,C3", "output channels of conv1, conv2, conv3 (32,64,128)", set_channels },
    { NULL, NULL, NULL, NULL },
};

/* conv3x3 (pad 1) + batch norm + ReLU, under scope convK */
static te_tensor *block_forward(const conv_block *b, int k, te_tensor *x)
{
    char scope[16];
    snprintf(scope, sizeof scope, "conv%d", k);
    te_scope_push(scope);
    x = te_conv2d(x, b->w, NULL, 1, 1);
    x = te_batchnorm(x, b->gamma, b->beta, b->running_mean, b->running_var, BN_MOMENTUM, BN_EPS);
    x = te_relu(x);
    te_scope_pop();
    return x;
}

/* x [N,3,32,32] -> logits [N,10] */
static te_tensor *cnn_forward(const void *model, te_tensor *x)
{
    const cnn *m = model;
    x = block_forward(&m->conv[0], 1, x);
    x = block_forward(&m->conv[1], 2, x);
    x = te_maxpool2d(x, 2, 2, 0);
    x = block_forward(&m->conv[2], 3, x);
    x = te_global_avgpool(x);
    te_scope_push("fc");
    x = te_linear(x, m->fc_w, m->fc_b);
    te_scope_pop();
    return x;
}

/* A running statistic: an engine buffer (te_buffers lists it for checkpoints
 * and snapshots; te_shutdown frees it). */
static te_tensor *running_stat(int k, const char *what, int c, float value)
{
    char name[32];
    snprintf(name, sizeof name, "bn%d.%s", k, what);
    te_tensor *t = te_buffer_new(name, TE_F32, te_shape(c));
    if (t)
        te_fill(t, value);
    return t;
}

static bool block_init(conv_block *b, int k, int in, int out)
{
    char name[32];
    snprintf(name, sizeof name, "conv%d.weight", k);
    b->w = te_param_new(name, TE_F32, te_shape(out, in, 3, 3));
    snprintf(name, sizeof name, "bn%d.weight", k);
    b->gamma = te_param_new(name, TE_F32, te_shape(out));
    snprintf(name, sizeof name, "bn%d.bias", k);
    b->beta = te_param_new(name, TE_F32, te_shape(out));
    b->running_mean = running_stat(k, "running_mean", out, 0.0f);
    b->running_var = running_stat(k, "running_var", out, 1.0f);
    if (!b->w || !b->gamma || !b->beta || !b->running_mean || !b->running_var)
        return false;
    te_init_linear(b->w, NULL);
    te_fill(b->gamma, 1.0f); /* beta stays 0 */
    /* f32 at O2 from the start (the first batch norm would do it after
     * te_amp_set rounded them: exact from 1 and 0, not from a resumed
     * run's trained values). */
    return te_amp_keep_f32(b->gamma) == TE_OK && te_amp_keep_f32(b->beta) == TE_OK;
}

static bool cnn_init(cnn *m, const cnn_cfg *c, int classes)
{
    int in = 3;
    for (int k = 0; k < 3; k++) {
        if (!block_init(&m->conv[k], k + 1, in, c->channels[k]))
            return false;
        in = c->channels[k];
    }
    m->fc_w = te_param_new("fc.weight", TE_F32, te_shape(classes, in));
    m->fc_b = te_param_new("fc.bias", TE_F32, te_shape(classes));
    if (!m->fc_w || !m->fc_b)
        return false;
    te_init_linear(m->fc_w, m->fc_b);
    return true;
}

/* What a checkpoint must match: the widths, and the loader's batch and
 * training size. */
static int ckpt_attrs(const void *cfg, const ex_opts *o, ckpt_attr *out)
{
    const cnn_cfg *c = cfg;
    static char channels[64];
    snprintf(channels, sizeof channels, "%d,%d,%d", c->channels[0], c->channels[1], c->channels[2]);
    out[0] = (ckpt_attr){ "channels", "--channels", 0, channels };
    return 1 + ex_loader_attrs(o, out + 1);
}

int main(int argc, char **argv)
{
    cnn_cfg cfg = { .channels = { 32, 64, 128 } };
    /* About 0.97 held-out accuracy (docs/benchmarks.md); the loss stays near
     * ln 10 for the first 200 steps. */
    ex_opts o = {
        .steps = 600, .batch = 64, .accum = 1, .lr = 3e-3f, .seed = 1, .log_every = 10,
        .optim = EX_ADAM, .momentum = 0.9f,
        .train_size = 1 << 20, /* samples are generated: so many that none repeats */
    };
    ex_parse(argc, argv,
             &(ex_program){ .name = "cnn",
                            .summary = "Trains a small CNN (conv, batch norm, pooling) on 32x32 images of 10 shapes.",
                            .flags = cnn_flags, .cfg = &cfg, .ckpt_attrs = ckpt_attrs },
             &o);
    ex_start(&o);

    te_dataset *all = te_dataset_shapes(o.train_size + TEST_SIZE, o.seed);
    te_dataset *train = all ? ex_split(all, 0, o.train_size) : NULL;
    te_dataset *test = all ? ex_split(all, o.train_size, TEST_SIZE) : NULL;
    cnn m = { 0 };
    int rc;
    if (!train || !test || !cnn_init(&m, &cfg, all->n_classes)) {
        rc = ex_fail("cannot build the model");
    } else {
        int64_t params = 0;
        for (int i = 0; i < te_param_count(); i++)
            params += te_params()[i]->numel;
        if (ex_prints())
            printf("cnn: channels 3-%d-%d-%d, %lld params, %s, batch %d x %d, %d steps, seed %llu\n",
                   cfg.channels[0], cfg.channels[1], cfg.channels[2], (long long)params, all->name,
                   o.batch, o.accum, o.steps, (unsigned long long)o.seed);
        rc = ex_train(&o, &(ex_task){ .train = train, .test = test, .forward = cnn_forward, .model = &m,
                                      .buffers = te_buffers(), .n_buffers = te_buffer_count() });
    }
    ex_split_free(train);
    ex_split_free(test);
    te_dataset_free(all);
    te_shutdown();
    return rc;
}
