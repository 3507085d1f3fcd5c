/*
 * checkpoint.h — a training run's whole state in one HDF5 file, readable by
 * h5py (format version 2; version 1 files, gpt's before it, still load):
 *
 *   /                  attributes format "tdbg-checkpoint", version 2,
 *                      program ("mlp", "cnn", "gpt"; absent in version 1:
 *                      gpt), amp ("O0".."O3") and amp_dtype ("f32" at O0,
 *                      else "f16" or "bf16"), and what the run must match
 *                      (one attribute each, int64 or a string: layers,
 *                      hidden "64,64", batch, ...)
 *   /scaler            with a loss scaler only: attributes fixed,
 *                      growth_interval, hysteresis (its options), scale
 *                      (f64), growth_tracker, hysteresis_left, skipped
 *   /params/NAME       each parameter, f32, its shape ("h0.ln_1.weight")
 *   /buffers/NAME      each persistent tensor the model owns beside its
 *                      parameters (batch norm's running statistics), f32
 *                      (version 2)
 *   /optim             attributes kind ("adamw", "adam", "sgd") and steps
 *                      (updates done, Adam's bias correction)
 *   /optim/m/NAME      SGD's momentum or Adam's first moment, f32, where the
 *   /optim/v/NAME      parameter has one; Adam's second moment
 *   /optim/master/NAME at O2: the f32 master copy of a f16/bf16 parameter
 *   /step              int64: steps done; the next one is numbered so
 *   /rng/seed          uint64: the engine seed (init, dropout, data)
 *   /rng/step          int64: the step counter keying dropout masks
 *   /data/position     int64: training samples drawn so far
 *   /data/epoch        int64: with a shuffling loader, the epoch its next
 *                      batch comes from (version 2)
 *
 * Loading trusts nothing in the file: it is parsed in a child process
 * (dump_contain), every dataset's presence, type and shape is checked
 * against the model, and anything wrong is one message naming the file and
 * the object, never a crash.
 */
#ifndef TDBG_EXAMPLES_CHECKPOINT_H
#define TDBG_EXAMPLES_CHECKPOINT_H

#include "te.h"

#include <stddef.h>

/* One configuration value the run must match, kept as a root attribute
 * and checked on load ("embd" 128, with "--embd" the flag that sets it):
 * an int64, or the string text when that is not NULL ("hidden" "64,64"). */
typedef struct ckpt_attr {
    const char *name, *flag;
    int64_t value;
    const char *text;
} ckpt_attr;

/* What a checkpoint holds of a program, and what it must match. */
typedef struct ckpt_model {
    const char *program;        /* "mlp", "cnn", "gpt" */
    const ckpt_attr *attrs;
    int n_attrs;
    te_optim *opt;              /* over every parameter */
    const char *optim_kind;     /* "adamw", "adam" or "sgd" */
    /* Persistent tensors of the model that are not parameters but change
     * as it trains (batch norm's running statistics), by their names. */
    te_tensor *const *buffers;
    int n_buffers;
} ckpt_model;

typedef struct ckpt_info {
    int64_t step;          /* steps done */
    uint64_t seed;         /* the engine's seed */
    int64_t rng_step;      /* the engine step counter the next step takes */
    int64_t data_position; /* training samples drawn */
    int64_t epoch;         /* a shuffling loader's next epoch; -1: none kept */
} ckpt_info;

/* Writes m's parameters, buffers and optimizer state with info and the
 * attributes to path (through a temporary file renamed over it: a crash
 * leaves the old checkpoint whole). False with the reason in why (n bytes). */
bool ckpt_save(const char *path, const ckpt_model *m, const ckpt_info *info, char *why, size_t n);

/* Reads path's info, after checking its format, its version, that it was
 * made by m->program and that each of m->attrs has the value given (else
 * "made with embd=64; this run has --embd 128"). Called before the engine
 * starts (the seed comes from here): only program and attrs are used. */
bool ckpt_read_info(const char *path, const ckpt_model *m, ckpt_info *info, char *why, size_t n);

/* Loads the parameters, buffers and optimizer state (its kind must be
 * m->optim_kind) from path into m's tensors and optimizer, and the loss
 * scaler's state; false with the reason, and nothing changed, when any is
 * missing or of the wrong shape, or when the file's AMP level, dtype or
 * scaler options are not the engine's (set before: ex_amp_start). A file
 * without the amp attributes was made at O0; a version 1 file has no
 * buffers, so it loads only into a model without any. */
bool ckpt_load(const char *path, const ckpt_model *m, char *why, size_t n);

#endif
