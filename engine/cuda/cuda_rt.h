/*
 * cuda_rt.h — what the CUDA backend's kernels share: the stream, the
 * library handles, a workspace, and the checks that turn a CUDA, cuBLAS or
 * cuDNN error into the engine's error on the node that hit it.
 *
 * C only (the .cu files include their own k_*.h headers, never this one):
 * cuda_runtime_api.h, cublas_v2.h, cublasLt.h and cudnn.h are C headers.
 * Everything runs on one stream, so kernels of a step are ordered without
 * events, and the host waits only where it reads a result.
 */
#ifndef TE_CUDA_RT_H
#define TE_CUDA_RT_H

#include "te_internal.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

/* The backend's stream and handles, made on first use (after the probe). */
cudaStream_t te_cuda_stream(void);
cublasHandle_t te_cuda_cublas(void);
cublasLtHandle_t te_cuda_cublaslt(void);
cudnnHandle_t te_cuda_cudnn(void);

/* Device scratch of at least bytes, valid until the next call; stream
 * ordered, so a kernel may use it while the previous user's kernels are
 * still queued. NULL when the device is out of memory. */
void *te_cuda_workspace(size_t bytes);

/* TE_OK on success; otherwise te_kernel_fail on n (a te_set_error when n is
 * NULL) with "what: cudaErrorX: message" and TE_ERR_DEVICE. */
te_status te_cuda_ok(te_node *n, cudaError_t e, const char *what);
te_status te_cublas_ok(te_node *n, cublasStatus_t s, const char *what);
te_status te_cudnn_ok(te_node *n, cudnnStatus_t s, const char *what);

/* Blocks for n elements at threads per block, capped so that a grid-stride
 * loop covers the rest; at least 1. */
int te_cuda_blocks(int64_t n, int threads);

/* A device word that kernels lower on bad data (a label outside the
 * classes): te_cuda_flag() sets it to ~0ULL (stream ordered) and returns
 * it; a kernel does atomicMin(flag, i) at bad element i. te_cuda_flag_read()
 * waits for the stream and returns the first bad index, or -1 when none
 * (and -1 with *st set when the copy itself failed). */
unsigned long long *te_cuda_flag(void);
int64_t te_cuda_flag_read(te_node *n, te_status *st);

/* TF32 in f32 GEMMs and convolutions: off unless TDBG_CUDA_TF32=1, so that
 * f32 results stay comparable with the CPU's. Read once. */
bool te_cuda_tf32(void);

#endif
