/*
 * plugin.c — the engine's one way to a debugger it knows nothing about.
 *
 * `tdbg -- PROGRAM` (or TDBG=cli set by hand) makes te_init() load the
 * debugger library by path (TDBG_PLUGIN, else the installed one) and call
 * its entry point, which attaches through the public hook API as any other
 * consumer would. A front end attaching to a listening run (listen.c) gets
 * the same library's attach entry, looked up the same way.
 */
#include "te_internal.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TDBG_PLUGIN_PATH
#define TDBG_PLUGIN_PATH "libtdbg-debugger.so"
#endif

/* TDBG_PLUGIN, else the installed module, else (a program run from a build
 * tree, where nothing is installed: an attach finds no TDBG_PLUGIN in a
 * run started by hand) the tree's own, found from where this engine
 * library was loaded: TOP/engine/.libs/ -> TOP/debugger/.libs/. */
static const char *module_path(void)
{
    const char *path = getenv("TDBG_PLUGIN");
    if (path && path[0])
        return path;
    if (access(TDBG_PLUGIN_PATH, R_OK) == 0)
        return TDBG_PLUGIN_PATH;
    static char tree[PATH_MAX];
    Dl_info self;
    const char *tail = "/engine/.libs/";
    if (dladdr((void *)module_path, &self) && self.dli_fname) {
        const char *at = strstr(self.dli_fname, tail);
        if (at && !strchr(at + strlen(tail), '/') &&
            snprintf(tree, sizeof tree, "%.*s/debugger/.libs/libtdbg-debugger.so", (int)(at - self.dli_fname),
                     self.dli_fname) < (int)sizeof tree &&
            access(tree, R_OK) == 0)
            return tree;
    }
    return TDBG_PLUGIN_PATH;
}

/* RTLD_NOW: a symbol the module lacks fails here, with dlerror()'s
 * message, not in the middle of a session. RTLD_LOCAL: nothing of the
 * module (dbg_*, dump_*, tui_*, its ncurses and readline) joins the
 * training program's namespace; the module resolves the engine through
 * its own link to libtdbg-engine.so, the copy the program already has
 * loaded, and the engine needs of it only the dlsym'd entry point. */
static void *module_symbol(const char *path, const char *name)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return h ? dlsym(h, name) : NULL;
}

void te_plugin_load(void)
{
    static bool loaded;
    const char *mode = getenv("TDBG");
    if (loaded || !mode || !mode[0])
        return;
    loaded = true;
    const char *path = module_path();
    TE_LOG(TE_LOG_DEBUGGER, TE_LOG_DEBUG, "TDBG=%s: loading the debugger from %s", mode, path);
    int (*start)(void) = (int (*)(void))module_symbol(path, "dbg_plugin_start");
    if (!start) {
        /* The user asked for a debugger: running without one would be worse. */
        fprintf(stderr, "tdbg: cannot load the debugger from %s: %s\n", path, dlerror()); /* not a log line: the end */
        exit(2);
    }
    if (start() != 0)
        exit(2);
}

te_plugin_attach_fn te_plugin_attach_entry(char *why, size_t n)
{
    const char *path = module_path();
    TE_LOG(TE_LOG_DEBUGGER, TE_LOG_DEBUG, "a client attaches: loading the debugger from %s", path);
    te_plugin_attach_fn attach = (te_plugin_attach_fn)module_symbol(path, "dbg_plugin_attach");
    if (!attach)
        snprintf(why, n, "cannot load the debugger from %s: %s", path, dlerror());
    return attach;
}
