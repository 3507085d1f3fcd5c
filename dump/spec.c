/*
 * spec.c — the dump spec: parsing `key=value` items (inline or from an
 * @FILE) into a dump_spec with errors that point at the token, the step and
 * op selection, and the canonical text.
 *
 * Canonical text (dump_spec_format) writes every key in dump.h's order:
 *   dir=tdbg-dump;ops=*;steps=*;io=outputs;phase=forward,backward,update;
 *   what=full;when=always;keep=0;max=none;compress=none
 * "ops=*" and "steps=*" select everything (n_ops/n_steps 0), "max=none" is no
 * cap, sizes are written in the largest unit that divides them (500M, 123).
 * Step ranges are "N", "A-B", "every:N" (lo 0, no end), joined by '|'; a
 * stepped range with a start or an end is "A-B:every:N", which the parser
 * also reads, so that every dump_range has a text.
 */
#include "dump.h"
#include "names.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIB 1024ull

/* A piece of the text being parsed; errors locate it by its pointer. */
typedef struct tok {
    const char *s;
    size_t len;
} tok;

/* Where the items come from, for error locations. */
typedef struct ctx {
    const char *text; /* the buffer every tok points into */
    const char *file; /* NULL: inline text, errors name columns; else errors name file:line */
    char *err;
    size_t errlen;
} ctx;

/* ---- errors ------------------------------------------------------------------ */

/* The 1-based column (inline text) or line (a file) of at. */
static size_t place(const ctx *c, const char *at)
{
    size_t off = (size_t)(at - c->text);
    if (!c->file)
        return off + 1;
    size_t line = 1;
    for (size_t i = 0; i < off; i++)
        line += c->text[i] == '\n';
    return line;
}

/* Writes "column N: MESSAGE" (or "FILE:LINE: MESSAGE") for the token at `at`;
 * returns false so that callers can `return fail_at(...)`. */
