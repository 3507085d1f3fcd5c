"""torch_prof.py — the PyTorch side of bench/prof.sh: the examples' models
(bench/torch_train.py's MLP and CNN, bench/torch_gpt.py's GPT) trained on the
CPU with torch.profiler on or off, to weigh its cost against tdbg's
profiler's.

    torch_prof.py --model mlp|cnn|gpt --batch N --steps N --threads N
                  [--profile off|on] [--trace FILE]
                  [--lr X] [--momentum X]                      (mlp, cnn: SGD)
                  [--layers N --heads N --embd N --block N
                   --dropout P --weight-decay X --clip X]      (gpt: AdamW)

--profile on wraps the training loop in torch.profiler.profile(activities=
[ProfilerActivity.CPU], record_shapes=True), every step recorded, as
`--profile` records every step in tdbg; the trace is written at the end
(export_chrome_trace to --trace, default: a file that is removed). The
steps are those of torch_train.py and torch_gpt.py (zero_grad, forward,
loss, backward, for gpt clipping, the update) on random batches made up
front. Prints the examples' `time: ms_per_step median=X min=X max=X
steps=N total_ms=X cpu_ms=X` over the steps after the warm-up (cpu_ms: the
process's CPU time in those steps, time.process_time), `memory: ...`, and
with --profile on `profile: events=N trace_bytes=N export_ms=X`.
"""
import argparse
import contextlib
import os
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import torch_gpt
import torch_train
from torch_report import report


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn", "gpt"], required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--profile", choices=["off", "on"], default="off")
    p.add_argument("--trace", default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--momentum", type=float, default=0.9)
    for flag in ("layers", "heads", "embd", "block"):
        p.add_argument("--" + flag, type=int, default=None)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip", type=float, default=1.0)
    a = p.parse_args()

    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    if a.model == "gpt":
        if None in (a.layers, a.heads, a.embd, a.block):
            p.error("--model gpt needs --layers, --heads, --embd and --block")
        a.attn = "sdpa"
        model = torch_gpt.GPT(a)
        batches = [torch.randint(0, torch_gpt.VOCAB, (a.batch, a.block + 1)) for _ in range(4)]
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr or 1e-3, weight_decay=a.weight_decay)

        def loss_of(tokens):
            return F.cross_entropy(model(tokens[:, :-1]), tokens[:, 1:].reshape(-1))
    else:
        model = torch_train.mlp() if a.model == "mlp" else torch_train.cnn()
        shape = (a.batch, 784) if a.model == "mlp" else (a.batch, 3, 32, 32)
        batches = [(torch.randn(shape), torch.randint(0, 10, (a.batch,))) for _ in range(4)]
        opt = torch.optim.SGD(model.parameters(), lr=a.lr or 0.01, momentum=a.momentum)

        def loss_of(batch):
            return F.cross_entropy(model(batch[0]), batch[1])

    clip = a.clip if a.model == "gpt" else 0.0

    def step(batch):
        opt.zero_grad(set_to_none=True)
        loss_of(batch).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()

    on = a.profile == "on"
    ctx = profile(activities=[ProfilerActivity.CPU], record_shapes=True) if on else contextlib.nullcontext()
    ms, cpu = [], []
    with ctx as prof:
        for s in range(a.steps):
            t0, c0 = time.perf_counter(), time.process_time()
            step(batches[s % len(batches)])
            cpu.append((time.process_time() - c0) * 1e3)
            ms.append((time.perf_counter() - t0) * 1e3)
    report(ms, cpu_ms=cpu)
    if on:
        trace = a.trace
        if trace is None:
            fd, trace = tempfile.mkstemp(suffix=".json")
            os.close(fd)
        t0 = time.perf_counter()
        prof.export_chrome_trace(trace)
        export_ms = (time.perf_counter() - t0) * 1e3
        print(f"profile: events={len(prof.events())} trace_bytes={os.path.getsize(trace)} export_ms={export_ms:.1f}")
        if a.trace is None:
            os.unlink(trace)


if __name__ == "__main__":
    main()
