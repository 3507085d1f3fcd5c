"""gen_amp_fixtures.py — every op of the engine in f16 and bf16, as PyTorch
computes it the engine's way: inputs in the low dtype, the op in f32, the
output rounded once to the low dtype (round to nearest even, +-inf beyond
the largest finite value, f16 subnormals kept). docs/amp.md "Rounding".

Usage: /opt/torchenv/bin/python tests/gen_amp_fixtures.py tests/fixtures/amp.bin

For each case CASE and dtype DT (f16, bf16) it writes DT.CASE.x0, x1, ...
(the float inputs, values of the low dtype held as f32; i32 inputs as i32)
and DT.CASE.y, the rounded output as f32 (exact: every f16 and bf16 value
is an f32). The inputs' order and the op's attributes are the test's
(tests/test_amp.c, one function per case). Cases named *_ovf overflow to
+-inf in that dtype; *_sub give f16 subnormals. Without torch the script
says so and writes nothing: the fixture is committed.
"""
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    print("gen_amp_fixtures.py: torch is not installed; tests/fixtures/amp.bin is kept as committed")
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import FixtureWriter  # noqa: E402

torch.manual_seed(1717)
fw = FixtureWriter()
LOW = {"f16": torch.float16, "bf16": torch.bfloat16}


def gen(shape, lo=-2.0, hi=2.0):
    return torch.rand(*shape) * (hi - lo) + lo


def positive(shape, lo=0.25, hi=4.0):
    return torch.rand(*shape) * (hi - lo) + lo


def case(name, fn, inputs, dts=("f16", "bf16"), raw=()):
    """inputs: f32 tensors (rounded to the dtype here, but those whose
    positions are in raw: the f32 a cast starts from, a mask) or integer
    tensors (written as i32)."""
    for dt in dts:
        low = LOW[dt]
        xs = [x.to(low).float() if x.is_floating_point() and i not in raw else x for i, x in enumerate(inputs)]
        for i, x in enumerate(xs):
            fw.add("%s.%s.x%d" % (dt, name, i), x)
        with torch.no_grad():
            y = fn(*xs)
        if y.dim() == 0:
            y = y.reshape(1)
        fw.add("%s.%s.y" % (dt, name), y.float().to(low).float())


# ---- the op table, row by row -------------------------------------------------
case("matmul", torch.matmul, [gen((5, 24)), gen((24, 7))])
case("matmul_batched", torch.matmul, [gen((2, 3, 4, 16)), gen((2, 3, 16, 5))])
case("matmul_ovf", torch.matmul, [gen((3, 8), 200, 300), gen((8, 2), 200, 300)], dts=("f16",))
case("linear", F.linear, [gen((6, 20)), gen((9, 20)), gen((9,))])
case("add", torch.add, [gen((4, 6)), gen((6,))])
case("add_ovf", torch.add, [gen((4, 6), 40000, 60000), gen((6,), 30000, 40000)], dts=("f16",))
case("sub", torch.sub, [gen((4, 6)), gen((4, 1))])
case("mul", torch.mul, [gen((4, 6)), gen((4, 6))])
case("mul_ovf", torch.mul, [gen((4, 6), 1e19, 1e20), gen((4, 6), 1e19, 1e20)], dts=("bf16",))
case("mul_sub", torch.mul, [gen((4, 6), 1e-4, 1e-3), gen((4, 6), 1e-4, 1e-3)], dts=("f16",))
case("div", torch.div, [gen((4, 6)), positive((4, 6))])
case("scale", lambda x: x * 0.3, [gen((5, 7))])
case("relu", F.relu, [gen((5, 7))])
case("gelu", F.gelu, [gen((5, 7), -4, 4)])
case("tanh", torch.tanh, [gen((5, 7), -3, 3)])
case("sigmoid", torch.sigmoid, [gen((5, 7), -6, 6)])
case("exp", torch.exp, [gen((5, 7), -4, 4)])
case("exp_ovf", torch.exp, [gen((5, 7), 9, 13)], dts=("f16",))
case("exp_sub", torch.exp, [gen((5, 7), -16, -10)], dts=("f16",))
case("log", torch.log, [positive((5, 7), 0.01, 50)])
case("sqrt", torch.sqrt, [positive((5, 7), 0.01, 50)])
case("softmax", lambda x: torch.softmax(x, -1), [gen((4, 9), -5, 5)])
case("log_softmax", lambda x: torch.log_softmax(x, -1), [gen((4, 9), -5, 5)])
case("cross_entropy", F.cross_entropy, [gen((6, 5), -3, 3), torch.randint(0, 5, (6,), dtype=torch.int32).long()])
case("mse", F.mse_loss, [gen((4, 5)), gen((4, 5))])
case("mse_ovf", F.mse_loss, [gen((4, 5), 300, 400), gen((4, 5), -400, -300)], dts=("f16",))
case("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1),
     [gen((2, 3, 6, 6)), gen((4, 3, 3, 3)), gen((4,))])
case("maxpool2d", lambda x: F.max_pool2d(x, 2, 2, 0), [gen((2, 3, 6, 6))])
case("avgpool2d", lambda x: F.avg_pool2d(x, 2, 2, 0), [gen((2, 3, 6, 6))])
case("global_avgpool", lambda x: x.mean((2, 3)), [gen((2, 3, 5, 5))])
case("batchnorm", lambda x, g, b: F.batch_norm(x, torch.zeros(4), torch.ones(4), g, b, True, 0.1, 1e-5),
     [gen((8, 4)), positive((4,)), gen((4,))])
case("layernorm", lambda x, g, b: F.layer_norm(x, (12,), g, b, 1e-5), [gen((5, 12)), positive((12,)), gen((12,))])
case("dropout_eval", lambda x: x, [gen((4, 6))])
case("reshape", lambda x: x.reshape(6, 4), [gen((4, 6))])
case("flatten", lambda x: x.flatten(1), [gen((2, 3, 4))])
case("transpose", lambda x: x.transpose(0, 2), [gen((2, 3, 4))])
case("sum", lambda x: x.sum(1), [gen((4, 50))])
case("sum_ovf", lambda x: x.sum(), [gen((4, 50), 1000, 2000)], dts=("f16",))
case("mean", lambda x: x.mean(), [gen((4, 50))])
case("embedding", lambda w, i: F.embedding(i.long(), w), [gen((7, 5)), torch.randint(0, 7, (2, 3), dtype=torch.int32)])
case("cast", lambda x: x, [torch.cat([gen((20,), -70000, 70000), gen((20,), -1e-6, 1e-6)])], raw=(0,))
case("masked_fill", lambda x, m: x.masked_fill(m != 0, -1e4), [gen((4, 4)), torch.triu(torch.ones(4, 4), 1)], raw=(1,))

fw.write(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "fixtures", "amp.bin"))
