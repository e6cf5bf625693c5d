"""`verify --shard I/N` and `report merge`: shards partition the cases by name, and merging the shards' runs
gives the verdicts of one unsharded run; merges that would mislead are refused with the reason.

Method: a small case file (passing ops, a negative control, a case that fails against its expectation) run
through the CLI, each run in a fresh process (cpu): once whole, once as shard 1/2 and 2/2; then `report
merge`. Expected: the merged results hold each case once with the unsharded run's verdict and status, the
merged reports exist, and the exit codes say "not all as expected" (1) for both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphsafe.cli import main
from graphsafe.reports import fingerprint
from graphsafe.reports.merge import MergeError, merge_runs, parse_shard, shard_index
from graphsafe.reports.render import write_reports
from graphsafe.reports.results import read_results

REPO = Path(__file__).resolve().parents[1]
PROGRAM = main.__module__.partition(".")[0]  # `harness` in a checkout

CASES = """
import torch
from graphsafe import Case, register

def make(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(8, generator=g).to(device)}

def cached_op():  # each case its own cache: the first call's input stays baked in, a stale replay
    cache = {}

    def cached(x):
        cache.setdefault("x", x.clone())
        return x + cache["x"]

    return cached

for i in range(6):
    register(Case(f"shardcase.double_{i}", make, lambda x: x * 2))
register(Case("shardcase.cached_control", make, cached_op(), expect="stale_replay"))
register(Case("shardcase.cached_unexpected", make, cached_op()))
"""


def _verdicts(run: Path) -> dict[str, tuple[str, str]]:
    df = read_results(run)
    return {c: (v, s) for c, v, s in zip(df["case"], df["verdict"], df["status"], strict=True)}


def _verify(case_file: Path, out: Path, *extra: str) -> int:
    """One run in a fresh process, as on another machine (a process keeps its case file's module state)."""
    args = ["verify", "--case", str(case_file), "--backend", "cpu", "--no-isolate", "--replays", "2"]
    done = subprocess.run(
        [sys.executable, "-m", PROGRAM, *args, "--report-dir", str(out), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done.returncode


def test_shards_then_merge_give_the_unsharded_verdicts(tmp_path: Path) -> None:
    case_file = tmp_path / "shard_cases.py"
    case_file.write_text(CASES)
    assert _verify(case_file, tmp_path / "whole") == 1  # one case is not as expected
    codes = [_verify(case_file, tmp_path / f"shard{i}", "--shard", f"{i}/2") for i in (1, 2)]
    whole = _verdicts(tmp_path / "whole")
    parts = [_verdicts(tmp_path / f"shard{i}") for i in (1, 2)]
    assert len(whole) == 8 and all(parts), "each shard of 8 cases should hold some"
    assert not set(parts[0]) & set(parts[1])
    assert codes == [1 if any(s == "FAIL" for _, s in p.values()) else 0 for p in parts]
    assert fingerprint.read(tmp_path / "shard1")["shard"] == "1/2"

    merged_dir = tmp_path / "merged"
    command = [
        "report",
        "merge",
        str(tmp_path / "shard1"),
        str(tmp_path / "shard2"),
        "--out",
        str(merged_dir),
    ]
    digests = {fingerprint.read(tmp_path / f"shard{i}")["source_digest"] for i in (1, 2)}
    if len(digests) > 1:  # the sources changed between the two runs (a tree being edited): refused, say so
        assert main(command) == 2
        command.append("--allow-mixed-platforms")
    assert main(command) == 1
    assert _verdicts(merged_dir) == whole
    for name in ("results.csv", "summary.md", "report.html", "junit.xml", "fingerprint.json"):
        assert (merged_dir / name).is_file(), name
    merged_fp = json.loads((merged_dir / "fingerprint.json").read_text())
    assert merged_fp["shards"] == "1/2, 2/2" and merged_fp["shard"] == ""
    assert "shardcase.cached_unexpected" in (merged_dir / "summary.md").read_text()


def test_shards_partition_every_name_once_and_do_not_move() -> None:
    names = [f"family.case_{i}" for i in range(500)]
    for count in (1, 2, 3, 7):
        shards = [parse_shard(f"{i}/{count}") for i in range(1, count + 1)]
        assert all(sum(s.holds(n) for s in shards) == 1 for n in names)
        sizes = [sum(s.holds(n) for n in names) for s in shards]
        assert min(sizes) > 500 / count * 0.7  # a hash spreads names; no shard is starved
    # The same name lands in the same shard in every process (sha256, not Python's salted hash()).
    assert shard_index("moe_combine.bf16_fixed", 4) == shard_index("moe_combine.bf16_fixed", 4)
    assert [shard_index(f"n{i}", 3) for i in range(6)] == [
        int.from_bytes(__import__("hashlib").sha256(f"n{i}".encode()).digest()[:8], "big") % 3 + 1
        for i in range(6)
    ]


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "a/b", "1", "-1/2"])
def test_bad_shard_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--shard"):
        parse_shard(text)


def test_bad_shard_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["verify", "--shard", "3/2"])
    assert exit_info.value.code == 2
    assert "--shard" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- refusals


def _fake_run(path: Path, cases: list[str], **fp: str) -> Path:
    path.mkdir(parents=True)
    header = (
        "case,family,backend,device,pattern,replay,seed_a,seed,eager_error,graph_error,row_verdict,verdict,"
    )
    header += "expected,status\n"
    lines = [f"{c},fam,cpu,cpu,0xff,0,0,1,0.001,0.001,pass,pass,pass,ok\n" for c in cases]
    (path / "results.csv").write_text(header + "".join(lines))
    base = {"backend": "cpu", "gpu_name": "n/a", "source_digest": "abc", "shard": ""}
    fingerprint.write(path, base | fp)
    return path


