/* test_data.c — the synthetic datasets and the batch loader. */
#include "suites.h"
#include "te.h"
#include "testutil.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int64_t sample_numel(const te_dataset *d)
{
    int64_t n = 1;
    for (int k = 0; k < d->ndim; k++)
        n *= d->shape[k];
    return n;
}

/* Fails unless the first n samples of a and b are bitwise equal; returns
 * how many of them differ between a and c. */
static int64_t compare_datasets(const te_dataset *a, const te_dataset *b, const te_dataset *c,
                                int64_t n)
{
    int64_t numel = sample_numel(a), differ = 0;
    float *xa = malloc((size_t)numel * sizeof(float)), *xb = malloc((size_t)numel * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        int32_t ya, yb;
        a->get(a, i, xa, &ya);
        b->get(b, i, xb, &yb);
        if (ya != yb || memcmp(xa, xb, (size_t)numel * sizeof(float)) != 0)
            ck_abort_msg("%s sample %lld differs between two datasets of the same seed", a->name,
                         (long long)i);
        c->get(c, i, xb, &yb);
        differ += memcmp(xa, xb, (size_t)numel * sizeof(float)) != 0;
    }
    free(xa);
    free(xb);
    return differ;
}

/* Labels must be in range and exactly balanced (size a multiple of classes). */
static void assert_balanced(const te_dataset *d)
{
    int64_t numel = sample_numel(d);
    float *x = malloc((size_t)numel * sizeof(float));
    int64_t *count = calloc((size_t)d->n_classes, sizeof(int64_t));
    for (int64_t i = 0; i < d->size; i++) {
        int32_t y;
        d->get(d, i, x, &y);
        ck_assert_msg(y >= 0 && y < d->n_classes, "%s sample %lld: label %d not in [0,%d)", d->name,
                      (long long)i, y, d->n_classes);
        count[y]++;
        for (int64_t k = 0; k < numel; k++)
            if (!isfinite(x[k]))   /* ck_assert in a hot loop costs a pipe write each */
                ck_abort_msg("%s sample %lld element %lld is %g", d->name, (long long)i,
                             (long long)k, x[k]);
    }
    for (int c = 0; c < d->n_classes; c++)
        ck_assert_msg(count[c] == d->size / d->n_classes, "%s: class %d has %lld of %lld samples",
                      d->name, c, (long long)count[c], (long long)d->size);
    free(count);
    free(x);
}

/* ---- datasets ------------------------------------------------------------ */

START_TEST(test_spirals)
{
    const int K = 5;
    te_dataset *a = te_dataset_spirals(1000, K, 7), *b = te_dataset_spirals(1000, K, 7);
    te_dataset *c = te_dataset_spirals(1000, K, 8);
    ck_assert_ptr_nonnull(a);
    ck_assert_msg(a->size == 1000 && a->ndim == 1 && a->shape[0] == 2 && a->n_classes == K,
                  "spirals: size %lld ndim %d shape[0] %lld classes %d", (long long)a->size,
                  a->ndim, (long long)a->shape[0], a->n_classes);
    int64_t differ = compare_datasets(a, b, c, 1000);
    ck_assert_msg(differ == 1000, "only %lld of 1000 samples change with the seed",
                  (long long)differ);
    assert_balanced(a);

    /* Each point lies on its own arm: of the K arms' ideal angles at the
     * point's radius (2*pi*c/K + 4r), its class's is the nearest. */
    int64_t outer = 0, on_arm = 0;
    double rsum = 0.0;
    for (int64_t i = 0; i < a->size; i++) {
        float x[2];
        int32_t y;
        a->get(a, i, x, &y);
        double r = hypot(x[0], x[1]);
        if (r >= 1.0)
            ck_abort_msg("sample %lld radius %g >= 1", (long long)i, r);
        rsum += r;
        if (r < 0.2)
            continue;
        int best = -1;
        double best_d = INFINITY;
        for (int arm = 0; arm < K; arm++) {
            double d = atan2(x[1], x[0]) - (2.0 * M_PI * arm / K + 4.0 * r);
            d = fabs(remainder(d, 2.0 * M_PI));
            if (d < best_d) {
                best_d = d;
                best = arm;
            }
        }
        outer++;
        on_arm += best == y;
    }
    ck_assert_msg(on_arm >= 0.97 * (double)outer, "only %lld of %lld points nearest their own arm",
                  (long long)on_arm, (long long)outer);
    ck_assert_msg(fabs(rsum / 1000.0 - 0.5) < 0.05, "mean radius %g, want about 0.5",
                  rsum / 1000.0);
    te_dataset_free(a);
    te_dataset_free(b);
    te_dataset_free(c);
}
END_TEST

