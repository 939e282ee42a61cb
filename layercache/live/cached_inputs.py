"""The forward-pass inputs of cached examples, rebuilt from the token ids the cache stores.

A cache keeps no text, but every shard keeps each example's stored token ids (``input_ids``,
special tokens included) and word ids. That is exactly what extraction fed the model:

- without ``--stride`` the stored tokens are the one window that ran (cut at the maximum length
  when the text was longer), so the example is that window;
- with ``--stride``, an example longer than the maximum length ran as overlapping windows that
  were stitched back. Its windows are rebuilt by the rule the tokenizer's overflow follows: the
  content tokens (the stored ones between the leading and trailing special tokens) cut into
  chunks of ``max_length - specials`` tokens, each starting ``stride`` tokens before the previous
  one ended, each wrapped in the example's special tokens (its leading and trailing tokens of
  word id -1); then extraction's own
  :func:`~layercache.extraction.tokenize.stitch` picks each stored token's window. The stitched
  ids are checked against the stored ones, so a rebuild that differs is refused, never used.

The backbone (its forward pass, padding and stored-token selection) then runs as extraction ran it:
:func:`~layercache.extraction.forward.pad_windows` and :func:`~layercache.extraction.forward.token_index`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import CacheError
from ..extraction.tokenize import EncodedExample, stitch
from ..store.reader import LayerCache


def special_frame(token_ids: np.ndarray, word_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The special token ids before and after the content of one stored example (``[CLS]`` … ``[SEP]``).

    They are the leading and trailing tokens of word id -1: a stitched example keeps the first
    window's leading ones and the last window's trailing ones, and every window has the same.
    """
    special = word_ids < 0  # (t,)
    lead = int(np.argmin(special)) if not special.all() else len(special)
    trail = int(np.argmin(special[::-1])) if not special.all() else 0
    return token_ids[:lead], token_ids[len(token_ids) - trail:]


def cached_examples(cache: LayerCache, split: str, rows: Sequence[int], tokenizer, *,
                    causal: bool) -> list[EncodedExample]:
    """The cached rows ``rows`` of ``split`` as extraction ran them (one :class:`EncodedExample` each).

    ``tokenizer``: the cache's tokenizer (how many special tokens frame a window); ``causal``: the
    backbone is a decoder (overlaps are then taken from the earliest window, as extraction did).
    """
    m = cache.manifest
    rows = [int(r) for r in rows]
    ids = cache.token_arrays(split, "input_ids", rows)  # (t_i,) int32 per row
    try:
        words = cache.token_arrays(split, "word_ids", rows)
    except CacheError:  # sentence pairs store no word ids
        words = [None] * len(rows)
    max_length, stride = m.tokenizer.max_length, m.tokenizer.stride
    specials = tokenizer.num_special_tokens_to_add()
    out = []
    for row, token_ids, word_ids in zip(rows, ids, words):
        token_ids = np.asarray(token_ids, np.int32)
        word_ids = None if word_ids is None else np.asarray(word_ids, np.int32)
        if stride is None or len(token_ids) <= max_length:
            out.append(EncodedExample(row=row, windows=[token_ids], take=None, word_ids=word_ids))
            continue
        lead, trail = special_frame(token_ids, word_ids) if word_ids is not None else (None, None)
        if lead is None or len(lead) + len(trail) != specials:
            raise CacheError(f"The windows of cache row {row} of split {split!r} cannot be rebuilt: its special "
                             "tokens are not where its tokenizer puts them; this cache cannot be checked against "
                             "the live backbone.")
        out.append(_windowed(row, token_ids, word_ids, lead, trail, max_length, stride, causal, split))
    return out


def _windowed(row: int, token_ids: np.ndarray, word_ids: np.ndarray | None, lead: np.ndarray, trail: np.ndarray,
              max_length: int, stride: int, causal: bool, split: str) -> EncodedExample:
    """A stitched example's overlapping windows, rebuilt and checked against its stored ids."""
    content = token_ids[len(lead):len(token_ids) - len(trail)]  # (c,) ids between the special tokens
    capacity = max_length - len(lead) - len(trail)
    step = capacity - stride
    windows, sequence_ids, start = [], [], 0
    while True:
        chunk = content[start:start + capacity]
        windows.append(np.concatenate([lead, chunk, trail]).astype(np.int32))
        sequence_ids.append([None] * len(lead) + [0] * len(chunk) + [None] * len(trail))
        if start + capacity >= len(content):
            break
        start += step
    take = stitch(sequence_ids, step, causal)
    example = EncodedExample(row=row, windows=windows, take=take, word_ids=word_ids)
    if len(take) != len(token_ids) or not np.array_equal(example.stitched_ids(), token_ids):
        raise CacheError(f"The windows of cache row {row} of split {split!r} cannot be rebuilt from its stored "
                         "token ids (its tokenizer frames windows differently); this cache cannot be checked "
                         "against the live backbone.")
    return example
