"""What a probe reads from a cache: one feature vector per layer for each example or word.

- Sequence and regression tasks read pooled vectors (``pooled:<mode>``: ``cache.pooled``), or the
  mean of each example's stored token states (``tokens``).
- Token tasks read the state of the first sub-token of each word, where the word's label sits
  (the convention of the cache and of the heads); words whose tokens were cut off by truncation
  have no state and are left out.

Features come back as ``(L, n, D)`` float32, one contiguous block per layer: the layout the
batched solver multiplies with. Word states are read at their split-wide token positions
(``cache.gather_positions``: only the words' own vectors), and a training part and its validation
slice are read in the same pass. Examples or words whose label is missing (a negative class id, a NaN
target) are left out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import torch

from ..core.holdout import sample_rows, validation_slice
from ..core.memory import current_budget
from ..core.option_names import option
from ..core.tasks import find_task, labelled_tasks
from ..errors import CacheError, ConfigError
from ..solvers import check_c_grid
from ..store.batches import first_subtokens as batch_first_subtokens
from ..store.feature_source import auto_source, parse_source, require_source
from ..store.manifest import LabelTask
from ..store.reader import LayerCache

CHUNK_TOKENS = 1 << 14
"""Token states read per step when averaging token states: ~170 MB of float32 for 7 x 384 states."""


@dataclass
class ProbeInputs:
    """Features and targets of one split (or part of one).

    ``X``: (L, n, D) float32, as cached (not standardised). ``y``: (n,) int64 class ids or
    float32 targets. ``rows``: (n,) the cache row of each example (for a word: its sentence).
    ``types``: for token tasks when asked, each word's type: the tuple of its sub-tokens' input ids.
    """

    X: np.ndarray
    y: np.ndarray
    rows: np.ndarray
    types: list[tuple[int, ...]] | None = None
    n_available: int | None = None
    """Labelled examples (words) of the part before a training sample was taken (None: no sample was asked for)."""


Sample = tuple[int | None, int] | None
"""``(max_train, seed)``: keep the seeded sample :func:`~.selection.sample_rows` of a part's labelled examples
(words) before their features are read; None: keep them all."""


def sample_positions(n: int, sample: Sample) -> np.ndarray | None:
    """Positions (sorted) of the sample ``sample`` of ``n`` labelled examples, None to keep them all."""
    if sample is None:
        return None
    max_train, seed = sample
    return sample_rows(n, max_train, seed)


def take_rows(inputs: ProbeInputs, pick: np.ndarray | None) -> ProbeInputs:
    """``inputs`` restricted to the positions ``pick`` (a sorted sample), or ``inputs`` itself for None."""
    if pick is None:
        return inputs
    types = None if inputs.types is None else [inputs.types[i] for i in pick]
    return ProbeInputs(np.ascontiguousarray(inputs.X[:, pick]), inputs.y[pick], inputs.rows[pick], types,
                       inputs.n_available)


def resolve_task(cache: LayerCache, task: str | None) -> LabelTask:
    """The cache's task called ``task``, or its only task when ``task`` is None."""
    known = labelled_tasks(cache.tasks, f"The cache {cache.path}")
    if task is None:
        if len(known) > 1:
            names = ", ".join(t.name for t in known)
            raise ConfigError(f"The cache has several label tasks ({names}); pass task=NAME to choose one.")
        return known[0]
    if not isinstance(task, str):
        raise ConfigError(f"task must be a task name (a string), got {task!r}.")
    return find_task(known, task)


def resolve_source(cache: LayerCache, spec: LabelTask, source: str) -> str:
    """``tokens`` or ``pooled:<mode>`` for ``spec``: ``auto`` takes the word states for a token task,
    the pooled mean (or another pooled mode) for a sequence task, token states when nothing is pooled."""
    parsed = parse_source(source)
    if spec.kind == "token":
        if parsed.is_pooled:
            raise ConfigError(f"Token task {spec.name!r} is probed on word states, not pooled vectors; "
                              "use source='tokens' or 'auto'.")
        return str(auto_source(cache, [spec]))  # token states, or the refusal of a cache without them
    if parsed.kind == "auto":
        parsed = auto_source(cache, [spec], ("mean", *cache.manifest.pooling))
    return str(require_source(cache, parsed))


