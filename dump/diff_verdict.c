/* diff_verdict.c — which divergent op is a root cause and which inherited.
 *
 * The op graph is A's run.h5 /ops table: each op reads and writes tensors
 * by name. Beyond what the table lists, a backward op grad/X also reads what
 * its forward op X read and wrote (the tensors autograd saved) and adds into
 * the gradients it writes (accumulation); an update op reads the parameter
 * it writes, and its optimizer state; an op updates in place the inputs
 * the table's inplace column lists (a batch norm's running statistics in
 * training). Tables from before that column stood: an op reading a tensor
 * no op writes is taken to update it in place. Where the table has its
 * reads column, grad/X reads exactly what that lists of X's tensors (a
 * ReLU's gradient reads its output, not its input) and X's saved state
 * ("X:saved0"), which X writes; older tables: every input and output of X.
 *
 * Walking a step's ops in execution order, a name is marked tainted when the
 * op writing it diverged or read a tainted or divergent input. Names keep
 * their mark into the next step (gradients excepted: each step computes
 * them afresh), so a parameter an update of step N tainted taints every op
 * of step N + 1 that reads it, and state (optimizer moments, running
 * statistics) stays tainted. A divergent output is then "inherited" when its
 * op read a tainted or divergent input, and "diverges here" when it did
 * not. Taint travels through ops whose tensors were not dumped too, so an
 * error that grows from below the tolerance to above it two ops later is
 * still inherited. Without /ops (no run.h5) the dumped inputs' names stand
 * in.
 */
#include "diff.h"

#include <stdlib.h>
#include <string.h>

/* ---- a map from names to small flags ---------------------------------------------- */

typedef struct slot {
    char *key;
    int value;
} slot;

typedef struct names {
    slot *s;
    size_t cap, n;
} names;

static uint64_t hash(const char *k)
{
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *k; k++)
        h = (h ^ (uint8_t)*k) * 1099511628211ull;
    return h;
}

static slot *names_find(const names *m, const char *k)
{
    if (!m->cap)
        return NULL;
    for (size_t i = hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->s[i].key)
            return NULL;
        if (strcmp(m->s[i].key, k) == 0)
            return &m->s[i];
    }
}

static int names_get(const names *m, const char *k)
{
    const slot *s = names_find(m, k);
    return s ? s->value : 0;
}

/* Sets k's value; false when out of memory. */
static bool names_set(names *m, const char *k, int value)
{
    slot *s = names_find(m, k);
    if (s) {
        s->value = value;
        return true;
    }
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        slot *t = calloc(cap, sizeof *t);
        if (!t)
            return false;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->s[i].key)
                continue;
            size_t j = hash(m->s[i].key) & (cap - 1);
            while (t[j].key)
                j = (j + 1) & (cap - 1);
            t[j] = m->s[i];
        }
        free(m->s);
        m->s = t;
        m->cap = cap;
    }
    size_t j = hash(k) & (m->cap - 1);
    while (m->s[j].key)
        j = (j + 1) & (m->cap - 1);
    if (!(m->s[j].key = strdup(k)))
        return false;
    m->s[j].value = value;
    m->n++;
    return true;
}

static void names_free(names *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->s[i].key);
    free(m->s);
    memset(m, 0, sizeof *m);
}

/* ---- the graph ------------------------------------------------------------------------ */

enum { TAINT = 1, KNOWN = 2 };   /* a name's flags: differs or came from a difference; compared */

typedef struct list {
    int n;
    char **s;
} list;

typedef struct gop {
    char *name;
    int exec;
    bool backward;
    list deps, outs;             /* read; written (marked afresh) */
    list state;                  /* updated in place (marks only added) */
} gop;

struct diff_graph {
    gop *ops;
    int n_ops;
    names index;                 /* op name -> position + 1 */
    names flags;                 /* tensor name -> TAINT | KNOWN */
};

static bool list_add(list *l, const char *s, size_t len)
{
    for (int i = 0; i < l->n; i++)
        if (strlen(l->s[i]) == len && strncmp(l->s[i], s, len) == 0)
            return true;
    char **m = realloc(l->s, (size_t)(l->n + 1) * sizeof *m);
    if (!m)
        return false;
    l->s = m;
    if (!(l->s[l->n] = strndup(s, len)))
        return false;
    l->n++;
    return true;
}

/* Adds the names of a ','-joined list, empty entries skipped. */
static bool list_split(list *l, const char *text)
{
    while (*text) {
        size_t len = strcspn(text, ",");
        if (len && !list_add(l, text, len))
            return false;
        text += len + (text[len] == ',');
    }
    return true;
}

static void list_free(list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->s[i]);
    free(l->s);
}

