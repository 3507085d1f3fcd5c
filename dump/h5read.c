/* h5read.c — lists, reads and verifies step files and run.h5, checking
 * every object and attribute against docs/dump-format.md. */
#include "h5crc.h"
#include "contain.h"

#include <hdf5.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- problems ----------------------------------------------------------------- */

/* Appends a message (out of memory loses it). */
static void problem(dump_problems *p, const char *fmt, ...)
{
    char buf[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **m = realloc(p->msg, (size_t)(p->n + 1) * sizeof *m);
    char *copy = m ? strdup(buf) : NULL;
    if (m)
        p->msg = m;
    if (copy)
        m[p->n++] = copy;
}

void dump_problems_free(dump_problems *p)
{
    for (int i = 0; p->msg && i < p->n; i++)
        free(p->msg[i]);
    free(p->msg);
    p->msg = NULL;
    p->n = 0;
}

/* The first problem as err, with how many follow. */
static bool first_problem(const dump_problems *p, char *err, size_t n)
{
    const char *m = p->n > 0 ? p->msg[0] : "out of memory";
    if (p->n > 1)
        return dump_h5_fail(err, n, "%s (and %d more problem%s)", m, p->n - 1, p->n > 2 ? "s" : "");
    return dump_h5_fail(err, n, "%s", m);
}

/* One file being checked: its name for messages and where problems go. */
typedef struct scan {
    const char *path;
    hid_t file;
    dump_problems *p;
    uint64_t size;   /* the file's, in bytes */
} scan;

static bool h5_problem(scan *s, const char *obj, const char *what)
{
    char why[256];
    problem(s->p, "%s: %s: %s: %s", s->path, obj, what, dump_h5_reason(why, sizeof why));
    return false;
}

/* ---- typed attributes ------------------------------------------------------------ */

/* "a string", "an int32", "a uint16", "a float64", ... */
static const char *type_desc(hid_t t, char *buf, size_t n)
{
    size_t bits = 8 * H5Tget_size(t);
    switch (H5Tget_class(t)) {
    case H5T_INTEGER:
        snprintf(buf, n, H5Tget_sign(t) == H5T_SGN_NONE ? "a uint%zu" : "an int%zu", bits);
        break;
    case H5T_FLOAT: snprintf(buf, n, "a float%zu", bits); break;
    case H5T_STRING:
        snprintf(buf, n, H5Tis_variable_str(t) > 0 ? "a string" : "a fixed-length string");
        break;
    case H5T_COMPOUND: snprintf(buf, n, "a compound"); break;
    default: snprintf(buf, n, "an unsupported type"); break;
    }
    return buf;
}

/* Opens attribute name of obj (called where in messages) holding one value. */
static hid_t attr_open(scan *s, hid_t obj, const char *where, const char *name)
{
    dump_contain_at("%s: attribute '%s'", where, name);
    htri_t there = H5Aexists(obj, name);
    if (there < 0) {
        char what[96];
        snprintf(what, sizeof what, "cannot read attribute '%s'", name);
        h5_problem(s, where, what);
        return -1;
    }
    if (!there) {
        problem(s->p, "%s: %s: attribute '%s' is missing", s->path, where, name);
        return -1;
    }
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t sp = a < 0 ? -1 : H5Aget_space(a);
    hssize_t np = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
    if (sp >= 0)
        H5Sclose(sp);
    if (a >= 0 && np != 1) {
        problem(s->p, "%s: %s: attribute '%s' holds %lld values, expected one", s->path, where,
                name, (long long)np);
        H5Aclose(a);
        return -1;
    }
    if (a < 0) {
        char what[96];
        snprintf(what, sizeof what, "cannot open attribute '%s'", name);
        h5_problem(s, where, what);
    }
    return a;
}

/* The scalar attribute kinds: integers of one exact width and sign, float32. */
typedef enum { K_I32, K_I64, K_U64, K_F32 } attr_kind;
static const char *const kind_names[] = { "int32", "int64", "uint64", "float32" };

static bool kind_type_ok(hid_t t, attr_kind k)
{
    if (k == K_F32)
        return H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 4;
    return H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == (k == K_I32 ? 4u : 8u) &&
           (H5Tget_sign(t) == H5T_SGN_NONE) == (k == K_U64);
}

/* An attribute of exactly kind k holding one value, read into *v: an
 * int64_t for the integers (uint64 as its bits), a float for K_F32. */
static bool attr_scalar(scan *s, hid_t obj, const char *where, const char *name, attr_kind k,
                        void *v)
{
    hid_t a = attr_open(s, obj, where, name);
    if (a < 0)
        return false;
    hid_t t = H5Aget_type(a);
    bool ok = t >= 0 && kind_type_ok(t, k);
    hid_t mem = k == K_F32 ? H5T_NATIVE_FLOAT : k == K_U64 ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64;
    if (t >= 0 && !ok) {
        char d[48];
        problem(s->p, "%s: %s: attribute '%s' is %s, expected %s", s->path, where, name,
                type_desc(t, d, sizeof d), kind_names[k]);
    } else if (ok && H5Aread(a, mem, v) < 0) {
        char what[96];
        snprintf(what, sizeof what, "cannot read attribute '%s'", name);
        ok = h5_problem(s, where, what);
    }
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    return ok;
}

/* An integer attribute of exactly kind k, read into *v (uint64 as its bits). */
static bool attr_int(scan *s, hid_t obj, const char *where, const char *name, attr_kind k,
                     int64_t *v)
{
    return attr_scalar(s, obj, where, name, k, v);
}

/* An int32 attribute read into an int. */
static bool attr_i32(scan *s, hid_t obj, const char *where, const char *name, int *v)
{
    int64_t x = 0;
    bool ok = attr_int(s, obj, where, name, K_I32, &x);
    *v = (int)x;
    return ok;
}

/* A string attribute (variable or fixed length) into buf. */
static bool attr_text(scan *s, hid_t obj, const char *where, const char *name, char *buf,
                      size_t n)
{
    buf[0] = '\0';
    hid_t a = attr_open(s, obj, where, name);
    if (a < 0)
        return false;
    hid_t t = H5Aget_type(a);
    bool ok = t >= 0 && H5Tget_class(t) == H5T_STRING;
    char *text = NULL;
    if (t >= 0 && !ok) {
        char d[48];
        problem(s->p, "%s: %s: attribute '%s' is %s, expected a string", s->path, where, name,
                type_desc(t, d, sizeof d));
    } else if (ok && H5Tis_variable_str(t) > 0) {
        ok = H5Aread(a, t, &text) >= 0;
    } else if (ok) {
        size_t size = H5Tget_size(t);
        text = calloc(size + 1, 1);
        ok = text && H5Aread(a, t, text) >= 0;
    }
    if (t >= 0 && H5Tget_class(t) == H5T_STRING && !ok) {
        char what[96];
        snprintf(what, sizeof what, "cannot read attribute '%s'", name);
        h5_problem(s, where, what);
    }
    if (ok && strlen(text ? text : "") >= n) {
        problem(s->p, "%s: %s: attribute '%s' is longer than %zu bytes", s->path, where, name,
                n - 1);
        ok = false;
    }
    if (ok)
        snprintf(buf, n, "%s", text ? text : "");
    if (t >= 0 && H5Tis_variable_str(t) > 0)
        H5free_memory(text);
    else
        free(text);
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    return ok;
}

/* Index of text among names[0..count), or -1. */
static int name_index(const char *text, const char *(*name)(int), int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(text, name(i)) == 0)
            return i;
    return -1;
}

static const char *phase_name(int i) { return te_phase_name((te_phase)i); }
static const char *dtype_name(int i) { return te_dtype_name((te_dtype)i); }
static const char *io_name(int i) { return i == DUMP_IN ? "in" : "out"; }
static const char *mode_name(int i) { return te_mode_name((te_mode)i); }

/* A string attribute that must be one of count names; its index in *v. */
static bool attr_enum(scan *s, hid_t obj, const char *where, const char *attr,
                      const char *(*name)(int), int count, int *v)
{
    char text[64];
    if (!attr_text(s, obj, where, attr, text, sizeof text))
        return false;
    *v = name_index(text, name, count);
    if (*v >= 0)
        return true;
    char list[128] = "";
    for (int i = 0; i < count; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "", name(i));
    problem(s->p, "%s: %s: attribute '%s' is '%s', expected %s", s->path, where, attr, text,
            list);
    return false;
}

/* ---- tables: 1-D compound datasets, read one field at a time ------------------ */

typedef enum { C_STR, C_I32, C_I64, C_F64, C_PHASE, C_IO } col_kind;

/* Phase and io columns are stored through an int pointer. */
_Static_assert(sizeof(te_phase) == sizeof(int) && sizeof(dump_iokind) == sizeof(int),
               "enum fields are int-sized");

/* A field and where it goes in the caller's row struct. */
typedef struct col {
    const char *name;
    col_kind kind;
    size_t off, cap;   /* cap: C_STR's buffer size */
    bool optional;     /* a column older files lack: left empty then */
} col;

static bool col_type_ok(hid_t t, col_kind k)
{
    switch (k) {
    case C_I32: return kind_type_ok(t, K_I32);
    case C_I64: return kind_type_ok(t, K_I64);
    case C_F64: return H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 8;
    default: return H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0;
    }
}

static const char *col_expected(col_kind k)
{
    switch (k) {
    case C_I32: return "int32";
    case C_I64: return "int64";
    case C_F64: return "float64";
    default: return "a string";
    }
}

