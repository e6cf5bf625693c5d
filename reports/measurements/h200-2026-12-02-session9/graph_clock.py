"""Whether bench/moe_gemm.py's slower graph figure for the fp8 CUDA-core decode (MXFP8 DSv3-decode: graph_ms
0.300 against 0.271 eager in every bench run) follows the GPU's clock rather than the graph: the bench's
sequence (eager timing, host_us loops, capture, graph timing) with each phase's wall-clock start and end
printed, so that an `nvidia-smi -lms 50` log taken beside it (SM clock, power, temperature, clock-event
reasons) can be laid over the phases; then the graph again after a 3 s pause, eager again, and eager and
graph trials interleaved (each trial 20 back-to-back calls, as bench/moe_gemm.py's _time_ms).

    PYTHONPATH=. python reports/measurements/h200-2026-12-02-session9/graph_clock.py [fmt] [shape]
"""

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


def phase(label, fn, trials=3):
    fn()
    torch.cuda.synchronize()
    t0 = time.time()
    ms = [trial_ms(fn) for _ in range(trials)]
    print(
        f"{label}: wall {t0:.3f}-{time.time():.3f} ms per call {' '.join(f'{m:.4f}' for m in ms)}", flush=True
    )


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
    print(f"{fmt} {shape} kernel={ops.kernel_path(x, q, bmap, block_m)}", flush=True)
    phase("eager (bench order)", eager)
    w, s, g = ops.kn_views(q)
    t0 = time.time()
    host_us(lambda: torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, fmt, block_m))
    host_us(lambda: ops.moe_gemm_op(x, w, s, g, bmap, fmt, block_m))
    print(f"host_us loops: wall {t0:.3f}-{time.time():.3f}", flush=True)
    graph = _captured(eager)
    phase("graph (bench order)", graph.replay)
    time.sleep(3.0)
    phase("graph after 3 s idle", graph.replay)
    phase("eager after it", eager)
    t0 = time.time()
    pairs = [(trial_ms(eager), trial_ms(graph.replay)) for _ in range(10)]
    print(f"interleaved 10 x (eager, graph): wall {t0:.3f}-{time.time():.3f}")
    print("  eager " + " ".join(f"{a:.4f}" for a, _ in pairs))
    print("  graph " + " ".join(f"{b:.4f}" for _, b in pairs))
    time.sleep(3.0)
    t0 = time.time()
    long_ms = [trial_ms(graph.replay, 200) for _ in range(5)]
    print(
        f"graph, 5 trials of 200 after 3 s idle: wall {t0:.3f}-{time.time():.3f} "
        + " ".join(f"{m:.4f}" for m in long_ms)
    )
    time.sleep(3.0)
    t0 = time.time()
    long_ms = [trial_ms(eager, 200) for _ in range(5)]
    print(
        f"eager, 5 trials of 200 after 3 s idle: wall {t0:.3f}-{time.time():.3f} "
        + " ".join(f"{m:.4f}" for m in long_ms)
    )


if __name__ == "__main__":
    main()
