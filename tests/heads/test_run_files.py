"""Issue 27: a run folder's JSON files read as typed sections, in one module (heads/run_folders/run_files.py);
issue 39: each file has one typed reader and one typed writer, which write today's files and older ones back byte for
byte."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from layercache.errors import ConfigError
from layercache.heads import train_head
from layercache.heads.run_folders.persistence import jsonable
from layercache.heads.run_folders.run_files import (
    LayerWeights,
    RecordedCache,
    RunConfig,
    RunFiles,
    RunMetrics,
    find_runs,
    reported_metric,
    run_belongs_to,
)
from layercache.heads.run_folders.run_sections import FitRecord, SelectionRecord, TrainingData
from layercache.heads.workflow import read_run

CACHE = {"model": "tiny", "model_fingerprint": "fp", "tokenizer_fingerprint": "tfp", "hidden_size": 8,
         "config_hash": "hash", "max_length": 64, "stride": None, "storage_dtype": "float16"}
CONFIG = {"params": {"mixer": "adaptive"}, "model": {}, "layer_names": ["a", "b"], "source": "pooled:mean",
          "cache": CACHE, "train": {}}
METRICS = {"mixer": "adaptive", "selection": {"metric": {"topic": "mcc", "scope": "macro_f1"}},
           "validation": {"topic": {"accuracy": 0.5}},
           "test_split": "test", "test": {"topic": {"accuracy": 0.75, "macro_f1": 0.7, "mcc": 0.4},
                                          "scope": {"accuracy": 0.9, "macro_f1": 0.6},
                                          "intensity": {"pearson": 0.3, "spearman": 0.2},
                                          "odd": {"n": 3}}}
WEIGHTS = {"layer_names": ["a", "b"], "mixers": {"scalar": [0.25, 0.75], "gate": None}, "usage": {}}
MANIFEST = SimpleNamespace(config_hash="hash", model=SimpleNamespace(fingerprint="fp"))


def _run(folder: Path, config=CONFIG, metrics=METRICS, weights=WEIGHTS) -> Path:
    folder.mkdir(parents=True)
    for name, payload in (("config", config), ("metrics", metrics), ("layer_weights", weights)):
        if payload is not None:
            (folder / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    return folder


def test_sections_read_what_the_files_hold_and_write_it_back_unchanged(tmp_path):
    run = _run(tmp_path / "run")
    files = RunFiles.read(run)
    assert files.config.to_json() == CONFIG and files.metrics.to_json() == METRICS
    assert files.layer_weights.to_json() == WEIGHTS
    assert read_run(run) == {"config": CONFIG, "metrics": METRICS, "layer_weights": WEIGHTS}
    assert files.mixer == "adaptive" and files.config.mixer == "adaptive"
    assert files.config.cache == RecordedCache(model="tiny", model_fingerprint="fp", tokenizer_fingerprint="tfp",
                                               hidden_size=8, config_hash="hash", max_length=64, stride=None,
                                               storage_dtype="float16", records_text_settings=True)
    assert files.layer_weights.mixers == {"scalar": [0.25, 0.75]} and files.layer_weights.layer_names == ["a", "b"]
    assert files.metrics.scored_on == "test" and files.metrics.selection == {"topic": "mcc", "scope": "macro_f1"}


def test_the_reported_metric_is_chosen_in_one_place():
    scores = RunMetrics.from_json(METRICS).scores()
    assert scores == {"topic": {"metric": "accuracy", "value": 0.75}, "scope": {"metric": "accuracy", "value": 0.9},
                      "intensity": {"metric": "pearson", "value": 0.3}}
    assert reported_metric({"span_f1": 1, "macro_f1": 2}) == "span_f1" and reported_metric({}) is None
    validation_only = RunMetrics.from_json({"validation": {"topic": {"accuracy": 0.5}}})
    assert validation_only.scored_on == "validation" and validation_only.scores()["topic"]["value"] == 0.5


def test_missing_files_read_as_empty_sections(tmp_path):
    run = _run(tmp_path / "run", metrics=None, weights=None,
               config={**CONFIG, "params": {"mixer": "act"}, "cache": {"model": "old"}})
    files = RunFiles.read(run)
    assert files.metrics == RunMetrics() and files.layer_weights == LayerWeights()
    assert files.mixer == "act" and files.metrics.scores() == {} and files.layer_weights.usage == {}
    assert files.config.cache.records_text_settings is False and files.config.cache.model == "old"
    assert RunFiles.read(tmp_path).config is None


def test_a_damaged_file_is_refused_in_one_sentence(tmp_path):
    run = _run(tmp_path / "run")
    (run / "metrics.json").write_text('{"mixer": ')
    with pytest.raises(ConfigError, match=r"The run file .*metrics.json is not readable JSON .*damaged"):
        RunFiles.read(run)


def test_runs_are_found_beside_their_cache_and_checked_against_it(tmp_path):
    cache = SimpleNamespace(path=tmp_path / "cache", manifest=MANIFEST)
    mine = _run(tmp_path / "cache.runs" / "b-mine")
    other = _run(tmp_path / "cache.runs" / "a-other", config={**CONFIG, "cache": {**CACHE, "config_hash": "x"}})
    _run(tmp_path / "cache.runs" / "c-broken", config=None)
    (tmp_path / "cache.runs" / "c-broken" / "config.json").write_text("[1, 2]")
    assert run_belongs_to(mine, MANIFEST) and not run_belongs_to(other, MANIFEST)
    assert not run_belongs_to(tmp_path / "nothing", MANIFEST) and RunConfig.peek(tmp_path / "nothing") is None
    assert find_runs(cache) == [mine]
    extra = _run(tmp_path / "elsewhere")
    assert find_runs(cache, [extra, mine]) == [mine, extra]
    with pytest.raises(ConfigError, match="was trained on another cache than"):
        find_runs(cache, [other])
    with pytest.raises(ConfigError, match="is not a run folder"):
        find_runs(cache, [tmp_path / "nothing"])


def test_metrics_sections_name_what_train_head_prints():
    metrics = RunMetrics.from_json({**METRICS, "normalize": "none", "train_seconds": 1.5,
                                    "data": {"validation": "train (seeded stratified 10% slice, seed 0)"}})
    assert metrics.validation == METRICS["validation"] and metrics.test == METRICS["test"]
    assert (metrics.normalize, metrics.train_seconds) == ("none", 1.5)
    assert metrics.validated_on == "train (seeded stratified 10% slice, seed 0)"
    assert RunMetrics().test is None and RunMetrics().validated_on is None


# --- issue 39: one typed reader and one typed writer per file ---------------------------------------------------
def _written(payload: dict) -> str:
    """A run file's text as the writers write it (persistence.write_json)."""
    return json.dumps(jsonable(payload), indent=2, default=str) + "\n"


