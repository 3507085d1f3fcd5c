/*
 * cmd_break.c — breakpoints: break, tbreak, delete, disable, enable,
 * condition, ignore, and the table `info breakpoints` prints.
 */
#include "cmd.h"
#include "names.h"
#include "session.h"

#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static dbg_break *find(long long id)
{
    for (int i = 0; i < dbg.n_breaks; i++)
        if (dbg.breaks[i].id == id)
            return &dbg.breaks[i];
    dbg_error("no breakpoint %lld; 'info breakpoints' lists them", id);
    return NULL;
}

/* Breakpoints waiting for the first step's ops (te_names_expect), by id. */
static struct {
    int id, handle;
} pending[DBG_MAX_BREAKS];

static void pending_add(int id, int handle)
{
    for (int i = 0; i < DBG_MAX_BREAKS; i++)
        if (!pending[i].id) {
            pending[i].id = id;
            pending[i].handle = handle;
            return;
        }
}

/* Is breakpoint id waiting for the first step's ops? Forgets it if drop. */
static bool pending_find(int id, bool drop)
{
    for (int i = 0; i < DBG_MAX_BREAKS; i++)
        if (pending[i].id == id) {
            if (drop) {
                te_names_forget(pending[i].handle);
                pending[i].id = 0;
            }
            return !te_names_known();
        }
    return false;
}

void dbg_breaks_clear(void)
{
    while (dbg.n_breaks)
        dbg_break_remove(dbg.breaks[0].id);
    dbg.next_id = 1;
}

void dbg_break_remove(int id)
{
    for (int i = 0; i < dbg.n_breaks; i++)
        if (dbg.breaks[i].id == id) {
            pending_find(id, true);
            dbg_cond_free(dbg.breaks[i].cond);
            memmove(&dbg.breaks[i], &dbg.breaks[i + 1], (size_t)(dbg.n_breaks - i - 1) * sizeof dbg.breaks[0]);
            dbg.n_breaks--;
            dbg_breaks_changed();
            return;
        }
}

/* Splits "WHAT if COND" at the word "if". */
static const char *split_if(const char *args, char *what, size_t n)
{
    const char *p = args;
    while ((p = strstr(p, "if")) != NULL) {
        bool word = (p == args || p[-1] == ' ' || p[-1] == '\t') && (p[2] == ' ' || p[2] == '\t' || !p[2]);
        if (word)
            break;
        p += 2;
    }
    size_t len = p ? (size_t)(p - args) : strlen(args);
    while (len && (args[len - 1] == ' ' || args[len - 1] == '\t'))
        len--;
    if (len >= n)
        len = n - 1;
    memcpy(what, args, len);
    what[len] = '\0';
    return p ? dbg_skip_space(p + 2) : NULL;
}

static void pending_unmatched(const char *msg, void *user)
{
    (void)user;
    fprintf(dbg_out, "warning: %s\n", msg);
    fflush(dbg_out);
}

/* Op names exist once ops have run. Once the engine knows the first
 * step's ops, a glob matching none of them (nor this step's and the last
 * step's so far) is refused with the nearest name. Before, it is pending
 * (*pending set): the engine checks it when the first step ends and warns
 * once if it matched nothing. In the middle of that first step, a glob
 * matching none of the ops so far is refused only when it is a typo of one
 * (one within TE_NEAR edits); another may name an op still to come. An
 * attached session's first step (the engine learns the names from it)
 * refuses none: it came in after the step's first ops. */
static bool known_ops(const char *glob, bool *pending_out)
{
    static const char *names[3 * DBG_MAX_OPS];
    int n = dbg_op_names(names);
    bool known = te_names_known();
    n += te_names_list(names + n, NULL, DBG_MAX_OPS);
    for (int i = 0; i < n; i++)
        if (fnmatch(glob, names[i], 0) == 0)
            return true;
    const char *near = te_suggest(glob, names, n, TE_NEAR);
    /* An attached session comes in mid-step: near a name so far or not,
     * the glob may name an op of the rest of the step. */
    if (!known && (!near || dbg_remote_on())) {
        *pending_out = true;
        return true;
    }
    if (near)
        dbg_error("no op matches '%s' (did you mean %s?); 'info ops' lists them", glob, near);
    else
        dbg_error("no op matches '%s'; 'info ops' lists them", glob);
    return false;
}

