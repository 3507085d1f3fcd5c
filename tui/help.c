/*
 * help.c — the key overlay (? or F1, the command `keys`): every key, what
 * it does and the command underneath, in a box over the panes; any key
 * closes it.
 */
#include "tui_internal.h"

#include <string.h>

static const char *const notes[] = {
    "In a pane: arrows, PgUp/PgDn, Home/End move; Enter on an op shows it;",
    "d, e: delete, toggle a breakpoint. Tab completes; Ctrl-C stops training.",
    "Mouse: click, wheel ('set mouse off' to copy text).",
};

void tui_help_draw(void)
{
    int n_keys = 0;
    for (const tui_key *k = tui_keys; k->what; k++)
        n_keys++;
    int n_notes = (int)(sizeof notes / sizeof notes[0]);
    int h = n_keys + n_notes + 2, w = COLS - 4 < 78 ? COLS - 4 : 78;
    if (h > LINES - 3) /* between the status bar and the command line */
        h = LINES - 3;
    if (w < 20 || h < 4)
        return;
    WINDOW *win = newwin(h, w, 1 + (LINES - 3 - h) / 2, (COLS - w) / 2);
    if (!win)
        return;
    wattrset(win, tui_attr(TUI_C_TITLE));
    box(win, 0, 0);
    mvwaddstr(win, 0, 2, " tdbg keys: key, what it does, the command underneath ");
    if (w >= 30) /* in the frame: on show when the notes are cut */
        mvwaddstr(win, h - 1, w - 23, " any key closes this ");
    wattrset(win, A_NORMAL);
    int y = 1;
    for (const tui_key *k = tui_keys; k->what && y < h - 1; k++, y++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%-4s %-2s %-42s %s", k->fkey_name ? k->fkey_name : "",
                 k->letter_name ? k->letter_name : "", k->what, k->command);
        wmove(win, y, 2);
        wattrset(win, tui_attr(TUI_C_KEY));
        tui_put(win, buf, 8);
        wattrset(win, A_NORMAL);
        tui_put(win, buf + 8, w - 12);
    }
    for (int i = 0; i < n_notes && y < h - 1; i++, y++) {
        wattrset(win, tui_attr(TUI_C_DIM));
        mvwaddnstr(win, y, 2, notes[i], w - 4);
        wattrset(win, A_NORMAL);
    }
    wnoutrefresh(win);
    delwin(win); /* what it drew stays on the screen until the panes draw over it */
}
