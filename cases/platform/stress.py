"""Rebuilds and live graphs: 100 recaptures without memory growth, 32 graphs alive and replayed interleaved.

These ops work with plain replay (they pass it); they are meant to run with the protocol's stress knobs, listed
in STRESS_KNOBS (`check(case, backend, **STRESS_KNOBS[name])`, or `--rebuilds 100` / `--live-graphs 32`). The
two controls only bite under their knob: plain replay has one live graph per case and two captures, so there
they would pass, which is why they are listed in KNOB_ONLY_CONTROLS for runners that do not apply knobs.
GPU-only: registered when `torch.cuda.is_available()` at import.
"""

from __future__ import annotations

import torch

from cases.platform._shared import affine_reference, vector_inputs
from harness import Case, register

STRESS_KNOBS: dict[str, dict[str, int]] = {
    "platform_rebuild_100": {"rebuilds": 100},
    "platform_rebuild_leak_control": {"rebuilds": 100},
    "platform_live_graphs_32": {"live_graphs": 32},
    "platform_live_graphs_ring16_control": {"live_graphs": 32},
}
KNOB_ONLY_CONTROLS = frozenset({"platform_rebuild_leak_control", "platform_live_graphs_ring16_control"})


def two_kernel_affine(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).add_(1)


if torch.cuda.is_available():
    from kernels import platform_ops as P

    register(
        Case(
            "platform_rebuild_100",
            vector_inputs,
            two_kernel_affine,
            affine_reference,
            note="run with rebuilds=100: each recapture replays right and device memory stays flat",
        )
    )
    register(
        Case(
            "platform_rebuild_leak_control",
            vector_inputs,
            P.affine_leaky,
            affine_reference,
            expect="capture_error",
            note="negative control, run with rebuilds=100: every capture keeps an 8 MiB graph-pool buffer "
            "alive (~800 MiB growth past the 64 MiB bound); passes plain replay",
        )
    )
    register(
        Case(
            "platform_live_graphs_32",
            vector_inputs,
            P.affine_cell,
            affine_reference,
            note="run with live_graphs=32: each graph reads its source address from its own parameter cell",
        )
    )
    register(
        Case(
            "platform_live_graphs_ring16_control",
            vector_inputs,
            P.affine_cell_ring16,
            affine_reference,
            expect="stale_replay",
            note="negative control, run with live_graphs=32: cells come from a ring of 16, so graph 17 "
            "overwrites graph 1's source address; passes plain replay",
        )
    )
