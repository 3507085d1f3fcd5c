/*
 * cuda_nccl.c — data parallel's transport for gradient buckets in GPU
 * memory (dist.c): NCCL's all-reduce on the backend's stream, so that it
 * follows the backward kernels that wrote the gradients without the host
 * waiting. The communicator is made once, at the first bucket on the GPU:
 * rank 0's ncclUniqueId reaches the others through MPI (dist_mpi.c). A
 * request is a CUDA event recorded after the all-reduce; testing it is
 * cudaEventQuery, which never blocks, so the hooks' `waiting` goes on
 * being called while the ranks wait for each other.
 */
#include "cuda/cuda_rt.h"

#include <nccl.h>
#include <stdio.h>
#include <string.h>

static ncclComm_t comm;
static bool made;

bool te_nccl_init(int rank, int size, char *why, size_t n)
{
    if (made)
        return true;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            snprintf(why, n, "ncclGetUniqueId: %s", ncclGetErrorString(r));
            return false;
        }
    }
    /* Every rank comes here at the same backward: the broadcast is collective. */
    void *req = dist_tx_bcast(&id, sizeof id, 0, "nccl/unique-id");
    int done = 0;
    while (req && (done = dist_tx_test(req)) == 0)
        ;
    if (req)
        dist_tx_release(req);
    if (!req || done < 0) {
        snprintf(why, n, "broadcasting NCCL's unique id over MPI failed: %s", te_error());
        return false;
    }
    ncclResult_t r = ncclCommInitRank(&comm, size, id, rank);
    if (r != ncclSuccess) {
        snprintf(why, n, "ncclCommInitRank (rank %d of %d): %s", rank, size, ncclGetErrorString(r));
        return false;
    }
    made = true;
    return true;
}

void *te_nccl_allreduce_f32(float *buf, int64_t count, const char *what)
{
    cudaStream_t s = te_cuda_stream();
    ncclResult_t r = ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, comm, s);
    if (r != ncclSuccess) {
        te_set_error(TE_ERR_DEVICE, "%s: ncclAllReduce: %s", what, ncclGetErrorString(r));
        return NULL;
    }
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess && (e = cudaEventRecord(ev, s)) != cudaSuccess)
        cudaEventDestroy(ev);
    if (e != cudaSuccess) {
        te_set_error(TE_ERR_DEVICE, "%s: cudaEventRecord: %s", what, cudaGetErrorString(e));
        return NULL;
    }
    return ev;
}

int te_nccl_test(void *req)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)req);
    if (e == cudaSuccess)
        return 1;
    ncclResult_t async = ncclSuccess;
    if (e != cudaErrorNotReady || ncclCommGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess) {
        te_set_error(TE_ERR_DEVICE, "NCCL all-reduce: %s",
                     e != cudaErrorNotReady ? cudaGetErrorString(e) : ncclGetErrorString(async));
        return -1;
    }
    return 0;
}

void te_nccl_release(void *req) { cudaEventDestroy((cudaEvent_t)req); }

void te_nccl_finalize(void)
{
    if (made)
        ncclCommDestroy(comm);
    made = false;
}
