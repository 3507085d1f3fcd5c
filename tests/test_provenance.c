/*
 * test_provenance.c — which sample did it: te_dataset_csv and its sources,
 * the loader's batch records (indices, seed, positions; the same for any
 * worker count), the data checks, `data skip`, a failing op's hook, and
 * whole sessions on a CSV with a corrupted record and a synthetic dataset
 * with a planted label: break data, the failing op's stop and break nan
 * name the exact sample and file offset in eager and graph mode, with and
 * without loader workers.
 */
#include "suites.h"
#include "te.h"
#include "testutil.h"
#include "tsession.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a CSV with known lines and offsets --------------------------------- */

#define CSV_RECORDS 600
#define CSV_NAN 100     /* the record with an empty field (NaN) */
#define CSV_LABEL 200   /* the record whose label is 7 of 3 classes */

typedef struct csv_fixture {
    char path[256];
    int64_t line[CSV_RECORDS], byte[CSV_RECORDS];
} csv_fixture;

/* pts.csv: a header, a comment, a blank line, then records whose features
 * are a pure function of the record; corrupt plants CSV_NAN, bad_label CSV_LABEL. */
static void csv_write(csv_fixture *f, const char *dir, bool corrupt, bool bad_label)
{
    snprintf(f->path, sizeof f->path, "%s/%s.csv", dir, bad_label ? "bad" : "nan");
    FILE *fp = fopen(f->path, "w");
    ck_assert_msg(fp != NULL, "cannot write %s", f->path);
    int64_t line = 1;
    fputs("x1,x2,x3,label\n# three clusters\n\n", fp);
    line += 3;
    for (int i = 0; i < CSV_RECORDS; i++, line++) {
        f->line[i] = line;
        f->byte[i] = ftell(fp);
        const int c = i % 3;
        const double a = 2.0 * c - 2 + 0.3 * sin(i * 1.7), b = 2.0 * c - 2 + 0.3 * cos(i * 0.9), d = 0.1 * (i % 7);
        if (corrupt && i == CSV_NAN)
            fprintf(fp, "%.4f,,%.4f,%d\n", a, d, c);
        else
            fprintf(fp, "%.4f,%.4f,%.4f,%d\n", a, b, d, bad_label && i == CSV_LABEL ? 7 : c);
    }
    fclose(fp);
}

static char dir[64];

static void setup(void) { tu_scratch_make(dir, sizeof dir, "tdbg-prov"); }
static void teardown(void) { tu_scratch_remove(dir); }

START_TEST(test_csv_dataset)
{
    csv_fixture f;
    csv_write(&f, dir, true, true);
    te_dataset *d = te_dataset_csv(f.path, 3);
    ck_assert_msg(d != NULL, "%s", te_error());
    ck_assert_int_eq(d->size, CSV_RECORDS);
    ck_assert_int_eq(d->ndim, 1);
    ck_assert_int_eq(d->shape[0], 3);
    ck_assert_int_eq(d->n_classes, 3);
    float x[3];
    int32_t y;
    d->get(d, CSV_NAN, x, &y);
    ck_assert_msg(isnan(x[1]) && !isnan(x[0]) && y == CSV_NAN % 3, "record %d: %g %g %g label %d", CSV_NAN, x[0], x[1],
                  x[2], y);
    d->get(d, CSV_LABEL, x, &y);
    ck_assert_int_eq(y, 7);
    d->get(d, 5, x, &y);
    ck_assert_msg(fabsf(x[0] - (float)(2.0 * 2 - 2 + 0.3 * sin(5 * 1.7))) < 1e-4f && y == 2, "record 5: %g, %d", x[0], y);
    for (int i = 0; i < CSV_RECORDS; i += 97) {
        char src[300], want[300];
        d->source(d, i, src, sizeof src);
        snprintf(want, sizeof want, "%s:%lld (byte %lld)", f.path, (long long)f.line[i], (long long)f.byte[i]);
        ck_assert_str_eq(src, want);
    }
    te_dataset_free(d);
    d = te_dataset_csv(f.path, 0); /* classes from the labels: the planted 7 makes 8 */
    ck_assert_int_eq(d->n_classes, 8);
    te_dataset_free(d);
}
END_TEST

