/*
 * text.c — byte-level text data for the GPT example.
 */
#include "text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The random stream of training windows' positions (te_rand_u64's stream). */
#define TEXT_STREAM 0x74657874ULL /* "text" */

/* "FILE:LINE (byte START)" of the window starting at byte i. */
static void window_source(const te_dataset *d, int64_t i, char *buf, size_t n)
{
    const text_corpus *c = d->state;
    int64_t line = 1;
    for (int64_t k = 0; k < i && k < c->size; k++)
        line += c->bytes[k] == '\n';
    snprintf(buf, n, "%s:%lld (byte %lld)", c->path, (long long)line, (long long)i);
}

bool text_load(text_corpus *c, const char *path, int block, char *why, size_t n)
{
    *c = (text_corpus){ 0 };
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, n, "cannot read %s: %s", path, strerror(errno));
        return false;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got = 1; buf && got > 0;) {
        if (len == cap) {
            uint8_t *more = realloc(buf, cap * 2);
            if (!more) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = more;
            cap *= 2;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(why, n, "cannot read %s: %s", path, buf ? "read error" : "out of memory");
        return false;
    }
    /* the last tenth validates; each split needs a window and its next byte */
    int64_t size = (int64_t)len, train = size - size / 10;
    if (train < block + 2 || size - train < block + 1) {
        free(buf);
        snprintf(why, n, "%s has %lld bytes: too short for --block %d (each of its splits, the first 90%% "
                 "to train and the last 10%% to validate, needs at least %d bytes; at least %lld in all)",
                 path, (long long)size, block, block + 1, 10LL * (block + 1));
        return false;
    }
    char *name = strdup(path);
    if (!name) {
        free(buf);
        snprintf(why, n, "out of memory");
        return false;
    }
    *c = (text_corpus){ .bytes = buf, .size = size, .train_size = train, .path = name };
    c->windows = (te_dataset){ .name = name, .size = train - block, .ndim = 1, .shape = { block },
                               .n_classes = TEXT_VOCAB, .source = window_source, .state = c };
    return true;
}

void text_free(text_corpus *c)
{
    free(c->bytes);
    free(c->path);
    *c = (text_corpus){ 0 };
}

/* Window starting at start: x row and the next bytes as labels. */
static void window(const text_corpus *c, int64_t start, int block, int32_t *x, int32_t *y)
{
    for (int t = 0; t < block; t++) {
        x[t] = c->bytes[start + t];
        y[t] = c->bytes[start + t + 1];
    }
}

static void make_batch(int batch, int block, const int32_t *xs, const int32_t *ys, te_tensor **x, te_tensor **y)
{
    *x = te_tensor_from(TE_I32, te_shape(batch, block), xs);
    *y = te_tensor_from(TE_I32, te_shape((int64_t)batch * block), ys);
    if (*x)
        snprintf((*x)->name, sizeof (*x)->name, "batch:x");
    if (*y)
        snprintf((*y)->name, sizeof (*y)->name, "batch:y");
}

void text_batch(const text_corpus *c, uint64_t seed, int64_t first, int batch, int block, te_tensor **x,
                te_tensor **y)
{
    const size_t n = (size_t)batch * (size_t)block;
    int32_t *xs = malloc(2 * n * sizeof *xs);
    if (!xs) {
        *x = *y = NULL;
        return;
    }
    /* starts in [0, train_size - block - 1]: the last label is inside the split */
    const uint64_t span = (uint64_t)(c->train_size - block);
    int64_t *starts = malloc((size_t)batch * sizeof *starts);
    for (int k = 0; k < batch && starts; k++) {
        starts[k] = (int64_t)(te_rand_u64(seed, TEXT_STREAM, (uint64_t)(first + k)) % span);
        window(c, starts[k], block, xs + (size_t)k * block, xs + n + (size_t)k * block);
    }
    if (starts)
        make_batch(batch, block, xs, xs + n, x, y);
    else
        *x = *y = NULL;
    if (*x && *y)
        te_batch_publish(&c->windows, starts, batch, *x, *y);
    free(starts);
    free(xs);
}

void text_val_batch(const text_corpus *c, int64_t first, int batch, int64_t n_windows, int block,
                    te_tensor **x, te_tensor **y)
{
    const size_t n = (size_t)batch * (size_t)block;
    int32_t *xs = malloc(2 * n * sizeof *xs);
    if (!xs) {
        *x = *y = NULL;
        return;
    }
    const int64_t last = c->size - block - 1 - c->train_size; /* the last start, from the split's */
    for (int k = 0; k < batch; k++) {
        int64_t w = first + k, start = c->train_size + (n_windows > 1 ? w * last / (n_windows - 1) : 0);
        window(c, start, block, xs + (size_t)k * block, xs + n + (size_t)k * block);
    }
    make_batch(batch, block, xs, xs + n, x, y);
    free(xs);
}
