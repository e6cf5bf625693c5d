"""The CPU expert executor: formats bit-identical to kernels/common/quant.py, accuracy against the float64 reference,
thread-count independence, named refusals, slot capacity from graph sizes, rebuilds and 19 live graphs, and
the hybrid layer (a shared expert in torch ops plus the CPU experts) with overlap off and on.

Method: small layers (E=4, H=128, INTER=64) so the file runs in seconds on 2 cores; FreeToken issue #350's shape runs in
tests/test_handshake.py and the issue-350 reproduction.
"""

from __future__ import annotations

import pytest
import torch

from graphsafe import Case, check
from graphsafe.kernels import cpu_moe
from graphsafe.kernels.common import quant

E, H, INTER, K = 4, 128, 64, 2


def _routing(seed: int, tokens: int = 3) -> dict[str, torch.Tensor]:
    return cpu_moe.make_routing(seed, tokens, E, K, H, "cpu", torch.bfloat16)


@pytest.fixture(scope="module")
def banks() -> dict[str, cpu_moe.ExpertBank]:
    return {fmt: cpu_moe.make_bank(fmt, E, H, INTER, seed=7) for fmt in cpu_moe.FORMATS}


def _rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(out).all(), "NaN/Inf in the executor's output is a failure, never a wildcard"
    return float((out.double() - ref.double()).abs().max() / ref.double().abs().max())


@pytest.mark.parametrize("fmt", cpu_moe.FORMATS)
def test_cpp_dequant_is_bit_identical_to_quant_py(fmt: str, banks: dict[str, cpu_moe.ExpertBank]) -> None:
    """Method: decode every row of w13 and w2 in C++ and with quant.dequantize_weight. Expected: equal bits."""
    bank = banks[fmt]
    mod = cpu_moe.cpu_module()
    for q in (bank.w13, bank.w2):
        e, n, k = q.data.shape[0], q.data.shape[1], q.k
        out = torch.empty(e, n, k)
        mod.dequant_rows(quant.FORMAT_CODES[fmt], e, n, k, *bank.pointers(q), out.data_ptr())
        assert torch.equal(out, quant.dequantize_weight(q))


@pytest.mark.parametrize("fmt", cpu_moe.FORMATS)
def test_executor_matches_reference_and_is_thread_count_independent(
    fmt: str, banks: dict[str, cpu_moe.ExpertBank]
) -> None:
    """Method: 1 and 3 worker threads against the float64 reference. Expected: under the format's
    threshold, and bit-identical across thread counts (graph replay can then demand exact equality)."""
    x = _routing(11)
    outs = []
    for threads in (1, 3):
        ex = cpu_moe.CpuMoeExecutor(banks[fmt], top_k=K, graph_sizes=(3,), num_threads=threads)
        outs.append(ex(x["hidden"], x["expert_ids"], x["router_weights"]))
        ex.close()
    ref = cpu_moe.reference_moe(x["hidden"], x["expert_ids"], x["router_weights"], banks[fmt])
    assert _rel_error(outs[0], ref) <= cpu_moe.THRESHOLDS[fmt]
    assert torch.equal(outs[0], outs[1])


def test_nan_scale_poisons_output(banks: dict[str, cpu_moe.ExpertBank]) -> None:
    """Negative control for the comparator's NaN rule: an E8M0 scale of 0xFF (NaN) must surface as NaN."""
    bank = cpu_moe.make_bank("mxfp4", E, H, INTER, seed=7)
    bank.w2.scale.fill_(0xFF)
    ex = cpu_moe.CpuMoeExecutor(bank, top_k=K, graph_sizes=(3,))
    x = _routing(3)
    assert torch.isnan(ex(x["hidden"], x["expert_ids"], x["router_weights"])).all()
    ex.close()


