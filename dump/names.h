/*
 * names.h — one name for a dumped tensor everywhere, and the nearest-word
 * suggestions behind "did you mean" (the debugger's too).
 *
 * A tensor of a step file answers to each of:
 *   its dataset path            "/conv2/bn/in0" (the leading '/' may be left off)
 *   the debugger's name for it  "conv2/bn:in0", "OP:inN" / "OP:outN"
 *   for a parameter or a gradient dumped by phase=params,grads (the
 *   pseudo-ops "param/NAME" and "grad/NAME", which have no exec index)
 *                               "param:fc1.weight", "grad:fc1.weight"
 *   the name its `tensor` attribute stores ("conv2/conv:out0" for that input)
 * tdbg-dump's TENSOR and GLOB arguments and tdbg-diff's --ops resolve
 * through dump_name_match, so each spelling gives the same tensors.
 */
#ifndef TDBG_NAMES_H
#define TDBG_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#include "te.h"

/* Thin names for the engine's te_edit_distance, te_suggest and te_nearest
 * (te.h): the one implementation. Levenshtein distance of two words;
 * INT_MAX when out of memory, which reads as "nothing similar". */
int dump_edit_distance(const char *a, const char *b);

#define DUMP_NEAR TE_NEAR /* the edit distance within which a word is suggested */

/* The nearest of n candidates to w within max_d edits (the first of
 * equals), or NULL. */
const char *dump_suggest(const char *w, const char *const *cands, int n, int max_d);
/* Up to k indices of cands into idx, nearest to w first (ties in list
 * order), however far; returns how many. */
int dump_nearest(const char *w, const char *const *cands, int n, int *idx, int k);

/* The debugger's name for the tensor at a dataset path, into buf:
 * "conv2/bn:in0" for "/conv2/bn/in0"; "param:fc1.weight" for
 * "/param/fc1.weight/out0" when exec_index < 0 (a pseudo-op). False when
 * the path is not "/OP/inN" or "/OP/outN" or buf is too small. */
bool dump_tensor_name(const char *path, int exec_index, char *buf, size_t n);

/* Does pattern name the tensor at path: equal to (glob: an fnmatch glob
 * matching) the path with or without its '/', the debugger's name, or the
 * stored tensor name (NULL or "": none)? */
bool dump_name_match(const char *pattern, bool glob, const char *path, int exec_index,
                     const char *stored);

/* The nearest spelling to a wanted name among tensors offered one at a
 * time (over several step files): their debugger names and paths. */
typedef struct dump_near {
    const char *want;
    int dist;
    char best[512]; /* "" while nothing is within DUMP_NEAR */
} dump_near;

void dump_near_init(dump_near *nr, const char *want);
void dump_near_offer(dump_near *nr, const char *path, int exec_index);

#endif
