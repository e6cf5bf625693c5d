"""Host microseconds of one eager graphsafe::moe_gemm call through the C++ kernel (moe_gemm.torch.cpp) and of its
parts, per kernel path, on the GPU the machine has.

    PYTHONPATH=. python reports/measurements/h200-2026-12-02-session13/host_parts.py

Each figure is the best of 7 runs of 200 back-to-back calls (no synchronisation inside a run): the op through
torch.ops (op_us), the raw pybind11 entry with the output and workspace allocated beforehand (raw_us: argument
conversion, the C++ checks and the kernel launches), torch.empty of the output from Python (empty_us, an upper
bound of the C++ allocation), and a do-nothing aten op through torch.ops with one tensor (aten_alias_us: the
dispatcher's own floor from Python).
"""

from __future__ import annotations

import time

import torch

from kernels.common import quant, routing
from kernels.moe_gemm import ops


def best(fn, n: int = 200, trials: int = 7) -> float:
    fn()
    torch.cuda.synchronize()
    b = float("inf")
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        b = min(b, (time.perf_counter() - t) / n)
        torch.cuda.synchronize()
    return b * 1e6


def row(fmt: str, block_m: int, e: int = 32, n: int = 2048, k: int = 6144) -> str:
    dev = torch.device("cuda")
    q = quant.quantize_weight(torch.randn(e, n, k, device=dev), fmt)
    rows = e * block_m
    x = torch.randn(rows, k, device=dev).to(torch.bfloat16)
    bmap = routing.block_map_from_group_sizes(
        torch.full((e,), block_m, dtype=torch.int32, device=dev), rows, block_m
    )
    w, s, g = ops.kn_views(q)
    op_us = best(lambda: torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, fmt, block_m))
    module = ops.gpu_module()
    out = torch.empty(rows, n, dtype=torch.bfloat16, device=dev)
    _, args = ops.module_and_args(x, w, s, g, bmap.contiguous(), fmt, out, block_m)
    nbytes = module.workspace_bytes(*args)
    ws = torch.empty(max(nbytes, 16), dtype=torch.uint8, device=dev)
    stream = torch.cuda.current_stream().cuda_stream
    raw_us = best(lambda: module.moe_gemm(*args, 1, ws.data_ptr(), nbytes, stream))
    empty_us = best(lambda: torch.empty(rows, n, dtype=torch.bfloat16, device=dev))
    alias_us = best(lambda: torch.ops.aten.alias.default(x))
    path = ops.kernel_path(x, q, bmap, block_m)
    return (
        f"fmt={fmt} block_m={block_m} kernel={path} workspace_bytes={nbytes} op_us={op_us:.2f} raw_us={raw_us:.2f} "
        f"empty_us={empty_us:.2f} aten_alias_us={alias_us:.2f}"
    )


def main() -> None:
    print(torch.cuda.get_device_name())
    for fmt, block_m in (
        ("bf16", 1),
        ("mxfp8", 1),
        ("mxfp8", 16),
        ("mxfp8", 128),
        ("block_fp8", 16),
        ("mxfp4", 1),
    ):
        print(row(fmt, block_m), flush=True)


if __name__ == "__main__":
    main()