void diff_graph_free(diff_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_ops; i++) {
        list_free(&g->ops[i].deps);
        list_free(&g->ops[i].outs);
        list_free(&g->ops[i].state);
        free(g->ops[i].name);
    }
    free(g->ops);
    names_free(&g->index);
    names_free(&g->flags);
    free(g);
}

static int by_exec(const void *pa, const void *pb)
{
    const gop *a = pa, *b = pb;
    return a->exec < b->exec ? -1 : a->exec > b->exec;
}

/* grad/X (row i) reads what the reads column lists of X (row j); what X
 * neither read nor wrote there is the state X saved for it, which X
 * writes as it writes its outputs. */
static bool listed_reads(gop *bwd, gop *fwd, const dump_op_row *b, const dump_op_row *f)
{
    list r = { 0, NULL }, io = { 0, NULL };
    bool ok = list_split(&r, b->reads) && list_split(&bwd->deps, b->reads) && list_split(&io, f->inputs) &&
              list_split(&io, f->outputs);
    for (int k = 0; ok && k < r.n; k++) {
        bool listed = false;
        for (int m = 0; !listed && m < io.n; m++)
            listed = strcmp(io.s[m], r.s[k]) == 0;
        if (!listed)
            ok = list_add(&fwd->outs, r.s[k], strlen(r.s[k]));
    }
    list_free(&r);
    list_free(&io);
    return ok;
}

diff_graph *diff_graph_new(const dump_op_row *ops, int n_ops, bool lists_inplace, bool lists_reads)
{
    diff_graph *g = calloc(1, sizeof *g);
    if (!g || !(g->ops = calloc((size_t)(n_ops ? n_ops : 1), sizeof *g->ops))) {
        free(g);
        return NULL;
    }
    g->n_ops = n_ops;
    bool ok = true;
    list written = { 0, NULL };
    for (int i = 0; ok && i < n_ops; i++) {
        gop *o = &g->ops[i];
        o->exec = ops[i].exec;
        o->backward = ops[i].phase == TE_PHASE_BACKWARD;
        ok = (o->name = strdup(ops[i].name)) != NULL && list_split(&o->deps, ops[i].inputs) &&
             list_split(&o->outs, ops[i].outputs) && list_split(&written, ops[i].outputs);
        if (ok && (ops[i].phase == TE_PHASE_UPDATE || o->backward))   /* x = f(x, ...) */
            for (int k = 0; ok && k < o->outs.n; k++)
                ok = list_add(&o->deps, o->outs.s[k], strlen(o->outs.s[k]));
        if (ok && ops[i].phase == TE_PHASE_UPDATE) {
            char key[TE_NAME_MAX + 8];
            snprintf(key, sizeof key, "state:%s", ops[i].name);
            ok = list_add(&o->state, key, strlen(key));
        }
    }
    for (int i = 0; ok && lists_inplace && i < n_ops; i++)   /* as the writer recorded */
        ok = list_split(&g->ops[i].state, ops[i].inplace);
    for (int i = 0; ok && !lists_inplace && i < n_ops; i++) { /* inputs nobody writes: in place */
        gop *o = &g->ops[i];
        for (int k = 0; ok && k < o->deps.n; k++) {
            const char *d = o->deps.s[k];
            bool w = strncmp(d, "batch:", 6) == 0;
            for (int j = 0; !w && j < written.n; j++)
                w = strcmp(written.s[j], d) == 0;
            if (!w)
                ok = list_add(&o->state, d, strlen(d));
        }
    }
    list_free(&written);
    for (int i = 0; ok && i < n_ops; i++)   /* grad/X reads (some of) what X read and wrote */
        if (ops[i].phase == TE_PHASE_BACKWARD && strncmp(ops[i].name, "grad/", 5) == 0)
            for (int j = 0; ok && j < n_ops; j++)
                if (ops[j].phase == TE_PHASE_FORWARD && strcmp(ops[j].name, ops[i].name + 5) == 0)
                    ok = lists_reads ? listed_reads(&g->ops[i], &g->ops[j], &ops[i], &ops[j])
                                     : list_split(&g->ops[i].deps, ops[j].inputs) &&
                                           list_split(&g->ops[i].deps, ops[j].outputs);
    if (ok && n_ops > 1)
        qsort(g->ops, (size_t)n_ops, sizeof *g->ops, by_exec);
    for (int i = 0; ok && i < n_ops; i++)
        ok = names_set(&g->index, g->ops[i].name, i + 1);
    if (!ok) {
        diff_graph_free(g);
        return NULL;
    }
    return g;
}

/* ---- a step -------------------------------------------------------------------------- */

static bool compared(const diff_row *r)
{
    return r->status == DIFF_COMPARED || r->status == DIFF_SHAPE;
}

