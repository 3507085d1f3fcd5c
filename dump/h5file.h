/*
 * h5file.h — the HDF5 files of a dump run: one step file per step and the
 * run's metadata file, written crash-safe and read back with validation.
 * docs/dump-format.md describes the layout for h5py, h5dump and HDFView.
 *
 * Writing one step (the background writer does this on its own thread, which
 * makes every HDF5 call):
 *
 *     char err[512];
 *     dump_step_writer *w = dump_step_create("dumps/a", 42, 0, err, sizeof err);
 *     dump_tensor_info ti = { .exec_index = 3, .phase = TE_PHASE_FORWARD,
 *                             .io = DUMP_OUT, .slot = 0, .line = 58 };
 *     snprintf(ti.op, sizeof ti.op, "fc1/linear");       // also op_type, tensor, file
 *     if (!dump_step_add(w, &ti, t, err, sizeof err))     // dataset /fc1/linear/out0
 *         fprintf(stderr, "%s\n", err);
 *     if (!dump_step_commit(w, err, sizeof err))          // dumps/a/step-00000042.h5
 *         fprintf(stderr, "%s\n", err);
 *
 * Reading it back:
 *
 *     dump_step_reader *r = dump_step_open("dumps/a/step-00000042.h5", err, sizeof err);
 *     for (int i = 0; r && i < dump_step_count(r); i++) {
 *         const dump_tensor_info *ti = dump_step_tensor(r, i);  // execution order
 *         float *v = malloc(ti->numel * sizeof *v);
 *         dump_step_read_f32(r, i, v, err, sizeof err);
 *     }
 *     dump_step_close(r);
 *
 * Errors never abort and never print: each failing call returns false, NULL
 * or -1 and writes into err a message that names the file and the HDF5
 * object, e.g. "dumps/a/step-00000003.h5: /fc1/linear/out0: attribute 'slot'
 * is a string, expected int32". HDF5's own error printing is off inside
 * these calls (and restored after them).
 */
#ifndef TDBG_H5FILE_H
#define TDBG_H5FILE_H

#include "te.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DUMP_FORMAT 1          /* run.h5's tdbg_format */
#define DUMP_PATH_MAX 256      /* a tensor's path in its step file */
#define DUMP_FILE_MAX 512      /* a source file name */
#define DUMP_TEXT_MAX 1024     /* kernel descriptions, tensor name lists */

typedef enum { DUMP_IN, DUMP_OUT } dump_iokind;   /* "in", "out" */

/* One tensor of a step file. Writing: the caller fills op .. kernel (path
 * and step are set by the writer; dump_step_add takes dtype and shape from
 * the tensor, dump_step_add_raw from here). Reading: every field is set. */
typedef struct dump_tensor_info {
    char path[DUMP_PATH_MAX];     /* "/fc1/linear/out0" */
    int64_t step;
    char op[TE_NAME_MAX];         /* "fc1/linear" */
    char op_type[TE_NAME_MAX];    /* "Linear" */
    int exec_index;               /* position in the step's execution order */
    te_phase phase;
    dump_iokind io;
    int slot;
    char tensor[TE_NAME_MAX];     /* the tensor's own name: "param:fc1.weight" */
    te_dtype dtype;
    int ndim;                     /* 0..TE_MAX_DIMS */
    int64_t shape[TE_MAX_DIMS];
    int64_t numel;                /* read only */
    size_t nbytes;                /* read only: numel * te_dtype_size(dtype) */
    char file[DUMP_FILE_MAX];     /* source file:line of the op's call */
    int line;
    char kernel[DUMP_TEXT_MAX];   /* graph mode's kernel, "" in eager mode */
} dump_tensor_info;

/* One row of a statistics-only step file: the caller computed the numbers. */
typedef struct dump_stats_row {
    char path[DUMP_PATH_MAX];     /* set by the writer from op, io and slot */
    char op[TE_NAME_MAX];
    dump_iokind io;
    int slot;
    int exec_index;
    double min, max, mean, std, abs_max, l2norm;
    int64_t nan, inf;
    double zero_frac;
} dump_stats_row;

