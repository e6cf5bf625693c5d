"""Counterexample modules: each reproduces its public report on the cpu backend by one command, and the
runner says so honestly (a module that reproduces nothing, or a line not as the report says, is not exit 0).

The per-module runs go through `graphsafe repro` in a subprocess, as a user would; they use
`--no-isolate` (the cases run in that subprocess) to keep the suite short, and one test runs the default
isolated path.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from graphsafe import reproduce

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "cases" / "counterexamples" / "_template.py"
MODULES = reproduce.counterexample_names()


def harness(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, "-m", "graphsafe", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_there_are_the_three_seeds_and_at_least_five_more_reports():
    seeds = {"issue350", "moe_combine_vllm_cpp_509", "moe_gemm_empty_output", "moe_gemm_item_routing"}
    assert seeds <= set(MODULES)
    urls = {reproduce.load(name).report.url for name in MODULES}
    assert len(urls) >= 3 + 5, urls  # aiter #5831's three defects share one report
    assert "_template" not in MODULES  # the template stays out of the suite and out of the list


@pytest.mark.parametrize("name", MODULES)
def test_module_opening_note_names_its_report(name):
    loaded = reproduce.load(name)
    note = loaded.module.__doc__ or ""
    assert loaded.report.url in note, f"{name}: the opening note must give the report's link"
    assert re.search(r"\d{4}-\d{2}-\d{2}", note), f"{name}: the opening note must give the report's date"


# The cells each of these modules' table rows must print after the row's label, on either backend: the
# buggy and the fixed verdict (and, for a measured row, its figures). A module whose variants swapped or
# whose buggy twin stopped failing prints other cells, even where its conclusion still says REPRODUCED.
ROW_CELLS = {
    "dion_108_baked_weight_decay": {
        "scheduled": ("stale_replay", "pass"),
        "constant 0.01": ("pass", "pass"),
    },
    "lmdeploy_4569_stale_padding_blocks": {"padded decode batch": ("uninitialized", "pass")},
    "megatron_5697_frozen_sampling_offset": {
        "sampler": ("stale_replay", "pass"),
        "by-value seed and offset (captured FlashInfer sampler)": ("8", "1"),
        "graph-read generator state (#5697's registration)": ("8", "8"),
    },
    "pytorch_78549_syncbn_mask_sync": {"SyncBatchNorm forward": ("capture_sync", "pass")},
}


def table_row(stdout: str, label: str) -> list[str]:
    """The cells of the printed table row whose first cell is `label`."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split(" | ")]
        if len(cells) > 1 and cells[0] == label:
            return cells
    raise AssertionError(f"no table row {label!r} in:\n{stdout}")


def assert_row_cells(name: str, stdout: str) -> None:
    for label, cells in ROW_CELLS.get(name, {}).items():
        assert tuple(table_row(stdout, label)[1 : 1 + len(cells)]) == cells, (name, label, stdout)


@pytest.mark.parametrize("name", [m for m in MODULES if m != "issue350"])  # issue350: the test below
def test_module_reproduces_on_cpu(name):
    proc = harness("repro", name, "--backend", "cpu", "--no-isolate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REPRODUCED on cpu" in proc.stdout
    assert re.search(r"^-+\+-", proc.stdout, re.MULTILINE), "no table printed"
    assert_row_cells(name, proc.stdout)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(ROW_CELLS))
