/*
 * cond.c — breakpoint conditions: a recursive-descent parser into a small
 * tree (grammar in dbg.h), the tree's canonical text, its evaluation
 * against an op record with statistics computed once per tensor, and the
 * answers to what a condition asks (its predicates: scope, statistic,
 * comparison, threshold), so that no front end parses condition text.
 */
#include "dbg.h"
#include "names.h"

#include <fnmatch.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64  /* nested '(' and 'not': the parser recurses on them */
#define CACHE_SLOTS 16 /* tensors whose statistics one evaluation keeps */

static const char *const func_names[] = {
    "has_nan", "has_inf", "max", "min", "mean", "std", "abs_max", "abs_mean",
    "l2norm", "zero_frac", "fp16_overflow", "rel_change", "overflow", "underflow", "scale",
};
_Static_assert(sizeof func_names / sizeof *func_names == DBG_FN_COUNT, "a name for every function");

/* Counts hold without a comparison ("count > 0"); the rest need one. */
static bool func_is_count(dbg_func f)
{
    return f == DBG_FN_HAS_NAN || f == DBG_FN_HAS_INF || f == DBG_FN_FP16_OVERFLOW || f == DBG_FN_OVERFLOW ||
           f == DBG_FN_UNDERFLOW;
}
/* Functions of the op's rounding (te_op_record.round), not of tensor values. */
static bool func_is_rounding(dbg_func f) { return f == DBG_FN_OVERFLOW || f == DBG_FN_UNDERFLOW; }
/* Functions te_stats_quick serves. */
static bool func_is_quick(dbg_func f)
{
    return f == DBG_FN_HAS_NAN || f == DBG_FN_HAS_INF || f == DBG_FN_ABS_MAX || f == DBG_FN_L2NORM;
}

static const char *const cmp_names[] = { "", ">", ">=", "<", "<=", "==", "!=" };
_Static_assert(sizeof cmp_names / sizeof *cmp_names == DBG_CMP_NE + 1, "a name for every comparison");

static const struct {
    const char *name;
    dbg_scope_kind kind;
    int slot; /* -1: every tensor of the kind */
} scopes[] = {
    { "inputs", DBG_SCOPE_INPUTS, -1 }, { "outputs", DBG_SCOPE_OUTPUTS, -1 },
    { "params", DBG_SCOPE_PARAMS, -1 }, { "grads", DBG_SCOPE_GRADS, -1 },
    { "in0", DBG_SCOPE_INPUTS, 0 },     { "in1", DBG_SCOPE_INPUTS, 1 },
    { "in2", DBG_SCOPE_INPUTS, 2 },     { "in3", DBG_SCOPE_INPUTS, 3 },
    { "in4", DBG_SCOPE_INPUTS, 4 },     { "out0", DBG_SCOPE_OUTPUTS, 0 },
    { "out1", DBG_SCOPE_OUTPUTS, 1 },   { "out2", DBG_SCOPE_OUTPUTS, 2 },
    { "out3", DBG_SCOPE_OUTPUTS, 3 },   { "out4", DBG_SCOPE_OUTPUTS, 4 },
};
#define N_SCOPES ((int)(sizeof scopes / sizeof *scopes))
#define SCOPE_DEFAULT 1 /* outputs */

typedef enum { N_OR, N_AND, N_NOT, N_PHASE, N_PRED, N_OP, N_TYPE } node_kind;

typedef struct node {
    node_kind kind;
    struct node *l, *r; /* or, and: both; not: l */
    int scope;          /* pred: index into scopes[] */
    dbg_func fn;            /* pred */
    dbg_cmp op;             /* pred (DBG_CMP_NONE: a count without comparison); phase: DBG_CMP_EQ or DBG_CMP_NE */
    double num;         /* pred */
    te_phase phase;     /* phase */
    char *name;         /* op: the glob; type: the op type (op: DBG_CMP_EQ or DBG_CMP_NE, as phase) */
} node;

struct dbg_cond {
    node *root;
    char *text;
    bool rel_change;
};

/* ---- lexer ------------------------------------------------------------------ */

typedef enum { T_END, T_IDENT, T_NUM, T_CMP, T_LPAREN, T_RPAREN, T_DOT, T_BAD } tok_kind;

typedef struct tok {
    tok_kind kind;
    const char *s;
    int len, col;
    dbg_cmp op;     /* T_CMP */
    double num; /* T_NUM */
} tok;

typedef struct parser {
    const char *text, *p;
    tok t;        /* the current token */
    int depth;
    bool rel_change;
    bool failed;
    char *err;
    size_t errlen;
} parser;

static bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static void next(parser *ps)
{
    const char *p = ps->p;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    tok t = { .kind = T_BAD, .s = p, .len = 1, .col = (int)(p - ps->text) + 1 };
    if (!*p) {
        t.kind = T_END;
        t.len = 0;
    } else if (is_ident_start(*p)) {
        while (is_ident_char(p[t.len]))
            t.len++;
        t.kind = T_IDENT;
    } else if (is_digit(*p) || (*p == '.' && is_digit(p[1])) ||
               ((*p == '-' || *p == '+') && (is_digit(p[1]) || p[1] == '.' || is_ident_start(p[1])))) {
        char *end;
        t.num = strtod(p, &end);
        if (end > p) {
            t.kind = T_NUM;
            t.len = (int)(end - p);
            /* "1e3x" or "1.2.3" is one malformed token, not a number and more */
            while (is_ident_char(p[t.len]) || p[t.len] == '.') {
                t.kind = T_BAD;
                t.len++;
            }
        }
    } else if (*p == '(' || *p == ')' || *p == '.') {
        t.kind = *p == '(' ? T_LPAREN : *p == ')' ? T_RPAREN : T_DOT;
    } else if (*p == '>' || *p == '<' || ((*p == '=' || *p == '!') && p[1] == '=')) {
        bool eq = p[1] == '=';
        t.kind = T_CMP;
        t.len = eq ? 2 : 1;
        t.op = *p == '>' ? (eq ? DBG_CMP_GE : DBG_CMP_GT) : *p == '<' ? (eq ? DBG_CMP_LE : DBG_CMP_LT) : *p == '=' ? DBG_CMP_EQ : DBG_CMP_NE;
    }
    ps->t = t;
    ps->p = p + t.len;
}

static bool is_word(const tok *t, const char *w)
{
    return t->kind == T_IDENT && (size_t)t->len == strlen(w) && !strncmp(t->s, w, (size_t)t->len);
}

/* ---- errors ----------------------------------------------------------------- */

/* "column C: ..." about token t; only the first error of a parse is kept. */
static void fail(parser *ps, const tok *t, const char *fmt, ...)
{
    if (ps->failed)
        return;
    ps->failed = true;
    int used = snprintf(ps->err, ps->errlen, "column %d: ", t->col);
    if (used < 0 || (size_t)used >= ps->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + used, ps->errlen - (size_t)used, fmt, ap);
    va_end(ap);
}

/* How a message quotes a token: 'foo', or "end of condition". */
static const char *tok_desc(const tok *t, char *buf, size_t n)
{
    if (t->kind == T_END)
        snprintf(buf, n, "end of condition");
    else
        snprintf(buf, n, "'%.*s'", t->len > 40 ? 40 : t->len, t->s);
    return buf;
}

/* The candidate nearest to the token's text if within edit distance 2
 * (the first of equals), else NULL. */
static const char *nearest(const tok *t, const char *const *cands, int n)
{
    char word[48];
    if (t->len >= (int)sizeof word)
        return NULL;
    memcpy(word, t->s, (size_t)t->len);
    word[t->len] = '\0';
    return dump_suggest(word, cands, n, 2);
}

/* ---- parser ----------------------------------------------------------------- */

static void node_free(node *n)
{
    if (!n)
        return;
    node_free(n->l);
    node_free(n->r);
    free(n->name);
    free(n);
}

static node *node_new(parser *ps, node_kind kind, node *l, node *r)
{
    node *n = calloc(1, sizeof *n);
    if (!n) {
        fail(ps, &ps->t, "out of memory");
        node_free(l);
        node_free(r);
        return NULL;
    }
    n->kind = kind;
    n->l = l;
    n->r = r;
    return n;
}

static node *parse_or(parser *ps);

/* 'phase' ('=='|'!=') PHASE, the current token being 'phase'. */
static node *parse_phase(parser *ps)
{
    char d[64];
    next(ps);
    dbg_cmp op = ps->t.kind == T_CMP ? ps->t.op : DBG_CMP_NONE;
    if (op != DBG_CMP_EQ && op != DBG_CMP_NE) {
        fail(ps, &ps->t, "expected '==' or '!=' after 'phase', got %s", tok_desc(&ps->t, d, sizeof d));
        return NULL;
    }
    next(ps);
    const char *names[TE_PHASE_COUNT];
    for (int p = 0; p < TE_PHASE_COUNT; p++) {
        names[p] = te_phase_name((te_phase)p);
        if (is_word(&ps->t, names[p])) {
            next(ps);
            node *n = node_new(ps, N_PHASE, NULL, NULL);
            if (n) {
                n->op = op;
                n->phase = (te_phase)p;
            }
            return n;
        }
    }
    if (ps->t.kind != T_IDENT) {
        fail(ps, &ps->t, "expected a phase (forward, backward or update) after '%s', got %s",
             cmp_names[op], tok_desc(&ps->t, d, sizeof d));
        return NULL;
    }
    const char *near = nearest(&ps->t, names, TE_PHASE_COUNT);
    if (near)
        fail(ps, &ps->t, "unknown phase %s (did you mean %s?)", tok_desc(&ps->t, d, sizeof d), near);
    else
        fail(ps, &ps->t, "unknown phase %s (phases: forward, backward, update)",
             tok_desc(&ps->t, d, sizeof d));
    return NULL;
}

