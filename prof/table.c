/* table.c — the ops grouped by name, type or phase, and the per-step
 * breakdown from the step and phase events. */
#include "prof.h"

#include <stdlib.h>
#include <string.h>

const char *const prof_class_names[PROF_CLASS_COUNT] = { "data", "forward", "backward", "update", "hooks", "dump", "other" };

prof_class prof_phase_class(const char *name)
{
    static const struct { const char *name; prof_class cls; } map[] = {
        { "data", PROF_DATA }, { "forward", PROF_FORWARD }, { "backward", PROF_BACKWARD }, { "update", PROF_UPDATE },
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(name, map[i].name))
            return map[i].cls;
    return PROF_OTHER;
}

static const char *key_of(const prof_event *e, prof_key key)
{
    const char *k = key == PROF_BY_NAME ? e->name : key == PROF_BY_TYPE ? e->type
                  : key == PROF_BY_PHASE ? e->phase : e->kernel;
    return k ? k : "-";
}

static prof_key sort_key;   /* qsort's comparison has no context argument */

static int by_key(const void *pa, const void *pb)
{
    const prof_event *a = *(prof_event *const *)pa, *b = *(prof_event *const *)pb;
    return strcmp(key_of(a, sort_key), key_of(b, sort_key));
}

size_t prof_rows(const prof_trace *t, prof_key key, prof_row **rows)
{
    *rows = NULL;
    if (t->n_ops == 0)
        return 0;
    const prof_event **ops = malloc(t->n_ops * sizeof *ops);
    prof_row *r = calloc(t->n_ops, sizeof *r);
    if (!ops || !r) {
        free(ops);
        free(r);
        return 0;
    }
    size_t k = 0, nr = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].cat == PROF_OP)
            ops[k++] = &t->ev[i];
    sort_key = key;
    qsort(ops, k, sizeof *ops, by_key);
    for (size_t i = 0; i < k; i++) {
        const prof_event *e = ops[i];
        const char *name = key_of(e, key);
        if (nr == 0 || strcmp(r[nr - 1].key, name) != 0)
            r[nr++].key = name;
        prof_row *row = &r[nr - 1];
        row->count++;
        row->total += e->dur;
        row->self += e->self;
        if (e->has_flops) {
            row->flops += e->flops;
            row->n_flops++;
            row->flops_us += e->dur;
            if (e->has_bytes) {
                row->bytes += e->bytes;
                row->n_bytes++;
                row->bytes_us += e->dur;
            }
        }
    }
    free(ops);
    *rows = r;
    return nr;
}

double prof_op_time(const prof_trace *t)
{
    double s = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].cat == PROF_OP)
            s += t->ev[i].self;
    return s;
}

static int by_step(const void *pa, const void *pb)
{
    const prof_step *a = pa, *b = pb;
    return a->step < b->step ? -1 : a->step > b->step;
}

/* The step in s[0..n) numbered step (sorted), or NULL. */
static prof_step *find_step(prof_step *s, size_t n, int64_t step)
{
    prof_step key = { .step = step };
    return bsearch(&key, s, n, sizeof *s, by_step);
}

bool prof_steps(const prof_trace *t, prof_step **steps, size_t *n_steps, char *err, size_t n)
{
    *steps = NULL;
    *n_steps = 0;
    if (t->n_steps == 0)
        return true;
    prof_step *s = calloc(t->n_steps, sizeof *s);
    if (!s) {
        snprintf(err, n, "%s: out of memory", t->file);
        return false;
    }
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].cat == PROF_STEP) {
            s[k].step = t->ev[i].step;
            s[k].wall = t->ev[i].dur;
            s[k].cls[PROF_DUMP] = t->ev[i].dump;
            /* the event index rides in cls[0] until the sort is done */
            s[k++].cls[0] = (double)t->ev[i].index;
        }
    qsort(s, k, sizeof *s, by_step);
    for (size_t i = 1; i < k; i++)
        if (s[i].step == s[i - 1].step) {
            snprintf(err, n, "%s: event %zu: step %lld appears twice (event %zu)", t->file,
                     (size_t)(s[i - 1].cls[0] > s[i].cls[0] ? s[i - 1].cls[0] : s[i].cls[0]),
                     (long long)s[i].step, (size_t)(s[i - 1].cls[0] < s[i].cls[0] ? s[i - 1].cls[0] : s[i].cls[0]));
            free(s);
            return false;
        }
    for (size_t i = 0; i < k; i++)
        s[i].cls[0] = 0;
    /* Phases of a step without a step event are left out: they have no wall time to split. */
    for (size_t i = 0; i < t->n; i++) {
        const prof_event *e = &t->ev[i];
        prof_step *st = e->cat == PROF_PHASE ? find_step(s, k, e->step) : NULL;
        if (!st || prof_phase_class(e->name) == PROF_OTHER)
            continue;
        /* the hooks' time and the loader's waits inside a phase go to their own columns */
        double own = e->dur - e->hooks - e->data;
        st->cls[prof_phase_class(e->name)] += own > 0 ? own : 0;
        st->cls[PROF_HOOKS] += e->hooks;
        st->cls[PROF_DATA] += e->data;
    }
    for (size_t i = 0; i < k; i++) {
        /* the dump writer's waits happen inside the hooks: split them off */
        if (s[i].cls[PROF_DUMP] > s[i].cls[PROF_HOOKS])
            s[i].cls[PROF_DUMP] = s[i].cls[PROF_HOOKS];
        s[i].cls[PROF_HOOKS] -= s[i].cls[PROF_DUMP];
        double known = 0;
        for (int c = 0; c < PROF_OTHER; c++)
            known += s[i].cls[c];
        s[i].cls[PROF_OTHER] = s[i].wall - known;   /* phases of other names fall here too */
    }
    *steps = s;
    *n_steps = k;
    return true;
}
