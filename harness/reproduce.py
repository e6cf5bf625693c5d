"""Reproducing a public issue: run a counterexample module's buggy and fixed cases, print the report's table.

A counterexample module rebuilds the failure of one public report (an issue or pull request) as a small op
with a buggy and a fixed variant, registers them as cases, and declares what to print:

    REPORT = Report(
        title="FreeToken #350: CPU/hybrid MoE graph replay returns stale outputs",
        url="https://github.com/<owner>/<repo>/pull/<n>", date="2026-10-13",
        reproduced="what the module rebuilds", left_out="what the original needs that is not here",
        tables=(CaseTable(...), MeasuredTable(...)),
    )

`graphsafe repro <module>` (`make repro CASE=<module>`) loads the module the way `--case` loads a
case file (a bare name is looked up as `<suite>.counterexamples.<name>` in the configured suites), runs every
case its tables name through the protocol on the chosen backend (in a worker process, so a case that kills
its process costs one row), prints each table, then a one-line conclusion. Exit 0 iff every row that ran
is as the report says; 1 if a row is not; 2 if the module cannot be loaded, declares no REPORT, or runs
nothing on this backend (a reproduction that reproduces nothing is an error, never a silent success).
`--markdown` prints the same tables ready to paste into the issue, under one environment line.

Tables:
- CaseTable: one line per finding (or per format), each with a buggy and a fixed case; its columns pick
  metrics of the two results (eager/graph error, graph vs eager, verdict, PASS/FAIL, detail, NaN/poison
  count, threshold, expectation, whether the line is as expected). `per_replay=True` prints one row per
  replay instead, the shape of a report that lists replays. Error metrics come from the first poison
  pattern's rows; the verdicts cover every pattern and replay.
- MeasuredTable: rows the module measures itself (timings, byte counts) for claims that are not graph-safety
  verdicts; each row says whether it is as the report says (a timing is reported, never judged).
A line whose cases need a GPU (streams, a device kernel) says so in `gpu_only`; on the cpu backend it prints
as skipped with that reason.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import pkgutil
import re
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from graphsafe.backends import BACKEND_NAMES, resolve_backend_name
from graphsafe.case import REGISTRY, Case, CaseFileError, _import_file
from graphsafe.errors import CaseError
from graphsafe.protocol import DEFAULT_REPLAYS, check
from graphsafe.records import Result
from graphsafe.records import Row as ResultRow
from graphsafe.reports import fingerprint as fp_module
from graphsafe.runner import DEFAULT_DEADLINE_S, RunOptions, run_isolated
from graphsafe.verdicts import PASS

COUNTEREXAMPLE_PACKAGE = "counterexamples"  # below each configured suite (graphsafe.suites)
SIDES = ("buggy", "fixed")
# Metrics of one side's result, and metrics of a whole line.
SIDE_METRICS = ("eager error", "graph error", "graph vs eager", "verdict", "result", "detail", "nonfinite")
LINE_METRICS = ("threshold", "expected", "as expected")
DETAIL_WIDTH = 72
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class ReportError(ValueError):
    """A counterexample module's REPORT is malformed, or its module cannot be used (exit code 2)."""


@dataclass(frozen=True)
class Column:
    """One column of a CaseTable: a metric of one side (`side` "buggy" or "fixed") or of the whole line.

    `replay` picks the replay whose error a side's error metric shows (default: the worst replay)."""

    metric: str
    side: str = ""
    header: str = ""
    replay: int | None = None

    def __post_init__(self) -> None:
        if self.metric in SIDE_METRICS:
            if self.side not in SIDES:
                raise ReportError(f"Column {self.metric!r}: side must be one of {SIDES}, got {self.side!r}")
        elif self.metric in LINE_METRICS:
            if self.side:
                raise ReportError(f"Column {self.metric!r} describes the whole line; give no side")
        else:
            raise ReportError(
                f"Column metric {self.metric!r} is unknown; allowed: {', '.join(SIDE_METRICS + LINE_METRICS)}"
            )
        if self.replay is not None and (not isinstance(self.replay, int) or self.replay < 0):
            raise ReportError(f"Column {self.metric!r}: replay must be a replay index >= 0 or None")