def read_train_val(cache: LayerCache, spec: LabelTask, source: str, index: list[int], split: str,
                   val_split: str | None, val_fraction: float, seed: int, *,
                   want_types: bool = False) -> tuple[ProbeInputs, ProbeInputs, str]:
    """The training and validation features of a probe, and a description of what validates.

    Validation is ``val_split`` when given, else a seeded ``val_fraction`` slice of ``split``
    (stratified by label for a sequence task, whole sentences for a token task), read in the
    same pass as the training part: the slice a head of this one task validates on
    (:func:`~layercache.core.holdout.validation_slice`).
    """
    cache.require_split(split)
    if val_split is not None:
        cache.require_split(val_split)
        train = read_inputs(cache, split, spec, source, index, want_types=want_types)
        val = read_inputs(cache, val_split, spec, source, index, want_types=want_types)
        return train, val, val_split
    rows, val_rows = validation_slice(cache, split, [spec], val_fraction, seed)  # a head of this task's rows
    train, val = read_parts(cache, split, spec, source, index, [rows, val_rows], want_types=want_types)
    return train, val, f"{split} (seeded {val_fraction:.0%} slice, seed {seed})"


def split_labels(cache: LayerCache, split: str, spec: LabelTask) -> np.ndarray | list[np.ndarray]:
    """Labels of ``spec`` for a whole split: (n,) for sequence / regression, per-row arrays for words."""
    return cache.labels(split, spec.name)


def labelled(y: np.ndarray) -> np.ndarray:
    """Boolean mask of the labels that are present (class id >= 0, finite target)."""
    y = np.asarray(y)
    return np.isfinite(y) if y.dtype.kind == "f" else y >= 0


def read_inputs(cache: LayerCache, split: str, spec: LabelTask, source: str, index: list[int],
                rows: Sequence[int] | None = None, *, want_types: bool = False) -> ProbeInputs:
    """Features of ``rows`` of ``split`` (default: all) for task ``spec`` from ``source``."""
    cache.require_split(split)
    rows = np.arange(cache.num_examples(split)) if rows is None else np.asarray(rows, np.int64)
    return read_parts(cache, split, spec, source, index, [rows], want_types=want_types)[0]


def read_parts(cache: LayerCache, split: str, spec: LabelTask, source: str, index: list[int],
               row_sets: Sequence[np.ndarray], *, want_types: bool = False, sample: Sample = None) -> list[ProbeInputs]:
    """Features of several sets of rows of one split (a training part and a validation slice),
    read in one pass over the split.

    ``sample``: of the first set, read only the seeded sample of its labelled examples (words) that
    :func:`~.selection.sample_rows` keeps (the same features as taking it after reading them all); its
    ``n_available`` says how many there were.
    """
    cache.require_split(split)
    row_sets = [np.asarray(r, np.int64) for r in row_sets]
    if spec.kind == "token":
        shared = _SHARED.get()
        if shared is not None:
            return shared.parts(cache, split, spec, index, row_sets, want_types, sample)
        return _read_words(cache, split, spec, index, row_sets, want_types, sample)
    labels = np.asarray(split_labels(cache, split, spec))
    parsed = require_source(cache, source)
    if not parsed.is_pooled:
        every = _token_means(cache, split, index, np.arange(cache.num_examples(split)))  # (n_split, L, D)
        stored = torch.from_numpy(every)
    else:
        # One contiguous read of the split and a selection in memory: reading scattered rows
        # from HDF5 (a validation slice) costs several times more than reading them all. The
        # rows are gathered at the stored width (half the bytes for float16).
        stored = cache.pooled_stored(split, parsed.mode, layers=index)  # (n_split, L, D)
    out = []
    for k, rows in enumerate(row_sets):
        rows = rows[labelled(labels[rows])]
        available = len(rows)
        if k == 0 and sample is not None:
            pick = sample_positions(len(rows), sample)
            rows = rows if pick is None else rows[pick]
        # Each layer's rows gathered at the stored width, then widened into the probes' (L, n, D): contiguous
        # copies only, where one strided widening copy of every layer ran 20 % slower (SST-2, float16).
        at = torch.from_numpy(rows)
        X = torch.empty(stored.shape[1], len(rows), stored.shape[2])  # (L, n, D) float32
        for layer in range(stored.shape[1]):
            X[layer].copy_(stored[:, layer].index_select(0, at))
        y = labels[rows].astype(np.float32 if spec.kind == "regression" else np.int64)
        out.append(ProbeInputs(X.numpy(), y, rows, n_available=available if k == 0 and sample is not None else None))
    return out


