/* crc32c.c — CRC-32C (Castagnoli, the iSCSI and ext4 CRC), the per-chunk
 * checksum tdbg keeps beside HDF5's Fletcher-32 (h5crc.c says where).
 *
 * Fletcher-32 sums 16-bit words modulo 65535, so a word of 0x0000 and one of
 * 0xffff weigh the same: a run of zeros XOR-ed with 0xff passes it, as do
 * many swaps of words. A CRC catches every burst of up to 32 bits and every
 * odd number of flipped bits.
 *
 * x86-64 has an instruction for it (SSE4.2 crc32), chosen at run time as
 * CPUs differ; elsewhere, and on CPUs without it, a table-driven
 * slice-by-8 does the same in software. The hardware loop runs three
 * independent streams over three blocks (the instruction's latency is three
 * times its issue rate) and joins them with shift tables, which multiply a
 * CRC by x^(8 * block bytes) modulo the polynomial. */
#include "h5file.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82f63b78u   /* CRC-32C, bit-reflected */
#define BLOCK 4096         /* bytes of each of the three streams */

static uint32_t table[8][256];   /* slice-by-8: table[k][b] is b followed by k zero bytes */
static uint32_t shift1[4][256];  /* multiply by x^(8 * BLOCK): byte j of the CRC at [j] */
static uint32_t shift2[4][256];  /* by x^(8 * 2 * BLOCK) */
static bool have_hw;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The raw (not inverted) CRC of buf, in software. */
static uint32_t sw_raw(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        crc = table[0][(crc ^ *p++) & 0xff] ^ crc >> 8;
        len--;
    }
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;   /* little-endian: the CRC covers the first four bytes */
        crc = table[7][w & 0xff] ^ table[6][w >> 8 & 0xff] ^ table[5][w >> 16 & 0xff] ^
              table[4][w >> 24 & 0xff] ^ table[3][w >> 32 & 0xff] ^
              table[2][w >> 40 & 0xff] ^ table[1][w >> 48 & 0xff] ^ table[0][w >> 56];
    }
    while (len--)
        crc = table[0][(crc ^ *p++) & 0xff] ^ crc >> 8;
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define HW 1

static uint32_t shift(uint32_t (*t)[256], uint32_t crc)
{
    return t[0][crc & 0xff] ^ t[1][crc >> 8 & 0xff] ^ t[2][crc >> 16 & 0xff] ^ t[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t hw_raw(uint32_t crc, const unsigned char *p,
                                                          size_t len)
{
    uint64_t c0 = crc;
    while (len && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        len--;
    }
    while (len >= 3 * BLOCK) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < BLOCK; i += 8) {
            uint64_t a, b, c;
            memcpy(&a, p + i, 8);
            memcpy(&b, p + BLOCK + i, 8);
            memcpy(&c, p + 2 * BLOCK + i, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, c);
        }
        /* the raw CRC is linear: stream 0 moved past the other two blocks */
        c0 = shift(shift2, (uint32_t)c0) ^ shift(shift1, (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * BLOCK;
        len -= 3 * BLOCK;
    }
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c0 = _mm_crc32_u64(c0, w);
    }
    while (len--)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

/* A shift table from the software CRC: t[j][b] is the raw CRC of the byte
 * value b at byte j of the CRC register run over n zero bytes. That is
 * linear in the register, so 32 runs (one a bit) give every entry. */
static void shift_table(uint32_t (*t)[256], size_t n)
{
    static const unsigned char zeros[BLOCK];
    uint32_t bit[32];
    for (int i = 0; i < 32; i++) {
        bit[i] = 1u << i;
        for (size_t done = 0; done < n; done += BLOCK)
            bit[i] = sw_raw(bit[i], zeros, BLOCK);
    }
    for (int j = 0; j < 4; j++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t c = 0;
            for (int i = 0; i < 8; i++)
                c ^= b >> i & 1 ? bit[8 * j + i] : 0;
            t[j][b] = c;
        }
}

static void init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? c >> 1 ^ POLY : c >> 1;
        table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            table[k][b] = table[0][table[k - 1][b] & 0xff] ^ table[k - 1][b] >> 8;
#ifdef HW
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
    if (have_hw) {
        shift_table(shift1, BLOCK);
        shift_table(shift2, 2 * BLOCK);
    }
#endif
}

bool dump_crc32c_hw_available(void)
{
    pthread_once(&once, init);
    return have_hw;
}

uint32_t dump_crc32c_sw(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&once, init);
    return ~sw_raw(~crc, data, len);
}

uint32_t dump_crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&once, init);
#ifdef HW
    if (have_hw)
        return ~hw_raw(~crc, data, len);
#endif
    return ~sw_raw(~crc, data, len);
}
