/*
 * tui.h — the terminal UI: panes over the debugger's session and command
 * layer, for `tdbg -- ./train` in a terminal (the default there).
 *
 * The TUI is a front end (dbg_frontend, debugger/session.h) that registers
 * itself with the debugger when the debugger library loads; TDBG=tui picks
 * it and the debugger calls tui_start() through it once the session's
 * hooks are attached. From then on the session reads its command lines
 * from the TUI, shows it each stop (the session's dbg_stop, never the
 * printed `stopped:` line), and its output (dbg_out) and the program's own
 * stdout and stderr land in the output pane. The TUI holds no debugging
 * logic: every action is a command line run through dbg_execute().
 *
 * Layout, keys and commands: docs/tui.md.
 */
#ifndef TDBG_TUI_H
#define TDBG_TUI_H

#include <stddef.h>

/* The front end's start: takes over the terminal (stdin and stdout when
 * both are terminals, else /dev/tty). Returns 0, or -1 with why written
 * (no terminal, an unknown TERM, ...) and nothing changed: the debugger
 * then uses the command line. */
int tui_start(char *why, size_t n);

#endif