static bool fail_at(const ctx *c, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail_at(const ctx *c, const char *at, const char *fmt, ...)
{
    if (!c->err || c->errlen == 0)
        return false;
    int k = c->file ? snprintf(c->err, c->errlen, "%s:%zu: ", c->file, place(c, at))
                    : snprintf(c->err, c->errlen, "column %zu: ", place(c, at));
    if (k >= 0 && (size_t)k < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* ---- tokens ------------------------------------------------------------------- */

/* [s, e) without surrounding whitespace; an all-blank piece is empty at e. */
static tok trim(const char *s, const char *e)
{
    while (s < e && isspace((unsigned char)*s))
        s++;
    while (e > s && isspace((unsigned char)e[-1]))
        e--;
    return (tok){ s, (size_t)(e - s) };
}

static const char *tok_end(tok t) { return t.s + t.len; }

static bool tok_eq(tok t, const char *word) { return t.len == strlen(word) && memcmp(t.s, word, t.len) == 0; }

static bool tok_starts(tok t, const char *prefix)
{
    size_t n = strlen(prefix);
    return t.len >= n && memcmp(t.s, prefix, n) == 0;
}

/* Splits the next element off *rest at any byte of seps, trimmed; false when
 * *rest is used up. An empty element is empty at its separator. */
static bool next_elem(tok *rest, const char *seps, tok *elem)
{
    if (!rest->s)
        return false;
    const char *e = tok_end(*rest), *p = rest->s;
    while (p < e && !strchr(seps, *p))
        p++;
    *elem = trim(rest->s, p);
    *rest = p < e ? (tok){ p + 1, (size_t)(e - p - 1) } : (tok){ NULL, 0 };
    return true;
}

typedef enum { NUM_OK, NUM_BAD, NUM_BIG } num_res;

/* A whole token of decimal digits no larger than max (no sign, no blanks). */
static num_res parse_num(tok t, uint64_t max, uint64_t *out)
{
    if (t.len == 0)
        return NUM_BAD;
    uint64_t v = 0;
    for (size_t i = 0; i < t.len; i++) {
        if (!isdigit((unsigned char)t.s[i]))
            return NUM_BAD;
        unsigned d = (unsigned)(t.s[i] - '0');
        if (v > (max - d) / 10)
            return NUM_BIG;
        v = v * 10 + d;
    }
    *out = v;
    return NUM_OK;
}

/* "a, b or c" into buf. */
static const char *word_list(const char *const *words, int n, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && k < size; i++) {
        const char *sep = i == 0 ? "" : i == n - 1 ? " or " : ", ";
        int w = snprintf(buf + k, size - k, "%s%s", sep, words[i]);
        k += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

/* The index of t in words[n], or -1 after an error "unknown WHAT 't'" that
 * suggests the nearest word, or lists them all when none is near. */
static int choose(const ctx *c, tok t, const char *what, const char *const *words, int n)
{
    for (int i = 0; i < n; i++)
        if (tok_eq(t, words[i]))
            return i;
    char word[64]; /* the words are short: a longer token is near none */
    int best = 0, d = INT_MAX;
    snprintf(word, sizeof word, "%.*s", (int)t.len, t.s);
    if (t.len < sizeof word && dump_nearest(word, words, n, &best, 1) == 1)
        d = dump_edit_distance(word, words[best]);
    if (d <= 2 && (size_t)d < t.len)
        fail_at(c, t.s, "unknown %s '%.*s' (did you mean %s?)", what, (int)t.len, t.s, words[best]);
    else {
        char list[256];
        fail_at(c, t.s, "unknown %s '%.*s' (use %s)", what, (int)t.len, t.s, word_list(words, n, list, sizeof list));
    }
    return -1;
}

/* ---- values ---------------------------------------------------------------------- */

static const char *const io_names[] = { "outputs", "inputs", "both" }; /* dump_io - 1 */
static const char *const phase_names[] = { "forward", "backward", "update", "params", "grads" }; /* bit i */
static const char *const what_names[] = { "full", "stats" };
static const char *const when_names[] = { "always", "break", "nonfinite" }; /* dump_when */
#define N_WORDS(a) ((int)(sizeof a / sizeof *a))

static bool parse_dir(const ctx *c, dump_spec *s, tok v)
{
    if (v.len >= sizeof s->dir)
        return fail_at(c, v.s, "dir too long (at most %zu characters)", sizeof s->dir - 1);
    memcpy(s->dir, v.s, v.len);
    s->dir[v.len] = '\0';
    return true;
}

/* Globs are fnmatch's: '*', '?', [...] and backslash escapes. Alternatives
 * written as in a shell or a regex ("fc3*|loss*", "{fc1,fc2}*") would match
 * no op and dump nothing without a word, so they are errors at the
 * character; a list is comma-separated. (steps= keeps '|': it joins ranges.) */
static bool glob_chars_ok(const ctx *c, tok all, tok e)
{
    for (size_t i = 0; i < e.len; i++) {
        if (e.s[i] == '\\') {
            i++;
            continue;
        }
        if (e.s[i] == '|') {
            char list[TE_NAME_MAX * 2];
            snprintf(list, sizeof list, "%.*s", (int)all.len, all.s);
            for (char *p = list; (p = strchr(p, '|'));)
                *p++ = ',';
            return fail_at(c, e.s + i, "'|' in op glob '%.*s': globs have no alternatives; "
                           "list them with a comma: ops=%s", (int)e.len, e.s, list);
        }
        if (e.s[i] == '{' || e.s[i] == '}')
            return fail_at(c, e.s + i, "'%c' in op glob '%.*s': globs have no {a,b} braces; "
                           "list the globs with a comma: ops=fc1*,fc2*", e.s[i], (int)e.len, e.s);
    }
    return true;
}

static bool parse_ops(const ctx *c, dump_spec *s, tok v)
{
    s->n_ops = 0;
    if (tok_eq(v, "*"))
        return true;
    tok e, all = v;
    while (next_elem(&v, ",", &e)) {
        if (e.len == 0)
            return fail_at(c, e.s, "empty op glob");
        if (!glob_chars_ok(c, all, e))
            return false;
        if (s->n_ops == DUMP_MAX_GLOBS)
            return fail_at(c, e.s, "too many op globs (at most %d)", DUMP_MAX_GLOBS);
        const char *prefix = "";
        if (tok_starts(e, "type:")) { /* "type: Conv2D" is stored as "type:Conv2D" */
            prefix = "type:";
            tok name = trim(e.s + strlen(prefix), tok_end(e));
            if (name.len == 0)
                return fail_at(c, e.s, "'type:' needs an op type name, e.g. type:Conv2D");
            e = name;
        }
        if (strlen(prefix) + e.len >= TE_NAME_MAX)
            return fail_at(c, e.s, "op glob too long (at most %d characters)", TE_NAME_MAX - 1);
        char type[TE_NAME_MAX], why[512];
        snprintf(type, sizeof type, "%.*s", (int)e.len, e.s);
        if (*prefix && !te_op_type_check(type, why, sizeof why)) /* types are known at once */
            return fail_at(c, e.s, "%s", why);
        snprintf(s->ops[s->n_ops++], TE_NAME_MAX, "%s%.*s", prefix, (int)e.len, e.s);
    }
    return true;
}

/* One step range: N, A-B, every:N or A-B:every:N (t is not empty). */
static bool parse_range(const ctx *c, tok t, dump_range *r)
{
    tok span = t;
    *r = (dump_range){ 0, INT64_MAX, 1 };
    const char *colon = memchr(t.s, ':', t.len);
    if (colon) {
        tok head = trim(t.s, colon), tail = trim(colon + 1, tok_end(t)), n = tail;
        span = head;
        if (tok_eq(head, "every"))
            span.len = 0;
        else if (tok_starts(tail, "every:"))
            n = trim(tail.s + strlen("every:"), tok_end(tail));
        else
            return fail_at(c, t.s, "bad step range '%.*s' (use N, A-B or every:N)", (int)t.len, t.s);
        uint64_t every;
        if (parse_num(n, INT64_MAX, &every) != NUM_OK || every == 0)
            return fail_at(c, t.s, "bad step range '%.*s' (every:N needs a whole number N >= 1)", (int)t.len, t.s);
        r->every = (int64_t)every;
        if (span.len == 0)
            return true;
    }
    const char *dash = memchr(span.s, '-', span.len);
    tok lo = trim(span.s, dash ? dash : tok_end(span));
    tok hi = dash ? trim(dash + 1, tok_end(span)) : lo;
    if (lo.len == 0 && dash == span.s) /* "-5": a lone leading dash */
        return fail_at(c, t.s, "bad step range '%.*s' (steps are never negative)", (int)t.len, t.s);
    if (hi.len > 0 && hi.s[0] == '-')
        return fail_at(c, t.s, "bad step range '%.*s' (steps are never negative)", (int)t.len, t.s);
    uint64_t a, b;
    num_res ra = parse_num(lo, INT64_MAX, &a), rb = parse_num(hi, INT64_MAX, &b);
    if (ra == NUM_BAD || rb == NUM_BAD)
        return fail_at(c, t.s, "bad step range '%.*s' (use N, A-B or every:N)", (int)t.len, t.s);
    if (ra == NUM_BIG || rb == NUM_BIG)
        return fail_at(c, t.s, "bad step range '%.*s' (number too large)", (int)t.len, t.s);
    if (b < a)
        return fail_at(c, t.s, "bad step range '%.*s' (the end is before the start)", (int)t.len, t.s);
    r->lo = (int64_t)a;
    r->hi = (int64_t)b;
    return true;
}

static bool parse_steps(const ctx *c, dump_spec *s, tok v)
{
    s->n_steps = 0;
    if (tok_eq(v, "*"))
        return true;
    tok e;
    while (next_elem(&v, "|,", &e)) {
        if (e.len == 0)
            return fail_at(c, e.s, "empty step range");
        if (s->n_steps == DUMP_MAX_RANGES)
            return fail_at(c, e.s, "too many step ranges (at most %d)", DUMP_MAX_RANGES);
        if (!parse_range(c, e, &s->steps[s->n_steps++]))
            return false;
    }
    return true;
}

static bool parse_io(const ctx *c, dump_spec *s, tok v)
{
    int i = choose(c, v, "io", io_names, N_WORDS(io_names));
    s->io = (dump_io)(i + 1);
    return i >= 0;
}

static bool parse_phase(const ctx *c, dump_spec *s, tok v)
{
    s->phases = 0;
    tok e;
    while (next_elem(&v, ",", &e)) {
        if (e.len == 0)
            return fail_at(c, e.s, "empty phase");
        int i = choose(c, e, "phase", phase_names, N_WORDS(phase_names));
        if (i < 0)
            return false;
        s->phases |= 1u << i;
    }
    return true;
}

static bool parse_what(const ctx *c, dump_spec *s, tok v)
{
    int i = choose(c, v, "what", what_names, N_WORDS(what_names));
    s->stats_only = i == 1;
    return i >= 0;
}

static bool parse_when(const ctx *c, dump_spec *s, tok v)
{
    int i = choose(c, v, "when", when_names, N_WORDS(when_names));
    s->when = (dump_when)i;
    return i >= 0;
}

/* keep=0 is "off" (what the canonical text writes); the check against when
 * waits for the end, since when may come later. */
static bool parse_keep(const ctx *c, dump_spec *s, tok v)
{
    uint64_t k;
    switch (parse_num(v, INT_MAX, &k)) {
    case NUM_OK: s->keep = (int)k; return true;
    case NUM_BIG: return fail_at(c, v.s, "bad keep '%.*s' (too large)", (int)v.len, v.s);
    default: return fail_at(c, v.s, "bad keep '%.*s' (a whole number of steps >= 1)", (int)v.len, v.s);
    }
}

/* max=none or a byte count with an optional K, M or G (powers of 1024, any
 * case) and an optional B: 123, 100k, 500MB, 2G. */
static bool parse_max(const ctx *c, dump_spec *s, tok v)
{
    if (tok_eq(v, "none")) {
        s->max_bytes = 0;
        return true;
    }
    size_t nd = 0;
    while (nd < v.len && isdigit((unsigned char)v.s[nd]))
        nd++;
    if (nd == 0)
        return fail_at(c, v.s, "bad size '%.*s' (a number of bytes with K, M or G, e.g. 500M)", (int)v.len, v.s);
    tok unit = { v.s + nd, v.len - nd };
    uint64_t scale = 1;
    if (unit.len > 0) {
        const char *p = strchr("kmg", tolower((unsigned char)unit.s[0]));
        if (p && *p) {
            scale = p[0] == 'k' ? KIB : p[0] == 'm' ? KIB * KIB : KIB * KIB * KIB;
            unit.s++, unit.len--;
        }
    }
    if (unit.len > 1 || (unit.len == 1 && tolower((unsigned char)unit.s[0]) != 'b'))
        return fail_at(c, v.s, "bad size '%.*s' (use K, M or G)", (int)v.len, v.s);
    uint64_t n;
    if (parse_num((tok){ v.s, nd }, UINT64_MAX / scale, &n) != NUM_OK)
        return fail_at(c, v.s, "bad size '%.*s' (too large)", (int)v.len, v.s);
    if (n == 0)
        return fail_at(c, v.s, "bad size '%.*s' (must be > 0; max=none means no cap)", (int)v.len, v.s);
    s->max_bytes = n * scale;
    return true;
}

static bool parse_compress(const ctx *c, dump_spec *s, tok v)
{
    if (tok_eq(v, "none")) {
        s->gzip = 0;
        return true;
    }
    if (!tok_starts(v, "gzip:"))
        return fail_at(c, v.s, "bad compress '%.*s' (use none or gzip:N with N in 1..9)", (int)v.len, v.s);
    tok n = trim(v.s + strlen("gzip:"), tok_end(v));
    uint64_t level;
    if (parse_num(n, 9, &level) != NUM_OK || level == 0)
        return fail_at(c, n.len ? n.s : v.s, "bad gzip level '%.*s' (use 1..9)", (int)n.len, n.s);
    s->gzip = (int)level;
    return true;
}

/* ---- items ------------------------------------------------------------------------ */

typedef bool (*value_fn)(const ctx *, dump_spec *, tok);

/* Keys in dump.h's order, which is also the canonical order. */
enum { K_DIR, K_OPS, K_STEPS, K_IO, K_PHASE, K_WHAT, K_WHEN, K_KEEP, K_MAX, K_COMPRESS, K_COUNT };
static const char *const key_names[] = {
    "dir", "ops", "steps", "io", "phase", "what", "when", "keep", "max", "compress",
};
static const value_fn key_parsers[] = {
    parse_dir, parse_ops, parse_steps, parse_io, parse_phase,
    parse_what, parse_when, parse_keep, parse_max, parse_compress,
};
_Static_assert(N_WORDS(key_names) == K_COUNT, "a name for every key");
_Static_assert(N_WORDS(key_parsers) == K_COUNT, "a parser for every key");

static void spec_defaults(dump_spec *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "tdbg-dump");
    s->io = DUMP_IO_OUTPUTS;
    s->phases = DUMP_PHASE_FORWARD | DUMP_PHASE_BACKWARD | DUMP_PHASE_UPDATE;
    s->when = DUMP_WHEN_ALWAYS;
}

/* Parses the items of c->text, split at any byte of seps, over s. */
static bool parse_items(const ctx *c, const char *seps, dump_spec *s)
{
    const char *seen[K_COUNT] = { 0 }; /* where each key was given */
    tok rest = { c->text, strlen(c->text) }, item;
    while (next_elem(&rest, seps, &item)) {
        if (item.len == 0)
            continue;
        const char *eq = memchr(item.s, '=', item.len);
        if (!eq)
            return fail_at(c, item.s, "'%.*s' is not key=value", (int)item.len, item.s);
        tok key = trim(item.s, eq), val = trim(eq + 1, tok_end(item));
        if (key.len == 0)
            return fail_at(c, item.s, "'%.*s' has no key before '='", (int)item.len, item.s);
        int k = choose(c, key, "key", key_names, N_WORDS(key_names));
        if (k < 0)
            return false;
        if (seen[k])
            return fail_at(c, key.s, "'%s' given twice (first at %s %zu)", key_names[k],
                           c->file ? "line" : "column", place(c, seen[k]));
        seen[k] = key.s;
        if (val.len == 0)
            return fail_at(c, val.s, "'%s' needs a value", key_names[k]);
        if (!key_parsers[k](c, s, val))
            return false;
    }
    if (s->keep > 0 && s->when == DUMP_WHEN_ALWAYS)
        return fail_at(c, seen[K_KEEP],
                       "keep=%d needs when=nonfinite or when=break: with when=always every step is written anyway",
                       s->keep);
    return true;
}

/* The whole of a file, NUL-terminated, with '#' comments blanked (offsets,
 * and so line numbers, stay); NULL with errno set on failure. */
static char *read_spec_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - 1 - len, f);
        if (len < cap - 1)
            break;
        char *grown = realloc(buf, cap *= 2);
        if (!grown)
            free(buf);
        buf = grown;
    }
    bool bad = !buf || ferror(f);
    int saved = buf ? errno : ENOMEM; /* fread's errno on a read error */
    fclose(f);
    if (bad) {
        free(buf);
        errno = saved;
        return NULL;
    }
    buf[len] = '\0';
    for (char *p = buf; (p = strchr(p, '#'));)
        while (*p && *p != '\n')
            *p++ = ' ';
    return buf;
}

