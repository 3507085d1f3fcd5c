"""torch_train.py — the PyTorch side of bench/run.sh: the examples' models,
sizes and optimizer in PyTorch eager mode on the CPU.

    torch_train.py --model mlp|cnn --batch N --steps N --threads N
                   [--mode eager|script|compile] [--watch none|anomaly|hooks]
                   [--optim sgd|adam] [--lr X] [--momentum X] [--device cpu|cuda]

Prints `time: ms_per_step median=X min=X max=X steps=N` over the steps after
WARMUP, the same line as the examples' --time, timing forward, loss,
backward and the update, not data, then `memory: peak_rss_kb=N` and, for
script and compile, `compile_ms=X` (tracing or compiling, and the first
step). Inputs are random batches made up front: the time of a step does not
depend on the values. --mode script trains a torch.jit.trace of the model
(TorchScript); --mode compile uses torch.compile, which needs PyTorch 2:
without it the script says so and exits 3. --watch is what PyTorch offers
a user hunting a NaN: anomaly mode (torch.autograd.set_detect_anomaly), or
a forward and a backward hook on every module checking isnan().any() of
its outputs and gradients, raising when one holds. --device cuda trains on
the GPU (bench/gpu.sh): a step's time then ends with torch.cuda.synchronize,
and the peak memory line adds the device's peak.
"""
import argparse
import sys
import time

import torch
import torch.nn as nn

from torch_report import report



def mlp():
    # examples/mlp: 784-1024-1024-10
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def cnn():
    # examples/cnn: conv3x3 (no bias) + BN + ReLU blocks, max-pool, global avg-pool, linear
    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]
    return nn.Sequential(*block(3, 32), *block(32, 64), nn.MaxPool2d(2), *block(64, 128),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))


def watch_modules(model):
    """A NaN watch on every module, the usual hand-made one."""
    def check(name, tensors):
        for t in tensors:
            if t is not None and torch.isnan(t).any():
                raise RuntimeError(f"NaN in {name}")

    for name, m in model.named_modules():
        if m is model:
            continue
        m.register_forward_hook(lambda mod, inp, out, n=name: check(n, (out,)))
        m.register_full_backward_hook(lambda mod, gin, gout, n=name: check(n, gin + gout))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn"], required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--optim", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--mode", choices=["eager", "script", "compile"], default="eager")
    p.add_argument("--watch", choices=["none", "anomaly", "hooks"], default="none")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a = p.parse_args()

    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    # TF32 off, as tdbg's CUDA backend: the same f32 arithmetic on both sides.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = (mlp() if a.model == "mlp" else cnn()).to(dev)
    shape = (a.batch, 784) if a.model == "mlp" else (a.batch, 3, 32, 32)
    batches = [(torch.randn(shape, device=dev), torch.randint(0, 10, (a.batch,), device=dev)) for _ in range(4)]
    compile_ms = None
    if a.mode != "eager":
        t0 = time.perf_counter()
        if a.mode == "script":
            model = torch.jit.trace(model, batches[0][0])
        elif hasattr(torch, "compile"):
            model = torch.compile(model)
        else:
            print(f"torch.compile: not in PyTorch {torch.__version__}", file=sys.stderr)
            sys.exit(3)
        model(batches[0][0]).sum().backward()  # the first call compiles
        model.zero_grad(set_to_none=True)
        compile_ms = (time.perf_counter() - t0) * 1e3
    if a.optim == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=a.lr)

    if a.watch == "anomaly":
        torch.autograd.set_detect_anomaly(True)
    elif a.watch == "hooks":
        watch_modules(model)

    ms = []
    for step in range(a.steps):
        x, y = batches[step % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3)
    report(ms, compile_ms, dev)


if __name__ == "__main__":
    main()
