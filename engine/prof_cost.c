/*
 * prof_cost.c — the profiler's cost model, a table beside the op table
 * keyed by the records' type names: the FLOPs an op does (multiply-adds
 * count 2) and the bytes it moves (its inputs' and outputs' sizes).
 * Estimates for achieved GFLOP/s and GB/s, exact for the GEMM-shaped ops.
 */
#include "te_internal.h"

#include <string.h>

typedef enum {
    COST_GEMM,   /* MatMul, Linear: 2*M*N*K, K the first input's last dim */
    COST_CONV,   /* Conv2D: 2*numel(out)*Cin*KH*KW */
    COST_PER_EL, /* factor * numel of the first input */
    COST_NONE,   /* moves or views data: no arithmetic */
} cost_kind;

static const struct {
    const char *type;
    cost_kind kind;
    double factor;
} costs[] = {
    { "MatMul", COST_GEMM, 2 }, { "Linear", COST_GEMM, 2 }, { "Conv2D", COST_CONV, 2 },
    { "Add", COST_PER_EL, 1 }, { "Sub", COST_PER_EL, 1 }, { "Mul", COST_PER_EL, 1 },
    { "Div", COST_PER_EL, 1 }, { "Scale", COST_PER_EL, 1 }, { "Relu", COST_PER_EL, 1 },
    { "Gelu", COST_PER_EL, 8 }, { "Tanh", COST_PER_EL, 4 }, { "Sigmoid", COST_PER_EL, 4 },
    { "Exp", COST_PER_EL, 1 }, { "Log", COST_PER_EL, 1 }, { "Sqrt", COST_PER_EL, 1 },
    { "Softmax", COST_PER_EL, 5 }, { "LogSoftmax", COST_PER_EL, 5 },
    { "CrossEntropy", COST_PER_EL, 5 }, { "MSE", COST_PER_EL, 3 },
    { "MaxPool2D", COST_PER_EL, 1 }, { "AvgPool2D", COST_PER_EL, 1 },
    { "GlobalAvgPool", COST_PER_EL, 1 }, { "BatchNorm", COST_PER_EL, 8 },
    { "LayerNorm", COST_PER_EL, 8 }, { "Dropout", COST_PER_EL, 1 }, { "Sum", COST_PER_EL, 1 },
    { "Mean", COST_PER_EL, 1 }, { "MaskedFill", COST_PER_EL, 1 }, { "Reshape", COST_NONE, 0 },
    { "Flatten", COST_NONE, 0 }, { "Transpose", COST_NONE, 0 }, { "Embedding", COST_NONE, 0 },
    { "Cast", COST_NONE, 0 }, { "SGD", COST_PER_EL, 2 }, { "Adam", COST_PER_EL, 10 },
    { "AdamW", COST_PER_EL, 12 }, { "Unscale", COST_PER_EL, 1 },
};

static int64_t numel(const te_tensor *t) { return t ? t->numel : 0; }

/* The forward type a record's type names ("MatMulGrad" -> "MatMul"). */
static int lookup(const char *type, bool *grad)
{
    size_t n = strlen(type);
    *grad = n > 4 && strcmp(type + n - 4, "Grad") == 0;
    if (*grad)
        n -= 4;
    for (size_t i = 0; i < sizeof costs / sizeof costs[0]; i++)
        if (strlen(costs[i].type) == n && strncmp(costs[i].type, type, n) == 0)
            return (int)i;
    return -1;
}

/* Forward: inputs (x, w), output y. Backward: inputs dy, outputs (dx, dw),
 * reads the forward inputs; each gradient it makes is one more GEMM. */
double te_prof_flops(const te_op_record *rec)
{
    bool grad;
    int i = rec->type ? lookup(rec->type, &grad) : -1;
    if (i < 0)
        return 0;
    const te_tensor *x = grad ? (rec->n_reads > 0 ? rec->reads[0] : NULL) : (rec->n_inputs > 0 ? rec->inputs[0] : NULL);
    const te_tensor *w = grad ? (rec->n_reads > 1 ? rec->reads[1] : NULL) : (rec->n_inputs > 1 ? rec->inputs[1] : NULL);
    const te_tensor *y = grad ? (rec->n_inputs > 0 ? rec->inputs[0] : NULL) : (rec->n_outputs > 0 ? rec->outputs[0] : NULL);
    int gemms = 1;
    if (grad) {
        gemms = 0;
        for (int k = 0; k < rec->n_outputs && k < 2; k++)
            gemms += rec->outputs[k] != NULL;
    }
    switch (costs[i].kind) {
    case COST_GEMM:
        if (!x || !y || x->ndim < 1)
            return 0;
        return costs[i].factor * (double)numel(y) * (double)x->shape[x->ndim - 1] * gemms;
    case COST_CONV:
        if (!w || !y || w->ndim != 4 || w->shape[0] == 0)
            return 0;
        return costs[i].factor * (double)numel(y) * (double)(numel(w) / w->shape[0]) * gemms;
    case COST_PER_EL: {
        /* Update ops' records carry the parameter as their output. */
        const te_tensor *t = rec->n_inputs > 0 && rec->inputs[0] ? rec->inputs[0]
                             : rec->n_outputs > 0 ? rec->outputs[0] : NULL;
        return costs[i].factor * (double)numel(t) * (grad ? 2 : 1);
    }
    case COST_NONE: return 0;
    }
    return 0;
}

uint64_t te_prof_bytes(const te_op_record *rec)
{
    uint64_t b = 0;
    for (int k = 0; k < rec->n_inputs; k++)
        b += rec->inputs[k] ? rec->inputs[k]->nbytes : 0;
    for (int k = 0; k < rec->n_outputs; k++)
        b += rec->outputs[k] ? rec->outputs[k]->nbytes : 0;
    return b;
}