def test_a_trained_runs_files_read_back_and_are_written_again_byte_for_byte(cache, tmp_path):
    """train_head writes each file from its typed section; reading it and writing the section again gives the
    same bytes, and the result holds the sections it wrote (the dict views are what metrics.json holds)."""
    result = train_head(cache, "scalar", out=tmp_path / "run", tasks=["topic"], epochs=1, progress=False,
                        device="cpu")
    files = RunFiles.read(result.run)
    for name, section in (("config", files.config), ("metrics", files.metrics), ("layer_weights", files.layer_weights)):
        assert _written(section.to_json()) == (result.run / f"{name}.json").read_text(), name
    assert isinstance(result.files.metrics, RunMetrics) and isinstance(result.files.layer_weights, LayerWeights)
    assert _written(result.files.to_json()["metrics"]) == (result.run / "metrics.json").read_text()
    assert _written(result.files.config.to_json()) == (result.run / "config.json").read_text()
    assert list(result.metrics) == ["mixer", "normalize", "fit", "train_seconds", "data", "selection", "warnings",
                                    "validation", "history", "test_split", "test"]
    assert result.metrics["test"] == result.files.metrics.test and result.files.metrics.test_split == "test"
    assert result.layer_weights["layer_names"] == result.head.layer_names_ == result.files.layer_weights.layer_names
    assert list(files.config.to_json()) == ["layercache_version", "created_at", "params", "model", "layer_names",
                                            "source", "cache", "data", "train", "selection", "fit"]
    cache_keys = ["model", "model_fingerprint", "tokenizer_fingerprint", "hidden_size", "final_norm", "dataset",
                  "layer_names", "storage_dtype", "config_hash", "max_length", "stride"]
    assert list(files.config.cache.to_json()) == cache_keys
    assert files.config.cache == result.head.cache_info_ and files.config.cache.records_text_settings
    # every key the head records in data, fit and selection is a field of its section (none left to extra)
    nested = (files.config.data, files.config.fit, files.config.selection, files.metrics.data, files.metrics.fit,
              files.metrics.selection_record)
    assert all(section is not None and section.extra == {} for section in nested)
    assert files.config.data == files.metrics.data and files.config.data.to_json() == result.head.data_


