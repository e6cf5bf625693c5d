"""junit.xml: one test case per graphsafe case, for CI systems that read JUnit reports.

A case whose verdict is not its expected verdict gets a <failure> with the verdict, the largest errors and
the detail; the classname `graphsafe.<family>.<backend>` groups cases as the reports do.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from harness.records import Result
from harness.reports.results import cell_text


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
            body = f"{message}; max eager error {cell_text(eager)}; max graph error {cell_text(graph)}; {r.detail}"
            lines.append(f"    <failure message={quoteattr(message)}>{escape(body)}</failure>")
        lines.append("  </testcase>")
    lines.append("</testsuite></testsuites>")
    path.write_text("\n".join(lines) + "\n")
