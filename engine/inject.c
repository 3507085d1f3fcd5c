/*
 * inject.c — fault injection: alter one op's output at one step so that a
 * debugger or a diff has a known answer to find, or crash the program
 * inside one op (segv, abort, fpe) for the debugger's crash report, or
 * end it there with SIGKILL (kill: a rank lost to the OOM killer).
 * Spec: "KIND@op=GLOB,step=N[,value=X][,index=I][,rank=R]" (rank: data
 * parallel, that rank only; every rank by default).
 */
#include "te_internal.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    INJ_NAN, INJ_INF, INJ_SCALE, INJ_NOISE, INJ_ZERO, INJ_SEGV, INJ_ABORT, INJ_FPE, INJ_KILL, INJ_COUNT
} inject_kind;

static const char *const kind_names[] = { "nan", "inf", "scale", "noise", "zero", "segv", "abort", "fpe", "kill" };
_Static_assert(sizeof kind_names / sizeof kind_names[0] == INJ_COUNT, "a name for every kind");

/* The crash kinds crash as the op starts its kernel, instead of altering its output. */
static bool is_crash(inject_kind k) { return k == INJ_SEGV || k == INJ_ABORT || k == INJ_FPE || k == INJ_KILL; }

typedef struct {
    inject_kind kind;
    char glob[TE_NAME_MAX];
    int64_t step;
    float value;
    int64_t index;
    int rank;         /* data parallel: the one rank it applies on; -1: every rank */
    char spec[512];   /* as given, for messages */
    int names_handle; /* te_names_expect: warned when the glob matches no op */
} injection;

#define MAX_INJECTIONS 16
static injection injections[MAX_INJECTIONS];
int te_inject_count;

static te_status bad(const char *spec, const char *token, const char *why)
{
    te_set_error(TE_ERR_ARG, "--inject '%s': %s '%s' (expected KIND@op=GLOB,step=N[,value=X][,index=I][,rank=R] "
                 "with KIND nan, inf, scale, noise, zero, segv, abort, fpe or kill)", spec, why, token);
    return TE_ERR_ARG;
}

te_status te_inject_add(const char *spec)
{
    if (te_inject_count == MAX_INJECTIONS) {
        te_set_error(TE_ERR_ARG, "--inject '%s': at most %d injections", spec, MAX_INJECTIONS);
        return TE_ERR_ARG;
    }
    injection in = { .step = -1, .value = NAN, .index = 0, .rank = -1 };
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    char *at = strchr(buf, '@');
    if (!at)
        return bad(spec, buf, "missing '@' after kind");
    *at = '\0';
    int k;
    for (k = 0; k < INJ_COUNT; k++)
        if (strcmp(buf, kind_names[k]) == 0)
            break;
    if (k == INJ_COUNT)
        return bad(spec, buf, "unknown kind");
    in.kind = (inject_kind)k;
    char *save = NULL;
    for (char *item = strtok_r(at + 1, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq)
            return bad(spec, item, "expected key=value, got");
        *eq = '\0';
        const char *val = eq + 1;
        char *end;
        errno = 0;
        if (strcmp(item, "op") == 0) {
            if (!*val)
                return bad(spec, item, "empty glob in");
            snprintf(in.glob, sizeof in.glob, "%s", val);
        } else if (strcmp(item, "step") == 0) {
            in.step = strtoll(val, &end, 10);
            if (*end || end == val || errno || in.step < 0)
                return bad(spec, val, "bad step");
        } else if (strcmp(item, "value") == 0) {
            in.value = strtof(val, &end);
            if (*end || end == val)
                return bad(spec, val, "bad value");
        } else if (strcmp(item, "index") == 0) {
            in.index = strtoll(val, &end, 10);
            if (*end || end == val || in.index < 0)
                return bad(spec, val, "bad index");
        } else if (strcmp(item, "rank") == 0) {
            long r = strtol(val, &end, 10);
            if (*end || end == val || r < 0 || r > 1 << 20)
                return bad(spec, val, "bad rank");
            in.rank = (int)r;
        } else {
            return bad(spec, item, "unknown key");
        }
    }
    if (!in.glob[0])
        return bad(spec, spec, "missing op=GLOB in");
    if (in.step < 0)
        return bad(spec, spec, "missing step=N in");
    if (isnan(in.value))
        in.value = in.kind == INJ_SCALE ? 1000.0f : 0.01f;
    snprintf(in.spec, sizeof in.spec, "%s", spec);
    char label[sizeof in.spec + 16];
    snprintf(label, sizeof label, "--inject '%s'", spec);
    in.names_handle = te_names_expect(label, in.glob, NULL, NULL);
    injections[te_inject_count++] = in;
    return TE_OK;
}

void te_inject_clear(void)
{
    for (int i = 0; i < te_inject_count; i++)
        te_names_forget(injections[i].names_handle);
    te_inject_count = 0;
}

static bool on_this_rank(const injection *in) { return in->rank < 0 || in->rank == te_dist_rank(); }

/* The index is checked where the tensor is known, when the injection
 * applies. An injection is a command-line spec, and an op's result has no
 * way to fail after its kernel ran (the hooks run in every phase and in
 * graph mode's kernel replay), so a spec that cannot be done ends the
 * program the way a bad spec does at start: a message and status 2. Putting
 * the value elsewhere would be a silent lie about where it went. */