/* ('op'|'type') ('='|'=='|'!=') NAME, the current token being the word.
 * NAME runs to the next blank or ')', or is quoted ("a b/x*" or 'a b/x*')
 * when it holds those or a quote; a type is checked against the op table
 * at once. */
static node *parse_name_test(parser *ps, bool is_type)
{
    const char *kw = is_type ? "type" : "op";
    const char *p = ps->p;
    while (*p == ' ' || *p == '\t')
        p++;
    tok at = { .kind = T_BAD, .s = p, .len = 1, .col = (int)(p - ps->text) + 1 };
    dbg_cmp op = p[0] == '!' && p[1] == '=' ? DBG_CMP_NE : p[0] == '=' ? DBG_CMP_EQ : DBG_CMP_NONE;
    if (op == DBG_CMP_NONE) {
        char d[64];
        next(ps);
        fail(ps, &ps->t, "expected '=' or '!=' after '%s', got %s (e.g. %s)", kw, tok_desc(&ps->t, d, sizeof d),
             is_type ? "type=Softmax" : "op=*/mask");
        return NULL;
    }
    p += op == DBG_CMP_NE || p[1] == '=' ? 2 : 1;
    while (*p == ' ' || *p == '\t')
        p++;
    at.s = p;
    at.col = (int)(p - ps->text) + 1;
    const char *start = p, *end;
    if (*p == '"' || *p == '\'') {
        end = strchr(p + 1, *p);
        if (!end) {
            fail(ps, &at, "unterminated %c after '%s='", *p, kw);
            return NULL;
        }
        start = p + 1;
        ps->p = end + 1;
    } else {
        end = p + strcspn(p, " \t\r\n()");
        ps->p = end;
        const char *q = start + strcspn(start, "\"'");
        if (q < end) { /* a name holds one kind of quote at most, so that it prints back */
            fail(ps, &(tok){ .col = (int)(q - ps->text) + 1 }, "a quote inside a name: quote the whole name "
                 "(%s=\"...\" or %s='...')", kw, kw);
            return NULL;
        }
    }
    if (end == start) {
        fail(ps, &at, "expected %s after '%s%s', got %s", is_type ? "an op type" : "an op name glob", kw,
             cmp_names[op] + (op == DBG_CMP_EQ), *p ? "nothing" : "end of condition");
        return NULL;
    }
    char *name = strndup(start, (size_t)(end - start));
    node *n = name ? node_new(ps, is_type ? N_TYPE : N_OP, NULL, NULL) : NULL;
    if (!n) {
        free(name);
        fail(ps, &at, "out of memory");
        return NULL;
    }
    n->name = name;
    n->op = op;
    char why[512];
    if (is_type && !te_op_type_check(name, why, sizeof why)) { /* the op table is known at once */
        fail(ps, &at, "%s", why);
        node_free(n);
        return NULL;
    }
    next(ps);
    return n;
}

static int find_scope(const tok *t)
{
    for (int i = 0; i < N_SCOPES; i++)
        if (is_word(t, scopes[i].name))
            return i;
    return -1;
}

/* in7, out12: a slot past the last rather than a typo */
static bool is_slot_word(const tok *t)
{
    int k = t->len > 2 && !strncmp(t->s, "in", 2) ? 2 : t->len > 3 && !strncmp(t->s, "out", 3) ? 3 : 0;
    if (!k)
        return false;
    while (k < t->len && is_digit(t->s[k]))
        k++;
    return k == t->len;
}

static void fail_scope(parser *ps, const tok *t)
{
    char d[64];
    const char *names[N_SCOPES];
    for (int i = 0; i < N_SCOPES; i++)
        names[i] = scopes[i].name;
    const char *near = nearest(t, names, N_SCOPES);
    if (is_slot_word(t))
        fail(ps, t, "unknown scope %s (slots go from in0/out0 to in4/out4)", tok_desc(t, d, sizeof d));
    else if (near)
        fail(ps, t, "unknown scope %s (did you mean %s?)", tok_desc(t, d, sizeof d), near);
    else
        fail(ps, t, "unknown scope %s (scopes: inputs, outputs, params, grads, in0..in4, out0..out4)",
             tok_desc(t, d, sizeof d));
}

