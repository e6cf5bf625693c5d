"""The CLI contract: exit codes, report files and columns, user case files outside the repo, isolation.

Each test runs `graphsafe` in a subprocess, as a user would.
"""

from __future__ import annotations

import csv
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REQUIRED_COLUMNS = {
    "case",
    "backend",
    "replay",
    "eager_error",
    "graph_error",
    "threshold",
    "verdict",
    "expected",
    "seed",
}


def harness(*args: str, cwd: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, "-m", "graphsafe", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


USER_CASES = textwrap.dedent(
    """
    import torch
    from graphsafe import Case, register

    def make(seed, device):
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(32, generator=g).to(device)}

    _cache = {}

    def cached_norm(x):
        # A per-tensor cache: right for every fresh tensor (eager), frozen for the graph's static buffer.
        if id(x) not in _cache or _cache[id(x)][0] is not x:
            _cache[id(x)] = (x, x.norm())
        return x / _cache[id(x)][1]

    register(Case(name="user_ok", make_inputs=make, op=lambda x: x / x.norm(), reference=lambda x: x / x.norm()))
    register(Case(name="user_stale", make_inputs=make, op=cached_norm, reference=lambda x: x / x.norm(),
                  expect="stale_replay"))
    """
)


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "results.csv").open() as f:
        return list(csv.DictReader(f))


def test_user_case_file_outside_repo_gets_right_verdicts(tmp_path: Path) -> None:
    case_file = tmp_path / "my_cases.py"
    case_file.write_text(USER_CASES)
    out = tmp_path / "run"
    proc = harness(
        "verify", "--backend", "cpu", "--case", str(case_file), "--report-dir", str(out), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(out)
    assert set(rows[0]) >= REQUIRED_COLUMNS
    verdicts = {r["case"]: r["verdict"] for r in rows}
    assert verdicts == {"user_ok": "pass", "user_stale": "stale_replay"}
    for name in ("results.csv", "summary.md", "junit.xml"):
        assert (out / name).is_file()
    # Where the time went: every phase once, every case once, and the one line on stderr that sums it up.
    with (out / "times.csv").open() as f:
        times = list(csv.DictReader(f))
    phases = [t["name"] for t in times if t["kind"] == "phase"]
    assert phases == ["loading cases", "builds", "definition checks", "cases", "reports"]
    assert sorted(t["name"] for t in times if t["kind"] == "case") == ["user_ok", "user_stale"]
    assert all(float(t["seconds"]) >= 0 for t in times)
    # The timeline: each case started after the run began, on worker 0 (the one worker), in turn.
    cases = sorted((t for t in times if t["kind"] == "case"), key=lambda t: float(t["start"]))
    assert [t["worker"] for t in cases] == ["0", "0"] and float(cases[0]["start"]) > 0
    first_end = float(cases[0]["start"]) + float(cases[0]["seconds"])
    assert float(cases[1]["start"]) >= first_end - 0.001
    assert "graphsafe: time (1 worker): loading cases" in proc.stderr and "slowest: user_" in proc.stderr


def test_exit_one_when_a_verdict_differs_from_expectation(tmp_path: Path) -> None:
    case_file = tmp_path / "wrong_expect.py"
    case_file.write_text(USER_CASES.replace('expect="stale_replay"', 'expect="pass"'))
    proc = harness(
        "verify", "--backend", "cpu", "--case", str(case_file), "--report-dir", str(tmp_path / "r")
    )
    assert proc.returncode == 1
    junit = (tmp_path / "r" / "junit.xml").read_text()
    assert "verdict stale_replay, expected pass" in junit


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("raise ImportError('no module named foo')", "no module named foo"),
        (
            "from graphsafe import Case, register\nregister(Case(name='b', make_inputs=lambda s, d: {}, op=len, expect='ok'))",
            "field 'expect'",
        ),
        ("x = 1", "registered no cases"),
    ],
    ids=["import_error", "unknown_verdict", "no_cases"],
)
def test_unloadable_case_file_exits_two_with_reason(tmp_path: Path, body: str, fragment: str) -> None:
    case_file = tmp_path / "bad.py"
    case_file.write_text(body)
    proc = harness(
        "verify", "--backend", "cpu", "--case", str(case_file), "--report-dir", str(tmp_path / "r")
    )
    assert proc.returncode == 2
    assert fragment in proc.stderr


