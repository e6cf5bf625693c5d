"""Input factories and the warm-up snapshot shared by the platform cases (private: registers nothing)."""

from __future__ import annotations

from collections.abc import Callable

import torch

N_ELEMENTS = 4096  # one wave of small-op work; bigger sizes add time, not coverage


def vector_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    """x: float32 N(0,1), different for every seed."""
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N_ELEMENTS, generator=g).to(device)}


def affine_reference(x: torch.Tensor) -> torch.Tensor:
    """2x + 1 in float64 on the host, rounded once: an oracle independent of the device's kernels."""
    return (x.double().cpu() * 2 + 1).to(torch.float32).to(x.device)


def integer_rows(rows: int, width: int = 256) -> Callable[[int, torch.device], dict[str, torch.Tensor]]:
    """x: (rows, width) float32 holding small integers, so any summation order is exact (|sum| < 2**24)."""

    def make(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randint(-8, 9, (rows, width), generator=g).to(torch.float32).to(device)}

    return make


class WarmupSnapshot:
    """The "frozen at capture" failure shape without a host sync: eager calls remember a copy of their input;
    a capture reads the copy made by the last eager call (the warm-up, with input A) instead of the live input,
    so every replay computes from A. Copies used by graphs are kept alive for the process's life."""

    def __init__(self) -> None:
        self.last: torch.Tensor | None = None
        self.kept: list[torch.Tensor] = []

    def source(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.cuda.is_current_stream_capturing():
            self.last = x.detach().clone()
            return x
        if self.last is None or self.last.shape != x.shape:  # no warm-up: nothing stale to read yet
            return x
        self.kept.append(self.last)
        return self.last
