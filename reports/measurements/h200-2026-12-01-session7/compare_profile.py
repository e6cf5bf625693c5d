"""Where compare()'s host time goes on a GPU: cProfile of N compare() calls of 4096 floats (clean, one native
batch each), sorted by own time, and the call's median wall time without the profiler for scale.

    python3 reports/measurements/h200-2026-12-01-session7/compare_profile.py [--calls 3000]
"""

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness.compare import compare  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--calls", type=int, default=3000)
args = parser.parse_args()
out = torch.randn(4096, device="cuda")
ref = out * (1 + 1e-7)
for _ in range(50):
    assert compare(out, ref, 1e-5).ok
samples = []
for _ in range(args.calls):
    start = time.perf_counter()
    compare(out, ref, 1e-5)
    samples.append(time.perf_counter() - start)
print(f"unprofiled: median {statistics.median(samples) * 1e6:.1f} us per compare() of 4096 floats")
profile = cProfile.Profile()
profile.enable()
for _ in range(args.calls):
    compare(out, ref, 1e-5)
profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(40)
