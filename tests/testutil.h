/*
 * testutil.h — what every suite shares besides the fixtures: the engine
 * set-up around each test, assertions on error messages, half-precision
 * comparisons and dtype copies.
 */
#ifndef TDBG_TESTUTIL_H
#define TDBG_TESTUTIL_H

#include "h5file.h"
#include "te.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* $TDBG_TEST_BACKEND (e.g. "cuda"): the backend tu_setup puts every test
 * on, so that the op suites (linear elementwise reduce loss conv norm shape
 * attention_ops optim scaler graph fused_attention amp lowp_native gpt)
 * run their tensors there against the same golden values. Tests therefore
 * never dereference tensor data: te_tensor_read/_write, te_get/te_set. */
#define TU_BACKEND_ENV "TDBG_TEST_BACKEND"
/* $TDBG_REQUIRE_GPU=1: a missing CUDA device fails the test (with the
 * probe's reason) instead of skipping the GPU part. */
#define TU_REQUIRE_GPU_ENV "TDBG_REQUIRE_GPU"

/* The checked fixture of every TCase: te_init with seed 1 on 2 threads before
 * each test, then te_backend_use($TDBG_TEST_BACKEND) when that is set: a
 * backend without a device fails the test under TDBG_REQUIRE_GPU=1, and
 * otherwise prints "TDBG_TEST_BACKEND=cuda: skipped: no CUDA device
 * (REASON); running on the CPU". te_tape_reset and te_shutdown after it. */
void tu_setup(void);
void tu_teardown(void);

/* tu_assert_error(code, "str", ...): fails the test unless te_error_code() is
 * code and te_error() contains every string given (op name, "(OpType)",
 * tu_at(line), shapes); the failure names the wrong code or the first missing
 * string and quotes the whole message. tu_assert_error_has(...) checks the
 * strings only. Both take at least one string. */
#define tu_assert_error(code, ...) \
    tu_assert_error_list((code), (const char *const[]){ __VA_ARGS__, NULL })
#define tu_assert_error_has(...) \
    tu_assert_error_has_list((const char *const[]){ __VA_ARGS__, NULL })
void tu_assert_error_list(te_status code, const char *const *parts);
void tu_assert_error_has_list(const char *const *parts);

/* "test_x.c:LINE": the location an op called on `line` of the calling test
 * file must name in its error. The text lives in a compound literal of the
 * caller's block, so several stay valid side by side. */
#define tu_at(line) tu_format_at((char[96]){ 0 }, 96, __FILE__, (line))
const char *tu_format_at(char *buf, size_t n, const char *file, int line);

/* Fails unless the f16/bf16 tensor h has ref's shape and each element is
 * within one ulp of ref's element (the f32 result) rounded to h's dtype;
 * the failure names `what`, the index and both values with their bits. */
void tu_assert_half_close(const te_tensor *h, const te_tensor *ref, const char *what);

/* A persistent copy of t in dtype dt (values rounded to it). */
te_tensor *tu_as_dtype(const te_tensor *t, te_dtype dt);

/* Host copies of a tensor on any device (tests never dereference tensor
 * data; see TU_BACKEND_ENV): tu_f32 its values widened to f32, tu_bytes
 * its elements in its own dtype, both malloc'd (free them; the test fails
 * when the read does). tu_write fills t from numel host elements in t's
 * dtype; tu_copy gives dst src's values (through f32, rounded to dst's
 * dtype), shapes' element counts equal. */
float *tu_f32(const te_tensor *t);
void *tu_bytes(const te_tensor *t);
void tu_write(te_tensor *t, const void *src);
void tu_copy(te_tensor *dst, const te_tensor *src);
/* Whether a and b hold the same bytes (same dtype and element count). */
bool tu_same_bytes(const te_tensor *a, const te_tensor *b);

/* n values spread evenly over [lo, hi), the same for the same seed on every
 * machine (a linear congruential sequence, not te_rand). */
void tu_fill_uniform(float *x, int64_t n, uint32_t seed, float lo, float hi);

/* [N,C,H,W] elements of `size` bytes between NCHW and oneDNN's nChw16c
 * (graph mode's layout on conv chains, C % 16 == 0): element (n, c, s) of
 * the plain at ((n * C/16 + c/16) * H*W + s) * 16 + c % 16 of the blocked. */
void tu_to_blocked16(const void *plain, void *blocked, const int64_t *shape, size_t size);
void tu_from_blocked16(const void *blocked, void *plain, const int64_t *shape, size_t size);

