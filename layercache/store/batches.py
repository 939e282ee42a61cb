"""The padded-batch layout every producer of minibatches shares: the cache feed (and the reads over it), the live feed.

A batch of B examples of lengths ``t_1 … t_B`` is laid out as

- ``states (B, T, S, D)``, ``T = max t_i``: example i's tokens at positions ``0 … t_i - 1``,
  padded on the right; pooled vectors are ``(B, 1, S, D)`` with no padding;
- ``mask (B, T)`` bool, True on real tokens;
- ``word_ids (B, T)`` int64: the word each token belongs to, :data:`NO_WORD` (-1) on special
  tokens and padding;
- ``labels``: task -> ``(B,)`` (int64 class ids, float32 regression values) or, for a token task,
  ``(B, T)`` int64 with each word's label on its first sub-token and ``IGNORE_INDEX`` everywhere
  else (:func:`first_subtoken_labels`).

Every producer builds that layout from the same position table (:func:`padded_positions`): the
index of the stored token each batch position reads, where a padded position reads its row's
first token. Gathering states through it pads by repeating a real token, which is what the feeds
hand to heads: one gather builds the batch (no second pass to write a fill value), and every
padded value is a real, finite state of the stored precision, so nothing a head computes on the
padded positions before its mask applies (a norm, a float16 product) can overflow or turn NaN.

There is no exception: :meth:`~layercache.store.reader.LayerCache.batch` (and ``iter_batches``,
``torch_dataset``) return the cache feed's batch widened to float32, so their padded positions
repeat the first token too (they held zeros before they shared the feed's gather); read them
through the mask.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from ..core.tasks import IGNORE_INDEX

#: Word id of a token that belongs to no word: special tokens and padding.
NO_WORD = -1


@dataclass
class CacheBatch:
    """A padded minibatch of one split, ready for a head (layout: :mod:`layercache.store.batches`)."""

    states: torch.Tensor
    """(B, T, S, D) token states, or (B, 1, S, D) for pooled vectors: the stored precision (float16
    by default; int4 decoded to float32) from a ``CacheFeed``, float32 from :meth:`LayerCache.batch` (the
    feed's batch, widened) and from a ``LiveFeed``; padded positions repeat the row's first token."""
    mask: torch.Tensor
    """(B, T) bool, True on real tokens."""
    rows: np.ndarray
    """(B,) rows within the split."""
    labels: dict[str, torch.Tensor]
    """task -> (B,) for sequence / regression tasks, (B, T) for token tasks (IGNORE_INDEX where no label)."""
    word_ids: torch.Tensor | None = None
    """(B, T) int64 word index per token, -1 for special tokens and padding (token states only)."""
    scales: torch.Tensor | None = None
    """(B, T, S, 1) float32 scales of int8 ``states`` (a scaled storage codec), None otherwise: the values a
    head computes on are ``states * scales`` (:meth:`states_on`)."""

    def states_on(self, device: torch.device | str | None = None) -> torch.Tensor:
        """(B, T, S, D) states on ``device`` (default: where they are), ready for a mixer.

        The stored precision as is (a mixer widens it), or, with :attr:`scales`, the int8 values
        dequantised to float32 *on* ``device``: one byte per value crosses the bus, not four.
        """
        device = self.states.device if device is None else device
        if self.scales is None:
            return self.states.to(device)
        return self.states.to(device).float().mul_(self.scales.to(device).float())

    def stored_on(self, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(states, scales)`` on ``device`` as stored: ``(B, T, S, D)`` values and, for an int8 cache, their
        ``(B, T, S, 1)`` float32 scales (else None). What a head model takes (``model(states, mask, scales)``):
        its mixers dequantise where they widen the states, in one pass instead of :meth:`states_on`'s two."""
        device = self.states.device if device is None else device
        scales = None if self.scales is None else self.scales.to(device).float()
        return self.states.to(device), scales

    def float_states(self) -> CacheBatch:
        """This batch with its states as float32 where they are (dequantised if scaled), scales dropped."""
        return dataclasses.replace(self, states=self.states_on().float(), scales=None)


@dataclass(frozen=True)
class PaddedPositions:
    """Where each position of a padded ``(B, T)`` batch reads from among its rows' stored tokens."""

    token: np.ndarray
    """(B, T) int64 index of the stored token each position reads; a padded position reads its row's first token."""
    real: np.ndarray
    """(B, T) bool, True on real tokens."""

    @property
    def mask(self) -> torch.Tensor:
        """(B, T) bool tensor of :attr:`real` (shares its memory)."""
        return torch.from_numpy(self.real)

    def word_ids(self, word_ids: np.ndarray) -> torch.Tensor:
        """(B, T) int64 word ids from the stored tokens' ``word_ids (t,)``, :data:`NO_WORD` at padded positions."""
        return torch.from_numpy(np.where(self.real, np.asarray(word_ids, dtype=np.int64)[self.token], NO_WORD))


def padded_positions(starts: np.ndarray, lengths: np.ndarray) -> PaddedPositions:
    """The position table of a batch whose row i holds stored tokens ``starts[i] … starts[i] + lengths[i] - 1``.

    ``starts``, ``lengths``: ``(B,)``; ``T = max(lengths)``. This is the one padding rule: real
    positions read their own token, padded ones repeat the row's first token (every stored row
    has one: extraction refuses an input with no tokens).
    """
    starts, lengths = np.asarray(starts), np.asarray(lengths)
    T = int(lengths.max())
    pos = np.arange(T)  # (T,)
    real = pos[None, :] < lengths[:, None]  # (B, T)
    token = np.where(real, starts[:, None] + pos[None, :], starts[:, None])  # (B, T)
    return PaddedPositions(token=token, real=real)


def consecutive_starts(lengths: np.ndarray) -> np.ndarray:
    """(B,) first token of each row when the rows' tokens ``lengths (B,)`` are stored one after another."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)


def word_initial(word_ids: np.ndarray, row_starts: np.ndarray) -> np.ndarray:
    """(t,) bool: True on the first sub-token of each word, among the tokens of rows laid one after another.

    The one rule of a word's first sub-token: a token of a word (word id >= 0, not a special token
    or padding) whose previous token is of another word or of another row. ``word_ids (t,)``;
    ``row_starts (t,)`` bool, True on each row's first token.
    """
    word_ids = np.asarray(word_ids)
    prev = np.concatenate([np.full(min(len(word_ids), 1), -2, word_ids.dtype), word_ids[:-1]])  # (t,)
    return (word_ids >= 0) & (np.asarray(row_starts, bool) | (word_ids != prev))


def first_subtokens(word_ids: np.ndarray, n_words: np.ndarray) -> np.ndarray:
    """(B, T) bool: True on the first sub-token of each word that has a label (:func:`word_initial`).

    ``word_ids (B, T)`` as in a batch (-1 on special tokens and padding); ``n_words (B,)``: words
    of each row, so a word id at or past it (a word with no label) is never marked.
    """
    word_ids = np.asarray(word_ids)
    starts = np.zeros(word_ids.shape, bool)  # (B, T)
    starts[:, :1] = True
    first = word_initial(word_ids.reshape(-1), starts.reshape(-1)).reshape(word_ids.shape)  # (B, T)
    return first & (word_ids < np.asarray(n_words)[:, None])


def first_subtoken_labels(word_ids: np.ndarray, labels: np.ndarray, word_starts: np.ndarray,
                          n_words: np.ndarray) -> torch.Tensor:
    """(B, T) int64 token labels: each word's label on its first sub-token, ``IGNORE_INDEX`` elsewhere.

    ``word_ids (B, T)``: the batch's word ids; ``labels (w,)``: word labels of several rows one
    after another, row i's words at ``word_starts[i] … word_starts[i] + n_words[i] - 1``
    (``word_starts``, ``n_words``: ``(B,)``). Special tokens, padding, continuation sub-tokens and
    words past ``n_words`` get ``IGNORE_INDEX``.
    """
    word_ids = np.asarray(word_ids, dtype=np.int64)
    first = first_subtokens(word_ids, n_words)  # (B, T)
    out = np.full(word_ids.shape, IGNORE_INDEX, dtype=np.int64)  # (B, T)
    where = np.asarray(word_starts, dtype=np.int64)[:, None] + word_ids  # (B, T) index into labels
    out[first] = np.asarray(labels)[where[first]]
    return torch.from_numpy(out)


def example_labels(values: np.ndarray, kind: str) -> torch.Tensor:
    """(B,) labels of a sequence or regression task: float32 for ``regression``, int64 class ids otherwise."""
    return torch.from_numpy(np.asarray(values).astype(np.float32 if kind == "regression" else np.int64))


def join_batches(parts: list[CacheBatch], where: np.ndarray) -> CacheBatch:
    """One batch of ``parts`` (each gathered from one shard), its rows back in the order asked for.

    ``where (B,)``: the position in the asked order of each row of the parts laid one after
    another. A part shorter than the longest is padded by the one rule: states repeat the row's
    first token, the mask is False, word ids :data:`NO_WORD` and token
    labels ``IGNORE_INDEX``.
    """
    T = max(p.mask.shape[1] for p in parts)

    def widen(x: torch.Tensor, fill) -> torch.Tensor:  # (b, t, ...) -> (b, T, ...)
        if x.shape[1] == T:
            return x
        tail = x[:, :1].expand(x.shape[0], T - x.shape[1], *x.shape[2:]) if fill is None else \
            torch.full((x.shape[0], T - x.shape[1], *x.shape[2:]), fill, dtype=x.dtype)
        return torch.cat([x, tail], dim=1)

    order = torch.from_numpy(np.argsort(where, kind="stable"))  # (B,) row of the parts at each asked position

    def join(tensors: list[torch.Tensor], fill) -> torch.Tensor:
        return torch.cat([widen(x, fill) if x.dim() > 1 else x for x in tensors])[order]

    labels = {task: join([p.labels[task] for p in parts], IGNORE_INDEX) for task in parts[0].labels}
    word_ids = None if parts[0].word_ids is None else join([p.word_ids for p in parts], NO_WORD)
    scales = None if parts[0].scales is None else join([p.scales for p in parts], None)
    return CacheBatch(states=join([p.states for p in parts], None), mask=join([p.mask for p in parts], False),
                      rows=np.concatenate([p.rows for p in parts])[order.numpy()], labels=labels, word_ids=word_ids,
                      scales=scales)