#: A run as the first versions wrote it: no selection, fit or data in the config, no text settings in its cache,
#: metrics without normalize, fit, selection or warnings.
OLD_CONFIG = {"layercache_version": "0.1.0", "created_at": "2026-11-22T10:00:00+00:00", "params": {"mixer": "last"},
              "model": {}, "layer_names": ["a"], "source": "tokens",
              "cache": {"model": "tiny", "model_fingerprint": "fp", "tokenizer_fingerprint": "tfp", "hidden_size": 8,
                        "final_norm": "none", "dataset": "builtin", "layer_names": ["a"], "storage_dtype": "float16",
                        "config_hash": "hash"},
              "train": {"epochs": 1}}
OLD_METRICS = {"mixer": "last", "train_seconds": 1.5, "data": {"validation": "validation"},
               "validation": {"topic": {"accuracy": 0.5}}, "history": {"epochs": []}}


def test_an_older_runs_files_read_with_their_defaults_and_write_back_unchanged():
    config = RunConfig.from_json(OLD_CONFIG)
    assert _written(config.to_json()) == _written(OLD_CONFIG)
    assert config.selection is None and config.fit is None and config.data is None
    assert config.fitted_by == {"solver": "adamw"} and config.training_data == {}
    assert not config.cache.records_text_settings and config.cache.max_length is None
    assert config.cache.projection is None and "max_length" not in config.cache.to_json()
    metrics = RunMetrics.from_json(OLD_METRICS)
    assert _written(metrics.to_json()) == _written(OLD_METRICS)
    assert metrics.normalize is None and metrics.warnings is None and metrics.selection == {}
    assert metrics.validated_on == "validation" and metrics.scored_on == "validation"


def test_a_projected_runs_cache_and_unknown_keys_are_kept():
    """The projection's checksum is written only by a projected run; keys this version does not know (a file
    edited by hand) are kept, after the known ones."""
    projected = {**OLD_CONFIG["cache"], "max_length": 64, "stride": None, "projection": "sha256:abc"}
    cache = RecordedCache.from_json(projected)
    assert cache.projection == "sha256:abc" and cache.to_json() == projected
    assert list(cache.to_json()) == list(projected)
    edited = {"note": "by hand", **OLD_METRICS}
    metrics = RunMetrics.from_json(edited)
    assert metrics.extra == {"note": "by hand"} and metrics.to_json() == edited
    assert list(metrics.to_json()) == [*OLD_METRICS, "note"]
    weights = LayerWeights(layer_names=["a", "b"], mixer_weights={"shared": [0.5, 0.5], "gate": None})
    assert weights.to_json() == {"layer_names": ["a", "b"], "mixers": {"shared": [0.5, 0.5], "gate": None}, "usage": {}}
    assert weights.mixers == {"shared": [0.5, 0.5]} and LayerWeights.from_json(weights.to_json()) == weights


# --- issue 39, part 3: the objects nested in a run's files are sections too ---------------------------------------
#: A seed ensemble's config as LayerHead.save writes it: data, fit and selection with every key a run may hold.
NESTED_CONFIG = {  # the keys in the order LayerHead.save writes them
    "params": {"mixer": "scalar"}, "model": {}, "layer_names": ["a", "b"], "source": "pooled:mean",
    "cache": RecordedCache.from_json(CACHE).to_json(),
    "data": {"cache": "/caches/c", "train_split": "train", "validation": "validation", "n_train": 120,
             "n_validation": 40, "normalize": "none", "mean_skip_first": False, "source_note": "read pooled",
             "trained": "live", "live": {"backbone": "tiny", "forward_seconds": 0.5}, "members": ["seed 0", "seed 1"],
             "seeds": [0, 1]},
    "train": {"epochs": 2},
    "selection": {"metric": {"topic": "mcc"}, "reason": {"topic": "asked"}, "score": "mcc",
                  "weights": {"topic": 1.0}},
    "fit": {"solver": "adamw", "members": ["seed 0", "seed 1"], "combine": "mean of class probabilities",
            "seeds": [0, 1]},
}
CONVEX_FIT = {"solver": "lbfgs", "method": {"topic": "lbfgs"}, "C": {"topic": 0.1}, "C_grid": [0.1, 1.0]}
NESTED_METRICS = {"mixer": "last", "normalize": "none", "fit": CONVEX_FIT, "train_seconds": 1.5,
                  "data": NESTED_CONFIG["data"], "selection": METRICS["selection"], "warnings": [],
                  "validation": METRICS["validation"], "history": {"epochs": []}, "test_split": "test",
                  "test": METRICS["test"]}  # in the order write_trained_run writes them


