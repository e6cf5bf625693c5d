"""CPU/hybrid MoE: the C++ expert executor's Python side, its GPU<->CPU handshake, the fail-closed probe,
its watchdog, and tensor-parallel consensus (seed 000, FreeToken #350 and its fix).

Role: one decode-size MoE layer whose experts run on CPU worker threads (kernels/cpu/cpu_moe.cpp). On a GPU,
every decode step must, on every graph replay: copy hidden states, expert ids and router weights GPU->host,
notify the CPU workers, wait for their result, copy it host->GPU (kernels/hip/handshake.hip). If replay
skips the notify/wait, the output is finite and stale (seed 000: graph error 0.28-0.57 against eager 0.002).

Handshake modes (`HANDSHAKE_MODES`), one executor per device:
- CPU backend: `direct` (the executor as one custom op, graphsafe::cpu_moe), `recorded` (staged copies plus
  a notify/wait custom op: the emulated graph re-runs all three) and `unrecorded` (the same, but notify/wait
  is a plain pybind11 call: it runs once, at capture, as ROCm's unrecorded memops did: stale_replay). `eager`
  also runs on CPU (direct computation; capture refused as on a GPU).
- GPU: `memop` (stream write/wait-value on mapped host signal words, recorded as graph nodes; HIP adds them
  as explicit batch-memop nodes), `hostfn` (a host-function node runs the CPU layer), `eager` (synchronizing
  copies; capture raises HandshakeNotCapturable).
The probe (`probe_handshake`) captures, instantiates and replays the handshake on a known input pair with
a deadline and compares numerically; its failure (or any rank's, via `consensus`) disables graphs: the layer
then raises FallbackEager at capture and stays correct eagerly.

NOTE on devices (what is honest on each backend): the CPU modes emulate a graph with the CPU backend's
dispatcher recorder, which a real CUDA/HIP graph cannot record (a CPU op under CUDA capture is either a host
sync or runs once at capture). So a CPU-mode executor refuses GPU tensors by name, and GPU tensors always
take the real handshake: hidden states on the GPU, experts on the CPU, copy GPU->host, compute, copy back
(seed 000's hybrid layer). Cases are registered at import, before the backend is chosen, so the cases
(cases/cpu_moe.py, cases/counterexamples/issue350.py) pick the executor from their inputs' device:
`HANDSHAKE_ON_GPU` maps each emulated handshake to the GPU handshake with the same graph semantics.
Devices compare by type, and by index only when both name one (`same_device`: `cuda` matches `cuda:0`).

NOTE on the hybrid layer (seed 000: "real hybrid CPU/GPU computation with overlap on/off"): the executor is
the layer; with `shared=` (a SharedExpert, torch ops on the layer's device) its output is the CPU experts'
contribution plus the GPU part's, and `overlap` picks where the GPU part runs. off: stage in, notify, wait,
copy back, GPU part, combine. on: stage in, notify, GPU part, wait, copy back, combine, in one stream's
order. The notify does not block the stream (a write-value, or a host function that only stores req), so
the GPU part's kernels run while the CPU service computes, and the wait after them blocks only until the
answer. On the CPU backend each step is a recorded op (the emulated wait is queued on a thread by the
notify). On a GPU the halves are handshake.hip's `enqueue_notify` and `enqueue_wait` (`_gpu_overlapped`),
and a capture records the GPU part's kernel nodes between the notify and wait nodes. Why one stream and not
the GPU part forked onto a second stream around the fused handshake (this module's first GPU version): the
graph stays one chain, the GPU part's memory is allocated and freed in one stream's order, and both
backends have one structure. Overlap off keeps the fused `enqueue` (hostfn: one host node that runs the CPU
layer itself). The probe captures the handshake alone in the form the layer uses: with overlap, notify
then wait (on a GPU the split entry points; hostfn: two host nodes, the service thread computes); the cases
check the whole layer.

NOTE on waits: a GPU wait-value has no timeout, nor does the split hostfn wait (a host function spinning on
the same done word). The probe's watchdog releases a wait the CPU never answers (it stores done := 1, which
either wait reads) and outlives a delayed launch; `wait_guard` is the same for any block of code
(bench/cpu_moe_gpu_smoke.py): past its deadline it releases every live executor's waits until the block ends.
Watchdog threads never call the GPU runtime (completion is a host word set by a host function): a runtime
call from another thread would invalidate a global-mode capture that happens to be open.

This module is longer than ~400 lines because the brief keeps executor, modes, probe, watchdog and
consensus together; each section is headed.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernels import quant

FORMATS = ("bf16", "mxfp4", "nvfp4", "q4_0", "block_fp8")
_FORMAT_CODES = {"bf16": 0, "mxfp4": 1, "nvfp4": 2, "q4_0": 3, "block_fp8": 4}
_DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1}

# Relative-error thresholds, max|out-ref| / max|ref| (PITFALLS "Comparing"; seed 000's FreeToken tests):
# bf16 and q4_0 0.02, nvfp4 0.03, mxfp4 0.04. block_fp8: 0.02, because the reference dequantizes the very
# same e4m3 bytes and f32 scales (bit-identical rows, tests check it), so as for bf16 the only error left
# is the bf16 rounding of h and of the output (2^-8 relative each) plus f32 summation order.
THRESHOLDS = {"bf16": 0.02, "q4_0": 0.02, "mxfp4": 0.04, "nvfp4": 0.03, "block_fp8": 0.02}

CPU_MODES = ("direct", "recorded", "unrecorded")
GPU_MODES = ("memop", "hostfn", "eager")
HANDSHAKE_MODES = CPU_MODES + GPU_MODES
# Modes an executor on each device type runs (the module note on devices).
DEVICE_MODES = {"cpu": (*CPU_MODES, "eager"), "cuda": GPU_MODES}
# The GPU handshake with the same graph semantics as each emulated one: (mode, explicit batch-memop nodes,
# Faults field set). recorded: notify/wait are explicit graph nodes (the custom op; on a GPU explicit
# batch-memop nodes, the path HIP always takes). direct: the CPU layer is one graph node (the custom op; a
# host-function node). unrecorded: notify/wait run at capture only (a plain call; memops issued on a
# non-capturing stream, the ROCm failure shape).
HANDSHAKE_ON_GPU: dict[str, tuple[str, bool, str]] = {
    "recorded": ("memop", True, ""),
    "direct": ("hostfn", False, ""),
    "unrecorded": ("memop", False, "unrecorded_memop"),
}
# ... and the emulated handshake for each GPU one (a GPU case run on the CPU backend).
HANDSHAKE_ON_CPU = {"memop": "recorded", "hostfn": "direct", "eager": "eager"}
# Modes whose handshake leaves a gap the GPU part can fill while the CPU computes (overlap=True). `direct`
# is one op and `eager` one synchronous call: nothing can run inside them, so overlap is refused there.
OVERLAP_MODES = ("recorded", "unrecorded", "memop", "hostfn")

SIGNAL_STRIDE = 128  # bytes per slot in the signal block: req at +0, done at +64 (cpu_moe.cpp kSignalStride)
DEFAULT_DECODE_LIMIT = 512  # the engine's usual max decode batch; graph sizes may exceed it (seed 000)
PROBE_SLOTS = 4  # spare slots for probes: a slot a failed probe used is quarantined, never reused
# A GPU wait-value has no timeout; the emulated one waits this long before the op reports a hang.
EMULATED_WAIT_TIMEOUT_S = 30.0
# close() on a GPU waits this long for the device to drain before its watchdog answers the executor's waits.
# A decode step's handshake takes about a millisecond (bench/cpu_moe_gpu_smoke.py replays: 0.6-0.8 ms), so
# 10 s is only ever reached by a wait that nobody answers.
CLOSE_DRAIN_S = 10.0

_SRC = Path(__file__).resolve().parent


class HandshakeError(RuntimeError):
    """The CPU side did not answer a handshake (the watchdog released it or the emulated wait timed out)."""


class HandshakeNotCapturable(RuntimeError):
    """The `eager` handshake (synchronizing copies) was called under graph capture."""


class UnsafeExecutorCapture(RuntimeError):
    """Direct capture of an executor whose handshake probe failed (or was never run)."""


def _choice(field_name: str, value: Any, allowed: Sequence[Any]) -> None:
    if value not in allowed:
        raise ValueError(f"{field_name} must be one of {tuple(allowed)}, got {value!r}")


def same_device(a: str | torch.device, b: str | torch.device) -> bool:
    """Same device type, and the same index where both name one: torch.device("cuda") != "cuda:0" in torch,
    yet a tensor made with device "cuda" lives on cuda:0 (the current device)."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    return a.index is None or b.index is None or a.index == b.index


