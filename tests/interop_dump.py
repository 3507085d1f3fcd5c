"""interop_dump.py DIR — reads a tdbg dump with h5py alone and checks, from
the dumped inputs and outputs, that the CNN's conv1/conv and fc/linear ops
computed what numpy computes from the same inputs.

The dump must hold step 0 of examples/cnn with io=both for those ops.
Exit 0 and "interop: conv and linear agree" when they do, 1 with the
difference when not, 77 (skip) when h5py or numpy is missing.
"""
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # the tools never need Python: skip, do not fail
    print(f"interop: skipped, {e}")
    sys.exit(77)


def conv2d(x, w, stride, pad):
    """Cross-correlation, NCHW, as PyTorch's conv2d, in float64."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return y


def check(name, got, want):
    err = np.max(np.abs(got - want) / (1.0 + np.abs(want)))
    if err > 1e-4:
        print(f"interop: {name} differs from numpy by {err:.3g}")
        sys.exit(1)


def main():
    f = h5py.File(f"{sys.argv[1]}/step-00000000.h5", "r")
    assert f.attrs["complete"] == 1 and f.attrs["step"] == 0
    x, w = f["conv1/conv/in0"][...].astype(np.float64), f["conv1/conv/in1"][...].astype(np.float64)
    y = f["conv1/conv/out0"][...]
    assert f["conv1/conv/out0"].attrs["op_type"] == "Conv2D"
    check("conv1/conv", y, conv2d(x, w, 1, 1))
    a, wl, b = (f[f"fc/linear/in{k}"][...].astype(np.float64) for k in range(3))
    check("fc/linear", f["fc/linear/out0"][...], a @ wl.T + b)
    print("interop: conv and linear agree")


if __name__ == "__main__":
    main()
