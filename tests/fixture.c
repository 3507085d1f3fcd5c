/* fixture.c — reads golden tensors and compares against them. */
#include "fixture.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NAME_SIZE = 128 }; /* a record name, with its NUL */

typedef struct {
    char name[NAME_SIZE];
    te_dtype dtype;
    int ndim;
    int64_t shape[TE_MAX_DIMS];
    long offset; /* of the data in the file */
} fx_record;

struct fx_file {
    char path[512];
    FILE *f;
    int n;
    fx_record *rec;
};

fx_file *fx_open(const char *name)
{
    fx_file *fx = calloc(1, sizeof *fx);
    ck_assert(fx != NULL);
    snprintf(fx->path, sizeof fx->path, "%s/tests/fixtures/%s", TDBG_SRCDIR, name);
    fx->f = fopen(fx->path, "rb");
    ck_assert_msg(fx->f != NULL, "cannot open fixture %s (run tests/gen_fixtures.py)", fx->path);
    char magic[4];
    uint32_t hdr[2];
    ck_assert_msg(fread(magic, 1, 4, fx->f) == 4 && memcmp(magic, "TDFX", 4) == 0 &&
                      fread(hdr, 4, 2, fx->f) == 2 && hdr[0] == 1,
                  "%s: not a version-1 TDFX fixture", fx->path);
    fx->n = (int)hdr[1];
    fx->rec = calloc((size_t)fx->n, sizeof *fx->rec);
    for (int i = 0; i < fx->n; i++) {
        fx_record *r = &fx->rec[i];
        uint16_t len;
        uint8_t dt, nd;
        ck_assert_msg(fread(&len, 2, 1, fx->f) == 1 && len < sizeof r->name &&
                          fread(r->name, 1, len, fx->f) == len && fread(&dt, 1, 1, fx->f) == 1 &&
                          fread(&nd, 1, 1, fx->f) == 1 && nd <= TE_MAX_DIMS &&
                          fread(r->shape, 8, nd, fx->f) == nd,
                      "%s: record %d is truncated", fx->path, i);
        r->dtype = dt == 3 ? TE_I32 : TE_F32;
        r->ndim = nd;
        int64_t numel = 1;
        for (int d = 0; d < nd; d++)
            numel *= r->shape[d];
        r->offset = ftell(fx->f);
        fseek(fx->f, numel * 4, SEEK_CUR);
    }
    return fx;
}

void fx_close(fx_file *fx)
{
    fclose(fx->f);
    free(fx->rec);
    free(fx);
}

static const fx_record *find(fx_file *fx, const char *name)
{
    for (int i = 0; i < fx->n; i++)
        if (strcmp(fx->rec[i].name, name) == 0)
            return &fx->rec[i];
    ck_abort_msg("fixture %s has no tensor '%s'", fx->path, name);
    return NULL;
}

/* Reads the record into host memory, then into t on its device. */
static void load(fx_file *fx, const fx_record *r, te_tensor *t)
{
    void *buf = malloc((size_t)t->numel * 4 + 4);
    ck_assert(buf != NULL);
    fseek(fx->f, r->offset, SEEK_SET);
    ck_assert_msg(fread(buf, 4, (size_t)t->numel, fx->f) == (size_t)t->numel,
                  "%s: data of '%s' is truncated", fx->path, r->name);
    ck_assert_int_eq(te_tensor_write(t, 0, t->numel, buf), TE_OK);
    free(buf);
}

te_tensor *fx_tensor(fx_file *fx, const char *name)
{
    const fx_record *r = find(fx, name);
    te_tensor *t = te_tensor_new(r->dtype, r->ndim, r->shape);
    load(fx, r, t);
    return t;
}

te_tensor *fx_param(fx_file *fx, const char *name)
{
    const fx_record *r = find(fx, name);
    te_tensor *t = te_tensor_persistent(r->dtype, r->ndim, r->shape);
    load(fx, r, t);
    t->requires_grad = r->dtype == TE_F32;
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

/* Writes "CASE.FIELD" into key[n]; fails the test if it does not fit. */
static const char *case_key(char *key, size_t n, const char *c, const char *field)
{
    ck_assert_msg(snprintf(key, n, "%s.%s", c, field) < (int)n, "fixture name %s.%s too long", c,
                  field);
    return key;
}

te_tensor *fx_case(fx_file *fx, const char *c, const char *field)
{
    char key[NAME_SIZE];
    return fx_tensor(fx, case_key(key, sizeof key, c, field));
}

te_tensor *fx_case_param(fx_file *fx, const char *c, const char *field)
{
    char key[NAME_SIZE];
    return fx_param(fx, case_key(key, sizeof key, c, field));
}

void fx_assert_close(const te_tensor *got, const te_tensor *want, double atol, double rtol,
                     const char *what)
{
    char a[96], b[96];
    ck_assert_msg(got != NULL, "%s: no tensor (error: %s)", what, te_error());
    ck_assert_msg(te_same_shape(got, want), "%s: shape %s, expected %s", what,
                  te_shape_str(got->ndim, got->shape, a, sizeof a),
                  te_shape_str(want->ndim, want->shape, b, sizeof b));
    float *gv = malloc((size_t)got->numel * sizeof *gv + 4), *wv = malloc((size_t)got->numel * sizeof *wv + 4);
    ck_assert(gv && wv);
    ck_assert_int_eq(te_tensor_read_f32(got, 0, got->numel, gv), TE_OK);
    ck_assert_int_eq(te_tensor_read_f32(want, 0, want->numel, wv), TE_OK);
    double worst = -1, max_err = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < got->numel; i++) {
        double g = gv[i], w = wv[i];
        double err = fabs(g - w);
        double excess = err - (atol + rtol * fabs(w));
        if (isnan(g) != isnan(w))
            excess = INFINITY;
        if (err > max_err)
            max_err = err;
        if (excess > worst) {
            worst = excess;
            at = i;
        }
    }
    ck_assert_msg(worst <= 0, "%s: element %lld is %.8g, expected %.8g (max abs error %.3g, atol %g rtol %g)",
                  what, (long long)at, (double)gv[at], (double)wv[at], max_err, atol, rtol);
    free(gv);
    free(wv);
}
