"""Every report of a run directory, rendered from its results.csv and fingerprint.json.

One function for `verify` and `report merge`: junit.xml, summary.md, report.html, and the CI job summary.
NOTE on $GITHUB_STEP_SUMMARY: GitHub Actions shows the Markdown appended to that file on the job's page and
refuses a step summary over 1 MiB ("Job summaries" in GitHub's docs), so summary.md goes there cut to fit,
with a line saying where the whole report is.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphsafe.reports.atomic import write_atomic
from graphsafe.reports.html import write_html
from graphsafe.reports.junit import write_junit
from graphsafe.reports.markdown import render_summary
from graphsafe.reports.results import NOTES_KEY, STATUS_KEY, read_results
from graphsafe.reports.tables import run_model

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
STEP_SUMMARY_MAX_BYTES = 1 << 20


def write_reports(
    run_dir: Path,
    fingerprint: dict[str, str],
    status: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> None:
    """junit.xml, summary.md and report.html from DIR/results.csv; summary.md also to $GITHUB_STEP_SUMMARY.
    `notes`: sentences every report shows first (a merge across platforms, missing shards)."""
    rows = read_results(run_dir)
    rows.attrs[NOTES_KEY] = [*notes, *(rows.attrs.get(NOTES_KEY) or [])]
    status = status if status is not None else rows.attrs.get(STATUS_KEY)
    model = run_model(rows, fingerprint)  # once for the three reports
    write_junit(run_dir / "junit.xml", rows, status=status, fingerprint=fingerprint, model=model)
    summary = render_summary(rows, fingerprint, model)
    write_atomic(run_dir / "summary.md", summary)
    write_html(run_dir, rows, fingerprint, model)
    write_step_summary(summary, run_dir)


def write_step_summary(summary: str, run_dir: Path) -> Path | None:
    """Append summary.md to the file $GITHUB_STEP_SUMMARY names, when it names one; returns that path."""
    target = os.environ.get(STEP_SUMMARY_ENV, "")
    if not target:
        return None
    tail = f"\n\n_Full reports: `{run_dir}` (summary.md, report.html, junit.xml, results.csv)._\n"
    budget = STEP_SUMMARY_MAX_BYTES - len(tail.encode()) - 256
    data = summary.encode("utf-8")
    if len(data) > budget:
        cut = data[:budget].decode("utf-8", errors="ignore").rsplit("\n", 1)[0]
        summary = cut + "\n\n_(cut to fit GitHub's 1 MiB step-summary limit)_"
    with Path(target).open("a", encoding="utf-8") as f:
        f.write(summary + tail)
    return Path(target)
