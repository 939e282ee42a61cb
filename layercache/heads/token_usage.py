"""Per-token layer use of a trained head: how deep each cached token went (``act``'s depth N + R).

``LayerHead.predict`` summarises a mixer's usage over a split (the mean depth); depth analyses
need the value of every token, aligned with the cache's token rows so they can be joined with
the token's id, its position in its word and the dataset's tags
(:mod:`layercache.depth.token_categories`).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.option_names import option
from ..core.threads import computes
from ..errors import ConfigError
from ..store.reader import LayerCache
from .data.finite import check_split_stats
from .estimator import LayerHead


@computes
def per_token_usage(head: LayerHead, cache: LayerCache, split: str, key: str = "depth") -> dict[str, np.ndarray]:
    """Each per-token usage value ``key`` of ``head``'s mixers over every stored token of ``split``.

    Returns ``{mixer key: (n_tokens,) float32}`` in the cache's token order (row by row, the
    split's ``input_ids`` order), for every mixer that reports ``key`` per token (``act``:
    ``depth`` = N + R, ``steps`` = N). Refuses a head without such a mixer, and a head that reads
    pooled vectors (it has no per-token values).
    """
    head.check_fitted()
    head.check_cache(cache)
    cache.require_split(split)
    if not head.source_.startswith("tokens"):
        raise ConfigError(f"The head reads {head.source_}, not token states, so it has no per-token {key}; "
                          f"train it with {option('source', 'tokens')}.")
    check_split_stats(cache, split, head.layer_names_)
    feed = head.make_feed(cache, split, head.tasks_, head.layer_names_, head.source_, batch_size=128)
    lengths = cache.lengths(split)  # (n,)
    starts = np.concatenate([[0], np.cumsum(lengths)])  # (n + 1,)
    out: dict[str, np.ndarray] = {}
    model = head.model_
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in feed.epoch(shuffle=False):
                states, scales = batch.stored_on()
                result = model(states, batch.mask, scales)
                for mixer_key, usage in result.usage.items():
                    values = (usage or {}).get(key)
                    if values is None or values.dim() != 2:  # (B, T) per token; (B,) would be per example
                        continue
                    flat = out.setdefault(mixer_key, np.full(int(starts[-1]), np.nan, np.float32))
                    values = values.float().cpu().numpy()  # (B, T)
                    for b, row in enumerate(batch.rows):
                        n = int(lengths[row])
                        flat[starts[row]:starts[row] + n] = values[b, :n]
    finally:
        model.train(was_training)
    if not out:
        mixers = ", ".join(type(m).name for m in model.mixers.values())
        raise ConfigError(f"The head's mixer ({mixers}) reports no per-token {key!r}; train one with "
                          f"{option('mixer', 'act')} to measure how deep each token goes.")
    return out