def test_missing_case_file_and_bad_arguments_exit_two(tmp_path: Path) -> None:
    assert harness("verify", "--case", str(tmp_path / "nope.py")).returncode == 2
    assert harness("verify", "--replays", "0").returncode == 2
    assert harness("verify", "--backend", "tpu").returncode == 2
    for deadline in ("nan", "0"):  # nan would never expire (elapsed > nan is False); 0 times out every case
        proc = harness("verify", "--deadline", deadline)
        assert proc.returncode == 2 and "--deadline" in proc.stderr, proc.stderr


def test_non_tensor_inputs_exit_two_naming_case_and_field(tmp_path: Path) -> None:
    case_file = tmp_path / "nontensor.py"
    case_file.write_text(
        "from graphsafe import Case, register\n"
        "register(Case(name='nt', make_inputs=lambda seed, device: {'n': 3}, op=lambda n: n))\n"
    )
    proc = harness(
        "verify", "--backend", "cpu", "--case", str(case_file), "--report-dir", str(tmp_path / "r")
    )
    assert proc.returncode == 2
    assert "case 'nt'" in proc.stderr and "make_inputs" in proc.stderr and "not a Tensor" in proc.stderr


ISOLATION_CASES = textwrap.dedent(
    """
    import os, time
    import torch
    from graphsafe import Case, register

    def make(seed, device):
        return {"x": torch.randn(4, generator=torch.Generator().manual_seed(seed))}

    def aborts(x):
        os.abort()  # the process dies like it would on an illegal memory access

    def hangs(x):
        time.sleep(3600)
        return x

    def device_fault(x):
        # What torch raises for a sticky device error (an illegal address): the worker must retire after it.
        raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")

    register(Case(name="iso_before", make_inputs=make, op=lambda x: x + 1))
    register(Case(name="iso_crash", make_inputs=make, op=aborts, expect="crash"))
    register(Case(name="iso_fault", make_inputs=make, op=device_fault, expect="crash"))
    register(Case(name="iso_hang", make_inputs=make, op=hangs, expect="timeout", deadline=3))
    register(Case(name="iso_after", make_inputs=make, op=lambda x: x * 2))
    """
)


