/*
 * lowp_native.c — whether low-precision nodes run on the backend's native
 * kernels or on f32 shadows.
 *
 * Each native kernel decides whether it takes a node: the oneDNN GEMMs and
 * convolutions only where the backend's lowp_native says the machine can,
 * the portable ones (ReLU, BatchNorm, MaxPool2D) always. The user can say
 * no to all of them with TDBG_NO_NATIVE_LOWP=1, to compare the two paths.
 */
#include "te_internal.h"

#include <stdlib.h>
#include <string.h>

static int allowed = -1; /* -1: TDBG_NO_NATIVE_LOWP not read yet */
static int64_t runs;

static bool native_allowed(void)
{
    if (allowed < 0) {
        const char *v = getenv("TDBG_NO_NATIVE_LOWP");
        allowed = !(v && *v && strcmp(v, "0") != 0);
    }
    return allowed;
}

void te_lowp_native_allow(bool on) { allowed = on; }

int64_t te_lowp_native_runs(void) { return runs; }

const char *te_lowp_native(void)
{
    const te_backend *be = te_backend_current();
    return be->lowp_native && native_allowed() ? be->lowp_native() : NULL;
}

te_status te_lowp_run_native(te_node *n, bool backward)
{
    const te_backend *be = te_backends[n->device];
    te_kernel_fn fn = backward ? be->backward_lowp[n->op] : be->forward_lowp[n->op];
    if (!fn || !native_allowed())
        return TE_LOWP_DECLINED;
    te_status st = fn(n);
    if (st != TE_LOWP_DECLINED)
        runs++;
    return st;
}
