/* tensor.c — dtypes, half-precision conversion, tensor creation and access. */
#include "te_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtype_info[] = {
    [TE_F32] = { "f32", 4 },
    [TE_F16] = { "f16", 2 },
    [TE_BF16] = { "bf16", 2 },
    [TE_I32] = { "i32", 4 },
};
_Static_assert(sizeof dtype_info / sizeof dtype_info[0] == TE_DTYPE_COUNT,
               "every dtype needs a name and a size");

const char *te_dtype_name(te_dtype dt)
{
    return (unsigned)dt < TE_DTYPE_COUNT ? dtype_info[dt].name : "?";
}

size_t te_dtype_size(te_dtype dt) { return dtype_info[dt].size; }

bool te_dtype_is_float(te_dtype dt) { return dt == TE_F32 || dt == TE_F16 || dt == TE_BF16; }

const char *te_device_name(te_device d)
{
    static const char *const names[TE_DEV_COUNT] = { "cpu", "cuda" };
    return (unsigned)d < TE_DEV_COUNT ? names[d] : "?";
}

/* ---- half precision ------------------------------------------------------ */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t te_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan: keep nan quiet and non-zero */
        return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0);
    if (ax >= 0x477ff000u) /* rounds to beyond 65504 */
        return sign | 0x7c00u;
    if (ax < 0x38800000u) { /* subnormal or zero in f16 */
        if (ax < 0x33000000u) /* below half the smallest subnormal */
            return sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return sign | (uint16_t)half;
    }
    /* normal: rebias exponent, round mantissa to 10 bits, nearest even */
    uint32_t r = ax - 0x38000000u;
    uint32_t half = r >> 13;
    uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
        half++;
    return sign | (uint16_t)half;
}

float te_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1f)
        return bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        /* subnormal: m * 2^-24 is exact in f32 */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t te_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    uint32_t lsb = (x >> 16) & 1u;
    return (uint16_t)((x + 0x7fffu + lsb) >> 16);
}

float te_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* ---- creation ------------------------------------------------------------- */

char *te_shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

te_tensor *te_tensor_alloc(te_dtype dt, int ndim, const int64_t *shape, unsigned flags)
{
    char sb[96];
    if ((unsigned)dt >= TE_DTYPE_COUNT) {
        te_set_error(TE_ERR_DTYPE, "tensor: unknown dtype %d", (int)dt);
        return NULL;
    }
    if (ndim < 0 || ndim > TE_MAX_DIMS) {
        te_set_error(TE_ERR_SHAPE, "tensor: %d dims, at most %d supported", ndim, TE_MAX_DIMS);
        return NULL;
    }
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            te_set_error(TE_ERR_SHAPE, "tensor: negative size in shape %s",
                         te_shape_str(ndim, shape, sb, sizeof sb));
            return NULL;
        }
        numel *= shape[i];
    }
    te_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        te_set_error(TE_ERR_NOMEM, "tensor: out of memory");
        return NULL;
    }
    t->dtype = dt;
    t->ndim = ndim;
    if (ndim) /* a scalar may come with no shape array at all */
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = numel;
    t->nbytes = (size_t)numel * te_dtype_size(dt);
    t->flags = flags;
    t->data = flags & TE_TENSOR_ABSTRACT ? NULL : te_mem_alloc(t->nbytes);
    if (!t->data && !(flags & TE_TENSOR_ABSTRACT)) {
        te_set_error(TE_ERR_NOMEM, "tensor: cannot allocate %zu bytes for %s %s", t->nbytes,
                     te_dtype_name(dt), te_shape_str(ndim, shape, sb, sizeof sb));
        free(t);
        return NULL;
    }
    if (!(flags & TE_TENSOR_PERSISTENT))
        te_tape_track(t);
    return t;
}

te_tensor *te_tensor_new(te_dtype dt, int ndim, const int64_t *shape)
{
    return te_tensor_alloc(dt, ndim, shape, 0);
}

te_tensor *te_tensor_zeros(te_dtype dt, int ndim, const int64_t *shape)
{
    te_tensor *t = te_tensor_alloc(dt, ndim, shape, 0);
    if (t)
        memset(t->data, 0, t->nbytes);
    return t;
}

te_tensor *te_tensor_from(te_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    te_tensor *t = te_tensor_alloc(dt, ndim, shape, 0);
    if (t && t->nbytes)
        memcpy(t->data, data, t->nbytes);
    return t;
}

te_tensor *te_tensor_persistent(te_dtype dt, int ndim, const int64_t *shape)
{
    te_tensor *t = te_tensor_alloc(dt, ndim, shape, TE_TENSOR_PERSISTENT);
    if (t)
        memset(t->data, 0, t->nbytes);
    return t;
}

/* Frees a persistent tensor's memory and its persistent gradient. A tape
 * tensor is refused: the tape frees it at te_tape_reset(). */
