/* util.c — word helpers for messages. */
#include "dbg.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Levenshtein distance with one row of the table. INT_MAX when out of
 * memory, which reads as "nothing similar". */
int dbg_edit_distance(const char *a, const char *b)
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
