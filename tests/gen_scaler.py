"""gen_scaler.py — the loss scale and the skips of PyTorch's GradScaler over
scripted sequences of clean and non-finite steps, for tests/test_scaler.c.

Usage (torch 2.x, CPU is enough: torch.amp.GradScaler("cpu")):
    /opt/torchenv/bin/python tests/gen_scaler.py [tests/fixtures/scaler.bin]

Each sequence trains a tiny linear model with SGD; at its scripted steps
one gradient element is set to inf (or nan) after backward, as a fault
would. Per step it records the scale the loss was scaled by, whether
GradScaler skipped the optimizer step, and the scale after update().
"default" starts GradScaler's 2000-step growth interval 1995 steps in
(its _growth_tracker set through load_state_dict), so that growth at the
2000th clean step is reached in a few steps. Without torch it says so
and exits 0: the committed fixture stays as it is.
"""
import os
import sys

try:
    import torch
except ImportError:
    print("gen_scaler.py: skipped: torch is not installed")
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import FixtureWriter  # noqa: E402

# name: (init_scale, growth_interval, growth_tracker at the start, steps: "." clean, "i" inf, "n" nan)
SEQUENCES = {
    "short": (65536.0, 3, 0, "...i...i.ii......n.i...."),
    "default": (65536.0, 2000, 1995, "........i..ii.." ),
    "small": (4.0, 2, 0, "..i..nn....i.." ),
}


def run(init, interval, tracker, steps):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=init, growth_interval=interval)
    if tracker:
        scaler.scale(torch.zeros(()))  # makes the scale and tracker tensors
        state = scaler.state_dict()
        state["_growth_tracker"] = tracker
        scaler.load_state_dict(state)
    x, t = torch.randn(8, 4), torch.randn(8, 3)
    scales, skips, after = [], [], []
    for c in steps:
        opt.zero_grad()
        scales.append(scaler.get_scale())
        loss = torch.nn.functional.mse_loss(model(x), t)
        scaler.scale(loss).backward()
        if c != ".":
            model.weight.grad[1, 2] = float("inf") if c == "i" else float("nan")
        before = model.weight.detach().clone()
        scaler.step(opt)
        skips.append(int(torch.equal(before, model.weight.detach())))
        scaler.update()
        after.append(scaler.get_scale())
    return scales, skips, after


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                              "fixtures", "scaler.bin")
    fx = FixtureWriter()
    for name, (init, interval, tracker, steps) in SEQUENCES.items():
        scales, skips, after = run(init, interval, tracker, steps)
        fx.add(name + "/config", [init, float(interval), float(tracker)])
        fx.add(name + "/faults", torch.tensor([".in".index(c) for c in steps], dtype=torch.int32))
        fx.add(name + "/scale", torch.tensor(scales))
        fx.add(name + "/skipped", torch.tensor(skips, dtype=torch.int32))
        fx.add(name + "/scale_after", torch.tensor(after))
        print(name, "".join("s" if s else "." for s in skips), scales[0], "->", after[-1])
    fx.write(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
