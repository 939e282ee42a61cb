"""extract with a lossy storage measures what it costs on the data's labels, records it in the manifest, and warns
beyond max_loss naming a more faithful choice; info shows it; a rerun reads it back instead of measuring again."""

from __future__ import annotations

import json
import logging

import pytest
from cli_support import invoke

import layercache
import layercache.planning.checked as checked
from layercache.planning import extract
from layercache.store.manifest import read_manifest

SIZES = {"train": 240, "validation": 100}


@pytest.fixture
def small_builtin(monkeypatch):
    import layercache.sources.builtin as builtin

    original = builtin.load_builtin
    monkeypatch.setattr(builtin, "load_builtin", lambda seed=0, sizes_=None: original(seed, sizes_ or SIZES))


@pytest.fixture(scope="module")
def int8_cache(tiny_models, tmp_path_factory):
    import layercache.sources.builtin as builtin

    out = tmp_path_factory.mktemp("quality") / "int8-p8"
    with pytest.MonkeyPatch.context() as mp:
        original = builtin.load_builtin
        mp.setattr(builtin, "load_builtin", lambda seed=0, sizes_=None: original(seed, sizes_ or SIZES))
        result = extract(str(tiny_models["bert"]), "builtin", out, storage_dtype="int8", project=8,
                         quality_examples=200, progress=False)
    return result


def test_a_lossy_cache_records_its_cost_on_every_task(int8_cache):
    recorded = read_manifest(int8_cache.path).extraction.quality
    assert recorded == int8_cache.quality
    assert recorded["choice"] == "tokens int8 + project 8"
    assert recorded["examples"] == 200 and recorded["seed"] == 0
    assert "of 'train', scored on" in recorded["sample"]
    tasks = {t.name for t in int8_cache.manifest.tasks}
    assert set(recorded["probes"]) == set(recorded["head"]) == tasks
    for cost in [*recorded["probes"].values(), *recorded["head"].values()]:
        low, high = cost["interval_points"]
        assert low <= cost["loss_points"] <= high
        assert cost["loss_points"] == pytest.approx(100 * (cost["reference"] - cost["score"]), abs=0.02)


def test_info_shows_the_recorded_cost(int8_cache):
    result = invoke(*["info", str(int8_cache.path)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "quality" in text and "probes lose" in text and "against float32 states" in text
    as_json = json.loads(invoke(*["info", str(int8_cache.path), "--json"]).output)
    assert as_json["extraction"]["quality"]["choice"] == "tokens int8 + project 8"


def test_a_rerun_reads_the_cost_back_and_warns_beyond_max_loss(int8_cache, tiny_models, small_builtin, monkeypatch,
                                                                 caplog):
    """The complete cache is not measured again for the same sample; a max_loss it is beyond sends the check
    looking for a more faithful choice, recorded and named in one warning."""
    recorded, original = int8_cache.quality, checked.labelled_sample
    monkeypatch.setattr(checked, "labelled_sample", lambda *a, **k: pytest.fail("measured again"))
    again = extract(str(tiny_models["bert"]), "builtin", int8_cache.path, storage_dtype="int8", project=8,
                    quality_examples=200, progress=False)
    assert again.already_complete and again.quality == recorded
    monkeypatch.setattr(checked, "labelled_sample", original)
    worst = max(c["interval_points"][1] for c in recorded["probes"].values())
    with caplog.at_level(logging.WARNING, logger="layercache"):
        beyond = extract(str(tiny_models["bert"]), "builtin", int8_cache.path, storage_dtype="int8", project=8,
                         quality_examples=200, progress=False, max_loss=worst / 2)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "tokens int8 + project 8 loses" in warnings[0] and f"max_loss={worst / 2:g}" in warnings[0]
    assert beyond.quality["max_loss_points"] == worst / 2
    faithful = beyond.quality.get("more_faithful")
    if faithful:  # named with the keywords that extract it
        assert faithful["choice"] in warnings[0] and "overwrite=True" in warnings[0]
    else:
        assert "no larger choice was measured within it" in warnings[0]


def test_within_max_loss_no_warning(int8_cache, tiny_models, small_builtin, caplog):
    with caplog.at_level(logging.WARNING, logger="layercache"):
        extract(str(tiny_models["bert"]), "builtin", int8_cache.path, storage_dtype="int8", project=8,
                quality_examples=200, progress=False, max_loss=100.0)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize("options", [dict(storage_dtype="float16"), dict(storage_dtype="int8", quality_examples=0),
                                     dict(storage_dtype="int8", no_labels=True)])
def test_nothing_measured_for_a_faithful_storage_when_asked_not_to_or_without_labels(tiny_models, small_builtin,
                                                                                     tmp_path, monkeypatch, options):
    monkeypatch.setattr(checked, "labelled_sample", lambda *a, **k: pytest.fail("measured"))
    result = extract(str(tiny_models["bert"]), "builtin", tmp_path / "c", progress=False, **options)
    assert result.quality is None and read_manifest(result.path).extraction.quality is None


def test_the_public_extract_is_the_checked_one_with_every_option():
    import inspect

    from layercache.extraction.run import extract as plain

    assert layercache.extract is extract
    names = list(inspect.signature(extract).parameters)
    assert names[:len(inspect.signature(plain).parameters)] == list(inspect.signature(plain).parameters)
    assert names[-3:] == ["quality_examples", "max_loss", "quality_seed"]
    with pytest.raises(TypeError):
        extract("minilm", not_an_option=1)


def test_the_command_line_warns_in_one_sentence(int8_cache, tiny_models, small_builtin):
    result = invoke(*["extract", str(tiny_models["bert"]), "builtin", "--out", str(int8_cache.path),
                      "--storage-dtype", "int8", "--project", "8", "--quality-sample", "200", "--max-loss", "0"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "beyond --max-loss 0" in text and "Cache already complete" in text
