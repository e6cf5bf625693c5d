"""results.csv says what the run computed: the writer's verdict, expected and status columns, and `verify`'s
read-back of its own results.csv (a disagreement is an internal error, exit 3, naming the case and column).

Every other test reads results from memory, where a writer that always wrote `ok` would go unseen.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest
import torch

from graphsafe import Case, check
from graphsafe.records import Result
from graphsafe.reports import results as results_module
from graphsafe.reports.atomic import ReportWriteError
from graphsafe.reports.results import (
    ResultsWriter,
    check_written,
    disagreements,
    read_results,
    writer_self_check,
)


def _make(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    return {"x": torch.randn(8, generator=torch.Generator().manual_seed(seed)).to(device)}


_cache: dict[str, torch.Tensor] = {}


def _written_once(x: torch.Tensor) -> torch.Tensor:
    if "out" not in _cache:
        _cache["out"] = x * 2
    return _cache["out"]


def test_writer_records_the_computed_verdict_expected_and_status(tmp_path: Path) -> None:
    """A case expected to pass that fails: verdict is what it got, expected what it declared, status FAIL;
    a passing case: status ok."""
    _cache.clear()
    failing = check(Case(name="t.fails", make_inputs=_make, op=_written_once), "cpu", replays=1)
    passing = check(Case(name="t.passes", make_inputs=_make, op=lambda x: x * 2), "cpu", replays=1)
    assert (failing.verdict, failing.expected, passing.verdict) == ("uninitialized", "pass", "pass")
    writer = ResultsWriter(tmp_path, planned=["t.fails", "t.passes"])
    writer.add(failing)
    writer.add(passing)
    writer.close()
    df = read_results(tmp_path)
    by_case = {name: rows for name, rows in df.groupby("case")}
    assert set(by_case["t.fails"]["verdict"]) == {"uninitialized"}
    assert set(by_case["t.fails"]["expected"]) == {"pass"}
    assert set(by_case["t.fails"]["status"]) == {"FAIL"}
    assert set(by_case["t.passes"]["status"]) == {"ok"}
    assert set(by_case["t.passes"]["verdict"]) == {"pass"}
    assert disagreements(tmp_path, [failing, passing]) == []


def test_disagreements_name_the_case_and_column(tmp_path: Path) -> None:
    _cache.clear()
    failing = check(Case(name="t.fails", make_inputs=_make, op=_written_once), "cpu", replays=1)
    unwritten = check(Case(name="t.unwritten", make_inputs=_make, op=lambda x: x * 2), "cpu", replays=1)
    writer = ResultsWriter(tmp_path, planned=["t.fails"])
    writer.add(failing)
    writer.close()
    path = tmp_path / "results.csv"
    text = path.read_text()
    path.write_text(text.replace(",uninitialized,pass,FAIL,", ",pass,pass,ok,"))
    found = disagreements(tmp_path, [failing])
    assert len(found) == 1, found
    assert found[0].startswith("case t.fails (row 1 of 2): ")
    assert "column verdict: 'pass' written, 'uninitialized' computed" in found[0]
    assert "column status: 'ok' written, 'FAIL' computed" in found[0]
    path.write_text(text)
    assert disagreements(tmp_path, [failing, unwritten]) == ["case t.unwritten: 0 rows written, 2 computed"]
    assert disagreements(tmp_path, []) == ["case t.fails: 2 rows written, none computed"]


CASES = textwrap.dedent(
    """
    import torch
    from graphsafe import Case, register

    def make(seed, device):
        return {"x": torch.randn(8, generator=torch.Generator().manual_seed(seed)).to(device)}

    _cache = {}

    def written_once(x):
        if "out" not in _cache:
            _cache["out"] = x * 2
        return _cache["out"]

    register(Case(name="t.written_once", make_inputs=make, op=written_once, reference=lambda x: x * 2))
    register(Case(name="t.doubles", make_inputs=make, op=lambda x: x * 2))
    """
)


def test_verify_exits_3_when_its_results_csv_disagrees_with_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A writer that writes `ok` whatever the status: verify reads results.csv back and fails, naming the case
    and the column, instead of exiting 1 with a file that a CI gate would read as green."""
    from graphsafe import cli

    cases = tmp_path / "cases_readback.py"
    cases.write_text(CASES)
    argv = ["verify", "--backend", "cpu", "--case", str(cases), "--no-isolate", "--replays", "1"]
    assert cli.main([*argv, "--report-dir", str(tmp_path / "honest")]) == 1
    capsys.readouterr()

    real_cell_text = results_module.cell_text
    monkeypatch.setattr(
        results_module, "cell_text", lambda value: "ok" if value == "FAIL" else real_cell_text(value)
    )
    code = cli.main([*argv, "--report-dir", str(tmp_path / "lying")])
    err = capsys.readouterr().err
    assert code == 3, err
    complaints = [line for line in err.splitlines() if "internal error" in line]
    results_csv = tmp_path / "lying" / "results.csv"
    assert complaints == [
        f"graphsafe: internal error: {results_csv} disagrees with the run: case t.written_once (row 1 of 2): "
        "column status: 'ok' written, 'FAIL' computed",
        "graphsafe: internal error: the results writer's self-check (a known failure written and read back): "
        "case graphsafe.writer_check (row 1 of 1): column status: 'ok' written, 'FAIL' computed",
    ]


def test_the_writer_self_check_fails_a_writer_that_writes_the_expected_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run where every case is as expected cannot show such a writer; the known failure does, and leaves
    nothing behind in the folder."""
    assert check_written(tmp_path, []) == []
    assert list(tmp_path.iterdir()) == []
    real_add = ResultsWriter.add

    def add_as_expected(self: ResultsWriter, result: Result) -> None:
        real_add(self, dataclasses.replace(result, verdict=result.expected))
        self.results[-1] = result  # the writer's own record keeps what was computed

    monkeypatch.setattr(ResultsWriter, "add", add_as_expected)
    assert check_written(tmp_path, []) == [
        "the results writer's self-check (a known failure written and read back): case graphsafe.writer_check "
        "(row 1 of 1): column verdict: 'pass' written, 'stale_replay' computed; column status: 'ok' written, "
        "'FAIL' computed"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_self_check_that_cannot_write_is_an_io_fault_not_a_disagreement(tmp_path: Path) -> None:
    """A full disk or a vanished folder is the environment's fault: ReportWriteError (exit 74), naming the path."""
    with pytest.raises(ReportWriteError, match=r"could not write .*missing"):
        writer_self_check(tmp_path / "missing")
