"""What starts the slow window graph_clock.py found (MXFP8 DSv3-decode replayed right after its capture: 0.300 ms
per call for the bench's 3 trials, 0.269 after 3 s idle; the SM clock stayed at 1980 MHz): 40 trials of 20
calls each, with their time since the event, after each candidate event in turn, 3 s idle between events:
  1. the bench's host_us loops (90 calls queued without a wait), then eager trials;
  2. gc.collect() and torch.cuda.empty_cache() (torch.cuda.graph's entry makes both), then eager trials;
  3. a capture (bench/moe_gemm.py's _captured), then graph trials;
  4. a second capture of the same call, then eager trials;
  5. a capture, 3 s idle, then graph trials of the new graph.

    PYTHONPATH=. python reports/measurements/h200-2026-12-02-session9/graph_window.py [fmt] [shape]
"""

import gc
import sys
import time

import torch

from bench.moe_gemm import SHAPES, _captured, host_us, prefill_block_m
from kernels.common import quant, routing
from kernels.moe_gemm import ops


def trial_ms(fn, iters=20):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def after(label, event, fn, trials=40):
    torch.cuda.synchronize()
    time.sleep(3.0)
    event()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = []
    for _ in range(trials):
        ms = trial_ms(fn)
        out.append(f"{(time.perf_counter() - t0) * 1e3:.0f}:{ms:.4f}")
    print(f"{label}:\n  " + " ".join(out), flush=True)


def main():
    fmt = sys.argv[1] if len(sys.argv) > 1 else "mxfp8"
    shape = sys.argv[2] if len(sys.argv) > 2 else "DSv3-decode"
    _, e, n, k, tpe = next(sh for sh in SHAPES if sh[0] == shape)
    dev = torch.device("cuda")
    q = quant.quantize_weight(torch.randn(e, n, k, device=dev), fmt)
    rows = e * tpe
    block_m = prefill_block_m(tpe)
    bmap = routing.block_map_from_group_sizes(
        torch.full((e,), tpe, dtype=torch.int32, device=dev), rows, block_m
    )
    x = torch.randn(rows, k, device=dev).to(torch.bfloat16)
    eager = lambda: ops.moe_gemm(x, q, bmap, block_m)  # noqa: E731
    w, s, g = ops.kn_views(q)
    print(
        f"{fmt} {shape} kernel={ops.kernel_path(x, q, bmap, block_m)}; each entry: ms since the event:ms per call"
    )
    after("eager, no event", lambda: None, eager)

    def loops():
        host_us(lambda: torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, fmt, block_m))
        host_us(lambda: ops.moe_gemm_op(x, w, s, g, bmap, fmt, block_m))

    after("eager after the host_us loops", loops, eager)

    def empty_cache():
        gc.collect()
        torch.cuda.empty_cache()

    after("eager after gc.collect + empty_cache", empty_cache, eager)
    graphs = []
    after("graph after its capture", lambda: graphs.append(_captured(eager)), lambda: graphs[-1].replay())
    after("eager after a second capture", lambda: graphs.append(_captured(eager)), eager)
    after("graph (the second) 3 s after its capture", lambda: time.sleep(3.0), lambda: graphs[-1].replay())
    after("graph (the first) after nothing", lambda: None, lambda: graphs[0].replay())


if __name__ == "__main__":
    main()