static void fail_func(parser *ps, const tok *t, bool scoped)
{
    char d[64];
    /* unscoped, the word may also be a misspelt keyword */
    const char *names[DBG_FN_COUNT + 4];
    int n = 0;
    for (; n < DBG_FN_COUNT; n++)
        names[n] = func_names[n];
    const char *names2[] = { "phase", "not", "op", "type" };
    for (int i = 0; !scoped && i < 4; i++)
        names[n++] = names2[i];
    const char *near = nearest(t, names, n);
    if (near)
        fail(ps, t, "unknown function %s (did you mean %s?)", tok_desc(t, d, sizeof d), near);
    else
        fail(ps, t,
             "unknown function %s (functions: has_nan, has_inf, max, min, mean, std, abs_max, "
             "abs_mean, l2norm, zero_frac, fp16_overflow, rel_change, overflow, underflow, scale)",
             tok_desc(t, d, sizeof d));
}

/* A number after a comparison: a numeric token, or a word strtod reads
 * whole (inf, nan). */
static bool take_number(parser *ps, dbg_cmp op, double *out)
{
    char d[64], word[16];
    const tok *t = &ps->t;
    if (t->kind == T_NUM) {
        *out = t->num;
        next(ps);
        return true;
    }
    if (t->kind == T_IDENT && t->len < (int)sizeof word) {
        char *end;
        memcpy(word, t->s, (size_t)t->len);
        word[t->len] = '\0';
        *out = strtod(word, &end);
        if (*end == '\0') {
            next(ps);
            return true;
        }
    }
    fail(ps, t, "expected a number after '%s', got %s", cmp_names[op], tok_desc(t, d, sizeof d));
    return false;
}

/* [SCOPE '.'] FUNC [CMP NUMBER], the current token being a word. */
static node *parse_pred(parser *ps)
{
    char d[64];
    tok name = ps->t;
    int scope = find_scope(&name);
    next(ps);
    bool scoped = ps->t.kind == T_DOT;
    if (scoped) {
        if (scope < 0) {
            fail_scope(ps, &name);
            return NULL;
        }
        next(ps);
        if (ps->t.kind != T_IDENT) {
            fail(ps, &ps->t, "expected a function after '%s.', got %s", scopes[scope].name,
                 tok_desc(&ps->t, d, sizeof d));
            return NULL;
        }
        name = ps->t;
        next(ps);
    } else if (scope >= 0) {
        fail(ps, &ps->t, "expected '.' and a function after scope '%s', got %s", scopes[scope].name,
             tok_desc(&ps->t, d, sizeof d));
        return NULL;
    } else {
        scope = SCOPE_DEFAULT;
    }
    int fn = 0;
    while (fn < DBG_FN_COUNT && !is_word(&name, func_names[fn]))
        fn++;
    if (fn == DBG_FN_COUNT) {
        fail_func(ps, &name, scoped);
        return NULL;
    }
    if (func_is_rounding((dbg_func)fn) && scoped && scopes[scope].kind != DBG_SCOPE_OUTPUTS) {
        fail(ps, &name, "%s is what rounding the op's outputs did: its scopes are outputs and out0..out4, not %s",
             func_names[fn], scopes[scope].name);
        return NULL;
    }
    if (fn == DBG_FN_SCALE && scoped) {
        fail(ps, &name, "scale is the loss scaler's, not a tensor's: it takes no scope");
        return NULL;
    }
    node *n = node_new(ps, N_PRED, NULL, NULL);
    if (!n)
        return NULL;
    n->scope = scope;
    n->fn = (dbg_func)fn;
    if (ps->t.kind == T_CMP && (n->fn == DBG_FN_HAS_NAN || n->fn == DBG_FN_HAS_INF)) {
        /* a yes/no question: a count compared would never be what was meant */
        fail(ps, &ps->t, "%s stands alone: it holds when a tensor has %s ('not %s' when none has), "
             "so it takes no '%s'", func_names[fn], n->fn == DBG_FN_HAS_NAN ? "a NaN" : "an Inf",
             func_names[fn], cmp_names[ps->t.op]);
    } else if (ps->t.kind == T_CMP) {
        n->op = ps->t.op;
        next(ps);
        if (!take_number(ps, n->op, &n->num)) {
            node_free(n);
            return NULL;
        }
    } else if (ps->t.kind == T_BAD && (*ps->t.s == '=' || *ps->t.s == '!')) {
        fail(ps, &ps->t, "unknown operator %s (comparisons: > >= < <= == !=)",
             tok_desc(&ps->t, d, sizeof d));
    } else if (!func_is_count(n->fn)) {
        fail(ps, &name, "%s needs a comparison, e.g. %s > 100", func_names[fn], func_names[fn]);
    }
    if (ps->failed) {
        node_free(n);
        return NULL;
    }
    ps->rel_change |= n->fn == DBG_FN_REL_CHANGE;
    return n;
}

