"""The pytest plugin (harness/pytest_plugin.py) from this checkout, run as a user would run it: a separate pytest
process in a temporary repository with a case file of its own.

The case file holds a correct op, its negative control (a Python-side cache, frozen at input A: expects and
gets `stale_replay`), the same buggy op claiming `pass` (must fail, with the summary's text), and a case that
requires an sm_90 GPU (must skip with the reason). Inner runs load the plugin through its pytest11 entry point,
which `make setup`'s editable install points at this checkout; tests/test_install.py covers a wheel's.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import settings

from graphsafe import pytest_plugin

REPO_ROOT = Path(__file__).resolve().parent.parent

CASE_FILE = """
import torch
from graphsafe import Case, register


def make_inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(64, generator=g).to(device), "w": torch.randn(64, generator=g).to(device)}


_scale_by_weight = {}


def cached_scale(x, w):
    # The bug: a host-side cache keyed by the weight tensor, filled once; replay keeps input A's scale.
    if id(w) not in _scale_by_weight or _scale_by_weight[id(w)][0] is not w:
        _scale_by_weight[id(w)] = (w, w.abs().max())
    return x * _scale_by_weight[id(w)][1]


register(Case(name="scale_fixed", make_inputs=make_inputs, op=lambda x, w: x * w.abs().max()))
register(Case(name="scale_cached_control", make_inputs=make_inputs, op=cached_scale, expect="stale_replay"))
register(Case(name="scale_cached_claims_pass", make_inputs=make_inputs, op=cached_scale, expect="pass"))
register(Case(name="scale_needs_h100", make_inputs=make_inputs, op=lambda x, w: x * w, requires=("gpu", "sm_90")))
"""


def _user_repo(tmp_path: Path, case_file_name: str = "my_cases.py") -> Path:
    repo = tmp_path / "user_repo"
    repo.mkdir()
    (repo / case_file_name).write_text(CASE_FILE)
    return repo


def _pytest(repo: Path, *args: str, import_root: Path | None = None) -> subprocess.CompletedProcess[str]:
    """pytest in `repo` with graphsafe's plugin (its entry point: the editable install serves this checkout); `import_root` goes on PYTHONPATH too (module sources)."""
    env = dict(os.environ)
    roots = [str(import_root or ""), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, roots))
    env.pop("PYTEST_XDIST_WORKER", None)  # the inner session is not a worker of the outer one
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    command = [
        sys.executable,
        "-m",
        "pytest",
    ]
    command += ["-p", "no:cacheprovider", "--graph-backend", "cpu", *args]
    return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def _junit_cases(path: Path) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in ET.parse(path).getroot().iter("testcase")}


@pytest.mark.slow
def test_one_item_per_case_verdicts_skips_junit_and_xdist(tmp_path: Path) -> None:
    """Method: run the user's case file with -n 2 and --junitxml. Expected: the fix and the control pass, the
    mislabeled buggy op fails with its finding in plain text, the sm_90 case skips with its reason, exit code 1."""
    repo = _user_repo(tmp_path)
    junit = tmp_path / "junit.xml"
    run = _pytest(repo, "--graphsafe-case", "my_cases.py", "-n", "2", f"--junitxml={junit}", "-rs")
    assert run.returncode == 1, run.stdout + run.stderr
    cases = _junit_cases(junit)
    assert sorted(cases) == sorted(
        ["scale_fixed", "scale_cached_control", "scale_cached_claims_pass", "scale_needs_h100"]
    )
    assert [c.tag for c in cases["scale_fixed"]] == []
    assert [c.tag for c in cases["scale_cached_control"]] == []
    failure = cases["scale_cached_claims_pass"].find("failure")
    assert failure is not None
    text = failure.text or ""
    # The finding in plain text, as `graphsafe verify` prints it, then the replay table: no Markdown.
    assert "FAIL scale_cached_claims_pass: stale_replay, expected pass" in text
    assert "output 0 (of 1): shape" in text and "likely cause -> what to try: " in text
    assert "reproduce: graphsafe repro scale_cached_claims_pass" in text and "graph error" in text
    assert "`" not in text and "| " not in text
    skipped = cases["scale_needs_h100"].find("skipped")
    assert skipped is not None and "requires gpu" in (skipped.get("message") or ""), run.stdout


