"""Failures a person can act on, and a fingerprint that says what ran.

- the detail of a host sync or an exception names the user's file and line (harness/tracebacks.py);
- a crashed worker's last stderr lines are in the crash's detail, the summary and junit.xml;
- junit.xml: <error> for crash/timeout/never ran, <failure> for a wrong verdict, timestamp and hostname on the
  testsuite, the whole story (details, repro command, replay table) in the body;
- summary.md folds the passing cases; $GITHUB_STEP_SUMMARY gets the summary, cut to GitHub's 1 MiB;
- repro commands name case files relative to the working directory;
- fingerprint.json: OS, cuDNN, Triton, numpy, allocator settings, the case files' packages and hashes.
"""

from __future__ import annotations

import csv
import hashlib
import os
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from graphsafe.case import load_case_source
from graphsafe.cli import main, source_as_typed_here
from graphsafe.protocol import check
from graphsafe.reports import fingerprint
from graphsafe.reports.junit import render_junit
from graphsafe.reports.markdown import render_summary
from graphsafe.reports.render import (
    STEP_SUMMARY_ENV,
    STEP_SUMMARY_MAX_BYTES,
    write_reports,
    write_step_summary,
)
from graphsafe.reports.results import COLUMNS, read_results

REPO = Path(__file__).resolve().parents[1]
PROGRAM = main.__module__.partition(".")[0]

USER_CASES = """\
import os
import sys
import torch
from graphsafe import Case, register

def make(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(8, generator=g).to(device)}

def routed(x):
    n = int(x.sum().item() > 0)  # LINE_SYNC
    return x * (n + 1)

def broken(x):
    raise RuntimeError("kernel says no")  # LINE_RAISE

def dies(x):
    print("my_kernel.cu:77: block (0,0,0) assertion `idx < n` failed", file=sys.stderr, flush=True)
    os.abort()

register(Case("user.routed", make, routed))
register(Case("user.broken", make, broken))
register(Case("user.dies", make, dies))
"""


def _line(marker: str) -> int:
    return next(i for i, line in enumerate(USER_CASES.splitlines(), 1) if marker in line)


@pytest.fixture
def user_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    repo = tmp_path / "user_repo"
    repo.mkdir()
    (repo / "frame_cases.py").write_text(USER_CASES)
    monkeypatch.chdir(repo)
    return repo


# ---------------------------------------------------------------------------------------------- user frames


def test_host_sync_and_exception_name_the_users_line(user_repo: Path) -> None:
    cases = {c.name: c for c in load_case_source("frame_cases.py")}
    synced = check(cases["user.routed"], "cpu", replays=1)
    assert synced.verdict == "capture_sync"
    assert f"(at frame_cases.py:{_line('LINE_SYNC')} in routed)" in synced.detail
    raised = check(cases["user.broken"], "cpu", replays=1)
    assert raised.verdict == "eager_mismatch"
    assert f"(at frame_cases.py:{_line('LINE_RAISE')} in broken)" in raised.detail