bool dump_spec_parse(const char *text, dump_spec *s, char *err, size_t errlen)
{
    spec_defaults(s);
    if (err && errlen)
        err[0] = '\0';
    if (!text)
        return true;
    ctx c = { .text = text, .err = err, .errlen = errlen };
    tok all = trim(text, text + strlen(text));
    bool ok;
    if (all.len > 0 && all.s[0] == '@') {
        tok path = trim(all.s + 1, tok_end(all));
        char name[4096];
        if (path.len == 0)
            return fail_at(&c, all.s, "'@' needs a file name");
        if (path.len >= sizeof name)
            return fail_at(&c, path.s, "spec file name too long");
        memcpy(name, path.s, path.len);
        name[path.len] = '\0';
        char *body = read_spec_file(name);
        if (!body) {
            if (err && errlen)
                snprintf(err, errlen, "cannot read spec file '%s': %s", name, strerror(errno));
            return false;
        }
        c = (ctx){ .text = body, .file = name, .err = err, .errlen = errlen };
        ok = parse_items(&c, ";\n", s);
        free(body);
    } else {
        ok = parse_items(&c, ";", s);
    }
    if (!ok)
        spec_defaults(s);
    return ok;
}

/* ---- selection ----------------------------------------------------------------------- */

bool dump_spec_step(const dump_spec *s, int64_t step)
{
    if (s->n_steps == 0)
        return true;
    for (int i = 0; i < s->n_steps; i++) {
        const dump_range *r = &s->steps[i];
        uint64_t every = r->every > 1 ? (uint64_t)r->every : 1;
        if (step >= r->lo && step <= r->hi && ((uint64_t)step - (uint64_t)r->lo) % every == 0)
            return true;
    }
    return false;
}

