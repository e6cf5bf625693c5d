"""A 4096-float comparison through scan_host.cpp, with and without busy processes beside it: the source before
85def17 (an OpenMP team for every comparison) against the source now (one chunk on the calling thread).

    python small_compare_under_load.py OLD_SOURCE   # OLD_SOURCE: git show 85def17^:harness/native/scan_host.cpp
Prints median, mean and p99 microseconds of one graphsafe_scan_floats_host call, idle and with `nproc` busy loops.
"""

import ctypes
import multiprocessing
import pathlib
import statistics
import sys
import time

import torch

from harness.native import SCAN_HOST_SOURCE
from harness.native.build import build_shared_library


def load(name: str, source: pathlib.Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build_shared_library(name, [source], backend="cpu", extra_flags=("-O3",))))
    lib.graphsafe_scan_floats_host.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_longlong, ctypes.c_int,
                                                                      ctypes.POINTER(ctypes.c_float)]
    return lib


def times_us(lib: ctypes.CDLL, a: torch.Tensor, b: torch.Tensor, n: int = 400) -> str:
    result = (ctypes.c_float * 3)()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        lib.graphsafe_scan_floats_host(a.data_ptr(), b.data_ptr(), a.numel(), 0, result)
        samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return (f"median {statistics.median(samples):.1f} us, mean {statistics.mean(samples):.1f} us, "
            f"p99 {samples[int(0.99 * (n - 1))]:.1f} us")


def spin() -> None:
    while True:
        pass


if __name__ == "__main__":
    libs = {"before (OpenMP team per call)": load("gs_scan_host_before", pathlib.Path(sys.argv[1])),
            "now (one chunk on the caller)": load("gs_scan_host_now", SCAN_HOST_SOURCE)}
    a = torch.randn(4096)
    b = a.clone()
    for name, lib in libs.items():
        print(f"{name}: idle: {times_us(lib, a, b)}", flush=True)
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(multiprocessing.cpu_count())]
    for p in busy:
        p.start()
    time.sleep(1)
    for name, lib in libs.items():
        print(f"{name}: {len(busy)} busy processes: {times_us(lib, a, b, 200)}", flush=True)
    for p in busy:
        p.terminate()