/* run.h5's root attributes. */
typedef struct dump_run_meta {
    int format;                   /* read only: tdbg_format */
    char engine_version[32];      /* TE_VERSION */
    te_mode mode;
    char amp[32];                 /* "none", "f16", "bf16" */
    char amp_level[8];            /* "O0".."O3"; "" in files from before it was kept */
    char amp_dtype[8];            /* the low dtype: "f16", "bf16"; "f32" at O0; "" as above */
    char backend[32];             /* "cpu" */
    uint64_t seed;
    char command_line[4096];
    char created[32];             /* ISO 8601 UTC; writing "" means now */
    uint64_t peak_bytes;          /* the engine allocator's peak (te_mem_stats.peak) during
                                   * the run so far; 0: not known (older files) */
    bool lists_inplace;           /* read only: /ops has the inplace column (older files
                                   * do not say which inputs an op writes in place) */
    bool lists_reads;             /* read only: /ops has the reads column (older files do
                                   * not say what a backward op reads of its forward op) */
    bool lists_attrs;             /* read only: /ops has the attrs column (older files do
                                   * not keep the ops' attributes) */
    int rank, ranks;              /* data parallel: this process's rank and the job's size
                                   * (attributes rank, ranks); ranks 0: not a rank's dump */
} dump_run_meta;

/* One row of run.h5's /collectives table (data parallel): a collective op
 * of a dumped step, as te_op_record.coll described it. */
typedef struct dump_coll_row {
    int64_t step;
    int exec;                     /* its position in the step's execution order */
    char op[TE_NAME_MAX];         /* "allreduce/bucket0", "broadcast/buffers" */
    char kind[16];                /* "allreduce", "broadcast" */
    int64_t seq;                  /* the job's collectives before it: the same on every rank */
    int ranks;                    /* the ranks taking part */
    int root;                     /* broadcast: the sending rank; -1 otherwise */
    int bucket;                   /* a gradient all-reduce's bucket; -1 otherwise */
    int64_t bytes;                /* what each rank contributes */
} dump_coll_row;

/* A step's loss scaler (step files' optional root attributes loss_scale,
 * skipped, skip_param): written when a scaler was on in the step. */
typedef struct dump_step_scaler {
    bool present;                 /* the step had a scaler (false: no attributes) */
    float scale;                  /* the scale of the step's loss */
    int skipped;                  /* 1: the update was skipped (a non-finite gradient),
                                   * 0: not, -1: not known (a part of a step, written
                                   * at a stop before its end) */
    char skip_param[TE_NAME_MAX]; /* skipped: the first parameter whose gradient was
                                   * non-finite ("" when the engine did not say) */
} dump_step_scaler;

/* One row of a step file's optional /samples table: a sample of a batch
 * the step took (engine/te.h, te_batch), in the order the step took them. */
typedef struct dump_sample_row {
    int32_t batch;                 /* which batch of the step, from 0 */
    int32_t row;                   /* its row in that batch */
    int64_t sample;                /* its dataset index */
    int64_t drawn;                 /* what the loader's order drew: != sample where `data skip` replaced it */
    int64_t position, epoch;       /* the batch's place in its loader's sequence; -1: the program's own */
    int64_t seed;                  /* the loader's seed (its 64 bits) */
    char dataset[DUMP_PATH_MAX];   /* the dataset's name */
    char source[DUMP_PATH_MAX];    /* where the sample came from, "FILE:LINE (byte N)"; "" unknown */
} dump_sample_row;

/* One row of run.h5's /ops table, in execution order. */
typedef struct dump_op_row {
    int exec;
    char name[TE_NAME_MAX];
    char type[TE_NAME_MAX];
    te_phase phase;
    char file[DUMP_FILE_MAX];
    int line;
    char inputs[DUMP_TEXT_MAX];   /* tensor names joined by ',' */
    char outputs[DUMP_TEXT_MAX];
    char kernel[DUMP_TEXT_MAX];   /* "" in eager mode */
    char inplace[DUMP_TEXT_MAX];  /* the inputs it writes in place: a batch norm's running
                                   * statistics in training */
    char reads[DUMP_TEXT_MAX];    /* backward: the forward tensors it reads besides the
                                   * gradients (te_op_record.reads), joined by ',' */
    char attrs[DUMP_TEXT_MAX];    /* forward: its attributes, te_op_attrs's "key=value ..."
                                   * ("" for a type without any, and in older files) */
} dump_op_row;

