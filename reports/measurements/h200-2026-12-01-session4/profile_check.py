"""cProfile of harness.check on bench/harness_throughput.py's 4096-float case: where a full check's host time
goes, by function (tottime and cumtime), over N checks after one warm-up check.

    python3 reports/measurements/h200-2026-12-01-session4/profile_check.py --backend gpu --checks 200
"""

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from harness import check  # noqa: E402
from harness.backends import get_backend  # noqa: E402
from harness_throughput import CASE  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--backend", default="auto")
parser.add_argument("--checks", type=int, default=200)
parser.add_argument("--top", type=int, default=70)
args = parser.parse_args()
be = get_backend(args.backend)
check(CASE, be)
start = time.perf_counter()
for _ in range(args.checks):
    check(CASE, be)
print(f"unprofiled: {(time.perf_counter() - start) * 1e3 / args.checks:.3f} ms per check")
prof = cProfile.Profile()
prof.enable()
for _ in range(args.checks):
    check(CASE, be)
prof.disable()
stats = pstats.Stats(prof)
stats.sort_stats("tottime").print_stats(args.top)
stats.sort_stats("cumulative").print_stats(args.top + 30)
