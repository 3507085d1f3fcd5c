/*
 * tui.h — the terminal UI: panes over the debugger's session and command
 * layer, for `tdbg -- ./train` in a terminal (the default there).
 *
 * debugger/plugin.c calls tui_start() once the session's hooks are
 * attached; from then on the session reads its command lines from the TUI
 * (dbg_frontend_active), and its output (dbg_out) and the program's own
 * stdout and stderr land in the output pane. The TUI holds no debugging
 * logic: every action is a command line run through dbg_execute().
 *
 *     char why[256];
 *     if (tui_start(why, sizeof why) != 0)
 *         fprintf(stderr, "tdbg: %s; using the command line instead\n", why);
 *
 * Layout, keys and commands: docs/tui.md.
 */
#ifndef TDBG_TUI_H
#define TDBG_TUI_H

#include <stddef.h>

/* Takes over the terminal (stdin and stdout when both are terminals, else
 * /dev/tty). Returns 0, or -1 with why written (no terminal, an unknown
 * TERM, ...) and nothing changed. */
int tui_start(char *why, size_t n);

#endif
