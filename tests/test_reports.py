"""Tests of the report layer on synthetic results.csv data: summary.md, the CSV reader, fingerprint, progress.

No GPU and no protocol run: rows are written the way the runner writes them (one per case x pattern x replay,
empty cells where not applicable, `inf` where NaN/Inf was found), so each test fails if a report hides a
failure, drops the repro command, or turns a non-finite error into a number.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import types
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graphsafe.progress import Progress, format_eta
from graphsafe.reports import fingerprint, results, tables
from graphsafe.reports.markdown import render_summary
from graphsafe.reports.results import COLUMNS, read_results


def case_rows(
    case: str,
    family: str,
    verdict: str,
    expected: str,
    errors: list[tuple[Any, Any]],
    *,
    threshold: float = 0.02,
    seed_a: int = 1234,
    backend: str = "cpu",
    detail: str = "",
) -> list[dict[str, Any]]:
    """Rows of one case: both patterns x one replay per (eager, graph) pair; a case-level row if no pairs."""
    status = "ok" if verdict == expected else "FAIL"
    base = dict(
        case=case, family=family, backend=backend, device="cpu", seed_a=seed_a, graph_vs_eager="",
        threshold=threshold, bit_exact="", nonfinite="", poisoned="", verdict=verdict, expected=expected,
        status=status, detail=detail, capture_ms=1.0, replay_ms=0.1, eager_ms=0.2,
    )  # fmt: skip
    if not errors:
        return [
            base
            | dict(pattern="0xff", replay=-1, seed="", eager_error="", graph_error="", row_verdict=verdict)
        ]
    rows = []
    for pattern in ("0xff", "0x7f"):
        for replay, (eager, graph) in enumerate(errors):
            row_verdict = "pass" if float(graph) <= threshold else verdict
            rows.append(
                base
                | dict(pattern=pattern, replay=replay, seed=seed_a + 1 + replay, eager_error=eager,
                       graph_error=graph, row_verdict=row_verdict)
            )  # fmt: skip
    return rows


def synthetic_rows() -> list[dict[str, Any]]:
    """A run like the seed report: main's stale MoE replay fails, the fixed variant passes, plus controls."""
    return [
        *case_rows("moe.bf16_fixed", "moe", "pass", "pass", [(0.002539, 0.002539), (0.002068, 0.002068)]),
        *case_rows(
            "moe.bf16_main",
            "moe",
            "stale_replay",
            "pass",
            [(0.002539, 0.574833), (0.002068, 0.282794)],
            seed_a=4242,
            detail="graph differs | from eager",
        ),
        *case_rows("neg.stale_copy", "counterexamples", "stale_replay", "stale_replay", [(0.0, 0.9)]),
        *case_rows("gemm.poisoned_tail", "gemm", "uninitialized", "pass", [(1e-4, "inf")], threshold=1e-3),
        *case_rows("platform.node_kinds", "platform.conformance", "pass", "pass", [(0.0, 0.0)]),
        *case_rows(
            "platform.live_graphs", "platform.conformance", "timeout", "pass", [], detail="deadline 60s"
        ),
    ]


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    write_csv(tmp_path / "run" / "results.csv", synthetic_rows())
    return tmp_path / "run"


FP = {key: "n/a" for key in fingerprint.KEYS} | {"backend": "cpu", "torch": "2.13.0+cpu"}


# ---------------------------------------------------------------------------------------------- reader


def test_reader_keeps_not_applicable_apart_from_nonfinite(run_dir: Path) -> None:
    """Empty cell -> NaN (not applicable), `inf` -> inf; a run that found NaN must never read as "no error"."""
    df = read_results(run_dir)
    timeout_row = df[df["case"] == "platform.live_graphs"].iloc[0]
    assert math.isnan(timeout_row["graph_error"]) and timeout_row["replay"] == -1
    poisoned = df[df["case"] == "gemm.poisoned_tail"]
    assert poisoned["graph_error"].map(math.isinf).all()
    assert list(df.columns[: len(COLUMNS)]) == list(COLUMNS)


def test_literal_nan_cell_reads_as_found_not_as_missing() -> None:
    """A writer that prints "nan" instead of "inf" still reports a non-finite output."""
    assert results.parse_float("nan") == math.inf
    assert math.isnan(results.parse_float(""))
    with pytest.raises(ValueError):
        results.parse_float("garbage")


