"""Every model's probes fit on the same examples: a training sample drawn once in the shared order (by source row)
and read from each cache's own rows, though the caches store them in other orders."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from layercache import LayerCache
from layercache.probes import linear as linear_module
from layercache.report.compare import compare_caches
from layercache.report.compare.examples import shared_examples
from layercache.report.compare.shared_order import SharedOrderCache, shared_order


@pytest.fixture
def fitted_on(monkeypatch):
    """model (cache folder) -> task -> the source rows (a word: its sentence's) of each training sample drawn."""
    seen: dict[str, dict[str, list[Counter]]] = {}
    read = linear_module.read_train_parts

    def recording(cache, spec, *args, **kwargs):
        train, val, where = read(cache, spec, *args, **kwargs)
        source = cache.example_index("train")[train.rows]  # (n,) source row of each example (word)
        seen.setdefault(str(cache.path), {}).setdefault(spec.name, []).append(Counter(source.tolist()))
        return train, val, where

    monkeypatch.setattr(linear_module, "read_train_parts", recording)
    return seen


def test_the_probes_of_every_model_fit_on_the_same_sample(caches, fitted_on):
    """bert and llama-bpe store their rows in other orders; with a sample of 20 examples (40 words) each, both
    models' probes are fitted on the same source rows (each cache drawing in its own order did not)."""
    with LayerCache.open(caches["bert"]) as bert, LayerCache.open(caches["llama-bpe"]) as bpe:
        assert not np.array_equal(bert.example_index("train"), bpe.example_index("train"))
    comparison = compare_caches([caches["bert"], caches["llama-bpe"]], tasks=["sentiment", "negation_scope"],
                                max_train=20, cumulative=False, progress=False, cka_examples=10)
    a, b = fitted_on[str(caches["bert"])], fitted_on[str(caches["llama-bpe"])]
    for task in ("sentiment", "negation_scope"):
        assert len(a[task]) == 2 and a[task][0] == a[task][1]  # the probes and their control task: one sample
        assert sum(a[task][0].values()) == 20
        assert a[task] == b[task], task
        models = comparison.tasks[task]["models"].values()
        assert {m["probe"]["n_train"] for m in models} == {20}
        assert len({m["probe"]["n_train_available"] for m in models}) == 1
    assert not any("own row order" in note for note in comparison.notes)


def test_a_cache_and_its_rows_in_another_order_score_alike(caches):
    """The tiny BERT against a view of its own cache that stores the rows reversed: one order for the probes, so
    the same sample, validation, control labels and scores."""
    with LayerCache.open(caches["bert"]) as bert:
        reversed_rows = {split: np.arange(bert.num_examples(split))[::-1].copy() for split in bert.splits}
        with SharedOrderCache(bert, reversed_rows) as flipped:
            assert np.array_equal(flipped.example_index("train"), bert.example_index("train")[::-1])
            comparison = compare_caches([bert, flipped], names=["as stored", "reversed"], max_train=25,
                                        cumulative=False, progress=False, cka_examples=10)
    for task, entry in comparison.tasks.items():
        kept, turned = entry["models"]["as stored"], entry["models"]["reversed"]
        for part in ("probe", "control"):
            if part in kept:
                np.testing.assert_allclose(kept[part]["eval"], turned[part]["eval"], atol=1e-9, err_msg=task)
        assert kept["summary"]["best_index"] == turned["summary"]["best_index"]
    np.testing.assert_allclose(np.diag(comparison.similarity[0]["cka"]), 1, atol=1e-9)


def test_the_view_reads_each_example_where_its_cache_holds_it(caches):
    with LayerCache.open(caches["bert"]) as bert, LayerCache.open(caches["llama-bpe"]) as bpe:
        shared = shared_examples([bert, bpe])
        views, dropped = shared_order([bert, bpe], shared)
        view = views[1]
        assert isinstance(view, SharedOrderCache)
        rows = shared.cache_rows(1, "test")
        assert np.array_equal(view.example_index("test"), shared.source_rows["test"])
        np.testing.assert_array_equal(view.pooled("test", "mean", rows=[2, 0]), bpe.pooled("test", "mean",
                                                                                              rows=rows[[2, 0]]))
        np.testing.assert_array_equal(view.pooled_stored("test").numpy(), bpe.pooled_stored("test").numpy()[rows])
        lengths = view.lengths("test")
        start = int(lengths[:3].sum())  # token 1 of view row 3, and the first token of view row 0
        own = np.concatenate([[0], np.cumsum(bpe.lengths("test"))])
        (got,) = view.gather_positions("test", [[start + 1, 0]])
        (want,) = bpe.gather_positions("test", [[own[rows[3]] + 1, own[rows[0]]]])
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(view.tokens("test", [3])[0], bpe.tokens("test", [rows[3]])[0])
        assert [len(x) for x in view.labels("test", "negation_scope")[:3]] == \
            [len(x) for x in (bpe.labels("test", "negation_scope")[r] for r in rows[:3])]
        with pytest.raises(NotImplementedError):
            view.batch("test", [0])
        view.close()
        assert set(dropped) <= set(shared.sizes)
