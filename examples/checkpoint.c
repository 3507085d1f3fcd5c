/*
 * checkpoint.c — save and load a training run's state in HDF5
 * (checkpoint.h has the layout).
 */
#include "checkpoint.h"
#include "contain.h"

#include <hdf5.h>

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT "tdbg-checkpoint"
#define VERSION 2     /* 2: program, /buffers, /data/epoch, string attributes */
#define OLDEST_VERSION 1
#define MAX_SLOTS 3 /* m, v, and the f32 master copies of f16/bf16 parameters (AMP O2) */

/* The loss scaler's state as the file keeps it (/scaler's attributes). */
typedef struct {
    double scale;
    int64_t growth_tracker, hysteresis_left, skipped;
} scaler_saved;

/* The parameter's name without "param:". */
static const char *pname(const te_tensor *p)
{
    return strncmp(p->name, "param:", 6) == 0 ? p->name + 6 : p->name;
}

/* ---- writing --------------------------------------------------------------------- */

static bool attr_i64(hid_t loc, const char *name, int64_t v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = s < 0 ? -1 : H5Acreate2(loc, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = a >= 0 && H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0;
    if (a >= 0) H5Aclose(a);
    if (s >= 0) H5Sclose(s);
    return ok;
}

static bool attr_str(hid_t loc, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    hid_t s = H5Screate(H5S_SCALAR);
    bool ok = t >= 0 && s >= 0 && H5Tset_size(t, strlen(v) + 1) >= 0;
    hid_t a = ok ? H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT) : -1;
    ok = a >= 0 && H5Awrite(a, t, v) >= 0;
    if (a >= 0) H5Aclose(a);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    return ok;
}

