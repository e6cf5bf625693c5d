"""MXFP8 decode at DSv3 (E=32, N=4096, K=7168, 1 token per expert: the CUDA-core kernel): why a replay from a CUDA
graph measured 0.30 ms where eager calls measured 0.27 (sessions 3-5). Times, in one process on the H200:

  * eager and graph with bench/moe_gemm.py's timer (mean of 20 back-to-back calls, best of 3), in both orders;
  * the kernel's own duration under torch.profiler (CUPTI), eager and replayed, median of 20;
  * a graph holding 20 calls (one replay = 20 kernels), per call: replay overhead spread over 20.

    PYTHONPATH=. python reports/measurements/h200-2026-12-02-session6-kernels/graph_vs_eager.py [fmt] [shape]
"""

from __future__ import annotations

import statistics
import sys

import torch

from bench.moe_gemm import SHAPES, _captured, _time_ms
from kernels.common import quant, routing
from kernels.moe_gemm import ops


def kernel_us(fn, calls: int = 20) -> list[float]:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return [ev.device_time for ev in prof.events() if "gs_moe" in ev.name]


def main() -> None:
    fmt = sys.argv[1] if len(sys.argv) > 1 else "mxfp8"
    shape = sys.argv[2] if len(sys.argv) > 2 else "DSv3-decode"
    _name, e, n, k, tpe = next(sh for sh in SHAPES if sh[0] == shape)
    dev = torch.device("cuda")
    q = quant.quantize_weight(torch.randn(e, n, k, device=dev), fmt)
    rows = e * tpe
    bmap = routing.block_map_from_group_sizes(torch.full((e,), tpe, dtype=torch.int32, device=dev), rows, tpe)
    x = torch.randn(rows, k, device=dev).to(torch.bfloat16)
    wbytes = sum(t.numel() * t.element_size() for t in (q.data, q.scale) if t is not None)

    def call():
        return ops.moe_gemm(x, q, bmap, tpe)

    graph = _captured(call)

    def twenty():
        for _ in range(20):
            call()

    graph20 = _captured(twenty)
    src = torch.empty(wbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_ms = _time_ms(lambda: dst.copy_(src))
    print(
        f"{shape} {fmt} kernel={ops.kernel_path(x, q, bmap, tpe)} weight_bytes={wbytes} copy_ms={copy_ms:.4f}"
    )
    for order in ("eager_first", "graph_first", "eager_first"):
        pair = [("eager", call), ("graph", graph.replay)]
        if order == "graph_first":
            pair.reverse()
        got = {name: _time_ms(fn) for name, fn in pair}
        frac = {name: wbytes / (ms * 1e-3) / (2 * wbytes / (copy_ms * 1e-3)) for name, ms in got.items()}
        print(
            f"{order}: eager_ms={got['eager']:.4f} graph_ms={got['graph']:.4f} "
            f"eager_frac={frac['eager']:.3f} graph_frac={frac['graph']:.3f}"
        )
    g20 = _time_ms(graph20.replay, iters=5) / 20
    print(
        f"graph_of_20_calls_ms_per_call={g20:.4f} frac={wbytes / (g20 * 1e-3) / (2 * wbytes / (copy_ms * 1e-3)):.3f}"
    )
    for name, fn in (("eager", call), ("graph", graph.replay), ("graph20", graph20.replay)):
        durations = kernel_us(fn, 20 if name != "graph20" else 1)
        if durations:
            print(
                f"profiler_{name}: kernels={len(durations)} median_us={statistics.median(durations):.1f} "
                f"min_us={min(durations):.1f} max_us={max(durations):.1f}"
            )
        else:
            print(f"profiler_{name}: no kernel events")


if __name__ == "__main__":
    main()
