"""torch_report.py — the closing lines the PyTorch benchmarks print, in the
form of the examples' --time output (examples/common.c), so the shell
scripts read tdbg and PyTorch alike."""
import resource
import statistics

WARMUP = 3  # steps not timed, as examples/common.c


def report(ms, compile_ms=None, device=None, cpu_ms=None):
    """`time: ...` over the steps after WARMUP (with the examples'
    total_ms and cpu_ms when the steps' CPU times are given), `memory: ...`
    (with the device's peak on a GPU), and the compile time when there was
    one."""
    cut = WARMUP if len(ms) > WARMUP else 0
    ms = ms[cut:]
    cpu = f" total_ms={sum(ms):.3f} cpu_ms={sum(cpu_ms[cut:]):.3f}" if cpu_ms is not None else ""
    print(f"time: ms_per_step median={statistics.median(ms):.3f} min={min(ms):.3f} "
          f"max={max(ms):.3f} steps={len(ms)}{cpu}")
    line = f"memory: peak_rss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}"
    if device is not None and device.type == "cuda":
        import torch
        line += f" peak_device_bytes={torch.cuda.max_memory_allocated(device)}"
    print(line)
    if compile_ms is not None:
        print(f"compile_ms={compile_ms:.1f}")
