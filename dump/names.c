/*
 * names.c — resolving the names users give tensors (names.h), and the
 * dump_ names of the engine's "did you mean" code (the dump spec's keys,
 * the tools' tensor names, the debugger's commands, ops and conditions).
 */
#include "names.h"
#include "te.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

/* The nearest-word code is the engine's (te.h, engine/names.c): one
 * implementation for the engine's, the dump tools' and the debugger's
 * suggestions. */
int dump_edit_distance(const char *a, const char *b) { return te_edit_distance(a, b); }

const char *dump_suggest(const char *w, const char *const *cands, int n, int max_d)
{
    return te_suggest(w, cands, n, max_d);
}

int dump_nearest(const char *w, const char *const *cands, int n, int *idx, int k)
{
    return te_nearest(w, cands, n, idx, k);
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
