"""Large graphs: 256, 1024 and 4096 kernel nodes, each reading its own row of an input that changes between
replays (ROCm/hip#3887 saw stale device-pointer values past ~200 kernel nodes on gfx1201).

acc = x[0].clone(); acc += x[i] for i in 1..N-1: N kernel nodes, each with a distinct source pointer. The
inputs are small integers, so the sum is exact in any order and the case is bit-exact against x.sum(0).
GPU-only: registered when `torch.cuda.is_available()` at import (4096 launches are slow under the CPU backend's
dispatcher recording, and the bug is a GPU runtime's).
"""

from __future__ import annotations

import torch

from graphsafe import Case, register
from graphsafe.cases.platform._shared import WarmupSnapshot, integer_rows

STALE_FROM_NODE = 200  # the control goes stale past this node, where hip#3887 saw it


def row_chain(x: torch.Tensor) -> torch.Tensor:
    acc = x[0].clone()
    for i in range(1, x.shape[0]):
        acc.add_(x[i])
    return acc


def row_sum_reference(x: torch.Tensor) -> torch.Tensor:
    return x.double().cpu().sum(0).to(torch.float32).to(x.device)


_snapshot = WarmupSnapshot()


def row_chain_stale_tail(x: torch.Tensor) -> torch.Tensor:
    """Negative control: nodes past STALE_FROM_NODE read rows of the warm-up input (A), like a runtime that
    keeps stale kernel arguments past a node count."""
    frozen = _snapshot.source(x)
    acc = x[0].clone()
    for i in range(1, x.shape[0]):
        acc.add_(x[i] if i < STALE_FROM_NODE else frozen[i])
    return acc


if torch.cuda.is_available():
    for nodes in (256, 1024, 4096):
        register(
            Case(
                f"platform_large_graph_{nodes}_nodes",
                integer_rows(nodes),
                row_chain,
                row_sum_reference,
                bit_exact=True,
                note=f"{nodes} kernel nodes, each reading its own input row",
            )
        )
    register(
        Case(
            "platform_large_graph_stale_tail_control",
            integer_rows(1024),
            row_chain_stale_tail,
            row_sum_reference,
            bit_exact=True,
            expect="stale_replay",
            note=f"negative control: nodes past {STALE_FROM_NODE} read input A's rows",
        )
    )
