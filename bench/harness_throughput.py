"""Harness throughput: differential checks per second for a small op, and where one check's time goes.

Role: how much a check costs. One run measures, on whichever backend is available (`--backend auto`):
  * checks/s: full `harness.check` calls (both patterns, 3 replays each) on x*2+1 over 4096 floats;
  * one check split into capture, replay, eager and compare, each the median over `--repeats` runs;
  * the op's own time (eager, synchronized) for scale.
Target on the H200: a small-op check (capture, 3 replays, eager, compare) under 5 ms.

    python bench/harness_throughput.py [--backend auto|cpu|gpu] [--repeats 50] [--out bench.csv]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import Case, check
from harness.backends import get_backend
from harness.compare import compare

N = 4096
REPLAYS = 3


def _inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N, generator=g).to(device)}


def _op(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


CASE = Case("bench_affine_4096", _inputs, _op, lambda x: x.double().mul(2).add(1).float())


def _median_ms(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def measure(backend_name: str, repeats: int) -> list[tuple[str, float, str]]:
    be = get_backend(backend_name)
    sync = be.synchronize
    x = _inputs(0, be.device)["x"]
    b = _inputs(1, be.device)["x"]
    rows: list[tuple[str, float, str]] = []
    with be.poisoned_allocation(0xFF):
        op_ms = _median_ms(lambda: _op(x), repeats, sync)
        captured = []

        def capture() -> None:
            captured.append(be.capture(lambda: _op(x)))

        capture_ms = _median_ms(capture, repeats, sync)
        graph = captured.pop()
        for g in captured:
            g.release()

        def replay() -> None:
            x.copy_(b)
            graph.replay()

        replay_ms = _median_ms(replay, repeats, sync)
        eager_ms = _median_ms(lambda: _op(b.clone()), repeats, sync)
        ref = _op(b)
        compare_ms = _median_ms(lambda: compare(graph.outputs[0], ref, 1e-5), repeats, sync)
        graph.release()
    check(CASE, be)  # warm caches (kernel builds, allocator) before timing whole checks
    start = time.perf_counter()
    count = 0
    while count < repeats or time.perf_counter() - start < 1.0:
        result = check(CASE, be, replays=REPLAYS)
        assert result.verdict == "pass", result.detail
        count += 1
    check_ms = (time.perf_counter() - start) * 1e3 / count
    one_pattern = capture_ms + REPLAYS * (replay_ms + eager_ms + compare_ms)
    rows += [
        ("op (eager, synchronized)", op_ms, "ms"),
        ("capture (warm-up + capture)", capture_ms, "ms"),
        ("replay (copy B + replay)", replay_ms, "ms"),
        ("eager (clone + op)", eager_ms, "ms"),
        ("compare", compare_ms, "ms"),
        (f"one pattern: capture + {REPLAYS} x (replay + eager + compare)", one_pattern, "ms"),
        ("harness.check (2 patterns, full protocol)", check_ms, "ms"),
        ("checks per second", 1e3 / check_ms, "1/s"),
        ("check / op time", check_ms / op_ms if op_ms > 0 else float("inf"), "x"),
    ]
    print(f"backend: {be.describe()}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    parser.add_argument("--repeats", type=int, default=50, help="samples per timed phase (median reported)")
    parser.add_argument("--out", type=Path, help="also write the table as CSV")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    rows = measure(args.backend, args.repeats)
    width = max(len(r[0]) for r in rows)
    for name, value, unit in rows:
        print(f"{name:<{width}}  {value:10.3f} {unit}")
    if args.out:
        with args.out.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["metric", "value", "unit"])
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
