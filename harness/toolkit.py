"""What op-family authors, counterexample modules and benchmarks use from graphsafe beyond `graphsafe` itself.

kernels/, cases/ and bench/ (and a user's own op families) import graphsafe through two names only: the
contract in `graphsafe` (Case, register, check, is_capturing, ...) and this module. Every name here is a
promise, extended and never broken silently; every other module of graphsafe may change without notice.

Building native code (the content-keyed build cache in the user's cache directory, never in site-packages):
    build_extension(name, sources, backend, ...)   a pybind11 module, compiled once per source hash and arch
    build_shared_library(name, sources, backend, ...)   a plain shared library (ctypes)
    plan_build(label, run, device=..., owner=...)   declare a build so `verify` compiles it before the first case
    detect_backend()                         "cuda", "rocm" or "cpu": what a GPU build of this machine targets
    cache_dir()                              where builds (and graphsafe's other per-machine files) are kept
    compile_seconds(cache)                   (translation unit, wall seconds) of each compile of the builds there
    BuildError, CompilerNotFound             a compile that failed / a compiler that is not installed
Backends:
    get_backend(name)                        the "cpu" or "gpu" graph backend (GraphBackend), "auto" as verify
    GraphBackend, CapturedGraph              their types
    register_host_function_op(op)            a custom op the cpu backend records whole, as a host-function node
Graph inspection (GPU backend):
    graph_node_kinds(raw_graph)              node kinds of a captured cudaGraph_t / hipGraph_t, by name
Counterexample modules (`graphsafe repro <module>`; cases/counterexamples/_template.py shows one):
    Report, CaseTable, Line, Column, MeasuredTable, Measurement
Comparison:
    compare(out, ref, threshold) -> Comparison   the one comparison of the protocol (NaN and poison counted first)
    comparison_pass(tensor)                  which implementation compares on that tensor's device, and why
Timing for benchmarks (CUDA events; speed claims live in reports/performance.md, never in tests):
    time_ms(*fns, iters=20, trials=3)        each fn's mean ms per call, best of `trials`, trials alternating
    host_us(fn, iters=50, trials=7)          host microseconds per eager call (launches queued, no sync inside)
    captured_graph(fn)                       fn captured in a torch.cuda.CUDAGraph after a side-stream warm-up
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from graphsafe.backends import get_backend
from graphsafe.backends.base import CapturedGraph, GraphBackend
from graphsafe.backends.cpu import register_host_function_op
from graphsafe.compare import Comparison, compare
from graphsafe.native import graph_node_kinds
from graphsafe.native.build import (
    BuildError,
    CompilerNotFound,
    build_extension,
    build_shared_library,
    cache_dir,
    compile_seconds,
    detect_backend,
)
from graphsafe.native.build import plan as plan_build
from graphsafe.reproduce import CaseTable, Column, Line, MeasuredTable, Measurement, Report
from graphsafe.scan import comparison_pass


def time_ms(*fns: Callable[[], Any], iters: int = 20, trials: int = 3) -> list[float]:
    """For each fn, mean ms per call over `iters` back-to-back calls, the best of `trials` such runs, the fns'
    trials alternating (a, b, a, b, ...) so that every figure comes from the same stretch of the device's
    state: ratios then compare like with like, and the best of 3 keeps one slow run (the copy peer read 3.80
    TB/s timed once, 4.21-4.24 as the best of 3 on the H200, reports/performance.md) from moving a ratio."""
    import torch

    for fn in fns:
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = [float("inf")] * len(fns)
    for _ in range(trials):
        for which, fn in enumerate(fns):
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            torch.cuda.synchronize()
            best[which] = min(best[which], start.elapsed_time(end) / iters)
    return best


def host_us(fn: Callable[[], Any], iters: int = 50, trials: int = 7) -> float:
    """Host microseconds per call: `iters` back-to-back calls timed on the host clock with no synchronization
    inside (the launches queue up; 50 calls of a few kernels stay far below the launch queue's depth), the best
    of `trials`: what an eager caller pays in Python, dispatch, checks and launches per call. Best of 7 x 50:
    with 3 x 30 one row of the same code moved by up to 7 us between runs on the H200's host
    (reports/performance.md)."""
    import torch

    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
        torch.cuda.synchronize()
    return best * 1e6


def captured_graph(fn: Callable[[], Any]) -> Any:
    """fn captured in a torch.cuda.CUDAGraph as a decode step runs it (no per-call Python dispatch or launch
    gaps), after one warm-up call on a side stream (module load, allocator)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


__all__ = [
    "BuildError",
    "CapturedGraph",
    "CaseTable",
    "Column",
    "Comparison",
    "CompilerNotFound",
    "GraphBackend",
    "Line",
    "MeasuredTable",
    "Measurement",
    "Report",
    "build_extension",
    "build_shared_library",
    "cache_dir",
    "captured_graph",
    "compare",
    "comparison_pass",
    "compile_seconds",
    "detect_backend",
    "get_backend",
    "graph_node_kinds",
    "host_us",
    "plan_build",
    "register_host_function_op",
    "time_ms",
]