/* A condition's op globs are names as a breakpoint's are: one that
 * matches no op is said once, when the ops are known. */
static void expect_cond_names(const dbg_cond *c, int id)
{
    const char *globs[8];
    int n = dbg_cond_op_globs(c, globs, 8);
    for (int i = 0; i < n && i < 8; i++) {
        char label[TE_NAME_MAX + 64];
        snprintf(label, sizeof label, "breakpoint %d's condition op=%s", id, globs[i]);
        te_names_expect(label, globs[i], pending_unmatched, NULL);
    }
}

/* `break underflow if fraction > X` (or >=): X in [0, 1). */
static bool parse_fraction(const char *text, double *out)
{
    const char *p = dbg_skip_space(text + 8);
    bool ge = strncmp(p, ">=", 2) == 0;
    if (*p != '>') {
        dbg_error("break underflow: expected 'fraction > X' (X between 0 and 1), got '%s'", text);
        return false;
    }
    p = dbg_skip_space(p + (ge ? 2 : 1));
    char *end;
    double x = strtod(p, &end);
    if (end == p || *dbg_skip_space(end) || !(x >= 0 && x < 1)) {
        dbg_error("break underflow: the fraction must be a number in [0, 1), got '%s'", p);
        return false;
    }
    /* rounds_to_zero asks for more than the fraction: >= X is > just below it */
    *out = ge ? nextafter(x, -1.0) : x;
    return true;
}

