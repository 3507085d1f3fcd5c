/* testutil.c — helpers shared by the suites (see testutil.h). */
#include "testutil.h"

#ifdef TE_HAVE_CUDA
#include "cuda/cuda_probe.h"
#endif

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Whether $name is "1". */
static bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

void tu_setup(void)
{
    te_init(&(te_config){ .seed = 1, .threads = 2 });
    const char *backend = getenv(TU_BACKEND_ENV);
    if (!backend || !backend[0] || te_backend_use(backend) == TE_OK)
        return;
    /* "te_backend_use: cuda: REASON": a backend that is unknown is a
     * mistake of the caller and fails; one without a device fails only
     * where the GPU is required, and otherwise the test runs on the CPU. */
    ck_assert_msg(te_error_code() == TE_ERR_DEVICE && !env_on(TU_REQUIRE_GPU_ENV), "%s=%s: %s",
                  TU_BACKEND_ENV, backend, te_error());
    const char *why = strstr(te_error(), ": cuda: ");
    why = why ? why + strlen(": cuda: ") : te_error();
    ck_assert_msg(tu_cuda_reason(why) != NULL, "%s=%s: no reason this build can give in: %s", TU_BACKEND_ENV,
                  backend, te_error());
    printf("%s=%s: skipped: no CUDA device (%s); running on the CPU\n", TU_BACKEND_ENV, backend, why);
}

bool tu_cuda_device(const char *suite)
{
    char why[512];
#ifdef TE_HAVE_CUDA
    if (te_cuda_probe(why, sizeof why))
        return true;
#else
    snprintf(why, sizeof why, "built without CUDA (./configure --with-cuda)");
#endif
    ck_assert_msg(!env_on(TU_REQUIRE_GPU_ENV), "%s: %s=1 and no CUDA device: %s", suite, TU_REQUIRE_GPU_ENV, why);
    printf("%s: skipped: no CUDA device (%s)\n", suite, why);
    ck_assert_msg(tu_cuda_reason(why) != NULL, "%s: no reason this build can give in: %s", suite, why);
    return false;
}

bool tu_mpirun(const char *test, int ranks, char *buf, size_t n)
{
#ifndef TE_HAVE_MPI
    (void)ranks, (void)buf, (void)n;
    tdbg_skip(test, "built without MPI (install libopenmpi-dev, then ./configure)");
    return false;
#else
    if (system("command -v mpirun >/dev/null 2>&1") != 0) {
        tdbg_skip(test, "mpirun not found (Debian: openmpi-bin)");
        return false;
    }
    /* Leak checks off in the ranks (tests/lsan.supp says why); ASan's other checks stay. */
    const char *asan = getenv("ASAN_OPTIONS");
    snprintf(buf, n, "ASAN_OPTIONS='%s%sdetect_leaks=0' OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 120 mpirun --oversubscribe -np %d",
             asan ? asan : "", asan && *asan ? ":" : "", ranks);
    return true;
#endif
}

void tu_teardown(void)
{
    te_tape_reset();
    te_shutdown();
}

void tu_assert_error_list(te_status code, const char *const *parts)
{
    ck_assert_msg(te_error_code() == code, "code %d (%s), expected %d (%s); message: %s",
                  te_error_code(), te_status_str(te_error_code()), code, te_status_str(code),
                  te_error());
    tu_assert_error_has_list(parts);
}

void tu_assert_error_has_list(const char *const *parts)
{
    const char *e = te_error();
    for (int i = 0; parts[i]; i++)
        ck_assert_msg(strstr(e, parts[i]) != NULL, "error \"%s\" lacks \"%s\"", e, parts[i]);
}

const char *tu_format_at(char *buf, size_t n, const char *file, int line)
{
    const char *base = strrchr(file, '/');
    snprintf(buf, n, "%s:%d", base ? base + 1 : file, line);
    return buf;
}

/* f16 and bf16 bits are sign and magnitude: read as a signed integer
 * (negative for a set sign bit) neighbouring values differ by exactly 1, also
 * across zero, where +0 and -0 meet. */
static int half_order(uint16_t h) { return h & 0x8000 ? -(int)(h & 0x7fff) : (int)h; }

/* How many representable steps (ulps) apart two f16, or two bf16, values are. */
static int half_ulps(uint16_t a, uint16_t b) { return abs(half_order(a) - half_order(b)); }

