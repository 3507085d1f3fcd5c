"""fixture_io.py — writes golden tensors in the format tests/fixture.h reads."""
import struct

import numpy as np

DTYPES = {np.dtype(np.float32): 0, np.dtype(np.int32): 3}


class FixtureWriter:
    def __init__(self):
        self.records = []

    def add(self, name, array):
        """Adds a tensor (torch tensor or numpy array); floats go in as f32."""
        if hasattr(array, "detach"):
            array = array.detach().cpu().numpy()
        a = np.asarray(array)
        if a.dtype.kind == "f":
            a = a.astype(np.float32)
        elif a.dtype.kind in "iu":
            a = a.astype(np.int32)
        assert a.ndim <= 4, name
        self.records.append((name, np.ascontiguousarray(a)))

    def write(self, path):
        with open(path, "wb") as f:
            f.write(b"TDFX")
            f.write(struct.pack("<II", 1, len(self.records)))
            for name, a in self.records:
                nb = name.encode()
                f.write(struct.pack("<H", len(nb)) + nb)
                f.write(struct.pack("<BB", DTYPES[a.dtype], a.ndim))
                f.write(struct.pack("<%dq" % a.ndim, *a.shape))
                f.write(a.astype(a.dtype.newbyteorder("<")).tobytes())
