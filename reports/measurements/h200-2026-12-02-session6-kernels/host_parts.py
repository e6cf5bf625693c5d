"""Host microseconds of the parts of one eager graphsafe::moe_gemm call (kernels/moe_gemm/ops.py), on the
device the machine has (CUDA if present, else the CPU module at a tiny shape, where `run` includes the CPU GEMM).

    PYTHONPATH=. python reports/measurements/h200-2026-12-02-session6-kernels/host_parts.py [mxfp8 16]

Each figure is the best of 7 runs of N back-to-back calls (no synchronisation inside a run): dispatch through
torch.ops (the packet and the .default overload), the Python impl alone, the two forms of the signature key
(nested per-tensor tuples, as before this session, and the flat tuple ops.py builds), the plan lookup, the
output's torch.empty, a workspace torch.empty against the cached eager workspace, and the pybind run call.
"""

from __future__ import annotations

import sys
import time

import torch

from kernels.common import quant, routing
from kernels.moe_gemm import ops


def best(fn, n: int = 2000, trials: int = 7) -> float:
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    b = float("inf")
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        b = min(b, (time.perf_counter() - t) / n)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return b * 1e6


def main() -> None:
    fmt = sys.argv[1] if len(sys.argv) > 1 else "mxfp8"
    block_m = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    e, n, k, tpe = (32, 2048, 6144, block_m) if dev.type == "cuda" else (1, 8, 32, block_m)
    q = quant.quantize_weight(torch.randn(e, n, k, device=dev), fmt)
    rows = e * tpe
    x = torch.randn(rows, k, device=dev).to(torch.bfloat16)
    bmap = routing.block_map_from_group_sizes(
        torch.full((e,), tpe, dtype=torch.int32, device=dev), rows, block_m
    )
    w, s, g = ops.kn_views(q)
    iters = 200 if dev.type == "cuda" else 2000  # GPU calls queue kernels: keep the queue short
    print(
        f"device={dev} fmt={fmt} block_m={block_m} E={e} N={n} K={k} kernel={ops.kernel_path(x, q, bmap, block_m)}"
    )
    print(
        f"op_packet_us {best(lambda: torch.ops.graphsafe.moe_gemm(x, w, s, g, bmap, fmt, block_m), iters):.2f}"
    )
    print(f"op_default_us {best(lambda: ops.moe_gemm_op(x, w, s, g, bmap, fmt, block_m), iters):.2f}")
    print(f"impl_us {best(lambda: ops.moe_gemm_impl(x, w, s, g, bmap, fmt, block_m), iters):.2f}")

    def meta(t):
        return None if t is None else (t.shape, t.stride(), t.dtype, t.device)

    def nested_key():
        xp, wp = x.data_ptr(), w.data_ptr()
        return (fmt, block_m, meta(x), meta(w), meta(s), meta(g), meta(bmap), xp & 15, wp & 15)

    def flat_key():
        xp, wp = x.data_ptr(), w.data_ptr()
        return (
            fmt, block_m, x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(), w.dtype, w.device,
            None if s is None else (s.shape, s.stride(), s.dtype, s.device),
            None if g is None else (g.shape, g.stride(), g.dtype, g.device),
            bmap.shape, bmap.stride(), bmap.dtype, bmap.device, xp & 15, wp & 15,
        )  # fmt: skip

    table = {nested_key(): 1, flat_key(): 1}
    print(f"key_nested_build_and_lookup_us {best(lambda: table.get(nested_key())):.2f}")
    print(f"key_flat_build_and_lookup_us {best(lambda: table.get(flat_key())):.2f}")
    print(f"out_new_empty_us {best(lambda: x.new_empty(rows, n)):.2f}")
    plan = ops._PLANS[flat_key()]
    module, index, _r, _n, _copy, nbytes, cplan = plan
    print(f"workspace_bytes {nbytes}")
    if nbytes:
        stream = torch._C._cuda_getCurrentRawStream(index)
        print(
            f"workspace_torch_empty_us {best(lambda: torch.empty(nbytes, dtype=torch.uint8, device=dev)):.2f}"
        )
        print(
            f"workspace_cached_us {best(lambda: ops._eager_workspace(nbytes, dev, index, stream, module)):.2f}"
        )
    if dev.type == "cuda":
        print(f"current_stream_us {best(lambda: torch._C._cuda_getCurrentRawStream(index)):.2f}")
        out = x.new_empty(rows, n)
        ws = (
            ops._eager_workspace(nbytes, dev, index, torch._C._cuda_getCurrentRawStream(index), module)
            if nbytes
            else None
        )
        wsp = 0 if ws is None else ws.data_ptr()
        args = (
            x.data_ptr(),
            w.data_ptr(),
            0 if s is None else s.data_ptr(),
            0,
            bmap.data_ptr(),
            out.data_ptr(),
            1,
            wsp,
        )
        st = torch._C._cuda_getCurrentRawStream(index)
        print(f"pybind_run_with_launches_us {best(lambda: module.run(cplan, *args, st), iters):.2f}")


if __name__ == "__main__":
    main()