/* primary := '(' cond ')' | 'phase' ('=='|'!=') PHASE | pred */
static node *parse_primary(parser *ps)
{
    char d[64];
    tok open = ps->t;
    if (open.kind == T_LPAREN) {
        if (++ps->depth > MAX_DEPTH) {
            fail(ps, &open, "condition nested too deeply (more than %d levels)", MAX_DEPTH);
            return NULL;
        }
        next(ps);
        node *n = parse_or(ps);
        ps->depth--;
        if (!n)
            return NULL;
        if (ps->t.kind != T_RPAREN) {
            fail(ps, &ps->t, "expected ')' to close the '(' at column %d, got %s", open.col,
                 tok_desc(&ps->t, d, sizeof d));
            node_free(n);
            return NULL;
        }
        next(ps);
        return n;
    }
    if (is_word(&open, "phase"))
        return parse_phase(ps);
    if (is_word(&open, "op") || is_word(&open, "type"))
        return parse_name_test(ps, is_word(&open, "type"));
    if (open.kind == T_IDENT && !is_word(&open, "and") && !is_word(&open, "or"))
        return parse_pred(ps);
    fail(ps, &open, "expected a function, a scope, 'not', 'phase', 'op=', 'type=' or '(', got %s",
         tok_desc(&open, d, sizeof d));
    return NULL;
}

/* not := 'not' not | primary */
static node *parse_not(parser *ps)
{
    if (!is_word(&ps->t, "not"))
        return parse_primary(ps);
    if (++ps->depth > MAX_DEPTH) {
        fail(ps, &ps->t, "condition nested too deeply (more than %d levels)", MAX_DEPTH);
        return NULL;
    }
    next(ps);
    node *c = parse_not(ps);
    ps->depth--;
    return c ? node_new(ps, N_NOT, c, NULL) : NULL;
}

/* and := not ('and' not)* */
static node *parse_and(parser *ps)
{
    node *l = parse_not(ps);
    while (l && is_word(&ps->t, "and")) {
        next(ps);
        node *r = parse_not(ps);
        l = r ? node_new(ps, N_AND, l, r) : (node_free(l), NULL);
    }
    return l;
}

/* or := and ('or' and)* */
static node *parse_or(parser *ps)
{
    node *l = parse_and(ps);
    while (l && is_word(&ps->t, "or")) {
        next(ps);
        node *r = parse_and(ps);
        l = r ? node_new(ps, N_OR, l, r) : (node_free(l), NULL);
    }
    return l;
}

/* ---- canonical text ----------------------------------------------------------- */

static int prec(const node *n) { return n->kind == N_OR ? 1 : n->kind == N_AND ? 2 : n->kind == N_NOT ? 3 : 4; }

/* %g when it reads back as the same double (nearly always), else the
 * shortest precision that does. */
static void put_number(FILE *f, double v)
{
    char buf[40];
    for (int digits = 6; digits < 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (!isfinite(v) || strtod(buf, NULL) == v)
            break;
    }
    if (isfinite(v) && strtod(buf, NULL) != v)
        snprintf(buf, sizeof buf, "%.17g", v);
    fputs(buf, f);
}

/* Parentheses only where precedence needs them. */
static void render(FILE *f, const node *n, int outer)
{
    bool paren = prec(n) < outer;
    if (paren)
        fputc('(', f);
    switch (n->kind) {
    case N_OR:
    case N_AND:
        render(f, n->l, prec(n));
        fputs(n->kind == N_OR ? " or " : " and ", f);
        render(f, n->r, prec(n));
        break;
    case N_NOT:
        fputs("not ", f);
        render(f, n->l, prec(n));
        break;
    case N_PHASE:
        fprintf(f, "phase %s %s", cmp_names[n->op], te_phase_name(n->phase));
        break;
    case N_OP:
    case N_TYPE: {
        /* quoted when it would not read back bare */
        bool bare = n->name[strcspn(n->name, " \t\r\n()\"'")] == '\0' && n->name[0] != '=';
        char q = strchr(n->name, '"') ? '\'' : '"';
        fprintf(f, "%s%s", n->kind == N_OP ? "op" : "type", n->op == DBG_CMP_NE ? "!=" : "=");
        if (bare)
            fputs(n->name, f);
        else
            fprintf(f, "%c%s%c", q, n->name, q);
        break;
    }
    case N_PRED:
        if (n->fn == DBG_FN_SCALE) /* the scaler's: no scope reads back */
            fputs(func_names[n->fn], f);
        else
            fprintf(f, "%s.%s", scopes[n->scope].name, func_names[n->fn]);
        if (n->op != DBG_CMP_NONE) {
            fprintf(f, " %s ", cmp_names[n->op]);
            put_number(f, n->num);
        }
        break;
    }
    if (paren)
        fputc(')', f);
}

static char *render_text(const node *root)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    render(f, root, 0);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* ---- public: parse ------------------------------------------------------------ */

