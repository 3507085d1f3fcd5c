/*
 * ckpt_request.c — a checkpoint asked for by a front end and written by
 * the program's own loop, which alone knows its format and its state at a
 * step's end (examples/resume.c). The engine only carries the request.
 */
#include "te_internal.h"

#include <stdio.h>
#include <string.h>

static struct {
    bool writer, pending;
    char file[4096];
} req;

void te_checkpoint_writer(void) { req.writer = true; }

te_status te_checkpoint_request(const char *file)
{
    if (!req.writer) {
        te_set_error(TE_ERR_STATE, "this program writes no checkpoints on request (its loop does not call "
                                   "te_checkpoint_take; docs/engine.md \"Time travel\")");
        return TE_ERR_STATE;
    }
    if (!file || !file[0] || strlen(file) >= sizeof req.file) {
        te_set_error(TE_ERR_ARG, "checkpoint: %s", !file || !file[0] ? "the file name is empty" : "the path is too long");
        return TE_ERR_ARG;
    }
    snprintf(req.file, sizeof req.file, "%s", file);
    req.pending = true;
    return TE_OK;
}

bool te_checkpoint_take(char *file, size_t n)
{
    if (!req.pending || !file || n <= strlen(req.file))
        return false;
    req.pending = false;
    snprintf(file, n, "%s", req.file);
    return true;
}

void te_checkpoint_shutdown(void) { memset(&req, 0, sizeof req); }
