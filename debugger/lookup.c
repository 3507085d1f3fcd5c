/*
 * lookup.c — finding what users name: ops of the step, tensors by the
 * names they type, suggestions for typos, and the per-tensor statistics
 * history behind `trend` (a ring buffer per tensor, found by hash).
 */
#include "names.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>

#define TREND_SLOTS 4096 /* a power of two, above DBG_MAX_TRENDS */

const char *dbg_short_path(const char *file)
{
    /* build paths are absolute; from the project's folders on is enough */
    static const char *const roots[] = { "examples/", "tests/", "engine/", "bench/" };
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        const char *p = file ? strstr(file, roots[i]) : NULL;
        if (p)
            return p;
    }
    return file ? file : "?";
}

int dbg_op_names(const char **names)
{
    int n = 0;
    for (int i = 0; i < dbg.n_ops; i++)
        names[n++] = dbg.ops[i].name;
    for (int i = 0; i < dbg.n_last_ops; i++)
        names[n++] = dbg.last_ops[i].name;
    return n;
}

const dbg_op *dbg_op_find(const char *name)
{
    for (int i = dbg.n_ops - 1; i >= 0; i--)
        if (strcmp(dbg.ops[i].name, name) == 0)
            return &dbg.ops[i];
    for (int i = dbg.n_last_ops - 1; i >= 0; i--)
        if (strcmp(dbg.last_ops[i].name, name) == 0)
            return &dbg.last_ops[i];
    return NULL;
}

/* Is t one of the tensors of the op being stopped at? Those are readable
 * even when graph mode reuses their memory later. */
static bool in_current_record(const te_tensor *t)
{
    const te_op_record *r = dbg_stopped_at();
    if (!r)
        return false;
    for (int i = 0; i < r->n_inputs; i++)
        if (r->inputs[i] == t)
            return true;
    for (int i = 0; i < r->n_outputs; i++)
        if (r->outputs[i] == t)
            return true;
    for (int i = 0; i < r->n_reads; i++)
        if (r->reads[i] == t)
            return true;
    return false;
}

static const te_tensor *readable(const te_tensor *t, const char *name, char *err, size_t n)
{
    if (!t) {
        snprintf(err, n, "%s is empty (no gradient reached it)", name);
        return NULL;
    }
    if (!t->data) {
        snprintf(err, n, "%s is not in memory: graph mode fused it away (set a breakpoint on its op "
                 "to keep it)", name);
        return NULL;
    }
    if ((t->flags & TE_TENSOR_TRANSIENT) && !in_current_record(t)) {
        snprintf(err, n, "%s was freed after its last use in graph mode (set a breakpoint on its op "
                 "to keep it)", name);
        return NULL;
    }
    return t;
}

/* Every op and tensor name of the current step, for suggestions. */
static int all_names(const char **names, int max, bool ops_only)
{
    int n = 0;
    for (int i = 0; i < dbg.n_ops && n < max; i++) {
        names[n++] = dbg.ops[i].name;
        for (int k = 0; k < dbg.ops[i].n_out && !ops_only && n < max; k++)
            names[n++] = dbg.ops[i].out_name[k];
    }
    if (ops_only) /* and the ops of the first step, once known: those to come in this one */
        n += te_names_list(names + n, NULL, max - n);
    te_tensor **p = te_params();
    for (int i = 0; i < te_param_count() && !ops_only && n < max; i++)
        names[n++] = p[i]->name;
    return n;
}

static void not_found(const char *what, const char *name, bool ops_only, char *err, size_t n)
{
    static const char *names[2 * DBG_MAX_OPS];
    int k = all_names(names, 2 * DBG_MAX_OPS, ops_only);
    const char *near = te_suggest(name, names, k, TE_NEAR);
    snprintf(err, n, "no %s '%s' in this step%s%s%s", what, name, near ? " (did you mean " : "", near ? near : "",
             near ? "?)" : "");
}

