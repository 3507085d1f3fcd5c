/*
 * bench_util.h — what the bench programs share: a monotonic clock, a
 * comparison for qsort, and a positional integer argument.
 */
#ifndef TDBG_BENCH_UTIL_H
#define TDBG_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* argv[i] as an integer in [1, 65536], def when absent; a bad one ends the
 * program (status 2) with usage. */
static inline int bench_arg(int argc, char **argv, int i, int def, const char *usage)
{
    if (argc <= i)
        return def;
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*end || v < 1 || v > 1 << 16) {
        fprintf(stderr, "%s: bad argument '%s'\nusage: %s\n", argv[0], argv[i], usage);
        exit(2);
    }
    return (int)v;
}

#endif
