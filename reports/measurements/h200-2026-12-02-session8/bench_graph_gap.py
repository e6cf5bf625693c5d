"""Why bench/moe_gemm.py's graph figure for MXFP8 DSv3-decode (graph_ms 0.303) is slower than the same kernel
replayed in graph_vs_eager.py (0.268) when both use the bench's timer and capture: the bench's sequence is
replayed step by step (eager timing, host_us through torch.ops and the overload, capture, graph timing), then
the graph's replays are traced with torch.profiler (kernel durations, gaps between one replay's last kernel
and the next one's first, host time per replay() call), and the same for a graph captured afresh.

    PYTHONPATH=. python reports/measurements/h200-2026-12-02-session8/bench_graph_gap.py [fmt] [shape]
"""

import statistics
import sys
import time

import torch

from bench.moe_gemm import SHAPES, _captured, _time_ms, host_us, prefill_block_m
from kernels.common import quant, routing
from kernels.moe_gemm import ops


def trace(label, fn, calls=20):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = sorted(
        (ev for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA),
        key=lambda ev: ev.time_range.start,
    )
    names = sorted({ev.name[:60] for ev in kernels})
    gaps = [b.time_range.start - a.time_range.end for a, b in zip(kernels, kernels[1:])]
    durs = [ev.time_range.end - ev.time_range.start for ev in kernels]
    print(
        f"{label}: host_us_per_call={host:.1f} device_events={len(kernels)} names={names} "
        f"median_dur_us={statistics.median(durs):.1f} median_gap_us={statistics.median(gaps) if gaps else 0:.1f} "
        f"max_gap_us={max(gaps) if gaps else 0:.1f}"
    )


def main():
    fmt = sys.argv[1] if len(sys.argv) > 1 else "mxfp8"
    shape = sys.argv[2] if len(sys.argv) > 2 else "DSv3-decode"
    name, e, n, k, tpe = next(sh for sh in SHAPES if sh[0] == shape)
    dev = torch.device("cuda")
    q = quant.quantize_weight(torch.randn(e, n, k, device=dev), fmt)
    rows = e * tpe
    block_m = prefill_block_m(tpe)
    sizes = torch.full((e,), tpe, dtype=torch.int32, device=dev)
    bmap = routing.block_map_from_group_sizes(sizes, rows, block_m)
    x = torch.randn(rows, k, device=dev).to(torch.bfloat16)
    gemm_ms = _time_ms(lambda: ops.moe_gemm(x, q, bmap, block_m))
    w, s, g = ops.kn_views(q)
    host_us(lambda: torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, fmt, block_m))
    host_us(lambda: ops.moe_gemm_op(x, w, s, g, bmap, fmt, block_m))
    graph = _captured(lambda: ops.moe_gemm(x, q, bmap, block_m))
    graph_ms = _time_ms(graph.replay)
    print(f"{name} {fmt}: eager_ms={gemm_ms:.4f} graph_ms={graph_ms:.4f} (the bench's sequence)")
    trace("eager", lambda: ops.moe_gemm(x, q, bmap, block_m))
    trace("graph (bench sequence)", graph.replay)
    fresh = _captured(lambda: ops.moe_gemm(x, q, bmap, block_m))
    print(f"graph captured afresh: graph_ms={_time_ms(fresh.replay):.4f}; first again: {_time_ms(graph.replay):.4f}")
    trace("graph (afresh)", fresh.replay)


if __name__ == "__main__":
    main()
