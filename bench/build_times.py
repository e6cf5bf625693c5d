"""Cold build time of every native op family, per compiler, each into an empty build cache.

Role: the figures behind the build-speed work (issue 17, item 2). For each family source and backend it
builds into a fresh GRAPHSAFE_CACHE_DIR (so nothing is cached) and reports the wall time, the compilers' CPU
time and each translation unit's wall seconds (from the build's build.log); `--variants`
adds flag variants of the CPU twins (-O0/-O1/-O3 after the cache's -O2: the last -O wins in g++), and
`--parallel` builds the selected families at once in a thread pool (each compiler is its own process, so
threads overlap them), the way `graphsafe.native.build.prebuild` does before a run.

    python bench/build_times.py [--backends cpu,cuda] [--arch sm_90] [--variants] [--parallel [--parallel-cache DIR]]

Needs g++ for cpu and nvcc for cuda (no GPU: the arch is given). Prints one line per build.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import resource
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from graphsafe.kernels.common import native
from graphsafe.toolkit import compile_seconds

KERNELS = pathlib.Path(native.__file__).resolve().parents[1]
# (family folder, stem, backends it is built for, the extra flags its loader passes)
FAMILIES: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("moe_combine", "moe_combine", ("cpu", "cuda", "hip"), ()),
    ("moe_gemm", "moe_gemm", ("cpu", "cuda", "hip"), ()),
    ("cpu_moe", "cpu_moe", ("cpu",), ("-O3",)),  # kernels/cpu_moe/settings.py loads it with -O3
    ("cpu_moe", "handshake", ("cuda", "hip"), ()),
    ("platform", "graph_platform", ("cuda", "hip"), ()),
)
CPU_VARIANTS = {"-O2 (default)": (), "-O0": ("-O0",), "-O1": ("-O1",), "-O3": ("-O3",)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _units(cache: pathlib.Path) -> str:
    """Wall seconds of each compiler command of the one build in `cache`, from its build.log: which
    translation unit is the critical path."""
    return ", ".join(f"{unit} {seconds:.2f} s" for unit, seconds in compile_seconds(cache))


def _one(
    family: str, stem: str, backend: str, arch: str | None, flags: tuple[str, ...]
) -> tuple[float, float, str]:
    """(wall seconds, compiler CPU seconds, seconds per unit): on a shared machine the CPU time is the
    steadier figure."""
    with tempfile.TemporaryDirectory(prefix="gs-build-times-") as cache:
        os.environ["GRAPHSAFE_CACHE_DIR"] = cache
        cpu, start = _children_cpu(), time.perf_counter()
        native.build(KERNELS / family, stem, backend, arch=arch, extra_flags=flags)
        return time.perf_counter() - start, _children_cpu() - cpu, _units(pathlib.Path(cache))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="cpu,cuda", help="comma-separated: cpu, cuda, hip")
    parser.add_argument("--arch", default="sm_90", help="device arch for cuda/hip (no device needed)")
    parser.add_argument("--variants", action="store_true", help="also -O0/-O1/-O3 for the CPU twins")
    parser.add_argument("--parallel", action="store_true", help="also all selected builds at once")
    parser.add_argument(
        "--parallel-cache",
        help="build the --parallel run into this (empty) folder and keep it, e.g. for GPU tests that follow",
    )
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    jobs = [(f, s, b, fl) for f, s, bs, fl in FAMILIES for b in backends if b in bs]
    total = 0.0
    for family, stem, backend, own in jobs:
        arch = None if backend == "cpu" else args.arch
        variants = CPU_VARIANTS if (backend == "cpu" and args.variants) else {"default": ()}
        for label, flags in variants.items():
            seconds, cpu, units = _one(family, stem, backend, arch, (*own, *flags))
            if label in ("default", "-O2 (default)"):
                total += seconds
            print(
                f"{family}/{stem} {backend} {arch or 'host'} {label}: {seconds:.1f} s wall, "
                f"{cpu:.1f} s compiler CPU (load average {os.getloadavg()[0]:.1f}) [{units}]",
                flush=True,
            )
    print(f"sequential total (default flags): {total:.1f} s")
    if args.parallel:
        with tempfile.TemporaryDirectory(prefix="gs-build-times-") as scratch:
            os.environ["GRAPHSAFE_CACHE_DIR"] = args.parallel_cache or scratch
            start = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
                futures = [
                    pool.submit(
                        native.build,
                        KERNELS / f,
                        s,
                        b,
                        arch=None if b == "cpu" else args.arch,
                        extra_flags=fl,
                    )
                    for f, s, b, fl in jobs
                ]
                for future in futures:
                    future.result()
            print(
                f"parallel (thread pool, {len(jobs)} builds, {os.cpu_count()} cores): {time.perf_counter() - start:.1f} s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
