/* h5write.c — writes step files and run.h5 (see docs/dump-format.md), and
 * the HDF5 helpers h5read.c shares. */
#include "h5crc.h"

#include <hdf5.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_MAX (1u << 20)   /* bytes in one chunk at most */
#define TABLE_BUF_MIN (64u << 10) /* bytes of H5Dwrite's buffers for a table, at least */

/* ---- helpers shared with h5read.c ----------------------------------------- */

/* Why the first HDF5 call failed since the last dump_h5_reason (per thread:
 * HDF5's error handler is too). Calls after a failure clear HDF5's own
 * stack, so the handler takes the message as the failing call returns. */
static _Thread_local char first_reason[256];

/* Walked from the innermost entry out: the first description wins unless an
 * outer one quotes the system's message ("error message = '...'"). */
static herr_t reason_entry(unsigned i, const H5E_error2_t *e, void *data)
{
    (void)i;
    bool *have = data;
    if (!e->desc || !e->desc[0])
        return 0;
    const char *sys = strstr(e->desc, "error message = '");
    if (sys) {
        sys += strlen("error message = '");
        const char *end = strchr(sys, '\'');
        int len = end ? (int)(end - sys) : (int)strlen(sys);
        snprintf(first_reason, sizeof first_reason, "%.*s", len, sys);
        return 1;
    }
    if (!*have)
        snprintf(first_reason, sizeof first_reason, "%s", e->desc);
    *have = true;
    return 0;
}

/* The error handler while hushed: keeps the first failure's reason. */
static herr_t keep_reason(hid_t stack, void *data)
{
    (void)data;
    bool have = false;
    if (!first_reason[0])
        H5Ewalk2(stack, H5E_WALK_UPWARD, reason_entry, &have);
    return 0;
}

dump_h5_quiet dump_h5_hush(void)
{
    H5E_auto2_t func = NULL;
    void *data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &func, &data);
    H5Eset_auto2(H5E_DEFAULT, keep_reason, NULL);
    first_reason[0] = '\0';
    return (dump_h5_quiet){ (void (*)(void))func, data };
}

void dump_h5_loud(dump_h5_quiet q)
{
    H5Eset_auto2(H5E_DEFAULT, (H5E_auto2_t)q.func, q.data);
}

const char *dump_h5_reason(char *buf, size_t n)
{
    snprintf(buf, n, "%s", first_reason[0] ? first_reason : "unknown HDF5 error");
    first_reason[0] = '\0';
    return buf;
}

int64_t dump_h5_type(te_dtype dt)
{
    switch (dt) {
    case TE_F32: return H5Tcopy(H5T_IEEE_F32LE);
    case TE_I32: return H5Tcopy(H5T_STD_I32LE);
    case TE_BF16: return H5Tcopy(H5T_STD_U16LE);   /* the top half of an f32 */
    case TE_F16: {
        /* IEEE half: sign bit 15, exponent bits 10..14 (bias 15), mantissa
         * bits 0..9, which h5py maps to numpy float16. */
        hid_t t = H5Tcopy(H5T_IEEE_F32LE);
        if (t < 0 || H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 ||
            H5Tset_precision(t, 16) < 0 || H5Tset_ebias(t, 15) < 0) {
            H5Tclose(t);
            return -1;
        }
        return t;
    }
    default: return -1;
    }
}

bool dump_tensor_path(const char *op, dump_iokind io, int slot, char *buf, size_t n)
{
    size_t len = strlen(op);
    if (len == 0 || op[0] == '/' || op[len - 1] == '/' || strstr(op, "//") || slot < 0 ||
        (io != DUMP_IN && io != DUMP_OUT))
        return false;
    for (const char *p = op; p; p = strchr(p, '/')) {
        p += *p == '/';
        size_t part = strcspn(p, "/");
        if ((part == 1 && p[0] == '.') || (part == 2 && p[0] == '.' && p[1] == '.'))
            return false;
    }
    int w = snprintf(buf, n, "/%s/%s%d", op, io == DUMP_IN ? "in" : "out", slot);
    return w > 0 && (size_t)w < n;
}

/* ---- small writing helpers ------------------------------------------------- */

bool dump_h5_fail(char *err, size_t n, const char *fmt, ...)
{
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return false;
}

static char *path_join(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    if (p)
        snprintf(p, len, "%s/%s", dir, name);
    return p;
}

/* mkdir -p. On failure errno says why. */
static bool make_dirs(const char *dir)
{
    if (!dir[0]) {
        errno = ENOENT;
        return false;
    }
    char *p = strdup(dir);
    if (!p)
        return false;
    bool ok = true;
    for (char *s = p + 1; ok; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        ok = mkdir(p, 0777) == 0 || errno == EEXIST;
        *s = c;
        if (c == '\0')
            break;
    }
    struct stat st;
    if (ok && (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))) {
        errno = ENOTDIR;
        ok = false;
    }
    free(p);
    return ok;
}

static int sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Renames the synced tmp to final and syncs the directory: after a crash
 * the final name holds either nothing or the whole file. */
/* Renames a synced tmp file to its final name, then (sync) syncs dir so
 * that the rename itself survives a power loss. */