@given(st.floats(min_value=0.0, allow_nan=False) | st.just(math.inf))
def test_error_cells_round_trip_through_csv(value: float) -> None:
    """Any error the runner writes (repr of a float, or inf) reads back identically."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerow({"case": "c", "replay": 0, "graph_error": repr(value)})
    df = results.normalize(pd.read_csv(io.StringIO(text.getvalue()), dtype=str, keep_default_na=False))
    assert df["graph_error"].iloc[0] == value


def test_normalize_types_a_raw_frame_once_and_passes_its_own_result_through() -> None:
    """read_results, the renderers and rows_by_case all normalize their input; a frame normalize returned
    must come back untouched (not typed again), and a raw frame must still be typed."""
    raw = pd.DataFrame([{"case": "c", "replay": "0", "graph_error": "inf"}], dtype=str)
    typed = results.normalize(raw)
    assert typed is not raw and typed["graph_error"].iloc[0] == math.inf and typed["replay"].iloc[0] == 0
    assert results.normalize(typed) is typed
    assert results.normalize(raw)["graph_error"].dtype == float  # the raw input was not marked


def test_format_error_like_the_seed() -> None:
    assert tables.format_error(0.574833) == "0.574833"
    assert tables.format_error(math.inf) == "inf"
    assert tables.format_error(math.nan) == "—"


# ---------------------------------------------------------------------------------------------- summary.md


def test_summary_puts_failures_first_with_repro_commands(run_dir: Path) -> None:
    """Failing cases (stale replay, poisoned output, timeout) come before every passing case, each with its
    exact repro command carrying its recorded seed_a and backend."""
    text = render_summary(read_results(run_dir), FP)
    failures_at = text.index("## Failures (3)")
    passing_at = text.index("## Passing (3)")
    assert failures_at < passing_at
    for failing in ("moe.bf16_main", "gemm.poisoned_tail", "platform.live_graphs"):
        assert failures_at < text.index(failing) < passing_at
    for passing in ("moe.bf16_fixed", "neg.stale_copy", "platform.node_kinds"):
        assert text.index(passing) > passing_at
    assert "`graphsafe repro moe.bf16_main --seed 4242 --backend cpu`" in text
    assert "`graphsafe repro gemm.poisoned_tail --seed 1234 --backend cpu`" in text
    assert "repro moe.bf16_fixed" not in text


def test_summary_header_and_seed_style_tables(run_dir: Path) -> None:
    text = render_summary(read_results(run_dir), FP)
    first = text.splitlines()[0]
    assert "3/6 cases ok" in first and "backend cpu" in first and "device cpu" in first
    assert "| replay | pattern | seed | eager error | graph error | threshold | verdict |" in text
    assert "| 0 | 0xff | 4243 | 0.002539 | 0.574833 | 0.020000 | stale_replay |" in text
    assert "| 0 | 0xff | 1235 | 0.000100 | inf | 0.001000 | uninitialized |" in text
    assert "| case | 0xff |  | — | — | 0.020000 | timeout |" in text  # case-level row, errors n/a
    assert not re.search(r"\|\s*-?nan\s*\|", text, re.IGNORECASE)  # no table cell says nan
    assert "| torch | 2.13.0+cpu |" in text
    assert "### family `moe`" in text and "### family `platform.conformance`" in text


def test_summary_escapes_pipes_in_table_cells() -> None:
    """A `|` in free text (a runtime message) must not add a column to the table it sits in."""
    rows = case_rows("odd|name", "fam", "pass", "pass", [(0.0, 0.0)])
    text = render_summary(pd.DataFrame(rows), FP)
    assert "`odd\\|name`" in text


def test_summary_accepts_an_in_memory_dataframe_and_an_empty_run() -> None:
    """The runner may hand over its DataFrame with numeric columns; a killed run may have no rows."""
    df = pd.DataFrame(synthetic_rows())
    df["graph_error"] = [float(v) if v != "" else math.nan for v in df["graph_error"]]
    assert "## Failures (3)" in render_summary(df, FP)
    empty = render_summary(pd.DataFrame(columns=list(COLUMNS)), FP)
    assert "0/0 cases ok" in empty and "No results" in empty


def test_case_status_fails_when_verdict_and_expectation_disagree_even_if_status_says_ok() -> None:
    rows = case_rows("c", "f", "stale_replay", "pass", [(0.0, 0.5)])
    for row in rows:
        row["status"] = "ok"  # an inconsistent writer; the report errs towards showing the failure
    (only,) = tables.case_summaries(pd.DataFrame(rows))
    assert only.failed


# ---------------------------------------------------------------------------------------------- fingerprint


def test_fingerprint_has_every_key_as_a_string() -> None:
    fp = fingerprint.collect("cpu")
    assert list(fp) == list(fingerprint.KEYS)
    assert all(isinstance(v, str) and v and "\n" not in v for v in fp.values())
    assert fp["backend"] == "cpu"
    assert fp["python"].split()[-1].count(".") == 2


def test_fingerprint_never_raises_without_tools_git_or_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Empty PATH (no compilers, no git, no nvidia-smi), a repo root that is not a git tree, and a GPU query
    that raises: every piece becomes "n/a" / "not found" instead of an exception."""
    import torch

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(fingerprint, "_REPO_ROOT", tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def broken(*_: Any) -> Any:
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(torch.cuda, "get_device_properties", broken)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    fp = fingerprint.collect("gpu")
    assert list(fp) == list(fingerprint.KEYS)
    assert fp["nvcc"] == fp["hipcc"] == fp["gxx"] == "not found"
    assert fp["git_commit"] == "n/a" and fp["gpu_name"] == "n/a" and fp["gpu_arch"] == "n/a"
    assert fp["source_digest"] == "n/a"  # no sources under the (empty) root


def test_source_digest_follows_sources_not_build_outputs(tmp_path: Path) -> None:
    """Equal digests mean the same sources ran, whatever .git says: editing a source or adding one changes
    it; build outputs, caches and files outside harness/kernels/cases do not."""
    (tmp_path / "kernels" / "hip").mkdir(parents=True)
    (tmp_path / "harness").mkdir()
    (tmp_path / "kernels" / "hip" / "op.hip").write_text("__global__ void k() {}\n")
    (tmp_path / "harness" / "a.py").write_text("X = 1\n")
    first = fingerprint.source_digest(tmp_path)
    assert len(first) == 16
    (tmp_path / "harness" / "__pycache__").mkdir()
    (tmp_path / "harness" / "__pycache__" / "a.cpython-312.pyc").write_bytes(b"\0")
    (tmp_path / "kernels" / "gs_op.so").write_bytes(b"\x7fELF")
    (tmp_path / "README.md").write_text("notes\n")
    assert fingerprint.source_digest(tmp_path) == first
    (tmp_path / "harness" / "a.py").write_text("X = 2\n")
    second = fingerprint.source_digest(tmp_path)
    assert second != first
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "mine.py").write_text("")
    assert fingerprint.source_digest(tmp_path) not in (first, second)


