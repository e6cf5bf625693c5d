"""Whether a just-captured graph's first replays are slow in the kernel or between kernels: bench/moe_gemm.py's
sequence for one row (eager timing, host_us through torch.ops and the overload, capture), then 8 groups of 20
back-to-back replays, each group timed with events, all under torch.profiler (each group's median kernel
duration and gap between kernels), with the SM and memory clocks and power from nvidia-smi before and after.

    PYTHONPATH=. python reports/measurements/h200-2026-12-02-session8/graph_warmup.py [fmt] [shape]
"""

import statistics
import subprocess
import sys

import torch

from bench.moe_gemm import SHAPES, _captured, host_us, prefill_block_m
from kernels.common import quant, routing
from kernels.moe_gemm import ops


def smi() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        return f"nvidia-smi unavailable: {exc}"


def groups(label, fn, count=8, iters=20):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for g in range(count):
            starts[g].record()
            for _ in range(iters):
                fn()
            ends[g].record()
        torch.cuda.synchronize()
    kernels = sorted(
        (ev for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA and "gs_moe" in ev.name),
        key=lambda ev: ev.time_range.start,
    )
    per = len(kernels) // count
    for g in range(count):
        ks = kernels[g * per : (g + 1) * per]
        durs = [k.time_range.end - k.time_range.start for k in ks]
        gaps = [b.time_range.start - a.time_range.end for a, b in zip(ks, ks[1:])]
        print(
            f"{label} group {g}: ms_per_call={starts[g].elapsed_time(ends[g]) / iters:.4f} kernels={len(ks)} "
            f"median_dur_us={statistics.median(durs) if durs else 0:.1f} median_gap_us={statistics.median(gaps) if gaps else 0:.1f}"
        )


def main():
    fmt = sys.argv[1] if len(sys.argv) > 1 else "mxfp8"
    shape = sys.argv[2] if len(sys.argv) > 2 else "DSv3-decode"
    name, e, n, k, tpe = next(sh for sh in SHAPES if sh[0] == shape)
    dev = torch.device("cuda")
    q = quant.quantize_weight(torch.randn(e, n, k, device=dev), fmt)
    rows = e * tpe
    block_m = prefill_block_m(tpe)
    bmap = routing.block_map_from_group_sizes(torch.full((e,), tpe, dtype=torch.int32, device=dev), rows, block_m)
    x = torch.randn(rows, k, device=dev).to(torch.bfloat16)
    call = lambda: ops.moe_gemm(x, q, bmap, block_m)  # noqa: E731
    print("smi start:", smi())
    groups("eager", call, count=3)
    w, s, g = ops.kn_views(q)
    host_us(lambda: torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, fmt, block_m))
    host_us(lambda: ops.moe_gemm_op(x, w, s, g, bmap, fmt, block_m))
    graph = _captured(call)
    print("smi after capture:", smi())
    groups("graph", graph.replay)
    print("smi after replays:", smi())
    groups("eager again", call, count=3)


if __name__ == "__main__":
    main()
