"""The plantings of the head tests' caches: each replaces an extracted cache's states (or pooled means) and labels,
in place, by ones with a known answer. A package's tests and its command's (tests/cli) plant the same caches."""

from __future__ import annotations

import json

import h5py
import numpy as np

SIGNAL = 1  # layer_1: the state the linear and topic plantings put their signal in


def plant_linear_signals(path, seed: int = 0) -> None:
    """Replace every split's pooled means and sequence labels by planted ones (see tests/heads/test_convex_fit.py)."""
    manifest = json.loads((path / "manifest.json").read_text())
    rng = np.random.default_rng(seed)
    directions = np.random.default_rng(7).standard_normal((8, 32))  # the same for every split
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            with h5py.File(path / shard["file"], "r+") as h:
                n, S, D = h["pooled/mean"].shape
                x = rng.standard_normal((n, S, D)) * 0.8 + 0.3  # neither centred nor of unit scale
                sentiment = (rng.random(n) < 0.3).astype(np.int64)  # 70/30: selected on mcc
                topic = rng.integers(0, 6, n)
                x[:, SIGNAL] += 0.06 * (2 * sentiment - 1)[:, None] * directions[0]  # weak
                x[:, SIGNAL] += 0.5 * directions[2 + topic]
                stored = x.astype(np.float16)
                intensity = stored[:, SIGNAL].astype(np.float64) @ directions[1] * 0.3 + rng.standard_normal(n)
                h["pooled/mean"][...] = stored
                h["labels/sentiment"][...] = sentiment
                h["labels/topic"][...] = topic
                h["labels/intensity"][...] = intensity.astype(h["labels/intensity"].dtype)


def plant_topic_means(path, seed: int = 0) -> None:
    """Replace every split's pooled means by noise, with the topic classes' means added to ``layer_1``."""
    manifest = json.loads((path / "manifest.json").read_text())
    rng = np.random.default_rng(seed)
    directions = np.random.default_rng(7).standard_normal((6, 32))
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            with h5py.File(path / shard["file"], "r+") as h:
                n, S, D = h["pooled/mean"].shape
                topic = h["labels/topic"][:]
                x = rng.standard_normal((n, S, D))
                x[:, SIGNAL] += 0.8 * directions[topic]
                h["pooled/mean"][...] = x.astype(np.float16)


SCALES = (1.0, 4.0, 16.0, 64.0)  # per state: embeddings, layer_1..layer_3
SIGNAL_STATE, SIGNAL_DIMS = 1, slice(4, 12)
SINK_DIMS = (0, 1)  # huge on each example's first token
MASSIVE_DIM = 2  # large on every token


def plant_massive_activations(path, skip_first: bool, seed: int = 0) -> None:
    """Replace a cache's states by synthetic pre-LN-like ones (see tests/heads/test_massive_activations.py)."""
    manifest = json.loads((path / "manifest.json").read_text())
    rng = np.random.default_rng(seed)
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            with h5py.File(path / shard["file"], "r+") as h:
                offsets = h["offsets"][:]
                n, (t, S, D) = len(offsets) - 1, h["hidden"].shape
                lengths = np.diff(offsets)  # (n,)
                owner = np.repeat(np.arange(n), lengths)  # (t,) example of each token
                first = offsets[:-1]  # (n,) first token of each example
                y = rng.integers(0, 2, n)  # (n,)
                x = rng.standard_normal((t, S, D)) * np.asarray(SCALES)[None, :, None]  # (t, S, D)
                x[:, SIGNAL_STATE, SIGNAL_DIMS] += (2 * y[owner] - 1)[:, None] * 0.5 * SCALES[SIGNAL_STATE]
                x[:, 1:, MASSIVE_DIM] += 1.08e4 * (1 + 0.01 * rng.standard_normal((t, 1)))
                for d in SINK_DIMS:
                    x[first, 1:, d] = 2.0e4 * (1 + 0.01 * rng.standard_normal((n, S - 1)))
                stored = x.astype(np.float16).astype(np.float64)
                h["hidden"][...] = stored.astype(np.float16)
                h["labels/sentiment"][...] = y
                h["stats/sum"][...] = stored.sum(0)
                h["stats/sumsq"][...] = (stored**2).sum(0)
                weight = np.ones(t)
                if skip_first:
                    weight[first[lengths > 1]] = 0.0
                sums = np.zeros((n, S, D))
                np.add.at(sums, owner, stored * weight[:, None, None])
                count = np.bincount(owner, weights=weight, minlength=n)  # (n,)
                h["pooled/mean"][...] = (sums / count[:, None, None]).astype(np.float16)
    if skip_first:  # what the extraction side records for such caches
        manifest["storage"]["mean_skip_first"] = True
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2))
