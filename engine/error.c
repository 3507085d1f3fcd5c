/* error.c — status strings and the per-thread last-error message. */
#include "te_internal.h"

#include <stdio.h>

static _Thread_local char err_msg[1024];
static _Thread_local te_status err_code;

const char *te_status_str(te_status s)
{
    switch (s) {
    case TE_OK: return "ok";
    case TE_ERR_SHAPE: return "shape mismatch";
    case TE_ERR_DTYPE: return "unsupported dtype";
    case TE_ERR_ARG: return "bad argument";
    case TE_ERR_NOMEM: return "out of memory";
    case TE_ERR_STATE: return "call out of order";
    case TE_ERR_INPUT: return "input missing (an earlier op failed)";
    case TE_ERR_IO: return "I/O or thread error";
    case TE_ERR_DEVICE: return "no usable device";
    case TE_ERR_REWOUND: return "step unwound by a rewind";
    }
    return "unknown status";
}

void te_set_errorv(te_status code, const char *fmt, va_list ap)
{
    err_code = code;
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
}

void te_set_error(te_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    te_set_errorv(code, fmt, ap);
    va_end(ap);
}

const char *te_error(void) { return err_msg; }
te_status te_error_code(void) { return err_code; }

void te_error_clear(void)
{
    err_code = TE_OK;
    err_msg[0] = '\0';
}
