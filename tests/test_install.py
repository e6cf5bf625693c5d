"""An installed graphsafe beside a user's own packages: a wheel built from this checkout, installed into a fresh
virtual environment, used from a separate repository that has its own `kernels` and `cases` packages.

The fresh environment reuses the torch, pytest and the rest of the environment running these tests (a .pth
file adds a view of its site-packages without any graphsafe installed there), so nothing is downloaded. Every
command runs without PYTHONPATH, so nothing of this checkout is importable except through the wheel, and with
GRAPHSAFE_CACHE_DIR in a temporary directory, so kernel builds can be seen landing there and not in
site-packages.

The user's case file has a correct op, its negative control (a Python-side cache frozen at input A: expects and
gets `stale_replay`) and the same buggy op claiming `pass`, which must fail: a run where everything passed
could not tell a working install from one that checks nothing.

A second user repository adopts graphsafe the way the README tells: its own `harness`, `kernels` and `cases`
packages, a pyproject.toml whose [tool.graphsafe] table lists its case file and its baseline folder, and a
plain test of its own. There `graphsafe --version` works, `graphsafe verify` with no --case runs the table's
cases (a module caching a tensor in an attribute fails), verify -> report baseline -> report nightly leaves
site-packages byte for byte as installed, and `pytest tests/test_plain.py` runs that file alone without
importing torch at start-up.
"""

from __future__ import annotations

import ast
import csv
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# What a wheel is built from: the sdist's contents.
PACKAGING_INPUTS = (
    "pyproject.toml",
    "README.md",
    "harness",
    "kernels",
    "cases",
)
CHECKOUT_NAMES = ("harness", "kernels", "cases")
NATIVE_SUFFIXES = (".hip", ".h", ".cpp")

USER_KERNELS = '''
"""The user's own kernels package: graphsafe must not shadow it."""
import torch

OWNER = "user_repo"
_scale_by_weight = {}


def silu(x):
    return x * torch.sigmoid(x)


def scale_fixed(x, w):
    return x * w.abs().max()


def scale_cached(x, w):
    # The bug: a host-side cache keyed by the weight tensor, filled once; replay keeps input A's scale.
    if id(w) not in _scale_by_weight or _scale_by_weight[id(w)][0] is not w:
        _scale_by_weight[id(w)] = (w, w.abs().max())
    return x * _scale_by_weight[id(w)][1]
'''

USER_CASES = """
import torch

import cases
import kernels
from graphsafe import Case, register

# graphsafe shadows neither of the user's packages.
assert kernels.OWNER == "user_repo" and cases.OWNER == "user_repo", (kernels.__file__, cases.__file__)


def make_inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(64, generator=g).to(device), "w": torch.randn(64, generator=g).to(device)}


def silu_inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(256, generator=g).to(device)}


register(Case(name="user_silu", make_inputs=silu_inputs, op=kernels.silu,
              reference=lambda x: torch.nn.functional.silu(x.double()).to(x.dtype)))
register(Case(name="user_scale_fixed", make_inputs=make_inputs, op=kernels.scale_fixed))
register(Case(name="user_scale_cached_control", make_inputs=make_inputs, op=kernels.scale_cached,
              expect="stale_replay"))
register(Case(name="user_scale_cached_claims_pass", make_inputs=make_inputs, op=kernels.scale_cached,
              expect="pass"))
"""

# The adopting repository: its own generic top-level packages, a table, a plain test.
ADOPTER_KERNELS = '''
"""The adopter's own kernels package."""
import torch

OWNER = "adopter"


def silu(x):
    return x * torch.sigmoid(x)


class CachedScale(torch.nn.Module):
    """The bug: the weight's scale is computed on the first call and kept in an attribute."""

    def __init__(self):
        super().__init__()
        self._slot_cache = None

    def forward(self, x, w):
        if self._slot_cache is None:
            self._slot_cache = w.abs().max()
        return x * self._slot_cache
'''

ADOPTER_CASES = """
import torch

import cases
import harness
import kernels
from graphsafe import Case, register

# graphsafe shadows none of the adopter's packages.
assert (harness.OWNER, kernels.OWNER, cases.OWNER) == ("adopter",) * 3, (harness.__file__, kernels.__file__)


def make_inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(64, generator=g).to(device), "w": torch.randn(64, generator=g).to(device)}


def silu_inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(256, generator=g).to(device)}


register(Case(name="adopter_silu", make_inputs=silu_inputs, op=kernels.silu,
              reference=lambda x: torch.nn.functional.silu(x.double()).to(x.dtype)))
register(Case(name="adopter_scale_fixed", make_inputs=make_inputs, op=lambda x, w: x * w.abs().max()))
register(Case(name="adopter_attribute_cache", make_inputs=make_inputs, op=kernels.CachedScale()))
"""