def test_refusals_name_the_field(banks: dict[str, cpu_moe.ExpertBank]) -> None:
    """Method: wrong dtype, shape, expert id range, mode and format. Expected: errors naming field and values."""
    ex = cpu_moe.CpuMoeExecutor(banks["bf16"], top_k=K, graph_sizes=(3,))
    x = _routing(1)
    with pytest.raises(TypeError, match="hidden dtype"):
        ex(x["hidden"].half(), x["expert_ids"], x["router_weights"])
    with pytest.raises(TypeError, match="expert_ids must be int32"):
        ex(x["hidden"], x["expert_ids"].long(), x["router_weights"])
    with pytest.raises(ValueError, match=r"expert_ids must lie in \[0, 4\)"):
        ex(x["hidden"], x["expert_ids"] + 4, x["router_weights"])
    with pytest.raises(ValueError, match="mode must be one of"):
        cpu_moe.CpuMoeExecutor(banks["bf16"], top_k=K, mode="magic")
    with pytest.raises(ValueError, match="fmt must be one of"):
        cpu_moe.make_bank("fp16", E, H, INTER)
    ex.close()


def test_devices_compare_by_type_and_index_only_when_both_have_one(
    banks: dict[str, cpu_moe.ExpertBank],
) -> None:
    """The H200 run refused every case: an executor made for "cuda" compared its device with a tensor's
    cuda:0 (never equal in torch). Expected: type match, index only when both name one; a tensor on another
    device type is refused by a ValueError naming both devices."""
    dev = torch.device
    assert cpu_moe.same_device(dev("cuda"), dev("cuda", 0)) and cpu_moe.same_device("cuda:1", "cuda")
    assert not cpu_moe.same_device("cuda:0", "cuda:1") and not cpu_moe.same_device("cpu", "cuda:0")
    assert cpu_moe.same_device("cpu", dev("cpu", 0))
    ex = cpu_moe.CpuMoeExecutor(banks["bf16"], top_k=K, graph_sizes=(3,))
    x = _routing(1)
    meta = {k: torch.empty_like(v, device="meta") for k, v in x.items()}
    with pytest.raises(ValueError, match=r"hidden is on meta but this 'direct' executor runs on cpu"):
        ex(meta["hidden"], meta["expert_ids"], meta["router_weights"])
    with pytest.raises(ValueError, match="mode 'memop' does not run on device cpu"):
        cpu_moe.CpuMoeExecutor(banks["bf16"], top_k=K, mode="memop")
    ex.close()


def test_cases_resolve_each_handshake_per_device() -> None:
    """Cases pick the executor from the inputs' device (registration precedes the backend choice). Expected:
    recorded -> explicit memop nodes, direct -> hostfn, unrecorded -> the unrecorded-memop fault on a GPU;
    GPU modes map back to their emulation on the CPU backend."""
    from graphsafe.cases import cpu_moe as cases

    assert cases.resolve("recorded", "", "cuda") == ("memop", True, "")
    assert cases.resolve("direct", "", "cuda") == ("hostfn", False, "")
    assert cases.resolve("unrecorded", "", "cuda") == ("memop", False, "unrecorded_memop")
    assert cases.resolve("memop", "", "cuda") == ("memop", False, "")
    assert cases.resolve("memop", "unrecorded", "cuda") == ("memop", False, "unrecorded_memop")
    assert cases.resolve("memop", "explicit", "cuda") == ("memop", True, "")
    assert cases.resolve("recorded", "", "cpu") == ("recorded", False, "")
    assert cases.resolve("memop", "unrecorded", "cpu") == ("unrecorded", False, "")
    assert cases.resolve("hostfn", "", "cpu") == ("direct", False, "")
    assert cases.resolve("eager", "", "cpu") == ("eager", False, "")
    with pytest.raises(ValueError, match="cpu or cuda"):
        cases.resolve("memop", "", "meta")


