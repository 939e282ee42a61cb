"""compare_caches on tiny models of other families, depths, tokenizers and storage over the same built-in examples:
the numbers are each model's own probe numbers, on one axis of relative depth, and CKA pairs the same examples."""

from __future__ import annotations

import json

import numpy as np
import pytest

import layercache as lc
from layercache import LayerCache
from layercache.depth import linear_cka
from layercache.probes import LinearProbes
from layercache.report.compare import Comparison, compare_caches, save_comparison
from layercache.report.compare.examples import shared_examples

from .conftest import COMPARED


def test_every_model_every_task_and_every_pair(compared):
    assert compared.labels == ["bert float16", "llama", "llama-bpe", "bert int8", "bert float16 K=8"]  # storage tells
    families = {m["label"]: (m["kind"], len(m["layer_names"]), m["width"]) for m in compared.models}
    assert families == {"bert float16": ("encoder", 3, 32), "llama": ("decoder", 4, 32),
                        "llama-bpe": ("decoder", 3, 32),
                        "bert int8": ("encoder", 3, 32), "bert float16 K=8": ("encoder", 3, 8)}
    assert compared.model("llama")["relative_depth"] == [0, 1 / 3, 2 / 3, 1]
    assert list(compared.tasks) == ["topic", "sentiment", "negation_scope", "intensity"]
    for entry in compared.tasks.values():
        assert list(entry["models"]) == compared.labels and entry["skipped"] == {}
    pairs = [(p["a"], p["b"]) for p in compared.similarity]
    assert len(pairs) == 10 and pairs[0] == ("bert float16", "llama")
    for pair in compared.similarity:
        matrix = np.asarray(pair["cka"], np.float64)
        assert matrix.shape == (len(compared.model(pair["a"])["layer_names"]),
                                len(compared.model(pair["b"])["layer_names"]))
        assert np.all((matrix >= -1 - 1e-9) & (matrix <= 1 + 1e-9))  # debiased: unrelated states near 0
    assert compared.meta["cka"] == {"states": "mean", "estimator": "debiased", "asked": 2000, "split": "test",
                                    "n": 60}


def test_a_models_scores_are_its_own_probes(compared, caches):
    """Each model's per-layer scores are those of LinearProbes on its cache alone (the probe report's numbers)."""
    for label, name in (("llama-bpe", "llama-bpe"), ("bert float16 K=8", "projected")):
        with LayerCache.open(caches[name]) as cache:
            for task in ("sentiment", "negation_scope"):
                probes = LinearProbes(task=task).fit(cache)
                model = compared.tasks[task]["models"][label]
                np.testing.assert_allclose(model["probe"]["eval"], probes.score(cache, "test"), atol=1e-9)
                assert model["summary"]["best_index"] == probes.best_layer_
    model = compared.tasks["negation_scope"]["models"]["llama"]
    summary = model["summary"]
    assert summary["best_score"] == model["probe"]["eval"][summary["best_index"]]
    assert summary["best_depth"] == compared.model("llama")["relative_depth"][summary["best_index"]]
    np.testing.assert_allclose(model["control"]["selectivity"],
                               np.subtract(model["probe"]["eval"], model["control"]["eval"]), atol=1e-12)
    for entry in compared.tasks.values():
        for label, model in entry["models"].items():
            s = model["summary"]
            if s["expected_layer"] is not None:  # E_Delta as a depth: the states' depths, interpolated
                depths = compared.model(label)["relative_depth"]
                assert s["expected_depth"] == pytest.approx(np.interp(s["expected_layer"], range(len(depths)), depths))
    assert "control" not in compared.tasks["intensity"]["models"]["llama"]  # regression: no control task


