"""report.html: one self-contained page per run that reads at a glance.

Top to bottom: the verdict counts (negative controls that got the failure they expect count as "caught",
not as failures; a count of 0 is left out); a run that stopped early says so first; the failures, each with
its repro command, replay table and per-replay plot; the platform conformance grid (the `platform*` families:
the graph runtime's own checks, one column per platform); every case in one table, failures first, full
names, sortable by any column and filterable by text and status; the cases whose errors came within 2x of
their threshold, with their per-replay plots (plots of cases far below the threshold say nothing and are
left out); the errors of every case against its threshold and the environment, both folded. A section
without content is left out (a user's run has no platform cases, often no negative control), and the page
fits a 1280-pixel window: long names and details wrap, the plot scales down.

One file, no external resources (inline CSS, SVG and one short inline script; no fonts, links or images),
so it can be attached to an issue or opened from an artifact store offline; without the script every table
still reads, only sorting and filtering are gone. The script also reads `#q=TEXT&status=FAIL&sort=COLUMN:desc`
from the address, so a link can point at a filtered view. Values that a log axis cannot show get their own
place instead of silently vanishing: 0 sits at the left edge, inf (NaN/Inf found) in a separate "inf" band;
NaN (not applicable) is not drawn.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from graphsafe.reports import fingerprint as fingerprint_mod
from graphsafe.reports.atomic import write_atomic
from graphsafe.reports.results import NOTES_KEY, STATUS_KEY, completeness_sentence, read_results
from graphsafe.reports.tables import (
    CaseSummary,
    FailureSection,
    RunModel,
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
_LABEL_CHAR_PX = 6.6  # width of one character of an 11 px plot label, to size label columns to full names
NEAR_THRESHOLD = 2.0  # a passing case whose largest error is within this factor of its threshold gets a plot

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; vertical-align: top;
  overflow-wrap: anywhere; }
svg.errors { max-width: 100%; height: auto; }
td.num { text-align: right; font-family: ui-monospace, monospace; }
td.status, td.cell { white-space: nowrap; }
table.sortable th { cursor: pointer; background: #f6f6f6; }
table.sortable th[data-dir=asc]::after { content: " ▲"; }
table.sortable th[data-dir=desc]::after { content: " ▼"; }
span.FAIL, p.FAIL, tr.FAIL td.status { color: #c62828; font-weight: bold; }
span.ok, tr.ok td.status { color: #2e7d32; }
span.caught, tr.caught td.status { color: #2e7d32; font-weight: bold; }
tr.FAIL td:first-child { border-left: 4px solid #c62828; }
.counts span { display: inline-block; margin: 0 0.6em 0.4em 0; padding: 2px 8px; border-radius: 10px;
  background: #eee; }
.counts span.FAIL { background: #ffebee; } .counts span.ok, .counts span.caught { background: #e8f5e9; }
table.conformance td.cell { color: #fff; font-weight: bold; }
table.conformance td.cell.FAIL { background: #c62828; }
table.conformance td.cell.ok, table.conformance td.cell.caught { background: #2e7d32; }
code { background: #f3f3f3; padding: 0 3px; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; }
svg text { font: 11px system-ui, sans-serif; }
.legend span { margin-right: 1.2em; }
details { margin: 0.8em 0; } summary { cursor: pointer; font-weight: bold; }
#filters { margin: 0.4em 0; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def label_width(names: Iterable[str], minimum: int = 120, maximum: int = 900) -> int:
    """Pixels for a column of full case names in a plot (names are never cut)."""
    longest = max((len(n) for n in names), default=0)
    return int(min(max(minimum, longest * _LABEL_CHAR_PX + 12), maximum))


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
    label_w = label_width(s.case for s in summaries)
    plot_w, inf_w, row_h, top = 520, 56, 18, 24
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
            f"{_e(s.case)}</text>"
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
        f'<text x="{left}" y="12" fill="{color}">{_e(summary.verdict)} (expected {_e(summary.expected)})</text>',
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


def status_label(s: CaseSummary) -> tuple[str, str]:
    """(css class, text): FAIL; a negative control that got the failure it expects is "caught"; else ok."""
    if s.failed:
        return "FAIL", "FAIL"
    if s.expected != "pass":
        return "caught", f"caught: expected {s.expected}"
    return "ok", "ok"


def conformance_grid(summaries: list[CaseSummary], platforms: dict[str, str]) -> str:
    """The platform families as a grid: one row per case, one column per platform, the verdict in the cell.

    `platforms`: case -> platform label (one run: its fingerprint's platform for every case)."""
    columns = list(dict.fromkeys(platforms.get(s.case, s.backend) for s in summaries))
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    rows = []
    for s in sorted(summaries, key=lambda s: s.case):
        css = status_label(s)[0]
        where = platforms.get(s.case, s.backend)
        cells = "".join(
            f'<td class="cell {css}" title="{_e(s.case)}: {_e(s.verdict)} (expected {_e(s.expected)})">'
            f"{_e(css)}: {_e(s.verdict)}</td>"
            if column == where
            else "<td></td>"
            for column in columns
        )
        rows.append(f"<tr><td><code>{_e(s.case)}</code></td>{cells}</tr>")
    return f'<table class="conformance"><thead><tr><th>case</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


# ---------------------------------------------------------------------------------------------- tables


def table_html(table: Table, css: str = "") -> str:
    """A Table as HTML; cells are escaped here, callers pass plain text."""
    cls = f' class="{_e(css)}"' if css else ""
    out = [f"<table{cls}><thead><tr>", *(f"<th>{_e(h)}</th>" for h in table.header), "</tr></thead><tbody>"]
    for i, row in enumerate(table.rows):
        row_cls = f' class="{_e(table.row_status[i])}"' if table.row_status else ""
        cells = "".join(
            f'<td class="{"num" if j in table.numeric else ("status" if table.header[j] == "status" else "")}">'
            f"{_e(c)}</td>"
            for j, c in enumerate(row)
        )
        out.append(f"<tr{row_cls}>{cells}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _sort_key(text: str) -> str:
    """data-sort of a numeric cell: inf above every number, "—" (not applicable) below."""
    if text == "inf":
        return "1e308"
    try:
        return repr(float(text))
    except ValueError:
        return "-1"


def cases_table_html(summaries: list[CaseSummary]) -> str:
    """Every case, full names, the status as status_label says; sortable and filterable by the page script."""
    table = cases_table(summaries)
    status_col = table.header.index("status")
    out = [
        '<table id="cases" class="sortable"><thead><tr>',
        *(f"<th>{_e(h)}</th>" for h in table.header),
        "</tr></thead><tbody>",
    ]
    for s, row in zip(summaries, table.rows, strict=True):
        css, text = status_label(s)
        cells = []
        for j, c in enumerate(row):
            if j == status_col:
                cells.append(f'<td class="status">{_e(text)}</td>')
            elif j in table.numeric:
                cells.append(f'<td class="num" data-sort="{_sort_key(c)}">{_e(c)}</td>')
            elif table.header[j] == "case":
                cells.append(f'<td><a id="case-{_e(s.case)}"></a><code>{_e(c)}</code></td>')
            else:
                cells.append(f"<td>{_e(c)}</td>")
        out.append(f'<tr class="{css}" data-status="{css}">{"".join(cells)}</tr>')
    out.append("</tbody></table>")
    return "".join(out)


def failure_html(section: FailureSection, plot: str = "") -> str:
    s = section.summary
    details = "".join(f"<li>{_e(d)}</li>" for d in section.details)
    return (
        f'<h4 id="failure-{_e(s.case)}"><code>{_e(s.case)}</code>: verdict <span class="FAIL">{_e(s.verdict)}'
        f"</span>, expected {_e(s.expected)}</h4>"
        f"<p>Reproduce: <code>{_e(section.repro)}</code></p>"
        # The finding's lines as the terminal prints them, wrapped to the page's width.
        + (f'<pre style="white-space: pre-wrap">{_e(chr(10).join(section.finding))}</pre>' if section.finding else "")
        + (f"<ul>{details}</ul>" if details else "")
        + table_html(section.table)
        + (f"<figure>{plot}</figure>" if plot else "")
    )


def near_threshold(s: CaseSummary) -> bool:
    """A largest error within NEAR_THRESHOLD x of a tolerance, either side (bit-exact thresholds of 0 never
    are: any error there is a failure, shown with the failures)."""
    if not (s.threshold > 0 and math.isfinite(s.threshold)):
        return False
    errors = [e for e in (s.max_graph_error, s.max_eager_error) if math.isfinite(e)]
    return any(s.threshold / NEAR_THRESHOLD <= e <= s.threshold * NEAR_THRESHOLD for e in errors)


def verdict_counts(summaries: list[CaseSummary]) -> str:
    """The first line of the page: as expected / caught / FAIL, then how many cases got each verdict."""
    labels = [status_label(s)[0] for s in summaries]
    counted = (("ok", "ok"), ("caught", "negative controls caught"), ("FAIL", "FAIL"))
    chips = [
        f'<span class="{css}">{labels.count(css)} {text}</span>' for css, text in counted if labels.count(css)
    ]
    by_verdict: dict[str, int] = {}
    for s in summaries:
        by_verdict[s.verdict] = by_verdict.get(s.verdict, 0) + 1
    chips += [f"<span>{_e(v)}: {n}</span>" for v, n in sorted(by_verdict.items(), key=lambda kv: -kv[1])]
    return '<p class="counts">' + "".join(chips) + "</p>"


# Sorting (click a header; numbers by data-sort) and filtering (text and status), plus the same from the
# address (#q=...&status=...&sort=column:asc|desc). Plain DOM calls, no library.
_SCRIPT = """
(function () {
  var table = document.getElementById("cases"); if (!table) return;
  var body = table.tBodies[0], heads = table.tHead.rows[0].cells;
  var q = document.getElementById("q"), st = document.getElementById("status");
  function key(row, i) { var c = row.cells[i], s = c.getAttribute("data-sort");
    return s === null ? c.textContent.toLowerCase() : parseFloat(s); }
  function sort(i, dir) {
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) { var x = key(a, i), y = key(b, i), c = x < y ? -1 : x > y ? 1 : 0;
      return dir === "desc" ? -c : c; });
    rows.forEach(function (r) { body.appendChild(r); });
    for (var k = 0; k < heads.length; k++) heads[k].removeAttribute("data-dir");
    heads[i].setAttribute("data-dir", dir);
  }
  function filter() { var text = q.value.toLowerCase(), want = st.value, shown = 0;
    Array.prototype.forEach.call(body.rows, function (r) {
      var ok = r.textContent.toLowerCase().indexOf(text) >= 0 && (!want || r.getAttribute("data-status") === want);
      r.hidden = !ok; shown += ok ? 1 : 0; });
    document.getElementById("shown").textContent = shown + " of " + body.rows.length + " cases shown"; }
  Array.prototype.forEach.call(heads, function (h, i) { h.addEventListener("click", function () {
    sort(i, h.getAttribute("data-dir") === "asc" ? "desc" : "asc"); }); });
  q.addEventListener("input", filter); st.addEventListener("change", filter);
  var params = new URLSearchParams(location.hash.slice(1));
  if (params.get("q")) q.value = params.get("q");
  if (params.get("status")) st.value = params.get("status");
  var sortBy = (params.get("sort") || "").split(":");
  for (var k = 0; k < heads.length; k++) if (heads[k].textContent === sortBy[0]) sort(k, sortBy[1] || "asc");
  filter();
})();
"""

_FILTERS = (
    '<p id="filters"><label>filter <input id="q" type="search" placeholder="case, family, verdict…"></label> '
    '<label>status <select id="status"><option value="">all</option><option value="FAIL">FAIL</option>'
    '<option value="caught">caught</option><option value="ok">ok</option></select></label> '
    '<span id="shown"></span> · click a column header to sort</p>'
)


# ---------------------------------------------------------------------------------------------- page


def _platform_label(fingerprint: dict[str, str]) -> str:
    from graphsafe.reports.baseline import platform_slug  # the baseline module reads runs; only its slug here

    return platform_slug(fingerprint) if fingerprint else ""


def render_html(results: pd.DataFrame, fingerprint: dict[str, str], model: RunModel | None = None) -> str:
    """report.html text; `model`: the run_model of `results` and `fingerprint` where the caller has it."""
    model = model or run_model(results, fingerprint)
    summaries, failures = model.summaries, model.failures
    platform_cases = [s for s in summaries if s.family.startswith("platform")]
    title = f"graphsafe: {len(model.passing)}/{len(summaries)} cases ok"
    body = [
        f"<h1>{_e(title)}</h1>",
        verdict_counts(summaries),
        f"<p>backend {_e(model.column_values('backend'))} · device {_e(model.column_values('device'))}"
        " · a case is ok when its verdict equals its expected verdict; a negative control is caught when it"
        " gets the failure it expects. Error = max|out − ref| / max|ref|; inf: NaN/Inf found.</p>",
    ]
    status = results.attrs.get(STATUS_KEY)
    incomplete = completeness_sentence(status)
    if incomplete and status:
        # Before the counts: they cover only the cases that ran.
        never = status.get("never_ran") or []
        body[0:0] = [
            f'<p class="FAIL"><strong>{_e(incomplete)}</strong></p>',
            f"<h2>Never ran ({len(never)})</h2>",
            "<ul>" + "".join(f"<li><code>{_e(name)}</code></li>" for name in never) + "</ul>",
        ]
    body[0:0] = [f"<p>Note: {_e(note)}</p>" for note in results.attrs.get(NOTES_KEY) or []]
    if not summaries:
        body.append("<p>No results: the run finished no case.</p>")
    else:
        legend = (
            '<p class="legend"><span>solid: graph error, one colour per pattern</span>'
            "<span>dotted blue: eager error</span><span>dashed grey: threshold</span></p>"
        )
        if failures:
            body.append(f"<h2>Failures ({len(failures)})</h2>")
            body.append(legend)
            for section in failures:
                s = section.summary
                plot = replay_series_plot(s, model.groups[s.case]) if s.replays > 0 else ""
                body.append(failure_html(section, plot))
        if platform_cases:
            platform = _platform_label(fingerprint)
            labels = {s.case: platform or s.backend for s in platform_cases}
            body += ["<h2>Platform conformance</h2>", conformance_grid(platform_cases, labels)]
        body += [f"<h2>All cases ({len(summaries)})</h2>", _FILTERS, cases_table_html(summaries)]
        near = [s for s in summaries if not s.failed and s.replays > 0 and near_threshold(s)]
        if near:
            body += [
                f"<h2>Close to the threshold ({len(near)})</h2>",
                f"<p>Passing cases whose largest error is within {NEAR_THRESHOLD:g}x of the threshold.</p>",
                legend,
                '<div class="plots">'
                + "".join(
                    f"<figure><figcaption><code>{_e(s.case)}</code></figcaption>"
                    f"{replay_series_plot(s, model.groups[s.case])}</figure>"
                    for s in near
                )
                + "</div>",
            ]
        body += [
            f"<details><summary>Errors against thresholds (all {len(summaries)} cases)</summary>",
            '<p class="legend"><span>● graph error (red: case FAIL, green: ok)</span><span>○ eager error</span>'
            "<span>| threshold</span><span>0 sits at the left edge, inf in the right band</span></p>",
            f"<figure>{error_threshold_plot(summaries)}</figure></details>",
        ]
    body += [
        "<details><summary>Environment</summary>",
        table_html(environment_table(fingerprint, folded=False)),
        "</details>",
    ]
    first = f"<!-- graphsafe: {_e(incomplete).replace('--', '- -')} -->" if incomplete else ""
    return (
        f'<!DOCTYPE html>{first}\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + f"\n<script>{_SCRIPT}</script>\n</body></html>\n"
    )


def write_html(
    run_dir: Path,
    results: pd.DataFrame | None = None,
    fingerprint: dict[str, str] | None = None,
    model: RunModel | None = None,
) -> Path:
    """Write DIR/report.html and return its path: from DIR/results.csv and DIR/fingerprint.json (if present),
    or from the rows, fingerprint and run_model a caller already holds (graphsafe.reports.render)."""
    run_dir = Path(run_dir)
    rows = read_results(run_dir) if results is None else results
    page = render_html(rows, fingerprint_mod.read(run_dir) if fingerprint is None else fingerprint, model)
    path = run_dir / "report.html"
    write_atomic(path, page)
    return path
