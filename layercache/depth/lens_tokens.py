"""What every lens reads from a decoder cache: its lens weights, and its token states in bounded blocks, each token
with the id that follows it in its example.

The logit lens (:mod:`.logit_lens`), the tuned lens (:mod:`.tuned_lens`) and their scores (:mod:`.lens_scores`) all
walk a split the same way: rows in groups of at most a given number of tokens, the kept states of a group read
once (:meth:`~layercache.store.reader.LayerCache.tokens`) and mapped to the model's space, then cut into blocks whose
logits fit the memory asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..core.layers import LayerSpec
from ..core.option_names import option
from ..errors import CacheError, ConfigError
from ..store.lens import LensWeights
from ..store.reader import LayerCache

LOGIT_BUFFERS = 5
"""(n, V) float32 arrays alive at once while scoring: final log-probs, a layer's logits and log-probs, temporaries."""


@dataclass(frozen=True)
class LensInputs:
    """A decoder cache's lens weights and the kept states a lens reads (:func:`lens_inputs`)."""

    lens: LensWeights
    final: int
    """The model's index of its last state, ``layer_L``."""
    final_position: int
    """Where ``layer_L`` is among the kept states."""
    positions: list[int]
    """The kept states asked for, in the order asked."""
    read: list[int]
    """The kept states read from the shards: ``positions`` and ``layer_L``, in order."""

    def at(self, position: int) -> int:
        """Where kept state ``position`` is among :attr:`read` (an index into a block's second axis)."""
        return self.read.index(position)

    def normed(self, position: int) -> bool:
        """Whether kept state ``position`` is stored after the final norm (``layer_L`` of a model that stores it
        so): the norm is then not applied again."""
        return position == self.final_position and self.lens.normed_last


def lens_inputs(cache: LayerCache, layers: LayerSpec | Sequence[LayerSpec] | None = None, *,
                analysis: str = "The logit lens", require_final: bool = True) -> LensInputs:
    """The lens weights and states of a decoder cache with token states that keeps ``layer_L``; ``layers``: the kept
    states asked for (names or indices, default all). Refuses an encoder cache, a cache without token states or lens
    weights, and (unless not ``require_final``: its ``final_position`` is then -1 where it is not kept) one without
    ``layer_L``, naming ``analysis``."""
    cache.require_tokens()
    model = cache.manifest.model
    if model.kind != "decoder":
        raise ConfigError(f"{analysis} reads layers through a decoder's next-token head, and this cache is of an "
                          f"{model.kind} ({model.name}); extract a decoder to use it.")
    lens = cache.lens_weights()
    if cache.manifest.storage.final_norm == "applied" and not lens.normed_last:
        raise CacheError(f"The lens weights of {cache.path} disagree with its manifest about whether layer_L is "
                         "stored after the final norm; run the same `layercache extract` command again.")
    kept = list(cache.manifest.storage.layers)  # model state index of each kept state
    final = model.n_layers
    positions = cache.layer_index(layers)  # (S,) among the kept states
    if final not in kept and not require_final:
        return LensInputs(lens, final, -1, positions, sorted(set(positions)))
    if final not in kept:
        raise ConfigError(f"{analysis} compares each layer with the model's output, layer_{final}, which this "
                          "cache does not keep; re-extract it keeping the last layer (e.g. without "
                          f"{option('layers')}).")
    final_position = kept.index(final)
    return LensInputs(lens, final, final_position, positions, sorted({*positions, final_position}))


def checked_rows(cache: LayerCache, split: str, rows: Sequence[int] | np.ndarray | None) -> np.ndarray:
    """(r,) int64 cache rows of ``split`` (default all), refusing one outside it."""
    n = cache.num_examples(split)
    out = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)  # (r,)
    if len(out) and (out.min() < 0 or out.max() >= n):
        raise ConfigError(f"rows must be cache rows of split {split!r}, from 0 to {n - 1}; got {out.min()} to "
                          f"{out.max()}.")
    return out


def token_blocks(cache: LayerCache, split: str, rows: np.ndarray, read: list[int], *, chunk_bytes: int,
                 block_tokens: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The tokens of ``rows`` (in that order) in blocks of at most ``block_tokens``: each block's states ``(b, R, D)``
    float32 of kept states ``read``, in the model's space, and its next-token ids ``(b,)`` (-1 at an example's last
    token). Rows are read in groups of at most ``chunk_bytes`` of float32 states."""
    lengths = cache.lengths(split)  # (n,)
    all_ids, starts = split_ids(cache, split)  # (t,), (n,)
    read_tokens = max(1, chunk_bytes // (len(read) * cache.manifest.model.hidden_size * 4))
    for group in row_groups(rows, lengths, read_tokens):
        states = model_space(cache, np.concatenate(cache.tokens(split, group, read)), read)  # (t, R, D) float32
        targets = np.concatenate([next_tokens(all_ids[starts[r]:starts[r] + lengths[r]]) for r in group])  # (t,)
        for a in range(0, len(states), block_tokens):
            yield torch.from_numpy(states[a:a + block_tokens]), torch.from_numpy(targets[a:a + block_tokens])


def model_space(cache: LayerCache, states: np.ndarray, read: list[int]) -> np.ndarray:
    """Stored states ``(t, R, W)`` of kept states ``read`` in the model's space ``(t, R, D)``: as they are, or for a
    projected cache mapped back through its basis (``mu + W^T z``: the lens then sees the variance it kept)."""
    projection = cache.projection()
    if projection is None:
        return states
    return projection.subset(list(read)).reconstruct(torch.from_numpy(states)).numpy()


def split_ids(cache: LayerCache, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Every token id of the split in cache order (t,), and where each row starts in it (n,)."""
    parts = []
    for shard in range(len(cache.split_info(split).shards)):
        ids = cache.shard_dataset(split, shard, "input_ids")
        if ids is None:
            raise CacheError(f"Shard {shard} of split {split!r} of {cache.path} holds no token ids, which a lens needs "
                             "for its next-token targets; run the same `layercache extract` command again.")
        parts.append(ids[:])
    ids = np.concatenate(parts) if parts else np.zeros(0, np.int32)  # (t,)
    lengths = cache.lengths(split)  # (n,)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
    return ids, starts


def next_tokens(ids: np.ndarray) -> np.ndarray:
    """(t,) the id at the next position of the same example, -1 at its last position."""
    out = np.full(len(ids), -1, dtype=np.int64)  # (t,)
    out[:-1] = ids[1:]
    return out


def row_groups(rows: np.ndarray, lengths: np.ndarray, tokens: int) -> list[np.ndarray]:
    """``rows`` cut into consecutive groups of at most ``tokens`` tokens (a longer row alone)."""
    groups: list[np.ndarray] = []
    current: list[int] = []
    count = 0
    for r in rows:
        n = int(lengths[r])
        if current and count + n > tokens:
            groups.append(np.array(current))
            current, count = [], 0
        current.append(int(r))
        count += n
    if current:
        groups.append(np.array(current))
    return groups
