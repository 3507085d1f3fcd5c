/*
 * attach_term.h — the client's terminal under `tdbg attach --tui`
 * (attach_term.c): the TUI draws in the run, and its bytes come here as
 * TERM frames; keys go back as KEYS, the size as RESIZE (docs/attach.md).
 */
#ifndef TDBG_ATTACH_TERM_H
#define TDBG_ATTACH_TERM_H

#include <stdbool.h>
#include <stddef.h>

/* Can this terminal show the TUI? stdin and stdout are terminals and TERM
 * names one that moves the cursor; false with why written. */
bool attach_term_usable(char *why, size_t n);
/* " term=T rows=R cols=C utf8=0|1": the terminal, for HELLO. */
void attach_term_describe(char *buf, size_t n);
/* The terminal's modes for the TUI far away: no echo, no line editing, no
 * translation (curses in the run set none: it draws on a pipe); Ctrl-C
 * stays SIGINT (the client sends INTR), Ctrl-\ and Ctrl-Z are keys. The
 * modes come back at attach_term_restore, at exit, and on SIGTERM, SIGHUP
 * and SIGQUIT. false with errno when they cannot be set. */
bool attach_term_raw(void);
void attach_term_restore(void);
bool attach_term_is_raw(void);
/* The terminal changed size since the last call (SIGWINCH): "ROWS COLS"
 * into buf, for a RESIZE frame. */
bool attach_term_resized(char *buf, size_t n);

#endif
