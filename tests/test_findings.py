"""Findings that say what to fix, and pytest's habits in `graphsafe verify` (-x, --maxfail, --lf, -v, -q).

The cases are a user's: a module that caches a tensor in a submodule's `self._slot_cache`, a tuple-returning
op whose second output alone is stale, a host sync, an output left partly unwritten. Each finding must name
what a person fixes: the attribute path, the output (index, shape, dtype), how much, the user's line.
"""

from __future__ import annotations

import collections
import csv
import textwrap
from pathlib import Path

import pytest
import torch

from graphsafe.case import load_case_source
from graphsafe.cli import main
from graphsafe.protocol import check
from graphsafe.records import Result

USER_CASES = textwrap.dedent(
    """
    import torch
    from graphsafe import Case, register

    def make(seed, device):
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(4, 8, generator=g).to(device)}

    class Attention(torch.nn.Module):
        def forward(self, x):
            if getattr(self, "_slot_cache", None) is None:
                self._slot_cache = x * 2  # filled from the first input, reused by every later call
            return x + self._slot_cache

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Attention()

        def forward(self, x):
            return self.attn(x)

    model = Model()

    _scales = {}

    def scaled_pair(x):
        # Output 0 is right; output 1 uses a scale cached per tensor object: right for eager's fresh clone,
        # frozen at input A for the graph's static buffer.
        if id(x) not in _scales or _scales[id(x)][0] is not x:
            _scales[id(x)] = (x, x.abs().amax())
        return x * 2, x * _scales[id(x)][1]

    def routed(x):
        n = int(x.sum().item() > 0)  # LINE_SYNC
        return x * (n + 1)

    def partial(x):
        out = torch.empty_like(x)
        out[:, :6] = x[:, :6] * 2  # the last two columns are never written
        return out

    def good(x):
        return x * 3

    register(Case("app.slot_cache", make, model, lambda x: x + x * 2))
    register(Case("app.scaled_pair", make, scaled_pair, lambda x: (x * 2, x * x.abs().amax())))
    register(Case("app.good", make, good, lambda x: x * 3))
    register(Case("app.routed", make, routed))
    register(Case("app.partial", make, partial, lambda x: x * 2))
    """
)
SYNC_LINE = next(i for i, line in enumerate(USER_CASES.splitlines(), 1) if "LINE_SYNC" in line)


@pytest.fixture(scope="module")
def case_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One user repository for the module: a case file is loaded once per process (its names are global)."""
    repo = tmp_path_factory.mktemp("user_repo")
    (repo / "my_cases.py").write_text(USER_CASES)
    return repo


@pytest.fixture
def user_repo(case_repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(case_repo)
    return case_repo


@pytest.fixture(autouse=True)
def fresh_state(case_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test meets the op's state as a fresh process would: the module is loaded once for all of them,
    and the hidden-state probe cannot see state filled by an earlier case in the same process."""
    monkeypatch.chdir(case_repo)
    cases = {c.name: c for c in load_case_source("my_cases.py")}
    cases["app.slot_cache"].op.attn.__dict__.pop("_slot_cache", None)
    cases["app.scaled_pair"].op.__globals__["_scales"].clear()


def _check(name: str) -> Result:
    case = next(c for c in load_case_source("my_cases.py") if c.name == name)
    return check(case, "cpu")


def _first_failing_row(result: Result) -> dict[str, str]:
    return next(vars(r) for r in result.rows if r.row_verdict == result.verdict)


def _verify(*args: str, cases: str = "my_cases.py") -> int:
    return main(["verify", "--backend", "cpu", "--no-isolate", "--case", cases, *args])


def test_slot_cache_finding_names_the_attribute_path_and_the_mismatch(user_repo: Path) -> None:
    result = _check("app.slot_cache")
    assert result.verdict == "stale_replay", result.detail
    row = _first_failing_row(result)
    assert "my_cases.model.attn._slot_cache" in row["carried_state"], row
    assert row["output"] == "0" and row["mismatches"] == 32
    assert "Mismatched elements: 32 / 32 (100.0%)" in row["finding"]
    assert "Greatest absolute difference: " in row["finding"]


def test_second_output_of_a_tuple_is_named_with_its_values(user_repo: Path) -> None:
    result = _check("app.scaled_pair")
    assert result.verdict == "stale_replay", result.detail
    row = _first_failing_row(result)
    assert row["output"] == "1"
    assert "output 1 (of 2): shape (4, 8), float32" in row["finding"]
    index, _, values = row["first_mismatch"].partition(": ")
    assert (
        index == "(0, 0)"
        and values.startswith("graph ")
        and ", eager " in values
        and ", reference " in values
    )
    # The values are the tensors' own: eager and reference agree there, the graph's is the stale one.
    graph, eager, reference = (float(part.split()[-1]) for part in values.split(", "))
    assert eager == pytest.approx(reference, rel=1e-5) and graph != pytest.approx(eager, rel=1e-3)
    assert "_scales" in row["carried_state"]  # the cache the op filled


