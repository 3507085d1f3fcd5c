/*
 * verdict.c — created here or inherited: whether an op made the NaN or Inf
 * in one of its outputs, or received it through an input or, in backward,
 * through a forward tensor its kernel reads.
 */
#include "dbg.h"

#include <string.h>

static bool nonfinite(const te_tensor *t)
{
    if (!t || !t->data || !te_dtype_is_float(t->dtype))
        return false;
    te_stats s;
    te_stats_quick(t, &s);
    return s.nan || s.inf;
}

dbg_origin_kind dbg_origin_of(const te_op_record *rec, const te_tensor *bad, dbg_origin *o)
{
    *o = (dbg_origin){ .kind = DBG_ORIGIN_NONE };
    if (!nonfinite(bad))
        return o->kind;
    for (int i = 0; i < rec->n_inputs; i++)
        if (nonfinite(rec->inputs[i])) {
            o->kind = DBG_ORIGIN_PROPAGATED;
            snprintf(o->from, sizeof o->from, "%s", rec->inputs[i]->name);
            return o->kind;
        }
    for (int i = 0; i < rec->n_reads; i++)
        if (nonfinite(rec->reads[i])) {
            o->kind = DBG_ORIGIN_PROPAGATED;
            o->from_read = true;
            snprintf(o->from, sizeof o->from, "%s", rec->reads[i]->name);
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
