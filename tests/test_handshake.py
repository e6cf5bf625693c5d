"""The handshake's fail-closed probe, its watchdog, and fault injection (FreeToken issue #350's validation list).

Each fault must make the probe say "unsafe", keep eager results right, and, when capture is forced anyway,
give stale_replay from the harness. CPU-emulable faults run here on the CPU backend; the same faults on a
real GPU are the `gpu`-marked tests at the bottom (memop executed during capture but not recorded is emulated
on CUDA by issuing it on a non-capturing stream).
"""

from __future__ import annotations

import ctypes
import shutil
import threading
import time
from typing import Any

import pytest
import torch

from graphsafe import Case, check
from graphsafe.kernels import cpu_moe
from graphsafe.native import graph_node_kinds

E, H, INTER, K, T = 4, 128, 64, 2, 3


def _executor(
    mode: str = "recorded", device: str = "cpu", overlap: bool | None = None, **faults: object
) -> cpu_moe.CpuMoeExecutor:
    """overlap: None, the CPU experts alone; False/True, the hybrid layer (a shared expert on `device`)."""
    bank = cpu_moe.make_bank("bf16", E, H, INTER, seed=5)
    shared = None if overlap is None else cpu_moe.make_shared_expert(H, INTER, seed=6, device=device)
    return cpu_moe.CpuMoeExecutor(
        bank,
        top_k=K,
        graph_sizes=(T, cpu_moe.PROBE_TOKENS),
        mode=mode,
        device=device,
        faults=cpu_moe.Faults(**faults),
        shared=shared,
        overlap=bool(overlap),
    )