/* The dataset path of an op's tensor: ("fc1/linear", DUMP_IN, 1) gives
 * "/fc1/linear/in1". False when the op name cannot be a path (empty, a
 * leading, trailing or double '/', a "." or ".." part) or buf is too small. */
bool dump_tensor_path(const char *op, dump_iokind io, int slot, char *buf, size_t n);

/* ---- writing (h5write.c) ---------------------------------------------------- */

typedef struct dump_step_writer dump_step_writer;

/* Starts step `step` in DIR (made with its parents if needed): creates
 * DIR/.step-NNNNNNNN.h5.tmp, which a crash leaves behind as the mark of an
 * unfinished step. Values go into it as they are added; the HDF5 metadata
 * stay in memory until the step is sealed (dump_image). gzip 0 stores
 * tensors plain, 1..9 compresses them. NULL on error. */
dump_step_writer *dump_step_create(const char *dir, int64_t step, int gzip, char *err, size_t n);
/* Adds one tensor, its values copied from t. A refused tensor (bad name,
 * path taken, bad shape) leaves the step usable; an HDF5 failure marks it
 * failed, and commit then removes it. */
bool dump_step_add(dump_step_writer *w, const dump_tensor_info *ti, const te_tensor *t,
                   char *err, size_t n);
/* The same from a copy: ti->dtype, ti->ndim and ti->shape describe data. */
bool dump_step_add_raw(dump_step_writer *w, const dump_tensor_info *ti, const void *data,
                       char *err, size_t n);
/* The same from a buffer that may serve as scratch: it has 4 bytes to spare
 * after the values (as many as ti's shape and dtype make) and comes back
 * holding the same values. Saves a copy of every value. */
bool dump_step_add_copy(dump_step_writer *w, const dump_tensor_info *ti, void *data, char *err,
                        size_t n);
/* Appends rows to the step's /stats table (written at commit). */
bool dump_step_add_stats(dump_step_writer *w, const dump_stats_row *rows, int count,
                         char *err, size_t n);
/* The step's loss scaler, written as root attributes when it is sealed. */
void dump_step_set_scaler(dump_step_writer *w, const dump_step_scaler *s);
/* The samples of the batches the step took, written as its /samples table
 * when it is sealed (copied; none: no table). false when out of memory. */
bool dump_step_set_samples(dump_step_writer *w, const dump_sample_row *rows, int count, char *err, size_t n);
/* Marks the step complete, writes the rest of the file, fsyncs it and
 * renames it to DIR/step-NNNNNNNN.h5 (then fsyncs DIR). Frees w in every case; on failure
 * (a disk error, say) the tmp file is removed and false returned. */
bool dump_step_commit(dump_step_writer *w, char *err, size_t n);
/* Commit in parts, so that one thread can build the next step while
 * another waits for the disk: seal marks the step complete and closes the
 * HDF5 file (its metadata stay in memory); write (optional) writes them
 * into the tmp file and frees them, with the disk asked to start at once;
 * publish writes them if that was not done, fsyncs the tmp file and
 * renames it, leaving DIR's own sync to dump_dir_sync (one sync can cover
 * several renames). Each frees w and removes the tmp file on failure. */
bool dump_step_seal(dump_step_writer *w, char *err, size_t n);
bool dump_step_write(dump_step_writer *w, char *err, size_t n);
bool dump_step_publish(dump_step_writer *w, char *err, size_t n);
/* Closes w, sealed or not, and removes its tmp file. */
void dump_step_abort(dump_step_writer *w);
/* fsyncs a run directory, so that the renames in it survive a power loss. */
bool dump_dir_sync(const char *dir, char *err, size_t n);


/* Writes DIR/run.h5 (through DIR/.run.h5.tmp and a rename, so a reader sees
 * the old or the new file, never half of one). */
bool dump_run_write(const char *dir, const dump_run_meta *m, const dump_op_row *ops, int n_ops,
                    char *err, size_t n);
/* The same for a rank of a data-parallel job (m->ranks > 0): also the
 * attributes rank and ranks and the /collectives table (count rows). */
