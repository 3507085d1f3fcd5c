/* h5driver.c — the HDF5 file driver tdbg writes step files and run.h5 with.
 *
 * HDF5 keeps a file's metadata (superblock, object headers, chunk indexes,
 * heaps) in memory here, and raw data (the values: H5FD_MEM_DRAW writes,
 * whole chunks from H5Dwrite_chunk) goes into the file at once, from the
 * caller's buffer. So the disk starts on a step while it is being built, and
 * no copy of the values is made on the way: HDF5's core driver copied every
 * chunk into its image (faulting in a fresh 50 MB image for each of the first
 * steps) only for that image to be written out again.
 *
 * When the file closes, dump_image_write_rest writes the metadata around the
 * raw data already there. Nothing here reports a disk error to HDF5: in 1.10
 * a file whose close failed on one stays half closed, and closing it again
 * (at exit, at the latest) crashes. A failed write is kept in io_err, the
 * caller checks it after each call, and the step is then abandoned.
 */
#include "h5file.h"

#include <hdf5.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAP_MIN ((size_t)1 << 20) /* first size of the metadata's address space */
#define WRITE_PIECE (8u << 20)    /* the disk is asked to start every this many bytes */

/* ---- the metadata's memory ------------------------------------------------------
 * The metadata lie at their file addresses, between raw data that never
 * comes here: an anonymous mapping over the whole address range holds them,
 * and only the pages they touch are ever faulted in; the rest read as zeros,
 * which is also what the gaps between objects get in the file. */

static bool reserve(dump_image *im, size_t end)
{
    if (end <= im->cap)
        return true;
    size_t cap = im->cap ? im->cap : MAP_MIN;
    while (cap < end)
        cap *= 2;
    void *p = im->meta ? mremap(im->meta, im->cap, cap, MREMAP_MAYMOVE)
                       : mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return false;
    im->meta = p;
    im->cap = cap;
    return true;
}

void dump_image_release(dump_image *im)
{
    if (im->meta)
        munmap(im->meta, im->cap);
    free(im->sent);
    *im = (dump_image){ .fd = im->fd };
}

/* ---- raw data: into the file at once ------------------------------------------- */

/* Asks the kernel to start writing fd's dirty pages out: the disk works
 * while more is copied, instead of idling until the fsync. A hint only:
 * the fsync reports errors. */
static void start_writeback(int fd)
{
#ifdef SYNC_FILE_RANGE_WRITE
    sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd;
#endif
}

static bool write_at(dump_image *im, const unsigned char *buf, uint64_t off, size_t len)
{
    while (len > 0) {
        size_t piece = len < WRITE_PIECE ? len : WRITE_PIECE;
        ssize_t w = pwrite(im->fd, buf, piece, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w == 0)
            errno = EIO;
        if (w <= 0) {
            im->io_err = errno;
            return false;
        }
        buf += w, off += (uint64_t)w, len -= (size_t)w;
        if ((im->unsynced += (size_t)w) >= WRITE_PIECE) {
            start_writeback(im->fd);
            im->unsynced = 0;
        }
    }
    return true;
}

/* Records [off, off + len) as in the file: merged with the last range when
 * it follows it, as consecutive chunks do. */
static bool mark_sent(dump_image *im, uint64_t off, size_t len)
{
    if (im->n_sent > 0 && im->sent[im->n_sent - 1].off + im->sent[im->n_sent - 1].len == off) {
        im->sent[im->n_sent - 1].len += len;
        return true;
    }
    if (im->n_sent == im->cap_sent) {
        int cap = im->cap_sent ? 2 * im->cap_sent : 64;
        struct dump_span *s = realloc(im->sent, (size_t)cap * sizeof *s);
        if (!s)
            return false;
        im->sent = s;
        im->cap_sent = cap;
    }
    im->sent[im->n_sent++] = (struct dump_span){ off, len };
    return true;
}

/* Raw data is written once and its space never freed (each chunk goes
 * whole, once; nothing is deleted), so metadata never land on it. If they
 * did, writing the metadata around the raw data at seal would leave them
 * out: the step fails instead of being written wrong. */
static bool over_sent(const dump_image *im, uint64_t off, size_t len)
{
    for (int i = 0; i < im->n_sent; i++)
        if (off < im->sent[i].off + im->sent[i].len && im->sent[i].off < off + len)
            return true;
    return false;
}

