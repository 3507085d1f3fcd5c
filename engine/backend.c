/* backend.c — te_backend_use: the backend that runs the ops. */
#include "te_internal.h"

#ifdef TE_HAVE_CUDA
#include "cuda/cuda_probe.h"
#endif

#include <string.h>

te_status te_backend_use(const char *name)
{
    /* The CPU backend is the one tape.c starts with, and so far the only one. */
    if (name && strcmp(name, "cpu") == 0)
        return TE_OK;
    if (!name || strcmp(name, "cuda") != 0) {
        te_set_error(TE_ERR_ARG, "te_backend_use: unknown backend '%s'; expected cpu or cuda", name ? name : "(null)");
        return TE_ERR_ARG;
    }
#ifdef TE_HAVE_CUDA
    char why[768];
    if (te_cuda_probe(why, sizeof why))
        te_set_error(TE_ERR_DEVICE, "te_backend_use: cuda: %s: the CUDA backend's kernels are not built yet (issue 18)",
                     why);
    else
        te_set_error(TE_ERR_DEVICE, "te_backend_use: cuda: %s", why);
#else
    te_set_error(TE_ERR_DEVICE, "te_backend_use: cuda: built without CUDA (./configure --with-cuda)");
#endif
    return TE_ERR_DEVICE;
}
