"""The real-world conformance suite (cases/real_world) on the CPU backend: every case gets its expected verdict.

Each case calls a public library the way its users do and states in its note why its verdict is what it is;
both directions are covered (capture-safe forms must pass, unsafe forms must be caught). Cases that need a
GPU skip here with their requirement's reason; modules whose library is missing skip with theirs.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings

import pytest

import graphsafe.cases.real_world as real_world
from graphsafe import REGISTRY, check
from graphsafe.requirements import unmet

MODULES = sorted(
    info.name for info in pkgutil.iter_modules(real_world.__path__, prefix="graphsafe.cases.real_world.")
)
for _module in MODULES:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", real_world.RealWorldSkipWarning)  # reported by the tests below
        importlib.import_module(_module)
CASES = [
    c.name for c in REGISTRY.cases() if REGISTRY.origin(c.name).startswith("graphsafe.cases.real_world.")
]


@pytest.mark.parametrize("module", MODULES)
def test_each_module_registers_cases_or_says_why_not(module: str) -> None:
    registered = [n for n in CASES if REGISTRY.origin(n) == module]
    if module in real_world.SKIPPED:
        assert not registered
        pytest.skip(f"{module}: {real_world.SKIPPED[module]}")
    assert registered, f"{module} registered no cases and recorded no reason in SKIPPED"


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


@pytest.mark.parametrize("probe", ["optional_library", "installed_library"])
def test_a_missing_library_is_skipped_with_its_reason(probe: str) -> None:
    name = "graphsafe_no_such_library_for_the_test"
    with pytest.warns(real_world.RealWorldSkipWarning, match=name):
        assert not getattr(real_world, probe)(name, "graphsafe.cases.real_world.test_probe")
    try:
        assert name in real_world.SKIPPED["graphsafe.cases.real_world.test_probe"]
    finally:
        del real_world.SKIPPED["graphsafe.cases.real_world.test_probe"]


def test_a_library_lacking_a_feature_is_skipped_naming_its_version() -> None:
    """transformers 5.17 has no StaticLayer.crop: its decode cases would raise inside the op, which the
    protocol would report as the op's own eager failure. They are skipped, with the version named."""
    import types

    old = types.ModuleType("oldlib")
    old.__version__ = "0.1"  # type: ignore[attr-defined]
    with pytest.warns(real_world.RealWorldSkipWarning, match=r"oldlib 0\.1 has no Layer\.crop"):
        real_world.lacks_feature("graphsafe.cases.real_world.test_probe", old, "Layer.crop")
    try:
        assert "oldlib 0.1 has no Layer.crop" in real_world.SKIPPED["graphsafe.cases.real_world.test_probe"]
    finally:
        del real_world.SKIPPED["graphsafe.cases.real_world.test_probe"]


def test_an_installed_library_is_found_without_importing_it() -> None:
    import sys

    assert "this" not in sys.modules  # the standard library's Zen, which nothing here imports
    assert real_world.installed_library("this", "graphsafe.cases.real_world.test_probe")
    assert "this" not in sys.modules and "graphsafe.cases.real_world.test_probe" not in real_world.SKIPPED


@pytest.mark.parametrize("part", sorted(k for k in real_world.SKIPPED if ":" in k) or ["(none)"])
def test_cases_left_out_of_a_module_are_reported(part: str) -> None:
    """Parts of a module not registered here (GPU-only cases, hub-only implementations), with the reason."""
    if part == "(none)":
        return
    pytest.skip(f"{part}: {real_world.SKIPPED[part]}")
