/* checksum.c — the CPU's checksum of a run of bytes (checksum.h), the
 * reference the device's must equal bit for bit. */
#include "checksum.h"
#include "te_internal.h"

#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the checksum reads words as the device does: little-endian");

uint64_t te_checksum_host(const void *p, size_t n)
{
    const unsigned char *b = p;
    const size_t full = n / 8;
    uint64_t sum = 0;
    for (size_t i = 0; i < full; i++) {
        uint64_t w;
        memcpy(&w, b + 8 * i, sizeof w); /* little-endian hosts: the word te_sum_word reads */
        sum += te_sum_term(i, w);
    }
    if (full * 8 < n)
        sum += te_sum_term(full, te_sum_word(b, n, full));
    return te_sum_final(sum, n);
}
