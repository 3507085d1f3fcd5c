/*
 * test_dump_spec.c — the dump spec language: defaults, every key's values,
 * every error with its exact text and column, specs read from @FILE, the
 * step and op selection, and the canonical text read back.
 */
#include "dump.h"
#include "suites.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_TEXT                                                                            \
    "dir=tdbg-dump;ops=*;steps=*;io=outputs;phase=forward,backward,update;what=full;when=always;" \
    "keep=0;max=none;compress=none"

#define assert_i64(got, want)                                                                     \
    ck_assert_msg((int64_t)(got) == (int64_t)(want), "%s = %lld, expected %lld", #got,           \
                  (long long)(got), (long long)(want))
#define assert_u64(got, want)                                                                     \
    ck_assert_msg((uint64_t)(got) == (uint64_t)(want), "%s = %llu, expected %llu", #got,         \
                  (unsigned long long)(got), (unsigned long long)(want))

/* The spec parsed from text, which must be good. */
static dump_spec ok(const char *text)
{
    dump_spec s;
    char err[512] = "untouched";
    ck_assert_msg(dump_spec_parse(text, &s, err, sizeof err), "'%s' failed: %s", text, err);
    ck_assert_msg(err[0] == '\0', "'%s' parsed but left an error: %s", text, err);
    return s;
}

static void formats_as(const dump_spec *s, const char *want)
{
    char buf[16384];
    dump_spec_format(s, buf, sizeof buf);
    ck_assert_msg(strcmp(buf, want) == 0, "format gave\n  %s\nexpected\n  %s", buf, want);
}

/* text must fail with exactly this message and leave the defaults in s. */
static void err_is(const char *text, const char *want)
{
    dump_spec s;
    char err[512];
    ck_assert_msg(!dump_spec_parse(text, &s, err, sizeof err), "'%.200s' parsed", text);
    ck_assert_msg(strcmp(err, want) == 0, "'%.200s': error\n  %s\nexpected\n  %s", text, err, want);
    formats_as(&s, DEFAULT_TEXT);
}

static void assert_range(const dump_range *r, int64_t lo, int64_t hi, int64_t every)
{
    assert_i64(r->lo, lo);
    assert_i64(r->hi, hi);
    assert_i64(r->every, every);
}

static void assert_same(const dump_spec *a, const dump_spec *b)
{
    ck_assert_str_eq(a->dir, b->dir);
    assert_i64(a->n_ops, b->n_ops);
    for (int i = 0; i < a->n_ops; i++)
        ck_assert_str_eq(a->ops[i], b->ops[i]);
    assert_i64(a->n_steps, b->n_steps);
    for (int i = 0; i < a->n_steps; i++)
        assert_range(&a->steps[i], b->steps[i].lo, b->steps[i].hi, b->steps[i].every);
    assert_i64(a->io, b->io);
    assert_i64(a->phases, b->phases);
    assert_i64(a->stats_only, b->stats_only);
    assert_i64(a->when, b->when);
    assert_i64(a->keep, b->keep);
    assert_u64(a->max_bytes, b->max_bytes);
    assert_i64(a->gzip, b->gzip);
}

/* ---- good specs ------------------------------------------------------------------ */

START_TEST(test_defaults)
{
    const char *texts[] = { "", "   ", ";", " ; ;\t; " };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        dump_spec s = ok(texts[i]);
        ck_assert_str_eq(s.dir, "tdbg-dump");
        assert_i64(s.n_ops, 0);
        assert_i64(s.n_steps, 0);
        assert_i64(s.io, DUMP_IO_OUTPUTS);
        assert_i64(s.phases, DUMP_PHASE_FORWARD | DUMP_PHASE_BACKWARD | DUMP_PHASE_UPDATE);
        ck_assert(!s.stats_only);
        assert_i64(s.when, DUMP_WHEN_ALWAYS);
        assert_i64(s.keep, 0);
        assert_u64(s.max_bytes, 0);
        assert_i64(s.gzip, 0);
    }
    dump_spec s;
    ck_assert(dump_spec_parse(NULL, &s, NULL, 0));
    ck_assert_str_eq(s.dir, "tdbg-dump");
}
END_TEST

