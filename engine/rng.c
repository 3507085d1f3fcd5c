/* rng.c — counter-based random numbers: a value is a pure function of
 * (seed, stream, counter), so parallel loops and worker threads draw the same
 * numbers whatever the thread count or order. */
#include "te_internal.h"

#include <math.h>

uint64_t te_rand_u64(uint64_t seed, uint64_t stream, uint64_t counter)
{
    return te_mix64(te_rand_key(seed, stream) + counter * TE_RAND_GAMMA);
}

float te_rand_uniform(uint64_t seed, uint64_t stream, uint64_t counter)
{
    /* 24 high bits give every float in [0,1) with spacing 2^-24. */
    return (float)(te_rand_u64(seed, stream, counter) >> 40) * (1.0f / 16777216.0f);
}

float te_rand_normal(uint64_t seed, uint64_t stream, uint64_t counter)
{
    /* Box-Muller on two independent draws derived from the same counter. */
    uint64_t r = te_rand_u64(seed, stream, counter);
    double u1 = ((double)(r >> 11) + 1.0) * (1.0 / 9007199254740993.0); /* (0,1] */
    double u2 = (double)(te_mix64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
