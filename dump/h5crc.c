/* h5crc.c — the `crc32c` attribute of tensor datasets: one CRC-32C per
 * chunk, over the chunk's values (a last chunk's padding and the
 * Fletcher-32 HDF5 stores after it are not part of it), in chunk order.
 * An attribute, not a filter: every HDF5 reader opens the files as before,
 * and h5py or h5dump show it like the other attributes. */
#include "h5crc.h"

#include <stdio.h>
#include <stdlib.h>

int dump_chunk_split(int rank, const hsize_t *dims, const hsize_t *chunk)
{
    int s = rank;   /* chunk[j] == dims[j] for every j >= s */
    while (s > 0 && chunk[s - 1] == dims[s - 1])
        s--;
    int k = s > 0 ? s - 1 : 0;
    for (int j = 0; j < k; j++)
        if (chunk[j] != 1)
            return -1;
    return k;
}

int64_t dump_chunk_runs(int rank, const hsize_t *dims, const hsize_t *chunk, dump_run *runs)
{
    int k = rank < 1 ? -1 : dump_chunk_split(rank, dims, chunk);
    if (k < 0 || chunk[k] == 0)
        return -1;
    hsize_t outer = 1, inner = 1;
    for (int j = 0; j < k; j++)
        outer *= dims[j];
    for (int j = k + 1; j < rank; j++)
        inner *= dims[j];
    int64_t count = 0;
    for (hsize_t o = 0; o < outer; o++)
        for (hsize_t at = 0; at < dims[k]; at += chunk[k], count++)
            if (runs) {
                hsize_t rows = dims[k] - at < chunk[k] ? dims[k] - at : chunk[k];
                runs[count] = (dump_run){ .first = (int64_t)((o * dims[k] + at) * inner),
                                          .count = (int64_t)(rows * inner) };
            }
    return count;
}

bool dump_crc_write(hid_t ds, const uint32_t *crc, int64_t count)
{
    hsize_t dim = (hsize_t)count;
    hid_t sp = H5Screate_simple(1, &dim, NULL);
    hid_t a = sp < 0 ? -1 : H5Acreate2(ds, DUMP_CRC_ATTR, H5T_STD_U32LE, sp, H5P_DEFAULT,
                                       H5P_DEFAULT);
    bool ok = a >= 0 && H5Awrite(a, H5T_NATIVE_UINT32, crc) >= 0;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    return ok;
}

bool dump_crc_read(hid_t ds, int64_t count, uint32_t **crc, const char *file, const char *path,
                   char *err, size_t n)
{
    *crc = NULL;
    htri_t has = H5Aexists(ds, DUMP_CRC_ATTR);
    if (has == 0)
        return true;
    hid_t a = has < 0 ? -1 : H5Aopen(ds, DUMP_CRC_ATTR, H5P_DEFAULT);
    hid_t t = a < 0 ? -1 : H5Aget_type(a);
    hid_t sp = a < 0 ? -1 : H5Aget_space(a);
    hsize_t dim = 0;
    bool ok = t >= 0 && sp >= 0 && H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 4 &&
              H5Tget_sign(t) == H5T_SGN_NONE && H5Sget_simple_extent_ndims(sp) == 1 &&
              H5Sget_simple_extent_dims(sp, &dim, NULL) == 1 && dim == (hsize_t)count;
    uint32_t *v = ok ? malloc((size_t)count * sizeof *v) : NULL;
    ok = v && H5Aread(a, H5T_NATIVE_UINT32, v) >= 0;
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    if (!ok) {
        free(v);
        return dump_h5_fail(err, n, "%s: %s: attribute '%s' is not %lld uint32 values (one a "
                            "chunk)", file, path, DUMP_CRC_ATTR, (long long)count);
    }
    *crc = v;
    return true;
}

/* The message of a chunk whose values do not match their CRC. */
static void crc_fail(const char *file, const char *path, int64_t chunk, int64_t first,
                     int64_t count, char *err, size_t n)
{
    dump_h5_fail(err, n, "%s: %s: cannot read the values: data error detected by CRC-32C "
                 "checksum (chunk %lld, elements %lld..%lld)", file, path, (long long)chunk,
                 (long long)first, (long long)(first + count - 1));
}

bool dump_crc_extents(hid_t ds, const char *file, const char *path, dump_extent *e, int count,
                      char *err, size_t n)
{
    uint32_t *crc = NULL;
    if (!dump_crc_read(ds, count, &crc, file, path, err, n))
        return false;
    for (int c = 0; c < count; c++) {
        e[c].chunk = c;
        e[c].has_crc = crc != NULL;
        e[c].crc = crc ? crc[c] : 0;
    }
    free(crc);
    return true;
}

bool dump_crc_extent_check(const char *file, const dump_tensor_info *ti, const dump_extent *e,
                           const void *stored, char *err, size_t n)
{
    size_t bytes = (size_t)e->count * te_dtype_size(ti->dtype);
    if (!e->has_crc)
        return true;
    if (bytes > e->size || dump_crc32c(0, stored, bytes) != e->crc) {
        crc_fail(file, ti->path, e->chunk, e->first, e->count, err, n);
        return false;
    }
    return true;
}

/* The chunks of dataset ds as runs into *runs (free() it): their count,
 * -1 when they are not runs. */
static int64_t dataset_runs(hid_t ds, dump_run **runs)
{
    hid_t dcpl = H5Dget_create_plist(ds), sp = H5Dget_space(ds);
    int rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    hsize_t dims[TE_MAX_DIMS], chunk[TE_MAX_DIMS];
    int64_t count = -1;
    *runs = NULL;
    if (dcpl >= 0 && rank >= 1 && rank <= TE_MAX_DIMS &&
        H5Sget_simple_extent_dims(sp, dims, NULL) == rank &&
        H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, rank, chunk) == rank)
        count = dump_chunk_runs(rank, dims, chunk, NULL);
    if (count > 0 && (*runs = malloc((size_t)count * sizeof **runs)) != NULL)
        dump_chunk_runs(rank, dims, chunk, *runs);
    else
        count = -1;
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sp >= 0)
        H5Sclose(sp);
    return count;
}

int dump_crc_check_values(hid_t file, const char *path, const dump_tensor_info *ti,
                          const void *values, char *err, size_t n)
{
    hid_t ds = ti->numel > 0 ? H5Dopen2(file, ti->path, H5P_DEFAULT) : -1;
    if (ds < 0 || H5Aexists(ds, DUMP_CRC_ATTR) <= 0) {
        if (ds >= 0)
            H5Dclose(ds);
        return 0;   /* an empty tensor, or a file from before the CRC */
    }
    dump_run *runs = NULL;
    uint32_t *crc = NULL;
    int64_t count = dataset_runs(ds, &runs);
    int rc = -1;
    if (count < 0)
        dump_h5_fail(err, n, "%s: %s: has attribute '%s' but its chunks are not runs of its "
                     "values", path, ti->path, DUMP_CRC_ATTR);
    else if (dump_crc_read(ds, count, &crc, path, ti->path, err, n))
        rc = 1;
    const size_t esize = te_dtype_size(ti->dtype);
    const unsigned char *v = values;
    for (int64_t c = 0; rc == 1 && crc && c < count; c++)
        if (dump_crc32c(0, v + (size_t)runs[c].first * esize, (size_t)runs[c].count * esize) !=
            crc[c]) {
            crc_fail(path, ti->path, c, runs[c].first, runs[c].count, err, n);
            rc = -1;
        }
    free(runs);
    free(crc);
    H5Dclose(ds);
    return rc;
}
