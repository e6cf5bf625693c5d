"""Tests of report.html: self-contained, and rendered by a real browser (headless Chromium, --dump-dom).

Method: write a synthetic run (failing, passing, near-threshold, negative-control and platform cases, a
name of 90 characters, an `inf` error, a case-level timeout row), render report.html, load it in headless
Chromium and parse the DOM it serialises (after the page's script ran): counts and failures come before the
table, the environment is folded, every case name is there in full, the conformance grid holds exactly the
platform cases, the negative control reads "caught", per-replay plots exist only for failures and cases near
their threshold, and the address's #status= / #sort= / #q= filter and sort the case table. Chromium is found on PATH; without it the browser test skips naming the missing binary
(`apt-get install -y chromium`), unless GRAPHSAFE_REQUIRE_BROWSER=1 (CI), where a missing browser fails.
"""

from __future__ import annotations

import csv
import math
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from graphsafe.reports import fingerprint
from graphsafe.reports.html import LogScale, decades, render_html, write_html
from graphsafe.reports.results import COLUMNS, read_results

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "headless_shell")
PLATFORM_CASES = ("platform.node_kinds", "platform.live_graphs")
LONG_NAME = "counterexamples.vllm_619_side_stream_gate_projection_intermediate_recycled_under_consumer_fixed"
OTHER_CASES = (
    "moe.bf16_fixed",
    "moe.bf16_main",
    "neg.stale_copy",
    "gemm.poisoned_tail",
    "moe.near",
    LONG_NAME,
)


def rows_of(
    case: str, family: str, verdict: str, expected: str, graph: list[str], seed_a: int = 11
) -> list[dict]:
    common: dict[str, Any] = dict(case=case, family=family, backend="cpu", device="cpu", seed_a=seed_a,
                                  threshold=0.02, verdict=verdict, expected=expected,
                                  status="ok" if verdict == expected else "FAIL")  # fmt: skip
    if not graph:
        return [common | dict(pattern="0xff", replay=-1, row_verdict=verdict, detail="deadline 60s exceeded")]
    return [
        common
        | dict(pattern=p, replay=i, seed=100 + i, eager_error="0.002", graph_error=g, row_verdict=verdict)
        for p in ("0xff", "0x7f")
        for i, g in enumerate(graph)
    ]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    rows = [
        *rows_of("moe.bf16_fixed", "moe", "pass", "pass", ["0.002", "0.0021", "0.0019"]),
        *rows_of("moe.bf16_main", "moe", "stale_replay", "pass", ["0.574833", "0.282794", "0.484713"], 4242),
        *rows_of("neg.stale_copy", "counterexamples", "stale_replay", "stale_replay", ["0.9", "1.1", "0.0"]),
        *rows_of("gemm.poisoned_tail", "gemm", "uninitialized", "pass", ["inf", "inf", "inf"]),
        *rows_of("platform.node_kinds", "platform.conformance", "pass", "pass", ["0.0", "0.0", "0.0"]),
        *rows_of("platform.live_graphs", "platform.conformance", "timeout", "pass", []),
        *rows_of("moe.near", "moe", "pass", "pass", ["0.015", "0.012", "0.011"]),  # within 2x of 0.02
        *rows_of(LONG_NAME, "counterexamples", "pass", "pass", ["0.0", "0.0", "0.0"]),
    ]
    run = tmp_path / "run <&> dir"  # characters that must be escaped in a file URL and in HTML
    run.mkdir()
    with (run / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, restval="")
        writer.writeheader()
        writer.writerows(rows)
    fingerprint.write(run, fingerprint.collect("cpu"))
    return run


class DomSummary(HTMLParser):
    """Tag counts, the text of the document, and the text inside each <svg> by its class."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.text: list[str] = []
        self.svg_text: dict[str, list[str]] = {}
        self._svg_class: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag == "svg":
            self._svg_class = dict(attrs).get("class") or ""
            self.svg_text.setdefault(self._svg_class, [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg_class = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._svg_class is not None:
            self.svg_text[self._svg_class].append(data)


def parse(markup: str) -> DomSummary:
    dom = DomSummary()
    dom.feed(markup)
    return dom


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def dump_dom(browser: str, page: Path, profile: Path, fragment: str = "") -> str:
    """The DOM Chromium builds from the page in a 1280 x 900 window, serialised after the page's script ran;
    `fragment` is the address's #... part."""
    args = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--window-size=1280,900",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri() + fragment,
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"chromium failed ({done.returncode}): {done.stderr[-2000:]}"
    return done.stdout


