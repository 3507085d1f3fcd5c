/*
 * checkpoint.h — a training run's state in one HDF5 file, readable by h5py:
 *
 *   /                  attributes format "tdbg-checkpoint", version 1, amp
 *                      ("O0".."O3") and amp_dtype ("f32" at O0, else "f16"
 *                      or "bf16"), and the model's configuration (one int64
 *                      attribute each: layers, heads, ...)
 *   /scaler            with a loss scaler only: attributes fixed,
 *                      growth_interval, hysteresis (its options), scale
 *                      (f64), growth_tracker, hysteresis_left, skipped
 *   /params/NAME       each parameter, f32, its shape ("h0.ln_1.weight")
 *   /optim             attributes kind ("adamw", "adam", "sgd") and steps
 *                      (updates done, Adam's bias correction)
 *   /optim/m/NAME      SGD's momentum or Adam's first moment, f32, where the
 *   /optim/v/NAME      parameter has one; Adam's second moment
 *   /step              int64: steps done; the next one is numbered so
 *   /rng/seed          uint64: the engine seed (init, dropout, data)
 *   /rng/step          int64: the step counter keying dropout masks
 *   /data/position     int64: training samples drawn so far
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

/* One configuration value of the model, kept as a root attribute and
 * checked on load ("embd" 128, with "--embd" the flag that sets it). */
typedef struct ckpt_attr {
    const char *name, *flag;
    int64_t value;
} ckpt_attr;

typedef struct ckpt_info {
    int64_t step;          /* steps done */
    uint64_t seed;         /* the engine's seed */
    int64_t rng_step;      /* the engine step counter the next step takes */
    int64_t data_position; /* training samples drawn */
} ckpt_info;

/* Writes the parameters and opt's state with info and the attributes to
 * path (through a temporary file renamed over it: a crash leaves the old
 * checkpoint whole). False with the reason in why (n bytes). */
bool ckpt_save(const char *path, const ckpt_info *info, const ckpt_attr *attrs, int n_attrs,
               const te_optim *opt, const char *optim_kind, char *why, size_t n);

/* Reads path's info, after checking its format and that each of attrs has
 * the value given (else "made with embd=64; this run has --embd 128").
 * Called before the engine starts (the seed comes from here). */
bool ckpt_read_info(const char *path, const ckpt_attr *attrs, int n_attrs, ckpt_info *info, char *why,
                    size_t n);

/* Loads the parameters and opt's state (its kind must be optim_kind) from
 * path into the registered parameters and opt, and the loss scaler's
 * state; false with the reason, and nothing changed, when any is missing
 * or of the wrong shape, or when the file's AMP level, dtype or scaler
 * options are not the engine's (set before: ex_amp_start). A file without
 * the amp attributes was made at O0. */
bool ckpt_load(const char *path, te_optim *opt, const char *optim_kind, char *why, size_t n);

#endif