static int span_cmp(const void *a, const void *b)
{
    const struct dump_span *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

size_t dump_image_length(const dump_image *im)
{
    /* the end-of-file address in the superblock (versions 2 and 3, which the
     * 1.10 format bounds give; 8-byte addresses at offset 28) */
    const unsigned char *p = im->meta;
    if (!p || im->size < 48 || memcmp(p, "\211HDF\r\n\032\n", 8) != 0 || (p[8] != 2 && p[8] != 3) ||
        p[9] != 8)
        return 0;
    uint64_t eof = 0;
    for (int i = 7; i >= 0; i--)
        eof = eof << 8 | p[28 + i];
    return eof <= im->cap ? (size_t)eof : 0;
}

bool dump_image_write_rest(dump_image *im)
{
    const size_t len = dump_image_length(im);
    if (len == 0) {
        errno = EINVAL;
        return false;
    }
    if (im->n_sent > 1)
        qsort(im->sent, (size_t)im->n_sent, sizeof *im->sent, span_cmp);
    uint64_t at = 0;
    for (int i = 0; i <= im->n_sent; i++) {
        uint64_t to = i < im->n_sent ? im->sent[i].off : len;
        if (to > at && !write_at(im, im->meta + at, at, (size_t)(to - at))) {
            errno = im->io_err;
            return false;
        }
        if (i < im->n_sent && im->sent[i].off + im->sent[i].len > at)
            at = im->sent[i].off + im->sent[i].len;
    }
    start_writeback(im->fd);
    return true;
}

/* ---- the driver ------------------------------------------------------------------ */

typedef struct stream_fapl {
    dump_image *im;
} stream_fapl;

typedef struct stream_file {
    H5FD_t pub; /* first: HDF5's part */
    dump_image *im;
    haddr_t eoa;
} stream_file;

static void *fapl_get(H5FD_t *file)
{
    stream_fapl *fa = malloc(sizeof *fa);
    if (fa)
        fa->im = ((stream_file *)file)->im;
    return fa;
}

static void *fapl_copy(const void *old)
{
    stream_fapl *fa = malloc(sizeof *fa);
    if (fa)
        *fa = *(const stream_fapl *)old;
    return fa;
}

static herr_t fapl_free(void *fa)
{
    free(fa);
    return 0;
}

static H5FD_t *file_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr)
{
    (void)name, (void)flags, (void)maxaddr;
    const stream_fapl *fa = H5Pget_driver_info(fapl);
    stream_file *f = fa && fa->im ? calloc(1, sizeof *f) : NULL;
    if (f)
        f->im = fa->im;
    return f ? &f->pub : NULL;
}

static herr_t file_close(H5FD_t *file)
{
    free(file);
    return 0;
}

static int file_cmp(const H5FD_t *a, const H5FD_t *b) { return (a > b) - (a < b); }

static herr_t file_query(const H5FD_t *file, unsigned long *flags)
{
    (void)file;
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
    return 0;
}

static haddr_t get_eoa(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const stream_file *)file)->eoa;
}

static herr_t set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr)
{
    (void)type;
    ((stream_file *)file)->eoa = addr;
    return 0;
}

static haddr_t get_eof(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const stream_file *)file)->im->size;
}

static herr_t get_handle(H5FD_t *file, hid_t fapl, void **handle)
{
    (void)fapl;
    *handle = &((stream_file *)file)->im->fd;
    return 0;
}

/* Raw data is read back from the file (HDF5 has no reason to, writing
 * whole chunks once), metadata from memory; past the end, zeros. */
static herr_t file_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                        void *buf)
{
    (void)dxpl;
    dump_image *im = ((stream_file *)file)->im;
    memset(buf, 0, size);
    if (type == H5FD_MEM_DRAW) {
        for (size_t got = 0; got < size;) {
            ssize_t r = pread(im->fd, (char *)buf + got, size - got, (off_t)(addr + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += (size_t)r;
        }
    } else if (im->meta && addr < im->cap) {
        memcpy(buf, im->meta + addr, addr + size <= im->cap ? size : im->cap - addr);
    }
    return 0;
}

static herr_t file_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                         const void *buf)
{
    (void)dxpl;
    dump_image *im = ((stream_file *)file)->im;
    if (type == H5FD_MEM_DRAW) {
        if (!im->io_err && write_at(im, buf, addr, size) && !mark_sent(im, addr, size))
            im->io_err = ENOMEM;
    } else if (over_sent(im, addr, size)) {
        im->io_err = EIO;
    } else if (reserve(im, addr + size)) {
        memcpy(im->meta + addr, buf, size);
    } else {
        im->io_err = ENOMEM;
        return -1; /* memory, not the disk: HDF5 may know */
    }
    if (addr + size > im->size)
        im->size = addr + size;
    return 0;
}

/* Called as the file closes: the file ends at the end of its allocations. */
static herr_t file_truncate(H5FD_t *file, hid_t dxpl, hbool_t closing)
{
    (void)dxpl, (void)closing;
    stream_file *f = (stream_file *)file;
    if (!reserve(f->im, f->eoa))
        return -1;
    f->im->size = f->eoa;
    return 0;
}

static const H5FD_class_t stream_class = {
    .name = "tdbg_stream",
    .maxaddr = (haddr_t)1 << 62,
    .fc_degree = H5F_CLOSE_WEAK,
    .fapl_size = sizeof(stream_fapl),
    .fapl_get = fapl_get,
    .fapl_copy = fapl_copy,
    .fapl_free = fapl_free,
    .open = file_open,
    .close = file_close,
    .cmp = file_cmp,
    .query = file_query,
    .get_eoa = get_eoa,
    .set_eoa = set_eoa,
    .get_eof = get_eof,
    .get_handle = get_handle,
    .read = file_read,
    .write = file_write,
    .truncate = file_truncate,
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

/* Registered on first use, and again after H5close (which drops every
 * driver, while the process may go on dumping). */
static hid_t driver_id = -1;
static pthread_mutex_t driver_mu = PTHREAD_MUTEX_INITIALIZER;

static hid_t driver(void)
{
    pthread_mutex_lock(&driver_mu);
    if (driver_id < 0 || H5Iis_valid(driver_id) <= 0)
        driver_id = H5FDregister(&stream_class);
    hid_t id = driver_id;
    pthread_mutex_unlock(&driver_mu);
    return id;
}

int64_t dump_image_fapl(dump_image *im)
{
    hid_t id = driver();
    hid_t fapl = id < 0 ? -1 : H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0 && (H5Pset_driver(fapl, id, &(stream_fapl){ im }) < 0 ||
                      H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) < 0 ||
                      H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0)) {
        H5Pclose(fapl);
        return -1;
    }
    return fapl;
}