def _collected(run: subprocess.CompletedProcess[str]) -> list[str]:
    assert run.returncode == 0, run.stdout + run.stderr
    return sorted(line.rsplit("::", 1)[-1] for line in run.stdout.splitlines() if "::" in line)


def test_pytest_k_and_m_select_case_items(tmp_path: Path) -> None:
    """Method: --collect-only with pytest's own -k and -m. Expected: the expressions select by case name."""
    repo = _user_repo(tmp_path)
    by_k = _pytest(
        repo, "--graphsafe-case", "my_cases.py", "--collect-only", "-q", "-k", "cached and not claims"
    )
    assert _collected(by_k) == ["scale_cached_control"]
    by_m = _pytest(repo, "--graphsafe-case", "my_cases.py", "--collect-only", "-q", "-m", "not graphsafe")
    assert by_m.returncode == 5, by_m.stdout + by_m.stderr  # pytest's "no tests collected"


def test_ini_option_and_a_test_named_case_file_collect_each_case_once(tmp_path: Path) -> None:
    """Method: `graphsafe_cases` in pytest.ini naming a file pytest would also collect as a test module.
    Expected: each case collected once (the file is not imported twice, which would register every case
    twice and fail)."""
    repo = _user_repo(tmp_path, case_file_name="test_my_cases.py")
    (repo / "pytest.ini").write_text("[pytest]\ngraphsafe_cases = test_my_cases.py\n")
    run = _pytest(repo, "--collect-only", "-q")
    assert _collected(run) == sorted(
        ["scale_fixed", "scale_cached_control", "scale_cached_claims_pass", "scale_needs_h100"]
    )


def test_unloadable_case_file_is_a_usage_error(tmp_path: Path) -> None:
    """Method: a case file that raises at import. Expected: pytest's usage error (exit 4) naming the file."""
    repo = tmp_path / "user_repo"
    repo.mkdir()
    (repo / "broken_cases.py").write_text("raise RuntimeError('no such kernel')\n")
    run = _pytest(repo, "--graphsafe-case", "broken_cases.py", "--collect-only")
    assert run.returncode == 4
    assert "broken_cases.py" in run.stderr and "no such kernel" in run.stderr


def test_hypothesis_profiles_ship_with_the_plugin() -> None:
    """Method: read the profiles the plugin registered. Expected: graphsafe-dev, graphsafe-ci and
    graphsafe-nightly with their budgets, under graphsafe's prefix so a user's own `dev`, `ci` or `nightly`
    profile is never replaced."""
    assert set(pytest_plugin.HYPOTHESIS_PROFILES) == {"graphsafe-dev", "graphsafe-ci", "graphsafe-nightly"}
    assert settings.get_profile("graphsafe-dev").max_examples == 10
    ci = settings.get_profile("graphsafe-ci")
    assert ci.max_examples == 25 and ci.derandomize
    assert settings.get_profile("graphsafe-nightly").max_examples == 500


