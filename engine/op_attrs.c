/* op_attrs.c — an op's attributes as text, for tools that rebuild the op
 * from a dump (tdbg-diff recomputes a low-precision run's ops in f32):
 * te_op_attrs. Only the attributes the op type uses, "key=value" separated
 * by spaces; floats with 9 significant digits, so they read back exactly. */
#include "te_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The node a forward record reports: what produced its first output. */
static const te_node *record_node(const te_op_record *r)
{
    if (r->phase != TE_PHASE_FORWARD || r->n_outputs < 1 || !r->outputs[0])
        return NULL;
    const te_node *n = r->outputs[0]->node;
    return n && r->name && strcmp(n->name, r->name) == 0 ? n : NULL;
}

int te_op_attrs(const te_op_record *r, char *buf, size_t size)
{
    const te_node *n = record_node(r);
    if (size)
        buf[0] = '\0';
    if (!n)
        return -1;
    const te_attrs *a = &n->a;
    switch (n->op) {
    case TE_OP_MATMUL:
        return snprintf(buf, size, "trans_a=%d trans_b=%d", a->trans_a, a->trans_b);
    case TE_OP_CONV2D:
        return snprintf(buf, size, "stride=%d pad=%d", a->stride, a->pad);
    case TE_OP_MAXPOOL2D:
    case TE_OP_AVGPOOL2D:
        return snprintf(buf, size, "kernel=%d stride=%d pad=%d", a->kernel, a->stride, a->pad);
    case TE_OP_SOFTMAX:
    case TE_OP_LOG_SOFTMAX:
        return snprintf(buf, size, "axis=%d", a->axis);
    case TE_OP_SUM:
    case TE_OP_MEAN:
        return snprintf(buf, size, "axis=%d keepdim=%d", a->axis, a->keepdim);
    case TE_OP_TRANSPOSE:
        return snprintf(buf, size, "dim0=%d dim1=%d", a->dim0, a->dim1);
    case TE_OP_SCALE:
        return snprintf(buf, size, "scale=%.9g", a->scale);
    case TE_OP_DROPOUT:
        return snprintf(buf, size, "p=%.9g scale=%.9g training=%d seed=%" PRIu64, a->p, a->scale,
                        a->training, a->seed);
    case TE_OP_MASKED_FILL:
        return snprintf(buf, size, "value=%.9g", a->value);
    case TE_OP_BATCHNORM:
        return snprintf(buf, size, "eps=%.9g momentum=%.9g training=%d", a->eps, a->momentum,
                        a->training);
    case TE_OP_LAYERNORM:
        return snprintf(buf, size, "eps=%.9g", a->eps);
    default:
        return 0;   /* no attribute: the inputs' shapes say everything */
    }
}
