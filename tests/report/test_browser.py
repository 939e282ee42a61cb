"""The report in a real headless browser (Debian's chromium): no console error, every figure rendered.

Skipped when no chromium is installed, unless LAYERCACHE_REQUIRE_BROWSER=1 (``.ci/run`` sets it
and installs chromium), so CI cannot pass without the check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layercache.report.figures import report_figures
from layercache.report.html import render_html
from layercache.report.model import ProbeReport

from .browser import open_page, require_browser


@pytest.fixture(scope="module")
def browser():
    path = require_browser()
    if path is None:
        pytest.skip("no chromium installed (apt-get install chromium); .ci/run installs it")
    return path


def test_report_opens_with_no_console_error_and_every_figure_rendered(built_report, browser, tmp_path):
    report, paths = built_report
    page = open_page(paths.html, browser)
    assert page.console_errors == []
    assert page.outside_requests == []
    expected = [spec.key for spec, _ in report_figures(report)]
    assert [image["figure"] for image in page.images] == expected
    for image in page.images:
        assert image["complete"] and image["width"] > 200 and image["height"] > 100, image
    assert page.title.startswith("Probe report:")
    assert page.screenshot.startswith(b"\x89PNG") and len(page.screenshot) > 50_000
    (tmp_path / "report.png").write_bytes(page.screenshot)


def test_the_check_sees_a_broken_page(browser, tmp_path):
    """The browser check is not vacuous: a missing image and a script error are both caught."""
    broken = tmp_path / "broken.html"
    broken.write_text('<!DOCTYPE html><html><head><title>x</title></head><body>'
                      '<img data-figure="gone" src="missing.png"><script>console.error("boom"); undefined_call();'
                      '</script></body></html>')
    page = open_page(broken, browser)
    assert any("boom" in e for e in page.console_errors)
    assert any("undefined_call" in e or "Uncaught" in e for e in page.console_errors)
    assert page.images == [{"figure": "gone", "complete": True, "width": 0, "height": 0}]


FITS = """(() => {
  const view = document.documentElement.clientWidth;
  return {page: document.documentElement.scrollWidth, view: view,
          tables: [...document.querySelectorAll('table')].map(table => {
            const box = table.parentElement;
            const scrolls = ['auto', 'scroll'].includes(getComputedStyle(box).overflowX);
            return {fits: table.getBoundingClientRect().right <= view + 0.5, scrolls: scrolls,
                    box_inside: box.getBoundingClientRect().right <= view + 0.5};
          })};
})()"""


def test_at_700_px_nothing_is_cut(browser, tmp_path):
    """The demo cache's report in a 700 px window: the page is no wider than the window, and every table
    either fits or scrolls in its own box that does (the summary table used to run off the right edge)."""
    demo = json.loads((Path(__file__).with_name("data") / "demo_report.json").read_text())
    path = tmp_path / "report.html"
    path.write_text(render_html(ProbeReport.from_json(demo)))
    page = open_page(path, browser, width=700, script=FITS)
    (tmp_path / "report-700.png").write_bytes(page.screenshot)
    assert page.console_errors == []
    layout = page.value
    assert layout["page"] <= layout["view"], layout
    assert layout["tables"]
    for table in layout["tables"]:
        assert table["fits"] or (table["scrolls"] and table["box_inside"]), table
    assert layout["tables"][0]["fits"], "the summary table fits in 700 px"