def test_capacity_comes_from_graph_sizes_beyond_16_and_the_decode_limit(
    banks: dict[str, cpu_moe.ExpertBank],
) -> None:
    """FreeToken issue #350: capacity was clamped (16 slots / the decode limit). Method: 19 sizes plus 600 > 512.
    Expected: one slot per size, each handshake equal to the direct executor; an unknown size is named."""
    sizes = [*range(1, 20), cpu_moe.DEFAULT_DECODE_LIMIT + 88]
    ex = cpu_moe.CpuMoeExecutor(banks["bf16"], top_k=K, graph_sizes=sizes, mode="recorded")
    assert ex.max_slots >= len(sizes) and len({ex.slot_for(s).index for s in sizes}) == len(sizes)
    for tokens in (17, 19, cpu_moe.DEFAULT_DECODE_LIMIT + 88):
        x = _routing(tokens, tokens)
        out = ex(x["hidden"], x["expert_ids"], x["router_weights"])
        assert torch.equal(out, ex.forward_eager(x["hidden"], x["expert_ids"], x["router_weights"]))
    with pytest.raises(ValueError, match="batch size 21 has no graph slot"):
        ex.slot_for(21)
    ex.close()


def _case(ex: cpu_moe.CpuMoeExecutor, name: str, expect: str = "pass") -> Case:
    bank = ex.bank
    return Case(
        name=name,
        make_inputs=lambda seed, device: _routing(seed),
        op=lambda hidden, expert_ids, router_weights: ex(hidden, expert_ids, router_weights),
        reference=lambda hidden, expert_ids, router_weights: cpu_moe.reference_moe(
            hidden, expert_ids, router_weights, bank
        ),
        tolerance=cpu_moe.THRESHOLDS[bank.fmt],
        expect=expect,
    )


def test_rebuilds_and_19_live_graphs_keep_executor_slots(banks: dict[str, cpu_moe.ExpertBank]) -> None:
    """Method: graphsafe.check with 3 rebuilds and 19 live graphs interleaved, on one executor's slot.
    Expected: pass, each rebuilt graph's error equal to eager's (slots and signals survive rebuilds)."""
    ex = cpu_moe.CpuMoeExecutor(banks["q4_0"], top_k=K, graph_sizes=(3,), mode="recorded")
    assert cpu_moe.probe_and_enable(ex).ok
    result = check(_case(ex, "rebuild_live"), "cpu", replays=2, rebuilds=3, live_graphs=19, patterns=(0xFF,))
    assert result.verdict == "pass", result.detail
    replays = [r for r in result.rows if r.graph_error is not None]
    assert replays and all(r.graph_error == r.eager_error for r in replays)
    assert {r.phase for r in result.rows} >= {"replay", "rebuild", "live"}
    ex.close()


def test_disabled_graphs_give_fallback_eager_or_a_named_refusal(banks: dict[str, cpu_moe.ExpertBank]) -> None:
    """Method: graphs left disabled (no probe). Expected: policy 'fallback' -> fallback_eager (eager right);
    policy 'strict' (direct executor capture) -> capture_error naming UnsafeExecutorCapture."""
    ex = cpu_moe.CpuMoeExecutor(banks["bf16"], top_k=K, graph_sizes=(3,), mode="recorded")
    assert check(_case(ex, "fallback", "fallback_eager"), "cpu", patterns=(0xFF,)).verdict == "fallback_eager"
    strict = cpu_moe.CpuMoeExecutor(
        banks["bf16"], top_k=K, graph_sizes=(3,), mode="recorded", policy="strict"
    )
    result = check(_case(strict, "strict", "capture_error"), "cpu", patterns=(0xFF,))
    assert result.verdict == "capture_error" and "UnsafeExecutorCapture" in result.detail
    ex.close()
    strict.close()


# ------------------------------------------------------------------------------------------ hybrid layer