/* Stores one string value of column c into row (a problem names row i). */
static void col_store_text(scan *s, const char *table, const col *c, int i, const char *v,
                           char *row)
{
    v = v ? v : "";
    if (c->kind == C_STR) {
        if (strlen(v) >= c->cap)
            problem(s->p, "%s: %s: row %d: field '%s' is longer than %zu bytes", s->path, table,
                    i, c->name, c->cap - 1);
        snprintf(row + c->off, c->cap, "%s", v);
        return;
    }
    int k = c->kind == C_PHASE ? name_index(v, phase_name, TE_PHASE_COUNT)
                               : name_index(v, io_name, 2);
    if (k < 0)
        problem(s->p, "%s: %s: row %d: field '%s' is '%s', expected %s", s->path, table, i,
                c->name, v, c->kind == C_PHASE ? "forward|backward|update" : "in|out");
    *(int *)(void *)(row + c->off) = k < 0 ? 0 : k;
}

/* Reads column c of nrows into rows (row size rsize). */
static void col_read(scan *s, hid_t ds, hid_t ftype, const char *table, const col *c,
                     char *rows, size_t rsize, int nrows)
{
    dump_contain_at("%s: field '%s'", table, c->name);
    int idx = H5Tget_member_index(ftype, c->name);
    if (idx < 0) {
        if (!c->optional)
            problem(s->p, "%s: %s: field '%s' is missing", s->path, table, c->name);
        return;
    }
    hid_t mt = H5Tget_member_type(ftype, (unsigned)idx);
    bool ok = mt >= 0 && col_type_ok(mt, c->kind);
    if (mt >= 0 && !ok) {
        char d[48];
        problem(s->p, "%s: %s: field '%s' is %s, expected %s", s->path, table, c->name,
                type_desc(mt, d, sizeof d), col_expected(c->kind));
    }
    bool text = c->kind == C_STR || c->kind == C_PHASE || c->kind == C_IO;
    hid_t vt = text ? H5Tcopy(mt) : c->kind == C_F64 ? H5Tcopy(H5T_NATIVE_DOUBLE)
                                                    : H5Tcopy(H5T_NATIVE_INT64);
    size_t esize = text ? sizeof(char *) : 8;
    void *buf = ok ? calloc(nrows ? (size_t)nrows : 1, esize) : NULL;
    hid_t one = ok ? H5Tcreate(H5T_COMPOUND, esize) : -1;
    ok = ok && buf && one >= 0 && H5Tinsert(one, c->name, 0, vt) >= 0;
    if (ok && nrows > 0 && H5Dread(ds, one, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        char what[96];
        snprintf(what, sizeof what, "cannot read field '%s'", c->name);
        ok = h5_problem(s, table, what);
    }
    for (int i = 0; ok && i < nrows; i++) {
        char *row = rows + (size_t)i * rsize;
        if (text)
            col_store_text(s, table, c, i, ((char **)buf)[i], row);
        else if (c->kind == C_F64)
            *(double *)(void *)(row + c->off) = ((double *)buf)[i];
        else if (c->kind == C_I64)
            *(int64_t *)(void *)(row + c->off) = ((int64_t *)buf)[i];
        else
            *(int *)(void *)(row + c->off) = (int)((int64_t *)buf)[i];
    }
    if (ok && text && nrows > 0) {
        hid_t sp = H5Dget_space(ds);
        H5Dvlen_reclaim(one, sp, H5P_DEFAULT, buf);
        H5Sclose(sp);
    }
    free(buf);
    if (one >= 0)
        H5Tclose(one);
    H5Tclose(vt);
    if (mt >= 0)
        H5Tclose(mt);
}

/* Reads table name of s->file into a new array of rows (its count in
 * *nrows); NULL with problems when it is not a 1-D compound table. */
static void *table_read(scan *s, const char *name, const col *cols, int ncols, size_t rsize,
                        int *nrows)
{
    *nrows = 0;
    dump_contain_at("%s", name);
    hid_t ds = H5Dopen2(s->file, name, H5P_DEFAULT);
    if (ds < 0) {
        h5_problem(s, name, "cannot open the table");
        return NULL;
    }
    hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
    hsize_t dims[1] = { 0 };
    char *rows = NULL;
    if (ft < 0 || sp < 0) {
        h5_problem(s, name, "cannot read the table's type");
    } else if (H5Tget_class(ft) != H5T_COMPOUND || H5Sget_simple_extent_ndims(sp) != 1) {
        char d[48];
        problem(s->p, "%s: %s: is %s of rank %d, expected a 1-D compound table", s->path, name,
                type_desc(ft, d, sizeof d), H5Sget_simple_extent_ndims(sp));
    } else if (H5Sget_simple_extent_dims(sp, dims, NULL) < 0 || dims[0] > (hsize_t)INT32_MAX) {
        problem(s->p, "%s: %s: bad row count", s->path, name);
    } else if (dims[0] > s->size / (H5Tget_size(ft) ? H5Tget_size(ft) : 1)) {
        /* tdbg's tables are stored plain: a row count the file cannot hold is damage. */
        problem(s->p, "%s: %s: damaged HDF5 metadata (%llu rows of %zu bytes in a file of %llu "
                "bytes)", s->path, name, (unsigned long long)dims[0], H5Tget_size(ft),
                (unsigned long long)s->size);
    } else {
        int before = s->p->n;
        rows = calloc(dims[0] ? dims[0] : 1, rsize);
        for (int c = 0; rows && c < ncols; c++)
            col_read(s, ds, ft, name, &cols[c], rows, rsize, (int)dims[0]);
        if (!rows)
            problem(s->p, "%s: %s: out of memory", s->path, name);
        if (s->p->n > before) {
            free(rows);
            rows = NULL;
        }
    }
    if (rows)
        *nrows = (int)dims[0];
    if (sp >= 0)
        H5Sclose(sp);
    if (ft >= 0)
        H5Tclose(ft);
    H5Dclose(ds);
    return rows;
}

#define COL(st, f, k) { #f, k, offsetof(st, f), sizeof(((st *)0)->f), false }
#define COL_OPTIONAL(st, f, k) { #f, k, offsetof(st, f), sizeof(((st *)0)->f), true }

static const col stats_cols[] = {
    COL(dump_stats_row, path, C_STR),     COL(dump_stats_row, op, C_STR),
    COL(dump_stats_row, io, C_IO),        COL(dump_stats_row, slot, C_I32),
    COL(dump_stats_row, exec_index, C_I32), COL(dump_stats_row, min, C_F64),
    COL(dump_stats_row, max, C_F64),      COL(dump_stats_row, mean, C_F64),
    COL(dump_stats_row, std, C_F64),      COL(dump_stats_row, abs_max, C_F64),
    COL(dump_stats_row, l2norm, C_F64),   COL(dump_stats_row, nan, C_I64),
    COL(dump_stats_row, inf, C_I64),      COL(dump_stats_row, zero_frac, C_F64),
};

static const col sample_cols[] = {
    COL(dump_sample_row, batch, C_I32),    COL(dump_sample_row, row, C_I32),
    COL(dump_sample_row, sample, C_I64),   COL(dump_sample_row, drawn, C_I64),
    COL(dump_sample_row, position, C_I64), COL(dump_sample_row, epoch, C_I64),
    COL(dump_sample_row, seed, C_I64),     COL(dump_sample_row, dataset, C_STR),
    COL(dump_sample_row, source, C_STR),
};

static const col op_cols[] = {
    COL(dump_op_row, exec, C_I32),   COL(dump_op_row, name, C_STR),
    COL(dump_op_row, type, C_STR),   COL(dump_op_row, phase, C_PHASE),
    COL(dump_op_row, file, C_STR),   COL(dump_op_row, line, C_I32),
    COL(dump_op_row, inputs, C_STR), COL(dump_op_row, outputs, C_STR),
    COL(dump_op_row, kernel, C_STR), COL_OPTIONAL(dump_op_row, inplace, C_STR),
    COL_OPTIONAL(dump_op_row, reads, C_STR), COL_OPTIONAL(dump_op_row, attrs, C_STR),
};

static const col coll_cols[] = {
    COL(dump_coll_row, step, C_I64),   COL(dump_coll_row, exec, C_I32),
    COL(dump_coll_row, op, C_STR),     COL(dump_coll_row, kind, C_STR),
    COL(dump_coll_row, seq, C_I64),    COL(dump_coll_row, ranks, C_I32),
    COL(dump_coll_row, root, C_I32),   COL(dump_coll_row, bucket, C_I32),
    COL(dump_coll_row, bytes, C_I64),
};

#define NCOLS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- files ------------------------------------------------------------------------ */

/* Opens path read-only; a problem names it when it is not a readable HDF5 file. */
static hid_t file_open(scan *s)
{
    struct stat st;
    if (stat(s->path, &st) != 0) {
        problem(s->p, "%s: cannot open: %s", s->path, strerror(errno));
        return -1;
    }
    s->size = (uint64_t)st.st_size;
    dump_contain_at("the superblock");
    hid_t f = H5Fopen(s->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        char why[256];
        problem(s->p, "%s: not a readable HDF5 file: %s", s->path,
                dump_h5_reason(why, sizeof why));
    }
    return f;
}

/* ---- step files -------------------------------------------------------------------- */

/* Parsing a step file (in the child of dump_contain) fills a step_parse;
 * the parent gets its description (step_answer) and builds the reader
 * from it. */

/* deflate's best ratio is 1032:1: no tensor stored in a file of size
 * bytes holds more values than this (a count from damaged metadata can). */
static bool values_fit(int64_t numel, te_dtype dt, uint64_t size)
{
    return numel >= 0 && (uint64_t)numel <= (size * 1032 + 4096) / te_dtype_size(dt);
}

/* A chunked dataset must hold all its chunks: a missing one would read
 * as zeros. */
static void chunks_check(scan *s, hid_t ds, hid_t sp, const char *path, int rank,
                         const hsize_t *dims)
{
    hid_t dcpl = H5Dget_create_plist(ds);
    hsize_t chunk[TE_MAX_DIMS], want = 1, have = 0;
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED &&
        H5Pget_chunk(dcpl, rank, chunk) == rank) {
        for (int i = 0; i < rank; i++)
            want *= (dims[i] + chunk[i] - 1) / chunk[i];
        if (H5Dget_num_chunks(ds, sp, &have) < 0)
            h5_problem(s, path, "cannot count its chunks");
        else if (have != want)
            problem(s->p, "%s: %s: %llu of its %llu chunks were written", s->path, path,
                    (unsigned long long)have, (unsigned long long)want);
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
}

/* Checks one tensor dataset against its attributes, filling ti. */
static bool tensor_scan(scan *s, hid_t ds, const char *path, int64_t step, dump_tensor_info *ti)
{
    int before = s->p->n;
    int64_t v = 0;
    int k = 0;
    memset(ti, 0, sizeof *ti);
    snprintf(ti->path, sizeof ti->path, "%s", path);
    if (attr_int(s, ds, path, "step", K_I64, &ti->step) && ti->step != step)
        problem(s->p, "%s: %s: attribute 'step' is %lld, the file's step is %lld", s->path, path,
                (long long)ti->step, (long long)step);
    attr_text(s, ds, path, "op", ti->op, sizeof ti->op);
    attr_text(s, ds, path, "op_type", ti->op_type, sizeof ti->op_type);
    attr_i32(s, ds, path, "exec_index", &ti->exec_index);
    if (attr_enum(s, ds, path, "phase", phase_name, TE_PHASE_COUNT, &k))
        ti->phase = (te_phase)k;
    if (attr_enum(s, ds, path, "io", io_name, 2, &k))
        ti->io = (dump_iokind)k;
    attr_i32(s, ds, path, "slot", &ti->slot);
    attr_text(s, ds, path, "tensor", ti->tensor, sizeof ti->tensor);
    bool typed = attr_enum(s, ds, path, "dtype", dtype_name, TE_DTYPE_COUNT, &k);
    ti->dtype = typed ? (te_dtype)k : TE_F32;
    attr_text(s, ds, path, "file", ti->file, sizeof ti->file);
    attr_i32(s, ds, path, "line", &ti->line);
    attr_text(s, ds, path, "kernel", ti->kernel, sizeof ti->kernel);
    bool scalar = false;
    htri_t has_ndim = H5Aexists(ds, "ndim");
    if (has_ndim > 0 && attr_int(s, ds, path, "ndim", K_I32, &v)) {
        scalar = v == 0;
        if (!scalar)
            problem(s->p, "%s: %s: attribute 'ndim' is %lld, expected 0 (only 0-d tensors "
                    "have it)", s->path, path, (long long)v);
    }
    char want[DUMP_PATH_MAX] = "";
    if (s->p->n == before) {
        bool valid = dump_tensor_path(ti->op, ti->io, ti->slot, want, sizeof want);
        if (!valid || strcmp(want, path) != 0)
            problem(s->p, "%s: %s: attributes say op '%s' %s%d, which belongs at %s", s->path,
                    path, ti->op, io_name(ti->io), ti->slot, valid ? want : "no valid path");
    }

    hid_t t = H5Dget_type(ds), sp = H5Dget_space(ds);
    hid_t expect = typed ? dump_h5_type(ti->dtype) : -1;
    int rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    hsize_t dims[TE_MAX_DIMS] = { 0 };
    if (t < 0 || sp < 0) {
        h5_problem(s, path, "cannot read the dataset's type");
    } else if (typed && H5Tequal(t, expect) <= 0) {
        char d[48];
        static const char *const need[TE_DTYPE_COUNT] = {
            [TE_F32] = "a little-endian IEEE float32",
            [TE_F16] = "a little-endian IEEE half (sign bit 15, exponent 10..14 bias 15, "
                       "mantissa 0..9)",
            [TE_BF16] = "a little-endian uint16",
            [TE_I32] = "a little-endian int32",
        };
        problem(s->p, "%s: %s: stored as %s, dtype '%s' needs %s", s->path, path,
                type_desc(t, d, sizeof d), te_dtype_name(ti->dtype), need[ti->dtype]);
    } else if (rank < 1 || rank > TE_MAX_DIMS) {
        problem(s->p, "%s: %s: rank %d, expected 1..%d", s->path, path, rank, TE_MAX_DIMS);
    } else {
        H5Sget_simple_extent_dims(sp, dims, NULL);
        if (scalar && (rank != 1 || dims[0] != 1))
            problem(s->p, "%s: %s: a 0-d tensor stored with %lld values, expected 1", s->path,
                    path, (long long)H5Sget_simple_extent_npoints(sp));
        ti->ndim = scalar ? 0 : rank;
        ti->numel = 1;
        bool fits = true;
        for (int i = 0; i < ti->ndim; i++) {
            ti->shape[i] = (int64_t)dims[i];
            fits = fits && ti->shape[i] >= 0 &&
                   !__builtin_mul_overflow(ti->numel, ti->shape[i], &ti->numel);
        }
        if (!fits || !values_fit(ti->numel, ti->dtype, s->size)) {
            problem(s->p, "%s: %s: damaged HDF5 metadata (a shape of more values than a file "
                    "of %llu bytes holds)", s->path, path, (unsigned long long)s->size);
            ti->numel = 0;
        }
        ti->nbytes = (size_t)ti->numel * te_dtype_size(ti->dtype);
        if (ti->numel > 0)
            chunks_check(s, ds, sp, path, rank, dims);
    }
    if (expect >= 0)
        H5Tclose(expect);
    if (t >= 0)
        H5Tclose(t);
    if (sp >= 0)
        H5Sclose(sp);
    return s->p->n == before;
}

/* The tensors of a step file, as the child parses them. */
typedef struct step_parse {
    int64_t step;
    dump_step_scaler scaler;
    int n, cap;
    dump_tensor_info *t;
} step_parse;

typedef struct visit {
    scan *s;
    step_parse *r;
    bool stats;   /* a /stats table is there */
    bool samples; /* a /samples table is there */
} visit;

static herr_t visit_object(hid_t root, const char *name, const H5O_info_t *info, void *data)
{
    visit *v = data;
    if (info->type != H5O_TYPE_DATASET)
        return 0;
    if (strcmp(name, "stats") == 0) {
        v->stats = true;
        return 0;
    }
    if (strcmp(name, "samples") == 0) {
        v->samples = true;
        return 0;
    }
    char path[DUMP_PATH_MAX];
    snprintf(path, sizeof path, "/%s", name);
    dump_contain_at("%s", path);
    hid_t ds = H5Dopen2(root, name, H5P_DEFAULT);
    if (ds < 0) {
        h5_problem(v->s, path, "cannot open the dataset");
        return 0;
    }
    step_parse *r = v->r;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        dump_tensor_info *t = realloc(r->t, (size_t)cap * sizeof *t);
        if (!t) {
            problem(v->s->p, "%s: out of memory", v->s->path);
            H5Dclose(ds);
            return -1;
        }
        r->t = t;
        r->cap = cap;
    }
    if (tensor_scan(v->s, ds, path, r->step, &r->t[r->n]))
        r->n++;
    H5Dclose(ds);
    return 0;
}

