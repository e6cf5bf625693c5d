"""summary.md: a run's results as Markdown ready to paste into an issue, plus the results.csv reader.

The tables follow the seed report (replay | eager error | graph error | threshold | verdict, errors with six
decimals): failures come first, each with the one command that reproduces it, then the passing cases, one
compact table per family. `read_results` / `normalize` are the one place that turns results.csv text into
typed columns; the HTML report and the baseline comparison read runs through them too.

Error cells: an empty CSV cell means "not applicable" (case-level rows such as a capture failure) and becomes
NaN here, printed as "—"; `inf` means NaN/Inf was found in an output and stays inf, printed as "inf". A
literal "nan" in the CSV is read as inf, never as "not applicable": a NaN error means a NaN was found.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.report import COLUMNS

# One list of columns: the writer's (harness/report.py).
RESULT_COLUMNS: tuple[str, ...] = tuple(COLUMNS)
FLOAT_COLUMNS: tuple[str, ...] = (
    "eager_error",
    "graph_error",
    "graph_vs_eager",
    "threshold",
    "capture_ms",
    "replay_ms",
    "eager_ms",
)
STATUS_OK = "ok"
STATUS_FAIL = "FAIL"
NOT_APPLICABLE = "—"
_DETAIL_MAX_CHARS = 300


# ---------------------------------------------------------------------------------------------- reading


def parse_float(value: Any) -> float:
    """One error/timing cell as a float: "" / None -> NaN (not applicable), "nan" -> inf (found), else float."""
    if value is None:
        return math.nan
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    if not text:
        return math.nan
    if text.lower() in ("nan", "-nan", "+nan"):
        return math.inf
    return float(text)  # raises ValueError on garbage: a corrupt report must not read as "no error"


def _seed_text(value: Any) -> str:
    """Seeds as the exact text to type: 1234.0 (a float column with gaps) -> "1234"; missing -> ""."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _int_or(value: Any, default: int) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


_NORMALIZED = "graphsafe.normalized"  # DataFrame.attrs key set by normalize


def normalize(results: pd.DataFrame) -> pd.DataFrame:
    """A copy with every RESULT_COLUMN present and typed: floats for errors/timings, int replay, str others.

    A frame this function returned comes back as it is (marked in DataFrame.attrs): read_results, the
    renderers and rows_by_case each normalize their input, and one report used to type every row 3 times
    per page. Treat the result as read-only."""
    if results.attrs.get(_NORMALIZED):
        return results
    df = results.copy()
    for column in RESULT_COLUMNS:
        if column not in df.columns:
            df[column] = ""
    for column in FLOAT_COLUMNS:
        df[column] = [parse_float(v) for v in df[column]]
        df[column] = df[column].astype(float)
    df["replay"] = [_int_or(v, -1) for v in df["replay"]]
    for column in ("seed_a", "seed"):
        df[column] = [_seed_text(v) for v in df[column]]
    for column in RESULT_COLUMNS:
        if column not in FLOAT_COLUMNS and column not in ("replay", "seed_a", "seed"):
            df[column] = ["" if _is_missing(v) else str(v).strip() for v in df[column]]
    df.attrs[_NORMALIZED] = True
    return df


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def results_csv(path: Path | str) -> Path:
    """A run directory or a results.csv (or baseline .csv) path -> the CSV path."""
    path = Path(path)
    return path / "results.csv" if path.is_dir() else path


def read_results(path: Path | str) -> pd.DataFrame:
    """Read results.csv (or a run directory) as text, then type it with `normalize`.

    NOTE on dtype=str and keep_default_na=False: pandas' default NA parsing would turn "nan" and "" alike into
    NaN, losing the difference between "NaN found" and "not applicable" that the report must keep.
    """
    raw = pd.read_csv(results_csv(path), dtype=str, keep_default_na=False)
    return normalize(raw)


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
    col = {name: rows[name].tolist() for name in RESULT_COLUMNS}
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
    )


