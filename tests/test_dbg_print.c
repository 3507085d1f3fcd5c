/* test_dbg_print.c — tensor references, numpy-style printing, stats lines and
 * histograms (debugger/print.c). Expected prints were made with numpy's
 * array2string (line width 80, edgeitems 3, elements "%.6g" padded to the
 * widest). */
#include "dbg.h"
#include "suites.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------- */

static dbg_ref parse_ok(const char *text)
{
    dbg_ref r;
    char err[160] = "";
    ck_assert_msg(dbg_ref_parse(text, &r, err, sizeof err), "parse \"%s\" failed: %s", text, err);
    return r;
}

/* Fails unless text is refused with a message containing want. */
static void parse_fails(const char *text, const char *want)
{
    dbg_ref r;
    char err[160] = "";
    ck_assert_msg(!dbg_ref_parse(text, &r, err, sizeof err), "parse \"%s\" succeeded", text);
    ck_assert_msg(strstr(err, want) != NULL, "parse \"%s\": error \"%s\" lacks \"%s\"", text, err, want);
}

static void slice_is(const dbg_slice *s, bool index, bool has_start, int64_t start, bool has_stop,
                     int64_t stop, int64_t step, const char *what)
{
    ck_assert_msg(s->index == index && s->has_start == has_start && s->has_stop == has_stop &&
                  (!has_start || s->start == start) && (!has_stop || s->stop == stop) && s->step == step,
                  "%s: got index %d start %d:%lld stop %d:%lld step %lld, want index %d start %d:%lld "
                  "stop %d:%lld step %lld", what, s->index, s->has_start, (long long)s->start,
                  s->has_stop, (long long)s->stop, (long long)s->step, index, has_start,
                  (long long)start, has_stop, (long long)stop, (long long)step);
}

static te_tensor *arange(te_dtype dt, int ndim, const int64_t *shape, float scale, float shift)
{
    te_tensor *t = te_tensor_new(dt, ndim, shape);
    for (int64_t i = 0; i < t->numel; i++)
        te_set(t, i, (float)i * scale + shift);
    return t;
}

/* Output of one print call, captured in memory. */
typedef struct capture {
    FILE *f;
    char *buf;
    size_t len;
} capture;

static FILE *cap_open(capture *c)
{
    c->buf = NULL;
    c->f = open_memstream(&c->buf, &c->len);
    ck_assert_msg(c->f != NULL, "open_memstream failed");
    return c->f;
}

static void cap_check(capture *c, const char *want)
{
    fclose(c->f);
    ck_assert_msg(strcmp(c->buf, want) == 0, "got:\n%s\nwant:\n%s", c->buf, want);
    free(c->buf);
}

static void print_is(const te_tensor *t, const char *ref, int64_t max_elems, const char *want)
{
    capture c;
    dbg_ref r = parse_ok(ref);
    dbg_print_tensor(cap_open(&c), r.name, t, &r, max_elems);
    cap_check(&c, want);
}

/* ---- parsing ------------------------------------------------------------- */

START_TEST(test_parse_plain_name)
{
    dbg_ref r = parse_ok("  param:fc1.weight ");
    ck_assert_str_eq(r.name, "param:fc1.weight");
    ck_assert_int_eq(r.n_slices, 0);
    r = parse_ok("x[]");
    ck_assert_str_eq(r.name, "x");
    ck_assert_int_eq(r.n_slices, 0);
}
END_TEST

START_TEST(test_parse_slices)
{
    dbg_ref r = parse_ok(" fc1/linear:out0 [0, 1:3] ");
    ck_assert_str_eq(r.name, "fc1/linear:out0");
    ck_assert_int_eq(r.n_slices, 2);
    slice_is(&r.slices[0], true, true, 0, false, 0, 1, "0");
    slice_is(&r.slices[1], false, true, 1, true, 3, 1, "1:3");

    r = parse_ok("grad:w[-1, :, ::2, 2:-1:-3]");
    ck_assert_int_eq(r.n_slices, 4);
    slice_is(&r.slices[0], true, true, -1, false, 0, 1, "-1");
    slice_is(&r.slices[1], false, false, 0, false, 0, 1, ":");
    slice_is(&r.slices[2], false, false, 0, false, 0, 2, "::2");
    slice_is(&r.slices[3], false, true, 2, true, -1, -3, "2:-1:-3");
}
END_TEST

