"""Host cost of the tensor attributes harness/scan.py reads per comparison (timeit, 200 000 calls each, on a
CPU tensor of 4096 floats; the attribute paths are the same for CUDA tensors), and of building a ctypes array
type against instantiating a cached one.

    python3 reports/measurements/cpu-2026-12-01-session7-scan/attr_costs.py
"""

import ctypes
import timeit

import torch

t = torch.randn(4096)
n = 200_000
for stmt in ("t.device", "t.device.type", "t.get_device()", "t.is_cuda", "t.is_cpu", "t.is_contiguous()"):
    print(f"{stmt:20s} {timeit.timeit(stmt, globals=globals(), number=n) / n * 1e9:6.0f} ns")
T = ctypes.c_uint * 8
print(f"{'(c_uint * 8)()':20s} {timeit.timeit('(ctypes.c_uint * 8)()', globals=globals(), number=n) / n * 1e9:6.0f} ns")
print(f"{'T() (cached type)':20s} {timeit.timeit('T()', globals=globals(), number=n) / n * 1e9:6.0f} ns")
