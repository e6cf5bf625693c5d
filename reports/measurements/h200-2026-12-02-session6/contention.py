"""Checks per second of one process alone and of N processes at once on one GPU, and where a check's wall time
goes in each (device synchronizations, the comparison batch's wait, captures, replays): whether the searched
cases' 4-5x slow-down inside `make verify` is the GPU's time-slicing between processes' contexts.

    python3 reports/measurements/h200-2026-12-02-session6/contention.py --procs 8 --seconds 6 [--case NAME]
        [--variant base|fewer_syncs]

Each of the N processes warms up (two checks), waits for a common start time, then runs checks of `--case`
(default: bench/harness_throughput.py's 4096-float op) until the window ends, timing the wrapped calls below.
`fewer_syncs` patches two synchronizations out of the protocol (the one before each replay, which only made
replay_ms exclude the queued copy of B; the drain at each graph's release, left to the scope's exit) to
measure what they cost, before the protocol itself is changed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TIMED = {}  # label -> [seconds, calls]


def timed(owner, name, label):
    import inspect

    static = inspect.getattr_static(owner, name)
    original = getattr(owner, name)  # bound already for a classmethod

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            slot = TIMED.setdefault(label, [0.0, 0])
            slot[0] += time.perf_counter() - start
            slot[1] += 1

    if isinstance(static, classmethod):
        setattr(owner, name, staticmethod(wrapper))  # `original` is bound to the class
    else:
        setattr(owner, name, wrapper)


def patch_fewer_syncs():
    from harness import protocol
    from harness.backends import gpu

    def _replay(be, graph, static, inputs_b, rng, case=None):
        protocol.poison_outputs(graph.outputs)
        import torch

        with torch.no_grad():
            for name, t in inputs_b.items():
                static[name].copy_(t)
        if case is not None:
            protocol.prepare_inputs(case, static)
        be.set_rng_state(rng)
        start = time.perf_counter()
        graph.replay()
        be.synchronize()
        return (time.perf_counter() - start) * 1e3

    protocol._replay = _replay

    def release(self):
        graph, pool = self._graph, self._pool
        if graph is None and pool is None:
            return
        self._graph = self._pool = None
        self.outputs = ()
        gpu._LIFE.retire(graph, pool)

    gpu.GpuCapturedGraph.release = release


def worker(args):
    import torch

    from harness import check
    from harness.backends import get_backend
    from harness.backends import gpu
    from harness import scan

    if args.variant == "fewer_syncs":
        patch_fewer_syncs()
    if args.case:
        from harness.case import REGISTRY
        from harness.suites import load_default_suites

        load_default_suites()
        case = REGISTRY.get(args.case)
    else:
        from harness_throughput import CASE as case
    be = get_backend(args.backend)
    for _ in range(2):
        check(case, be)
    if args.backend == "gpu":
        timed(torch._C, "_cuda_synchronize", "device synchronize")
        timed(scan._NativeBatch, "_run_gpu", "comparison batch (launch + stream wait)")
        timed(gpu.GpuBackend, "capture", "capture (warm-up, capture, instantiate)")
        timed(gpu.GpuCapturedGraph, "replay", "graph replay launch")
    TIMED.clear()
    while time.time() < args.start_at:
        time.sleep(0.001)
    samples = []
    verdicts = set()
    details = set()
    end = args.start_at + args.seconds
    while time.time() < end or not samples:
        t0 = time.perf_counter()
        result = check(case, be)
        samples.append(time.perf_counter() - t0)
        verdicts.add(result.verdict)
        details.add(result.detail[:160])
    total = sum(samples)
    print(
        json.dumps(
            {
                "checks": len(samples),
                "median_ms": statistics.median(samples) * 1e3,
                "mean_ms": total / len(samples) * 1e3,
                "verdicts": sorted(verdicts),
                "details": sorted(details)[:2],
                "share": {
                    k: [round(v[0] / total, 3), round(v[1] / len(samples), 1)] for k, v in TIMED.items()
                },
            }
        ),
        flush=True,
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=8)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--case", default="")
    p.add_argument("--background-case", default="", help="the other N-1 processes check this case instead")
    p.add_argument("--variant", default="base", choices=("base", "fewer_syncs"))
    p.add_argument("--backend", default="gpu", choices=("gpu", "cpu"))
    p.add_argument("--warmup", type=float, default=25.0, help="seconds before the common start")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--start-at", type=float, default=0.0)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    start_at = time.time() + args.warmup  # every process imported torch and warmed up by then
    procs = []
    for i in range(args.procs):
        case = args.case if i == 0 or not args.background_case else args.background_case
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            "--start-at",
            str(start_at),
            "--seconds",
            str(args.seconds),
            "--variant",
            args.variant,
            "--case",
            case,
            "--backend",
            args.backend,
        ]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=os.environ))
    print(
        f"procs={args.procs} seconds={args.seconds} case={args.case or 'bench_affine_4096'} "
        f"background={args.background_case or 'same'} variant={args.variant}"
    )
    for i, proc in enumerate(procs):
        out, _ = proc.communicate()
        line = out.strip().splitlines()[-1] if out.strip() else f"(no output, rc {proc.returncode})"
        print(f"  proc {i}: {line}")


if __name__ == "__main__":
    main()
