/* test_residency.c — where tensor data lives and who may touch it: slices,
 * te_tensor_to, the backends by device, dispatch on the inputs' device,
 * per-device memory, and no host dereference outside the backends. A
 * second device is faked with host memory (a test backend for TE_DEV_CUDA
 * that counts its calls); the real CUDA device is checked where there is
 * one. */
#include "suites.h"

#include "te_internal.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the fake device: host memory behind a counted table ---------------- */

static struct {
    int allocs, frees, to_host, from_host, copies, zeros;
} fake;

static void *fake_alloc(size_t bytes)
{
    fake.allocs++;
    return malloc(bytes);
}
static void fake_free(void *p)
{
    fake.frees++;
    free(p);
}
static void fake_to_host(void *dst, const void *src, size_t n)
{
    fake.to_host++;
    memcpy(dst, src, n);
}
static void fake_from_host(void *dst, const void *src, size_t n)
{
    fake.from_host++;
    memcpy(dst, src, n);
}
static void fake_copy(void *dst, const void *src, size_t n)
{
    fake.copies++;
    memcpy(dst, src, n);
}
static void fake_zero(void *p, size_t n)
{
    fake.zeros++;
    memset(p, 0, n);
}
static void fake_sync(void) {}

/* Add of two same-shape f32 tensors: the one kernel the fake device has. */
static te_status fake_add(te_node *n)
{
    const float *a = te_f32(n->in[0]), *b = te_f32(n->in[1]);
    float *y = te_f32(n->out[0]);
    if (!te_same_shape(n->in[0], n->in[1]))
        return te_kernel_fail(n, TE_ERR_SHAPE, "the fake add takes equal shapes");
    for (int64_t i = 0; i < n->out[0]->numel; i++)
        y[i] = a[i] + b[i];
    return TE_OK;
}

static const te_backend fake_backend = {
    .name = "cuda-test",
    .device = TE_DEV_CUDA,
    .alloc = fake_alloc,
    .free = fake_free,
    .to_host = fake_to_host,
    .from_host = fake_from_host,
    .copy = fake_copy,
    .zero = fake_zero,
    .sync = fake_sync,
    .widen = te_widen_host,
    .forward = { [TE_OP_ADD] = fake_add },
};

static void fake_setup(void)
{
    tu_setup();
    memset(&fake, 0, sizeof fake);
    te_backend_set_test(TE_DEV_CUDA, &fake_backend);
}

/* Everything the fake device held goes back through it before it goes. */
static void fake_teardown(void)
{
    te_shutdown();
    te_backend_set_test(TE_DEV_CUDA, NULL);
    tu_teardown();
}

/* ---- slices, names, copies on the CPU ------------------------------------- */