static dbg_cond *parse(const char *text, char *err, size_t errlen)
{
    parser ps = { .text = text, .p = text, .err = err, .errlen = errlen };
    next(&ps);
    if (ps.t.kind == T_END) {
        fail(&ps, &(tok){ .col = 1 }, "empty condition");
        return NULL;
    }
    node *root = parse_or(&ps);
    if (root && ps.t.kind != T_END) {
        char d[64];
        if (ps.t.kind == T_RPAREN)
            fail(&ps, &ps.t, "unmatched ')'");
        else
            fail(&ps, &ps.t, "expected 'and', 'or' or end of condition, got %s",
                 tok_desc(&ps.t, d, sizeof d));
    }
    dbg_cond *c = ps.failed ? NULL : calloc(1, sizeof *c);
    char *canon = c ? render_text(root) : NULL;
    if (!ps.failed && !canon) {
        fail(&ps, &ps.t, "out of memory");
        free(c);
        c = NULL;
    }
    if (!c) {
        node_free(root);
        return NULL;
    }
    c->root = root;
    c->text = canon;
    c->rel_change = ps.rel_change;
    return c;
}

dbg_cond *dbg_cond_parse(const char *text, char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    /* numbers read and print with '.' whatever locale a front end set */
    locale_t c_num = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    locale_t old = c_num ? uselocale(c_num) : (locale_t)0;
    dbg_cond *c = parse(text, err, errlen);
    if (c_num) {
        uselocale(old);
        freelocale(c_num);
    }
    return c;
}

void dbg_cond_free(dbg_cond *c)
{
    if (!c)
        return;
    node_free(c->root);
    free(c->text);
    free(c);
}

const char *dbg_cond_text(const dbg_cond *c) { return c->text; }

bool dbg_cond_uses_rel_change(const dbg_cond *c) { return c->rel_change; }

/* A deep copy of n; NULL (with nothing left behind) when out of memory. */
static node *node_copy(const node *n)
{
    if (!n)
        return NULL;
    node *m = malloc(sizeof *m);
    if (!m)
        return NULL;
    *m = *n;
    m->l = node_copy(n->l);
    m->r = node_copy(n->r);
    m->name = n->name ? strdup(n->name) : NULL;
    if ((n->l && !m->l) || (n->r && !m->r) || (n->name && !m->name)) {
        node_free(m);
        return NULL;
    }
    return m;
}

dbg_cond *dbg_cond_copy(const dbg_cond *c)
{
    dbg_cond *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->root = node_copy(c->root);
    d->text = strdup(c->text);
    d->rel_change = c->rel_change;
    if (!d->root || !d->text) {
        dbg_cond_free(d);
        return NULL;
    }
    return d;
}

/* ---- what a condition asks ------------------------------------------------------ */

static void collect(const node *n, bool negated, dbg_pred *out, int max, int *count)
{
    switch (n->kind) {
    case N_OR:
    case N_AND:
        collect(n->l, negated, out, max, count);
        collect(n->r, negated, out, max, count);
        return;
    case N_NOT:
        collect(n->l, !negated, out, max, count);
        return;
    case N_PHASE:
    case N_OP:
    case N_TYPE:
        return;
    case N_PRED:
        if (*count < max)
            out[*count] = (dbg_pred){ .scope = scopes[n->scope].kind, .slot = scopes[n->scope].slot,
                                      .func = n->fn, .cmp = n->op, .number = n->num, .negated = negated };
        (*count)++;
        return;
    }
}

static void collect_globs(const node *n, const char **out, int max, int *count)
{
    if (!n)
        return;
    if (n->kind == N_OP) {
        if (*count < max)
            out[*count] = n->name;
        (*count)++;
    }
    collect_globs(n->l, out, max, count);
    collect_globs(n->r, out, max, count);
}

int dbg_cond_op_globs(const dbg_cond *c, const char **out, int max)
{
    int count = 0;
    collect_globs(c->root, out, max, &count);
    return count;
}

int dbg_cond_preds(const dbg_cond *c, dbg_pred *out, int max)
{
    int count = 0;
    collect(c->root, false, out, max, &count);
    return count;
}

const char *dbg_func_name(dbg_func f) { return f >= 0 && f < DBG_FN_COUNT ? func_names[f] : "?"; }

const char *dbg_cmp_name(dbg_cmp c)
{
    return c >= 0 && c < (int)(sizeof cmp_names / sizeof *cmp_names) ? cmp_names[c] : "?";
}

const char *dbg_scope_name(dbg_scope_kind k, int slot)
{
    for (int i = 0; i < N_SCOPES; i++)
        if (scopes[i].kind == k && scopes[i].slot == slot)
            return scopes[i].name;
    return "?";
}