@dataclass(frozen=True)
class Line:
    """One finding of the report: its buggy and its fixed case (either may be absent, not both)."""

    label: str
    buggy: Case | None = None
    fixed: Case | None = None
    gpu_only: str = ""  # why the line needs a GPU; non-empty: skipped on the cpu backend with this reason

    def __post_init__(self) -> None:
        for side in SIDES:
            value = getattr(self, side)
            if value is not None and not isinstance(value, Case):
                raise ReportError(f"Line {self.label!r}: {side} must be a graphsafe.Case or None")
        if self.buggy is None and self.fixed is None and not self.gpu_only:
            raise ReportError(f"Line {self.label!r} has neither a buggy nor a fixed case")

    def cases(self) -> list[tuple[str, Case]]:
        return [(side, c) for side in SIDES if (c := getattr(self, side)) is not None]


@dataclass(frozen=True)
class CaseTable:
    title: str
    lines: tuple[Line, ...]
    columns: tuple[Column, ...]
    label_header: str = "case"
    sides: tuple[str, str] = SIDES  # how the report names the two sides, e.g. ("main", "PR")
    per_replay: bool = False

    def __post_init__(self) -> None:
        if not self.lines:
            raise ReportError(f"CaseTable {self.title!r} has no lines")
        if not self.columns:
            raise ReportError(f"CaseTable {self.title!r} has no columns")
        if len(self.sides) != 2:
            raise ReportError(
                f"CaseTable {self.title!r}: sides names the buggy and the fixed side, two names"
            )
        object.__setattr__(self, "lines", tuple(self.lines))
        object.__setattr__(self, "columns", tuple(self.columns))


@dataclass(frozen=True)
class Measurement:
    """One row a module measured: its cells, and whether it is as the report says."""

    values: tuple[str, ...]
    ok: bool
    skipped: str = ""  # non-empty: the row could not run here (the reason); it counts neither way


@dataclass(frozen=True)
class MeasuredTable:
    title: str
    headers: tuple[str, ...]
    measure: Callable[[str], Sequence[Measurement]]  # backend name ("cpu"/"gpu") -> rows
    claim: str  # what each row's `ok` checks

    def __post_init__(self) -> None:
        if not self.headers or not callable(self.measure) or not self.claim:
            raise ReportError(f"MeasuredTable {self.title!r} needs headers, a measure callable and a claim")


