"""The `cpu` backend: an emulated graph recorded at the dispatcher, for machines without a GPU.

Capture runs the op once under a TorchDispatchMode that records every aten/custom op with its tensor
arguments (the same tensor objects: storage identity stands for frozen device addresses) and its frozen
non-tensor arguments. Replay re-runs the record in order and writes each fresh result into the recorded
output tensor, so later nodes and the graph's outputs see new values exactly where a real graph would.

What it sees as a real graph would: registered ops (torch.library custom ops are single nodes), host syncs
(`.item()`, `nonzero`, boolean-mask indexing, ...: CaptureSyncError), `empty*` re-poisoned on every replay.
What it does not see, as documented in the README: plain Python and pybind11 calls (they run once, at
capture, and never on replay: the unrecorded-handshake shape of seed 000), streams, events, RNG offsets and
other threads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.backends.base import CapturedGraph, GraphBackend, flatten_tensors
from harness.errors import CaptureError, CaptureSyncError, FallbackEager
from harness.poison import BytePatternMode, deterministic_fill

aten = torch.ops.aten

# Ops that read device data on the host or produce data-dependent shapes: under real capture these raise
# cudaErrorStreamCaptureUnsupported / hipErrorStreamCaptureUnsupported (PITFALLS.md, Capturing).
_HOST_SYNC_OPS: dict[Any, str] = {
    aten._local_scalar_dense.default: ".item()/.tolist()/bool() reads a device value on the host",
    aten.is_nonzero.default: "bool(tensor) reads a device value on the host",
    aten.equal.default: "torch.equal returns a host bool computed from device data",
    aten.nonzero.default: "nonzero has a data-dependent output shape",
    aten.masked_select.default: "masked_select has a data-dependent output shape",
    aten.unique_consecutive.default: "unique_consecutive has a data-dependent output shape",
    aten._unique2.default: "unique has a data-dependent output shape",
    aten._unique.default: "unique has a data-dependent output shape",
    aten.unique_dim.default: "unique has a data-dependent output shape",
    aten.bincount.default: "bincount's output length depends on max(input)",
    aten.histc.default: "histc on a device synchronizes for its range",
}
_INDEX_OPS = {
    aten.index.Tensor,
    aten.index_put.default,
    aten.index_put_.default,
    aten._index_put_impl_.default,
}


def _host_sync_reason(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    if func in _HOST_SYNC_OPS:
        return _HOST_SYNC_OPS[func]
    repeat_ops = (aten.repeat_interleave.Tensor, aten.repeat_interleave.self_Tensor)
    if func in repeat_ops and kwargs.get("output_size") is None:
        return "repeat_interleave without output_size has a data-dependent output shape"
    if func in _INDEX_OPS and len(args) > 1:
        for index in args[1] or ():
            if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
                return "boolean-mask indexing has a data-dependent output shape (it calls nonzero)"
    return None


@dataclass
class _Node:
    func: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    fresh_outputs: list[tuple[int, torch.Tensor]]  # (position in flattened result, recorded tensor)


def _fresh_output_positions(func: Any) -> set[int] | None:
    """Positions of returns that are new tensors (not views of or writes to an argument).

    None when the schema is unavailable (treat every tensor return as fresh).
    """
    schema = getattr(func, "_schema", None)
    if schema is None:
        return None
    fresh = set()
    for i, ret in enumerate(schema.returns):
        if ret.alias_info is None:
            fresh.add(i)
    return fresh


_RECORDING = threading.local()  # .depth: recorders entered on this thread (dispatch modes are per thread)


def is_recording() -> bool:
    """True on this thread while CpuBackend.capture records an op, including inside custom ops' bodies
    (the dispatcher pops the mode while an op it intercepted runs, so the mode stack alone cannot say)."""
    return getattr(_RECORDING, "depth", 0) > 0


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[_Node] = []

    def __enter__(self) -> _Recorder:
        _RECORDING.depth = getattr(_RECORDING, "depth", 0) + 1
        try:
            return super().__enter__()
        except BaseException:
            _RECORDING.depth -= 1
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            _RECORDING.depth -= 1

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        reason = _host_sync_reason(func, args, kwargs)
        if reason is not None:
            raise CaptureSyncError(f"{func}: {reason}")
        result = func(*args, **kwargs)
        fresh_positions = _fresh_output_positions(func)
        results = result if isinstance(result, tuple | list) else (result,)
        fresh: list[tuple[int, torch.Tensor]] = []
        for position, value in enumerate(results):
            if isinstance(value, torch.Tensor) and (fresh_positions is None or position in fresh_positions):
                fresh.append((position, value))
        self.nodes.append(_Node(func, tuple(args), dict(kwargs), fresh))
        return result


class CpuGraph(CapturedGraph):
    def __init__(self, nodes: list[_Node], outputs: tuple[torch.Tensor, ...], pattern: int | None) -> None:
        self.nodes = nodes
        self.outputs = outputs
        self.pattern = pattern

    def replay(self) -> None:
        # Factory ops re-poison on replay like a fill node inside a real graph (PITFALLS.md, Poisoning).
        fill = BytePatternMode(self.pattern) if self.pattern is not None else None
        with torch.no_grad(), deterministic_fill():
            if fill is not None:
                fill.__enter__()
            try:
                for node in self.nodes:
                    result = node.func(*node.args, **node.kwargs)
                    results = result if isinstance(result, tuple | list) else (result,)
                    for position, recorded in node.fresh_outputs:
                        value = results[position]
                        if value.data_ptr() != recorded.data_ptr() or value.stride() != recorded.stride():
                            recorded.copy_(value)
            finally:
                if fill is not None:
                    fill.__exit__(None, None, None)

    def node_kinds(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for node in self.nodes:
            kinds[str(node.func)] = kinds.get(str(node.func), 0) + 1
        return kinds

    def release(self) -> None:
        self.nodes = []


class CpuBackend(GraphBackend):
    name = "cpu"

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self._pattern: int | None = None

    def capture(self, fn: Callable[[], Any], *, warmup: int = 1) -> CapturedGraph:
        for _ in range(warmup):
            fn()
        recorder = _Recorder()
        try:
            with torch.no_grad(), _host_reads_refused(), recorder:
                result = fn()
        except (CaptureError, FallbackEager):
            raise
        except Exception as exc:  # whatever else the op raised under capture is a capture failure
            if _looks_like_sync(exc):
                raise CaptureSyncError(f"{type(exc).__name__}: {exc}") from exc
            raise CaptureError(f"{type(exc).__name__}: {exc}") from exc
        try:
            outputs = flatten_tensors(result)
        except TypeError as exc:
            raise CaptureError(str(exc)) from exc
        return CpuGraph(recorder.nodes, outputs, self._pattern)

    def poisoned_allocation(self, pattern: int) -> contextlib.AbstractContextManager[None]:
        return _CpuPoison(self, pattern)

    def describe(self) -> str:
        return "cpu (dispatcher-recorded emulated graph; no streams, events or threads)"


# Tensor methods that read data on the host without passing the dispatcher (tolist copies element by element
# in C++; numpy shares the buffer): a real capture would sync on each.
_HOST_READ_METHODS = ("tolist", "numpy", "__array__")


@contextlib.contextmanager
def _host_reads_refused() -> Iterator[None]:
    saved = {name: getattr(torch.Tensor, name) for name in _HOST_READ_METHODS}

    def refuse(name: str) -> Callable[..., Any]:
        def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            raise CaptureSyncError(f"Tensor.{name}() reads device data on the host")

        return method

    try:
        for name in _HOST_READ_METHODS:
            setattr(torch.Tensor, name, refuse(name))
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def _looks_like_sync(exc: BaseException) -> bool:
    # A CaptureSyncError raised inside a custom op's Python implementation may arrive wrapped.
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, CaptureSyncError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


class _CpuPoison(contextlib.AbstractContextManager[None]):
    """Context manager: deterministic fill plus byte-pattern fill of factory results, for one pattern."""

    def __init__(self, backend: CpuBackend, pattern: int) -> None:
        self.backend = backend
        self.pattern = pattern
        self._fill = deterministic_fill()
        self._mode = BytePatternMode(pattern)

    def __enter__(self) -> None:
        self.backend._pattern = self.pattern
        self._fill.__enter__()
        self._mode.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        self._fill.__exit__(*exc)
        self.backend._pattern = None