def test_the_same_examples_line_up_by_source_row(caches):
    """llama-bpe's tokenizer orders the rows otherwise; CKA pairs each example with itself all the same."""
    with LayerCache.open(caches["bert"]) as bert, LayerCache.open(caches["llama-bpe"]) as bpe:
        assert not np.array_equal(bert.example_index("test"), bpe.example_index("test"))
        shared = shared_examples([bert, bpe], ["bert", "llama-bpe"])
        rows_a, rows_b = shared.cache_rows(0, "test"), shared.cache_rows(1, "test")
        assert np.array_equal(bert.example_index("test")[rows_a], bpe.example_index("test")[rows_b])
        a = bert.pooled("test", "mean", rows=rows_a)  # (n, L, D), the examples in source order
        b = bpe.pooled("test", "mean", rows=rows_b)
        expected = [[linear_cka(a[:, i], b[:, j]) for j in range(b.shape[1])] for i in range(a.shape[1])]
    comparison = compare_caches([caches["bert"], caches["llama-bpe"]], tasks=["sentiment"], cumulative=False,
                                cka_estimator="plain", progress=False)
    assert comparison.meta["cka"]["estimator"] == "plain"
    np.testing.assert_allclose(comparison.similarity[0]["cka"], expected, atol=1e-9)
    misaligned = [[linear_cka(a[:, i], b[::-1, j]) for j in range(b.shape[1])] for i in range(a.shape[1])]
    assert not np.allclose(comparison.similarity[0]["cka"], misaligned, atol=1e-3)  # the check can fail


def test_storage_keeps_the_geometry(compared):
    """The tiny BERT against its own int8 cache: the same states to within rounding, so CKA is 1 state to state;
    against its projection to 8 of 32 dimensions, high, and highest for the same state."""
    pairs = {(p["a"], p["b"]): np.asarray(p["cka"]) for p in compared.similarity}
    int8 = pairs[("bert float16", "bert int8")]
    np.testing.assert_allclose(np.diag(int8), 1, atol=1e-3)
    projected = pairs[("bert float16", "bert float16 K=8")]
    assert np.all(np.diag(projected) > 0.5)
    assert pairs[("bert float16", "llama-bpe")].max() < np.diag(int8).min()


def test_word_states_pair_the_same_words(caches):
    comparison = compare_caches([caches["bert"], caches["llama-bpe"], caches["llama"]], tasks=["negation_scope"],
                                cka_states="words", cka_examples=150, cumulative=False, progress=False)
    assert comparison.meta["cka"]["states"] == "words" and comparison.meta["cka"]["n"] == 150
    assert {p["n"] for p in comparison.similarity} == {150}
    assert np.asarray(comparison.similarity[2]["cka"]).shape == (3, 4)


def test_a_pooled_cache_is_compared_where_it_can_be(caches):
    comparison = compare_caches([caches["bert"], caches["pooled"]], cumulative=False, progress=False)
    assert comparison.labels == ["bert float16", "bert float16 pooled"]
    entry = comparison.tasks["negation_scope"]
    assert list(entry["models"]) == ["bert float16"]
    assert "pooled vectors only" in entry["skipped"]["bert float16 pooled"]
    assert any("negation_scope is not probed on bert float16 pooled" in note for note in comparison.notes)
    assert list(comparison.tasks["sentiment"]["models"]) == comparison.labels
    np.testing.assert_allclose(np.diag(comparison.similarity[0]["cka"]), 1, atol=1e-6)  # the same pooled means


def test_names_and_the_saved_files(compared, tmp_path):
    paths = save_comparison(compared, tmp_path / "cmp")
    data = json.loads(paths.json.read_text())
    assert data["format"] == "layercache-comparison" and Comparison.load(paths.folder) == compared
    assert data["tasks"]["topic"]["models"]["llama"]["summary"] == compared.tasks["topic"]["models"]["llama"]["summary"]
    page = paths.html.read_text()
    assert page.count('<img src="data:image/png;base64,') == 2 + len(compared.similarity)
    assert all(label in page for label in compared.labels) and "<script" not in page


def test_given_names(caches):
    comparison = compare_caches([caches["bert"], caches["int8"]], names=["f16", "q8"], tasks=["topic"],
                                cumulative=False, progress=False, cka_examples=20)
    assert comparison.labels == ["f16", "q8"] and comparison.similarity[0]["n"] == 20
    assert [p["a"] for p in comparison.similarity] == ["f16"]


def test_compared_order_is_the_fixture_order(compared, caches):
    assert [m["cache"] for m in compared.models] == [str(caches[name]) for name in COMPARED]


def test_a_cache_without_pooled_means_gives_the_mean_of_its_token_states(caches, tiny_models, tmp_path):
    unpooled = lc.extract(str(tiny_models["bert"]), "builtin", tmp_path / "unpooled", limit=60, pooling=[],
                          progress=False).path
    comparison = compare_caches([caches["bert"], unpooled], tasks=[], progress=False)
    assert comparison.models[1]["pooling"] == []
    np.testing.assert_allclose(np.diag(comparison.similarity[0]["cka"]), 1, atol=1e-5)  # the same means
