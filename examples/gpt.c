/*
 * gpt.c — a GPT-2-style decoder (gpt_model.h) trained on the bytes of a
 * text file: AdamW with a linear warm-up and a cosine decay to a tenth of
 * --lr, gradient clipping, a held-out tenth of the text for the validation
 * loss, generated samples, and HDF5 checkpoints that resume bit for bit.
 *
 * Ops are named by scope: h0/ln_1, h0/attn/q, h0/attn/softmax,
 * h0/attn/c_proj, h0/mlp/c_fc, h0/res_mlp, ..., ln_f, lm_head; evaluation
 * runs under "eval/" and sampling under "sample/".
 */
#include "checkpoint.h"
#include "common.h"
#include "gpt_model.h"
#include "text.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_DATA "/usr/share/games/fortunes/fortunes"
#define VAL_WINDOWS 256          /* at most, spread over the held-out bytes */
#define SAMPLE_STREAM 0x73616d70ULL /* "samp": te_rand's stream for sampling */

typedef struct {
    gpt_config model;
    const char *data, *prompt;
    int warmup, eval_every, sample_every, sample_bytes;
    float temperature;
} gpt_cfg;

/* ---- flags ------------------------------------------------------------------------ */

static bool set_count(const char *v, int lo, int hi, int *out, char *why, size_t n, const char *eg)
{
    char *end;
    long x = strtol(v, &end, 10);
    snprintf(why, n, "expected a whole number in %d..%d, e.g. %s", lo, hi, eg);
    if (end == v || *end || x < lo || x > hi)
        return false;
    *out = (int)x;
    return true;
}

static bool set_layers(const char *v, void *c, char *why, size_t n)
{
    return set_count(v, 1, GPT_MAX_LAYERS, &((gpt_cfg *)c)->model.layers, why, n, "4");
}
static bool set_heads(const char *v, void *c, char *why, size_t n)
{
    return set_count(v, 1, 256, &((gpt_cfg *)c)->model.heads, why, n, "4");
}
static bool set_embd(const char *v, void *c, char *why, size_t n)
{
    return set_count(v, 1, 8192, &((gpt_cfg *)c)->model.embd, why, n, "128");
}
static bool set_block(const char *v, void *c, char *why, size_t n)
{
    return set_count(v, 1, GPT_MAX_BLOCK, &((gpt_cfg *)c)->model.block, why, n, "64");
}
static bool set_warmup(const char *v, void *c, char *why, size_t n)
{
    return set_count(v, 0, INT_MAX, &((gpt_cfg *)c)->warmup, why, n, "100 (0: none)");
}
static bool set_eval_every(const char *v, void *c, char *why, size_t n)
{
    return set_count(v, 0, INT_MAX, &((gpt_cfg *)c)->eval_every, why, n, "100 (0: at the end only)");
}
static bool set_sample_every(const char *v, void *c, char *why, size_t n)
{
    return set_count(v, 0, INT_MAX, &((gpt_cfg *)c)->sample_every, why, n, "500 (0: never)");
}
static bool set_sample_bytes(const char *v, void *c, char *why, size_t n)
{
    return set_count(v, 1, 1 << 20, &((gpt_cfg *)c)->sample_bytes, why, n, "200");
}

static bool set_fraction(const char *v, float lo, float hi, float *out, char *why, size_t n, const char *what)
{
    char *end;
    float x = strtof(v, &end);
    snprintf(why, n, "%s", what);
    if (end == v || *end || !(x >= lo && x < hi))
        return false;
    *out = x;
    return true;
}
static bool set_dropout(const char *v, void *c, char *why, size_t n)
{
    return set_fraction(v, 0.0f, 1.0f, &((gpt_cfg *)c)->model.dropout, why, n,
                        "expected a probability in [0, 1), e.g. 0.1");
}
static bool set_temperature(const char *v, void *c, char *why, size_t n)
{
    return set_fraction(v, 0.0f, 100.0f, &((gpt_cfg *)c)->temperature, why, n,
                        "expected a number in [0, 100), e.g. 0.8 (0: greedy)");
}

static bool set_data(const char *v, void *c, char *why, size_t n)
{
    snprintf(why, n, "expected a file name");
    ((gpt_cfg *)c)->data = v;
    return v[0] != '\0';
}
static bool set_prompt(const char *v, void *c, char *why, size_t n)
{
    snprintf(why, n, "expected some text to continue");
    ((gpt_cfg *)c)->prompt = v;
    return v[0] != '\0';
}

