/*
 * te_dist.h — data-parallel training on MPI (dist.c, dist_mpi.c; NCCL for
 * device buffers in the CUDA build). Included by te.h; see docs/engine.md
 * "Data parallel".
 *
 * Every rank runs the same program on its own shard of each global batch.
 * Parameters start identical (te_dist_broadcast_params), gradients are
 * averaged across ranks during te_backward (bucketed: a bucket's
 * all-reduce starts as soon as its last gradient is final and progresses
 * while the backward goes on), so every rank's optimizer sees the same
 * gradients and parameters stay identical, bit for bit.
 *
 * Collectives are ops: the hooks see each one (op_begin when it starts,
 * `waiting` while it waits for the other ranks, op_end with its tensors
 * when it is done), named "allreduce/bucket3", "broadcast/params", with a
 * te_collective in the record. Without --with-mpi, te_dist_init fails
 * with TE_ERR_DEVICE and the rest answers as one rank.
 */
#ifndef TE_DIST_H
#define TE_DIST_H

/* A collective as the op record shows it (te_op_record.coll). */
typedef struct te_collective {
    const char *kind;  /* "allreduce", "broadcast" */
    int64_t seq;       /* this job's collectives before it: the same number on every rank */
    int rank, ranks;   /* this process's rank; the ranks taking part */
    int root;          /* broadcast: the rank sending; -1 otherwise */
    int bucket;        /* a gradient all-reduce: its bucket; -1 otherwise */
    size_t bytes;      /* what each rank contributes */
} te_collective;

typedef struct te_dist_opts {
    size_t bucket_bytes; /* gradient bucket size; 0: TE_DIST_BUCKET (TDBG_DP_BUCKET_KB overrides) */
} te_dist_opts;
#define TE_DIST_BUCKET ((size_t)256 << 10)

/* Joins the job (MPI_Init_thread; under mpirun or alone as one rank).
 * Call after te_init, before the parameters are broadcast. TE_ERR_DEVICE
 * with the reason when built without MPI; TE_ERR_STATE when called twice.
 * te_shutdown leaves the job (MPI_Finalize). */
TE_API te_status te_dist_init(const te_dist_opts *o);
TE_API bool te_dist_active(void);
/* This process's rank (0 when not in a job) and the job's size (1). */
TE_API int te_dist_rank(void);
TE_API int te_dist_size(void);
/* "mpi", "mpi+nccl" (device gradients through NCCL) or "none". */
TE_API const char *te_dist_transport(void);

/* Copies rank 0's parameters and buffers to every rank (op
 * "broadcast/params"). TE_OK at once for one rank. */
TE_API te_status te_dist_broadcast_params(void);
/* Copies rank 0's buffers (batch norm's running statistics) to every rank
 * (op "broadcast/buffers"), as PyTorch's DDP does before each forward. */
TE_API te_status te_dist_broadcast_buffers(void);
/* While on, te_backward keeps gradients local (DDP's no_sync): the
 * micro-batches of an accumulation but the last. */
TE_API void te_dist_no_sync(bool on);
/* Sums n doubles over the ranks in place (op "allreduce/NAME"): a loss to
 * log, a count of correct predictions. */
TE_API te_status te_dist_allreduce_host(const char *name, double *v, int n);
/* Collectives begun so far (the next one's te_collective.seq). */
TE_API int64_t te_dist_seq(void);
/* Ends every rank of the job with status code (MPI_Abort); exit(code) when
 * not in a job. */
TE_API void te_dist_abort(int code) __attribute__((noreturn));

#endif
