"""``predict``'s arguments: run folders first, a path-like non-run refused, --text and -- taken literally.

The rule itself (live/predict.py's split_runs) is tested in tests/live/test_split_runs.py; ``here`` is the root
conftest's."""

from __future__ import annotations

import json

import pytest
from cli_support import assert_refused, invoke

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/live

LONG_WORD = "a" * 300  # longer than any file name may be (255 bytes)


def test_a_mistyped_run_folder_is_refused_not_predicted(runs):
    run = str(runs["bert"]["topic"])
    typo = run[:-1] + "x"  # runs/topix: contains a separator, nothing there
    assert_refused(invoke("predict", run, typo, "a fine day", "--threads", "1"),
                   f"{typo} looks like a path", "not a run folder", "--text")
    assert_refused(invoke("predict", typo, "a fine day", "--threads", "1"), f"{typo} looks like a path")


def test_a_file_or_a_cache_folder_among_the_texts_is_refused(runs, live_caches, here):
    run = runs["bert"]["topic"]
    assert_refused(invoke("predict", run, "README.md", "--threads", "1"),
                   "README.md is a file, not a run folder", "--file README.md", "--text README.md")
    cache = live_caches["bert"]
    assert_refused(invoke("predict", run, cache, "--threads", "1"),
                   f"{cache} is a cache folder, not a run folder", "layercache train-head")
    assert_refused(invoke("predict", run, here, "--threads", "1"), "is a folder but not a run folder")


def test_a_run_folder_after_the_texts_is_refused(runs):
    assert_refused(invoke("predict", runs["bert"]["topic"], "a fine day", runs["bert"]["scope"], "--threads", "1"),
                   "is a run folder given after the first text", "before the texts")


def test_text_and_double_dash_force_literal_texts(runs, here, tmp_path):
    run = runs["bert"]["topic"]
    out = tmp_path / "out.jsonl"
    result = invoke("predict", run, "a fine day", "--text", "README.md", "--text", "good and/or bad",
                    "--out", out, "--threads", "1", "--", "runs/sentimnt", "--file")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line)["text"] for line in out.read_text().splitlines()]
    assert rows == ["a fine day", "runs/sentimnt", "--file", "README.md", "good and/or bad"]


def test_a_text_too_long_to_be_a_file_name_is_a_text(runs):
    """Never "File name too long": such a text is not looked up on disk at all."""
    result = invoke("predict", runs["bert"]["topic"], LONG_WORD, f"{LONG_WORD} and more", "--threads", "1")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "Predictions" in result.output


def test_help_states_the_rule():
    result = invoke("predict", "--help")
    text = " ".join(result.output.replace("│", " ").split())
    assert "looks like a path" in text and "--text" in text and "after --" in text
