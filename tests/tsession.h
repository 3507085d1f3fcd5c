/*
 * tsession.h — tdbg sessions as the suites run them: a shell command's
 * whole output (stdout and stderr together) and the status a shell reports,
 * `tdbg FLAGS -ex ... -- examples/PROG ARGS` built from a ';'-separated
 * command list, assertions on what a session printed (each failure quotes
 * the session), and one command line run by dbg_execute in this process
 * with what it printed caught.
 */
#ifndef TDBG_TSESSION_H
#define TDBG_TSESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What one session printed, TS_OUT_MAX bytes at most, and its status as a
 * shell sees it: 128+N for a death by signal N. ts_free releases it. */
#define TS_OUT_MAX (1 << 20)
typedef struct ts_session {
    int status;
    char *out;
} ts_session;

/* Runs the command fmt makes through /bin/sh, its stdout and stderr (the
 * shell's own too) caught together. */
ts_session ts_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* `tdbg FLAGS -ex C1 -ex C2 ... -- examples/PROG ARGS 2>&1 </dev/null`, the
 * commands being cmds split at ';' (leading blanks dropped) and ARGS what
 * fmt makes; stdin empty. */
ts_session ts_tdbg(const char *flags, const char *cmds, const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

void ts_free(ts_session *s);

/* Fail unless the session printed want / did not print unwanted. */
void ts_has(const ts_session *s, const char *want);
void ts_lacks(const ts_session *s, const char *unwanted);
/* Fails unless the session's status is want. */
void ts_status_is(const ts_session *s, int want);
/* How many times what occurs in the session's output (overlaps counted). */
int ts_count(const ts_session *s, const char *what);

/* The k-th (from 0) line of the session that starts with "stopped: ",
 * without its newline, into buf; NULL when there are not k+1 of them. */
const char *ts_stopped_line(const ts_session *s, int k, char *buf, size_t n);
/* Fails unless that line exists and is want. */
void ts_stop_is(const ts_session *s, int k, const char *want);

/* Values a session printed against values read back from a dump, so that
 * an inspection test compares numbers computed independently:
 * ts_dumped reads the tensor at path ("/fc2/relu/out0") of DIR's step 0
 * as f32 (malloc'd, *n values); ts_printed reads the n numbers printed on
 * the lines after the line holding header (a print's "[[a b]\n [c d]]"
 * body) into v; ts_assert_printed fails unless got agrees with want to the
 * 6 significant digits a print shows, naming what. */
float *ts_dumped(const char *dir, const char *path, int64_t *n);
void ts_printed(const ts_session *s, const char *header, float *v, int n);
void ts_assert_printed(const char *what, double got, double want);

/* dbg_execute(line) in this process with its standard output caught into
 * ts_captured (what does not fit is cut); returns whether it resumed. */
extern char ts_captured[8192];
bool ts_exec(const char *line);

#endif
