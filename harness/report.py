"""Writing a run: results.csv appended per finished case, then summary.md, junit.xml and the extras.

Rows are appended and flushed as each case finishes, so a run that dies mid-way keeps every result
already written (ARCHITECTURE.md, Reports).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import socket
import time
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from harness.records import Result, Row

# Public contract: at least case, backend, replay, eager_error, graph_error, threshold, verdict, expected,
# seed. New columns go at the end.
COLUMNS = [
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
]


def default_run_dir(root: Path = Path("reports/runs")) -> Path:
    return root / f"{time.strftime('%Y%m%d-%H%M%S')}-{socket.gethostname()}"


def _cell(value: object) -> str:
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
            self._writer.writerow({k: _cell(record.get(k)) for k in COLUMNS})
        self._flush()

    def _flush(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def case_level_result(
    case: str, family: str, expected: str, backend: str, verdict: str, detail: str
) -> Result:
    """A result for a case that produced no rows of its own (crash, timeout)."""
    row = Row(
        case=case,
        family=family,
        backend=backend,
        device="",
        pattern="",
        replay=-1,
        seed_a=0,
        seed=0,
        eager_error=None,
        graph_error=None,
        graph_vs_eager=None,
        threshold=None,
        bit_exact=False,
        nonfinite=0,
        poisoned=0,
        row_verdict=verdict,
        detail=detail,
    )
    return Result(case, expected, verdict, backend, [row], detail)


def write_junit(path: Path, results: list[Result], suite: str = "graphsafe") -> None:
    """One testcase per case; a failure element (verdict, errors, detail) when the verdict is not expected."""
    failures = sum(not r.ok for r in results)
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f'<testsuites><testsuite name={quoteattr(suite)} tests="{len(results)}" failures="{failures}" errors="0">',
    ]
    for r in results:
        family = r.rows[0].family if r.rows else ""
        seconds = (
            sum((row.replay_ms or 0) + (row.eager_ms or 0) + (row.capture_ms or 0) for row in r.rows) / 1e3
        )
        lines.append(
            f"  <testcase classname={quoteattr(f'{suite}.{family}.{r.backend}')} name={quoteattr(r.case)} "
            f'time="{seconds:.3f}">'
        )
        if not r.ok:
            graph = max((row.graph_error for row in r.rows if row.graph_error is not None), default=None)
            eager = max((row.eager_error for row in r.rows if row.eager_error is not None), default=None)
            message = f"verdict {r.verdict}, expected {r.expected}"
            body = f"{message}; max eager error {_cell(eager)}; max graph error {_cell(graph)}; {r.detail}"
            lines.append(f"    <failure message={quoteattr(message)}>{escape(body)}</failure>")
        lines.append("  </testcase>")
    lines.append("</testsuite></testsuites>")
    path.write_text("\n".join(lines) + "\n")