def test_cli_k_takes_pytest_expressions_over_names_and_families() -> None:
    """Method: compile -k patterns as the CLI does and apply them to three cases. Expected: pytest's
    and/or/not over case-insensitive substrings of the name and family; globs on the name; a broken
    expression is a ValueError naming it."""
    import torch

    from graphsafe import Case
    from graphsafe.selection import compile_selector

    def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {"x": torch.full((4,), float(seed), device=device)}

    cases = [
        Case(name="gemm_cached", make_inputs=make_inputs, op=torch.neg, family="moe_gemm"),
        Case(name="gemm_fp8", make_inputs=make_inputs, op=torch.neg, family="moe_gemm"),
        Case(name="combine/h7168", make_inputs=make_inputs, op=torch.neg, family="moe_combine"),
    ]

    def names(pattern: str) -> list[str]:
        selected = compile_selector(pattern)
        return [c.name for c in cases if selected(c)]

    assert names("not cached") == ["gemm_fp8", "combine/h7168"]
    assert names("MOE_GEMM and not fp8") == ["gemm_cached"]
    assert names("combine or fp8") == ["gemm_fp8", "combine/h7168"]
    assert names("gemm_*") == ["gemm_cached", "gemm_fp8"]
    assert names("combine/h7168") == ["combine/h7168"]
    with pytest.raises(ValueError, match="not a valid expression"):
        compile_selector("cached and (fp8")


def test_cpu_requirement_is_met_by_the_cpu_backend_only() -> None:
    from graphsafe.requirements import unmet, validate

    assert validate("t", ("cpu",)) == ("cpu",)
    assert unmet(("cpu",), "cpu") is None
    assert unmet(("cpu",), "gpu") == "requires cpu: the run uses the gpu backend"


def test_import_requirement_names_a_missing_or_too_old_library() -> None:
    """`import:X` is met where X imports (a module found without importing it, or an attribute); otherwise the
    reason names the library, and for a missing attribute its installed version."""
    from graphsafe.errors import CaseError
    from graphsafe.requirements import unmet, validate

    assert validate("t", ("import:json.decoder.JSONDecoder",)) == ("import:json.decoder.JSONDecoder",)
    assert unmet(("import:json",), "cpu") is None
    assert unmet(("import:json.decoder.JSONDecoder.decode",), "gpu") is None
    assert unmet(("import:graphsafe_no_such_lib",), "cpu") == (
        "requires import:graphsafe_no_such_lib: graphsafe_no_such_lib is not installed"
    )
    assert unmet(("import:pytest.no_such_feature",), "cpu") == (
        f"requires import:pytest.no_such_feature: pytest {pytest.__version__} has no no_such_feature"
    )
    with pytest.raises(CaseError, match=r"import:<module or module\.attribute>"):
        validate("t", ("import:not a module",))


def test_cli_skips_a_case_whose_requirements_are_unmet(tmp_path: Path) -> None:
    """Method: `graphsafe verify --backend cpu` on the case file's fix and its sm_90 case. Expected: the
    sm_90 case is named as skipped with its reason on stderr and is absent from results.csv; the fix runs."""
    repo = _user_repo(tmp_path)
    env = dict(os.environ)
    report = tmp_path / "report"
    command = [sys.executable, "-m", "graphsafe", "verify", "--backend", "cpu", "--case", "my_cases.py"]
    command += ["-k", "scale_fixed or needs_h100", "--report-dir", str(report)]
    run = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "graphsafe: skipped scale_needs_h100: requires gpu: the run uses the cpu backend" in run.stderr
    with (report / "results.csv").open() as f:
        assert {row["case"] for row in csv.DictReader(f)} == {"scale_fixed"}
    with (report / "skipped.csv").open() as f:  # listed with the reason, for the nightly comparison
        assert [(r["case"], r["reason"]) for r in csv.DictReader(f)] == [
            ("scale_needs_h100", "requires gpu: the run uses the cpu backend")
        ]