/* Execution order: exec_index, inputs before outputs, slot. */
static int tensor_order(const void *pa, const void *pb)
{
    const dump_tensor_info *a = pa, *b = pb;
    if (a->exec_index != b->exec_index)
        return a->exec_index < b->exec_index ? -1 : 1;
    if (a->io != b->io)
        return a->io == DUMP_IN ? -1 : 1;
    if (a->slot != b->slot)
        return a->slot < b->slot ? -1 : 1;
    return strcmp(a->path, b->path);
}

/* The step in a file name "step-NNNNNNNN.h5" (or its tmp form), or -1. */
static int64_t name_step(const char *name, bool *complete)
{
    const char *p = name;
    *complete = p[0] != '.';
    if (!*complete)
        p++;
    if (strncmp(p, "step-", 5) != 0)
        return -1;
    p += 5;
    size_t digits = strspn(p, "0123456789");
    if (digits < 8 || digits > 18 || strcmp(p + digits, *complete ? ".h5" : ".h5.tmp") != 0)
        return -1;
    return strtoll(p, NULL, 10);
}

/* Is there a root attribute name? (Those added after the first files are
 * optional: their absence is no problem.) */
static bool attr_there(scan *s, const char *name)
{
    dump_contain_at("/: attribute '%s'", name);
    return H5Aexists(s->file, name) > 0;
}

/* The loss scaler's attributes, when the step had one. */
static void scaler_scan(scan *s, dump_step_scaler *sc)
{
    memset(sc, 0, sizeof *sc);
    sc->skipped = -1;
    if (!attr_there(s, "loss_scale"))
        return;
    sc->present = attr_scalar(s, s->file, "/", "loss_scale", K_F32, &sc->scale);
    if (attr_there(s, "skipped") && attr_i32(s, s->file, "/", "skipped", &sc->skipped) &&
        sc->skipped != 0 && sc->skipped != 1) {
        problem(s->p, "%s: /: attribute 'skipped' is %d, expected 0 or 1", s->path, sc->skipped);
        sc->skipped = -1;
    }
    if (attr_there(s, "skip_param"))
        attr_text(s, s->file, "/", "skip_param", sc->skip_param, sizeof sc->skip_param);
}