START_TEST(test_parse_optional_parts)
{
    dbg_ref r = parse_ok("x[ : 4 ,+3,]");
    ck_assert_int_eq(r.n_slices, 2);
    slice_is(&r.slices[0], false, false, 0, true, 4, 1, ": 4");
    slice_is(&r.slices[1], true, true, 3, false, 0, 1, "+3 with a trailing comma");
    r = parse_ok("x[5::-1,2:]");
    slice_is(&r.slices[0], false, true, 5, false, 0, -1, "5::-1");
    slice_is(&r.slices[1], false, true, 2, false, 0, 1, "2:");
    r = parse_ok("x[0,1,2,3]");
    ck_assert_int_eq(r.n_slices, 4);
    ck_assert_int_eq(r.slices[3].start, 3);
}
END_TEST

START_TEST(test_parse_error_token)
{
    parse_fails("fc1/linear:out0[x]", "column 17: expected an integer, ':' or ']', got 'x'");
    parse_fails("x[1x]", "column 3: expected an integer, ':' or ']', got '1x'");
    parse_fails("x[,]", "column 3: expected an integer, ':' or ']', got ','");
    parse_fails("x[2 3]", "column 5: expected ':', ',' or ']', got '3'");
    parse_fails("x[1[", "column 4: expected ':', ',' or ']', got '['");
    parse_fails("x[:y]", "column 4: expected an integer, ':', ',' or ']', got 'y'");
    parse_fails("x[1:2 z]", "column 7: expected ':', ',' or ']', got 'z'");
    parse_fails("x[::z]", "column 5: expected an integer, ',' or ']', got 'z'");
    parse_fails("x[1:2:3:4]", "column 8: expected ',' or ']', got ':'");
}
END_TEST

START_TEST(test_parse_error_step_zero)
{
    parse_fails("fc1/linear:out0[1::0]", "column 20: step 0 is not allowed");
    parse_fails("x[0, ::-0]", "column 8: step 0 is not allowed");
}
END_TEST

START_TEST(test_parse_error_too_many)
{
    parse_fails("x[0,0,0,0,0]", "column 11: more than 4 indices");
    parse_fails("x[0,0,0,0,:]", "column 11: more than 4 indices");
}
END_TEST

START_TEST(test_parse_error_unclosed_and_trailing)
{
    parse_fails("x[1", "column 4: expected ':', ',' or ']', got end of input");
    parse_fails("x[", "column 3: expected an integer, ':' or ']', got end of input");
    parse_fails("x[1] y", "column 6: unexpected 'y' after ']'");
    parse_fails("x[1][2]", "column 5: unexpected '[' after ']'");
}
END_TEST

START_TEST(test_parse_error_name)
{
    parse_fails("[0]", "column 1: missing tensor name");
    parse_fails("  [0]", "column 3: missing tensor name");
    parse_fails("", "column 1: missing tensor name");
    parse_fails("fc1 linear[0]", "column 4: space in tensor name 'fc1 linear'");
    parse_fails("x]", "column 2: ']' without '['");
    char longname[200];
    memset(longname, 'a', 150);
    strcpy(longname + 150, "[0]");
    parse_fails(longname, "column 1: tensor name longer than 127 characters");
}
END_TEST

START_TEST(test_parse_error_integer_range)
{
    parse_fails("x[99999999999999999999]", "column 3: integer '99999999999999999999' out of range");
    dbg_ref r = parse_ok("x[-9223372036854775807]");
    ck_assert_msg(r.slices[0].start == -INT64_MAX, "start %lld", (long long)r.slices[0].start);
}
END_TEST