def _row_chunks(cache: LayerCache, split: str, rows: np.ndarray) -> list[np.ndarray]:
    """``rows`` cut into runs of about CHUNK_TOKENS tokens (one read each where rows are consecutive)."""
    if len(rows) == 0:
        return []
    total = np.cumsum(cache.lengths(split)[rows])  # tokens up to and including each row
    cuts = np.searchsorted(total, np.arange(CHUNK_TOKENS, total[-1], CHUNK_TOKENS)) + 1
    return [chunk for chunk in np.split(rows, np.unique(cuts)) if len(chunk)]


def _token_means(cache: LayerCache, split: str, index: list[int], rows: np.ndarray) -> np.ndarray:
    """(n, L, D): the mean of each row's stored token states."""
    out = np.empty((len(rows), len(index), cache.hidden_size), np.float32)
    done = 0
    for chunk in _row_chunks(cache, split, rows):
        for states in cache.tokens(split, chunk, layers=index):  # (t, L, D) each
            out[done] = states.mean(0)
            done += 1
    return out


def first_subtokens(word_ids: np.ndarray, n_words: int) -> np.ndarray:
    """Positions of the first sub-token of each word that has a label (word id < ``n_words``) in one row."""
    word_ids = np.asarray(word_ids, np.int64)
    return np.nonzero(batch_first_subtokens(word_ids[None], np.array([n_words]))[0])[0]


def _word_positions(cache: LayerCache, split: str, spec: LabelTask, rows: np.ndarray, starts: np.ndarray,
                    want_types: bool) -> tuple[np.ndarray, ProbeInputs]:
    """(split-wide token position (n,), the words' labels, sentence rows and types) for ``rows``."""
    labels = split_labels(cache, split, spec)
    word_ids = cache.token_arrays(split, "word_ids", rows)
    input_ids = cache.token_arrays(split, "input_ids", rows) if want_types else None
    where, ys, owners, types = [], [], [], [] if want_types else None
    for i, row in enumerate(rows):
        wid = np.asarray(word_ids[i], np.int64)
        pos = first_subtokens(wid, len(labels[row]))
        y = np.asarray(labels[row])[wid[pos]]
        has = labelled(y)
        pos, y = pos[has], y[has]
        where.append(starts[row] + pos)
        ys.append(y)
        owners.append(np.full(len(pos), row, np.int64))
        if want_types:
            ids = input_ids[i]
            for p in pos:  # a word's sub-tokens are the run of positions with its word id
                q = p + 1
                while q < len(wid) and wid[q] == wid[p]:
                    q += 1
                types.append(tuple(int(t) for t in ids[p:q]))
    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)

    return cat(where), ProbeInputs(np.empty(0, np.float32), cat(ys), cat(owners), types)


def _read_words(cache: LayerCache, split: str, spec: LabelTask, index: list[int], row_sets: list[np.ndarray],
                want_types: bool, sample: Sample = None) -> list[ProbeInputs]:
    """Word features of each set of rows: each word's first sub-token, read at its split-wide token position.

    :meth:`~layercache.store.reader.LayerCache.gather_positions` reads every set's words in one pass over the
    split, as ``(L, n_words, D)`` blocks: no per-sentence reads, no (t, L, D) -> (L, t, D) transposes.
    """
    starts = np.concatenate([[0], np.cumsum(cache.lengths(split))])  # (n + 1,) first token of each row
    # Rows in cache order: each part's words come in cache order (their token positions increase).
    parts = [_word_positions(cache, split, spec, np.unique(rows), starts, want_types) for rows in row_sets]
    if sample is not None and parts:
        positions, first = parts[0]
        first.n_available = len(positions)
        pick = sample_positions(len(positions), sample)
        if pick is not None:
            types = None if first.types is None else [first.types[i] for i in pick]
            parts[0] = (positions[pick], ProbeInputs(first.X, first.y[pick], first.rows[pick], types, len(positions)))
    # One read of the split for every part: (L, n, D) float32 each, the words' states as layer_tokens decodes them.
    states = cache.gather_positions(split, [positions for positions, _ in parts], layers=index)
    for (_, part), X in zip(parts, states):
        part.X = X
    return [part for _, part in parts]


SHARE_OF_BUDGET = 0.25
"""Most of the memory budget (:func:`~layercache.core.memory.current_budget` at the block's start) that shared word
features may hold: by default a quarter of half the memory available, the eighth it always was. A split beyond it
is read again by each probe, as without sharing, so sharing never costs more memory than it is worth; the rest
of the budget is the probes' own reads."""


