"""results.csv: the one writer and the one reader of a run's rows.

The writer appends each finished case's rows and flushes them to disk at once, so a run that dies mid-way
keeps every result already written. The reader turns the CSV text back into typed columns; every report
(summary.md, report.html, junit, baselines) reads runs through it.

Error cells: an empty CSV cell means "not applicable" (case-level rows such as a capture failure) and becomes
NaN when read; `inf` means NaN/Inf was found in an output and stays inf. A literal "nan" in the CSV is read
as inf, never as "not applicable": a NaN error means a NaN was found.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

import pandas as pd

from harness.records import Result

# Public contract: at least case, backend, replay, eager_error, graph_error, threshold, verdict, expected,
# seed. New columns go at the end.
COLUMNS: tuple[str, ...] = (
    "case",
    "family",
    "backend",
    "device",
    "pattern",
    "replay",
    "seed_a",
    "seed",
    "eager_error",
    "graph_error",
    "graph_vs_eager",
    "threshold",
    "bit_exact",
    "nonfinite",
    "poisoned",
    "row_verdict",
    "verdict",
    "expected",
    "status",
    "detail",
    "capture_ms",
    "replay_ms",
    "eager_ms",
    "phase",
    "limits",
)


def default_run_dir(root: Path = Path("reports/runs")) -> Path:
    """reports/runs/<time>-<host>/ under the working directory: one folder per run, sortable by time."""
    return root / f"{time.strftime('%Y%m%d-%H%M%S')}-{socket.gethostname()}"


def cell_text(value: object) -> str:
    """One value as results.csv writes it: None -> "", floats with 9 significant digits, nan/inf spelled."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.9g}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class ResultsWriter:
    """Appends each finished case's rows to results.csv and flushes them to disk at once."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "results.csv"
        # A reused --report-dir starts a fresh results.csv: summary.md and report.html describe one run.
        self._file = self.path.open("w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS)
        self._writer.writeheader()
        self._flush()
        self.results: list[Result] = []

    def add(self, result: Result) -> None:
        self.results.append(result)
        status = "ok" if result.ok else "FAIL"
        for row in result.rows:
            record = dataclasses.asdict(row)
            record.update(verdict=result.verdict, expected=result.expected, status=status)
            self._writer.writerow({k: cell_text(record.get(k)) for k in COLUMNS})
        self._flush()

    def _flush(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


# ---------------------------------------------------------------------------------------------- reading

FLOAT_COLUMNS: tuple[str, ...] = (
    "eager_error",
    "graph_error",
    "graph_vs_eager",
    "threshold",
    "capture_ms",
    "replay_ms",
    "eager_ms",
)


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

    A frame this function returned comes back as it is (marked in DataFrame.attrs), so callers that each
    normalize their input type the rows once per run, not once per caller. Treat the result as read-only."""
    if results.attrs.get(_NORMALIZED):
        return results
    df = results.copy()
    for column in COLUMNS:
        if column not in df.columns:
            df[column] = ""
    for column in FLOAT_COLUMNS:
        df[column] = [parse_float(v) for v in df[column]]
        df[column] = df[column].astype(float)
    df["replay"] = [_int_or(v, -1) for v in df["replay"]]
    for column in ("seed_a", "seed"):
        df[column] = [_seed_text(v) for v in df[column]]
    for column in COLUMNS:
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
