"""Turn a split's records into token ids, truncated or cut into overlapping windows.

Each example becomes an :class:`EncodedExample`: one window of ids (the common case) or, with
``stride``, several overlapping windows plus a ``take`` map that stitches them back into one
token sequence covering every token. Overlap tokens are taken from the window where they see
the most context: the window whose edge is farthest away for bidirectional encoders, the
earliest window (most left context) for causal decoders.

Pre-split words (CoNLL-style input) are tokenized with ``is_split_into_words``, which hands each
word to the tokenizer on its own: a tokenizer that marks a word's leading space in its pieces
(byte-level BPE ``Ġ``, SentencePiece ``▁``) then never sees the space.
:func:`~layercache.backbone.words.word_prefix` finds what each word after the first needs so that
its pieces are those of running text, and :func:`~layercache.backbone.words.check_words_as_text`
refuses a tokenizer for which the words still differ from the same words joined by spaces, rather
than cache states of text the model was never meant to read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..backbone.words import check_words_as_text, with_word_prefix, word_prefix
from ..core.option_names import option
from ..errors import ConfigError, DatasetError
from ..sources.records import SplitRecords

ENCODE_CHUNK = 1024
@dataclass(slots=True)
class EncodedExample:
    """One example ready for the forward pass.

    A split's plan holds one of these per example for the whole run, so ids are compact int32
    arrays (a Python list spends ~8 bytes per token on the pointer alone, plus an int object for
    ids above 256) and the class has slots.
    """

    row: int
    """Position in the split's records."""
    windows: list[np.ndarray]
    """(w,) int32 input ids (special tokens included) of each window that must run through the model."""
    take: np.ndarray | None
    """(t, 2) int32 pairs (window, position) giving each stitched token; None: all of window 0."""
    word_ids: np.ndarray | None
    """(t,) int32 word index of each stored token, -1 for special tokens; None when unknown."""
    truncated: bool = False

    @property
    def n_tokens(self) -> int:
        """Tokens stored for this example (after stitching its windows)."""
        return len(self.windows[0]) if self.take is None else len(self.take)

    @property
    def width(self) -> int:
        """Padded width this example forces on its batch."""
        return max(len(w) for w in self.windows)

    def stitched_ids(self) -> np.ndarray:
        """(t,) int32 input ids of the stored token sequence."""
        if self.take is None:
            return self.windows[0]
        starts = np.cumsum([0] + [len(w) for w in self.windows[:-1]])  # (n_windows,)
        return np.concatenate(self.windows)[starts[self.take[:, 0]] + self.take[:, 1]]

    @property
    def n_rows(self) -> int:
        """Windows (forward rows) this example takes."""
        return len(self.windows)


def encode_split(tokenizer, records: SplitRecords, *, max_length: int, stride: int | None,
                 causal: bool) -> Iterator[EncodedExample]:
    """Encode every example of a split, in order, in chunks (fast tokenizers batch internally)."""
    if stride is not None:
        capacity = max_length - tokenizer.num_special_tokens_to_add()
        if not 0 < stride < capacity:
            raise ConfigError(f"{option('stride', stride)} must be between 1 and {capacity - 1} "
                              f"(the tokens per window at {option('max_length', max_length)}).")
        if records.text_pairs is not None:
            raise ConfigError(f"{option('stride')} cannot window sentence pairs; drop {option('stride')} to truncate "
                              "them instead.")
    prefix = word_prefix(tokenizer) if records.words is not None else ""
    for start in range(0, len(records), ENCODE_CHUNK):
        stop = min(start + ENCODE_CHUNK, len(records))
        if records.text_pairs is not None:
            yield from _encode_pairs(tokenizer, records, start, stop, max_length)
        else:
            yield from _encode_single(tokenizer, records, start, stop, max_length, stride, causal, prefix)


