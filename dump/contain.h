/*
 * contain.h — runs the parse of an untrusted file's HDF5 metadata in a
 * child process, so that a crash or a hang inside libhdf5 becomes an error
 * message instead of the reader's death (docs/dump-format.md, "Reading a
 * damaged file").
 *
 *     dump_blob out = { 0 };
 *     if (dump_contain("d/run.h5", parse, &args, 1 << 30, &out, err, sizeof err))
 *         ... decode out.b[0 .. out.len) with a dump_cursor ...
 *     dump_blob_free(&out);
 *
 * parse runs in the child (fork()ed: it sees the parent's memory as it was)
 * and describes what it found in the blob, which travels back over a pipe.
 * The child has a time limit (TDBG_DUMP_TIMEOUT seconds, 10 by default); a
 * child that dies by a signal, exits without an answer or runs out of time
 * (it is killed) gives "FILE: damaged HDF5 metadata in OBJECT (...)", where
 * OBJECT is the last one the child named with dump_contain_at.
 *
 * TDBG_DUMP_CONTAIN=off runs parse in this process instead (for fuzzing and
 * debuggers, which want the crash itself). Test hook: TDBG_DUMP_TEST_FAULT
 * set to "hang:TEXT" or "crash:TEXT" makes a child whose file's path holds
 * TEXT sleep forever or die of SIGSEGV before it parses anything; nothing
 * else reads it.
 */
#ifndef TDBG_CONTAIN_H
#define TDBG_CONTAIN_H

#include <stdbool.h>
#include <stddef.h>

/* A growing byte buffer; out of memory sets oom and drops the rest. */
typedef struct dump_blob {
    unsigned char *b;
    size_t len, cap;
    bool oom;
} dump_blob;
void dump_blob_put(dump_blob *o, const void *p, size_t n);
void dump_blob_int(dump_blob *o, long long v);   /* 8 bytes */
void dump_blob_str(dump_blob *o, const char *s); /* its length, then its bytes and NUL */
void dump_blob_free(dump_blob *o);

/* Reading a blob back: every get checks what is left, and a short or
 * malformed blob sets bad (the gets then return zeros / ""). */
typedef struct dump_cursor {
    const unsigned char *p;
    size_t left;
    bool bad;
} dump_cursor;
bool dump_cur_get(dump_cursor *c, void *dst, size_t n);
long long dump_cur_int(dump_cursor *c);
/* A string of the blob (pointer into it), "" when malformed. */
const char *dump_cur_str(dump_cursor *c);

typedef void (*dump_contain_fn)(void *arg, dump_blob *out);

/* Runs fn(arg, out) for file path in a child, its answer into *out (at most
 * max bytes). False with a message naming the file and the object when the
 * child does not answer; out is then empty. */
bool dump_contain(const char *path, dump_contain_fn fn, void *arg, size_t max, dump_blob *out,
                  char *err, size_t n);
/* In the child: the object about to be parsed ("/ops", "the superblock"),
 * for the message if the parse never returns. Cheap; does nothing outside
 * a child. */
void dump_contain_at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
