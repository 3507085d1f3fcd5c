/* script_file.h — the lines of a `-x FILE` (the launcher's and the attach
 * client's): script_file.c. */
#ifndef TDBG_SCRIPT_FILE_H
#define TDBG_SCRIPT_FILE_H

#include <stdbool.h>
#include <stddef.h>

/* Calls add(line, n) for each command line of path, in order: line ends
 * (LF, CRLF) and leading blanks dropped, blank and `#` lines left out.
 * False with errno set when the file cannot be opened. */
bool script_file_read(const char *path, void (*add)(const char *line, size_t n));

#endif