/* One op at its place in the step: its table entry (or NULL) and its rows. */
static void visit(diff_graph *g, const gop *op, diff_row *rows, int n)
{
    bool in_bad = false, known = false, out_bad = false;
    if (op) {
        for (int k = 0; k < op->deps.n; k++) {
            int f = names_get(&g->flags, op->deps.s[k]);
            in_bad |= f & TAINT;
            known |= f & KNOWN;
        }
        for (int k = 0; k < op->state.n; k++)
            in_bad |= names_get(&g->flags, op->state.s[k]) & TAINT;
    } else {
        /* Not in the table: its dumped inputs; a parameter or gradient taken
         * at the step's end is the named tensor itself. */
        for (int k = 0; k < n; k++) {
            const bool snapshot = rows[k].info->exec_index < 0;
            if (rows[k].info->io == DUMP_IN || snapshot) {
                int f = names_get(&g->flags, rows[k].info->tensor);
                in_bad |= f & TAINT;
                known |= f & KNOWN;
            }
        }
    }
    for (int k = 0; k < n; k++) {
        diff_row *r = &rows[k];
        if (r->info->io != DUMP_IN || !compared(r))
            continue;
        known = true;
        r->verdict = !r->differs ? DIFF_SAME
                     : names_get(&g->flags, r->info->tensor) & TAINT ? DIFF_INHERITED
                                                                     : DIFF_ROOT;
        in_bad |= r->differs;
        names_set(&g->flags, r->info->tensor,
                  names_get(&g->flags, r->info->tensor) | KNOWN | (r->differs ? TAINT : 0));
    }
    for (int k = 0; k < n; k++) {
        diff_row *r = &rows[k];
        if (r->info->io != DUMP_OUT || !compared(r))
            continue;
        r->verdict = !r->differs ? DIFF_SAME : in_bad ? DIFF_INHERITED : DIFF_ROOT;
        r->unchecked_inputs = r->verdict == DIFF_ROOT && !known;
        out_bad |= r->differs;
    }
    const int taint = in_bad || out_bad ? TAINT : 0;
    for (int k = 0; op && k < op->outs.n; k++)
        names_set(&g->flags, op->outs.s[k], taint);
    for (int k = 0; k < n; k++)
        if (rows[k].info->io == DUMP_OUT && compared(&rows[k]))
            names_set(&g->flags, rows[k].info->tensor, taint | KNOWN);
    for (int k = 0; op && k < op->state.n; k++)
        names_set(&g->flags, op->state.s[k], names_get(&g->flags, op->state.s[k]) | taint);
}

void diff_graph_step(diff_graph *g, diff_row *rows, int n_rows)
{
    for (int i = 0; i < n_rows; i++)
        rows[i].verdict = DIFF_NONE;
    /* Groups: consecutive rows of one op. The first group of an op in the
     * table is visited with its entry, the others at their own place. */
    int *lo = malloc((size_t)(g->n_ops ? g->n_ops : 1) * sizeof *lo);
    int *hi = malloc((size_t)(g->n_ops ? g->n_ops : 1) * sizeof *hi);
    int *loose = malloc((size_t)(n_rows ? n_rows : 1) * sizeof *loose);   /* group starts */
    int n_loose = 0;
    if (!lo || !hi || !loose) {
        free(lo);
        free(hi);
        free(loose);
        return;   /* out of memory: no verdicts */
    }
    for (int k = 0; k < g->n_ops; k++) {
        lo[k] = hi[k] = -1;
        for (int j = 0; g->ops[k].backward && j < g->ops[k].outs.n; j++)   /* gradients: afresh */
            names_set(&g->flags, g->ops[k].outs.s[j],
                      names_get(&g->flags, g->ops[k].outs.s[j]) & KNOWN);
    }
    for (int at = 0, end; at < n_rows; at = end) {
        for (end = at + 1; end < n_rows && strcmp(rows[end].op, rows[at].op) == 0;)
            end++;
        int k = names_get(&g->index, rows[at].op) - 1;
        if (k >= 0 && lo[k] < 0) {
            lo[k] = at;
            hi[k] = end;
        } else {
            loose[n_loose++] = at;
        }
    }
    for (int k = 0, j = 0; k < g->n_ops || j < n_loose;) {
        if (j < n_loose && (k == g->n_ops || rows[loose[j]].order < g->ops[k].exec)) {
            int at = loose[j++], end = at + 1;
            while (end < n_rows && strcmp(rows[end].op, rows[at].op) == 0)
                end++;
            visit(g, NULL, rows + at, end - at);
        } else {
            visit(g, &g->ops[k], lo[k] >= 0 ? rows + lo[k] : NULL, lo[k] >= 0 ? hi[k] - lo[k] : 0);
            k++;
        }
    }
    free(lo);
    free(hi);
    free(loose);
}
