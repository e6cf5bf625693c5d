"""CPU/hybrid MoE, the executor (kernels/cpu_moe.py re-exports every name here): CpuMoeExecutor, one MoE
layer on CPU threads with executor-owned slots and signals kept across graph rebuilds, its graph policy, and
the layer's forward on each device (kernels/cpu_moe_ops.py on the CPU backend, kernels/cpu_moe_gpu.py on a
GPU); Faults, the fault injection that its handshakes and its probe read (tests only).

NOTE on the hybrid layer (seed 000: "real hybrid CPU/GPU computation with overlap on/off"): the executor is
the layer; with `shared=` (a SharedExpert, torch ops on the layer's device) its output is the CPU experts'
contribution plus the GPU part's, and `overlap` picks where the GPU part runs. off: stage in, notify, wait,
copy back, GPU part, combine. on: stage in, notify, GPU part, wait, copy back, combine, in one stream's
order. The notify does not block the stream (a write-value, or a host function that only stores req), so
the GPU part's kernels run while the CPU service computes, and the wait after them blocks only until the
answer. On the CPU backend each step is a recorded op (the emulated wait is queued on a thread by the
notify). On a GPU the halves are handshake.hip's `enqueue_notify` and `enqueue_wait` (`_gpu_overlapped`),
and a capture records the GPU part's kernel nodes between the notify and wait nodes. Why one stream and not
the GPU part forked onto a second stream around the fused handshake (this layer's first GPU version): the
graph stays one chain, the GPU part's memory is allocated and freed in one stream's order, and both
backends have one structure. Overlap off keeps the fused `enqueue` (hostfn: one host node that runs the CPU
layer itself). The probe captures the handshake alone in the form the layer uses: with overlap, notify
then wait (on a GPU the split entry points; hostfn: two host nodes, the service thread computes); the cases
check the whole layer.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernels.cpu_moe_common import (
    _DTYPE_CODES,
    _EXECUTORS,
    _FORMAT_CODES,
    _HANDLES,
    CLOSE_DRAIN_S,
    DEVICE_MODES,
    HANDSHAKE_MODES,
    OVERLAP_MODES,
    PROBE_SLOTS,
    PROBE_TOKENS,
    SIGNAL_STRIDE,
    HandshakeNotCapturable,
    UnsafeExecutorCapture,
    _choice,
    cpu_module,
    handshake_module,
    same_device,
)
from kernels.cpu_moe_gpu import _gpu_forward
from kernels.cpu_moe_ops import (
    _cpu_capturing,
    _join_queued_wait,
    _plain_notify_wait,
    _queue_notify_wait,
    _QueuedWait,
)
from kernels.cpu_moe_watchdog import Watchdog
from kernels.cpu_moe_weights import ExpertBank, SharedExpert, reference_layer


@dataclass
class Faults:
    """Fault injection (tests only). Each makes the probe say "unsafe" for a different reason."""

    graph_api_unsupported: bool = False  # adding the handshake's graph nodes fails (hipErrorNotSupported)
    launch_delay_s: float = 0.0  # the probe's replay launch starts this late (a busy queue)
    unrecorded_memop: bool = False  # memops run during capture but are not recorded (ROCm < 7.x fix)
    cpu_never_answers: bool = False  # the service thread ignores the probe slot


@dataclass
class _Slot:
    index: int
    tokens: int
    host: int  # host address of the slot buffer
    dev: int  # device address of the same (mapped) memory; == host on CPU
    layout: dict[str, int]
    quarantined: bool = False


def _check_gpu_part(
    shared: SharedExpert | None,
    overlap: bool,
    mode: str,
    hidden: int,
    dtype: torch.dtype,
    device: torch.device,
) -> None:
    if overlap and shared is None:
        raise ValueError("overlap=True needs a GPU part to overlap with the CPU experts (shared=...)")
    if overlap and mode not in OVERLAP_MODES:
        raise ValueError(
            f"overlap=True needs a handshake with a notify/wait gap, modes {OVERLAP_MODES}; got mode {mode!r}"
        )
    if shared is None:
        return
    for name, w in (("w13", shared.w13), ("w2", shared.w2)):
        if not same_device(w.device, device):
            raise ValueError(f"shared.{name} is on {w.device} but the layer runs on {device}")
        if w.dtype != dtype:
            raise TypeError(f"shared.{name} dtype must be {dtype} (the layer's), got {w.dtype}")
    if shared.w13.shape != (2 * shared.inter, hidden) or shared.w2.shape != (hidden, shared.inter):
        raise ValueError(
            f"shared expert must be w13 [2I, {hidden}] and w2 [{hidden}, I], got "
            f"{tuple(shared.w13.shape)} and {tuple(shared.w2.shape)}"
        )


class CpuMoeExecutor:
    """One MoE layer on CPU threads, with executor-owned slots and signals kept across graph rebuilds.

    graph_sizes: the batch sizes graphs are captured for; one slot each (any number, > 16, above the
    decode limit: capacity is derived from them, never clamped), plus PROBE_SLOTS probe slots and one eager
    slot of max(graph_sizes) tokens. mode: one of HANDSHAKE_MODES. policy: "fallback" (a layer: raise
    FallbackEager at capture when graphs are disabled) or "strict" (the bare executor: raise
    UnsafeExecutorCapture). Graphs start disabled until `enable_graphs()` or a passing probe.

    shared: the hybrid layer's GPU part (a SharedExpert on the layer's device); the output is then the CPU
    experts' contribution plus shared(hidden). overlap (needs `shared` and a mode in OVERLAP_MODES): off,
    the GPU part runs after the handshake's copy back; on, it runs while the CPU computes (module note on
    the hybrid layer says how on each device). The order never changes the numbers.
    """

    def __init__(
        self,
        bank: ExpertBank,
        *,
        top_k: int,
        graph_sizes: Sequence[int] = (1, 2, 4, 8),
        mode: str = "direct",
        num_threads: int = 2,
        dtype: torch.dtype = torch.bfloat16,
        device: str | torch.device = "cpu",
        policy: str = "fallback",
        faults: Faults | None = None,
        shared: SharedExpert | None = None,
        overlap: bool = False,
    ) -> None:
        _choice("mode", mode, HANDSHAKE_MODES)
        _choice("policy", policy, ("fallback", "strict"))
        _choice("dtype", dtype, tuple(_DTYPE_CODES))
        if not graph_sizes or any(int(s) < 1 for s in graph_sizes):
            raise ValueError(
                f"graph_sizes must be a non-empty list of positive sizes, got {list(graph_sizes)}"
            )
        self.device = torch.device(device)
        if self.device.type not in DEVICE_MODES:
            raise ValueError(f"device must be a cpu or cuda device, got {self.device}")
        if mode not in DEVICE_MODES[self.device.type]:
            raise ValueError(
                f"mode {mode!r} does not run on device {self.device}: "
                f"cpu modes {DEVICE_MODES['cpu']}, cuda modes {DEVICE_MODES['cuda']}"
            )
        if self.device.type == "cuda" and self.device.index is None:
            # Resolve now: streams, mapped memory and the inputs' check all refer to one concrete device.
            self.device = torch.device("cuda", torch.cuda.current_device())
        _check_gpu_part(shared, overlap, mode, bank.hidden, dtype, self.device)
        self.bank, self.top_k, self.mode, self.dtype, self.policy = bank, top_k, mode, dtype, policy
        self.shared, self.overlap = shared, bool(overlap)
        self._queued: dict[int, _QueuedWait] = {}  # CPU backend, overlap on: waits queued behind a notify
        self.graph_sizes = tuple(sorted({int(s) for s in graph_sizes}))
        self.faults = faults or Faults()
        self.graphs_enabled = False
        self.disabled_reason = "no probe has run"
        # CUDA records stream memops natively (PITFALLS, measured on CUDA 13); True splices explicit
        # batch-memop nodes as the HIP path always does, so that path is testable on NVIDIA too.
        self.explicit_memop_nodes = False
        self.last_watchdog: Watchdog | None = None
        self._in_flight: list[Any] = []  # probe graphs a watchdog is still draining: never freed early
        self.handle = next(_HANDLES)
        self._mod = cpu_module()
        self._hs = handshake_module() if self.device.type == "cuda" else None
        self.max_slots = len(self.graph_sizes) + PROBE_SLOTS + 1
        self._ex = self._mod.Executor(num_threads, self.max_slots)
        self._ex.set_layer(
            _FORMAT_CODES[bank.fmt],
            bank.num_experts,
            bank.hidden,
            bank.inter,
            *bank.pointers(bank.w13),
            *bank.pointers(bank.w2),
        )
        self._keep: list[Any] = []  # CPU memory backing slots and signals
        self._mapped: list[int] = []  # GPU mapped host allocations to free
        self._signals_host, self._signals_dev = self._alloc(self.max_slots * SIGNAL_STRIDE)
        self._slots: dict[int, _Slot] = {}
        self._probe_slots: list[_Slot] = []
        for tokens in self.graph_sizes:
            self._slots[tokens] = self._add_slot(tokens)
        for _ in range(PROBE_SLOTS):
            self._probe_slots.append(self._add_slot(PROBE_TOKENS))
        self._eager_slot = self._add_slot(max(self.graph_sizes))
        self._ex.start_service()
        self.closed = False
        _EXECUTORS[self.handle] = self

    # -- memory --------------------------------------------------------------------------------------------
    def _alloc(self, nbytes: int) -> tuple[int, int]:
        if self._hs is not None:
            host, dev = self._hs.alloc_mapped(nbytes)
            self._mapped.append(host)
            return host, dev
        buf = torch.zeros(nbytes + 64, dtype=torch.uint8)
        self._keep.append(buf)
        addr = (buf.data_ptr() + 63) // 64 * 64
        return addr, addr

    def _add_slot(self, tokens: int) -> _Slot:
        code = _DTYPE_CODES[self.dtype]
        layout = dict(self._ex.slot_layout(tokens, self.top_k, code))
        host, dev = self._alloc(layout["total"])
        index = self._ex.add_slot(
            tokens, self.top_k, code, host, self._signals_host + self._ex.num_slots * SIGNAL_STRIDE
        )
        return _Slot(index, tokens, host, dev, layout)

    def signal_dev(self, slot: _Slot) -> tuple[int, int]:
        """Device-visible addresses of the slot's req and done words (the memop handshake's)."""
        base = self._signals_dev + slot.index * SIGNAL_STRIDE
        return base, base + 64

    def signal_host(self, slot: _Slot) -> tuple[int, int]:
        """Host addresses of the same words (the split hostfn handshake's host functions write them)."""
        base = self._signals_host + slot.index * SIGNAL_STRIDE
        return base, base + 64

    @property
    def num_threads(self) -> int:
        return self._ex.num_threads

    def slot_for(self, tokens: int) -> _Slot:
        if tokens not in self._slots:
            raise ValueError(
                f"batch size {tokens} has no graph slot: graph_sizes={list(self.graph_sizes)} "
                "(capacity is derived from the configured graph sizes)"
            )
        return self._slots[tokens]

    def release_all(self) -> None:
        """Watchdog action: answer every slot's wait without computing (the GPU queue must never hang). The
        slots' results are then meaningless; callers report the step that needed it as failed."""
        for index in range(self._ex.num_slots):
            self._ex.release(index)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self._hs is not None:
                self._drain_gpu()
        finally:
            for index, queued in list(self._queued.items()):  # a step abandoned between notify and wait
                self._ex.release(index)
                queued.thread.join(1.0)
            self._queued.clear()
            self._ex.stop_service()
            _EXECUTORS.pop(self.handle, None)
            if self._hs is not None:
                for host in self._mapped:
                    self._hs.free_mapped(host)
                self._mapped.clear()

    def _drain_gpu(self) -> None:
        """Let the device finish before the service thread stops and the signal words are freed.

        NOTE: a GPU wait this executor's steps enqueued (memop wait-value, or the split hostfn's await_done)
        is answered only by this executor's service thread, and only once the GPU has reached the notify.
        A close right after an asynchronous step (`ex(x).double()`, then `close()`, as
        tests/test_handshake.py's overlap on/off test did) stopped the service first whenever the GPU was
        behind, and the step's wait was never answered. On the H200, 1 of 4 runs of the handshake GPU tests
        with 8 pytest workers sharing the GPU hung hard (workers outlived `timeout`); this race is the one
        path to such a hang we found in them. So close synchronizes the device first, under a watchdog that
        answers this executor's waits past CLOSE_DRAIN_S (a wait nobody answers: an ignored slot)."""
        finished = threading.Event()
        guard = Watchdog(
            self.release_all,
            finished.is_set,
            deadline_s=CLOSE_DRAIN_S,
            period_s=0.01,
            max_s=CLOSE_DRAIN_S + 60,
        )
        try:
            torch.cuda.synchronize(self.device)
        finally:
            finished.set()
            guard.join(5.0)

    # -- graph policy --------------------------------------------------------------------------------------
    def enable_graphs(self, ok: bool, reason: str = "") -> None:
        self.graphs_enabled = bool(ok)
        self.disabled_reason = "" if ok else (reason or "disabled")

    def _check_capture_allowed(self, force: bool) -> None:
        if self.graphs_enabled or force:
            return
        from harness.errors import FallbackEager

        why = f"CPU MoE handshake unsafe for graphs ({self.disabled_reason}); running eagerly"
        if self.policy == "fallback":
            raise FallbackEager(why)
        raise UnsafeExecutorCapture(f"direct capture of an unsafe executor refused: {self.disabled_reason}")

    # -- the op --------------------------------------------------------------------------------------------
    def validate(self, hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> None:
        if hidden.dtype != self.dtype:
            raise TypeError(f"hidden dtype must be {self.dtype} (the executor's), got {hidden.dtype}")
        if hidden.dim() != 2 or hidden.shape[1] != self.bank.hidden:
            raise ValueError(f"hidden must be [T, {self.bank.hidden}], got {tuple(hidden.shape)}")
        t = hidden.shape[0]
        if ids.dtype != torch.int32 or tuple(ids.shape) != (t, self.top_k):
            raise TypeError(
                f"expert_ids must be int32 [{t}, {self.top_k}], got {ids.dtype} {tuple(ids.shape)}"
            )
        if weights.dtype != torch.float32 or tuple(weights.shape) != (t, self.top_k):
            raise TypeError(
                f"router_weights must be float32 [{t}, {self.top_k}], got {weights.dtype} {tuple(weights.shape)}"
            )
        for name, x in (("hidden", hidden), ("expert_ids", ids), ("router_weights", weights)):
            if not same_device(x.device, self.device):
                raise ValueError(
                    f"{name} is on {x.device} but this {self.mode!r} executor runs on {self.device} "
                    "(module note on devices)"
                )
            if not x.is_contiguous():
                raise ValueError(f"{name} must be contiguous, got strides {tuple(x.stride())}")

    def __call__(
        self,
        hidden: torch.Tensor,
        expert_ids: torch.Tensor,
        router_weights: torch.Tensor,
        *,
        force_capture: bool = False,
    ) -> torch.Tensor:
        self.validate(hidden, expert_ids, router_weights)
        if self.device.type == "cuda":
            with torch.cuda.device(hidden.device):
                return _gpu_forward(self, hidden, expert_ids, router_weights, force_capture=force_capture)
        if _cpu_capturing():
            self._check_capture_allowed(force_capture)
            if self.mode == "eager":
                raise HandshakeNotCapturable(
                    "handshake mode 'eager' computes directly and cannot be captured; use 'recorded'"
                )
        if self.mode in ("direct", "eager"):
            moe = torch.ops.graphsafe.cpu_moe(hidden, expert_ids, router_weights, self.handle)
            return self._after_handshake(moe, hidden)  # overlap is refused for these modes (OVERLAP_MODES)
        slot = self.slot_for(hidden.shape[0])
        # Without the graph-node API the notify/wait cannot become nodes: it runs at capture only.
        recorded = self.mode == "recorded" and not self.faults.graph_api_unsupported
        return self._emulated_handshake(
            slot, hidden, expert_ids, router_weights, recorded=recorded, gpu_part=self.shared
        )

    def _after_handshake(self, moe: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """overlap off (or no overlap possible): the GPU part after the copy back, then combine."""
        if self.shared is None:
            return moe
        return moe + self.shared(hidden)

    def _emulated_handshake(
        self,
        slot: _Slot,
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
        token = torch.ops.graphsafe.cpu_moe_stage_in(hidden, ids, weights, self.handle, slot.index)
        gpu_out = None
        if not self.overlap:
            if recorded:
                token = torch.ops.graphsafe.cpu_moe_notify_wait(token, self.handle, slot.index)
            else:
                _plain_notify_wait(self, slot.index)  # a pybind11 call: the emulated graph never sees it
        else:
            if recorded:
                token = torch.ops.graphsafe.cpu_moe_notify(token, self.handle, slot.index)
            else:
                _queue_notify_wait(self, slot.index)  # plain calls: run at capture only, like the above
            if gpu_part is not None:
                gpu_out = gpu_part(hidden)
            if recorded:
                token = torch.ops.graphsafe.cpu_moe_wait(token, self.handle, slot.index)
            else:
                _join_queued_wait(self, slot.index)
        moe = torch.ops.graphsafe.cpu_moe_stage_out(token, self.handle, slot.index)
        if gpu_part is None:
            return moe
        if gpu_out is None:
            gpu_out = gpu_part(hidden)  # overlap off: after the copy back
        return moe + gpu_out

    def reference(
        self, hidden: torch.Tensor, expert_ids: torch.Tensor, router_weights: torch.Tensor
    ) -> torch.Tensor:
        """The layer's float64 oracle (reference_layer with this layer's bank and GPU part); its argument
        names are the layer's, so it serves as a Case's `reference` as it is."""
        return reference_layer(hidden, expert_ids, router_weights, self.bank, self.shared)

    def forward_eager(self, hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Direct computation on CPU tensors; refuses out-of-range expert ids by name."""
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.bank.num_experts):
            raise ValueError(
                f"expert_ids must lie in [0, {self.bank.num_experts}), got [{int(ids.min())}, {int(ids.max())}]"
            )
        out = torch.empty_like(hidden)
        self._ex.forward(
            hidden.data_ptr(),
            _DTYPE_CODES[hidden.dtype],
            ids.data_ptr(),
            weights.data_ptr(),
            out.data_ptr(),
            hidden.shape[0],
            self.top_k,
        )
        return out

    # -- slot views (CPU memory only) ------------------------------------------------------------------------
    def slot_tensor(self, slot: _Slot, region: str) -> torch.Tensor:
        t, k, h = slot.tokens, self.top_k, self.bank.hidden
        shape, dtype = {
            "hidden": ((t, h), self.dtype),
            "ids": ((t, k), torch.int32),
            "weights": ((t, k), torch.float32),
            "out": ((t, h), self.dtype),
        }[region]
        base = self._keep_for(slot.host + slot.layout[region])
        return base.view(dtype)[: math.prod(shape)].view(shape)

    def _keep_for(self, addr: int) -> torch.Tensor:
        for buf in self._keep:
            start = buf.data_ptr()
            if start <= addr < start + buf.numel():
                return buf[addr - start :]
        raise ValueError(f"address {addr:#x} is not in CPU slot memory")