void te_tensor_free(te_tensor *t)
{
    if (!t)
        return;
    if (!(t->flags & TE_TENSOR_PERSISTENT)) {
        te_set_error(TE_ERR_STATE, "te_tensor_free: %s belongs to the tape, which frees it at the step's end",
                     t->name[0] ? t->name : "the tensor");
        return;
    }
    if (t->grad && (t->grad->flags & TE_TENSOR_PERSISTENT))
        te_tensor_free(t->grad);
    te_mem_free(t->data, t->nbytes);
    free(t);
}

/* ---- access ------------------------------------------------------------- */

float te_get(const te_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case TE_F32: return ((const float *)t->data)[i];
    case TE_F16: return te_f16_to_f32(((const uint16_t *)t->data)[i]);
    case TE_BF16: return te_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case TE_I32: return (float)((const int32_t *)t->data)[i];
    case TE_DTYPE_COUNT: break;
    }
    abort();
}

void te_set(te_tensor *t, int64_t i, float v)
{
    switch (t->dtype) {
    case TE_F32: ((float *)t->data)[i] = v; return;
    case TE_F16: ((uint16_t *)t->data)[i] = te_f32_to_f16(v); return;
    case TE_BF16: ((uint16_t *)t->data)[i] = te_f32_to_bf16(v); return;
    case TE_I32: ((int32_t *)t->data)[i] = (int32_t)lrintf(v); return;
    case TE_DTYPE_COUNT: break;
    }
    abort();
}

float te_item(const te_tensor *t) { return te_get(t, 0); }

void te_copy_to_f32(const te_tensor *t, float *dst)
{
    if (t->dtype == TE_F32) {
        memcpy(dst, t->data, t->nbytes);
        return;
    }
    if (t->dtype == TE_F16 || t->dtype == TE_BF16) {
        const int64_t n = t->numel, chunks = (n + TE_PAR_MIN - 1) / TE_PAR_MIN;
#pragma omp parallel for if (chunks > 1)
        for (int64_t c = 0; c < chunks; c++) {
            const int64_t i0 = c * TE_PAR_MIN;
            te_half_to_f32((const uint16_t *)t->data + i0, dst + i0, t->dtype,
                           n - i0 < TE_PAR_MIN ? n - i0 : TE_PAR_MIN);
        }
        return;
    }
    for (int64_t i = 0; i < t->numel; i++)
        dst[i] = te_get(t, i);
}

void te_copy_from_f32(te_tensor *t, const float *src)
{
    if (t->dtype == TE_F32) {
        memcpy(t->data, src, t->nbytes);
        return;
    }
    if (t->dtype == TE_F16 || t->dtype == TE_BF16) {
        te_round_f32(t, src, NULL); /* the same bits as te_set's, in vector loops */
        return;
    }
    for (int64_t i = 0; i < t->numel; i++)
        te_set(t, i, src[i]);
}

static te_status slice_ok(const te_tensor *t, int64_t first, int64_t count, const char *fn)
{
    if (first < 0 || count < 0 || first > t->numel || count > t->numel - first) {
        te_set_error(TE_ERR_ARG, "%s: elements [%lld, %lld) are outside %s (%lld elements)", fn, (long long)first,
                     (long long)first + (long long)count, t->name[0] ? t->name : "the tensor", (long long)t->numel);
        return TE_ERR_ARG;
    }
    return TE_OK;
}

te_status te_tensor_read(const te_tensor *t, int64_t first, int64_t count, void *dst)
{
    te_status st = slice_ok(t, first, count, "te_tensor_read");
    if (st == TE_OK && count > 0) {
        const size_t es = te_dtype_size(t->dtype);
        memcpy(dst, (const char *)t->data + (size_t)first * es, (size_t)count * es);
    }
    return st;
}

te_status te_tensor_read_f32(const te_tensor *t, int64_t first, int64_t count, float *dst)
{
    te_status st = slice_ok(t, first, count, "te_tensor_read_f32");
    if (st != TE_OK || count == 0)
        return st;
    if (t->dtype == TE_F32)
        memcpy(dst, (const float *)t->data + first, (size_t)count * sizeof *dst);
    else if (t->dtype == TE_F16 || t->dtype == TE_BF16)
        te_half_to_f32((const uint16_t *)t->data + first, dst, t->dtype, count);
    else
        for (int64_t i = 0; i < count; i++)
            dst[i] = (float)((const int32_t *)t->data)[first + i];
    return TE_OK;
}

te_status te_tensor_write(te_tensor *t, int64_t first, int64_t count, const void *src)
{
    te_status st = slice_ok(t, first, count, "te_tensor_write");
    if (st == TE_OK && count > 0) {
        const size_t es = te_dtype_size(t->dtype);
        memcpy((char *)t->data + (size_t)first * es, src, (size_t)count * es);
    }
    return st;
}

void te_fill(te_tensor *t, float v)
{
    for (int64_t i = 0; i < t->numel; i++)
        te_set(t, i, v);
}

bool te_same_shape(const te_tensor *a, const te_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}
