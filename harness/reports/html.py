"""report.html: one self-contained page per run, with the summary tables and three kinds of plot.

- errors against thresholds: one row per case on a log axis (graph error, eager error, threshold tick);
- errors per replay: one small plot per case, a series per pattern, threshold dashed;
- conformance: a pass/fail grid of the `platform*` families (the graph runtime's own checks).

The page has no external resources (inline CSS and SVG, no script, no fonts, no links), so it can be attached
to an issue or opened from an artifact store offline. Values that a log axis cannot show get their own place
instead of silently vanishing: 0 sits at the left edge ("≤" the lowest decade), inf (NaN/Inf found) in a
separate "inf" band at the right or top; NaN (not applicable) is not drawn.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.reports import fingerprint as fingerprint_mod
from harness.reports.results import read_results
from harness.reports.tables import (
    CaseSummary,
    FailureSection,
    Table,
    cases_table,
    environment_table,
    format_error,
    run_model,
)

OK_COLOR = "#2e7d32"
FAIL_COLOR = "#c62828"
EAGER_COLOR = "#1565c0"
THRESHOLD_COLOR = "#555"
PATTERN_COLORS = ("#c2185b", "#ef6c00", "#6a1b9a", "#00838f")  # graph-error series, one per pattern
_NAME_CHARS = 44  # case labels longer than this are cut in plots (the tables keep the full name)

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; }
td.num { text-align: right; font-family: ui-monospace, monospace; }
tr.FAIL td.status, span.FAIL { color: #c62828; font-weight: bold; }
tr.ok td.status, span.ok { color: #2e7d32; }
code { background: #f3f3f3; padding: 0 3px; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; }
figcaption { font-size: 12px; color: #555; }
svg text { font: 11px system-ui, sans-serif; }
.legend span { margin-right: 1.2em; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _short(name: str, limit: int = _NAME_CHARS) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------------- log scale


@dataclass(frozen=True)
class LogScale:
    """Maps errors to pixels: decades lo..hi over [start, start+length]; inf goes to `inf_pos`."""

    lo: int
    hi: int
    start: float
    length: float
    inf_pos: float

    def tick(self, exponent: float) -> float:
        """Position of 10**exponent (exponent within lo..hi)."""
        return self.start + (exponent - self.lo) / (self.hi - self.lo) * self.length

    def pos(self, value: float) -> float | None:
        if math.isnan(value):
            return None
        if math.isinf(value):
            return self.inf_pos
        exponent = math.log10(value) if value > 0 else self.lo  # 0 and tiny values pin to the low edge
        return self.tick(min(max(exponent, self.lo), self.hi))


def decades(values: Iterable[float]) -> tuple[int, int]:
    """The decade range covering the finite positive values, at least 1e-6..1e0 so plots share a look."""
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    lo = min([-6, *(math.floor(math.log10(v)) for v in finite)])
    hi = max([0, *(math.ceil(math.log10(v)) for v in finite)])
    return max(lo, -15), min(hi, 6)  # clamp: a 1e-300 must not squash every other value into one pixel


# ---------------------------------------------------------------------------------------------- plots


def error_threshold_plot(summaries: list[CaseSummary]) -> str:
    """One row per case: threshold tick, eager error (hollow), graph error (filled; red when the case fails)."""
    label_w, plot_w, inf_w, row_h, top = 300, 520, 56, 18, 24
    values = [v for s in summaries for v in (s.max_graph_error, s.max_eager_error, s.threshold)]
    lo, hi = decades(values)
    scale = LogScale(lo, hi, label_w, plot_w, label_w + plot_w + inf_w / 2 + 4)
    height = top + row_h * len(summaries) + 8
    width = label_w + plot_w + inf_w + 10
    parts = [
        f'<svg class="errors" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img"'
        ' aria-label="max error per case against its threshold, log scale">'
    ]
    for exponent in range(lo, hi + 1):
        x = scale.tick(exponent)
        parts.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 6}" stroke="#e3e3e3"/>')
        parts.append(f'<text x="{x:.1f}" y="{top - 8}" text-anchor="middle">1e{exponent}</text>')
    parts.append(f'<text x="{scale.inf_pos:.1f}" y="{top - 8}" text-anchor="middle">inf</text>')
    parts.append(
        f'<rect x="{label_w + plot_w + 14}" y="{top - 4}" width="{inf_w - 12}" height="{height - top}"'
        ' fill="#fbe9e7"/>'
    )
    for i, s in enumerate(summaries):
        y = top + row_h * i + row_h / 2
        color = FAIL_COLOR if s.failed else OK_COLOR
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 4:.1f}" text-anchor="end" fill="{color}">'
            f"<title>{_e(s.case)}: {_e(s.verdict)} (expected {_e(s.expected)})</title>"
            f"{_e(_short(s.case))}</text>"
        )
        tx = scale.pos(s.threshold)
        if tx is not None:
            parts.append(
                f'<line x1="{tx:.1f}" y1="{y - 7:.1f}" x2="{tx:.1f}" y2="{y + 7:.1f}"'
                f' stroke="{THRESHOLD_COLOR}" stroke-width="2"><title>threshold'
                f" {format_error(s.threshold)}</title></line>"
            )
        ex = scale.pos(s.max_eager_error)
        if ex is not None:
            parts.append(
                f'<circle cx="{ex:.1f}" cy="{y:.1f}" r="4" fill="none" stroke="{EAGER_COLOR}">'
                f"<title>eager {format_error(s.max_eager_error)}</title></circle>"
            )
        gx = scale.pos(s.max_graph_error)
        if gx is not None:
            parts.append(
                f'<circle cx="{gx:.1f}" cy="{y:.1f}" r="4" fill="{color}">'
                f"<title>graph {format_error(s.max_graph_error)}</title></circle>"
            )
    parts.append("</svg>")
    return "".join(parts)


def replay_series_plot(summary: CaseSummary, rows: pd.DataFrame) -> str:
    """Errors against replay index for one case: graph error per pattern (solid), eager (dotted)."""
    w, h, left, right, top, bottom = 300, 150, 44, 10, 20, 22
    # (pattern, replay, graph error, eager error) as plain tuples: pandas per-case slicing dominated the
    # page's render time (seconds for a hundred cases).
    points = [
        (str(p), int(r), float(g), float(e))
        for p, r, g, e in zip(
            rows["pattern"].tolist(),
            rows["replay"].tolist(),
            rows["graph_error"].tolist(),
            rows["eager_error"].tolist(),
            strict=True,
        )
        if r >= 0
    ]
    n = max((r for _, r, _, _ in points), default=0) + 1
    values = [v for _, _, g, e in points for v in (g, e)] + [summary.threshold]
    lo, hi = decades(values)
    plot_h = h - top - bottom - 14  # 14 px band at the top for inf
    # y grows downwards in SVG, so the log axis runs from the bottom (lo) up (hi): negative length.
    scale = LogScale(lo, hi, h - bottom, -plot_h, top + 4)

    def x_of(replay: int) -> float:
        return left + (w - left - right) * (0.5 if n == 1 else replay / (n - 1))

    color = FAIL_COLOR if summary.failed else OK_COLOR
    parts = [
        f'<svg class="series" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img"'
        f' aria-label="errors per replay for {_e(summary.case)}">',
        f'<text x="{left}" y="12" fill="{color}">{_e(_short(summary.case, 40))}</text>',
        f'<rect x="{left}" y="{top - 3}" width="{w - left - right}" height="14" fill="#fbe9e7"/>',
        f'<text x="{left - 4}" y="{top + 8}" text-anchor="end">inf</text>',
    ]
    for exponent in range(lo, hi + 1, max(1, (hi - lo) // 4)):
        y = scale.tick(exponent)
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{w - right}" y2="{y:.1f}" stroke="#e3e3e3"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">1e{exponent}</text>'
        )
    parts.append(
        f'<text x="{(left + w - right) / 2:.0f}" y="{h - 4}" text-anchor="middle">replay 0..{n - 1}</text>'
    )
    ty = scale.pos(summary.threshold)
    if ty is not None:
        parts.append(
            f'<line x1="{left}" y1="{ty:.1f}" x2="{w - right}" y2="{ty:.1f}" stroke="{THRESHOLD_COLOR}"'
            f' stroke-dasharray="5 3"><title>threshold {format_error(summary.threshold)}</title></line>'
        )
    for k, pattern in enumerate(dict.fromkeys(p for p, _, _, _ in points)):
        ordered = sorted((r, g, e) for p, r, g, e in points if p == pattern)
        for metric, index, dash, stroke in (
            ("graph_error", 1, "", PATTERN_COLORS[k % len(PATTERN_COLORS)]),
            ("eager_error", 2, ' stroke-dasharray="2 2"', EAGER_COLOR),
        ):
            placed = [(x_of(item[0]), scale.pos(item[index])) for item in ordered]
            drawn = [(x, y) for x, y in placed if y is not None]
            if not drawn:
                continue
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in drawn)
            label = f"{metric.replace('_', ' ')} {pattern}"
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{stroke}"{dash}><title>{_e(label)}'
                "</title></polyline>"
            )
            parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{stroke}"/>' for x, y in drawn]
    parts.append("</svg>")
    return "".join(parts)


def conformance_grid(summaries: list[CaseSummary]) -> str:
    """Cells for the platform families: green ok, red FAIL, with the verdict written in the cell."""
    cell_w, cell_h, cols = 230, 40, 4
    rows = max(1, math.ceil(len(summaries) / cols))
    w, h = cell_w * min(cols, max(1, len(summaries))), cell_h * rows
    parts = [
        f'<svg class="conformance" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img"'
        ' aria-label="platform conformance pass/fail grid">'
    ]
    for i, s in enumerate(sorted(summaries, key=lambda s: s.case)):
        x, y = cell_w * (i % cols), cell_h * (i // cols)
        fill = FAIL_COLOR if s.failed else OK_COLOR
        parts.append(
            f"<g><title>{_e(s.case)}: {_e(s.verdict)} (expected {_e(s.expected)})</title>"
            f'<rect x="{x + 2}" y="{y + 2}" width="{cell_w - 4}" height="{cell_h - 4}" fill="{fill}" rx="3"/>'
            f'<text x="{x + 8}" y="{y + 17}" fill="#fff">{_e(_short(s.case, 34))}</text>'
            f'<text x="{x + 8}" y="{y + 31}" fill="#fff">{_e(s.status)}: {_e(s.verdict)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


# ---------------------------------------------------------------------------------------------- tables


def table_html(table: Table) -> str:
    """A Table as HTML; cells are escaped here, callers pass plain text."""
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in table.header), "</tr></thead><tbody>"]
    for i, row in enumerate(table.rows):
        cls = f' class="{_e(table.row_status[i])}"' if table.row_status else ""
        cells = "".join(
            f'<td class="{"num" if j in table.numeric else ("status" if table.header[j] == "status" else "")}">'
            f"{_e(c)}</td>"
            for j, c in enumerate(row)
        )
        out.append(f"<tr{cls}>{cells}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def failure_html(section: FailureSection) -> str:
    s = section.summary
    details = "".join(f"<li>{_e(d)}</li>" for d in section.details)
    return (
        f'<h4 id="case-{_e(s.case)}"><code>{_e(s.case)}</code>: verdict <span class="FAIL">{_e(s.verdict)}'
        f"</span>, expected {_e(s.expected)}</h4>"
        f"<p>Reproduce: <code>{_e(section.repro)}</code></p>"
        + table_html(section.table)
        + (f"<ul>{details}</ul>" if details else "")
    )


# ---------------------------------------------------------------------------------------------- page


def render_html(results: pd.DataFrame, fingerprint: dict[str, str]) -> str:
    model = run_model(results, fingerprint)
    summaries, failures = model.summaries, model.failures
    platform = [s for s in summaries if s.family.startswith("platform")]
    title = f"graphsafe: {len(model.passing)}/{len(summaries)} cases ok"
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p><span class="{"FAIL" if failures else "ok"}">{len(failures)} FAIL</span> · backend '
        f"{_e(model.column_values('backend'))} · a case is ok when its verdict equals"
        " its expected verdict. Error = max|out − ref| / max|ref|; inf: NaN/Inf found.</p>",
        "<h2>Environment</h2>",
        table_html(environment_table(fingerprint, folded=False)),
    ]
    if not summaries:
        body.append("<p>No results: the run finished no case.</p>")
    else:
        body += [
            "<h2>Errors against thresholds</h2>",
            '<p class="legend"><span>● graph error (red: case FAIL, green: ok)</span><span>○ eager error</span>'
            "<span>| threshold</span><span>0 sits at the left edge, inf in the right band</span></p>",
            f"<figure>{error_threshold_plot(summaries)}</figure>",
        ]
        body.append("<h2>Conformance (platform families)</h2>")
        body.append(
            f"<figure>{conformance_grid(platform)}</figure>"
            if platform
            else "<p>No platform conformance cases in this run.</p>"
        )
        if failures:
            body.append(f"<h2>Failures ({len(failures)})</h2>")
            body += [failure_html(section) for section in failures]
        body += ["<h2>All cases</h2>", table_html(cases_table(summaries))]
        series = [replay_series_plot(s, model.groups[s.case]) for s in summaries if s.replays > 0]
        body += [
            "<h2>Errors per replay</h2>",
            '<p class="legend"><span>solid: graph error, one colour per pattern</span>'
            "<span>dotted blue: eager error</span><span>dashed grey: threshold</span></p>",
            '<div class="plots">' + "".join(f"<figure>{svg}</figure>" for svg in series) + "</div>",
        ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def write_html(run_dir: Path) -> Path:
    """Write DIR/report.html from DIR/results.csv and DIR/fingerprint.json (if present); return its path."""
    run_dir = Path(run_dir)
    page = render_html(read_results(run_dir), fingerprint_mod.read(run_dir))
    path = run_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