/* Checks the root attributes and every dataset of a step file into r. */
static void step_scan(scan *s, step_parse *r, int *n_tensors, bool *stats, bool *samples)
{
    int complete = 0;
    *n_tensors = -1;
    attr_int(s, s->file, "/", "step", K_I64, &r->step);
    if (attr_i32(s, s->file, "/", "complete", &complete) && complete != 1)
        problem(s->p, "%s: /: attribute 'complete' is %d, expected 1 (the step was not "
                "finished)", s->path, complete);
    attr_i32(s, s->file, "/", "n_tensors", n_tensors);
    scaler_scan(s, &r->scaler);
    const char *base = strrchr(s->path, '/');
    bool named_complete;
    int64_t named = name_step(base ? base + 1 : s->path, &named_complete);
    if (named >= 0 && named != r->step)
        problem(s->p, "%s: /: attribute 'step' is %lld, the file name says %lld", s->path,
                (long long)r->step, (long long)named);
    visit v = { s, r, false, false };
    dump_contain_at("the objects under /");
    if (H5Ovisit2(s->file, H5_INDEX_NAME, H5_ITER_INC, visit_object, &v, H5O_INFO_BASIC) < 0)
        h5_problem(s, "/", "cannot list the objects");
    *stats = v.stats;
    *samples = v.samples;
    if (r->n > 1)
        qsort(r->t, (size_t)r->n, sizeof *r->t, tensor_order);
}

/* Tensor ti's extents (dump_step_extents) in the open file (named fpath). */
static int extents_find(const char *fpath, hid_t file, const dump_tensor_info *ti,
                        dump_extent **out, char *err, size_t n)
{
    *out = NULL;
    if (ti->numel == 0)
        return 0;
    dump_contain_at("%s: its chunk index", ti->path);
    hid_t ds = H5Dopen2(file, ti->path, H5P_DEFAULT);
    hid_t dcpl = ds < 0 ? -1 : H5Dget_create_plist(ds);
    hid_t fcpl = H5Fget_create_plist(file);
    hid_t sp = ds < 0 ? -1 : H5Dget_space(ds);
    int rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    hsize_t dims[TE_MAX_DIMS], chunk[TE_MAX_DIMS], base = 0;
    unsigned flags = 0, conf[1] = { 0 };
    size_t nconf = 0;
    int count = -1;
    dump_extent *e = NULL;
    bool ok = dcpl >= 0 && fcpl >= 0 && rank >= 1 && rank <= TE_MAX_DIMS &&
              H5Sget_simple_extent_dims(sp, dims, NULL) == rank &&
              H5Pget_userblock(fcpl, &base) >= 0;
    if (ok) {
        count = 0;   /* stored some other way unless all checks below pass */
        int k = -1;
        if (H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, rank, chunk) == rank &&
            H5Pget_nfilters(dcpl) == 1 &&
            H5Pget_filter2(dcpl, 0, &flags, &nconf, conf, 0, NULL, NULL) == H5Z_FILTER_FLETCHER32)
            k = dump_chunk_split(rank, dims, chunk);
        hsize_t outer = 1, inner = 1, per = k >= 0 ? (dims[k] + chunk[k] - 1) / chunk[k] : 0;
        for (int j = 0; j < k; j++)
            outer *= dims[j];
        for (int j = k + 1; j < rank; j++)
            inner *= dims[j];
        size_t full = k >= 0 ? (size_t)(chunk[k] * inner) * te_dtype_size(ti->dtype) : 0;
        if (k >= 0 && outer * per <= (hsize_t)INT32_MAX)
            e = malloc((size_t)(outer * per) * sizeof *e);
        for (hsize_t o = 0; e && ok && o < outer; o++) {
            hsize_t at[TE_MAX_DIMS] = { 0 }, rest = o;
            for (int j = k - 1; j >= 0; j--) {
                at[j] = rest % dims[j];
                rest /= dims[j];
            }
            for (at[k] = 0; e && at[k] < dims[k]; at[k] += chunk[k]) {
                unsigned mask = 0;
                haddr_t addr = HADDR_UNDEF;
                hsize_t size = 0;
                if (H5Dget_chunk_info_by_coord(ds, at, &mask, &addr, &size) < 0 ||
                    addr == HADDR_UNDEF) {
                    char why[256];
                    dump_h5_fail(err, n, "%s: %s: cannot locate the chunk at element %llu: %s",
                                 fpath, ti->path, (unsigned long long)((o * dims[k] + at[k]) * inner),
                                 dump_h5_reason(why, sizeof why));
                    ok = false;
                    break;
                }
                if (mask != 0 || size != full + 4) {   /* a filter skipped: not the usual chunk */
                    free(e);
                    e = NULL;
                    count = 0;
                    break;
                }
                hsize_t rows = dims[k] - at[k] < chunk[k] ? dims[k] - at[k] : chunk[k];
                e[count++] = (dump_extent){ .first = (int64_t)((o * dims[k] + at[k]) * inner),
                                            .count = (int64_t)(rows * inner),
                                            .offset = (uint64_t)(base + addr),
                                            .size = (size_t)size };
            }
        }
    } else {
        char why[256];
        dump_h5_fail(err, n, "%s: %s: cannot read the storage layout: %s", fpath, ti->path,
                     dump_h5_reason(why, sizeof why));
    }
    /* each chunk's CRC-32C (h5crc.c) travels with its extent to the parent */
    if (ok && e && count > 0)
        ok = dump_crc_extents(ds, fpath, ti->path, e, count, err, n);
    if (!ok) {
        free(e);
        e = NULL;
        count = -1;
    } else if (count == 0) {
        free(e);
        e = NULL;
    }
    *out = e;
    if (sp >= 0)
        H5Sclose(sp);
    if (fcpl >= 0)
        H5Pclose(fcpl);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (ds >= 0)
        H5Dclose(ds);
    return count;
}

static bool select_range(hid_t sp, int rank, const hsize_t *dims, int d, hsize_t *start,
                         hsize_t first, hsize_t count, bool *any)
{
    hsize_t inner = 1;
    for (int j = d + 1; j < rank; j++)
        inner *= dims[j];
    while (count > 0) {
        hsize_t row = first / inner, off = first % inner;
        if (off != 0 || count < inner) {
            hsize_t take = inner - off < count ? inner - off : count;
            start[d] = row;
            if (!select_range(sp, rank, dims, d + 1, start, off, take, any))
                return false;
            first += take;
            count -= take;
            continue;
        }
        hsize_t st[TE_MAX_DIMS], cnt[TE_MAX_DIMS], rows = count / inner;
        for (int j = 0; j < rank; j++) {
            st[j] = j < d ? start[j] : j == d ? row : 0;
            cnt[j] = j < d ? 1 : j == d ? rows : dims[j];
        }
        if (H5Sselect_hyperslab(sp, *any ? H5S_SELECT_OR : H5S_SELECT_SET, st, NULL, cnt, NULL) < 0)
            return false;
        *any = true;
        first += rows * inner;
        count -= rows * inner;
    }
    return true;
}

/* Elements [first, first + count) of tensor ti through HDF5 (a hyperslab). */
static bool range_read_h5(const char *fpath, hid_t file, const dump_tensor_info *ti, int64_t first,
                          int64_t count, void *dst, char *err, size_t n)
{
    dump_contain_at("%s", ti->path);
    hid_t ds = H5Dopen2(file, ti->path, H5P_DEFAULT);
    hid_t t = dump_h5_type(ti->dtype);
    hid_t fsp = ds < 0 ? -1 : H5Dget_space(ds);
    hsize_t mdims[1] = { (hsize_t)count }, dims[TE_MAX_DIMS], start[TE_MAX_DIMS] = { 0 };
    hid_t msp = H5Screate_simple(1, mdims, NULL);
    int rank = fsp < 0 ? -1 : H5Sget_simple_extent_ndims(fsp);
    bool any = false;
    bool ok = ds >= 0 && t >= 0 && msp >= 0 && rank >= 1 && rank <= TE_MAX_DIMS &&
              H5Sget_simple_extent_dims(fsp, dims, NULL) == rank &&
              select_range(fsp, rank, dims, 0, start, (hsize_t)first, (hsize_t)count, &any) &&
              H5Dread(ds, t, msp, fsp, H5P_DEFAULT, dst) >= 0;
    if (!ok) {
        char why[256];
        dump_h5_fail(err, n, "%s: %s: cannot read the values: %s", fpath, ti->path,
                     dump_h5_reason(why, sizeof why));
    }
    if (msp >= 0)
        H5Sclose(msp);
    if (fsp >= 0)
        H5Sclose(fsp);
    if (t >= 0)
        H5Tclose(t);
    if (ds >= 0)
        H5Dclose(ds);
    return ok;
}

static void stats_check(scan *s, const dump_stats_row *rows, int count)
{
    for (int i = 0; i < count; i++) {
        char want[DUMP_PATH_MAX];
        if (!dump_tensor_path(rows[i].op, rows[i].io, rows[i].slot, want, sizeof want) ||
            strcmp(want, rows[i].path) != 0)
            problem(s->p, "%s: /stats: row %d: path '%s' does not match op '%s' %s%d", s->path,
                    i, rows[i].path, rows[i].op, io_name(rows[i].io), rows[i].slot);
    }
}