bool dump_spec_op(const dump_spec *s, const char *name, const char *type)
{
    if (s->n_ops == 0)
        return true;
    for (int i = 0; i < s->n_ops; i++) {
        const char *g = s->ops[i];
        if (strncmp(g, "type:", 5) == 0) {
            if (type && strcmp(g + 5, type) == 0)
                return true;
        } else if (name && fnmatch(g, name, 0) == 0) {
            return true;
        }
    }
    return false;
}

bool dump_spec_tensor(const dump_spec *s, const char *path, int exec_index)
{
    for (int i = 0; i < s->n_ops; i++)
        if (strncmp(s->ops[i], "type:", 5) != 0 && dump_name_match(s->ops[i], true, path, exec_index, NULL))
            return true;
    return false;
}

/* ---- canonical text -------------------------------------------------------------------- */

typedef struct out {
    char *buf;
    size_t n, len; /* len may pass n: the text was cut */
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(o->len < o->n ? o->buf + o->len : NULL, o->len < o->n ? o->n - o->len : 0, fmt, ap);
    va_end(ap);
    o->len += w > 0 ? (size_t)w : 0;
}

static void put_range(out *o, const dump_range *r)
{
    if (r->every > 1 && r->lo == 0 && r->hi == INT64_MAX) {
        put(o, "every:%" PRId64, r->every);
        return;
    }
    if (r->lo == r->hi)
        put(o, "%" PRId64, r->lo);
    else
        put(o, "%" PRId64 "-%" PRId64, r->lo, r->hi);
    if (r->every > 1)
        put(o, ":every:%" PRId64, r->every);
}

