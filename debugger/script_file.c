/* script_file.c — the lines of a `-x FILE`, read the same way by the
 * launcher (tdbg.c) and by `tdbg attach` (attach_client.c). */
#include "script_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool script_file_read(const char *path, void (*add)(const char *line, size_t n))
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        size_t lead = strspn(line, " \t");
        if ((size_t)n > lead && line[lead] != '#')
            add(line + lead, (size_t)n - lead);
    }
    free(line);
    fclose(f);
    return true;
}