/* ---- resolving ----------------------------------------------------------- */

START_TEST(test_resolve_index)
{
    te_tensor *t = te_tensor_zeros(TE_F32, te_shape(4, 16));
    dbg_ref r = parse_ok("a[-1, 1:3]");
    char err[160] = "";
    ck_assert_msg(dbg_ref_resolve(&r, t, err, sizeof err), "resolve failed: %s", err);
    ck_assert_msg(r.slices[0].index && r.slices[0].start == 3, "index resolved to %lld",
                  (long long)r.slices[0].start);
    slice_is(&r.slices[1], false, true, 1, true, 3, 1, "1:3");
}
END_TEST

/* Python's slice(...).indices(5) for each, and a second resolve changes nothing. */
START_TEST(test_resolve_slices_clamp)
{
    static const struct {
        const char *ref;
        int64_t start, stop, step;
    } cases[] = {
        { "v[-100:100]", 0, 5, 1 }, { "v[::-1]", 4, -1, -1 }, { "v[10:]", 5, 5, 1 },
        { "v[:-2]", 0, 3, 1 },      { "v[3:-10:-1]", 3, -1, -1 }, { "v[1::2]", 1, 5, 2 },
        { "v[-100::-1]", 0, 0, -1 }, /* empty: Python gives (-1, -1, -1) */
    };
    te_tensor *t = te_tensor_zeros(TE_F32, te_shape(5));
    char err[160] = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dbg_ref r = parse_ok(cases[i].ref);
        ck_assert_msg(dbg_ref_resolve(&r, t, err, sizeof err), "%s: %s", cases[i].ref, err);
        dbg_slice s = r.slices[0];
        ck_assert_msg(!s.index && s.start == cases[i].start && s.stop == cases[i].stop &&
                      s.step == cases[i].step, "%s resolved to %lld:%lld:%lld, want %lld:%lld:%lld",
                      cases[i].ref, (long long)s.start, (long long)s.stop, (long long)s.step,
                      (long long)cases[i].start, (long long)cases[i].stop, (long long)cases[i].step);
        ck_assert(dbg_ref_resolve(&r, t, err, sizeof err));
        slice_is(&r.slices[0], false, s.has_start, s.start, s.has_stop, s.stop, s.step, cases[i].ref);
        ck_assert_msg(r.slices[0].start == s.start && r.slices[0].stop == s.stop,
                      "%s: second resolve gave %lld:%lld", cases[i].ref,
                      (long long)r.slices[0].start, (long long)r.slices[0].stop);
    }
}
END_TEST

START_TEST(test_resolve_errors)
{
    te_tensor *t = te_tensor_zeros(TE_F32, te_shape(4, 16));
    char err[160] = "";
    dbg_ref r = parse_ok("a[4]");
    ck_assert(!dbg_ref_resolve(&r, t, err, sizeof err));
    ck_assert_msg(strstr(err, "index 4 out of range for dim 0 of size 4"), "%s", err);
    r = parse_ok("a[0,-17]");
    ck_assert(!dbg_ref_resolve(&r, t, err, sizeof err));
    ck_assert_msg(strstr(err, "index -17 out of range for dim 1 of size 16"), "%s", err);
    r = parse_ok("a[0,-16]");
    ck_assert_msg(dbg_ref_resolve(&r, t, err, sizeof err) && r.slices[1].start == 0,
                  "-16 of 16: %s", err);
    r = parse_ok("a[0,0,0]");
    ck_assert(!dbg_ref_resolve(&r, t, err, sizeof err));
    ck_assert_msg(strstr(err, "3 indices for a 2-d tensor"), "%s", err);
}
END_TEST

/* ---- printing -------------------------------------------------------------- */

