/*
 * mlp.c — a multi-layer perceptron on synthetic classification data.
 *
 * Layers fc1..fcK: linear + ReLU for each hidden size, then a linear layer
 * to the classes. Ops are named fc1/linear, fc1/relu, ..., fcK/linear.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 9
#define TEST_SIZE 2048
#define BLOBS_DIM 784
#define BLOBS_CLASSES 10
#define SPIRALS_CLASSES 3

typedef enum { DATA_BLOBS, DATA_SPIRALS, DATA_COUNT, DATA_CSV = DATA_COUNT } mlp_data;

/* The datasets --data takes, in mlp_data's order. */
static const char *const data_names[DATA_COUNT] = { "blobs", "spirals" };

typedef struct {
    int hidden[MAX_LAYERS - 1];
    int n_hidden;
    mlp_data data;
    const char *csv;   /* DATA_CSV: the file */
    int classes;       /* DATA_CSV: 0 counts them from the labels */
} mlp_cfg;

typedef struct {
    int n_layers;
    te_tensor *w[MAX_LAYERS], *b[MAX_LAYERS];
} mlp;

static bool set_hidden(const char *v, void *cfg, char *why, size_t n)
{
    mlp_cfg *c = cfg;
    c->n_hidden = ex_parse_list(v, c->hidden, MAX_LAYERS - 1, 1 << 16);
    snprintf(why, n, "expected up to %d widths, comma separated, each a whole number in 1..65536, "
             "e.g. 1024,1024", MAX_LAYERS - 1);
    return c->n_hidden > 0;
}

static bool set_data(const char *v, void *cfg, char *why, size_t n)
{
    mlp_cfg *c = cfg;
    if (strchr(v, '/') || strchr(v, '.')) { /* a file: read when training starts */
        c->data = DATA_CSV;
        c->csv = v;
        return true;
    }
    size_t at = (size_t)snprintf(why, n, "unknown dataset; expected");
    for (int k = 0; k < DATA_COUNT; k++) {
        if (strcmp(v, data_names[k]) == 0) {
            c->data = (mlp_data)k;
            return true;
        }
        if (at < n)
            at += (size_t)snprintf(why + at, n - at, "%s %s", k == 0 ? "" : k == DATA_COUNT - 1 ? " or" : ",",
                                   data_names[k]);
    }
    if (at < n)
        snprintf(why + at, n - at, ", or a CSV file (a path with '/' or '.')");
    return false;
}

static bool set_classes(const char *v, void *cfg, char *why, size_t n)
{
    mlp_cfg *c = cfg;
    char *end;
    long k = strtol(v, &end, 10);
    snprintf(why, n, "expected a whole number of classes in 2..65536");
    if (*end || k < 2 || k > 65536)
        return false;
    c->classes = (int)k;
    return true;
}

static const ex_flag mlp_flags[] = {
    { "--hidden", "LIST", "hidden layer sizes, comma separated (1024,1024)", set_hidden },
    { "--data", "NAME|FILE", "blobs (784 dims, 10 classes), spirals (2-D, 3 classes), or a CSV file of records "
      "`x1,...,xD,label` (its first 90% trains, the rest tests) (blobs)", set_data },
    { "--classes", "N", "a CSV's classes (the largest label + 1)", set_classes },
    { NULL, NULL, NULL, NULL },
};

/* x [N, in] -> logits [N, classes] */
static te_tensor *mlp_forward(const void *model, te_tensor *x)
{
    const mlp *m = model;
    for (int i = 0; i < m->n_layers; i++) {
        char scope[16];
        snprintf(scope, sizeof scope, "fc%d", i + 1);
        te_scope_push(scope);
        x = te_linear(x, m->w[i], m->b[i]);
        if (i < m->n_layers - 1)
            x = te_relu(x);
        te_scope_pop();
    }
    return x;
}

/* Parameters fcK.weight [out, in] and fcK.bias [out], PyTorch's init. */
static bool mlp_init(mlp *m, const mlp_cfg *c, int in, int classes)
{
    m->n_layers = c->n_hidden + 1;
    for (int i = 0; i < m->n_layers; i++) {
        int out = i < c->n_hidden ? c->hidden[i] : classes;
        char name[32];
        snprintf(name, sizeof name, "fc%d.weight", i + 1);
        m->w[i] = te_param_new(name, TE_F32, te_shape(out, in));
        snprintf(name, sizeof name, "fc%d.bias", i + 1);
        m->b[i] = te_param_new(name, TE_F32, te_shape(out));
        if (!m->w[i] || !m->b[i])
            return false;
        te_init_linear(m->w[i], m->b[i]);
        in = out;
    }
    return true;
}

