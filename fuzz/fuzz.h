/*
 * fuzz.h — what the fuzz targets share. Each fuzz_*.c defines libFuzzer's
 * LLVMFuzzerTestOneInput (and LLVMFuzzerInitialize); clang links it with
 * -fsanitize=fuzzer for `make fuzz`, and gcc links it with replay.c for
 * `make check`, which runs it on the seed corpus and the past crashes.
 */
#ifndef TDBG_FUZZ_H
#define TDBG_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a NUL-terminated string (malloc'd; an embedded NUL ends it early). */
char *fuzz_text(const uint8_t *data, size_t size);
/* False for an input that names a device or a kernel file (/dev/zero as
 * a spec's @FILE or a --map never ends): the target skips it. */
bool fuzz_harmless(const uint8_t *data, size_t size);
/* Splits text in place at newlines (an argument may hold spaces) into
 * argv[1..], argv[0] = prog; returns argc (at most max, argv NULL-terminated). */
int fuzz_argv(char *text, const char *prog, char **argv, int max);
/* A stream that discards what is written to it (the tools' output). */
FILE *fuzz_null(void);
/* Runs a tool's main (tdbg_dump_main, tdbg_diff_main) as "tdbg ARG..."
 * (NULL-terminated, at most 4) with its output discarded; aborts on an
 * exit status the tools do not document (0, 1 or 2 only). */
void fuzz_tool(int (*main_fn)(int, char **, FILE *, FILE *), ...);
/* A private directory for this process, removed at exit. */
const char *fuzz_tmpdir(void);
/* Writes the input to PATH (made under fuzz_tmpdir: "DIR/NAME"); false on error. */
bool fuzz_write(const char *path, const uint8_t *data, size_t size);

#endif