# ------------------------------------------------------------------------------------ native modules


def cpu_module() -> Any:
    """The C++ executor (g++, no torch headers; about 15 s cold, cached by kernels/build.py)."""
    from kernels.build import build_extension

    return build_extension(
        "graphsafe_cpu_moe", [_SRC / "cpu" / "cpu_moe.cpp"], backend="cpu", extra_flags=("-O3",)
    )


def handshake_module() -> Any:
    """The GPU half (nvcc compiles the .hip as CUDA, hipcc on ROCm); needs a device."""
    from kernels.build import build_extension, detect_backend

    backend = detect_backend()
    if backend == "cpu":
        raise RuntimeError(
            "the GPU handshake needs a CUDA or ROCm device; torch.cuda.is_available() is False"
        )
    return build_extension("graphsafe_handshake", [_SRC / "hip" / "handshake.hip"], backend=backend)


# ------------------------------------------------------------------------------------ weights and reference


@dataclass(frozen=True)
class ExpertBank:
    """One layer's experts: w13 [E, 2I, H] (gate rows, then up rows) and w2 [E, H, I] in one format."""

    fmt: str
    num_experts: int
    hidden: int
    inter: int
    w13: quant.QuantizedWeight
    w2: quant.QuantizedWeight

    def pointers(self, q: quant.QuantizedWeight) -> tuple[int, int, int]:
        scale = q.scale.data_ptr() if q.scale is not None else 0
        glob = q.global_scale.data_ptr() if q.global_scale is not None else 0
        return q.data.data_ptr(), scale, glob