START_TEST(test_print_1d_wrap)
{
    te_tensor *t = arange(TE_F32, te_shape(40), 1.5f, -7.0f);
    capture c;
    dbg_print_tensor(cap_open(&c), "x", t, NULL, 1000);
    cap_check(&c, "x f32 [40]\n"
                  "[  -7 -5.5   -4 -2.5   -1  0.5    2  3.5    5  6.5    8  9.5   11 12.5   14\n"
                  " 15.5   17 18.5   20 21.5   23 24.5   26 27.5   29 30.5   32 33.5   35 36.5\n"
                  "   38 39.5   41 42.5   44 45.5   47 48.5   50 51.5]\n");
}
END_TEST

START_TEST(test_print_2d)
{
    te_tensor *t = arange(TE_F32, te_shape(3, 4), 1.0f, 0.0f);
    print_is(t, "x[1:, ::2]", 1000, "x f32 [3,4] (slice [1:,::2] -> [2,2])\n"
                                     "[[ 4  6]\n"
                                     " [ 8 10]]\n");
    te_tensor *w = arange(TE_F32, te_shape(2, 30), 1.5f, 0.0f);
    print_is(w, "w", 1000,
             "w f32 [2,30]\n"
             "[[   0  1.5    3  4.5    6  7.5    9 10.5   12 13.5   15 16.5   18 19.5   21\n"
             "  22.5   24 25.5   27 28.5   30 31.5   33 34.5   36 37.5   39 40.5   42 43.5]\n"
             " [  45 46.5   48 49.5   51 52.5   54 55.5   57 58.5   60 61.5   63 64.5   66\n"
             "  67.5   69 70.5   72 73.5   75 76.5   78 79.5   81 82.5   84 85.5   87 88.5]]\n");
}
END_TEST

/* The shown elements are read from the tensor in runs (backwards along a
 * reversed last dim, one at a time along a strided one) in its own dtype:
 * i32 beyond 2^24 stays exact, f16 is widened, and a summary reads only
 * its edges. */
START_TEST(test_print_reads_runs)
{
    te_tensor *i = te_tensor_new(TE_I32, te_shape(2, 5));
    int32_t v[10];
    for (int k = 0; k < 10; k++)
        v[k] = 16777217 + k; /* not a float's */
    ck_assert_int_eq(te_tensor_write(i, 0, 10, v), TE_OK);
    print_is(i, "x[:, ::-1]", 1000, "x i32 [2,5] (slice [:,::-1] -> [2,5])\n"
                                     "[[16777221 16777220 16777219 16777218 16777217]\n"
                                     " [16777226 16777225 16777224 16777223 16777222]]\n");
    print_is(i, "x[::-1, 4:0:-3]", 1000, "x i32 [2,5] (slice [::-1,4:0:-3] -> [2,2])\n"
                                          "[[16777226 16777223]\n"
                                          " [16777221 16777218]]\n");
    te_tensor *h = arange(TE_F16, te_shape(1, 100), 0.5f, -20.0f);
    print_is(h, "y", 10, "y f16 [1,100]\n[[  -20 -19.5   -19 ...  28.5    29  29.5]]\n");
}
END_TEST

START_TEST(test_print_3d)
{
    te_tensor *t = arange(TE_F32, te_shape(2, 3, 4), 1.0f, -5.0f);
    print_is(t, "x", 1000, "x f32 [2,3,4]\n"
                           "[[[-5 -4 -3 -2]\n"
                           "  [-1  0  1  2]\n"
                           "  [ 3  4  5  6]]\n"
                           "\n"
                           " [[ 7  8  9 10]\n"
                           "  [11 12 13 14]\n"
                           "  [15 16 17 18]]]\n");
    print_is(t, "x[:, ::-2, 1:]", 1000, "x f32 [2,3,4] (slice [:,::-2,1:] -> [2,2,3])\n"
                                         "[[[ 4  5  6]\n"
                                         "  [-4 -3 -2]]\n"
                                         "\n"
                                         " [[16 17 18]\n"
                                         "  [ 8  9 10]]]\n");
    print_is(t, "x[1, -1]", 1000, "x f32 [2,3,4] (slice [1,2] -> [4])\n[15 16 17 18]\n");
}
END_TEST