static bool add_break(const char *args, bool temporary)
{
    char what[TE_NAME_MAX];
    const char *cond_text = split_if(args, what, sizeof what);
    if (!what[0]) {
        dbg_error("break: say where: OP_GLOB, type:TYPE, step N, nan, inf, nonfinite, overflow, underflow, skip or "
                  "data");
        return false;
    }
    if (dbg.n_breaks == DBG_MAX_BREAKS) {
        dbg_error("break: at most %d breakpoints", DBG_MAX_BREAKS);
        return false;
    }
    dbg_break b = { .enabled = true, .temporary = temporary };
    bool is_pending = false;
    snprintf(b.what, sizeof b.what, "%s", what);
    char w[32];
    const char *rest = dbg_word(what, w, sizeof w);
    if (strcmp(what, "nan") == 0)
        b.kind = BK_NAN;
    else if (strcmp(what, "inf") == 0)
        b.kind = BK_INF;
    else if (strcmp(what, "nonfinite") == 0)
        b.kind = BK_NONFINITE;
    else if (strcmp(what, "overflow") == 0)
        b.kind = BK_OVERFLOW;
    else if (strcmp(what, "underflow") == 0)
        b.kind = BK_UNDERFLOW;
    else if (strcmp(what, "skip") == 0)
        b.kind = BK_SKIP;
    else if (strcmp(what, "data") == 0) {
        char err[256], text[TE_NAME_MAX - 8]; /* what = "data if " + text */
        if (!dbg_data_check_parse(cond_text ? cond_text : "", &b.data, err, sizeof err)) {
            dbg_error("break data: %s", err);
            return false;
        }
        b.kind = BK_DATA;
        cond_text = NULL;
        dbg_data_check_text(&b.data, text, sizeof text);
        snprintf(b.what, sizeof b.what, "data if %s", text);
    } else if (strcmp(w, "step") == 0) {
        long long s;
        if (!dbg_parse_int(rest, "break step N", 0, &s))
            return false;
        b.kind = BK_STEP;
        b.step = s;
    } else if (strncmp(what, "type:", 5) == 0 && what[5]) {
        b.kind = BK_TYPE;
        memmove(b.what, b.what + 5, strlen(b.what + 5) + 1);
        char why[512];
        if (!te_op_type_check(b.what, why, sizeof why)) { /* the op table is known at once */
            dbg_error("break: %s", why);
            return false;
        }
    } else if (strchr(what, ' ')) {
        dbg_error("break: '%s' is not an op name, type:TYPE, step N, nan, inf, nonfinite, overflow, underflow, skip or "
                  "data", what);
        return false;
    } else {
        if (!known_ops(what, &is_pending))
            return false;
        b.kind = BK_OP;
    }
    if (cond_text && b.kind == BK_UNDERFLOW && strncmp(cond_text, "fraction", 8) == 0 &&
        !parse_fraction(cond_text, &b.fraction))
        return false;
    if (b.kind == BK_UNDERFLOW && strncmp(cond_text ? cond_text : "", "fraction", 8) == 0)
        cond_text = NULL;
    if (cond_text) {
        if (b.kind == BK_STEP) {
            dbg_error("break step N takes no condition (conditions look at an op's tensors)");
            return false;
        }
        char err[256];
        if (!cond_text[0] || !(b.cond = dbg_cond_parse(cond_text, err, sizeof err))) {
            dbg_error("condition: %s", cond_text[0] ? err : "nothing after 'if'");
            return false;
        }
    }
    b.id = dbg.next_id++;
    dbg.breaks[dbg.n_breaks++] = b;
    dbg_breaks_changed();
    if (b.cond)
        expect_cond_names(b.cond, b.id);
    const char *label = temporary ? "Temporary breakpoint" : "Breakpoint";
    if (is_pending) { /* as gdb's pending breakpoints */
        char name[TE_NAME_MAX + 64];
        snprintf(name, sizeof name, "%s %d (%s)", label, b.id, b.what);
        pending_add(b.id, te_names_expect(name, b.what, pending_unmatched, NULL));
        fprintf(dbg_out, "%s %d (%s%s%s) pending: ", label, b.id, b.what, b.cond ? " if " : "",
                b.cond ? dbg_cond_text(b.cond) : "");
        if (dbg.n_ops || dbg.n_last_ops)
            fprintf(dbg_out, "no op of step %lld so far matches; it is checked when the step ends\n",
                    (long long)dbg.step);
        else
            fprintf(dbg_out, "no ops exist before the first step; it is checked when they do\n");
        return false;
    }
    switch (b.kind) {
    case BK_NAN: fprintf(dbg_out, "%s %d: the first op creating a NaN", label, b.id); break;
    case BK_INF: fprintf(dbg_out, "%s %d: the first op creating an Inf", label, b.id); break;
    case BK_NONFINITE: fprintf(dbg_out, "%s %d: the first op creating a NaN or Inf", label, b.id); break;
    case BK_OVERFLOW:
        fprintf(dbg_out, "%s %d: an op whose f16/bf16 output overflows to +-Inf from finite inputs", label, b.id);
        break;
    case BK_UNDERFLOW:
        if (b.fraction > 0)
            fprintf(dbg_out, "%s %d: an op rounding more than %g of its non-zero results to zero", label, b.id,
                    b.fraction);
        else
            fprintf(dbg_out, "%s %d: an op rounding non-zero results to zero", label, b.id);
        break;
    case BK_SKIP: fprintf(dbg_out, "%s %d: the loss scaler about to skip a step", label, b.id); break;
    case BK_DATA: fprintf(dbg_out, "%s %d: a batch failing the check %s", label, b.id, b.what + 8); break;
    case BK_STEP: fprintf(dbg_out, "%s %d: the start of step %lld", label, b.id, (long long)b.step); break;
    case BK_TYPE: fprintf(dbg_out, "%s %d: ops of type %s", label, b.id, b.what); break;
    case BK_OP: fprintf(dbg_out, "%s %d: ops matching '%s'", label, b.id, b.what); break;
    }
    if (b.cond)
        fprintf(dbg_out, " if %s", dbg_cond_text(b.cond));
    fprintf(dbg_out, "\n");
    return false;
}

