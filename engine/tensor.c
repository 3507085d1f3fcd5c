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

te_tensor *te_tensor_alloc_on(te_device d, te_dtype dt, int ndim, const int64_t *shape, unsigned flags)
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
    if (!te_backend_need("tensor", d))
        return NULL;
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
    t->device = d;
    if (!(flags & TE_TENSOR_ABSTRACT)) {
        void *p = te_mem_alloc_on(d, t->nbytes);
        if (!p) {
            te_set_error(TE_ERR_NOMEM, "tensor: cannot allocate %zu bytes for %s %s on %s", t->nbytes,
                         te_dtype_name(dt), te_shape_str(ndim, shape, sb, sizeof sb), te_device_name(d));
            free(t);
            return NULL;
        }
        t->data = p;
    }
    if (!(flags & TE_TENSOR_PERSISTENT))
        te_tape_track(t);
    else if (te_data(t))
        te_persist_track(t);
    return t;
}

te_tensor *te_tensor_alloc(te_dtype dt, int ndim, const int64_t *shape, unsigned flags)
{
    return te_tensor_alloc_on(te_backend_current()->device, dt, ndim, shape, flags);
}

te_tensor *te_tensor_new(te_dtype dt, int ndim, const int64_t *shape)
{
    return te_tensor_alloc(dt, ndim, shape, 0);
}

static void zero(te_tensor *t)
{
    if (t->nbytes)
        te_backend_for(t)->zero(te_data(t), t->nbytes);
}

te_tensor *te_tensor_zeros(te_dtype dt, int ndim, const int64_t *shape)
{
    te_tensor *t = te_tensor_alloc(dt, ndim, shape, 0);
    if (t)
        zero(t);
    return t;
}

te_tensor *te_tensor_from(te_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    te_tensor *t = te_tensor_alloc(dt, ndim, shape, 0);
    if (t && t->nbytes)
        te_backend_for(t)->from_host(te_data(t), data, t->nbytes);
    return t;
}

te_tensor *te_tensor_persistent(te_dtype dt, int ndim, const int64_t *shape)
{
    te_tensor *t = te_tensor_alloc(dt, ndim, shape, TE_TENSOR_PERSISTENT);
    if (t)
        zero(t);
    return t;
}

te_tensor *te_tensor_to(const te_tensor *t, te_device dev)
{
    if (!t) {
        te_set_error(TE_ERR_INPUT, "te_tensor_to: the tensor is NULL");
        return NULL;
    }
    const te_backend *dst_be = te_backend_need("te_tensor_to", dev);
    if (!dst_be)
        return NULL;
    if (t->numel && !te_data(t)) {
        te_set_error(TE_ERR_STATE, "te_tensor_to: %s has no data (traced, or its memory was given back)",
                     t->name[0] ? t->name : "the tensor");
        return NULL;
    }
    te_tensor *c = te_tensor_alloc_on(dev, t->dtype, t->ndim, t->shape, 0);
    if (!c)
        return NULL;
    memcpy(c->name, t->name, sizeof c->name);
    if (!t->nbytes)
        return c;
    const te_backend *src_be = te_backend_for(t);
    if (src_be == dst_be)
        dst_be->copy(te_data(c), te_data(t), t->nbytes);
    else if (te_backend_is_host(src_be)) /* host memory: the device's own upload */
        dst_be->from_host(te_data(c), te_data(t), t->nbytes);
    else if (te_backend_is_host(dst_be))
        src_be->to_host(te_data(c), te_data(t), t->nbytes);
    else { /* between two devices, through the host */
        void *tmp = malloc(t->nbytes);
        if (!tmp) {
            te_set_error(TE_ERR_NOMEM, "te_tensor_to: cannot stage %zu bytes of %s on the host", t->nbytes, t->name);
            return NULL;
        }
        src_be->to_host(tmp, te_data(t), t->nbytes);
        dst_be->from_host(te_data(c), tmp, t->nbytes);
        free(tmp);
    }
    return c;
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
    te_persist_forget(t);
    if (t->flags & TE_TENSOR_BUFFER)
        te_buffer_forget(t);
    te_mem_free_on(t->device, te_data(t), t->nbytes);
    free(t);
}

/* ---- access ---------------------------------------------------------------
 * Through the tensor's backend: its to_host and from_host move the bytes,
 * the host converts them. */

/* One element's bytes, whatever the dtype. */
typedef union {
    float f;
    uint16_t h;
    int32_t i;
} element;

static float element_f32(te_dtype dt, element e)
{
    switch (dt) {
    case TE_F32: return e.f;
    case TE_F16: return te_f16_to_f32(e.h);
    case TE_BF16: return te_bf16_to_f32(e.h);
    case TE_I32: return (float)e.i;
    case TE_DTYPE_COUNT: break;
    }
    abort();
}