/* A scalar dataset of type file_type written from *v in mem_type. */
static bool write_scalar(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t d = s < 0 ? -1 : H5Dcreate2(loc, name, file_type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = d >= 0 && H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0;
    if (d >= 0) H5Dclose(d);
    if (s >= 0) H5Sclose(s);
    return ok;
}

/* numel f32 values of shape like's, as dataset name of loc. */
static bool write_f32(hid_t loc, const char *name, const te_tensor *like, const float *v)
{
    hsize_t dims[TE_MAX_DIMS];
    for (int d = 0; d < like->ndim; d++)
        dims[d] = (hsize_t)like->shape[d];
    hid_t s = H5Screate_simple(like->ndim, dims, NULL);
    hid_t d = s < 0 ? -1 : H5Dcreate2(loc, name, H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0;
    if (d >= 0) H5Dclose(d);
    if (s >= 0) H5Sclose(s);
    return ok;
}

static hid_t group(hid_t loc, const char *name)
{
    return H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

static bool attr_f64(hid_t loc, const char *name, double v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = s < 0 ? -1 : H5Acreate2(loc, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = a >= 0 && H5Awrite(a, H5T_NATIVE_DOUBLE, &v) >= 0;
    if (a >= 0) H5Aclose(a);
    if (s >= 0) H5Sclose(s);
    return ok;
}

/* The AMP level and dtype as root attributes; /scaler with the loss
 * scaler's options and state when one is on. */
static bool write_amp(hid_t f)
{
    const te_amp_level level = te_amp_level_get();
    bool ok = attr_str(f, "amp", te_amp_level_name(level)) &&
              attr_str(f, "amp_dtype", te_dtype_name(level == TE_AMP_O0 ? TE_F32 : te_amp_dtype()));
    te_scaler_state st;
    if (!ok || !te_scaler_state_get(&st))
        return ok;
    hid_t g = group(f, "scaler");
    ok = g >= 0 && attr_i64(g, "fixed", st.opts.fixed) && attr_f64(g, "scale", st.scale) &&
         attr_i64(g, "growth_interval", st.opts.growth_interval) && attr_i64(g, "hysteresis", st.opts.hysteresis) &&
         attr_i64(g, "growth_tracker", st.growth_tracker) && attr_i64(g, "hysteresis_left", st.hysteresis_left) &&
         attr_i64(g, "skipped", st.skipped);
    if (g >= 0) H5Gclose(g);
    return ok;
}

/* Each buffer's host values as /buffers/NAME. */
static bool write_buffers(hid_t f, const ckpt_model *m)
{
    hid_t g = group(f, "buffers");
    bool ok = g >= 0;
    for (int i = 0; ok && i < m->n_buffers; i++) {
        const te_tensor *b = m->buffers[i];
        float *v = malloc((size_t)b->numel * sizeof *v);
        if ((ok = v != NULL)) {
            te_copy_to_f32(b, v);
            ok = write_f32(g, b->name, b, v);
        }
        free(v);
    }
    if (g >= 0) H5Gclose(g);
    return ok;
}

/* Everything but the file itself; false at the first failure. */
static bool write_all(hid_t f, const ckpt_model *m, const ckpt_info *info)
{
    bool ok = attr_str(f, "format", FORMAT) && attr_i64(f, "version", VERSION) &&
              attr_str(f, "program", m->program) && write_amp(f);
    for (int i = 0; ok && i < m->n_attrs; i++)
        ok = m->attrs[i].text ? attr_str(f, m->attrs[i].name, m->attrs[i].text)
                              : attr_i64(f, m->attrs[i].name, m->attrs[i].value);
    ok = ok && write_scalar(f, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &info->step);
    hid_t rng = ok ? group(f, "rng") : -1, data = ok ? group(f, "data") : -1;
    ok = rng >= 0 && data >= 0 && write_scalar(rng, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &info->seed) &&
         write_scalar(rng, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &info->rng_step) &&
         write_scalar(data, "position", H5T_STD_I64LE, H5T_NATIVE_INT64, &info->data_position) &&
         (info->epoch < 0 || write_scalar(data, "epoch", H5T_STD_I64LE, H5T_NATIVE_INT64, &info->epoch));
    if (rng >= 0) H5Gclose(rng);
    if (data >= 0) H5Gclose(data);
    ok = ok && write_buffers(f, m);
    const te_optim *opt = m->opt;
    const char *kind = m->optim_kind;

    hid_t params = ok ? group(f, "params") : -1, og = ok ? group(f, "optim") : -1;
    hid_t slots[MAX_SLOTS] = { -1, -1, -1 };
    const int n_slots = te_optim_slots(opt);
    ok = params >= 0 && og >= 0 && attr_str(og, "kind", kind) && attr_i64(og, "steps", te_optim_steps(opt));
    for (int s = 0; ok && s < n_slots; s++)
        ok = (slots[s] = group(og, te_optim_slot_name(opt, s))) >= 0;
    /* Host values, read from whatever device holds them: a checkpoint
     * written on one backend loads on another. */
    float *buf = NULL;
    for (int i = 0; ok && i < te_optim_param_count(opt); i++) {
        const te_tensor *p = te_optim_param(opt, i);
        float *more = realloc(buf, 2 * (size_t)p->numel * sizeof *buf); /* the values, then a buffer's */
        if (!(ok = more != NULL))
            break;
        buf = more;
        float *state = buf + p->numel;
        te_copy_to_f32(p, buf);
        ok = write_f32(params, pname(p), p, buf);
        for (int s = 0; ok && s < n_slots; s++) {
            /* TE_ERR_STATE: this buffer is absent (no update yet, or no master copy) */
            const te_status st = te_optim_state_read(opt, i, s, state);
            ok = st == TE_ERR_STATE || (st == TE_OK && write_f32(slots[s], pname(p), p, state));
        }
    }
    free(buf);
    for (int s = 0; s < n_slots; s++)
        if (slots[s] >= 0) H5Gclose(slots[s]);
    if (og >= 0) H5Gclose(og);
    if (params >= 0) H5Gclose(params);
    return ok;
}

/* HDF5's innermost message for the failure on the stack. */
static herr_t first_error(unsigned n, const H5E_error2_t *e, void *data)
{
    if (n == 0)
        snprintf(data, 256, "%s", e->desc);
    return 0;
}

static const char *h5_reason(char *buf)
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_error, buf);
    return buf[0] ? buf : "unknown HDF5 error";
}

bool ckpt_save(const char *path, const ckpt_model *m, const ckpt_info *info, char *why, size_t n)
{
    char tmp[4096], reason[256];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        snprintf(why, n, "checkpoint %s: path too long", path);
        return false;
    }
    H5E_auto2_t func;
    void *data;
    H5Eget_auto2(H5E_DEFAULT, &func, &data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    bool ok = f >= 0 && write_all(f, m, info);
    if (!ok)
        h5_reason(reason);
    if (f >= 0 && H5Fclose(f) < 0 && ok) {
        ok = false;
        h5_reason(reason);
    }
    H5Eset_auto2(H5E_DEFAULT, func, data);
    if (!ok) {
        snprintf(why, n, "cannot write checkpoint %s: %s", tmp, reason);
        remove(tmp);
        return false;
    }
    if (rename(tmp, path) != 0) {
        snprintf(why, n, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        remove(tmp);
        return false;
    }
    return true;
}

/* ---- reading, in the child of dump_contain ---------------------------------------- */

typedef struct load_arg {
    const char *path;
    const ckpt_model *m;
    bool tensors;       /* false: the info only */
} load_arg;

/* The failure message of the child's parse: the blob's first string. */
typedef struct {
    char msg[1024];
} child_err;

static bool fail(child_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(child_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return false;
}

static bool link_exists(hid_t f, const char *path)
{
    /* each component in turn: H5Lexists fails on a missing parent */
    char part[512];
    for (const char *p = path;; p++) {
        if (*p == '/' || *p == '\0') {
            size_t len = (size_t)(p - path);
            if (len >= sizeof part)
                return false;
            memcpy(part, path, len);
            part[len] = '\0';
            if (H5Lexists(f, part, H5P_DEFAULT) <= 0)
                return false;
            if (*p == '\0')
                return true;
        }
    }
}

/* A one-element integer attribute of loc, as int64 (an attribute of more
 * elements would overrun v). */
static bool read_attr_i64(hid_t loc, const char *where, const char *name, int64_t *v, child_err *e)
{
    if (H5Aexists(loc, name) <= 0)
        return fail(e, "no attribute '%s' on %s", name, where);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT), t = a >= 0 ? H5Aget_type(a) : -1,
          s = a >= 0 ? H5Aget_space(a) : -1;
    bool ok = t >= 0 && s >= 0 && H5Tget_class(t) == H5T_INTEGER && H5Sget_simple_extent_npoints(s) == 1 &&
              H5Aread(a, H5T_NATIVE_INT64, v) >= 0;
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return ok || fail(e, "attribute '%s' on %s is not one integer", name, where);
}

/* A string attribute of loc (fixed or variable length) into buf. */
static bool read_attr_str(hid_t loc, const char *where, const char *name, char *buf, size_t n, child_err *e)
{
    if (H5Aexists(loc, name) <= 0)
        return fail(e, "no attribute '%s' on %s", name, where);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT), t = a >= 0 ? H5Aget_type(a) : -1,
          s = a >= 0 ? H5Aget_space(a) : -1;
    bool ok = t >= 0 && s >= 0 && H5Tget_class(t) == H5T_STRING && H5Sget_simple_extent_npoints(s) == 1;
    if (ok && H5Tis_variable_str(t) > 0) {
        char *v = NULL;
        hid_t mt = H5Tcopy(H5T_C_S1);
        ok = mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &v) >= 0 && v;
        if (ok)
            snprintf(buf, n, "%s", v);
        if (v)
            H5free_memory(v);
        if (mt >= 0) H5Tclose(mt);
    } else if (ok) {
        size_t len = H5Tget_size(t);
        char *v = len > 0 && len < 4096 ? calloc(1, len + 1) : NULL;
        hid_t mt = H5Tcopy(t);
        ok = v && mt >= 0 && H5Aread(a, mt, v) >= 0;
        if (ok)
            snprintf(buf, n, "%s", v);
        free(v);
        if (mt >= 0) H5Tclose(mt);
    }
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return ok || fail(e, "attribute '%s' on %s is not a string", name, where);
}

/* A one-element float attribute of loc, as double. */
static bool read_attr_f64(hid_t loc, const char *where, const char *name, double *v, child_err *e)
{
    if (H5Aexists(loc, name) <= 0)
        return fail(e, "no attribute '%s' on %s", name, where);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT), t = a >= 0 ? H5Aget_type(a) : -1,
          s = a >= 0 ? H5Aget_space(a) : -1;
    bool ok = t >= 0 && s >= 0 && H5Tget_class(t) == H5T_FLOAT && H5Sget_simple_extent_npoints(s) == 1 &&
              H5Aread(a, H5T_NATIVE_DOUBLE, v) >= 0;
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return ok || fail(e, "attribute '%s' on %s is not one number", name, where);
}

