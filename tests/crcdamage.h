/* crcdamage.h — damage that Fletcher-32 misses and CRC-32C catches, for the
 * tests of verify (test_tdbg_dump.c) and tdbg-diff (test_tdbg_diff.c). */
#ifndef TDBG_CRCDAMAGE_H
#define TDBG_CRCDAMAGE_H

/* What tu_crc_damage does to chunk 1 of /op0/out0. */
typedef enum {
    TU_FLIP_FF,     /* 64 zero bytes XOR-ed with 0xff: Fletcher-32 sees the same sums */
    TU_FLIP_BIT,    /* one bit: both checksums see it */
    TU_SWAP_WORDS,  /* a 0xffff and a 0x0000 16-bit word swapped: Fletcher-32 misses it */
} tu_damage;

/* Writes DIR/step-00000000.h5 with one f32 tensor /op0/out0 of [300, 1000]
 * in two chunks of 150 rows; chunk 1 holds a run of zeros and a value whose
 * halves are 0xffff and 0x0000. */
void tu_crc_step(const char *dir);
/* Damages chunk 1 of that tensor in the step file. */
void tu_crc_damage(const char *step, tu_damage d);
/* Removes the crc32c attribute of every tensor, as files written before it. */
void tu_crc_strip(const char *step);

#endif