void tu_assert_half_close(const te_tensor *h, const te_tensor *ref, const char *what)
{
    ck_assert_msg(h && ref, "%s: no tensor (error: %s)", what, te_error());
    ck_assert_msg(te_same_shape(h, ref), "%s: shapes differ", what);
    ck_assert_msg(h->dtype == TE_F16 || h->dtype == TE_BF16, "%s: %s, not f16 or bf16", what,
                  te_dtype_name(h->dtype));
    uint16_t *bits = malloc((size_t)h->numel * sizeof *bits);
    ck_assert(bits != NULL || h->numel == 0);
    ck_assert_int_eq(te_tensor_read(h, 0, h->numel, bits), TE_OK);
    for (int64_t i = 0; i < h->numel; i++) {
        float r = te_get(ref, i);
        uint16_t want = h->dtype == TE_F16 ? te_f32_to_f16(r) : te_f32_to_bf16(r);
        ck_assert_msg(half_ulps(bits[i], want) <= 1,
                      "%s[%lld]: %g (0x%04x), expected %g (0x%04x)", what, (long long)i,
                      te_get(h, i), bits[i], r, want);
    }
    free(bits);
}

te_tensor *tu_as_dtype(const te_tensor *t, te_dtype dt)
{
    te_tensor *r = te_tensor_persistent(dt, t->ndim, t->shape);
    tu_copy(r, t); /* te_copy_from_f32 rounds as te_set does */
    return r;
}

float *tu_f32(const te_tensor *t)
{
    float *v = malloc((size_t)t->numel * sizeof *v + sizeof *v);
    ck_assert(v != NULL);
    ck_assert_msg(te_tensor_read_f32(t, 0, t->numel, v) == TE_OK, "%s", te_error());
    return v;
}

void *tu_bytes(const te_tensor *t)
{
    void *v = malloc(t->nbytes + 4);
    ck_assert(v != NULL);
    ck_assert_msg(te_tensor_read(t, 0, t->numel, v) == TE_OK, "%s", te_error());
    return v;
}

void tu_write(te_tensor *t, const void *src)
{
    ck_assert_msg(te_tensor_write(t, 0, t->numel, src) == TE_OK, "%s", te_error());
}

void tu_copy(te_tensor *dst, const te_tensor *src)
{
    ck_assert_msg(dst->numel == src->numel, "tu_copy: %lld elements into %lld", (long long)src->numel,
                  (long long)dst->numel);
    float *v = tu_f32(src);
    te_copy_from_f32(dst, v);
    free(v);
}

bool tu_same_bytes(const te_tensor *a, const te_tensor *b)
{
    if (a->dtype != b->dtype || a->numel != b->numel)
        return false;
    void *x = tu_bytes(a), *y = tu_bytes(b);
    bool same = memcmp(x, y, a->nbytes) == 0;
    free(x);
    free(y);
    return same;
}

/* ---- scratch directories, and tools run in this process ------------------ */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void tu_scratch_make(char *dir, size_t n, const char *prefix)
{
    snprintf(dir, n, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(dir))
        abort();
}

void tu_scratch_remove(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

void tu_mlp2_step(te_tensor *x, te_tensor *y, te_tensor *w1, te_tensor *w2, te_optim *opt)
{
    te_step_begin();
    te_scope_push("mm");
    te_tensor *h = te_relu(te_matmul(x, w1));
    te_scope_pop();
    te_scope_push("out");
    te_tensor *z = te_linear(h, w2, NULL);
    te_scope_pop();
    te_tensor *loss = te_cross_entropy(z, y);
    ck_assert_msg(loss != NULL, "%s", te_error());
    ck_assert_int_eq(te_backward(loss), TE_OK);
    ck_assert_int_eq(te_optim_step(opt), TE_OK);
    te_step_end();
}

char *tu_scratch_sub(const char *dir, char *buf, size_t n)
{
    snprintf(buf, n, "%s/t-XXXXXX", dir);
    ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp: %s", strerror(errno));
    return buf;
}

tu_result tu_run_tool(int (*main_fn)(int, char **, FILE *, FILE *), const char *name,
                      const char *const *args)
{
    char *argv[32] = { (char *)name };
    int argc = 1;
    while (args[argc - 1] && argc < 31) {
        argv[argc] = (char *)args[argc - 1];
        argc++;
    }
    tu_result r;
    size_t no, ne;
    FILE *o = open_memstream(&r.out, &no), *e = open_memstream(&r.err, &ne);
    ck_assert(o && e);
    r.rc = main_fn(argc, argv, o, e);
    fclose(o);
    fclose(e);
    return r;
}

void tu_result_free(tu_result *r)
{
    free(r->out);
    free(r->err);
}

void tu_fill_uniform(float *x, int64_t n, uint32_t seed, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = lo + (float)(seed >> 8) / (float)(1 << 24) * (hi - lo);
    }
}

static void blocked16(const char *from, char *to, const int64_t *shape, size_t size, bool to_blocked)
{
    const int64_t N = shape[0], C = shape[1], S = shape[2] * shape[3];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++) {
                const int64_t p = (n * C + c) * S + s, b = ((n * (C / 16) + c / 16) * S + s) * 16 + c % 16;
                memcpy(to + (size_t)(to_blocked ? b : p) * size, from + (size_t)(to_blocked ? p : b) * size, size);
            }
}