static void run_scan(scan *s, dump_run_meta *m, dump_op_row **ops, int *n_ops)
{
    int64_t seed = 0;
    int mode = 0;
    memset(m, 0, sizeof *m);
    if (attr_i32(s, s->file, "/", "tdbg_format", &m->format) && m->format != DUMP_FORMAT)
        problem(s->p, "%s: /: attribute 'tdbg_format' is %d, this tdbg reads %d", s->path,
                m->format, DUMP_FORMAT);
    attr_text(s, s->file, "/", "engine_version", m->engine_version, sizeof m->engine_version);
    if (attr_enum(s, s->file, "/", "mode", mode_name, 2, &mode))
        m->mode = (te_mode)mode;
    attr_text(s, s->file, "/", "amp", m->amp, sizeof m->amp);
    if (attr_there(s, "amp_level"))
        attr_text(s, s->file, "/", "amp_level", m->amp_level, sizeof m->amp_level);
    if (attr_there(s, "amp_dtype"))
        attr_text(s, s->file, "/", "amp_dtype", m->amp_dtype, sizeof m->amp_dtype);
    attr_text(s, s->file, "/", "backend", m->backend, sizeof m->backend);
    if (attr_int(s, s->file, "/", "seed", K_U64, &seed))
        m->seed = (uint64_t)seed;
    int64_t peak = 0;
    if (attr_there(s, "peak_bytes") && attr_int(s, s->file, "/", "peak_bytes", K_U64, &peak))
        m->peak_bytes = (uint64_t)peak;
    attr_text(s, s->file, "/", "command_line", m->command_line, sizeof m->command_line);
    attr_text(s, s->file, "/", "created", m->created, sizeof m->created);
    if (attr_there(s, "ranks") || attr_there(s, "rank")) {
        attr_i32(s, s->file, "/", "rank", &m->rank);
        if (attr_i32(s, s->file, "/", "ranks", &m->ranks) && (m->ranks < 1 || m->rank < 0 || m->rank >= m->ranks))
            problem(s->p, "%s: /: attributes 'rank' %d and 'ranks' %d: expected 0 <= rank < ranks", s->path,
                    m->rank, m->ranks);
    }
    *ops = table_read(s, "/ops", op_cols, NCOLS(op_cols), sizeof **ops, n_ops);
    hid_t ds = *ops ? H5Dopen2(s->file, "/ops", H5P_DEFAULT) : -1;
    hid_t ft = ds >= 0 ? H5Dget_type(ds) : -1;
    m->lists_inplace = ft >= 0 && H5Tget_member_index(ft, "inplace") >= 0;
    m->lists_reads = ft >= 0 && H5Tget_member_index(ft, "reads") >= 0;
    m->lists_attrs = ft >= 0 && H5Tget_member_index(ft, "attrs") >= 0;
    if (ft >= 0)
        H5Tclose(ft);
    if (ds >= 0)
        H5Dclose(ds);
}

/* run.h5's /collectives (a rank's dump), when there: each row's numbers in
 * range for a job of m->ranks ranks. */
static dump_coll_row *colls_scan(scan *s, const dump_run_meta *m, int *count)
{
    *count = 0;
    dump_contain_at("/collectives");
    if (H5Lexists(s->file, "collectives", H5P_DEFAULT) <= 0)
        return NULL;
    if (m->ranks < 1)
        problem(s->p, "%s: /collectives: a table of collectives without the attributes 'rank' and 'ranks'",
                s->path);
    dump_coll_row *c = table_read(s, "/collectives", coll_cols, NCOLS(coll_cols), sizeof *c, count);
    for (int i = 0; c && i < *count; i++) {
        const dump_coll_row *r = &c[i];
        if (r->step < 0 || r->exec < 0 || r->seq < 0 || r->bytes < 0 || r->ranks != m->ranks ||
            r->root < -1 || r->root >= r->ranks || r->bucket < -1 || !r->op[0] || !r->kind[0]) {
            problem(s->p, "%s: /collectives: row %d: bad values (step %lld, exec %d, op '%s', kind '%s', seq %lld, "
                    "ranks %d of a job of %d, root %d, bucket %d, bytes %lld)", s->path, i, (long long)r->step,
                    r->exec, r->op, r->kind, (long long)r->seq, r->ranks, m->ranks, r->root, r->bucket,
                    (long long)r->bytes);
            break;
        }
    }
    return c;
}

/* ---- the parse, in the child: what it sends back ------------------------------------ */

static void put_problems(dump_blob *o, const dump_problems *p)
{
    dump_blob_int(o, p->n);
    for (int i = 0; i < p->n; i++)
        dump_blob_str(o, p->msg[i]);
}

typedef struct step_job {
    const char *path;
    bool verify;   /* also read the values of tensors that have no extents */
} step_job;

/* Parses a step file: its size, step, n_tensors, problems, tensors, each
 * tensor's extents (a count, then the dump_extent structs as they are in
 * memory, or -1 and a message), the problems of the values read here
 * (verify), then /stats: whether there is one, its problems, its rows. */
static void step_child(void *arg, dump_blob *o)
{
    const step_job *j = arg;
    dump_problems p = { 0 }, vp = { 0 }, sp = { 0 }, pp = { 0 };
    step_parse r = { 0 };
    scan s = { j->path, -1, &p, 0 };
    int n_tensors = -1, n_rows = 0, n_samples = 0;
    bool stats = false, samples = false, crc_none = false;
    char err[1024];
    dump_h5_quiet q = dump_h5_hush();
    s.file = file_open(&s);
    if (s.file >= 0)
        step_scan(&s, &r, &n_tensors, &stats, &samples);
    dump_blob_int(o, (long long)s.size);
    dump_blob_int(o, r.step);
    dump_blob_int(o, n_tensors);
    dump_blob_put(o, &r.scaler, sizeof r.scaler);
    put_problems(o, &p);
    dump_blob_int(o, r.n);
    dump_blob_put(o, r.t, (size_t)r.n * sizeof *r.t);
    for (int i = 0; i < r.n; i++) {
        dump_extent *e = NULL;
        int c = extents_find(j->path, s.file, &r.t[i], &e, err, sizeof err);
        dump_blob_int(o, c);
        if (c < 0)
            dump_blob_str(o, err);
        else
            dump_blob_put(o, e, (size_t)c * sizeof *e);
        free(e);
        if (c == 0 && j->verify && r.t[i].numel > 0) {
            void *buf = malloc(r.t[i].nbytes);
            int crc = 0;
            if (!buf || !range_read_h5(j->path, s.file, &r.t[i], 0, r.t[i].numel, buf, err,
                                       sizeof err))
                problem(&vp, "%s", buf ? err : "out of memory");
            else if ((crc = dump_crc_check_values(s.file, j->path, &r.t[i], buf, err, sizeof err)) < 0)
                problem(&vp, "%s", err);
            crc_none |= crc == 0;
            free(buf);
        }
    }
    put_problems(o, &vp);
    dump_blob_int(o, crc_none);
    dump_stats_row *rows = NULL;
    if (stats) {
        scan ss = { j->path, s.file, &sp, s.size };
        rows = table_read(&ss, "/stats", stats_cols, NCOLS(stats_cols), sizeof *rows, &n_rows);
        if (rows)
            stats_check(&ss, rows, n_rows);
    }
    dump_blob_int(o, stats);
    put_problems(o, &sp);
    n_rows = sp.n > 0 ? 0 : n_rows;
    dump_blob_int(o, n_rows);
    dump_blob_put(o, rows, (size_t)n_rows * sizeof *rows);
    free(rows);
    dump_sample_row *srows = NULL;
    if (samples) {
        scan ss = { j->path, s.file, &pp, s.size };
        srows = table_read(&ss, "/samples", sample_cols, NCOLS(sample_cols), sizeof *srows, &n_samples);
    }
    put_problems(o, &pp);
    n_samples = pp.n > 0 ? 0 : n_samples;
    dump_blob_int(o, n_samples);
    dump_blob_put(o, srows, (size_t)n_samples * sizeof *srows);
    free(srows);
    free(r.t);
    if (s.file >= 0)
        H5Fclose(s.file);
    dump_h5_loud(q);
    dump_problems_free(&p);
    dump_problems_free(&vp);
    dump_problems_free(&sp);
    dump_problems_free(&pp);
}

/* Parses run.h5: problems, the root attributes (a dump_run_meta), the op
 * rows, the collectives' rows. */
static void run_child(void *arg, dump_blob *o)
{
    const char *path = arg;
    dump_problems p = { 0 };
    scan s = { path, -1, &p, 0 };
    dump_run_meta m;
    dump_op_row *ops = NULL;
    dump_coll_row *colls = NULL;
    int n_ops = 0, n_colls = 0;
    memset(&m, 0, sizeof m);
    dump_h5_quiet q = dump_h5_hush();
    s.file = file_open(&s);
    if (s.file >= 0) {
        run_scan(&s, &m, &ops, &n_ops);
        colls = colls_scan(&s, &m, &n_colls);
        H5Fclose(s.file);
    }
    dump_h5_loud(q);
    put_problems(o, &p);
    dump_blob_put(o, &m, sizeof m);
    dump_blob_int(o, n_ops);
    dump_blob_put(o, ops, (size_t)n_ops * sizeof *ops);
    dump_blob_int(o, n_colls);
    dump_blob_put(o, colls, (size_t)n_colls * sizeof *colls);
    free(ops);
    free(colls);
    dump_problems_free(&p);
}

typedef struct range_job {
    const char *path;
    const dump_tensor_info *ti;
    int64_t first, count;
} range_job;