/* A file with `text` in it, read as a CSV: the error names what and where. */
static void csv_refused(const char *text, const char *want)
{
    char path[128];
    snprintf(path, sizeof path, "%s/refused.csv", dir);
    FILE *fp = fopen(path, "w");
    fputs(text, fp);
    fclose(fp);
    ck_assert_msg(te_dataset_csv(path, 0) == NULL, "'%s' was read", text);
    ck_assert_msg(strstr(te_error(), want) != NULL, "for '%s': '%s' lacks '%s'", text, te_error(), want);
}

START_TEST(test_csv_refused)
{
    csv_refused("a,b,label\n1,2,0\n3,abc,1\n", "refused.csv:3:3: 'abc' is not a number");
    csv_refused("1,2,0\n3,4\n", "refused.csv:2: 2 fields where the first record has 3");
    csv_refused("1,2,0\n3,4,1.5\n", "refused.csv:2:5: '1.5' is not an integer label");
    csv_refused("# nothing\n\n", "has no records");
    csv_refused("1,0\n2,0\n", "fewer than 2 classes");
    ck_assert(te_dataset_csv("/no/such/file.csv", 0) == NULL);
    ck_assert_msg(strstr(te_error(), "cannot read /no/such/file.csv") != NULL, "%s", te_error());
}
END_TEST

/* ---- the loader's records --------------------------------------------------- */

/* Every batch of 2 epochs of d: each row holds the sample its record names
 * (x checked against get), positions and epochs in sequence; the indices
 * in order into order[] (n_batches * batch). */
static void loader_records(const te_dataset *d, int workers, uint64_t seed, int64_t *order)
{
    te_loader *l = te_loader_new(d, &(te_loader_opts){ .batch = 8, .shuffle = true, .drop_remainder = true,
                                                       .workers = workers, .seed = seed });
    ck_assert_msg(l != NULL, "%s", te_error());
    const int64_t per = te_loader_batches_per_epoch(l);
    float want[2];
    for (int64_t s = 0; s < 2 * per; s++) {
        te_step_begin();
        te_tensor *x, *y;
        ck_assert_int_eq(te_loader_next(l, &x, &y), TE_OK);
        const te_batch *b = te_batch_at(te_batch_count() - 1);
        ck_assert_msg(b->loader == l && b->dataset == d && b->position == s && b->epoch == s / per &&
                          b->batch_in_epoch == s % per && b->seed == seed && b->shuffle && b->rows == 8,
                      "batch %lld: position %lld epoch %lld", (long long)s, (long long)b->position,
                      (long long)b->epoch);
        ck_assert_msg(te_batch_of(x) == b && te_batch_of(y) == b, "te_batch_of names another batch");
        for (int r = 0; r < 8; r++) {
            int32_t label;
            d->get(d, b->index[r], want, &label);
            ck_assert_msg(te_get(x, 2 * r) == want[0] && te_get(x, 2 * r + 1) == want[1] && ((const int32_t *)y->data)[r] == label,
                          "batch %lld row %d is not sample %lld", (long long)s, r, (long long)b->index[r]);
            ck_assert_int_eq(b->drawn[r], b->index[r]);
        }
        memcpy(order + s * 8, b->index, 8 * sizeof *order);
        te_step_end();
        ck_assert_msg(te_batch_of(x) == NULL || te_step() == b->step, "a past step's batch still found");
    }
    te_loader_free(l);
}

START_TEST(test_loader_records)
{
    te_dataset *d = te_dataset_spirals(64, 3, 5);
    int64_t a[128], b[128], c[128];
    loader_records(d, 0, 42, a);
    loader_records(d, 3, 42, b);
    loader_records(d, 0, 43, c);
    ck_assert_msg(memcmp(a, b, sizeof a) == 0, "the order depends on the worker count");
    ck_assert_msg(memcmp(a, c, sizeof a) != 0, "seeds 42 and 43 give the same order");
    ck_assert_msg(memcmp(a, a + 64, 64 * sizeof *a) != 0, "epoch 1 repeats epoch 0's order");
    /* each epoch holds every sample once */
    int seen[64] = { 0 };
    for (int k = 0; k < 64; k++)
        seen[a[k]]++;
    for (int k = 0; k < 64; k++)
        ck_assert_int_eq(seen[k], 1);
    te_dataset_free(d);
}
END_TEST

