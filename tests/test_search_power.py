"""Detection power of the shape search (harness/search.py) at its default counts, over seeds (nightly).

Method: a fake check that fails exactly at a bug's sizes (no torch work), searched with the default budget's
counts (170 sweep points, 30 Hypothesis examples; its wall-clock cap lifted, as in tests/test_search.py) in
size spaces of the suite's searched cases, a large space and spaces written with Hypothesis strategies; each
bug over seeds 0..9, one case name per bug and seed so that the example database cannot hand one bug's sizes to
the next. Expected: each bug found at least as often as reports/performance.md ("shape-search power") records,
and the default split of the counts finding the hard bugs at least as often as 150 sweep points with 50
examples (the split it replaced). The table for that row is printed:

    HYPOTHESIS_PROFILE=graphsafe-nightly python -m pytest tests/test_search_power.py -s -p no:cacheprovider
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import torch
from hypothesis import strategies as st

from graphsafe import Case, Result
from graphsafe import search as S
from graphsafe.backends import get_backend

pytestmark = pytest.mark.nightly

CPU = get_backend("cpu")
SEEDS = range(10)
DEFAULT_COUNTS = dataclasses.replace(S.PROFILES["default"], seconds=3600.0)
OLD_SPLIT = dataclasses.replace(DEFAULT_COUNTS, sweep=150, examples=50)

SPACES: dict[str, Mapping[str, object]] = {
    "combine": {"T": range(0, 97), "K": range(1, 9), "H": range(1, 265)},  # moe_combine's search
    "block": {"T": range(1, 257), "H": range(1, 129)},
    "routing": {"T": range(1, 65), "E": range(1, 17), "H": range(1, 33)},
    "gemm": {
        "T": range(2, 65),
        "E": range(2, 17),
        "topk": range(1, 5),
        "N": range(1, 161),
        "K": range(32, 289, 32),
    },
    "strategies": {"T": st.integers(1, 256), "H": st.integers(1, 128)},
    "large": {"T": range(1, 4097), "H": range(1, 8193)},
    "mapped": {"T": st.integers(1, 256).map(lambda v: 2 * v), "H": st.integers(1, 64)},
}
Bug = tuple[str, str, Callable[[dict[str, int]], bool], int]  # space, label, fails at, found at least (of 10)
BUGS: list[Bug] = [
    ("combine", "T%64==33", lambda s: s["T"] % 64 == 33, 10),
    ("combine", "H%8==7 and H>256", lambda s: s["H"] % 8 == 7 and s["H"] > 256, 10),
    ("combine", "H==129", lambda s: s["H"] == 129, 10),
    ("combine", "T>=65 and K==8", lambda s: s["T"] >= 65 and s["K"] == 8, 10),
    ("combine", "T>0 and H==129", lambda s: s["T"] > 0 and s["H"] == 129, 10),
    ("combine", "T>0 and H%8==7 and H>256", lambda s: s["T"] > 0 and s["H"] % 8 == 7 and s["H"] > 256, 10),
    ("combine", "T>0 and K==8", lambda s: s["T"] > 0 and s["K"] == 8, 10),
    (
        "combine",
        "T%32==1 and T>1 and H%8==3",
        lambda s: s["T"] % 32 == 1 and s["T"] > 1 and s["H"] % 8 == 3,
        1,
    ),
    ("combine", "T%64==33 and H%8==0", lambda s: s["T"] % 64 == 33 and s["H"] % 8 == 0, 10),
    ("combine", "K>=2 and H%64==63", lambda s: s["K"] >= 2 and s["H"] % 64 == 63, 10),
    (
        "combine",
        "T%16==15 and K%2==0 and H%8==0",
        lambda s: s["T"] % 16 == 15 and s["K"] % 2 == 0 and s["H"] % 8 == 0,
        10,
    ),
    ("block", "T%128==97", lambda s: s["T"] % 128 == 97, 10),
    ("block", "T%64==33", lambda s: s["T"] % 64 == 33, 10),
    ("block", "T==256", lambda s: s["T"] == 256, 10),
    ("block", "H%64==63", lambda s: s["H"] % 64 == 63, 10),
    ("block", "T%64==33 and H%8==0", lambda s: s["T"] % 64 == 33 and s["H"] % 8 == 0, 10),
    ("block", "T%16==7 and H%16==9", lambda s: s["T"] % 16 == 7 and s["H"] % 16 == 9, 4),
    ("routing", "E>T and E%4==3", lambda s: s["E"] > s["T"] and s["E"] % 4 == 3, 10),
    ("routing", "T==64", lambda s: s["T"] == 64, 10),
    ("routing", "H==32 and E==16", lambda s: s["H"] == 32 and s["E"] == 16, 10),
    ("routing", "T%32==17 and H%8==0", lambda s: s["T"] % 32 == 17 and s["H"] % 8 == 0, 10),
    ("gemm", "N%64==1 and N>64", lambda s: s["N"] % 64 == 1 and s["N"] > 64, 10),
    ("gemm", "T%16==15 and N%8==0", lambda s: s["T"] % 16 == 15 and s["N"] % 8 == 0, 10),
    ("gemm", "K==288 and topk>=2", lambda s: s["K"] == 288 and s["topk"] >= 2, 10),
    ("strategies", "T%64==33", lambda s: s["T"] % 64 == 33, 10),
    ("strategies", "T%128==97", lambda s: s["T"] % 128 == 97, 10),
    ("strategies", "H%64==63 and T>1", lambda s: s["H"] % 64 == 63 and s["T"] > 1, 10),
    ("large", "T%64==33", lambda s: s["T"] % 64 == 33, 10),
    ("large", "T%128==97", lambda s: s["T"] % 128 == 97, 1),
    ("large", "H%256==255", lambda s: s["H"] % 256 == 255, 10),
    ("large", "T%1024==513", lambda s: s["T"] % 1024 == 513, 10),
    ("large", "T%64==33 and H%8==0", lambda s: s["T"] % 64 == 33 and s["H"] % 8 == 0, 10),
    ("large", "H>4096 and H%16==1", lambda s: s["H"] > 4096 and s["H"] % 16 == 1, 10),
    ("mapped", "T%128==66", lambda s: s["T"] % 128 == 66, 10),
    ("mapped", "T%256==130", lambda s: s["T"] % 256 == 130, 10),
    ("mapped", "T%64==34 and H%8==0", lambda s: s["T"] % 64 == 34 and s["H"] % 8 == 0, 10),
]

BUG_INDEX = {(label, space): index for index, (space, label, _, _) in enumerate(BUGS)}


@pytest.fixture(autouse=True)
def _private_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(S.DATABASE_ENV, str(tmp_path / "search-db"))
    for name in (S.EXAMPLES_ENV, S.SECONDS_ENV):
        monkeypatch.delenv(name, raising=False)


def _no_inputs(seed: int, device: torch.device, **sizes: int) -> dict[str, torch.Tensor]:
    return {}


def _power(
    space: str, label: str, fails_at: Callable[[dict[str, int]], bool], budget: S.Budget
) -> tuple[int, list[int]]:
    """(seeds whose search found the bug, sizes checked in each search that found it)."""
    found, checked = 0, []
    for seed in SEEDS:
        name = f"power-{space}-{BUG_INDEX[label, space]}-{budget.sweep}-{seed}"
        case = Case(name, _no_inputs, lambda: None, sizes=SPACES[space])

        def fake_check(bound: Case) -> Result:
            sizes = bound.make_inputs.keywords  # type: ignore[attr-defined]  (search.bind's partial)
            verdict = "uninitialized" if fails_at(sizes) else "pass"
            return Result(case=bound.name, expected="pass", verdict=verdict, backend="cpu")

        result = S.search(case, CPU, fake_check, seed=seed, budget=budget)
        if result.verdict != "pass":
            found += 1
            checked.append(int(re.search(r"(\d+) sizes checked", result.detail).group(1)))  # type: ignore[union-attr]
    return found, checked


def test_default_counts_find_each_listed_bug_as_often_as_recorded() -> None:
    short = []
    print(f"\n{'space':<11}{'bug':<34}found   median sizes checked when found")
    for space, label, fails_at, expected in BUGS:
        found, checked = _power(space, label, fails_at, DEFAULT_COUNTS)
        median = statistics.median(checked) if checked else "-"
        print(f"{space:<11}{label:<34}{found:>2}/{len(SEEDS)}   {median}")
        if found < expected:
            short.append(f"{space} {label}: {found}/{len(SEEDS)}, recorded {expected}")
    assert not short, "found less often than recorded:\n" + "\n".join(short)


@pytest.mark.parametrize(
    ("space", "label", "fails_at"),
    [
        ("large", "T%64==33", lambda s: s["T"] % 64 == 33),
        ("large", "T%64==33 and H%8==0", lambda s: s["T"] % 64 == 33 and s["H"] % 8 == 0),
    ],
)
def test_default_split_finds_hard_bugs_at_least_as_often_as_150_50(
    space: str, label: str, fails_at: Callable
) -> None:
    default, _ = _power(space, label, fails_at, DEFAULT_COUNTS)
    old, _ = _power(space, label, fails_at, OLD_SPLIT)
    print(f"\n{space} {label}: 170/30 {default}/{len(SEEDS)}, 150/50 {old}/{len(SEEDS)}")
    assert default >= old
