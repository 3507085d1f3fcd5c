/* trace.c — prof_trace_load: reads a Chrome trace event file with jansson
 * and checks each event the tool uses ("X" events of the categories step,
 * phase and op), so that the tables can trust every field: a wrong type,
 * a missing field, a negative or huge time ends the load with a message
 * naming the event. Counter ("C"), metadata ("M") and other events, and
 * "X" events of other categories, are skipped unread. */
#include "prof.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* "FILE: [event N: ]why" into err; returns false. */
static bool fail(char *err, size_t n, const char *file, long long index, const char *fmt, ...)
{
    int k = index >= 0 ? snprintf(err, n, "%s: event %lld: ", file, index) : snprintf(err, n, "%s: ", file);
    if (k < 0 || (size_t)k >= n)
        return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, n - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}

typedef struct loader {
    const char *file;
    size_t index;
    char *err;
    size_t n;
} loader;

/* A time field (ts, dur): a number in [0, PROF_MAX_US]. */
static bool get_time(loader *l, json_t *ev, const char *key, double *v)
{
    json_t *j = json_object_get(ev, key);
    if (!j)
        return fail(l->err, l->n, l->file, (long long)l->index, "\"%s\" is missing", key);
    if (!json_is_number(j))
        return fail(l->err, l->n, l->file, (long long)l->index, "\"%s\" is not a number", key);
    *v = json_number_value(j);
    if (!isfinite(*v) || *v > PROF_MAX_US)
        return fail(l->err, l->n, l->file, (long long)l->index, "\"%s\" is too large (%g us)", key, *v);
    if (*v < 0)
        return fail(l->err, l->n, l->file, (long long)l->index, "\"%s\" is negative (%g)", key, *v);
    return true;
}

/* An integer field (pid, tid) of ev, or of args with prefix "args.". */
static bool get_int(loader *l, json_t *obj, const char *prefix, const char *key, bool required, int64_t *v,
                    bool *has)
{
    json_t *j = json_object_get(obj, key);
    if (has)
        *has = j != NULL;
    if (!j) {
        if (required)
            return fail(l->err, l->n, l->file, (long long)l->index, "\"%s%s\" is missing", prefix, key);
        return true;
    }
    if (!json_is_integer(j))
        return fail(l->err, l->n, l->file, (long long)l->index, "\"%s%s\" is not an integer", prefix, key);
    *v = json_integer_value(j);
    return true;
}

/* An optional string of args; NULL when absent. */
static bool get_str(loader *l, json_t *args, const char *key, const char **v)
{
    json_t *j = args ? json_object_get(args, key) : NULL;
    *v = NULL;
    if (!j)
        return true;
    if (!json_is_string(j))
        return fail(l->err, l->n, l->file, (long long)l->index, "\"args.%s\" is not a string", key);
    *v = json_string_value(j);
    return true;
}

/* An optional args.KEY (hooks_ns, data_ns, dump_ns): a number of ns, 0 to
 * PROF_MAX_US * 1000; stored in us. */
static bool get_ns(loader *l, json_t *args, const char *key, double *us)
{
    json_t *j = args ? json_object_get(args, key) : NULL;
    *us = 0;
    if (!j)
        return true;
    if (!json_is_number(j))
        return fail(l->err, l->n, l->file, (long long)l->index, "\"args.%s\" is not a number", key);
    double v = json_number_value(j);
    if (!isfinite(v) || v < 0 || v > PROF_MAX_US * 1e3)
        return fail(l->err, l->n, l->file, (long long)l->index, "\"args.%s\" is out of range (%g)", key, v);
    *us = v / 1e3;
    return true;
}

