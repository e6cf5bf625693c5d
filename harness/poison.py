"""Poisoning: make unwritten memory loud.

Three mechanisms, all scoped to one check and restored afterwards (no global switch outlives a check):
- `fill_uninitialized_memory`: torch fills every `empty*` result with NaN (floats) or the dtype's max
  (integers), inside C++ ops too; it needs deterministic algorithms on (warn_only keeps other ops usable).
- byte patterns: fresh allocations are filled with 0xFF (NaN for fp32/fp16/bf16/e4m3fn/e5m2/E8M0, -1 for
  int32) or 0x7F (huge finite floats, large positive ints). On GPUs the poisoning allocator fills fresh
  segments, and `BytePatternMode` fills the results of the factory ops the op's calls dispatch
  (`op_call_poisoning`), over torch's NaN fill: without it every empty* result would hold NaN under both
  patterns and an op that masks NaN would hide an unwritten buffer from both. The cpu backend does the
  same for eager calls and wraps its captures and replays in the mode (its recorder replays the fills).
- output poisoning before each replay (`poison_outputs`): capture executes nothing, so an output the graph
  never writes would still hold an old, plausible value.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

PATTERNS: tuple[int, ...] = (0xFF, 0x7F)

# Factory ops whose result memory is uninitialized by contract.
_EMPTY_OPS = {
    torch.ops.aten.empty.memory_format,
    torch.ops.aten.empty_strided.default,
    torch.ops.aten.empty_like.default,
    torch.ops.aten.new_empty.default,
    torch.ops.aten.new_empty_strided.default,
}


@contextlib.contextmanager
def deterministic_fill() -> Iterator[None]:
    """Turn on torch's fill of uninitialized memory for the scope; restore the previous settings after."""
    previous_algorithms = torch.are_deterministic_algorithms_enabled()
    previous_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    previous_fill = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = previous_fill  # type: ignore[attr-defined]
        torch.use_deterministic_algorithms(previous_algorithms, warn_only=previous_warn_only)


@contextlib.contextmanager
def unfilled() -> Iterator[None]:
    """No NaN fill of fresh memory for the scope: for the harness's own copies (clones of inputs and outputs),
    which the copy overwrites whole. Under `deterministic_fill` a clone is a fill kernel and a copy; one check
    of a small op makes about 17 such clones."""
    previous = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = previous  # type: ignore[attr-defined]


def fill_bytes(tensor: torch.Tensor, pattern: int) -> None:
    """Fill the tensor's whole storage span with one byte value, whatever its dtype."""
    if tensor.numel() == 0:
        return
    storage = tensor.untyped_storage()
    torch.tensor([], dtype=torch.uint8, device=tensor.device).set_(storage).fill_(pattern)


class BytePatternMode(TorchDispatchMode):
    """Fill the results of `empty*` ops with a byte pattern (the CPU stand-in for a poisoning allocator)."""

    def __init__(self, pattern: int) -> None:
        super().__init__()
        self.pattern = pattern

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Without it torch.compile'd code runs eagerly under this mode (torch/_dynamo/convert_frame.py skips
        # frames while a mode without the flag is active), and the check would cover code that is not the
        # compiled code. Buffers inductor allocates in its generated code bypass the dispatcher: unfilled.
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        if func in _EMPTY_OPS and isinstance(result, torch.Tensor):
            fill_bytes(result, self.pattern)
        return result


_OP_CALL_PATTERN: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "graphsafe_op_fill", default=None
)


@contextlib.contextmanager
def fill_op_factories(pattern: int | None) -> Iterator[None]:
    """For the scope, calls of the op under test (`op_call_poisoning`) fill their factory results with
    `pattern`. A backend's poisoned scope sets it; the harness's own tensors in between stay unfilled, which
    keeps a Python dispatch per harness op (about 270 in one check of a small op) off every check. None: no
    op-call fill, for a backend that fills around a whole capture itself (the cpu backend's recorder must see
    the fills from outside, so that it records the factory ops and replays their fill)."""
    token = _OP_CALL_PATTERN.set(pattern)
    try:
        yield
    finally:
        _OP_CALL_PATTERN.reset(token)


def op_call_poisoning() -> contextlib.AbstractContextManager[None]:
    """The context one call of the op runs in: the byte-pattern mode of the enclosing `fill_op_factories`."""
    pattern = _OP_CALL_PATTERN.get()
    return contextlib.nullcontext() if pattern is None else BytePatternMode(pattern)


def poison_value(dtype: torch.dtype) -> float | int | bool:
    """What `poison_outputs` writes: NaN for floats, an out-of-range value for integers.

    Integers get the dtype's max, not -1: -1 is a legitimate "skip this slot" marker in routing buffers
    (SGLang pads top-k ids with -1), so a stale -1 would look written.
    """
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max


def poison_outputs(outputs: tuple[torch.Tensor, ...]) -> None:
    """Overwrite every graph output before a replay so that only what the replay writes survives."""
    with torch.no_grad():
        for out in outputs:
            if out.numel() == 0:
                continue
            if out.dtype in (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz):
                # fnuz formats have one NaN encoding, 0x80; 0xFF is their most negative finite value (-240 in e4m3fnuz).
                out.view(torch.uint8).fill_(0x80)
            elif out.dtype.itemsize == 1 and out.dtype.is_floating_point:
                out.view(torch.uint8).fill_(0xFF)  # NaN for e4m3fn and e5m2
            else:
                out.fill_(poison_value(out.dtype))
