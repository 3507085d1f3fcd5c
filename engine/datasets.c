/*
 * datasets.c — small synthetic datasets for examples and tests.
 *
 * Every sample is a pure function of (seed, index): each dataset draws its
 * numbers from the counter-based RNG on a stream of its own, with counter
 * index * PER_SAMPLE + k for the k-th number of sample `index`. So any
 * sample can be built on any thread in any order, and the loader's output
 * does not depend on how many workers build it. Labels are index % classes,
 * which balances the classes exactly; the loader shuffles the order.
 */
#include "te_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI_F 3.14159265358979f

/* RNG streams, one per use, so no two draw the same numbers. */
#define STREAM_SPIRALS 0x5350495241ull     /* "SPIRA" */
#define STREAM_BLOB_MEANS 0x424d45414eull  /* "BMEAN" */
#define STREAM_BLOBS 0x424c4f4253ull       /* "BLOBS" */
#define STREAM_SHAPES 0x5348415045ull      /* "SHAPE" */

static te_dataset *dataset_new(const char *name, int64_t size, int ndim, const int64_t *shape,
                               int classes, uint64_t seed,
                               void (*get)(const te_dataset *, int64_t, float *, int32_t *))
{
    te_dataset *d = calloc(1, sizeof(*d));
    if (!d) {
        te_set_error(TE_ERR_NOMEM, "te_dataset_%s: out of memory", name);
        return NULL;
    }
    d->name = name;
    d->size = size;
    d->ndim = ndim;
    memcpy(d->shape, shape, (size_t)ndim * sizeof(int64_t));
    d->n_classes = classes;
    d->seed = seed;
    d->get = get;
    return d;
}

static bool check_size(const char *name, int64_t size)
{
    if (size >= 1)
        return true;
    te_set_error(TE_ERR_ARG, "te_dataset_%s: size %lld must be >= 1", name, (long long)size);
    return false;
}

static bool check_classes(const char *name, int classes)
{
    if (classes >= 2)
        return true;
    te_set_error(TE_ERR_ARG, "te_dataset_%s: classes %d must be >= 2", name, classes);
    return false;
}

/* ---- spirals ------------------------------------------------------------
 * Arm c of K is the curve r = t, theta = 2*pi*c/K + 4t for t in [0, 1):
 * each arm turns through about 230 degrees, so no line separates any two
 * arms. Angular noise of 0.15 rad widens the arms without merging them
 * except near the centre, where all arms meet.
 */

#define SPIRAL_TURN 4.0f
#define SPIRAL_NOISE 0.15f

static void spirals_get(const te_dataset *d, int64_t i, float *x, int32_t *y)
{
    int c = (int)(i % d->n_classes);
    uint64_t k = (uint64_t)i * 2;
    float t = te_rand_uniform(d->seed, STREAM_SPIRALS, k);
    float theta = 2.0f * PI_F * (float)c / (float)d->n_classes + SPIRAL_TURN * t
                  + SPIRAL_NOISE * te_rand_normal(d->seed, STREAM_SPIRALS, k + 1);
    x[0] = t * cosf(theta);
    x[1] = t * sinf(theta);
    *y = c;
}

te_dataset *te_dataset_spirals(int64_t size, int classes, uint64_t seed)
{
    if (!check_size("spirals", size) || !check_classes("spirals", classes))
        return NULL;
    return dataset_new("spirals", size, 1, (const int64_t[]){ 2 }, classes, seed, spirals_get);
}

/* ---- blobs --------------------------------------------------------------
 * Class means are N(0, I) points kept apart by rejection: a candidate closer
 * than half the typical distance sqrt(2*dim) to an earlier mean is redrawn.
 * The spread is then the smallest distance between two means over 6, so two
 * neighbouring classes overlap by Phi(-3) = 0.13%. In many dimensions every
 * class has several neighbours at nearly that distance and the overlaps add
 * up (784 dims, 10 classes: the best possible rule scores about 99%), so a
 * model learns the task quickly but has to learn it.
 */

#define BLOB_TRIES 64

typedef struct blobs_state {
    float sigma;
    float means[];   /* [classes, dim] */
} blobs_state;

static void blobs_get(const te_dataset *d, int64_t i, float *x, int32_t *y)
{
    const blobs_state *s = d->state;
    int64_t dim = d->shape[0];
    int c = (int)(i % d->n_classes);
    const float *mu = s->means + (int64_t)c * dim;
    for (int64_t j = 0; j < dim; j++)
        x[j] = mu[j] + s->sigma * te_rand_normal(d->seed, STREAM_BLOBS, (uint64_t)(i * dim + j));
    *y = c;
}

