"""``layercache predict``: a table of every run's predictions, JSON lines with --out, one sentence on bad input."""

from __future__ import annotations

import json

import pytest
from cli_support import assert_refused, invoke

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/live and tests/report

TEXTS = ["the film was not good", "a fine day in the park"]


def test_prints_a_table_of_every_run(runs):
    result = invoke("predict", runs["bert"]["topic"], runs["bert"]["scope"], runs["bert"]["intensity"], *TEXTS,
                    "--threads", "1", "--device", "cpu")
    assert result.exit_code == 0, result.output
    for fragment in ("Predictions", "topic", "scope", "intensity", "film"):
        assert fragment in result.output


def test_file_to_jsonl(runs, tmp_path):
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps({"body": t}) + "\n" for t in TEXTS) + "\n")
    out = tmp_path / "out" / "pred.jsonl"
    result = invoke("predict", runs["bert"]["topic"], runs["bert"]["scope"], "--file", lines, "--text-field", "body",
                    "--out", out, "--threads", "1")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["text"] for r in rows] == TEXTS
    assert set(rows[0]["topic"]["topic"]) == {"label", "probability", "probabilities"}
    assert rows[0]["scope"]["negation_scope"]["words"] == TEXTS[0].split()
    assert len(rows[0]["scope"]["negation_scope"]["tags"]) == len(TEXTS[0].split())
    plain = tmp_path / "in.txt"
    plain.write_text("\n".join(TEXTS) + "\n")
    result = invoke("predict", runs["bert"]["topic"], "--file", plain, "--out", out, "--threads", "1")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["text"] for line in out.read_text().splitlines()] == TEXTS


def test_refuses_bad_input(runs, tmp_path):
    run = runs["bert"]["topic"]
    assert_refused(invoke("predict", "just a text", "--threads", "1"), "is not a run folder")
    assert_refused(invoke("predict", run, "--threads", "1"), "Nothing to predict")
    assert_refused(invoke("predict", run, "--file", tmp_path / "missing.txt", "--threads", "1"), "does not exist")
    assert_refused(invoke("predict", run, "a text", " ", "--threads", "1"), "Input 2 is empty")
    assert_refused(invoke("predict", run, runs["gpt2"]["topic"], "a text", "--threads", "1"), "another backbone")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"other": 1}) + "\n")
    assert_refused(invoke("predict", run, "--file", bad, "--threads", "1"), "Line 2", "--text-field")