/* An attention tensor [B,H,T,T] whose element (b,h,i,j) is b*1000 + h*100
 * + i*10 + j, and the text a 2-D slice of it must print: rows of the
 * values, each computed here from its four indices, right-aligned to the
 * widest (integers print as %g does). */
static te_tensor *attention_like(void)
{
    te_tensor *t = te_tensor_new(TE_F32, 4, (int64_t[]){ 2, 4, 5, 6 });
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < 5; i++)
                for (int j = 0; j < 6; j++)
                    te_set(t, ((b * 4 + h) * 5 + i) * 6 + j, (float)(b * 1000 + h * 100 + i * 10 + j));
    return t;
}

static void expect_2d(char *buf, size_t n, int b, int h, const int *rows, int n_rows, const int *cols, int n_cols)
{
    int width = 0;
    char v[16];
    for (int r = 0; r < n_rows; r++)
        for (int c = 0; c < n_cols; c++) {
            int len = snprintf(v, sizeof v, "%d", b * 1000 + h * 100 + rows[r] * 10 + cols[c]);
            width = len > width ? len : width;
        }
    size_t u = 0;
    for (int r = 0; r < n_rows; r++) {
        u += (size_t)snprintf(buf + u, n - u, "%s", r == 0 ? "[[" : " [");
        for (int c = 0; c < n_cols; c++)
            u += (size_t)snprintf(buf + u, n - u, "%s%*d", c ? " " : "", width,
                                  b * 1000 + h * 100 + rows[r] * 10 + cols[c]);
        u += (size_t)snprintf(buf + u, n - u, "]%s\n", r == n_rows - 1 ? "]" : "");
    }
}

/* print h0/attn/scores:out0[0, 2, :4, :4]: batch 0, head 2, the top-left
 * 4 x 4 of its T x T scores; and other slices of a 4-D tensor. */
START_TEST(test_print_4d_head_slice)
{
    te_tensor *t = attention_like();
    dbg_ref r = parse_ok("h0/attn/scores:out0[0, 2, :4, :4]");
    ck_assert_str_eq(r.name, "h0/attn/scores:out0");
    ck_assert_int_eq(r.n_slices, 4);
    char want[1200], body[1024];
    expect_2d(body, sizeof body, 0, 2, (const int[]){ 0, 1, 2, 3 }, 4, (const int[]){ 0, 1, 2, 3 }, 4);
    snprintf(want, sizeof want, "h0/attn/scores:out0 f32 [2,4,5,6] (slice [0,2,:4,:4] -> [4,4])\n%s", body);
    ck_assert_str_eq(body, "[[200 201 202 203]\n [210 211 212 213]\n [220 221 222 223]\n [230 231 232 233]]\n");
    print_is(t, "h0/attn/scores:out0[0, 2, :4, :4]", 1000, want);
    /* the last head of batch 1, odd rows, every other column backwards */
    expect_2d(body, sizeof body, 1, 3, (const int[]){ 1, 3 }, 2, (const int[]){ 5, 3, 1 }, 3);
    snprintf(want, sizeof want, "s f32 [2,4,5,6] (slice [1,3,1:5:2,::-2] -> [2,3])\n%s", body);
    print_is(t, "s[1, -1, 1:5:2, ::-2]", 1000, want);
    /* the whole T x T of one head: leading indices only */
    expect_2d(body, sizeof body, 1, 0, (const int[]){ 0, 1, 2, 3, 4 }, 5, (const int[]){ 0, 1, 2, 3, 4, 5 }, 6);
    snprintf(want, sizeof want, "s f32 [2,4,5,6] (slice [1,0] -> [5,6])\n%s", body);
    print_is(t, "s[1, 0]", 1000, want);
    /* across heads: element (i=4, j=5) of every head of batch 0 */
    print_is(t, "s[0, :, 4, 5]", 1000, "s f32 [2,4,5,6] (slice [0,:,4,5] -> [4])\n[ 45 145 245 345]\n");
    /* an index past the heads is refused, naming the dim */
    capture c;
    dbg_ref bad = parse_ok("s[0, 4, :4, :4]");
    dbg_print_tensor(cap_open(&c), bad.name, t, &bad, 1000);
    fclose(c.f);
    ck_assert_msg(strstr(c.buf, "out of range for dim 1 of size 4") != NULL, "got: %s", c.buf);
    free(c.buf);
    te_tensor_free(t);
}
END_TEST

