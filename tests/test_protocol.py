"""The protocol itself: seeds, in-place copies, output poisoning, refusals, fallback, stress knobs, bad cases."""

from __future__ import annotations

import functools

import pytest
import torch

from graphsafe import Case, CaseError, FallbackEager, check
from graphsafe.protocol import seeds


def _inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    return {"x": torch.randn(8, generator=torch.Generator().manual_seed(seed)).to(device)}


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_seeds_are_recorded_per_row() -> None:
    result = check(Case(name="t_seeds", make_inputs=_inputs, op=_double), "cpu", replays=2, seed=7)
    seed_a, seeds_b = seeds(7, 2)
    assert (seed_a, list(seeds_b)) == (7, [8, 9])
    assert {(r.seed_a, r.seed) for r in result.rows} == {(7, 8), (7, 9)}
    assert {r.pattern for r in result.rows} == {"0xff", "0x7f"}


def test_output_not_written_by_replay_is_caught() -> None:
    """Failure scenario: a graph that writes its output only at capture. Output poisoning must expose it."""
    state: dict[str, torch.Tensor] = {}

    def writes_once(x: torch.Tensor) -> torch.Tensor:
        if "out" not in state:
            state["out"] = x * 2  # a buffer filled once, outside any later replay
        return state["out"]

    result = check(Case(name="t_write_once", make_inputs=_inputs, op=writes_once), "cpu")
    assert result.verdict == "uninitialized"


