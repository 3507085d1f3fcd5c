"""torch_ops.py — the PyTorch side of bench/prof_ops.sh: the examples' CNN
(bench/torch_train.py) or GPT (bench/torch_gpt.py) trained on the CPU under
torch.profiler, its time per step split by layer kind and pass, to set
beside tdbg's profile of the same step.

    torch_ops.py --model cnn|gpt --batch N --steps N --threads N
                 [--lr X] [--momentum X]                     (cnn: SGD)
                 [--layers N --heads N --embd N --block N
                  --dropout P --weight-decay X --clip X
                  --attn composed|sdpa]                     (gpt: AdamW)

WARMUP (3) steps run unprofiled, then --steps steps under
torch.profiler.profile(activities=[CPU], record_shapes=True). Each step
runs in record_function spans named after the passes: "prof_ops:update"
(zero_grad), "prof_ops:forward" (the model and the loss),
"prof_ops:backward" (backward() and, for the GPT, clip_grad_norm_, as
tdbg clips at the end of its backward phase), "prof_ops:update"
(optimizer.step()).

Attribution (each microsecond counted once). torch's events nest
(aten::linear > aten::addmm; evaluate_function > MmBackward0 > aten::mm),
so key_averages' totals count a time at every level. Instead each pass's
event tree is walked from the top: the outermost event the table below
names gets its total time (its children included, never again); an
unnamed event's self time goes to "outside ops" and its children are
walked. So a kind's time is the *total* time of the top-level op of each
of its layers:

    forward (outermost op)                 kind
    aten::conv2d, aten::convolution        conv
    aten::batch_norm, aten::add_ (the BN's num_batches_tracked += 1)  batchnorm
    aten::relu                             relu
    aten::max_pool2d                       maxpool
    aten::adaptive_avg_pool2d              avgpool
    aten::linear                           linear
    aten::cross_entropy_loss               cross_entropy
    aten::layer_norm                       layernorm
    aten::gelu                             gelu
    aten::embedding                        embedding
    aten::matmul (q@k^T, att@v)            attn_matmul
    aten::mul (att * 1/sqrt(d))            attn_scale
    aten::masked_fill, triu, ones          attn_mask
    aten::softmax                          softmax
    aten::dropout, 4-D input               attn_dropout
    aten::dropout, other                   dropout
    aten::scaled_dot_product_attention     attn_sdpa
    aten::add                              add
    views and copies (view, reshape, transpose, split, flatten, slice,
    arange, t, contiguous, permute, expand, narrow, clone)  views
    update pass: Optimizer.* (zero_grad, step)   update

backward: each autograd node (the top-level "autograd::engine::
evaluate_function: XBackward0" event) belongs to the forward layer whose
op created it: the node's sequence number is that of the forward op
(FunctionEvent.sequence_nr) named like the node (MulBackward0:
aten::mul), and the node takes the kind of that op's outermost named
ancestor: the MulBackward0 of the mul inside aten::dropout is dropout,
the TBackward0 of the aten::t inside aten::linear is linear, the
ExpandBackward0 inside aten::matmul is attn_matmul. AccumulateGrad nodes
(a leaf's gradient stored) have no forward op: kind grad_accum. Other
top-level events of the backward pass (the loss's seed gradient,
clip_grad_norm_'s ops) are outside.

Prints, per steps profiled (ms per step):
    row PASS KIND MS COUNT        (COUNT: events per step)
    leaf PASS KIND NAME MS        (the event with the most self time; spaces: _)
    unmapped PASS NAME MS         (top-level ops no kind names: in "outside")
    row PASS outside MS 0         (time in the pass not in a named op)
then the examples' `time: ms_per_step median=X ...` over the profiled steps.
"""
import argparse
import collections
import re
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

import torch_gpt
import torch_train
from torch_report import WARMUP, report

FORWARD = {
    "aten::conv2d": "conv", "aten::convolution": "conv",
    "aten::batch_norm": "batchnorm", "aten::add_": "batchnorm",
    "aten::relu": "relu", "aten::max_pool2d": "maxpool", "aten::adaptive_avg_pool2d": "avgpool",
    "aten::linear": "linear", "aten::cross_entropy_loss": "cross_entropy",
    "aten::layer_norm": "layernorm", "aten::gelu": "gelu", "aten::embedding": "embedding",
    "aten::matmul": "attn_matmul", "aten::mul": "attn_scale",
    "aten::masked_fill": "attn_mask", "aten::triu": "attn_mask", "aten::ones": "attn_mask",
    "aten::softmax": "softmax", "aten::dropout": "dropout",
    "aten::scaled_dot_product_attention": "attn_sdpa", "aten::add": "add",
}
VIEWS = {"view", "reshape", "transpose", "split", "flatten", "slice", "arange", "t", "contiguous", "permute",
         "expand", "narrow", "clone", "_unsafe_view", "select", "unsqueeze", "squeeze"}
NODE = "autograd::engine::evaluate_function: "
PASSES = ("forward", "backward", "update")


def kind_of(ev):
    """The kind of a forward-pass event, or None."""
    name = ev.name
    k = FORWARD.get(name)
    if k == "dropout" and ev.input_shapes and len(ev.input_shapes[0]) == 4:
        return "attn_dropout"
    if k is None and name.startswith("aten::") and name[6:] in VIEWS:
        return "views"
    return k


