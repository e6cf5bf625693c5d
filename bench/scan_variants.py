"""The GPU comparison pass (harness/native/scan.hip) at other launch shapes, against a device copy of the same
bytes in the same run: which blocks-per-SM and words-per-thread read two arrays fastest.

Each variant is scan.hip built with `-DGS_SCAN_BLOCKS_PER_SM=B -DGS_SCAN_UNROLL=U` (the harness's own build
sets neither: 4 and 4) as its own shared library, called through ctypes exactly as harness/scan.py calls it
(`graphsafe_scan_run`: launch, one stream synchronization, read the records). Timed per round, variants and
the copy interleaved so that a drift of the host's speed reaches all of them alike; each figure is the median
of its rounds' medians. Every variant's records must equal the built-in variant's (bitwise), else the run
fails: a faster wrong scan is not a result.

    python bench/scan_variants.py [--variants 4x4,8x4,...] [--mib 64] [--repeats 100] [--rounds 5]

Prints, per variant, microseconds per call for 64 MiB float32 (and 4096 floats) and copy time / scan time
(the copy moves the same 128 MiB the scan reads: 64 read + 64 written).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import statistics
import struct
import time
from pathlib import Path

import torch

from graphsafe.toolkit import build_shared_library

ROOT = Path(__file__).resolve().parents[1]

NATIVE = ROOT / "harness" / "native"
BUILT_IN = "4x4"


def build(variant: str) -> ctypes.CDLL:
    blocks, unroll = (int(v) for v in variant.split("x"))
    path = build_shared_library(
        f"graphsafe_scan_b{blocks}_u{unroll}",
        [NATIVE / "scan.hip"],
        [NATIVE],
        extra_flags=(f"-DGS_SCAN_BLOCKS_PER_SM={blocks}", f"-DGS_SCAN_UNROLL={unroll}"),
    )
    lib = ctypes.CDLL(str(path))
    lib.graphsafe_scan_run.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_uint),
    ]
    lib.graphsafe_scan_run.restype = ctypes.c_int
    return lib


def timed_us(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="4x4,8x4,16x4,4x8,8x8,2x8,8x2,16x2")
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    variants = list(dict.fromkeys([BUILT_IN, *args.variants.split(",")]))
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(variants)) as pool:
        libs = dict(zip(variants, pool.map(build, variants), strict=True))
    print(
        f"built {len(variants)} variants in {time.perf_counter() - start:.1f} s on {torch.cuda.get_device_name()}"
    )

    stream = int(torch.cuda.current_stream().cuda_stream)
    for n in (4096, args.mib << 18):
        measure(n, libs, stream, args.repeats, args.rounds)


def measure(n: int, libs: dict[str, ctypes.CDLL], stream: int, repeats: int, rounds: int) -> None:
    """One size: check every variant's records against the built-in one, then time them round by round."""
    out = torch.randn(n, device="cuda")
    ref = out * (1 + 1e-7)
    ref[n // 3] = 2.5  # a known maximum difference away from the ends
    dst = torch.empty_like(out)
    jobs = struct.pack("<4q", out.data_ptr(), ref.data_ptr(), n, 0)
    records = {v: (ctypes.c_uint * 4)() for v in libs}

    def scan(variant: str) -> None:
        code = libs[variant].graphsafe_scan_run(1, jobs, stream, records[variant])
        if code:
            raise RuntimeError(f"variant {variant}: graphsafe_scan_run failed with {code}")

    for variant in libs:
        scan(variant)
        if list(records[variant]) != list(records[BUILT_IN]):
            raise SystemExit(
                f"variant {variant} disagrees: {list(records[variant])} vs {list(records[BUILT_IN])}"
            )
    per_round: dict[str, list[float]] = {v: [] for v in ["copy", *libs]}
    for _ in range(rounds):
        per_round["copy"].append(timed_us(lambda: dst.copy_(out), repeats))
        for variant in libs:
            per_round[variant].append(timed_us(lambda variant=variant: scan(variant), repeats))
    copy_us = statistics.median(per_round["copy"])
    print(f"n = {n} float32 ({n * 4 / 2**20:.3f} MiB per array); copy + sync {copy_us:.1f} us")
    print(f"  {'blocks/SM x words':18s} {'us':>8s} {'copy/scan':>10s}   rounds")
    for variant in libs:
        us = statistics.median(per_round[variant])
        shown = " ".join(f"{r:.1f}" for r in per_round[variant])
        mark = " (built in)" if variant == BUILT_IN else ""
        print(f"  {variant + mark:18s} {us:8.1f} {copy_us / us:10.3f}   {shown}")


if __name__ == "__main__":
    main()