START_TEST(test_slices)
{
    te_tensor *x = te_tensor_from(TE_F32, te_shape(2, 3), (const float[]){ 1, 2, 3, 4, 5, 6 });
    snprintf(x->name, sizeof x->name, "x");
    float f[4] = { 0 };
    ck_assert_int_eq(te_tensor_read(x, 2, 3, f), TE_OK);
    ck_assert_float_eq(f[0], 3);
    ck_assert_float_eq(f[2], 5);
    ck_assert_int_eq(te_tensor_write(x, 4, 2, (const float[]){ -1, -2 }), TE_OK);
    ck_assert_float_eq(te_get(x, 4), -1);
    ck_assert_float_eq(te_get(x, 5), -2);
    ck_assert_int_eq(te_tensor_read(x, 6, 0, f), TE_OK); /* empty at the end */

    ck_assert_int_eq(te_tensor_read(x, 3, 4, f), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_tensor_read: elements [3, 7) are outside x (6 elements)");
    ck_assert_int_eq(te_tensor_read_f32(x, -1, 1, f), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_tensor_read_f32: elements [-1, 0) are outside x");
    ck_assert_int_eq(te_tensor_write(x, 0, 7, f), TE_ERR_ARG);
    tu_assert_error(TE_ERR_ARG, "te_tensor_write: elements [0, 7) are outside x");

    /* read_f32 widens exactly: halves and ints */
    te_tensor *h = te_tensor_new(TE_F16, te_shape(3));
    te_copy_from_f32(h, (const float[]){ 0.1f, 65504.0f, -2.5f });
    ck_assert_int_eq(te_tensor_read_f32(h, 1, 2, f), TE_OK);
    ck_assert_float_eq(f[0], 65504.0f);
    ck_assert_float_eq(f[1], -2.5f);
    ck_assert_int_eq(te_tensor_read_f32(h, 0, 1, f), TE_OK);
    ck_assert_float_eq(f[0], te_f16_to_f32(te_f32_to_f16(0.1f)));
    uint16_t raw;
    ck_assert_int_eq(te_tensor_read(h, 0, 1, &raw), TE_OK);
    ck_assert_uint_eq(raw, te_f32_to_f16(0.1f));
    te_tensor *b = te_tensor_new(TE_BF16, te_shape(2));
    te_copy_from_f32(b, (const float[]){ 1.0f / 3, 7 });
    ck_assert_int_eq(te_tensor_read_f32(b, 0, 2, f), TE_OK);
    ck_assert_float_eq(f[0], te_bf16_to_f32(te_f32_to_bf16(1.0f / 3)));
    ck_assert_float_eq(f[1], 7);
    te_tensor *i = te_tensor_from(TE_I32, te_shape(3), (const int32_t[]){ -3, 0, 16777217 });
    ck_assert_int_eq(te_tensor_read_f32(i, 0, 3, f), TE_OK);
    ck_assert_float_eq(f[0], -3);
    ck_assert_float_eq(f[2], 16777216.0f); /* converted as (float) does */
}
END_TEST

START_TEST(test_device_names)
{
    ck_assert_str_eq(te_device_name(TE_DEV_CPU), "cpu");
    ck_assert_str_eq(te_device_name(TE_DEV_CUDA), "cuda");
    ck_assert_str_eq(te_device_name((te_device)7), "?");
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(4));
    ck_assert_int_eq(x->device, TE_DEV_CPU);
    ck_assert_ptr_eq(te_backend_for(x), &te_backend_cpu);
    ck_assert_ptr_eq(te_backend_of(TE_DEV_CPU), &te_backend_cpu);
    ck_assert_ptr_null(te_backend_of((te_device)9));
}
END_TEST

START_TEST(test_to_cpu_copies)
{
    te_tensor *x = te_tensor_from(TE_BF16, te_shape(2, 2), (const uint16_t[]){ 0x3f80, 0x4000, 0xc040, 0x7fc0 });
    snprintf(x->name, sizeof x->name, "param:w");
    te_tensor *y = te_tensor_to(x, TE_DEV_CPU);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_ne(y, x);
    ck_assert_ptr_ne(te_data(y), te_data(x));
    ck_assert_int_eq(y->device, TE_DEV_CPU);
    ck_assert_int_eq(y->dtype, TE_BF16);
    ck_assert(te_same_shape(x, y));
    ck_assert_str_eq(y->name, "param:w");
    ck_assert(!(y->flags & TE_TENSOR_PERSISTENT)); /* the tape's */
    uint16_t v[4];
    ck_assert_int_eq(te_tensor_read(y, 0, 4, v), TE_OK);
    ck_assert_uint_eq(v[0], 0x3f80);
    ck_assert_uint_eq(v[3], 0x7fc0);
    te_set(y, 0, 5.0f); /* a copy: the original keeps its value */
    ck_assert_float_eq(te_get(x, 0), 1.0f);
    ck_assert_float_eq(te_get(y, 0), 5.0f);

    ck_assert_ptr_null(te_tensor_to(NULL, TE_DEV_CPU));
    tu_assert_error(TE_ERR_INPUT, "te_tensor_to: the tensor is NULL");
    ck_assert_ptr_null(te_tensor_to(x, (te_device)5));
    tu_assert_error(TE_ERR_ARG, "te_tensor_to: unknown device 5");
}
END_TEST

/* No CUDA backend here (or no device): te_tensor_to and te_backend_use
 * say why, with the probe's reason, and nothing changes. */
START_TEST(test_no_cuda_backend)
{
    if (te_backend_of(TE_DEV_CUDA)) { /* printed, not tdbg_skip: a GPU machine's run skips nothing */
        printf("residency: skipped: a CUDA device is usable: its absence cannot be checked\n");
        return;
    }
    te_tensor *x = te_tensor_from(TE_F32, te_shape(2), (const float[]){ 1, 2 });
    ck_assert_ptr_null(te_tensor_to(x, TE_DEV_CUDA));
    tu_assert_error(TE_ERR_DEVICE, "te_tensor_to: cuda: ");
    ck_assert_ptr_nonnull(tu_cuda_reason(te_error()));
    ck_assert_int_eq(te_backend_use("cuda"), TE_ERR_DEVICE);
    ck_assert_ptr_nonnull(tu_cuda_reason(te_error()));
    ck_assert_ptr_eq(te_backend_current(), &te_backend_cpu);
    te_mem_stats s = te_mem_stats_of(TE_DEV_CUDA);
    ck_assert_uint_eq(s.peak, 0);
    ck_assert_uint_eq(s.allocs, 0);
}
END_TEST

/* ---- a second device ----------------------------------------------------- */

START_TEST(test_backend_use_switches_new_tensors)
{
    te_tensor *c = te_tensor_from(TE_F32, te_shape(3), (const float[]){ 1, 2, 3 });
    const te_mem_stats cpu0 = te_mem_stats_get();
    ck_assert_int_eq(te_backend_use("cuda"), TE_OK);
    ck_assert_ptr_eq(te_backend_current(), &fake_backend);
    te_tensor *d = te_tensor_from(TE_F32, te_shape(2, 50), (const float[100]){ [7] = 7.5f });
    ck_assert_int_eq(d->device, TE_DEV_CUDA);
    ck_assert_int_eq(c->device, TE_DEV_CPU); /* made before: stays */
    ck_assert_int_eq(fake.allocs, 1);
    ck_assert_int_eq(fake.from_host, 1); /* the upload, in one go */

    /* per-device memory: the fake device's block, none more on the CPU */
    te_mem_stats g = te_mem_stats_of(TE_DEV_CUDA), cpu = te_mem_stats_get();
    ck_assert_uint_eq(g.current, 512); /* 400 bytes in a 256-byte class */
    ck_assert_uint_eq(g.peak, 512);
    ck_assert_uint_eq(g.requested, 400);
    ck_assert_uint_eq(g.allocs, 1);
    ck_assert_uint_eq(cpu.current, cpu0.current);
    ck_assert_uint_eq(cpu.allocs, cpu0.allocs);

    /* host access goes through the device's entries */
    ck_assert_float_eq(te_get(d, 7), 7.5f);
    ck_assert_int_eq(fake.to_host, 1);
    te_set(d, 8, -1.0f);
    ck_assert_int_eq(fake.from_host, 2);
    float row[4];
    ck_assert_int_eq(te_tensor_read_f32(d, 6, 4, row), TE_OK);
    ck_assert_float_eq(row[1], 7.5f);
    ck_assert_float_eq(row[2], -1.0f);
    te_tensor *z = te_tensor_zeros(TE_F16, te_shape(5));
    ck_assert_int_eq(fake.zeros, 1);
    te_fill(z, 2.0f);
    ck_assert_float_eq(te_get(z, 4), 2.0f);
    float zf[5];
    te_copy_to_f32(z, zf); /* halves staged on the host and widened there */
    ck_assert_float_eq(zf[0], 2.0f);

    /* back and forth */
    te_tensor *h = te_tensor_to(d, TE_DEV_CPU);
    ck_assert_int_eq(h->device, TE_DEV_CPU);
    ck_assert_float_eq(te_get(h, 7), 7.5f);
    te_tensor *u = te_tensor_to(c, TE_DEV_CUDA);
    ck_assert_int_eq(u->device, TE_DEV_CUDA);
    ck_assert_float_eq(te_get(u, 2), 3.0f);
    const int copies = fake.copies;
    te_tensor *u2 = te_tensor_to(u, TE_DEV_CUDA); /* on the device itself */
    ck_assert_int_eq(fake.copies, copies + 1);
    ck_assert_float_eq(te_get(u2, 1), 2.0f);

    ck_assert_int_eq(te_backend_use("cpu"), TE_OK);
    ck_assert_int_eq(te_tensor_new(TE_F32, te_shape(1))->device, TE_DEV_CPU);

    /* the tape gives the device's memory back to its free list, and
     * releasing the cache gives it back to the device */
    te_tape_reset();
    ck_assert_uint_eq(te_mem_stats_of(TE_DEV_CUDA).current, 0);
    ck_assert_uint_eq(te_mem_stats_of(TE_DEV_CUDA).peak, 512 + 3 * 256); /* d, then z, u and u2 */
    ck_assert_int_eq(fake.frees, 0);
    te_mem_release_cached();
    ck_assert_int_eq(fake.frees, fake.allocs);
    te_mem_reset_peak();
    ck_assert_uint_eq(te_mem_stats_of(TE_DEV_CUDA).peak, 0);
}
END_TEST

START_TEST(test_mixed_devices_fail)
{
    te_tensor *a = te_tensor_from(TE_F32, te_shape(2), (const float[]){ 1, 2 });
    snprintf(a->name, sizeof a->name, "param:bias");
    te_tensor *b = te_tensor_to(a, TE_DEV_CUDA);
    snprintf(b->name, sizeof b->name, "batch:x");
    const int line = __LINE__ + 1;
    ck_assert_ptr_null(te_add(b, a));
    tu_assert_error(TE_ERR_DEVICE, "add (Add) at ", tu_at(line),
                    "expected all inputs on one device, but a (batch:x) is on cuda and b (param:bias) on cpu",
                    "te_tensor_to");
    /* the same tensors on one device run there, on its kernel */
    te_tensor *c = te_tensor_to(a, TE_DEV_CUDA);
    te_tensor *y = te_add(b, c);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->device, TE_DEV_CUDA);
    ck_assert_float_eq(te_get(y, 1), 4.0f);
    ck_assert_str_eq(y->name, "add:out0"); /* the failed op gave its name back */
}
END_TEST

