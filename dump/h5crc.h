/* h5crc.h — the CRC-32C of every chunk of a tensor dataset, kept in its
 * `crc32c` attribute (docs/dump-format.md): h5write.c writes it, h5read.c
 * reads it with the chunk extents and checks it. Not for callers. */
#ifndef TDBG_H5CRC_H
#define TDBG_H5CRC_H

#include "h5file.h"

#include <hdf5.h>

#define DUMP_CRC_ATTR "crc32c"

/* One chunk of a tensor: elements [first, first + count) of its flat values. */
typedef struct dump_run {
    int64_t first, count;
} dump_run;

/* The dimension k that splits a dataset of shape dims[0..rank) chunked as
 * chunk into contiguous runs of its values: chunks span every dimension
 * after k whole and are 1 wide in every one before it. -1 when there is
 * none (a chunk is then not one run). */
int dump_chunk_split(int rank, const hsize_t *dims, const hsize_t *chunk);

/* The chunks of a dataset of shape dims[0..rank) chunked as chunk, when each
 * is one contiguous run of its values (every tensor tdbg writes): their
 * number, and into runs (when not NULL) each one's elements in chunk order
 * (the order of their chunk coordinates). -1 when they are not runs. */
int64_t dump_chunk_runs(int rank, const hsize_t *dims, const hsize_t *chunk, dump_run *runs);

/* Writes the attribute: crc[0..count), one per chunk in chunk order. */
bool dump_crc_write(hid_t ds, const uint32_t *crc, int64_t count);

/* Reads the attribute into *crc (free() it; NULL when the dataset has none,
 * as in files written before it): true, or false with a message naming
 * file and path when it is there but not count uint32 values. */
bool dump_crc_read(hid_t ds, int64_t count, uint32_t **crc, const char *file, const char *path,
                   char *err, size_t n);

/* Sets has_crc, crc and chunk of a dataset's extents e[0..count) (all its
 * chunks, in chunk order) from its attribute; has_crc stays false when it
 * has none. False with a message when the attribute is malformed. */
bool dump_crc_extents(hid_t ds, const char *file, const char *path, dump_extent *e, int count,
                      char *err, size_t n);

/* Checks an extent's stored bytes (its values first) against its CRC:
 * true when they match or it has none, else false with a message naming
 * the file, the tensor, the chunk and its elements. */
bool dump_crc_extent_check(const char *file, const dump_tensor_info *ti, const dump_extent *e,
                           const void *stored, char *err, size_t n);

/* Checks the values of a whole tensor of file (ti->nbytes bytes, as
 * stored) against its dataset's attribute: 1 when they match, 0 when it
 * has none, -1 with a message naming the file, the tensor and the chunk. */
int dump_crc_check_values(hid_t file, const char *path, const dump_tensor_info *ti,
                          const void *values, char *err, size_t n);

#endif