def make_bank(fmt: str, num_experts: int, hidden: int, inter: int, seed: int = 0) -> ExpertBank:
    """Random experts quantized with kernels/quant.py (weights ~ N(0, 1/fan_in), so outputs stay O(1))."""
    _choice("fmt", fmt, FORMATS)
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(num_experts, 2 * inter, hidden, generator=g) / math.sqrt(hidden)
    w2 = torch.randn(num_experts, hidden, inter, generator=g) / math.sqrt(inter)

    def q(w: torch.Tensor) -> quant.QuantizedWeight:
        qw = quant.quantize_weight(w, fmt)
        contiguous = {k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in vars(qw).items()}
        return quant.QuantizedWeight(**contiguous)

    return ExpertBank(fmt, num_experts, hidden, inter, q(w13), q(w2))


def reference_moe(
    hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, bank: ExpertBank
) -> torch.Tensor:
    """Independent oracle in float64 from quant.dequantize_weight (no intermediate rounding), on CPU."""
    return _reference_moe_f64(hidden, ids, weights, bank).to(hidden.dtype).to(hidden.device)


def reference_layer(
    hidden: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    bank: ExpertBank,
    shared: SharedExpert | None = None,
) -> torch.Tensor:
    """The hybrid layer's oracle: the CPU experts' contribution plus the GPU part, summed in float64 and
    rounded once (both halves unrounded: the layer's own bf16 roundings are what the threshold measures)."""
    if shared is None:
        return reference_moe(hidden, ids, weights, bank)
    total = _reference_moe_f64(hidden, ids, weights, bank) + shared.reference(hidden)
    return total.to(hidden.dtype).to(hidden.device)


def _reference_moe_f64(
    hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, bank: ExpertBank
) -> torch.Tensor:
    w13 = quant.dequantize_weight(bank.w13).double()
    w2 = quant.dequantize_weight(bank.w2).double()
    x = hidden.detach().cpu().double()
    idx = ids.detach().cpu().long()
    rw = weights.detach().cpu().double()
    gu = torch.einsum("tkih,th->tki", w13[idx], x)  # [T, K, 2I]
    g, u = gu[..., : bank.inter], gu[..., bank.inter :]
    h = torch.nn.functional.silu(g) * u
    y = torch.einsum("tkhi,tki->tkh", w2[idx], h)
    return (rw.unsqueeze(-1) * y).sum(dim=1)


