/*
 * cuda_probe.h — is there a CUDA device this build can run on? Built with
 * --with-cuda only (TE_HAVE_CUDA); C and CUDA C++ both include it.
 */
#ifndef TDBG_CUDA_PROBE_H
#define TDBG_CUDA_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when device 0 runs this build's code: why (n bytes) then names it,
 * "NVIDIA H200, 139.8 GiB". False otherwise, why saying what is missing:
 * "no CUDA driver (cudaErrorInsufficientDriver: ...)", "no device (...)",
 * "out of memory on NAME (...)", "no kernel image for NAME (sm_75) ...". */
bool te_cuda_probe(char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif
