"""torch_amp.py — the PyTorch side of bench/amp.sh: the examples' MLP and
CNN (torch_train.py's models) trained in eager mode on the CPU, in f32 or
under CPU autocast (bf16), SGD with momentum.

    torch_amp.py --model mlp|cnn --batch N --steps N --threads N
                 [--autocast none|bf16] [--lr X] [--momentum X]

Prints the examples' `time: ms_per_step ...` line over the steps after the
warm-up, then `memory: peak_rss_kb=N` and `activations: saved_bytes=N`:
what autograd saved for the backward of one step (saved_tensors_hooks), the
figure tdbg's O2 activation-memory target compares against. Autocast
casts the weights to bf16 once per forward (its cache), runs matmuls and
convolutions in bf16 (oneDNN, AVX512-BF16 where the CPU has it) and keeps
the loss, softmax and batch norm in f32, as PyTorch documents.
"""
import argparse

import torch
import torch.nn as nn

from torch_report import report
from torch_train import cnn, mlp
import time


def saved_bytes(model, x, y, dtype):
    """Bytes of the tensors autograd saves in one forward (each once)."""
    seen = {}

    def pack(t):
        seen[(t.data_ptr(), t.dtype, tuple(t.shape))] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
            loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn"], required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--autocast", choices=["none", "bf16"], default="none")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    a = p.parse_args()

    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    model = mlp() if a.model == "mlp" else cnn()
    shape = (a.batch, 784) if a.model == "mlp" else (a.batch, 3, 32, 32)
    batches = [(torch.randn(shape), torch.randint(0, 10, (a.batch,))) for _ in range(4)]
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    low = torch.bfloat16 if a.autocast == "bf16" else None

    ms = []
    for step in range(a.steps):
        x, y = batches[step % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low is not None):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        ms.append((time.perf_counter() - t0) * 1e3)
    report(ms)
    print(f"activations: saved_bytes={saved_bytes(model, *batches[0], low)}")


if __name__ == "__main__":
    main()
