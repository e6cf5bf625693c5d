"""Engine-style protocol features (harness/engine.py, Case.prepare/buckets/make_module): each negative control
of cases/engine_style.py is caught with its verdict and each fixed twin passes, on the cpu backend; the
hook runs where the protocol promises; bucket and stateful checks fail for the reason they name; bad
definitions are CaseErrors naming the field."""

from __future__ import annotations

import pytest
import torch

from graphsafe import verdicts as V
from graphsafe.case import Case, load_case_source
from graphsafe.engine import step_seed, valid_rows
from graphsafe.errors import CaseError
from graphsafe.protocol import check

# By module name, as the built-in suite imports it: loading the file by path would register its cases twice.
ENGINE_CASES = {c.name: c for c in load_case_source("graphsafe.cases.engine_style")}


@pytest.mark.parametrize("name", sorted(ENGINE_CASES))
def test_engine_case_gets_its_expected_verdict(name: str) -> None:
    case = ENGINE_CASES[name]
    result = check(case, "cpu")
    assert result.verdict == case.expect, result.detail
    assert result.rows, "a verdict without rows was not obtained"


def test_each_negative_control_has_a_passing_twin() -> None:
    expects = sorted(c.expect for c in ENGINE_CASES.values())
    assert expects.count("pass") == 3
    assert sorted(e for e in expects if e != "pass") == ["stale_replay", "stale_replay", "uninitialized"]


# ---------------------------------------------------------------------------------------------- prepare


def test_prepare_runs_before_capture_every_replay_and_every_eager_call() -> None:
    """The input value each prepare call saw, in order."""
    log: list[tuple[str, float]] = []

    def make(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {"x": torch.full((4,), float(seed), device=device)}

    def prepare(inputs: dict[str, torch.Tensor]) -> None:
        log.append(("prepare", float(inputs["x"][0])))

    def op(x: torch.Tensor) -> torch.Tensor:  # reaches no `log`: the probe restores what the op can reach
        return x * 2

    result = check(Case("hook_order", make, op, prepare=prepare), "cpu", replays=2, seed=10, patterns=(0xFF,))
    assert result.verdict == V.PASS, result.detail
    prepared = [value for _, value in log]
    # probe eager B0, capture with A (10), then per replay: the replay on B_i, its eager call on B_i.
    assert prepared == [11.0, 10.0, 11.0, 11.0, 12.0, 12.0]


def test_prepare_after_capture_without_a_copy_is_stale_and_the_copy_fixes_it() -> None:
    rebinding = check(ENGINE_CASES["engine.plan_rebinds_metadata"], "cpu")
    assert rebinding.verdict == V.STALE_REPLAY
    assert "graph replay" in rebinding.detail
    assert check(ENGINE_CASES["engine.plan_copies_metadata"], "cpu").verdict == V.PASS


# ---------------------------------------------------------------------------------------------- buckets


def test_valid_rows_cover_the_most_padding_first() -> None:
    buckets = (1, 2, 4, 8)
    assert [valid_rows(buckets, 8, i) for i in range(3)] == [5, 6, 8]
    assert [valid_rows(buckets, 4, i) for i in range(3)] == [3, 4, 3]  # {3, 3, 4}: two choices
    assert {valid_rows(buckets, 1, i) for i in range(3)} == {1}


def test_padding_read_is_caught_in_both_patterns_with_the_bucket_named() -> None:
    result = check(ENGINE_CASES["engine.bucket_scale_reads_padding"], "cpu")
    failing = [r for r in result.rows if r.row_verdict != V.PASS]
    assert {r.pattern for r in failing} == {"0xff", "0x7f"}
    assert all(r.row_verdict == V.UNINITIALIZED for r in failing)
    assert all(r.detail.startswith("bucket 4, 3 valid rows: ") for r in failing)
    # 0xff padding is NaN (it reaches the valid rows); 0x7f padding is a huge finite value (it skews them).
    assert "padding rows poisoned" in failing[0].detail
    assert "depend on the padding rows" in failing[1].detail


def test_bucketed_graphs_that_go_stale_are_stale_replay() -> None:
    """A step counter kept in Python: each graph bakes the value it was captured with, eager moves on."""
    calls = [0]

    def make(seed: int, device: torch.device, *, rows: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(rows, 8, generator=g).to(device)}

    def op(x: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        return x + calls[0]

    result = check(Case("bucket_stale", make, op, buckets=(2, 4)), "cpu")
    assert result.verdict == V.STALE_REPLAY, result.detail
    assert result.detail.startswith("bucket 2, 1 valid rows: graph replay vs eager")


def test_every_bucket_is_replayed_with_every_seed() -> None:
    result = check(ENGINE_CASES["engine.bucket_scale_masks_padding"], "cpu", replays=3)
    assert result.verdict == V.PASS
    assert len(result.rows) == 2 * 3 * 4  # patterns x replays x buckets
    assert all(r.graph_vs_eager == 0.0 for r in result.rows)


# ---------------------------------------------------------------------------------------------- stateful


class _Counter(torch.nn.Module):
    """Output independent of its counter: only the state comparison can see the counter rebound."""

    def __init__(self, device: torch.device, in_place: bool) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1, device=device))
        self.in_place = in_place

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.in_place:
            self.calls.add_(1)
        else:
            self.calls = self.calls + 1
        return x * 3


