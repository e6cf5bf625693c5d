"""The public Case contract: bad definitions get one clear error naming the case and the field."""

from __future__ import annotations

import pytest
import torch

import graphsafe
from graphsafe import Case, CaseError, register
from graphsafe.backends import get_backend
from graphsafe.case import Registry


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


_CAPTURE_SEEN: list[bool] = []


@torch.library.custom_op("graphsafe_contract_test::capture_probe", mutates_args=())
def _capture_probe(x: torch.Tensor) -> torch.Tensor:
    _CAPTURE_SEEN.append(graphsafe.is_capturing())
    return x * 2


@_capture_probe.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_is_capturing_is_true_only_while_the_cpu_recorder_records() -> None:
    """Method: a custom op records graphsafe.is_capturing() from inside its body; capture it on the cpu backend
    (one eager warm-up, then the recorded call) and replay it.
    Failure scenario: a check that looks only at the dispatch-mode stack is False inside a custom op's body
    (the dispatcher pops the mode while the op runs), so a kernel would share eager state with its graph;
    the negative direction: replay and plain eager calls must not count as capture."""
    _CAPTURE_SEEN.clear()
    assert graphsafe.is_capturing() is False
    graph = get_backend("cpu").capture(lambda: _capture_probe(torch.ones(3)), warmup=1)
    assert _CAPTURE_SEEN == [False, True]  # warm-up eager, then the recorded call
    assert graphsafe.is_capturing() is False
    graph.replay()
    _capture_probe(torch.ones(3))
    assert _CAPTURE_SEEN == [False, True, False, False]


def test_default_suites_come_from_configuration(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Method: graphsafe's own graphsafe.suites entry point (an editable install's too) names
    `graphsafe.cases`; with no entry point there is no default suite (the CLI then asks for --case)."""
    from graphsafe import suite_config

    assert suite_config.default_suites() == ["graphsafe.cases"]
    monkeypatch.setattr(suite_config.importlib.metadata, "entry_points", lambda group: [])
    assert suite_config.default_suites() == []