/* A one-element integer dataset at path, as int64 (uint64 for seeds). */
static bool read_scalar(hid_t f, const char *path, hid_t mem_type, void *v, child_err *e)
{
    dump_contain_at("/%s", path);
    if (!link_exists(f, path))
        return fail(e, "missing dataset /%s", path);
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT), t = d >= 0 ? H5Dget_type(d) : -1,
          s = d >= 0 ? H5Dget_space(d) : -1;
    bool ok = t >= 0 && s >= 0 && H5Tget_class(t) == H5T_INTEGER && H5Sget_simple_extent_npoints(s) == 1 &&
              H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0;
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (d >= 0) H5Dclose(d);
    return ok || fail(e, "/%s is not one integer", path);
}

/* The float dataset at path, of like's shape, into dst. */
static bool read_f32(hid_t f, const char *path, const te_tensor *like, float *dst, child_err *e)
{
    dump_contain_at("/%s", path);
    char want[64], got[64];
    te_shape_str(like->ndim, like->shape, want, sizeof want);
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT), t = d >= 0 ? H5Dget_type(d) : -1,
          s = d >= 0 ? H5Dget_space(d) : -1;
    bool ok = false;
    if (t < 0 || s < 0 || H5Tget_class(t) != H5T_FLOAT) {
        fail(e, "/%s is not a float dataset (the model's is f32 %s)", path, want);
    } else {
        hsize_t dims[H5S_MAX_RANK];
        int nd = H5Sget_simple_extent_dims(s, dims, NULL);
        int64_t shape[TE_MAX_DIMS];
        bool same = nd == like->ndim;
        for (int k = 0; k < nd && k < TE_MAX_DIMS; k++)
            shape[k] = (int64_t)dims[k];
        for (int k = 0; same && k < nd; k++)
            same = shape[k] == like->shape[k];
        if (!same) {
            if (nd >= 0 && nd <= TE_MAX_DIMS)
                te_shape_str(nd, shape, got, sizeof got);
            else
                snprintf(got, sizeof got, "of rank %d", nd);
            fail(e, "/%s has shape %s; the model's is %s", path, got, want);
        } else if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0) {
            char reason[256];
            fail(e, "cannot read /%s: %s", path, h5_reason(reason));
        } else {
            ok = true;
        }
    }
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (d >= 0) H5Dclose(d);
    return ok;
}

