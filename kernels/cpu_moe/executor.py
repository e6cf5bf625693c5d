"""CPU/hybrid MoE, the executor's core: ExecutorCore, one MoE layer's experts on CPU threads with
executor-owned slots and signals kept across graph rebuilds, its memory, its graph policy and its eager
computation; the registry of live executors (the custom ops find an executor there by its handle, `wait_guard`
answers all of their waits); Faults, the fault injection that the handshakes and the probe read (tests only).

The layer's forward through a handshake is CpuMoeExecutor (kernels/cpu_moe/layer.py), built on this core; the
handshakes (cpu_handshake.py, gpu_handshake.py) and the probe work on the core, so imports run one way:
settings, weights, watchdog -> executor -> handshakes -> layer, probe.

NOTE on the hybrid layer (FreeToken issue #350: "real hybrid CPU/GPU computation with overlap on/off"): the
executor is the layer; with `shared=` (a SharedExpert, torch ops on the layer's device) its output is the CPU
experts' contribution plus the GPU part's, and `overlap` picks where the GPU part runs. off: stage in, notify,
wait, copy back, GPU part, combine. on: stage in, notify, GPU part, wait, copy back, combine, in one stream's
order. The notify does not block the stream (a write-value, or a host function that only stores req), so the
GPU part's kernels run while the CPU service computes, and the wait after them blocks only until the answer.
On the CPU backend each step is a recorded op (the emulated wait is queued on a thread by the notify:
QueuedWait). On a GPU the halves are handshake.hip's `enqueue_notify` and `enqueue_wait`, and a capture records
the GPU part's kernel nodes between the notify and wait nodes. One stream, not the GPU part forked onto a
second stream around the fused handshake: the graph stays one chain, the GPU part's memory is allocated and
freed in one stream's order, and both backends have one structure. Overlap off keeps the fused `enqueue`
(hostfn: one host node that runs the CPU layer itself). The probe captures the handshake alone in the form the
layer uses: with overlap, notify then wait (on a GPU the split entry points; hostfn: two host nodes, the
service thread computes); the cases check the whole layer.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from graphsafe import FallbackEager
from graphsafe.kernels.common.quant import FORMAT_CODES
from graphsafe.kernels.cpu_moe.settings import (
    CLOSE_DRAIN_S,
    DEVICE_MODES,
    DTYPE_CODES,
    EMULATED_WAIT_TIMEOUT_S,
    HANDSHAKE_MODES,
    OVERLAP_MODES,
    PROBE_SLOTS,
    PROBE_TOKENS,
    SIGNAL_STRIDE,
    HandshakeError,
    UnsafeExecutorCapture,
    check_choice,
    cpu_module,
    handshake_module,
    same_device,
)
from graphsafe.kernels.cpu_moe.watchdog import Watchdog
from graphsafe.kernels.cpu_moe.weights import ExpertBank, SharedExpert, reference_layer


@dataclass
class Faults:
    """Fault injection (tests only). Each makes the probe say "unsafe" for a different reason."""

    graph_api_unsupported: bool = False  # adding the handshake's graph nodes fails (hipErrorNotSupported)
    launch_delay_s: float = 0.0  # the probe's replay launch starts this late (a busy queue)
    unrecorded_memop: bool = False  # memops run during capture but are not recorded (ROCm < 7.x fix)
    cpu_never_answers: bool = False  # the service thread ignores the probe slot


@dataclass
class Slot:
    index: int
    tokens: int
    host: int  # host address of the slot buffer
    dev: int  # device address of the same (mapped) memory; == host on CPU
    layout: dict[str, int]
    quarantined: bool = False


class QueuedWait:
    """The emulated stream's notify+wait for one slot, queued on a thread (CPU backend, overlap on).

    NOTE: the token protocol stays the C++ notify_wait's (req := 1, wait done == 1, done := 0, with release/
    acquire ordering), run on a thread that stands for the GPU queue: the caller's thread is then free to run
    the GPU part while the service thread computes, as a stream runs kernels queued behind a wait-value's
    writer. Thread start and join order the slot buffers' writes and reads on every architecture, which
    plain Python stores into the signal words would not.
    """

    def __init__(self, service: Any, slot: int, name: str) -> None:
        self.answered: bool | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.answered = service.notify_wait(slot, int(EMULATED_WAIT_TIMEOUT_S * 1e6))
            except BaseException as exc:  # reported by the wait
                self.error = exc

        self.thread = threading.Thread(target=run, name=name, daemon=True)
        self.thread.start()


# ------------------------------------------------------------------------------------ live executors


_LIVE: dict[int, ExecutorCore] = {}
_HANDLES = itertools.count(1)


def executor_by_handle(handle: int) -> ExecutorCore:
    """The live executor with this handle (the custom ops carry handles, not objects)."""
    if handle not in _LIVE:
        raise ValueError(f"no live CpuMoeExecutor with handle {handle}")
    return _LIVE[handle]


@contextlib.contextmanager
def wait_guard(deadline_s: float, *, period_s: float = 0.01, max_s: float = 600.0) -> Iterator[Watchdog]:
    """Run a block under a watchdog: past `deadline_s` it answers every live executor's posted waits (every
    `period_s`) until the block exits, so no GPU wait-value in the block can hang the queue for good.
    `guard.releases > 0` afterwards says it had to: the block's results are then not to be trusted."""
    done = threading.Event()

    def release_all_live() -> None:
        for ex in list(_LIVE.values()):
            ex.release_requested()

    guard = Watchdog(release_all_live, done.is_set, deadline_s=deadline_s, period_s=period_s, max_s=max_s)
    try:
        yield guard
    finally:
        done.set()
        guard.join(5.0)