bool dump_run_write_dp(const char *dir, const dump_run_meta *m, const dump_op_row *ops, int n_ops,
                       const dump_coll_row *colls, int count, char *err, size_t n);

/* ---- reading (h5read.c) ------------------------------------------------------ */

/* A step file of a listing: "step-00000042.h5", or a leftover
 * ".step-00000042.h5.tmp" (complete false: the writer stopped inside it). */
typedef struct dump_step_entry {
    int64_t step;
    bool complete;
    char name[40];
} dump_step_entry;

/* The step files of run directory dir sorted by step (a complete file before
 * a tmp of the same step) into *out (free() it). Count, or -1 on error. */
int dump_run_list(const char *dir, dump_step_entry **out, char *err, size_t n);

/* Reads and validates dir/run.h5 (its /collectives table too); *ops
 * (free() it) gets its op rows. */
bool dump_run_read(const char *dir, dump_run_meta *m, dump_op_row **ops, int *n_ops,
                   char *err, size_t n);
/* dir/run.h5's /collectives table into *rows (free() it): its row count, 0
 * when there is none (not a rank's dump), -1 on error (a message naming the
 * file, the field and the row). */
int dump_run_colls(const char *dir, dump_coll_row **rows, char *err, size_t n);

typedef struct dump_step_reader dump_step_reader;

/* Opens a step file and validates its attributes and datasets (no values
 * read). NULL with a message naming the first problem. */
dump_step_reader *dump_step_open(const char *path, char *err, size_t n);
void dump_step_close(dump_step_reader *r);
int64_t dump_step_number(const dump_step_reader *r);
/* Its tensor datasets ordered by (exec_index, in before out, slot). */
int dump_step_count(const dump_step_reader *r);
const dump_tensor_info *dump_step_tensor(const dump_step_reader *r, int i);
int dump_step_find(const dump_step_reader *r, const char *path);   /* index or -1 */
/* Tensor i's values as numel floats (f16, bf16 and i32 converted). */
bool dump_step_read_f32(dump_step_reader *r, int i, float *dst, char *err, size_t n);
/* Tensor i's values as stored: nbytes bytes in the engine's layout. */
bool dump_step_read_raw(dump_step_reader *r, int i, void *dst, char *err, size_t n);
/* The /stats table into *rows (free() it): its row count, 0 when the step has
 * none, -1 on error. */
int dump_step_stats(dump_step_reader *r, dump_stats_row **rows, char *err, size_t n);

/* The /samples table into *rows (free() it): its row count, 0 when the
 * step has none (an older file, a run without a loader), -1 on error. */
int dump_step_samples(dump_step_reader *r, dump_sample_row **rows, char *err, size_t n);

/* The step's loss scaler as its file says (present false when it has none). */
const dump_step_scaler *dump_step_scaler_of(const dump_step_reader *r);
/* The step file's path, as opened. */
const char *dump_step_path(const dump_step_reader *r);
/* Elements [first, first + count) of tensor i's flat C-order values, as
 * stored (count * te_dtype_size bytes), through an HDF5 hyperslab: a large
 * tensor read in pieces of bounded size. */
bool dump_step_read_range(dump_step_reader *r, int i, int64_t first, int64_t count, void *dst,
                          char *err, size_t n);

/* Reading values without HDF5, from any thread. A tensor stored in
 * uncompressed chunks that are each one contiguous run of its values (every
 * tensor tdbg writes without compress=) lies in its file as extents: pread()
 * an extent's size bytes at its offset, then dump_extent_verify checks them
 * (no HDF5 call, so threads may do both at once). */
typedef struct dump_extent {
    int64_t first, count;   /* elements [first, first + count) of the flat tensor */
    uint64_t offset;        /* where the stored chunk starts in the file */
    size_t size;            /* its bytes: the values (a last chunk zero-padded), then
                             * their Fletcher-32 checksum, 4 bytes little-endian */
    int64_t chunk;          /* its number in chunk order */
    bool has_crc;           /* the dataset keeps the chunk's CRC-32C (files before it
                             * was added have Fletcher-32 only) */
    uint32_t crc;           /* CRC-32C of the count values, without the padding */
} dump_extent;
/* Tensor i's extents in element order into *out (free() it): their count;
 * 0 (*out NULL) when the tensor is empty or stored another way (compressed,
 * contiguous): read it with dump_step_read_range then; -1 on error. */
