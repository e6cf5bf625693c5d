"""`pytest cases/`: one test item per registered case, generated from the registry, so a
failing case shows up under its own name.

Each item runs the same protocol as `graphsafe verify` and asserts the case's verdict equals its
expectation; `-n auto` spreads them over workers. Cases that expect `crash` or `timeout` kill or stall the
process running them by design, so they go through the isolated runner (a worker process) instead of this
one. A case whose `requires` this machine and backend do not meet skips with the reason, as `verify` skips it.
"""

from __future__ import annotations

import pytest

from graphsafe import REGISTRY, Result, check
from graphsafe.requirements import unmet
from graphsafe.runner import RunOptions, run_isolated
from graphsafe.suites import default_suites, load_default_suites

PROCESS_KILLING_VERDICTS = ("crash", "timeout")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case_name" in metafunc.fixturenames:
        names = [case.name for case in load_default_suites()]
        metafunc.parametrize("case_name", names)


def test_case_gets_expected_verdict(case_name: str, graph_backend: str) -> None:
    """Method: the differential replay protocol. Expected: the verdict the case declares."""
    case = REGISTRY.get(case_name)
    reason = unmet(case.requires, graph_backend)
    if reason:
        pytest.skip(reason)
    if case.expect in PROCESS_KILLING_VERDICTS:
        results: list[Result] = []
        run_isolated(
            [case],
            [],
            RunOptions(backend=graph_backend),
            jobs=1,
            devices=0,
            on_result=results.append,
            suites=default_suites(),
        )
        result = results[0]
    else:
        result = check(case, graph_backend)
    assert result.verdict == case.expect, (
        f"{case.name}: verdict {result.verdict}, expected {case.expect}; {result.detail}"
    )