class SharedWordFeatures:
    """Word features of whole splits, read once and handed out, as copies, to every probe that asks.

    A part of a split (a training part, a validation slice) is the words of its rows, taken from the
    whole split's words in cache order: the same values, labels, rows and types as reading the part
    itself. Each probe gets its own copy (probes standardise their features in place) of the layers it asks
    for. Splits are kept while they fit ``budget`` bytes together (default: :data:`SHARE_OF_BUDGET` of the
    memory budget); a split that may not fit is not read whole: each probe reads its own parts, as without sharing.
    """

    def __init__(self, budget: int | None = None) -> None:
        self._splits: dict[tuple, tuple[list[int], ProbeInputs]] = {}
        self.budget = budget if budget is not None else int(SHARE_OF_BUDGET * current_budget())
        self.kept = 0
        """Bytes of word features held."""

    def parts(self, cache: LayerCache, split: str, spec: LabelTask, index: list[int], row_sets: list[np.ndarray],
              want_types: bool, sample: Sample = None) -> list[ProbeInputs]:
        """What :func:`_read_words` gives for ``row_sets`` (and ``sample``), from the split's words read (with their
        types) once; ``index`` may be any of the states kept (a group of layers)."""
        key = (id(cache), str(cache.path), split, spec.name)
        found = self._splits.get(key)
        if found is not None and not set(index) <= set(found[0]):
            found = None  # other states than those kept: read as without sharing
        if found is None:
            if key in self._splits:
                return _read_words(cache, split, spec, index, row_sets, want_types, sample)
            # At most one word per stored token: the split's words cannot take more than this.
            bound = int(np.sum(cache.lengths(split))) * len(index) * cache.hidden_size * 4
            if self.kept + bound > self.budget:  # beyond the budget: each probe reads its own parts
                return _read_words(cache, split, spec, index, row_sets, want_types, sample)
            every = _read_words(cache, split, spec, index, [np.arange(cache.num_examples(split))], True)[0]
            found = self._splits[key] = (list(index), every)
            self.kept += every.X.nbytes
        kept, every = found
        layers = [kept.index(i) for i in index]
        out = []
        for k, rows in enumerate(row_sets):
            pick = np.flatnonzero(np.isin(every.rows, rows))  # the rows' words, in cache order
            available = None
            if k == 0 and sample is not None:
                available = len(pick)
                chosen = sample_positions(len(pick), sample)
                pick = pick if chosen is None else pick[chosen]
            types = [every.types[i] for i in pick] if want_types else None
            X = every.X[:, pick] if layers == list(range(len(kept))) else every.X[np.ix_(layers, pick)]
            out.append(ProbeInputs(np.ascontiguousarray(X), every.y[pick], every.rows[pick], types, available))
        return out


_SHARED: ContextVar[SharedWordFeatures | None] = ContextVar("shared_word_features", default=None)


@contextmanager
def sharing_word_features(budget: int | None = None) -> Iterator[SharedWordFeatures]:
    """Within the block, every probe reads a token task's word features of a split once, not once per probe.

    The probe report wraps each task in it (the word states of a large token split take seconds to
    gather); the scores are the same as without it. The features are freed when the block ends. They
    hold at most ``budget`` bytes (default: a share of the memory available, :class:`SharedWordFeatures`).
    """
    shared = SharedWordFeatures(budget)
    token = _SHARED.set(shared)
    try:
        yield shared
    finally:
        _SHARED.reset(token)


MOMENT_ROWS = 1024
"""Rows summed in float32 (torch's cascade summation) before the runs' sums are added in float64
(:func:`layer_moments`): torch's reductions into float64 do not vectorise (SST-2's 7 x 6,228 x 384: 48 ms against 3)."""


def _row_sums(X: torch.Tensor) -> torch.Tensor:
    """(..., n, D) float32 -> (..., D) float64 sums over the rows: float32 runs of MOMENT_ROWS, added in float64."""
    if X.shape[-2] == 0:
        return torch.zeros(*X.shape[:-2], X.shape[-1], dtype=torch.float64)
    return torch.stack([run.sum(-2) for run in X.split(MOMENT_ROWS, dim=-2)]).double().sum(0)


