/*
 * prof_op_cost.c — what the profiler adds to one op, measured where the
 * machine's noise cannot hide it: steps of OPS small ops (an add, a relu,
 * their backward and an SGD update of one parameter), with the profiler
 * off and on in alternating blocks, timed by the thread's CPU clock.
 *
 *   usage: prof_op_cost [OPS [STEPS [ROUNDS]]]      (200, 400, 9)
 *
 * Prints `prof_op_cost ops_per_step=N off_us_per_op=X on_us_per_op=X
 * added_us_per_op=X min=X max=X rounds=R`: the median over the rounds of
 * (on - off) per op, each round's off and on blocks side by side, their
 * order flipped every other round. bench/prof.sh multiplies it by the
 * examples' ops per step to bound the profiler's share of their steps.
 */
#include "bench_util.h"
#include "te.h"

#include <stdio.h>
#include <stdlib.h>

static double thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* One step: n/3 pairs of add and relu on a [64] parameter, the loss their
 * sum, its backward and the update: about n ops reported. CPU us per op. */
static double steps(te_tensor *w, te_optim *opt, int n, int count, int *ops)
{
    te_tensor *x = te_tensor_persistent(TE_F32, te_shape(64));
    te_fill(x, 0.5f);
    const double t0 = thread_cpu_us();
    for (int s = 0; s < count; s++) {
        te_step_begin();
        te_tensor *h = w;
        for (int i = 0; i < n / 4; i++)
            h = te_relu(te_add(h, x));
        te_tensor *loss = te_sum(h, TE_ALL, false);
        if (!loss || te_backward(loss) != TE_OK || te_optim_step(opt) != TE_OK) {
            fprintf(stderr, "prof_op_cost: %s\n", te_error());
            exit(1);
        }
        te_step_end();
    }
    const double us = thread_cpu_us() - t0;
    te_tensor_free(x);
    /* forward: 2 per pair and the sum; backward: as many; the update */
    *ops = 2 * (2 * (n / 4) + 1) + 1;
    return us / ((double)count * *ops);
}

int main(int argc, char **argv)
{
    const char *usage = "prof_op_cost [OPS [STEPS [ROUNDS]]]";
    const int n = bench_arg(argc, argv, 1, 200, usage), count = bench_arg(argc, argv, 2, 400, usage),
              rounds = bench_arg(argc, argv, 3, 9, usage);
    if (te_init(&(te_config){ .seed = 1, .threads = 1 }) != TE_OK) {
        fprintf(stderr, "prof_op_cost: %s\n", te_error());
        return 1;
    }
    te_tensor *w = te_param_new("w", TE_F32, te_shape(64));
    te_fill(w, 0.1f);
    te_optim *opt = te_sgd_new(te_params(), te_param_count(), &(te_sgd_opts){ .lr = 1e-6f });
    int ops = 0;
    steps(w, opt, n, count / 4 + 1, &ops); /* warm up the allocator and the caches */
    double *added = malloc((size_t)rounds * sizeof *added), off_sum = 0, on_sum = 0;
    for (int r = 0; r < rounds; r++) {
        double us[2];
        for (int k = 0; k < 2; k++) {
            const bool on = (k ^ (r & 1)) != 0;
            if (on && te_profile_start(&(te_profile_opts){ .last = -1, .keep = 10 }) != TE_OK) {
                fprintf(stderr, "prof_op_cost: %s\n", te_error());
                return 1;
            }
            us[on] = steps(w, opt, n, count, &ops);
            if (on)
                te_profile_stop();
        }
        added[r] = us[1] - us[0];
        off_sum += us[0];
        on_sum += us[1];
    }
    qsort(added, (size_t)rounds, sizeof *added, bench_cmp_double);
    printf("prof_op_cost ops_per_step=%d off_us_per_op=%.4f on_us_per_op=%.4f added_us_per_op=%.4f min=%.4f "
           "max=%.4f rounds=%d\n",
           ops, off_sum / rounds, on_sum / rounds, added[rounds / 2], added[0], added[rounds - 1], rounds);
    free(added);
    te_optim_free(opt);
    return 0;
}