def _encode_single(tokenizer, records, start, stop, max_length, stride, causal, prefix):
    words_mode = records.words is not None
    inputs = records.words[start:stop] if words_mode else records.texts[start:stop]
    for i, x in enumerate(inputs):
        # Data loaded by layercache never gets here empty (load_dataset_records skips such rows); records
        # built by hand may, and an empty input has no token to hold a state.
        if (words_mode and len(x) == 0) or (not words_mode and not str(x).strip()):
            raise DatasetError(f"Example {start + i} of the split (source row {records.source_index[start + i]}) "
                               "is empty; leave empty rows out of the records.")
    if words_mode:  # every example, not the first few: one-word sentences up front would hide glued words
        check_words_as_text(tokenizer, inputs, prefix, records.source_index, first=start)
        inputs = [with_word_prefix(words, prefix) for words in inputs]
    enc = tokenizer(inputs, is_split_into_words=words_mode, truncation=True, max_length=max_length,
                    stride=stride or 0, return_overflowing_tokens=True, add_special_tokens=True)
    by_example: dict[int, list[int]] = {}
    for window, example in enumerate(enc["overflow_to_sample_mapping"]):
        by_example.setdefault(example, []).append(window)
    capacity = max_length - tokenizer.num_special_tokens_to_add()
    for example in range(stop - start):
        windows = by_example[example]
        word_ids = [_word_ids(enc, w) for w in windows]
        if stride is None or len(windows) == 1:
            ids = _ids(enc["input_ids"][windows[0]])
            yield EncodedExample(row=start + example, windows=[ids], take=None, word_ids=word_ids[0],
                                 truncated=len(windows) > 1)
            continue
        seq_ids = [enc.sequence_ids(w) for w in windows]
        take = stitch(seq_ids, capacity - stride, causal)
        flat_words = np.array([word_ids[w][p] for w, p in take], np.int32)
        yield EncodedExample(row=start + example, windows=[_ids(enc["input_ids"][w]) for w in windows],
                             take=take, word_ids=flat_words)


def _encode_pairs(tokenizer, records, start, stop, max_length):
    firsts, seconds = records.texts[start:stop], records.text_pairs[start:stop]
    full = tokenizer(firsts, seconds, truncation=False, add_special_tokens=True)["input_ids"]
    enc = tokenizer(firsts, seconds, truncation="longest_first", max_length=max_length, add_special_tokens=True)
    for i, ids in enumerate(enc["input_ids"]):
        # Word ids of a pair restart at 0 in the second sentence, so they are not stored.
        yield EncodedExample(row=start + i, windows=[_ids(ids)], take=None, word_ids=None,
                             truncated=len(full[i]) > max_length)


def _ids(ids: list[int]) -> np.ndarray:
    return np.array(ids, np.int32)


def _word_ids(enc, window: int) -> np.ndarray:
    return np.array([-1 if w is None else w for w in enc.word_ids(window)], np.int32)


def stitch(sequence_ids: list[list[int | None]], step: int, causal: bool) -> np.ndarray:
    """Map each token of the stitched sequence to (window, position).

    ``sequence_ids[j]`` marks content tokens of window j with 0 (None for special tokens);
    window j's content starts at global content position ``j * step``. Leading special tokens
    come from the first window, trailing ones from the last.
    """
    content = [[p for p, s in enumerate(seq) if s == 0] for seq in sequence_ids]
    starts = [j * step for j in range(len(content))]
    total = starts[-1] + len(content[-1])
    take = [(0, p) for p in range(content[0][0])]  # leading specials, e.g. [CLS]
    for g in range(total):
        best, best_score = -1, None
        for j, (s, positions) in enumerate(zip(starts, content)):
            if not s <= g < s + len(positions):
                continue
            # causal: earliest window = most left context; bidirectional: farthest from both edges.
            score = -j if causal else min(g - s, s + len(positions) - 1 - g)
            if best_score is None or score > best_score:
                best, best_score = j, score
        take.append((best, content[best][g - starts[best]]))
    last = len(content) - 1
    take += [(last, p) for p in range(content[last][-1] + 1, len(sequence_ids[last]))]  # trailing, e.g. [SEP]
    return np.array(take, np.int32)
