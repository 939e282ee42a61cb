"""The report's HTML from the demo cache's report.json: tables in their own scrolling box, the act
head's depth labelled with what it is, no empty token category in the tables."""

from __future__ import annotations

import copy
import re

from layercache.report.html import render_html
from layercache.report.model import ProbeReport

ABOUT = "quick depth estimate: act head trained 8 epochs for this report"


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


def test_the_runs_table_labels_the_reports_quick_act_head(demo):
    """The act head the report trains scored sentiment 0.603 beside the adaptive head's 1.000, unlabelled."""
    data = copy.deepcopy(demo)
    act = next(run for run in data["runs"] if run["mixer"] == "act")
    act["about"], act["quick_estimate"] = ABOUT, True
    page = render_html(ProbeReport.from_json(data))
    runs = page[page.index("<h2>Layer weights</h2>"):]
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", runs) if f">{act['name']} " in r or f">{act['name']}<" in r)
    assert ABOUT in row


def test_numbers_that_round_to_zero_have_no_sign_and_c_shows_its_size(demo):
    data = copy.deepcopy(demo)
    data["tasks"]["intensity"]["cumulative"]["gains"][3] = -1e-6
    data["tasks"]["sentiment"]["probe"]["C"] = [0.001, 0.01, 0.1, 1.0, 0.001, 0.01, 0.1]
    page = render_html(ProbeReport.from_json(data))
    assert "-0.000" not in page
    sentiment = page[page.index("<h3>sentiment "):]
    first_row = re.search(r"<tr><td class=\"text\">embeddings</td>(.*?)</tr>", sentiment).group(1)
    assert "<td>0.001</td>" in first_row and "<td>0.00</td>" not in first_row