def test_merge_refuses_a_case_in_two_inputs(tmp_path: Path) -> None:
    a = _fake_run(tmp_path / "a", ["x", "y"])
    b = _fake_run(tmp_path / "b", ["y", "z"])
    with pytest.raises(MergeError, match="'y' is in both"):
        merge_runs([a, b], tmp_path / "out")


def test_merge_refuses_mixed_platforms_unless_told(tmp_path: Path) -> None:
    a = _fake_run(tmp_path / "a", ["x"])
    b = _fake_run(tmp_path / "b", ["y"], backend="gpu", gpu_name="NVIDIA H200", gpu_arch="sm_90")
    with pytest.raises(MergeError, match="platforms"):
        merge_runs([a, b], tmp_path / "out")
    merged = merge_runs([a, b], tmp_path / "out", allow_mixed_platforms=True)
    assert merged.complete and "nvidia-h200-sm_90" in merged.notes[0]  # allowed: said, not incomplete


def test_merge_refuses_different_sources(tmp_path: Path) -> None:
    a = _fake_run(tmp_path / "a", ["x"])
    b = _fake_run(tmp_path / "b", ["y"], source_digest="def")
    with pytest.raises(MergeError, match="source_digest"):
        merge_runs([a, b], tmp_path / "out")


def test_merge_refuses_missing_or_repeated_shards(tmp_path: Path) -> None:
    a = _fake_run(tmp_path / "a", ["x"], shard="1/3")
    b = _fake_run(tmp_path / "b", ["y"], shard="3/3")
    with pytest.raises(MergeError, match="2/3 are missing"):
        merge_runs([a, b], tmp_path / "out")
    merged = merge_runs([a, b], tmp_path / "out", allow_missing_shards=True)
    assert merged.notes == ["shards 2/3 are missing: their cases are not in this report"]
    write_reports(merged.out, merged.fingerprint, notes=merged.notes)
    for name in ("summary.md", "report.html"):  # every report says so, the page too
        assert "shards 2/3 are missing" in (merged.out / name).read_text(), name
    c = _fake_run(tmp_path / "c", ["z"], shard="1/3")
    with pytest.raises(MergeError, match="shard 1/3 is in both"):
        merge_runs([a, c], tmp_path / "out2")
    d = _fake_run(tmp_path / "d", ["w"], shard="2/2")
    with pytest.raises(MergeError, match="different splits"):
        merge_runs([a, d], tmp_path / "out3")


def test_merge_cli_exit_2_names_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _fake_run(tmp_path / "a", ["x"])
    assert main(["report", "merge", str(a), str(a), "--out", str(tmp_path / "o")]) == 2
    assert "'x' is in both" in capsys.readouterr().err
    assert main(["report", "merge", str(tmp_path / "nothing"), "--out", str(tmp_path / "o2")]) == 2


def test_nightly_takes_a_baseline_path(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "run", ["x"])
    baseline = _fake_run(tmp_path / "base", ["x"]) / "results.csv"
    assert main(["report", "nightly", str(run), "--baseline", str(baseline)]) == 0
    missing = tmp_path / "baselines"
    missing.mkdir()
    assert main(["report", "nightly", str(run), "--baseline", str(missing)]) == 1  # no cpu.csv there
    (missing / "cpu.csv").write_text(baseline.read_text())
    assert main(["report", "nightly", str(run), "--baseline", str(missing)]) == 0


def test_a_shard_that_stopped_early_makes_the_merge_incomplete(tmp_path: Path) -> None:
    """The shard's INCOMPLETE status line (ResultsWriter.close on SIGTERM) carries into the merged run."""
    from graphsafe.records import Result, Row
    from graphsafe.reports.results import ResultsWriter

    def result(name: str) -> Result:
        row = Row(case=name, family="f", backend="cpu", device="cpu", pattern="0xff", replay=0, seed_a=0, seed=1,
                  eager_error=0.0, graph_error=0.0, graph_vs_eager=0.0, threshold=0.01, bit_exact=False,
                  nonfinite=0, poisoned=0, row_verdict="pass")  # fmt: skip
        return Result(name, "pass", "pass", "cpu", [row])

    for index, (names, stop) in enumerate(((["a", "b"], None), (["c"], "SIGTERM")), 1):
        writer = ResultsWriter(tmp_path / f"s{index}", planned=[*names, *(["d"] if stop else [])])
        for name in names:
            writer.add(result(name))
        writer.close(stop)
        fingerprint.write(
            tmp_path / f"s{index}", {"backend": "cpu", "source_digest": "x", "shard": f"{index}/2"}
        )
    merged = merge_runs([tmp_path / "s1", tmp_path / "s2"], tmp_path / "m")
    assert not merged.complete and "never ran" in merged.stopped_early
    write_reports(merged.out, merged.fingerprint, notes=merged.notes)
    summary = (tmp_path / "m" / "summary.md").read_text()
    assert summary.startswith("# graphsafe: INCOMPLETE run:") and "`d`" in summary
    assert (tmp_path / "m" / "results.csv").read_text().startswith("# graphsafe run INCOMPLETE")
    assert (
        main(["report", "merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m2")])
        == 1
    )
