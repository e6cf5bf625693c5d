"""aiter PR #5831, defect 1: the MoE GEMM's output from torch.empty with a half-foreign expert map.

Public report: https://github.com/ROCm/aiter/pull/5831 (2026-09-25). Reproduce:
`graphsafe repro moe_gemm_empty_output`.

Half of the rows of the grouped activations belong to experts of another rank (expert parallelism), so
no slot of the block map covers them. The buggy variant (zero_unwritten=False) leaves them holding
whatever the allocator had: under the harness's NaN-poisoned allocation they come back NaN and the
verdict is `uninitialized` (the report saw 100% NaN rows). The fixed variant zero-fills exactly those rows
inside the op (so inside the graph) and passes (the report: 0/16384 after the fix).
"""

from __future__ import annotations

import functools

import torch

from graphsafe import Case, register
from graphsafe.kernels.common import quant, routing
from graphsafe.kernels.moe_gemm import ops as moe_gemm_ops  # importing it registers graphsafe::moe_gemm
from graphsafe.kernels.moe_gemm.reference import moe_gemm_reference
from graphsafe.toolkit import CaseTable, Column, Line, Report

EXPERTS, N, K, TOKENS, TOPK, BLOCK_M = 8, 64, 128, 64, 2, 16


@functools.cache
def _weights() -> quant.QuantizedWeight:
    return quant.quantize_weight(
        torch.randn(EXPERTS, N, K, generator=torch.Generator().manual_seed(5831)), "mxfp8"
    )


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 2 * EXPERTS, (TOKENS, TOPK), generator=g)  # ids >= EXPERTS: the other rank's
    w, s, _ = moe_gemm_ops.kn_views(_weights())
    return {
        "x": torch.randn(TOKENS, K, generator=g).to(torch.bfloat16).to(device),
        "topk_ids": ids.to(torch.int32).to(device),
        "w": w.transpose(1, 2).to(device).transpose(1, 2),
        "w_scale": s.transpose(1, 2).to(device).transpose(1, 2),
    }


def _run(x, topk_ids, w, w_scale, *, zero_unwritten: bool):
    rows, _sizes, bmap = routing.route_topk(topk_ids, EXPERTS, BLOCK_M)
    return torch.ops.graphsafe.moe_gemm(
        x[rows // TOPK], w, w_scale, None, bmap, "mxfp8", BLOCK_M, zero_unwritten
    )


def reference(x, topk_ids, w, w_scale):
    rows, _sizes, bmap = routing.route_topk(topk_ids, EXPERTS, BLOCK_M)
    q = _weights()
    q = quant.QuantizedWeight(q.fmt, q.data.to(x.device), q.scale.to(x.device), None, q.k)
    return moe_gemm_reference(x[rows // TOPK], q, bmap).to(torch.bfloat16)


VARIANTS: dict[str, Case] = {}
for _variant, _zero, _expect in (("buggy", False, "uninitialized"), ("fixed", True, "pass")):
    VARIANTS[_variant] = register(
        Case(
            name=f"counterexamples.moe_gemm_empty_output.{_variant}",
            make_inputs=make_inputs,
            op=functools.partial(_run, zero_unwritten=_zero),
            reference=reference,
            tolerance=5e-3,
            expect=_expect,
            static_inputs=("w", "w_scale"),
            note="aiter#5831: torch.empty output + half-foreign expert map; tolerance as cases/moe_gemm.py",
        )
    )

REPORT = Report(
    title="aiter #5831 (1/3): moe_gemm_mxfp8 output from torch.empty, unwritten rows under expert parallelism",
    url="https://github.com/ROCm/aiter/pull/5831",
    date="2026-09-25",
    reproduced="the graphsafe MXFP8 MoE GEMM with a half-foreign expert map (token ids of another rank's "
    "experts), its output from torch.empty (buggy) or with exactly the unwritten rows zero-filled inside the "
    "op (fixed), under the harness's NaN-poisoned allocation",
    left_out="the Triton kernel and MI325X (gfx942): the rows are left unwritten by graphsafe's own kernel; "
    "the downstream `* 0` mask and top-k reduction that spread the NaN across a token",
    tables=(
        CaseTable(
            title="NaN-poisoned allocator, half-foreign map (the report: 100% NaN before, 0/16384 after)",
            label_header="check",
            lines=(Line("unwritten rows", buggy=VARIANTS["buggy"], fixed=VARIANTS["fixed"]),),
            columns=(
                Column("nonfinite", "buggy", header="main NaN/poison count"),
                Column("nonfinite", "fixed", header="PR NaN/poison values"),
                Column("verdict", "buggy", header="main"),
                Column("verdict", "fixed", header="PR"),
                Column("as expected"),
            ),
            sides=("main", "PR"),
        ),
    ),
)
