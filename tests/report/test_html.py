"""The report's HTML from the demo cache's report.json: tables in their own scrolling box, the act
head's depth labelled with what it is, no empty token category in the tables."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from layercache.report.html import render_html
from layercache.report.probing import ProbeReport

DEMO = Path(__file__).with_name("data") / "demo_report.json"
ABOUT = "quick depth estimate: act head trained 8 epochs for this report"


@pytest.fixture
def demo() -> dict:
    return json.loads(DEMO.read_text())


def test_every_table_sits_in_its_own_scrolling_box(demo):
    page = render_html(ProbeReport.from_json(demo))
    assert page.count("<table>") == page.count('<div class="table-box"><table>') > 3
    assert re.search(r"\.table-box \{[^}]*overflow-x: auto", page)


def test_the_token_depth_heading_says_what_the_act_head_is(demo):
    data = copy.deepcopy(demo)
    data["token_depth"]["about"] = ABOUT
    page = render_html(ProbeReport.from_json(data))
    heading = re.search(r"<h2[^>]*>How deep each token goes(.*?)</h2>", page).group(1)
    assert ABOUT in heading


def test_a_report_without_about_keeps_a_plain_heading(demo):
    assert "about" not in demo["token_depth"]
    page = render_html(ProbeReport.from_json(demo))
    assert re.search(r"<h2[^>]*>How deep each token goes</h2>", page)


def test_token_depth_tables_leave_out_empty_categories(demo):
    page = render_html(ProbeReport.from_json(demo))
    assert "<td class=\"text\">punctuation</td>" not in page
    assert "No tokens of: punctuation." in page