def test_capture_sync_names_the_op_and_the_users_line(user_repo: Path) -> None:
    result = _check("app.routed")
    assert result.verdict == "capture_sync"
    row = _first_failing_row(result)
    assert "op: aten._local_scalar_dense.default" in row["finding"]
    assert f"line: my_cases.py:{SYNC_LINE} in routed" in row["finding"]


def test_uninitialized_names_the_output_and_how_many_elements(user_repo: Path) -> None:
    result = _check("app.partial")
    assert result.verdict == "uninitialized"
    row = _first_failing_row(result)
    assert row["output"] == "0" and row["mismatches"] == 8
    assert "8 / 32 (25.0%) elements hold NaN/Inf or a poison value" in row["finding"]
    assert row["first_mismatch"].startswith("(0, 6): ")


def test_namedtuple_outputs_are_named_by_field() -> None:
    from graphsafe.findings import output_labels

    Pair = collections.namedtuple("Pair", ["logits", "state"])
    t = torch.zeros(1)
    assert output_labels(Pair(t, (t, t)), 3) == ["logits", "state.0", "state.1"]
    assert output_labels((t, t), 2) == ["0", "1"]


def test_verify_prints_one_block_per_failure_and_one_summary_line(
    user_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _verify("-k", "app.slot_cache or app.good", "--report-dir", str(tmp_path / "r")) == 1
    out = capsys.readouterr().out
    assert "FAIL app.slot_cache: stale_replay, expected pass" in out
    assert "carried state: my_cases.model.attn._slot_cache" in out
    assert "likely cause -> what to try: " in out
    assert "reproduce: graphsafe repro app.slot_cache --case my_cases.py --seed 0 --backend cpu" in out
    assert "app.good" not in out  # passing cases only with -v
    assert out.strip().splitlines()[-1].startswith("graphsafe: 1 failed, 1 passed in ")
    # Plain text: no Markdown table rows, no code spans.
    assert "`" not in out and not any(line.lstrip().startswith("|") for line in out.splitlines())
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "carried state: my_cases.model.attn._slot_cache" in summary


def test_quiet_prints_the_summary_line_alone(
    user_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _verify("-k", "app.slot_cache or app.good", "--report-dir", str(tmp_path / "r"), "-q") == 1
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines() == [captured.out.strip()]
    assert captured.out.startswith("graphsafe: 1 failed, 1 passed in ")
    assert captured.err == ""


def test_verbose_lists_passing_cases(
    user_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _verify("-k", "app.good", "--report-dir", str(tmp_path / "r"), "-v") == 0
    out = capsys.readouterr().out
    assert "ok    app.good  pass" in out


def _statuses(run_dir: Path) -> tuple[str, dict[str, str]]:
    text = (run_dir / "results.csv").read_text()
    first = text.splitlines()[0]
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return first, {r["case"]: r["status"] for r in csv.DictReader(body.splitlines())}


def test_exitfirst_stops_after_the_first_failure_and_says_so(
    user_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _verify("--report-dir", str(tmp_path / "r"), "-x") == 1
    first, statuses = _statuses(tmp_path / "r")
    assert statuses == {"app.slot_cache": "FAIL"}  # registration order; nothing ran after it
    assert first.startswith("# graphsafe run INCOMPLETE: stopped after 1 case not as expected (-x)")
    assert (
        "INCOMPLETE run: stopped after 1 case not as expected (-x)"
        in (tmp_path / "r" / "summary.md").read_text()
    )
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(
        "graphsafe: stopped after 1 case not as expected (-x): 1 failed, 0 passed, 4 not run"
    )


def test_maxfail_stops_after_n_failures(user_repo: Path, tmp_path: Path) -> None:
    assert _verify("--report-dir", str(tmp_path / "r"), "--maxfail", "2") == 1
    first, statuses = _statuses(tmp_path / "r")
    assert statuses == {"app.slot_cache": "FAIL", "app.scaled_pair": "FAIL"}
    assert "stopped after 2 cases not as expected (--maxfail 2)" in first


def test_last_failed_reruns_only_the_last_runs_failures(
    case_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # runs go to the default report location under the working directory
    cases = str(case_repo / "my_cases.py")
    assert _verify("-k", "app.slot_cache or app.good or app.partial", cases=cases) == 1
    capsys.readouterr()
    assert _verify("--lf", cases=cases) == 1
    runs = sorted((tmp_path / "graphsafe-runs").iterdir(), key=lambda p: (p / "results.csv").stat().st_mtime)
    assert len(runs) == 2
    _, statuses = _statuses(runs[-1])
    assert statuses == {"app.slot_cache": "FAIL", "app.partial": "FAIL"}
    assert "graphsafe: --lf: rerunning 2 cases that failed in" in capsys.readouterr().err


def test_every_verdict_has_a_cause_line_and_the_readme_table_renders() -> None:
    from graphsafe import verdicts
    from graphsafe.findings import cause_for, causes_markdown

    for verdict in verdicts.VERDICTS - {"pass"}:
        assert cause_for(verdict, "") is not None, verdict
    table = causes_markdown()
    assert table.startswith("| verdict | found by | likely cause | what to try |")
    assert "`stale_replay` | `hidden_state`" in table
