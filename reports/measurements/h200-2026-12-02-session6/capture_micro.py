"""What one graph capture costs on this GPU, by step, for bench/harness_throughput.py's op (x*2+1 on 4096
floats): capture_begin, the op under capture, capture_end, instantiate, one replay + synchronize, reset, with
torch's default pool and with the harness's poisoning MemPool, a fresh pool per capture or one shared, and
keep_graph True/False. Then GpuBackend.capture as the protocol calls it. Medians over --repeats, in ms.

    python3 reports/measurements/h200-2026-12-02-session6/capture_micro.py [--repeats 100]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness.backends import gpu  # noqa: E402
from harness.backends import get_backend  # noqa: E402


def steps(x, pool_maker, keep_graph, repeats, mode="global"):
    times = {
        k: [] for k in ("capture_begin", "op", "capture_end", "instantiate", "replay+sync", "reset", "total")
    }
    stream = torch.cuda.Stream()
    for _ in range(repeats):
        torch.cuda.synchronize()
        pool = pool_maker()
        g = torch.cuda.CUDAGraph(keep_graph=keep_graph)
        t0 = time.perf_counter()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            t = time.perf_counter()
            g.capture_begin(pool=pool, capture_error_mode=mode)
            times["capture_begin"].append(time.perf_counter() - t)
            t = time.perf_counter()
            y = x * 2 + 1
            times["op"].append(time.perf_counter() - t)
            t = time.perf_counter()
            g.capture_end()
            times["capture_end"].append(time.perf_counter() - t)
        torch.cuda.current_stream().wait_stream(stream)
        t = time.perf_counter()
        if keep_graph:
            g.instantiate()
        times["instantiate"].append(time.perf_counter() - t)
        t = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        times["replay+sync"].append(time.perf_counter() - t)
        t = time.perf_counter()
        del y
        g.reset()
        times["reset"].append(time.perf_counter() - t)
        times["total"].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=100)
    args = p.parse_args()
    x = torch.randn(4096, device="cuda")
    loaded = gpu._load_poison_allocator()
    shared_poison = torch.cuda.MemPool(loaded["allocator"].allocator()) if "allocator" in loaded else None
    shared_default = torch.cuda.graph_pool_handle()
    variants = {
        "default pool, fresh handle": lambda: torch.cuda.graph_pool_handle(),
        "default pool, shared handle": lambda: shared_default,
    }
    if shared_poison is not None:
        variants["poisoning MemPool, shared"] = lambda: shared_poison.id
    keep = []

    def fresh_poison():
        pool = torch.cuda.MemPool(loaded["allocator"].allocator())
        keep.append(pool)  # never destroyed mid-benchmark (harness/backends/gpu.py, pool lifetime)
        return pool.id

    if shared_poison is not None:
        variants["poisoning MemPool, fresh"] = fresh_poison
    for name, maker in variants.items():
        for keep_graph in (True, False):
            steps(x, maker, keep_graph, 5)
            result = steps(x, maker, keep_graph, args.repeats)
            print(
                f"{name:32s} keep_graph={keep_graph!s:5s} "
                + " ".join(f"{k} {v:.3f}" for k, v in result.items())
            )
    for mode in ("thread_local", "relaxed"):
        steps(x, variants["default pool, shared handle"], True, 5, mode)
        result = steps(x, variants["default pool, shared handle"], True, args.repeats, mode)
        print(f"default pool, shared, mode={mode:12s} " + " ".join(f"{k} {v:.3f}" for k, v in result.items()))
    be = get_backend("gpu")
    with be.poisoned_allocation(0xFF):
        samples = []
        for _ in range(args.repeats):
            torch.cuda.synchronize()
            t = time.perf_counter()
            graph = be.capture(lambda: x * 2 + 1)
            samples.append(time.perf_counter() - t)
            graph.release()
    print(
        f"GpuBackend.capture (warm-up 1, poisoning pool, keep_graph, instantiate): {statistics.median(samples) * 1e3:.3f} ms"
    )


if __name__ == "__main__":
    main()