/* Nearest class mean (estimated from the samples) classifies blobs well but
 * not perfectly: the classes overlap. Returns its accuracy. */
static double nearest_mean_accuracy(const te_dataset *d)
{
    int dim = (int)d->shape[0], K = d->n_classes;
    double *mean = calloc((size_t)K * (size_t)dim, sizeof(double));
    float *x = malloc((size_t)dim * sizeof(float));
    int32_t y;
    for (int64_t i = 0; i < d->size; i++) {
        d->get(d, i, x, &y);
        for (int j = 0; j < dim; j++)
            mean[y * dim + j] += x[j] / (double)(d->size / K);
    }
    int64_t right = 0;
    for (int64_t i = 0; i < d->size; i++) {
        d->get(d, i, x, &y);
        int best = -1;
        double best_d = INFINITY;
        for (int c = 0; c < K; c++) {
            double s = 0.0;
            for (int j = 0; j < dim; j++)
                s += (x[j] - mean[c * dim + j]) * (x[j] - mean[c * dim + j]);
            if (s < best_d) {
                best_d = s;
                best = c;
            }
        }
        right += best == y;
    }
    free(x);
    free(mean);
    return (double)right / (double)d->size;
}

START_TEST(test_blobs)
{
    const struct { int dim, classes; } cases[] = { { 2, 4 }, { 8, 6 }, { 32, 10 } };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        int dim = cases[k].dim, K = cases[k].classes;
        te_dataset *a = te_dataset_blobs(3000, dim, K, 3), *b = te_dataset_blobs(3000, dim, K, 3);
        te_dataset *c = te_dataset_blobs(3000, dim, K, 4);
        ck_assert_ptr_nonnull(a);
        ck_assert_msg(a->ndim == 1 && a->shape[0] == dim && a->n_classes == K,
                      "blobs(dim %d, classes %d): ndim %d shape[0] %lld classes %d", dim, K,
                      a->ndim, (long long)a->shape[0], a->n_classes);
        int64_t differ = compare_datasets(a, b, c, 3000);
        ck_assert_msg(differ == 3000, "dim %d: only %lld of 3000 samples change with the seed", dim,
                      (long long)differ);
        assert_balanced(a);
        double acc = nearest_mean_accuracy(a);
        /* The best possible rule scores high: the task is learnable. */
        ck_assert_msg(acc > 0.95, "blobs(dim %d, classes %d): nearest-mean accuracy %.4f, want > 0.95",
                      dim, K, acc);
        te_dataset_free(a);
        te_dataset_free(b);
        te_dataset_free(c);
    }
}
END_TEST

#define FEAT_GRID 8
#define FEAT_N (FEAT_GRID * FEAT_GRID + 1)

/* Scale- and position-free features of a shapes image: the foreground mask
 * (pixels more than 0.6 from the border's mean colour, L1 over channels)
 * averaged on an 8x8 grid over its bounding box, plus the box's log aspect
 * ratio (which tells the bars from the filled square). Returns the mask's
 * pixel count. */
static int shape_features(const float *img, float *feat)
{
    enum { HW = 32, P = HW * HW };
    float bg[3] = { 0 };
    for (int c = 0; c < 3; c++) {
        for (int k = 0; k < HW; k++)
            bg[c] += img[c * P + k] + img[c * P + (HW - 1) * HW + k] + img[c * P + k * HW]
                     + img[c * P + k * HW + HW - 1];
        bg[c] /= 4 * HW;
    }
    bool mask[HW * HW];
    int x0 = HW, x1 = -1, y0 = HW, y1 = -1, area = 0;
    for (int p = 0; p < P; p++) {
        float dev = 0.0f;
        for (int c = 0; c < 3; c++)
            dev += fabsf(img[c * P + p] - bg[c]);
        mask[p] = dev > 0.6f;
        if (mask[p]) {
            area++;
            x0 = p % HW < x0 ? p % HW : x0;
            x1 = p % HW > x1 ? p % HW : x1;
            y0 = p / HW < y0 ? p / HW : y0;
            y1 = p / HW > y1 ? p / HW : y1;
        }
    }
    if (area == 0)
        return 0;
    int w = x1 - x0 + 1, h = y1 - y0 + 1;
    float cells[FEAT_GRID * FEAT_GRID] = { 0 };
    for (int py = y0; py <= y1; py++)
        for (int px = x0; px <= x1; px++) {
            int cell = (py - y0) * FEAT_GRID / h * FEAT_GRID + (px - x0) * FEAT_GRID / w;
            feat[cell] += mask[py * HW + px];
            cells[cell] += 1.0f;
        }
    for (int k = 0; k < FEAT_GRID * FEAT_GRID; k++)
        feat[k] = cells[k] > 0.0f ? feat[k] / cells[k] : 0.0f;
    feat[FEAT_N - 1] = 4.0f * logf((float)w / (float)h);
    return area;
}

