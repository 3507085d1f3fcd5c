/*
 * cuda_graph.c — CUDA Graphs for graph mode (engine/graph/capture.c says
 * when): the backend's stream captured in thread-local mode, instantiated,
 * and launched once per step.
 *
 * A captured kernel keeps the pointers it was given, the backend's
 * workspace among them: the workspace is recorded at capture, and a graph
 * whose workspace has since been replaced (it grew for a larger kernel) is
 * stale and captured again. The executor's first, uncaptured run lets the
 * workspace reach the size the step needs before any capture.
 */
#include "cuda/cuda_graph.h"
#include "cuda/cuda_rt.h"

#include <stdlib.h>

typedef struct cuda_graph_exec {
    cudaGraphExec_t exec;
    void *ws; /* te_cuda_workspace at capture */
} cuda_graph_exec;

static void *capture_ws;

/* te_cuda_workspace(0) never allocates: it answers the current block. */
static void *workspace_now(void) { return te_cuda_workspace(0); }

te_status cuda_graph_capture_begin(void)
{
    capture_ws = workspace_now();
    return te_cuda_ok(NULL, cudaStreamBeginCapture(te_cuda_stream(), cudaStreamCaptureModeThreadLocal),
                      "cudaStreamBeginCapture");
}

te_status cuda_graph_capture_end(void **exec)
{
    *exec = NULL;
    cudaGraph_t g = NULL;
    te_status st = te_cuda_ok(NULL, cudaStreamEndCapture(te_cuda_stream(), &g), "cudaStreamEndCapture");
    if (st == TE_OK && workspace_now() != capture_ws) {
        te_set_error(TE_ERR_DEVICE, "cudaStreamEndCapture: the workspace was replaced during the capture");
        st = TE_ERR_DEVICE;
    }
    cudaGraphExec_t ge = NULL;
    if (st == TE_OK)
        st = te_cuda_ok(NULL, cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate");
    if (g)
        cudaGraphDestroy(g);
    /* A call refused inside the capture left its error as the last one:
     * clear it, or the next kernel's cudaGetLastError check would fail. */
    (void)cudaGetLastError();
    if (st != TE_OK)
        return st;
    cuda_graph_exec *e = malloc(sizeof *e);
    if (!e) {
        cudaGraphExecDestroy(ge);
        te_set_error(TE_ERR_NOMEM, "cudaGraphInstantiate: out of host memory");
        return TE_ERR_NOMEM;
    }
    *e = (cuda_graph_exec){ .exec = ge, .ws = capture_ws };
    *exec = e;
    return TE_OK;
}

te_status cuda_graph_launch(void *exec)
{
    const cuda_graph_exec *e = exec;
    return te_cuda_ok(NULL, cudaGraphLaunch(e->exec, te_cuda_stream()), "cudaGraphLaunch");
}

void cuda_graph_exec_free(void *exec)
{
    cuda_graph_exec *e = exec;
    if (!e)
        return;
    /* A launch still queued keeps its graph alive until it has run. */
    cudaGraphExecDestroy(e->exec);
    free(e);
}

bool cuda_graph_exec_stale(const void *exec)
{
    const cuda_graph_exec *e = exec;
    return e->ws != workspace_now();
}

bool cuda_graph_host_wait(const te_node *n, bool backward)
{
    switch (n->op) {
    case TE_OP_CROSS_ENTROPY: /* te_cuda_flag_read: a bad label */
    case TE_OP_EMBEDDING:     /* te_cuda_flag_read: a bad index */
        return !backward;
    case TE_OP_CAST: return true; /* rounding counts read back */
    default: return false;
    }
}