/* ---- evaluation ----------------------------------------------------------------- */

typedef struct cached {
    const te_tensor *t;
    bool full;          /* s holds every field, not just the quick ones */
    bool rel_done, rel_ok;
    double rel;
    te_stats s;
} cached;

typedef struct evaluator {
    const dbg_eval_ctx *ctx;
    int n;
    cached slots[CACHE_SLOTS];
    cached spare; /* when the slots are full: recomputed on every use */
} evaluator;

static cached *cache_entry(evaluator *ev, const te_tensor *t)
{
    for (int i = 0; i < ev->n; i++)
        if (ev->slots[i].t == t)
            return &ev->slots[i];
    if (ev->spare.t == t)
        return &ev->spare;
    cached *c = ev->n < CACHE_SLOTS ? &ev->slots[ev->n++] : &ev->spare;
    *c = (cached){ .t = t, .s.n = -1 };
    return c;
}

#define REL_CHUNK 16384 /* elements of each side rel_change reads at once */

/* ||x - prev||_2 / max(||prev||_2, 1e-12); false when there is no
 * previous value of the same shape. */
static bool rel_change(const dbg_eval_ctx *ctx, const te_tensor *t, double *out)
{
    const te_tensor *p = ctx->prev ? ctx->prev(t, ctx->user) : NULL;
    if (!p || !p->data || !te_same_shape(t, p))
        return false;
    double d2 = 0, p2 = 0;
    static float x[REL_CHUNK], y[REL_CHUNK];
    for (int64_t at = 0; at < t->numel; at += REL_CHUNK) { /* a chunk of both at a time from the device */
        const int64_t n = t->numel - at < REL_CHUNK ? t->numel - at : REL_CHUNK;
        if (te_tensor_read_f32(t, at, n, x) != TE_OK || te_tensor_read_f32(p, at, n, y) != TE_OK)
            return false;
#pragma omp simd reduction(+ : d2, p2)
        for (int64_t i = 0; i < n; i++) {
            double a = x[i], b = y[i];
            d2 += (a - b) * (a - b);
            p2 += b * b;
        }
    }
    *out = sqrt(d2) / fmax(sqrt(p2), 1e-12);
    return true;
}

/* f's value for t; false when it has none (rel_change without a previous value). */
static bool func_value(evaluator *ev, dbg_func f, const te_tensor *t, double *v)
{
    cached *c = cache_entry(ev, t);
    if (f == DBG_FN_REL_CHANGE) {
        if (!c->rel_done) {
            c->rel_ok = rel_change(ev->ctx, t, &c->rel);
            c->rel_done = true;
        }
        *v = c->rel;
        return c->rel_ok;
    }
    if (c->s.n < 0 || (!c->full && !func_is_quick(f))) {
        c->full = !func_is_quick(f);
        (c->full ? te_stats_compute : te_stats_quick)(t, &c->s);
    }
    const te_stats *s = &c->s;
    switch (f) {
    case DBG_FN_HAS_NAN: *v = (double)s->nan; break;
    case DBG_FN_HAS_INF: *v = (double)s->inf; break;
    case DBG_FN_MAX: *v = s->max; break;
    case DBG_FN_MIN: *v = s->min; break;
    case DBG_FN_MEAN: *v = s->mean; break;
    case DBG_FN_STD: *v = s->std; break;
    case DBG_FN_ABS_MAX: *v = s->abs_max; break;
    case DBG_FN_ABS_MEAN: *v = s->abs_mean; break;
    case DBG_FN_L2NORM: *v = s->l2norm; break;
    case DBG_FN_ZERO_FRAC: *v = s->n ? (double)s->zero / (double)s->n : 0.0; break;
    case DBG_FN_FP16_OVERFLOW: *v = (double)s->fp16_overflow; break;
    case DBG_FN_REL_CHANGE: case DBG_FN_OVERFLOW: case DBG_FN_UNDERFLOW: case DBG_FN_SCALE:
    case DBG_FN_COUNT: abort();
    }
    return true;
}

static bool compare(dbg_cmp op, double v, double num)
{
    switch (op) {
    case DBG_CMP_NONE: return v > 0;
    case DBG_CMP_GT: return v > num;
    case DBG_CMP_GE: return v >= num;
    case DBG_CMP_LT: return v < num;
    case DBG_CMP_LE: return v <= num;
    case DBG_CMP_EQ: return v == num;
    case DBG_CMP_NE: return v != num;
    }
    abort();
}

static const dbg_hit no_hit = { .slot = -1, .index = -1 };