/* One of the attributes the run must match, against the file's. */
static bool check_attr(hid_t f, const ckpt_attr *a, child_err *e)
{
    char text[256], got[300];
    int64_t v;
    if (a->text) {
        if (!read_attr_str(f, "/", a->name, text, sizeof text, e))
            return false;
        if (strcmp(text, a->text) == 0)
            return true;
        snprintf(got, sizeof got, "%s", text);
    } else {
        if (!read_attr_i64(f, "/", a->name, &v, e))
            return false;
        if (v == a->value)
            return true;
        snprintf(got, sizeof got, "%lld", (long long)v);
    }
    char want[256];
    if (a->text)
        snprintf(want, sizeof want, "%s", a->text);
    else
        snprintf(want, sizeof want, "%lld", (long long)a->value);
    return fail(e, "made with %s=%s; this run has %s %s (give the flags the checkpoint was made with)", a->name, got,
                a->flag, want);
}

/* Checks the format, the version, the program and the attributes; reads
 * the info into out. */
static bool parse_info(hid_t f, const load_arg *a, dump_blob *out, child_err *e)
{
    char format[64], program[64] = "gpt"; /* version 1 was gpt's alone */
    int64_t v;
    dump_contain_at("the attributes of /");
    if (!read_attr_str(f, "/", "format", format, sizeof format, e))
        return false;
    if (strcmp(format, FORMAT) != 0)
        return fail(e, "format '%s' is not a tdbg checkpoint's ('%s')", format, FORMAT);
    if (!read_attr_i64(f, "/", "version", &v, e))
        return false;
    if (v < OLDEST_VERSION || v > VERSION)
        return fail(e, "version %lld; this program reads versions %d to %d", (long long)v, OLDEST_VERSION,
                    VERSION);
    if (v >= 2 && !read_attr_str(f, "/", "program", program, sizeof program, e))
        return false;
    if (strcmp(program, a->m->program) != 0)
        return fail(e, "made by %s; this is %s (a checkpoint resumes the program that wrote it)", program,
                    a->m->program);
    for (int i = 0; i < a->m->n_attrs; i++)
        if (!check_attr(f, &a->m->attrs[i], e))
            return false;
    ckpt_info in = { .epoch = -1 };
    if (!read_scalar(f, "step", H5T_NATIVE_INT64, &in.step, e) ||
        !read_scalar(f, "rng/seed", H5T_NATIVE_UINT64, &in.seed, e) ||
        !read_scalar(f, "rng/step", H5T_NATIVE_INT64, &in.rng_step, e) ||
        !read_scalar(f, "data/position", H5T_NATIVE_INT64, &in.data_position, e))
        return false;
    if (link_exists(f, "data/epoch") && !read_scalar(f, "data/epoch", H5T_NATIVE_INT64, &in.epoch, e))
        return false;
    if (in.step < 0 || in.rng_step < 0 || in.data_position < 0 || in.seed == 0 || in.epoch < -1)
        return fail(e, "step %lld, rng step %lld, data position %lld, epoch %lld or seed %llu out of range",
                    (long long)in.step, (long long)in.rng_step, (long long)in.data_position, (long long)in.epoch,
                    (unsigned long long)in.seed);
    dump_blob_put(out, &in, sizeof in);
    return true;
}

