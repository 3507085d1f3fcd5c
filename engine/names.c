/*
 * names.c — checking the names users give ops, when they can be checked.
 *
 * Op types are fixed by the op table, so a type is checked at once
 * (te_op_type_check). Op names exist only once ops have run: the engine
 * keeps the names and types of the first step in which ops ran, and at that
 * step's end checks every pattern registered with te_names_expect. A
 * pattern that matched none of them gets one warning naming it and the
 * closest names; one registered later is checked at once. Breakpoints,
 * `trend` names, --inject and the dump selection all go through here.
 *
 * The edit distance behind every "did you mean" in tdbg lives here too.
 */
#include "te_internal.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- nearest words --------------------------------------------------------- */

/* Levenshtein distance with one row of the table. */
int te_edit_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    int *row = malloc((nb + 1) * sizeof *row);
    if (!row)
        return INT_MAX;
    for (size_t j = 0; j <= nb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0]; /* table[i-1][j-1] */
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    int d = row[nb];
    free(row);
    return d;
}

int te_nearest(const char *w, const char *const *cands, int n, int *idx, int k)
{
    int found = 0, dist[16];
    if (k > 16)
        k = 16;
    for (int i = 0; i < n; i++) {
        int d = te_edit_distance(w, cands[i]), at = found;
        while (at > 0 && dist[at - 1] > d) /* after its equals: ties stay in list order */
            at--;
        if (at == k)
            continue;
        int last = found < k ? found : k - 1;
        memmove(&idx[at + 1], &idx[at], (size_t)(last - at) * sizeof *idx);
        memmove(&dist[at + 1], &dist[at], (size_t)(last - at) * sizeof *dist);
        idx[at] = i;
        dist[at] = d;
        if (found < k)
            found++;
    }
    return found;
}

const char *te_suggest(const char *w, const char *const *cands, int n, int max_d)
{
    int i;
    if (te_nearest(w, cands, n, &i, 1) == 0 || te_edit_distance(w, cands[i]) > max_d)
        return NULL;
    return cands[i];
}

/* ---- op types -------------------------------------------------------------- */

static const char *const update_types[] = { "SGD", "Adam", "AdamW" };
#define N_TYPES (2 * TE_OP_COUNT + (int)(sizeof update_types / sizeof update_types[0]))

int te_op_types(const char **types, int max)
{
    int n = 0;
    for (int op = 0; op < TE_OP_COUNT && n < max; op++)
        types[n++] = te_op_table[op].type;
    for (int op = 0; op < TE_OP_COUNT && n < max; op++)
        types[n++] = te_op_table[op].grad_type;
    for (size_t i = 0; i < sizeof update_types / sizeof update_types[0] && n < max; i++)
        types[n++] = update_types[i];
    return n;
}

bool te_op_type_check(const char *type, char *msg, size_t n)
{
    const char *types[N_TYPES];
    int k = te_op_types(types, N_TYPES);
    for (int i = 0; i < k; i++)
        if (strcmp(types[i], type) == 0)
            return true;
    int idx[3];
    int near = te_nearest(type, types, k, idx, 3);
    int len = snprintf(msg, n, "no op type '%s'; the closest: ", type);
    for (int i = 0; i < near && len >= 0 && (size_t)len < n; i++)
        len += snprintf(msg + len, n - (size_t)len, "%s%s", i ? ", " : "", types[idx[i]]);
    return false;
}

/* ---- op names, once known -------------------------------------------------- */

typedef struct {
    int id;              /* 0: a free slot */
    char *label, *pattern;
    te_names_sink sink;
    void *user;
} expectation;

#define MAX_EXPECT 256
static expectation expects[MAX_EXPECT];
static int next_id = 1; /* handles are ids, never reused: a stale one forgets nothing */

static struct {
    bool known;          /* the first step's ops are all in */
    bool seeing;         /* ops of first_step are coming in */
    int64_t first_step;
    char **names;        /* distinct op names, in the order they first ran */
    const char **types;  /* their types (static strings of the engine) */
    int n, cap;
    int n_ops;           /* ops that ran in that step (a name may repeat) */
} seen;

bool te_names_known(void) { return seen.known; }

int te_names_list(const char **names, const char **types, int max)
{
    int n = seen.known ? seen.n : 0;
    if (n > max)
        n = max;
    for (int i = 0; i < n; i++) {
        if (names)
            names[i] = seen.names[i];
        if (types)
            types[i] = seen.types[i];
    }
    return n;
}

static bool matches(const char *pattern, int i)
{
    if (strncmp(pattern, "type:", 5) == 0)
        return strcmp(pattern + 5, seen.types[i]) == 0;
    return fnmatch(pattern, seen.names[i], 0) == 0;
}

