"""The graph-backend interface: what the protocol needs from a way of capturing and replaying ops.

Two implementations: `cpu` (an emulated graph recorded at the dispatcher, for machines without a GPU) and
`gpu` (torch.cuda.CUDAGraph: a CUDA graph, or a HIP graph on ROCm builds of torch).
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from graphsafe.errors import OutputTypeError


def flatten_tensors(result: Any) -> tuple[torch.Tensor, ...]:
    """An op's result (a tensor, or nested tuples/lists of tensors) as a flat tuple in return order.

    The one place that decides what an op may return; raises OutputTypeError (a TypeError) naming what else it
    found. Sparse and nested tensors are refused by name: their values live in several internal tensors
    whose layout (nnz, offsets) may differ between two correct runs, so a byte comparison would mean nothing.
    """
    if isinstance(result, torch.Tensor):
        if result.is_nested:
            raise OutputTypeError("op returned a nested tensor; graphsafe compares strided tensors only")
        if result.layout != torch.strided:
            raise OutputTypeError(
                f"op returned a tensor with layout {result.layout}; graphsafe compares strided tensors only "
                "(return .to_dense())"
            )
        return (result,)
    if isinstance(result, tuple | list) and result:
        flat: list[torch.Tensor] = []
        for item in result:
            flat.extend(flatten_tensors(item))
        return tuple(flat)
    raise OutputTypeError(
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

    def launch_nodes(self) -> list[dict[str, Any]] | None:
        """What each node launches, for the launch diff (harness/launch_diff.py): dicts as
        graphsafe.native.graph_launch_nodes returns them. None where the backend has no such list (the cpu
        backend's record is read from CpuGraph.nodes instead)."""
        return None

    def release(self, *, reclaim_now: bool = True) -> None:  # noqa: B027 - optional hook, nothing to free by default
        """Free the graph and its private memory pool. `reclaim_now=False`: the memory may wait for the end of
        the poisoned scope, which frees it anyway (a GPU then synchronizes once for both)."""


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

    def kept_allocation(self) -> contextlib.AbstractContextManager[None]:
        """Scope for the harness's own tensors that outlive one poisoned scope (a check's inputs and reference
        outputs, kept for both patterns). Backends whose poisoned scope has no pool of its own: nothing to do."""
        return contextlib.nullcontext()

    def shared_pool(self) -> contextlib.AbstractContextManager[None]:
        """Scope in which every capture shares one memory pool, as an engine's graphs of several batch sizes
        do (vLLM captures its sizes largest first into one pool). Backends without pools: nothing to share."""
        return contextlib.nullcontext()

    def synchronize(self) -> None:  # noqa: B027 - CPU work is synchronous
        """Wait for all queued work on the device."""

    def mark(self) -> Any:
        """A point in the device's timeline, taken without waiting: the wall clock where work is synchronous,
        an event recorded on the current stream on GPUs. `elapsed_ms(start, end)` reads the time between two."""
        return time.perf_counter()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two marks of this backend (waits for `end` to be reached on GPUs)."""
        return (end - start) * 1e3

    def memory_in_use(self) -> int:
        """Bytes of device memory held by the process (for rebuild growth); 0 where not measurable."""
        return 0

    # Generator objects of the op's own (harness/hidden_state.py `op_generators`), set for one check.
    _op_generators: tuple[torch.Generator, ...] = ()

    @contextlib.contextmanager
    def generators_followed(self, generators: Sequence[torch.Generator]) -> Iterator[None]:
        """For the scope, rng_state and set_rng_state cover these generators too (the op's own, beside the
        default ones): an op drawing from `generator=g` is then replayed as fairly as one using the default."""
        previous = self._op_generators
        self._op_generators = tuple(generators)
        try:
            yield
        finally:
            self._op_generators = previous

    def rng_state(self) -> tuple[torch.Tensor, ...]:
        """The generators' states (CPU, this device's on GPUs, the op's own), for replaying random ops fairly.

        A CUDA graph reads its generators' seeds and offsets at replay and advances the offsets
        (CUDAGraph::replay -> replay_prologue; a generator other than the default is registered on first use
        under capture in torch releases with pytorch#176753, earlier ones refuse it), exactly as an eager call
        of the same kernels would; the CPU backend's
        replay re-runs the recorded random ops on their generators. So graph and eager draw the same numbers
        only when both start from the same states: the protocol restores this snapshot before each of them.
        """
        states = [torch.get_rng_state()]
        if self.device.type == "cuda":
            states.append(self._device_generator().get_state())
        states.extend(g.get_state() for g in self._op_generators)
        return tuple(states)

    def set_rng_state(self, state: tuple[torch.Tensor, ...]) -> None:
        torch.set_rng_state(state[0])
        first_own = 1
        if self.device.type == "cuda":
            self._device_generator().set_state(state[1])
            first_own = 2
        for generator, own in zip(self._op_generators, state[first_own:], strict=True):
            generator.set_state(own)

    def _device_generator(self) -> torch.Generator:
        """The device's default generator: what torch.cuda.get_rng_state / set_rng_state read and write once
        CUDA is initialized (torch/cuda/random.py), without their device context and lazy-call wrapper in
        Python; a check sets the state about 14 times."""
        if not torch.cuda.default_generators:  # filled when CUDA initializes, which those functions ensure
            torch.cuda.init()
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        return torch.cuda.default_generators[index]

    def describe(self) -> str:
        """One line for reports: which backend produced a verdict, and on what."""
        return f"{self.name} ({self.device})"
