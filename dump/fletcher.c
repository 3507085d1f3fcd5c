/* fletcher.c — HDF5's Fletcher-32 checksum, computed here so that step files
 * can be written chunk by chunk with H5Dwrite_chunk (h5write.c): HDF5's own
 * filter reads the data byte by byte and was a third of the writer's time.
 *
 * HDF5 sums the data as big-endian 16-bit words w_0 .. w_{n-1} (an odd last
 * byte is the high byte of one more word): sum1 = sum of w_i and sum2 = sum
 * of (n - i) * w_i, both modulo 65535 with end-around carry, so that a sum
 * that is a positive multiple of 65535 reads 0xffff and only an all-zero
 * input gives 0. The checksum is sum2 << 16 | sum1. Those are plain modular
 * sums, so they can be taken in blocks, in vector lanes, in any order. */
#include "h5file.h"

#include <string.h>

/* Words a block: sum2's block share, at most 65535 * 256 * 257 / 2, fits
 * 32 bits, so the inner loop runs on 32-bit lanes. */
#define BLOCK_WORDS 256

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
uint32_t dump_fletcher32(const void *data, size_t len)
{
    const unsigned char *p = data;
    const size_t words = len / 2;
    uint64_t t1 = 0, t2 = 0;
    uint32_t any = 0;
    for (size_t b = 0; b < words; b += BLOCK_WORDS) {
        const uint32_t k = (uint32_t)(words - b < BLOCK_WORDS ? words - b : BLOCK_WORDS);
        uint16_t x[BLOCK_WORDS];
        memcpy(x, p + 2 * b, 2 * (size_t)k);
        uint32_t s1 = 0, s2 = 0, o = 0;
#pragma omp simd reduction(+ : s1, s2) reduction(| : o)
        for (uint32_t i = 0; i < k; i++) {
            const uint32_t w = (uint16_t)(x[i] << 8 | x[i] >> 8); /* big-endian */
            s1 += w;
            s2 += (k - i) * w;
            o |= w;
        }
        t2 = (t2 + (uint64_t)k * t1 + s2) % 65535;
        t1 = (t1 + s1) % 65535;
        any |= o;
    }
    if (len % 2) {
        const uint32_t w = (uint32_t)p[len - 1] << 8;
        t1 = (t1 + w) % 65535;
        t2 = (t2 + t1) % 65535;
        any |= w;
    }
    if (!any)
        return 0;
    const uint32_t s1 = t1 ? (uint32_t)t1 : 65535, s2 = t2 ? (uint32_t)t2 : 65535;
    return s2 << 16 | s1;
}