def test_fingerprint_reads_gpu_arch_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """sm_XX from compute capability on CUDA; gcnArchName on ROCm builds."""
    import torch

    props = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, gcnArchName="")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _: props)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    fp = fingerprint.collect("gpu")
    assert (fp["gpu_name"], fp["gpu_arch"], fp["gpu_count"]) == ("NVIDIA H200", "sm_90", "1")
    props.gcnArchName = "gfx942:sramecc+:xnack-"
    monkeypatch.setattr(torch.version, "hip", "7.0.1", raising=False)
    assert fingerprint.collect("gpu")["gpu_arch"] == "gfx942:sramecc+:xnack-"


def test_fingerprint_write_read_round_trip(tmp_path: Path) -> None:
    fp = fingerprint.collect("cpu")
    path = fingerprint.write(tmp_path, fp)
    assert path.name == "fingerprint.json"
    assert json.loads(path.read_text()) == fp == fingerprint.read(tmp_path)
    assert fingerprint.read(tmp_path / "missing") == {}


def test_cpu_set_uses_taskset_ranges() -> None:
    assert fingerprint.format_cpu_set({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11 (7 CPUs)"


# ---------------------------------------------------------------------------------------------- progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TtyBuffer(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_plain_lines_when_not_a_tty() -> None:
    """In a CI log every case gets its own line with done/total, failures so far and an ETA."""
    out, clock = io.StringIO(), FakeClock()
    progress = Progress(4, out, clock=clock)
    clock.now += 10
    progress.update("a.first", ok=True)
    clock.now += 10
    progress.update("b.second", ok=False)
    progress.close()
    assert out.getvalue().splitlines() == [
        "[1/4] failures=0 eta=30s a.first",
        "[2/4] failures=1 eta=20s b.second",
    ]
    assert "\r" not in out.getvalue()


def test_progress_rewrites_in_place_on_a_tty() -> None:
    out, clock = TtyBuffer(), FakeClock()
    with Progress(2, out, clock=clock) as progress:
        clock.now += 90
        progress.update("a", ok=False)
        progress.update("b", ok=True)
    text = out.getvalue()
    assert text.startswith("\r[1/2] failures=1 eta=1m30s a")
    assert "\r[2/2] failures=1 eta=0s b" in text
    assert text.endswith("\n") and text.count("\n") == 1


def test_format_eta() -> None:
    assert [format_eta(s) for s in (0, 59.4, 61, 3725)] == ["0s", "59s", "1m01s", "1h02m"]


def test_repro_command_reloads_user_case_files(run_dir: Path) -> None:
    """A case from `--case my cases.py` reruns only if repro loads that file again (quoted for the shell)."""
    fp = FP | {tables.CASE_SOURCES_KEY: "'my cases.py' cases.moe"}
    text = render_summary(read_results(run_dir), fp)
    assert (
        "`graphsafe repro moe.bf16_main --case 'my cases.py' --case cases.moe --seed 4242 --backend cpu`"
        in text
    )
