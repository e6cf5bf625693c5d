"""PyTorch PR #184368: CUDA graph outputs served from cached tensors go stale silently when another run reuses them.

Public report: https://github.com/pytorch/pytorch/pull/184368 (2026-05-19), "Fix CUDAGraph stale output checks
for cached tensors" (fixes issue #122192; merged 2026-05-20, reverted 2026-05-22 for a torchbench
regression). CUDA graph trees hand out cached output tensors on replay; a later run writes the same storage,
so a caller still holding an earlier output reads the later run's values. Warmup and recording raise
"accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run" in that situation;
replay of cached outputs did not, and the PR makes replay follow the same invalidation.

Rebuilt here in torch ops (the same on the cpu and gpu backends): a linear layer whose output tensor is
cached per shape and written with `out=` on every call (buggy), against one that returns a fresh output per
call, so each captured graph owns its own (fixed). The cases ask for two live graphs (`live_graphs=2`): the
harness captures two graphs of the op, replays both with different inputs, then reads each one's outputs.
With the cached output both graphs write one storage, and graph 0's output holds graph 1's values:
`stale_replay`. The single-graph replays pass either way (the harness reads each replay's output before the
next run), which is why the failure hid.

Left out: torch.compile's CUDA graph trees themselves (generations, warmup/recording, the cached-tensor
bookkeeping) and the fix's mechanism (raising on access to an overwritten output); the module rebuilds the
storage sharing that the check guards against, and the harness's live-graph comparison plays the check.
"""

from __future__ import annotations

import torch

from graphsafe import Case, register
from graphsafe.toolkit import CaseTable, Column, Line, Report

TOKENS, HIDDEN = 16, 64


class Linear:
    """x @ w into an output tensor: cached per shape and device (reused by every call), or fresh per call."""

    def __init__(self, cache_outputs: bool) -> None:
        self.cache_outputs = cache_outputs
        self._outputs: dict[tuple[str, tuple[int, ...]], torch.Tensor] = {}

    def __call__(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[0], w.shape[1])
        key = (str(x.device), shape)
        if not self.cache_outputs:
            out = torch.empty(shape, dtype=x.dtype, device=x.device)
        elif key in self._outputs:
            out = self._outputs[key]
        else:
            out = self._outputs[key] = torch.empty(shape, dtype=x.dtype, device=x.device)
        return torch.matmul(x, w, out=out)


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(TOKENS, HIDDEN, generator=g).to(device),
        "w": (torch.randn(HIDDEN, HIDDEN, generator=torch.Generator().manual_seed(184368)) / HIDDEN**0.5).to(
            device
        ),
    }


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.double() @ w.double()).float()


VARIANTS = {
    variant: register(
        Case(
            name=f"pytorch184368.cached_output.{variant}",
            make_inputs=make_inputs,
            op=Linear(cache_outputs=cached),
            reference=reference,
            expect=expect,
            static_inputs=("w",),
            live_graphs=2,
            note=note,
        )
    )
    for variant, cached, expect, note in (
        ("buggy", True, "stale_replay", "every call and graph writes one cached output tensor"),
        ("fixed", False, "pass", "each call, so each captured graph, owns its output"),
    )
}

REPORT = Report(
    title="PyTorch #184368: outputs served from cached tensors go stale when a later run reuses their storage",
    url="https://github.com/pytorch/pytorch/pull/184368",
    date="2026-05-19",
    reproduced="an op whose output tensor is cached and rewritten by every call (the storage sharing of "
    "cached graph outputs) against one with a fresh output per call, two live graphs replayed with "
    "different inputs before their outputs are read",
    left_out="torch.compile's CUDA graph trees and the fix's own mechanism (an error on access to an "
    "overwritten output); here the harness's live-graph comparison is the check that sees the stale output",
    tables=(
        CaseTable(
            title="Two live graphs, each replayed with its own input, then read",
            label_header="check",
            lines=(Line("cached vs per-call output", buggy=VARIANTS["buggy"], fixed=VARIANTS["fixed"]),),
            columns=(
                Column("verdict", "buggy", header="cached output"),
                Column("verdict", "fixed", header="per-call output"),
                Column("detail", "buggy", header="cached output detail"),
                Column("as expected"),
            ),
        ),
    ),
)