def rows_by_case(results: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Normalized rows grouped by case, in first-appearance order (one groupby for the whole report)."""
    df = normalize(results)
    return {str(name): rows for name, rows in df.groupby("case", sort=False)}


def case_summaries(results: pd.DataFrame | dict[str, pd.DataFrame]) -> list[CaseSummary]:
    """One summary per case: failures first, then by family and case name."""
    groups = results if isinstance(results, dict) else rows_by_case(results)
    summaries = [summarize_case(rows) for rows in groups.values()]
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


def repro_command(case: str, seed_a: str, backend: str, sources: Iterable[str] = ()) -> str:
    """The exact command that reruns one case with its recorded seed on its backend."""
    parts = ["python -m harness repro", shlex.quote(case)]
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


def md_cell(text: str) -> str:
    """Free text made safe for one Markdown table cell (pipes split cells, newlines end rows)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _shorten(text: str, limit: int = _DETAIL_MAX_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return lines


def _fingerprint_rows(fp: dict[str, str]) -> list[list[str]]:
    """The fingerprint folded to a few rows: enough to tell two platforms apart at a glance."""

    def get(key: str) -> str:
        return fp.get(key, "n/a")

    gpu = get("gpu_name")
    if gpu != "n/a":
        gpu = f"{gpu} ({get('gpu_arch')}) ×{get('gpu_count')}"
    return [
        ["backend", get("backend")],
        ["GPU", gpu],
        ["driver / runtime", f"{get('driver')} / {get('runtime')}"],
        ["torch", get("torch")],
        ["compilers", f"nvcc: {get('nvcc')}; hipcc: {get('hipcc')}; g++: {get('gxx')}"],
        ["CPU", f"{get('cpu_model')}, affinity {get('cpu_affinity')}"],
        ["python", get("python")],
        ["commit / sources", f"{get('git_commit')} / {get('source_digest')}"],
        ["host / time", f"{get('hostname')} / {get('time')}"],
    ]


def sort_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows by pattern in run order (0xff is run first), then replay index, case-level rows (-1) first."""
    pattern_rank = {p: i for i, p in enumerate(dict.fromkeys(rows["pattern"]))}
    keyed = rows.assign(_pattern_rank=[pattern_rank[p] for p in rows["pattern"]])
    return keyed.sort_values(["_pattern_rank", "replay"], kind="stable").drop(columns="_pattern_rank")


def _row_label(replay: int) -> str:
    return "case" if replay < 0 else str(replay)


def _failure_block(summary: CaseSummary, rows: pd.DataFrame, sources: list[str]) -> list[str]:
    lines = [
        f"#### `{summary.case}`: verdict `{summary.verdict}`, expected `{summary.expected}`",
        "",
        f"Reproduce: `{repro_command(summary.case, summary.seed_a, summary.backend, sources)}`",
        "",
    ]
    ordered = sort_rows(rows)
    table_rows = [
        [
            _row_label(int(r.replay)),
            str(r.pattern),
            str(r.seed),
            format_error(float(r.eager_error)),
            format_error(float(r.graph_error)),
            format_error(float(r.threshold)),
            str(r.row_verdict or r.verdict),
        ]
        for r in ordered.itertuples(index=False)
    ]
    header = ["replay", "pattern", "seed", "eager error", "graph error", "threshold", "verdict"]
    lines += _table(header, table_rows)
    if summary.details:
        lines.append("")
        lines += [f"- {_shorten(d)}" for d in summary.details]
    lines.append("")
    return lines


def _passing_table(summaries: list[CaseSummary]) -> list[str]:
    header = ["case", "verdict", "expected", "replays", "max eager error", "max graph error", "threshold"]
    rows = [
        [
            f"`{s.case}`",
            s.verdict,
            s.expected,
            str(s.replays),
            format_error(s.max_eager_error),
            format_error(s.max_graph_error),
            format_error(s.threshold),
        ]
        for s in summaries
    ]
    return _table(header, rows)


def _joined(values: Iterable[str]) -> str:
    unique = sorted({v for v in values if v})
    return ", ".join(unique) if unique else "n/a"


def render_summary(results: pd.DataFrame, fingerprint: dict[str, str]) -> str:
    """summary.md text: header, fingerprint, failures (with repro commands), then passing cases by family."""
    df = normalize(results)
    groups = rows_by_case(df)
    summaries = case_summaries(groups)
    failures = [s for s in summaries if s.failed]
    passing = [s for s in summaries if not s.failed]
    ok_count, total = len(passing), len(summaries)
    state = "all as expected" if not failures else f"{len(failures)} FAIL"
    lines = [
        f"# graphsafe: {ok_count}/{total} cases ok ({state}) · backend {_joined(df['backend'])}"
        f" · device {_joined(df['device'])}",
        "",
        "A case is ok when its verdict equals its expected verdict (negative controls expect a failure verdict).",
        "Error = max|out − ref| / max|ref|; `inf`: NaN/Inf found in the output; `—`: not applicable.",
        "",
    ]
    lines += _table(["environment", "value"], _fingerprint_rows(fingerprint))
    lines.append("")
    if total == 0:
        lines += ["No results: the run finished no case.", ""]
        return "\n".join(lines)

    if failures:
        lines += [f"## Failures ({len(failures)})", ""]
        for family in sorted({s.family for s in failures}):
            lines += [f"### family `{family}`", ""]
            for s in (f for f in failures if f.family == family):
                lines += _failure_block(s, groups[s.case], case_sources(fingerprint))

    if passing:
        lines += [f"## Passing ({len(passing)})", ""]
        for family in sorted({s.family for s in passing}):
            lines += [f"### family `{family}`", ""]
            lines += _passing_table([s for s in passing if s.family == family])
            lines.append("")
    return "\n".join(lines)
