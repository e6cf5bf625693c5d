"""The graph-backend interface: what the protocol needs from a way of capturing and replaying ops.

Two implementations: `cpu` (an emulated graph recorded at the dispatcher, for machines without a GPU) and
`gpu` (torch.cuda.CUDAGraph: a CUDA graph, or a HIP graph on ROCm builds of torch).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from typing import Any

import torch


def flatten_tensors(result: Any) -> tuple[torch.Tensor, ...]:
    """An op's result (a tensor, or nested tuples/lists of tensors) as a flat tuple in return order.

    The one place that decides what an op may return; raises TypeError naming what else it found.
    """
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, tuple | list) and result:
        flat: list[torch.Tensor] = []
        for item in result:
            flat.extend(flatten_tensors(item))
        return tuple(flat)
    raise TypeError(
        f"op returned {type(result).__name__}; outputs must be a Tensor or a non-empty tuple/list of Tensors"
    )


class CapturedGraph(abc.ABC):
    """One captured graph. `outputs` are the graph-owned static output tensors, flattened in return order."""

    outputs: tuple[torch.Tensor, ...]

    @abc.abstractmethod
    def replay(self) -> None:
        """Replay once, asynchronously on GPUs; the protocol calls `backend.synchronize()` after."""

    def node_kinds(self) -> dict[str, int] | None:
        """Counts of graph node kinds (kernel, memcpy, memset, host, event_record, event_wait, mem_op, ...).

        None where the backend cannot inspect its graphs.
        """
        return None

    def release(self) -> None:  # noqa: B027 - optional hook, nothing to free by default
        """Free the graph and its private memory pool."""


class GraphBackend(abc.ABC):
    name: str
    device: torch.device

    @abc.abstractmethod
    def capture(self, fn: Callable[[], Any], *, warmup: int = 1) -> CapturedGraph:
        """Run `fn` eagerly `warmup` times (on a side stream on GPUs), then capture one call of it.

        Raises CaptureSyncError for a host sync or data-dependent shape under capture, CaptureError for
        any other capture failure, FallbackEager when the op's own probe declined capture. Exceptions the
        op raises during warm-up (for example a refusal) propagate unchanged.
        """

    def poisoned_allocation(self, pattern: int) -> contextlib.AbstractContextManager[None]:
        """Scope in which fresh allocations are filled with `pattern` bytes (0xFF or 0x7F).

        The protocol runs warm-up, capture, replays and eager runs of one pattern inside it.
        """
        return contextlib.nullcontext()

    def synchronize(self) -> None:  # noqa: B027 - CPU work is synchronous
        """Wait for all queued work on the device."""

    def memory_in_use(self) -> int:
        """Bytes of device memory held by the process (for rebuild growth); 0 where not measurable."""
        return 0

    def describe(self) -> str:
        """One line for reports: which backend produced a verdict, and on what."""
        return f"{self.name} ({self.device})"
