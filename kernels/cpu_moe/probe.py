"""CPU/hybrid MoE, the fail-closed probe and tensor-parallel consensus.

The probe (`probe_handshake`) captures, instantiates and replays the handshake on a known input pair with
a deadline and compares numerically; its failure (or any rank's, via `consensus`) disables graphs: the layer
then raises FallbackEager at capture and stays correct eagerly. On the CPU backend it replays the harness's
recorded graph (`_CpuProbe`), on a GPU a torch.cuda.CUDAGraph whose node kinds it checks (`_GpuProbe`); a
missed deadline starts a watchdog (watchdog.py).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

import graphsafe
from graphsafe.kernels.cpu_moe.cpu_handshake import emulated_handshake
from graphsafe.kernels.cpu_moe.executor import ExecutorCore, Slot
from graphsafe.kernels.cpu_moe.gpu_handshake import enqueue, enqueue_notify, enqueue_wait, handshake_flags
from graphsafe.kernels.cpu_moe.settings import PROBE_SLOTS, PROBE_TOKENS, THRESHOLDS
from graphsafe.kernels.cpu_moe.watchdog import Watchdog
from graphsafe.kernels.cpu_moe.weights import make_routing, reference_moe
from graphsafe.toolkit import get_backend, graph_node_kinds


@dataclass
class ProbeResult:
    ok: bool
    reason: str
    error: float | None = None
    seconds: float = 0.0
    watchdog_releases: int = 0
    node_kinds: dict[str, int] | None = None  # the probe graph's node kinds (GPU; None on the CPU backend)


def _next_probe_slot(ex: ExecutorCore) -> Slot | None:
    return next((s for s in ex.probe_slots if not s.quarantined), None)


def probe_handshake(ex: ExecutorCore, *, deadline_s: float = 5.0, seed: int = 9000) -> ProbeResult:
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
        ex.last_watchdog = Watchdog(lambda: ex.service.release(slot.index), runner.drained, deadline_s=0.0)
        ex.in_flight.append(runner)  # its graph and buffers must outlive the late launch
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

    def __init__(self, ex: ExecutorCore, slot: Slot) -> None:
        self.ex, self.slot = ex, slot
        self.graph: Any = None
        self.static: dict[str, torch.Tensor] = {}
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _op(self) -> torch.Tensor:
        if self.ex.faults.graph_api_unsupported and graphsafe.is_capturing():
            raise NotImplementedError("adding the handshake's graph nodes is unsupported (injected fault)")
        s = self.static
        if self.ex.mode == "direct":
            return torch.ops.graphsafe.cpu_moe(
                s["hidden"], s["expert_ids"], s["router_weights"], self.ex.handle
            )
        return emulated_handshake(
            self.ex,
            self.slot,
            s["hidden"],
            s["expert_ids"],
            s["router_weights"],
            recorded=self.ex.mode == "recorded",
        )

    def capture(self, a: dict[str, torch.Tensor]) -> None:
        self.static = {k: v.clone() for k, v in a.items()}
        self.graph = get_backend("cpu").capture(self._op, warmup=1)

    def node_kinds(self) -> dict[str, int] | None:
        return None

    def node_problem(self) -> str:
        return ""  # the CPU recorder's node list names ops, not memops: the numerical check decides

    def launch(self, b: dict[str, torch.Tensor]) -> None:
        for k, v in b.items():
            self.static[k].copy_(v)
        if self.ex.faults.cpu_never_answers:
            self.ex.service.set_slot_ignored(self.slot.index, True)

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

    def __init__(self, ex: ExecutorCore, slot: Slot) -> None:
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
            return enqueue(
                ex, self.slot, s["hidden"], s["expert_ids"], s["router_weights"], stream, out=self.out
            )
        flags = handshake_flags(ex, forced=False)
        enqueue_notify(ex, self.slot, s["hidden"], s["expert_ids"], s["router_weights"], stream, flags)
        enqueue_wait(ex, self.slot, self.out, stream, flags)
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
        self.kinds = graph_node_kinds(self.graph.raw_cuda_graph())
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
            self.ex.service.set_slot_ignored(self.slot.index, True)
        stream = torch.cuda.current_stream()
        if self.ex.faults.launch_delay_s:
            torch.cuda._sleep(int(self.ex.faults.launch_delay_s * self.CYCLES_PER_S))
        self.graph.replay()
        self.ex.handshake_lib.mark_done(stream.cuda_stream, self._done_word.data_ptr())
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


# ------------------------------------------------------------------------------------ consensus


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


def probe_and_enable(ex: ExecutorCore, *, group: Any = None, deadline_s: float = 5.0) -> ProbeResult:
    """Probe, agree across ranks, and enable graphs only when every rank's probe passed."""
    result = probe_handshake(ex, deadline_s=deadline_s)
    agreed = consensus(result.ok, group)
    reason = result.reason if not result.ok else "another tensor-parallel rank's probe failed"
    ex.enable_graphs(agreed, "" if agreed else reason)
    return result
