"""Faults of a run's reports and exit code: a full filesystem or a file-size limit, a signal while the reports
are written, a merge of shards that are not one run, `report compare` on files that are not what they seem,
a run with zero cases, and a case that calls sys.exit under --no-isolate. Each test starts the fault for real
(a tmpfs mounted small, a child with RLIMIT_FSIZE, a signal sent to a live `graphsafe verify`) and checks
the exit code (graphsafe.cli's table) and that no report on disk is cut short.

The cases are tiny CPU tensors (--backend cpu); runs that isolation is not the subject of use --no-isolate.
The tmpfs tests need `mount` (root, as here and in CI); where it is refused they skip saying so, and the
file-size-limit test covers the same guarantee without privileges.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from graphsafe.cli import EXIT_NOTHING_SELECTED, EXIT_REPORTS_NOT_WRITTEN, main
from graphsafe.reports import fingerprint
from graphsafe.reports.atomic import ReportWriteError, write_atomic
from graphsafe.reports.merge import MergeError, merge_runs, shard_index
from graphsafe.reports.results import read_results

ROOT = Path(__file__).resolve().parent.parent
PAGE = os.sysconf("SC_PAGE_SIZE")

CASE_HEADER = """\
import os, sys, time
import torch
from graphsafe import Case, register

def make(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(8, generator=g).to(device)}

def double(x):
    return x * 2
"""


def case_file(folder: Path, body: str, name: str = "cases.py") -> Path:
    path = folder / name
    path.write_text(CASE_HEADER + textwrap.dedent(body))
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    env.pop("GITHUB_STEP_SUMMARY", None)  # a CI's step summary must not get these runs' reports
    return env


def harness(
    *args: str, timeout: float = 240, preexec_fn: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphsafe", *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=timeout,
        cwd=ROOT,
        preexec_fn=preexec_fn,
    )


def verify(cases: Path, out: Path, *extra: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return harness(
        "verify", "--backend", "cpu", "--case", str(cases), "--report-dir", str(out), *extra, **kwargs
    )  # type: ignore[arg-type]


def assert_no_report_cut_short(run_dir: Path) -> None:
    """Every report present is whole (it parses, and ends as its writer ends it); no temporary file is left."""
    present = {p.name for p in run_dir.iterdir()}
    assert not [n for n in present if n.endswith(".tmp")], present
    if "results.csv" in present:
        read_results(run_dir)  # raises on a cut record it cannot drop
    if "fingerprint.json" in present:
        assert json.loads((run_dir / "fingerprint.json").read_text())["backend"] == "cpu"
    if "junit.xml" in present:
        ET.parse(run_dir / "junit.xml")
    if "report.html" in present:
        assert (run_dir / "report.html").read_text().endswith("</html>\n")
    if "summary.md" in present:
        assert (run_dir / "summary.md").read_text().startswith("# graphsafe: ")
    if "times.csv" in present:
        assert (run_dir / "times.csv").read_text().startswith("kind,name,seconds")


# ---------------------------------------------------------------------------------------------- full disk


@contextlib.contextmanager
def small_filesystem(where: Path, pages: int) -> Iterator[Path]:
    """A tmpfs of `pages` memory pages mounted at `where` (tmpfs counts whole pages per file)."""
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={pages * PAGE}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}); needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_full_filesystem_at_the_start_is_exit_74_and_no_report_is_cut(tmp_path: Path) -> None:
    """A report dir on a filesystem of 6 pages: results.csv fits, a later report does not. Before: exit 0,
    report.html cut at 4096 bytes. Now: exit 74 naming the file, and what is there is whole."""
    cases = case_file(tmp_path, 'register(Case(name="t.one", make_inputs=make, op=double))\n')
    with small_filesystem(tmp_path / "fs", pages=6) as fs:
        proc = verify(cases, fs / "run", "--no-isolate", "--replays", "2")
        assert proc.returncode == EXIT_REPORTS_NOT_WRITTEN, proc.stderr
        assert "No space left on device" in proc.stderr and "Traceback" not in proc.stderr
        assert f"could not write {fs / 'run'}/" in proc.stderr  # the file is named
        assert_no_report_cut_short(fs / "run")


def test_full_filesystem_before_anything_runs_is_a_one_line_usage_error(tmp_path: Path) -> None:
    """No room even for the run's lock: nothing runs, exit 2, one line naming the dir and the reason."""
    cases = case_file(tmp_path, 'register(Case(name="t.one", make_inputs=make, op=double))\n')
    with small_filesystem(tmp_path / "fs", pages=1) as fs:
        (fs / "run").mkdir()
        with contextlib.suppress(OSError), (fs / "filler").open("wb") as f:
            while True:
                f.write(b"\0" * PAGE)
                f.flush()
        proc = verify(cases, fs / "run", "--no-isolate")
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if "error" in line]
        assert lines == [
            f"graphsafe: error: cannot write to report dir '{fs / 'run'}': No space left on device"
        ]


