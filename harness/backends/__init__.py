"""Backend selection: `cpu`, `gpu`, or `auto` (the GPU whenever torch sees one, else the CPU backend)."""

from __future__ import annotations

import torch

from harness.backends.base import CapturedGraph, GraphBackend

BACKEND_NAMES = ("auto", "cpu", "gpu")
_INSTANCES: dict[str, GraphBackend] = {}


def resolve_backend_name(name: str) -> str:
    if name not in BACKEND_NAMES:
        raise ValueError(f"backend {name!r} is not one of {', '.join(BACKEND_NAMES)}")
    if name == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    return name


def get_backend(name: str = "auto") -> GraphBackend:
    """One backend instance per process and name (the GPU backend loads its allocator once)."""
    resolved = resolve_backend_name(name)
    if resolved not in _INSTANCES:
        if resolved == "cpu":
            from harness.backends.cpu import CpuBackend

            _INSTANCES[resolved] = CpuBackend()
        else:
            if not torch.cuda.is_available():
                raise RuntimeError(
                    "backend 'gpu' needs a CUDA or ROCm device; torch.cuda.is_available() is False"
                )
            from harness.backends.gpu import GpuBackend  # type: ignore[import-not-found,unused-ignore]

            _INSTANCES[resolved] = GpuBackend()
    return _INSTANCES[resolved]


__all__ = ["BACKEND_NAMES", "CapturedGraph", "GraphBackend", "get_backend", "resolve_backend_name"]
