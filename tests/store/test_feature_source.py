"""The one parser of ``source`` strings (tokens | pooled:<mode> | auto), shared by heads, probes and depth."""

from __future__ import annotations

import pytest
from conftest import tiny_builtin_cache

from layercache.depth.similarity import layer_similarity
from layercache.errors import CacheError, ConfigError
from layercache.heads.data.source import resolve_source as head_source
from layercache.probes.features import resolve_source as probe_source
from layercache.store.feature_source import FeatureSource, parse_source, require_source, source_spellings
from layercache.store.reader import LayerCache
from layercache.store.schema import POOLING_MODES


@pytest.fixture(scope="module")
def tiny_cache(tiny_models, tmp_path_factory) -> LayerCache:
    return LayerCache.open(tiny_builtin_cache(tiny_models, tmp_path_factory, "feature-source", limit=12))


def test_every_spelling_round_trips():
    for spelling in source_spellings():
        assert str(parse_source(spelling)) == spelling
    assert parse_source("pooled:mean") == FeatureSource("pooled", "mean")
    assert parse_source("tokens").mode is None and not parse_source("tokens").is_pooled
    assert set(source_spellings(allow_auto=False)) == {"tokens", *(f"pooled:{m}" for m in POOLING_MODES)}


@pytest.mark.parametrize("bad", ["pooled:", "pooled:median", "Tokens", "pooled", "", None, 3])
def test_unknown_spellings_are_refused_with_the_choices(bad):
    with pytest.raises(ConfigError, match="pooled:mean"):
        parse_source(bad)


def test_auto_is_refused_where_a_concrete_source_is_needed():
    with pytest.raises(ConfigError, match="'auto' is not accepted"):
        parse_source("auto", allow_auto=False)


def test_require_source_checks_what_the_cache_stores(tiny_cache):
    cache = tiny_cache
    assert require_source(cache, "tokens").kind == "tokens"
    stored = cache.manifest.pooling[0]
    assert require_source(cache, f"pooled:{stored}").mode == stored
    missing = next(mode for mode in POOLING_MODES if mode not in cache.manifest.pooling)
    with pytest.raises(CacheError, match=f"no pooled '{missing}' vectors"):
        require_source(cache, f"pooled:{missing}")


def test_heads_probes_and_depth_refuse_the_same_bad_source_alike(tiny_cache):
    """One parser: a misspelt source gets the same sentence from every consumer (naming what it accepts)."""
    messages = set()
    task = tiny_cache.tasks[0]
    for call in (lambda: head_source(tiny_cache, "pooled:median", [task]),
                 lambda: probe_source(tiny_cache, task, "pooled:median"),
                 lambda: layer_similarity(tiny_cache, source="pooled:median")):
        with pytest.raises(ConfigError) as caught:
            call()
        messages.add(str(caught.value).split(";")[0])
    assert messages == {"source 'pooled:median' is not known"}
