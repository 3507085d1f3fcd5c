/* term_line.c — a command line typed by the user (term_line.h). */
#include "term_line.h"

#include <errno.h>
#include <readline/history.h>
#include <readline/readline.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

char *term_line_read(const char *prompt, bool use_readline)
{
    if (use_readline) {
        char *l = readline(prompt);
        if (l && l[strspn(l, " \t")])
            add_history(l);
        return l;
    }
    printf("%s", prompt);
    fflush(stdout);
    char *l = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&l, &cap, stdin)) < 0 && errno == EINTR && !feof(stdin))
        clearerr(stdin);
    if (n < 0) {
        free(l);
        return NULL;
    }
    if (n && l[n - 1] == '\n')
        l[n - 1] = '\0';
    return l;
}
