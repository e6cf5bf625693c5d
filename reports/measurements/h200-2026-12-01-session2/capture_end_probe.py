"""Why capture_end takes ~1.7 ms inside GpuBackend.capture and 0.007 ms in capture_costs.py: time
CUDAGraph.capture_end (and the whole capture) in GpuBackend.capture with one ingredient of the protocol
switched off at a time. Usage: python capture_end_probe.py [N]"""
import contextlib
import statistics
import sys
import time

import torch

from harness.backends import gpu as G
from harness import poison

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
x = torch.randn(4096, device="cuda")
END: list[float] = []
original_end = torch.cuda.CUDAGraph.capture_end


def timed_end(self):
    t = time.perf_counter()
    original_end(self)
    END.append((time.perf_counter() - t) * 1e3)


torch.cuda.CUDAGraph.capture_end = timed_end


def op():
    with poison.op_call_poisoning():
        return x * 2 + 1


def measure(label):
    be = G.GpuBackend()
    END.clear()
    whole = []
    for _ in range(n):
        with be.poisoned_allocation(0xFF):
            t = time.perf_counter()
            g = be.capture(op)
            whole.append((time.perf_counter() - t) * 1e3)
            g.release()
    print(f"{label:45s} capture_end {statistics.median(END):.3f} ms  whole capture {statistics.median(whole):.3f} ms")


measure("as in the protocol")
saved = G._sync_debug_error
G._sync_debug_error = contextlib.nullcontext
measure("no sync debug mode")
G._sync_debug_error = saved
saved_fill = G.deterministic_fill
G.deterministic_fill = contextlib.nullcontext
measure("no deterministic fill")
G.deterministic_fill = saved_fill
saved_pool = G._new_pool
G._new_pool = lambda: None
measure("default pool (no poisoning pool)")
G._new_pool = saved_pool
torch.cuda.set_sync_debug_mode("error")
t = time.perf_counter(); torch.cuda.set_sync_debug_mode(0); print(f"set_sync_debug_mode: {(time.perf_counter() - t) * 1e3:.3f} ms")
g = torch.cuda.CUDAGraph(keep_graph=True)
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    g.capture_begin()
    torch.cuda.set_sync_debug_mode("error")
    y = x * 2
    torch.cuda.set_sync_debug_mode(0)
    END.clear()
    g.capture_end()
print(f"bare capture_end after a sync-debug toggle: {END[0]:.3f} ms")