static float dist2(const float *a, const float *b, int dim)
{
    float s = 0.0f;
    for (int j = 0; j < dim; j++)
        s += (a[j] - b[j]) * (a[j] - b[j]);
    return s;
}

/* Smallest squared distance from p to the first n means. */
static float nearest2(const float *p, const float *means, int n, int dim)
{
    float best = INFINITY;
    for (int o = 0; o < n; o++) {
        float d2 = dist2(p, means + (int64_t)o * dim, dim);
        if (d2 < best)
            best = d2;
    }
    return best;
}

te_dataset *te_dataset_blobs(int64_t size, int dim, int classes, uint64_t seed)
{
    if (!check_size("blobs", size) || !check_classes("blobs", classes))
        return NULL;
    if (dim < 1) {
        te_set_error(TE_ERR_ARG, "te_dataset_blobs: dim %d must be >= 1", dim);
        return NULL;
    }
    blobs_state *s = malloc(sizeof(*s) + (size_t)classes * (size_t)dim * sizeof(float));
    float *cand = malloc((size_t)dim * sizeof(float));
    te_dataset *d = s && cand ? dataset_new("blobs", size, 1, (const int64_t[]){ dim }, classes,
                                            seed, blobs_get)
                              : NULL;
    if (!d) {
        if (!s || !cand)
            te_set_error(TE_ERR_NOMEM, "te_dataset_blobs: out of memory for %d means of dim %d",
                         classes, dim);
        free(s);
        free(cand);
        return NULL;
    }
    float want2 = 0.25f * 2.0f * (float)dim;   /* (sqrt(2*dim) / 2)^2 */
    for (int c = 0; c < classes; c++) {
        float *mu = s->means + (int64_t)c * dim;
        float best = -1.0f;   /* keeps the farthest try in case none reaches want2 */
        for (int a = 0; a < BLOB_TRIES && best < want2; a++) {
            for (int j = 0; j < dim; j++)
                cand[j] = te_rand_normal(seed, STREAM_BLOB_MEANS,
                                         ((uint64_t)c * BLOB_TRIES + (uint64_t)a) * (uint64_t)dim
                                             + (uint64_t)j);
            float d2 = nearest2(cand, s->means, c, dim);
            if (d2 > best) {
                best = d2;
                memcpy(mu, cand, (size_t)dim * sizeof(float));
            }
        }
    }
    free(cand);
    float min2 = INFINITY;
    for (int c = 1; c < classes; c++) {
        float d2 = nearest2(s->means + (int64_t)c * dim, s->means, c, dim);
        if (d2 < min2)
            min2 = d2;
    }
    s->sigma = sqrtf(min2) / 6.0f;
    d->state = s;
    return d;
}

/* ---- shapes ---------------------------------------------------------------
 * Each image is one shape in one colour on a plain background, both colours
 * random but at least SHAPE_CONTRAST apart (L1 over the channels), at a
 * random position and size, anti-aliased over one pixel, with Gaussian pixel
 * noise, clipped to [-1, 1]. Shapes are drawn from signed distances (negative
 * inside), so every class is one small function of the pixel's offset from
 * the shape's centre.
 */

#define SHAPE_HW 32
#define SHAPE_CLASSES 10
#define SHAPE_PER_SAMPLE 4096   /* counters per sample: 16 parameters, 3072 noise */
#define SHAPE_NOISE 0.05f
#define SHAPE_CONTRAST 1.2f

enum {
    SHAPE_DISC, SHAPE_RING, SHAPE_SQUARE_OUTLINE, SHAPE_SQUARE, SHAPE_TRIANGLE,
    SHAPE_PLUS, SHAPE_CROSS, SHAPE_HBAR, SHAPE_VBAR, SHAPE_DIAMOND,
};

/* Signed distance to an axis-aligned box of half sizes (w, h). */
static float sd_box(float px, float py, float w, float h)
{
    float qx = fabsf(px) - w, qy = fabsf(py) - h;
    float outside = hypotf(fmaxf(qx, 0.0f), fmaxf(qy, 0.0f));
    return outside + fminf(fmaxf(qx, qy), 0.0f);
}

