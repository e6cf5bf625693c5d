"""Backend selection: `cpu`, `gpu`, or `auto` (the GPU whenever torch sees one, else the CPU backend)."""

from __future__ import annotations

import torch

from graphsafe.backends.base import CapturedGraph, GraphBackend
from graphsafe.errors import BackendUnavailable

BACKEND_NAMES = ("auto", "cpu", "gpu")
_INSTANCES: dict[str, GraphBackend] = {}


def resolve_backend_name(name: str) -> str:
    if name not in BACKEND_NAMES:
        raise ValueError(f"backend {name!r} is not one of {', '.join(BACKEND_NAMES)}")
    if name == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    if name == "gpu" and not torch.cuda.is_available():
        # A run-level error, before any case runs: otherwise every case would get the same failure as its verdict.
        raise BackendUnavailable(
            "backend 'gpu' needs a CUDA or ROCm device; torch.cuda.is_available() is False (use --backend cpu)"
        )
    return name


def is_capturing() -> bool:
    """True while work issued now would be recorded into a graph instead of running: the current CUDA/HIP
    stream is capturing, or the cpu backend is recording an op on this thread.

    An op that keeps state outside its tensors (a handshake slot, a parameter cell) asks this to give each
    captured graph its own state; it is cheap enough to call on every invocation.
    """
    from graphsafe.backends.cpu import is_recording

    if is_recording():
        return True
    # is_current_stream_capturing needs a CUDA/HIP build of torch with a device; the CPU build has no stream.
    return torch.cuda.is_available() and bool(torch.cuda.is_current_stream_capturing())


def get_backend(name: str = "auto") -> GraphBackend:
    """One backend instance per process and name (the GPU backend loads its allocator once)."""
    resolved = resolve_backend_name(name)
    if resolved not in _INSTANCES:
        if resolved == "cpu":
            from graphsafe.backends.cpu import CpuBackend

            _INSTANCES[resolved] = CpuBackend()
        else:
            from graphsafe.backends.gpu import GpuBackend  # type: ignore[import-not-found,unused-ignore]

            _INSTANCES[resolved] = GpuBackend()
    return _INSTANCES[resolved]


__all__ = [
    "BACKEND_NAMES",
    "CapturedGraph",
    "GraphBackend",
    "get_backend",
    "is_capturing",
    "resolve_backend_name",
]
