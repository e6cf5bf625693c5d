"""Whether a CUPTI session (torch.profiler) in the process is what makes the fp8 CUDA-core decode op's graph
replays faster (bench/moe_gemm.py's graph_ms 0.300 against 0.268-0.274 in processes that had run the profiler,
calls C and D): bench_shape() for three rows, first in a fresh process state, then with torch.profiler
recording CUDA activity around it, then again after the profiler session ended.

    PYTHONPATH=. python reports/measurements/h200-2026-12-02-session8/cupti_graph.py
"""

import torch

from bench.moe_gemm import SHAPES, bench_shape

ROWS = [("DSv3-decode", "mxfp8"), ("Hy4-TP8-decode", "mxfp8"), ("DSv3-decode", "block_fp8"), ("DSv3-decode", "bf16")]


def run(label: str) -> None:
    for shape, fmt in ROWS:
        row = bench_shape(*next(sh for sh in SHAPES if sh[0] == shape), fmt)
        print(
            f"{label}: {shape} {fmt} gemm_ms={row['gemm_ms']} graph_ms={row['graph_ms']} "
            f"frac={row['frac_of_copy_bw']} graph_frac={row['graph_frac_of_copy_bw']}",
            flush=True,
        )


run("no profiler yet")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
    run("inside torch.profiler")
run("after the profiler session")