START_TEST(test_issue_example)
{
    dump_spec s = ok("dir=dumps/a;ops=fc*,type:Conv2D;steps=0|5-8;io=both;what=full");
    ck_assert_str_eq(s.dir, "dumps/a");
    assert_i64(s.n_ops, 2);
    ck_assert_str_eq(s.ops[0], "fc*");
    ck_assert_str_eq(s.ops[1], "type:Conv2D");
    assert_i64(s.n_steps, 2);
    assert_range(&s.steps[0], 0, 0, 1);
    assert_range(&s.steps[1], 5, 8, 1);
    assert_i64(s.io, DUMP_IO_BOTH);
    ck_assert(!s.stats_only);
    assert_i64(s.phases, DUMP_PHASE_FORWARD | DUMP_PHASE_BACKWARD | DUMP_PHASE_UPDATE);
    assert_i64(s.when, DUMP_WHEN_ALWAYS);
}
END_TEST

START_TEST(test_whitespace)
{
    dump_spec s = ok("  dir = my dumps/run 1 ;; ops = fc* , type: Conv2D ;steps = 1 - 3 | every : 5;\n");
    ck_assert_str_eq(s.dir, "my dumps/run 1");
    assert_i64(s.n_ops, 2);
    ck_assert_str_eq(s.ops[0], "fc*");
    ck_assert_str_eq(s.ops[1], "type:Conv2D");
    assert_i64(s.n_steps, 2);
    assert_range(&s.steps[0], 1, 3, 1);
    assert_range(&s.steps[1], 0, INT64_MAX, 5);
}
END_TEST

START_TEST(test_ops_values)
{
    assert_i64(ok("ops=*").n_ops, 0);
    dump_spec s = ok("ops=*,fc1/*");
    assert_i64(s.n_ops, 2);
    ck_assert_str_eq(s.ops[0], "*");
    ck_assert_str_eq(s.ops[1], "fc1/*");

    char text[4 + 32 * 2 + 1] = "ops=";
    for (int i = 0; i < 32; i++)
        strcat(text, i ? ",a" : "a");
    assert_i64(ok(text).n_ops, 32);

    char longest[4 + 127 + 1] = "ops=";
    memset(longest + 4, 'x', 127);
    longest[4 + 127] = '\0';
    s = ok(longest);
    assert_i64(strlen(s.ops[0]), 127);
}
END_TEST

START_TEST(test_steps_values)
{
    dump_spec s = ok("steps=0|5-8|every:10|100-120");
    assert_i64(s.n_steps, 4);
    assert_range(&s.steps[0], 0, 0, 1);
    assert_range(&s.steps[1], 5, 8, 1);
    assert_range(&s.steps[2], 0, INT64_MAX, 10);
    assert_range(&s.steps[3], 100, 120, 1);

    s = ok("steps=1,4-4 , 7|100-200:every:10|5:every:3|every:1");
    assert_i64(s.n_steps, 6);
    assert_range(&s.steps[0], 1, 1, 1);
    assert_range(&s.steps[1], 4, 4, 1);
    assert_range(&s.steps[2], 7, 7, 1);
    assert_range(&s.steps[3], 100, 200, 10);
    assert_range(&s.steps[4], 5, 5, 3);
    assert_range(&s.steps[5], 0, INT64_MAX, 1);

    assert_i64(ok("steps=*").n_steps, 0);
    s = ok("steps=9223372036854775807");
    assert_range(&s.steps[0], INT64_MAX, INT64_MAX, 1);
}
END_TEST

