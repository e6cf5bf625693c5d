"""The CPU comparison pass (harness/native/scan_host.cpp) built with other compiler flags, against a copy of the
same bytes in the same run: why graphsafe builds it at -O3 (harness/native/__init__.py, `host_library`).

Each variant is scan_host.cpp built by `graphsafe.toolkit.build_shared_library` for the cpu backend with the
variant's flags after the build's own (-O2 first: the last -O wins), and called through ctypes as harness/scan.py
calls it (`graphsafe_scan_floats_host`: max|out - ref|, max|ref|, a non-finite flag) on a float32 pair that agrees
within float32's threshold (the clean path). Rounds alternate the variants and the copy so that a drift of the
machine's load reaches all of them alike; each figure is the median over the rounds of each round's mean. Every
variant's results must equal the -O3 build's (bitwise), else the run fails: a faster wrong scan is no result.

    OMP_NUM_THREADS=2 python -m bench.scan_host_flags [--mib 64] [--repeats 10] [--rounds 5] [--out flags.csv]

Prints ms per call and the scan's bandwidth over the copy's (the scan reads 2 x 64 MiB; the copy reads 64 MiB and
writes 64 MiB).
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import statistics
import time
from pathlib import Path

import torch

from graphsafe.toolkit import build_shared_library

SOURCE = Path(__file__).resolve().parents[1] / "harness" / "native" / "scan_host.cpp"
# name -> flags after the build's own; "-O3" is the harness's.
VARIANTS = {"-O2": (), "-O3": ("-O3",), "-O3 -march=native": ("-O3", "-march=native")}
BUILT_IN = "-O3"


def _scan_function(flags: tuple[str, ...]) -> ctypes._CFuncPtr:
    suffix = "_".join(f.strip("-").replace("=", "") for f in flags) or "O2"
    lib = ctypes.CDLL(
        str(build_shared_library(f"graphsafe_scan_host_{suffix}", [SOURCE], backend="cpu", extra_flags=flags))
    )
    fn = lib.graphsafe_scan_floats_host
    fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_longlong,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_float),
    ]
    fn.restype = ctypes.c_int
    return fn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scan_host_flags", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--mib", type=int, default=64, help="bytes of each float32 input, MiB (default 64)")
    parser.add_argument("--repeats", type=int, default=10, help="calls per round (default 10)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, variants alternating (default 5)")
    parser.add_argument("--out", type=Path, help="also write the table as CSV")
    args = parser.parse_args(argv)
    if min(args.mib, args.repeats, args.rounds) < 1:
        parser.error("--mib, --repeats and --rounds must be >= 1")
    n = (args.mib << 20) // 4
    out = torch.randn(n, generator=torch.Generator().manual_seed(0))
    ref = out * (1 + 1e-7)
    dst = torch.empty_like(out)
    scans = {name: _scan_function(flags) for name, flags in VARIANTS.items()}
    results = {}
    for name, fn in scans.items():
        record = (ctypes.c_float * 3)()
        if fn(out.data_ptr(), ref.data_ptr(), n, 0, record) != 0:
            raise RuntimeError(f"{name}: graphsafe_scan_floats_host refused the arguments")
        results[name] = tuple(record)
    wrong = [name for name, r in results.items() if r != results[BUILT_IN]]
    if wrong:
        print(f"results differ from the {BUILT_IN} build: {wrong} ({results})")
        return 1

    def timed(fn) -> float:
        began = time.perf_counter()
        for _ in range(args.repeats):
            fn()
        return (time.perf_counter() - began) * 1e3 / args.repeats

    record = (ctypes.c_float * 3)()
    samples: dict[str, list[float]] = {name: [] for name in ["copy", *scans]}
    for _ in range(args.rounds):
        samples["copy"].append(timed(lambda: dst.copy_(out)))
        for name, fn in scans.items():
            samples[name].append(timed(lambda fn=fn: fn(out.data_ptr(), ref.data_ptr(), n, 0, record)))
    ms = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{args.mib} MiB float32, torch threads {torch.get_num_threads()}; copy {ms['copy']:.2f} ms")
    rows = []
    for name in scans:
        # bandwidth ratio: the scan reads 2 x mib, the copy moves 2 x mib (read + write)
        rows.append(
            {"flags": name, "ms": round(ms[name], 3), "of_copy_bandwidth": round(ms["copy"] / ms[name], 3)}
        )
        mark = " (graphsafe's)" if name == BUILT_IN else ""
        print(f"  {name + mark:<28s} {ms[name]:8.2f} ms  {ms['copy'] / ms[name]:6.2f} of copy bandwidth")
    if args.out:
        with args.out.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
