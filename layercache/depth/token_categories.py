"""Token categories for per-token depth: which kind of token each cached token row is.

A per-token value (the depth at which an adaptive head halts, a token's prediction depth, a
logit-lens score) says more when it is broken down by kind of token: ALBERT-ACT's depths differ
for ``[CLS]``, ``[SEP]`` and ordinary tokens, and Tenney et al. found syntax earlier than entities.
:func:`token_categories` labels every token row of a split of a token-store cache, from what the
cache holds (its ``input_ids``, ``word_ids``, token-task labels and vocabulary, no tokenizer), in
families of categories; each token is in at most one category of a family:

- ``token_type``: ``special`` (a special-token id, or a token that belongs to no word: word id
  -1), ``punctuation`` (its text, word markers such as ``Ġ``/``▁``/``##`` removed, made only of
  punctuation characters), else ``word``;
- ``word_position``: ``word-initial`` (a word's first sub-token) or ``continuation`` (the rest),
  for tokens of a word (word id >= 0); absent when the cache has no word ids;
- ``frequency``: the token id's frequency in the training split, in ``frequency_bins`` bins with
  about equally many tokens each (bins of tied frequencies merge), named by the range of
  frequencies in them (``"1-3"``, ``"4-20"``, ...); special tokens are in none;
- one family per token task of the cache (CoNLL's ``pos``, ``chunk``, ``ner``): the tag of the
  token's word, on every sub-token of it; special tokens and unlabelled words are in none.

Token rows are in cache order: the rows of the split one after another (shard by shard), each
row's tokens in order, as :meth:`LayerCache.layer_tokens` streams them and as
``np.concatenate(cache.tokens(split, range(n)))`` stacks them. :func:`depth_by_category` then
gives the count, mean and standard deviation of a per-token value in each category.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

import numpy as np

from ..core.option_names import option
from ..errors import CacheError, ConfigError
from ..store.batches import word_initial
from ..store.reader import LayerCache

TOKEN_TYPES = ("special", "punctuation", "word")
WORD_POSITIONS = ("word-initial", "continuation")
BUILTIN_FAMILIES = ("token_type", "word_position", "frequency")
"""Family names :func:`token_categories` gives; a token task of the same name becomes ``task:<name>``."""
_PUNCTUATION = frozenset(string.punctuation)
_T = TypeVar("_T")


def _family(families: Mapping[str, _T], family: str) -> _T:
    """``families[family]``; refuses a family the result does not have, naming those it has."""
    try:
        return families[family]
    except KeyError:
        raise ConfigError(f"There is no category family {family!r}; the families are: "
                          f"{', '.join(families)}.") from None


@dataclass(frozen=True)
class CategoryFamily:
    """One way of sorting a split's tokens: each token in one of ``categories``, or in none (code -1)."""

    name: str
    categories: tuple[str, ...]
    """(K,) category names; ``codes`` index into them."""
    codes: np.ndarray
    """(t,) int64, each token row's category, -1 where the family does not apply to the token."""

    def mask(self, category: str) -> np.ndarray:
        """(t,) bool, the tokens in ``category``; refuses a category the family does not have."""
        if category not in self.categories:
            raise ConfigError(f"Family {self.name!r} has no category {category!r}; its categories are: "
                              f"{', '.join(self.categories)}.")
        return self.codes == self.categories.index(category)

    @property
    def counts(self) -> np.ndarray:
        """(K,) int64 tokens in each category."""
        return np.bincount(self.codes[self.codes >= 0], minlength=len(self.categories)).astype(np.int64)


@dataclass(frozen=True)
class TokenCategories:
    """Every token row of a split labelled by family, from :func:`token_categories`."""

    split: str
    n_tokens: int
    """t, the split's token rows (the length of every family's ``codes``)."""
    families: Mapping[str, CategoryFamily]
    """Family name -> :class:`CategoryFamily`, in the order of the module docstring (read-only)."""
    frequency_split: str
    """The split whose token counts the ``frequency`` bins are made from."""

    def __getitem__(self, family: str) -> CategoryFamily:
        """The family called ``family``; refuses one the result does not have, naming those it has."""
        return _family(self.families, family)