def test_refusal_is_its_own_verdict() -> None:
    def refuses(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("x: dtype float32 is not supported; allowed: bfloat16")

    result = check(Case(name="t_refuse", make_inputs=_inputs, op=refuses, expect="refused"), "cpu")
    assert result.verdict == "refused" and "allowed: bfloat16" in result.detail


def test_unnamed_runtime_error_is_not_a_refusal() -> None:
    def breaks(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom")

    assert check(Case(name="t_breaks", make_inputs=_inputs, op=breaks), "cpu").verdict == "eager_mismatch"


def test_fallback_eager_when_probe_declines_capture() -> None:
    """An executor whose probe failed raises FallbackEager at capture; eager right -> fallback_eager."""
    right = Case(
        name="t_fallback", make_inputs=_inputs, op=lambda x: _fallback_then(x * 2), reference=_double
    )
    assert check(right, "cpu").verdict == "fallback_eager"
    wrong = Case(
        name="t_fallback_wrong", make_inputs=_inputs, op=lambda x: _fallback_then(x * 3), reference=_double
    )
    assert check(wrong, "cpu").verdict == "eager_mismatch"


def _in_capture() -> bool:
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return any(type(m).__name__ == "_Recorder" for m in _get_current_dispatch_mode_stack())


def _fallback_then(value: torch.Tensor) -> torch.Tensor:
    if _in_capture():
        raise FallbackEager("probe failed")
    return value


def test_bit_exact_case_rejects_rounding_difference() -> None:
    ref = functools.partial(torch.mul, other=2.0)
    ok = Case(name="t_exact", make_inputs=_inputs, op=_double, reference=ref, bit_exact=True)
    assert check(ok, "cpu").verdict == "pass"
    off = Case(
        name="t_exact_off",
        make_inputs=_inputs,
        op=lambda x: (x.double() * 2 + 1e-12).float(),
        reference=lambda x: (x.double() * 2 + 1e-7).float(),
        bit_exact=True,
    )
    assert check(off, "cpu").verdict == "eager_mismatch"


def test_rebuilds_and_live_graphs_pass_for_a_correct_op() -> None:
    case = Case(name="t_stress", make_inputs=_inputs, op=_double, reference=_double)
    result = check(case, "cpu", rebuilds=5, live_graphs=20, patterns=(0xFF,))
    assert result.verdict == "pass"
    assert {r.phase for r in result.rows} == {"replay", "rebuild", "live"}


def test_live_graphs_catch_outputs_shared_between_graphs() -> None:
    """Failure scenario: every graph of one shape returns the same cached buffer. Plain replays pass (each is
    read at once); only the live-graph stress, which replays all graphs before reading any, sees it."""
    from graphsafe import REGISTRY
    from graphsafe.suites import load_default_suites

    load_default_suites()
    control = REGISTRY.get("control_output_shared_across_live_graphs")
    plain = check(control, "cpu", patterns=(0xFF,), live_graphs=0)
    assert plain.verdict == "stale_replay"  # the case's own live_graphs=4 applies even without the knob
    assert [r.phase for r in plain.rows if r.row_verdict == "stale_replay"] == ["live"]
    assert all(r.row_verdict == "pass" for r in plain.rows if r.phase == "replay")
    fixed = check(REGISTRY.get("fixed_output_per_call"), "cpu", patterns=(0xFF,))
    assert fixed.verdict == "pass" and "live" in {r.phase for r in fixed.rows}


@pytest.mark.parametrize(
    ("make_inputs", "static", "fragment"),
    [
        (lambda seed, device: {"x": torch.ones(3)}, (), "identical for seeds"),
        (lambda seed, device: {"x": torch.randn(3 + seed)}, (), "shapes and dtypes must match"),
        (lambda seed, device: {"x": 3}, (), "not a Tensor"),
        (lambda seed, device: [torch.ones(3)], (), "must return dict"),
        (lambda seed, device: {"x": torch.randn(3)}, ("w",), "not inputs"),
    ],
    ids=["identical", "shape_changes", "non_tensor", "not_a_dict", "unknown_static"],
)
def test_bad_inputs_give_one_clear_case_error(make_inputs, static, fragment) -> None:  # type: ignore[no-untyped-def]
    case = Case(name="t_bad_inputs", make_inputs=make_inputs, op=_double, static_inputs=static)
    with pytest.raises(CaseError) as info:
        check(case, "cpu")
    assert info.value.case == "t_bad_inputs"
    assert info.value.field == ("static_inputs" if static else "make_inputs")
    assert fragment in str(info.value)


def test_static_inputs_may_repeat() -> None:
    def make(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {"x": torch.randn(4, generator=torch.Generator().manual_seed(seed)), "w": torch.ones(4)}

    case = Case(name="t_static", make_inputs=make, op=lambda x, w: x * w, static_inputs=("w",))
    assert check(case, "cpu").verdict == "pass"


def test_case_declared_stress_applies_without_cli_knobs() -> None:
    case = Case(
        name="t_case_stress", make_inputs=_inputs, op=_double, reference=_double, rebuilds=2, live_graphs=3
    )
    result = check(case, "cpu", patterns=(0xFF,))
    assert result.verdict == "pass"
    assert {r.phase for r in result.rows} == {"replay", "rebuild", "live"}


@pytest.mark.parametrize(("knob", "phase"), [("rebuilds", "rebuild"), ("live_graphs", "live")])
def test_a_later_capture_that_syncs_is_capture_sync_not_an_escaped_exception(knob: str, phase: str) -> None:
    """Failure scenario: warm-up and the first capture are clean, a recapture calls .item(). Expected: the
    stress row says capture_sync (the exception used to escape check() and cost the worker)."""
    calls = {"n": 0}

    def syncs_after_first_capture(x: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] > 2:  # call 1: warm-up, call 2: the first capture
            x.sum().item()
        return x * 2

    case = Case(name=f"t_late_sync_{phase}", make_inputs=_inputs, op=syncs_after_first_capture)
    result = check(case, "cpu", patterns=(0xFF,), **{knob: 2})
    assert result.verdict == "capture_sync", result.detail
    (failed,) = [r for r in result.rows if r.row_verdict == "capture_sync"]
    assert failed.phase == phase and ".item()" in failed.detail


def test_fallback_eager_whose_eager_raises_is_eager_mismatch() -> None:
    """Failure scenario: the probe declines capture and eager then raises. Expected: eager_mismatch with the
    error in the detail (it used to escape check() as a harness error)."""

    calls = {"n": 0}

    def breaks_after_warmup(x: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        value = _fallback_then(x * 2)  # call 1: warm-up, fine; call 2: capture, declined
        if calls["n"] > 2:
            raise RuntimeError("eager broke")
        return value

    result = check(
        Case(name="t_fallback_raises", make_inputs=_inputs, op=breaks_after_warmup), "cpu", patterns=(0xFF,)
    )
    assert result.verdict == "eager_mismatch", result.detail
    assert "graphs disabled by the op's probe" in result.detail and "eager broke" in result.detail


def test_device_memory_growth_over_rebuilds_is_capture_error() -> None:
    """Negative control of the rebuild growth bound: a backend whose every capture keeps 65 MiB, past the
    64 MiB REBUILD_GROWTH_BOUND_BYTES. Expected: capture_error naming the growth. The CPU backend measures no
    memory, so the leak is simulated in its accounting."""
    from graphsafe.backends.cpu import CpuBackend
    from graphsafe.protocol import REBUILD_GROWTH_BOUND_BYTES

    class LeakingBackend(CpuBackend):
        def __init__(self) -> None:
            super().__init__()
            self.held = 0

        def capture(self, fn, *, warmup=1):  # type: ignore[no-untyped-def]
            self.held += REBUILD_GROWTH_BOUND_BYTES + (1 << 20)
            return super().capture(fn, warmup=warmup)

        def memory_in_use(self) -> int:
            return self.held

    case = Case(name="t_rebuild_leak", make_inputs=_inputs, op=_double, reference=_double)
    result = check(case, LeakingBackend(), rebuilds=2, patterns=(0xFF,))
    assert result.verdict == "capture_error", result.detail
    assert "device memory grew" in result.detail
    no_leak = check(case, CpuBackend(), rebuilds=2, patterns=(0xFF,))
    assert no_leak.verdict == "pass", no_leak.detail


def test_integer_outputs_stay_bit_exact_under_a_float_tolerance() -> None:
    """Failure scenario: an op returns float values and integer ids; a loose tolerance for the floats must
    not let an off-by-one id through."""

    def make(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {"x": torch.randn(64, generator=torch.Generator().manual_seed(seed)) * 100}

    def op_off_by_one(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x.abs().long() + 1

    def ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x.abs().long()

    case = Case(name="t_int_exact", make_inputs=make, op=op_off_by_one, reference=ref, tolerance=0.5)
    assert check(case, "cpu", patterns=(0xFF,)).verdict == "eager_mismatch"


def _refuse_under_capture_as_its_own_cause(x: torch.Tensor) -> torch.Tensor:
    """The platform refusal control's shape: an op raises CaptureError under capture, and a backend that
    re-raises an already-classified error with `raise err from err` makes it its own cause."""
    from graphsafe import CaptureError, is_capturing

    if is_capturing():
        err = CaptureError("hipLaunchHostFunc returned hipErrorNotSupported (refused under stream capture)")
        err.__cause__ = err
        raise err
    return x * 2 + 1


def test_an_exception_that_is_its_own_cause_still_gets_a_verdict() -> None:
    import threading

    from graphsafe.errors import exception_chain

    looped = RuntimeError("loop")
    looped.__cause__ = looped
    assert exception_chain(looped) == [looped]
    case = Case(
        "own_cause_refusal",
        lambda seed, device: {"x": torch.randn(8, generator=torch.Generator().manual_seed(seed)).to(device)},
        _refuse_under_capture_as_its_own_cause,
        lambda x: x * 2 + 1,
        expect="capture_error",
    )
    results: list = []
    worker = threading.Thread(target=lambda: results.append(check(case, backend="cpu")), daemon=True)
    worker.start()
    worker.join(60)  # a cause chain walked without a cycle check never returns
    assert results, "check did not return within 60 s"
    assert results[0].verdict == "capture_error"
    assert "refused under stream capture" in results[0].rows[0].detail


def test_inputs_and_references_are_made_once_per_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both patterns use the same seeds, so a small case's inputs (A and each B) and its reference on each B are
    made once per check; past KEEP_BYTES they are made per pattern again, and the verdict is the same."""
    from graphsafe import protocol

    made: list[int] = []
    referenced: list[float] = []

    def counted_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        made.append(seed)
        return _inputs(seed, device)

    def reference(x: torch.Tensor) -> torch.Tensor:
        referenced.append(float(x[0]))
        return x * 2

    case = Case(name="t_store", make_inputs=counted_inputs, op=_double, reference=reference)
    assert check(case, "cpu", replays=3).verdict == "pass"
    assert sorted(made) == [0, 1, 2, 3] and len(referenced) == 3

    made.clear()
    referenced.clear()
    monkeypatch.setattr(protocol, "KEEP_BYTES", 0)
    assert check(case, "cpu", replays=3).verdict == "pass"
    assert sorted(made) == [0, 0, 1, 1, 2, 2, 3, 3] and len(referenced) == 6


def test_kept_inputs_stay_as_made_when_the_op_writes_its_inputs() -> None:
    """An op that writes its input (declared in mutates) gets copies: every input set make_inputs returned, kept
    for the second pattern, still holds what it was made with after the whole check."""
    made: list[tuple[int, torch.Tensor]] = []

    def recorded_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        inputs = _inputs(seed, device)
        made.append((seed, inputs["x"]))
        return inputs

    def adds_in_place(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    case = Case(
        name="t_store_mutates",
        make_inputs=recorded_inputs,
        op=adds_in_place,
        reference=lambda x: (x + 1) * 2,
        mutates=("x",),
    )
    result = check(case, "cpu", replays=2)
    assert result.verdict == "pass", result.detail
    assert sorted(seed for seed, _ in made) == [0, 1, 2]  # kept: made once for both patterns
    for seed, x in made:
        assert torch.equal(x, _inputs(seed, x.device)["x"]), f"the kept input of seed {seed} was written"


def test_identical_later_b_is_named_by_its_seed() -> None:
    """B seeds are checked against A in one batch where the store keeps them: the error names the seed whose
    input equals A's (seed 3 here), not the first seed of the batch."""

    def third_is_a(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        return _inputs(0 if seed == 3 else seed, device)

    with pytest.raises(CaseError, match="identical for seeds 0 and 3"):
        check(Case(name="t_third_b_is_a", make_inputs=third_is_a, op=_double), "cpu", replays=3)
