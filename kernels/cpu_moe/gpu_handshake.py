"""CPU/hybrid MoE, the handshake on a GPU: the layer's forward through handshake.hip: `enqueue` (notify and wait in one call, overlap off),
`enqueue_notify` and `enqueue_wait` (the halves, with the GPU part between them, overlap on), and
synchronizing copies (mode `eager`, and batch sizes without a graph slot). The note on the hybrid layer
(kernels/cpu_moe/executor.py) says how the halves are ordered.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from graphsafe.kernels.cpu_moe.executor import ExecutorCore, Slot
from graphsafe.kernels.cpu_moe.settings import DTYPE_CODES, HandshakeNotCapturable

HS_MEMOP, HS_HOSTFN = 0, 1
FLAG_EXPLICIT_NODES = 1  # splice explicit batch-memop nodes into the capture (always on under HIP)
FLAG_INJECT_UNRECORDED = 2  # fault: memops on a non-capturing stream: they run at capture, never on replay


def gpu_forward(
    ex: ExecutorCore,
    hidden: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    *,
    force_capture: bool = False,
) -> torch.Tensor:
    stream = torch.cuda.current_stream(hidden.device)
    under_capture = torch.cuda.is_current_stream_capturing()
    tokens = hidden.shape[0]
    if ex.mode == "eager":
        if under_capture:
            ex.check_capture_allowed(force_capture)  # a probed layer: FallbackEager, not a crash
            raise HandshakeNotCapturable(
                "handshake mode 'eager' uses synchronizing copies and cannot be captured; use 'memop' or 'hostfn'"
            )
        return ex.after_handshake(_gpu_eager(ex, hidden, ids, weights, stream), hidden)
    if under_capture:
        ex.check_capture_allowed(force_capture)
        slot = ex.slot_for(tokens)  # no graph slot for this size: a named error, never a shared slot
    elif tokens in ex.graph_slots:
        slot = ex.graph_slots[tokens]
    else:
        # Not a graph size: synchronizing copies (never captured), so the GPU part simply follows.
        return ex.after_handshake(_gpu_eager(ex, hidden, ids, weights, stream), hidden)
    if ex.shared is None or not ex.overlap:
        moe = enqueue(ex, slot, hidden, ids, weights, stream, forced=force_capture)
        return ex.after_handshake(moe, hidden)
    return _gpu_overlapped(ex, slot, hidden, ids, weights, stream, forced=force_capture)


def _gpu_overlapped(
    ex: ExecutorCore,
    slot: Slot,
    hidden: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    stream: Any,
    *,
    forced: bool,
) -> torch.Tensor:
    """overlap on, on a GPU, all on the caller's stream: copies in + notify, the GPU part, wait + copy back,
    combine (kernels/cpu_moe/executor.py, note on the hybrid layer). Under capture the GPU part's kernel nodes
    lie between the notify and wait nodes, as the CPU backend records its split ops.

    NOTE on a GPU part that raises: the notify is already enqueued, so the CPU answers with done := 1.
    Without its wait nobody consumes that token: the next step's wait would pass at once on it and copy back
    the failed step's result, and every later step would lag one behind. So the wait is enqueued anyway (into
    `out`, allocated before the notify so that this cannot fail for memory), then the GPU part's error is
    raised; an error of that wait (a capture the first error invalidated) is dropped in favour of the first.
    The CPU backend drains such a wait at the next stage-in (`ExecutorCore.drain_queued`); a stream takes it in order.
    """
    assert ex.shared is not None
    flags = handshake_flags(ex, forced)  # an injected graph-API refusal raises here, before any enqueue
    out = torch.empty_like(hidden)
    enqueue_notify(ex, slot, hidden, ids, weights, stream, flags)
    try:
        gpu_out = ex.shared(hidden)
    except BaseException:
        with contextlib.suppress(Exception):
            enqueue_wait(ex, slot, out, stream, flags)
        raise
    enqueue_wait(ex, slot, out, stream, flags)
    return out + gpu_out


def handshake_flags(ex: ExecutorCore, forced: bool) -> int:
    """handshake.hip flags for this executor on the current stream; raises the injected graph-API fault."""
    under_capture = torch.cuda.is_current_stream_capturing()
    flags = FLAG_EXPLICIT_NODES if ex.explicit_memop_nodes else 0
    if ex.faults.unrecorded_memop:
        flags |= FLAG_INJECT_UNRECORDED
    if under_capture and ex.faults.graph_api_unsupported:
        # Injected fault: the runtime refuses the handshake's graph nodes. The probe sees the refusal (capture
        # failed: unsafe); a forced capture proceeds as an engine would, with memops that run at capture
        # and are never recorded (as on CPU: without the node API the notify/wait runs at capture only).
        if not forced or ex.mode != "memop":
            raise NotImplementedError("adding the handshake's graph nodes is unsupported (injected fault)")
        flags |= FLAG_INJECT_UNRECORDED
    return flags


def _hs_mode(ex: ExecutorCore) -> int:
    return HS_MEMOP if ex.mode == "memop" else HS_HOSTFN


def enqueue(
    ex: ExecutorCore,
    slot: Slot,
    hidden: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    stream: Any,
    *,
    out: torch.Tensor | None = None,
    forced: bool = False,
) -> torch.Tensor:
    """One handshake on `stream` through `slot`, notify and wait in one call (overlap off; recorded into
    the graph when the stream is capturing).

    `out`: a preallocated output (the probe's: nothing is allocated inside its capture, whatever memory pool
    the caller has active); else a fresh `empty_like(hidden)`.
    """
    flags = handshake_flags(ex, forced)
    if out is None:
        out = torch.empty_like(hidden)
    req, done = ex.signal_dev(slot)
    lay = slot.layout
    ex.handshake_lib.enqueue(
        stream.cuda_stream,
        _hs_mode(ex),
        flags,
        hidden.data_ptr(),
        ids.data_ptr(),
        weights.data_ptr(),
        out.data_ptr(),
        slot.host + lay["hidden"],
        slot.host + lay["ids"],
        slot.host + lay["weights"],
        slot.host + lay["out"],
        hidden.numel() * hidden.element_size(),
        ids.numel() * ids.element_size(),
        weights.numel() * weights.element_size(),
        out.numel() * out.element_size(),
        req,
        done,
        ex.executor_lib.run_slot_fn(),
        ex.service.slot_handle(slot.index),
    )
    return out


def enqueue_notify(
    ex: ExecutorCore,
    slot: Slot,
    hidden: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    stream: Any,
    flags: int,
) -> None:
    """The first half (overlap on): copies GPU->host, then the notify (write-value req := 1, or a host
    function storing it: the CPU service thread computes)."""
    lay = slot.layout
    ex.handshake_lib.enqueue_notify(
        stream.cuda_stream,
        _hs_mode(ex),
        flags,
        hidden.data_ptr(),
        ids.data_ptr(),
        weights.data_ptr(),
        slot.host + lay["hidden"],
        slot.host + lay["ids"],
        slot.host + lay["weights"],
        hidden.numel() * hidden.element_size(),
        ids.numel() * ids.element_size(),
        weights.numel() * weights.element_size(),
        ex.signal_dev(slot)[0],
        ex.signal_host(slot)[0],
    )


def enqueue_wait(ex: ExecutorCore, slot: Slot, out: torch.Tensor, stream: Any, flags: int) -> None:
    """The second half (overlap on): the wait for done == 1 (consuming it), then the copy host->GPU into
    `out`."""
    ex.handshake_lib.enqueue_wait(
        stream.cuda_stream,
        _hs_mode(ex),
        flags,
        out.data_ptr(),
        slot.host + slot.layout["out"],
        out.numel() * out.element_size(),
        ex.signal_dev(slot)[1],
        ex.signal_host(slot)[1],
    )


def _gpu_eager(
    ex: ExecutorCore, hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, stream: Any
) -> torch.Tensor:
    """Plain synchronizing copies through the eager slot (not capturable; any T up to max(graph_sizes))."""
    slot, hs, s = ex.eager_slot, ex.handshake_lib, stream.cuda_stream
    tokens = hidden.shape[0]
    if tokens > slot.tokens:
        raise ValueError(
            f"batch size {tokens} exceeds the eager slot's {slot.tokens} tokens (max of graph_sizes)"
        )
    lay = slot.layout
    hs.copy(slot.host + lay["hidden"], hidden.data_ptr(), hidden.numel() * hidden.element_size(), s)
    hs.copy(slot.host + lay["ids"], ids.data_ptr(), ids.numel() * 4, s)
    hs.copy(slot.host + lay["weights"], weights.data_ptr(), weights.numel() * 4, s)
    hs.sync(s)
    ex.service.forward(
        slot.host + lay["hidden"],
        DTYPE_CODES[hidden.dtype],
        slot.host + lay["ids"],
        slot.host + lay["weights"],
        slot.host + lay["out"],
        tokens,
        ex.top_k,
    )
    out = torch.empty_like(hidden)
    hs.copy(out.data_ptr(), slot.host + lay["out"], out.numel() * out.element_size(), s)
    hs.sync(s)
    return out
