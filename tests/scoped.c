/*
 * scoped.c — a tiny training program for the TUI's tests: its ops live
 * under the scope "a b=c", whose space and '=' cut any "key=value" reader
 * of the `stopped:` line, and the square root of a negative input makes a
 * NaN at step 1, element [1,2] of a b=c/sqrt:out0. Built by `make check`
 * only.
 */
#include "te.h"

#include <stdio.h>

int main(void)
{
    if (te_init(&(te_config){ .seed = 1, .threads = 1 }) != TE_OK) {
        fprintf(stderr, "scoped: %s\n", te_error());
        return 2;
    }
    te_tensor *w = te_param_new("w", TE_F32, te_shape(2, 4));
    te_init_uniform(w, 0.5f, 1.0f);
    te_optim *opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 0.01f });
    for (int step = 0; step < 3; step++) {
        te_step_begin();
        float xv[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, zero[8] = { 0 };
        if (step == 1)
            xv[6] = -1;
        te_tensor *x = te_tensor_from(TE_F32, te_shape(2, 4), xv);
        te_tensor *target = te_tensor_from(TE_F32, te_shape(2, 4), zero);
        te_scope_push("a b=c");
        te_tensor *y = te_mul(te_sqrt(x), w);
        te_scope_pop();
        te_tensor *loss = te_mse(y, target);
        if (!loss || te_backward(loss) != TE_OK || te_optim_step(opt) != TE_OK) {
            fprintf(stderr, "scoped: %s\n", te_error());
            return 2;
        }
        printf("step=%d loss=%g\n", step, (double)te_get(loss, 0));
        te_step_end();
    }
    te_optim_free(opt);
    te_shutdown();
    return 0;
}