static bool in_scope(const node *n, const te_tensor *t, int slot, bool is_output)
{
    dbg_scope_kind k = scopes[n->scope].kind;
    if (scopes[n->scope].slot >= 0 && scopes[n->scope].slot != slot)
        return false;
    switch (k) {
    case DBG_SCOPE_INPUTS: return !is_output;
    case DBG_SCOPE_OUTPUTS: return is_output;
    case DBG_SCOPE_PARAMS: return !is_output && (t->flags & TE_TENSOR_PARAM);
    case DBG_SCOPE_GRADS: return !strncmp(t->name, "grad:", 5);
    }
    return false;
}

/* overflow, underflow: any rounded output in scope whose count (fraction)
 * compares true; the output is the hit, whether in memory or not. */
static bool eval_rounding(const dbg_eval_ctx *ctx, const node *n, dbg_hit *hit)
{
    const te_op_record *r = ctx->rec;
    for (int k = 0; r->round && k < r->n_outputs; k++) {
        const te_round_stats *st = &r->round[k];
        if (!r->outputs[k] || st->dtype == TE_F32 || (scopes[n->scope].slot >= 0 && scopes[n->scope].slot != k))
            continue;
        double v = n->fn == DBG_FN_OVERFLOW ? (double)st->overflow
                   : st->nonzero ? (double)st->underflow / (double)st->nonzero : 0.0;
        if (!compare(n->op, v, n->num))
            continue;
        *hit = (dbg_hit){ .tensor = r->outputs[k], .slot = k, .is_output = true, .index = -1, .value = v };
        snprintf(hit->func, sizeof hit->func, "%s", func_names[n->fn]);
        return true;
    }
    return false;
}

/* Any tensor of the scope, inputs first; the first that holds is the hit. */
static bool eval_pred(evaluator *ev, const node *n, dbg_hit *hit)
{
    const te_op_record *r = ev->ctx->rec;
    if (func_is_rounding(n->fn))
        return eval_rounding(ev->ctx, n, hit);
    if (n->fn == DBG_FN_SCALE) {
        te_scaler_state st;
        if (!te_scaler_state_get(&st) || !compare(n->op, st.scale, n->num))
            return false;
        *hit = (dbg_hit){ .slot = -1, .index = -1, .value = st.scale };
        snprintf(hit->func, sizeof hit->func, "scale");
        return true;
    }
    for (int side = 0; side < 2; side++) {
        te_tensor *const *ts = side ? r->outputs : r->inputs;
        int count = ts ? (side ? r->n_outputs : r->n_inputs) : 0;
        for (int i = 0; i < count; i++) {
            const te_tensor *t = ts[i];
            double v = 0;
            if (!t || !t->data || !in_scope(n, t, i, side) || !func_value(ev, n->fn, t, &v) ||
                !compare(n->op, v, n->num))
                continue;
            *hit = (dbg_hit){ .tensor = t, .slot = i, .is_output = side, .index = -1, .value = v };
            if (n->fn == DBG_FN_HAS_NAN || n->fn == DBG_FN_HAS_INF)
                hit->index = dbg_find_nonfinite(t, cache_entry(ev, t)->s.first_bad,
                                                n->fn == DBG_FN_HAS_NAN ? DBG_NF_NAN : DBG_NF_INF);
            snprintf(hit->func, sizeof hit->func, "%s", func_names[n->fn]);
            return true;
        }
    }
    return false;
}

/* True or false; *hit is written only when true. */
static bool eval_node(evaluator *ev, const node *n, dbg_hit *hit)
{
    dbg_hit a, b;
    switch (n->kind) {
    case N_OR:
        return eval_node(ev, n->l, hit) || eval_node(ev, n->r, hit);
    case N_AND:
        if (!eval_node(ev, n->l, &a) || !eval_node(ev, n->r, &b))
            return false;
        *hit = a.tensor ? a : b;
        return true;
    case N_NOT:
        if (eval_node(ev, n->l, &a))
            return false;
        *hit = no_hit;
        return true;
    case N_PHASE:
        if ((ev->ctx->rec->phase == n->phase) != (n->op == DBG_CMP_EQ))
            return false;
        *hit = no_hit;
        return true;
    case N_OP:
    case N_TYPE: {
        const te_op_record *r = ev->ctx->rec;
        bool match = n->kind == N_OP ? r->name && fnmatch(n->name, r->name, 0) == 0
                                     : r->type && strcmp(n->name, r->type) == 0;
        if (match != (n->op == DBG_CMP_EQ))
            return false;
        *hit = no_hit;
        return true;
    }
    case N_PRED:
        return eval_pred(ev, n, hit);
    }
    abort();
}

bool dbg_cond_eval(const dbg_cond *c, const dbg_eval_ctx *ctx, dbg_hit *hit)
{
    evaluator ev;
    ev.ctx = ctx;
    ev.n = 0;
    ev.spare.t = NULL;
    dbg_hit h;
    bool yes = eval_node(&ev, c->root, &h);
    if (hit)
        *hit = yes ? h : no_hit;
    return yes;
}
