"""graphsafe's pytest plugin: each registered case of a case file becomes one test item.

    pytest --graphsafe-case my_cases.py [--graphsafe-case other.py] [--graph-backend cpu|gpu|auto]

or listed once for the repository: `cases = ["my_cases.py"]` in pyproject.toml's [tool.graphsafe] table (the
table `graphsafe verify` reads, graphsafe.config; its `backend` is --graph-backend's default), or
`graphsafe_cases = my_cases.py other.py` in pytest.ini / [tool.pytest.ini_options] (paths relative to that
file). An installed graphsafe registers the plugin through its `pytest11` entry point, named
`graphsafe.pytest_plugin` like the module (`-p no:graphsafe.pytest_plugin` turns it off), so a conftest.py's
`pytest_plugins = ["graphsafe.pytest_plugin"]`, needed where PYTEST_DISABLE_PLUGIN_AUTOLOAD is set, is a
no-op where the entry point already loaded it. This repository's conftest.py loads it from the checkout.

The plugin stays out of the way: nothing of it runs unless asked. --graphsafe-case always collects its cases;
the configured ones are collected when pytest collects without paths (its testpaths or the working
directory) or when a path given names a configured case file or a folder holding one, so
`pytest tests/test_other.py` runs that file alone. Nothing imports torch until cases are collected.

An item runs the differential replay protocol (`graphsafe.check`) on its case and passes when the verdict equals
the case's `expect`; otherwise it fails with the case's finding in plain text, the same lines `graphsafe verify`
prints and summary.md shows (graphsafe.findings: which output, how much, what carried state, the likely cause
and what to try, the reproduce command), then one row per pattern and replay. A case whose `requires` this machine or
backend does not meet is skipped with the reason. Items carry the marker `graphsafe` and the case's family as
a keyword, so pytest's own `-k`, `-m`, `--junitxml` and `-n` (pytest-xdist) apply; with the gpu backend, each
xdist worker takes one GPU as its current device (worker i of a box with N GPUs gets GPU i mod N).

Cases that expect `crash` or `timeout` kill or stall the process running them by design, so they run in a
worker process (graphsafe.runner), as `verify` runs every case; the others run in the pytest process.

The plugin also registers graphsafe's Hypothesis profiles (graphsafe.profiles): graphsafe-dev (10 examples),
graphsafe-ci (25, derandomized) and graphsafe-nightly (500), when a run names one (HYPOTHESIS_PROFILE or
--hypothesis-profile) or Hypothesis is imported already; `HYPOTHESIS_PROFILE=<one of them>` loads it.
Otherwise the plugin neither imports Hypothesis nor touches its settings (a conftest's
`settings.load_profile` or `--hypothesis-profile` chooses).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graphsafe import config as graphsafe_config
from graphsafe import profiles

HYPOTHESIS_PROFILES = profiles.NAMES
# At import, like a conftest.py: hypothesis's --hypothesis-profile (applied at configure time) still wins.
if os.environ.get(profiles.ENV) in HYPOTHESIS_PROFILES:
    from hypothesis import settings

    profiles.register()
    settings.load_profile(os.environ[profiles.ENV])

PROCESS_KILLING_VERDICTS = ("crash", "timeout")
MARKER = "graphsafe"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphsafe", "graphsafe graph-replay safety cases")
    group.addoption(
        "--graphsafe-case",
        action="append",
        default=[],
        dest="graphsafe_cases",
        metavar="FILE_OR_MODULE",
        help="collect one test per case registered by this case file or module (repeatable)",
    )
    group.addoption(
        "--graph-backend",
        default=None,
        choices=graphsafe_config.BACKENDS,
        help="graph backend for graphsafe cases (auto: the GPU when present, else the cpu backend; default: "
        "[tool.graphsafe] backend, else auto)",
    )
    parser.addini(
        "graphsafe_cases",
        type="args",
        default=[],
        help="case files (relative to this ini file) or modules to collect, as --graphsafe-case does",
    )


@pytest.hookimpl(tryfirst=True)  # before Hypothesis's own, which loads --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: a graphsafe case run through the graph-replay protocol")
    named = str(config.getoption("hypothesis_profile", None) or "")
    if named in HYPOTHESIS_PROFILES or "hypothesis" in sys.modules:
        profiles.register()


def _settings(config: pytest.Config) -> graphsafe_config.Settings:
    """[tool.graphsafe] as found from the invocation directory (read once per session)."""
    cached = config.stash.get(_SETTINGS_KEY, None)
    if cached is None:
        try:
            cached = graphsafe_config.load(config.invocation_params.dir)
        except graphsafe_config.ConfigError as exc:
            raise pytest.UsageError(f"graphsafe: {exc}") from None
        config.stash[_SETTINGS_KEY] = cached
    return cached


_SETTINGS_KEY = pytest.StashKey[graphsafe_config.Settings]()


def _backend_name(config: pytest.Config) -> str:
    """--graph-backend, else the table's backend, else auto (unresolved)."""
    return config.getoption("graph_backend") or _settings(config).backend or "auto"


