/*
 * text.h — a text file as byte-level training data: the bytes are the
 * tokens (vocabulary 256), the last tenth is held out for validation, and
 * training samples are windows at positions drawn from the seed.
 */
#ifndef TDBG_EXAMPLES_TEXT_H
#define TDBG_EXAMPLES_TEXT_H

#include "te.h"

#include <stddef.h>
#include <stdint.h>

#define TEXT_VOCAB 256

typedef struct text_corpus {
    uint8_t *bytes;
    int64_t size;        /* all bytes */
    int64_t train_size;  /* bytes [0, train_size) train; the rest validate */
    char *path;
    /* The training windows as the engine's batch provenance names them:
     * sample i is the window starting at byte i, its source the file's
     * line and byte (te_batch_publish). */
    te_dataset windows;
} text_corpus;

/* Reads path whole. A file that cannot be read, or one too short for two
 * windows of block + 1 bytes in each split, fails with a message naming
 * the path and what is wrong in why (n bytes); returns false then. */
bool text_load(text_corpus *c, const char *path, int block, char *why, size_t n);
void text_free(text_corpus *c);

/* A batch of training windows: x [batch, block] the bytes at
 * start..start+block-1 and y [batch * block] the bytes one later, as i32
 * tape tensors named "batch:x" and "batch:y". Window k of the batch is
 * sample number first + k, its start a pure function of (seed, sample):
 * the data position is one number that a checkpoint keeps. The batch is
 * published with its windows' starts (te_batch_publish). */
void text_batch(const text_corpus *c, uint64_t seed, int64_t first, int batch, int block, te_tensor **x,
                te_tensor **y);

/* Validation windows first..first+batch-1 of n_windows, spread evenly over
 * the held-out bytes (the same windows at every evaluation), as x and y
 * above. */
void text_val_batch(const text_corpus *c, int64_t first, int batch, int64_t n_windows, int block,
                    te_tensor **x, te_tensor **y);

#endif
