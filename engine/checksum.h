/*
 * checksum.h — the 64-bit checksum of a run of bytes that time travel
 * keeps per step (the parameters after the update) and per op output
 * (locating), written once for the host and the device.
 *
 * The bytes are read as little-endian 64-bit words, the last one padded
 * with zeros; word i is mixed with its index (a bijection of the word, so
 * any change of one word changes its term) and the terms are added modulo
 * 2^64. An integer sum is the same in any order, so the CPU's loop and a
 * GPU's tree of threads and atomics (cuda/k_checksum.cu) give the same
 * value, and only 8 bytes cross to the host. A final mix folds in the
 * length. Not cryptographic: it tells a replay from its recording.
 *
 * Valid C11 and CUDA C++, as cuda/k_math.h: in a .cu file the functions
 * are __host__ __device__.
 */
#ifndef TE_CHECKSUM_H
#define TE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TE_SUM_HD static inline __host__ __device__
#else
#define TE_SUM_HD static inline
#endif

/* Word i's term: w xored with i's key (i+1 times the golden ratio), one
 * odd multiply and a xorshift: a bijection of w, and cheap enough that
 * the CPU's loop runs at memory speed (about 12 GB/s on one core of the
 * bench machine; splitmix64's full finaliser ran at half that). */
TE_SUM_HD uint64_t te_sum_term(uint64_t i, uint64_t w)
{
    const uint64_t z = (w ^ ((i + 1) * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
    return z ^ (z >> 29);
}

/* Word i of the n bytes at p, byte by byte (any alignment; past n: zeros). */
TE_SUM_HD uint64_t te_sum_word(const unsigned char *p, size_t n, size_t i)
{
    uint64_t w = 0;
    for (size_t k = 0; k < 8 && 8 * i + k < n; k++)
        w |= (uint64_t)p[8 * i + k] << (8 * k);
    return w;
}

/* The checksum from the sum of the terms and the length in bytes. */
TE_SUM_HD uint64_t te_sum_final(uint64_t sum, size_t n)
{
    uint64_t z = sum ^ 0x7464626772656321ull ^ (uint64_t)n * 0x94d049bb133111ebull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; /* splitmix64's finaliser */
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The words of n bytes. */
TE_SUM_HD size_t te_sum_words(size_t n) { return (n + 7) / 8; }

#endif