/* Reads values through HDF5 (a tensor without extents): 1 and the bytes,
 * or 0 and a message. */
static void range_child(void *arg, dump_blob *o)
{
    const range_job *j = arg;
    dump_problems p = { 0 };
    scan s = { j->path, -1, &p, 0 };
    size_t bytes = (size_t)j->count * te_dtype_size(j->ti->dtype);
    char err[1024];
    dump_h5_quiet q = dump_h5_hush();
    s.file = file_open(&s);
    void *buf = s.file >= 0 ? malloc(bytes ? bytes : 1) : NULL;
    bool ok = buf && range_read_h5(j->path, s.file, j->ti, j->first, j->count, buf, err,
                                   sizeof err);
    if (s.file < 0)
        snprintf(err, sizeof err, "%s", p.n > 0 ? p.msg[0] : "out of memory");
    else if (!buf)
        snprintf(err, sizeof err, "%s: %s: out of memory", j->path, j->ti->path);
    if (s.file >= 0)
        H5Fclose(s.file);
    dump_h5_loud(q);
    dump_blob_int(o, ok);
    if (ok)
        dump_blob_put(o, buf, bytes);
    else
        dump_blob_str(o, err);
    free(buf);
    dump_problems_free(&p);
}

/* ---- the reader, in the parent: built from the child's answer ------------------------- */

/* The most a parse may answer (tensor descriptions, op rows). */
#define ANSWER_MAX ((size_t)1 << 31)

/* Starts the HDF5 library here, before the fork, so that each child finds
 * it ready: started in every child instead, it costs each file ~3 ms. */
static void h5_ready(void)
{
    H5open();
}

/* Ends a text field of a struct that came through the pipe within it. */
#define TEXT_END(a) ((a)[sizeof(a) - 1] = '\0')

static const char malformed[] = "damaged HDF5 metadata (the HDF5 library's answer is malformed)";

/* One tensor's storage: extents (n_ext > 0), read through HDF5 (0), or
 * not known (-1, err says why). */
typedef struct tensor_store {
    int n_ext;
    dump_extent *ext;
    char *err;
} tensor_store;

struct dump_step_reader {
    char *path;
    int fd;                 /* the file, for pread() of extents; -1 if it did not open */
    uint64_t size;          /* its size when parsed */
    int64_t step;
    int n, n_tensors;       /* n_tensors: the root attribute, -1 unread */
    dump_step_scaler scaler;
    dump_tensor_info *t;
    tensor_store *st;
    bool has_stats;
    int n_stats;
    dump_stats_row *stats;
    dump_problems stats_p;  /* reading /stats */
    int n_samples;
    dump_sample_row *samples;
    dump_problems samples_p; /* reading /samples */
    dump_problems value_p;  /* verify: values the child read */
    bool value_crc_none;    /* verify: some of those have no CRC-32C (older files) */
};

static void reader_free(dump_step_reader *r)
{
    if (r->fd >= 0)
        close(r->fd);
    for (int i = 0; r->st && i < r->n; i++) {
        free(r->st[i].ext);
        free(r->st[i].err);
    }
    free(r->st);
    free(r->t);
    free(r->stats);
    dump_problems_free(&r->stats_p);
    dump_problems_free(&r->samples_p);
    free(r->samples);
    dump_problems_free(&r->value_p);
    free(r->path);
    free(r);
}

static void get_problems(dump_cursor *c, dump_problems *p)
{
    long long n = dump_cur_int(c);
    if (n < 0 || (unsigned long long)n > c->left)
        c->bad = true;
    for (long long i = 0; !c->bad && i < n; i++)
        problem(p, "%s", dump_cur_str(c));
}

/* An array of count structs of size each from the blob (NULL for none). */
static void *get_array(dump_cursor *c, long long count, size_t each)
{
    if (count < 0 || (unsigned long long)count > c->left / each) {
        c->bad = true;
        return NULL;
    }
    void *a = count ? malloc((size_t)count * each) : NULL;
    if (count && !a)
        c->bad = true;
    else
        dump_cur_get(c, a, (size_t)count * each);
    return a;
}

/* What a description says of a tensor is possible and agrees with itself. */
static bool tensor_ok(dump_tensor_info *ti, uint64_t size)
{
    TEXT_END(ti->path);
    TEXT_END(ti->op);
    TEXT_END(ti->op_type);
    TEXT_END(ti->tensor);
    TEXT_END(ti->file);
    TEXT_END(ti->kernel);
    if ((unsigned)ti->dtype >= TE_DTYPE_COUNT || (unsigned)ti->phase >= TE_PHASE_COUNT ||
        (unsigned)ti->io > DUMP_OUT || ti->ndim < 0 || ti->ndim > TE_MAX_DIMS)
        return false;
    int64_t numel = 1;
    for (int i = 0; i < ti->ndim; i++)
        if (ti->shape[i] < 0 || __builtin_mul_overflow(numel, ti->shape[i], &numel))
            return false;
    return numel == ti->numel && values_fit(numel, ti->dtype, size) &&
           ti->nbytes == (size_t)numel * te_dtype_size(ti->dtype);
}

/* Extents cover the tensor in order, each of them (and all together) in a
 * file of size bytes. */
static bool extents_ok(const dump_tensor_info *ti, const dump_extent *e, int count, uint64_t size)
{
    size_t es = te_dtype_size(ti->dtype);
    int64_t next = 0;
    uint64_t total = 0;
    for (int k = 0; k < count; k++) {
        if (e[k].first != next || e[k].count <= 0 || e[k].count > ti->numel - next ||
            e[k].size > size || e[k].size < (uint64_t)e[k].count * es + 4)
            return false;
        total += e[k].size;
        next += e[k].count;
    }
    return next == ti->numel && total <= size;
}

/* Builds a reader from step_child's answer, the parse's problems into p;
 * NULL (and a problem) when the answer does not hold together. */
static dump_step_reader *step_decode(const char *path, const dump_blob *b, dump_problems *p)
{
    dump_cursor c = { b->b, b->len, false };
    dump_step_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        problem(p, "%s: out of memory", path);
        free(r);
        return NULL;
    }
    r->fd = -1;
    r->size = (uint64_t)dump_cur_int(&c);
    r->step = dump_cur_int(&c);
    r->n_tensors = (int)dump_cur_int(&c);
    dump_cur_get(&c, &r->scaler, sizeof r->scaler);
    TEXT_END(r->scaler.skip_param);
    if (r->scaler.skipped < -1 || r->scaler.skipped > 1)
        c.bad = true;
    get_problems(&c, p);
    long long n = dump_cur_int(&c);
    r->t = get_array(&c, n, sizeof *r->t);
    r->st = c.bad || n == 0 ? NULL : calloc((size_t)n, sizeof *r->st);
    if (!c.bad && n > 0 && !r->st)
        c.bad = true;
    r->n = c.bad ? 0 : (int)n;
    for (int i = 0; i < r->n && !c.bad; i++) {
        tensor_store *st = &r->st[i];
        const dump_tensor_info *ti = &r->t[i];
        if (!tensor_ok(&r->t[i], r->size))
            c.bad = true;
        long long ne = dump_cur_int(&c);
        if (ne < 0) {
            st->n_ext = -1;
            st->err = strdup(dump_cur_str(&c));
            continue;
        }
        st->ext = get_array(&c, ne, sizeof *st->ext);
        st->n_ext = c.bad ? 0 : (int)ne;
        if (!c.bad && st->n_ext > 0 && !extents_ok(ti, st->ext, st->n_ext, r->size)) {
            char m[DUMP_PATH_MAX + 128];
            snprintf(m, sizeof m, "%s: %s: damaged HDF5 metadata in its chunk index (chunks "
                     "that do not cover it or lie outside the file)", path, ti->path);
            st->n_ext = -1;
            st->err = strdup(m);
        }
        if (st->n_ext < 0 && !st->err)
            c.bad = true;
    }
    get_problems(&c, &r->value_p);
    r->value_crc_none = dump_cur_int(&c) != 0;
    r->has_stats = dump_cur_int(&c) != 0;
    get_problems(&c, &r->stats_p);
    long long ns = dump_cur_int(&c);
    r->stats = get_array(&c, ns, sizeof *r->stats);
    r->n_stats = c.bad ? 0 : (int)ns;
    for (int i = 0; i < r->n_stats; i++) {
        TEXT_END(r->stats[i].path);
        TEXT_END(r->stats[i].op);
        c.bad = c.bad || (unsigned)r->stats[i].io > DUMP_OUT;
    }
    get_problems(&c, &r->samples_p);
    long long nsm = dump_cur_int(&c);
    r->samples = get_array(&c, nsm, sizeof *r->samples);
    r->n_samples = c.bad ? 0 : (int)nsm;
    for (int i = 0; i < r->n_samples; i++) {
        TEXT_END(r->samples[i].dataset);
        TEXT_END(r->samples[i].source);
    }
    if (c.bad || c.left != 0) {
        problem(p, "%s: %s", path, malformed);
        reader_free(r);
        return NULL;
    }
    return r;
}

/* Parses a step file in a child; the reader is returned even with problems
 * (as much as could be read), NULL when there is nothing to read. */
static dump_step_reader *step_load(const char *path, bool verify, dump_problems *p)
{
    step_job j = { path, verify };
    dump_blob b;
    h5_ready();
    char err[1536];
    if (!dump_contain(path, step_child, &j, ANSWER_MAX, &b, err, sizeof err)) {
        problem(p, "%s", err);
        return NULL;
    }
    dump_step_reader *r = step_decode(path, &b, p);
    dump_blob_free(&b);
    if (r)
        r->fd = open(path, O_RDONLY | O_CLOEXEC);
    return r;
}

