#!/usr/bin/python3
"""interop_prof_json.py FILE [OP...]: reads a tdbg profiler trace with
Python's json module alone (strict: no NaN, no duplicate keys), as a viewer
would, and checks it against docs/profiler.md "The trace format": the
fields and their types, ops of one thread never overlapping, every op
inside a phase of its step, the phases tiling each step within 10%, the
memory counters, and that each OP named is there. Prints "interop ok:
S steps, N ops" and exits 0; prints each problem and exits 1."""
import json
import sys


def no_constants(name):
    raise ValueError(f"non-standard JSON constant {name}")


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise ValueError(f"duplicate keys {sorted(dup)}")
    return dict(pairs)


problems = []


def problem(what):
    problems.append(what)


def main():
    path, want = sys.argv[1], sys.argv[2:]
    with open(path, encoding="utf-8") as f:
        root = json.load(f, parse_constant=no_constants, object_pairs_hook=no_duplicates)
    if root.get("displayTimeUnit") != "ms" or root.get("otherData", {}).get("tdbg") != 1:
        problem("displayTimeUnit or otherData.tdbg missing")
    events = root["traceEvents"]
    steps, phases, ops = {}, [], []
    for i, e in enumerate(events):
        where = f"event {i}"
        if not isinstance(e.get("ph"), str):
            problem(f"{where}: no ph")
            continue
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            problem(f"{where}: pid or tid is not an integer")
        if e["ph"] == "C":
            a = e.get("args", {})
            if not (0 <= a.get("live", -1) <= a.get("peak", -1)):
                problem(f"{where}: memory counter live {a.get('live')} peak {a.get('peak')}")
            continue
        if e["ph"] != "X":
            continue
        for k in ("ts", "dur"):
            if not isinstance(e.get(k), (int, float)) or e[k] < 0:
                problem(f"{where}: {k} is not a number >= 0")
        step = e.get("args", {}).get("step")
        if not isinstance(step, int) or step < 0:
            problem(f"{where}: args.step {step!r}")
        span = (e["ts"], e["ts"] + e["dur"], e["tid"], step)
        if e["cat"] == "step":
            if step in steps:
                problem(f"{where}: step {step} twice")
            steps[step] = span
        elif e["cat"] == "phase":
            phases.append(span)
        elif e["cat"] == "op":
            for k, t in (("type", str), ("phase", str), ("dtype", str), ("device", str), ("shape", list)):
                if not isinstance(e["args"].get(k), t):
                    problem(f"{where}: args.{k} is not a {t.__name__}")
            ops.append((span, e["name"]))
    eps = 1e-3  # the writer's 3 decimals of us
    for step, (t0, t1, tid, _) in steps.items():
        mine = [p for p in phases if p[3] == step]
        total = sum(p[1] - p[0] for p in mine)
        if not (0.9 * (t1 - t0) <= total <= (t1 - t0) + eps):
            problem(f"step {step}: phases sum to {total:.3f} us of {t1 - t0:.3f}")
        for p in mine:
            if p[0] < t0 - eps or p[1] > t1 + eps:
                problem(f"step {step}: a phase outside it")
    by_tid = {}
    for (t0, t1, tid, step), name in ops:
        by_tid.setdefault(tid, []).append((t0, t1, name))
        if not any(p[3] == step and p[2] == tid and p[0] - eps <= t0 and t1 <= p[1] + eps for p in phases):
            problem(f"op {name!r} of step {step} is in no phase of its step")
    for tid, spans in by_tid.items():
        spans.sort()
        for a, b in zip(spans, spans[1:]):
            if b[0] < a[1] - eps:
                problem(f"thread {tid}: {a[2]!r} and {b[2]!r} overlap")
    names = {n for _, n in ops}
    for n in want:
        if n not in names:
            problem(f"no op named {n!r}")
    if not steps or not ops:
        problem("no steps or no ops")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"interop ok: {len(steps)} steps, {len(ops)} ops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
