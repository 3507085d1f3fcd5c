/* nest.c — self time. The ops of one thread (pid, tid) form a forest:
 * sorted by start (longest first on a tie), each op is the child of the
 * innermost open op that contains it; of two ops with the same span, the
 * one later in the file is the parent (an op is written when it ends, and
 * a parent ends after its children). An op's self time is its duration
 * less its direct children's. Two ops of one thread that overlap without
 * one containing the other cannot come from one call stack: the trace is
 * refused, naming both. */
#include "prof.h"

#include <stdlib.h>
#include <string.h>

static int by_thread_start(const void *pa, const void *pb)
{
    const prof_event *a = *(prof_event *const *)pa, *b = *(prof_event *const *)pb;
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    if (a->tid != b->tid)
        return a->tid < b->tid ? -1 : 1;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    if (a->dur != b->dur)
        return a->dur > b->dur ? -1 : 1;
    return a->index > b->index ? -1 : a->index < b->index;   /* the same span: the later event is the parent */
}

bool prof_nest(prof_trace *t, char *err, size_t n)
{
    prof_event **ops = malloc((t->n_ops ? t->n_ops : 1) * sizeof *ops);
    prof_event **stack = malloc((t->n_ops ? t->n_ops : 1) * sizeof *stack);
    if (!ops || !stack) {
        free(ops);
        free(stack);
        snprintf(err, n, "%s: out of memory", t->file);
        return false;
    }
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].cat == PROF_OP)
            ops[k++] = &t->ev[i];
    qsort(ops, k, sizeof *ops, by_thread_start);
    size_t depth = 0;
    bool ok = true;
    t->n_threads = 0;
    for (size_t i = 0; i < k && ok; i++) {
        prof_event *e = ops[i];
        if (i == 0 || e->pid != ops[i - 1]->pid || e->tid != ops[i - 1]->tid) {
            depth = 0;
            t->n_threads++;
        }
        while (depth > 0 && stack[depth - 1]->ts + stack[depth - 1]->dur <= e->ts + PROF_NEST_EPS_US)
            depth--;
        if (depth > 0) {
            prof_event *p = stack[depth - 1];
            if (e->ts + e->dur > p->ts + p->dur + PROF_NEST_EPS_US) {
                snprintf(err, n, "%s: event %zu: op \"%s\" overlaps op \"%s\" (event %zu) on thread %lld "
                         "without nesting in it", t->file, e->index, e->name, p->name, p->index, (long long)e->tid);
                ok = false;
                break;
            }
            p->self -= e->dur;
            if (p->self < 0)   /* children within the slack of their parent's end */
                p->self = 0;
        }
        stack[depth++] = e;
    }
    free(ops);
    free(stack);
    return ok;
}