static const ex_flag gpt_flags[] = {
    { "--layers", "N", "transformer blocks (4)", set_layers },
    { "--heads", "N", "attention heads; --embd must be a multiple (4)", set_heads },
    { "--embd", "N", "width of the residual stream (128)", set_embd },
    { "--block", "N", "context length in bytes (64)", set_block },
    { "--dropout", "P", "dropout of attention weights and residual branches (0.1)", set_dropout },
    { "--data", "FILE", "text to learn; its last 10% validates (" DEFAULT_DATA ")", set_data },
    { "--warmup", "N", "steps of linear learning-rate warm-up, then cosine decay to lr/10 (50)", set_warmup },
    { "--eval-every", "N", "print the validation loss every N steps; 0: at the end only (50)",
      set_eval_every },
    { "--sample-every", "N", "print generated text every N steps and at the end; 0: never (0)",
      set_sample_every },
    { "--sample-bytes", "N", "bytes each sample generates (200)", set_sample_bytes },
    { "--prompt", "TEXT", "what samples continue (\"The \")", set_prompt },
    { "--temperature", "X", "sampling temperature; 0: greedy (0.8)", set_temperature },
    { NULL, NULL, NULL, NULL },
};

static const char *const gpt_unsupported[] = { "--train-size", "--workers", NULL };

/* ---- the step -------------------------------------------------------------------- */

typedef struct {
    const ex_opts *o;
    const gpt_model *m;
    te_optim *opt;
} step_ctx;

static te_tensor *forward(const void *model, te_tensor *x) { return gpt_forward(model, x); }

/* inputs x0, y0, x1, y1, ... (one pair per micro-batch); outputs their
 * losses (ex_train_step) */
static te_status train_step_fn(void *ctx, te_tensor *const *in, te_tensor **out)
{
    const step_ctx *c = ctx;
    return ex_train_step(c->o, forward, c->m, c->opt, in, out, false);
}

static te_status eval_step_fn(void *ctx, te_tensor *const *in, te_tensor **out)
{
    const step_ctx *c = ctx;
    out[0] = te_cross_entropy(gpt_forward(c->m, in[0]), in[1]);
    return out[0] ? TE_OK : te_error_code();
}

/* Linear warm-up to o->lr over the first warmup steps, then a cosine from
 * there down to a tenth of it at the last step. */
static float lr_at(const gpt_cfg *g, const ex_opts *o, int step)
{
    if (step < g->warmup)
        return o->lr * (float)(step + 1) / (float)g->warmup;
    const double lo = 0.1 * o->lr, span = o->steps - g->warmup > 1 ? o->steps - g->warmup - 1 : 1;
    const double t = (step - g->warmup) / span;
    return (float)(lo + 0.5 * (o->lr - lo) * (1.0 + cos(M_PI * (t < 1.0 ? t : 1.0))));
}

/* ---- evaluation and sampling ---------------------------------------------------- */

/* Mean loss over the validation windows through the eval graph g, in eval
 * mode under the scope "eval". */
static te_status evaluate(const ex_opts *o, te_graph *g, const gpt_model *m, const text_corpus *text, float *loss)
{
    const int block = m->cfg.block;
    int64_t windows = (text->size - text->train_size - 1) / block;
    windows = windows < 1 ? 1 : windows > VAL_WINDOWS ? VAL_WINDOWS : windows;
    windows = (windows + o->batch - 1) / o->batch * o->batch; /* whole batches: one plan */
    te_set_training(false);
    te_scope_push("eval");
    double sum = 0.0;
    te_status st = TE_OK;
    for (int64_t w = 0; w < windows && st == TE_OK; w += o->batch) {
        te_tensor *in[2], *out[1];
        text_val_batch(text, w, o->batch, windows, block, &in[0], &in[1]);
        if (!in[0] || !in[1])
            st = te_error_code() ? te_error_code() : TE_ERR_NOMEM;
        else if ((st = te_graph_run(g, in, out)) == TE_OK)
            sum += te_item(out[0]);
        te_tape_reset();
    }
    te_scope_pop();
    te_set_training(true);
    *loss = (float)(sum / (double)(windows / o->batch));
    return st;
}