def check_gpu_part(
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


class ExecutorCore:
    """One MoE layer's experts on CPU threads, with executor-owned slots and signals kept across graph
    rebuilds; CpuMoeExecutor (layer.py) adds the forward through the handshake of `mode`.

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
        check_choice("mode", mode, HANDSHAKE_MODES)
        check_choice("policy", policy, ("fallback", "strict"))
        check_choice("dtype", dtype, tuple(DTYPE_CODES))
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
        check_gpu_part(shared, overlap, mode, bank.hidden, dtype, self.device)
        self.bank, self.top_k, self.mode, self.dtype, self.policy = bank, top_k, mode, dtype, policy
        self.shared, self.overlap = shared, bool(overlap)
        self._queued: dict[int, QueuedWait] = {}  # CPU backend, overlap on: waits queued behind a notify
        self.graph_sizes = tuple(sorted({int(s) for s in graph_sizes}))
        self.faults = faults or Faults()
        self.graphs_enabled = False
        self.disabled_reason = "no probe has run"
        # CUDA records stream memops natively (measured on CUDA 13: batch_mem_op nodes); True splices explicit
        # batch-memop nodes as the HIP path always does, so that path is testable on NVIDIA too.
        self.explicit_memop_nodes = False
        self.last_watchdog: Watchdog | None = None
        self.in_flight: list[Any] = []  # probe graphs a watchdog is still draining: never freed early
        self.handle = next(_HANDLES)
        self.executor_lib = cpu_module()
        self.handshake_lib = handshake_module() if self.device.type == "cuda" else None
        self.max_slots = len(self.graph_sizes) + PROBE_SLOTS + 1
        self.service = self.executor_lib.Executor(num_threads, self.max_slots)
        self.service.set_layer(
            FORMAT_CODES[bank.fmt],
            bank.num_experts,
            bank.hidden,
            bank.inter,
            *bank.pointers(bank.w13),
            *bank.pointers(bank.w2),
        )
        self._keep: list[Any] = []  # CPU memory backing slots and signals
        self._mapped: list[int] = []  # GPU mapped host allocations to free
        self._signals_host, self._signals_dev = self._alloc(self.max_slots * SIGNAL_STRIDE)
        self.graph_slots: dict[int, Slot] = {}
        self.probe_slots: list[Slot] = []
        for tokens in self.graph_sizes:
            self.graph_slots[tokens] = self._add_slot(tokens)
        for _ in range(PROBE_SLOTS):
            self.probe_slots.append(self._add_slot(PROBE_TOKENS))
        self.eager_slot = self._add_slot(max(self.graph_sizes))
        self.service.start_service()
        self.closed = False
        _LIVE[self.handle] = self

    # -- memory --------------------------------------------------------------------------------------------
    def _alloc(self, nbytes: int) -> tuple[int, int]:
        if self.handshake_lib is not None:
            host, dev = self.handshake_lib.alloc_mapped(nbytes)
            self._mapped.append(host)
            return host, dev
        buf = torch.zeros(nbytes + 64, dtype=torch.uint8)
        self._keep.append(buf)
        addr = (buf.data_ptr() + 63) // 64 * 64
        return addr, addr

    def _add_slot(self, tokens: int) -> Slot:
        code = DTYPE_CODES[self.dtype]
        layout = dict(self.service.slot_layout(tokens, self.top_k, code))
        host, dev = self._alloc(layout["total"])
        index = self.service.add_slot(
            tokens, self.top_k, code, host, self._signals_host + self.service.num_slots * SIGNAL_STRIDE
        )
        return Slot(index, tokens, host, dev, layout)

    def signal_dev(self, slot: Slot) -> tuple[int, int]:
        """Device-visible addresses of the slot's req and done words (the memop handshake's)."""
        base = self._signals_dev + slot.index * SIGNAL_STRIDE
        return base, base + 64

    def signal_host(self, slot: Slot) -> tuple[int, int]:
        """Host addresses of the same words (the split hostfn handshake's host functions write them)."""
        base = self._signals_host + slot.index * SIGNAL_STRIDE
        return base, base + 64

    @property
    def num_threads(self) -> int:
        return self.service.num_threads

    def slot_for(self, tokens: int) -> Slot:
        if tokens not in self.graph_slots:
            raise ValueError(
                f"batch size {tokens} has no graph slot: graph_sizes={list(self.graph_sizes)} "
                "(capacity is derived from the configured graph sizes)"
            )
        return self.graph_slots[tokens]

    def release_all(self) -> None:
        """Watchdog action: answer every slot's wait without computing (the GPU queue must never hang). The
        slots' results are then meaningless; callers report the step that needed it as failed."""
        for index in range(self.service.num_slots):
            self.service.release(index)

    def release_requested(self) -> None:
        """`wait_guard`'s action on every live executor: answer only the waits whose request was posted and
        not taken (the service's `release_if_requested`). Most live executors are idle; answering an idle
        slot would leave its answer for the slot's next wait, which then returns before the CPU side ran,
        and every later call of that executor would read the call before it."""
        for index in range(self.service.num_slots):
            self.service.release_if_requested(index)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.handshake_lib is not None:
                self._drain_gpu()
        finally:
            for index, queued in list(self._queued.items()):  # a step abandoned between notify and wait
                self.service.release(index)
                queued.thread.join(1.0)
            self._queued.clear()
            self.service.stop_service()
            _LIVE.pop(self.handle, None)
            if self.handshake_lib is not None:
                for host in self._mapped:
                    self.handshake_lib.free_mapped(host)
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

    def check_capture_allowed(self, force: bool) -> None:
        """At capture: nothing when graphs are enabled (or `force`), else FallbackEager (policy "fallback")
        or UnsafeExecutorCapture (policy "strict")."""
        if self.graphs_enabled or force:
            return
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
                    "(kernels/cpu_moe/settings.py, note on devices)"
                )
            if not x.is_contiguous():
                raise ValueError(f"{name} must be contiguous, got strides {tuple(x.stride())}")

    def after_handshake(self, moe: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """overlap off (or no overlap possible): the GPU part after the copy back, then combine."""
        if self.shared is None:
            return moe
        return moe + self.shared(hidden)

    # -- the emulated notify/wait (CPU backend) --------------------------------------------------------------
    def notify_wait(self, slot: int) -> None:
        """Post the slot's token and wait for the CPU side's answer (HandshakeError past the timeout)."""
        if not self.service.notify_wait(slot, int(EMULATED_WAIT_TIMEOUT_S * 1e6)):
            raise HandshakeError(f"CPU side did not answer slot {slot} within {EMULATED_WAIT_TIMEOUT_S} s")

    def queue_notify_wait(self, slot: int) -> None:
        """The notify alone (overlap on): its wait runs on a QueuedWait thread, as a stream queues it."""
        self.drain_queued(slot)
        self._queued[slot] = QueuedWait(self.service, slot, f"cpu-moe-queue-{self.handle}-{slot}")

    def join_queued_wait(self, slot: int) -> None:
        """The wait behind `queue_notify_wait`: HandshakeError if it was not answered."""
        queued = self._queued.pop(slot, None)
        if queued is None:
            raise HandshakeError(f"wait on slot {slot} without a notify before it")
        queued.thread.join(EMULATED_WAIT_TIMEOUT_S + 5.0)
        if queued.error is not None:
            raise HandshakeError(f"slot {slot}: {type(queued.error).__name__}: {queued.error}")
        if queued.thread.is_alive() or not queued.answered:
            raise HandshakeError(f"CPU side did not answer slot {slot} within {EMULATED_WAIT_TIMEOUT_S} s")

    def drain_queued(self, slot: int) -> None:
        """A step that stopped between notify and wait (an exception in the GPU part) left its wait queued; a
        stream would run it before the next step's copies, so it drains first: its answer is consumed by its
        own wait, never by the next step's, and the CPU is done reading the slot before new inputs land."""
        stale = self._queued.pop(slot, None)
        if stale is not None:
            stale.thread.join(EMULATED_WAIT_TIMEOUT_S + 5.0)

    @property
    def pending_waits(self) -> tuple[int, ...]:
        """Slots whose queued wait has not been joined (a step abandoned between notify and wait)."""
        return tuple(self._queued)

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
        self.service.forward(
            hidden.data_ptr(),
            DTYPE_CODES[hidden.dtype],
            ids.data_ptr(),
            weights.data_ptr(),
            out.data_ptr(),
            hidden.shape[0],
            self.top_k,
        )
        return out

    # -- slot views (CPU memory only) ------------------------------------------------------------------------
    def slot_tensor(self, slot: Slot, region: str) -> torch.Tensor:
        t, k, h = slot.tokens, self.top_k, self.bank.hidden
        shape, dtype = {
            "hidden": ((t, h), self.dtype),
            "ids": ((t, k), torch.int32),
            "weights": ((t, k), torch.float32),
            "out": ((t, h), self.dtype),
        }[region]
        base = self._keep_for(slot.host + slot.layout[region])
        return base.view(dtype)[: math.prod(shape)].view(shape)

    def slot_by_index(self, index: int) -> Slot:
        for s in [*self.graph_slots.values(), *self.probe_slots, self.eager_slot]:
            if s.index == index:
                return s
        raise ValueError(f"slot {index} not in executor {self.handle}")

    def _keep_for(self, addr: int) -> torch.Tensor:
        for buf in self._keep:
            start = buf.data_ptr()
            if start <= addr < start + buf.numel():
                return buf[addr - start :]
        raise ValueError(f"address {addr:#x} is not in CPU slot memory")
