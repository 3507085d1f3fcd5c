/* log.c — the engine's logs (te_log.h). Being written. */
#include "te_internal.h"

#include <stdarg.h>
#include <stdio.h>

unsigned char te_log_levels[TE_LOG_COMPONENTS];

void te_log_write(te_log_component c, te_log_level l, const char *fmt, ...)
{
    (void)c;
    (void)l;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