START_TEST(test_shapes)
{
    enum { TRAIN = 300, TEST = 200, N = TRAIN + TEST, NUMEL = 3 * 32 * 32 };
    te_dataset *a = te_dataset_shapes(N, 11), *b = te_dataset_shapes(N, 11);
    te_dataset *c = te_dataset_shapes(N, 12);
    ck_assert_ptr_nonnull(a);
    ck_assert_msg(a->ndim == 3 && a->shape[0] == 3 && a->shape[1] == 32 && a->shape[2] == 32
                      && a->n_classes == 10,
                  "shapes: ndim %d shape [%lld,%lld,%lld] classes %d", a->ndim,
                  (long long)a->shape[0], (long long)a->shape[1], (long long)a->shape[2],
                  a->n_classes);
    int64_t differ = compare_datasets(a, b, c, 100);
    ck_assert_msg(differ == 100, "only %lld of 100 images change with the seed", (long long)differ);
    assert_balanced(a);

    /* Classes are visually distinct: a nearest-template matcher on the mask
     * features, templates averaged over the first TRAIN images, names the
     * class of the next TEST images. */
    float *img = malloc(NUMEL * sizeof(float));
    float (*feat)[FEAT_N] = calloc(N, sizeof(*feat));
    float templ[10][FEAT_N] = { { 0 } };
    int32_t label[N];
    for (int i = 0; i < N; i++) {
        a->get(a, i, img, &label[i]);
        double spread = 0.0;
        for (int k = 0; k < NUMEL; k++) {
            if (!(img[k] >= -1.0f && img[k] <= 1.0f))
                ck_abort_msg("image %d element %d is %g", i, k, img[k]);
            spread += fabs(img[k] - img[0]);
        }
        ck_assert_msg(spread > 0.0, "image %d is constant", i);
        int area = shape_features(img, feat[i]);
        ck_assert_msg(area >= 20 && area <= 700, "image %d (class %d): shape covers %d pixels", i,
                      label[i], area);
        if (i < TRAIN)
            for (int k = 0; k < FEAT_N; k++)
                templ[label[i]][k] += feat[i][k] / (TRAIN / 10);
    }
    int right = 0, wrong_as[10][10] = { { 0 } };
    for (int i = TRAIN; i < N; i++) {
        int best = -1;
        float best_d = INFINITY;
        for (int t = 0; t < 10; t++) {
            float s = 0.0f;
            for (int k = 0; k < FEAT_N; k++)
                s += (feat[i][k] - templ[t][k]) * (feat[i][k] - templ[t][k]);
            if (s < best_d) {
                best_d = s;
                best = t;
            }
        }
        right += best == label[i];
        wrong_as[label[i]][best]++;
    }
    char confusion[512] = "";
    for (int t = 0; t < 10; t++)
        for (int u = 0; u < 10; u++)
            if (t != u && wrong_as[t][u])
                snprintf(confusion + strlen(confusion), sizeof(confusion) - strlen(confusion),
                         " %d->%d:%d", t, u, wrong_as[t][u]);
    ck_assert_msg(right >= 0.95 * TEST, "template matcher: %d of %d right; confused%s", right, TEST,
                  confusion);
    free(feat);
    free(img);
    te_dataset_free(a);
    te_dataset_free(b);
    te_dataset_free(c);
}
END_TEST