/* Reads one "X" event of a known category into e. */
static bool read_x(loader *l, json_t *ev, prof_cat cat, prof_event *e)
{
    memset(e, 0, sizeof *e);
    e->index = l->index;
    e->cat = cat;
    json_t *name = json_object_get(ev, "name");
    if (!name)
        return fail(l->err, l->n, l->file, (long long)l->index, "\"name\" is missing");
    if (!json_is_string(name))
        return fail(l->err, l->n, l->file, (long long)l->index, "\"name\" is not a string");
    e->name = json_string_value(name);
    if (!get_time(l, ev, "ts", &e->ts) || !get_time(l, ev, "dur", &e->dur))
        return false;
    if (e->ts + e->dur > PROF_MAX_US)
        return fail(l->err, l->n, l->file, (long long)l->index, "ends too late (ts + dur = %g us)", e->ts + e->dur);
    e->self = e->dur;
    if (!get_int(l, ev, "", "pid", true, &e->pid, NULL) || !get_int(l, ev, "", "tid", true, &e->tid, NULL))
        return false;
    json_t *args = json_object_get(ev, "args");
    if (args && !json_is_object(args))
        return fail(l->err, l->n, l->file, (long long)l->index, "\"args\" is not an object");
    if (args && !get_int(l, args, "args.", "step", false, &e->step, &e->has_step))
        return false;
    if (e->has_step && e->step < 0)
        return fail(l->err, l->n, l->file, (long long)l->index, "\"args.step\" is negative (%lld)",
                    (long long)e->step);
    if (cat != PROF_OP && !e->has_step)
        return fail(l->err, l->n, l->file, (long long)l->index, "a %s event needs \"args.step\"",
                    cat == PROF_STEP ? "step" : "phase");
    if (!get_str(l, args, "type", &e->type) || !get_str(l, args, "phase", &e->phase) ||
        !get_str(l, args, "kernel", &e->kernel))
        return false;
    if (cat == PROF_STEP && !get_ns(l, args, "dump_ns", &e->dump))
        return false;
    if (cat == PROF_PHASE) {
        if (!get_ns(l, args, "hooks_ns", &e->hooks) || !get_ns(l, args, "data_ns", &e->data))
            return false;
        /* exact ns from the writer; 1 ns of slack for another writer's rounding */
        if (e->hooks + e->data > e->dur + 1e-3)
            return fail(l->err, l->n, l->file, (long long)l->index,
                        "\"args.hooks_ns\" + \"args.data_ns\" (%g us) exceed the phase's dur (%g us)",
                        e->hooks + e->data, e->dur);
    }
    json_t *flops = args ? json_object_get(args, "flops") : NULL;
    if (flops) {
        if (!json_is_number(flops))
            return fail(l->err, l->n, l->file, (long long)l->index, "\"args.flops\" is not a number");
        e->flops = json_number_value(flops);
        if (!isfinite(e->flops) || e->flops < 0 || e->flops > 1e30)
            return fail(l->err, l->n, l->file, (long long)l->index, "\"args.flops\" is out of range (%g)", e->flops);
        e->has_flops = true;
    }
    json_t *bytes = args ? json_object_get(args, "bytes") : NULL;
    if (bytes) {
        if (!json_is_number(bytes))
            return fail(l->err, l->n, l->file, (long long)l->index, "\"args.bytes\" is not a number");
        e->bytes = json_number_value(bytes);
        if (!isfinite(e->bytes) || e->bytes < 0 || e->bytes > 1e30)
            return fail(l->err, l->n, l->file, (long long)l->index, "\"args.bytes\" is out of range (%g)", e->bytes);
        e->has_bytes = true;
    }
    return true;
}

/* The category of an "X" event the tool reads, or -1 to skip it. */
static int category(loader *l, json_t *ev)
{
    json_t *cat = json_object_get(ev, "cat");
    if (!cat) {
        fail(l->err, l->n, l->file, (long long)l->index, "\"cat\" is missing");
        return -2;
    }
    if (!json_is_string(cat)) {
        fail(l->err, l->n, l->file, (long long)l->index, "\"cat\" is not a string");
        return -2;
    }
    const char *s = json_string_value(cat);
    return !strcmp(s, "step") ? PROF_STEP : !strcmp(s, "phase") ? PROF_PHASE : !strcmp(s, "op") ? PROF_OP : -1;
}

static bool load_events(prof_trace *t, json_t *events, char *err, size_t n)
{
    size_t count = json_array_size(events);
    t->ev = calloc(count ? count : 1, sizeof *t->ev);
    if (!t->ev)
        return fail(err, n, t->file, -1, "out of memory for %zu events", count);
    loader l = { .file = t->file, .err = err, .n = n };
    for (l.index = 0; l.index < count; l.index++) {
        json_t *ev = json_array_get(events, l.index);
        if (!json_is_object(ev))
            return fail(err, n, t->file, (long long)l.index, "not an object");
        json_t *ph = json_object_get(ev, "ph");
        if (!ph)
            return fail(err, n, t->file, (long long)l.index, "\"ph\" is missing");
        if (!json_is_string(ph))
            return fail(err, n, t->file, (long long)l.index, "\"ph\" is not a string");
        if (strcmp(json_string_value(ph), "X") != 0)
            continue;
        int cat = category(&l, ev);
        if (cat == -2)
            return false;
        if (cat < 0)
            continue;
        if (!read_x(&l, ev, (prof_cat)cat, &t->ev[t->n]))
            return false;
        t->n_steps += cat == PROF_STEP;
        t->n_ops += cat == PROF_OP;
        t->n++;
    }
    return true;
}

bool prof_trace_load(prof_trace *t, const char *file, char *err, size_t n)
{
    memset(t, 0, sizeof *t);
    t->file = strdup(file);
    if (!t->file)
        return fail(err, n, file, -1, "out of memory");
    json_error_t je;
    t->root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    bool ok;
    if (!t->root) {
        if (je.line < 1)   /* jansson's line -1: the file could not be read */
            ok = fail(err, n, file, -1, "%s", je.text);
        else
            ok = fail(err, n, file, -1, "not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    } else {
        json_t *events = json_is_object(t->root) ? json_object_get(t->root, "traceEvents") : NULL;
        if (!json_is_array(events))
            ok = fail(err, n, file, -1, "not a trace: no \"traceEvents\" array at the top level");
        else
            ok = load_events(t, events, err, n);
    }
    if (!ok)
        prof_trace_free(t);
    return ok;
}

void prof_trace_free(prof_trace *t)
{
    free(t->file);
    free(t->ev);
    if (t->root)
        json_decref(t->root);
    memset(t, 0, sizeof *t);
}