START_TEST(test_data_check_rows)
{
    float x[4 * 3] = { 1, 2, 3, 4, 5, 6, 0, 0, 0, 7, 8, 9 };
    int32_t y[4] = { 0, 1, 2, 1 };
    te_data_finding f;
    te_data_check all = { .nonfinite = true, .label = true, .empty = true, .constant = true };
    ck_assert(!te_data_check_rows(&all, x, y, 4, 3, 3, &f) || f.issue == TE_DATA_EMPTY);
    ck_assert_int_eq(f.issue, TE_DATA_EMPTY); /* row 2 is all zeros */
    ck_assert_int_eq(f.row, 2);
    ck_assert_int_eq(f.bad_rows, 1);
    x[10] = NAN;
    y[0] = 3;
    ck_assert(te_data_check_rows(&all, x, y, 4, 3, 3, &f));
    ck_assert_msg(f.issue == TE_DATA_LABEL && f.row == 0 && f.element == 0 && f.value == 3 && f.bad_rows == 3,
                  "issue %s row %lld element %lld bad %lld", te_data_issue_name(f.issue), (long long)f.row,
                  (long long)f.element, (long long)f.bad_rows);
    te_data_check nf = { .nonfinite = true };
    ck_assert(te_data_check_rows(&nf, x, y, 4, 3, 3, &f));
    ck_assert_msg(f.issue == TE_DATA_NONFINITE && f.row == 3 && f.element == 10 && isnan(f.value), "nonfinite at %lld",
                  (long long)f.element);
    te_data_check range = { .above = true, .hi = 5.5f };
    ck_assert(te_data_check_rows(&range, x, NULL, 4, 3, 0, &f));
    ck_assert_msg(f.issue == TE_DATA_ABOVE && f.row == 1 && f.element == 5 && f.value == 6, "above at %lld",
                  (long long)f.element);
    float same[6] = { 2, 2, 2, 2, 2, 2 };
    te_data_check k = { .constant = true };
    ck_assert(te_data_check_rows(&k, same, NULL, 2, 3, 0, &f));
    ck_assert_msg(f.issue == TE_DATA_CONSTANT && f.row == -1 && f.value == 2, "constant");
    same[5] = 2.5f;
    ck_assert(!te_data_check_rows(&k, same, NULL, 2, 3, 0, &f));
    ck_assert(!te_data_check_rows(NULL, x, y, 4, 3, 3, &f));
    ck_assert_str_eq(te_data_issue_name(TE_DATA_LABEL), "label");
}
END_TEST

/* A dataset with sample 13 non-finite: the loader checks it where it builds
 * it, and again in the caller when the check changed since. */
static void nan13_get(const te_dataset *d, int64_t i, float *x, int32_t *y)
{
    const te_dataset *base = d->state;
    base->get(base, i, x, y);
    if (i == 13)
        x[1] = INFINITY;
}

