/*
 * verdict.c — created here or inherited: whether an op made the NaN or Inf
 * in one of its outputs, or received it through an input or, in backward,
 * through a forward tensor its kernel reads.
 *
 * Intended values: an op whose op-table row is NONFINITE_OK (an attention
 * mask's -inf) makes its non-finite outputs on purpose. The verdict keeps,
 * through a step, which tensors hold such values (made by such an op, or
 * carried on unchanged in kind: a scale or a reshape of the masked scores
 * still holds the mask's -inf) so that an op turning them into something
 * else (a matmul making NaN from -inf * 0) is the origin of what it made,
 * and an op merely carrying them is no origin at all.
 */
#include "dbg.h"

#include <math.h>
#include <string.h>

#define MAX_INTENDED 512 /* tensors of one step holding intended values; past it they count as unintended */

typedef struct intent {
    const te_tensor *t;
    unsigned kinds; /* DBG_NF_*: what it holds on purpose */
} intent;
static intent intended[MAX_INTENDED];
static int n_intended;

unsigned dbg_nonfinite_kinds(const te_tensor *t)
{
    if (!t || !t->data || !te_dtype_is_float(t->dtype))
        return 0;
    te_stats s;
    te_stats_quick(t, &s);
    return (s.nan ? DBG_NF_NAN : 0) | (s.inf ? DBG_NF_INF : 0);
}

#define SCAN_CHUNK 16384 /* elements dbg_find_nonfinite reads at once */

int64_t dbg_find_nonfinite(const te_tensor *t, int64_t from, unsigned kinds)
{
    static float buf[SCAN_CHUNK];
    for (int64_t at = from < 0 ? t->numel : from; at < t->numel; at += SCAN_CHUNK) {
        int64_t n = t->numel - at < SCAN_CHUNK ? t->numel - at : SCAN_CHUNK;
        if (te_tensor_read_f32(t, at, n, buf) != TE_OK)
            return -1;
        for (int64_t i = 0; i < n; i++)
            if (((kinds & DBG_NF_NAN) && isnan(buf[i])) || ((kinds & DBG_NF_INF) && isinf(buf[i])))
                return at + i;
    }
    return -1;
}

unsigned dbg_verdict_intended(const te_tensor *t)
{
    for (int i = 0; t && i < n_intended; i++)
        if (intended[i].t == t)
            return intended[i].kinds;
    return 0;
}

void dbg_verdict_reset(void) { n_intended = 0; }

static void forget(const te_tensor *t)
{
    for (int i = 0; i < n_intended; i++)
        if (intended[i].t == t) {
            intended[i] = intended[--n_intended];
            return;
        }
}

/* The intended kinds an op's inputs and reads bring in. */
static unsigned carried(const te_op_record *rec)
{
    unsigned k = 0;
    for (int i = 0; i < rec->n_inputs; i++)
        k |= dbg_verdict_intended(rec->inputs[i]);
    for (int i = 0; i < rec->n_reads; i++)
        k |= dbg_verdict_intended(rec->reads[i]);
    return k;
}

void dbg_verdict_note(const te_op_record *rec)
{
    const bool ok = rec->traits & TE_TRAIT_NONFINITE_OK;
    /* Nothing intended comes in and none is made: no pass over the data. */
    const unsigned in = ok ? 0 : carried(rec);
    for (int k = 0; k < rec->n_outputs; k++) {
        const te_tensor *t = rec->outputs[k];
        if (!t)
            continue;
        forget(t); /* a buffer written again holds a new value */
        if (!ok && !in)
            continue;
        unsigned kinds = dbg_nonfinite_kinds(t) & (ok ? DBG_NF_NAN | DBG_NF_INF : in);
        if (kinds && n_intended < MAX_INTENDED)
            intended[n_intended++] = (intent){ t, kinds };
    }
}

/* The first input (reads: read tensor) holding a non-finite value beyond
 * what it holds on purpose (unintended), or holding intended values (not
 * unintended); -1 when none. */
static int first_with(const te_op_record *rec, bool reads, bool unintended)
{
    te_tensor *const *ts = reads ? rec->reads : rec->inputs;
    int n = reads ? rec->n_reads : rec->n_inputs;
    for (int i = 0; i < n; i++) {
        unsigned k = dbg_nonfinite_kinds(ts[i]), mine = dbg_verdict_intended(ts[i]);
        if (unintended ? (k & ~mine) != 0 : mine != 0)
            return i;
    }
    return -1;
}

dbg_origin_kind dbg_origin_of(const te_op_record *rec, const te_tensor *bad, dbg_origin *o)
{
    *o = (dbg_origin){ .kind = DBG_ORIGIN_NONE };
    unsigned kinds = dbg_nonfinite_kinds(bad);
    if (!kinds)
        return o->kind;
    if (rec->traits & TE_TRAIT_NONFINITE_OK) {
        o->kind = DBG_ORIGIN_CREATED;
        o->intended = true;
        return o->kind;
    }
    for (int side = 0; side < 2; side++) {
        int i = first_with(rec, side, true);
        if (i >= 0) {
            o->kind = DBG_ORIGIN_PROPAGATED;
            o->from_read = side;
            snprintf(o->from, sizeof o->from, "%s", (side ? rec->reads : rec->inputs)[i]->name);
            return o->kind;
        }
    }
    /* Every non-finite input holds only intended values. */
    const unsigned in = carried(rec);
    for (int side = 0; side < 2 && in; side++) {
        int i = first_with(rec, side, false);
        if (i < 0)
            continue;
        const char *name = (side ? rec->reads : rec->inputs)[i]->name;
        if (kinds & ~in) { /* it made a kind none of them holds: the -inf became a NaN here */
            o->kind = DBG_ORIGIN_CREATED;
            snprintf(o->despite, sizeof o->despite, "%s", name);
        } else {
            o->kind = DBG_ORIGIN_PROPAGATED;
            o->intended = true;
            o->from_read = side;
            snprintf(o->from, sizeof o->from, "%s", name);
        }
        return o->kind;
    }
    o->kind = DBG_ORIGIN_CREATED;
    return o->kind;
}

const char *dbg_origin_token(const dbg_origin *o, char *buf, size_t n)
{
    switch (o->kind) {
    case DBG_ORIGIN_CREATED: snprintf(buf, n, "created"); break;
    case DBG_ORIGIN_PROPAGATED: snprintf(buf, n, "propagated:%s", o->from); break;
    case DBG_ORIGIN_NONE: snprintf(buf, n, "-"); break;
    }
    return buf;
}