def _case(ex: cpu_moe.CpuMoeExecutor, expect: str, *, force: bool = False) -> Case:
    def make(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        return cpu_moe.make_routing(seed, T, E, K, H, device, torch.bfloat16)

    return Case(
        name=f"hs_{ex.mode}_{expect}",
        make_inputs=make,
        op=lambda hidden, expert_ids, router_weights: ex(
            hidden, expert_ids, router_weights, force_capture=force
        ),
        reference=ex.reference,  # the CPU experts, plus the GPU part of a hybrid layer
        tolerance=0.02,
        expect=expect,
    )


def _eager_is_right(ex: cpu_moe.CpuMoeExecutor, seed: int = 77) -> bool:
    x = cpu_moe.make_routing(seed, T, E, K, H, ex.device, torch.bfloat16)
    out = ex(x["hidden"], x["expert_ids"], x["router_weights"])
    ref = ex.reference(x["hidden"], x["expert_ids"], x["router_weights"])
    return (
        bool(torch.isfinite(out).all())
        and float((out.double() - ref.double()).abs().max() / ref.double().abs().max()) < 0.02
    )


def test_probe_passes_for_the_recorded_handshake() -> None:
    """Negative control for the probe: a correct handshake is not flagged; graphs get enabled."""
    ex = _executor()
    result = cpu_moe.probe_and_enable(ex, deadline_s=5.0)
    assert result.ok and ex.graphs_enabled, result.reason
    assert check(_case(ex, "pass"), "cpu", patterns=(0xFF,)).verdict == "pass"
    ex.close()


def test_unrecorded_handshake_is_unsafe_and_stale_when_forced() -> None:
    """Fault: notify/wait runs at capture but is not recorded (the ROCm memop shape). Expected: probe unsafe
    (numerical), eager right, fallback_eager by default, stale_replay when capture is forced."""
    ex = _executor("unrecorded")
    result = cpu_moe.probe_and_enable(ex)
    assert not result.ok and "probe replay wrong" in result.reason and not ex.graphs_enabled
    assert _eager_is_right(ex)
    assert check(_case(ex, "fallback_eager"), "cpu", patterns=(0xFF,)).verdict == "fallback_eager"
    assert check(_case(ex, "stale_replay", force=True), "cpu", patterns=(0xFF,)).verdict == "stale_replay"
    ex.close()


def test_graph_node_api_unsupported_is_unsafe_and_stale_when_forced() -> None:
    """Fault: adding the handshake's graph nodes fails. Expected: probe unsafe naming the capture failure (and
    the probe slot is quarantined, nothing half-built reused); eager right; forced capture -> stale_replay
    (without nodes the notify/wait runs only at capture)."""
    ex = _executor(graph_api_unsupported=True)
    result = cpu_moe.probe_and_enable(ex)
    assert not result.ok and "capture failed" in result.reason and "unsupported" in result.reason
    assert sum(s.quarantined for s in ex.probe_slots) == 1
    assert _eager_is_right(ex)
    assert check(_case(ex, "stale_replay", force=True), "cpu", patterns=(0xFF,)).verdict == "stale_replay"
    ex.close()


def test_probe_launch_delayed_past_deadline_is_unsafe_and_watchdog_outlives_it() -> None:
    """Fault: the probe's replay starts 0.6 s late against a 0.2 s deadline. Expected: unsafe; the watchdog
    releases the wait and exits only after the late launch drained; eager still right."""
    ex = _executor(launch_delay_s=0.6)
    result = cpu_moe.probe_and_enable(ex, deadline_s=0.2)
    assert not result.ok and "deadline" in result.reason
    wd = ex.last_watchdog
    assert wd is not None and wd.join(10.0) and not wd.hung
    assert wd.releases > 0 and wd.drained_at is not None and wd.exited_at >= wd.drained_at
    assert wd.drained_at - wd.started_at > 0.2  # it was alive when the delayed launch finished
    assert _eager_is_right(ex)
    ex.close()


def test_cpu_that_never_answers_is_released_by_the_watchdog() -> None:
    """Fault: the CPU side ignores the probe slot. Expected: unsafe at the deadline; the watchdog's release
    lets the emulated queue drain (it would otherwise wait EMULATED_WAIT_TIMEOUT_S); eager still right."""
    ex = _executor(cpu_never_answers=True)
    start = time.monotonic()
    result = cpu_moe.probe_and_enable(ex, deadline_s=0.2)
    assert not result.ok and "deadline" in result.reason
    assert ex.last_watchdog.join(5.0) and time.monotonic() - start < 5.0
    assert ex.last_watchdog.releases > 0
    assert _eager_is_right(ex)
    ex.close()


def test_watchdog_negative_control_without_release_the_wait_hangs() -> None:
    """Proves the watchdog is what unblocks: with a no-op release the queue is still blocked after 0.5 s."""
    ex = _executor()
    slot = ex.probe_slots[0]
    ex.service.set_slot_ignored(slot.index, True)
    released: list[bool] = []
    waiter = threading.Thread(target=lambda: released.append(ex.service.notify_wait(slot.index, 2_000_000)))
    waiter.start()
    wd = cpu_moe.Watchdog(lambda: None, lambda: not waiter.is_alive(), deadline_s=0.0, max_s=0.5)
    assert wd.join(3.0) and wd.hung and waiter.is_alive()
    ex.service.release(slot.index)  # now release for real: the wait returns
    waiter.join(3.0)
    assert released == [True]
    ex.close()


def test_wait_guard_releases_a_wait_nobody_answers() -> None:
    """Method: a wait on an ignored slot under wait_guard(0.1 s). Expected: released well before its own 3 s
    timeout, and the guard reports that it had to release."""
    ex = _executor()
    slot = ex.probe_slots[0]
    ex.service.set_slot_ignored(slot.index, True)
    answered: list[bool] = []
    start = time.monotonic()
    with cpu_moe.wait_guard(0.1) as guard:
        waiter = threading.Thread(
            target=lambda: answered.append(ex.service.notify_wait(slot.index, 3_000_000))
        )
        waiter.start()
        waiter.join(2.0)
    assert answered == [True] and time.monotonic() - start < 2.0
    assert guard.releases > 0 and not guard.hung
    ex.close()


def test_wait_guard_leaves_idle_executors_right() -> None:
    """Method: an idle executor called once, then a wait_guard block that must release another executor's
    ignored slot, then the idle one called with two new inputs. Expected: both calls right. (A guard that
    answered idle slots too would make the idle executor's next wait return before its CPU side ran, and
    every later call read the call before it.)"""
    idle = _executor()
    assert _eager_is_right(idle, seed=1)
    busy = _executor()
    slot = busy.probe_slots[0]
    busy.service.set_slot_ignored(slot.index, True)
    with cpu_moe.wait_guard(0.05) as guard:
        waiter = threading.Thread(target=lambda: busy.service.notify_wait(slot.index, 3_000_000))
        waiter.start()
        waiter.join(2.0)
    assert guard.releases > 0 and not waiter.is_alive()
    assert _eager_is_right(idle, seed=2) and _eager_is_right(idle, seed=3)
    busy.close()
    idle.close()


def test_cpu_eager_mode_refuses_capture_and_stays_right() -> None:
    """Mode 'eager' on the CPU backend (a GPU-only case run there): probe unsafe, fallback_eager."""
    ex = _executor("eager")
    result = cpu_moe.probe_and_enable(ex)
    assert not result.ok and "no capturable handshake" in result.reason
    assert check(_case(ex, "fallback_eager"), "cpu", patterns=(0xFF,)).verdict == "fallback_eager"
    ex.close()


def test_probe_with_overlap_exercises_the_split_notify_and_wait() -> None:
    """With overlap on, the emulated handshake is two ops (notify, wait) with the GPU part between; the probe
    captures that split form. Expected: recorded -> ok and the layer passes; unrecorded (plain calls, run at
    capture only) -> unsafe by the numbers, eager right, fallback_eager by default."""
    ex = _executor(overlap=True)
    result = cpu_moe.probe_and_enable(ex)
    assert result.ok and ex.graphs_enabled, result.reason
    assert check(_case(ex, "pass"), "cpu", patterns=(0xFF,)).verdict == "pass"
    ex.close()
    stale = _executor("unrecorded", overlap=True)
    result = cpu_moe.probe_and_enable(stale)
    assert not result.ok and "probe replay wrong" in result.reason
    assert _eager_is_right(stale)
    assert check(_case(stale, "fallback_eager"), "cpu", patterns=(0xFF,)).verdict == "fallback_eager"
    stale.close()


def test_overlap_wait_abandoned_by_a_failed_step_drains_before_the_next_notify() -> None:
    """A step that raised between notify and wait (here: the GPU part) leaves its wait queued, as a stream
    would. Expected: the next step drains it first and is right; close() answers any wait still queued."""
    ex = _executor(overlap=True)

    def boom(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("GPU part failed")

    shared = ex.shared
    ex.shared = boom  # type: ignore[assignment]
    x = cpu_moe.make_routing(3, T, E, K, H, "cpu", torch.bfloat16)
    with pytest.raises(RuntimeError, match="GPU part failed"):
        ex(x["hidden"], x["expert_ids"], x["router_weights"])
    assert ex.pending_waits  # the abandoned wait
    ex.shared = shared
    assert _eager_is_right(ex) and not ex.pending_waits
    ex.shared = boom  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="GPU part failed"):
        ex(x["hidden"], x["expert_ids"], x["router_weights"])
    ex.close()
    assert not ex.pending_waits


# ------------------------------------------------------------- the split hostfn's host functions, without a GPU

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # hipHostFn_t: void(void* userData)


def _host_fns() -> dict[str, Any]:
    """post_req and await_done from handshake.hip, built with nvcc for sm_90 (compile and import need no
    device; neither function calls the GPU API), callable through ctypes."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed: handshake.hip's host functions are not built")
    from graphsafe.kernels.common import native
    from graphsafe.kernels.cpu_moe.settings import FAMILY_DIR

    hs = native.build(FAMILY_DIR, "handshake", "cuda", arch="sm_90")
    return {name: _HOST_FN(addr) for name, addr in hs.host_fns().items()}


def test_split_hostfn_host_functions_drive_the_real_service_thread() -> None:
    """Method: the overlap-on hostfn handshake without a GPU: inputs staged in a CPU executor's slot, then
    handshake.hip's post_req (the notify host function) and await_done (the wait host function) called on the
    slot's signal words as the stream's host-function thread would. Expected: the service thread computes
    (served + 1), await_done returns and consumes the token (req and done back to 0), and the slot's output is
    bit-equal to the executor run directly."""
    fns = _host_fns()
    ex = _executor()
    slot = ex.slot_for(T)
    x = cpu_moe.make_routing(12, T, E, K, H, "cpu", torch.bfloat16)
    for region, key in (("hidden", "hidden"), ("ids", "expert_ids"), ("weights", "router_weights")):
        ex.slot_tensor(slot, region).copy_(x[key])
    req, done = ex.signal_host(slot)
    served = ex.service.served(slot.index)
    fns["post_req"](req)
    waiter = threading.Thread(target=fns["await_done"], args=(done,), daemon=True)
    waiter.start()
    waiter.join(10.0)
    assert not waiter.is_alive()
    assert ex.service.served(slot.index) == served + 1
    assert tuple(ex.service.signals(slot.index)) == (0, 0)
    expected = ex.forward_eager(x["hidden"], x["expert_ids"], x["router_weights"])
    assert torch.equal(ex.slot_tensor(slot, "out"), expected)
    ex.close()


def test_split_hostfn_wait_the_cpu_never_answers_is_released_by_the_watchdog() -> None:
    """Method: the same host functions on a slot the service ignores (the cpu_never_answers fault). Expected:
    await_done is still blocked after 0.3 s (it has no timeout, as a wait-value has none: the negative
    control), and the probe's Watchdog, releasing that slot's done word, unblocks it within its deadline."""
    fns = _host_fns()
    ex = _executor()
    slot = ex.probe_slots[0]
    ex.service.set_slot_ignored(slot.index, True)
    req, done = ex.signal_host(slot)
    fns["post_req"](req)
    waiter = threading.Thread(target=fns["await_done"], args=(done,), daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and ex.service.served(slot.index) == 0
    wd = cpu_moe.Watchdog(
        lambda: ex.service.release(slot.index), lambda: not waiter.is_alive(), deadline_s=0.05, max_s=10.0
    )
    assert wd.join(10.0) and not wd.hung and wd.releases > 0
    assert not waiter.is_alive()
    ex.close()


# ------------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["memop", "hostfn"])
def test_gpu_probe_passes_and_graph_replay_is_exact(mode: str) -> None:
    ex = _executor(mode, "cuda")
    result = cpu_moe.probe_and_enable(ex)
    assert result.ok, result.reason
    res = check(_case(ex, "pass"), "gpu")
    assert res.verdict == "pass", res.detail
    assert all(r.graph_error == r.eager_error for r in res.rows if r.graph_error is not None)
    ex.close()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["memop", "hostfn", "eager"])
def test_gpu_eager_handshake_is_bit_equal_to_the_executor_on_cpu(mode: str) -> None:
    """Method: one step through the GPU handshake outside capture (copies GPU->host, the CPU layer, copy back)
    and the same executor's forward on CPU copies of the inputs. Expected: the same bits (the handshake moves
    bytes and adds no arithmetic), within 0.02 of the float64 reference."""
    ex = _executor(mode, "cuda")
    x = cpu_moe.make_routing(21, T, E, K, H, "cuda", torch.bfloat16)
    out = ex(x["hidden"], x["expert_ids"], x["router_weights"])
    torch.cuda.synchronize()
    cpu = {k: v.cpu() for k, v in x.items()}
    assert torch.equal(out.cpu(), ex.forward_eager(cpu["hidden"], cpu["expert_ids"], cpu["router_weights"]))
    assert _eager_is_right(ex)
    ex.close()


@pytest.mark.gpu
def test_gpu_explicit_batch_memop_nodes_probe_passes() -> None:
    ex = _executor("memop", "cuda")
    ex.explicit_memop_nodes = True
    assert cpu_moe.probe_and_enable(ex).ok
    assert check(_case(ex, "pass"), "gpu").verdict == "pass"
    ex.close()


@pytest.mark.gpu
def test_gpu_unrecorded_memop_is_unsafe_and_stale_when_forced() -> None:
    ex = _executor("memop", "cuda", unrecorded_memop=True)
    result = cpu_moe.probe_and_enable(ex)
    assert not result.ok and ("memop nodes" in result.reason or "wrong" in result.reason), result.reason
    assert _eager_is_right(ex)
    assert check(_case(ex, "fallback_eager"), "gpu").verdict == "fallback_eager"
    assert check(_case(ex, "stale_replay", force=True), "gpu").verdict == "stale_replay"
    ex.close()


@pytest.mark.gpu
def test_gpu_graph_api_unsupported_is_unsafe_and_stale_when_forced() -> None:
    ex = _executor("memop", "cuda", graph_api_unsupported=True)
    result = cpu_moe.probe_and_enable(ex)
    assert not result.ok and "capture failed" in result.reason and "unsupported" in result.reason
    assert sum(s.quarantined for s in ex.probe_slots) == 1
    assert _eager_is_right(ex)
    assert check(_case(ex, "stale_replay", force=True), "gpu").verdict == "stale_replay"
    ex.close()


@pytest.mark.gpu
def test_gpu_inputs_on_cuda_0_match_an_executor_made_for_cuda() -> None:
    """The H200 run refused every case: torch.device("cuda") != cuda:0. Expected: accepted, right answer."""
    ex = _executor("memop", "cuda")
    assert ex.device.index is not None
    x = cpu_moe.make_routing(5, T, E, K, H, torch.device("cuda", torch.cuda.current_device()), torch.bfloat16)
    out = ex(x["hidden"], x["expert_ids"], x["router_weights"])
    ref = cpu_moe.reference_moe(x["hidden"], x["expert_ids"], x["router_weights"], ex.bank)
    assert float((out.double() - ref.double()).abs().max() / ref.double().abs().max()) < 0.02
    ex.close()


@pytest.mark.gpu
def test_gpu_delayed_launch_is_unsafe_and_never_hangs() -> None:
    ex = _executor("memop", "cuda", launch_delay_s=1.5, cpu_never_answers=True)
    result = cpu_moe.probe_and_enable(ex, deadline_s=0.3)
    assert not result.ok and "deadline" in result.reason
    wd = ex.last_watchdog
    assert wd is not None and wd.join(30.0) and not wd.hung and wd.releases > 0
    torch.cuda.synchronize()  # returns: the GPU queue drained
    assert _eager_is_right(ex)
    ex.close()


@pytest.mark.gpu
def test_gpu_eager_mode_refuses_capture_by_name() -> None:
    ex = _executor("eager", "cuda")
    ex.enable_graphs(True)
    x = cpu_moe.make_routing(1, T, E, K, H, "cuda", torch.bfloat16)
    assert _eager_is_right(ex)
    g = torch.cuda.CUDAGraph()
    with pytest.raises(cpu_moe.HandshakeNotCapturable), torch.cuda.graph(g):
        ex(x["hidden"], x["expert_ids"], x["router_weights"])
    ex.close()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["memop", "hostfn"])
def test_gpu_hybrid_layer_overlap_on_and_off(mode: str) -> None:
    """The hybrid layer on a GPU: overlap off runs the shared expert after the copy back; on runs it between
    enqueue_notify and enqueue_wait on the same stream. Expected: both probe ok, pass with graph error ==
    eager error, and the two orders agree within the bf16 threshold."""
    x = cpu_moe.make_routing(41, T, E, K, H, "cuda", torch.bfloat16)
    outs = {}
    for overlap in (False, True):
        ex = _executor(mode, "cuda", overlap=overlap)
        assert cpu_moe.probe_and_enable(ex).ok
        res = check(_case(ex, "pass"), "gpu")
        assert res.verdict == "pass", res.detail
        assert all(r.graph_error == r.eager_error for r in res.rows if r.graph_error is not None)
        outs[overlap] = ex(x["hidden"], x["expert_ids"], x["router_weights"]).double()
        ex.close()
    assert float((outs[True] - outs[False]).abs().max() / outs[False].abs().max()) < 0.02


def _capture(ex: cpu_moe.CpuMoeExecutor, static: dict[str, torch.Tensor]) -> tuple[Any, torch.Tensor]:
    """Warm up on a side stream, capture one layer call (keep_graph: node kinds readable), instantiate."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ex(static["hidden"], static["expert_ids"], static["router_weights"])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        out = ex(static["hidden"], static["expert_ids"], static["router_weights"])
    graph.instantiate()
    return graph, out