# ---------------------------------------------------------------------------------------------- browser


def _browser_or_skip() -> str:
    browser = find_browser()
    if browser is None:
        message = (
            f"no headless browser on PATH (tried {', '.join(BROWSERS)}); install: apt-get install -y chromium"
        )
        if os.environ.get("GRAPHSAFE_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return browser


def test_report_renders_in_headless_chromium(run_dir: Path, tmp_path: Path) -> None:
    browser = _browser_or_skip()
    page = write_html(run_dir)
    dom_text = dump_dom(browser, page, tmp_path / "chromium-profile")
    dom = parse(dom_text)
    text = " ".join(dom.text)

    assert "graphsafe: 5/8 cases ok" in text  # the page's own content reached the DOM (not an error page)
    assert "4 ok" in text and "1 negative controls caught" in text and "3 FAIL" in text
    # At a glance: counts, then failures, then the table; the environment folded at the end.
    order = [
        dom_text.index(marker) for marker in ('class="counts"', "Failures (3)", 'id="cases"', "Environment")
    ]
    assert order == sorted(order)
    assert re.search(r"<details><summary>Environment</summary>", dom_text)
    assert {"errors", "series"} <= set(dom.svg_text)
    for case in PLATFORM_CASES + OTHER_CASES:
        assert case in text, case
        assert case in " ".join(dom.svg_text["errors"]), (
            f"{case} missing (or cut) in the error/threshold plot"
        )
    conformance = re.search(r'<table class="conformance".*?</table>', dom_text, re.S)
    assert conformance is not None
    assert all(c in conformance.group(0) for c in PLATFORM_CASES)
    assert not any(c in conformance.group(0) for c in OTHER_CASES)
    assert "FAIL: timeout" in conformance.group(0) and "ok: pass" in conformance.group(0)
    assert "<th>cpu</th>" in conformance.group(0)  # one column per platform
    caught = re.search(r'<tr class="caught"[^>]*>.*?neg\.stale_copy.*?</tr>', dom_text, re.S)
    assert caught is not None and "caught: expected stale_replay" in caught.group(0)
    assert "graphsafe repro moe.bf16_main --seed 4242 --backend cpu" in text
    # Per-replay plots only where they say something: the 2 failures with replays and the near-threshold case.
    assert dom.tags.get("svg", 0) == 1 + 3  # the error/threshold plot + 3 series
    assert "Close to the threshold (1)" in text and "moe.near" in dom_text
    assert not re.search(r"<td[^>]*>\s*-?nan\s*</td>", dom_text, re.IGNORECASE)  # no table cell says nan
    assert re.search(r"<td[^>]*>\s*inf\s*</td>", dom_text)  # the poisoned output shows as inf
    assert "8 of 8 cases shown" in text  # the script ran


# Appended to a copy of the page by the width test: opens every folded section, then records how wide the
# document is laid out.
_MEASURE = (
    "<script>document.querySelectorAll('details').forEach(function (d) { d.open = true; });"
    "document.body.setAttribute('data-scroll-width', String(document.documentElement.scrollWidth));"
    "document.body.setAttribute('data-client-width', String(document.documentElement.clientWidth));"
    "</script></body>"
)


def test_page_fits_a_1280_pixel_window(run_dir: Path, tmp_path: Path) -> None:
    """Method: the page (a 90-character case name, long details, every folded section opened) laid out by
    headless Chromium in a 1280-pixel window. Expected: nothing wider than the window (no horizontal
    scrolling); the case table overflowed it before its cells could wrap."""
    browser = _browser_or_skip()
    page = write_html(run_dir)
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", _MEASURE))
    dom_text = dump_dom(browser, probe, tmp_path / "p-width")
    scroll = re.search(r'data-scroll-width="(\d+)"', dom_text)
    client = re.search(r'data-client-width="(\d+)"', dom_text)
    assert scroll and client, "the measuring script did not run"
    assert 1200 <= int(client.group(1)) <= 1280  # the window, less a vertical scrollbar
    assert int(scroll.group(1)) <= int(client.group(1)), f"{scroll.group(1)} px wide in a 1280 px window"


def _case_rows(dom_text: str) -> list[tuple[str, bool]]:
    """(case, hidden) of each row of the case table, in DOM order."""
    table = re.search(r'<table id="cases".*?</table>', dom_text, re.S)
    assert table is not None
    rows = re.findall(r"<tr ([^>]*)>.*?<code>(.*?)</code>", table.group(0), re.S)
    return [(name, "hidden" in attrs) for attrs, name in rows]


def test_case_table_filters_and_sorts_in_chromium(run_dir: Path, tmp_path: Path) -> None:
    """The address's fragment drives the same code as the filter box, the status menu and a header click."""
    browser = _browser_or_skip()
    page = write_html(run_dir)
    failing = _case_rows(dump_dom(browser, page, tmp_path / "p1", "#status=FAIL"))
    assert sorted(n for n, hidden in failing if not hidden) == ["gemm.poisoned_tail", "moe.bf16_main",
                                                                 "platform.live_graphs"]  # fmt: skip
    assert len(failing) == 8
    by_graph_error = _case_rows(dump_dom(browser, page, tmp_path / "p2", "#sort=max%20graph%20error:desc"))
    assert [n for n, _ in by_graph_error][:2] == ["gemm.poisoned_tail", "neg.stale_copy"]  # inf, then 1.1
    assert [n for n, _ in by_graph_error][-1] == "platform.live_graphs"  # "—": not applicable, last
    caught = _case_rows(dump_dom(browser, page, tmp_path / "p3", "#q=bf16"))
    assert sorted(n for n, hidden in caught if not hidden) == ["moe.bf16_fixed", "moe.bf16_main"]


# ---------------------------------------------------------------------------------------------- no browser


def test_page_is_self_contained(run_dir: Path) -> None:
    """One inline script and nothing fetched: no external scripts, stylesheets, images, fonts or links; the
    page must open offline, as an attachment."""
    markup = write_html(run_dir).read_text()
    assert len(re.findall(r"<script\b", markup, re.IGNORECASE)) == 1
    assert re.search(r"<script>", markup)  # inline: no attributes, so no src
    assert not re.search(r"<(link|img|iframe|object|embed)\b", markup, re.IGNORECASE)
    assert not re.search(r"\b(src|href)\s*=", markup, re.IGNORECASE)
    assert "url(" not in markup and "@import" not in markup and "fetch(" not in markup


def test_plots_only_where_they_say_something() -> None:
    """160 passing cases far below their threshold (the shape of the built-in suite): no per-replay plot."""
    import pandas as pd

    rows = [
        r
        for i in range(160)
        for r in rows_of(f"fam.case_{i:03d}", "fam", "pass", "pass", ["0.0001", "0.0001", "0.0001"])
    ]
    markup = render_html(pd.DataFrame([{k: str(r.get(k, "")) for k in COLUMNS} for r in rows]), {})
    assert markup.count('class="series"') == 0
    assert markup.count('<tr class="ok"') == 160


def test_page_escapes_case_names_and_details(run_dir: Path) -> None:
    df = read_results(run_dir)
    df.loc[df["case"] == "moe.bf16_main", "case"] = "<b>evil</b>"
    df.loc[df["case"] == "<b>evil</b>", "detail"] = "</table><script>alert(1)</script>"
    markup = render_html(df, {})
    assert "<b>evil</b>" not in markup and "<script>alert" not in markup
    assert "&lt;b&gt;evil&lt;/b&gt;" in markup


def test_a_users_run_shows_only_sections_with_content() -> None:
    """A user's run: their own cases, one failing, no negative control and no platform case. Expected: no
    "0 negative controls caught", no conformance heading or placeholder; the failure before the case table,
    and first in it."""
    import pandas as pd

    rows = [
        *rows_of("user.silu", "user", "pass", "pass", ["0.0", "0.0", "0.0"]),
        *rows_of("user.scale_cached", "user", "stale_replay", "pass", ["0.4", "0.3", "0.5"]),
    ]
    markup = render_html(pd.DataFrame([{k: str(r.get(k, "")) for k in COLUMNS} for r in rows]), {})
    markup = markup[markup.index("<body>") :]  # the page, not its stylesheet
    assert "negative controls caught" not in markup and "conformance" not in markup.lower()
    assert "1 ok" in markup and "1 FAIL" in markup
    assert markup.index("Failures (1)") < markup.index('id="cases"')
    table = markup[markup.index('id="cases"') :]
    assert table.index("user.scale_cached") < table.index("user.silu")


def test_empty_run_still_renders() -> None:
    markup = render_html(read_results_empty(), {})
    assert "0/0 cases ok" in markup and "No results" in markup


def read_results_empty() -> Any:
    import pandas as pd

    return pd.DataFrame(columns=list(COLUMNS))


def test_log_scale_places_zero_inf_and_nan_explicitly() -> None:
    """0 pins to the low edge, inf to its own band, NaN (not applicable) is not drawn at all."""
    scale = LogScale(lo=-6, hi=0, start=100.0, length=600.0, inf_pos=750.0)
    assert scale.pos(0.0) == 100.0
    assert scale.pos(1e-9) == 100.0
    assert scale.pos(1.0) == pytest.approx(700.0)
    assert scale.pos(1e-3) == pytest.approx(400.0)
    assert scale.pos(math.inf) == 750.0
    assert scale.pos(math.nan) is None
    assert decades([0.0, math.inf, math.nan, 3e-9, 40.0]) == (-9, 2)
    assert decades([]) == (-6, 0)


# A suite laid out like cases/platform/: input factories in a private _shared module, cases registered by
# runtime_nodes.py. The family must name the registering module, not the one that defines make_inputs.
_SHARED = """
import torch

def make_inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(64, generator=g).to(device)}
"""
_RUNTIME_NODES = """
import torch
from graphsafe import Case, register
from {suite}.platform._shared import make_inputs

register(Case(name="{suite}_copy_ok", make_inputs=make_inputs, op=lambda x: x * 2.0,
              reference=lambda x: x * 2.0))
register(Case(name="{suite}_explicit", make_inputs=make_inputs, op=lambda x: x + 1.0, family="mine"))
"""


def test_platform_family_is_the_registering_module_and_fills_the_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Method: a synthetic suite package whose platform/runtime_nodes.py registers cases built from
    platform/_shared.py's make_inputs; load it as a suite, run the cases on the cpu backend, write the run and
    render report.html.
    Failure scenario: the family taken from make_inputs' module (`_shared`, what the 21 platform cases got on
    the H200) leaves the conformance grid, which keeps families starting with `platform`, empty.
    Expected: family `platform.runtime_nodes` (suite prefix dropped), an explicit family kept, and the grid
    holding exactly the platform case; an unregistered case falls back to its make_inputs module's family."""
    from graphsafe.case import Case
    from graphsafe.protocol import check
    from graphsafe.reports.results import ResultsWriter
    from graphsafe.suites import load_suites

    suite = "gs_synthetic_suite"
    package = tmp_path / suite / "platform"
    package.mkdir(parents=True)
    (tmp_path / suite / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "_shared.py").write_text(_SHARED)
    (package / "runtime_nodes.py").write_text(_RUNTIME_NODES.format(suite=suite))
    monkeypatch.syspath_prepend(str(tmp_path))

    cases = load_suites([suite])
    families = {c.name: c.family for c in cases}
    assert families == {f"{suite}_copy_ok": "platform.runtime_nodes", f"{suite}_explicit": "mine"}
    shared = __import__(f"{suite}.platform._shared", fromlist=["make_inputs"])
    unregistered = Case(name="loose", make_inputs=shared.make_inputs, op=lambda x: x)
    assert unregistered.family == "platform._shared"

    run = tmp_path / "run"
    writer = ResultsWriter(run)
    for case in cases:
        writer.add(check(case, "cpu", replays=1))
    writer.close()
    page = write_html(run).read_text()
    grid = re.search(r'<table class="conformance".*?</table>', page, re.S)
    assert grid is not None, "no conformance grid in report.html"
    assert f"{suite}_copy_ok" in grid.group(0)
    assert f"{suite}_explicit" not in grid.group(0)
    assert "No platform conformance cases" not in page


@pytest.mark.gpu
def test_builtin_platform_cases_get_platform_families() -> None:
    """Method: load the built-in suite on a GPU (the platform cases register only there).
    Expected: every case registered under cases/platform/ has a family `platform.<module>`, never `_shared`."""
    from graphsafe.case import REGISTRY
    from graphsafe.suites import load_default_suites

    platform = [c for c in load_default_suites() if ".platform." in REGISTRY.origin(c.name)]
    assert platform, "no platform case registered on this GPU"
    bad = {
        c.name: c.family for c in platform if not c.family.startswith("platform.") or "_shared" in c.family
    }
    assert not bad, bad
