"""aiter PR #5831, defect 2: routing metadata sized with `.sum().item()` cannot be captured.

Public report: https://github.com/ROCm/aiter/pull/5831 (2026-09-25). Reproduce:
`graphsafe repro moe_gemm_item_routing`.

The buggy variant builds the block map with graphsafe.kernels.routing.block_map_from_group_sizes_legacy, whose
exact size comes from a host sync (`int(blocks.sum().item())`); under capture CUDA/HIP report
hipErrorStreamCaptureUnsupported, and the harness must say `capture_sync`. The fixed variant sizes the
map with the static bound cdiv(total_rows, block_m) + E and stamps surplus slots -1: `pass`, with group
sizes (and so the map) changing between A and B.
"""

from __future__ import annotations

import functools

import torch

from graphsafe import Case, register
from graphsafe.kernels.common import quant, routing
from graphsafe.kernels.moe_gemm import ops as moe_gemm_ops  # importing it registers graphsafe::moe_gemm
from graphsafe.kernels.moe_gemm.reference import moe_gemm_reference
from graphsafe.toolkit import CaseTable, Column, Line, Report

EXPERTS, N, K, BLOCK_M = 8, 64, 64, 16
MAX_PER_EXPERT = (0, 7, 64, 1, 100, 0, 84, 0)  # the report's ragged sizes as per-expert maxima
ROWS = sum(MAX_PER_EXPERT)


@functools.cache
def _weights() -> quant.QuantizedWeight:
    return quant.quantize_weight(
        torch.randn(EXPERTS, N, K, generator=torch.Generator().manual_seed(5658)), "mxfp8"
    )


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    maxima = torch.tensor(MAX_PER_EXPERT)
    sizes = (torch.rand(EXPERTS, generator=g) * (maxima + 1)).floor().clamp(max=maxima).to(torch.int32)
    w, s, _ = moe_gemm_ops.kn_views(_weights())
    return {
        "x": torch.randn(ROWS, K, generator=g).to(torch.bfloat16).to(device),
        "group_sizes": sizes.to(device),
        "w": w.transpose(1, 2).to(device).transpose(1, 2),
        "w_scale": s.transpose(1, 2).to(device).transpose(1, 2),
    }


def _run(x, group_sizes, w, w_scale, *, builder):
    bmap = builder(group_sizes, ROWS, BLOCK_M)
    return torch.ops.graphsafe.moe_gemm(x, w, w_scale, None, bmap, "mxfp8", BLOCK_M)


def reference(x, group_sizes, w, w_scale):
    bmap = routing.block_map_from_group_sizes(group_sizes, ROWS, BLOCK_M)
    q = _weights()
    q = quant.QuantizedWeight(q.fmt, q.data.to(x.device), q.scale.to(x.device), None, q.k)
    return moe_gemm_reference(x, q, bmap).to(torch.bfloat16)


_VARIANTS = (
    ("buggy", routing.block_map_from_group_sizes_legacy, "capture_sync"),
    ("fixed", routing.block_map_from_group_sizes, "pass"),
)
VARIANTS: dict[str, Case] = {}
for _variant, _builder, _expect in _VARIANTS:
    VARIANTS[_variant] = register(
        Case(
            name=f"counterexamples.moe_gemm_item_routing.{_variant}",
            make_inputs=make_inputs,
            op=functools.partial(_run, builder=_builder),
            reference=reference,
            tolerance=5e-3,
            expect=_expect,
            static_inputs=("w", "w_scale"),
            note="aiter#5831 / review r4045560427: .item() in group_sizes_to_expt_tensors",
        )
    )

REPORT = Report(
    title="aiter #5831 (2/3): group_sizes_to_expt_tensors ends in .item(), so the MoE GEMM cannot be captured",
    url="https://github.com/ROCm/aiter/pull/5831",
    date="2026-09-25",
    reproduced="the block map built from group sizes with an exact size from `int(blocks.sum().item())` "
    "(buggy) and with the static bound cdiv(total_rows, block_m) + E, surplus slots stamped -1 (fixed), the "
    "report's ragged group sizes (0, 7, 64, 1, 100, 0, 84, 0) as per-expert maxima, changing between A and B",
    left_out="the Triton kernel and MI325X (gfx942); the 2000-routing sweep of the static bound (the suite's "
    "routing tests cover the bound)",
    tables=(
        CaseTable(
            title="CUDA graph capture + replay (the report: fails on main, passes here)",
            label_header="check",
            lines=(Line("capture + replay", buggy=VARIANTS["buggy"], fixed=VARIANTS["fixed"]),),
            columns=(
                Column("result", "buggy", header="main"),
                Column("result", "fixed", header="PR"),
                Column("verdict", "buggy", header="main verdict"),
                Column("detail", "buggy", header="main detail"),
                Column("graph error", "fixed", header="PR graph error"),
                Column("as expected"),
            ),
            sides=("main", "PR"),
        ),
    ),
)
