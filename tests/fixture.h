/*
 * fixture.h — golden tensors written by PyTorch (tests/gen_fixtures.py) and
 * the assertions that compare the engine against them.
 *
 * File format (little-endian): "TDFX", u32 version (1), u32 count, then count
 * records: u16 name length, name bytes, u8 dtype (0 f32, 3 i32), u8 ndim,
 * i64 shape[ndim], numel elements of 4 bytes.
 */
#ifndef TDBG_FIXTURE_H
#define TDBG_FIXTURE_H

#include "te.h"

typedef struct fx_file fx_file;

/* Opens tests/fixtures/NAME under the source tree; fails the test if absent. */
fx_file *fx_open(const char *name);
void fx_close(fx_file *f);
/* A tape tensor holding the record NAME; fails the test if absent. */
te_tensor *fx_tensor(fx_file *f, const char *name);
/* A persistent copy that requires grad (for op inputs to differentiate). */
te_tensor *fx_param(fx_file *f, const char *name);
/* The same for the record "CASE.FIELD" of a golden case (e.g. "add_row.dy"):
 * fx_case as fx_tensor, fx_case_param as fx_param; fails the test if absent. */
te_tensor *fx_case(fx_file *f, const char *c, const char *field);
te_tensor *fx_case_param(fx_file *f, const char *c, const char *field);

/* Fails with the name, the worst index, both values and the max abs error
 * when |got - want| > atol + rtol * |want| anywhere, or shapes differ. */
void fx_assert_close(const te_tensor *got, const te_tensor *want, double atol, double rtol,
                     const char *what);

#endif