ADOPTER_PYPROJECT = """
[project]
name = "adopter"
version = "1.0"

[tool.graphsafe]
cases = ["graph_cases.py"]
backend = "cpu"
baseline = "ci/graphsafe-baselines"
"""

ADOPTER_PLAIN_TEST = """
import sys


def test_plain():
    assert "torch" not in sys.modules, "torch was imported at pytest start-up"
"""

EXPECTED_USER_VERDICTS = {
    "user_silu": ("pass", "pass"),
    "user_scale_fixed": ("pass", "pass"),
    "user_scale_cached_control": ("stale_replay", "stale_replay"),
    "user_scale_cached_claims_pass": ("stale_replay", "pass"),  # (verdict, expected): the one failure
}


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _ok(run: subprocess.CompletedProcess[str], returncode: int = 0) -> subprocess.CompletedProcess[str]:
    assert run.returncode == returncode, f"exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    return run


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("install")


@pytest.fixture(scope="module")
def checkout_copy(workdir: Path) -> Path:
    """The packaging inputs of this checkout, without build outputs or caches (a clean checkout)."""
    copy = workdir / "checkout"
    copy.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "_build", "*.so", "*.pyc", "*.egg-info")
    for name in PACKAGING_INPUTS:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=ignore)
        else:
            shutil.copy2(source, copy / name)
    return copy


def _clean_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST_", "GRAPHSAFE_"))}
    env["GRAPHSAFE_CACHE_DIR"] = str(workdir / "cache")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


@pytest.fixture(scope="module")
def wheel(checkout_copy: Path, workdir: Path) -> Path:
    """Built as `python -m build` builds it: an sdist of the checkout, then a wheel from the unpacked sdist (so
    the sdist must carry everything the build needs, the build hook included)."""
    env = _clean_env(workdir)
    dist = workdir / "dist"
    sdist = "from setuptools import build_meta; import sys; print(build_meta.build_sdist(sys.argv[1]))"
    name = _ok(_run([sys.executable, "-c", sdist, str(dist)], checkout_copy, env)).stdout.split()[-1]
    shutil.unpack_archive(dist / name, workdir / "sdist")
    (unpacked,) = (workdir / "sdist").iterdir()
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    _ok(_run([*command, "-w", str(dist), str(unpacked)], workdir, env))
    (built,) = dist.glob("graphsafe-*.whl")
    return built


def _venv(path: Path, env: dict[str, str]) -> Path:
    """A fresh venv that sees this environment's packages (torch) after its own, except any graphsafe installed
    here: two graphsafe distributions on one path would each offer their entry points."""
    _ok(_run([sys.executable, "-m", "venv", "--without-pip", str(path)], path.parent, env))
    python = path / "bin" / "python"
    own = _ok(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], path, env))
    parents = [*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    views = []
    for index, parent in enumerate(p for p in dict.fromkeys(parents) if Path(p).is_dir()):
        # A view of the parent site-packages: symlinks to everything but graphsafe's files.
        view = path.parent / f"{path.name}_parent_site_{index}"
        view.mkdir()
        for entry in Path(parent).iterdir():
            if not entry.name.startswith(("graphsafe", "__editable__")):
                (view / entry.name).symlink_to(entry)
        views.append(str(view))
    (Path(own.stdout.strip()) / "_parent_site_packages.pth").write_text("\n".join(views) + "\n")
    return python


@pytest.fixture(scope="module")
def installed(wheel: Path, workdir: Path) -> Path:
    """The venv's bin directory, with the wheel installed."""
    env = _clean_env(workdir)
    python = _venv(workdir / "venv", env)
    install = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--no-deps",
        "--no-index",
        "-q",
    ]
    _ok(_run([*install, str(wheel)], workdir, env))
    return python.parent


@pytest.fixture(scope="module")
def user_repo(workdir: Path) -> Path:
    repo = workdir / "user_repo"
    (repo / "kernels").mkdir(parents=True)
    (repo / "cases").mkdir()
    (repo / "kernels" / "__init__.py").write_text(USER_KERNELS)
    (repo / "cases" / "__init__.py").write_text('OWNER = "user_repo"\n')
    (repo / "my_cases.py").write_text(USER_CASES)
    # What a user writes for environments with PYTEST_DISABLE_PLUGIN_AUTOLOAD; must not clash with the entry point.
    (repo / "conftest.py").write_text('pytest_plugins = ["graphsafe.pytest_plugin"]\n')
    return repo