START_TEST(test_word_values)
{
    assert_i64(ok("io=outputs").io, DUMP_IO_OUTPUTS);
    assert_i64(ok("io=inputs").io, DUMP_IO_INPUTS);
    assert_i64(ok("io=both").io, DUMP_IO_BOTH);
    ck_assert(!ok("what=full").stats_only);
    ck_assert(ok("what=stats").stats_only);
    assert_i64(ok("when=always").when, DUMP_WHEN_ALWAYS);
    assert_i64(ok("when=break").when, DUMP_WHEN_BREAK);
    assert_i64(ok("when=nonfinite").when, DUMP_WHEN_NONFINITE);
    assert_i64(ok("phase=grads").phases, DUMP_PHASE_GRADS);
    assert_i64(ok("phase=params, update").phases, DUMP_PHASE_PARAMS | DUMP_PHASE_UPDATE);
    assert_i64(ok("phase=forward,backward,update,params,grads,forward").phases, 0x1f);
    assert_i64(ok("compress=none").gzip, 0);
    assert_i64(ok("compress=gzip:1").gzip, 1);
    assert_i64(ok("compress=gzip: 9").gzip, 9);
}
END_TEST

START_TEST(test_keep_values)
{
    dump_spec s = ok("when=nonfinite;keep=3");
    assert_i64(s.keep, 3);
    assert_i64(s.when, DUMP_WHEN_NONFINITE);
    s = ok("keep=5;when=break"); /* when may come after keep */
    assert_i64(s.keep, 5);
    assert_i64(s.when, DUMP_WHEN_BREAK);
    assert_i64(ok("keep=0").keep, 0); /* off, what the canonical text writes */
    assert_i64(ok("when=break;keep=2147483647").keep, 2147483647);
}
END_TEST