/* The checkpoint's AMP level and dtype against this run's (the engine's,
 * set before the load: a file without them was made at O0), and its loss
 * scaler against this run's: the options must be the same, and the state
 * goes to out (a flag, then a scaler_saved). */
static bool parse_amp(hid_t f, dump_blob *out, child_err *e)
{
    const te_amp_level level = te_amp_level_get();
    const char *run_dt = te_dtype_name(level == TE_AMP_O0 ? TE_F32 : te_amp_dtype());
    char amp[16] = "O0", dt[16] = "f32";
    dump_contain_at("the attributes of /");
    if ((H5Aexists(f, "amp") > 0 && !read_attr_str(f, "/", "amp", amp, sizeof amp, e)) ||
        (H5Aexists(f, "amp_dtype") > 0 && !read_attr_str(f, "/", "amp_dtype", dt, sizeof dt, e)))
        return false;
    if (strcmp(amp, te_amp_level_name(level)) != 0 || strcmp(dt, run_dt) != 0) {
        const bool low = strcmp(amp, "O0") != 0;
        return fail(e, "made with --amp %s%s%s; this run has --amp %s%s%s (its parameters, master copies and "
                    "loss scale belong to that precision: give the flags the checkpoint was made with)",
                    amp, low ? " --amp-dtype " : "", low ? dt : "", te_amp_level_name(level),
                    level != TE_AMP_O0 ? " --amp-dtype " : "", level != TE_AMP_O0 ? run_dt : "");
    }

    te_scaler_state st;
    const bool run_has = te_scaler_state_get(&st);
    dump_contain_at("/scaler");
    const bool file_has = link_exists(f, "scaler");
    if (file_has != run_has)
        return fail(e, "made %s a loss scaler; this run has %s (give the --amp and --loss-scale flags the "
                    "checkpoint was made with)", file_has ? "with" : "without", run_has ? "one" : "none");
    dump_blob_int(out, file_has);
    if (!file_has)
        return true;
    hid_t g = H5Oopen(f, "scaler", H5P_DEFAULT);
    if (g < 0)
        return fail(e, "cannot open /scaler");
    int64_t fixed, interval, hyst;
    scaler_saved sv;
    bool ok = read_attr_i64(g, "/scaler", "fixed", &fixed, e) && read_attr_f64(g, "/scaler", "scale", &sv.scale, e) &&
              read_attr_i64(g, "/scaler", "growth_interval", &interval, e) &&
              read_attr_i64(g, "/scaler", "hysteresis", &hyst, e) &&
              read_attr_i64(g, "/scaler", "growth_tracker", &sv.growth_tracker, e) &&
              read_attr_i64(g, "/scaler", "hysteresis_left", &sv.hysteresis_left, e) &&
              read_attr_i64(g, "/scaler", "skipped", &sv.skipped, e);
    H5Oclose(g);
    if (!ok)
        return false;
    if ((fixed != 0) != st.opts.fixed)
        return fail(e, "made with a %s loss scale; this run's is %s", fixed ? "fixed" : "dynamic",
                    st.opts.fixed ? "fixed" : "dynamic");
    if (fixed && sv.scale != (double)st.scale)
        return fail(e, "made with --loss-scale %g; this run has --loss-scale %g", sv.scale, (double)st.scale);
    if (interval != st.opts.growth_interval)
        return fail(e, "made with --scale-window %lld; this run has --scale-window %d", (long long)interval,
                    st.opts.growth_interval);
    if (hyst != st.opts.hysteresis)
        return fail(e, "made with --scale-hysteresis %lld; this run has --scale-hysteresis %d", (long long)hyst,
                    st.opts.hysteresis);
    if (!(isfinite(sv.scale) && sv.scale > 0 && sv.scale <= FLT_MAX) || sv.growth_tracker < 0 ||
        sv.growth_tracker > interval || sv.skipped < 0 || sv.hysteresis_left > hyst || sv.hysteresis_left < 0)
        return fail(e, "/scaler's state is out of range (scale %g, growth_tracker %lld, hysteresis_left %lld, "
                    "skipped %lld)", sv.scale, (long long)sv.growth_tracker, (long long)sv.hysteresis_left,
                    (long long)sv.skipped);
    dump_blob_put(out, &sv, sizeof sv);
    return true;
}

