/*
 * cpu_dnnl.h — oneDNN for the CPU backend's kernels (cpu_dnnl.c): one
 * engine and stream, and a primitive run on the engine's tensors in their
 * plain layouts, whatever layouts the primitive chose, and a Conv2D's
 * primitives. The bf16 kernels (cpu_lowp.c) and the f32 convolutions
 * (cpu_conv_dnnl.c) use it.
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

/* A Conv2D node's primitives on plain NCHW/OIHW buffers, the layouts
 * oneDNN's (cpu_dnnl_run), with x's, w's and y's dtypes as given (the
 * gradients' dtypes are those of what they are the gradients of): the
 * forward (b: NULL for none); the forward's descriptor as the backwards'
 * hint, all of dtype dt (NULL when oneDNN has none; the caller destroys
 * it); dx; dw and db (db: NULL for none). False when oneDNN cannot. */
bool cpu_dnnl_conv_forward(const te_node *n, dnnl_data_type_t xt, dnnl_data_type_t wt, dnnl_data_type_t yt,
                           const void *x, const void *w, const void *b, void *y);
/* f32, y = conv(x) + y: y holds the addend and gets the sum (a sum
 * post-op; the conv's own output shape). */
bool cpu_dnnl_conv_forward_sum(const te_node *n, const void *x, const void *w, const void *b, void *y);
dnnl_primitive_desc_t cpu_dnnl_conv_hint(const te_node *n, dnnl_data_type_t dt, bool bias);
bool cpu_dnnl_conv_backward_data(const te_node *n, dnnl_data_type_t xt, dnnl_data_type_t wt, dnnl_data_type_t yt,
                                 const_dnnl_primitive_desc_t hint, void *dx, const void *w, const void *dy);
bool cpu_dnnl_conv_backward_weights(const te_node *n, dnnl_data_type_t xt, dnnl_data_type_t wt, dnnl_data_type_t yt,
                                    const_dnnl_primitive_desc_t hint, const void *x, const void *dy, void *dw,
                                    void *db);

#endif