START_TEST(test_check_in_loader)
{
    for (int workers = 0; workers <= 2; workers += 2) {
        te_dataset *base = te_dataset_spirals(32, 2, 1);
        te_dataset d = *base;
        d.get = nan13_get;
        d.state = base;
        te_data_check_set(NULL);
        te_loader *l = te_loader_new(&d, &(te_loader_opts){ .batch = 4, .workers = workers, .prefetch = 8 });
        te_tensor *x, *y;
        te_step_begin();
        ck_assert_int_eq(te_loader_next(l, &x, &y), TE_OK); /* batch 0: built and checked under no check */
        ck_assert(!te_batch_at(te_batch_count() - 1)->checked);
        te_step_end();
        usleep(20000); /* workers build batches ahead under no check */
        te_data_check_set(&(te_data_check){ .nonfinite = true });
        int found = 0;
        for (int s = 1; s < 8; s++) {
            te_step_begin();
            ck_assert_int_eq(te_loader_next(l, &x, &y), TE_OK);
            const te_batch *b = te_batch_at(te_batch_count() - 1);
            ck_assert_msg(b->checked, "workers %d: batch %d not checked", workers, s);
            if (b->finding.issue != TE_DATA_OK) {
                found++;
                ck_assert_msg(s == 3 && b->finding.row == 1 && b->index[1] == 13 && b->finding.element == 3,
                              "workers %d: batch %d row %lld", workers, s, (long long)b->finding.row);
            }
            te_step_end();
        }
        ck_assert_int_eq(found, 1);
        te_data_check_set(NULL);
        te_loader_free(l);
        te_dataset_free(base);
    }
}
END_TEST

/* The indices of the next n batches of l. */
static void next_indices(te_loader *l, int n, int64_t *out, int64_t *drawn)
{
    for (int s = 0; s < n; s++) {
        te_tensor *x, *y;
        te_step_begin();
        ck_assert_int_eq(te_loader_next(l, &x, &y), TE_OK);
        const te_batch *b = te_batch_at(te_batch_count() - 1);
        memcpy(out + 4 * s, b->index, 4 * sizeof *out);
        if (drawn)
            memcpy(drawn + 4 * s, b->drawn, 4 * sizeof *drawn);
        te_step_end();
    }
}

START_TEST(test_loader_skip)
{
    te_dataset *d = te_dataset_spirals(16, 2, 3);
    int64_t plain[32], got[32], drawn[32], again[32];
    te_loader_opts o = { .batch = 4, .shuffle = true, .workers = 2, .seed = 9 };
    te_loader *l = te_loader_new(d, &o);
    next_indices(l, 8, plain, NULL);
    te_loader_free(l);

    l = te_loader_new(d, &o);
    next_indices(l, 2, got, drawn);
    int64_t to = -1;
    ck_assert_int_eq(te_loader_skip(l, plain[12], &to), TE_OK); /* batch 3's first sample */
    ck_assert_msg(to >= 0 && to < 16 && to != plain[12], "replacement %lld", (long long)to);
    next_indices(l, 6, got + 8, drawn + 8);
    for (int k = 0; k < 32; k++) {
        const bool replaced = k >= 8 && plain[k] == plain[12];
        ck_assert_msg(got[k] == (replaced ? to : plain[k]) && drawn[k] == plain[k],
                      "position %d: sample %lld drawn %lld, want %lld", k, (long long)got[k], (long long)drawn[k],
                      (long long)(replaced ? to : plain[k]));
    }
    int64_t from[4], tos[4];
    ck_assert_int_eq(te_loader_skips(l, from, tos, 4), 1);
    ck_assert_msg(from[0] == plain[12] && tos[0] == to, "the table");
    ck_assert_int_eq(te_loader_skip(l, plain[12], NULL), TE_ERR_ARG);
    ck_assert_msg(strstr(te_error(), "is replaced already") != NULL, "%s", te_error());
    ck_assert_int_eq(te_loader_skip(l, 16, NULL), TE_ERR_ARG);
    ck_assert_msg(strstr(te_error(), "sample 16 is outside dataset 'spirals' (0..15)") != NULL, "%s", te_error());
    te_loader_free(l);

    /* the same replacement in another run; and a skipped table restored */
    l = te_loader_new(d, &o);
    int64_t to2;
    ck_assert_int_eq(te_loader_skip(l, plain[12], &to2), TE_OK);
    ck_assert_int_eq(to2, to);
    next_indices(l, 8, again, NULL);
    for (int k = 0; k < 32; k++)
        ck_assert_int_eq(again[k], plain[k] == plain[12] ? to : plain[k]);
    te_loader_free(l);
    te_dataset_free(d);
}
END_TEST

/* ---- a failing op's hook -------------------------------------------------- */

static int failed_calls;
static char failed_op[64], failed_msg[256];
static const te_batch *failed_batch;

