"""Host microseconds of one eager graphsafe::moe_gemm call on CPU tensors at a tiny shape (E=1, N=8, K=32, one row,
bf16): best of 5 x 20000 calls, the CPU GEMM included. Run it in this tree and in a worktree of the commit before
the dispatcher units to compare (README, "Local measurements").

    PYTHONPATH=. python reports/measurements/h200-2026-12-02-session13/cpu_host_cost.py
"""

from __future__ import annotations

import time

import torch

import kernels.moe_gemm.ops  # noqa: F401  (registers graphsafe::moe_gemm)


def main() -> None:
    x = torch.ones(1, 32, dtype=torch.bfloat16)
    w = torch.ones(1, 32, 8, dtype=torch.bfloat16)
    bmap = torch.tensor([[0, 0, 1]], dtype=torch.int32)
    op = torch.ops.graphsafe.moe_gemm
    op(x, w, None, None, bmap, "bf16", 1)
    best = float("inf")
    for _ in range(5):
        n = 20000
        start = time.perf_counter()
        for _ in range(n):
            op(x, w, None, None, bmap, "bf16", 1)
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    print(f"moe_gemm cpu tiny us/call {best:.2f}")


if __name__ == "__main__":
    main()
