"""The public Case contract: bad definitions get one clear error naming the case and the field."""

from __future__ import annotations

import pytest
import torch

from harness import Case, CaseError, register
from harness.case import Registry


def _inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    return {"x": torch.randn(2)}


@pytest.mark.parametrize(
    ("kwargs", "field", "fragment"),
    [
        ({"name": ""}, "name", "non-empty"),
        ({"name": "has space"}, "name", "whitespace"),
        ({"op": 3}, "op", "callable"),
        ({"make_inputs": None}, "make_inputs", "callable"),
        ({"reference": "torch.add"}, "reference", "callable"),
        ({"tolerance": "0.02"}, "tolerance", "finite float"),
        ({"tolerance": -1.0}, "tolerance", "finite float"),
        ({"tolerance": True}, "tolerance", "finite float"),
        ({"expect": "passs"}, "expect", "allowed values: crash, timeout"),
        ({"static_inputs": "x"}, "static_inputs", "tuple of input names"),
        ({"bit_exact": 1}, "bit_exact", "True or False"),
        ({"deadline": 0}, "deadline", "seconds"),
    ],
)
def test_invalid_field_names_case_and_field(kwargs, field, fragment) -> None:  # type: ignore[no-untyped-def]
    base = {"name": "my_case", "make_inputs": _inputs, "op": lambda x: x}
    base.update(kwargs)
    with pytest.raises(CaseError) as info:
        Case(**base)
    message = str(info.value)
    assert f"field {field!r}" in message and fragment in message
    assert info.value.field == field


def test_missing_required_field_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="make_inputs"):
        Case(name="x", op=lambda x: x)  # type: ignore[call-arg]


def test_registry_rejects_duplicate_names() -> None:
    registry = Registry()
    registry.add(Case(name="dup", make_inputs=_inputs, op=lambda x: x))
    with pytest.raises(CaseError, match="already registered"):
        registry.add(Case(name="dup", make_inputs=_inputs, op=lambda x: x))


def test_register_returns_the_case_and_defaults() -> None:
    case = register(Case(name="contract_defaults_case", make_inputs=_inputs, op=lambda x: x))
    assert case.expect == "pass" and case.reference is None and case.tolerance is None
    assert case.family == "test_case_contract"