int dump_step_extents(dump_step_reader *r, int i, dump_extent **out, char *err, size_t n);
/* Checks an extent's bytes as read: false, with a message naming the file,
 * the dataset and the elements (and the chunk, for CRC-32C), when a
 * checksum does not match. */
bool dump_extent_verify(const dump_step_reader *r, int i, const dump_extent *e,
                        const void *stored, char *err, size_t n);

/* Problems found by dump_verify, one message each. */
typedef struct dump_problems {
    int n;
    char **msg;
    int fletcher_only;   /* step files read whose tensors have no CRC-32C (written
                          * before it was added): checked with Fletcher-32 alone */
} dump_problems;

/* Checks a run directory (run.h5, every step file and every value in it,
 * leftover tmp files), or one step file or run.h5. Returns p->n, the number
 * of problems; free the list with dump_problems_free. */
int dump_verify(const char *path, dump_problems *p);
void dump_problems_free(dump_problems *p);

/* ---- shared by h5write.c and h5read.c (not for callers) ------------------------ */

/* Turns HDF5's error printing off on this thread (keeping the first
 * failure's reason for dump_h5_reason instead), returning a token for
 * dump_h5_loud, which restores it. Calls nest. */
typedef struct dump_h5_quiet {
    void (*func)(void);   /* the H5E_auto2_t handler, cast back when restored */
    void *data;
} dump_h5_quiet;
dump_h5_quiet dump_h5_hush(void);
void dump_h5_loud(dump_h5_quiet q);
/* Why the first HDF5 call that failed since hushing (or since the last
 * dump_h5_reason) failed: the system's message when there is one, e.g.
 * "File too large", else HDF5's innermost description. */
const char *dump_h5_reason(char *buf, size_t n);
/* Writes the message into err (when there is room) and returns false. */
bool dump_h5_fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A file being written through tdbg's HDF5 file driver (h5driver.c): its
 * metadata in memory until it closes, its raw data (whole chunks) written
 * into fd as HDF5 stores them. A failed write sets io_err (HDF5 is not
 * told: see h5driver.c), which the caller checks. */
struct dump_span {
    uint64_t off, len;
};
typedef struct dump_image {
    int fd;                   /* the file, open for reading and writing */
    unsigned char *meta;      /* metadata at their file addresses; the rest zeros */
    size_t cap, size;         /* of the mapping; the end of the last write */
    struct dump_span *sent;   /* raw data already in the file */
    int n_sent, cap_sent;
    size_t unsynced;          /* bytes written since the disk was last asked to start */
    int io_err;               /* errno of the first failed write, else 0 */
} dump_image;
/* A file access list for H5Fcreate that writes through im (im->fd set, the
 * rest zero); the caller closes it. Negative on error. */
int64_t dump_image_fapl(dump_image *im);
/* After H5Fclose: the file's length from its superblock, 0 if none. */
size_t dump_image_length(const dump_image *im);
/* Writes what is not in the file yet (the metadata, around the raw data).
 * False with errno set on failure. */
bool dump_image_write_rest(dump_image *im);
/* Drops the metadata and the record of what was written; fd stays. */
void dump_image_release(dump_image *im);
/* HDF5's Fletcher-32 checksum of len bytes, as its filter stores it after
 * each chunk (little-endian), bit for bit. */
uint32_t dump_fletcher32(const void *data, size_t len);
/* CRC-32C (Castagnoli) of len bytes, continuing crc (0 to start):
 * dump_crc32c(0, "123456789", 9) is 0xe3069283. It uses the CPU's crc32
 * instruction when it has one (dump_crc32c_hw_available); dump_crc32c_sw
 * is the table-driven fallback, always. */
uint32_t dump_crc32c(uint32_t crc, const void *data, size_t len);
uint32_t dump_crc32c_sw(uint32_t crc, const void *data, size_t len);
bool dump_crc32c_hw_available(void);
/* The HDF5 datatype of a dtype in files (f16: an IEEE half built from
 * F32LE); the caller closes it. Negative on error. */
int64_t dump_h5_type(te_dtype dt);

#endif