@dataclass(frozen=True)
class SharedExpert:
    """The hybrid layer's GPU part: a shared expert (one dense SiLU-MLP on every token), in torch ops so that
    a CUDA/HIP graph and the CPU backend's recorder both capture it. w13 [2I, H] (gate rows, then up rows)
    and w2 [H, I], in the activation dtype, on the layer's device. Its input is the hidden states, so it
    changes between replays as the CPU experts' inputs do."""

    w13: torch.Tensor
    w2: torch.Tensor

    @property
    def inter(self) -> int:
        return self.w2.shape[1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = torch.nn.functional.linear(x, self.w13).split(self.inter, dim=-1)
        return torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, self.w2)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """float64 on CPU, no intermediate rounding (the layer's bf16 matmuls round gate/up and h)."""
        gu = x.detach().cpu().double() @ self.w13.detach().cpu().double().T
        gate, up = gu[:, : self.inter], gu[:, self.inter :]
        return (torch.nn.functional.silu(gate) * up) @ self.w2.detach().cpu().double().T


def make_shared_expert(
    hidden: int, inter: int, *, seed: int = 0, dtype: torch.dtype = torch.bfloat16, device: Any = "cpu"
) -> SharedExpert:
    """Random dense weights ~ N(0, 1/fan_in) (outputs O(1), the same scale as the CPU experts' sum)."""
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(2 * inter, hidden, generator=g) / math.sqrt(hidden)
    w2 = torch.randn(hidden, inter, generator=g) / math.sqrt(inter)
    return SharedExpert(w13.to(dtype).to(device).contiguous(), w2.to(dtype).to(device).contiguous())


def make_routing(
    seed: int, tokens: int, num_experts: int, top_k: int, hidden: int, device: Any, dtype: torch.dtype
):
    """Hidden states, distinct top-k expert ids (int32) and softmax router weights (f32) for one step."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    logits = torch.randn(tokens, num_experts, generator=g)
    top = torch.topk(logits, top_k, dim=-1)
    return {
        "hidden": x.to(device),
        "expert_ids": top.indices.to(torch.int32).to(device),
        "router_weights": torch.softmax(top.values, dim=-1).to(device),
    }


# ------------------------------------------------------------------------------------ the executor


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


@dataclass
class ProbeResult:
    ok: bool
    reason: str
    error: float | None = None
    seconds: float = 0.0
    watchdog_releases: int = 0
    node_kinds: dict[str, int] | None = None  # the probe graph's node kinds (GPU; None on the CPU backend)


_EXECUTORS: dict[int, CpuMoeExecutor] = {}
_HANDLES = itertools.count(1)


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


PROBE_TOKENS = 2


def _executor(handle: int) -> CpuMoeExecutor:
    if handle not in _EXECUTORS:
        raise ValueError(f"no live CpuMoeExecutor with handle {handle}")
    return _EXECUTORS[handle]


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


# ------------------------------------------------------------------------------------ watchdog


class Watchdog:
    """Releases a wait the CPU side never answered, and keeps doing so until the waiter has drained.

    A GPU wait-value that is never satisfied hangs the queue (PITFALLS "Stream memory operations"). After
    `deadline_s` the watchdog writes the slot's done word every `period_s` until `drained()` is true: a
    probe launch delayed past the deadline reaches its wait later, so one release at the deadline is not
    enough (seed 000: "keep the timeout release alive until a delayed probe launch drains"). `max_s` bounds
    the thread's life; `hung` says it gave up (then the device is reported, never silently reused).
    """

    def __init__(
        self,
        release: Callable[[], None],
        drained: Callable[[], bool],
        *,
        deadline_s: float,
        period_s: float = 0.001,
        max_s: float = 120.0,
    ) -> None:
        self.release, self.drained = release, drained
        self.deadline_s, self.period_s, self.max_s = deadline_s, period_s, max_s
        self.releases = 0
        self.hung = False
        self.drained_at: float | None = None
        self.exited_at: float | None = None
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="cpu-moe-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        end_of_grace = self.started_at + self.deadline_s
        while not self.drained():
            now = time.monotonic()
            if now - self.started_at > self.max_s:
                self.hung = True
                break
            if now >= end_of_grace:
                self.release()
                self.releases += 1
            time.sleep(self.period_s)
        else:
            self.drained_at = time.monotonic()
        self.exited_at = time.monotonic()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


def _release_all_live() -> None:
    for ex in list(_EXECUTORS.values()):
        ex.release_all()


@contextlib.contextmanager
def wait_guard(deadline_s: float, *, period_s: float = 0.01, max_s: float = 600.0) -> Iterator[Watchdog]:
    """Run a block under a watchdog: past `deadline_s` it answers every live executor's waits (every
    `period_s`) until the block exits, so no GPU wait-value in the block can hang the queue for good.
    `guard.releases > 0` afterwards says it had to: the block's results are then not to be trusted."""
    done = threading.Event()
    guard = Watchdog(_release_all_live, done.is_set, deadline_s=deadline_s, period_s=period_s, max_s=max_s)
    try:
        yield guard
    finally:
        done.set()
        guard.join(5.0)