/* A tensor's description for the dump writer, as the examples' ops would
 * give it: source line 40 + exec of examples/mlp.c; dtype and shape as
 * given (the dump_step_add family fills them from a tensor otherwise). */
dump_tensor_info tu_dump_info(const char *op, const char *type, dump_iokind io, int slot, int exec,
                              te_phase phase, const char *tensor, te_dtype dt, int ndim,
                              const int64_t *shape);

/* Runs the command fmt makes through /bin/sh, its standard output caught
 * into out (NUL-terminated; more than n - 1 bytes fails the test), or
 * left to the test's own when out is NULL; returns the status a shell reports for it: the exit
 * status, 128+N for a death by signal N. tsession.h runs whole sessions
 * (stdout and stderr together) on it. */
int tu_shell(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- scratch directories, and tools run in this process ------------------ */

/* Makes a fresh directory "/tmp/PREFIX-XXXXXX" into dir (n bytes) for a
 * suite's unchecked fixture (aborts when it cannot: there is no test to
 * fail yet); tu_scratch_remove deletes it and everything under it. */
void tu_scratch_make(char *dir, size_t n, const char *prefix);
void tu_scratch_remove(const char *dir);
/* A fresh sub-directory of dir for one test, in buf (returned). */
char *tu_scratch_sub(const char *dir, char *buf, size_t n);

/* One training step of a two-layer MLP, as the profiler's tests trace it:
 * h = relu(x @ w1) under the scope "mm" ("mm/matmul", "mm/relu"), logits
 * linear(h, w2) under "out" ("out/linear"), cross entropy against y, its
 * backward and opt's update, between te_step_begin and te_step_end. */
void tu_mlp2_step(te_tensor *x, te_tensor *y, te_tensor *w1, te_tensor *w2, te_optim *opt);

/* What one in-process run of a tool printed and returned. */
typedef struct tu_result {
    int rc;
    char *out, *err;
} tu_result;
/* Runs main_fn(argc, argv, out, err), argv being name then the
 * NULL-terminated args, with both streams captured. */
tu_result tu_run_tool(int (*main_fn)(int, char **, FILE *, FILE *), const char *name,
                      const char *const *args);
void tu_result_free(tu_result *r);

/* Whether a CUDA device runs this build's kernels (te_cuda_probe), asked
 * inside the (forked) test: CUDA does not survive a fork, so never in the
 * runner's parent. Without one it fails the test with the probe's reason
 * under TDBG_REQUIRE_GPU=1; otherwise it prints "SUITE: skipped: no CUDA
 * device (REASON)", checks that REASON is one tu_cuda_reason knows, and
 * returns false: the test returns at once.
 *
 * The rule for GPU tests: skip through this, never tdbg_skip. CI runs with
 * TDBG_REQUIRE_ALL=1 (every tdbg_skip fails the run) and builds
 * --with-cuda on a machine without a GPU, so a GPU test that used
 * tdbg_skip would fail CI; the printed lines are counted there instead. */
bool tu_cuda_device(const char *suite);

/* The reason a message of te_backend_use("cuda") gives, among those this
 * build can give on any machine ("built without CUDA" without
 * --with-cuda; no driver, no device, out of memory, no kernel image with
 * it), or NULL when it names none. */
const char *tu_cuda_reason(const char *msg);

/* The command prefix that runs a program on `ranks` ranks of Open MPI
 * (allowed as root, oversubscribed, shared memory without ptrace, ended
 * after 120 s, no leak checks under ASan), into buf; false after tdbg_skip(test, ...) when this build
 * has no MPI (./configure found no libopenmpi-dev) or mpirun is missing. */
bool tu_mpirun(const char *test, int ranks, char *buf, size_t n);

/* ---- skips ------------------------------------------------------------------
 * Check has no "skipped": a test that cannot run (a tool is missing) calls
 * tdbg_skip and returns, and the runner counts it. Check forks each test, so
 * the record goes to the file named by $TDBG_SKIP_LOG (run_tests sets it), one
 * "TEST<TAB>REASON" line appended at a time. */
#define TDBG_SKIP_LOG_ENV "TDBG_SKIP_LOG"

/* Records that `test` (its suite or case, e.g. "tui") was skipped because
 * of `reason` ("tmux not found"); says so on stderr too. */
void tdbg_skip(const char *test, const char *reason);

/* The "Skipped: N of those checks (REASON; ...)" line for the records in
 * the file at path (a missing file holds none), into buf; returns N. Equal
 * records are counted once with "xK". */
int tu_skip_summary(const char *path, char *buf, size_t n);

#endif