@dataclass(frozen=True)
class CategoryStats:
    """A per-token value summarised over the categories of one family."""

    family: str
    categories: tuple[str, ...]
    """(K,) category names."""
    count: np.ndarray
    """(K,) int64 tokens with a value (not NaN) in each category."""
    mean: np.ndarray
    """(K,) float64, NaN for a category with no token."""
    std: np.ndarray
    """(K,) float64 population standard deviation (ddof 0), NaN for a category with no token."""
    p10: np.ndarray
    """(K,) float64 10th percentile, NaN for a category with no token: with :attr:`p90`, a spread that stays
    inside the values' range (mean ± sd of a depth bunched at the last layer runs past it)."""
    p90: np.ndarray
    """(K,) float64 90th percentile, NaN for a category with no token."""


@dataclass(frozen=True)
class DepthByCategory:
    """A per-token value by category, for every family, from :func:`depth_by_category`."""

    families: Mapping[str, CategoryStats]
    """Family name -> :class:`CategoryStats` (read-only)."""
    count: int
    """Tokens with a value (not NaN), over all tokens."""
    mean: float
    std: float

    def __getitem__(self, family: str) -> CategoryStats:
        """The statistics of family ``family``; refuses one the result does not have."""
        return _family(self.families, family)

    def rows(self) -> list[dict]:
        """One dict per (family, category): ``family``, ``category``, ``count``, ``mean``, ``std``, ``p10``, ``p90``
        (for a table)."""
        return [{"family": name, "category": category, "count": int(stats.count[k]), "mean": float(stats.mean[k]),
                 "std": float(stats.std[k]), "p10": float(stats.p10[k]), "p90": float(stats.p90[k])}
                for name, stats in self.families.items() for k, category in enumerate(stats.categories)]


# --- categories -------------------------------------------------------------------------------
def is_punctuation(text: str) -> bool:
    """Whether ``text`` is non-empty and made only of punctuation: Unicode ``P*`` characters or ASCII
    ``string.punctuation`` (which also counts ``$ + < = > ^ ` | ~`` as punctuation)."""
    return bool(text) and all(c in _PUNCTUATION or unicodedata.category(c).startswith("P") for c in text)


def token_categories(cache: LayerCache, split: str | None = None, *, frequency_split: str | None = None,
                     frequency_bins: int = 4) -> TokenCategories:
    """Label every token row of ``split`` with its category in each family (see the module docstring).

    Args:
        cache: an open :class:`~layercache.store.reader.LayerCache` with token states and a vocabulary
            (``vocab.json``: caches extracted before it existed get it by running the extraction again).
        split: the split to label; default the cache's validation split, else its first.
        frequency_split: whose token counts make the frequency bins; default ``train`` when the
            cache has it, else ``split`` itself.
        frequency_bins: bins of the ``frequency`` family (fewer when frequencies tie).

    Vectorised over the split's tokens (no Python loop over tokens; one over the vocabulary, to find
    its punctuation). Refuses a pooled-only cache and fewer than one frequency bin.
    """
    if frequency_bins < 1:
        raise ConfigError(f"frequency_bins must be at least 1, got {frequency_bins}.")
    split = cache.report_split(split, fallback=cache.splits[0])
    cache.require_tokens()
    if frequency_split is None:
        frequency_split = "train" if "train" in cache.splits else split
    cache.require_split(frequency_split)
    vocabulary = cache.vocabulary()
    special_ids = vocabulary.special_mask()  # (V,)
    punctuation_ids = np.fromiter((is_punctuation(s) for s in vocabulary.surfaces), bool, len(vocabulary))  # (V,)

    ids, word_ids, tags = _split_tokens(cache, split, with_tags=True)  # (t,), (t,) or None, task -> (t,)
    _check_ids(ids, len(vocabulary), split)
    special = special_ids[ids] | (word_ids < 0 if word_ids is not None else False)  # (t,)
    token_type = np.where(special, 0, np.where(punctuation_ids[ids], 1, 2)).astype(np.int64)  # (t,)
    families = {"token_type": CategoryFamily("token_type", TOKEN_TYPES, token_type)}

    if word_ids is not None:
        starts = _row_starts(cache, split, len(ids))  # (t,) True at each row's first token
        continuation = (word_ids >= 0) & ~word_initial(word_ids, starts)  # (t,)
        position = np.where(word_ids < 0, -1, continuation.astype(np.int64))  # (t,) 0 initial, 1 continuation
        families["word_position"] = CategoryFamily("word_position", WORD_POSITIONS, position)

    families["frequency"] = _frequency_family(cache, frequency_split, split, ids, special, special_ids,
                                              len(vocabulary), frequency_bins)
    for task, codes in tags.items():
        name = f"task:{task}" if task in BUILTIN_FAMILIES else task
        families[name] = CategoryFamily(name, tuple(cache.manifest.task(task).label_names), codes)
    return TokenCategories(split=split, n_tokens=len(ids), families=MappingProxyType(families),
                           frequency_split=frequency_split)