@pytest.mark.parametrize(("in_place", "verdict"), [(True, V.PASS), (False, V.STALE_REPLAY)])
def test_module_state_is_compared_after_every_step(in_place: bool, verdict: str) -> None:
    case = Case(
        "counter",
        lambda seed, device: {"x": torch.full((3,), float(seed), device=device)},
        lambda module, x: module(x),
        make_module=lambda device: _Counter(device, in_place),
        steps=3,
    )
    result = check(case, "cpu", replays=2)
    assert result.verdict == verdict, result.detail
    if verdict != V.PASS:
        assert "module state 'calls'" in result.detail and "step 0" in result.detail
    else:
        assert len(result.rows) == 2 * 2 * 3  # patterns x sequences x steps


def test_step_seeds_differ_between_steps_and_sequences() -> None:
    seeds = {step_seed(b, t) for b in (1, 2, 3) for t in range(8)}
    assert len(seeds) == 24


def test_modules_that_start_different_are_a_case_error() -> None:
    counter = iter(range(100))

    def make_module(device: torch.device) -> torch.nn.Module:
        module = _Counter(device, True)
        module.calls.fill_(next(counter))
        return module

    case = Case(
        "unseeded",
        lambda seed, device: {"x": torch.full((3,), float(seed), device=device)},
        lambda module, x: module(x),
        make_module=make_module,
    )
    with pytest.raises(CaseError, match="make_module"):
        check(case, "cpu")


# ---------------------------------------------------------------------------------------------- definitions


def _make(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    return {"x": torch.full((2,), float(seed), device=device)}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"prepare": 3}, "prepare"),
        ({"buckets": 4}, "buckets"),
        ({"buckets": (2, 2)}, "buckets"),
        ({"buckets": (0, 1)}, "buckets"),
        ({"buckets": (1, 2)}, "make_inputs"),  # _make takes no rows=
        ({"steps": 3}, "steps"),
        ({"steps": -1}, "steps"),
        ({"make_module": "module"}, "make_module"),
    ],
)
def test_bad_engine_fields_name_the_field(fields: dict, field: str) -> None:
    with pytest.raises(CaseError, match=rf"\b{field}\b"):
        Case("bad", _make, lambda x: x, **fields)


def test_buckets_are_sorted() -> None:
    def make(seed: int, device: torch.device, *, rows: int) -> dict[str, torch.Tensor]:
        return {"x": torch.full((rows,), float(seed), device=device)}

    assert Case("sorted", make, lambda x: x, buckets=(8, 1, 4)).buckets == (1, 4, 8)


def test_reference_of_a_padded_case_sees_exactly_the_valid_rows() -> None:
    seen: list[int] = []

    def make(seed: int, device: torch.device, *, rows: int) -> dict[str, torch.Tensor]:
        return {"x": torch.full((rows, 2), float(seed), device=device)}

    def reference(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.shape[0])
        return x * 2

    result = check(Case("ref_rows", make, lambda x: x * 2, reference=reference, buckets=(2, 4)), "cpu")
    assert result.verdict == V.PASS, result.detail
    assert sorted(set(seen)) == [1, 2, 3, 4]  # bucket 2: 1 and 2 rows; bucket 4: 3 and 4 rows


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(ENGINE_CASES))
def test_engine_case_gets_its_expected_verdict_on_the_gpu(name: str) -> None:
    """The same pairs on real CUDA/HIP graphs: bucket graphs share one pool (GpuBackend.shared_pool)."""
    case = ENGINE_CASES[name]
    result = check(case, "gpu")
    assert result.verdict == case.expect, result.detail
    assert result.rows
