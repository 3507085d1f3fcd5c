/* gradcheck.c — central finite differences against the engine's backward. */
#include "gradcheck.h"

#include <check.h>
#include <math.h>

te_tensor *gc_random(int ndim, const int64_t *shape, float lo, float hi, uint64_t seed)
{
    te_tensor *t = te_tensor_persistent(TE_F32, ndim, shape);
    for (int64_t i = 0; i < t->numel; i++)
        te_set(t, i, lo + (hi - lo) * te_rand_uniform(seed, 77, (uint64_t)i));
    return t;
}

/* L = sum(r * f(inputs)) in double, the tape cleared afterwards. */
static double loss_at(gc_fn f, void *ctx, te_tensor **in, const te_tensor *r)
{
    te_tensor *y = f(in, ctx);
    ck_assert_msg(y != NULL, "forward failed: %s", te_error());
    double l = 0;
    for (int64_t i = 0; i < y->numel; i++)
        l += (double)te_get(y, i) * te_get(r, i);
    te_tape_reset();
    return l;
}

void gc_check(const char *what, gc_fn f, void *ctx, te_tensor **in, int n, const bool *check,
              float eps, float tol)
{
    for (int i = 0; i < n; i++) {
        if (!in[i])
            continue;
        in[i]->requires_grad = check[i];
        in[i]->grad_valid = false;
    }
    te_tensor *y = f(in, ctx);
    ck_assert_msg(y != NULL, "%s: forward failed: %s", what, te_error());
    te_tensor *r = te_tensor_persistent(TE_F32, y->ndim, y->shape);
    for (int64_t i = 0; i < r->numel; i++)
        te_set(r, i, te_rand_uniform(4242, 1, (uint64_t)i) * 2.0f - 1.0f);
    ck_assert_msg(te_backward_with(y, r) == TE_OK, "%s: backward failed: %s", what, te_error());
    te_tape_reset();

    for (int i = 0; i < n; i++) {
        if (!in[i] || !check[i])
            continue;
        ck_assert_msg(in[i]->grad && in[i]->grad_valid, "%s: input %d got no gradient", what, i);
        int64_t numel = in[i]->numel;
        int64_t samples = numel < 64 ? numel : 64;
        for (int64_t s = 0; s < samples; s++) {
            int64_t j = numel <= 64 ? s : (int64_t)(te_rand_u64(99, (uint64_t)i, (uint64_t)s) % (uint64_t)numel);
            float x0 = te_get(in[i], j);
            te_set(in[i], j, x0 + eps);
            double lp = loss_at(f, ctx, in, r);
            te_set(in[i], j, x0 - eps);
            double lm = loss_at(f, ctx, in, r);
            te_set(in[i], j, x0);
            double num = (lp - lm) / (2.0 * (double)eps);
            double ana = te_get(in[i]->grad, j);
            double lim = tol * fmax(1.0, fabs(num));
            ck_assert_msg(fabs(ana - num) <= lim,
                          "%s: d/d input %d [%lld]: analytic %.6g, numeric %.6g (tol %.3g)", what, i,
                          (long long)j, ana, num, lim);
        }
    }
    te_tensor_free(r);
}
