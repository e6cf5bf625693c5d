"""The real-world conformance suite (cases/real_world) on the CPU backend: every case gets its expected verdict.

Each case calls a public library the way its users do and states in its note why its verdict is what it is;
both directions are covered (capture-safe forms must pass, unsafe forms must be caught). Cases that need a
GPU, or a library that is missing or too old here, skip with their requirement's reason.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import graphsafe.cases.real_world as real_world
from graphsafe import REGISTRY, check
from graphsafe.requirements import unmet

MODULES = sorted(
    info.name for info in pkgutil.iter_modules(real_world.__path__, prefix="graphsafe.cases.real_world.")
)
for _module in MODULES:
    importlib.import_module(_module)
CASES = [
    c.name for c in REGISTRY.cases() if REGISTRY.origin(c.name).startswith("graphsafe.cases.real_world.")
]


@pytest.mark.parametrize("module", MODULES)
def test_each_module_registers_its_cases_whatever_is_installed(module: str) -> None:
    """A module registers its cases whether or not its library is installed (its `requires` names it), so a
    run where it is missing lists them as skipped instead of losing them."""
    assert [n for n in CASES if REGISTRY.origin(n) == module], f"{module} registered no cases"


@pytest.mark.parametrize("case_name", CASES)
def test_real_world_case_gets_its_expected_verdict_on_cpu(case_name: str) -> None:
    case = REGISTRY.get(case_name)
    reason = unmet(case.requires, "cpu")
    if reason:
        pytest.skip(reason)
    assert case.note.startswith(f"expected {case.expect}"), "the note must justify the expected verdict"
    result = check(case, "cpu")
    assert result.verdict == case.expect, (
        f"{case_name}: {result.verdict}, expected {case.expect}; {result.detail}"
    )


def test_both_directions_are_covered() -> None:
    """A suite of only passing cases could not show a miss; one of only failures could not show a false alarm."""
    expects = {REGISTRY.get(n).expect for n in CASES}
    assert {"pass", "capture_sync"} <= expects


def test_library_cases_name_their_library_in_requires() -> None:
    """Method: the cases of the modules that call an optional library. Expected: each requires it, so where
    it is missing the skip reason names it; the decode cases name the feature transformers 5.17 lacks."""
    by_module = {
        "graphsafe.cases.real_world.transformers_moe": "import:transformers",
        "graphsafe.cases.real_world.transformers_decode": "import:transformers.cache_utils.StaticLayer.crop",
        "graphsafe.cases.real_world.torch_geometric_scatter": "import:torch_geometric",
    }
    for module, requirement in by_module.items():
        names = [n for n in CASES if REGISTRY.origin(n) == module]
        assert names and all(requirement in REGISTRY.get(n).requires for n in names), (module, names)


@pytest.mark.parametrize("part", sorted(k for k in real_world.SKIPPED if ":" in k) or ["(none)"])
def test_cases_left_out_of_a_module_are_reported(part: str) -> None:
    """Parts of a module not registered here (GPU-only cases, hub-only implementations), with the reason."""
    if part == "(none)":
        return
    pytest.skip(f"{part}: {real_world.SKIPPED[part]}")