static void on_failed(const te_op_record *rec, te_status code, const char *message, void *user)
{
    (void)user;
    (void)code;
    failed_calls++;
    snprintf(failed_op, sizeof failed_op, "%s", rec->name);
    snprintf(failed_msg, sizeof failed_msg, "%s", message);
    failed_batch = NULL;
    for (int i = 0; i < rec->n_inputs && !failed_batch; i++)
        failed_batch = te_batch_of(rec->inputs[i]);
}

START_TEST(test_op_failed_hook)
{
    te_dataset *d = te_dataset_spirals(8, 3, 1);
    te_loader *l = te_loader_new(d, &(te_loader_opts){ .batch = 8 });
    int h = te_hook_add(&(te_hooks){ .op_failed = on_failed }, NULL);
    te_step_begin();
    te_tensor *x, *y;
    ck_assert_int_eq(te_loader_next(l, &x, &y), TE_OK);
    ((int32_t *)y->data)[5] = 3; /* outside 3 classes */
    te_tensor *z = te_tensor_new(TE_F32, te_shape(8, 3));
    failed_calls = 0;
    ck_assert(te_cross_entropy(z, y) == NULL);
    ck_assert_int_eq(failed_calls, 1);
    ck_assert_str_eq(failed_op, "cross_entropy");
    ck_assert_msg(strstr(failed_msg, "label 3 at index 5 is out of range for 3 classes") != NULL, "%s", failed_msg);
    ck_assert_msg(failed_batch == te_batch_at(te_batch_count() - 1), "the failing op's batch input not found");
    /* a bad shape, refused as the op is built */
    failed_calls = 0;
    te_tensor *w = te_tensor_new(TE_F32, te_shape(5, 4));
    ck_assert(te_matmul(x, w) == NULL);
    ck_assert_int_eq(failed_calls, 1);
    ck_assert_str_eq(failed_op, "matmul");
    ck_assert_msg(strstr(failed_msg, "[8,2]") && strstr(failed_msg, "[5,4]"), "%s", failed_msg);
    ck_assert_msg(failed_batch == te_batch_at(te_batch_count() - 1), "the matmul's batch input not found");
    te_step_end();
    te_hook_remove(h);
    te_loader_free(l);
    te_dataset_free(d);
}
END_TEST

/* ---- whole sessions ---------------------------------------------------------- */

#define MLP_CSV "--data '%s' --classes 3 --hidden 16 --batch 32 --steps 40 --log-every 10 --mode %s --workers %d"

/* The k-th stopped line's value of key ("row", "sample"), -1 if none. */
static long long stop_field(const ts_session *s, int k, const char *key)
{
    char line[1024], pat[32];
    if (!ts_stopped_line(s, k, line, sizeof line))
        return -1;
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    return p ? atoll(p + strlen(pat)) : -1;
}