START_TEST(test_max_values)
{
    static const struct { const char *text; uint64_t bytes; } cases[] = {
        { "max=123", 123 },
        { "max=123B", 123 },
        { "max=100k", 100 * 1024 },
        { "max=100K", 100 * 1024 },
        { "max=500MB", 500ull << 20 },
        { "max=500mb", 500ull << 20 },
        { "max=2G", 2ull << 30 },
        { "max=2gB", 2ull << 30 },
        { "max=16777215G", 16777215ull << 30 },
        { "max=18446744073709551615", UINT64_MAX },
        { "max=none", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dump_spec s = ok(cases[i].text);
        ck_assert_msg(s.max_bytes == cases[i].bytes, "%s: %llu bytes", cases[i].text,
                      (unsigned long long)s.max_bytes);
    }
}
END_TEST

START_TEST(test_dir_values)
{
    char text[4 + 4095 + 1] = "dir=";
    memset(text + 4, 'd', 4095);
    text[4 + 4095] = '\0';
    assert_i64(strlen(ok(text).dir), 4095);
    ck_assert_str_eq(ok("dir=/tmp/a#b").dir, "/tmp/a#b"); /* '#' is a comment in files only */
}
END_TEST

/* ---- errors ---------------------------------------------------------------------- */

START_TEST(test_err_keys)
{
    err_is("io=both;stpes=1", "column 9: unknown key 'stpes' (did you mean steps?)");
    err_is("dir=x; colour=red",
           "column 8: unknown key 'colour' (use dir, ops, steps, io, phase, what, when, keep, max or compress)");
    err_is("    steps=1;io=both;max=100k;steps=2", "column 30: 'steps' given twice (first at column 5)");
    err_is("dir=x;steps", "column 7: 'steps' is not key=value");
    err_is("dir=x; =5", "column 8: '=5' has no key before '='");
    err_is("dir=x;ops= ;", "column 11: 'ops' needs a value");
    err_is("dir=", "column 5: 'dir' needs a value");
}
END_TEST

START_TEST(test_err_ops)
{
    err_is("ops=fc*,,conv*", "column 9: empty op glob");
    err_is("ops=a,", "column 7: empty op glob");
    err_is("ops=fc*, type:", "column 10: 'type:' needs an op type name, e.g. type:Conv2D");
    char text[4 + 33 * 2 + 1] = "ops=";
    for (int i = 0; i < 33; i++)
        strcat(text, i ? ",a" : "a");
    err_is(text, "column 69: too many op globs (at most 32)");
    char longer[4 + 128 + 1] = "ops=";
    memset(longer + 4, 'x', 128);
    longer[4 + 128] = '\0';
    err_is(longer, "column 5: op glob too long (at most 127 characters)");
}
END_TEST

/* '|' and braces are not glob characters: an error at the character, with
 * the comma list to write instead; steps= keeps '|' as its separator, and
 * an escaped '|' is a literal one. */
START_TEST(test_err_ops_alternatives)
{
    err_is("dir=d;ops=fc3*|loss*", "column 15: '|' in op glob 'fc3*|loss*': globs have no alternatives; "
                                   "list them with a comma: ops=fc3*,loss*");
    err_is("ops=conv1/*, fc3*|loss*|x", "column 18: '|' in op glob 'fc3*|loss*|x': globs have no "
                                         "alternatives; list them with a comma: ops=conv1/*, fc3*,loss*,x");
    err_is("ops={fc1,fc2}*", "column 5: '{' in op glob '{fc1': globs have no {a,b} braces; list the globs "
                             "with a comma: ops=fc1*,fc2*");
    dump_spec s;
    char err[256];
    ck_assert_msg(dump_spec_parse("ops=a\\|b;steps=0|30-40", &s, err, sizeof err), "%s", err);
    ck_assert_int_eq(s.n_steps, 2);
    ck_assert(dump_spec_op(&s, "a|b", "X"));
    ck_assert(!dump_spec_op(&s, "a", "X"));
}
END_TEST

/* Op types are known at once: an unknown type:T is refused at the token
 * with the closest types; a known one that no op has is the engine's to
 * warn about after the first step (te_names_expect). */
START_TEST(test_unknown_type)
{
    dump_spec s;
    char err[256];
    ck_assert(!dump_spec_parse("ops=fc3/linear,type:Lineer", &s, err, sizeof err));
    ck_assert_str_eq(err, "column 21: no op type 'Lineer'; the closest: Linear, Div, Scale");
    ck_assert(dump_spec_parse("ops=type:LinearGrad,type:AdamW,type:Conv2D", &s, err, sizeof err));
}
END_TEST

/* tdbg-diff's --ops: an entry names tensors by path or debugger name. */
START_TEST(test_spec_tensor)
{
    dump_spec s;
    char err[256];
    ck_assert(dump_spec_parse("ops=conv2/bn:in0,/fc1/linear/out*,param:w,type:Conv2D", &s, err, sizeof err));
    ck_assert(dump_spec_tensor(&s, "/conv2/bn/in0", 4));
    ck_assert(!dump_spec_tensor(&s, "/conv2/bn/in1", 4));
    ck_assert(dump_spec_tensor(&s, "/fc1/linear/out0", 0));
    ck_assert(dump_spec_tensor(&s, "/param/w/out0", -1));
    ck_assert(!dump_spec_tensor(&s, "/param/w/out0", 3)); /* an op named param/w, not the parameter */
    ck_assert(!dump_spec_tensor(&s, "/conv1/conv/out0", 0)); /* type: selects ops only */
}
END_TEST

START_TEST(test_err_steps)
{
    err_is("dir=x;steps=0|8-5", "column 15: bad step range '8-5' (the end is before the start)");
    err_is("steps=-5", "column 7: bad step range '-5' (steps are never negative)");
    err_is("steps=1|3--5", "column 9: bad step range '3--5' (steps are never negative)");
    err_is("steps=every:0", "column 7: bad step range 'every:0' (every:N needs a whole number N >= 1)");
    err_is("steps=every:", "column 7: bad step range 'every:' (every:N needs a whole number N >= 1)");
    err_is("steps=1-9:evry:2", "column 7: bad step range '1-9:evry:2' (use N, A-B or every:N)");
    err_is("steps=1|x", "column 9: bad step range 'x' (use N, A-B or every:N)");
    err_is("steps=5-", "column 7: bad step range '5-' (use N, A-B or every:N)");
    err_is("steps=1|*", "column 9: bad step range '*' (use N, A-B or every:N)");
    err_is("steps=1||2", "column 9: empty step range");
    err_is("steps=9223372036854775808", "column 7: bad step range '9223372036854775808' (number too large)");
    char text[6 + 33 * 2 + 1] = "steps=";
    for (int i = 0; i < 33; i++)
        strcat(text, i ? "|1" : "1");
    err_is(text, "column 71: too many step ranges (at most 32)");
}
END_TEST

START_TEST(test_err_words)
{
    err_is("io=outptus", "column 4: unknown io 'outptus' (did you mean outputs?)");
    err_is("io=all", "column 4: unknown io 'all' (use outputs, inputs or both)");
    err_is("phase=forward,,update", "column 15: empty phase");
    err_is("phase=forward, bakward", "column 16: unknown phase 'bakward' (did you mean backward?)");
    err_is("phase=fwd", "column 7: unknown phase 'fwd' (use forward, backward, update, params or grads)");
    err_is("what=stat", "column 6: unknown what 'stat' (did you mean stats?)");
    err_is("when=nan", "column 6: unknown when 'nan' (use always, break or nonfinite)");
    err_is("compress=gzip:0", "column 15: bad gzip level '0' (use 1..9)");
    err_is("compress=gzip:10", "column 15: bad gzip level '10' (use 1..9)");
    err_is("compress=gzip", "column 10: bad compress 'gzip' (use none or gzip:N with N in 1..9)");
    err_is("compress=zip:3", "column 10: bad compress 'zip:3' (use none or gzip:N with N in 1..9)");
}
END_TEST

START_TEST(test_err_keep)
{
    err_is("keep=3",
           "column 1: keep=3 needs when=nonfinite or when=break: with when=always every step is written anyway");
    err_is("dir=x; keep=4;when=always",
           "column 8: keep=4 needs when=nonfinite or when=break: with when=always every step is written anyway");
    err_is("when=break;keep=-1", "column 17: bad keep '-1' (a whole number of steps >= 1)");
    err_is("keep=x", "column 6: bad keep 'x' (a whole number of steps >= 1)");
    err_is("keep=2147483648", "column 6: bad keep '2147483648' (too large)");
}
END_TEST

START_TEST(test_err_max)
{
    err_is("dir=x;steps=1;io=both;max=2X", "column 27: bad size '2X' (use K, M or G)");
    err_is("max=5KBB", "column 5: bad size '5KBB' (use K, M or G)");
    err_is("max=5 K", "column 5: bad size '5 K' (use K, M or G)");
    err_is("max=0", "column 5: bad size '0' (must be > 0; max=none means no cap)");
    err_is("max=0G", "column 5: bad size '0G' (must be > 0; max=none means no cap)");
    err_is("max=17179869184G", "column 5: bad size '17179869184G' (too large)");
    err_is("max=18446744073709551616", "column 5: bad size '18446744073709551616' (too large)");
    err_is("max=-5", "column 5: bad size '-5' (a number of bytes with K, M or G, e.g. 500M)");
    err_is("max=lots", "column 5: bad size 'lots' (a number of bytes with K, M or G, e.g. 500M)");
}
END_TEST

START_TEST(test_err_dir)
{
    char text[4 + 4096 + 1] = "dir=";
    memset(text + 4, 'd', 4096);
    text[4 + 4096] = '\0';
    err_is(text, "column 5: dir too long (at most 4095 characters)");
    err_is("@", "column 1: '@' needs a file name");
    err_is("  @  ", "column 3: '@' needs a file name");
}
END_TEST

START_TEST(test_err_leaves_defaults)
{
    dump_spec s;
    char err[8] = "x";
    /* a good prefix is parsed before the error, and then undone */
    ck_assert(!dump_spec_parse("dir=zz;io=both;keep=1", &s, err, sizeof err));
    ck_assert_str_eq(err, "column "); /* cut to the buffer */
    formats_as(&s, DEFAULT_TEXT);
    ck_assert(!dump_spec_parse("io=x", &s, NULL, 0));
    ck_assert_str_eq(s.dir, "tdbg-dump");
}
END_TEST

/* ---- @FILE ---------------------------------------------------------------------------- */

static char tmpdir[] = "/tmp/tdbg-spec-XXXXXX";

static void tmp_setup(void) { ck_assert(mkdtemp(tmpdir) != NULL); }

static void tmp_teardown(void)
{
    DIR *d = opendir(tmpdir);
    if (!d)
        return;
    char path[PATH_MAX];
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(tmpdir);
}

/* Writes body to tmpdir/name; returns "@" and the path in at. */
static const char *spec_file(char *at, size_t n, const char *name, const char *body)
{
    snprintf(at, n, "@%s/%s", tmpdir, name);
    FILE *f = fopen(at + 1, "w");
    ck_assert_msg(f != NULL, "cannot write %s", at + 1);
    fputs(body, f);
    fclose(f);
    return at;
}

START_TEST(test_file_good)
{
    char at[PATH_MAX];
    spec_file(at, sizeof at, "good.spec",
              "# dump spec for the NaN hunt\n"
              "dir = dumps/nan   # where; not an item\n"
              "ops=fc*,type:Conv2D ; steps=0|5-8\r\n"
              "\n"
              "io=both\n"
              "when=nonfinite;keep=3;\n"
              "# max=1G\n"
              "compress=gzip:4");
    dump_spec s = ok(at);
    ck_assert_str_eq(s.dir, "dumps/nan");
    assert_i64(s.n_ops, 2);
    ck_assert_str_eq(s.ops[1], "type:Conv2D");
    assert_i64(s.n_steps, 2);
    assert_range(&s.steps[1], 5, 8, 1);
    assert_i64(s.io, DUMP_IO_BOTH);
    assert_i64(s.when, DUMP_WHEN_NONFINITE);
    assert_i64(s.keep, 3);
    assert_u64(s.max_bytes, 0);
    assert_i64(s.gzip, 4);

    char spaced[PATH_MAX + 4];
    snprintf(spaced, sizeof spaced, "  %s \n", at);
    assert_i64(ok(spaced).keep, 3);

    spec_file(at, sizeof at, "empty.spec", "# nothing but comments\n\n");
    formats_as((dump_spec[]){ ok(at) }, DEFAULT_TEXT);
}
END_TEST

START_TEST(test_file_errors)
{
    char at[PATH_MAX], want[PATH_MAX + 256];
    spec_file(at, sizeof at, "bad.spec", "# header\ndir=x\nsteps=1 # first\nio=bth\n");
    snprintf(want, sizeof want, "%s:4: unknown io 'bth' (did you mean both?)", at + 1);
    err_is(at, want);

    spec_file(at, sizeof at, "twice.spec", "steps=1\n# again:\n\n  steps=2\n");
    snprintf(want, sizeof want, "%s:4: 'steps' given twice (first at line 1)", at + 1);
    err_is(at, want);

    spec_file(at, sizeof at, "keep.spec", "dir=x\nkeep=2;io=both\n");
    snprintf(want, sizeof want,
             "%s:2: keep=2 needs when=nonfinite or when=break: with when=always every step is written anyway",
             at + 1);
    err_is(at, want);

    snprintf(at, sizeof at, "@%s/missing.spec", tmpdir);
    snprintf(want, sizeof want, "cannot read spec file '%s': No such file or directory", at + 1);
    err_is(at, want);

    snprintf(at, sizeof at, "@%s", tmpdir);
    snprintf(want, sizeof want, "cannot read spec file '%s': Is a directory", tmpdir);
    err_is(at, want);
}
END_TEST

/* ---- selection ---------------------------------------------------------------------- */

START_TEST(test_step_select)
{
    dump_spec s = ok("steps=3|5-8|every:10|100-120:every:7");
    static const struct { int64_t step; bool want; } cases[] = {
        { -1, false }, { 0, true },    { 1, false },   { 3, true },    { 4, false },
        { 5, true },   { 8, true },    { 9, false },   { 10, true },   { 11, false },
        { 99, false }, { 100, true },  { 107, true },  { 110, true },  { 114, true },
        { 115, false }, { 120, true }, { 121, false }, { 128, false }, { 1000, true },
        { INT64_MAX, false }, { INT64_MAX - 7, true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        ck_assert_msg(dump_spec_step(&s, cases[i].step) == cases[i].want, "step %lld: expected %d",
                      (long long)cases[i].step, cases[i].want);

    s = ok("steps=7");
    ck_assert(!dump_spec_step(&s, 6));
    ck_assert(dump_spec_step(&s, 7));
    ck_assert(!dump_spec_step(&s, 8));

    s = ok("");
    ck_assert(dump_spec_step(&s, 0));
    ck_assert(dump_spec_step(&s, 41372));
    ck_assert(dump_spec_step(&s, INT64_MAX));
}
END_TEST

START_TEST(test_op_select)
{
    dump_spec s = ok("ops=fc*,type:Conv2D,*/relu");
    static const struct { const char *name, *type; bool want; } cases[] = {
        { "fc1/matmul", "MatMul", true },
        { "fc", "Add", true },
        { "conv1/conv", "Conv2D", true },
        { "conv1/conv", "Conv2d", false },
        { "conv1/conv", "Conv2D3", false },
        { "block/relu", "ReLU", true },
        { "block/sub/relu", "ReLU", true }, /* '*' crosses '/' */
        { "block/relu6", "ReLU6", false },
        { "grad/fc1/matmul", "MatMul", false },
        { "Fc1", "Linear", false },
        { "type:Conv2D", "MatMul", false }, /* type: entries never match names */
        { NULL, "Conv2D", true },
        { "fc2", NULL, true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        ck_assert_msg(dump_spec_op(&s, cases[i].name, cases[i].type) == cases[i].want, "%s (%s): expected %d",
                      cases[i].name ? cases[i].name : "NULL", cases[i].type ? cases[i].type : "NULL",
                      cases[i].want);

    s = ok("ops=layer[12]/?");
    ck_assert(dump_spec_op(&s, "layer1/a", "X"));
    ck_assert(!dump_spec_op(&s, "layer3/a", "X"));
    ck_assert(!dump_spec_op(&s, "layer1/ab", "X"));

    s = ok("ops=*");
    ck_assert(dump_spec_op(&s, "anything/at/all", "Any"));
    ck_assert(dump_spec_op(&s, NULL, NULL));
}
END_TEST

/* ---- canonical text ------------------------------------------------------------------ */

START_TEST(test_format_defaults)
{
    formats_as((dump_spec[]){ ok("") }, DEFAULT_TEXT);
    formats_as((dump_spec[]){ ok(DEFAULT_TEXT) }, DEFAULT_TEXT);
}
END_TEST

START_TEST(test_format_full)
{
    dump_spec s = ok("compress=gzip:6;max=500MB;keep=4;when=break;what=stats;phase=params,forward;io=both;"
                     "steps=0|5-8|every:10|100-120;ops=fc*,type:Conv2D;dir=dumps/a");
    formats_as(&s, "dir=dumps/a;ops=fc*,type:Conv2D;steps=0|5-8|every:10|100-120;io=both;"
                   "phase=forward,params;what=stats;when=break;keep=4;max=500M;compress=gzip:6");
}
END_TEST

START_TEST(test_format_forms)
{
    static const struct { const char *text, *want; } cases[] = {
        { "steps=every:1", "steps=0-9223372036854775807;" },
        { "steps=4-4|5:every:3|100-200:every:10", "steps=4|5:every:3|100-200:every:10;" },
        { "steps=2, 3", "steps=2|3;" },
        { "max=1024", "max=1K;" },
        { "max=1536", "max=1536;" },
        { "max=2048k", "max=2M;" },
        { "max=1g", "max=1G;" },
        { "max=1", "max=1;" },
        { "phase=grads,params", "phase=params,grads;" },
        { "ops=type: Conv2D", "ops=type:Conv2D;" },
    };
    char buf[1024];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dump_spec s = ok(cases[i].text);
        dump_spec_format(&s, buf, sizeof buf);
        ck_assert_msg(strstr(buf, cases[i].want) != NULL, "%s: no '%s' in %s", cases[i].text, cases[i].want, buf);
    }
}
END_TEST

START_TEST(test_format_cut)
{
    dump_spec s = ok("");
    char buf[16];
    memset(buf, '#', sizeof buf);
    dump_spec_format(&s, buf, sizeof buf);
    ck_assert_str_eq(buf, "dir=tdbg-dump;o");
    dump_spec_format(&s, buf, 0); /* writes nothing */
    ck_assert_str_eq(buf, "dir=tdbg-dump;o");
}
END_TEST

START_TEST(test_round_trip)
{
    static const char *const texts[] = {
        "",
        "dir=dumps/a;ops=fc*,type:Conv2D;steps=0|5-8;io=both;what=full",
        "steps=0|5-8|every:10|100-120;phase=grads;max=123",
        "steps=every:1|7:every:2|9223372036854775807;io=inputs;max=18446744073709551615",
        "dir=/tmp/x y;ops=*,a?b,[ab]*;when=nonfinite;keep=9;max=3G;compress=gzip:9;what=stats",
        "phase=forward,backward,update,params,grads;when=break;keep=1;max=100k;compress=gzip:1",
    };
    char a[16384], b[16384];
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        dump_spec s = ok(texts[i]);
        dump_spec_format(&s, a, sizeof a);
        dump_spec back = ok(a);
        assert_same(&back, &s);
        dump_spec_format(&back, b, sizeof b);
        ck_assert_str_eq(a, b);
    }
}
END_TEST

Suite *suite_dump_spec(void)
{
    Suite *su = suite_create("dump_spec");

    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_issue_example);
    tcase_add_test(tc, test_whitespace);
    tcase_add_test(tc, test_ops_values);
    tcase_add_test(tc, test_steps_values);
    tcase_add_test(tc, test_word_values);
    tcase_add_test(tc, test_keep_values);
    tcase_add_test(tc, test_max_values);
    tcase_add_test(tc, test_dir_values);
    suite_add_tcase(su, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, test_err_keys);
    tcase_add_test(tc, test_err_ops);
    tcase_add_test(tc, test_err_steps);
    tcase_add_test(tc, test_err_words);
    tcase_add_test(tc, test_err_keep);
    tcase_add_test(tc, test_err_max);
    tcase_add_test(tc, test_err_dir);
    tcase_add_test(tc, test_err_leaves_defaults);
    suite_add_tcase(su, tc);

    tc = tcase_create("file");
    tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, test_file_good);
    tcase_add_test(tc, test_file_errors);
    suite_add_tcase(su, tc);

    tc = tcase_create("select");
    tcase_add_test(tc, test_step_select);
    tcase_add_test(tc, test_op_select);
    suite_add_tcase(su, tc);

    tc = tcase_create("format");
    tcase_add_test(tc, test_format_defaults);
    tcase_add_test(tc, test_format_full);
    tcase_add_test(tc, test_format_forms);
    tcase_add_test(tc, test_format_cut);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_err_ops_alternatives);
    tcase_add_test(tc, test_unknown_type);
    tcase_add_test(tc, test_spec_tensor);
    suite_add_tcase(su, tc);
    return su;
}
