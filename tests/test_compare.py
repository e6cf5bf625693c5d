"""The comparison record: relative error as the seeds define it, NaN/Inf and poison counted before comparing."""

from __future__ import annotations

import math

import pytest
import torch

from graphsafe.compare import compare, default_threshold, poison_values


def test_relative_error_matches_seed_formula() -> None:
    """Method: error = max|out-ref| / (max|ref| + 1e-6) (FreeToken issue #350)."""
    ref = torch.tensor([1.0, -4.0, 2.0])
    out = torch.tensor([1.0, -4.0, 2.2])
    c = compare(out, ref, 0.02)
    assert c.error == pytest.approx(0.2 / (4.0 + 1e-6), rel=1e-6)
    assert not c.ok and c.mismatches == 1 and c.first_indices == [(2,)]


def test_nan_is_a_failure_never_a_wildcard() -> None:
    """Failure scenario: a kernel that writes nothing leaves NaN; max() over NaN must not pass."""
    ref = torch.ones(8)
    out = torch.full((8,), float("nan"))
    c = compare(out, ref, 1.0)  # even a huge threshold
    assert c.nonfinite == 8 and math.isinf(c.error) and not c.ok and c.uninitialized


def test_inf_where_reference_is_finite_fails() -> None:
    c = compare(torch.tensor([1.0, float("inf")]), torch.tensor([1.0, 2.0]), 0.5)
    assert c.nonfinite == 1 and not c.ok


def test_matching_infinities_are_equal() -> None:
    c = compare(torch.tensor([float("-inf"), 1.0]), torch.tensor([float("-inf"), 1.0]), 1e-5)
    assert c.ok and c.error == 0.0


def test_poison_pattern_values_are_counted() -> None:
    """0x7F bytes are a huge finite float: an unwritten element under that pattern is poison, not a big error."""
    poison = torch.full((4,), 0x7F, dtype=torch.uint8).view(torch.float32)
    out = torch.cat([torch.ones(3), poison])
    c = compare(out, torch.ones(4), 0.02)
    assert c.poisoned == 1 and c.uninitialized and not c.ok


def test_int_poison_and_bit_exact() -> None:
    ref = torch.tensor([3, 4, 5], dtype=torch.int32)
    assert compare(ref.clone(), ref, 0.0).ok
    stale = torch.tensor([3, 4, torch.iinfo(torch.int32).max], dtype=torch.int32)
    c = compare(stale, ref, 0.0)
    assert c.poisoned == 1 and not c.ok
    assert -1 in poison_values(torch.int32)


def test_bit_exact_mode_catches_one_ulp() -> None:
    ref = torch.tensor([1.0], dtype=torch.float32)
    out = torch.nextafter(ref, torch.tensor([2.0]))
    assert compare(out, ref, 1e-5).ok
    assert not compare(out, ref, 0.0).ok


def test_shape_mismatch_fails_with_detail() -> None:
    c = compare(torch.ones(3), torch.ones(4), 1e-5)
    assert not c.ok and "shape" in c.detail


def test_empty_tensors_compare_equal() -> None:
    assert compare(torch.ones(0, 5), torch.ones(0, 5), 1e-5).ok


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [(torch.bfloat16, 0.02), (torch.float32, 1e-5), (torch.float16, 1e-3), (torch.int64, 0.0)],
)
def test_default_thresholds(dtype: torch.dtype, expected: float) -> None:
    assert default_threshold(dtype) == expected