@pytest.mark.gpu
@pytest.mark.parametrize(("mode", "explicit"), [("memop", False), ("memop", True), ("hostfn", False)])
def test_gpu_overlap_on_equals_overlap_off_and_eager(mode: str, explicit: bool) -> None:
    """Method: two layers with one bank and one shared expert, overlap off and on; eagerly on three inputs, then
    a graph of the overlap-on layer replayed with each. Expected: overlap on == off == replay bit for bit
    (the same CPU computation, bit-identical for any thread count, plus the same GPU kernels and one add),
    and within the bf16 threshold of the float64 layer reference. Node kinds of the overlap-on graph: the
    handshake's memop nodes (3) or its two host functions, its 4 copies, and the GPU part's kernels. The
    counts cannot show that the kernels lie between notify and wait (graph_node_kinds has no edges); the
    split's order is what the CPU backend's test_overlap_runs_the_gpu_part_while_the_cpu_computes reads."""
    bank = cpu_moe.make_bank("bf16", E, H, INTER, seed=5)
    shared = cpu_moe.make_shared_expert(H, INTER, seed=6, device="cuda")
    layers = {}
    for overlap in (False, True):
        ex = cpu_moe.CpuMoeExecutor(
            bank, top_k=K, graph_sizes=(T,), mode=mode, device="cuda", shared=shared, overlap=overlap
        )
        ex.explicit_memop_nodes = explicit
        assert cpu_moe.probe_and_enable(ex).ok
        layers[overlap] = ex
    static = cpu_moe.make_routing(50, T, E, K, H, "cuda", torch.bfloat16)
    graph, out = _capture(layers[True], static)
    kinds = graph_node_kinds(graph.raw_cuda_graph())
    if mode == "memop":
        assert kinds.get("batch_mem_op") == 3, kinds
    else:
        assert kinds.get("host") == 2, kinds
    assert kinds.get("memcpy") == 4 and kinds.get("kernel", 0) >= 2, kinds
    for seed in (51, 52, 53):
        x = cpu_moe.make_routing(seed, T, E, K, H, "cuda", torch.bfloat16)
        off = layers[False](x["hidden"], x["expert_ids"], x["router_weights"])
        on = layers[True](x["hidden"], x["expert_ids"], x["router_weights"])
        for name, t in x.items():
            static[name].copy_(t)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(on, off) and torch.equal(out, on)
        ref = layers[True].reference(x["hidden"], x["expert_ids"], x["router_weights"]).double().cpu()
        assert float((out.double().cpu() - ref).abs().max() / ref.abs().max()) < 0.02
    graph.reset()
    for ex in layers.values():
        ex.close()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["memop", "hostfn"])