def test_module_source_and_a_crash_control_run_in_a_worker_process(tmp_path: Path) -> None:
    """Method: --graphsafe-case naming a module (not a file) that registers an op calling os.abort(), expecting
    `crash`, and a correct op. Expected: both items pass: the abort killed a worker process, not pytest."""
    repo = tmp_path / "user_repo"
    (repo / "userpkg").mkdir(parents=True)
    (repo / "userpkg" / "__init__.py").write_text("")
    (repo / "userpkg" / "crashy.py").write_text(
        "import os\nimport torch\nfrom graphsafe import Case, register\n\n\n"
        "def make_inputs(seed, device):\n"
        "    return {'x': torch.randn(8, generator=torch.Generator().manual_seed(seed)).to(device)}\n\n\n"
        "def abort_op(x):\n    os.abort()\n\n\n"
        "register(Case(name='user_abort_control', make_inputs=make_inputs, op=abort_op, expect='crash'))\n"
        "register(Case(name='user_neg', make_inputs=make_inputs, op=torch.neg))\n"
    )
    run = _pytest(repo, "--graphsafe-case", "userpkg.crashy", "-q", import_root=repo)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout


OTHER_TEST = """
import sys


def test_other():
    assert True


def test_no_torch_at_start_up():
    assert "torch" not in sys.modules, "torch was imported before this test module"
"""


def _configured_repo(tmp_path: Path) -> Path:
    """A user repository whose pyproject.toml lists its case file in [tool.graphsafe], beside a plain test."""
    repo = _user_repo(tmp_path)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_other.py").write_text(OTHER_TEST)
    (repo / "pyproject.toml").write_text('[tool.graphsafe]\ncases = ["my_cases.py"]\nbackend = "cpu"\n')
    return repo


def test_configured_cases_run_only_when_asked(tmp_path: Path) -> None:
    """Method: pytest in a repository whose [tool.graphsafe] lists its case file: without paths, with a plain
    test file, with the case file's path, with the repository folder. Expected: the cases are collected
    without paths, with the case file and with the folder holding it; `pytest tests/test_other.py` collects
    that file alone."""
    repo = _configured_repo(tmp_path)
    cases = ["scale_cached_claims_pass", "scale_cached_control", "scale_fixed", "scale_needs_h100"]
    others = ["test_no_torch_at_start_up", "test_other"]
    assert _collected(_pytest(repo, "--collect-only", "-q")) == sorted(cases + others)
    assert _collected(_pytest(repo, "--collect-only", "-q", "tests/test_other.py")) == others
    assert _collected(_pytest(repo, "--collect-only", "-q", "my_cases.py")) == cases
    assert _collected(_pytest(repo, "--collect-only", "-q", ".")) == sorted(cases + others)


def test_configured_cases_reach_xdist_workers_outside_testpaths(tmp_path: Path) -> None:
    """Method: testpaths = ["tests"] (the case file lies outside it) and `pytest -n 2` without paths.
    Expected: the case runs in a worker, as without -n: a worker gets the controller's command line (no
    paths), not its testpaths as paths, so it decides as the controller would."""
    repo = _configured_repo(tmp_path)
    (repo / "pyproject.toml").write_text(
        '[tool.graphsafe]\ncases = ["my_cases.py"]\nbackend = "cpu"\n\n'
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
    )
    run = _pytest(repo, "-n", "2", "-q", "-k", "scale_fixed or (test_other and not torch)")
    assert run.returncode == 0 and "2 passed" in run.stdout, run.stdout + run.stderr


def test_pytest_start_up_imports_no_torch(tmp_path: Path) -> None:
    """Method: run a plain test file of a configured repository under `python -X importtime`, the test itself
    asserting torch is absent from sys.modules. Expected: both pass, and the import log shows graphsafe's
    plugin loaded but no torch: a pytest run that asks nothing of graphsafe does not pay torch's import."""
    repo = _configured_repo(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    command = [sys.executable, "-X", "importtime", "-m", "pytest", "-p", "no:cacheprovider", "-v"]
    run = subprocess.run(
        [*command, "tests/test_other.py"], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    # The plugin is loaded (pytest imports it through its assertion rewriter, which the log does not show).
    assert re.search(r"^plugins: .*\bgraphsafe-\d", run.stdout, re.M), run.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if "|" in line}
    assert not {m for m in imported if m == "torch" or m.startswith("torch.")}
