#!/usr/bin/python3
"""interop_h5py.py DIR: reads a tdbg dump with h5py alone, as a user would,
and checks it against docs/dump-format.md: every step file's attributes and
tensor datasets (f16 as numpy float16, bf16 as uint16 with its dtype
attribute), /stats tables and run.h5. Prints "interop ok: N tensors" (tensor
datasets plus /stats rows) and exits 0; prints each problem and exits 1;
exits 77 (skip) when h5py is missing."""
import os
import re
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"skip: h5py or numpy is not installed for {sys.executable} ({e})")
    sys.exit(77)

STEP_NAME = re.compile(r"^step-(\d{8,})\.h5$")
NUMPY_OF = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i32": np.int32}
PHASES = ("forward", "backward", "update")

problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def check_attr(obj, where, name, kind):
    """kind: a numpy type for an integer attribute, or str (variable-length UTF-8)."""
    if name not in obj.attrs:
        problem(where, f"attribute '{name}' is missing")
        return None
    dt = obj.attrs.get_id(name).dtype
    if kind is str:
        info = h5py.check_string_dtype(dt)
        if info is None or info.length is not None or info.encoding != "utf-8":
            problem(where, f"attribute '{name}' is {dt}, expected a variable-length UTF-8 string")
            return None
    elif dt != np.dtype(kind):
        problem(where, f"attribute '{name}' is {dt}, expected {np.dtype(kind)}")
        return None
    value = obj.attrs[name]
    return value if kind is str else int(value)


def check_table(ds, where, fields):
    """fields: name -> numpy type, or str for variable-length strings."""
    if not isinstance(ds, h5py.Dataset) or ds.dtype.names is None or ds.ndim != 1:
        problem(where, "not a 1-D compound table")
        return None
    for name, kind in fields.items():
        if name not in ds.dtype.names:
            problem(where, f"field '{name}' is missing")
        elif kind is str:
            if h5py.check_string_dtype(ds.dtype[name]) is None:
                problem(where, f"field '{name}' is {ds.dtype[name]}, expected a string")
        elif ds.dtype[name] != np.dtype(kind):
            problem(where, f"field '{name}' is {ds.dtype[name]}, expected {np.dtype(kind)}")
    return ds[()]


def check_tensor(ds, where, step):
    own = check_attr(ds, where, "step", np.int64)
    if own is not None and own != step:
        problem(where, f"attribute 'step' is {own}, the file's step is {step}")
    texts = {k: check_attr(ds, where, k, str)
             for k in ("op", "op_type", "phase", "io", "tensor", "dtype", "file", "kernel")}
    ints = {k: check_attr(ds, where, k, np.int32) for k in ("exec_index", "slot", "line")}
    if texts["phase"] is not None and texts["phase"] not in PHASES:
        problem(where, f"phase '{texts['phase']}'")
    if None not in (texts["op"], texts["io"], ints["slot"]):
        want = f"/{texts['op']}/{texts['io']}{ints['slot']}"
        if want != ds.name:
            problem(where, f"attributes say {want}")
    dtype = texts["dtype"]
    if dtype not in NUMPY_OF:
        if dtype is not None:
            problem(where, f"dtype '{dtype}'")
        return
    want = np.dtype(NUMPY_OF[dtype]).newbyteorder("<")
    if ds.dtype != want:
        problem(where, f"loads as numpy {ds.dtype}, expected {np.dtype(NUMPY_OF[dtype])}")
    elif not ds.id.get_type().equal(h5py.h5t.py_create(want)):
        # e.g. a half type with other exponent fields: h5py would convert it
        problem(where, f"its HDF5 type is not numpy {want}'s")
    if "ndim" in ds.attrs:
        if check_attr(ds, where, "ndim", np.int32) != 0 or ds.shape != (1,):
            problem(where, f"ndim attribute on a dataset of shape {ds.shape}")
    try:
        values = ds[()]   # reads and checksums every chunk
    except OSError as e:
        problem(where, f"cannot read the values: {e}")
        return
    if dtype == "bf16":   # the documented way back to float32
        (values.astype(np.uint32) << 16).view(np.float32)


def check_step(path, step):
    with h5py.File(path, "r") as f:
        if check_attr(f, path, "step", np.int64) != step:
            problem(path, f"root attribute 'step' is not {step}")
        if check_attr(f, path, "complete", np.int32) != 1:
            problem(path, "root attribute 'complete' is not 1")
        declared = check_attr(f, path, "n_tensors", np.int32)
        datasets = []
        f.visititems(lambda name, obj: datasets.append(obj)
                     if isinstance(obj, h5py.Dataset) else None)
        count = 0
        for ds in datasets:
            where = f"{path}: {ds.name}"
            if ds.name == "/stats":
                rows = check_table(ds, where, {
                    "path": str, "op": str, "io": str, "slot": np.int32,
                    "exec_index": np.int32, "min": np.float64, "max": np.float64,
                    "mean": np.float64, "std": np.float64, "abs_max": np.float64,
                    "l2norm": np.float64, "nan": np.int64, "inf": np.int64,
                    "zero_frac": np.float64})
                count += 0 if rows is None else len(rows)
            else:
                check_tensor(ds, where, step)
                count += 1
        if declared is not None and declared != count:
            problem(path, f"n_tensors is {declared}, the file holds {count}")
        return count


def check_run(path):
    with h5py.File(path, "r") as f:
        if check_attr(f, path, "tdbg_format", np.int32) != 1:
            problem(path, "tdbg_format is not 1")
        for name in ("engine_version", "mode", "amp", "backend", "command_line", "created"):
            check_attr(f, path, name, str)
        check_attr(f, path, "seed", np.uint64)
        if f.attrs.get("mode") not in ("eager", "graph"):
            problem(path, f"mode '{f.attrs.get('mode')}'")
        if "ops" not in f:
            problem(path, "no /ops table")
            return
        rows = check_table(f["ops"], f"{path}: /ops", {
            "exec": np.int32, "name": str, "type": str, "phase": str, "file": str,
            "line": np.int32, "inputs": str, "outputs": str, "kernel": str})
        for row in rows if rows is not None else []:
            phase = row["phase"]
            phase = phase.decode() if isinstance(phase, bytes) else phase
            if phase not in PHASES:
                problem(f"{path}: /ops", f"phase {phase!r}")


def main():
    if len(sys.argv) != 2:
        print("usage: interop_h5py.py DIR")
        return 2
    top = sys.argv[1]
    tensors = 0
    try:
        if os.path.exists(os.path.join(top, "run.h5")):
            check_run(os.path.join(top, "run.h5"))
    except OSError as e:
        problem(os.path.join(top, "run.h5"), str(e))
    for name in sorted(os.listdir(top)):
        m = STEP_NAME.match(name)
        if m:
            path = os.path.join(top, name)
            try:
                tensors += check_step(path, int(m.group(1)))
            except OSError as e:
                problem(path, str(e))
    if problems:
        print("\n".join(problems))
        return 1
    print(f"interop ok: {tensors} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
