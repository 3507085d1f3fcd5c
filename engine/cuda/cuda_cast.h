/*
 * cuda_cast.h — Cast on the CUDA backend (cpu_shape.c's cpu_cast_*: every
 * conversion through f32, rounding to nearest even, n->round[0] filled),
 * and the backend's round and widen services (te_backend.round, .widen:
 * lowp.c's te_round_block and te_half_to_f32 on device memory).
 */
#ifndef TE_CUDA_CAST_H
#define TE_CUDA_CAST_H

#include "te_internal.h"

te_status cuda_cast_forward(te_node *n);
te_status cuda_cast_backward(te_node *n);

/* n floats of src rounded to nearest even into dst (f16 or bf16), what
 * rounding did ADDED to *st as te_round_block does (NULL: not counted, and
 * the host does not wait). Device pointers; *st on the host. On a CUDA
 * error the engine's error is set (te_error) and *st is left alone. */
void cuda_round(const float *src, void *dst, te_dtype dt, int64_t n, te_round_stats *st);
/* cuda_round for a kernel's glue (matmul, linear, attention): a CUDA error
 * is recorded on n (NULL: the engine's error) as "what: ...". */
te_status cuda_round_on(te_node *n, const float *src, void *dst, te_dtype dt, int64_t count, te_round_stats *st,
                        const char *what);
/* n f16 or bf16 values widened exactly to f32. Device pointers. */
void cuda_widen(const uint16_t *src, float *dst, te_dtype dt, int64_t n);

#endif