dump_step_reader *dump_step_open(const char *path, char *err, size_t n)
{
    dump_problems p = { 0 };
    dump_step_reader *r = step_load(path, false, &p);
    if (p.n > 0) {
        first_problem(&p, err, n);
        if (r)
            reader_free(r);
        r = NULL;
    }
    dump_problems_free(&p);
    return r;
}

void dump_step_close(dump_step_reader *r)
{
    if (r)
        reader_free(r);
}

int64_t dump_step_number(const dump_step_reader *r) { return r->step; }
int dump_step_count(const dump_step_reader *r) { return r->n; }
const char *dump_step_path(const dump_step_reader *r) { return r->path; }
const dump_step_scaler *dump_step_scaler_of(const dump_step_reader *r) { return &r->scaler; }

const dump_tensor_info *dump_step_tensor(const dump_step_reader *r, int i)
{
    return i >= 0 && i < r->n ? &r->t[i] : NULL;
}

int dump_step_find(const dump_step_reader *r, const char *path)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->t[i].path, path) == 0)
            return i;
    return -1;
}

/* Elements [first, first + count) of tensor i from its extents: each chunk
 * read whole (its place checked against the file's size first) and its
 * checksum checked before any of it is used. */
static bool extent_read(dump_step_reader *r, int i, int64_t first, int64_t count, void *dst,
                        char *err, size_t n)
{
    const dump_tensor_info *ti = &r->t[i];
    const tensor_store *st = &r->st[i];
    size_t es = te_dtype_size(ti->dtype);
    struct stat sb;
    if (r->fd < 0 || fstat(r->fd, &sb) != 0)
        return dump_h5_fail(err, n, "%s: cannot open: %s", r->path, strerror(errno));
    unsigned char *buf = NULL;
    size_t cap = 0;
    bool ok = true;
    for (int k = 0; ok && k < st->n_ext; k++) {
        const dump_extent *e = &st->ext[k];
        if (e->first + e->count <= first || e->first >= first + count)
            continue;
        if (e->offset > (uint64_t)sb.st_size || e->size > (uint64_t)sb.st_size - e->offset) {
            ok = dump_h5_fail(err, n, "%s: %s: its chunk of elements %lld..%lld lies past the "
                              "end of the file (%zu bytes at %llu, the file has %lld)", r->path,
                              ti->path, (long long)e->first,
                              (long long)(e->first + e->count - 1), e->size,
                              (unsigned long long)e->offset, (long long)sb.st_size);
            break;
        }
        if (e->size > cap) {
            unsigned char *more = realloc(buf, e->size);
            if (!more) {
                ok = dump_h5_fail(err, n, "%s: %s: out of memory", r->path, ti->path);
                break;
            }
            buf = more;
            cap = e->size;
        }
        size_t got = 0;
        while (got < e->size) {
            ssize_t k2 = pread(r->fd, buf + got, e->size - got, (off_t)(e->offset + got));
            if (k2 < 0 && errno == EINTR)
                continue;
            if (k2 <= 0) {
                ok = dump_h5_fail(err, n, "%s: %s: cannot read the values: %s", r->path,
                                  ti->path, k2 < 0 ? strerror(errno) : "the file ends early");
                break;
            }
            got += (size_t)k2;
        }
        if (!ok || !(ok = dump_extent_verify(r, i, e, buf, err, n)))
            break;
        int64_t lo = e->first > first ? e->first : first;
        int64_t hi = e->first + e->count < first + count ? e->first + e->count : first + count;
        memcpy((unsigned char *)dst + (size_t)(lo - first) * es,
               buf + (size_t)(lo - e->first) * es, (size_t)(hi - lo) * es);
    }
    free(buf);
    return ok;
}

/* The same through HDF5, in a child. */
static bool range_read(dump_step_reader *r, int i, int64_t first, int64_t count, void *dst,
                       char *err, size_t n)
{
    const dump_tensor_info *ti = &r->t[i];
    size_t bytes = (size_t)count * te_dtype_size(ti->dtype);
    range_job j = { r->path, ti, first, count };
    dump_blob b;
    h5_ready();
    if (!dump_contain(r->path, range_child, &j, bytes + 4096, &b, err, n))
        return false;
    dump_cursor c = { b.b, b.len, false };
    bool ok = dump_cur_int(&c) == 1;
    if (ok)
        dump_cur_get(&c, dst, bytes);
    else
        dump_h5_fail(err, n, "%s", dump_cur_str(&c));
    if (c.bad || c.left != 0)
        ok = dump_h5_fail(err, n, "%s: %s: %s", r->path, ti->path, malformed);
    dump_blob_free(&b);
    return ok;
}

bool dump_step_read_range(dump_step_reader *r, int i, int64_t first, int64_t count, void *dst,
                          char *err, size_t n)
{
    if (i < 0 || i >= r->n)
        return dump_h5_fail(err, n, "%s: no tensor %d (the file has %d)", r->path, i, r->n);
    const dump_tensor_info *ti = &r->t[i];
    if (first < 0 || count < 0 || first > ti->numel || count > ti->numel - first)
        return dump_h5_fail(err, n, "%s: %s: elements %lld..%lld are outside its %lld", r->path,
                            ti->path, (long long)first, (long long)(first + count - 1),
                            (long long)ti->numel);
    if (count == 0)
        return true;
    if (r->st[i].n_ext < 0)
        return dump_h5_fail(err, n, "%s", r->st[i].err);
    if (r->st[i].n_ext > 0)
        return extent_read(r, i, first, count, dst, err, n);
    return range_read(r, i, first, count, dst, err, n);
}

bool dump_step_read_raw(dump_step_reader *r, int i, void *dst, char *err, size_t n)
{
    if (i < 0 || i >= r->n)
        return dump_h5_fail(err, n, "%s: no tensor %d (the file has %d)", r->path, i, r->n);
    return dump_step_read_range(r, i, 0, r->t[i].numel, dst, err, n);
}

int dump_step_extents(dump_step_reader *r, int i, dump_extent **out, char *err, size_t n)
{
    *out = NULL;
    if (i < 0 || i >= r->n) {
        dump_h5_fail(err, n, "%s: no tensor %d (the file has %d)", r->path, i, r->n);
        return -1;
    }
    const tensor_store *st = &r->st[i];
    if (st->n_ext < 0) {
        dump_h5_fail(err, n, "%s", st->err);
        return -1;
    }
    if (st->n_ext == 0)
        return 0;
    *out = malloc((size_t)st->n_ext * sizeof **out);
    if (!*out) {
        dump_h5_fail(err, n, "%s: %s: out of memory", r->path, r->t[i].path);
        return -1;
    }
    memcpy(*out, st->ext, (size_t)st->n_ext * sizeof **out);
    return st->n_ext;
}

int dump_step_stats(dump_step_reader *r, dump_stats_row **rows, char *err, size_t n)
{
    *rows = NULL;
    if (r->stats_p.n > 0) {
        first_problem(&r->stats_p, err, n);
        return -1;
    }
    if (r->n_stats == 0)
        return 0;
    *rows = malloc((size_t)r->n_stats * sizeof **rows);
    if (!*rows) {
        dump_h5_fail(err, n, "%s: /stats: out of memory", r->path);
        return -1;
    }
    memcpy(*rows, r->stats, (size_t)r->n_stats * sizeof **rows);
    return r->n_stats;
}

int dump_step_samples(dump_step_reader *r, dump_sample_row **rows, char *err, size_t n)
{
    *rows = NULL;
    if (r->samples_p.n > 0) {
        first_problem(&r->samples_p, err, n);
        return -1;
    }
    if (r->n_samples == 0)
        return 0;
    *rows = malloc((size_t)r->n_samples * sizeof **rows);
    if (!*rows) {
        dump_h5_fail(err, n, "%s: /samples: out of memory", r->path);
        return -1;
    }
    memcpy(*rows, r->samples, (size_t)r->n_samples * sizeof **rows);
    return r->n_samples;
}

/* ---- run.h5 ---------------------------------------------------------------------- */

/* Parses run.h5 in a child: false with problems in p. The collectives go
 * to *colls when it is not NULL. */