/* Each of the model's buffers, /buffers/NAME. (Version 1 files have none:
 * they are gpt's, whose model has none.) */
static bool parse_buffers(hid_t f, const load_arg *a, dump_blob *out, child_err *e)
{
    char path[512];
    bool ok = true;
    for (int i = 0; ok && i < a->m->n_buffers; i++) {
        const te_tensor *b = a->m->buffers[i];
        snprintf(path, sizeof path, "buffers/%s", b->name);
        float *v = malloc((size_t)b->numel * sizeof *v);
        if (!v)
            return fail(e, "out of memory reading /%s", path);
        dump_contain_at("/%s", path);
        if (!link_exists(f, path))
            ok = fail(e, "missing dataset /%s", path);
        else if ((ok = read_f32(f, path, b, v, e)))
            dump_blob_put(out, v, (size_t)b->numel * sizeof *v);
        free(v);
    }
    return ok;
}

/* The AMP state (parse_amp), every parameter and the optimizer's steps and
 * each present state buffer, then the model's buffers. */
static bool parse_tensors(hid_t f, const load_arg *a, dump_blob *out, child_err *e)
{
    te_optim *opt = a->m->opt;
    char kind[32], path[512];
    int64_t steps;
    if (!parse_amp(f, out, e))
        return false;
    dump_contain_at("/optim");
    if (!link_exists(f, "optim"))
        return fail(e, "missing group /optim");
    hid_t og = H5Oopen(f, "optim", H5P_DEFAULT);
    if (og < 0)
        return fail(e, "cannot open /optim");
    bool ok = read_attr_str(og, "/optim", "kind", kind, sizeof kind, e) &&
              read_attr_i64(og, "/optim", "steps", &steps, e);
    if (ok && steps < 0)
        ok = fail(e, "attribute 'steps' on /optim is %lld, below 0", (long long)steps);
    H5Oclose(og);
    if (!ok)
        return false;
    if (strcmp(kind, a->m->optim_kind) != 0)
        return fail(e, "optimizer %s; this run has --optim %s", kind, a->m->optim_kind);
    dump_blob_int(out, steps);
    float *buf = NULL;
    for (int i = 0; ok && i < te_optim_param_count(opt); i++) {
        const te_tensor *p = te_optim_param(opt, i);
        float *more = realloc(buf, (size_t)p->numel * sizeof *buf);
        if (!more) {
            ok = fail(e, "out of memory reading %s", pname(p));
            break;
        }
        buf = more;
        snprintf(path, sizeof path, "params/%s", pname(p));
        if (!link_exists(f, path)) {
            ok = fail(e, "missing dataset /%s", path);
            break;
        }
        if (!(ok = read_f32(f, path, p, buf, e)))
            break;
        dump_blob_put(out, buf, (size_t)p->numel * sizeof *buf);
        for (int s = 0; ok && s < te_optim_slots(opt); s++) {
            snprintf(path, sizeof path, "optim/%s/%s", te_optim_slot_name(opt, s), pname(p));
            bool present = link_exists(f, path);
            dump_blob_int(out, present);
            if (present && (ok = read_f32(f, path, p, buf, e)))
                dump_blob_put(out, buf, (size_t)p->numel * sizeof *buf);
        }
    }
    free(buf);
    return ok && parse_buffers(f, a, out, e);
}