def layer_moments(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per layer and dimension mean and std (L, D) of X (L, n, D), the runs' sums accumulated in float64.

    What every probe standardises its features with (the training data's own moments). In torch, on every thread the
    computing call allows (numpy's reductions run on one): SST-2's 7 x 6,228 x 384 in 18 ms against numpy's 48. The
    mean sums each row's difference from the first row, so a dimension whose mean is far from zero next to its
    spread (a "massive activation") keeps the precision of its spread, not of its mean.
    """
    Xt = torch.from_numpy(X)
    L, n, D = Xt.shape
    mean = torch.zeros(L, D, dtype=torch.float64)
    var = torch.zeros_like(mean)
    for layer, block in enumerate(Xt):  # one layer at a time: no (L, n, D) temporary
        if n == 0:
            continue
        shift = block[0]  # (D,)
        mean[layer] = shift.double() + _row_sums(block - shift) / n
        var[layer] = _row_sums((block - mean[layer].float()).square_()) / n
    return mean.numpy(), var.sqrt_().numpy()


def input_moments(cache: LayerCache, split: str, spec: LabelTask, source: str, index: Sequence[int],
                  X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std (L, D) a probe standardises its inputs ``X`` (L, n, D) with.

    Word states of a token task use the cache's per-layer statistics of ``split`` (over every
    stored token, computed while writing); anything else, the inputs' own moments
    (:func:`layer_moments`).
    """
    if source == "tokens" and spec.kind == "token":
        stats = cache.layer_stats(split)
        return stats["mean"][index], stats["std"][index]
    return layer_moments(X)


def check_feature_arrays(X, y, xname: str = "X", yname: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """``X`` and ``y`` as arrays, after refusing, in one sentence each, features that are not (n, layers, dim) and
    targets that are not one per row of ``X``; what ``y`` may hold is the caller's to check."""
    X, y = np.asarray(X), np.asarray(y)
    if X.ndim != 3:
        raise ConfigError(f"{xname} must have shape (n, layers, dim), got {X.shape}.")
    if y.ndim != 1 or len(y) != len(X):
        raise ConfigError(f"{yname} must have shape ({len(X)},) to match {xname}, got {y.shape}.")
    return X, y


def check_solver_params(C_grid, max_iter, seed, tol) -> np.ndarray:
    """The ascending grid of ``C`` (float64) after refusing, in one sentence each, settings the solver cannot use.

    ``C_grid`` may be one number or a list of positive numbers; ``max_iter`` a positive integer,
    ``seed`` a non-negative integer, ``tol`` a positive number.
    """
    Cs = check_c_grid(C_grid)
    if not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ConfigError(f"max_iter must be a positive integer, got {max_iter!r}.")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}.")
    if not (isinstance(tol, (int, float)) and tol > 0):
        raise ConfigError(f"tol must be a positive number, got {tol!r}.")
    return np.asarray(Cs, np.float64)


def usable_scale(scale: np.ndarray) -> np.ndarray:
    """``scale`` (L, D) as float32, with 1 for a constant dimension (which standardising then only centres)."""
    return np.where(np.asarray(scale) > 1e-12, scale, 1.0).astype(np.float32)


def standardise(X: np.ndarray, mean: np.ndarray, scale: np.ndarray, names: Sequence[str],
                split: str | None = None) -> np.ndarray:
    """``(x - mean) / scale`` in place on ``X`` (L, n, D) float32; refuses a layer whose states are not finite.

    ``names`` name the layers and ``split`` the split in the refusal. In torch, on every thread the computing call
    allows: the same bits as numpy's (an elementwise subtraction and division), in half the time on 2 threads (SST-2:
    26 against 48 ms, the finite check included).
    """
    Xt = torch.from_numpy(X)  # the same memory: standardised in place
    Xt.sub_(torch.from_numpy(np.asarray(mean, np.float32)).unsqueeze(1))
    Xt.div_(torch.from_numpy(usable_scale(scale)).unsqueeze(1))
    # A sum per layer and dimension: NaN or inf anywhere makes it non-finite. Huge finite states could overflow a
    # float32 sum too, so a non-finite sum is confirmed element by element before a layer is refused.
    suspect = np.flatnonzero(~torch.isfinite(Xt.sum(1)).all(1).numpy()) if Xt.numel() else []
    for layer in [i for i in suspect if not bool(torch.isfinite(Xt[i]).all())][:1]:
        where = f" of split {split!r}" if split else ""
        raise CacheError(f"The states of {names[layer]}{where} are not finite (NaN or inf); "
                         f"re-extract with {option('storage_dtype', 'bfloat16')} or float32.")
    return X
