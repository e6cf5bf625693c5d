"""[tool.graphsafe] (harness/config.py) and what reads it: the CLI's defaults and case sources, the run folder,
and the check of HYPOTHESIS_PROFILE before a run.

Method: write pyproject.toml files into temporary folders, load them from the folder and from a folder below
it, and run `graphsafe` in them as a user would (a subprocess in that folder).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphsafe import config

REPO_ROOT = Path(__file__).resolve().parent.parent

CASE_FILE = """
import torch
from graphsafe import Case, register


def make_inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(32, generator=g).to(device)}


register(Case(name="cfg_double", make_inputs=make_inputs, op=lambda x: x * 2.0))
"""


def _write(folder: Path, table: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(f'[project]\nname = "user"\n\n[tool.graphsafe]\n{table}\n')
    return path


def test_found_from_below_and_paths_relative_to_the_file(tmp_path: Path) -> None:
    """Method: a table with every key at the repository root, loaded from a folder two levels down that has a
    pyproject.toml of its own without the table. Expected: the root's table, passed over the inner file;
    paths resolved against the root."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "cases.py").write_text(CASE_FILE)
    _write(
        repo,
        'cases = ["tests/cases.py", "mypkg.cases"]\nbackend = "cpu"\nreplays = 5\nseed = 3\n'
        'runs-dir = "out/runs"\nbaseline = "ci/baselines"',
    )
    inner = repo / "packages" / "sub"
    inner.mkdir(parents=True)
    (inner / "pyproject.toml").write_text('[project]\nname = "sub"\n')
    settings = config.load(inner)
    root = repo.resolve()
    assert settings.path == root / "pyproject.toml"
    assert settings.cases == (str(root / "tests" / "cases.py"), "mypkg.cases")
    assert (settings.backend, settings.replays, settings.seed) == ("cpu", 5, 3)
    assert settings.runs_dir == root / "out" / "runs"
    assert settings.baseline == root / "ci" / "baselines"


def test_no_table_gives_the_defaults_in_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.ruff]\nline-length = 100\n')
    settings = config.load(tmp_path)
    assert settings.path is None and settings.cases == () and settings.backend is None
    assert settings.runs_dir == tmp_path.resolve() / "graphsafe-runs"
    assert settings.baseline == tmp_path.resolve() / "graphsafe-baselines"


