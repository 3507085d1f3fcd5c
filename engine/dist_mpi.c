/*
 * dist_mpi.c — the transport of data parallel (dist.c): MPI's
 * non-blocking collectives on host buffers. Every call is on the training
 * thread (MPI_THREAD_FUNNELED). Built without MPI (./configure
 * --with-mpi=no, or no Open MPI found), dist_tx_init says so and nothing
 * else is ever called.
 */
#include "te_internal.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef TE_HAVE_MPI
#include <mpi.h>

static bool we_initialised; /* MPI_Init was ours: MPI_Finalize is ours too */

bool dist_tx_init(int *rank, int *size, char *why, size_t n)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            snprintf(why, n, "MPI_Init_thread failed");
            return false;
        }
        we_initialised = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return true;
}

void dist_tx_finalize(void)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (we_initialised && !finalized)
        MPI_Finalize();
    we_initialised = false;
}

static void *request_new(void)
{
    MPI_Request *r = malloc(sizeof *r);
    if (r)
        *r = MPI_REQUEST_NULL;
    return r;
}

/* Starts a collective; NULL with te_error() set when it did not start. */
static void *started(MPI_Request *r, int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return r;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    te_set_error(TE_ERR_IO, "%s: MPI: %.*s", what, len, msg);
    free(r);
    return NULL;
}

void *dist_tx_allreduce_f32(const float *in, float *out, int64_t n, const char *what)
{
    MPI_Request *r = request_new();
    if (!r) {
        te_set_error(TE_ERR_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    return started(r, MPI_Iallreduce(in ? (const void *)in : MPI_IN_PLACE, out, (int)n, MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD, r), what);
}

void *dist_tx_allreduce_f64(double *v, int n, const char *what)
{
    MPI_Request *r = request_new();
    if (!r) {
        te_set_error(TE_ERR_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    return started(r, MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, r), what);
}

void *dist_tx_bcast(void *buf, size_t bytes, int root, const char *what)
{
    MPI_Request *r = request_new();
    if (!r) {
        te_set_error(TE_ERR_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    if (bytes > (size_t)0x7fffffff) {
        te_set_error(TE_ERR_ARG, "%s: %zu bytes in one broadcast (at most 2 GiB)", what, bytes);
        free(r);
        return NULL;
    }
    return started(r, MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, r), what);
}

int dist_tx_test(void *req)
{
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return -1;
    return done;
}

void dist_tx_release(void *req) { free(req); }

void dist_tx_abort(int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); /* MPI_Abort returns only when it could not end the job */
}

#else /* no MPI in this build */

bool dist_tx_init(int *rank, int *size, char *why, size_t n)
{
    *rank = 0;
    *size = 1;
    snprintf(why, n, "this build has no MPI: install Open MPI (Debian: libopenmpi-dev) and run "
                     "./configure --with-mpi");
    return false;
}
void dist_tx_finalize(void) {}
void *dist_tx_allreduce_f32(const float *in, float *out, int64_t n, const char *what)
{
    (void)in, (void)out, (void)n;
    te_set_error(TE_ERR_STATE, "%s: no MPI in this build", what);
    return NULL;
}
void *dist_tx_allreduce_f64(double *v, int n, const char *what)
{
    (void)v, (void)n;
    te_set_error(TE_ERR_STATE, "%s: no MPI in this build", what);
    return NULL;
}
void *dist_tx_bcast(void *buf, size_t bytes, int root, const char *what)
{
    (void)buf, (void)bytes, (void)root;
    te_set_error(TE_ERR_STATE, "%s: no MPI in this build", what);
    return NULL;
}
int dist_tx_test(void *req)
{
    (void)req;
    return -1;
}
void dist_tx_release(void *req) { (void)req; }
void dist_tx_abort(int code) { exit(code); }
#endif
