/*
 * cuda_graph.h — graph mode's capture on the CUDA backend (CUDA Graphs):
 * the capture entries of te_graph_kernels, and which op kernels wait for
 * the host and so cannot be captured.
 */
#ifndef TE_CUDA_GRAPH_H
#define TE_CUDA_GRAPH_H

#include "te_internal.h"

/* Starts capturing te_cuda_stream() (thread-local mode: other threads'
 * CUDA calls are not affected). */
te_status cuda_graph_capture_begin(void);
/* Ends the capture and instantiates it into *exec; TE_ERR_DEVICE naming
 * the CUDA error when capture or instantiation failed (*exec NULL). */
te_status cuda_graph_capture_end(void **exec);
/* One launch of a captured graph on te_cuda_stream(). */
te_status cuda_graph_launch(void *exec);
void cuda_graph_exec_free(void *exec);
/* Whether the workspace the capture saw has been replaced since. */
bool cuda_graph_exec_stale(const void *exec);
/* Kernels that read a flag or counts back to the host (cross-entropy's
 * and embedding's bad-data checks, casts' rounding counts). */
bool cuda_graph_host_wait(const te_node *n, bool backward);

#endif
