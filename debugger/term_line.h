/* term_line.h — a command line typed by the user, for the launcher's own
 * prompts (tdbg attach, tdbg --mpi): term_line.c. */
#ifndef TDBG_TERM_LINE_H
#define TDBG_TERM_LINE_H

#include <stdbool.h>

/* The next line after prompt, without its newline: GNU readline's (with
 * history) when use_readline, else stdin's (EINTR retried). NULL at the end
 * of input. The caller frees it. */
char *term_line_read(const char *prompt, bool use_readline);

#endif