START_TEST(test_dataset_errors)
{
    ck_assert_ptr_null(te_dataset_spirals(0, 3, 1));
    ck_assert_int_eq(te_error_code(), TE_ERR_ARG);
    ck_assert_msg(strstr(te_error(), "te_dataset_spirals") && strstr(te_error(), "size 0"),
                  "message: %s", te_error());
    ck_assert_ptr_null(te_dataset_spirals(10, 1, 1));
    ck_assert_msg(strstr(te_error(), "classes 1"), "message: %s", te_error());
    ck_assert_ptr_null(te_dataset_blobs(10, 0, 3, 1));
    ck_assert_msg(strstr(te_error(), "te_dataset_blobs") && strstr(te_error(), "dim 0"),
                  "message: %s", te_error());
    ck_assert_ptr_null(te_dataset_blobs(-5, 2, 3, 1));
    ck_assert_msg(strstr(te_error(), "size -5"), "message: %s", te_error());
    ck_assert_ptr_null(te_dataset_shapes(0, 1));
    ck_assert_msg(strstr(te_error(), "te_dataset_shapes") && strstr(te_error(), "size 0"),
                  "message: %s", te_error());
    te_dataset_free(NULL);
}
END_TEST

/* ---- the loader ------------------------------------------------------------
 * A dataset whose sample i is x = [i, i/2], y = i % 7 lets the tests read
 * back which samples a batch holds. It counts its get() calls.
 */

static atomic_long index_gets;
static int index_sleep_us;

static void index_get(const te_dataset *d, int64_t i, float *x, int32_t *y)
{
    (void)d;
    if (index_sleep_us)
        usleep((useconds_t)index_sleep_us);
    x[0] = (float)i;
    x[1] = 0.5f * (float)i;
    *y = (int32_t)(i % 7);
    atomic_fetch_add(&index_gets, 1);
}

static te_dataset index_dataset(int64_t size)
{
    atomic_store(&index_gets, 0);
    index_sleep_us = 0;
    return (te_dataset){ .name = "index", .size = size, .ndim = 1, .shape = { 2 }, .n_classes = 7,
                         .get = index_get };
}

/* Takes one batch and checks it against the index dataset; fills idx with
 * its sample indices and returns its size. */
static int64_t next_indices(te_loader *l, int64_t *idx)
{
    te_tensor *x = NULL, *y = NULL;
    te_status st = te_loader_next(l, &x, &y);
    ck_assert_msg(st == TE_OK, "te_loader_next: %s", te_error());
    ck_assert_msg(x->dtype == TE_F32 && x->ndim == 2 && x->shape[1] == 2 && y->dtype == TE_I32
                      && y->ndim == 1 && y->shape[0] == x->shape[0],
                  "x %s [%lld,%lld], y %s ndim %d [%lld]", te_dtype_name(x->dtype),
                  (long long)x->shape[0], (long long)x->shape[1], te_dtype_name(y->dtype), y->ndim,
                  (long long)y->shape[0]);
    ck_assert_msg(!(x->flags & TE_TENSOR_PERSISTENT) && !(y->flags & TE_TENSOR_PERSISTENT),
                  "batch tensors must belong to the tape");
    for (int64_t r = 0; r < x->shape[0]; r++) {
        float i = te_get(x, 2 * r);
        ck_assert_msg(te_get(x, 2 * r + 1) == 0.5f * i && te_get(y, r) == (float)((int64_t)i % 7),
                      "row %lld: x [%g,%g] y %g do not come from one sample", (long long)r, i,
                      te_get(x, 2 * r + 1), te_get(y, r));
        idx[r] = (int64_t)i;
    }
    return x->shape[0];
}

START_TEST(test_loader_order)
{
    te_dataset d = index_dataset(10);
    for (int workers = 0; workers <= 2; workers++) {
        te_loader *l = te_loader_new(&d, &(te_loader_opts){ .batch = 4, .workers = workers });
        ck_assert_msg(l != NULL, "te_loader_new: %s", te_error());
        ck_assert_int_eq(te_loader_batches_per_epoch(l), 3);
        for (int epoch = 0; epoch < 2; epoch++) {
            int64_t idx[4], seen = 0;
            for (int b = 0; b < 3; b++) {
                int64_t n = next_indices(l, idx);
                ck_assert_msg(n == (b < 2 ? 4 : 2), "workers %d epoch %d batch %d has %lld samples",
                              workers, epoch, b, (long long)n);
                for (int64_t r = 0; r < n; r++, seen++)
                    ck_assert_msg(idx[r] == seen, "workers %d epoch %d: sample %lld is %lld",
                                  workers, epoch, (long long)seen, (long long)idx[r]);
            }
        }
        te_loader_free(l);
    }
}
END_TEST