START_TEST(test_print_scalar_and_empty)
{
    te_tensor *t = arange(TE_F32, te_shape(2, 3, 4), 1.0f, -5.0f);
    print_is(t, "x[1,2,3]", 1000, "x f32 [2,3,4] (slice [1,2,3] -> [])\n18\n");
    te_tensor *v = arange(TE_F32, te_shape(5), 1.0f, 0.0f);
    print_is(v, "v[2:2]", 1000, "v f32 [5] (slice [2:2] -> [0])\n[]\n");
    print_is(v, "v[-100::-1]", 1000, "v f32 [5] (slice [0:0:-1] -> [0])\n[]\n");
}
END_TEST

START_TEST(test_print_summary_100x100)
{
    te_tensor *t = arange(TE_F32, te_shape(100, 100), 0.25f, 0.0f);
    capture c;
    dbg_print_tensor(cap_open(&c), "big", t, NULL, 1000);
    cap_check(&c, "big f32 [100,100]\n"
                  "[[      0    0.25     0.5 ...   24.25    24.5   24.75]\n"
                  " [     25   25.25    25.5 ...   49.25    49.5   49.75]\n"
                  " [     50   50.25    50.5 ...   74.25    74.5   74.75]\n"
                  " ...\n"
                  " [   2425 2425.25  2425.5 ... 2449.25  2449.5 2449.75]\n"
                  " [   2450 2450.25  2450.5 ... 2474.25  2474.5 2474.75]\n"
                  " [   2475 2475.25  2475.5 ... 2499.25  2499.5 2499.75]]\n");
}
END_TEST

START_TEST(test_print_summary_threshold)
{
    te_tensor *t = arange(TE_F32, te_shape(7), 1.0f, 0.0f);
    print_is(t, "s", 7, "s f32 [7]\n[0 1 2 3 4 5 6]\n");
    print_is(t, "s", 6, "s f32 [7]\n[0 1 2 ... 4 5 6]\n");
    print_is(t, "s", 0, "s f32 [7]\n[0 1 2 3 4 5 6]\n");
}
END_TEST

START_TEST(test_print_summary_4d)
{
    te_tensor *t = arange(TE_F32, te_shape(2, 3, 10, 10), 1.0f, 0.0f);
    capture c;
    dbg_print_tensor(cap_open(&c), "q", t, NULL, 100);
    fclose(c.f);
    /* The first block and the seam between the outermost blocks. */
    const char *head = "q f32 [2,3,10,10]\n"
                       "[[[[  0   1   2 ...   7   8   9]\n"
                       "   [ 10  11  12 ...  17  18  19]\n"
                       "   [ 20  21  22 ...  27  28  29]\n"
                       "   ...\n"
                       "   [ 70  71  72 ...  77  78  79]\n"
                       "   [ 80  81  82 ...  87  88  89]\n"
                       "   [ 90  91  92 ...  97  98  99]]\n"
                       "\n"
                       "  [[100 101 102 ... 107 108 109]\n";
    const char *seam = "   [290 291 292 ... 297 298 299]]]\n"
                       "\n"
                       "\n"
                       " [[[300 301 302 ... 307 308 309]\n";
    const char *tail = "   [590 591 592 ... 597 598 599]]]]\n";
    ck_assert_msg(strncmp(c.buf, head, strlen(head)) == 0, "got:\n%s", c.buf);
    ck_assert_msg(strstr(c.buf, seam) != NULL, "no seam in:\n%s", c.buf);
    ck_assert_msg(c.len > strlen(tail) && strcmp(c.buf + c.len - strlen(tail), tail) == 0,
                  "got:\n%s", c.buf);
    int lines = 0;
    for (const char *p = c.buf; *p; p++)
        lines += *p == '\n';
    ck_assert_msg(lines == 1 + 6 * 7 + 4 + 2, "%d lines", lines);
    free(c.buf);
}
END_TEST

