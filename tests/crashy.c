/*
 * crashy.c — a training program that goes wrong in its own code, for the
 * crash suite (tests/test_crash.c). `crashy null` dereferences NULL after
 * step 2 has ended (between steps, in no op); `crashy exit` calls exit(3)
 * during step 1, after its op "scale" finished. Built by `make check` only.
 */
#include "te.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* noinline: the backtrace names it; UBSan lets the fault happen */
__attribute__((noinline, no_sanitize("null"))) static void use_after_step(int step)
{
    volatile int *volatile p = NULL;
    if (step == 2)
        *p = step;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "null") != 0 && strcmp(argv[1], "exit") != 0)) {
        fprintf(stderr, "usage: crashy null|exit\n");
        return 2;
    }
    bool null = strcmp(argv[1], "null") == 0;
    if (te_init(&(te_config){ .seed = 1, .threads = 1 }) != TE_OK) {
        fprintf(stderr, "crashy: %s\n", te_error());
        return 2;
    }
    float xv[4] = { 1, 2, 3, 4 };
    for (int step = 0; step < 4; step++) {
        te_step_begin();
        te_tensor *x = te_tensor_from(TE_F32, te_shape(4), xv);
        te_scope_push("scale");
        te_tensor *y = te_scale(x, 2.0f);
        te_scope_pop();
        if (!null && step == 1)
            exit(3);
        printf("step=%d y0=%g\n", step, (double)te_get(y, 0));
        te_step_end();
        if (null)
            use_after_step(step);
    }
    te_shutdown();
    return 0;
}
