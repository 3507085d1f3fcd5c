/* fuzz_cond.c — the breakpoint condition parser (debugger/cond.c): any
 * text parses or is refused with a message; what parses prints back as
 * canonical text that parses to the same text again, copies, lists its
 * predicates and evaluates against an op with a NaN, an Inf and finite
 * values in its inputs and outputs. */
#include "dbg.h"
#include "fuzz.h"
#include "te.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static te_tensor *ins[2], *outs[2];
static te_op_record rec;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (te_init(&(te_config){ .seed = 1, .threads = 1 }) != TE_OK)
        abort();
    const int64_t shape[2] = { 2, 3 };
    const float a[6] = { 1, -2, 0, 4, 1e5f, -0.5f }, b[6] = { NAN, 1, 2, 3, 4, 5 },
                c[6] = { 0, 0, 0, 0, 0, 0 }, d[6] = { INFINITY, -1, 7e4f, 3, 2, 1 };
    ins[0] = te_tensor_from(TE_F32, 2, shape, a);
    ins[1] = te_tensor_from(TE_F32, 2, shape, b);
    outs[0] = te_tensor_from(TE_F32, 2, shape, c);
    outs[1] = te_tensor_from(TE_F32, 2, shape, d);
    rec = (te_op_record){ .step = 3, .phase = TE_PHASE_FORWARD, .name = "fc1/linear", .type = "Linear",
                          .inputs = ins, .n_inputs = 2, .outputs = outs, .n_outputs = 2 };
    return 0;
}

/* Every tensor's previous value is the first input: rel_change has one. */
static const te_tensor *prev(const te_tensor *t, void *user)
{
    (void)t, (void)user;
    return ins[0];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size), err[512];
    dbg_cond *c = dbg_cond_parse(text, err, sizeof err);
    if (!c) {
        if (!err[0])
            abort();   /* a refusal always says why */
        free(text);
        return 0;
    }
    /* The canonical text is a fixed point: it parses, to itself. */
    char *canon = strdup(dbg_cond_text(c));
    dbg_cond *again = dbg_cond_parse(canon, err, sizeof err);
    if (!again || strcmp(dbg_cond_text(again), canon) != 0)
        abort();
    dbg_cond *copy = dbg_cond_copy(c);
    if (copy && strcmp(dbg_cond_text(copy), canon) != 0)
        abort();
    dbg_pred preds[8];
    int n = dbg_cond_preds(c, preds, 8);
    for (int i = 0; i < n && i < 8; i++)
        if (!dbg_func_name(preds[i].func) || !dbg_cmp_name(preds[i].cmp) ||
            !dbg_scope_name(preds[i].scope, preds[i].slot))
            abort();
    dbg_hit hit;
    bool holds = dbg_cond_eval(c, &(dbg_eval_ctx){ .rec = &rec, .prev = prev }, &hit);
    if (dbg_cond_eval(again, &(dbg_eval_ctx){ .rec = &rec, .prev = prev }, NULL) != holds)
        abort();   /* the canonical text means the same */
    (void)dbg_cond_uses_rel_change(c);
    dbg_cond_free(copy);
    dbg_cond_free(again);
    dbg_cond_free(c);
    free(canon);
    free(text);
    return 0;
}