/* The triangle (0,-s), (s,s), (-s,s) (y grows downwards): the largest
 * distance past one of its edges, exact inside and close enough outside for
 * one pixel of anti-aliasing. */
static float sd_triangle(float px, float py, float s)
{
    /* Slanted edges have outward normals (+-2, -1)/sqrt(5) through (0,-s). */
    float slant = (2.0f * fabsf(px) - (py + s)) / sqrtf(5.0f);
    return fmaxf(slant, py - s);
}

static float sd_plus(float px, float py, float len, float half_width)
{
    return fminf(sd_box(px, py, len, half_width), sd_box(px, py, half_width, len));
}

/* Signed distance from pixel offset (px, py) to shape `kind` of size s. */
static float shape_sd(int kind, float px, float py, float s)
{
    float t = fmaxf(1.5f, 0.25f * s);   /* stroke half width */
    switch (kind) {
    case SHAPE_DISC: return hypotf(px, py) - s;
    case SHAPE_RING: return fabsf(hypotf(px, py) - s + t) - t;
    case SHAPE_SQUARE_OUTLINE: return fabsf(sd_box(px, py, 0.85f * s, 0.85f * s) + t) - t;
    case SHAPE_SQUARE: return sd_box(px, py, 0.85f * s, 0.85f * s);
    case SHAPE_TRIANGLE: return sd_triangle(px, py, s);
    case SHAPE_PLUS: return sd_plus(px, py, s, t);
    case SHAPE_CROSS: {
        const float r = 0.70710678f;
        return sd_plus(r * (px + py), r * (py - px), s, t);
    }
    case SHAPE_HBAR: return sd_box(px, py, s, fmaxf(1.5f, 0.3f * s));
    case SHAPE_VBAR: return sd_box(px, py, fmaxf(1.5f, 0.3f * s), s);
    case SHAPE_DIAMOND: return (fabsf(px) + fabsf(py) - s) * 0.70710678f;
    }
    abort();
}

static void shapes_get(const te_dataset *d, int64_t i, float *x, int32_t *y)
{
    int kind = (int)(i % SHAPE_CLASSES);
    uint64_t base = (uint64_t)i * SHAPE_PER_SAMPLE;
#define U(k) te_rand_uniform(d->seed, STREAM_SHAPES, base + (k))
    /* Half extent 6..11 px; the centre keeps the shape 2 px off the border. */
    float s = 6.0f + 5.0f * U(0);
    float lo = s + 2.0f, hi = (float)SHAPE_HW - s - 2.0f;
    float cx = lo + (hi - lo) * U(1), cy = lo + (hi - lo) * U(2);
    float bg[3], fg[3], contrast = 0.0f;
    for (int c = 0; c < 3; c++) {
        bg[c] = 2.0f * U(3 + c) - 1.0f;
        fg[c] = 2.0f * U(6 + c) - 1.0f;
        contrast += fabsf(fg[c] - bg[c]);
    }
#undef U
    if (contrast < SHAPE_CONTRAST)   /* too faint: move the shape 0.8 away per channel */
        for (int c = 0; c < 3; c++)
            fg[c] = bg[c] > 0.0f ? bg[c] - 0.8f : bg[c] + 0.8f;

    for (int py = 0; py < SHAPE_HW; py++)
        for (int px = 0; px < SHAPE_HW; px++) {
            float sd = shape_sd(kind, (float)px + 0.5f - cx, (float)py + 0.5f - cy, s);
            float alpha = fminf(fmaxf(0.5f - sd, 0.0f), 1.0f);
            for (int c = 0; c < 3; c++) {
                int64_t at = ((int64_t)c * SHAPE_HW + py) * SHAPE_HW + px;
                float v = bg[c] + alpha * (fg[c] - bg[c])
                          + SHAPE_NOISE * te_rand_normal(d->seed, STREAM_SHAPES,
                                                         base + 16 + (uint64_t)at);
                x[at] = fminf(fmaxf(v, -1.0f), 1.0f);
            }
        }
    *y = kind;
}

te_dataset *te_dataset_shapes(int64_t size, uint64_t seed)
{
    if (!check_size("shapes", size))
        return NULL;
    return dataset_new("shapes", size, 3, (const int64_t[]){ 3, SHAPE_HW, SHAPE_HW },
                       SHAPE_CLASSES, seed, shapes_get);
}

void te_dataset_free(te_dataset *d)
{
    if (!d)
        return;
    free(d->state);
    free(d);
}
