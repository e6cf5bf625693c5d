"""Where one full harness.check of bench/harness_throughput.py's 4096-float case spends its time on the GPU:
(1) each named function wrapped with a wall-clock accumulator (nested phases also count in their parents),
(2) the CUDA runtime calls of N checks under torch.profiler (count and host time per call kind),
(3) the wall time per check with nothing wrapped, before and after.

    python3 reports/measurements/h200-2026-12-02-session8/check_timeline.py [--checks 200]
"""

import argparse
import functools
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
from harness_throughput import CASE  # noqa: E402

from harness import check, compare, protocol, scan, verdict_rules  # noqa: E402
from harness.backends import get_backend, gpu  # noqa: E402
from harness.case import Case  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--checks", type=int, default=200)
args = parser.parse_args()
be = get_backend("gpu")


def wall_per_check(label: str) -> None:
    for _ in range(10):
        check(CASE, be)
    samples = []
    for _ in range(args.checks):
        start = time.perf_counter()
        check(CASE, be)
        samples.append(time.perf_counter() - start)
    samples.sort()
    print(
        f"{label}: median {statistics.median(samples) * 1e3:.3f} ms per check, "
        f"p10 {samples[len(samples) // 10] * 1e3:.3f}, p90 {samples[9 * len(samples) // 10] * 1e3:.3f}"
    )


wall_per_check("unwrapped, before")

TOTAL: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
RESTORE = []


def timed(owner, name, label=None, also=()):
    original = getattr(owner, name)
    label = label or f"{getattr(owner, '__name__', owner)}.{name}"

    @functools.wraps(original)
    def wrapper(*a, **k):
        start = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            TOTAL[label] += time.perf_counter() - start
            CALLS[label] += 1

    RESTORE.append((owner, name, original))
    setattr(owner, name, wrapper)
    for other in also:
        RESTORE.append((other, name, getattr(other, name)))
        setattr(other, name, wrapper)


timed(gpu, "_new_pool", "gpu._new_pool")
timed(gpu._LIFE, "drain", "gpu._LIFE.drain")
timed(gpu.GpuBackend, "capture", "GpuBackend.capture")
timed(gpu.GpuBackend, "_capture_into", "GpuBackend._capture_into")
timed(gpu.GpuBackend, "_reclaim", "GpuBackend._reclaim")
timed(gpu.GpuBackend, "_open_eager", "GpuBackend._open_eager")
timed(gpu.GpuBackend, "_close_eager", "GpuBackend._close_eager")
timed(gpu.GpuBackend, "_close_scope", "GpuBackend._close_scope")
timed(gpu.GpuBackend, "synchronize", "GpuBackend.synchronize")
timed(gpu.GpuBackend, "mark", "GpuBackend.mark")
timed(gpu.GpuBackend, "elapsed_ms", "GpuBackend.elapsed_ms")
timed(gpu.GpuCapturedGraph, "release", "GpuCapturedGraph.release")
timed(torch.cuda.CUDAGraph, "capture_begin", "CUDAGraph.capture_begin")
timed(torch.cuda.CUDAGraph, "capture_end", "CUDAGraph.capture_end")
timed(torch.cuda.CUDAGraph, "instantiate", "CUDAGraph.instantiate")
timed(torch.cuda.CUDAGraph, "replay", "CUDAGraph.replay")
timed(torch.cuda.CUDAGraph, "reset", "CUDAGraph.reset")
timed(protocol, "_check_pattern", "protocol._check_pattern")
timed(protocol, "_replay", "protocol._replay")
timed(protocol, "_fresh_eager", "protocol._fresh_eager")
timed(protocol, "_compare_replay", "protocol._compare_replay")
timed(protocol, "_verdict_row", "verdict_rules._verdict_row")
timed(protocol, "_validate_pairs", "verdict_rules._validate_pairs")
timed(protocol, "_check_callable", "verdict_rules._check_callable")
timed(protocol, "op_generators", "hidden_state.op_generators")
timed(protocol, "PythonState", "hidden_state.PythonState()")
timed(protocol.CheckStore, "inputs", "CheckStore.inputs")
timed(protocol.CheckStore, "reference", "CheckStore.reference")
timed(verdict_rules, "_call_op", "verdict_rules._call_op (every op call)", also=(protocol,))
timed(compare, "compare_and_differ", "compare.compare_and_differ", also=(verdict_rules,))
timed(scan, "scan_and_differ", "scan.scan_and_differ")
timed(scan._NativeBatch, "run", "scan._NativeBatch.run")
timed(Case, "inputs", "Case.inputs (make_inputs)")

for _ in range(10):
    check(CASE, be)
TOTAL.clear()
CALLS.clear()
start = time.perf_counter()
for _ in range(args.checks):
    check(CASE, be)
per = (time.perf_counter() - start) / args.checks * 1e3
print(f"\nwrapped: {per:.3f} ms per check ({args.checks} checks)")
for label, seconds in sorted(TOTAL.items(), key=lambda kv: -kv[1]):
    print(f"  {label:<48} {seconds / args.checks * 1e3:8.3f} ms/check {CALLS[label] / args.checks:6.1f} calls/check")
for owner, name, original in reversed(RESTORE):
    setattr(owner, name, original)

print(f"\npoison allocator: {be.poison_stats()}")
from torch.profiler import ProfilerActivity, profile  # noqa: E402

n = min(args.checks, 50)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(n):
        check(CASE, be)
print(f"\ntorch.profiler, {n} checks: CUDA runtime / driver calls and top CPU ops, per check")
rows = []
for e in prof.key_averages():
    rows.append((e.key, e.count / n, e.self_cpu_time_total / n, e.device_time_total / n if hasattr(e, "device_time_total") else 0.0))
rows.sort(key=lambda r: -r[2])
print(f"  {'name':<60} {'calls':>7} {'self cpu us':>12} {'device us':>10}")
for key, count, cpu_us, dev_us in rows[:60]:
    print(f"  {key[:60]:<60} {count:7.1f} {cpu_us:12.1f} {dev_us:10.1f}")
print(f"poison allocator: {be.poison_stats()}")
wall_per_check("unwrapped, after")
