"""Rebuilds and live graphs: 100 recaptures without memory growth, 32 graphs alive and replayed interleaved.

Each case carries its stress on the Case itself (`rebuilds=100` / `live_graphs=32`; the protocol applies the
larger of the case's and the run's knob), so `harness verify`, `pytest cases/` and a plain `check(case)` all
run it the same way. The two controls bite only under that stress: with plain replay they would pass.
GPU-only: registered when `torch.cuda.is_available()` at import.
"""

from __future__ import annotations

import torch

from graphsafe import Case, register
from graphsafe.cases.platform._shared import affine_reference, vector_inputs

REBUILDS = 100
LIVE_GRAPHS = 32  # twice the control's ring of 16 (kernels/platform/ops.py RING_CAPACITY)


def two_kernel_affine(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).add_(1)


if torch.cuda.is_available():
    from graphsafe.kernels.platform import ops as P

    register(
        Case(
            "platform_rebuild_100",
            vector_inputs,
            two_kernel_affine,
            affine_reference,
            rebuilds=REBUILDS,
            note="100 rebuilds: each recapture replays right and device memory stays flat",
        )
    )
    register(
        Case(
            "platform_rebuild_leak_control",
            vector_inputs,
            P.affine_leaky,
            affine_reference,
            expect="capture_error",
            rebuilds=REBUILDS,
            note="negative control, 100 rebuilds: every capture keeps an 8 MiB graph-pool buffer "
            "alive (~800 MiB growth past the 64 MiB bound); passes plain replay",
        )
    )
    register(
        Case(
            "platform_live_graphs_32",
            vector_inputs,
            P.affine_cell,
            affine_reference,
            live_graphs=LIVE_GRAPHS,
            note="32 live graphs: each graph reads its source address from its own parameter cell",
        )
    )
    register(
        Case(
            "platform_live_graphs_ring16_control",
            vector_inputs,
            P.affine_cell_ring16,
            affine_reference,
            expect="stale_replay",
            live_graphs=LIVE_GRAPHS,
            note="negative control, 32 live graphs: cells come from a ring of 16, so graph 17 "
            "overwrites graph 1's source address; passes plain replay",
        )
    )
