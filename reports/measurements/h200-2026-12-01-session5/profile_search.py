"""cProfile of one searched case's whole search (harness.check on a case with declared sizes) after one
warm-up search, or (--first) of the process's first search after one check of a hand-listed case of the same
op: where a search's checks spend their time, by function.

    python3 reports/measurements/h200-2026-12-01-session5/profile_search.py NAME [--backend gpu] [--top 60]
        [--first WARM_CASE]
"""

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness import check  # noqa: E402
from harness.backends import get_backend  # noqa: E402
from harness.case import REGISTRY  # noqa: E402
from harness.suites import load_default_suites  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("name")
parser.add_argument("--backend", default="auto")
parser.add_argument("--top", type=int, default=60)
parser.add_argument("--first", default="", help="profile the first search, after one check of this case")
args = parser.parse_args()
os.environ.setdefault("GRAPHSAFE_SEARCH_DB", "/tmp/gs-search-profile")
load_default_suites()
case = REGISTRY.get(args.name)
be = get_backend(args.backend)
if args.first:
    start = time.perf_counter()
    check(REGISTRY.get(args.first), be)  # the op's library, the device and the protocol warmed up
    print(f"{args.first}: {time.perf_counter() - start:.3f} s")
for label in () if args.first else ("warm-up", "timed"):
    start = time.perf_counter()
    result = check(case, be)
    print(f"{label}: {time.perf_counter() - start:.3f} s, {result.verdict}: {result.detail[:200]}")
prof = cProfile.Profile()
prof.enable()
start = time.perf_counter()
result = check(case, be)
print(f"profiled: {time.perf_counter() - start:.3f} s")
prof.disable()
stats = pstats.Stats(prof)
stats.sort_stats("tottime").print_stats(args.top)
stats.sort_stats("cumulative").print_stats(args.top + 30)
