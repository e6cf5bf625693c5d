"""`pytest cases/`: one test item per registered case, generated from the registry (CONVENTIONS.md #2).

Each item runs the same protocol as `python -m harness verify` and asserts the case's verdict equals its
expectation; `-n auto` spreads them over workers. GPU-only cases register only where a GPU exists.
"""

from __future__ import annotations

import pytest

from harness import REGISTRY, check
from harness.case import load_builtin_suite


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case_name" in metafunc.fixturenames:
        names = [case.name for case in load_builtin_suite()]
        metafunc.parametrize("case_name", names)


def test_case_gets_expected_verdict(case_name: str, graph_backend: str) -> None:
    """Method: the differential replay protocol. Expected: the verdict the case declares."""
    case = REGISTRY.get(case_name)
    result = check(case, graph_backend)
    assert result.verdict == case.expect, (
        f"{case.name}: verdict {result.verdict}, expected {case.expect}; {result.detail}"
    )