def test_crash_and_hang_cost_one_case_each_and_keep_every_other_row(tmp_path: Path) -> None:
    """Negative controls for isolation: an aborting op and a device fault get `crash`, a hanging op `timeout`;
    the run goes on and no other case loses a row."""
    case_file = tmp_path / "iso.py"
    case_file.write_text(ISOLATION_CASES)
    out = tmp_path / "r"
    proc = harness("verify", "--backend", "cpu", "--case", str(case_file), "--report-dir", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(out)
    verdicts = {r["case"]: r["verdict"] for r in rows}
    assert verdicts == {
        "iso_before": "pass",
        "iso_crash": "crash",
        "iso_fault": "crash",
        "iso_hang": "timeout",  # runs right after the fault: never handed to the retiring worker
        "iso_after": "pass",
    }
    assert sum(r["case"] == "iso_before" for r in rows) == 6  # 2 patterns x 3 replays, none lost
    assert sum(r["case"] == "iso_after" for r in rows) == 6
    # The next run's order counts what each case cost its worker slot: a case whose worker was killed or
    # retired also pays for its replacement's start (an import of torch and the cases: well over 0.1 s).
    from graphsafe.runner import case_seconds_history

    own = {
        line.split(",")[1]: float(line.split(",")[2])
        for line in (out / "times.csv").read_text().splitlines()
        if line.startswith("case,")
    }
    history = case_seconds_history("cpu")
    for name in ("iso_crash", "iso_fault", "iso_hang"):
        assert history[name] > own[name] + 0.1, (name, history[name], own[name])
    for name in ("iso_before", "iso_after"):
        assert history[name] == pytest.approx(own[name], abs=1e-3)


SPARE_CASES = textwrap.dedent(
    """
    import time
    import torch
    from graphsafe import Case, register

    def make(seed, device):
        return {"x": torch.randn(4, generator=torch.Generator().manual_seed(seed))}

    def hangs(x):
        time.sleep(3600)
        return x

    def slow(x):
        time.sleep(0.2)  # about 2 s a case: the replacement worker starts while they still run
        return x + 1

    # One at a time (`exclusive`): the three wait for the hang, so cases still pend when it is killed.
    # 6 s: time for the spare, started just after the two workers, to import torch on a loaded 2-core box.
    register(Case(name="TAG_hang", make_inputs=make, op=hangs, expect="timeout", deadline=6, exclusive="TAG"))
    for i in range(3):
        register(Case(name=f"TAG_after{i}", make_inputs=make, op=slow, exclusive="TAG"))
    """
)


@pytest.mark.parametrize("cores", [16, 2])
def test_a_worker_ended_by_a_timeout_is_replaced_by_the_spare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int
) -> None:
    """With a core to spare, a run keeps one started worker aside: the worker a timeout ended is replaced by
    it at once, so the case is charged no replacement start (`respawns`). With no core to spare (2 workers on
    2 cores, the control) there is no spare, and the replacement's start is charged to the case."""
    from graphsafe import runner
    from graphsafe.case import load_case_source
    from graphsafe.records import Result

    tag = f"spare{cores}"  # case names of their own per run: both runs register into this process
    case_file = tmp_path / f"{tag}_cases.py"
    case_file.write_text(SPARE_CASES.replace("TAG", tag))
    cases = load_case_source(str(case_file))
    monkeypatch.setattr(runner.os, "cpu_count", lambda: cores)
    results: list[Result] = []
    respawns: dict[str, float] = {}
    runner.run_isolated(
        cases, [str(case_file)], runner.RunOptions(backend="cpu"), 2, 0, results.append, respawns=respawns
    )
    assert {r.case: r.verdict for r in results} == {
        f"{tag}_hang": "timeout",
        **{f"{tag}_after{i}": "pass" for i in range(3)},
    }
    if cores > 2:
        assert respawns == {}, respawns
    else:
        assert respawns[f"{tag}_hang"] > 0.1, respawns


def test_list_and_filter(tmp_path: Path) -> None:
    proc = harness("list", "-k", "control_")
    assert (
        proc.returncode == 0 and "control_item_in_routing" in proc.stdout and "fixed_log" not in proc.stdout
    )
    # -k matching nothing: pytest's "no tests ran" (5), with a report that says so
    nothing = harness("verify", "-k", "no_such_case_anywhere", "--report-dir", str(tmp_path / "run"))
    assert nothing.returncode == 5, nothing.stderr


