"""Fixtures for the live bundle tests: small built-in caches from tiny backbones and heads trained on them."""

from __future__ import annotations

import pytest

import layercache as lc
from layercache.sources.builtin import load_builtin

SIZES = {"train": 32, "validation": 12}
CACHE_OPTIONS = {"bert": {}, "bert-stride": {"max_length": 12, "stride": 4}, "gpt2": {"mean_skip_first": True}}
"""live_caches' names and the extract options each was made with."""


@pytest.fixture(autouse=True, scope="module")
def one_thread(one_torch_thread):
    """Every test module here runs torch on one thread (see the root conftest)."""


@pytest.fixture(scope="session")
def records():
    return load_builtin(sizes=SIZES)


@pytest.fixture(scope="session")
def live_caches(tiny_models, tmp_path_factory):
    """name -> cache path: the built-in tasks through the tiny BERT (plain, and windowed) and GPT-2.

    Small batches: the cache's batch composition (and padding) differs from a live feed's."""
    import layercache.sources.builtin as builtin

    root = tmp_path_factory.mktemp("bundle-caches")
    original = builtin.load_builtin
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERCACHE_HOME", str(root / "home"))  # never touch the user's "latest cache"
        mp.setattr(builtin, "load_builtin", lambda seed=0, sizes=None: original(seed, sizes or SIZES))
        for name, extra in CACHE_OPTIONS.items():
            out[name] = lc.extract(str(tiny_models[name.split("-")[0]]), "builtin", root / name, progress=False,
                                   batch_size=6, **extra).path
    return out


HEADS = {  # run name -> (mixer, task, options): a sequence, a token and a regression head, and one reading every layer
    "topic": ("last", "topic", {"layers": ["layer_1"]}),
    "scope": ("last", "negation_scope", {"epochs": 2, "layers": ["layer_1"]}),
    "intensity": ("last", "intensity", {"layers": ["layer_1"]}),
    "sentiment": ("scalar", "sentiment", {"epochs": 2}),
}


@pytest.fixture(scope="session")
def runs(live_caches, tmp_path_factory):
    """cache name -> {run name: run folder}, every head of HEADS trained on that cache."""
    root = tmp_path_factory.mktemp("bundle-runs")
    out = {}
    for cache_name, path in live_caches.items():
        cache = lc.LayerCache.open(path)
        out[cache_name] = {}
        for name, (mixer, task, options) in HEADS.items():
            head = lc.LayerHead(mixer, tasks=[task], progress=False, batch_size=8, **options).fit(cache)
            out[cache_name][name] = head.save(root / cache_name / name)
    return out
