"""summary.md: a run's table model (graphsafe.reports.tables) as Markdown ready to paste into an issue.

Failures come first, grouped by family, each with the command that reproduces it, its finding (the lines
`graphsafe verify` and the pytest failure print: graphsafe.findings) and its replay table; then the passing
cases, one compact table per family.
"""

from __future__ import annotations

import pandas as pd

from graphsafe.reports.results import NOTES_KEY, STATUS_KEY, completeness_sentence
from graphsafe.reports.tables import (
    FailureSection,
    RunModel,
    Table,
    cases_table,
    environment_table,
    run_model,
)

_DETAIL_MAX_CHARS = 300
_QUOTED_MAX_CHARS = 4000


def md_cell(text: str) -> str:
    """Free text made safe for one Markdown table cell (pipes split cells, newlines end rows)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _shorten(text: str, limit: int = _DETAIL_MAX_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table_lines(table: Table) -> list[str]:
    """A Markdown table; the `case` column is set as code (names carry dots and underscores)."""
    code = {i for i, h in enumerate(table.header) if h == "case"}
    lines = ["| " + " | ".join(table.header) + " |", "|" + "|".join("---" for _ in table.header) + "|"]
    for row in table.rows:
        cells = [f"`{c}`" if i in code else c for i, c in enumerate(row)]
        lines.append("| " + " | ".join(md_cell(c) for c in cells) + " |")
    return lines


def failure_lines(section: FailureSection) -> list[str]:
    """One failing case: heading, repro command, replay table, details."""
    s = section.summary
    lines = [
        f"#### `{s.case}`: verdict `{s.verdict}`, expected `{s.expected}`",
        "",
        f"Reproduce: `{section.repro}`",
        "",
    ]
    if section.finding:  # the terminal's and the pytest failure's lines, verbatim
        lines += ["```text", *section.finding, "```", ""]
    lines += table_lines(section.table)
    if section.details:
        lines.append("")
        for d in section.details:
            first, _, rest = d.partition("\n")
            lines.append(f"- {_shorten(first)}")
            if rest:  # quoted output (a crashed worker's stderr): kept whole, as a block
                quoted = [f"  {line}" for line in rest[:_QUOTED_MAX_CHARS].splitlines()]
                lines += ["", "  ```", *quoted, "  ```"]
    lines.append("")
    return lines


def render_summary(results: pd.DataFrame, fingerprint: dict[str, str], model: RunModel | None = None) -> str:
    """summary.md text: header, fingerprint, failures (with repro commands), then passing cases by family.
    `model`: the run_model of `results` and `fingerprint` where the caller has built it already."""
    model = model or run_model(results, fingerprint)
    failures, passing = model.failures, model.passing
    total = len(model.summaries)
    state = "all as expected" if not failures else f"{len(failures)} FAIL"
    status = results.attrs.get(STATUS_KEY)
    incomplete = completeness_sentence(status)
    # A run that stopped early says so before anything else: its counts cover only the cases that ran.
    head = f"# graphsafe: {incomplete} · " if incomplete else "# graphsafe: "
    lines = [
        f"{head}{len(passing)}/{total} cases ok ({state}) · backend {model.column_values('backend')}"
        f" · device {model.column_values('device')}",
        "",
    ]
    if incomplete and status:
        never = status.get("never_ran") or []
        lines += [f"## Never ran ({len(never)})", "", *[f"- `{name}`" for name in never], ""]
    lines += [f"Note: {md_cell(note)}" for note in results.attrs.get(NOTES_KEY) or []]
    lines += [
        "A case is ok when its verdict equals its expected verdict (negative controls expect a failure verdict).",
        "Error = max|out − ref| / max|ref|; `inf`: NaN/Inf found in the output; `—`: not applicable.",
        "",
        *table_lines(environment_table(fingerprint, folded=True)),
        "",
    ]
    if total == 0:
        lines += ["No results: the run finished no case.", ""]
        return "\n".join(lines)
    if failures:
        lines += [f"## Failures ({len(failures)})", ""]
        for family in sorted({f.summary.family for f in failures}):
            lines += [f"### family `{family}`", ""]
            for section in (f for f in failures if f.summary.family == family):
                lines += failure_lines(section)
    if passing:
        # Folded: a CI page or an issue shows the failures; the passing cases open on a click (GitHub renders
        # Markdown inside <details> when blank lines surround it).
        fold = f"<details><summary>{len(passing)} cases as expected</summary>"
        lines += [f"## Passing ({len(passing)})", "", fold, ""]
        for family in sorted({s.family for s in passing}):
            lines += [f"### family `{family}`", ""]
            lines += table_lines(cases_table([s for s in passing if s.family == family], with_family=False))
            lines.append("")
        lines += ["</details>", ""]
    return "\n".join(lines)


__all__ = ["failure_lines", "md_cell", "render_summary", "table_lines"]