def _split_tokens(cache: LayerCache, split: str, with_tags: bool):
    """(t,) input ids, (t,) word ids or None, and task -> (t,) tag code of each token's word (-1: none)."""
    token_tasks = [t.name for t in cache.manifest.tasks if t.kind == "token"] if with_tags else []
    ids, words, tags = [], [], {t: [] for t in token_tasks}
    has_words = True
    for shard in range(len(cache.split_info(split).shards)):
        shard_ids = cache.shard_dataset(split, shard, "input_ids")[:].astype(np.int64)  # (t_s,)
        ids.append(shard_ids)
        found = cache.shard_dataset(split, shard, "word_ids")
        has_words = has_words and found is not None
        if not has_words:
            continue
        shard_words = found[:].astype(np.int64)  # (t_s,)
        words.append(shard_words)
        if not token_tasks:
            continue
        offsets = cache.shard_offsets(split, shard)  # (n_s + 1,)
        row = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))  # (t_s,) the row of each token
        word_offsets = cache.shard_dataset(split, shard, "word_offsets")[:]  # (n_s + 1,)
        n_words = np.diff(word_offsets)[row]  # (t_s,) words of each token's row
        in_word = (shard_words >= 0) & (shard_words < n_words)  # (t_s,)
        index = np.where(in_word, word_offsets[row] + shard_words, 0)  # (t_s,) into the shard's word labels
        for task in token_tasks:
            labels = cache.shard_dataset(split, shard, f"labels/{task}")[:].astype(np.int64)  # (w_s,)
            code = labels[index] if len(labels) else np.full(len(index), -1)  # (t_s,)
            tags[task].append(np.where(in_word & (code >= 0), code, -1))
    all_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    if not has_words:
        return all_ids, None, {}
    return (all_ids, np.concatenate(words) if words else np.zeros(0, np.int64),
            {t: np.concatenate(parts) if parts else np.zeros(0, np.int64) for t, parts in tags.items()})


def _row_starts(cache: LayerCache, split: str, n_tokens: int) -> np.ndarray:
    """(t,) bool, True at the first token of each row."""
    lengths = cache.lengths(split)  # (n,)
    starts = np.zeros(n_tokens, dtype=bool)  # (t,)
    starts[(np.cumsum(lengths) - lengths)[lengths > 0]] = True
    return starts


def _check_ids(ids: np.ndarray, size: int, split: str) -> None:
    if len(ids) and (ids.min() < 0 or ids.max() >= size):
        raise CacheError(f"Split {split!r} holds token id {int(ids.max())}, beyond the cache's vocabulary of {size} "
                         f"tokens; the cache is damaged, so re-extract it with {option('overwrite', True)}.")


