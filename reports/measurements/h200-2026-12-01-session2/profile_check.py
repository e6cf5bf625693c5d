"""cProfile of N full harness.check calls of bench/harness_throughput.py's 4096-float case on the GPU."""

import cProfile
import pstats
import sys
import time

sys.path.insert(0, "bench")
import harness_throughput as ht

from harness import check

n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
for _ in range(3):
    check(ht.CASE, backend="gpu")
prof = cProfile.Profile()
start = time.perf_counter()
prof.enable()
for _ in range(n):
    check(ht.CASE, backend="gpu")
prof.disable()
print(f"{(time.perf_counter() - start) / n * 1e3:.2f} ms per check (profiled)")
stats = pstats.Stats(prof)
stats.sort_stats("cumulative").print_stats(45)
stats.sort_stats("tottime").print_stats(30)