def squash(name):
    """An op's name as a node's: aten::max_pool2d_with_indices and
    MaxPool2DWithIndicesBackward0 both give maxpool2dwithindices."""
    name = re.sub(r"Backward\d*$", "", name.split("::")[-1])
    return name.replace("_", "").lower()


def attribute(events):
    """The rows: {(pass, kind): [us, count]}, leaves, unmapped."""
    rows = collections.defaultdict(lambda: [0.0, 0])
    leaves = collections.defaultdict(lambda: collections.Counter())
    unmapped = collections.Counter()
    owner = {}  # forward events by sequence number: [(event, kind of its outermost named ancestor)]

    def leaf_self(ev, counter):
        counter[ev.name] += ev.self_cpu_time_total
        for c in ev.cpu_children:
            leaf_self(c, counter)

    def give(pas, kind, ev):
        rows[(pas, kind)][0] += ev.cpu_time_total
        rows[(pas, kind)][1] += 1
        leaf_self(ev, leaves[(pas, kind)])

    def note(ev, kind):
        if ev.sequence_nr >= 0:
            owner.setdefault(ev.sequence_nr, []).append((ev, kind))
        for c in ev.cpu_children:
            note(c, kind)

    def node_kind(ev):
        node = ev.name[len(NODE):]
        if "AccumulateGrad" in node:
            return "grad_accum"
        cands = owner.get(ev.sequence_nr, [])
        named = [k for e, k in cands if squash(e.name) == squash(node)]
        kinds = set(named or [k for _, k in cands])
        return kinds.pop() if len(kinds) == 1 else None

    def walk(ev, pas):
        if pas == "forward":
            kind = kind_of(ev)
        elif pas == "backward":  # the nodes; clipping's ops are outside
            kind = node_kind(ev) if ev.name.startswith(NODE) else None
        else:
            kind = "update" if ev.name.startswith("Optimizer.") else None
        if kind is not None:
            if pas == "forward":
                note(ev, kind)
            give(pas, kind, ev)
            return
        rows[(pas, "outside")][0] += ev.self_cpu_time_total
        if ev.name.startswith("aten::") or ev.name.startswith(NODE):
            unmapped[(pas, ev.name)] += ev.self_cpu_time_total
        for c in ev.cpu_children:
            walk(c, pas)

    for ev in sorted((e for e in events if e.cpu_parent is None), key=lambda e: e.time_range.start):
        if ev.name.startswith("prof_ops:"):
            pas = ev.name[len("prof_ops:"):]
            rows[(pas, "outside")][0] += ev.self_cpu_time_total
            for c in ev.cpu_children:
                walk(c, pas)
    return rows, leaves, unmapped


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["cnn", "gpt"], required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--momentum", type=float, default=0.9)
    for flag in ("layers", "heads", "embd", "block"):
        p.add_argument("--" + flag, type=int, default=None)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--attn", choices=["composed", "sdpa"], default="composed")
    a = p.parse_args()

    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    if a.model == "gpt":
        if None in (a.layers, a.heads, a.embd, a.block):
            p.error("--model gpt needs --layers, --heads, --embd and --block")
        model = torch_gpt.GPT(a)
        batches = [torch.randint(0, torch_gpt.VOCAB, (a.batch, a.block + 1)) for _ in range(4)]
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr or 1e-3, weight_decay=a.weight_decay)

        def loss_of(tokens):
            return F.cross_entropy(model(tokens[:, :-1]), tokens[:, 1:].reshape(-1))
    else:
        model = torch_train.cnn()
        batches = [(torch.randn(a.batch, 3, 32, 32), torch.randint(0, 10, (a.batch,))) for _ in range(4)]
        opt = torch.optim.SGD(model.parameters(), lr=a.lr or 0.01, momentum=a.momentum)

        def loss_of(batch):
            return F.cross_entropy(model(batch[0]), batch[1])

    clip = a.clip if a.model == "gpt" else 0.0

    def step(batch):
        with record_function("prof_ops:update"):
            opt.zero_grad(set_to_none=True)
        with record_function("prof_ops:forward"):
            loss = loss_of(batch)
        with record_function("prof_ops:backward"):
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        with record_function("prof_ops:update"):
            opt.step()

    ms = []
    for s in range(WARMUP):
        t0 = time.perf_counter()
        step(batches[s % len(batches)])
        ms.append((time.perf_counter() - t0) * 1e3)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for s in range(a.steps):
            t0 = time.perf_counter()
            step(batches[s % len(batches)])
            ms.append((time.perf_counter() - t0) * 1e3)
    rows, leaves, unmapped = attribute(prof.events())
    n = a.steps
    for (pas, kind), (us, count) in sorted(rows.items()):
        print(f"row {pas} {kind} {us / 1e3 / n:.4f} {count / n:g}")
        if leaves[(pas, kind)]:
            name, self_us = leaves[(pas, kind)].most_common(1)[0]
            print(f"leaf {pas} {kind} {name.replace(' ', '_')} {self_us / 1e3 / n:.4f}")
    for (pas, name), us in unmapped.most_common():
        print(f"unmapped {pas} {name.replace(' ', '_')} {us / 1e3 / n:.4f}")
    report(ms)


if __name__ == "__main__":
    main()
