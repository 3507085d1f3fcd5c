/*
 * te_log.h — the engine's logs, with a level per component (log.c).
 * Included by te.h; see docs/engine.md "Logs".
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

/* The level of each component now; read on the hot path by te_log_on. */
extern TE_API unsigned char te_log_levels[TE_LOG_COMPONENTS];
#define te_log_on(c, l) (te_log_levels[(c)] >= (l))
TE_API void te_log_write(te_log_component c, te_log_level l, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define TE_LOG(c, l, ...)                                                                                             \
    do {                                                                                                               \
        if (te_log_on((c), (l)))                                                                                       \
            te_log_write((c), (l), __VA_ARGS__);                                                                           \
    } while (0)

#endif
