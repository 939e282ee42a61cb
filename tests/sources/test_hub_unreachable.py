"""A hub dataset without a reachable hub (issue 36): one sentence after one probe, never the hub's retry lines.

The hub is a closed port on this machine (tests/hub_support.py); the attempts are counted, not timed.
"""

from __future__ import annotations

import logging

import pytest
from hub_support import record_attempts, unreachable_hub

from layercache.errors import DatasetError
from layercache.sources.datasets import load_dataset_records


def test_a_missing_hub_dataset_is_one_sentence_after_one_probe(tmp_path, monkeypatch, caplog):
    import datasets
    from huggingface_hub import constants

    unreachable_hub(monkeypatch)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    attempts = record_attempts(monkeypatch.setattr)
    with caplog.at_level(logging.WARNING), pytest.raises(DatasetError) as refused:
        load_dataset_records("nobody/no-such-data")
    text = str(refused.value)
    assert text.startswith("Could not load dataset 'nobody/no-such-data': the Hugging Face Hub cannot be reached "
                           "(connection refused by 127.0.0.1:"), text
    assert "or the builtin data" in text and "HF_HUB_OFFLINE=1" in text
    assert [kind for kind, _ in attempts] == ["lookup", "connect"]
    assert "Retry" not in caplog.text
    assert constants.HF_HUB_OFFLINE is False and datasets.config.HF_HUB_OFFLINE is False  # offline only for the load


def test_a_local_folder_never_asks_the_hub(tmp_path, monkeypatch):
    unreachable_hub(monkeypatch)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.csv").write_text("text,label\na fine day,pos\na dull day,neg\n")
    attempts = record_attempts(monkeypatch.setattr)
    records = load_dataset_records(str(folder))
    assert list(records.splits) == ["train"] and attempts == []