def test_this_repository_runs_its_builtin_suite_with_its_own_baselines() -> None:
    """This checkout's table sets the baseline folder and no cases: `graphsafe verify` here runs the
    built-in suite."""
    settings = config.load(REPO_ROOT)
    assert settings.path == REPO_ROOT / "pyproject.toml"
    assert settings.cases == ()
    assert settings.baseline == REPO_ROOT / "reports" / "baselines"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'backnd = "cpu"',
            "unknown key 'backnd'; allowed keys: cases, backend, replays, seed, runs-dir, baseline",
        ),
        ('backend = "cuda"', "backend = 'cuda': allowed values: auto, cpu, gpu"),
        ("replays = 0", "replays = 0: must be a whole number >= 1 and <= 1000000"),
        ('replays = "3"', "replays = '3': must be a whole number"),
        ("replays = true", "replays = True: must be a whole number"),
        ("seed = -1", "seed = -1: must be a whole number >= 0"),
        ('cases = "my_cases.py"', "cases = 'my_cases.py': must be a list of case files"),
        ('cases = ["missing.py"]', "cases: 'missing.py' is not a file"),
        ('cases = ["not a module"]', "cases: 'not a module' is neither a .py file nor a module name"),
        ("baseline = 3", "baseline = 3: must be a path"),
        ('runs-dir = ""', "runs-dir = '': must be a path"),
    ],
)
def test_bad_keys_and_values_name_the_key_and_the_allowed_values(
    tmp_path: Path, table: str, message: str
) -> None:
    path = _write(tmp_path, table)
    with pytest.raises(config.ConfigError) as raised:
        config.load(tmp_path)
    assert str(path.resolve()) in str(raised.value) and "[tool.graphsafe]" in str(raised.value)
    assert message in str(raised.value)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.graphsafe\ncases = [")
    with pytest.raises(config.ConfigError, match="not valid TOML"):
        config.load(tmp_path)


def test_backend_choices_match_the_cli() -> None:
    from graphsafe.backends import BACKEND_NAMES

    assert config.BACKENDS == BACKEND_NAMES


def _graphsafe(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "graphsafe", *args]
    # Under `make nightly` the outer profile is graphsafe-nightly: these runs choose their own.
    run_env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"} | (env or {})
    return subprocess.run(command, cwd=cwd, env=run_env, capture_output=True, text=True, timeout=300)


def test_cli_exits_2_on_a_bad_table(tmp_path: Path) -> None:
    _write(tmp_path, 'backend = "tpu"')
    run = _graphsafe(tmp_path, "list")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "backend = 'tpu': allowed values: auto, cpu, gpu" in run.stderr


@pytest.mark.slow
def test_verify_without_case_runs_the_tables_cases_into_the_runs_folder(tmp_path: Path) -> None:
    """Method: a user repository whose table lists a case file (relative path) and a module, and sets the
    backend, replays, seed and runs-dir; `graphsafe list` and `graphsafe verify` with no --case from a
    sub-folder. Expected: the table's cases, not the built-in suite; the run in the table's runs-dir; the
    table's replays and seed in results.csv; a flag overrides the table's seed."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "cases.py").write_text(CASE_FILE)
    (repo / "mypkg").mkdir()
    (repo / "mypkg" / "__init__.py").write_text("")
    (repo / "mypkg" / "more_cases.py").write_text(CASE_FILE.replace("cfg_double", "cfg_module_double"))
    _write(
        repo,
        'cases = ["tests/cases.py", "mypkg.more_cases"]\nbackend = "cpu"\nreplays = 2\nseed = 7\n'
        'runs-dir = "out/runs"',
    )
    below = repo / "docs"
    below.mkdir()
    listing = _graphsafe(below, "list")
    assert listing.returncode == 0, listing.stderr
    assert sorted(line.split()[0] for line in listing.stdout.splitlines()) == [
        "cfg_double",
        "cfg_module_double",
    ]
    run = _graphsafe(below, "verify")
    assert run.returncode == 0, run.stdout + run.stderr
    (run_dir,) = (repo / "out" / "runs").iterdir()
    with (run_dir / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["case"] for r in rows} == {"cfg_double", "cfg_module_double"}
    assert {r["backend"] for r in rows} == {"cpu"} and {r["seed_a"] for r in rows} == {"7"}
    assert {int(r["replay"]) for r in rows} == {0, 1}  # replays = 2
    report = tmp_path / "flagged"
    flagged = _graphsafe(below, "verify", "--seed", "11", "-k", "cfg_double", "--report-dir", str(report))
    assert flagged.returncode == 0, flagged.stderr
    with (report / "results.csv").open() as f:
        assert {r["seed_a"] for r in csv.DictReader(f)} == {"11"}


def test_verify_refuses_an_unknown_hypothesis_profile(tmp_path: Path) -> None:
    """HYPOTHESIS_PROFILE selects the search budget; a typo must not run the default budget silently."""
    run = _graphsafe(tmp_path, "verify", "--backend", "cpu", env={"HYPOTHESIS_PROFILE": "nightlly"})
    assert run.returncode == 2, run.stdout + run.stderr
    assert "HYPOTHESIS_PROFILE='nightlly'" in run.stderr
    assert "graphsafe-dev, graphsafe-ci, graphsafe-nightly" in run.stderr and "default" in run.stderr
    known = _graphsafe(
        tmp_path, "list", "-k", "control_python_cached_value", env={"HYPOTHESIS_PROFILE": "ci"}
    )
    assert known.returncode == 0, known.stderr  # registered with Hypothesis itself
