"""Benchmark of the CPU/hybrid MoE layer: per-layer decode latency, graph replay against eager, and the
handshake's own cost in microseconds (FreeToken issue #350's shape: E=8,
H=512, I=256, top_k 2, BF16).

CPU rows always run (the executor alone, 1 and 2 threads). GPU rows need a device and skip cleanly without
one: eager (synchronizing copies), memop and hostfn graph replay, and the handshake alone measured with a
zero-work executor step subtracted out (same graph with the CPU compute timed separately).

    python -m bench.cpu_moe [--batch 4] [--iters 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from graphsafe.kernels import cpu_moe

E, H, INTER, TOP_K = 8, 512, 256, 2


def _time_us(fn, iters: int, sync=lambda: None) -> float:
    for _ in range(5):
        fn()
    sync()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def cpu_rows(batch: int, iters: int) -> list[str]:
    bank = cpu_moe.make_bank("bf16", E, H, INTER, seed=0)
    x = cpu_moe.make_routing(0, batch, E, TOP_K, H, "cpu", torch.bfloat16)
    rows = []
    for threads in (1, 2):
        ex = cpu_moe.CpuMoeExecutor(
            bank, top_k=TOP_K, graph_sizes=(batch,), num_threads=threads, mode="recorded"
        )
        direct = _time_us(
            lambda ex=ex: ex.forward_eager(x["hidden"], x["expert_ids"], x["router_weights"]), iters
        )
        hs = _time_us(lambda ex=ex: ex(x["hidden"], x["expert_ids"], x["router_weights"]), iters)
        rows.append(
            f"cpu  threads={threads} executor {direct:9.1f} us | emulated handshake {hs:9.1f} us "
            f"(handshake cost {hs - direct:7.1f} us)"
        )
        ex.close()
    return rows


def gpu_rows(batch: int, iters: int) -> list[str]:
    if not torch.cuda.is_available():
        return ["gpu  skipped: torch.cuda.is_available() is False"]
    bank = cpu_moe.make_bank("bf16", E, H, INTER, seed=0)
    x = cpu_moe.make_routing(0, batch, E, TOP_K, H, "cuda", torch.bfloat16)
    sync = torch.cuda.synchronize
    rows = []
    compute = None
    for mode in ("eager", "memop", "hostfn"):
        ex = cpu_moe.CpuMoeExecutor(bank, top_k=TOP_K, graph_sizes=(batch,), mode=mode, device="cuda")
        if compute is None:
            xc = {k: v.cpu() for k, v in x.items()}
            compute = _time_us(
                lambda ex=ex, xc=xc: ex.forward_eager(xc["hidden"], xc["expert_ids"], xc["router_weights"]),
                iters,
            )
        eager = _time_us(lambda ex=ex: ex(x["hidden"], x["expert_ids"], x["router_weights"]), iters, sync)
        line = f"gpu  {mode:6s} eager {eager:9.1f} us"
        if mode != "eager":
            probe = cpu_moe.probe_and_enable(ex)
            if probe.ok:
                static = {k: v.clone() for k, v in x.items()}
                g = torch.cuda.CUDAGraph()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    ex(static["hidden"], static["expert_ids"], static["router_weights"])
                torch.cuda.current_stream().wait_stream(s)
                with torch.cuda.graph(g):
                    ex(static["hidden"], static["expert_ids"], static["router_weights"])
                replay = _time_us(g.replay, iters, sync)
                line += f" | graph replay {replay:9.1f} us | handshake cost {replay - compute:7.1f} us"
            else:
                line += f" | graphs disabled: {probe.reason}"
        rows.append(line)
        ex.close()
    rows.append(f"gpu  CPU expert compute alone {compute:9.1f} us (subtracted for the handshake cost)")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    print(
        f"cpu_moe decode layer: E={E} H={H} I={INTER} top_k={TOP_K} batch={args.batch} (median of {args.iters})"
    )
    for line in cpu_rows(args.batch, args.iters) + gpu_rows(args.batch, args.iters):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