/* Prints byte b as it would sit in a C string. */
static void put_escaped(int b)
{
    if (b == '\n')
        fputs("\\n", stdout);
    else if (b == '\t')
        fputs("\\t", stdout);
    else if (b == '\\' || b == '"')
        printf("\\%c", b);
    else if (b >= 0x20 && b < 0x7f)
        putchar(b);
    else
        printf("\\x%02x", b);
}

/* The next byte after the logits row z [256]: the largest, or drawn from
 * softmax(z / temperature) with the counter-based RNG. */
static int pick(const float *z, float temperature, uint64_t counter)
{
    int best = 0;
    for (int i = 1; i < GPT_VOCAB; i++)
        if (z[i] > z[best])
            best = i;
    if (temperature <= 0.0f)
        return best;
    double p[GPT_VOCAB], total = 0.0;
    for (int i = 0; i < GPT_VOCAB; i++)
        total += p[i] = exp(((double)z[i] - z[best]) / temperature);
    double u = te_rand_uniform(te_seed(), SAMPLE_STREAM, counter) * total;
    for (int i = 0; i < GPT_VOCAB; i++)
        if ((u -= p[i]) < 0.0)
            return i;
    return best;
}

/* `sample: step=N "..."`: sample_bytes bytes after the prompt, in eval mode,
 * the same for the same seed and step. */
static te_status sample(const gpt_cfg *g, const gpt_model *m, int step)
{
    const int block = m->cfg.block, plen = (int)strlen(g->prompt);
    const int total = plen + g->sample_bytes;
    int32_t *ctx = malloc((size_t)total * sizeof *ctx);
    float *row = malloc(GPT_VOCAB * sizeof *row);
    te_status st = ctx && row ? TE_OK : TE_ERR_NOMEM;
    for (int i = 0; i < plen && st == TE_OK; i++)
        ctx[i] = (uint8_t)g->prompt[i];
    te_set_training(false);
    te_scope_push("sample");
    for (int n = plen; n < total && st == TE_OK; n++) {
        const int t = n < block ? n : block;
        te_tensor *x = te_tensor_from(TE_I32, te_shape(1, t), ctx + n - t);
        te_tensor *logits = gpt_forward(m, x);
        if (!logits) {
            st = te_error_code();
            break;
        }
        st = te_tensor_read_f32(logits, (int64_t)(t - 1) * GPT_VOCAB, GPT_VOCAB, row); /* the last position's */
        if (st != TE_OK)
            break;
        ctx[n] = pick(row, g->temperature, (uint64_t)step * (1u << 20) + (uint64_t)n);
        te_tape_reset();
    }
    te_scope_pop();
    te_set_training(true);
    if (st == TE_OK) {
        printf("sample: step=%d \"", step);
        for (int i = 0; i < total; i++)
            put_escaped(ctx[i]);
        printf("\"\n");
    }
    free(ctx);
    free(row);
    return st;
}

/* ---- training -------------------------------------------------------------------- */

/* What a checkpoint must match: the model's shape. (The data position
 * counts windows drawn at random places: any --batch goes on from it.) */
static int model_attrs(const void *cfg, const ex_opts *o, ckpt_attr *a)
{
    const gpt_cfg *g = cfg;
    (void)o;
    a[0] = (ckpt_attr){ "layers", "--layers", g->model.layers, NULL };
    a[1] = (ckpt_attr){ "heads", "--heads", g->model.heads, NULL };
    a[2] = (ckpt_attr){ "embd", "--embd", g->model.embd, NULL };
    a[3] = (ckpt_attr){ "block", "--block", g->model.block, NULL };
    a[4] = (ckpt_attr){ "vocab", "the vocabulary", GPT_VOCAB, NULL };
    return 5;
}

/* The loop's own state: what a checkpoint keeps of it besides the engine's. */
typedef struct {
    int64_t step;          /* the first step to run */
    int64_t data_position; /* training samples drawn */
} run_state;