START_TEST(test_print_nonfinite)
{
    te_tensor *t = te_tensor_from(TE_F32, te_shape(5), (float[]){ 1.5f, NAN, -INFINITY, INFINITY, -0.25f });
    print_is(t, "n", 1000, "n f32 [5]\n[  1.5   nan  -inf   inf -0.25]\n");
    te_set(t, 0, -NAN);
    print_is(t, "n[0]", 1000, "n f32 [5] (slice [0] -> [])\nnan\n");
}
END_TEST

START_TEST(test_print_i32)
{
    te_tensor *t = te_tensor_from(TE_I32, te_shape(2, 3),
                                  (int32_t[]){ 16777217, -3, 0, 42, INT32_MIN, 7 });
    print_is(t, "labels", 1000, "labels i32 [2,3]\n"
                                "[[   16777217          -3           0]\n"
                                " [         42 -2147483648           7]]\n");
}
END_TEST

START_TEST(test_print_f16_bf16)
{
    te_tensor *h = te_tensor_new(TE_F16, te_shape(5));
    const float hv[] = { 0.1f, -65504.0f, 1.0f / 3, 1e-5f, 2048.5f };
    te_copy_from_f32(h, hv);
    print_is(h, "h", 1000, "h f16 [5]\n[  0.0999756      -65504    0.333252 1.00136e-05        2048]\n");
    te_tensor *b = te_tensor_new(TE_BF16, te_shape(3));
    te_copy_from_f32(b, (const float[]){ 1.5f, -0.0078125f, 256.0f });
    print_is(b, "b", 1000, "b bf16 [3]\n[       1.5 -0.0078125        256]\n");
}
END_TEST

START_TEST(test_print_bad_ref_and_no_data)
{
    te_tensor *t = arange(TE_F32, te_shape(5), 1.0f, 0.0f);
    print_is(t, "v[5]", 1000, "v f32 [5]\nindex 5 out of range for dim 0 of size 5\n");
    te_tensor nodata = { .dtype = TE_F32, .ndim = 1, .shape = { 3 }, .numel = 3 };
    print_is(&nodata, "g[1:]", 1000, "g f32 [3] (slice [1:] -> [2])\nno data\n");
    capture c;
    dbg_ref r = parse_ok("fc/out0[-1]");
    dbg_print_tensor(cap_open(&c), NULL, t, &r, 1000); /* the name comes from the ref */
    cap_check(&c, "fc/out0 f32 [5] (slice [4] -> [])\n4\n");
}
END_TEST

/* ---- statistics and histograms --------------------------------------------- */

START_TEST(test_stats_line)
{
    te_tensor *t = te_tensor_from(TE_F32, te_shape(2, 4), (float[]){ -2, 0, 1, 3, 0, 4, -1, 3 });
    capture c;
    dbg_print_stats(cap_open(&c), "w", t);
    cap_check(&c, "w f32 [2,4] min -2 max 4 mean 1 std 2 abs_max 4 l2norm 6.32456 zero 25.0%"
                  " nan 0 inf 0 fp16_overflow 0\n");
}
END_TEST

START_TEST(test_stats_line_nonfinite)
{
    te_tensor *t = te_tensor_from(TE_F32, te_shape(5), (float[]){ 1e5f, NAN, -INFINITY, 2, 0 });
    capture c;
    dbg_print_stats(cap_open(&c), "act", t);
    cap_check(&c, "act f32 [5] min 0 max 100000 mean 33334 std 47140 abs_max 100000 l2norm 100000"
                  " zero 20.0% nan 1 inf 1 fp16_overflow 1\n");
}
END_TEST

