"""Builds run ahead of the first case (graphsafe.native.build.plan / planned / prebuild) and their progress lines.

Method: fake builds (no compiler) that only finish when all of them have started (a barrier), so a serial
prebuild would fail the test instead of passing slowly; a failing build is reported, not raised; `planned`
picks the builds that the selected cases' modules reach through their imports, on the run's devices.
"""

from __future__ import annotations

import io
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from graphsafe.native import build
from graphsafe.progress import BuildProgress


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GRAPHSAFE_CACHE_DIR", str(tmp_path / "cache"))
    saved = dict(build._PLANNED)
    build._PLANNED.clear()
    yield
    build._PLANNED.clear()
    build._PLANNED.update(saved)


def test_prebuild_runs_the_builds_at_once_and_reports_failures() -> None:
    barrier = threading.Barrier(3, timeout=20)
    done: list[str] = []

    def ok(label: str) -> None:
        barrier.wait()  # raises BrokenBarrierError unless all three run at the same time
        done.append(label)

    def broken() -> None:
        barrier.wait()
        raise RuntimeError("g++ said no")

    build.plan("a cpu", lambda: ok("a"), device="cpu", owner="x")
    build.plan("b cpu", lambda: ok("b"), device="cpu", owner="x")
    build.plan("c cpu", broken, device="cpu", owner="x")
    events: list[tuple[str, str]] = []
    failures = build.prebuild(
        list(build._PLANNED.values()), jobs=3, on_event=lambda kind, b, s, e: events.append((kind, b.label))
    )
    assert sorted(done) == ["a", "b"]
    assert list(failures) == ["c cpu"] and "g++ said no" in str(failures["c cpu"])
    assert sorted(events) == sorted([(k, f"{n} cpu") for k in ("start", "done") for n in "abc"])


def _module(name: str, **values: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(values)
    sys.modules[name] = module
    return module


def test_planned_follows_the_cases_imports_and_the_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    ops = _module("gs_fake_kernels.ops")
    other = _module("gs_fake_kernels.other")

    def helper() -> None: ...

    helper.__module__ = "gs_fake_cases.helpers"
    _module("gs_fake_cases.helpers", ops=ops)
    _module("gs_fake_cases.suite", helper=helper)
    try:
        build.plan("ops cpu", lambda: None, device="cpu", owner=ops.__name__)
        build.plan("ops gpu", lambda: None, device="gpu", owner=ops.__name__)
        build.plan("other cpu", lambda: None, device="cpu", owner=other.__name__)
        labels = [b.label for b in build.planned(["gs_fake_cases.suite"], ["cpu"])]
        assert labels == ["ops cpu"]
        labels = [b.label for b in build.planned(["gs_fake_cases.suite"], ["cpu", "gpu"])]
        assert labels == ["ops cpu", "ops gpu"]
        assert build.planned(["not_imported_anywhere"], ["cpu"]) == []
    finally:
        for name in (
            "gs_fake_kernels.ops",
            "gs_fake_kernels.other",
            "gs_fake_cases.helpers",
            "gs_fake_cases.suite",
        ):
            sys.modules.pop(name, None)


def test_plan_validates_the_device() -> None:
    with pytest.raises(ValueError, match="device must be"):
        build.plan("x", lambda: None, device="tpu", owner="m")


def test_expected_seconds_come_from_the_last_cold_build() -> None:
    planned = build.PlannedBuild("moe_gemm cpu", "cpu", "m", lambda: None)
    assert build.expected_seconds(planned) == build._DEFAULT_SECONDS["cpu"]
    build._remember("moe_gemm cpu", 31.5)
    assert build.expected_seconds(planned) == 31.5


def test_build_progress_lines_carry_their_own_eta() -> None:
    now = [100.0]
    stream = io.StringIO()
    progress = BuildProgress({"moe_gemm cuda": 40.0, "moe_combine cpu": 8.0}, stream, clock=lambda: now[0])
    progress.started("moe_gemm cuda")
    progress.started("moe_combine cpu")
    now[0] += 8.0
    progress.finished("moe_combine cpu", 8.0)
    now[0] += 2.0
    progress.finished("moe_gemm cuda", 10.0, RuntimeError("nvcc failed"))
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[build 0/2] eta=40s compiling moe_gemm cuda")
    assert lines[2] == "[build 1/2] eta=32s moe_combine cpu 8.0s"
    assert lines[3].startswith("[build 2/2] eta=0s moe_gemm cuda FAILED after 10.0s: RuntimeError")