/* What a checkpoint must match: the dataset, the hidden widths, and the
 * loader's batch and training size. */
static int ckpt_attrs(const void *cfg, const ex_opts *o, ckpt_attr *out)
{
    const mlp_cfg *c = cfg;
    static char hidden[MAX_LAYERS * 8];
    size_t at = 0;
    for (int i = 0; i < c->n_hidden; i++)
        at += (size_t)snprintf(hidden + at, sizeof hidden - at, "%s%d", i ? "," : "", c->hidden[i]);
    out[0] = (ckpt_attr){ "data", "--data", 0, c->data == DATA_CSV ? c->csv : data_names[c->data] };
    out[1] = (ckpt_attr){ "hidden", "--hidden", 0, hidden };
    return 2 + ex_loader_attrs(o, out + 2);
}

int main(int argc, char **argv)
{
    mlp_cfg cfg = { .hidden = { 1024, 1024 }, .n_hidden = 2 };
    /* About 0.87 held-out accuracy on blobs, where 0.95 is the best possible,
     * and 0.99 on spirals (docs/benchmarks.md). */
    ex_opts o = {
        .steps = 300, .batch = 128, .accum = 1, .lr = 3e-4f, .seed = 1, .log_every = 10,
        .optim = EX_ADAM, .momentum = 0.9f,
        .train_size = 1 << 20, /* samples are generated: so many that none repeats */
    };
    ex_parse(argc, argv,
             &(ex_program){ .name = "mlp", .summary = "Trains an MLP classifier on Gaussian blobs or 2-D spirals.",
                            .flags = mlp_flags, .cfg = &cfg, .ckpt_attrs = ckpt_attrs },
             &o);
    ex_start(&o);

    te_dataset *all = cfg.data == DATA_CSV ? te_dataset_csv(cfg.csv, cfg.classes)
                      : cfg.data == DATA_SPIRALS ? te_dataset_spirals(o.train_size + TEST_SIZE, SPIRALS_CLASSES, o.seed)
                                                 : te_dataset_blobs(o.train_size + TEST_SIZE, BLOBS_DIM, BLOBS_CLASSES,
                                                                    o.seed);
    int64_t test_size = TEST_SIZE;
    if (!all && cfg.data == DATA_CSV) {
        fprintf(stderr, "mlp: --data: %s\n", te_error());
        te_shutdown();
        return 2;
    }
    if (cfg.data == DATA_CSV) { /* the last tenth tests */
        test_size = all->size / 10 > 0 ? all->size / 10 : 1;
        o.train_size = all->size - test_size;
        if (o.train_size < 1) {
            fprintf(stderr, "mlp: --data: %s has %lld records: too few to train and test\n", cfg.csv,
                    (long long)all->size);
            te_dataset_free(all);
            te_shutdown();
            return 2;
        }
    }
    te_dataset *train = all ? ex_split(all, 0, o.train_size) : NULL;
    te_dataset *test = all ? ex_split(all, o.train_size, test_size) : NULL;
    mlp m;
    int rc;
    if (!train || !test || !mlp_init(&m, &cfg, (int)all->shape[0], all->n_classes)) {
        rc = ex_fail("cannot build the model");
    } else {
        int64_t params = 0;
        char widths[256];
        size_t at = 0;
        for (int i = 0; i < m.n_layers; i++) {
            at += (size_t)snprintf(widths + at, at < sizeof widths ? sizeof widths - at : 0, "-%d",
                                   (int)m.w[i]->shape[0]);
            params += m.w[i]->numel + m.b[i]->numel;
        }
        if (ex_prints())
            printf("mlp: %d%s, %lld params, %s, batch %d x %d, %d steps, seed %llu\n", (int)all->shape[0], widths,
                   (long long)params, all->name, o.batch, o.accum, o.steps, (unsigned long long)o.seed);
        rc = ex_train(&o, &(ex_task){ .train = train, .test = test, .forward = mlp_forward, .model = &m });
    }
    ex_split_free(train);
    ex_split_free(test);
    te_dataset_free(all);
    te_shutdown();
    return rc;
}