def test_filesystem_filled_mid_run_is_exit_74_and_keeps_what_was_written(tmp_path: Path) -> None:
    """The first case's op fills the filesystem the reports go to. Before: exit 0, results.csv never
    finalized, fingerprint.json 0 bytes. Now: exit 74 naming the file; every report there is whole."""
    with small_filesystem(tmp_path / "fs", pages=48) as fs:
        filler = fs / "filler"
        cases = case_file(
            tmp_path,
            f"""
            def fills_the_disk(x):
                try:
                    with open({str(filler)!r}, "ab") as f:
                        while True:
                            f.write(b"\\0" * 4096)
                            f.flush()
                except OSError:
                    pass
                return x * 2

            register(Case(name="t.filler", make_inputs=make, op=fills_the_disk))
            register(Case(name="t.after", make_inputs=make, op=double))
            """,
        )
        proc = verify(cases, fs / "run", "--no-isolate", "--replays", "1")
        assert proc.returncode == EXIT_REPORTS_NOT_WRITTEN, proc.stderr
        assert "No space left on device" in proc.stderr and f"could not write {fs / 'run'}/" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert_no_report_cut_short(fs / "run")
        fp = fs / "run" / "fingerprint.json"
        assert not fp.exists() or fp.stat().st_size > 0


def _file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:  # in the child: writes past `limit` fail with EFBIG instead of killing it (SIGXFSZ)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_file_size_limit_leaves_no_report_cut_short(tmp_path: Path) -> None:
    """No mount needed: under RLIMIT_FSIZE = 4096 bytes, report.html (about 6.6 KB for one case) cannot be
    written. Before: a report.html of exactly 4096 bytes and exit 0. Now: no report.html, exit 74 naming it."""
    cases = case_file(tmp_path, 'register(Case(name="t.one", make_inputs=make, op=double))\n')
    out = tmp_path / "run"
    proc = verify(cases, out, "--no-isolate", "--replays", "2", preexec_fn=_file_size_limit(4096))
    assert proc.returncode == EXIT_REPORTS_NOT_WRITTEN, proc.stderr
    assert f"could not write {out / 'report.html'}: File too large" in proc.stderr
    assert not (out / "report.html").exists()
    assert_no_report_cut_short(out)


def test_write_atomic_keeps_the_previous_file_when_the_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "summary.md"
    write_atomic(target, "whole\n")
    real_fsync = os.fsync

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(ReportWriteError, match=f"could not write {target}: No space left on device"):
        write_atomic(target, "new text that never lands\n")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert target.read_text() == "whole\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.md"]


# ---------------------------------------------------------------------------------------------- signals

