"""Every detector bites: each built-in negative control gets its failure verdict, each fixed twin passes.

Method: run the protocol on the CPU backend for the controls in cases/controls.py. A detector that stopped
working turns its control's verdict into `pass` and fails here.
"""

from __future__ import annotations

import pytest
import torch

from graphsafe import REGISTRY, Case, check
from graphsafe.suites import load_default_suites

load_default_suites()
CONTROLS = {
    "control_item_in_routing": "capture_sync",
    "control_empty_output_tail": "uninitialized",
    "control_python_cached_value": "stale_replay",
    "control_returns_nan": "uninitialized",
    "control_returns_nan_with_reference": "uninitialized",
    "control_modifies_input": "eager_mismatch",
    "control_output_shared_across_live_graphs": "stale_replay",
    "control_one_of_three_outputs_stale": "stale_replay",
    "control_bf16_layer_norm_unbiased_variance": "eager_mismatch",
    "control_int_ids_off_by_one_under_tolerance": "eager_mismatch",
    "control_boolean_mask_index": "capture_sync",
}
FIXED = [
    "fixed_scatter_add_routing",
    "fixed_zeroed_output",
    "fixed_recomputed_value",
    "fixed_log",
    "fixed_no_input_write",
    "fixed_bf16_matmul",
    "fixed_output_per_call",
    "fixed_three_outputs_recomputed",
    "fixed_bf16_layer_norm",
    "fixed_int_ids_under_tolerance",
    "fixed_where_instead_of_mask_index",
]


@pytest.mark.parametrize(("name", "verdict"), sorted(CONTROLS.items()))
def test_negative_control_is_caught(name: str, verdict: str) -> None:
    result = check(REGISTRY.get(name), "cpu")
    assert result.verdict == verdict, result.detail
    assert result.verdict != "pass"


@pytest.mark.parametrize("name", FIXED)
def test_fixed_twin_passes(name: str) -> None:
    result = check(REGISTRY.get(name), "cpu")
    assert result.verdict == "pass", result.detail


def test_stale_replay_rows_show_graph_error_over_threshold_and_eager_within() -> None:
    """The seed-000 table shape: eager error small, graph error large, on every fresh-input replay."""
    result = check(REGISTRY.get("control_python_cached_value"), "cpu", replays=3)
    replay_rows = [r for r in result.rows if r.replay >= 0]
    assert len(replay_rows) == 6  # 2 patterns x 3 replays
    for row in replay_rows:
        assert row.eager_error is not None and row.threshold is not None and row.graph_error is not None
        assert row.eager_error <= row.threshold < row.graph_error
        assert row.row_verdict == "stale_replay"


def test_bf16_rounding_is_real_and_within_threshold() -> None:
    """The bf16 twin is not vacuous: its error against the float64 reference is nonzero, and passes."""
    result = check(REGISTRY.get("fixed_bf16_matmul"), "cpu")
    errors = [r.eager_error for r in result.rows if r.eager_error is not None]
    assert result.verdict == "pass"
    assert 0 < max(errors) < 0.02


def test_one_stale_output_of_three_is_the_only_wrong_one() -> None:
    """The control needs every output compared: its first and last outputs alone pass."""
    control = REGISTRY.get("control_one_of_three_outputs_stale")

    def outer_outputs(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        first, _, last = control.op(x=x, w=w)
        return first, last

    def outer_reference(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert control.reference is not None
        first, _, last = control.reference(x=x, w=w)
        return first, last

    case = Case(
        name="t_outer_outputs", make_inputs=control.make_inputs, op=outer_outputs, reference=outer_reference
    )
    assert check(case, "cpu").verdict == "pass"


def test_bf16_control_error_lies_between_the_threshold_and_ten_times_it() -> None:
    """A check of gross errors only (a threshold ten times bf16's) would pass the control."""
    result = check(REGISTRY.get("control_bf16_layer_norm_unbiased_variance"), "cpu")
    errors = [r.eager_error for r in result.rows if r.eager_error is not None]
    assert result.verdict == "eager_mismatch"
    assert min(errors) > 0.02 and max(errors) < 0.2


def test_int_control_error_is_inside_the_declared_float_tolerance() -> None:
    """The off-by-one ids would pass under the case's float tolerance: only bit-exact integers fail them."""
    case = REGISTRY.get("control_int_ids_off_by_one_under_tolerance")
    result = check(case, "cpu")
    errors = [r.eager_error for r in result.rows if r.eager_error is not None]
    assert result.verdict == "eager_mismatch" and "bit-exact" in result.detail
    assert case.tolerance is not None and 0 < max(errors) < case.tolerance