START_TEST(test_hist_basic)
{
    te_tensor *t = te_tensor_from(TE_F32, te_shape(10), (float[]){ 0, 1, 1, 2, 3, 3, 3, 5, 8, NAN });
    capture c;
    dbg_print_hist(cap_open(&c), "x", t, 4, 8);
    cap_check(&c, "[0, 2)  3  ######\n"
                  "[2, 4)  4  ########\n"
                  "[4, 6)  1  ##\n"
                  "[6, 8]  1  ##\n"
                  "nan 1  inf 0\n");
}
END_TEST

/* Aligned columns, empty bins without a bar, and at least one '#' for a
 * count that scales to less than one. */
START_TEST(test_hist_alignment)
{
    float v[22];
    for (int i = 0; i < 20; i++)
        v[i] = 0.5f;
    v[20] = -1.0f;
    v[21] = 2.0f;
    te_tensor *t = te_tensor_from(TE_F32, te_shape(22), v);
    capture c;
    dbg_print_hist(cap_open(&c), "x", t, 6, 8);
    cap_check(&c, "[-1, -0.5)   1  #\n"
                  "[-0.5, 0)    0\n"
                  "[0, 0.5)     0\n"
                  "[0.5, 1)    20  ########\n"
                  "[1, 1.5)     0\n"
                  "[1.5, 2]     1  #\n"
                  "nan 0  inf 0\n");
}
END_TEST

START_TEST(test_hist_constant_and_nonfinite)
{
    te_tensor *t = te_tensor_from(TE_F32, te_shape(4), (float[]){ 7, 7, 7, INFINITY });
    capture c;
    dbg_print_hist(cap_open(&c), "x", t, 10, 5);
    cap_check(&c, "[7, 7]  3  #####\nnan 0  inf 1\n");
    te_tensor *bad = te_tensor_from(TE_F32, te_shape(3), (float[]){ NAN, INFINITY, -INFINITY });
    dbg_print_hist(cap_open(&c), "x", bad, 10, 5);
    cap_check(&c, "nan 1  inf 2\n");
}
END_TEST

Suite *suite_dbg_print(void)
{
    Suite *s = suite_create("dbg_print");
    TCase *tc = tcase_create("print");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_parse_plain_name);
    tcase_add_test(tc, test_parse_slices);
    tcase_add_test(tc, test_parse_optional_parts);
    tcase_add_test(tc, test_parse_error_token);
    tcase_add_test(tc, test_parse_error_step_zero);
    tcase_add_test(tc, test_parse_error_too_many);
    tcase_add_test(tc, test_parse_error_unclosed_and_trailing);
    tcase_add_test(tc, test_parse_error_name);
    tcase_add_test(tc, test_parse_error_integer_range);
    tcase_add_test(tc, test_resolve_index);
    tcase_add_test(tc, test_resolve_slices_clamp);
    tcase_add_test(tc, test_resolve_errors);
    tcase_add_test(tc, test_print_1d_wrap);
    tcase_add_test(tc, test_print_2d);
    tcase_add_test(tc, test_print_3d);
    tcase_add_test(tc, test_print_reads_runs);
    tcase_add_test(tc, test_print_4d_head_slice);
    tcase_add_test(tc, test_print_scalar_and_empty);
    tcase_add_test(tc, test_print_summary_100x100);
    tcase_add_test(tc, test_print_summary_threshold);
    tcase_add_test(tc, test_print_summary_4d);
    tcase_add_test(tc, test_print_nonfinite);
    tcase_add_test(tc, test_print_i32);
    tcase_add_test(tc, test_print_f16_bf16);
    tcase_add_test(tc, test_print_bad_ref_and_no_data);
    tcase_add_test(tc, test_stats_line);
    tcase_add_test(tc, test_stats_line_nonfinite);
    tcase_add_test(tc, test_hist_basic);
    tcase_add_test(tc, test_hist_alignment);
    tcase_add_test(tc, test_hist_constant_and_nonfinite);
    suite_add_tcase(s, tc);
    return s;
}
