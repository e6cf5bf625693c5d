"""Harness throughput: differential checks per second for a small op, where one check's time goes, and what a
comparison costs against the device's own copy bandwidth, all measured in the same run.

One run measures, on whichever backend is available (`--backend auto`):
  * checks/s: full `graphsafe.check` calls (both patterns, 3 replays each) on x*2+1 over 4096 floats (the mean,
    and the median and 10th / 90th percentiles of single checks: on the H200 the host's speed moved the mean
    4.3-7.3 ms between runs of the same code, reports/performance.md);
  * one check split into capture, replay, eager and compare, each the median over `--repeats` runs, inside
    the backend's poisoned-allocation scope as in the protocol (the cpu backend's byte-pattern mode included);
  * the op's own time (eager, synchronized) for scale;
  * a 64 MiB float32 comparison (`compare`, the clean path: one host read) against a device copy of the same
    64 MiB and the op x*2+1 on it: bandwidth = bytes the comparison must read (out and ref, 128 MiB) / time,
    copy bandwidth = bytes a copy moves (read + write, 128 MiB) / time.
Targets (issue 17, H200): a full check <= 5 ms (>= 200 checks/s), compare of 4096 floats <= 0.1 ms, the 64 MiB
compare at >= 0.5 of the copy's bandwidth.

    python bench/harness_throughput.py [--backend auto|cpu|gpu] [--repeats 50] [--out bench.csv] [--clock wall]

`--clock process` times with this process's CPU time instead of the wall clock: on a shared CPU machine
(OMP_NUM_THREADS=1) it counts the work a check does, not the time other jobs held the cores. GPU figures
need the wall clock.
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

from graphsafe import Case, check
from graphsafe.toolkit import compare, comparison_pass, get_backend

N = 4096
LARGE_BYTES = 64 << 20
REPLAYS = 3


def _inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N, generator=g).to(device)}


def _op(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


CASE = Case("bench_affine_4096", _inputs, _op, lambda x: x.double().mul(2).add(1).float())


CLOCK: list[Callable[[], float]] = [time.perf_counter]


def _median_ms(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    clock = CLOCK[0]
    samples = []
    for _ in range(repeats):
        sync()
        start = clock()
        fn()
        sync()
        samples.append((clock() - start) * 1e3)
    return statistics.median(samples)


def _large(device: torch.device, repeats: int, sync: Callable[[], None]) -> tuple[float, float, float]:
    """64 MiB float32: (copy, op, clean compare) in ms, on the same data in the same scope."""
    big = torch.randn(LARGE_BYTES // 4, generator=torch.Generator().manual_seed(2)).to(device)
    big_ref = big * (1 + 1e-7)  # agrees within the float32 threshold: the clean path
    assert compare(big, big_ref, 1e-5).ok
    dst = torch.empty_like(big)
    return (
        _median_ms(lambda: dst.copy_(big), repeats, sync),
        _median_ms(lambda: _op(big), repeats, sync),
        _median_ms(lambda: compare(big, big_ref, 1e-5), repeats, sync),
    )


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

        copy_ms, large_op_ms, large_compare_ms = _large(be.device, max(3, repeats // 5), sync)
    check(CASE, be)  # warm caches (kernel builds, allocator) before timing whole checks
    clock = CLOCK[0]
    start = clock()
    checks: list[float] = []  # each check's ms: the mean is the throughput, the spread shows the host's
    while len(checks) < repeats or clock() - start < 1.0:
        began = clock()
        result = check(CASE, be, replays=REPLAYS)
        checks.append((clock() - began) * 1e3)
        assert result.verdict == "pass", result.detail
    check_ms = (clock() - start) * 1e3 / len(checks)
    checks.sort()
    one_pattern = capture_ms + REPLAYS * (replay_ms + eager_ms + compare_ms)
    gbps = 2 * LARGE_BYTES / 1e6  # 128 MiB moved, in MB; / ms = GB/s
    compare_bw, copy_bw = gbps / large_compare_ms, gbps / copy_ms
    rows += [
        ("op (eager, synchronized)", op_ms, "ms"),
        ("capture (warm-up + capture)", capture_ms, "ms"),
        ("replay (copy B + replay)", replay_ms, "ms"),
        ("eager (clone + op)", eager_ms, "ms"),
        (f"compare, {N} float32", compare_ms, "ms"),
        (f"one pattern: capture + {REPLAYS} x (replay + eager + compare)", one_pattern, "ms"),
        ("graphsafe.check (2 patterns, full protocol)", check_ms, "ms"),
        ("graphsafe.check, median of single checks", statistics.median(checks), "ms"),
        ("graphsafe.check, 10th percentile", checks[len(checks) // 10], "ms"),
        ("graphsafe.check, 90th percentile", checks[9 * len(checks) // 10], "ms"),
        ("checks per second", 1e3 / check_ms, "1/s"),
        ("check / op time", check_ms / op_ms if op_ms > 0 else float("inf"), "x"),
        ("64 MiB: device copy", copy_ms, "ms"),
        ("64 MiB: op x*2+1", large_op_ms, "ms"),
        ("64 MiB: compare (clean)", large_compare_ms, "ms"),
        ("64 MiB: copy bandwidth (read + write)", copy_bw, "GB/s"),
        ("64 MiB: compare bandwidth (out + ref read)", compare_bw, "GB/s"),
        ("64 MiB: compare bandwidth / copy bandwidth", compare_bw / copy_bw, "x"),
        ("64 MiB: compare time / op time", large_compare_ms / large_op_ms, "x"),
    ]
    clock_name = "process CPU time" if CLOCK[0] is time.process_time else "wall clock"
    print(f"backend: {be.describe()}; torch threads: {torch.get_num_threads()}; {clock_name}")
    print(f"comparison pass: {comparison_pass(x)}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    parser.add_argument("--repeats", type=int, default=50, help="samples per timed phase (median reported)")
    parser.add_argument("--out", type=Path, help="also write the table as CSV")
    parser.add_argument("--clock", default="wall", choices=("wall", "process"), help="see the module note")
    args = parser.parse_args(argv)
    CLOCK[0] = time.process_time if args.clock == "process" else time.perf_counter
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
