#!/usr/bin/env python3
"""numpy_diff.py A B — the peer tdbg-diff is measured against in bench/diff.sh:
what people write with h5py and numpy to compare two tdbg dumps. For every
tensor dataset of A's step files that B's step file of the same step also
has: read both (bf16 widened as docs/dump-format.md shows), the max abs
error (in the tensors' own dtype, as one would write it) and numpy.allclose
with tdbg-diff's f32 defaults (rtol 1.3e-6, atol
1e-5; NaN equal to NaN). Prints one line: datasets, how many differ, the
largest error, seconds."""
import glob
import os
import sys
import time

import h5py
import numpy as np


def values(ds):
    x = ds[()]
    if ds.attrs["dtype"] == "bf16":
        x = (x.astype(np.uint32) << 16).view(np.float32)
    return x


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: numpy_diff.py A B")
    a, b = sys.argv[1], sys.argv[2]
    start = time.time()
    count = differ = 0
    worst = 0.0
    for pa in sorted(glob.glob(os.path.join(a, "step-*.h5"))):
        pb = os.path.join(b, os.path.basename(pa))
        if not os.path.exists(pb):
            continue
        with h5py.File(pa, "r") as fa, h5py.File(pb, "r") as fb:
            names = []
            fa.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            for name in names:
                if name == "stats" or name not in fb:
                    continue
                x, y = values(fa[name]), values(fb[name])
                if x.shape != y.shape:
                    differ += 1
                    continue
                if x.dtype != y.dtype:   # as a user would: native dtype, else float64
                    x, y = x.astype(np.float64), y.astype(np.float64)
                err = float(np.nanmax(np.abs(y - x))) if x.size else 0.0
                worst = max(worst, err)
                if not np.allclose(y, x, rtol=1.3e-6, atol=1e-5, equal_nan=True):
                    differ += 1
                count += 1
    print(f"numpy+h5py: {count} datasets, {differ} differ, max abs error {worst:.6g}, "
          f"{time.time() - start:.3f} s")


if __name__ == "__main__":
    main()
