"""Checks on one GPU shared by several processes, as `graphsafe verify --jobs` runs them: checks per second of
N processes checking at once against one process alone, and the device synchronizations a check makes (each
host wait costs far more once the processes' contexts take turns on the GPU; harness/DESIGN.md, "Workers share
one GPU").

Each process imports graphsafe, makes two warm-up checks of bench/harness_throughput.py's op (x*2+1 over 4096
floats, 2 patterns x 3 replays), waits until every process is ready, then checks it until `--seconds` have
passed, counting torch's device synchronizations and the time spent in them (torch._C._cuda_synchronize:
torch.cuda.synchronize and the gpu backend's `synchronize` both end there; the comparison pass's own stream wait
is not one of them). One process alone runs first, the same way, as the peer.

    python -m bench.contention [--procs 8] [--seconds 6] [--backend gpu|cpu] [--out contention.csv]

`--backend cpu` runs the same on the CPU backend (no device synchronizations; a smoke run of the bench).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _worker(backend: str, seconds: float) -> None:
    import torch

    from bench.harness_throughput import CASE
    from graphsafe import check
    from graphsafe.toolkit import get_backend

    be = get_backend(backend)
    for _ in range(2):
        check(CASE, be)
    syncs = [0, 0.0]  # count, seconds waited
    if backend == "gpu":
        original = torch._C._cuda_synchronize

        def counted() -> None:
            began = time.perf_counter()
            original()
            syncs[0] += 1
            syncs[1] += time.perf_counter() - began

        torch._C._cuda_synchronize = counted
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())  # the same wall-clock start for every process
    while time.time() < start_at:
        time.sleep(0.001)
    samples: list[float] = []
    verdicts: set[str] = set()
    end = start_at + seconds
    while time.time() < end or not samples:
        began = time.perf_counter()
        verdicts.add(check(CASE, be).verdict)
        samples.append((time.perf_counter() - began) * 1e3)
    print(
        json.dumps(
            {
                "checks": len(samples),
                "median_ms": statistics.median(samples),
                "syncs_per_check": syncs[0] / len(samples),
                "ms_per_sync": syncs[1] * 1e3 / syncs[0] if syncs[0] else 0.0,
                "verdicts": sorted(verdicts),
            }
        ),
        flush=True,
    )


def _run(procs: int, backend: str, seconds: float) -> list[dict]:
    """`procs` worker processes started together; each one's JSON line."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    command = [sys.executable, "-m", "bench.contention", "--worker", "--backend", backend]
    workers = [
        subprocess.Popen(
            [*command, "--seconds", str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for _ in range(procs)
    ]
    for worker in workers:  # every process has imported torch and warmed up
        assert worker.stdout is not None
        line = worker.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"a worker did not start (exit {worker.wait()}): {line!r}")
    start_at = time.time() + 0.5
    results = []
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write(f"{start_at}\n")
        worker.stdin.flush()
    for worker in workers:
        out, _ = worker.communicate()
        if worker.returncode != 0 or not out.strip():
            raise RuntimeError(f"a worker failed (exit {worker.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.contention", description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=8, help="processes checking at once (default 8)")
    parser.add_argument("--seconds", type=float, default=6.0, help="each run's checking window")
    parser.add_argument("--backend", default="gpu", choices=("gpu", "cpu"))
    parser.add_argument("--out", type=Path, help="also write the table as CSV")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.backend, args.seconds)
        return 0
    if args.procs < 1 or args.seconds <= 0:
        parser.error(f"--procs must be >= 1 and --seconds > 0, got {args.procs} and {args.seconds}")
    if args.backend == "gpu":
        import torch

        if not torch.cuda.is_available():
            print("bench/contention.py: no CUDA/ROCm device; skipped (--backend cpu runs it on the CPU)")
            return 0
    rows = []
    for procs in (1, args.procs):
        results = _run(procs, args.backend, args.seconds)
        if any(r["verdicts"] != ["pass"] for r in results):
            print(f"verdicts other than pass: {[r['verdicts'] for r in results]}", file=sys.stderr)
            return 1
        checks = sum(r["checks"] for r in results)
        rows.append(
            {
                "procs": procs,
                "checks": checks,
                "checks_per_s": round(checks / args.seconds, 1),
                "median_ms_per_check": round(statistics.median(r["median_ms"] for r in results), 3),
                "slowest_process_median_ms": round(max(r["median_ms"] for r in results), 3),
                "device_syncs_per_check": round(statistics.median(r["syncs_per_check"] for r in results), 2),
                "ms_per_device_sync": round(statistics.median(r["ms_per_sync"] for r in results), 3),
            }
        )
        print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    alone, together = rows
    print(
        f"{args.procs} processes together: {together['checks_per_s'] / alone['checks_per_s']:.2f}x the checks of one"
    )
    if args.out:
        with args.out.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