def test_repro_prints_the_replay_table(tmp_path: Path) -> None:
    proc = harness(
        "repro",
        "control_python_cached_value",
        "--backend",
        "cpu",
        "--seed",
        "5",
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "eager error" in proc.stdout and "graph error" in proc.stdout and "stale_replay" in proc.stdout
    assert {r["seed_a"] for r in _rows(tmp_path / "r")} == {"5"}


def test_jobs_default_and_caps(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """One worker per GPU by default; several may share a GPU up to MAX_WORKERS_PER_GPU and the core count;
    on cpu at most one per core; a request above the cap is lowered and says so."""
    from graphsafe.cli import MAX_WORKERS_PER_GPU, capped_jobs

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert capped_jobs(None, "gpu", 2) == 2
    assert capped_jobs(None, "cpu", 0) == 1
    assert capped_jobs(4, "gpu", 1) == 4
    assert capped_jobs(64, "gpu", 1) == MAX_WORKERS_PER_GPU
    assert "capped to 8" in capsys.readouterr().err
    assert capped_jobs(64, "gpu", 4) == 16  # the cores bound it before 4 GPUs x 8 do
    assert capped_jobs(64, "cpu", 0) == 16
    capsys.readouterr()
    assert capped_jobs("auto", "gpu", 1) == MAX_WORKERS_PER_GPU
    assert capped_jobs("auto", "cpu", 0) == 16
    assert "capped" not in capsys.readouterr().err  # 'auto' asks for the cap: nothing to say


def test_cases_start_longest_first_from_the_remembered_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's case seconds are remembered per backend in the cache folder; the next run starts the cases
    never timed first (in their order), then the rest longest first."""
    from graphsafe import Case
    from graphsafe.runner import case_seconds_history, longest_first, remember_case_seconds

    monkeypatch.setenv("GRAPHSAFE_CACHE_DIR", str(tmp_path))
    assert case_seconds_history("gpu") == {}
    remember_case_seconds("gpu", {"a": 1.0, "b": 20.0})
    remember_case_seconds("gpu", {"c": 5.0})
    remember_case_seconds("cpu", {"a": 99.0})
    history = case_seconds_history("gpu")
    assert history == {"a": 1.0, "b": 20.0, "c": 5.0}
    cases = [Case(n, lambda seed, device: {}, lambda: None) for n in ("a", "new1", "b", "c", "new2")]
    assert [c.name for c in longest_first(cases, history)] == ["new1", "new2", "b", "c", "a"]
    # A group that runs one case at a time is placed by its summed seconds: g1 + g2 + g3 = 9 s before c (5 s).
    grouped = [Case(n, lambda seed, device: {}, lambda: None, exclusive="w") for n in ("g1", "g2", "g3")]
    timed = {**history, "g1": 2.0, "g2": 4.0, "g3": 3.0}
    order = [c.name for c in longest_first(cases[:1] + cases[2:4] + grouped, timed)]
    assert order == ["b", "g2", "g3", "g1", "c", "a"]
    # Never timed (a first run): the group first, in its order, then the rest in theirs.
    untimed = [cases[1], grouped[0], cases[4], grouped[1], grouped[2]]
    assert [c.name for c in longest_first(untimed, {})] == ["g1", "g2", "g3", "new1", "new2"]
    (tmp_path / "case_seconds.json").write_text("not json")
    assert case_seconds_history("gpu") == {}


EXCLUSIVE_CASES = textwrap.dedent(
    """
    import time
    from graphsafe import Case, register

    def make(seed, device):
        import torch
        return {"x": torch.full((4,), float(seed + 1), device=device)}

    def slow(x):
        time.sleep(0.05)
        return x * 2

    for i in range(3):
        register(Case(f"spin{i}", make, slow, exclusive="host_wait"))
    register(Case("free", make, slow))
    """
)


def test_cases_sharing_an_exclusive_name_never_overlap_and_others_run_beside_them(tmp_path: Path) -> None:
    """Three workers, three cases that share `exclusive` and one that does not: the timeline shows the three
    one after another, and the fourth running during one of them."""
    case_file = tmp_path / "exclusive_cases.py"
    case_file.write_text(EXCLUSIVE_CASES)
    out = tmp_path / "run"
    proc = harness(
        "verify", "--backend", "cpu", "--jobs", "3", "--case", str(case_file), "--report-dir", str(out)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with (out / "times.csv").open() as f:
        spans = {
            t["name"]: (float(t["start"]), float(t["start"]) + float(t["seconds"]))
            for t in csv.DictReader(f)
            if t["kind"] == "case"
        }
    exclusive = sorted(spans[f"spin{i}"] for i in range(3))
    assert all(a[1] <= b[0] + 0.01 for a, b in itertools.pairwise(exclusive)), exclusive
    free = spans["free"]
    assert any(free[0] < end and start < free[1] for start, end in exclusive), (free, exclusive)


def test_exclusive_must_be_a_name() -> None:
    from graphsafe import Case
    from graphsafe.errors import CaseError

    with pytest.raises(CaseError, match=r"exclusive.*got 'two words'"):
        Case("x", lambda seed, device: {}, lambda: None, exclusive="two words")
    with pytest.raises(CaseError, match="exclusive"):
        Case("x", lambda seed, device: {}, lambda: None, exclusive=3)  # type: ignore[arg-type]