static bool publish(const char *tmp, const char *final, const char *dir, bool sync, char *err,
                    size_t n)
{
    if (rename(tmp, final) != 0)
        return dump_h5_fail(err, n, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    return !sync || dump_dir_sync(dir, err, n);
}

bool dump_dir_sync(const char *dir, char *err, size_t n)
{
    if (sync_dir(dir) != 0)
        return dump_h5_fail(err, n, "%s: cannot sync the directory: %s", dir, strerror(errno));
    return true;
}

static hid_t str_type(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t >= 0 && (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

static bool attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp < 0 ? -1 : H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = a >= 0 && H5Awrite(a, mtype, v) >= 0;
    if (a >= 0)
        ok = H5Aclose(a) >= 0 && ok;
    if (sp >= 0)
        H5Sclose(sp);
    return ok;
}

static bool attr_str(hid_t obj, const char *name, const char *v)
{
    hid_t t = str_type();
    bool ok = t >= 0 && attr_write(obj, name, t, t, &v);
    if (t >= 0)
        H5Tclose(t);
    return ok;
}

static bool attr_i32(hid_t obj, const char *name, int32_t v)
{
    return attr_write(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &v);
}

static bool attr_i64(hid_t obj, const char *name, int64_t v)
{
    return attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

/* A fixed char field holds a C string (the caller may have filled it all). */
static bool terminated(const char *s, size_t size) { return memchr(s, '\0', size) != NULL; }

/* Creates the file tmp on disk (im->fd; a crash leaves it behind as an
 * incomplete step) and its HDF5 file, written through tdbg's driver
 * (h5driver.c): metadata in im, raw data into the file at once. */
static hid_t create_file(const char *tmp, dump_image *im, char *err, size_t n)
{
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        dump_h5_fail(err, n, "%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    *im = (dump_image){ .fd = fd };
    hid_t fapl = dump_image_fapl(im);
    hid_t f = fapl < 0 ? -1 : H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (f < 0) {
        char why[256];
        dump_h5_fail(err, n, "%s: cannot create: %s", tmp, dump_h5_reason(why, sizeof why));
        dump_image_release(im);
        close(fd);
        unlink(tmp);
    }
    return f;
}

/* Closes the HDF5 file f; when save is set its metadata stay in im for
 * write_image, else they are dropped. False with err on failure, a write
 * of its raw data that failed included. */
static bool close_file(hid_t f, dump_image *im, const char *tmp, bool save, char *err, size_t n)
{
    char why[256];
    if (H5Fclose(f) < 0 && save)
        save = dump_h5_fail(err, n, "%s: cannot close the file: %s", tmp, dump_h5_reason(why, sizeof why));
    if (save && im->io_err)
        save = dump_h5_fail(err, n, "%s: cannot write: %s", tmp, strerror(im->io_err));
    if (save && dump_image_length(im) == 0)
        save = dump_h5_fail(err, n, "%s: HDF5 left no complete file", tmp);
    if (!save)
        dump_image_release(im);
    return save;
}

/* Writes the rest of the closed file (its metadata) into fd when save is
 * set (no fsync: see sync_close), and drops im in every case. */
static bool write_image(dump_image *im, const char *tmp, bool save, char *err, size_t n)
{
    if (save && !dump_image_write_rest(im))
        save = dump_h5_fail(err, n, "%s: cannot write: %s", tmp, strerror(errno));
    dump_image_release(im);
    return save;
}

/* fsyncs fd when save is set, and closes it. */
static bool sync_close(int fd, const char *tmp, bool save, char *err, size_t n)
{
    if (save && fsync(fd) != 0)
        save = dump_h5_fail(err, n, "%s: cannot sync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && save)
        save = dump_h5_fail(err, n, "%s: cannot close: %s", tmp, strerror(errno));
    return save;
}

/* Both, as one file's last steps. */
static bool save_image(dump_image *im, const char *tmp, bool save, char *err, size_t n)
{
    save = write_image(im, tmp, save, err, n);
    return sync_close(im->fd, tmp, save, err, n);
}

/* Chunks of whole rows up to CHUNK_MAX bytes; when one row is larger, whole
 * sub-rows of the first dimension whose rest fits. Returns that dimension,
 * the one split: every chunk is then one contiguous run of the data. */
static int chunk_dims(int rank, const hsize_t *dims, size_t esize, hsize_t *chunk)
{
    for (int k = 0; k < rank; k++) {
        size_t rest = esize;
        for (int j = k + 1; j < rank; j++)
            rest *= dims[j];
        if (rest > CHUNK_MAX)
            continue;
        for (int j = 0; j < rank; j++)
            chunk[j] = j < k ? 1 : dims[j];
        /* as few chunks as fit, of even size: HDF5 pads the last chunk to
         * full size, which for 1024 rows of 334 a chunk was 30% more file */
        hsize_t fit = CHUNK_MAX / rest, parts = dims[k] ? (dims[k] + fit - 1) / fit : 1;
        chunk[k] = (dims[k] + parts - 1) / parts;
        return k;
    }
    return rank - 1; /* not reached: the last dimension's rest is one element */
}

/* Writes an uncompressed dataset chunk by chunk, each with its Fletcher-32
 * checksum appended as HDF5's filter would, through H5Dwrite_chunk: no
 * chunk cache, no filter pass. stage holds a chunk and its checksum; the
 * padding of a last, partial chunk is zeros. When the data may serve as
 * scratch (spare set: 4 bytes after its end are ours), a whole chunk goes
 * from there, the checksum put over the 4 bytes after it for the call and
 * those restored: a copy of every value into stage saved. Each chunk's
 * CRC-32C goes into crc[], in chunk order, taken while it is in cache. */
static bool write_chunks(hid_t ds, int rank, const hsize_t *dims, size_t esize,
                         const unsigned char *data, unsigned char *spare, unsigned char *stage,
                         uint32_t *crc)
{
    hsize_t chunk[TE_MAX_DIMS], offset[TE_MAX_DIMS] = { 0 };
    int k = chunk_dims(rank, dims, esize, chunk);
    size_t row = esize, outer = 1; /* bytes a step along dim k; runs of dims before k */
    for (int j = k + 1; j < rank; j++)
        row *= dims[j];
    for (int j = 0; j < k; j++)
        outer *= dims[j];
    const size_t full = chunk[k] * row;
    for (size_t o = 0; o < outer; o++) {
        size_t rest = o;
        for (int j = k - 1; j >= 0; j--) {
            offset[j] = rest % dims[j];
            rest /= dims[j];
        }
        for (hsize_t at = 0; at < dims[k]; at += chunk[k]) {
            size_t used = (size_t)(dims[k] - at < chunk[k] ? dims[k] - at : chunk[k]) * row;
            const size_t from = (o * dims[k] + at) * row;
            unsigned char *buf = stage, saved[4] = { 0 };
            if (spare && used == full) {
                buf = spare + from;
                memcpy(saved, buf + full, 4);
            } else {
                memcpy(stage, data + from, used);
                memset(stage + used, 0, full - used);
            }
            uint32_t sum = dump_fletcher32(buf, full);
            *crc++ = dump_crc32c(0, buf, used);
            for (int b = 0; b < 4; b++)
                buf[full + (size_t)b] = (unsigned char)(sum >> 8 * b);
            offset[k] = at;
            bool ok = H5Dwrite_chunk(ds, H5P_DEFAULT, 0, offset, full + 4, buf) >= 0;
            if (buf != stage)
                memcpy(buf + full, saved, 4);
            if (!ok)
                return false;
        }
    }
    return true;
}

/* Dataset creation: chunked with the Fletcher-32 checksum (after shuffle and
 * deflate when gzip > 0) unless empty; attributes kept in the header. */
static hid_t new_dcpl(int rank, const hsize_t *dims, size_t esize, int gzip)
{
    hid_t p = H5Pcreate(H5P_DATASET_CREATE);
    if (p < 0)
        return -1;
    bool ok = H5Pset_attr_phase_change(p, 24, 16) >= 0;
    hsize_t total = 1, chunk[TE_MAX_DIMS];
    for (int i = 0; i < rank; i++)
        total *= dims[i];
    if (ok && total > 0) {
        chunk_dims(rank, dims, esize, chunk);
        ok = H5Pset_chunk(p, rank, chunk) >= 0;
        if (ok && gzip > 0)
            ok = H5Pset_shuffle(p) >= 0 && H5Pset_deflate(p, (unsigned)gzip) >= 0;
        ok = ok && H5Pset_fletcher32(p) >= 0; /* write_chunks computes it the same way */
    }
    if (!ok) {
        H5Pclose(p);
        return -1;
    }
    return p;
}

/* Link creation making the groups of nested op names. */
static hid_t new_lcpl(void)
{
    hid_t p = H5Pcreate(H5P_LINK_CREATE);
    if (p >= 0 && H5Pset_create_intermediate_group(p, 1) < 0) {
        H5Pclose(p);
        return -1;
    }
    return p;
}

/* ---- step files ------------------------------------------------------------ */

struct dump_step_writer {
    hid_t file;
    dump_image image;   /* image.fd: the tmp file */
    int64_t step;
    int gzip;
    int n_tensors;
    char *dir, *tmp, *final;
    unsigned char *stage;   /* a chunk and its checksum, for write_chunks */
    void *host;             /* dump_step_add's copy of a tensor's values, kept for the next */
    size_t host_cap;
    dump_stats_row *stats;
    int n_stats, cap_stats;
    bool failed;
    char why[1024];   /* the failure commit reports */
    dump_step_scaler scaler;
    dump_sample_row *samples;
    int n_samples;
};

static void writer_free(dump_step_writer *w)
{
    free(w->dir);
    free(w->tmp);
    free(w->final);
    free(w->stage);
    free(w->host);
    free(w->stats);
    free(w->samples);
    dump_image_release(&w->image);
    free(w);
}

dump_step_writer *dump_step_create(const char *dir, int64_t step, int gzip, char *err, size_t n)
{
    if (step < 0 || gzip < 0 || gzip > 9) {
        dump_h5_fail(err, n, "%s: bad step %lld or gzip level %d (0..9)", dir, (long long)step, gzip);
        return NULL;
    }
    if (!make_dirs(dir)) {
        dump_h5_fail(err, n, "%s: cannot make the directory: %s", dir, strerror(errno));
        return NULL;
    }
    dump_step_writer *w = calloc(1, sizeof *w);
    char tmp[64], final[64];
    snprintf(tmp, sizeof tmp, ".step-%08lld.h5.tmp", (long long)step);
    snprintf(final, sizeof final, "step-%08lld.h5", (long long)step);
    if (w) {
        w->dir = strdup(dir);
        w->tmp = path_join(dir, tmp);
        w->final = path_join(dir, final);
    }
    if (!w || !w->dir || !w->tmp || !w->final) {
        dump_h5_fail(err, n, "%s: out of memory", dir);
        if (w)
            writer_free(w);
        return NULL;
    }
    w->step = step;
    w->gzip = gzip;
    dump_h5_quiet q = dump_h5_hush();
    w->file = create_file(w->tmp, &w->image, err, n);
    if (w->file >= 0 && !attr_i64(w->file, "step", step)) {
        char why[256];
        dump_h5_fail(err, n, "%s: /: cannot write attribute 'step': %s", w->tmp,
             dump_h5_reason(why, sizeof why));
        close_file(w->file, &w->image, w->tmp, false, NULL, 0);
        save_image(&w->image, w->tmp, false, NULL, 0);
        unlink(w->tmp);
        w->file = -1;
    }
    dump_h5_loud(q);
    if (w->file < 0) {
        writer_free(w);
        return NULL;
    }
    return w;
}

/* Refuses what cannot be written; fills path. */
static bool check_tensor(const dump_step_writer *w, const dump_tensor_info *ti, char *path,
                         char *err, size_t n)
{
    if (w->failed)
        return dump_h5_fail(err, n, "%s", w->why);
    if (!terminated(ti->op, sizeof ti->op) || !terminated(ti->op_type, sizeof ti->op_type) ||
        !terminated(ti->tensor, sizeof ti->tensor) || !terminated(ti->file, sizeof ti->file) ||
        !terminated(ti->kernel, sizeof ti->kernel))
        return dump_h5_fail(err, n, "%s: a name of the tensor is not terminated", w->tmp);
    if (!dump_tensor_path(ti->op, ti->io, ti->slot, path, DUMP_PATH_MAX))
        return dump_h5_fail(err, n, "%s: op '%s' (io %d, slot %d) cannot be an HDF5 path", w->tmp, ti->op,
                    (int)ti->io, ti->slot);
    if ((unsigned)ti->phase >= TE_PHASE_COUNT || (unsigned)ti->dtype >= TE_DTYPE_COUNT ||
        ti->ndim < 0 || ti->ndim > TE_MAX_DIMS)
        return dump_h5_fail(err, n, "%s: %s: bad phase %d, dtype %d or ndim %d", w->tmp, path,
                    (int)ti->phase, (int)ti->dtype, ti->ndim);
    for (int i = 0; i < ti->ndim; i++)
        if (ti->shape[i] < 0)
            return dump_h5_fail(err, n, "%s: %s: negative dimension %lld", w->tmp, path,
                        (long long)ti->shape[i]);
    /* Every prefix of the path must be free or a group. */
    char prefix[DUMP_PATH_MAX];
    for (const char *s = strchr(path + 1, '/');; s = strchr(s + 1, '/')) {
        size_t len = s ? (size_t)(s - path) : strlen(path);
        snprintf(prefix, sizeof prefix, "%.*s", (int)len, path);
        htri_t there = H5Lexists(w->file, prefix, H5P_DEFAULT);
        if (there <= 0)
            return true;
        H5O_info_t oi;
        if (!s)
            return dump_h5_fail(err, n, "%s: %s: already in the file", w->tmp, path);
        if (H5Oget_info_by_name2(w->file, prefix, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0 ||
            oi.type != H5O_TYPE_GROUP)
            return dump_h5_fail(err, n, "%s: %s: cannot go under %s, which is a tensor", w->tmp, path,
                        prefix);
    }
}

/* Records a failure, HDF5's or (io_err) the system's on a write of the
 * file: the step cannot be committed any more. */
static bool writer_failed(dump_step_writer *w, const char *path, const char *what, int io_err,
                          char *err, size_t n)
{
    char why[256];
    snprintf(w->why, sizeof w->why, "%s: %s: %s: %s", w->tmp, path, what,
             io_err ? strerror(io_err) : dump_h5_reason(why, sizeof why));
    w->failed = true;
    return dump_h5_fail(err, n, "%s", w->why);
}

static bool tensor_attrs(hid_t ds, const dump_step_writer *w, const dump_tensor_info *ti)
{
    return attr_i64(ds, "step", w->step) && attr_str(ds, "op", ti->op) &&
           attr_str(ds, "op_type", ti->op_type) && attr_i32(ds, "exec_index", ti->exec_index) &&
           attr_str(ds, "phase", te_phase_name(ti->phase)) &&
           attr_str(ds, "io", ti->io == DUMP_IN ? "in" : "out") &&
           attr_i32(ds, "slot", ti->slot) && attr_str(ds, "tensor", ti->tensor) &&
           attr_str(ds, "dtype", te_dtype_name(ti->dtype)) && attr_str(ds, "file", ti->file) &&
           attr_i32(ds, "line", ti->line) && attr_str(ds, "kernel", ti->kernel) &&
           (ti->ndim > 0 || attr_i32(ds, "ndim", 0));
}

/* A non-empty tensor's values and the CRC-32C of each chunk (the
 * dataset's crc32c attribute): chunk by chunk when uncompressed, through
 * HDF5's filters when compressed (the CRCs then taken from data). */
static bool write_values(dump_step_writer *w, hid_t ds, hid_t type, int rank,
                         const hsize_t *dims, size_t esize, const void *data,
                         unsigned char *spare)
{
    hsize_t chunk[TE_MAX_DIMS];
    chunk_dims(rank, dims, esize, chunk);
    int64_t count = dump_chunk_runs(rank, dims, chunk, NULL);
    uint32_t *crc = count > 0 ? malloc((size_t)count * sizeof *crc) : NULL;
    bool ok = crc != NULL;
    if (ok && w->gzip == 0) {
        ok = w->stage && write_chunks(ds, rank, dims, esize, data, spare, w->stage, crc);
    } else if (ok) {
        dump_run *runs = malloc((size_t)count * sizeof *runs);
        ok = runs && dump_chunk_runs(rank, dims, chunk, runs) == count;
        for (int64_t c = 0; ok && c < count; c++)
            crc[c] = dump_crc32c(0, (const unsigned char *)data + (size_t)runs[c].first * esize,
                                 (size_t)runs[c].count * esize);
        free(runs);
        ok = ok && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
    }
    ok = ok && dump_crc_write(ds, crc, count);
    free(crc);
    return ok;
}

static bool add_values(dump_step_writer *w, const dump_tensor_info *ti, const void *data,
                       unsigned char *spare, char *err, size_t n)
{
    char path[DUMP_PATH_MAX];
    if (!w)
        return dump_h5_fail(err, n, "no step file");
    dump_h5_quiet q = dump_h5_hush();
    bool ok = check_tensor(w, ti, path, err, n);
    if (!ok) {
        dump_h5_loud(q);
        return false;
    }
    int rank = ti->ndim ? ti->ndim : 1;   /* a 0-d tensor is stored as [1] */
    hsize_t dims[TE_MAX_DIMS] = { 1 };
    size_t esize = te_dtype_size(ti->dtype);
    hsize_t total = 1;
    for (int i = 0; i < ti->ndim; i++) {
        dims[i] = (hsize_t)ti->shape[i];
        total *= dims[i];
    }
    if (total > 0 && !data) {
        dump_h5_loud(q);
        return dump_h5_fail(err, n, "%s: %s: no data", w->tmp, path);
    }
    hid_t type = dump_h5_type(ti->dtype);
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t dcpl = new_dcpl(rank, dims, esize, w->gzip);
    hid_t lcpl = new_lcpl();
    hid_t ds = -1;
    const char *what = "cannot create the dataset";
    /* every value is written: no fill values first */
    if (type >= 0 && sp >= 0 && dcpl >= 0 && lcpl >= 0 &&
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0)
        ds = H5Dcreate2(w->file, path, type, sp, lcpl, dcpl, H5P_DEFAULT);
    if (ds >= 0) {
        what = "cannot write the data";
        if (total > 0 && w->gzip == 0 && !w->stage)
            w->stage = malloc(CHUNK_MAX + 4);
        if (total == 0)
            ok = true;
        else
            ok = write_values(w, ds, type, rank, dims, esize, data, spare);
        if (ok) {
            what = "cannot write the attributes";
            ok = tensor_attrs(ds, w, ti);
        }
        if (H5Dclose(ds) < 0 && ok) {   /* closing writes the cached chunks */
            what = "cannot write the data";
            ok = false;
        }
    } else {
        ok = false;
    }
    int io_err = w->image.io_err; /* the driver's: the values did not reach the file */
    if (io_err) {
        what = "cannot write the data";
        ok = false;
    }
    if (ok)
        w->n_tensors++;
    else
        writer_failed(w, path, what, io_err, err, n);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Tclose(type);
    dump_h5_loud(q);
    return ok;
}

bool dump_step_add_raw(dump_step_writer *w, const dump_tensor_info *ti, const void *data,
                       char *err, size_t n)
{
    return add_values(w, ti, data, NULL, err, n);
}

bool dump_step_add_copy(dump_step_writer *w, const dump_tensor_info *ti, void *data, char *err,
                        size_t n)
{
    return add_values(w, ti, data, data, err, n);
}

bool dump_step_add(dump_step_writer *w, const dump_tensor_info *ti, const te_tensor *t, char *err,
                   size_t n)
{
    if (!t)
        return dump_h5_fail(err, n, "no tensor");
    dump_tensor_info copy = *ti;
    copy.dtype = t->dtype;
    copy.ndim = t->ndim;
    memcpy(copy.shape, t->shape, sizeof copy.shape);
    if (!t->data) /* refused there, "no data" */
        return dump_step_add_raw(w, &copy, NULL, err, n);
    /* the values come to the host once, wherever t lives; the buffer serves
     * the step's next tensor too */
    if (w->host_cap < t->nbytes + 4) {
        void *p = realloc(w->host, t->nbytes + 4); /* 4 to spare: dump_step_add_copy */
        if (!p)
            return dump_h5_fail(err, n, "%s: out of memory for %zu bytes", t->name, t->nbytes);
        w->host = p;
        w->host_cap = t->nbytes + 4;
    }
    if (t->numel && te_tensor_read(t, 0, t->numel, w->host) != TE_OK)
        return dump_h5_fail(err, n, "%s: %s", t->name, te_error());
    return dump_step_add_copy(w, &copy, w->host, err, n);
}

bool dump_step_add_stats(dump_step_writer *w, const dump_stats_row *rows, int count, char *err,
                         size_t n)
{
    if (!w)
        return dump_h5_fail(err, n, "no step file");
    if (w->failed)
        return dump_h5_fail(err, n, "%s", w->why);
    if (count < 0)
        return dump_h5_fail(err, n, "%s: /stats: negative row count %d", w->tmp, count);
    if (w->n_stats + count > w->cap_stats) {
        int cap = w->cap_stats ? w->cap_stats : 64;
        while (cap < w->n_stats + count)
            cap *= 2;
        dump_stats_row *s = realloc(w->stats, (size_t)cap * sizeof *s);
        if (!s)
            return dump_h5_fail(err, n, "%s: /stats: out of memory", w->tmp);
        w->stats = s;
        w->cap_stats = cap;
    }
    for (int i = 0; i < count; i++) {
        dump_stats_row r = rows[i];
        if (!terminated(r.op, sizeof r.op) ||
            !dump_tensor_path(r.op, r.io, r.slot, r.path, sizeof r.path))
            return dump_h5_fail(err, n, "%s: /stats: row %d: op '%.*s' (io %d, slot %d) cannot be an "
                        "HDF5 path", w->tmp, i, (int)sizeof r.op, r.op, (int)r.io, r.slot);
        w->stats[w->n_stats + i] = r;
    }
    w->n_stats += count;
    return true;
}

/* The /stats row as HDF5 converts it: strings as pointers. */
typedef struct stats_mem {
    const char *path, *op, *io;
    int32_t slot, exec_index;
    double min, max, mean, std, abs_max, l2norm;
    int64_t nan, inf;
    double zero_frac;
} stats_mem;

/* A compound type for mem structs; the file type is the same, packed. */
static hid_t stats_type(hid_t str)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(stats_mem));
    if (t < 0)
        return -1;
    bool ok = H5Tinsert(t, "path", HOFFSET(stats_mem, path), str) >= 0 &&
              H5Tinsert(t, "op", HOFFSET(stats_mem, op), str) >= 0 &&
              H5Tinsert(t, "io", HOFFSET(stats_mem, io), str) >= 0 &&
              H5Tinsert(t, "slot", HOFFSET(stats_mem, slot), H5T_NATIVE_INT32) >= 0 &&
              H5Tinsert(t, "exec_index", HOFFSET(stats_mem, exec_index), H5T_NATIVE_INT32) >= 0;
    static const char *const dbl[] = { "min", "max", "mean", "std", "abs_max", "l2norm" };
    for (int i = 0; i < 6; i++)
        ok = ok && H5Tinsert(t, dbl[i], HOFFSET(stats_mem, min) + (size_t)i * sizeof(double),
                             H5T_NATIVE_DOUBLE) >= 0;
    ok = ok && H5Tinsert(t, "nan", HOFFSET(stats_mem, nan), H5T_NATIVE_INT64) >= 0 &&
         H5Tinsert(t, "inf", HOFFSET(stats_mem, inf), H5T_NATIVE_INT64) >= 0 &&
         H5Tinsert(t, "zero_frac", HOFFSET(stats_mem, zero_frac), H5T_NATIVE_DOUBLE) >= 0;
    if (!ok) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

/* Writes a 1-D compound table of count rows at name; false sets the HDF5 error. */
static bool write_table(hid_t file, const char *name, hid_t mtype, size_t row, int count,
                        const void *rows)
{
    hid_t ftype = H5Tcopy(mtype);
    hsize_t dims[1] = { (hsize_t)count };
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t dcpl = ftype < 0 || H5Tpack(ftype) < 0 ? -1 : new_dcpl(1, dims, row, 0);
    hid_t ds = sp < 0 || dcpl < 0 ? -1 : H5Dcreate2(file, name, ftype, sp, H5P_DEFAULT, dcpl,
                                                    H5P_DEFAULT);
    /* H5Dwrite's conversion buffers are 1 MiB each unless told, and cleared
     * at every call: for a table of a few rows that was most of a
     * statistics-only step's cost. These hold every row twice over (a
     * variable-length string takes 16 bytes in the file, 8 in memory). */
    size_t fsize = ftype < 0 ? 0 : H5Tget_size(ftype);
    size_t buf = 2 * (size_t)count * (row > fsize ? row : fsize);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    bool ok = ds >= 0 && dxpl >= 0 &&
              H5Pset_buffer(dxpl, buf > TABLE_BUF_MIN ? buf : TABLE_BUF_MIN, NULL, NULL) >= 0 &&
              (count == 0 || H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, dxpl, rows) >= 0);
    if (dxpl >= 0)
        H5Pclose(dxpl);
    if (ds >= 0)
        ok = H5Dclose(ds) >= 0 && ok;
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sp >= 0)
        H5Sclose(sp);
    if (ftype >= 0)
        H5Tclose(ftype);
    return ok;
}

static bool write_stats(dump_step_writer *w)
{
    stats_mem *m = calloc(w->n_stats ? (size_t)w->n_stats : 1, sizeof *m);
    hid_t str = str_type();
    hid_t t = str < 0 ? -1 : stats_type(str);
    bool ok = m && t >= 0;
    for (int i = 0; ok && i < w->n_stats; i++) {
        const dump_stats_row *r = &w->stats[i];
        m[i] = (stats_mem){ r->path, r->op, r->io == DUMP_IN ? "in" : "out", r->slot,
                            r->exec_index, r->min, r->max, r->mean, r->std, r->abs_max,
                            r->l2norm, r->nan, r->inf, r->zero_frac };
    }
    ok = ok && write_table(w->file, "/stats", t, sizeof *m, w->n_stats, m);
    if (t >= 0)
        H5Tclose(t);
    if (str >= 0)
        H5Tclose(str);
    free(m);
    return ok;
}

void dump_step_set_scaler(dump_step_writer *w, const dump_step_scaler *s)
{
    if (w && s)
        w->scaler = *s;
}

bool dump_step_set_samples(dump_step_writer *w, const dump_sample_row *rows, int count, char *err, size_t n)
{
    if (!w || count < 0)
        return dump_h5_fail(err, n, !w ? "no step file" : "/samples: negative row count");
    dump_sample_row *s = count ? malloc((size_t)count * sizeof *s) : NULL;
    if (count && !s)
        return dump_h5_fail(err, n, "%s: /samples: out of memory", w->tmp);
    if (count)
        memcpy(s, rows, (size_t)count * sizeof *s);
    for (int i = 0; i < count; i++) { /* strings end inside their fields */
        s[i].dataset[sizeof s[i].dataset - 1] = '\0';
        s[i].source[sizeof s[i].source - 1] = '\0';
    }
    free(w->samples);
    w->samples = s;
    w->n_samples = count;
    return true;
}

/* The /samples row as HDF5 converts it: strings as pointers. */
typedef struct samples_mem {
    int32_t batch, row;
    int64_t sample, drawn, position, epoch, seed;
    const char *dataset, *source;
} samples_mem;

static bool write_samples(dump_step_writer *w)
{
    samples_mem *m = calloc((size_t)w->n_samples, sizeof *m);
    hid_t str = str_type();
    hid_t t = str < 0 ? -1 : H5Tcreate(H5T_COMPOUND, sizeof *m);
    bool ok = m && t >= 0 && H5Tinsert(t, "batch", HOFFSET(samples_mem, batch), H5T_NATIVE_INT32) >= 0 &&
              H5Tinsert(t, "row", HOFFSET(samples_mem, row), H5T_NATIVE_INT32) >= 0 &&
              H5Tinsert(t, "sample", HOFFSET(samples_mem, sample), H5T_NATIVE_INT64) >= 0 &&
              H5Tinsert(t, "drawn", HOFFSET(samples_mem, drawn), H5T_NATIVE_INT64) >= 0 &&
              H5Tinsert(t, "position", HOFFSET(samples_mem, position), H5T_NATIVE_INT64) >= 0 &&
              H5Tinsert(t, "epoch", HOFFSET(samples_mem, epoch), H5T_NATIVE_INT64) >= 0 &&
              H5Tinsert(t, "seed", HOFFSET(samples_mem, seed), H5T_NATIVE_INT64) >= 0 &&
              H5Tinsert(t, "dataset", HOFFSET(samples_mem, dataset), str) >= 0 &&
              H5Tinsert(t, "source", HOFFSET(samples_mem, source), str) >= 0;
    for (int i = 0; ok && i < w->n_samples; i++) {
        const dump_sample_row *r = &w->samples[i];
        m[i] = (samples_mem){ r->batch, r->row, r->sample, r->drawn, r->position, r->epoch, r->seed, r->dataset,
                              r->source };
    }
    ok = ok && write_table(w->file, "/samples", t, sizeof *m, w->n_samples, m);
    if (t >= 0)
        H5Tclose(t);
    if (str >= 0)
        H5Tclose(str);
    free(m);
    return ok;
}

/* The loss scaler's root attributes: none without a scaler, skipped only
 * once known, skip_param only on a skipped step. */
static bool scaler_attrs(hid_t f, const dump_step_scaler *s)
{
    if (!s->present)
        return true;
    float scale = s->scale;
    return attr_write(f, "loss_scale", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &scale) &&
           (s->skipped < 0 || attr_i32(f, "skipped", s->skipped)) &&
           (s->skipped != 1 || attr_str(f, "skip_param", s->skip_param));
}

bool dump_step_seal(dump_step_writer *w, char *err, size_t n)
{
    if (!w)
        return dump_h5_fail(err, n, "no step file");
    dump_h5_quiet q = dump_h5_hush();
    bool ok = !w->failed;
    if (!ok)
        dump_h5_fail(err, n, "%s", w->why);
    if (ok && w->n_stats > 0 && !write_stats(w))
        ok = writer_failed(w, "/stats", "cannot write the table", 0, err, n);
    if (ok && w->n_samples > 0 && !write_samples(w))
        ok = writer_failed(w, "/samples", "cannot write the table", 0, err, n);
    /* complete goes last: a file without it was not finished. */
    if (ok && !(scaler_attrs(w->file, &w->scaler) &&
                attr_i32(w->file, "n_tensors", w->n_tensors + w->n_stats) &&
                attr_i32(w->file, "complete", 1)))
        ok = writer_failed(w, "/", "cannot write the attributes", 0, err, n);
    ok = close_file(w->file, &w->image, w->tmp, ok, err, n) && ok;
    w->file = -1;
    dump_h5_loud(q);
    if (!ok) {
        save_image(&w->image, w->tmp, false, NULL, 0);
        unlink(w->tmp);
        writer_free(w);
    }
    return ok;
}

bool dump_step_write(dump_step_writer *w, char *err, size_t n)
{
    if (!w)
        return dump_h5_fail(err, n, "no step file");
    if (write_image(&w->image, w->tmp, true, err, n))
        return true;
    sync_close(w->image.fd, w->tmp, false, NULL, 0);
    unlink(w->tmp);
    writer_free(w);
    return false;
}

static bool publish_step(dump_step_writer *w, bool sync_dir_too, char *err, size_t n)
{
    if (!w)
        return dump_h5_fail(err, n, "no step file");
    bool ok = (!w->image.meta || write_image(&w->image, w->tmp, true, err, n));
    ok = sync_close(w->image.fd, w->tmp, ok, err, n) && ok;
    ok = ok && publish(w->tmp, w->final, w->dir, sync_dir_too, err, n);
    if (!ok)
        unlink(w->tmp);
    writer_free(w);
    return ok;
}

bool dump_step_publish(dump_step_writer *w, char *err, size_t n)
{
    return publish_step(w, false, err, n);
}

bool dump_step_commit(dump_step_writer *w, char *err, size_t n)
{
    return dump_step_seal(w, err, n) && publish_step(w, true, err, n);
}

void dump_step_abort(dump_step_writer *w)
{
    if (!w)
        return;
    if (w->file >= 0) {
        dump_h5_quiet q = dump_h5_hush();
        close_file(w->file, &w->image, w->tmp, false, NULL, 0);
        dump_h5_loud(q);
    }
    save_image(&w->image, w->tmp, false, NULL, 0);
    unlink(w->tmp);
    writer_free(w);
}

/* ---- run.h5 ---------------------------------------------------------------- */

typedef struct op_mem {
    int32_t exec;
    const char *name, *type, *phase, *file;
    int32_t line;
    const char *inputs, *outputs, *kernel, *inplace, *reads, *attrs;
} op_mem;

static hid_t ops_type(hid_t str)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(op_mem));
    if (t >= 0 && (H5Tinsert(t, "exec", HOFFSET(op_mem, exec), H5T_NATIVE_INT32) < 0 ||
                   H5Tinsert(t, "name", HOFFSET(op_mem, name), str) < 0 ||
                   H5Tinsert(t, "type", HOFFSET(op_mem, type), str) < 0 ||
                   H5Tinsert(t, "phase", HOFFSET(op_mem, phase), str) < 0 ||
                   H5Tinsert(t, "file", HOFFSET(op_mem, file), str) < 0 ||
                   H5Tinsert(t, "line", HOFFSET(op_mem, line), H5T_NATIVE_INT32) < 0 ||
                   H5Tinsert(t, "inputs", HOFFSET(op_mem, inputs), str) < 0 ||
                   H5Tinsert(t, "outputs", HOFFSET(op_mem, outputs), str) < 0 ||
                   H5Tinsert(t, "kernel", HOFFSET(op_mem, kernel), str) < 0 ||
                   H5Tinsert(t, "inplace", HOFFSET(op_mem, inplace), str) < 0 ||
                   H5Tinsert(t, "reads", HOFFSET(op_mem, reads), str) < 0 ||
                   H5Tinsert(t, "attrs", HOFFSET(op_mem, attrs), str) < 0)) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

static bool meta_attrs(hid_t f, const dump_run_meta *m)
{
    char now[32];
    const char *created = m->created;
    if (!created[0]) {
        time_t t = time(NULL);
        struct tm tm;
        strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
        created = now;
    }
    uint64_t seed = m->seed, peak = m->peak_bytes;
    return attr_i32(f, "tdbg_format", DUMP_FORMAT) &&
           attr_str(f, "engine_version", m->engine_version) &&
           attr_str(f, "mode", te_mode_name(m->mode)) && attr_str(f, "amp", m->amp) &&
           attr_str(f, "amp_level", m->amp_level) && attr_str(f, "amp_dtype", m->amp_dtype) &&
           attr_str(f, "backend", m->backend) &&
           attr_write(f, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &seed) &&
           (!peak || attr_write(f, "peak_bytes", H5T_STD_U64LE, H5T_NATIVE_UINT64, &peak)) &&
           attr_str(f, "command_line", m->command_line) && attr_str(f, "created", created) &&
           (m->ranks <= 0 || (attr_i32(f, "rank", m->rank) && attr_i32(f, "ranks", m->ranks)));
}

static bool write_ops(hid_t f, const dump_op_row *ops, int n_ops)
{
    op_mem *m = calloc(n_ops ? (size_t)n_ops : 1, sizeof *m);
    hid_t str = str_type();
    hid_t t = str < 0 ? -1 : ops_type(str);
    bool ok = m && t >= 0;
    for (int i = 0; ok && i < n_ops; i++) {
        const dump_op_row *r = &ops[i];
        m[i] = (op_mem){ r->exec, r->name, r->type, te_phase_name(r->phase), r->file, r->line, r->inputs,
                         r->outputs, r->kernel, r->inplace, r->reads, r->attrs };
    }
    ok = ok && write_table(f, "/ops", t, sizeof *m, n_ops, m);
    if (t >= 0)
        H5Tclose(t);
    if (str >= 0)
        H5Tclose(str);
    free(m);
    return ok;
}

/* The /collectives row as HDF5 converts it: strings as pointers. */
typedef struct coll_mem {
    int64_t step;
    int32_t exec;
    const char *op, *kind;
    int64_t seq;
    int32_t ranks, root, bucket;
    int64_t bytes;
} coll_mem;

static bool write_colls(hid_t f, const dump_coll_row *colls, int count)
{
    coll_mem *m = calloc(count ? (size_t)count : 1, sizeof *m);
    hid_t str = str_type();
    hid_t t = str < 0 ? -1 : H5Tcreate(H5T_COMPOUND, sizeof *m);
    bool ok = m && t >= 0 && H5Tinsert(t, "step", HOFFSET(coll_mem, step), H5T_NATIVE_INT64) >= 0 &&
              H5Tinsert(t, "exec", HOFFSET(coll_mem, exec), H5T_NATIVE_INT32) >= 0 &&
              H5Tinsert(t, "op", HOFFSET(coll_mem, op), str) >= 0 &&
              H5Tinsert(t, "kind", HOFFSET(coll_mem, kind), str) >= 0 &&
              H5Tinsert(t, "seq", HOFFSET(coll_mem, seq), H5T_NATIVE_INT64) >= 0 &&
              H5Tinsert(t, "ranks", HOFFSET(coll_mem, ranks), H5T_NATIVE_INT32) >= 0 &&
              H5Tinsert(t, "root", HOFFSET(coll_mem, root), H5T_NATIVE_INT32) >= 0 &&
              H5Tinsert(t, "bucket", HOFFSET(coll_mem, bucket), H5T_NATIVE_INT32) >= 0 &&
              H5Tinsert(t, "bytes", HOFFSET(coll_mem, bytes), H5T_NATIVE_INT64) >= 0;
    for (int i = 0; ok && i < count; i++) {
        const dump_coll_row *r = &colls[i];
        m[i] = (coll_mem){ r->step, r->exec, r->op, r->kind, r->seq, r->ranks, r->root, r->bucket, r->bytes };
    }
    ok = ok && write_table(f, "/collectives", t, sizeof *m, count, m);
    if (t >= 0)
        H5Tclose(t);
    if (str >= 0)
        H5Tclose(str);
    free(m);
    return ok;
}

static bool colls_valid(const char *path, const dump_run_meta *m, const dump_coll_row *colls, int count,
                        char *err, size_t n)
{
    if (m->ranks > 0 && (m->rank < 0 || m->rank >= m->ranks))
        return dump_h5_fail(err, n, "%s: rank %d of %d ranks", path, m->rank, m->ranks);
    if (count < 0 || (count > 0 && (!colls || m->ranks <= 0)))
        return dump_h5_fail(err, n, "%s: /collectives: bad row count %d (ranks %d)", path, count, m->ranks);
    for (int i = 0; i < count; i++)
        if (!terminated(colls[i].op, sizeof colls[i].op) || !terminated(colls[i].kind, sizeof colls[i].kind))
            return dump_h5_fail(err, n, "%s: /collectives: row %d: unterminated text", path, i);
    return true;
}

static bool run_valid(const char *path, const dump_run_meta *m, const dump_op_row *ops,
                      int n_ops, char *err, size_t n)
{
    if (!terminated(m->engine_version, sizeof m->engine_version) ||
        !terminated(m->amp, sizeof m->amp) || !terminated(m->amp_level, sizeof m->amp_level) ||
        !terminated(m->amp_dtype, sizeof m->amp_dtype) || !terminated(m->backend, sizeof m->backend) ||
        !terminated(m->command_line, sizeof m->command_line) ||
        !terminated(m->created, sizeof m->created) ||
        (m->mode != TE_MODE_EAGER && m->mode != TE_MODE_GRAPH))
        return dump_h5_fail(err, n, "%s: bad run metadata (unterminated text or mode %d)", path,
                    (int)m->mode);
    if (n_ops < 0 || (n_ops > 0 && !ops))
        return dump_h5_fail(err, n, "%s: /ops: bad row count %d", path, n_ops);
    for (int i = 0; i < n_ops; i++) {
        const dump_op_row *r = &ops[i];
        if (!terminated(r->name, sizeof r->name) || !terminated(r->type, sizeof r->type) ||
            !terminated(r->file, sizeof r->file) || !terminated(r->inputs, sizeof r->inputs) ||
            !terminated(r->outputs, sizeof r->outputs) ||
            !terminated(r->kernel, sizeof r->kernel) || !terminated(r->inplace, sizeof r->inplace) ||
            !terminated(r->reads, sizeof r->reads) || !terminated(r->attrs, sizeof r->attrs) ||
            (unsigned)r->phase >= TE_PHASE_COUNT)
            return dump_h5_fail(err, n, "%s: /ops: row %d: unterminated text or bad phase %d", path, i,
                        (int)r->phase);
    }
    return true;
}

bool dump_run_write(const char *dir, const dump_run_meta *m, const dump_op_row *ops, int n_ops,
                    char *err, size_t n)
{
    dump_run_meta one = *m;
    one.ranks = 0;
    return dump_run_write_dp(dir, &one, ops, n_ops, NULL, 0, err, n);
}

bool dump_run_write_dp(const char *dir, const dump_run_meta *m, const dump_op_row *ops, int n_ops,
                       const dump_coll_row *colls, int count, char *err, size_t n)
{
    if (!make_dirs(dir))
        return dump_h5_fail(err, n, "%s: cannot make the directory: %s", dir, strerror(errno));
    char *tmp = path_join(dir, ".run.h5.tmp");
    char *final = path_join(dir, "run.h5");
    bool ok = tmp && final;
    if (!ok)
        dump_h5_fail(err, n, "%s: out of memory", dir);
    ok = ok && run_valid(final, m, ops, n_ops, err, n) && colls_valid(final, m, colls, count, err, n);
    dump_h5_quiet q = dump_h5_hush();
    dump_image im = { 0 };
    hid_t f = ok ? create_file(tmp, &im, err, n) : -1;
    if (f >= 0) {
        char why[256];
        if (!meta_attrs(f, m))
            ok = dump_h5_fail(err, n, "%s: /: cannot write the attributes: %s", tmp,
                      dump_h5_reason(why, sizeof why));
        else if (!write_ops(f, ops, n_ops))
            ok = dump_h5_fail(err, n, "%s: /ops: cannot write the table: %s", tmp,
                      dump_h5_reason(why, sizeof why));
        else if (m->ranks > 0 && !write_colls(f, colls, count))
            ok = dump_h5_fail(err, n, "%s: /collectives: cannot write the table: %s", tmp,
                      dump_h5_reason(why, sizeof why));
        ok = close_file(f, &im, tmp, ok, err, n) && ok;
        ok = save_image(&im, tmp, ok, err, n) && ok;
        ok = ok && publish(tmp, final, dir, true, err, n);
        if (!ok)
            unlink(tmp);
    } else {
        ok = false;
    }
    dump_h5_loud(q);
    free(tmp);
    free(final);
    return ok;
}
