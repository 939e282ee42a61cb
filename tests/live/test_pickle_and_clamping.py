"""allow_pickle for a pickle-only model's cache: verify, parity, predict; verify counts clamped values.

The commands' --allow-pickle and verify's clamping line are tested in tests/cli/test_live_allow_pickle.py; the
caches (pickle_cache, huge_cache) are the root conftest's."""

from __future__ import annotations

import layercache as lc
from layercache.live import LiveBundle, parity, verify_cache
from layercache.live.predict import predict_texts


def test_verify_takes_allow_pickle(pickle_cache):
    cache, run = pickle_cache
    assert verify_cache(cache, sample=2, allow_pickle=True).passed
    assert parity(run, cache, "test", rows=[0, 1], allow_pickle=True).agreement == 1.0


def test_predict_takes_allow_pickle(pickle_cache):
    _, run = pickle_cache
    assert predict_texts([run], ["a fine day"], allow_pickle=True).texts == ["a fine day"]
    assert LiveBundle.from_runs([run], allow_pickle=True).predict(["a fine day"]).texts == ["a fine day"]


def test_verify_says_how_many_values_were_clamped(huge_cache):
    manifest = lc.read_manifest(huge_cache)
    assert manifest.storage.dtype == "float16" and manifest.extraction.overflow > 0
    n = manifest.splits["train"].n_examples
    result = verify_cache(huge_cache, sample=n)  # every row: the count covers what extraction clamped
    tokens = sum(r.clamped for r in result.rows if r.what == "tokens")
    assert tokens == manifest.extraction.overflow
    assert result.clamped >= tokens and result.clamped == sum(r.clamped for r in result.rows)


def test_verify_of_an_unclamped_cache_says_none_was(live_caches):
    result = verify_cache(live_caches["bert"], sample=2)
    assert result.clamped == 0 and "none was clamped" in result.clamping()
    assert result.to_json()["clamping"] == result.clamping()