/* The sample order of `epochs` epochs of a shuffled loader over 50 samples. */
static void shuffled_orders(uint64_t seed, int workers, int epochs, int64_t *order)
{
    te_dataset d = index_dataset(50);
    te_loader *l = te_loader_new(&d, &(te_loader_opts){ .batch = 8, .shuffle = true,
                                                        .workers = workers, .seed = seed });
    ck_assert_msg(l != NULL, "te_loader_new: %s", te_error());
    for (int64_t at = 0; at < 50 * epochs;)
        at += next_indices(l, order + at);
    te_loader_free(l);
}

/* Data parallel: the shards' batches, side by side in shard order, are the
 * batches of one loader with their global batch, shuffled, over epochs,
 * with and without workers; shards without drop_remainder or out of range
 * are refused. */
START_TEST(test_loader_shards)
{
    te_dataset d = index_dataset(50); /* 3 global batches of 16 a epoch; 2 samples dropped */
    te_loader *whole = te_loader_new(&d, &(te_loader_opts){ .batch = 16, .shuffle = true, .drop_remainder = true,
                                                            .seed = 7 });
    te_loader *part[4];
    for (int r = 0; r < 4; r++) {
        part[r] = te_loader_new(&d, &(te_loader_opts){ .batch = 4, .shuffle = true, .drop_remainder = true,
                                                       .workers = r % 2, .seed = 7, .shard = r, .shards = 4 });
        ck_assert_msg(part[r] != NULL, "shard %d: %s", r, te_error());
        ck_assert_int_eq(te_loader_batches_per_epoch(part[r]), 3);
    }
    for (int b = 0; b < 7; b++) { /* two epochs and a bit */
        int64_t all[16], mine[4];
        ck_assert_int_eq(next_indices(whole, all), 16);
        for (int r = 0; r < 4; r++) {
            ck_assert_int_eq(next_indices(part[r], mine), 4);
            for (int k = 0; k < 4; k++)
                ck_assert_msg(mine[k] == all[4 * r + k], "batch %d shard %d row %d: sample %lld, the whole "
                              "batch has %lld there", b, r, k, (long long)mine[k], (long long)all[4 * r + k]);
        }
        te_tape_reset();
    }
    for (int r = 0; r < 4; r++)
        te_loader_free(part[r]);
    te_loader_free(whole);
    ck_assert_ptr_null(te_loader_new(&d, &(te_loader_opts){ .batch = 4, .shard = 1, .shards = 2 }));
    ck_assert_msg(strstr(te_error(), "2 shards need drop_remainder"), "%s", te_error());
    ck_assert_ptr_null(te_loader_new(&d, &(te_loader_opts){ .batch = 4, .drop_remainder = true, .shard = 2,
                                                            .shards = 2 }));
    ck_assert_msg(strstr(te_error(), "shard 2 of 2 shards"), "%s", te_error());
    ck_assert_ptr_null(te_loader_new(&d, &(te_loader_opts){ .batch = 30, .drop_remainder = true, .shards = 2 }));
    ck_assert_msg(strstr(te_error(), "batch 60 with drop_remainder leaves no batch"), "%s", te_error());
}
END_TEST

START_TEST(test_loader_shuffle)
{
    int64_t order[3 * 50], again[3 * 50], other[50], engine_seed[50];
    shuffled_orders(5, 0, 3, order);
    for (int e = 0; e < 3; e++) {
        bool seen[50] = { false };
        int in_place = 0;
        for (int k = 0; k < 50; k++) {
            int64_t i = order[e * 50 + k];
            ck_assert_msg(i >= 0 && i < 50 && !seen[i],
                          "epoch %d: sample %lld twice or out of range", e, (long long)i);
            seen[i] = true;
            in_place += i == k;
        }
        ck_assert_msg(in_place < 10, "epoch %d: %d of 50 samples unmoved", e, in_place);
    }
    const size_t epoch_bytes = 50 * sizeof(int64_t);
    ck_assert_msg(memcmp(order, order + 50, epoch_bytes) != 0, "epochs 0 and 1 have one order");
    ck_assert_msg(memcmp(order + 50, order + 100, epoch_bytes) != 0,
                  "epochs 1 and 2 have one order");

    shuffled_orders(5, 2, 3, again);
    ck_assert_msg(memcmp(order, again, sizeof(order)) == 0, "seed 5 gave two different orders");
    shuffled_orders(6, 0, 1, other);
    ck_assert_msg(memcmp(order, other, epoch_bytes) != 0, "seeds 5 and 6 give one order");
    /* Seed 0 takes the engine's seed (1 in this fixture). */
    shuffled_orders(0, 0, 1, engine_seed);
    shuffled_orders(1, 0, 1, other);
    ck_assert_msg(memcmp(engine_seed, other, epoch_bytes) == 0,
                  "seed 0 is not the engine's seed");
}
END_TEST

