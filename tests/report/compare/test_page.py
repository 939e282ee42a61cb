"""The comparison as a reader sees it: the page in a real headless browser (as the probe report's), and the console
summary at 80 columns."""

from __future__ import annotations

import pytest
from console_support import assert_readable, narrow

from layercache.report.compare import save_comparison
from layercache.report.compare.figures import comparison_figures
from layercache.report.compare.summary import render_comparison_summary

from .. import test_browser
from ..browser import open_page
from ..test_browser import FITS

browser = test_browser.browser  # the probe report's fixture: chromium, the tests skipped without it (unless CI)


@pytest.fixture(scope="module")
def saved(compared, tmp_path_factory):
    return save_comparison(compared, tmp_path_factory.mktemp("page") / "comparison")


def test_the_page_opens_with_no_console_error_and_every_figure_rendered(compared, saved, browser, tmp_path):
    page = open_page(saved.html, browser)
    assert page.console_errors == [] and page.outside_requests == []
    expected = [spec.key for spec, _ in comparison_figures(compared)]
    assert expected == ["scores", "selectivity"] + [f"cka-{i}" for i in range(10)]
    assert [image["figure"] for image in page.images] == expected
    for image in page.images:
        assert image["complete"] and image["width"] > 200 and image["height"] > 150, image
    assert page.title == "Model comparison: " + ", ".join(compared.labels) + " on builtin"
    assert page.screenshot.startswith(b"\x89PNG") and len(page.screenshot) > 50_000
    (tmp_path / "comparison.png").write_bytes(page.screenshot)


def test_at_700_px_nothing_is_cut(saved, browser, tmp_path):
    page = open_page(saved.html, browser, width=700, script=FITS)
    (tmp_path / "comparison-700.png").write_bytes(page.screenshot)
    assert page.console_errors == []
    layout = page.value
    assert layout["page"] <= layout["view"], layout
    assert len(layout["tables"]) > 20
    for table in layout["tables"]:
        assert table["fits"] or (table["scrolls"] and table["box_inside"]), table


def test_the_console_summary_fits_80_columns(compared):
    console = narrow()
    render_comparison_summary(compared, console)
    text = console.export_text()
    assert_readable(text)  # no value cut to fit, no table line over 80 columns
    for label in compared.labels:
        assert text.count(label) >= len(compared.tasks) + 1  # a row per task, and in the CKA table
    assert "negation_scope (accuracy on test)" in text
    assert "debiased linear CKA across models (60 mean vectors of test)" in text  # which estimator


def test_the_page_and_the_data_say_which_cka_estimator(compared, saved):
    page = saved.html.read_text()
    assert "<h2>Debiased linear CKA across models</h2>" in page and "debiased linear CKA on 60 mean vectors" in page
    assert "the same for every model" in page
    import json

    assert json.loads(saved.json.read_text())["meta"]["cka"]["estimator"] == "debiased"