@pytest.fixture(scope="module")
def adopter_repo(workdir: Path) -> Path:
    repo = workdir / "adopter_repo"
    for package in ("harness", "kernels", "cases"):
        (repo / package).mkdir(parents=True)
        (repo / package / "__init__.py").write_text('OWNER = "adopter"\n')
    (repo / "kernels" / "__init__.py").write_text(ADOPTER_KERNELS)
    (repo / "graph_cases.py").write_text(ADOPTER_CASES)
    (repo / "pyproject.toml").write_text(ADOPTER_PYPROJECT)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_plain.py").write_text(ADOPTER_PLAIN_TEST)
    return repo


def _checkout_files(folder: str, suffixes: tuple[str, ...]) -> set[str]:
    root = REPO_ROOT / folder
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.suffix in suffixes
        and not any(part.startswith(("_build", "__pycache__", ".")) for part in p.parts)
    }


@pytest.mark.slow
def test_wheel_claims_only_the_graphsafe_name(wheel: Path) -> None:
    """Method: list and parse the wheel. Expected: only graphsafe/ and its dist-info; every module and native
    source of harness/, kernels/ and cases/ under graphsafe/; no import of a checkout name left; the console
    script, the pytest plugin and the built-in suite declared as entry points."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        texts = {n: archive.read(n).decode() for n in names if n.endswith((".py", ".txt"))}
    dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
    assert {n.split("/")[0] for n in names} == {"graphsafe", dist_info}
    assert texts[f"{dist_info}/top_level.txt"].split() == ["graphsafe"]
    prefixes = {"harness": "graphsafe/", "kernels": "graphsafe/kernels/", "cases": "graphsafe/cases/"}
    for folder, prefix in prefixes.items():
        missing = {prefix + f for f in _checkout_files(folder, (".py", *NATIVE_SUFFIXES))} - set(names)
        assert not missing, f"{folder}/ files missing from the wheel: {sorted(missing)}"
    for name, text in texts.items():
        if not name.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(text, name)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            left = [m for m in modules if m.split(".")[0] in CHECKOUT_NAMES]
            assert not left, f"{name}:{node.lineno} still imports {left}"
    entry_points = texts[f"{dist_info}/entry_points.txt"]
    assert "graphsafe = graphsafe.cli:main" in entry_points
    assert "graphsafe.pytest_plugin = graphsafe.pytest_plugin" in entry_points
    assert "builtin = graphsafe.cases" in entry_points


def _verdicts(results_csv: Path) -> dict[str, tuple[str, str]]:
    with results_csv.open() as f:
        return {row["case"]: (row["verdict"], row["expected"]) for row in csv.DictReader(f)}


@pytest.mark.slow
def test_graphsafe_verify_runs_the_users_cases_beside_their_own_packages(
    installed: Path, user_repo: Path, workdir: Path
) -> None:
    """Method: `graphsafe verify --backend cpu --case my_cases.py` in the user's repository. Expected: the
    user's kernels and cases packages are theirs (the case file asserts it), every verdict as in
    EXPECTED_USER_VERDICTS, exit 1 for the one mislabeled case."""
    env = _clean_env(workdir)
    help_text = _ok(_run([str(installed / "graphsafe"), "--help"], user_repo, env)).stdout
    assert help_text.startswith("usage: graphsafe "), help_text
    report = workdir / "verify_report"
    command = [str(installed / "graphsafe"), "verify", "--backend", "cpu", "--case", "my_cases.py"]
    _ok(_run([*command, "--report-dir", str(report)], user_repo, env), returncode=1)
    assert _verdicts(report / "results.csv") == EXPECTED_USER_VERDICTS


@pytest.mark.slow
def test_pytest_plugin_runs_the_users_cases_from_its_entry_point(
    installed: Path, user_repo: Path, workdir: Path
) -> None:
    """Method: `pytest --graphsafe-case my_cases.py` with the venv's python, the plugin found through its
    pytest11 entry point. Expected: one item per case; only the mislabeled case fails, with its verdict."""
    junit = workdir / "plugin_junit.xml"
    command = [str(installed / "python"), "-m", "pytest", "-p", "no:cacheprovider", "--graph-backend", "cpu"]
    command += ["--graphsafe-case", "my_cases.py", f"--junitxml={junit}"]
    _ok(_run(command, user_repo, _clean_env(workdir)), returncode=1)
    results = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert sorted(results) == sorted(EXPECTED_USER_VERDICTS)
    failed = {name for name, case in results.items() if case.find("failure") is not None}
    assert failed == {"user_scale_cached_claims_pass"}
    failure = results["user_scale_cached_claims_pass"].find("failure")
    assert failure is not None
    assert "user_scale_cached_claims_pass: stale_replay, expected pass" in (failure.text or "")


@pytest.mark.slow
def test_installed_graphsafe_runs_its_builtin_suite_and_builds_into_the_cache(
    installed: Path, user_repo: Path, workdir: Path
) -> None:
    """Method: `graphsafe list` and `graphsafe verify` with no --case, from the user's repository (whose own
    `cases` package must not be taken for the suite), one case of which compiles a reference kernel.
    Expected: the built-in cases are listed; the control and the kernel case get their verdicts; the kernel's
    build lands in GRAPHSAFE_CACHE_DIR and nothing new appears in the installed package."""
    env = _clean_env(workdir)
    listing = _ok(_run([str(installed / "graphsafe"), "list"], user_repo, env)).stdout
    assert "control_python_cached_value" in listing and "moe_combine." in listing
    package = next((installed.parent / "lib").glob("python*/site-packages/graphsafe"))
    before = {p for p in package.rglob("*") if "__pycache__" not in p.parts}
    report = workdir / "builtin_report"
    selected = "control_python_cached_value or moe_combine.prod.s1.0.T7K1H129.exact"
    command = [str(installed / "graphsafe"), "verify", "--backend", "cpu", "-k", selected]
    _ok(_run([*command, "--report-dir", str(report)], user_repo, env))
    assert _verdicts(report / "results.csv") == {
        "control_python_cached_value": ("stale_replay", "stale_replay"),
        "moe_combine.prod.s1.0.T7K1H129.exact": ("pass", "pass"),
    }
    assert any((workdir / "cache").iterdir()), "no kernel build in GRAPHSAFE_CACHE_DIR"
    after = {p for p in package.rglob("*") if "__pycache__" not in p.parts}
    assert after == before, f"written into site-packages: {sorted(map(str, after - before))}"


@pytest.mark.slow
def test_editable_install_serves_graphsafe_as_the_checkout(checkout_copy: Path, workdir: Path) -> None:
    """Method: `pip install -e` of the checkout (what `make setup` does) into a fresh venv, then imports from a
    folder outside it. Expected: `graphsafe`, `graphsafe.kernels` and `graphsafe.cases` are the checkout's
    harness/, kernels/ and cases/ folders; the generic names `harness`, `kernels` and `cases` are not
    importable; the console script lists the built-in suite and prints its version."""
    env = _clean_env(workdir)
    python = _venv(workdir / "venv_editable", env)
    install = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--no-deps",
        "--no-index",
        "-q",
    ]
    _ok(_run([*install, "--no-build-isolation", "-e", str(checkout_copy)], workdir, env))
    probe = (
        "import importlib.util, pathlib, graphsafe, graphsafe.kernels, graphsafe.cases\n"
        "root = pathlib.Path(__import__('sys').argv[1]).resolve()\n"
        "assert pathlib.Path(graphsafe.__file__).resolve() == root / 'harness' / '__init__.py'\n"
        "assert pathlib.Path(graphsafe.kernels.__file__).resolve() == root / 'kernels' / '__init__.py'\n"
        "assert pathlib.Path(graphsafe.cases.__file__).resolve() == root / 'cases' / '__init__.py'\n"
        "assert [n for n in ('harness', 'kernels', 'cases') if importlib.util.find_spec(n)] == []\n"
    )
    _ok(_run([str(python), "-c", probe, str(checkout_copy)], workdir, env))
    listing = _ok(_run([str(python.parent / "graphsafe"), "list", "-k", "control_python"], workdir, env))
    assert "control_python_cached_value" in listing.stdout
    version = _ok(_run([str(python.parent / "graphsafe"), "--version"], workdir, env)).stdout
    assert re.fullmatch(r"graphsafe \d+\.\d+\.\d+\S*\n", version), version


def _site_packages(installed: Path) -> Path:
    return next((installed.parent / "lib").glob("python*/site-packages"))


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `folder` with its size and modification time (compiled bytecode included)."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size if p.is_file() else -1, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


@pytest.mark.slow
def test_an_adopting_repository_runs_its_table_and_writes_only_there(
    installed: Path, adopter_repo: Path, workdir: Path
) -> None:
    """Method: in the adopter's repository, `graphsafe --version`; `graphsafe verify` with no --case nor
    --report-dir; a passing run (-k) into a report folder, `report baseline` (no --baseline: the table's),
    a second passing run and `report nightly`; site-packages snapshotted before and after.
    Expected: the version line; the table's three cases run, into graphsafe-runs/ under the repository; the
    attribute-caching module gets stale_replay where it claims pass (exit 1); the passing run ends with its
    summary line; the baseline lands in the table's folder; the nightly finds no regression; not one file
    under site-packages was added, removed or changed."""
    env = _clean_env(workdir)
    graphsafe = str(installed / "graphsafe")
    version = _ok(_run([graphsafe, "--version"], adopter_repo, env)).stdout
    assert re.fullmatch(r"graphsafe \d+\.\d+\.\d+\S*\n", version), version
    site_packages = _site_packages(installed)
    before = _snapshot(site_packages)

    failing = _ok(_run([graphsafe, "verify"], adopter_repo, env), returncode=1)
    (run_dir,) = (adopter_repo / "graphsafe-runs").iterdir()
    assert _verdicts(run_dir / "results.csv") == {
        "adopter_silu": ("pass", "pass"),
        "adopter_scale_fixed": ("pass", "pass"),
        "adopter_attribute_cache": ("stale_replay", "pass"),
    }
    # The finding names the attribute that carried state and how much the output differs; one summary line.
    assert "FAIL adopter_attribute_cache: stale_replay, expected pass" in failing.stdout, failing.stdout
    assert re.search(r"carried state: \S*_slot_cache", failing.stdout), failing.stdout
    assert "Mismatched elements: " in failing.stdout and "Greatest absolute difference: " in failing.stdout
    assert re.search(r"^graphsafe: 1 failed, 2 passed in \S+; report: graphsafe-runs/", failing.stdout, re.M)

    passing = _ok(
        _run([graphsafe, "verify", "-k", "not attribute", "--report-dir", "night1"], adopter_repo, env)
    )
    # A passing run prints its summary line alone, not a row per case.
    assert re.fullmatch(r"graphsafe: 2 passed in \S+; report: night1\n", passing.stdout), passing.stdout
    written = _ok(_run([graphsafe, "report", "baseline", "night1"], adopter_repo, env)).stdout
    baseline_file = adopter_repo / "ci" / "graphsafe-baselines" / "cpu.csv"
    assert baseline_file.is_file() and str(baseline_file.relative_to(adopter_repo)) in written, written
    _ok(_run([graphsafe, "verify", "-k", "not attribute", "--report-dir", "night2"], adopter_repo, env))
    nightly = _ok(_run([graphsafe, "report", "nightly", "night2"], adopter_repo, env))
    assert "no regression" in nightly.stdout

    after = _snapshot(site_packages)
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    assert (sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys()), changed) == (
        [],
        [],
        [],
    )


@pytest.mark.slow
def test_pytest_in_an_adopting_repository_runs_only_the_file_given_without_torch(
    installed: Path, adopter_repo: Path, workdir: Path
) -> None:
    """Method: `pytest tests/test_plain.py` with the venv's python under -X importtime, graphsafe's plugin
    loaded from its entry point and the table listing the case file. Expected: that one test runs (its own
    assertion: torch not in sys.modules), none of the table's cases; pytest's header lists graphsafe's
    plugin and the import log has no torch. Then `pytest` without paths collects the table's cases as well."""
    env = _clean_env(workdir)
    python = str(installed / "python")
    command = [
        python,
        "-X",
        "importtime",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-v",
        "tests/test_plain.py",
    ]
    run = _ok(_run(command, adopter_repo, env))
    assert "collected 1 item" in run.stdout and "1 passed" in run.stdout, run.stdout
    assert "adopter_silu" not in run.stdout, run.stdout
    assert re.search(r"^plugins: .*\bgraphsafe-\d", run.stdout, re.M), run.stdout  # the plugin is loaded
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if "|" in line}
    assert not {m for m in imported if m == "torch" or m.startswith("torch.")}
    listing = _ok(_run([python, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q"], adopter_repo, env))
    collected = sorted(line.rsplit("::", 1)[-1] for line in listing.stdout.splitlines() if "::" in line)
    assert collected == ["adopter_attribute_cache", "adopter_scale_fixed", "adopter_silu", "test_plain"]
