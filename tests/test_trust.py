"""How verdicts are decided, checked on the CPU backend: replay vs eager (bit-exact unless declared), hidden
state, random ops from one generator state, classification that names what happened.

Every control of cases/trust_controls.py gets its failure verdict, every fixed twin passes, and each rule is
also shown to be the one doing the work (its failure is invisible to the rules that existed before it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import graphsafe.cases.trust_controls  # registers the controls; the tests swap its first-call caches
from graphsafe import REGISTRY, Case, CaseError, check
from graphsafe import verdicts as V
from graphsafe.backends import get_backend, resolve_backend_name
from graphsafe.backends.base import CapturedGraph, GraphBackend
from graphsafe.backends.gpu import classify_capture_failure
from graphsafe.compare import poison_values
from graphsafe.errors import BackendUnavailable, CaptureError, CaptureSyncError
from graphsafe.hidden_state import PythonState
from graphsafe.scan import _NativeBatch

CONTROLS = {
    "control_stale_scale_baked_at_warmup": "stale_replay",
    "control_stale_scale_no_reference": "stale_replay",
    "control_first_call_cache_no_reference": "stale_replay",
    "control_first_call_cache_with_reference": "stale_replay",
    "control_host_random_baked_at_capture": "stale_replay",
    "control_noise_drawn_once_reused": "stale_replay",
    "control_uninitialized_under_one_pattern": "uninitialized",
    "control_int_output_tail_unwritten": "uninitialized",
    "control_unwritten_hidden_by_fmax": "uninitialized",
    "control_own_generator_reseeded_per_call": "stale_replay",
    "control_output_written_once": "uninitialized",
    "control_bincount_under_capture": "capture_sync",
    "control_nan_in_float64_output": "uninitialized",
    "control_nan_in_transposed_output": "uninitialized",
    "control_int_unwritten_under_0xff_only": "uninitialized",
    "control_int_output_written_once": "uninitialized",
    "control_first_call_cache_in_tensor": "stale_replay",
}
FIXED = [
    "fixed_scale_read_in_graph",
    "fixed_scale_read_in_graph_no_reference",
    "fixed_scale_computed_per_call",
    "fixed_dropout_training",
    "fixed_multinomial_sampling",
    "fixed_gumbel_sampling",
    "fixed_noise_drawn_per_call",
    "fixed_min_with_initialised",
    "fixed_fmax_with_initialised",
    "fixed_noise_from_own_generator",
    "fixed_int_output_zeroed",
    "fixed_counts_with_scatter_add",
    "fixed_float64_log",
    "fixed_transposed_log",
    "fixed_int_min_with_initialised",
    "fixed_int_output_per_call",
    "fixed_scale_written_to_tensor_per_call",
]


def _inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    return {"x": torch.randn(32, generator=torch.Generator().manual_seed(seed)).to(device)}


@pytest.fixture(autouse=True)
def fresh_first_call_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first-call-cache controls leak state from the first call in the process, which the hidden-state
    probe can see only while that call is still to come: each test gets empty caches of its own, and the
    module's own (used by `pytest cases/` for the same controls) stays as it was, whatever ran first."""
    for name in ("_first_call_scale", "_first_call_scale_b"):
        monkeypatch.setattr(graphsafe.cases.trust_controls, name, [])
    for name in ("_scale_state", "_scratch_state"):  # state tensors, made anew by the next make_inputs
        monkeypatch.setattr(graphsafe.cases.trust_controls, name, {})


@pytest.mark.parametrize(("name", "verdict"), sorted(CONTROLS.items()))
def test_trust_control_is_caught(name: str, verdict: str) -> None:
    case = REGISTRY.get(name)
    assert case.expect == verdict
    result = check(case, "cpu")
    assert result.verdict == verdict, result.detail


def test_leak_keeps_its_verdict_under_the_nightly_stress_counts() -> None:
    """Method: the leaking control with a reference under `make nightly`'s counts (8 replays, 20 rebuilds,
    32 live graphs). Failure scenario: a live graph's eager-vs-reference row carries a "live graph g/G, round
    r: " prefix, was not recognised as the leak's, and made the case eager_mismatch.
    Expected: stale_replay, as with the default counts."""
    result = check(
        REGISTRY.get("control_first_call_cache_with_reference"), "cpu", replays=8, rebuilds=20, live_graphs=32
    )
    assert result.verdict == "stale_replay", result.detail


@pytest.mark.parametrize("name", FIXED)
def test_trust_fixed_twin_passes(name: str) -> None:
    result = check(REGISTRY.get(name), "cpu")
    assert result.verdict == "pass", result.detail


# --- item 1: replay must equal eager --------------------------------------------------------------------