def _frequency_family(cache: LayerCache, frequency_split: str, split: str, ids: np.ndarray, special: np.ndarray,
                      special_ids: np.ndarray, size: int, bins: int) -> CategoryFamily:
    """Frequency bins of the non-special tokens of ``split``, by their id's count in ``frequency_split``."""
    if frequency_split == split:
        counted = ids[~special]  # (t',)
    else:
        other, other_words, _ = _split_tokens(cache, frequency_split, with_tags=False)
        _check_ids(other, size, frequency_split)
        keep = ~special_ids[other] & (other_words >= 0 if other_words is not None else True)
        counted = other[keep]
    counts = np.bincount(counted, minlength=size)  # (V,)
    frequency = counts[ids]  # (t,) each token's id frequency
    words = frequency[~special]  # (t',)
    codes = np.full(len(ids), -1, dtype=np.int64)  # (t,)
    if not len(words):
        return CategoryFamily("frequency", (), codes)
    quantiles = np.quantile(words, np.arange(1, bins) / bins, method="inverted_cdf") if bins > 1 else []
    uppers = np.unique(np.concatenate([np.asarray(quantiles, dtype=np.int64), [words.max()]]))  # (K,) bin maxima
    bin_of = np.searchsorted(uppers, words, side="left")  # (t',) bin k holds (uppers[k-1], uppers[k]]
    codes[~special] = bin_of
    lows = np.array([words[bin_of == k].min() for k in range(len(uppers))])  # (K,) smallest frequency in each bin
    highs = np.array([words[bin_of == k].max() for k in range(len(uppers))])
    names = tuple(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in zip(lows, highs))
    return CategoryFamily("frequency", names, codes)


# --- statistics -------------------------------------------------------------------------------
def depth_by_category(values: np.ndarray | Sequence[np.ndarray], categories: TokenCategories) -> DepthByCategory:
    """Count, mean, standard deviation and 10th / 90th percentiles of a per-token value in every category of
    every family.

    ``values`` is one number per token row of the split, in cache order (see the module docstring):
    a (t,) array, or one array per cache row (concatenated). NaN marks a token without a value
    (a position with no next token, say) and is left out of the counts and statistics. Refuses
    values of another length than the split's tokens, or holding an infinity.
    """
    if isinstance(values, np.ndarray):
        v = values
    else:
        parts = [np.asarray(part) for part in values]
        v = np.concatenate(parts) if parts else np.zeros(0)
    v = np.asarray(v, dtype=np.float64)  # (t,)
    if v.ndim != 1 or len(v) != categories.n_tokens:
        raise ConfigError(f"values must hold one number per token row of split {categories.split!r} "
                          f"({categories.n_tokens}), got shape {v.shape}; align them with the cache's token rows.")
    if np.isinf(v).any():
        raise ConfigError("values hold an infinity; replace it with a finite number, or NaN to leave the token out.")
    known = ~np.isnan(v)  # (t,)
    stats = {}
    for name, family in categories.families.items():
        K = len(family.categories)
        take = known & (family.codes >= 0)  # (t,)
        codes, x = family.codes[take], v[take]  # (t',)
        count = np.bincount(codes, minlength=K).astype(np.int64)  # (K,)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.bincount(codes, weights=x, minlength=K) / count  # (K,), NaN where empty
            # Two passes (deviations from each category's mean), not E[x²] - E[x]², which cancels badly.
            std = np.sqrt(np.bincount(codes, weights=(x - mean[codes]) ** 2, minlength=K) / count)  # (K,)
        p10, p90 = _percentiles(codes, x, count, (10, 90))
        stats[name] = CategoryStats(family=name, categories=family.categories, count=count, mean=mean, std=std,
                                    p10=p10, p90=p90)
    x = v[known]
    return DepthByCategory(families=MappingProxyType(stats), count=int(known.sum()),
                           mean=float(x.mean()) if len(x) else float("nan"),
                           std=float(x.std()) if len(x) else float("nan"))


def _percentiles(codes: np.ndarray, x: np.ndarray, count: np.ndarray, qs: Sequence[float]) -> list[np.ndarray]:
    """Each percentile of ``qs`` of ``x`` within every category (``codes``), NaN for an empty one: (K,) per q."""
    order = np.argsort(codes, kind="stable")  # (t',) grouped by category
    ends = np.cumsum(count)  # (K,) where each category's sorted run ends
    out = [np.full(len(count), np.nan) for _ in qs]
    for k in np.flatnonzero(count):
        run = x[order[ends[k] - count[k]:ends[k]]]
        for row, value in zip(out, np.percentile(run, qs)):
            row[k] = value
    return out
