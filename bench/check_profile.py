"""Where one `graphsafe.check` spends its host time: bench/harness_throughput.py's op (x*2+1 over 4096 floats,
2 patterns x 3 replays) checked `--checks` times under cProfile, per check.

Two tables: graphsafe's own functions by cumulative time (the protocol's steps: capture, replay, eager,
comparison, the backend's scopes and timing marks), and every function by its own time (where the time is
finally spent: device synchronizations, launches, allocator calls, Python), each with its calls per check.
cProfile adds a cost to every call it sees, so the profiled check is slower than the plain one printed first
(the median of as many checks, unprofiled): read shares and compare rows of the same run.

    python -m bench.check_profile [--backend auto|cpu|gpu] [--checks 200] [--top 25] [--out profile.csv]
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import pstats
import statistics
import time
from pathlib import Path

import graphsafe
from bench.harness_throughput import CASE
from graphsafe import check
from graphsafe.toolkit import get_backend

PACKAGE = Path(graphsafe.__file__).resolve().parent


def _label(filename: str, line: int, name: str) -> str:
    path = Path(filename)
    if filename == "~":  # a C function: cProfile names it in full
        return name
    try:
        return f"graphsafe/{path.resolve().relative_to(PACKAGE)}:{line}({name})"
    except ValueError:
        return f"{path.name}:{line}({name})"


def _is_graphsafe(filename: str) -> bool:
    return filename != "~" and Path(filename).resolve().is_relative_to(PACKAGE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.check_profile", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    parser.add_argument("--checks", type=int, default=200, help="checks timed and profiled (default 200)")
    parser.add_argument("--top", type=int, default=25, help="rows per table (default 25)")
    parser.add_argument("--out", type=Path, help="also write both tables as CSV")
    args = parser.parse_args(argv)
    if args.checks < 1 or args.top < 1:
        parser.error(f"--checks and --top must be >= 1, got {args.checks} and {args.top}")
    be = get_backend(args.backend)
    for _ in range(5):  # builds, allocator segments, first-call caches
        check(CASE, be)
    plain = []
    for _ in range(args.checks):
        began = time.perf_counter()
        check(CASE, be)
        plain.append((time.perf_counter() - began) * 1e3)
    profiler = cProfile.Profile()
    began = time.perf_counter()
    profiler.enable()
    for _ in range(args.checks):
        result = check(CASE, be)
    profiler.disable()
    profiled_ms = (time.perf_counter() - began) * 1e3 / args.checks
    if result.verdict != "pass":
        print(f"the bench op's check gave {result.verdict}: {result.detail}")
        return 1
    print(f"backend: {be.describe()}")
    print(f"check, median of {args.checks} unprofiled: {statistics.median(plain):.3f} ms")
    print(f"check under cProfile, mean: {profiled_ms:.3f} ms")
    n = args.checks
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    # (filename, line, name) -> (primitive calls, calls, own seconds, cumulative seconds, callers)
    rows = [
        (_label(*key), _is_graphsafe(key[0]), calls / n, own * 1e3 / n, cumulative * 1e3 / n)
        for key, (_, calls, own, cumulative, _) in stats.items()
    ]
    tables = {
        "graphsafe functions by cumulative time": sorted((r for r in rows if r[1]), key=lambda r: -r[4])[
            : args.top
        ],
        "every function by own time": sorted(rows, key=lambda r: -r[3])[: args.top],
    }
    for title, table in tables.items():
        print(f"\n{title} (per check)")
        print(f"  {'cumulative ms':>13s} {'own ms':>8s} {'calls':>7s}  function")
        for label, _, calls, own, cumulative in table:
            print(f"  {cumulative:13.4f} {own:8.4f} {calls:7.1f}  {label}")
    if args.out:
        with args.out.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(
                ["table", "function", "calls_per_check", "own_ms_per_check", "cumulative_ms_per_check"]
            )
            for title, table in tables.items():
                for label, _, calls, own, cumulative in table:
                    writer.writerow([title, label, round(calls, 2), round(own, 5), round(cumulative, 5)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
