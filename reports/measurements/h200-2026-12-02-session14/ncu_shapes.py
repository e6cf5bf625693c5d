"""Runs graphsafe::moe_gemm three times at DSv3-prefill (32 experts, N 4096, K 7168, 128 rows per expert) in one
format, for Nsight Compute to profile the third launch of a kernel (run_f.sh).

    PYTHONPATH=. python reports/measurements/h200-2026-12-02-session14/ncu_shapes.py bf16|mxfp8
"""

from __future__ import annotations

import sys

import torch

from kernels.common import quant, routing
from kernels.moe_gemm import ops


def main(fmt: str) -> None:
    dev = torch.device("cuda")
    e, n, k, block_m = 32, 4096, 7168, 128
    q = quant.quantize_weight(torch.randn(e, n, k, device=dev), fmt)
    rows = e * block_m
    x = torch.randn(rows, k, device=dev).to(torch.bfloat16)
    sizes = torch.full((e,), block_m, dtype=torch.int32, device=dev)
    bmap = routing.block_map_from_group_sizes(sizes, rows, block_m)
    print(fmt, ops.kernel_path(x, q, bmap, block_m), flush=True)
    for _ in range(3):
        ops.moe_gemm(x, q, bmap, block_m=block_m)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1])
