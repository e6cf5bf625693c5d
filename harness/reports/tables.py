"""The table model of a run: what every rendering of a run shows, computed once.

A run's rows (read by graphsafe.reports.results) fold into one CaseSummary per case; failures become a
FailureSection (title, the command that reproduces it, the replay table, the details), the rest Tables.
graphsafe.reports.markdown renders the model as summary.md and graphsafe.reports.html as report.html, so the two
cannot drift apart: a column or a repro command changes here, for both.

The replay table follows the seed reports (replay | eager error | graph error | threshold | verdict, errors
with six decimals); "inf" marks NaN/Inf found in an output, "—" a value that does not apply.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from graphsafe.findings import finding_lines
from graphsafe.reports.fingerprint import KEYS as FINGERPRINT_KEYS
from graphsafe.reports.results import COLUMNS, normalize

STATUS_OK = "ok"
STATUS_FAIL = "FAIL"
NOT_APPLICABLE = "—"


# ---------------------------------------------------------------------------------------------- per case


@dataclass(frozen=True)
class CaseSummary:
    """One case of a run, folded over its rows (both patterns, all replays, case-level rows)."""

    case: str
    family: str
    backend: str
    device: str
    verdict: str
    expected: str
    failed: bool
    seed_a: str
    max_eager_error: float  # NaN where no row has one; inf where a row found NaN/Inf
    max_graph_error: float
    threshold: float
    replays: int  # number of distinct replay indices >= 0
    details: tuple[str, ...]
    limits: str = ""  # "not fully checked on <backend>: <reason>" when the backend could not check all of it

    @property
    def shown_verdict(self) -> str:
        """The verdict as reports print it: with what the backend could not check, when it could not."""
        return f"{self.verdict} ({self.limits})" if self.limits else self.verdict

    @property
    def status(self) -> str:
        return STATUS_FAIL if self.failed else STATUS_OK


def nan_max(values: Iterable[float]) -> float:
    """Max ignoring NaN (not applicable) but keeping inf; NaN when nothing applies."""
    finite_or_inf = [v for v in values if not math.isnan(v)]
    return max(finite_or_inf) if finite_or_inf else math.nan


def _first_nonempty(values: Iterable[str]) -> str:
    return next((v for v in values if v), "")


def summarize_case(rows: pd.DataFrame) -> CaseSummary:
    """Fold the (normalized) rows of one case."""
    # Plain lists: element access on pandas columns costs microseconds each, and runs have thousands of rows.
    return summarize_columns({name: rows[name].tolist() for name in COLUMNS})


def summarize_columns(col: dict[str, list[Any]]) -> CaseSummary:
    """Fold one case's rows given as a list per column (COLUMNS, normalized)."""
    verdict = _first_nonempty(col["verdict"]) or _first_nonempty(col["row_verdict"])
    expected = _first_nonempty(col["expected"])
    # A case fails when any row says FAIL or its verdict is not the expected one: the two must agree, and
    # if a writer ever gets them out of step the report errs towards showing the failure.
    failed = STATUS_FAIL in col["status"] or verdict != expected
    return CaseSummary(
        case=str(col["case"][0]),
        family=_first_nonempty(col["family"]) or "(none)",
        backend=_first_nonempty(col["backend"]),
        device=_first_nonempty(col["device"]),
        verdict=verdict,
        expected=expected,
        failed=failed,
        seed_a=_first_nonempty(col["seed_a"]),
        max_eager_error=nan_max(col["eager_error"]),
        max_graph_error=nan_max(col["graph_error"]),
        threshold=nan_max(col["threshold"]),
        replays=len({r for r in col["replay"] if r >= 0}),
        details=tuple(dict.fromkeys(d for d in col["detail"] if d)),  # unique, in order
        limits=_first_nonempty(col["limits"]),
    )


def columns_by_case(results: pd.DataFrame) -> dict[str, dict[str, list[Any]]]:
    """Normalized rows per case as a list per column, in first-appearance order: each column is read out of
    the frame once for the whole run (reading 26 columns of every case's sub-frame took most of a report's
    time)."""
    df = normalize(results)
    whole = {name: df[name].tolist() for name in COLUMNS}
    index: dict[str, list[int]] = {}
    for i, case in enumerate(whole["case"]):
        index.setdefault(str(case), []).append(i)
    return {case: {name: [values[i] for i in at] for name, values in whole.items()} for case, at in index.items()}