def test_nested_sections_read_back_equal_and_are_written_again_byte_for_byte(tmp_path):
    run = _run(tmp_path / "run", config=NESTED_CONFIG, metrics=NESTED_METRICS)
    files = RunFiles.read(run)
    config = files.config
    assert isinstance(config.data, TrainingData) and isinstance(config.fit, FitRecord)
    assert isinstance(config.selection, SelectionRecord)
    assert (config.data.validation, config.data.n_train, config.data.seeds) == ("validation", 120, [0, 1])
    assert config.data.live == {"backbone": "tiny", "forward_seconds": 0.5} and config.data.trained == "live"
    assert (config.fit.solver, config.fit.members, config.fit.c) == ("adamw", ["seed 0", "seed 1"], None)
    assert config.selection.metric == {"topic": "mcc"} and config.selection.weights == {"topic": 1.0}
    metrics = files.metrics
    assert (metrics.fit.c, metrics.fit.c_grid, metrics.fit.method) == ({"topic": 0.1}, [0.1, 1.0], {"topic": "lbfgs"})
    assert metrics.validated_on == "validation" and metrics.selection == {"topic": "mcc", "scope": "macro_f1"}
    for name, section in (("config", config), ("metrics", metrics)):
        assert _written(section.to_json()) == (run / f"{name}.json").read_text(), name
        assert type(section).from_json(section.to_json()) == section
    # What LayerHead.load and the command line read: the same objects as before they were typed.
    assert config.training_data == NESTED_CONFIG["data"] and config.fitted_by == NESTED_CONFIG["fit"]
    assert read_run(run)["config"] == NESTED_CONFIG
    # The writers hand the head's plain objects (LayerHead.run_config, write_trained_run): the same section.
    built = RunConfig(params={"mixer": "scalar"}, model={}, layer_names=["a", "b"], source="pooled:mean",
                      cache=RecordedCache.from_json(CACHE), data=NESTED_CONFIG["data"], train={"epochs": 2},
                      selection=NESTED_CONFIG["selection"], fit=NESTED_CONFIG["fit"])
    assert built == config and _written(built.to_json()) == (run / "config.json").read_text()


def test_older_runs_without_nested_keys_still_read():
    """Runs written before a nested key existed (no normalize in data, no weights in selection, no fit at all) read
    with those fields None, and are written back as they were; a value that is not an object is kept as read."""
    older = {**{k: v for k, v in OLD_CONFIG.items() if k != "train"},
             "data": {"cache": "/c", "train_split": "train", "validation": "validation", "n_train": 3,
                      "n_validation": 2},
             "train": OLD_CONFIG["train"], "selection": {"metric": {"topic": "accuracy"}}}
    config = RunConfig.from_json(older)
    assert config.data.normalize is None and config.data.mean_skip_first is None and config.data.n_train == 3
    assert config.selection.weights is None and config.selection.reason is None and config.fit is None
    assert config.fitted_by == {"solver": "adamw"} and config.training_data == older["data"]
    assert _written(config.to_json()) == _written(older)
    metrics = RunMetrics.from_json({**OLD_METRICS, "selection": {"metric": {"topic": "accuracy"}}})
    assert metrics.fit is None and metrics.selection == {"topic": "accuracy"} and metrics.data.n_train is None
    assert RunMetrics.from_json({"data": None}).data is None and RunMetrics.from_json({}).validated_on is None
    edited = RunConfig.from_json({**older, "fit": "adamw"})
    assert edited.fit is None and edited.extra == {"fit": "adamw"} and edited.to_json()["fit"] == "adamw"
