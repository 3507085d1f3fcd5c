/*
 * cpu_dnnl.h — oneDNN for the CPU backend's kernels (cpu_dnnl.c): one
 * engine and stream, and a primitive run on the engine's tensors in their
 * plain layouts, whatever layouts the primitive chose. The bf16 kernels
 * (cpu_lowp.c) and the f32 convolutions (cpu_conv_dnnl.c) use it.
 */
#ifndef TE_CPU_DNNL_H
#define TE_CPU_DNNL_H

#include "te_internal.h"

#include <oneapi/dnnl/dnnl.h>

/* The engine of every primitive here, once cpu_dnnl_engine() said true. */
extern dnnl_engine_t cpu_dnnl_eng;

/* Makes the engine and stream the first time; false when oneDNN cannot. */
bool cpu_dnnl_engine(void);

/* One argument of a primitive: its DNNL_ARG_*, the buffer at p in the
 * plain layout md describes. */
typedef struct cpu_dnnl_io {
    int arg;
    dnnl_memory_desc_t md;
    const void *p;
} cpu_dnnl_io;

/* The primitive of op_desc (hint: the forward one of a backward), run on
 * the n (at most 8) buffers of io. A primitive that chose its own layout
 * (its descriptor said `any`: the blocked layouts of oneDNN's fastest
 * convolutions) gets its inputs reordered into scratch first and its
 * outputs reordered back after. Each call makes its primitive descriptor;
 * oneDNN's primitive cache keeps the compiled kernels, so a repeated shape
 * costs a look-up. False, no output written, when oneDNN has no
 * implementation or fails. */
bool cpu_dnnl_run(const void *op_desc, const_dnnl_primitive_desc_t hint, const cpu_dnnl_io *io, int n);

/* A Conv2D node's geometry as oneDNN's: x's, w's and y's dtypes as given,
 * in layout NCHW and OIHW as the tensors are, or `any` (the primitive's
 * choice); the right padding is what makes the output size y's (less
 * than the left when the stride leaves a remainder). */
typedef struct cpu_dnnl_conv {
    dnnl_memory_desc_t x, w, b, y;
    dnnl_dims_t stride, pad_l, pad_r;
} cpu_dnnl_conv;
cpu_dnnl_conv cpu_dnnl_conv_of(const te_node *n, dnnl_data_type_t xt, dnnl_data_type_t wt, dnnl_data_type_t yt,
                               bool any);

#endif