static bool cmd_break(const char *args) { return add_break(args, false); }
static bool cmd_tbreak(const char *args) { return add_break(args, true); }

/* Runs fn on each breakpoint id in args, or on all when args is empty. */
static void each(const char *args, void (*fn)(dbg_break *))
{
    if (!args[0]) {
        for (int i = dbg.n_breaks - 1; i >= 0; i--)
            fn(&dbg.breaks[i]);
        return;
    }
    char w[32];
    while (args[0]) {
        args = dbg_word(args, w, sizeof w);
        long long id;
        dbg_break *b;
        if (dbg_parse_int(w, "breakpoint number", 1, &id) && (b = find(id)))
            fn(b);
    }
}

static void do_delete(dbg_break *b) { dbg_break_remove(b->id); }
static void do_disable(dbg_break *b) { b->enabled = false; }
static void do_enable(dbg_break *b) { b->enabled = true; }

static bool cmd_delete(const char *args)
{
    each(args, do_delete);
    return false;
}

static bool cmd_disable(const char *args)
{
    each(args, do_disable);
    dbg_breaks_changed();
    return false;
}

static bool cmd_enable(const char *args)
{
    each(args, do_enable);
    dbg_breaks_changed();
    return false;
}

static bool cmd_condition(const char *args)
{
    char w[32];
    const char *rest = dbg_word(args, w, sizeof w);
    long long id;
    dbg_break *b;
    if (!dbg_parse_int(w, "condition N", 1, &id) || !(b = find(id)))
        return false;
    if (!rest[0]) {
        dbg_cond_free(b->cond);
        b->cond = NULL;
        fprintf(dbg_out, "Breakpoint %d now unconditional.\n", b->id);
        return false;
    }
    if (b->kind == BK_STEP || b->kind == BK_DATA) {
        dbg_error("breakpoint %d stops at %s: conditions look at an op's tensors%s", b->id,
                  b->kind == BK_STEP ? "a step" : "a batch", b->kind == BK_DATA ? " ('break data if ...' sets its checks)" : "");
        return false;
    }
    char err[256];
    dbg_cond *c = dbg_cond_parse(rest, err, sizeof err);
    if (!c) {
        dbg_error("condition: %s", err);
        return false;
    }
    dbg_cond_free(b->cond);
    b->cond = c;
    fprintf(dbg_out, "Breakpoint %d if %s\n", b->id, dbg_cond_text(c));
    expect_cond_names(c, b->id);
    return false;
}

static bool cmd_ignore(const char *args)
{
    char w[32];
    const char *rest = dbg_word(args, w, sizeof w);
    long long id, count;
    dbg_break *b;
    if (!dbg_parse_int(w, "ignore N", 1, &id) || !(b = find(id)) ||
        !dbg_parse_int(rest, "ignore N COUNT", 0, &count))
        return false;
    b->ignore = count;
    fprintf(dbg_out, "Will ignore the next %lld hits of breakpoint %d.\n", count, b->id);
    return false;
}

void dbg_info_breakpoints(void);
void dbg_info_breakpoints(void)
{
    if (!dbg.n_breaks) {
        fprintf(dbg_out, "No breakpoints.\n");
        return;
    }
    fprintf(dbg_out, "%-4s %-10s %-5s %-4s %-6s %s\n", "Num", "Type", "Disp", "Enb", "Hits", "What");
    static const char *const kinds[] = { "op", "type", "step", "nan", "inf", "nonfinite", "overflow", "underflow",
                                         "skip", "data" };
    _Static_assert(sizeof kinds / sizeof kinds[0] == BK_DATA + 1, "a name for every kind");
    for (int i = 0; i < dbg.n_breaks; i++) {
        const dbg_break *b = &dbg.breaks[i];
        fprintf(dbg_out, "%-4d %-10s %-5s %-4s %-6lld %s%s%s", b->id, kinds[b->kind], b->temporary ? "del" : "keep",
                b->enabled ? "y" : "n", (long long)b->hits, b->what, b->cond ? " if " : "",
                b->cond ? dbg_cond_text(b->cond) : "");
        if (b->kind == BK_UNDERFLOW && b->fraction > 0)
            fprintf(dbg_out, " (fraction > %g)", b->fraction);
        if (b->ignore)
            fprintf(dbg_out, " (ignore next %lld)", (long long)b->ignore);
        if (pending_find(b->id, false))
            fprintf(dbg_out, " (pending: checked when the first step's ops exist)");
        fprintf(dbg_out, "\n");
    }
}