def test_gpu_overlap_wait_the_cpu_never_answers_is_released_by_the_watchdog(mode: str) -> None:
    """Fault: with overlap on the probe captures the split halves, and the CPU ignores the probe slot.
    Expected: unsafe at the deadline; the watchdog releases the split wait (memop wait-value, or the hostfn
    await_done spinning on the same done word) until the replay drained; the GPU queue drains; eager right."""
    ex = _executor(mode, "cuda", overlap=True, cpu_never_answers=True)
    result = cpu_moe.probe_and_enable(ex, deadline_s=0.3)
    assert not result.ok and "deadline" in result.reason, result.reason
    wd = ex.last_watchdog
    assert wd is not None and wd.join(30.0) and not wd.hung and wd.releases > 0
    torch.cuda.synchronize()  # returns: the GPU queue drained
    assert _eager_is_right(ex)
    ex.close()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["memop", "hostfn"])
def test_gpu_overlap_gpu_part_that_raises_still_consumes_its_token(mode: str) -> None:
    """A step whose GPU part raised after its notify was enqueued. Expected: the error surfaces, the wait was
    enqueued anyway, so the next step is right (an unconsumed done would let its wait pass at once and copy
    back the failed step's result: the steps would lag one behind)."""
    ex = _executor(mode, "cuda", overlap=True)

    def boom(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("GPU part failed")

    shared = ex.shared
    ex.shared = boom  # type: ignore[assignment]
    x = cpu_moe.make_routing(3, T, E, K, H, "cuda", torch.bfloat16)
    with pytest.raises(RuntimeError, match="GPU part failed"):
        ex(x["hidden"], x["expert_ids"], x["router_weights"])
    ex.shared = shared
    torch.cuda.synchronize()
    assert tuple(ex.service.signals(ex.slot_for(T).index)) == (0, 0)  # the token was consumed
    assert _eager_is_right(ex)
    ex.close()


@pytest.mark.gpu
@pytest.mark.parametrize(("mode", "overlap"), [("memop", False), ("memop", True), ("hostfn", True)])
def test_gpu_close_right_after_an_asynchronous_step_drains_it(mode: str, overlap: bool) -> None:
    """A step whose wait the service thread must answer, enqueued behind a 0.5 s sleep kernel so the GPU has
    not reached its notify when close() runs. Expected: close drains the device before stopping the service
    (a close that stopped it first left the wait unanswered and the process hung), returns well inside
    CLOSE_DRAIN_S (answered by the service, not released by the watchdog), and the output is right."""
    ex = _executor(mode, "cuda", overlap=overlap)
    x = cpu_moe.make_routing(8, T, E, K, H, "cuda", torch.bfloat16)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(0.5 * 2.0e9))  # ~0.5 s at the H200's ~2 GHz SM clock (_GpuProbe.CYCLES_PER_S)
    out = ex(x["hidden"], x["expert_ids"], x["router_weights"])
    start = time.monotonic()
    ex.close()
    assert time.monotonic() - start < cpu_moe.CLOSE_DRAIN_S
    torch.cuda.synchronize()
    ref = ex.reference(x["hidden"], x["expert_ids"], x["router_weights"]).double().cpu()
    assert float((out.double().cpu() - ref).abs().max() / ref.abs().max()) < 0.02


@pytest.mark.gpu
def test_gpu_unrecorded_memop_with_overlap_is_stale_when_forced() -> None:
    ex = _executor("memop", "cuda", overlap=True, unrecorded_memop=True)
    assert not cpu_moe.probe_and_enable(ex).ok
    assert _eager_is_right(ex)
    assert check(_case(ex, "stale_replay", force=True), "gpu").verdict == "stale_replay"
    ex.close()