def spread_xdist_workers(config: pytest.Config) -> None:
    """Under `pytest -n N`, worker gwI makes GPU I mod (the visible GPUs) its current device, and takes 1/N of
    the CPU cores for torch's threads. Called when a worker collects graphsafe cases (this repository's
    conftest.py calls it for its own tests), never at start-up: it imports torch."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    import torch

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        # N workers each starting one thread per core oversubscribe the CPU N-fold (graphsafe.runner measured it);
        # here 2 workers on 2 busy cores took many times as long for the cases one process ran quickly.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    # The current device, not CUDA_VISIBLE_DEVICES: the first torch.cuda.is_available() has initialized the
    # driver, which reads that variable once. The gpu backend runs on torch.cuda.current_device().
    if _backend_name(config) != "cpu" and torch.cuda.is_available():
        torch.cuda.set_device(int(worker[2:]) % torch.cuda.device_count())


def _resolved(source: str, base: Path) -> str:
    """A file source as an absolute path (relative to `base`); a module name as it is."""
    path = base / source
    if source.endswith(".py") or "/" in source or path.exists():
        return str(path.resolve())
    return source


def _configured_sources(config: pytest.Config) -> list[str]:
    """The ini's graphsafe_cases (relative to the ini file), then [tool.graphsafe] cases."""
    ini_base = config.inipath.parent if config.inipath else config.rootpath
    sources = [_resolved(s, ini_base) for s in config.getini("graphsafe_cases")]
    return list(dict.fromkeys([*sources, *_settings(config).cases]))


def _explicit_paths(config: pytest.Config) -> list[Path] | None:
    """The paths given on the command line, resolved; None when pytest chose them (testpaths or the working
    directory) because none were given."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return None
    base = config.invocation_params.dir
    return [(base / arg.split("::", 1)[0]).resolve() for arg in config.args]


def _asked_for(source: str, paths: list[Path] | None) -> bool:
    """A configured source runs when pytest collects without paths, or a path given is its file or a folder
    holding it; a module source only in the first case."""
    if paths is None:
        return True
    if not source.startswith(os.sep):
        return False
    file = Path(source)
    return any(file == p or p in file.parents for p in paths)


def _case_sources(config: pytest.Config) -> list[str]:
    """The sources this session collects: --graphsafe-case values (relative to the invocation directory),
    then the configured ones that were asked for (_asked_for)."""
    explicit = [_resolved(s, config.invocation_params.dir) for s in config.getoption("graphsafe_cases")]
    paths = _explicit_paths(config)
    asked = [s for s in _configured_sources(config) if _asked_for(s, paths)]
    return list(dict.fromkeys([*explicit, *asked]))


def _case_files(config: pytest.Config) -> set[str]:
    return set(_case_sources(config)) | set(_configured_sources(config))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # A case file named test_*.py would be imported twice (as a test module and as a case file), registering
    # each case twice; the plugin alone collects it, whether or not this session runs its cases.
    return True if str(collection_path.resolve()) in _case_files(config) else None


class _CollectedAsCases(pytest.File):
    """A case file given as a path on the command line (pytest ignores no path it was given): never imported
    as a test module; its cases come from pytest_collection_modifyitems like every case source's."""

    def collect(self) -> list[pytest.Item]:
        return []


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.File | None:
    if str(module_path.resolve()) in _case_files(parent.config):
        return _CollectedAsCases.from_parent(parent, path=module_path)
    return None


