"""torch_gpt.py — the PyTorch side of bench/gpt.sh: examples/gpt's model
(GPT-2 style, pre-norm, exact GELU, wte tied to the head) with its step
(AdamW, gradient clipping) on the CPU.

    torch_gpt.py --layers N --heads N --embd N --block N --batch N --steps N
                 --threads N [--mode eager|compile] [--attn sdpa|composed]
                 [--dropout P] [--lr X] [--weight-decay X] [--clip X]
                 [--device cpu|cuda]

--attn sdpa computes attention with F.scaled_dot_product_attention(...,
is_causal=True), PyTorch's fast path (a fused, flash-style kernel on the
CPU); --attn composed spells it out as matmul, scale, masked_fill, softmax,
matmul, as examples/gpt's composed ops do. --mode compile wraps the model in
torch.compile (needs PyTorch 2: without it the script says so and exits 3).

Prints `attention: sdpa|composed`, then `time: ms_per_step median=X min=X
max=X steps=N` over the steps after WARMUP, the line of the examples'
--time (zero_grad, forward, loss, backward, clipping, update; batches of
random bytes made up front), `memory: peak_rss_kb=N`, and for compile
`compile_ms=X` (compiling and the first step).
"""
import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_report import report

VOCAB = 256


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        c = a.embd
        self.heads, self.dropout, self.sdpa = a.heads, a.dropout, a.attn == "sdpa"
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.attn_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
            att = F.dropout(F.softmax(att.masked_fill(causal, float("-inf")), dim=-1), p)
            y = att @ v
        y = y.transpose(1, 2).reshape(b, t, c)
        return F.dropout(self.attn_proj(y), p)

    def forward(self, x):
        p = self.dropout if self.training else 0.0
        x = x + self.attention(self.ln_1(x))
        return x + F.dropout(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))), p)


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, a.embd)
        self.wpe = nn.Embedding(a.block, a.embd)
        self.h = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.embd)
        for name, p in self.named_parameters():  # GPT-2's init, as examples/gpt_model.c
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * a.layers))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        b, t = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight).view(b * t, VOCAB)  # tied head


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("layers", "heads", "embd", "block", "batch", "threads"):
        p.add_argument("--" + flag, type=int, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--attn", choices=["sdpa", "composed"], default="sdpa")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a = p.parse_args()

    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # as tdbg's CUDA backend
    torch.backends.cudnn.allow_tf32 = False
    model = GPT(a).to(dev)
    batches = [torch.randint(0, VOCAB, (a.batch, a.block + 1), device=dev) for _ in range(4)]
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)

    def step(tokens):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(tokens[:, :-1]), tokens[:, 1:].reshape(-1))
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()

    print(f"attention: {a.attn}")
    compile_ms = None
    if a.mode == "compile":
        if not hasattr(torch, "compile"):
            print(f"torch.compile: not in PyTorch {torch.__version__}", file=sys.stderr)
            sys.exit(3)
        t0 = time.perf_counter()
        model = torch.compile(model)
        step(batches[0])  # the first call compiles forward and backward
        compile_ms = (time.perf_counter() - t0) * 1e3

    ms = []
    for s in range(a.steps):
        t0 = time.perf_counter()
        step(batches[s % len(batches)])
        if dev.type == "cuda":
            torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3)
    report(ms, compile_ms, dev)


if __name__ == "__main__":
    main()