def test_crashed_worker_stderr_reaches_the_detail_summary_and_junit(user_repo: Path) -> None:
    run = user_repo / "run"
    done = subprocess.run(
        [
            *(sys.executable, "-m", PROGRAM, "verify", "--case", "frame_cases.py", "-k", "user.dies"),
            *("--backend", "cpu", "--replays", "1", "--report-dir", str(run)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "assertion `idx < n` failed" in done.stderr  # still forwarded to the terminal as it came
    detail = read_results(run)["detail"].iloc[0]
    assert detail.startswith("worker process died with exit code")
    assert detail.endswith(
        "last stderr lines of the worker:\nmy_kernel.cu:77: block (0,0,0) assertion `idx < n` failed"
    )
    summary = (run / "summary.md").read_text()
    assert "  my_kernel.cu:77: block (0,0,0) assertion `idx < n` failed" in summary  # quoted whole
    assert "graphsafe repro user.dies --case frame_cases.py" in summary
    case = ET.parse(run / "junit.xml").getroot().find(".//testcase[@name='user.dies']")
    assert case is not None and case.find("error") is not None and case.find("failure") is None
    error = case.find("error")
    assert error is not None and error.get("type") == "crash"
    assert "idx < n" in (error.text or "") and "reproduce:" in (error.text or "")


# ---------------------------------------------------------------------------------------------- junit


def _rows(case: str, verdict: str, expected: str, detail: str = "", replays: int = 2) -> list[dict[str, Any]]:
    base = dict(case=case, family="fam", backend="cpu", device="cpu", seed_a="3", threshold="0.01",
                verdict=verdict, expected=expected, status="ok" if verdict == expected else "FAIL")  # fmt: skip
    if replays == 0:
        return [base | dict(pattern="0xff", replay=-1, row_verdict=verdict, detail=detail)]
    return [
        base
        | dict(
            pattern="0xff",
            replay=i,
            seed=str(4 + i),
            eager_error="0.001",
            graph_error="0.5",
            row_verdict=verdict,
            detail=detail,
            replay_ms="2.5",
            eager_ms="1.5",
        )
        for i in range(replays)
    ]


def _frame(*groups: list[dict[str, Any]]) -> pd.DataFrame:
    rows = [r for g in groups for r in g]
    return pd.DataFrame([{k: str(r.get(k, "")) for k in COLUMNS} for r in rows])


def test_junit_error_for_crash_timeout_and_harness_errors_failure_for_a_wrong_verdict() -> None:
    frame = _frame(
        _rows("a.ok", "pass", "pass"),
        _rows("b.control_caught", "stale_replay", "stale_replay"),
        _rows("c.stale", "stale_replay", "pass", "graph replay vs eager: error 0.5"),
        _rows("d.missed_control", "pass", "uninitialized"),
        _rows("e.crash", "crash", "pass", "worker process died with exit code -6", replays=0),
        _rows("f.timeout", "timeout", "pass", "no result after 60 s; worker killed", replays=0),
        _rows("g.harness", "crash", "pass", "harness error in worker: ImportError: x", replays=0),
    )
    fp = {"time": "2026-12-01T07:00:00+00:00", "hostname": "gpu-node-7"}
    root = ET.fromstring(render_junit(frame, fp))
    suite = root.find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "7" and suite.get("failures") == "2" and suite.get("errors") == "3"
    assert suite.get("timestamp") == "2026-12-01T07:00:00+00:00" and suite.get("hostname") == "gpu-node-7"
    kinds = {c.get("name"): [e.tag for e in c] for c in suite.iter("testcase")}
    assert kinds == {"a.ok": [], "b.control_caught": [], "c.stale": ["failure"], "d.missed_control": ["failure"],
                     "e.crash": ["error"], "f.timeout": ["error"], "g.harness": ["error"]}  # fmt: skip
    stale = suite.find("testcase[@name='c.stale']/failure")
    assert stale is not None and stale.get("type") == "stale_replay"
    body = stale.text or ""
    assert (
        "verdict stale_replay, expected pass" in body and "detail: graph replay vs eager: error 0.5" in body
    )
    assert "reproduce: graphsafe repro" in body and "--seed 3" in body
    assert "0.500000" in body  # the replay table
    case_time = suite.find("testcase[@name='c.stale']")
    assert case_time is not None and case_time.get("time") == "0.008"  # 2 x (2.5 + 1.5) ms


def test_junit_marks_cases_that_never_ran_as_errors() -> None:
    status = {
        "state": "INCOMPLETE",
        "reason": "SIGTERM",
        "finished": 1,
        "planned": 2,
        "never_ran": ["z.late"],
    }
    text = render_junit(_frame(_rows("a.ok", "pass", "pass")), {}, status=status)
    root = ET.fromstring(text.split("\n", 1)[1])
    late = root.find(".//testcase[@name='z.late']/error")
    assert late is not None and late.get("type") == "not_run"
    assert root.find("testsuite").get("hostname") == socket.gethostname()  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------- summaries


def test_summary_folds_passing_cases() -> None:
    frame = _frame(_rows("a.ok", "pass", "pass"), _rows("c.stale", "stale_replay", "pass", "replay differs"))
    summary = render_summary(read_normalized(frame), {})
    failures_at, fold_at = (
        summary.index("## Failures (1)"),
        summary.index("<details><summary>1 cases as expected"),
    )
    assert failures_at < fold_at < summary.index("`a.ok`") < summary.index("</details>")


def read_normalized(frame: pd.DataFrame) -> pd.DataFrame:
    from graphsafe.reports.results import normalize

    return normalize(frame)


def _run_dir(path: Path, frame: pd.DataFrame) -> Path:
    path.mkdir()
    with (path / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(frame.to_dict("records"))
    return path


def test_step_summary_written_when_the_variable_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run_dir(tmp_path / "run", _frame(_rows("c.stale", "stale_replay", "pass", "replay differs")))
    target = tmp_path / "step_summary.md"
    monkeypatch.delenv(STEP_SUMMARY_ENV, raising=False)
    write_reports(run, {})
    assert not target.exists()
    monkeypatch.setenv(STEP_SUMMARY_ENV, str(target))
    target.write_text("earlier step\n")
    write_reports(run, {})
    text = target.read_text()
    assert text.startswith("earlier step\n")  # appended, as GitHub expects
    assert "`c.stale`" in text and str(run) in text


def test_step_summary_is_cut_to_githubs_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "step_summary.md"
    monkeypatch.setenv(STEP_SUMMARY_ENV, str(target))
    write_step_summary("| row |\n" * 400_000, tmp_path)  # 3.2 MB
    assert STEP_SUMMARY_MAX_BYTES - 4096 < target.stat().st_size <= STEP_SUMMARY_MAX_BYTES
    assert "cut to fit" in target.read_text()


def test_repro_names_case_files_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert source_as_typed_here(str(tmp_path / "sub" / "my_cases.py")) == os.path.join("sub", "my_cases.py")
    assert source_as_typed_here("sub/my_cases.py") == "sub/my_cases.py"
    assert source_as_typed_here("/elsewhere/cases.py") == "/elsewhere/cases.py"
    assert source_as_typed_here("mypkg.cases") == "mypkg.cases"


# ---------------------------------------------------------------------------------------------- fingerprint


def test_fingerprint_names_libraries_allocator_and_case_files(
    user_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (user_repo / "other_cases.py").write_text(
        "import numpy\nimport no_such_module_xyz\nfrom os import path\n"
    )
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    fp = fingerprint.collect("cpu", ["frame_cases.py", "other_cases.py"])
    assert list(fp) == list(fingerprint.KEYS)
    digest = hashlib.sha256(USER_CASES.encode()).hexdigest()[:16]
    assert (
        f"frame_cases.py sha256:{digest}" in fp["case_files"] and "other_cases.py sha256:" in fp["case_files"]
    )
    import numpy
    import torch

    packages = fp["case_packages"]
    assert f"torch {torch.__version__}" in packages and f"numpy {numpy.__version__}" in packages
    assert "no_such_module_xyz (no distribution)" in packages
    assert "os" not in packages.split(", ")  # the standard library is not a package
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in fp["allocator_config"]
    assert "CUBLAS_WORKSPACE_CONFIG=:4096:8" in fp["runtime_env"]
    assert fp["numpy"] == f"numpy {numpy.__version__}"
    assert fp["os"] not in ("", "n/a") and fp["libc"] != ""
    for key in ("triton", "cudnn", "cuda_compiled"):
        assert fp[key]  # a value or "n/a"/"not found", never empty


def test_fingerprint_without_case_files() -> None:
    fp = fingerprint.collect("cpu")
    assert fp["case_files"] == "none" and fp["case_packages"] == "none"


def test_fingerprint_names_os_and_libc_when_collect_env_gives_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """collect_env can fail or pass its deadline on a loaded machine; the platform module still answers."""
    monkeypatch.setitem(fingerprint._ENV_INFO, "info", None)
    fp = fingerprint.collect("cpu", [])
    assert fp["os"] not in ("", "n/a") and fp["libc"] not in ("", "n/a")