def rows_by_case(results: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Normalized rows grouped by case, in first-appearance order (one groupby for the whole report)."""
    df = normalize(results).copy(deep=False)
    # Without the run's attrs (status, notes): pandas deep-copies a frame's attrs into every frame and column
    # taken from it, which made each case's 26 column reads most of a report's time; the reports read those
    # attrs from the whole run's frame.
    df.attrs = {}
    return {str(name): rows for name, rows in df.groupby("case", sort=False)}


def case_summaries(results: pd.DataFrame) -> list[CaseSummary]:
    """One summary per case: failures first, then by family and case name."""
    return _summaries(columns_by_case(results))


def _summaries(columns: dict[str, dict[str, list[Any]]]) -> list[CaseSummary]:
    summaries = [summarize_columns(col) for col in columns.values()]
    return sorted(summaries, key=lambda s: (not s.failed, s.family, s.case))


CASE_SOURCES_KEY = "case_sources"


def case_sources(fingerprint: dict[str, str]) -> list[str]:
    """The run's `--case FILE_OR_MODULE` arguments, stored shell-quoted under "case_sources" by the CLI.

    A case from a user's file cannot be rerun by name alone: `repro` must load the same file again.
    """
    try:
        return shlex.split(fingerprint.get(CASE_SOURCES_KEY, ""))
    except ValueError:  # unbalanced quotes: better no --case than a command that does not parse
        return []


# How harness/search.py marks the rows at the smallest failing sizes it found: "sizes T=33,H=1: <detail>" (a
# search that found nothing marks its rows "sizes T=1,H=1; N sizes checked ...": no sizes to rerun at).
_SIZES = re.compile(r"^sizes ((?:[A-Za-z_]\w*=-?\d+,?)+)(?::|$)")


def searched_sizes(details: Iterable[str]) -> str:
    """The smallest failing sizes a search reported in these rows' details ("" when it reported none)."""
    for detail in details:
        found = _SIZES.match(str(detail or ""))
        if found:
            return found.group(1).rstrip(",")
    return ""


def repro_command(case: str, seed_a: str, backend: str, sources: Iterable[str] = (), sizes: str = "") -> str:
    """The exact command that reruns one case with its recorded seed on its backend (and, for a case that
    declares a size space, at the sizes its search reported)."""
    parts = ["graphsafe repro", shlex.quote(case)]
    if sizes:
        parts.append(f"--sizes {sizes}")
    parts += [f"--case {shlex.quote(source)}" for source in sources]
    if seed_a:
        parts.append(f"--seed {seed_a}")
    if backend:
        parts.append(f"--backend {backend}")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------- formatting


def format_error(value: float) -> str:
    """Six decimals like the seed report; "inf" for NaN/Inf found; "—" where not applicable."""
    if math.isnan(value):
        return NOT_APPLICABLE
    if math.isinf(value):
        return "inf"
    return f"{value:.6f}"


def sort_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows by pattern in run order (0xff is run first), then replay index, case-level rows (-1) first."""
    pattern_rank = {p: i for i, p in enumerate(dict.fromkeys(rows["pattern"]))}
    keyed = rows.assign(_pattern_rank=[pattern_rank[p] for p in rows["pattern"]])
    return keyed.sort_values(["_pattern_rank", "replay"], kind="stable").drop(columns="_pattern_rank")


# ---------------------------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Table:
    """Plain-text cells; renderers escape them. `numeric` columns align right; `row_status` (ok / FAIL per row)
    colours rows where the medium can."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: frozenset[int] = frozenset()
    row_status: tuple[str, ...] = ()


@dataclass(frozen=True)
class FailureSection:
    summary: CaseSummary
    repro: str  # the one command that reruns the case with its recorded seed
    table: Table  # one row per pattern and replay, case-level rows first
    details: tuple[str, ...]
    # What to fix, one plain-text line each (graphsafe.findings.finding_lines): the same lines the terminal and
    # the pytest failure show.
    finding: tuple[str, ...] = ()


REPLAY_HEADER = ("replay", "pattern", "seed", "eager error", "graph error", "threshold", "verdict")


def failure_section(summary: CaseSummary, rows: pd.DataFrame, sources: Iterable[str] = ()) -> FailureSection:
    """A failing case as reports show it: the replay table of its rows and how to reproduce it."""
    table_rows = tuple(
        (
            "case" if int(r.replay) < 0 else str(r.replay),
            str(r.pattern),
            str(r.seed),
            format_error(float(r.eager_error)),
            format_error(float(r.graph_error)),
            format_error(float(r.threshold)),
            str(r.row_verdict or r.verdict),
        )
        for r in sort_rows(normalize(rows)).itertuples(index=False)
    )
    return FailureSection(
        summary=summary,
        repro=repro_command(
            summary.case, summary.seed_a, summary.backend, sources, searched_sizes(rows["detail"])
        ),
        table=Table(REPLAY_HEADER, table_rows, numeric=frozenset({3, 4, 5})),
        details=summary.details,
        finding=tuple(finding_lines(summary.verdict, summary.expected, rows.to_dict("records"))),
    )


def cases_table(summaries: Iterable[CaseSummary], with_family: bool = True) -> Table:
    """One row per case: status, verdict (with what the backend could not check), errors folded over rows."""
    summaries = list(summaries)
    header: tuple[str, ...] = ("case", "family", "status") if with_family else ("case",)
    header += ("verdict", "expected", "replays", "max eager error", "max graph error", "threshold")
    rows = []
    for s in summaries:
        lead: tuple[str, ...] = (s.case, s.family, s.status) if with_family else (s.case,)
        rows.append(
            lead
            + (
                s.shown_verdict,
                s.expected,
                str(s.replays),
                format_error(s.max_eager_error),
                format_error(s.max_graph_error),
                format_error(s.threshold),
            )
        )
    first_number = len(header) - 4
    return Table(
        header,
        tuple(rows),
        numeric=frozenset(range(first_number, len(header))),
        row_status=tuple(s.status for s in summaries),
    )


def environment_table(fp: dict[str, str], folded: bool) -> Table:
    """The fingerprint: every key (folded=False), or folded to a few rows that tell platforms apart."""
    if not folded:
        return Table(("key", "value"), tuple((k, fp.get(k, "n/a")) for k in FINGERPRINT_KEYS))

    def get(key: str) -> str:
        return fp.get(key, "n/a")

    gpu = get("gpu_name")
    if gpu != "n/a":
        gpu = f"{gpu} ({get('gpu_arch')}) ×{get('gpu_count')}"
    rows = (
        ("backend", get("backend")),
        ("GPU", gpu),
        ("driver / runtime", f"{get('driver')} / {get('runtime')}"),
        ("torch", get("torch")),
        ("compilers", f"nvcc: {get('nvcc')}; hipcc: {get('hipcc')}; g++: {get('gxx')}"),
        ("CPU", f"{get('cpu_model')}, affinity {get('cpu_affinity')}"),
        ("python", get("python")),
        ("OS / libraries", f"{get('os')}; {get('cudnn')}; {get('triton')}; {get('numpy')}"),
        ("allocator / launch", f"{get('allocator_config')}; {get('runtime_env')}"),
        ("case files / their packages", f"{get('case_files')} / {get('case_packages')}"),
        ("commit / sources", f"{get('git_commit')} / {get('source_digest')}"),
        ("host / time", f"{get('hostname')} / {get('time')}"),
    )
    return Table(("environment", "value"), rows)


# ---------------------------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class RunModel:
    """Everything a report of one run shows, built once by `run_model`."""

    rows: pd.DataFrame  # normalized
    groups: dict[str, pd.DataFrame]  # rows per case, first-appearance order
    columns: dict[str, dict[str, list[Any]]]  # the same rows as a list per column (columns_by_case)
    summaries: list[CaseSummary]  # failures first, then by family and name
    fingerprint: dict[str, str]
    failures: list[FailureSection] = field(default_factory=list)

    @property
    def passing(self) -> list[CaseSummary]:
        return [s for s in self.summaries if not s.failed]

    @property
    def failed(self) -> list[CaseSummary]:
        return [s for s in self.summaries if s.failed]

    def column_values(self, column: str) -> str:
        """The distinct non-empty values of a column, sorted and joined; "n/a" when there are none."""
        unique = sorted({str(v) for v in self.rows[column] if v})
        return ", ".join(unique) if unique else "n/a"


def run_model(results: pd.DataFrame, fingerprint: dict[str, str]) -> RunModel:
    rows = normalize(results)
    groups = rows_by_case(rows)
    columns = columns_by_case(rows)
    summaries = _summaries(columns)
    sources = case_sources(fingerprint)
    failures = [failure_section(s, groups[s.case], sources) for s in summaries if s.failed]
    return RunModel(rows, groups, columns, summaries, fingerprint, failures)