START_TEST(test_missing_kernel_fails)
{
    ck_assert_int_eq(te_backend_use("cuda"), TE_OK);
    te_tensor *x = te_tensor_zeros(TE_F32, te_shape(1, 1, 4, 4));
    te_tensor *w = te_tensor_zeros(TE_F32, te_shape(2, 1, 3, 3));
    const int line = __LINE__ + 1;
    ck_assert_ptr_null(te_conv2d(x, w, NULL, 1, 1));
    tu_assert_error(TE_ERR_DEVICE, "conv (Conv2D) at ", tu_at(line), ": Conv2D has no cuda-test kernel");
    /* backward: a kernel the forward has, the backward not */
    te_tensor *p = te_tensor_zeros(TE_F32, te_shape(3));
    p->requires_grad = true;
    te_tensor *y = te_add(p, p);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(te_backward_with(y, te_tensor_zeros(TE_F32, te_shape(3))), TE_ERR_DEVICE);
    tu_assert_error(TE_ERR_DEVICE, "AddGrad has no cuda-test kernel");
    /* f16 tensors need the device's round: it has none */
    te_tensor *h = te_tensor_zeros(TE_F16, te_shape(3));
    ck_assert_ptr_null(te_add(h, h));
    tu_assert_error(TE_ERR_DEVICE, "the cuda-test backend's round, which it does not have");
    te_round_f32(h, (const float[]){ 1, 2, 3 }, NULL);
    tu_assert_error(TE_ERR_DEVICE, "te_round_f32: ", "the cuda-test backend has no round");
    /* statistics too, and nothing is pretended */
    te_stats s;
    te_stats_compute(p, &s);
    tu_assert_error(TE_ERR_DEVICE, "te_stats_compute: ", "the cuda-test backend has no stats");
    ck_assert_int_eq(s.n, 0);
}
END_TEST

