"""per_token_usage: an act head's depth for every cached token, aligned with the cache's token rows."""

from __future__ import annotations

import numpy as np
import pytest

import layercache
from layercache.errors import ConfigError
from layercache.heads import LayerHead
from layercache.heads.token_usage import per_token_usage


@pytest.fixture(scope="module")
def cache(tiny_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("usage") / "cache"
    layercache.extract(str(tiny_models["bert"]), "builtin", out, limit=80, progress=False)
    with layercache.LayerCache.open(out) as handle:
        yield handle


def test_act_depth_per_token_matches_the_heads_own_forward(cache):
    head = LayerHead("act", tasks=["negation_scope"], epochs=1, progress=False).fit(cache)
    usage = per_token_usage(head, cache, "test")
    depth = usage["shared"]
    lengths = cache.lengths("test")
    assert depth.shape == (int(lengths.sum()),) and np.isfinite(depth).all()
    L = len(cache.layer_names) - 1
    assert depth.min() >= 1.0 and depth.max() <= L + 1.0  # N + R with N in [1, L], R in (0, 1]
    # row 3 alone through the model gives the same depths as its slice of the flat array
    batch = cache.batch("test", [3], layers=head.layer_names_)
    head.model_.eval()
    alone = head.model_(batch.states, batch.mask).usage["shared"]["depth"][0, : lengths[3]].numpy()
    start = int(lengths[:3].sum())
    np.testing.assert_allclose(depth[start:start + lengths[3]], alone, rtol=1e-4, atol=1e-4)


def test_a_mixer_without_per_token_depth_is_refused(cache):
    head = LayerHead("scalar", tasks=["negation_scope"], epochs=1, progress=False).fit(cache)
    with pytest.raises(ConfigError, match="train one with mixer='act' to measure"):
        per_token_usage(head, cache, "test")
