"""CPU/hybrid MoE, the handshake on the CPU backend (kernels/cpu_moe.py re-exports every name here): the
torch custom ops (graphsafe::cpu_moe, and the staged copies and notify/wait that the emulated graph records),
the emulated notify/wait they run (overlap on: queued on a thread, as a stream queues a wait-value), and
capture detection.

The custom ops are registered once, when this module is first imported (kernels/cpu_moe.py and
kernels/cpu_moe_executor.py import it).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import torch

from kernels.cpu_moe_common import EMULATED_WAIT_TIMEOUT_S, HandshakeError, _executor

if TYPE_CHECKING:
    from kernels.cpu_moe_executor import CpuMoeExecutor, _Slot


def _plain_notify_wait(ex: CpuMoeExecutor, slot: int) -> None:
    if not ex._ex.notify_wait(slot, int(EMULATED_WAIT_TIMEOUT_S * 1e6)):
        raise HandshakeError(f"CPU side did not answer slot {slot} within {EMULATED_WAIT_TIMEOUT_S} s")


class _QueuedWait:
    """The emulated stream's notify+wait for one slot, queued on a thread (CPU backend, overlap on).

    NOTE: the token protocol stays the C++ notify_wait's (req := 1, wait done == 1, done := 0, with release/
    acquire ordering), run on a thread that stands for the GPU queue: the caller's thread is then free to run
    the GPU part while the service thread computes, as a stream runs kernels queued behind a wait-value's
    writer. Thread start and join order the slot buffers' writes and reads on every architecture, which
    plain Python stores into the signal words would not.
    """

    def __init__(self, ex: CpuMoeExecutor, slot: int) -> None:
        self.answered: bool | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.answered = ex._ex.notify_wait(slot, int(EMULATED_WAIT_TIMEOUT_S * 1e6))
            except BaseException as exc:  # reported by the wait
                self.error = exc

        self.thread = threading.Thread(target=run, name=f"cpu-moe-queue-{ex.handle}-{slot}", daemon=True)
        self.thread.start()


def _drain_queued(ex: CpuMoeExecutor, slot: int) -> None:
    """A step that stopped between notify and wait (an exception in the GPU part) left its wait queued; a
    stream would run it before the next step's copies, so it drains first: its answer is consumed by its own
    wait, never by the next step's, and the CPU is done reading the slot before new inputs land there."""
    stale = ex._queued.pop(slot, None)
    if stale is not None:
        stale.thread.join(EMULATED_WAIT_TIMEOUT_S + 5.0)


def _queue_notify_wait(ex: CpuMoeExecutor, slot: int) -> None:
    _drain_queued(ex, slot)
    ex._queued[slot] = _QueuedWait(ex, slot)


def _join_queued_wait(ex: CpuMoeExecutor, slot: int) -> None:
    queued = ex._queued.pop(slot, None)
    if queued is None:
        raise HandshakeError(f"wait on slot {slot} without a notify before it")
    queued.thread.join(EMULATED_WAIT_TIMEOUT_S + 5.0)
    if queued.error is not None:
        raise HandshakeError(f"slot {slot}: {type(queued.error).__name__}: {queued.error}")
    if queued.thread.is_alive() or not queued.answered:
        raise HandshakeError(f"CPU side did not answer slot {slot} within {EMULATED_WAIT_TIMEOUT_S} s")


def capturing(device: torch.device) -> bool:
    """Is a graph being captured for work on `device`? GPUs: the current stream's capture status."""
    if device.type == "cuda":
        return torch.cuda.is_current_stream_capturing()
    return _cpu_capturing()


def _cpu_capturing() -> bool:
    """True inside the CPU backend's recorder (the emulated capture).

    NOTE: the harness has no public "is capturing" yet, so this one helper looks for the CPU backend's
    private recorder on the dispatch-mode stack; switch to the public call once the harness exports one.
    """
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    try:
        from harness.backends.cpu import _Recorder
    except ImportError:  # the harness is optional for plain use of the executor
        return False
    return any(isinstance(m, _Recorder) for m in _get_current_dispatch_mode_stack())


# ------------------------------------------------------------------------------------ torch custom ops


@torch.library.custom_op("graphsafe::cpu_moe", mutates_args=())
def _cpu_moe_op(
    hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor, handle: int
) -> torch.Tensor:
    return _executor(handle).forward_eager(hidden, expert_ids, router_weights)


@_cpu_moe_op.register_fake
def _(
    hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor, handle: int
) -> torch.Tensor:
    return torch.empty_like(hidden)


@torch.library.custom_op("graphsafe::cpu_moe_stage_in", mutates_args=())
def _stage_in(
    hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor, handle: int, slot: int
) -> torch.Tensor:
    """The D2H copy node: inputs into the slot's executor-owned buffers. Returns a token for ordering."""
    ex = _executor(handle)
    s = _slot_by_index(ex, slot)
    _drain_queued(ex, slot)
    ex.slot_tensor(s, "hidden").copy_(hidden)
    ex.slot_tensor(s, "ids").copy_(expert_ids)
    ex.slot_tensor(s, "weights").copy_(router_weights)
    return torch.zeros(1, dtype=torch.int32)


@_stage_in.register_fake
def _(hidden, expert_ids, router_weights, handle, slot):  # type: ignore[no-untyped-def]
    return torch.empty(1, dtype=torch.int32)


@torch.library.custom_op("graphsafe::cpu_moe_notify_wait", mutates_args=())
def _notify_wait(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    """The write-value + wait-value nodes: post the slot's token, wait until the CPU side answers."""
    _plain_notify_wait(_executor(handle), slot)
    return token.clone()


@_notify_wait.register_fake
def _(token, handle, slot):  # type: ignore[no-untyped-def]
    return torch.empty_like(token)


@torch.library.custom_op("graphsafe::cpu_moe_notify", mutates_args=())
def _notify(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    """The write-value node alone (overlap on): post the slot's token; its wait is queued behind it."""
    _queue_notify_wait(_executor(handle), slot)
    return token.clone()


@_notify.register_fake
def _(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    return torch.empty_like(token)


@torch.library.custom_op("graphsafe::cpu_moe_wait", mutates_args=())
def _wait(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    """The wait-value node (overlap on): block until the CPU side answered the notify before it."""
    _join_queued_wait(_executor(handle), slot)
    return token.clone()


@_wait.register_fake
def _(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    return torch.empty_like(token)


@torch.library.custom_op("graphsafe::cpu_moe_stage_out", mutates_args=())
def _stage_out(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    """The H2D copy node: the slot's output buffer into a fresh output."""
    ex = _executor(handle)
    return ex.slot_tensor(_slot_by_index(ex, slot), "out").clone()


@_stage_out.register_fake
def _(token, handle, slot):  # type: ignore[no-untyped-def]
    ex = _executor(handle)
    s = _slot_by_index(ex, slot)
    return torch.empty(s.tokens, ex.bank.hidden, dtype=ex.dtype)


def _slot_by_index(ex: CpuMoeExecutor, index: int) -> _Slot:
    for s in [*ex._slots.values(), *ex._probe_slots, ex._eager_slot]:
        if s.index == index:
            return s
    raise ValueError(f"slot {index} not in executor {ex.handle}")
