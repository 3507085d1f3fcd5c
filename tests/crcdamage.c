/* crcdamage.c — see crcdamage.h. */
#include "crcdamage.h"
#include "h5file.h"
#include "testutil.h"

#include <check.h>
#include <hdf5.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ROWS = 300, COLS = 1000, ZERO_ROW = 200, ODD = 250000 };

void tu_crc_step(const char *dir)
{
    char err[512] = "";
    float *v = malloc(ROWS * COLS * sizeof *v);
    ck_assert(v != NULL);
    for (int i = 0; i < ROWS * COLS; i++)
        v[i] = (float)(i % 97 + 1) * 0.5f;
    memset(v + ZERO_ROW * COLS, 0, 10 * COLS * sizeof *v);
    const uint32_t odd = 0x0000ffffu;   /* bytes ff ff 00 00: words 0xffff, 0x0000 */
    memcpy(&v[ODD], &odd, 4);
    dump_step_writer *w = dump_step_create(dir, 0, 0, err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    dump_tensor_info ti = tu_dump_info("op0", "Op", DUMP_OUT, 0, 0, TE_PHASE_FORWARD, "t0", TE_F32,
                                       te_shape(ROWS, COLS));
    ck_assert_msg(dump_step_add_raw(w, &ti, v, err, sizeof err), "%s", err);
    ck_assert_msg(dump_step_commit(w, err, sizeof err), "%s", err);
    free(v);
}

void tu_crc_damage(const char *step, tu_damage d)
{
    char err[512] = "";
    dump_step_reader *r = dump_step_open(step, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    dump_extent *e = NULL;
    ck_assert_int_eq(dump_step_extents(r, 0, &e, err, sizeof err), 2);
    ck_assert(e[1].first == 150 * COLS);
    const uint64_t chunk = e[1].offset;
    free(e);
    dump_step_close(r);
    int fd = open(step, O_RDWR);
    ck_assert(fd >= 0);
    unsigned char b[64];
    off_t at = (off_t)chunk + (d == TU_FLIP_FF ? (ZERO_ROW - 150) * COLS * 4 + 400
                              : d == TU_FLIP_BIT ? 1000 : (ODD - 150 * COLS) * 4);
    size_t len = d == TU_FLIP_FF ? 64 : d == TU_FLIP_BIT ? 1 : 4;
    ck_assert(pread(fd, b, len, at) == (ssize_t)len);
    if (d == TU_FLIP_FF) {
        for (size_t i = 0; i < len; i++) {
            ck_assert_uint_eq(b[i], 0);
            b[i] ^= 0xff;
        }
    } else if (d == TU_FLIP_BIT) {
        b[0] ^= 0x10;
    } else {
        ck_assert(b[0] == 0xff && b[1] == 0xff && b[2] == 0 && b[3] == 0);
        unsigned char s[4] = { b[2], b[3], b[0], b[1] };
        memcpy(b, s, 4);
    }
    ck_assert(pwrite(fd, b, len, at) == (ssize_t)len);
    close(fd);
}

void tu_crc_strip(const char *step)
{
    hid_t f = H5Fopen(step, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t ds = f < 0 ? -1 : H5Dopen2(f, "/op0/out0", H5P_DEFAULT);
    ck_assert(ds >= 0 && H5Adelete(ds, "crc32c") >= 0);
    H5Dclose(ds);
    H5Fclose(f);
}