static bool run_load(const char *path, dump_run_meta *m, dump_op_row **ops, int *n_ops,
                     dump_coll_row **colls, int *n_colls, dump_problems *p)
{
    *ops = NULL;
    *n_ops = 0;
    if (colls)
        *colls = NULL, *n_colls = 0;
    memset(m, 0, sizeof *m);
    dump_blob b;
    h5_ready();
    char err[1536];
    if (!dump_contain(path, run_child, (void *)path, ANSWER_MAX, &b, err, sizeof err)) {
        problem(p, "%s", err);
        return false;
    }
    int before = p->n;
    dump_cursor c = { b.b, b.len, false };
    get_problems(&c, p);
    dump_cur_get(&c, m, sizeof *m);
    TEXT_END(m->engine_version);
    TEXT_END(m->amp);
    TEXT_END(m->amp_level);
    TEXT_END(m->amp_dtype);
    TEXT_END(m->backend);
    TEXT_END(m->command_line);
    TEXT_END(m->created);
    long long count = dump_cur_int(&c);
    dump_op_row *o = get_array(&c, count, sizeof *o);
    for (long long i = 0; !c.bad && i < count; i++) {
        TEXT_END(o[i].name);
        TEXT_END(o[i].type);
        TEXT_END(o[i].file);
        TEXT_END(o[i].inputs);
        TEXT_END(o[i].outputs);
        TEXT_END(o[i].kernel);
        TEXT_END(o[i].inplace);
        TEXT_END(o[i].reads);
        TEXT_END(o[i].attrs);
        c.bad = (unsigned)o[i].phase >= TE_PHASE_COUNT;
    }
    long long n_cl = c.bad ? 0 : dump_cur_int(&c);
    dump_coll_row *cl = c.bad ? NULL : get_array(&c, n_cl, sizeof *cl);
    for (long long i = 0; !c.bad && i < n_cl; i++) {
        TEXT_END(cl[i].op);
        TEXT_END(cl[i].kind);
    }
    if (c.bad || c.left != 0 || (unsigned)m->mode > TE_MODE_GRAPH || m->ranks < 0 ||
        (m->ranks > 0 && (m->rank < 0 || m->rank >= m->ranks)))
        problem(p, "%s: %s", path, malformed);
    dump_blob_free(&b);
    if (p->n > before) {
        free(o);
        free(cl);
        return false;
    }
    *ops = o;
    *n_ops = (int)count;
    if (colls) {
        *colls = cl;
        *n_colls = (int)n_cl;
    } else {
        free(cl);
    }
    return true;
}

/* dir/run.h5, as the path to open; NULL when out of memory. */
static char *run_path(const char *dir)
{
    size_t len = strlen(dir) + sizeof "/run.h5";
    char *path = malloc(len);
    if (path)
        snprintf(path, len, "%s/run.h5", dir);
    return path;
}

int dump_run_colls(const char *dir, dump_coll_row **rows, char *err, size_t n)
{
    *rows = NULL;
    char *path = run_path(dir);
    if (!path)
        return dump_h5_fail(err, n, "%s: out of memory", dir), -1;
    dump_problems p = { 0 };
    dump_run_meta m;
    dump_op_row *ops = NULL;
    int n_ops = 0, count = 0;
    bool ok = run_load(path, &m, &ops, &n_ops, rows, &count, &p);
    if (!ok)
        first_problem(&p, err, n);
    free(ops);
    dump_problems_free(&p);
    free(path);
    return ok ? count : -1;
}

bool dump_run_read(const char *dir, dump_run_meta *m, dump_op_row **ops, int *n_ops, char *err,
                   size_t n)
{
    *ops = NULL;
    *n_ops = 0;
    char *path = run_path(dir);
    if (!path)
        return dump_h5_fail(err, n, "%s: out of memory", dir);
    dump_problems p = { 0 };
    bool ok = run_load(path, m, ops, n_ops, NULL, NULL, &p);
    if (!ok)
        first_problem(&p, err, n);
    dump_problems_free(&p);
    free(path);
    return ok;
}

/* ---- listing and verifying ---------------------------------------------------------- */

/* Reads every value of a step (so damaged chunks are found) and its
 * /stats table, and compares n_tensors with what is there. */
static void step_verify(const char *path, dump_problems *p)
{
    int before = p->n;
    dump_step_reader *r = step_load(path, true, p);
    if (!r)
        return;
    char err[1024];
    int found = r->n;
    bool crc_none = r->value_crc_none;
    for (int i = 0; i < r->n; i++) {
        if (r->st[i].n_ext == 0)   /* read by the child: its problems are in value_p */
            continue;
        for (int k = 0; k < r->st[i].n_ext; k++)
            crc_none |= !r->st[i].ext[k].has_crc;
        void *buf = malloc(r->t[i].nbytes ? r->t[i].nbytes : 1);
        if (!buf || !dump_step_read_raw(r, i, buf, err, sizeof err))
            problem(p, "%s", buf ? err : "out of memory");
        free(buf);
    }
    for (int i = 0; i < r->value_p.n; i++)
        problem(p, "%s", r->value_p.msg[i]);
    for (int i = 0; i < r->stats_p.n; i++)
        problem(p, "%s", r->stats_p.msg[i]);
    for (int i = 0; i < r->samples_p.n; i++)
        problem(p, "%s", r->samples_p.msg[i]);
    found += r->n_stats;
    if (r->n_tensors >= 0 && r->n_tensors != found && p->n == before)
        problem(p, "%s: /: attribute 'n_tensors' is %d, the file holds %d", path, r->n_tensors,
                found);
    p->fletcher_only += crc_none;
    reader_free(r);
}

static void run_verify(const char *path, dump_problems *p)
{
    dump_run_meta m;
    dump_op_row *ops = NULL;
    int n_ops = 0;
    run_load(path, &m, &ops, &n_ops, NULL, NULL, p);
    free(ops);
}

bool dump_step_read_f32(dump_step_reader *r, int i, float *dst, char *err, size_t n)
{
    if (i < 0 || i >= r->n)
        return dump_h5_fail(err, n, "%s: no tensor %d (the file has %d)", r->path, i, r->n);
    const dump_tensor_info *ti = &r->t[i];
    if (ti->dtype == TE_F32)
        return dump_step_read_raw(r, i, dst, err, n);
    void *raw = malloc(ti->nbytes ? ti->nbytes : 1);
    if (!raw)
        return dump_h5_fail(err, n, "%s: %s: out of memory", r->path, ti->path);
    bool ok = dump_step_read_raw(r, i, raw, err, n);
    for (int64_t k = 0; ok && k < ti->numel; k++) {
        if (ti->dtype == TE_F16)
            dst[k] = te_f16_to_f32(((const uint16_t *)raw)[k]);
        else if (ti->dtype == TE_BF16)
            dst[k] = te_bf16_to_f32(((const uint16_t *)raw)[k]);
        else
            dst[k] = (float)((const int32_t *)raw)[k];
    }
    free(raw);
    return ok;
}

static int entry_order(const void *pa, const void *pb)
{
    const dump_step_entry *a = pa, *b = pb;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return (int)b->complete - (int)a->complete;
}

int dump_run_list(const char *dir, dump_step_entry **out, char *err, size_t n)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) {
        dump_h5_fail(err, n, "%s: cannot read the directory: %s", dir, strerror(errno));
        return -1;
    }
    int count = 0, cap = 0;
    dump_step_entry *e = NULL;
    for (struct dirent *de; (de = readdir(d));) {
        bool complete;
        int64_t step = name_step(de->d_name, &complete);
        size_t len = strlen(de->d_name);
        struct stat st;
        if (step < 0 || len >= sizeof e->name || fstatat(dirfd(d), de->d_name, &st, 0) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 64;
            dump_step_entry *more = realloc(e, (size_t)cap * sizeof *e);
            if (!more) {
                free(e);
                closedir(d);
                dump_h5_fail(err, n, "%s: out of memory", dir);
                return -1;
            }
            e = more;
        }
        e[count].step = step;
        e[count].complete = complete;
        memcpy(e[count].name, de->d_name, len + 1);
        count++;
    }
    closedir(d);
    if (count > 1)
        qsort(e, (size_t)count, sizeof *e, entry_order);
    *out = e;
    return count;
}

static void dir_verify(const char *dir, dump_problems *p)
{
    char err[1024];
    dump_step_entry *e = NULL;
    size_t len = strlen(dir) + 64;
    char *path = malloc(len);
    if (!path) {
        problem(p, "%s: out of memory", dir);
        return;
    }
    snprintf(path, len, "%s/run.h5", dir);
    struct stat st;
    if (stat(path, &st) != 0)
        problem(p, "%s: missing (every run directory has one)", path);
    else
        run_verify(path, p);
    int count = dump_run_list(dir, &e, err, sizeof err);
    if (count < 0)
        problem(p, "%s", err);
    for (int i = 0; i < count; i++) {
        snprintf(path, len, "%s/%s", dir, e[i].name);
        if (e[i].complete)
            step_verify(path, p);
        else
            problem(p, "%s: incomplete step %lld (the writer stopped before finishing it)", path,
                    (long long)e[i].step);
    }
    free(e);
    free(path);
}

int dump_verify(const char *path, dump_problems *p)
{
    *p = (dump_problems){ 0 };
    struct stat st;
    if (stat(path, &st) != 0) {
        problem(p, "%s: cannot open: %s", path, strerror(errno));
        return p->n;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (S_ISDIR(st.st_mode))
        dir_verify(path, p);
    else if (strcmp(base, "run.h5") == 0)
        run_verify(path, p);
    else
        step_verify(path, p);
    return p->n;
}

bool dump_extent_verify(const dump_step_reader *r, int i, const dump_extent *e,
                        const void *stored, char *err, size_t n)
{
    const unsigned char *b = stored;
    if (e->size < 4)
        return dump_h5_fail(err, n, "%s: %s: a chunk of %zu bytes has no checksum", r->path,
                            r->t[i].path, e->size);
    uint32_t want = (uint32_t)b[e->size - 4] | (uint32_t)b[e->size - 3] << 8 |
                    (uint32_t)b[e->size - 2] << 16 | (uint32_t)b[e->size - 1] << 24;
    uint32_t sum = dump_fletcher32(b, e->size - 4);
    /* HDF5's filter also accepts the halves swapped (files of HDF5 before 1.6.3). */
    if (want == sum || want == (sum << 16 | sum >> 16))
        return dump_crc_extent_check(r->path, &r->t[i], e, b, err, n);
    return dump_h5_fail(err, n, "%s: %s: cannot read the values: data error detected by "
                        "Fletcher32 checksum (elements %lld..%lld)", r->path, r->t[i].path,
                        (long long)e->first, (long long)(e->first + e->count - 1));
}