START_TEST(test_session_names_the_sample)
{
    csv_fixture f;
    csv_write(&f, dir, true, true);
    char nan_src[300], label_src[300], first[3][1024] = { "", "", "" };
    snprintf(nan_src, sizeof nan_src, "row %%lld: sample %d, %s:%lld (byte %lld)", CSV_NAN, f.path,
             (long long)f.line[CSV_NAN], (long long)f.byte[CSV_NAN]);
    snprintf(label_src, sizeof label_src, "sample %d, %s:%lld (byte %lld)", CSV_LABEL, f.path,
             (long long)f.line[CSV_LABEL], (long long)f.byte[CSV_LABEL]);
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++)
        for (int w = 0; w <= 2; w += 2) {
            /* break data: the NaN record, before any op reads it */
            ts_session s = ts_tdbg("--batch", "break data;run;info batch", "mlp", MLP_CSV, f.path, modes[m], w);
            char line[1024], want[400];
            ck_assert_msg(ts_stopped_line(&s, 0, line, sizeof line), "%s", s.out);
            ck_assert_msg(strstr(line, "reason=data tensor=batch:x") && strstr(line, " sample=100"), "%s", line);
            long long row = stop_field(&s, 0, "row");
            snprintf(want, sizeof want, nan_src, row);
            ts_has(&s, want);
            snprintf(want, sizeof want, "  %-5lld %-10d %s:%lld (byte %lld)", row, CSV_NAN, f.path,
                     (long long)f.line[CSV_NAN], (long long)f.byte[CSV_NAN]);
            ts_has(&s, want); /* info batch's row */
            if (!first[0][0])
                snprintf(first[0], sizeof first[0], "%s", line);
            ck_assert_msg(strcmp(line, first[0]) == 0, "%s %d workers: %s, eager without workers: %s", modes[m], w,
                          line, first[0]);
            ts_free(&s);

            /* break nan: the first op, the NaN inherited from the data's row */
            s = ts_tdbg("--batch", "break nan;run", "mlp", MLP_CSV, f.path, modes[m], w);
            ck_assert_msg(ts_stopped_line(&s, 0, line, sizeof line), "%s", s.out);
            ck_assert_msg(strstr(line, "op=fc1/linear") && strstr(line, "origin=propagated:batch:x") &&
                              strstr(line, " sample=100") && stop_field(&s, 0, "row") == row,
                          "%s", line);
            snprintf(want, sizeof want, nan_src, row);
            ts_has(&s, want);
            if (!first[1][0])
                snprintf(first[1], sizeof first[1], "%s", line);
            ck_assert_str_eq(line, first[1]);
            ts_free(&s);

            /* no breakpoint: the label outside the classes stops the run at its op */
            s = ts_tdbg("--batch", "run;continue", "mlp", MLP_CSV, f.path, modes[m], w);
            ck_assert_msg(ts_stopped_line(&s, 0, line, sizeof line), "%s", s.out);
            ck_assert_msg(strstr(line, "op=cross_entropy type=CrossEntropy reason=error") && strstr(line, " sample=200"),
                          "%s", line);
            ts_has(&s, "error: label 7 at index ");
            ts_has(&s, label_src);
            ts_has(&s, "mlp: step "); /* going on: the program ends with the op's error */
            ts_lacks(&s, "final: loss");
            if (!first[2][0])
                snprintf(first[2], sizeof first[2], "%s", line);
            ck_assert_str_eq(line, first[2]);
            ts_free(&s);
        }
}
END_TEST

START_TEST(test_session_planted_label)
{
    static const char *const modes[] = { "eager", "graph" };
    for (int m = 0; m < 2; m++)
        for (int w = 0; w <= 2; w += 2) {
            ts_session s = ts_tdbg("--batch", "break data if label;run", "cnn",
                                   "--steps 6 --batch 16 --train-size 256 --corrupt label@sample=77 --mode %s "
                                   "--workers %d", modes[m], w);
            char line[1024];
            ck_assert_msg(ts_stopped_line(&s, 0, line, sizeof line), "%s", s.out);
            ck_assert_msg(strstr(line, "reason=data tensor=batch:y") && strstr(line, " sample=77"), "%s", line);
            ts_has(&s, "batch:y [16] i32: label at [");
            ts_has(&s, "] = 10\n");
            ts_free(&s);
            s = ts_tdbg("--batch", "run", "cnn", "--steps 6 --batch 16 --train-size 256 --corrupt label@sample=77 "
                        "--mode %s --workers %d", modes[m], w);
            ck_assert_msg(ts_stopped_line(&s, 0, line, sizeof line), "%s", s.out);
            ck_assert_msg(strstr(line, "reason=error") && strstr(line, " sample=77"), "%s", line);
            ts_has(&s, "is out of range for 10 classes");
            ts_free(&s);
        }
}
END_TEST

/* data skip: the NaN record comes once an epoch; replaced at its first
 * stop, it never stops the run again. */
