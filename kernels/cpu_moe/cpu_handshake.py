"""CPU/hybrid MoE, the handshake on the CPU backend: the layer's forward there, and the torch custom ops it
runs (graphsafe::cpu_moe, and the staged copies and notify/wait that the CPU backend's recorder records as a
GPU graph would record copy and memop nodes).

The custom ops are registered once, when this module is first imported (kernels/cpu_moe/__init__.py imports
it). They carry the executor's handle, not the executor: an op's arguments must be tensors and scalars.
"""

from __future__ import annotations

import torch

import graphsafe
from graphsafe.kernels.cpu_moe.executor import ExecutorCore, Slot, executor_by_handle
from graphsafe.kernels.cpu_moe.settings import HandshakeNotCapturable
from graphsafe.kernels.cpu_moe.weights import SharedExpert
from graphsafe.toolkit import register_host_function_op


def cpu_forward(
    ex: ExecutorCore,
    hidden: torch.Tensor,
    expert_ids: torch.Tensor,
    router_weights: torch.Tensor,
    *,
    force_capture: bool = False,
) -> torch.Tensor:
    """The layer on CPU tensors: one custom op (`direct`, `eager`) or the staged handshake."""
    if graphsafe.is_capturing():
        ex.check_capture_allowed(force_capture)
        if ex.mode == "eager":
            raise HandshakeNotCapturable(
                "handshake mode 'eager' computes directly and cannot be captured; use 'recorded'"
            )
    if ex.mode in ("direct", "eager"):
        moe = torch.ops.graphsafe.cpu_moe(hidden, expert_ids, router_weights, ex.handle)
        return ex.after_handshake(moe, hidden)  # overlap is refused for these modes (OVERLAP_MODES)
    slot = ex.slot_for(hidden.shape[0])
    # Without the graph-node API the notify/wait cannot become nodes: it runs at capture only.
    recorded = ex.mode == "recorded" and not ex.faults.graph_api_unsupported
    return emulated_handshake(
        ex, slot, hidden, expert_ids, router_weights, recorded=recorded, gpu_part=ex.shared
    )


def emulated_handshake(
    ex: ExecutorCore,
    slot: Slot,
    hidden: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    *,
    recorded: bool,
    gpu_part: SharedExpert | None = None,
) -> torch.Tensor:
    """The layer on the CPU backend, each step a recorded op in a GPU stream's order (or, unrecorded, a
    plain call that runs at capture only). overlap off: stage in, notify+wait, stage out, GPU part,
    combine. overlap on: stage in, notify, GPU part, wait, stage out, combine: the GPU part's torch ops
    run while the service thread computes (the wait was queued on a thread by the notify, as a stream
    queues a wait-value). The probe passes gpu_part=None: with overlap it still takes the split ops."""
    token = torch.ops.graphsafe.cpu_moe_stage_in(hidden, ids, weights, ex.handle, slot.index)
    gpu_out = None
    if not ex.overlap:
        if recorded:
            token = torch.ops.graphsafe.cpu_moe_notify_wait(token, ex.handle, slot.index)
        else:
            ex.notify_wait(slot.index)  # a plain call: the emulated graph never sees it
    else:
        if recorded:
            token = torch.ops.graphsafe.cpu_moe_notify(token, ex.handle, slot.index)
        else:
            ex.queue_notify_wait(slot.index)  # plain calls: run at capture only, like the above
        if gpu_part is not None:
            gpu_out = gpu_part(hidden)
        if recorded:
            token = torch.ops.graphsafe.cpu_moe_wait(token, ex.handle, slot.index)
        else:
            ex.join_queued_wait(slot.index)
    moe = torch.ops.graphsafe.cpu_moe_stage_out(token, ex.handle, slot.index)
    if gpu_part is None:
        return moe
    if gpu_out is None:
        gpu_out = gpu_part(hidden)  # overlap off: after the copy back
    return moe + gpu_out


# ------------------------------------------------------------------------------------ torch custom ops


@torch.library.custom_op("graphsafe::cpu_moe", mutates_args=())
def cpu_moe_op(
    hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor, handle: int
) -> torch.Tensor:
    return executor_by_handle(handle).forward_eager(hidden, expert_ids, router_weights)


@cpu_moe_op.register_fake
def _(
    hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor, handle: int
) -> torch.Tensor:
    return torch.empty_like(hidden)


# `direct` stands for the GPU's host-function node (settings.HANDSHAKE_ON_GPU): the layer runs on the host at
# replay and reads its CPU tensors there (expert-id range check), which is no host sync.
register_host_function_op(cpu_moe_op)


@torch.library.custom_op("graphsafe::cpu_moe_stage_in", mutates_args=())
def stage_in(
    hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor, handle: int, slot: int
) -> torch.Tensor:
    """The D2H copy node: inputs into the slot's executor-owned buffers. Returns a token for ordering."""
    ex = executor_by_handle(handle)
    s = ex.slot_by_index(slot)
    ex.drain_queued(slot)
    ex.slot_tensor(s, "hidden").copy_(hidden)
    ex.slot_tensor(s, "ids").copy_(expert_ids)
    ex.slot_tensor(s, "weights").copy_(router_weights)
    return torch.zeros(1, dtype=torch.int32)


@stage_in.register_fake
def _(hidden, expert_ids, router_weights, handle, slot):  # type: ignore[no-untyped-def]
    return torch.empty(1, dtype=torch.int32)


@torch.library.custom_op("graphsafe::cpu_moe_notify_wait", mutates_args=())
def notify_wait(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    """The write-value + wait-value nodes: post the slot's token, wait until the CPU side answers."""
    executor_by_handle(handle).notify_wait(slot)
    return token.clone()


@notify_wait.register_fake
def _(token, handle, slot):  # type: ignore[no-untyped-def]
    return torch.empty_like(token)


@torch.library.custom_op("graphsafe::cpu_moe_notify", mutates_args=())
def notify(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    """The write-value node alone (overlap on): post the slot's token; its wait is queued behind it."""
    executor_by_handle(handle).queue_notify_wait(slot)
    return token.clone()


@notify.register_fake
def _(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    return torch.empty_like(token)


@torch.library.custom_op("graphsafe::cpu_moe_wait", mutates_args=())
def wait(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    """The wait-value node (overlap on): block until the CPU side answered the notify before it."""
    executor_by_handle(handle).join_queued_wait(slot)
    return token.clone()


@wait.register_fake
def _(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    return torch.empty_like(token)


@torch.library.custom_op("graphsafe::cpu_moe_stage_out", mutates_args=())
def stage_out(token: torch.Tensor, handle: int, slot: int) -> torch.Tensor:
    """The H2D copy node: the slot's output buffer into a fresh output."""
    ex = executor_by_handle(handle)
    return ex.slot_tensor(ex.slot_by_index(slot), "out").clone()


@stage_out.register_fake
def _(token, handle, slot):  # type: ignore[no-untyped-def]
    ex = executor_by_handle(handle)
    s = ex.slot_by_index(slot)
    return torch.empty(s.tokens, ex.bank.hidden, dtype=ex.dtype)
