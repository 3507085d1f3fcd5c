/* backend.c — the backends by device, the current one (te_backend_use). */
#include "te_internal.h"

#ifdef TE_HAVE_CUDA
#include "cuda/cuda_probe.h"
#endif

#include <stdio.h>
#include <string.h>

const te_backend *te_backends[TE_DEV_COUNT] = { [TE_DEV_CPU] = &te_backend_cpu };
static const te_backend *current = &te_backend_cpu;

/* Why device d has no backend, once asked (the probe runs once). */
static char why_not[TE_DEV_COUNT][768];
static bool probed[TE_DEV_COUNT];

static void probe(te_device d)
{
    if (probed[d] || d != TE_DEV_CUDA)
        return;
    probed[d] = true;
#ifdef TE_HAVE_CUDA
    if (te_cuda_probe(why_not[d], sizeof why_not[d]))
        te_backends[d] = &te_backend_cuda;
#else
    snprintf(why_not[d], sizeof why_not[d], "built without CUDA (./configure --with-cuda)");
#endif
}

const te_backend *te_backend_of(te_device d)
{
    if ((unsigned)d >= TE_DEV_COUNT)
        return NULL;
    if (!te_backends[d])
        probe(d);
    return te_backends[d];
}

/* Sets the error for a device without a backend: "WHO: cuda: REASON". */
static void no_backend(const char *who, te_device d)
{
    te_set_error(TE_ERR_DEVICE, "%s: %s: %s", who, te_device_name(d),
                 why_not[d][0] ? why_not[d] : "no backend for this device");
}

const te_backend *te_backend_current(void) { return current; }

void te_backend_set_test(te_device d, const te_backend *be)
{
    te_backends[d] = be;
    probed[d] = be != NULL;
    if (!be && current->device == d)
        current = &te_backend_cpu;
}

/* te_shutdown: the next run starts on the CPU again. */
void te_backend_reset(void) { current = &te_backend_cpu; }

te_status te_backend_use(const char *name)
{
    te_device d;
    if (name && strcmp(name, "cpu") == 0)
        d = TE_DEV_CPU;
    else if (name && strcmp(name, "cuda") == 0)
        d = TE_DEV_CUDA;
    else {
        te_set_error(TE_ERR_ARG, "te_backend_use: unknown backend '%s'; expected cpu or cuda", name ? name : "(null)");
        return TE_ERR_ARG;
    }
    const te_backend *be = te_backend_of(d);
    if (!be) {
        no_backend("te_backend_use", d);
        return TE_ERR_DEVICE;
    }
    current = be;
    return TE_OK;
}

const te_backend *te_backend_need(const char *who, te_device d)
{
    if ((unsigned)d >= TE_DEV_COUNT) {
        te_set_error(TE_ERR_ARG, "%s: unknown device %d", who, (int)d);
        return NULL;
    }
    const te_backend *be = te_backend_of(d);
    if (!be)
        no_backend(who, d);
    return be;
}
