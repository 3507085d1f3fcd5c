/* params.c — the registries of parameters and buffers, and PyTorch-compatible
 * initialisers. */
#include "te_internal.h"
#include "graph/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static te_tensor **params;
static int n_params, cap_params;
static te_tensor **buffers;
static int n_buffers, cap_buffers;
/* Each initialiser call draws from its own stream so results do not depend
 * on how many numbers earlier calls drew. */
static uint64_t init_stream;

/* Room for one more in a registry (params or buffers), doubling it;
 * false with the error set, naming the tensor. */
static bool room(te_tensor ***v, int n, int *cap, const char *what, const char *name)
{
    if (n < *cap)
        return true;
    const int c = *cap ? 2 * *cap : 16;
    te_tensor **g = realloc(*v, (size_t)c * sizeof *g);
    if (!g) {
        te_set_error(TE_ERR_NOMEM, "%s %s: out of memory", what, name);
        return false;
    }
    *v = g;
    *cap = c;
    return true;
}

te_tensor *te_param_new(const char *name, te_dtype dt, int ndim, const int64_t *shape)
{
    if (!te_dtype_is_float(dt)) {
        te_set_error(TE_ERR_DTYPE, "param %s: dtype %s cannot hold gradients", name, te_dtype_name(dt));
        return NULL;
    }
    if (te_param_find(name)) {
        te_set_error(TE_ERR_ARG, "param %s: a parameter of that name exists already", name);
        return NULL;
    }
    if (!room(&params, n_params, &cap_params, "param", name))
        return NULL;
    te_tensor *t = te_tensor_alloc(dt, ndim, shape, TE_TENSOR_PERSISTENT | TE_TENSOR_PARAM);
    if (!t)
        return NULL;
    te_backend_for(t)->zero(te_data(t), t->nbytes);
    t->requires_grad = true;
    snprintf(t->name, sizeof t->name, "param:%s", name);
    params[n_params++] = t;
    return t;
}

te_tensor **te_params(void) { return params; }
int te_param_count(void) { return n_params; }

te_tensor *te_param_find(const char *name)
{
    if (strncmp(name, "param:", 6) == 0)
        name += 6;
    for (int i = 0; i < n_params; i++)
        if (strcmp(params[i]->name + 6, name) == 0)
            return params[i];
    return NULL;
}

te_tensor *te_buffer_new(const char *name, te_dtype dt, int ndim, const int64_t *shape)
{
    if (!name || !*name || strlen(name) >= TE_NAME_MAX) {
        te_set_error(TE_ERR_ARG, "te_buffer_new: the name %s", !name || !*name ? "is empty" : "is too long");
        return NULL;
    }
    for (int i = 0; i < n_buffers; i++)
        if (strcmp(buffers[i]->name, name) == 0) {
            te_set_error(TE_ERR_ARG, "buffer %s: a buffer of that name exists already", name);
            return NULL;
        }
    if (!room(&buffers, n_buffers, &cap_buffers, "buffer", name))
        return NULL;
    te_tensor *t = te_tensor_alloc(dt, ndim, shape, TE_TENSOR_PERSISTENT | TE_TENSOR_BUFFER);
    if (!t)
        return NULL;
    te_backend_for(t)->zero(te_data(t), t->nbytes);
    snprintf(t->name, sizeof t->name, "%s", name);
    buffers[n_buffers++] = t;
    return t;
}

te_tensor **te_buffers(void) { return buffers; }
int te_buffer_count(void) { return n_buffers; }

void te_buffer_forget(te_tensor *t)
{
    for (int i = 0; i < n_buffers; i++)
        if (buffers[i] == t) {
            memmove(&buffers[i], &buffers[i + 1], (size_t)(n_buffers - i - 1) * sizeof *buffers);
            n_buffers--;
            return;
        }
}

void te_zero_grad(void)
{
    if (te_rec_unwinding) /* the step is being unwound: nothing to clear */
        return;
    if (te_tracing)
        te_trace_zero_grad();
    for (int i = 0; i < n_params; i++)
        params[i]->grad_valid = false; /* the next backward overwrites */
}

void te_params_shutdown(void)
{
    for (int i = 0; i < n_params; i++)
        te_tensor_free(params[i]);
    free(params);
    params = NULL;
    n_params = cap_params = 0;
    while (n_buffers) /* te_tensor_free takes each out of the registry */
        te_tensor_free(buffers[n_buffers - 1]);
    free(buffers);
    buffers = NULL;
    cap_buffers = 0;
    init_stream = 0;
}

void te_init_uniform(te_tensor *t, float lo, float hi)
{
    uint64_t s = ++init_stream;
    for (int64_t i = 0; i < t->numel; i++)
        te_set(t, i, lo + (hi - lo) * te_rand_uniform(te_seed(), s, (uint64_t)i));
}

void te_init_normal(te_tensor *t, float mean, float std)
{
    uint64_t s = ++init_stream;
    for (int64_t i = 0; i < t->numel; i++)
        te_set(t, i, mean + std * te_rand_normal(te_seed(), s, (uint64_t)i));
}

void te_init_linear(te_tensor *w, te_tensor *b)
{
    /* kaiming_uniform(a=sqrt(5)) reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
    int64_t fan_in = 1;
    for (int i = 1; i < w->ndim; i++)
        fan_in *= w->shape[i];
    float bound = 1.0f / sqrtf((float)fan_in);
    te_init_uniform(w, -bound, bound);
    if (b)
        te_init_uniform(b, -bound, bound);
}