START_TEST(test_session_data_skip)
{
    csv_fixture f;
    csv_write(&f, dir, true, false);
    ts_session s = ts_tdbg("--batch", "break data if nonfinite;run;continue;continue", "mlp",
                           "--data '%s' --classes 3 --hidden 16 --batch 32 --steps 45 --log-every 50", f.path);
    ck_assert_int_eq(ts_count(&s, "reason=data"), 2);
    ts_free(&s);
    s = ts_tdbg("--batch", "break data if nonfinite;run;data skip 100;continue;info batch", "mlp",
                "--data '%s' --classes 3 --hidden 16 --batch 32 --steps 45 --log-every 50", f.path);
    ck_assert_int_eq(ts_count(&s, "reason=data"), 1);
    ts_has(&s, "Sample 100 of '");
    ts_has(&s, "' is replaced by sample ");
    ts_lacks(&s, "error:");
    ts_free(&s);
    /* a rewind to before the skip restores the table of its snapshot: the
     * step takes the NaN record again; skipped before that step takes its
     * batch (at the rewind's arrival), the step runs without it and the
     * run ends clean */
    s = ts_tdbg("--batch", "break data if nonfinite;run;data skip 100;rewind 9;continue;rewind 9;data skip 100;continue",
                "mlp",
                "--data '%s' --classes 3 --hidden 16 --batch 32 --steps 45 --log-every 50", f.path);
    ck_assert_int_eq(ts_count(&s, "reason=data"), 2);
    ck_assert_int_eq(ts_count(&s, "reason=data tensor=batch:x index=[13,1] origin=- row=13 sample=100"), 2);
    ts_has(&s, "final: loss=");
    ts_lacks(&s, "loss=nan");
    ts_free(&s);
}
END_TEST

/* The loader's waits at debug level: a dataset slower than the step. */
static void slow_get(const te_dataset *d, int64_t i, float *x, int32_t *y)
{
    const te_dataset *base = d->state;
    usleep(2000);
    base->get(base, i, x, y);
}

START_TEST(test_loader_wait_logged)
{
    char path[128];
    snprintf(path, sizeof path, "%s/log.txt", dir);
    te_dataset *base = te_dataset_spirals(64, 2, 1);
    te_dataset d = *base;
    d.get = slow_get;
    d.state = base;
    d.name = "slow";
    for (int on = 0; on < 2; on++) {
        ck_assert_int_eq(te_log_configure(on ? "engine.data=debug" : "debug,engine.data=info", path), TE_OK);
        te_loader *l = te_loader_new(&d, &(te_loader_opts){ .batch = 4, .workers = 1 });
        te_tensor *x, *y;
        for (int s = 0; s < 3; s++) {
            te_step_begin();
            ck_assert_int_eq(te_loader_next(l, &x, &y), TE_OK);
            te_step_end();
        }
        te_loader_free(l);
        te_log_configure(NULL, NULL);
        char out[4096] = "";
        FILE *fp = fopen(path, "r");
        size_t got = fp ? fread(out, 1, sizeof out - 1, fp) : 0;
        out[got] = '\0';
        if (fp)
            fclose(fp);
        unlink(path);
        if (on)
            ck_assert_msg(strstr(out, " engine.data debug: loader 'slow': waited ") && strstr(out, "(1 worker)"), "%s",
                          out);
        else
            ck_assert_msg(!strstr(out, "waited"), "engine.data at info logged a wait:\n%s", out);
    }
    te_dataset_free(base);
}
END_TEST

/* The sample at `row` of step `step` in `tdbg-dump samples` output, -1 if none. */
static long long dumped_sample(const char *out, int step, int row)
{
    char head[32], line[32];
    snprintf(head, sizeof head, "step %d:\n", step);
    const char *p = strstr(out, head);
    snprintf(line, sizeof line, "\n    %-5d ", row);
    p = p ? strstr(p, line) : NULL;
    return p ? atoll(p + strlen(line)) : -1;
}

/* Dumps record each step's samples, tdbg-dump shows them, and a `data
 * skip` shows as the replacement in place of the sample drawn. */
