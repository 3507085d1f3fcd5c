"""h5py_write.py SRC DST — the h5py side of bench/dump.sh: reads every tensor
of the tdbg dump in SRC into memory, then writes the same tensors with h5py,
one file per step, each dataset contiguous, each file fsync'd, as a user's
own dump script would, and prints `h5py: bytes=N seconds=S MB_per_s=X`.
"""
import glob
import os
import sys
import time

import h5py


def tensors(path):
    out = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name != "stats":
                out.append((name, obj[...]))
        f.visititems(visit)
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    steps = [(os.path.basename(p), tensors(p)) for p in sorted(glob.glob(f"{src}/step-*.h5"))]
    total, t0 = 0, time.perf_counter()
    for name, ts in steps:
        path = f"{dst}/{name}"
        with h5py.File(path, "w") as f:
            for tname, value in ts:
                f.create_dataset(tname, data=value)
                total += value.nbytes
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    seconds = time.perf_counter() - t0
    print(f"h5py: bytes={total} seconds={seconds:.3f} MB_per_s={total / 1e6 / seconds:.1f}")


if __name__ == "__main__":
    main()