static element f32_element(te_dtype dt, float v)
{
    switch (dt) {
    case TE_F32: return (element){ .f = v };
    case TE_F16: return (element){ .h = te_f32_to_f16(v) };
    case TE_BF16: return (element){ .h = te_f32_to_bf16(v) };
    case TE_I32: return (element){ .i = (int32_t)lrintf(v) };
    case TE_DTYPE_COUNT: break;
    }
    abort();
}

float te_get(const te_tensor *t, int64_t i)
{
    element e;
    te_backend_for(t)->to_host(&e, te_data_at(t, i), te_dtype_size(t->dtype));
    return element_f32(t->dtype, e);
}

void te_set(te_tensor *t, int64_t i, float v)
{
    te_record_forget_sum(t);
    element e = f32_element(t->dtype, v);
    te_backend_for(t)->from_host(te_data_at(t, i), &e, te_dtype_size(t->dtype));
}

float te_item(const te_tensor *t) { return te_get(t, 0); }

/* Elements moved per host buffer where they are converted on the host. */
#define STAGE 4096

/* count elements of t from first into f32 dst (host). */
static void read_f32(const te_tensor *t, int64_t first, int64_t count, float *dst)
{
    const te_backend *be = te_backend_for(t);
    if (t->dtype == TE_F32) {
        be->to_host(dst, te_data_at(t, first), (size_t)count * sizeof *dst);
    } else if (t->dtype == TE_I32) { /* the ints land in dst and widen in place */
        be->to_host(dst, te_data_at(t, first), (size_t)count * sizeof *dst);
        for (int64_t i = 0; i < count; i++) {
            int32_t v;
            memcpy(&v, dst + i, sizeof v);
            dst[i] = (float)v;
        }
    } else if (te_backend_is_host(be)) {
        be->widen(te_data_at(t, first), dst, t->dtype, count);
    } else { /* halves staged on the host, widened there: exact either way */
        uint16_t h[STAGE];
        for (int64_t b = 0; b < count; b += STAGE) {
            const int64_t m = count - b < STAGE ? count - b : STAGE;
            be->to_host(h, te_data_at(t, first + b), (size_t)m * sizeof *h);
            te_half_to_f32(h, dst + b, t->dtype, m);
        }
    }
}

void te_copy_to_f32(const te_tensor *t, float *dst) { read_f32(t, 0, t->numel, dst); }

void te_copy_from_f32(te_tensor *t, const float *src)
{
    if (t->dtype == TE_F32) {
        if (t->nbytes)
            te_backend_for(t)->from_host(te_data(t), src, t->nbytes);
        return;
    }
    if (t->dtype == TE_F16 || t->dtype == TE_BF16) {
        te_round_f32(t, src, NULL); /* the same bits as te_set's, in vector loops */
        return;
    }
    int32_t v[STAGE]; /* i32: converted on the host, as te_set does */
    for (int64_t b = 0; b < t->numel; b += STAGE) {
        const int64_t m = t->numel - b < STAGE ? t->numel - b : STAGE;
        for (int64_t i = 0; i < m; i++)
            v[i] = (int32_t)lrintf(src[b + i]);
        te_backend_for(t)->from_host(te_data_at(t, b), v, (size_t)m * sizeof *v);
    }
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
    if (st == TE_OK && count > 0)
        te_backend_for(t)->to_host(dst, te_data_at(t, first), (size_t)count * te_dtype_size(t->dtype));
    return st;
}

te_status te_tensor_read_f32(const te_tensor *t, int64_t first, int64_t count, float *dst)
{
    te_status st = slice_ok(t, first, count, "te_tensor_read_f32");
    if (st == TE_OK && count > 0)
        read_f32(t, first, count, dst);
    return st;
}

te_status te_tensor_write(te_tensor *t, int64_t first, int64_t count, const void *src)
{
    te_record_forget_sum(t);
    te_status st = slice_ok(t, first, count, "te_tensor_write");
    if (st == TE_OK && count > 0)
        te_backend_for(t)->from_host(te_data_at(t, first), src, (size_t)count * te_dtype_size(t->dtype));
    return st;
}

void te_fill(te_tensor *t, float v)
{
    /* One host buffer of the value in t's dtype, written over t block by block. */
    const element e = f32_element(t->dtype, v);
    const size_t es = te_dtype_size(t->dtype);
    const int64_t m = t->numel < STAGE ? t->numel : STAGE;
    unsigned char buf[STAGE * sizeof(element)];
    for (int64_t i = 0; i < m; i++)
        memcpy(buf + (size_t)i * es, &e, es);
    for (int64_t b = 0; b < t->numel; b += STAGE)
        te_backend_for(t)->from_host(te_data_at(t, b), buf, (size_t)(t->numel - b < STAGE ? t->numel - b : STAGE) * es);
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
