"""Where a full check's time goes beyond its two patterns' capture/replay/eager/compare (bench/harness_throughput.py
shows a check at about 7 x one pattern): cProfile of N checks of the throughput case, sorted by own time, with
the callees of capture_end and of the protocol's per-replay comparison, and the wall time per check without the
profiler.

    python3 reports/measurements/h200-2026-12-01-session7/profile_capture.py [--checks 200]
"""

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from harness import check  # noqa: E402
from harness.backends import get_backend  # noqa: E402
from harness_throughput import CASE  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--checks", type=int, default=200)
args = parser.parse_args()
be = get_backend("gpu")
check(CASE, be)
samples = []
for _ in range(args.checks):
    start = time.perf_counter()
    check(CASE, be)
    samples.append(time.perf_counter() - start)
print(f"unprofiled: median {statistics.median(samples) * 1e3:.3f} ms per check")
profile = cProfile.Profile()
profile.enable()
for _ in range(args.checks):
    check(CASE, be)
profile.disable()
stats = pstats.Stats(profile)
stats.sort_stats("tottime").print_stats(35)
stats.sort_stats("cumulative").print_callees("capture_end|_compare_replay|_new_pool|_fresh_eager")
