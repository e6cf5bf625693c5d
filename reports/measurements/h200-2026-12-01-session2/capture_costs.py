"""Where a capture's time goes on this GPU: capture_begin, the op, capture_end, instantiate, first replay,
reset, and MemPool creation/destruction, for torch's default pool and for the harness's poisoning pool.
Median of N runs (ms). Usage: python capture_costs.py [N]"""

import statistics
import sys
import time

import torch

from harness.backends import gpu as G

n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
x = torch.randn(4096, device="cuda")


def op():
    return x * 2 + 1


def host_ms(fn):
    """Host time of a call that may not synchronize (inside a capture)."""
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3, out


def run(label, keep_graph, pool_kind):
    rows = {k: [] for k in ("pool", "begin", "op", "end", "instantiate", "replay", "reset", "pool_del")}
    stream = torch.cuda.Stream()
    for _ in range(n):
        if pool_kind == "poison":
            ms, pool = timed(G._new_pool)
            pool_id = pool.id
        elif pool_kind == "plain":
            ms, pool = timed(lambda: torch.cuda.MemPool())
            pool_id = pool.id
        else:
            ms, pool, pool_id = 0.0, None, torch.cuda.graph_pool_handle()
        rows["pool"].append(ms)
        g = torch.cuda.CUDAGraph(keep_graph=keep_graph)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            rows["begin"].append(host_ms(lambda: g.capture_begin(pool=pool_id)))
            rows["op"].append(host_ms(op))
            rows["end"].append(host_ms(g.capture_end))
        torch.cuda.current_stream().wait_stream(stream)
        rows["instantiate"].append(timed(g.instantiate)[0] if keep_graph else 0.0)
        rows["replay"].append(timed(g.replay)[0])
        rows["reset"].append(timed(g.reset)[0])
        del g
        if pool is not None:

            def drop():
                nonlocal pool
                pool = None

            rows["pool_del"].append(timed(drop)[0])
        else:
            rows["pool_del"].append(0.0)
    print(f"{label:40s} " + " ".join(f"{k}={statistics.median(v):.3f}" for k, v in rows.items()))


G._load_poison_allocator()
for keep in (False, True):
    for kind in ("default", "plain", "poison"):
        run(f"keep_graph={keep} pool={kind}", keep, kind)