/* Every batch of two epochs of a shuffled loader over the shapes dataset. */
typedef struct run {
    int n;
    int64_t count[32];
    float *x[32];
    int32_t *y[32];
} run;

static void load_run(const te_dataset *d, int workers, int prefetch, bool drop, run *r)
{
    te_loader_opts o = { .batch = 5, .shuffle = true, .workers = workers, .prefetch = prefetch,
                         .drop_remainder = drop, .seed = 42 };
    te_loader *l = te_loader_new(d, &o);
    ck_assert_msg(l != NULL, "te_loader_new: %s", te_error());
    r->n = (int)(2 * te_loader_batches_per_epoch(l));
    ck_assert_int_le(r->n, 32);
    for (int b = 0; b < r->n; b++) {
        te_tensor *x, *y;
        ck_assert_msg(te_loader_next(l, &x, &y) == TE_OK, "te_loader_next: %s", te_error());
        r->count[b] = x->shape[0];
        r->x[b] = tu_bytes(x);
        r->y[b] = tu_bytes(y);
    }
    te_loader_free(l);
    te_tape_reset();
}

static void free_run(run *r)
{
    for (int b = 0; b < r->n; b++) {
        free(r->x[b]);
        free(r->y[b]);
    }
}

START_TEST(test_loader_workers_identical)
{
    te_dataset *d = te_dataset_shapes(37, 9);
    const struct { int workers, prefetch; bool drop; } cfg[] = {
        { 1, 0, false }, { 3, 0, false }, { 2, 1, false }, { 4, 3, false }, { 8, 0, false },
        { 3, 0, true },
    };
    run ref[2];
    load_run(d, 0, 0, false, &ref[0]);
    load_run(d, 0, 0, true, &ref[1]);
    ck_assert_int_eq(ref[0].n, 16);
    ck_assert_int_eq(ref[1].n, 14);
    for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
        run got;
        const run *want = &ref[cfg[c].drop];
        load_run(d, cfg[c].workers, cfg[c].prefetch, cfg[c].drop, &got);
        ck_assert_int_eq(got.n, want->n);
        for (int b = 0; b < got.n; b++) {
            size_t rows = (size_t)got.count[b];
            ck_assert_msg(got.count[b] == want->count[b]
                              && memcmp(got.x[b], want->x[b], rows * 3072 * sizeof(float)) == 0
                              && memcmp(got.y[b], want->y[b], rows * sizeof(int32_t)) == 0,
                          "workers %d prefetch %d drop %d: batch %d differs from workers 0",
                          cfg[c].workers, cfg[c].prefetch, cfg[c].drop, b);
        }
        free_run(&got);
    }
    free_run(&ref[0]);
    free_run(&ref[1]);
    te_dataset_free(d);
}
END_TEST