static void check_index(const injection *in, const te_op_record *rec, const te_tensor *t)
{
    if (in->index < t->numel)
        return;
    /* The run ends here: an error of the program's, not a log line (TDBG_LOG=off keeps it). */
    fprintf(stderr, "error: --inject '%s': index %" PRId64 " is out of range for %s (output of %s at step %" PRId64
            "), which has %" PRId64 " elements (index 0..%" PRId64 ")\n",
            in->spec, in->index, t->name, rec->name, rec->step, t->numel, t->numel - 1);
    exit(2);
}

/* scale and noise compute new values: on an f16/bf16 tensor they are
 * computed in f32 and rounded once, as an op's result is, so that a value
 * beyond the dtype's range overflows to +-Inf and *st counts it (the
 * altered record's round: `break overflow` sees the injected overflow). */
static bool computes(inject_kind k) { return k == INJ_SCALE || k == INJ_NOISE; }

static float altered_value(const injection *in, float x, uint64_t stream, int64_t i)
{
    return in->kind == INJ_SCALE ? x * in->value
                                 : x + in->value * te_rand_normal(te_seed(), stream, (uint64_t)i);
}

static void alter(const injection *in, te_tensor *t, uint64_t stream, te_round_stats *st)
{
    switch (in->kind) {
    case INJ_NAN:
    case INJ_INF:
        te_set(t, in->index, in->kind == INJ_NAN ? NAN : INFINITY);
        break;
    case INJ_SCALE:
    case INJ_NOISE: {
        /* Altered in f32 on the host, written back through t's backend. */
        float *v = malloc((size_t)t->numel * sizeof *v + 1);
        if (!v) {
            fprintf(stderr, "error: --inject '%s': out of memory altering %s\n", in->spec, t->name);
            exit(2);
        }
        te_copy_to_f32(t, v);
        for (int64_t i = 0; i < t->numel; i++)
            v[i] = altered_value(in, v[i], stream, i);
        if (t->dtype == TE_F16 || t->dtype == TE_BF16)
            te_round_f32(t, v, st);
        else
            te_copy_from_f32(t, v);
        free(v);
        break;
    }
    case INJ_ZERO:
        te_fill(t, 0.0f);
        break;
    case INJ_SEGV: case INJ_ABORT: case INJ_FPE: case INJ_KILL: case INJ_COUNT: /* they crash before the op runs */
        break;
    }
}

bool te_inject_apply(const te_op_record *rec, te_round_stats *round, bool *rounded)
{
    bool altered = false;
    for (int i = 0; i < te_inject_count; i++) {
        const injection *in = &injections[i];
        if (is_crash(in->kind) || in->step != rec->step || !on_this_rank(in) || fnmatch(in->glob, rec->name, 0) != 0)
            continue;
        int slot = 0;
        while (slot < rec->n_outputs && !rec->outputs[slot])
            slot++;
        te_tensor *t = slot < rec->n_outputs ? rec->outputs[slot] : NULL;
        /* Noise drawn from (op name, step): the same in eager and graph mode. */
        uint64_t stream = (uint64_t)rec->step;
        for (const char *c = rec->name; *c; c++)
            stream = stream * 131 + (uint8_t)*c;
        if (t && te_dtype_is_float(t->dtype)) {
            if (in->kind == INJ_NAN || in->kind == INJ_INF)
                check_index(in, rec, t);
            te_round_stats st = { .dtype = TE_F32 };
            alter(in, t, stream, &st);
            if (computes(in->kind) && st.dtype != TE_F32) {
                round[slot] = st;
                *rounded = true;
            }
            altered = true;
        }
    }
    return altered;
}

/* The crashes themselves: noinline, so that a backtrace names them. A
 * store through a NULL pointer the compiler cannot prove NULL; a real
 * integer division trap. UBSan must not turn either into its own report. */
__attribute__((noinline, no_sanitize("null"))) static void crash_segv(void)
{
    volatile int *volatile p = NULL;
    *p = 1;
}

__attribute__((noinline, no_sanitize("integer-divide-by-zero"))) static void crash_fpe(void)
{
    volatile int zero = 0, one = 1, quotient;
    quotient = one / zero;
    (void)quotient;
}

void te_inject_crash(const te_op_record *rec)
{
    for (int i = 0; i < te_inject_count; i++) {
        const injection *in = &injections[i];
        if (!is_crash(in->kind) || in->step != rec->step || !on_this_rank(in) || fnmatch(in->glob, rec->name, 0) != 0)
            continue;
        if (in->kind == INJ_SEGV)
            crash_segv();
        else if (in->kind == INJ_ABORT)
            abort();
        else if (in->kind == INJ_KILL) /* as `kill -9` from outside: no handler runs */
            raise(SIGKILL);
        else
            crash_fpe();
    }
}

/* Graph mode keeps the output of an injected op in memory and unfused, so
 * the injection alters it before the next kernel reads it. */
bool te_inject_targets(const char *op_name)
{
    for (int i = 0; i < te_inject_count; i++)
        if (fnmatch(injections[i].glob, op_name, 0) == 0)
            return true;
    return false;
}

/* The injected op globs, for the key of a compiled variant. */
void te_inject_key(char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < te_inject_count && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s;", injections[i].glob);
}