@dataclass(frozen=True)
class Report:
    title: str
    url: str
    date: str  # the report's date, YYYY-MM-DD
    reproduced: str  # what the module rebuilds, in a sentence or two
    left_out: str  # what the original needs that the module does not reproduce ("" only if nothing)
    tables: tuple[CaseTable | MeasuredTable, ...]
    replays: int = DEFAULT_REPLAYS

    def __post_init__(self) -> None:
        for name in ("title", "url", "reproduced"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ReportError(f"Report.{name} must be a non-empty string")
        if not self.url.startswith("https://"):
            raise ReportError(f"Report.url must be the public https:// link, got {self.url!r}")
        if not isinstance(self.date, str) or not _DATE.match(self.date):
            raise ReportError(f"Report.date must be YYYY-MM-DD, got {self.date!r}")
        if not self.tables or not all(isinstance(t, CaseTable | MeasuredTable) for t in self.tables):
            raise ReportError("Report.tables must be a non-empty tuple of CaseTable/MeasuredTable")
        object.__setattr__(self, "tables", tuple(self.tables))
        if not isinstance(self.replays, int) or self.replays < 1:
            raise ReportError(f"Report.replays must be >= 1, got {self.replays!r}")

    def cases(self, backend: str) -> list[Case]:
        """Every case the tables run on `backend`, once each, in table order."""
        found: dict[str, Case] = {}
        for table in self.tables:
            if isinstance(table, CaseTable):
                for line in table.lines:
                    if line.gpu_only and backend != "gpu":
                        continue
                    for _, case in line.cases():
                        found.setdefault(case.name, case)
        return list(found.values())


# ------------------------------------------------------------------------------------------- loading


@dataclass
class Loaded:
    module: types.ModuleType
    source: str  # what a worker process imports to register the module's cases
    report: Report


def counterexample_names() -> list[str]:
    """Bare names of the counterexample modules of the configured suites (private `_x` modules left out)."""
    names: list[str] = []
    for package in _counterexample_packages():
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith(("_", "test_")):
                names.append(info.name)
    return sorted(set(names))


def _counterexample_packages() -> list[types.ModuleType]:
    from graphsafe.suite_config import default_suites

    packages = []
    for suite in default_suites():
        try:
            package = importlib.import_module(f"{suite}.{COUNTEREXAMPLE_PACKAGE}")
        except ImportError:
            continue
        if hasattr(package, "__path__"):
            packages.append(package)
    return packages


def is_counterexample(name: str) -> bool:
    """Does `name` name a counterexample module (a .py file, a module with a REPORT, or a bare name of one)?"""
    if name.endswith(".py") or "/" in name:
        return True
    if "." in name:
        try:
            return hasattr(importlib.import_module(name), "REPORT")
        except Exception:
            return False
    return name in counterexample_names()


def load(name: str) -> Loaded:
    """Import a counterexample module by bare name, dotted module name or file path; ReportError otherwise."""
    try:
        if name.endswith(".py") or "/" in name or Path(name).is_file():
            module_name = _import_file(Path(name))
            source = name
        elif "." in name:
            importlib.import_module(name)
            module_name = source = name
        else:
            candidates = [f"{p.__name__}.{name}" for p in _counterexample_packages()]
            module_name = next((c for c in candidates if importlib.util.find_spec(c) is not None), "")
            if not module_name:
                known = ", ".join(counterexample_names()) or "none"
                raise ReportError(f"no counterexample module named {name!r}; known: {known}")
            importlib.import_module(module_name)
            source = module_name
    except (ReportError, CaseError):
        raise
    except CaseFileError as exc:
        raise ReportError(str(exc)) from exc
    except Exception as exc:
        raise ReportError(f"cannot load counterexample {name!r}: {type(exc).__name__}: {exc}") from exc
    module = sys.modules[module_name]
    report = getattr(module, "REPORT", None)
    if report is None:
        raise ReportError(
            f"counterexample {name!r} declares no REPORT, so it reproduces nothing "
            "(copy cases/counterexamples/_template.py)"
        )
    if not isinstance(report, Report):
        raise ReportError(
            f"counterexample {name!r}: REPORT is a {type(report).__name__}, not graphsafe.reproduce.Report"
        )
    return Loaded(module, source, report)


# ------------------------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """Rendered tables and the counts behind the conclusion."""

    tables: list[tuple[str, list[str], list[list[str]], str]] = field(
        default_factory=list
    )  # title, headers, rows, note
    ran: int = 0
    not_as_expected: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.ran == 0:
            return 2
        return 1 if self.not_as_expected else 0


def run_cases(
    loaded: Loaded,
    backend: str,
    *,
    replays: int,
    seed: int,
    isolate: bool,
    deadline: float,
    explain: bool = False,
) -> dict[str, Result]:
    cases = loaded.report.cases(backend)
    for case in cases:
        try:
            registered = REGISTRY.get(case.name)
        except KeyError:
            registered = None
        if registered is not case:
            raise ReportError(
                f"case {case.name!r} of the REPORT is not registered (wrap it in graphsafe.register)"
            )
    results: dict[str, Result] = {}
    if not cases:
        return results
    if isolate:
        options = RunOptions(backend=backend, replays=replays, seed=seed, deadline=deadline, explain=explain)
        devices = 1 if backend == "gpu" else 0

        def collect(result: Result) -> None:
            results[result.case] = result

        run_isolated(cases, [loaded.source], options, 1, devices, collect)
    else:
        for case in cases:
            results[case.name] = check(case, backend, replays=replays, seed=seed, explain=explain)
    return results


def build(loaded: Loaded, backend: str, results: dict[str, Result]) -> Outcome:
    outcome = Outcome()
    for table in loaded.report.tables:
        if isinstance(table, CaseTable):
            _case_table(table, backend, results, outcome)
        else:
            _measured_table(table, backend, outcome)
    return outcome


def _case_table(table: CaseTable, backend: str, results: dict[str, Result], outcome: Outcome) -> None:
    names = dict(zip(SIDES, table.sides, strict=True))
    headers = [("replay" if table.per_replay and len(table.lines) == 1 else table.label_header)]
    if table.per_replay and len(table.lines) > 1:
        headers.append("replay")
    headers += [c.header or (f"{names[c.side]} {c.metric}" if c.side else c.metric) for c in table.columns]
    rows: list[list[str]] = []
    for line in table.lines:
        if line.gpu_only and backend != "gpu":
            outcome.skipped.append(f"{line.label} ({line.gpu_only})")
            cells = [line.label] + ([""] if table.per_replay and len(table.lines) > 1 else [])
            rows.append(cells + [f"skipped on {backend}: {line.gpu_only}"] + [""] * (len(table.columns) - 1))
            continue
        if not line.cases():
            raise ReportError(f"line {line.label!r} runs on the gpu backend but has no cases registered here")
        sides = {side: results[case.name] for side, case in line.cases()}
        ok = all(r.ok for r in sides.values())
        outcome.ran += 1
        if not ok:
            outcome.not_as_expected.append(line.label)
        replays = [None] if not table.per_replay else _replay_indices(sides)
        for replay in replays:
            if table.per_replay and len(table.lines) == 1:
                cells = ["-" if replay is None else str(replay)]
            elif table.per_replay:
                cells = [line.label, "-" if replay is None else str(replay)]
            else:
                cells = [line.label]
            for column in table.columns:
                cells.append(
                    _cell(column, line, sides, ok, replay if table.per_replay else column.replay, names)
                )
            rows.append(cells)
    outcome.tables.append((table.title, headers, rows, ""))


def _replay_indices(sides: dict[str, Result]) -> list[int | None]:
    indices = sorted({r.replay for res in sides.values() for r in _first_pattern_rows(res)})
    return list(indices) or [None]


def _first_pattern_rows(result: Result) -> list[ResultRow]:
    rows = [r for r in result.rows if r.replay >= 0 and r.phase == "replay"]
    if not rows:
        return []
    first = rows[0].pattern
    return [r for r in rows if r.pattern == first]


def _cell(
    column: Column,
    line: Line,
    sides: dict[str, Result],
    ok: bool,
    replay: int | None,
    names: dict[str, str],
) -> str:
    if column.metric == "as expected":
        return "yes" if ok else "NO"
    if column.metric == "expected":
        return ", ".join(f"{names[s]} {c.expect}" for s, c in line.cases())
    if column.metric == "threshold":
        for side_result in sides.values():
            for row in _first_pattern_rows(side_result):
                if row.threshold is not None:
                    return "bit-exact" if row.bit_exact else f"{row.threshold:g}"
        return "n/a"
    result = sides.get(column.side)
    if result is None:
        return "—"
    if column.metric == "verdict":
        if replay is None:
            return result.verdict
        at = [r.row_verdict for r in _first_pattern_rows(result) if r.replay == replay]
        return at[0] if at else result.verdict
    if column.metric == "result":
        return "PASS" if result.verdict == PASS else "FAIL"
    if column.metric == "detail":
        detail = " ".join(result.detail.split())
        return detail if len(detail) <= DETAIL_WIDTH else detail[: DETAIL_WIDTH - 1] + "…"
    rows = _first_pattern_rows(result)
    if replay is not None:
        rows = [r for r in rows if r.replay == replay]
    if not rows:
        return "n/a"
    if column.metric == "nonfinite":
        return str(max(r.nonfinite + r.poisoned for r in rows))
    key = {"eager error": "eager_error", "graph error": "graph_error", "graph vs eager": "graph_vs_eager"}[
        column.metric
    ]
    values = [getattr(r, key) for r in rows if getattr(r, key) is not None]
    if not values:
        return "n/a"
    worst = max(values, key=lambda v: math.inf if math.isnan(v) else v)
    return f"{worst:.6f}" if math.isfinite(worst) else str(worst)


def _measured_table(table: MeasuredTable, backend: str, outcome: Outcome) -> None:
    rows: list[list[str]] = []
    for m in table.measure(backend):
        if len(m.values) != len(table.headers):
            raise ReportError(
                f"MeasuredTable {table.title!r}: a row has {len(m.values)} cells for {len(table.headers)} headers"
            )
        cells = list(m.values)
        if m.skipped:
            outcome.skipped.append(f"{cells[0]} ({m.skipped})")
            cells.append(f"skipped: {m.skipped}")
        else:
            outcome.ran += 1
            if not m.ok:
                outcome.not_as_expected.append(cells[0])
            cells.append("yes" if m.ok else "NO")
        rows.append(cells)
    outcome.tables.append((table.title, [*table.headers, "as expected"], rows, f"as expected: {table.claim}"))


# ------------------------------------------------------------------------------------------- rendering


def conclusion(outcome: Outcome, backend: str) -> str:
    skipped = f"; skipped: {', '.join(outcome.skipped)}" if outcome.skipped else ""
    if outcome.ran == 0:
        return f"NOTHING REPRODUCED on {backend}: no row ran{skipped}"
    if outcome.not_as_expected:
        bad = ", ".join(outcome.not_as_expected)
        return f"NOT REPRODUCED on {backend}: {len(outcome.not_as_expected)} of {outcome.ran} lines differ from the report ({bad}){skipped}"
    return f"REPRODUCED on {backend}: {outcome.ran} of {outcome.ran} lines as the report says{skipped}"


def environment_line(backend: str) -> str:
    fp = fp_module.collect(backend)
    device = fp.get("gpu_name") if backend == "gpu" else fp.get("cpu_model")
    runtime = f" · {fp['runtime']}" if backend == "gpu" and fp.get("runtime") else ""
    return (
        f"graphsafe {fp.get('git_commit', '?')} · backend {backend} · {device or '?'} · "
        f"torch {fp.get('torch', '?')}{runtime} · {fp.get('time', '?')}"
    )


def render_text(report: Report, outcome: Outcome, backend: str) -> str:
    out = [f"{report.title}", f"{report.url} ({report.date})", f"reproduced: {report.reproduced}"]
    if report.left_out:
        out.append(f"left out: {report.left_out}")
    for title, headers, rows, note in outcome.tables:
        widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
        out += ["", title, " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
        out.append("-+-".join("-" * w for w in widths))
        out += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        if note:
            out.append(note)
    out += ["", conclusion(outcome, backend)]
    return "\n".join(out)


def render_markdown(report: Report, outcome: Outcome, backend: str) -> str:
    out = [
        f"### {report.title}",
        "",
        f"{report.url} ({report.date})",
        "",
        f"Environment: {environment_line(backend)}",
    ]
    for title, headers, rows, note in outcome.tables:
        out += ["", f"**{title}**", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        if note:
            out += ["", note]
    out += ["", f"**{conclusion(outcome, backend)}**"]
    out += ["", f"Reproduced: {report.reproduced}"]
    if report.left_out:
        out.append(f"Left out: {report.left_out}")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------- entry points


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "name", help="counterexample module: a bare name (issue350), a dotted module or a .py file"
    )
    p.add_argument(
        "--backend", choices=BACKEND_NAMES, default="auto", help="auto: the GPU when present, else cpu"
    )
    p.add_argument(
        "--replays", type=int, default=None, help="fresh-input replays per pattern (default: the report's)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of input A (B_i use seed+1+i)")
    p.add_argument(
        "--deadline", type=float, default=DEFAULT_DEADLINE_S, help="seconds per case before `timeout`"
    )
    p.add_argument("--no-isolate", action="store_true", help="run cases in this process (no crash isolation)")
    p.add_argument(
        "--markdown", action="store_true", help="print the tables as Markdown with an environment line"
    )


def reproduce(
    name: str,
    backend: str = "auto",
    *,
    replays: int | None = None,
    seed: int = 0,
    isolate: bool = True,
    deadline: float = DEFAULT_DEADLINE_S,
    explain: bool = False,
) -> tuple[Loaded, Outcome, str]:
    """Load and run one counterexample: (the module, its rendered tables and counts, the resolved backend).
    Raises ReportError for a module that cannot be used."""
    loaded = load(name)
    resolved = resolve_backend_name(backend)
    if replays is not None and replays < 1:
        raise ReportError(f"--replays must be >= 1, got {replays}")
    results = run_cases(
        loaded,
        resolved,
        replays=replays or loaded.report.replays,
        seed=seed,
        isolate=isolate,
        deadline=deadline,
        explain=explain,
    )
    return loaded, build(loaded, resolved, results), resolved


def run(
    name: str,
    *,
    backend: str = "auto",
    replays: int | None = None,
    seed: int = 0,
    isolate: bool = True,
    deadline: float = DEFAULT_DEADLINE_S,
    markdown: bool = False,
    explain: bool = False,
) -> int:
    """Reproduce one counterexample and print it; returns the exit code (module note)."""
    try:
        loaded, outcome, resolved = reproduce(
            name, backend, replays=replays, seed=seed, isolate=isolate, deadline=deadline, explain=explain
        )
    except (ReportError, CaseError, RuntimeError) as exc:
        print(f"graphsafe: error: {exc}", file=sys.stderr)
        return 2
    render = render_markdown if markdown else render_text
    print(render(loaded.report, outcome, resolved))
    if outcome.exit_code == 2:
        print(f"graphsafe: error: {name!r} reproduced nothing on the {resolved} backend", file=sys.stderr)
    return outcome.exit_code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="graphsafe repro", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(
        args.name,
        backend=args.backend,
        replays=args.replays,
        seed=args.seed,
        isolate=not args.no_isolate,
        deadline=args.deadline,
        markdown=args.markdown,
    )


if __name__ == "__main__":
    # Run the module under its package name: as __main__ it would define a second Report class, and the
    # counterexample modules' REPORT (built from graphsafe.reproduce.Report) would not be an instance of it.
    from graphsafe.reproduce import main as _main

    sys.exit(_main())


__all__ = [
    "CaseTable",
    "Column",
    "Line",
    "MeasuredTable",
    "Measurement",
    "Report",
    "ReportError",
    "counterexample_names",
    "is_counterexample",
    "load",
    "main",
    "reproduce",
    "run",
]