START_TEST(test_dump_records_samples)
{
    csv_fixture f;
    csv_write(&f, dir, false, false);
    char out[1 << 16];
    ck_assert_msg(tu_shell(out, sizeof out, "rm -rf '%s/d1' && '%s/examples/mlp' --data '%s' --hidden 8 --batch 4 "
                           "--steps 6 --dump 'dir=%s/d1;ops=fc1/*;steps=1-5' >/dev/null 2>&1 && '%s/dump/tdbg-dump' "
                           "samples '%s/d1'", dir, TDBG_BUILDDIR, f.path, dir, TDBG_BUILDDIR, dir) == 0, "%s", out);
    const long long s5 = dumped_sample(out, 5, 2);
    ck_assert_msg(s5 >= 0, "%s", out);
    char want[400];
    snprintf(want, sizeof want, "\n    2     %-10lld %s:%lld (byte %lld)\n", s5, f.path, (long long)f.line[s5],
             (long long)f.byte[s5]);
    ck_assert_msg(strstr(out, want), "no '%s' in\n%s", want, out);
    ck_assert_msg(strstr(out, "step 1:\n  batch 0: '") && strstr(out, "', loader seed 1, epoch 0, position 1\n"), "%s",
                  out);
    /* under the debugger, that sample replaced at step 1: step 5 records both */
    char cmds[256];
    snprintf(cmds, sizeof cmds, "break step 1;run;data skip %lld;continue", s5);
    ts_session s = ts_tdbg("--batch", cmds, "mlp", "--data '%s' --hidden 8 --batch 4 --steps 6 --dump 'dir=%s/d2;ops=fc1/*;"
                "steps=1-5'", f.path, dir);
    ts_has(&s, "is replaced by sample");
    ts_free(&s);
    ck_assert_msg(tu_shell(out, sizeof out, "'%s/dump/tdbg-dump' samples '%s/d2' --step 5", TDBG_BUILDDIR, dir) == 0,
                  "%s", out);
    snprintf(want, sizeof want, "(in place of %lld: data skip)", s5);
    ck_assert_msg(strstr(out, want), "no '%s' in\n%s", want, out);
    ck_assert_msg(dumped_sample(out, 5, 2) != s5 && dumped_sample(out, 5, 2) >= 0, "%s", out);
}
END_TEST

START_TEST(test_session_gpt_source)
{
    char path[128];
    snprintf(path, sizeof path, "%s/text.txt", dir);
    FILE *fp = fopen(path, "w");
    for (int i = 0; i < 400; i++)
        fprintf(fp, "line %d of the text, which the windows start in\n", i);
    fclose(fp);
    ts_session s = ts_tdbg("--batch", "break step 1;run;info batch", "gpt",
                           "--data '%s' --steps 3 --batch 4 --warmup 1 --layers 1 --embd 32 --heads 2 --block 16", path);
    /* row 0's window start, and the line it is on, counted here */
    const char *row = strstr(s.out, "\n  0     ");
    ck_assert_msg(row != NULL, "%s", s.out);
    long long start = atoll(row + 9);
    fp = fopen(path, "r");
    long long line = 1;
    for (long long k = 0; k < start; k++)
        line += fgetc(fp) == '\n';
    fclose(fp);
    char want[300];
    snprintf(want, sizeof want, "%s:%lld (byte %lld)", path, line, start);
    ts_has(&s, want);
    ts_has(&s, "published by the program");
    ts_free(&s);
}
END_TEST

Suite *suite_provenance(void)
{
    Suite *s = suite_create("provenance");
    TCase *tc = tcase_create("engine");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_csv_dataset);
    tcase_add_test(tc, test_csv_refused);
    tcase_add_test(tc, test_loader_records);
    tcase_add_test(tc, test_data_check_rows);
    tcase_add_test(tc, test_check_in_loader);
    tcase_add_test(tc, test_loader_skip);
    tcase_add_test(tc, test_op_failed_hook);
    tcase_add_test(tc, test_loader_wait_logged);
    suite_add_tcase(s, tc);
    tc = tcase_create("session");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_session_names_the_sample);
    tcase_add_test(tc, test_session_planted_label);
    tcase_add_test(tc, test_session_data_skip);
    tcase_add_test(tc, test_session_gpt_source);
    tcase_add_test(tc, test_dump_records_samples);
    suite_add_tcase(s, tc);
    return s;
}
