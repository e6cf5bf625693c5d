"""Benchmark of graphsafe::moe_gemm at decode and prefill shapes (aiter PR #5831).

Reports, in one run on one GPU: weight bandwidth as a fraction of the device copy bandwidth measured in
the same run (a D2D copy of the same byte count), time against a per-expert bf16 torch matmul loop and
torch._grouped_mm (where present), and the zero-fill overhead table of aiter PR #5831 (2T/(E*K), zeros time,
GEMM time, overhead), the op's time eager and replayed from a CUDA graph (graph_ms: how a decode step
runs it, without Python dispatch and launch gaps; both timed in alternating trials after the capture, SETTLE_S
says why), which kernel ran (moe_gemm_ops.kernel_path), and the
host time of one eager call of the op (host_us through torch.ops.graphsafe.moe_gemm, host_us_default through its
.default overload; torch._grouped_mm's beside them). Skips cleanly without a GPU.
The kernel's own variants (e4m3 decode, tensor-core path) are swept by bench/moe_gemm_variants.cu.

    python bench/moe_gemm.py --out reports/bench_moe_gemm.csv [--fmt mxfp8 ...] [--shapes Hy4-TP8-decode ...]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time

import torch

from graphsafe.kernels.common import quant, routing
from graphsafe.kernels.moe_gemm import ops as moe_gemm_ops  # importing it registers graphsafe::moe_gemm
from graphsafe.toolkit import captured_graph, host_us, time_ms

# (name, E, N, K, tokens per expert): Hy4-preview-FP8 gemm1 at TP8 (256 experts / 8 ranks, hidden 6144,
# moe_intermediate 2048, aiter#5831's bench) and DeepSeek-V3-like shapes (256 experts / 8 ranks = 32 local,
# hidden 7168, moe_intermediate 2048 -> gate_up N = 4096).
SHAPES = (
    ("Hy4-TP8-decode", 32, 2048, 6144, 1),
    ("Hy4-TP8-16tok", 32, 2048, 6144, 16),
    ("DSv3-decode", 32, 4096, 7168, 1),
    ("DSv3-prefill", 32, 4096, 7168, 128),
    ("small-K-MoE", 32, 2048, 512, 64),
)


# torch.cuda.graph's entry calls torch.cuda.empty_cache(); where the caching allocator had blocks to hand back,
# kernels run slower for the next tens of milliseconds on the H200, the SM clock steady (MXFP8 DSv3-decode
# timed right after its capture, `--settle-s 0`: reports/performance.md; an empty_cache() alone does the same to
# eager calls). The bench's 3 x 20 timed calls fit inside that window, so the op is captured first and timed
# after SETTLE_S of idle (earlier tensors' gigabytes are among the blocks released; 0.5 s is many times the
# longest window measured).
SETTLE_S = 0.5


def _weight_bytes(q: quant.QuantizedWeight) -> int:
    return sum(t.numel() * t.element_size() for t in (q.data, q.scale, q.global_scale) if t is not None)


def prefill_block_m(tpe: int, override: int | None = None) -> int:
    """The block map's slot size per shape: the tokens per expert up to 16 (decode: the ring kernel), else 128
    from 128 tokens per expert on (the prefill kernel's 128-row tiles, one slot per expert at DSv3-prefill)
    and 64 below (small-K-MoE's 64 tokens: a 128-row tile would idle half its warps); `override` (the
    --prefill-block-m option) replaces the prefill choice."""
    if tpe <= 16:
        return tpe
    if override is not None:
        return override
    return 128 if tpe >= 128 else 64


def bench_shape(name, e, n, k, tpe, fmt, prefill_bm=None, settle_s=SETTLE_S):
    dev = torch.device("cuda")
    q = quant.quantize_weight(torch.randn(e, n, k, device=dev), fmt)
    rows = e * tpe
    block_m = prefill_block_m(tpe, prefill_bm)
    sizes = torch.full((e,), tpe, dtype=torch.int32, device=dev)
    bmap = routing.block_map_from_group_sizes(sizes, rows, block_m)
    x = torch.randn(rows, k, device=dev).to(torch.bfloat16)
    graph = captured_graph(lambda: moe_gemm_ops.moe_gemm(x, q, bmap, block_m))
    torch.cuda.synchronize()
    time.sleep(settle_s)
    gemm_ms, graph_ms = time_ms(lambda: moe_gemm_ops.moe_gemm(x, q, bmap, block_m), graph.replay)
    w, s, g = moe_gemm_ops.kn_views(q)
    op_host_us = host_us(lambda: torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, fmt, block_m))
    # The same call through the resolved overload (moe_gemm_ops.moe_gemm_op, torch.ops.graphsafe.moe_gemm.default):
    # without the packet's per-call overload resolution.
    op_host_us_default = host_us(lambda: moe_gemm_ops.moe_gemm_op(x, w, s, g, bmap, fmt, block_m))
    wbytes = _weight_bytes(q)
    src = torch.empty(wbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_ms = time_ms(lambda: dst.copy_(src))[0]
    copy_gbs = 2 * wbytes / copy_ms / 1e6  # read + write
    weight_gbs = wbytes / gemm_ms / 1e6
    zeros_ms = time_ms(lambda: torch.zeros(rows, n, dtype=torch.bfloat16, device=dev))[0]
    wb = torch.randn(e, k, n, device=dev).to(torch.bfloat16)
    xs = x.view(e, tpe, k)
    loop_ms = time_ms(lambda: [xs[i] @ wb[i] for i in range(e)])[0]
    grouped_ms = grouped_host_us = float("nan")
    if hasattr(torch, "_grouped_mm"):
        offs = torch.arange(tpe, rows + 1, tpe, device=dev, dtype=torch.int32)
        try:
            grouped_ms = time_ms(lambda: torch._grouped_mm(x, wb, offs=offs))[0]
            grouped_host_us = host_us(lambda: torch._grouped_mm(x, wb, offs=offs))
        except RuntimeError as exc:  # shape/arch restrictions of the private op
            print(f"  torch._grouped_mm unavailable here: {exc}".splitlines()[0], file=sys.stderr)
    return {
        "shape": name,
        "fmt": fmt,
        "E": e,
        "N": n,
        "K": k,
        "tokens_per_expert": tpe,
        "block_m": block_m,
        "kernel": moe_gemm_ops.kernel_path(x, q, bmap, block_m),
        "weight_bytes": wbytes,
        "gemm_ms": round(gemm_ms, 4),
        "weight_GBps": round(weight_gbs, 1),
        "copy_GBps": round(copy_gbs, 1),
        "frac_of_copy_bw": round(weight_gbs / copy_gbs, 3),
        "graph_ms": round(graph_ms, 4),
        "graph_frac_of_copy_bw": round(wbytes / graph_ms / 1e6 / copy_gbs, 3),
        "bf16_loop_ms": round(loop_ms, 4),
        "grouped_mm_ms": round(grouped_ms, 4),
        "host_us": round(op_host_us, 1),
        "host_us_default": round(op_host_us_default, 1),
        "grouped_mm_host_us": round(grouped_host_us, 1),
        "2T_over_EK": round(2 * rows / (e * k), 3),
        "zeros_ms": round(zeros_ms, 4),
        "zero_fill_overhead": round(zeros_ms / gemm_ms, 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="CSV path for the results")
    parser.add_argument(
        "--fmt", nargs="*", default=["mxfp8", "bf16", "block_fp8", "mxfp4"], choices=quant.FORMATS
    )
    names = [shape[0] for shape in SHAPES]
    parser.add_argument("--shapes", nargs="*", default=names, choices=names)
    parser.add_argument(
        "--prefill-block-m",
        type=int,
        default=None,
        help="slot size for shapes of more than 16 tokens per expert",
    )
    parser.add_argument(
        "--settle-s",
        type=float,
        default=SETTLE_S,
        help=f"idle seconds between a shape's capture and its timing (default {SETTLE_S}; SETTLE_S says why)",
    )
    args = parser.parse_args()
    if args.settle_s < 0:
        parser.error(f"--settle-s must be >= 0, got {args.settle_s}")
    if not torch.cuda.is_available():
        print("bench/moe_gemm.py: no CUDA/ROCm device; skipped")
        return 0
    rows = []
    for fmt in args.fmt:
        for shape in (sh for sh in SHAPES if sh[0] in args.shapes):
            row = bench_shape(*shape, fmt, args.prefill_block_m, args.settle_s)
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.out:
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