START_TEST(test_loader_drop_remainder)
{
    te_dataset d = index_dataset(10);
    for (int workers = 0; workers <= 3; workers += 3) {
        te_loader *keep = te_loader_new(&d, &(te_loader_opts){ .batch = 4, .workers = workers });
        te_loader *drop = te_loader_new(&d, &(te_loader_opts){ .batch = 4, .workers = workers,
                                                               .drop_remainder = true });
        ck_assert_msg(keep && drop, "te_loader_new: %s", te_error());
        ck_assert_int_eq(te_loader_batches_per_epoch(keep), 3);
        ck_assert_int_eq(te_loader_batches_per_epoch(drop), 2);
        int64_t idx[4];
        const int64_t keep_sizes[] = { 4, 4, 2, 4 }, drop_sizes[] = { 4, 4, 4, 4 };
        const int64_t drop_first[] = { 0, 4, 0, 4 };   /* epoch 1 starts after two batches */
        for (int b = 0; b < 4; b++) {
            int64_t n = next_indices(keep, idx);
            ck_assert_msg(n == keep_sizes[b], "workers %d keep: batch %d has %lld samples", workers,
                          b, (long long)n);
            n = next_indices(drop, idx);
            ck_assert_msg(n == drop_sizes[b] && idx[0] == drop_first[b],
                          "workers %d drop: batch %d has %lld samples from %lld", workers, b,
                          (long long)n, (long long)idx[0]);
        }
        ck_assert_int_eq(te_loader_epoch(keep), 1);
        ck_assert_int_eq(te_loader_epoch(drop), 2);
        te_loader_free(keep);
        te_loader_free(drop);
    }
    /* Exact multiple: nothing to drop. */
    te_dataset d8 = index_dataset(8);
    te_loader *l = te_loader_new(&d8, &(te_loader_opts){ .batch = 4, .drop_remainder = true });
    ck_assert_int_eq(te_loader_batches_per_epoch(l), 2);
    te_loader_free(l);
}
END_TEST

START_TEST(test_loader_epochs)
{
    te_dataset d = index_dataset(12);
    te_loader *l = te_loader_new(&d, &(te_loader_opts){ .batch = 5, .workers = 2,
                                                        .shuffle = true });
    ck_assert_msg(l != NULL, "te_loader_new: %s", te_error());
    int64_t idx[5];
    ck_assert_int_eq(te_loader_epoch(l), 0);
    for (int b = 0; b < 9; b++) {
        next_indices(l, idx);
        ck_assert_msg(te_loader_epoch(l) == (b + 1) / 3, "after %d batches: epoch %lld, want %d",
                      b + 1, (long long)te_loader_epoch(l), (b + 1) / 3);
    }
    te_loader_free(l);
}
END_TEST

/* Workers build at most `prefetch` batches ahead, then block; freeing the
 * loader then wakes and joins them. */
START_TEST(test_loader_prefetch_bound_and_free)
{
    te_dataset d = index_dataset(1000);
    te_loader *l = te_loader_new(&d, &(te_loader_opts){ .batch = 2, .workers = 3, .prefetch = 4 });
    ck_assert_msg(l != NULL, "te_loader_new: %s", te_error());
    int64_t idx[2];
    next_indices(l, idx);
    /* 1 batch taken + 4 queued, 2 samples each: the workers fill the queue
     * (a hang here ends at the loader case's timeout) and then wait on it. */
    while (atomic_load(&index_gets) < 10)
        usleep(1000);
    usleep(30000);
    ck_assert_msg(atomic_load(&index_gets) == 10, "workers made %ld samples, want 10 (5 batches)",
                  atomic_load(&index_gets));
    /* Freeing releases the workers blocked on the full queue: it returns
     * (else the timeout ends the test) and they make nothing more. */
    te_loader_free(l);
    ck_assert_msg(atomic_load(&index_gets) == 10, "workers made %ld samples while being freed, want 10",
                  atomic_load(&index_gets));

    /* Default prefetch: 2 batches per worker. */
    d = index_dataset(1000);
    l = te_loader_new(&d, &(te_loader_opts){ .batch = 1, .workers = 2 });
    while (atomic_load(&index_gets) < 4)
        usleep(1000);
    usleep(30000);
    ck_assert_msg(atomic_load(&index_gets) == 4, "workers made %ld samples, want 4",
                  atomic_load(&index_gets));
    te_loader_free(l);
}
END_TEST

/* Freeing while workers are in the middle of slow batches stops them
 * between samples instead of finishing the batches. */
START_TEST(test_loader_free_midbatch)
{
    te_dataset d = index_dataset(4000);
    index_sleep_us = 1000;   /* a batch of 2000 takes 2 s */
    te_loader *l = te_loader_new(&d, &(te_loader_opts){ .batch = 2000, .workers = 2 });
    ck_assert_msg(l != NULL, "te_loader_new: %s", te_error());
    while (atomic_load(&index_gets) < 2)
        usleep(1000);
    te_loader_free(l);
    /* Freeing stops the workers between samples: neither finished its
     * batch of 2000 (both would have made 4000). */
    ck_assert_msg(atomic_load(&index_gets) < 2000, "workers made %ld samples: a batch was finished",
                  atomic_load(&index_gets));

    /* A loader nobody took a batch from, and one with no workers. */
    d = index_dataset(10);
    te_loader_free(te_loader_new(&d, &(te_loader_opts){ .batch = 3, .workers = 4 }));
    te_loader_free(te_loader_new(&d, &(te_loader_opts){ .batch = 3 }));
    te_loader_free(NULL);
}
END_TEST