/* The largest of G, M, K that divides the size, so that it reads back exactly. */
static void put_size(out *o, uint64_t bytes)
{
    static const struct { uint64_t scale; char unit; } units[] = {
        { KIB * KIB * KIB, 'G' }, { KIB * KIB, 'M' }, { KIB, 'K' },
    };
    for (int i = 0; i < N_WORDS(units); i++)
        if (bytes % units[i].scale == 0) {
            put(o, "%" PRIu64 "%c", bytes / units[i].scale, units[i].unit);
            return;
        }
    put(o, "%" PRIu64, bytes);
}

void dump_spec_format(const dump_spec *s, char *buf, size_t n)
{
    out o = { buf, n, 0 };
    if (n > 0)
        buf[0] = '\0';
    put(&o, "dir=%s;ops=", s->dir);
    if (s->n_ops == 0)
        put(&o, "*");
    for (int i = 0; i < s->n_ops; i++)
        put(&o, "%s%s", i ? "," : "", s->ops[i]);
    put(&o, ";steps=");
    if (s->n_steps == 0)
        put(&o, "*");
    for (int i = 0; i < s->n_steps; i++) {
        put(&o, "%s", i ? "|" : "");
        put_range(&o, &s->steps[i]);
    }
    int io = (int)s->io - 1;
    put(&o, ";io=%s;phase=", io >= 0 && io < N_WORDS(io_names) ? io_names[io] : "?");
    for (int i = 0, first = 1; i < N_WORDS(phase_names); i++)
        if (s->phases & (1u << i)) {
            put(&o, "%s%s", first ? "" : ",", phase_names[i]);
            first = 0;
        }
    int when = (int)s->when;
    put(&o, ";what=%s;when=%s;keep=%d;max=", what_names[s->stats_only],
        when >= 0 && when < N_WORDS(when_names) ? when_names[when] : "?", s->keep);
    if (s->max_bytes == 0)
        put(&o, "none");
    else
        put_size(&o, s->max_bytes);
    if (s->gzip == 0)
        put(&o, ";compress=none");
    else
        put(&o, ";compress=gzip:%d", s->gzip);
}