def test_stale_scale_is_inside_the_reference_threshold_and_caught_by_replay_vs_eager() -> None:
    """The graph is within bf16's 0.02 of the reference on every replay: only the bit-exact rule sees it."""
    result = check(REGISTRY.get("control_stale_scale_baked_at_warmup"), "cpu")
    rows = [r for r in result.rows if r.replay >= 0]
    assert rows and all(r.row_verdict == "stale_replay" for r in rows)
    for r in rows:
        assert r.graph_error is not None and r.threshold is not None and r.graph_error <= r.threshold
        assert r.graph_vs_eager is not None and r.graph_vs_eager > 0
    assert "graph replay vs eager" in result.detail and "bit-exact" in result.detail


_calls = {"n": 0}


def _rounding_varies_per_call(x: torch.Tensor) -> torch.Tensor:
    """Stands in for a split-K/atomics kernel whose rounding differs from call to call (a few ulps)."""
    _calls["n"] += 1
    return x * (1.0 + 1e-6 * (_calls["n"] % 3))


def test_declared_replay_tolerance_admits_nondeterminism_and_only_that() -> None:
    exact = Case(name="t_nondet_exact", make_inputs=_inputs, op=_rounding_varies_per_call)
    assert check(exact, "cpu").verdict == "stale_replay"
    tolerant = Case(
        name="t_nondet_tolerant",
        make_inputs=_inputs,
        op=_rounding_varies_per_call,
        replay_tolerance=1e-5,
        note="rounding differs per call, like split-K",
    )
    assert check(tolerant, "cpu").verdict == "pass"


def test_replay_tolerance_needs_a_note_and_a_positive_value() -> None:
    with pytest.raises(CaseError, match="'note'"):
        Case(name="t_tol_no_note", make_inputs=_inputs, op=lambda x: x, replay_tolerance=1e-3)
    with pytest.raises(CaseError, match="'replay_tolerance'"):
        Case(name="t_tol_bad", make_inputs=_inputs, op=lambda x: x, replay_tolerance=0.0, note="x")


# --- item 2: hidden state ----------------------------------------------------------------------------------


