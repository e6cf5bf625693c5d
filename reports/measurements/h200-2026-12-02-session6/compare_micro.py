"""Where one `compare` call's time goes on a GPU, for 4096 floats and for 64 MiB: the whole call, the native
batch (launch + wait + read), the bare library calls with ready arguments, and torch peers in the same run
(an empty synchronize, a one-kernel op + synchronize, a copy of the same bytes). Medians over --repeats, in µs.

    python3 reports/measurements/h200-2026-12-02-session6/compare_micro.py [--repeats 200]
"""

import argparse
import ctypes
import statistics
import struct
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness.compare import compare  # noqa: E402
from harness.native import gpu_library  # noqa: E402
from harness.scan import _NativeBatch, _raw_stream  # noqa: E402


def median_us(fn, repeats):
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args()
    lib = gpu_library()["lib"]
    for n in (4096, 16 << 20):
        out = torch.randn(n, device="cuda")
        ref = out * (1 + 1e-7)
        dst = torch.empty_like(out)
        assert compare(out, ref, 1e-5).ok
        stream = _raw_stream(out.device)
        jobs = struct.pack("<4q", out.data_ptr(), ref.data_ptr(), n, 0)
        words = (ctypes.c_uint * 4)()

        def bare():
            lib.graphsafe_scan_run(1, jobs, stream, words)

        def batch():
            nb = _NativeBatch()
            nb.floats(out, ref)
            nb.run()

        rows = {
            "torch.cuda.synchronize alone": lambda: None,
            "torch op out.add(0) + sync": lambda: out.add(0),
            "copy of out (dst.copy_) + sync": lambda: dst.copy_(out),
            "graphsafe_scan_run (ctypes, ready args)": bare,
            "_NativeBatch floats + run": batch,
            "compare(out, ref, 1e-5)": lambda: compare(out, ref, 1e-5),
        }
        print(f"n = {n} float32 ({n * 4 / 2**20:.3f} MiB each)")
        for name, fn in rows.items():
            for _ in range(10):
                fn()
            print(f"  {name:45s} {median_us(fn, args.repeats):9.1f} us")


if __name__ == "__main__":
    main()
