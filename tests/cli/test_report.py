"""``layercache probe-report``: a thin wrapper that prints the summary and refuses bad input in one sentence."""

from __future__ import annotations

import json

import pytest
from cli_support import assert_refused, invoke

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/live and tests/report


def test_probe_report_prints_the_summary_and_writes_both_files(report_cache, built_report, tmp_path):
    act_run = built_report[0].runs[0]["path"]
    out = tmp_path / "cli-report"
    result = invoke("probe-report", report_cache, "--out", out, "--no-mdl", "--no-cumulative", "--task", "sentiment",
                    "--act-run", act_run, "--quiet")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "probe score by layer on test" in text and "summary" in text and "sentiment" in text
    data = json.loads((out / "report.json").read_text())
    assert list(data["tasks"]) == ["sentiment"] and "mdl" not in data["tasks"]["sentiment"]
    assert data["token_depth"]["run"] == str(act_run)
    assert data["token_depth"]["about"] == f"act run {act_run}"  # a given run is not called a quick estimate
    assert data["meta"]["max_train"] == 4000 and "seeded sample of at most 4,000" in text
    assert (out / "report.html").stat().st_size > 10_000


def test_probe_report_refusals(report_cache, tmp_path):
    assert_refused(invoke("probe-report", tmp_path / "nowhere", "--quiet"), "nowhere")
    assert_refused(invoke("probe-report", report_cache, "--task", "nope", "--out", tmp_path / "r", "--no-train-act",
                          "--quiet"), "no task 'nope'")
    for bad in ("abc", "1", "-5"):
        assert_refused(invoke("probe-report", report_cache, "--max-train", bad, "--out", tmp_path / "r", "--quiet"),
                       "--max-train takes a number")
    (tmp_path / "file").write_text("x")
    assert_refused(invoke("probe-report", report_cache, "--out", tmp_path / "file", "--quiet"), "is a file")


def test_max_train_all_fits_every_example(report_cache, built_report, tmp_path):
    out = tmp_path / "all"
    result = invoke("probe-report", report_cache, "--out", out, "--no-mdl", "--no-cumulative", "--task", "sentiment",
                    "--act-run", built_report[0].runs[0]["path"], "--max-train", "all", "--quiet")
    assert result.exit_code == 0, result.output
    data = json.loads((out / "report.json").read_text())
    assert data["meta"]["max_train"] is None
    assert "every training example" in " ".join(result.output.split())