int te_names_count(const char *pattern)
{
    int c = 0;
    for (int i = 0; seen.known && i < seen.n; i++)
        c += matches(pattern, i);
    return c;
}

/* The distinct strings of list[n] into set (room for n); returns how many. */
static int distinct(const char *const *list, int n, const char **set)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < k && strcmp(set[j], list[i]) != 0)
            j++;
        if (j == k)
            set[k++] = list[i];
    }
    return k;
}

bool te_names_unmatched(const char *label, const char *pattern, char *msg, size_t len)
{
    if (!seen.known || te_names_count(pattern) > 0)
        return false;
    bool by_type = strncmp(pattern, "type:", 5) == 0;
    const char *want = by_type ? pattern + 5 : pattern;
    const char **words = malloc(((size_t)seen.n + 1) * sizeof *words);
    int nw = words ? distinct(by_type ? seen.types : (const char *const *)seen.names, seen.n, words) : 0;
    int idx[3], k = te_nearest(want, words, nw, idx, 3);
    int at = snprintf(msg, len, "%s matched none of the %d ops of step %" PRId64 "; the closest op %s: ", label,
                      seen.n_ops, seen.first_step, by_type ? "types" : "names");
    for (int i = 0; i < k && at >= 0 && (size_t)at < len; i++)
        at += snprintf(msg + at, len - (size_t)at, "%s%s", i ? ", " : "", words[idx[i]]);
    free(words);
    return true;
}

static void drop(expectation *e)
{
    free(e->label);
    free(e->pattern);
    *e = (expectation){ 0 };
}

static void check(expectation *e)
{
    char msg[1024];
    if (!te_names_unmatched(e->label, e->pattern, msg, sizeof msg))
        return;
    if (e->sink)
        e->sink(msg, e->user);
    else
        TE_LOG(TE_LOG_ENGINE, TE_LOG_WARN, "warning: %s", msg);
}

int te_names_expect(const char *label, const char *pattern, te_names_sink sink, void *user)
{
    for (int h = 0; h < MAX_EXPECT; h++) {
        expectation *e = &expects[h];
        if (e->id)
            continue;
        e->label = strdup(label);
        e->pattern = strdup(pattern);
        if (!e->label || !e->pattern) {
            free(e->label);
            free(e->pattern);
            te_set_error(TE_ERR_NOMEM, "te_names_expect: out of memory");
            return -1;
        }
        e->sink = sink;
        e->user = user;
        e->id = next_id++;
        int id = e->id;
        if (seen.known) { /* knowable now: checked now, once */
            check(e);
            drop(e);
        }
        return id;
    }
    te_set_error(TE_ERR_STATE, "te_names_expect: more than %d names wait for the first step", MAX_EXPECT);
    return -1;
}

void te_names_forget(int handle)
{
    for (int h = 0; handle > 0 && h < MAX_EXPECT; h++)
        if (expects[h].id == handle)
            drop(&expects[h]);
}

void te_names_seen(const te_op_record *rec)
{
    if (seen.known || (seen.seeing && rec->step != seen.first_step) || !te_in_step())
        return;
    if (!seen.seeing) {
        seen.seeing = true;
        seen.first_step = rec->step;
    }
    seen.n_ops++;
    for (int i = 0; i < seen.n; i++)
        if (strcmp(seen.names[i], rec->name) == 0)
            return;
    if (seen.n == seen.cap) {
        int cap = seen.cap ? 2 * seen.cap : 64;
        char **names = realloc(seen.names, (size_t)cap * sizeof *names);
        if (names)
            seen.names = names;
        const char **types = names ? realloc(seen.types, (size_t)cap * sizeof *types) : NULL;
        if (!types)
            return; /* out of memory: this name goes unlisted */
        seen.types = types;
        seen.cap = cap;
    }
    if ((seen.names[seen.n] = strdup(rec->name)) != NULL)
        seen.types[seen.n++] = rec->type;
}

void te_names_step_end(void)
{
    if (seen.known || !seen.seeing)
        return;
    seen.known = true;
    for (int h = 0; h < MAX_EXPECT; h++)
        if (expects[h].id) {
            check(&expects[h]);
            drop(&expects[h]);
        }
}

void te_names_reset(void)
{
    for (int h = 0; h < MAX_EXPECT; h++)
        if (expects[h].id)
            drop(&expects[h]);
    for (int i = 0; i < seen.n; i++)
        free(seen.names[i]);
    free(seen.names);
    free(seen.types);
    memset(&seen, 0, sizeof seen);
}