def test_hidden_state_detail_says_state_leaked_from_a() -> None:
    """Its own cache: a cache that an earlier check in this process filled is not fresh for a later one."""
    cache: list[torch.Tensor] = []

    def scale_cached_on_first_call(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if not cache:
            cache.append(w.abs().max())
        return x * cache[0]

    case = REGISTRY.get("control_first_call_cache_no_reference")
    result = check(
        Case(name="t_first_call_cache", make_inputs=case.make_inputs, op=scale_cached_on_first_call), "cpu"
    )
    assert result.verdict == "stale_replay"
    assert "state leaked from A" in result.detail
    # graph equals eager on every replay: no rule but the probe could have seen it
    assert all(r.graph_vs_eager == 0.0 for r in result.rows if r.replay >= 0)


_module_cache: dict[str, torch.Tensor] = {}
_module_value: list[float] = []
_module_tensor = torch.zeros(4)
_module_scalar = None


def _stateful_op(x: torch.Tensor) -> torch.Tensor:
    global _module_scalar
    _module_cache["k"] = x.clone()
    _module_value.append(1.0)
    _module_tensor.add_(1.0)
    _module_scalar = 3.0
    return x


def test_python_state_restore_undoes_globals_containers_tensors_and_cells() -> None:
    counter = {"n": 0}
    last = None

    def closure_op(x: torch.Tensor) -> torch.Tensor:
        nonlocal last
        counter["n"] += 1
        last = x
        return _stateful_op(x)

    state = PythonState(closure_op)
    closure_op(torch.ones(4))
    state.restore()
    assert _module_cache == {} and _module_value == [] and _module_scalar is None
    assert torch.equal(_module_tensor, torch.zeros(4))
    assert counter == {"n": 0} and last is None


# --- item 3: random ops --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _rng_restore_disabled(be: GraphBackend) -> Iterator[None]:
    be.set_rng_state = lambda state: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        del be.set_rng_state


@pytest.mark.parametrize(
    "name", ["fixed_dropout_training", "fixed_multinomial_sampling", "fixed_gumbel_sampling"]
)
def test_graph_safe_sampling_passes_because_replay_and_eager_share_the_generator_state(name: str) -> None:
    be = get_backend("cpu")
    assert check(REGISTRY.get(name), be).verdict == "pass"
    with _rng_restore_disabled(be):  # without the shared state the same op looks stale: the old false alarm
        assert check(REGISTRY.get(name), be).verdict == "stale_replay"


def test_baked_randomness_stays_stale_with_the_generator_restored() -> None:
    for name in ("control_host_random_baked_at_capture", "control_noise_drawn_once_reused"):
        result = check(REGISTRY.get(name), "cpu")
        assert result.verdict == "stale_replay" and "graph replay vs" in result.detail, (name, result.detail)


# --- item 4: classification ------------------------------------------------------------------------------


def test_pageable_copy_under_capture_is_a_host_sync() -> None:
    message = (
        "Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is pinned. "
        "Please pin the CPU tensor."
    )
    assert type(classify_capture_failure(RuntimeError(message))) is CaptureSyncError
    event = "CUDA error: operation not permitted on an event last recorded in a capturing stream"
    assert type(classify_capture_failure(RuntimeError(event))) is CaptureSyncError
    assert type(classify_capture_failure(RuntimeError("CUDA error: invalid argument"))) is CaptureError


class _RaisingGraph(CapturedGraph):
    def __init__(self, outputs: tuple[torch.Tensor, ...]) -> None:
        self.outputs = outputs

    def replay(self) -> None:
        raise RuntimeError("copy_: nested tensor sizes changed between capture and replay")


class _ReplayFailsBackend(GraphBackend):
    name = "cpu"

    def __init__(self) -> None:
        self.device = torch.device("cpu")

    def capture(self, fn: Callable[[], Any], *, warmup: int = 1) -> CapturedGraph:
        return _RaisingGraph((fn(),))


def test_replay_time_exception_is_replay_error_not_crash() -> None:
    result = check(
        Case(name="t_replay_raises", make_inputs=_inputs, op=lambda x: x * 2), _ReplayFailsBackend()
    )
    assert result.verdict == V.REPLAY_ERROR
    assert "replay raised RuntimeError" in result.detail
    assert V.SEVERITY.index(V.CAPTURE_ERROR) < V.SEVERITY.index(V.REPLAY_ERROR) < V.SEVERITY.index(V.REFUSED)


@pytest.mark.parametrize(
    ("op", "fragment"),
    [
        (lambda x: None, "NoneType"),
        (lambda x: 3.0, "float"),
        (lambda x: x.to_sparse(), "layout torch.sparse_coo"),
        (lambda x: torch.nested.nested_tensor([x, x[:3]]), "nested tensor"),
    ],
    ids=["none", "float", "sparse", "nested"],
)
def test_outputs_the_harness_cannot_compare_are_case_errors_on_op(
    op: Callable[..., Any], fragment: str
) -> None:
    with pytest.raises(CaseError, match="'op'") as info:
        check(Case(name="t_bad_output", make_inputs=_inputs, op=op), "cpu")
    assert fragment in str(info.value)


def test_op_that_cannot_take_its_inputs_is_a_case_error_not_refused() -> None:
    def wants_y(y: torch.Tensor) -> torch.Tensor:
        return y

    with pytest.raises(CaseError, match=r"'op'.*cannot be called with the inputs"):
        check(Case(name="t_wrong_params", make_inputs=_inputs, op=wants_y), "cpu")
    # A TypeError raised inside the op is still the op refusing its inputs.

    def refuses(x: torch.Tensor) -> torch.Tensor:
        raise TypeError("x: float32 not supported")

    assert check(Case(name="t_refuses", make_inputs=_inputs, op=refuses, expect="refused"), "cpu").ok


def _complex_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(32, generator=g, dtype=torch.complex64).to(device)}


_complex_cache: list[torch.Tensor] = []


def test_complex_outputs_are_compared_not_sorted() -> None:
    ok = Case(
        name="t_complex",
        make_inputs=_complex_inputs,
        op=lambda x: x * (1 + 2j),
        reference=lambda x: x * (1 + 2j),
    )
    assert check(ok, "cpu").verdict == "pass"

    def stale(x: torch.Tensor) -> torch.Tensor:
        if not _complex_cache:
            _complex_cache.append(x.clone())
        return _complex_cache[0] * 1j + x * 0

    assert check(Case(name="t_complex_stale", make_inputs=_complex_inputs, op=stale), "cpu").verdict != "pass"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised where no GPU exists")
def test_gpu_backend_without_a_gpu_is_a_run_level_error() -> None:
    from graphsafe.cli import main

    with pytest.raises(BackendUnavailable, match="--backend cpu"):
        resolve_backend_name("gpu")
    assert main(["verify", "--backend", "gpu", "-k", "fixed_scale_read_in_graph"]) == 2


# --- verdict aggregation and the runner's deadline ----------------------------------------------------------


def test_case_verdict_is_the_worst_row_not_the_last() -> None:
    result = check(REGISTRY.get("control_uninitialized_under_one_pattern"), "cpu")
    by_pattern = {p: {r.row_verdict for r in result.rows if r.pattern == p} for p in ("0xff", "0x7f")}
    assert by_pattern == {"0xff": {"uninitialized"}, "0x7f": {"pass"}}
    assert result.rows[-1].row_verdict == "pass" and result.verdict == "uninitialized"