# `graphsafe verify` with a test hook (graphsafe.reports.atomic.before_rename) that holds the junit.xml write
# for a few seconds after writing a marker file: the test sends its signal inside that window. Python's own
# SIGINT handler is installed first (a process started without job control inherits SIGINT ignored, and
# graphsafe leaves an ignored SIGINT ignored).
_HOLDS_A_REPORT_WRITE = """
import pathlib, runpy, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from graphsafe.reports import atomic
marker = pathlib.Path(sys.argv.pop(1))
def hold(path):
    if path.name == "junit.xml" and not marker.exists():
        marker.write_text("writing")
        time.sleep(4)
atomic.before_rename = hold
runpy.run_module("graphsafe", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_while_reports_are_written_finishes_them_then_exits_130(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """Before: SIGTERM and SIGINT there were ignored, exit 0. Now: the writes finish, every report is whole
    and tells the finished run, and the exit code is 130 (graphsafe's code for SIGINT and SIGTERM alike)."""
    cases = case_file(tmp_path, 'register(Case(name="t.one", make_inputs=make, op=double))\n')
    marker, out = tmp_path / "writing", tmp_path / "run"
    args = ["verify", "--backend", "cpu", "--case", str(cases), "--report-dir", str(out), "--no-isolate"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDS_A_REPORT_WRITE, str(marker), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    try:
        end = time.monotonic() + 180
        while not marker.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert marker.exists(), proc.communicate(timeout=60)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert f"{signum.name} came while the reports were written; they were finished first" in stderr
    for name in ("results.csv", "fingerprint.json", "junit.xml", "summary.md", "report.html", "times.csv"):
        assert (out / name).is_file(), name
    assert_no_report_cut_short(out)
    assert "INCOMPLETE" not in (out / "summary.md").read_text().split("\n", 1)[0]  # every case did finish


# ---------------------------------------------------------------------------------------------- merges


def _fake_run(path: Path, rows: list[tuple[str, str, str, str]], **fp: str) -> Path:
    """A run dir with rows (case, verdict, expected, status) and a fingerprint of one run's settings."""
    path.mkdir(parents=True)
    header = "case,family,backend,device,pattern,replay,seed_a,seed,eager_error,graph_error,row_verdict,"
    header += "verdict,expected,status\n"
    lines = [f"{c},fam,cpu,cpu,0xff,0,0,1,0.001,0.001,{v},{v},{e},{s}\n" for c, v, e, s in rows]
    (path / "results.csv").write_text(header + "".join(lines))
    base = {
        "backend": "cpu",
        "gpu_name": "n/a",
        "source_digest": "abc",
        "git_commit": "1111111",
        "case_files": "/ci/a/cases.py sha256:00000000000000aa",
        "shard": "",
        "graphsafe_version": "0.1.0",
        "seed": "0",
        "replays": "3",
        "rebuilds": "0",
        "live_graphs": "0",
    }
    fingerprint.write(path, base | fp)
    return path


def _ok(case: str) -> tuple[str, str, str, str]:
    return (case, "pass", "pass", "ok")


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("seed", "1", "--seed differs"),
        ("replays", "5", "--replays differs"),
        ("git_commit", "2222222", "commit differs"),
        ("case_files", "/ci/b/cases.py sha256:00000000000000bb", "case files differ"),
        ("graphsafe_version", "0.2.0", "graphsafe version differs"),
    ],
)
def test_merge_refuses_shards_of_different_runs_naming_the_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str, named: str
) -> None:
    """Before: merged silently into one "run". Now: exit 2 naming what differs and each shard's value;
    --allow-mixed merges and writes the difference at the top of every report."""
    a = _fake_run(tmp_path / "a", [_ok("x")], shard="1/2")
    b = _fake_run(tmp_path / "b", [_ok("y")], shard="2/2", **{key: value})
    with pytest.raises(MergeError, match=named):
        merge_runs([a, b], tmp_path / "refused")
    assert main(["report", "merge", str(a), str(b), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert named in err and value in err and "--allow-mixed" in err
    assert main(["report", "merge", str(a), str(b), "--out", str(tmp_path / "o"), "--allow-mixed"]) == 0
    summary = (tmp_path / "o" / "summary.md").read_text().splitlines()
    assert summary[2].startswith(f"Note: mixed merge: {named}"), summary[:4]  # under the title line
    assert named in (tmp_path / "o" / "report.html").read_text()
    # The same case files run from another checkout path (another CI runner) are the same run.
    c = _fake_run(
        tmp_path / "c", [_ok("y")], shard="2/2", case_files="/other/a/cases.py sha256:00000000000000aa"
    )
    assert merge_runs([a, c], tmp_path / "same").notes == []


def test_merge_exit_code_is_verdict_against_expected_not_the_status_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row whose status says ok but whose verdict is not its expectation (a writer out of step, a hand
    edit). Before: "0 not as expected", exit 0, while the merged summary counted 1 FAIL. Now: both say 1."""
    a = _fake_run(tmp_path / "a", [_ok("x")], shard="1/2")
    b = _fake_run(tmp_path / "b", [("y", "stale_replay", "pass", "ok")], shard="2/2")
    assert main(["report", "merge", str(a), str(b), "--out", str(tmp_path / "o")]) == 1
    assert "1 not as expected" in capsys.readouterr().out
    assert "(1 FAIL)" in (tmp_path / "o" / "summary.md").read_text().split("\n", 1)[0]


def _shard_run(cases: Path, out: Path, *extra: str) -> None:
    proc = verify(cases, out, "--no-isolate", "--replays", "1", *extra)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]


def test_real_shards_with_another_seed_or_an_edited_case_file_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end: shard 2/2 run with --seed 1, or after its case file was edited, against shard 1/2."""
    body = "for i in range(6):\n    register(Case(name=f't.s{i}', make_inputs=make, op=double))\n"
    cases = case_file(tmp_path, body)
    _shard_run(cases, tmp_path / "s1", "--shard", "1/2")
    _shard_run(cases, tmp_path / "s2_seed", "--shard", "2/2", "--seed", "1")
    cases.write_text(cases.read_text() + "# edited between the shards\n")
    _shard_run(cases, tmp_path / "s2_edit", "--shard", "2/2")
    for second, named in (("s2_seed", "--seed differs"), ("s2_edit", "case files differ")):
        code = main(
            [
                "report",
                "merge",
                str(tmp_path / "s1"),
                str(tmp_path / second),
                "--out",
                str(tmp_path / f"m_{second}"),
            ]
        )
        assert code == 2
        assert named in capsys.readouterr().err


def test_fingerprint_records_the_case_file_as_it_was_loaded(tmp_path: Path) -> None:
    """The op edits its own case file while the run goes. Before: fingerprint.json hashed the file when the
    reports were written (the edited version). Now: the version that was loaded and ran."""
    cases = case_file(
        tmp_path,
        """
        def edits_its_file(x):
            with open(__file__, "a") as f:
                f.write("\\n# edited while the run goes\\n")
            return x * 2

        register(Case(name="t.editor", make_inputs=make, op=edits_its_file))
        """,
    )
    loaded = hashlib.sha256(cases.read_bytes()).hexdigest()[:16]
    proc = verify(cases, tmp_path / "run", "--no-isolate", "--replays", "1")
    assert proc.returncode == 0, proc.stderr
    assert hashlib.sha256(cases.read_bytes()).hexdigest()[:16] != loaded  # the file did change
    recorded = fingerprint.read(tmp_path / "run")["case_files"]
    assert recorded == f"{cases} sha256:{loaded}"


# ---------------------------------------------------------------------------------------------- compare


def _cpu_run(tmp_path: Path) -> Path:
    return _fake_run(tmp_path / "cpu_run", [_ok("x")])


def test_compare_takes_the_platform_from_the_fingerprint_never_a_file_name(tmp_path: Path) -> None:
    """A header-only CSV named like a GPU baseline against a CPU run. Before: "platforms differ" (from the
    file name), exit 2. Now: compared, with a note that its platform is unknown."""
    header_only = tmp_path / "nvidia-h200-sm_90.csv"
    header_only.write_text((_cpu_run(tmp_path) / "results.csv").read_text().split("\n", 1)[0] + "\n")
    proc = harness("report", "compare", str(header_only), str(tmp_path / "cpu_run"))
    assert proc.returncode == 0, proc.stderr
    assert "platforms differ" not in proc.stderr + proc.stdout
    assert f"note: {header_only}: no fingerprint.json next to it" in proc.stdout


def test_compare_names_the_column_and_line_of_a_malformed_csv(tmp_path: Path) -> None:
    run = _cpu_run(tmp_path)
    lines = (run / "results.csv").read_text().splitlines(keepends=True)
    cases = [f"y{i},fam,cpu,cpu,0xff,0,0,1,0.001,0.001,pass,pass,pass,ok\n" for i in range(3)]
    not_a_number = tmp_path / "not_a_number.csv"
    not_a_number.write_text("".join([*lines, *cases[:2], cases[2].replace(",0.001,pass", ",0.0O1,pass")]))
    proc = harness("report", "compare", str(not_a_number), str(run))
    assert proc.returncode == 2
    assert f"{not_a_number}: column graph_error, line 5: '0.0O1' is not a number" in proc.stderr
    short = tmp_path / "short.csv"
    short.write_text("".join([*lines, cases[0].replace(",pass,pass,ok", ""), cases[1]]))
    proc = harness("report", "compare", str(short), str(run))
    assert proc.returncode == 2
    assert "the first, at line 3, has 11" in proc.stderr, proc.stderr
    unknown = tmp_path / "unknown_verdict.csv"
    unknown.write_text("".join([*lines, cases[0].replace("pass,pass,ok", "pass,passed,ok")]))
    proc = harness("report", "compare", str(unknown), str(run))
    assert proc.returncode == 2
    assert "column expected, line 3: unknown verdict 'passed'" in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------------------------- zero cases


def test_nothing_selected_is_exit_5_with_reports_that_say_so(tmp_path: Path) -> None:
    """-k matching nothing (before: usage error 2) and an empty shard (before: exit 3, no report)."""
    cases = case_file(tmp_path, 'register(Case(name="t.only", make_inputs=make, op=double))\n')
    proc = verify(cases, tmp_path / "k", "-k", "no_such_case")
    assert proc.returncode == EXIT_NOTHING_SELECTED, proc.stderr
    message = "-k 'no_such_case' matches no case"
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert f"no case ran: {message}" in (tmp_path / "k" / "summary.md").read_text()
    empty = "2/2" if shard_index("t.only", 2) == 1 else "1/2"
    proc = verify(cases, tmp_path / "shard", "--shard", empty)
    assert proc.returncode == EXIT_NOTHING_SELECTED, proc.stderr
    assert (
        f"shard {empty} holds none of the 1 selected cases" in (tmp_path / "shard" / "summary.md").read_text()
    )
    for run in ("k", "shard"):
        assert_no_report_cut_short(tmp_path / run)
        assert len(read_results(tmp_path / run)) == 0
    listing = harness("list", "--case", str(cases), "-k", "no_such_case")
    assert listing.returncode == EXIT_NOTHING_SELECTED and message in listing.stderr


def test_every_case_skipped_by_requires_is_exit_0_with_reports_that_say_so(tmp_path: Path) -> None:
    """Isolated (the default): before, exit 3 with an AttributeError and no report."""
    cases = case_file(
        tmp_path,
        'register(Case(name="t.gpu_only", make_inputs=make, op=double, requires=("gpu",)))\n',
    )
    proc = verify(cases, tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert (
        "no case ran: all 1 selected cases were skipped by their requires (t.gpu_only: requires gpu"
        in summary
    )
    assert_no_report_cut_short(tmp_path / "run")


# ---------------------------------------------------------------------------------------------- --no-isolate


def test_sys_exit_0_in_an_op_under_no_isolate_is_not_a_green_run(tmp_path: Path) -> None:
    """Before: exit 0 while every report said INCOMPLETE. Now: exit 1, the case named on stderr and first in
    every report."""
    cases = case_file(
        tmp_path,
        """
        def exits(x):
            sys.exit(0)

        register(Case(name="t.first", make_inputs=make, op=double))
        register(Case(name="t.exits", make_inputs=make, op=exits))
        register(Case(name="t.never", make_inputs=make, op=double))
        """,
    )
    out = tmp_path / "run"
    proc = verify(cases, out, "--no-isolate", "--replays", "1")
    assert proc.returncode == 1, proc.stderr
    assert "case 't.exits' raised SystemExit(0)" in proc.stderr
    first = (out / "summary.md").read_text().split("\n", 1)[0]
    assert "INCOMPLETE" in first and "case 't.exits' raised SystemExit(0)" in first
    assert set(read_results(out)["case"]) == {"t.first"}


def test_no_isolate_help_says_it_is_not_for_ci_gates() -> None:
    proc = harness("verify", "--help")
    assert "cannot see a process exit" in " ".join(proc.stdout.split())
    assert "not for CI gates" in " ".join(proc.stdout.split())


def test_write_reports_of_a_merge_failing_is_exit_74(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`report merge` whose report cannot be written: exit 74 naming the file (before: a traceback, 2 or 0)."""
    import graphsafe.cli as cli

    a = _fake_run(tmp_path / "a", [_ok("x")])

    def failing(*args: object, **kwargs: object) -> None:
        raise ReportWriteError(tmp_path / "o" / "report.html", OSError(28, "No space left on device"))

    monkeypatch.setattr(cli, "write_reports", failing)
    assert main(["report", "merge", str(a), "--out", str(tmp_path / "o")]) == EXIT_REPORTS_NOT_WRITTEN
