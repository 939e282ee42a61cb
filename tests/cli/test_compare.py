"""``layercache compare``: a thin wrapper that prints the summary at 80 columns, writes both files, and refuses caches
of other examples in one sentence (exit code 2)."""

from __future__ import annotations

import json

import pytest
from cli_support import assert_refused, invoke
from compare_support import comparison_caches
from console_support import assert_readable

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/report


@pytest.fixture(scope="module")
def caches(tiny_models, tmp_path_factory):
    return comparison_caches(tiny_models, tmp_path_factory.mktemp("compare-cli"), names=("bert", "llama-bpe", "fewer"))


def test_compare_prints_the_summary_and_writes_both_files(caches, tmp_path):
    out = tmp_path / "cmp"
    result = invoke("compare", caches["bert"], caches["llama-bpe"], "--out", out, "--task", "sentiment", "--task",
                    "negation_scope", "--name", "enc", "--name", "dec", "--cka-states", "words", "--cka-examples",
                    "100", "--no-cumulative", "--quiet", "--threads", "1")
    assert result.exit_code == 0, result.output
    assert_readable(result.output)
    text = " ".join(result.output.split())
    assert "sentiment (accuracy on test)" in text and "enc × dec" in text and "100 word states of test" in text
    assert f"Comparison written: {out / 'report.html'}" in text
    data = json.loads((out / "report.json").read_text())
    assert list(data["tasks"]) == ["sentiment", "negation_scope"] and [m["label"] for m in data["models"]] == [
        "enc", "dec"]
    assert "cumulative" not in data["tasks"]["sentiment"]["models"]["enc"]
    assert data["meta"]["cka"] == {"states": "words", "estimator": "debiased", "asked": 100, "split": "test", "n": 100}
    assert (out / "report.html").stat().st_size > 20_000


def test_compare_default_folder_is_beside_the_first_cache(caches):
    result = invoke("compare", caches["bert"], caches["llama-bpe"], "--task", "topic", "--no-cumulative", "--quiet")
    assert result.exit_code == 0, result.output
    assert (caches["bert"].parent / "bert.compare" / "report.json").is_file()


def test_compare_refusals(caches, tmp_path):
    assert_refused(invoke("compare", caches["bert"], caches["fewer"], "--out", tmp_path / "c", "--quiet"),
                   "not over the same examples", "holds 60 examples of split 'train'", "holds 40",
                   "same dataset and splits")
    assert not (tmp_path / "c").exists()
    assert_refused(invoke("compare", caches["bert"], "--out", tmp_path / "c", "--quiet"), "at least two caches")
    assert_refused(invoke("compare", caches["bert"], caches["llama-bpe"], "--cka-examples", "1", "--quiet"),
                   "--cka-examples must be at least 2")
    assert_refused(invoke("compare", caches["bert"], caches["llama-bpe"], "--cka-states", "all", "--quiet"),
                   "--cka-states must be one of auto, mean, words")
    assert_refused(invoke("compare", caches["bert"], caches["llama-bpe"], "--cka-estimator", "biased", "--quiet"),
                   "--cka-estimator must be one of debiased, plain")
    assert_refused(invoke("compare", caches["bert"], caches["llama-bpe"], "--max-train", "1", "--quiet"),
                   "--max-train takes a number")
    (tmp_path / "file").write_text("x")
    assert_refused(invoke("compare", caches["bert"], caches["llama-bpe"], "--out", tmp_path / "file", "--quiet"),
                   "is a file")
    assert_refused(invoke("compare", caches["bert"], tmp_path / "nowhere", "--quiet"), "nowhere")