def test_a_case_past_its_deadline_is_timeout_on_the_cpu_backend() -> None:
    from graphsafe.runner import RunOptions, run_isolated

    case = REGISTRY.get("control_sleeps_past_deadline")
    results: list[Any] = []
    run_isolated([case], ["graphsafe.cases.trust_controls"], RunOptions(backend="cpu"), 1, 0, results.append)
    assert [r.verdict for r in results] == ["timeout"], results[0].detail


def test_finite_poison_pattern_catches_a_read_that_nan_hides() -> None:
    """fmax ignores NaN, so under the NaN fill an unwritten read looks right; the 0x7F byte pattern (3.4e38)
    shows it. On the cpu backend the pattern's bytes are written after torch's NaN fill of empty*."""

    def fmax_with_unwritten(x: torch.Tensor) -> torch.Tensor:
        return torch.fmax(torch.empty_like(x), x)

    result = check(Case(name="t_fmax_unwritten", make_inputs=_inputs, op=fmax_with_unwritten), "cpu")
    by_pattern = {p: {r.row_verdict for r in result.rows if r.pattern == p} for p in ("0xff", "0x7f")}
    assert by_pattern == {"0xff": {"pass"}, "0x7f": {"uninitialized"}}, result.detail


def test_python_state_copies_tensors_up_to_its_total_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module-level weight table must not be cloned whole on every check: past the bound, no copy."""
    import graphsafe.hidden_state as hidden_state

    monkeypatch.setattr(hidden_state, "MAX_TOTAL_TENSOR_BYTES", 16)
    tables = [torch.zeros(4), torch.zeros(4)]  # 16 bytes each: the first fits, the second does not

    def writes_both(x: torch.Tensor) -> torch.Tensor:
        for t in tables:
            t.add_(1.0)
        return x

    state = PythonState(writes_both)
    writes_both(torch.ones(1))
    state.restore()
    # The op's module holds small tensors of its own: whatever was copied stays within the bound, and the
    # last table, past it, keeps the op's write.
    assert state._tensor_bytes <= 16
    assert torch.equal(tables[1], torch.ones(4))


def test_the_ops_own_generator_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Graph-safe sampling from `generator=g` passes only because replay and eager start from g's same state:
    with g not followed, the same twin is a false stale_replay."""
    import graphsafe.protocol
    from graphsafe.hidden_state import op_generators

    twin = REGISTRY.get("fixed_noise_from_own_generator")
    generators = op_generators(twin.op)
    assert any(g is graphsafe.cases.trust_controls._sampler_generators["cpu"] for g in generators)
    assert check(twin, "cpu").verdict == "pass"
    monkeypatch.setattr(graphsafe.protocol, "op_generators", lambda op: [])
    assert check(twin, "cpu").verdict == "stale_replay"


# --- controls of the detectors' less travelled paths -------------------------------------------------------------


@pytest.mark.parametrize("name", ["control_nan_in_float64_output", "control_nan_in_transposed_output"])
def test_nan_controls_take_the_scans_torch_path(name: str) -> None:
    """Their outputs are ones the native pass does not take (float64; a non-contiguous view)."""
    case = REGISTRY.get(name)
    out = case.op(**case.inputs(0, torch.device("cpu")))
    assert _NativeBatch().floats(out, None) is None
    assert torch.isnan(out).all()


def test_unwritten_int_shows_under_0xff_only() -> None:
    """Under 0x7F the unwritten int32 is large and the minimum hides it: only -1 counted as poison fails it."""
    result = check(REGISTRY.get("control_int_unwritten_under_0xff_only"), "cpu")
    by_pattern = {p: {r.row_verdict for r in result.rows if r.pattern == p} for p in ("0xff", "0x7f")}
    assert by_pattern == {"0xff": {"uninitialized"}, "0x7f": {"pass"}}


def test_int_output_written_once_holds_the_dtypes_max() -> None:
    result = check(REGISTRY.get("control_int_output_written_once"), "cpu")
    assert result.verdict == "uninitialized" and "poison-pattern values" in result.detail
    assert torch.iinfo(torch.int32).max in poison_values(torch.int32)


def test_tensor_state_leak_is_seen_by_the_probe_alone() -> None:
    """Graph equals eager on every replay; the leak shows only because the probe puts the tensor's values
    back, so that the op's first call is the one with A."""
    result = check(REGISTRY.get("control_first_call_cache_in_tensor"), "cpu")
    assert result.verdict == "stale_replay" and "state leaked from A" in result.detail
    assert all(r.graph_vs_eager == 0.0 for r in result.rows if r.replay >= 0)