/* ---- no host dereference outside the backends ------------------------------ */

START_TEST(test_no_host_deref)
{
    char out[8192];
    int rc = tu_shell(out, sizeof out, "sh '%s/tests/no_host_deref.sh' '%s' 2>&1", TDBG_SRCDIR, TDBG_SRCDIR);
    ck_assert_msg(rc == 0 && out[0] == '\0', "tensor data dereferenced outside the backends:\n%s", out);

    /* and the check finds one: a scratch tree with a dereference, a
     * stored pointer and pointer tests (neither is one) */
    char dir[256];
    tu_scratch_make(dir, sizeof dir, "deref");
    rc = tu_shell(out, sizeof out,
                  "cd '%s' && mkdir -p engine/graph engine/ops && "
                  "printf 'void f(te_tensor *t, void *p)\\n{\\n    t->data = p;\\n    *(float *)t->data = 1;\\n"
                  "    if (t->data)\\n        g(!t->data || (t && t->data));\\n}\\n' > engine/x.c && "
                  "printf 'float g(te_tensor *t) { return te_f32(t)[0]; }\\n' > engine/ops/y.c && "
                  "sh '%s/tests/no_host_deref.sh' . 2>&1",
                  dir, TDBG_SRCDIR);
    tu_scratch_remove(dir);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "engine/x.c:4:") && strstr(out, "engine/ops/y.c:1:") && !strstr(out, "engine/x.c:3:") &&
                      !strstr(out, "engine/x.c:5:") && !strstr(out, "engine/x.c:6:"),
                  "%s", out);
}
END_TEST

