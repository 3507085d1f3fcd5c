/* host_copy.c — reads into host buffers that the caller does not wait for:
 * the backends' host_alloc, to_host_async and wait entries behind the
 * engine's API (te.h). The dumps copy each tensor this way on the training
 * thread and wait on their writer thread. */
#include "te_internal.h"

/* A buffer starts HEADER bytes after what the backend gave, which records
 * the device whose backend gave it: a dump may free its buffers after the
 * current backend changed (te_shutdown goes back to the CPU). 64 keeps the
 * backends' alignment (64 bytes on the CPU, a page for CUDA). */
#define HEADER 64

void *te_host_buffer_alloc(size_t bytes)
{
    const te_backend *be = te_backend_current();
    if (bytes > SIZE_MAX - HEADER)
        return NULL;
    unsigned char *p = be->host_alloc(bytes + HEADER);
    if (!p)
        return NULL;
    *(te_device *)p = be->device;
    return p + HEADER;
}

void te_host_buffer_free(void *p)
{
    if (!p)
        return;
    unsigned char *base = (unsigned char *)p - HEADER;
    te_backends[*(const te_device *)base]->host_free(base);
}

te_status te_tensor_read_async(const te_tensor *t, void *pinned_dst, te_copy_ticket *tk)
{
    *tk = (te_copy_ticket){ .device = t->device };
    if (!te_data(t) && t->numel) {
        te_set_error(TE_ERR_STATE, "te_tensor_read_async: %s has no data (traced)",
                     t->name[0] ? t->name : "the tensor");
        return TE_ERR_STATE;
    }
    if (!t->nbytes)
        return TE_OK;
    return te_backend_for(t)->to_host_async(pinned_dst, te_data(t), t->nbytes, &tk->pending) ? TE_OK
                                                                                              : TE_ERR_DEVICE;
}

te_status te_copy_wait(te_copy_ticket *tk)
{
    if (!tk->pending)
        return TE_OK;
    void *pending = tk->pending;
    tk->pending = NULL; /* released by the wait, whatever it says */
    return te_backends[tk->device]->wait(pending) ? TE_OK : TE_ERR_DEVICE;
}
