/* fuzz_checkpoint.c — a GPT checkpoint, read as examples/gpt reads one
 * with --load: the input is written as DIR/ckpt.h5, then ckpt_read_info
 * checks it against a tiny model's configuration (1 layer, 1 head, embd 4,
 * block 4, byte vocabulary) and ckpt_load reads it into that model's
 * parameters and an AdamW's state (called whatever the first said, so that
 * a file made for another configuration reaches the shape checks). Either
 * must answer true or false with a message, never crash; a refused load
 * must leave the parameters, the optimizer's state and steps as they were,
 * and an accepted info must be in range. */
#include "checkpoint.h"
#include "fuzz.h"
#include "gpt_model.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The seeds (fuzz/mkseeds.sh) are made with the same configuration. */
static const gpt_config cfg = { .layers = 1, .heads = 1, .embd = 4, .block = 4, .dropout = 0.0f };
static const ckpt_attr attrs[] = {
    { "layers", "--layers", 1, NULL }, { "heads", "--heads", 1, NULL }, { "embd", "--embd", 4, NULL },
    { "block", "--block", 4, NULL },   { "vocab", "the vocabulary", GPT_VOCAB, NULL },
};
static ckpt_model ck = { .program = "gpt", .attrs = attrs, .n_attrs = (int)(sizeof attrs / sizeof attrs[0]),
                         .optim_kind = "adamw" };

static gpt_model model;
static te_optim *opt;
static char file[PATH_MAX];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (te_init(NULL) != TE_OK || !gpt_model_init(&model, &cfg))
        abort();
    opt = te_adam_new(te_params(), te_param_count(), &(te_adam_opts){ .lr = 1e-3f, .decoupled = true });
    if (!opt)
        abort();
    ck.opt = opt;
    snprintf(file, sizeof file, "%s/ckpt.h5", fuzz_tmpdir());
    return 0;
}

/* FNV-1a over bytes, continuing from h. */
static uint64_t hash(uint64_t h, const void *p, size_t n)
{
    for (const unsigned char *b = p; n--; b++)
        h = (h ^ *b) * 0x100000001b3ULL;
    return h;
}

/* What a load may change: every parameter's values, the optimizer's
 * buffers (present or not) and its steps. */
static uint64_t state_hash(void)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    float *buf = NULL;
    for (int i = 0; i < te_optim_param_count(opt); i++) {
        const te_tensor *p = te_optim_param(opt, i);
        if (!(buf = realloc(buf, (size_t)p->numel * sizeof *buf)))
            abort();
        te_copy_to_f32(p, buf);
        h = hash(h, buf, (size_t)p->numel * sizeof *buf);
        for (int s = 0; s < te_optim_slots(opt); s++) {
            const te_status st = te_optim_state_read(opt, i, s, buf); /* TE_ERR_STATE: absent */
            if (st != TE_OK && st != TE_ERR_STATE)
                abort();
            h = hash(h, &(bool){ st == TE_OK }, sizeof(bool));
            if (st == TE_OK)
                h = hash(h, buf, (size_t)p->numel * sizeof *buf);
        }
    }
    free(buf);
    const int64_t steps = te_optim_steps(opt);
    return hash(h, &steps, sizeof steps);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_write(file, data, size))
        abort();
    char why[1536] = "";
    ckpt_info info;
    if (ckpt_read_info(file, &ck, &info, why, sizeof why)) {
        if (info.step < 0 || info.rng_step < 0 || info.data_position < 0 || info.seed == 0)
            abort();   /* the reader promises these */
    } else if (!why[0]) {
        abort();   /* a refusal always says why */
    }
    why[0] = '\0';
    const uint64_t before = state_hash();
    if (!ckpt_load(file, &ck, why, sizeof why)) {
        if (!why[0])
            abort();
        if (state_hash() != before)
            abort();   /* a refused load changes nothing */
    }
    unlink(file);
    return 0;
}