class CaseSource(pytest.File):
    """A case file or module: its registered cases are the children."""

    def __init__(self, *, source: str, cases: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.cases = cases

    def collect(self) -> Iterator[CaseItem]:
        for case in self.cases:
            # A worker process (crash/timeout cases) and `repro` load the case's file or module again.
            yield CaseItem.from_parent(self, name=case.name, case=case, sources=[self.source])


class CaseVerdictError(AssertionError):
    """The case got a verdict other than the one it expects; the message is its report block, plain text."""


class CaseItem(pytest.Item):
    def __init__(self, *, case: Any, sources: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from graphsafe.selection import keywords

        self.case = case
        self.sources = sources
        self.add_marker(MARKER)
        self.extra_keyword_matches.update(keywords(case))

    def _backend(self) -> str:
        from graphsafe.backends import resolve_backend_name

        return resolve_backend_name(_backend_name(self.config))

    def runtest(self) -> None:
        result = run_case(self.case, self._backend(), self.sources)
        if result.verdict != self.case.expect:
            raise CaseVerdictError(failure_text(result, self.sources))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        from graphsafe.errors import CaseError

        # One clear message, not the harness's stack.
        if isinstance(excinfo.value, CaseVerdictError | CaseError):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, _definition_line(self.path, self.case.name), f"graphsafe case {self.case.name}"


def _definition_line(path: Path, name: str) -> int:
    """0-based line of the first quoted occurrence of the case's name in its file (0 when it is computed)."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return 0
    quoted = (f'"{name}"', f"'{name}'")
    return next((i for i, line in enumerate(lines) if any(q in line for q in quoted)), 0)


def run_case(case: Any, backend: str, sources: list[str]) -> Any:
    """One case's Result: in this process (its changes to the process state put back after it, a failure of
    its own code its verdict: graphsafe.case_run), or in a worker process for cases expected to kill theirs."""
    from graphsafe import case_run

    if case.expect not in PROCESS_KILLING_VERDICTS:
        return case_run.run_case(case, backend).result
    from graphsafe.runner import RunOptions, run_isolated

    results: list[Any] = []
    run_isolated([case], sources, RunOptions(backend=backend), jobs=1, devices=0, on_result=results.append)
    return results[0]


def failure_text(result: Any, sources: list[str]) -> str:
    """The case's failure in plain text, as `graphsafe verify` prints it (graphsafe.findings.failure_block:
    heading, finding, reproduce command), then its replay table with aligned columns."""
    import pandas as pd

    from graphsafe.findings import failure_block
    from graphsafe.reports.results import normalize
    from graphsafe.reports.tables import failure_section, summarize_case

    status = "ok" if result.ok else "FAIL"
    frame = pd.DataFrame(
        [
            {
                **dataclasses.asdict(row),
                "verdict": result.verdict,
                "expected": result.expected,
                "status": status,
            }
            for row in result.rows
        ]
    )
    rows = normalize(frame)
    section = failure_section(summarize_case(rows), rows, sources)
    lines = failure_block(result.case, result.verdict, result.expected, [], section.repro, section.finding)
    table = [section.table.header, *section.table.rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines.append("")
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join(lines)


@pytest.hookimpl(tryfirst=True)  # before pytest's -k/-m deselection, which must see these items
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    sources = _case_sources(config)
    if not sources:
        return
    from graphsafe.backends import resolve_backend_name
    from graphsafe.case import CaseFileError, load_case_source
    from graphsafe.errors import BackendUnavailable, CaseError
    from graphsafe.requirements import unmet

    spread_xdist_workers(config)
    _settings(config).put_case_modules_on_path()
    try:
        backend = resolve_backend_name(_backend_name(config))
    except BackendUnavailable as exc:
        raise pytest.UsageError(f"graphsafe: {exc}") from exc
    collected: list[CaseItem] = []
    for source in sources:
        try:
            cases = load_case_source(source)
        except (CaseError, CaseFileError) as exc:
            raise pytest.UsageError(f"graphsafe: {exc}") from exc
        path = Path(source) if source.endswith(".py") else Path(sys.modules[source].__file__ or source)
        node = CaseSource.from_parent(session, path=path, source=source, cases=cases)
        case_items = list(node.collect())
        reported: list[pytest.Item | pytest.Collector] = [*case_items]
        # Reported like any collected file, so "collected N items", --collect-only and -n count these items.
        config.hook.pytest_collectreport(report=pytest.CollectReport(node.nodeid, "passed", None, reported))
        collected.extend(case_items)
    for item in collected:
        # A skip mark, not a skip raised at run time, so the report points at the case's file and line.
        reason = unmet(item.case.requires, backend)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
    items[:0] = collected


@pytest.fixture
def graph_backend(request: pytest.FixtureRequest) -> str:
    """The resolved backend name ("cpu" or "gpu") that --graph-backend selects, for tests of one's own."""
    from graphsafe.backends import resolve_backend_name

    return resolve_backend_name(_backend_name(request.config))


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    """A case file given as a plain path collects nothing (its cases are not test functions): say how to run it
    instead of a bare "no tests ran"."""
    sources = set(_case_sources(config))
    collected = {str(Path(str(item.path)).resolve()) for item in items if getattr(item, "path", None)}
    hints = []
    for arg in config.args:
        path = Path(arg.split("::")[0])
        if path.suffix != ".py" or not path.is_file() or str(path.resolve()) in sources | collected:
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "register(" in text and "Case(" in text:
            hints.append(
                f"graphsafe: {arg} registers graphsafe cases, which pytest does not collect from a plain path: "
                f"run `pytest --graphsafe-case {arg}` (or list it in pyproject.toml's [tool.graphsafe] cases)"
            )
    return hints
