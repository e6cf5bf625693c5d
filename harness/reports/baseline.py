"""Comparing two runs, and the committed per-platform baselines that nightly runs are compared with.

`diff_runs(old, new)` folds each run's results.csv to one record per case and reports what got worse:
- new failures: a case whose status is FAIL in the new run and was not FAIL in the old one (or was absent);
- verdict changes: a case whose verdict differs, except a fix (FAIL in old, ok in new), which is listed apart
  so the baseline gets refreshed but does not fail the night;
- error growth: the case's max eager error, or for a case expected to pass its max graph error, grew more
  than 2x AND now exceeds 10% of the case's threshold (a negative control's graph error is the size of the
  defect it injects, so it is not compared). Growth far below the threshold is a change of rounding, not of
  correctness: four moe_gemm cases went from 0 to 5.5e-5 against a threshold of 5e-3 when their reference
  changed, which must not fail a night; an error that crosses a tenth of its threshold has eaten a real part
  of the margin. Values below 1e-6 are noise for every dtype the cases use (fp32 round-off is ~1e-7), so
  both sides are floored at 1e-6 before the ratio; a threshold of 0 (bit-exact) makes any growth past the
  floor count; NaN (not applicable) is never compared; inf (NaN/Inf found) where the old value was finite
  counts as grown;
- missing cases: in old, not in new, and not skipped by the new run. They count as a regression: a nightly
  run that silently lost cases (renamed, deleted, or a run cut short) must not read as green. Refresh the
  baseline when a case is renamed.
Listed, never a regression by themselves: cases only in the new run (they regress only if they fail), and
cases the new run skipped with a reason (its skipped.csv: a requirement the machine or environment does not
meet, such as an optional library that is missing or too old; graphsafe.requirements).

What is read is checked first (RunReadError, exit 2): each file must have the columns REQUIRED_COLUMNS with
known verdicts and numbers where numbers belong (a bad cell is named by column and line), a fingerprint.json
that exists must parse, and the two sides must be of one platform (a CPU run against an H200 baseline says
nothing about regressions) unless --allow-platform-mismatch. The platform is the run's fingerprint.json
(next to its results.csv), never a file name; a bare CSV (a baseline) is known only by its rows' backend
column, so two bare GPU files are compared with a note that their GPU models could not be checked, and a
file with no rows has no platform to differ in. `report nightly` knows its baseline's platform: it picked
the file by it. A run that stopped early is compared (its missing cases count) and the output says it was
incomplete.

Baselines live in the user's repository, at <baseline folder>/<platform>.csv: the folder is [tool.graphsafe]
`baseline` (graphsafe.config; default graphsafe-baselines/ beside the pyproject.toml, or in the working
directory; this repository's is reports/baselines), or `--baseline PATH` (a folder, or one .csv). Never in
the installed package. platform = `platform_slug(fingerprint)`: "cpu" for the CPU backend, else a slug of GPU
name and architecture ("nvidia-h200-sm_90", "amd-instinct-mi300x-gfx942"). `graphsafe report nightly RUN_DIR`
compares a run with its platform's baseline (what `make nightly` calls); `graphsafe report baseline RUN_DIR`
makes that run the baseline.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from graphsafe import config
from graphsafe.reports import fingerprint as fingerprint_mod
from graphsafe.reports import skipped as skipped_report
from graphsafe.reports.results import (
    FLOAT_COLUMNS,
    NOTES_KEY,
    STATUS_KEY,
    completeness_sentence,
    first_line_where,
    normalize,
    parse_float,
    read_raw,
    results_csv,
)
from graphsafe.reports.tables import CaseSummary, case_summaries, format_error
from graphsafe.verdicts import VERDICTS

GROWTH_FACTOR = 2.0
# Graph error growth counts for cases expected to pass (or to fall back to eager): for a negative control the
# graph error measures the defect it injects, and some draw it at random (control_host_random_baked_at_capture:
# 0.0021 and 0.0068 in two correct CPU runs). Its verdict says whether it was still caught.
GRAPH_ERROR_TRACKED = frozenset({"pass", "fallback_eager"})
# NOTE on the floor: errors are relative (max|out-ref| / max|ref|); fp32 round-off is about 1.2e-7 per op, so
# anything below 1e-6 is noise and a change from 1e-8 to 1e-7 must not fail a night.
ERROR_FLOOR = 1e-6
# An error growth counts once the new error exceeds this share of the case's threshold (module note).
THRESHOLD_SHARE = 0.1
# What a comparison reads: without them a "no regression" would be about empty strings.
REQUIRED_COLUMNS: tuple[str, ...] = ("case", "backend", "verdict", "expected", "eager_error", "graph_error")


class RunReadError(ValueError):
    """A file given to compare/nightly/baseline is not a readable run (exit 2): the message names the file."""


@dataclass(frozen=True)
class RunRead:
    """One side of a comparison: its cases, platform and what the reader noticed."""

    path: Path
    cases: dict[str, CaseSummary]
    platform: str  # platform_slug from the run's fingerprint.json, "" without one
    notes: list[str]
    backend: str = ""  # "cpu" or "gpu": the fingerprint's, else the rows' when they all agree; "" unknown
    skipped: dict[str, str] = field(default_factory=dict)  # case -> reason (the run's skipped.csv)


def read_run(path: Path | str) -> RunRead:
    """Read and check a run dir, a results.csv or a baseline .csv for comparing (RunReadError otherwise)."""
    csv_path = results_csv(path)
    try:
        raw, status, notes = read_raw(csv_path)
    except FileNotFoundError:
        raise RunReadError(
            f"{csv_path}: no such file (give a run dir, a results.csv or a baseline .csv)"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunReadError(f"{csv_path}: cannot read it as results: {exc}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if missing:
        raise RunReadError(
            f"{csv_path}: not a graphsafe results file: missing columns {', '.join(missing)} "
            f"(required: {', '.join(REQUIRED_COLUMNS)})"
        )
    _check_verdicts(csv_path, raw)
    _check_numbers(csv_path, raw)
    try:
        df = normalize(raw)
    except ValueError as exc:
        raise RunReadError(f"{csv_path}: a value is not a number where one is required: {exc}") from None
    df.attrs[STATUS_KEY], df.attrs[NOTES_KEY] = status, list(notes)
    sentence = completeness_sentence(status)
    if sentence:
        notes = [*notes, f"{csv_path}: {sentence}"]
    skipped: dict[str, str] = {}
    if csv_path.name == "results.csv":
        try:
            skipped = skipped_report.read(csv_path.parent)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise RunReadError(f"cannot read the run's skipped cases: {exc}") from None
    platform, backend = _platform_of(csv_path, df)
    cases = {x.case: x for x in case_summaries(df)}
    return RunRead(csv_path, cases, platform, notes, backend, skipped)


def _check_verdicts(csv_path: Path, raw: pd.DataFrame) -> None:
    """RunReadError naming the column, the line and the value of the first verdict or expectation that is
    not a graphsafe verdict (graphsafe.verdicts.VERDICTS)."""
    for column in ("verdict", "expected"):
        unknown = sorted({v for v in raw[column] if v and v not in VERDICTS})
        if not unknown:
            continue
        line = first_line_where(
            csv_path, lambda r, h, c=column, v=unknown[0]: len(r) == len(h) and r[h.index(c)] == v
        )
        more = f" (and {', '.join(map(repr, unknown[1:5]))})" if unknown[1:] else ""
        raise RunReadError(
            f"{csv_path}: column {column}, line {line if line is not None else '?'}: unknown verdict "
            f"{unknown[0]!r}{more}; known: {', '.join(VERDICTS)}"
        )


def _check_numbers(csv_path: Path, raw: pd.DataFrame) -> None:
    """RunReadError naming the column, the line and the text of the first cell of a number column that is
    not a number (parse_float's reading: "" not applicable, nan/inf found, else a float)."""
    for column in (c for c in FLOAT_COLUMNS if c in raw.columns):
        for value in raw[column]:
            try:
                parse_float(value)
            except ValueError:
                line = first_line_where(
                    csv_path, lambda r, h, c=column, v=value: len(r) == len(h) and r[h.index(c)] == v
                )
                raise RunReadError(
                    f"{csv_path}: column {column}, line {line if line is not None else '?'}: {value!r} is not "
                    "a number (an error or a time; empty means not applicable)"
                ) from None


def read_fingerprint(run_dir: Path | str) -> dict[str, str]:
    """DIR/fingerprint.json, strictly: RunReadError when it is missing, not JSON, or not a fingerprint."""
    path = Path(run_dir) / "fingerprint.json"
    if not path.is_file():
        raise RunReadError(f"{run_dir} has no fingerprint.json; cannot tell the platform")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunReadError(f"{path}: cannot read it: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RunReadError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    if not isinstance(data, dict) or "backend" not in data:
        raise RunReadError(f"{path}: not a graphsafe fingerprint (a JSON object with a 'backend' key)")
    return {str(k): str(v) for k, v in data.items()}


def _platform_of(csv_path: Path, df: pd.DataFrame) -> tuple[str, str]:
    """(platform, backend): the fingerprint next to a run's results.csv gives both; a bare CSV only a backend,
    when its rows agree on one. Never the file's name: a header-only `cpu.csv` is of no known platform."""
    fingerprint_there = csv_path.name == "results.csv" and (csv_path.parent / "fingerprint.json").is_file()
    if fingerprint_there:
        fp = read_fingerprint(csv_path.parent)
        slug = platform_slug(fp)
        return slug, "cpu" if slug == "cpu" else "gpu"
    backends = {b for b in df["backend"] if b}
    return "", backends.pop() if len(backends) == 1 else ""


def platform_mismatch(old: RunRead, new: RunRead) -> tuple[str, list[str]]:
    """(why the two runs are of different platforms or "", notes on what could not be checked)."""
    if old.platform and new.platform:
        if old.platform != new.platform:
            return f"platforms differ: {old.path} is {old.platform}, {new.path} is {new.platform}", []
        return "", []
    if old.backend and new.backend and old.backend != new.backend:
        return f"platforms differ: {old.path} is {old.backend}, {new.path} is {new.backend}", []
    notes = []
    for run in (old, new):
        if not run.platform and run.backend != "cpu":
            known = (
                f"its rows say backend {run.backend}" if run.backend else "it has no rows that name a backend"
            )
            notes.append(
                f"{run.path}: no fingerprint.json next to it, {known}: its platform (GPU model) was not "
                "checked against the other run's"
            )
    return "", notes


# ---------------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class CaseChange:
    case: str
    old: str
    new: str
    note: str = ""


@dataclass(frozen=True)
class ErrorGrowth:
    case: str
    metric: str  # "graph_error" or "eager_error"
    old: float
    new: float

    @property
    def factor(self) -> float:
        if math.isinf(self.new):
            return math.inf
        return self.new / max(self.old, ERROR_FLOOR)


@dataclass
class BaselineDiff:
    old_path: Path
    new_path: Path
    old_cases: int = 0
    new_cases: int = 0
    new_failures: list[CaseChange] = field(default_factory=list)
    verdict_changes: list[CaseChange] = field(default_factory=list)
    error_growth: list[ErrorGrowth] = field(default_factory=list)
    missing_in_new: list[str] = field(default_factory=list)
    fixed: list[CaseChange] = field(default_factory=list)  # FAIL -> ok: good news, refresh the baseline
    added_in_new: list[str] = field(default_factory=list)
    skipped_in_new: dict[str, str] = field(default_factory=dict)  # baseline case -> why the new run skipped it

    @property
    def regressed(self) -> bool:
        return bool(self.new_failures or self.verdict_changes or self.error_growth or self.missing_in_new)


# ---------------------------------------------------------------------------------------------- comparing


def counts_as_growth(old: float, new: float, threshold: float) -> bool:
    """The nightly rule: `new` grew (grew()) and exceeds THRESHOLD_SHARE of the case's threshold (any value
    when the threshold is 0, bit-exact; the ratio alone when no threshold applies, NaN)."""
    if not grew(old, new):
        return False
    if math.isnan(threshold) or math.isinf(new):
        return True
    return new > THRESHOLD_SHARE * threshold


def grew(old: float, new: float) -> bool:
    """True when `new` is more than GROWTH_FACTOR x `old`, both floored at ERROR_FLOOR; NaN never grows."""
    if math.isnan(old) or math.isnan(new):
        return False  # not applicable on one side: a verdict change says more than a number could
    if math.isinf(new):
        return not math.isinf(old)
    if math.isinf(old):
        return False
    return max(new, ERROR_FLOOR) > GROWTH_FACTOR * max(old, ERROR_FLOOR)


def diff_runs(old: Path | str | RunRead, new: Path | str | RunRead) -> BaselineDiff:
    """Compare two runs (run directories or results.csv / baseline .csv files), old first."""
    old_run = old if isinstance(old, RunRead) else read_run(old)
    new_run = new if isinstance(new, RunRead) else read_run(new)
    old_path, new_path = old_run.path, new_run.path
    old_cases, new_cases = old_run.cases, new_run.cases
    result = BaselineDiff(
        old_path=old_path, new_path=new_path, old_cases=len(old_cases), new_cases=len(new_cases)
    )
    gone = set(old_cases) - set(new_cases)
    result.skipped_in_new = {c: new_run.skipped[c] for c in sorted(gone) if c in new_run.skipped}
    result.missing_in_new = sorted(gone - set(new_run.skipped))
    result.added_in_new = sorted(set(new_cases) - set(old_cases))
    for name in sorted(new_cases):
        now = new_cases[name]
        before = old_cases.get(name)
        if now.failed and (before is None or not before.failed):
            note = "new case" if before is None else f"was {before.verdict} (ok)"
            result.new_failures.append(
                CaseChange(name, "" if before is None else before.status, now.status, note)
            )
        if before is None:
            continue
        if before.verdict != now.verdict:
            change = CaseChange(name, before.verdict, now.verdict, f"expected {now.expected}")
            (result.fixed if before.failed and not now.failed else result.verdict_changes).append(change)
        for metric, old_value, new_value in (
            ("graph_error", before.max_graph_error, now.max_graph_error),
            ("eager_error", before.max_eager_error, now.max_eager_error),
        ):
            if metric == "graph_error" and now.expected not in GRAPH_ERROR_TRACKED:
                continue  # a negative control's graph error is the size of its defect (module note)
            if counts_as_growth(old_value, new_value, now.threshold):
                result.error_growth.append(ErrorGrowth(name, metric, old_value, new_value))
    return result


# ---------------------------------------------------------------------------------------------- printing


def _factor_text(growth: ErrorGrowth) -> str:
    return "inf" if math.isinf(growth.factor) else f"{growth.factor:.1f}x"


def format_diff(c: BaselineDiff) -> str:
    lines = [
        f"compare {c.old_path} ({c.old_cases} cases) -> {c.new_path} ({c.new_cases} cases)",
        "REGRESSION" if c.regressed else "no regression",
    ]

    def section(title: str, items: list[str]) -> None:
        if items:
            lines.append(f"{title} ({len(items)}):")
            lines.extend(f"  {item}" for item in items)

    section("new failures", [f"{x.case}: {x.new} ({x.note})" for x in c.new_failures])
    section("verdict changes", [f"{x.case}: {x.old} -> {x.new} ({x.note})" for x in c.verdict_changes])
    section(
        f"errors grown more than {GROWTH_FACTOR:g}x, past {THRESHOLD_SHARE:.0%} of the threshold",
        [
            f"{g.case}: {g.metric} {format_error(g.old)} -> {format_error(g.new)} ({_factor_text(g)})"
            for g in c.error_growth
        ],
    )
    section("missing in new run", c.missing_in_new)
    section("fixed (FAIL -> ok; refresh the baseline)", [f"{x.case}: {x.old} -> {x.new}" for x in c.fixed])
    section("new cases", c.added_in_new)
    section("skipped by the new run (not compared)", [f"{k}: {v}" for k, v in c.skipped_in_new.items()])
    return "\n".join(lines)


def main_compare(
    old: Path | str,
    new: Path | str,
    allow_platform_mismatch: bool = False,
    out: Callable[[str], None] = print,
    old_platform: str = "",
) -> int:
    """Print the comparison; 1 on regression, 0 otherwise, 2 when a run cannot be read or the platforms
    differ (unless allowed: then the output says they differ). `old_platform`: OLD's platform where the
    caller knows it otherwise (nightly picked the baseline file by it)."""
    try:
        old_run, new_run = read_run(old), read_run(new)
    except RunReadError as exc:
        print(f"graphsafe report compare: {exc}", file=sys.stderr)
        return 2
    if old_platform:
        old_run = dataclasses.replace(old_run, platform=old_platform)
    mismatch, platform_notes = platform_mismatch(old_run, new_run)
    notes = old_run.notes + new_run.notes + platform_notes
    if mismatch:
        if not allow_platform_mismatch:
            print(
                f"graphsafe report compare: {mismatch}; verdicts and errors are not comparable across "
                "platforms (--allow-platform-mismatch compares them anyway)",
                file=sys.stderr,
            )
            return 2
        notes.append(f"{mismatch} (--allow-platform-mismatch)")
    comparison = diff_runs(old_run, new_run)
    out(format_diff(comparison) + "".join(f"\nnote: {n}" for n in notes))
    return 1 if comparison.regressed else 0


# ---------------------------------------------------------------------------------------------- baselines


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")


def platform_slug(fingerprint: dict[str, str]) -> str:
    """ "cpu" for the CPU backend; else GPU name + arch, e.g. "nvidia-h200-sm_90", "amd-instinct-mi300x-gfx942".

    The gfx feature suffix (":sramecc+:xnack-") is dropped: it does not change verdicts, and one baseline per
    chip is what a reader expects to find.
    """
    backend = fingerprint.get("backend", "n/a")
    name = fingerprint.get("gpu_name", fingerprint_mod.NA)
    if backend == "cpu" or (backend != "gpu" and name == fingerprint_mod.NA):
        return "cpu"
    arch = fingerprint.get("gpu_arch", fingerprint_mod.NA).split(":", 1)[0]
    parts = [_slug(p) for p in (name, arch) if p and p != fingerprint_mod.NA]
    return "-".join(p for p in parts if p) or "gpu-unknown"


def baseline_path(fingerprint: dict[str, str], baseline: Path | str | None = None) -> Path:
    """The baseline file of the run's platform: `baseline` itself when it names a .csv, else
    <baseline>/<platform>.csv; `baseline` defaults to [tool.graphsafe] baseline (graphsafe.config)."""
    where = Path(baseline) if baseline is not None else config.load().baseline
    return where if where.suffix == ".csv" else where / f"{platform_slug(fingerprint)}.csv"


def main_nightly(
    run_dir: Path | str,
    baseline: Path | str | None = None,
    allow_platform_mismatch: bool = False,
    out: Callable[[str], None] = print,
) -> int:
    """Compare a finished run with its platform's baseline; 1 on regression or when no baseline exists.

    `baseline`: a folder of <platform>.csv files, or one baseline .csv; default [tool.graphsafe] baseline."""
    try:
        fp = read_fingerprint(run_dir)
    except RunReadError as exc:
        print(f"graphsafe nightly: {exc}", file=sys.stderr)
        return 2
    path = baseline_path(fp, baseline)
    if not path.exists():
        # A night without a baseline compares with nothing; failing says so instead of a green light.
        given = "" if baseline is None else f" --baseline {baseline}"
        print(
            f"graphsafe nightly: no baseline {path} for this platform; make one with\n"
            f"  graphsafe report baseline {run_dir}{given}",
            file=sys.stderr,
        )
        return 1
    picked = (
        baseline is None or Path(baseline).is_dir()
    )  # chosen by the run's platform, not named by the user
    return main_compare(
        path,
        run_dir,
        allow_platform_mismatch=allow_platform_mismatch,
        out=out,
        old_platform=platform_slug(fp) if picked else "",
    )


def update(run_dir: Path | str, baseline: Path | str | None = None) -> Path:
    """Make this run's results.csv the baseline of its platform (baseline_path); returns the baseline path.

    RunReadError for a run that cannot be read or did not finish: a baseline must hold every case."""
    fp = read_fingerprint(run_dir)
    run = read_run(run_dir)
    if run.notes:
        raise RunReadError("; ".join(run.notes))
    path = baseline_path(fp, baseline)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(results_csv(run_dir), path)
    return path