/* dump_contain's parse: the error string ("" when all is well), then the info
 * and, when asked, the tensors. */
static void parse(void *arg, dump_blob *out)
{
    const load_arg *a = arg;
    dump_blob body = { 0 };
    child_err e = { "" };
    char reason[256];
    H5E_auto2_t func; /* restored: with TDBG_DUMP_CONTAIN=off this runs in the program itself */
    void *data;
    H5Eget_auto2(H5E_DEFAULT, &func, &data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    dump_contain_at("the superblock");
    hid_t f = H5Fopen(a->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        fail(&e, "not an HDF5 file, or not readable (%s)", h5_reason(reason));
    else if (parse_info(f, a, &body, &e) && a->tensors)
        parse_tensors(f, a, &body, &e);
    if (f >= 0)
        H5Fclose(f);
    H5Eset_auto2(H5E_DEFAULT, func, data);
    dump_blob_str(out, e.msg);
    if (!e.msg[0])
        dump_blob_put(out, body.b, body.len);
    dump_blob_free(&body);
}

/* Runs parse for path in a child; on success *out holds the blob after the
 * error string (at cur). */
static bool contained(const load_arg *a, size_t max, dump_blob *out, dump_cursor *cur, char *why, size_t n)
{
    char err[1024];
    *out = (dump_blob){ 0 };
    if (!dump_contain(a->path, parse, (void *)a, max, out, err, sizeof err)) {
        snprintf(why, n, "checkpoint %s", err);
        return false;
    }
    *cur = (dump_cursor){ out->b, out->len, false };
    const char *msg = dump_cur_str(cur);
    if (cur->bad || msg[0]) {
        snprintf(why, n, "checkpoint %s: %s", a->path, cur->bad ? "no answer from its reader" : msg);
        dump_blob_free(out);
        return false;
    }
    return true;
}

bool ckpt_read_info(const char *path, const ckpt_model *m, ckpt_info *info, char *why, size_t n)
{
    const load_arg a = { .path = path, .m = m };
    dump_blob out;
    dump_cursor cur;
    if (!contained(&a, 1 << 16, &out, &cur, why, n))
        return false;
    bool ok = dump_cur_get(&cur, info, sizeof *info);
    dump_blob_free(&out);
    if (!ok)
        snprintf(why, n, "checkpoint %s: a short answer from its reader", path);
    return ok;
}

/* Steps the cursor c over bytes; false when fewer are left. */
static bool cur_skip(dump_cursor *c, size_t bytes)
{
    if (c->left < bytes)
        return false;
    c->p += bytes;
    c->left -= bytes;
    return true;
}

bool ckpt_load(const char *path, const ckpt_model *m, char *why, size_t n)
{
    const load_arg a = { .path = path, .m = m, .tensors = true };
    te_optim *opt = m->opt;
    size_t max = 4096 + sizeof(ckpt_info);
    const int slots = te_optim_slots(opt);
    for (int i = 0; i < te_optim_param_count(opt); i++)
        max += 8 * (size_t)slots + (size_t)(1 + slots) * (size_t)te_optim_param(opt, i)->numel * sizeof(float);
    for (int i = 0; i < m->n_buffers; i++)
        max += (size_t)m->buffers[i]->numel * sizeof(float);
    dump_blob out;
    dump_cursor cur;
    if (!contained(&a, max, &out, &cur, why, n))
        return false;
    /* the child checked every dataset: apply only a whole answer */
    ckpt_info skip;
    scaler_saved sv;
    bool ok = dump_cur_get(&cur, &skip, sizeof skip);
    const bool has_scaler = dump_cur_int(&cur) != 0;
    ok = ok && (!has_scaler || dump_cur_get(&cur, &sv, sizeof sv));
    const int64_t steps = dump_cur_int(&cur);
    dump_cursor check = cur;
    for (int i = 0; ok && i < te_optim_param_count(opt); i++) {
        const size_t bytes = (size_t)te_optim_param(opt, i)->numel * sizeof(float);
        ok = cur_skip(&check, bytes);
        for (int s = 0; ok && s < slots; s++)
            if (dump_cur_int(&check))
                ok = cur_skip(&check, bytes);
    }
    for (int i = 0; ok && i < m->n_buffers; i++)
        ok = cur_skip(&check, (size_t)m->buffers[i]->numel * sizeof(float));
    ok = ok && !check.bad && !cur.bad && check.left == 0;
    for (int i = 0; ok && i < te_optim_param_count(opt); i++) {
        te_tensor *p = te_optim_param(opt, i);
        const size_t bytes = (size_t)p->numel * sizeof(float);
        float *v = malloc(bytes);
        ok = v && dump_cur_get(&cur, v, bytes);
        if (ok)
            te_copy_from_f32(p, v);
        for (int s = 0; ok && s < slots; s++)
            if (dump_cur_int(&cur))
                ok = dump_cur_get(&cur, v, bytes) && te_optim_state_set(opt, i, s, v) == TE_OK;
        free(v);
    }
    for (int i = 0; ok && i < m->n_buffers; i++) {
        te_tensor *b = m->buffers[i];
        float *v = malloc((size_t)b->numel * sizeof *v);
        ok = v && dump_cur_get(&cur, v, (size_t)b->numel * sizeof *v);
        if (ok)
            te_copy_from_f32(b, v);
        free(v);
    }
    if (ok)
        te_optim_set_steps(opt, steps);
    if (ok && has_scaler) {
        te_scaler_state st;
        te_scaler_state_get(&st);
        st.scale = (float)sv.scale;
        st.growth_tracker = sv.growth_tracker;
        st.skipped = sv.skipped;
        st.hysteresis_left = (int)sv.hysteresis_left;
        st.found_inf = false;
        st.first_param[0] = '\0';
        ok = te_scaler_state_set(&st) == TE_OK;
    }
    dump_blob_free(&out);
    if (!ok)
        snprintf(why, n, "checkpoint %s: a short or malformed answer from its reader", path);
    return ok;
}