def _hybrid(
    bank: cpu_moe.ExpertBank,
    overlap: bool,
    mode: str = "recorded",
    shared: cpu_moe.SharedExpert | None = None,
) -> cpu_moe.CpuMoeExecutor:
    shared = shared if shared is not None else cpu_moe.make_shared_expert(H, INTER, seed=9)
    return cpu_moe.CpuMoeExecutor(bank, top_k=K, graph_sizes=(3,), mode=mode, shared=shared, overlap=overlap)


def _layer_case(ex: cpu_moe.CpuMoeExecutor, name: str, expect: str = "pass") -> Case:
    return Case(
        name=name,
        make_inputs=lambda seed, device: _routing(seed),
        op=lambda hidden, expert_ids, router_weights: ex(hidden, expert_ids, router_weights),
        reference=ex.reference,
        tolerance=cpu_moe.THRESHOLDS[ex.bank.fmt],
        expect=expect,
    )


def test_overlap_on_and_off_give_the_same_numbers_as_the_reference(
    banks: dict[str, cpu_moe.ExpertBank],
) -> None:
    """Method: the hybrid layer eagerly with overlap off and on, against reference_layer (float64 sum of the
    CPU experts and the shared expert). Expected: both under the bf16 threshold and bit-identical (same ops,
    other order); the GPU part is not negligible (the CPU experts alone are far from the layer's answer)."""
    x = _routing(31)
    outs = {}
    for overlap in (False, True):
        ex = _hybrid(banks["bf16"], overlap)
        outs[overlap] = ex(x["hidden"], x["expert_ids"], x["router_weights"])
        ref = ex.reference(x["hidden"], x["expert_ids"], x["router_weights"])
        assert _rel_error(outs[overlap], ref) <= cpu_moe.THRESHOLDS["bf16"]
        moe_only = cpu_moe.reference_moe(x["hidden"], x["expert_ids"], x["router_weights"], ex.bank)
        assert _rel_error(moe_only, ref) > 0.2
        ex.close()
    assert torch.equal(outs[False], outs[True])


