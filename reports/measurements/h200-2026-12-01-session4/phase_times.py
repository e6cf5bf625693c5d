"""Where a full harness.check of bench/harness_throughput.py's 4096-float case spends its time on the GPU,
without a profiler's overhead: each named function is wrapped with a wall-clock accumulator (nested phases
are counted in their parents too), then N checks run. Also times the pool primitives alone. (Session 3's script with session 4's functions.)

    python3 reports/measurements/h200-2026-12-01-session4/phase_times.py [N]
"""

import functools
import sys
import time
from collections import defaultdict

import torch

sys.path.insert(0, "bench")
import harness_throughput as ht

from harness import check, protocol, scan, verdict_rules
from harness.backends import gpu
from harness.case import Case

TOTAL: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)


def timed(owner, name, label=None, also=(), bound=False):
    original = getattr(owner, name)
    label = label or f"{getattr(owner, '__name__', owner)}.{name}"

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            TOTAL[label] += time.perf_counter() - start
            CALLS[label] += 1

    # bound: a classmethod, already bound to its class by getattr, so it goes back as a staticmethod.
    setattr(owner, name, staticmethod(wrapper) if bound else wrapper)
    for other in also:
        setattr(other, name, wrapper)


timed(gpu, "_new_pool", "gpu._new_pool")
timed(gpu._LIFE, "drain", "gpu._LIFE.drain")
timed(gpu.GpuBackend, "capture", "GpuBackend.capture")
timed(gpu.GpuBackend, "_close_scope", "GpuBackend._close_scope")
timed(gpu.GpuBackend, "poisoned_allocation", "GpuBackend.poisoned_allocation (enter only)")
timed(protocol, "_replay", "protocol._replay")
timed(protocol, "_compare_replay", "protocol._compare_replay")
timed(protocol, "_check_pattern", "protocol._check_pattern")
timed(verdict_rules, "_verdict_row", "verdict_rules._verdict_row", also=(protocol,))
timed(protocol.CheckStore, "inputs", "CheckStore.inputs (kept or made)")
timed(protocol.CheckStore, "reference", "CheckStore.reference (kept or made)")
timed(gpu.GpuBackend, "synchronize", "GpuBackend.synchronize")
timed(scan._NativeBatch, "_run_gpu", "scan._NativeBatch._run_gpu (launch + collect)", bound=True)
timed(gpu.GpuCapturedGraph, "release", "GpuCapturedGraph.release")
timed(protocol, "_fresh_eager", "protocol._fresh_eager")
timed(verdict_rules, "_validate_pairs", "verdict_rules._validate_pairs", also=(protocol,))
timed(verdict_rules, "_call_op", "verdict_rules._call_op (every op call)", also=(protocol,))
timed(Case, "inputs", "Case.inputs (make_inputs)")
timed(torch.cuda, "synchronize", "torch.cuda.synchronize")

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
for _ in range(5):
    check(ht.CASE, backend="gpu")
TOTAL.clear()
CALLS.clear()
start = time.perf_counter()
for _ in range(n):
    check(ht.CASE, backend="gpu")
per = (time.perf_counter() - start) / n * 1e3
print(f"{per:.3f} ms per check (wrapped, {n} checks)")
for label, seconds in sorted(TOTAL.items(), key=lambda kv: -kv[1]):
    print(f"  {label:<52} {seconds / n * 1e3:8.3f} ms/check  {CALLS[label] / n:6.1f} calls/check")

# The pool primitives alone.
alloc = gpu._load_poison_allocator()["allocator"]
torch.cuda.synchronize()
samples = defaultdict(list)
for _ in range(50):
    t0 = time.perf_counter()
    pool = torch.cuda.MemPool(alloc.allocator())
    t1 = time.perf_counter()
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(4096, device="cuda")
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    del x
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    del pool
    t4 = time.perf_counter()
    samples["MemPool()"].append(t1 - t0)
    samples["first alloc in it (malloc + memset) + sync"].append(t2 - t1)
    samples["~MemPool (emptyCache: free)"].append(t4 - t3)
for label, values in samples.items():
    values.sort()
    print(f"  {label:<52} median {values[len(values) // 2] * 1e3:.3f} ms")