void tu_to_blocked16(const void *plain, void *blocked, const int64_t *shape, size_t size)
{
    blocked16(plain, blocked, shape, size, true);
}

void tu_from_blocked16(const void *blocked, void *plain, const int64_t *shape, size_t size)
{
    blocked16(blocked, plain, shape, size, false);
}

dump_tensor_info tu_dump_info(const char *op, const char *type, dump_iokind io, int slot, int exec,
                              te_phase phase, const char *tensor, te_dtype dt, int ndim,
                              const int64_t *shape)
{
    dump_tensor_info ti;
    memset(&ti, 0, sizeof ti);
    snprintf(ti.op, sizeof ti.op, "%s", op);
    snprintf(ti.op_type, sizeof ti.op_type, "%s", type);
    snprintf(ti.tensor, sizeof ti.tensor, "%s", tensor);
    snprintf(ti.file, sizeof ti.file, "examples/mlp.c");
    ti.io = io;
    ti.slot = slot;
    ti.exec_index = exec;
    ti.phase = phase;
    ti.line = 40 + exec;
    ti.dtype = dt;
    ti.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        ti.shape[i] = shape[i];
    return ti;
}

int tu_shell(char *out, size_t n, const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    ck_assert_msg(len >= 0 && (size_t)len < sizeof cmd, "a command of %d bytes: %.200s...", len, cmd);
    int st;
    if (!out) {
        st = system(cmd);
    } else {
        FILE *p = popen(cmd, "r");
        ck_assert_msg(p != NULL, "popen: %s", cmd);
        size_t got = fread(out, 1, n - 1, p), more = 0;
        out[got] = '\0';
        /* Read to the end: a test must not pass or fail on output it never saw. */
        char rest[4096];
        for (size_t r; (r = fread(rest, 1, sizeof rest, p)) > 0;)
            more += r;
        st = pclose(p);
        ck_assert_msg(more == 0, "the command printed %zu bytes, more than the %zu a test keeps: %.300s", got + more,
                      n - 1, cmd);
    }
    /* what $? would say: 128+N for a death by signal N */
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

/* ---- skips ------------------------------------------------------------------ */

void tdbg_skip(const char *test, const char *reason)
{
    fprintf(stderr, "%s: skipped: %s\n", test, reason);
    const char *path = getenv(TDBG_SKIP_LOG_ENV);
    ck_assert_msg(path && path[0], "%s: skipped (%s), and no $%s to record it in", test, reason,
                  TDBG_SKIP_LOG_ENV);
    char line[512];
    int len = snprintf(line, sizeof line, "%s\t%s\n", test, reason);
    ck_assert(len > 0 && (size_t)len < sizeof line);
    /* One write with O_APPEND: records of tests run at once never interleave. */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
    ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
    ck_assert_msg(write(fd, line, (size_t)len) == len, "%s: %s", path, strerror(errno));
    close(fd);
}

int tu_skip_summary(const char *path, char *buf, size_t n)
{
    enum { MAX_KINDS = 32 };
    char kinds[MAX_KINDS][1024];
    int count[MAX_KINDS], n_kinds = 0, total = 0;
    FILE *f = fopen(path, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        *tab = '\0';
        char kind[1024];
        snprintf(kind, sizeof kind, "%s: %s", line, tab + 1);
        total++;
        int k = 0;
        while (k < n_kinds && strcmp(kinds[k], kind) != 0)
            k++;
        if (k == n_kinds && n_kinds < MAX_KINDS) {
            snprintf(kinds[n_kinds], sizeof kinds[0], "%s", kind);
            count[n_kinds++] = 0;
        }
        if (k < n_kinds)
            count[k]++;
    }
    if (f)
        fclose(f);
    size_t at = (size_t)snprintf(buf, n, "Skipped: %d of those checks", total);
    for (int k = 0; k < n_kinds && at < n; k++) {
        at += (size_t)snprintf(buf + at, n - at, "%s%s", k ? "; " : " (", kinds[k]);
        if (count[k] > 1 && at < n)
            at += (size_t)snprintf(buf + at, n - at, " x%d", count[k]);
    }
    if (n_kinds && at < n)
        snprintf(buf + at, n - at, ")");
    return total;
}

const char *tu_cuda_reason(const char *msg)
{
    static const char *const reasons[] = {
#ifdef TE_HAVE_CUDA
        "no CUDA driver, or one older than this CUDA runtime (cudaErrorInsufficientDriver: ",
        "no device (", "the CUDA driver cannot be used (cudaError", "device 0 cannot be opened (cudaError",
        "out of memory on ", "cannot run this build's kernels",
#else
        "built without CUDA (./configure --with-cuda)",
#endif
    };
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (strstr(msg, reasons[i]))
            return reasons[i];
    return NULL;
}