static void expect_new_error(const te_dataset *d, const te_loader_opts *o, const char *want)
{
    te_error_clear();
    te_loader *l = te_loader_new(d, o);
    ck_assert_msg(l == NULL, "te_loader_new accepted a bad argument (%s)", want);
    ck_assert_msg(te_error_code() == TE_ERR_ARG, "code %d for %s", te_error_code(), want);
    ck_assert_msg(strstr(te_error(), "te_loader_new") && strstr(te_error(), want),
                  "message '%s' lacks '%s'", te_error(), want);
}

START_TEST(test_loader_errors)
{
    te_dataset d = index_dataset(10);
    expect_new_error(NULL, &(te_loader_opts){ .batch = 4 }, "dataset is NULL");
    expect_new_error(&d, NULL, "options is NULL");
    expect_new_error(&d, &(te_loader_opts){ .batch = 0 }, "batch 0 must be >= 1");
    expect_new_error(&d, &(te_loader_opts){ .batch = -2 }, "batch -2 must be >= 1");
    expect_new_error(&d, &(te_loader_opts){ .batch = 4, .workers = -1 }, "workers -1");
    expect_new_error(&d, &(te_loader_opts){ .batch = 4, .workers = 100000 }, "workers 100000");
    expect_new_error(&d, &(te_loader_opts){ .batch = 4, .prefetch = -1 }, "prefetch -1");
    expect_new_error(&d, &(te_loader_opts){ .batch = 11, .drop_remainder = true },
                     "batch 11 with drop_remainder leaves no batch of dataset 'index' (size 10)");
    te_dataset bad = d;
    bad.get = NULL;
    expect_new_error(&bad, &(te_loader_opts){ .batch = 4 }, "get NULL");
    bad = d;
    bad.size = 0;
    expect_new_error(&bad, &(te_loader_opts){ .batch = 4 }, "size 0");
    bad = d;
    bad.shape[0] = 0;
    expect_new_error(&bad, &(te_loader_opts){ .batch = 4 }, "sample shape [0]");

    /* Batch larger than the dataset without dropping: one short batch. */
    te_loader *l = te_loader_new(&d, &(te_loader_opts){ .batch = 11 });
    ck_assert_msg(l != NULL, "te_loader_new: %s", te_error());
    ck_assert_int_eq(te_loader_batches_per_epoch(l), 1);

    te_tensor *x, *y;
    ck_assert_int_eq(te_loader_next(NULL, &x, &y), TE_ERR_ARG);
    ck_assert_msg(strstr(te_error(), "te_loader_next: loader is NULL"), "message: %s", te_error());
    ck_assert_int_eq(te_loader_next(l, NULL, &y), TE_ERR_ARG);
    ck_assert_msg(strstr(te_error(), "te_loader_next: x is NULL"), "message: %s", te_error());
    int64_t idx[10];
    ck_assert_int_eq(next_indices(l, idx), 10);   /* the failed calls took no batch */
    te_loader_free(l);
}
END_TEST

Suite *suite_data(void)
{
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("datasets");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_spirals);
    tcase_add_test(tc, test_blobs);
    tcase_add_test(tc, test_shapes);
    tcase_add_test(tc, test_dataset_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("loader");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_loader_order);
    tcase_add_test(tc, test_loader_shuffle);
    tcase_add_test(tc, test_loader_shards);
    tcase_add_test(tc, test_loader_workers_identical);
    tcase_add_test(tc, test_loader_drop_remainder);
    tcase_add_test(tc, test_loader_epochs);
    tcase_add_test(tc, test_loader_prefetch_bound_and_free);
    tcase_add_test(tc, test_loader_free_midbatch);
    tcase_add_test(tc, test_loader_errors);
    /* a hang guard (the slowest case takes well under a second), not a speed check */
    tcase_set_timeout(tc, 10);
    suite_add_tcase(s, tc);
    return s;
}