/* WHAT: an op, a type or a keyword; then "if" and a condition. */
#define BREAK_ARGS                                                                                             \
    { { DBG_ARG_OP | DBG_ARG_TYPE, DBG_WORDS("nan", "inf", "nonfinite", "overflow", "underflow", "skip", "step", "data") }, \
      { DBG_ARG_COND, DBG_WORDS("if") } }

const dbg_cmd dbg_cmds_break[] = {
    { .name = "break", .alias = "b", .usage = "break WHAT [if COND]",
      .help = "stop at ops, a step, or where values go non-finite\n"
      "WHAT: an op name glob (fc*/linear), type:TYPE (type:MatMul), step N, nan, inf or\n"
      "nonfinite (the first op creating one: not the ops that pass it on), overflow (an\n"
      "f16/bf16 output rounded to +-Inf from finite inputs), underflow [if fraction > X]\n"
      "(non-zero results rounded to zero), skip (the loss scaler about to skip the step),\n"
      "data [if CHECKS] (a batch, before any op reads it: nonfinite, label, empty, constant,\n"
      "max > N, min < N, abs_max > N, joined by or; all of the first four without if).\n"
      "COND: has_nan, has_inf, comparisons on max, min, mean, std, abs_max, abs_mean,\n"
      "l2norm, zero_frac, fp16_overflow, rel_change (vs the previous step), overflow and\n"
      "underflow (what rounding the outputs did: a count, a fraction), scale, with and,\n"
      "or, not and parentheses; scopes inputs., outputs. (default), params., grads.,\n"
      "in0., out1.; phase == forward|backward|update. e.g. break fc* if abs_max > 1e4",
      .args = BREAK_ARGS, .max_words = DBG_WORDS_ANY, .run = cmd_break },
    { .name = "tbreak", .usage = "tbreak WHAT [if COND]", .help = "a breakpoint deleted after its first stop",
      .args = BREAK_ARGS, .max_words = DBG_WORDS_ANY, .run = cmd_tbreak },
    { .name = "delete", .alias = "d", .usage = "delete [N...]", .help = "delete breakpoints (all without N)",
      .args = { { DBG_ARG_BREAK }, { DBG_ARG_BREAK } }, .max_words = DBG_WORDS_ANY, .run = cmd_delete },
    { .name = "disable", .usage = "disable [N...]", .help = "disable breakpoints (all without N)",
      .args = { { DBG_ARG_BREAK }, { DBG_ARG_BREAK } }, .max_words = DBG_WORDS_ANY, .run = cmd_disable },
    { .name = "enable", .usage = "enable [N...]", .help = "enable breakpoints (all without N)",
      .args = { { DBG_ARG_BREAK }, { DBG_ARG_BREAK } }, .max_words = DBG_WORDS_ANY, .run = cmd_enable },
    { .name = "condition", .usage = "condition N [COND]",
      .help = "set or (without COND) remove breakpoint N's condition",
      .args = { { DBG_ARG_BREAK }, { DBG_ARG_COND } }, .max_words = DBG_WORDS_ANY, .run = cmd_condition },
    { .name = "ignore", .usage = "ignore N COUNT", .help = "let breakpoint N pass its next COUNT hits",
      .args = { { DBG_ARG_BREAK } }, .max_words = 2, .run = cmd_ignore },
    { .name = NULL },
};
