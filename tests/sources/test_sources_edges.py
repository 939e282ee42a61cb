"""Data sources at their edges (issue 26; each test failed on 35f1445): nothing dropped or misread silently. That
their warnings are shown like every other layercache warning is tested with the extract command, in
tests/cli/test_cache.py."""

from __future__ import annotations

import pytest
from cli_support import assert_refused, invoke

from layercache.errors import DatasetError
from layercache.sources.datasets import load_dataset_records


def write(path, text):
    path.write_text(text)
    return path


def test_a_split_named_twice_is_refused_not_silently_dropped(tiny_models, tmp_path):
    a = write(tmp_path / "a.tsv", "text\tlabel\nthe lamp is good\tpos\nthe lamp is bad\tneg\n")
    b = write(tmp_path / "b.tsv", "text\tlabel\nthe cup is good\tpos\nthe cup is bad\tneg\n")
    out = tmp_path / "cache"
    result = invoke("extract", tiny_models["bert"], "--split", f"train={a}", "--split", f"train={b}", "--out", out)
    assert_refused(result, "--split names the split 'train' twice", str(a), str(b))
    assert not out.exists()
    assert_refused(invoke("extract", tiny_models["bert"], "imdb", "--split", "train", "--split", "train",
                          "--out", out), "--split names the split 'train' twice")


@pytest.mark.parametrize("bad, shown", [("Infinity", "inf"), ("-Infinity", "-inf"), ('"inf"', "'inf'"),
                                        ('"NaN"', "'NaN'")])
def test_a_non_finite_label_among_numbers_is_refused_naming_its_row(tmp_path, bad, shown):
    rows = [f'{{"text": "sentence number {i}", "score": {0.5 + i / 10}}}' for i in range(6)]
    rows[4] = f'{{"text": "sentence number 4", "score": {bad}}}'
    path = write(tmp_path / "scores.jsonl", "\n".join(rows) + "\n")
    with pytest.raises(DatasetError, match=rf"Label column 'score' holds {shown} in split 'train' \(file .*scores"
                                           r".jsonl', line 5\), a number that is not finite"):
        load_dataset_records(str(path))
    with pytest.raises(DatasetError, match="not finite"):
        load_dataset_records(str(path), task_kind="regression")


def test_inf_is_an_ordinary_class_name_among_words(tmp_path):
    """Guard: the refusal is for columns of numbers only."""
    path = write(tmp_path / "words.csv", "text,label\nfirst text,inf\nsecond text,fin\nthird text,inf\n")
    assert load_dataset_records(str(path)).tasks[0].label_names == ("fin", "inf")
