/*
 * gradcheck.h — finite-difference gradient checks.
 *
 * For L = sum(r * f(inputs)) with a fixed random r, compares the engine's
 * dL/dx for every input marked in `check` against central differences
 * (computed in double from f32 forwards, on up to 64 sampled elements).
 */
#ifndef TDBG_GRADCHECK_H
#define TDBG_GRADCHECK_H

#include "te.h"

typedef te_tensor *(*gc_fn)(te_tensor **inputs, void *ctx);

/* inputs must be persistent float tensors; those with check[i] get
 * requires_grad. Fails the test naming `what`, the input, the index and both
 * gradients when |analytic - numeric| > tol * max(1, |numeric|). */
void gc_check(const char *what, gc_fn f, void *ctx, te_tensor **inputs, int n,
              const bool *check, float eps, float tol);

/* A persistent f32 tensor of uniform values in [lo, hi) from seed. */
te_tensor *gc_random(int ndim, const int64_t *shape, float lo, float hi, uint64_t seed);

#endif