# ------------------------------------------------------------------------------------ fail-closed probe


def _next_probe_slot(ex: CpuMoeExecutor) -> _Slot | None:
    return next((s for s in ex._probe_slots if not s.quarantined), None)


def probe_handshake(ex: CpuMoeExecutor, *, deadline_s: float = 5.0, seed: int = 9000) -> ProbeResult:
    """A real capture/instantiate/replay of the handshake on a known input pair, compared numerically.

    Capture with input A, copy B into the same buffers, replay under `deadline_s`, compare with the float64
    reference of B. Any failure (capture error, missing graph nodes, deadline, wrong numbers) gives
    ok=False with the reason; the slot it used is then quarantined (a late answer may still land in it).
    The watchdog it starts on a deadline miss is kept in `ex.last_watchdog` for inspection.
    """
    start = time.monotonic()
    slot = _next_probe_slot(ex)
    if slot is None:
        return ProbeResult(False, f"no probe slot left (all {PROBE_SLOTS} quarantined)")
    if ex.mode == "eager":
        return ProbeResult(False, "mode 'eager' has no capturable handshake", seconds=0.0)
    runner = _GpuProbe(ex, slot) if ex.device.type == "cuda" else _CpuProbe(ex, slot)

    def make(s: int) -> dict[str, torch.Tensor]:
        return make_routing(
            s, PROBE_TOKENS, ex.bank.num_experts, ex.top_k, ex.bank.hidden, ex.device, ex.dtype
        )

    a, b = make(seed), make(seed + 1)
    try:
        runner.capture(a)
    except Exception as exc:  # any capture/instantiate failure: unsafe, and nothing half-built survives
        runner.cleanup()
        slot.quarantined = True
        return ProbeResult(
            False, f"capture failed: {type(exc).__name__}: {exc}", seconds=time.monotonic() - start
        )
    kinds = runner.node_kinds()
    node_problem = runner.node_problem()
    if node_problem:
        runner.cleanup()
        slot.quarantined = True
        return ProbeResult(False, node_problem, seconds=time.monotonic() - start, node_kinds=kinds)
    runner.launch(b)
    finished = runner.wait(deadline_s)
    if not finished:
        ex.last_watchdog = Watchdog(lambda: ex._ex.release(slot.index), runner.drained, deadline_s=0.0)
        ex._in_flight.append(runner)  # its graph and buffers must outlive the late launch
        slot.quarantined = True
        return ProbeResult(
            False,
            f"probe replay missed its {deadline_s:.3g} s deadline (watchdog releasing)",
            seconds=time.monotonic() - start,
            node_kinds=kinds,
        )
    failure = runner.failure()
    out = runner.output()
    runner.cleanup()
    if failure:
        slot.quarantined = True
        return ProbeResult(
            False, f"probe replay failed: {failure}", seconds=time.monotonic() - start, node_kinds=kinds
        )
    ref = reference_moe(b["hidden"], b["expert_ids"], b["router_weights"], ex.bank).double().cpu()
    got = out.double().cpu()
    nonfinite = int((~torch.isfinite(got)).sum())
    error = float((got - ref).abs().max() / ref.abs().max()) if not nonfinite else math.inf
    threshold = THRESHOLDS[ex.bank.fmt]
    if not error <= threshold:
        slot.quarantined = True
        return ProbeResult(
            False,
            f"probe replay wrong: error {error:.4g} > {threshold} ({nonfinite} non-finite)",
            error=error,
            seconds=time.monotonic() - start,
            node_kinds=kinds,
        )
    return ProbeResult(
        True, "handshake replays correctly", error=error, seconds=time.monotonic() - start, node_kinds=kinds
    )