def test_module_reproduces_on_gpu(name):
    proc = harness("repro", name, "--backend", "gpu", "--no-isolate", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REPRODUCED on gpu" in proc.stdout
    assert_row_cells(name, proc.stdout)


def test_every_module_with_row_cells_exists():
    assert set(ROW_CELLS) <= set(MODULES)


def test_issue350_prints_both_of_the_reports_tables():
    loaded, outcome, backend = reproduce.reproduce("issue350", "cpu", isolate=False)
    assert outcome.exit_code == 0
    assert "REPRODUCED on cpu: 5 of 5 lines" in reproduce.render_text(loaded.report, outcome, backend)
    per_replay = {title: rows for title, _, rows, _ in outcome.tables}[loaded.report.tables[0].title]
    assert [(r[0], r[5], r[6]) for r in per_replay] == [(str(i), "stale_replay", "pass") for i in range(3)]
    assert all(r[3] == r[4] for r in per_replay)  # the fix: graph error equals eager error
    per_format = {title: rows for title, _, rows, _ in outcome.tables}["Existing graph test, per format"]
    assert [(r[0], r[2], r[3], r[4]) for r in per_format] == [
        ("BF16", "0.02", "FAIL", "PASS"),
        ("MXFP4", "0.04", "FAIL", "PASS"),
        ("DS-FP4", "0.04", "FAIL", "PASS"),
        ("Q4_0", "0.02", "FAIL", "PASS"),
    ]
    assert all(float(r[1]) > float(r[2]) for r in per_format)  # main's replay-0 error is over the threshold


def test_markdown_has_a_table_an_environment_line_and_the_conclusion():
    proc = harness("repro", "moe_gemm_item_routing", "--backend", "cpu", "--no-isolate", "--markdown")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "https://github.com/ROCm/aiter/pull/5831" in proc.stdout
    assert re.search(r"^Environment: graphsafe .* backend cpu", proc.stdout, re.MULTILINE)
    assert re.search(r"^\|---\|", proc.stdout, re.MULTILINE)
    assert "**REPRODUCED on cpu" in proc.stdout


def test_template_runs_isolated_from_its_path():
    proc = harness("repro", str(TEMPLATE), "--backend", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REPRODUCED on cpu: 1 of 1 lines" in proc.stdout


def _write_variant(tmp_path: Path, old: str, new: str, name: str = "variant.py") -> Path:
    text = TEMPLATE.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    return path


def test_a_line_not_as_the_report_says_exits_1(tmp_path):
    # Negative control: the buggy variant is declared to pass, so its line is not as expected.
    path = _write_variant(tmp_path, '("buggy", False, "uninitialized",', '("buggy", False, "pass",')
    proc = harness("repro", str(path), "--backend", "cpu", "--no-isolate")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NOT REPRODUCED on cpu: 1 of 1 lines differ" in proc.stdout
    assert re.search(r"half-written output .*\| NO\s*$", proc.stdout, re.MULTILINE)


def test_a_module_without_report_is_exit_2(tmp_path):
    path = tmp_path / "no_report.py"
    path.write_text(
        textwrap.dedent(
            """
            import torch
            from graphsafe import Case, register

            register(Case(name="no_report.case", make_inputs=lambda s, d: {"x": torch.randn(4) + s},
                          op=lambda x: x * 2))
            """
        )
    )
    proc = harness("repro", str(path), "--backend", "cpu")
    assert proc.returncode == 2
    assert "declares no REPORT, so it reproduces nothing" in proc.stderr


def test_a_module_that_runs_nothing_on_this_backend_is_exit_2(tmp_path):
    path = _write_variant(
        tmp_path,
        'lines=(Line("half-written output", buggy=VARIANTS["buggy"], fixed=VARIANTS["fixed"]),),',
        'lines=(Line("half-written output", gpu_only="needs a GPU"),),',
    )
    proc = harness("repro", str(path), "--backend", "cpu", "--no-isolate")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "NOTHING REPRODUCED on cpu" in proc.stdout
    assert "reproduced nothing on the cpu backend" in proc.stderr


def test_an_unknown_module_is_exit_2_and_lists_the_known_ones():
    proc = harness("repro", "no_such_report_123", "--backend", "cpu")
    assert proc.returncode == 2
    assert "no_such_report_123" in proc.stderr


def test_report_fields_are_validated():
    with pytest.raises(reproduce.ReportError, match="date"):
        reproduce.Report(
            "t", "https://x/y", "Oct 13", "r", "", (reproduce.MeasuredTable("m", ("a",), list, "c"),)
        )
    with pytest.raises(reproduce.ReportError, match="url"):
        reproduce.Report(
            "t", "github.com/x", "2026-10-13", "r", "", (reproduce.MeasuredTable("m", ("a",), list, "c"),)
        )
    with pytest.raises(reproduce.ReportError, match="tables"):
        reproduce.Report("t", "https://x/y", "2026-10-13", "r", "", ())
    with pytest.raises(reproduce.ReportError, match="side"):
        reproduce.Column("graph error")
    with pytest.raises(reproduce.ReportError, match="unknown"):
        reproduce.Column("speedup", "buggy")
    with pytest.raises(reproduce.ReportError, match="neither"):
        reproduce.Line("empty")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize(
    "value", ["x;echo INJECTED", 'x"; echo INJECTED; "', "$(shell echo INJECTED)", "`echo INJECTED`"]
)
def test_make_repro_does_not_run_what_case_holds(value):
    env = dict(os.environ)
    env.pop("MAKEFLAGS", None)
    # -o: take the setup stamps as up to date, so the test never reinstalls anything.
    proc = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed.stamp", "-o", ".setup-system.stamp", "repro", f"CASE={value}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "CASE must be a module, file or case name" in out
    assert not any(line.strip() == "INJECTED" for line in out.splitlines()), out