static int train(const gpt_cfg *g, const ex_opts *o, const gpt_model *m, const text_corpus *text, run_state rs)
{
    if (ex_amp_start(o) != TE_OK)
        return ex_fail("cannot set up mixed precision");
    te_optim *opt = ex_optim_new(o);
    step_ctx c = { .o = o, .m = m, .opt = opt };
    char why[1536];
    if (!opt)
        return ex_fail("cannot make the optimizer");
    ckpt_attr attrs[EX_MAX_CKPT_ATTRS];
    const ckpt_model cm = ex_ckpt_model(o, opt, NULL, 0, attrs);
    if (o->load && ex_resume(o, &cm) != 0) {
        te_optim_free(opt);
        return 2;
    }
    if (o->dp && te_dist_broadcast_params() != TE_OK) {
        te_optim_free(opt);
        return ex_fail("cannot broadcast the parameters");
    }
    te_graph *tg = ex_graph_new(o, train_step_fn, &c, "train", 2 * o->accum, o->accum, false);
    te_graph *eg = tg ? ex_graph_new(o, eval_step_fn, &c, "eval", 2, 1, false) : NULL;
    const int last = ex_last_step(o);
    double *ms = eg ? calloc(2 * ((size_t)o->steps + 1), sizeof *ms) : NULL, *cpu = ms ? ms + o->steps + 1 : NULL;
    int rc = 0, timed = 0;
    if (!ms)
        rc = ex_fail(eg ? "out of memory" : "cannot set up training");
    /* rs is the loop's state: time travel puts it back (docs/engine.md
     * "Time travel"); a step at or below `ran` runs again after a rewind. */
    const int region = te_record_host("loop", &rs, sizeof rs);
    te_checkpoint_writer(); /* the debugger's `checkpoint save FILE`: ex_save_requested */
    const int64_t first = rs.step;
    int64_t ran = rs.step - 1;
    if (rc == 0 && region < 0)
        rc = ex_fail("cannot register the loop's state");
    for (; rc == 0 && (rs.step < last || te_rewind_pending()); rs.step++) {
        te_tensor *in[2 * EX_MAX_ACCUM], *out[EX_MAX_ACCUM];
        const double t0 = ex_now_ms(), c0 = ex_cpu_ms();
        te_step_begin(); /* a rewind puts rs back here */
        const int step = (int)rs.step;
        const float lr = lr_at(g, o, step);
        te_optim_set_lr(opt, lr);
        const float scale = ex_scale_now();
        te_status st = TE_OK;
        /* Data parallel: rank r takes windows r * share .. of each global batch. */
        const int share = ex_rank_batch(o, o->batch);
        for (int k = 0; k < o->accum && st == TE_OK; k++) {
            text_batch(text, te_seed(), rs.data_position + (int64_t)te_dist_rank() * share, share, m->cfg.block,
                       &in[2 * k], &in[2 * k + 1]);
            rs.data_position += o->batch;
            if (!in[2 * k] || !in[2 * k + 1])
                st = TE_ERR_NOMEM;
        }
        float loss = 0.0f;
        if (st == TE_OK && (st = te_graph_run(tg, in, out)) == TE_OK)
            for (int k = 0; k < o->accum; k++)
                loss += te_item(out[k]);
        te_step_end();
        if (st == TE_ERR_REWOUND)
            continue;
        if (st != TE_OK) {
            snprintf(why, sizeof why, "step %d failed", step);
            rc = ex_fail(why);
            break;
        }
        const bool replayed = step <= ran;
        ran = step > ran ? step : ran;
        cpu[step - first] = ex_cpu_ms() - c0; /* a replayed step's time replaces its first */
        ms[step - first] = ex_now_ms() - t0;
        timed = step - first + 1 > timed ? (int)(step - first + 1) : timed;
        if (step % o->log_every == 0 || step == last - 1) {
            double sum = loss; /* data parallel: the mean of the ranks' */
            if (o->dp && te_dist_allreduce_host("loss", &sum, 1) != TE_OK) {
                rc = ex_fail("cannot sum the loss over the ranks");
                break;
            }
            if (ex_prints()) {
                printf("step=%d loss=%.6f lr=%.6g", step, sum / te_dist_size(), lr);
                ex_print_scale(scale);
                printf("%s\n", replayed ? " (replayed)" : "");
            }
        }
        float val;
        if (g->eval_every && (step + 1) % g->eval_every == 0 && step != last - 1) {
            if (evaluate(o, eg, m, text, &val) != TE_OK)
                rc = ex_fail("evaluation failed");
            else if (ex_prints())
                printf("step=%d val_loss=%.6f\n", step, val);
        }
        if (rc == 0 && g->sample_every && (step + 1) % g->sample_every == 0 && step != last - 1 &&
            ex_prints() && sample(g, m, step) != TE_OK)
            rc = ex_fail("sampling failed");
        const ckpt_info now = { .step = step + 1, .seed = te_seed(), .rng_step = step + 1,
                                .data_position = rs.data_position, .epoch = -1 };
        if (rc == 0 && ex_prints() && (ex_save_due(o, step + 1) || (o->save && step == last - 1)))
            rc = ex_save(o, &cm, &now);
        if (rc == 0)
            ex_save_requested(&cm, &now);
        fflush(stdout);
    }
    te_record_host_remove(region);
    const int prof_rc = ex_profile_finish();
    if (rc == 0 && o->time && timed > 0 && ex_prints()) {
        ex_print_times(ms, cpu, timed);
        ex_print_memory(tg, o);
    }
    float val;
    if (rc == 0 && evaluate(o, eg, m, text, &val) != TE_OK)
        rc = ex_fail("evaluation failed");
    if (rc == 0 && ex_prints())
        printf("final: step=%d val_loss=%.6f val_bpb=%.4f\n", last - 1, val, val / M_LN2);
    if (rc == 0 && g->sample_every && ex_prints() && sample(g, m, last - 1) != TE_OK)
        rc = ex_fail("sampling failed");
    if (rc == 0)
        rc = prof_rc;
    free(ms);
    te_graph_free(eg);
    te_graph_free(tg);
    te_optim_free(opt);
    return rc;
}