/* In the first step the op names are known only as far as ops ran. */
static void not_run_first(const char *op, char *err, size_t n)
{
    static const char *names[2 * DBG_MAX_OPS];
    int k = all_names(names, 2 * DBG_MAX_OPS, true);
    const char *near = te_suggest(op, names, k, TE_NEAR);
    snprintf(err, n, "no op '%s' has run yet in step %lld, the first (ops are known once they ran%s%s%s)", op,
             (long long)dbg.step, near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
}

const te_tensor *dbg_tensor_find(const char *name, char *err, size_t errlen)
{
    if (strncmp(name, "param:", 6) == 0) {
        te_tensor *p = te_param_find(name + 6);
        if (p)
            return p;
        not_found("parameter", name, false, err, errlen);
        return NULL;
    }
    if (strncmp(name, "grad:", 5) == 0) {
        te_tensor *p = te_param_find(name + 5);
        if (p)
            return readable(p->grad, name, err, errlen);
    }
    /* A tensor by its own name, among this step's ops' inputs, outputs and reads. */
    for (int i = dbg.n_ops - 1; i >= 0; i--) {
        const dbg_op *o = &dbg.ops[i];
        for (int k = 0; k < o->n_out; k++)
            if (strcmp(o->out_name[k], name) == 0)
                return readable(o->out[k], name, err, errlen);
        for (int k = 0; k < o->n_in; k++)
            if (strcmp(o->in_name[k], name) == 0)
                return readable(o->in[k], name, err, errlen);
        for (int k = 0; k < o->n_reads; k++) /* a backward op's reads: saved state too */
            if (strcmp(o->read_name[k], name) == 0)
                return readable(o->reads[k], name, err, errlen);
    }
    /* OP:inK, OP:outK */
    const char *colon = strrchr(name, ':');
    char op[TE_NAME_MAX];
    int slot;
    char kind[4] = "";
    if (colon && (size_t)(colon - name) < sizeof op && sscanf(colon + 1, "%3[inout]%d", kind, &slot) == 2 &&
        (strcmp(kind, "in") == 0 || strcmp(kind, "out") == 0)) {
        memcpy(op, name, (size_t)(colon - name));
        op[colon - name] = '\0';
        const dbg_op *o = NULL;
        for (int i = dbg.n_ops - 1; i >= 0 && !o; i--)
            if (strcmp(dbg.ops[i].name, op) == 0)
                o = &dbg.ops[i];
        if (!o) {
            bool ran = dbg_op_find(op) || te_names_count(op) > 0;
            if (ran && dbg.in_step)
                snprintf(err, errlen, "%s has not run yet in step %lld", op, (long long)dbg.step);
            else if (ran)
                snprintf(err, errlen, "%s ran in the last step, whose tensors are gone; stop in a step "
                         "(break %s) to look at them", op, op);
            else if (dbg.in_step && !te_names_known())
                not_run_first(op, err, errlen);
            else
                not_found("op", op, true, err, errlen);
            return NULL;
        }
        bool in = kind[0] == 'i';
        int n = in ? o->n_in : o->n_out;
        if (slot < 0 || slot >= n) {
            snprintf(err, errlen, "%s has %d %s (%s0..%s%d)", op, n, in ? "inputs" : "outputs", kind, kind, n - 1);
            return NULL;
        }
        return readable(in ? o->in[slot] : o->out[slot], name, err, errlen);
    }
    not_found("tensor", name, false, err, errlen);
    return NULL;
}

/* ---- trends ---------------------------------------------------------------- */

static int slots[TREND_SLOTS]; /* trend index + 1; 0 empty */

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

void dbg_trends_clear(void)
{
    for (int i = 0; i < dbg.n_trends; i++)
        if (dbg.trends[i].prev)
            te_tensor_free(dbg.trends[i].prev);
    memset(slots, 0, sizeof slots);
    if (dbg.trends)
        memset(dbg.trends, 0, (size_t)dbg.n_trends * sizeof *dbg.trends);
    dbg.n_trends = 0;
}

dbg_trend *dbg_trend_get(const char *name, bool create)
{
    for (uint32_t j = hash(name) & (TREND_SLOTS - 1);; j = (j + 1) & (TREND_SLOTS - 1)) {
        if (!slots[j]) {
            if (!create || dbg.n_trends == DBG_MAX_TRENDS)
                return NULL;
            dbg_trend *t = &dbg.trends[dbg.n_trends++];
            snprintf(t->name, sizeof t->name, "%s", name);
            slots[j] = dbg.n_trends;
            return t;
        }
        dbg_trend *t = &dbg.trends[slots[j] - 1];
        if (strcmp(t->name, name) == 0)
            return t;
    }
}

void dbg_trend_add(const char *name, int64_t step, const te_stats *s)
{
    dbg_trend *t = dbg_trend_get(name, true);
    if (!t)
        return;
    /* one entry per step: a tensor checked twice in a step keeps the last */
    int last = (t->head + DBG_TREND_STEPS - 1) % DBG_TREND_STEPS;
    if (t->n && t->step[last] == step) {
        t->s[last] = *s;
        return;
    }
    t->step[t->head] = step;
    t->s[t->head] = *s;
    t->head = (t->head + 1) % DBG_TREND_STEPS;
    if (t->n < DBG_TREND_STEPS)
        t->n++;
}
