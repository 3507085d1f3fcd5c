/*
 * names.c — resolving the names users give tensors (names.h) and the edit
 * distance behind every "did you mean" in tdbg: the dump spec's keys, the
 * tools' tensor names, the debugger's commands, ops and conditions.
 */
#include "names.h"

#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Levenshtein distance with one row of the table. */
int dump_edit_distance(const char *a, const char *b)
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

const char *dump_suggest(const char *w, const char *const *cands, int n, int max_d)
{
    int i;
    if (dump_nearest(w, cands, n, &i, 1) == 0 || dump_edit_distance(w, cands[i]) > max_d)
        return NULL;
    return cands[i];
}

int dump_nearest(const char *w, const char *const *cands, int n, int *idx, int k)
{
    int found = 0, dist[16];
    if (k > 16)
        k = 16;
    for (int i = 0; i < n; i++) {
        int d = dump_edit_distance(w, cands[i]), at = found;
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

bool dump_tensor_name(const char *path, int exec_index, char *buf, size_t n)
{
    const char *leaf = strrchr(path, '/');
    if (path[0] != '/' || !leaf || leaf == path ||
        (strncmp(leaf + 1, "in", 2) != 0 && strncmp(leaf + 1, "out", 3) != 0))
        return false;
    const char *op = path + 1;
    int op_len = (int)(leaf - op), k;
    if (exec_index < 0 && strcmp(leaf + 1, "out0") == 0 &&
        (strncmp(op, "param/", 6) == 0 || strncmp(op, "grad/", 5) == 0)) {
        int kind = op[0] == 'p' ? 5 : 4; /* "param" or "grad" */
        k = snprintf(buf, n, "%.*s:%.*s", kind, op, op_len - kind - 1, op + kind + 1);
    } else {
        k = snprintf(buf, n, "%.*s:%s", op_len, op, leaf + 1);
    }
    return k > 0 && (size_t)k < n;
}

static bool same(const char *pattern, bool glob, const char *s)
{
    return glob ? fnmatch(pattern, s, 0) == 0 : strcmp(pattern, s) == 0;
}

bool dump_name_match(const char *pattern, bool glob, const char *path, int exec_index,
                     const char *stored)
{
    char name[512];
    return same(pattern, glob, path) || (path[0] == '/' && same(pattern, glob, path + 1)) ||
           (dump_tensor_name(path, exec_index, name, sizeof name) && same(pattern, glob, name)) ||
           (stored && stored[0] && same(pattern, glob, stored));
}

void dump_near_init(dump_near *nr, const char *want)
{
    nr->want = want;
    nr->dist = DUMP_NEAR + 1;
    nr->best[0] = '\0';
}

static void offer(dump_near *nr, const char *cand)
{
    int d = dump_edit_distance(nr->want, cand);
    if (d < nr->dist && strlen(cand) < sizeof nr->best) {
        nr->dist = d;
        snprintf(nr->best, sizeof nr->best, "%s", cand);
    }
}

void dump_near_offer(dump_near *nr, const char *path, int exec_index)
{
    char name[512];
    if (dump_tensor_name(path, exec_index, name, sizeof name))
        offer(nr, name);
    offer(nr, nr->want[0] == '/' || path[0] != '/' ? path : path + 1); /* as the user spells it */
}