int main(int argc, char **argv)
{
    gpt_cfg g = {
        .model = { .layers = 4, .heads = 4, .embd = 128, .block = 64, .dropout = 0.1f },
        .data = DEFAULT_DATA, .prompt = "The ", .warmup = 50, .eval_every = 50, .sample_bytes = 200,
        .temperature = 0.8f,
    };
    ex_opts o = {
        .steps = 500, .batch = 16, .accum = 1, .lr = 1e-3f, .seed = 1, .log_every = 10,
        .optim = EX_ADAMW, .weight_decay = 0.01f, .clip = 1.0f,
    };
    ex_parse(argc, argv,
             &(ex_program){ .name = "gpt", .summary = "Trains a GPT-2-style decoder on the bytes of a text file.",
                            .flags = gpt_flags, .cfg = &g, .ckpt_attrs = model_attrs,
                            .unsupported = gpt_unsupported,
                            .unsupported_why = "does not apply to gpt: its samples are windows of --data, "
                                               "the first 90% of the text",
                            .output = "Each logged step prints `step=N loss=X lr=Y`, each evaluation\n"
                                      "`step=N val_loss=X`, each sample `sample: step=N \"TEXT\"`; the run ends\n"
                                      "with `final: step=N val_loss=X val_bpb=Y`. Exit status 2 on a bad flag,\n"
                                      "an unreadable text or a bad checkpoint.\n" },
             &o);
    char why[1536];
    if (!gpt_config_check(&g.model, why, sizeof why)) {
        fprintf(stderr, "gpt: %s\n", why);
        return 2;
    }
    if (g.warmup >= o.steps && g.warmup > 0) {
        fprintf(stderr, "gpt: --warmup %d must be below --steps %d\n", g.warmup, o.steps);
        return 2;
    }
    const run_state rs = { o.load ? o.resume.step : 0, o.load ? o.resume.data_position : 0 };
    text_corpus text;
    if (!text_load(&text, g.data, g.model.block, why, sizeof why)) {
        fprintf(stderr, "gpt: --data: %s%s\n", why,
                strcmp(g.data, DEFAULT_DATA) == 0 ? " (Debian's fortunes package has it: run ./quickstart)" : "");
        return 2;
    }
    ex_start(&o);
    gpt_model m;
    int rc;
    if (!gpt_model_init(&m, &g.model)) {
        rc = ex_fail("cannot build the model");
    } else {
        if (ex_prints())
            printf("gpt: %d layers, %d heads, embd %d, block %d, %.2fM params, %s: %lld bytes (%lld to train, "
                   "%lld to validate), batch %d x %d, %d steps, seed %llu%s\n",
                   g.model.layers, g.model.heads, g.model.embd, g.model.block, (double)gpt_param_numel() / 1e6,
                   g.data, (long long)text.size, (long long)text.train_size,
                   (long long)(text.size - text.train_size), o.batch, o.accum, o.steps, (unsigned long long)o.seed,
                   o.dp ? ", data parallel" : "");
        if (o.dp && ex_prints())
            printf("dp: %d ranks over %s, %d samples each\n", te_dist_size(), te_dist_transport(),
                   ex_rank_batch(&o, o.batch));
        rc = train(&g, &o, &m, &text, rs);
    }
    text_free(&text);
    te_shutdown();
    return rc;
}
