/*
 * listview.c — the list view every pane scrolls with (htop's Panel): a
 * count of rows seen through a window of `height` rows, the selected row,
 * the first row shown, and the one set of clamping rules they keep:
 * the selection is a row of the list (0 when it is empty), the window
 * shows the row a pane keeps in view, and no row below the list's end is
 * shown while rows above the window are hidden. A scrollback (the output
 * pane) follows its tail until it is scrolled up.
 */
#include "tui_internal.h"

/* The first row shown when the list is scrolled to its end. */
static int end_top(const tui_list *l) { return l->count > l->height ? l->count - l->height : 0; }

static void clamp(tui_list *l)
{
    if (l->sel >= l->count)
        l->sel = l->count - 1;
    if (l->sel < 0)
        l->sel = 0;
    int end = end_top(l);
    l->top = l->top > end ? end : l->top < 0 ? 0 : l->top;
}

int64_t tui_list_top_for(int64_t top, int64_t keep, int64_t height, int64_t count)
{
    if (keep < top)
        top = keep;
    if (keep >= top + height)
        top = keep - height + 1;
    if (top > 0 && top + height > count)
        top = count > height ? count - height : 0;
    return top < 0 ? 0 : top;
}

void tui_list_set_count(tui_list *l, int count)
{
    l->count = count > 0 ? count : 0;
    clamp(l);
}

void tui_list_set_height(tui_list *l, int height)
{
    l->height = height > 0 ? height : 0;
    clamp(l);
}

bool tui_list_at_end(const tui_list *l) { return l->top >= end_top(l); }

void tui_list_follow(tui_list *l, int count, int height)
{
    bool tail = tui_list_at_end(l);
    l->count = count > 0 ? count : 0;
    l->height = height > 0 ? height : 0;
    if (tail)
        l->top = end_top(l);
    clamp(l);
}

void tui_list_select(tui_list *l, int i)
{
    l->sel = i;
    clamp(l);
}

void tui_list_move(tui_list *l, int n)
{
    long to = (long)l->sel + n; /* n may be +-TUI_FAR */
    tui_list_select(l, to < 0 ? 0 : to > l->count ? l->count : (int)to);
}

void tui_list_show(tui_list *l, int i)
{
    if (l->height > 0)
        l->top = (int)tui_list_top_for(l->top, i, l->height, l->count);
}

void tui_list_scroll(tui_list *l, int n)
{
    long to = (long)l->top + n; /* n may be +-TUI_FAR */
    int end = end_top(l);
    l->top = to < 0 ? 0 : to > end ? end : (int)to;
}

int tui_list_item_at(const tui_list *l, int row)
{
    int i = l->top + row;
    return row >= 0 && row < l->height && i < l->count ? i : -1;
}
