/*
 * te_log.h — the engine's logs, with a level per component (log.c).
 * Included by te.h; see docs/logs.md.
 */
#ifndef TE_LOG_H
#define TE_LOG_H

typedef enum { TE_LOG_OFF, TE_LOG_ERROR, TE_LOG_WARN, TE_LOG_INFO, TE_LOG_DEBUG } te_log_level;

/* Components; a TDBG_LOG name sets every component it is a prefix of at a
 * dot ("engine" sets engine, engine.graph and engine.data). */
typedef enum {
    TE_LOG_ENGINE,   /* "engine": the engine's core */
    TE_LOG_GRAPH,    /* "engine.graph": graph compilation, memory planning */
    TE_LOG_DATA,     /* "engine.data": the data loader */
    TE_LOG_DUMP,     /* "dump": the dump writer */
    TE_LOG_DEBUGGER, /* "debugger": the debugger in the process */
    TE_LOG_COMPONENTS
} te_log_component;

/* Sets the levels from a TDBG_LOG spec and the output from a TDBG_LOG_FILE
 * path, as the library does at load from the environment (docs/logs.md):
 * spec "warn", "engine=debug,dump=info", "warn,engine.graph=debug" (later
 * wins); NULL or "" is every component at warn. file NULL or "" is stderr;
 * a file is opened for appending (created 0600). Lines carry the time,
 * step, component and level when spec or file is given; te_log_configure
 * (NULL, NULL) is "nothing set": warn everywhere, messages as they always
 * were printed. A bad spec is TE_ERR_ARG and a file that cannot be opened
 * TE_ERR_IO, te_error() naming the token or the file; nothing changes
 * then. Meant for start-up and tests: the levels change under threads
 * that may be logging (a line goes whole to the old output or the new). */
TE_API te_status te_log_configure(const char *spec, const char *file);
/* "engine.graph", "debug": the names a spec and a line use. */
TE_API const char *te_log_component_name(te_log_component c);
TE_API const char *te_log_level_name(te_log_level l);

/* The level of each component now; read on the hot path by te_log_on. */
TE_API extern unsigned char te_log_levels[TE_LOG_COMPONENTS];
#define te_log_on(c, l) (te_log_levels[(c)] >= (l))
/* Writes one line (a newline is added; one the message ends with is
 * dropped) whatever the level: call it through TE_LOG, which tests the
 * level before the arguments are evaluated. */
TE_API void te_log_write(te_log_component c, te_log_level l, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define TE_LOG(c, l, ...)                                                                                             \
    do {                                                                                                               \
        if (te_log_on((c), (l)))                                                                                       \
            te_log_write((c), (l), __VA_ARGS__);                                                                           \
    } while (0)

#endif
