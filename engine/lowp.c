/*
 * lowp.c — rounding f32 results to f16 or bf16, and what the rounding did.
 *
 * Every low-precision result in the engine is computed in f32 and rounded
 * once, to nearest even, here (or by a kernel through te_round_block): a
 * value beyond the dtype's largest finite one becomes +-Inf as IEEE says,
 * f16's subnormals are kept, and a finite non-zero value below half the
 * smallest subnormal becomes a signed zero. The counts of both, and the
 * largest magnitude before rounding, are what `break overflow` and `break
 * underflow` read (te_op_record.round): the value that overflowed is gone
 * from the tensor, so its size is kept here.
 */
#include "te_internal.h"

#include <math.h>
#include <string.h>

float te_dtype_max(te_dtype dt)
{
    switch (dt) {
    case TE_F16: return 65504.0f;
    case TE_BF16: return 3.38953139e38f; /* 0x7f7f: (2 - 2^-7) * 2^127 */
    case TE_F32: return 3.40282347e38f;
    case TE_I32: return 2147483647.0f;
    case TE_DTYPE_COUNT: break;
    }
    return 0.0f;
}

static void stats_clear(te_round_stats *st, te_dtype dt)
{
    memset(st, 0, sizeof *st);
    st->dtype = dt;
}

void te_round_block(const float *src, void *dst, te_dtype dt, int64_t n, te_round_stats *st)
{
    int64_t over = 0, under = 0, nonzero = 0;
    float amax = 0.0f;
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) {
        const float x = src[i];
        const uint16_t r = dt == TE_F16 ? te_f32_to_f16(x) : te_f32_to_bf16(x);
        h[i] = r;
        if (!isfinite(x) || x == 0.0f)
            continue;
        const float a = fabsf(x);
        amax = a > amax ? a : amax;
        nonzero++;
        over += (r & 0x7fffu) == (dt == TE_F16 ? 0x7c00u : 0x7f80u); /* became +-Inf */
        under += (r & 0x7fffu) == 0;                                  /* became +-0 */
    }
    if (st) {
        st->overflow += over;
        st->underflow += under;
        st->nonzero += nonzero;
        st->absmax = amax > st->absmax ? amax : st->absmax;
    }
}

#define ROUND_CHUNK 4096

void te_round_f32(te_tensor *t, const float *src, te_round_stats *st)
{
    if (st)
        stats_clear(st, t->dtype);
    if (t->dtype != TE_F16 && t->dtype != TE_BF16) {
        te_copy_from_f32(t, src);
        return;
    }
    const int64_t n = t->numel, chunks = (n + ROUND_CHUNK - 1) / ROUND_CHUNK;
    int64_t over = 0, under = 0, nonzero = 0;
    float amax = 0.0f;
#pragma omp parallel for if (n >= TE_PAR_MIN) reduction(+ : over, under, nonzero) reduction(max : amax)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t i0 = c * ROUND_CHUNK, m = n - i0 < ROUND_CHUNK ? n - i0 : ROUND_CHUNK;
        te_round_stats part;
        stats_clear(&part, t->dtype);
        te_round_block(src + i0, (uint16_t *)t->data + i0, t->dtype, m, &part);
        over += part.overflow;
        under += part.underflow;
        nonzero += part.nonzero;
        amax = part.absmax > amax ? part.absmax : amax;
    }
    if (st) {
        st->overflow = over;
        st->underflow = under;
        st->nonzero = nonzero;
        st->absmax = amax;
    }
}