/* ---- the real device, where there is one ---------------------------------- */

START_TEST(test_cuda_device)
{
    if (!tu_cuda_device("residency"))
        return;
    ck_assert_int_eq(te_backend_use("cuda"), TE_OK);
    te_tensor *x = te_tensor_from(TE_F32, te_shape(3, 1000), (const float[3000]){ [0] = 1, [2999] = -4 });
    ck_assert_int_eq(x->device, TE_DEV_CUDA);
    ck_assert(te_mem_stats_of(TE_DEV_CUDA).current >= 12000);
    ck_assert_float_eq(te_get(x, 2999), -4);
    te_set(x, 5, 2.5f);
    float v[4];
    ck_assert_int_eq(te_tensor_read_f32(x, 4, 3, v), TE_OK);
    ck_assert_float_eq(v[1], 2.5f);
    te_tensor *h = te_tensor_to(x, TE_DEV_CPU);
    ck_assert_float_eq(te_get(h, 0), 1);
    ck_assert_float_eq(te_get(h, 5), 2.5f);
    te_tensor *z = te_tensor_zeros(TE_BF16, te_shape(4096));
    te_fill(z, 3.0f);
    float zf[4096];
    te_copy_to_f32(z, zf);
    ck_assert_float_eq(zf[4095], 3.0f);
    ck_assert_ptr_null(te_add(x, h));
    tu_assert_error(TE_ERR_DEVICE, "is on cuda and b", "on cpu");
    te_backend_use("cpu");
}
END_TEST

Suite *suite_residency(void)
{
    Suite *s = suite_create("residency");
    TCase *tc = tcase_create("residency");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_add_test(tc, test_slices);
    tcase_add_test(tc, test_device_names);
    tcase_add_test(tc, test_to_cpu_copies);
    tcase_add_test(tc, test_no_cuda_backend);
    tcase_add_test(tc, test_no_host_deref);
    suite_add_tcase(s, tc);

    TCase *fk = tcase_create("fake_device");
    tcase_add_checked_fixture(fk, fake_setup, fake_teardown);
    tcase_add_test(fk, test_backend_use_switches_new_tensors);
    tcase_add_test(fk, test_mixed_devices_fail);
    tcase_add_test(fk, test_missing_kernel_fails);
    suite_add_tcase(s, fk);

    /* The real device: without one the test says why and returns. */
    TCase *gpu = tcase_create("cuda");
    tcase_add_checked_fixture(gpu, tu_setup, tu_teardown);
    tcase_add_test(gpu, test_cuda_device);
    suite_add_tcase(s, gpu);
    return s;
}