class _CpuProbe:
    """The probe on the CPU backend: the harness's dispatcher-recorded graph, replayed on a thread that stands
    for the GPU queue (its emulated wait has no useful timeout, as a GPU wait has none)."""

    def __init__(self, ex: CpuMoeExecutor, slot: _Slot) -> None:
        self.ex, self.slot = ex, slot
        self.graph: Any = None
        self.static: dict[str, torch.Tensor] = {}
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _op(self) -> torch.Tensor:
        if self.ex.faults.graph_api_unsupported and _cpu_capturing():
            raise NotImplementedError("adding the handshake's graph nodes is unsupported (injected fault)")
        s = self.static
        if self.ex.mode == "direct":
            return torch.ops.graphsafe.cpu_moe(
                s["hidden"], s["expert_ids"], s["router_weights"], self.ex.handle
            )
        return self.ex._emulated_handshake(
            self.slot, s["hidden"], s["expert_ids"], s["router_weights"], recorded=self.ex.mode == "recorded"
        )

    def capture(self, a: dict[str, torch.Tensor]) -> None:
        from harness.backends.cpu import CpuBackend

        self.static = {k: v.clone() for k, v in a.items()}
        self.graph = CpuBackend().capture(self._op, warmup=1)

    def node_kinds(self) -> dict[str, int] | None:
        return None

    def node_problem(self) -> str:
        return ""  # the CPU recorder's node list names ops, not memops: the numerical check decides

    def launch(self, b: dict[str, torch.Tensor]) -> None:
        for k, v in b.items():
            self.static[k].copy_(v)
        if self.ex.faults.cpu_never_answers:
            self.ex._ex.set_slot_ignored(self.slot.index, True)

        def queue() -> None:
            time.sleep(self.ex.faults.launch_delay_s)
            try:
                self.graph.replay()
            except BaseException as exc:  # reported by failure()
                self.error = exc

        self.thread = threading.Thread(target=queue, name="cpu-moe-probe-queue", daemon=True)
        self.thread.start()

    def wait(self, deadline_s: float) -> bool:
        assert self.thread is not None
        self.thread.join(deadline_s)
        return not self.thread.is_alive()

    def drained(self) -> bool:
        return self.thread is not None and not self.thread.is_alive()

    def failure(self) -> str:
        return f"{type(self.error).__name__}: {self.error}" if self.error else ""

    def output(self) -> torch.Tensor:
        return self.graph.outputs[0].clone()

    def cleanup(self) -> None:
        if self.graph is not None:
            self.graph.release()
        self.graph = None


def consensus(ok: bool, group: Any = None) -> bool:
    """All tensor-parallel ranks agree: MIN all-reduce of the probe result over a Gloo (CPU) group.

    One failing rank disables capture on every rank; without an initialized process group this is `ok`.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return ok
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag[0] == 1)


def probe_and_enable(ex: CpuMoeExecutor, *, group: Any = None, deadline_s: float = 5.0) -> ProbeResult:
    """Probe, agree across ranks, and enable graphs only when every rank's probe passed."""
    result = probe_handshake(ex, deadline_s=deadline_s)
    agreed = consensus(result.ok, group)
    reason = result.reason if not result.ok else "another tensor-parallel rank's probe failed"
    ex.enable_graphs(agreed, "" if agreed else reason)
    return result


# ------------------------------------------------------------------------------------ GPU handshake glue

HS_MEMOP, HS_HOSTFN = 0, 1
FLAG_EXPLICIT_NODES = 1  # splice explicit batch-memop nodes into the capture (always on under HIP)
FLAG_INJECT_UNRECORDED = 2  # fault: memops on a non-capturing stream: they run at capture, never on replay


