"""torch_report.py — the closing lines the PyTorch benchmarks print, in the
form of the examples' --time output (examples/common.c), so the shell
scripts read tdbg and PyTorch alike."""
import resource
import statistics

WARMUP = 3  # steps not timed, as examples/common.c


def report(ms, compile_ms=None, device=None):
    """`time: ...` over the steps after WARMUP, `memory: ...` (with the
    device's peak on a GPU), and the compile time when there was one."""
    ms = ms[WARMUP:] if len(ms) > WARMUP else ms
    print(f"time: ms_per_step median={statistics.median(ms):.3f} min={min(ms):.3f} "
          f"max={max(ms):.3f} steps={len(ms)}")
    line = f"memory: peak_rss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}"
    if device is not None and device.type == "cuda":
        import torch
        line += f" peak_device_bytes={torch.cuda.max_memory_allocated(device)}"
    print(line)
    if compile_ms is not None:
        print(f"compile_ms={compile_ms:.1f}")