class _WatchingShared(cpu_moe.SharedExpert):
    """A shared expert that notes how many CPU computations had finished when it was called."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        ex = _watched[0]
        _seen_served.append(ex.service.served(ex.slot_for(x.shape[0]).index))
        return super().__call__(x)


_watched: list[cpu_moe.CpuMoeExecutor] = []
_seen_served: list[int] = []


@pytest.mark.parametrize("overlap", [False, True])
def test_overlap_runs_the_gpu_part_while_the_cpu_computes(
    overlap: bool, banks: dict[str, cpu_moe.ExpertBank]
) -> None:
    """Method: the CPU service is slowed by 0.2 s per request; the GPU part notes the slot's completed CPU
    computations when it starts, and the emulated graph's op order is read from a capture. Expected: overlap
    on, the GPU part starts before the CPU result exists and is recorded between the notify and wait ops;
    off, it starts after and is recorded after the copy back. A GPU part sitting anywhere else (or an overlap
    flag that changed nothing) fails one of the two."""
    from graphsafe.backends.cpu import CpuBackend

    base = cpu_moe.make_shared_expert(H, INTER, seed=9)
    ex = _hybrid(banks["bf16"], overlap, shared=_WatchingShared(base.w13, base.w2))
    _watched[:] = [ex]
    _seen_served.clear()
    x = _routing(5)
    slot = ex.slot_for(3).index
    ex.service.set_service_delay_us(200_000)
    before = ex.service.served(slot)
    ex(x["hidden"], x["expert_ids"], x["router_weights"])
    assert _seen_served == [before if overlap else before + 1]
    assert ex.service.served(slot) == before + 1
    ex.service.set_service_delay_us(0)
    ex.enable_graphs(True)
    graph = CpuBackend().capture(lambda: ex(x["hidden"], x["expert_ids"], x["router_weights"]), warmup=0)
    order = [str(node.func).split(".")[1] for node in graph.nodes]
    graph.release()
    first_mm = order.index("mm")
    if overlap:
        assert order.index("cpu_moe_notify") < first_mm < order.index("cpu_moe_wait")
        assert order.index("cpu_moe_wait") < order.index("cpu_moe_stage_out") < order.index("add")
    else:
        assert "cpu_moe_notify" not in order and "cpu_moe_wait" not in order
        assert order.index("cpu_moe_notify_wait") < order.index("cpu_moe_stage_out") < first_mm
    ex.close()


@pytest.mark.parametrize("overlap", [False, True])
def test_hybrid_layer_replays_right_and_an_unrecorded_part_is_caught(
    overlap: bool, banks: dict[str, cpu_moe.ExpertBank]
) -> None:
    """Method: graphsafe.check on the CPU backend. Expected: the recorded hybrid layer passes with graph error
    equal to eager error on every replay; the unrecorded handshake (forced) is stale_replay although its GPU
    part replays fresh; a GPU part computed outside the recorder (as kernels on a non-capturing stream: the
    graph never sees them) is stale_replay too, so the cases would catch a GPU part that is not captured."""
    ex = _hybrid(banks["bf16"], overlap)
    assert cpu_moe.probe_and_enable(ex).ok
    result = check(_layer_case(ex, "hybrid"), "cpu", replays=2, patterns=(0xFF,))
    assert result.verdict == "pass", result.detail
    replays = [r for r in result.rows if r.graph_error is not None]
    assert replays and all(r.graph_error == r.eager_error for r in replays)
    ex.close()

    stale = _hybrid(banks["bf16"], overlap, mode="unrecorded")
    assert not cpu_moe.probe_and_enable(stale).ok
    stale.enable_graphs(True)  # forced, as an engine without the probe
    assert check(_layer_case(stale, "u", "stale_replay"), "cpu", replays=2, patterns=(0xFF,)).verdict == (
        "stale_replay"
    )
    stale.close()

    class _UnseenShared(cpu_moe.SharedExpert):
        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            from torch.utils._python_dispatch import _disable_current_modes

            with _disable_current_modes():
                return super().__call__(x)

    base = cpu_moe.make_shared_expert(H, INTER, seed=9)
    unseen = _hybrid(banks["bf16"], overlap, shared=_UnseenShared(base.w13, base.w2))
    unseen.enable_graphs(True)
    verdict = check(_layer_case(unseen, "h", "stale_replay"), "cpu", replays=2, patterns=(0xFF,)).verdict
    assert verdict == "stale_replay"
    unseen.close()


def test_overlap_refusals_name_the_field(banks: dict[str, cpu_moe.ExpertBank]) -> None:
    """Method: overlap without a GPU part, overlap on a one-op handshake, a GPU part of the wrong dtype or
    width. Expected: errors naming the field and the allowed values."""
    bank = banks["bf16"]
    with pytest.raises(ValueError, match=r"overlap=True needs a GPU part"):
        cpu_moe.CpuMoeExecutor(bank, top_k=K, graph_sizes=(3,), mode="recorded", overlap=True)
    with pytest.raises(ValueError, match=r"notify/wait gap.*got mode 'direct'"):
        _hybrid(bank, True, mode="direct")
    with pytest.raises(TypeError, match=r"shared.w13 dtype must be torch.bfloat16"):
        _hybrid(bank, False, shared=cpu_moe.make_shared_expert(H, INTER, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"w13 \[2I, 128\]"):
        _hybrid(bank, False, shared=cpu_moe.make_shared_expert(H + 2, INTER))


def test_overlap_cases_are_registered_for_both_orders() -> None:
    """Issue 6 asks for overlap on and off: the CPU backend's cases cover both, with the negative control."""
    from graphsafe import REGISTRY
    from graphsafe.cases import cpu_moe as cases  # noqa: F401

    for mode, expect in (("recorded", "pass"), ("unrecorded", "stale_replay")):
        for order in ("off", "on"):
            assert REGISTRY.get(f"cpu_moe_bf16_{mode}_overlap_{order}").expect == expect