def _gpu_forward(
    ex: CpuMoeExecutor,
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
            ex._check_capture_allowed(force_capture)  # a probed layer: FallbackEager, not a crash
            raise HandshakeNotCapturable(
                "handshake mode 'eager' uses synchronizing copies and cannot be captured; use 'memop' or 'hostfn'"
            )
        return ex._after_handshake(_gpu_eager(ex, hidden, ids, weights, stream), hidden)
    if under_capture:
        ex._check_capture_allowed(force_capture)
        slot = ex.slot_for(tokens)  # no graph slot for this size: a named error, never a shared slot
    elif tokens in ex._slots:
        slot = ex._slots[tokens]
    else:
        # Not a graph size: synchronizing copies (never captured), so the GPU part simply follows.
        return ex._after_handshake(_gpu_eager(ex, hidden, ids, weights, stream), hidden)
    if ex.shared is None or not ex.overlap:
        moe = _enqueue(ex, slot, hidden, ids, weights, stream, forced=force_capture)
        return ex._after_handshake(moe, hidden)
    return _gpu_overlapped(ex, slot, hidden, ids, weights, stream, forced=force_capture)


def _gpu_overlapped(
    ex: CpuMoeExecutor,
    slot: _Slot,
    hidden: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    stream: Any,
    *,
    forced: bool,
) -> torch.Tensor:
    """overlap on, on a GPU, all on the caller's stream: copies in + notify, the GPU part, wait + copy back,
    combine (module note on the hybrid layer). Under capture the GPU part's kernel nodes lie between the
    notify and wait nodes, as the CPU backend records its split ops.

    NOTE on a GPU part that raises: the notify is already enqueued, so the CPU answers with done := 1.
    Without its wait nobody consumes that token: the next step's wait would pass at once on it and copy back
    the failed step's result, and every later step would lag one behind. So the wait is enqueued anyway (into
    `out`, allocated before the notify so that this cannot fail for memory), then the GPU part's error is
    raised; an error of that wait (a capture the first error invalidated) is dropped in favour of the first.
    The CPU backend drains such a wait at the next stage-in (`_drain_queued`); a stream takes it in order.
    """
    assert ex.shared is not None
    flags = _handshake_flags(ex, forced)  # an injected graph-API refusal raises here, before any enqueue
    out = torch.empty_like(hidden)
    _enqueue_notify(ex, slot, hidden, ids, weights, stream, flags)
    try:
        gpu_out = ex.shared(hidden)
    except BaseException:
        with contextlib.suppress(Exception):
            _enqueue_wait(ex, slot, out, stream, flags)
        raise
    _enqueue_wait(ex, slot, out, stream, flags)
    return out + gpu_out


def _handshake_flags(ex: CpuMoeExecutor, forced: bool) -> int:
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


def _hs_mode(ex: CpuMoeExecutor) -> int:
    return HS_MEMOP if ex.mode == "memop" else HS_HOSTFN


def _enqueue(
    ex: CpuMoeExecutor,
    slot: _Slot,
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
    flags = _handshake_flags(ex, forced)
    if out is None:
        out = torch.empty_like(hidden)
    req, done = ex.signal_dev(slot)
    lay = slot.layout
    ex._hs.enqueue(
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
        ex._mod.run_slot_fn(),
        ex._ex.slot_handle(slot.index),
    )
    return out


def _enqueue_notify(
    ex: CpuMoeExecutor,
    slot: _Slot,
    hidden: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    stream: Any,
    flags: int,
) -> None:
    """The first half (overlap on): copies GPU->host, then the notify (write-value req := 1, or a host
    function storing it: the CPU service thread computes)."""
    lay = slot.layout
    ex._hs.enqueue_notify(
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


def _enqueue_wait(ex: CpuMoeExecutor, slot: _Slot, out: torch.Tensor, stream: Any, flags: int) -> None:
    """The second half (overlap on): the wait for done == 1 (consuming it), then the copy host->GPU into
    `out`."""
    ex._hs.enqueue_wait(
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
    ex: CpuMoeExecutor, hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, stream: Any
) -> torch.Tensor:
    """Plain synchronizing copies through the eager slot (not capturable; any T up to max(graph_sizes))."""
    slot, hs, s = ex._eager_slot, ex._hs, stream.cuda_stream
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
    ex._ex.forward(
        slot.host + lay["hidden"],
        _DTYPE_CODES[hidden.dtype],
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


class _GpuProbe:
    """The probe on a GPU: torch.cuda.CUDAGraph capture on a side stream, node kinds checked, replay under the
    deadline; a late launch is simulated with torch.cuda._sleep before the replay.

    Nothing is allocated inside the capture (the output is preallocated): the probe usually runs inside a
    caller's warm-up, where a memory pool of the caller's may be active for this thread. Completion is a host
    word that a host function sets after the replay, so the deadline wait and the watchdog poll memory and
    never call the runtime from another thread.
    """

    # NOTE on the delay: torch.cuda._sleep spins for a number of GPU clock cycles; 2e9 cycles/s is the order
    # of an H200's SM clock (1.98 GHz boost), enough to push the launch past a deadline of ~1 s.
    CYCLES_PER_S = 2.0e9

    def __init__(self, ex: CpuMoeExecutor, slot: _Slot) -> None:
        self.ex, self.slot = ex, slot
        self.graph: Any = None
        self.static: dict[str, torch.Tensor] = {}
        self.out: torch.Tensor | None = None
        self.kinds: dict[str, int] | None = None
        self.launched = False
        self.ended = False  # capture_end completed (else the graph is kept, never reset: see cleanup)
        self.error = ""
        self._done_word = torch.zeros(16, dtype=torch.int32)  # host memory; word 0 is the completion flag
        self._done_view = self._done_word.numpy()

    def _op(self) -> torch.Tensor:
        """The handshake alone, in the layer's form: fused, or (overlap on) the two halves back to back."""
        s, stream, ex = self.static, torch.cuda.current_stream(), self.ex
        assert self.out is not None
        if not ex.overlap:
            return _enqueue(
                ex, self.slot, s["hidden"], s["expert_ids"], s["router_weights"], stream, out=self.out
            )
        flags = _handshake_flags(ex, forced=False)
        _enqueue_notify(ex, self.slot, s["hidden"], s["expert_ids"], s["router_weights"], stream, flags)
        _enqueue_wait(ex, self.slot, self.out, stream, flags)
        return self.out

    def capture(self, a: dict[str, torch.Tensor]) -> None:
        self.static = {k: v.clone() for k, v in a.items()}
        self.out = torch.empty_like(self.static["hidden"])
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._op()  # warm-up: the handshake eagerly, as an engine's first step
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        # capture_begin/end on a side stream rather than torch.cuda.graph, whose __enter__ empties the caching
        # allocator's cache: with a caller's use_mem_pool context open that is not a safe point (torch 2.11,
        # harness/backends/gpu.py module note on pool lifetime).
        self.graph = torch.cuda.CUDAGraph(keep_graph=True)
        capture_stream = torch.cuda.Stream()
        capture_stream.wait_stream(torch.cuda.current_stream())
        failure: BaseException | None = None
        with torch.cuda.stream(capture_stream):
            self.graph.capture_begin()
            try:
                self._op()  # an injected graph-API fault raises here, inside the capture (cleanup is tested)
            except BaseException as exc:
                failure = exc
            self.graph.capture_end()
            self.ended = True
        torch.cuda.current_stream().wait_stream(capture_stream)
        if failure is not None:
            raise failure
        self.kinds = dict(self.ex._hs.graph_node_kinds(self.graph.raw_cuda_graph()))
        self.graph.instantiate()

    def node_kinds(self) -> dict[str, int] | None:
        return self.kinds

    def node_problem(self) -> str:
        kinds = self.kinds or {}
        if self.ex.mode == "memop" and kinds.get("batch_mem_op", 0) < 3:
            return f"captured graph lacks the handshake's memop nodes (node kinds {kinds})"
        # hostfn: one node running the CPU layer, or (overlap on) the notify and wait host functions.
        host_nodes = 2 if self.ex.overlap else 1
        if self.ex.mode == "hostfn" and kinds.get("host", 0) < host_nodes:
            return f"captured graph lacks the handshake's {host_nodes} host-function node(s) (node kinds {kinds})"
        return ""

    def launch(self, b: dict[str, torch.Tensor]) -> None:
        for k, v in b.items():
            self.static[k].copy_(v)
        torch.cuda.synchronize()
        if self.ex.faults.cpu_never_answers:
            self.ex._ex.set_slot_ignored(self.slot.index, True)
        stream = torch.cuda.current_stream()
        if self.ex.faults.launch_delay_s:
            torch.cuda._sleep(int(self.ex.faults.launch_delay_s * self.CYCLES_PER_S))
        self.graph.replay()
        self.ex._hs.mark_done(stream.cuda_stream, self._done_word.data_ptr())
        self.launched = True

    def wait(self, deadline_s: float) -> bool:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.drained():
                return True
            time.sleep(0.0005)
        return self.drained()

    def drained(self) -> bool:
        return self.launched and int(self._done_view[0]) == 1

    def failure(self) -> str:
        return self.error

    def output(self) -> torch.Tensor:
        assert self.out is not None
        return self.out.clone()

    def cleanup(self) -> None:
        if self.graph is not None and not self.ended:
            # capture_end threw before torch ended the pool's allocation routing: resetting is unsafe, so the
            # graph is kept for the process's life (as harness/backends/gpu.py does with its own).
            _ABANDONED_GRAPHS.append(self.graph)
        elif self.graph is not None:
            torch.cuda.synchronize()
            self.graph.reset()
        self.graph = None


_ABANDONED_GRAPHS: list[Any] = []
